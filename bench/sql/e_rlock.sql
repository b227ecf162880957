SELECT redis_rlock('bench_e');
SELECT redis_unlock('bench_e');
