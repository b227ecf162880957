SELECT redis_wlock('bench_b' || :client_id::int);
SELECT redis_unlock('bench_b' || :client_id::int);
