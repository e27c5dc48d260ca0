-- release: delete KEYS[1] only while it still holds this holder's value ARGV[1].
-- pcall: an owned lock's key (a hash, see hold.lua) is not ours, not an error.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
