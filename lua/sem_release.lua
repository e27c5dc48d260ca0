-- release a permit (sem.lua before it): while slot ARGV[2] of KEYS[1] is
-- held by ARGV[1] (live or not), free it; the hash goes with its last
-- live holder, and its limit with it. Returns 1 when it freed the slot.
if redis.pcall('HGET', k, 'v' .. s) ~= ARGV[1] then
  return 0
end
redis.call('HDEL', k, 'v' .. s, 'e' .. s)
if live() == 0 then
  redis.call('DEL', k)
end
return 1
