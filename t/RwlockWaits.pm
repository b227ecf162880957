# RwlockWaits.pm: what the deadlock TAP tests (t/032, t/033, t/038) share:
# sessions holding _xact write locks, waiting for a set of sessions'
# requests to end (ending each transaction at once, so that a victim's
# abort lets the next one on), and pgbench runs of a lock script on
# several servers at once; and a fault struck in a child process, so that
# the sessions' ends are seen while it lasts.
package RwlockWaits;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use RwlockTest;
use Time::HiRes qw(time sleep);
use POSIX ();

our @EXPORT = qw(holding finish_all pgbench_each in_background background_done);

# A session of $node in a transaction that holds the write lock $name
# (_xact: a deadlock victim's abort frees it, as in PostgreSQL).
sub holding
{
	my ($node, $name) = @_;
	my $s = session($node);
	sq($s, "BEGIN");
	my ($out, $err) = sq($s, "SELECT redis_wlock_xact('$name') > 0");
	die "could not take $name: $err" unless $out eq 't';
	return $s;
}

# Wait for every session's request to end (at most $secs s), ending each
# one's transaction as soon as its request ends. Returns the sqlstates (or
# 'granted', or 'still waiting'), the errors, the seconds taken, and for
# each session the seconds from $t_from to the end of its request.
sub finish_all
{
	my ($sessions, $secs, $t_from) = @_;
	my (@states, @errs, @ended);
	my $t_end = time + $secs;
	my $left = scalar @$sessions;
	while ($left > 0 && time < $t_end)
	{
		for my $i (0 .. $#$sessions)
		{
			next if defined $states[$i] || !sq_poll($sessions->[$i]);
			my ($out, $err) = sq_wait($sessions->[$i], 1);
			$states[$i] = sqlstate($err) || ($out eq 't' ? 'granted' : "other: $out $err");
			$errs[$i] = $err;
			$ended[$i] = time - $t_from;
			sq($sessions->[$i], 'ROLLBACK');
			$left--;
		}
		sleep 0.02;
	}
	for my $i (0 .. $#$sessions)
	{
		next if defined $states[$i];
		$states[$i] = 'still waiting';
		$errs[$i] = '';
		$ended[$i] = 99;
	}
	return (\@states, \@errs, time - $t_from, \@ended);
}

# pgbench of $script on each of @$nodes at once ($clients each, $secs s);
# checks that each ran at least $min transactions and printed no error.
sub pgbench_each
{
	my ($nodes, $script, $clients, $secs, $min, $what) = @_;
	my @runs;
	for my $n (@$nodes)
	{
		my %r = (out => '', err => '');
		$r{h} = IPC::Run::start([ 'pgbench', '-n', '-c', $clients, '-j', '2', '-T', $secs,
			'-f', $script, '-h', $n->host, '-p', $n->port, 'postgres' ],
			'>', \$r{out}, '2>', \$r{err});
		push @runs, \%r;
	}
	for my $r (@runs)
	{
		$r->{h}->finish;
		my ($tx) = $r->{out} =~ /number of transactions actually processed: (\d+)/;
		cmp_ok($tx // 0, '>', $min, "$what pgbench ran transactions (" . ($tx // 0) . ')')
		  or diag "$r->{out}\n$r->{err}";
		is($r->{err} =~ /ERROR|aborted/ ? $r->{err} : '', '', "$what with no error");
	}
}

# Run $code in a child process (a fault that takes a while: the test goes
# on meanwhile, e.g. into finish_all). Its return value, a number, is
# written to a file that background_done reads. The child leaves by
# POSIX::_exit: no END block of the parent's runs there (they stop servers).
sub in_background
{
	my ($code) = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/background.$$." . int(rand(1e9));
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		my $v = eval { $code->() };
		if (open(my $fh, '>', $file))
		{
			print $fh (defined $v ? $v : 'error: ' . ($@ || 'undef'));
			close $fh;
		}
		POSIX::_exit(0);
	}
	return [ $pid, $file ];
}

# Wait for a child of in_background; returns what its code returned.
sub background_done
{
	my ($bg) = @_;
	waitpid($bg->[0], 0);
	open(my $fh, '<', $bg->[1]) or return undef;
	my $v = <$fh>;
	close $fh;
	unlink $bg->[1];
	return $v;
}

1;
