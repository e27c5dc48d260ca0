-- get: KEYS[1]'s value v, read once for every script that compares it with
-- a holder's value. node.go puts this file in front of release.lua,
-- handoff.lua, extend.lua and raise_fence.lua.
--
-- An owned lock's key (a hash, see hold.lua) is not ours: GET's WRONGTYPE
-- error is a refusal. Any other error (an ACL refusal) stays an error.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err and not v.err:find('WRONGTYPE', 1, true) then
  return v
end
