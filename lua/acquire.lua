-- rwlock protocol 3: take a read or a write lock, or say how long to wait.
--
-- KEYS[1]  <prefix>:{<name>}    hash: the lock (fields: docs/protocol.md 3.3)
-- KEYS[2]  <prefix>:{<name>}:q  sorted set: waiting writers, first come first
--                               served (score: arrival, µs)
-- ARGV[1]  owner: a string unique to the holder
-- ARGV[2]  seq: the request's place in its owner's order, a decimal
--          integer >= 1 without leading zeros that grows with every
--          acquire and release the owner sends (docs/protocol.md 4.1). Field s:<owner> keeps the
--          newest this lock ran; a request whose seq is not above it is
--          stale: it changes nothing and is answered with an error reply
--          that starts RWLOCK_STALE. Otherwise seq becomes s:<owner>,
--          whatever the answer.
-- ARGV[3]  what is asked, the caller holding nothing of the lock: "r" the
--          read lock, "w" the write lock; or "u", the write lock by a
--          caller that holds the read lock (an upgrade). A field of the
--          caller's that Redis still has is, with "r" and "w", left over
--          from a release Redis lost (a failover) and is dropped, never
--          taken for an upgrade. With "u", a reader field of the caller's
--          that is gone or lapsed is a read lock lost (lease, eviction,
--          restart): the answer is "" and nothing else changes. Only the
--          owner's newest request can say so (ARGV[2]).
-- ARGV[4]  lease, ms
-- ARGV[5]  how long a waiting caller's mark lasts, ms; "0" or absent when
--          the caller will not wait. A waiting writer's mark is its place in KEYS[2]
--          with its intent, field i:<owner>; a waiting reader's is field
--          m:<owner>, and raises field rw, which gives readers a turn (rt)
--          when the writer they wait for leaves. release.lua "q" takes
--          either back.
-- ARGV[6]  keep, ms: the last write token, and s:<owner>, outlive the lock
--          by keep at least; absent: 600000 (what every client sends)
--
-- The protocol version is the script's own (V): every argument costs Redis
-- some 1 100 instructions a call, so what is the same for every caller is
-- not sent (docs/protocol.md 6).
--
-- Returns an integer token >= 0 when granted (a read grant returns the last
-- write token, 0 if none is kept); an integer -ms <= -1 when busy, ms being
-- the longest the caller should sleep before trying again (a release that
-- lets it proceed tells it sooner: a reader on <KEYS[1]>:c, a writer on
-- <KEYS[1]>:c:<owner>); a string, `other`, when
-- the caller holds a read lock and wants the write lock while `other`, also a
-- reader, waits to do the same: one of them must give up; the empty string
-- when the caller upgrades ("u") a read lock Redis no longer has for
-- it: that read lock was lost. Publishes only when its "-" clean-up let go
-- of what a lost release should have, to the waiter that may now proceed.
--
-- The hash lives until x at least, keep past every record, lease and mark
-- in it; a call that would leave it shorter raises x and the TTL (to e + 2
-- keep, so that most calls need not). A writer's grant raises only the TTL,
-- to 2 x max(keep, lease) once it is below max(keep, lease): a TTL is never
-- lowered where something in the hash needs it, so every owner's record
-- outlives its last request by keep, whatever a writer does
-- (verify/FINDINGS.md F5). The writer's lease is therefore not the TTL: it
-- ends LEASE ms after its token's time (field f, µs), or where field we
-- ("<token> <end ms>") says, if we belongs to that token: a grant with
-- another lease or a token above the clock, and every renewal, write it
-- (docs/protocol.md 3.3). A
-- writer whose lease has ended holds nothing: the general path removes its
-- w. (The token is max(last + 1, TIME): a lease end taken from it is never
-- early.)
-- Times are ms of Redis's clock (TIME); tokens and queue scores µs. Integers
-- this large must never become strings in Lua (tostring and .. keep 14
-- digits): they go to redis.call as numbers, which Redis formats with %.17g,
-- exact below 2^53. The one exception, a write token taken from TIME, is
-- written as TIME's own seconds then its µs padded to 6 digits: the same
-- decimal digits, without the formatting (%.17g of a 16-digit number costs
-- Redis some 4 000 instructions, a concatenation 600). A write token is
-- max(last + 1, TIME in µs): larger than the last one Redis keeps, and than
-- one a failover lost (section 11 of docs/protocol.md says when).
local V, KEEP, LEASE = '3', ARGV[6] or '600000', 30000
local hash, owner, seq, mode = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local skey = 's:' .. owner
-- seq, checked first (a refused call changes nothing), and s: are decimal
-- integers without leading zeros: compared by length, then as strings (no
-- conversion to a number: exact at any size, and cheaper).
if not string.find(seq, '^[1-9]%d*$') then
  return redis.error_reply('RWLOCK_ARGS seq must be a positive decimal integer, not ' .. seq)
end
-- held: what the caller holds, "-" nothing, "r" the read lock
local held = '-'
if mode == 'u' then mode, held = 'w', 'r'
elseif mode ~= 'r' and mode ~= 'w' then
  return redis.error_reply('RWLOCK_ARGS mode must be r, w or u, not ' .. tostring(mode))
end
-- The lease is checked where it is first used, before anything is written
-- (each check, and each function made, costs Redis CPU on every call).
local BAD_LEASE = 'RWLOCK_ARGS lease must be a number of ms, not '
local h, rkey
if mode == 'r' then
  rkey = 'r:' .. owner
  h = redis.call('HMGET', hash, 'v', 'w', 'f', 'n', 'z', skey, rkey, 'rm', 'm:' .. owner, 'x')
else
  h = redis.call('HMGET', hash, 'v', 'w', 'f', 'n', 'z', skey)
end
if h[1] and h[1] ~= V then
  -- A protocol 2 lock that nobody holds or waits for is taken over, its
  -- last token kept (docs/protocol.md 2.1); any other is refused.
  local t = h[1] == '2' and not h[2] and not h[4] and h[5] and redis.call('TIME')
  if h[1] == '2' and not h[2] and not h[4] and
     (not h[5] or h[5] + 0 <= t[1] * 1000 + t[2] / 1000) then
    redis.call('HSET', hash, 'v', V)
    redis.call('HDEL', hash, 'z')
    h[1], h[5] = V, nil
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
-- A new owner in a hash that has grown by half since its last pruning:
-- owners that hold and wait for nothing lose their s: fields (the rule of
-- docs/protocol.md 3.4), so the hash stays as large as its users.
if not h[6] and h[1] then
  local len = redis.call('HLEN', hash)
  if len >= 48 then
    local sp = tonumber(redis.call('HGET', hash, 'sp') or 32)
    if len >= sp + sp / 2 then
      local all, live, gone = redis.call('HGETALL', hash), {}, {}
      for i = 1, #all, 2 do
        local k, c = all[i], string.sub(all[i], 1, 2)
        if c == 'r:' or c == 'i:' or c == 'm:' then live[string.sub(k, 3)] = true
        elseif k == 'w' or k == 'u' then live[all[i + 1]] = true end
      end
      for i = 1, #all, 2 do
        local k = all[i]
        if string.sub(k, 1, 2) == 's:' and not live[string.sub(k, 3)] then gone[#gone + 1] = k end
      end
      for i = 1, #gone, 1000 do
        redis.call('HDEL', hash, unpack(gone, i, math.min(i + 999, #gone)))
      end
      redis.call('HSET', hash, 'sp', len - #gone)
    end
  end
end
-- The answer to an upgrade whose read lock is gone: recorded, nothing else.
-- The hash, and the record with it, then lives keep at least past now and
-- past wend, another writer's lease end if one holds (x).
local read_lost
if held == 'r' then read_lost = function(wend)
  local t = redis.call('TIME')
  local now, keep = t[1] * 1000 + math.floor(t[2] / 1000), tonumber(KEEP)
  local e = wend and wend > now and wend or now
  local a = {hash, skey, seq}
  if not h[1] then a[4] = 'v'; a[5] = V end
  local grow = tonumber(redis.call('HGET', hash, 'x') or 0) < e + keep
  if grow then a[#a + 1] = 'x'; a[#a + 1] = e + 2 * keep end
  redis.call('HSET', unpack(a))
  if grow then redis.call('PEXPIRE', hash, e + 2 * keep - now) end
  return ''
end end

-- Fast paths: no writer, and nobody waits or has a turn (no z).
if not h[2] and not h[5] then
  if mode ~= 'r' then
    if not h[4] then                  -- no reader either: the lock is free
      if held == 'r' then return read_lost() end   -- an upgrade: its read was lost
      local t = redis.call('TIME')
      local us = t[2]
      local token = t[1] * 1000000 + us
      -- f: the token as written (see the top). The lease end is written (we)
      -- when it is not the token's time + LEASE: another lease, or a token
      -- above the clock (f + 1; after a fence, far above).
      local f, exact = nil, ARGV[4] ~= '30000'
      if h[3] and h[3] + 1 > token then
        token = h[3] + 1; f = string.format('%.0f', token); exact = true
      else f = #us == 6 and t[1] .. us or t[1] .. string.sub('00000' .. us, -6) end
      -- Only what changes is written: each field costs a search of the hash.
      local a = {hash, 'w', owner, 'f', f, skey, seq}
      if not h[1] then a[8] = 'v'; a[9] = V end
      local k, lease = ARGV[6] and tonumber(ARGV[6]) or 600000, LEASE
      if exact then
        lease = tonumber(ARGV[4])
        if not lease then return redis.error_reply(BAD_LEASE .. tostring(ARGV[4])) end
        a[#a + 1] = 'we'
        a[#a + 1] = f .. ' ' .. (t[1] * 1000 + math.floor(us / 1000) + lease)
      end
      if lease > k then k = lease end
      redis.call('HSET', unpack(a))
      -- Raised, never lowered: every record in the hash outlives keep.
      if redis.call('PTTL', hash) < k then redis.call('PEXPIRE', hash, 2 * k) end
      return token
    end
  else
    local t = redis.call('TIME')
    local us = t[2] + 0
    local now = t[1] * 1000 + (us - us % 1000) / 1000
    local keep = KEEP + 0
    local e = now + ARGV[4]           -- a lease that is no number: a Lua error, nothing written
    -- The hash lives at least keep past every lease in it: until x.
    local x = (not h[10] or h[10] - keep < e) and e + 2 * keep
    local a
    if h[7] then                      -- a reader again: a new lease
      a = {hash, skey, seq, rkey, e}
      if h[8] and h[8] + 0 > e then a[6] = 'rm'; a[7] = e end   -- a shorter one
    elseif h[4] then                  -- rm: no reader's lease ends before it
      a = {hash, skey, seq, rkey, e, 'n', h[4] + 1}
      if not h[8] or h[8] + 0 > e then a[8] = 'rm'; a[9] = e end
    elseif h[1] then                  -- the first reader
      a = {hash, skey, seq, rkey, e, 'n', 1, 'rm', e}
    else                              -- ... of a new hash
      a = {hash, 'v', V, skey, seq, rkey, e, 'n', 1, 'rm', e}
    end
    if x then a[#a + 1] = 'x'; a[#a + 1] = x end
    redis.call('HSET', unpack(a))
    if x then redis.call('PEXPIRE', hash, x - now) end
    if h[9] then                      -- it waited: in now (mc counts the marks)
      redis.call('HDEL', hash, 'm:' .. owner)
      if redis.call('HINCRBY', hash, 'mc', -1) <= 0 then redis.call('HDEL', hash, 'mc') end
    end
    return h[3] and h[3] + 0 or 0
  end
end

-- The general path: a writer holds; writers waiting, readers waiting or in
-- their turn; readers in the way of a writer; an upgrade.
local queue, ikey, mkey = KEYS[2], 'i:' .. owner, 'm:' .. owner
rkey = rkey or 'r:' .. owner
local g = redis.call('HMGET', hash, 'rm', 'qe', 'rt', 'rw', 'u', ikey, rkey, mkey, 'mc', 'x', 'we')
local t = redis.call('TIME')
local sec, us = tonumber(t[1]), tonumber(t[2])
local now = sec * 1000 + math.floor(us / 1000)
local lease, mark, keep = tonumber(ARGV[4]), tonumber(ARGV[5] or 0), tonumber(KEEP)
if not lease then return redis.error_reply(BAD_LEASE .. tostring(ARGV[4])) end
local n, rm, x, z = tonumber(h[4] or 0), tonumber(g[1] or 0), tonumber(g[10] or 0), h[5]
local qe, rt, rw, upgrader = tonumber(g[2] or 0), tonumber(g[3] or 0), tonumber(g[4] or 0), g[5]
local myread, myintent = tonumber(g[7] or 0), g[6] and tonumber(g[6])

-- Changes to the hash, written at the end by one HSET and one HDEL.
local upd, ttl = {}, nil
local function put(k, v) upd[k] = v end          -- v false: delete the field
put(skey, seq)                                    -- whatever the answer

-- The writer, if its lease has not ended (see the top): its lease end, we.
-- One whose lease ended holds nothing; its w goes.
local writer, wend = h[2], 0
if writer then
  local e = g[11] and string.find(g[11], ' ', 1, true)
  if e and string.sub(g[11], 1, e - 1) == h[3] then wend = tonumber(string.sub(g[11], e + 1))
  elseif h[3] then wend = math.floor(tonumber(h[3]) / 1000) + LEASE
  else wend = now + redis.call('PTTL', hash) end   -- no token: a hash written by hand; its TTL
  if wend <= now then
    writer = nil
    put('w', false); put('we', false)
  end
end

-- An upgrade ("u") whose reader field is gone or lapsed: the read
-- lock was lost (its lease ran out, or Redis lost it). Said so, and nothing
-- changes: never granted as if the read had been held throughout. The
-- caller reports the loss and, if it still wants the lock, asks again
-- holding nothing ("-").
if held == 'r' and writer ~= owner and myread <= now then
  return read_lost(writer and wend)
end

local function raise(e)
  -- The hash must outlive e, and a writer's lease, by keep (x).
  if writer and wend > e then e = wend end
  if x < e + keep then x = e + 2 * keep; put('x', x); ttl = x - now end
end
local function commit()
  -- z: no intent, mark or turn ends after it
  local zz = math.max(qe, rt, rw)
  if zz > now then
    if zz ~= tonumber(z or 0) then put('z', zz) end
  elseif z then
    put('z', false)
  end
  if not h[1] then put('v', V) end
  local set, del = {}, {}
  for k, v in pairs(upd) do
    if v then set[#set + 1] = k; set[#set + 1] = v else del[#del + 1] = k end
  end
  if #set > 0 then redis.call('HSET', hash, unpack(set)) end
  if #del > 0 then redis.call('HDEL', hash, unpack(del)) end
  if ttl then redis.call('PEXPIRE', hash, ttl) end
end

-- A reader field of the caller's that the caller says it does not hold: a
-- release Redis lost (a failover) left it. Gone at once (others() reads the
-- hash), so that it neither passes for an upgrade nor keeps the caller
-- ahead of waiting writers.
local cleaned = false                 -- the clean-up below freed the lock
if held == '-' and g[7] then
  redis.call('HDEL', hash, rkey)
  n = n - 1
  put('n', n > 0 and n)
  if n == 0 then put('rm', false); cleaned = true end
  myread = 0
  g[7] = false
end
-- Nor does a caller holding nothing wait to upgrade.
if held == '-' and upgrader == owner then upgrader = nil; put('u', false) end
-- Nor does it hold the write lock: a writer field of its own is left over
-- from a release Redis lost (a failover after it), and goes as that release
-- would have gone (the last token f stays). Else the caller would be
-- "granted" the old token again, or a read lock beside its own write lock
-- (verify/FINDINGS.md F3).
if held == '-' and writer == owner then
  writer = nil
  put('w', false); put('we', false)           -- as its release: f stays
  cleaned = true
end

-- The first waiting writer whose intent is live (those that lapsed are
-- dropped), its intent end, and whether another writer waits behind it.
local function head()
  while true do
    local q = redis.call('ZRANGE', queue, 0, 1)
    if not q[1] then
      if qe > 0 then qe = 0; put('qe', false) end
      return nil
    end
    local e
    if q[1] == owner then e = myintent or 0
    else e = tonumber(redis.call('HGET', hash, 'i:' .. q[1]) or 0) end
    if e > now then return q[1], e, q[2] ~= nil end
    redis.call('ZREM', queue, q[1])
    put('i:' .. q[1], false)
    if q[1] == owner then myintent = nil end
  end
end

-- Live readers other than the caller, and a time before which none of them
-- lapses. Reader fields whose lease ran out are dropped, but only looked for
-- once rm (no reader's lease ends before it) says one may have.
local function others()
  if n == 0 then return 0, 0 end
  if rm <= now then
    local all, dead = redis.call('HGETALL', hash), {}
    n, rm = 0, 0
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'r:' then
        local e = tonumber(all[i + 1])
        if e <= now then dead[#dead + 1] = all[i]
        else
          n = n + 1
          if rm == 0 or e < rm then rm = e end
        end
      end
    end
    for i = 1, #dead, 1000 do
      redis.call('HDEL', hash, unpack(dead, i, math.min(i + 999, #dead)))
    end
    if myread <= now then myread = 0; g[7] = false end
    put('n', n > 0 and n); put('rm', n > 0 and rm)
  end
  return n - (myread > now and 1 or 0), rm
end

local function busy(until_ms)
  -- The clean-up above let go of what a lost release should have (the
  -- caller's last reader field, or its writer field) while others wait:
  -- told as that release would have told them (verify/FINDINGS.md F2). A
  -- waiter woken for nothing only tries again.
  if cleaned and not writer then
    local first = head()
    if first and first ~= owner then redis.call('PUBLISH', hash .. ':c:' .. first, 'w')
    elseif not first and rw > now then redis.call('PUBLISH', hash .. ':c', 'r') end
  end
  if mark > 0 then
    local e = now + mark
    if mode == 'r' then
      put(mkey, e)                    -- its own mark, for withdrawing it
      if not g[8] then                -- mc counts the marks in the hash
        g[8] = e; put('mc', tonumber(g[9] or 0) + 1)
      end
      if e > rw then rw = e; put('rw', e) end
    else
      -- Always (back) in the queue when it renews its intent. A live
      -- intent keeps its place (NX; should the queue key alone have gone,
      -- it is back in, last); a lapsed or absent one has lost its place:
      -- to the back, as a newcomer.
      if myintent and myintent > now then
        redis.call('ZADD', queue, 'NX', sec * 1000000 + us, owner)
      else
        redis.call('ZADD', queue, sec * 1000000 + us, owner)
      end
      put(ikey, e)
      if e > qe then qe = e; put('qe', e) end
      -- The queue outlives every intent in it.
      redis.call('PEXPIRE', queue, qe - now)
    end
    raise(e)
  else
    raise(now)                        -- the record lives keep at least (x)
  end
  commit()
  return math.min(now - until_ms, -1)
end

-- A writer holds: when its lease ends.
local function writer_end() return wend end

if mode == 'r' then
  if writer and writer ~= owner then return busy(writer_end()) end
  -- Once a writer waits, new readers queue behind it, except in the turn
  -- that readers who waited get when a writer leaves.
  local waiting = qe > now
  if waiting and not writer and rt <= now and myread <= now then
    local first, e = head()
    if first then return busy(e) end
    waiting = false
  end
  -- No writer holds or waits: the readers' marks are moot, and must not start
  -- a turn at a later writer's release. If they waited for the writer field
  -- the clean-up above dropped, they are told, as its lost release would
  -- have told them (verify/FINDINGS.md F2-failover).
  if rw > 0 and not writer and not waiting then
    if cleaned and rw > now then redis.call('PUBLISH', hash .. ':c', 'r') end
    rw = 0; put('rw', false)
  end
  local e = now + lease
  if not g[7] then n = n + 1; put('n', n) end
  -- rm: no reader's lease ends before it, the caller's new one included
  -- (a lease can be shorter than the one it replaces).
  if n == 1 or e < rm then put('rm', e) end
  put(rkey, e)
  if g[8] then                                -- it waited: in now
    local mc = tonumber(g[9] or 0) - 1
    put(mkey, false); put('mc', mc > 0 and mc)
  end
  raise(e)
  commit()
  return tonumber(h[3] or 0)
end

-- the write lock
local first, fe, more
if qe > now and writer ~= owner then first, fe, more = head() end
local behind = first and first ~= owner      -- another writer came first
if writer then
  if writer ~= owner then
    local e = writer_end()
    return busy(behind and math.min(e, fe) or e)
  end
  -- the writer again: same token, a new lease
  wend = now + lease
  put('we', h[3] .. ' ' .. wend)
  raise(wend)
  commit()
  return tonumber(h[3])
end
-- Readers who waited for the last writer go first.
if rt > now then return busy(behind and math.min(rt, fe) or rt) end
local cnt, until_ms = others()
local mine = myread > now                     -- an upgrade
if cnt > 0 then
  if mine and upgrader and upgrader ~= owner then
    local o = redis.call('HMGET', hash, 'r:' .. upgrader, 'i:' .. upgrader)
    if tonumber(o[1] or 0) > now and tonumber(o[2] or 0) > now then
      raise(now)                      -- the record lives keep at least (x)
      commit()
      return upgrader
    end
  end
  if mine and mark > 0 and upgrader ~= owner then put('u', owner) end
  return busy(behind and math.min(until_ms, fe) or until_ms)
end
-- Writers are served in their order of arrival; a reader upgrading goes
-- first (the writers before it wait for its read lock).
if behind and not mine then return busy(fe) end

local token, exact = sec * 1000000 + us, lease ~= LEASE
if h[3] and tonumber(h[3]) + 1 > token then
  token = tonumber(h[3]) + 1; put('f', string.format('%.0f', token)); exact = true
else put('f', #t[2] == 6 and t[1] .. t[2] or t[1] .. string.sub('00000' .. t[2], -6)) end
put('w', owner)
-- the lease end, unless it is the token's time + LEASE (as in the fast path)
if exact then put('we', upd.f .. ' ' .. (now + lease)) else put('we', false) end
raise(now + lease)                            -- the lease, and the records, keep past it
if g[7] then                                  -- an upgrade holds the write lock only
  n = n - 1
  put(rkey, false); put('n', n > 0 and n); put('rm', n > 0 and rm)
end
if upgrader == owner then put('u', false) end
if g[6] then
  redis.call('ZREM', queue, owner)
  put(ikey, false)
  -- Nobody waits any more: say so, so that the next calls skip the queue.
  if (first == owner and not more) or
     (first ~= owner and redis.call('EXISTS', queue) == 0) then
    qe = 0; put('qe', false)
  end
end
commit()
return token
