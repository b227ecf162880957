# Deadlocks through a client, and no false positives under load (SPEC 12,
# issue 29):
#  1. a cycle through the Python client (clients/python): it holds one lock
#     and waits for another that a SQL session holds while that session
#     waits for the first: the cycle is found and broken within about
#     deadlock_timeout + 1 s, the client (the victim: the greatest owner id)
#     raises DeadlockDetected, the SQL session gets its lock;
#  2. the same cycle closed by the client, after the SQL session's first walk
#     (a walk that met a client is repeated each deadlock_timeout);
#  3. a wait with no deadlock costs one Redis call per deadlock_timeout (the
#     wait key's SET) and one walk (a GET);
#  4. 20 sessions on two servers locking random names, reads and writes, in
#     one global order for 20 s: no deadlock reported, no error;
#  5. a wait key naming a wait that is not there (its intent is not in the
#     lock) is no edge: no 40P01;
#  6. a cycle of two Python processes only (each holds one lock and waits
#     for the other's): the clients walk too (docs/protocol.md 18): exactly
#     one, the one with the greater owner id, raises DeadlockDetected within
#     deadlock_timeout + 1 s of the cycle's closing, the other gets its lock;
#  7. a cycle of two Python processes and a SQL session, closed by a Python
#     client after the session's first walk: the closing client's own walk
#     breaks it within deadlock_timeout + 1 s (the session, with a longer
#     deadlock_timeout, walks again too late to be the one); exactly one
#     victim, the others proceed;
#  8. an asyncio client in a cycle with a synchronous client: the same;
#  9. no false positive from a wait cut off in a stall (issue 37): an idle
#     SQL session holds a lock A and left a wait on lock L behind (its wait
#     key and its writer intent in L, or its reader's mark there, written
#     once and never renewed, as a cut-off wait leaves them); a client
#     (sync, asyncio, then sync with the reader's leftover) holds L and
#     asks for A. Its walk finds a cycle whose victim is the client ("py:" >
#     "pg:"), but the session's intent shows no sign of life (its end never
#     moves): no DeadlockDetected; the client gets A once the session lets
#     go. (Before: DeadlockDetected about deadlock_timeout after the ask.)
# 10. a marked victim walks again before it fails (issue 37): a mark left
#     on a waiting client's wait key where there is no cycle (one that
#     broke since) fails nothing; the client gets its lock. (Before:
#     DeadlockDetected at its next check-in.)
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockWaits;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $conf = "rwlock.key_prefix = 'shared'\ndeadlock_timeout = '1s'\nlog_lock_waits = on\n";
my $n1 = new_node('cl1', port => $port, preload => 1, lease => '10s', conf => $conf);
my $prefix = 'shared';

# A Python holder: takes `first`, says so, waits for a file to appear (its
# go), then asks for `second` and says how that ended.
my $py = <<'PY';
import os, sys, time
sys.path.insert(0, sys.argv[1])
import redis
from rwlock_client import Client, DeadlockDetected
c = Client(redis.Redis(host="127.0.0.1", port=int(sys.argv[2])), prefix=sys.argv[3],
           deadlock_timeout=1.0)
first = c.write_lock(sys.argv[4])
first.acquire(timeout=10)
# The second lock is another Lock object: another owner id, waiting in the
# same thread as the holder of the first.
print("holding", first.owner, flush=True)
while not os.path.exists(sys.argv[6]):
    time.sleep(0.01)
t0 = time.monotonic()
try:
    c.write_lock(sys.argv[5]).acquire(timeout=20)
    print("granted", flush=True)
except DeadlockDetected as e:
    print("deadlock %.3f %s" % (time.monotonic() - t0, e), flush=True)
first.release()
print("released", flush=True)
PY

# The same with the asyncio client. It has no aliases (its locks' tasks are
# not tracked), so the task holds and waits under one owner id: the second
# lock takes the first one's.
my $py_aio = <<'PY';
import asyncio, os, sys, time
sys.path.insert(0, sys.argv[1])
import redis.asyncio as aredis
from rwlock_client import DeadlockDetected
from rwlock_client.aio import AsyncClient

async def main():
    c = AsyncClient(aredis.Redis(host="127.0.0.1", port=int(sys.argv[2])),
                    prefix=sys.argv[3], deadlock_timeout=1.0)
    first = c.write_lock(sys.argv[4])
    await first.acquire(timeout=10)
    print("holding", first.owner, flush=True)
    while not os.path.exists(sys.argv[6]):
        await asyncio.sleep(0.01)
    second = c.write_lock(sys.argv[5])
    second.owner = first.owner
    t0 = time.monotonic()
    try:
        await second.acquire(timeout=20)
        print("granted", flush=True)
        await second.release()
    except DeadlockDetected as e:
        print("deadlock %.3f %s" % (time.monotonic() - t0, e), flush=True)
    await first.release()
    print("released", flush=True)

asyncio.run(main())
PY

sub python_holder
{
	my ($first, $second, $script) = @_;
	my %h = (out => '', err => '', go => "$PostgreSQL::Test::Utils::tmp_check/go_$first");
	$h{h} = IPC::Run::start([ '/usr/bin/python3', '-c', $script // $py,
		"$FindBin::RealBin/../clients/python", $port, $prefix, $first, $second, $h{go} ],
		'<', \undef, '>', \$h{out}, '2>', \$h{err});
	return \%h;
}

sub py_go
{
	my ($h) = @_;
	open(my $fh, '>', $h->{go}) or die "$h->{go}: $!";
	close $fh;
}

sub py_until
{
	my ($h, $re, $secs) = @_;
	my $t_end = time + $secs;
	while ($h->{out} !~ $re && time < $t_end)
	{
		eval { $h->{h}->pump_nb; };
		sleep 0.05;
	}
	return $h->{out} =~ $re;
}

# The owner id a Python holder printed for its first lock.
sub py_owner
{
	my ($h) = @_;
	return $h->{out} =~ /holding (\S+)/ ? $1 : '';
}

# Go to each holder (in this order, 0.3 s apart) and wait for each wait to
# end: the seconds from the last go to the first DeadlockDetected (or undef).
sub py_go_all
{
	my (@h) = @_;
	my $t0;
	for my $i (0 .. $#h)
	{
		sleep 0.3 if $i > 0;
		$t0 = time;
		py_go($h[$i]);
	}
	my $first;
	my $t_end = time + 25;
	while (time < $t_end)
	{
		eval { $_->{h}->pump_nb; } for @h;
		$first //= time - $t0 if grep { $_->{out} =~ /deadlock \d/ } @h;
		last unless grep { $_->{out} !~ /deadlock|granted/ } @h;
		sleep 0.02;
	}
	return $first;
}

# ---- 1. the SQL session closes the cycle ----
{
	my $p = python_holder('py1', 'sq1');
	ok(py_until($p, qr/holding/, 15), '1. the client holds py1') or diag $p->{err};
	my $s = session($n1);
	sq($s, "BEGIN; SELECT redis_wlock_xact('sq1')");
	py_go($p);
	sleep 0.3;
	my $t0 = sq_send($s, "SELECT redis_wlock_xact('py1') > 0");
	ok(py_until($p, qr/deadlock|granted/, 20), '1. the client\'s wait ended');
	my $secs = time - $t0;
	like($p->{out}, qr/deadlock \d/, '1. the client raises DeadlockDetected');
	like($p->{out}, qr/deadlock detected while waiting for lock 'sq1': .*py:\S+ w pg:\S+ shared:\{sq1\}/,
		'1. naming the cycle: the client waits for sq1, held by the session');
	like($p->{out}, qr/pg:\S+ w py:\S+ shared:\{py1\}/, '1. which waits for py1, held by the client');
	cmp_ok($secs, '<', 1.0 + 1.0 + 1.5, "1. within about deadlock_timeout + 1 s ($secs s; margin for a loaded machine)");
	my ($out, $err) = sq_wait($s, 15);
	is($out, 't', '1. the SQL session gets its lock');
	is(sqlstate($err), '', '1. with no error');
	sq($s, 'COMMIT');
	py_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
}

# ---- 2. the client closes the cycle ----
{
	my $p = python_holder('py2', 'sq2');
	ok(py_until($p, qr/holding/, 15), '2. the client holds py2') or diag $p->{err};
	my $s = session($n1);
	sq($s, "BEGIN; SELECT redis_wlock_xact('sq2')");
	sq_send($s, "SELECT redis_wlock_xact('py2') > 0");
	sleep 1.5;    # the session's first walk: the client waits for nothing yet
	my $t0 = time;
	py_go($p);
	ok(py_until($p, qr/deadlock|granted/, 20), '2. the client\'s wait ended');
	my $secs = time - $t0;
	like($p->{out}, qr/deadlock \d/, '2. the client raises DeadlockDetected');
	cmp_ok($secs, '<', 3 * 1.0 + 1.5, "2. within a few deadlock_timeouts ($secs s)");
	my ($out, $err) = sq_wait($s, 15);
	is($out, 't', '2. the SQL session gets its lock');
	sq($s, 'COMMIT');
	py_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
}

# ---- 3. the cost of a wait with no deadlock ----
{
	my ($a, $b) = (session($n1), session($n1));
	sq($a, "SELECT redis_wlock('cost')");
	redis_cli($port, 'CONFIG', 'RESETSTAT');
	sq_send($b, "SELECT redis_wlock('cost') > 0");
	sleep 5.2;
	my $stats = redis_cli($port, 'INFO', 'commandstats');
	my ($sets) = $stats =~ /cmdstat_set:calls=(\d+)/;
	my ($gets) = $stats =~ /cmdstat_get:calls=(\d+)/;
	$sets //= 0;
	$gets //= 0;
	cmp_ok($sets, '<=', 5, "3. a 5 s wait writes its wait key once per deadlock_timeout ($sets SETs)");
	cmp_ok($sets, '>=', 3, '3. and does write it');
	# checkin.lua reads the old value (a GET) as it writes the key: the
	# walk's own GETs are what is beyond one per SET.
	cmp_ok($gets - $sets, '<=', 1, "3. and walks once ($gets GETs, $sets of them the check-ins')");
	sq($a, "SELECT redis_unlock('cost')");
	my ($out) = sq_wait($b, 10);
	is($out, 't', '3. the waiter gets the lock');
	sq($b, "SELECT redis_unlock('cost')");
	$_->quit for ($a, $b);
}

# ---- 5. no false positive: a wait key left by a wait that ended ----
{
	# A holds h1 and waits for nothing, but a wait key (left by a crash, or a
	# client of its owner id) says it waits for h2, which B holds. B asks for
	# h1: the walk finds A's key, but A's intent is not in h2: no edge.
	my ($a, $b) = (session($n1), session($n1));
	sq($a, "SELECT redis_wlock('h1')");
	sq($b, "SELECT redis_wlock('h2')");
	my $owner_a = session_owner($a);
	redis_cli($port, 'SET', "$prefix:wait:{$owner_a}", "2 w deadbeef $prefix:{h2}", 'PX', '20000');
	sq($b, "SET lock_timeout = '3s'");
	my ($out, $err) = sq($b, "SELECT redis_wlock('h1')");
	is(sqlstate($err), '55P03', '5. a stale wait key makes no cycle: the wait ends by lock_timeout, not 40P01');
	redis_cli($port, 'DEL', "$prefix:wait:{$owner_a}");
	sq($_, "SELECT redis_unlock_all()") for ($a, $b);
	$_->quit for ($a, $b);
}

# ---- 6. a cycle of two Python processes only ----
{
	my $a = python_holder('pa6', 'pb6');
	my $b = python_holder('pb6', 'pa6');
	ok(py_until($a, qr/holding/, 15) && py_until($b, qr/holding/, 15),
		'6. each client holds its lock') or diag "$a->{err}$b->{err}";
	my $secs = py_go_all($a, $b);
	my @victims = grep { $_->{out} =~ /deadlock \d/ } ($a, $b);
	my @others = grep { $_->{out} !~ /deadlock \d/ } ($a, $b);
	is(scalar @victims, 1, '6. exactly one client raises DeadlockDetected')
	  or diag "a: $a->{out}$a->{err}\nb: $b->{out}$b->{err}";
	ok(defined $secs && $secs < 1.0 + 1.0 + 0.5,
		'6. within deadlock_timeout + 1 s of the cycle\'s closing ('
		  . ($secs // 'never') . ' s; margin for a loaded machine)');
	if (@victims == 1)
	{
		like($others[0]->{out}, qr/granted/, '6. the other gets its lock');
		cmp_ok(py_owner($victims[0]), 'gt', py_owner($others[0]),
			'6. the victim is the one with the greater owner id');
		like($victims[0]->{out}, qr/deadlock detected while waiting for lock 'p[ab]6': .*py:\S+ w py:\S+ shared:\{p[ab]6\}/,
			'6. naming the cycle');
	}
	for my $h ($a, $b)
	{
		py_until($h, qr/released/, 10);
		$h->{h}->finish;
	}
}

# ---- 7. a cycle of two Python processes and a SQL session ----
{
	# The session waits first, with a deadlock_timeout of 3 s: its first
	# walk (at 3 s) meets the first client, which waits for nothing yet;
	# then each client waits, and the second closes the cycle. The
	# session walks again only at 6 s, 2.4 s after the cycle closed: the
	# break within deadlock_timeout + 1 s is the clients' own walk.
	my $a = python_holder('pa7', 'pb7');
	my $b = python_holder('pb7', 'sq7');
	ok(py_until($a, qr/holding/, 15) && py_until($b, qr/holding/, 15),
		'7. each client holds its lock') or diag "$a->{err}$b->{err}";
	my $s = session($n1);
	sq($s, "SET deadlock_timeout = '3s'");
	sq($s, "BEGIN; SELECT redis_wlock_xact('sq7')");
	sq_send($s, "SELECT redis_wlock_xact('pa7') > 0");
	sleep 3.3;    # the session's first walk: no cycle yet
	my $secs = py_go_all($a, $b);
	my @victims = grep { $_->{out} =~ /deadlock \d/ } ($a, $b);
	is(scalar @victims, 1, '7. exactly one client raises DeadlockDetected')
	  or diag "a: $a->{out}$a->{err}\nb: $b->{out}$b->{err}";
	ok(defined $secs && $secs < 1.0 + 1.0 + 0.3,
		'7. within deadlock_timeout + 1 s of the cycle\'s closing (' . ($secs // 'never') . ' s)');
	my ($victim) = @victims;
	my ($other) = grep { $_->{out} !~ /deadlock \d/ } ($a, $b);
	cmp_ok(py_owner($victim // $a), 'gt', py_owner($other // $b),
		'7. the victim is the client with the greater owner id');
	my $said = ($victim // $a)->{out};
	ok($said =~ /py:\S+ w py:\S+ shared:\{pb7\}/ && $said =~ /py:\S+ w pg:\S+ shared:\{sq7\}/
		  && $said =~ /pg:\S+ w py:\S+ shared:\{pa7\}/, '7. naming the three waits') or diag $said;
	my ($out, $err) = sq_wait($s, 15);
	is($out, 't', '7. the SQL session gets its lock');
	is(sqlstate($err), '', '7. with no error');
	sq($s, 'COMMIT');
	ok(py_until($other // $b, qr/granted/, 15), '7. the other client gets its lock');
	for my $h ($a, $b)
	{
		py_until($h, qr/released/, 10);
		$h->{h}->finish;
	}
	$s->quit;
}

# ---- 8. an asyncio client in a cycle with a synchronous client ----
{
	my $a = python_holder('pa8', 'pb8');
	my $b = python_holder('pb8', 'pa8', $py_aio);
	ok(py_until($a, qr/holding/, 15) && py_until($b, qr/holding/, 15),
		'8. each client holds its lock') or diag "$a->{err}$b->{err}";
	# The asyncio client waits first, the synchronous one closes the
	# cycle. Owner ids start with the pid: the victim is then likely the
	# one started last, the asyncio client, which the synchronous one's
	# walk marks (mark.lua) and which sees that at its next check-in (in
	# 6 and 7, the client closing the cycle is likely its own victim).
	my $secs = py_go_all($b, $a);
	my @victims = grep { $_->{out} =~ /deadlock \d/ } ($a, $b);
	my @others = grep { $_->{out} !~ /deadlock \d/ } ($a, $b);
	is(scalar @victims, 1, '8. exactly one client raises DeadlockDetected')
	  or diag "sync: $a->{out}$a->{err}\naio: $b->{out}$b->{err}";
	ok(defined $secs && $secs < 1.0 + 1.0 + 0.5,
		'8. within deadlock_timeout + 1 s of the cycle\'s closing (' . ($secs // 'never') . ' s)');
	if (@victims == 1)
	{
		like($others[0]->{out}, qr/granted/, '8. the other gets its lock');
		cmp_ok(py_owner($victims[0]), 'gt', py_owner($others[0]),
			'8. the victim is the one with the greater owner id');
	}
	for my $h ($a, $b)
	{
		py_until($h, qr/released/, 10);
		$h->{h}->finish;
	}
}

# ---- 9. no false positive from a cut-off wait's leftovers ----
for my $case ([ 'sync', $py, 'w', 'i' ], [ 'asyncio', $py_aio, 'w', 'i' ], [ 'reader', $py, 'r', 'm' ])
{
	my ($kind, $script, $mode, $field) = @$case;
	my ($l, $a) = ("py9l$kind", "sq9a$kind");
	my $p = python_holder($l, $a, $script);
	ok(py_until($p, qr/holding/, 15), "9. ($kind) the client holds L") or diag $p->{err};
	my $s = session($n1);
	sq($s, "SELECT redis_wlock('$a') > 0");
	my $owner = session_owner($s);
	# The session's wait for L, cut off: its wait key and its intent (or
	# mark), with the lease a try gives it (2 s, here 2.5 s from now), never
	# renewed.
	my ($sec, $usec) = split /\n/, redis_cli($port, 'TIME');
	my $end = $sec * 1000 + int($usec / 1000) + 2500;
	redis_cli($port, 'SET', "$prefix:wait:{$owner}", "3 $mode c0ffee00 $prefix:{$l}", 'PX', '4000');
	redis_cli($port, 'HSET', "$prefix:{$l}", "$field:$owner", $end);
	py_go($p);
	ok(!py_until($p, qr/deadlock|granted/, 3.5),
		"9. ($kind) the client asking for A keeps waiting past deadlock_timeout: no DeadlockDetected")
	  or diag $p->{out};
	sq($s, "SELECT redis_unlock('$a')");
	ok(py_until($p, qr/granted/, 10), "9. ($kind) and gets A once the session lets go")
	  or diag "$p->{out}$p->{err}";
	py_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
}

# ---- 10. a marked victim walks again before it fails ----
{
	# No cycle: the client holds L and waits for A, which a SQL session
	# holds and waits for nothing. A mark that another walker left on the
	# client's wait key (as for a cycle that broke since) must not fail the
	# wait by itself: the client walks again, finds no cycle and waits on.
	# (Before: DeadlockDetected at its next check-in.)
	my ($l, $a) = ('py10l', 'sq10a');
	my $p = python_holder($l, $a);
	ok(py_until($p, qr/holding/, 15), '10. the client holds L') or diag $p->{err};
	my $owner = py_owner($p);
	my $s = session($n1);
	sq($s, "SELECT redis_wlock('$a') > 0");
	py_go($p);
	my $wk = "$prefix:wait:{$owner}";
	my $v = '';
	wait_until(sub { $v = redis_cli($port, 'GET', $wk); $v =~ /^3 w / }, 5);
	like($v, qr/^3 w \S+ \Q$prefix:{$a}\E$/, '10. the client checked in: its wait key says it waits for A');
	redis_cli($port, 'SET', $wk, "!$v\n$owner w pg:nobody $prefix:{$a}", 'PX', '4000');
	ok(!py_until($p, qr/deadlock|granted/, 2.5),
		'10. a mark for a cycle that is not there fails nothing: the client keeps waiting')
	  or diag $p->{out};
	sq($s, "SELECT redis_unlock('$a')");
	ok(py_until($p, qr/granted/, 10), '10. and gets A once the session lets go')
	  or diag "$p->{out}$p->{err}";
	py_until($p, qr/released/, 10);
	$p->{h}->finish;
	$s->quit;
}

# ---- 4. no false positive: random names in one global order ----
{
	my $n2 = new_node('cl2', port => $port, preload => 1, lease => '10s',
		conf => "rwlock.key_prefix = 'shared'\ndeadlock_timeout = '200ms'\n");
	$n1->safe_psql('postgres', "ALTER SYSTEM SET deadlock_timeout = '200ms'; SELECT pg_reload_conf()");
	$_->safe_psql('postgres', 'SELECT redis_lock_stats_reset()') for ($n1, $n2);
	my $script = "$PostgreSQL::Test::Utils::tmp_check/random_order.sql";
	open(my $fh, '>', $script) or die $!;
	print $fh <<'SQL';
\set a random(1, 4)
\set b random(5, 8)
\set c random(9, 12)
\set m random(0, 1)
BEGIN;
SELECT CASE WHEN :m = 0 THEN redis_wlock_xact('g' || :a) ELSE redis_rlock_xact('g' || :a) END;
SELECT redis_wlock_xact('g' || :b);
SELECT CASE WHEN :m = 1 THEN redis_wlock_xact('g' || :c) ELSE redis_rlock_xact('g' || :c) END;
SELECT pg_sleep(0.005 * :m);
COMMIT;
SQL
	close $fh;
	# RW_DEADLOCK_RUN="clients-per-server seconds" for a longer run (issue
	# 29's target: 25 per server, 60 s)
	my ($clients, $secs) = split ' ', ($ENV{RW_DEADLOCK_RUN} // '10 20');
	pgbench_each([ $n1, $n2 ], $script, $clients, $secs, 50, '4.');
	my $dl = 0;
	my $waits = 0;
	for my $n ($n1, $n2)
	{
		my ($d, $w) = split /\|/, $n->safe_psql('postgres', 'SELECT sum(deadlocks), sum(waits) FROM redis_lock_stats');
		$dl += $d;
		$waits += $w;
	}
	is($dl, 0, '4. no deadlock reported');
	cmp_ok($waits, '>', 20, "4. though sessions waited ($waits waits)");
	$n2->stop;
}

$n1->stop;
done_testing();
