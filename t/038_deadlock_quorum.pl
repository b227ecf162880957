# Deadlocks in quorum mode (SPEC 12, issue 29; docs/protocol.md 18 "Quorum
# mode"): the wait keys go to every master, edges count when a majority of
# the masters give them.
#  1. a 2-cycle across two PostgreSQL servers on a quorum of 3 masters is
#     broken within deadlock_timeout + about a second: exactly one 40P01
#     naming the cycle, the other gets its lock (before: both waited until
#     statement_timeout);
#  2. a 3-cycle with one master stopped (a majority still answers): the same;
#  3. no false positive: sessions that race for the same free locks split
#     the masters between them (each granted on some, none on a majority)
#     all the time, which looks like a cycle on a single master: with
#     deadlock_timeout 100 ms over 15 s of it, no deadlock is reported;
#  4. redis_blocking_pids names the blocker in quorum mode too.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use RwlockWaits;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my @ports = quorum_start(3);
my $conf = "rwlock.key_prefix = 'shared'\ndeadlock_timeout = '1s'\nlog_lock_waits = on\n"
  . "statement_timeout = '20s'\n";
my @nodes;
for my $name (qw(q1 q2))
{
	push @nodes, new_node($name, port => $ports[0], preload => 1, lease => '10s',
		conf => "rwlock.redis_url = '" . quorum_url(@ports) . "'\n"
		  . "rwlock.quorum_max_lease = '1s'\n"
		  . "rwlock.command_timeout = '1s'\nrwlock.connect_timeout = '1s'\n" . $conf);
}
my ($n1, $n2) = @nodes;
sleep 1.2;    # the masters count once up for rwlock.quorum_max_lease

# ---- 1. a 2-cycle across two servers ----
{
	my $a = holding($n1, 'q2a');
	my $b = holding($n2, 'q2b');
	my $apid = session_pid($a);
	sq_send($a, "SELECT redis_wlock_xact('q2b') > 0");
	sleep 0.3;
	my $blockers = $n1->safe_psql('postgres',
		"SELECT array_length(redis_blocking_owners($apid), 1)");
	is($blockers, '1', '4. redis_blocking_owners names the one holder in quorum mode');
	my $t1 = sq_send($b, "SELECT redis_wlock_xact('q2a') > 0");
	my ($st, $errs, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
	my ($at) = map { $ended->[$_] } grep { $st->[$_] eq '40P01' } 0 .. 1;
	$at //= 99;
	is_deeply([ sort @$st ], [ '40P01', 'granted' ], '1. quorum 2-cycle across two servers: exactly one 40P01, the other its lock')
	  or diag explain [ $st, $errs ];
	cmp_ok($at, '<', 1.0 + 1.0 + 1.0, "1. broken $at s after the cycle closed (deadlock_timeout 1 s)");
	my ($ve) = grep { defined && /40P01/ } @$errs;
	like($ve // '', qr/DETAIL:  Process \d+ waits for write lock "q2\w"; blocked by pg:\S+\./, '1. the DETAIL names the cycle');
	$_->quit for ($a, $b);
}

# ---- 2. a 3-cycle, one master stopped ----
{
	redis_stop($ports[2]);
	my @s = (holding($n1, 'q3a'), holding($n2, 'q3b'), holding($n1, 'q3c'));
	my @wants = qw(q3b q3c q3a);
	my $t_last;
	for my $i (0 .. 2)
	{
		$t_last = sq_send($s[$i], "SELECT redis_wlock_xact('$wants[$i]') > 0");
		sleep 0.3;
	}
	my ($st, $errs, undef, $ended) = finish_all(\@s, 25, $t_last);
	my ($at) = map { $ended->[$_] } grep { $st->[$_] eq '40P01' } 0 .. 2;
	$at //= 99;
	is(scalar(grep { $_ eq '40P01' } @$st), 1, '2. 3-cycle with a master down: exactly one 40P01') or diag explain [ $st, $errs ];
	is(scalar(grep { $_ eq 'granted' } @$st), 2, '2. the two others get their locks') or diag explain $st;
	cmp_ok($at, '<', 1.0 + 1.0 + 1.5, "2. broken $at s after it closed");
	$_->quit for @s;
	redis_start($ports[2]);
	sleep 1.2;    # counts again once up for rwlock.quorum_max_lease
}

# ---- 3. no false positive: split votes all the time ----
{
	$_->safe_psql('postgres', "ALTER SYSTEM SET deadlock_timeout = '100ms'; SELECT pg_reload_conf(); SELECT redis_lock_stats_reset()")
	  for ($n1, $n2);
	my $script = "$PostgreSQL::Test::Utils::tmp_check/quorum_order.sql";
	open(my $fh, '>', $script) or die $!;
	print $fh <<'SQL';
\set a random(1, 2)
\set b random(3, 4)
BEGIN;
SELECT redis_wlock_xact('qo' || :a);
SELECT redis_wlock_xact('qo' || :b);
SELECT pg_sleep(0.01);
COMMIT;
SQL
	close $fh;
	pgbench_each([ $n1, $n2 ], $script, 4, 15, 20, '3.');
	my ($dl, $waits) = (0, 0);
	for my $n ($n1, $n2)
	{
		my ($d, $w) = split /\|/, $n->safe_psql('postgres', 'SELECT sum(deadlocks), sum(waits) FROM redis_lock_stats');
		$dl += $d;
		$waits += $w;
	}
	is($dl, 0, '3. no deadlock reported');
	cmp_ok($waits, '>', 20, "3. though sessions waited ($waits waits)");
}

my $left = 0;
$left += scalar(split /\n/, redis_cli($_, '--scan', '--pattern', 'shared:wait:*')) for @ports;
is($left, 0, 'no wait key left on any master');

$_->stop for @nodes;
done_testing();
