-- fence: the fence counter's two steps, written once. node.go puts this
-- file in front of the scripts that take a token (acquire_fenced.lua,
-- hold.lua).
--
-- counter(kc) reads the counter kc; a counter that is not an integer in
-- [0, 2^53) (changed by hand) gives nil and an error reply, checked before
-- the key is taken. Lua numbers are doubles: integers are exact only below
-- 2^53 (a µs timestamp stays below it until the year 2255); past it,
-- counter + 1 would round back to counter.
--
-- raise(kc, c) sets the counter kc, read as c, to max(c + 1, this master's
-- TIME in µs) and returns it. The clock floor keeps tokens increasing when a
-- master restarts empty (its counter would start again at 0). Numbers are
-- written with %.0f: Lua's default number-to-string conversion keeps only
-- 14 digits, and a µs timestamp has 16.
local function counter(kc)
  local raw = redis.call('GET', kc)
  local c = tonumber(raw or '0')
  if not c or c ~= math.floor(c) or c < 0 or c >= 9007199254740991 then
    return nil, redis.error_reply('fence counter ' .. kc .. ' holds ' .. tostring(raw) ..
      ', not an integer in [0, 2^53-1): it was changed by hand')
  end
  return c
end

local function raise(kc, c)
  local t = redis.call('TIME')
  local n = math.max(c + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', kc, string.format('%.0f', n))
  return n
end
