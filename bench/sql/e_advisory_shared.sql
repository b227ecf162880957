SELECT pg_advisory_lock_shared(4343);
SELECT pg_advisory_unlock_shared(4343);
