# Statistics that need Redis to misbehave (redis_lock_stats, stats.c), and the
# keeper's log of a hold it finds lost: once per hold. The regress test
# keeper.sql checks the counters a single server moves (acquisitions, failed
# tries, connection errors, the reset).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('stats', port => $port, preload => 1, lease => '3s');

sub stat_of
{
	my ($column, $where) = @_;
	$where //= "datname = 'postgres'";
	return $node->safe_psql('postgres',
		"SELECT coalesce(sum($column), 0) FROM redis_lock_stats WHERE $where");
}

ok( defined wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'rwlock keeper'"
			) eq '1';
		},
		10),
	'the keeper runs');
$node->safe_psql('postgres', 'SELECT redis_lock_stats_reset()');

# A session renews its own leases with redis_renew(): counted in its row.
my $s = session($node);
my ($out) = sq($s, "SELECT redis_wlock('a') > 0, redis_wlock('b') > 0, redis_renew()");
is($out, 't|t|2', 'two holds, renewed by the session');
is(stat_of('renewals'), 2, 'renewals of the session counted in its database');

# The keeper renews them too (a third of the 3 s lease): in database 0's row.
ok( defined wait_until(sub { stat_of('renewals', 'datid = 0') >= 2 }, 10),
	'renewals of the keeper counted in the row of database 0');

# Redis loses one of them: the keeper finds it lost and says so once; the
# session reports it and counts it once, however often it is told.
my $before_log = -s $node->logfile;
redis_cli($port, 'DEL', 'tap_stats:{a}');
ok( defined wait_until(
		sub {
			slurp_file($node->logfile, $before_log) =~
			  /rwlock keeper found Redis lock "a" of process \d+ lost/;
		},
		10),
	'the keeper logs the hold it found lost');
sleep 3;    # more renewal rounds: no second line for the same hold
my @lines = (slurp_file($node->logfile, $before_log) =~
	  /rwlock keeper found Redis lock "a" of process/g);
is(scalar @lines, 1, '... once');
my ($o, $e) = sq($s, "SELECT redis_unlock('a')");
is($o, 'f', 'the session is told: unlock false');
like($e, qr/lost/, '... with a WARNING that it was lost');
sq($s, "SELECT redis_wlock('a') > 0");
sq($s, "SELECT redis_unlock('a')");
is(stat_of('holds_lost'), 1, 'one hold lost, counted once');

# A lost transaction-level lock whose holds interleave with another name's:
# COMMIT warns once, not once per run of its holds.
sq($s, "BEGIN");
sq($s, "SELECT redis_wlock_xact('x'), redis_wlock_xact('y'), redis_wlock_xact('x')");
redis_cli($port, 'DEL', 'tap_stats:{x}');
($o, $e) = sq($s, "SELECT redis_renew()");
like($e, qr/Redis lock "x" was lost/, 'a renewal finds the xact hold lost');
($o, $e) = sq($s, "COMMIT");
my $n = () = $e =~ /Redis lock "x" was lost/g;
is($n, 1, 'COMMIT warns once of the lost lock, its holds interleaved with another name');
is(redis_cli($port, 'HGET', 'tap_stats:{y}', 'w'), '', 'the other name is released at COMMIT');

# A connection Redis drops: the next call connects again, a reconnect.
redis_cli($port, 'CLIENT', 'KILL', 'TYPE', 'normal');
($out) = sq($s, "SELECT redis_wlock('c') > 0");
is($out, 't', 'a lock after Redis dropped the connection');
cmp_ok(stat_of('reconnects'), '>=', 1, 'a reconnect counted');

# Redis stopped: the lock call fails with class 08, counted by class.
redis_sigstop($port);
sq($s, "SET rwlock.command_timeout = '300ms'");
($o, $e) = sq($s, "SELECT redis_wlock('d')");
redis_sigcont($port);
like($e, qr/ERROR:  08006/, 'a stalled Redis: 08006');
cmp_ok(stat_of('errors_connection'), '>=', 1, 'counted as a connection error');
is(stat_of('errors_permission') + stat_of('errors_other'), 0, 'and nothing else');

$node->stop;
done_testing();
