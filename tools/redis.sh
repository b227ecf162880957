# redis.sh: the one recipe for the throw-away Redis servers of the test
# suites, the demo and the benchmark (bash; source it). The TAP suite's Perl
# (t/RwlockTest.pm) and the Python tests (test/rwtest.py) have their own,
# with the same options.
#
#   redis_start PORT DIR [redis-server options...]
#       start a Redis on 127.0.0.1:PORT, nothing persisted, its pid file and
#       log in DIR, and wait until it answers PING (fails after 5 s)
#   redis_stop PORT
#       shut it down, without saving

redis_start()
{
	local port=$1 dir=$2
	shift 2
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir" --daemonize yes --pidfile "$dir/redis-$port.pid" \
		--logfile "$dir/redis-$port.log" "$@" >/dev/null || return 1
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "redis-server on port $port did not answer; see $dir/redis-$port.log" >&2
	return 1
}

redis_stop()
{
	redis-cli -p "$1" shutdown nosave >/dev/null 2>&1 || true
}
