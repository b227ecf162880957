-- Baseline (bench/baseline/README.md): Redisson-style read lock.
-- KEYS[1] hash, KEYS[2] this owner's timeout-key prefix; ARGV[1] lease ms,
-- ARGV[2] owner, ARGV[3] the owner's write field (a writer may also read).
-- Returns nil when granted, else the ms left on the lock.
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'read')
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('SET', KEYS[2] .. ':1', 1, 'PX', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('SET', KEYS[2] .. ':' .. n, 1, 'PX', ARGV[1])
  local left = redis.call('PTTL', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], math.max(left, tonumber(ARGV[1])))
  return nil
end
return redis.call('PTTL', KEYS[1])
