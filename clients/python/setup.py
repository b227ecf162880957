"""The protocol's scripts are the repository's lua/*.lua, byte for byte
(docs/protocol.md 6). They are not kept a second time in clients/python:
building the package copies them into it (rwlock_client/lua/), and an sdist
carries that copy, so a wheel built from the sdist has them too."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("acquire", "release", "renew", "info", "fence", "waits", "mark", "checkin")
REPO_LUA = os.path.join(HERE, "..", "..", "lua")
PKG_LUA = os.path.join("rwlock_client", "lua")


def lua_source():
    """The repository's lua/ when building from a checkout, else the copy an
    sdist carries; a clear error otherwise."""
    for d in (REPO_LUA, os.path.join(HERE, PKG_LUA)):
        if all(os.path.isfile(os.path.join(d, s + ".lua")) for s in SCRIPTS):
            return d
    raise SystemExit(
        "rwlock-client: the protocol's Lua scripts were not found. Build this "
        "package from the rwlock repository (pip install ./clients/python: "
        "they are copied from ../../lua) or from its sdist, which carries them; "
        "looked in %s and %s." % (os.path.normpath(REPO_LUA), os.path.join(HERE, PKG_LUA)))


def copy_scripts(dest):
    src = lua_source()
    os.makedirs(dest, exist_ok=True)
    for s in SCRIPTS:
        if os.path.abspath(os.path.join(src, s + ".lua")) != os.path.abspath(os.path.join(dest, s + ".lua")):
            shutil.copyfile(os.path.join(src, s + ".lua"), os.path.join(dest, s + ".lua"))


class BuildPy(build_py):
    def run(self):
        super().run()
        copy_scripts(os.path.join(self.build_lib, PKG_LUA))


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        copy_scripts(os.path.join(base_dir, PKG_LUA))


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
