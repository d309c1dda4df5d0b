"""Error paths: unknown handles, quotas, waits that run out, a daemon that dies mid-call, a
client after close, bad arguments caught before sending. Each is a GpuschedError with the
status a script can test."""
import threading
import time

import numpy as np
import pytest

import gpusched

from conftest import TOKENS


def test_unknown_handles(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu:
        for call in (lambda: gpusched.Context(gpu, 12345).submit(gpusched.DmaBuffer().nop()),
                     lambda: gpusched.Allocation(gpu, 12345, 16).read(),
                     lambda: gpusched.Sync(gpu, 12345).signal(1),
                     lambda: gpusched.Device(gpu, 12345).allocation(16),
                     lambda: gpu.explain(12345)):
            with pytest.raises(gpusched.GpuschedError) as e:
                call()
            assert e.value.status == "NOT_FOUND", e.value
            assert e.value.code == 4


def test_quota_exceeded(daemon):
    """Tenant q may hold 64 KiB and 2 contexts."""
    with gpusched.connect(daemon, TOKENS["q"]) as gpu, gpu.device("q") as dev:
        with pytest.raises(gpusched.GpuschedError) as e:
            dev.allocation(1 << 20)
        assert e.value.status == "QUOTA_EXCEEDED"
        with dev.allocation(32768):
            pass
        dev.context(), dev.context()
        with pytest.raises(gpusched.GpuschedError) as e:
            dev.context()
        assert e.value.status == "QUOTA_EXCEEDED"
        assert "context" in e.value.message


def test_waits_run_out(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("slow") as dev:
        ctx = dev.context(node=0)
        r = ctx.submit(gpusched.DmaBuffer().spin(500_000))
        with pytest.raises(gpusched.GpuschedError) as e:
            gpu.wait(r.packet, timeout_ms=10)
        assert e.value.status == "TIMEOUT"
        # A submission that waits less than the packet runs answers with its state then.
        r2 = ctx.submit(gpusched.DmaBuffer().spin(500_000), wait_ms=10)
        assert r2.state in ("SUBMITTED", "READY", "RUNNING")
        assert gpu.wait(r2.packet, timeout_ms=30_000) == "COMPLETED"


def test_bad_arguments_are_refused_before_sending(daemon):
    with gpusched.connect(daemon, TOKENS["a"]) as gpu, gpu.device("bad") as dev:
        with pytest.raises(gpusched.GpuschedError) as e:
            gpusched.DmaBuffer().fill(gpusched.Allocation(gpu, 0, 16), 0, 16, 1)
        assert e.value.status == "INVALID"
        with pytest.raises(ValueError):
            dev.allocation(16, preference=[1, 2, 3, 4, 5, 6])
        with pytest.raises(ValueError):
            gpu.history(since="yesterday-ish")
        with pytest.raises(ValueError):
            gpu.usage(by="colour")
        a = dev.allocation(64)
        with pytest.raises(ValueError):
            a.read_into(b"read-only")
        with pytest.raises(ValueError):
            a.write(np.arange(16, dtype=np.uint32)[::2])  # not contiguous
        # The daemon refuses a reserved segment preference.
        with pytest.raises(gpusched.GpuschedError) as e:
            dev.allocation(64, segments=[1], preference=[2])
        assert e.value.status == "SEGMENT_PREFERENCE"


def test_connect_failures():
    with pytest.raises(gpusched.GpuschedError) as e:
        gpusched.connect("tls+tcp://127.0.0.1:9", ca="")
    assert e.value.status == "INVALID" and "CA" in e.value.message
    with pytest.raises(gpusched.GpuschedError) as e:
        gpusched.connect("bogus://x")
    assert e.value.code < 0


def test_daemon_gone_mid_call(own_daemon):
    """kill -9 while a wait is parked in the daemon: the future fails TRANSPORT at once (not
    at its 60 s deadline), a blocking call in another thread returns with an error, and a
    later call fails within the client's timeout."""
    gpu = gpusched.connect(own_daemon.url, TOKENS["a"], timeout_ms=2000)
    try:
        dev = gpu.device("doomed")
        ctx = dev.context(node=0)
        r = ctx.submit(gpusched.DmaBuffer().spin(30_000_000, preemptible=False))
        f = gpu.wait_async(r.packet, timeout_ms=60_000)
        errors = []

        def blocking():
            try:
                gpu.wait(r.packet, timeout_ms=60_000)
            except gpusched.GpuschedError as e:
                errors.append(e)

        t = threading.Thread(target=blocking)
        t.start()
        t0 = time.monotonic()
        own_daemon.kill()
        with pytest.raises(gpusched.GpuschedError) as e:
            f.result(timeout=30)
        assert e.value.status == "TRANSPORT"
        t.join(timeout=30)
        assert not t.is_alive() and len(errors) == 1
        assert errors[0].status in ("TRANSPORT", "TIMEOUT")
        assert time.monotonic() - t0 < 20
        with pytest.raises(gpusched.GpuschedError) as e:
            gpu.info()
        assert e.value.status in ("TRANSPORT", "TIMEOUT")
    finally:
        gpu.close()


def test_ctrl_c_ends_a_wait(own_daemon):
    """SIGINT during a wait for a 60 s packet raises KeyboardInterrupt at once, not when the
    packet ends (a wait inside the C library would hold it until then); the client goes on."""
    import signal
    with gpusched.connect(own_daemon.url, TOKENS["a"]) as gpu, gpu.device("ctrl-c") as dev:
        r = dev.context(node=0).submit(gpusched.DmaBuffer().spin(60_000_000, preemptible=False))
        main = threading.get_ident()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            threading.Thread(target=lambda: signal.pthread_kill(main, signal.SIGINT)).start()
            gpu.wait(r.packet, timeout_ms=120_000)
        assert time.monotonic() - t0 < 30
        assert gpu.info()["tenant"] == "a"
