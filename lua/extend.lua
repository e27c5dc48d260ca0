-- extend: reset the TTL of KEYS[1] to ARGV[2] ms only while it still holds
-- this holder's value ARGV[1]. An expired key is never re-created.
-- pcall: an owned lock's key (a hash, see hold.lua) is not ours, not an error.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
