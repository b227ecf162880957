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
my $failover = "redis-cli -p $set->{sentinels}[0] SENTINEL FAILOVER $set->{name} >/dev/null";
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ '/usr/bin/python3', "$FindBin::RealBin/../test/load.py" ],
	'>', \$out, '2>', \$err,
	init => sub {
		$ENV{PGHOST} = $node->host;
		$ENV{PGPORT} = $node->port;
		$ENV{PGDATABASE} = 'postgres';
		$ENV{RWLOCK_URL} = $url;
		$ENV{WAIT_REPLICAS} = '1';
		$ENV{FAILOVER_CMD} = $failover;
		$ENV{DURATION} = '16';
		$ENV{SESSIONS} = '6';
		$ENV{MIN_RATE} = '20';
	});
diag $out;
diag $err if $err;
ok($ok, 'load.py through the sentinels, a failover halfway: no lost update');
my $master = sentinel_master($set);
isnt($master, $set->{master}, "the master moved ($set->{master} -> $master)");
done_testing();
