"""rwtest.py: what the Python tests share: a throw-away Redis server, a
throw-away Redis Cluster of three of them, and a throw-away sentinel.

The same recipe as tools/redis.sh (bash) and t/RwlockTest.pm (Perl): a
redis-server on 127.0.0.1, nothing persisted, stopped (and its directory
removed) by stop() or at exit, whatever happens.
"""
import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time

import redis

# The server binary and its client: RWLOCK_REDIS_SERVER (default
# redis-server; valkey-server for test/run.sh's Valkey pass) and
# RWLOCK_REDIS_CLI (default: the server's name with -cli for -server), as
# tools/redis.sh has them.
REDIS_SERVER = os.environ.get("RWLOCK_REDIS_SERVER") or "redis-server"
REDIS_CLI = os.environ.get("RWLOCK_REDIS_CLI") or (
    REDIS_SERVER[:-len("-server")] + "-cli" if REDIS_SERVER.endswith("-server")
    else "redis-cli")


def free_port(first):
    """first if it is free on 127.0.0.1, else one the OS picks."""
    for port in (first, 0):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port")


def free_ports(first, n):
    """n ports from first on, each free with its cluster bus port (+10000)."""
    ports, port = [], first
    while len(ports) < n:
        if port + 10000 > 65535:
            raise RuntimeError("no %d free ports from %d" % (n, first))
        if free_port(port) == port and free_port(port + 10000) == port + 10000:
            ports.append(port)
        port += 1
    return ports


class RedisServer:
    """A redis-server on a free port (first_port if free); extra options
    are passed on (e.g. "--enable-debug-command", "local")."""

    cluster = False

    def __init__(self, first_port, *options, prefix="rwlock-test-", exact=False):
        self.port = first_port if exact else free_port(first_port)
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir] + list(options),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(self.stop)
        self.url = "redis://127.0.0.1:%d/0" % self.port
        r = redis.Redis(port=self.port, socket_timeout=1)
        for _ in range(100):
            try:
                if r.ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("%s on port %d did not start" % (REDIS_SERVER, self.port))

    def redis(self):
        """A client of it (redis-py)."""
        return redis.Redis(port=self.port)

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three masters, no replicas, on 127.0.0.1 from first_port on (the next
    free ones, their bus ports free too; options: more redis-server options),
    joined by `redis-cli --cluster create`; up once every node says cluster_state:ok. url: the extension's
    redis+cluster:// URL naming every node; stop() stops them all."""

    cluster = True

    def __init__(self, first_port, masters=3, prefix="rwlock-cluster-", options=()):
        self.nodes = []
        atexit.register(self.stop)
        try:
            for port in free_ports(first_port, masters):
                self.nodes.append(RedisServer(port, "--cluster-enabled", "yes",
                                              "--cluster-config-file", "nodes.conf",
                                              "--cluster-node-timeout", "2000",
                                              *options, prefix=prefix, exact=True))
            self.ports = [n.port for n in self.nodes]
            self.port = self.ports[0]
            subprocess.run([REDIS_CLI, "--cluster", "create"]
                           + ["127.0.0.1:%d" % p for p in self.ports] + ["--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, timeout=30)
            for n in self.nodes:
                r = n.redis()
                for _ in range(200):
                    if r.cluster("info").get("cluster_state") == "ok":
                        break
                    time.sleep(0.05)
                else:
                    raise RuntimeError("the cluster on %s did not come up" % self.ports)
        except BaseException:
            self.stop()
            raise
        self.url = "redis+cluster://%s/" % ",".join("127.0.0.1:%d" % p for p in self.ports)

    def redis(self):
        """A redis-py RedisCluster on it: commands by key go by slot, node-wide
        ones (SCRIPT FLUSH, PUBSUB) to every master."""
        from redis.cluster import RedisCluster as Client
        return Client(host="127.0.0.1", port=self.port)

    def stop(self):
        for n in self.nodes:
            n.stop()


class RedisSentinel:
    """A sentinel (redis-server --sentinel, its own config file) on a free
    port (first_port if free) on 127.0.0.1, monitoring the master name at
    127.0.0.1:master_port with quorum 2; stopped (its directory removed) by
    stop() or at exit."""

    def __init__(self, first_port, name, master_port, down_after=30000,
                 prefix="rwlock-sentinel-"):
        self.port = free_port(first_port)
        self.dir = tempfile.mkdtemp(prefix=prefix)
        conf = "%s/sentinel.conf" % self.dir
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel down-after-milliseconds %s %d\n"
                    "sentinel failover-timeout %s %d\n"
                    % (self.port, self.dir, name, master_port, name, down_after,
                       name, 3 * down_after))
        self.proc = subprocess.Popen([REDIS_SERVER, conf, "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(self.stop)
        r = redis.Redis(port=self.port, socket_timeout=1)
        for _ in range(100):
            try:
                if r.ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("the sentinel on port %d did not start" % self.port)

    def redis(self):
        return redis.Redis(port=self.port, socket_timeout=2)

    def stop(self):
        RedisServer.stop(self)
