"""Futures (submit_async, wait_async, Sync.wait_async), batches, and the DMA commands beyond
fill, against the session's daemon."""
import concurrent.futures

import numpy as np
import pytest

import gpusched

from conftest import TOKENS


def test_many_submissions_in_flight(daemon):
    """300 packets with up to 64 futures in flight: every one acknowledged once, fences 1..300
    each once (in flight together they may be numbered in any order), all COMPLETED."""
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("futures") as dev:
        ctx = dev.context(node=1)
        nop = gpusched.DmaBuffer().nop()
        inflight, results = set(), []
        for _ in range(300):
            if len(inflight) == 64:
                done, inflight = concurrent.futures.wait(
                    inflight, timeout=30, return_when=concurrent.futures.FIRST_COMPLETED)
                assert done, "no submission completed in 30 s"
                results += [f.result() for f in done]
            inflight.add(ctx.submit_async(nop, flags=gpusched.SUBMIT_NULL_RENDERING))
        done, pending = concurrent.futures.wait(inflight, timeout=30)
        assert not pending
        results += [f.result() for f in done]
        assert sorted(r.fence for r in results) == list(range(1, 301))
        assert len({r.packet for r in results}) == 300
        last = max(results, key=lambda r: r.fence)
        assert gpu.wait_async(last.packet).result(timeout=30) == "COMPLETED"
        assert ctx.query().completed_fence == 300


def test_submit_async_with_wait_gives_the_final_state(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("futures") as dev:
        ctx = dev.context(node=0)
        f = ctx.submit_async(gpusched.DmaBuffer().spin(1000), wait_ms=30_000)
        r = f.result(timeout=60)
        assert r.state == "COMPLETED" and r.fence == 1 and r.completed_fence == 1


def test_sync_wait_async_cancel_and_timeout(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("futures") as dev:
        s = dev.sync(0)
        f = s.wait_async(3, timeout_ms=30_000)
        assert not f.done()  # nothing signalled it yet
        s.signal(3)
        assert f.result(timeout=30) == 3
        # A wait that would last 30 s, cancelled: the future says so at once.
        g = s.wait_async(10, timeout_ms=30_000)
        assert g.cancel() and g.cancelled()
        with pytest.raises(concurrent.futures.CancelledError):
            g.result(timeout=1)
        # A wait that runs out in the daemon.
        h = s.wait_async(10, timeout_ms=20)
        with pytest.raises(gpusched.GpuschedError) as e:
            h.result(timeout=30)
        assert e.value.status == "TIMEOUT"
        # The client still works.
        assert s.wait(3, timeout_ms=1000) == 3


def test_close_fails_what_is_in_flight(daemon):
    gpu = gpusched.connect(daemon, TOKENS["a"])
    dev = gpu.device("closing")
    s = dev.sync(0)
    f = s.wait_async(1, timeout_ms=60_000)
    gpu.close()
    with pytest.raises(gpusched.GpuschedError) as e:
        f.result(timeout=30)
    assert e.value.status == "CANCELLED"
    with pytest.raises(gpusched.GpuschedError):
        dev.context()
    gpu.close()  # twice is harmless


def test_batch_across_contexts(daemon):
    """One request, all or nothing: each context counts its own fences; a batch with an
    unknown context is refused whole and takes no fence."""
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("batch") as dev:
        a, b = dev.context(node=0), dev.context(node=1)
        nop = gpusched.DmaBuffer().nop()
        rs = gpu.submit_batch([(a, nop), (b, nop, gpusched.SUBMIT_NULL_RENDERING), (a, nop)])
        assert [r.fence for r in rs] == [1, 1, 2]
        assert [r.node for r in rs] == [0, 1, 0]
        with pytest.raises(gpusched.GpuschedError) as e:
            gpu.submit_batch([(a, nop), (gpusched.Context(gpu, 12345), nop)])
        assert e.value.status == "NOT_FOUND"
        assert gpu.wait(rs[2].packet) == "COMPLETED"
        assert a.query().submitted_fence == 2


def test_copy_checksum_signal_and_gpu_wait(daemon):
    """A packet held by a GPU wait until the CPU signals; copy and checksum move real bytes."""
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("dma") as dev:
        ctx = dev.context(node=0)
        src = dev.array(np.arange(1024, dtype=np.uint32))
        dst = dev.allocation(4096 + 16)
        s = dev.sync(0)
        dma = (gpusched.DmaBuffer().wait(s, 1).copy(dst, 0, src, 0, 4096)
               .checksum(dst, 4096, src, 0, 4096).checksum(dst, 4104, dst, 0, 4096)
               .signal(s, 2))
        r = ctx.submit(dma)
        held = gpu.wait_async(r.packet, timeout_ms=30_000)
        assert ctx.query().completed_fence == 0  # waits for the sync object
        assert not held.done()
        s.signal(1)
        assert held.result(timeout=30) == "COMPLETED"
        assert s.wait(2, timeout_ms=1000) == 2
        got = dst.read_array(np.uint32, (1024,))
        assert np.array_equal(got, np.arange(1024, dtype=np.uint32))
        sums = dst.read(16, offset=4096)
        assert sums[:8] == sums[8:] and sums[:8] != bytes(8)
        # read_into fills the caller's array in place.
        out = np.zeros(1024, dtype=np.uint32)
        assert dst.read_into(out) is out and out[5] == 5
        x = gpu.explain(r.packet)
        assert [e.state for e in x.events][-1] == "COMPLETED"


def test_waits_inside_done_callbacks(daemon):
    """A done-callback runs on the completion thread: a wait there goes to the library
    instead of a future only that thread could complete (it hung), and its result comes."""
    import threading
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("callbacks") as dev:
        ctx = dev.context(node=0)
        s = dev.sync(0)
        seen, done = [], threading.Event()

        def chained(f):
            r = f.result()
            seen.append(gpu.wait(r.packet, timeout_ms=30_000))
            seen.append(ctx.submit(gpusched.DmaBuffer().nop(), wait_ms=30_000).state)
            s.signal(1)
            seen.append(s.wait(1, timeout_ms=1000))
            done.set()

        ctx.submit_async(gpusched.DmaBuffer().nop()).add_done_callback(chained)
        assert done.wait(timeout=60), "a wait inside a done-callback did not return"
        assert seen == ["COMPLETED", "COMPLETED", 1]


def test_close_from_a_done_callback(daemon):
    """close() inside a done-callback: the completion thread cannot join itself; it frees the
    queue once the callback returns, and the future still completes."""
    import threading
    gpu = gpusched.connect(daemon, TOKENS["a"])
    dev = gpu.device("closing-inside")
    closed = threading.Event()

    def close(f):
        gpu.close()
        closed.set()

    f = dev.context(node=0).submit_async(gpusched.DmaBuffer().nop())
    f.add_done_callback(close)
    assert closed.wait(timeout=30)
    assert f.result(timeout=1).fence == 1
    with pytest.raises(gpusched.GpuschedError) as e:
        gpu.info()
    assert e.value.status == "CANCELLED"
