-- acquire behind the restart gate (gate.lua runs first): SET KEYS[1]
-- ARGV[1] NX PX ARGV[2]; 1 when the key was set, 0 when it is taken. An
-- ungated acquire is the SET alone.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
