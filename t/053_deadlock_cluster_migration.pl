# A check that could not complete is repeated (issue 37), in a Redis
# Cluster where the slot of one waiter's wait key migrates while a 2-cycle
# between sessions of two PostgreSQL servers closes: the slot is set
# IMPORTING/MIGRATING just before the waits begin, its keys move (MIGRATE),
# it stays migrating 1.5 s (the old master answers ASK for a key it does
# not have, the new one serves it only after ASKING), then the move is
# finished (SETSLOT NODE: MOVED from then on). The locks are on a third master, so only the deadlock
# check meets the move. The cycle ends in exactly one 40P01, within 2 x
# deadlock_timeout + the move's length + 1 s, and the other session gets its
# lock; the check followed the ASK (before, a redirection was followed only
# within one call, and a waiter's next check is another: the check was
# incomplete, and repeated, until the move was over).
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
my $prefix = 'tap_cmig';
my $dt = 0.5;
my $conf = "rwlock.redis_url = '$url'\ndeadlock_timeout = '500ms'\n"
  . "rwlock.key_prefix = '$prefix'\nrwlock.command_timeout = '1s'\n";
my @nodes = map { new_node($_, port => $c->{ports}[0], preload => 1, lease => '10s', conf => $conf) }
  qw(cmig1 cmig2);


my $a = session($nodes[0]);
my $b = session($nodes[1]);
my ($src, $slot) = cluster_wait_key($c, $prefix, $a);
my ($dst, $third) = grep { $_ != $src } cluster_masters($c);
sq($_, "SET statement_timeout = '20s'") for ($a, $b);
my ($x, $y) = cluster_names_on($c, $prefix, $third, 'mig', 2);
# (Redis 7 counts no ASK or MOVED in INFO errorstats: the ASKING calls
# that followed an ASK are counted instead.)
sub askings
{
	my $n = 0;
	for my $p (@{ $c->{ports} })
	{
		$n += $1 if redis_cli($p, 'INFO', 'commandstats') =~ /cmdstat_asking:calls=(\d+)/;
	}
	return $n;
}
my $asked = askings();

sq($_->[0], 'BEGIN'), sq($_->[0], "SELECT redis_wlock_xact('$_->[1]') > 0")
  for ([ $a, $x ], [ $b, $y ]);
# The slot migrates from before the waits begin: the first check-ins and
# walks meet ASK (A's wait key is written on the importing master, and read
# there), and the move is finished while the sessions still wait (MOVED).
my ($src_id, $dst_id) = (cluster_node_id($src), cluster_node_id($dst));
my $tf = time;
redis_cli($dst, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $src_id);
redis_cli($src, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $dst_id);
sq_send($a, "SELECT redis_wlock_xact('$y') > 0");
sleep 0.1;
my $t1 = sq_send($b, "SELECT redis_wlock_xact('$x') > 0");
my $bg = in_background(sub {
	my @keys = split /\n/, redis_cli($src, 'CLUSTER', 'GETKEYSINSLOT', $slot, 100);
	redis_cli($src, 'MIGRATE', '127.0.0.1', $dst, '', 0, 5000, 'KEYS', @keys) if @keys;
	sleep 1.5;
	redis_cli($_, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $dst_id) for ($dst, $src, $third);
	return time;
});
my ($st, $errs, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
my $len = background_done($bg) - $tf;
is(cluster_slot_owner($c, $slot), $dst, "the wait key's slot $slot moved from $src to $dst");
is_deeply([ sort @$st ], [ '40P01', 'granted' ], 'one 40P01, the other its lock')
  or diag explain [ $st, $errs ];
my ($vi) = grep { $st->[$_] eq '40P01' } 0 .. 1;
my $t = defined $vi ? $ended->[$vi] : 99;
cmp_ok($t, '<', 2 * $dt + $len + 1.0,
	sprintf('broken %.2f s after the cycle closed (the move lasted %.2f s from before)', $t, $len));
cmp_ok(askings(), '>', $asked,
	sprintf('the deadlock check followed ASK to the importing master (%d ASKING)', askings() - $asked));
$_->quit for ($a, $b);

# A wait key whose DEL (sent without waiting for the answer) was answered
# ASK during the move is left to its time to live, max(3 x
# deadlock_timeout, 4 s), as after a crash.
ok(wait_until(sub {
	my $left = 0;
	$left += scalar(split /\n/, redis_cli($_, '--scan', '--pattern', "$prefix:wait:*"))
	  for cluster_masters($c);
	return $left == 0;
}, 6), 'no wait key left on any master after the wait keys\' time to live');

$_->stop for @nodes;
done_testing();
