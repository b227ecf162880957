# Redis Cluster under faults. A slot migrated by hand (SETSLOT IMPORTING and
# MIGRATING, MIGRATE, SETSLOT NODE) while sessions lock and unlock in it and
# one holds a lock in it: the ASK, TRYAGAIN and MOVED answers are absorbed
# (no error surfaces), the hold is not lost and the keeper renews it where
# it went. CLUSTER FAILOVER, then kill -9 of a master, under sessions that
# lock and unlock in the master's slots: at most class 08 errors while the
# slot has no master, then every session recovers; holds taken before stay
# held and the keeper renews them on the new master. Last, test/load.py over
# the cluster with a CLUSTER FAILOVER of the masters halfway through. Also:
# a COMMIT whose release a slot move bounced (MOVED): the lock stays held
# until the session's next call sends the release again, then is free.
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
my $prefix = 'tap_cfault';
# Renewed every second: a hold the keeper stopped renewing is lost in 3 s.
my $node = new_node('cfault', port => $c->{ports}[0], preload => 1, lease => '3s',
	conf => "rwlock.redis_url = '$url'\nrwlock.command_timeout = '5s'\n"
	  . "rwlock.connect_timeout = '2s'\nmax_connections = 40\n");

sub key_of { return "$prefix:{$_[0]}"; }

sub name_on { return cluster_names_on($c, $prefix, @_); }

sub errorstat
{
	my ($what) = @_;
	my $n = 0;
	for my $p (@{ $c->{ports} })
	{
		next if $c->{dead}{$p};
		$n += $1 if redis_cli($p, 'INFO', 'errorstats') =~ /errorstat_$what:count=(\d+)/;
	}
	return $n;
}

# Sessions locking and unlocking $name in a loop for $secs: returns the
# started psql runs; load_results collects (iterations, errors) of each.
sub load_start
{
	my ($name, $n, $secs) = @_;
	my @s;
	for (1 .. $n)
	{
		my $s = session($node);
		sq_send($s, qq{DO \$\$ DECLARE t0 timestamptz := clock_timestamp(); i int := 0; BEGIN
  WHILE clock_timestamp() < t0 + interval '$secs s' LOOP
    PERFORM redis_wlock('$name'); PERFORM redis_unlock('$name');
    PERFORM redis_rlock('$name'); PERFORM redis_unlock('$name');
    i := i + 1;
  END LOOP;
  RAISE WARNING 'iterations %', i;
END \$\$;});
		push @s, $s;
	}
	return @s;
}

sub load_results
{
	my ($secs, @s) = @_;
	my @r;
	for my $s (@s)
	{
		my ($out, $err) = sq_wait($s, $secs + 30);
		$err //= 'did not finish';
		my ($it) = $err =~ /iterations (\d+)/;
		push @r, [ $it // 0, $err =~ /ERROR/ ? $err : '' ];
		$s->quit;
	}
	return @r;
}

# --- A slot migrated under load.
my @masters = cluster_masters($c);
my ($src, $dst) = @masters[0, 1];
my $busy = name_on($src, 'mig');
my $slot = key_slot(key_of($busy));
is(redis_cli($src, 'CLUSTER', 'KEYSLOT', key_of($busy)), $slot, 'the test computes slots as Redis does');
my $held;    # another name in the same slot
for my $i (1 .. 1000000)
{
	if (key_slot(key_of("h$i")) == $slot) { $held = "h$i"; last; }
}
my $holder = session($node);
my ($out, $err) = sq($holder, "SELECT redis_wlock('$held') > 0");
is($out, 't', "a session holds a write lock in slot $slot, on $src");
my ($ask, $moved, $try) = (errorstat('ASK'), errorstat('MOVED'), errorstat('TRYAGAIN'));
my @load = load_start($busy, 3, 8);
sleep 1.5;
# the slot stays migrating a while: ASK for keys gone from $src
cluster_move_slot($slot, $src, $dst, 0.3, grep { $_ != $src && $_ != $dst } cluster_masters($c));
is(cluster_slot_owner($c, $slot), $dst, "slot $slot migrated from $src to $dst");
my @r = load_results(8, @load);
is(join('', map { $_->[1] } @r), '', 'no error surfaced in the sessions locking in the migrating slot');
ok((grep { $_->[0] > 20 } @r) == 3, 'and each went on: ' . join(' ', map { $_->[0] } @r) . ' iterations');
cmp_ok(errorstat('MOVED') + errorstat('ASK') + errorstat('TRYAGAIN'), '>', $ask + $moved + $try,
	sprintf('the cluster redirected them (ASK %d, MOVED %d, TRYAGAIN %d more)',
		errorstat('ASK') - $ask, errorstat('MOVED') - $moved, errorstat('TRYAGAIN') - $try));
sleep 4;    # past the 3 s lease: only the keeper's renewals on $dst keep it
is(redis_cli($dst, 'EXISTS', key_of($held)), '1', 'the held lock is on the new master');
is(lock_state($dst, $prefix, $held), 'write', 'and still held there after a lease: the keeper followed the slot');
($out) = sq($holder, "SELECT lease_state FROM redis_held_locks WHERE name = '$held'");
is($out, 'held', 'the session does not see it lost');
($out, $err) = sq($holder, "SELECT redis_unlock('$held')");
is($out, 't', 'its unlock goes to the new master and finds it held');
$holder->quit;

# --- A slot moved while a session holds an _xact lock in it: COMMIT's
# release goes where the session's map says, is answered MOVED and does not
# run; the lock stays held until the session's next call sends it again
# where the slot is now (docs/topologies.md, Redis Cluster: the cost that remains).
my ($from, $to) = @masters[1, 2];
my $xname = name_on($from, 'cm');
my $xslot = key_slot(key_of($xname));
my $x = session($node);
my $y = session($node);
sq($x, 'BEGIN');
($out, $err) = sq($x, "SELECT redis_wlock_xact('$xname') > 0");
is($out, 't', "a session holds $xname at transaction level, on $from");
cluster_move_slot($xslot, $from, $to, 0, grep { $_ != $from && $_ != $to } cluster_masters($c));
ok(wait_until(sub { cluster_slot_owner($c, $xslot) == $to }, 10), "its slot $xslot moved to $to");
$moved = errorstat('MOVED');
($out, $err) = sq($x, 'COMMIT');
is($err, '', 'COMMIT works');
is(lock_state($to, $prefix, $xname), 'write', 'the release bounced: the lock is still held on the new master');
cmp_ok(errorstat('MOVED'), '>', $moved, 'the old master answered MOVED');
($out) = sq($y, "SELECT redis_try_wlock('$xname')");
is($out, 'f', 'another session cannot take it yet');
($out, $err) = sq($x, "SELECT redis_try_rlock('cm_other')");
is($out, 't', "the session's next call works");
is($err, '', 'without a warning');
ok(wait_until(sub { lock_state($to, $prefix, $xname) eq 'free' }, 1),
	'and its release, sent again where the slot is now, frees the lock');
($out) = sq($y, "SELECT redis_try_wlock('$xname')");
is($out, 't', 'another session takes it');
sq($_, 'SELECT redis_unlock_all()') for ($x, $y);
$x->quit;
$y->quit;

# --- Failover under load: the slot has no master for a while (kill -9), or
# moves to its replica (CLUSTER FAILOVER). At most class 08 errors; then the
# sessions recover.
sub failover_case
{
	my ($what, $fault) = @_;
	my $victim = (cluster_masters($c))[0];
	my $replica = cluster_replica_of($c, $victim);
	my $name = name_on($victim, "f$what");
	my $keep = name_on($victim, "keep$what");
	my $h = session($node);
	# Its lease must outlast the time the slot has no master (node timeout
	# 2 s and an election), or no renewal can keep it.
	sq($h, "SET rwlock.lease = '8s'");
	is((sq($h, "SELECT redis_wlock('$keep') > 0"))[0], 't', "$what: a hold on master $victim");
	sleep 1.2;    # replicated to $replica
	my @s = map { session($node) } 1 .. 3;
	my %states;
	my $t0 = time;
	my $faulted = 0;
	my $last_error = 0;
	while (time - $t0 < 40)
	{
		if (!$faulted && time - $t0 > 1)
		{
			$fault->($victim, $replica);
			$faulted = time;
		}
		for my $s (@s)
		{
			my ($o, $e) = sq($s, "SELECT redis_wlock('$name') > 0 AND redis_unlock('$name')");
			if ($e =~ /ERROR/)
			{
				$states{ sqlstate($e) }++;
				$last_error = time;
			}
		}
		last if $faulted && time - $faulted > 3 && time - ($last_error || $faulted) > 3
		  && cluster_ok($c);
		sleep 0.05;
	}
	my $recovered = ($last_error || $faulted) - $faulted;
	ok((grep { !/^08/ } keys %states) == 0,
		"$what: only class 08 errors while the slot had no master: "
		  . join(' ', map { "$_ x$states{$_}" } sort keys %states));
	cmp_ok($recovered, '<', 20, sprintf('%s: the sessions recovered %.1f s after the fault', $what, $recovered));
	my $new = cluster_key_node($c, key_of($keep));
	is($new, $replica, "$what: the replica $replica serves the slot now");
	sleep 9;    # past the lease: the keeper renews on the new master
	is(lock_state($new, $prefix, $keep), 'write', "$what: the hold taken before is held on the new master after a lease");
	is((sq($h, "SELECT redis_unlock('$keep')"))[0], 't', "$what: and its unlock finds it");
	$_->quit for @s, $h;
}

failover_case('failover', sub {
	my ($victim, $replica) = @_;
	redis_cli($replica, 'CLUSTER', 'FAILOVER');
});
failover_case('kill', sub {
	my ($victim, $replica) = @_;
	kill 'KILL', redis_pid($victim);
	$c->{dead}{$victim} = 1;
});

# --- test/load.py over the cluster, every master that has a replica (the
# one promoted after the kill has none) failed over halfway.
my @replicas = map { cluster_replica_of($c, $_) } cluster_masters($c);
my $failover = join('; ', map { "$REDIS_CLI -p $_ CLUSTER FAILOVER >/dev/null" } grep { defined } @replicas);
my $ok = run_load($node, RWLOCK_URL => $url, FAILOVER_CMD => $failover,
	DURATION => '12', SESSIONS => '6', MIN_RATE => '20');
ok($ok, 'load.py over the cluster, ' . scalar(grep { defined } @replicas)
	  . ' masters failed over halfway: no lost update');

done_testing();
