# RwlockQuorum.pm: independent Redis masters for the quorum-mode TAP tests
# (rwlock.redis_url with several URLs): 3 or 5 plain redis-server processes
# on loopback, ports 6402-6422 (the first free ones), stopped when the test
# ends (RwlockTest's END block).
package RwlockQuorum;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use RwlockTest;

our @EXPORT = qw(quorum_start quorum_url quorum_node quorum_restart_empty quorum_field);

# Start $n masters; returns their ports.
sub quorum_start
{
	my ($n) = @_;
	my @ports;
	for my $p (6402 .. 6422)
	{
		# (+info: quorum mode reads each master's INFO server, the extra
		# right docs/connecting.md names, given under RWLOCK_TEST_ACL)
		push @ports, redis_spawn(port => $p, acl_extra => ['+info'])
		  if RwlockTest::port_free($p);
		return @ports if @ports == $n;
	}
	die "no $n free ports for Redis in 6402-6422";
}

# The setting's value: the masters' URLs, separated by spaces.
sub quorum_url
{
	return join ' ', map { "redis://127.0.0.1:$_/0" } @_;
}

# A PostgreSQL node, the keeper running, whose rwlock.redis_url is the quorum
# of @ports: leases of $lease, rwlock.quorum_max_lease $max_lease seconds
# (the masters count once up that long), 1 s command and connect timeouts.
sub quorum_node
{
	my ($name, $lease, $max_lease, @ports) = @_;
	return new_node($name, port => $ports[0], preload => 1, lease => $lease,
		conf => "rwlock.redis_url = '" . quorum_url(@ports) . "'\n"
		  . "rwlock.quorum_max_lease = '${max_lease}s'\n"
		  . "rwlock.command_timeout = '1s'\nrwlock.connect_timeout = '1s'\n");
}

# Stop a master and start it again on its port, empty (no persistence).
sub quorum_restart_empty
{
	my ($port) = @_;
	redis_stop($port);
	return redis_start($port);
}

# A field of a lock's hash on one master (e.g. 'f', the last write token).
sub quorum_field
{
	my ($port, $prefix, $name, $field) = @_;
	return redis_cli($port, 'HGET', "$prefix:{$name}", $field);
}

1;
