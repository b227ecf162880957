# A command cut off in flight never runs late over a newer hold (SPEC 8: "A
# hold is never shared by mistake"; F4 of the model check). A release that
# times out is owed and sent again, on a new connection, before the name is
# taken again; if Redis ran the old connection's copy later (its bytes
# delayed in the network, a partition that heals, a proxy), it would free
# the new hold: the session would believe it holds a lock that another
# session is then granted. The session's connection goes through a proxy
# (t/holdproxy.py) that holds back the bytes of the connection open at the
# moment it is told to, and delivers them to Redis on the same upstream
# connection later, after the session gave up on that connection:
#
# 1. redis_unlock times out (held back); redis_wlock of the name again, on
#    a new connection; then the held-back release reaches Redis. The new
#    hold must stand: Redis still has the session as writer, and another
#    session's redis_try_wlock fails. (The old connection is killed by its
#    CLIENT ID ahead of the release sent again.)
# 2. The same for a cut-off acquisition (a liveness matter): redis_try_wlock
#    times out (held back), a release is owed; the session reads the name
#    and lets go of it; then the held-back acquisition reaches Redis: it
#    must not grant a write hold nobody knows of, which would keep another
#    session out for a lease.
# 3. Quorum mode: the same as 1 on one member (reached through the proxy)
#    of three: the release times out there only (the others confirm it), is
#    owed for that member and sent again, behind the kill, by the next
#    acquisition; the held-back copy then must not free that member's new
#    hold.
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
sq($s1, "SET rwlock.redis_url = 'redis://127.0.0.1:$pport/0'");

# Tell a proxy one thing, and wait until it has acted on it.
sub proxy_do
{
	my ($what, $dir) = @_;
	$dir //= $ctl;
	open my $f, '>', "$dir/$what" or die "$dir/$what: $!";
	close $f;
	ok(wait_until(sub { !-e "$dir/$what" }, 10), "the proxy did $what");
}

# 1. A release that runs late.
my ($out, $err) = sq($s1, "SELECT redis_wlock('a') > 0");
is($out, 't', 'session 1 holds a through the proxy');
my $owner = session_owner($s1);
proxy_do('hold');
($out, $err) = sq($s1,
	"SET rwlock.command_timeout = '200ms'; SELECT redis_unlock('a'); RESET rwlock.command_timeout");
note "redis_unlock held back: $out / $err";
like($err, qr/could not release Redis lock "a"/, 'the release timed out: it is owed');
is(redis_cli($port, 'HGET', "$prefix:{a}", 'w'), $owner,
	'Redis has not run it (the proxy holds it)');
($out, $err) = sq($s1, "SELECT redis_wlock('a') > 0");
is($out, 't', 'session 1 takes a again, on a new connection');
is(redis_cli($port, 'HGET', "$prefix:{a}", 'w'), $owner, 'Redis has session 1 as writer');
proxy_do('flush');
sleep 0.5;
is(redis_cli($port, 'HGET', "$prefix:{a}", 'w'), $owner,
	'the held-back release reached Redis late: the new hold stands');
($out, $err) = sq($s2, "SELECT redis_try_wlock('a')");
is($out, 'f', 'session 2 cannot take a while session 1 holds it');
($out) = sq($s1, "SELECT redis_unlock('a')");
is($out, 't', 'session 1 lets go of a');

# 2. An acquisition that runs late.
proxy_do('hold');
($out, $err) = sq($s1,
	"SET rwlock.command_timeout = '200ms'; SELECT redis_try_wlock('b'); RESET rwlock.command_timeout");
note "redis_try_wlock held back: $out / $err";
like($err, qr/ERROR/, 'the acquisition timed out');
# The owed release goes ahead of session 1's next call of b.
($out, $err) = sq($s1, "SELECT redis_try_rlock('b')");
is($out, 't', 'session 1 reads b, on a new connection');
($out) = sq($s1, "SELECT redis_unlock('b')");
is($out, 't', 'session 1 lets go of b');
proxy_do('flush');
sleep 0.5;
my $w = redis_cli($port, 'HGET', "$prefix:{b}", 'w');
isnt($w, $owner, 'the held-back acquisition reached Redis late: it granted nothing');
($out) = sq($s2, "SELECT redis_try_wlock('b')");
is($out, 't', 'session 2 takes b');
($out) = sq($s2, "SELECT redis_unlock('b')");
is($out, 't', 'session 2 lets go of b');
my ($bw, $br) = redis_holders($port, $prefix, 'b');
is("$bw/@$br", '/', 'b is free in Redis');

# 3. Quorum mode: a release that runs late on one member.
my $s3 = session($node);
sq($s3, "SET rwlock.redis_url = 'redis://127.0.0.1:$qpport/0 "
	  . "redis://127.0.0.1:$q[1]/0 redis://127.0.0.1:$q[2]/0'");
sleep 6 - (time - $qstarted) if time - $qstarted < 6;
($out, $err) = sq($s3, "SELECT redis_wlock('q') > 0");
is($out, 't', 'quorum: session 3 holds q') or diag($err);
my $owner3 = session_owner($s3);
is(quorum_field($q[0], $prefix, 'q', 'w'), $owner3, '... on the proxied member too');
proxy_do('hold', $qctl);
($out, $err) = sq($s3,
	"SET rwlock.command_timeout = '200ms'; SELECT redis_unlock('q'); RESET rwlock.command_timeout");
note "quorum redis_unlock, one member held back: $out / $err";
is(quorum_field($q[1], $prefix, 'q', 'w'), '', '... released on the others');
is(quorum_field($q[0], $prefix, 'q', 'w'), $owner3,
	'... not on the held-back member');
sleep 1.5;    # a member that timed out is left alone 1 s (quorum.c)
($out, $err) = sq($s3, "SELECT redis_wlock('q') > 0");
is($out, 't', 'session 3 takes q again') or diag($err);
proxy_do('flush', $qctl);
sleep 0.5;
is(quorum_field($q[0], $prefix, 'q', 'w'), $owner3,
	'the held-back release reached the member late: its new hold stands');
($out) = sq($s3, "SELECT redis_unlock('q')");
is($out, 't', 'session 3 lets go of q');
is(join('/', map { quorum_field($_, $prefix, 'q', 'w') } @q), '//',
	'q is free on every member');

$s1->quit;
$s2->quit;
$s3->quit;
$_->kill_kill for @proxies;
$node->stop;
done_testing();
