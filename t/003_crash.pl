# Crashes. A backend killed with SIGKILL: the postmaster restarts every
# backend and reinitialises shared memory, the keeper comes back with an
# empty table, and the dead session's locks run out with their lease. The
# keeper terminated (SIGTERM): the postmaster starts it again within a
# second, the sessions keep running, and renewal resumes before their
# leases run out. The keeper killed with SIGKILL: a crash restart, after
# which the new keeper renews new holds.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $lease = 3;
my $port = redis_start();
my $node = new_node('crash', port => $port, preload => 1, lease => "${lease}s",
	conf => "restart_after_crash = on\n");
note "Redis on port $port; rwlock.lease = ${lease}s";
my $prefix = 'tap_crash';

sub wait_keeper
{
	my ($not) = @_;
	my $pid = '';
	wait_until(sub { $pid = keeper_pid($node); $pid ne '' && $pid ne ($not // '') }, 15);
	return $pid;
}

my $k1 = wait_keeper();
ok($k1, "keeper runs (pid $k1)");

# --- A backend holding locks is killed with SIGKILL.
my $victim = session($node);
my ($vpid) = sq($victim, "SELECT pg_backend_pid()");
my ($out) = sq($victim, "SELECT redis_wlock('k1') > 0, redis_rlock('k2') >= 0");
is($out, 't|t', 'victim holds a write and a read lock');
sleep 1.2;    # the keeper has renewed them at least once
is(lock_state($port, $prefix, 'k1'), 'write', 'k1 is held in Redis');
is(lock_state($port, $prefix, 'k2'), 'read', 'k2 is held in Redis');
my $t0 = time;
kill 'KILL', $vpid;
my $free = wait_until(
	sub {
		lock_state($port, $prefix, 'k1') eq 'free'
		  && lock_state($port, $prefix, 'k2') eq 'free';
	},
	$lease + 3);
ok(defined $free, 'the locks of the killed backend are free in Redis');
diag sprintf('SIGKILL of a holder: locks free in Redis %.2f s after the kill (lease %d s)',
	$free // -1, $lease);
cmp_ok($free // 99, '<=', $lease + 1, 'within lease + 1 s');
eval { $victim->quit };

# The postmaster restarted everything; the new keeper renews nothing dead.
$node->poll_query_until('postgres', 'SELECT true') or die 'no restart';
my $k2 = wait_keeper($k1);
ok($k2 && $k2 ne $k1, "a new keeper runs after the crash restart (pid $k2)");
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_locks'),
	'0', 'redis_locks is empty after the crash restart');
is($node->safe_psql('postgres', "SELECT redis_try_wlock('k1') AND redis_try_wlock('k2')"),
	't', 'a new session takes both locks');
like(slurp_file($node->logfile), qr/server process \(PID $vpid\) was terminated by signal 9/,
	'the log shows the crash restart');

# --- The keeper is terminated (SIGTERM); sessions keep their locks.
my $holder = session($node);
my $other = session($node);
sq($holder, "SELECT redis_wlock('kt')");
sleep 0.5;
$t0 = time;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($k2)");
my $k3 = wait_keeper($k2);
my $back = time - $t0;
ok($k3, "the keeper is restarted after SIGTERM (pid $k3)");
diag sprintf('keeper SIGTERM: new keeper running %.2f s later', $back);
my $got = 0;
while (time - $t0 < 3 * $lease + 0.3)
{
	($out) = sq($other, "SELECT redis_try_wlock('kt')");
	$got++ if $out eq 't';
	sleep 0.5;
}
is($got, 0, 'the idle holder kept its lock for three leases across the keeper restart');
my ($st, $err) = sq($holder, "SELECT redis_unlock('kt')");
is($st, 't', 'unlock: true');
is($err, '', 'no warning: the lease never ran out');
like(slurp_file($node->logfile), qr/terminating background worker "rwlock keeper" due to administrator command/,
	'the log shows the keeper terminated');

# --- The keeper is killed with SIGKILL: a crash restart.
$t0 = time;
kill 'KILL', $k3;
eval { $holder->quit };
eval { $other->quit };
$node->poll_query_until('postgres', 'SELECT true') or die 'no restart';
my $k4 = wait_keeper($k3);
ok($k4, "keeper back after its SIGKILL and the crash restart (pid $k4)");
diag sprintf('keeper SIGKILL: crash restart done and new keeper running %.2f s later',
	time - $t0);
$holder = session($node);
$other = session($node);
sq($holder, "SELECT redis_wlock('kk')");
$t0 = time;
$got = 0;
while (time - $t0 < 3 * $lease + 0.3)
{
	($out) = sq($other, "SELECT redis_try_wlock('kk')");
	$got++ if $out eq 't';
	sleep 0.5;
}
is($got, 0, 'the new keeper keeps a new idle hold for three leases');
($st, $err) = sq($holder, "SELECT redis_unlock('kk')");
is($st, 't', 'unlock: true');

$holder->quit;
$other->quit;
$node->stop;
redis_stop($port);
done_testing();
