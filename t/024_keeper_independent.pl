# The keeper renews each Redis server's leases independently, and sessions
# take over soon enough when it stops:
# a) holds on two Redis servers, lease 6 s; one server is stopped (SIGSTOP)
#    for 10 s: the hold on the other is renewed on time all along (the least
#    lease left, read with info.lua every 100 ms, stays near two thirds of the
#    lease) and nobody else gets it;
# b) the keeper's processes are stopped (SIGSTOP) for 9 s, lease 6 s: the
#    holder, which keeps making rwlock calls, renews its own hold in time
#    and nobody else gets it;
# c) the renewers ended by pg_terminate_backend: they go at once, the
#    keeper starts another, and an idle holder's lock stays renewed;
# d) a renewer killed with SIGKILL: PostgreSQL restarts every backend (a
#    crash), and the holds stay in Redis until their lease runs out.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $x = redis_start();
my $y = redis_start();
my $node = new_node('indep', port => $x, preload => 1, lease => '6s',
	conf => "restart_after_crash = on\n");
note "Redis X on port $x, Y on port $y; lease 6 s";

ok( defined wait_until(sub { keeper_pid($node) ne '' }, 10), 'the keeper runs');

# The keeper's processes: the keeper and the workers it starts.
sub keeper_pids
{
	my $pids = $node->safe_psql('postgres',
		"SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE backend_type LIKE 'rwlock%'"
	);
	return split / /, $pids;
}

# ---------------------------------------------------------------------
# a) one server stalls, the other's leases are renewed on time
# ---------------------------------------------------------------------
my $hx = session($node);
my $hy = session($node);
my $other = session($node);
my ($out, $err) = sq($hx, "SELECT redis_wlock('healthy') > 0");
is($out, 't', 'a) a write lock on X');
sq($hy, "SET rwlock.redis_url = 'redis://127.0.0.1:$y/0'");
($out) = sq($hy,
	"SELECT count(redis_wlock('stalled' || i)) FROM generate_series(1, 3) i");
is($out, '3', 'a) three write locks on Y');
sleep 2.5;    # both renewed once, their connections open

redis_sigstop($y);
my $t0 = time;
my $min = 1e9;
my $got = 0;
my $last_try = 0;
while (time - $t0 < 10)
{
	my $pttl = writer_lease_left($x, 'tap_indep', 'healthy');
	$min = $pttl if $pttl < $min;
	if (time - $last_try > 0.5)
	{
		($out) = sq($other, "SELECT redis_try_wlock('healthy')");
		$got++ if $out eq 't';
		$last_try = time;
	}
	sleep 0.1;
}
redis_sigcont($y);
diag "a) Y stopped 10 s: least lease left on X's hold $min ms (lease 6000, renewed at 4000 left)";
cmp_ok($min, '>', 2500,
	'a) the hold on X was renewed on time while Y stalled (least lease left > 2.5 s)');
is($got, 0, 'a) nobody else got the lock on X');
($out, $err) = sq($hx, "SELECT redis_unlock('healthy')");
is($out, 't', 'a) its holder unlocks it: true');
is($err, '', 'a) with no warning');
# Y's holds come back under renewal once Y answers again (the lease may have
# run out while Y was stopped: Redis's clock ran on).
sq($hy, "SELECT redis_unlock_all()");
sq($hy, "RESET rwlock.redis_url");

# ---------------------------------------------------------------------
# b) the keeper stops; an active holder keeps its lock
# ---------------------------------------------------------------------
($out) = sq($hx, "SELECT redis_wlock('active') > 0");
is($out, 't', 'b) a write lock taken');
sleep 2.5;    # renewed by the keeper once
my @pids = keeper_pids();
ok(@pids >= 1, 'b) the keeper\'s processes: ' . join(' ', @pids));
kill 'STOP', @pids;
$t0 = time;
$got = 0;
$min = 1e9;
my $calls = 0;
while (time - $t0 < 9)
{
	sq($hx, "SELECT redis_try_rlock('unrelated'), redis_unlock('unrelated')");
	$calls++;
	my $pttl = writer_lease_left($x, 'tap_indep', 'active');
	$min = $pttl if $pttl < $min;
	($out) = sq($other, "SELECT redis_try_wlock('active')");
	$got++ if $out eq 't';
	sleep 0.3;
}
kill 'CONT', @pids;
diag "b) keeper stopped 9 s, holder made $calls calls: least lease left $min ms";
is($got, 0, 'b) nobody else got the lock while the keeper was stopped');
cmp_ok($min, '>', 0, 'b) the lock never left Redis');
($out, $err) = sq($hx, "SELECT redis_unlock('active')");
is($out, 't', 'b) its holder unlocks it: true');
is($err, '', 'b) with no warning');

# ---------------------------------------------------------------------
# c) a renewer ended by pg_terminate_backend: gone at once, another one
#    started, and an idle holder's lock renewed all along
# ---------------------------------------------------------------------
($out) = sq($hx, "SELECT redis_wlock('handover') > 0");
is($out, 't', 'c) a write lock taken; its holder stays idle');
my $old_renewer = $node->safe_psql('postgres',
	"SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE backend_type = 'rwlock renewer'");
ok($old_renewer ne '', "c) renewers run: $old_renewer");
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'rwlock renewer'");
$t0 = time;
my $gone = wait_until(
	sub {
		$node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE pid IN ("
			  . join(',', split / /, $old_renewer) . ")") eq '0';
	},
	5);
ok(defined $gone && $gone < 1.5, 'c) the renewers end at once on SIGTERM');
ok( defined wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'rwlock renewer'") ne '0';
		},
		10),
	'c) the keeper starts a renewer again');
$got = 0;
$min = 1e9;
while (time - $t0 < 8)
{
	my $pttl = writer_lease_left($x, 'tap_indep', 'handover');
	$min = $pttl if $pttl < $min;
	($out) = sq($other, "SELECT redis_try_wlock('handover')");
	$got++ if $out eq 't';
	sleep 0.3;
}
diag "c) renewers terminated: least lease left on the idle holder's lock $min ms over 8 s";
is($got, 0, 'c) nobody else got the idle holder\'s lock');
cmp_ok($min, '>', 1000, 'c) its lease was renewed all along');
($out, $err) = sq($hx, "SELECT redis_unlock('handover')");
is($out, 't', 'c) its holder unlocks it: true');

# ---------------------------------------------------------------------
# d) a renewer killed by a signal is a crash: every backend is restarted,
#    the holds stay in Redis until their lease runs out (docs/failures.md, Leases)
# ---------------------------------------------------------------------
($out) = sq($hx, "SELECT redis_wlock('killed') > 0");
is($out, 't', 'd) a write lock taken');
my $renewer;
wait_until(
	sub {
		$renewer = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE backend_type = 'rwlock renewer' LIMIT 1");
		$renewer ne '';
	},
	10);
ok($renewer, "d) a renewer runs (pid $renewer)");
my $log_offset = -s $node->logfile;
kill 'KILL', $renewer;
$t0 = time;
ok( defined wait_until(
		sub {
			slurp_file($node->logfile, $log_offset) =~
			  /all server processes terminated; reinitializing/;
		},
		10),
	'd) PostgreSQL restarts every backend after the renewer was killed');
ok(defined wait_until(sub { keeper_pid($node) ne '' }, 15),
	'd) and the keeper runs again');
my $left = writer_lease_left($x, 'tap_indep', 'killed');
cmp_ok($left, '>', 0, "d) the lock is still in Redis after the restart ($left ms left)");
my $freed = wait_until(sub { lock_state($x, 'tap_indep', 'killed') ne 'write' }, 10);
ok(defined $freed, 'd) and runs out with its lease');
diag sprintf('d) renewer killed: the lock stayed in Redis %.1f s after the kill (lease 6 s)',
	time - $t0);

eval { $_->quit } for ($hx, $hy, $other);
$node->stop;
redis_stop($x);
redis_stop($y);
done_testing();
