# Interrupts always win (SPEC 8): whatever Redis does and whatever
# rwlock.command_timeout says, statement_timeout and cancel end any rwlock
# call within about a second (57014), pg_terminate_backend ends a backend
# within a second, and COMMIT with _xact holds on a stalled Redis returns
# within one rwlock.command_timeout. An interrupt that cuts a call short
# leaves no answer behind for the next call to mistake for its own.
#
# Redis is stalled three ways: SIGSTOP (it accepts connections into the
# kernel's backlog but answers nothing), DEBUG SLEEP (it answers late), and
# CLIENT KILL (it drops the connections of a waiter and a holder).
#
# Where the code under test does not honour an interrupt, a call could hang
# for rwlock.command_timeout (an hour here): each wait is therefore cut off
# after RWLOCK_TAP_PATIENCE seconds (default 4) by thawing Redis (SIGCONT),
# the assertion fails, and the time it took is reported.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $patience = $ENV{RWLOCK_TAP_PATIENCE} // 4;
my $lease = 3;
my $port = redis_start(undef, '--enable-debug-command', 'yes');
my $prefix = 'tap_intr';
my $node = new_node('intr', port => $port, lease => "${lease}s");
note "Redis on port $port; rwlock.lease = ${lease}s, no keeper";
END { eval { redis_sigcont($port) } if $port; }

# Wait for a query sent with sq_send; if it is not done within $patience s,
# thaw Redis (if $frozen) so that it finishes, and say how long it took.
# Returns (stdout, stderr, seconds, whether it needed the thaw).
sub wait_or_thaw
{
	my ($s, $frozen, $limit) = @_;
	my @r = sq_wait($s, $limit // $patience);
	return (@r, 0) if @r;
	redis_sigcont($port) if $frozen;
	@r = sq_wait($s, 60);
	die 'a query did not finish 60 s after Redis was thawed' unless @r;
	redis_sigstop($port) if $frozen;
	return (@r, 1);
}

sub fmt_secs
{
	my ($secs, $thawed) = @_;
	return sprintf('%.3f s%s', $secs, $thawed ? ' (only once Redis was thawed)' : '');
}

sub first_line
{
	my ($err) = @_;
	my ($l) = ($err // '') =~ /((?:ERROR|FATAL|WARNING):[^\n]*)/;
	return $l // '(no error)';
}

# --- a) statement_timeout cuts off lock calls on a frozen Redis, however
# long rwlock.command_timeout (any role may set it to an hour).
my $conn = session($node);
sq($conn, "SET rwlock.command_timeout = '1h'");
sq($conn, "SET rwlock.connect_timeout = '1h'");
my ($out, $err, $secs, $thawed) = sq($conn, "SELECT redis_wlock('y0') > 0");
is($out, 't', 'a) the session is connected to Redis and holds y0');
sq($conn, "SET statement_timeout = '1s'");
my $fresh = session($node);
sq($fresh, "SET rwlock.command_timeout = '1h'");
sq($fresh, "SET rwlock.connect_timeout = '1h'");
sq($fresh, "SET statement_timeout = '1s'");

redis_sigstop($port);
for my $i (1 .. 5)
{
	sq_send($conn, "SELECT redis_wlock('y$i')");
	($out, $err, $secs, $thawed) = wait_or_thaw($conn, 1);
	is(sqlstate($err), '57014', "a) frozen Redis, connected session, call $i: 57014");
	cmp_ok($secs, '<', 1.8, "a) call $i ends within statement_timeout (1 s) + 0.8 s");
	diag sprintf('a) SIGSTOP, connected session, redis_wlock call %d: %s, %s',
		$i, fmt_secs($secs, $thawed), first_line($err));
}
sq_send($fresh, "SELECT redis_wlock('yf')");
($out, $err, $secs, $thawed) = wait_or_thaw($fresh, 1);
is(sqlstate($err), '57014', 'a) frozen Redis, session not yet connected: 57014');
cmp_ok($secs, '<', 1.8, 'a) within statement_timeout (1 s) + 0.8 s');
diag sprintf('a) SIGSTOP, fresh session, redis_wlock: %s, %s',
	fmt_secs($secs, $thawed), first_line($err));

# --- b) pg_cancel_backend of a session blocked in redis_lock_info or
# redis_unlock (not a lock wait) on the frozen Redis.
redis_sigcont($port);
my %cancel;
for my $what ('redis_lock_info', 'redis_unlock')
{
	my $s = session($node);
	sq($s, "SET rwlock.command_timeout = '1h'");
	sq($s, "SET rwlock.connect_timeout = '1h'");
	($out) = sq($s, "SELECT redis_wlock('b_$what') > 0");
	is($out, 't', "b) the session for $what holds b_$what");
	$cancel{$what} = $s;
}
redis_sigstop($port);
for my $what ('redis_lock_info', 'redis_unlock')
{
	my $s = $cancel{$what};
	my $pid = session_pid($s);
	sq_send($s, $what eq 'redis_lock_info'
		? "SELECT state FROM redis_lock_info('b_$what')"
		: "SELECT redis_unlock('b_$what')");
	sleep 0.3;
	($out, $err) = sq_wait($s, 0);
	ok(!defined $out, "b) $what is blocked on the frozen Redis");
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	($out, $err, $secs, $thawed) = wait_or_thaw($s, 1);
	$secs = time - $t0;
	is(sqlstate($err), '57014', "b) pg_cancel_backend ends $what with 57014");
	cmp_ok($secs, '<', 1.5, "b) within 1.5 s of the cancel");
	diag sprintf('b) SIGSTOP, pg_cancel_backend of %s: ended %s after the cancel, %s',
		$what, fmt_secs($secs, $thawed), first_line($err));
}

# --- c) COMMIT of a transaction holding 3 _xact locks, taken before Redis
# froze, returns within rwlock.command_timeout (1 s) + 0.5 s, no ERROR.
# --- d) pg_terminate_backend of a session holding 6 locks (3 session, 3
# xact) on the frozen Redis ends it within 1.5 s.
redis_sigcont($port);
my $committer = session($node);
sq($committer, "SET rwlock.command_timeout = '1s'");
sq($committer, 'BEGIN');
($out) = sq($committer,
	"SELECT redis_wlock_xact('c1') > 0, redis_wlock_xact('c2') > 0, redis_rlock_xact('c3') >= 0");
is($out, 't|t|t', 'c) the committer holds three _xact locks');
my $victim = session($node);
# The defaults: connect_timeout 5s, command_timeout 2s.
my $vpid = session_pid($victim);
($out) = sq($victim,
	"SELECT redis_wlock('d1') > 0, redis_wlock('d2') > 0, redis_rlock('d3') >= 0");
is($out, 't|t|t', 'd) the victim holds three session-level locks');
sq($victim, 'BEGIN');
($out) = sq($victim,
	"SELECT redis_wlock_xact('d4') > 0, redis_wlock_xact('d5') > 0, redis_rlock_xact('d6') >= 0");
is($out, 't|t|t', 'd) and three _xact locks, idle in its transaction');

redis_sigstop($port);
sq_send($committer, 'COMMIT');
($out, $err, $secs, $thawed) = wait_or_thaw($committer, 1);
unlike($err, qr/ERROR/, 'c) COMMIT on the frozen Redis gives no ERROR');
cmp_ok($secs, '<', 1.5, 'c) COMMIT returns within command_timeout (1 s) + 0.5 s');
diag sprintf('c) SIGSTOP, COMMIT with 3 _xact holds: %s%s',
	fmt_secs($secs, $thawed), $err =~ /WARNING/ ? ', ' . first_line($err) : '');

my $t0 = time;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($vpid)");
my $gone = wait_until(sub { backend_gone($node, $vpid) }, $patience);
my $thaw_at;
if (!defined $gone)
{
	$thaw_at = time - $t0;
	redis_sigcont($port);
	wait_until(sub { backend_gone($node, $vpid) }, 60);
}
my $gone_secs = time - $t0;
$gone_secs = $gone if defined $gone;
ok(defined $gone && $gone < 1.5,
	'd) the terminated backend is gone from pg_stat_activity within 1.5 s');
diag sprintf('d) SIGSTOP, pg_terminate_backend of a session with 6 holds: gone after %.3f s%s',
	$gone_secs,
	defined $thaw_at ? sprintf(' (Redis thawed at %.1f s)', $thaw_at) : '');
eval { $victim->quit };

# --- e) Redis thawed: the sessions that survived work again, and the
# terminated session's locks are free in Redis within its lease + 1.5 s.
redis_sigcont($port);
my $thawed_at = time;
for my $s ($conn, $fresh, $cancel{redis_lock_info}, $cancel{redis_unlock}, $committer)
{
	sq($s, 'RESET statement_timeout');
	sq($s, 'ROLLBACK');    # in case
}
my $n = 0;
for my $s ($conn, $fresh, $cancel{redis_lock_info}, $cancel{redis_unlock}, $committer)
{
	$n++;
	($out, $err) = sq($s, "SELECT redis_wlock('e$n') > 0, redis_unlock('e$n')");
	is($out, 't|t', "e) surviving session $n: lock + unlock work after the thaw");
	unlike($err, qr/ERROR/, "e) surviving session $n: no error")
	  or diag "e) session $n: $err";
}
my $free = wait_until(
	sub {
		!grep { lock_state($port, $prefix, "d$_") ne 'free' } 1 .. 6;
	},
	$lease + 3);
my $free_secs = time - $thawed_at;
ok(defined $free && $free_secs < $lease + 1.5,
	"e) the terminated session's six locks are free in Redis within lease ($lease s) + 1.5 s of the thaw");
diag sprintf("e) terminated session's locks free in Redis %s after the thaw",
	defined $free ? sprintf('%.2f s', $free_secs) : 'not even ' . ($lease + 3) . ' s');
($out) = sq($conn, "SELECT redis_try_wlock('d1') AND redis_try_wlock('d4') AND redis_try_wlock('d6')");
is($out, 't', 'e) another session takes them');
sq($conn, 'SELECT redis_unlock_all()');

# --- b') An interrupt while redis_connection_info waits for its PONGs leaves
# no answer behind on a connection kept: the next call, sent while Redis is
# still frozen, reads its own answer once Redis wakes, not the PONG.
my $ci = session($node);
sq($ci, "SET rwlock.command_timeout = '1h'");
($out) = sq($ci, "SELECT redis_wlock('ci0') > 0 AND redis_unlock('ci0')");
is($out, 't', "b') the session is connected to Redis");
redis_sigstop($port);
sq($ci, "SET statement_timeout = '500ms'");
($out, $err) = sq($ci, 'SELECT count(*) FROM redis_connection_info()');
is(sqlstate($err), '57014', "b') statement_timeout ends redis_connection_info on the frozen Redis");
sq($ci, 'RESET statement_timeout');
sq_send($ci, "SELECT redis_wlock('ci1') > 0");
sleep 0.3;
redis_sigcont($port);
($out, $err) = sq_wait($ci, 5);
is($out, 't', "b') the next call, sent before Redis woke, gets its own answer") or diag $err;
($out, $err) = sq($ci, "SELECT redis_unlock('ci1')");
is($out, 't', "b') and the lock it took is released") or diag $err;
is(lock_state($port, $prefix, 'ci1'), 'free', "b') free in Redis");

# --- a') The same cut-off when Redis answers late (DEBUG SLEEP 3).
sq($conn, "SET statement_timeout = '1s'");
sq($conn, "SET rwlock.command_timeout = '1h'");
($out) = sq($conn, "SELECT count(*) FROM redis_lock_info('warm')");
for my $i (1 .. 2)
{
	my $sleeper = IPC::Run::start([ $REDIS_CLI, '-p', $port, 'DEBUG', 'SLEEP', '3' ],
		'>', \my $sout, '2>', \my $serr);
	# Until Redis is asleep (it then answers nothing).
	wait_until(sub { !redis_answers($port, 0.05) }, 2);
	sq_send($conn, "SELECT redis_wlock('ys$i')");
	($out, $err, $secs) = sq_wait($conn, 10);
	$sleeper->finish;
	is(sqlstate($err), '57014', "a') DEBUG SLEEP 3, call $i: 57014");
	cmp_ok($secs, '<', 1.8, "a') call $i ends within statement_timeout (1 s) + 0.8 s");
	diag sprintf("a') DEBUG SLEEP 3, connected session, redis_wlock call %d: %.3f s, %s",
		$i, $secs, first_line($err));
}
sq($conn, 'RESET statement_timeout');
sq($conn, 'RESET rwlock.command_timeout');
sq($conn, 'SELECT redis_unlock_all()');

# --- CLIENT KILL while a session waits for a lock: the waiter still gets
# the lock when it is released, or a clear class 08 error; it never hangs
# past its lock_timeout.
for my $type ('normal', 'pubsub')
{
	my $holder = session($node);
	my $waiter = session($node);
	($out) = sq($holder, "SELECT redis_wlock('k_$type') > 0");
	is($out, 't', "CLIENT KILL TYPE $type: the holder holds k_$type");
	sq($waiter, "SET lock_timeout = '5s'");
	my $started = sq_send($waiter, "SELECT redis_wlock('k_$type') > 0");
	sleep 0.5;
	ok(!defined((sq_wait($waiter, 0))[0]), "CLIENT KILL TYPE $type: the waiter waits");
	redis_cli($port, 'CLIENT', 'KILL', 'TYPE', $type);
	sleep 0.5;
	my $released = time;
	($out, $err) = sq($holder, "SELECT redis_unlock('k_$type')");
	is($out, 't', "CLIENT KILL TYPE $type: the holder releases");
	($out, $err, $secs) = sq_wait($waiter, 6);
	ok(defined $secs, "CLIENT KILL TYPE $type: the waiter does not hang past its lock_timeout (5 s)");
	$secs //= 99;
	ok(($out // '') eq 't' || sqlstate($err) =~ /^08/,
		"CLIENT KILL TYPE $type: the waiter gets the lock or a class 08 error");
	diag sprintf('CLIENT KILL TYPE %s: the waiter %s %.3f s after the release',
		$type, ($out // '') eq 't' ? 'got the lock' : 'ended with ' . first_line($err),
		$started + $secs - $released);
	if (($out // '') eq 't')
	{
		cmp_ok($started + $secs - $released, '<', 1.5,
			"CLIENT KILL TYPE $type: within 1.5 s of the release");
	}
	$_->quit for ($holder, $waiter);
}

# --- f) A cancel that cuts the releases of a subtransaction's abort short
# (a PL/pgSQL EXCEPTION block) is not swallowed: the statement goes on
# after the abort, and its statement_timeout fires only once, so the cancel
# must end the statement there. The block's first round takes 2,000 _xact
# locks, then sleeps while Redis is frozen: their releases (EVAL with the
# script's body) fill the socket, and the timeout comes while the abort
# sends them. The loop's next lock call would wait on the frozen Redis for
# rwlock.command_timeout (an hour).
redis_sigcont($port);
{
	my $sx = session($node);
	my $sxpid = session_pid($sx);
	($out) = sq($sx, "SELECT redis_wlock('f0') > 0 AND redis_unlock('f0')");
	is($out, 't', 'f) the session is connected to Redis');
	sq($sx, "SET rwlock.command_timeout = '1h'");
	sq($sx, "SET statement_timeout = '5s'");
	my $t0 = sq_send($sx, q{DO $$
BEGIN
  FOR i IN 1..1000 LOOP
    BEGIN
      PERFORM redis_wlock_xact('f' || i || '.' || j)
        FROM generate_series(1, CASE WHEN i = 1 THEN 2000 ELSE 1 END) j;
      IF i = 1 THEN PERFORM pg_sleep(1); END IF;
      RAISE EXCEPTION 'x';
    EXCEPTION WHEN others THEN
    END;
  END LOOP;
END $$});
	my $asleep = wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT wait_event FROM pg_stat_activity WHERE pid = $sxpid") eq 'PgSleep';
		},
		5);
	ok(defined $asleep, 'f) the block took its locks and sleeps');
	redis_sigstop($port);
	($out, $err, $secs, $thawed) = wait_or_thaw($sx, 1, 5 + $patience - (time - $t0));
	$secs = time - $t0 if $thawed;
	like($err, qr/WARNING:  57014: canceling the release of Redis locks/,
		'f) statement_timeout cut the releases of the abort short');
	is(sqlstate($err), '57014', 'f) and the statement then ends with 57014');
	cmp_ok($secs, '<', 6, 'f) within statement_timeout (5 s) + 1 s');
	diag sprintf('f) SIGSTOP, statement_timeout during an EXCEPTION block\'s releases: %s, %s',
		fmt_secs($secs, $thawed), ($err =~ /(ERROR:[^\n]*)/)[0] // '(no error)');
	redis_sigcont($port);
	sq($sx, 'RESET statement_timeout');
	($out, $err) = sq($sx, "SELECT redis_wlock('f1.1') > 0 AND redis_unlock('f1.1')");
	is($out, 't', 'f) after the thaw the session takes a lock its abort released') or diag $err;
	$sx->quit;
}

$_->quit for ($conn, $fresh, $cancel{redis_lock_info}, $cancel{redis_unlock}, $committer);
$node->stop;
redis_stop($port);
done_testing();
