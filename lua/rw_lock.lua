-- rw_lock: every step of an RWMutex hold on one master, chosen by ARGV[1];
-- ARGV[2] is the hold's role ('r' reader, 'w' writer), ARGV[3] its value.
-- rw_state.lua (before it) reads the state.
--
--   acquire ARGV: ttl ms, hand ('' none), fenced ('1'): a reader is
--           admitted while no writer and no claim is live; a writer while
--           no reader and no other writer is live. A writer refused here
--           places (or renews) its waiting call's claim 'c'..hand for ttl;
--           admitted, it drops it. Returns 0 when refused, else 1, or the
--           fence token (fence.lua) for a fenced writer.
--   fence   ARGV: token: while the writer's hold is live, raise the counter
--           to at least token (as raise_fence.lua). Returns 1, or 0.
--   extend  ARGV: ttl ms, repair ('1'): reset the hold's expiry while it is
--           live; with repair, set it again where it is gone and its role
--           would be admitted now but for claims (auto-extend's renew,
--           as extend.lua's). Returns 1, or 0.
--   release ARGV: wake-up channel, rollback ('1'): drop the hold. Then,
--           with no writer left and no claim, every reader queued is woken;
--           with no reader and no writer left, the first writer queued
--           (handon.lua, skipping the releasing Redlock's own calls).
--           Returns 1 when the hold was live, plus 2 when a call was told.
local k, op, role, value = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local f = role .. value

if op == 'acquire' then
  local at, hd = now + tonumber(ARGV[4]), ARGV[5]
  local r, w, c, last = scan(k, f)
  if role == 'r' and (w or c > 0) or role == 'w' and (r > 0 or w) then
    if role == 'w' and hd ~= '' then
      redis.call('HSET', k, 'c' .. hd, string.format('%.0f', at))
      expire(k, math.max(last, at))
    end
    return 0
  end
  local token = 1
  if ARGV[6] == '1' then
    local n, err = counter(FK)
    if not n then
      return err
    end
    token = raise(FK, n)
  end
  redis.call('HSET', k, f, string.format('%.0f', at))
  if hd ~= '' then
    redis.call('HDEL', k, 'c' .. hd)
    r, w, c, last = scan(k, f)
  end
  expire(k, math.max(last, at))
  return token
end

if op == 'fence' then
  if (tonumber(redis.call('HGET', k, f)) or -1) < now then
    return 0
  end
  local n, err = counter(FK)
  if not n then
    return err
  end
  if n < tonumber(ARGV[4]) then
    redis.call('SET', FK, ARGV[4])
  else
    redis.call('SET', FK, string.format('%.0f', n))
  end
  return 1
end

if op == 'extend' then
  local live = (tonumber(redis.call('HGET', k, f)) or -1) >= now
  local r, w, c, last = scan(k, f)
  if not live and (ARGV[5] ~= '1' or role == 'r' and w or role == 'w' and (r > 0 or w)) then
    return 0
  end
  local at = now + tonumber(ARGV[4])
  redis.call('HSET', k, f, string.format('%.0f', at))
  expire(k, math.max(last, at))
  return 1
end

if op == 'release' then
  local was = (tonumber(redis.call('HGET', k, f)) or -1) >= now and 1 or 0
  redis.call('HDEL', k, f)
  local r, w, c, last = scan(k)
  expire(k, last)
  local rb, woke = ARGV[5] == '1', 0
  if not w and c == 0 and role == 'w' then
    woke = wakeall(RQ, k, rb)
  end
  if not w and r == 0 then
    woke = math.max(woke, handon(k, WQ, ARGV[4], rb))
  end
  return was + woke
end

return redis.error_reply('rw_lock.lua: unknown step ' .. tostring(op))
