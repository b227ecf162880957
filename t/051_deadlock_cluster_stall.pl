# A check that could not complete is repeated, in a Redis Cluster (issue
# 37): the master that holds both waiters' wait keys is SIGSTOPped for 1.5 s
# (below the cluster's node timeout: no failover, the locks' own master
# answers all along) just as the 2-cycle closes, so the first check-ins
# and walks meet a master that does not answer within
# rwlock.command_timeout (1 s). The cycle must still end
# in exactly one 40P01, within 2 x deadlock_timeout + the stall + 1 s.
# (Before, a walk whose GET of a wait key failed was never made again,
# and the cycle waited until statement_timeout.)
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use RwlockWaits;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = cluster_start(replicas => 0);
my $url = cluster_url($c);
my $prefix = 'tap_cdl';
my $dt = 0.5;
my $node = new_node('cdl', port => $c->{ports}[0], preload => 1, lease => '10s',
	conf => "rwlock.redis_url = '$url'\ndeadlock_timeout = '500ms'\n"
	  . "rwlock.key_prefix = '$prefix'\nrwlock.command_timeout = '1s'\n");
END { kill 'CONT', redis_pid($_) for @{ $c->{ports} }; }

my (%on, $a, $b, $stalled);
for (1 .. 20)
{
	my $s = session($node);
	my $m = (cluster_wait_key($c, $prefix, $s))[0];
	if ($on{$m})
	{
		($a, $b, $stalled) = ($on{$m}, $s, $m);
		last;
	}
	$on{$m} = $s;
}
ok($stalled, "two sessions' wait keys are on master " . ($stalled // '?'));
sq($_, "SET statement_timeout = '15s'") for ($a, $b);
my ($other) = grep { $_ != $stalled } cluster_masters($c);
my ($x, $y) = cluster_names_on($c, $prefix, $other, 'cyc', 2);

sq($_->[0], 'BEGIN'), sq($_->[0], "SELECT redis_wlock_xact('$_->[1]') > 0")
  for ([ $a, $x ], [ $b, $y ]);
sq_send($a, "SELECT redis_wlock_xact('$y') > 0");
sleep 0.1;
my $t1 = sq_send($b, "SELECT redis_wlock_xact('$x') > 0");
sleep 0.1;
redis_sigstop($stalled);
sleep 1.5;
redis_sigcont($stalled);
my ($st, $errs, undef, $ended) = finish_all([ $a, $b ], 20, $t1);
is_deeply([ sort @$st ], [ '40P01', 'granted' ],
	'the wait key\'s master stalled 1.5 s: one 40P01, the other its lock')
  or diag explain [ $st, $errs ];
my ($vi) = grep { $st->[$_] eq '40P01' } 0 .. 1;
my $t = defined $vi ? $ended->[$vi] : 99;
cmp_ok($t, '<', 2 * $dt + 1.5 + 1.0, "broken $t s after the cycle closed");
$_->quit for ($a, $b);

done_testing();
