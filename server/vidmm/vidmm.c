/*
 * The memory manager (VidMm) of the daemon: where allocations live, and the paging that moves
 * them.
 *
 * Every allocation always has a location: a range of one of the adapter's segments, or of
 * system memory (an internal segment, id GSD_SYSMEM_ID, that no allocation supports: living
 * there means "not resident"). Creation places an allocation by its segment preference where
 * there is room, and in system memory when there is none, so video memory can be
 * over-committed.
 *
 * Before a render packet runs, gsd_vidmm_prepare pins every allocation of its list (a pinned
 * allocation is never chosen to make room) and makes the missing ones resident: the first
 * segment of the placement order (gsd_place_order) with room takes it; an allocation of
 * priority HIGH or more evicts lower-priority allocations from a preferred segment rather than
 * falling back; a segment with enough free bytes in pieces is compacted (unpinned
 * allocations slide down within it); as the last resort unpinned allocations are evicted,
 * least valuable first (gsd_pick_victims_contiguous), to an aperture segment with room or to
 * system memory. A plan is a transaction: all of it is queued, or none (plan_rollback).
 *
 * A new allocation placed while paging is pending is zero-filled by a paging packet after it
 * (its range may be the old place of an allocation still to be copied out); render packets and
 * CPU accesses of an allocation wait for its latest move (move_seq, inflight).
 *
 * Moves are planned here, on the loop thread, and the heap bookkeeping changes at once; the
 * bytes are moved by paging packets (submit flag Paging): DMA buffers of TRANSFER commands
 * that run in the system context of a node (its own band, above every client's), split into
 * sub-transfers of paging_chunk bytes with TransferStart / TransferEnd. Because the
 * bookkeeping runs ahead of the bytes, paging packets of an adapter run strictly one after
 * another in the order they were planned (each waits for adapter->paging_done to reach its
 * predecessor), so every transfer reads what the previous ones left. A render packet that
 * needed paging waits for the last of its paging packets the same way, then runs patched with
 * the allocations' new addresses.
 *
 * Tiled allocations (GS_ALLOC_TILED) are stored swizzled (swizzle.h) in memory segments and
 * linear everywhere else: a transfer between the two converts (Swizzle / Unswizzle), and the
 * CPU view (AllocationRead/Write) is always linear.
 *
 * Before an allocation of a device is moved while a context of that device runs on an
 * engine, a zero-length ContextSwitch packet goes to that engine first (with Paging too when
 * the engine runs a paging packet of the device), as WDDM does.
 */
#include "vidmm/vidmm.h"

#include "core/log.h"
#include "core/util.h"
#include "vidmm/paging_plan.h"
#include "engine/swizzle.h"

#include "isa.h"
#include "wddm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MK(x)          GPUSCHED__V1__MOVE_KIND__MOVE_KIND_##x
#define TRANSFER_BYTES 40u /* one TRANSFER command */

static bool is_sysmem(const gsd_segment *s)
{
	return s->id == GSD_SYSMEM_ID;
}

uint32_t gsd_vidmm_segment_id(const gsd_allocation *al)
{
	return is_sysmem(al->segment) ? 0 : al->segment->id;
}

bool gsd_vidmm_resident(const gsd_allocation *al)
{
	return !is_sysmem(al->segment) && (al->supported_segment_set & (1u << al->segment->id));
}

gsd_segment *gsd_vidmm_segment_by_id(gsd_adapter *a, uint32_t wire_id)
{
	if (wire_id == 0)
		return &a->sysmem;
	for (uint32_t i = 0; i < a->nsegments; i++)
		if (a->segments[i].id == wire_id)
			return &a->segments[i];
	return NULL;
}

/* Is the allocation's layout in this segment the tiled one? */
static bool tiled_in(const gsd_segment *s, const gsd_allocation *al)
{
	return (al->flags & GS_ALLOC_TILED) && !is_sysmem(s) &&
	       s->kind == GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY;
}

/* The conversion a move of al from src to dst makes: Swizzle, Unswizzle or none (0). */
static uint32_t conversion(const gsd_allocation *al, const gsd_segment *src, const gsd_segment *dst)
{
	bool from = tiled_in(src, al), to = tiled_in(dst, al);
	return from == to ? 0u : to ? GS_TRANSFER_SWIZZLE : GS_TRANSFER_UNSWIZZLE;
}

static uint64_t rounded(uint64_t size)
{
	return (size + GSD_HEAP_ALIGN - 1) / GSD_HEAP_ALIGN * GSD_HEAP_ALIGN;
}

uint64_t gsd_vidmm_tenant_used(const gsd_adapter *a, const gsd_segment *s, const gsd_tenant *t)
{
	uint64_t used = 0;
	const gsd_list *h = &a->residents[s->id];
	for (const gsd_list *it = h->next; it != h; it = it->next) {
		const gsd_allocation *al = GSD_CONTAINER_OF(it, gsd_allocation, res_link);
		if (al->obj.tenant == t)
			used += rounded(al->size);
	}
	return used;
}

/* ---- CPU view ---- */

/* Copies n bytes at linear offset off between buf and a tiled image of size bytes. */
static void tiled_copy(uint8_t *img, uint64_t size, uint32_t pitch, uint64_t off, uint8_t *buf,
                       uint64_t n, bool to_cpu)
{
	const uint64_t band = gsd_swizzle_band(pitch);
	const uint64_t tail = size - size % band; /* from here on the layout is linear */
	uint64_t l = off;
	const uint64_t end = off + n;
	while (l < end) {
		uint64_t t = gsd_swizzle_offset(l, size, pitch);
		/* A tile row is 64 contiguous bytes on both sides (pitch is a multiple of 64). */
		uint64_t run = l >= tail ? end - l : GSD_TILE_WIDTH - l % GSD_TILE_WIDTH;
		if (run > end - l)
			run = end - l;
		if (to_cpu)
			memcpy(buf + (l - off), img + t, run);
		else
			memcpy(img + t, buf + (l - off), run);
		l += run;
	}
}

/* The backend's CPU access to bytes of segment s (see gsd_backend_segment_read). */
static int seg_read(const gsd_adapter *a, const gsd_segment *s, uint64_t off, void *out, uint64_t n,
                    char *err, size_t cap)
{
	return gsd_backend_segment_read(a->ops, a->backend, s->backing, off, out, n, err, cap);
}

static int seg_write(const gsd_adapter *a, const gsd_segment *s, uint64_t off, const void *in,
                     uint64_t n, char *err, size_t cap)
{
	return gsd_backend_segment_write(a->ops, a->backend, s->backing, off, in, n, err, cap);
}

/* A tiled image is converted on the CPU: through the mapping where the segment has one, else
 * through a copy of the whole image (read, converted, and for a write, written back). */
static int cpu_tiled(const gsd_allocation *al, uint64_t offset, uint8_t *buf, uint64_t n,
                     bool to_cpu, char *err, size_t cap)
{
	const gsd_segment *s = al->segment;
	if (s->backing->base) {
		tiled_copy(s->backing->base + al->offset, al->size, al->pitch, offset, buf, n,
		           to_cpu);
		return 0;
	}
	uint8_t *img = malloc(al->size ? al->size : 1);
	if (!img) {
		snprintf(err, cap, "out of memory for a tiled image of %llu bytes",
		         (unsigned long long)al->size);
		return -1;
	}
	int rc = seg_read(al->adapter, s, al->offset, img, al->size, err, cap);
	if (rc == 0) {
		tiled_copy(img, al->size, al->pitch, offset, buf, n, to_cpu);
		if (!to_cpu)
			rc = seg_write(al->adapter, s, al->offset, img, al->size, err, cap);
	}
	free(img);
	return rc;
}

int gsd_vidmm_cpu_read(const gsd_allocation *al, uint64_t offset, uint8_t *out, uint64_t n,
                       char *err, size_t cap)
{
	if (!n)
		return 0;
	if (tiled_in(al->segment, al))
		return cpu_tiled(al, offset, out, n, true, err, cap);
	return seg_read(al->adapter, al->segment, al->offset + offset, out, n, err, cap);
}

int gsd_vidmm_cpu_write(gsd_allocation *al, uint64_t offset, const uint8_t *in, uint64_t n,
                        char *err, size_t cap)
{
	if (!n)
		return 0;
	if (tiled_in(al->segment, al))
		return cpu_tiled(al, offset, (uint8_t *)in, n, false, err, cap);
	return seg_write(al->adapter, al->segment, al->offset + offset, in, n, err, cap);
}

int gsd_vidmm_cpu_blit(const gsd_allocation *src, gsd_allocation *dst, uint64_t n, char *err,
                       size_t cap)
{
	const uint8_t *from = src->segment->backing->base;
	uint8_t *to = (uint8_t *)dst->segment->backing->base;
	if (!n)
		return 0;
	if (from && to) {
		memmove(to + dst->offset, from + src->offset, n);
		return 0;
	}
	uint8_t *tmp = malloc(n);
	if (!tmp) {
		snprintf(err, cap, "out of memory for %llu bytes", (unsigned long long)n);
		return -1;
	}
	int rc = seg_read(src->adapter, src->segment, src->offset, tmp, n, err, cap);
	if (rc == 0)
		rc = seg_write(dst->adapter, dst->segment, dst->offset, tmp, n, err, cap);
	free(tmp);
	return rc;
}

const uint8_t *gsd_vidmm_cpu_view(const gsd_allocation *al)
{
	const uint8_t *base = al->segment->backing->base;
	return base && !tiled_in(al->segment, al) ? base + al->offset : NULL;
}

static void room_changed(gsd_daemon *d, gsd_adapter *a);

/* ---- bookkeeping ---- */

static void set_location(gsd_adapter *a, gsd_allocation *al, gsd_segment *s, uint64_t offset)
{
	gsd_list_remove(&al->res_link);
	al->segment = s;
	al->offset = offset;
	gsd_list_push_back(&a->residents[s->id], &al->res_link);
}

static void audit_move(gsd_daemon *d, const gsd_allocation *al, int kind, const gsd_segment *from,
                       uint64_t from_off, uint64_t packet, uint64_t for_packet, uint32_t flags,
                       uint32_t pieces, const char *reason)
{
	gsd_move_rec r = {.allocation = al->obj.handle,
	                  .tenant = al->obj.identity,
	                  .device = al->dev->obj.handle,
	                  .adapter = al->adapter->id,
	                  .packet = packet,
	                  .for_packet = for_packet,
	                  .kind = kind,
	                  .from_segment = from && !is_sysmem(from) ? from->id : 0,
	                  .from_offset = from ? from_off : 0,
	                  .to_segment = gsd_vidmm_segment_id(al),
	                  .to_offset = al->offset,
	                  .bytes = kind == MK(PLACE) || kind == MK(RESIDENT) ? 0 : al->size,
	                  .transfer_flags = flags,
	                  .pieces = pieces,
	                  .reason = reason};
	gsd_audit_move(d->audit, &r);
}

/* The hook of an allocation's last reference: its range goes back to its segment. */
static void release_memory(gsd_daemon *d, gsd_allocation *al)
{
	if (!al->segment)
		return;
	/* The device may be gone already (packets held the last references): only the
	 * allocation's own fields are used here. */
	gsd_move_rec r = {.allocation = al->obj.handle,
	                  .tenant = al->obj.identity,
	                  .kind = MK(FREE),
	                  .from_segment = is_sysmem(al->segment) ? 0 : al->segment->id,
	                  .from_offset = al->offset,
	                  .bytes = al->size,
	                  .reason = "destroyed"};
	gsd_audit_move(d->audit, &r);
	gsd_heap_free(&al->segment->heap, al->offset, al->size);
	gsd_list_remove(&al->res_link);
	al->segment = NULL;
	room_changed(d, al->adapter);
}

/* ---- pins ---- */

static void pin(gsd_adapter *a, gsd_allocation *al, uint64_t use)
{
	if (al->pins++ == 0)
		a->pinned_allocs++;
	al->last_use = use;
	al->last_use_ns = gsd_now_ns();
}

/* Releases one pin. The last one wakes whoever waits for the allocation to be free (an
 * Evict or Transfer request). */
static void unpin(gsd_adapter *a, gsd_allocation *al)
{
	if (--al->pins > 0)
		return;
	a->pinned_allocs--;
	gsd_waitq_wake(&al->pin_waiters, al);
}

/* Room may have appeared: packets that found none try again. */
static void room_changed(gsd_daemon *d, gsd_adapter *a)
{
	/* Bumped even with no one waiting: a packet planning now compares with the value it
	 * saw before it planned. */
	a->room->value++;
	if (!gsd_waitq_empty(&a->room->waiters))
		gsd_sync_changed(d, a->room);
}

static void unpin_packet(gsd_packet *p)
{
	p->pinned = false;
	for (uint32_t i = 0; i < p->nallocs; i++)
		unpin(p->node->adapter, p->allocs[i].alloc);
}

void gsd_vidmm_unpin(gsd_daemon *d, gsd_packet *p)
{
	if (!p->pinned)
		return;
	unpin_packet(p);
	room_changed(d, p->node->adapter);
}

/* ---- paging packets ---- */

/* A paging packet moving (or filling) nallocs allocation(s) through nranges ranges. */
static gsd_packet *paging_packet_new(uint32_t nallocs, uint32_t nranges, size_t dma_len)
{
	gsd_packet_shape shape = {.nallocs = nallocs, .nranges = nranges, .dma_len = dma_len};
	return gsd_packet_new(&shape);
}

/* Hands the paging packets an operation built to the scheduler, in order (the hook). */
static void submit_paging(gsd_daemon *d, gsd_list *out)
{
	if (!gsd_list_empty(out))
		d->hooks.paging_submit(d, out);
}

/*
 * Fills in a paging packet of device dev (owner of what it moves) on node n and appends it to
 * `out`, the operation's packets (queued together once it is planned, by submit_paging): it
 * takes the next paging seq of the adapter and the next paging fence of the device.
 */
static void paging_queue(gsd_daemon *d, gsd_node *n, gsd_device *dev, gsd_packet *p, uint32_t flags,
                         const char *detail, gsd_list *out)
{
	gsd_adapter *a = n->adapter;
	gsd_context *x = a->paging_ctx[n->index];
	p->ctx = x;
	p->tenant = dev->obj.tenant;
	p->node = n;
	p->paging_seq = ++a->paging_seq;
	p->paging_wait = p->paging_seq - 1;
	p->paging_sync = dev->paging_sync ? dev->paging_sync->obj.handle : 0;
	p->paging_fence = ++dev->paging_fence;
	p->rec = (gsd_packet_rec){.packet = ++d->next_packet,
	                          .tenant = dev->obj.identity,
	                          .device = dev->obj.handle,
	                          .context = x->obj.handle,
	                          .adapter = a->id,
	                          .node = n->index,
	                          .fence = p->paging_fence, /* the device's paging fence */
	                          .submit_flags = flags,
	                          .dma_size = (uint32_t)p->dma_len,
	                          .allocation_count = p->nallocs,
	                          .state = GSD_PS(SUBMITTED),
	                          .submitted_ns = gsd_node_now(n)};
	p->rec.event_ns = p->rec.submitted_ns;
	p->node_fence = ++n->next_fence;
	x->refs++;
	gsd_hmap_put(&d->packets, p->rec.packet, p);
	a->paging_packets++;
	d->stats.packets_submitted++;
	p->tenant->stats.paging_packets++;
	p->tenant->stats.packets_submitted++;
	/* Its allocation list in the audit: the allocation it moves, written. */
	uint64_t h = p->nallocs ? p->allocs[0].alloc->obj.handle : 0;
	bool w = true;
	p->audit_seq = gsd_audit_submitted(d->audit, &p->rec, detail, &h, &w, p->nallocs ? 1 : 0,
	                                   NULL, NULL);
	gsd_packet_publish(d, p, detail);
	gsd_list_push_back(out, &p->link);
}

/*
 * Zero-fills a new allocation with a paging packet (a FILL command) instead of at once: while
 * earlier paging packets are pending, the range just given to it may be one they still have to
 * read (the old place of an allocation they move), so it must not be touched before them.
 * Its packets and CPU accesses wait for this one like for a move. Returns the packet id, or 0
 * when memory is short.
 */
static uint64_t zero_by_paging(gsd_daemon *d, gsd_allocation *al, gsd_list *out)
{
	gsd_adapter *a = al->adapter;
	gsd_packet *p = paging_packet_new(1, 1, 32);
	if (!p)
		return 0;
	uint64_t addr = gs_addr_make(al->segment->id, al->offset);
	gs_isa_cmd cmd = {.op = GS_OP_FILL, .dst = addr, .size = al->size, .pattern = 0};
	gs_isa_encode(&cmd, p->dma, 32);
	p->allocs[0] = (gsd_packet_alloc){al, true};
	p->ranges[0] = (gsd_range){addr, al->size, true};
	gsd_allocation_busy(al);
	al->moving++;
	char detail[128];
	snprintf(detail, sizeof(detail),
	         "zero-fill new allocation %llu (%llu bytes) after the paging before it",
	         (unsigned long long)al->obj.handle, (unsigned long long)al->size);
	paging_queue(d, &a->nodes[a->paging_node], al->dev, p, GS_SUBMIT_PAGING, detail, out);
	al->move_seq = p->paging_seq;
	return p->rec.packet;
}

/* The hook of allocation creation: places a new allocation by its preference where there is
 * room, else in system memory. Never evicts. False when even system memory is full. */
static bool place_new(gsd_daemon *d, gsd_allocation *al)
{
	gsd_adapter *a = al->adapter;
	al->pitch = GSD_SWIZZLE_PITCH_DEFAULT;
	uint64_t off = 0;
	int si = gsd_place(a->segments, a->nsegments, al->supported_segment_set,
	                   al->segment_preference, al->size, &off);
	gsd_segment *s = si >= 0 ? &a->segments[si] : &a->sysmem;
	if (si < 0 && gsd_heap_alloc(&a->sysmem.heap, al->size, false, &off) != 0)
		return false;
	set_location(a, al, s, off);
	/* New memory reads as zero: never another tenant's old bytes. */
	bool pending = a->paging_done->value < a->paging_seq;
	gsd_list out;
	gsd_list_init(&out);
	uint64_t filler = pending ? zero_by_paging(d, al, &out) : 0;
	if (pending && !filler) {
		gsd_heap_free(&s->heap, off, al->size);
		gsd_list_remove(&al->res_link);
		al->segment = NULL;
		return false;
	}
	char err[160];
	if (!pending && gsd_backend_segment_clear(a->ops, a->backend, s->backing, off, al->size,
	                                          err, sizeof(err)) != 0) {
		GSD_ERROR("adapter %s: clearing %llu bytes of segment %s: %s", a->cfg->name,
		          (unsigned long long)al->size, s->name, err);
		gsd_heap_free(&s->heap, off, al->size);
		gsd_list_remove(&al->res_link);
		al->segment = NULL;
		return false;
	}
	audit_move(d, al, MK(PLACE), NULL, 0, filler, 0, 0, 0,
	           si >= 0 ? "created" : "created in system memory: no segment has room");
	submit_paging(d, &out);
	return true;
}

/* Sends ContextSwitch packets to engines running a context of the allocation's device. */
static void context_switch_for(gsd_daemon *d, gsd_adapter *a, const gsd_allocation *al,
                               gsd_list *out)
{
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_packet *r = n->running;
		if (!r || r->flip_waiting || n->switch_for == r->rec.packet)
			continue;
		/* By handle: the running packet's device may be gone (destroyed while it ran). */
		bool paging = r->rec.submit_flags & GS_SUBMIT_PAGING;
		if (r->rec.device != al->dev->obj.handle)
			continue;
		gsd_packet *cs = paging_packet_new(0, 0, 0);
		if (!cs) {
			GSD_ERROR("memory manager: out of memory for a ContextSwitch packet");
			continue;
		}
		n->switch_for = r->rec.packet;
		char detail[96];
		snprintf(detail, sizeof(detail),
		         "ContextSwitch away from packet %llu before moving "
		         "allocation %llu",
		         (unsigned long long)gsd_wire_packet_out(&d->wire, r->rec.packet),
		         (unsigned long long)al->obj.handle);
		paging_queue(d, n, al->dev, cs,
		             GS_SUBMIT_CONTEXT_SWITCH | (paging ? GS_SUBMIT_PAGING : 0u), detail,
		             out);
	}
}

/* ---- plans ---- */

/*
 * A plan is made as a transaction: every move it needs is applied to the heap bookkeeping as
 * it is decided (so later decisions see it) and recorded; when the plan cannot be completed,
 * the moves are undone in reverse order and nothing was queued, so a packet that finds no
 * room leaves memory exactly as it was. Only a complete plan is committed: its paging
 * packets are built and queued in the order the moves were decided.
 */
typedef struct planned {
	gsd_allocation *al;
	gsd_segment *src, *dst;
	uint64_t src_off, dst_off;
	int kind;
	char reason[96];
} planned;

typedef struct plan {
	gsd_daemon *d;
	gsd_adapter *a;
	uint64_t for_packet;
	gsd_node *
	        on; /* the node paging runs on: a packet's paging companion, else the paging node */
	const char *reason;
	planned *mv;
	size_t n, cap;
	gsd_list out; /* the paging packets of the moves committed so far */
} plan;

/* Room for one more recorded move. */
static bool plan_reserve(plan *pl)
{
	planned *m = gsd_grow(pl->mv, &pl->cap, pl->n + 1, sizeof(*m), 8);
	if (!m)
		return false;
	pl->mv = m;
	return true;
}

/* Records the move of al to [dst, dst_off) (already taken in dst's heap) and applies it to the
 * bookkeeping. Returns false, with dst's range given back, when memory is short. */
static bool plan_move(plan *pl, gsd_allocation *al, gsd_segment *dst, uint64_t dst_off, int kind,
                      const char *reason)
{
	if (!plan_reserve(pl)) {
		gsd_heap_free(&dst->heap, dst_off, al->size);
		return false;
	}
	planned *m = &pl->mv[pl->n++];
	*m = (planned){.al = al,
	               .src = al->segment,
	               .dst = dst,
	               .src_off = al->offset,
	               .dst_off = dst_off,
	               .kind = kind};
	snprintf(m->reason, sizeof(m->reason), "%s", reason);
	gsd_heap_free(&al->segment->heap, al->offset, al->size);
	set_location(pl->a, al, dst, dst_off);
	return true;
}

/* Records sliding al to offset `to` of its own segment (compaction), where the range may
 * overlap its old one: the old range is given back first, then the new one taken. */
static bool plan_slide(plan *pl, gsd_allocation *al, uint64_t to)
{
	if (!plan_reserve(pl))
		return false;
	gsd_segment *s = al->segment;
	gsd_heap_free(&s->heap, al->offset, al->size);
	if (gsd_heap_alloc_at(&s->heap, to, al->size) != 0) {
		int rc = gsd_heap_alloc_at(&s->heap, al->offset, al->size);
		assert(rc == 0);
		(void)rc;
		return false;
	}
	planned *m = &pl->mv[pl->n++];
	*m = (planned){.al = al,
	               .src = s,
	               .dst = s,
	               .src_off = al->offset,
	               .dst_off = to,
	               .kind = MK(COMPACT)};
	snprintf(m->reason, sizeof(m->reason), "compaction of segment %u (%s)", s->id, pl->reason);
	set_location(pl->a, al, s, to);
	return true;
}

/* Undoes the moves recorded after the first `keep`, newest first. */
static void plan_rollback(plan *pl, size_t keep)
{
	while (pl->n > keep) {
		planned *m = &pl->mv[--pl->n];
		gsd_heap_free(&m->dst->heap, m->dst_off, m->al->size);
		/* Free again: everything that took it since was undone before. */
		int rc = gsd_heap_alloc_at(&m->src->heap, m->src_off, m->al->size);
		assert(rc == 0);
		(void)rc;
		set_location(pl->a, m->al, m->src, m->src_off);
	}
}

/*
 * Builds and queues the paging packet of one planned move. idle: AllocationIsIdle, which every
 * planned move is (pinned allocations never move). Returns false when memory is short.
 */
static bool emit_move(gsd_daemon *d, const planned *m, uint64_t for_packet, gsd_node *on,
                      gsd_list *out)
{
	gsd_allocation *al = m->al;
	gsd_adapter *a = al->adapter;
	uint32_t conv = conversion(al, m->src, m->dst);
	uint32_t base = conv | GS_TRANSFER_ALLOCATION_IS_IDLE;
	uint64_t chunk = d->cfg.paging_chunk;
	if (conv)
		chunk = gsd_swizzle_chunk(chunk, al->pitch);
	uint64_t pieces = gsd_transfer_pieces(al->size, chunk);
	gsd_subtransfer *sub = calloc(pieces, sizeof(*sub));
	gsd_packet *p = sub ? paging_packet_new(1, 2, pieces * TRANSFER_BYTES) : NULL;
	if (!p || gsd_transfer_split(al->size, chunk, base, sub, pieces) != (int64_t)pieces) {
		free(sub);
		free(p);
		GSD_ERROR("memory manager: out of memory building a paging packet");
		return false;
	}
	context_switch_for(d, a, al, out);
	uint64_t from = gs_addr_make(m->src->id, m->src_off);
	uint64_t to = gs_addr_make(m->dst->id, m->dst_off);
	for (uint64_t i = 0; i < pieces; i++) {
		gs_isa_cmd cmd = {.op = GS_OP_TRANSFER,
		                  .dst = to + sub[i].offset,
		                  .src = from + sub[i].offset,
		                  .size = sub[i].size,
		                  .transfer_flags = sub[i].flags,
		                  .pitch = conv ? al->pitch : 0};
		gs_isa_encode(&cmd, p->dma + i * TRANSFER_BYTES, TRANSFER_BYTES);
	}
	free(sub);
	p->allocs[0] = (gsd_packet_alloc){al, true};
	p->ranges[0] = (gsd_range){from, al->size, false};
	p->ranges[1] = (gsd_range){to, al->size, true};
	gsd_allocation_busy(al);
	al->moving++;
	al->moves++;
	bool evict = m->kind == MK(EVICT) || m->kind == MK(EVICT_REQUEST);
	if (evict) {
		a->evictions++;
		al->obj.tenant->stats.evictions++;
	}
	a->paging_bytes += al->size;
	al->obj.tenant->stats.paging_bytes += al->size;
	uint32_t whole = base | (pieces ? GS_TRANSFER_START | GS_TRANSFER_END : 0u);
	char detail[160];
	snprintf(detail, sizeof(detail),
	         "%s allocation %llu: segment %u+%llu -> %u+%llu, %llu bytes",
	         evict ? "evict" : "move", (unsigned long long)al->obj.handle,
	         is_sysmem(m->src) ? 0 : m->src->id, (unsigned long long)m->src_off,
	         is_sysmem(m->dst) ? 0 : m->dst->id, (unsigned long long)m->dst_off,
	         (unsigned long long)al->size);
	paging_queue(d, on ? on : &a->nodes[a->paging_node], al->dev, p, GS_SUBMIT_PAGING, detail,
	             out);
	al->move_seq = p->paging_seq;
	/* The row describes where it is now, which is where the last planned move put it. */
	gsd_move_rec r = {.allocation = al->obj.handle,
	                  .tenant = al->obj.identity,
	                  .device = al->dev->obj.handle,
	                  .adapter = a->id,
	                  .packet = p->rec.packet,
	                  .for_packet = for_packet,
	                  .kind = m->kind,
	                  .from_segment = is_sysmem(m->src) ? 0 : m->src->id,
	                  .from_offset = m->src_off,
	                  .to_segment = is_sysmem(m->dst) ? 0 : m->dst->id,
	                  .to_offset = m->dst_off,
	                  .bytes = al->size,
	                  .transfer_flags = whole,
	                  .pieces = (uint32_t)pieces,
	                  .reason = m->reason};
	gsd_audit_move(d->audit, &r);
	gsd_allocation_audit(d, al);
	return true;
}

/* Queues every planned move. When memory runs short half way, the moves not queued yet are
 * undone. Returns the number queued; all of them when it equals pl->n on return. */
static size_t plan_commit(plan *pl)
{
	size_t done = 0;
	while (done < pl->n && emit_move(pl->d, &pl->mv[done], pl->for_packet, pl->on, &pl->out))
		done++;
	plan_rollback(pl, done);
	return done;
}

/* ---- making room ---- */

typedef struct cand {
	gsd_victim_candidate c;
	gsd_allocation *al;
} cand;

static int cmp_cand(const void *x, const void *y)
{
	const cand *a = x, *b = y;
	return a->c.offset < b->c.offset ? -1 : a->c.offset > b->c.offset;
}

/* Where a victim goes: an aperture segment of its set with room, else system memory. */
static gsd_segment *eviction_target(gsd_adapter *a, const gsd_allocation *v,
                                    const gsd_segment *from, uint64_t *off)
{
	for (uint32_t i = 0; i < a->nsegments; i++) {
		gsd_segment *s = &a->segments[i];
		if (s == from || s->kind != GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE ||
		    !(v->supported_segment_set & (1u << s->id)))
			continue;
		if (gsd_heap_alloc(&s->heap, v->size, false, off) == 0)
			return s;
	}
	return gsd_heap_alloc(&a->sysmem.heap, v->size, false, off) == 0 ? &a->sysmem : NULL;
}

/* The segment's live allocations as victim candidates, sorted by offset (NULL: no memory). */
static cand *candidates(gsd_adapter *a, const gsd_segment *s, size_t *count)
{
	size_t n = 0, cap = 64;
	cand *cs = malloc(cap * sizeof(*cs));
	for (gsd_list *it = a->residents[s->id].next; cs && it != &a->residents[s->id];
	     it = it->next) {
		gsd_allocation *v = GSD_CONTAINER_OF(it, gsd_allocation, res_link);
		if (n == cap) {
			cand *m = realloc(cs, 2 * cap * sizeof(*cs));
			if (!m) {
				free(cs);
				return NULL;
			}
			cs = m;
			cap *= 2;
		}
		/* Destroyed ones are on their way out with their last packet: never worth
		 * moving. */
		cs[n].c = (gsd_victim_candidate){.offset = v->offset,
		                                 .size = rounded(v->size),
		                                 .priority = v->priority,
		                                 .last_use = v->last_use,
		                                 .pinned = v->pins > 0 || v->destroyed};
		cs[n].al = v;
		n++;
	}
	if (cs)
		qsort(cs, n, sizeof(*cs), cmp_cand);
	*count = n;
	return cs;
}

/*
 * Plans one hole of size bytes in segment s by evicting unpinned allocations. With
 * honour_priority != 0, only when every victim's priority is below it (an allocation keeping
 * its preference). Returns true with the hole taken in s's heap at *off; false with nothing
 * planned.
 */
static bool evict_for(plan *pl, gsd_segment *s, uint64_t size, uint32_t honour_priority,
                      uint64_t *off)
{
	size_t n = 0, mark = pl->n;
	cand *cs = candidates(pl->a, s, &n);
	gsd_victim_candidate *c = cs ? malloc((n ? n : 1) * sizeof(*c)) : NULL;
	size_t *idx = c ? malloc((n ? n : 1) * sizeof(*idx)) : NULL;
	bool ok = false;
	if (!idx)
		GSD_ERROR("memory manager: out of memory choosing victims");
	size_t nv = 0;
	uint64_t hole = 0;
	int rv = -1;
	if (idx) {
		for (size_t i = 0; i < n; i++)
			c[i] = cs[i].c;
		rv = gsd_pick_victims_contiguous(c, n, s->heap.size, size, idx, n, &nv, &hole);
	}
	if (rv == 0 && honour_priority) {
		uint32_t pr[64];
		if (nv > 64)
			rv = -1; /* more victims than a preference is worth */
		for (size_t i = 0; rv == 0 && i < nv; i++)
			pr[i] = c[idx[i]].priority;
		if (rv == 0 && !gsd_should_evict_for_preference(honour_priority, pr, nv))
			rv = -1;
	}
	if (rv == 0) {
		ok = true;
		for (size_t i = 0; i < nv && ok; i++) {
			gsd_allocation *v = cs[idx[i]].al;
			uint64_t voff;
			gsd_segment *to = eviction_target(pl->a, v, s, &voff);
			char why[96];
			snprintf(why, sizeof(why), "room in segment %u (%s)", s->id, pl->reason);
			ok = to && plan_move(pl, v, to, voff, MK(EVICT), why);
		}
		ok = ok && gsd_heap_alloc_at(&s->heap, hole, size) == 0;
		if (ok)
			*off = hole;
		else
			plan_rollback(pl, mark);
	}
	free(idx);
	free(c);
	free(cs);
	return ok;
}

/*
 * Plans one hole of size bytes in segment s by sliding unpinned allocations down within it
 * (compaction by paging: they stay resident), when s has enough free bytes between its
 * pinned allocations but not in one piece. The cheapest plan (fewest bytes moved) of
 * gsd_heap_compact_plan. Returns true with the hole taken at *off; false with nothing planned.
 */
static bool compact_for(plan *pl, gsd_segment *s, uint64_t size, uint64_t *off)
{
	if (s->heap.size - s->heap.used < rounded(size) ||
	    gsd_heap_largest_free(&s->heap) >= rounded(size))
		return false;
	size_t n = 0, mark = pl->n, nm = 0;
	cand *cs = candidates(pl->a, s, &n);
	gsd_live_block *blocks = cs ? malloc((n ? n : 1) * sizeof(*blocks)) : NULL;
	gsd_move *moves = blocks ? malloc((n ? n : 1) * sizeof(*moves)) : NULL;
	bool ok = false;
	if (moves) {
		for (size_t i = 0; i < n; i++)
			blocks[i] = (gsd_live_block){cs[i].c.offset, cs[i].c.size, !cs[i].c.pinned};
		if (gsd_heap_compact_plan(blocks, n, s->heap.size, size, moves, n, &nm, NULL) ==
		            0 &&
		    nm > 0) {
			ok = true;
			for (size_t i = 0; i < nm && ok; i++)
				ok = plan_slide(pl, cs[moves[i].block].al, moves[i].to);
			ok = ok && gsd_heap_alloc(&s->heap, size, false, off) == 0;
			if (!ok)
				plan_rollback(pl, mark);
		}
	}
	free(moves);
	free(blocks);
	free(cs);
	return ok;
}

/* Plans a place for al (pinned by the caller) and its move there. */
static bool place(plan *pl, gsd_allocation *al, int kind)
{
	gsd_adapter *a = pl->a;
	gsd_place_step steps[GSD_PLACE_STEPS_MAX];
	size_t ns = gsd_place_order(a->segments, a->nsegments, al->supported_segment_set,
	                            al->segment_preference, steps, GSD_PLACE_STEPS_MAX);
	uint32_t prio = gsd_alloc_priority_effective(al->priority);
	uint64_t off;
	/* Free room first, in preference order; a HIGH (or higher) allocation evicts lower ones
	 * from a preferred segment instead of falling back. */
	for (size_t i = 0; i < ns; i++) {
		gsd_segment *s = &a->segments[steps[i].index];
		if (gsd_heap_alloc(&s->heap, al->size, steps[i].top_down, &off) == 0 ||
		    (steps[i].preferred && prio >= GS_ALLOC_PRIORITY_HIGH &&
		     evict_for(pl, s, al->size, prio, &off)))
			return plan_move(pl, al, s, off, kind, pl->reason);
	}
	/* Enough free bytes, but not in one piece: compact, in the same order. */
	for (size_t i = 0; i < ns; i++) {
		gsd_segment *s = &a->segments[steps[i].index];
		if (compact_for(pl, s, al->size, &off))
			return plan_move(pl, al, s, off, kind, pl->reason);
	}
	/* The last resort: evict whatever is least valuable, in the same order. */
	for (size_t i = 0; i < ns; i++) {
		gsd_segment *s = &a->segments[steps[i].index];
		if (evict_for(pl, s, al->size, 0, &off))
			return plan_move(pl, al, s, off, kind, pl->reason);
	}
	return false;
}

/*
 * After a plan failed: will the situation ever change? Yes while others hold pins, paging is
 * in flight, or destroyed allocations still occupy room (their last packets hold them).
 * `mine` lists the allocations the failed request pinned itself (n entries, may repeat).
 */
static bool room_may_come(gsd_adapter *a, gsd_allocation *const *mine, size_t n)
{
	for (size_t i = 0; i < n; i++)
		mine[i]->mark = 0;
	for (size_t i = 0; i < n; i++)
		mine[i]->mark++;
	uint64_t distinct = 0;
	bool others = false;
	for (size_t i = 0; i < n; i++) {
		gsd_allocation *al = mine[i];
		if (al->mark) {
			others |= al->pins > al->mark;
			distinct++;
			al->mark = 0; /* counted once */
		}
	}
	others |= a->pinned_allocs > distinct;
	others |= a->paging_done->value < a->paging_seq;
	for (uint32_t s = 0; s < a->nsegments && !others; s++) {
		const gsd_list *h = &a->residents[a->segments[s].id];
		for (const gsd_list *it = h->next; it != h && !others; it = it->next)
			others = GSD_CONTAINER_OF(it, gsd_allocation, res_link)->destroyed;
	}
	return others;
}

gsd_vidmm_result gsd_vidmm_prepare(gsd_daemon *d, gsd_packet *p, char *why, size_t cap)
{
	gsd_adapter *a = p->node->adapter;
	if (p->pinned) {
		/* Woken after its paging: everything it needs is in place (its pins kept it:
		 * a ready packet's allocations are never moved, as WDDM's rule says). */
		return GSD_VIDMM_READY;
	}
	/* A room change from here on wakes it, even one that happens while it plans. */
	uint64_t room0 = a->room->value;
	uint64_t use = ++d->use_seq;
	p->pinned = true;
	for (uint32_t i = 0; i < p->nallocs; i++)
		pin(a, p->allocs[i].alloc, use);
	/* Resident in the bookkeeping is not enough: a move planned earlier (an eviction to an
	 * aperture it supports, a Transfer) may still be on its way. */
	bool all = true;
	uint64_t last_move = 0;
	for (uint32_t i = 0; i < p->nallocs; i++) {
		const gsd_allocation *al = p->allocs[i].alloc;
		all = all && gsd_vidmm_resident(al);
		if (al->move_seq > last_move)
			last_move = al->move_seq;
	}
	if (all) {
		if (last_move <= a->paging_done->value)
			return GSD_VIDMM_READY;
		p->paging_wait = last_move;
		return GSD_VIDMM_PAGING;
	}
	char reason[48];
	snprintf(reason, sizeof(reason), "for packet %llu",
	         (unsigned long long)gsd_wire_packet_out(&d->wire, p->rec.packet));
	gsd_node *companion = &a->nodes[p->ctx->info.paging_companion_node_id < a->nnodes
	                                        ? p->ctx->info.paging_companion_node_id
	                                        : a->paging_node];
	plan pl = {.d = d, .a = a, .for_packet = p->rec.packet, .on = companion, .reason = reason};
	gsd_list_init(&pl.out);
	gsd_allocation *missing = NULL;
	for (uint32_t i = 0; i < p->nallocs && !missing; i++) {
		gsd_allocation *al = p->allocs[i].alloc;
		if (!gsd_vidmm_resident(al) && !place(&pl, al, MK(PAGE_IN)))
			missing = al;
	}
	if (missing)
		plan_rollback(&pl, 0);
	else if (plan_commit(&pl) < pl.n)
		missing = p->allocs[0].alloc; /* out of memory half way: try again later */
	size_t moves = pl.n;
	free(pl.mv);
	gsd_vidmm_result res = GSD_VIDMM_PAGING;
	if (missing) {
		gsd_allocation **mine = calloc(p->nallocs ? p->nallocs : 1, sizeof(*mine));
		bool may = true;
		if (mine) {
			for (uint32_t i = 0; i < p->nallocs; i++)
				mine[i] = p->allocs[i].alloc;
			may = room_may_come(a, mine, p->nallocs);
			free(mine);
		}
		/* Quietly: these pins were only just taken; waking the others for them would
		 * only have them retry against the same situation. */
		unpin_packet(p);
		if (may) {
			p->room_wait = room0 + 1;
			res = GSD_VIDMM_NO_ROOM;
		} else {
			snprintf(why, cap,
			         "allocation %llu (%llu bytes) cannot be made resident together "
			         "with the rest of the packet's allocation list",
			         (unsigned long long)missing->obj.handle,
			         (unsigned long long)missing->size);
			res = GSD_VIDMM_NEVER;
		}
	} else {
		p->paging_moves = (uint32_t)moves;
		p->paging_wait = moves ? a->paging_seq : last_move;
		if (p->paging_wait <= a->paging_done->value)
			res = GSD_VIDMM_READY;
	}
	submit_paging(d, &pl.out);
	return res;
}

void gsd_vidmm_paging_done(gsd_daemon *d, gsd_packet *p)
{
	gsd_adapter *a = p->node->adapter;
	if (p->nallocs)
		p->allocs[0].alloc->moving--;
	if (p->rec.submit_flags & GS_SUBMIT_CONTEXT_SWITCH && p->node->switch_for)
		p->node->switch_for = 0;
	if (p->paging_sync) {
		gsd_sync *s = gsd_object_get(d, p->paging_sync, GSD_OBJ_SYNC, NULL);
		if (s)
			gsd_sync_signal(d, s, p->paging_fence, p->rec.packet);
	}
	if (p->paging_seq > a->paging_done->value) {
		a->paging_done->value = p->paging_seq;
		a->paging_vns = gsd_node_now(p->node);
		gsd_sync_changed(d, a->paging_done);
	}
	room_changed(d, a);
}

/* ---- client requests ---- */

int gsd_vidmm_make_resident(gsd_daemon *d, gsd_allocation **als, size_t n, uint32_t *moved,
                            char *msg, size_t cap)
{
	gsd_adapter *a = als[0]->adapter;
	uint64_t use = ++d->use_seq;
	/* Each one stays out of the others' way: none is chosen to make room for another. */
	for (size_t i = 0; i < n; i++)
		pin(a, als[i], use);
	plan pl = {.d = d, .a = a, .reason = "MakeResident"};
	gsd_list_init(&pl.out);
	gsd_allocation *missing = NULL;
	for (size_t i = 0; i < n && !missing; i++) {
		if (gsd_vidmm_resident(als[i]))
			audit_move(d, als[i], MK(RESIDENT), als[i]->segment, als[i]->offset, 0, 0,
			           0, 0, "MakeResident: resident already");
		else if (!place(&pl, als[i], MK(PAGE_IN)))
			missing = als[i];
	}
	if (missing)
		plan_rollback(&pl, 0);
	else if (plan_commit(&pl) < pl.n)
		missing = als[0];
	*moved = (uint32_t)pl.n;
	free(pl.mv);
	bool may = missing && room_may_come(a, als, n);
	for (size_t i = 0; i < n; i++)
		unpin(a, als[i]);
	submit_paging(d, &pl.out);
	if (!missing)
		return GSD_ST(OK);
	*moved = 0;
	if (!may) {
		snprintf(msg, cap,
		         "allocation %llu (%llu bytes) cannot be made resident together with the "
		         "rest of the request",
		         (unsigned long long)missing->obj.handle,
		         (unsigned long long)missing->size);
		return GSD_ST(NOT_RESIDENT_TOGETHER);
	}
	snprintf(msg, cap,
	         "no room for allocation %llu (%llu bytes) now: what would have to move is in use "
	         "by packets that are running or about to run; nothing was moved",
	         (unsigned long long)missing->obj.handle, (unsigned long long)missing->size);
	return GSD_ST(OUT_OF_MEMORY);
}

int gsd_vidmm_move_to(gsd_daemon *d, gsd_allocation *al, gsd_segment *dst, uint32_t want_flags,
                      int kind, const char *reason, char *msg, size_t cap)
{
	gsd_adapter *a = al->adapter;
	uint32_t conv = conversion(al, al->segment, dst);
	uint32_t asked = want_flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE);
	if (asked && asked != conv) {
		snprintf(msg, cap,
		         "transfer flags 0x%x contradict the move of allocation %llu (%s): it %s",
		         want_flags, (unsigned long long)al->obj.handle,
		         al->flags & GS_ALLOC_TILED ? "tiled" : "linear",
		         conv == GS_TRANSFER_SWIZZLE     ? "swizzles"
		         : conv == GS_TRANSFER_UNSWIZZLE ? "unswizzles"
		                                         : "copies without conversion");
		return GSD_ST(TRANSFER_FLAGS);
	}
	if (al->segment == dst)
		return 1;
	/* Callers wait until no packet holds it (gsd_h_evict, gsd_h_transfer). */
	assert(al->pins == 0);
	uint64_t off;
	plan pl = {.d = d, .a = a, .reason = reason};
	gsd_list_init(&pl.out);
	pin(a, al, ++d->use_seq); /* never its own victim */
	bool ok = gsd_heap_alloc(&dst->heap, al->size, false, &off) == 0 ||
	          (!is_sysmem(dst) && evict_for(&pl, dst, al->size, 0, &off));
	unpin(a, al);
	ok = ok && plan_move(&pl, al, dst, off, kind, reason);
	if (ok)
		ok = plan_commit(&pl) == pl.n;
	else
		plan_rollback(&pl, 0);
	free(pl.mv);
	submit_paging(d, &pl.out);
	if (!ok) {
		snprintf(msg, cap,
		         "no room for allocation %llu (%llu bytes) in segment %u: what would have "
		         "to move is in use by packets that are running or about to run",
		         (unsigned long long)al->obj.handle, (unsigned long long)al->size,
		         is_sysmem(dst) ? 0 : dst->id);
		return GSD_ST(OUT_OF_MEMORY);
	}
	return 0;
}

/* ---- adapters ---- */

gsd_sync *gsd_vidmm_wait_of(const gsd_adapter *a, const gsd_packet *p)
{
	if (p->paging_wait && a->paging_done->value < p->paging_wait)
		return a->paging_done;
	if (p->room_wait && a->room->value < p->room_wait)
		return a->room;
	return NULL;
}

/* Backs segment s with memory of the adapter's backend, which its engines may touch. */
static int back_segment(gsd_adapter *a, gsd_segment *s, gsd_mem_kind kind)
{
	char err[256];
	gsd_mem_segment *m = &a->memory.seg[s->id];
	if (gsd_backend_segment_create(a->ops, a->backend, s->id, kind, s->size, m, err,
	                               sizeof(err)) != 0) {
		GSD_ERROR("adapter %s: segment %s (%llu bytes): %s", a->cfg->name, s->name,
		          (unsigned long long)s->size, err);
		return -1;
	}
	s->backing = m;
	return 0;
}

/* The configured segments and system memory, backed by real memory the engines may touch. */
static int make_segments(gsd_adapter *a)
{
	const gsd_adapter_config *ac = a->cfg;
	for (uint32_t i = 0; i < ac->nsegments; i++) {
		const gsd_segment_config *sc = &ac->segments[i];
		if (gsd_segment_init(&a->segments[i], sc->id, sc->name, sc->kind, sc->size,
		                     sc->cpu_visible) != 0) {
			GSD_ERROR("adapter %s: out of memory for segment %s", ac->name, sc->name);
			return -1;
		}
		a->nsegments++;
		bool local = sc->kind == GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY;
		if (back_segment(a, &a->segments[i], local ? GSD_MEM_LOCAL : GSD_MEM_APERTURE) != 0)
			return -1;
	}
	if (gsd_segment_init(&a->sysmem, GSD_SYSMEM_ID, "system",
	                     GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE, ac->system_memory,
	                     true) != 0) {
		GSD_ERROR("adapter %s: out of memory for system memory", ac->name);
		return -1;
	}
	a->sysmem_ready = true;
	return back_segment(a, &a->sysmem, GSD_MEM_SYSTEM);
}

int gsd_vidmm_adapter_init(gsd_daemon *d, gsd_adapter *a)
{
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++)
		gsd_list_init(&a->residents[i]);
	if (make_segments(a) != 0)
		return -1;
	/* The first node configured for paging runs the paging nobody else asks for. */
	bool found = false;
	for (uint32_t i = 0; i < a->nnodes && !found; i++)
		if (a->nodes[i].cfg->paging) {
			a->paging_node = i;
			found = true;
		}
	a->paging_done = gsd_sync_create(d, NULL, 0, true);
	a->room = gsd_sync_create(d, NULL, 0, true);
	return a->paging_done && a->room ? 0 : -1;
}

void gsd_vidmm_adapter_fini(gsd_daemon *d, gsd_adapter *a)
{
	if (a->paging_done)
		gsd_sync_destroy(d, a->paging_done);
	if (a->room)
		gsd_sync_destroy(d, a->room);
	a->paging_done = a->room = NULL;
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++)
		gsd_backend_segment_destroy(a->ops, a->backend, &a->memory.seg[i]);
	for (uint32_t s = 0; s < a->nsegments; s++)
		gsd_segment_fini(&a->segments[s]);
	if (a->sysmem_ready)
		gsd_segment_fini(&a->sysmem);
	a->sysmem_ready = false;
}

void gsd_vidmm_install_hooks(gsd_daemon *d)
{
	d->hooks.allocation_place = place_new;
	d->hooks.allocation_release = release_memory;
}
