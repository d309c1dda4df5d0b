"""gpusched for Python: a client of the gpusched GPU scheduling service.

It calls the C client library, libgpusched.so.0 (client/gpusched.h), through ctypes: there is
no second implementation of the wire protocol here. The library is found through
$GPUSCHED_LIBRARY (a path), else the system's loader (an installed package).

    import gpusched
    with gpusched.connect() as gpu:                 # $GPUSCHED_URL, $GPUSCHED_TOKEN
        with gpu.device("mine") as dev:
            ctx = dev.context(node=0)
            buf = dev.allocation(4096)
            dma = gpusched.DmaBuffer().fill(buf, 0, 4096, 0x01020304)
            result = ctx.submit(dma, wait_ms=10_000)
            print(result.state, buf.read(16))
        print(gpu.history(limit=5))

Errors are GpuschedError, carrying the daemon's status name and message.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from typing import List, Optional, Union

# The daemon's version (CMakeLists.txt, project VERSION): the tests check that they agree.
__version__ = "0.1.0"

__all__ = ["connect", "Client", "Device", "Context", "Allocation", "DmaBuffer", "Kernel",
           "KernelBinding", "Sync", "Explanation", "PacketEvent",
           "SubmitResult", "PacketRecord", "GpuschedError", "PACKET_STATES", "SUBMIT_NULL_RENDERING"]

SUBMIT_NULL_RENDERING = 0x008

PACKET_STATES = ["UNKNOWN", "SUBMITTED", "READY", "RUNNING", "COMPLETED", "FAULTED", "ABORTED",
                 "PREEMPTED", "RESUBMITTED", "CANCELLED", "REJECTED"]


def _load() -> ctypes.CDLL:
    path = os.environ.get("GPUSCHED_LIBRARY") or ctypes.util.find_library("gpusched") \
        or "libgpusched.so.0"
    return ctypes.CDLL(path)


_lib = _load()
_u64, _u32, _i32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32
_p = ctypes.c_void_p


class _Dmabuf(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_uint8)), ("len", ctypes.c_size_t),
                ("cap", ctypes.c_size_t), ("allocs", _p), ("alloc_count", ctypes.c_size_t),
                ("alloc_cap", ctypes.c_size_t), ("patches", _p),
                ("patch_count", ctypes.c_size_t), ("patch_cap", ctypes.c_size_t),
                ("waits", _p), ("wait_count", ctypes.c_size_t), ("wait_cap", ctypes.c_size_t)]


class _ContextDesc(ctypes.Structure):
    _fields_ = [("device", _u64), ("node", _u32), ("flags", _u32), ("priority_class", _u32),
                ("priority", _i32), ("info", _u32 * 8)]


class _AllocDesc(ctypes.Structure):
    _fields_ = [("device", _u64), ("size", _u64), ("supported_segment_set", _u32),
                ("segment_preference", _u32), ("priority", _u32), ("flags", _u32)]


class _Placement(ctypes.Structure):
    _fields_ = [("allocation", _u64), ("segment", _u32), ("offset", _u64), ("address", _u64)]


class _SubmitResult(ctypes.Structure):
    _fields_ = [("packet", _u64), ("fence", _u64), ("node", _u32), ("state", ctypes.c_int),
                ("completed_fence", _u64)]


class _HistoryFilter(ctypes.Structure):
    _fields_ = [("context", _u64), ("device", _u64), ("state", ctypes.c_int),
                ("match_node", ctypes.c_bool), ("node", _u32), ("limit", _u32),
                ("before_packet", _u64), ("allocation", _u64), ("paging", ctypes.c_bool),
                ("since_ns", _u64), ("until_ns", _u64), ("flags_mask", _u32), ("fence", _u64),
                ("oldest_first", ctypes.c_bool), ("after_packet", _u64),
                ("tenant", ctypes.c_char_p)]


class _PacketRecord(ctypes.Structure):
    _fields_ = [("packet", _u64), ("device", _u64), ("context", _u64), ("node", _u32),
                ("fence", _u64), ("submit_flags", _u32), ("patch_flags", _u32),
                ("dma_size", _u32), ("allocation_count", _u32), ("patch_count", _u32),
                ("state", ctypes.c_int), ("submitted_ns", _u64), ("ready_ns", _u64),
                ("started_ns", _u64), ("completed_ns", _u64), ("preemptions", _u32),
                ("resubmissions", _u32), ("result", ctypes.c_char_p),
                ("tenant", ctypes.c_char_p), ("dispatches", ctypes.c_char_p)]


class _PacketEvent(ctypes.Structure):
    _fields_ = [("seq", _u64), ("packet", _u64), ("state", ctypes.c_int), ("time_ns", _u64),
                ("detail", ctypes.c_char_p), ("context", _u64)]


class _Explanation(ctypes.Structure):
    _fields_ = [("packet", ctypes.POINTER(_PacketRecord)), ("events", ctypes.POINTER(_PacketEvent)),
                ("event_count", ctypes.c_size_t), ("moves", _p), ("move_count", ctypes.c_size_t)]


class _KernelBinding(ctypes.Structure):
    _fields_ = [("binding", _u32), ("kind", _u32), ("writes", ctypes.c_bool),
                ("name", ctypes.c_char * 48)]


class _KernelInfo(ctypes.Structure):
    _fields_ = [("kernel", _u64), ("device", _u64), ("hash", ctypes.c_uint8 * 32),
                ("entry_point", ctypes.c_char * 64), ("local_size", _u32 * 3),
                ("push_constant_bytes", _u32), ("nbindings", _u32),
                ("bindings", _KernelBinding * 16), ("spirv_bytes", _u64),
                ("cached", ctypes.c_bool), ("created_ns", _u64)]


class _DmaBinding(ctypes.Structure):
    _fields_ = [("binding", _u32), ("allocation", _u64), ("offset", _u64), ("range", _u64),
                ("write", ctypes.c_bool)]


class _Info(ctypes.Structure):
    _fields_ = [("version", ctypes.c_char_p), ("tenant", ctypes.c_char_p),
                ("events_url", ctypes.c_char_p), ("adapter_count", ctypes.c_size_t),
                ("adapters", _p), ("tenant_view", ctypes.c_bool)]


def _sig(name, res, *args):
    f = getattr(_lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


_c = ctypes.c_int
_connect = _sig("gs_connect", _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_p))
_close = _sig("gs_close", None, _p)
_message = _sig("gs_client_message", ctypes.c_char_p, _p)
_status_name = _sig("gs_status_name", ctypes.c_char_p, _c)
_info = _sig("gs_info", _c, _p, ctypes.POINTER(ctypes.POINTER(_Info)))
_info_free = _sig("gs_info_free", None, ctypes.POINTER(_Info))
_device_create = _sig("gs_device_create", _c, _p, ctypes.c_char_p, ctypes.POINTER(_u64))
_device_destroy = _sig("gs_device_destroy", _c, _p, _u64)
_ctx_desc_init = _sig("gs_context_desc_init", None, ctypes.POINTER(_ContextDesc), _u64, _u32)
_ctx_create = _sig("gs_context_create", _c, _p, ctypes.POINTER(_ContextDesc),
                   ctypes.POINTER(_u64), _p)
_ctx_destroy = _sig("gs_context_destroy", _c, _p, _u64)
_alloc_create = _sig("gs_allocation_create", _c, _p, ctypes.POINTER(_AllocDesc),
                     ctypes.POINTER(_Placement))
_alloc_destroy = _sig("gs_allocation_destroy", _c, _p, _u64)
_alloc_read = _sig("gs_allocation_read", _c, _p, _u64, _u64, _p, ctypes.c_size_t)
_alloc_write = _sig("gs_allocation_write", _c, _p, _u64, _u64, _p, ctypes.c_size_t)
_dma_init = _sig("gs_dmabuf_init", None, ctypes.POINTER(_Dmabuf))
_dma_free = _sig("gs_dmabuf_free", None, ctypes.POINTER(_Dmabuf))
_dma_nop = _sig("gs_dmabuf_nop", _c, ctypes.POINTER(_Dmabuf))
_dma_fill = _sig("gs_dmabuf_fill", _c, ctypes.POINTER(_Dmabuf), _u64, _u64, _u64, _u32)
_dma_spin = _sig("gs_dmabuf_spin", _c, ctypes.POINTER(_Dmabuf), _u64, ctypes.c_uint8)
_submit_wait = _sig("gs_submit_wait", _c, _p, _u64, ctypes.POINTER(_Dmabuf), _u32, _u32,
                    ctypes.POINTER(_SubmitResult))
_submit = _sig("gs_submit", _c, _p, _u64, ctypes.POINTER(_Dmabuf), _u32,
               ctypes.POINTER(_SubmitResult))
_packet_wait = _sig("gs_packet_wait", _c, _p, _u64, _u32, ctypes.POINTER(ctypes.c_int),
                    ctypes.POINTER(_u64))
_history = _sig("gs_history", _c, _p, ctypes.POINTER(_HistoryFilter),
                ctypes.POINTER(ctypes.POINTER(_PacketRecord)), ctypes.POINTER(ctypes.c_size_t))
_history_free = _sig("gs_history_free", None, ctypes.POINTER(_PacketRecord), ctypes.c_size_t)
_set_adapter = _sig("gs_client_set_adapter", None, _p, _u32)
_explain = _sig("gs_explain", _c, _p, _u64, ctypes.c_char_p,
                ctypes.POINTER(ctypes.POINTER(_Explanation)))
_explanation_free = _sig("gs_explanation_free", None, ctypes.POINTER(_Explanation))
_sync_create = _sig("gs_sync_create", _c, _p, _u64, _u64, ctypes.POINTER(_u64))
_sync_destroy = _sig("gs_sync_destroy", _c, _p, _u64)
_sync_signal = _sig("gs_sync_signal", _c, _p, _u64, _u64)
_sync_wait = _sig("gs_sync_wait", _c, _p, _u64, _u64, _u32, ctypes.POINTER(_u64))
_kernel_create = _sig("gs_kernel_create", _c, _p, _u64, ctypes.c_char_p, ctypes.c_size_t,
                      ctypes.c_char_p, ctypes.POINTER(_KernelInfo))
_kernel_destroy = _sig("gs_kernel_destroy", _c, _p, _u64)
_dma_dispatch = _sig("gs_dmabuf_dispatch", _c, ctypes.POINTER(_Dmabuf), _u64, _u32 * 3,
                     ctypes.POINTER(_DmaBinding), ctypes.c_size_t, _p, ctypes.c_size_t)


class GpuschedError(Exception):
    """A call the daemon (or the library) refused: `status` is its name, such as "NOT_FOUND"
    or "UNAUTHENTICATED"; `code` the number; `message` the daemon's explanation."""

    def __init__(self, code: int, status: str, message: str):
        super().__init__(f"{status}: {message}" if message else status)
        self.code, self.status, self.message = code, status, message


def _str(b: Optional[bytes]) -> str:
    return b.decode() if b else ""


@dataclass(frozen=True)
class SubmitResult:
    """What a submission answered: the packet id, its context's fence, the node, its state
    (final when the call waited and the packet ended in time) and the context's completed
    fence then."""
    packet: int
    fence: int
    node: int
    state: str
    completed_fence: int


@dataclass(frozen=True)
class PacketRecord:
    """One packet of the history (the audit file), its times in ns of CLOCK_REALTIME."""
    packet: int
    device: int
    context: int
    node: int
    fence: int
    submit_flags: int
    state: str
    submitted_ns: int
    started_ns: int
    completed_ns: int
    preemptions: int
    result: str
    tenant: str


@dataclass(frozen=True)
class PacketEvent:
    """One state change of a packet, with the daemon's reason (why it waited, what stopped it)."""
    seq: int
    state: str
    time_ns: int
    detail: str


@dataclass(frozen=True)
class Explanation:
    """A packet's whole life (gpusched explain): its record, its events and how many moves of
    the memory manager were made for it."""
    packet: PacketRecord
    events: List[PacketEvent]
    moves: int


def _record(r: "_PacketRecord") -> PacketRecord:
    return PacketRecord(r.packet, r.device, r.context, r.node, r.fence, r.submit_flags,
                        PACKET_STATES[r.state], r.submitted_ns, r.started_ns, r.completed_ns,
                        r.preemptions, _str(r.result), _str(r.tenant))


class Sync:
    """A monitored fence of a device: a 64-bit value that only grows."""

    def __init__(self, client: "Client", handle: int):
        self._client, self.handle = client, handle

    def signal(self, value: int) -> None:
        """Raises the value from the CPU (a lower one is refused)."""
        self._client._check(_sync_signal(self._client._c, self.handle, value))

    def wait(self, value: int, timeout_ms: int = 30_000) -> int:
        """Waits until the value is at least `value` (TIMEOUT raises); returns the value seen.
        The GIL is released meanwhile."""
        cur = _u64()
        self._client._check(_sync_wait(self._client._c, self.handle, value, timeout_ms,
                                       ctypes.byref(cur)))
        return cur.value

    def destroy(self) -> None:
        if self.handle:
            self._client._check(_sync_destroy(self._client._c, self.handle))
            self.handle = 0


class DmaBuffer:
    """A DMA buffer under construction: each method appends one command and returns self."""

    def __init__(self) -> None:
        self._b = _Dmabuf()
        _dma_init(ctypes.byref(self._b))

    def __del__(self) -> None:
        if hasattr(self, "_b"):
            _dma_free(ctypes.byref(self._b))

    def _check(self, rv: int, what: str) -> "DmaBuffer":
        if rv != 0:
            raise GpuschedError(rv, _str(_status_name(rv)), what)
        return self

    def nop(self) -> "DmaBuffer":
        return self._check(_dma_nop(ctypes.byref(self._b)), "nop")

    def fill(self, allocation: "Allocation", offset: int, size: int, pattern: int) -> "DmaBuffer":
        """Writes the 32-bit pattern over size bytes of the allocation from offset."""
        return self._check(_dma_fill(ctypes.byref(self._b), allocation.handle, offset, size,
                                     pattern), "fill")

    def spin(self, micros: int, preemptible: bool = True) -> "DmaBuffer":
        """Engine time, as a long shader would take."""
        return self._check(_dma_spin(ctypes.byref(self._b), micros, 0 if preemptible else 1),
                           "spin")

    def __len__(self) -> int:
        return self._b.len


@dataclass(frozen=True)
class KernelBinding:
    """A buffer the kernel declares: its binding number, its name in the module (may be
    empty) and whether the kernel writes it."""
    binding: int
    name: str
    writes: bool


class Kernel:
    """A user's SPIR-V compute kernel on a device (Device.kernel)."""

    def __init__(self, client: "Client", info: "_KernelInfo"):
        self._client = client
        self.handle = info.kernel
        self.entry_point = _str(info.entry_point)
        self.local_size = tuple(info.local_size)
        self.push_constant_bytes = info.push_constant_bytes
        self.bindings = [KernelBinding(b.binding, _str(b.name), bool(b.writes))
                         for b in info.bindings[:info.nbindings]]

    def destroy(self) -> None:
        if self.handle:
            self._client._check(_kernel_destroy(self._client._c, self.handle))
            self.handle = 0


def _bytes_of(value) -> bytes:
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


class Allocation:
    """Memory on the device: read and written from the CPU, used by packets."""

    def __init__(self, client: "Client", handle: int, size: int):
        self._client, self.handle, self.size = client, handle, size

    def write(self, data, offset: int = 0) -> None:
        """Writes any buffer-protocol object (bytes, bytearray, a contiguous numpy array)."""
        mv = memoryview(data).cast("B")
        buf = (ctypes.c_char * len(mv)).from_buffer_copy(mv) if mv.readonly else \
            (ctypes.c_char * len(mv)).from_buffer(mv)
        self._client._check(_alloc_write(self._client._c, self.handle, offset, buf, len(mv)))

    def read(self, size: Optional[int] = None, offset: int = 0) -> bytes:
        n = self.size - offset if size is None else size
        buf = ctypes.create_string_buffer(n)
        self._client._check(_alloc_read(self._client._c, self.handle, offset, buf, n))
        return buf.raw

    def destroy(self) -> None:
        if self.handle:
            self._client._check(_alloc_destroy(self._client._c, self.handle))
            self.handle = 0


class Context:
    """A GPU context on one node of the device: packets submitted to it run in order."""

    def __init__(self, client: "Client", handle: int):
        self._client, self.handle = client, handle

    def submit(self, dma: DmaBuffer, flags: int = 0, wait_ms: int = 0) -> SubmitResult:
        """Submits one packet. With wait_ms, answers once it ended (or at wait_ms)."""
        r = _SubmitResult()
        if wait_ms:
            rv = _submit_wait(self._client._c, self.handle, ctypes.byref(dma._b), flags, wait_ms,
                              ctypes.byref(r))
        else:
            rv = _submit(self._client._c, self.handle, ctypes.byref(dma._b), flags,
                         ctypes.byref(r))
        self._client._check(rv)
        return SubmitResult(r.packet, r.fence, r.node, PACKET_STATES[r.state], r.completed_fence)

    def destroy(self) -> None:
        if self.handle:
            self._client._check(_ctx_destroy(self._client._c, self.handle))
            self.handle = 0


class Device:
    """A device: its contexts and allocations go with it (a context manager destroys it)."""

    def __init__(self, client: "Client", handle: int):
        self._client, self.handle = client, handle

    def context(self, node: int = 0, paging_node: int = 2) -> Context:
        d = _ContextDesc()
        _ctx_desc_init(ctypes.byref(d), self.handle, node)
        d.info[7] = paging_node
        h = _u64()
        self._client._check(_ctx_create(self._client._c, ctypes.byref(d), ctypes.byref(h), None))
        return Context(self._client, h.value)

    def allocation(self, size: int) -> Allocation:
        d = _AllocDesc(device=self.handle, size=size)
        p = _Placement()
        self._client._check(_alloc_create(self._client._c, ctypes.byref(d), ctypes.byref(p)))
        return Allocation(self._client, p.allocation, size)

    def sync(self, initial: int = 0) -> Sync:
        h = _u64()
        self._client._check(_sync_create(self._client._c, self.handle, initial, ctypes.byref(h)))
        return Sync(self._client, h.value)

    def kernel(self, spirv: bytes, entry_point: str = "main") -> Kernel:
        """Creates a kernel from a SPIR-V module (the daemon validates it and reflects its
        bindings and push constants)."""
        info = _KernelInfo()
        code = bytes(spirv)
        self._client._check(_kernel_create(self._client._c, self.handle, code, len(code),
                                           entry_point.encode(), ctypes.byref(info)))
        return Kernel(self._client, info)

    def run(self, kernel: Kernel, groups, buffers: dict, push=None, outputs=None,
            node: int = 1, wait_ms: int = 60_000) -> dict:
        """Runs the kernel once over groups (x, y, z) work groups. buffers maps each binding
        (its number or its name) to an array (numpy, or any buffer): it is copied to an
        allocation of its size. Returns {name: array} for the names (or numbers) in outputs,
        read back after the run, with the dtype and shape of the array given for it."""
        import numpy as np
        by_key = {}
        for b in kernel.bindings:
            by_key[b.binding] = b
            if b.name:
                by_key[b.name] = b
        allocs, binds, arrays = {}, [], {}
        try:
            for key, array in buffers.items():
                if key not in by_key:
                    raise KeyError(f"the kernel declares no binding {key!r}")
                b = by_key[key]
                a = np.ascontiguousarray(array)
                alloc = self.allocation(a.nbytes)
                alloc.write(a)
                allocs[b.binding], arrays[key] = alloc, a
                binds.append(_DmaBinding(b.binding, alloc.handle, 0, a.nbytes, b.writes))
            missing = [b.binding for b in kernel.bindings if b.binding not in allocs]
            if missing:
                raise KeyError(f"no buffer for the kernel's bindings {missing}")
            dma = DmaBuffer()
            pc = _bytes_of(push)
            g = (_u32 * 3)(*(list(groups) + [1, 1])[:3])
            arr = (_DmaBinding * len(binds))(*binds)
            pcbuf = ctypes.create_string_buffer(pc, len(pc)) if pc else None
            dma._check(_dma_dispatch(ctypes.byref(dma._b), kernel.handle, g, arr, len(binds),
                                     ctypes.cast(pcbuf, _p) if pcbuf else None, len(pc)),
                       "dispatch")
            ctx = self.context(node=node)
            try:
                r = ctx.submit(dma, wait_ms=wait_ms)
            finally:
                ctx.destroy()
            if r.state != "COMPLETED":
                raise GpuschedError(0, r.state, f"packet {r.packet} did not complete")
            out = {}
            for key in outputs or []:
                a = arrays[key]
                raw = allocs[by_key[key].binding].read(a.nbytes)
                out[key] = np.frombuffer(raw, dtype=a.dtype).reshape(a.shape).copy()
            return out
        finally:
            for alloc in allocs.values():
                alloc.destroy()

    def destroy(self) -> None:
        if self.handle:
            self._client._check(_device_destroy(self._client._c, self.handle))
            self.handle = 0

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()


class Client:
    """A connection to gpuschedd (close() or a with block ends it)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 adapter: int = 0):
        c = _p()
        rv = _connect(url.encode() if url else None, token.encode() if token is not None else None,
                      ctypes.byref(c))
        if rv != 0:
            raise GpuschedError(rv, _str(_status_name(rv)), f"cannot connect to {url or 'the daemon'}")
        self._c = c
        _set_adapter(c, adapter)

    def _check(self, rv: int) -> None:
        if rv != 0:
            raise GpuschedError(rv, _str(_status_name(rv)), _str(_message(self._c)))

    def info(self) -> dict:
        """The daemon's version, the tenant this token authenticated as, its adapters' count."""
        p = ctypes.POINTER(_Info)()
        self._check(_info(self._c, ctypes.byref(p)))
        try:
            i = p.contents
            return {"version": _str(i.version), "tenant": _str(i.tenant),
                    "adapters": i.adapter_count, "tenant_view": bool(i.tenant_view)}
        finally:
            _info_free(p)

    def device(self, name: str = "python") -> Device:
        h = _u64()
        self._check(_device_create(self._c, name.encode(), ctypes.byref(h)))
        return Device(self, h.value)

    def wait(self, packet: int, timeout_ms: int = 30_000) -> str:
        """Waits for the packet to end: its final state's name (FAULTED raises)."""
        st, fence = ctypes.c_int(), _u64()
        self._check(_packet_wait(self._c, packet, timeout_ms, ctypes.byref(st), ctypes.byref(fence)))
        return PACKET_STATES[st.value]

    def history(self, limit: int = 100, context: int = 0) -> List[PacketRecord]:
        """The caller's packets, newest first, from the audit file."""
        f = _HistoryFilter(limit=limit, context=context)
        recs, n = ctypes.POINTER(_PacketRecord)(), ctypes.c_size_t()
        self._check(_history(self._c, ctypes.byref(f), ctypes.byref(recs), ctypes.byref(n)))
        try:
            return [_record(recs[i]) for i in range(n.value)]
        finally:
            _history_free(recs, n)

    def explain(self, packet: int) -> Explanation:
        """One packet's life from the audit: every state change with its reason."""
        e = ctypes.POINTER(_Explanation)()
        self._check(_explain(self._c, packet, None, ctypes.byref(e)))
        try:
            x = e.contents
            events = [PacketEvent(v.seq, PACKET_STATES[v.state], v.time_ns, _str(v.detail))
                      for v in (x.events[i] for i in range(x.event_count))]
            return Explanation(_record(x.packet.contents), events, x.move_count)
        finally:
            _explanation_free(e)

    def close(self) -> None:
        if self._c:
            _close(self._c)
            self._c = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(url: Optional[str] = None, token: Optional[str] = None, adapter: int = 0) -> Client:
    """Connects to gpuschedd: url (ipc://, tcp://, tls+tcp://) or $GPUSCHED_URL or the default
    socket; token or $GPUSCHED_TOKEN; every request addresses `adapter` (gpusched info lists
    them: users' kernels run on a Vulkan one, such as the gpu0 of gpuschedd --with-vulkan)."""
    return Client(url, token, adapter)
