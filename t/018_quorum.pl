# Quorum mode (experimental): rwlock.redis_url lists three independent Redis
# masters. Exclusion and sharing between sessions, each hold on every master;
# a lock is granted with one master stopped (SIGSTOP) or killed, and refused
# (class 08, nothing left behind) with two down; masters restarted empty do
# not count until up for rwlock.quorum_max_lease; votes split by holders on
# single masters give no grant without a majority; three sessions contending
# for a lock, a master killed meanwhile, lose no update and do not livelock;
# an upgrade conflict on any master is a 40P01; the keeper renews quorum
# holds past several leases; a hold a majority lost is reported lost; the
# Python QuorumClient shares the locks; redis_lock_info (and the Python
# client's info) show the lock as a majority of the masters has it, and fail
# without a majority; masters left alone after a timeout are asked all the
# same when no majority can be had without them, and sent the releases owed
# to them at exit; fencing tokens strictly increase when
# one master's token field is far ahead (a fast clock), when that master
# then dies, and when it comes back empty.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my @r = quorum_start(3);
my $prefix = 'tap_quorum';
my $max_lease = 6;    # s: rwlock.quorum_max_lease
my $node = quorum_node('quorum', '3s', $max_lease, @r);

my $a = session($node);
my $b = session($node);
my ($out, $err, $secs);

# QuorumClient.info(name) of the Python client: "state writer readers
# waiting" ("-" for none).
sub py_info {
	my ($name) = @_;
	my $code = <<'PY';
import sys
sys.path.insert(0, sys.argv[1])
from rwlock_client import QuorumClient
c = QuorumClient.from_urls(sys.argv[2], prefix=sys.argv[3], max_lease=6.0)
i = c.info(sys.argv[4])
print(" ".join([i["state"], str(i["token"]) if i["writer"] else "", i["writer"] or "-"]
               + list(i["readers"]) + list(i["waiting"])).replace("  ", " "))
PY
	my ($o, $e) = ('', '');
	IPC::Run::run([ '/usr/bin/python3', '-c', $code,
		"$FindBin::RealBin/../clients/python", quorum_url(@r), $prefix, $name ],
		'>', \$o, '2>', \$e);
	chomp $o;
	diag $e if $e ne '';
	return $o;
}

# Up for less than quorum_max_lease: wait until the masters count.
sleep $max_lease + 1.5;

# --- Exclusion and sharing.
($out, $err) = sq($a, "SELECT redis_wlock('x')");
ok($out > 0, 'a write lock on the quorum') or diag $err;
my $t1 = $out;
my $owner_a = session_owner($a);
is(redis_mode_of($_, $prefix, 'x', $owner_a), 'write', "held on master $_")
  for @r;
($out) = sq($b, "SELECT redis_try_wlock('x')");
is($out, 'f', 'another session cannot take it');
($out) = sq($b, "SELECT redis_try_rlock('x')");
is($out, 'f', 'nor read it');
sq($a, "SELECT redis_unlock('x')");
($out) = sq($b, "SELECT redis_try_wlock('x')");
is($out, 't', 'once released, the other takes it');
($out) = sq($b, "SELECT token FROM redis_held_locks WHERE name = 'x'");
ok($out > $t1, 'with a larger token');
sq($b, "SELECT redis_unlock('x')");

($out) = sq($a, "SELECT redis_rlock('s') >= 0");
is($out, 't', 'a read lock');
($out) = sq($b, "SELECT redis_try_rlock('s')");
is($out, 't', 'shared with another reader');
($out) = sq($b, "SELECT count(*) FROM redis_connection_info()");
is($out, '3', 'redis_connection_info: a row per master');
sq($a, "SELECT redis_unlock_all()");
sq($b, "SELECT redis_unlock_all()");

# --- A waiter is woken by a release (a publish on any master).
sq($a, "SELECT redis_wlock('w')");
sq_send($b, "SELECT redis_wlock('w') > 0");
sleep 0.5;
my $t0 = time;
sq($a, "SELECT redis_unlock('w')");
($out, $err, $secs) = sq_wait($b, 10);
is($out, 't', 'a waiting writer gets the lock once released');
ok(time - $t0 < 1.5, 'promptly (' . elapsed_since($t0) . ' s)');
sq($b, "SELECT redis_unlock('w')");

# --- One master stopped, then killed: a majority still grants.
redis_sigstop($r[2]);
$t0 = time;
($out, $err) = sq($a, "SELECT redis_wlock('p') > 0");
is($out, 't', 'granted with one master stopped') or diag $err;
ok(time - $t0 < 2.5, 'within the stopped master\'s command timeout (' . elapsed_since($t0) . ' s)');
($out) = sq($b, "SELECT redis_try_wlock('p')");
is($out, 'f', 'and exclusive');
is(redis_mode_of($_, $prefix, 'p', $owner_a), 'write', "held on master $_")
  for @r[0,1];
$t0 = time;
($out, $err) = sq($b, "SELECT state || ' ' || writer FROM redis_lock_info('p')");
is($out, "write $owner_a", 'redis_lock_info with one master stopped') or diag $err;
ok(time - $t0 < 2.5, 'within one command timeout (' . elapsed_since($t0) . ' s)');
($out) = sq($a, "SELECT redis_unlock('p')");
is($out, 't', 'released');
redis_sigcont($r[2]);

redis_stop($r[2]);
($out, $err) = sq($a, "SELECT redis_wlock('k') > 0");
is($out, 't', 'granted with one master killed') or diag $err;
($out) = sq($a, "SELECT redis_unlock('k')");
is($out, 't', 'and released');

# --- Two of three down: class 08, and nothing granted stays behind.
redis_stop($r[1]);
($out, $err) = sq($b, "SELECT redis_wlock('d')");
like(sqlstate($err), qr/^08/, 'two masters down: a connection error') or diag $err;
like($err, qr/quorum/, 'saying the quorum was not reached');
my $owner_b = session_owner($b);
is(redis_mode_of($r[0], $prefix, 'd', $owner_b), '', 'nothing left on the master that answered');
($out, $err) = sq($b, "SELECT redis_try_wlock('d')");
like(sqlstate($err), qr/^08/, 'the try form too');
($out, $err) = sq($b, "SELECT state FROM redis_lock_info('d')");
like(sqlstate($err), qr/^08/, 'redis_lock_info: one master\'s view is not the quorum\'s')
  or diag "$out $err";
like($err, qr/only 1 of the 3 .*quorum/, 'saying how many answered');

# Both back, empty: they do not count until they have been up long enough.
my $restarted = time;
redis_start($r[1]);
redis_start($r[2]);
redis_stop($r[0]);
sleep 1.5;    # past the second a failed master is left alone: they are asked
($out, $err) = sq($b, "SELECT redis_wlock('e')");
like(sqlstate($err), qr/^08/, 'masters restarted empty do not count yet') or diag $err;
like($err, qr/count toward a majority/, 'saying how many count');
like($err, qr/answered but does not count yet: its Redis has not been up as long as a restart must be .*it counts in \d+ ms/,
	'and why the others do not count, and when they will') or diag $err;
is(redis_mode_of($r[1], $prefix, 'e', $owner_b), '', 'and what they granted was released');
redis_start($r[0]);
# r[0] also restarted now; wait until all count.
sleep $max_lease + 1.5;
($out, $err) = sq($b, "SELECT redis_wlock('e') > 0");
is($out, 't', 'once up for rwlock.quorum_max_lease, they count') or diag $err;
ok(time - $restarted >= $max_lease, 'not before');
sq($b, "SELECT redis_unlock('e')");

# --- Split votes: holders on single masters, by hand (protocol 3: v "3",
# and each holder's s:<owner>, the seq of the request that granted it).
redis_cli($r[0], 'HSET', "$prefix:{v}", 'v', '3', 'w', 'hand-1', 's:hand-1', '1');
redis_cli($r[0], 'PEXPIRE', "$prefix:{v}", '30000');
redis_cli($r[1], 'HSET', "$prefix:{v}", 'v', '3', 'w', 'hand-2', 's:hand-2', '1');
redis_cli($r[1], 'PEXPIRE', "$prefix:{v}", '30000');
($out, $err) = sq($b, "SELECT state, writer IS NULL FROM redis_lock_info('v')");
is($out, 'free|t', 'redis_lock_info: a writer on one master of three holds nothing')
  or diag $err;
is(py_info('v'), 'free -', 'nor for the Python QuorumClient');
($out, $err) = sq($a, "SELECT redis_try_wlock('v', interval '1 s')");
is($out, 'f', 'one master of three: no grant') or diag $err;
is(redis_mode_of($r[2], $prefix, 'v', $owner_a), '', 'and nothing left where it was granted');
($out, $err) = sq($a, "SELECT redis_try_rlock('v', interval '500 ms')");
is($out, 'f', 'not for reading either');
sq_send($a, "SELECT redis_wlock('v') > 0");
sleep 0.5;
ok(!sq_poll($a), 'a waiting writer waits');
redis_cli($r[0], 'DEL', "$prefix:{v}");
($out, $err) = sq_wait($a, 10);
is($out, 't', 'granted once a majority is free') or diag $err;
is(redis_mode_of($r[1], $prefix, 'v', 'hand-2'), 'write', 'the other holder still has its master');
sq($a, "SELECT redis_unlock('v')");
redis_cli($r[1], 'DEL', "$prefix:{v}");

# --- redis_lock_info: the lock as a majority has it. A writer on two
# masters of three (leases 20 s and 8 s: it holds the quorum for 8 s), the
# first master free; readers, one on two masters, one on one; a waiting
# writer's intent on two. A writer's lease end is field we, "<token> <end
# ms>" (docs/protocol.md 3.3), not the hash's TTL.
my ($ts) = split /\n/, redis_cli($r[0], 'TIME');
redis_cli($_->[0], 'HSET', "$prefix:{m}", 'v', '3', 'w', 'hand-w', 's:hand-w', '1',
	'f', $_->[1], 'we', "$_->[1] " . ($ts * 1000 + $_->[2])),
redis_cli($_->[0], 'PEXPIRE', "$prefix:{m}", 60000)
  for [ $r[1], 7, 20000 ], [ $r[2], 9, 8000 ];
redis_cli($r[0], 'HSET', "$prefix:{m}", 'v', '3', 'f', '5');
($out, $err) = sq($b, "SELECT state || ' ' || token || ' ' || writer || ' ' ||
	extract(epoch FROM lease_left) FROM redis_lock_info('m')");
my @f = split / /, $out // '';
is("@f[0..2]", 'write 9 hand-w', 'a writer on two masters of three: write, the largest token')
  or diag $err;
ok(defined $f[3] && $f[3] > 6 && $f[3] <= 8, "lease_left: until only one master has it ($f[3] s)");
is(py_info('m'), 'write 9 hand-w', 'the Python QuorumClient agrees');
redis_cli($_, 'DEL', "$prefix:{m}") for @r;
my %readers = (0 => [ 'rd-a', 'rd-b' ], 1 => [ 'rd-a' ], 2 => [ 'rd-c' ]);
for my $i (0 .. 2) {
	redis_cli($r[$i], 'HSET', "$prefix:{m}", 'v', '3', 'n', scalar @{ $readers{$i} },
		map { ("r:$_", ($ts + 30) * 1000, "s:$_", '1') } @{ $readers{$i} });
	redis_cli($r[$i], 'PEXPIRE', "$prefix:{m}", '30000');
}
for my $i (1, 2) {
	redis_cli($r[$i], 'HSET', "$prefix:{m}", 'i:hand-q', ($ts + 30) * 1000, 's:hand-q', '1');
	redis_cli($r[$i], 'ZADD', "$prefix:{m}:q", '1', 'hand-q');
}
($out, $err) = sq($b, "SELECT state, readers, waiting FROM redis_lock_info('m')");
is($out, 'read|{rd-a}|{hand-q}',
	'readers and waiting writers: those two masters of three list') or diag $err;
is(py_info('m'), 'read - rd-a hand-q', 'the Python QuorumClient agrees');
redis_cli($_, 'DEL', "$prefix:{m}", "$prefix:{m}:q") for @r;

# --- Three sessions contending (their places in the masters' queues may
# disagree), a master killed in the middle: no lost update (each update
# committed before the lock is let go), no livelock.
$node->safe_psql('postgres', 'CREATE TABLE counter (v int); INSERT INTO counter VALUES (0)');
my $loop = q{DO $$ DECLARE x int; BEGIN FOR i IN 1..25 LOOP
  PERFORM redis_wlock('race'); SELECT v INTO x FROM counter;
  PERFORM pg_sleep(0.002); UPDATE counter SET v = x + 1; COMMIT;
  PERFORM redis_unlock('race'); END LOOP; END $$};
my $c = session($node);
sq_send($_, $loop) for ($a, $b, $c);
sleep 1;
redis_stop($r[2]);    # killed in the middle
my @done = map { [ sq_wait($_, 90) ] } ($a, $b, $c);
is(join('', map { $_->[1] // 'not done' } @done), '',
	'three sessions ran without errors (no livelock in split votes), a master killed meanwhile');
is($node->safe_psql('postgres', 'SELECT v FROM counter'), '75', 'no update lost');
redis_start($r[2]);    # empty: it counts again in rwlock.quorum_max_lease

# --- An upgrade conflict on the quorum is a deadlock, as on one Redis.
sq($a, "SELECT redis_rlock('u')");
sq($b, "SELECT redis_rlock('u')");
sq_send($a, "SELECT redis_wlock('u') > 0");
sleep 0.5;
($out, $err) = sq($b, "SELECT redis_wlock('u')");
is(sqlstate($err), '40P01', 'two readers upgrading: 40P01');
sq($b, "SELECT redis_unlock_all()");
($out, $err) = sq_wait($a, 10);
is($out, 't', 'the other upgrade goes through') or diag $err;
sq($a, "SELECT redis_unlock_all()");

# ... and when the other upgrading reader is on one master only (put there
# by hand): the upgrade granted on the others is undone, the read lock kept.
sq($a, "SELECT redis_rlock('uc')");
my ($now_s) = split /\n/, redis_cli($r[0], 'TIME');
my $until = ($now_s + 30) * 1000;
redis_cli($r[0], 'HSET', "$prefix:{uc}", 'r:hand-u', $until, 'n', '2', 'u', 'hand-u',
	'i:hand-u', $until, 'qe', $until, 'z', $until, 's:hand-u', '1');
redis_cli($r[0], 'ZADD', "$prefix:{uc}:q", '1', 'hand-u');
($out, $err) = sq($a, "SET lock_timeout = '5s'; SELECT redis_wlock('uc')");
is(sqlstate($err), '40P01', 'another reader upgrading on one master only: 40P01');
sq($a, "RESET lock_timeout");
ok(defined wait_until(sub {
	!grep { redis_mode_of($_, $prefix, 'uc', $owner_a) ne 'read' } @r }, 5),
	'the session still reads on every master, and writes on none');
($out) = sq($a, "SELECT mode FROM redis_held_locks WHERE name = 'uc'");
is($out, 'read', 'and holds the read lock');
sq($a, "SELECT redis_unlock_all()");
redis_cli($r[0], 'DEL', "$prefix:{uc}", "$prefix:{uc}:q");

# --- The keeper renews quorum holds past several leases.
ok(keeper_pid($node) ne '', 'the keeper runs');
sq($a, "SELECT redis_wlock('long')");
sleep 7;    # over two 3 s leases, the session idle
($out) = sq($b, "SELECT redis_try_wlock('long')");
is($out, 'f', 'still held after several leases');
($out) = sq($a, "SELECT lease_state FROM redis_held_locks WHERE name = 'long'");
is($out, 'held', 'and shown held');

# --- A hold a majority lost is reported lost.
redis_cli($_, 'DEL', "$prefix:{long}") for @r[0,1];
ok(defined wait_until(sub {
	my ($s) = sq($a, "SELECT lease_state FROM redis_held_locks WHERE name = 'long'");
	$s eq 'lost' }, 10), 'lost on two masters of three: reported lost');
($out, $err) = sq($a, "SELECT redis_unlock('long')");
is($out, 'f', 'redis_unlock says so');
like($err, qr/long/, 'with a warning naming the lock');

# --- The Python client in quorum mode shares the locks.
my $py = <<'PY';
import sys, time
sys.path.insert(0, sys.argv[1])
from rwlock_client import QuorumClient
c = QuorumClient.from_urls(sys.argv[2], prefix=sys.argv[3], lease=3.0, max_lease=6.0)
lk = c.write_lock("py")
lk.acquire(timeout=10)
print("token", lk.token, flush=True)
sys.stdin.readline()
print("released", lk.release(), flush=True)
sys.stdin.readline()
print("try", c.write_lock("py").try_acquire(wait=0.5), flush=True)
PY
my ($pin, $pout) = ('', '');
my $h = IPC::Run::start([ '/usr/bin/python3', '-c', $py,
	"$FindBin::RealBin/../clients/python", quorum_url(@r), $prefix ],
	'<', \$pin, '>', \$pout, '2>', \my $perr);
my $pump = sub {
	my ($re) = @_;
	my $t_end = time + 15;
	$h->pump_nb, sleep 0.05 while $pout !~ $re && time < $t_end;
	return $pout =~ $re ? $1 : undef;
};
my $pytok = $pump->(qr/token (\d+)/);
ok(defined $pytok && $pytok > 0, 'a Python QuorumClient takes a write lock') or diag $perr;
($out) = sq($a, "SELECT redis_try_wlock('py')");
is($out, 'f', 'SQL cannot take it meanwhile');
$pin .= "\n";
is($pump->(qr/released (\w+)/), 'True', 'the Python client releases it');
($out) = sq($a, "SELECT redis_wlock('py')");
ok($out > $pytok, 'SQL takes it next, with a larger token');
$pin .= "\n";
is($pump->(qr/try (\w+)/), 'False', 'and the Python client cannot take it then');
$h->finish;
sq($a, "SELECT redis_unlock('py')");

# --- Two masters that timed out a moment ago are asked all the same when the
# third alone is no majority: a stall is often over by the next call.
redis_sigstop($_) for @r[0, 1];
($out, $err) = sq($a, "SELECT redis_try_wlock('la')");
like(sqlstate($err), qr/^08/, 'two masters stalled: class 08') or diag $err;
redis_sigcont($_) for @r[0, 1];
($out, $err) = sq($a, "SELECT redis_wlock('la') > 0");
is($out, 't', 'granted as soon as they answer again, within their second of rest')
  or diag $err;
is(redis_mode_of($_, $prefix, 'la', $owner_a), 'write', "held on master $_") for @r[0, 1];
sq($a, "SELECT redis_unlock('la')");

# --- At exit, a release owed to a master left alone after a failure is sent
# all the same (once, within the exit's budget): the hold does not wait out
# its lease there.
my $ex = session($node);
my $owner_c = session_owner($ex);
sq($ex, "SELECT redis_wlock('ex')");
# A call that times out on the third master leaves it alone (its
# connection closed), so the release is not even sent there.
redis_sigstop($r[2]);
sq($ex, "SELECT redis_try_wlock('ex2')");
($out, $err) = sq($ex, "SELECT redis_unlock('ex')");
is($out, 't', 'released on a majority with one master left alone') or diag $err;
redis_sigcont($r[2]);
is(redis_mode_of($r[2], $prefix, 'ex', $owner_c), 'write', 'still held there');
$ex->quit;
ok(defined wait_until(sub { redis_mode_of($r[2], $prefix, 'ex', $owner_c) eq '' }, 0.5),
	'the session\'s exit released it there at once');

# --- Fencing tokens: one master's token far ahead (a fast clock).
my $big = 9000000000000000;
redis_cli($r[0], 'HSET', "$prefix:{t}", 'v', '3', 'f', $big);
($out, $err) = sq($a, "SELECT redis_wlock('t')");
my $tok1 = $out;
ok($tok1 > $big, 'the token is past the largest any master had') or diag $err;
is(quorum_field($_, $prefix, 't', 'f'), $tok1, "raised on master $_")
  for @r[1,2];
sq($a, "SELECT redis_unlock('t')");
redis_stop($r[0]);
($out, $err) = sq($b, "SELECT redis_wlock('t')");
my $tok2 = $out;
ok($tok2 > $tok1, 'without that master, the next token is larger still') or diag $err;
sq($b, "SELECT redis_unlock('t')");

# It comes back empty (its far-ahead token forgotten): once it counts again,
# tokens still increase, and it is raised to them.
redis_start($r[0]);
sleep $max_lease + 1.5;
($out, $err) = sq($a, "SELECT redis_wlock('t')");
ok($out > $tok2, 'with that master back empty, the next token is larger still') or diag $err;
is(quorum_field($r[0], $prefix, 't', 'f'), $out, 'and that master has it');
sq($a, "SELECT redis_unlock('t')");

done_testing();
