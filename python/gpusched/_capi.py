"""The C API of libgpusched.so.0 (client/gpusched.h, proto/wddm.h) as ctypes declarations.

Private to the package: the structures mirror the header's field for field, and each
function gets its argument and result types here, once. ctypes releases the GIL around every
foreign call (CDLL), so a call that waits in the daemon lets other Python threads run.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

u64, u32, i32, u8 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint8
p, c_int, c_bool, c_char_p, size_t = (ctypes.c_void_p, ctypes.c_int, ctypes.c_bool,
                                      ctypes.c_char_p, ctypes.c_size_t)
POINTER, byref = ctypes.POINTER, ctypes.byref

STATUS_FAULTED = 12
ERR_TRANSPORT, ERR_TIMEOUT, ERR_PROTOCOL, ERR_NOMEM, ERR_INVALID, ERR_CANCELLED, ERR_BUSY = \
    -1, -2, -3, -4, -5, -6, -7
ASYNC_MESSAGE_MAX = 512
KERNEL_MAX_BINDINGS = 16


def _load() -> ctypes.CDLL:
    path = os.environ.get("GPUSCHED_LIBRARY") or ctypes.util.find_library("gpusched") \
        or "libgpusched.so.0"
    return ctypes.CDLL(path)


lib = _load()


class Dmabuf(ctypes.Structure):
    _fields_ = [("data", POINTER(u8)), ("len", size_t), ("cap", size_t), ("allocs", p),
                ("alloc_count", size_t), ("alloc_cap", size_t), ("patches", p),
                ("patch_count", size_t), ("patch_cap", size_t), ("waits", p),
                ("wait_count", size_t), ("wait_cap", size_t)]


class ConnectOptions(ctypes.Structure):
    _fields_ = [("size", size_t), ("url", c_char_p), ("token", c_char_p), ("tls_ca", c_char_p),
                ("tls_cert_key", c_char_p), ("tls_server_name", c_char_p),
                ("timeout_ms", u32), ("adapter", u32)]


class ContextDesc(ctypes.Structure):
    _fields_ = [("device", u64), ("node", u32), ("flags", u32), ("priority_class", u32),
                ("priority", i32), ("info", u32 * 8)]


class ContextStatus(ctypes.Structure):
    _fields_ = [("context", u64), ("node", u32), ("submitted_fence", u64),
                ("completed_fence", u64), ("queued", u32), ("faulted", c_bool),
                ("priority_class", u32), ("priority", i32)]


class AllocDesc(ctypes.Structure):
    _fields_ = [("device", u64), ("size", u64), ("supported_segment_set", u32),
                ("segment_preference", u32), ("priority", u32), ("flags", u32)]


class Placement(ctypes.Structure):
    _fields_ = [("allocation", u64), ("segment", u32), ("offset", u64), ("address", u64)]


class AllocStatus(ctypes.Structure):
    _fields_ = [("allocation", u64), ("device", u64), ("size", u64),
                ("supported_segment_set", u32), ("segment_preference", u32), ("priority", u32),
                ("flags", u32), ("resident", c_bool), ("segment", u32), ("offset", u64),
                ("address", u64), ("busy_packets", u64), ("pinned", u32), ("moves", u64),
                ("moving", c_bool), ("last_used_ns", u64)]


class Segpref(ctypes.Structure):
    _fields_ = [("segment", u8 * 5), ("direction", u8 * 5)]


class SubmitResult(ctypes.Structure):
    _fields_ = [("packet", u64), ("fence", u64), ("node", u32), ("state", c_int),
                ("completed_fence", u64)]


class SubmitDesc(ctypes.Structure):
    _fields_ = [("context", u64), ("dma", POINTER(Dmabuf)), ("submit_flags", u32),
                ("private_data", p), ("private_data_size", size_t), ("wait_ms", u32)]


class HistoryFilter(ctypes.Structure):
    _fields_ = [("context", u64), ("device", u64), ("state", c_int), ("match_node", c_bool),
                ("node", u32), ("limit", u32), ("before_packet", u64), ("allocation", u64),
                ("paging", c_bool), ("since_ns", u64), ("until_ns", u64), ("flags_mask", u32),
                ("fence", u64), ("oldest_first", c_bool), ("after_packet", u64),
                ("tenant", c_char_p)]


class PacketRecord(ctypes.Structure):
    _fields_ = [("packet", u64), ("device", u64), ("context", u64), ("node", u32),
                ("fence", u64), ("submit_flags", u32), ("patch_flags", u32), ("dma_size", u32),
                ("allocation_count", u32), ("patch_count", u32), ("state", c_int),
                ("submitted_ns", u64), ("ready_ns", u64), ("started_ns", u64),
                ("completed_ns", u64), ("preemptions", u32), ("resubmissions", u32),
                ("result", c_char_p), ("tenant", c_char_p), ("dispatches", c_char_p)]


class PacketEvent(ctypes.Structure):
    _fields_ = [("seq", u64), ("packet", u64), ("state", c_int), ("time_ns", u64),
                ("detail", c_char_p), ("context", u64)]


class Move(ctypes.Structure):
    _fields_ = [("seq", u64), ("time_ns", u64), ("allocation", u64), ("device", u64),
                ("packet", u64), ("for_packet", u64), ("kind", c_int), ("from_segment", u32),
                ("from_offset", u64), ("to_segment", u32), ("to_offset", u64), ("bytes", u64),
                ("transfer_flags", u32), ("pieces", u32), ("reason", c_char_p),
                ("offsets_withheld", c_bool)]


class Explanation(ctypes.Structure):
    _fields_ = [("packet", POINTER(PacketRecord)), ("events", POINTER(PacketEvent)),
                ("event_count", size_t), ("moves", POINTER(Move)), ("move_count", size_t)]


class UsageFilter(ctypes.Structure):
    _fields_ = [("since_ns", u64), ("until_ns", u64), ("by", c_int), ("tenant", c_char_p)]


class UsageRow(ctypes.Structure):
    _fields_ = [("tenant", c_char_p), ("context", u64), ("adapter", u32), ("node", u32),
                ("packets", u64), ("completed", u64), ("faulted", u64), ("cancelled", u64),
                ("preemptions", u64), ("resubmissions", u64), ("busy_ns", u64),
                ("utilisation", ctypes.c_double), ("paging_bytes", u64), ("wait_ns", u64 * 3),
                ("run_ns", u64 * 3)]


class Usage(ctypes.Structure):
    _fields_ = [("rows", POINTER(UsageRow)), ("count", size_t), ("window_ns", u64),
                ("truncated", c_bool)]


class DaemonStats(ctypes.Structure):
    _fields_ = [(name, u64) for name in (
        "requests", "errors", "packets_submitted", "packets_completed", "packets_faulted",
        "packets_cancelled", "packets_rejected", "audit_records", "audit_commits", "devices",
        "contexts", "allocations", "uptime_ns", "paging_packets", "paging_bytes", "evictions",
        "audit_queued", "audit_failed_commits", "audit_dropped")] + \
        [("audit_health", c_int), ("tenant_view", c_bool)]


class KernelBindingInfo(ctypes.Structure):
    _fields_ = [("binding", u32), ("kind", u32), ("writes", c_bool), ("name", ctypes.c_char * 48)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("kernel", u64), ("device", u64), ("hash", u8 * 32),
                ("entry_point", ctypes.c_char * 64), ("local_size", u32 * 3),
                ("push_constant_bytes", u32), ("nbindings", u32),
                ("bindings", KernelBindingInfo * KERNEL_MAX_BINDINGS), ("spirv_bytes", u64),
                ("cached", c_bool), ("created_ns", u64)]


class DmaBinding(ctypes.Structure):
    _fields_ = [("binding", u32), ("allocation", u64), ("offset", u64), ("range", u64),
                ("write", c_bool)]


class NodeInfo(ctypes.Structure):
    _fields_ = [("id", u32), ("name", c_char_p), ("kind", c_int), ("engines", u32),
                ("paging", c_bool), ("fence", u64), ("queued", u64)]


class AdapterInfo(ctypes.Structure):
    _fields_ = [("id", u32), ("name", c_char_p), ("backend", c_char_p), ("clock", c_char_p),
                ("device", c_char_p), ("driver", c_char_p), ("api", c_char_p), ("queues", u32),
                ("preempt_granularity_ns", u64), ("cpu_access", c_char_p),
                ("device_losses", u32), ("device_dead", c_bool), ("device_retrying", c_bool),
                ("share_policy", c_int), ("time_slice_us", u32), ("node_count", size_t),
                ("nodes", POINTER(NodeInfo)), ("segment_count", size_t), ("segments", p),
                ("caps", u32), ("max_dma_buffer", u32), ("max_allocation_list", u32),
                ("max_patch_list", u32), ("system_memory", u64), ("system_memory_used", u64),
                ("paging_chunk", u64), ("kernels", c_bool), ("max_local_size", u32 * 3),
                ("max_invocations", u32), ("max_push_constant_bytes", u32),
                ("max_storage_buffer_range", u64), ("max_uniform_buffer_range", u64),
                ("binding_offset_alignment", u32)]


class DaemonInfo(ctypes.Structure):
    _fields_ = [("version", c_char_p), ("tenant", c_char_p), ("events_url", c_char_p),
                ("adapter_count", size_t), ("adapters", POINTER(AdapterInfo)),
                ("tenant_view", c_bool)]


class AsyncOpts(ctypes.Structure):
    _fields_ = [("queue", p), ("callback", p), ("user", p), ("timeout_ms", u32)]


class AsyncEvent(ctypes.Structure):
    _fields_ = [("id", u64), ("kind", c_int), ("user", p), ("status", c_int),
                ("message", ctypes.c_char * ASYNC_MESSAGE_MAX), ("submit", SubmitResult),
                ("batch", POINTER(SubmitResult)), ("batch_count", size_t), ("state", c_int),
                ("fence", u64), ("completed_fence", u64), ("value", u64)]


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


PDmabuf = POINTER(Dmabuf)
connect_with = _sig("gs_connect_with", c_int, POINTER(ConnectOptions), POINTER(p),
                    ctypes.c_char_p, size_t)
close = _sig("gs_close", None, p)
set_timeout = _sig("gs_client_set_timeout", None, p, u32)
message = _sig("gs_client_message", c_char_p, p)
status_name = _sig("gs_status_name", c_char_p, c_int)
strerror = _sig("gs_strerror", c_char_p, c_int)
move_kind_name = _sig("gs_move_kind_name", c_char_p, c_int)
time_parse = _sig("gs_time_parse", c_int, c_char_p, u64, POINTER(u64))
info = _sig("gs_info", c_int, p, POINTER(POINTER(DaemonInfo)))
info_free = _sig("gs_info_free", None, POINTER(DaemonInfo))
device_create = _sig("gs_device_create", c_int, p, c_char_p, POINTER(u64))
device_destroy = _sig("gs_device_destroy", c_int, p, u64)
context_desc_init = _sig("gs_context_desc_init", None, POINTER(ContextDesc), u64, u32)
context_create = _sig("gs_context_create", c_int, p, POINTER(ContextDesc), POINTER(u64), p)
context_destroy = _sig("gs_context_destroy", c_int, p, u64)
context_query = _sig("gs_context_query", c_int, p, u64, POINTER(ContextStatus))
context_set_priority = _sig("gs_context_set_priority", c_int, p, u64, u32, i32)
alloc_create = _sig("gs_allocation_create", c_int, p, POINTER(AllocDesc), POINTER(Placement))
alloc_destroy = _sig("gs_allocation_destroy", c_int, p, u64)
alloc_query = _sig("gs_allocation_query", c_int, p, u64, POINTER(AllocStatus))
alloc_read = _sig("gs_allocation_read", c_int, p, u64, u64, p, size_t)
alloc_write = _sig("gs_allocation_write", c_int, p, u64, u64, p, size_t)
segpref_encode = _sig("gs_segpref_encode", u32, POINTER(Segpref))
dma_init = _sig("gs_dmabuf_init", None, PDmabuf)
dma_free = _sig("gs_dmabuf_free", None, PDmabuf)
dma_reset = _sig("gs_dmabuf_reset", None, PDmabuf)
dma_nop = _sig("gs_dmabuf_nop", c_int, PDmabuf)
dma_fill = _sig("gs_dmabuf_fill", c_int, PDmabuf, u64, u64, u64, u32)
dma_copy = _sig("gs_dmabuf_copy", c_int, PDmabuf, u64, u64, u64, u64, u64)
dma_checksum = _sig("gs_dmabuf_checksum", c_int, PDmabuf, u64, u64, u64, u64, u64)
dma_spin = _sig("gs_dmabuf_spin", c_int, PDmabuf, u64, u8)
dma_signal = _sig("gs_dmabuf_signal", c_int, PDmabuf, u64, u64)
dma_wait = _sig("gs_dmabuf_wait", c_int, PDmabuf, u64, u64)
dma_dispatch = _sig("gs_dmabuf_dispatch", c_int, PDmabuf, u64, u32 * 3, POINTER(DmaBinding),
                    size_t, p, size_t)
submit = _sig("gs_submit", c_int, p, u64, PDmabuf, u32, POINTER(SubmitResult))
submit_batch = _sig("gs_submit_batch", c_int, p, POINTER(SubmitDesc), size_t,
                    POINTER(SubmitResult))
submit_wait = _sig("gs_submit_wait", c_int, p, u64, PDmabuf, u32, u32, POINTER(SubmitResult))
packet_wait = _sig("gs_packet_wait", c_int, p, u64, u32, POINTER(c_int), POINTER(u64))
sync_wait = _sig("gs_sync_wait", c_int, p, u64, u64, u32, POINTER(u64))
sync_create = _sig("gs_sync_create", c_int, p, u64, u64, POINTER(u64))
sync_destroy = _sig("gs_sync_destroy", c_int, p, u64)
sync_signal = _sig("gs_sync_signal", c_int, p, u64, u64)
kernel_create = _sig("gs_kernel_create", c_int, p, u64, c_char_p, size_t, c_char_p,
                     POINTER(KernelInfo))
kernel_destroy = _sig("gs_kernel_destroy", c_int, p, u64)
history = _sig("gs_history", c_int, p, POINTER(HistoryFilter), POINTER(POINTER(PacketRecord)),
               POINTER(size_t))
history_free = _sig("gs_history_free", None, POINTER(PacketRecord), size_t)
explain = _sig("gs_explain", c_int, p, u64, c_char_p, POINTER(POINTER(Explanation)))
explanation_free = _sig("gs_explanation_free", None, POINTER(Explanation))
get_usage = _sig("gs_get_usage", c_int, p, POINTER(UsageFilter), POINTER(POINTER(Usage)))
usage_free = _sig("gs_usage_free", None, POINTER(Usage))
stats = _sig("gs_stats", c_int, p, POINTER(DaemonStats))
async_queue_create = _sig("gs_async_queue_create", c_int, POINTER(p))
async_queue_destroy = _sig("gs_async_queue_destroy", None, p)
async_queue_fd = _sig("gs_async_queue_fd", c_int, p)
async_poll = _sig("gs_async_poll", c_int, p, POINTER(AsyncEvent), size_t, c_int)
async_submit_desc = _sig("gs_async_submit_desc", c_int, p, POINTER(SubmitDesc),
                         POINTER(AsyncOpts), POINTER(u64))
async_packet_wait = _sig("gs_async_packet_wait", c_int, p, u64, u32, POINTER(AsyncOpts),
                         POINTER(u64))
async_sync_wait = _sig("gs_async_sync_wait", c_int, p, u64, u64, u32, POINTER(AsyncOpts),
                       POINTER(u64))
async_cancel = _sig("gs_async_cancel", c_int, p, u64)
# Several hosts (docs/hosts.md).
hosts_connect = _sig("gs_hosts_connect", c_int, POINTER(c_char_p), size_t, POINTER(ConnectOptions),
                     POINTER(p))
hosts_close = _sig("gs_hosts_close", None, p)
hosts_count = _sig("gs_hosts_count", size_t, p)
hosts_url = _sig("gs_hosts_url", c_char_p, p, size_t)
hosts_client = _sig("gs_hosts_client", p, p, size_t)
hosts_error = _sig("gs_hosts_error", c_char_p, p, size_t)
hosts_history = _sig("gs_hosts_history", c_int, p, POINTER(HistoryFilter),
                     POINTER(POINTER(PacketRecord)), POINTER(POINTER(u32)), POINTER(size_t))
hosts_history_free = _sig("gs_hosts_history_free", None, POINTER(PacketRecord), POINTER(u32),
                          size_t)
hosts_device_create = _sig("gs_hosts_device_create", c_int, p, c_char_p, POINTER(size_t),
                           POINTER(u32), POINTER(u64))
MAX_HOSTS = 64
