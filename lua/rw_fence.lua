-- rw_fence: a fenced writer's second round on one master (fence.lua and
-- rw_state.lua before it). ARGV: step name, role, value, token: while the
-- writer's hold is live, raise the counter to at least token, as
-- raise_fence.lua does (written even when it is already there: a WAIT
-- after it covers round 1's write). Returns 1, or 0.
local k, role, value = KEYS[1], ARGV[2], ARGV[3]
local f = role .. value
if (tonumber(redis.call('HGET', k, f)) or -1) < now then
  return 0
end
local n, err = counter(FK)
if not n then
  return err
end
if n < tonumber(ARGV[4]) then
  redis.call('SET', FK, ARGV[4])
else
  redis.call('SET', FK, string.format('%.0f', n))
end
return 1
