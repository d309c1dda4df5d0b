/*
 * A first-in, first-out ring of fixed-size items that grows by doubling, shared by the daemon
 * (an engine thread's queue of packets) and the client library (an async completion queue).
 * Not thread-safe: its owner holds its own lock around every call.
 */
#ifndef GS_RING_H
#define GS_RING_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_ring {
	unsigned char *items;
	size_t size; /* bytes per item, set by GS_RING_INIT */
	size_t cap, head, len;
} gs_ring;

#define GS_RING_INIT(type) ((gs_ring){.size = sizeof(type)})

/* Makes room for at least need items in all, keeping their order: 0, or -1 without memory
 * (the ring is then unchanged). */
int gs_ring_reserve(gs_ring *r, size_t need);
/* Appends a copy of item: 0, or -1 when there is no room and no memory for it. */
int gs_ring_push(gs_ring *r, const void *item);
/* Moves up to max items from the front into out, oldest first; returns how many. */
size_t gs_ring_take(gs_ring *r, void *out, size_t max);
void gs_ring_free(gs_ring *r);

#ifdef __cplusplus
}
#endif

#endif
