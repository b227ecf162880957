# The keeper renews on a session's behalf as of the session's newest request
# (protocol 3: renew.lua is stale when a newer request of the owner ran on
# the lock). The session and the keeper draw from one counter per PGPROC
# (keeper.c), so a hold whose last change the session made without telling
# the keeper's table (a downgrade queued at COMMIT, sent after the table
# was updated) is still renewed, never found stale for ever and let lapse:
#
# 1. a session holds "d" for reading at session level and for writing in a
#    transaction; COMMIT downgrades it in Redis (release.lua "r", sent
#    after the table was told). Idle for four leases, it still holds its
#    read lock: Redis has its reader field, live, another session cannot
#    write, and no renewal is logged as failed;
# 2. the same after an upgrade (read, then write at session level).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('order', port => $port, preload => 1, lease => '2s');
ok( defined wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'rwlock keeper'"
			) eq '1';
		},
		10),
	'the keeper runs');

my $s = session($node);
my $other = session($node);
my $owner = (sq($s, "SELECT owner FROM redis_connection_info() WHERE current"))[0];

# 1. A downgrade at COMMIT.
my ($out, $err) = sq($s, "SELECT redis_rlock('d') >= 0");
is($out, 't', '1. read lock at session level');
sq($s, "BEGIN");
($out) = sq($s, "SELECT redis_wlock_xact('d') > 0");
is($out, 't', '1. write lock in the transaction (an upgrade)');
($out, $err) = sq($s, "COMMIT");
is($err, '', '1. COMMIT downgrades');
sleep 8;    # four leases, idle
($out) = sq($other, "SELECT redis_try_wlock('d')");
is($out, 'f', '1. four leases later another session cannot write');
my $ttl = redis_cli($port, 'HGET', 'tap_order:{d}', "r:$owner");
ok(defined $ttl && $ttl ne '', '1. Redis still has the reader field');
($out) = sq($s, "SELECT lease_state FROM redis_held_locks WHERE name = 'd'");
is($out, 'held', '1. the session still holds it');
($out) = sq($s, "SELECT redis_unlock('d')");
is($out, 't', '1. and unlocks it, held');

# 2. An upgrade at session level.
($out) = sq($s, "SELECT redis_rlock('u') >= 0");
is($out, 't', '2. read lock');
($out) = sq($s, "SELECT redis_wlock('u') > 0");
is($out, 't', '2. write lock too (an upgrade)');
sleep 8;
($out) = sq($other, "SELECT redis_try_rlock('u')");
is($out, 'f', '2. four leases later another session cannot read');
($out) = sq($s, "SELECT redis_unlock('u'), redis_unlock('u')");
is($out, 't|t', '2. both holds unlock, held');

unlike(slurp_file($node->logfile), qr/lost at|renewing a lease failed/,
	'no hold was found lost, no renewal failed');
done_testing();
