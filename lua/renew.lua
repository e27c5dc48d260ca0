-- renew: what auto-extend sends after a renewal that a quorum of masters
-- holding the lock's value confirmed, when some master refused it. Where
-- KEYS[1] holds this holder's value ARGV[1], reset its TTL to ARGV[2] ms,
-- as extend.lua does; where KEYS[1] does not exist (the master restarted
-- empty, or a contender that won it in a split acquire rolled back), set
-- it to ARGV[1] for ARGV[2] ms. Another value, or a hash (an owned lock's
-- key: GET's WRONGTYPE), is a refusal; any other error (an ACL refusal)
-- stays an error. Why it is safe: "Renewals and lost locks" in
-- docs/internals.md.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err and not string.find(v.err, 'WRONGTYPE', 1, true) then
  return v
end
if v == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
