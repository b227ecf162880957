# Several names at once in quorum mode (issue 40, SPEC 16: "when none is
# busy, it costs one Redis round trip per server"). Three masters; the
# third is reached through a proxy that holds every chunk a client sends
# for $delay before passing it on, so each round trip to it costs $delay
# and the number of round trips a call makes shows in its duration.
#  a) 6 names taken one by one cost 6 rounds (acquisition and fencing);
#     the same 6 write names in one call cost one round of tries and one
#     of fencing, read names one round: each well under half the time;
#  b) every name is held by the session on every master, and each name's
#     token is the one every master keeps (the fencing round raised it
#     where a master had granted a smaller one);
#  c) a name busy on the quorum: the try of all six returns false, and
#     the names it took in its first round are free again on every master
#     (the holder's name untouched);
#  d) one master stopped: the two left are a majority, and one call takes
#     every name on both.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use RwlockTest;
use RwlockQuorum;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $delay = 0.15;      # s, each chunk a client sends to the third master
my $max_lease = 4;     # s: rwlock.quorum_max_lease
my $prefix = 'tap_mq';
my @r = quorum_start(3);

# The delaying proxy: one listener, each connection relayed to $r[2], the
# client's bytes held $delay per chunk read (in order), Redis's not held.
my $proxy_port = 6431;
$proxy_port++ until RwlockTest::port_free($proxy_port);
my $proxy_code = <<'PY';
import socket, sys, threading, time
lport, uport, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", lport))
ls.listen(64)
print("ready", flush=True)

def pump(src, dst, hold):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            if hold:
                time.sleep(hold)
            dst.sendall(b)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

while True:
    c, _ = ls.accept()
    u = socket.create_connection(("127.0.0.1", uport))
    for s in (c, u):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=pump, args=(c, u, delay), daemon=True).start()
    threading.Thread(target=pump, args=(u, c, 0), daemon=True).start()
PY
my ($pin, $pout) = ('', '');
my $proxy = IPC::Run::start([ '/usr/bin/python3', '-c', $proxy_code, $proxy_port, $r[2], $delay ],
	'<', \$pin, '>', \$pout, '2>', \my $perr);
ok(defined wait_until(sub { $proxy->pump_nb; $pout =~ /ready/ }, 10), 'the delaying proxy listens');

my @urls = ($r[0], $r[1], $proxy_port);
my $node = new_node('mq', port => $r[0], preload => 1, lease => '10s',
	conf => "rwlock.redis_url = '" . quorum_url(@urls) . "'\n"
	  . "rwlock.quorum_max_lease = '${max_lease}s'\n"
	  . "rwlock.command_timeout = '3s'\nrwlock.connect_timeout = '5s'\n");
my $a = session($node);
my $b = session($node);
my ($out, $err);
sleep $max_lease + 1.5;    # until every master counts

# Connections made (their hand-shakes cross the proxy too) before timing.
($out, $err) = sq($a, "SELECT redis_wlock('warm') > 0, redis_unlock('warm')");
is($out, "t|t", 'a lock on the quorum, through the proxy') or diag $err;
($out, $err) = sq($b, "SELECT redis_rlock('warm') >= 0, redis_unlock('warm')");
is($out, "t|t", 'and from a second session') or diag $err;

my @names = map { "m$_" } 1 .. 6;
my $array = "ARRAY['" . join("', '", reverse @names) . "']";

# ---- a) round trips, as time through the proxy ----
my $t0 = time;
($out, $err) = sq($a, join('; ', map { "SELECT redis_wlock('s$_')" } 1 .. 6));
my $one_by_one = time - $t0;
is($err, '', 'a) 6 names taken one by one') or diag $err;
sq($a, 'SELECT redis_unlock_all()');
$t0 = time;
($out, $err) = sq($a, "SELECT array_to_string(redis_wlock($array), ',')");
my $at_once = time - $t0;
my @tokens = split /,/, $out;
is(scalar @tokens, 6, 'a) the same 6 write names in one call: 6 tokens') or diag $err;
ok($one_by_one >= 6 * $delay, "a) one by one: at least 6 rounds through the proxy ("
	  . sprintf('%.2f', $one_by_one) . ' s)');
ok($at_once < 4 * $delay && $at_once < $one_by_one / 2,
	'a) in one call: one round of tries and one of fencing ('
	  . sprintf('%.2f', $at_once) . ' s)');

# ---- b) held everywhere, fenced ----
my $owner_a = session_owner($a);
my @rev = reverse @names;
for my $i (0 .. 5)
{
	my $n = $rev[$i];
	is(join(',', map { redis_mode_of($_, $prefix, $n, $owner_a) } @r),
		'write,write,write', "b) $n held for writing on every master");
	is(join(',', map { quorum_field($_, $prefix, $n, 'f') } @r),
		join(',', ($tokens[$i]) x 3), "b) $n: its token is every master's");
}
($out) = sq($a, 'SELECT redis_unlock_all()');
is($out, '6', 'b) six holds to let go');

$t0 = time;
($out, $err) = sq($a, "SELECT cardinality(redis_rlock($array))");
my $read_once = time - $t0;
is($out, '6', 'a) 6 read names in one call') or diag $err;
ok($read_once < 4 * $delay && $read_once < $one_by_one / 2, 'a) in one round (' . sprintf('%.2f', $read_once) . ' s)');
is(join(',', map { redis_mode_of($r[2], $prefix, $_, $owner_a) } @names),
	join(',', ('read') x 6), 'a) each read on the third master too');
sq($a, 'SELECT redis_unlock_all()');

# ---- c) one name busy ----
($out, $err) = sq($b, "SELECT redis_wlock('m4') > 0");
is($out, 't', 'c) another session holds m4') or diag $err;
($out, $err) = sq($a, "SELECT redis_try_wlock($array)");
is($out, 'f', 'c) the try of all six returns false') or diag $err;
my $owner_b = session_owner($b);
ok(defined wait_until(sub {
	join(',', map { my $p = $_; map { redis_mode_of($p, $prefix, $_, $owner_a) } @names } @r) eq
	  join(',', ('') x 18) }, 5),
	'c) none of the six is held by the session on any master');
is(join(',', map { redis_mode_of($_, $prefix, 'm4', $owner_b) } @r), 'write,write,write',
	'c) m4 still the holder\'s everywhere');
($out) = sq($a, 'SELECT count(*) FROM redis_held_locks');
is($out, '0', 'c) the session holds nothing');
sq($b, 'SELECT redis_unlock_all()');

# ---- d) a master down ----
redis_stop($r[1]);
($out, $err) = sq($a, "SELECT cardinality(redis_wlock($array))");
is($out, '6', 'd) one master stopped: the other two take all six') or diag $err;
is(join(',', map { redis_mode_of($r[0], $prefix, $_, $owner_a) . '/' . redis_mode_of($r[2], $prefix, $_, $owner_a) } @names),
	join(',', ('write/write') x 6), 'd) held on both masters left');
($out) = sq($a, 'SELECT redis_unlock_all()');
is($out, '6', 'd) and let go');

$proxy->kill_kill;
redis_stop($_) for ($r[0], $r[2]);
done_testing();
