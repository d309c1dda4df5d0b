/*
 * A node's run queue of ready contexts: one band per (process class, context priority) pair,
 * 6 classes x 15 priorities = 90 bands, higher band first, and above them one band of the
 * daemon's own system contexts (the memory manager's paging), class GS_CLASS_SYSTEM. Inside a band,
 * contexts share the engine by weighted virtual runtime (engine time consumed / weight): the
 * smallest key runs next, ties broken by a sequence number so the order is deterministic.
 *
 * Costs: insert, remove and pop O(log n) in the band's size; finding the highest non-empty
 * band O(1) (a bitmap).
 */
#ifndef GS_RUNQ_H
#define GS_RUNQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GS_PRIORITY_MIN         (-7)
#define GS_PRIORITY_MAX         7
#define GS_PRIORITIES_PER_CLASS 15u
#define GS_CLASSES              6u
#define GS_CLIENT_BANDS         (GS_CLASSES * GS_PRIORITIES_PER_CLASS)
/* The daemon's system contexts: above REALTIME, never time-sliced, never boosted past. */
#define GS_CLASS_SYSTEM GS_CLASSES
#define GS_BAND_SYSTEM  GS_CLIENT_BANDS
#define GS_BANDS        (GS_CLIENT_BANDS + 1u)

static inline uint32_t gs_band_of(uint32_t priority_class, int32_t priority)
{
	return priority_class * GS_PRIORITIES_PER_CLASS + (uint32_t)(priority - GS_PRIORITY_MIN);
}
static inline uint32_t gs_band_class(uint32_t band)
{
	return band / GS_PRIORITIES_PER_CLASS;
}

/* Embedded in whatever is scheduled (a context). */
typedef struct gs_runq_entry {
	uint64_t key; /* weighted virtual runtime */
	uint64_t seq; /* tie-break: lower first */
	uint32_t band;
	int32_t index; /* position in its band's heap; -1 when not queued */
} gs_runq_entry;

typedef struct gs_runq_band {
	gs_runq_entry **heap;
	size_t count, cap;
	uint64_t min_key; /* smallest key seen at the root lately: new arrivals start here */
} gs_runq_band;

typedef struct gs_runq {
	gs_runq_band bands[GS_BANDS];
	uint64_t bitmap[2]; /* bit b set <=> band b non-empty */
	size_t count;
} gs_runq;

void gs_runq_init(gs_runq *q);
void gs_runq_fini(gs_runq *q);
static inline void gs_runq_entry_init(gs_runq_entry *e)
{
	e->key = 0;
	e->seq = 0;
	e->band = 0;
	e->index = -1;
}
static inline bool gs_runq_queued(const gs_runq_entry *e)
{
	return e->index >= 0;
}
/* Queues e in e->band with its key raised to at least the band's recent minimum, so a context
 * that slept does not bank credit and then monopolise the engine. Returns 0 or -1 (memory). */
int gs_runq_insert(gs_runq *q, gs_runq_entry *e);
void gs_runq_remove(gs_runq *q, gs_runq_entry *e);
/* Highest band, smallest key; NULL when empty. */
gs_runq_entry *gs_runq_peek(const gs_runq *q);
gs_runq_entry *gs_runq_pop(gs_runq *q);
/* Highest non-empty band, or -1. */
int gs_runq_top_band(const gs_runq *q);

#endif
