# Several names at once (issue 40, SPEC 16) where a single server's
# regress test cannot go: all or none when the keeper's table is full, when
# Redis is gone, and over a Redis Cluster (names on every master, taken
# name by name in the canonical order).
#  a) rwlock.max_holds = 16 (preloaded): one call of 20 names fails with
#     53400 at the 17th in the canonical order, holds nothing, and leaves
#     every name free in Redis, at both levels; 10 names fit, each
#     published (a row of redis_locks);
#  b) Redis stopped: a call fails with class 08 and holds nothing; Redis
#     back, the same call takes every name;
#  c) a multi-name call waiting for its second name (the keeper preloaded):
#     redis_locks shows the first granted and the second waited for,
#     redis_blocking_pids names the holder; a cancel (57014) leaves the
#     first free and the waiter holding nothing;
#  e) redis_unlock(text[]): a name whose hash Redis lost is false, with
#     the WARNING that it was lost, the others true and free; with Redis
#     stopped every name is false with "could not release" and let go by
#     the session (the releases stay owed: sent once Redis is back, before
#     a name is taken again);
#  d) a Cluster of three masters: 12 names, on every master, in one call;
#     another session's try of {zz1, c5, zz2} while c5 is held returns
#     false and leaves zz1 and zz2 free; once c5 is let go the same try
#     takes all three; with c7's slot moved to another master,
#     redis_unlock(text[]) of the eleven held answers true for each (the
#     redirected release sent again where the slot is now).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $port = redis_start();
my $node = new_node('multi', port => $port, preload => 1, lease => '30s',
	conf => "rwlock.max_holds = 16\nrwlock.connect_timeout = '1s'\n");
my $prefix = 'tap_multi';
ok(defined wait_until(sub { keeper_pid($node) ne '' }, 10), 'the keeper runs');
my $a = session($node);
my $twenty = q{array(SELECT 'f' || g FROM generate_series(1, 20) g)};

# ---- a) the keeper's table full ----
my ($out, $err) = sq($a, "SELECT redis_wlock($twenty)");
is(sqlstate($err), '53400', 'a) 20 names with 16 slots: 53400') or diag $err;
# canonical order: f1, f10 .. f19, f2, f20, f3, f4, f5, then f6
like($err, qr/Redis lock "f6" was granted and given back/,
	'a) at the 17th name in the canonical order');
($out) = sq($a, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'a) the session holds nothing');
is(join(',', map { lock_state($port, $prefix, "f$_") } 1 .. 20), join(',', ('free') x 20),
	'a) every name is free in Redis');
($out, $err) = sq($a, "BEGIN; SELECT redis_rlock_xact($twenty); COMMIT");
is(sqlstate($err), '53400', 'a) the same at transaction level') or diag $err;
is(join(',', map { lock_state($port, $prefix, "f$_") } 1 .. 20), join(',', ('free') x 20),
	'a) and every name is free');
($out, $err) = sq($a,
	q{SELECT cardinality(redis_wlock(array(SELECT 'f' || g FROM generate_series(1, 10) g)))});
is($out, '10', 'a) 10 names fit') or diag $err;
($out) = sq($a, 'SELECT count(*) FROM redis_locks WHERE pid = pg_backend_pid()');
is($out, '10', 'a) each published');
($out) = sq($a, 'SELECT redis_unlock_all()');
is($out, '10', 'a) and let go');

# ---- b) Redis gone ----
redis_stop($port);
($out, $err) = sq($a, "SELECT redis_wlock(ARRAY['d1', 'd2', 'd3'])");
like(sqlstate($err), qr/^08/, 'b) Redis stopped: class 08') or diag $err;
($out) = sq($a, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'b) nothing held');
redis_start($port);
($out, $err) = sq($a, "SELECT cardinality(redis_wlock(ARRAY['d1', 'd2', 'd3']))");
is($out, '3', 'b) Redis back: every name taken') or diag $err;
is(join(',', map { lock_state($port, $prefix, "d$_") } 1 .. 3), 'write,write,write',
	'b) Redis has them');
sq($a, 'SELECT redis_unlock_all()');

# ---- c) a wait, seen ----
my $b = session($node);
my $bpid = session_pid($b);
sq($a, "SELECT redis_wlock('w2')");
sq_send($b, "SELECT redis_wlock(ARRAY['w2', 'w1'])");
ok(defined wait_until(sub {
	(sq($a, "SELECT count(*) FROM redis_locks WHERE pid = $bpid AND NOT granted"))[0] eq '1' }, 10),
	'c) the waiter shows in redis_locks');
($out) = sq($a, "SELECT string_agg(name || ':' || mode || ':' || granted, ',' ORDER BY name) "
	  . "FROM redis_locks WHERE pid = $bpid");
is($out, 'w1:write:true,w2:write:false',
	'c) holding w1 (granted), waiting for w2, the name after it');
($out) = sq($a, "SELECT redis_blocking_pids($bpid) = ARRAY[pg_backend_pid()]");
is($out, 't', 'c) redis_blocking_pids names the holder');
sq($a, "SELECT pg_cancel_backend($bpid)");
my ($bout, $berr) = sq_wait($b, 10);
is(sqlstate($berr), '57014', 'c) cancelled: 57014') or diag $berr;
ok(defined wait_until(sub { lock_state($port, $prefix, 'w1') eq 'free' }, 5),
	'c) and w1, taken before the wait, is free again');
($out) = sq($b, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'c) the waiter holds nothing');
sq($a, 'SELECT redis_unlock_all()');
$b->quit;

# ---- e) redis_unlock(text[]) meeting a lost hold, and Redis gone ----
($out, $err) = sq($a, "SELECT cardinality(redis_wlock(ARRAY['u1', 'u2', 'u3']))");
is($out, '3', 'e) three names taken') or diag $err;
redis_cli($port, 'DEL', "$prefix:{u2}");
($out, $err) = sq($a, "SELECT redis_unlock(ARRAY['u3', 'u2', 'u1'])");
is($out, '{t,f,t}', 'e) the name Redis lost is false, the others true') or diag $err;
like($err, qr/Redis lock "u2" was lost/, 'e) with the WARNING that u2 was lost');
is(join(',', map { lock_state($port, $prefix, "u$_") } 1 .. 3), 'free,free,free',
	'e) every name is free');
($out) = sq($a, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'e) the session holds none');
($out, $err) = sq($a, "SELECT cardinality(redis_wlock(ARRAY['u1', 'u2']))");
is($out, '2', 'e) taken again') or diag $err;
redis_stop($port);
($out, $err) = sq($a, "SELECT redis_unlock(ARRAY['u2', 'u1'])");
is($out, '{f,f}', 'e) Redis stopped: both false') or diag $err;
like($err, qr/could not release Redis lock "u2".*could not release Redis lock "u1"/s,
	'e) each with its WARNING, in the reverse canonical order');
($out) = sq($a, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'e) the session holds none');
redis_start($port);
($out, $err) = sq($a, "SELECT cardinality(redis_wlock(ARRAY['u1', 'u2']))");
is($out, '2', 'e) Redis back: taken again') or diag $err;
($out) = sq($a, 'SELECT redis_unlock(ARRAY[\'u1\', \'u2\'])');
is($out, '{t,t}', 'e) and let go');
$a->quit;
$node->stop;

# ---- d) a Redis Cluster ----
my $c = cluster_start(masters => 3, replicas => 0);
my $cnode = new_node('multic', port => $c->{ports}[0], lease => '30s',
	conf => "rwlock.redis_url = '" . cluster_url($c) . "'\n");
my $cprefix = 'tap_multic';
my @names = map { "c$_" } 1 .. 12;
my %masters = map { cluster_key_node($c, "$cprefix:{$_}") => 1 } @names;
is(scalar keys %masters, 3, 'd) the 12 names are on all three masters');
my $s = session($cnode);
my $o = session($cnode);
($out, $err) = sq($s, 'SELECT cardinality(redis_wlock(ARRAY['
	  . join(', ', map { "'$_'" } @names) . ']))');
is($out, '12', 'd) 12 names in one call') or diag $err;
($out) = sq($s, "SELECT count(*) FROM redis_held_locks WHERE mode = 'write'");
is($out, '12', 'd) each a hold of its own');
($out, $err) = sq($o, "SELECT redis_try_wlock(ARRAY['zz1', 'c5', 'zz2'])");
is($out, 'f', 'd) a try of {zz1, c5, zz2} while c5 is held: false') or diag $err;
($out) = sq($o, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'd) holding nothing');
($out) = sq($s, "SELECT (redis_lock_info('zz1')).state, (redis_lock_info('zz2')).state");
is($out, 'free|free', 'd) zz1 and zz2 are free');
sq($s, "SELECT redis_unlock('c5')");
($out, $err) = sq($o, "SELECT redis_try_wlock(ARRAY['zz1', 'c5', 'zz2'])");
is($out, 't', 'd) with c5 let go, the try takes all three') or diag $err;
($out) = sq($o, 'SELECT redis_unlock_all()');
is($out, '3', 'd) three holds');
# c7's slot moves to another master: the release the session sends where
# it was is redirected, and sent again where it is now, in the same call
my $src7 = cluster_key_node($c, "$cprefix:{c7}");
my ($dst7) = grep { $_ != $src7 } cluster_masters($c);
cluster_move_slot(key_slot("$cprefix:{c7}"), $src7, $dst7, 0,
	grep { $_ != $src7 && $_ != $dst7 } cluster_masters($c));
my @eleven = grep { $_ ne 'c5' } @names;
($out, $err) = sq($s, 'SELECT redis_unlock(ARRAY[' . join(', ', map { "'$_'" } @eleven) . '])');
is($out, '{' . join(',', ('t') x 11) . '}',
	'd) redis_unlock(text[]) lets go of the eleven, c7 after its slot moved') or diag $err;
unlike($err, qr/could not release/, 'd) no release failed');
is(lock_state($dst7, $cprefix, 'c7'), 'free', 'd) c7 is free where its slot is now');
($out) = sq($s, 'SELECT redis_unlock_all()');
is($out, '0', 'd) nothing left');
$s->quit;
$o->quit;
$cnode->stop;
done_testing();
