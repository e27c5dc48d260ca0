-- extend: reset the TTL of KEYS[1] to ARGV[2] ms only while it still holds
-- this holder's value ARGV[1]. An expired key is never re-created, but by
-- a renew (ARGV[3] '1'): what auto-extend sends after a renewal that a
-- quorum of masters holding the lock's value confirmed, when some master
-- refused it. Where KEYS[1] does not exist (the master restarted empty, or
-- a contender that won it in a split acquire rolled back), a renew sets it
-- to ARGV[1] for ARGV[2] ms. Why it is safe: "Renewals and lost locks" in
-- docs/internals.md. v is KEYS[1]'s (get.lua).
if v == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == false and ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
