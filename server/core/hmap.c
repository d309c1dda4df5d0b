#include "core/hmap.h"

#include <stdlib.h>

/* A 64-bit mixer (splitmix64's finaliser): handles are sequential, so spread them. */
static size_t slot_of(const gsd_hmap *m, uint64_t key)
{
	key ^= key >> 30;
	key *= UINT64_C(0xbf58476d1ce4e5b9);
	key ^= key >> 27;
	key *= UINT64_C(0x94d049bb133111eb);
	key ^= key >> 31;
	return (size_t)key & (m->cap - 1);
}

void gsd_hmap_init(gsd_hmap *m)
{
	m->slots = NULL;
	m->cap = 0;
	m->count = 0;
}

void gsd_hmap_free(gsd_hmap *m)
{
	free(m->slots);
	gsd_hmap_init(m);
}

void *gsd_hmap_get(const gsd_hmap *m, uint64_t key)
{
	if (m->cap == 0 || key == 0)
		return NULL;
	for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (m->slots[i].key == key)
			return m->slots[i].value;
		if (m->slots[i].key == 0)
			return NULL;
	}
}

static int grow(gsd_hmap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	gsd_hmap_slot *ns = calloc(ncap, sizeof(*ns));
	if (!ns)
		return -1;
	gsd_hmap old = *m;
	m->slots = ns;
	m->cap = ncap;
	m->count = 0;
	for (size_t i = 0; i < old.cap; i++)
		if (old.slots[i].key)
			gsd_hmap_put(m, old.slots[i].key, old.slots[i].value);
	free(old.slots);
	return 0;
}

int gsd_hmap_put(gsd_hmap *m, uint64_t key, void *value)
{
	if (key == 0)
		return -1;
	/* Keep the load factor at or below 1/2 so probe sequences stay short. */
	if ((m->count + 1) * 2 > m->cap && grow(m) != 0)
		return -1;
	for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (m->slots[i].key == key) {
			m->slots[i].value = value;
			return 0;
		}
		if (m->slots[i].key == 0) {
			m->slots[i].key = key;
			m->slots[i].value = value;
			m->count++;
			return 0;
		}
	}
}

void *gsd_hmap_del(gsd_hmap *m, uint64_t key)
{
	if (m->cap == 0 || key == 0)
		return NULL;
	size_t mask = m->cap - 1;
	size_t i = slot_of(m, key);
	while (m->slots[i].key != key) {
		if (m->slots[i].key == 0)
			return NULL;
		i = (i + 1) & mask;
	}
	void *value = m->slots[i].value;
	/* Backward-shift: move later members of the cluster into the hole when their home slot
	 * does not lie cyclically in (hole, j]. */
	size_t hole = i;
	for (size_t j = (i + 1) & mask; m->slots[j].key != 0; j = (j + 1) & mask) {
		size_t home = slot_of(m, m->slots[j].key);
		int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
		if (!in_range) {
			m->slots[hole] = m->slots[j];
			hole = j;
		}
	}
	m->slots[hole].key = 0;
	m->slots[hole].value = NULL;
	m->count--;
	return value;
}

void gsd_hmap_each(const gsd_hmap *m, void (*fn)(uint64_t key, void *value, void *arg), void *arg)
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].key)
			fn(m->slots[i].key, m->slots[i].value, arg);
}
