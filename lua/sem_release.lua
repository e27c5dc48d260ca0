-- release a permit (handon.lua before it; it reads the hash as sem.lua
-- describes it, and needs none of its routines): while slot ARGV[2]
-- of KEYS[1] is held by ARGV[1] (live or not), free it, and wake the first
-- call waiting for a permit in KEYS[2], the queue, skipping those of the
-- releasing Redlock's channel ARGV[3], as release.lua does for a mutex: a
-- permit is never handed, only woken for (ttl 0 in the queue), told the
-- slot freed (handon.lua's tag), which it asks for first. ARGV[4]
-- '1': a failed attempt's rollback. Returns 0, 1 (freed) or 3 (and woke).
-- The hash and its limit stay until its PEXPIRE (its latest hold's end):
-- a vote finds no live holder then and stores its own limit.
--
-- With ARGV[5], the Unlock of a permit whose call waited (withdraw.lua and
-- queue.lua before this file) takes the call's registrations off the queue first:
-- those of hand-off value ARGV[5] at place ARGV[6], as handoff.lua's
-- withdrawal does, whether or not the slot is still the holder's. With
-- ARGV[7] and ARGV[8] too, it queues the call again, as registration
-- ARGV[8] at place ARGV[7], behind the call it woke, when it woke one:
-- for the Redlock's next Acquire, which then waits its turn without a
-- request (handoff.lua's Unlock, ARGV[7] '1' there). The Unlock is one
-- request per master.
local k, s, ch = KEYS[1], ARGV[2], ARGV[3]
local me = ARGV[5] and ch .. '|' .. ARGV[5] .. '|'
if me then
  withdraw(KEYS[2], me, ARGV[6], 0)
end
if redis.pcall('HGET', k, 'v' .. s) ~= ARGV[1] then
  return 0
end
redis.call('HDEL', k, 'v' .. s, 'e' .. s)
local woke = handon(k, KEYS[2], ch, ARGV[4] == '1', '/' .. s)
if woke == 2 and ARGV[7] then
  queue(KEYS[2], ARGV[7], me, ARGV[8])
end
return 1 + woke
