-- acquire with fencing, round 1: SET KEYS[1] ARGV[1] NX PX ARGV[2]; on success
-- raise the fence counter KEYS[2] to max(counter + 1, this master's TIME in µs)
-- and return it (fence.lua). 0 means the key is taken. The counter is checked
-- before the SET, and never expires. The reply is an integer reply.
local c, err = counter(KEYS[2])
if not c then
  return err
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
return raise(KEYS[2], c)
