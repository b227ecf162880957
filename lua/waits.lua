-- rwlock protocol 3: whom an owner waiting for a lock waits for, read-only
-- (deadlock detection, docs/protocol.md section 18).
--
-- KEYS     as acquire.lua
-- ARGV[1]  protocol version ("3")
-- ARGV[2]  the waiting owner
-- ARGV[3]  "r" or "w": the mode it waits for
-- ARGV[4]  optional, a walk's own owner: for a writer, the writers queued
--          ahead of it are then left out, but for this one. Whatever blocks
--          them blocks the writer too (the holders, the readers, the
--          writers ahead of them, the readers' turn), so a walk reaches
--          nothing through them that it does not reach without them; only
--          the walker itself, queued ahead, closes a cycle there. This keeps
--          a walk behind a long queue at one call, not one per writer.
--
-- Returns {live, blocker, blocker, ...}. live is 1 when the owner waits
-- here now: its intent (a writer) or its mark (a reader) is live; else 0
-- and no blockers (it does not wait here, or its lease lapsed). The
-- blockers are the owners it waits for: the writer holding the lock; for a
-- writer, the other live readers, the writers queued ahead of it (none for
-- an upgrade, which goes first) and the waiting readers while they have
-- their turn; for a reader, the first queued writer when no reader turn
-- lets it in. Each owner once, holders first.
local hash, queue, owner, mode, walker = KEYS[1], KEYS[2], ARGV[2], ARGV[3], ARGV[4]
local all = redis.call('HGETALL', hash)
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
if f.v and f.v ~= ARGV[1] then
  return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. f.v ..
                           ', the caller speaks ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function live(k) return tonumber(f[k] or 0) > now end

local out, seen = {0}, {}
local function add(o)
  if o ~= owner and not seen[o] then seen[o] = true; out[#out + 1] = o end
end
if not live((mode == 'w' and 'i:' or 'm:') .. owner) then return out end
out[1] = 1
-- The writer, while its lease has not ended (as in info.lua).
local writer
if f.w then
  local sp, e = f.we and string.find(f.we, ' ', 1, true)
  if sp and string.sub(f.we, 1, sp - 1) == f.f then e = tonumber(string.sub(f.we, sp + 1))
  elseif f.f then e = math.floor(tonumber(f.f) / 1000) + 30000
  else e = now + redis.call('PTTL', hash) end   -- no token: a hash written by hand; its TTL
  if e > now then writer = f.w; add(writer) end
end
local turn = live('rt')
if mode == 'w' then
  local rs = {}
  for k, v in pairs(f) do
    if string.sub(k, 1, 2) == 'r:' and tonumber(v) > now then rs[#rs + 1] = string.sub(k, 3) end
  end
  table.sort(rs)
  for _, r in ipairs(rs) do add(r) end
  if not live('r:' .. owner) then
    for _, w in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
      if w == owner then break end
      if (not walker or w == walker) and live('i:' .. w) then add(w) end
    end
  end
  if turn then
    local ms = {}
    for k, v in pairs(f) do
      if string.sub(k, 1, 2) == 'm:' and tonumber(v) > now then ms[#ms + 1] = string.sub(k, 3) end
    end
    table.sort(ms)
    for _, m in ipairs(ms) do add(m) end
  end
elseif not writer and not turn then
  for _, w in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
    if live('i:' .. w) then add(w); break end
  end
end
return out
