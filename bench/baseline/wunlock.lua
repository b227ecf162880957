-- Baseline (bench/baseline/README.md): Redisson-style write unlock.
-- KEYS[1] hash, KEYS[2] channel; ARGV[1] message, ARGV[2] lease ms,
-- ARGV[3] owner. Returns 1 released, 0 still held (reentrant), nil not held.
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
if mode ~= 'write' then return nil end
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then return nil end
local n = redis.call('HINCRBY', KEYS[1], ARGV[3], -1)
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[3])
if redis.call('HLEN', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
else
  -- the writer also held read locks: they remain
  redis.call('HSET', KEYS[1], 'mode', 'read')
end
return 1
