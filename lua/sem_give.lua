-- sem_give: a permit's hand-off, written once (sem.lua before it, whose
-- now, holder and live it uses): handon.lua's give and back for the
-- scripts that free a slot or queue a waiting call (sem_release.lua, and
-- handoff.lua behind sem_free.lua).
--
-- give(k, v, t) hands the slot a release freed (freed, which
-- sem_release.lua sets) of the semaphore k to the value v ('hand#reg',
-- where hand ends in '/' and the limit its call asks under, see
-- semaphore.go) for ttl ms, when the call waits for that slot, and returns
-- the tag the call is told with, ':' and the slot, and 'h'. t is the
-- entry's ttl field, ttl * 64 + the slot the call waits for: every call
-- waits for one slot, and is handed only that one, the same on every
-- master, whatever order releases of several slots come in there (a
-- call handed a free slot each would split its quorum). A call that waits
-- for another slot stays queued (false, and ':' and the freed slot as a
-- hint for handon.lua's wake-up when no call waits for this one). A
-- registration that finds a slot free (freed nil) hands nothing either:
-- which slots are free while releases and rollbacks are under way differs
-- from master to master. It wakes the call, ':' and the lowest free slot
-- as a hint, and 'w': woken by a quorum, the call tries that slot at once.
-- Nothing (nil: a nudge) when no slot is free, when v carries no limit,
-- or when the hash holds live permits given under another limit: one
-- name, one limit (sem_acquire.lua), also for a call queued before the
-- limit changed. back(k, tag, v) frees the slot again where it still
-- holds v.
local freed
give = function(_, v, t)
  local L = v:match('/(%d+)#%d+$')
  local S = redis.pcall('HGET', k, 'L')
  if not L or type(S) == 'table' or S and S ~= L and live() > 0 then
    return nil
  end
  local i, ttl = tonumber(freed), math.floor(tonumber(t) / 64)
  if not i then
    for j = 0, tonumber(L) - 1 do
      if not holder(j) then
        return ':' .. j, 'w'
      end
    end
    return nil
  end
  if i ~= tonumber(t) % 64 then
    return false, i < tonumber(L) and ':' .. i or ''
  end
  if S and S ~= L then
    redis.call('DEL', k)
  end
  if i >= tonumber(L) or holder(i) or type(redis.pcall('HSET', k, 'v' .. i, v, 'e' .. i, now + ttl, 'L', L)) == 'table' then
    return nil -- an error: a migrating cluster slot's source refuses writes
  end
  if redis.call('PTTL', k) < ttl then
    redis.call('PEXPIRE', k, ttl)
  end
  return ':' .. i, 'h'
end
back = function(_, tag, v)
  local i = tag:sub(2)
  if redis.pcall('HGET', k, 'v' .. i) == v then
    redis.call('HDEL', k, 'v' .. i, 'e' .. i)
  end
end
