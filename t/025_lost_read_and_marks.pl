# The protocol's corner cases seen from SQL (issue 27):
#  1. (27.7) an upgrade whose read lock Redis lost (its field deleted, as an
#     eviction or a restart would) is reported: a WARNING naming the lock,
#     never granted as if the read had been held throughout; the session
#     then takes the write lock anew (a new token), or, when it cannot, its
#     hold shows as lost and redis_unlock returns false;
#  2. (27.18) a reader whose wait ran out (lock_timeout) leaves no mark: the
#     only holder, holding read and write, drops the write and takes it
#     again at once with redis_try_wlock (no readers' turn for nobody);
#  3. (27.7) in quorum mode, the read lock is lost only when more masters
#     than a majority can spare lost it: one of three, the upgrade goes on;
#     two of three, the WARNING, and the write lock taken anew.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $prefix = 'tap_lr';
my $node = new_node('lr', port => $port, lease => '30s');
my ($out, $err);

# ------------------------------------------------------------------
# 1. An upgrade of a read lock Redis lost.
# ------------------------------------------------------------------
{
	my $s = session($node);
	($out) = sq($s, "SELECT redis_rlock('up') >= 0");
	is($out, 't', '1. read lock taken');
	my $owner = session_owner($s);
	# Redis loses it: the reader field, and with it the only reader.
	redis_cli($port, 'HDEL', "$prefix:{up}", "r:$owner", 'n', 'rm');
	($out, $err) = sq($s, "SELECT redis_wlock('up') > 0");
	is($out, 't', '1. the upgrade ends with the write lock');
	like($err, qr/WARNING:  01000: Redis lock "up" was lost/,
		'1. with a WARNING naming the lock') or diag $err;
	like($err, qr/read lock/, '1. saying its read lock was gone');
	is(redis_cli($port, 'HGET', "$prefix:{up}", 'w'), $owner,
		'1. Redis has the write lock, taken anew');
	($out) = sq($s, "SELECT string_agg(mode || ':' || lease_state, ',' ORDER BY mode) FROM redis_held_locks WHERE name = 'up'");
	is($out, 'read:held,write:held', '1. both holds held now');
	($out, $err) = sq($s, 'SELECT redis_unlock_all()');
	is($out, '2', '1. released');

	# Another reader holds: the upgrade cannot be had at once.
	my $r = session($node);
	sq($r, "SELECT redis_rlock('up2')");
	sq($s, "SELECT redis_rlock('up2')");
	redis_cli($port, 'HDEL', "$prefix:{up2}", "r:$owner");
	redis_cli($port, 'HINCRBY', "$prefix:{up2}", 'n', '-1');
	($out, $err) = sq($s, "SELECT redis_try_wlock('up2')");
	is($out, 'f', '1. beside another reader: no write lock');
	like($err, qr/WARNING:  01000: Redis lock "up2" was lost/,
		'1. and the WARNING') or diag $err;
	($out) = sq($s, "SELECT lease_state FROM redis_held_locks WHERE name = 'up2'");
	is($out, 'lost', '1. the read hold shows as lost');
	is(redis_cli($port, 'HEXISTS', "$prefix:{up2}", 'w'), '0',
		'1. nothing was granted');
	($out, $err) = sq($s, "SELECT redis_unlock('up2')");
	is($out, 'f', '1. redis_unlock says false');
	sq($r, "SELECT redis_unlock('up2')");
	$s->quit;
	$r->quit;
}

# ------------------------------------------------------------------
# 2. A reader that gave up leaves no mark (exactly the sequence of 27.18).
# ------------------------------------------------------------------
{
	my $s = session($node);
	my $r = session($node);
	for my $round (1 .. 3)
	{
		($out) = sq($s, "SELECT redis_rlock('t') >= 0, redis_wlock('t') > 0");
		is($out, 't|t', "2.$round read and write held, the only holder");
		sq($r, "SET lock_timeout = '300ms'");
		($out, $err) = sq($r, "SELECT redis_rlock('t')");
		is(sqlstate($err), '55P03', "2.$round the reader's wait ran out");
		is(redis_cli($port, 'HEXISTS', "$prefix:{t}", 'rw'), '0',
			"2.$round its mark is gone from Redis");
		($out, $err) = sq($s,
			"SELECT redis_unlock('t'), redis_try_wlock('t')");
		is($out, 't|t', "2.$round the write dropped and taken again at once")
		  or diag $err;
		($out) = sq($s, 'SELECT redis_unlock_all()');
		is($out, '2', "2.$round released");
	}
	# A writer that gave up, for comparison (its intent was always withdrawn).
	($out) = sq($s, "SELECT redis_rlock('t') >= 0, redis_wlock('t') > 0");
	($out, $err) = sq($r, "SELECT redis_wlock('t')");
	is(sqlstate($err), '55P03', "2. a writer's wait ran out");
	($out) = sq($s, "SELECT redis_unlock('t'), redis_try_wlock('t')");
	is($out, 't|t', '2. likewise at once');
	sq($s, 'SELECT redis_unlock_all()');
	$s->quit;
	$r->quit;
}

# ------------------------------------------------------------------
# 3. Quorum mode: a majority decides whether the read lock was lost.
# ------------------------------------------------------------------
{
	my @r = quorum_start(3);
	my $qprefix = 'tap_lrq';
	my $max_lease = 3;
	my $q = quorum_node('lrq', '3s', $max_lease, @r);
	sleep $max_lease + 1.5;    # until the masters count
	my $s = session($q);
	sq($s, "SET statement_timeout = '5s'");    # a wait on a lost read ends
	($out, $err) = sq($s, "SELECT redis_rlock('qu') >= 0");
	is($out, 't', '3. read lock on the quorum') or diag $err;
	my $owner = session_owner($s);
	redis_cli($r[0], 'HDEL', "$qprefix:{qu}", "r:$owner", 'n', 'rm');
	($out, $err) = sq($s, "SELECT redis_wlock('qu') > 0");
	is($out, 't', '3. one master of three lost it: upgraded');
	unlike($err, qr/was lost/, '3. without a WARNING') or diag $err;
	sq($s, 'SELECT redis_unlock_all()');
	sq($s, "SELECT redis_rlock('qu2')");
	redis_cli($_, 'HDEL', "$qprefix:{qu2}", "r:$owner", 'n', 'rm') for @r[0 .. 1];
	($out, $err) = sq($s, "SELECT redis_wlock('qu2') > 0");
	is($out, 't', '3. two of three lost it: the write lock all the same');
	like($err, qr/WARNING:  01000: Redis lock "qu2" was lost/,
		'3. with the WARNING') or diag $err;
	is(quorum_field($_, $qprefix, 'qu2', 'w'), $owner, "3. taken anew on master $_")
	  for @r;
	sq($s, 'SELECT redis_unlock_all()');
	$s->quit;
	$q->stop;
}

$node->stop;
done_testing();
