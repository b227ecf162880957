# RwlockTls.pm: certificates and redis-cli over TLS for the TAP tests (t/010,
# t/020). tls_certs() makes, once per test, a CA, a server certificate for
# 127.0.0.1 and localhost and a client certificate, all signed by it, and a
# CA nobody uses; make_cert() makes more. tls_cli() is redis-cli over TLS
# with the client certificate (accepted by every server these tests start).
package RwlockTls;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;
use RwlockTest;

our @EXPORT = qw(tls_certs make_cert tls_cli tls_cli_args tls_redis_start);

my $certs;    # set by tls_certs(), which a test calls first

sub openssl
{
	my @cmd = ('openssl', @_);
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err)
	  or die "openssl @_ failed: $err";
}

# An EC key and a certificate signed by $o{ca} (or self-signed: a CA), in
# the certificates' directory as $name.key and $name.crt.
sub make_cert
{
	my ($name, %o) = @_;
	openssl('genpkey', '-algorithm', 'EC', '-pkeyopt',
		'ec_paramgen_curve:prime256v1', '-out', "$certs/$name.key");
	chmod 0600, "$certs/$name.key";
	if (!$o{ca})
	{
		openssl('req', '-x509', '-new', '-key', "$certs/$name.key",
			'-out', "$certs/$name.crt", '-days', '3650', '-subj', "/CN=$name");
		return;
	}
	openssl('req', '-new', '-key', "$certs/$name.key", '-out',
		"$certs/$name.csr", '-subj', "/CN=$name");
	my @ext;
	if ($o{san})
	{
		open my $fh, '>', "$certs/$name.ext" or die;
		print $fh "subjectAltName=$o{san}\n";
		close $fh;
		@ext = ('-extfile', "$certs/$name.ext");
	}
	openssl('x509', '-req', '-in', "$certs/$name.csr", '-CA', "$certs/$o{ca}.crt",
		'-CAkey', "$certs/$o{ca}.key", '-set_serial', int(rand(1e9)),
		'-out', "$certs/$name.crt", '-days', $o{days} // 365, @ext);
}

# The certificates' directory, with ca, otherca, server and client made.
sub tls_certs
{
	return $certs if $certs;
	$certs = "$PostgreSQL::Test::Utils::tmp_check/certs";
	mkdir $certs;
	make_cert('ca');
	make_cert('otherca');
	make_cert('server', ca => 'ca', san => 'IP:127.0.0.1,DNS:localhost');
	make_cert('client', ca => 'ca');
	return $certs;
}

# redis-cli's options for TLS with the client certificate.
sub tls_cli_args
{
	return ('--tls', '--cacert', "$certs/ca.crt", '--cert', "$certs/client.crt",
		'--key', "$certs/client.key");
}

# redis-cli over TLS, with the client certificate; its output, chomped.
sub tls_cli
{
	my ($port, @args) = @_;
	IPC::Run::run([ $REDIS_CLI, tls_cli_args(), '-p', $port, @args ],
		'>', \my $out, '2>', \my $err);
	chomp $out;
	return $out;
}

# A Redis with TLS only, its certificate $o{cert} (default server, signed by
# ca); clients must show a certificate with auth_clients => 'yes'; more
# redis-server arguments in args. Ready once its port is bound (redis-cli
# cannot PING one whose certificate has expired). Returns its port.
sub tls_redis_start
{
	my (%o) = @_;
	my $dir = tls_certs();
	my $cert = $o{cert} // 'server';
	return redis_spawn(
		port => $o{port},
		dir => $o{dir},
		tls => 1,
		ready => $o{ready},
		args => [
			'--tls-cert-file', "$dir/$cert.crt", '--tls-key-file', "$dir/$cert.key",
			'--tls-ca-cert-file', "$dir/ca.crt",
			'--tls-auth-clients', $o{auth_clients} // 'no', @{ $o{args} // [] }
		]);
}

1;
