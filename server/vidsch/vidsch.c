/*
 * VidSch: the GPU scheduler of one daemon.
 *
 * Every context keeps its own FIFO of packets (ctx->pending). A context whose head packet may
 * run (its GPU waits are satisfied) sits in its node's run queue (runq.c): highest band
 * (process class x context priority) first, and inside a band the smallest weighted engine
 * time, so equal-band contexts share the engine in proportion to their weights.
 *
 * One packet at a time is on a node's engine, so it can always be preempted:
 * - when other contexts of the same or a higher band wait, the run gets a budget of one
 *   quantum of engine time, which the engine enforces (at a command boundary or inside a
 *   preemptible SPIN); REALTIME runs are never time-sliced;
 * - a context of a higher band that becomes ready asks the engine to preempt at once;
 * - a context (not IDLE) that waited longer than starvation_ms runs next for one quantum.
 * A preempted render packet returns to the head of its context and is resubmitted later with
 * a new fence id and the Resubmission flag, resuming where it stopped, re-patched.
 *
 * Timeout detection and recovery: a preemption not honoured within tdr_delay (wall clock: a
 * timer, then engine reset(); virtual clock: the engine's own ENGINE_TIMEOUT) faults the
 * guilty packet's context; innocent packets aborted by a reset are resubmitted; more than
 * tdr_limit_count timeouts within tdr_limit_time ban the tenant.
 *
 * Invariants (assert in debug builds): a packet is in exactly one place (its context's
 * pending list, possibly as the node's running packet, or retired); a node's completed fence
 * never goes backwards; a context's packets complete in submission order.
 */
#include "core/daemon.h"
#include "isa.h"
#include "core/log.h"
#include "rpc/rpc.h"
#include "wddm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Weighted runtime: engine ns scaled by 1024 / weight. */
#define WEIGHT_SCALE 1024u

static const char *const g_state_names[] = {"UNKNOWN",     "SUBMITTED", "READY",   "RUNNING",
                                            "COMPLETED",   "FAULTED",   "ABORTED", "PREEMPTED",
                                            "RESUBMITTED", "CANCELLED", "REJECTED"};

bool gsd_packet_final(int state)
{
	return state == GSD_PS(COMPLETED) || state == GSD_PS(FAULTED) ||
	       state == GSD_PS(CANCELLED) || state == GSD_PS(REJECTED) || state == GSD_PS(ABORTED);
}

void gsd_packet_publish(gsd_daemon *d, const gsd_packet *p, const char *detail)
{
	/* Every transition passes here: nothing to build when no PUB socket is configured. */
	if (!gsd_rpc_publishing(d))
		return;
	Gpusched__V1__Event ev = GPUSCHED__V1__EVENT__INIT;
	Gpusched__V1__PacketEvent pe = GPUSCHED__V1__PACKET_EVENT__INIT;
	pe.packet = p->rec.packet;
	pe.state = p->rec.state;
	pe.time_ns = p->rec.event_ns; /* the same clock as the audit event */
	pe.detail = (char *)(detail ? detail : "");
	ev.time_ns = pe.time_ns;
	ev.tenant = (char *)p->rec.tenant;
	ev.body_case = GPUSCHED__V1__EVENT__BODY_PACKET;
	ev.packet = &pe;
	gsd_rpc_publish(d, &ev);
}

static void publish_message(gsd_daemon *d, const char *tenant, const char *text)
{
	Gpusched__V1__Event ev = GPUSCHED__V1__EVENT__INIT;
	ev.time_ns = gsd_now_ns();
	ev.tenant = (char *)tenant;
	ev.body_case = GPUSCHED__V1__EVENT__BODY_MESSAGE;
	ev.message = (char *)text;
	gsd_rpc_publish(d, &ev);
}

void gsd_packet_transition(gsd_daemon *d, gsd_packet *p, int state, const char *detail)
{
	p->rec.state = state;
	p->rec.event_ns = gsd_node_now(p->node);
	GSD_DEBUG("packet %llu -> %s%s%s", (unsigned long long)p->rec.packet, g_state_names[state],
	          detail ? ": " : "", detail ? detail : "");
	gsd_audit_packet(d->audit, &p->rec, detail, NULL, NULL);
	gsd_packet_publish(d, p, detail);
}

void gsd_packet_free(gsd_packet *p)
{
	free(p); /* its arrays live in the same allocation (h_submit.c packet_new) */
}

const gsd_retired *gsd_retired_find(const gsd_daemon *d, uint64_t packet)
{
	const gsd_retired *r = &d->retired[packet % GSD_RETIRED_RING];
	return r->packet == packet ? r : NULL;
}

/* Wakes CPU reads/writes that waited for the allocation to go idle. */
static void allocation_idle(gsd_daemon *d, gsd_allocation *a)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &a->waiters)
	{
		gsd_call *c = GSD_CONTAINER_OF(it, gsd_call, link);
		gsd_list_remove(it);
		/* Re-dispatch: the handler now finds the allocation idle and answers. */
		gsd_handle_request(d, c);
	}
}

/* ---- signals a packet will never give ---- */

/*
 * A packet that ends without running its SIGNAL commands from `from` on (faulted, cancelled)
 * abandons those values: anyone waiting for them would wait forever, so such waits fail.
 */
static void abandon_signals(gsd_daemon *d, gsd_packet *p, size_t from)
{
	size_t pos = from;
	gs_isa_cmd cmd;
	while (gs_isa_decode(p->dma, p->dma_len, &pos, &cmd) == GS_ISA_OK) {
		if (cmd.op != GS_OP_SIGNAL)
			continue;
		gsd_sync *s = gsd_object_get(d, cmd.sync, GSD_OBJ_SYNC, p->ctx->obj.tenant);
		if (!s || cmd.value <= s->value || cmd.value <= s->abandoned)
			continue;
		s->abandoned = cmd.value;
		gsd_sync_changed(d, s);
	}
}

/* A packet reached a final state: release what it held and remember how it ended. */
static void retire(gsd_daemon *d, gsd_packet *p)
{
	gsd_list_remove(&p->link);
	gsd_vidmm_unpin(d, p);
	if (p->paging_seq)
		gsd_vidmm_paging_done(d, p);
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &p->waiters)
	{
		gsd_call *c = GSD_CONTAINER_OF(it, gsd_call, link);
		gsd_list_remove(it);
		gsd_packet_wait_answer(c, p->rec.packet, p->rec.state, p->rec.fence);
	}
	gsd_hmap_del(&d->packets, p->rec.packet);
	gsd_retired *r = &d->retired[p->rec.packet % GSD_RETIRED_RING];
	r->packet = p->rec.packet;
	r->fence = p->rec.fence;
	r->tenant = p->ctx->obj.tenant;
	r->state = p->rec.state;
	for (uint32_t i = 0; i < p->nallocs; i++) {
		gsd_allocation *a = p->allocs[i].alloc;
		if (--a->inflight == 0)
			allocation_idle(d, a);
		gsd_allocation_put(d, a);
	}
	p->node->queued--;
	gsd_context_put(d, p->ctx);
	gsd_packet_free(p);
}

/* Ends a packet that will not run (again): CANCELLED, with its unreached signals abandoned. */
static void cancel_packet(gsd_daemon *d, gsd_packet *p, const char *why)
{
	p->rec.completed_ns = gsd_node_now(p->node);
	snprintf(p->result, sizeof(p->result), "%s", why);
	p->rec.result = p->result;
	d->stats.packets_cancelled++;
	gsd_packet_transition(d, p, GSD_PS(CANCELLED), why);
	abandon_signals(d, p, p->resume_offset);
	retire(d, p);
}

/*
 * Retires a packet but keeps its context alive for what the caller does next (requeue it,
 * fault it): the packet's reference may have been the last one of a destroyed context.
 * The caller ends with gsd_context_put.
 */
static gsd_context *retire_keep_context(gsd_daemon *d, gsd_packet *p)
{
	gsd_context *x = p->ctx;
	x->refs++;
	retire(d, p);
	return x;
}

/* ---- run queue membership ---- */

static gsd_packet *head_of(const gsd_context *x)
{
	return gsd_list_empty(&x->pending) ? NULL
	                                   : GSD_CONTAINER_OF(x->pending.next, gsd_packet, link);
}

static uint32_t band_of(const gsd_context *x)
{
	return gsd_band_of(x->priority_class, x->priority);
}

static void unqueue(gsd_context *x)
{
	if (gsd_runq_queued(&x->rq))
		gsd_runq_remove(&x->node->rq, &x->rq);
	gsd_list_remove(&x->ready_link);
}

static void unblock(gsd_context *x)
{
	gsd_list_remove(&x->wait_link);
	x->blocked_on = NULL;
}

static void preempt_running(gsd_daemon *d, gsd_node *n, const char *why);
static void kick(gsd_daemon *d, gsd_node *n);
static void quantum_cb(uv_timer_t *t);
static void tdr_cb(uv_timer_t *t);

/*
 * Checks the head packet's GPU waits. Returns true when it may run; otherwise the context is
 * parked on the first sync object still short of its value. A wait that can never be
 * satisfied (its signaller is gone) cancels the packet and moves on to the next one.
 */
static bool head_may_run(gsd_daemon *d, gsd_context *x)
{
	for (;;) {
		gsd_packet *p = head_of(x);
		if (!p || p == x->node->running)
			return false;
		/* The memory manager's waits: for paging (the packets that make this one's
		 * allocations resident, or a paging packet's predecessor), or for room. */
		gsd_adapter *a = x->node->adapter;
		gsd_sync *mm = NULL;
		if (p->paging_wait && a->paging_done->value < p->paging_wait)
			mm = a->paging_done;
		else if (p->room_wait && a->room->value < p->room_wait)
			mm = a->room;
		if (mm) {
			x->blocked_on = mm;
			gsd_list_push_back(&mm->gpu_waiters, &x->wait_link);
			return false;
		}
		p->room_wait = 0;
		bool cancelled = false;
		for (uint32_t i = 0; i < p->nwaits; i++) {
			gsd_sync *s =
			        gsd_object_get(d, p->waits[i].sync, GSD_OBJ_SYNC, x->obj.tenant);
			uint64_t want = p->waits[i].value;
			if (s && s->value >= want)
				continue;
			if (!s || s->abandoned >= want) {
				char why[128];
				snprintf(why, sizeof(why),
				         "wait for sync %llu >= %llu can never be satisfied: %s",
				         (unsigned long long)p->waits[i].sync,
				         (unsigned long long)want,
				         s ? "its signaller faulted or was cancelled"
				           : "the sync object was destroyed");
				cancel_packet(d, p, why);
				cancelled = true;
				break;
			}
			x->blocked_on = s;
			gsd_list_push_back(&s->gpu_waiters, &x->wait_link);
			return false;
		}
		if (!cancelled)
			return true;
	}
}

/* Puts a context whose head packet may run into its node's run queue, and preempts or
 * time-slices the running packet if the newcomer outranks or equals it. Does not start
 * anything: callers inside the dispatch loop rely on that to stay iterative. */
static void enqueue_ready(gsd_daemon *d, gsd_context *x)
{
	gsd_node *n = x->node;
	if (x->destroyed || x->faulted || gsd_runq_queued(&x->rq) || x->blocked_on)
		return;
	if (!head_may_run(d, x))
		return;
	x->rq.band = band_of(x);
	x->rq.seq = x->obj.handle;
	if (gsd_runq_insert(&n->rq, &x->rq) != 0) {
		GSD_ERROR("scheduler: out of memory queueing context %llu",
		          (unsigned long long)x->obj.handle);
		return;
	}
	x->ready_since = gsd_node_now(n);
	if (x->priority_class > 0 && x->priority_class < GSD_CLASS_SYSTEM)
		gsd_list_push_back(&n->ready_fifo, &x->ready_link);
	gsd_packet *r = n->running;
	if (r && !n->preempt_reason && r->ctx != x) {
		uint32_t rb = band_of(r->ctx);
		if (x->rq.band > rb)
			preempt_running(d, n, "preempted by a higher priority context");
		else if (x->rq.band == rb && !n->run_budget && r->ctx->priority_class < 5 &&
		         !d->cfg.virtual_clock) {
			/* An unbudgeted run now shares its band: it may finish its quantum. */
			uint64_t used_ms = (gsd_now_ns() - n->run_start) / 1000000u;
			uint64_t quantum_ms = (d->cfg.quantum_us + 999u) / 1000u;
			uv_timer_start(&n->quantum_timer, quantum_cb,
			               used_ms >= quantum_ms ? 0 : quantum_ms - used_ms, 0);
		}
	}
}

/* enqueue_ready, then start what the node can run. */
static void make_ready(gsd_daemon *d, gsd_context *x)
{
	enqueue_ready(d, x);
	kick(d, x->node);
}

/* ---- dispatch ---- */

/* Writes every patch location with its allocation's current address (DXGK_PATCHFLAGS
 * recorded) and builds the ranges the engine may touch. Runs at every (re)submission. */
static void patch(gsd_packet *p)
{
	p->rec.patch_flags = gs_patch_flags_for_submit(p->rec.submit_flags);
	/* The memory manager's packets carry absolute addresses and their own ranges. */
	if (p->rec.submit_flags & GS_SUBMIT_DAEMON_ONLY)
		return;
	for (uint32_t i = 0; i < p->nallocs; i++) {
		const gsd_allocation *a = p->allocs[i].alloc;
		p->ranges[i].addr = gs_addr_make(a->segment->id, a->offset);
		p->ranges[i].size = a->size;
		p->ranges[i].write = p->allocs[i].write;
	}
	for (uint32_t i = 0; i < p->npatches; i++) {
		const gsd_packet_patch *pl = &p->patches[i];
		gs_le64_put(p->dma + pl->patch_offset,
		            p->ranges[pl->allocation_index].addr + pl->allocation_offset);
	}
}

static void complete(gsd_daemon *d, gsd_node *n, gsd_packet *p, const char *detail)
{
	/* Fences are taken in submission order, but contexts of a node complete in the order
	 * the scheduler runs them: the node's fence is the highest completed, never lower. */
	if (p->rec.fence > n->completed_fence)
		n->completed_fence = p->rec.fence;
	p->rec.completed_ns = gsd_node_now(n);
	d->stats.packets_completed++;
	gsd_packet_transition(d, p, GSD_PS(COMPLETED), detail);
}

/* Picks the context that runs next, or NULL: one starving (not IDLE, and not while REALTIME
 * work is ready) if any, else the run queue's best. */
static gsd_context *pick(gsd_daemon *d, gsd_node *n)
{
	if (n->rq.count == 0)
		return NULL;
	/* The longest waiting context that is owed progress (IDLE ones never enter the FIFO:
	 * an IDLE context does not run while others wait, so at its head it would block every
	 * boost behind it). */
	gsd_context *oldest =
	        gsd_list_empty(&n->ready_fifo)
	                ? NULL
	                : GSD_CONTAINER_OF(n->ready_fifo.next, gsd_context, ready_link);
	int top = gsd_runq_top_band(&n->rq);
	if (oldest && (int)band_of(oldest) < top && gsd_band_class((uint32_t)top) < 5 &&
	    gsd_node_now(n) - oldest->ready_since >= (uint64_t)d->cfg.starvation_ms * 1000000u) {
		unqueue(oldest); /* boosted for one quantum */
		return oldest;
	}
	/* Popping moves the band's clock to the key of the one that runs now. */
	gsd_context *x = GSD_CONTAINER_OF(gsd_runq_pop(&n->rq), gsd_context, rq);
	gsd_list_remove(&x->ready_link);
	return x;
}

/*
 * NullRendering on an idle engine: the packet is queued, patched and fenced like any other,
 * but an infinitely fast engine needs no thread to run on, so the scheduler retires it itself
 * (saving two thread hops). Its SIGNAL commands still signal their fences, in order.
 */
static void run_null_here(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	p->rec.started_ns = gsd_node_now(n);
	gsd_packet_transition(d, p, GSD_PS(RUNNING), NULL);
	size_t pos = p->resume_offset;
	gs_isa_cmd cmd;
	while (gs_isa_decode(p->dma, p->dma_len, &pos, &cmd) == GS_ISA_OK) {
		if (cmd.op != GS_OP_SIGNAL)
			continue;
		gsd_sync *s = gsd_object_get(d, cmd.sync, GSD_OBJ_SYNC, p->ctx->obj.tenant);
		if (s)
			gsd_sync_signal(d, s, cmd.value);
	}
	complete(d, n, p, NULL);
	gsd_context *x = retire_keep_context(d, p);
	enqueue_ready(d, x); /* kick's loop picks the next one */
	gsd_context_put(d, x);
}

static void dispatch(gsd_daemon *d, gsd_node *n, gsd_context *x, gsd_packet *p)
{
	char detail[64];
	if (p->needs_resubmit) {
		/* Render packets get a new fence; paging packets (the memory manager's) keep
		 * theirs. */
		if (!(p->rec.submit_flags & GS_SUBMIT_PAGING))
			p->rec.fence = ++n->next_fence;
		p->rec.submit_flags |= GS_SUBMIT_RESUBMISSION;
		p->rec.resubmissions++;
		p->needs_resubmit = false;
		snprintf(detail, sizeof(detail), "fence %llu, resuming at byte %zu",
		         (unsigned long long)p->rec.fence, p->resume_offset);
		gsd_packet_transition(d, p, GSD_PS(RESUBMITTED), detail);
	}
	/* Virtual clock: what waited for paging starts no earlier than the paging ended, which
	 * may have run on another node's clock. */
	gsd_adapter *a = n->adapter;
	if (d->cfg.virtual_clock && p->paging_wait && n->vtime_ns < a->paging_vns)
		n->vtime_ns = a->paging_vns;
	patch(p);
	p->rec.ready_ns = gsd_node_now(n);
	if (p->paging_moves) {
		snprintf(detail, sizeof(detail), "resident after %u paging moves", p->paging_moves);
		p->paging_moves = 0;
		gsd_packet_transition(d, p, GSD_PS(READY), detail);
	} else {
		gsd_packet_transition(d, p, GSD_PS(READY), NULL);
	}
	/* Time-slice only when someone of the same or a higher band waits; REALTIME never
	 * yields to its own band. */
	int top = gsd_runq_top_band(&n->rq);
	bool contended = top >= 0 && (uint32_t)top >= band_of(x);
	uint64_t budget =
	        contended && x->priority_class < 5 ? (uint64_t)d->cfg.quantum_us * 1000u : 0;
	p->exec = (gsd_exec){
	        .packet = p->rec.packet,
	        .fence = p->rec.fence,
	        .submit_flags = p->rec.submit_flags,
	        .dma = p->dma,
	        .dma_len = p->dma_len,
	        .resume_offset = p->resume_offset,
	        .ranges = p->ranges,
	        .nranges = p->nranges,
	        .user = p,
	        .budget_ns = budget,
	        .tdr_ns = d->cfg.virtual_clock ? (uint64_t)d->cfg.tdr_delay_ms * 1000000u : 0,
	        .spin_done_us = p->spin_done_us};
	p->on_engine = true;
	n->running = p;
	n->inflight = 1;
	n->run_start = gsd_now_ns();
	n->run_budget = budget;
	n->preempt_reason = NULL;
	if (n->adapter->ops->submit(n->engine, &p->exec) != 0) {
		n->running = NULL;
		n->inflight = 0;
		p->on_engine = false;
		x->refs++;
		cancel_packet(d, p, "the engine refused the packet");
		enqueue_ready(d, x);
		gsd_context_put(d, x);
		return;
	}
	/* A budgeted run that does not stop (a non-preemptible SPIN) is a hang. */
	if (budget && !d->cfg.virtual_clock)
		uv_timer_start(&n->tdr_timer, tdr_cb, budget / 1000000u + 1 + d->cfg.tdr_delay_ms,
		               0);
}

/*
 * Makes the head packet's allocations resident before it runs (not for the memory manager's
 * own packets, nor NullRendering ones, which touch no memory). Returns true when it may be
 * dispatched now; otherwise its context waits (for paging or for room), or the packet was
 * cancelled because its allocations can never be resident together.
 */
static bool make_resident(gsd_daemon *d, gsd_context *x, gsd_packet *p)
{
	if (p->rec.submit_flags & (GS_SUBMIT_DAEMON_ONLY | GS_SUBMIT_NULL_RENDERING))
		return true;
	char why[192];
	gsd_vidmm_result r = gsd_vidmm_prepare(d, p, why, sizeof(why));
	if (r == GSD_VIDMM_READY)
		return true;
	x->refs++;
	if (r == GSD_VIDMM_NEVER)
		cancel_packet(d, p, why);
	enqueue_ready(d, x); /* parks it on its wait, or queues its next packet */
	gsd_context_put(d, x);
	return false;
}

static void kick(gsd_daemon *d, gsd_node *n)
{
	/* Signals raised inside the loop (NullRendering's SIGNALs, cancelled packets' abandoned
	 * values) make contexts ready and call back here: the loop below re-checks, so a nested
	 * call returns at once instead of recursing once per link of a chain. */
	if (n->in_kick)
		return;
	n->in_kick = true;
	while (!n->running && !d->stopping && !d->sched_held) {
		gsd_context *x = pick(d, n);
		if (!x)
			break;
		gsd_packet *p = head_of(x);
		assert(p);
		if (!make_resident(d, x, p))
			continue;
		if ((p->rec.submit_flags & GS_SUBMIT_NULL_RENDERING) && !p->needs_resubmit &&
		    !(p->rec.submit_flags & GS_SUBMIT_FLIP)) {
			patch(p);
			p->rec.ready_ns = gsd_node_now(n);
			gsd_packet_transition(d, p, GSD_PS(READY), NULL);
			run_null_here(d, n, p);
			continue;
		}
		dispatch(d, n, x, p);
	}
	n->in_kick = false;
}

static void preempt_running(gsd_daemon *d, gsd_node *n, const char *why)
{
	/* A flip waiting for its blank has already executed: there is nothing to preempt, and
	 * a TDR timer armed now would fault whoever runs after it. */
	if (!n->running || n->preempt_reason || n->running->flip_waiting)
		return;
	n->preempt_reason = why;
	uv_timer_stop(&n->quantum_timer);
	n->adapter->ops->preempt(n->engine);
	/* The engine must honour it within tdr_delay, or it is reset. */
	if (!d->cfg.virtual_clock)
		uv_timer_start(&n->tdr_timer, tdr_cb, d->cfg.tdr_delay_ms, 0);
}

static void quantum_cb(uv_timer_t *t)
{
	gsd_node *n = t->data;
	gsd_daemon *d = n->adapter->d;
	/* Only worth it if someone of the running band (or higher) still waits. */
	if (n->running && gsd_runq_top_band(&n->rq) >= (int)band_of(n->running->ctx))
		preempt_running(d, n, "quantum expired");
}

static void tdr_cb(uv_timer_t *t)
{
	gsd_node *n = t->data;
	gsd_daemon *d = n->adapter->d;
	if (!n->running || n->tdr_guilty)
		return;
	GSD_WARN("node %s: packet %llu did not stop within %u ms of a preemption request: "
	         "resetting the engine",
	         n->cfg->name, (unsigned long long)n->running->rec.packet, d->cfg.tdr_delay_ms);
	n->tdr_guilty = n->running;
	n->adapter->ops->reset(n->engine);
}

void gsd_vidsch_hold(gsd_daemon *d, bool hold)
{
	d->sched_held = hold;
	if (hold)
		return;
	for (uint32_t a = 0; a < d->nadapters; a++)
		for (uint32_t i = 0; i < d->adapters[a].nnodes; i++)
			kick(d, &d->adapters[a].nodes[i]);
}

void gsd_vidsch_queue(gsd_daemon *d, gsd_packet *p)
{
	gsd_context *x = p->ctx;
	p->node->queued++;
	gsd_list_push_back(&x->pending, &p->link);
	if (head_of(x) == p)
		make_ready(d, x);
}

/* ---- cancellation, faults, timeouts, bans ---- */

/* Cancels the packets of a context that are not on the engine. */
static void cancel_context(gsd_daemon *d, gsd_context *x, const char *why)
{
	unqueue(x);
	unblock(x);
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &x->pending)
	{
		gsd_packet *p = GSD_CONTAINER_OF(it, gsd_packet, link);
		if (p != x->node->running)
			cancel_packet(d, p, why);
	}
}

void gsd_vidsch_cancel(gsd_daemon *d, gsd_adapter *a, const gsd_context *ctx, const char *why)
{
	if (ctx) {
		cancel_context(d, (gsd_context *)ctx, why);
		return;
	}
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_list *it, *tmp;
		GSD_LIST_FOREACH_SAFE(it, tmp, &a->nodes[i].contexts)
		cancel_context(d, GSD_CONTAINER_OF(it, gsd_context, node_link), why);
	}
}

static void fault_context(gsd_daemon *d, gsd_context *x, const char *why)
{
	if (x->faulted)
		return;
	if (x->obj.tenant == &d->system_tenant) {
		/* A paging packet failed: a daemon bug. Paging must go on for everyone else. */
		GSD_ERROR("system context %llu: %s", (unsigned long long)x->obj.handle, why);
		gsd_audit_note(d->audit, NULL, "paging_fault", why);
		return;
	}
	x->faulted = true;
	GSD_WARN("context %llu of tenant %s faulted: %s", (unsigned long long)x->obj.handle,
	         x->obj.tenant->name, why);
	gsd_audit_note(d->audit, x->obj.tenant->name, "context_faulted", why);
	/* Its queued work is discarded and later requests on it fail with STATUS_FAULTED. */
	cancel_context(d, x, "context faulted");
}

static void ban_tenant(gsd_daemon *d, gsd_tenant *t)
{
	if (t->banned || t == &d->system_tenant)
		return;
	t->banned = true;
	char text[160];
	snprintf(text, sizeof(text), "tenant %s banned: more than %u GPU timeouts within %u ms",
	         t->name, d->cfg.tdr_limit_count, d->cfg.tdr_limit_time_ms);
	GSD_WARN("%s", text);
	gsd_audit_note(d->audit, t->name, "tenant_banned", text);
	publish_message(d, t->name, text);
	for (uint32_t a = 0; a < d->nadapters; a++)
		for (uint32_t i = 0; i < d->adapters[a].nnodes; i++) {
			gsd_list *it, *tmp;
			GSD_LIST_FOREACH_SAFE(it, tmp, &d->adapters[a].nodes[i].contexts)
			{
				gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, node_link);
				if (x->obj.tenant == t)
					cancel_context(d, x, "tenant banned");
			}
		}
}

/* Counts a timeout against the tenant; more than the limit within the window bans it. */
static void count_timeout(gsd_daemon *d, gsd_tenant *t, uint64_t now)
{
	uint32_t keep = d->cfg.tdr_limit_count + 1;
	if (t->ntdr == keep) {
		memmove(t->tdr_times, t->tdr_times + 1, (keep - 1) * sizeof(t->tdr_times[0]));
		t->ntdr--;
	}
	t->tdr_times[t->ntdr++] = now;
	if (t->ntdr == keep &&
	    now - t->tdr_times[0] <= (uint64_t)d->cfg.tdr_limit_time_ms * 1000000u)
		ban_tenant(d, t);
}

/* The packet that hung: its context faults, the tenant is charged with a timeout. */
static void timed_out(gsd_daemon *d, gsd_node *n, gsd_packet *p, const gsd_irq *irq)
{
	char why[160];
	snprintf(why, sizeof(why),
	         "timeout detection and recovery: preemption not honoured within %u ms on node "
	         "%s",
	         d->cfg.tdr_delay_ms, n->cfg->name);
	p->rec.completed_ns = gsd_node_now(n);
	snprintf(p->result, sizeof(p->result), "%s", why);
	p->rec.result = p->result;
	d->stats.packets_faulted++;
	gsd_packet_transition(d, p, GSD_PS(FAULTED), why);
	abandon_signals(d, p, irq->stop_offset);
	gsd_audit_note(d->audit, p->ctx->obj.tenant->name, "tdr", why);
	publish_message(d, p->ctx->obj.tenant->name, why);
	gsd_tenant *t = p->ctx->obj.tenant;
	bool paging = p->rec.submit_flags & GS_SUBMIT_PAGING;
	gsd_context *x = retire_keep_context(d, p);
	fault_context(d, x, why);
	gsd_context_put(d, x);
	count_timeout(d, t, gsd_node_now(n));
	/* A paging packet hit by the reset widens it to the whole adapter. */
	if (paging) {
		gsd_adapter *a = n->adapter;
		for (uint32_t i = 0; i < a->nnodes; i++)
			if (&a->nodes[i] != n && a->nodes[i].running)
				a->ops->reset(a->nodes[i].engine);
	}
}

static void on_fault(gsd_daemon *d, gsd_packet *p, const gsd_irq *irq)
{
	gsd_node *n = p->node;
	p->rec.completed_ns = gsd_node_now(n);
	snprintf(p->result, sizeof(p->result), "%s", irq->detail);
	p->rec.result = p->result;
	d->stats.packets_faulted++;
	gsd_packet_transition(d, p, GSD_PS(FAULTED), irq->detail);
	abandon_signals(d, p, irq->stop_offset);
	gsd_context *x = retire_keep_context(d, p);
	fault_context(d, x, irq->detail);
	gsd_context_put(d, x);
}

/* ---- vertical blank ---- */

static void vblank_arm(gsd_daemon *d, gsd_adapter *a);

static void vblank_cb(uv_timer_t *t)
{
	gsd_adapter *a = t->data;
	gsd_daemon *d = a->d;
	uint64_t blank = (gsd_now_ns() - a->vblank_epoch_ns) / a->vblank_period_ns;
	if (blank < a->vblank_target) {
		/* libuv timers count whole milliseconds and may fire just before the blank. */
		vblank_arm(d, a);
		return;
	}
	a->vblanks = blank;
	char detail[48];
	snprintf(detail, sizeof(detail), "vertical blank %llu", (unsigned long long)a->vblanks);
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_packet *p = n->running;
		if (!p || !p->flip_waiting)
			continue;
		a->flips_waiting--;
		n->running = NULL;
		n->inflight = 0;
		uv_timer_stop(&n->quantum_timer);
		n->preempt_reason = NULL;
		complete(d, n, p, detail);
		gsd_context *x = retire_keep_context(d, p);
		make_ready(d, x);
		gsd_context_put(d, x);
		kick(d, n);
	}
	vblank_arm(d, a);
}

/* Wakes at the next vertical blank while a flip waits (and only then). */
static void vblank_arm(gsd_daemon *d, gsd_adapter *a)
{
	(void)d;
	if (!a->flips_waiting) {
		uv_timer_stop(&a->vblank_timer);
		return;
	}
	uint64_t now = gsd_now_ns();
	if (a->vblank_target <= (now - a->vblank_epoch_ns) / a->vblank_period_ns)
		a->vblank_target = (now - a->vblank_epoch_ns) / a->vblank_period_ns + 1;
	uint64_t next = a->vblank_epoch_ns + a->vblank_target * a->vblank_period_ns;
	uv_timer_start(&a->vblank_timer, vblank_cb, (next - now + 999999u) / 1000000u, 0);
}

/* A Flip (without FlipWithNoWait) completes at the next vertical blank after it executed;
 * the engine stays with it until then. Returns true when it now waits. */
static bool flip_waits(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	uint32_t f = p->rec.submit_flags;
	if (!(f & GS_SUBMIT_FLIP) || (f & GS_SUBMIT_FLIP_WITH_NO_WAIT))
		return false;
	gsd_adapter *a = n->adapter;
	if (d->cfg.virtual_clock) {
		/* The node's clock moves on to the next blank; no waiting in wall time. */
		n->vtime_ns = (n->vtime_ns / a->vblank_period_ns + 1) * a->vblank_period_ns;
		return false;
	}
	p->flip_waiting = true;
	n->running = p;
	n->inflight = 1;
	a->flips_waiting++;
	vblank_arm(d, a);
	return true;
}

/* Present / RedirectedPresent: the source (allocation list entry 0) is copied into the
 * display surface (entry 1: allocation flag 0x2, listed as written) once the packet's commands
 * ran. A present without such an entry is still accepted and recorded (every flag bit is); it
 * just has nothing to copy into. Both are held by the packet, so no CPU access or other engine
 * touches them meanwhile. */
static void present(gsd_packet *p)
{
	uint32_t f = p->rec.submit_flags;
	if (!(f & (GS_SUBMIT_PRESENT | GS_SUBMIT_REDIRECTED_PRESENT)) ||
	    (f & GS_SUBMIT_NULL_RENDERING) || p->nallocs < 2 ||
	    !(p->allocs[1].alloc->flags & GS_ALLOC_DISPLAY) || !p->allocs[1].write)
		return;
	const gsd_allocation *src = p->allocs[0].alloc, *dst = p->allocs[1].alloc;
	uint64_t n = src->size < dst->size ? src->size : dst->size;
	memmove(dst->segment->mem + dst->offset, src->segment->mem + src->offset, n);
}

/* ---- interrupts ---- */

static void irq_post(void *arg, const gsd_irq *irq)
{
	gsd_adapter *a = arg;
	pthread_mutex_lock(&a->irq_lock);
	if (a->nirqs == a->capirqs) {
		size_t ncap = a->capirqs ? a->capirqs * 2 : 256;
		gsd_irq *n = realloc(a->irqs, ncap * sizeof(*n));
		if (!n)
			abort(); /* an interrupt must never be lost */
		a->irqs = n;
		a->capirqs = ncap;
	}
	a->irqs[a->nirqs++] = *irq;
	pthread_mutex_unlock(&a->irq_lock);
	uv_async_send(&a->irq_async);
}

/* The run ended with the packet still to finish: back to the head of its context. */
static void requeue(gsd_daemon *d, gsd_packet *p, const gsd_irq *irq, int state, const char *why)
{
	p->resume_offset = irq->stop_offset;
	p->spin_done_us = irq->spin_done_us;
	p->needs_resubmit = true;
	if (state == GSD_PS(PREEMPTED))
		p->rec.preemptions++;
	char detail[160];
	snprintf(detail, sizeof(detail), "%s after %llu us of engine time, at byte %zu", why,
	         (unsigned long long)(irq->engine_ns / 1000u), irq->stop_offset);
	gsd_packet_transition(d, p, state, detail);
	/* Its allocations may move until it runs again (requests that waited for them go now);
	 * it is made resident and patched anew. */
	gsd_vidmm_unpin(d, p);
	gsd_context *x = p->ctx;
	if (x->destroyed || x->faulted || d->stopping) {
		/* Nothing will run it again: end it now rather than strand it in pending. */
		x->refs++;
		cancel_packet(d, p,
		              d->stopping
		                      ? "daemon stopping"
		                      : (x->destroyed ? "context destroyed" : "context faulted"));
		gsd_context_put(d, x);
		return;
	}
	enqueue_ready(d, x);
}

static void handle_irq(gsd_daemon *d, gsd_adapter *a, const gsd_irq *irq)
{
	gsd_node *n = &a->nodes[irq->node];
	gsd_packet *p = irq->exec->user;
	if (irq->kind == GSD_IRQ_FENCE_SIGNAL) {
		/* Checked at submission too; a sync object destroyed since is simply gone. */
		gsd_sync *s = gsd_object_get(d, irq->sync, GSD_OBJ_SYNC, p->ctx->obj.tenant);
		if (s && !s->daemon_only)
			gsd_sync_signal(d, s, irq->value);
		return;
	}
	if (irq->kind == GSD_IRQ_STARTED) {
		p->rec.started_ns = gsd_node_now(n);
		gsd_packet_transition(d, p, GSD_PS(RUNNING), NULL);
		return;
	}
	/* Every other interrupt ends this run of the packet on the engine. */
	assert(p->on_engine && n->running == p);
	p->on_engine = false;
	n->running = NULL;
	n->inflight = 0;
	uv_timer_stop(&n->quantum_timer);
	uv_timer_stop(&n->tdr_timer);
	const char *reason = n->preempt_reason;
	n->preempt_reason = NULL;
	bool guilty = n->tdr_guilty == p;
	if (guilty)
		n->tdr_guilty = NULL;
	gsd_context *x = p->ctx;
	if (d->cfg.virtual_clock) {
		if (n->vtime_ns < p->rec.started_ns)
			n->vtime_ns = p->rec.started_ns;
		n->vtime_ns += irq->engine_ns;
	}
	x->engine_ns += irq->engine_ns;
	x->rq.key += irq->engine_ns * WEIGHT_SCALE / (x->weight ? x->weight : 1);

	switch (irq->kind) {
	case GSD_IRQ_DMA_COMPLETED:
		present(p);
		if (flip_waits(d, n, p))
			return;
		complete(d, n, p, NULL);
		x = retire_keep_context(d, p);
		enqueue_ready(d, x);
		gsd_context_put(d, x);
		break;
	case GSD_IRQ_DMA_FAULTED:
	case GSD_IRQ_DMA_PAGE_FAULTED:
		on_fault(d, p, irq);
		break;
	case GSD_IRQ_DMA_PREEMPTED:
		requeue(d, p, irq, GSD_PS(PREEMPTED),
		        irq->stop_reason == GSD_STOP_BUDGET ? "quantum expired"
		                                            : (reason ? reason : "preempted"));
		break;
	case GSD_IRQ_ENGINE_TIMEOUT:
		timed_out(d, n, p, irq);
		break;
	default: /* GSD_IRQ_ABORTED */
		if (guilty) {
			timed_out(d, n, p, irq);
		} else if (d->stopping) {
			p->rec.completed_ns = gsd_node_now(n);
			p->rec.result = "aborted: the daemon stopped";
			d->stats.packets_cancelled++;
			gsd_packet_transition(d, p, GSD_PS(ABORTED), p->rec.result);
			retire(d, p);
		} else {
			/* An innocent packet caught by a reset runs again. */
			requeue(d, p, irq, GSD_PS(ABORTED), "aborted by an engine reset");
		}
		break;
	}
	kick(d, n);
}

static void irq_drain(uv_async_t *h)
{
	gsd_adapter *a = h->data;
	for (;;) {
		gsd_irq batch[64];
		pthread_mutex_lock(&a->irq_lock);
		size_t n = a->nirqs < 64 ? a->nirqs : 64;
		if (n == 0) {
			pthread_mutex_unlock(&a->irq_lock);
			return;
		}
		memcpy(batch, a->irqs, n * sizeof(*batch));
		memmove(a->irqs, a->irqs + n, (a->nirqs - n) * sizeof(*batch));
		a->nirqs -= n;
		pthread_mutex_unlock(&a->irq_lock);
		for (size_t i = 0; i < n; i++)
			handle_irq(a->d, a, &batch[i]);
	}
}

/* ---- contexts and sync objects ---- */

void gsd_vidsch_context_added(gsd_daemon *d, gsd_context *x)
{
	(void)d;
	gsd_list_init(&x->pending);
	gsd_list_init(&x->ready_link);
	gsd_list_init(&x->wait_link);
	gsd_runq_entry_init(&x->rq);
	x->weight = x->obj.tenant->share ? x->obj.tenant->share : 1;
	gsd_list_push_back(&x->node->contexts, &x->node_link);
}

void gsd_vidsch_context_priority(gsd_daemon *d, gsd_context *x, uint32_t cls, int32_t prio)
{
	bool queued = gsd_runq_queued(&x->rq);
	if (queued)
		unqueue(x);
	x->priority_class = cls;
	x->priority = prio;
	if (queued)
		make_ready(d, x);
	/* Lowered while running: someone now outranks it. */
	gsd_node *n = x->node;
	if (n->running && n->running->ctx == x && gsd_runq_top_band(&n->rq) > (int)band_of(x))
		preempt_running(d, n, "its priority was lowered");
}

void gsd_vidsch_context_removed(gsd_daemon *d, gsd_context *x)
{
	gsd_vidsch_cancel(d, x->dev->adapter, x, "context destroyed");
	gsd_list_remove(&x->node_link);
}

void gsd_vidsch_sync_changed(gsd_daemon *d, gsd_sync *s)
{
	/* Detach the waiters first: a context still short of its value re-parks on the sync's
	 * list while we go, and nested signals may change that list; draining a private list
	 * from its front is safe against both (walking the live list looped forever). */
	gsd_list waiting;
	gsd_list_init(&waiting);
	if (!gsd_list_empty(&s->gpu_waiters)) {
		waiting.next = s->gpu_waiters.next;
		waiting.prev = s->gpu_waiters.prev;
		waiting.next->prev = &waiting;
		waiting.prev->next = &waiting;
		gsd_list_init(&s->gpu_waiters);
	}
	gsd_list *it;
	while ((it = gsd_list_pop_front(&waiting))) {
		gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, wait_link);
		x->blocked_on = NULL;
		make_ready(d, x);
	}
}

void gsd_vidsch_sync_destroyed(gsd_daemon *d, gsd_sync *s)
{
	/* Called once the handle is gone: each waiter re-checks, finds the object missing and
	 * cancels its waiting packet. */
	gsd_vidsch_sync_changed(d, s);
}

/* ---- start and stop ---- */

int gsd_vidsch_start(gsd_daemon *d, gsd_adapter *a)
{
	pthread_mutex_init(&a->irq_lock, NULL);
	uv_async_init(d->loop, &a->irq_async, irq_drain);
	a->irq_async.data = a;
	uv_timer_init(d->loop, &a->vblank_timer);
	a->vblank_timer.data = a;
	a->vblank_period_ns = 1000000000ull / d->cfg.refresh_hz;
	a->vblank_epoch_ns = gsd_now_ns();
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_runq_init(&n->rq);
		/* Virtual time starts at 1 s, not 0: 0 means "not reached" in packet records. */
		n->vtime_ns = GSD_VIRTUAL_EPOCH_NS;
		gsd_list_init(&n->ready_fifo);
		gsd_list_init(&n->contexts);
		uv_timer_init(d->loop, &n->quantum_timer);
		uv_timer_init(d->loop, &n->tdr_timer);
		n->quantum_timer.data = n->tdr_timer.data = n;
	}
	/* Handles first, engines second: if an engine fails to start, gsd_vidsch_stop can still
	 * close every handle and stop the engines that did start. */
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_engine_config ec = {.node = i,
		                        .name = n->cfg->name,
		                        .memory = &a->memory,
		                        .virtual_clock = d->cfg.virtual_clock,
		                        .irq = irq_post,
		                        .irq_arg = a};
		int rc = a->ops->create(&ec, &n->engine);
		if (rc != 0) {
			GSD_ERROR("adapter %s: cannot start the engine of node %s (%d)",
			          a->cfg->name, n->cfg->name, rc);
			return -1;
		}
	}
	return 0;
}

void gsd_vidsch_stop(gsd_daemon *d, gsd_adapter *a)
{
	gsd_vidsch_cancel(d, a, NULL, "daemon stopping");
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		/* A flip still waiting for its blank completes now: it has executed. */
		if (n->running && n->running->flip_waiting) {
			gsd_packet *p = n->running;
			n->running = NULL;
			n->inflight = 0;
			complete(d, n, p, "daemon stopping");
			retire(d, p);
		}
		if (n->engine)
			a->ops->destroy(n->engine);
		n->engine = NULL;
	}
	/* Engines reported ABORTED for what they still held: settle those now. */
	irq_drain(&a->irq_async);
	for (uint32_t i = 0; i < a->nnodes; i++) {
		uv_close((uv_handle_t *)&a->nodes[i].quantum_timer, NULL);
		uv_close((uv_handle_t *)&a->nodes[i].tdr_timer, NULL);
		gsd_runq_fini(&a->nodes[i].rq);
	}
	uv_close((uv_handle_t *)&a->vblank_timer, NULL);
}
