-- rw_acquire: an RWMutex hold's vote on one master (rw_state.lua before
-- it; fence.lua too for a fenced writer). ARGV: step name, role ('r'
-- reader, 'w' writer), value, ttl ms, hand ('' none), fenced ('1').
--
-- A reader is admitted while no writer and no claim is live; a writer
-- while no reader and no other writer is live. A writer refused here
-- places (or renews) its waiting call's claim 'c'..hand for ttl; admitted,
-- it drops it. Returns 0 when refused, else 1, or the fence token
-- (fence.lua) for a fenced writer.
local k, role, hd = KEYS[1], ARGV[2], ARGV[5]
local f, at = role .. ARGV[3], now + ARGV[4]
local r, w, c, l = scan(k, f)
if role == 'r' and (w or c > 0) or role == 'w' and (r > 0 or w) then
if role == 'w' and hd ~= '' then
C('HSET', k, 'c' .. hd, string.format('%.0f', at))
expire(k, math.max(l, at))
end
return 0
end
local token = 1
if ARGV[6] == '1' then
local n, err = counter(FK)
if not n then
return err
end
token = raise(FK, n)
end
C('HSET', k, f, string.format('%.0f', at))
if hd ~= '' then
C('HDEL', k, 'c' .. hd)
r, w, c, l = scan(k, f)
end
expire(k, math.max(l, at))
return token
