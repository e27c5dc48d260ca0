-- a fenced permit's round 2 (sem.lua before it): while slot ARGV[2] of
-- KEYS[1] is still held by ARGV[1], raise the fence counter KEYS[2] to at
-- least the candidate token ARGV[3], as raise_fence.lua does for a mutex
-- (and for the same reasons writes it even when it is higher already).
-- Returns 1 when confirmed, 0 when the slot is no longer this holder's.
local v = holder(s)
if v ~= ARGV[1] then
  return 0
end
local raw = redis.call('GET', KEYS[2])
local c = tonumber(raw or '0')
if not c then
  return redis.error_reply('fence counter ' .. KEYS[2] .. ' holds ' .. tostring(raw) ..
    ', not an integer: it was changed by hand')
end
if not raw or c < tonumber(ARGV[3]) then
  raw = ARGV[3]
end
redis.call('SET', KEYS[2], raw)
return 1
