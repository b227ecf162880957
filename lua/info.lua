-- rwlock protocol 3: the state of one lock, read-only.
--
-- KEYS     as acquire.lua
-- ARGV[1]  protocol version ("3")
--
-- Returns {state, token, writer, writer_ms, readers, waiting}: state is "free",
-- "read" or "write"; token the last write token (0 if none is kept); writer the
-- writer's owner ("" if none) and writer_ms its lease left; readers a flat
-- list of owner, ms-left pairs of the live readers, by lease end; waiting the
-- same of the waiting writers (live intents), in their order of service.
local hash, queue = KEYS[1], KEYS[2]

local all = redis.call('HGETALL', hash)
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
if f.v and f.v ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. f.v ..
                           ', the caller speaks ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local writer, writer_ms = '', 0
-- A writer's lease ends 30000 ms after its token's time (µs), or where we
-- ("<token> <end>") says if we belongs to its token (acquire.lua). One whose
-- lease has ended holds nothing.
if f.w then
  local sp, e = f.we and string.find(f.we, ' ', 1, true)
  if sp and string.sub(f.we, 1, sp - 1) == f.f then e = tonumber(string.sub(f.we, sp + 1))
  elseif f.f then e = math.floor(tonumber(f.f) / 1000) + 30000
  else e = now + redis.call('PTTL', hash) end   -- no token: a hash written by hand; its TTL
  if e > now then writer, writer_ms = f.w, e - now end
end
local rs = {}
for k, v in pairs(f) do
  if string.sub(k, 1, 2) == 'r:' and tonumber(v) > now then
    rs[#rs + 1] = {string.sub(k, 3), tonumber(v) - now}
  end
end
table.sort(rs, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
local readers = {}
for _, r in ipairs(rs) do readers[#readers + 1] = r[1]; readers[#readers + 1] = r[2] end
local waiting = {}
for _, w in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local e = tonumber(f['i:' .. w] or 0)
  if e > now then waiting[#waiting + 1] = w; waiting[#waiting + 1] = e - now end
end
local state = 'free'
if writer ~= '' then state = 'write' elseif #readers > 0 then state = 'read' end
return {state, tonumber(f.f or 0), writer, writer_ms, readers, waiting}
