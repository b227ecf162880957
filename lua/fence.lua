-- rwlock protocol 3: raise the last write token of a lock its writer holds
-- (quorum mode, docs/protocol.md 13.3).
--
-- KEYS[1]  <prefix>:{<name>}    the lock's hash, as in acquire.lua
-- ARGV[1]  protocol version ("3")
-- ARGV[2]  owner: the writer
-- ARGV[3]  seq of the acquisition that granted the write lock: checked as
--          renew.lua checks it (a newer request of the owner's ran: stale)
-- ARGV[4]  token: the highest token the nodes of a majority granted
--
-- Returns 1 when the owner holds the write lock here: the last write token
-- (field f) is now at least ARGV[4]; 0 when it does not (nothing changed).
-- A client that took the write lock on a majority of independent masters
-- raises the token on them to the largest any of them returned before it
-- uses that token: every later majority meets this one, so every later
-- write token is larger. The token is compared as a number and stored as
-- the caller sent it (exact; Lua's tostring would round it).
if not string.find(ARGV[3], '^[1-9]%d*$') then
  return redis.error_reply('RWLOCK_ARGS seq must be a positive decimal integer, not ' .. ARGV[3])
end
local h = redis.call('HMGET', KEYS[1], 'v', 'w', 'f', 's:' .. ARGV[2])
if h[1] and h[1] ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. KEYS[1] .. ' is protocol ' .. h[1] ..
                           ', the caller speaks ' .. ARGV[1])
end
local s, seq = h[4], ARGV[3]              -- compared as acquire.lua does
if s and (#s > #seq or (#s == #seq and s > seq)) then
  return redis.error_reply('RWLOCK_STALE ' .. KEYS[1] .. ' fence ' .. ARGV[3] .. ' of ' ..
                           ARGV[2] .. ' is older than ' .. h[4])
end
if h[2] ~= ARGV[2] then return 0 end
if not h[3] or h[3] + 0 < ARGV[4] + 0 then
  redis.call('HSET', KEYS[1], 'f', ARGV[4])
end
return 1
