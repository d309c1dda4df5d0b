#!/usr/bin/env python3
"""bench_python: the Python package's submission rate against the C client's, in one run
against one daemon.

  unbatched   Context.submit of a NullRendering NOP, one at a time, against
              `gpusched submit --count N --inflight 1` (the C library's CLI, same packet);
  pipelined   Context.submit_async with 64 futures in flight, against
              `gpusched submit --count N --inflight 64`.

Each pair alternates C, Python for --rounds rounds after a warm-up; the figures are the
medians of the rounds, and the ratio Python/C (targets: unbatched >= 0.8, pipelined >= 0.7).
Bounded: every measurement stops at --count packets. With --json one JSON object on stdout.
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Exit status: 0 when every measurement ran, 1 otherwise.")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-rel", "bin"),
                    help="directory with gpuschedd and gpusched (default build-rel/bin)")
    ap.add_argument("--library", default=None,
                    help="libgpusched.so.0 (default: BIN/../lib/libgpusched.so.0)")
    ap.add_argument("--count", type=int, default=5000, help="packets per measurement (5000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations (3)")
    ap.add_argument("--inflight", type=int, default=64, help="pipelined depth (64)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return ap.parse_args()


def start_daemon(binary: str, d: str):
    url = "ipc://" + os.path.join(d, "s.sock")
    proc = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", binary, "-l", url, "-d", os.path.join(d, "audit.db"),
                             "--log-level", "warn"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        line = proc.stdout.readline() if r else b""
        if b"ready" in line:
            return proc, url
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("bench_python: the daemon did not become ready")


def c_rate(cli: str, url: str, count: int, inflight: int) -> float:
    out = subprocess.run([cli, "--url", url, "submit", "--node", "1", "--flags",
                          "NullRendering", "--count", str(count), "--inflight", str(inflight),
                          "--json"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"bench_python: gpusched submit failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["submits_per_s"]


def py_unbatched(gpusched, ctx, count: int) -> float:
    nop = gpusched.DmaBuffer().nop()
    flags = gpusched.SUBMIT_NULL_RENDERING
    t0 = time.perf_counter()
    for _ in range(count):
        ctx.submit(nop, flags)
    return count / (time.perf_counter() - t0)


def py_pipelined(gpusched, ctx, count: int, inflight: int) -> float:
    """Keeps `inflight` futures in flight: each completion (a done callback, on the package's
    completion thread) frees a place for the next submission."""
    import threading
    nop = gpusched.DmaBuffer().nop()
    flags = gpusched.SUBMIT_NULL_RENDERING
    places = threading.Semaphore(inflight)
    failures = []
    all_done = threading.Event()
    left = [count]

    def done(f):
        if f.exception() is not None:
            failures.append(f.exception())
        places.release()
        left[0] -= 1
        if left[0] == 0:
            all_done.set()

    t0 = time.perf_counter()
    for _ in range(count):
        if not places.acquire(timeout=60):
            raise SystemExit("bench_python: no completion in 60 s")
        ctx.submit_async(nop, flags).add_done_callback(done)
    if not all_done.wait(timeout=60):
        raise SystemExit("bench_python: the last completions did not come in 60 s")
    if failures:
        raise SystemExit(f"bench_python: {len(failures)} submissions failed: {failures[0]}")
    return count / (time.perf_counter() - t0)


def main() -> int:
    a = parse()
    lib = a.library or os.path.join(os.path.dirname(a.bin), "lib", "libgpusched.so.0")
    os.environ["GPUSCHED_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import gpusched
    cli = os.path.join(a.bin, "gpusched")
    figures = {"unbatched": {"c": [], "python": []}, "pipelined": {"c": [], "python": []}}
    with tempfile.TemporaryDirectory(prefix="gs-bench-python.") as d:
        proc, url = start_daemon(os.path.join(a.bin, "gpuschedd"), d)
        try:
            with gpusched.connect(url) as gpu, gpu.device("bench") as dev:
                ctx = dev.context(node=1)
                py_unbatched(gpusched, ctx, 500)  # warm-up
                c_rate(cli, url, 500, 1)
                for _ in range(a.rounds):
                    figures["unbatched"]["c"].append(c_rate(cli, url, a.count, 1))
                    figures["unbatched"]["python"].append(py_unbatched(gpusched, ctx, a.count))
                    figures["pipelined"]["c"].append(c_rate(cli, url, a.count, a.inflight))
                    figures["pipelined"]["python"].append(
                        py_pipelined(gpusched, ctx, a.count, a.inflight))
                    gpu.wait(ctx.submit(gpusched.DmaBuffer().nop()).packet, 60_000)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    result = {"bench": "python", "count": a.count, "rounds": a.rounds, "inflight": a.inflight}
    targets = {"unbatched": 0.8, "pipelined": 0.7}
    lines = []
    for mode, f in figures.items():
        c, py = statistics.median(f["c"]), statistics.median(f["python"])
        result[mode] = {"c_per_s": round(c), "python_per_s": round(py),
                        "ratio": round(py / c, 3), "target": targets[mode],
                        "c_rounds": [round(x) for x in f["c"]],
                        "python_rounds": [round(x) for x in f["python"]]}
        lines.append(f"{mode:10s} C {c:9.0f}/s  Python {py:9.0f}/s  Python/C {py / c:5.2f}"
                     f"  (target >= {targets[mode]})")
    print("\n".join(lines), file=sys.stderr if a.json else sys.stdout)
    if a.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
