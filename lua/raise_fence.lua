-- acquire with fencing, round 2: while KEYS[1] still holds this holder's value
-- ARGV[1], raise the fence counter KEYS[2] to at least the candidate token
-- ARGV[2] (raiseto.lua). Returns 1 when confirmed, 0 when the key is no
-- longer ours: then the counter is left alone, because the key may already
-- be gone and a later holder's round 1 may already have read the counter.
-- v is KEYS[1]'s (get.lua).
if v ~= ARGV[1] then
  return 0
end
return raiseto(KEYS[2], ARGV[2])
