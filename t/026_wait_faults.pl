# Waits and commits on a Redis that stalls or goes away (SPEC 2.4, 8, 13).
#
# a) lock_timeout bounds a lock call on a stalled Redis (SIGSTOP), whatever
#    rwlock.command_timeout says: 55P03 after lock_timeout, for a connected
#    session, a session that has yet to connect and a waiter whose periodic
#    try stalls; a try form's wait likewise ends in false. What the cut-off
#    tries may have been granted is released before the name is taken again.
# b) A waiter (a session that found the lock busy) waits through Redis
#    stalling for longer than rwlock.command_timeout, and through Redis
#    restarting (its tries cannot connect for a while): it gets the lock when
#    the holder lets go, no error.
# c) COMMIT of a transaction with 2000 _xact holds on a stalled Redis (their
#    releases overflow the socket buffers) ends within a second of a cancel,
#    with a WARNING, not after rwlock.command_timeout; what it had not sent
#    goes at the session's next call, and every lock is then free.
# d) Nothing between Redis's answer and its record may throw (SPEC 8): a
#    lost client is noticed (client_connection_check_interval) by the
#    first CHECK_FOR_INTERRUPTS after it; when that came from a log line
#    written while a grant was read and not yet recorded (a WAIT that
#    failed, with rwlock.wait_replicas), the backend died holding a lock
#    nobody knew of, left to its lease. The lock must be free once the
#    backend is gone.
#
# Where the code under test does not honour the limit, a call would hang
# for rwlock.command_timeout (an hour here): each wait is cut off after
# RWLOCK_TAP_PATIENCE seconds (default 5) by thawing Redis, and the
# assertion fails.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $patience = $ENV{RWLOCK_TAP_PATIENCE} // 5;
my $port = redis_start();
my $prefix = 'tap_wfault';
my $node = new_node('wfault', port => $port, lease => '10s');
note "Redis on port $port; rwlock.lease = 10s, no keeper";
END { eval { redis_sigcont($port) } if $port; }

# Wait for a query sent with sq_send; past $limit s (default: patience),
# thaw Redis so that it finishes. Returns (stdout, stderr, seconds, thawed).
sub wait_or_thaw
{
	my ($s, $limit) = @_;
	my @r = sq_wait($s, $limit // $patience);
	return (@r, 0) if @r;
	redis_sigcont($port);
	@r = sq_wait($s, 60);
	die 'a query did not finish 60 s after Redis was thawed' unless @r;
	return (@r, 1);
}

sub first_line
{
	my ($err) = @_;
	my ($l) = ($err // '') =~ /((?:ERROR|FATAL|WARNING):[^\n]*)/;
	return $l // '(no error)';
}

# A session whose Redis commands and connections may take an hour.
sub patient_session
{
	my $s = session($node);
	sq($s, "SET rwlock.command_timeout = '1h'");
	sq($s, "SET rwlock.connect_timeout = '1h'");
	return $s;
}

my ($out, $err, $secs, $thawed);

# --- a) lock_timeout on a stalled Redis.
my $conn = patient_session();
($out) = sq($conn, "SELECT redis_wlock('a0') > 0 AND redis_unlock('a0')");
is($out, 't', 'a) the session is connected to Redis');
sq($conn, "SET lock_timeout = '1s'");
my $fresh = patient_session();
sq($fresh, "SET lock_timeout = '1s'");

redis_sigstop($port);
sq_send($conn, "SELECT redis_wlock('a1')");
($out, $err, $secs, $thawed) = wait_or_thaw($conn);
is(sqlstate($err), '55P03', 'a) stalled Redis, connected session: 55P03') or diag $err;
ok(!$thawed && $secs > 0.9 && $secs < 1.8, 'a) after lock_timeout (1 s), within 0.8 s')
  or diag sprintf('%.3f s%s', $secs, $thawed ? ' (only once Redis was thawed)' : '');

redis_sigstop($port) if $thawed;
sq_send($fresh, "SELECT redis_rlock('a2')");
($out, $err, $secs, $thawed) = wait_or_thaw($fresh);
is(sqlstate($err), '55P03', 'a) stalled Redis, session not yet connected: 55P03') or diag $err;
ok(!$thawed && $secs > 0.9 && $secs < 1.8, 'a) after lock_timeout (1 s), within 0.8 s')
  or diag sprintf('%.3f s%s', $secs, $thawed ? ' (only once Redis was thawed)' : '');

redis_sigstop($port) if $thawed;
sq_send($conn, "SELECT redis_try_wlock('a3', '1s')");
($out, $err, $secs, $thawed) = wait_or_thaw($conn);
is($out, 'f', "a) stalled Redis, redis_try_wlock(name, '1s'): false");
unlike($err, qr/ERROR/, 'a) no error');
ok(!$thawed && $secs > 0.9 && $secs < 1.8, 'a) after its wait (1 s), within 0.8 s')
  or diag sprintf('%.3f s%s', $secs, $thawed ? ' (only once Redis was thawed)' : '');

# The cut-off tries reach Redis once it wakes, and are granted there: the
# sessions owe their releases, which go before they take the names again.
redis_sigcont($port);
my $other = session($node);
for my $name ('a1', 'a3')
{
	($out, $err) = sq($conn, "SELECT redis_wlock('$name') > 0, redis_unlock('$name')");
	is($out, 't|t', "a) the session takes $name after the thaw, and lets it go") or diag $err;
	($out) = sq($other, "SELECT redis_try_wlock('$name') AND redis_unlock('$name')");
	is($out, 't', "a) another session can take $name then");
}
($out, $err) = sq($fresh, "SELECT redis_wlock('a2') > 0, redis_unlock('a2')");
is($out, 't|t', 'a) so can the session that had not connected, with a2') or diag $err;
($out) = sq($other, "SELECT redis_try_wlock('a2') AND redis_unlock('a2')");
is($out, 't', 'a) and another session then');

# A waiter whose periodic try stalls.
my $holder = session($node);
($out) = sq($holder, "SELECT redis_wlock('a4') > 0");
is($out, 't', 'a) a session holds a4');
sq($conn, "SET lock_timeout = '2s'");
my $t0 = sq_send($conn, "SELECT redis_wlock('a4')");
sleep 0.5;
ok(!defined((sq_wait($conn, 0))[0]), 'a) another waits for it');
redis_sigstop($port);
($out, $err, $secs, $thawed) = wait_or_thaw($conn);
is(sqlstate($err), '55P03', 'a) the waiter, Redis stalled under it: 55P03') or diag $err;
ok(!$thawed && $secs > 1.9 && $secs < 2.8, 'a) after lock_timeout (2 s), within 0.8 s')
  or diag sprintf('%.3f s%s', $secs, $thawed ? ' (only once Redis was thawed)' : '');
redis_sigcont($port);
($out) = sq($holder, "SELECT redis_unlock('a4')");
is($out, 't', 'a) the holder still held a4');
# The waiter's try that Redis ran once thawed queued its intent again: that
# is left to its lease (RW_INTENT_MS, 2 s), its connection being gone.
ok(defined wait_until(
		sub { (sq($other, "SELECT redis_try_wlock('a4') AND redis_unlock('a4')"))[0] eq 't' },
		4),
	'a) which is free once the holder let go (within the intent lease of the waiter that gave up)');
sq($_, 'RESET lock_timeout') for ($conn, $fresh);

# --- b) A waiter waits through a stall and a restart of Redis.
sub waiter_case
{
	my ($what, $fault, $mend) = @_;
	my $name = "b_$what";
	my $h = session($node);
	my $w = session($node);
	sq($w, "SET rwlock.command_timeout = '1s'");
	sq($w, "SET rwlock.connect_timeout = '1s'");
	($out) = sq($h, "SELECT redis_wlock('$name') > 0");
	is($out, 't', "b) $what: a session holds $name");
	sq_send($w, "SELECT redis_wlock('$name') > 0");
	sleep 0.5;
	ok(!defined((sq_wait($w, 0))[0]), "b) $what: another waits for it");
	$fault->();
	sleep 3;    # three command_timeouts, and as many tries at least
	ok(!defined((sq_wait($w, 0))[0]), "b) $what: the waiter still waits, 3 s into the fault")
	  or diag 'it ended with ' . first_line($w->{stderr});
	$mend->();
	my $released = time;
	($out, $err) = sq($h, "SELECT redis_unlock('$name')");
	($out, $err, $secs) = sq_wait($w, 10);
	is($out, 't', "b) $what: the waiter gets the lock") or diag $err;
	unlike($err // '', qr/ERROR/, "b) $what: no error");
	diag sprintf('b) %s: the waiter got the lock %.2f s after the release',
		$what, time - $released) if ($out // '') eq 't';
	$_->quit for ($h, $w);
}

waiter_case('stall', sub { redis_sigstop($port) }, sub { redis_sigcont($port) });
waiter_case('restart', sub { redis_stop($port) }, sub { redis_start($port) });

# --- c) COMMIT with 2000 _xact holds, Redis stalled, cancelled.
my $n = 2000;
my $committer = patient_session();
my $cpid = session_pid($committer);
sq($committer, 'BEGIN');
($out, $err) = sq($committer,
	"SELECT count(redis_wlock_xact('c' || g)) FROM generate_series(1, $n) g");
is($out, $n, "c) a transaction holds $n _xact locks") or diag $err;
redis_sigstop($port);
sq_send($committer, 'COMMIT');
sleep 0.5;
ok(!defined((sq_wait($committer, 0))[0]), 'c) COMMIT is sending the releases to the stalled Redis');
$t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($cpid)");
($out, $err, $secs, $thawed) = wait_or_thaw($committer);
$secs = time - $t0;
ok(!$thawed && $secs < 1.0, 'c) COMMIT ends within 1 s of the cancel')
  or diag sprintf('%.3f s after the cancel%s', $secs, $thawed ? ' (only once Redis was thawed)' : '');
like($err, qr/WARNING:  57014: canceling the release of Redis locks at transaction end/,
	'c) with a WARNING that says so');
unlike($err, qr/ERROR/, 'c) no ERROR: the transaction committed') or diag $err;
redis_sigcont($port);
($out, $err) = sq($committer, "SELECT redis_wlock('c_next') > 0, redis_unlock('c_next')");
is($out, 't|t', "c) the session's next call works after the thaw") or diag $err;
my $free = wait_until(sub { lock_state($port, $prefix, "c$n") eq 'free' }, 5);
ok(defined $free, 'c) the last of the releases reaches Redis after that call');
($out) = sq($other,
	"SELECT count(*) FILTER (WHERE redis_try_wlock('c' || g)) FROM generate_series(1, $n) g");
is($out, $n, "c) another session takes all $n locks");
sq($other, 'SELECT redis_unlock_all()');

# --- d) A client lost while a grant is read (WAIT renamed away: it fails).
my $port2 = redis_start(undef, '--rename-command', 'WAIT', 'WAIT_RENAMED_BY_TEST');
my $node2 = new_node('wfault2', port => $port2, lease => '30s',
	conf => "rwlock.wait_replicas = 1\n");
my $lost = session($node2);
sq($lost, "SET rwlock.command_timeout = '1h'");
sq($lost, "SET client_connection_check_interval = '50ms'");
($out, $err) = sq($lost, "SELECT redis_try_wlock('d0')");
is($out, 'f', 'd) with WAIT failing, a grant is undone (false)');
like($err, qr/not acknowledged by enough replicas/, 'd) with a WARNING');
my $lpid = session_pid($lost);
redis_sigstop($port2);
sq_send($lost, "SELECT redis_wlock('d1')");
sleep 0.3;
$lost->{run}->kill_kill;    # the client goes while the grant is on its way
sleep 0.3;                  # the backend's connection check is due
redis_sigcont($port2);
ok(defined wait_until(sub { backend_gone($node2, $lpid) }, 10),
	'd) the backend whose client went away ends');
like(slurp_file($node2->logfile), qr/connection to client lost/,
	'd) having noticed the lost client');
my $dfree = wait_until(sub { lock_state($port2, 'tap_wfault2', 'd1') eq 'free' }, 2);
ok(defined $dfree, 'd) the lock it was granted is free, not left to its lease')
  or diag 'd1 in Redis: ' . lock_state($port2, 'tap_wfault2', 'd1');
$node2->stop;
redis_stop($port2);

$_->quit for ($conn, $fresh, $other, $holder, $committer);
$node->stop;
redis_stop($port);
done_testing();
