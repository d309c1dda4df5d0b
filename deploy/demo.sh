#!/usr/bin/env bash
# Installs dependencies, builds gpusched, starts gpuschedd (embedded emulated adapter, a local
# SQLite audit file), runs the demo workload from a client, prints what was scheduled, shows a
# preemption, runs users' kernels (SAXPY, a reduction, a tiled matrix multiply, a blur) on the
# daemon's Vulkan adapter (--with-vulkan: a GPU, or lavapipe on the CPU) and checks them
# against the CPU, then starts a second daemon with little video memory (deploy/demo-overcommit.json)
# and runs the demo over-committing it, showing where the allocations ended up, the paging
# packets and the memory manager's moves. Stops every daemon it started.
#
# Every step is bounded in time; the script exits non-zero as soon as one fails (a demo that
# does not verify exits 4).
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target gpuschedd gpusched run_examples

run_dir=$(mktemp -d /tmp/gpusched-demo-XXXXXX)
pids=()
# On any exit, stop what is still running (a clean exit has stopped everything already).
cleanup() {
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

# Each CLI call is bounded: the CLI's own request timeout is 30 s, this caps whole commands.
gs() { timeout 300 build/bin/gpusched "$@"; }

# start_daemon NAME ARGS...: starts gpuschedd on $run_dir/NAME.sock with the audit file
# $run_dir/NAME.db, waits (at most 20 s) for its "ready" line, and sets $pid and $url.
start_daemon() {
  local name=$1
  shift
  url="ipc://$run_dir/$name.sock"
  build/bin/gpuschedd --listen "$url" --db "$run_dir/$name.db" "$@" \
    >"$run_dir/$name.stdout" 2>"$run_dir/$name.log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    grep -q ready "$run_dir/$name.stdout" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q ready "$run_dir/$name.stdout" 2>/dev/null; then
    echo "gpuschedd ($name) did not start:" >&2
    cat "$run_dir/$name.log" >&2
    exit 1
  fi
  cat "$run_dir/$name.stdout"
}

# stop_daemon PID NAME: SIGTERM, then at most 20 s for a clean exit (status 0).
stop_daemon() {
  local p=$1 name=$2 rc=0
  kill -TERM "$p"
  for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    echo "gpuschedd ($name) did not stop within 20 s" >&2
    kill -KILL "$p"
    wait "$p" 2>/dev/null || true
    exit 1
  fi
  wait "$p" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "gpuschedd ($name) exited with status $rc:" >&2
    tail -n 20 "$run_dir/$name.log" >&2
    exit 1
  fi
}

start_daemon gpusched --with-vulkan
main_pid=$pid
export GPUSCHED_URL="$url"
gs info
gs demo --packets 64
echo
echo "Scheduling history (newest first):"
gs history --limit 15
gs stats

echo
echo "Preemption: a NORMAL packet spinning 300 ms on node 0, then a HIGH one on the same node:"
gs submit --node 0 --spin-us 300000 --priority-class 2 >"$run_dir/low" &
low=$!
# Wait (at most 5 s) until the daemon acknowledged the low packet, then submit the high one.
for _ in $(seq 100); do grep -q '^packet' "$run_dir/low" 2>/dev/null && break; sleep 0.05; done
gs submit --node 0 --spin-us 1000 --priority-class 4 --wait
wait $low
low_packet=$(awk '/^packet/ {print $2; exit}' "$run_dir/low")
echo "Life of the NORMAL packet $low_packet (run segments, preemption, resubmission):"
gs events "$low_packet"

echo
echo "Users' kernels on adapter 1 (Vulkan): each result checked against the CPU"
timeout 300 build/bin/run_examples --adapter 1
echo
echo "One kernel in one line: gpusched run (SAXPY, y = 2.5 x + y over 1000 floats)"
python3 -c "import struct; open('$run_dir/x.bin','wb').write(struct.pack('<1000f', *range(1000)))"
python3 -c "import struct; open('$run_dir/y.bin','wb').write(struct.pack('<1000f', *[1.0]*1000))"
gs --adapter 1 run build/examples/saxpy.spv --groups 16 --in 0="$run_dir/x.bin" \
  --in 1="$run_dir/y.bin" --out 1="$run_dir/y.out" --push-f32 2.5 --push-u32 1000
python3 -c "
import struct, sys
y = struct.unpack('<1000f', open('$run_dir/y.out', 'rb').read())
bad = [i for i in range(1000) if y[i] != 2.5 * i + 1.0]
print('y[0..3] =', y[:4], '... y[999] =', y[999], '(all 1000 as expected)' if not bad else 'WRONG at %d' % bad[0])
sys.exit(4 if bad else 0)"
packet=$(gs --adapter 1 history --limit 1 --json | python3 -c "import json, sys; print(json.load(sys.stdin)[0]['packet_id'])")
gs --adapter 1 explain "$packet"

stop_daemon "$main_pid" gpusched

echo
echo "Over-commit: a second gpuschedd with 4 MiB of video memory and a 2 MiB aperture"
echo "(deploy/demo-overcommit.json); the demo works on 16 allocations of 1 MiB each."
start_daemon overcommit --config deploy/demo-overcommit.json
oc_pid=$pid
export GPUSCHED_URL="$url"
gs info
gs demo --allocs 16 --alloc-size 1048576 --packets 64
echo
echo "The memory manager's paging packets during the demo (newest first):"
gs history --paging --limit 10
echo
# The demo destroyed what it made. Seven allocations of 1 MiB that stay a while show where
# things live: four fill the memory segment, two the aperture, the last is created in system
# memory; making it resident evicts another one.
device=$(gs device create overcommit-tour | awk '{print $2}')
ids=()
for prio in low normal high normal normal normal normal; do
  ids+=("$(gs alloc create "$device" 1M --priority "$prio" | awk '{print $2}')")
done
echo "Seven allocations of 1 MiB on device $device:"
gs alloc ls --device "$device"
echo
echo "Making allocation ${ids[6]} resident:"
gs alloc resident "$device" "${ids[6]}" --wait
gs alloc ls --device "$device"
echo
echo "The memory manager's moves (newest first):"
gs moves --limit 10
gs device destroy "$device" >/dev/null

stop_daemon "$oc_pid" overcommit
trap - EXIT
echo
echo "Audit files kept at $run_dir/gpusched.db and $run_dir/overcommit.db"
echo "(sqlite3 $run_dir/overcommit.db 'select * from moves limit 5')"
