-- release a permit (handon.lua, sem.lua and sem_give.lua before it): while
-- slot ARGV[2] of KEYS[1] is held by ARGV[1] (live or not), free it, and
-- hand it on to the first call waiting for a permit in KEYS[2], the queue
-- (sem_give.lua), or wake that call (ttl 0 in the queue: a call the
-- masters only wake), skipping the calls of the releasing Redlock's
-- channel ARGV[3], as release.lua does for a mutex. ARGV[4] '1': a failed
-- attempt's rollback. Returns 0, 1 (freed) or 3 (and handed on or woke). The hash and its
-- limit stay until its PEXPIRE (its latest hold's end): a vote finds no
-- live holder then and stores its own limit.
if redis.pcall('HGET', k, 'v' .. s) ~= ARGV[1] then
  return 0
end
redis.call('HDEL', k, 'v' .. s, 'e' .. s)
freed = s
return 1 + handon(k, KEYS[2], ARGV[3], ARGV[4] == '1')
