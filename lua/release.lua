-- rwlock protocol 1: release a lock, keep only its read part, or stop waiting.
--
-- KEYS     as acquire.lua
-- ARGV[1]  protocol version ("1")
-- ARGV[2]  owner
-- ARGV[3]  what the owner keeps: "" nothing; "r" a read lock (a writer
--          downgrading); "q" everything: it only withdraws its writer's intent
-- ARGV[4]  lease of the kept read lock, ms
-- ARGV[5]  how long the last write token outlives the lock, ms
--
-- Returns 1 when the owner held what it released, 0 when its hold had already
-- been lost (lease expired, or the data set was lost). "q" always returns 1.
-- Publishes on <KEYS[1]>:c whenever waiters may now proceed.
--
-- A writer that leaves while readers wait (field rw) starts the readers'
-- turn (field rt, READER_TURN_MS): new writers wait until the readers that
-- came in are done or the turn runs out, so neither side starves.
local READER_TURN_MS = 100
local hash, readers, intents = KEYS[1], KEYS[2], KEYS[3]
local owner, keeps = ARGV[2], ARGV[3]

local h = redis.call('HMGET', hash, 'v', 'w', 'wexp', 'rw', 'rt', 'f')
if h[1] and h[1] ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. h[1] ..
                           ', the caller speaks ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local writer = h[2]

local held, changed = 0, redis.call('ZREM', intents, owner) == 1
if keeps == 'q' then
  held = 1
else
  if writer == owner then
    if tonumber(h[3]) > now then held = 1 end
    redis.call('HDEL', hash, 'w', 'wexp', 'rw')
    writer = false
    if tonumber(h[4] or 0) > now then
      redis.call('HSET', hash, 'rt', now + READER_TURN_MS)
    end
    changed = true
  end
  local s = redis.call('ZSCORE', readers, owner)
  if s then
    if tonumber(s) > now then held = 1 end
    redis.call('ZREM', readers, owner)
    changed = true
    -- The readers' turn ends when the last of them leaves.
    if tonumber(h[5] or 0) > now and redis.call('EXISTS', readers) == 0 then
      redis.call('HDEL', hash, 'rt')
    end
  end
  if keeps == 'r' and held == 1 then
    local lease = tonumber(ARGV[4])
    redis.call('ZADD', readers, now + lease, owner)
    if redis.call('PTTL', readers) < lease then redis.call('PEXPIRE', readers, lease) end
    -- The hash (version, last token) must outlive the kept read lock too.
    local ms = lease + tonumber(ARGV[5])
    if redis.call('PTTL', hash) < ms then redis.call('PEXPIRE', hash, ms) end
  end
end

if changed then
  if not writer and redis.call('EXISTS', intents) == 0 then
    -- No writer holds or waits: readers who waited wait for no one, and
    -- their mark must not start a readers' turn at a later writer's release.
    if h[4] then redis.call('HDEL', hash, 'rw') end
    if redis.call('EXISTS', readers) == 0 then
      -- Free: only the last write token stays, and not for long.
      if h[6] then
        redis.call('PEXPIRE', hash, tonumber(ARGV[5]))
      else
        redis.call('DEL', hash)
      end
    end
  end
  redis.call('PUBLISH', hash .. ':c', owner)
end
return held
