# Deadlocks across two PostgreSQL servers sharing one Redis (SPEC 12, issue
# 29): a 2-cycle and a 3-cycle of waits among sessions of both servers are
# broken within deadlock_timeout + about a second: exactly one 40P01, whose
# DETAIL names the cycle, the others get their locks. No false positives:
# a chain of waits without a cycle, held for several deadlock_timeouts,
# ends with no error once its head lets go.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockWaits;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);


my $port = redis_start();
my $conf = "rwlock.key_prefix = 'shared'\ndeadlock_timeout = '1s'\nlog_lock_waits = on\n";
my $n1 = new_node('dl1', port => $port, preload => 1, lease => '10s', conf => $conf);
my $n2 = new_node('dl2', port => $port, preload => 1, lease => '10s', conf => $conf);
my $prefix = 'shared';

# Each session asks for the next one's lock; returns as finish_all.
sub cycle_of
{
	my ($sessions, $names, $wants) = @_;
	my $t_last;
	for my $i (0 .. $#$sessions)
	{
		$t_last = sq_send($sessions->[$i], "SELECT redis_wlock_xact('$wants->[$i]') > 0");
		sleep 0.3;
	}
	return finish_all($sessions, 25, $t_last);
}

# ---- a 2-cycle: a session of each server ----
{
	my $a = holding($n1, 'c2a');
	my $b = holding($n2, 'c2b');
	sq_send($a, "SELECT redis_wlock_xact('c2b') > 0");
	sleep 0.3;
	my $t1 = sq_send($b, "SELECT redis_wlock_xact('c2a') > 0");
	my ($stp, $errp, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
	is_deeply([ sort @$stp ], [ '40P01', 'granted' ], '2-cycle across two servers: exactly one 40P01, the other its lock');
	my ($vi) = grep { $stp->[$_] eq '40P01' } 0 .. 1;
	my $ve = defined $vi ? $errp->[$vi] : '';
	my $broken = defined $vi ? $ended->[$vi] : 99;
	cmp_ok($broken, '<', 1.0 + 1.0 + 1.0, "broken $broken s after the cycle closed (deadlock_timeout 1 s; margin for a loaded machine)");
	like($ve, qr/ERROR:  40P01: deadlock detected/, 'the error');
	like($ve, qr/DETAIL:  Process \d+ waits for write lock "c2\w"; blocked by pg:[0-9a-f]+:\d+:\d+\.[0-9a-f]+:[0-9a-f]+\.\n(?:Process|pg:)\S* ?\S* waits for write lock "c2\w"; blocked by process \d+\./,
		'the DETAIL names the cycle, the other server\'s session by its owner id');
	$a->quit; $b->quit;
}

# ---- a 3-cycle over both servers ----
{
	my @names = qw(c3a c3b c3c);
	my @s = (holding($n1, 'c3a'), holding($n2, 'c3b'), holding($n1, 'c3c'));
	my @pids = map { session_pid($_) } @s;
	my ($states, $errs, $secs, $ended) = cycle_of(\@s, \@names, [qw(c3b c3c c3a)]);
	my @dl = grep { $_ eq '40P01' } @$states;
	is(scalar(@dl), 1, '3-cycle: exactly one 40P01') or diag explain $states;
	is(scalar(grep { $_ eq 'granted' } @$states), 2, 'the two others get their locks') or diag explain $states;
	my ($ve) = grep { /40P01/ } @$errs;
	my @lines = ($ve // '') =~ /^(?:DETAIL:  |)((?:Process \d+|pg:\S+) waits for write lock "c3\w"; blocked by (?:process \d+|pg:\S+)\.)$/mg;
	is(scalar(@lines), 3, 'the DETAIL names the three waits of the cycle') or diag $ve;
	my ($vi) = grep { $states->[$_] eq '40P01' } 0 .. 2;
	my $broken = defined $vi ? $ended->[$vi] : 99;
	cmp_ok($broken, '<', 1.0 + 1.0 + 1.0, "3-cycle broken $broken s after it closed");
	$_->quit for @s;
}

# ---- read modes: a reader blocked by a writer, a writer by a reader ----
{
	my $a = session($n1);
	my $b = session($n2);
	sq($a, "BEGIN; SELECT redis_rlock_xact('rw_r')");
	sq($b, "BEGIN; SELECT redis_wlock_xact('rw_w')");
	sq_send($a, "SELECT redis_rlock_xact('rw_w') >= 0");    # a reader behind writer B
	sleep 0.3;
	sq_send($b, "SELECT redis_wlock_xact('rw_r') > 0");    # a writer behind reader A
	my ($stp, $errp) = finish_all([ $a, $b ], 25, time);
	is_deeply([ sort @$stp ], [ '40P01', 'granted' ], 'read and write modes: exactly one 40P01, the other its lock');
	my ($ve) = grep { /40P01/ } @$errp;
	like($ve // '', qr/waits for read lock "rw_w"/, 'the DETAIL names the read wait');
	$_->quit for ($a, $b);
}

# ---- a soft edge: a reader queued behind a waiting writer ----
{
	# A holds read q; B waits for write q (behind A); C holds write z and
	# asks for read q (behind queued B: writer preference); A asks for z.
	# A -> C -> B -> A.
	my ($a, $b, $c) = (session($n1), session($n2), session($n1));
	sq($a, "BEGIN; SELECT redis_rlock_xact('soft_q')");
	sq($c, "BEGIN; SELECT redis_wlock_xact('soft_z')");
	sq($b, "BEGIN");
	sq_send($b, "SELECT redis_wlock_xact('soft_q') > 0");
	sleep 0.3;
	sq_send($c, "SELECT redis_rlock_xact('soft_q') >= 0");
	sleep 0.3;
	sq_send($a, "SELECT redis_wlock_xact('soft_z') > 0");
	my ($stp) = finish_all([ $a, $b, $c ], 25, time);
	my @st = @$stp;
	is(scalar(grep { $_ eq '40P01' } @st), 1, 'a cycle through a queued writer (soft edge): exactly one 40P01')
	  or diag explain \@st;
	is(scalar(grep { $_ eq 'granted' } @st), 2, 'the two others get their locks') or diag explain \@st;
	$_->quit for ($a, $b, $c);
}

# ---- no false positive: a chain without a cycle ----
{
	# s0 holds k0 and waits for nothing; s_i holds k_i and waits for k_(i-1).
	my @s = map { holding($_ % 2 ? $n2 : $n1, "k$_") } (0 .. 4);
	sq_send($s[$_], "SELECT redis_wlock_xact('k" . ($_ - 1) . "') > 0") for (1 .. 4);
	sleep 4;    # several deadlock_timeouts
	my $waiting = 0;
	$waiting += !sq_poll($s[$_]) for (1 .. 4);
	is($waiting, 4, 'a chain of four waits, none of them failed after 4 deadlock_timeouts');
	sq($s[0], 'COMMIT');
	my $errors = 0;
	for my $i (1 .. 4)
	{
		my ($out, $err) = sq_wait($s[$i], 20);
		$errors++ unless defined $out && $out eq 't' && sqlstate($err) eq '';
		sq($s[$i], 'COMMIT');
	}
	is($errors, 0, 'the chain unwinds once its head lets go: every wait granted, no error');
	$_->quit for @s;
}

my ($d1) = $n1->safe_psql('postgres', "SELECT sum(deadlocks) FROM redis_lock_stats");
my ($d2) = $n2->safe_psql('postgres', "SELECT sum(deadlocks) FROM redis_lock_stats");
is($d1 + $d2, 4, 'four deadlocks counted over both servers');
is(redis_cli($port, '--scan', '--pattern', "$prefix:wait:*"), '', 'no wait key left in Redis');
like(slurp_file($n1->logfile) . slurp_file($n2->logfile), qr/detected deadlock while waiting for Redis write lock "c\d\w" after \d+\.\d{3} ms/,
	'the victim logs the deadlock (log_lock_waits)');

$n1->stop;
$n2->stop;
done_testing();
