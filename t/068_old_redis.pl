# A Redis older than rwlock's features need is refused at connect, its
# version named (SPEC 13, issue 37; the minimum is 5.0, docs/protocol.md
# section 1): 55000, and no lock taken. No Redis older than 5.0 can be
# installed here (Debian bookworm has 7.0), so the test runs this
# machine's own server binary with its version string changed to major
# version 4 (same length, in a copy): a real server that says, in INFO,
# what an old one says. A server that says 5.0 is served.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;

# The version the real server reports, then a copy saying major version
# $major instead.
my $real = redis_start();
my ($version) = redis_cli($real, 'INFO', 'server') =~ /^redis_version:(\S+)/m;
redis_stop($real);
my ($bin) = grep { -x } map { "$_/$REDIS_SERVER" } split /:/, $ENV{PATH};
$bin = $REDIS_SERVER if $REDIS_SERVER =~ m{/};

sub patched
{
	my ($major) = @_;
	my $body = slurp_file($bin);
	(my $old = $version) =~ s/^\d+/$major/;
	return undef if length($old) != length($version);
	my $n = () = $body =~ /\x00\Q$version\E\x00/g;
	return undef if $n != 1;
	$body =~ s/\x00\Q$version\E\x00/\x00$old\x00/;
	my $copy = "$PostgreSQL::Test::Utils::tmp_check/redis-server-$old";
	open(my $fh, '>:raw', $copy) or die "$copy: $!";
	print $fh $body;
	close $fh;
	chmod 0755, $copy;
	return ($copy, $old);
}

my ($old_bin, $old) = patched(4);
plan skip_all => "the version string $version is not found once in $bin"
  unless $old_bin;

my $port;
{
	local $RwlockTest::REDIS_SERVER = $old_bin;
	$port = redis_start();
}
my ($says) = redis_cli($port, 'INFO', 'server') =~ /^redis_version:(\S+)/m;
is($says, $old, "the copy says redis_version:$old");

my $node = new_node('old', port => $port);
my ($ret, $out, $err) = $node->psql('postgres',
	"SET client_min_messages = warning; \\set VERBOSITY verbose\nSELECT redis_wlock('old_x')");
isnt($ret, 0, 'a lock asked of it fails');
like($err, qr/ERROR:  55000: .*\n(?:DETAIL|HINT):  .*it is (?:Redis \Q$old\E|Valkey \S+): rwlock needs Redis 5\.0 or later/s,
	'55000, the version named and the minimum') or diag $err;
is(redis_cli($port, 'EXISTS', 'tap_old:{old_x}'), '0', 'no lock in Redis');
is(redis_cli($port, 'KEYS', '*'), '', 'nothing written at all');

# The same binary saying 5.x is served: the check is the version, nothing else.
redis_stop($port);
my ($new_bin, $five) = patched(5);
{
	local $RwlockTest::REDIS_SERVER = $new_bin;
	redis_start($port);
}
$node->restart;
is($node->safe_psql('postgres', "SELECT redis_wlock('old_x') > 0, redis_unlock('old_x')"),
	't|t', "the same server saying $five serves locks");

done_testing();
