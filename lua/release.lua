-- release: delete KEYS[1] only while it still holds this holder's value ARGV[1].
-- An owned lock's key (a hash, see hold.lua) is not ours: GET's WRONGTYPE
-- error is a refusal. Any other error (an ACL refusal) stays an error.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err and not string.find(v.err, 'WRONGTYPE', 1, true) then
  return v
end
if v == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
