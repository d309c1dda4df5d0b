/*
 * VidSch for the foundation: per-node FIFO queues feeding one engine per node, packet
 * transitions (each one audited), fences, and the interrupts engines post back.
 *
 * Invariants (checked with assert in debug builds):
 * - a packet is in exactly one place: its node's queue, on the engine, or retired;
 * - a node's completed fence never goes backwards.
 */
#include "daemon.h"
#include "isa.h"
#include "log.h"
#include "rpc.h"
#include "wddm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Packets handed to an engine ahead of time, so the engine never idles between packets while
 * the loop is busy; small, so a later scheduler can still reorder what has not started. */
#define GS_ENGINE_DEPTH 2

static const char *const g_state_names[] = {"UNKNOWN",     "SUBMITTED", "READY",   "RUNNING",
                                            "COMPLETED",   "FAULTED",   "ABORTED", "PREEMPTED",
                                            "RESUBMITTED", "CANCELLED", "REJECTED"};

bool gs_packet_final(int state)
{
	return state == GS_PS(COMPLETED) || state == GS_PS(FAULTED) || state == GS_PS(CANCELLED) ||
	       state == GS_PS(REJECTED) || state == GS_PS(ABORTED);
}

static void publish(gs_daemon *d, const gs_packet *p, const char *detail)
{
	Gpusched__V1__Event ev = GPUSCHED__V1__EVENT__INIT;
	Gpusched__V1__PacketEvent pe = GPUSCHED__V1__PACKET_EVENT__INIT;
	pe.packet = p->rec.packet;
	pe.state = p->rec.state;
	pe.time_ns = gs_now_ns();
	pe.detail = (char *)(detail ? detail : "");
	ev.time_ns = pe.time_ns;
	ev.tenant = (char *)p->rec.tenant;
	ev.body_case = GPUSCHED__V1__EVENT__BODY_PACKET;
	ev.packet = &pe;
	gs_rpc_publish(d, &ev);
}

void gs_packet_transition(gs_daemon *d, gs_packet *p, int state, const char *detail)
{
	p->rec.state = state;
	GS_DEBUG("packet %llu -> %s%s%s", (unsigned long long)p->rec.packet, g_state_names[state],
	         detail ? ": " : "", detail ? detail : "");
	gs_audit_packet(d->audit, &p->rec, detail, NULL, NULL);
	publish(d, p, detail);
}

void gs_packet_free(gs_packet *p)
{
	free(p->dma);
	free(p->allocs);
	free(p->patches);
	free(p->ranges);
	free(p);
}

const gs_retired *gs_retired_find(const gs_daemon *d, uint64_t packet)
{
	const gs_retired *r = &d->retired[packet % GS_RETIRED_RING];
	return r->packet == packet ? r : NULL;
}

/* Wakes CPU reads/writes that waited for the allocation to go idle. */
static void allocation_idle(gs_daemon *d, gs_allocation *a);

/* A packet reached a final state: release what it held and remember how it ended. */
static void retire(gs_daemon *d, gs_packet *p)
{
	gs_list *it, *tmp;
	GS_LIST_FOREACH_SAFE(it, tmp, &p->waiters)
	{
		gs_call *c = GS_CONTAINER_OF(it, gs_call, link);
		gs_list_remove(it);
		gs_packet_wait_answer(c, p->rec.packet, p->rec.state, p->rec.fence);
	}
	gs_hmap_del(&d->packets, p->rec.packet);
	gs_retired *r = &d->retired[p->rec.packet % GS_RETIRED_RING];
	r->packet = p->rec.packet;
	r->fence = p->rec.fence;
	r->tenant = p->ctx->obj.tenant;
	r->state = p->rec.state;
	for (uint32_t i = 0; i < p->nallocs; i++) {
		gs_allocation *a = p->allocs[i].alloc;
		if (--a->inflight == 0)
			allocation_idle(d, a);
		gs_allocation_put(d, a);
	}
	p->node->queued--;
	gs_context_put(d, p->ctx);
	gs_packet_free(p);
}

/* Writes every patch location with its allocation's current address (DXGK_PATCHFLAGS
 * recorded) and builds the ranges the engine may touch. Runs at every (re)submission. */
static void patch(gs_packet *p)
{
	for (uint32_t i = 0; i < p->nallocs; i++) {
		const gs_allocation *a = p->allocs[i].alloc;
		p->ranges[i].addr = gs_addr_make(a->segment->id, a->offset);
		p->ranges[i].size = a->size;
		p->ranges[i].write = p->allocs[i].write;
	}
	for (uint32_t i = 0; i < p->npatches; i++) {
		const gs_packet_patch *pl = &p->patches[i];
		gs_le64_put(p->dma + pl->patch_offset,
		            p->ranges[pl->allocation_index].addr + pl->allocation_offset);
	}
	p->rec.patch_flags = gs_patch_flags_for_submit(p->rec.submit_flags);
}

static void complete(gs_daemon *d, gs_node *n, gs_packet *p)
{
	assert(p->rec.fence > n->completed_fence);
	n->completed_fence = p->rec.fence;
	p->rec.completed_ns = gs_node_now(n);
	d->stats.packets_completed++;
	gs_packet_transition(d, p, GS_PS(COMPLETED), NULL);
}

/*
 * NullRendering on an idle engine: the packet is queued, patched and fenced like any other, but
 * an infinitely fast engine needs no thread to run on, so the scheduler retires it itself
 * (saving two thread hops). Its SIGNAL commands still signal their fences, in order. When the
 * engine is busy the packet waits its turn in the engine's FIFO instead.
 */
static void run_null_here(gs_daemon *d, gs_node *n, gs_packet *p)
{
	p->rec.started_ns = gs_node_now(n);
	gs_packet_transition(d, p, GS_PS(RUNNING), NULL);
	size_t pos = 0;
	gs_isa_cmd cmd;
	while (gs_isa_decode(p->dma, p->dma_len, &pos, &cmd) == GS_ISA_OK) {
		if (cmd.op != GS_OP_SIGNAL)
			continue;
		gs_sync *s = gs_object_get(d, cmd.sync, GS_OBJ_SYNC, p->ctx->obj.tenant);
		if (s)
			gs_obj_sync_signal(d, s, cmd.value);
	}
	complete(d, n, p);
	retire(d, p);
}

static void kick(gs_daemon *d, gs_node *n)
{
	while (n->inflight < GS_ENGINE_DEPTH && !gs_list_empty(&n->queue)) {
		gs_packet *p = GS_CONTAINER_OF(gs_list_pop_front(&n->queue), gs_packet, link);
		patch(p);
		p->rec.ready_ns = gs_node_now(n);
		gs_packet_transition(d, p, GS_PS(READY), NULL);
		if ((p->rec.submit_flags & GS_SUBMIT_NULL_RENDERING) && n->inflight == 0) {
			run_null_here(d, n, p);
			continue;
		}
		p->exec = (gs_exec){.packet = p->rec.packet,
		                    .fence = p->rec.fence,
		                    .submit_flags = p->rec.submit_flags,
		                    .dma = p->dma,
		                    .dma_len = p->dma_len,
		                    .resume_offset = 0,
		                    .ranges = p->ranges,
		                    .nranges = p->nallocs,
		                    .user = p};
		p->on_engine = true;
		n->inflight++;
		if (n->adapter->ops->submit(n->engine, &p->exec) != 0) {
			n->inflight--;
			p->on_engine = false;
			p->rec.completed_ns = gs_node_now(n);
			p->rec.result = "engine refused the packet";
			d->stats.packets_cancelled++;
			gs_packet_transition(d, p, GS_PS(CANCELLED), p->rec.result);
			retire(d, p);
		}
	}
}

void gs_vidsch_queue(gs_daemon *d, gs_packet *p)
{
	gs_node *n = p->node;
	n->queued++;
	gs_list_push_back(&n->queue, &p->link);
	kick(d, n);
}

void gs_vidsch_cancel(gs_daemon *d, gs_adapter *a, const gs_context *ctx, const char *why)
{
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gs_node *n = &a->nodes[i];
		gs_list *it, *tmp;
		GS_LIST_FOREACH_SAFE(it, tmp, &n->queue)
		{
			gs_packet *p = GS_CONTAINER_OF(it, gs_packet, link);
			if (ctx && p->ctx != ctx)
				continue;
			gs_list_remove(it);
			p->rec.completed_ns = gs_node_now(n);
			p->rec.result = why;
			d->stats.packets_cancelled++;
			gs_packet_transition(d, p, GS_PS(CANCELLED), why);
			retire(d, p);
		}
	}
}

/* ---- interrupts ---- */

static void irq_post(void *arg, const gs_irq *irq)
{
	gs_adapter *a = arg;
	pthread_mutex_lock(&a->irq_lock);
	if (a->nirqs == a->capirqs) {
		size_t ncap = a->capirqs ? a->capirqs * 2 : 256;
		gs_irq *n = realloc(a->irqs, ncap * sizeof(*n));
		if (!n)
			abort(); /* an interrupt must never be lost */
		a->irqs = n;
		a->capirqs = ncap;
	}
	a->irqs[a->nirqs++] = *irq;
	pthread_mutex_unlock(&a->irq_lock);
	uv_async_send(&a->irq_async);
}

static void on_fault(gs_daemon *d, gs_packet *p, const gs_irq *irq)
{
	gs_node *n = p->node;
	p->rec.completed_ns = gs_node_now(n);
	snprintf(p->result, sizeof(p->result), "%s", irq->detail);
	p->rec.result = p->result;
	d->stats.packets_faulted++;
	gs_packet_transition(d, p, GS_PS(FAULTED), irq->detail);
	/* The context enters its error state: its queued work is discarded and later requests
	 * on it fail with STATUS_FAULTED. */
	if (!p->ctx->faulted) {
		p->ctx->faulted = true;
		GS_WARN("context %llu of tenant %s faulted: %s",
		        (unsigned long long)p->ctx->obj.handle, p->ctx->obj.tenant->name,
		        irq->detail);
		gs_audit_note(d->audit, p->ctx->obj.tenant->name, "context_faulted", irq->detail);
		gs_vidsch_cancel(d, n->adapter, p->ctx, "context faulted");
	}
}

static void handle_irq(gs_daemon *d, gs_adapter *a, const gs_irq *irq)
{
	gs_node *n = &a->nodes[irq->node];
	gs_packet *p = irq->exec->user;
	if (irq->kind == GS_IRQ_FENCE_SIGNAL) {
		/* Checked at submission too; a sync object destroyed since is simply gone. */
		gs_sync *s = gs_object_get(d, irq->sync, GS_OBJ_SYNC, p->ctx->obj.tenant);
		if (s)
			gs_obj_sync_signal(d, s, irq->value);
		return;
	}
	if (irq->kind == GS_IRQ_STARTED) {
		p->rec.started_ns = gs_node_now(n);
		gs_packet_transition(d, p, GS_PS(RUNNING), NULL);
		return;
	}
	/* Every other interrupt ends this run of the packet on the engine. */
	assert(p->on_engine);
	p->on_engine = false;
	n->inflight--;
	if (d->cfg.virtual_clock) {
		if (n->vtime_ns < p->rec.started_ns)
			n->vtime_ns = p->rec.started_ns;
		n->vtime_ns += irq->engine_ns;
	}
	switch (irq->kind) {
	case GS_IRQ_DMA_COMPLETED:
		complete(d, n, p);
		break;
	case GS_IRQ_DMA_FAULTED:
	case GS_IRQ_DMA_PAGE_FAULTED:
		n->completed_fence = p->rec.fence;
		on_fault(d, p, irq);
		break;
	case GS_IRQ_DMA_PREEMPTED:
		/* The foundation never asks for preemption; an engine that reports it anyway
		 * has its packet resumed where it stopped. */
		p->rec.preemptions++;
		gs_packet_transition(d, p, GS_PS(PREEMPTED), NULL);
		p->exec.resume_offset = irq->stop_offset;
		p->on_engine = true;
		n->inflight++;
		p->rec.resubmissions++;
		gs_packet_transition(d, p, GS_PS(RESUBMITTED), NULL);
		if (a->ops->submit(n->engine, &p->exec) == 0)
			return;
		p->on_engine = false;
		n->inflight--;
		__attribute__((fallthrough)); /* the engine is gone */
	default:                              /* GS_IRQ_ABORTED */
		p->rec.completed_ns = gs_node_now(n);
		p->rec.result = "aborted: engine stopped";
		d->stats.packets_cancelled++;
		gs_packet_transition(d, p, GS_PS(ABORTED), p->rec.result);
		break;
	}
	retire(d, p);
	kick(d, n);
}

static void irq_drain(uv_async_t *h)
{
	gs_adapter *a = h->data;
	for (;;) {
		gs_irq batch[64];
		pthread_mutex_lock(&a->irq_lock);
		size_t n = a->nirqs < 64 ? a->nirqs : 64;
		if (n == 0) {
			/* a->irqs is still NULL when no interrupt ever arrived. */
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

int gs_vidsch_start(gs_daemon *d, gs_adapter *a)
{
	pthread_mutex_init(&a->irq_lock, NULL);
	uv_async_init(d->loop, &a->irq_async, irq_drain);
	a->irq_async.data = a;
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gs_node *n = &a->nodes[i];
		gs_engine_config ec = {.node = i,
		                       .name = n->cfg->name,
		                       .memory = &a->memory,
		                       .virtual_clock = d->cfg.virtual_clock,
		                       .irq = irq_post,
		                       .irq_arg = a};
		int rc = a->ops->create(&ec, &n->engine);
		if (rc != 0) {
			GS_ERROR("adapter %s: cannot start the engine of node %s (%d)",
			         a->cfg->name, n->cfg->name, rc);
			return -1;
		}
	}
	return 0;
}

void gs_vidsch_stop(gs_daemon *d, gs_adapter *a)
{
	gs_vidsch_cancel(d, a, NULL, "daemon stopping");
	for (uint32_t i = 0; i < a->nnodes; i++) {
		if (a->nodes[i].engine)
			a->ops->destroy(a->nodes[i].engine);
		a->nodes[i].engine = NULL;
	}
	/* Engines reported ABORTED for what they still held: settle those now. */
	irq_drain(&a->irq_async);
}

static void allocation_idle(gs_daemon *d, gs_allocation *a)
{
	(void)d;
	gs_list *it, *tmp;
	GS_LIST_FOREACH_SAFE(it, tmp, &a->waiters)
	{
		gs_call *c = GS_CONTAINER_OF(it, gs_call, link);
		gs_list_remove(it);
		/* Re-dispatch: the handler now finds the allocation idle and answers. */
		gs_handle_request(d, c);
	}
}
