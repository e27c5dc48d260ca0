-- raiseto: a fence counter's second round, written once. protocol.go and
-- semaphore.go put this file in front of raise_fence.lua and sem_fence.lua,
-- which call it once the hold is still theirs.
--
-- raiseto(kc, t) raises the fence counter kc to at least the candidate
-- token t and returns 1, or an error reply when kc is not a number (it was
-- changed by hand). t is written as sent (a decimal integer below 2^53, from
-- round 1), so no number is converted back to a string here.
--
-- The counter is written even when it is already at least t (then with the
-- value it holds): a WAIT after this script (WithReplicaConfirm) waits for
-- the connection's latest write, and since Redis 7.2 a script that writes
-- nothing leaves that at the connection's previous write — none, on a
-- connection opened after round 1's was dropped. Written, this round's
-- write comes after round 1's in the master's one replication stream, so
-- the replicas that confirm it have round 1's key and counter too.
local function raiseto(kc, t)
  local raw = redis.call('GET', kc)
  local c = tonumber(raw or '0')
  if not c then
    return redis.error_reply('fence counter ' .. kc .. ' holds ' .. tostring(raw) ..
      ', not an integer: it was changed by hand')
  end
  if not raw or c < tonumber(t) then
    raw = t
  end
  redis.call('SET', kc, raw)
  return 1
end
