-- restart gate: how long until this master's votes count again. A master
-- that restarted (empty or not) votes only once it has been up ARGV[1] ms.
-- KEYS[1] caches its start time in ms, by its own clock (TIME less the
-- uptime INFO reports, in whole seconds: an estimate later than the real
-- start, so the gate never ends early); a restart without data loses the
-- cache with the keys, and a missing or unreadable one is made again. It
-- expires after 10 minutes. Returns the ms left, 0 when the votes count.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = tonumber(redis.call('GET', KEYS[1]) or '')
if not start then
  local up = string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')
  start = now - tonumber(up) * 1000
  redis.call('SET', KEYS[1], string.format('%.0f', start), 'PX', 600000)
end
local left = start + tonumber(ARGV[1]) - now
if left > 0 then
  return left
end
return 0
