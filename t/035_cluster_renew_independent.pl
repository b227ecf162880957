# The masters of one Redis Cluster are renewed independently (SPEC 13):
# a cluster of five masters without replicas (so a stopped master keeps
# its slots) and cluster-require-full-coverage off (so the others go on
# serving theirs), the keeper preloaded, lease 6 s, rwlock.command_timeout
# and rwlock.connect_timeout 1 s. An idle session holds a write lock in
# the slots of each master (two on the first). The master the URL names
# first (the one the keeper's own connection, which loads the slot map,
# talks to) is stopped with SIGSTOP for 10 s, longer than the lease: the
# least lease left on the other masters' locks (PTTL) stays near two
# thirds of the lease, and no other session takes them; meanwhile the slot
# of one of them is migrated by hand from one healthy master to another
# (ASK while migrating, MOVED after), and its renewals follow it there
# while the stopped master's are still unanswered; and redis_renew() in
# the holder's session renews the healthy masters' holds and warns of the
# stopped one's (undecided, not lost). Then, the master thawed, two of the
# five masters, each with a live hold, are stopped for 8 s: the locks on
# the others stay renewed the same way (renewed one master after another,
# they waited for both). The holder unlocks those with no warning.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = cluster_start(masters => 5, replicas => 0);
# With a master down the others serve their own slots (the default would
# answer CLUSTERDOWN for every slot once the master is marked failed).
redis_cli($_, 'CONFIG', 'SET', 'cluster-require-full-coverage', 'no')
  for @{ $c->{ports} };
my $url = cluster_url($c);
my $prefix = 'tap_cindep';
my $node = new_node('cindep', port => $c->{ports}[0], preload => 1, lease => '6s',
	conf => "rwlock.redis_url = '$url'\nrwlock.command_timeout = '1s'\n"
	  . "rwlock.connect_timeout = '1s'\n");

sub key_of { return "$prefix:{$_[0]}"; }

sub names_on { return cluster_names_on($c, $prefix, @_); }

ok( defined wait_until(sub { keeper_pid($node) ne '' }, 10), 'the keeper runs');
my $stalled = $c->{ports}[0];
my @healthy = grep { $_ != $stalled } cluster_masters($c);
is(scalar @healthy, 4, "four healthy masters: @healthy; $stalled to be stopped");
my %where;    # the master a name's slot is on (the sampler follows a move)
my %stopped;  # masters stopped now: never asked (redis-cli would hang)

# The writer's lease left on a name's lock (info.lua: it is not the hash's
# TTL) where its slot is, and if that master redirects (ASK, MOVED), on the
# others.
sub pttl_of
{
	my ($name) = @_;
	my $pttl = writer_lease_left($where{$name}, $prefix, $name);
	return $pttl if $pttl =~ /^-?\d+$/ && $pttl >= 0;
	$pttl = -2;
	for my $master (grep { !$stopped{$_} } @healthy)
	{
		my $p = writer_lease_left($master, $prefix, $name);
		next unless $p =~ /^-?\d+$/ && $p > $pttl;
		($pttl, $where{$name}) = ($p, $master);
	}
	return $pttl;
}
my @on_stalled = names_on($stalled, 'st', 2);
my %on_healthy = map { $_ => [ names_on($_, "h${_}_", 1) ] } @healthy;
my @healthy_names = map { @{ $on_healthy{$_} } } @healthy;
for my $m (@healthy) { $where{$_} = $m for @{ $on_healthy{$m} }; }

my $holder = session($node);
my $other = session($node);
for my $name (@on_stalled, @healthy_names)
{
	my ($out, $err) = sq($holder, "SELECT redis_wlock('$name') > 0");
	is($out, 't', "write lock on $name");
}
# The other session has its slot map (its first call loads it).
my ($out) = sq($other, "SELECT redis_try_wlock('$healthy_names[0]')");
is($out, 'f', 'another session cannot take it');
sleep 2.5;    # renewed once by the keeper, its connections open

redis_sigstop($stalled);
$stopped{$stalled} = 1;
my $t0 = time;
my %min = map { $_ => 1e9 } @healthy_names;
my $got = 0;
my $last_try = 0;
my $samples = 0;
my $moved = $on_healthy{ $healthy[0] }[0];
my $moved_at;
my ($renewed, $renew_err, $renew_secs);
while (time - $t0 < 10)
{
	for my $name (@healthy_names)
	{
		my $pttl = pttl_of($name);
		$min{$name} = $pttl if $pttl < $min{$name};
	}
	$samples++;
	# A session renews through the same code (without the keeper, or by
	# redis_renew()), before the stopped master's holds lapse.
	if (!defined $renew_secs && time - $t0 > 1.5)
	{
		($renewed, $renew_err, $renew_secs) = sq($holder, 'SELECT redis_renew()');
	}
	if (!defined $moved_at && time - $t0 > 3)
	{
		cluster_move_slot(key_slot(key_of($moved)), @healthy[0, 1], 0.3);
		$moved_at = time - $t0;
	}
	if (time - $last_try > 0.5)
	{
		for my $name (@healthy_names)
		{
			($out) = sq($other, "SELECT redis_try_wlock('$name')");
			$got++ if $out eq 't';
		}
		$last_try = time;
	}
	sleep 0.1;
}
redis_sigcont($stalled);
delete $stopped{$stalled};
is($renewed, scalar @healthy_names,
	'redis_renew() with a master stopped: the healthy masters\' holds renewed');
like($renew_err, qr/could not renew the lease of Redis lock "$on_stalled[0]"/,
	'the stopped master\'s holds undecided: a warning');
unlike($renew_err, qr/lost|"h\d+_/, 'no hold reported lost, no warning for a healthy one');
cmp_ok($renew_secs, '<', 3, sprintf('within the timeouts (%.1f s)', $renew_secs));
my $least = 1e9;
$least = $_ < $least ? $_ : $least for values %min;
is(cluster_slot_owner($c, key_slot(key_of($moved)),
		cluster_ranges($c, $healthy[1])),
	$healthy[1], sprintf('the slot of %s moved to %d at %.1f s', $moved, $healthy[1], $moved_at));
diag "master $stalled stopped 10 s: least lease left on the healthy masters' locks "
  . join(', ', map { "$_ $min{$_} ms" } @healthy_names)
  . " ($samples samples; lease 6000 ms, renewed at 4000 left)";
cmp_ok($least, '>', 3300,
	'the locks on the healthy masters were renewed on time while a master of the same cluster stalled (least lease left > 3.3 s)');
is($got, 0, 'nobody else took a lock on a healthy master');

# Two of the five masters stopped at once, both with a live hold: the
# others' locks are renewed on time all the same (masters renewed one
# after another, they waited for both).
ok(cluster_wait_ok($c, 30), 'the stopped master is back in the cluster');
sleep 2.5;    # renewed again, the connections made again
my @pair = @healthy[2, 3];
my @on_rest = grep { $where{$_} != $pair[0] && $where{$_} != $pair[1] } @healthy_names;
is(scalar @on_rest, 2, "@on_rest on the masters that go on");
redis_sigstop($_), $stopped{$_} = 1 for @pair;
$t0 = time;
%min = map { $_ => 1e9 } @on_rest;
($got, $samples) = (0, 0);
while (time - $t0 < 8)
{
	for my $name (@on_rest)
	{
		my $pttl = pttl_of($name);
		$min{$name} = $pttl if $pttl < $min{$name};
	}
	$samples++;
	if (time - $last_try > 0.5)
	{
		for my $name (@on_rest)
		{
			($out) = sq($other, "SELECT redis_try_wlock('$name')");
			$got++ if $out eq 't';
		}
		$last_try = time;
	}
	sleep 0.1;
}
redis_sigcont($_), delete $stopped{$_} for @pair;
$least = 1e9;
$least = $_ < $least ? $_ : $least for values %min;
diag "masters @pair stopped 8 s: least lease left on the others' locks "
  . join(', ', map { "$_ $min{$_} ms" } @on_rest) . " ($samples samples)";
cmp_ok($least, '>', 3300,
	'two masters stalled: the others\' locks were renewed on time (least lease left > 3.3 s)');
is($got, 0, 'nobody else took a lock on the other masters');
for my $name (@on_rest)
{
	my ($o, $e) = sq($holder, "SELECT redis_unlock('$name')");
	is($o, 't', "$name: its holder unlocks it: true");
	is($e, '', "$name: with no warning");
}
sq($holder, 'SELECT redis_unlock_all()');

eval { $_->quit } for ($holder, $other);
$node->stop;
done_testing();
