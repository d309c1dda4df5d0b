#!/usr/bin/env bash
# The benchmark suite: builds a release build in build-rel and runs the benchmarks, each of
# which measures its baseline in the same run and prints ratios (the machine may be small and
# noisy: compare ratios, not absolute figures, between runs). Every figure is also written as
# one JSON object per line to the file given as $1 (default build-rel/bench.json), for
# comparison between commits. Bounded: each program stops by count or time.
#
#   1  bench_submit          unbatched submit vs raw nng echo, 1, 8 and 64 clients, ipc and tcp
#   5  bench_submit          (--completion) submit -> COMPLETED seen by the client vs echo
#   2  bench_async           pipelined submit from one thread (64 in flight) vs pipelined echo
#   3  bench_batch           audited SubmitBatch of 64 vs raw SQLite inserts of the same rows
#   3b bench_audit           the audit writer with its hash chain and a reader vs without
#   4  bench_submit          (--audit-baseline) submit with the audit vs a null audit sink
#   6  bench_rss             RSS with 10,000 contexts and 100,000 allocations (target 64 MiB)
#   7  bench_sched_decision  one scheduling decision at 10,000 contexts vs at 10
#   8  bench_kernels         users' kernels on lavapipe: matmul GPU time, an empty dispatch's round
#                            trip, kernel create cached vs not, each against plain Vulkan
#   9  bench_python.py       the Python package vs the C library, unbatched and pipelined (futures)
#  11  bench_hosts           history merged over 4 daemons vs one daemon's of the same rows, pages of
#                            100, 1000 and 10000 packets (target <= 2x)
#  10  gpusched-sim          200 adapters x 2,000 tenants x 10 simulated minutes: simulated time
#                            per wall second and peak RSS (target: under 5 minutes of wall time)
#
# Set SKIP_SETUP=1 to skip installing packages.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -n "${SKIP_SETUP:-}" ] || ./deploy/setup.sh

out=${1:-build-rel/bench.json}
cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-rel -j"$(nproc)" --target gpuschedd bench_submit bench_async bench_batch \
	bench_audit bench_rss bench_sched_decision bench_kernels gpusched gpusched_shared \
	gpusched-sim bench_hosts >/dev/null
mkdir -p "$(dirname "$out")"
: >"$out"

# run TITLE PROGRAM ARGS...: the program's table goes to the terminal, its JSON to $out.
run() {
	local title=$1
	shift
	echo
	echo "== $title"
	"$@" --json >>"$out"
}

bin=build-rel/bin
run "1 and 5. unbatched submit vs raw nng echo (targets: >= 0.5 at 8 and 64 clients, 1-client submit p50 <= 1.5x echo p50, <= 60 us of daemon CPU a request); submit -> completion vs echo (target p50 <= 1.5x, p99 <= 3x at 8 clients)" \
	$bin/bench_submit --clients 1,8,64 --seconds 3 --completion
run "2. pipelined submit, 64 in flight from one thread, vs pipelined echo (target >= 0.8)" \
	$bin/bench_async
run "3. audited SubmitBatch of 64 vs raw SQLite inserts of the same rows (targets: >= 0.8 of the new rows, >= 40,000 packets/s)" \
	$bin/bench_batch
run "3b. the audit writer: hash chain and a reader vs neither" \
	$bin/bench_audit --packets 50000 --rows 100000 --queries 200 --rounds 3
run "4. submit with the audit vs a null audit sink (gpuschedd --bench-null-audit; target: the null-audit daemon >= 0.7 of echo at 8 and 64 clients)" \
	$bin/bench_submit --clients 1,8,64 --transport ipc --seconds 3 --audit-baseline
run "6. resident memory with 10,000 contexts and 100,000 allocations (target <= 64 MiB)" \
	$bin/bench_rss
run "7. one scheduling decision at 10,000 contexts vs at 10 (target <= 2x)" \
	$bin/bench_sched_decision
run "8. users' kernels vs plain Vulkan on the same device (targets: matmul GPU time >= 0.95, empty-dispatch round trip <= 3x, cached create <= 5%)" \
	$bin/bench_kernels
run "9. the Python package vs the C library on one daemon (targets: unbatched >= 0.8, pipelined with futures >= 0.7)" \
	python3 tests/bench/bench_python.py --bin $bin
run "11. history merged over 4 daemons vs one daemon's history of the same rows (target <= 2x)" \
	$bin/bench_hosts

echo
echo "== 10. capacity simulation: 200 adapters x 2,000 tenants x 10 simulated minutes, preset mixed (target: under 300 s of wall time)"
sim_json=$(dirname "$out")/sim.json
$bin/gpusched-sim --adapters 200 --tenants 2000 --duration 10m --quiet --json >"$sim_json"
jq -r '"wall \(.run.wall_s | . * 10 | round / 10) s (target < 300 s), simulated/wall \(.run.simulated_per_wall | . * 10 | round / 10), \(.run.events_per_s / 1e6 | . * 100 | round / 100) M events/s, peak RSS \(.run.peak_rss_bytes / 1048576 | round) MiB; utilisation \(.engines.utilisation_mean * 1000 | round / 10)%, queue wait p99 \(.queue_wait_ms.p99) ms, Jain \(.fairness.jain)"' "$sim_json"
jq -c '{benchmark: "gpusched-sim", adapters, tenants, duration_s, wall_s: .run.wall_s,
	simulated_per_wall: .run.simulated_per_wall, events_per_s: .run.events_per_s,
	peak_rss_bytes: .run.peak_rss_bytes, target_wall_s: 300}' "$sim_json" >>"$out"

echo
echo "every figure: $out ($(wc -l <"$out") JSON objects)"
