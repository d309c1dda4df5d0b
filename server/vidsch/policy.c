#include "vidsch/policy.h"

#include "wddm.h"

#include <stddef.h>
#include <stdlib.h>

void gsd_policy_queue_init(gsd_sched_queue *q)
{
	gsd_runq_init(&q->rq);
	gsd_list_init(&q->ready_fifo);
	gsd_list_init(&q->groups);
	q->group_seq = 0;
}

void gsd_policy_queue_fini(gsd_sched_queue *q)
{
	gsd_runq_fini(&q->rq);
	/* Groups still held by contexts outlive the queue: the last context frees its group. */
	gsd_list *it;
	while ((it = gsd_list_pop_front(&q->groups))) {
		gsd_sched_group *g = GSD_CONTAINER_OF(it, gsd_sched_group, link);
		g->q = NULL;
		gsd_list_init(&g->queued);
		for (uint32_t b = 0; b < GSD_BANDS; b++)
			if (g->bands[b])
				g->bands[b]->rq.index = -1;
	}
}

/* ---- tenant groups ---- */

gsd_sched_group *gsd_policy_group(gsd_sched_queue *q, const void *owner, uint32_t weight)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &q->groups)
	{
		gsd_sched_group *g = GSD_CONTAINER_OF(it, gsd_sched_group, link);
		if (g->owner == owner) {
			g->weight = weight ? weight : 1;
			g->refs++;
			return g;
		}
	}
	return gsd_policy_group_new(q, owner, weight);
}

gsd_sched_group *gsd_policy_group_new(gsd_sched_queue *q, const void *owner, uint32_t weight)
{
	gsd_sched_group *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->q = q;
	g->owner = owner;
	g->weight = weight ? weight : 1;
	g->refs = 1;
	g->seq = ++q->group_seq;
	gsd_list_init(&g->queued);
	gsd_list_push_back(&q->groups, &g->link);
	return g;
}

void gsd_policy_group_reweigh(gsd_sched_queue *q, const void *owner, uint32_t weight)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &q->groups)
	{
		gsd_sched_group *g = GSD_CONTAINER_OF(it, gsd_sched_group, link);
		if (g->owner == owner)
			g->weight = weight ? weight : 1;
	}
}

void gsd_policy_entity_join(gsd_sched_entity *e, gsd_sched_group *g)
{
	e->group = g;
}

void gsd_policy_entity_fini(gsd_sched_entity *e)
{
	gsd_sched_group *g = e->group;
	e->group = NULL;
	if (!g || --g->refs > 0)
		return;
	for (uint32_t b = 0; b < GSD_BANDS; b++)
		if (g->bands[b]) {
			gsd_runq_band_fini(&g->bands[b]->ctxs);
			free(g->bands[b]);
		}
	if (g->q)
		gsd_list_remove(&g->link);
	free(g);
}

/* The group's entry for one band, made when first used; NULL when memory is short. */
static gsd_sched_gband *gband_of(gsd_sched_group *g, uint32_t band)
{
	gsd_sched_gband *gb = g->bands[band];
	if (gb)
		return gb;
	if (!(gb = calloc(1, sizeof(*gb))))
		return NULL;
	gsd_runq_entry_init(&gb->rq);
	gb->rq.group = true;
	gb->rq.band = band;
	gb->g = g;
	gsd_list_init(&gb->link);
	g->bands[band] = gb;
	return gb;
}

/* Queues a group's band entry at the group's runtime (lifted to the band's recent minimum, and
 * the group with it: an idle tenant banks no credit). The band heap has room whenever an entry
 * of that band just left it, so a requeue after a pop or a charge cannot fail. */
static int gband_queue(gsd_sched_queue *q, gsd_sched_gband *gb)
{
	gb->rq.key = gb->g->vruntime;
	gb->rq.seq = gb->g->seq;
	if (gsd_runq_insert(&q->rq, &gb->rq) != 0)
		return -1;
	if (gb->rq.key > gb->g->vruntime)
		gb->g->vruntime = gb->rq.key;
	gsd_list_push_back(&gb->g->queued, &gb->link);
	return 0;
}

static void gband_unqueue(gsd_sched_queue *q, gsd_sched_gband *gb)
{
	gsd_runq_remove(&q->rq, &gb->rq);
	gsd_list_remove(&gb->link);
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
	e->group = NULL;
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

gsd_sched_params gsd_policy_params(uint32_t slice_us, uint32_t starvation_ms, bool fixed_shares)
{
	uint64_t slice = (uint64_t)slice_us * 1000u;
	return (gsd_sched_params){.quantum_ns = slice,
	                          .starvation_ns = (uint64_t)starvation_ms * 1000000u,
	                          .period_ns = fixed_shares ? slice * GSD_FIXED_PERIOD_SLICES : 0};
}

int gsd_policy_enqueue(gsd_sched_queue *q, gsd_sched_entity *e, uint64_t now)
{
	e->rq.band = gsd_policy_band(e);
	e->rq.seq = e->seq;
	if (!e->group) {
		if (gsd_runq_insert(&q->rq, &e->rq) != 0)
			return -1;
	} else {
		/* Into its group's heap of this band, and the group into the queue. */
		gsd_sched_gband *gb = gband_of(e->group, e->rq.band);
		if (!gb || gsd_runq_band_insert(&gb->ctxs, &e->rq) != 0)
			return -1;
		if (gb->rq.index < 0 && !e->group->throttled && gband_queue(q, gb) != 0) {
			gsd_runq_band_remove(&gb->ctxs, &e->rq);
			return -1;
		}
	}
	e->ready_since = now;
	/* IDLE contexts never enter the FIFO: an IDLE context does not run while others wait,
	 * so at its head it would block every boost behind it. */
	if (gsd_policy_owed_progress(e->priority_class))
		gsd_list_push_back(&q->ready_fifo, &e->ready_link);
	return 0;
}

void gsd_policy_dequeue(gsd_sched_queue *q, gsd_sched_entity *e)
{
	if (gsd_runq_queued(&e->rq) && !e->group) {
		gsd_runq_remove(&q->rq, &e->rq);
	} else if (gsd_runq_queued(&e->rq)) {
		gsd_sched_gband *gb = e->group->bands[e->rq.band];
		gsd_runq_band_remove(&gb->ctxs, &e->rq);
		if (gb->ctxs.count == 0 && gb->rq.index >= 0)
			gband_unqueue(q, gb);
	}
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

/* ---- fixed shares ---- */

/* A group's part of a period: period * weight / the weights of every group of the node. */
static uint64_t group_quota(const gsd_sched_queue *q, const gsd_sched_group *g)
{
	uint64_t total = 0;
	for (const gsd_list *it = q->groups.next; it != &q->groups; it = it->next)
		total += GSD_CONTAINER_OF(it, gsd_sched_group, link)->weight;
	uint64_t quota = total ? q->period_ns * g->weight / total : q->period_ns;
	return quota ? quota : 1;
}

/* Puts a throttled group's ready contexts back in the queue. */
static void unthrottle(gsd_sched_queue *q, gsd_sched_group *g)
{
	g->throttled = false;
	for (uint32_t b = 0; b < GSD_BANDS; b++) {
		gsd_sched_gband *gb = g->bands[b];
		if (gb && gb->ctxs.count && gb->rq.index < 0)
			gband_queue(q, gb); /* room: it was in the queue before */
	}
}

/* A new period (or none any more): every group starts it with nothing used. */
static void refill(gsd_sched_queue *q, uint64_t now, const gsd_sched_params *p)
{
	bool was = q->period_ns != 0;
	q->period_ns = p->period_ns;
	if (!p->period_ns && !was)
		return;
	if (p->period_ns && q->period_start && now < q->period_start + p->period_ns)
		return;
	if (p->period_ns)
		q->period_start = q->period_start && now >= q->period_start
		                          ? now - (now - q->period_start) % p->period_ns
		                          : now;
	for (gsd_list *it = q->groups.next; it != &q->groups; it = it->next) {
		gsd_sched_group *g = GSD_CONTAINER_OF(it, gsd_sched_group, link);
		g->period_used = 0;
		if (g->throttled)
			unthrottle(q, g);
	}
}

uint64_t gsd_policy_refill_at(const gsd_sched_queue *q, const gsd_sched_params *p)
{
	if (!p->period_ns)
		return 0;
	for (const gsd_list *it = q->groups.next; it != &q->groups; it = it->next) {
		const gsd_sched_group *g = GSD_CONTAINER_OF(it, gsd_sched_group, link);
		if (!g->throttled)
			continue;
		for (uint32_t b = 0; b < GSD_BANDS; b++)
			if (g->bands[b] && g->bands[b]->ctxs.count)
				return q->period_start + p->period_ns;
	}
	return 0;
}

gsd_sched_entity *gsd_policy_pick(gsd_sched_queue *q, uint64_t now, const gsd_sched_params *p,
                                  bool *boosted)
{
	if (boosted)
		*boosted = false;
	refill(q, now, p);
	if (q->rq.count == 0)
		return NULL;
	/* The longest waiting context owed progress runs first once it has starved, unless
	 * REALTIME (or system) work is ready: REALTIME never yields. */
	gsd_sched_entity *oldest =
	        gsd_list_empty(&q->ready_fifo)
	                ? NULL
	                : GSD_CONTAINER_OF(q->ready_fifo.next, gsd_sched_entity, ready_link);
	int top = gsd_runq_top_band(&q->rq);
	if (oldest && !p->period_ns && (int)gsd_policy_band(oldest) < top &&
	    gsd_policy_time_sliced(gsd_band_class((uint32_t)top)) &&
	    now - oldest->ready_since >= p->starvation_ns) {
		gsd_policy_dequeue(q, oldest); /* boosted for one quantum */
		if (boosted)
			*boosted = true;
		return oldest;
	}
	/* Popping moves the band's clock to the key of the one that runs now. */
	gsd_runq_entry *next = gsd_runq_pop(&q->rq);
	if (next->group) {
		/* The group that has had least: its context that has had least. The group stays
		 * queued while it has more ready contexts in this band. */
		gsd_sched_gband *gb = GSD_CONTAINER_OF(next, gsd_sched_gband, rq);
		gsd_list_remove(&gb->link);
		next = gsd_runq_band_pop(&gb->ctxs);
		if (gb->ctxs.count)
			gband_queue(q, gb);
	}
	gsd_sched_entity *e = GSD_CONTAINER_OF(next, gsd_sched_entity, rq);
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
	uint64_t budget = 0;
	if (gsd_policy_time_sliced(e->priority_class) && gsd_policy_contended(q, e))
		budget = p->quantum_ns;
	/* With fixed shares, never past what is left of the group's part of the period. */
	if (p->period_ns && e->group && e->group->q) {
		uint64_t quota = group_quota(q, e->group);
		uint64_t left = e->group->period_used < quota ? quota - e->group->period_used : 1;
		if (!budget || left < budget)
			budget = left;
	}
	return budget;
}

void gsd_policy_charge(gsd_sched_entity *e, uint64_t engine_ns)
{
	e->engine_ns += engine_ns;
	e->rq.key += engine_ns * GSD_WEIGHT_SCALE / (e->weight ? e->weight : 1);
	gsd_sched_group *g = e->group;
	if (!g)
		return;
	g->engine_ns += engine_ns;
	g->vruntime += engine_ns * GSD_WEIGHT_SCALE / g->weight;
	/* Its queued band entries move back by what it just had. */
	if (!g->q)
		return;
	/* With fixed shares, a group whose part of the period is used leaves the queue. */
	bool throttle = false;
	if (g->q->period_ns) {
		g->period_used += engine_ns;
		throttle = g->period_used >= group_quota(g->q, g);
	}
	gsd_list moved, *it;
	gsd_list_init(&moved);
	while ((it = gsd_list_pop_front(&g->queued))) {
		gsd_sched_gband *gb = GSD_CONTAINER_OF(it, gsd_sched_gband, link);
		gsd_runq_remove(&g->q->rq, &gb->rq);
		gsd_list_push_back(&moved, it);
	}
	if (throttle) {
		g->throttled = true;
		return;
	}
	while ((it = gsd_list_pop_front(&moved)))
		gband_queue(g->q, GSD_CONTAINER_OF(it, gsd_sched_gband, link));
}

gsd_policy_verdict gsd_policy_on_arrival(const gsd_sched_entity *newcomer,
                                         const gsd_sched_entity *running, uint64_t budget,
                                         uint64_t running_ns)
{
	uint32_t nb = gsd_policy_band(newcomer), rb = gsd_policy_band(running);
	if (nb > rb)
		return GSD_POLICY_PREEMPT;
	const gsd_sched_group *ng = newcomer->group, *rg = running->group;
	if (nb == rb && ng && rg && ng != rg && running_ns &&
	    gsd_policy_time_sliced(running->priority_class) &&
	    ng->vruntime < rg->vruntime + running_ns * GSD_WEIGHT_SCALE / rg->weight)
		return GSD_POLICY_PREEMPT_OWED;
	if (nb == rb && !budget && gsd_policy_time_sliced(running->priority_class))
		return GSD_POLICY_END_SLICE;
	return GSD_POLICY_KEEP;
}
