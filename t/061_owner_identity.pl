# A process is named only when it is that process (issue 38, "A pid is
# taken for an owner"). A session's owner id carries its PGPROC number and
# a generation of that PGPROC, and the session registers the whole id in
# shared memory while it lives; views and functions name a pid only for an
# owner id registered by a live backend.
#  a) the owner id's format: pg:<system id>:<pid>:<procno>.<generation>:<random>;
#  b) a client whose owner id starts with "pg:<this server's id>:<a live
#     backend's pid>:<its procno>.<its generation>:" and holds a lock
#     another session waits for: redis_blocking_pids names nobody,
#     redis_blocking_owners names the client's owner id;
#  c) the same for a deadlock with that client: the 40P01 DETAIL names it
#     by its owner id, not as "process <pid>";
#  d) a session that exited with its releases unsent (Redis stopped): its
#     holds stay in redis_locks until the keeper releases them, with pid
#     NULL and lease_state 'releasing', not as 'held' under its old pid.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('ident', port => $port, preload => 1, lease => '30s',
	conf => "rwlock.command_timeout = '1s'\nrwlock.connect_timeout = '1s'\ndeadlock_timeout = '200ms'\n");
my $prefix = 'tap_ident';
ok(defined wait_until(sub { keeper_pid($node) ne '' }, 10), 'the keeper runs');
my $sysid = $node->safe_psql('postgres',
	'SELECT to_hex(system_identifier) FROM pg_control_system()');
my $acquire = "$FindBin::RealBin/../lua/acquire.lua";

# A client that takes a lock under an owner id of its choice.
# With $mark, a busy lock is waited for: the client's intent stays live.
sub forged_lock
{
	my ($name, $owner, $seq, $mark) = @_;
	return redis_cli($port, '--eval', $acquire, "$prefix:{$name}", "$prefix:{$name}:q",
		',', $owner, $seq // '1', 'w', '60000', defined $mark ? ($mark) : ());
}

# ---- a) the format ----
my $b = session($node);
sq($b, "SELECT redis_wlock('b0') > 0");
my $bpid = session_pid($b);
my $bowner = session_owner($b);
like($bowner, qr/^pg:$sysid:$bpid:\d+\.[0-9a-f]+:[0-9a-f]{8}$/,
	"a) the owner id is pg:<system id>:<pid>:<procno>.<generation>:<random> ($bowner)");
my ($out) = sq($b, "SELECT pid = pg_backend_pid(), lease_state FROM redis_locks WHERE name = 'b0'");
is($out, 't|held', 'a) redis_locks names the live holder');

# ---- b) a forged owner id holds a lock a session waits for ----
my ($stem) = $bowner =~ /^(pg:[0-9a-f]+:\d+:[\d.a-f]+:)/;
$stem //= "pg:$sysid:$bpid:";
my $forged = "${stem}deadbeef";
isnt($forged, $bowner, "b) a client takes an owner id that names backend $bpid ($forged)");
my $r = forged_lock('held_by_client', $forged);
like($r, qr/^\d+$/, 'b) and holds a write lock under it') or diag $r;
my $w = session($node);
my $wpid = session_pid($w);
sq_send($w, "SET lock_timeout = '10s'; SELECT redis_wlock('held_by_client') > 0");
ok(defined wait_until(sub {
	$node->safe_psql('postgres', "SELECT count(*) FROM redis_locks WHERE pid = $wpid AND NOT granted") eq '1';
}, 5), 'b) a session waits for it');
my $a = session($node);
($out) = sq($a, "SELECT redis_blocking_pids($wpid)");
is($out, '{}', "b) redis_blocking_pids does not name backend $bpid");
($out) = sq($a, "SELECT redis_blocking_owners($wpid)");
is($out, "{$forged}", 'b) redis_blocking_owners names the client');
redis_cli($port, 'DEL', "$prefix:{held_by_client}");
sq($b, "SELECT redis_unlock_all()");
redis_cli($port, 'PUBLISH', "$prefix:{held_by_client}", 'r');
my ($wout, $werr) = sq_wait($w, 15);
sq($w, 'RESET lock_timeout; SELECT redis_unlock_all()');
sq($b, "SELECT redis_wlock('b1') > 0");

# ---- c) a deadlock with that client ----
# One session holds c1 and waits for c2; the client holds c2 and waits for
# c1 (its wait key says so, protocol.md section 18). The victim is the
# greatest owner id of the cycle: the client takes the stem of the other
# session, whose owner id is the smaller, so that the session is failed.
my $wowner = session_owner($w);
my ($v, $opid, $oowner) = $bowner gt $wowner ? ($b, $wpid, $wowner) : ($w, $bpid, $bowner);
my ($ostem) = $oowner =~ /^(pg:[0-9a-f]+:\d+:[\d.a-f]+:)/;
my $forged2 = ($ostem // "pg:$sysid:$opid:") . '00000000';
sq($v, "SELECT redis_wlock('c1') > 0");
my $r2 = forged_lock('c2', $forged2);
like($r2, qr/^\d+$/, 'c) the client holds c2') or diag $r2;
forged_lock('c1', $forged2, '2', '60000');    # busy: it waits
redis_cli($port, 'SET', "$prefix:wait:{$forged2}", "3 w n1 $prefix:{c1}", 'PX', '60000');
# The client's waits go on: it tries again (renewing its intent) every
# 0.2 s, as a live client does; a walk acts on a cycle only once each member
# not of this server has renewed its intent (a sign of life, protocol.md 18).
sq_send($v, "SET lock_timeout = '10s'; SELECT redis_wlock('c2') > 0");
my $cseq = 3;
my $ctill = time + 15;
while (!sq_poll($v) && time < $ctill)
{
	forged_lock('c1', $forged2, $cseq++, '60000');
	sleep 0.2;
}
my ($cout, $cerr) = sq_wait($v, 1);
is(sqlstate($cerr), '40P01', 'c) the session is failed as the deadlock victim') or diag $cerr;
unlike($cerr, qr/[Pp]rocess $opid\b/, "c) the DETAIL does not name backend $opid");
like($cerr, qr/\Q$forged2\E/, 'c) it names the client by its owner id');
sq($v, 'RESET lock_timeout; SELECT redis_unlock_all()');
redis_cli($port, 'DEL', "$prefix:{c2}", "$prefix:wait:{$forged2}");

# ---- d) an exited session's holds ----
my $e = session($node);
sq($e, "SELECT redis_wlock('e1') > 0");
my $epid = session_pid($e);
my $eowner = session_owner($e);
for (split /\n/, redis_cli($port, 'CLIENT', 'LIST'))
{
	redis_cli($port, 'CLIENT', 'KILL', 'ID', $1) if /\bid=(\d+)\b.*\bname=rwlock:pg:$epid\b/;
}
redis_sigstop($port);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($epid)");
ok(defined wait_until(sub { backend_gone($node, $epid) }, 5), 'd) the session exited with Redis stopped');
($out) = $node->safe_psql('postgres',
	"SELECT coalesce(pid::text, 'NULL'), lease_state FROM redis_locks WHERE owner = '$eowner'");
is($out, 'NULL|releasing', 'd) its hold shows pid NULL, releasing');
redis_sigcont($port);
ok(defined wait_until(sub {
	$node->safe_psql('postgres', "SELECT count(*) FROM redis_locks WHERE owner = '$eowner'") eq '0';
}, 10), 'd) and goes once the keeper released it');

$_->quit for ($a, $b, $w);
$node->stop;
done_testing();
