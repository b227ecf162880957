# rediss+cluster://: a Redis Cluster of three masters that speak TLS only,
# to clients and on the cluster bus (certificates from RwlockTls). Every
# connection rwlock makes to the cluster is TLS: the seed, the masters
# CLUSTER SLOTS names, the node a MOVED points to, the subscriber a waiter
# listens on and the keeper's renewals.
#   - locks land on the master CLUSTER KEYSLOT names; names spread over all
#     three masters; redis_connection_info has a row per master;
#   - exclusion, and a waiter woken by a release on another master's slot;
#   - the keeper renews a lease over TLS (held past three leases);
#   - a slot moved to another master: the next lock in it follows MOVED;
#   - a certificate from an unknown CA: a class 08 error that says so.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockTls;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use List::Util qw(first);

my $certs = tls_certs();
my $c = cluster_start(tls => 1, replicas => 0);
my @masters = cluster_masters($c);
is(scalar @masters, 3, 'three TLS masters');
(my $url = cluster_url($c, $masters[0])) =~ s/^redis\+cluster/rediss+cluster/;
my $prefix = 'tap_cluster_tls';
my $node = new_node('cluster_tls', port => $masters[0], preload => 1, lease => '2s',
	conf => "rwlock.redis_url = '$url'\nrwlock.tls_ca_file = '$certs/ca.crt'\n");
my $a = session($node);
my $b = session($node);
my ($out, $err, $secs);

# The master that serves a name's key, and the lock's state there.
sub owner_of { return cluster_key_node($c, "$prefix:{$_[0]}"); }
sub state_of { return lock_state(owner_of($_[0]), $prefix, $_[0], \&tls_cli); }

# A name whose key is served by a master other than $not (the seed).
sub name_away_from
{
	my ($stem, $not) = @_;
	for my $i (1 .. 1000)
	{
		return "$stem$i" if owner_of("$stem$i") != $not;
	}
	die "no name away from $not";
}

sub node_id { return tls_cli($_[0], 'CLUSTER', 'MYID'); }

# How many MOVED answers a master has given (INFO errorstats).
sub moved_count
{
	my ($port) = @_;
	return tls_cli($port, 'INFO', 'errorstats') =~ /errorstat_MOVED:count=(\d+)/ ? $1 : 0;
}

# --- Locks over TLS, on the master the slot names.
($out, $err) = sq($a, "SELECT redis_wlock('t1') > 0");
is($out, 't', 'redis_wlock through rediss+cluster://');
is($err, '', 'without an error');
is(tls_cli(owner_of('t1'), 'CLUSTER', 'KEYSLOT', "$prefix:{t1}"), key_slot("$prefix:{t1}"),
	'the slot computed here is the one Redis computes');
is(state_of('t1'), 'write', 'the master that serves the slot holds the write lock');
($out) = sq($a, 'SELECT redis_unlock(\'t1\')');
is($out, 't', 'unlocked');
is(state_of('t1'), 'free', 'the lock is free on its master');

($out, $err) = sq($a, "SELECT count(redis_rlock('n' || i)) FROM generate_series(1, 300) i");
is($out, '300', '300 read locks');
for my $m (@masters)
{
	cmp_ok(tls_cli($m, 'DBSIZE'), '>', 0, "master $m holds some of them");
}
($out) = sq($a, 'SELECT count(*), sum(holds), bool_and(connected) FROM redis_connection_info()');
is($out, '3|300|t', 'redis_connection_info: a row per master, the holds in its slots, connected');
($out) = sq($a, "SELECT bool_and(url LIKE 'rediss://127.0.0.1:%') FROM redis_connection_info()");
is($out, 't', 'each row names its master by a rediss:// URL');
($out) = sq($a, 'SELECT redis_unlock_all()');
is($out, '300', 'redis_unlock_all releases the 300');

# --- Exclusion, and a waiter woken over TLS.
my $away = name_away_from('w', $masters[0]);
($out) = sq($a, "SELECT redis_wlock('$away') > 0");
is($out, 't', "a holds $away (on master " . owner_of($away) . ', not the seed)');
($out, $err) = sq($b, "SELECT redis_try_wlock('$away')");
is($out, 'f', 'b cannot take it') or diag $err;
sq_send($b, "SELECT redis_try_wlock('$away', '10s')");
ok(!defined((sq_wait($b, 0.5))[0]), 'b waits');
my $t0 = time;
sq($a, "SELECT redis_unlock('$away')");
($out, $err, $secs) = sq_wait($b, 5);
is($out, 't', 'b gets it after a releases');
$secs = time - $t0;
cmp_ok($secs, '<', 1.0, sprintf('b is woken, not polling (%.3f s after the release)', $secs));
is(state_of($away), 'write', 'b holds it on its master');
sq($b, "SELECT redis_unlock('$away')");

# --- The keeper renews over TLS: a 2 s lease held for 7 s.
my $kept = name_away_from('k', $masters[0]);
($out) = sq($a, "SELECT redis_wlock('$kept') > 0");
is($out, 't', "a holds $kept");
sleep 7;
is(state_of($kept), 'write', 'still held in Redis after three leases (the keeper renews over TLS)');
($out, $err) = sq($a, "SELECT redis_unlock('$kept')");
is($out, 't', 'and released without a warning');
is($err, '', 'no lost-lock warning');

# --- A slot moved to another master: MOVED, followed over TLS.
my ($from, $to) = @masters[1, 2];
my @ranges = cluster_ranges($c);
my $moving = first { cluster_slot_owner($c, key_slot("$prefix:{$_}"), @ranges) == $from }
  map { "m$_" } 1 .. 1000;
($out) = sq($a, "SELECT redis_wlock('$moving') > 0 AND redis_unlock('$moving')");
is($out, 't', "$moving locked and unlocked on master $from");
my $slot = key_slot("$prefix:{$moving}");
my $to_id = node_id($to);
# As redis-cli --cluster reshard does: SETSLOT NODE on the importing node
# first, which raises its config epoch, so that no stale claim of the old
# owner's wins the slot back.
tls_cli($to, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', node_id($from));
tls_cli($from, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to_id);
tls_cli($_, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id) for ($to, $from, $masters[0]);
ok(wait_until(sub { 3 == grep { (cluster_slot_owner($c, $slot, cluster_ranges($c, $_)) // 0) == $to } @masters }, 10),
	"every master says master $to serves slot $slot");
my $moved = moved_count($from);
($out, $err) = sq($a, "SELECT redis_wlock('$moving') > 0");
is($out, 't', 'the lock in the moved slot is granted');
is($err, '', 'without an error');
is(state_of($moving), 'write', "on master $to");
cmp_ok(moved_count($from), '>', $moved, "master $from answered MOVED (the session's map was old)");
is(tls_cli($from, 'CLUSTER', 'COUNTKEYSINSLOT', $slot), '0', "nothing left in the slot on master $from");
sq($a, "SELECT redis_unlock('$moving')");

# --- A certificate from a CA rwlock does not trust.
my $s = session($node);
sq($s, "SET rwlock.connect_timeout = '1s'; SET rwlock.tls_ca_file = '$certs/otherca.crt'");
($out, $err, $secs) = sq($s, "SELECT redis_wlock('f1')");
like($err, qr/ERROR:  08001: could not connect to Redis/, 'an unknown CA: 08001');
like($err, qr/DETAIL:  TLS handshake failed: the server's certificate is signed by an unknown certificate authority/,
	'the detail says why');
cmp_ok($secs, '<', 2.0, sprintf('within 2 s (%.3f s)', $secs));
$s->quit;

$a->quit;
$b->quit;
$node->stop;
done_testing();
