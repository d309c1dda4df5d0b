"""Daemons for the Python package's tests: real gpuschedd processes on ipc sockets in
temporary directories ($GPUSCHEDD, set by ctest with $GPUSCHED_LIBRARY and $PYTHONPATH)."""
import os
import select
import signal
import subprocess
import tempfile
import time

import pytest

TOKENS = {"ops": "t-ops", "a": "t-a", "q": "t-q"}

# a: an ordinary tenant; ops: the administrator; q: a tenant with small quotas.
CONFIG = ('{"tenants": [{"name": "ops", "token": "t-ops", "admin": true},'
          ' {"name": "a", "token": "t-a"},'
          ' {"name": "q", "token": "t-q", "memory_quota": 65536, "context_limit": 2}]}')


class Daemon:
    """A gpuschedd started with `args` in directory d, ready (its "ready" line read, 30 s at
    most)."""

    def __init__(self, d: str, *args: str, config: str = CONFIG):
        cfg = os.path.join(d, "c.json")
        with open(cfg, "w") as f:
            f.write(config)
        self.dir = d
        self.url = "ipc://" + os.path.join(d, "s.sock")
        self.db = os.path.join(d, "audit.db")
        # setpriv: the daemon gets SIGTERM if this process dies first (a crashed pytest
        # leaves no daemon behind).
        self.proc = subprocess.Popen(["setpriv", "--pdeathsig", "TERM",
                                      os.environ["GPUSCHEDD"], "-l", self.url, "-d", self.db,
                                      "-c", cfg, "--log-level", "warn", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        ready = False
        while not ready and time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], deadline - time.monotonic())
            line = self.proc.stdout.readline() if r else b""
            ready = b"ready" in line
            if not line and self.proc.poll() is not None:
                break
        if not ready:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the daemon did not become ready")

    def stop(self) -> int:
        """SIGTERM, then its exit status (30 s at most)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def daemon_proc():
    """One daemon for the session, with a Vulkan adapter (1, gpu0: a GPU, or lavapipe) for
    users' kernels; it must exit 0 on SIGTERM at the end."""
    with tempfile.TemporaryDirectory(prefix="gs-python.") as d:
        dm = Daemon(d, "--with-vulkan")
        yield dm
        assert dm.stop() == 0


@pytest.fixture(scope="session")
def daemon(daemon_proc):
    """The session daemon's URL."""
    return daemon_proc.url


@pytest.fixture
def own_daemon():
    """A daemon of the test's own (emulated adapter only), to be stopped or killed by it."""
    with tempfile.TemporaryDirectory(prefix="gs-python-own.") as d:
        dm = Daemon(d)
        yield dm
        if dm.proc.poll() is None:
            dm.kill()
