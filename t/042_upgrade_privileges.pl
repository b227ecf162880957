# Privileges that survive upgrades: the README's recipe of "Privileges"
# (extension in a schema of its own, functions revoked from PUBLIC and
# granted to lock_users but the statistics reset) and its "Upgrading" block
# (run after each ALTER EXTENSION rwlock UPDATE), both taken from README.md
# as written. A cluster that installs 1.0 with the recipe and updates
# through every later version, running the upgrade block after each, must
# give every role exactly the rights a fresh install with the recipe gives:
# EXECUTE on each function of the extension (pg_proc, through pg_depend),
# SELECT on each view, USAGE on the schema, for lock_users, a member of it
# (billing) and a role with no grant (PUBLIC's rights). As a control, the
# old recipe (the REVOKE alone after an update) must differ: lock_users
# without the new functions (redis_lock_stats_fn behind redis_lock_stats).
# No Redis is needed: nothing here takes a lock.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = slurp_file("$FindBin::RealBin/../README.md");

# The first ```sql block of the section with this heading.
sub block_of
{
	my ($heading) = @_;
	my ($section) = $readme =~ /^## \Q$heading\E\n(.*?)(?=^## |\z)/ms;
	die "README.md has no section $heading" unless defined $section;
	my ($code) = $section =~ /^```sql\n(.*?)^```/ms;
	die "README.md's $heading has no sql block" unless defined $code;
	return $code;
}

my $recipe = block_of('Privileges');
my $upgrade = block_of('Upgrading');
like($recipe, qr/^CREATE EXTENSION rwlock SCHEMA rwlock;$/m,
	"README's Privileges recipe creates the extension in its schema");
like($upgrade, qr/^ALTER EXTENSION rwlock UPDATE;$/m,
	"README's Upgrading block updates the extension");

# Every right of the roles the recipe names, and of a role with no grant,
# on every object of the extension, one line each.
my $rights_sql = q{
WITH ext AS (SELECT classid, objid FROM pg_depend
              WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock')
                AND refclassid = 'pg_extension'::regclass AND deptype = 'e'),
     roles AS (SELECT oid, rolname FROM pg_roles
                WHERE rolname IN ('lock_users', 'billing', 'other_app'))
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
  SELECT r.rolname || ' EXECUTE ' || p.oid::regprocedure || ' ' ||
         has_function_privilege(r.oid, p.oid, 'EXECUTE') AS line
    FROM ext JOIN pg_proc p ON ext.classid = 'pg_proc'::regclass AND p.oid = ext.objid, roles r
  UNION ALL
  SELECT r.rolname || ' SELECT ' || c.oid::regclass || ' ' ||
         has_table_privilege(r.oid, c.oid, 'SELECT')
    FROM ext JOIN pg_class c ON ext.classid = 'pg_class'::regclass AND c.oid = ext.objid, roles r
  UNION ALL
  SELECT r.rolname || ' USAGE schema rwlock ' || has_schema_privilege(r.oid, 'rwlock', 'USAGE')
    FROM roles r) s};

# A cluster with the roles the recipe names (as a DBA would have them),
# and another application's role.
sub node_with_roles
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->start;
	$node->safe_psql('postgres', 'CREATE ROLE billing LOGIN; CREATE ROLE other_app LOGIN;');
	return $node;
}

my $fresh = node_with_roles('fresh');
$fresh->safe_psql('postgres', $recipe);
my $want = $fresh->safe_psql('postgres', $rights_sql);
like($want, qr/^lock_users EXECUTE rwlock\.redis_lock_stats_fn\(\) true$/m,
	'fresh install with the recipe: lock_users may run the function behind redis_lock_stats');
like($want, qr/^other_app EXECUTE rwlock\.redis_wlock\(text\) false$/m,
	'... another role may not lock');
like($want, qr/^billing EXECUTE rwlock\.redis_lock_stats_reset\(\) false$/m,
	'... nor may billing reset the statistics');

my @versions = split /\n/, $fresh->safe_psql('postgres', q{
	SELECT version FROM pg_available_extension_versions WHERE name = 'rwlock'
	 ORDER BY string_to_array(version, '.')::int[]});
is($versions[0], '1.0', 'the oldest version is 1.0');
cmp_ok(scalar @versions, '>=', 3, 'versions: ' . join(' ', @versions));

# Run a block statement by statement. A statement naming a function the
# installed version does not have yet (the statistics reset came in 1.2) is
# left out, as a DBA on that version would have had nothing to revoke.
sub run_block
{
	my ($node, $block) = @_;
	for my $stmt (grep { /\S/ } split /;\s*\n/, $block)
	{
		if ($stmt =~ /ON FUNCTION (\S+\(\))/)
		{
			next if $node->safe_psql('postgres',
				"SELECT to_regprocedure('$1') IS NULL") eq 't';
		}
		$node->safe_psql('postgres', "$stmt;");
	}
}

# Install the oldest version with the recipe, then update through @path
# (each update followed by the given block: the README's, or the old one).
sub upgraded_rights
{
	my ($node, $after, @path) = @_;
	(my $old_recipe = $recipe) =~
	  s/^CREATE EXTENSION rwlock SCHEMA rwlock;$/CREATE EXTENSION rwlock SCHEMA rwlock VERSION '1.0';/m;
	run_block($node, $old_recipe);
	for my $v (@path)
	{
		(my $step = $after) =~
		  s/^ALTER EXTENSION rwlock UPDATE;$/ALTER EXTENSION rwlock UPDATE TO '$v';/m;
		run_block($node, $step);
		is($node->safe_psql('postgres',
				"SELECT extversion FROM pg_extension WHERE extname = 'rwlock'"),
			$v, $node->name . ": updated to $v");
	}
	return $node->safe_psql('postgres', $rights_sql);
}

my @steps = @versions[ 1 .. $#versions ];
my $up = node_with_roles('upgraded');
my $got = upgraded_rights($up, $upgrade, @steps);
is($got, $want,
	"1.0 -> " . join(' -> ', @steps)
	  . " with the README's upgrade block after each update: every role's rights as a fresh install's");
my $direct = node_with_roles('direct');
is(upgraded_rights($direct, $upgrade, $versions[-1]), $want,
	"1.0 -> $versions[-1] in one update, the same");

# The control: the recipe this replaced ("run the REVOKE again").
my $old = node_with_roles('old_recipe');
my $old_got = upgraded_rights($old,
	"ALTER EXTENSION rwlock UPDATE;\nREVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA rwlock FROM PUBLIC;\n",
	@steps);
isnt($old_got, $want, 'the old recipe (REVOKE alone) ends with other rights: the comparison can fail');
like($old_got, qr/^lock_users EXECUTE rwlock\.redis_lock_stats_fn\(\) false$/m,
	'... lock_users without redis_lock_stats_fn, as issue 39 found');

# What lock_users may do after the update, as billing would see it.
my ($rc, $out, $err) = $up->psql('postgres',
	'SET ROLE billing; SELECT count(*) >= 0 FROM rwlock.redis_lock_stats;');
is($rc, 0, 'billing reads redis_lock_stats after the update') or diag($err);
($rc, $out, $err) = $old->psql('postgres',
	'SET ROLE billing; SELECT count(*) >= 0 FROM rwlock.redis_lock_stats;');
like($err, qr/permission denied for function redis_lock_stats_fn/,
	'... which the old recipe refused');

done_testing();
