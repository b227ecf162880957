# RwlockBouncer.pm: a real pgbouncer in front of a test cluster, for the
# TAP tests (next to RwlockTest.pm's helpers). Listens on 127.0.0.1 and a
# free port, talks to the cluster over its unix socket, trusts its clients
# (the user must still be in its auth_file, which it writes); its ini, user
# list, log and pid file live in a directory of the test's tmp_check. Every
# pgbouncer started is stopped when the test ends, however.
package RwlockBouncer;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(pgbouncer_start pgbouncer_stop bouncer_session);

my %running;    # pid file -> pid
END
{
	for my $pidfile (keys %running)
	{
		kill 'KILL', $running{$pidfile};
	}
}

# Start a pgbouncer in front of $node, database postgres. Options:
# pool_mode (session), pool_size (1), conf (more lines for [pgbouncer]).
# Returns { port, dir, pid, pidfile, log }.
sub pgbouncer_start
{
	my ($node, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('pgbouncer');
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	my $host = $node->host;
	my $pgport = $node->port;
	my $mode = $opt{pool_mode} // 'session';
	my $size = $opt{pool_size} // 1;

	open my $ul, '>', "$dir/userlist.txt" or die "userlist.txt: $!";
	print $ul qq{"$user" ""\n};
	close $ul;
	open my $ini, '>', "$dir/pgbouncer.ini" or die "pgbouncer.ini: $!";
	print $ini <<"EOF";
[databases]
postgres = host=$host port=$pgport dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $user
pool_mode = $mode
default_pool_size = $size
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 100
server_reset_query = DISCARD ALL
server_check_delay = 0
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
	print $ini $opt{conf} if $opt{conf};
	close $ini;

	system('pgbouncer', '-d', '-q', "$dir/pgbouncer.ini") == 0
	  or die "pgbouncer failed to start (see $dir/pgbouncer.log)";
	my $pid;
	for (1 .. 100)
	{
		if (-s "$dir/pgbouncer.pid")
		{
			$pid = slurp_file("$dir/pgbouncer.pid");
			chomp $pid;
			$running{"$dir/pgbouncer.pid"} = $pid;
			my $s = IO::Socket::INET->new(
				PeerAddr => '127.0.0.1',
				PeerPort => $port,
				Proto => 'tcp');
			if ($s)
			{
				close $s;
				return {
					port => $port,
					dir => $dir,
					pid => $pid,
					pidfile => "$dir/pgbouncer.pid",
					log => "$dir/pgbouncer.log"
				};
			}
		}
		sleep 0.05;
	}
	die "pgbouncer on port $port did not start (see $dir/pgbouncer.log)";
}

# Stop it: SIGTERM (immediate shutdown), SIGKILL if it lingers.
sub pgbouncer_stop
{
	my ($b) = @_;
	my $pid = delete $running{ $b->{pidfile} } // return;
	kill 'TERM', $pid;
	for (1 .. 100)
	{
		return unless kill 0, $pid;
		sleep 0.05;
	}
	kill 'KILL', $pid;
}

# A background psql session through the pgbouncer $b (as RwlockTest's
# session(): keeps going after errors, verbose errors). The last -d given to
# psql wins over the node's own connection string.
sub bouncer_session
{
	my ($node, $b) = @_;
	my $s = $node->background_psql(
		'postgres',
		on_error_stop => 0,
		extra_params =>
		  [ '-d', "host=127.0.0.1 port=$b->{port} dbname=postgres" ]);
	$s->query_safe('SET client_min_messages = warning');
	$s->query_safe('\\set VERBOSITY verbose');
	return $s;
}

1;
