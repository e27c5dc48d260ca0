-- rw_acquire: an RWMutex hold's vote on one master (rw_state.lua before
-- it; fence.lua too for a fenced writer). ARGV: step name, role ('r'
-- reader, 'w' writer), value, ttl ms, hand ('' none), fenced ('1').
--
-- A reader is admitted while no writer and no claim is live; a writer
-- while no reader and no other writer is live. A waiting writer's attempt
-- places (or renews) its call's claim 'c'..hand for ttl on every master it
-- reaches, refused or admitted: an admitted vote may be rolled back (the
-- attempt missed its quorum), and the claim must keep new readers out
-- there too. The call's withdrawal (its give-up, or its lock's Unlock:
-- rw_queue.lua) drops it. Returns 0 when refused, else 1, or the fence
-- token (fence.lua) for a fenced writer.
local k, role, hd = KEYS[1], ARGV[2], ARGV[5]
local f, at = role .. ARGV[3], now + ARGV[4]
local r, w, c, l = scan(k, f)
local ms = string.format('%.0f', at)
if role == 'w' and hd ~= '' then
C('HSET', k, 'c' .. hd, ms)
end
if role == 'r' and (w or c > 0) or role == 'w' and (r > 0 or w) then
if role == 'w' and hd ~= '' then
expire(k, math.max(l, at))
end
return 0
end
local token = 1
if ARGV[6] == '1' then
local n, err = counter(FK)
if not n then
if hd ~= '' then
expire(k, math.max(l, at)) -- the claim's
end
return err
end
token = raise(FK, n)
end
C('HSET', k, f, ms)
expire(k, math.max(l, at))
return token
