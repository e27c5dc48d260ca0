-- rw_extend: reset an RWMutex hold's expiry on one master while it is
-- live (rw_state.lua before it). ARGV: step name, role, value, ttl ms,
-- repair ('1'): set it again where it is gone and its role would be
-- admitted now but for claims (auto-extend's renew, as extend.lua's).
-- Returns 1, or 0.
local k, role = KEYS[1], ARGV[2]
local f = role .. ARGV[3]
local r, w, c, last, live = scan(k, f)
if live == 0 and (ARGV[5] ~= '1' or role == 'r' and w or role == 'w' and (r > 0 or w)) then
  return 0
end
local at = now + tonumber(ARGV[4])
C('HSET', k, f, string.format('%.0f', at))
expire(k, math.max(last, at))
return 1
