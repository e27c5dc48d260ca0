-- sem_hold: a permit's hold, written once (sem.lua before it); in front
-- of the scripts that take or extend a slot (sem_acquire.lua,
-- sem_extend.lua).
--
-- hold(ttl, L) makes ARGV[1] slot s's holder for ttl ms from now, and
-- stores the limit L.
local function hold(ttl, L)
  redis.call('HSET', k, 'v' .. s, ARGV[1], 'e' .. s, now + tonumber(ttl), 'L', L)
  if redis.call('PTTL', k) < tonumber(ttl) then
    redis.call('PEXPIRE', k, ttl)
  end
end
