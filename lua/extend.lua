-- extend: reset the TTL of KEYS[1] to ARGV[2] ms only while it still holds
-- this holder's value ARGV[1]. An expired key is never re-created.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
