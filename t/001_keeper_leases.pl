# The keeper (rwlock in shared_preload_libraries) keeps leases alive: an idle
# holder, a holder idle in a transaction and a holder inside a statement
# that runs for three leases all keep their locks while another session
# tries. Releases (unlock, normal exit, pg_terminate_backend) free the lock
# at once and are not undone by a renewal in flight. redis_locks shows
# every session's holds.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('keeper', port => $port, preload => 1, lease => '2s');
note "Redis on port $port; rwlock.lease = 2s";

ok( defined wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'rwlock keeper'"
			) eq '1';
		},
		10),
	'the keeper runs');

# A second Redis: holds keep the server that granted them, and the keeper
# renews each on its own server.
my $port2 = redis_start();
note "second Redis on port $port2";

my $idle = session($node);
my $xact = session($node);
my $busy = session($node);
my $other = session($node);

my ($out, $err) = sq($idle, "SELECT redis_wlock('idle') > 0");
is($out, 't', 'idle holder takes its lock');
sq($xact, "BEGIN");
($out) = sq($xact, "SELECT redis_wlock_xact('xact') > 0");
is($out, 't', 'holder idle in transaction takes its lock');
($out) = sq($busy, "SELECT redis_rlock('busy') >= 0");
is($out, 't', 'busy holder takes a read lock');
sq($busy, "SET rwlock.redis_url = 'redis://127.0.0.1:$port2/0'");
($out) = sq($busy, "SELECT redis_wlock('elsewhere') > 0");
is($out, 't', 'busy holder takes a lock on the second Redis');
sq($busy, "RESET rwlock.redis_url");

# The busy holder now runs one statement for three leases.
my $t0 = time;
$busy->{stderr} = '';
$busy->{stdin} .= "SELECT pg_sleep(6.5);\n";
$busy->{run}->pump_nb;

($out) = sq($other,
	"SELECT pid, name, mode, level, lease_state FROM redis_locks ORDER BY name");
note "redis_locks:\n$out";
like($out, qr/\|busy\|read\|session\|held/, 'redis_locks shows the read hold');
like($out, qr/\|idle\|write\|session\|held/, 'redis_locks shows the write hold');
like($out, qr/\|xact\|write\|xact\|held/, 'redis_locks shows the xact hold');

# Another session tries every half second for three leases and more.
my $got = 0;
my $tries = 0;
while (time - $t0 < 6.3)
{
	($out) = sq($other,
		"SELECT redis_try_wlock('idle')::int + redis_try_wlock('xact')::int + redis_try_wlock('busy')::int");
	$got += $out;
	$tries++;
	sleep 0.5;
}
is($got, 0, "no lock taken by the other session in $tries tries over 6.3 s (3 leases)");
is(lock_state($port2, 'tap_keeper', 'elsewhere'), 'write',
	'the lock on the second Redis is still held');
($out) = sq($other,
	"SELECT count(*) FROM redis_locks WHERE lease_state = 'held' AND lease_until > now()");
is($out, '4', 'all four leases still in the future');

# The busy statement ends; every holder still has its lock, nothing lost.
($out, $err) = sq($busy, "SELECT redis_unlock('busy'), redis_unlock('elsewhere')");
note sprintf('busy statement and unlock done after %.2f s', time - $t0);
like($out, qr/t\|t$/, 'busy holder unlocks both: true');
is($err, '', 'busy holder: no warning');
($out, $err) = sq($idle, "SELECT lease_state FROM redis_held_locks");
is($out, 'held', 'idle holder: redis_held_locks says held');
($out, $err) = sq($idle, "SELECT redis_renew()");
is($out, '1', 'redis_renew() renews the one hold');
($out, $err) = sq($xact, "COMMIT");
is($err, '', 'idle-in-transaction holder commits without a warning');

# Release at unlock is immediate, and no renewal brings the lock back.
my $t = time;
($out) = sq($other, "SELECT redis_try_wlock('xact')");
is($out, 't', 'the xact lock is free right after COMMIT');
sq($other, "SELECT redis_unlock('xact')");
($out, $err) = sq($idle, "SELECT redis_unlock('idle')");
is($out, 't', 'idle holder unlocks: true');
sleep 1.5;    # past the next renewal of what was held
is(redis_cli($port, 'HGET', 'tap_keeper:{idle}', 'w'),
	'', 'no renewal re-created the released write lock');
($out) = sq($other, "SELECT count(*) FROM redis_locks");
is($out, '0', 'redis_locks is empty after the releases');

# A lease shorter than the keeper's longest sleep (1 s) is renewed in time:
# after each renewal the keeper wakes again at a third of the lease.
($out, $err) = sq($idle, "SET rwlock.lease = '900ms'; SELECT redis_wlock('short') > 0");
sleep 2.8;    # three leases
($out, $err) = sq($other, "SELECT redis_try_wlock('short')");
is($out, 'f', 'a 900 ms lease held for three leases: still held');
($out, $err) = sq($idle, "SELECT redis_unlock('short'); RESET rwlock.lease");
like($out, qr/^t/, 'and its holder unlocks it: true');
is($err, '', 'with no warning');

# Stacked holds and levels in the view.
sq($idle, "SELECT redis_rlock('st'), redis_rlock('st')");
sq($idle, "BEGIN");
sq($idle, "SELECT redis_wlock_xact('st')");
($out) = sq($other,
	"SELECT mode || ':' || level FROM redis_locks WHERE name = 'st' ORDER BY level");
is($out, "read:session\nwrite:xact", 'view: one row per level, with its mode');
sq($idle, "COMMIT");
($out) = sq($other,
	"SELECT mode || ':' || level FROM redis_locks WHERE name = 'st'");
is($out, "read:session", 'view after COMMIT: the session read hold');
sq($idle, "SELECT redis_unlock_all()");

# Normal exit releases at once.
sq($idle, "SELECT redis_wlock('exit')");
$t = time;
$idle->quit;
my $took = wait_until(
	sub { $node->safe_psql('postgres', "SELECT redis_try_wlock('exit')") eq 't' },
	5);
ok(defined $took, 'the lock of a session that exited is free');
diag sprintf('normal exit: lock free %.3f s after the session quit', time - $t);

# pg_terminate_backend releases at once.
my $victim = session($node);
($out) = sq($victim, "SELECT pg_backend_pid()");
my $vpid = $out;
sq($victim, "SELECT redis_wlock('term'), redis_rlock('term2')");
$t = time;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($vpid)");
$took = wait_until(
	sub {
		$node->safe_psql('postgres',
			"SELECT redis_try_wlock('term') AND redis_try_wlock('term2')") eq 't';
	},
	5);
ok(defined $took, 'the locks of a terminated session are free');
diag sprintf('pg_terminate_backend: locks free %.3f s after the call', time - $t);
cmp_ok(time - $t, '<', 1.0, 'well before the lease (2 s) could run out');
($out) = sq($other, "SELECT count(*) FROM redis_locks WHERE pid = $vpid");
is($out, '0', 'redis_locks forgot the terminated session');

$busy->quit;
$other->quit;
eval { $victim->quit };
$node->stop;
redis_stop($port);
redis_stop($port2);
done_testing();
