#!/usr/bin/env python3
"""gpuschedd under a stand-in for systemd's notify socket (issue 30).

Usage: test_notify.py GPUSCHEDD

Starts the daemon the way a Type=notify unit with WatchdogSec does (NOTIFY_SOCKET, WATCHDOG_USEC)
and reads what it says on the socket:
  - READY=1 only once it serves requests (its "ready" line came first), with a STATUS line;
  - WATCHDOG=1 at half the watchdog period while the loop turns;
  - a loop stalled on purpose (the test hook: GPUSCHEDD_TEST_STALL_MS and SIGUSR2) stops the
    pings for as long as the stall, longer than the watchdog period, and they come back after;
  - SIGTERM: STOPPING=1, then a clean exit.
Every wait is bounded; nothing sleeps for synchronisation.
"""
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

WATCHDOG_USEC = 200_000  # pings every 100 ms
STALL_MS = 700


def fail(msg, proc=None):
    print("FAIL:", msg, file=sys.stderr)
    if proc is not None and proc.poll() is None:
        proc.kill()
    sys.exit(1)


def main():
    daemon = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="gs-notify.") as d:
        path = os.path.join(d, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC=str(WATCHDOG_USEC),
                   GPUSCHEDD_TEST_STALL_MS=str(STALL_MS))
        env.pop("WATCHDOG_PID", None)
        proc = subprocess.Popen(
            [daemon, "-l", "ipc://" + os.path.join(d, "s.sock"), "-d",
             os.path.join(d, "audit.db"), "--log-level", "warn"],
            env=env, stdout=subprocess.PIPE, stderr=open(os.path.join(d, "log"), "w"))
        messages = []  # (time, text)
        ready_line_at = None
        deadline = time.monotonic() + 30

        def pump(until, want=None):
            """Reads messages and the daemon's stdout until `until` or until want(messages)."""
            nonlocal ready_line_at
            while time.monotonic() < until:
                if want is not None and want():
                    return True
                r, _, _ = select.select([sock, proc.stdout], [], [],
                                        max(0.0, until - time.monotonic()))
                now = time.monotonic()
                if sock in r:
                    messages.append((now, sock.recv(4096).decode()))
                if proc.stdout in r:
                    line = proc.stdout.readline()
                    if b"ready" in line and ready_line_at is None:
                        ready_line_at = now
                    if not line and proc.poll() is not None:
                        return want() if want else False
            return want() if want else False

        def said(text):
            return [t for t, m in messages if any(x == text for x in m.split("\n"))]

        def status():
            return any(m.startswith("STATUS=serving") for _, m in messages)

        if not pump(deadline,
                    lambda: said("READY=1") and ready_line_at is not None and status()):
            fail("no READY=1, ready line or STATUS within 30 s: %r" % messages, proc)
        if said("READY=1")[0] < ready_line_at:
            fail("READY=1 came before the daemon served requests", proc)
        ready_msg = next(m for _, m in messages if "READY=1" in m.split("\n"))

        # Pings while the loop turns: about 10 in one second; at least 5 on a loaded machine.
        t0 = time.monotonic()
        pump(t0 + 1.0)
        pings = [t for t in said("WATCHDOG=1") if t >= t0]
        if len(pings) < 5:
            fail("%d WATCHDOG=1 in a second (want about 10)" % len(pings), proc)

        # The loop stalled: no ping for the stall, then they come back.
        stalled_at = time.monotonic()
        proc.send_signal(signal.SIGUSR2)
        pump(stalled_at + STALL_MS / 1000 + 1.0)
        pings = [t for t in said("WATCHDOG=1") if t >= stalled_at]
        if len(pings) < 3:
            fail("the pings did not come back after the stall: %r" % pings, proc)
        gaps = [b - a for a, b in zip([stalled_at] + pings, pings)]
        gap = max(gaps)
        if gap < (STALL_MS - 100) / 1000 or gap * 1e6 < WATCHDOG_USEC:
            fail("the longest gap between pings was %.0f ms for a %d ms stall" %
                 (gap * 1000, STALL_MS), proc)

        # SIGTERM: STOPPING=1, then exit 0.
        stop_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        pump(stop_at + 20, lambda: proc.poll() is not None)
        if proc.poll() is None:
            fail("the daemon did not exit within 20 s of SIGTERM", proc)
        if proc.returncode != 0:
            fail("the daemon exited with %d" % proc.returncode)
        if not [t for t in said("STOPPING=1") if t >= stop_at]:
            fail("no STOPPING=1 after SIGTERM: %r" % messages[-5:])
        print("test_notify: READY=1 after the ready line (%s), %d pings a second, a %.0f ms gap"
              " for a %d ms stall, STOPPING=1 on SIGTERM" %
              (ready_msg.replace("\n", " "), len([t for t in said("WATCHDOG=1")
                                                  if t0 <= t < t0 + 1.0]),
               gap * 1000, STALL_MS))


if __name__ == "__main__":
    main()
