# Renewals that Redis answers with an error, or that a quorum cannot
# decide, are retried soon, hold by hold, and never cost the other holds
# their renewal:
# a) without the keeper, a renewal refused with an error reply (OOM) is
#    tried again at the session's next calls, and the lock stays held;
# b) with the keeper, 520 holds whose renewal always fails (their keys
#    overwritten) and that come first in the shared table do not keep the
#    holds behind them from being renewed, and the keeper sleeps between
#    tries (its CPU is measured);
# c) in quorum mode, a hold a renewal cannot decide (one member down, one
#    that lost it) does not cost the hold renewed in the same batch: it
#    stays held, its unlock frees it on every member at once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# ---------------------------------------------------------------------
# a) no keeper: an error reply to a renewal is retried
# ---------------------------------------------------------------------
my $port = redis_start();
my $node = new_node('retry', port => $port, lease => '2s');
my $s = session($node);
my $other = session($node);

# A reader's renewal writes (HSET): under maxmemory it is refused with OOM.
my ($out, $err) = sq($s, "SELECT redis_rlock('a') >= 0");
is($out, 't', 'a) the session takes a read lock (lease 2 s, no keeper)');
sleep 0.8;    # past a third of the lease: due
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '1');
($out, $err) = sq($s, "SELECT redis_rlock('a') >= 0, redis_unlock('a')");
is($out, 't|t', 'a) a call while Redis refuses writes still works (stacked hold)');
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '0');
like(slurp_file($node->logfile), qr/renewing a lease failed: OOM/,
	'a) the renewal was answered OOM');

# The session keeps making calls that need no Redis round trip of their own;
# each may renew what is due.
my $t0 = time;
my $got = 0;
my $warned = '';
while (time - $t0 < 5)
{
	(undef, $err) = sq($s, "SELECT redis_rlock('a'), redis_unlock('a')");
	$warned .= $err;
	($out) = sq($other, "SELECT redis_try_wlock('a')");
	if ($out eq 't')
	{
		$got++;
		sq($other, "SELECT redis_unlock('a')");
	}
	sleep 0.25;
}
is($got, 0, 'a) the refused renewal was tried again: nobody else got the lock in 5 s (2.5 leases)');
unlike($warned, qr/"a" was lost/, 'a) and the holder never lost it (no WARNING at its calls)');
($out, $err) = sq($s, "SELECT redis_unlock('a')");
is($out, 't', 'a) the holder unlocks it: true');
is($err, '', 'a) with no warning');

# A hold whose renewals are refused for longer than its lease is reported
# lost.
sq($s, "SELECT redis_rlock('b')");
sleep 0.8;
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '1');
$t0 = time;
while (time - $t0 < 2.5)
{
	sq($s, "SELECT redis_rlock('b'), redis_unlock('b')");
	sleep 0.25;
}
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '0');
($out, $err) = sq($s, "SELECT redis_unlock('b')");
is($out, 'f', 'a) a hold refused renewal past its lease: unlock returns false');
like($err, qr/Redis lock "b" was lost/, 'a) with a WARNING naming it');
$_->quit for ($s, $other);
$node->stop;

# ---------------------------------------------------------------------
# b) keeper: holds it cannot renew do not starve the others
# ---------------------------------------------------------------------
$node = new_node('starve', port => $port, preload => 1, lease => '3s',
	conf => "rwlock.max_holds = 1024\n");
my $bad = session($node);
my $good = session($node);
$other = session($node);
($out, $err) = sq($bad,
	"SELECT count(redis_wlock('p' || i)) FROM generate_series(1, 520) i");
is($out, '520', 'b) one session takes 520 locks (the first 520 slots)');
($out) = sq($good,
	"SELECT count(redis_wlock('h' || i)) FROM generate_series(1, 5) i");
is($out, '5', 'b) another takes 5 locks after them');
# Overwritten keys: every renewal of those 520 is an error reply (WRONGTYPE).
my $cmds = join '', map { "SET tap_starve:{p$_} poison\n" } 1 .. 520;
IPC::Run::run([ $REDIS_CLI, '-p', $port ], '<', \$cmds, '>', \my $sink);
is(redis_cli($port, 'TYPE', 'tap_starve:{p520}'), 'string',
	'b) the 520 locks\' keys are overwritten');

sub keeper_cpu
{
	my $pids = $node->safe_psql('postgres',
		"SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE backend_type LIKE 'rwlock%'"
	);
	my $ticks = 0;
	for my $pid (split / /, $pids)
	{
		my $stat = eval { slurp_file("/proc/$pid/stat") } // next;
		$stat =~ s/^.*\) //;
		my @f = split / /, $stat;
		$ticks += $f[11] + $f[12];    # utime, stime
	}
	return $ticks / 100;              # USER_HZ
}
my $cpu0 = keeper_cpu();
$t0 = time;
$got = 0;
while (time - $t0 < 9)
{
	($out) = sq($other,
		"SELECT count(*) FILTER (WHERE redis_try_wlock('h' || i)) FROM generate_series(1, 5) i");
	$got += $out;
	sleep 0.5;
}
my $cpu = (keeper_cpu() - $cpu0) / (time - $t0);
is($got, 0, 'b) the 5 healthy holds were renewed for 3 leases: nobody else got them');
diag sprintf('b) keeper and renewers used %.0f%% of a CPU while 520 renewals failed', 100 * $cpu);
cmp_ok($cpu, '<', 0.1, 'b) the keeper sleeps between tries (under 10% of a CPU)');
($out, $err) = sq($good,
	"SELECT count(*) FILTER (WHERE redis_unlock('h' || i)) FROM generate_series(1, 5) i");
is($out, '5', 'b) the holder unlocks all 5: true');
is($err, '', 'b) with no warning');
$_->quit for ($bad, $good, $other);
$node->stop;
redis_stop($port);

# ---------------------------------------------------------------------
# c) quorum: an undecided hold does not cost the others
# ---------------------------------------------------------------------
my @ports = quorum_start(3);
$node = quorum_node('qretry', '3s', 4, @ports);
sleep 5.5;    # masters count once up for rwlock.quorum_max_lease
$s = session($node);
($out, $err) = sq($s, "SELECT redis_wlock('ok') > 0, redis_wlock('und') > 0");
is($out, 't|t', 'c) two write locks taken on the quorum of three');
# The third member loses 'und', the second goes down: 'und' has one yes and
# one no (undecided), 'ok' two yes (renewed).
redis_cli($ports[2], 'DEL', 'tap_qretry:{und}');
redis_stop($ports[1]);
($out, $err) = sq($s, "SELECT redis_renew()");
is($out, '1', 'c) redis_renew() renews the decided hold, not the undecided one');
$t0 = time;
sleep 7;    # over two leases, the keeper renewing
($out) = sq($s, "SELECT lease_state FROM redis_held_locks WHERE name = 'ok'");
is($out, 'held', "c) 'ok' still held after two leases beside an undecided hold");
my $pttl0 = redis_cli($ports[0], 'PTTL', 'tap_qretry:{ok}');
cmp_ok($pttl0, '>', 0, "c) 'ok' still in Redis (PTTL $pttl0 ms on the first member)");
($out, $err) = sq($s, "SELECT redis_unlock('ok')");
is($out, 't', "c) unlock of 'ok': true");
unlike($err, qr/"ok" was lost/, "c) 'ok' not reported lost");
is(quorum_field($ports[0], 'tap_qretry', 'ok', 'w'), '',
	"c) 'ok' released on the first member at once");
is(quorum_field($ports[2], 'tap_qretry', 'ok', 'w'), '',
	"c) and on the third");
$s->quit;
$node->stop;
done_testing();
