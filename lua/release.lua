-- release: delete KEYS[1] only while it still holds this holder's value ARGV[1].
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
