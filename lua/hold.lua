-- owned locks (WithOwner): every step of a hold, chosen by ARGV[1].
--
-- An owned key KEYS[1] is a hash: field 'owner' names the owner, field
-- 'fence' holds the owner's fence token (when fenced), and each hold has a
-- field of its own, named by the hold's random value, holding the moment it
-- expires on this master's clock (ms). The key itself expires with its
-- latest hold, and goes when its last hold is released. A plain lock's key is
-- a string: owned steps refuse it, and plain steps refuse a hash.
--
-- Each step touches only its own hold's field, so a step whose outcome was
-- unknown can be repeated or rolled back without touching another hold.
--
--   enter   ARGV: value, ttl ms, owner, fenced ('1' or '0')
--           take the key, or add a hold when the owner's holds are live.
--           Returns 0 when taken by someone else, else 1 (unfenced) or the
--           owner's fence token: its first hold raises the counter KEYS[2]
--           (fence.lua); later holds get the stored token while it is the
--           counter's value here, else a new one.
--   fence   ARGV: value, token: while the hold is live, raise the counter
--           to at least token and make token the owner's. Returns 1, or 0.
--   extend  ARGV: value, ttl ms: reset the hold's expiry while it is live.
--   release ARGV: value, wake-up channel (KEYS[2]: the key's queue of
--           waiting calls), rollback ('1': of a failed attempt): drop the hold; the key goes with its last
--           hold, and then the first call queued is told as release.lua
--           does. Returns 1 when the hold was live, plus 2 when a call was
--           told. (A waiting owned call queues through handoff.lua.)
--
-- Numbers are written with %.0f (see fence.lua).
local key, op, value = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind = redis.call('TYPE', key).ok

-- A hold is live through the millisecond its field names, as Redis keeps
-- a key through the millisecond its expiry names (it expires a key once
-- now > expiry): the key, made to expire with its latest hold (expire),
-- then never outlives every hold of it, and a master never refuses a
-- plain lock a key whose holds have all ended here.
--
-- live drops the holds that expired from the owned key and returns the
-- latest expiry of those left (0: none).
local function live()
  local f = redis.call('HGETALL', key)
  local last = 0
  for i = 1, #f, 2 do
    if f[i] ~= 'owner' and f[i] ~= 'fence' then
      local at = tonumber(f[i + 1])
      if not at or at < now then
        redis.call('HDEL', key, f[i])
      elseif at > last then
        last = at
      end
    end
  end
  return last
end

-- expire makes the key live as long as its latest hold, or deletes it:
-- PEXPIRE counts from the master's own millisecond, which is now or just
-- before it, so the key lives through last at most (a hold that ends this
-- very millisecond goes with its key at once).
local function expire(last)
  if last > 0 then
    redis.call('PEXPIRE', key, last - now)
  else
    redis.call('DEL', key)
  end
end

-- mine reports whether this hold is live (false on a plain key).
local function mine()
  return kind == 'hash' and (tonumber(redis.call('HGET', key, value)) or 0) >= now
end

if op == 'enter' then
  local ttl, owner, fenced = tonumber(ARGV[3]), ARGV[4], ARGV[5] == '1'
  local last = 0
  if kind == 'hash' then
    last = live()
    if last > 0 and redis.call('HGET', key, 'owner') ~= owner then
      return 0
    end
    if last == 0 then
      redis.call('DEL', key) -- only expired holds were left
    end
  elseif kind ~= 'none' then
    return 0
  end
  local token = 1
  if fenced then
    local c, err = counter(KEYS[2])
    if not c then
      return err
    end
    -- The owner's token, unless it has none yet, or another holder took a
    -- token on this master since it was stored (the counter moved past it;
    -- a stale fence step can also have stored an older one): then a new
    -- one, above every token handed out here.
    token = tonumber(redis.call('HGET', key, 'fence') or '0')
    if not token or token == 0 or token < c then
      token = raise(KEYS[2], c)
      redis.call('HSET', key, 'fence', string.format('%.0f', token))
    end
  end
  redis.call('HSET', key, 'owner', owner, value, string.format('%.0f', now + ttl))
  expire(math.max(last, now + ttl))
  return token
end

if op == 'fence' then
  if not mine() then
    return 0
  end
  local c, err = counter(KEYS[2])
  if not c then
    return err
  end
  -- The counter is written even when it is already at least token, as in
  -- raise_fence.lua: the WAIT after this step then covers round 1's write.
  local token = tonumber(ARGV[3])
  if c < token then
    redis.call('SET', KEYS[2], ARGV[3])
  else
    redis.call('SET', KEYS[2], string.format('%.0f', c))
  end
  -- The owner's token becomes the confirmed one (round 1 stored this
  -- master's own counter, which may be above it): later holds get it.
  redis.call('HSET', key, 'fence', ARGV[3])
  return 1
end

if op == 'extend' then
  if not mine() then
    return 0
  end
  redis.call('HSET', key, value, string.format('%.0f', now + tonumber(ARGV[3])))
  expire(live())
  return 1
end

if op == 'release' then
  local was, woke = mine() and 1 or 0, 0
  if kind == 'hash' then
    redis.call('HDEL', key, value)
    local last = live()
    expire(last)
    if last == 0 then
      -- The key is gone: as in release.lua, the first call queued is told
      -- (handon.lua), skipping this Redlock's own, which its Unlock wakes;
      -- ARGV[4] '1': the release is a failed attempt's rollback.
      woke = handon(key, KEYS[2], ARGV[3], ARGV[4] == '1')
    end
  end
  return was + woke
end

return redis.error_reply('hold.lua: unknown step ' .. tostring(op))
