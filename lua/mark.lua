-- rwlock protocol 3: mark a waiting owner as the victim of a deadlock
-- (docs/protocol.md section 18).
--
-- KEYS[1]  <prefix>:wait:{<owner>}: what the owner waits for
-- ARGV[1]  protocol version ("3")
-- ARGV[2]  the key's value as the caller read it
-- ARGV[3]  the cycle, to be reported by the victim
--
-- Returns 1 when marked: the key still said ARGV[2], and now says
-- "!" .. ARGV[2] .. "\n" .. ARGV[3], with the same time to live; 0 when
-- the owner's wait ended or changed since (nothing is written).
if string.sub(ARGV[2], 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return redis.error_reply('RWLOCK_VERSION ' .. KEYS[1] .. ' is not protocol ' .. ARGV[1])
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return 0 end
redis.call('SET', KEYS[1], '!' .. ARGV[2] .. '\n' .. ARGV[3], 'PX', ttl)
return 1
