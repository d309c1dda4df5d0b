/*
 * bench_vidmm: the video memory manager's building blocks, in process.
 *
 *   alloc    placement + free throughput of the segment heap with --count live allocations
 *            (random sizes 256 B..1 MiB, random direction) in a heap model of 64 GiB per 100k
 *            allocations (about 80 % full; bookkeeping only, no memory behind it). After the
 *            fill, each step frees a random live allocation and places a new one. The same
 *            sizes and choices then run through malloc/free as the baseline (mmap threshold
 *            raised to 2 MiB so every size stays in malloc's own heap: we compare allocators,
 *            not mmap system calls). Reports operations per second (an alloc or a free is one
 *            operation) and the ratio heap / malloc.
 *   swizzle  gsd_swizzle and gsd_unswizzle of a 64 MiB buffer at pitches 1 KiB and 4 KiB
 *            against memcpy of the same bytes (GB/s and ratio; the target is >= 0.5).
 *   compact  after a long random churn (10 x --count steps, bounded by --seconds) of the same
 *            heap, and again after the same churn followed by freeing a random quarter of the
 *            live allocations (scattered holes, as when a tenant leaves): the largest free
 *            extent as a fraction of all free bytes, before and after applying
 *            gsd_heap_compact_plan (want 0: full compaction, every block movable; the target is
 *            >= 0.8), with the moves and bytes it costs, and the bytes the cheapest targeted
 *            plan moves for one hole halfway between the largest extent and all free bytes.
 *   transfer paging transfer throughput: 64 MiB moved between two segments by TRANSFER commands
 *            (plain, Swizzle and Unswizzle at pitch 1 KiB), cut into 1 MiB sub-transfers as
 *            the daemon cuts them (gsd_swizzle_chunk + gsd_transfer_split), encoded into one DMA
 *            buffer and decoded and executed with gsd_engine_exec_cmd as the engine does,
 *            against memcpy of the same 64 MiB measured in the same run, interleaved with the
 *            transfers (MB/s and ratio; the target is >= 0.5). The results are checked.
 *
 * Every measurement is bounded by --seconds and a fixed operation count. Prints a table; with
 * --json, one JSON object per measurement on stdout and the table on stderr.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "isa.h"
#include "vidmm/paging_plan.h"
#include "engine/swizzle.h"
#include "testd.h"
#include "vidmm/heap.h"
#include "wddm.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

#define MAX_STEPS    2000000u /* churn steps timed per allocator */
#define SWIZZLE_SIZE (64 * MIB)
#define XFER_SIZE    (64 * MIB)
#define XFER_CHUNK   (1 * MIB) /* the daemon's sub-transfer size */
#define XFER_PITCH   GSD_SWIZZLE_PITCH_DEFAULT
#define XFER_TARGET  0.5

typedef struct options {
	uint64_t count;
	double seconds;
	bool json;
	uint64_t seed;
} options;

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static uint64_t random_size(void)
{
	return 256 + rnd() % (MIB - 256 + 1);
}

/* ---- workload: the same sizes and choices for both allocators ---- */

typedef struct workload {
	uint64_t heap_size;
	uint64_t nlive;
	uint64_t *fill_size; /* [nlive] */
	uint8_t *fill_dir;
	uint64_t nsteps;
	uint32_t *victim; /* [nsteps]: which live slot to free */
	uint64_t *size;   /* [nsteps]: what to place there next */
	uint8_t *dir;
} workload;

static int workload_make(workload *w, const options *o)
{
	memset(w, 0, sizeof(*w));
	w->nlive = o->count;
	w->heap_size = (64 * GIB / 100000) * o->count;
	w->heap_size -= w->heap_size % GSD_HEAP_ALIGN;
	w->nsteps = MAX_STEPS;
	w->fill_size = malloc(w->nlive * sizeof(*w->fill_size));
	w->fill_dir = malloc(w->nlive);
	w->victim = malloc(w->nsteps * sizeof(*w->victim));
	w->size = malloc(w->nsteps * sizeof(*w->size));
	w->dir = malloc(w->nsteps);
	if (!w->fill_size || !w->fill_dir || !w->victim || !w->size || !w->dir)
		return -1;
	rng_state = o->seed;
	for (uint64_t i = 0; i < w->nlive; i++) {
		w->fill_size[i] = random_size();
		w->fill_dir[i] = rnd() & 1;
	}
	for (uint64_t i = 0; i < w->nsteps; i++) {
		w->victim[i] = (uint32_t)(rnd() % w->nlive);
		w->size[i] = random_size();
		w->dir[i] = rnd() & 1;
	}
	return 0;
}

static void workload_free(workload *w)
{
	free(w->fill_size);
	free(w->fill_dir);
	free(w->victim);
	free(w->size);
	free(w->dir);
}

typedef struct throughput {
	uint64_t ops;
	double seconds;
	double ops_per_s;
	uint64_t failures; /* placements that found no room */
} throughput;

/* One allocator behind the workload: the heap or malloc. */
typedef struct allocator {
	const char *name;
	void *state;
	/* Returns a handle (offset + 1 or a pointer), 0 when there is no room. */
	uint64_t (*alloc)(void *state, uint64_t size, bool top_down);
	void (*release)(void *state, uint64_t handle, uint64_t size);
} allocator;

static uint64_t heap_alloc_op(void *state, uint64_t size, bool top_down)
{
	uint64_t off;
	return gsd_heap_alloc(state, size, top_down, &off) == 0 ? off + 1 : 0;
}

static void heap_free_op(void *state, uint64_t handle, uint64_t size)
{
	gsd_heap_free(state, handle - 1, size);
}

static uint64_t malloc_op(void *state, uint64_t size, bool top_down)
{
	(void)state;
	(void)top_down;
	void *p = malloc(size);
	if (p)
		*(volatile char *)p = 1; /* a real owner writes to what it gets */
	return (uint64_t)(uintptr_t)p;
}

static void free_op(void *state, uint64_t handle, uint64_t size)
{
	(void)state;
	(void)size;
	free((void *)(uintptr_t)handle);
}

/*
 * Fills nlive slots, then times churn steps (free a slot, place a new size there) until the
 * step count or the time bound. live[] keeps each slot's handle and size for the caller.
 */
static throughput run_churn(const workload *w, const allocator *a, uint64_t *live,
                            uint64_t *live_size, double seconds)
{
	throughput t = {0};
	for (uint64_t i = 0; i < w->nlive; i++) {
		live[i] = a->alloc(a->state, w->fill_size[i], w->fill_dir[i]);
		live_size[i] = w->fill_size[i];
		if (!live[i])
			t.failures++;
	}
	double start = gs_test_mono_s(), end = start;
	uint64_t step = 0;
	while (step < w->nsteps) {
		uint64_t batch = step + 4096 < w->nsteps ? step + 4096 : w->nsteps;
		for (; step < batch; step++) {
			uint32_t v = w->victim[step];
			if (live[v]) {
				a->release(a->state, live[v], live_size[v]);
				t.ops++;
			}
			live[v] = a->alloc(a->state, w->size[step], w->dir[step]);
			live_size[v] = w->size[step];
			t.ops++;
			if (!live[v])
				t.failures++;
		}
		end = gs_test_mono_s();
		if (end - start >= seconds)
			break;
	}
	t.seconds = end - start;
	t.ops_per_s = t.seconds > 0 ? (double)t.ops / t.seconds : 0;
	return t;
}

static void release_all(const allocator *a, uint64_t *live, const uint64_t *live_size, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (live[i])
			a->release(a->state, live[i], live_size[i]);
}

typedef struct alloc_result {
	throughput heap, libc;
	double ratio;
	uint64_t free_extents; /* at the end of the heap run */
} alloc_result;

static int bench_alloc(const workload *w, const options *o, alloc_result *r)
{
	uint64_t *live = malloc(w->nlive * sizeof(*live));
	uint64_t *live_size = malloc(w->nlive * sizeof(*live_size));
	if (!live || !live_size)
		return -1;
	gsd_heap h;
	if (gsd_heap_init(&h, w->heap_size) != 0)
		return -1;
	allocator heap = {"heap", &h, heap_alloc_op, heap_free_op};
	r->heap = run_churn(w, &heap, live, live_size, o->seconds);
	r->free_extents = h.nfree;
	release_all(&heap, live, live_size, w->nlive);
	gsd_heap_fini(&h);

	mallopt(M_MMAP_THRESHOLD, (int)(2 * MIB));
	mallopt(M_TRIM_THRESHOLD, (int)(512 * MIB));
	allocator libc = {"malloc", NULL, malloc_op, free_op};
	r->libc = run_churn(w, &libc, live, live_size, o->seconds);
	release_all(&libc, live, live_size, w->nlive);
	malloc_trim(0);
	r->ratio = r->libc.ops_per_s > 0 ? r->heap.ops_per_s / r->libc.ops_per_s : 0;
	free(live);
	free(live_size);
	return 0;
}

/* ---- swizzle ---- */

typedef struct swizzle_result {
	uint32_t pitch;
	double memcpy_gbs, swizzle_gbs, unswizzle_gbs;
	double swizzle_ratio, unswizzle_ratio;
	bool round_trip_ok;
} swizzle_result;

typedef enum { K_MEMCPY, K_SWIZZLE, K_UNSWIZZLE } copy_kind;

/* Best of several passes within the time share, in GB/s: the best pass is the least disturbed
 * by the rest of the machine. */
static double time_copy(copy_kind k, uint8_t *dst, const uint8_t *src, uint32_t pitch,
                        double seconds)
{
	double best = 0, start = gs_test_mono_s();
	for (int pass = 0; pass < 50; pass++) {
		double t0 = gs_test_mono_s();
		if (k == K_MEMCPY)
			memcpy(dst, src, SWIZZLE_SIZE);
		else if (k == K_SWIZZLE)
			gsd_swizzle(dst, src, SWIZZLE_SIZE, pitch);
		else
			gsd_unswizzle(dst, src, SWIZZLE_SIZE, pitch);
		double t = gs_test_mono_s() - t0;
		double gbs = t > 0 ? (double)SWIZZLE_SIZE / t / 1e9 : 0;
		if (gbs > best)
			best = gbs;
		if (pass >= 2 && gs_test_mono_s() - start >= seconds)
			break;
	}
	return best;
}

static int bench_swizzle(const options *o, swizzle_result *r, int nr)
{
	static const uint32_t pitches[] = {GSD_SWIZZLE_PITCH_DEFAULT, 4096};
	/* Page-aligned, like segment memory. */
	uint8_t *a = aligned_alloc(4096, SWIZZLE_SIZE), *b = aligned_alloc(4096, SWIZZLE_SIZE),
	        *c = aligned_alloc(4096, SWIZZLE_SIZE);
	if (!a || !b || !c)
		return -1;
	for (uint64_t i = 0; i < SWIZZLE_SIZE; i++)
		a[i] = (uint8_t)(i * 131 + (i >> 12));
	memset(b, 0, SWIZZLE_SIZE); /* touch every page before timing */
	memset(c, 0, SWIZZLE_SIZE);
	double share = o->seconds / 3;
	for (int i = 0; i < nr; i++) {
		uint32_t p = pitches[i];
		r[i].pitch = p;
		r[i].memcpy_gbs = time_copy(K_MEMCPY, b, a, p, share);
		r[i].swizzle_gbs = time_copy(K_SWIZZLE, b, a, p, share);
		r[i].unswizzle_gbs = time_copy(K_UNSWIZZLE, c, b, p, share);
		r[i].round_trip_ok = memcmp(a, c, SWIZZLE_SIZE) == 0;
		r[i].swizzle_ratio = r[i].memcpy_gbs > 0 ? r[i].swizzle_gbs / r[i].memcpy_gbs : 0;
		r[i].unswizzle_ratio =
		        r[i].memcpy_gbs > 0 ? r[i].unswizzle_gbs / r[i].memcpy_gbs : 0;
	}
	free(a);
	free(b);
	free(c);
	return 0;
}

/* ---- paging transfers through the engine ---- */

typedef struct transfer_result {
	const char *kind;
	uint32_t flags, pitch;
	uint64_t pieces;
	double memcpy_mbs, transfer_mbs, ratio;
	bool ok;
} transfer_result;

typedef struct transfer_rig {
	gsd_memory mem;
	gsd_range ranges[2];
	uint8_t *dma;
	size_t dma_len;
	uint64_t ncmds;
} transfer_rig;

/* Encodes the transfer of the whole source segment to the destination one, cut as the daemon
 * cuts it, into rig->dma. Returns 0, or -1 when the split or the encoding fails. */
static int transfer_build(transfer_rig *rig, uint32_t flags, uint32_t pitch)
{
	uint64_t chunk = flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE)
	                         ? gsd_swizzle_chunk(XFER_CHUNK, pitch)
	                         : XFER_CHUNK;
	uint64_t n = gsd_transfer_pieces(XFER_SIZE, chunk);
	gsd_subtransfer *pieces = calloc(n, sizeof(*pieces));
	if (!pieces)
		return -1;
	size_t cap = n * gs_isa_cmd_size(GS_OP_TRANSFER);
	free(rig->dma);
	rig->dma = malloc(cap);
	rig->dma_len = 0;
	int64_t got = gsd_transfer_split(XFER_SIZE, chunk, flags, pieces, n);
	if (!rig->dma || got != (int64_t)n) {
		free(pieces);
		return -1;
	}
	for (uint64_t i = 0; i < n; i++) {
		gs_isa_cmd c = {.op = GS_OP_TRANSFER,
		                .dst = gs_addr_make(2, pieces[i].offset),
		                .src = gs_addr_make(1, pieces[i].offset),
		                .size = pieces[i].size,
		                .transfer_flags = pieces[i].flags,
		                .pitch = (flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE))
		                                 ? pitch
		                                 : 0};
		size_t w = gs_isa_encode(&c, rig->dma + rig->dma_len, cap - rig->dma_len);
		if (w == 0) {
			free(pieces);
			return -1;
		}
		rig->dma_len += w;
	}
	rig->ncmds = n;
	free(pieces);
	return 0;
}

/* One pass as the engine runs a paging buffer: decode each command, execute it. Returns the
 * seconds it took, or -1 on a decode error or a fault. */
static double transfer_pass(const transfer_rig *rig)
{
	gsd_exec x = {.packet = 1,
	              .dma = rig->dma,
	              .dma_len = rig->dma_len,
	              .ranges = rig->ranges,
	              .nranges = 2};
	char detail[96];
	gs_isa_cmd c;
	size_t pos = 0;
	double t0 = gs_test_mono_s();
	for (;;) {
		gs_isa_err err = gs_isa_decode(rig->dma, rig->dma_len, &pos, &c);
		if (err == GS_ISA_END)
			break;
		if (err != GS_ISA_OK ||
		    gsd_engine_exec_cmd(&rig->mem, &x, &c, detail, sizeof(detail)))
			return -1;
	}
	return gs_test_mono_s() - t0;
}

static double mbs(double seconds)
{
	return seconds > 0 ? (double)XFER_SIZE / seconds / 1e6 : 0;
}

/* Best of interleaved passes (memcpy, then the transfers) within the time share. */
static void transfer_time(transfer_rig *rig, double seconds, double *best_memcpy,
                          double *best_transfer, bool *ok)
{
	uint8_t *src = rig->mem.seg[1].base, *dst = rig->mem.seg[2].base;
	double start = gs_test_mono_s();
	for (int pass = 0; pass < 50; pass++) {
		double t0 = gs_test_mono_s();
		memcpy(dst, src, XFER_SIZE);
		double m = mbs(gs_test_mono_s() - t0);
		if (m > *best_memcpy)
			*best_memcpy = m;
		double t = transfer_pass(rig);
		if (t < 0) {
			*ok = false;
			return;
		}
		if (mbs(t) > *best_transfer)
			*best_transfer = mbs(t);
		if (pass >= 2 && gs_test_mono_s() - start >= seconds)
			break;
	}
}

static int bench_transfer(const options *o, transfer_result *r, int nr)
{
	static const struct {
		const char *kind;
		uint32_t flags;
	} kinds[] = {
	        {"plain", 0},
	        {"swizzle", GS_TRANSFER_SWIZZLE},
	        {"unswizzle", GS_TRANSFER_UNSWIZZLE},
	};
	transfer_rig rig;
	memset(&rig, 0, sizeof(rig));
	/* Segment memory is page-aligned; every page is touched before timing. */
	for (uint32_t id = 1; id <= 2; id++) {
		rig.mem.seg[id] = (gsd_mem_segment){id, aligned_alloc(4096, XFER_SIZE), XFER_SIZE};
		if (!rig.mem.seg[id].base)
			return -1;
	}
	rig.ranges[0] = (gsd_range){gs_addr_make(1, 0), XFER_SIZE, false};
	rig.ranges[1] = (gsd_range){gs_addr_make(2, 0), XFER_SIZE, true};
	uint8_t *src = rig.mem.seg[1].base, *dst = rig.mem.seg[2].base;
	uint8_t *want = aligned_alloc(4096, XFER_SIZE);
	if (!want)
		return -1;
	for (uint64_t i = 0; i < XFER_SIZE; i++)
		src[i] = (uint8_t)(i * 157 + (i >> 11));
	memset(dst, 0, XFER_SIZE);

	double share = o->seconds / nr;
	for (int i = 0; i < nr && i < 3; i++) {
		r[i] = (transfer_result){.kind = kinds[i].kind,
		                         .flags = kinds[i].flags,
		                         .pitch = kinds[i].flags ? XFER_PITCH : 0,
		                         .ok = true};
		if (transfer_build(&rig, r[i].flags | GS_TRANSFER_ALLOCATION_IS_IDLE, r[i].pitch) !=
		    0)
			return -1;
		r[i].pieces = rig.ncmds;
		transfer_time(&rig, share, &r[i].memcpy_mbs, &r[i].transfer_mbs, &r[i].ok);
		/* The last pass left the transfer's result in dst: check it whole. */
		if (r[i].flags == 0)
			memcpy(want, src, XFER_SIZE);
		else if (r[i].flags == GS_TRANSFER_SWIZZLE)
			gsd_swizzle(want, src, XFER_SIZE, XFER_PITCH);
		else
			gsd_unswizzle(want, src, XFER_SIZE, XFER_PITCH);
		r[i].ok = r[i].ok && memcmp(dst, want, XFER_SIZE) == 0;
		r[i].ratio = r[i].memcpy_mbs > 0 ? r[i].transfer_mbs / r[i].memcpy_mbs : 0;
	}
	free(rig.dma);
	free(rig.mem.seg[1].base);
	free(rig.mem.seg[2].base);
	free(want);
	return 0;
}

/* ---- fragmentation and compaction ---- */

typedef struct compact_result {
	unsigned freed_pct; /* of the live allocations, freed at random after the churn */
	uint64_t churn_steps;
	uint64_t live, free_bytes, free_extents;
	uint64_t largest_before, largest_after;
	double frac_before, frac_after;
	uint64_t moves, bytes_moved;
	double plan_ms, apply_ms;
	uint64_t want, want_moves, want_bytes; /* the targeted plan */
	bool heap_ok;
} compact_result;

/*
 * Builds the fragmented state: fill, churn (each step frees a random allocation and places a
 * random size), then free freed_pct of what is live. The seed makes every scenario start from
 * the same churn. Returns the live blocks, sorted by offset.
 */
static size_t fragment(gsd_heap *h, const workload *w, const options *o, unsigned freed_pct,
                       uint64_t *off, uint64_t *sz, gsd_live_block *blocks, compact_result *r)
{
	rng_state = o->seed ^ 0x5bd1e995;
	for (uint64_t i = 0; i < w->nlive; i++) {
		sz[i] = random_size();
		if (gsd_heap_alloc(h, sz[i], rnd() & 1, &off[i]) != 0)
			sz[i] = 0;
	}
	double start = gs_test_mono_s();
	uint64_t limit = 10 * w->nlive;
	for (uint64_t s = 0; s < limit; s++) {
		uint64_t v = rnd() % w->nlive;
		if (sz[v])
			gsd_heap_free(h, off[v], sz[v]);
		sz[v] = random_size();
		if (gsd_heap_alloc(h, sz[v], rnd() & 1, &off[v]) != 0)
			sz[v] = 0;
		r->churn_steps++;
		if ((s & 4095) == 0 && gs_test_mono_s() - start >= o->seconds)
			break;
	}
	size_t n = 0;
	for (uint64_t i = 0; i < w->nlive; i++) {
		if (!sz[i])
			continue;
		if (rnd() % 100 < freed_pct) {
			gsd_heap_free(h, off[i], sz[i]);
			continue;
		}
		blocks[n++] = (gsd_live_block){off[i], sz[i], true};
	}
	gsd_live_blocks_sort(blocks, n);
	return n;
}

static int bench_compact(const workload *w, const options *o, unsigned freed_pct, compact_result *r)
{
	memset(r, 0, sizeof(*r));
	r->freed_pct = freed_pct;
	uint64_t *off = malloc(w->nlive * sizeof(*off));
	uint64_t *sz = malloc(w->nlive * sizeof(*sz));
	gsd_live_block *blocks = malloc(w->nlive * sizeof(*blocks));
	gsd_move *moves = malloc(w->nlive * sizeof(*moves));
	gsd_heap h;
	if (!off || !sz || !blocks || !moves || gsd_heap_init(&h, w->heap_size) != 0)
		return -1;
	size_t n = fragment(&h, w, o, freed_pct, off, sz, blocks, r);
	r->live = n;
	r->free_bytes = h.size - h.used;
	r->free_extents = h.nfree;
	r->largest_before = gsd_heap_largest_free(&h);
	r->frac_before = r->free_bytes ? (double)r->largest_before / (double)r->free_bytes : 0;

	/* A targeted plan first (planning does not change the heap): one hole halfway between
	 * the largest extent and all free bytes. */
	size_t nmv = 0;
	r->want = r->largest_before + (r->free_bytes - r->largest_before) / 2;
	if (gsd_heap_compact_plan(blocks, n, h.size, r->want, moves, n, &nmv, NULL) == 0) {
		r->want_moves = nmv;
		for (size_t k = 0; k < nmv; k++)
			r->want_bytes += moves[k].size;
	}

	double t0 = gs_test_mono_s();
	uint64_t largest = 0;
	int rc = gsd_heap_compact_plan(blocks, n, h.size, 0, moves, n, &nmv, &largest);
	r->plan_ms = (gs_test_mono_s() - t0) * 1e3;
	if (rc != 0)
		return -1;
	r->moves = nmv;
	t0 = gs_test_mono_s();
	bool ok = true;
	for (size_t k = 0; k < nmv; k++) {
		gsd_heap_free(&h, moves[k].from, moves[k].size);
		ok &= gsd_heap_alloc_at(&h, moves[k].to, moves[k].size) == 0;
		r->bytes_moved += moves[k].size;
	}
	r->apply_ms = (gs_test_mono_s() - t0) * 1e3;
	r->largest_after = gsd_heap_largest_free(&h);
	r->frac_after = r->free_bytes ? (double)r->largest_after / (double)r->free_bytes : 0;
	r->heap_ok = ok && r->largest_after == largest && gsd_heap_check(&h) == 0;
	gsd_heap_fini(&h);
	free(off);
	free(sz);
	free(blocks);
	free(moves);
	return 0;
}

/* ---- output ---- */

static void print_table(FILE *out, const options *o, const workload *w, const alloc_result *a,
                        const swizzle_result *s, int ns, const compact_result *c, int nc,
                        const transfer_result *t, int nt)
{
	fprintf(out,
	        "\nbench_vidmm: %" PRIu64 " live allocations of 256 B..1 MiB in a %.1f GiB heap "
	        "model, %.1f s per measurement, seed %" PRIu64 "\n\n",
	        o->count, (double)w->heap_size / (double)GIB, o->seconds, o->seed);
	fprintf(out, "%-28s %14s %14s %8s %10s\n", "alloc+free churn", "ops/s", "ops", "seconds",
	        "no room");
	fprintf(out, "%-28s %14.0f %14" PRIu64 " %8.2f %10" PRIu64 "\n", "gsd_heap (best fit)",
	        a->heap.ops_per_s, a->heap.ops, a->heap.seconds, a->heap.failures);
	fprintf(out, "%-28s %14.0f %14" PRIu64 " %8.2f %10" PRIu64 "\n", "malloc/free (baseline)",
	        a->libc.ops_per_s, a->libc.ops, a->libc.seconds, a->libc.failures);
	fprintf(out, "%-28s %14.3f   (%" PRIu64 " free extents at the end)\n\n",
	        "ratio heap / malloc", a->ratio, a->free_extents);

	fprintf(out, "%-10s %12s %12s %12s %9s %9s %6s\n", "swizzle", "memcpy GB/s", "swz GB/s",
	        "unswz GB/s", "swz/cpy", "unswz/cpy", "trip");
	for (int i = 0; i < ns; i++)
		fprintf(out, "pitch %-4u %12.2f %12.2f %12.2f %9.3f %9.3f %6s\n", s[i].pitch,
		        s[i].memcpy_gbs, s[i].swizzle_gbs, s[i].unswizzle_gbs, s[i].swizzle_ratio,
		        s[i].unswizzle_ratio, s[i].round_trip_ok ? "ok" : "BAD");

	fprintf(out, "\nfragmentation: %" PRIu64 " churn steps (each frees one and places one)\n",
	        c[0].churn_steps);
	fprintf(out, "%-12s %8s %9s %8s %10s %10s %8s %10s %9s %11s\n", "then freed", "live",
	        "free GiB", "extents", "largest/", "after", "moves", "GiB moved", "plan ms",
	        "targeted");
	fprintf(out, "%-12s %8s %9s %8s %10s %10s %8s %10s %9s %11s\n", "", "", "", "", "free",
	        "compact", "", "", "", "GiB moved");
	for (int i = 0; i < nc; i++)
		fprintf(out,
		        "%10u %% %8" PRIu64 " %9.2f %8" PRIu64 " %10.4f %10.4f %8" PRIu64
		        " %10.2f %9.1f %11.2f%s\n",
		        c[i].freed_pct, c[i].live, (double)c[i].free_bytes / (double)GIB,
		        c[i].free_extents, c[i].frac_before, c[i].frac_after, c[i].moves,
		        (double)c[i].bytes_moved / (double)GIB, c[i].plan_ms,
		        (double)c[i].want_bytes / (double)GIB,
		        c[i].heap_ok ? "" : "  HEAP INCONSISTENT");
	fprintf(out,
	        "(largest/free: the largest free extent over all free bytes; after compact: once "
	        "the full\n plan is applied to the heap; targeted: the cheapest plan for one hole "
	        "halfway between\n the largest extent and all free bytes)\n");

	fprintf(out,
	        "\npaging transfer throughput: %llu MiB in %llu KiB TRANSFERs through "
	        "gsd_engine_exec_cmd\n",
	        (unsigned long long)(XFER_SIZE / MIB), (unsigned long long)(XFER_CHUNK / KIB));
	fprintf(out, "%-16s %8s %12s %12s %8s %s\n", "kind", "pieces", "MB/s", "memcpy MB/s",
	        "ratio", "(target >= 0.5)");
	for (int i = 0; i < nt; i++) {
		char kind[32];
		if (t[i].pitch)
			snprintf(kind, sizeof(kind), "%s p%u", t[i].kind, t[i].pitch);
		else
			snprintf(kind, sizeof(kind), "%s", t[i].kind);
		fprintf(out, "%-16s %8" PRIu64 " %12.0f %12.0f %8.3f %s%s\n", kind, t[i].pieces,
		        t[i].transfer_mbs, t[i].memcpy_mbs, t[i].ratio,
		        t[i].ratio >= XFER_TARGET ? "target met" : "missed",
		        t[i].ok ? "" : "  RESULT WRONG");
	}
}

static void print_json(const options *o, const workload *w, const alloc_result *a,
                       const swizzle_result *s, int ns, const compact_result *c, int nc,
                       const transfer_result *t, int nt)
{
	printf("{\"bench\":\"vidmm\",\"measure\":\"alloc\",\"live\":%" PRIu64
	       ",\"heap_bytes\":%" PRIu64 ",\"heap_ops_per_s\":%.0f,\"heap_ops\":%" PRIu64
	       ",\"heap_no_room\":%" PRIu64 ",\"malloc_ops_per_s\":%.0f,\"malloc_ops\":%" PRIu64
	       ",\"ratio\":%.4f,\"free_extents\":%" PRIu64 "}\n",
	       o->count, w->heap_size, a->heap.ops_per_s, a->heap.ops, a->heap.failures,
	       a->libc.ops_per_s, a->libc.ops, a->ratio, a->free_extents);
	for (int i = 0; i < ns; i++)
		printf("{\"bench\":\"vidmm\",\"measure\":\"swizzle\",\"pitch\":%u,\"bytes\":%llu,"
		       "\"memcpy_gbs\":%.3f,\"swizzle_gbs\":%.3f,\"unswizzle_gbs\":%.3f,"
		       "\"swizzle_ratio\":%.4f,\"unswizzle_ratio\":%.4f,\"round_trip_ok\":%s}\n",
		       s[i].pitch, (unsigned long long)SWIZZLE_SIZE, s[i].memcpy_gbs,
		       s[i].swizzle_gbs, s[i].unswizzle_gbs, s[i].swizzle_ratio,
		       s[i].unswizzle_ratio, s[i].round_trip_ok ? "true" : "false");
	for (int i = 0; i < nc; i++)
		printf("{\"bench\":\"vidmm\",\"measure\":\"compact\",\"freed_pct\":%u,"
		       "\"churn_steps\":%" PRIu64 ",\"live\":%" PRIu64 ",\"free_bytes\":%" PRIu64
		       ",\"free_extents\":%" PRIu64 ",\"largest_before\":%" PRIu64
		       ",\"largest_after\":%" PRIu64 ",\"frac_before\":%.4f,\"frac_after\":%.4f,"
		       "\"moves\":%" PRIu64 ",\"bytes_moved\":%" PRIu64
		       ",\"plan_ms\":%.2f,\"apply_ms\":%.2f,\"want\":%" PRIu64
		       ",\"want_moves\":%" PRIu64 ",\"want_bytes\":%" PRIu64 ",\"heap_ok\":%s}\n",
		       c[i].freed_pct, c[i].churn_steps, c[i].live, c[i].free_bytes,
		       c[i].free_extents, c[i].largest_before, c[i].largest_after, c[i].frac_before,
		       c[i].frac_after, c[i].moves, c[i].bytes_moved, c[i].plan_ms, c[i].apply_ms,
		       c[i].want, c[i].want_moves, c[i].want_bytes,
		       c[i].heap_ok ? "true" : "false");
	for (int i = 0; i < nt; i++)
		printf("{\"bench\":\"vidmm\",\"measure\":\"transfer\",\"kind\":\"%s\","
		       "\"pitch\":%u,\"bytes\":%llu,\"chunk\":%llu,\"pieces\":%" PRIu64
		       ",\"transfer_mbs\":%.1f,\"memcpy_mbs\":%.1f,\"ratio\":%.4f,"
		       "\"target_met\":%s,\"ok\":%s}\n",
		       t[i].kind, t[i].pitch, (unsigned long long)XFER_SIZE,
		       (unsigned long long)XFER_CHUNK, t[i].pieces, t[i].transfer_mbs,
		       t[i].memcpy_mbs, t[i].ratio, t[i].ratio >= XFER_TARGET ? "true" : "false",
		       t[i].ok ? "true" : "false");
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_vidmm [OPTIONS]\n"
	        "Segment heap placement + free throughput against malloc/free, swizzle and\n"
	        "unswizzle throughput against memcpy, the largest free extent after churn\n"
	        "without and with the compaction plan, and paging TRANSFER throughput through\n"
	        "the engine against memcpy.\n\n"
	        "Options:\n"
	        "  --count N      live allocations (default 100000, 1000..1000000); the heap "
	        "model\n"
	        "                 is 64 GiB per 100000\n"
	        "  --seconds S    time bound of each measurement (default 2)\n"
	        "  --seed N       random seed (default 1)\n"
	        "  --json         one JSON object per measurement on stdout; the table goes to "
	        "stderr\n"
	        "  -h, --help     show this help\n\n"
	        "Exit status: 0 when every measurement ran, the heap stayed consistent and every\n"
	        "conversion and transfer gave the right bytes, 1 otherwise, 2 usage.\n");
}

static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.count = 100000, .seconds = 2, .seed = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (strcmp(a, "--count") && strcmp(a, "--seconds") && strcmp(a, "--seed")) {
			fprintf(stderr, "bench_vidmm: unknown option %s\n", a);
			return -1;
		}
		if (!v) {
			fprintf(stderr, "bench_vidmm: %s needs a value\n", a);
			return -1;
		}
		i++;
		errno = 0;
		if (!strcmp(a, "--count")) {
			o->count = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->count < 1000 || o->count > 1000000)
				goto bad;
		} else if (!strcmp(a, "--seconds")) {
			o->seconds = strtod(v, &end);
			if (*end || errno || !(o->seconds > 0 && o->seconds <= 600))
				goto bad;
		} else {
			o->seed = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->seed == 0)
				goto bad;
		}
		continue;
	bad:
		fprintf(stderr, "bench_vidmm: bad value for %s: %s\n", a, v);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	options o;
	if (parse_args(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	workload w;
	alloc_result a = {0};
	swizzle_result s[2];
	compact_result c[2];
	transfer_result t[3];
	if (workload_make(&w, &o) != 0 || bench_alloc(&w, &o, &a) != 0 ||
	    bench_swizzle(&o, s, 2) != 0 || bench_compact(&w, &o, 0, &c[0]) != 0 ||
	    bench_compact(&w, &o, 25, &c[1]) != 0 || bench_transfer(&o, t, 3) != 0) {
		fprintf(stderr, "bench_vidmm: out of memory\n");
		return 1;
	}
	print_table(o.json ? stderr : stdout, &o, &w, &a, s, 2, c, 2, t, 3);
	if (o.json)
		print_json(&o, &w, &a, s, 2, c, 2, t, 3);
	workload_free(&w);
	return c[0].heap_ok && c[1].heap_ok && s[0].round_trip_ok && s[1].round_trip_ok &&
	                       t[0].ok && t[1].ok && t[2].ok
	               ? 0
	               : 1;
}
