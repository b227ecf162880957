SELECT redis_wlock_xact('bench_c' || :client_id::int);
