-- extend a permit (sem.lua before it): while slot ARGV[2] of KEYS[1] is
-- still held by ARGV[1], hold it ARGV[3] ms from now. A renew (ARGV[4]
-- '1', see extend.lua) also takes the slot where it is free, is below the
-- limit ARGV[5], and the hash holds no live holder of another limit.
-- Returns 1 or 0.
local v = holder(s)
if v == ARGV[1] then
  hold(ARGV[3], ARGV[5])
  return 1
end
if not v and ARGV[4] == '1' and tonumber(s) < tonumber(ARGV[5]) then
  local L = redis.call('HGET', k, 'L')
  if L and L ~= ARGV[5] and live() > 0 then
    return 0
  end
  hold(ARGV[3], ARGV[5])
  return 1
end
return 0
