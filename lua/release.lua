-- release: delete KEYS[1] while it holds this holder's value ARGV[1], then
-- tell the first call waiting for it (handon.lua) in KEYS[2], the key's
-- queue, skipping those of the releasing Redlock's channel ARGV[2] ('' when
-- it has none): its Unlock wakes its own goroutines. ARGV[3] '1': the
-- release is a failed attempt's rollback. Calls register in the
-- queue through handoff.lua.
--
-- Names are short: the master reads the bytes on every EVAL (see script in
-- node.go). v is KEYS[1]'s value (get.lua).
local k = KEYS[1]
if v ~= ARGV[1] then
  return 0
end
redis.call('DEL', k)
return 1 + handon(k, KEYS[2], ARGV[2], ARGV[3] == '1')
