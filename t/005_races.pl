# Renewals racing releases: with a lease of 600 ms the keeper renews every
# hold 200 ms after it was taken or last renewed, while two sessions take
# and release the same three locks, holding each for 100-700 ms (often longer
# than the lease, so renewal is needed), so renewals are often
# in flight while a release is sent. No hold may be reported lost, and no
# renewal may bring a released lock back.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('races', port => $port, preload => 1, lease => '600ms');
note "Redis on port $port; rwlock.lease = 600ms";

my $loop = q{
DO $$
DECLARE n text;
BEGIN
  FOR i IN 1..30 LOOP
    n := 'race' || (i % 3);
    IF i % 4 = 0 THEN
      PERFORM redis_rlock(n);
      PERFORM redis_rlock(n);
      PERFORM pg_sleep(0.1 + random() * 0.6);
      IF NOT (redis_unlock(n) AND redis_unlock(n)) THEN
        RAISE EXCEPTION 'read hold of % lost at %', n, i;
      END IF;
    ELSE
      PERFORM redis_wlock(n);
      PERFORM pg_sleep(0.1 + random() * 0.6);
      IF NOT redis_unlock(n) THEN RAISE EXCEPTION 'write hold of % lost at %', n, i; END IF;
    END IF;
  END LOOP;
END $$};

my @s = (session($node), session($node));
my $t0 = time;
for my $s (@s)
{
	$s->{stderr} = '';
	$s->{stdin} .= "$loop;\n\\echo done\n";
	$s->{run}->pump_nb;
}
for my $s (@s)
{
	$s->{run}->pump until $s->{stdout} =~ /done/ || $s->{timeout}->is_expired;
}
diag sprintf('two sessions, 30 holds each of 100-700 ms on 3 names: %.1f s', time - $t0);
is($s[0]{stderr}, '', 'first session: every unlock true, no warning');
is($s[1]{stderr}, '', 'second session: every unlock true, no warning');
sleep 0.3;
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_locks'), '0',
	'redis_locks is empty');
is(join(',', map { lock_state($port, 'tap_races', "race$_") } 0 .. 2),
	'free,free,free', 'every lock is free in Redis');
like($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'rwlock keeper'"),
	qr/^1$/, 'the keeper ran throughout');

$_->quit for @s;
$node->stop;
redis_stop($port);
done_testing();
