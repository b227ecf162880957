-- rwlock protocol 3: release a lock, keep only its read part, or stop waiting.
--
-- KEYS     as acquire.lua
-- ARGV[1]  owner
-- ARGV[2]  seq, as in acquire.lua: a release that is not its owner's newest
--          request here is stale (an RWLOCK_STALE error reply, nothing
--          changed); else seq becomes s:<owner>, even where the owner held
--          nothing (the hash is then made, to live keep ms: a request of
--          the owner's still in flight arrives stale)
-- ARGV[3]  what the owner keeps: "" or absent nothing; "r" a read lock (a
--          writer downgrading); "q" everything: it only stops waiting
--          (withdraws its writer's intent, or its waiting reader's mark)
-- ARGV[4]  lease of the kept read lock, ms ("r" only)
-- ARGV[5]  keep, ms, as in acquire.lua; absent: 600000
--
-- Returns 1 when the owner held what it released, 0 when its hold had already
-- been lost (lease expired, or the data set was lost). "q" always returns 1.
--
-- Publishes only when the change lets a waiter proceed, and only to those it
-- lets through: "r" on <KEYS[1]>:c, where waiting readers listen, when they
-- may go; "w" on <KEYS[1]>:c:<owner>, where a waiting writer listens, to the
-- writer whose turn it is (the first in the queue, or the reader waiting to
-- upgrade once it is the only reader), and to the first in the queue when
-- the readers' turn starts (it learns by trying how long the turn lasts).
--
-- A writer that leaves while readers wait (rw) starts the readers' turn (rt,
-- READER_TURN_MS): new writers wait until the readers that came in are done
-- or the turn runs out, so neither side starves.
local READER_TURN_MS = 100
local V, KEEP = '3', ARGV[5] or '600000'     -- the version: as in acquire.lua
local hash, owner, seq, keeps = KEYS[1], ARGV[1], ARGV[2], ARGV[3] or ''
local skey = 's:' .. owner
local rkey = 'r:' .. owner
-- seq, checked first (a refused call changes nothing), and s: are decimal
-- integers without leading zeros: compared by length, then as strings (no
-- conversion to a number: exact at any size, and cheaper).
if not string.find(seq, '^[1-9]%d*$') then
  return redis.error_reply('RWLOCK_ARGS seq must be a positive decimal integer, not ' .. seq)
end
if keeps ~= '' and keeps ~= 'q' and (keeps ~= 'r' or not tonumber(ARGV[4])) then
  return redis.error_reply(keeps == 'r' and 'RWLOCK_ARGS a downgrade needs a lease, not ' ..
                           tostring(ARGV[4]) or 'RWLOCK_ARGS keep must be "", r or q, not ' .. keeps)
end

local h = redis.call('HMGET', hash, 'v', 'w', 'z', rkey, 'n', skey)
if h[1] and h[1] ~= V then
  -- As in acquire.lua: a free protocol 2 lock is taken over.
  local t = h[1] == '2' and not h[2] and not h[5] and h[3] and redis.call('TIME')
  if h[1] == '2' and not h[2] and not h[5] and
     (not h[3] or h[3] + 0 <= t[1] * 1000 + t[2] / 1000) then
    redis.call('HSET', hash, 'v', V)
    redis.call('HDEL', hash, 'z')
    h[1], h[3] = V, nil
  else
    return redis.error_reply('RWLOCK_VERSION ' .. hash .. ' is protocol ' .. h[1] ..
                             ', the caller speaks ' .. V)
  end
end
local s = h[6]
if s and (#seq < #s or (#seq == #s and seq <= s)) then
  return redis.error_reply('RWLOCK_STALE ' .. hash .. ' request ' .. seq .. ' of ' ..
                           owner .. ' is not newer than ' .. s)
end

-- Fast paths: a holder leaves, and nobody waits or has a turn (no z), so
-- nobody is told. s:<owner> stays, with the hash, for keep at least.
if keeps == '' and not h[3] then
  if h[2] == owner and not h[4] then
    -- The writer. w still names it, so nobody else took the lock since it
    -- was granted (a call after its lease's end would have removed w): it
    -- held it throughout. The hash, the last token and the records in it
    -- stay keep at least: the TTL is raised, never lowered (acquire.lua).
    redis.call('HDEL', hash, 'w')
    redis.call('HSET', hash, skey, seq)
    local k = ARGV[5] and tonumber(ARGV[5]) or 600000
    if redis.call('PTTL', hash) < k then redis.call('PEXPIRE', hash, 2 * k) end
    return 1
  end
  if h[4] and not h[2] then
    -- A reader whose lease has not ended. The hash lives at least keep past
    -- that lease (x), the owners' s: fields with it. (One whose lease ended
    -- takes the general path, which makes its record live keep from now.)
    local t = redis.call('TIME')
    if h[4] - t[1] * 1000 > t[2] / 1000 then
      if h[5] and h[5] + 0 > 1 then
        redis.call('HDEL', hash, rkey)
        redis.call('HSET', hash, 'n', h[5] - 1, skey, seq)
      else
        redis.call('HDEL', hash, rkey, 'n', 'rm')
        redis.call('HSET', hash, skey, seq)
      end
      return 1
    end
  end
end

-- The general path: someone may be waiting; a downgrade; a withdrawal; a
-- writer that also reads.
local queue, ikey, mkey = KEYS[2], 'i:' .. owner, 'm:' .. owner
local g = redis.call('HMGET', hash, 'rm', 'qe', 'rt', 'rw', 'u', ikey, 'x', mkey, 'mc', 'f', 'we')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(KEEP)
local n, rm, x, z = tonumber(h[5] or 0), tonumber(g[1] or 0), tonumber(g[7] or 0), h[3]
local qe, rt, rw, upgrader = tonumber(g[2] or 0), tonumber(g[3] or 0), tonumber(g[4] or 0), g[5]

local upd, ttl = {}, nil
local function put(k, v) upd[k] = v end          -- v false: delete the field
put(skey, seq)                                    -- whatever it finds
if not h[1] then put('v', V) end                  -- nothing here: a record

local held, changed, left_reader = 0, false, false
-- The writer and its lease end, as in acquire.lua: another owner's whose
-- lease ended holds nothing, and its w goes (who waits may now go); the
-- caller's own still names it, so it held the lock throughout (above).
local writer, wend = h[2], 0
if writer then
  local e = g[11] and string.find(g[11], ' ', 1, true)
  if e and string.sub(g[11], 1, e - 1) == g[10] then wend = tonumber(string.sub(g[11], e + 1))
  elseif g[10] then wend = math.floor(tonumber(g[10]) / 1000) + 30000
  else wend = now + redis.call('PTTL', hash) end   -- no token: a hash written by hand; its TTL
  if wend <= now and writer ~= owner then
    writer = nil
    put('w', false); put('we', false)
    changed = true
  end
end
if g[6] then                                      -- withdraw the intent
  redis.call('ZREM', queue, owner)
  put(ikey, false)
  if upgrader == owner then upgrader = nil; put('u', false) end
  changed = true
end
if g[8] then
  -- A waiting reader's mark, taken back: readers are owed a turn only while
  -- one still waits. mc counts the marks in the hash: when the last goes, no
  -- reader waits and rw goes too (no turn for nobody). While others are
  -- left, rw stays: still at least every live mark, perhaps later than the
  -- latest of them (their turn may then last a little longer); finding that
  -- latest would read the whole hash at every withdrawal, O(N^2) for N
  -- readers giving up together.
  local mc = tonumber(g[9] or 0) - 1
  put(mkey, false); put('mc', mc > 0 and mc)
  if mc <= 0 and rw > 0 then rw = 0; put('rw', false) end
end
local readers_wait = rw > now
if keeps == 'q' then
  held = 1
else
  if writer == owner then
    held = 1                                      -- w named it (above)
    put('w', false); put('we', false)
    writer = nil
    changed = true
    if readers_wait then
      rt, rw = now + READER_TURN_MS, 0
      put('rt', rt); put('rw', false)
    end
  end
  if h[4] then
    if tonumber(h[4]) > now then held = 1 end
    put(rkey, false)
    n = n - 1
    changed, left_reader = true, true
  end
  if keeps == 'r' and held == 1 and not writer then
    local e = now + tonumber(ARGV[4])
    put(rkey, e)
    n = n + 1
    if n == 1 or e < rm then rm = e end           -- no reader's lease ends before rm
    left_reader = false
    if x < e + keep then                          -- the hash lives until x at least
      x = e + 2 * keep
      put('x', x)
      ttl = x - now
    end
  end
  if h[4] or keeps == 'r' then put('n', n > 0 and n); put('rm', n > 0 and rm) end
end

-- The first waiting writer whose intent is live (those that lapsed are
-- dropped), as in acquire.lua.
local function head()
  while true do
    local q = redis.call('ZRANGE', queue, 0, 0)
    if not q[1] then
      if qe > 0 then qe = 0; put('qe', false) end
      return nil
    end
    if tonumber(redis.call('HGET', hash, 'i:' .. q[1]) or 0) > now then return q[1] end
    redis.call('ZREM', queue, q[1])
    put('i:' .. q[1], false)
  end
end

-- Live readers, counted (reader fields whose lease ran out are dropped).
local function live()
  if n == 0 or rm > now then return n end
  local all, dead = redis.call('HGETALL', hash), {}
  n, rm = 0, 0
  for i = 1, #all, 2 do
    local k = all[i]
    if string.sub(k, 1, 2) == 'r:' and upd[k] ~= false then
      local e = tonumber(upd[k] or all[i + 1])
      if e <= now then dead[#dead + 1] = k
      else
        n = n + 1
        if rm == 0 or e < rm then rm = e end
      end
    end
  end
  for i = 1, #dead do put(dead[i], false) end
  put('n', n > 0 and n); put('rm', n > 0 and rm)
  return n
end

if changed and not writer then
  -- Who may proceed now? Only they are told.
  local first = qe > now and head()
  local cnt = (first or upgrader or readers_wait or (left_reader and rt > now)) and live() or n
  if left_reader and rt > now and cnt == 0 then rt = 0; put('rt', false) end   -- turn over
  local readers_go, go = false, nil
  if readers_wait and (rt > now or not first) then
    readers_go, go = true, first
  elseif first and rt <= now then
    if cnt == 0 then
      go = first
    elseif cnt == 1 and upgrader then
      local o = redis.call('HMGET', hash, 'r:' .. upgrader, 'i:' .. upgrader)
      if tonumber(o[1] or 0) > now and tonumber(o[2] or 0) > now then go = upgrader end
    end
  end
  -- No writer holds or waits: readers who waited wait for no one, and their
  -- mark must not start a readers' turn at a later writer's release.
  if not first and rw > 0 then rw = 0; put('rw', false) end
  if readers_go then redis.call('PUBLISH', hash .. ':c', 'r') end
  if go then redis.call('PUBLISH', hash .. ':c:' .. go, 'w') end
end

-- Free or not, the hash stays (the last token and the owners' s: fields)
-- until x at least, which is raised if it ends within keep of now, or of
-- the lease end of another writer that holds: the record this call wrote
-- lives keep at least, whoever holds the lock and whatever becomes of them
-- (verify/FINDINGS.md F5).
local e = writer and wend > now and wend or now
if x < e + keep then
  x = e + 2 * keep
  put('x', x)
  ttl = x - now
end
-- z: no intent, mark or turn ends after it
local zz = math.max(qe, rt, rw)
if zz > now then
  if zz ~= tonumber(z or 0) then put('z', zz) end
elseif z then
  put('z', false)
end
local set, del = {}, {}
for k, v in pairs(upd) do
  if v then set[#set + 1] = k; set[#set + 1] = v else del[#del + 1] = k end
end
if #set > 0 then redis.call('HSET', hash, unpack(set)) end
for i = 1, #del, 1000 do redis.call('HDEL', hash, unpack(del, i, math.min(i + 999, #del))) end
if ttl then redis.call('PEXPIRE', hash, ttl) end
return held
