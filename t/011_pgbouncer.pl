# Through a real pgbouncer (SPEC 8, poolers).
#
# a) Session pooling, one server connection, server_reset_query = DISCARD
#    ALL: a client takes session-level holds and disconnects without
#    unlocking; the next client gets the same server backend, and must find
#    nothing held there, and the locks must be free for everybody (DISCARD
#    ALL releases session-level holds, as it releases advisory locks).
# b) Transaction pooling, two server connections, more clients (pgbench):
#    each transaction takes redis_wlock_xact (or the try form with a wait),
#    reads a counter and writes counter + 1 computed by the client; no
#    update may be lost, and nothing may stay held on any backend after.
# c) Transaction pooling, one server connection: a session-level lock
#    passes to the next client on the backend, as docs/failures.md says (as an
#    advisory lock would): use _xact locks through transaction pooling.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockBouncer;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('bouncer', port => $port, preload => 1, lease => '10s');
my $prefix = 'tap_bouncer';
note "Redis on port $port";

# --- a) session pooling: DISCARD ALL at client disconnect.
my $pb = pgbouncer_start($node, pool_mode => 'session', pool_size => 1);
note "pgbouncer (session pooling, pool size 1) on port $pb->{port}";

my $ca = bouncer_session($node, $pb);
my ($pid_a) = sq($ca, 'SELECT pg_backend_pid()');
my ($out, $err) = sq($ca, "SELECT redis_wlock('p') > 0, redis_rlock('q') >= 0");
is($out, 't|t', 'client A, through pgbouncer, holds the write lock p and the read lock q');
($out) = sq($ca, "SELECT string_agg(name || ':' || mode || ':' || level, ',' ORDER BY name) FROM redis_held_locks");
is($out, 'p:write:session,q:read:session', 'redis_held_locks shows both');
$ca->quit;    # without unlocking: pgbouncer runs DISCARD ALL on its backend
my $direct = session($node);
ok( defined wait_until(
		sub {
			(sq($direct, "SELECT query FROM pg_stat_activity WHERE pid = $pid_a"))[0] eq 'DISCARD ALL';
		},
		10),
	'pgbouncer ran DISCARD ALL on that backend when A disconnected');

my $cb = bouncer_session($node, $pb);
my ($pid_b) = sq($cb, 'SELECT pg_backend_pid()');
is($pid_b, $pid_a, "client B gets the same server backend (pid $pid_a)");
($out) = sq($cb, "SELECT count(*) FROM redis_held_locks");
is($out, '0', 'after DISCARD ALL the backend holds nothing (redis_held_locks is empty for B)');
is(lock_state($port, $prefix, 'p'), 'free', 'Redis has the write lock p free');
is(lock_state($port, $prefix, 'q'), 'free', 'Redis has the read lock q free');
($out) = sq($direct, "SELECT redis_try_wlock('p'), redis_try_wlock('q')");
is($out, 't|t', 'a direct session gets the write locks p and q at once');
sq($direct, 'SELECT redis_unlock_all()');
# Whatever the outcome above, leave nothing behind for part b.
sq($cb, 'SELECT redis_unlock_all()');
$cb->quit;

# DISCARD ALL by hand, without a pooler, for the record.
($out) = sq($direct, "SELECT redis_wlock('d') > 0, redis_wlock_xact('dx') > 0");
sq($direct, 'DISCARD ALL');
($out) = sq($direct, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'DISCARD ALL in a direct session releases its session-level holds');
is(lock_state($port, $prefix, 'd'), 'free', 'and Redis has the lock free');
sq($direct, 'SELECT redis_unlock_all()');
pgbouncer_stop($pb);

# --- b) transaction pooling: _xact locks across pooled backends.
my $clients = 8;
my $per_client = 150;
my $pt = pgbouncer_start($node, pool_mode => 'transaction', pool_size => 2);
note "pgbouncer (transaction pooling, pool size 2) on port $pt->{port}";
$node->safe_psql('postgres', q{
CREATE TABLE tcount (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO tcount VALUES (1, 0);
CREATE TABLE tlog (n bigint NOT NULL);
});
my $dir = $pt->{dir};
# The value written is computed from the one read (in pgbench, from the
# \gset variable), so only the Redis lock keeps two transactions apart.
open my $f, '>', "$dir/xact.sql" or die;
print $f <<'EOF';
BEGIN;
SELECT redis_wlock_xact('t') > 0 AS ok \gset
SELECT n AS cur FROM tcount WHERE id = 1 \gset
\sleep 1 ms
UPDATE tcount SET n = :cur + 1 WHERE id = 1;
INSERT INTO tlog VALUES (:cur + 1);
COMMIT;
EOF
close $f;
open $f, '>', "$dir/try_xact.sql" or die;
print $f <<'EOF';
BEGIN;
SELECT redis_try_wlock_xact('t', '20s') AS ok \gset
\if :ok
SELECT n AS cur FROM tcount WHERE id = 1 \gset
\sleep 1 ms
UPDATE tcount SET n = :cur + 1 WHERE id = 1;
INSERT INTO tlog VALUES (:cur + 1);
\endif
COMMIT;
EOF
close $f;
# A transaction that takes the lock and rolls back: released at abort.
open $f, '>', "$dir/rollback.sql" or die;
print $f <<'EOF';
BEGIN;
SELECT redis_wlock_xact('t') > 0 AS ok \gset
SELECT n AS cur FROM tcount WHERE id = 1 \gset
UPDATE tcount SET n = :cur + 1000000 WHERE id = 1;
ROLLBACK;
EOF
close $f;

my $t0 = time;
my ($stdout, $stderr);
my $ok = IPC::Run::run(
	[
		'pgbench', '-n', '-h', '127.0.0.1', '-p', $pt->{port},
		'-c', $clients, '-j', $clients, '-t', $per_client,
		'-f', "$dir/xact.sql\@4", '-f', "$dir/try_xact.sql\@2",
		'-f', "$dir/rollback.sql\@1", 'postgres'
	],
	'>', \$stdout, '2>', \$stderr,
	IPC::Run::timeout(60));
my $secs = time - $t0;
note $stdout;
ok($ok, sprintf('pgbench through pgbouncer (transaction pooling): %d clients x %d transactions, %.1f s',
		$clients, $per_client, $secs))
  or diag $stderr;
like($stdout, qr/number of transactions actually processed: @{[$clients * $per_client]}\//,
	'every transaction was processed');
unlike($stdout, qr/number of failed transactions: [1-9]/, 'none failed');
my ($n, $logged, $dups) = split /\|/, $node->safe_psql('postgres',
	'SELECT (SELECT n FROM tcount), (SELECT count(*) FROM tlog), '
	  . '(SELECT count(*) FROM (SELECT n FROM tlog GROUP BY n HAVING count(*) > 1) d)');
cmp_ok($logged, '>', 0, "$logged increments committed");
is($n, $logged, "no lost update: the counter ($n) equals the committed increments ($logged)");
is($dups, '0', 'no value was written twice');

# Nothing held anywhere after: the keeper's view of every backend, the
# backends of the pool one by one, Redis.
my $direct2 = session($node);
($out) = sq($direct2, 'SELECT count(*) FROM redis_locks');
is($out, '0', 'redis_locks: no backend holds anything');
# Two clients each in a transaction occupy both server connections of the
# pool at once.
my %seen;
my @pooled = map { bouncer_session($node, $pt) } 1 .. 2;
sq($_, 'BEGIN') for @pooled;
for my $s (@pooled)
{
	my ($row) = sq($s, "SELECT pg_backend_pid() || ':' || (SELECT count(*) FROM redis_held_locks)");
	my ($bpid, $cnt) = split /:/, $row // '';
	$seen{$bpid} = $cnt if defined $bpid && $bpid ne '';
}
for my $s (@pooled)
{
	sq($s, 'COMMIT');
	$s->quit;
}
is(scalar(keys %seen), 2, 'two clients in a transaction each get a pooled backend (' . join(', ', sort keys %seen) . ')');
is(join(',', map { "$_:$seen{$_}" } grep { $seen{$_} ne '0' } sort keys %seen), '',
	'redis_held_locks is empty on both');
is(lock_state($port, $prefix, 't'), 'free', 'Redis has the lock t free');
($out) = sq($direct2, "SELECT redis_try_wlock('t'), redis_unlock('t')");
is($out, 't|t', 'a direct session gets it at once');

pgbouncer_stop($pt);

# --- c) what docs/failures.md says of session-level locks through transaction
# pooling: the hold belongs to the backend, so the next client on it
# inherits it (and the keeper renews it for as long as the backend lives).
my $p1 = pgbouncer_start($node, pool_mode => 'transaction', pool_size => 1);
my $c1 = bouncer_session($node, $p1);
($out) = sq($c1, "SELECT redis_wlock('tp') > 0");
is($out, 't', 'transaction pooling: a client takes a session-level lock');
$c1->quit;    # no DISCARD ALL in transaction pooling
my $c2 = bouncer_session($node, $p1);
($out) = sq($c2, "SELECT string_agg(name || ':' || level, ',') FROM redis_held_locks");
is($out, 'tp:session', '... the next client on the backend inherits it (documented)');
is(lock_state($port, $prefix, 'tp'), 'write', '... and Redis still has it');
($out) = sq($c2, "SELECT redis_unlock('tp')");
is($out, 't', '... which that client can release');
$c2->quit;
pgbouncer_stop($p1);

$direct->quit;
$direct2->quit;
$node->stop;
redis_stop($port);
done_testing();
