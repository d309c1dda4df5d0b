"""Nothing leaks: 10,000 create/free cycles leave the daemon's object counts where they were,
and the Python process's resident memory grows by a bounded amount (printed)."""
import os

import numpy as np

import gpusched

from conftest import TOKENS

CYCLES = 10_000
# Growth allowed after the warm-up: the sanitizers' allocator keeps freed memory in
# quarantine (ASAN_OPTIONS quarantine_size_mb, set small by ctest) and malloc keeps arenas.
RSS_BOUND = 8 << 20


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_create_free_cycles_leak_nothing(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu:
        base = gpu.stats()
        data = np.arange(256, dtype=np.uint32)

        def cycle(i):
            if i % 10 == 0:  # a device with everything in it, freed together
                with gpu.device("cycle") as dev:
                    dev.context(node=0)
                    dev.array(data)
                    dev.sync(0)
                return
            with dev_keep.allocation(1024) as a, dev_keep.context(node=1) as c, \
                    dev_keep.sync(i) as s:
                a.write(data)
                c.query(), s.handle

        with gpu.device("keep") as dev_keep:
            for i in range(1000):  # warm-up: caches, arenas, the sanitizers' quarantine
                cycle(i)
            before = rss()
            for i in range(CYCLES):
                cycle(i)
            after = rss()
            mid = gpu.stats()
            assert mid.devices == base.devices + 1
        end = gpu.stats()
        assert (end.devices, end.contexts, end.allocations) == \
            (base.devices, base.contexts, base.allocations)
        assert mid.contexts == base.contexts and mid.allocations == base.allocations
        growth = after - before
        print(f"\nRSS over {CYCLES} create/free cycles: {before / 2**20:.1f} MiB -> "
              f"{after / 2**20:.1f} MiB ({growth / 1024:+.0f} KiB, "
              f"{growth / CYCLES:+.1f} bytes per cycle)")
        assert growth < RSS_BOUND, f"RSS grew by {growth} bytes over {CYCLES} cycles"
