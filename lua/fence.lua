-- rwlock protocol 3: raise the last write token of a lock its writer holds
-- (quorum mode, docs/protocol.md 13.3).
--
-- KEYS[1]  <prefix>:{<name>}    the lock's hash, as in acquire.lua
-- ARGV[1]  owner: the writer
-- ARGV[2]  seq of the acquisition that granted the write lock: checked as
--          renew.lua checks it (a newer request of the owner's ran: stale)
-- ARGV[3]  token: the highest token the nodes of a majority granted
--
-- The protocol version is the script's own, as in acquire.lua.
--
-- Returns 1 when the owner holds the write lock here: the last write token
-- (field f) is now at least ARGV[3]; 0 when it does not (nothing changed).
-- A client that took the write lock on a majority of independent masters
-- raises the token on them to the largest any of them returned before it
-- uses that token: every later majority meets this one, so every later
-- write token is larger. The token is compared as a number and stored as
-- the caller sent it (exact; Lua's tostring would round it).
local V, owner, seq, token = '3', ARGV[1], ARGV[2], ARGV[3]
if not string.find(seq, '^[1-9]%d*$') then
  return redis.error_reply('RWLOCK_ARGS seq must be a positive decimal integer, not ' .. seq)
end
local h = redis.call('HMGET', KEYS[1], 'v', 'w', 'f', 's:' .. owner, 'we')
if h[1] and h[1] ~= V then
  return redis.error_reply('RWLOCK_VERSION ' .. KEYS[1] .. ' is protocol ' .. h[1] ..
                           ', the caller speaks ' .. V)
end
local s = h[4]                            -- compared as acquire.lua does
if s and (#s > #seq or (#s == #seq and s > seq)) then
  return redis.error_reply('RWLOCK_STALE ' .. KEYS[1] .. ' fence ' .. seq .. ' of ' ..
                           owner .. ' is older than ' .. h[4])
end
if h[2] ~= owner then return 0 end
-- The writer's lease end (acquire.lua says how it is read): one whose lease
-- has ended holds nothing. It does not move with the token: it is written
-- in we, tied to the new token.
local e, sp = nil, h[5] and string.find(h[5], ' ', 1, true)
if sp and string.sub(h[5], 1, sp - 1) == h[3] then e = string.sub(h[5], sp + 1)
elseif h[3] then e = math.floor(tonumber(h[3]) / 1000) + 30000 end
if e then
  local t = redis.call('TIME')
  if e + 0 <= t[1] * 1000 + math.floor(t[2] / 1000) then return 0 end
end
if not h[3] or h[3] + 0 < token + 0 then
  if e then
    redis.call('HSET', KEYS[1], 'f', token, 'we', token .. ' ' .. e)
  else
    redis.call('HSET', KEYS[1], 'f', token)
  end
end
return 1
