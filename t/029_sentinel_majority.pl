# A lying sentinel is outvoted (issue 27.15): rwlock believes the address a
# majority of the sentinels the URL lists agree on, and a server a sentinel
# named proves it is the master (ROLE) before it gets the password.
#   - a real Sentinel set (a master, two replicas, three sentinels) and a
#     fake sentinel (test/fake_sentinel.py) naming another Redis that is a
#     master too: sessions listing the liar first and last both lock on the
#     real master, one lock, exclusive (before: the session asking the liar
#     first took the lock on the other Redis, a double holder);
#   - the liar and one honest sentinel only: no majority either way round,
#     a class 08 error saying the sentinels disagree, nothing locked;
#   - a URL with a password whose only sentinel names a server that is not
#     a master (the fake, logging what it gets): refused, and the server
#     never saw AUTH or the password; one naming a real master with
#     requirepass (ROLE answers NOAUTH) still works: AUTH, then ROLE.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockSentinel;
use PostgreSQL::Test::Utils;
use Test::More;

my $set = sentinel_set_start();
my $other = redis_start();    # a master nothing monitors
my $secret = redis_start();
redis_cli($secret, 'CONFIG', 'SET', 'requirepass', 'pw-for-master');
# Without the password again before RwlockTest's END shuts it down.
END
{
	IPC::Run::run([ $REDIS_CLI, '--no-auth-warning', '-a', 'pw-for-master',
		'-p', $secret, 'CONFIG', 'SET', 'requirepass', '' ], '>', '/dev/null',
		'2>', '/dev/null') if $secret;
}
my $prefix = 'tap_smaj';
my $node = new_node('smaj', port => $set->{master}, lease => '10s',
	conf => "rwlock.connect_timeout = '2s'\n");

my @fakes;
END { $_->kill_kill for @fakes; }

# A fake sentinel naming 127.0.0.1:$port (logging to $log, if given).
sub fake_start
{
	my ($port, $log) = @_;
	my $p = 26389;
	$p-- until RwlockTest::port_free($p);
	push @fakes,
	  IPC::Run::start(
		[
			'/usr/bin/python3', "$FindBin::RealBin/../test/fake_sentinel.py",
			$p, '127.0.0.1', $port, $log // ()
		],
		'>', '/dev/null', '2>', '/dev/null');
	wait_until(sub { !RwlockTest::port_free($p) }, 5) or die "fake sentinel";
	return $p;
}

my $liar = fake_start($other);
my @honest = @{ $set->{sentinels} };

sub url_of
{
	my ($userinfo, @sentinels) = @_;
	return "redis+sentinel://$userinfo"
	  . join(',', map { "127.0.0.1:$_" } @sentinels) . "/$set->{name}";
}

# ---- outvoted ---------------------------------------------------------------
my $a = session($node);
my $b = session($node);
sq($a, "SET rwlock.redis_url = '" . url_of('', $liar, @honest) . "'");
sq($b, "SET rwlock.redis_url = '" . url_of('', @honest, $liar) . "'");
my ($out, $err) = sq($a, "SELECT redis_wlock('x') > 0");
is($out, 't', 'the liar asked first: a lock') or diag($err);
is((redis_holders($set->{master}, $prefix, 'x'))[0] ne '' ? 1 : 0, 1,
	'... on the real master');
is(redis_cli($other, 'KEYS', "$prefix*"), '', '... nothing on the server the liar names');
($out, $err) = sq($b, "SELECT redis_try_wlock('x')");
is($out, 'f', 'the liar asked last: the same lock, held by the other session')
  or diag($err);
sq($a, "SELECT redis_unlock('x')");
($out, $err) = sq($b, "SELECT redis_try_wlock('x')");
is($out, 't', '... and free for it once released');
sq($b, "SELECT redis_unlock('x')");
$a->quit;
$b->quit;

# ---- no majority: an error, both ways round --------------------------------
for my $order ([ $liar, $honest[0] ], [ $honest[0], $liar ])
{
	my $s = session($node);
	sq($s, "SET rwlock.redis_url = '" . url_of('', @$order) . "'");
	my ($o, $e) = sq($s, "SELECT redis_wlock('y') > 0");
	my $which = $order->[0] == $liar ? 'liar first' : 'liar second';
	isnt($o, 't', "one liar, one honest sentinel ($which): no lock");
	like(sqlstate($e), qr/^08/, '... class 08');
	like($e, qr/the sentinels disagree on the master of "$set->{name}"/,
		'... saying the sentinels disagree');
	$s->quit;
}
is(redis_cli($other, 'KEYS', "$prefix*"), '', 'nothing locked on the other server');
is(redis_cli($set->{master}, 'KEYS', "$prefix:{y}*"), '', 'nor on the master');

# ---- ROLE before AUTH ------------------------------------------------------
my $log = "$PostgreSQL::Test::Utils::tmp_check/fake_server.log";
my $fake_server = fake_start(1, $log);       # answers ROLE with +OK
my $to_fake = fake_start($fake_server);      # a sentinel naming it
my $s = session($node);
sq($s, "SET rwlock.connect_timeout = '500ms'");
sq($s, "SET rwlock.redis_url = '" . url_of(':pw-never-sent@', $to_fake) . "'");
($out, $err) = sq($s, "SELECT redis_wlock('z') > 0");
like(sqlstate($err), qr/^08/, 'a named server that is not a master: class 08');
like($err, qr/is not its master/, '... saying so');
my $got = -e $log ? slurp_file($log) : '';
like($got, qr/^ROLE$/m, '... it was asked ROLE');
unlike($got, qr/AUTH|pw-never-sent/, '... and never got AUTH or the password');

my $to_secret = fake_start($secret);
sq($s, "SET rwlock.redis_url = '" . url_of(':pw-for-master@', $to_secret) . "'");
($out, $err) = sq($s, "SELECT redis_wlock('z') > 0, redis_unlock('z')");
is($out, 't|t', 'a master with requirepass (ROLE answers NOAUTH): AUTH, then ROLE, a lock')
  or diag($err);
$s->quit;

$node->stop;
done_testing();
