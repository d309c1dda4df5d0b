"""gpusched for Python: a client of the gpusched GPU scheduling service.

It calls the C client library, libgpusched.so.0 (client/gpusched.h), through ctypes: there is
no second implementation of the wire protocol here. The library is found through
$GPUSCHED_LIBRARY (a path), else the system's loader (an installed package).

    import numpy as np, gpusched
    with gpusched.connect() as gpu:                 # $GPUSCHED_URL, $GPUSCHED_TOKEN
        with gpu.device("mine") as dev:
            ctx = dev.context(node=0)
            buf = dev.allocation(4096)
            dma = gpusched.DmaBuffer().fill(buf, 0, 4096, 0x01020304)
            result = ctx.submit(dma, wait_ms=10_000)
            print(result.state, buf.read_array(np.uint32)[:4])
        print(gpu.history(since="10m"))

Every call blocks the calling thread only (the GIL is released while it waits); the *_async
calls return concurrent.futures.Future objects instead. Errors are GpuschedError, carrying
the daemon's status name and message.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import datetime
import functools
import itertools
import operator
import os
import re
import select
import threading
import time
from dataclasses import dataclass
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union)

from . import _capi as _C

# The daemon's version (CMakeLists.txt, project VERSION): the tests check that they agree.
__version__ = "0.1.0"

__all__ = ["connect", "Client", "Hosts", "Device", "Context", "Allocation", "DmaBuffer", "Kernel",
           "KernelBinding", "Sync", "SubmitFuture", "SubmitResult", "ContextStatus",
           "AllocationStatus", "PacketRecord", "PacketEvent", "Move", "Explanation", "UsageRow",
           "UsageReport", "Stats", "GpuschedError", "dataframe", "PACKET_STATES",
           "SUBMIT_NULL_RENDERING", "SUBMIT_PRESENT", "PRIORITY_CLASSES"]

SUBMIT_PRESENT = 0x002
"""DXGK_SUBMITCOMMANDFLAGS.Present: the packet presents (docs/wddm.md)."""
SUBMIT_NULL_RENDERING = 0x008
"""DXGK_SUBMITCOMMANDFLAGS.NullRendering: the engine skips the commands (the cheapest packet)."""

PACKET_STATES = ["UNKNOWN", "SUBMITTED", "READY", "RUNNING", "COMPLETED", "FAULTED", "ABORTED",
                 "PREEMPTED", "RESUBMITTED", "CANCELLED", "REJECTED"]
"""A packet's states by number, as the C API's gs_packet_state."""

PRIORITY_CLASSES = ["IDLE", "BELOW_NORMAL", "NORMAL", "ABOVE_NORMAL", "HIGH", "REALTIME"]
"""The context priority classes, lowest first (WDDM's D3DKMT_SCHEDULINGPRIORITYCLASS)."""

_USAGE_BY = {"tenant": 0, "context": 1, "node": 2}

TimeSpec = Union[None, int, float, str, datetime.datetime]


class GpuschedError(Exception):
    """A call the daemon (or the library) refused.

    Attributes: `status`, its name, such as "NOT_FOUND", "UNAUTHENTICATED",
    "QUOTA_EXCEEDED" or "TIMEOUT" (the daemon's), or "TRANSPORT", "CANCELLED" (the library's:
    the connection failed, the request was cancelled); `code`, the number (negative for the
    library's); `message`, the daemon's explanation; `result`, for a submission that waited
    and FAULTED, its SubmitResult.
    """

    def __init__(self, code: int, status: str, message: str,
                 result: Optional["SubmitResult"] = None):
        super().__init__(f"{status}: {message}" if message else status)
        self.code, self.status, self.message = code, status, message
        self.result = result

    @classmethod
    def _of(cls, code: int, message: str = "") -> "GpuschedError":
        return cls(code, _str(_C.status_name(code)), message or _str(_C.strerror(code)))


def _str(b: Optional[bytes]) -> str:
    return b.decode(errors="replace") if b else ""


def _time_ns(t: TimeSpec, now_ns: Optional[int] = None) -> int:
    """A moment as ns of CLOCK_REALTIME: None (0: no bound), ns since the epoch (int), a
    datetime, or a string the CLI takes ("10m", "2h" ago; "2026-11-28T10:00:00Z")."""
    if t is None:
        return 0
    if isinstance(t, datetime.datetime):
        if t.tzinfo is None:
            t = t.astimezone()  # local time, as the CLI reads one without an offset
        d = t - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000
    if isinstance(t, (int, float)):
        return int(t)
    out = _C.u64()
    now = time.time_ns() if now_ns is None else now_ns
    if _C.time_parse(str(t).encode(), now, ctypes.byref(out)) != 0:
        raise ValueError(f"not a time: {t!r} (10m, 2h, 1d ago, or 2026-11-28T10:00:00Z)")
    return out.value


@dataclass(frozen=True)
class SubmitResult:
    """What a submission answered.

    `packet`: its id; `fence`: its context's count (1, 2, 3...); `node`; `state`: SUBMITTED,
    or with a wait its final state (or its state when the wait ran out); `completed_fence`:
    the context's packets up to this fence had ended then."""
    packet: int
    fence: int
    node: int
    state: str
    completed_fence: int


def _result(r: _C.SubmitResult) -> SubmitResult:
    return SubmitResult(r.packet, r.fence, r.node, PACKET_STATES[r.state], r.completed_fence)


def _submit_result_of(ev: _C.AsyncEvent) -> SubmitResult:
    return _result(ev.submit)


@dataclass(frozen=True)
class ContextStatus:
    """A context's fences (Context.query): packets with a fence up to `completed_fence` have
    ended; `queued` have not; a `faulted` context refuses new packets."""
    context: int
    node: int
    submitted_fence: int
    completed_fence: int
    queued: int
    faulted: bool
    priority_class: str
    priority: int


@dataclass(frozen=True)
class AllocationStatus:
    """Where an allocation is (Allocation.query): `resident` in `segment` (0: system memory),
    the packets using it, how often the memory manager moved it."""
    allocation: int
    size: int
    resident: bool
    segment: int
    busy_packets: int
    pinned: int
    moves: int
    moving: bool
    segment_preference: int
    priority: int


@dataclass(frozen=True)
class PacketRecord:
    """One packet of the history (the audit file). Times are ns of CLOCK_REALTIME (0: not
    reached); `result` says how it ended; `dispatches` what its DISPATCH commands ran."""
    packet: int
    device: int
    context: int
    node: int
    fence: int
    submit_flags: int
    state: str
    submitted_ns: int
    ready_ns: int
    started_ns: int
    completed_ns: int
    preemptions: int
    resubmissions: int
    result: str
    tenant: str
    dispatches: str
    host: str = ""  # Hosts.history: the URL of the daemon it ran on


def _record(r: _C.PacketRecord, host: str = "") -> PacketRecord:
    return PacketRecord(r.packet, r.device, r.context, r.node, r.fence, r.submit_flags,
                        PACKET_STATES[r.state], r.submitted_ns, r.ready_ns, r.started_ns,
                        r.completed_ns, r.preemptions, r.resubmissions, _str(r.result),
                        _str(r.tenant), _str(r.dispatches), host)


@dataclass(frozen=True)
class PacketEvent:
    """One state change of a packet, with the daemon's reason (why it waited, what stopped
    it, how it ended)."""
    seq: int
    state: str
    time_ns: int
    detail: str


@dataclass(frozen=True)
class Move:
    """One action of the memory manager on an allocation (PLACE, PAGE_IN, EVICT, TRANSFER,
    FREE...), from segment to segment (0: system memory), with the paging packet that moved the
    bytes."""
    seq: int
    time_ns: int
    kind: str
    allocation: int
    from_segment: int
    to_segment: int
    bytes: int
    packet: int
    reason: str


@dataclass(frozen=True)
class Explanation:
    """A packet's whole life (gpusched explain): its record, its events and the moves the
    memory manager made for it, oldest first."""
    packet: PacketRecord
    events: List[PacketEvent]
    moves: List[Move]


@dataclass(frozen=True)
class UsageRow:
    """How the GPU was used in a window, per tenant, context or node (Client.usage).

    `busy_ns` is engine time, `utilisation` that as a fraction of one engine over the window;
    waits (submitted to started) and runs are (p50, p95, p99) in ns."""
    tenant: str
    context: int
    adapter: int
    node: int
    packets: int
    completed: int
    faulted: int
    cancelled: int
    preemptions: int
    resubmissions: int
    busy_ns: int
    utilisation: float
    paging_bytes: int
    wait_ns: Tuple[int, int, int]
    run_ns: Tuple[int, int, int]


class UsageReport(list):
    """The rows of Client.usage, a list, with `window_ns` (the window's length) and
    `truncated` (more packets than the daemon reads for one answer)."""
    window_ns: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class Stats:
    """The daemon's counters (Client.stats). For a tenant that is not an administrator the
    requests, packets and objects are its own and the audit counters 0."""
    requests: int
    errors: int
    packets_submitted: int
    packets_completed: int
    packets_faulted: int
    packets_cancelled: int
    packets_rejected: int
    audit_records: int
    audit_commits: int
    devices: int
    contexts: int
    allocations: int
    uptime_ns: int
    paging_packets: int
    paging_bytes: int
    evictions: int
    audit_queued: int
    audit_failed_commits: int
    audit_dropped: int
    audit_health: int
    tenant_view: bool


def dataframe(rows: Iterable[Any]) -> "pandas.DataFrame":
    """A pandas.DataFrame of dataclass rows (history, usage, explain's events): one column per
    field. Raises ImportError when pandas is not installed (Debian: python3-pandas); nothing
    else in the package needs it."""
    try:
        import pandas
    except ImportError as e:
        raise ImportError("gpusched.dataframe needs pandas (Debian: apt-get install "
                          "python3-pandas); the rows are plain dataclasses without it") from e
    return pandas.DataFrame([dataclasses.asdict(r) for r in rows])


# ---- asynchronous completions ------------------------------------------------------------


class SubmitFuture(concurrent.futures.Future):
    """A request in flight (Context.submit_async, Client.wait_async, Sync.wait_async): a
    concurrent.futures.Future, so concurrent.futures.wait and as_completed take it.

    cancel() cancels it in the library too: its result will not come. The daemon may still
    have acted on a request it had received (a submission stays queued): the protocol cannot
    withdraw one."""

    def __init__(self, client: "Client"):
        super().__init__()
        self._client, self.request_id = client, 0

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        with self._client._lock:  # not while close() frees the client
            if self.request_id and self._client._c:
                _C.async_cancel(self._client._c, self.request_id)
        return True


def _interruptible(future: SubmitFuture) -> Any:
    """The future's result, waited for in Python rather than inside the library, so that
    Ctrl-C raises KeyboardInterrupt at once (the request is cancelled) instead of after the
    whole wait."""
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        raise


class _Completions:
    """One completion queue per client and a thread that reads it: each event completes the
    future registered under its `user` key. The thread sleeps in select() on the queue's fd
    and a pipe that close() writes to."""

    _BATCH = 64

    def __init__(self) -> None:
        q = _C.p()
        rv = _C.async_queue_create(ctypes.byref(q))
        if rv != 0:
            raise GpuschedError._of(rv, "cannot make a completion queue")
        self.q = q
        self.fd = _C.async_queue_fd(q)
        self.wake_r, self.wake_w = os.pipe()
        self.pending: Dict[int, Tuple[SubmitFuture, Any]] = {}
        self.keys = itertools.count(1)
        self.events = (_C.AsyncEvent * self._BATCH)()
        self.stopping = False
        self.free_on_exit = False
        self.thread = threading.Thread(target=self._run, name="gpusched-completions",
                                       daemon=True)
        self.thread.start()

    def add(self, future: SubmitFuture, convert) -> Tuple[int, _C.AsyncOpts]:
        key = next(self.keys)
        self.pending[key] = (future, convert)
        return key, _C.AsyncOpts(queue=self.q, user=key)

    def forget(self, key: int) -> None:
        self.pending.pop(key, None)

    def _deliver(self, n: int) -> None:
        for i in range(n):
            ev = self.events[i]
            future, convert = self.pending.pop(ev.user or 0, (None, None))
            if future is None:
                continue
            try:
                if ev.status == 0:
                    future.set_result(convert(ev))
                else:
                    faulted = ev.status == _C.STATUS_FAULTED and ev.kind == 1  # a SUBMIT
                    future.set_exception(GpuschedError(
                        ev.status, _str(_C.status_name(ev.status)), _str(ev.message),
                        _result(ev.submit) if faulted else None))
            except concurrent.futures.InvalidStateError:
                pass  # cancelled by its owner meanwhile
            except Exception as e:  # noqa: BLE001 - a conversion failed: the thread goes on
                future.set_exception(e)

    def _run(self) -> None:
        while True:
            n = _C.async_poll(self.q, self.events, self._BATCH, 0)
            if n > 0:
                self._deliver(n)
                continue
            if self.stopping:
                break
            select.select([self.fd, self.wake_r], [], [])
        if self.free_on_exit:
            self._free()

    def on_thread(self) -> bool:
        """Is the caller this queue's thread (a done-callback)?"""
        return threading.current_thread() is self.thread

    def close(self) -> None:
        """After gs_close (every request completed into the queue): delivers what is left,
        stops the thread, frees the queue. From a done-callback (the thread itself), the
        thread frees them once the callback returns."""
        self.stopping = True
        os.write(self.wake_w, b"x")
        if self.on_thread():
            self.free_on_exit = True
            return
        self.thread.join()
        self._free()

    def _free(self) -> None:
        for future, _ in self.pending.values():
            if not future.done():
                future.set_exception(GpuschedError._of(_C.ERR_CANCELLED, "the client closed"))
        self.pending.clear()
        _C.async_queue_destroy(self.q)
        os.close(self.wake_r)
        os.close(self.wake_w)


# ---- objects -----------------------------------------------------------------------------


class _Handle:
    """A daemon object owned by a client: destroy() (or a with block) frees it; freeing it
    twice is harmless."""

    _destroy = None

    def __init__(self, client: "Client", handle: int):
        self._client, self.handle = client, handle

    @property
    def client(self) -> "Client":
        """The Client it belongs to (for Hosts.device: that host's)."""
        return self._client

    def destroy(self) -> None:
        """Frees the object in the daemon (once)."""
        if self.handle:
            h, self.handle = self.handle, 0
            if self._client._c:
                self._client._call(type(self)._destroy, h)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"<gpusched.{type(self).__name__} {self.handle}>"


class Sync(_Handle):
    """A monitored fence of a device: a 64-bit value that only grows. Packets signal it
    (DmaBuffer.signal) and wait for it (DmaBuffer.wait); the CPU does too."""

    _destroy = _C.sync_destroy

    def signal(self, value: int) -> None:
        """Raises the value from the CPU (a lower one is refused: INVALID_ARGUMENT)."""
        self._client._call(_C.sync_signal, self.handle, value)

    def wait(self, value: int, timeout_ms: int = 30_000) -> int:
        """Waits until the value is at least `value` (TIMEOUT raises); returns the value seen.
        The GIL is released meanwhile, and Ctrl-C (KeyboardInterrupt) ends the wait."""
        if self._client._in_callback():  # the thread that would complete the future
            cur = _C.u64()
            self._client._call(_C.sync_wait, self.handle, value, timeout_ms, ctypes.byref(cur))
            return cur.value
        return _interruptible(self.wait_async(value, timeout_ms))

    def wait_async(self, value: int, timeout_ms: int = 30_000) -> SubmitFuture:
        """wait() without blocking: a future of the value seen."""
        return self._client._start(
            lambda o, i: _C.async_sync_wait(self._client._h(), self.handle, value, timeout_ms,
                                           ctypes.byref(o), ctypes.byref(i)),
            lambda ev: ev.value)


class DmaBuffer:
    """A DMA buffer under construction: each method appends one command and returns the
    buffer, so calls chain. Allocations it names join its allocation list (and are made
    resident for the packet)."""

    def __init__(self) -> None:
        self._b = _C.Dmabuf()
        self._ptr = ctypes.pointer(self._b)
        _C.dma_init(self._ptr)

    def __del__(self) -> None:
        if hasattr(self, "_b"):
            _C.dma_free(ctypes.byref(self._b))

    def _check(self, rv: int, what: str) -> "DmaBuffer":
        if rv != 0:
            raise GpuschedError._of(rv, what)
        return self

    def reset(self) -> "DmaBuffer":
        """Empties the buffer (its memory is kept for the next packet)."""
        _C.dma_reset(ctypes.byref(self._b))
        return self

    def nop(self) -> "DmaBuffer":
        """A command that does nothing."""
        return self._check(_C.dma_nop(ctypes.byref(self._b)), "nop")

    def fill(self, allocation: "Allocation", offset: int, size: int, pattern: int) -> "DmaBuffer":
        """Writes the 32-bit pattern over size bytes of the allocation from offset."""
        return self._check(_C.dma_fill(ctypes.byref(self._b), allocation.handle, offset, size,
                                      pattern), "fill")

    def copy(self, dst: "Allocation", dst_offset: int, src: "Allocation", src_offset: int,
             size: int) -> "DmaBuffer":
        """Copies size bytes between allocations (or within one: memmove semantics)."""
        return self._check(_C.dma_copy(ctypes.byref(self._b), dst.handle, dst_offset,
                                      src.handle, src_offset, size), "copy")

    def checksum(self, dst: "Allocation", dst_offset: int, src: "Allocation", src_offset: int,
                 size: int) -> "DmaBuffer":
        """Writes the 8-byte little-endian XXH64 (seed 0) of size source bytes at dst."""
        return self._check(_C.dma_checksum(ctypes.byref(self._b), dst.handle, dst_offset,
                                          src.handle, src_offset, size), "checksum")

    def spin(self, micros: int, preemptible: bool = True) -> "DmaBuffer":
        """Engine time, as a long shader would take; a non-preemptible spin cannot be stopped
        inside."""
        return self._check(_C.dma_spin(ctypes.byref(self._b), micros, 0 if preemptible else 1),
                           "spin")

    def signal(self, sync: Sync, value: int) -> "DmaBuffer":
        """Signals the sync object to value when the engine reaches this command."""
        return self._check(_C.dma_signal(ctypes.byref(self._b), sync.handle, value), "signal")

    def wait(self, sync: Sync, value: int) -> "DmaBuffer":
        """Holds the packet (and its context's later ones) until the sync object reaches value."""
        return self._check(_C.dma_wait(ctypes.byref(self._b), sync.handle, value), "wait")

    def dispatch(self, kernel: "Kernel", groups: Sequence[int],
                 bindings: Mapping[Union[int, str], Union["Allocation", Tuple["Allocation", int, int]]],
                 push: Any = None) -> "DmaBuffer":
        """Runs a kernel over groups (x, y, z) work groups. bindings maps each of the kernel's
        bindings (number or name) to an allocation, whole, or to (allocation, offset, range);
        push is the push constants (bytes, numpy scalars or arrays, or a list of them, in
        order)."""
        binds = []
        for key, target in bindings.items():
            b = kernel._binding(key)
            alloc, off, rng = (target, 0, target.size) if isinstance(target, Allocation) \
                else target
            binds.append(_C.DmaBinding(b.binding, alloc.handle, off, rng, b.writes))
        pc = _bytes_of(push)
        g = (_C.u32 * 3)(*(list(groups) + [1, 1, 1])[:3])
        arr = (_C.DmaBinding * len(binds))(*binds)
        pcbuf = ctypes.create_string_buffer(pc, len(pc)) if pc else None
        return self._check(_C.dma_dispatch(ctypes.byref(self._b), kernel.handle, g, arr,
                                          len(binds), ctypes.cast(pcbuf, _C.p) if pcbuf else None,
                                          len(pc)), "dispatch")

    def __len__(self) -> int:
        """Bytes of commands."""
        return self._b.len


@dataclass(frozen=True)
class KernelBinding:
    """A buffer the kernel declares: its binding number, its name in the module (may be
    empty) and whether the kernel writes it."""
    binding: int
    name: str
    writes: bool


class Kernel(_Handle):
    """A user's SPIR-V compute kernel on a device (Device.kernel, Client.kernel), with what
    the daemon reflected from it: `bindings`, `local_size`, `push_constant_bytes`, `hash`
    (BLAKE2b-256 hex) and `cached` (the adapter had the module already)."""

    _destroy = _C.kernel_destroy

    def __init__(self, client: "Client", info: _C.KernelInfo):
        super().__init__(client, info.kernel)
        self.device = info.device
        self.entry_point = _str(info.entry_point)
        self.local_size = tuple(info.local_size)
        self.push_constant_bytes = info.push_constant_bytes
        self.hash = bytes(info.hash).hex()
        self.cached = bool(info.cached)
        self.bindings = [KernelBinding(b.binding, _str(b.name), bool(b.writes))
                         for b in info.bindings[:info.nbindings]]

    def _binding(self, key: Union[int, str]) -> KernelBinding:
        for b in self.bindings:
            if key == b.binding or (b.name and key == b.name):
                return b
        raise KeyError(f"the kernel declares no binding {key!r} "
                       f"(it has {[b.name or b.binding for b in self.bindings]})")


def _bytes_of(value: Any) -> bytes:
    """Push constants: bytes, a numpy scalar or array, or a sequence of them, in order."""
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return b"".join(_bytes_of(v) for v in value)
    tobytes = getattr(value, "tobytes", None)
    if tobytes is None:
        raise TypeError("push constants are bytes, numpy scalars or arrays, or a list of them")
    return tobytes()


def _address(data: Any, writable: bool) -> Tuple[Any, int, Any]:
    """(pointer, length, keep-alive) of any buffer-protocol object, without a copy where
    possible: a writable buffer through ctypes, a read-only one through numpy when it is
    there (bytes directly); a copy otherwise."""
    mv = memoryview(data)
    if not mv.c_contiguous:
        raise ValueError("the buffer is not contiguous (numpy.ascontiguousarray makes it so)")
    mv = mv.cast("B")
    n = len(mv)
    if not mv.readonly:
        buf = (ctypes.c_char * n).from_buffer(mv)
        return buf, n, (buf, mv)
    if writable:
        raise ValueError("the destination is read-only")
    if isinstance(data, bytes):
        return ctypes.c_char_p(data), n, data
    try:
        import numpy as np
        a = np.frombuffer(mv, dtype=np.uint8)
        return ctypes.c_void_p(a.ctypes.data), n, (a, mv)
    except ImportError:
        buf = (ctypes.c_char * n).from_buffer_copy(mv)
        return buf, n, buf


class Allocation(_Handle):
    """Memory on the device (`size` bytes): read and written from the CPU, used by packets.
    The memory manager moves it between segments as packets need it."""

    _destroy = _C.alloc_destroy

    def __init__(self, client: "Client", handle: int, size: int, segment: int = 0):
        super().__init__(client, handle)
        self.size, self.segment = size, segment

    def write(self, data: Any, offset: int = 0) -> None:
        """Writes any buffer-protocol object (bytes, bytearray, a contiguous numpy array) at
        offset, without copying it in Python."""
        ptr, n, keep = _address(data, writable=False)
        self._client._call(_C.alloc_write, self.handle, offset, ptr, n)
        del keep

    def read(self, size: Optional[int] = None, offset: int = 0) -> bytes:
        """size bytes (default: to the end) from offset, as bytes."""
        n = self.size - offset if size is None else size
        buf = ctypes.create_string_buffer(n)
        self._client._call(_C.alloc_read, self.handle, offset, buf, n)
        return buf.raw

    def read_into(self, out: Any, offset: int = 0) -> Any:
        """Reads len(out) bytes from offset straight into a writable buffer (a numpy array,
        a bytearray): no copy in between. Returns out."""
        ptr, n, keep = _address(out, writable=True)
        self._client._call(_C.alloc_read, self.handle, offset, ptr, n)
        del keep
        return out

    def read_array(self, dtype: Any, shape: Any = None, offset: int = 0) -> "numpy.ndarray":
        """A new numpy array of dtype (and shape; default: as many as fit from offset) read
        from the allocation."""
        import numpy as np
        dt = np.dtype(dtype)
        if shape is None:
            shape = ((self.size - offset) // dt.itemsize,)
        return self.read_into(np.empty(shape, dtype=dt), offset)

    def query(self) -> AllocationStatus:
        """Where it is now and who uses it."""
        s = _C.AllocStatus()
        self._client._call(_C.alloc_query, self.handle, ctypes.byref(s))
        return AllocationStatus(s.allocation, s.size, bool(s.resident), s.segment,
                                s.busy_packets, s.pinned, s.moves, bool(s.moving),
                                s.segment_preference, s.priority)


class Context(_Handle):
    """A GPU context on one node of a device: its packets run in order, each with the next
    fence of the context."""

    _destroy = _C.context_destroy

    def submit(self, dma: DmaBuffer, flags: int = 0, wait_ms: int = 0) -> SubmitResult:
        """Submits one packet. With wait_ms, answers once it ended (or when wait_ms ran out:
        its state then is not final). A packet that faulted raises FAULTED (the error's
        `result` is the SubmitResult)."""
        if wait_ms and not self._client._in_callback():
            # Through a future: Ctrl-C ends the wait (the packet stays submitted).
            return _interruptible(self.submit_async(dma, flags, wait_ms))
        r = _C.SubmitResult()
        if wait_ms:  # in a done-callback: the library waits
            try:
                self._client._call(_C.submit_wait, self.handle, dma._ptr, flags, wait_ms, r)
            except GpuschedError as e:
                if e.code == _C.STATUS_FAULTED:
                    e.result = _result(r)
                raise
            return _result(r)
        self._client._call(_C.submit, self.handle, dma._ptr, flags, r)
        return _result(r)

    def submit_async(self, dma: DmaBuffer, flags: int = 0, wait_ms: int = 0) -> SubmitFuture:
        """submit() without blocking: a future of its SubmitResult (with wait_ms, of the
        final one; a faulted packet raises FAULTED as submit does). The buffer may be reused
        at once.
        Submissions in flight together may get their fences in any order."""
        # The hot path of pipelined submission, written out: structures passed where the C
        # API takes pointers (ctypes passes them by reference), the buffer's pointer made once.
        client = self._client
        comp = client._completions or client._open_completions()
        future = SubmitFuture(client)
        key = next(comp.keys)
        comp.pending[key] = (future, _submit_result_of)
        rid = _C.u64()
        rv = _C.async_submit_desc(client._h(),
                                  _C.SubmitDesc(self.handle, dma._ptr, flags, None, 0, wait_ms),
                                  _C.AsyncOpts(comp.q, None, key, 0), rid)
        if rv != 0:
            comp.forget(key)
            raise GpuschedError._of(rv)
        future.request_id = rid.value
        return future

    def query(self) -> ContextStatus:
        """Its fences now: submitted, completed, packets queued."""
        s = _C.ContextStatus()
        self._client._call(_C.context_query, self.handle, ctypes.byref(s))
        return ContextStatus(s.context, s.node, s.submitted_fence, s.completed_fence, s.queued,
                             bool(s.faulted), PRIORITY_CLASSES[s.priority_class], s.priority)

    def set_priority(self, priority_class: Union[str, int], priority: int = 0) -> None:
        """Changes its priority class ("NORMAL", "HIGH"...) and priority (-7..7) in the class;
        the tenant's ceiling bounds it."""
        cls = PRIORITY_CLASSES.index(priority_class) if isinstance(priority_class, str) \
            else priority_class
        self._client._call(_C.context_set_priority, self.handle, cls, priority)


class Device(_Handle):
    """A device: its contexts, allocations, sync objects and kernels go with it (destroying
    it, or leaving its with block, frees them all)."""

    _destroy = _C.device_destroy

    def __init__(self, client: "Client", handle: int):
        super().__init__(client, handle)
        self._run_contexts: Dict[int, Context] = {}

    def destroy(self) -> None:
        self._run_contexts.clear()
        super().destroy()

    def context(self, node: int = 0, priority_class: Union[str, int] = "NORMAL",
                priority: int = 0, paging_node: Optional[int] = None) -> Context:
        """A context on a node (gpusched info lists them), with a priority class and a
        priority in it; paging_node is the node its paging transfers run on (default: the
        adapter's paging node)."""
        d = _C.ContextDesc()
        _C.context_desc_init(ctypes.byref(d), self.handle, node)
        d.priority_class = PRIORITY_CLASSES.index(priority_class) \
            if isinstance(priority_class, str) else priority_class
        d.priority = priority
        d.info[7] = self._client._paging_node() if paging_node is None else paging_node
        h = _C.u64()
        self._client._call(_C.context_create, ctypes.byref(d), ctypes.byref(h),
                                             None)
        return Context(self._client, h.value)

    def allocation(self, size: int, segments: Sequence[int] = (),
                   preference: Sequence[int] = (), priority: int = 0) -> Allocation:
        """Memory of size bytes. segments: the segment ids it may live in (default any);
        preference: the ids it prefers, best first (up to 5: D3DDDI_SEGMENTPREFERENCE)."""
        if len(preference) > 5:
            raise ValueError("a segment preference names at most 5 segments")
        pref = _C.Segpref()
        for i, s in enumerate(preference):
            pref.segment[i] = s
        d = _C.AllocDesc(device=self.handle, size=size,
                        supported_segment_set=functools.reduce(
                            operator.or_, (1 << s for s in segments), 0),
                        segment_preference=_C.segpref_encode(ctypes.byref(pref)),
                        priority=priority)
        p = _C.Placement()
        self._client._call(_C.alloc_create, ctypes.byref(d), ctypes.byref(p))
        return Allocation(self._client, p.allocation, size, p.segment)

    def array(self, data: Any) -> Allocation:
        """An allocation of the array's size with its bytes written in."""
        n = memoryview(data).nbytes
        a = self.allocation(n)
        try:
            a.write(data)
        except BaseException:
            a.destroy()
            raise
        return a

    def sync(self, initial: int = 0) -> Sync:
        """A sync object (monitored fence) starting at initial."""
        h = _C.u64()
        self._client._call(_C.sync_create, self.handle, initial,
                                          ctypes.byref(h))
        return Sync(self._client, h.value)

    def kernel(self, spirv: bytes, entry_point: str = "main") -> Kernel:
        """A kernel from a SPIR-V module: the daemon validates it and reflects its bindings
        and push constants (a refused module raises INVALID_ARGUMENT with the reason; an
        adapter that runs no kernels, UNIMPLEMENTED)."""
        info = _C.KernelInfo()
        code = bytes(spirv)
        self._client._call(_C.kernel_create, self.handle, code, len(code),
                                            entry_point.encode(), ctypes.byref(info))
        return Kernel(self._client, info)

    def run(self, kernel: Kernel, groups: Sequence[int], buffers: Mapping[Union[int, str], Any],
            push: Any = None, outputs: Optional[Sequence[Union[int, str]]] = None,
            node: int = 1, wait_ms: int = 60_000,
            keep_context: bool = True) -> Dict[Union[int, str], Any]:
        """Runs the kernel once over groups (x, y, z) work groups and waits for it.

        buffers maps each binding (its number or its name) to an array (numpy, or any
        buffer): each is copied to an allocation of its size. Returns {key: array} for the
        keys in outputs (numbers or names, as in buffers), read back after the run: a numpy
        array of the dtype and shape of the one given, else a bytearray. Every key is checked
        before anything runs. The allocations are freed before it returns; the context it
        submits on (one per node) is kept for the next run (keep_context=False: destroyed),
        and dropped when a run does not complete (a faulted context takes no more packets)."""
        data: Dict[int, Any] = {}
        for key, array in buffers.items():
            b = kernel._binding(key).binding
            if b in data:
                raise ValueError(f"binding {b} is given twice (again as {key!r})")
            data[b] = array
        missing = [b.binding for b in kernel.bindings if b.binding not in data]
        if missing:
            raise KeyError(f"no buffer for the kernel's bindings {missing}")
        wanted = [(key, kernel._binding(key).binding) for key in outputs or []]
        allocs: Dict[int, Allocation] = {}
        try:
            for b, array in data.items():
                allocs[b] = self.array(_contiguous(array))
            dma = DmaBuffer().dispatch(kernel, groups, allocs, push)
            ctx = self._run_contexts.pop(node, None) or self.context(node=node)
            done = False
            try:
                r = ctx.submit(dma, wait_ms=wait_ms)
                done = r.state == "COMPLETED"
            finally:
                if done and keep_context:
                    self._run_contexts[node] = ctx
                else:
                    try:
                        ctx.destroy()
                    except GpuschedError:
                        pass  # the daemon may be gone: the error that matters is raised
            if not done:
                raise GpuschedError(0, r.state, f"packet {r.packet} did not complete "
                                    f"(gpu.explain({r.packet}) says why)")
            return {key: allocs[b].read_into(_like(data[b])) for key, b in wanted}
        finally:
            for alloc in allocs.values():
                alloc.destroy()


def _contiguous(data: Any) -> Any:
    if hasattr(data, "__array_interface__"):
        import numpy as np
        return np.ascontiguousarray(data)
    return data


def _like(a: Any) -> Any:
    if hasattr(a, "__array_interface__"):
        import numpy as np
        return np.empty_like(np.asarray(a), order="C")
    return bytearray(memoryview(a).nbytes)


def _history_filter(limit, since, until, context, device, state, node, oldest_first, before,
                    after, tenant) -> _C.HistoryFilter:
    return _C.HistoryFilter(limit=limit, since_ns=_time_ns(since), until_ns=_time_ns(until),
                            context=getattr(context, "handle", context),
                            device=getattr(device, "handle", device),
                            state=PACKET_STATES.index(state.upper()) if state else 0,
                            match_node=node is not None, node=node or 0,
                            oldest_first=oldest_first, before_packet=before, after_packet=after,
                            tenant=tenant.encode() if tenant else None)


class Client:
    """A connection to gpuschedd: close() or a with block ends it (cancelling the requests
    still in flight). One client may be used from several threads (their blocking calls take
    turns: the library allows one at a time per connection; open a client per thread to
    submit in parallel), but close() only once no other thread is inside a call on it."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 ca: Optional[str] = None, cert: Optional[str] = None,
                 server_name: Optional[str] = None, adapter: int = 0, timeout_ms: int = 0):
        enc = (lambda s: s.encode() if s is not None else None)
        o = _C.ConnectOptions(size=ctypes.sizeof(_C.ConnectOptions), url=enc(url),
                             token=enc(token), tls_ca=enc(ca), tls_cert_key=enc(cert),
                             tls_server_name=enc(server_name), timeout_ms=timeout_ms,
                             adapter=adapter)
        c, why = _C.p(), ctypes.create_string_buffer(512)
        rv = _C.connect_with(ctypes.byref(o), ctypes.byref(c), why, len(why))
        if rv != 0:
            raise GpuschedError._of(rv, _str(why.value) or f"cannot connect to {url}")
        self._init(c, adapter)

    @classmethod
    def _borrow(cls, c: int, adapter: int, url: str) -> "Client":
        """A Client over a connection that Hosts owns: close() leaves it open."""
        self = cls.__new__(cls)
        self._init(c, adapter)
        self._borrowed = True
        self.url = url
        return self

    def _init(self, c: int, adapter: int) -> None:
        self._c = c
        self._borrowed = False
        self._lock = threading.Lock()
        self._call_lock = threading.Lock()
        self.adapter = adapter
        self._paging: Optional[int] = None
        self._completions: Optional[_Completions] = None
        self._default_device: Optional[Device] = None

    def _h(self) -> int:
        """The C client, or CANCELLED once closed (the library takes no NULL client)."""
        if not self._c:
            raise GpuschedError._of(_C.ERR_CANCELLED, "the client is closed")
        return self._c

    def _in_callback(self) -> bool:
        """Is the caller the completion thread (a done-callback)? A wait there must not go
        through a future: only that thread could complete it."""
        comp = self._completions
        return comp is not None and comp.on_thread()

    def _paging_node(self) -> int:
        """The paging node of the client's adapter (gpusched info marks it), asked once."""
        if self._paging is None:
            ptr = _C.POINTER(_C.DaemonInfo)()
            self._call(_C.info, ctypes.byref(ptr))
            try:
                i = ptr.contents
                paging = 0
                for a in (i.adapters[k] for k in range(i.adapter_count)):
                    if a.id == self.adapter:
                        paging = next((a.nodes[n].id for n in range(a.node_count)
                                       if a.nodes[n].paging), 0)
                self._paging = paging
            finally:
                _C.info_free(ptr)
        return self._paging

    def _call(self, fn, *args) -> None:
        """One blocking call of the C library, fn(client, *args): the library allows one at a
        time per client (its last message is the client's), so threads sharing a client take
        turns here. A failure raises GpuschedError with the daemon's message."""
        with self._call_lock:
            rv = fn(self._h(), *args)
            if rv != 0:
                raise GpuschedError(rv, _str(_C.status_name(rv)), _str(_C.message(self._c)))

    def _open_completions(self) -> "_Completions":
        """The completion queue and its thread, made on the first asynchronous call."""
        self._h()
        with self._lock:
            if self._completions is None:
                self._completions = _Completions()
        return self._completions

    def _start(self, call, convert) -> SubmitFuture:
        comp = self._completions or self._open_completions()
        future = SubmitFuture(self)
        key, opts = comp.add(future, convert)
        rid = _C.u64()
        rv = call(opts, rid)
        if rv != 0:
            comp.forget(key)
            raise GpuschedError._of(rv)
        future.request_id = rid.value
        return future

    def info(self) -> Dict[str, Any]:
        """The daemon's version, the tenant this token authenticated as, its adapters' count
        and whether the figures are the tenant's own view."""
        ptr = _C.POINTER(_C.DaemonInfo)()
        self._call(_C.info, ctypes.byref(ptr))
        try:
            i = ptr.contents
            return {"version": _str(i.version), "tenant": _str(i.tenant),
                    "adapters": i.adapter_count, "tenant_view": bool(i.tenant_view)}
        finally:
            _C.info_free(ptr)

    def device(self, name: str = "python") -> Device:
        """A new device; `name` shows in the daemon's logs and listings."""
        h = _C.u64()
        self._call(_C.device_create, name.encode(), ctypes.byref(h))
        return Device(self, h.value)

    @property
    def default_device(self) -> Device:
        """The device Client.kernel and Client.run use, made on first use and freed by
        close()."""
        if self._default_device is None:
            self._default_device = self.device("python")
        return self._default_device

    def kernel(self, spirv: bytes, entry_point: str = "main") -> Kernel:
        """Device.kernel on the default device."""
        return self.default_device.kernel(spirv, entry_point)

    def run(self, kernel: Kernel, groups: Sequence[int], buffers: Mapping[Union[int, str], Any],
            push: Any = None, outputs: Optional[Sequence[Union[int, str]]] = None,
            node: int = 1, wait_ms: int = 60_000) -> Dict[Union[int, str], Any]:
        """Device.run on the kernel's device (its context kept only on the default device)."""
        dev = self._default_device
        if dev is not None and dev.handle == kernel.device:
            return dev.run(kernel, groups, buffers, push, outputs, node, wait_ms)
        return Device(self, kernel.device).run(kernel, groups, buffers, push, outputs, node,
                                               wait_ms, keep_context=False)

    def submit_batch(self, packets: Sequence[Union[Tuple[Context, DmaBuffer],
                                                   Tuple[Context, DmaBuffer, int]]]
                     ) -> List[SubmitResult]:
        """Submits (context, dma[, flags]) packets in one request, all or nothing: one
        round trip and one audit commit for all of them."""
        descs = (_C.SubmitDesc * len(packets))()
        for d, item in zip(descs, packets):
            ctx, dma = item[0], item[1]
            d.context, d.dma = ctx.handle, ctypes.pointer(dma._b)
            d.submit_flags = item[2] if len(item) > 2 else 0
        out = (_C.SubmitResult * len(packets))()
        self._call(_C.submit_batch, descs, len(packets), out)
        return [_result(r) for r in out]

    def wait(self, packet: int, timeout_ms: int = 30_000) -> str:
        """Waits for the packet to end: its final state's name (FAULTED and TIMEOUT raise).
        Ctrl-C (KeyboardInterrupt) ends the wait."""
        if self._in_callback():  # the thread that would complete the future
            st, fence = ctypes.c_int(), _C.u64()
            self._call(_C.packet_wait, packet, timeout_ms, ctypes.byref(st), ctypes.byref(fence))
            return PACKET_STATES[st.value]
        return _interruptible(self.wait_async(packet, timeout_ms))

    def wait_async(self, packet: int, timeout_ms: int = 30_000) -> SubmitFuture:
        """wait() without blocking: a future of the final state's name."""
        return self._start(
            lambda o, i: _C.async_packet_wait(self._h(), packet, timeout_ms, ctypes.byref(o),
                                             ctypes.byref(i)),
            lambda ev: PACKET_STATES[ev.state])

    def history(self, limit: int = 100, *, since: TimeSpec = None, until: TimeSpec = None,
                context: Union[int, Context] = 0, device: Union[int, Device] = 0,
                state: Optional[str] = None, node: Optional[int] = None,
                oldest_first: bool = False, before: int = 0, after: int = 0,
                tenant: Optional[str] = None) -> List[PacketRecord]:
        """The caller's packets from the audit, newest first (oldest_first to turn it), at
        most limit (up to 10,000): page with before= (or after=) the last packet of a page.
        since/until: ns, a datetime or "10m" (ago) or an ISO time. Administrators may name
        another tenant."""
        f = _history_filter(limit, since, until, context, device, state, node, oldest_first,
                            before, after, tenant)
        recs, n = _C.POINTER(_C.PacketRecord)(), _C.size_t()
        self._call(_C.history, ctypes.byref(f), ctypes.byref(recs), ctypes.byref(n))
        try:
            return [_record(recs[i]) for i in range(n.value)]
        finally:
            _C.history_free(recs, n)

    def explain(self, packet: int, tenant: Optional[str] = None) -> Explanation:
        """One packet's life from the audit: every state change with its reason and the
        memory manager's moves for it."""
        e = _C.POINTER(_C.Explanation)()
        self._call(_C.explain, packet, tenant.encode() if tenant else None,
                              ctypes.byref(e))
        try:
            x = e.contents
            events = [PacketEvent(v.seq, PACKET_STATES[v.state], v.time_ns, _str(v.detail))
                      for v in (x.events[i] for i in range(x.event_count))]
            moves = [Move(m.seq, m.time_ns, _str(_C.move_kind_name(m.kind)), m.allocation, m.from_segment, m.to_segment,
                          m.bytes, m.packet, _str(m.reason))
                     for m in (x.moves[i] for i in range(x.move_count))]
            return Explanation(_record(x.packet.contents), events, moves)
        finally:
            _C.explanation_free(e)

    def usage(self, since: TimeSpec = "1h", until: TimeSpec = None, by: str = "tenant",
              tenant: Optional[str] = None) -> UsageReport:
        """How the GPU was used by the packets submitted in [since, until): rows per tenant,
        context or node (`by`), with engine time, utilisation, waits and runs. Administrators
        may name a tenant or "*"."""
        if by not in _USAGE_BY:
            raise ValueError(f"by is one of {sorted(_USAGE_BY)}")
        now = time.time_ns()
        f = _C.UsageFilter(since_ns=_time_ns(since, now), until_ns=_time_ns(until, now),
                          by=_USAGE_BY[by], tenant=tenant.encode() if tenant else None)
        u = _C.POINTER(_C.Usage)()
        self._call(_C.get_usage, ctypes.byref(f), ctypes.byref(u))
        try:
            x = u.contents
            out = UsageReport(
                UsageRow(_str(r.tenant), r.context, r.adapter, r.node, r.packets, r.completed,
                         r.faulted, r.cancelled, r.preemptions, r.resubmissions, r.busy_ns,
                         r.utilisation, r.paging_bytes, tuple(r.wait_ns), tuple(r.run_ns))
                for r in (x.rows[i] for i in range(x.count)))
            out.window_ns, out.truncated = x.window_ns, bool(x.truncated)
            return out
        finally:
            _C.usage_free(u)

    def stats(self) -> Stats:
        """The daemon's counters (a tenant sees its own)."""
        s = _C.DaemonStats()
        self._call(_C.stats, ctypes.byref(s))
        return Stats(*(getattr(s, f.name) for f in dataclasses.fields(Stats)))

    def close(self) -> None:
        """Frees the default device, cancels what is in flight (its futures fail with
        CANCELLED) and closes the connection."""
        if not self._c:
            return
        if self._default_device is not None:
            try:
                self._default_device.destroy()
            except GpuschedError:
                pass  # the daemon is gone: it freed the device with the connection's tenant
            self._default_device = None
        with self._lock:
            c, self._c = self._c, None
        if not self._borrowed:
            _C.close(c)
        if self._completions is not None:
            self._completions.close()
            self._completions = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(url: Optional[str] = None, token: Optional[str] = None, *,
            ca: Optional[str] = None, cert: Optional[str] = None,
            server_name: Optional[str] = None, adapter: Optional[int] = None,
            timeout_ms: int = 0) -> Client:
    """Connects to gpuschedd.

    url: ipc://PATH, tcp://HOST:PORT or tls+tcp://HOST:PORT (default $GPUSCHED_URL, else the
    local socket); token: default $GPUSCHED_TOKEN. For tls+tcp: ca, the CA file that signed
    the daemon's certificate (default $GPUSCHED_TLS_CA); cert, this client's certificate and
    key in one PEM file, when the daemon asks for one ($GPUSCHED_TLS_CERT_KEY); server_name,
    the name the daemon's certificate must carry (default the URL's host name). adapter: the
    adapter every request addresses (a Vulkan one runs users' kernels; default
    $GPUSCHED_ADAPTER, which the Kubernetes device plugin sets, else 0); timeout_ms: each
    call's bound (default 30 s; waits add their own)."""
    if adapter is None:
        adapter = int(os.environ.get("GPUSCHED_ADAPTER") or 0)
    return Client(url, token, ca=ca, cert=cert, server_name=server_name, adapter=adapter,
                  timeout_ms=timeout_ms)


def _url_list(urls: Union[None, str, Sequence[str]]) -> List[str]:
    if urls is None:
        urls = os.environ.get("GPUSCHED_URL", "")
    if isinstance(urls, str):
        urls = [u for u in re.split(r"[,\s]+", urls) if u]
    urls = list(urls)
    if not urls or len(urls) > _C.MAX_HOSTS:
        raise ValueError(f"give 1 to {_C.MAX_HOSTS} daemon URLs")
    if len(set(urls)) != len(urls):
        raise ValueError("a URL is given twice (its packets would count twice)")
    return urls


class Hosts:
    """Daemons on several hosts as one (docs/hosts.md): history merged, info, usage and
    stats per host, new devices on the least-loaded adapter. A host that cannot be reached
    is left out and named in `errors` (url -> why); Hosts raises only when none answers.

    urls: a list, a string of URLs separated by commas or spaces, or None ($GPUSCHED_URL).
    The other arguments are connect()'s, for every host."""

    def __init__(self, urls: Union[None, str, Sequence[str]] = None, token: Optional[str] = None,
                 *, ca: Optional[str] = None, cert: Optional[str] = None,
                 server_name: Optional[str] = None, adapter: Optional[int] = None,
                 timeout_ms: int = 0):
        self.urls = _url_list(urls)
        if adapter is None:
            adapter = int(os.environ.get("GPUSCHED_ADAPTER") or 0)
        self._lock = threading.Lock()
        self._failed: Dict[str, str] = {}
        enc = (lambda v: v.encode() if v is not None else None)
        o = _C.ConnectOptions(size=ctypes.sizeof(_C.ConnectOptions), token=enc(token),
                             tls_ca=enc(ca), tls_cert_key=enc(cert),
                             tls_server_name=enc(server_name), timeout_ms=timeout_ms,
                             adapter=adapter)
        arr = (_C.c_char_p * len(self.urls))(*[u.encode() for u in self.urls])
        h = _C.p()
        rv = _C.hosts_connect(arr, len(self.urls), ctypes.byref(o), ctypes.byref(h))
        self._h = h
        self._adapter = adapter
        self._clients: Dict[int, Client] = {}
        if rv != 0:
            why = self.errors
            self.close()
            raise GpuschedError._of(rv, "; ".join(f"{u}: {w}" for u, w in why.items())
                                    or "cannot connect")

    def _live(self) -> int:
        if not self._h:
            raise GpuschedError._of(_C.ERR_CANCELLED, "the hosts are closed")
        return self._h

    @property
    def errors(self) -> Dict[str, str]:
        """Hosts that are down or failed in the last call on all of them (history, device,
        info, usage, stats): url -> why."""
        if not self._h:
            return {}
        out = dict(self._failed)
        for i, url in enumerate(self.urls):
            why = _str(_C.hosts_error(self._h, i))
            if why:
                out[url] = why
        return out

    def client(self, host: Union[int, str]) -> Client:
        """The Client of one host (an index or its URL) for any other call; it belongs to
        this Hosts (close() here closes it). GpuschedError when that host is down."""
        i = self.urls.index(host) if isinstance(host, str) else host
        c = _C.hosts_client(self._live(), i)
        if not c:
            raise GpuschedError._of(_C.ERR_TRANSPORT, f"{self.urls[i]} is down: "
                                    f"{_str(_C.hosts_error(self._h, i))}")
        # A Client handed out and closed (a with block) is made again.
        if i not in self._clients or not self._clients[i]._c:
            self._clients[i] = Client._borrow(c, self._adapter, self.urls[i])
        return self._clients[i]

    def _all_clients(self):
        """Holds every handed-out Client's call lock: a call on all hosts runs the C clients
        on threads of its own, which must not meet a call of another Python thread."""
        import contextlib
        stack = contextlib.ExitStack()
        for i in sorted(self._clients):
            stack.enter_context(self._clients[i]._call_lock)
        return stack

    def _each(self, fn) -> Dict[str, Any]:
        """fn(client) for every host that is up: url -> its answer (failures in errors)."""
        out = {}
        self._failed = {}
        for i, url in enumerate(self.urls):
            if not _C.hosts_client(self._live(), i):
                continue
            try:
                out[url] = fn(self.client(i))
            except GpuschedError as e:
                self._failed[url] = str(e)
        return out

    def history(self, limit: int = 100, *, since: TimeSpec = None, until: TimeSpec = None,
                context: int = 0, device: int = 0, state: Optional[str] = None,
                node: Optional[int] = None, oldest_first: bool = False,
                tenant: Optional[str] = None) -> List[PacketRecord]:
        """Every host's packets merged in submission order (newest first unless
        oldest_first): exactly the first `limit` of their union, each with its `host`. Page
        by time (until= the last one's submitted_ns newest first; since= one past it oldest
        first): a packet id is its host's."""
        f = _history_filter(limit, since, until, context, device, state, node, oldest_first, 0,
                            0, tenant)
        recs, hosts, n = (_C.POINTER(_C.PacketRecord)(), _C.POINTER(_C.u32)(), _C.size_t())
        self._failed = {}
        with self._lock, self._all_clients():
            rv = _C.hosts_history(self._live(), ctypes.byref(f), ctypes.byref(recs),
                                  ctypes.byref(hosts), ctypes.byref(n))
        if rv != 0:
            raise GpuschedError._of(rv, "; ".join(f"{u}: {w}" for u, w in self.errors.items()))
        try:
            return [_record(recs[i], self.urls[hosts[i]]) for i in range(n.value)]
        finally:
            _C.hosts_history_free(recs, hosts, n)

    def info(self) -> Dict[str, Dict[str, Any]]:
        """Client.info of every host that answers: url -> info."""
        return self._each(lambda c: c.info())

    def usage(self, since: TimeSpec = "1h", until: TimeSpec = None, by: str = "tenant",
              tenant: Optional[str] = None) -> Dict[str, UsageReport]:
        """Client.usage of every host that answers: url -> its report."""
        return self._each(lambda c: c.usage(since, until, by, tenant))

    def stats(self) -> Dict[str, Stats]:
        """Client.stats of every host that answers: url -> its counters."""
        return self._each(lambda c: c.stats())

    def device(self, name: str = "python") -> Device:
        """A new device on the least-loaded adapter of all hosts (fewest queued packets per
        engine, then least memory in use; docs/hosts.md). Its client (device.client) is that
        host's, addressing that adapter; device.client.url names the host. One connection
        per host: devices of one host made here share its current adapter, the last one
        chosen (use a Client of your own per adapter to keep several)."""
        at, adapter, dev = _C.size_t(), _C.u32(), _C.u64()
        self._failed = {}
        with self._lock, self._all_clients():
            rv = _C.hosts_device_create(self._live(), name.encode(), ctypes.byref(at),
                                        ctypes.byref(adapter), ctypes.byref(dev))
        if rv != 0:
            raise GpuschedError._of(rv, "; ".join(f"{u}: {w}" for u, w in self.errors.items()))
        c = self.client(at.value)
        # The host's connection now addresses that adapter (for every device of it made
        # through this Hosts): its paging node is asked again.
        if c.adapter != adapter.value:
            c.adapter = adapter.value
            c._paging = None
        return Device(c, dev.value)

    def close(self) -> None:
        """Closes every host's connection (and the Clients handed out)."""
        for c in self._clients.values():
            c.close()
        self._clients = {}
        h, self._h = self._h, None
        if h:
            _C.hosts_close(h)

    def __enter__(self) -> "Hosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
