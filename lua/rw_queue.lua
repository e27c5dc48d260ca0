-- rw_queue: handoff.lua for an RWMutex's waiting calls (rw_state.lua,
-- rw_claim.lua, withdraw.lua and queue.lua before it): take the call's registrations
-- off its queue, queue it again when asked, and wake it at once when what
-- it waits for is already gone. The masters never hand an RWMutex's key
-- over: they wake its calls, which try (entries 'channel|hand|0|reg').
--
-- ARGV: role ('r': the readers' queue, 'w': the writers'), the Redlock's
-- channel ch, the place pl to queue at ('0': not again), the call's
-- hand-off value hd, its registration rg, the place its registrations are
-- queued at, yield y ('1': wake no one; with a place, queue without
-- waking anyone; without one, the withdrawal of a lock's Unlock or
-- rollback, whose release comes right behind it and wakes whom the
-- lock's state calls for).
--
-- A writer's withdrawal (rg 0: it gave up, or it unlocks) also drops its
-- claim (rw_claim.lua, at the place its registrations are queued at): the
-- one way a claim goes before it expires. Readers it held back are woken
-- when nothing else does; a writer that gives up with no entry left wakes
-- the next (passed, below).
local k, role, ch, pl, hd, rg, y = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[7] == '1'
local q = role == 'r' and RQ or WQ
local me, woke = ch .. '|' .. hd .. '|', 0
local newer, took = withdraw(q, me, ARGV[6], rg)
-- passed: a writer that gives up (no place to queue again, no release
-- behind) with no entry left here: a release took it off (handon.lua), or
-- it never queued here, and it will not take the lock. Where the lock is
-- free of readers and a writer, it wakes the next writer, which would
-- otherwise wait for its backoff (handoff.lua's rule for a mutex's calls).
local passed = rg == 0 and role == 'w' and pl == '0' and took == 0 and not y
if rg == 0 and role == 'w' and (redis.call('HDEL', k, claim(ARGV[6], hd)) == 1 or passed) then
  local r, w, c, last = scan(k)
  expire(k, last)
  if not w and c == 0 and not y then
    woke = wakeall(RQ, k, false)
  end
  if passed and not w and r == 0 then
    woke = math.max(woke, handon(k, WQ, nil, false))
  end
end
if pl ~= '0' and rg ~= 0 and not newer then
  queue(q, pl, me, rg)
  if not y then
    local r, w, c = scan(k)
    if role == 'r' and not w and c == 0 then
      woke = wakeall(q, k, false)
    elseif role == 'w' and not w and r == 0 then
      woke = handon(k, q, nil, false)
    end
  end
end
return woke
