-- rw_state: an RWMutex's state on one master, read once for every script
-- of the read-write lock (rwmutex.go puts this file in front of each
-- step's: rw_acquire.lua, rw_fence.lua, rw_extend.lua, rw_release.lua,
-- rw_queue.lua).
--
-- KEYS[1] is the lock's key (lockKind.base: rw:{name}), a hash of its
-- holders and claims, each a field naming the moment it expires on this
-- master's clock (ms, from TIME: never a client's):
--   'r' .. value   a reader's hold (one per reader, each its own expiry);
--   'w' .. value   the writer's hold (at most one live);
--   'c' .. place .. '|' .. hand
--                  a waiting writer's claim (claim: its call's place in
--                  the queues, then its hand-off value): while one is
--                  live, no new reader is admitted, and no writer but the
--                  one of the first claim (the least name: places have 16
--                  digits, as rw_claim.lua writes them).
-- An entry is live through the millisecond it names (as Redis keeps a key
-- through the millisecond its expiry names); the key expires with its
-- latest entry. Derived keys (same hash slot: the base has a hash tag):
-- KEYS[1] .. ':waiters' (the writers' queue, as WaitKey), KEYS[1] ..
-- ':readers' (the readers' queue), KEYS[1] .. ':fence' (as FenceKey).
-- C is redis.call; now is the master's clock in ms (TIME: never a
-- client's). Names are short: the master hashes every EVAL's bytes.
local C, T = redis.call, redis.call('TIME')
local now = T[1] * 1000 + math.floor(T[2] / 1000)
local WQ, RQ, FK = KEYS[1] .. ':waiters', KEYS[1] .. ':readers', KEYS[1] .. ':fence'

-- scan drops the entries that expired and returns the live readers'
-- count, the live writer's field (nil: none), the live claims' count and
-- the latest expiry of the live entries but skip (0: none), then skip's
-- own expiry while it is live (0: none), which spares its step an HGET,
-- then the first live claim's field (nil: none).
local function scan(k, skip)
local f, r, w, c, l, s, fc = C('HGETALL', k), 0, nil, 0, 0, 0, nil
for i = 1, #f, 2 do
local at, x = tonumber(f[i + 1]), f[i]:sub(1, 1)
if not at or at < now then
C('HDEL', k, f[i])
elseif f[i] == skip then
s = at
else
if x == 'r' then r = r + 1 elseif x == 'w' then w = f[i] else
c = c + 1
if not fc or f[i] < fc then fc = f[i] end
end
if at > l then l = at end
end
end
return r, w, c, l, s, fc
end

-- expire makes the key live as long as its latest entry, or deletes it.
local function expire(k, l)
if l > 0 then C('PEXPIRE', k, l - now) else C('DEL', k) end
end
