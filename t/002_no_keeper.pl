# Without the keeper (rwlock not in shared_preload_libraries) a session
# renews its leases itself, at its own rwlock calls and by redis_renew(),
# and at no other time. This shows what that means: a session that calls
# nothing for longer than the lease (idle, or inside one long statement)
# loses its locks, and says so at its next operation on them.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('nokeeper', port => $port, lease => '2s');
note "Redis on port $port; rwlock.lease = 2s; no keeper";

is(keeper_pid($node), '', 'no keeper without shared_preload_libraries');

my $a = session($node);
my $b = session($node);
my $other = session($node);

# redis_renew() and lazy renewal keep a lease alive.
sq($a, "SELECT redis_wlock('renewed'), redis_wlock('lazy')");
my ($out, $err);
($out) = sq($other, "SELECT count(*) FROM redis_locks");
is($out, '0', 'redis_locks is empty without the keeper');
my $t0 = time;
my $got = 0;
while (time - $t0 < 6.3)
{
	sleep 0.6;
	($out) = sq($a, "SELECT redis_renew()");
	($out) = sq($other, "SELECT redis_try_wlock('renewed')::int + redis_try_wlock('lazy')::int");
	$got += $out;
}
is($got, 0, 'redis_renew() every 0.6 s keeps both locks for three leases');
($out, $err) = sq($a, "SELECT redis_unlock('renewed'), redis_unlock('lazy')");
is($out, 't|t', 'both still held at unlock');

# Lazy renewal: any rwlock call of the session renews what is due.
sq($a, "SELECT redis_wlock('lazy')");
$t0 = time;
$got = 0;
while (time - $t0 < 6.3)
{
	sleep 0.6;
	sq($a, "SELECT redis_try_rlock('unrelated'), redis_unlock('unrelated')");
	($out) = sq($other, "SELECT redis_try_wlock('lazy')");
	$got++ if $out eq 't';
}
is($got, 0, 'rwlock calls every 0.6 s renew the lock lazily for three leases');
sq($a, "SELECT redis_unlock('lazy')");

# Idle for longer than the lease: the lock runs out; the loss is reported.
sq($a, "SELECT redis_wlock('idle')");
# ... and inside one statement that outlasts the lease.
$t0 = time;
sq($b, "SELECT redis_wlock('busy')");
$b->{stdin} .= "SELECT pg_sleep(4);\n";
$b->{run}->pump_nb;
($out) = sq($other, "SELECT redis_try_wlock('idle', '5s'), redis_try_wlock('busy', '5s')");
my $took = time - $t0;
is($out, 't|t', 'without the keeper another session gets both locks');
diag sprintf('no keeper: idle and busy holders lost their locks %.2f s after taking them (lease 2 s)', $took);
cmp_ok($took, '>=', 1.9, 'not before the lease ran out');
cmp_ok($took, '<', 3.0, 'soon after it did');

($out, $err) = sq($a, "SELECT lease_state FROM redis_held_locks");
like($out, qr/held|lost/, "idle holder's view before it talks to Redis: $out");
($out, $err) = sq($a, "SELECT redis_renew()");
is($out, '0', 'redis_renew() renews nothing');
like($err, qr/Redis lock "idle" was lost/, 'and warns that "idle" was lost');
($out) = sq($a, "SELECT lease_state FROM redis_held_locks");
is($out, 'lost', 'redis_held_locks: lost');
($out, $err) = sq($a, "SELECT redis_unlock('idle')");
is($out, 'f', 'unlock of the lost lock returns false');
like($err, qr/Redis lock "idle" was lost/, 'with a WARNING naming it');

($out, $err) = sq($b, "SELECT redis_unlock('busy')");
like($out, qr/f$/, 'busy holder: unlock after the long statement returns false');
like($err, qr/Redis lock "busy" was lost/, 'with a WARNING naming it');

sq($other, "SELECT redis_unlock_all()");
$_->quit for ($a, $b, $other);
$node->stop;
redis_stop($port);
done_testing();
