# rwlock.wait_replicas: a grant counts only once that many replicas
# acknowledged it (WAIT, pipelined after the script). Too few: the grant is
# undone and reported (class 08; false from the try forms), nothing is left
# in Redis. A renewal too few acknowledged counts on the master (logged):
# the keeper does not drop a healthy lock. A failover that loses a grant:
# with wait_replicas = 0 the holder is told at its next operation and the
# next token is larger; with wait_replicas = 1 the grant was refused, so
# there are never two holders.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockSentinel;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $set = sentinel_set_start(down_after => 1000);
my $url = sentinel_url($set);
my $node = new_node('waitrep', port => $set->{master}, preload => 1, lease => '4s',
	conf => "rwlock.redis_url = '$url'\nrwlock.wait_replicas = 1\nrwlock.wait_replicas_timeout = '200ms'\n");
my $prefix = 'tap_waitrep';
my $a = session($node);
my $b = session($node);
my ($out, $err, $secs);

# --- Acknowledged grants work, in one round trip more or less.
($out, $err, $secs) = sq($a, "SELECT redis_wlock('k1') > 0");
is($out, 't', 'wait_replicas = 1: a grant two replicas can acknowledge');
is($err, '', 'without an error');
# Granted means acknowledged within the 200 ms WAIT timeout; the time of the
# whole statement (psql included) only has to be far from a stall.
ok($secs < 1, sprintf('in one round trip more or less (%.3f s)', $secs));
($out) = sq($b, "SELECT redis_try_wlock('k1')");
is($out, 'f', 'another session is excluded');
is((redis_holders($_, $prefix, 'k1'))[0] ne '' ? 1 : 0, 1, "the grant is on replica $_")
  for @{ $set->{replicas} };
sq($a, "SELECT redis_unlock('k1')");

# --- More replicas asked for than exist: refused, undone, reported.
sq($a, "SET rwlock.wait_replicas = 3");
($out, $err) = sq($a, "SELECT redis_wlock('k2')");
is(sqlstate($err), '08006', 'a grant too few replicas acknowledged: class 08') or diag $err;
like($err, qr/Redis lock "k2" was granted but not acknowledged by enough replicas/, 'the error names the lock');
like($err, qr/2 of the 3 replicas/, 'and the count');
is(lock_state($set->{master}, $prefix, 'k2'), 'free', 'the grant was undone in Redis');
($out, $err) = sq($a, "SELECT redis_try_rlock('k2')");
is($out, 'f', 'the try form returns false');
like($err, qr/WARNING:  01000: Redis lock "k2" was granted but not acknowledged/, 'with a WARNING');
is(lock_state($set->{master}, $prefix, 'k2'), 'free', 'undone again');
($out) = sq($a, "SELECT count(*) FROM redis_held_locks");
is($out, '0', 'the session holds nothing');
sq($a, "RESET rwlock.wait_replicas");
($out, $err) = sq($a, "SELECT redis_wlock('k2') > 0, redis_unlock('k2')");
is($out, 't|t', 'the session works after');

# --- Several names at once (one pipeline, one WAIT after it): granted
# and on the replicas when acknowledged; too few acknowledgements give
# back every grant of the pipeline, and the names taken again one by one
# meet the same refusal: 08006 naming the first, every name free.
($out, $err) = sq($a, "SELECT cardinality(redis_wlock(ARRAY['m3', 'm1', 'm2']))");
is($out, '3', 'several names, acknowledged: all granted') or diag $err;
for my $r (@{ $set->{replicas} })
{
	is(join(',', map { (redis_holders($r, $prefix, $_))[0] ne '' ? 1 : 0 } qw(m1 m2 m3)),
		'1,1,1', "several names: every grant is on replica $r");
}
($out) = sq($a, "SELECT redis_unlock(ARRAY['m1', 'm2', 'm3'])");
is($out, '{t,t,t}', 'several names let go');
sq($a, "SET rwlock.wait_replicas = 3");
($out, $err) = sq($a, "SELECT redis_wlock(ARRAY['m3', 'm1', 'm2'])");
is(sqlstate($err), '08006', 'several names, too few acknowledgements: class 08') or diag $err;
like($err, qr/Redis lock "m1" was granted but not acknowledged/,
	'the first name in the canonical order is reported');
is(join(',', map { lock_state($set->{master}, $prefix, $_) } qw(m1 m2 m3)), 'free,free,free',
	'every name is free in Redis');
($out) = sq($a, "SELECT count(*) FROM redis_held_locks");
is($out, '0', 'the session holds none of them');
($out, $err) = sq($a, "SELECT redis_try_wlock(ARRAY['m1', 'm2'])");
is($out, 'f', 'the try form returns false');
is(join(',', map { lock_state($set->{master}, $prefix, $_) } qw(m1 m2)), 'free,free',
	'and leaves the names free');
sq($a, "RESET rwlock.wait_replicas");

# --- Renewals that replicas do not acknowledge: the lock stays held.
sq($a, "SELECT redis_wlock('k3')");
redis_cli($_, 'REPLICAOF', '127.0.0.1', '1') for @{ $set->{replicas} };
sleep 9;    # more than two leases
($out) = sq($b, "SELECT lease_state FROM redis_locks WHERE name = 'k3'");
is($out, 'held', 'renewals no replica acknowledged: the keeper keeps the lock (2 leases later)');
my $owner = session_owner($a);
is(redis_mode_of($set->{master}, $prefix, 'k3', $owner), 'write', 'still held on the master');
my $log = slurp_file($node->logfile);
like($log, qr/a renewal of \d+ lease\(s\) was acknowledged by 0 of the 1 replicas/,
	'the unacknowledged renewal is logged');

# --- A failover that loses a grant. The replicas are cut off
# (REPLICAOF 127.0.0.1 1: the sentinels put them back only after
# failover-timeout, 4 s), the grant is made, the master is killed: the
# promoted replica lacks it. They are attached again first and cut off only
# just before the grant: Sentinel promotes no replica whose link has been
# down for more than ten times down-after-milliseconds, and the part above
# kept them cut off for longer than that.
redis_cli($_, 'REPLICAOF', '127.0.0.1', $set->{master}) for @{ $set->{replicas} };
my $attached = wait_until(
	sub {
		!grep { redis_cli($_, 'INFO', 'replication') !~ /master_link_status:up/ }
		  @{ $set->{replicas} };
	},
	20);
ok(defined $attached, 'the replicas are attached again before they are cut off');
# A sentinel re-points a replica it sees replicating elsewhere
# (+fix-slave-config), but only failover-timeout (4 s) after it first saw
# it so. A sentinel whose last look found the replicas cut off (above)
# would re-attach them at its next look, so soon after the cut below that
# the lost grant reached them (seen under load). Each sentinel must have
# seen them attached again first.
my $seen = wait_until(
	sub {
		for my $s (@{ $set->{sentinels} })
		{
			my @l = split /\n/, redis_cli($s, 'SENTINEL', 'REPLICAS', 'rwmaster');
			my @ports = map { $l[ $_ + 1 ] } grep { $l[$_] eq 'master-port' } 0 .. $#l - 1;
			return 0 unless @ports == 2 && !grep { $_ ne $set->{master} } @ports;
		}
		return 1;
	},
	25);
ok(defined $seen, 'every sentinel has seen them attached again');
# lost0 was taken once before, so the replicas keep its last token: the
# grant the failover loses counts up from it, and so would the new master's
# next grant, but for the clock (a token is max(last + 1, TIME in µs)).
($out) = sq($b, "SELECT redis_wlock('lost0') > 0, redis_unlock('lost0')");
is($out, 't|t', 'lost0 taken and released while the replicas are attached');
my $f_master = redis_cli($set->{master}, 'HGET', "$prefix:{lost0}", 'f');
my $f_synced = wait_until(
	sub {
		!grep { redis_cli($_, 'HGET', "$prefix:{lost0}", 'f') ne $f_master }
		  @{ $set->{replicas} };
	},
	10);
ok(defined $f_synced, "the replicas have lost0's last token ($f_master)");
redis_cli($_, 'REPLICAOF', '127.0.0.1', '1') for @{ $set->{replicas} };
sq($b, "SET rwlock.wait_replicas = 0");
($out, $err) = sq($b, "SELECT redis_wlock('lost0')");
my $tok0 = $out;
ok($tok0 =~ /^\d+$/ && $tok0 > 0, "wait_replicas = 0: granted with no replica ($tok0)") or diag $err;
my $c = session($node);
($out, $err) = sq($c, "SELECT redis_wlock('lost1')");
is(sqlstate($err), '08006', 'wait_replicas = 1: the same grant is refused (class 08)') or diag $err;
($out) = sq($c, "SELECT redis_try_wlock('lost1')");
is($out, 'f', 'and false from the try form');
my $old = $set->{master};
my $t0 = time;
kill 'KILL', redis_pid($old);
my ($new, $took) = sentinel_wait_master($set, $old, 30);
ok(defined $new, sprintf('a replica that lacks the grant was promoted (%.2f s)', $took // -1));
is(lock_state($new, $prefix, 'lost0'), 'free', 'the new master does not have lost0');
# Another session takes it: two holders would be possible, the token
# protects the data.
my $d = session($node);
my $ok_d = wait_until(sub { (sq($d, "SELECT redis_try_wlock('lost0')"))[0] eq 't' }, 10);
ok(defined $ok_d, 'wait_replicas = 0: another session takes lost0 on the new master');
($out) = sq($d, "SELECT token FROM redis_held_locks WHERE name = 'lost0'");
ok($out > $tok0, "its token is larger than the lost grant's, though the new master's last token is older ($out > $tok0 > $f_master)");
sleep 2;    # the keeper's next renewal of b's hold finds it gone
($out, $err) = sq($b, "SELECT redis_unlock('lost0')");
is($out, 'f', 'the first holder: unlock returns false');
like($err, qr/Redis lock "lost0" was lost/, 'with the "lost" WARNING at its next operation');
# lost1 was never granted: only one holder.
is(lock_state($new, $prefix, 'lost1'), 'free',
	'wait_replicas = 1: lost1 is free on the new master (the refused grant left nothing)');
# c still asks for a replica's acknowledgement: once the new master has a
# replica in sync again (the sentinels attach the other one to it), c takes
# lost1. The master the sentinels name now: on a loaded machine they may
# have failed over once more (down-after is 1 s), and the node promoted
# first is then a replica itself.
my $synced = wait_until(
	sub {
		my $info = redis_cli(sentinel_master($set) // $new, 'INFO', 'replication');
		return $info =~ /^role:master/m && $info =~ /^slave\d+:.*state=online/m;
	},
	30);
ok(defined $synced, 'the master the sentinels name has a replica in sync again')
  or diag join(', ', map { "$_: " . redis_role($_) } @{ $set->{nodes} });
($out, $err) = sq($c, "SELECT redis_try_wlock('lost1')");
is($out, 't', 'wait_replicas = 1: c takes lost1 on the new master') or diag $err;
($out) = sq($d, "SELECT redis_try_wlock('lost1')");
is($out, 'f', 'and only one session holds it');
redis_start($old);
done_testing();
