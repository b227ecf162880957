"""rwtest.py: what the Python tests share: a throw-away Redis server.

The same recipe as tools/redis.sh (bash) and t/RwlockTest.pm (Perl): a
redis-server on 127.0.0.1, nothing persisted, stopped (and its directory
removed) by stop() or at exit, whatever happens.
"""
import atexit
import shutil
import socket
import subprocess
import tempfile
import time

import redis


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


class RedisServer:
    """A redis-server on a free port (first_port if free); extra options
    are passed on (e.g. "--enable-debug-command", "local")."""

    def __init__(self, first_port, *options, prefix="rwlock-test-"):
        self.port = free_port(first_port)
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
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
        raise RuntimeError("redis-server on port %d did not start" % self.port)

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
