-- release: delete KEYS[1] only while it still holds this holder's value
-- ARGV[1] (or the calling Lock call's hand-off value ARGV[4]), then hand the
-- key on to a waiting Redlock (see below).
--
-- An owned lock's key (a hash, see hold.lua) is not ours: GET's WRONGTYPE
-- error is a refusal. Any other error (an ACL refusal) stays an error.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err and not string.find(v.err, 'WRONGTYPE', 1, true) then
  return v
end
-- A Lock call that waits for a hand-off (ARGV[4] its hand-off value, not
-- '') also deletes the key where it was handed to it: the key then holds
-- hand .. '#' .. reg, reg the registration it was handed under. A new
-- registration (ARGV[5] not '0') deletes only those under earlier ones, so
-- that a registration that lands late or twice never deletes a hand-off
-- made under a later one, which the call may count as held.
local hand, reg = ARGV[4] or '', tonumber(ARGV[5] or '0') or 0
local mine = v == ARGV[1]
if not mine and hand ~= '' and type(v) == 'string' and string.sub(v, 1, #hand + 1) == hand .. '#' then
  local j = tonumber(string.sub(v, #hand + 2))
  mine = j ~= nil and (reg == 0 or j < reg)
end
local n = 0
if mine then
  n = redis.call('DEL', KEYS[1])
end
-- Wake-ups and hand-offs (wake.go). KEYS[2] is the key's queue of waiting
-- Lock calls, a sorted set by their place (the time the call started, so
-- that every master keeps them in the same order). ARGV[2] is the releasing
-- Redlock's channel ('' when it has none), ARGV[3] the place of the Lock
-- call releasing ('0': none).
--
-- A call that waits for a wake-up queues as its Redlock's channel, one entry
-- per Redlock (fenced and owned locks). A call that waits for the key to be
-- handed to it queues as 'channel|hand|ttl|reg': told, the master sets the
-- key to the call's value ARGV[4] and reg for its TTL ARGV[6] in this same
-- script, so the call holds it without another request. reg (ARGV[5]) numbers the
-- call's registrations: the hand-off tells it which one the key was handed
-- under, and the call measures the lock's validity from the moment it sent
-- that one (it reached this master before the key was set).
--
-- pcall: a user without the queue or publish commands gets no wake-ups,
-- never an error. Returns 1 when the key was deleted, plus 2 when a waiting
-- call was told (woken or handed the key).
local ch, place = ARGV[2] or '', ARGV[3] or '0'
local requeue = place ~= '0' and (hand == '' or reg ~= 0)
if ch ~= '' then
  if hand == '' then
    redis.pcall('ZREM', KEYS[2], ch)
  elseif place ~= '0' then
    -- This call's registrations (all at its place).
    local mine = redis.pcall('ZRANGEBYSCORE', KEYS[2], place, place)
    local prefix = ch .. '|' .. hand .. '|'
    if type(mine) == 'table' then
      for _, m in ipairs(mine) do
        if string.sub(m, 1, #prefix) == prefix then
          redis.pcall('ZREM', KEYS[2], m)
        end
      end
    end
  end
  if requeue and hand ~= '' then
    -- Queued before the hand-off below, so that a call that is first gets
    -- the key it just freed back under its new registration.
    redis.pcall('ZADD', KEYS[2], place, ch .. '|' .. hand .. '|' .. ARGV[6] .. '|' .. ARGV[5])
    redis.pcall('PEXPIRE', KEYS[2], 60000)
  end
end
local woke = 0
-- A call that queues for a hand-off while the key is free (its holder
-- released it after the call's attempt was refused) would wait for a
-- release that does not come: the key is handed at once, as if freed now.
if n == 1 or (v == false and requeue and hand ~= '') then
  -- The first call queued, skipping the releasing Redlock's other calls
  -- (it wakes its own goroutines itself), unless this release queued a
  -- hand-off. One that nobody listens for any more (its process died) is
  -- dropped, and the next is told.
  local q = redis.pcall('ZRANGE', KEYS[2], 0, 15)
  local tried = 0
  if type(q) ~= 'table' then
    q = {}
  end
  for _, m in ipairs(q) do
    if tried == 8 then
      break
    end
    local c, h, ttl, r = string.match(m, '^([^|]*)|([^|]+)|(%d+)|(%d+)$')
    if not c then
      c = m
    end
    if c ~= ch or (requeue and hand ~= '') then
      tried = tried + 1
      local msg = 'w' .. KEYS[1]
      local set = true
      if h then
        msg = 'h' .. h .. '|' .. r .. '|' .. KEYS[1]
        set = redis.pcall('SET', KEYS[1], h .. '#' .. r, 'PX', ttl)
        set = type(set) == 'table' and set.ok == 'OK'
      end
      if set then
        local got = redis.pcall('PUBLISH', c, msg)
        if type(got) == 'number' and got > 0 then
          if h then
            redis.pcall('ZREM', KEYS[2], m)
          end
          woke = 2
          break
        end
        if h then
          redis.call('DEL', KEYS[1])
        end
      end
      redis.pcall('ZREM', KEYS[2], m)
    end
  end
end
if requeue and hand == '' then
  redis.pcall('ZADD', KEYS[2], place, ch)
  redis.pcall('PEXPIRE', KEYS[2], 60000)
end
return n + woke
