-- handon: the hand-off, written once. node.go puts this file in front of
-- every script that can free a key (release.lua, handoff.lua, hold.lua).
--
-- handon(k, q, skip, rb) is called once key k was freed on this master. q
-- is the key's queue of waiting Lock calls, a sorted set by place (the time
-- the call started, so that every master keeps them in the same order) of
-- entries 'channel|hand|ttl|reg' (handoff.lua). The first entry not of
-- channel skip (nil: none skipped) is told, at most 8 looked at, and goes:
--   - ttl not 0 (a plain lock's call): the key is set to hand#reg for ttl
--     ms in this same script and the call told ('h' hand|reg|key): it
--     holds the key without a request. A master that does not write the
--     key (the source of a migrating Redis Cluster slot refuses a write,
--     also a script's, to a key it no longer has) hands nothing: it nudges
--     the call ('r', below), which then tries for the key (a redirect
--     away). A 'w' would count as a hand-off;
--   - ttl 0 (a fenced or owned lock's call: its key cannot be handed): the
--     call is woken ('w' hand|reg|key), or with rb true, when what freed
--     the key was a failed attempt's rollback, nudged ('r' hand|reg|key):
--     the votes that failed it (closed restart gates, replicas that did
--     not confirm) may fail the next one too, so the call keeps its
--     backoff's pace rather than trying at once.
-- An entry nobody listens to any more (its process died) is dropped, and
-- the next one told. Returns 2 when someone was told, else 0. tag, when
-- given, follows reg in the message ('hand|reg/tag|key'): what was freed,
-- for the call to ask for (a permit's slot, sem_release.lua).
local P = redis.pcall
local function handon(k, q, skip, rb, tag)
  -- No queue, no one to tell: most releases. From a script EXISTS costs
  -- the master about 0.3 µs, ZRANGE 0.8 (redis-server 7.0).
  if P('EXISTS', q) == 0 then
    return 0
  end
  for _, m in ipairs(P('ZRANGE', q, 0, 7)) do
    local c, h, t, r = m:match('^([^|]*)|([^|]+)|(%d+)|(%d+)$')
    if not c or c ~= skip then
      P('ZREM', q, m)
      local msg, ok = rb and 'r' or 'w', c
      if t ~= '0' and c then
        msg = P('SET', k, h .. '#' .. r, 'PX', t).ok == 'OK' and 'h' or 'r'
      end
      -- A channel ending in '}' is in k's slot (ShardChannel): a cluster's.
      local pub = c and c:sub(-1) == '}' and 'SPUBLISH' or 'PUBLISH'
      if ok and (tonumber(P(pub, c, msg .. h .. '|' .. r .. (tag or '') .. '|' .. k)) or 0) > 0 then
        return 2
      elseif ok and msg == 'h' then
        P('DEL', k)
      end
    end
  end
  return 0
end
