# Deadlocks through the Node client, which walks the wait-for graph itself
# (docs/protocol.md 18; clients/node):
#  a. a cycle of two Node processes only (A holds x and waits for y, B holds
#     y and waits for x; nobody else walks): one of them, the greater owner
#     id, raises DeadlockDetected within deadlockTimeout + 1 s of the cycle
#     closing, the other gets its lock. Twice: the one that closes the cycle
#     (B) is the victim (it fails at its own walk), then A is (B marks it);
#  b. a cycle of a Node client and a SQL session that the client closes
#     after the session's first walk met no cycle: the client's walk marks
#     the session (the greater owner id: "pg:" > "node:") before the
#     session's next check-in, which fails it with 40P01; the client gets
#     its lock;
#  d. (a) on a Redis Cluster, its locks and wait keys on different masters:
#     each hop of the walk goes to the node that serves its key;
#  e. a cycle of a Node client and a Python client only (each walks): the
#     Python process (the greater owner id: "py:" > "node:") raises
#     DeadlockDetected, whoever closes the cycle: itself at its own walk,
#     or at its next check-in after the Node client's walk marked it
#     through the Python holder's alias key ("<nonce>@<waiting owner>");
#  c. a Node waiter in a chain with no cycle (a SQL session waits for A,
#     which waits for B, which waits for a SQL session that waits for
#     nothing) for 4 x deadlockTimeout: no DeadlockDetected, no 40P01; all
#     get their locks once the chain's end lets go;
#  f. no false positive from a wait cut off in a stall (issue 37): an idle
#     SQL session holds a lock A and left a wait on lock L behind (its wait
#     key and its writer intent in L, written once and never renewed); a
#     Node client whose owner id beats "pg:" holds L and asks for A. Its
#     walk finds a cycle whose victim is itself, but the session's intent
#     shows no sign of life: no DeadlockDetected; it gets A once the session
#     lets go. (Before: DeadlockDetected about deadlockTimeout after.)
#  g. a marked victim walks again before it fails (issue 37): a mark left
#     on a waiting Node client's wait key where there is no cycle fails
#     nothing; the client gets its lock. (Before: DeadlockDetected.)
# Each Node process holds its first lock and waits for its second through
# the same owner id (the waiting Lock made with the holder's: the Node
# client's `owner` option, its way to link them, README "deadlockTimeout").
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $nodedir = "$FindBin::RealBin/../clients/node";
plan skip_all => 'node, or clients/node/node_modules (npm ci), missing'
  unless -d "$nodedir/node_modules/ioredis" && system('node --version >/dev/null 2>&1') == 0;

my $port = redis_start();
my $conf = "rwlock.key_prefix = 'shared'\ndeadlock_timeout = '1s'\n";
my $n1 = new_node('nd1', port => $port, preload => 1, lease => '10s', conf => $conf);
my $prefix = 'shared';

# A Node holder (on the Redis at `port`, or the one a URL names): takes
# `first` (as owner id argv[7] if given), says so,
# waits for a file to appear (its go), then asks for `second` with the same
# owner id and says how that ended; then releases what it holds.
my $js = "$PostgreSQL::Test::Utils::tmp_check/holder.js";
open(my $jfh, '>', $js) or die "$js: $!";
print $jfh <<'JS';
const [dir, port, prefix, first, second, go, owner] = process.argv.slice(2);
const fs = require('fs');
const Redis = require(dir + '/node_modules/ioredis');
const rw = require(dir);
(async () => {
  const opts = { prefix, deadlockTimeout: 1000 };
  const locks = port.includes('://') ? rw.Locks.fromUrl(port, opts)
    : new rw.Locks(new Redis({ host: '127.0.0.1', port: Number(port) }), opts);
  const held = locks.writeLock(first, owner ? { owner } : {});
  await held.acquire(10000);
  console.log('holding', held.owner);
  while (!fs.existsSync(go)) await new Promise((r) => setTimeout(r, 10));
  const lk = locks.writeLock(second, { owner: held.owner }); // one holder in two Lock objects: one owner id
  const t0 = performance.now();
  const secs = () => ((performance.now() - t0) / 1000).toFixed(3);
  try {
    await lk.acquire(10000);
    console.log('granted', secs());
    await lk.release();
  } catch (e) {
    console.log(e instanceof rw.DeadlockDetected ? 'deadlock' : 'error', secs(), e.message);
  }
  await held.release();
  console.log('released');
  await locks.close();
  if (!locks._ownsRedis) locks.redis.disconnect();
})().catch((e) => { console.log('failed', e.message); process.exit(1); });
JS
close $jfh;

sub node_holder
{
	my ($first, $second, $owner, $redis) = @_;
	my %h = (out => '', err => '', go => "$PostgreSQL::Test::Utils::tmp_check/go_$first");
	unlink $h{go};
	$h{h} = IPC::Run::start([ 'node', $js, $nodedir, $redis // $port, $prefix, $first, $second, $h{go},
		$owner // '' ], '<', \undef, '>', \$h{out}, '2>', \$h{err});
	return \%h;
}

sub node_go
{
	my ($h) = @_;
	open(my $fh, '>', $h->{go}) or die "$h->{go}: $!";
	close $fh;
}

sub node_until
{
	my ($h, $re, $secs) = @_;
	my $t_end = time + $secs;
	while ($h->{out} !~ $re && time < $t_end)
	{
		eval { $h->{h}->pump_nb; };
		sleep 0.02;
	}
	return $h->{out} =~ $re;
}

sub wait_keys
{
	return grep { $_ ne '' } split /\n/, redis_cli($port, '--scan', '--pattern', "$prefix:wait:*");
}

# ---- a. a cycle of two Node processes; d. the same on a Redis Cluster ----
my $cl = cluster_start(masters => 3, replicas => 0);
my $url = cluster_url($cl);
my @ranges = cluster_ranges($cl);
my @masters = cluster_masters($cl);

# A name whose lock the given master serves.
sub name_on
{
	my ($master, $stem) = @_;
	for my $i (1 .. 1000)
	{
		return "$stem$i" if cluster_slot_owner($cl, key_slot("$prefix:{$stem$i}"), @ranges) == $master;
	}
	die "no name on $master";
}
for my $case ([ 'a1', 'node:t037:1:aaaa', 'node:t037:2:bbbb' ],
	[ 'a2', 'node:t037:2:aaaa', 'node:t037:1:bbbb' ],
	[ 'd1', 'node:t037:1:aaaa', 'node:t037:2:bbbb', $url ],
	[ 'd2', 'node:t037:2:aaaa', 'node:t037:1:bbbb', $url ])
{
	my ($c, $owner_a, $owner_b, $redis) = @$case;
	my ($x, $y) = $redis ? (name_on($masters[0], "${c}x"), name_on($masters[1], "${c}y")) : ("${c}x", "${c}y");
	if ($redis)
	{
		my @on = map { cluster_slot_owner($cl, key_slot($_), @ranges) }
		  ("$prefix:{$x}", "$prefix:{$y}", "$prefix:wait:{$owner_a}", "$prefix:wait:{$owner_b}");
		note "$c: $x on $on[0], $y on $on[1], A's wait key on $on[2], B's on $on[3]";
		isnt($on[0], $on[1], "$c. the two locks are on different masters");
	}
	my $a = node_holder($x, $y, $owner_a, $redis);
	my $b = node_holder($y, $x, $owner_b, $redis);
	ok(node_until($a, qr/holding/, 15) && node_until($b, qr/holding/, 15), "$c. both hold")
	  or diag "$a->{err}$b->{err}";
	node_go($a);    # A waits for y
	sleep 0.5;
	node_go($b);    # B waits for x: the cycle closes
	my $t0 = time;
	my ($victim, $other) = $owner_a gt $owner_b ? ($a, $b) : ($b, $a);
	ok(node_until($victim, qr/deadlock|granted|error/, 6), "$c. the victim's wait ended");
	my $secs = time - $t0;
	like($victim->{out}, qr/^deadlock \d/m, "$c. the greater owner id raises DeadlockDetected")
	  or diag "A: $a->{out}$a->{err}\nB: $b->{out}$b->{err}";
	cmp_ok($secs, '<', 3.0, sprintf("$c. broken %.3f s after the cycle closed (deadlockTimeout 1 s: the target is + 1 s; margin for a loaded machine)", $secs));
	like($victim->{out}, qr/deadlock detected while waiting for lock .*node:t037:\S+ w node:t037:\S+ shared:\{(\Q$x\E|\Q$y\E)\}; node:t037:\S+ w node:t037:\S+ shared:\{(\Q$x\E|\Q$y\E)\}/,
		"$c. naming the cycle");
	ok(node_until($other, qr/granted/, 10), "$c. the other gets its lock") or diag $other->{out};
	unlike($other->{out}, qr/deadlock/, "$c. and raises nothing");
	ok(node_until($_, qr/released/, 10), "$c. released") for ($a, $b);
	$_->{h}->finish for ($a, $b);
	is(join(',', $redis ? () : wait_keys()), '', "$c. no wait key left behind");
	is(join(',', grep { $_ ne '' } map { redis_cli($_, '--scan', '--pattern', "$prefix:wait:*") } @{ $cl->{ports} }), '',
		"$c. no wait key left behind on the cluster") if $redis;
}

# ---- b. a Node client closes a cycle through a SQL session ----
{
	my $p = node_holder('nb1', 'sb1');
	ok(node_until($p, qr/holding/, 15), 'b. the client holds nb1') or diag $p->{err};
	my $s = session($n1);
	sq($s, "SET deadlock_timeout = '3s'");
	sq($s, "BEGIN; SELECT redis_wlock_xact('sb1')");
	my $owner_s = session_owner($s);
	sq_send($s, "SELECT redis_wlock_xact('nb1') > 0");
	sleep 3.5;    # the session's first walk met the client, waiting for nothing yet
	my $t0 = time;
	node_go($p);
	my $marked = '';
	wait_until(sub { $marked = redis_cli($port, 'GET', "$prefix:wait:{$owner_s}"); $marked =~ /^!/ }, 3.5);
	my $secs = time - $t0;
	like($marked, qr/^!3 w \S+ shared:\{nb1\}\n/, sprintf('b. the client\'s walk marks the session before its next check-in (%.3f s)', $secs));
	like($marked, qr/^\Q$owner_s\E w node:\S+ shared:\{nb1\}$/m, 'b. the mark names the session\'s wait');
	like($marked, qr/^node:\S+ w \Q$owner_s\E shared:\{sb1\}$/m, 'b. and the client\'s');
	my ($out, $err, $waited) = sq_wait($s, 10);
	is(sqlstate($err), '40P01', 'b. the session (the greater owner id) fails with 40P01');
	cmp_ok(time - $t0, '<', 1.0 + 1.0 + 3.0, sprintf('b. at its next check-in (%.3f s after the cycle closed)', time - $t0));
	sq($s, 'ROLLBACK');
	ok(node_until($p, qr/granted|deadlock|error/, 10), 'b. the client\'s wait ended');
	like($p->{out}, qr/^granted/m, 'b. the client gets its lock');
	node_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
	is(join(',', wait_keys()), '', 'b. no wait key left behind');
}

# ---- e. a cycle of a Node and a Python client ----
{
	# The Python holder: as the Node one, its second lock another Lock
	# object (another owner id, linked as an alias of the first's).
	my $py = <<'PY';
import os, sys, time
sys.path.insert(0, sys.argv[1])
import redis
from rwlock_client import Client, DeadlockDetected
c = Client(redis.Redis(host="127.0.0.1", port=int(sys.argv[2])), prefix=sys.argv[3],
           deadlock_timeout=1.0)
first = c.write_lock(sys.argv[4])
first.acquire(timeout=10)
print("holding", first.owner, flush=True)
while not os.path.exists(sys.argv[6]):
    time.sleep(0.01)
t0 = time.monotonic()
try:
    c.write_lock(sys.argv[5]).acquire(timeout=10)
    print("granted %.3f" % (time.monotonic() - t0), flush=True)
except DeadlockDetected as e:
    print("deadlock %.3f %s" % (time.monotonic() - t0, e), flush=True)
first.release()
print("released", flush=True)
PY
	for my $closer ('python', 'node')
	{
		my ($x, $y) = ("e${closer}x", "e${closer}y");
		my %p = (out => '', err => '', go => "$PostgreSQL::Test::Utils::tmp_check/go_$x");
		unlink $p{go};
		$p{h} = IPC::Run::start([ '/usr/bin/python3', '-c', $py, "$FindBin::RealBin/../clients/python",
			$port, $prefix, $x, $y, $p{go} ], '<', \undef, '>', \$p{out}, '2>', \$p{err});
		my $n = node_holder($y, $x);
		ok(node_until(\%p, qr/holding/, 15) && node_until($n, qr/holding/, 15), "e ($closer closes). both hold")
		  or diag "$p{err}$n->{err}";
		my ($first, $last) = $closer eq 'python' ? ($n, \%p) : (\%p, $n);
		node_go($first);
		sleep 0.5;
		node_go($last);    # the cycle closes
		my $t0 = time;
		ok(node_until(\%p, qr/deadlock|granted/, 6), "e ($closer closes). the Python client's wait ended");
		my $secs = time - $t0;
		like($p{out}, qr/^deadlock \d/m, "e ($closer closes). the Python client (the greater owner id) raises DeadlockDetected")
		  or diag "py: $p{out}$p{err}\nnode: $n->{out}$n->{err}";
		cmp_ok($secs, '<', 3.0, sprintf("e ($closer closes). broken %.3f s after the cycle closed", $secs));
		ok(node_until($n, qr/granted/, 10), "e ($closer closes). the Node client gets its lock") or diag $n->{out};
		unlike($n->{out}, qr/deadlock/, "e ($closer closes). and raises nothing");
		ok(node_until($_, qr/released/, 10), "e ($closer closes). released") for (\%p, $n);
		$_->{h}->finish for (\%p, $n);
		is(join(',', wait_keys()), '', "e ($closer closes). no wait key left behind");
	}
}

# ---- c. a chain with no cycle ----
{
	my $s = session($n1);     # the chain's end: holds cz, waits for nothing
	my $s2 = session($n1);    # waits for cx, held by A
	sq($s, "SELECT redis_wlock('cz')");
	my $b = node_holder('cy', 'cz');
	my $a = node_holder('cx', 'cy');
	ok(node_until($a, qr/holding/, 15) && node_until($b, qr/holding/, 15), 'c. both clients hold');
	node_go($b);
	node_go($a);
	sq_send($s2, "SELECT redis_wlock('cx') > 0");
	sleep 4.2;
	unlike($a->{out} . $b->{out}, qr/deadlock|granted|error/, 'c. 4 x deadlockTimeout in a chain: no DeadlockDetected, still waiting');
	ok(!sq_poll($s2), 'c. the SQL waiter still waits, no 40P01');
	sq($s, "SELECT redis_unlock('cz')");
	ok(node_until($b, qr/granted/, 10), 'c. B gets cz once the session lets go') or diag $b->{out};
	ok(node_until($a, qr/granted/, 10), 'c. then A gets cy') or diag $a->{out};
	my ($out, $err) = sq_wait($s2, 10);
	is($out, 't', 'c. then the SQL waiter gets cx');
	is(sqlstate($err), '', 'c. with no error');
	sq($s2, "SELECT redis_unlock('cx')");
	node_until($_, qr/released/, 10) for ($a, $b);
	$_->{h}->finish for ($a, $b);
	$_->quit for ($s, $s2);
	is(join(',', wait_keys()), '', 'c. no wait key left behind');
}

# ---- f. no false positive from a cut-off wait's leftovers ----
{
	my $p = node_holder('nfl', 'sfa', 'zz:t037:f');
	ok(node_until($p, qr/holding/, 15), 'f. the client holds L') or diag $p->{err};
	my $s = session($n1);
	sq($s, "SELECT redis_wlock('sfa') > 0");
	my $owner = session_owner($s);
	# The session's wait for L, cut off: its wait key and its intent, with
	# the lease a try gives it (2 s, here 2.5 s from now), never renewed.
	my ($sec, $usec) = split /\n/, redis_cli($port, 'TIME');
	my $end = $sec * 1000 + int($usec / 1000) + 2500;
	redis_cli($port, 'SET', "$prefix:wait:{$owner}", "3 w c0ffee00 $prefix:{nfl}", 'PX', '4000');
	redis_cli($port, 'HSET', "$prefix:{nfl}", "i:$owner", $end);
	node_go($p);
	ok(!node_until($p, qr/deadlock|granted|error/, 3.5),
		'f. the client asking for A keeps waiting past deadlockTimeout: no DeadlockDetected')
	  or diag $p->{out};
	sq($s, "SELECT redis_unlock('sfa')");
	ok(node_until($p, qr/granted/, 10), 'f. and gets A once the session lets go')
	  or diag "$p->{out}$p->{err}";
	node_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
}

# ---- g. a marked victim walks again before it fails ----
{
	# No cycle: the Node client holds L and waits for A, which a SQL session
	# holds and waits for nothing. A mark left on the client's wait key (as
	# for a cycle that broke since) fails nothing by itself: the client
	# walks again, finds no cycle and waits on. (Before: DeadlockDetected
	# at its next check-in.)
	my $p = node_holder('ngl', 'sga');
	ok(node_until($p, qr/holding/, 15), 'g. the client holds L') or diag $p->{err};
	my ($owner) = $p->{out} =~ /holding (\S+)/;
	my $s = session($n1);
	sq($s, "SELECT redis_wlock('sga') > 0");
	node_go($p);
	my $wk = "$prefix:wait:{$owner}";
	my $v = '';
	wait_until(sub { $v = redis_cli($port, 'GET', $wk); $v =~ /^3 w / }, 5);
	like($v, qr/^3 w \S+ \Q$prefix:{sga}\E$/, 'g. the client checked in: its wait key says it waits for A');
	redis_cli($port, 'SET', $wk, "!$v\n$owner w pg:nobody $prefix:{sga}", 'PX', '4000');
	ok(!node_until($p, qr/deadlock|granted|error/, 2.5),
		'g. a mark for a cycle that is not there fails nothing: the client keeps waiting')
	  or diag $p->{out};
	sq($s, "SELECT redis_unlock('sga')");
	ok(node_until($p, qr/granted/, 10), 'g. and gets A once the session lets go')
	  or diag "$p->{out}$p->{err}";
	node_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
}

$n1->stop;
done_testing();
