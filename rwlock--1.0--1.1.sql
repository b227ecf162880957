/* rwlock--1.0--1.1.sql: from 1.0 to 1.1. */
\echo Use "ALTER EXTENSION rwlock UPDATE TO '1.1'" to load this file. \quit

-- Like pg_locks, the views are readable by every role: redis_held_locks
-- shows only the session's own holds, redis_locks names and owner ids.
GRANT SELECT ON redis_held_locks TO PUBLIC;
GRANT SELECT ON redis_locks TO PUBLIC;
