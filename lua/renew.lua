-- rwlock protocol 3: extend the lease of a lock the owner holds.
--
-- KEYS     as acquire.lua
-- ARGV[1]  protocol version ("3")
-- ARGV[2]  owner
-- ARGV[3]  seq: the seq of the owner's newest acquire or release of this
--          lock that the renewer knows of. A renewal is checked, never
--          recorded: when s:<owner> is above it, a newer request of the
--          owner's ran since, and the renewal is stale (an RWLOCK_STALE
--          error reply, nothing changed; the renewer asks again with the
--          newer seq, or finds the hold gone)
-- ARGV[4]  new lease, ms from now
-- ARGV[5]  keep, ms, as in acquire.lua
--
-- Returns 1 when the owner still held the lock (its lease now ends ARGV[4] ms
-- from now), 0 when the hold was lost: a lost hold is never revived. An
-- owner without an s: field here holds nothing here.
local hash, owner = KEYS[1], ARGV[2]
local rkey = 'r:' .. owner

if not string.find(ARGV[3], '^[1-9]%d*$') then
  return redis.error_reply('RWLOCK_ARGS seq must be a positive decimal integer, not ' .. ARGV[3])
end
local h = redis.call('HMGET', hash, 'v', 'w', 'x', rkey, 'rm', 's:' .. owner)
if h[1] and h[1] ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. h[1] ..
                           ', the caller speaks ' .. ARGV[1])
end
if not h[6] then return 0 end
local s, seq = h[6], ARGV[3]              -- compared as acquire.lua does
if #s > #seq or (#s == #seq and s > seq) then
  return redis.error_reply('RWLOCK_STALE ' .. hash .. ' renewal ' .. ARGV[3] .. ' of ' ..
                           owner .. ' is older than ' .. h[6])
end
if h[2] == owner then
  -- The writer: its lease is the hash's TTL (a read lock it also holds goes
  -- with it).
  if h[4] then
    local t = redis.call('TIME')
    local us = t[2] + 0
    local e = t[1] * 1000 + (us - us % 1000) / 1000 + ARGV[4]
    if h[5] and h[5] + 0 > e then
      redis.call('HSET', hash, rkey, e, 'rm', e)
    else
      redis.call('HSET', hash, rkey, e)
    end
  end
  redis.call('PEXPIRE', hash, ARGV[4])
  return 1
end
if not h[4] or h[2] then return 0 end
local t = redis.call('TIME')
local us = t[2] + 0
local now = t[1] * 1000 + (us - us % 1000) / 1000
if h[4] + 0 <= now then return 0 end
local e = now + ARGV[4]
-- A reader. The hash lives at least keep past every lease in it: until x.
-- rm (no reader's lease ends before it) comes down to a shorter new lease.
local a = {hash, rkey, e}
if h[5] and h[5] + 0 > e then a[4] = 'rm'; a[5] = e end
if h[3] and h[3] - ARGV[5] >= e then
  redis.call('HSET', unpack(a))
else
  local x = e + 2 * ARGV[5]
  a[#a + 1] = 'x'; a[#a + 1] = x
  redis.call('HSET', unpack(a))
  redis.call('PEXPIRE', hash, x - now)
end
return 1
