-- a permit's vote (sem.lua before it): take slot ARGV[2] of the semaphore
-- KEYS[1] for the holder ARGV[1], for ARGV[3] ms, when the slot is free
-- here (or already this holder's) and the limit stored with the hash is
-- ARGV[4]; ARGV[5] '1': with a fence token (fence.lua, KEYS[2] the
-- counter). Replies:
--   - an integer: granted; 1, or the raised fence counter;
--   - an array: refused, the slot is someone else's; the slots in
--     [0, ARGV[4]) free here, for the next attempt's choice;
--   - the error 'PERMITS <L>': live holders here were given another limit
--     L. Nothing is written then: a caller with another limit never takes
--     a slot while a holder of the stored one lives (see "Semaphore" in
--     docs/internals.md).
--   - the error 'SLOT <s>': the slot is not below the call's limit. The
--     permits are slots 0 to L-1, whatever a client asks.
if tonumber(s) >= tonumber(ARGV[4]) then
  return redis.error_reply('SLOT ' .. s)
end
-- The slot's live holder and the stored limit, in one read.
local v, L = holder(s, 'L')
if type(L) == 'table' then
  return L
end
if L and L ~= ARGV[4] then
  if live() > 0 then
    return redis.error_reply('PERMITS ' .. L)
  end
  redis.call('DEL', k)
end
if v and v ~= ARGV[1] then
  local free = {}
  for i = 0, tonumber(ARGV[4]) - 1 do
    if not holder(i) then
      free[#free + 1] = i
    end
  end
  return free
end
local c = 1
if ARGV[5] == '1' then
  local err
  c, err = counter(KEYS[2])
  if not c then
    return err
  end
end
hold(ARGV[3], ARGV[4])
if ARGV[5] == '1' then
  return raise(KEYS[2], c)
end
return 1
