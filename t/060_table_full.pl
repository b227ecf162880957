# The keeper's table full is told at the lock call (issue 38, "The keeper
# gives up what is moot": a session whose holds the keeper cannot take is
# told at the lock call, and the call fails, never a silent lease).
# rwlock.max_holds = 16: one session holds 16 locks, every slot taken.
#  a) a 17th lock, session level, by another session: 53400 "the table of
#     Redis lock holds is full", and Redis has nothing for it (the call
#     released what it had just taken); the session holds nothing;
#  b) the same at transaction level: the transaction fails, nothing held;
#  c) a lock the session already holds, stacked or upgraded, needs no new
#     slot and succeeds;
#  d) once a slot is free the same call succeeds, and is published.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $port = redis_start();
my $node = new_node('full', port => $port, preload => 1, lease => '30s',
	conf => "rwlock.max_holds = 16\n");
my $prefix = 'tap_full';
ok(defined wait_until(sub { keeper_pid($node) ne '' }, 10), 'the keeper runs');

my $a = session($node);
my $names = join(', ', map { "redis_rlock('f$_') >= 0" } 1 .. 16);
my ($out, $err) = sq($a, "SELECT $names");
is($out, join('|', ('t') x 16), 'a session holds 16 locks');
($out) = sq($a, 'SELECT count(*) FROM redis_locks');
is($out, '16', 'every slot of the table is taken');

# ---- a) session level ----
my $b = session($node);
($out, $err) = sq($b, "SELECT redis_wlock('x17')");
is(sqlstate($err), '53400', 'a) a 17th hold fails with 53400') or diag $err;
like($err, qr/the table of Redis lock holds is full/, 'a) saying the table is full');
like($err, qr/rwlock\.max_holds/, 'a) and what to raise');
is(lock_state($port, $prefix, 'x17'), 'free', 'a) Redis has nothing for it: released');
($out) = sq($b, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'a) the session holds nothing');
($out, $err) = sq($b, "SELECT redis_try_rlock('x18')");
is(sqlstate($err), '53400', 'a) a try form fails the same way') or diag $err;
is(lock_state($port, $prefix, 'x18'), 'free', 'a) and leaves nothing in Redis');

# ---- b) transaction level ----
($out, $err) = sq($b, "BEGIN; SELECT redis_wlock_xact('x19'); COMMIT");
is(sqlstate($err), '53400', 'b) a transaction-level hold fails the same way') or diag $err;
is(lock_state($port, $prefix, 'x19'), 'free', 'b) and leaves nothing in Redis');
($out) = sq($b, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'b) the session holds nothing');

# ---- c) no new slot needed ----
($out, $err) = sq($a, "SELECT redis_rlock('f1') >= 0, redis_wlock('f2') > 0");
is($out, 't|t', 'c) a stacked hold and an upgrade need no new slot') or diag $err;
unlike($err, qr/full/, 'c) no word of a full table');

# ---- d) a slot freed ----
sq($a, "SELECT redis_unlock('f3')");
($out, $err) = sq($b, "SELECT redis_wlock('x17') > 0");
is($out, 't', 'd) with a slot free the lock is taken') or diag $err;
($out) = sq($b, "SELECT count(*) FROM redis_locks WHERE name = 'x17' AND pid = pg_backend_pid()");
is($out, '1', 'd) and published');
sq($b, 'SELECT redis_unlock_all()');
sq($a, 'SELECT redis_unlock_all()');
$a->quit;
$b->quit;
$node->stop;
done_testing();
