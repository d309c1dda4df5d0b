#include "runq.h"

#include <stdlib.h>
#include <string.h>

void gs_runq_init(gs_runq *q)
{
	memset(q, 0, sizeof(*q));
}

void gs_runq_fini(gs_runq *q)
{
	for (uint32_t b = 0; b < GS_BANDS; b++)
		free(q->bands[b].heap);
	memset(q, 0, sizeof(*q));
}

static bool before(const gs_runq_entry *a, const gs_runq_entry *b)
{
	return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void place(gs_runq_band *band, size_t i, gs_runq_entry *e)
{
	band->heap[i] = e;
	e->index = (int32_t)i;
}

static void sift_up(gs_runq_band *band, size_t i)
{
	gs_runq_entry *e = band->heap[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!before(e, band->heap[parent]))
			break;
		place(band, i, band->heap[parent]);
		i = parent;
	}
	place(band, i, e);
}

static void sift_down(gs_runq_band *band, size_t i)
{
	gs_runq_entry *e = band->heap[i];
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

int gs_runq_top_band(const gs_runq *q)
{
	if (q->bitmap[1])
		return 64 + 63 - __builtin_clzll(q->bitmap[1]);
	if (q->bitmap[0])
		return 63 - __builtin_clzll(q->bitmap[0]);
	return -1;
}

int gs_runq_insert(gs_runq *q, gs_runq_entry *e)
{
	gs_runq_band *band = &q->bands[e->band];
	if (band->count == band->cap) {
		size_t ncap = band->cap ? band->cap * 2 : 8;
		gs_runq_entry **n = realloc(band->heap, ncap * sizeof(*n));
		if (!n)
			return -1;
		band->heap = n;
		band->cap = ncap;
	}
	if (e->key < band->min_key)
		e->key = band->min_key;
	band->count++;
	place(band, band->count - 1, e);
	sift_up(band, band->count - 1);
	q->bitmap[e->band / 64] |= UINT64_C(1) << (e->band % 64);
	q->count++;
	return 0;
}

void gs_runq_remove(gs_runq *q, gs_runq_entry *e)
{
	if (e->index < 0)
		return;
	gs_runq_band *band = &q->bands[e->band];
	size_t i = (size_t)e->index;
	gs_runq_entry *last = band->heap[--band->count];
	e->index = -1;
	q->count--;
	if (i < band->count) {
		place(band, i, last);
		sift_down(band, i);
		sift_up(band, (size_t)last->index);
	}
	/* The band's clock moves only in gs_runq_pop, to the key of the one that runs: moving it
	 * here, to whoever is now first, would lift a requeued context to its rival's key and
	 * turn every weighted share into 1:1. */
	if (band->count == 0)
		q->bitmap[e->band / 64] &= ~(UINT64_C(1) << (e->band % 64));
}

gs_runq_entry *gs_runq_peek(const gs_runq *q)
{
	int b = gs_runq_top_band(q);
	return b < 0 ? NULL : q->bands[b].heap[0];
}

gs_runq_entry *gs_runq_pop(gs_runq *q)
{
	gs_runq_entry *e = gs_runq_peek(q);
	if (e) {
		/* The band's clock moves to the key of the one that runs now. */
		if (e->key > q->bands[e->band].min_key)
			q->bands[e->band].min_key = e->key;
		gs_runq_remove(q, e);
	}
	return e;
}
