"""faultproxy.py: a TCP proxy between rwlock's clients and Redis that makes
requests arrive late, twice and out of order (test/chaos.py).

Each client connection gets its own upstream connection to the Redis
behind the listener it came to (one listener per Redis, on a port of
127.0.0.1 the OS picks: ports[upstream port]). The
proxy reads both streams as RESP: the client's commands, to know each
connection's user (AUTH), its set-up (AUTH, SELECT, HELLO) and the protocol
scripts it runs (EVALSHA / EVAL of acquire.lua or release.lua, known by
their SHA1: lock KEYS[1], owner ARGV[1] and seq ARGV[2] in protocol 3's
calling convention; owner ARGV[2] where ARGV[1] is a version, "2" or "3",
as in protocol 2 and protocol 3's first convention); and Redis's replies,
to match each to its command. An acquire or release of the lean convention
whose ARGV[2] is no seq is counted ("seen without seq": chaos.py fails).

At random moments (seeded; on average one every cut_every s, only while
cutting is on, only on connections authenticated as cut_user), it cuts off
the next acquire or release that comes by: it does not forward it, keeps its
bytes (and whatever the client sends after it on that connection), and
either closes the client's side at once ("close": the client sees the
connection lost) or swallows the connection's traffic until the client
gives up on it and closes it ("silent": the client's command times out).
The upstream connection stays open. The held bytes then reach Redis late:

  - on that upstream connection, once the owner's next grant of that lock
    (an acquire sent after the cut, on any connection to the same Redis:
    each master of a quorum keeps its own order, answered with a token)
    has been seen, within 2 ms of it: while the owner is in the critical
    section that grant opened;
  - half of the time also, as a duplicate, on a new upstream connection
    (the client's AUTH and SELECT first, ASKING if the command had one;
    the script as EVAL, so a flushed script cache does not stop it), after
    the owner's next answered request (a release sent again, say), or its
    first or second grant since the cut;
  - at the latest (the owner made no new request) 1.5 to 3 s after the cut:
    longer than a command timeout (1 s in chaos.py) and a round.
A cut whose upstream connection is gone by then (CLIENT KILL) goes on a new
connection instead. Deliveries due in the same turn go in random order, each
on its own connection, so requests of different cuts arrive out of order.

The replies to late requests are read and counted: "stale" (an error reply
starting RWLOCK_STALE, protocol 3's answer to a request that is not its
owner's newest), "ran" (any other answer: the request ran; "freed" are late
releases that answered 1, "granted" late acquisitions that answered a token
>= 0), other errors by their first word (NOSCRIPT after a SCRIPT FLUSH,
MOVED or ASK on a cluster), and "unanswered" (the connection was killed
first).

Connections that become something else than request/reply (SUBSCRIBE,
PSYNC, MONITOR) are relayed as they are and never cut, as is anything the
proxy cannot read as RESP.

    proxy = FaultProxy([upstream_port, ...], scripts, seed, cut_user="rwlock")
    proxy.start(); ... proxy.ports[upstream_port] ...
    proxy.stop_cutting(); proxy.settle(); proxy.stats; proxy.close()

scripts maps a script's SHA1 (hex) to (name, body): FaultProxy.scripts_of()
makes it from a tree's lua/ with tools/embed_lua.pl --compact, as the
extension embeds them.
"""
import collections
import hashlib
import os
import random
import select
import socket
import subprocess
import threading
import time

RAW_COMMANDS = {b"SUBSCRIBE", b"PSUBSCRIBE", b"SSUBSCRIBE", b"SYNC", b"PSYNC",
                b"MONITOR"}
SETUP_COMMANDS = {b"AUTH", b"SELECT", b"HELLO"}
CUT_SCRIPTS = ("acquire", "release")


class Incomplete(Exception):
    pass


def line_at(buf, pos):
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    return buf[pos:end], end + 2


def parse_command(buf, pos):
    """A client's command at pos: (argv, end). Raises Incomplete, or
    ValueError for anything but a multibulk of bulk strings."""
    if pos >= len(buf):
        raise Incomplete
    if buf[pos:pos + 1] != b"*":
        raise ValueError("not a multibulk command")
    head, pos = line_at(buf, pos)
    argv = []
    for _ in range(int(head[1:])):
        if pos >= len(buf):
            raise Incomplete
        if buf[pos:pos + 1] != b"$":
            raise ValueError("not a bulk string")
        head, pos = line_at(buf, pos)
        n = int(head[1:])
        if len(buf) < pos + n + 2:
            raise Incomplete
        argv.append(bytes(buf[pos:pos + n]))
        pos += n + 2
    return argv, pos


def parse_reply(buf, pos):
    """A reply at pos (RESP2 or RESP3): (first line, end); the first line
    keeps its type byte ("-ERR ...", ":1", "$5"). Raises Incomplete or
    ValueError."""
    if pos >= len(buf):
        raise Incomplete
    kind = buf[pos:pos + 1]
    head, nxt = line_at(buf, pos)
    head = bytes(head)
    if kind in b"+-:_,#(":
        return head, nxt
    if kind in b"$!=":
        n = int(head[1:])
        if n < 0:
            return head, nxt
        if len(buf) < nxt + n + 2:
            raise Incomplete
        if kind == b"!":        # a blob error: its text is the message
            return b"-" + bytes(buf[nxt:nxt + n]), nxt + n + 2
        return head, nxt + n + 2
    if kind in b"*~>%|":
        n = int(head[1:])
        if n < 0:
            return head, nxt
        if kind in b"%|":
            n *= 2
        pos = nxt
        for _ in range(n):
            _, pos = parse_reply(buf, pos)
        if kind == b"|":        # an attribute comes before the reply itself
            return parse_reply(buf, pos)
        return head, pos
    raise ValueError("not a RESP reply: %r" % head[:20])


def encode(argv):
    out = [b"*%d\r\n" % len(argv)]
    for a in argv:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Req:
    """A protocol script request seen on its way to Redis."""
    __slots__ = ("kind", "owner", "key", "seq", "argv", "lean", "sent", "late", "via")

    def __init__(self, kind, owner, key, seq, argv, lean=True):
        self.kind, self.owner, self.key, self.seq, self.argv = kind, owner, key, seq, argv
        self.lean = lean             # owner ARGV[1], seq ARGV[2]; else the version first
        self.sent = None
        self.late = False
        self.via = None         # late: "same" or "new" connection


class Pair:
    """A client connection and its upstream connection (or, for a late
    duplicate, an upstream connection of the proxy's own)."""
    _ids = 0

    def __init__(self, client, up, up_port):
        Pair._ids += 1
        self.id = Pair._ids
        self.client, self.up, self.up_port = client, up, up_port
        self.cin = bytearray()       # from the client, not parsed yet
        self.uin = bytearray()       # from Redis, not parsed yet
        self.to_up = bytearray()
        self.to_client = bytearray()
        self.tags = collections.deque()   # one per command sent: a Req or None
        self.raw = False
        self.user = None
        self.setup = []              # raw AUTH / SELECT / HELLO commands
        self.prev = None             # the previous command's name
        self.cut = None              # a Cut once cut off: client bytes held


class Cut:
    def __init__(self, pair, req, raw, asking, mode, at):
        self.pair, self.req, self.mode, self.at = pair, req, mode, at
        self.held = [(raw, req)]     # (raw command, Req or None), the cut one first
        self.asking = asking
        self.setup = list(pair.setup)
        self.deliveries = 0          # not made yet


class Delivery:
    def __init__(self, cut, where, on, need, deadline):
        self.cut, self.where, self.on, self.need, self.due = cut, where, on, need, deadline
        self.seen = 0
        self.done = False
        self.cued = False            # due at the owner's next request, not at the deadline


class FaultProxy(threading.Thread):
    def __init__(self, upstreams, scripts, seed, cut_user="rwlock", cut_every=0.3,
                 dup=0.5, delay=(1.5, 3.0)):
        super().__init__(daemon=True)
        self.scripts = scripts
        self.rnd = random.Random(seed)
        self.cut_user = cut_user.encode()
        self.cut_every = cut_every
        self.dup = dup
        self.delay = delay
        self.cutting = False
        self.next_cut = 0.0
        self.listeners = {}          # socket -> upstream port
        self.ports = {}              # upstream port -> listening port
        for up in upstreams:
            ls = socket.socket()
            ls.bind(("127.0.0.1", 0))
            ls.listen(128)
            ls.setblocking(False)
            self.listeners[ls] = up
            self.ports[up] = ls.getsockname()[1]
        self.pairs = []
        # (owner, key, upstream port) -> [Delivery]
        self.waiting = collections.defaultdict(list)
        self.deliveries = []
        self.mx = threading.Lock()
        self.halt = False
        self.stats = collections.Counter()
        self.errors = []             # the proxy's own failures (a bug here)

    @staticmethod
    def scripts_of(tree):
        """{sha1: (name, body)} of acquire.lua and release.lua of the tree
        at tree, compacted as tools/embed_lua.pl embeds them."""
        out = {}
        for name in CUT_SCRIPTS:
            body = subprocess.run(
                ["perl", os.path.join(tree, "tools", "embed_lua.pl"), "--compact",
                 os.path.join(tree, "lua", name + ".lua")],
                check=True, stdout=subprocess.PIPE).stdout
            out[hashlib.sha1(body).hexdigest()] = (name, body)
        return out

    # ---- control (other threads) -------------------------------------------

    def start_cutting(self):
        with self.mx:
            self.cutting = True
            self.next_cut = time.monotonic() + self.rnd.expovariate(1 / self.cut_every)

    def stop_cutting(self):
        with self.mx:
            self.cutting = False

    def settle(self, timeout=5.0):
        """Deliver every late request now, and wait for their answers."""
        with self.mx:
            now = time.monotonic()
            for d in self.deliveries:
                d.due = min(d.due, now)
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            with self.mx:
                busy = any(not d.done for d in self.deliveries) or any(
                    isinstance(t, Req) and t.late for p in self.pairs for t in p.tags)
            if not busy:
                return True
            time.sleep(0.02)
        return False

    def close(self):
        self.halt = True
        self.join(2)
        for p in self.pairs:
            for s in (p.client, p.up):
                if s is not None:
                    s.close()
        for ls in self.listeners:
            ls.close()

    # ---- the loop --------------------------------------------------------------

    def run(self):
        try:
            while not self.halt:
                self.turn()
        except Exception as e:          # noqa: BLE001 - reported by chaos.py
            self.errors.append("%s: %s" % (type(e).__name__, e))
            raise

    def turn(self):
        with self.mx:
            socks = list(self.listeners)
            wsocks = []
            for p in self.pairs:
                for s, out in ((p.client, p.to_client), (p.up, p.to_up)):
                    if s is not None:
                        socks.append(s)
                        if out:
                            wsocks.append(s)
            timeout = 0.05
            if self.deliveries:
                timeout = max(0.0, min(timeout, min(d.due for d in self.deliveries)
                                       - time.monotonic()))
        r, w, _ = select.select(socks, wsocks, [], timeout)
        with self.mx:
            for s in r:
                if s in self.listeners:
                    self.accept(s)
                    continue
                p = self.pair_of(s)
                if p is None:
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if s is p.client:
                    self.from_client(p, data)
                elif s is p.up:
                    self.from_up(p, data)
            for s in w:
                p = self.pair_of(s)
                if p is not None:
                    self.flush(p, s)
            self.due()
            for p in self.pairs:
                for s in (p.client, p.up):
                    if s is not None and (p.to_client if s is p.client else p.to_up):
                        self.flush(p, s)
            self.pairs = [p for p in self.pairs if p.client is not None or p.up is not None]

    def pair_of(self, s):
        for p in self.pairs:
            if s is p.client or s is p.up:
                return p
        return None

    def accept(self, ls):
        try:
            c, _ = ls.accept()
        except BlockingIOError:
            return
        up_port = self.listeners[ls]
        try:
            u = socket.create_connection(("127.0.0.1", up_port), timeout=2)
        except OSError:
            c.close()
            return
        for s in (c, u):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pairs.append(Pair(c, u, up_port))

    def flush(self, p, s):
        out = p.to_client if s is p.client else p.to_up
        try:
            n = s.send(out)
            del out[:n]
        except BlockingIOError:
            pass
        except OSError:
            self.gone(p, s)

    def gone(self, p, s):
        """A side closed (or failed)."""
        if s is p.client:
            s.close()
            p.client = None
            p.to_client.clear()
            if p.cut is None or p.raw:
                self.close_up(p)
        else:
            s.close()
            p.up = None
            p.to_up.clear()
            for t in p.tags:
                if isinstance(t, Req) and t.late:
                    self.stats["late unanswered"] += 1
            p.tags.clear()
            if p.client is not None:
                p.client.close()
                p.client = None

    def close_up(self, p):
        if p.up is not None:
            p.up.close()
            p.up = None
        p.tags.clear()

    # ---- client -> Redis -----------------------------------------------------------

    def from_client(self, p, data):
        if not data:
            self.gone(p, p.client)
            return
        if p.raw:
            p.to_up += data
            return
        p.cin += data
        pos = 0
        try:
            while True:
                try:
                    argv, end = parse_command(p.cin, pos)
                except Incomplete:
                    break
                raw = bytes(p.cin[pos:end])
                pos = end
                self.command(p, argv, raw)
                if p.raw:
                    p.to_up += p.cin[pos:]
                    pos = len(p.cin)
                    break
        except ValueError:
            p.raw = True
            p.to_up += p.cin[pos:]
            pos = len(p.cin)
        del p.cin[:pos]

    def classify(self, argv):
        name = argv[0].upper()
        if name not in (b"EVALSHA", b"EVAL") or len(argv) < 3:
            return None
        sha = argv[1].decode("latin-1").lower() if name == b"EVALSHA" \
            else hashlib.sha1(argv[1]).hexdigest()
        script = self.scripts.get(sha)
        if script is None:
            return None
        nk = int(argv[2])
        keys, args = argv[3:3 + nk], argv[3 + nk:]
        if not keys or len(args) < 2:
            return None
        if args[0] in (b"2", b"3") and len(args) > 2:
            # The version first: protocol 2 (owner, no seq), or protocol 3
            # before its lean calling convention (owner, seq) ($CHAOS_TREE).
            seq = args[2] if args[2].isdigit() else None
            return Req(script[0], args[1], keys[0], seq, argv, lean=False)
        seq = args[1] if args[1].isdigit() else None
        return Req(script[0], args[0], keys[0], seq, argv)

    def command(self, p, argv, raw):
        name = argv[0].upper() if argv else b""
        if p.cut is not None:
            p.cut.held.append((raw, self.classify(argv)))
            return
        if name in RAW_COMMANDS:
            p.raw = True
            p.tags.clear()
            p.to_up += raw
            return
        if name in SETUP_COMMANDS:
            p.setup.append(raw)
            if name == b"AUTH":
                p.user = argv[1] if len(argv) == 3 else b"default"
            elif name == b"HELLO" and b"AUTH" in [a.upper() for a in argv]:
                i = [a.upper() for a in argv].index(b"AUTH")
                p.user = argv[i + 1] if i + 1 < len(argv) else p.user
        req = self.classify(argv)
        prev, p.prev = p.prev, name
        now = time.monotonic()
        if req is not None:
            self.stats["seen " + req.kind] += 1
            if req.lean and req.seq is None:
                self.stats["seen without seq"] += 1
            if self.cutting and p.user == self.cut_user and now >= self.next_cut:
                self.cut(p, req, raw, prev == b"ASKING", now)
                return
            req.sent = now
        p.to_up += raw
        p.tags.append(req)

    def cut(self, p, req, raw, asking, now):
        self.next_cut = now + self.rnd.expovariate(1 / self.cut_every)
        mode = self.rnd.choice(("close", "silent"))
        c = Cut(p, req, raw, asking, mode, now)
        p.cut = c
        self.stats["cut " + req.kind] += 1
        self.stats["cut " + mode] += 1
        if mode == "close":
            self.gone(p, p.client)
        lo, hi = self.delay
        ds = [Delivery(c, "same", "grant", 1, now + self.rnd.uniform(lo, hi))]
        if self.rnd.random() < self.dup:
            on, need = self.rnd.choice((("any", 1), ("grant", 1), ("grant", 2)))
            ds.append(Delivery(c, "new", on, need, now + self.rnd.uniform(lo, hi)))
        c.deliveries = len(ds)
        for d in ds:
            self.deliveries.append(d)
            self.waiting[req.owner, req.key, p.up_port].append(d)

    # ---- Redis -> client ---------------------------------------------------------------

    def from_up(self, p, data):
        if not data:
            self.gone(p, p.up)
            return
        if p.client is not None:
            p.to_client += data
        if p.raw:
            return
        p.uin += data
        pos = 0
        try:
            while True:
                try:
                    head, end = parse_reply(p.uin, pos)
                except Incomplete:
                    break
                pos = end
                self.reply(p, head)
        except ValueError:
            p.raw = True
            pos = len(p.uin)
        del p.uin[:pos]
        if p.client is None and not p.tags and not any(
                not d.done and d.cut.pair is p for d in self.deliveries):
            self.close_up(p)        # no client, nothing more to read

    def reply(self, p, head):
        if not p.tags:
            return              # not ours to count (a push, say)
        req = p.tags.popleft()
        if not isinstance(req, Req):
            return
        err = head.startswith(b"-")
        if req.late:
            self.stats["late answered"] += 1
            if head.startswith(b"-RWLOCK_STALE"):
                self.stats["late stale"] += 1
            elif err:
                self.stats["late error " + head[1:].split(b" ", 1)[0].decode("latin-1")] += 1
            else:
                self.stats["late ran"] += 1
                if req.kind == "release" and head == b":1":
                    self.stats["late freed"] += 1
                if req.kind == "acquire" and head.startswith(b":") and int(head[1:]) >= 0:
                    self.stats["late granted"] += 1
            return
        if err:
            return              # did not run (NOSCRIPT, MOVED, ...): the owner has not moved on
        grant = req.kind == "acquire" and head.startswith(b":") and int(head[1:]) >= 0
        now = time.monotonic()
        for d in self.waiting.get((req.owner, req.key, p.up_port), ()):
            if not d.done and req.sent > d.cut.at and (grant or d.on == "any"):
                d.seen += 1
                if d.seen == d.need:
                    # Into the critical section the grant opened.
                    d.due = min(d.due, now + self.rnd.uniform(0, 0.002))
                    d.cued = True

    # ---- late deliveries ------------------------------------------------------------------

    def due(self):
        now = time.monotonic()
        ready = [d for d in self.deliveries if d.due <= now]
        if not ready:
            return
        self.rnd.shuffle(ready)
        for d in ready:
            self.deliver(d)
        self.deliveries = [d for d in self.deliveries if not d.done]
        for k in list(self.waiting):
            self.waiting[k] = [d for d in self.waiting[k] if not d.done]
            if not self.waiting[k]:
                del self.waiting[k]

    def deliver(self, d):
        d.done = True
        when = "late sends on cue" if d.cued else "late sends at the deadline"
        c = d.cut
        c.deliveries -= 1
        p = c.pair
        if d.where == "same" and p.up is not None:
            if p.client is not None:
                # Silent, and the client has not given up yet: it must not
                # get these answers.
                self.gone(p, p.client)
            p.to_up += b"".join(raw for raw, _ in c.held)
            self.stats["late same connection"] += 1
            self.stats[when] += 1
            self.tag_late(p, c.held, "same")
        else:
            if d.where == "same":
                self.stats["late moved to a new connection"] += 1
            try:
                u = socket.create_connection(("127.0.0.1", p.up_port), timeout=2)
            except OSError:
                self.stats["late not delivered"] += 1
                return
            u.setblocking(False)
            u.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            q = Pair(None, u, p.up_port)
            q.prev = b"late"
            for raw in c.setup:
                q.to_up += raw
                q.tags.append(None)
            if c.asking:
                q.to_up += encode([b"ASKING"])
                q.tags.append(None)
            argv = list(c.req.argv)
            if argv[0].upper() == b"EVALSHA":
                argv[0:2] = [b"EVAL", self.scripts[argv[1].decode("latin-1").lower()][1]]
            q.to_up += encode(argv)
            self.pairs.append(q)
            self.stats["late new connection"] += 1
            self.stats[when] += 1
            self.tag_late(q, c.held[:1], "new")

    def tag_late(self, p, held, via):
        """Tags for the late commands sent on p: the cut request, and
        whatever the client sent after it on that connection."""
        for _, req in held:
            if req is None:
                p.tags.append(None)
                continue
            r = Req(req.kind, req.owner, req.key, req.seq, req.argv, req.lean)
            r.late, r.via = True, via
            self.stats["late deliveries"] += 1
            self.stats["late " + r.kind] += 1
            p.tags.append(r)

    def summary(self):
        s = self.stats
        others = ", ".join("%s %d" % (k[len("late error "):], v) for k, v in sorted(s.items())
                           if k.startswith("late error "))
        return ("cuts %d (%d acquire, %d release; %d closed, %d silent); late requests %d "
                "(%d acquire, %d release) in %d sends (%d on cue: at the owner's next request "
                "or grant; %d at the deadline), %d on the held connection, %d on a new "
                "one (%d of them because the held one was killed); their answers: stale %d, "
                "ran %d (%d releases freed a hold, %d acquisitions granted), errors %s, "
                "unanswered %d"
                % (s["cut acquire"] + s["cut release"], s["cut acquire"], s["cut release"],
                   s["cut close"], s["cut silent"], s["late deliveries"], s["late acquire"],
                   s["late release"], s["late same connection"] + s["late new connection"],
                   s["late sends on cue"], s["late sends at the deadline"],
                   s["late same connection"], s["late new connection"],
                   s["late moved to a new connection"], s["late stale"], s["late ran"],
                   s["late freed"], s["late granted"], others or "none",
                   s["late unanswered"]))
