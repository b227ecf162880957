# Waiters in a Redis Cluster whose topology changes under them for longer
# than rwlock.command_timeout (1 s here). A session that waits for a lock
# another holds has nothing to lose by waiting: its periodic tries that
# time out, cannot connect or are redirected for too long are tried again
# within its lock_timeout, and it gets the lock once the holder lets go,
# with no error:
# a) a CLUSTER FAILOVER that takes 3 s (the other masters, the voters,
#    SIGSTOPped meanwhile): the old master holds the waiter's tries (writes
#    paused) until the failover ends;
# b) kill -9 of a master: nobody answers its slots until its replica is
#    promoted (3-4 s);
# c) a slot migration that leaves the lock's keys split between two masters
#    (TRYAGAIN) for 3.5 s. A call that was not waiting gets a class 08 error
#    that says what happened: the slot was not served in time (not "lost
#    connection", which it was not).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = cluster_start();
my $url = cluster_url($c);
my $prefix = 'tap_cwait';
my $node = new_node('cwait', port => $c->{ports}[0], preload => 1, lease => '8s',
	conf => "rwlock.redis_url = '$url'\nrwlock.command_timeout = '1s'\n"
	  . "rwlock.connect_timeout = '1s'\n");
END { kill 'CONT', redis_pid($_) for grep { !$c->{dead}{$_} } @{ $c->{ports} }; }

sub key_of { return "$prefix:{$_[0]}"; }

sub name_on { return cluster_names_on($c, $prefix, @_); }

sub first_line
{
	my ($err) = @_;
	my ($l) = ($err // '') =~ /((?:ERROR|FATAL):[^\n]*)/;
	return $l // '(no error)';
}

# A holder takes $name, a waiter waits for it; $fault->() changes the
# cluster, $settled->() says when it is done. The waiter must still wait
# then, and get the lock once the holder lets go.
sub waiter_case
{
	my ($what, $name, $fault, $settled) = @_;
	my $h = session($node);
	my $w = session($node);
	my ($out, $err);
	($out, $err) = sq($h, "SELECT redis_wlock('$name') > 0");
	is($out, 't', "$what: a session holds $name") or diag $err;
	sleep 1.2;    # replicated
	sq_send($w, "SELECT redis_wlock('$name') > 0");
	sleep 0.5;
	ok(!defined((sq_wait($w, 0))[0]), "$what: another waits for it");
	my $t0 = time;
	$fault->();
	my $done = wait_until($settled, 60);    # a loaded machine: 33 s seen
	ok(defined $done, sprintf("$what: the cluster settled (%.1f s)", time - $t0));
	sleep 1;    # a try or two on the settled cluster
	my ($wout, $werr) = sq_wait($w, 0);
	ok(!defined $wout, "$what: the waiter still waits")
	  or diag 'it ended with ' . first_line($werr);
	# The holder's unlock may meet the change first: retried.
	my $unlocked;
	for (1 .. 10)
	{
		($out, $err) = sq($h, "SELECT redis_unlock('$name')");
		if ($err !~ /ERROR/) { $unlocked = $out; last; }
		sleep 0.5;
	}
	is($unlocked, 't', "$what: the holder lets go") or diag $err;
	my $released = time;
	($wout, $werr) = sq_wait($w, 10) unless defined $wout;
	is($wout, 't', "$what: the waiter gets the lock") or diag $werr;
	unlike($werr // '', qr/ERROR/, "$what: no error");
	diag sprintf('%s: the waiter got the lock %.2f s after the release',
		$what, time - $released) if ($wout // '') eq 't';
	sq($w, 'SELECT redis_unlock_all()');
	$_->quit for ($h, $w);
}

# --- a) A CLUSTER FAILOVER that takes 3 s.
{
	my @masters = cluster_masters($c);
	my $victim = $masters[0];
	my $replica = cluster_replica_of($c, $victim);
	my @voters = grep { $_ != $victim } @masters;
	my $name = name_on($victim, 'fo');
	waiter_case('a) slow CLUSTER FAILOVER', $name,
		sub {
			kill 'STOP', redis_pid($_) for @voters;
			redis_cli($replica, 'CLUSTER', 'FAILOVER');
			sleep 3;
			kill 'CONT', redis_pid($_) for @voters;
			# On a loaded machine the voters may answer after the election's
			# time (a manual failover is then given up, and the slot never
			# moves: 60 s seen): ask again, the voters running.
			return if defined wait_until(sub { (cluster_key_node($c, key_of($name)) // 0) == $replica }, 15);
			note 'a) the first CLUSTER FAILOVER was given up: asked again';
			redis_cli($replica, 'CLUSTER', 'FAILOVER');
		},
		sub { cluster_key_node($c, key_of($name)) == $replica && cluster_ok($c) });
}

# --- b) kill -9 of a master; its replica is promoted.
{
	my @masters = cluster_masters($c);
	my ($victim) = grep { defined cluster_replica_of($c, $_) } @masters;
	my $replica = cluster_replica_of($c, $victim);
	my $name = name_on($victim, 'kill');
	waiter_case('b) kill -9 of a master', $name,
		sub {
			kill 'KILL', redis_pid($victim);
			$c->{dead}{$victim} = 1;
		},
		sub { (cluster_key_node($c, key_of($name)) // 0) == $replica });
}

# --- c) A slot migration split for 3.5 s.
{
	my @masters = cluster_masters($c);
	my ($src, $dst) = @masters[0, 1];
	my $name = name_on($src, 'mig');
	my $slot = key_slot(key_of($name));
	my ($src_id, $dst_id) = (cluster_node_id($src), cluster_node_id($dst));
	my $n = session($node);
	waiter_case('c) split slot migration', $name,
		sub {
			# The waiting writer's queue key goes; the lock's hash stays.
			redis_cli($dst, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $src_id);
			redis_cli($src, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $dst_id);
			redis_cli($src, 'MIGRATE', '127.0.0.1', $dst, '', 0, 5000, 'KEYS',
				key_of($name) . ':q');
			my ($out, $err, $secs) = sq($n, "SELECT redis_try_wlock('$name')");
			is(sqlstate($err), '08006', 'c) a call that does not wait: 08006');
			like($err, qr/did not serve the lock's hash slot in time/,
				'c) saying the slot was not served in time') or diag $err;
			like($err, qr/being migrated/, 'c) because it is being migrated');
			unlike($err, qr/lost connection/, 'c) not that a connection was lost');
			sleep 3.5 - $secs if $secs < 3.5;
			redis_cli($src, 'MIGRATE', '127.0.0.1', $dst, '', 0, 5000, 'KEYS', key_of($name));
			redis_cli($_, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $dst_id)
			  for ($dst, $src, grep { $_ != $src && $_ != $dst } @masters);
		},
		sub { (cluster_key_node($c, key_of($name)) // 0) == $dst });
	$n->quit;
}

$node->stop;
done_testing();
