#!/usr/bin/env bash
# Installs dependencies, builds gpusched, starts gpuschedd (embedded emulated adapter, a local
# SQLite audit file), runs the demo workload from a client, prints what was scheduled, and
# stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target gpuschedd gpusched

run_dir=$(mktemp -d /tmp/gpusched-demo-XXXXXX)
url="ipc://$run_dir/gpusched.sock"
db="$run_dir/audit.db"
log="$run_dir/gpuschedd.log"

build/bin/gpuschedd --listen "$url" --db "$db" >"$run_dir/stdout" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT

# Wait (at most 20 s) for the daemon's "ready" line.
for _ in $(seq 200); do
  grep -q ready "$run_dir/stdout" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
grep -q ready "$run_dir/stdout" || { echo "gpuschedd did not start"; cat "$log"; exit 1; }
cat "$run_dir/stdout"

export GPUSCHED_URL="$url"
build/bin/gpusched info
build/bin/gpusched demo --packets 64
echo
echo "Scheduling history (newest first):"
build/bin/gpusched history --limit 15
build/bin/gpusched stats

echo
echo "Preemption: a NORMAL packet spinning 300 ms on node 0, then a HIGH one on the same node:"
build/bin/gpusched submit --node 0 --spin-us 300000 --priority-class 2 >"$run_dir/low" &
low=$!
# Wait (at most 5 s) until the daemon acknowledged the low packet, then submit the high one.
for _ in $(seq 100); do grep -q '^packet' "$run_dir/low" 2>/dev/null && break; sleep 0.05; done
build/bin/gpusched submit --node 0 --spin-us 1000 --priority-class 4 --wait
wait $low
low_packet=$(awk '/^packet/ {print $2; exit}' "$run_dir/low")
echo "Life of the NORMAL packet $low_packet (run segments, preemption, resubmission):"
build/bin/gpusched events "$low_packet"

kill -TERM $pid
wait $pid
trap - EXIT
echo
echo "Audit file kept at $db (sqlite3 $db 'select * from packets limit 5')"
