-- rw_wake: waking every reader at once, for the steps that can (rw_release.lua,
-- rw_queue.lua; handon.lua, which defines P, and rw_state.lua before it).
--
-- wakeall wakes every call queued in q (a writer's release wakes the
-- readers together, not one at a time), at most 64 per release: the rest
-- keep their backoff timers. rb: nudge rather than wake (see handon.lua).
-- Returns 2 when someone was told, else 0.
local function wakeall(q, k, rb)
  -- No queue, no one to wake (as handon.lua).
  if P('EXISTS', q) == 0 then
    return 0
  end
  local n = 0
  for _, m in ipairs(P('ZRANGE', q, 0, 63)) do
    P('ZREM', q, m)
    local c, h, r = m:match('^([^|]*)|([^|]+)|%d+|(%d+)$')
    -- A channel ending in '}' is a cluster's, in k's slot (as handon.lua).
    local pub = c and c:sub(-1) == '}' and 'SPUBLISH' or 'PUBLISH'
    if c and (tonumber(P(pub, c, (rb and 'r' or 'w') .. h .. '|' .. r .. '|' .. k)) or 0) > 0 then
      n = 2
    end
  end
  return n
end
