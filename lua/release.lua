-- release: delete KEYS[1] only while it still holds this holder's value
-- ARGV[1], then hand the key on to a waiting Redlock (see below).
--
-- An owned lock's key (a hash, see hold.lua) is not ours: GET's WRONGTYPE
-- error is a refusal. Any other error (an ACL refusal) stays an error.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err and not string.find(v.err, 'WRONGTYPE', 1, true) then
  return v
end
local n = 0
if v == ARGV[1] then
  n = redis.call('DEL', KEYS[1])
end
-- Wake-ups (wake.go). KEYS[2] is the key's queue of waiting Redlocks, a
-- sorted set of their wake-up channels by their place (the time their Lock
-- call started, so that every master keeps them in the same order); ARGV[2]
-- is this Redlock's channel ('' when it has none) and ARGV[3] its place when
-- it waits for the key ('0' when not: an Unlock, a TryLock's rollback).
-- This Redlock leaves the queue; when the key was freed, the first Redlock
-- of the queue is told (the same one on every master: one attempt per
-- release, no stampede). It stays first until it leaves (its Unlock, or it
-- gave up); one that nobody listens for any more (its process died) is
-- dropped and the next is told. A waiting Redlock queues at its place.
-- pcall: a user without these commands gets no wake-ups, never an error.
-- Returns 1 when the key was deleted, plus 2 when a Redlock was told.
if ARGV[2] ~= '' then
  redis.pcall('ZREM', KEYS[2], ARGV[2])
end
local woke = 0
if n == 1 then
  for _ = 1, 8 do
    local w = redis.pcall('ZRANGE', KEYS[2], 0, 0)
    if type(w) ~= 'table' or #w == 0 then
      break
    end
    local got = redis.pcall('PUBLISH', w[1], KEYS[1])
    if type(got) == 'number' and got > 0 then
      woke = 2
      break
    end
    redis.pcall('ZREM', KEYS[2], w[1])
  end
end
if ARGV[3] ~= '0' then
  redis.pcall('ZADD', KEYS[2], ARGV[3], ARGV[2])
  redis.pcall('PEXPIRE', KEYS[2], 60000)
end
return n + woke
