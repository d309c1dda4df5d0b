/*
 * What every backend shares above the thread: the backend registry and the memory half of
 * the ISA (address translation and bounds checks against the packet's allocation list).
 */
#include "engine/engine.h"
#include "engine/swizzle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

const gsd_engine_ops *gsd_engine_find(const char *name)
{
	static const gsd_engine_ops *const backends[] = {&gsd_engine_emu, &gsd_engine_null,
	                                                 &gsd_engine_vulkan};

	if (!name)
		return NULL;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

/* ---- the adapter level: host defaults ---- */

int gsd_host_segment_create(uint32_t id, uint64_t size, gsd_mem_segment *seg, char *err, size_t cap)
{
	memset(seg, 0, sizeof(*seg));
	/* Reserve the whole segment now; pages are only backed once touched, and read as zero. */
	void *m = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		snprintf(err, cap, "cannot reserve %" PRIu64 " bytes: %s", size, strerror(errno));
		return -1;
	}
	*seg = (gsd_mem_segment){.id = id, .base = m, .size = size, .reclaimable = true};
	return 0;
}

void gsd_host_segment_destroy(gsd_mem_segment *seg)
{
	if (seg->base)
		munmap(seg->base, seg->size ? seg->size : 1);
	memset(seg, 0, sizeof(*seg));
}

int gsd_backend_open(const gsd_engine_ops *ops, const gsd_backend_config *cfg, gsd_backend **out,
                     char *err, size_t cap)
{
	*out = NULL;
	return ops->open ? ops->open(cfg, out, err, cap) : 0;
}

void gsd_backend_close(const gsd_engine_ops *ops, gsd_backend *b)
{
	if (ops->close && b)
		ops->close(b);
}

void gsd_backend_describe(const gsd_engine_ops *ops, const gsd_backend *b, gsd_backend_info *out)
{
	memset(out, 0, sizeof(*out));
	if (ops->describe && b) {
		ops->describe(b, out);
		return;
	}
	snprintf(out->device, sizeof(out->device), "emulated");
}

int gsd_backend_segment_create(const gsd_engine_ops *ops, gsd_backend *b, uint32_t id,
                               gsd_mem_kind kind, uint64_t size, gsd_mem_segment *seg, char *err,
                               size_t cap)
{
	if (ops->segment_create)
		return ops->segment_create(b, id, kind, size, seg, err, cap);
	return gsd_host_segment_create(id, size, seg, err, cap);
}

void gsd_backend_segment_destroy(const gsd_engine_ops *ops, gsd_backend *b, gsd_mem_segment *seg)
{
	if (!seg->base && !seg->priv)
		return;
	if (ops->segment_destroy)
		ops->segment_destroy(b, seg);
	else
		gsd_host_segment_destroy(seg);
}

int gsd_backend_segment_read(const gsd_engine_ops *ops, gsd_backend *b, const gsd_mem_segment *seg,
                             uint64_t off, void *out, uint64_t len, char *err, size_t cap)
{
	if (!len)
		return 0;
	if (seg->base) {
		memcpy(out, seg->base + off, len);
		return 0;
	}
	if (!ops->segment_copy) {
		snprintf(err, cap, "segment %u has no memory", seg->id);
		return -1;
	}
	return ops->segment_copy(b, seg, off, out, len, false, err, cap);
}

int gsd_backend_segment_write(const gsd_engine_ops *ops, gsd_backend *b, const gsd_mem_segment *seg,
                              uint64_t off, const void *in, uint64_t len, char *err, size_t cap)
{
	if (!len)
		return 0;
	if (seg->base) {
		memcpy(seg->base + off, in, len);
		return 0;
	}
	if (!ops->segment_copy) {
		snprintf(err, cap, "segment %u has no memory", seg->id);
		return -1;
	}
	return ops->segment_copy(b, seg, off, (void *)in, len, true, err, cap);
}

int gsd_backend_segment_clear(const gsd_engine_ops *ops, gsd_backend *b, const gsd_mem_segment *seg,
                              uint64_t off, uint64_t len, char *err, size_t cap)
{
	if (!len)
		return 0;
	if (!seg->base) {
		if (!ops->segment_clear) {
			snprintf(err, cap, "segment %u has no memory", seg->id);
			return -1;
		}
		return ops->segment_clear(b, seg, off, len, err, cap);
	}
	const uint64_t page = 4096;
	uint64_t start = (off + page - 1) & ~(page - 1);
	uint64_t end = (off + len) & ~(page - 1);
	if (seg->reclaimable && end > start + 16 * page) {
		/* Large ranges: hand whole pages back to the kernel (they read as zero again) and
		 * clear only the partial pages at the edges. */
		memset(seg->base + off, 0, start - off);
		madvise(seg->base + start, end - start, MADV_DONTNEED);
		memset(seg->base + end, 0, off + len - end);
	} else {
		memset(seg->base + off, 0, len);
	}
	return 0;
}

/* ---- the memory half of the ISA ---- */

/* Does [addr, addr + size) lie inside range r? Written with subtractions only, so no sum can
 * wrap whatever the 64-bit inputs are. */
static bool range_contains(const gsd_range *r, uint64_t addr, uint64_t size)
{
	if (addr < r->addr)
		return false;
	uint64_t off = addr - r->addr;
	return off <= r->size && size <= r->size - off;
}

/*
 * The allocation list decides what the packet may touch; the segment table is checked too so
 * that even a malformed list can never lead outside the adapter's memory.
 */
const gsd_mem_segment *gsd_engine_check(const gsd_memory *mem, const gsd_exec *x, uint64_t addr,
                                        uint64_t size, bool write, uint64_t *offset, char *detail,
                                        size_t cap)
{
	const char *what = write ? "write" : "read";
	bool read_only_hit = false;
	bool allowed = false;

	for (size_t i = 0; i < x->nranges && !allowed; i++) {
		if (!range_contains(&x->ranges[i], addr, size))
			continue;
		if (!write || x->ranges[i].write)
			allowed = true;
		else
			read_only_hit = true;
	}
	/* Fault texts reach the tenant (history, explain): they name no GPU address, which would
	 * tell where its allocations were placed. */
	if (!allowed) {
		snprintf(detail, cap, "page fault: %s of %" PRIu64 " bytes %s", what, size,
		         read_only_hit ? "to a read-only allocation of the list"
		                       : "outside allocation list");
		return NULL;
	}

	uint32_t id = gs_addr_segment(addr);
	uint64_t off = gs_addr_offset(addr);
	const gsd_mem_segment *seg = mem && id < GSD_MAX_SEGMENTS ? &mem->seg[id] : NULL;
	if (!seg || seg->id != id || id == 0 || (!seg->base && !seg->priv) || off > seg->size ||
	    size > seg->size - off) {
		snprintf(detail, cap, "page fault: %s of %" PRIu64 " bytes outside segment %u",
		         what, size, id);
		return NULL;
	}
	*offset = off;
	return seg;
}

static int cmd_access(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                      gsd_cmd_access *a, char *detail, size_t cap)
{
	memset(a, 0, sizeof(*a));
	/* Empty accesses touch nothing and are not checked. CHECKSUM always writes 8 bytes. */
	bool empty = cmd->size == 0 && cmd->op != GS_OP_CHECKSUM;
	switch ((gs_isa_op)cmd->op) {
	case GS_OP_NOP:
	case GS_OP_SPIN:
	case GS_OP_SIGNAL:
		return 0;
	case GS_OP_FILL:
		if (empty)
			return 0;
		a->dst_len = cmd->size;
		a->dst = gsd_engine_check(mem, x, cmd->dst, cmd->size, true, &a->dst_off, detail,
		                          cap);
		return a->dst ? 0 : -1;
	case GS_OP_CHECKSUM:
		if (cmd->size) {
			a->src_len = cmd->size;
			a->src = gsd_engine_check(mem, x, cmd->src, cmd->size, false, &a->src_off,
			                          detail, cap);
			if (!a->src)
				return -1;
		}
		a->dst_len = 8;
		a->dst = gsd_engine_check(mem, x, cmd->dst, 8, true, &a->dst_off, detail, cap);
		return a->dst ? 0 : -1;
	case GS_OP_COPY:
	case GS_OP_TRANSFER:
		if (empty)
			return 0;
		a->src_len = a->dst_len = cmd->size;
		a->src = gsd_engine_check(mem, x, cmd->src, cmd->size, false, &a->src_off, detail,
		                          cap);
		if (!a->src)
			return -1;
		a->dst = gsd_engine_check(mem, x, cmd->dst, cmd->size, true, &a->dst_off, detail,
		                          cap);
		if (!a->dst)
			return -1;
		if (cmd->op == GS_OP_COPY ||
		    !(cmd->transfer_flags & (GS_ISA_TRANSFER_SWIZZLE | GS_ISA_TRANSFER_UNSWIZZLE)))
			return 0;
		/* A paging transfer: the daemon built it, but it is checked like any command. A
		 * converting one cannot run in place; a plain one may (compaction slides
		 * allocations within a segment): memmove semantics. */
		if (gsd_cmd_access_overlaps(a)) {
			snprintf(detail, cap,
			         "TRANSFER source and destination overlap while converting");
			return -1;
		}
		if (!gsd_swizzle_pitch_valid(cmd->pitch)) {
			snprintf(detail, cap, "TRANSFER pitch %u is not a multiple of 64",
			         cmd->pitch);
			return -1;
		}
		return 0;
	case GS_OP_DISPATCH:
		/* Backends with kernels resolve a DISPATCH with gsd_engine_dispatch_access; the
		 * daemon never sends one to any other (Submit refuses it there). */
		snprintf(detail, cap, "DISPATCH runs only on an adapter with the vulkan backend");
		return -1;
	case GS_OP_COUNT_:
		break;
	}
	snprintf(detail, cap, "bad opcode %u", cmd->op);
	return -1;
}

const gsd_exec_kernel *gsd_exec_find_kernel(const gsd_exec *x, uint64_t handle)
{
	for (size_t i = 0; i < x->nkernels; i++)
		if (x->kernels[i].handle == handle)
			return &x->kernels[i];
	return NULL;
}

int gsd_engine_dispatch_access(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                               const gsd_exec_kernel **kernel, gsd_dispatch_binding *out,
                               char *detail, size_t cap)
{
	const gsd_exec_kernel *k = gsd_exec_find_kernel(x, cmd->kernel);
	if (!k) {
		snprintf(detail, cap, "DISPATCH names kernel %" PRIu64 ", not one of the packet's",
		         cmd->kernel);
		return -1;
	}
	if (cmd->nbindings != k->info->nbindings || cmd->push_size != k->info->push_bytes) {
		snprintf(detail, cap, "DISPATCH does not match its kernel's bindings");
		return -1;
	}
	for (unsigned i = 0; i < cmd->nbindings; i++) {
		gs_isa_binding b;
		gs_isa_dispatch_binding(cmd, i, &b);
		const gsd_kernel_binding *kb = gsd_kernel_binding_of(k->info, b.binding);
		if (!kb || b.alloc_index >= x->nranges || b.range == 0) {
			snprintf(detail, cap, "DISPATCH binding %u is not the kernel's", b.binding);
			return -1;
		}
		/* The range is counted from its allocation-list entry, not searched for among
		 * them: a kernel sees exactly the bytes its binding names. */
		const gsd_range *r = &x->ranges[b.alloc_index];
		if (b.offset > r->size || b.range > r->size - b.offset) {
			snprintf(detail, cap,
			         "page fault: binding %u: offset %" PRIu64 " +%" PRIu64
			         " outside allocation-list entry %u (%" PRIu64 " bytes)",
			         b.binding, b.offset, b.range, b.alloc_index, r->size);
			return -1;
		}
		if (kb->writes && !r->write) {
			snprintf(detail, cap,
			         "page fault: binding %u is written by the kernel, and "
			         "allocation-list entry %u is read-only",
			         b.binding, b.alloc_index);
			return -1;
		}
		gsd_dispatch_binding *o = &out[i];
		o->binding = b.binding;
		o->write = kb->writes;
		o->uniform = kb->kind == GSD_BINDING_UNIFORM;
		o->range = b.range;
		o->seg = gsd_engine_check(mem, x, r->addr + b.offset, b.range, kb->writes, &o->off,
		                          detail, cap);
		if (!o->seg)
			return -1;
	}
	*kernel = k;
	return 0;
}

int gsd_engine_cmd_access(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                          gsd_cmd_access *a, char *detail, size_t cap)
{
	if (cmd_access(mem, x, cmd, a, detail, cap) != 0)
		return -1;
	return a->dst != NULL;
}

int gsd_engine_exec_cmd(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                        char *detail, size_t detail_cap)
{
	gsd_cmd_access a;
	/* Nothing written: nothing to do (and no NULL reaches memmove, undefined even for 0). */
	int rc = gsd_engine_cmd_access(mem, x, cmd, &a, detail, detail_cap);
	if (rc <= 0)
		return rc;
	uint8_t *dst = a.dst->base + a.dst_off;
	const uint8_t *src = a.src ? a.src->base + a.src_off : NULL;
	switch ((gs_isa_op)cmd->op) {
	case GS_OP_FILL:
		gs_isa_fill(dst, cmd->size, cmd->pattern);
		return 0;
	case GS_OP_CHECKSUM:
		gs_le64_put(dst, gs_isa_checksum(src, cmd->size));
		return 0;
	case GS_OP_TRANSFER:
		if (cmd->transfer_flags & GS_ISA_TRANSFER_SWIZZLE)
			return gsd_swizzle(dst, src, cmd->size, cmd->pitch) == 0 ? 0 : -1;
		if (cmd->transfer_flags & GS_ISA_TRANSFER_UNSWIZZLE)
			return gsd_unswizzle(dst, src, cmd->size, cmd->pitch) == 0 ? 0 : -1;
		memmove(dst, src, cmd->size);
		return 0;
	case GS_OP_COPY:
		memmove(dst, src, cmd->size);
		return 0;
	default:
		return 0;
	}
}
