-- withdraw: a waiting call's withdrawal from its queue, written once.
-- protocol.go, semaphore.go and rwmutex.go put this file in front of
-- handoff.lua, rw_queue.lua and sem_release.lua, after handon.lua (whose P
-- it uses).
--
-- withdraw(q, me, at, rg) takes off queue q the call's registrations: its
-- entries at place at that start with me ('channel|hand|'), those up to
-- registration rg (0: all). A registration that lands late must not take
-- off a later one: it returns true when one newer than rg is there, and
-- how many it took off. The call's registrations are all at its place:
-- only those are read, never the whole queue.
local function withdraw(q, me, at, rg)
  local newer, took = false, 0
  for _, m in ipairs(P('ZRANGEBYSCORE', q, at, at)) do
    if m:sub(1, #me) == me then
      if rg == 0 or (tonumber(m:match('(%d+)$')) or 0) <= rg then
        P('ZREM', q, m)
        took = took + 1
      else
        newer = true
      end
    end
  end
  return newer, took
end
