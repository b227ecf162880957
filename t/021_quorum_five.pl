# Quorum mode (experimental) over five independent masters: the majority is
# three. A write lock is held on all five; with two masters stopped (SIGSTOP)
# a lock is still granted, on the three that answer, within one command
# timeout (the masters' answers are waited for together), and exclusive, and
# the keeper keeps it over several leases (its renewals reach the three
# first, and carry the script on each new connection: no NOSCRIPT round trip
# after the stopped masters' timeouts); with three stopped it is refused
# (class 08, saying the quorum was not reached), within one timeout of each
# kind (connecting, answering), and nothing stays behind on the two that
# answered; redis_connection_info pings the five at once (one timeout with
# two stopped); readers share over the five; fencing tokens increase across the
# faults; once the masters are back (and a second has passed: a failed
# master is left alone that long), locks are held on all five again; with
# the first two masters stopped, the three others are asked before any
# wait on a stopped one. The Python QuorumClient asks all masters at once
# too, and keeps a 3 s lease with two of five stopped.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my @r = quorum_start(5);
my $prefix = 'tap_quorum5';
my $max_lease = 10;    # s: rwlock.quorum_max_lease
# 3 s leases, renewed every second, and 1 s command and connect timeouts:
# a round that waited for each stopped master in turn (2 s with two) or
# sent a renewal again after a NOSCRIPT behind them would let leases lapse.
my $node = quorum_node('quorum5', '3s', $max_lease, @r);
my $a = session($node);
my $b = session($node);
my ($out, $err);
my $owner_a = session_owner($a);
my $owner_b = session_owner($b);

# Up for less than quorum_max_lease: wait until the masters count.
sleep $max_lease + 1.5;

# --- All five up.
($out, $err) = sq($a, "SELECT redis_wlock('x')");
ok($out > 0, 'a write lock on a quorum of five') or diag $err;
my $t1 = $out;
is(redis_mode_of($_, $prefix, 'x', $owner_a), 'write', "held on master $_") for @r;
($out) = sq($b, "SELECT redis_try_wlock('x')");
is($out, 'f', 'another session cannot take it');
($out) = sq($b, 'SELECT count(*) FROM redis_connection_info()');
is($out, '5', 'redis_connection_info: a row per master');
sq($a, "SELECT redis_unlock('x')");
($out) = sq($b, "SELECT redis_rlock('s') >= 0");
is($out, 't', 'a read lock');
($out) = sq($a, "SELECT redis_try_rlock('s')");
is($out, 't', 'shared with another reader');
($out) = sq($a, "SELECT redis_try_wlock('s2') AND redis_unlock('s2')");
is($out, 't', 'another name is free meanwhile');
sq($_, 'SELECT redis_unlock_all()') for ($a, $b);

# --- Two of five stopped: three answer, a majority.
redis_sigstop($_) for @r[3, 4];
my $t0 = time;
($out, $err) = sq($a, "SELECT redis_wlock('p')");
ok($out > $t1, 'granted with two masters stopped, with a larger token') or diag $err;
my $t2 = $out;
ok(time - $t0 < 1.8, 'within one command timeout, not one per stopped master ('
	  . elapsed_since($t0) . ' s)');
is(redis_mode_of($_, $prefix, 'p', $owner_a), 'write', "held on master $_") for @r[0 .. 2];
# b's connections to the two stopped masters are open: each is pinged, all
# at once.
$t0 = time;
($out, $err) = sq($b, "SELECT count(*) FILTER (WHERE connected) || '/' || count(*)
	FROM redis_connection_info()");
is($out, '3/5', 'redis_connection_info: the stopped masters are not connected') or diag $err;
ok(time - $t0 < 1.8, 'answered within one command timeout, not one per stopped master ('
	  . elapsed_since($t0) . ' s)');
($out, $err) = sq($b, "SELECT state || ' ' || writer FROM redis_lock_info('p')");
is($out, "write $owner_a", 'redis_lock_info: the majority\'s view') or diag $err;
($out) = sq($b, "SELECT redis_try_wlock('p')");
is($out, 'f', 'and exclusive');
# Three leases with two masters stopped: the keeper renews on the three.
my $lapsed = 0;
for (1 .. 14)
{
	sleep 0.5;
	$lapsed++ if 3 > grep { redis_mode_of($_, $prefix, 'p', $owner_a) eq 'write' } @r[0 .. 2];
}
is($lapsed, 0, 'held on the three over three leases, renewed by the keeper');
($out) = sq($b, "SELECT redis_try_wlock('p')");
is($out, 'f', 'still exclusive');
($out, $err) = sq($a, "SELECT redis_unlock('p')");
is($out, 't', 'released on the three') or diag $err;

# --- Three of five stopped: no majority.
redis_sigstop($r[2]);
$t0 = time;
($out, $err) = sq($b, "SELECT redis_wlock('d')");
like(sqlstate($err), qr/^08/, 'three masters stopped: a connection error') or diag $err;
# Master 2's connection is open (its answer is waited for, 1 s), 3 and 4
# are connected again (1 s for both: the first takes the round's connect
# time, the other is not asked). Each in turn would take 3 s or more.
ok(time - $t0 < 2.6, 'refused within one command and one connect timeout (' . elapsed_since($t0) . ' s)');
like($err, qr/quorum/, 'saying the quorum was not reached');
is(redis_mode_of($_, $prefix, 'd', $owner_b), '', "nothing left on master $_, which answered")
  for @r[0, 1];

# --- All back. A master that failed is left alone for a second (quorum.c,
# RW_QUORUM_RETRY_MS), then asked again.
redis_sigcont($_) for @r[2 .. 4];
sleep 1.2;
($out, $err) = sq($b, "SELECT redis_wlock('d')");
ok($out > $t2, 'with every master back, a lock is granted again, with a larger token') or diag $err;
ok(wait_until(sub { 5 == grep { redis_mode_of($_, $prefix, 'd', $owner_b) eq 'write' } @r }, 2),
	'held on all five');
($out) = sq($b, "SELECT redis_unlock('d')");
is($out, 't', 'and released');
is(redis_mode_of($_, $prefix, 'd', $owner_b), '', "gone from master $_") for @r;

# --- The first two masters (in URL order) stopped, their connections
# closed by a failed try and their second of rest over: a round asks the
# three open ones first and only then spends its connect time on a stopped
# one, so the grant runs on the three at once, not after that wait (the
# token is the granting masters' clock, TIME in µs, when they granted it).
redis_sigstop($_) for @r[0, 1];
sq($b, "SELECT redis_try_wlock('o1')");
sq($b, 'SELECT redis_unlock_all()');
sleep 1.2;
$t0 = time;
($out, $err) = sq($b, "SELECT redis_wlock('o2')");
ok($out > 0, 'granted with the first two masters stopped') or diag $err;
my $granted_after = ($out || 0) / 1e6 - $t0;
ok($granted_after < 0.5,
	sprintf('the masters that answer were asked before the wait on a stopped one (granted %.3f s after the call began, which took %s s)',
		$granted_after, elapsed_since($t0)));
redis_sigcont($_) for @r[0, 1];
sq($b, 'SELECT redis_unlock_all()');

# --- The Python QuorumClient, two masters stopped: it asks the masters all
# at once too (one socket timeout per round, not one per stopped master),
# and its renewals keep a 3 s lease.
sleep 1.2;
redis_sigstop($_) for @r[3, 4];
my $py = <<'PY';
import sys, time
sys.path.insert(0, sys.argv[1])
from rwlock_client import QuorumClient
c = QuorumClient.from_urls(sys.argv[2], prefix=sys.argv[3], lease=3.0, max_lease=10.0,
                           redis_kwargs={"socket_timeout": 1.0, "socket_connect_timeout": 1.0})
lk = c.write_lock("pyq")
t0 = time.monotonic()
lk.acquire(timeout=10)
print("acquired %.3f" % (time.monotonic() - t0), flush=True)
time.sleep(7)
print("lost", lk.lost, flush=True)
t0 = time.monotonic()
print("released", lk.release(), "%.3f" % (time.monotonic() - t0), flush=True)
PY
my ($pout, $perr) = ('', '');
my $h = IPC::Run::start([ '/usr/bin/python3', '-c', $py,
	"$FindBin::RealBin/../clients/python", quorum_url(@r), $prefix ],
	'<', \undef, '>', \$pout, '2>', \$perr);
my $pump = sub {
	my ($re) = @_;
	my $t_end = time + 15;
	$h->pump_nb, sleep 0.05 while $pout !~ $re && time < $t_end;
	return $pout =~ $re ? $1 : undef;
};
my $took = $pump->(qr/acquired ([\d.]+)/);
ok(defined $took && $took < 1.8,
	'Python: granted with two masters stopped within one socket timeout ('
	  . ($took // 'never') . ' s)')
  or diag $perr;
is(scalar(grep { redis_cli($_, 'HGET', "$prefix:{pyq}", 'w') ne '' } @r[0 .. 2]),
	3, 'Python: held on the three');
($out) = sq($a, "SELECT redis_try_wlock('pyq')");
is($out, 'f', 'Python: SQL cannot take it meanwhile');
is($pump->(qr/lost (\w+)/), 'False', 'Python: still held after more than two leases (renewed in time)')
  or diag $perr;
my $rel = $pump->(qr/released (\w+ [\d.]+)/) // '';
like($rel, qr/^True /, "Python: released on the three ($rel s)") or diag $perr;
$h->finish;
redis_sigcont($_) for @r[3, 4];

$a->quit;
$b->quit;
done_testing();
