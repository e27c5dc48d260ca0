-- acquire with fencing, round 1: SET KEYS[1] ARGV[1] NX PX ARGV[2]; on success
-- raise the fence counter KEYS[2] to max(counter + 1, this master's TIME in µs)
-- and return it. 0 means the key is taken.
--
-- The clock floor keeps tokens increasing when a master restarts empty (its
-- counter would start again at 0). The counter never expires.
-- Numbers are written with %.0f: Lua's default number-to-string conversion keeps
-- only 14 digits, and a µs timestamp has 16.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if now > n then
  n = now
end
redis.call('SET', KEYS[2], string.format('%.0f', n))
return n
