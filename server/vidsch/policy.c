#include "vidsch/policy.h"

#include "wddm.h"

#include <stddef.h>

void gsd_policy_queue_init(gsd_sched_queue *q)
{
	gsd_runq_init(&q->rq);
	gsd_list_init(&q->ready_fifo);
}

void gsd_policy_queue_fini(gsd_sched_queue *q)
{
	gsd_runq_fini(&q->rq);
}

void gsd_policy_entity_init(gsd_sched_entity *e, uint32_t priority_class, int32_t priority,
                            uint32_t weight, uint64_t seq)
{
	gsd_runq_entry_init(&e->rq);
	gsd_list_init(&e->ready_link);
	e->ready_since = 0;
	e->priority_class = priority_class;
	e->priority = priority;
	e->weight = weight ? weight : 1;
	e->engine_ns = 0;
	e->seq = seq;
}

uint32_t gsd_policy_band(const gsd_sched_entity *e)
{
	return gsd_band_of(e->priority_class, e->priority);
}

bool gsd_policy_owed_progress(uint32_t priority_class)
{
	return priority_class > GS_PRIORITY_CLASS_IDLE && priority_class < GSD_CLASS_SYSTEM;
}

bool gsd_policy_time_sliced(uint32_t priority_class)
{
	return priority_class < GS_PRIORITY_CLASS_REALTIME;
}

int gsd_policy_enqueue(gsd_sched_queue *q, gsd_sched_entity *e, uint64_t now)
{
	e->rq.band = gsd_policy_band(e);
	e->rq.seq = e->seq;
	if (gsd_runq_insert(&q->rq, &e->rq) != 0)
		return -1;
	e->ready_since = now;
	/* IDLE contexts never enter the FIFO: an IDLE context does not run while others wait,
	 * so at its head it would block every boost behind it. */
	if (gsd_policy_owed_progress(e->priority_class))
		gsd_list_push_back(&q->ready_fifo, &e->ready_link);
	return 0;
}

void gsd_policy_dequeue(gsd_sched_queue *q, gsd_sched_entity *e)
{
	if (gsd_runq_queued(&e->rq))
		gsd_runq_remove(&q->rq, &e->rq);
	gsd_list_remove(&e->ready_link);
}

int gsd_policy_set_priority(gsd_sched_queue *q, gsd_sched_entity *e, uint32_t priority_class,
                            int32_t priority, uint64_t now)
{
	bool queued = gsd_policy_queued(e);
	if (queued)
		gsd_policy_dequeue(q, e);
	e->priority_class = priority_class;
	e->priority = priority;
	return queued ? gsd_policy_enqueue(q, e, now) : 0;
}

gsd_sched_entity *gsd_policy_pick(gsd_sched_queue *q, uint64_t now, const gsd_sched_params *p,
                                  bool *boosted)
{
	if (boosted)
		*boosted = false;
	if (q->rq.count == 0)
		return NULL;
	/* The longest waiting context owed progress runs first once it has starved, unless
	 * REALTIME (or system) work is ready: REALTIME never yields. */
	gsd_sched_entity *oldest =
	        gsd_list_empty(&q->ready_fifo)
	                ? NULL
	                : GSD_CONTAINER_OF(q->ready_fifo.next, gsd_sched_entity, ready_link);
	int top = gsd_runq_top_band(&q->rq);
	if (oldest && (int)gsd_policy_band(oldest) < top &&
	    gsd_policy_time_sliced(gsd_band_class((uint32_t)top)) &&
	    now - oldest->ready_since >= p->starvation_ns) {
		gsd_policy_dequeue(q, oldest); /* boosted for one quantum */
		if (boosted)
			*boosted = true;
		return oldest;
	}
	/* Popping moves the band's clock to the key of the one that runs now. */
	gsd_sched_entity *e = GSD_CONTAINER_OF(gsd_runq_pop(&q->rq), gsd_sched_entity, rq);
	gsd_list_remove(&e->ready_link);
	return e;
}

bool gsd_policy_contended(const gsd_sched_queue *q, const gsd_sched_entity *running)
{
	int top = gsd_runq_top_band(&q->rq);
	return top >= 0 && (uint32_t)top >= gsd_policy_band(running);
}

bool gsd_policy_outranked(const gsd_sched_queue *q, const gsd_sched_entity *running)
{
	return gsd_runq_top_band(&q->rq) > (int)gsd_policy_band(running);
}

uint64_t gsd_policy_budget(const gsd_sched_queue *q, const gsd_sched_entity *e,
                           const gsd_sched_params *p)
{
	/* Time-slice only when someone of the same or a higher band waits; REALTIME never
	 * yields to its own band. */
	if (!gsd_policy_time_sliced(e->priority_class) || !gsd_policy_contended(q, e))
		return 0;
	return p->quantum_ns;
}

void gsd_policy_charge(gsd_sched_entity *e, uint64_t engine_ns)
{
	e->engine_ns += engine_ns;
	e->rq.key += engine_ns * GSD_WEIGHT_SCALE / (e->weight ? e->weight : 1);
}

gsd_policy_verdict gsd_policy_on_arrival(const gsd_sched_entity *newcomer,
                                         const gsd_sched_entity *running, uint64_t budget)
{
	uint32_t nb = gsd_policy_band(newcomer), rb = gsd_policy_band(running);
	if (nb > rb)
		return GSD_POLICY_PREEMPT;
	if (nb == rb && !budget && gsd_policy_time_sliced(running->priority_class))
		return GSD_POLICY_END_SLICE;
	return GSD_POLICY_KEEP;
}
