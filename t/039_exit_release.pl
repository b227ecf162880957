# A session's exit whose releases cannot get through (SPEC 2.2: session end
# releases every hold at once; SPEC 8: exit spends at most 0.5 s on Redis).
# The backend's connection was dropped and Redis is stopped when the session
# is terminated: the exit cannot connect again within its budget. The holds
# are then left to the keeper, which releases them on the owner's behalf as
# soon as Redis answers, and logs it; before, they stayed in Redis until
# their leases ran out (the random API test's EXITLATE).
#  a) one Redis: a write and a read hold of a terminated session are gone
#     within 3 s of Redis answering again (lease 30 s), each logged once;
#     a waiter gets the lock;
#  b) a normal exit (Redis up) leaves nothing to the keeper: no such log;
#  c) quorum mode (3 masters, two of them stopped): the keeper releases the
#     hold on a majority once they answer again;
#  d) the Redis never comes back (issue 38): rwlock.max_holds = 16, a
#     terminated session left 12 holds on a Redis stopped for good. Once
#     their lease has certainly run out the keeper frees their slots
#     without Redis, saying why once a hold (and once that it could not
#     release it), and a new session takes 12 holds on another Redis with
#     every one published (no "table ... is full");
#  e) a release Redis refuses (the lock's key holds a string: WRONGTYPE) is
#     logged once with Redis's answer, and given up once the lease has run
#     out;
#  f) a hold the keeper found lost, left to it at exit, is freed at once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('exitrel', port => $port, preload => 1, lease => '30s',
	conf => "rwlock.command_timeout = '1s'\nrwlock.connect_timeout = '1s'\n");
my $prefix = 'tap_exitrel';
ok(defined wait_until(sub { keeper_pid($node) ne '' }, 10), 'the keeper runs');

# The Redis client id of a backend's connection (CLIENT SETNAME rwlock:pg:<pid>).
sub client_id_of
{
	my ($pid, $on) = @_;
	for (split /\n/, redis_cli($on // $port, 'CLIENT', 'LIST'))
	{
		return $1 if /\bid=(\d+)\b.*\bname=rwlock:pg:$pid\b/;
	}
	return undef;
}

# ---- a) the exit cannot reach Redis ----
{
	my $s = session($node);
	my ($out) = sq($s, "SELECT redis_wlock('w1') > 0, redis_rlock('r1') >= 0");
	is($out, 't|t', 'a) the session holds w1 (write) and r1 (read)');
	my $pid = session_pid($s);
	my $owner = session_owner($s);
	my $id = client_id_of($pid);
	ok(defined $id, "a) its Redis connection is client $id");
	redis_cli($port, 'CLIENT', 'KILL', 'ID', $id);
	redis_sigstop($port);
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(defined wait_until(sub { backend_gone($node, $pid) }, 5), 'a) the backend exited within 5 s with Redis stopped');
	sleep 0.5;
	redis_sigcont($port);
	my $t0 = time;
	my $freed = wait_until(sub {
		redis_mode_of($port, $prefix, 'w1', $owner) eq '' && redis_mode_of($port, $prefix, 'r1', $owner) eq '';
	}, 20);
	ok(defined $freed && time - $t0 < 3.0,
		sprintf('a) both holds gone %.2f s after Redis answered again (lease 30 s)', time - $t0));
	my $w = session($node);
	my ($got) = sq($w, "SET lock_timeout = '5s'; SELECT redis_wlock('w1') > 0, redis_wlock('r1') > 0");
	is($got, 't|t', 'a) another session takes both locks');
	sq($w, 'SELECT redis_unlock_all()');
	$w->quit;
	my $log = slurp_file($node->logfile);
	my @lines = $log =~ /rwlock keeper released Redis lock "(\w+)" of process $pid, which exited before its own release got through/g;
	is_deeply([ sort @lines ], [ 'r1', 'w1' ], 'a) the keeper logs each release it made, once');
}

# ---- b) a normal exit leaves nothing to the keeper ----
{
	my $s = session($node);
	my ($out) = sq($s, "SELECT redis_wlock('w2') > 0");
	my $pid = session_pid($s);
	$s->quit;
	ok(defined wait_until(sub { lock_state($port, $prefix, 'w2') eq 'free' }, 3), 'b) a normal exit releases at once');
	sleep 1;
	unlike(slurp_file($node->logfile), qr/released Redis lock "w2"/, 'b) the keeper released nothing');
}

# ---- c) quorum mode ----
{
	my @ports = quorum_start(3);
	# Masters that persist every write count at once, and the lease is not
	# capped below 30 s: a hold left behind would stay 30 s.
	for my $p (@ports)
	{
		redis_cli($p, 'CONFIG', 'SET', 'appendonly', 'yes');
		redis_cli($p, 'CONFIG', 'SET', 'appendfsync', 'always');
	}
	my $q = quorum_node('exitq', '30s', 30, @ports);
	ok(defined wait_until(sub { keeper_pid($q) ne '' }, 10), 'c) the keeper runs');
	my $s = session($q);
	my ($out) = sq($s, "SELECT redis_wlock('qw') > 0");
	is($out, 't', 'c) the session holds qw on the quorum');
	my $pid = session_pid($s);
	my $owner = session_owner($s);
	redis_cli($_, 'CLIENT', 'KILL', 'ID', client_id_of($pid, $_)) for @ports;
	redis_sigstop($_) for @ports[0, 1];
	$q->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(defined wait_until(sub { backend_gone($q, $pid) }, 5), 'c) the backend exited with two masters stopped');
	sleep 0.5;
	redis_sigcont($_) for @ports[0, 1];
	my $t0 = time;
	my $freed = wait_until(sub {
		!grep { redis_cli($_, 'HGET', "tap_exitq:{qw}", 'w') eq $owner } @ports;
	}, 20);
	ok(defined $freed && time - $t0 < 4.0,
		sprintf('c) the hold gone from every master %.2f s after they answered again (lease 30 s)', time - $t0));
	like(slurp_file($q->logfile), qr/rwlock keeper released Redis lock "qw" of process $pid/, 'c) logged');
	$q->stop;
}

# ---- d) a Redis that never comes back ----
{
	my $gone = redis_start();
	my $live = redis_start();
	my $m = new_node('exitgone', port => $gone, preload => 1, lease => '2s',
		conf => "rwlock.max_holds = 16\nrwlock.command_timeout = '1s'\nrwlock.connect_timeout = '1s'\n");
	ok(defined wait_until(sub { keeper_pid($m) ne '' }, 10), 'd) the keeper runs');
	my $sa = session($m);
	my $names = join(', ', map { "redis_wlock('g$_') > 0" } 1 .. 12);
	my ($out) = sq($sa, "SELECT $names");
	is($out, join('|', ('t') x 12), 'd) a session holds 12 locks on a Redis');
	my $pid = session_pid($sa);
	# After the exit its rows show pid NULL (releasing): found by owner id.
	my $owner = session_owner($sa);
	($out) = sq($sa, "SELECT count(*) FROM redis_locks WHERE pid = $pid");
	is($out, '12', 'd) all 12 are published');
	redis_cli($gone, 'CLIENT', 'KILL', 'ID', client_id_of($pid, $gone));
	redis_stop($gone);
	$m->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	my $t0 = time;
	ok(defined wait_until(sub { backend_gone($m, $pid) }, 5), 'd) the session exited, its Redis stopped for good');
	my $freed = wait_until(sub {
		$m->safe_psql('postgres', "SELECT count(*) FROM redis_locks WHERE owner = '$owner'") eq '0';
	}, 15);
	ok(defined $freed, sprintf('d) its 12 slots are free %.1f s after the exit (lease 2 s)', time - $t0));
	my $log = slurp_file($m->logfile);
	my $given = () = $log =~ /rwlock keeper gave up the release of Redis lock "g\d+" of process $pid/g;
	is($given, 12, 'd) each given up, logged once');
	like($log, qr/rwlock keeper gave up the release of Redis lock "g\d+" of process $pid at redis:\/\/127\.0\.0\.1:$gone\/0: its lease has run out/,
		'd) saying why');
	my $failed = () = $log =~ /rwlock keeper could not release Redis lock "g\d+" of process $pid/g;
	is($failed, 12, 'd) that it could not release each was logged once too');
	my $sb = session($m);
	sq($sb, "SET rwlock.redis_url = 'redis://127.0.0.1:$live/0'");
	my $err;
	($out, $err) = sq($sb, "SELECT $names");
	is($out, join('|', ('t') x 12), 'd) a new session takes 12 locks on another Redis');
	unlike($err, qr/table of Redis lock holds is full/, 'd) with no "table is full"') or diag $err;
	($out) = sq($sb, "SELECT count(*) FROM redis_locks WHERE pid = " . session_pid($sb));
	is($out, '12', 'd) every one published for the keeper');
	sq($sb, 'SELECT redis_unlock_all()');
	$sb->quit;
	diag "d) $_" for $log =~ /^.*rwlock keeper (?:could not release|gave up the release of) Redis lock "g1" .*\n(?:.*(?:DETAIL|HINT):.*\n)*/mg;

	# e) A release Redis refuses: the lock's key holds a string (WRONGTYPE).
	# Logged once, with Redis's answer; given up once the lease has run out.
	my $sc = session($m);
	sq($sc, "SET rwlock.redis_url = 'redis://127.0.0.1:$live/0'");
	($out) = sq($sc, "SELECT redis_wlock('wt') > 0");
	is($out, 't', 'e) a session holds wt');
	$pid = session_pid($sc);
	$owner = session_owner($sc);
	redis_cli($live, 'CLIENT', 'KILL', 'ID', client_id_of($pid, $live));
	redis_cli($live, 'SET', 'tap_exitgone:{wt}', 'not a hash');
	redis_sigstop($live);
	$m->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(defined wait_until(sub { backend_gone($m, $pid) }, 5), 'e) the session exited, its release not sent');
	redis_sigcont($live);
	$t0 = time;
	$freed = wait_until(sub {
		$m->safe_psql('postgres', "SELECT count(*) FROM redis_locks WHERE owner = '$owner'") eq '0';
	}, 15);
	ok(defined $freed, sprintf('e) its slot is free %.1f s after Redis answered again (lease 2 s)', time - $t0));
	$log = slurp_file($m->logfile);
	$failed = () = $log =~ /rwlock keeper could not release Redis lock "wt" of process $pid/g;
	is($failed, 1, 'e) that it could not release it logged once, though tried again');
	like($log, qr/rwlock keeper could not release Redis lock "wt" of process $pid at [^\n]*\n[^\n]*DETAIL:  [^\n]*WRONGTYPE/,
		"e) with Redis's answer");
	$given = () = $log =~ /rwlock keeper gave up the release of Redis lock "wt" of process $pid at [^\n]*: its lease has run out/g;
	is($given, 1, 'e) given up once its lease ran out, logged once');
	diag "e) $_" for $log =~ /^.*rwlock keeper (?:could not release|gave up the release of) Redis lock "wt" .*\n(?:.*(?:DETAIL|HINT):.*\n)*/mg;
	$sc->quit;

	# f) A hold the keeper found lost (its keys deleted), left to it at exit:
	# there is nothing to release, the slot is freed at once.
	my $sf = session($m);
	sq($sf, "SET rwlock.redis_url = 'redis://127.0.0.1:$live/0'");
	($out) = sq($sf, "SELECT redis_wlock('lx') > 0");
	is($out, 't', 'f) a session holds lx');
	$pid = session_pid($sf);
	$owner = session_owner($sf);
	redis_cli($live, 'DEL', 'tap_exitgone:{lx}');
	ok(defined wait_until(sub {
		$m->safe_psql('postgres', "SELECT lease_state FROM redis_locks WHERE pid = $pid") eq 'lost';
	}, 5), 'f) the keeper found it lost');
	redis_cli($live, 'CLIENT', 'KILL', 'ID', client_id_of($pid, $live));
	redis_sigstop($live);
	$m->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(defined wait_until(sub { backend_gone($m, $pid) }, 5), 'f) the session exited, its release not sent');
	$freed = wait_until(sub {
		$m->safe_psql('postgres', "SELECT count(*) FROM redis_locks WHERE owner = '$owner'") eq '0';
	}, 5);
	ok(defined $freed, 'f) its slot is free within 5 s, Redis still frozen (lease 2 s)');
	like(slurp_file($m->logfile), qr/rwlock keeper gave up the release of Redis lock "lx" of process $pid at [^\n]*: it was found lost/,
		'f) logged');
	redis_sigcont($live);
	$sf->quit;
	$m->stop;
	redis_stop($live);
}

$node->stop;
done_testing();
