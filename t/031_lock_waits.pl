# Lock waits a DBA can see (SPEC 12, issue 29): waiter rows in redis_locks,
# redis_blocking_pids / redis_blocking_owners, the log_lock_waits lines, the
# wait statistics, and a session's wait-for key gone from Redis once its
# wait ends.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('waits', port => $port, preload => 1, lease => '10s',
	conf => "log_lock_waits = on\ndeadlock_timeout = '500ms'\n");
my $prefix = 'tap_waits';
my ($out, $err, $secs);

my ($a, $b, $c) = (session($node), session($node), session($node));
my ($pa, $pb, $pc) = map { session_pid($_) } ($a, $b, $c);
sq($_, 'SELECT redis_lock_stats_reset()') for ($a);

sub stat_of
{
	my ($col) = @_;
	my ($v) = sq($a, "SELECT $col FROM redis_lock_stats WHERE datname = 'postgres'");
	return $v;
}

sub waiting_row
{
	my ($pid) = @_;
	my ($v) = sq($a, "SELECT name, mode, level, granted, waitstart IS NOT NULL,"
		  . " lease_state, datname FROM redis_locks WHERE pid = $pid AND NOT granted");
	return $v // '';
}

# ---- a writer waits for a writer ----
($out) = sq($a, "SELECT redis_wlock('x') > 0");
is($out, 't', 'A holds the write lock x');
my $log_start = -s $node->logfile;
sq_send($b, "SELECT redis_wlock_xact('x') > 0 FROM (SELECT 1) s");
ok(defined wait_until(sub { waiting_row($pb) ne '' }, 10), 'B shows as waiting in redis_locks');
is(waiting_row($pb), 'x|write|xact|f|t|waiting|postgres',
	'its row: name, mode, level, granted = false, waitstart, database');
($out) = sq($a, "SELECT granted, datname, lease_state FROM redis_locks WHERE pid = $pa");
is($out, 't|postgres|held', 'the holder row: granted, its database');
($out) = sq($a, "SELECT redis_blocking_pids($pb)");
is($out, "{$pa}", 'redis_blocking_pids names the holder');
my $owner_a = session_owner($a);
($out) = sq($a, "SELECT redis_blocking_owners($pb)");
is($out, "{$owner_a}", 'redis_blocking_owners names its owner id');
($out) = sq($a, "SELECT redis_blocking_pids($pa), redis_blocking_owners($pa)");
is($out, '{}|{}', 'a session that does not wait is blocked by nobody');
ok(defined wait_until(sub {
	slurp_file($node->logfile, $log_start) =~ /still waiting for Redis write lock "x"/ }, 10),
	'log_lock_waits: still waiting logged after deadlock_timeout');
my $log = slurp_file($node->logfile, $log_start);
like($log, qr/LOG:  process $pb still waiting for Redis write lock "x" after \d+\.\d{3} ms\n.*DETAIL:  Blocked by: process $pa\./,
	'the still-waiting line, as the server words its own, the holder in DETAIL');
my $wkeys = redis_cli($port, '--scan', '--pattern', "$prefix:wait:*");
like($wkeys, qr/\Q$prefix\E:wait:\{pg:/, 'the waiter says in Redis what it waits for');
sleep 0.3;
sq($a, "SELECT redis_unlock('x')");
($out, $err) = sq_wait($b, 10);
is($out, 't', 'B gets the lock once A lets go');
ok(defined wait_until(sub {
	slurp_file($node->logfile, $log_start) =~ /process $pb acquired Redis write lock "x" after (\d+\.\d{3}) ms/ }, 5),
	'log_lock_waits: acquired logged');
is(waiting_row($pb), '', 'no waiter row once granted');
is(redis_cli($port, '--scan', '--pattern', "$prefix:wait:*"), '', 'and no wait key left in Redis');

# ---- readers: a reader queued behind a waiting writer ----
sq($a, "SELECT redis_rlock('r')");
sq_send($b, "SELECT redis_wlock('r') > 0");
ok(defined wait_until(sub { waiting_row($pb) ne '' }, 10), 'writer B waits for reader A');
sq_send($c, "SELECT redis_rlock('r') > 0");
ok(defined wait_until(sub { waiting_row($pc) ne '' }, 10), 'reader C waits behind queued writer B');
($out) = sq($a, "SELECT redis_blocking_pids($pb), redis_blocking_pids($pc)");
is($out, "{$pa}|{$pb}", 'B is blocked by reader A; C by writer B, queued ahead (a soft blocker)');
sq($a, "SELECT redis_unlock('r')");
($out) = sq_wait($b, 10);
is($out, 't', 'B gets it');
sq($b, "SELECT redis_unlock('r')");
($out) = sq_wait($c, 10);
is($out, 't', 'then C');
sq($c, "SELECT redis_unlock('r')");

# ---- statistics ----
is(stat_of('waits'), '3', 'three waits counted');
ok(stat_of('wait_time') > 500, 'their time counted (ms)');
ok(stat_of('wait_time_max') > 500 && stat_of('wait_time_max') <= stat_of('wait_time'),
	'the longest wait counted (ms), no longer than all of them');
sq($a, "SELECT redis_wlock('t')");
sq($b, "SET lock_timeout = '300ms'");
($out, $err) = sq($b, "SELECT redis_wlock('t')");
is(sqlstate($err), '55P03', 'lock_timeout: 55P03');
is(stat_of('timeouts'), '1', 'a lock_timeout counted');
sq($b, "RESET lock_timeout");
sq($b, "SET statement_timeout = '300ms'");
($out, $err) = sq($b, "SELECT redis_wlock('t')");
is(sqlstate($err), '57014', 'statement_timeout: 57014');
is(stat_of('cancels'), '1', 'a cancelled wait counted');
sq($b, "RESET statement_timeout");
sq($a, "SELECT redis_unlock('t')");
is(waiting_row($pb), '', 'no waiter row after a timeout or a cancel');

# ---- a deadlock of two sessions of one server ----
sq($a, "BEGIN; SELECT redis_wlock_xact('d1')");
sq($b, "BEGIN; SELECT redis_wlock_xact('d2')");
my $t0 = time;
sq_send($a, "SELECT redis_wlock_xact('d2') > 0");
sleep 0.2;
sq_send($b, "SELECT redis_wlock_xact('d1') > 0");
my ($oa, $ea, $sa) = sq_wait($a, 10);
my ($ob, $eb, $sb) = sq_wait($b, 10);
my @states = sort(sqlstate($ea), sqlstate($eb));
is_deeply(\@states, [ '', '40P01' ], 'exactly one of the two gets 40P01, the other its lock');
my $victim_err = sqlstate($ea) eq '40P01' ? $ea : $eb;
like($victim_err, qr/deadlock detected/, 'deadlock detected');
like($victim_err, qr/Process \d+ waits for write lock "d\d"; blocked by process \d+\.\nProcess \d+ waits for write lock "d\d"; blocked by process \d+\./,
	'the DETAIL names the cycle as the server does');
cmp_ok(time - $t0, '<', 4, 'broken within a few deadlock_timeouts');
sq($_, "ROLLBACK") for ($a, $b);
is(stat_of('deadlocks'), '1', 'the deadlock counted');

# ---- an upgrade conflict stays as it was, and is counted ----
sq($a, "SELECT redis_rlock('u')");
sq($b, "SELECT redis_rlock('u')");
sq_send($a, "SELECT redis_wlock('u') > 0");
sleep 0.3;
($out, $err) = sq($b, "SELECT redis_wlock('u')");
is(sqlstate($err), '40P01', 'two upgrading readers: 40P01 for the second');
like($err, qr/both hold the read lock on Redis lock "u"/, 'with its own DETAIL, as before');
sq($b, "SELECT redis_unlock_all()");
my ($oa2, $ea2) = sq_wait($a, 10);
is($oa2, 't', 'the first upgrades once the other read lock is gone');
is(stat_of('upgrade_conflicts'), '1', 'the upgrade conflict counted');
sq($_, "SELECT redis_unlock_all()") for ($a, $b);
is(redis_cli($port, '--scan', '--pattern', "$prefix:wait:*"), '', 'no wait key left in Redis');

$_->quit for ($a, $b, $c);
$node->stop;
done_testing();
