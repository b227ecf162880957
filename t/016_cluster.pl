# Redis Cluster: rwlock.redis_url = redis+cluster://...; three masters with a
# replica each. rwlock's slot of awkward names is Redis's (no MOVED once the
# map is loaded, each lock's key on the master CLUSTER KEYSLOT names); 1000
# names spread over the three masters without CROSSSLOT; exclusion, sharing,
# waiting and hand-off between sessions that reach the cluster through
# different seed nodes (one of them a replica); redis_connection_info has a
# row per master.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = cluster_start();
my @masters = cluster_masters($c);
is(scalar @masters, 3, 'three masters');
my %is_master = map { $_ => 1 } @masters;
my @replicas = grep { !$is_master{$_} } @{ $c->{ports} };
my $url = cluster_url($c, $masters[0]);
my $prefix = 'tap_cluster';
my $node = new_node('cluster', port => $masters[0], preload => 1, lease => '30s',
	conf => "rwlock.redis_url = '$url'\n");

# Redis's count of an error reply over the masters (INFO errorstats).
sub errorstat
{
	my ($what) = @_;
	my $n = 0;
	for my $p (@masters)
	{
		$n += $1 if redis_cli($p, 'INFO', 'errorstats') =~ /errorstat_$what:count=(\d+)/;
	}
	return $n;
}

# The key of a lock: the name with %, { and } percent-encoded.
sub lock_key
{
	my ($name) = @_;
	(my $e = $name) =~ s/([%{}])/sprintf('%%%02X', ord $1)/ge;
	return "$prefix:{$e}";
}

my $a = session($node);
my $b = session($node);
my ($out, $err);

# --- The slot of awkward names.
($out, $err) = sq($a, "SELECT redis_wlock('warm-up') > 0 AND redis_unlock('warm-up')");
is($out, 't', 'a lock through redis+cluster:// (the slot map loaded)');
is($err, '', 'without an error');
my $moved = errorstat('MOVED');
my @awkward = ('a}b{c', '{}', '{x}', 'report{2026}%', '%7B', 'x' x 1024,
	"\x{e9}t\x{e9} \x{65e5}\x{672c}", 'a b', '}{');
for my $i (0 .. $#awkward)
{
	my $name = $awkward[$i];
	(my $q = $name) =~ s/'/''/g;
	utf8::encode($q);
	($out, $err) = sq($a, "SELECT redis_wlock('$q') > 0");
	is($out, 't', "awkward name #$i locked");
	my $key = lock_key($name);
	utf8::encode($key);
	my $owner = cluster_slot_owner($c, redis_cli($masters[0], 'CLUSTER', 'KEYSLOT', $key));
	is(redis_cli($owner, 'EXISTS', $key), '1',
		"awkward name #$i: its key is on the master CLUSTER KEYSLOT names");
	is(redis_cli($owner, 'CLUSTER', 'KEYSLOT', "$key:q"),
		redis_cli($owner, 'CLUSTER', 'KEYSLOT', $key), "awkward name #$i: both keys in one slot");
	($out) = sq($a, "SELECT redis_unlock('$q')");
	is($out, 't', "awkward name #$i unlocked");
}
is(errorstat('MOVED'), $moved, 'no MOVED: rwlock computed every slot as Redis does');

# --- 1000 names over the three masters, one session.
($out, $err) = sq($a, "SELECT count(redis_rlock('n' || i)) FROM generate_series(1, 1000) i");
is($out, '1000', '1000 read locks');
is($err, '', 'without an error (no CROSSSLOT)');
is(errorstat('CROSSSLOT'), 0, 'Redis answered no CROSSSLOT');
is(errorstat('MOVED'), $moved, 'and no MOVED');
my %keys = map { $_ => redis_cli($_, 'DBSIZE') } @masters;
my $total = 0;
$total += $_ for values %keys;
ok((grep { $keys{$_} >= 200 } @masters) == 3, 'the names spread over the three masters: '
	  . join(' ', map { "$_=$keys{$_}" } @masters));
($out) = sq($a, 'SELECT count(*), sum(holds), bool_and(connected) FROM redis_connection_info()');
is($out, '3|1000|t', 'redis_connection_info: a row per master, the holds in its slots, connected');
($out) = sq($a, 'SELECT redis_unlock_all()');
is($out, '1000', 'all 1000 unlocked');
($out) = sq($a, "SELECT count(*) FROM generate_series(1, 1000) i WHERE (redis_lock_info('n' || i)).state <> 'free'");
is($out, '0', 'and free in Redis (redis_lock_info asks the master of each)');

# --- Sessions through different seeds: a master for a, a replica for b.
sq($b, "SET rwlock.redis_url = '" . cluster_url($c, $replicas[0]) . "'");
($out) = sq($a, "SELECT redis_wlock('x') > 0");
is($out, 't', 'a: write lock');
($out, $err) = sq($b, "SELECT redis_try_wlock('x'), redis_try_rlock('x')");
is($out, 'f|f', 'b, seeded by a replica, is excluded from both modes');
is($err, '', 'without an error');
($out) = sq($a, "SELECT redis_rlock('y') > 0");
($out) = sq($b, "SELECT redis_try_rlock('y')");
is($out, 't', 'read locks are shared');
($out) = sq($b, "SELECT redis_try_wlock('y')");
is($out, 'f', 'but not with a writer');

# Hand-off: b waits for a read lock behind a's write lock. With a 30 s lease a
# waiting reader sleeps up to 10 s unless the release's PUBLISH wakes it.
sq_send($b, "SELECT redis_rlock('x') > 0");
sleep 0.5;
my $t0 = time;
sq($a, "SELECT redis_unlock('x')");
my ($got) = sq_wait($b, 10);
my $handoff = time - $t0;
is($got, 't', 'b got the read lock once a unlocked');
cmp_ok($handoff, '<', 3, sprintf('woken by the wake-up across nodes (%.3f s, not the 10 s sleep)', $handoff));
($out) = sq($a, "SELECT redis_try_wlock('x')");
is($out, 'f', 'a is now excluded by b');

# A writer waits for the readers of y; its own channel wakes it.
sq_send($a, "SELECT redis_wlock('z') > 0 AND redis_unlock('z')");
is((sq_wait($a, 10))[0], 't', 'a lock and unlock of another name meanwhile');
sq_send($b, "SELECT redis_wlock('y') > 0");
sleep 0.5;
$t0 = time;
sq($a, "SELECT redis_unlock('y')");
($got) = sq_wait($b, 10);
is($got, 't', 'b, the last reader, upgrades to the write lock of y once a let go');
cmp_ok(time - $t0, '<', 3, 'promptly');
($out) = sq($b, 'SELECT redis_unlock_all()');
is($out, '3', 'b lets go of its three holds');

($out) = sq($b, 'SELECT count(*) >= 1, bool_or(listening) FROM redis_connection_info()');
is($out, 't|t', 'redis_connection_info shows the node the waiters listen on');

$a->quit;
$b->quit;
done_testing();
