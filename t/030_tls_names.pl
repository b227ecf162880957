# rwlock.tls_verify = full: what names the host is the certificate's
# subjectAltName, never its subject's common name (RFC 9525, as browsers
# do; OpenSSL alone falls back to the CN of a certificate without DNS
# names). Real Redis servers with TLS, certificates made with openssl:
#   - subjectAltName DNS:localhost only (no IP): rediss://localhost works;
#   - CN=localhost and no subjectAltName: rediss://localhost is refused,
#     08001, its detail saying that only the subjectAltName names the host;
#     with rwlock.tls_verify = ca it connects (the chain is good);
#   - a subjectAltName naming another host: refused, as a name mismatch.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockTls;
use PostgreSQL::Test::Utils;
use Test::More;

my $certs = tls_certs();
make_cert('sanonly', ca => 'ca', san => 'DNS:localhost');
make_cert('localhost', ca => 'ca');    # CN=localhost, no subjectAltName
make_cert('cnandother', ca => 'ca', san => 'DNS:other.example');

my $san = tls_redis_start(cert => 'sanonly');
my $cn = tls_redis_start(cert => 'localhost');
my $other = tls_redis_start(cert => 'cnandother');

my $node = new_node('tlsnames', port => $san, lease => '10s',
	conf => "rwlock.tls_ca_file = '$certs/ca.crt'\n");
my $s = session($node);

# Lock through a URL; (token or '', stderr).
sub lock_via
{
	my ($url, $verify) = @_;
	sq($s, "SET rwlock.redis_url = '$url'");
	sq($s, "SET rwlock.tls_verify = '" . ($verify // 'full') . "'");
	my ($out, $err) = sq($s, "SELECT redis_wlock('n') > 0");
	sq($s, "SELECT redis_unlock('n')") if $out eq 't';
	return ($out, $err);
}

my ($out, $err) = lock_via("rediss://localhost:$san/0");
is($out, 't', 'a subjectAltName DNS:localhost names rediss://localhost')
  or diag($err);

($out, $err) = lock_via("rediss://localhost:$cn/0");
isnt($out, 't', 'a certificate with only CN=localhost is refused for rediss://localhost');
is(sqlstate($err), '08001', '... with 08001');
like($err, qr/DETAIL:\s+TLS handshake failed: the server's certificate has no subjectAltName/,
	'... and a detail saying the subjectAltName is what names the host');
diag("CN only: " . join(' ', grep { /DETAIL/ } split /\n/, $err));

($out, $err) = lock_via("rediss://localhost:$cn/0", 'ca');
is($out, 't', 'rwlock.tls_verify = ca accepts it (its chain is good)')
  or diag($err);

($out, $err) = lock_via("rediss://localhost:$other/0");
isnt($out, 't', 'a subjectAltName naming another host is refused');
like($err, qr/is not for the host in rwlock\.redis_url/,
	'... as a name mismatch');

$s->quit;
$node->stop;
done_testing();
