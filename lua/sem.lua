-- sem: a Semaphore's permits on this master, written once. protocol.go puts
-- this file in front of every permit script but the release (sem_acquire.lua,
-- sem_extend.lua, sem_fence.lua, sem_free.lua); sem_hold.lua
-- comes after it in those that take or extend a slot.
--
-- KEYS[1] is the semaphore's hash (sem:{name}): field 'L' the limit its
-- holders were given, and for each permit slot s in [0, L) held here,
-- 'v'..s the holder's value and 'e'..s when its hold ends, in ms of this
-- master's TIME. A slot whose end has passed is free. The hash's own
-- PEXPIRE is never earlier than its latest hold's end, so it goes at the
-- end of the last hold (a release leaves it: see sem_release.lua). Every permit script's ARGV starts with the holder's value and
-- the slot: ARGV[1], ARGV[2].
--
-- holder(s) is slot s's live holder, or nil; holder(s, f...) also returns
-- the hash's fields f... from the same HMGET (on an error, the error in
-- their place). live() counts live holders. The scripts that compare a
-- slot's holder with theirs read it first: local v = holder(s).
local k, s = KEYS[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function holder(i, ...)
  local h = redis.pcall('HMGET', k, 'v' .. i, 'e' .. i, ...)
  if h.err then
    return nil, h
  end
  local v = h[1] and tonumber(h[2] or '0') > now and h[1] or nil
  return v, unpack(h, 3)
end
local function live()
  local n, f = 0, redis.pcall('HGETALL', k)
  if f.err then
    return 0
  end
  for i = 1, #f, 2 do
    if f[i]:sub(1, 1) == 'e' and tonumber(f[i + 1]) > now then
      n = n + 1
    end
  end
  return n
end
