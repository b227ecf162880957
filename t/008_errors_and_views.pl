# Failure costs, poolers, privileges and errors (SPEC 7 and 8, the views of
# SPEC 5):
#  6. failed connections leave no pending work behind: 1500 failed calls in
#     one session cost no more at the end than at the start, and leave no
#     holds counted in redis_connection_info();
#  7. a hold on a former server (now dead) never blocks locks on the
#     current one;
#  8. DISCARD ALL releases session-level holds, as it does advisory locks;
#  9. redis_held_locks and redis_locks are readable by every role, also
#     after ALTER EXTENSION rwlock UPDATE from 1.0;
# 10. errors: AUTH refused is class 08 naming authentication; a connect
#     timeout names rwlock.connect_timeout; a release refused by Redis
#     (WRONGTYPE) warns with Redis's message and does not pretend it will
#     be retried, at redis_unlock and at COMMIT.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $prefix = 'tap_err';
my $node = new_node('err', port => $port, preload => 1, lease => '3s');
my $plain = new_node('errnk', port => $port, lease => '3s');    # no keeper
note "Redis on port $port; lease 3s; node err with the keeper, errnk without";
my ($out, $err, $secs);

sub first_line
{
	my ($e) = @_;
	my ($l) = ($e // '') =~ /((?:ERROR|FATAL|WARNING):[^\n]*)/;
	return $l // '(none)';
}

# ------------------------------------------------------------------
# 7. A hold on a former server never blocks the current one.
# ------------------------------------------------------------------
my $portA = redis_start();
note "Redis A on port $portA, B (current) on $port";
{
	my $s = session($plain);
	sq($s, "SET rwlock.redis_url = 'redis://127.0.0.1:$portA/0'");
	($out) = sq($s, "SELECT redis_wlock('onA') > 0");
	is($out, 't', '7. the session holds onA on Redis A');
	sq($s, "SET rwlock.redis_url = 'redis://127.0.0.1:$port/0'");
	redis_stop($portA);
	sleep 1.2;    # the hold on A is due for renewal (a third of 3 s)
	($out, $err) = sq($s, "SELECT redis_wlock('z') > 0");
	is($out, 't', '7. with A stopped, redis_wlock on B works');
	is(sqlstate($err), '', '7. without an error') or diag "7. redis_wlock('z'): $err";
	unlike($err, qr/:$portA\b/, '7. and nothing names A');
	diag '7. redis_wlock on B with a hold on stopped A: ' . first_line($err);
	($out, $err) = sq($s, "SELECT redis_unlock('z')");
	is($out, 't', '7. redis_unlock on B works');
	is(sqlstate($err), '', '7. without an error') or diag "7. redis_unlock('z'): $err";
	($out, $err) = sq($s, "SELECT redis_try_wlock('z2'), redis_unlock('z2')");
	is($out, 't|t', '7. and again') or diag "7. $err";
	is(lock_state($port, 'tap_errnk', 'z'), 'free', '7. z is free on B');
	($out) = sq($s, "SELECT count(*) FROM redis_held_locks WHERE name = 'onA'");
	is($out, '1', '7. redis_held_locks still lists the hold on A');
	$s->quit;
}

# ------------------------------------------------------------------
# 6. Failed connections pile up nothing: 1500 failed calls to a dead port.
# ------------------------------------------------------------------
{
	my $s = session($node);
	sq($s, "SET rwlock.redis_url = 'redis://127.0.0.1:$portA/0'");    # stopped
	sq($s, 'CREATE TEMP TABLE rw6 (i int, secs float8, state text)');
	my $t0 = time;
	($out, $err) = sq($s, q{
DO $$
DECLARE
  t0 timestamptz := clock_timestamp();
  t1 timestamptz;
  st text;
BEGIN
  FOR i IN 1..1500 LOOP
    t1 := clock_timestamp();
    st := 'ok';
    BEGIN
      PERFORM redis_try_wlock('dead' || i);
    EXCEPTION WHEN others THEN
      GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
    END;
    INSERT INTO rw6 VALUES (i, extract(epoch FROM clock_timestamp() - t1), st);
    EXIT WHEN clock_timestamp() - t0 > interval '45 s';
  END LOOP;
END $$});
	my $took = time - $t0;
	is(sqlstate($err), '', '6. the loop of failed calls runs') or diag $err;
	($out) = sq($s, 'SELECT count(*) FROM rw6');
	is($out, '1500', '6. all 1500 calls ran within 45 s');
	($out) = sq($s, "SELECT string_agg(DISTINCT state, ',') FROM rw6");
	like($out, qr/^08\d\d\d(,08\d\d\d)*$/, "6. every call failed with class 08 ($out)");
	my ($stats) = sq($s, q{
SELECT round(sum(secs) FILTER (WHERE i <= 100)::numeric * 1000, 1),
       round(sum(secs) FILTER (WHERE i > n - 100)::numeric * 1000, 1),
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) FILTER (WHERE i <= 100))::numeric * 1e6, 1),
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) FILTER (WHERE i > n - 100))::numeric * 1e6, 1)
FROM rw6, (SELECT max(i) AS n FROM rw6) m});
	my ($sum_first, $sum_last, $med_first, $med_last) = split /\|/, $stats;
	diag sprintf('6. %d failed calls in %.1f s: first 100 took %s ms (median %s us a call), '
		  . 'last 100 %s ms (median %s us)',
		(sq($s, 'SELECT count(*) FROM rw6'))[0], $took, $sum_first, $med_first, $sum_last,
		$med_last);
	# Medians, so that a hiccup of the machine does not decide.
	cmp_ok($med_last, '<=', 2 * $med_first,
		'6. the last 100 calls are not more than 2x slower than the first 100 (medians)');
	($out, $err) = sq($s, 'SELECT holds FROM redis_connection_info() WHERE current');
	is($out, '0', '6. redis_connection_info() counts no holds on the dead server');
	sq($s, 'RESET rwlock.redis_url');
	($out, $err) = sq($s, "SELECT redis_wlock('alive') > 0, redis_unlock('alive')");
	is($out, 't|t', '6. the session works on a live Redis afterwards') or diag $err;
	$s->quit;
}

# ------------------------------------------------------------------
# 8. DISCARD ALL releases session-level holds.
# ------------------------------------------------------------------
{
	my $s = session($node);
	my $o = session($node);
	($out) = sq($s, "SELECT redis_wlock('d') > 0, redis_rlock('e') >= 0");
	is($out, 't|t', '8. the session holds d (write) and e (read)');
	($out, $err) = sq($s, 'DISCARD ALL');
	is(sqlstate($err), '', '8. DISCARD ALL works');
	sq($s, 'SET client_min_messages = warning');
	($out) = sq($s, 'SELECT count(*) FROM redis_held_locks');
	is($out, '0', '8. after DISCARD ALL redis_held_locks is empty');
	is(lock_state($port, 'tap_err', 'd') . ',' . lock_state($port, 'tap_err', 'e'),
		'free,free', '8. d and e are free in Redis');
	($out) = sq($o, "SELECT redis_try_wlock('d'), redis_try_wlock('e')");
	is($out, 't|t', "8. another session's try_wlock of d and e is true");
	($out, $err) = sq($s, "SELECT redis_try_wlock('d')");
	is($out, 'f', '8. the first session no longer holds d');
	$_->quit for ($s, $o);
}

# ------------------------------------------------------------------
# 9. The views are readable by every role.
# ------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE ROLE nobody LOGIN');
for my $view ('redis_held_locks', 'redis_locks')
{
	my ($ret, $stdout, $stderr) = $node->psql('postgres', "SELECT count(*) FROM $view",
		extra_params => [ '-U', 'nobody' ]);
	is($ret, 0, "9. a role with no privileges can read $view") or diag "9. $stderr";
}
my ($versions) = $node->safe_psql('postgres',
	"SELECT string_agg(version, ',' ORDER BY version) FROM pg_available_extension_versions WHERE name = 'rwlock'");
my ($default) = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'rwlock'");
note "9. rwlock versions available: $versions; default $default";
SKIP:
{
	skip "9. ALTER EXTENSION rwlock UPDATE from 1.0: no version but 1.0 is available ($versions); "
	  . 'it needs rwlock--1.0--1.1.sql', 4
	  unless grep { $_ ne '1.0' } split /,/, $versions;
	$node->safe_psql('postgres', 'CREATE DATABASE upd');
	my ($ret, $stdout, $stderr) = $node->psql('upd',
		"CREATE EXTENSION rwlock VERSION '1.0'; ALTER EXTENSION rwlock UPDATE;");
	is($ret, 0, '9. CREATE EXTENSION rwlock VERSION 1.0, then ALTER EXTENSION rwlock UPDATE')
	  or diag "9. $stderr";
	is($node->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'rwlock'"),
		$default, "9. the update ends at the default version ($default)");
	for my $view ('redis_held_locks', 'redis_locks')
	{
		($ret, $stdout, $stderr) = $node->psql('upd', "SELECT count(*) FROM $view",
			extra_params => [ '-U', 'nobody' ]);
		is($ret, 0, "9. after the update, a role with no privileges can read $view")
		  or diag "9. $stderr";
	}
}

# ------------------------------------------------------------------
# 10a. Redis refuses AUTH: class 08, naming authentication, never XX000.
# ------------------------------------------------------------------
my $portP = redis_start();
my $password_set = 1;
redis_cli($portP, 'CONFIG', 'SET', 'requirepass', 'secret');
END
{
	# So that the END block of RwlockTest can shut it down (keeping the
	# exit status: redis-cli would set it).
	local $?;
	redis_cli($portP, '--no-auth-warning', '-a', 'secret', 'CONFIG', 'SET', 'requirepass', '')
	  if $password_set;
}
{
	my $s = session($node);
	for my $case (
		[ 'no password', "redis://127.0.0.1:$portP/0" ],
		[ 'a wrong password', "redis://:wrongpw\@127.0.0.1:$portP/0" ])
	{
		my ($what, $url) = @$case;
		sq($s, "SET rwlock.redis_url = '$url'");
		($out, $err) = sq($s, "SELECT redis_wlock('pw') > 0");
		my $state = sqlstate($err);
		like($state, qr/^08(004|001)$/, "10a. $what: class 08 (08004 or 08001), got '$state'")
		  or diag "10a. $what: $err";
		like(strip_location($err), qr/auth/i, "10a. $what: the error names authentication");
		unlike($err, qr/wrongpw/, "10a. $what: and does not show the password");
		diag "10a. $what: " . first_line($err);
	}
	sq($s, "SET rwlock.redis_url = 'redis://:secret\@127.0.0.1:$portP/0'");
	($out, $err) = sq($s, "SELECT redis_wlock('pw') > 0, redis_unlock('pw')");
	is($out, 't|t', '10a. the right password works') or diag $err;
	$s->quit;
}
redis_cli($portP, '--no-auth-warning', '-a', 'secret', 'CONFIG', 'SET', 'requirepass', '');
$password_set = 0;

# ------------------------------------------------------------------
# 10b. A connect timeout (Redis frozen: the kernel accepts, the handshake
# is never answered) names rwlock.connect_timeout, not command_timeout.
# ------------------------------------------------------------------
{
	my $s = session($node);
	sq($s, "SET rwlock.redis_url = 'redis://127.0.0.1:$portP/0'");
	sq($s, "SET rwlock.connect_timeout = '1s'");
	sq($s, "SET rwlock.command_timeout = '5s'");
	redis_sigstop($portP);
	($out, $err, $secs) = sq($s, "SELECT redis_wlock('ct') > 0");
	redis_sigcont($portP);
	like(sqlstate($err), qr/^08/, '10b. a connect timeout is class 08') or diag "10b. $err";
	like(strip_location($err), qr/rwlock\.connect_timeout/, '10b. the error names rwlock.connect_timeout');
	unlike(strip_location($err), qr/command_timeout/, '10b. and not rwlock.command_timeout');
	cmp_ok($secs, '<', 1.8, '10b. within connect_timeout (1 s) + 0.8 s');
	my $text = strip_location($err);
	$text =~ s/\n/ | /g;
	diag sprintf('10b. connect timeout after %.3f s: %s', $secs, $text);
	$s->quit;
}

# ------------------------------------------------------------------
# 10c. A release refused by Redis (the lock's hash overwritten with a
# string: WRONGTYPE) gives a WARNING with Redis's message, returns false,
# and does not say it will be retried once Redis is reachable again.
# ------------------------------------------------------------------
{
	my $s = session($node);
	($out) = sq($s, "SELECT redis_wlock('wt') > 0");
	is($out, 't', '10c. the session holds wt');
	redis_cli($port, 'SET', "$prefix:{wt}", 'garbage');
	($out, $err) = sq($s, "SELECT redis_unlock('wt')");
	is($out, 'f', '10c. redis_unlock of a hold whose release Redis refuses returns false');
	like($err, qr/WARNING/, '10c. with a WARNING');
	like($err, qr/WRONGTYPE/, "10c. containing Redis's message (WRONGTYPE)");
	unlike(strip_location($err), qr/reachable again|retr(y|ied)/i,
		'10c. which does not say it will be retried when Redis is reachable again');
	my $text = strip_location($err);
	$text =~ s/\n/ | /g;
	diag "10c. redis_unlock: $text";
	unlike($err, qr/ERROR/, '10c. no ERROR');

	# A lock call on that key: XX000 with Redis's message in the detail.
	($out, $err) = sq($s, "SELECT redis_wlock('wt')");
	is(sqlstate($err), 'XX000', '10c. a lock call meeting WRONGTYPE: XX000');
	like($err, qr/DETAIL:.*WRONGTYPE/, "10c. with Redis's message in the detail");
	redis_cli($port, 'DEL', "$prefix:{wt}");

	# The same with an _xact hold released at COMMIT: a WARNING with
	# WRONGTYPE at COMMIT or at the session's next rwlock call.
	sq($s, 'BEGIN');
	($out) = sq($s, "SELECT redis_wlock_xact('wt2') > 0");
	is($out, 't', '10c. the session holds wt2 at xact level');
	redis_cli($port, 'SET', "$prefix:{wt2}", 'garbage');
	my ($o1, $e1) = sq($s, 'COMMIT');
	my ($o2, $e2) = sq($s, "SELECT redis_try_rlock('side')");
	unlike($e1 . $e2, qr/ERROR/, '10c. COMMIT and the next call give no ERROR');
	like($e1 . $e2, qr/WARNING/, '10c. a WARNING at COMMIT or at the next rwlock call');
	like($e1 . $e2, qr/WRONGTYPE/, "10c. containing Redis's message (WRONGTYPE)");
	unlike(strip_location($e1 . $e2), qr/reachable again|retr(y|ied)/i,
		'10c. which does not say it will be retried');
	my $t1 = strip_location($e1);
	my $t2 = strip_location($e2);
	s/\n/ | /g for ($t1, $t2);
	diag "10c. COMMIT: '$t1'; next call: '$t2'";
	redis_cli($port, 'DEL', "$prefix:{wt2}");
	$s->quit;
}

$node->stop;
$plain->stop;
redis_stop($portP);
redis_stop($port);
done_testing();
