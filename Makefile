# rwlock: PGXS build. make && make install && make installcheck
MODULE_big = rwlock
OBJS = src/guc.o src/url.o src/passfile.o src/errors.o src/resolve.o src/redis_conn.o \
       src/scripts.o src/lua_scripts.o src/protocol.o src/holdtable.o src/keeper.o src/route.o \
       src/holds.o src/renew.o \
       src/release.o src/waiting.o src/held.o src/introspect.o src/functions.o \
       src/tls.o src/sentinel.o src/cluster.o src/quorum.o src/stats.o \
       src/deadlock.o src/walk.o src/waiters.o src/fanout.o
EXTENSION = rwlock
DATA = rwlock--1.0.sql rwlock--1.0--1.1.sql rwlock--1.1--1.2.sql
SHLIB_LINK = -lhiredis -lssl -lcrypto
PG_CPPFLAGS = -I$(srcdir)/src
LUA = lua/acquire.lua lua/release.lua lua/renew.lua lua/info.lua lua/fence.lua \
      lua/waits.lua lua/mark.lua lua/checkin.lua
EXTRA_CLEAN = src/lua_scripts.c
REGRESS = rwlock state privileges sessions upgrade stacking multi preload
# Run in a server with rwlock in shared_preload_libraries (test/run.sh):
#   make installcheck REGRESS=keeper ISOLATION=
REGRESS_PRELOADED = keeper
ISOLATION = rw-setup rw-basic rw-preference rw-xact rw-timeout rw-upgrade rw-multi
# The TAP suite (t/*.pl) runs by test/tap.sh, not PGXS's TAP_TESTS: see there.

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The scripts are compiled in, with their SHA1s; order = RwScriptId.
src/lua_scripts.c: $(LUA) tools/embed_lua.pl
	perl tools/embed_lua.pl $(LUA) > $@

# The TAP suite: keeper, crashes, Redis faults; real Redis and clusters.
tapcheck:
	bash test/tap.sh
.PHONY: tapcheck

# Every object depends on the one header.
$(OBJS): src/rwlock.h
