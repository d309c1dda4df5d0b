#include "vidsch/runq.h"

#include "core/util.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void gsd_runq_init(gsd_runq *q)
{
	memset(q, 0, sizeof(*q));
}

void gsd_runq_fini(gsd_runq *q)
{
	for (uint32_t b = 0; b < GSD_BANDS; b++)
		gsd_runq_band_fini(&q->bands[b]);
	memset(q, 0, sizeof(*q));
}

#define ARITY 4

static bool before(const gsd_runq_slot *a, const gsd_runq_slot *b)
{
	return a->key < b->key || (a->key == b->key && a->e->seq < b->e->seq);
}

/* Room for need slots, children lines aligned (see gsd_runq_band). */
static int reserve(gsd_runq_band *band, size_t need)
{
	if (need <= band->cap)
		return 0;
	size_t cap = band->cap ? band->cap : 5;
	while (cap < need) {
		if (cap > SIZE_MAX / 2 / sizeof(gsd_runq_slot) - 4)
			return -1;
		cap *= 2;
	}
	size_t bytes = (cap + 3) * sizeof(gsd_runq_slot);
	bytes = (bytes + 63) & ~(size_t)63;
	gsd_runq_slot *mem = aligned_alloc(64, bytes);
	if (!mem)
		return -1;
	if (band->count)
		memcpy(mem + 3, band->heap, band->count * sizeof(*mem));
	free(band->mem);
	band->mem = mem;
	band->heap = mem + 3;
	band->cap = cap;
	return 0;
}

static void place(gsd_runq_band *band, size_t i, gsd_runq_slot s)
{
	band->heap[i] = s;
	s.e->index = (int32_t)i;
}

static void sift_up(gsd_runq_band *band, size_t i)
{
	gsd_runq_slot s = band->heap[i];
	while (i > 0) {
		size_t parent = (i - 1) / ARITY;
		if (!before(&s, &band->heap[parent]))
			break;
		place(band, i, band->heap[parent]);
		i = parent;
	}
	place(band, i, s);
}

/* The first of the children first..end-1 in heap order. */
static size_t best_of(const gsd_runq_slot *h, size_t first, size_t end)
{
	size_t best = first;
	for (size_t c = first + 1; c < end; c++)
		if (before(&h[c], &h[best]))
			best = c;
	return best;
}

/*
 * The child of a node whose children start at first (count slots in all). Four children are
 * compared as a tournament of keys with conditional moves, not branches: which child is
 * smallest is as likely one as another, so a branch on it is poorly predicted at every level.
 * Equal keys (rare, but contexts that slept share the band's clock) go to the full
 * comparison, which reads seq.
 */
static size_t best_child(const gsd_runq_slot *h, size_t first, size_t count)
{
	if (first + ARITY > count)
		return best_of(h, first, count);
	uint64_t k0 = h[first].key, k1 = h[first + 1].key, k2 = h[first + 2].key,
	         k3 = h[first + 3].key;
	size_t a = k1 < k0, b = k3 < k2 ? 3 : 2;
	uint64_t ka = k1 < k0 ? k1 : k0, kb = k3 < k2 ? k3 : k2;
	/* Two smallest keys that are equal meet in one of the three matches. */
	if ((k0 == k1) | (k2 == k3) | (ka == kb))
		return best_of(h, first, first + ARITY);
	return first + (kb < ka ? b : a);
}

/*
 * Empties slot i and fills it again from the heap's last slot: the hole goes down to a leaf
 * along the best children (no comparison with the slot that moves: it came from the bottom and
 * nearly always goes back near it), and the last slot goes up from there as far as it must.
 */
static void remove_at(gsd_runq_band *band, size_t i)
{
	gsd_runq_slot last = band->heap[--band->count];
	if (i == band->count)
		return;
	for (;;) {
		size_t first = ARITY * i + 1;
		if (first >= band->count)
			break;
		/* The grandchildren (16 slots, four lines in a row) load while the children
		 * are compared: the chain of dependent loads is what a deep heap costs. */
		size_t grand = ARITY * first + 1;
		if (grand < band->count) {
			/* Addresses as integers: the block may run past the array's end, and
			 * a prefetch never faults. */
			uintptr_t g = (uintptr_t)&band->heap[grand];
			for (uintptr_t off = 0; off < 256; off += 64)
				__builtin_prefetch((const void *)(g + off));
		}
		size_t c = best_child(band->heap, first, band->count);
		place(band, i, band->heap[c]);
		i = c;
	}
	band->heap[i] = last;
	sift_up(band, i);
}

int gsd_runq_top_band(const gsd_runq *q)
{
	if (q->bitmap[1])
		return 64 + 63 - __builtin_clzll(q->bitmap[1]);
	if (q->bitmap[0])
		return 63 - __builtin_clzll(q->bitmap[0]);
	return -1;
}

int gsd_runq_band_insert(gsd_runq_band *band, gsd_runq_entry *e)
{
	if (reserve(band, band->count + 1) != 0)
		return -1;
	if (e->key < band->min_key)
		e->key = band->min_key;
	band->count++;
	place(band, band->count - 1, (gsd_runq_slot){e->key, e});
	sift_up(band, band->count - 1);
	return 0;
}

void gsd_runq_band_remove(gsd_runq_band *band, gsd_runq_entry *e)
{
	if (e->index < 0)
		return;
	size_t i = (size_t)e->index;
	/* A key changed while queued would leave the heap out of order. */
	assert(band->heap[i].e == e && band->heap[i].key == e->key);
	remove_at(band, i);
	e->index = -1;
	/* The band's clock moves only when one is popped, to the key of the one that runs:
	 * moving it here, to whoever is now first, would lift a requeued context to its
	 * rival's key and turn every weighted share into 1:1. */
}

/* Takes the root out. The key comes from its slot and its place is known (0), so the entry
 * itself is only written; the next root's entry is loaded meanwhile, for the next pop (with
 * thousands of contexts it is usually not in the cache). */
static gsd_runq_entry *pop_root(gsd_runq_band *band)
{
	gsd_runq_slot root = band->heap[0];
	if (root.key > band->min_key)
		band->min_key = root.key;
	remove_at(band, 0);
	root.e->index = -1;
	if (band->count)
		__builtin_prefetch(band->heap[0].e);
	return root.e;
}

gsd_runq_entry *gsd_runq_band_pop(gsd_runq_band *band)
{
	return band->count ? pop_root(band) : NULL;
}

void gsd_runq_band_fini(gsd_runq_band *band)
{
	free(band->mem);
	memset(band, 0, sizeof(*band));
}

int gsd_runq_insert(gsd_runq *q, gsd_runq_entry *e)
{
	if (gsd_runq_band_insert(&q->bands[e->band], e) != 0)
		return -1;
	q->bitmap[e->band / 64] |= UINT64_C(1) << (e->band % 64);
	q->count++;
	return 0;
}

void gsd_runq_remove(gsd_runq *q, gsd_runq_entry *e)
{
	if (e->index < 0)
		return;
	gsd_runq_band *band = &q->bands[e->band];
	gsd_runq_band_remove(band, e);
	q->count--;
	if (band->count == 0)
		q->bitmap[e->band / 64] &= ~(UINT64_C(1) << (e->band % 64));
}

gsd_runq_entry *gsd_runq_peek(const gsd_runq *q)
{
	int b = gsd_runq_top_band(q);
	return b < 0 ? NULL : q->bands[b].heap[0].e;
}

gsd_runq_entry *gsd_runq_pop(gsd_runq *q)
{
	int b = gsd_runq_top_band(q);
	if (b < 0)
		return NULL;
	/* The band's clock moves to the key of the one that runs now. */
	gsd_runq_entry *e = pop_root(&q->bands[b]);
	q->count--;
	if (q->bands[b].count == 0)
		q->bitmap[b / 64] &= ~(UINT64_C(1) << (b % 64));
	return e;
}
