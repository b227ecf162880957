-- rwlock protocol 1: the state of one lock, read-only.
--
-- KEYS     as acquire.lua
-- ARGV[1]  protocol version ("1")
--
-- Returns {state, token, writer, writer_ms, readers, waiting}: state is "free",
-- "read" or "write"; token the last write token (0 if none is kept); writer the
-- writer's owner ("" if none) and writer_ms its lease left; readers and waiting
-- flat lists of owner, ms-left pairs, of readers and of writers waiting.
local hash, readers, intents = KEYS[1], KEYS[2], KEYS[3]

local v = redis.call('HGET', hash, 'v')
if v and v ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. v ..
                           ', the caller speaks ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function live(key)
  local out = {}
  local z = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #z, 2 do
    out[#out + 1] = z[i]
    out[#out + 1] = tonumber(z[i + 1]) - now
  end
  return out
end

local h = redis.call('HMGET', hash, 'w', 'wexp', 'f')
local writer, writer_ms = '', 0
if h[1] and tonumber(h[2]) > now then writer, writer_ms = h[1], tonumber(h[2]) - now end
local r = live(readers)
local state = 'free'
if writer ~= '' then state = 'write' elseif #r > 0 then state = 'read' end
return {state, tonumber(h[3] or 0), writer, writer_ms, r, live(intents)}
