"""Several daemons through gpusched.Hosts (docs/hosts.md): history merged exactly, per-host
usage and stats, placement on the least-loaded adapter, a host that is down left out."""
import tempfile

import pytest

import gpusched
from conftest import Daemon


@pytest.fixture
def three():
    """Three daemons of the test's own."""
    dirs = [tempfile.TemporaryDirectory(prefix="gs-python-hosts.") for _ in range(3)]
    daemons = [Daemon(d.name) for d in dirs]
    yield daemons
    for dm in daemons:
        assert dm.stop() == 0
    for d in dirs:
        d.cleanup()


def fill(url, count):
    with gpusched.connect(url, "t-a") as c:
        ctx = c.device().context()
        dma = gpusched.DmaBuffer().nop()
        for _ in range(count):
            ctx.submit(dma, gpusched.SUBMIT_NULL_RENDERING)


def test_history_merged_exactly(three):
    urls = [d.url for d in three]
    for i, u in enumerate(urls):
        fill(u, 10 + 7 * i)
    with gpusched.Hosts(urls, "t-a") as h:
        assert h.errors == {}
        for oldest in (False, True):
            union = []
            for i, u in enumerate(urls):
                own = h.client(u).history(10000, oldest_first=oldest)
                union += [(r.submitted_ns if oldest else -r.submitted_ns, i, k, r.packet)
                          for k, r in enumerate(own)]
            union.sort()
            for limit in (1, 5, 20, 1000):
                got = h.history(limit, oldest_first=oldest)
                assert [(r.host, r.packet) for r in got] == \
                    [(urls[i], p) for _, i, _, p in union[:limit]]
        # Per host: one answer each, keyed by URL.
        assert set(h.stats()) == set(urls)
        assert all(s.packets_submitted >= 10 for s in h.stats().values())
        assert set(h.usage(since="1h")) == set(urls)
        # A Client handed out and closed is made again; the host is fine.
        with h.client(0) as c:
            c.info()
        assert h.client(0).info()["tenant"] == "a"
    # One daemon's connect() refuses a list (Hosts takes it).
    with pytest.raises(gpusched.GpuschedError, match="list of URLs"):
        gpusched.connect(",".join(urls), "t-a")


def test_host_down_is_left_out(three):
    urls = [d.url for d in three]
    fill(urls[0], 3)
    down = urls[1]
    three[1].stop()
    with gpusched.Hosts(",".join(urls), "t-a") as h:
        assert down in h.errors
        recs = h.history(100)
        assert {r.host for r in recs} == {urls[0]}
        assert set(h.stats()) == {urls[0], urls[2]}
        with pytest.raises(gpusched.GpuschedError):
            h.client(down)
    with pytest.raises(gpusched.GpuschedError):
        gpusched.Hosts([down], "t-a")
    with pytest.raises(ValueError):
        gpusched.Hosts(" , ", "t-a")


def test_device_goes_to_the_least_loaded(three):
    urls = [d.url for d in three]
    with gpusched.Hosts(urls, "t-ops") as h:
        # Memory in use on hosts 0 and 1: host 2 is the least loaded.
        for u in urls[:2]:
            h.client(u).device("filler").allocation(1 << 20)
        dev = h.device("placed")
        assert dev.client.url == urls[2]
        a = dev.allocation(4096)
        a.write(b"x" * 4096)
        assert a.read(4) == b"xxxx"
        # Queued packets come first: host 2 now runs long packets, so the next device goes
        # to host 0 (hosts 0 and 1 hold the same memory: the first in the list wins).
        ctx = dev.context()
        spin = gpusched.DmaBuffer().spin(2_000_000)
        for _ in range(3):
            ctx.submit(spin)
        dev2 = h.device("placed-again")
        assert dev2.client.url == urls[0]
        ctx.destroy()  # cancels what is still queued
