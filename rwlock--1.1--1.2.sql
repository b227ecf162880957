/* rwlock--1.1--1.2.sql: from 1.1 to 1.2. */
\echo Use "ALTER EXTENSION rwlock UPDATE TO '1.2'" to load this file. \quit

-- A description for every function and view (\df+, \dv+, obj_description).
COMMENT ON FUNCTION redis_wlock(text) IS
  'take a session-level Redis write lock, waiting for it; returns its fencing token';
COMMENT ON FUNCTION redis_rlock(text) IS
  'take a session-level Redis read lock, waiting for it; returns the latest write token';
COMMENT ON FUNCTION redis_wlock_xact(text) IS
  'take a transaction-level Redis write lock, waiting for it; returns its fencing token';
COMMENT ON FUNCTION redis_rlock_xact(text) IS
  'take a transaction-level Redis read lock, waiting for it; returns the latest write token';
COMMENT ON FUNCTION redis_try_wlock(text, interval) IS
  'take a session-level Redis write lock if it is free within the wait; true if taken';
COMMENT ON FUNCTION redis_try_rlock(text, interval) IS
  'take a session-level Redis read lock if it is free within the wait; true if taken';
COMMENT ON FUNCTION redis_try_wlock_xact(text, interval) IS
  'take a transaction-level Redis write lock if it is free within the wait; true if taken';
COMMENT ON FUNCTION redis_try_rlock_xact(text, interval) IS
  'take a transaction-level Redis read lock if it is free within the wait; true if taken';
COMMENT ON FUNCTION redis_unlock(text) IS
  'release the most recent session-level hold of a Redis lock; false if none was held';
COMMENT ON FUNCTION redis_unlock_all() IS
  'release every session-level Redis lock hold of this session; returns how many';
COMMENT ON FUNCTION redis_held_locks_fn() IS
  'the Redis lock holds of this session (the function behind redis_held_locks)';
COMMENT ON VIEW redis_held_locks IS
  'the Redis lock holds of this session: name, mode, level, depth, token, lease state';
COMMENT ON FUNCTION redis_lock_info(text) IS
  'the state of one Redis lock as Redis has it now: holders, waiting writers, lease left';
COMMENT ON FUNCTION redis_connection_info() IS
  'the Redis servers this session talks to: connected, listening, round-trip time, holds';
COMMENT ON FUNCTION redis_renew() IS
  'renew the leases of this session''s Redis locks now; returns how many were renewed';
COMMENT ON FUNCTION redis_locks_fn() IS
  'every Redis lock hold of every session of this server (the function behind redis_locks)';
COMMENT ON VIEW redis_locks IS
  'every Redis lock hold of every session of this server, like pg_locks (needs the keeper)';

-- Statistics per database (stats.c), as pg_stat_database is: filled only
-- with rwlock in shared_preload_libraries. wait_time in milliseconds.
CREATE FUNCTION redis_lock_stats_fn(
    OUT datid oid,
    OUT write_session bigint, OUT write_xact bigint,
    OUT read_session bigint, OUT read_xact bigint, OUT try_failed bigint,
    OUT waits bigint, OUT wait_time double precision,
    OUT wait_time_max double precision, OUT timeouts bigint,
    OUT cancels bigint, OUT deadlocks bigint, OUT upgrade_conflicts bigint,
    OUT holds_lost bigint, OUT errors_connection bigint,
    OUT errors_permission bigint, OUT errors_other bigint,
    OUT renewals bigint, OUT reconnects bigint, OUT failovers bigint,
    OUT stats_reset timestamptz)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redis_lock_stats AS
  SELECT s.datid, d.datname, s.write_session, s.write_xact, s.read_session,
         s.read_xact, s.try_failed, s.waits, s.wait_time, s.wait_time_max, s.timeouts,
         s.cancels, s.deadlocks, s.upgrade_conflicts, s.holds_lost,
         s.errors_connection, s.errors_permission, s.errors_other,
         s.renewals, s.reconnects, s.failovers, s.stats_reset
    FROM redis_lock_stats_fn() s LEFT JOIN pg_database d ON d.oid = s.datid;
GRANT SELECT ON redis_lock_stats TO PUBLIC;
COMMENT ON FUNCTION redis_lock_stats_fn() IS
  'Redis lock statistics per database (the function behind redis_lock_stats)';
COMMENT ON VIEW redis_lock_stats IS
  'Redis lock statistics per database: acquisitions, waits, timeouts, losses, errors, renewals';

-- Like pg_stat_reset: the current database's counters; superusers only
-- unless granted.
CREATE FUNCTION redis_lock_stats_reset() RETURNS void
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION redis_lock_stats_reset() FROM PUBLIC;
COMMENT ON FUNCTION redis_lock_stats_reset() IS
  'zero the Redis lock statistics of the current database';

-- Unlock naming the mode, as pg_advisory_unlock and pg_advisory_unlock_shared
-- each name theirs: the most recent session-level hold of that mode.
CREATE FUNCTION redis_unlock(name text, mode text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'redis_unlock_mode' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redis_unlock(text, text) IS
  'release the most recent session-level hold of a Redis lock in the given mode (read or write)';

-- redis_locks shows waiters too (granted = false, since waitstart), and the
-- database of every row, as pg_locks does (issue 29).
DROP VIEW redis_locks;
DROP FUNCTION redis_locks_fn();
CREATE FUNCTION redis_locks_fn(
    OUT pid integer, OUT name text, OUT mode text, OUT level text,
    OUT token bigint, OUT acquired timestamptz, OUT lease_until timestamptz,
    OUT lease_state text, OUT owner text, OUT granted boolean,
    OUT waitstart timestamptz, OUT datid oid)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME', 'redis_locks_all' LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redis_locks AS
  SELECT l.pid, l.name, l.mode, l.level, l.token, l.acquired, l.lease_until,
         l.lease_state, l.owner, l.granted, l.waitstart, l.datid, d.datname
    FROM redis_locks_fn() l LEFT JOIN pg_database d ON d.oid = l.datid;
GRANT SELECT ON redis_locks TO PUBLIC;
COMMENT ON FUNCTION redis_locks_fn() IS
  'every Redis lock hold and wait of every session of this server (the function behind redis_locks)';
COMMENT ON VIEW redis_locks IS
  'every Redis lock hold and wait of every session of this server, like pg_locks (needs the keeper)';

-- Like pg_blocking_pids, for Redis lock waits: this server's sessions that
-- the given pid waits for; and the owner ids of all it waits for, wherever
-- they are (other servers, clients).
CREATE FUNCTION redis_blocking_pids(pid integer) RETURNS integer[]
  AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION redis_blocking_pids(integer) IS
  'the sessions of this server that hold (or queue ahead for) the Redis lock the given pid waits for';
CREATE FUNCTION redis_blocking_owners(pid integer) RETURNS text[]
  AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION redis_blocking_owners(integer) IS
  'the owner ids of everything (sessions of any server, clients) the given pid waits for in its Redis lock wait';

-- Several names at once, all or none (issue 40, SPEC 16): the names are
-- taken in the canonical order (docs/protocol.md section 19), each as a
-- hold of its own; the lock forms return the tokens in the array's order.
-- A single name still resolves to the text forms: redis_wlock('a') is
-- redis_wlock(text); an array is written ARRAY['a', 'b'] or '{a,b}'::text[].
CREATE FUNCTION redis_wlock(names text[]) RETURNS bigint[]
  AS 'MODULE_PATHNAME', 'redis_wlock_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_rlock(names text[]) RETURNS bigint[]
  AS 'MODULE_PATHNAME', 'redis_rlock_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_wlock_xact(names text[]) RETURNS bigint[]
  AS 'MODULE_PATHNAME', 'redis_wlock_xact_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_rlock_xact(names text[]) RETURNS bigint[]
  AS 'MODULE_PATHNAME', 'redis_rlock_xact_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_wlock(names text[], wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME', 'redis_try_wlock_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_rlock(names text[], wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME', 'redis_try_rlock_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_wlock_xact(names text[], wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME', 'redis_try_wlock_xact_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_rlock_xact(names text[], wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME', 'redis_try_rlock_xact_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redis_wlock(text[]) IS
  'take session-level Redis write locks on all the names or none, waiting; returns their fencing tokens';
COMMENT ON FUNCTION redis_rlock(text[]) IS
  'take session-level Redis read locks on all the names or none, waiting; returns their latest write tokens';
COMMENT ON FUNCTION redis_wlock_xact(text[]) IS
  'take transaction-level Redis write locks on all the names or none, waiting; returns their fencing tokens';
COMMENT ON FUNCTION redis_rlock_xact(text[]) IS
  'take transaction-level Redis read locks on all the names or none, waiting; returns their latest write tokens';
COMMENT ON FUNCTION redis_try_wlock(text[], interval) IS
  'take session-level Redis write locks on all the names if they are free within the wait, else none; true if taken';
COMMENT ON FUNCTION redis_try_rlock(text[], interval) IS
  'take session-level Redis read locks on all the names if they are free within the wait, else none; true if taken';
COMMENT ON FUNCTION redis_try_wlock_xact(text[], interval) IS
  'take transaction-level Redis write locks on all the names if they are free within the wait, else none; true if taken';
COMMENT ON FUNCTION redis_try_rlock_xact(text[], interval) IS
  'take transaction-level Redis read locks on all the names if they are free within the wait, else none; true if taken';

-- Several names let go at once (issue 40): each name once, as
-- redis_unlock(name) (or redis_unlock(name, mode)) would, in the reverse
-- canonical order, the releases pipelined; each name's answer in the
-- array's order.
CREATE FUNCTION redis_unlock(names text[]) RETURNS boolean[]
  AS 'MODULE_PATHNAME', 'redis_unlock_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_unlock(names text[], mode text) RETURNS boolean[]
  AS 'MODULE_PATHNAME', 'redis_unlock_mode_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redis_unlock(text[]) IS
  'release the most recent session-level hold of each Redis lock named; false for each that was not held';
COMMENT ON FUNCTION redis_unlock(text[], text) IS
  'release the most recent session-level hold of each Redis lock named in the given mode (read or write); false for each that was not held';
