-- release a permit (handon.lua before it; it reads the hash as sem.lua
-- describes it, and needs none of its routines): while slot ARGV[2]
-- of KEYS[1] is held by ARGV[1] (live or not), free it, and wake the first
-- call waiting for a permit in KEYS[2], the queue, skipping those of the
-- releasing Redlock's channel ARGV[3], as release.lua does for a mutex: a
-- permit is never handed, only woken for (ttl 0 in the queue). ARGV[4]
-- '1': a failed attempt's rollback. Returns 0, 1 (freed) or 3 (and woke).
-- The hash and its limit stay until its PEXPIRE (its latest hold's end):
-- a vote finds no live holder then and stores its own limit.
--
-- With ARGV[5], the Unlock of a permit whose call waited (withdraw.lua
-- before this file) first takes the call's registrations off the queue:
-- those of hand-off value ARGV[5] at place ARGV[6], as handoff.lua's
-- withdrawal does, whether or not the slot is still the holder's. The
-- Unlock is then one request per master, not a withdrawal the release
-- waits behind.
local k, s = KEYS[1], ARGV[2]
if ARGV[5] then
  withdraw(KEYS[2], ARGV[3] .. '|' .. ARGV[5] .. '|', ARGV[6], 0)
end
if redis.pcall('HGET', k, 'v' .. s) ~= ARGV[1] then
  return 0
end
redis.call('HDEL', k, 'v' .. s, 'e' .. s)
return 1 + handon(k, KEYS[2], ARGV[3], ARGV[4] == '1')
