#include "ring.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Copies n items starting at logical index from into out: at most two runs of the array. */
static void copy_out(const gs_ring *r, size_t from, size_t n, unsigned char *out)
{
	size_t at = (r->head + from) % r->cap;
	size_t first = r->cap - at < n ? r->cap - at : n;

	memcpy(out, r->items + at * r->size, first * r->size);
	memcpy(out + first * r->size, r->items, (n - first) * r->size);
}

int gs_ring_reserve(gs_ring *r, size_t need)
{
	size_t cap = r->cap ? r->cap : 16;
	unsigned char *items;

	if (need <= r->cap)
		return 0;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return -1;
		cap *= 2;
	}
	if (cap > SIZE_MAX / r->size)
		return -1;
	items = malloc(cap * r->size);
	if (!items)
		return -1;
	/* Unrolled so that the head is at 0 again. */
	if (r->len)
		copy_out(r, 0, r->len, items);
	free(r->items);
	r->items = items;
	r->cap = cap;
	r->head = 0;
	return 0;
}

int gs_ring_push(gs_ring *r, const void *item)
{
	if (r->len == r->cap && gs_ring_reserve(r, r->len + 1) != 0)
		return -1;
	memcpy(r->items + ((r->head + r->len) % r->cap) * r->size, item, r->size);
	r->len++;
	return 0;
}

size_t gs_ring_take(gs_ring *r, void *out, size_t max)
{
	size_t n = r->len < max ? r->len : max;

	if (n == 0)
		return 0;
	copy_out(r, 0, n, out);
	r->head = (r->head + n) % r->cap;
	r->len -= n;
	return n;
}

void gs_ring_free(gs_ring *r)
{
	free(r->items);
	r->items = NULL;
	r->cap = r->head = r->len = 0;
}
