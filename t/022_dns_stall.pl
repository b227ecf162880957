# A host name whose DNS server does not answer (test/tap.sh points the
# suite's resolver at a UDP socket that drops every query, with the usual
# 5 s timeout and 2 attempts): the lookup is waited for through the latch,
# so rwlock.connect_timeout bounds it (class 08, saying the name was not
# resolved), pg_cancel_backend ends the call within a second (57014), and
# pg_terminate_backend ends the backend within a second. Blocked in
# getaddrinfo instead, each would take the resolver's 10 s. Names in
# /etc/hosts (localhost) still work at once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => 'needs the silent DNS server of test/tap.sh (run as root, with unshare)'
  unless $ENV{RWLOCK_TEST_DNS_SINK};

my $port = redis_start();
my $host = 'redis.rwlock-dns-stall.test';
my $node = new_node('dns', port => $port,
	conf => "rwlock.redis_url = 'redis://$host:$port/0'\n");
my ($out, $err, $secs);

# --- connect_timeout bounds the lookup.
my $s = session($node);
sq($s, "SET rwlock.connect_timeout = '1s'");
my $t0 = time;
($out, $err) = sq($s, "SELECT redis_wlock('d1')");
my $took = time - $t0;
like(sqlstate($err), qr/^08/, 'an unanswered lookup fails the call with class 08') or diag $err;
like($err, qr/\Q$host\E.*not resolved within rwlock\.connect_timeout/,
	'saying the host name was not resolved in time') or diag $err;
cmp_ok($took, '<', 1.8, sprintf('within connect_timeout (1 s): %.3f s', $took));

# --- pg_cancel_backend during a lookup, with a long connect_timeout.
sq($s, "SET rwlock.connect_timeout = '60s'");
my $pid = session_pid($s);
sq_send($s, "SELECT redis_wlock('d2')");
sleep 0.5;
ok(!sq_poll($s), 'the call waits for the lookup');
$t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
($out, $err, $secs) = sq_wait($s, 8);
$secs = time - $t0;
is(sqlstate($err), '57014', 'pg_cancel_backend ends it with 57014') or diag $err;
# 1.5 s, as t/007: the time includes psql starting for the cancel.
cmp_ok($secs, '<', 1.5, sprintf('within about a second of the cancel: %.3f s', $secs));
($out) = sq($s, 'SELECT 1');
is($out, '1', 'the session goes on');

# --- pg_terminate_backend during a lookup.
my $v = session($node);
sq($v, "SET rwlock.connect_timeout = '60s'");
my $vpid = session_pid($v);
sq_send($v, "SELECT redis_rlock('d3')");
sleep 0.5;
$t0 = time;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($vpid)");
my $gone = wait_until(sub { backend_gone($node, $vpid) }, 8);
ok(defined $gone && time - $t0 < 1.5,
	sprintf('pg_terminate_backend ends the backend within about a second: %.3f s', time - $t0));

# --- A name in /etc/hosts needs no DNS.
my $l = session($node);
sq($l, "SET rwlock.redis_url = 'redis://localhost:$port/0'");
($out, $err) = sq($l, "SELECT redis_wlock('d4') > 0 AND redis_unlock('d4')");
is($out, 't', 'localhost (from /etc/hosts) still resolves at once') or diag $err;

$s->quit;
$l->quit;
eval { $v->quit };
$node->stop;
redis_stop($port);
done_testing();
