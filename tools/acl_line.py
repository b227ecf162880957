#!/usr/bin/python3
"""acl_line.py: the least-privilege Redis user of docs/connecting.md, as
documented. The one parser of that document's "ACL SETUSER rwlock ..." line:
the tests that run as the documented user (test/chaos.py,
test/cross_test.py, test/compliance/driver.py, test/installcheck_live.sh,
t/RwlockTest.pm for t/028, t/036 and RWLOCK_TEST_ACL=1) take it from here,
so CI runs with the line exactly as the document shows it.

As a module:
    setuser_args(user="rwlock", password=None, prefix="rwlock", extra=())
        the command as a list: ["ACL", "SETUSER", user, "on", ">pw", ...].
        password replaces the example's (">s3cret"); prefix replaces the
        default key prefix in the key and channel patterns (~rwlock:*,
        &rwlock:*), as docs/connecting.md tells a deployment with another
        rwlock.key_prefix to do; extra: rights added at the end (the
        topology extras of the document's second table, e.g. "+info").
As a command, the same, one argument a line:
    python3 tools/acl_line.py [--user U] [--password P] [--prefix X] [RIGHT...]
"""
import argparse
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOC = os.path.join(ROOT, "docs", "connecting.md")
DEFAULT_PREFIX = "rwlock"


def documented():
    """The line's words as the document has them (an indented code line)."""
    with open(DOC) as f:
        m = re.search(r"^\s*(ACL SETUSER rwlock .*)$", f.read(), re.M)
    if not m:
        raise RuntimeError("docs/connecting.md has no ACL SETUSER rwlock line")
    return m.group(1).split()


def setuser_args(user="rwlock", password=None, prefix=DEFAULT_PREFIX, extra=()):
    words = documented()
    words[2] = user
    out = []
    for w in words:
        if password is not None and w.startswith(">"):
            w = ">" + password
        if prefix != DEFAULT_PREFIX and w in ("~%s:*" % DEFAULT_PREFIX,
                                               "&%s:*" % DEFAULT_PREFIX):
            w = w[0] + prefix + ":*"
        out.append(w)
    if prefix != DEFAULT_PREFIX and not {"~%s:*" % prefix, "&%s:*" % prefix} <= set(out):
        raise RuntimeError("docs/connecting.md's ACL line has no ~%s:* and &%s:* to adapt"
                           % (DEFAULT_PREFIX, DEFAULT_PREFIX))
    return out + list(extra)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--user", default="rwlock")
    p.add_argument("--password")
    p.add_argument("--prefix", default=DEFAULT_PREFIX)
    p.add_argument("extra", nargs="*")
    a = p.parse_args(argv)
    print("\n".join(setuser_args(a.user, a.password, a.prefix, a.extra)))


if __name__ == "__main__":
    main(sys.argv[1:])
