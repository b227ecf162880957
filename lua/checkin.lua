-- rwlock protocol 3: a waiter's wait key, written or read (deadlock
-- detection, docs/protocol.md section 18). A script, so that EVAL is all a
-- check-in needs beyond the key commands every script runs (no SET ... GET,
-- which needs Redis 6.2).
--
-- KEYS[1]  <prefix>:wait:{<owner>}: what the owner waits for
-- ARGV[1]  protocol version ("3")
-- ARGV[2]  the value to write, "3 <r|w> <nonce> <lock hash key>"; or ""
--          to read the key only
-- ARGV[3]  its time to live in ms (with a value)
--
-- Returns the key's value before the call (a mark, "!" .. value .. "\n" ..
-- cycle, if another waiter marked this one the victim), or false (nil)
-- when there was none.
local old = redis.call('GET', KEYS[1])
if ARGV[2] ~= '' then
  if string.sub(ARGV[2], 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
    return redis.error_reply('RWLOCK_VERSION ' .. KEYS[1] .. ' is not protocol ' .. ARGV[1])
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return old
