-- Baseline (bench/baseline/README.md): Redisson-style read unlock.
-- KEYS[1] hash, KEYS[2] channel, KEYS[3] this owner's timeout-key prefix,
-- KEYS[4] prefix of every holder's timeout keys; ARGV[1] message, ARGV[2]
-- owner. Returns 1 released, 0 others still hold it, nil not held.
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return nil end
local n = redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
if n == 0 then redis.call('HDEL', KEYS[1], ARGV[2]) end
redis.call('DEL', KEYS[3] .. ':' .. (n + 1))
if redis.call('HLEN', KEYS[1]) > 1 then
  -- recompute the lock's TTL from the remaining read holds' own keys
  local longest = -3
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local count = tonumber(redis.call('HGET', KEYS[1], field))
    if type(count) == 'number' then
      for i = count, 1, -1 do
        local left = redis.call('PTTL', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
        longest = math.max(longest, left)
      end
    end
  end
  if longest > 0 then
    redis.call('PEXPIRE', KEYS[1], longest)
    return 0
  end
  if mode == 'write' then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
return 1
