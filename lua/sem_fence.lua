-- a fenced permit's round 2 (sem.lua and raiseto.lua before it): while slot
-- ARGV[2] of KEYS[1] is still held by ARGV[1], raise the fence counter
-- KEYS[2] to at least the candidate token ARGV[3], as raise_fence.lua does
-- for a mutex. Returns 1 when confirmed, 0 when the slot is no longer this
-- holder's.
local v = holder(s)
if v ~= ARGV[1] then
  return 0
end
return raiseto(KEYS[2], ARGV[3])
