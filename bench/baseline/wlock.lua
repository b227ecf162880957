-- Baseline (bench/baseline/README.md): Redisson-style write lock.
-- KEYS[1] hash; ARGV[1] lease ms, ARGV[2] owner (its write field).
-- Returns nil when granted, else the ms left on the lock.
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'write')
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  local left = redis.call('PTTL', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], left + tonumber(ARGV[1]))
  return nil
end
return redis.call('PTTL', KEYS[1])
