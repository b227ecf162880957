# RwlockTest.pm: helpers for the rwlock TAP tests. Real redis-server
# processes on loopback (ports 6382-6389, a free one picked at run time) and
# real PostgreSQL clusters; no mocks.
package RwlockTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use FindBin;
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

our @EXPORT = qw($REDIS_SERVER $REDIS_CLI acl_setuser_args redis_start redis_spawn redis_stop redis_cli new_node session sq
  wait_until elapsed_since lock_state writer_lease_left keeper_pid
  sq_send sq_poll sq_wait sqlstate redis_pid redis_holders redis_mode_of
  session_owner session_pid backend_gone strip_location
  redis_sigstop redis_sigcont redis_answers run_load);

# The server binary and its client: RWLOCK_REDIS_SERVER (default
# redis-server; valkey-server for test/run.sh's Valkey pass) and
# RWLOCK_REDIS_CLI (default: the server's name with -cli for -server), as
# tools/redis.sh has them.
our $REDIS_SERVER = $ENV{RWLOCK_REDIS_SERVER} || 'redis-server';
our $REDIS_CLI = $ENV{RWLOCK_REDIS_CLI} || ($REDIS_SERVER =~ s/-server$/-cli/r);

# RWLOCK_TEST_ACL=1: the SQL sessions and keepers of the nodes new_node()
# makes reach Redis as docs/connecting.md's least-privilege user, as CI runs
# the waits, deadlock and statistics tests (test/run.sh): every plain Redis
# a test starts gets that ACL SETUSER line as documented (tools/acl_line.py,
# the one parser of it), with a password of this run, its key and channel
# patterns for any prefix (~*:* &*:*: the tests use several) and the extra
# rights the document's topology table names (a quorum's masters +info, a
# Cluster's nodes +cluster|slots +asking); each node's password file
# (rwlock.password_file, in its data directory) gives that user and
# password, its URLs none. The tests' own redis-cli and the clients they
# run stay the default user.
our $ACL = $ENV{RWLOCK_TEST_ACL} ? 1 : 0;
our $ACL_PASSWORD = join '', map { sprintf '%02x', int(rand(256)) } 1 .. 16;
my %acl_extra;    # port => the extra rights its user was given (restarts)

# docs/connecting.md's ACL SETUSER command, as a list, from
# tools/acl_line.py (the one parser of it). Options: user (default rwlock),
# password (default this run's), prefix (the key prefix its key and
# channel patterns are for; default *, any), extra (rights added).
sub acl_setuser_args
{
	my (%o) = @_;
	my $out = '';
	IPC::Run::run([ 'python3', "$FindBin::RealBin/../tools/acl_line.py",
			'--user', $o{user} // 'rwlock', '--prefix', $o{prefix} // '*',
			'--password', $o{password} // $ACL_PASSWORD, @{ $o{extra} // [] } ],
		'>', \$out) or die "tools/acl_line.py failed";
	return split /\n/, $out;
}

# The suite may run under `PGOPTIONS=... make installcheck`; its clusters
# get their settings from postgresql.conf only.
delete $ENV{PGOPTIONS};

sub port_free
{
	my ($port) = @_;
	my $s = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => $port,
		Proto => 'tcp',
		ReuseAddr => 1);
	return 0 unless $s;
	close $s;
	return 1;
}

# Every Redis a test started is shut down when the test ends, however:
# by redis-cli SHUTDOWN (a pid may have been reused after a kill -9,
# t/017), or, those plain redis-cli cannot reach (TLS only, the default
# user off), by SIGTERM to their pid.
# local $?: redis-cli's failure on one killed with kill -9 (t/017) must not
# become the test's exit status ("exited with 256" when it came last).
my %started;      # port => 1: stopped by redis-cli
my %by_signal;    # port => pid: stopped by SIGTERM
END
{
	local $?;
	redis_cli($_, 'SHUTDOWN', 'NOSAVE') for keys %started;
	for my $pid (values %by_signal)
	{
		kill 'CONT', $pid;
		kill 'TERM', $pid;
	}
}

# The one recipe for a test's redis-server. Options: port (else a free one
# in 6382-6389 that no server of this test has), dir (default
# tmp_check/redis<port>), tls => 1 (TLS only: --port 0 --tls-port; the
# caller gives the certificate options in args), args (more redis-server
# arguments), ready (a sub given the port, true once the server serves;
# default: PING answered, or for TLS the port bound), by_signal => 1 (to be
# stopped by SIGTERM, as TLS-only ones are). Returns the port.
sub redis_spawn
{
	my (%o) = @_;
	my $port = $o{port};
	if (!$port)
	{
		for my $p (6382 .. 6389)
		{
			next if $by_signal{$p} || $started{$p} || !port_free($p);
			$port = $p;
			last;
		}
		die "no free port for Redis in 6382-6389" unless $port;
	}
	my $dir = $o{dir} // "$PostgreSQL::Test::Utils::tmp_check/redis$port";
	mkdir $dir;
	my @listen = $o{tls} ? ('--port', '0', '--tls-port', $port) : ('--port', $port);
	system($REDIS_SERVER, @listen, '--bind', '127.0.0.1',
		'--save', '', '--appendonly', 'no', '--dir', $dir,
		'--daemonize', 'yes', '--pidfile', "$dir/redis.pid",
		'--logfile', "$dir/redis.log", @{ $o{args} // [] }) == 0
	  or die "$REDIS_SERVER failed to start on port $port";
	my $ready = $o{ready} // ($o{tls}
		? sub { -s "$dir/redis.pid" && !port_free($_[0]) }
		: sub { redis_cli($_[0], 'PING') eq 'PONG' });
	for (1 .. 100)
	{
		if ($ready->($port))
		{
			if ($o{tls} || $o{by_signal})
			{
				$by_signal{$port} = slurp_file("$dir/redis.pid") + 0;
			}
			else { $started{$port} = 1; }
			if ($ACL && !$o{tls})
			{
				my @args = @{ $o{args} // [] };
				$acl_extra{$port} = $o{acl_extra} // $acl_extra{$port}
				  // ((grep { $_ eq '--cluster-enabled' } @args)
					? [ '+cluster|slots', '+asking' ] : []);
				my $ok = redis_cli($port, acl_setuser_args(extra => $acl_extra{$port}));
				die "ACL SETUSER on port $port: $ok" unless $ok eq 'OK';
			}
			return $port;
		}
		sleep 0.05;
	}
	die "$REDIS_SERVER on port $port did not answer";
}

# Start a plain Redis (again, on the same port if given); returns its port.
# Arguments after the port are passed on to redis-server (e.g.
# '--requirepass', 'secret' or '--enable-debug-command', 'yes').
sub redis_start
{
	my ($port, @extra) = @_;
	return redis_spawn(port => $port, args => \@extra);
}

sub redis_stop
{
	my ($port) = @_;
	redis_cli($port, 'SHUTDOWN', 'NOSAVE');
	delete $started{$port};
	for (1 .. 100)
	{
		return if port_free($port) && redis_cli($port, 'PING') ne 'PONG';
		sleep 0.05;
	}
	die "$REDIS_SERVER on port $port did not stop";
}

sub redis_cli
{
	my ($port, @args) = @_;
	my $out = '';
	IPC::Run::run([ $REDIS_CLI, '-p', $port, @args ],
		'>', \$out, '2>', \my $err);
	chomp $out;
	return $out;
}

# A cluster using the Redis on $port; preload => 1 puts rwlock in
# shared_preload_libraries (the keeper runs).
sub new_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	my $lease = $opt{lease} // '2s';
	$node->append_conf('postgresql.conf', qq{
rwlock.redis_url = 'redis://127.0.0.1:$opt{port}/0'
rwlock.lease = '$lease'
rwlock.key_prefix = 'tap_$name'
log_min_messages = log
});
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'rwlock'\n")
	  if $opt{preload};
	$node->append_conf('postgresql.conf', $opt{conf}) if $opt{conf};
	if ($ACL)
	{
		# docs/connecting.md's password file: mode 0600, the server's
		my $file = $node->data_dir . '/rwlock.pass';
		append_to_file($file, "# host:port:user:password\n*:*:rwlock:$ACL_PASSWORD\n");
		chmod 0600, $file;
		$node->append_conf('postgresql.conf', "rwlock.password_file = 'rwlock.pass'\n");
	}
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION rwlock');
	return $node;
}

# A background psql session that keeps going after errors.
sub session
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('SET client_min_messages = warning');
	$s->query_safe('\\set VERBOSITY verbose');
	return $s;
}

# Run SQL in a session: (stdout, stderr, seconds taken).
sub sq
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $t0 = time;
	my ($out) = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err, time - $t0);
}

# Poll $check->() every 50 ms until true or $timeout s; returns the seconds
# it took, or undef.
sub wait_until
{
	my ($check, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < $timeout)
	{
		return time - $t0 if $check->();
		sleep 0.05;
	}
	return undef;
}

# The state of a lock as Redis has it (info.lua, read-only): free, read, write.
sub lock_state
{
	my ($port, $prefix, $name, $cli) = @_;    # $cli: e.g. a TLS redis-cli
	$cli //= \&redis_cli;
	my $out = $cli->($port, '--eval', "$FindBin::RealBin/../lua/info.lua",
		"$prefix:{$name}", "$prefix:{$name}:q", ',', '3');
	my ($state) = split /\n/, $out;
	return $state // '';
}

# The writer's lease left on a lock, ms, as Redis has it (info.lua): the
# writer's lease is no longer the hash's TTL (docs/protocol.md 3.3). -2 when
# no writer holds it there (as PTTL answers for a key that is gone), or when
# the answer is no state (an error: a Cluster redirection, say).
sub writer_lease_left
{
	my ($port, $prefix, $name, $cli) = @_;
	$cli //= \&redis_cli;
	my $out = $cli->($port, '--eval', "$FindBin::RealBin/../lua/info.lua",
		"$prefix:{$name}", "$prefix:{$name}:q", ',', '3');
	my ($state, undef, undef, $ms) = split /\n/, $out // '';
	return ($state // '') eq 'write' && ($ms // '') =~ /^\d+$/ ? $ms : -2;
}

# The keeper's pid, or '' if it is not running.
sub keeper_pid
{
	my ($node) = @_;
	my ($ret, $out) = $node->psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'rwlock keeper'");
	return $ret == 0 ? $out : '';
}

sub elapsed_since { return sprintf('%.3f', time - $_[0]); }

# ---------------------------------------------------------------------
# Helpers for the fault tests (006-009).
# ---------------------------------------------------------------------

# The pid of the redis-server on $port (from its pid file).
sub redis_pid
{
	my ($port) = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/redis$port/redis.pid";
	my $pid = -e $file ? slurp_file($file) : '';
	chomp $pid;
	die "no pid file for the Redis on port $port" unless $pid =~ /^\d+$/;
	return $pid;
}

# Freeze a Redis with SIGSTOP (it accepts connections into the kernel's
# backlog but answers nothing) and thaw it with SIGCONT. Every Redis frozen
# is thawed when the test ends, before the END block above shuts it down
# (END blocks run last-defined first).
my %frozen;
sub redis_sigstop
{
	my ($port) = @_;
	my $pid = redis_pid($port);
	kill 'STOP', $pid or die "kill -STOP $pid: $!";
	$frozen{$port} = $pid;
	return $pid;
}

sub redis_sigcont
{
	my ($port) = @_;
	my $pid = delete $frozen{$port} // redis_pid($port);
	kill 'CONT', $pid;
	return $pid;
}
END { kill 'CONT', $_ for values %frozen; }

# Send SQL to a session without waiting for it; sq_poll tells whether it is
# done, sq_wait waits for it (at most $timeout s) and returns
# (stdout, stderr, seconds since it was sent), or () if it is not done yet
# (it may then be waited for again).
sub sq_send
{
	my ($s, $sql) = @_;
	my $n = $s->{query_cnt}++;
	my $banner = "background_psql: QUERY_SEPARATOR $n:";
	$s->{stdout} = '';
	$s->{stderr} = '';
	$s->{rw_banner} = $banner;
	$s->{rw_t0} = time;
	$s->{stdin} .= "$sql\n;\n\\echo '$banner'\n\\warn '$banner'\n";
	$s->{run}->pump_nb;
	return $s->{rw_t0};
}

sub sq_poll
{
	my ($s) = @_;
	my $b = $s->{rw_banner};
	eval { $s->{run}->pump_nb; };
	return $s->{stdout} =~ /\Q$b\E\r?\n/ && $s->{stderr} =~ /\Q$b\E\r?\n/;
}

sub sq_wait
{
	my ($s, $timeout) = @_;
	my $t_end = time + $timeout;
	my $done;
	while (!($done = sq_poll($s)) && time < $t_end)
	{
		sleep 0.005;
	}
	return () unless $done;
	my $secs = time - $s->{rw_t0};
	my $b = $s->{rw_banner};
	my ($out, $err) = ($s->{stdout}, $s->{stderr});
	$out =~ s/\r?\n?\Q$b\E\r?\n//;
	$err =~ s/\r?\n?\Q$b\E\r?\n//;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return ($out, $err, $secs);
}

# The SQLSTATE of the first ERROR (or FATAL) in a session's stderr
# (VERBOSITY verbose), or '' if none.
sub sqlstate
{
	my ($err) = @_;
	return ($err // '') =~ /(?:ERROR|FATAL):  ([0-9A-Z]{5}): / ? $1 : '';
}

# Messages without their LOCATION lines (which name C functions and files).
sub strip_location
{
	my ($err) = @_;
	$err =~ s/^LOCATION:.*\n?//mg;
	return $err;
}

sub session_pid
{
	my ($s) = @_;
	my ($pid) = sq($s, 'SELECT pg_backend_pid()');
	return $pid;
}

# The owner id a session uses in Redis (it must have used rwlock already).
sub session_owner
{
	my ($s) = @_;
	my ($owner) = sq($s, 'SELECT owner FROM redis_connection_info() LIMIT 1');
	return $owner;
}

# Who holds a lock in Redis, read with redis-cli (no lease check: the tests
# use leases long enough): (writer or '', [readers]).
sub redis_holders
{
	my ($port, $prefix, $name) = @_;
	# Protocol 3: the writer is field w of the lock's hash, each reader a
	# field r:<owner> whose value is its lease end (docs/protocol.md, 3.3).
	my $writer = redis_cli($port, 'HGET', "$prefix:{$name}", 'w');
	my @readers = map { substr($_, 2) } grep { /^r:/ }
	  split /\n/, redis_cli($port, 'HKEYS', "$prefix:{$name}");
	return ($writer, \@readers);
}

# What Redis has for one owner: 'write', 'read' or ''.
sub redis_mode_of
{
	my ($port, $prefix, $name, $owner) = @_;
	my ($writer, $readers) = redis_holders($port, $prefix, $name);
	return 'write' if $writer eq $owner;
	return 'read' if grep { $_ eq $owner } @$readers;
	return '';
}

# Whether the Redis on $port answers a PING within $timeout seconds (it
# does not while it runs DEBUG SLEEP or is stopped). Never blocks longer.
sub redis_answers
{
	my ($port, $timeout) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $port,
		Proto => 'tcp',
		Timeout => $timeout) or return 0;
	$sock->blocking(0);
	syswrite($sock, "PING\r\n");
	my $rin = '';
	vec($rin, fileno($sock), 1) = 1;
	my $ready = select(my $rout = $rin, undef, undef, $timeout);
	my $buf = '';
	sysread($sock, $buf, 64) if $ready > 0;
	close $sock;
	return $buf =~ /^\+PONG/ ? 1 : 0;
}

# Whether a backend is gone from pg_stat_activity.
sub backend_gone
{
	my ($node, $pid) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0';
}

# Run test/load.py against a node, with its settings (RWLOCK_URL,
# FAILOVER_CMD, DURATION, ...) as %env; shows its output; returns whether it
# passed.
sub run_load
{
	my ($node, %env) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[ '/usr/bin/python3', "$FindBin::RealBin/../test/load.py" ],
		'>', \$out, '2>', \$err,
		init => sub {
			$ENV{PGHOST} = $node->host;
			$ENV{PGPORT} = $node->port;
			$ENV{PGDATABASE} = 'postgres';
			$ENV{$_} = $env{$_} for keys %env;
		});
	diag $out;
	diag $err if $err;
	return $ok;
}

1;
