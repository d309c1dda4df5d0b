/*
 * The scheduling policy of one node, as pure functions over its queue of ready contexts: which
 * context runs next, for how long, and whether a newcomer stops the one running. Nothing here
 * touches packets, engines, timers or the audit, so a unit test drives it with a mock engine
 * on a virtual clock (tests/unit/test_policy.c) and the decision benchmark measures exactly
 * the code the daemon runs.
 *
 * The rules (docs/concepts.md, Priorities and bands):
 * - Bands. A context's band is its process class x context priority (runq.h); the highest
 *   band with a ready context runs. The daemon's system contexts (paging) sit above every
 *   client band.
 * - Weighted shares. Inside a band the context with the least weighted engine time runs:
 *   every run charges engine_ns * 1024 / weight to its key, so contexts of one band share the
 *   engine in proportion to their weights.
 * - Tenant groups. A context may belong to a group (its tenant's, on this node; the adapter's
 *   share policy decides: vidsch.c). Inside a band the group with the least weighted engine
 *   time goes first, then its context with the least: every run also charges the group,
 *   engine_ns * 1024 / group weight. So tenants share a band in proportion to their group
 *   weights however many contexts each opens, and a tenant's contexts share its part. A group
 *   coming back from idle starts at the band's recent minimum, like a context.
 * - Quantum. A run gets a budget of one quantum when another context of its band or a higher
 *   one waits (it is "contended"); REALTIME and system runs are never time-sliced.
 * - Starvation. A ready context that is owed progress (not IDLE, not system) and has waited
 *   longer than the starvation limit runs next for one quantum, unless REALTIME (or system)
 *   work is ready.
 * - Arrival. A newcomer of a higher band preempts the run at once; one of the same band ends
 *   an unbudgeted run after one quantum (the caller arms that timer).
 * - Fixed shares (params.period_ns set: the adapter's fixed_share policy). Every period each
 *   group may use period * weight / (sum of the weights of the node's groups) of engine time,
 *   whether the others use theirs or not: a group that has used its part is throttled (its
 *   contexts leave the queue) until the next period, even if the engine then idles, and a
 *   run's budget never goes past what is left of its group's part. No starvation boost: every
 *   group gets its part each period. This is the time-sliced vGPU model in which a tenant's
 *   performance does not depend on its neighbours.
 */
#ifndef GSD_POLICY_H
#define GSD_POLICY_H

#include "core/list.h"
#include "vidsch/runq.h"

#include <stdbool.h>
#include <stdint.h>

/* Weighted runtime: engine ns scaled by 1024 / weight. */
#define GSD_WEIGHT_SCALE 1024u

typedef struct gsd_sched_queue gsd_sched_queue;
typedef struct gsd_sched_group gsd_sched_group;

/* A group's ready contexts of one band, queued in the node's queue as one entry. */
typedef struct gsd_sched_gband {
	gsd_runq_entry rq;  /* in the node's queue (rq.group set); key = the group's runtime */
	gsd_runq_band ctxs; /* its ready contexts of this band */
	gsd_sched_group *g;
	gsd_list link; /* in g->queued while rq is queued */
} gsd_sched_gband;

/* A tenant's contexts on one node (made by gsd_policy_group, shared by reference). */
struct gsd_sched_group {
	gsd_sched_queue *q;
	const void *owner; /* the tenant */
	uint32_t weight;
	uint64_t vruntime;                 /* weighted engine time: engine ns * 1024 / weight */
	uint64_t engine_ns;                /* engine time consumed */
	uint32_t refs;                     /* contexts in it */
	uint64_t seq;                      /* tie-break among equal runtimes */
	uint64_t period_used;              /* fixed shares: engine time in this period */
	bool throttled;                    /* fixed shares: its part is used up, out of the queue */
	gsd_list queued;                   /* its gbands in the queue */
	gsd_list link;                     /* in q->groups */
	gsd_sched_gband *bands[GSD_BANDS]; /* made when first used */
};

/* What the policy knows of a context; embedded in it (core/object.h). */
typedef struct gsd_sched_entity {
	gsd_runq_entry rq;   /* in the queue while its next packet may run */
	gsd_list ready_link; /* in the queue's FIFO of contexts owed progress */
	uint64_t ready_since;
	uint32_t priority_class; /* GS_PRIORITY_CLASS_*, or GSD_CLASS_SYSTEM */
	int32_t priority;        /* -7..+7 */
	uint32_t weight;         /* share of its band */
	uint64_t engine_ns;      /* engine time consumed */
	uint64_t seq;            /* tie-break among equal keys: lower first (creation order) */
	gsd_sched_group *group;  /* its tenant's group, or NULL (scheduled on its own) */
} gsd_sched_entity;

/* A node's ready contexts; embedded in the node (core/adapter.h). */
struct gsd_sched_queue {
	gsd_runq rq;
	gsd_list ready_fifo; /* contexts owed progress, longest waiting first */
	gsd_list groups;     /* every group of this node */
	uint64_t group_seq;
	/* Fixed shares: the period the last pick used (0: none) and when the current one began. */
	uint64_t period_ns, period_start;
};

typedef struct gsd_sched_params {
	uint64_t quantum_ns;
	uint64_t starvation_ns;
	uint64_t period_ns; /* fixed shares: the accounting period; 0: work conserving */
} gsd_sched_params;

/* fixed_share: a tenant's part is counted over periods of this many time slices. */
#define GSD_FIXED_PERIOD_SLICES 10u

/* A node's parameters: a time slice of slice_us, the starvation limit, and with fixed shares
 * the accounting period of GSD_FIXED_PERIOD_SLICES slices (the daemon's adapters and
 * gpusched-sim's both come from here). */
gsd_sched_params gsd_policy_params(uint32_t slice_us, uint32_t starvation_ms, bool fixed_shares);

void gsd_policy_queue_init(gsd_sched_queue *q);
void gsd_policy_queue_fini(gsd_sched_queue *q);
void gsd_policy_entity_init(gsd_sched_entity *e, uint32_t priority_class, int32_t priority,
                            uint32_t weight, uint64_t seq);
/* The group of owner on this node, made with weight when it has none (its weight is then
 * set to weight); it counts one more context. NULL when memory is short. */
gsd_sched_group *gsd_policy_group(gsd_sched_queue *q, const void *owner, uint32_t weight);
/* The same for an owner known to have no group on this node yet, without looking (O(1)):
 * gpusched-sim places thousands of tenants on an engine. */
gsd_sched_group *gsd_policy_group_new(gsd_sched_queue *q, const void *owner, uint32_t weight);
/* Gives owner's group on this node (if it has one) a new weight: its later runs are charged
 * by it. */
void gsd_policy_group_reweigh(gsd_sched_queue *q, const void *owner, uint32_t weight);
/* Puts a context (not queued) in group g, which it then holds until gsd_policy_entity_fini. */
void gsd_policy_entity_join(gsd_sched_entity *e, gsd_sched_group *g);
/* Lets go of the context's group (the last context frees it); the context must not be
 * queued. */
void gsd_policy_entity_fini(gsd_sched_entity *e);

uint32_t gsd_policy_band(const gsd_sched_entity *e);
static inline bool gsd_policy_queued(const gsd_sched_entity *e)
{
	return gsd_runq_queued(&e->rq);
}
/* Is a context of this class owed progress (starvation boost)? Not IDLE, not system. */
bool gsd_policy_owed_progress(uint32_t priority_class);
/* Is a run of this class ever time-sliced? Not REALTIME, not system. */
bool gsd_policy_time_sliced(uint32_t priority_class);

/* Queues a context whose next packet may run, ready since `now`. Returns 0, or -1 when
 * memory is short (it is then not queued). */
int gsd_policy_enqueue(gsd_sched_queue *q, gsd_sched_entity *e, uint64_t now);
/* Takes a queued context out (safe when it is not queued). */
void gsd_policy_dequeue(gsd_sched_queue *q, gsd_sched_entity *e);
/* Changes the band of a context; requeues it when it was queued. Returns 0 or -1 (memory). */
int gsd_policy_set_priority(gsd_sched_queue *q, gsd_sched_entity *e, uint32_t priority_class,
                            int32_t priority, uint64_t now);

/* The context that runs next, taken out of the queue, or NULL when none is ready. *boosted
 * (may be NULL) tells whether the starvation rule chose it. */
gsd_sched_entity *gsd_policy_pick(gsd_sched_queue *q, uint64_t now, const gsd_sched_params *p,
                                  bool *boosted);
/* The engine time a run of e may consume now (e already picked): one quantum when a context
 * of its band or a higher one waits and e is time-sliced, else 0 (no limit). */
uint64_t gsd_policy_budget(const gsd_sched_queue *q, const gsd_sched_entity *e,
                           const gsd_sched_params *p);
/* Charges a finished run's engine time to e (with fixed shares, to its group's part of the
 * period, throttling the group once that is used). */
void gsd_policy_charge(gsd_sched_entity *e, uint64_t engine_ns);
/* Fixed shares: when a throttled group has ready contexts, the time the next period begins
 * (the caller wakes the node then, its engine idle meanwhile); else 0. */
uint64_t gsd_policy_refill_at(const gsd_sched_queue *q, const gsd_sched_params *p);

typedef enum gsd_policy_verdict {
	GSD_POLICY_KEEP = 0,  /* the run goes on */
	GSD_POLICY_PREEMPT,   /* preempt the run now: the newcomer's band is higher */
	GSD_POLICY_END_SLICE, /* the unbudgeted run now shares its band: end it after a quantum */
	GSD_POLICY_PREEMPT_OWED, /* preempt the run now: the newcomer's tenant has had less */
} gsd_policy_verdict;
/*
 * A context became ready while `running` runs (unbudgeted when budget is 0), which has used
 * running_ns of engine time so far (0 when not known). In the same band, a newcomer of another
 * tenant's group that has had less weighted engine time than the running group will have once
 * charged for this run so far preempts it at once (like a waking task in CFS), so a light
 * tenant's packet does not wait out a heavy tenant's slice.
 */
gsd_policy_verdict gsd_policy_on_arrival(const gsd_sched_entity *newcomer,
                                         const gsd_sched_entity *running, uint64_t budget,
                                         uint64_t running_ns);
/* Should `running` be preempted because a queued context outranks it (after its priority was
 * lowered), or because its quantum ended while its band or a higher one waits? */
bool gsd_policy_outranked(const gsd_sched_queue *q, const gsd_sched_entity *running);
bool gsd_policy_contended(const gsd_sched_queue *q, const gsd_sched_entity *running);

#endif
