-- restart gate: gate(ms) is how many ms until this master's process has
-- been up ms (0: its votes count), nil when INFO tells no uptime. A master
-- whose process started less than the gate ago gets no vote, whatever it
-- restored from disk (an RDB snapshot or an AOF): the evidence is the
-- running process's own uptime, read from INFO every time, never a key
-- that a snapshot could bring back. uptime_in_seconds is the difference of
-- two whole seconds (now and the start, each truncated), and the start is
-- stamped by time(NULL), the coarse wall clock, which lags the clock TIME
-- reads by up to a kernel tick: it reads up to 1 s and a tick high. Two
-- seconds less are counted, and the gate ends late, never early.
local function gate(ms)
  -- First a bound that costs the master a tenth of INFO: LASTSAVE is
  -- when the process last saved, or when it started (never from disk), so
  -- the process has been up at least since then, less the second both
  -- whole-second clocks may lose and the tick time(NULL) may lag: two
  -- seconds. It opens the gate for any master that
  -- did not save within the gate; after a save, INFO tells. pcall: a user
  -- whose ACL lacks +lastsave still gets INFO's answer.
  local l = redis.pcall('LASTSAVE')
  if type(l) == 'number' and (tonumber(redis.call('TIME')[1]) - l - 2) * 1000 >= ms then
    return 0
  end
  -- A plain find, then the digits where it ended: 2 µs of the ~11 µs a
  -- gated vote costs the master less than one pattern over the whole
  -- section (redis-benchmark, INFO commandstats).
  local s = redis.call('INFO', 'server')
  local i = string.find(s, 'uptime_in_seconds:', 1, true)
  local up = i and tonumber(string.match(s, '^%d+', i + 18))
  if not up then
    return nil
  end
  local left = ms - (up - 2) * 1000
  if left > 0 then
    return left
  end
  return 0
end
