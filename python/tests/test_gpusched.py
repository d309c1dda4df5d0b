"""The Python package against a real daemon: connect, devices, contexts, allocations written
and read from bytes and numpy arrays, DMA buffers, submission with and without waiting,
history, explain, usage, kernels, errors as exceptions. Run by ctest (python.test_gpusched)
with $GPUSCHEDD the daemon and $GPUSCHED_LIBRARY the built libgpusched.so.0 (conftest.py)."""
import os
import numpy as np
import pytest

import gpusched

from conftest import TOKENS


def test_connect_and_info(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu:
        info = gpu.info()
        assert info["tenant"] == "a"
        assert info["adapters"] >= 1
        assert info["tenant_view"] is True
        # The package's version is the daemon's.
        assert info["version"] == gpusched.__version__


def test_wrong_token_raises(daemon):
    with gpusched.connect(daemon, "not-a-token") as gpu:
        with pytest.raises(gpusched.GpuschedError) as e:
            gpu.info()
        assert e.value.status == "UNAUTHENTICATED"


def test_fill_then_read_with_numpy(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("py") as dev:
        ctx = dev.context(node=0)
        buf = dev.allocation(4096)
        # Bytes in from a numpy array (no copy: a writable buffer), and back.
        src = np.arange(1024, dtype=np.uint32)
        buf.write(src)
        assert np.array_equal(np.frombuffer(buf.read(), dtype=np.uint32), src)
        # A packet fills the first KiB; the rest is as written.
        r = ctx.submit(gpusched.DmaBuffer().fill(buf, 0, 1024, 0x01020304), wait_ms=30000)
        assert r.state == "COMPLETED"
        assert r.fence == 1 and r.completed_fence == 1
        got = np.frombuffer(buf.read(), dtype=np.uint32)
        assert (got[:256] == 0x01020304).all()
        assert np.array_equal(got[256:], src[256:])
        # Read-only bytes go in too.
        buf.write(b"\xff" * 16, offset=4080)
        assert buf.read(16, offset=4080) == b"\xff" * 16


def test_fences_and_history(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("py") as dev:
        ctx = dev.context(node=1)
        nop = gpusched.DmaBuffer().nop()
        results = [ctx.submit(nop, flags=gpusched.SUBMIT_NULL_RENDERING) for _ in range(10)]
        assert [r.fence for r in results] == list(range(1, 11))
        assert gpu.wait(results[-1].packet) == "COMPLETED"
        hist = gpu.history(limit=10, context=ctx.handle)
        assert [h.packet for h in hist] == [r.packet for r in reversed(results)]
        assert all(h.tenant == "a" and h.state == "COMPLETED" for h in hist)
        # Ids are JSON-safe, below 2**53.
        assert max(h.packet for h in hist) < 2**53


def test_unknown_handle_and_other_tenant(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu:
        with pytest.raises(gpusched.GpuschedError) as e:
            gpu.wait(123456789, timeout_ms=0)
        assert e.value.status == "NOT_FOUND"
        dev = gpu.device("mine")
        try:
            with gpusched.connect(daemon, TOKENS["ops"]) as ops:
                # Another tenant's device names nothing for the administrator's own calls.
                with pytest.raises(gpusched.GpuschedError) as e:
                    gpusched.Device(ops, dev.handle).context()
                assert e.value.status == "NOT_FOUND"
        finally:
            dev.destroy()


def test_no_leak_of_devices(daemon):
    """1,100 device create/destroy cycles all succeed: a device that outlived its destroy would
    count against the tenant's max_devices (1,024), and the 1,025th create would fail."""
    with gpusched.connect(daemon, TOKENS["a"]) as gpu:
        for _ in range(1100):
            with gpu.device("cycle") as dev:
                dev.allocation(4096)
        with gpu.device("last") as dev:
            assert dev.handle != 0


def test_waits_release_the_gil(daemon):
    """While one thread waits for a 300 ms packet, another Python thread keeps running."""
    import threading
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("gil") as dev:
        ctx = dev.context(node=0)
        ticks = 0
        done = threading.Event()

        def spin():
            nonlocal ticks
            while not done.is_set():
                ticks += 1

        t = threading.Thread(target=spin)
        t.start()
        try:
            before = ticks
            r = ctx.submit(gpusched.DmaBuffer().spin(300_000), wait_ms=30_000)
            during = ticks - before
        finally:
            done.set()
            t.join()
        assert r.state == "COMPLETED"
        # A held GIL would leave the other thread a few switch intervals at most.
        assert during > 10_000, f"the other thread ran {during} times during the wait"


def test_saxpy_kernel_on_vulkan(daemon):
    """The examples' SAXPY kernel (SPIR-V built with the tree) on the Vulkan adapter, numpy in
    and out: y = a * x + y, as numpy computes it (an fma may round once instead of twice)."""
    spv = os.path.join(os.environ["GS_EXAMPLES_SPV_DIR"], "saxpy.spv")
    with open(spv, "rb") as f:
        code = f.read()
    with gpusched.connect(daemon, TOKENS["a"], adapter=1) as gpu, gpu.device("saxpy") as dev:
        k = dev.kernel(code)
        assert k.local_size == (64, 1, 1)
        assert k.push_constant_bytes == 8
        assert sorted(b.binding for b in k.bindings) == [0, 1]
        n = 10_000
        x = np.arange(n, dtype=np.float32)
        y = np.ones(n, dtype=np.float32)
        out = dev.run(k, groups=((n + 63) // 64, 1, 1), buffers={0: x, 1: y},
                      push=[np.float32(2.0), np.uint32(n)], outputs=[1])
        assert np.allclose(out[1], np.float32(2.0) * x + y, rtol=1e-6)
        # The inputs are untouched; a missing binding is refused before anything runs.
        assert (y == 1).all()
        with pytest.raises(KeyError):
            dev.run(k, groups=(1, 1, 1), buffers={0: x}, push=[np.float32(1), np.uint32(1)])
        k.destroy()


def test_sync_objects_and_explain(daemon):
    """A sync object signalled from the CPU wakes a waiting thread; explain gives the packet's
    life with a reason for its READY."""
    import threading
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("sync") as dev:
        s = dev.sync(0)
        seen = []
        t = threading.Thread(target=lambda: seen.append(s.wait(5, timeout_ms=30_000)))
        t.start()
        s.signal(5)
        t.join(timeout=30)
        assert seen == [5]
        with pytest.raises(gpusched.GpuschedError) as e:
            s.signal(3)  # a monitored fence never goes backwards
        assert e.value.status == "INVALID_ARGUMENT"
        with pytest.raises(gpusched.GpuschedError) as e:
            s.wait(100, timeout_ms=10)
        assert e.value.status == "TIMEOUT"
        s.destroy()
        ctx = dev.context(node=0)
        r = ctx.submit(gpusched.DmaBuffer().nop(), wait_ms=30_000)
        x = gpu.explain(r.packet)
        assert x.packet.packet == r.packet and x.packet.fence == r.fence
        assert [v.state for v in x.events][0] == "SUBMITTED"
        assert x.events[-1].state == "COMPLETED"
        assert all(v.detail for v in x.events if v.state == "READY")


def test_issue_example_by_names_on_the_default_device(daemon, tmp_path):
    """The way the package is meant to read: gpu.kernel and gpu.run on the client (its
    default device), buffers and outputs by the names the module gives its buffers. glslc
    keeps names without -O (the tree's kernels are built with -O, which strips them)."""
    import shutil
    import subprocess
    glslc = shutil.which("glslc")
    assert glslc, "glslc (Debian: glslc) builds the tree's kernels; it is needed here too"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spv = tmp_path / "saxpy-named.spv"
    subprocess.run([glslc, "--target-env=vulkan1.2", "-o", str(spv),
                    os.path.join(root, "examples", "kernels", "saxpy.comp")], check=True)
    with gpusched.connect(daemon, TOKENS["a"], adapter=1) as gpu:
        allocations = gpu.stats().allocations
        k = gpu.kernel(spv.read_bytes())
        assert {b.name for b in k.bindings} == {"X", "Y"}
        x, y = np.arange(1e5, dtype=np.float32), np.ones(100_000, np.float32)
        out = gpu.run(k, groups=((x.size + 63) // 64, 1, 1), buffers={"X": x, "Y": y},
                      push=[np.float32(2.0), np.uint32(x.size)], outputs=["Y"])
        assert np.allclose(out["Y"], 2 * x + y, rtol=1e-6)
        # The run's context stays for the next run; the allocations are gone.
        assert gpu.stats().allocations == allocations
        with pytest.raises(KeyError):
            gpu.run(k, groups=(1, 1, 1), buffers={"Z": x})
        # Outputs by number while the buffers were named, and the same binding twice; every
        # key is checked before anything runs.
        submitted = gpu.stats().packets_submitted
        with pytest.raises(ValueError):
            gpu.run(k, groups=(1, 1, 1), buffers={"X": x, 0: x, "Y": y})
        with pytest.raises(KeyError):
            gpu.run(k, groups=(1, 1, 1), buffers={"X": x, "Y": y}, outputs=["Z"])
        assert gpu.stats().packets_submitted == submitted
        out = gpu.run(k, groups=((x.size + 63) // 64, 1, 1), buffers={"X": x, "Y": y},
                      push=[np.float32(1.0), np.uint32(x.size)], outputs=[1])
        assert np.allclose(out[1], x + y)
        # A kernel of another device: gpu.run keeps no context of it (one per run leaked).
        with gpu.device("other") as dev:
            k2 = dev.kernel(spv.read_bytes())
            contexts = gpu.stats().contexts
            for _ in range(3):
                gpu.run(k2, groups=(1, 1, 1), buffers={0: x[:64], 1: y[:64]},
                        push=[np.float32(1.0), np.uint32(64)])
            assert gpu.stats().contexts == contexts
        # Usage of the run, and history as a DataFrame where pandas is installed.
        rows = gpu.usage(since="10m", by="node")
        assert any(r.node == 1 and r.completed >= 1 for r in rows)
        hist = gpu.history(since="10m", limit=5)
        assert hist and "DISPATCH" in hist[0].dispatches
        try:
            import pandas  # noqa: F401
        except ImportError:
            with pytest.raises(ImportError, match="pandas"):
                gpusched.dataframe(hist)
        else:
            df = gpusched.dataframe(hist)
            assert list(df["packet"]) == [h.packet for h in hist]
