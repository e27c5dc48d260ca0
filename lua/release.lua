-- release: delete KEYS[1] while it holds this holder's value ARGV[1] (or a
-- hand-off to the releasing Lock call, below), then hand the key on to the
-- first call waiting for it.
--
-- The master reads this script's bytes on every call (it goes with EVAL,
-- see node.go): the code is kept short, its names too, and the comments
-- (stripped before sending) say what they are.
--
-- An owned lock's key (a hash, see hold.lua) is not ours: GET's WRONGTYPE
-- error is a refusal. Any other error (an ACL refusal) stays an error.
local k, q = KEYS[1], KEYS[2]
local v = P('GET', k)
if type(v) == 'table' and v.err and not v.err:find('WRONGTYPE', 1, true) then
  return v
end
-- q: the key's queue of waiting Lock calls, a sorted set by place (the
-- time the call started, so that every master keeps them in the same
-- order). ch: the releasing Redlock's channel ('' when it has none). pl:
-- the place to queue it at ('0': it does not queue).
--
-- A call that waits for a wake-up (fenced and owned locks) queues as its
-- Redlock's channel, one entry per Redlock: this release takes it off and,
-- with a place, queues it again after the wake-up below. A call that
-- waits for the key to be handed to it (plain locks) queues as
-- 'channel|hand|ttl|reg' (handoff.lua): told, the master sets the key to
-- hand#reg for ttl in this same script, so the call holds it without
-- another request.
local ch, pl, n, woke = ARGV[2], ARGV[3], 0, 0
if v == ARGV[1] then
  n = redis.call('DEL', k)
end
if ch ~= '' then
  P('ZREM', q, ch)
end
-- The first call queued is told (handon.lua), skipping the releasing
-- Redlock's own: it wakes its own goroutines itself.
if n == 1 then
  woke = handon(k, q, ch)
end
if pl ~= '0' then
  P('ZADD', q, pl, ch)
  P('PEXPIRE', q, 60000)
end
return n + woke
