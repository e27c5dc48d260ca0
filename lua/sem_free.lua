-- a permit's waiting call's registration (sem.lua before it, handoff.lua
-- after it): handoff.lua reads v as the key's value, false when the key is
-- free. For a semaphore it is false when some permit is free here, else
-- 'full', which is no value of a holder: a waiting call for a permit sends
-- no value, its key is never handed, so handoff.lua only queues the call,
-- takes it off, or wakes the first one where a permit is free.
local v = 'full'
local L = redis.pcall('HGET', k, 'L')
if type(L) ~= 'string' or live() < tonumber(L) then
  v = false
end
