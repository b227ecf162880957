# Releases that fail, time out or are refused, and grants whose bookkeeping
# is cut short, never let two sessions hold one write lock (SPEC 8: "A hold
# is never shared by mistake", "A release at commit needs nothing more from
# the session", "Bookkeeping is atomic with Redis's answer").
#
# 1. Redis loses its scripts (SCRIPT FLUSH, or a restart) between a
#    session's _xact lock and its COMMIT, and the session takes the same
#    lock again at once: the release sent at COMMIT (answered NOSCRIPT) must
#    not be replayed later over the new hold.
# 2. Redis is slow (CLIENT PAUSE) while a release or a downgrade is due: the
#    release times out; the session takes the lock again; once Redis
#    answers, what Redis holds for the session must match what the session
#    thinks it holds.
# 3. A COMMIT frees its _xact lock after SCRIPT FLUSH or a restart, with
#    no further call from the session.
# 4. statement_timeout fires while an acquisition is in flight, on a server
#    whose table of holds is full (the "table is full" WARNING would come
#    between the grant and its bookkeeping): the session's record and Redis
#    must agree afterwards.
# 5. A release Redis lost (a failover promoted a replica that never saw it)
#    leaves a read hold in Redis that its session let go of: the session's
#    next write lock must not take it for an upgrade of its own.
# 6. A connection's first call of each script carries the script's body
#    (EVAL): after a restart emptied Redis's script cache, a session's next
#    lock and unlock cost no NOSCRIPT round trip; after a SCRIPT FLUSH under
#    a kept connection, one NOSCRIPT is answered, and every script is sent
#    with its body once more.
# 7. Holds Redis lost (keys deleted), let go of by redis_unlock_all while
#    Redis is out of reach (stopped; frozen): the call says itself that it
#    could not release each of them (one warning a name), and no later call
#    reports a late "was lost" for them (issue 38): an unlock of such a name
#    afterwards gives one warning, that it is not held.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $prefix = 'tap_rel';
my $node = new_node('rel', port => $port, lease => '6s');
note "Redis on port $port; rwlock.lease = 6s, no keeper";

my $s1 = session($node);
my $s2 = session($node);
my ($out, $err, $secs);

sub first_line
{
	my ($e) = @_;
	my ($l) = ($e // '') =~ /((?:ERROR|FATAL|WARNING):[^\n]*)/;
	return $l // '(none)';
}

# What a session's redis_held_locks says of one name: (any hold, a write
# hold, the strongest mode of the holds it thinks it still has in Redis).
sub held_by
{
	my ($s, $name) = @_;
	my ($rows) = sq($s,
		"SELECT string_agg(mode || ':' || level || ':' || lease_state, ',' ORDER BY mode, level)"
		  . " FROM redis_held_locks WHERE name = '$name'");
	my @rows = grep { $_ ne '' } split /,/, ($rows // '');
	my $any = scalar @rows;
	my $write = grep { /^write:/ } @rows;
	my @live = grep { /:held$/ } @rows;
	my $mode = (grep { /^write:/ } @live) ? 'write' : @live ? 'read' : '';
	return ($any, $write, $mode, join(',', @rows));
}

# The invariants of scenarios 1 and 2: if $s holds $name, $other cannot take
# its write lock; if $s holds it for writing, Redis has it in write mode and
# $other cannot read it either; Redis holds for $s at least what $s thinks
# it holds (never less: that would let another session in), and with
# $strict exactly that (no release still owed for the name).
sub check_exclusion
{
	my ($s, $owner, $other, $name, $label, $strict) = @_;
	my ($any, $write, $mode, $rows) = held_by($s, $name);
	note "$label: redis_held_locks of $name: $rows; Redis: "
	  . lock_state($port, $prefix, $name);
	if ($any)
	{
		my ($got) = sq($other, "SELECT redis_try_wlock('$name')");
		is($got, 'f', "$label: $name is held ($rows), another session's try_wlock is false");
		sq($other, "SELECT redis_unlock('$name')") if $got eq 't';
	}
	if ($write)
	{
		is(lock_state($port, $prefix, $name), 'write',
			"$label: held for writing, and Redis has it in write mode");
		my ($got) = sq($other, "SELECT redis_try_rlock('$name')");
		is($got, 'f', "$label: another session's try_rlock is false");
		sq($other, "SELECT redis_unlock('$name')") if $got eq 't';
	}
	my $in_redis = redis_mode_of($port, $prefix, $name, $owner);
	if ($strict)
	{
		is($in_redis, $mode,
			"$label: Redis holds $name for the session in the mode it thinks ('$mode')");
	}
	else
	{
		my %rank = ('' => 0, read => 1, write => 2);
		cmp_ok($rank{$in_redis}, '>=', $rank{$mode},
			"$label: Redis holds $name for the session at least in the mode it thinks ('$mode')")
		  or diag "$label: Redis has '$in_redis'";
	}
}

# Back to nothing held anywhere.
sub reset_all
{
	for my $s (@_)
	{
		sq($s, 'ROLLBACK');
		sq($s, 'SELECT redis_unlock_all()');
	}
}

# ------------------------------------------------------------------
# 1. Two write holders after SCRIPT FLUSH or a Redis restart.
# ------------------------------------------------------------------
sq($s1, "SELECT redis_try_rlock('warm'), redis_unlock('warm')");
sq($s2, "SELECT redis_try_rlock('warm'), redis_unlock('warm')");
my $owner1 = session_owner($s1);
my $owner2 = session_owner($s2);
note "owners: $owner1, $owner2";

my @kinds = ((('flush') x 20), (('restart') x 3));
my ($n_excl, $n_unlock, $n_then) = (0, 0, 0);
my $iter = 0;
for my $kind (@kinds)
{
	$iter++;
	my $label = "1. $kind #$iter";
	if ($kind eq 'flush')
	{
		redis_cli($port, 'SCRIPT', 'FLUSH');
	}
	else
	{
		redis_stop($port);
		redis_start($port);
	}
	# One query string: COMMIT's release and the new acquisition go out
	# back to back, before the answer to the release can be read.
	($out, $err) = sq($s1,
		"BEGIN \\; SELECT redis_wlock_xact('x') > 0 \\; COMMIT \\; SELECT redis_wlock('x') > 0");
	is($out, "t\nt", "$label: session 1 takes x at xact level, commits, takes x again")
	  or diag "$label: $err";
	($out, $err) = sq($s1, "SELECT redis_try_rlock('side')");
	my ($any, $write, $mode, $rows) = held_by($s1, 'x');
	my ($got, $gerr) = sq($s2, "SELECT redis_try_wlock('x')");
	my $state = lock_state($port, $prefix, 'x');
	ok($any && $got eq 'f',
		"$label: session 1 holds x ($rows) and session 2's try_wlock('x') is false")
	  or diag "$label: session 2's try_wlock('x') gave '$got' " . first_line($gerr)
	  . "; Redis has x $state; "
	  . "session 1's call after: " . first_line($err);
	$n_excl++ if $any && $got eq 'f';
	sq($s2, "SELECT redis_unlock('x')") if $got eq 't';
	($out, $err) = sq($s1, "SELECT redis_unlock('x')");
	$n_unlock++ if $out eq 't';
	note "$label: session 1's unlock of x: $out " . first_line($err) if $out ne 't';
	($got) = sq($s2, "SELECT redis_try_wlock('x')");
	$n_then++ if $got eq 't';
	reset_all($s1, $s2);
}
diag sprintf('1. exclusion held in %d of %d iterations (20 SCRIPT FLUSH, 3 restarts)',
	$n_excl, scalar @kinds);
is($n_unlock, scalar @kinds, '1. session 1 could unlock x (true) in every iteration');
is($n_then, scalar @kinds, '1. session 2 then took x in every iteration');

# ------------------------------------------------------------------
# 2. Two holders when Redis is only slow: a release (or a downgrade) times
# out under CLIENT PAUSE; the session takes the lock again; after the pause
# Redis must agree with the session.
# ------------------------------------------------------------------
sq($s1, "SET rwlock.command_timeout = '1s'");

# Runs one variant: $setup takes the locks, $release is the statement that
# times out (and must warn), $retake takes the write lock again (it may fail
# with class 08 while the earlier release cannot complete, or succeed), all
# while Redis is paused for 2.5 s; then, after the pause, one more rwlock
# call and the checks.
sub slow_variant
{
	my (%v) = @_;
	my $label = "2. $v{label}";
	my $name = $v{name};
	for my $sql (@{ $v{setup} })
	{
		($out, $err) = sq($s1, $sql);
		unlike($err, qr/ERROR/, "$label: setup: $sql");
	}
	redis_cli($port, 'CLIENT', 'PAUSE', '2500', 'WRITE');
	my $paused = time;
	($out, $err, $secs) = sq($s1, $v{release});
	if ($v{release} =~ /redis_unlock/)
	{
		is($out, 'f', "$label: $v{release} on the paused Redis returns false");
		like($err, qr/WARNING/, "$label: $v{release} on the paused Redis gives a WARNING");
	}
	unlike($err, qr/ERROR/, "$label: and no ERROR");
	cmp_ok($secs, '<', 1.8, "$label: within command_timeout (1 s) + 0.8 s");
	diag sprintf('%s: %s on the paused Redis: %.3f s, %s', $label, $v{release}, $secs,
		first_line($err));
	sq($s1, 'BEGIN') if $v{xact};
	($out, $err, $secs) = sq($s1, $v{retake});
	my $took = $out eq 't';
	ok($took || sqlstate($err) =~ /^08/,
		"$label: $v{retake} either takes the lock or fails with class 08")
	  or diag "$label: $v{retake}: '$out' $err";
	diag sprintf('%s: %s, %.3f s after the pause began: %s', $label, $v{retake},
		time - $paused, $took ? 'took it' : first_line($err));
	sq($s1, 'ROLLBACK') if !$took && $v{xact};
	my $wait = 2.7 - (time - $paused);
	sleep $wait if $wait > 0;
	($out, $err) = sq($s1, "SELECT redis_try_rlock('side')");
	unlike($err, qr/ERROR/, "$label: the session's next rwlock call after the pause works")
	  or diag $err;
	check_exclusion($s1, $owner1, $s2, $name, "$label, after the pause", $took);
	if (!$took)
	{
		# Take it again now that Redis answers, and check once more.
		sq($s1, 'BEGIN') if $v{xact};
		($out, $err) = sq($s1, $v{retake});
		is($out, 't', "$label: $v{retake} works after the pause") or diag $err;
		sq($s1, "SELECT redis_try_rlock('side')");
		check_exclusion($s1, $owner1, $s2, $name, "$label, taken again after the pause", 1);
	}
	sq($s1, 'COMMIT') if $v{xact};
	check_exclusion($s1, $owner1, $s2, $name, "$label, at the end", 1);
	reset_all($s1, $s2);
	is(lock_state($port, $prefix, $name), 'free', "$label: $name is free once all is released");
}

slow_variant(
	label => 'release of a write lock',
	name => 'x2',
	setup => ["SELECT redis_wlock('x2') > 0"],
	release => "SELECT redis_unlock('x2')",
	xact => 1,
	retake => "SELECT redis_wlock_xact('x2') > 0");

slow_variant(
	label => 'downgrade by redis_unlock',
	name => 'x3',
	setup => ["SELECT redis_rlock('x3') >= 0, redis_wlock('x3') > 0"],
	release => "SELECT redis_unlock('x3')",
	xact => 0,
	retake => "SELECT redis_wlock('x3') > 0");

slow_variant(
	label => 'downgrade at COMMIT',
	name => 'x4',
	setup => [ "SELECT redis_rlock('x4') >= 0", 'BEGIN', "SELECT redis_wlock_xact('x4') > 0" ],
	release => 'COMMIT',
	xact => 1,
	retake => "SELECT redis_wlock_xact('x4') > 0");

sq($s1, 'RESET rwlock.command_timeout');

# ------------------------------------------------------------------
# 3. A COMMIT frees an _xact lock even when Redis lost its scripts, with no
# further call from the session; session 2, waiting, gets it at once.
# The lease (6 s) is far longer than what is allowed (0.5 s).
# ------------------------------------------------------------------
# Variants: SCRIPT FLUSH between the lock and COMMIT; a restart between
# them (the hold is lost with Redis's data: session 2 must not be blocked
# either); a restart, then another _xact lock in the same transaction (on
# the restarted Redis, which has the acquire script again but not the
# release script), which session 2 waits for.
for my $kind ('flush', 'restart', 'restart+relock')
{
	my $name = "x5_$kind";
	my $label = "3. $kind";
	sq($s1, 'BEGIN');
	($out) = sq($s1, "SELECT redis_wlock_xact('x5_$kind') > 0");
	is($out, 't', "$label: session 1 holds x5_$kind at xact level");
	if ($kind eq 'flush')
	{
		redis_cli($port, 'SCRIPT', 'FLUSH');
	}
	else
	{
		redis_stop($port);
		redis_start($port);
	}
	if ($kind eq 'restart+relock')
	{
		$name = 'x5_relock';
		($out, $err) = sq($s1, "SELECT redis_wlock_xact('$name') > 0");
		is($out, 't', "$label: session 1 takes $name at xact level on the restarted Redis")
		  or diag $err;
	}
	sq($s2, "SET lock_timeout = '10s'");
	my $started = sq_send($s2, "SELECT redis_wlock('$name') > 0");
	sleep 0.4;
	my @early = sq_wait($s2, 0);
	if ($kind ne 'restart')
	{
		ok(!@early, "$label: session 2 waits for $name");
	}
	my $committed = time;
	($out, $err) = sq($s1, 'COMMIT');
	unlike($err, qr/ERROR/, "$label: COMMIT works");
	# Session 1 now stays idle.
	my ($got, $gerr, $gsecs) = @early ? @early : sq_wait($s2, 12);
	my $after = defined $gsecs ? $started + $gsecs - $committed : undef;
	is($got, 't', "$label: session 2 gets $name") or diag "$label: " . ($gerr // 'still waiting');
	# Left to its lease, it would take 6 s; 2 s leaves room for a slow,
	# shared machine (typically 0.01 to 0.3 s).
	ok(defined $after && $after < 2, "$label: within 2 s of session 1's COMMIT, not its 6 s lease");
	diag sprintf('%s: session 2 got %s %s after the COMMIT (lease 6 s)', $label, $name,
		defined $after ? sprintf('%.3f s', $after) : 'not even 12 s');
	sleep 0.3;
	is(redis_mode_of($port, $prefix, $name, $owner2), 'write',
		"$label: and still holds it in Redis");
	sq($s2, 'RESET lock_timeout');
	reset_all($s1, $s2);
}

# ------------------------------------------------------------------
# 4. statement_timeout while an acquisition is in flight, with the table of
# holds full (the "table is full" WARNING, once per session, used to come
# between the grant and its record). A fresh session per try.
# ------------------------------------------------------------------
my $fnode = new_node('full', port => $port, preload => 1, lease => '10s',
	conf => "rwlock.max_holds = 16\n");
my $fprefix = 'tap_full';
my $filler = session($fnode);
($out) = sq($filler, "SELECT count(redis_wlock('fill' || i)) FROM generate_series(1, 16) i");
is($out, '16', '4. a session holds 16 locks');
($out) = sq($filler, 'SELECT count(*) FROM redis_locks');
is($out, '16', '4. the table of 16 holds is full');
my ($n_consistent, $n_timeout, $n_unlock4, $tries) = (0, 0, 0, 30);
for my $i (1 .. $tries)
{
	my $s = session($fnode);
	sq($s, "SELECT count(*) FROM redis_lock_info('warm')");    # connected
	my $owner = session_owner($s);
	sq($s, "SET statement_timeout = '150ms'");
	redis_cli($port, 'CLIENT', 'PAUSE', '300', 'WRITE');
	my $paused = time;
	($out, $err) = sq($s, "SELECT redis_wlock('n$i') > 0");
	my $state = sqlstate($err);
	$n_timeout++ if $state eq '57014';
	sq($s, 'RESET statement_timeout');
	my $wait = 0.35 - (time - $paused);
	sleep $wait if $wait > 0;
	sq($s, "SELECT redis_try_rlock('side')");
	my ($held) = sq($s, "SELECT count(*) FROM redis_held_locks WHERE name = 'n$i'");
	my $in_redis = redis_mode_of($port, $fprefix, "n$i", $owner);
	my $ok = ($held > 0) == ($in_redis ne '');
	$n_consistent++ if $ok;
	ok($ok, "4. try $i ($state): redis_held_locks shows n$i iff Redis holds it for the session")
	  or diag "4. try $i: redis_held_locks rows for n$i: $held; Redis: '$in_redis'; the call: "
	  . first_line($err);
	# redis_unlock works on anything redis_held_locks shows.
	my ($list) = sq($s,
		"SELECT string_agg(name || ':' || depth, ',') FROM redis_held_locks WHERE level = 'session'");
	my $all = 1;
	for my $nd (split /,/, $list)
	{
		my ($n, $d) = split /:/, $nd;
		for (1 .. $d)
		{
			my ($u, $uerr) = sq($s, "SELECT redis_unlock('$n')");
			$all = 0 if $u ne 't';
			note "4. try $i: redis_unlock('$n'): $u " . first_line($uerr) if $u ne 't';
		}
	}
	$n_unlock4++ if $all;
	$s->quit;
}
diag sprintf('4. %d of %d tries hit statement_timeout with the acquisition in flight; '
	  . '%d consistent', $n_timeout, $tries, $n_consistent);
cmp_ok($n_timeout, '>=', $tries / 2,
	'4. statement_timeout fired in at least half the tries (the scenario was reproduced)');
is($n_unlock4, $tries, '4. redis_unlock returned true for every hold redis_held_locks showed');

# ------------------------------------------------------------------
# 5. Read holds that Redis got back after their sessions let go of them:
# the hash as it was while both sessions held the read lock is written back
# after both unlocked (what a failover to a replica that missed the
# releases does). Each session's next write lock drops its own leftover
# reader field instead of waiting as an upgrade: taken for upgrades, the
# two would be a deadlock (40P01) at once.
# ------------------------------------------------------------------
{
	my ($g1, $g2) = (session($node), session($node));
	my $key = "$prefix:{ghost}";
	sq($_, "SELECT redis_rlock('ghost')") for $g1, $g2;
	my %fields = split /\n/, redis_cli($port, 'HGETALL', $key);
	my $pttl = redis_cli($port, 'PTTL', $key);
	sq($_, "SELECT redis_unlock('ghost')") for $g1, $g2;
	redis_cli($port, 'HSET', $key, %fields);
	redis_cli($port, 'PEXPIRE', $key, $pttl) if $pttl > 0;
	my @owners = map { session_owner($_) } $g1, $g2;
	my ($w, $r) = redis_holders($port, $prefix, 'ghost');
	is(join(',', sort @$r), join(',', sort @owners),
		'5. Redis has both read holds back after the sessions let go of them');
	sq($_, "SET lock_timeout = '20s'") for $g1, $g2;
	sq_send($_, "SELECT redis_wlock('ghost') > 0") for $g1, $g2;
	my ($first, $second);
	wait_until(sub { $first = sq_poll($g1) ? $g1 : sq_poll($g2) ? $g2 : undef; $first }, 20);
	$second = defined $first && $first == $g1 ? $g2 : $g1;
	my ($o1, $e1) = defined $first ? sq_wait($first, 1) : ('', 'nothing returned in 20 s');
	is($o1, 't', '5. one session takes the write lock') or diag $e1;
	($w) = redis_holders($port, $prefix, 'ghost');
	my $first_owner = defined $first && $first == $g1 ? $owners[0] : $owners[1];
	is($w, $first_owner, '5. Redis names it the writer');
	ok(!sq_poll($second), '5. the other waits');
	sq($first, "SELECT redis_unlock('ghost')");
	my ($o2, $e2) = sq_wait($second, 10);
	is($o2 // '', 't', '5. and takes the write lock once the first lets go (no 40P01)')
	  or diag $e2;
	($w, $r) = redis_holders($port, $prefix, 'ghost');
	is(scalar @$r, 0, '5. no reader field is left');
	sq($second, "SELECT redis_unlock('ghost')");
	$_->quit for $g1, $g2;
}

# 6. Scripts on a new connection, and after SCRIPT FLUSH. A Redis of its
# own, which only this session uses: its command counts are this session's.
{
	my $p6 = redis_start();
	my $s6 = session($node);
	sq($s6, "SET rwlock.redis_url = 'redis://127.0.0.1:$p6/0'");
	# Calls of a command since the last CONFIG RESETSTAT, and NOSCRIPTs.
	my $calls = sub {
		my ($cmd) = @_;
		my ($n) = redis_cli($p6, 'INFO', 'commandstats') =~ /^cmdstat_$cmd:calls=(\d+)/m;
		return $n // 0;
	};
	my $noscript = sub {
		my ($n) = redis_cli($p6, 'INFO', 'errorstats') =~ /^errorstat_NOSCRIPT:count=(\d+)/m;
		return $n // 0;
	};
	my $pair = "SELECT redis_wlock('scripts6') > 0 AND redis_unlock('scripts6')";

	($out, $err) = sq($s6, $pair);
	is($out, 't', '6. lock and unlock') or diag $err;
	redis_stop($p6);
	redis_start($p6);
	($out, $err) = sq($s6, $pair);
	is($out, 't', '6. lock and unlock after a restart') or diag $err;
	is($noscript->(), 0, '6. no NOSCRIPT: the new connection sent the scripts with their bodies');
	is($calls->('eval') . '/' . $calls->('evalsha'), '2/0', '6. by EVAL, both');
	redis_cli($p6, 'CONFIG', 'RESETSTAT');
	sq($s6, $pair);
	is($calls->('eval') . '/' . $calls->('evalsha'), '0/2', '6. then by EVALSHA');

	redis_cli($p6, 'SCRIPT', 'FLUSH');
	redis_cli($p6, 'CONFIG', 'RESETSTAT');
	($out, $err) = sq($s6, $pair);
	is($out, 't', '6. lock and unlock after SCRIPT FLUSH') or diag $err;
	is($noscript->(), 1, '6. one NOSCRIPT (the lock, sent again by EVAL): the unlock carried its body');
	is($calls->('eval'), 2, '6. two EVALs: the lock sent again, the unlock');
	$s6->quit;
	redis_stop($p6);
}

# 7. redis_unlock_all of lost holds while Redis is out of reach. A Redis of
# its own, stopped and frozen.
{
	my $p7 = redis_start();
	my $s7 = session($node);
	sq($s7, "SET rwlock.redis_url = 'redis://127.0.0.1:$p7/0'");
	sq($s7, "SET rwlock.command_timeout = '500ms'");
	sq($s7, "SET rwlock.connect_timeout = '500ms'");
	my $warnings_of = sub { my ($e) = @_; return scalar(() = $e =~ /WARNING:/g); };
	for my $how ('stopped', 'frozen')
	{
		my @names = ("u1$how", "u2$how");
		($out, $err) = sq($s7, "SELECT redis_wlock('$names[0]') > 0 AND redis_rlock('$names[1]') >= 0");
		is($out, 't', "7. $how: the session holds two locks") or diag $err;
		redis_cli($p7, 'DEL', map { "$prefix:{$_}" } @names);
		if ($how eq 'stopped') { redis_stop($p7); }
		else { redis_sigstop($p7); }
		($out, $err) = sq($s7, 'SELECT redis_unlock_all()');
		is($out, '2', "7. $how: redis_unlock_all counts both holds");
		is($warnings_of->($err), 2, "7. $how: two warnings") or diag $err;
		like($err, qr/WARNING:  08006: could not release Redis lock "$names[0]"/,
			"7. $how: that it could not release the first");
		like($err, qr/WARNING:  08006: could not release Redis lock "$names[1]"/,
			"7. $how: and the second");
		diag "7. $how, redis_unlock_all: " . strip_location($err);
		if ($how eq 'stopped') { redis_start($p7); }
		else { redis_sigcont($p7); }
		($out, $err) = sq($s7, "SELECT redis_wlock('v$how') > 0 AND redis_unlock('v$how')");
		is($out, 't', "7. $how: Redis back, a lock of another name");
		is($err, '', "7. $how: with no late warning about the holds let go of") or diag $err;
		($out, $err) = sq($s7, "SELECT redis_unlock('$names[0]')");
		is($out, 'f', "7. $how: an unlock of one of them: false");
		is($warnings_of->($err), 1, "7. $how: one warning") or diag $err;
		like($err, qr/you don't own a session-level hold of Redis lock "$names[0]"/,
			"7. $how: that it is not held");
		($out, $err) = sq($s7, "SELECT redis_wlock('$names[0]') > 0");
		is($out, 't', "7. $how: the session takes it again");
		is($err, '', "7. $how: with no late warning") or diag $err;
		sq($s7, 'SELECT redis_unlock_all()');
	}
	$s7->quit;
	redis_stop($p7);
}

$_->quit for ($s1, $s2, $filler);
$fnode->stop;
$node->stop;
redis_stop($port);
done_testing();
