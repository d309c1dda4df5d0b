/*
 * A latency histogram for the metrics endpoint: fixed buckets, updated with atomics so that any
 * thread may observe (the audit writer times submissions, the loop queue waits).
 */
#ifndef GSD_HISTO_H
#define GSD_HISTO_H

#include <stdatomic.h>
#include <stdint.h>

/* Upper bounds in ns: 100 us .. 10 s, then +Inf. */
#define GSD_HISTO_BUCKETS 16
static const uint64_t gsd_histo_bounds_ns[GSD_HISTO_BUCKETS] = {
        100000,   250000,    500000,    1000000,   2500000,    5000000,    10000000,   25000000,
        50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000};

typedef struct gsd_histo {
	_Atomic uint64_t counts[GSD_HISTO_BUCKETS + 1]; /* the last: above every bound */
	_Atomic uint64_t sum_ns;
} gsd_histo;

static inline void gsd_histo_observe(gsd_histo *h, uint64_t ns)
{
	int i = 0;
	while (i < GSD_HISTO_BUCKETS && ns > gsd_histo_bounds_ns[i])
		i++;
	atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

#endif
