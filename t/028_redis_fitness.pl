# What a Redis serving locks must be (SPEC 13), checked at connect:
#   - a Redis 7.0 or Valkey 8 (INFO server's version) is accepted (older
#     than 5.0 would be refused, its version named: no such server here);
#   - an evicting maxmemory-policy (allkeys-lru with maxmemory 0,
#     volatile-ttl with a maxmemory) is refused with 55000 naming the
#     policy, also for a user that CONFIG is refused to (the policy is read
#     from INFO memory, never CONFIG GET), and nothing is written; with
#     noeviction the same session locks;
#   - an ACL user without channel permission (resetchannels) is refused
#     with 42501 at its first call, before any lock is taken (without the
#     check it took locks whose releases then failed to wake waiters); one
#     that may not SUBSCRIBE gets 42501 at its first wait, its intent
#     withdrawn; one without the lock keys gets 42501 (NOPERM), not XX000,
#     Redis's message in the detail;
#   - a user made by docs/connecting.md's ACL SETUSER line locks, is woken from a
#     wait by a release (not by the lease), sees redis_connection_info; it
#     is refused INFO, which the server log says once per session (its
#     maxmemory-policy cannot be checked), not again when it connects anew;
#     a user refused CLIENT ID locks with nothing logged: protocol 3 asks no
#     CLIENT ID (nor CLIENT KILL, nor CONFIG GET: Redis counts no call of
#     them);
#   - (issue 27.17) holds Redis lost (keys deleted): redis_unlock and
#     redis_unlock_all each report them lost themselves, and an unlock of
#     such a name afterwards gives one warning, that it is not held (it
#     used to get a late "was lost" for redis_unlock_all's release too).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $lru = redis_start(undef, '--maxmemory-policy', 'allkeys-lru');
my $ttl = redis_start(undef, '--maxmemory-policy', 'volatile-ttl',
	'--maxmemory', '100mb');
my $good = redis_start();

my $node = new_node('fitness', port => $good, lease => '10s');
my $s = session($node);
my $s2 = session($node);

sub use_url
{
	my ($sess, $url) = @_;
	sq($sess, "SET rwlock.redis_url = '$url'");
}

sub keys_of
{
	my ($port) = @_;
	return redis_cli($port, '--no-auth-warning', 'KEYS', 'tap_fitness*');
}

# ---- an evicting maxmemory-policy ----------------------------------------
use_url($s, "redis://127.0.0.1:$lru/0");
my ($out, $err) = sq($s, "SELECT redis_wlock('e') > 0");
isnt($out, 't', 'allkeys-lru (maxmemory 0): no lock');
is(sqlstate($err), '55000', '... 55000');
like($err, qr/is not fit to serve locks/, '... the message says why');
like($err, qr/maxmemory-policy is allkeys-lru.*noeviction/s,
	'... the detail names the policy and noeviction');
is(keys_of($lru), '', '... nothing written');

use_url($s, "redis://127.0.0.1:$ttl/0");
($out, $err) = sq($s, "SELECT redis_try_rlock('e')");
is(sqlstate($err), '55000', 'volatile-ttl with a maxmemory: 55000');
like($err, qr/volatile-ttl/, '... naming it');

# A user CONFIG is refused to: INFO memory tells the policy.
redis_cli($lru, 'ACL', 'SETUSER', 'nocfg', 'on', '>pw', '~*', '&*', '+@all',
	'-config');
use_url($s, "redis://nocfg:pw\@127.0.0.1:$lru/0");
($out, $err) = sq($s, "SELECT redis_wlock('e') > 0");
is(sqlstate($err), '55000', 'a user without CONFIG: 55000 all the same (INFO)');
like($err, qr/allkeys-lru/, '... naming the policy');

redis_cli($lru, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
($out, $err) = sq($s, "SELECT redis_wlock('e') > 0");
is($out, 't', 'once the policy is noeviction, the same session locks');
sq($s, "SELECT redis_unlock('e')");

# ---- the server's version ------------------------------------------------
# Each connection reads INFO server and refuses a Redis older than 5.0, its
# version named (no older server is installable here: the refusal itself is
# untested; docs/protocol.md section 1 says why 5.0). This server, Redis 7.0
# or Valkey 8 (test/valkey.sh), is accepted, its version as INFO says it.
{
	my $info = redis_cli($good, 'INFO', 'server');
	my ($ver) = $info =~ /^valkey_version:(\S+)/m;
	my $name = $ver ? 'Valkey' : 'Redis';
	($ver) = $info =~ /^redis_version:(\S+)/m unless $ver;
	like($ver // '', qr/^(?:[7-9]|\d\d)\./, "the server here is $name " . ($ver // '?'));
	use_url($s, "redis://127.0.0.1:$good/0");
	($out, $err) = sq($s, "SELECT redis_wlock('v') > 0");
	is($out, 't', "$name " . ($ver // '?') . ' is accepted: it locks') or diag $err;
	sq($s, "SELECT redis_unlock('v')");
	redis_cli($good, 'DEL', 'tap_fitness:{v}', 'tap_fitness:{v}:q');
}

# ---- ACL users -----------------------------------------------------------
redis_cli($good, 'ACL', 'SETUSER', 'nochan', 'on', '>pw', '~*', 'resetchannels',
	'+@all');
use_url($s, "redis://nochan:pw\@127.0.0.1:$good/0");
($out, $err) = sq($s, "SELECT redis_wlock('p') > 0");
isnt($out, 't', 'a user without channel permission: no lock');
is(sqlstate($err), '42501', '... 42501 at the first call');
like($err, qr/may not publish on the lock channels/, '... saying which');
# (Redis 7: "no permissions to access one of the channels ..."; Valkey 8:
# "No permissions to access a channel")
like($err, qr/no permissions to access (?:one of the channels|a channel)/i,
	"... with Redis's message");
is(keys_of($good), '', '... before any lock is taken');

redis_cli($good, 'ACL', 'SETUSER', 'nokeys', 'on', '>pw', '~other:*', '&*',
	'+@all');
use_url($s, "redis://nokeys:pw\@127.0.0.1:$good/0");
($out, $err) = sq($s, "SELECT redis_wlock('p') > 0");
is(sqlstate($err), '42501', 'a user without the lock keys: 42501, not XX000');
like($err, qr/DETAIL:.*NOPERM/, "... Redis's NOPERM in the detail");

redis_cli($good, 'ACL', 'SETUSER', 'nosub', 'on', '>pw', '~*', '&*', '+@all',
	'-subscribe');
use_url($s, "redis://nosub:pw\@127.0.0.1:$good/0");
use_url($s2, "redis://nosub:pw\@127.0.0.1:$good/0");
($out, $err) = sq($s, "SELECT redis_wlock('w') > 0");
is($out, 't', 'a user that may not SUBSCRIBE takes a free lock');
($out, $err) = sq($s2, "SELECT redis_wlock('w') > 0");
isnt($out, 't', '... and its first wait fails');
is(sqlstate($err), '42501', '... with 42501');
like($err, qr/may not subscribe to the lock channels/, '... saying why');
is(redis_cli($good, 'ZCARD', 'tap_fitness:{w}:q'), '0',
	'... its intent withdrawn');
sq($s, "SELECT redis_unlock('w')");

# docs/connecting.md's line (section "What a Redis serving locks must be").
# (tools/acl_line.py reads it, for this test's key prefix)
my @line = acl_setuser_args(prefix => 'tap_fitness', password => 'pw');
is("@line[0 .. 2]", 'ACL SETUSER rwlock', "docs/connecting.md's ACL SETUSER line");
is(redis_cli($good, @line), 'OK', "... is accepted by $REDIS_SERVER");
use_url($s, "redis://rwlock:pw\@127.0.0.1:$good/0");
use_url($s2, "redis://rwlock:pw\@127.0.0.1:$good/0");
($out, $err) = sq($s, "SELECT redis_wlock('h') > 0");
is($out, 't', '... its user locks') or diag($err);
sq_send($s2, "SELECT redis_wlock('h') > 0");
sleep 0.5;
my $t0 = time;
sq($s, "SELECT redis_unlock('h')");
my @r = sq_wait($s2, 10);
is($r[0], 't', '... a waiter gets the lock');
cmp_ok(time - $t0, '<', 3, '... woken by the release, not the 10 s lease');
sq($s2, "SELECT redis_unlock('h')");
($out, $err) = sq($s, "SELECT connected FROM redis_connection_info() WHERE current");
is($out, 't', '... and redis_connection_info works') or diag($err);

# That user is refused INFO (Redis's @dangerous): its maxmemory-policy cannot
# be checked. Said once per session in the server log, not at each
# connection.
my %pid = (s => session_pid($s), s2 => session_pid($s2));
sub refused_info
{
	my ($pid) = @_;
	return scalar(() = slurp_file($node->logfile) =~ /\[$pid\] [^\n]*refused INFO/g);
}
ok(wait_until(sub { refused_info($pid{s}) == 1 && refused_info($pid{s2}) == 1 }, 10),
	'... is refused INFO: the server log says so, once for each session')
  or diag(slurp_file($node->logfile));
ok(slurp_file($node->logfile) =~
	  qr{Redis at redis://rwlock\@127\.0\.0\.1:$good/0 refused INFO \(NOPERM[^\n]*maxmemory-policy cannot be checked},
	"... naming the Redis and Redis's NOPERM");
# INFO calls Redis refused (NOPERM) so far.
sub info_refused
{
	my ($n) = redis_cli($good, 'INFO', 'commandstats') =~
	  /^cmdstat_info:.*rejected_calls=(\d+)/m;
	return $n // 0;
}
my $refused_before = info_refused();
is(redis_cli($good, 'CLIENT', 'KILL', 'USER', 'rwlock') >= 2, 1,
	'... its connections cut (CLIENT KILL USER rwlock, as an admin)');
# The next calls connect anew (the first may fail: its connection was cut).
($out) = sq($s, "SELECT redis_wlock('h') > 0");
($out, $err) = sq($s, "SELECT redis_wlock('h') > 0") if $out ne 't';
is($out, 't', '... a session connects again and locks') or diag($err);
sq($s, "SELECT redis_unlock_all()");
cmp_ok(info_refused(), '>', $refused_before, '... refused INFO again');
is(refused_info($pid{s}), 1, '... which is not logged again');
# Redis ran none of the commands protocol 3 no longer needs (the one CLIENT
# KILL above is this test's).
my $stats = redis_cli($good, 'INFO', 'commandstats');
unlike($stats, qr/^cmdstat_(?:config\|get|client\|id):/m,
	'Redis counted no CONFIG GET and no CLIENT ID') or diag($stats);
like($stats, qr/^cmdstat_client\|kill:calls=1,/m, '... and no CLIENT KILL but the test\'s');

# A user refused CLIENT ID locks with every protection (protocol 3 fences
# stale requests by their seq, docs/protocol.md 4.1): nothing to log.
redis_cli($good, 'ACL', 'SETUSER', 'noid', 'on', '>pw', '~*', '&*', '+@all',
	'-client|id', '-client|kill');
use_url($s, "redis://noid:pw\@127.0.0.1:$good/0");
($out, $err) = sq($s, "SELECT redis_wlock('i') > 0");
is($out, 't', 'a user refused CLIENT ID and CLIENT KILL locks') or diag($err);
($out, $err) = sq($s2, "SELECT redis_try_wlock('i')");
is($out, 'f', '... exclusively') or diag($err);
($out) = sq($s, "SELECT redis_unlock('i')");
is($out, 't', '... and releases');
unlike(slurp_file($node->logfile), qr/CLIENT ID|CLIENT KILL|protection is off/i,
	'... and the server log has nothing about CLIENT ID or a protection off');

# ---- unlocking lost holds (issue 27.17) ------------------------------------
# Each lost hold is reported once, by the call that unlocks it; a later
# unlock of the name only says it is not held.
use_url($s, "redis://127.0.0.1:$good/0");
sub warnings_of { my ($e) = @_; return scalar(() = $e =~ /WARNING:/g); }
sq($s, "SELECT redis_wlock('l1'), redis_rlock('l2'), redis_wlock('l3')");
redis_cli($good, 'DEL', 'tap_fitness:{l1}', 'tap_fitness:{l2}',
	'tap_fitness:{l3}');
($out, $err) = sq($s, "SELECT redis_unlock('l3')");
is($out, 'f', 'redis_unlock of a hold Redis lost: false');
is(warnings_of($err), 1, '... one warning');
like($err, qr/Redis lock "l3" was lost/, '... that it was lost');
($out, $err) = sq($s, "SELECT redis_unlock_all()");
is($out, '2', 'redis_unlock_all of two holds Redis lost: 2');
like($err, qr/Redis lock "l1" was lost.*Redis lock "l2" was lost|Redis lock "l2" was lost.*Redis lock "l1" was lost/s,
	'... reports both lost, itself');
($out, $err) = sq($s, "SELECT redis_unlock('l1')");
is($out, 'f', 'an unlock of one of them after: false');
is(warnings_of($err), 1, '... one warning');
like($err, qr/you don't own a session-level hold of Redis lock "l1"/,
	'... that it is not held');
unlike($err, qr/was lost/, '... not a late "was lost" beside it');

$s->quit;
$s2->quit;
$node->stop;
done_testing();
