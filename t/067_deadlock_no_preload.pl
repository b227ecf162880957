# Deadlock detection without the library in shared_preload_libraries (SPEC
# 12, issue 37): no waiters' table in shared memory, so a walk learns
# everything from Redis. Two servers share one Redis:
# - a 2-cycle across them ends in exactly one 40P01 within
#   deadlock_timeout + about a second;
# - a cycle whose walker waits behind a queue of writers is found, and
#   none of the queued writers fails;
# - cost: 40 writers wait behind a holder of another client (an owner id
#   that is not pg:, so every walk meets a foreign owner and is repeated);
#   the calls of deadlock detection (checkin.lua, waits.lua) per waiter
#   and per deadlock_timeout stay near one. A walk behind N queued writers
#   reads no wait key of theirs (waits.lua leaves them out, walk.c): before
#   that, each walk read up to N of them, several calls per waiter per
#   deadlock_timeout: 7.6 here (1.8 since), and 47 with 200 waiters
#   (1.1 since; bench/deadlock_cost.sh with BENCH_PRELOAD=0).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockWaits;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $root = "$FindBin::RealBin/..";
my $port = redis_start();
my $conf = "rwlock.key_prefix = 'nopre'\ndeadlock_timeout = '1s'\nmax_connections = 60\n";
my $n1 = new_node('np1', port => $port, lease => '10s', conf => $conf);
my $n2 = new_node('np2', port => $port, lease => '10s', conf => $conf);
is($n1->safe_psql('postgres', 'SHOW shared_preload_libraries'), '', 'not preloaded');

# ---- a 2-cycle across the two servers ----
{
	my $a = holding($n1, 'np_a');
	my $b = holding($n2, 'np_b');
	sq_send($a, "SELECT redis_wlock_xact('np_b') > 0");
	sleep 0.3;
	my $t1 = sq_send($b, "SELECT redis_wlock_xact('np_a') > 0");
	my ($st, $err, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
	is_deeply([ sort @$st ], [ '40P01', 'granted' ], '2-cycle: exactly one 40P01, the other its lock');
	my ($vi) = grep { $st->[$_] eq '40P01' } 0 .. 1;
	my $broken = defined $vi ? $ended->[$vi] : 99;
	cmp_ok($broken, '<', 1.0 + 1.0 + 1.0, "broken $broken s after the cycle closed (deadlock_timeout 1 s; margin for a loaded machine)");
	$_->quit for ($a, $b);
}

# ---- a cycle behind a queue of writers ----
{
	my $b = holding($n1, 'nq_b');
	my $a = holding($n2, 'nq_a');
	my @q = map { session($_ % 2 ? $n1 : $n2) } 1 .. 8;
	sq($_, 'BEGIN') for @q;
	sq_send($_, "SELECT redis_wlock_xact('nq_b') > 0") for @q;
	sleep 0.5;
	sq_send($a, "SELECT redis_wlock_xact('nq_b') > 0");    # last in the queue
	sleep 0.3;
	my $t1 = sq_send($b, "SELECT redis_wlock_xact('nq_a') > 0");
	my ($st, undef, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
	is(scalar(grep { $_ eq '40P01' } @$st), 1, 'a cycle behind 8 queued writers: exactly one 40P01')
	  or diag explain $st;
	my ($vi) = grep { $st->[$_] eq '40P01' } 0 .. 1;
	my $broken = defined $vi ? $ended->[$vi] : 99;
	cmp_ok($broken, '<', 1.0 + 1.0 + 1.0, "broken $broken s after it closed");
	# B's victimhood or grant frees nq_b in turn: the queue drains, no 40P01.
	my ($qs) = finish_all(\@q, 30, time);
	is(scalar(grep { $_ eq '40P01' } @$qs), 0, 'none of the queued writers failed') or diag explain $qs;
	$_->quit for ($a, $b, @q);
}

# ---- cost: many writers behind a foreign holder ----
{
	my $waiters = 40;
	my $acquire = slurp_file("$root/lua/acquire.lua");
	redis_cli($port, 'EVAL', $acquire, 2, 'nopre:{np_many}', 'nopre:{np_many}:q',
		'py:tap-holder', 1, 'w', 600000);
	is(redis_cli($port, 'HGET', 'nopre:{np_many}', 'w'), 'py:tap-holder', 'a client holds np_many');
	my @s = map { session($_ % 2 ? $n1 : $n2) } 1 .. $waiters;
	sq_send($_, "SELECT redis_wlock('np_many') > 0") for @s;
	sleep 4;    # every waiter has walked once, and again
	my %sha;
	for my $f (qw(checkin waits))
	{
		my $compact = qx{perl "$root/tools/embed_lua.pl" --compact "$root/lua/$f.lua" | sha1sum};
		$sha{ substr($compact, 0, 40) } = $f;
	}
	my $mon = '';
	my $window = 5;
	IPC::Run::run([ 'timeout', $window, $REDIS_CLI, '-p', $port, 'MONITOR' ], '>', \$mon);
	my %calls = (checkin => 0, waits => 0);
	for my $line (split /\n/, $mon)
	{
		next if $line =~ / \[\d+ lua\] /;    # a script's own commands
		next unless $line =~ /"evalsha" "([0-9a-f]{40})"/i;
		$calls{ $sha{$1} }++ if $sha{$1};
	}
	my $per = ($calls{checkin} + $calls{waits}) / $waiters / $window;
	note("checkin.lua $calls{checkin}, waits.lua $calls{waits} in $window s, $waiters waiters");
	cmp_ok($calls{checkin}, '>', 0, 'the waiters check in (the count is real)');
	cmp_ok($per, "<", 3, sprintf('deadlock detection: %.2f calls per waiter per deadlock_timeout', $per));
	my $waiting = grep { !sq_poll($_) } @s;
	is($waiting, $waiters, 'every waiter still waits');
	# Ended by their backends' end: a wait granted at the DEL would hold
	# the lock for the session, and the others wait on.
	$_->safe_psql('postgres', "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE '%np_many%' AND pid <> pg_backend_pid()")
	  for ($n1, $n2);
	redis_cli($port, 'DEL', 'nopre:{np_many}', 'nopre:{np_many}:q');
	eval { $_->quit } for @s;
}

done_testing();
