# Credentials that stay secret, and no silent fallback to another server.
#
# A Redis whose only user is an ACL user with a password. For each way the
# docs/connecting.md shows to configure the credentials, with and without rwlock in
# shared_preload_libraries, a role without privileges runs SHOW,
# current_setting, pg_settings, pg_db_role_setting, redis_connection_info()
# and gets error messages (Redis refuses AUTH; Redis is down), in fresh
# sessions, before and after the library is loaded: the password appears in
# none of it, and its error messages name neither the user nor the host.
# The ways: the password in rwlock.password_file (mode 0600), with the URL in
# postgresql.conf or set by ALTER DATABASE; the password in the URL in
# postgresql.conf, with the library preloaded.
#
# Then a URL refused when the library loads (a non-superuser's PGOPTIONS)
# and values set while the library was not loaded that are not valid
# (ALTER DATABASE ... SET rwlock.redis_url = 'garbage', lease '10', prefix
# 'a{b') make lock functions fail; the default server 127.0.0.1:6379 gets
# no key.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $pw = 'S3cr3t-pw-7f9c';
my $user = 'rwuser';
my $default_port = 6379;

# ---- Redis servers -----------------------------------------------------

sub acli
{
	my ($port, @args) = @_;
	IPC::Run::run(
		[
			$REDIS_CLI, '--no-auth-warning', '--user', $user, '--pass', $pw,
			'-p', $port, @args
		],
		'>', \my $out, '2>', \my $err);
	chomp $out;
	return $out;
}

# A Redis whose default user is off: only rwuser, with its password, gets in.
sub acl_redis_start
{
	return redis_spawn(
		args => [ '--user', $user, 'on', ">$pw", '~*', '&*', '+@all', '--user', 'default', 'off' ],
		ready => sub { acli($_[0], 'PING') eq 'PONG' },
		by_signal => 1);
}

my $port = acl_redis_start();
like(redis_cli($port, 'PING'), qr/NOAUTH/,
	"Redis on $port refuses clients without the password");

# The default server: a fallback would take its locks here.
my $default_up = redis_cli($default_port, 'PING') eq 'PONG';
if (!$default_up)
{
	RwlockTest::redis_start($default_port);
}
is(redis_cli($default_port, 'PING'), 'PONG', 'a Redis answers at the default 127.0.0.1:6379');

sub default_keys
{
	my $out = redis_cli($default_port, '--scan', '--pattern', 'tap_secrets*');
	return $out eq '' ? 0 : scalar(split /\n/, $out);
}

# ---- the clusters --------------------------------------------------------
my %nodes;
for my $preload (0, 1)
{
	my $n = new_node("secrets$preload", port => $port, preload => $preload, lease => '5s');
	# log_min_messages: errors in the server log too
	$n->append_conf('postgresql.conf',
		"rwlock.key_prefix = 'tap_secrets'\nrwlock.connect_timeout = '1s'\nlog_min_messages = warning\n");
	$n->safe_psql('postgres', 'CREATE ROLE nopriv LOGIN');
	$nodes{$preload} = $n;
}

sub write_passfile
{
	my ($node, $line, $mode) = @_;
	my $f = $node->data_dir . '/rwlock.pass';
	open my $fh, '>', $f or die;
	print $fh "# host:port:user:password\n$line\n";
	close $fh;
	chmod $mode // 0600, $f;
}

# Configure one way; restart so every session starts afresh.
sub configure
{
	my ($node, $way) = @_;
	my $conf = $node->data_dir . '/postgresql.conf';
	my $text = slurp_file($conf);
	$text =~ s/^# way:.*\z//ms;
	open my $fh, '>', $conf or die;
	print $fh $text;
	print $fh "# way: $way\n";
	if ($way eq 'file+conf')
	{
		print $fh "rwlock.redis_url = 'redis://127.0.0.1:$port/0'\n";
		print $fh "rwlock.password_file = 'rwlock.pass'\n";
	}
	elsif ($way eq 'file+alter')
	{
		print $fh "rwlock.password_file = 'rwlock.pass'\n";
	}
	elsif ($way eq 'url+conf')
	{
		print $fh "rwlock.redis_url = 'redis://$user:$pw\@127.0.0.1:$port/0'\n";
	}
	close $fh;
	write_passfile($node, "127.0.0.1:$port:$user:$pw");
	$node->restart;
	$node->safe_psql('postgres', 'ALTER DATABASE postgres RESET ALL');
	$node->safe_psql('postgres',
		"ALTER DATABASE postgres SET rwlock.redis_url = 'redis://127.0.0.1:$port/0'")
	  if $way eq 'file+alter';
}

# Run SQL in a fresh session as nopriv: stdout and stderr together.
sub as_nopriv
{
	my ($node, $sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		on_error_stop => 0, extra_params => [ '-U', 'nopriv' ]);
	return "$out\n$err";
}

my $looks = q{
SHOW rwlock.redis_url;
SELECT current_setting('rwlock.redis_url', true);
SELECT name, setting FROM pg_settings WHERE name LIKE 'rwlock.%' ORDER BY name;
SELECT setconfig FROM pg_db_role_setting;
};

for my $preload (0, 1)
{
	my $node = $nodes{$preload};
	my @ways = ('file+conf', 'file+alter');
	push @ways, 'url+conf' if $preload;
	for my $way (@ways)
	{
		my $what = "$way, " . ($preload ? 'preloaded' : 'not preloaded');
		configure($node, $way);

		# before and after the library is loaded in the session, a lock taken
		my $all = as_nopriv($node, "$looks
SELECT redis_wlock('s1') > 0 AS locked;
$looks
SELECT url, current, connected FROM redis_connection_info();
SELECT redis_unlock('s1');");
		like($all, qr/^t$/m, "$what: nopriv takes a lock (AUTH as the file or URL says)");
		unlike($all, qr/\Q$pw\E/, "$what: no password in SHOW, current_setting, pg_settings, pg_db_role_setting, redis_connection_info");
		unlike($all, qr/ERROR:  (?!must be superuser or have privileges of pg_read_all_settings to examine "rwlock.redis_url")/,
			"$what: no error but SHOW's refusal once the setting is defined") or diag $all;

		# Redis refuses AUTH: the error names no user, host or password
		acli($port, 'ACL', 'SETUSER', $user, 'resetpass', '>other-pw');
		my $e = as_nopriv($node, "SELECT redis_wlock('s2')");
		like($e, qr/ERROR:  the configured Redis server refused authentication/,
			"$what: AUTH refused: an error that names no server");
		unlike($e, qr/\Q$pw\E|$user|127\.0\.0\.1|$port/, "$what: AUTH refused: no password, user, host or port")
		  or diag $e;
		IPC::Run::run([ $REDIS_CLI, '--no-auth-warning', '--user', $user, '--pass', 'other-pw',
			'-p', $port, 'ACL', 'SETUSER', $user, 'resetpass', ">$pw" ], '>', \my $o);
	}
}

# No password for the server, and the server down: errors that name no
# user, host or port.
{
	my $node = $nodes{0};
	configure($node, 'file+conf');
	write_passfile($node, "127.0.0.1:1:$user:$pw");    # no line for this server
	my $e = as_nopriv($node, "SELECT redis_wlock('s4')");
	like($e, qr/ERROR:  the configured Redis server refused authentication/,
		'no line for the server in the file: NOAUTH, named generically');
	like($e, qr/neither rwlock.redis_url nor rwlock.password_file gives one/, 'saying why');
	write_passfile($node, "127.0.0.1:$port:$user:$pw");
	$node->safe_psql('postgres', "ALTER DATABASE postgres SET rwlock.redis_url = 'redis://127.0.0.1:1/0'");
	$e = as_nopriv($node, "SELECT redis_wlock('s5')");
	like($e, qr/ERROR:  could not connect to the configured Redis server/,
		'server down: an error that names no server');
	unlike($e, qr/127\.0\.0\.1|:1\/|$user|\Q$pw\E/, 'server down: no host, port, user or password')
	  or diag $e;
	like(slurp_file($node->logfile), qr/DETAIL:  Connection refused \(Redis at redis:\/\/127\.0\.0\.1:1\/0\)/,
		'server down: the server log names the server for the administrator');
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT redis_wlock('s5')");
	like($err, qr/ERROR:  could not connect to Redis at redis:\/\/127\.0\.0\.1:1\/0/,
		'a superuser is shown the URL');
	$node->safe_psql('postgres', 'ALTER DATABASE postgres RESET ALL');

	# a password file others may read is refused
	write_passfile($node, "127.0.0.1:$port:$user:$pw", 0644);
	($ret, $out, $err) = $node->psql('postgres', "SELECT redis_wlock('s6')");
	like($err, qr/ERROR:  could not connect to Redis.*\nDETAIL:  rwlock.password_file is refused: group or others may access it \(mode 0644/,
		'a password file readable by others is refused');
	write_passfile($node, "127.0.0.1:$port:$user:$pw", 0600);
	is($node->safe_psql('postgres', "SELECT redis_wlock('s6') > 0, redis_unlock('s6')"), 't|t',
		'mode 0600: accepted');
}

# No copy of the password stays in a backend's memory once it has
# connected (issue 38): the password file's copies are wiped (passfile.c),
# and so must be the connection's output buffer, which hiredis only empties
# by its length, and hiredis's formatted AUTH command, which it frees as
# is. The backend's writable private memory is read through /proc (the
# same user: no privilege needed), after a lock and an unlock on the
# connection and with the connection kept open.
{
	no warnings 'portable';    # 64-bit addresses through hex()
	my $node = $nodes{0};
	configure($node, 'file+conf');
	my $s = session($node);
	my ($out, $err) = sq($s, "SELECT redis_wlock('m1') > 0, redis_unlock('m1')");
	is($out, 't|t', 'a session authenticates with the password file and locks');
	my $pid = session_pid($s);
	my ($regions, $bytes, $found) = (0, 0, 0);
	open my $maps, '<', "/proc/$pid/maps" or die "/proc/$pid/maps: $!";
	open my $mem, '<:raw', "/proc/$pid/mem" or die "/proc/$pid/mem: $!";
	while (my $line = <$maps>)
	{
		my ($from, $to, $perm) = $line =~ /^([0-9a-f]+)-([0-9a-f]+) (\S+)/ or next;
		next unless $perm =~ /^rw.p/;
		my ($at, $end) = (hex $from, hex $to);
		my $tail = '';
		$regions++;
		while ($at < $end)
		{
			my $n = $end - $at < 1 << 20 ? $end - $at : 1 << 20;
			sysseek($mem, $at, 0) or last;
			my $got = sysread($mem, my $buf, $n);
			last unless $got;
			$bytes += $got;
			$found++ if index($tail . $buf, $pw) >= 0;
			$tail = substr($buf, -length($pw));
			$at += $got;
		}
	}
	cmp_ok($bytes, '>', 1 << 20, "the backend's private writable memory was read ($regions regions)");
	is($found, 0, "no copy of the password in the backend's memory");
	$s->quit;
}

# Documented: without preloading, a password in the URL in postgresql.conf
# is shown by SHOW to every role before the library is loaded (docs/connecting.md).
{
	my $node = $nodes{0};
	configure($node, 'url+conf');
	like(as_nopriv($node, 'SHOW rwlock.redis_url'), qr/\Q$pw\E/,
		'as docs/connecting.md says: not preloaded, a password in the URL is visible before the library loads');
	configure($node, 'file+conf');
}

unlike(slurp_file($nodes{1}->logfile), qr/\Q$pw\E/,
	'the server log of the preloaded cluster does not have the password either');

# ---- no silent fallback ------------------------------------------------------
is(default_keys(), 0, 'the default server has no key of this test yet');
{
	my $node = $nodes{0};
	my ($ret, $out, $err);

	# a non-superuser's PGOPTIONS: refused at load, then an error
	{
		local $ENV{PGOPTIONS} = "-c rwlock.redis_url=redis://127.0.0.1:$port/0";
		($ret, $out, $err) = $node->psql('postgres', "SELECT redis_wlock('fb1')",
			extra_params => [ '-U', 'nopriv' ]);
	}
	like($err, qr/WARNING:  permission denied to set parameter "rwlock.redis_url"/,
		'PGOPTIONS of a non-superuser: refused when the library loads');
	like($err, qr/ERROR:  rwlock.redis_url was not applied in this session, so rwlock refuses to take locks/,
		'and the lock function fails instead of using the default server');
	{
		local $ENV{PGOPTIONS} = "-c rwlock.key_prefix=mine";
		($ret, $out, $err) = $node->psql('postgres', "SELECT redis_wlock('fb2')",
			extra_params => [ '-U', 'nopriv' ]);
	}
	like($err, qr/ERROR:  rwlock.key_prefix was not applied in this session/,
		'the same for rwlock.key_prefix');

	# invalid values set while the library is not loaded
	for my $case ([ 'rwlock.redis_url', 'garbage' ], [ 'rwlock.lease', '10' ],
		[ 'rwlock.key_prefix', 'a{b' ], [ 'rwlock.tls_verify', 'fulll' ])
	{
		my ($name, $value) = @$case;
		$node->safe_psql('postgres', "ALTER DATABASE postgres SET $name = '$value'");
		for my $as ([ 'superuser', [] ], [ 'nopriv', [ '-U', 'nopriv' ] ])
		{
			($ret, $out, $err) = $node->psql('postgres',
				"SELECT redis_wlock('fb3'); SELECT redis_try_rlock_xact('fb4'); SELECT redis_lock_info('fb5')",
				on_error_stop => 0, extra_params => $as->[1]);
			like($err, qr/WARNING:  .*parameter "\Q$name\E"/,
				"ALTER DATABASE SET $name = '$value' ($as->[0]): refused when the library loads");
			my $n = () = $err =~ /ERROR:  \Q$name\E was not applied in this session/g;
			is($n, 3, "... and each lock function fails");
		}
		$node->safe_psql('postgres', "ALTER DATABASE postgres RESET $name");
	}
	is($node->safe_psql('postgres', "SELECT redis_wlock('fb6') > 0, redis_unlock('fb6')"), 't|t',
		'once the values are fixed, locks work');
}
{
	# preloaded: such values are refused when they are set
	my $node = $nodes{1};
	my ($ret, $out, $err) = $node->psql('postgres',
		"ALTER DATABASE postgres SET rwlock.redis_url = 'garbage'");
	like($err, qr/ERROR:  invalid value for parameter "rwlock.redis_url"/,
		'preloaded: ALTER DATABASE with an invalid URL fails');
	{
		local $ENV{PGOPTIONS} = "-c rwlock.redis_url=redis://127.0.0.1:$port/0";
		($ret, $out, $err) = $node->psql('postgres', "SELECT 1",
			extra_params => [ '-U', 'nopriv' ]);
	}
	like($err, qr/permission denied to set parameter "rwlock.redis_url"/,
		'preloaded: a non-superuser\'s PGOPTIONS fails the connection');
}
{
	# preloaded, an invalid URL with a password in postgresql.conf: refused
	# at start without quoting it in the log; the hint fits the preloaded case
	my $node = $nodes{1};
	my $conf = $node->data_dir . '/postgresql.conf';
	my $saved = slurp_file($conf);
	$node->append_conf('postgresql.conf',
		"rwlock.redis_url = 'redis://u:${pw}zz\@127.0.0.1:0/0'\n");
	$node->restart;
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT redis_wlock('fb7')");
	like($err, qr/ERROR:  rwlock.redis_url was not applied in this session/,
		'preloaded, an invalid URL in postgresql.conf: lock functions fail');
	like($err, qr/HINT:  Fix the value in the server's configuration and reload it/,
		'... with a hint that fits a preloaded library');
	like(slurp_file($node->logfile), qr/invalid value for parameter "rwlock.redis_url"/,
		'the log says the URL was refused');
	unlike(slurp_file($node->logfile), qr/\Q${pw}zz\E/,
		'... without quoting it, password and all');
	open my $fh, '>', $conf or die;
	print $fh $saved;
	close $fh;
	$node->restart;
}
is(default_keys(), 0, 'the default server 127.0.0.1:6379 got no key');

$_->stop for values %nodes;
done_testing();
