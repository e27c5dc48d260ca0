-- release: delete KEYS[1] only while it still holds this holder's value
-- ARGV[1], then hand the key on to a waiting Redlock (see the end).
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
-- Wake-ups (wake.go). KEYS[2] is the key's queue of waiting Redlocks, each
-- named by its wake-up channel; ARGV[2] is this Redlock's channel ('' when
-- it has none) and ARGV[3] '1' when it waits for the key (the rollback of a
-- failed attempt of a Lock that will retry). This Redlock leaves the queue;
-- when the key was freed, the first queued Redlock still listening is woken
-- (one per release: no stampede); a waiting Redlock queues at the end.
-- pcall: a user without these commands gets no wake-ups, never an error.
if ARGV[2] ~= '' then
  redis.pcall('LREM', KEYS[2], 0, ARGV[2])
end
if n == 1 then
  for _ = 1, 8 do
    local w = redis.pcall('LPOP', KEYS[2])
    if type(w) ~= 'string' then
      break
    end
    local got = redis.pcall('PUBLISH', w, KEYS[1])
    if type(got) == 'number' and got > 0 then
      break
    end
  end
end
if ARGV[3] == '1' then
  redis.pcall('RPUSH', KEYS[2], ARGV[2])
  redis.pcall('PEXPIRE', KEYS[2], 60000)
end
return n
