# A check that could not complete is repeated (issue 37), in a Redis
# Cluster whose master holding one waiter's wait key fails over while a
# 2-cycle between sessions of two PostgreSQL servers closes: first by
# CLUSTER FAILOVER on its replica (the old master pauses its clients, then
# answers MOVED), then by kill -9 of the master (its slots have no master
# until the replica is elected, after the 2 s node timeout). The locks are
# on another master, so only the deadlock check meets the fault. Each time
# the cycle ends in exactly one 40P01, within 2 x deadlock_timeout + the
# fault's length (from the fault to the replica serving the wait key's
# slot) + 1 s, and the other session gets its lock.
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

my $c = cluster_start();
my $url = cluster_url($c);
my $prefix = 'tap_cfo';
my $dt = 0.5;
my $conf = "rwlock.redis_url = '$url'\ndeadlock_timeout = '500ms'\n"
  . "rwlock.key_prefix = '$prefix'\nrwlock.command_timeout = '1s'\n"
  . "rwlock.connect_timeout = '1s'\n";
my @nodes = map { new_node($_, port => $c->{ports}[0], preload => 1, lease => '10s', conf => $conf) }
  qw(cfo1 cfo2);


# A 2-cycle between a session of each server; $fault->($master, $replica)
# strikes the master of the first session's wait key as the first
# check-ins are made; the fault's length is measured from then to the
# replica serving the slot.
sub cycle_case
{
	my ($what, $fault) = @_;
	my $a = session($nodes[0]);
	my $b = session($nodes[1]);
	my ($m, $slot) = cluster_wait_key($c, $prefix, $a);
	my $replica = cluster_replica_of($c, $m);
	ok(defined $replica, "$what: the wait key of session A is on master $m (slot $slot), replica "
		  . ($replica // '?'));
	sq($_, "SET statement_timeout = '20s'") for ($a, $b);
	my ($other) = grep { $_ != $m } cluster_masters($c);
	my ($x, $y) = cluster_names_on($c, $prefix, $other, "$what", 2);
	sq($_->[0], 'BEGIN'), sq($_->[0], "SELECT redis_wlock_xact('$_->[1]') > 0")
	  for ([ $a, $x ], [ $b, $y ]);
	sq_send($a, "SELECT redis_wlock_xact('$y') > 0");
	sleep 0.1;
	my $t1 = sq_send($b, "SELECT redis_wlock_xact('$x') > 0");
	# The wait keys are written at deadlock_timeout: the fault strikes as
	# the first check-ins are made.
	sleep $dt - 0.05;
	my $tf = time;
	my $bg = in_background(sub {
		$fault->($m, $replica);
		return wait_until(sub { (cluster_slot_owner($c, $slot) // 0) == $replica }, 30) ? time : 0;
	});
	my ($st, $errs, undef, $ended) = finish_all([ $a, $b ], 25, $t1);
	my $len = background_done($bg) - $tf;
	ok($len > 0, "$what: the replica $replica serves the wait key's slot");
	$c->{dead}{$m} = 1 if $what eq 'kill';
	is_deeply([ sort @$st ], [ '40P01', 'granted' ],
		"$what: one 40P01, the other its lock") or diag explain [ $st, $errs ];
	my ($vi) = grep { $st->[$_] eq '40P01' } 0 .. 1;
	my $t = defined $vi ? $ended->[$vi] : 99;
	cmp_ok($t, '<', 2 * $dt + ($tf - $t1) + $len + 1.0,
		sprintf('%s: broken %.2f s after the cycle closed (fault %.2f s)', $what, $t, $len));
	$_->quit for ($a, $b);
	ok(cluster_wait_ok($c, 30), "$what: the cluster is ok again");
}

cycle_case('failover', sub {
	my ($m, $replica) = @_;
	redis_cli($replica, 'CLUSTER', 'FAILOVER');
});
cycle_case('kill', sub {
	my ($m, $replica) = @_;
	kill 'KILL', redis_pid($m);
});

# A wait key whose DEL met the failover (a redirection, the master gone) is
# left to its time to live (a few seconds): none may outlive it.
sub wait_keys_left
{
	my $left = 0;
	for my $p (@{ $c->{ports} })
	{
		next if $c->{dead}{$p} || redis_cli($p, 'ROLE') !~ /^master/;
		$left += scalar(split /\n/, redis_cli($p, '--scan', '--pattern', "$prefix:wait:*"));
	}
	return $left;
}
ok(defined wait_until(sub { wait_keys_left() == 0 }, 8),
	'no wait key left on any master once its time to live is over');

$_->stop for @nodes;
done_testing();
