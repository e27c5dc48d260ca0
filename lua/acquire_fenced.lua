-- acquire with fencing, round 1: SET KEYS[1] ARGV[1] NX PX ARGV[2]; on success
-- raise the fence counter KEYS[2] to max(counter + 1, this master's TIME in µs)
-- and return it. 0 means the key is taken.
--
-- The clock floor keeps tokens increasing when a master restarts empty (its
-- counter would start again at 0). The counter never expires.
--
-- Lua numbers are doubles: integers are exact only below 2^53 (a µs timestamp
-- stays below it until the year 2255). The counter is checked before the SET,
-- so a counter that is not such an integer (changed by hand) fails the script
-- without taking the key; past 2^53, counter + 1 would round back to counter.
-- Numbers are written with %.0f: Lua's default number-to-string conversion keeps
-- only 14 digits, and a µs timestamp has 16. The reply is an integer reply.
local raw = redis.call('GET', KEYS[2])
local c = tonumber(raw or '0')
if not c or c ~= math.floor(c) or c < 0 or c >= 9007199254740991 then
  return redis.error_reply('fence counter ' .. KEYS[2] .. ' holds ' .. tostring(raw) ..
    ', not an integer in [0, 2^53-1): it was changed by hand')
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
if c + 1 > n then
  n = c + 1
end
redis.call('SET', KEYS[2], string.format('%.0f', n))
return n
