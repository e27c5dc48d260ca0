-- rw_acquire: an RWMutex hold's vote on one master (rw_state.lua and
-- rw_claim.lua before it; fence.lua too for a fenced writer). ARGV: step name, role ('r'
-- reader, 'w' writer), value, ttl ms, hand ('' none), fenced ('1'), the
-- call's place in the queues (with hand).
--
-- A reader is admitted while no writer and no claim is live. A writer
-- while no reader and no other writer is live, and no claim but its own
-- call's, or an earlier call's claim (rw_state.lua): writers queued on
-- the masters come in in the order of their places, the same on every
-- master, rather than split the masters' votes between them and fail
-- together. A waiting writer's attempt places (or renews) its call's
-- claim for ttl on every master it reaches, refused or admitted: an
-- admitted vote may be rolled back (the attempt missed its quorum), and
-- the claim must keep new readers out there too. The call's withdrawal
-- (its give-up, or its lock's Unlock: rw_queue.lua) drops it. Returns 0
-- when refused, else 1, or the fence token (fence.lua) for a fenced
-- writer.
local k, role, hd = KEYS[1], ARGV[2], ARGV[5]
local f, at = role .. ARGV[3], now + ARGV[4]
local ms, mine = string.format('%.0f', at), nil
if role == 'w' and hd ~= '' then
mine = claim(ARGV[7], hd)
C('HSET', k, mine, ms)
end
local r, w, c, l, _, fc = scan(k, f)
if role == 'r' and (w or c > 0) or role == 'w' and (r > 0 or w or fc and fc ~= mine) then
if mine then
expire(k, math.max(l, at))
end
return 0
end
local token = 1
if ARGV[6] == '1' then
local n, err = counter(FK)
if not n then
if mine then
expire(k, math.max(l, at)) -- the claim's
end
return err
end
token = raise(FK, n)
end
C('HSET', k, f, ms)
expire(k, math.max(l, at))
return token
