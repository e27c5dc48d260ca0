-- restart gate: how long until this master's votes count again. A master
-- whose process started less than ARGV[1] ms ago gets no vote, whatever it
-- restored from disk (an RDB snapshot or an AOF): the evidence is the
-- running process's own uptime, read from INFO on every gated vote, never
-- a key that a snapshot could bring back. uptime_in_seconds is the
-- difference of two whole seconds (now and the start, each truncated), so
-- it reads up to 1 s high: one second less is counted, and the gate ends
-- late, never early. KEYS[1] is the lock key, not read: it routes this
-- script to the key's shard on a master that is a cluster or a ring.
-- Returns the ms left, 0 when the votes count.
local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
if not up then
  return redis.error_reply('INFO server has no uptime_in_seconds')
end
local left = tonumber(ARGV[1]) - (up - 1) * 1000
if left > 0 then
  return left
end
return 0
