-- handon: the hand-off, written once. node.go puts this file in front of
-- every script that can free a key (release.lua, handoff.lua, hold.lua).
--
-- handon(k, q, skip) is called once key k was freed on this master. q is
-- the key's queue of waiting Lock calls, a sorted set by place (the time
-- the call started, so that every master keeps them in the same order).
-- The first entry not of channel skip (nil: none skipped) is told, at
-- most 8 looked at:
--   - a Redlock's channel (a fenced or owned lock's waiting calls): it is
--     woken ('w' and the key) and stays queued until its own release;
--   - 'channel|hand|ttl|reg' (a plain lock's waiting call): the key is set
--     to hand#reg for ttl ms in this same script, the entry goes, and the
--     call is told ('h' hand|reg|key): it holds the key without a request.
-- An entry nobody listens to any more (its process died) is dropped, and
-- the next one told. Returns 2 when someone was told, else 0.
local P = redis.pcall
local function handon(k, q, skip)
  for _, m in ipairs(P('ZRANGE', q, 0, 7)) do
    local c, h, t, r = m:match('^([^|]*)|([^|]+)|(%d+)|(%d+)$')
    c = c or m
    if c ~= skip then
      local msg, ok = 'w' .. k, true
      if h then
        msg = 'h' .. h .. '|' .. r .. '|' .. k
        ok = P('SET', k, h .. '#' .. r, 'PX', t).ok == 'OK'
      end
      ok = ok and (tonumber(P('PUBLISH', c, msg)) or 0) > 0
      if h or not ok then
        P('ZREM', q, m)
      end
      if ok then
        return 2
      elseif h then
        P('DEL', k)
      end
    end
  end
  return 0
end
