/*
 * The simulator's event loop (sim.h says what is the daemon's code and what is modelled).
 *
 * One engine per (adapter, node) runs one packet at a time, like a node of the daemon
 * (server/vidsch/vidsch.c): it asks the policy for the next context (gsd_policy_pick), makes the
 * head packet's allocations resident first (a paging run, which no client preempts), runs it
 * for the policy's budget (gsd_policy_budget) or to its end, charges the time
 * (gsd_policy_charge), and lets a newcomer preempt it or end its slice as the policy rules
 * (gsd_policy_on_arrival, gsd_policy_contended). A budgeted run that ends before its packet does
 * is a preemption by the time slice, and the packet resumes later where it stopped.
 *
 * Events (arrivals, ends of runs and paging, slice and refill timers) come from one binary heap
 * ordered by (time, insertion sequence), so ties are broken the same way every run.
 */
#include "sim.h"

#include "core/config.h"
#include "vidmm/heap.h"
#include "vidmm/paging_plan.h"
#include "vidsch/policy.h"
#include "wddm.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random streams: xoshiro256** seeded by splitmix64 ---- */

typedef struct rng {
	uint64_t s[4];
} rng;

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* Uniform in [0, 1). */
static double rng_unit(rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static double rng_exp(rng *r, double mean)
{
	return -log1p(-rng_unit(r)) * mean;
}

/* Longest a packet or a gap may be: about 11.6 days, past any 30-day run's workload, while sums
 * of thousands of them still fit in 64 bits. */
#define MAX_SAMPLE_NS 1e15

static uint64_t to_ns(double v)
{
	if (!(v >= 1.0))
		return 1;
	return v > MAX_SAMPLE_NS ? (uint64_t)MAX_SAMPLE_NS : (uint64_t)v;
}

static uint64_t sample(const sim_dist *d, rng *r)
{
	switch (d->kind) {
	case SIM_DIST_EXPONENTIAL:
		return to_ns(rng_exp(r, d->a));
	case SIM_DIST_UNIFORM:
		return to_ns(d->a + (d->b - d->a) * rng_unit(r));
	case SIM_DIST_LOGNORMAL: {
		/* Box-Muller: one normal from two uniforms, (0, 1] for the logarithm. */
		double u1 = 1.0 - rng_unit(r), u2 = rng_unit(r);
		double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
		return to_ns(d->a * exp(d->b * z));
	}
	default:
		return to_ns(d->a);
	}
}

/* ---- the wait histogram ---- */

void sim_hist_add(sim_hist *h, uint64_t v)
{
	size_t i;
	if (v < SIM_HIST_SUB) {
		i = (size_t)v;
	} else {
		int msb = 63 - __builtin_clzll(v);
		uint64_t sub = (v >> (msb - 4)) & (SIM_HIST_SUB - 1);
		i = (size_t)(msb - 3) * SIM_HIST_SUB + (size_t)sub;
	}
	h->n[i]++;
	h->count++;
}

/* The largest value that falls in bucket i. */
static uint64_t hist_upper(size_t i)
{
	if (i < SIM_HIST_SUB)
		return i;
	int msb = (int)(i / SIM_HIST_SUB) + 3;
	uint64_t sub = i % SIM_HIST_SUB;
	uint64_t lo = (1ull << msb) | (sub << (msb - 4));
	return lo + (1ull << (msb - 4)) - 1;
}

uint64_t sim_hist_percentile(const sim_hist *h, double p)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->count);
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (size_t i = 0; i < SIM_HIST_BUCKETS; i++) {
		seen += h->n[i];
		if (seen >= rank)
			return hist_upper(i);
	}
	return hist_upper(SIM_HIST_BUCKETS - 1);
}

/* ---- the model ---- */

typedef struct sim_pkt {
	uint64_t arrival;
	uint64_t left;    /* engine time still to run */
	uint64_t started; /* first run; 0: not yet */
	uint32_t first_alloc;
} sim_pkt;

typedef struct sim_alloc {
	uint64_t size, offset, last_use;
	uint32_t priority, pins;
	int64_t slot; /* in its adapter's resident array; -1 when in system memory */
} sim_alloc;

struct sim_node;

typedef struct sim_ctx {
	gsd_sched_entity e;
	struct sim_node *node;
	const sim_class *cls;
	uint32_t id, cls_index;
	rng r;
	sim_pkt *ring;
	uint32_t head, count, cap;
	uint32_t next_alloc;
	sim_alloc *allocs;
	uint64_t phase; /* bursts: where its first on-window starts */
	bool waiting;   /* for its paging, or for room: neither queued nor running */
	bool pinned;    /* its head packet's allocations are pinned */
	gsd_list room_link;
	sim_tenant_result *res;
} sim_ctx;

typedef struct sim_adapter {
	gsd_heap heap;
	sim_alloc **resident;
	size_t nresident, rcap;
	gsd_list room_wait;      /* contexts waiting until a run of this adapter ends */
	uint64_t paging_free_at; /* paging is one copy at a time per adapter */
	uint32_t pinning;        /* contexts whose head packet holds its allocations pinned */
	struct sim_node *nodes;
} sim_adapter;

typedef struct sim_node {
	gsd_sched_queue q;
	sim_adapter *a;
	uint32_t id;
	sim_ctx *running;
	uint64_t run_start, run_budget, gen;
	bool slice_armed;    /* an END_SLICE timer for this run */
	bool preempted;      /* this run is stopped (counted): it ends at once */
	sim_ctx *paging;     /* the context whose allocations are being paged in */
	uint64_t paging_len; /* engine time of that paging run */
	uint64_t wake_at;    /* a pending refill wake-up */
	double load, memory; /* expected engine load and memory share, for placement */
	sim_engine_result *res;
} sim_node;

enum { EV_ARRIVAL, EV_RUN_END, EV_PAGING_END, EV_QUANTUM, EV_WAKE };

typedef struct sim_ev {
	uint64_t t, seq, gen;
	uint32_t kind, id;
} sim_ev;

/*
 * What making a packet's allocations resident has done so far, to be undone when it cannot
 * finish (the daemon plans a packet's residency as a whole and rolls back a plan that fails:
 * vidmm.c, plan_rollback) and counted when it does.
 */
enum { ACT_PLACED, ACT_EVICTED, ACT_MOVED };
typedef struct sim_act {
	int kind;
	sim_alloc *al;
	uint64_t offset; /* EVICTED: where it was; MOVED: where it came from */
} sim_act;

typedef struct sim {
	const sim_workload *w;
	const sim_options *o;
	sim_result *r;
	gsd_sched_params params;
	uint64_t now, seq;
	sim_ev *heap;
	size_t nev, evcap;
	sim_adapter *adapters;
	sim_node *nodes;
	uint32_t nnodes;
	sim_ctx *ctxs;
	/* Scratch for the memory manager's planners. */
	sim_alloc **by_off;
	gsd_victim_candidate *cand;
	gsd_live_block *blocks;
	gsd_move *moves;
	size_t *idx;
	size_t scratch;
	sim_act *acts; /* the residency plan of the packet being placed */
	size_t nacts, actcap;
	bool oom;
} sim;

/* ---- events ---- */

static bool ev_before(const sim_ev *a, const sim_ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(sim *s, uint32_t kind, uint32_t id, uint64_t t, uint64_t gen)
{
	if (s->nev == s->evcap) {
		size_t cap = s->evcap ? s->evcap * 2 : 1024;
		sim_ev *h = realloc(s->heap, cap * sizeof(*h));
		if (!h) {
			s->oom = true;
			return;
		}
		s->heap = h;
		s->evcap = cap;
	}
	sim_ev e = {.t = t, .seq = s->seq++, .gen = gen, .kind = kind, .id = id};
	size_t i = s->nev++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!ev_before(&e, &s->heap[up]))
			break;
		s->heap[i] = s->heap[up];
		i = up;
	}
	s->heap[i] = e;
}

static sim_ev pop(sim *s)
{
	sim_ev top = s->heap[0], last = s->heap[--s->nev];
	size_t i = 0, n = s->nev;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && ev_before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!ev_before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n)
		s->heap[i] = last;
	return top;
}

/* ---- packets of a context ---- */

static sim_pkt *head_of(sim_ctx *x)
{
	return x->count ? &x->ring[x->head] : NULL;
}

static sim_pkt *push_packet(sim *s, sim_ctx *x)
{
	if (x->count == x->cap) {
		uint32_t cap = x->cap ? x->cap * 2 : 4;
		sim_pkt *ring = malloc(cap * sizeof(*ring));
		if (!ring) {
			s->oom = true;
			return NULL;
		}
		for (uint32_t i = 0; i < x->count; i++)
			ring[i] = x->ring[(x->head + i) % x->cap];
		free(x->ring);
		x->ring = ring;
		x->cap = cap;
		x->head = 0;
	}
	sim_pkt *p = &x->ring[(x->head + x->count) % x->cap];
	x->count++;
	return p;
}

static void pop_packet(sim_ctx *x)
{
	x->head = (x->head + 1) % x->cap;
	x->count--;
}

static sim_ctx *ctx_of(gsd_sched_entity *e)
{
	return (sim_ctx *)((char *)e - offsetof(sim_ctx, e));
}

static double dist_mean(const sim_dist *d)
{
	switch (d->kind) {
	case SIM_DIST_UNIFORM:
		return (d->a + d->b) / 2;
	case SIM_DIST_LOGNORMAL:
		return d->a * exp(d->b * d->b / 2);
	default:
		return d->a;
	}
}

/* The fraction of an engine a tenant of class c asks for, as the workload states it. */
static double offered_load(const sim_class *c)
{
	double mean = dist_mean(&c->packet), load;
	switch (c->arrival) {
	case SIM_ARRIVAL_CLOSED:
		load = c->in_flight * mean / (mean + (double)c->think_ns);
		break;
	case SIM_ARRIVAL_BURSTS:
		load = c->rate * mean / 1e9 * (double)c->on_ns / (double)(c->on_ns + c->off_ns);
		break;
	default:
		load = c->rate * mean / 1e9;
	}
	return load < 1.0 ? load : 1.0;
}

/* ---- memory: the daemon's heap and victim pickers ---- */

static void resident_add(sim *s, sim_adapter *a, sim_alloc *al, uint64_t offset)
{
	if (a->nresident == a->rcap) {
		size_t cap = a->rcap ? a->rcap * 2 : 16;
		sim_alloc **v = realloc(a->resident, cap * sizeof(*v));
		if (!v) {
			s->oom = true;
			gsd_heap_free(&a->heap, offset, al->size);
			return;
		}
		a->resident = v;
		a->rcap = cap;
	}
	al->offset = offset;
	al->slot = (int64_t)a->nresident;
	a->resident[a->nresident++] = al;
}

/* Takes al out of its adapter's segment (its bytes back to the heap). */
static void unplace(sim_adapter *a, sim_alloc *al)
{
	gsd_heap_free(&a->heap, al->offset, al->size);
	sim_alloc *last = a->resident[--a->nresident];
	a->resident[al->slot] = last;
	last->slot = al->slot;
	al->slot = -1;
}

static void act(sim *s, int kind, sim_alloc *al, uint64_t offset)
{
	if (s->nacts == s->actcap) {
		size_t cap = s->actcap ? s->actcap * 2 : 64;
		sim_act *v = realloc(s->acts, cap * sizeof(*v));
		if (!v) {
			s->oom = true;
			return;
		}
		s->acts = v;
		s->actcap = cap;
	}
	s->acts[s->nacts++] = (sim_act){kind, al, offset};
}

/* Undoes the actions of the plan in reverse order: the memory is as it was. */
static void rollback(sim *s, sim_adapter *a)
{
	while (s->nacts) {
		sim_act *x = &s->acts[--s->nacts];
		switch (x->kind) {
		case ACT_PLACED:
			unplace(a, x->al);
			break;
		case ACT_MOVED:
			gsd_heap_free(&a->heap, x->al->offset, x->al->size);
			if (gsd_heap_alloc_at(&a->heap, x->offset, x->al->size) != 0)
				s->oom = true; /* its old place was free when it moved: not reached
				                */
			x->al->offset = x->offset;
			break;
		case ACT_EVICTED:
			if (gsd_heap_alloc_at(&a->heap, x->offset, x->al->size) != 0)
				s->oom = true; /* not reached, as above */
			resident_add(s, a, x->al, x->offset);
			break;
		}
	}
}

/* Counts the plan's bytes and evictions; returns the bytes paging copies. */
static uint64_t commit(sim *s)
{
	uint64_t bytes = 0;
	for (size_t i = 0; i < s->nacts; i++) {
		const sim_act *x = &s->acts[i];
		bytes += x->al->size;
		if (x->kind == ACT_PLACED)
			s->r->paging_in_bytes += x->al->size;
		else
			s->r->paging_out_bytes += x->al->size;
		s->r->evictions += x->kind == ACT_EVICTED;
	}
	s->nacts = 0;
	return bytes;
}

static int by_offset(const void *x, const void *y)
{
	const sim_alloc *a = *(sim_alloc *const *)x, *b = *(sim_alloc *const *)y;
	return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static bool scratch_for(sim *s, size_t n)
{
	if (n <= s->scratch)
		return true;
	size_t cap = n * 2;
	sim_alloc **bo = realloc(s->by_off, cap * sizeof(*bo));
	if (bo)
		s->by_off = bo;
	gsd_victim_candidate *c = realloc(s->cand, cap * sizeof(*c));
	if (c)
		s->cand = c;
	gsd_live_block *b = realloc(s->blocks, cap * sizeof(*b));
	if (b)
		s->blocks = b;
	gsd_move *m = realloc(s->moves, cap * sizeof(*m));
	if (m)
		s->moves = m;
	size_t *ix = realloc(s->idx, cap * sizeof(*ix));
	if (ix)
		s->idx = ix;
	if (!bo || !c || !b || !m || !ix) {
		s->oom = true;
		return false;
	}
	s->scratch = cap;
	return true;
}

/* The adapter's resident allocations as the planners see them, sorted by offset. */
static size_t candidates(sim *s, sim_adapter *a)
{
	size_t n = a->nresident;
	memcpy(s->by_off, a->resident, n * sizeof(*s->by_off));
	qsort(s->by_off, n, sizeof(*s->by_off), by_offset);
	for (size_t i = 0; i < n; i++) {
		const sim_alloc *al = s->by_off[i];
		s->cand[i] = (gsd_victim_candidate){.offset = al->offset,
		                                    .size = al->size,
		                                    .priority = al->priority,
		                                    .last_use = al->last_use,
		                                    .pinned = al->pins > 0};
		s->blocks[i] = (gsd_live_block){
		        .offset = al->offset, .size = al->size, .movable = al->pins == 0};
	}
	return n;
}

/*
 * Places al (in system memory) in its adapter's segment as the daemon's memory manager does
 * (vidmm.c, place): a best fit; else, when the free bytes would hold it but no hole does, a
 * compaction that slides unpinned allocations down (gsd_heap_compact_plan, nothing evicted);
 * else the least valuable run of unpinned neighbours whose eviction leaves a hole
 * (gsd_pick_victims_contiguous: lowest priority, then least recently used). Every step is
 * recorded for rollback or commit. Returns 0, or -1 when pinned allocations leave no room.
 */
static int place(sim *s, sim_adapter *a, sim_alloc *al)
{
	uint64_t off, size = gsd_heap_round(al->size);
	if (gsd_heap_alloc(&a->heap, al->size, false, &off) == 0)
		goto placed;
	if (!scratch_for(s, a->nresident + 1))
		return -1;
	size_t n = candidates(s, a), nm = 0, nv = 0;
	if (a->heap.size - a->heap.used >= size &&
	    gsd_heap_compact_plan(s->blocks, n, a->heap.size, size, s->moves, n, &nm, NULL) == 0) {
		for (size_t k = 0; k < nm; k++) {
			sim_alloc *m = s->by_off[s->moves[k].block];
			act(s, ACT_MOVED, m, m->offset);
			gsd_heap_free(&a->heap, m->offset, m->size);
			if (gsd_heap_alloc_at(&a->heap, s->moves[k].to, m->size) != 0)
				s->oom = true; /* the plan's destinations are free: not reached */
			m->offset = s->moves[k].to;
		}
		if (gsd_heap_alloc(&a->heap, al->size, false, &off) == 0)
			goto placed;
	}
	n = candidates(s, a);
	uint64_t hole;
	if (gsd_pick_victims_contiguous(s->cand, n, a->heap.size, al->size, s->idx, n, &nv,
	                                &hole) != 0)
		return -1;
	for (size_t k = 0; k < nv; k++) {
		sim_alloc *v = s->by_off[s->idx[k]];
		act(s, ACT_EVICTED, v, v->offset);
		unplace(a, v);
	}
	if (gsd_heap_alloc_at(&a->heap, hole, al->size) != 0)
		return -1;
	off = hole;
placed:
	resident_add(s, a, al, off);
	act(s, ACT_PLACED, al, off);
	return 0;
}

static sim_alloc *alloc_of(sim_ctx *x, const sim_pkt *p, uint32_t j)
{
	return &x->allocs[(p->first_alloc + j) % x->cls->allocations];
}

static void unpin_head(sim_ctx *x)
{
	const sim_pkt *p = head_of(x);
	for (uint32_t j = 0; j < x->cls->per_packet; j++)
		alloc_of(x, p, j)->pins--;
	x->pinned = false;
	x->node->a->pinning--;
}

enum { RES_READY, RES_PAGING, RES_WAIT };

/* Makes the head packet's allocations resident, all or none, and pins them; *bytes: what
 * paging copies (in, out and moved). */
static int make_resident(sim *s, sim_ctx *x, uint64_t *bytes)
{
	const sim_pkt *p = head_of(x);
	sim_adapter *a = x->node->a;
	uint32_t k = x->cls->per_packet;
	*bytes = 0;
	for (uint32_t j = 0; j < k; j++) {
		sim_alloc *al = alloc_of(x, p, j);
		al->pins++;
		al->last_use = s->now;
	}
	x->pinned = true;
	a->pinning++;
	for (uint32_t j = 0; j < k; j++) {
		sim_alloc *al = alloc_of(x, p, j);
		if (al->slot < 0 && place(s, a, al) != 0) {
			rollback(s, a);
			unpin_head(x);
			return RES_WAIT;
		}
	}
	*bytes = commit(s);
	return *bytes ? RES_PAGING : RES_READY;
}

/* ---- scheduling ---- */

static void kick(sim *s, sim_node *n);

static void make_ready(sim *s, sim_ctx *x)
{
	sim_node *n = x->node;
	if (gsd_policy_enqueue(&n->q, &x->e, s->now) != 0) {
		s->oom = true;
		return;
	}
	sim_ctx *r = n->running;
	if (!r || r == x || n->preempted)
		return;
	uint64_t ran = s->now - n->run_start + 1;
	switch (gsd_policy_on_arrival(&x->e, &r->e, n->run_budget, ran)) {
	case GSD_POLICY_PREEMPT:
	case GSD_POLICY_PREEMPT_OWED:
		/* Ends the run now; kick() below starts the next. */
		s->r->preempt_arrival++;
		r->res->preempted++;
		n->preempted = true;
		n->gen++;
		push(s, EV_RUN_END, n->id, s->now, n->gen);
		break;
	case GSD_POLICY_END_SLICE:
		if (!n->slice_armed) {
			uint64_t at = n->run_start + s->params.quantum_ns;
			n->slice_armed = true;
			push(s, EV_QUANTUM, n->id, at > s->now ? at : s->now, n->gen);
		}
		break;
	case GSD_POLICY_KEEP:
		break;
	}
}

static void dispatch(sim *s, sim_node *n, sim_ctx *x)
{
	sim_pkt *p = head_of(x);
	if (!p->started) {
		p->started = s->now;
		sim_hist_add(&s->r->wait, s->now - p->arrival);
		sim_hist_add(&s->r->classes[x->cls_index].wait, s->now - p->arrival);
	}
	uint64_t budget = gsd_policy_budget(&n->q, &x->e, &s->params);
	n->running = x;
	n->run_start = s->now;
	n->run_budget = budget;
	n->slice_armed = false;
	n->preempted = false;
	n->gen++;
	uint64_t slice = budget && budget < p->left ? budget : p->left;
	push(s, EV_RUN_END, n->id, s->now + slice, n->gen);
}

/* The head packet ends, cancelled. */
static void cancel_head(sim *s, sim_ctx *x)
{
	pop_packet(x);
	x->res->cancelled++;
	s->r->classes[x->cls_index].cancelled++;
	s->r->cancelled++;
	/* A closed-loop client whose packet can never run gets the error and submits no more
	 * (its other packets in flight meet the same end). */
	if (x->count && gsd_policy_enqueue(&x->node->q, &x->e, s->now) != 0)
		s->oom = true;
}

static void kick(sim *s, sim_node *n)
{
	while (!n->running && !n->paging && !s->oom) {
		gsd_sched_entity *e = gsd_policy_pick(&n->q, s->now, &s->params, NULL);
		if (!e) {
			uint64_t at = gsd_policy_refill_at(&n->q, &s->params);
			if (at > s->now && at != n->wake_at) {
				n->wake_at = at;
				push(s, EV_WAKE, n->id, at, 0);
			}
			return;
		}
		sim_ctx *x = ctx_of(e);
		if (x->cls->allocations && !x->pinned) {
			uint64_t bytes;
			int rc = make_resident(s, x, &bytes);
			if (rc == RES_WAIT && !n->a->pinning) {
				/* Nothing else holds memory: its allocations can never be resident
				 * together. */
				cancel_head(s, x);
				continue;
			}
			if (rc == RES_WAIT) {
				x->waiting = true;
				gsd_list_push_back(&n->a->room_wait, &x->room_link);
				s->r->room_waits++;
				continue;
			}
			if (rc == RES_PAGING) {
				/* A system run: the engine copies, and the context is ready again
				 * when it ends. */
				uint64_t t = (uint64_t)((double)bytes * 1e9 /
				                        (double)s->w->paging_bytes_per_s);
				sim_adapter *a = n->a;
				uint64_t start =
				        a->paging_free_at > s->now ? a->paging_free_at : s->now;
				x->waiting = true;
				n->paging = x;
				n->paging_len = t ? t : 1;
				a->paging_free_at = start + n->paging_len;
				push(s, EV_PAGING_END, n->id, a->paging_free_at, 0);
				return;
			}
		}
		dispatch(s, n, x);
	}
}

/* Contexts that waited for room try again. */
static void room_changed(sim *s, sim_adapter *a)
{
	/* Those that find no room again wait for the next change: not this walk. */
	gsd_list waiting, *it;
	gsd_list_init(&waiting);
	while ((it = gsd_list_pop_front(&a->room_wait)))
		gsd_list_push_back(&waiting, it);
	while ((it = gsd_list_pop_front(&waiting))) {
		sim_ctx *x = GSD_CONTAINER_OF(it, sim_ctx, room_link);
		x->waiting = false;
		make_ready(s, x);
		kick(s, x->node);
	}
}

static void schedule_arrival(sim *s, sim_ctx *x);

/* The run on n ends now: its packet completed, or its slice or a newcomer stopped it. */
static void end_run(sim *s, sim_node *n)
{
	sim_ctx *x = n->running;
	sim_pkt *p = head_of(x);
	uint64_t ran = s->now - n->run_start;
	if (ran > p->left)
		ran = p->left;
	gsd_policy_charge(&x->e, ran);
	n->res->busy_ns += ran;
	x->res->received_ns += ran;
	p->left -= ran;
	n->running = NULL;
	n->gen++;
	if (x->pinned)
		unpin_head(x);
	if (!p->left) {
		pop_packet(x);
		x->res->completed++;
		s->r->classes[x->cls_index].completed++;
		s->r->completed++;
		if (x->cls->arrival == SIM_ARRIVAL_CLOSED)
			push(s, EV_ARRIVAL, x->id, s->now + x->cls->think_ns, 0);
	} else if (!n->preempted) {
		/* Its budget ran out (a preemption by a newcomer was counted when it came). */
		s->r->preempt_quantum++;
		x->res->preempted++;
	}
	if (x->count)
		make_ready(s, x);
	room_changed(s, n->a);
	kick(s, n);
}

static void arrive(sim *s, sim_ctx *x)
{
	const sim_class *c = x->cls;
	sim_class_result *cr = &s->r->classes[x->cls_index];
	if (x->count >= s->w->packet_limit) {
		x->res->refused++;
		cr->refused++;
		s->r->refused++;
	} else {
		sim_pkt *p = push_packet(s, x);
		if (!p)
			return;
		*p = (sim_pkt){.arrival = s->now,
		               .left = sample(&c->packet, &x->r),
		               .first_alloc = x->next_alloc};
		if (c->allocations)
			x->next_alloc = (x->next_alloc + c->per_packet) % c->allocations;
		x->res->demand_ns += p->left;
		x->res->submitted++;
		cr->submitted++;
		s->r->submitted++;
		sim_node *n = x->node;
		if (x->count == 1 && !x->waiting && n->running != x) {
			make_ready(s, x);
			kick(s, n);
		}
	}
	if (c->arrival != SIM_ARRIVAL_CLOSED)
		schedule_arrival(s, x);
}

/* The next arrival of an open process, from now. */
static void schedule_arrival(sim *s, sim_ctx *x)
{
	const sim_class *c = x->cls;
	uint64_t t;
	switch (c->arrival) {
	case SIM_ARRIVAL_PERIODIC:
		t = s->now + to_ns(1e9 / c->rate);
		break;
	case SIM_ARRIVAL_BURSTS: {
		/* Poisson while on; a gap that reaches an off-window starts again at the next
		 * on-window (memoryless). */
		uint64_t period = c->on_ns + c->off_ns;
		t = s->now;
		for (;;) {
			t += to_ns(rng_exp(&x->r, 1e9 / c->rate));
			uint64_t pos = (t + period - x->phase % period) % period;
			if (pos < c->on_ns)
				break;
			t += period - pos; /* the next on-window's start */
			if (t > s->o->duration_ns)
				break;
		}
		break;
	}
	default:
		t = s->now + to_ns(rng_exp(&x->r, 1e9 / c->rate));
	}
	if (t <= s->o->duration_ns)
		push(s, EV_ARRIVAL, x->id, t, 0);
}

/* ---- set-up ---- */

/* Tenant i's class: smooth weighted round robin over the classes' weights, so every prefix of
 * the tenants has the classes in proportion. */
static void assign_classes(const sim_workload *w, uint32_t tenants, uint32_t *out)
{
	int64_t cur[SIM_MAX_CLASSES] = {0}, total = 0;
	for (uint32_t c = 0; c < w->nclasses; c++)
		total += w->classes[c].weight;
	for (uint32_t i = 0; i < tenants; i++) {
		uint32_t best = 0;
		for (uint32_t c = 0; c < w->nclasses; c++) {
			cur[c] += w->classes[c].weight;
			if (cur[c] > cur[best])
				best = c;
		}
		cur[best] -= total;
		out[i] = best;
	}
}

/* An engine's dominant share: the larger of its expected load and the share of its memory
 * (its adapter's segment split among the adapter's engines) its tenants' allocations take. */
static double dominant(const sim_node *n)
{
	return n->load > n->memory ? n->load : n->memory;
}

/* A min-heap of engines by (dominant share, index): least_loaded placement. */
static bool node_less(const sim_node *a, const sim_node *b)
{
	double x = dominant(a), y = dominant(b);
	return x < y || (x == y && a->id < b->id);
}

typedef struct demand_item {
	double d;
	uint32_t t;
} demand_item;

/* Largest first, then tenant order. */
static int by_demand_desc(const void *x, const void *y)
{
	const demand_item *a = x, *b = y;
	if (a->d != b->d)
		return a->d > b->d ? -1 : 1;
	return a->t < b->t ? -1 : a->t > b->t;
}

/* The share of an engine's memory a tenant of class c takes. */
static double memory_share(const sim_workload *w, const sim_class *c)
{
	return (double)c->allocations * (double)c->allocation_bytes * w->nodes /
	       (double)w->memory_bytes;
}

static void node_sift(sim_node **h, size_t n, size_t i)
{
	for (;;) {
		size_t c = 2 * i + 1, m = i;
		if (c < n && node_less(h[c], h[m]))
			m = c;
		if (c + 1 < n && node_less(h[c + 1], h[m]))
			m = c + 1;
		if (m == i)
			return;
		sim_node *t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static int fail(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return -1;
}

static int setup(sim *s, char *err, size_t cap)
{
	const sim_workload *w = s->w;
	const sim_options *o = s->o;
	sim_result *r = s->r;
	int rc = -1;
	s->params =
	        gsd_policy_params(w->time_slice_us, w->starvation_ms, o->policy == GSD_SHARE_FIXED);
	s->nnodes = o->adapters * w->nodes;
	s->adapters = calloc(o->adapters, sizeof(*s->adapters));
	s->nodes = calloc(s->nnodes, sizeof(*s->nodes));
	s->ctxs = calloc(o->tenants, sizeof(*s->ctxs));
	r->engines = calloc(s->nnodes, sizeof(*r->engines));
	r->tenants = calloc(o->tenants, sizeof(*r->tenants));
	uint32_t *cls = calloc(o->tenants, sizeof(*cls));
	sim_node **order = calloc(s->nnodes, sizeof(*order));
	sim_node **place_on = calloc(o->tenants, sizeof(*place_on));
	demand_item *by_demand = calloc(o->tenants, sizeof(*by_demand));
	if (!s->adapters || !s->nodes || !s->ctxs || !r->engines || !r->tenants || !cls || !order ||
	    !place_on || !by_demand) {
		fail(err, cap, "out of memory for %u adapters and %u tenants", o->adapters,
		     o->tenants);
		goto out;
	}
	r->nengines = s->nnodes;
	r->ntenants = o->tenants;
	for (uint32_t a = 0; a < o->adapters; a++) {
		sim_adapter *ad = &s->adapters[a];
		gsd_list_init(&ad->room_wait);
		ad->nodes = &s->nodes[a * w->nodes];
		if (gsd_heap_init(&ad->heap, w->memory_bytes) != 0) {
			fail(err, cap, "out of memory for adapter %u's segment", a);
			goto out;
		}
		for (uint32_t i = 0; i < w->nodes; i++) {
			sim_node *n = &ad->nodes[i];
			n->id = a * w->nodes + i;
			n->a = ad;
			n->res = &r->engines[n->id];
			n->res->adapter = a;
			n->res->node = i;
			gsd_policy_queue_init(&n->q);
			order[n->id] = n;
		}
	}
	assign_classes(w, o->tenants, cls);
	/* least_loaded: the largest demands first (each tenant's dominant share), each to the
	 * engine whose dominant share is then the smallest. */
	for (uint32_t i = 0; i < o->tenants; i++) {
		const sim_class *c = &w->classes[cls[i]];
		double load = offered_load(c), mem = memory_share(w, c);
		by_demand[i] = (demand_item){.d = load > mem ? load : mem, .t = i};
	}
	if (o->placement == SIM_PLACE_LEAST_LOADED)
		qsort(by_demand, o->tenants, sizeof(*by_demand), by_demand_desc);
	for (uint32_t k = 0; k < o->tenants; k++) {
		uint32_t i = by_demand[k].t;
		const sim_class *c = &w->classes[cls[i]];
		if (o->placement == SIM_PLACE_ROUND_ROBIN) {
			place_on[i] = &s->nodes[i % s->nnodes];
			continue;
		}
		sim_node *n = order[0];
		n->load += offered_load(c);
		n->memory += memory_share(w, c);
		node_sift(order, s->nnodes, 0);
		place_on[i] = n;
	}
	for (uint32_t i = 0; i < o->tenants; i++) {
		sim_ctx *x = &s->ctxs[i];
		const sim_class *c = &w->classes[cls[i]];
		sim_node *n = place_on[i];
		x->id = i;
		x->cls = c;
		x->cls_index = cls[i];
		x->node = n;
		x->res = &r->tenants[i];
		x->res->adapter = n->res->adapter;
		x->res->node = n->res->node;
		x->res->cls = cls[i];
		n->res->tenants++;
		r->classes[cls[i]].tenants++;
		rng_seed(&x->r, o->seed, i + 1);
		/* One context per tenant, grouped as the daemon groups a tenant's contexts
		 * (vidsch.c, context_group): best_effort none, equal_share weight 1, else its
		 * share; the context itself weighs 1. */
		gsd_policy_entity_init(&x->e, c->priority_class, c->priority, 1, (uint64_t)i + 1);
		if (o->policy != GSD_SHARE_BEST_EFFORT) {
			gsd_sched_group *g = gsd_policy_group_new(
			        &n->q, x, o->policy == GSD_SHARE_EQUAL ? 1 : c->share);
			if (!g) {
				fail(err, cap, "out of memory for tenant %u's group", i);
				goto out;
			}
			gsd_policy_entity_join(&x->e, g);
		}
		/* Its allocations: in the segment while there is room (nothing copied), else in
		 * system memory until a packet needs them. */
		if (c->allocations) {
			x->allocs = calloc(c->allocations, sizeof(*x->allocs));
			if (!x->allocs) {
				fail(err, cap, "out of memory for tenant %u's allocations", i);
				goto out;
			}
		}
		for (uint32_t k = 0; k < c->allocations; k++) {
			sim_alloc *al = &x->allocs[k];
			al->size = c->allocation_bytes;
			al->priority = c->alloc_priority;
			al->slot = -1;
			uint64_t off;
			if (gsd_heap_alloc(&n->a->heap, al->size, false, &off) == 0)
				resident_add(s, n->a, al, off);
		}
		/* The first arrivals: spread over a period (or a packet's time) so that tenants do
		 * not all start at once. */
		switch (c->arrival) {
		case SIM_ARRIVAL_CLOSED: {
			double mean = dist_mean(&c->packet);
			for (uint32_t k = 0; k < c->in_flight; k++)
				push(s, EV_ARRIVAL, i, (uint64_t)(rng_unit(&x->r) * mean), 0);
			break;
		}
		case SIM_ARRIVAL_PERIODIC:
			push(s, EV_ARRIVAL, i, (uint64_t)(rng_unit(&x->r) * 1e9 / c->rate), 0);
			break;
		case SIM_ARRIVAL_BURSTS:
			x->phase = (uint64_t)(rng_unit(&x->r) * (double)(c->on_ns + c->off_ns));
			s->now = 0;
			schedule_arrival(s, x);
			break;
		default:
			schedule_arrival(s, x);
		}
	}
	rc = s->oom ? fail(err, cap, "out of memory") : 0;
out:
	free(cls);
	free(order);
	free(place_on);
	free(by_demand);
	return rc;
}

/* ---- results ---- */

typedef struct fair_item {
	uint32_t t;
	double demand, weight;
} fair_item;

static int by_demand_per_weight(const void *x, const void *y)
{
	const fair_item *a = x, *b = y;
	double ka = a->demand / a->weight, kb = b->demand / b->weight;
	if (ka != kb)
		return ka < kb ? -1 : 1;
	return a->t < b->t ? -1 : a->t > b->t;
}

/* Weighted max-min fair split of capacity among items (water filling): returns what is left. */
static double water_fill(fair_item *it, size_t n, double capacity, sim_tenant_result *res)
{
	qsort(it, n, sizeof(*it), by_demand_per_weight);
	double wsum = 0;
	for (size_t i = 0; i < n; i++)
		wsum += it[i].weight;
	for (size_t i = 0; i < n; i++) {
		double fair = wsum > 0 ? capacity * it[i].weight / wsum : 0;
		double got = it[i].demand < fair ? it[i].demand : fair;
		res[it[i].t].entitled_ns = (uint64_t)got;
		capacity -= got;
		wsum -= it[i].weight;
	}
	return capacity;
}

/*
 * What each tenant is owed (docs/simulation.md, Fairness). Work-conserving policies: the engine
 * time the node delivered, split band by band from the highest, and inside a band weighted
 * max-min fair by the policy's weights, each tenant capped at its demand. fixed_share: its part
 * of the whole run, capped at its demand. A closed-loop tenant's demand is what its in-flight
 * packets would use if each ran at once.
 */
static void entitlements(sim *s)
{
	const sim_options *o = s->o;
	sim_result *r = s->r;
	uint32_t *start = calloc(s->nnodes + 1, sizeof(*start));
	uint32_t *by_node = calloc(o->tenants ? o->tenants : 1, sizeof(*by_node));
	fair_item *items = calloc(o->tenants ? o->tenants : 1, sizeof(*items));
	if (!start || !by_node || !items) {
		s->oom = true;
		goto out;
	}
	for (uint32_t i = 0; i < o->tenants; i++)
		start[s->ctxs[i].node->id + 1]++;
	for (uint32_t n = 0; n < s->nnodes; n++)
		start[n + 1] += start[n];
	{
		uint32_t *fill = calloc(s->nnodes, sizeof(*fill));
		if (!fill) {
			s->oom = true;
			goto out;
		}
		for (uint32_t i = 0; i < o->tenants; i++) {
			uint32_t n = s->ctxs[i].node->id;
			by_node[start[n] + fill[n]++] = i;
		}
		free(fill);
	}
	double dur = (double)o->duration_ns;
	for (uint32_t n = 0; n < s->nnodes; n++) {
		uint32_t a = start[n], b = start[n + 1];
		double delivered = 0, wsum = 0;
		for (uint32_t k = a; k < b; k++) {
			const sim_ctx *x = &s->ctxs[by_node[k]];
			delivered += (double)x->res->received_ns;
			wsum += x->cls->share;
		}
		for (uint32_t k = a; k < b; k++) {
			const sim_ctx *x = &s->ctxs[by_node[k]];
			double demand = (double)x->res->demand_ns;
			if (x->cls->arrival == SIM_ARRIVAL_CLOSED)
				demand = dur * offered_load(x->cls);
			if (o->policy == GSD_SHARE_FIXED) {
				double part = dur * x->cls->share / wsum;
				x->res->entitled_ns = (uint64_t)(demand < part ? demand : part);
				continue;
			}
			items[k - a] = (fair_item){
			        .t = x->id,
			        .demand = demand,
			        .weight = o->policy == GSD_SHARE_WEIGHTED ? x->cls->share : 1};
		}
		if (o->policy == GSD_SHARE_FIXED)
			continue;
		/* Band by band, highest first: the items of one band are consecutive once
		 * ordered by band. */
		double left = delivered;
		for (int band = (int)GSD_CLIENT_BANDS - 1; band >= 0 && b > a; band--) {
			size_t m = 0;
			fair_item tmp[64];
			fair_item *sel = (b - a) <= 64 ? tmp : malloc((b - a) * sizeof(*sel));
			if (!sel) {
				s->oom = true;
				goto out;
			}
			for (uint32_t k = 0; k < b - a; k++)
				if (gsd_policy_band(&s->ctxs[items[k].t].e) == (uint32_t)band)
					sel[m++] = items[k];
			if (m)
				left = water_fill(sel, m, left, r->tenants);
			if (sel != tmp)
				free(sel);
		}
	}
out:
	free(start);
	free(by_node);
	free(items);
}

static void summarise(sim *s)
{
	sim_result *r = s->r;
	double dur = (double)s->o->duration_ns;
	r->util_min = 1e300;
	for (uint32_t n = 0; n < r->nengines; n++) {
		double u = (double)(r->engines[n].busy_ns + r->engines[n].paging_ns) / dur;
		r->util_mean += u / r->nengines;
		r->paging_mean += (double)r->engines[n].paging_ns / dur / r->nengines;
		if (u < r->util_min)
			r->util_min = u;
		if (u > r->util_max)
			r->util_max = u;
	}
	entitlements(s);
	double sx = 0, sxx = 0, class_err[SIM_MAX_CLASSES] = {0};
	uint32_t class_n[SIM_MAX_CLASSES] = {0};
	for (uint32_t i = 0; i < r->ntenants; i++) {
		const sim_tenant_result *t = &r->tenants[i];
		r->queued_at_end += s->ctxs[i].count;
		if ((double)t->entitled_ns < dur / 1000)
			continue;
		double x = (double)t->received_ns / (double)t->entitled_ns;
		double e = fabs(x - 1.0);
		r->fair_tenants++;
		r->share_error_mean += e;
		class_err[t->cls] += e;
		class_n[t->cls]++;
		if (e > r->share_error_max || r->fair_tenants == 1) {
			r->share_error_max = e;
			r->share_error_max_tenant = i;
		}
		sx += x;
		sxx += x * x;
	}
	if (r->fair_tenants) {
		r->share_error_mean /= r->fair_tenants;
		r->jain = sx * sx / (r->fair_tenants * sxx);
	}
	for (uint32_t c = 0; c < s->w->nclasses; c++)
		r->classes[c].share_error_mean = class_n[c] ? class_err[c] / class_n[c] : 0;
}

/* ---- the run ---- */

static void cleanup(sim *s)
{
	if (s->ctxs)
		for (uint32_t i = 0; i < s->o->tenants; i++) {
			sim_ctx *x = &s->ctxs[i];
			if (x->node)
				gsd_policy_dequeue(&x->node->q, &x->e);
			gsd_policy_entity_fini(&x->e);
			free(x->ring);
			free(x->allocs);
		}
	if (s->adapters)
		for (uint32_t a = 0; a < s->o->adapters; a++) {
			gsd_heap_fini(&s->adapters[a].heap);
			free(s->adapters[a].resident);
		}
	if (s->nodes)
		for (uint32_t n = 0; n < s->nnodes; n++)
			gsd_policy_queue_fini(&s->nodes[n].q);
	free(s->ctxs);
	free(s->nodes);
	free(s->adapters);
	free(s->heap);
	free(s->by_off);
	free(s->cand);
	free(s->blocks);
	free(s->moves);
	free(s->idx);
	free(s->acts);
}

int sim_run(const sim_workload *w, const sim_options *o, sim_result *r, char *err, size_t cap)
{
	memset(r, 0, sizeof(*r));
	if (!o->adapters || !o->tenants || !o->duration_ns)
		return fail(err, cap, "adapters, tenants and duration must be above 0");
	if ((uint64_t)o->adapters * w->nodes > SIM_MAX_ENGINES)
		return fail(err, cap, "at most %u engines (adapters x nodes)", SIM_MAX_ENGINES);
	if (o->tenants > SIM_MAX_TENANTS)
		return fail(err, cap, "at most %u tenants", SIM_MAX_TENANTS);
	sim s = {.w = w, .o = o, .r = r};
	int rc = setup(&s, err, cap);
	uint64_t next_progress = 0;
	while (rc == 0 && s.nev && !s.oom) {
		sim_ev e = pop(&s);
		if (e.t > o->duration_ns)
			break;
		s.now = e.t;
		r->events++;
		if (o->progress && (r->events & 0xffff) == 0 && s.now >= next_progress) {
			o->progress(o->progress_arg, s.now, o->duration_ns);
			next_progress = s.now + o->duration_ns / 1000;
		}
		if (e.kind == EV_ARRIVAL) {
			arrive(&s, &s.ctxs[e.id]);
			continue;
		}
		sim_node *n = &s.nodes[e.id];
		switch (e.kind) {
		case EV_RUN_END:
			if (n->running && e.gen == n->gen)
				end_run(&s, n);
			break;
		case EV_QUANTUM:
			/* The slice of a run that began unbudgeted: it ends if its band is still
			 * contended (tdr.c, quantum_cb). */
			if (n->running && e.gen == n->gen &&
			    gsd_policy_contended(&n->q, &n->running->e)) {
				s.r->preempt_quantum++;
				n->running->res->preempted++;
				n->preempted = true;
				end_run(&s, n);
			}
			break;
		case EV_PAGING_END: {
			sim_ctx *x = n->paging;
			n->res->paging_ns += n->paging_len;
			n->paging = NULL;
			x->waiting = false;
			make_ready(&s, x);
			kick(&s, n);
			break;
		}
		case EV_WAKE:
			if (e.t == n->wake_at)
				n->wake_at = 0;
			kick(&s, n);
			break;
		}
	}
	if (rc == 0 && s.oom)
		rc = fail(err, cap, "out of memory during the run");
	if (rc == 0) {
		/* What runs at the end counts up to the end. */
		for (uint32_t i = 0; i < s.nnodes; i++) {
			sim_node *n = &s.nodes[i];
			if (n->running && n->run_start < o->duration_ns) {
				uint64_t ran = o->duration_ns - n->run_start;
				sim_pkt *p = head_of(n->running);
				if (ran > p->left)
					ran = p->left;
				n->res->busy_ns += ran;
				n->running->res->received_ns += ran;
			}
			if (n->paging) {
				/* The part of its copy before the end (it may have waited for the
				 * adapter's other copies). */
				uint64_t end = n->a->paging_free_at, start = end - n->paging_len;
				if (start < o->duration_ns)
					n->res->paging_ns +=
					        (end < o->duration_ns ? end : o->duration_ns) -
					        start;
			}
		}
		summarise(&s);
		if (s.oom)
			rc = fail(err, cap, "out of memory");
	}
	cleanup(&s);
	if (rc != 0)
		sim_result_free(r);
	return rc;
}

void sim_result_free(sim_result *r)
{
	free(r->engines);
	free(r->tenants);
	r->engines = NULL;
	r->tenants = NULL;
}
