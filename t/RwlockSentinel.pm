# RwlockSentinel.pm: a Redis Sentinel set for the TAP tests: one master, two
# replicas (--replicaof) and three sentinels (redis-server --sentinel, each
# with its own writable config file), all on loopback, all stopped when the
# test ends. Ports: 6392-6397 for the data nodes and 26392-26397 for the
# sentinels, the first free ones.
package RwlockSentinel;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use RwlockTest;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(sentinel_set_start sentinel_master sentinel_wait_master
  sentinel_url redis_role);

# Sentinels are not data nodes: RwlockTest's END block does not know them.
my @sentinels_started;
END { redis_cli($_, 'SHUTDOWN', 'NOSAVE') for @sentinels_started; }

sub free_ports
{
	my ($from, $n) = @_;
	my @ports;
	for my $p ($from .. $from + 20)
	{
		push @ports, $p if RwlockTest::port_free($p);
		return @ports if @ports == $n;
	}
	die "no $n free ports from $from";
}

sub wait_ping
{
	my ($port) = @_;
	for (1 .. 100)
	{
		return if redis_cli($port, 'PING') eq 'PONG';
		sleep 0.05;
	}
	die "redis on port $port did not answer";
}

# Start the set; returns { name, master, replicas => [..], nodes => [..],
# sentinels => [..] } (master and replicas as started; master follows
# sentinel_wait_master).
sub sentinel_set_start
{
	my (%opt) = @_;
	my $name = $opt{name} // 'rwmaster';
	my $down_after = $opt{down_after} // 1000;
	my ($master, @replicas) = free_ports(6392, 3);
	my @sentinels = free_ports(26392, 3);

	redis_start($master);
	redis_start($_, '--replicaof', '127.0.0.1', $master) for @replicas;
	for my $s (@sentinels)
	{
		my $dir = "$PostgreSQL::Test::Utils::tmp_check/sentinel$s";
		mkdir $dir;
		open my $fh, '>', "$dir/sentinel.conf" or die;
		print $fh <<"EOC";
port $s
bind 127.0.0.1
daemonize yes
pidfile $dir/redis.pid
logfile $dir/redis.log
dir $dir
sentinel monitor $name 127.0.0.1 $master 2
sentinel down-after-milliseconds $name $down_after
sentinel failover-timeout $name 4000
sentinel parallel-syncs $name 2
EOC
		close $fh;
		system($REDIS_SERVER, "$dir/sentinel.conf", '--sentinel') == 0
		  or die "sentinel failed to start on $s";
		wait_ping($s);
		push @sentinels_started, $s;
	}
	my $set = {
		name => $name,
		master => $master,
		replicas => \@replicas,
		nodes => [ $master, @replicas ],    # every data node, whatever its role now
		sentinels => \@sentinels
	};
	# Replicas in sync and known to every sentinel before the test starts.
	for (1 .. 200)
	{
		my $ok = 1;
		for my $r (@replicas)
		{
			$ok = 0 unless redis_cli($r, 'INFO', 'replication') =~ /master_link_status:up/;
		}
		for my $s (@sentinels)
		{
			my $info = redis_cli($s, 'SENTINEL', 'MASTER', $name);
			$ok = 0 unless $info =~ /num-slaves\n2\b/ && $info =~ /num-other-sentinels\n2\b/;
		}
		return $set if $ok;
		sleep 0.1;
	}
	die "the sentinel set did not settle";
}

# The master's port, as the first sentinel that answers says.
sub sentinel_master
{
	my ($set) = @_;
	for my $s (@{ $set->{sentinels} })
	{
		my $out = redis_cli($s, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', $set->{name});
		my (undef, $port) = split /\n/, $out;
		return $port if $port;
	}
	return undef;
}

# Wait until every sentinel names a master other than $old and it says it
# is one; returns its port and the seconds it took, or undef.
sub sentinel_wait_master
{
	my ($set, $old, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < $timeout)
	{
		my %seen;
		for my $s (@{ $set->{sentinels} })
		{
			my (undef, $port) = split /\n/,
			  redis_cli($s, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', $set->{name});
			$seen{ $port // '' } = 1;
		}
		my @ports = keys %seen;
		if (@ports == 1 && $ports[0] && $ports[0] ne $old
			&& redis_role($ports[0]) eq 'master')
		{
			$set->{master} = $ports[0];
			return ($ports[0], time - $t0);
		}
		sleep 0.05;
	}
	return undef;
}

sub redis_role
{
	my ($port) = @_;
	my ($role) = split /\n/, redis_cli($port, 'ROLE');
	return $role // '';
}

# The rwlock URL of the set: every sentinel, first the one given first.
sub sentinel_url
{
	my ($set, %opt) = @_;
	my @s = @{ $opt{sentinels} // $set->{sentinels} };
	return 'redis+sentinel://' . join(',', map { "127.0.0.1:$_" } @s) . "/$set->{name}";
}

1;
