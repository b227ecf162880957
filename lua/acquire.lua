-- rwlock protocol 1: take a read or a write lock, or say how long to wait.
--
-- KEYS[1]  <prefix>:{<name>}    hash: v protocol, w writer, wexp writer's lease end (ms),
--                               f last write token
-- KEYS[2]  <prefix>:{<name>}:r  sorted set: reader -> lease end (ms)
-- KEYS[3]  <prefix>:{<name>}:q  sorted set: waiting writer -> intent end (ms)
-- ARGV[1]  protocol version ("1")
-- ARGV[2]  owner: a string unique to the holder
-- ARGV[3]  "r" or "w"
-- ARGV[4]  lease, ms
-- ARGV[5]  how long a waiting caller's mark lasts, ms; "0" when the caller
--          will not wait. A waiting writer's mark is its intent (KEYS[3]); a
--          waiting reader's is the hash's field rw, which gives readers a
--          turn (field rt) when the next writer leaves.
-- ARGV[6]  how long the last write token outlives the lock, ms
--
-- Returns {1, token} when granted; {0, ms} when busy, ms being the longest the
-- caller should sleep before trying again (it is told sooner on <KEYS[1]>:c);
-- {-1, other} when the caller holds a read lock and wants the write lock while
-- `other`, also a reader, waits to do the same: one of them must give up.
local hash, readers, intents = KEYS[1], KEYS[2], KEYS[3]
local owner, mode = ARGV[2], ARGV[3]
local lease, intent, keep = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

local h = redis.call('HMGET', hash, 'v', 'w', 'wexp', 'f', 'rt', 'rw')
if h[1] and h[1] ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. h[1] ..
                           ', the caller speaks ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
redis.call('ZREMRANGEBYSCORE', intents, '-inf', now)

local function extend(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

local function busy(until_ms)
  if intent > 0 and mode == 'w' then
    redis.call('ZADD', intents, now + intent, owner)
    extend(intents, intent)
  elseif intent > 0 then
    local rw = tonumber(redis.call('HGET', hash, 'rw') or 0)
    redis.call('HSET', hash, 'rw', math.max(rw, now + intent))
    extend(hash, intent)
  end
  return {0, math.max(until_ms - now, 1)}
end

local writer, wexp, fence = h[2], tonumber(h[3] or 0), tonumber(h[4] or 0)
local turn = tonumber(h[5] or 0)
if writer and wexp <= now then writer = false end
if writer and writer ~= owner then return busy(wexp) end

if mode == 'r' then
  -- Once a writer waits, new readers queue behind it, except in the turn
  -- that readers who waited get when a writer leaves.
  if not writer and turn <= now and not redis.call('ZSCORE', readers, owner) then
    local first = redis.call('ZRANGE', intents, 0, 0, 'WITHSCORES')
    if first[1] then return busy(tonumber(first[2])) end
  end
  -- No writer holds or waits (a lease or an intent ran out): the readers'
  -- marks are moot, and must not start a turn at a later writer's release.
  if h[6] and not writer and redis.call('EXISTS', intents) == 0 then
    redis.call('HDEL', hash, 'rw')
  end
  redis.call('ZADD', readers, now + lease, owner)
  extend(readers, lease)
  redis.call('HSET', hash, 'v', ARGV[1])
  extend(hash, lease + keep)
  return {1, fence}
end

local mine = true				-- whether the owner may be among the readers
if writer ~= owner then
  -- Readers who waited for the last writer go first.
  if turn > now then return busy(turn) end
  mine = redis.call('ZSCORE', readers, owner)
  local others = redis.call('ZCARD', readers) - (mine and 1 or 0)
  if others > 0 then
    if mine then
      for _, w in ipairs(redis.call('ZRANGE', intents, 0, -1)) do
        if w ~= owner and redis.call('ZSCORE', readers, w) then return {-1, w} end
      end
    end
    local r = redis.call('ZRANGE', readers, 0, 1, 'WITHSCORES')
    if r[1] == owner then return busy(tonumber(r[4])) end
    return busy(tonumber(r[2]))
  end
  fence = math.max(fence + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
redis.call('HSET', hash, 'v', ARGV[1], 'w', owner, 'wexp', now + lease,
           'f', string.format('%.0f', fence))
if mine then redis.call('ZREM', readers, owner) end
redis.call('ZREM', intents, owner)
extend(hash, lease + keep)
return {1, fence}
