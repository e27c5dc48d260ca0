-- acquire with fencing, round 2: while KEYS[1] still holds this holder's value
-- ARGV[1], raise the fence counter KEYS[2] to at least the candidate token
-- ARGV[2]. Returns 1 when confirmed, 0 when the key is no longer ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
