/*
 * The inbox: what other threads hand the loop, in-process calls (gsd_rpc_inject) and closed
 * connections (requests from nng the loop takes itself). One FIFO per connection, drained
 * round-robin:
 * a connection with hundreds of requests queued delays another connection's request by at most
 * one request per connection that has work, not by its whole backlog. (How much one tenant can
 * queue at all is bounded by max_inflight_requests.) A connection's events stay in order: its
 * "closed" item comes after its requests.
 *
 * Callers hold rpc->lock.
 */
#include "rpc/internal.h"

#include <stdlib.h>
#include <string.h>

/* Queues kept for reuse once emptied, so a steady trickle does not malloc per request. */
#define SPARE_MAX 64

struct gsd_inbox_q {
	uint64_t key; /* pipe id + 1 (the map's keys are non-zero; in-process calls use pipe 0) */
	gsd_inbox_item *items;
	size_t head, n, cap;
	struct gsd_inbox_q *next; /* the ring of queues with work, or the spare list */
};

static bool q_push(struct gsd_inbox_q *q, gsd_inbox_item item)
{
	if (q->n == q->cap) {
		size_t ncap = q->cap ? q->cap * 2 : 8;
		gsd_inbox_item *items = malloc(ncap * sizeof(*items));
		if (!items)
			return false;
		for (size_t i = 0; i < q->n; i++)
			items[i] = q->items[(q->head + i) % q->cap];
		free(q->items);
		q->items = items;
		q->head = 0;
		q->cap = ncap;
	}
	q->items[(q->head + q->n) % q->cap] = item;
	q->n++;
	return true;
}

static struct gsd_inbox_q *q_get(gsd_inbox *ib, uint64_t key)
{
	struct gsd_inbox_q *q = gsd_hmap_get(&ib->queues, key);
	if (q)
		return q;
	q = ib->spare;
	if (q) {
		ib->spare = q->next;
		ib->nspare--;
	} else if (!(q = calloc(1, sizeof(*q)))) {
		return NULL;
	}
	q->key = key;
	q->head = q->n = 0;
	if (gsd_hmap_put(&ib->queues, key, q) != 0) {
		free(q->items);
		free(q);
		return NULL;
	}
	/* Joins the ring last: its turn comes after every queue already waiting. */
	if (!ib->cursor) {
		q->next = q;
		ib->cursor = ib->tail = q;
	} else {
		q->next = ib->cursor;
		ib->tail->next = q;
		ib->tail = q;
	}
	return q;
}

static void q_retire(gsd_inbox *ib, struct gsd_inbox_q *q)
{
	gsd_hmap_del(&ib->queues, q->key);
	if (ib->nspare < SPARE_MAX) {
		q->next = ib->spare;
		ib->spare = q;
		ib->nspare++;
	} else {
		free(q->items);
		free(q);
	}
}

bool gsd_inbox_push(gsd_inbox *ib, gsd_inbox_item item)
{
	struct gsd_inbox_q *q = q_get(ib, (uint64_t)item.pipe + 1);
	if (!q)
		return false;
	/* A queue just made for an item that does not fit stays empty in the ring until the next
	 * take removes it. */
	if (!q_push(q, item))
		return false;
	ib->count++;
	return true;
}

size_t gsd_inbox_take(gsd_inbox *ib, gsd_inbox_item *out, size_t max)
{
	size_t got = 0;
	while (got < max && ib->cursor) {
		struct gsd_inbox_q *q = ib->cursor;
		if (q->n > 0) {
			out[got++] = q->items[q->head];
			q->head = (q->head + 1) % q->cap;
			q->n--;
			ib->count--;
		}
		if (q->n > 0) {
			ib->tail = q;
			ib->cursor = q->next;
			continue;
		}
		/* Empty: leaves the ring. */
		if (q->next == q) {
			ib->cursor = ib->tail = NULL;
		} else {
			ib->tail->next = q->next;
			ib->cursor = q->next;
		}
		q_retire(ib, q);
	}
	return got;
}

void gsd_inbox_init(gsd_inbox *ib)
{
	memset(ib, 0, sizeof(*ib));
	gsd_hmap_init(&ib->queues);
}

void gsd_inbox_free(gsd_inbox *ib, void (*drop)(gsd_inbox_item *item))
{
	gsd_inbox_item item;
	while (gsd_inbox_take(ib, &item, 1) == 1)
		if (drop)
			drop(&item);
	while (ib->spare) {
		struct gsd_inbox_q *q = ib->spare;
		ib->spare = q->next;
		free(q->items);
		free(q);
	}
	gsd_hmap_free(&ib->queues);
}
