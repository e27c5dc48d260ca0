-- a permit's waiting call's registration (sem.lua and sem_give.lua before
-- it, handoff.lua after it). unhand(hd, rg) is handoff.lua's deletion of
-- the key where it was handed to the call for a semaphore: it frees the
-- slots that hold a hand-off to the call hd under a registration before
-- rg (0: any), and returns 1 when it freed one, else 0. handoff.lua reads
-- v as the key's value, false when the key is free: for a semaphore it is
-- false when some permit is free here, else 'full', which is no value of a
-- holder. A registration then queues the call, takes it off, or hands a
-- free slot to the first call queued (sem_give.lua).
unhand = function(hd, rg)
  local f, n = redis.pcall('HGETALL', k), 0
  if f.err then
    return 0
  end
  for i = 1, #f, 2 do
    local x = f[i + 1]
    if f[i]:sub(1, 1) == 'v' and x:sub(1, #hd + 1) == hd .. '#'
        and (rg == 0 or (tonumber(x:sub(#hd + 2)) or rg) < rg) then
      redis.call('HDEL', k, f[i], 'e' .. f[i]:sub(2))
      n = 1
    end
  end
  return n
end
local v = 'full'
local L = redis.pcall('HGET', k, 'L')
if type(L) ~= 'string' or live() < tonumber(L) then
  v = false
end
