-- rw_claim: the name of a waiting RWMutex writer's claim (rw_state.lua),
-- for the steps that place or drop one (rw_acquire.lua, rw_queue.lua).
--
-- claim is the field of the claim of the waiting call at place pl (a
-- decimal string, in µs) with hand-off value hd: the place in 16 digits
-- first, so that the least name is the earliest call on every master.
local function claim(pl, hd)
return 'c' .. string.format('%016.0f', tonumber(pl) or 0) .. '|' .. hd
end
