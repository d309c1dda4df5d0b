/*
 * A node's run queue of ready contexts: one band per (process class, context priority) pair,
 * 6 classes x 15 priorities = 90 bands, higher band first, and above them one band of the
 * daemon's own system contexts (the memory manager's paging), class GSD_CLASS_SYSTEM. Inside a
 * band, contexts share the engine by weighted virtual runtime (engine time consumed / weight): the
 * smallest key runs next, ties broken by a sequence number so the order is deterministic.
 *
 * Costs: insert, remove and pop O(log n) in the band's size, on a 4-ary heap of slots that
 * carry their entry's key (half the depth of a binary heap, and no entry read to compare);
 * finding the highest non-empty band O(1) (a bitmap). A pop moves the hole down to a leaf
 * choosing among four children without branches, with the next level's lines already
 * loading (runq.c, remove_at). An entry's key and seq must not change while it is queued.
 */
#ifndef GSD_RUNQ_H
#define GSD_RUNQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GSD_PRIORITY_MIN         (-7)
#define GSD_PRIORITY_MAX         7
#define GSD_PRIORITIES_PER_CLASS 15u
#define GSD_CLASSES              6u
#define GSD_CLIENT_BANDS         (GSD_CLASSES * GSD_PRIORITIES_PER_CLASS)
/* The daemon's system contexts: above REALTIME, never time-sliced, never boosted past. */
#define GSD_CLASS_SYSTEM GSD_CLASSES
#define GSD_BAND_SYSTEM  GSD_CLIENT_BANDS
#define GSD_BANDS        (GSD_CLIENT_BANDS + 1u)

static inline uint32_t gsd_band_of(uint32_t priority_class, int32_t priority)
{
	return priority_class * GSD_PRIORITIES_PER_CLASS + (uint32_t)(priority - GSD_PRIORITY_MIN);
}
static inline uint32_t gsd_band_class(uint32_t band)
{
	return band / GSD_PRIORITIES_PER_CLASS;
}

/* Embedded in whatever is scheduled (a context, or a tenant's group of contexts in a band). */
typedef struct gsd_runq_entry {
	uint64_t key; /* weighted virtual runtime */
	uint64_t seq; /* tie-break: lower first */
	uint32_t band;
	int32_t index; /* position in its band's heap; -1 when not queued */
	bool group;    /* the entry of a group (vidsch/policy.h), not of a context */
} gsd_runq_entry;

/* A heap slot: the entry's key kept beside it, so that ordering the heap reads one array
 * instead of every entry (at 10,000 contexts that was a cache miss per comparison); only equal
 * keys read the entries' seq. 16 bytes: a node's four children fill one cache line. */
typedef struct gsd_runq_slot {
	uint64_t key;
	gsd_runq_entry *e;
} gsd_runq_slot;

typedef struct gsd_runq_band {
	/* 4-ary: the children of i are 4i+1 .. 4i+4, which lie in one 64-byte line (heap + 1 is
	 * aligned: the array starts 3 slots into its allocation, mem). */
	gsd_runq_slot *heap;
	void *mem;
	size_t count, cap;
	uint64_t min_key; /* smallest key seen at the root lately: new arrivals start here */
} gsd_runq_band;

typedef struct gsd_runq {
	gsd_runq_band bands[GSD_BANDS];
	uint64_t bitmap[2]; /* bit b set <=> band b non-empty */
	size_t count;
} gsd_runq;

void gsd_runq_init(gsd_runq *q);
void gsd_runq_fini(gsd_runq *q);
static inline void gsd_runq_entry_init(gsd_runq_entry *e)
{
	e->key = 0;
	e->seq = 0;
	e->band = 0;
	e->index = -1;
	e->group = false;
}
static inline bool gsd_runq_queued(const gsd_runq_entry *e)
{
	return e->index >= 0;
}
/* Queues e in e->band with its key raised to at least the band's recent minimum, so a context
 * that slept does not bank credit and then monopolise the engine. Returns 0 or -1 (memory). */
int gsd_runq_insert(gsd_runq *q, gsd_runq_entry *e);
void gsd_runq_remove(gsd_runq *q, gsd_runq_entry *e);
/* Highest band, smallest key; NULL when empty. */
gsd_runq_entry *gsd_runq_peek(const gsd_runq *q);
gsd_runq_entry *gsd_runq_pop(gsd_runq *q);
/* Highest non-empty band, or -1. */
int gsd_runq_top_band(const gsd_runq *q);

/* One band's heap on its own (a tenant's contexts of one band: vidsch/policy.c), with the same
 * rules: insert raises the key to the band's recent minimum, pop moves that minimum. */
int gsd_runq_band_insert(gsd_runq_band *b, gsd_runq_entry *e);
void gsd_runq_band_remove(gsd_runq_band *b, gsd_runq_entry *e);
gsd_runq_entry *gsd_runq_band_pop(gsd_runq_band *b);
void gsd_runq_band_fini(gsd_runq_band *b);

#endif
