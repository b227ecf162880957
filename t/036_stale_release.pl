# A command cut off in flight never runs late over a newer hold (SPEC 8: "A
# hold is never shared by mistake"; F4 of the model check). A release that
# times out is owed and sent again, on a new connection, before the name is
# taken again; if Redis ran the old connection's copy later (its bytes
# delayed in the network, a partition that heals, a proxy), it would free
# the new hold: the session would believe it holds a lock that another
# session is then granted. Protocol 3 makes the late copy stale by itself
# (docs/protocol.md 4.1): the release sent again and the new acquisition
# carry newer sequence numbers of the owner's, so Redis answers the old
# copy RWLOCK_STALE and changes nothing. Nothing is killed (no CLIENT ID,
# no CLIENT KILL): the old connection stays open and its bytes do reach
# Redis. The session's connection goes through a proxy (t/holdproxy.py)
# that holds back the bytes of the connections open at the moment it is
# told to, delivers them to Redis on the same upstream connections later,
# after the session gave up on them, and writes down what Redis answers
# them:
#
# 1. redis_unlock times out (held back); redis_wlock of the name again, on
#    a new connection; then the held-back release reaches Redis, and is
#    answered RWLOCK_STALE. The new hold stands: Redis still has the
#    session as writer, and another session's redis_try_wlock fails.
# 2. The same for a cut-off acquisition (a liveness matter): redis_try_wlock
#    times out (held back), a release is owed; the session reads the name
#    and lets go of it; then the held-back acquisition reaches Redis, is
#    answered RWLOCK_STALE, and grants no write hold nobody knows of, which
#    would keep another session out for a lease.
# 3. Quorum mode: the same as 1 on one member (reached through the proxy)
#    of three: the release times out there only (the others confirm it), is
#    owed for that member and sent again by the next acquisition; the
#    held-back copy is stale there and does not free that member's new
#    hold.
# Each case runs as Redis's default user (every right), then as `noid`,
# the user docs/connecting.md's ACL SETUSER line makes (no right over other
# clients: no CLIENT ID, no CLIENT KILL; for quorum mode also +info, which
# it needs to read each master's uptime).
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
my @q = quorum_start(3);
my $qstarted = time;
my @proxies;

# A proxy in front of the Redis on $up: (its port, its control directory).
sub proxy_start
{
	my ($up) = @_;
	my $pport;
	for my $p (6390 .. 6399)
	{
		next unless RwlockTest::port_free($p);
		$pport = $p;
		last;
	}
	die "no free port for the proxy" unless $pport;
	my $ctl = PostgreSQL::Test::Utils::tempdir();
	push @proxies, IPC::Run::start([ 'python3', "$FindBin::RealBin/holdproxy.py",
			$pport, $up, $ctl ], '>', \my $pout, '2>', \my $perr);
	ok(wait_until(sub { -e "$ctl/ready" }, 10), "a proxy listens on $pport");
	return ($pport, $ctl);
}
my ($pport, $ctl) = proxy_start($port);
my ($qpport, $qctl) = proxy_start($q[0]);

my $prefix = 'tap_stale';
# A quorum's masters count once up for rwlock.quorum_max_lease (part 3).
my $node = new_node('stale', port => $port, lease => '30s',
	conf => "rwlock.quorum_max_lease = '5s'\n");
note "Redis on port $port, the proxy on $pport";

my $s1 = session($node);
my $s2 = session($node);
my $s3 = session($node);

# Tell a proxy one thing, and wait until it has acted on it.
sub proxy_do
{
	my ($what, $dir) = @_;
	$dir //= $ctl;
	open my $f, '>', "$dir/$what" or die "$dir/$what: $!";
	close $f;
	ok(wait_until(sub { !-e "$dir/$what" }, 10), "the proxy did $what");
}

# Wait until a proxy has written down a late answer matching $re.
sub late_answer
{
	my ($dir, $re, $what) = @_;
	ok(wait_until(sub { -e "$dir/late" && slurp_file("$dir/late") =~ $re }, 2),
		$what) or diag(-e "$dir/late" ? slurp_file("$dir/late") : 'no late answer');
	unlink "$dir/late";
}

# docs/connecting.md's line, for this test's key prefix: user noid.
# (tools/acl_line.py reads it)
my @line = acl_setuser_args(user => 'noid', prefix => $prefix, password => 'pw');
is("@line[0 .. 2]", 'ACL SETUSER noid', "docs/connecting.md's ACL SETUSER line");
unlike("@line", qr/\+client\|(id|kill)|\+@(all|admin|dangerous)/,
	'... grants no right over other clients');
is(redis_cli($port, @line), 'OK', 'user noid on the single Redis');
is(redis_cli($_, @line, '+info'), 'OK', "user noid (and +info) on member $_")
  for @q;

sleep 6 - (time - $qstarted) if time - $qstarted < 6;

for my $user ('default', 'noid')
{
	my $cred = $user eq 'noid' ? 'noid:pw@' : '';
	my ($la, $lb, $qn) = map { "$_-$user" } qw(a b q);
	note "---- as Redis user $user";
	sq($s1, "SET rwlock.redis_url = 'redis://${cred}127.0.0.1:$pport/0'");
	sq($s2, "SET rwlock.redis_url = 'redis://${cred}127.0.0.1:$port/0'");
	sq($s3, "SET rwlock.redis_url = 'redis://${cred}127.0.0.1:$qpport/0 "
		  . "redis://${cred}127.0.0.1:$q[1]/0 redis://${cred}127.0.0.1:$q[2]/0'");

	# 1. A release that runs late.
	my ($out, $err) = sq($s1, "SELECT redis_wlock('$la') > 0");
	is($out, 't', "$user: session 1 holds $la through the proxy") or diag($err);
	my $owner = session_owner($s1);
	proxy_do('hold');
	($out, $err) = sq($s1,
		"SET rwlock.command_timeout = '200ms'; SELECT redis_unlock('$la'); RESET rwlock.command_timeout");
	note "redis_unlock held back: $out / $err";
	like($err, qr/could not release Redis lock "\Q$la\E"/,
		"$user: the release timed out: it is owed");
	is(redis_cli($port, 'HGET', "$prefix:{$la}", 'w'), $owner,
		'Redis has not run it (the proxy holds it)');
	($out, $err) = sq($s1, "SELECT redis_wlock('$la') > 0");
	is($out, 't', "$user: session 1 takes $la again, on a new connection");
	is(redis_cli($port, 'HGET', "$prefix:{$la}", 'w'), $owner, 'Redis has session 1 as writer');
	proxy_do('flush');
	sleep 0.5;
	is(redis_cli($port, 'HGET', "$prefix:{$la}", 'w'), $owner,
		"$user: the held-back release reached Redis late: the new hold stands");
	late_answer($ctl, qr/^-RWLOCK_STALE \Q$prefix:{$la}\E request \d+ of \Q$owner\E/m,
		'... it was stale');
	($out, $err) = sq($s2, "SELECT redis_try_wlock('$la')");
	is($out, 'f', "$user: session 2 cannot take $la while session 1 holds it");
	($out) = sq($s1, "SELECT redis_unlock('$la')");
	is($out, 't', "$user: session 1 lets go of $la");

	# 2. An acquisition that runs late.
	proxy_do('hold');
	($out, $err) = sq($s1,
		"SET rwlock.command_timeout = '200ms'; SELECT redis_try_wlock('$lb'); RESET rwlock.command_timeout");
	note "redis_try_wlock held back: $out / $err";
	like($err, qr/ERROR/, "$user: the acquisition timed out");
	# The owed release goes ahead of session 1's next call of b.
	($out, $err) = sq($s1, "SELECT redis_try_rlock('$lb')");
	is($out, 't', "$user: session 1 reads $lb, on a new connection");
	($out) = sq($s1, "SELECT redis_unlock('$lb')");
	is($out, 't', "$user: session 1 lets go of $lb");
	proxy_do('flush');
	sleep 0.5;
	my $w = redis_cli($port, 'HGET', "$prefix:{$lb}", 'w');
	isnt($w, $owner, "$user: the held-back acquisition reached Redis late: it granted nothing");
	late_answer($ctl, qr/^-RWLOCK_STALE \Q$prefix:{$lb}\E request \d+ of \Q$owner\E/m,
		'... it was stale');
	($out) = sq($s2, "SELECT redis_try_wlock('$lb')");
	is($out, 't', "$user: session 2 takes $lb");
	($out) = sq($s2, "SELECT redis_unlock('$lb')");
	is($out, 't', "$user: session 2 lets go of $lb");
	my ($bw, $br) = redis_holders($port, $prefix, $lb);
	is("$bw/@$br", '/', "$user: $lb is free in Redis");

	# 3. Quorum mode: a release that runs late on one member.
	($out, $err) = sq($s3, "SELECT redis_wlock('$qn') > 0");
	is($out, 't', "$user: quorum: session 3 holds $qn") or diag($err);
	my $owner3 = session_owner($s3);
	is(quorum_field($q[0], $prefix, $qn, 'w'), $owner3, '... on the proxied member too');
	proxy_do('hold', $qctl);
	($out, $err) = sq($s3,
		"SET rwlock.command_timeout = '200ms'; SELECT redis_unlock('$qn'); RESET rwlock.command_timeout");
	note "quorum redis_unlock, one member held back: $out / $err";
	is(quorum_field($q[1], $prefix, $qn, 'w'), '', '... released on the others');
	is(quorum_field($q[0], $prefix, $qn, 'w'), $owner3,
		'... not on the held-back member');
	sleep 1.5;    # a member that timed out is left alone 1 s (quorum.c)
	($out, $err) = sq($s3, "SELECT redis_wlock('$qn') > 0");
	is($out, 't', "$user: session 3 takes $qn again") or diag($err);
	proxy_do('flush', $qctl);
	sleep 0.5;
	is(quorum_field($q[0], $prefix, $qn, 'w'), $owner3,
		"$user: the held-back release reached the member late: its new hold stands");
	late_answer($qctl, qr/^-RWLOCK_STALE \Q$prefix:{$qn}\E request \d+ of \Q$owner3\E/m,
		'... it was stale');
	($out) = sq($s3, "SELECT redis_unlock('$qn')");
	is($out, 't', "$user: session 3 lets go of $qn");
	is(join('/', map { quorum_field($_, $prefix, $qn, 'w') } @q), '//',
		"$user: $qn is free on every member");
}

# The doc's line alone (no +info) on a quorum: a member's uptime is unknown,
# so it counts only once its connection is as old as a restart must be: the
# error says so, and names the right to grant.
my @noinfo = acl_setuser_args(user => 'noinfo', prefix => $prefix, password => 'pw');
is(redis_cli($_, @noinfo), 'OK', "user noinfo (no +info) on member $_") for @q;
sq($s3, "SET rwlock.redis_url = 'redis://noinfo:pw\@127.0.0.1:$q[0]/0 "
	  . "redis://noinfo:pw\@127.0.0.1:$q[1]/0 redis://noinfo:pw\@127.0.0.1:$q[2]/0'");
my ($nout, $err) = sq($s3, "SELECT redis_wlock('noinfo')");
like(sqlstate($err), qr/^08/, 'quorum without +info: no majority counts yet');
like($err, qr/may not run INFO.*grant \+info/, '... and the error says why') or diag $err;

$s1->quit;
$s2->quit;
$s3->quit;
$_->kill_kill for @proxies;
$node->stop;
done_testing();
