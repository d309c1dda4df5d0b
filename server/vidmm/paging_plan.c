#include "vidmm/paging_plan.h"

#include "vidmm/heap.h"
#include "wddm.h"

#include <errno.h>
#include <stdlib.h>

/* ---- transfers ---- */

uint64_t gsd_transfer_pieces(uint64_t size, uint64_t chunk)
{
	if (size == 0 || chunk == 0)
		return 0;
	return size / chunk + (size % chunk != 0);
}

int64_t gsd_transfer_split(uint64_t size, uint64_t chunk, uint32_t base_flags, gsd_subtransfer *out,
                           size_t cap)
{
	const uint32_t both = GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE;
	if (size == 0 || chunk == 0 || (base_flags & ~GSD_TRANSFER_BASE_MASK) ||
	    (base_flags & both) == both)
		return -EINVAL;
	uint64_t pieces = gsd_transfer_pieces(size, chunk);
	if (pieces > cap || pieces > INT64_MAX)
		return -ENOBUFS;
	for (uint64_t i = 0; i < pieces; i++) {
		uint64_t offset = i * chunk;
		uint32_t flags = base_flags;
		if (i == 0)
			flags |= GS_TRANSFER_START;
		if (i == pieces - 1)
			flags |= GS_TRANSFER_END;
		out[i] = (gsd_subtransfer){offset, size - offset < chunk ? size - offset : chunk,
		                           flags};
	}
	return (int64_t)pieces;
}

/* ---- priorities ---- */

uint32_t gsd_alloc_priority_effective(uint32_t priority)
{
	return priority ? priority : GS_ALLOC_PRIORITY_NORMAL;
}

bool gsd_should_evict_for_preference(uint32_t new_priority, const uint32_t *victim_priorities,
                                     size_t n)
{
	uint32_t p = gsd_alloc_priority_effective(new_priority);
	if (p < GS_ALLOC_PRIORITY_HIGH)
		return false;
	for (size_t i = 0; i < n; i++)
		if (gsd_alloc_priority_effective(victim_priorities[i]) >= p)
			return false;
	return true;
}

uint32_t gsd_victims_max_priority(const gsd_victim_candidate *c, const size_t *idx, size_t n)
{
	uint32_t m = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t p = gsd_alloc_priority_effective(c[idx[i]].priority);
		if (p > m)
			m = p;
	}
	return m;
}

/* ---- victims by bytes ---- */

/* Eviction order: lowest priority, then least recently used, then lowest index (so equal
 * candidates always come out the same way). */
static int cmp_victim(const void *a, const void *b, void *arg)
{
	const gsd_victim_candidate *c = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	uint32_t pi = gsd_alloc_priority_effective(c[i].priority);
	uint32_t pj = gsd_alloc_priority_effective(c[j].priority);
	if (pi != pj)
		return pi < pj ? -1 : 1;
	if (c[i].last_use != c[j].last_use)
		return c[i].last_use < c[j].last_use ? -1 : 1;
	return (i > j) - (i < j);
}

int gsd_pick_victims(const gsd_victim_candidate *c, size_t n, uint64_t need_bytes, size_t *out,
                     size_t cap, size_t *nout)
{
	*nout = 0;
	if (cap < n)
		return -EINVAL;
	if (need_bytes == 0)
		return 0;
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (!c[i].pinned)
			out[m++] = i;
	qsort_r(out, m, sizeof(*out), cmp_victim, (void *)c);
	uint64_t sum = 0;
	size_t k = 0;
	while (k < m && sum < need_bytes)
		sum += gsd_heap_round(c[out[k++]].size);
	if (sum < need_bytes)
		return -ENOSPC;
	/* The last victim is needed (the prefix before it fell short); earlier ones may not be
	 * once it is in. Spare the most valued first: walk back from the one before it. */
	size_t kept = k;
	for (size_t i = k - 1; i-- > 0;) {
		uint64_t s = gsd_heap_round(c[out[i]].size);
		if (sum - s >= need_bytes) {
			sum -= s;
			out[i] = SIZE_MAX;
			kept--;
		}
	}
	size_t w = 0;
	for (size_t i = 0; i < k; i++)
		if (out[i] != SIZE_MAX)
			out[w++] = out[i];
	*nout = kept;
	return 0;
}

/* ---- victims for one contiguous hole ---- */

typedef struct best_run {
	bool found;
	uint32_t max_priority;
	uint64_t newest_use; /* the most recent last_use among the victims */
	uint64_t bytes;
	size_t k, count;
	uint64_t hole;
} best_run;

static bool run_better(const best_run *b, uint32_t maxp, uint64_t newest, uint64_t bytes)
{
	if (!b->found)
		return true;
	if (maxp != b->max_priority)
		return maxp < b->max_priority;
	if (newest != b->newest_use)
		return newest < b->newest_use; /* least recently used */
	return bytes < b->bytes;               /* ties keep the earlier (lower) run */
}

/*
 * The heap's window scan with evicted victims: for each first victim k the shortest run k..hi-1
 * whose bytes and gaps k..hi together reach need. A longer run from the same k only adds bytes
 * and can only raise the highest priority, so the shortest one is the best from k. Two deques
 * keep the run's highest priority (dq: indices, priorities decreasing from the front) and its
 * newest last_use (du) at their fronts.
 */
typedef struct scan_state {
	const gsd_victim_candidate *c;
	uint64_t need;
	size_t *dq, *du;
	size_t head, tail, uhead, utail;
	uint64_t bytes; /* of the victims in the run */
	best_run best;
} scan_state;

static void scan_enter(void *arg, size_t i)
{
	scan_state *st = arg;
	const gsd_victim_candidate *c = st->c;
	uint32_t p = gsd_alloc_priority_effective(c[i].priority);
	while (st->tail > st->head &&
	       gsd_alloc_priority_effective(c[st->dq[st->tail - 1]].priority) <= p)
		st->tail--;
	st->dq[st->tail++] = i;
	while (st->utail > st->uhead && c[st->du[st->utail - 1]].last_use <= c[i].last_use)
		st->utail--;
	st->du[st->utail++] = i;
	st->bytes += gsd_heap_round(c[i].size);
}

static void scan_leave(void *arg, size_t i)
{
	scan_state *st = arg;
	if (st->dq[st->head] == i)
		st->head++;
	if (st->du[st->uhead] == i)
		st->uhead++;
	st->bytes -= gsd_heap_round(st->c[i].size);
}

static void scan_window(void *arg, const gsd_heap_region *r, size_t k, size_t count, uint64_t start)
{
	(void)r;
	scan_state *st = arg;
	const gsd_victim_candidate *c = st->c;
	uint32_t maxp = st->tail > st->head
	                        ? gsd_alloc_priority_effective(c[st->dq[st->head]].priority)
	                        : 0;
	uint64_t newest = st->utail > st->uhead ? c[st->du[st->uhead]].last_use : 0;
	if (run_better(&st->best, maxp, newest, st->bytes))
		st->best = (best_run){true, maxp, newest, st->bytes, k, count, start};
}

/* Each region starts with an empty run. */
static int scan_region(const gsd_live_block *b, const gsd_heap_region *r, void *arg)
{
	scan_state *st = arg;
	st->head = st->tail = st->uhead = st->utail = 0;
	st->bytes = 0;
	const gsd_heap_window w = {st->need, true, scan_enter, scan_leave, scan_window, st};
	gsd_heap_window_scan(b, r, &w);
	return 0;
}

int gsd_pick_victims_contiguous(const gsd_victim_candidate *c, size_t n, uint64_t segment_size,
                                uint64_t need_bytes, size_t *out, size_t cap, size_t *nout,
                                uint64_t *hole_offset)
{
	*nout = 0;
	*hole_offset = 0;
	if (cap < n || need_bytes > segment_size)
		return -EINVAL;
	for (uint64_t i = 0, end = 0; i < n; i++)
		if (!gsd_heap_block_fits(c[i].offset, c[i].size, segment_size, &end))
			return -EINVAL;
	if (need_bytes == 0)
		return 0;
	/* The candidates as the heap's planner sees them: the pinned ones cut the segment into
	 * regions. dq and du are the scan's deques. */
	const size_t m = n ? n : 1;
	gsd_live_block *b = malloc(m * sizeof(*b));
	size_t *dq = out, *du = malloc(m * sizeof(*du));
	if (!b || !du) {
		free(b);
		free(du);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		b[i] = (gsd_live_block){c[i].offset, c[i].size, !c[i].pinned};
	scan_state st = {.c = c, .need = gsd_heap_round(need_bytes), .dq = dq, .du = du};
	gsd_heap_regions_each(b, n, segment_size, scan_region, &st);
	free(b);
	free(du);
	const best_run best = st.best;
	if (!best.found)
		return -ENOSPC;
	for (size_t i = 0; i < best.count; i++)
		out[i] = best.k + i;
	*nout = best.count;
	*hole_offset = best.hole;
	return 0;
}
