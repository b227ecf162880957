# No false 40P01 from another server (issue 37): a wait cut off during a
# Redis stall (SIGSTOP; the cancel comes while a try or check-in of the
# wait is in flight, so its connection is closed unanswered) can leave its
# wait key and its place in the lock's queue (the writer's intent) behind.
# A session of ANOTHER PostgreSQL server (which cannot see the first
# server's waiter table) then asks for a lock the idle session holds:
#   - it must not get 40P01 (it times out: the idle session holds the
#     lock), whatever the leftovers say;
#   - the leftovers must be withdrawn, as a release is owed, within a
#     second of the stall's end, not left to their leases (2 s for the
#     intent, 4 s for the wait key): the session leaves them to the keeper,
#     which withdraws them on its behalf (waiters.c, keeper.c).
# Three rounds, stalls of 0.25, 0.35 and 0.45 s. (Before: 40P01 in round 1,
# the leftovers gone only with their leases.)
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
my $dt = 0.5;
my $prefix = 'shared';
my $conf = "rwlock.key_prefix = '$prefix'\ndeadlock_timeout = '500ms'\n"
  . "rwlock.command_timeout = '2s'\n";
my $n1 = new_node('cut1', port => $port, preload => 1, lease => '10s', conf => $conf);
my $n2 = new_node('cut2', port => $port, preload => 1, lease => '10s', conf => $conf);

for my $round (1 .. 3)
{
	my $i = session($n1);
	my $w = session($n2);
	sq($_, "SET statement_timeout = '12s'") for ($i, $w);
	# i holds L (session level: the cancel leaves it held) and waits for M,
	# which w holds.
	sq($i, "SELECT redis_wlock('cut_l$round') > 0");
	sq($w, 'BEGIN');
	sq($w, "SELECT redis_wlock_xact('cut_m$round') > 0");
	my $ipid = session_pid($i);
	my $owner = session_owner($i);
	sq_send($i, "SELECT redis_wlock('cut_m$round') > 0");
	sleep $dt + 0.3;    # i's wait key is written
	my $stall = 0.15 + 0.1 * $round;
	redis_sigstop($port);
	sleep $stall - 0.05;    # a check-in or try of i's is in flight
	$n1->safe_psql('postgres', "SELECT pg_cancel_backend($ipid)");
	sleep 0.05;
	redis_sigcont($port);
	my $t_end = time;
	# The leftovers: i's wait key, i's intent in M's queue (watched from now).
	my $bg = in_background(sub {
		my $gone = wait_until(sub {
			redis_cli($port, 'EXISTS', "$prefix:wait:{$owner}") eq '0'
			  && redis_cli($port, 'ZSCORE', "$prefix:{cut_m$round}:q", $owner) eq '';
		}, 10);
		return defined $gone ? time - $t_end : 99;
	});
	my ($out, $err) = sq_wait($i, 5);
	is(sqlstate($err), '57014', "round $round: the wait cut off in a ${stall} s stall is cancelled");

	# w (another server) asks for L, which idle i holds: a timeout, no 40P01
	sq($w, "SET lock_timeout = '2s'");
	my ($o2, $e2) = sq($w, "SELECT redis_wlock_xact('cut_l$round') > 0");
	is(sqlstate($e2), '55P03', "round $round: a session of another server asking for the idle one's lock times out, no 40P01")
	  or diag $e2;
	my $after = background_done($bg);
	cmp_ok($after, '<', 1.0, sprintf("round %d: i's wait key and queue place gone %.2f s after the stall", $round, $after));
	sq($w, 'ROLLBACK');
	sq($i, 'SELECT redis_unlock_all()');
	$_->quit for ($i, $w);
}

done_testing();
