# rediss://: TLS on rwlock's own socket, against real Redis servers with
# TLS (certificates made here with the openssl command: a CA, a server
# certificate for 127.0.0.1 and localhost, one for another host, an expired
# one, a client certificate, and a CA nobody uses).
#   - lock and unlock, a waiter woken by a release, the keeper renewing a
#     lease over several leases, all over TLS; a name verified (localhost);
#   - each failure is a class 08 error, quickly, whose detail says what
#     failed: unknown CA, wrong host name, expired certificate, client
#     certificate required and missing, a plain client on a TLS port, a TLS
#     client on a plain port;
#   - cancel, statement_timeout and rwlock.connect_timeout end a TLS
#     handshake that the server never answers (a Redis stopped by SIGSTOP).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockTls;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $certs = tls_certs();
make_cert('wronghost', ca => 'ca', san => 'DNS:wrong.example');
make_cert('expired', ca => 'ca', san => 'IP:127.0.0.1,DNS:localhost', days => -1);

# The state of a lock over TLS (info.lua): free, read or write.
sub tls_lock_state { return lock_state(@_, \&tls_cli); }

my $plain = redis_start();
my $tls = tls_redis_start();
my $mtls = tls_redis_start(auth_clients => 'yes');
my $wrong = tls_redis_start(cert => 'wronghost');
my $expired = tls_redis_start(cert => 'expired');
my $stalled = tls_redis_start();
is(tls_cli($tls, 'PING'), 'PONG', "TLS Redis on port $tls answers redis-cli --tls");

my $node = new_node('tls', port => $plain, preload => 1, lease => '2s', conf => qq{
rwlock.redis_url = 'rediss://127.0.0.1:$tls/0'
rwlock.tls_ca_file = '$certs/ca.crt'
});
note "plain Redis on $plain; TLS Redis on $tls (mutual TLS $mtls, wrong host $wrong, expired $expired, stalled $stalled)";

my ($out, $err, $secs);
my $s1 = session($node);
my $s2 = session($node);

# --- lock and unlock over TLS
($out, $err) = sq($s1, "SELECT redis_wlock('t1') > 0");
is($out, 't', 'redis_wlock over TLS');
is($err, '', 'without an error');
is(tls_lock_state($tls, 'tap_tls', 't1'), 'write', 'the TLS Redis holds the write lock');
($out) = sq($s1, "SELECT url, connected FROM redis_connection_info() WHERE current");
is($out, "rediss://127.0.0.1:$tls/0|t", 'redis_connection_info shows the rediss:// URL, connected');
($out, $err) = sq($s2, "SELECT redis_try_wlock('t1')");
is($out, 'f', 'another session cannot take it');
($out, $err) = sq($s1, "SELECT redis_unlock('t1')");
is($out, 't', 'redis_unlock over TLS');
is(tls_lock_state($tls, 'tap_tls', 't1'), 'free', 'the lock is free in Redis');

# --- a waiter woken by a release, over TLS (its pub/sub connection too)
sq($s1, "SELECT redis_wlock('w1')");
$s2->{stderr} = '';
$s2->{stdout} = '';
$s2->{stdin} .= "SELECT redis_wlock('w1') > 0 AS woken;\n\\echo waited\n";
$s2->{run}->pump_nb;
sleep 0.5;
$s2->{run}->pump_nb;
unlike($s2->{stdout}, qr/waited/, 'the waiter waits while the lock is held');
my $t0 = time;
sq($s1, "SELECT redis_unlock('w1')");
$s2->{run}->pump until $s2->{stdout} =~ /waited/ || $s2->{timeout}->is_expired;
my $woken = time - $t0;
like($s2->{stdout}, qr/\bt\b/, 'the waiter got the lock');
$s2->{stdout} = '';
cmp_ok($woken, '<', 1.0, sprintf('woken %.3f s after the release', $woken));
diag sprintf('TLS: waiter woken %.3f s after the release', $woken);
($out) = sq($s2, "SELECT listening FROM redis_connection_info() WHERE current");
is($out, 't', 'its pub/sub connection is open (over TLS)');
sq($s2, "SELECT redis_unlock('w1')");

# --- the keeper renews over TLS: held over three leases of 2 s
sq($s1, "SELECT redis_wlock('k1')");
my @states;
for (1 .. 7)
{
	sleep 1;
	push @states, tls_lock_state($tls, 'tap_tls', 'k1');
}
is(join(',', @states), join(',', ('write') x 7), 'the lock stays held in Redis for 7 s (lease 2 s)');
($out, $err) = sq($s1, "SELECT redis_unlock('k1')");
is($out, 't', 'and is still held by the session');
is($err, '', 'no warning of a lost hold');
like(slurp_file($node->logfile), qr/rwlock keeper started/, 'the keeper runs');
unlike(slurp_file($node->logfile), qr/rwlock keeper could not renew/, 'and never failed to renew');

# --- a name verified: localhost is in the certificate
($out, $err) = sq($s1, "SET rwlock.redis_url = 'rediss://localhost:$tls/0'; SELECT redis_wlock('n1') > 0, redis_unlock('n1')");
is($out, 't|t', 'rediss://localhost: the certificate names it');
is($err, '', 'without an error');
sq($s1, "RESET rwlock.redis_url");

# --- failures: class 08, quickly, saying what failed
sub fails_with
{
	my ($setup, $what, $detail) = @_;
	my $s = session($node);
	sq($s, "SET rwlock.connect_timeout = '1s'; $setup");
	my ($o, $e, $t) = sq($s, "SELECT redis_wlock('f1')");
	like($e, qr/ERROR:  08001: could not connect to Redis at/, "$what: 08001");
	like($e, $detail, "$what: the detail says why");
	cmp_ok($t, '<', 2.0, sprintf("$what: within 2 s (%.3f s)", $t));
	my ($line) = $e =~ /(DETAIL:[^\n]*)/;
	diag sprintf('%s: %.3f s, %s', $what, $t, $line // $e);
	$s->quit;
}

fails_with("SET rwlock.tls_ca_file = '$certs/otherca.crt'", 'unknown CA',
	qr/DETAIL:  TLS handshake failed: the server's certificate is signed by an unknown certificate authority/);
fails_with("SET rwlock.redis_url = 'rediss://127.0.0.1:$wrong/0'", 'wrong host name',
	qr/DETAIL:  TLS handshake failed: the server's certificate is not for the host in rwlock.redis_url/);
fails_with("SET rwlock.redis_url = 'rediss://127.0.0.1:$expired/0'", 'expired certificate',
	qr/DETAIL:  TLS handshake failed: the server's certificate has expired/);
fails_with("SET rwlock.redis_url = 'rediss://127.0.0.1:$mtls/0'", 'client certificate required, none given',
	qr/DETAIL:  TLS: the server requires a client certificate/);
fails_with("SET rwlock.redis_url = 'redis://127.0.0.1:$tls/0'", 'plain client on a TLS port',
	qr/DETAIL:  .*if the server expects TLS, use rediss:\/\//);
fails_with("SET rwlock.redis_url = 'rediss://127.0.0.1:$plain/0'", 'TLS client on a plain port',
	qr/DETAIL:  no answer to the TLS handshake within rwlock.connect_timeout .*use redis:\/\//);
fails_with("SET rwlock.redis_url = 'rediss://127.0.0.1:$tls/0'; SET rwlock.tls_cert_file = '$certs/client.crt'; SET rwlock.tls_key_file = '$certs/otherca.key'",
	'a key that is not the certificate\'s', qr/DETAIL:  the TLS private key does not match rwlock.tls_cert_file/);
fails_with("SET rwlock.redis_url = 'rediss://127.0.0.1:$mtls/0'; SET rwlock.tls_cert_file = '$certs/otherca.crt'; SET rwlock.tls_key_file = '$certs/otherca.key'",
	'a client certificate the server does not accept', qr/DETAIL:  TLS: the server (refused|closed the connection after the handshake: it did not accept) the client certificate of rwlock.tls_cert_file/);

# ... and what makes them work
($out, $err) = sq($s1, "SET rwlock.redis_url = 'rediss://127.0.0.1:$wrong/0'; SET rwlock.tls_verify = 'ca'; SELECT redis_wlock('v1') > 0, redis_unlock('v1')");
is($out, 't|t', 'wrong host name accepted with rwlock.tls_verify = ca');
($out, $err) = sq($s1, "SET rwlock.redis_url = 'rediss://127.0.0.1:$tls/0'; SET rwlock.tls_ca_file = '$certs/otherca.crt'; SET rwlock.tls_verify = 'none'; SELECT redis_wlock('v2') > 0, redis_unlock('v2')");
is($out, 't|t', 'unknown CA accepted with rwlock.tls_verify = none');
sq($s1, "RESET rwlock.tls_verify; RESET rwlock.tls_ca_file");
($out, $err) = sq($s1, "SET rwlock.redis_url = 'rediss://127.0.0.1:$mtls/0'; SET rwlock.tls_cert_file = '$certs/client.crt'; SET rwlock.tls_key_file = '$certs/client.key'; SELECT redis_wlock('m1') > 0, redis_unlock('m1')");
is($out, 't|t', 'mutual TLS with rwlock.tls_cert_file and tls_key_file');
is($err, '', 'without an error');
chmod 0644, "$certs/client.key";
($out, $err) = sq(session($node), "SET rwlock.redis_url = 'rediss://127.0.0.1:$mtls/0'; SET rwlock.tls_cert_file = '$certs/client.crt'; SET rwlock.tls_key_file = '$certs/client.key'; SELECT redis_wlock('m2')");
like($err, qr/08001: .*\n.*DETAIL:  the TLS private key file is refused: it has group or world access/,
	'a client key readable by others is refused');
chmod 0600, "$certs/client.key";
sq($s1, "RESET rwlock.redis_url; RESET rwlock.tls_cert_file; RESET rwlock.tls_key_file");

# --- a handshake the server never answers: interrupts and connect_timeout
redis_sigstop($stalled);
my $s3 = session($node);
sq($s3, "SET rwlock.redis_url = 'rediss://127.0.0.1:$stalled/0'; SET rwlock.connect_timeout = '30s'");
($out, $err, $secs) = sq($s3, "SET statement_timeout = '300ms'; SELECT redis_wlock('c1')");
like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
	'statement_timeout during a stalled TLS handshake: 57014');
cmp_ok($secs, '<', 1.3, sprintf('ended %.3f s after the statement began (timeout 0.3 s)', $secs));
diag sprintf('stalled TLS handshake: statement_timeout 300 ms ended it after %.3f s', $secs);
sq($s3, "RESET statement_timeout");

my $pid = (sq($s3, "SELECT pg_backend_pid()"))[0];
$s3->{stderr} = '';
$s3->{stdout} = '';
$s3->{stdin} .= "SELECT redis_wlock('c2');\n\\echo cancelled\n";
$s3->{run}->pump_nb;
sleep 0.5;
$t0 = time;
sq($s1, "SELECT pg_cancel_backend($pid)");
$s3->{run}->pump until $s3->{stdout} =~ /cancelled/ || $s3->{timeout}->is_expired;
$secs = time - $t0;
like($s3->{stderr}, qr/ERROR:  57014: canceling statement due to user request/,
	'pg_cancel_backend during a stalled TLS handshake: 57014');
cmp_ok($secs, '<', 1.0, sprintf('ended %.3f s after the cancel', $secs));
diag sprintf('stalled TLS handshake: pg_cancel_backend ended it after %.3f s', $secs);

($out, $err, $secs) = sq($s3, "SET rwlock.connect_timeout = '700ms'; SELECT redis_wlock('c3')");
like($err, qr/ERROR:  08001: .*\n.*DETAIL:  no answer to the TLS handshake within rwlock.connect_timeout \(700 ms\)/,
	'rwlock.connect_timeout ends a stalled TLS handshake: 08001');
cmp_ok($secs, '<', 1.5, sprintf('after %.3f s (timeout 0.7 s)', $secs));
($out) = sq($s3, "SELECT 1");
is($out, '1', 'the session is usable');
redis_sigcont($stalled);
($out, $err) = sq($s3, "SELECT redis_wlock('c4') > 0, redis_unlock('c4')");
is($out, 't|t', 'the same session takes locks once the server answers');

$_->quit for ($s1, $s2, $s3);
$node->stop;
done_testing();
