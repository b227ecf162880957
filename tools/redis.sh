# redis.sh: the one recipe for the throw-away Redis servers of the test
# suites, the demo and the benchmark (bash; source it). The TAP suite's Perl
# (t/RwlockTest.pm) and the Python tests (test/rwtest.py) have their own,
# with the same options.
#
# The server is RWLOCK_REDIS_SERVER (default redis-server; valkey-server
# for the Valkey pass of test/run.sh) and its client RWLOCK_REDIS_CLI
# (default: the server's name with -cli for -server, so valkey-server
# brings valkey-cli; Valkey's redis-* compatibility links are not relied
# on). Sourcing this sets REDIS_SERVER and REDIS_CLI to them.
#
#   redis_start PORT DIR [redis-server options...]
#       start a Redis on 127.0.0.1:PORT, nothing persisted, its pid file and
#       log in DIR, and wait until it answers PING (fails after 5 s)
#   redis_stop PORT
#       shut it down, without saving

REDIS_SERVER=${RWLOCK_REDIS_SERVER:-redis-server}
REDIS_CLI=${RWLOCK_REDIS_CLI:-${REDIS_SERVER%-server}-cli}

redis_start()
{
	local port=$1 dir=$2
	shift 2
	"$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir" --daemonize yes --pidfile "$dir/redis-$port.pid" \
		--logfile "$dir/redis-$port.log" "$@" >/dev/null || return 1
	for _ in $(seq 100); do
		"$REDIS_CLI" -p "$port" ping >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "$REDIS_SERVER on port $port did not answer; see $dir/redis-$port.log" >&2
	return 1
}

redis_stop()
{
	"$REDIS_CLI" -p "$1" shutdown nosave >/dev/null 2>&1 || true
}
