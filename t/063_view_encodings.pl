# Names are text of the database that shows them (issue 38, "Encodings":
# a name locked in a SQL_ASCII database reached a UTF8 database through
# redis_locks as invalid UTF-8, which CREATE TABLE AS stored and pg_dump
# could not restore).
#  a) a name locked in a LATIN1 database shows in a UTF8 database converted
#     (é, as UTF-8);
#  b) a name locked in a SQL_ASCII database, with a byte that is no UTF-8,
#     shows escaped (\xe9);
#  c) the same for a waiting session's row;
#  d) a table made of what the view shows dumps and restores.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $port = redis_start();
my $node = new_node('enc', port => $port, preload => 1, lease => '30s');
is($node->safe_psql('postgres', 'SHOW server_encoding'), 'UTF8', 'the viewing database is UTF8');
for (['latin', 'LATIN1'], ['ascii', 'SQL_ASCII'])
{
	my ($db, $enc) = @$_;
	$node->safe_psql('postgres',
		"CREATE DATABASE $db ENCODING '$enc' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql($db, 'CREATE EXTENSION rwlock');
}

my $l = $node->background_psql('latin', on_error_stop => 0);
$l->query_safe(q{SELECT redis_wlock(E'lat\\xe9')});
my $s = $node->background_psql('ascii', on_error_stop => 0);
$s->query_safe(q{SELECT redis_wlock(E'asc\\xe9')});

# ---- a), b) ----
# psql, not safe_psql: before, convert_to failed on the view's invalid UTF-8.
sub q_utf8 { my (undef, $out, $err) = $node->psql('postgres', $_[0]); return $out ne '' ? $out : $err; }
my $got = q_utf8(
	q{SELECT string_agg(h, ',' ORDER BY h COLLATE "C") FROM (SELECT encode(convert_to(name, 'UTF8'), 'hex') h FROM redis_locks) s});
is($got, '6173635c786539,6c6174c3a9',
	"a), b) LATIN1's name converted (lat + c3a9), SQL_ASCII's byte escaped (asc + \\xe9)");

# ---- c) a waiter ----
my $w = $node->background_psql('ascii', on_error_stop => 0);
sq_send($w, q{SET lock_timeout = '20s'; SELECT redis_wlock(E'asc\\xe9');});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', 'SELECT count(*) FROM redis_locks WHERE NOT granted') eq '1';
}, 10), 'c) a session of the SQL_ASCII database waits');
$got = q_utf8(
	q{SELECT encode(convert_to(name, 'UTF8'), 'hex') FROM redis_locks WHERE NOT granted});
is($got, '6173635c786539', 'c) its row shows the name escaped too');

# ---- d) dump and restore ----
$node->safe_psql('postgres', 'CREATE TABLE shown AS SELECT name, mode, granted FROM redis_locks');
my $dump = $node->basedir . '/shown.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-t', 'shown', '-f', $dump ],
	'd) the table dumps');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
my ($ret, $out, $err) = $node->psql('restored', undef, extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $dump ]);
is($ret, 0, 'd) and restores') or diag $err;
is($node->safe_psql('restored', 'SELECT count(*) FROM shown'), '3', 'd) every row');

$s->query_safe('SELECT redis_unlock_all()');
$l->query_safe('SELECT redis_unlock_all()');
$_->quit for ($l, $s, $w);
$node->stop;
done_testing();
