/*
 * Open-addressing hash map from non-zero 64-bit keys (handles, packet ids) to pointers.
 * Linear probing with backward-shift deletion: no tombstones, so lookups stay short under
 * churn. Not thread-safe: the loop thread owns every map.
 */
#ifndef GSD_HMAP_H
#define GSD_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gsd_hmap_slot {
	uint64_t key; /* 0 = empty */
	void *value;
} gsd_hmap_slot;

typedef struct gsd_hmap {
	gsd_hmap_slot *slots;
	size_t cap; /* power of two, or 0 */
	size_t count;
} gsd_hmap;

void gsd_hmap_init(gsd_hmap *m);
void gsd_hmap_free(gsd_hmap *m);
void *gsd_hmap_get(const gsd_hmap *m, uint64_t key);
/* Inserts or replaces. Returns 0, or -1 when out of memory. */
int gsd_hmap_put(gsd_hmap *m, uint64_t key, void *value);
/* Removes and returns the value, or NULL if absent. */
void *gsd_hmap_del(gsd_hmap *m, uint64_t key);

/* Visits every entry; the callback must not modify the map. */
void gsd_hmap_each(const gsd_hmap *m, void (*fn)(uint64_t key, void *value, void *arg), void *arg);

#endif
