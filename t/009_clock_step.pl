# Lease schedules use a monotonic clock (SPEC 8): a step of the host's wall
# clock never lets a lease lapse. The postmaster runs under libfaketime
# (Debian package faketime) with its wall clock read from a file
# (FAKETIME_TIMESTAMP_FILE, re-read at every call: FAKETIME_NO_CACHE) and
# its monotonic clock left alone (FAKETIME_DONT_FAKE_MONOTONIC); Redis runs
# on the real clock. Holds taken with a lease of 3 s must stay held for
# three leases after the wall clock is stepped back an hour, renewed by the
# keeper (rwlock preloaded) or, without it, by the holder's own calls.
#
# Skipped when libfaketime is not installed (RWLOCK_FAKETIME_LIB names it
# if it is somewhere else).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my ($lib) = grep { defined && -r }
  ($ENV{RWLOCK_FAKETIME_LIB},
	'/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
	'/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
	'/usr/lib/faketime/libfaketime.so.1');
plan skip_all => 'libfaketime not found (apt-get install faketime, or set RWLOCK_FAKETIME_LIB)'
  unless $lib;

# 3 s: without the keeper the holders renew only at their calls, which this
# test makes every 0.3 s or so; a loaded machine has stalled it 2.3 s.
my $lease = 3;
my $port = redis_start();
my $clock = "$PostgreSQL::Test::Utils::tmp_check/faketime.rc";

sub set_clock
{
	my ($offset) = @_;
	open my $fh, '>', "$clock.tmp" or die "$clock.tmp: $!";
	print $fh "$offset\n";
	close $fh;
	rename "$clock.tmp", $clock or die "rename: $!";
}
set_clock('+0');

my %node;
{
	local $ENV{LD_PRELOAD} = $lib;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $clock;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node{keeper} = new_node('clk', port => $port, preload => 1, lease => "${lease}s");
	$node{lazy} = new_node('clknk', port => $port, lease => "${lease}s");
}
my %prefix = (keeper => 'tap_clk', lazy => 'tap_clknk');
note "Redis on port $port; lease ${lease}s; libfaketime $lib";

ok( defined wait_until(sub { keeper_pid($node{keeper}) ne '' }, 10),
	'the keeper runs on the preloaded node');

# PostgreSQL 15's postmaster forks the processes it starts when recovery
# ends (the keeper among them) inside its SIGCHLD handler, which interrupts
# libfaketime's wrapper of select(): a child forked there keeps
# libfaketime's "do not fake now" flag for ever and runs on the real clock
# (as does the postmaster inside its signal handlers). A keeper restarted
# after a second is forked from the postmaster's main loop and is faked
# like the sessions. So: restart the keeper, with the clock 10 minutes
# ahead (a clock behind would delay the restart: the handler records the
# exit on the real clock, the main loop waits on the faked one), and check
# by its backend_start that it is faked.
my $keeper_faked = 0;
for my $try (1 .. 3)
{
	set_clock('+600');
	my $old = keeper_pid($node{keeper});
	$node{keeper}->safe_psql('postgres', "SELECT pg_terminate_backend($old)") if $old;
	my $new = '';
	wait_until(sub { $new = keeper_pid($node{keeper}); $new ne '' && $new ne $old }, 10);
	my $lag = $new eq '' ? 'NaN' : $node{keeper}->safe_psql('postgres',
		"SELECT round(extract(epoch FROM now() - backend_start)) FROM pg_stat_activity WHERE pid = $new");
	set_clock('+0');
	note "keeper restart $try: pid $new, its clock is ${lag} s behind a faked session's";
	if ($lag ne 'NaN' && abs($lag) < 300)
	{
		$keeper_faked = 1;
		last;
	}
}
ok($keeper_faked, 'the keeper runs on the faked clock (after a restart)');

# On each node: a session with a write and a read lock, and a session idle
# in a transaction with an _xact write lock.
my (%holder, %xact);
for my $k ('keeper', 'lazy')
{
	$holder{$k} = session($node{$k});
	$xact{$k} = session($node{$k});
	my ($out) = sq($holder{$k}, "SELECT redis_wlock('w') > 0, redis_rlock('r') >= 0");
	is($out, 't|t', "$k: a session holds w and r");
	sq($xact{$k}, 'BEGIN');
	($out) = sq($xact{$k}, "SELECT redis_wlock_xact('x') > 0");
	is($out, 't', "$k: a session idle in a transaction holds x");
}
sleep 0.5;

set_clock('-3600');
my $stepped = time;
my ($skew) = sq($holder{lazy}, 'SELECT round(extract(epoch FROM clock_timestamp()))');
cmp_ok(abs(time - 3600 - $skew), '<', 30,
	"the servers' wall clock is stepped back an hour (server says $skew)");

# Three leases and more. Without the keeper, the holders renew at their
# calls: each makes one every half second (with the keeper they stay idle).
my %lapsed = (keeper => 0, lazy => 0);
my %first;
my $ticks = 0;
while (time - $stepped < 3 * $lease + 0.5)
{
	$ticks++;
	sq($holder{lazy}, "SELECT redis_try_rlock('tick')");
	sq($xact{lazy}, "SELECT redis_try_rlock('tick')");
	for my $k ('keeper', 'lazy')
	{
		my $st = join ',', map { lock_state($port, $prefix{$k}, $_) } qw(w r x);
		if ($st ne 'write,read,write')
		{
			$lapsed{$k}++;
			$first{$k} //= sprintf('%.1f s after the step: %s', time - $stepped, $st);
		}
	}
	sleep 0.3;
}
for my $k ('keeper', 'lazy')
{
	is($lapsed{$k}, 0,
		"$k: w, r and x stayed held in Redis for three leases after the step ($ticks checks)");
	diag sprintf('%s: holds lapsed in %d of %d checks%s', $k, $lapsed{$k}, $ticks,
		$first{$k} ? ", first $first{$k}" : '');
	my ($out, $err) = sq($holder{$k}, "SELECT redis_unlock('w'), redis_unlock('r')");
	is($out, 't|t', "$k: both unlocks return true");
	unlike($err, qr/was lost/, "$k: no hold reported lost") or diag $err;
	($out, $err) = sq($xact{$k}, 'COMMIT');
	unlike($err, qr/was lost/, "$k: COMMIT reports no lost hold") or diag $err;
}

set_clock('+0');
for my $k ('keeper', 'lazy')
{
	$_->quit for ($holder{$k}, $xact{$k});
	$node{$k}->stop;
}
redis_stop($port);
done_testing();
