#!/usr/bin/env bash
# Several daemons behind one gpusched (docs/hosts.md): three daemons on ipc sockets and, where
# this machine lets the test make a network namespace, a fourth reached over TCP in one. The
# merged history is exactly the first packets of the union of every host's own history (both
# orders), a host that is down is reported (exit 5, an error document) and not fatal, info,
# stats and usage answer per host with the host in every row, device create picks the adapter
# with the least memory in use when none has queued packets, and a command that talks to one
# daemon refuses several.
#
# Usage: test_hosts.sh GPUSCHEDD GPUSCHED
set -euo pipefail

gpuschedd=$1 gpusched=$2
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"

pids=() ns=
stop_all() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$ns" ]; then
		ip link del "gsh$$" 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap stop_all EXIT

urls=()
for i in 0 1 2; do
	start_daemon "d$i" "ipc://$dir/d$i.sock" "$dir/d$i.db"
	pids+=("$started_pid")
	urls+=("ipc://$dir/d$i.sock")
done

# A fourth daemon in a network namespace of its own, over TCP through a veth pair.
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add "gshosts$$" 2>/dev/null; then
	ns="gshosts$$"
	ip link add "gsh$$" type veth peer name "gsv$$"
	ip link set "gsv$$" netns "$ns"
	ip addr add 10.215.1.1/24 dev "gsh$$"
	ip link set "gsh$$" up
	ip -n "$ns" addr add 10.215.1.2/24 dev "gsv$$"
	ip -n "$ns" link set "gsv$$" up
	ip -n "$ns" link set lo up
	gpuschedd_plain=$gpuschedd
	# start_daemon runs "$gpuschedd": a wrapper script runs it inside the namespace.
	printf '#!/bin/sh\nexec ip netns exec %s %s "$@"\n' "$ns" "$gpuschedd_plain" >"$dir/in-ns"
	chmod +x "$dir/in-ns"
	gpuschedd="$dir/in-ns"
	start_daemon d3 "tcp://10.215.1.2:7709" "$dir/d3.db"
	pids+=("$started_pid")
	gpuschedd=$gpuschedd_plain
	urls+=("tcp://10.215.1.2:7709")
else
	echo "test_hosts: no network namespace here (not root, or no ip): ipc hosts only"
fi

url_args=()
for u in "${urls[@]}"; do url_args+=(--url "$u"); done

# Each host runs packets of its own: different counts, so that hosts interleave in time.
n=0
for u in "${urls[@]}"; do
	count=$((20 + 15 * n))
	"$gpusched" --url "$u" submit --node 0 --count "$count" --inflight 8 \
		--flags NullRendering --wait >/dev/null || fail "submit to $u"
	n=$((n + 1))
done

# The merged history must be exactly the first LIMIT packets of the union of every host's own
# history (checked in python: jq's numbers are doubles, and nanosecond times need 61 bits).
check_merge() { # LIMIT [--oldest-first]
	local limit=$1 order=${2:-}
	"$gpusched" "${url_args[@]}" history --limit "$limit" --json $order >"$dir/merged" \
		2>"$dir/err" || fail "merged history: $(cat "$dir/err")"
	for i in "${!urls[@]}"; do
		"$gpusched" --url "${urls[$i]}" history --limit 10000 --json >"$dir/one.$i"
	done
	python3 - "$dir" "$limit" "${order:+1}" "${urls[@]}" <<'PY' || fail "merged history (limit $limit $order)"
import json, sys
d, limit, oldest, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
rows = []
for i, url in enumerate(urls):
    # Each host's own order (newest first) is kept for equal times: the merge keeps it too.
    own = json.load(open(f"{d}/one.{i}"))
    if oldest:
        own.reverse()
    rows += [(r["submitted_ns"], i, k, r["packet_id"]) for k, r in enumerate(own)]
rows.sort(key=lambda x: ((x[0] if oldest else -x[0]), x[1], x[2]))
want = [(urls[h], p) for _, h, _, p in rows[:limit]]
got = [(r["host"], r["packet_id"]) for r in json.load(open(f"{d}/merged"))]
if got != want:
    first = next(i for i in range(min(len(got), len(want)) + 1) if i >= min(len(got), len(want)) or got[i] != want[i])
    print(f"differs at {first}: got {got[first:first+3]} want {want[first:first+3]} ({len(got)} vs {len(want)})", file=sys.stderr)
    sys.exit(1)
PY
}
for limit in 1 7 40 1000; do
	check_merge "$limit"
	check_merge "$limit" --oldest-first
done
# Every row names its host, and the human table has the HOST column.
jq -e 'all(.[]; .host | startswith("ipc://") or startswith("tcp://"))' "$dir/merged" >/dev/null ||
	fail "a merged row without its host"
"$gpusched" "${url_args[@]}" history --limit 5 >"$dir/out" || fail "history (text)"
grep -q '^HOST PACKET' "$dir/out" || fail "no HOST column: $(cat "$dir/out")"

# A host that is down: reported on stderr and as a JSON document, exit 5, the rest merged.
rc=0
"$gpusched" "${url_args[@]}" --url "ipc://$dir/none.sock" history --limit 1000 --json \
	>"$dir/out" 2>"$dir/err" || rc=$?
[ "$rc" = 5 ] || fail "a host down: exit $rc, not 5"
grep -q "none.sock left out" "$dir/err" || fail "the host down is not reported: $(cat "$dir/err")"
head -1 "$dir/out" | jq -e 'length > 0' >/dev/null || fail "no merged rows with a host down"
tail -1 "$dir/out" | jq -e '.host | endswith("none.sock")' >/dev/null ||
	fail "no error document for the host down: $(tail -1 "$dir/out")"
# Every host down: exit 3.
rc=0
"$gpusched" --url "ipc://$dir/x.sock" --url "ipc://$dir/y.sock" history >/dev/null 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "every host down: exit $rc, not 3"

# $GPUSCHED_URL as a list is the same as --url repeated.
list=$(
	IFS=,
	echo "${urls[*]}"
)
GPUSCHED_URL="$list" "$gpusched" history --limit 40 --json >"$dir/env" || fail "GPUSCHED_URL list"
"$gpusched" "${url_args[@]}" history --limit 40 --json >"$dir/flags"
cmp -s "$dir/env" "$dir/flags" || fail "GPUSCHED_URL as a list differs from --url repeated"
rc=0
GPUSCHED_URL=" , ," "$gpusched" history >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "an empty GPUSCHED_URL list: exit $rc, not 2"

# Per host: info, stats and usage, the host in every document and row.
"$gpusched" "${url_args[@]}" stats --json >"$dir/stats" || fail "stats"
[ "$(wc -l <"$dir/stats")" = "${#urls[@]}" ] || fail "stats: not one document per host"
jq -s -e --argjson n "${#urls[@]}" '[.[].host] | unique | length == $n' "$dir/stats" >/dev/null ||
	fail "stats: hosts missing"
"$gpusched" "${url_args[@]}" usage --json >"$dir/usage" || fail "usage"
jq -s -e 'all(.[]; .host and all(.rows[]; .host))' "$dir/usage" >/dev/null ||
	fail "usage: a row without its host"
"$gpusched" "${url_args[@]}" info >"$dir/info" || fail "info"
[ "$(grep -c '^== host ' "$dir/info")" = "${#urls[@]}" ] || fail "info: not a section per host"

# trace: every host's engines and contexts as processes named by its URL, all slices.
"$gpusched" "${url_args[@]}" trace -o "$dir/all.json" --json >"$dir/out" || fail "trace"
want_slices=0
for u in "${urls[@]}"; do
	"$gpusched" --url "$u" trace -o "$dir/one.json" --json >"$dir/one.out" || fail "trace $u"
	want_slices=$((want_slices + $(jq .slices "$dir/one.out")))
	jq -e --arg e "engines of $u" --arg c "contexts of $u" \
		'[.traceEvents[] | select(.name == "process_name") | .args.name] |
		 index($e) != null and index($c) != null' "$dir/all.json" >/dev/null ||
		fail "trace: no processes of $u"
done
[ "$(jq .slices "$dir/out")" = "$want_slices" ] ||
	fail "trace: $(jq .slices "$dir/out") slices, the hosts' own traces have $want_slices"

# timeline: every host's engines as lanes, every host's runs and packets.
"$gpusched" "${url_args[@]}" timeline -o "$dir/all.svg" --json >"$dir/out" || fail "timeline"
want_runs=0 want_packets=0 want_lanes=0
for u in "${urls[@]}"; do
	"$gpusched" --url "$u" timeline -o "$dir/one.svg" --json >"$dir/one.out" || fail "timeline $u"
	want_runs=$((want_runs + $(jq .runs "$dir/one.out")))
	want_packets=$((want_packets + $(jq .packets "$dir/one.out")))
	want_lanes=$((want_lanes + $(jq .lanes "$dir/one.out")))
	grep -qF "<title>$u</title>" "$dir/all.svg" || fail "timeline: no lane names $u"
done
jq -e --argjson r "$want_runs" --argjson p "$want_packets" --argjson l "$want_lanes" \
	'.runs == $r and .packets == $p and .lanes == $l' "$dir/out" >/dev/null ||
	fail "timeline: $(cat "$dir/out"), the hosts' own: runs $want_runs packets $want_packets lanes $want_lanes"
grep -q '>h0 node 0<' "$dir/all.svg" || fail "timeline: no lane h0 node 0"

# Placement: nothing queued anywhere, so the adapter with the least memory in use wins.
dev=$("$gpusched" --url "${urls[0]}" device create filler --json | jq -r .device)
"$gpusched" --url "${urls[0]}" alloc create "$dev" 4194304 >/dev/null ||
	fail "alloc on host 0"
"$gpusched" "${url_args[@]}" device create placed --json >"$dir/placed" || fail "device create"
jq -e --arg h "${urls[1]}" '.host == $h and .adapter == 0 and .device > 0' "$dir/placed" \
	>/dev/null || fail "device create chose $(cat "$dir/placed"), not the empty ${urls[1]}"

# The same daemon twice is refused (its packets would count twice).
rc=0
"$gpusched" --url "${urls[0]}" --url "${urls[0]}" history >/dev/null 2>"$dir/err" || rc=$?
[ "$rc" = 2 ] && grep -q "given twice" "$dir/err" || fail "a URL twice: exit $rc"

# A command that talks to one daemon, and a cursor of one host's ids, refuse several.
rc=0
"$gpusched" "${url_args[@]}" sync create 1 >/dev/null 2>"$dir/err" || rc=$?
[ "$rc" = 2 ] && grep -q "talks to one daemon" "$dir/err" || fail "sync with several hosts: $rc"
rc=0
"$gpusched" "${url_args[@]}" history --before 5 >/dev/null 2>"$dir/err" || rc=$?
[ "$rc" = 2 ] || fail "--before with several hosts: exit $rc"
echo "test_hosts: ok (${#urls[@]} hosts)"
