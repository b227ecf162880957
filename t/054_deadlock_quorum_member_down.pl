# A check that could not complete is repeated (issue 37), in quorum mode
# (three masters): a 2-cycle between sessions of two PostgreSQL servers
# closes, and just after it one master goes away while the wait keys are
# checked in and walked (a member missing from a majority's tally):
#  1. stopped (SIGSTOP) for 1.5 s: it answers nothing, each call to it
#     lasts rwlock.command_timeout (1 s);
#  2. shut down for good (until the case ends): its connections are refused.
# Each time the cycle ends in exactly one 40P01, within 2 x deadlock_timeout
# + the fault's length + 1 s (for a master down for good, the fault's length
# is the 1 s command timeout of the calls made as it went), and the other
# session gets its lock. (rwlock.quorum_max_lease, which caps the leases,
# is 4 s: a lease must outlast the stall and a renewal's 1 s command
# timeout.)
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
my $dt = 0.5;
my @nodes;
for my $name (qw(qd1 qd2))
{
	push @nodes, new_node($name, port => $ports[0], preload => 1, lease => '10s',
		conf => "rwlock.redis_url = '" . quorum_url(@ports) . "'\n"
		  . "rwlock.quorum_max_lease = '4s'\nrwlock.key_prefix = 'shared'\n"
		  . "rwlock.command_timeout = '1s'\nrwlock.connect_timeout = '1s'\n"
		  . "deadlock_timeout = '500ms'\nstatement_timeout = '20s'\n");
}
sleep 4.2;    # the masters count once up for rwlock.quorum_max_lease

sub cycle_case
{
	my ($what, $len, $fault, $mend) = @_;
	my $a = holding($nodes[0], "${what}a");
	my $b = holding($nodes[1], "${what}b");
	sq_send($a, "SELECT redis_wlock_xact('${what}b') > 0");
	sleep 0.1;
	my $t1 = sq_send($b, "SELECT redis_wlock_xact('${what}a') > 0");
	sleep 0.1;
	my $bg = in_background($fault);
	my ($st, $errs, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
	background_done($bg);
	$mend->();
	is_deeply([ sort @$st ], [ '40P01', 'granted' ],
		"$what: one 40P01, the other its lock") or diag explain [ $st, $errs ];
	my ($vi) = grep { $st->[$_] eq '40P01' } 0 .. 1;
	my $t = defined $vi ? $ended->[$vi] : 99;
	cmp_ok($t, '<', 2 * $dt + 0.1 + $len + 1.0,
		sprintf('%s: broken %.2f s after the cycle closed', $what, $t));
	$_->quit for ($a, $b);
}

# 1. a master that answers nothing for 1.5 s
my $stalled = $ports[2];
cycle_case('stop', 1.5, sub {
	redis_sigstop($stalled);
	sleep 1.5;
	redis_sigcont($stalled);
	return 1;
}, sub { });

# 2. a master down for good
cycle_case('down', 1.0, sub { redis_stop($ports[1]); return 1; }, sub {
	redis_start($ports[1]);
	sleep 4.2;    # counts again once up for rwlock.quorum_max_lease
});

my $left = 0;
$left += scalar(split /\n/, redis_cli($_, '--scan', '--pattern', 'shared:wait:*')) for @ports;
is($left, 0, 'no wait key left on any master');

$_->stop for @nodes;
done_testing();
