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
-- the next one told. Returns 2 when someone was told, else 0.
--
-- A semaphore's key is a hash of slots, and its hand-off one slot of it:
-- its scripts set give(k, v, t) to hand k to value v for the entry's ttl
-- field t in place. It returns the tag the call is told with (':' and the
-- slot) and how ('h' handed; 'w' only woken, the slot a hint); nil when
-- this master tells the call nothing but a nudge; or false and a hint when
-- the entry waits for another slot than the one freed: it stays queued,
-- and the next entry is looked at; if none takes the slot, the first such
-- entry is woken with the hint. back(k, tag, v) undoes a hand-off, and
-- unhand is handoff.lua's. They are nil for every other kind, whose key
-- is set whole.
local P = redis.pcall
local give, back, unhand
local function tell(c, m, k)
  -- A channel ending in '}' is in k's slot (ShardChannel): a cluster's.
  local pub = c:sub(-1) == '}' and 'SPUBLISH' or 'PUBLISH'
  return (tonumber(P(pub, c, m .. '|' .. k)) or 0) > 0
end
local function handon(k, q, skip, rb)
  -- No queue, no one to tell: most releases. From a script EXISTS costs
  -- the master about 0.3 µs, ZRANGE 0.8 (redis-server 7.0).
  if P('EXISTS', q) == 0 then
    return 0
  end
  local late, hint
  for _, m in ipairs(P('ZRANGE', q, 0, 7)) do
    local c, h, t, r = m:match('^([^|]*)|([^|]+)|(%d+)|(%d+)$')
    if not c or c ~= skip then
      local msg, tag, how = rb and 'r' or 'w', '', 'h'
      if t ~= '0' and c then
        if give then
          tag, how = give(k, h .. '#' .. r, t)
        elseif P('SET', k, h .. '#' .. r, 'PX', t).ok ~= 'OK' then
          tag = nil
        end
        msg = tag and how or 'r'
      end
      if tag == false then
        if not late then
          late, hint = m, how
        end
      else
        P('ZREM', q, m)
        if c and tell(c, msg .. h .. '|' .. r .. (tag or ''), k) then
          return 2
        elseif c and msg == 'h' then
          if back then
            back(k, tag, h .. '#' .. r)
          else
            P('DEL', k)
          end
        end
      end
    end
  end
  if late then
    P('ZREM', q, late)
    local c, h, _, r = late:match('^([^|]*)|([^|]+)|(%d+)|(%d+)$')
    if tell(c, 'w' .. h .. '|' .. r .. hint, k) then
      return 2
    end
  end
  return 0
end
