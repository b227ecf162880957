# redis_lock_stats rows are reclaimed (issue 38, "Smaller": rows were
# never reclaimed; dropped databases kept theirs, past 127 databases new
# ones counted in row 0, redis_lock_stats_reset() there zeroed everyone's,
# and a reused database OID inherited old counts).
#  a) a dropped database's row goes;
#  b) a database created with the OID of a dropped one starts at zero;
#  c) redis_lock_stats_reset() zeroes only the caller's database's row;
#  d) after 140 databases were created, used and dropped one after another,
#     a new database still gets a row of its own.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $port = redis_start();
my $node = new_node('statrows', port => $port, preload => 1, lease => '30s');
$node->safe_psql('template1', 'CREATE EXTENSION rwlock');

sub lock_in
{
	my ($db, $n) = @_;
	$node->safe_psql($db, "SELECT count(redis_wlock('s' || i)) FROM generate_series(1, $n) i; SELECT redis_unlock_all()");
}

sub stats_of
{
	my ($oid) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(write_session::text, ','), 'none') FROM redis_lock_stats WHERE datid = $oid");
}

# ---- a) a dropped database ----
$node->safe_psql('postgres', 'CREATE DATABASE sa');
my $oid_a = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'sa'");
lock_in('sa', 3);
is(stats_of($oid_a), '3', 'a) a database has its row');
$node->safe_psql('postgres', 'DROP DATABASE sa');
lock_in('postgres', 1);
is(stats_of($oid_a), 'none', 'a) once dropped, its row goes');

# ---- b) a reused OID ----
$node->safe_psql('postgres', 'CREATE DATABASE sb');
my $oid_b = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'sb'");
lock_in('sb', 5);
$node->safe_psql('postgres', 'DROP DATABASE sb');
$node->safe_psql('postgres', "CREATE DATABASE sb2 OID = $oid_b");
lock_in('sb2', 1);
is(stats_of($oid_b), '1', 'b) a database with a dropped one\'s OID starts at zero');

# ---- c) a reset ----
lock_in('postgres', 2);
my $pg_oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'postgres'");
my $before = stats_of($pg_oid);
cmp_ok($before, '>=', 3, 'c) postgres has counts');
$node->safe_psql('sb2', 'SELECT redis_lock_stats_reset()');
is(stats_of($oid_b), '0', 'c) the reset zeroes its database\'s row');
is(stats_of($pg_oid), $before, 'c) and no other');

# ---- d) many databases, one after another ----
for my $i (1 .. 140)
{
	$node->safe_psql('postgres', "CREATE DATABASE sd$i STRATEGY = FILE_COPY");
	lock_in("sd$i", 1);
	$node->safe_psql('postgres', "DROP DATABASE sd$i");
}
$node->safe_psql('postgres', 'CREATE DATABASE slast');
my $oid_l = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'slast'");
lock_in('slast', 4);
is(stats_of($oid_l), '4', 'd) after 140 databases came and went, a new one has a row of its own');
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM redis_lock_stats');
cmp_ok($rows, '<=', 4, "d) and no row of a dropped database is left ($rows rows)");
$node->safe_psql('slast', 'SELECT redis_lock_stats_reset()');
is(stats_of($pg_oid), $before, 'd) its reset touches no other row');
$node->stop;
done_testing();
