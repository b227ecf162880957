-- rwlock protocol 3: extend the lease of a lock the owner holds.
--
-- KEYS     as acquire.lua
-- ARGV[1]  owner
-- ARGV[2]  seq: the seq of the owner's newest acquire or release of this
--          lock that the renewer knows of. A renewal is checked, never
--          recorded: when s:<owner> is above it, a newer request of the
--          owner's ran since, and the renewal is stale (an RWLOCK_STALE
--          error reply, nothing changed; the renewer asks again with the
--          newer seq, or finds the hold gone)
-- ARGV[3]  new lease, ms from now
-- ARGV[4]  keep, ms, as in acquire.lua; absent: 600000
--
-- Returns 1 when the owner still held the lock (its lease now ends ARGV[3] ms
-- from now), 0 when the hold was lost (its lease ended, or Redis lost it):
-- a lost hold is never revived. An owner without an s: field here holds
-- nothing here.
local V, KEEP = '3', ARGV[4] or '600000'     -- the version: as in acquire.lua
local hash, owner, seq, lease = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local rkey = 'r:' .. owner

if not string.find(seq, '^[1-9]%d*$') then
  return redis.error_reply('RWLOCK_ARGS seq must be a positive decimal integer, not ' .. seq)
end
local h = redis.call('HMGET', hash, 'v', 'w', 'x', rkey, 'rm', 's:' .. owner, 'f', 'we')
if h[1] and h[1] ~= V then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. h[1] ..
                           ', the caller speaks ' .. V)
end
if not h[6] then return 0 end
local s = h[6]                            -- compared as acquire.lua does
if #s > #seq or (#s == #seq and s > seq) then
  return redis.error_reply('RWLOCK_STALE ' .. hash .. ' renewal ' .. seq .. ' of ' ..
                           owner .. ' is older than ' .. h[6])
end
if h[2] == owner then
  -- The writer, if its lease has not ended (acquire.lua says where it is
  -- kept): its lease now ends at e, field we tied to its token, and a read
  -- lock it also holds with it. The TTL is raised if it ends within
  -- max(keep, lease), never lowered.
  local t = redis.call('TIME')
  local us = t[2] + 0
  local now = t[1] * 1000 + (us - us % 1000) / 1000
  local sp, wend = h[8] and string.find(h[8], ' ', 1, true)
  if sp and string.sub(h[8], 1, sp - 1) == h[7] then wend = tonumber(string.sub(h[8], sp + 1))
  elseif h[7] then wend = math.floor(tonumber(h[7]) / 1000) + 30000
  else wend = now + redis.call('PTTL', hash) end   -- no token: a hash written by hand; its TTL
  if wend <= now then return 0 end
  local e = now + lease
  if h[4] and h[5] and h[5] + 0 > e then
    redis.call('HSET', hash, 'we', (h[7] or '') .. ' ' .. e, rkey, e, 'rm', e)
  elseif h[4] then
    redis.call('HSET', hash, 'we', (h[7] or '') .. ' ' .. e, rkey, e)
  else
    redis.call('HSET', hash, 'we', (h[7] or '') .. ' ' .. e)
  end
  local k = math.max(tonumber(KEEP), tonumber(lease))
  if redis.call('PTTL', hash) < k then redis.call('PEXPIRE', hash, 2 * k) end
  return 1
end
if not h[4] or h[2] then return 0 end
local t = redis.call('TIME')
local us = t[2] + 0
local now = t[1] * 1000 + (us - us % 1000) / 1000
if h[4] + 0 <= now then return 0 end
local e = now + lease
-- A reader. The hash lives at least keep past every lease in it: until x.
-- rm (no reader's lease ends before it) comes down to a shorter new lease.
local a = {hash, rkey, e}
if h[5] and h[5] + 0 > e then a[4] = 'rm'; a[5] = e end
if h[3] and h[3] - KEEP >= e then
  redis.call('HSET', unpack(a))
else
  local x = e + 2 * KEEP
  a[#a + 1] = 'x'; a[#a + 1] = x
  redis.call('HSET', unpack(a))
  redis.call('PEXPIRE', hash, x - now)
end
return 1
