/*
 * The DMA-buffer builder. Commands are encoded by gs_isa_encode (the contract's one encoder)
 * with zero in every address field; each address gets a patch location instead, naming an
 * entry of the buffer's own allocation list, so the daemon can write the allocation's
 * current GPU address at every (re)submission.
 */
#include <stdlib.h>
#include <string.h>

#include "gpusched.h"
#include "isa.h"

/* An address operand of a command: which allocation, where in it, and which field. */
typedef struct ref {
	uint64_t allocation;
	uint64_t offset;
	uint32_t field; /* GS_ISA_DST_FIELD or GS_ISA_SRC_FIELD */
	bool write;
} ref;

_Static_assert(GS_DMABUF_SPIN_NONPREEMPTIBLE == GS_SPIN_NONPREEMPTIBLE,
               "spin flag differs from isa.h");

#define MAX_REFS         2
#define INITIAL_DATA_CAP 256
#define INITIAL_LIST_CAP 8

void gs_dmabuf_init(gs_dmabuf *buf)
{
	memset(buf, 0, sizeof(*buf));
}

void gs_dmabuf_free(gs_dmabuf *buf)
{
	free(buf->data);
	free(buf->allocs);
	free(buf->patches);
	free(buf->waits);
	gs_dmabuf_init(buf);
}

void gs_dmabuf_reset(gs_dmabuf *buf)
{
	buf->len = 0;
	buf->alloc_count = 0;
	buf->patch_count = 0;
	buf->wait_count = 0;
}

/* Sets *out to p grown to hold at least `need` elements of `elem` bytes (*cap is counted in
 * elements); *out is p itself when it already has room. */
static int grow(void *p, size_t *cap, size_t need, size_t elem, size_t initial, void **out)
{
	size_t ncap = *cap ? *cap : initial;
	void *n;

	*out = p;
	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / elem)
			return GS_ERR_NOMEM;
		ncap *= 2;
	}
	n = realloc(p, ncap * elem);
	if (!n)
		return GS_ERR_NOMEM;
	*out = n;
	*cap = ncap;
	return 0;
}

/* Makes room for one command of `size` bytes with `nrefs` address operands, so that the
 * append that follows cannot fail halfway and leave the lists out of step. */
static int reserve(gs_dmabuf *b, size_t size, size_t nrefs)
{
	void *n;
	int rv;

	/* Patch offsets and allocation indices travel as uint32. */
	if (b->len + size > UINT32_MAX || b->alloc_count + nrefs > UINT32_MAX ||
	    b->patch_count + nrefs > UINT32_MAX)
		return GS_ERR_INVALID;
	rv = grow(b->data, &b->cap, b->len + size, 1, INITIAL_DATA_CAP, &n);
	if (rv != 0)
		return rv;
	b->data = n;
	rv = grow(b->allocs, &b->alloc_cap, b->alloc_count + nrefs, sizeof(*b->allocs),
	          INITIAL_LIST_CAP, &n);
	if (rv != 0)
		return rv;
	b->allocs = n;
	rv = grow(b->patches, &b->patch_cap, b->patch_count + nrefs, sizeof(*b->patches),
	          INITIAL_LIST_CAP, &n);
	if (rv != 0)
		return rv;
	b->patches = n;
	return 0;
}

/* Index of `allocation` in the list, adding it if new. A packet lists each allocation once
 * (the daemon's residency and write checks are per allocation), so an allocation that is
 * read by one command and written by another ends up as one entry marked write. The lists
 * are bounded by the adapter's max_allocation_list (hundreds), so a linear scan is cheaper
 * than keeping an index. Room was reserved: this cannot fail. */
static uint32_t alloc_index(gs_dmabuf *b, uint64_t allocation, bool write)
{
	for (size_t i = 0; i < b->alloc_count; i++) {
		if (b->allocs[i].allocation == allocation) {
			b->allocs[i].write |= write;
			return (uint32_t)i;
		}
	}
	b->allocs[b->alloc_count] = (gs_dmabuf_alloc){.allocation = allocation, .write = write};
	return (uint32_t)b->alloc_count++;
}

static int emit(gs_dmabuf *b, const gs_isa_cmd *cmd, const ref *refs, size_t nrefs)
{
	size_t size = gs_isa_cmd_len(cmd);
	int rv;

	for (size_t i = 0; i < nrefs; i++)
		if (refs[i].allocation == 0)
			return GS_ERR_INVALID;
	rv = reserve(b, size, nrefs);
	if (rv != 0)
		return rv;
	/* Encoded past the end first: nothing is committed unless the encoder accepts it. */
	if (size == 0 || gs_isa_encode(cmd, b->data + b->len, b->cap - b->len) != size)
		return GS_ERR_INVALID;
	for (size_t i = 0; i < nrefs; i++) {
		gs_dmabuf_patch *p = &b->patches[b->patch_count];

		p->allocation_index = alloc_index(b, refs[i].allocation, refs[i].write);
		p->slot_id = (uint32_t)b->patch_count;
		p->patch_offset = (uint32_t)(b->len + refs[i].field);
		p->allocation_offset = refs[i].offset;
		b->patch_count++;
	}
	b->len += size;
	return 0;
}

int gs_dmabuf_nop(gs_dmabuf *buf)
{
	gs_isa_cmd cmd = {.op = GS_OP_NOP};

	return emit(buf, &cmd, NULL, 0);
}

int gs_dmabuf_fill(gs_dmabuf *buf, uint64_t allocation, uint64_t offset, uint64_t size,
                   uint32_t pattern)
{
	gs_isa_cmd cmd = {.op = GS_OP_FILL, .size = size, .pattern = pattern};
	ref refs[] = {{allocation, offset, GS_ISA_DST_FIELD, true}};

	return emit(buf, &cmd, refs, 1);
}

/* COPY and CHECKSUM share their layout: dst written, src read. */
static int emit_dst_src(gs_dmabuf *buf, uint8_t op, uint64_t dst_allocation, uint64_t dst_offset,
                        uint64_t src_allocation, uint64_t src_offset, uint64_t size)
{
	gs_isa_cmd cmd = {.op = op, .size = size};
	ref refs[MAX_REFS] = {
	        {dst_allocation, dst_offset, GS_ISA_DST_FIELD, true},
	        {src_allocation, src_offset, GS_ISA_SRC_FIELD, false},
	};

	return emit(buf, &cmd, refs, MAX_REFS);
}

int gs_dmabuf_copy(gs_dmabuf *buf, uint64_t dst_allocation, uint64_t dst_offset,
                   uint64_t src_allocation, uint64_t src_offset, uint64_t size)
{
	return emit_dst_src(buf, GS_OP_COPY, dst_allocation, dst_offset, src_allocation, src_offset,
	                    size);
}

int gs_dmabuf_checksum(gs_dmabuf *buf, uint64_t dst_allocation, uint64_t dst_offset,
                       uint64_t src_allocation, uint64_t src_offset, uint64_t size)
{
	return emit_dst_src(buf, GS_OP_CHECKSUM, dst_allocation, dst_offset, src_allocation,
	                    src_offset, size);
}

int gs_dmabuf_spin(gs_dmabuf *buf, uint64_t micros, uint8_t flags)
{
	gs_isa_cmd cmd = {.op = GS_OP_SPIN, .flags = flags, .micros = micros};

	/* The encoder writes whatever flags it is given; the daemon would reject the buffer. */
	if (flags & ~GS_SPIN_NONPREEMPTIBLE)
		return GS_ERR_INVALID;
	return emit(buf, &cmd, NULL, 0);
}

int gs_dmabuf_wait(gs_dmabuf *buf, uint64_t sync, uint64_t value)
{
	if (sync == 0)
		return GS_ERR_INVALID;
	void *n;
	int rv = grow(buf->waits, &buf->wait_cap, buf->wait_count + 1, sizeof(*buf->waits), 4, &n);
	if (rv != 0)
		return rv;
	buf->waits = n;
	buf->waits[buf->wait_count++] = (gs_dmabuf_wait_entry){sync, value};
	return 0;
}

int gs_dmabuf_signal(gs_dmabuf *buf, uint64_t sync, uint64_t value)
{
	gs_isa_cmd cmd = {.op = GS_OP_SIGNAL, .sync = sync, .value = value};

	return emit(buf, &cmd, NULL, 0);
}

int gs_dmabuf_dispatch(gs_dmabuf *buf, uint64_t kernel, const uint32_t groups[3],
                       const gs_dmabuf_binding *bindings, size_t nbindings, const void *push,
                       size_t push_size)
{
	if (kernel == 0 || nbindings > GS_ISA_DISPATCH_MAX_BIND ||
	    push_size > GS_ISA_DISPATCH_MAX_PUSH || push_size % 4 != 0 || (push_size && !push) ||
	    (nbindings && !bindings))
		return GS_ERR_INVALID;
	for (size_t i = 0; i < nbindings; i++)
		if (bindings[i].allocation == 0 || bindings[i].range == 0)
			return GS_ERR_INVALID;
	/* Room for the command and for every binding's allocation-list entry first, so that the
	 * entries are added only when the command is. */
	int rv = reserve(buf, GS_ISA_DISPATCH_MAX_SIZE, nbindings);
	if (rv != 0)
		return rv;
	size_t count = buf->alloc_count;
	gs_isa_binding b[GS_ISA_DISPATCH_MAX_BIND];
	for (size_t i = 0; i < nbindings; i++)
		b[i] = (gs_isa_binding){
		        .binding = bindings[i].binding,
		        .alloc_index = alloc_index(buf, bindings[i].allocation, bindings[i].write),
		        .offset = bindings[i].offset,
		        .range = bindings[i].range};
	uint8_t args[GS_ISA_DISPATCH_MAX_SIZE];
	gs_isa_cmd cmd = {.op = GS_OP_DISPATCH,
	                  .kernel = kernel,
	                  .groups = {groups[0], groups[1], groups[2]},
	                  .nbindings = (uint8_t)nbindings,
	                  .push_size = (uint8_t)push_size,
	                  .args = args};
	size_t size = gs_isa_cmd_len(&cmd);
	if (!gs_isa_dispatch_args(b, (uint8_t)nbindings, push, (uint8_t)push_size, args,
	                          sizeof(args)) ||
	    gs_isa_encode(&cmd, buf->data + buf->len, buf->cap - buf->len) != size) {
		buf->alloc_count = count;
		return GS_ERR_INVALID;
	}
	buf->len += size;
	return 0;
}
