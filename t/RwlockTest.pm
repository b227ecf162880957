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

our @EXPORT = qw(redis_start redis_stop redis_cli new_node session sq
  wait_until elapsed_since lock_state keeper_pid);

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

# Every Redis a test started is shut down when the test ends, however.
my %started;
END { redis_cli($_, 'SHUTDOWN', 'NOSAVE') for keys %started; }

# Start a Redis (again, on the same port if given); returns its port.
sub redis_start
{
	my ($port) = @_;
	if (!$port)
	{
		for my $p (6382 .. 6389)
		{
			if (port_free($p)) { $port = $p; last; }
		}
		die "no free port for Redis in 6382-6389" unless $port;
	}
	my $dir = "$PostgreSQL::Test::Utils::tmp_check/redis$port";
	mkdir $dir;
	system('redis-server', '--port', $port, '--bind', '127.0.0.1',
		'--save', '', '--appendonly', 'no', '--dir', $dir,
		'--daemonize', 'yes', '--pidfile', "$dir/redis.pid",
		'--logfile', "$dir/redis.log") == 0
	  or die "redis-server failed to start";
	for (1 .. 100)
	{
		if (redis_cli($port, 'PING') eq 'PONG')
		{
			$started{$port} = 1;
			return $port;
		}
		sleep 0.05;
	}
	die "redis-server on port $port did not answer";
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
	die "redis-server on port $port did not stop";
}

sub redis_cli
{
	my ($port, @args) = @_;
	my $out = '';
	IPC::Run::run([ 'redis-cli', '-p', $port, @args ],
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
	my ($port, $prefix, $name) = @_;
	my $out = redis_cli($port, '--eval', "$FindBin::RealBin/../lua/info.lua",
		"$prefix:{$name}", "$prefix:{$name}:q", ',', '2');
	my ($state) = split /\n/, $out;
	return $state // '';
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

1;
