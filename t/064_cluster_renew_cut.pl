# A Cluster renewal cut short by an interrupt after some masters answered
# keeps their answers (issue 38, "Smaller": it dropped all the results).
# Three masters, no keeper (the session renews its own holds), lease 3 s,
# rwlock.command_timeout 5 s. The session holds a lock on master 1 (a) and
# one on master 2 (b); master 2 is stopped. Two seconds in, redis_renew()
# under a statement_timeout of 0.5 s: master 1 answers at once, master 2
# never, and the timeout cuts the call (57014). At 3.4 s, past the lease
# of the acquisition, the session must still count a as held (renewed at
# 2 s, as Redis has it), not lost; b, never renewed, is lost.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = cluster_start(masters => 3, replicas => 0);
redis_cli($_, 'CONFIG', 'SET', 'cluster-require-full-coverage', 'no')
  for @{ $c->{ports} };
my $url = cluster_url($c);
my $prefix = 'tap_ccut';
my $node = new_node('ccut', port => $c->{ports}[0], lease => '3s',
	conf => "rwlock.redis_url = '$url'\nrwlock.command_timeout = '5s'\n"
	  . "rwlock.connect_timeout = '1s'\n");
my @masters = cluster_masters($c);
my ($m1, $m2) = @masters[0, 1];
my $a = cluster_names_on($c, $prefix, $m1, 'a');
my $b = cluster_names_on($c, $prefix, $m2, 'b');

my $s = session($node);
my $t0 = time;
my ($out, $err) = sq($s, "SELECT redis_wlock('$a') > 0, redis_wlock('$b') > 0");
is($out, 't|t', "the session holds $a (on $m1) and $b (on $m2)") or diag $err;
redis_sigstop($m2);
sleep(2.0 - (time - $t0)) if time - $t0 < 2.0;
($out, $err) = sq($s, "SET statement_timeout = '500ms'; SELECT redis_renew()");
is(sqlstate($err), '57014', 'redis_renew() is cut by statement_timeout') or diag $err;
sq($s, 'RESET statement_timeout');
my $pttl = writer_lease_left($m1, $prefix, $a);
cmp_ok($pttl, '>', 1500, "Redis renewed $a ($pttl ms left)");
sleep(3.4 - (time - $t0)) if time - $t0 < 3.4;
($out) = sq($s, "SELECT string_agg(name || ':' || lease_state, ',' ORDER BY name) FROM redis_held_locks");
is($out, "$a:held,$b:lost", "at 3.4 s the session counts $a held (its renewal answered before the cut), $b lost");
redis_sigcont($m2);
sq($s, 'SELECT redis_unlock_all()');
$s->quit;
$node->stop;
done_testing();
