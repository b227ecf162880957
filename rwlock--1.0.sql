/* rwlock--1.0.sql: the SQL interface of rwlock, version 1.0 (README.md, "Functions"). */
\echo Use "CREATE EXTENSION rwlock" to load this file. \quit

CREATE FUNCTION redis_wlock(name text) RETURNS bigint
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_rlock(name text) RETURNS bigint
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_wlock_xact(name text) RETURNS bigint
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_rlock_xact(name text) RETURNS bigint
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_wlock(name text, wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_rlock(name text, wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_wlock_xact(name text, wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_try_rlock_xact(name text, wait interval DEFAULT '0') RETURNS boolean
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_unlock(name text) RETURNS boolean
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION redis_unlock_all() RETURNS integer
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_held_locks_fn(
    OUT name text, OUT mode text, OUT level text, OUT depth integer,
    OUT token bigint, OUT acquired timestamptz, OUT lease_state text)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME', 'redis_held_locks' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE VIEW redis_held_locks AS SELECT * FROM redis_held_locks_fn();

-- The state of one lock as Redis has it now.
CREATE FUNCTION redis_lock_info(name text,
    OUT state text, OUT token bigint, OUT writer text, OUT readers text[],
    OUT waiting text[], OUT lease_left interval)
  RETURNS record
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The Redis servers this session talks to.
CREATE FUNCTION redis_connection_info(
    OUT url text, OUT current boolean, OUT connected boolean,
    OUT listening boolean, OUT rtt_ms double precision, OUT holds integer,
    OUT owner text)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Leases and the server-wide view of holds: keeper.c.

-- Renew every lease this session holds, now; returns how many were renewed
-- and warns about each hold found lost. Needed only without the keeper.
CREATE FUNCTION redis_renew() RETURNS integer
  AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Every Redis lock held by every session of this server, like pg_locks:
-- one row per session, lock name and level. Filled only when rwlock is in
-- shared_preload_libraries (the sessions publish their holds in shared
-- memory for the keeper); empty otherwise.
CREATE FUNCTION redis_locks_fn(
    OUT pid integer, OUT name text, OUT mode text, OUT level text,
    OUT token bigint, OUT acquired timestamptz, OUT lease_until timestamptz,
    OUT lease_state text, OUT owner text)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME', 'redis_locks' LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redis_locks AS SELECT * FROM redis_locks_fn();
