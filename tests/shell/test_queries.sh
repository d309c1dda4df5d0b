#!/usr/bin/env bash
# Ids that survive jq, and the audit file's views against the CLI (issue 27).
#
# Usage: test_queries.sh GPUSCHEDD GPUSCHED QUERIES_MD
#
# Starts a daemon on an ipc socket in a temporary directory, runs a workload (the demo, refused
# and faulted submissions, a provoked error), then:
#  - jq: every id the CLI prints in --json (history, explain, usage, watch, events) is fed back
#    to the CLI and names the same thing (ids are below 2^53: jq 1.6 keeps them exactly);
#  - SQL: every query of docs/queries.md runs in the sqlite3 shell on the daemon's file (with
#    the ids the CLI printed as its parameters) and gives the CLI's answer to the same question;
#  - explain says why each READY waited.
# Every wait is bounded; nothing sleeps.
set -euo pipefail

gpuschedd=$1 gpusched=$2 queries=$3
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"
sock="ipc://$dir/s.sock"
db="$dir/audit.db"

g() { "$gpusched" --url "$sock" --timeout 20000 "$@"; }

start_daemon daemon "$sock" "$db"
daemon_pid=$started_pid
g info >/dev/null || fail "the daemon did not answer"

# ---- workload --------------------------------------------------------------------------------
g demo >/dev/null || fail "demo"
g submit --node 0 --spin-us 2000 --wait >/dev/null || fail "submit"
# A move of the memory manager, made by a paging packet.
dev=$(g device create queries --json | jq .device)
alloc=$(g alloc create "$dev" 64K --json | jq .allocation)
g alloc evict "$dev" "$alloc" --wait --json | jq -e '.moves == 1' >/dev/null || fail "evict"
# Refused by the daemon (a reserved bit): a REJECTED packet and an error row.
if g submit --node 0 --flags 0x400 >/dev/null 2>&1; then fail "a reserved flag was accepted"; fi
# An error of another kind: a context that does not exist.
if g context show 12345 >"$dir/ctx.out" 2>&1; then fail "context show of nothing succeeded"; fi
grep -q NOT_FOUND "$dir/ctx.out" || fail "context show: $(cat "$dir/ctx.out")"

# Watch while packets run: the watcher starts at "now", so packets are submitted until it has
# printed 8 events (bounded: 40 submissions at most).
g watch --json --count 8 --seconds 30 >"$dir/watch.json" &
watch_pid=$!
for _ in $(seq 40); do
	kill -0 "$watch_pid" 2>/dev/null || break
	g submit --node 1 --wait >/dev/null || fail "submit while watching"
done
wait "$watch_pid" || fail "watch"
[ "$(wc -l <"$dir/watch.json")" -eq 8 ] || fail "watch printed $(wc -l <"$dir/watch.json") lines"

# ---- jq round trips --------------------------------------------------------------------------
g history --json --limit 10000 >"$dir/history.json"
n=$(jq length "$dir/history.json")
[ "$n" -ge 60 ] || fail "history has $n packets"
max=$(jq '[.[] | .packet_id, .context, .device] | max' "$dir/history.json")
[ "$max" -le 9007199254740991 ] || fail "an id above 2^53 - 1: $max"

checked=0
while read -r id ctx fence state; do
	# explain by the id jq read, and history by (context, fence), name the same packet.
	e=$(g explain "$id" --json) || fail "explain $id (from history --json | jq)"
	[ "$(jq '.packet.packet_id' <<<"$e")" = "$id" ] || fail "explain $id names another packet"
	[ "$(jq -r '.packet.state' <<<"$e")" = "$state" ] || fail "explain $id: another state"
	if [ "$fence" != 0 ]; then
		h=$(g history --json --context "$ctx" --fence "$fence")
		[ "$(jq length <<<"$h")" = 1 ] || fail "history --context $ctx --fence $fence: $h"
		[ "$(jq '.[0].packet_id' <<<"$h")" = "$id" ] || fail "fence $fence of $ctx is not $id"
	fi
	# Every READY says why it waited (at least for its submission record).
	jq -e '[.events[] | select(.state == "READY") | .detail | length > 0] | all' <<<"$e" \
		>/dev/null || fail "explain $id: a READY without a reason: $e"
	g events "$id" --json | jq -e --argjson id "$id" 'all(.[]; .packet_id == $id)' \
		>/dev/null || fail "events $id"
	checked=$((checked + 1))
done < <(jq -r '.[] | "\(.packet_id) \(.context) \(.fence) \(.state)"' "$dir/history.json" |
	head -25)
[ "$checked" -eq 25 ] || fail "checked $checked packets"

# A full page says so, with the next page's cursor, which gives the next page.
g history --json --limit 5 >"$dir/page1.json" 2>"$dir/page1.err"
cursor=$(grep -o -- '--before [0-9]*' "$dir/page1.err") || fail "a full page said nothing: $(cat "$dir/page1.err")"
g history --json --limit 5 $cursor >"$dir/page2.json" 2>/dev/null
jq -e --slurpfile p1 "$dir/page1.json" --slurpfile h "$dir/history.json" \
	'map(.packet_id) == ($h[0][5:10] | map(.packet_id)) and ($p1[0] | map(.packet_id)) ==
	($h[0][0:5] | map(.packet_id))' "$dir/page2.json" >/dev/null || fail "paging by the note's cursor"
g history --json --limit 10000 >/dev/null 2>"$dir/all.err"
[ ! -s "$dir/all.err" ] || fail "a page short of the limit warned: $(cat "$dir/all.err")"

# A context's fences count its packets: 1..k, in submission order.
ctx=$(jq '[.[] | select(.state == "COMPLETED")][0].context' "$dir/history.json")
g history --json --context "$ctx" --oldest-first --limit 10000 |
	jq -e '[.[] | .fence] == [range(1; length + 1)]' >/dev/null ||
	fail "the fences of context $ctx are not 1..n"

# usage --by context: its context ids find their packets.
g usage --by context --json >"$dir/usage.json"
while read -r ctx packets; do
	got=$(g history --json --context "$ctx" --limit 10000 | jq length)
	[ "$got" = "$packets" ] || fail "usage says $packets packets on $ctx, history $got"
done < <(jq -r '.rows[] | "\(.context) \(.packets)"' "$dir/usage.json")

# watch: each event's packet id is one explain finds, with that event in its life.
while read -r id state; do
	g explain "$id" --json | jq -e --arg s "$state" 'any(.events[]; .state == $s)' >/dev/null ||
		fail "watch's packet $id has no $state event in explain"
done < <(jq -r 'select(.kind == "packet") | "\(.packet_id) \(.state)"' "$dir/watch.json")

# ---- the docs' queries, in the sqlite3 shell -------------------------------------------------
# query NAME [PARAM=VALUE...]: the block "-- query: NAME" of docs/queries.md with its .param
# lines' values replaced, run on the file; JSON rows on stdout.
query() {
	local name=$1
	shift
	local sql
	sql=$(awk -v q="-- query: $name" '
		$0 == q { on = 1; next }
		on && /^```/ { exit }
		on { print }' "$queries")
	[ -n "$sql" ] || fail "docs/queries.md has no query $name"
	local kv
	for kv in "$@"; do
		sql=$(sed -E "s|^\.param set :${kv%%=*} .*|.param set :${kv%%=*} ${kv#*=}|" <<<"$sql")
	done
	local out
	out=$(sqlite3 -readonly -json "$db" <<<"$sql") || fail "sqlite3 failed on query $name"
	# No rows: sqlite3 prints nothing.
	if [ -n "$out" ]; then jq -c . <<<"$out"; else echo '[]'; fi
}

pick=$(jq -c '[.[] | select(.state == "COMPLETED")][3]' "$dir/history.json")
id=$(jq '.packet_id' <<<"$pick")
ctx=$(jq '.context' <<<"$pick")
fence=$(jq '.fence' <<<"$pick")

r=$(query packet id="$id")
[ "$(jq length <<<"$r")" = 1 ] || fail "query packet $id: $r"
jq -e --argjson p "$pick" '.[0] | .id == $p.packet_id and .context == $p.context and
	.fence == $p.fence and .node == $p.node and .state == $p.state and .tenant == $p.tenant' \
	<<<"$r" >/dev/null || fail "query packet: $r is not history's $pick"

r=$(query fence context="$ctx" fence="$fence")
[ "$(jq '.[0].id' <<<"$r")" = "$id" ] || fail "query fence: $r"

e=$(g explain "$id" --json)
[ "$(query events id="$id" | jq -c '[.[].state]')" = "$(jq -c '[.events[].state]' <<<"$e")" ] ||
	fail "query events differs from explain"
sql_details=$(query events id="$id" | jq -c 'map(.detail // "")')
[ "$sql_details" = "$(jq -c '[.events[].detail]' <<<"$e")" ] ||
	fail "query events' details differ from explain's: $sql_details vs $(jq -c '[.events[].detail]' <<<"$e")"
[ "$(query moves id="$id" | jq length)" = "$(jq '.moves | length' <<<"$e")" ] ||
	fail "query moves differs from explain"
# And the paging packet of the eviction, by the id explain of it is asked with.
mid=$(sqlite3 -readonly "$db" "SELECT packet_id FROM move_log WHERE allocation = $alloc AND packet_id > 0")
[ -n "$mid" ] || fail "the eviction's move names no paging packet"
want=$(g explain "$mid" --json | jq '.moves | length')
[ "$want" -ge 1 ] && [ "$(query moves id="$mid" | jq length)" = "$want" ] ||
	fail "query moves of $mid differs from explain ($want)"

r=$(query node node=1)
want=$(g history --json --node 1 --since 10m --limit 10000 | jq length)
[ "$(jq length <<<"$r")" = "$want" ] || fail "query node: $(jq length <<<"$r") rows, history $want"

r=$(query usage)
u=$(g usage --json)
jq -e --argjson u "$u" '[.[] | {tenant, packets}] ==
	[$u.rows[] | {tenant, packets}]' <<<"$r" >/dev/null || fail "query usage: $r vs $u"

r=$(query failed)
want=$(jq -c '[.[] | select(.state | IN("FAULTED", "CANCELLED", "REJECTED", "ABORTED"))][:20] |
	map(.packet_id)' "$dir/history.json")
[ "$(jq -c 'map(.id)' <<<"$r")" = "$want" ] || fail "query failed: $r, history $want"
[ "$(jq length <<<"$r")" -ge 1 ] || fail "query failed found nothing (a REJECTED was made)"

r=$(query errors)
jq -e '.[0].request == "context_query" and .[0].status == "NOT_FOUND" and
	(.[0].time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$"))' <<<"$r" >/dev/null ||
	fail "query errors: $r"

r=$(query notes)
jq -e 'any(.[]; .kind == "daemon_start")' <<<"$r" >/dev/null || fail "query notes: $r"

# ---- the file after a stop, and a -wal that is not the file's ---------------------------------
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "the daemon did not stop cleanly"
daemon_pid=
[ ! -s "$db-wal" ] || fail "a clean stop left $(stat -c %s "$db-wal") bytes of WAL"
cp "$db" "$dir/copy.db"
"$gpusched" audit verify "$dir/copy.db" >"$dir/verify.out" || fail "the copied .db: $(cat "$dir/verify.out")"
# A daemon killed with -9 leaves its WAL; beside the first file it is a foreign one.
start_daemon other "ipc://$dir/b.sock" "$dir/b.db"
other_pid=$started_pid
"$gpusched" --url "ipc://$dir/b.sock" submit --node 0 --wait >/dev/null || fail "submit to b"
kill -KILL "$other_pid"
wait "$other_pid" 2>/dev/null || true
[ -s "$dir/b.db-wal" ] || fail "the killed daemon left no WAL"
"$gpusched" audit verify "$dir/b.db" >/dev/null || fail "b.db with its own WAL does not verify"
cp "$dir/b.db-wal" "$db-wal"
rc=0
"$gpusched" audit verify "$db" >"$dir/verify.out" || rc=$?
[ "$rc" = 4 ] || fail "verify with a foreign WAL exited $rc: $(cat "$dir/verify.out")"
grep -q "another audit file's WAL" "$dir/verify.out" || fail "verify: $(cat "$dir/verify.out")"

echo "test_queries: $checked packets round-tripped through jq; every query of docs/queries.md agrees with the CLI"
