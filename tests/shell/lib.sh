# Shared by the shell tests: a temporary directory, failing with the daemon's log, and starting
# a daemon that is ready to serve. Source it after setting gpuschedd; it sets dir and a trap.
# Every wait is bounded; nothing sleeps.

dir=$(mktemp -d "/tmp/gs-$(basename "$0" .sh).XXXXXX")
daemon_pid=

cleanup() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	if [ -f "$dir/daemon.log" ]; then tail -20 "$dir/daemon.log" >&2; fi
	exit 1
}

# start_daemon NAME SOCKET DB [ARGS...]: starts a daemon; it prints a line with "ready" once it
# serves requests, read from a pipe (for 30 s at most), which is then drained. Its log is
# $dir/NAME.log. Sets started_pid.
start_daemon() {
	local name=$1 url=$2 file=$3
	shift 3
	mkfifo "$dir/$name.out"
	"$gpuschedd" -l "$url" -d "$file" --log-level warn "$@" >"$dir/$name.out" \
		2>"$dir/$name.log" &
	started_pid=$!
	local fd line ready=
	exec {fd}<"$dir/$name.out"
	while IFS= read -r -t 30 line <&"$fd"; do
		case $line in *ready*) ready=1 && break ;; esac
	done
	[ -n "$ready" ] || fail "daemon $name did not become ready"
	cat <&"$fd" >/dev/null &
}
