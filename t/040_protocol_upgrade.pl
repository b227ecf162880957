# Upgrading a fleet from protocol 2 to 3 (docs/protocol.md 2 and 2.1): a
# client still speaking protocol 2 and SQL sessions speaking 3 on one Redis.
# The protocol 2 client is redis-cli running protocol 2's own scripts,
# test/fixtures/protocol2/{acquire,release,renew}.lua (byte for byte the
# lua/ files of d2d460a, the last commit of protocol 2).
#  a) a protocol 2 writer holds "x": SQL's try forms, redis_wlock under
#     lock_timeout (at once, not at the timeout) and redis_lock_info fail
#     with 55000, RWLOCK_VERSION in the detail; the hash is untouched (no
#     s: field) and the holder still renews;
#  b) once it releases, SQL takes "x" (a free protocol 2 lock is taken
#     over) with a token above the protocol 2 one; from then on "x" speaks
#     3: the protocol 2 client gets RWLOCK_VERSION, also after SQL's
#     release (the hash lives on, keep ms);
#  c) SQL holds "y": protocol 2's acquire (both modes), renew and release
#     get RWLOCK_VERSION and change nothing; a lock SQL only ever read
#     stays protocol 3 after its last reader's release too;
#  d) a protocol 2 reader holds "z" (a protocol 2 token kept in the hash):
#     SQL's read and write tries and redis_lock_info fail with 55000, the
#     reader's renew.lua still works, its release frees it, then SQL reads
#     it (the protocol 2 token) and writes it (a larger token);
#  e) a protocol 2 lock nobody holds but a protocol 2 writer waits for (a
#     live intent) is not free: 55000; once the intent lapses (its waiter
#     gone), SQL takes it.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $port = redis_start();
my $node = new_node('upgrade', port => $port, preload => 1, lease => '5s');
my $prefix = 'tap_upgrade';
my $keep = 600000;

# Protocol 2's scripts, as shipped before protocol 3: their SHA1s are those
# a protocol 2 client loads (a change to a fixture would test something else).
my %sha1 = (
	acquire => 'fcb2b2999a84ff36efa6a00cd7621c9f459cf9f0',
	release => 'ce92e3e3160c7aacc68ad1c4c3c33be7a5f43b55',
	renew => '8297a41f8b7751a8e8061f9b5347df08cef0e5ea');
my %p2lua;
for my $s (sort keys %sha1)
{
	$p2lua{$s} = slurp_file("$FindBin::RealBin/../test/fixtures/protocol2/$s.lua");
	is(sha1_hex($p2lua{$s}), $sha1{$s}, "fixture $s.lua is protocol 2's, byte for byte");
	like($p2lua{$s}, qr/\A-- rwlock protocol 2: /, "... and says so");
}

# A protocol 2 call (EVAL of the fixture): KEYS the lock's hash and queue,
# ARGV[1] "2", then the script's own arguments in protocol 2's layout:
#   acquire: owner, mode, lease, mark, keep[, held "-" / "r"]
#   release: owner, what is kept ("" / "r" / "q"), lease, keep
#   renew:   owner, lease, keep
# Returns redis-cli's answer: an integer, or the error reply's text.
sub p2
{
	my ($script, $name, @args) = @_;
	return redis_cli($port, 'EVAL', $p2lua{$script}, '2', "$prefix:{$name}",
		"$prefix:{$name}:q", '2', @args);
}
sub p2_acquire { my ($name, $owner, $mode, $mark) = @_;
	return p2('acquire', $name, $owner, $mode, '30000', $mark // '0', $keep, '-'); }
sub p2_release { my ($name, $owner) = @_;
	return p2('release', $name, $owner, '', '30000', $keep); }
sub p2_renew { my ($name, $owner) = @_;
	return p2('renew', $name, $owner, '30000', $keep); }

# The lock's hash as Redis has it: { field => value }.
sub hash_of
{
	my ($name) = @_;
	my @kv = split /\n/, redis_cli($port, 'HGETALL', "$prefix:{$name}");
	return {@kv};
}
sub seq_fields { my ($h) = @_; return join ' ', sort grep { /^s:/ } keys %$h; }

my $clash2 = sub { qr/RWLOCK_VERSION \Q$prefix:{$_[0]}\E is protocol 2, the caller speaks 3$/m };
my $clash3 = sub { qr/^RWLOCK_VERSION \Q$prefix:{$_[0]}\E is protocol 3, the caller speaks 2$/ };

my $s = session($node);
my $s2 = session($node);
my ($out, $err, $secs);

# A SQL call that must fail with the version clash on lock $name.
sub refused_55000
{
	my ($sess, $sql, $name, $what) = @_;
	my ($o, $e, $t) = sq($sess, $sql);
	is(sqlstate($e), '55000', "$what: 55000") or diag "out '$o' err $e";
	like($e, qr/ERROR:  55000: a lock in Redis at redis:\/\/127\.0\.0\.1:$port\/0 was written by a client of another rwlock protocol version\n/,
		"$what: the message says why, naming the Redis");
	like($e, $clash2->($name), "$what: RWLOCK_VERSION in the detail");
	return $t;
}

# --- a) A protocol 2 writer holds "x".
my $tok2 = p2_acquire('x', 'p2:host:1:aaaa', 'w');
like($tok2, qr/^\d+$/, "protocol 2 takes the write lock x (token $tok2)");
ok($tok2 > 0, '... a token above 0');
refused_55000($s, "SELECT redis_try_wlock('x')", 'x', 'redis_try_wlock on a protocol 2 hold');
refused_55000($s, "SELECT redis_try_wlock('x', interval '2 s')", 'x',
	'redis_try_wlock with a wait');
refused_55000($s, "SELECT redis_try_rlock('x')", 'x', 'redis_try_rlock');
$secs = refused_55000($s, "SET lock_timeout = '8s'; SELECT redis_wlock('x')", 'x',
	'redis_wlock under lock_timeout');
ok($secs < 4, sprintf('... at once (%.2f s), not at the lock_timeout: it does not wait', $secs));
sq($s, 'RESET lock_timeout');
refused_55000($s, "SELECT * FROM redis_lock_info('x')", 'x', 'redis_lock_info');
($out, $err) = sq($s, "SELECT count(*) FROM redis_held_locks");
is($out, '0', 'the session holds nothing') or diag $err;
my $h = hash_of('x');
is(join(' ', map { $_ // '-' } @$h{qw(v w f)}), "2 p2:host:1:aaaa $tok2",
	'the protocol 2 hold is as it was');
is(seq_fields($h), '', '... no s: field written (the version check comes first)');
ok(!exists $h->{'i:' . session_owner($s)}, '... no intent of the session');
is(p2_renew('x', 'p2:host:1:aaaa'), '1', 'the protocol 2 writer still renews');

# --- b) It releases: SQL takes the free protocol 2 lock over.
is(p2_release('x', 'p2:host:1:aaaa'), '1', 'the protocol 2 writer releases x');
$h = hash_of('x');
is("$h->{v} " . ($h->{w} // '-') . " $h->{f}", "2 - $tok2",
	'... a free protocol 2 hash is left, its token kept');
($out, $err) = sq($s, "SELECT redis_wlock('x')");
like($out, qr/^\d+$/, 'SQL takes x') or diag $err;
cmp_ok($out, '>', $tok2, "... with a token above the protocol 2 one ($out > $tok2)");
my $tok3 = $out;
my $owner = session_owner($s);
$h = hash_of('x');
is("$h->{v} $h->{w} $h->{f}", "3 $owner $tok3", '... the hash now speaks protocol 3');
ok(defined $h->{"s:$owner"}, '... with the session\'s s: record');
like(p2_acquire('x', 'p2:host:1:bbbb', 'w'), $clash3->('x'),
	'protocol 2 is refused x now: RWLOCK_VERSION');
($out) = sq($s, "SELECT redis_unlock('x')");
is($out, 't', 'SQL releases x');
like(p2_acquire('x', 'p2:host:1:bbbb', 'r'), $clash3->('x'),
	'... and protocol 2 is still refused (the hash lives keep ms)');
my $pttl = redis_cli($port, 'PTTL', "$prefix:{x}");
ok($pttl >= $keep - 60000 && $pttl <= 2 * $keep,
	"... which it does, keep at least (PTTL $pttl)");

# --- c) SQL holds "y"; protocol 2 is refused it.
($out, $err) = sq($s, "SELECT redis_wlock('y') > 0");
is($out, 't', 'SQL takes y') or diag $err;
# we, the writer's lease end, moves with its renewals: left out.
my $fields_of = sub { my $h = hash_of($_[0]); join ',', map { "$_=$h->{$_}" } sort grep { $_ ne 'we' } keys %$h };
my $before = $fields_of->('y');
like(p2_acquire('y', 'p2:host:2:cccc', 'w'), $clash3->('y'),
	'protocol 2 acquire w of a protocol 3 hold: RWLOCK_VERSION');
like(p2_acquire('y', 'p2:host:2:cccc', 'r', '2000'), $clash3->('y'),
	'... acquire r, willing to wait: the same');
like(p2_renew('y', $owner), $clash3->('y'), '... renew (even naming the holder): the same');
like(p2_release('y', $owner), $clash3->('y'), '... release (even naming the holder): the same');
is($fields_of->('y'), $before,
	'... and nothing changed in the hash');
is(redis_cli($port, 'EXISTS', "$prefix:{y}:q"), '0', '... no protocol 2 waiter queued');
is(redis_mode_of($port, $prefix, 'y', $owner), 'write', 'SQL still holds y');
($out) = sq($s2, "SELECT redis_try_wlock('y')");
is($out, 'f', '... exclusively');
($out) = sq($s, "SELECT lease_state FROM redis_held_locks WHERE name = 'y'");
is($out, 'held', '... and the session sees it held');
sq($s, "SELECT redis_unlock('y')");

# A lock only ever read: protocol 2 deleted its hash at its last reader's
# release; protocol 3 keeps it (v and the s: records), so it stays 3.
($out) = sq($s, "SELECT redis_rlock('y2') >= 0");
is($out, 't', 'SQL reads y2');
($out) = sq($s, "SELECT redis_unlock('y2')");
is($out, 't', '... and releases it, its last reader');
$h = hash_of('y2');
is("$h->{v} " . seq_fields($h), "3 s:$owner", '... the hash stays: v 3, the s: record');
like(p2_acquire('y2', 'p2:host:2:cccc', 'w'), $clash3->('y2'),
	'... so protocol 2 is refused it: RWLOCK_VERSION');

# --- d) A protocol 2 read hold across the change. "z" had a protocol 2
# writer, so its hash keeps a token after its readers leave.
my $ztok = p2_acquire('z', 'p2:host:3:dddd', 'w');
like($ztok, qr/^\d+$/, "protocol 2 writes z (token $ztok)");
is(p2_release('z', 'p2:host:3:dddd'), '1', '... and releases it');
is(p2_acquire('z', 'p2:host:3:eeee', 'r'), $ztok,
	'a protocol 2 reader holds z (its read grant gives the protocol 2 token)');
refused_55000($s, "SELECT redis_try_rlock('z')", 'z', 'redis_try_rlock beside a protocol 2 reader');
refused_55000($s, "SELECT redis_try_wlock('z')", 'z', 'redis_try_wlock');
refused_55000($s, "SELECT * FROM redis_lock_info('z')", 'z', 'redis_lock_info on a protocol 2 read');
$h = hash_of('z');
is("$h->{v} $h->{n} " . seq_fields($h), '2 1 ', 'the protocol 2 read hold is as it was');
is(p2_renew('z', 'p2:host:3:eeee'), '1', 'the protocol 2 reader renews');
is(p2_renew('z', 'p2:host:3:eeee'), '1', '... again');
is(p2_release('z', 'p2:host:3:eeee'), '1', '... and releases');
($out, $err) = sq($s, "SELECT redis_try_rlock('z')");
is($out, 't', 'then SQL reads z') or diag $err;
($out) = sq($s, "SELECT token FROM redis_held_locks WHERE name = 'z'");
is($out, $ztok, '... its read token the protocol 2 token');
is(hash_of('z')->{v}, '3', '... the hash speaks 3');
sq($s, "SELECT redis_unlock('z')");
($out, $err) = sq($s, "SELECT redis_wlock('z')");
cmp_ok($out, '>', $ztok, '... and SQL writes it with a larger token') or diag $err;
sq($s, "SELECT redis_unlock('z')");

# --- e) No holder, but a protocol 2 writer waits (a live intent, 5 s): not
# free; once the intent lapses (its waiter gone), SQL takes the lock.
my $qtok = p2_acquire('q', 'p2:host:4:ffff', 'w');
like($qtok, qr/^\d+$/, 'protocol 2 writes q');
my $t0 = time;
my $busy = p2_acquire('q', 'p2:host:4:gggg', 'w', '5000');
like($busy, qr/^-\d+$/, "another protocol 2 writer will wait ($busy)");
is(p2_release('q', 'p2:host:4:ffff'), '1', 'the holder releases');
$h = hash_of('q');
ok(!defined $h->{w} && defined $h->{'i:p2:host:4:gggg'} && defined $h->{z},
	'... a protocol 2 hash without a holder, the waiter\'s intent live');
refused_55000($s, "SELECT redis_try_wlock('q')", 'q',
	'redis_try_wlock while a protocol 2 writer waits');
refused_55000($s, "SELECT redis_try_rlock('q')", 'q', 'redis_try_rlock');
is(hash_of('q')->{v}, '2', '... the hash still protocol 2');
ok(time - $t0 < 5, '... (all that within the intent\'s 5 s)');
sleep 5.2 - (time - $t0) if time - $t0 < 5.2;
($out, $err) = sq($s, "SELECT redis_try_wlock('q')");
is($out, 't', 'once the intent lapsed, SQL takes q') or diag $err;
($out) = sq($s, "SELECT token FROM redis_held_locks WHERE name = 'q'");
cmp_ok($out, '>', $qtok, '... with a larger token');
is(hash_of('q')->{v}, '3', '... the hash speaks 3');
like(p2_acquire('q', 'p2:host:4:gggg', 'w', '2000'), $clash3->('q'),
	'the protocol 2 waiter, back, gets RWLOCK_VERSION');
sq($s, "SELECT redis_unlock_all()");

$s->quit;
$s2->quit;
$node->stop;
done_testing();
