# Redis misbehaves under the sessions and the keeper: restarted empty under
# a holder (the loss is reported, new locks work), stopped (class 08 errors
# within rwlock.connect_timeout, the same session works once Redis is back),
# stalled by CLIENT PAUSE for longer than rwlock.command_timeout (an error,
# not a hang; the session works after the stall).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('faults', port => $port, preload => 1, lease => '2s',
	conf => "rwlock.connect_timeout = '1s'\nrwlock.command_timeout = '500ms'\n");
note "Redis on port $port; lease 2s, connect_timeout 1s, command_timeout 500ms";

my $holder = session($node);
my $other = session($node);
my ($out, $err, $secs);

# --- Redis restarted empty under a holder.
sq($holder, "SELECT redis_wlock('r1'), redis_rlock('r1b')");
sq($holder, "BEGIN");
sq($holder, "SELECT redis_wlock_xact('r2')");
sleep 0.8;    # renewed once by the keeper
my $t0 = time;
redis_stop($port);
redis_start($port);
my $lost = wait_until(
	sub {
		(sq($other, "SELECT count(*) FROM redis_locks WHERE lease_state = 'lost'"))[0] eq '3';
	},
	5);
ok(defined $lost, 'the keeper finds all three holds lost after Redis restarted empty');
diag sprintf('Redis restarted empty: holds marked lost %.2f s after the restart (lease 2 s)',
	$lost // -1);
($out) = sq($holder, "SELECT name || ':' || lease_state FROM redis_held_locks ORDER BY name");
is($out, "r1:lost\nr1b:lost\nr2:lost", 'redis_held_locks shows them lost');
($out, $err) = sq($holder, "COMMIT");
like($err, qr/WARNING:  01000: Redis lock "r2" was lost/, 'COMMIT warns that the xact lock r2 was lost');
unlike($err, qr/ERROR/, 'COMMIT does not fail');
($out, $err) = sq($holder, "SELECT redis_unlock('r1')");
is($out, 'f', 'unlock of the lost lock returns false');
like($err, qr/Redis lock "r1" was lost/, 'with a WARNING naming it');
($out, $err) = sq($holder, "SELECT redis_rlock('r1b') >= 0");
is($out, 't', 'taking a lost lock again works');
like($err, qr/Redis lock "r1b" was lost/, 'after a WARNING naming it');
($out, $err, $secs) = sq($holder, "SELECT redis_wlock('r3') > 0");
is($out, 't', 'a new lock works in the same session');
is($err, '', 'without an error');
($out) = sq($other, "SELECT name || ':' || lease_state FROM redis_locks ORDER BY name");
is($out, "r1b:held\nr3:held", 'redis_locks: the new holds are held');
sleep 2.6;    # longer than the lease
($out, $err) = sq($holder, "SELECT redis_unlock('r3'), redis_unlock('r1b')");
is($out, 't|t', 'the keeper renews on the restarted Redis: both still held after a lease');
is($err, '', 'no warning');

# --- Redis stopped: class 08 within connect_timeout; works again after.
sq($other, "SELECT redis_wlock('s0'), redis_unlock('s0')");    # connected
redis_stop($port);
($out, $err, $secs) = sq($other, "SELECT redis_wlock('s1')");
like($err, qr/ERROR:  08\d\d\d: /, "Redis stopped, connected session: class 08 error ($secs s)");
diag sprintf('Redis stopped: connected session got %s in %.3f s', ($err =~ /(08\d\d\d: [^\n]*)/)[0] // $err, $secs);
cmp_ok($secs, '<', 1.5, 'within connect_timeout (1 s) + 0.5 s');
($out, $err, $secs) = sq($other, "SELECT redis_try_rlock('s1')");
like($err, qr/ERROR:  08001: could not connect to Redis/, "next call: 08001 ($secs s)");
cmp_ok($secs, '<', 1.5, 'within connect_timeout (1 s) + 0.5 s');
diag sprintf('Redis stopped: next call got 08001 in %.3f s', $secs);
redis_start($port);
($out, $err) = sq($other, "SELECT redis_wlock('s1') > 0, redis_unlock('s1')");
is($out, 't|t', 'the same session works once Redis is back');
is($err, '', 'without an error');

# --- Redis stalled for longer than command_timeout.
my $fresh = session($node);
# A hold the keeper must renew during the stall (due at a third of its 4 s
# lease, so its renewal fails while Redis is paused and succeeds after).
my $kept = session($node);
sq($kept, "SET rwlock.lease = '4s'");
sq($kept, "SELECT redis_wlock('k0')");
sq($holder, "SELECT redis_wlock('p0'), redis_unlock('p0')");    # connected
redis_cli($port, 'CLIENT', 'PAUSE', '3000', 'ALL');
$t0 = time;
($out, $err, $secs) = sq($holder, "SELECT redis_wlock('p1')");
like($err, qr/ERROR:  08006: Redis at .* did not answer in time/,
	"stalled Redis, connected session: 08006 ($secs s)");
cmp_ok($secs, '<', 1.0, 'within command_timeout (0.5 s) + 0.5 s');
diag sprintf('Redis stalled: connected session got 08006 in %.3f s', $secs);
($out, $err, $secs) = sq($fresh, "SELECT redis_wlock('p2')");
like($err, qr/ERROR:  08001: could not connect to Redis/,
	"stalled Redis, new connection: 08001 ($secs s)");
cmp_ok($secs, '<', 1.5, 'within connect_timeout (1 s) + 0.5 s');
diag sprintf('Redis stalled: unconnected session got 08001 in %.3f s', $secs);
($out, $err, $secs) = sq($holder, "SELECT 1");
is($out, '1', 'the session is still usable for SQL during the stall');
my $wait = 3.1 - (time - $t0);
sleep $wait if $wait > 0;
($out, $err) = sq($holder, "SELECT redis_wlock('p1') > 0, redis_unlock('p1')");
is($out, 't|t', 'the session works again after the stall');
is($err, '', 'without an error');
($out, $err) = sq($fresh, "SELECT redis_wlock('p2') > 0, redis_unlock('p2')");
is($out, 't|t', 'and so does the one that could not connect');

like(slurp_file($node->logfile), qr/rwlock keeper could not renew leases at redis:/,
	'the keeper logged the failure');
# (the keeper's next renewal after the stall comes within a sixth of the
# lease; on a loaded machine later than the calls above: waited for)
wait_until(sub { slurp_file($node->logfile) =~ /rwlock keeper renews leases at redis:.* again/ },
	10);
like(slurp_file($node->logfile), qr/rwlock keeper renews leases at redis:.* again/,
	'and the recovery');

($out, $err) = sq($kept, "SELECT redis_unlock('k0')");
is($out, 't', 'the hold renewed across the stall is still held');
$_->quit for ($holder, $other, $fresh, $kept);
$node->stop;
redis_stop($port);
done_testing();
