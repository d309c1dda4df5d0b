#!/usr/bin/env bash
# gpusched-sim as users run it: the report, --json through jq, the same output for the same
# seed, every preset printed and read back as a file, and bad arguments and workload files
# refused with exit status 2 and a message that names the problem.
#
# Usage: test_sim.sh GPUSCHED_SIM
set -euo pipefail

sim=$1
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"

# run ARGS...: its output in $dir/out, its errors in $dir/err, its status in rc.
run() {
	rc=0
	"$sim" "$@" >"$dir/out" 2>"$dir/err" </dev/null || rc=$?
}

# refused WHAT ARGS...: exit status 2 and WHAT in the message.
refused() {
	local what=$1
	shift
	run "$@"
	[ "$rc" = 2 ] || fail "gpusched-sim $*: exit $rc, not 2"
	grep -qF -- "$what" "$dir/err" || fail "gpusched-sim $*: \"$what\" not in: $(cat "$dir/err")"
}

run --help
[ "$rc" = 0 ] && grep -q -- '--workload' "$dir/out" || fail "--help"
run --version
[ "$rc" = 0 ] && grep -q '^gpusched-sim ' "$dir/out" || fail "--version"

# The report: every section, and no progress line when stderr is not a terminal.
run --adapters 2 --tenants 20 --duration 5s
[ "$rc" = 0 ] || fail "a default run: exit $rc: $(cat "$dir/err")"
for section in engines packets 'queue wait' preemptions paging fairness class run; do
	grep -q "^$section" "$dir/out" || fail "the report lacks \"$section\": $(cat "$dir/out")"
done
[ ! -s "$dir/err" ] || fail "stderr of a run off a terminal: $(cat "$dir/err")"

# --json: the figures a script reads, a row per engine and tenant on request.
run --adapters 3 --tenants 30 --duration 5s --json --per-engine --per-tenant --seed 9
[ "$rc" = 0 ] || fail "--json: exit $rc"
jq -e '.adapters == 3 and .tenants == 30 and .seed == 9 and .policy == "weighted" and
	(.engine_rows | length) == 3 and (.tenant_rows | length) == 30 and
	.packets.submitted == ([.tenant_rows[].submitted] | add) and
	.packets.submitted == .packets.completed + .packets.cancelled + .packets.queued_at_end and
	.engines.utilisation_max <= 1 and .fairness.jain > 0 and .fairness.jain <= 1 and
	.run.simulated_per_wall > 0 and .run.peak_rss_bytes > 0' "$dir/out" >/dev/null ||
	fail "the JSON lacks or contradicts figures: $(head -c 800 "$dir/out")"

# The same seed gives the same output (but for the run's own cost), another seed another.
same() { jq -S 'del(.run)' "$1"; }
run --adapters 2 --tenants 25 --duration 3s --json --per-tenant --policy fixed_share
same "$dir/out" >"$dir/a"
run --adapters 2 --tenants 25 --duration 3s --json --per-tenant --policy fixed_share
same "$dir/out" >"$dir/b"
cmp -s "$dir/a" "$dir/b" || fail "two runs with one seed differ: $(diff "$dir/a" "$dir/b" | head)"
run --adapters 2 --tenants 25 --duration 3s --json --per-tenant --policy fixed_share --seed 2
same "$dir/out" >"$dir/c"
! cmp -s "$dir/a" "$dir/c" || fail "seeds 1 and 2 gave the same output"

# Every preset, printed, is a workload file that runs like the preset.
for preset in mixed inference training overcommit bursty; do
	run --print-workload --workload "$preset"
	[ "$rc" = 0 ] || fail "--print-workload $preset"
	cp "$dir/out" "$dir/$preset.json"
	run --workload "$preset" --tenants 12 --adapters 2 --duration 2s --json
	jq -S 'del(.run, .workload)' "$dir/out" >"$dir/p"
	run --workload "$dir/$preset.json" --tenants 12 --adapters 2 --duration 2s --json
	[ "$rc" = 0 ] || fail "the printed $preset: $(cat "$dir/err")"
	jq -S 'del(.run, .workload)' "$dir/out" >"$dir/f"
	cmp -s "$dir/p" "$dir/f" || fail "preset $preset and its printed file differ"
done

# Bad arguments.
refused 'a whole number from 1' --adapters 0
refused 'a whole number from 1' --tenants -3
refused 'a whole number from 1' --adapters 100001
refused 'a whole number from 1' --tenants 18446744073709551616
refused 'a time from 1ns to 30d' --duration 0s
refused 'a time from 1ns to 30d' --duration 10x
refused 'a time from 1ns to 30d' --duration 31d
refused 'a time from 1ns to 30d' --duration 99999999999999999999h
refused 'weighted, equal_share' --policy fair
refused 'least_loaded or round_robin' --placement random
refused 'unexpected argument' extra
refused 'is not a preset' --print-workload --workload "$dir/mixed.json"
run --no-such-option
[ "$rc" = 2 ] || fail "an unknown option: exit $rc"

# Bad workload files: each named with the key at fault.
refused 'not a preset' --workload "$dir/none.json"
refused 'cannot read it: Is a directory' --workload "$dir"
printf '{"classes": [{"name": "a", "arrival": {"process": "closed"}, "packet_us": {"dist": "fixed", "value": 1}, "memory": {"allocations": 1}}]}' >"$dir/w1.json"
refused "$dir/w1.json: classes[0].memory: \"allocation_mib\" is missing" --workload "$dir/w1.json"
printf '{"classes": [{"name": "a", "arrival": {"process": "closed"}, "packet_us": {"dist": "fixed", "value": 1}}], "adapter": {"memory_mb": 1}}' >"$dir/w2.json"
refused 'adapter: unknown key "memory_mb"' --workload "$dir/w2.json"
printf '{"classes": [' >"$dir/w3.json"
refused "$dir/w3.json: line 1" --workload "$dir/w3.json"
head -c 2000000 /dev/zero | tr '\0' ' ' >"$dir/big.json"
refused 'larger than 1 MiB' --workload "$dir/big.json"
printf '{"classes": []}\0' >"$dir/nul.json"
refused 'NUL byte' --workload "$dir/nul.json"
echo "test_sim: ok"
