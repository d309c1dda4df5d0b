/*
 * Open-addressing hash map from non-zero 64-bit keys (handles, packet ids) to pointers.
 * Linear probing with backward-shift deletion: no tombstones, so lookups stay short under
 * churn. Not thread-safe: the loop thread owns every map.
 */
#ifndef GS_HMAP_H
#define GS_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gs_hmap_slot {
	uint64_t key; /* 0 = empty */
	void *value;
} gs_hmap_slot;

typedef struct gs_hmap {
	gs_hmap_slot *slots;
	size_t cap; /* power of two, or 0 */
	size_t count;
} gs_hmap;

void gs_hmap_init(gs_hmap *m);
void gs_hmap_free(gs_hmap *m);
void *gs_hmap_get(const gs_hmap *m, uint64_t key);
/* Inserts or replaces. Returns 0, or -1 when out of memory. */
int gs_hmap_put(gs_hmap *m, uint64_t key, void *value);
/* Removes and returns the value, or NULL if absent. */
void *gs_hmap_del(gs_hmap *m, uint64_t key);

/* Visits every entry; the callback must not modify the map. */
void gs_hmap_each(const gs_hmap *m, void (*fn)(uint64_t key, void *value, void *arg), void *arg);

#endif
