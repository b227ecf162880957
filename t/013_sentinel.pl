# Redis Sentinel: rwlock.redis_url = redis+sentinel://...; locks through the
# sentinels; the first sentinel dead; a sentinel that names a replica (the
# ROLE check); SENTINEL FAILOVER and kill -9 of the master under sessions
# that hold, wait and churn: holds stay held, waiters are woken by the new
# master, the keeper renews on the new master (two thirds of the lease, 6 s,
# must outlast the failover: renewals come every third of it, and a lease
# that runs out while no master answers is lost), every session recovers
# within down-after + 5 s with at most one class 08 error.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockSentinel;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use IPC::Run;

my $set = sentinel_set_start(down_after => 1000);
my $url = sentinel_url($set);
note "master $set->{master}, replicas @{$set->{replicas}}, sentinels @{$set->{sentinels}}";

my $node = new_node('sentinel', port => $set->{master}, preload => 1, lease => '6s',
	conf => "rwlock.redis_url = '$url'\nrwlock.connect_timeout = '5s'\nrwlock.command_timeout = '1s'\n");
my $prefix = 'tap_sentinel';

my $a = session($node);
my $b = session($node);
my ($out, $err, $secs);

# --- Locks through the sentinel URL.
($out, $err) = sq($a, "SELECT redis_wlock('s1') > 0");
is($out, 't', 'a write lock through redis+sentinel://');
is($err, '', 'without an error');
is((redis_holders($set->{master}, $prefix, 's1'))[0] ne '' ? 'yes' : 'no', 'yes',
	'the lock is on the master the sentinels name');
($out) = sq($b, "SELECT redis_try_wlock('s1')");
is($out, 'f', 'another session is excluded');
($out) = sq($a, "SELECT connected FROM redis_connection_info()");
is($out, 't', 'redis_connection_info: connected');
($out) = sq($a, "SELECT redis_unlock('s1')");
is($out, 't', 'unlock through the sentinel URL');

# --- The Python client through the same sentinels.
{
	my ($in, $pyout, $pyerr) = ('', '', '');
	my $py = IPC::Run::start([ '/usr/bin/python3', "$FindBin::RealBin/../test/sentinel_client.py",
		$url, $prefix, 'py1' ], '<', \$in, '>', \$pyout, '2>', \$pyerr);
	my $t = wait_until(sub { $py->pump_nb; $pyout =~ /^held \d+/m }, 20);
	ok(defined $t, 'Python client: a write lock through redis+sentinel:// with wait_replicas=1')
	  or diag "$pyout $pyerr";
	($out) = sq($b, "SELECT redis_try_rlock('py1')");
	is($out, 'f', 'SQL is excluded by the Python holder');
	$in .= "go\n";
	$py->finish;
	like($pyout, qr/^released True$/m, 'Python client: released');
	like($pyout, qr/^unacked refused: lock 'py1x' was granted but only 2 of the 3 replicas/m,
		'Python client: too few acknowledgements raise ReplicasNotAcknowledged');
	like($pyout, qr/^try False$/m, 'Python client: and make try_acquire False');
	like($pyout, qr/^state free$/m, 'Python client: the unacknowledged grant was undone');
	diag $pyerr if $pyerr =~ /Traceback/;
}

# --- A malformed URL is refused with a reason.
($out, $err) = sq($a, "SET rwlock.redis_url = 'redis+sentinel://127.0.0.1:1'");
like($err, qr/master-name/, 'a sentinel URL without a master name is refused, saying why');
($out, $err) = sq($a, "SET rwlock.redis_url = 'redis+sentinel:///rwmaster'");
like($err, qr/at least one sentinel/, 'a sentinel URL without sentinels is refused');

# --- The first sentinel in the list is dead (nothing listens there).
my $dead = 26390;
$dead-- until RwlockTest::port_free($dead);
my $url_dead = sentinel_url($set, sentinels => [ $dead, @{ $set->{sentinels} } ]);
sq($a, "SET rwlock.redis_url = '$url_dead'");
($out, $err, $secs) = sq($a, "SELECT redis_wlock('s2') > 0, redis_unlock('s2')");
is($out, 't|t', 'with the first sentinel dead, the next one answers');
is($err, '', 'without an error');
diag sprintf('first sentinel dead: lock + unlock in %.3f s', $secs);
sq($a, "RESET rwlock.redis_url");

# --- A sentinel that names a replica: the ROLE check refuses it and the
# next sentinel is asked.
my $liar = $dead - 1;
$liar-- until RwlockTest::port_free($liar);
my $fake = IPC::Run::start([ '/usr/bin/python3', "$FindBin::RealBin/../test/fake_sentinel.py",
	$liar, '127.0.0.1', $set->{replicas}[0] ], '>', '/dev/null', '2>', '/dev/null');
wait_until(sub { !RwlockTest::port_free($liar) }, 5);
my $url_liar = sentinel_url($set, sentinels => [ $liar, @{ $set->{sentinels} } ]);
my $c = session($node);
sq($c, "SET rwlock.redis_url = '$url_liar'");
($out, $err, $secs) = sq($c, "SELECT redis_wlock('s3') > 0");
is($out, 't', 'a sentinel naming a replica first: the lock is taken on the master');
is($err, '', 'without an error');
is((redis_holders($set->{master}, $prefix, 's3'))[0] ne '' ? 1 : 0, 1, 'on the real master');
diag sprintf('lying sentinel first: lock in %.3f s', $secs);
($out) = sq($c, "SELECT redis_unlock('s3')");
is($out, 't', 'and unlocked there');
$c->quit;
# Only the liar: no master found within connect_timeout, a class 08 error.
my $url_only_liar = sentinel_url($set, sentinels => [$liar]);
$c = session($node);
sq($c, "SET rwlock.connect_timeout = '1s'");
sq($c, "SET rwlock.redis_url = '$url_only_liar'");
($out, $err, $secs) = sq($c, "SELECT redis_wlock('s4')");
like(sqlstate($err), qr/^08/, 'only a lying sentinel: class 08, never a lock on the replica')
  or diag $err;
like($err, qr/not its master \(ROLE: slave\)/, 'the error says the server is not the master');
ok($secs < 3, sprintf('within about connect_timeout (%.2f s)', $secs));
$c->quit;
$fake->kill_kill;

# --- Failovers under load.
sub failover_round
{
	my ($how) = @_;
	my $holder = session($node);
	my $waiter = session($node);
	my $other = session($node);
	my @churn = map { session($node) } 1 .. 2;
	my $old = $set->{master};

	# The holder's grants are acknowledged by a replica (wait_replicas = 1),
	# so the promoted replica has them; the other sessions use 0.
	sq($holder, "SET rwlock.wait_replicas = 1");
	my ($ho, $he) = sq($holder, "SELECT redis_wlock('h_$how') > 0, redis_wlock('w_$how') > 0");
	is($ho, 't|t', "$how: the holder's grants were acknowledged") or diag $he;
	my $holder_owner = session_owner($holder);
	sq_send($waiter, "SELECT redis_wlock('w_$how') > 0");
	sleep 0.3;
	ok(!sq_poll($waiter), "$how: the waiter waits");
	sq_send($_, "SELECT redis_wlock('c_$how') > 0, redis_unlock('c_$how')") for @churn;
	$_->{rw_done} = 1 for @churn;

	my $t0 = time;
	if ($how eq 'failover')
	{
		redis_cli($set->{sentinels}[0], 'SENTINEL', 'FAILOVER', $set->{name});
	}
	else
	{
		kill 'KILL', redis_pid($old);
	}
	my ($new, $took) = sentinel_wait_master($set, $old, 30);
	ok(defined $new, "$how: a new master ($new) after " . sprintf('%.2f s', $took // -1));

	# Churn: each session locks and unlocks until it has worked again;
	# count the errors and the time to recovery.
	my %errors;
	my %recovered;
	for my $i (0 .. $#churn)
	{
		my $s = $churn[$i];
		my ($o, $e) = sq_wait($s, 20);
		$errors{$i}++ if sqlstate($e // '') =~ /^08/;
		for (1 .. 100)
		{
			($o, $e) = sq($s, "SELECT redis_wlock('c_$how') > 0, redis_unlock('c_$how')");
			if ($o eq 't|t') { $recovered{$i} = time - $t0; last; }
			$errors{$i}++ if sqlstate($e) =~ /^08/;
			sleep 0.05;
		}
	}
	for my $i (0 .. $#churn)
	{
		ok(defined $recovered{$i}, "$how: churn session $i recovered");
		ok(($errors{$i} // 0) <= 1, "$how: churn session $i saw at most one class 08 error ("
			  . ($errors{$i} // 0) . ')');
		ok(($recovered{$i} // 99) < 1 + 5 + ($took // 0),
			sprintf('%s: churn session %d recovered %.2f s after the fault', $how, $i, $recovered{$i} // -1));
	}
	diag sprintf('%s: new master after %.2f s; churn recovered after %s s; class 08 errors: %s',
		$how, $took // -1, join(', ', map { sprintf('%.2f', $recovered{$_} // -1) } sort keys %recovered),
		join(', ', map { $errors{$_} // 0 } 0 .. $#churn));

	# The holds stay held on the new master; others stay excluded.
	is(redis_mode_of($new, $prefix, "h_$how", $holder_owner), 'write',
		"$how: the new master has the holder's lock");
	my ($o, $e) = sq($other, "SELECT redis_try_wlock('h_$how')");
	is($o, 'f', "$how: another session is still excluded");
	# The keeper renews on the new master over several leases.
	for (1 .. 15) {
		sleep 1;
		if ($ENV{RW_DEBUG}) {
			diag "new $new: " . join(' ', split /\n/, redis_cli($new, 'HGETALL', "$prefix:{h_$how}")) . " TIME " . join(' ', split /\n/, redis_cli($new, 'TIME'));
			diag "old $old: " . join(' ', split /\n/, redis_cli($old, 'HGETALL', "$prefix:{h_$how}")) . " role " . redis_role($old);
			diag "clients new: " . join(' | ', grep { /rwlock/ } split /\n/, redis_cli($new, 'CLIENT', 'LIST'));
			diag "clients old: " . join(' | ', grep { /rwlock/ } split /\n/, redis_cli($old, 'CLIENT', 'LIST'));
		}
	}
	($o) = sq($other, "SELECT string_agg(name || ':' || lease_state, ',' ORDER BY name) FROM redis_locks WHERE granted AND name LIKE '%_$how'");
	is($o, "h_$how:held,w_$how:held", "$how: redis_locks shows the holds held 15 s (2.5 leases) later");
	# The master the sentinels name now: on a slow machine they may have
	# failed over once more (down-after is 1 s); the hold follows the
	# service, not the node.
	my $now = sentinel_master($set) // $new;
	is(redis_mode_of($now, $prefix, "h_$how", $holder_owner), 'write',
		"$how: still on the master after 2.5 leases" . ($now eq $new ? '' : " (moved again: $new -> $now)"))
	  or diag_set($set, $prefix, "h_$how");
	# A waiter whose try was in flight when the master died gets one class
	# 08 error (the acquire may or may not have run); it waits again.
	my $waiter_errors = 0;
	if (sq_poll($waiter))
	{
		my ($wo, $we) = sq_wait($waiter, 1);
		$waiter_errors++ if sqlstate($we) =~ /^08/;
		diag "$how: the waiter ended with: $we";
		sq_send($waiter, "SELECT redis_wlock('w_$how') > 0");
		sleep 0.3;
	}
	ok($waiter_errors <= 1, "$how: the waiter saw at most one class 08 error ($waiter_errors)");
	ok(!sq_poll($waiter), "$how: the waiter (still or again) waits");

	# The waiter is woken by the new master.
	my $t1 = time;
	my ($o2, $e2) = sq($holder, "SELECT redis_unlock('w_$how')");
	is($o2, 't', "$how: the holder unlocks on the new master") or diag $e2;
	my @r = sq_wait($waiter, 10);
	my $woke = time - $t1;
	is($r[0] // '', 't', "$how: the waiter gets the lock") or diag $r[1];
	ok($woke < 1.5, sprintf('%s: the waiter was woken %.3f s after the unlock', $how, $woke));
	my ($o3) = sq($holder, "SELECT redis_unlock('h_$how')");
	is($o3, 't', "$how: the holder's other lock unlocks");
	$_->quit for $holder, $waiter, $other, @churn;
	return $old;
}

# What each data node and sentinel says, for a failure's diagnosis.
sub diag_set
{
	my ($set, $prefix, $name) = @_;
	for my $p (@{ $set->{nodes} })
	{
		diag "node $p: role " . join(' ', split /\n/, redis_cli($p, 'ROLE'))
		  . "; $name: " . join(' ', split /\n/, redis_cli($p, 'HGETALL', "$prefix:{$name}"))
		  . '; pttl ' . redis_cli($p, 'PTTL', "$prefix:{$name}");
	}
	diag "sentinel $_: " . join(' ', split /\n/,
		redis_cli($_, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', $set->{name}))
	  for @{ $set->{sentinels} };
}

failover_round('failover');
unless ($ENV{RW_DEBUG})
{
	my $dead_master = failover_round('kill');
	# Back, as a replica of the new master (the sentinels reconfigure it).
	redis_start($dead_master);
}

# --- Sentinels that do not answer (all stopped) do not stall a session
# whose connection works: the once-a-second check has a 500 ms budget.
{
	my $s = session($node);
	sq($s, "SELECT redis_wlock('s6') > 0, redis_unlock('s6')");
	my @pids;
	for my $p (@{ $set->{sentinels} })
	{
		my $pid = slurp_file("$PostgreSQL::Test::Utils::tmp_check/sentinel$p/redis.pid");
		chomp $pid;
		push @pids, $pid;
	}
	kill 'STOP', @pids;
	sleep 1.2;
	my ($o, $e, $t) = sq($s, "SELECT redis_wlock('s6') > 0, redis_unlock('s6')");
	my ($o2, $e2, $t2) = sq($s, "SELECT redis_wlock('s6') > 0, redis_unlock('s6')");
	kill 'CONT', @pids;
	is($o, 't|t', 'all sentinels stopped: a connected session still locks');
	ok($t < 1.5, sprintf('within the check budget (%.3f s)', $t));
	is($o2, 't|t', 'and the next call too');
	ok($t2 < 0.5, sprintf('without asking again at once (%.3f s)', $t2));
	diag sprintf('all sentinels stopped: lock + unlock took %.3f s, then %.3f s', $t, $t2);
}

done_testing();
