# Renewals that Redis answers with an error, or that a quorum cannot
# decide, are retried soon, hold by hold, and never cost the other holds
# their renewal:
# a) without the keeper, a renewal refused with an error reply (OOM) is
#    tried again at the session's next calls, and the lock stays held.

use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# ---------------------------------------------------------------------
# a) no keeper: an error reply to a renewal is retried
# ---------------------------------------------------------------------
my $port = redis_start();
my $node = new_node('retry', port => $port, lease => '2s');
my $s = session($node);
my $other = session($node);

# A reader's renewal writes (HSET): under maxmemory it is refused with OOM.
my ($out, $err) = sq($s, "SELECT redis_rlock('a') >= 0");
is($out, 't', 'a) the session takes a read lock (lease 2 s, no keeper)');
sleep 0.8;    # past a third of the lease: due
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '1');
($out, $err) = sq($s, "SELECT redis_rlock('a') >= 0, redis_unlock('a')");
is($out, 't|t', 'a) a call while Redis refuses writes still works (stacked hold)');
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '0');
like(slurp_file($node->logfile), qr/renewing a lease failed: OOM/,
	'a) the renewal was answered OOM');

# The session keeps making calls that need no Redis round trip of their own;
# each may renew what is due.
my $t0 = time;
my $got = 0;
my $warned = '';
while (time - $t0 < 5)
{
	(undef, $err) = sq($s, "SELECT redis_rlock('a'), redis_unlock('a')");
	$warned .= $err;
	($out) = sq($other, "SELECT redis_try_wlock('a')");
	if ($out eq 't')
	{
		$got++;
		sq($other, "SELECT redis_unlock('a')");
	}
	sleep 0.25;
}
is($got, 0, 'a) the refused renewal was tried again: nobody else got the lock in 5 s (2.5 leases)');
unlike($warned, qr/"a" was lost/, 'a) and the holder never lost it (no WARNING at its calls)');
($out, $err) = sq($s, "SELECT redis_unlock('a')");
is($out, 't', 'a) the holder unlocks it: true');
is($err, '', 'a) with no warning');

# A hold whose renewals are refused for longer than its lease is reported
# lost.
sq($s, "SELECT redis_rlock('b')");
sleep 0.8;
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '1');
$t0 = time;
while (time - $t0 < 2.5)
{
	sq($s, "SELECT redis_rlock('b'), redis_unlock('b')");
	sleep 0.25;
}
redis_cli($port, 'CONFIG', 'SET', 'maxmemory', '0');
($out, $err) = sq($s, "SELECT redis_unlock('b')");
is($out, 'f', 'a) a hold refused renewal past its lease: unlock returns false');
like($err, qr/Redis lock "b" was lost/, 'a) with a WARNING naming it');
$_->quit for ($s, $other);
$node->stop;

redis_stop($port);
done_testing();
