-- rw_release: drop an RWMutex hold on one master (handon.lua and
-- rw_state.lua before it). ARGV: step name, role, value, the releasing
-- Redlock's wake-up channel, rollback ('1': of a failed attempt). Then,
-- with no writer left and no claim, every reader queued is woken; with no
-- reader and no writer left, the first writer queued (handon.lua, skipping
-- the releasing Redlock's own calls, which its Unlock wakes). Returns 1
-- when the hold was live, plus 2 when a call was told. A hold that is
-- gone leaves the key as it was (scan dropped what expired); the last one
-- deletes the key without an HDEL first.
local k, role = KEYS[1], ARGV[2]
local f, rb, woke = role .. ARGV[3], ARGV[5] == '1', 0
local r, w, c, l, at = scan(k, f)
local was = at > 0 and 1 or 0
if at > 0 then
if l > 0 then
C('HDEL', k, f)
end
expire(k, l)
end
if not w and c == 0 and role == 'w' then
woke = wakeall(RQ, k, rb)
end
if not w and r == 0 then
woke = math.max(woke, handon(k, WQ, ARGV[4], rb))
end
return was + woke
