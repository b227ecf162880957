# The load test (test/load.py) in quorum mode: rwlock.redis_url lists three
# independent masters, and one of them is killed (SHUTDOWN NOSAVE) halfway
# through: no lost update and no torn read (the counter equals the writes
# done under granted locks), every session goes on with the two left. An
# unlock may return false there: a hold granted by the killed master and one
# other can no longer be confirmed on a majority (the WARNING says so).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my @r = quorum_start(3);
my $url = quorum_url(@r);
my $node = new_node('qload', port => $r[0], preload => 1, lease => '3s',
	conf => "rwlock.redis_url = '$url'\nrwlock.quorum_max_lease = '3s'\n"
	  . "max_connections = 30\n");
sleep 4.5;    # the masters count once up for rwlock.quorum_max_lease
my $ok = run_load($node,
	RWLOCK_URL => $url,
	FAILOVER_CMD => "$REDIS_CLI -p $r[1] SHUTDOWN NOSAVE >/dev/null 2>&1",
	DURATION => '12',
	SESSIONS => '6',
	MIN_RATE => '20');
ok($ok, 'load.py over a quorum of three, one master killed halfway: no lost update');
is(redis_cli($r[1], 'PING'), '', 'that master was down');
done_testing();
