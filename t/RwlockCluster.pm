# RwlockCluster.pm: a Redis Cluster for the TAP tests: by default six
# redis-server processes (--cluster-enabled yes --cluster-node-timeout 2000)
# on loopback, joined by redis-cli --cluster create with one replica per
# master (three masters, three replicas); cluster_start(tls => 1) makes its
# nodes speak TLS only (t/020). All are stopped when the test ends (plain
# ones by RwlockTest's END block, which started them (redis_spawn); TLS
# ones by signal, there too). Ports: the first free ones from 7301 (another
# test's nodes still stopping are skipped); each also uses port + 10000 for
# the cluster bus.
package RwlockCluster;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use RwlockTest;
use RwlockTls;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(cluster_start cluster_url cluster_masters cluster_ok
  cluster_slot_owner cluster_wait_ok cluster_key_node key_slot cluster_ranges
  cluster_node_id cluster_names_on cluster_replica_of cluster_move_slot
  cluster_wait_key);

sub free_cluster_ports
{
	my ($n) = @_;
	my @ports;
	for my $p (7301 .. 7360)
	{
		push @ports, $p
		  if RwlockTest::port_free($p) && RwlockTest::port_free($p + 10000);
		return @ports if @ports == $n;
	}
	die "no $n free port pairs from 7301";
}

# Start and join the cluster; returns { ports => [..], cli => redis-cli }.
# With tls => 1 (after RwlockTls::tls_certs()), the nodes speak TLS only,
# to clients and on the cluster bus, with the server certificate, and
# masters => N (default 3) masters with replicas => 0 or 1 (default 1) each.
sub cluster_start
{
	my (%o) = @_;
	my $masters = $o{masters} // 3;
	my $replicas = $o{replicas} // 1;
	my @ports = free_cluster_ports($masters * (1 + $replicas));
	for my $p (@ports)
	{
		my $dir = "$PostgreSQL::Test::Utils::tmp_check/redis$p";
		mkdir $dir;
		# An earlier test's cluster on these ports: its node ids, and the RDB
		# a replica received (written whatever --save says).
		unlink "$dir/nodes.conf", "$dir/dump.rdb";
		# shutdown-timeout 0: a master stops at once when the test ends
		# instead of waiting up to 10 s for its replicas to catch up.
		my @opts = ('--cluster-enabled', 'yes', '--cluster-node-timeout', '2000',
			'--shutdown-timeout', '0', '--cluster-config-file', "$dir/nodes.conf");
		if ($o{tls}) { tls_node_start($p, $dir, @opts); }
		else { redis_start($p, @opts); }
	}
	my $c = { ports => \@ports, cli => $o{tls} ? \&tls_cli : \&redis_cli };
	my @cli = $o{tls} ? tls_cli_args() : ();
	my $out = '';
	IPC::Run::run([ $REDIS_CLI, @cli, '--cluster', 'create',
			(map { "127.0.0.1:$_" } @ports), '--cluster-replicas', $replicas, '--cluster-yes' ],
		'>', \$out, '2>&1') or die "redis-cli --cluster create failed:\n$out";
	cluster_wait_ok($c, 30) or die "the cluster did not settle";
	return $c;
}

# A cluster node that speaks TLS only (port 0), on its port and its bus
# (RwlockTls's recipe; RwlockTest's END block stops it by signal).
sub tls_node_start
{
	my ($port, $dir, @opts) = @_;
	tls_redis_start(
		port => $port,
		dir => $dir,
		auth_clients => 'optional',
		args => [ '--tls-cluster', 'yes', '--tls-replication', 'yes', @opts ],
		ready => sub { tls_cli($_[0], 'PING') eq 'PONG' });
	return;
}

# Whether every node says cluster_state:ok and knows every node.
sub cluster_ok
{
	my ($c) = @_;
	for my $p (@{ $c->{ports} })
	{
		next if $c->{dead}{$p};
		my $info = $c->{cli}->($p, 'CLUSTER', 'INFO');
		return 0 unless $info =~ /cluster_state:ok/
		  && $info =~ /cluster_known_nodes:(\d+)/ && $1 == @{ $c->{ports} };
	}
	return 1;
}

sub cluster_wait_ok
{
	my ($c, $timeout) = @_;
	return wait_until(sub { cluster_ok($c) }, $timeout);
}

# The URL with the given seed ports (all nodes by default).
sub cluster_url
{
	my ($c, @seeds) = @_;
	@seeds = @{ $c->{ports} } unless @seeds;
	return 'redis+cluster://' . join(',', map { "127.0.0.1:$_" } @seeds) . '/';
}

# The ports of the masters now, as a live node's CLUSTER NODES says.
sub cluster_masters
{
	my ($c) = @_;
	for my $p (@{ $c->{ports} })
	{
		next if $c->{dead}{$p};
		my @m;
		for my $line (split /\n/, $c->{cli}->($p, 'CLUSTER', 'NODES'))
		{
			my @f = split / /, $line;
			next unless $f[2] =~ /master/ && $f[2] !~ /fail/ && @f > 8;
			push @m, $1 if $f[1] =~ /:(\d+)@/;
		}
		return sort @m if @m;
	}
	return ();
}

# The slot ranges as a live node's CLUSTER SLOTS says (or node $only's):
# [from, to, master port]...
sub cluster_ranges
{
	my ($c, $only) = @_;
	for my $p ($only // @{ $c->{ports} })
	{
		next if $c->{dead}{$p};
		my @l = split /\n/, $c->{cli}->($p, 'CLUSTER', 'SLOTS');
		my @r;
		# Flat output: start, end, host, port, id, (replica host, port, id)...
		for (my $i = 0; $i + 3 < @l; $i++)
		{
			push @r, [ $l[$i], $l[$i + 1], $l[$i + 3] ]
			  if $l[$i] =~ /^\d+$/ && $l[$i + 1] =~ /^\d+$/ && $l[$i + 2] =~ /^127\./;
		}
		return @r if @r;
	}
	return ();
}

# The port of the master that serves a slot, as a live node's CLUSTER SLOTS says.
sub cluster_slot_owner
{
	my ($c, $slot, @ranges) = @_;
	@ranges = cluster_ranges($c) unless @ranges;
	for my $r (@ranges)
	{
		return $r->[2] if $slot >= $r->[0] && $slot <= $r->[1];
	}
	return undef;
}

# A key's hash slot computed here, by Redis Cluster's rule (CRC16-XMODEM of
# the hash tag): to pick names by slot without asking Redis each time.
sub key_slot
{
	my ($key) = @_;
	$key = $1 if $key =~ /\{([^}]+)\}/ && index($key, '{') == $-[0];
	my $crc = 0;
	for my $byte (unpack 'C*', $key)
	{
		$crc ^= $byte << 8;
		for (1 .. 8)
		{
			$crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff : ($crc << 1) & 0xffff;
		}
	}
	return $crc % 16384;
}

# The master that holds a key now.
sub cluster_key_node
{
	my ($c, $key) = @_;
	return cluster_slot_owner($c, key_slot($key));
}

# The master that serves a session's deadlock wait key now, and its slot
# (docs/protocol.md section 18: <prefix>:wait:{<owner>}, the owner's
# braces and % escaped). The session's owner id is fixed at its first call:
# a lock taken and let go tells it.
sub cluster_wait_key
{
	my ($c, $prefix, $s) = @_;
	sq($s, "SELECT redis_wlock('warmup') > 0");
	sq($s, "SELECT redis_unlock('warmup')");
	my $owner = session_owner($s);
	(my $enc = $owner) =~ s/%/%25/g;
	$enc =~ s/\{/%7B/g;
	$enc =~ s/\}/%7D/g;
	my $key = "$prefix:wait:{$enc}";
	return (cluster_key_node($c, $key), key_slot($key));
}

# A node's id (CLUSTER MYID).
sub cluster_node_id { return redis_cli($_[0], 'CLUSTER', 'MYID'); }

# $n lock names "$stem<i>" (default 1) whose hash slots (key
# "$prefix:{name}") the given master serves.
sub cluster_names_on
{
	my ($c, $prefix, $master, $stem, $n) = @_;
	my @ranges = cluster_ranges($c);
	my @names;
	$n //= 1;
	for my $i (1 .. 1000)
	{
		push @names, "$stem$i"
		  if cluster_slot_owner($c, key_slot("$prefix:{$stem$i}"), @ranges) == $master;
		return wantarray ? @names : $names[0] if @names == $n;
	}
	die "no names on $master";
}

# The live replica of a master, or undef.
sub cluster_replica_of
{
	my ($c, $master) = @_;
	for my $p (@{ $c->{ports} })
	{
		next if $c->{dead}{$p};
		return $p if redis_cli($p, 'ROLE') =~ /^slave\n127\.0\.0\.1\n$master\n/;
	}
	return undef;
}

# Migrate a slot by hand, keys and all, as redis-cli --cluster reshard
# does; the slot stays migrating $pause seconds after its keys have gone
# (clients are answered ASK meanwhile). Then the two masters, and @tell
# besides, are told its new owner (others learn it by the cluster bus).
sub cluster_move_slot
{
	my ($slot, $src, $dst, $pause, @tell) = @_;
	my ($src_id, $dst_id) = (cluster_node_id($src), cluster_node_id($dst));
	redis_cli($dst, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $src_id);
	redis_cli($src, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $dst_id);
	for (1 .. 20)
	{
		my @keys = split /\n/, redis_cli($src, 'CLUSTER', 'GETKEYSINSLOT', $slot, 100);
		last unless @keys;
		redis_cli($src, 'MIGRATE', '127.0.0.1', $dst, '', 0, 5000, 'KEYS', @keys);
		sleep 0.1;
	}
	sleep $pause;
	redis_cli($_, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $dst_id) for ($dst, $src, @tell);
	return;
}

1;
