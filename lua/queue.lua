-- queue: a woken call's registration, written once. semaphore.go and
-- rwmutex.go put this file in front of sem_release.lua and rw_queue.lua,
-- after handon.lua (whose P it uses).
--
-- queue(q, pl, me, rg) queues the call me ('channel|hand|') at place pl as
-- registration rg of a call the masters only wake (ttl 0: an RWMutex's
-- or a Semaphore's; handoff.lua writes the entries of calls that may be
-- handed a mutex's key), and keeps the queue a minute past it.
local function queue(q, pl, me, rg)
  P('ZADD', q, pl, me .. '0|' .. rg)
  P('PEXPIRE', q, 60000)
end
