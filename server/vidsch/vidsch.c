/*
 * VidSch: queues, GPU waits, dispatch, retirement and cancellation.
 *
 * Every context keeps its own FIFO of packets (ctx->pending). A context whose head packet may
 * run (its GPU waits are satisfied) sits in its node's queue, ordered by the policy
 * (policy.h): highest band first, and inside a band the least weighted engine time.
 *
 * One packet at a time is on a node's engine, so it can always be preempted (tdr.c). A
 * preempted render packet returns to the head of its context and is resubmitted later with a
 * new fence id and the Resubmission flag, resuming where it stopped, re-patched (dispatch()
 * below; the interrupt that stops it is handled in irq.c).
 *
 * Before a render packet runs, the memory manager makes its allocations resident (vidmm/);
 * the paging packets that takes are queued here like any other, in the system contexts of the
 * nodes, whose band is above every client's.
 *
 * Invariants (asserted in debug builds): a packet is in exactly one place (its context's
 * pending list, possibly as the node's running packet, or retired); a node's completed fence
 * never goes backwards; a context's packets complete in submission order.
 */
#include "vidsch/internal.h"

#include "core/events.h"
#include "core/log.h"
#include "vidmm/vidmm.h"

#include "isa.h"
#include "wddm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gsd_sched_params gsd_vidsch_params(const gsd_daemon *d, const gsd_adapter *a)
{
	uint32_t slice = a && a->cfg->time_slice_us ? a->cfg->time_slice_us : d->cfg.quantum_us;
	return gsd_policy_params(slice, d->cfg.starvation_ms,
	                         a && a->cfg->share_policy == GSD_SHARE_FIXED);
}

/* ---- the packet's SIGNAL commands ---- */

/* The next SIGNAL command at or after *pos naming a sync object of the packet's tenant that
 * still exists: returns it with the value to signal, or NULL at the end of the buffer. */
static gsd_sync *next_signal(gsd_daemon *d, const gsd_packet *p, size_t *pos, uint64_t *value)
{
	gs_isa_cmd cmd;
	while (gs_isa_decode(p->dma, p->dma_len, pos, &cmd) == GS_ISA_OK) {
		if (cmd.op != GS_OP_SIGNAL)
			continue;
		gsd_sync *s = gsd_object_get(d, cmd.sync, GSD_OBJ_SYNC, p->ctx->obj.tenant);
		if (s) {
			*value = cmd.value;
			return s;
		}
	}
	return NULL;
}

void gsd_vidsch_abandon_signals(gsd_daemon *d, gsd_packet *p, size_t from)
{
	uint64_t v;
	gsd_sync *s;
	while ((s = next_signal(d, p, &from, &v)))
		gsd_sync_abandon(d, s, v);
}

/* ---- retirement ---- */

void gsd_vidsch_retire(gsd_daemon *d, gsd_packet *p)
{
	gsd_list_remove(&p->link);
	if (p->rec.fence > p->ctx->fence_ended)
		p->ctx->fence_ended = p->rec.fence;
	gsd_vidmm_unpin(d, p);
	if (p->paging_seq)
		gsd_vidmm_paging_done(d, p);
	/* PacketWait calls learn how it ended. */
	gsd_waitq_wake(&p->waiters, p);
	gsd_hmap_del(&d->packets, p->rec.packet);
	gsd_retired_record(d, p);
	for (uint32_t i = 0; i < p->nallocs; i++) {
		gsd_allocation *a = p->allocs[i].alloc;
		gsd_allocation_idle(a);
		gsd_allocation_put(d, a);
	}
	for (uint32_t i = 0; i < p->nkernels; i++)
		gsd_kernel_put(d, p->kernels[i]);
	p->node->queued--;
	gsd_packet_tenant(p)->stats.queued[p->node->adapter->id][p->node->index]--;
	if (!(p->rec.submit_flags & GS_SUBMIT_DAEMON_ONLY))
		p->ctx->obj.tenant->queued_packets--; /* a client's packet (paging ones are not) */
	gsd_context_put(d, p->ctx);
	gsd_packet_free(p);
}

gsd_context *gsd_vidsch_retire_keep_context(gsd_daemon *d, gsd_packet *p)
{
	gsd_context *x = p->ctx;
	x->refs++;
	gsd_vidsch_retire(d, p);
	return x;
}

void gsd_vidsch_end(gsd_daemon *d, gsd_packet *p, int state, uint64_t at, const char *why)
{
	gsd_tenant *t = gsd_packet_tenant(p);
	p->rec.completed_ns = at;
	/* A completed packet has no result; its text only details the record. */
	if (why && state != GSD_PS(COMPLETED)) {
		snprintf(p->result, sizeof(p->result), "%s", why);
		p->rec.result = p->result;
	}
	switch (state) {
	case GSD_PS(COMPLETED):
		d->stats.packets_completed++;
		t->stats.packets_completed++;
		break;
	case GSD_PS(FAULTED):
		d->stats.packets_faulted++;
		t->stats.packets_faulted++;
		break;
	default: /* CANCELLED, ABORTED */
		d->stats.packets_cancelled++;
		t->stats.packets_cancelled++;
		break;
	}
	gsd_packet_transition(d, p, state, why);
}

void gsd_vidsch_cancel_packet(gsd_daemon *d, gsd_packet *p, const char *why)
{
	gsd_vidsch_end(d, p, GSD_PS(CANCELLED), gsd_node_now(p->node), why);
	gsd_vidsch_abandon_signals(d, p, p->resume_offset);
	gsd_vidsch_retire(d, p);
}

void gsd_vidsch_complete(gsd_daemon *d, gsd_node *n, gsd_packet *p, const char *detail)
{
	/* Node fences are taken in submission order, but contexts of a node complete in the order
	 * the scheduler runs them: the node's fence is the highest completed, never lower. */
	if (p->node_fence > n->completed_fence)
		n->completed_fence = p->node_fence;
	uint64_t at = p->gpu_end_ns ? p->gpu_end_ns : gsd_node_now(n);
	gsd_vidsch_end(d, p, GSD_PS(COMPLETED), at, detail);
}

void gsd_vidsch_node_idle(gsd_node *n)
{
	n->running = NULL;
	n->inflight = 0;
	n->preempt_reason = NULL;
	uv_timer_stop(&n->quantum_timer);
}

/* ---- queue membership and GPU waits ---- */

static gsd_packet *head_of(const gsd_context *x)
{
	return gsd_list_empty(&x->pending) ? NULL
	                                   : GSD_CONTAINER_OF(x->pending.next, gsd_packet, link);
}

static gsd_context *context_of(gsd_sched_entity *e)
{
	return GSD_CONTAINER_OF(e, gsd_context, sched);
}

static void unblock(gsd_context *x)
{
	gsd_waiter_cancel(&x->wait);
	x->blocked_on = NULL;
}

/* The sync object a context waited on changed (or went away): look again. */
static void context_wake(gsd_waiter *w, void *event)
{
	(void)event;
	gsd_context *x = GSD_CONTAINER_OF(w, gsd_context, wait);
	x->blocked_on = NULL;
	gsd_vidsch_make_ready(x->node->adapter->d, x);
}

static void block_on(gsd_context *x, gsd_sync *s)
{
	x->blocked_on = s;
	gsd_waitq_add(&s->waiters, &x->wait);
}

/*
 * Checks the head packet's waits. Returns true when it may run; otherwise the context is
 * parked on the first sync object still short of its value. A wait that can never be
 * satisfied (its signaller is gone) cancels the packet and moves on to the next one.
 */
static bool head_may_run(gsd_daemon *d, gsd_context *x)
{
	for (;;) {
		gsd_packet *p = head_of(x);
		if (!p || p == x->node->running || p->unrecorded)
			return false; /* an unrecorded head is made ready by gsd_vidsch_recorded */
		/* The memory manager's waits: for paging (the packets that make this one's
		 * allocations resident, or a paging packet's predecessor), or for room. */
		gsd_sync *mm = gsd_vidmm_wait_of(x->node->adapter, p);
		if (mm) {
			block_on(x, mm);
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
				gsd_vidsch_cancel_packet(d, p, why);
				cancelled = true;
				break;
			}
			block_on(x, s);
			return false;
		}
		if (!cancelled)
			return true;
	}
}

/* The first time a packet heads a queued context: when, and what ran on its node then. */
static void note_runnable(gsd_node *n, const gsd_context *x, gsd_packet *p)
{
	if (!p || p->runnable_ns)
		return;
	p->runnable_ns = gsd_node_now(n);
	p->dispatches_then = n->dispatches;
	const gsd_packet *r = n->running;
	if (r && r->ctx != x) {
		p->behind_context = r->ctx->obj.handle;
		p->behind_class = r->ctx->sched.priority_class;
		p->behind_foreign = r->ctx->obj.tenant != x->obj.tenant;
	}
}

/* The READY record's detail: what the packet waited for since it was submitted. */
static void ready_detail(gsd_daemon *d, gsd_node *n, const gsd_packet *p, char *out, size_t cap)
{
	size_t len = 0;
	out[0] = '\0';
#define ADD(...)                                                                                   \
	do {                                                                                       \
		if (len < cap)                                                                     \
			len += (size_t)snprintf(out + len, cap - len, __VA_ARGS__);                \
	} while (0)
	/* Its first run: what every packet waits for (the audit: a wall-clock time, left out on
	 * the virtual clock, whose records must not depend on it), and its own context. */
	if (!p->rec.resubmissions) {
		if (!d->cfg.virtual_clock && p->recorded_ns >= p->rec.submitted_ns &&
		    p->recorded_ns)
			ADD("submission record committed after %llu us",
			    (unsigned long long)((p->recorded_ns - p->rec.submitted_ns) / 1000u));
		if (p->ahead_in_context)
			ADD("%safter %llu earlier packets of its context", len ? "; " : "",
			    (unsigned long long)p->ahead_in_context);
		/* The memory manager's packets go in the adapter's paging order (whose other
		 * packets may be other tenants': not counted). */
		if (p->rec.submit_flags & GS_SUBMIT_PAGING)
			ADD("%sin the adapter's paging order%s", len ? "; " : "",
			    p->paging_wait ? ", after the paging packets queued before it"
			                   : ", first in it");
	}
	for (uint32_t i = 0; i < p->nwaits; i++) {
		const gsd_sync *s = gsd_object_get(d, p->waits[i].sync, GSD_OBJ_SYNC, NULL);
		ADD("%swaited for sync %llu >= %llu", len ? "; " : "",
		    (unsigned long long)p->waits[i].sync, (unsigned long long)p->waits[i].value);
		if (s && s->signalled_by)
			ADD(" (last signalled by packet %llu)",
			    (unsigned long long)gsd_wire_packet_out(&d->wire, s->signalled_by));
		else if (s)
			ADD(" (set by the CPU)");
	}
	if (p->paging_moves)
		ADD("%sresident after %u paging moves", len ? "; " : "", p->paging_moves);
	uint64_t ahead = n->dispatches - p->dispatches_then;
	uint64_t now = gsd_node_now(n);
	if (p->runnable_ns && (ahead || p->behind_context)) {
		ADD("%squeued %llu us behind %llu packets", len ? "; " : "",
		    (unsigned long long)((now - p->runnable_ns) / 1000u),
		    (unsigned long long)ahead);
		if (p->behind_foreign)
			ADD(", first another tenant's context (priority class %s)",
			    gs_priority_class_name(p->behind_class));
		else if (p->behind_context)
			ADD(", first context %llu's (priority class %s)",
			    (unsigned long long)p->behind_context,
			    gs_priority_class_name(p->behind_class));
	}
#undef ADD
}

void gsd_vidsch_enqueue_ready(gsd_daemon *d, gsd_context *x)
{
	gsd_node *n = x->node;
	if (x->destroyed || x->faulted || gsd_policy_queued(&x->sched) || x->blocked_on)
		return;
	if (!head_may_run(d, x))
		return;
	if (gsd_policy_enqueue(&n->queue, &x->sched, gsd_node_now(n)) != 0) {
		GSD_ERROR("scheduler: out of memory queueing context %llu",
		          (unsigned long long)x->obj.handle);
		return;
	}
	gsd_packet *r = n->running;
	note_runnable(n, x, head_of(x));
	if (!r || n->preempt_reason || r->ctx == x)
		return;
	/* The running packet's engine time so far (wall clock only: on the virtual clock runs
	 * take no wall time, and decisions stay as they were). */
	uint64_t ran = d->cfg.virtual_clock ? 0 : gsd_now_ns() - n->run_start + 1;
	gsd_policy_verdict decision =
	        gsd_policy_on_arrival(&x->sched, &r->ctx->sched, n->run_budget, ran);
	switch (decision) {
	case GSD_POLICY_PREEMPT:
	case GSD_POLICY_PREEMPT_OWED: {
		/* Named in the preempted packet's record; another tenant's context only by its
		 * class. */
		char by[48] = "another tenant's context";
		if (x->obj.tenant == r->ctx->obj.tenant)
			snprintf(by, sizeof(by), "context %llu", (unsigned long long)x->obj.handle);
		snprintf(n->preempt_why, sizeof(n->preempt_why),
		         "preempted by %s (priority class %s)%s", by,
		         gs_priority_class_name(x->sched.priority_class),
		         decision == GSD_POLICY_PREEMPT_OWED
		                 ? ": that tenant had less than its share"
		                 : "");
		gsd_vidsch_preempt_running(d, n, n->preempt_why);
		break;
	}
	case GSD_POLICY_END_SLICE:
		if (!d->cfg.virtual_clock)
			gsd_vidsch_end_slice(d, n);
		break;
	case GSD_POLICY_KEEP:
		break;
	}
}

void gsd_vidsch_make_ready(gsd_daemon *d, gsd_context *x)
{
	gsd_vidsch_enqueue_ready(d, x);
	gsd_vidsch_kick(d, x->node);
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

/*
 * NullRendering on an idle engine: the packet is queued, patched and fenced like any other,
 * but an infinitely fast engine needs no thread to run on, so the scheduler retires it itself
 * (saving two thread hops). Its SIGNAL commands still signal their fences, in order.
 */
static void run_null_here(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	/* Its READY, RUNNING and COMPLETED in one commit: kept in its row (server/audit). */
	gsd_audit_group(d->audit, true);
	patch(p);
	p->rec.ready_ns = gsd_node_now(n);
	gsd_packet_transition(d, p, GSD_PS(READY), NULL);
	p->rec.run_ns = 0;
	p->rec.started_ns = gsd_node_now(n);
	gsd_packet_transition(d, p, GSD_PS(RUNNING), NULL);
	size_t pos = p->resume_offset;
	uint64_t v;
	gsd_sync *s;
	while ((s = next_signal(d, p, &pos, &v)))
		gsd_sync_signal(d, s, v, p->rec.packet);
	gsd_vidsch_complete(d, n, p, NULL);
	gsd_audit_group(d->audit, false);
	gsd_context *x = gsd_vidsch_retire_keep_context(d, p);
	gsd_vidsch_enqueue_ready(d, x); /* kick's loop picks the next one */
	gsd_context_put(d, x);
}

/* A preempted or aborted packet runs again: a resubmission (docs/concepts.md: render packets get a
 * new node fence and the Resubmission flag; paging packets keep theirs). The client's fence, its
 * context's, stays. */
static void resubmit(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	if (!(p->rec.submit_flags & GS_SUBMIT_PAGING))
		p->node_fence = ++n->next_fence;
	p->rec.submit_flags |= GS_SUBMIT_RESUBMISSION;
	p->rec.resubmissions++;
	p->needs_resubmit = false;
	char detail[80];
	snprintf(detail, sizeof(detail), "node fence %llu, resuming at byte %zu",
	         (unsigned long long)gsd_wire_fence_out(&d->wire, p->rec.adapter, p->rec.node,
	                                                p->node_fence),
	         p->resume_offset);
	gsd_packet_transition(d, p, GSD_PS(RESUBMITTED), detail);
}

static void dispatch(gsd_daemon *d, gsd_node *n, gsd_context *x, gsd_packet *p)
{
	if (p->needs_resubmit)
		resubmit(d, n, p);
	/* Virtual clock: what waited for paging starts no earlier than the paging ended, which
	 * may have run on another node's clock. */
	gsd_adapter *a = n->adapter;
	if (d->cfg.virtual_clock && p->paging_wait && n->vtime_ns < a->paging_vns)
		n->vtime_ns = a->paging_vns;
	patch(p);
	p->rec.ready_ns = gsd_node_now(n);
	char detail[256];
	ready_detail(d, n, p, detail, sizeof(detail));
	gsd_packet_transition(d, p, GSD_PS(READY), detail[0] ? detail : NULL);
	p->paging_moves = 0;
	n->dispatches++;
	/* A resubmission waits anew. */
	p->runnable_ns = 0;
	p->behind_context = 0;
	p->behind_foreign = false;
	gsd_sched_params sp = gsd_vidsch_params(d, n->adapter);
	uint64_t budget = gsd_policy_budget(&n->queue, &x->sched, &sp);
	p->exec = (gsd_exec){
	        .packet = p->rec.packet,
	        .fence = p->node_fence,
	        .submit_flags = p->rec.submit_flags,
	        .dma = p->dma,
	        .dma_len = p->dma_len,
	        .resume_offset = p->resume_offset,
	        .ranges = p->ranges,
	        .nranges = p->nranges,
	        .kernels = p->exec_kernels,
	        .nkernels = p->nkernels,
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
	if (a->ops->submit(n->engine, &p->exec) != 0) {
		n->running = NULL;
		n->inflight = 0;
		p->on_engine = false;
		x->refs++;
		gsd_vidsch_cancel_packet(d, p, "the engine refused the packet");
		gsd_vidsch_enqueue_ready(d, x);
		gsd_context_put(d, x);
		return;
	}
	gsd_vidsch_arm_tdr(d, n, budget);
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
		gsd_vidsch_cancel_packet(d, p, why);
	gsd_vidsch_enqueue_ready(d, x); /* parks it on its wait, or queues its next packet */
	gsd_context_put(d, x);
	return false;
}

/*
 * The node's adapter lost its device for good: nothing will run here again, so every packet
 * ends at once, cancelled. A packet whose SUBMITTED record is not committed yet is left for
 * when it is (gsd_vidsch_recorded comes back here): its submission is still being answered.
 */
#define OUT_OF_SERVICE "the adapter is out of service: a dispatch that did not stop still runs"
#define LOST_FOR_GOOD  "the device was lost and could not be recovered"

static void cancel_on_dead(gsd_daemon *d, gsd_node *n)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &n->contexts)
	{
		gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, node_link);
		x->refs++;
		gsd_policy_dequeue(&n->queue, &x->sched);
		unblock(x);
		gsd_list *pit, *ptmp;
		GSD_LIST_FOREACH_SAFE(pit, ptmp, &x->pending)
		{
			gsd_packet *p = GSD_CONTAINER_OF(pit, gsd_packet, link);
			if (p != n->running && !p->unrecorded)
				gsd_vidsch_cancel_packet(d, p,
				                         n->adapter->device_retry ? OUT_OF_SERVICE
				                                                  : LOST_FOR_GOOD);
		}
		gsd_context_put(d, x);
	}
}

static void refill_cb(uv_timer_t *t)
{
	gsd_node *n = t->data;
	gsd_vidsch_kick(n->adapter->d, n);
}

/*
 * fixed_share: the engine is idle and every tenant with ready work has used its part of the
 * period. The node runs again when the next period begins: on the wall clock a timer wakes
 * it; on the virtual clock the idle time passes at once (the node's clock moves to the
 * period's start).
 */
static void wait_refill(gsd_daemon *d, gsd_node *n, const gsd_sched_params *sp)
{
	if (n->running || d->stopping || d->sched_held || n->adapter->device_lost)
		return;
	uint64_t at = gsd_policy_refill_at(&n->queue, sp);
	if (!at)
		return;
	uint64_t now = gsd_node_now(n);
	if (d->cfg.virtual_clock) {
		if (at > n->vtime_ns) {
			n->vtime_ns = at;
			gsd_vidsch_kick(d, n);
		}
		return;
	}
	uint64_t ms = at > now ? (at - now + 999999u) / 1000000u : 0;
	uv_timer_start(&n->refill_timer, refill_cb, ms, 0);
}

void gsd_vidsch_kick(gsd_daemon *d, gsd_node *n)
{
	/* Signals raised inside the loop (NullRendering's SIGNALs, cancelled packets' abandoned
	 * values) make contexts ready and call back here: the loop below re-checks, so a nested
	 * call returns at once instead of recursing once per link of a chain. */
	if (n->in_kick)
		return;
	n->in_kick = true;
	if (n->adapter->device_dead) {
		cancel_on_dead(d, n);
		n->in_kick = false;
		return;
	}
	gsd_sched_params sp = gsd_vidsch_params(d, n->adapter);
	while (!n->running && !d->stopping && !d->sched_held && !n->adapter->device_lost) {
		gsd_sched_entity *e = gsd_policy_pick(&n->queue, gsd_node_now(n), &sp, NULL);
		if (!e)
			break;
		gsd_context *x = context_of(e);
		gsd_packet *p = head_of(x);
		assert(p);
		if (!make_resident(d, x, p))
			continue;
		if ((p->rec.submit_flags & GS_SUBMIT_NULL_RENDERING) && !p->needs_resubmit &&
		    !(p->rec.submit_flags & GS_SUBMIT_FLIP)) {
			run_null_here(d, n, p);
			continue;
		}
		dispatch(d, n, x, p);
	}
	n->in_kick = false;
	wait_refill(d, n, &sp);
}

void gsd_vidsch_hold(gsd_daemon *d, bool hold)
{
	if (hold) {
		d->sched_held++;
		return;
	}
	assert(d->sched_held > 0);
	if (--d->sched_held > 0)
		return;
	for (uint32_t a = 0; a < d->nadapters; a++)
		for (uint32_t i = 0; i < d->adapters[a].nnodes; i++)
			gsd_vidsch_kick(d, &d->adapters[a].nodes[i]);
}

uint64_t gsd_vidsch_completed_fence(const gsd_context *x)
{
	/* pending holds its queued packets not yet ended, in fence order: everything below the
	 * head's fence has ended. Without one, the last that ended (fence_submitted may count
	 * packets of a request still being validated, not yet queued). */
	const gsd_packet *p = head_of(x);
	return p ? p->rec.fence - 1 : x->fence_ended;
}

void gsd_vidsch_queue(gsd_daemon *d, gsd_packet *p)
{
	gsd_context *x = p->ctx;
	p->node->queued++;
	gsd_packet_tenant(p)->stats.queued[p->node->adapter->id][p->node->index]++;
	/* A client's packet: the ones of its context it comes after (paging packets share the
	 * system contexts and carry their devices' fences: not counted). */
	if (!(p->rec.submit_flags & GS_SUBMIT_DAEMON_ONLY))
		p->ahead_in_context = p->rec.fence - 1 - gsd_vidsch_completed_fence(x);
	gsd_list_push_back(&x->pending, &p->link);
	if (head_of(x) == p)
		gsd_vidsch_make_ready(d, x);
}

void gsd_vidsch_recorded(gsd_daemon *d, gsd_packet *p, bool ok)
{
	gsd_context *x = p->ctx;
	p->unrecorded = false;
	if (ok) {
		p->recorded_ns = gsd_node_now(p->node);
		if (head_of(x) == p)
			gsd_vidsch_make_ready(d, x);
		return;
	}
	x->refs++;
	p->record_failed = true;
	gsd_vidsch_cancel_packet(d, p,
	                         "its SUBMITTED record could not be committed to the audit: it "
	                         "never ran");
	gsd_vidsch_make_ready(d, x); /* its next packet, if any, is the head now */
	gsd_context_put(d, x);
}

/* The memory manager's hook: its paging packets are queued together, so that none starts (or
 * plans) before the last one is queued. */
static void paging_submit(gsd_daemon *d, gsd_list *packets)
{
	gsd_vidsch_hold(d, true);
	gsd_list *it;
	while ((it = gsd_list_pop_front(packets)))
		gsd_vidsch_queue(d, GSD_CONTAINER_OF(it, gsd_packet, link));
	gsd_vidsch_hold(d, false);
}

/* ---- contexts ---- */

/*
 * The adapter's share policy decides how the context is scheduled against other tenants'
 * (docs/concepts.md, Priorities and bands): weighted, fixed_share and equal_share put it in its
 * tenant's group on the node (group weight: the tenant's share, or 1 for equal_share), where it
 * shares the tenant's part with the tenant's other contexts; best_effort schedules it on its own.
 * The daemon's own contexts are never grouped. Memory short for a group: scheduled on its own, and
 * said so.
 */
/* Puts a client context in its tenant's group on its node, as the adapter's policy says. */
static void context_group(gsd_context *x)
{
	int policy = x->dev->adapter->cfg->share_policy;
	gsd_tenant *t = x->obj.tenant;
	x->sched.weight = 1; /* contexts share their tenant's part, or the engine, alike */
	if (policy == GSD_SHARE_BEST_EFFORT)
		return;
	gsd_sched_group *g =
	        gsd_policy_group(&x->node->queue, t, policy == GSD_SHARE_EQUAL ? 1 : t->conf.share);
	if (g)
		gsd_policy_entity_join(&x->sched, g);
	else
		GSD_WARN("context %llu: out of memory for its tenant's group: scheduled on its own",
		         (unsigned long long)x->obj.handle);
}

static void context_attach(gsd_daemon *d, gsd_context *x)
{
	gsd_waiter_init(&x->wait, context_wake);
	gsd_list_push_back(&x->node->contexts, &x->node_link);
	if (x->sched.priority_class != GSD_CLASS_SYSTEM)
		context_group(x);
	(void)d;
}

int gsd_vidsch_adapter_policy(gsd_daemon *d, gsd_adapter *a)
{
	for (uint32_t k = 0; k < a->nnodes; k++) {
		gsd_node *n = &a->nodes[k];
		size_t count = 0;
		gsd_list *it, *tmp;
		GSD_LIST_FOREACH_SAFE(it, tmp, &n->contexts)
		count++;
		gsd_context **queued = calloc(count + 1, sizeof(*queued));
		if (!queued)
			return -1;
		/* Every client context out of the queue and its group (a group goes with its last
		 * context), then into the group the policy gives it, then back in the queue. */
		size_t nq = 0;
		GSD_LIST_FOREACH_SAFE(it, tmp, &n->contexts)
		{
			gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, node_link);
			if (x->sched.priority_class == GSD_CLASS_SYSTEM)
				continue;
			if (gsd_policy_queued(&x->sched)) {
				gsd_policy_dequeue(&n->queue, &x->sched);
				queued[nq++] = x;
			}
		}
		GSD_LIST_FOREACH_SAFE(it, tmp, &n->contexts)
		{
			gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, node_link);
			if (x->sched.priority_class != GSD_CLASS_SYSTEM)
				gsd_policy_entity_fini(&x->sched);
		}
		GSD_LIST_FOREACH_SAFE(it, tmp, &n->contexts)
		{
			gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, node_link);
			if (x->sched.priority_class != GSD_CLASS_SYSTEM)
				context_group(x);
		}
		for (size_t i = 0; i < nq; i++)
			gsd_vidsch_enqueue_ready(d, queued[i]);
		free(queued);
		gsd_vidsch_kick(d, n);
	}
	return 0;
}

static void context_detach(gsd_daemon *d, gsd_context *x, const char *why)
{
	gsd_vidsch_cancel(d, x->dev->adapter, x, why);
	gsd_list_remove(&x->node_link);
}

void gsd_vidsch_tenant_share(gsd_daemon *d, const gsd_tenant *t)
{
	for (uint32_t i = 0; i < d->nadapters; i++) {
		gsd_adapter *a = &d->adapters[i];
		if (a->cfg->share_policy != GSD_SHARE_WEIGHTED &&
		    a->cfg->share_policy != GSD_SHARE_FIXED)
			continue;
		for (uint32_t k = 0; k < a->nnodes; k++)
			gsd_policy_group_reweigh(&a->nodes[k].queue, t, t->conf.share);
	}
}

void gsd_vidsch_context_priority(gsd_daemon *d, gsd_context *x, uint32_t cls, int32_t prio)
{
	gsd_node *n = x->node;
	bool queued = gsd_policy_queued(&x->sched);
	if (queued)
		gsd_policy_dequeue(&n->queue, &x->sched);
	x->sched.priority_class = cls;
	x->sched.priority = prio;
	if (queued)
		gsd_vidsch_make_ready(d, x);
	/* Lowered while running: someone now outranks it. */
	if (n->running && n->running->ctx == x && gsd_policy_outranked(&n->queue, &x->sched))
		gsd_vidsch_preempt_running(d, n, "its priority was lowered");
}

void gsd_vidsch_install_hooks(gsd_daemon *d)
{
	d->hooks.context_attach = context_attach;
	d->hooks.context_detach = context_detach;
	d->hooks.paging_submit = paging_submit;
}

/* ---- cancellation ---- */

void gsd_vidsch_cancel_context(gsd_daemon *d, gsd_context *x, const char *why)
{
	gsd_policy_dequeue(&x->node->queue, &x->sched);
	unblock(x);
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &x->pending)
	{
		gsd_packet *p = GSD_CONTAINER_OF(it, gsd_packet, link);
		if (p != x->node->running)
			gsd_vidsch_cancel_packet(d, p, why);
	}
}

void gsd_vidsch_cancel(gsd_daemon *d, gsd_adapter *a, gsd_context *ctx, const char *why)
{
	if (ctx) {
		gsd_vidsch_cancel_context(d, ctx, why);
		return;
	}
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_list *it, *tmp;
		GSD_LIST_FOREACH_SAFE(it, tmp, &a->nodes[i].contexts)
		gsd_vidsch_cancel_context(d, GSD_CONTAINER_OF(it, gsd_context, node_link), why);
	}
}

/* ---- start and stop ---- */

/* The system context of each node (paging) and the device they belong to. */
static int make_system_contexts(gsd_daemon *d, gsd_adapter *a)
{
	a->sysdev = gsd_device_create(d, a, &d->system_tenant, 0, "paging", true);
	if (!a->sysdev)
		return -1;
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_context_params pr = {.node = i,
		                         .flags = GS_CTX_SYSTEM,
		                         .priority_class = GSD_CLASS_SYSTEM,
		                         .priority = GSD_PRIORITY_MIN, /* the system band */
		                         .info = {.paging_companion_node_id = i}};
		a->paging_ctx[i] = gsd_context_create(d, a->sysdev, &pr, true);
		if (!a->paging_ctx[i])
			return -1;
	}
	return 0;
}

int gsd_vidsch_start(gsd_daemon *d, gsd_adapter *a)
{
	pthread_mutex_init(&a->irq_lock, NULL);
	if (gsd_wake_init(d->loop, &a->irq_async, gsd_vidsch_irq_drain) != 0)
		return -1;
	a->irq_async.data = a;
	gsd_vidsch_display_init(d, a);
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_policy_queue_init(&n->queue);
		n->vtime_ns = GSD_VIRTUAL_EPOCH_NS;
		gsd_list_init(&n->contexts);
		gsd_vidsch_timers_init(d, n);
	}
	if (make_system_contexts(d, a) != 0) {
		GSD_ERROR("adapter %s: out of memory for the system contexts", a->cfg->name);
		return -1;
	}
	/* Handles first, engines second: if an engine fails to start, gsd_vidsch_stop can still
	 * close every handle and stop the engines that did start. */
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_engine_config ec = {.node = i,
		                        .backend = a->backend,
		                        .name = n->cfg->name,
		                        .memory = &a->memory,
		                        .virtual_clock = d->cfg.virtual_clock,
		                        .irq = gsd_vidsch_irq_post,
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
			gsd_vidsch_complete(d, n, p, "daemon stopping");
			gsd_vidsch_retire(d, p);
		}
		if (n->engine)
			a->ops->destroy(n->engine);
		n->engine = NULL;
	}
	/* Engines reported ABORTED for what they still held: settle those now. */
	gsd_vidsch_irq_drain(&a->irq_async);
	for (uint32_t i = 0; i < a->nnodes; i++) {
		uv_close((uv_handle_t *)&a->nodes[i].quantum_timer, NULL);
		uv_close((uv_handle_t *)&a->nodes[i].tdr_timer, NULL);
		uv_close((uv_handle_t *)&a->nodes[i].refill_timer, NULL);
		gsd_policy_queue_fini(&a->nodes[i].queue);
	}
	uv_close((uv_handle_t *)&a->vblank_timer, NULL);
	uv_close((uv_handle_t *)&a->recover_timer, NULL);
}

void gsd_vidsch_release(gsd_daemon *d, gsd_adapter *a)
{
	for (uint32_t i = 0; i < GSD_MAX_NODES; i++) {
		gsd_context *x = a->paging_ctx[i];
		if (!x)
			continue;
		gsd_list_remove(&x->node_link);
		gsd_context_put(d, x);
		a->paging_ctx[i] = NULL;
	}
	free(a->sysdev);
	a->sysdev = NULL;
	free(a->irqs);
	pthread_mutex_destroy(&a->irq_lock);
}
