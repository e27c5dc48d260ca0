-- handoff: release.lua for a Lock call that waits, or waited, for the key
-- (handoff.go), and the one script that queues calls: delete KEYS[1] while
-- it holds the call's value ARGV[1] or a hand-off to the call, take the
-- call's registrations off the queue, queue it again when asked, and hand
-- the key on to the first call waiting for it, as release.lua does. An
-- owned lock's call sends it with no value ahead of hold.lua's release.
--
-- Names are short: the master reads the bytes on every EVAL (see script in
-- node.go). v is KEYS[1]'s value (get.lua).
local k, q = KEYS[1], KEYS[2]
-- q: the key's queue of waiting Lock calls (see handon.lua). ch: the
-- releasing Redlock's channel, pl: the place to queue the call at ('0': it
-- does not queue again), hd: the call's hand-off value. The call queues as
-- 'ch|hd|ttl|rg': told, the master sets the key to hd#rg for ttl in this
-- same script, so the call holds it without another request (ttl 0: the
-- call is only woken). rg numbers the call's registrations; the call
-- counts the lock's validity from the moment it sent registration rg (it
-- reached this master before the key was set).
--
-- The call's releases (rollbacks, Unlock, give-up) also delete hand-offs
-- to it; a registration (rg not 0) only those under earlier ones, so that
-- one that lands late or twice never deletes a hand-off the call may
-- count. They take its earlier registrations off the queue; with rg not 0
-- and a place, it queues again: before the hand-off below (so that a call
-- that is first gets back the key it freed), or with ARGV[7] '1' (an
-- Unlock: bh) only behind the call the key was handed to, when it was.
local ch, pl, hd, ttl, rg = ARGV[2], ARGV[3], ARGV[4], ARGV[6], tonumber(ARGV[5])
local n, me = 0, ch .. '|' .. hd .. '|'
if v == ARGV[1] or type(v) == 'string' and v:sub(1, #hd + 1) == hd .. '#'
    and (rg == 0 or (tonumber(v:sub(#hd + 2)) or rg) < rg) then
  n = redis.call('DEL', k)
end
-- Only registrations up to rg are taken off (withdraw.lua): one that lands
-- late must not take off (and then hold the key for) a later one; it does
-- not queue then. The call's registrations are all at its place ARGV[8]
-- (an Unlock moves it behind the next holder, and passes the place it
-- leaves).
local newer, took = withdraw(q, me, ARGV[8], rg)
me = me .. ttl .. '|' .. rg
local rq = pl ~= '0' and rg ~= 0 and not newer
local bh = rq and ARGV[7] == '1'
-- again: this call queues again. A call that queues while the key is free
-- (its holder released it after the call's attempt was refused) would wait
-- for a release that does not come: it queues before the hand-off below
-- and is handed the key at once, as if freed now; so does a call whose
-- release deleted a hand-off to it (under a registration too old to use).
-- A call whose rollback freed its own attempt's key queues after the
-- hand-off: the key goes to the next call, or stays free for its holder's
-- renewals to spread to (extend.lua's renew), rather than straight back to a call
-- that could not take it; but with ARGV[10] '1' (back: other masters were
-- handing the key to the call, and their hand-offs refused its attempt)
-- it queues before, and the key goes to the first call. With ARGV[11] '1'
-- (yield: its Redlock's Unlock just woke another call, which takes the key
-- with an attempt of its own) a registration that finds the key free
-- queues after, and hands nothing on. The hand-off is handon.lua's; it
-- skips the releasing Redlock's calls unless this one queues again.
local again, woke = rq and not bh, 0
local first = again and ARGV[11] ~= '1' and (v ~= ARGV[1] or ARGV[10] == '1')
if first then
  P('ZADD', q, pl, me)
end
-- passed: a call that gives up (rg 0, no place to queue again) and has no
-- entry left here, where the key is free: a release woke it (handon.lua
-- took its entry off), and it will not take the key. It wakes the next
-- call, which would otherwise wait for its backoff.
local passed = rg == 0 and pl == '0' and took == 0 and v == false
if n == 1 or v == false and first or passed then
  -- again: no entry is skipped. A rollback that freed the call's own
  -- attempt only nudges a woken call (handon.lua); so does one that finds
  -- the key free on a master whose restart gate (ARGV[9] ms, '0': none)
  -- is closed: the gate refused the attempt's vote, which wrote nothing,
  -- and will refuse the next one.
  local rb = again and (v == ARGV[1] or v == false and ARGV[9] ~= '0' and gate(tonumber(ARGV[9])) ~= 0)
  woke = handon(k, q, not again and ch or nil, rb)
end
if bh and woke == 2 or again and not first then
  P('ZADD', q, pl, me)
end
if rq then
  P('PEXPIRE', q, 60000)
end
return n + woke
