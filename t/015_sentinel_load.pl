# The load test (test/load.py) through a redis+sentinel:// URL with
# rwlock.wait_replicas = 1 and a SENTINEL FAILOVER halfway through: no lost
# update (the counter equals the writes done under granted, acknowledged
# locks), a few class 08 errors per session at most, every session goes on.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockSentinel;
use PostgreSQL::Test::Utils;
use Test::More;

my $set = sentinel_set_start(down_after => 1000);
my $url = sentinel_url($set);
my $node = new_node('sload', port => $set->{master}, preload => 1, lease => '5s',
	conf => "rwlock.redis_url = '$url'\nmax_connections = 30\n");
my $failover = "$REDIS_CLI -p $set->{sentinels}[0] SENTINEL FAILOVER $set->{name} >/dev/null";
my $ok = run_load($node, RWLOCK_URL => $url, WAIT_REPLICAS => '1',
	FAILOVER_CMD => $failover, DURATION => '16', SESSIONS => '6', MIN_RATE => '20');
ok($ok, 'load.py through the sentinels, a failover halfway: no lost update');
my $master = sentinel_master($set);
isnt($master, $set->{master}, "the master moved ($set->{master} -> $master)");
done_testing();
