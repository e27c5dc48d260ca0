-- acquire with fencing, round 2: while KEYS[1] still holds this holder's value
-- ARGV[1], raise the fence counter KEYS[2] to at least the candidate token
-- ARGV[2]. Returns 1 when confirmed, 0 when the key is no longer ours: then
-- the counter is left alone, because the key may already be gone and a later
-- holder's round 1 may already have read the counter.
--
-- ARGV[2] is written as sent (a decimal integer below 2^53, from round 1), so
-- no number is converted back to a string here. v is KEYS[1]'s (get.lua).
--
-- The counter is written even when it is already at least ARGV[2] (then with
-- the value it holds): a WAIT after this script (WithReplicaConfirm) waits
-- for the connection's latest write, and since Redis 7.2 a script that
-- writes nothing leaves that at the connection's previous write — none, on a
-- connection opened after round 1's was dropped. Written, this round's write
-- comes after round 1's in the master's one replication stream, so the
-- replicas that confirm it have round 1's key and counter too.
if v ~= ARGV[1] then
  return 0
end
local raw = redis.call('GET', KEYS[2])
local c = tonumber(raw or '0')
if not c then
  return redis.error_reply('fence counter ' .. KEYS[2] .. ' holds ' .. tostring(raw) ..
    ', not an integer: it was changed by hand')
end
if not raw or c < tonumber(ARGV[2]) then
  raw = ARGV[2]
end
redis.call('SET', KEYS[2], raw)
return 1
