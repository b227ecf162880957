#!/usr/bin/python3
"""readme_examples.py: the clients' examples run as pasted, and a Node
process ends when its work does.

Runs every fenced code block of clients/node/README.md (```js: as an ES
module when it has an `import` line, else as CommonJS), of
clients/python/README.md (```python), of the client example in
docs/services.md (the ```sql and ```python blocks of "Example: a stored
procedure and a Python worker", in a database named shop as the example
says), and the ```sql blocks of the README's Install, First lock and
Monitoring sections (in a database of their own, in that order: Install's
block creates the extension) and of its Privileges section (in another,
with the roles and database it names made first; then a role of the
recipe may lock and another may not), each as its own file and process, against
the real extension and a real Redis on 127.0.0.1:6379, the address the
examples name (one is started there if none answers). Each must exit with
status 0 by itself within 30 s.

The Python blocks of clients/python/README.md are also type-checked, each
as its own module, with `mypy --strict` (Debian's python3-mypy,
tools/install-deps.sh) against the package in the checkout (its own
modules' errors ignored: what is checked is what a user's code sees;
redis-py 4.3 has no types); and so is a wrong call, which must be refused
(`acquire(timeout="soon")`, sync, several names and asyncio), so that the
check can fail.

Then the exit check: a Node script whose acquisition has to wait (it
subscribes), that then releases and quits its own ioredis connection, but
never calls locks.close(), must end within 3 s of its last line.

Run under pg_virtualenv with the extension installed, after `npm ci` in
clients/node:

    pg_virtualenv -t /usr/bin/python3 test/readme_examples.py

Prints one line a block and "readme examples: N passed, N failed".
"""
import os
import re
import subprocess
import sys
import tempfile
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from rwtest import RedisServer  # noqa: E402

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
EXAMPLE_SECTION = "### Example: a stored procedure and a Python worker"
README_SECTIONS = ("## Install", "## First lock", "## Monitoring")
PRIVILEGES = "## Privileges"
TIMEOUT = 30


def blocks(path, section=None):
    """(language, code, line) of each fenced block of path (of section only:
    from its heading to the next heading of its level or above)."""
    with open(path) as f:
        text = f.read()
    base = 0
    if section:
        base = text.index(section)
        level = section.split()[0]
        end = re.search(r"^#{1,%d} " % len(level), text[base + len(section):], re.M)
        text = text[base:base + len(section) + (end.start() if end else len(text))]
    out = []
    for m in BLOCK.finditer(text):
        line = (text[:m.start()].count("\n") + 1
                + (open(path).read()[:base].count("\n") if section else 0))
        out.append((m.group(1), m.group(2), line))
    return out


class Runner:
    def __init__(self, work):
        self.work = work
        self.passed = self.failed = 0
        nm = os.path.join(work, "node_modules")
        os.makedirs(nm)
        # The package as the examples require it, and the one ioredis its
        # own require() finds (from clients/node, after npm ci).
        os.symlink(os.path.join(ROOT, "clients", "node"), os.path.join(nm, "pg-rwlock-redis"))
        os.symlink(os.path.join(ROOT, "clients", "node", "node_modules", "ioredis"),
                   os.path.join(nm, "ioredis"))
        self.env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "clients", "python"))

    def check(self, label, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print("%s %s%s" % ("ok  " if ok else "FAIL", label, ("\n" + detail) if detail and not ok else ""))

    def run(self, label, argv):
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, cwd=self.work, env=self.env, timeout=TIMEOUT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            self.check("%s (did not end within %d s)" % (label, TIMEOUT), False, out)
            return None
        took = time.monotonic() - t0
        self.check("%s (%.1f s)" % (label, took), p.returncode == 0,
                   "exit status %d:\n%s" % (p.returncode, p.stdout))
        return p.stdout

    def block(self, readme, lang, code, line, db="shop"):
        rel = os.path.relpath(readme, ROOT)
        label = "%s:%d %s" % (rel, line, lang)
        if lang == "js":
            esm = re.search(r"^import ", code, re.M) is not None
            f = os.path.join(self.work, "ex%d.%s" % (line, "mjs" if esm else "cjs"))
            with open(f, "w") as out:
                out.write(code)
            self.run(label + (" (ESM)" if esm else " (CommonJS)"), ["node", f])
        elif lang == "python":
            f = os.path.join(self.work, "ex%d.py" % line)
            with open(f, "w") as out:
                out.write(code)
            self.run(label, ["/usr/bin/python3", f])
        elif lang == "sql":
            f = os.path.join(self.work, "ex%d.sql" % line)
            with open(f, "w") as out:
                out.write(code)
            self.run(label, ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", f])
        else:
            self.check("%s: no way to run a %r block" % (label, lang), False)

    def node_exits(self):
        """A wait (subscription) and a release, no close(): ends by itself."""
        script = r"""
const Redis = require('ioredis');
const { Locks } = require('pg-rwlock-redis');
(async () => {
  const a = new Redis('redis://127.0.0.1:6379/0'), b = new Redis('redis://127.0.0.1:6379/0');
  const la = new Locks(a), lb = new Locks(b);
  const first = la.writeLock('readme:exit'), second = lb.writeLock('readme:exit');
  await first.acquire();
  setTimeout(() => first.release(), 300);
  const waited = Date.now();
  await second.acquire(10000);                   // waits: subscribes on lb's subscriber
  const ms = Date.now() - waited;
  if (ms < 250) throw new Error('did not wait: ' + ms + ' ms');
  if (!(await second.release())) throw new Error('not held at release');
  await a.quit(); await b.quit();                 // the script's own connections; no close()
  console.log('done ' + ms);
})();
"""
        f = os.path.join(self.work, "exits.cjs")
        with open(f, "w") as out:
            out.write(script)
        t0 = time.monotonic()
        p = subprocess.Popen(["node", f], cwd=self.work, env=self.env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        first = p.stdout.readline()
        done_at = time.monotonic()
        try:
            rest = p.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            rest = p.communicate()[0]
        end = time.monotonic()
        self.check("a Node script that waited and released, without close(), ends "
                   "(%.1f s after its last line, %.1f s in all)" % (end - done_at, end - t0),
                   first.startswith("done") and p.returncode == 0 and end - done_at < 3.0,
                   first + rest)


DBS = ("shop", "readme", "readme_privileges", "billing")

MYPY_INI = """[mypy]
strict = True
[mypy-redis.*]
ignore_missing_imports = True
[mypy-rwlock_client.*]
ignore_errors = True
"""

MYPY_BAD = '''
from rwlock_client import AsyncClient, Client


def sync() -> None:
    Client.from_url("redis://127.0.0.1:6379/0").write_lock("x").acquire(timeout="soon")
    Client.from_url("redis://127.0.0.1:6379/0").write_locks(["x", "y"]).acquire(timeout="soon")


async def aio() -> None:
    await AsyncClient.from_url("redis://127.0.0.1:6379/0").read_lock("x").acquire(timeout="soon")
'''


def mypy(r, readme):
    """mypy --strict on each python block of readme (0 errors), and on a
    wrong call (refused)."""
    d = os.path.join(r.work, "mypy")
    os.makedirs(d)
    with open(os.path.join(d, "mypy.ini"), "w") as f:
        f.write(MYPY_INI)
    files = []
    for lang, code, line in blocks(readme):
        if lang == "python":
            files.append(os.path.join(d, "readme_%d.py" % line))
            with open(files[-1], "w") as f:
                f.write(code)
    bad = os.path.join(d, "bad.py")
    with open(bad, "w") as f:
        f.write(MYPY_BAD)
    env = dict(os.environ, MYPYPATH=os.path.join(ROOT, "clients", "python"))

    def run(paths):
        try:
            p = subprocess.run(["/usr/bin/python3", "-m", "mypy", "--config-file",
                                os.path.join(d, "mypy.ini"), "--cache-dir", os.path.join(d, "cache"),
                                "--no-error-summary"] + paths,
                               cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            return 2, str(e)
        return p.returncode, p.stdout
    rel = os.path.relpath(readme, ROOT)
    for f in files:
        st, out = run([f])
        r.check("%s:%s python: mypy --strict" % (rel, f.rsplit("_", 1)[1][:-3]), st == 0,
                out if "No module named mypy" not in out
                else out + "(install python3-mypy: tools/install-deps.sh)")
    st, out = run([bad])
    r.check("mypy --strict refuses acquire(timeout=\"soon\") (sync, several names, asyncio)",
            st == 1 and out.count('incompatible type "str"') >= 3, out)


def psql(db, sql):
    """(status, output) of sql run by psql in db."""
    p = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def privileges(r, main):
    """The Privileges recipe as pasted (the roles and database it names
    made first), then what it promises: its role may lock, another may not."""
    psql("postgres", "DROP ROLE IF EXISTS billing, reporting, lock_users")
    psql("postgres", "CREATE ROLE billing; CREATE ROLE reporting")
    found = [b for b in blocks(main, PRIVILEGES) if b[0] == "sql"]
    r.check("README.md %s: %d sql blocks found" % (PRIVILEGES, len(found)), len(found) > 0)
    for lang, code, line in found:
        r.block(main, lang, code, line, db="readme_privileges")
    st, out = psql("readme_privileges",
                   "SET ROLE billing; SELECT state FROM rwlock.redis_lock_info('readme:priv')")
    r.check("README.md %s: a role granted lock_users may call the functions" % PRIVILEGES,
            st == 0 and "free" in out, out)
    st, out = psql("readme_privileges",
                   "SET ROLE reporting; SELECT state FROM rwlock.redis_lock_info('readme:priv')")
    r.check("README.md %s: another role may not" % PRIVILEGES,
            st != 0 and "permission denied" in out, out)
    # The prefix: refused when set once the library is loaded (preloaded),
    # and before it loads, the session's lock functions refuse to work.
    st, out = psql("readme_privileges", "LOAD 'rwlock'; SET ROLE billing; SET rwlock.key_prefix = 'x'")
    r.check("README.md %s: a role may not set rwlock.key_prefix (library loaded)" % PRIVILEGES,
            st != 0 and "permission denied to set parameter" in out, out)
    st, out = psql("readme_privileges", "SET ROLE billing; SET rwlock.key_prefix = 'x'; "
                   "SELECT rwlock.redis_lock_info('readme:priv')")
    r.check("README.md %s: nor take locks under its own (library not loaded yet)" % PRIVILEGES,
            st != 0 and "rwlock.key_prefix was not applied in this session" in out, out)


def main():
    srv = None
    try:
        redis.Redis(port=6379, socket_connect_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        srv = RedisServer(6379, prefix="rwlock-readme-", exact=True)
    work = tempfile.mkdtemp(prefix="rwlock-readme-")
    r = Runner(work)
    try:
        for db in DBS:
            subprocess.run(["dropdb", "--if-exists", db], check=True)
            subprocess.run(["createdb", db], check=True)
        main = os.path.join(ROOT, "README.md")
        for section in README_SECTIONS:
            found = [b for b in blocks(main, section) if b[0] == "sql"]
            r.check("README.md %s: %d sql blocks found" % (section, len(found)), len(found) > 0)
            for lang, code, line in found:
                r.block(main, lang, code, line, db="readme")
        privileges(r, main)
        for readme, section in ((os.path.join(ROOT, "docs", "services.md"), EXAMPLE_SECTION),
                                (os.path.join(ROOT, "clients", "python", "README.md"), None),
                                (os.path.join(ROOT, "clients", "node", "README.md"), None)):
            found = blocks(readme, section)
            r.check("%s: %d code blocks found" % (os.path.relpath(readme, ROOT), len(found)),
                    len(found) > 0)
            for lang, code, line in found:
                r.block(readme, lang, code, line)
        mypy(r, os.path.join(ROOT, "clients", "python", "README.md"))
        r.node_exits()
    finally:
        for db in DBS:
            subprocess.run(["dropdb", "--if-exists", db])
        psql("postgres", "DROP ROLE IF EXISTS billing, reporting, lock_users")
        subprocess.run(["rm", "-rf", work])
        if srv:
            srv.stop()
    print("readme examples: %d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
