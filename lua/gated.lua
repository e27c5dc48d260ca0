-- a gated vote's first step (gate.lua before it): ARGV[#ARGV] is the gate
-- in ms. A master up for less answers the error "GATE <ms left>" and the
-- script does nothing else: no key, counter or hold is written.
do
  local left = gate(tonumber(ARGV[#ARGV]))
  if not left then
    return redis.error_reply('INFO server has no uptime_in_seconds')
  end
  if left > 0 then
    return redis.error_reply('GATE ' .. left)
  end
end
