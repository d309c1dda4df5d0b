#include "vidsch/runq.h"

#include "core/util.h"

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

static bool before(const gsd_runq_entry *a, const gsd_runq_entry *b)
{
	return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void place(gsd_runq_band *band, size_t i, gsd_runq_entry *e)
{
	band->heap[i] = e;
	e->index = (int32_t)i;
}

static void sift_up(gsd_runq_band *band, size_t i)
{
	gsd_runq_entry *e = band->heap[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!before(e, band->heap[parent]))
			break;
		place(band, i, band->heap[parent]);
		i = parent;
	}
	place(band, i, e);
}

static void sift_down(gsd_runq_band *band, size_t i)
{
	gsd_runq_entry *e = band->heap[i];
	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= band->count)
			break;
		if (child + 1 < band->count && before(band->heap[child + 1], band->heap[child]))
			child++;
		if (!before(band->heap[child], e))
			break;
		place(band, i, band->heap[child]);
		i = child;
	}
	place(band, i, e);
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
	gsd_runq_entry **n = gsd_grow(band->heap, &band->cap, band->count + 1, sizeof(*n), 8);
	if (!n)
		return -1;
	band->heap = n;
	if (e->key < band->min_key)
		e->key = band->min_key;
	band->count++;
	place(band, band->count - 1, e);
	sift_up(band, band->count - 1);
	return 0;
}

void gsd_runq_band_remove(gsd_runq_band *band, gsd_runq_entry *e)
{
	if (e->index < 0)
		return;
	size_t i = (size_t)e->index;
	gsd_runq_entry *last = band->heap[--band->count];
	e->index = -1;
	if (i < band->count) {
		place(band, i, last);
		sift_down(band, i);
		sift_up(band, (size_t)last->index);
	}
	/* The band's clock moves only when one is popped, to the key of the one that runs:
	 * moving it here, to whoever is now first, would lift a requeued context to its
	 * rival's key and turn every weighted share into 1:1. */
}

gsd_runq_entry *gsd_runq_band_pop(gsd_runq_band *band)
{
	if (band->count == 0)
		return NULL;
	gsd_runq_entry *e = band->heap[0];
	if (e->key > band->min_key)
		band->min_key = e->key;
	gsd_runq_band_remove(band, e);
	return e;
}

void gsd_runq_band_fini(gsd_runq_band *band)
{
	free(band->heap);
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
	return b < 0 ? NULL : q->bands[b].heap[0];
}

gsd_runq_entry *gsd_runq_pop(gsd_runq *q)
{
	gsd_runq_entry *e = gsd_runq_peek(q);
	if (e) {
		/* The band's clock moves to the key of the one that runs now. */
		if (e->key > q->bands[e->band].min_key)
			q->bands[e->band].min_key = e->key;
		gsd_runq_remove(q, e);
	}
	return e;
}
