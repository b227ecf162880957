-- rwlock protocol 1: extend the lease of a lock the owner holds.
--
-- KEYS     as acquire.lua
-- ARGV[1]  protocol version ("1")
-- ARGV[2]  owner
-- ARGV[3]  new lease, ms from now
-- ARGV[4]  how long the last write token outlives the lock, ms
--
-- Returns 1 when the owner still held the lock (its lease now ends ARGV[3] ms
-- from now), 0 when the hold was lost: a lost hold is never revived.
local hash, readers = KEYS[1], KEYS[2]
local owner, lease = ARGV[2], tonumber(ARGV[3])

local v = redis.call('HGET', hash, 'v')
if v and v ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. v ..
                           ', the caller speaks ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local held = 0
local h = redis.call('HMGET', hash, 'w', 'wexp')
if h[1] == owner and tonumber(h[2]) > now then
  redis.call('HSET', hash, 'wexp', now + lease)
  held = 1
end
local s = redis.call('ZSCORE', readers, owner)
if s and tonumber(s) > now then
  redis.call('ZADD', readers, now + lease, owner)
  if redis.call('PTTL', readers) < lease then redis.call('PEXPIRE', readers, lease) end
  held = 1
end
if held == 1 then
  local ms = lease + tonumber(ARGV[4])
  if redis.call('PTTL', hash) < ms then redis.call('PEXPIRE', hash, ms) end
end
return held
