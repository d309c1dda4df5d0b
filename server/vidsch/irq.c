/*
 * Interrupts from the engines. Engine threads post them (gsd_vidsch_irq_post, the callback the
 * scheduler registered with each engine); the loop drains them in order and moves the packets
 * on: completion (with present and flip), faults, preemption, engine resets and timeouts.
 */
#include "vidsch/internal.h"

#include "core/util.h"

#include "vidmm/vidmm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gsd_vidsch_irq_post(void *arg, const gsd_irq *irq)
{
	gsd_adapter *a = arg;
	pthread_mutex_lock(&a->irq_lock);
	gsd_irq *n = gsd_grow(a->irqs, &a->capirqs, a->nirqs + 1, sizeof(*n), 256);
	if (!n)
		abort(); /* an interrupt must never be lost */
	a->irqs = n;
	a->irqs[a->nirqs++] = *irq;
	pthread_mutex_unlock(&a->irq_lock);
	gsd_wake_send(&a->irq_async);
}

/*
 * The run ended with the packet still to finish (preempted, or aborted by a reset while
 * innocent): back to the head of its context, to be resubmitted from where it stopped
 * (vidsch.c, dispatch).
 */
static void requeue(gsd_daemon *d, gsd_packet *p, const gsd_irq *irq, int state, const char *why)
{
	p->resume_offset = irq->stop_offset;
	p->spin_done_us = irq->spin_done_us;
	p->needs_resubmit = true;
	if (state == GSD_PS(PREEMPTED)) {
		p->rec.preemptions++;
		d->stats.preemptions++;
	}
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
		gsd_vidsch_cancel_packet(d, p,
		                         d->stopping    ? "daemon stopping"
		                         : x->destroyed ? "context destroyed"
		                                        : "context faulted");
		gsd_context_put(d, x);
		return;
	}
	gsd_vidsch_enqueue_ready(d, x);
}

/* Why the engines of n's adapter were last reset (for an innocent packet's record). */
static const char *a_reset_why(const gsd_node *n)
{
	return n->adapter->reset_why[0] ? n->adapter->reset_why : "cause unknown";
}

/* Aborted by the engine's destruction while the daemon stops: it ends here. */
static void aborted_at_stop(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	gsd_vidsch_end(d, p, GSD_PS(ABORTED), gsd_node_now(n), "aborted: the daemon stopped");
	gsd_vidsch_retire(d, p);
}

static void completed(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	gsd_vidsch_present(p);
	if (gsd_vidsch_flip_waits(d, n, p)) {
		p->gpu_end_ns = 0; /* it completes at the blank */
		return;
	}
	gsd_vidsch_complete(d, n, p, NULL);
	gsd_context *x = gsd_vidsch_retire_keep_context(d, p);
	gsd_vidsch_enqueue_ready(d, x);
	gsd_context_put(d, x);
}

/* Every interrupt but STARTED and FENCE_SIGNAL ends the packet's run on the engine. */
static void run_ended(gsd_daemon *d, gsd_node *n, gsd_packet *p, const gsd_irq *irq)
{
	assert(p->on_engine && n->running == p);
	p->on_engine = false;
	uv_timer_stop(&n->tdr_timer);
	const char *reason = n->preempt_reason;
	gsd_vidsch_node_idle(n);
	bool guilty = n->tdr_guilty == p;
	if (guilty)
		n->tdr_guilty = NULL;
	if (d->cfg.virtual_clock) {
		if (n->vtime_ns < p->rec.started_ns)
			n->vtime_ns = p->rec.started_ns;
		n->vtime_ns += irq->engine_ns;
	}
	gsd_policy_charge(&p->ctx->sched, irq->engine_ns);
	n->busy_ns += irq->engine_ns;
	if (irq->gpu_end_ns) {
		/* The GPU's own start and end of the run, kept in order with what the daemon
		 * saw: never before the run was started, never after now. */
		uint64_t now = gsd_node_now(n);
		uint64_t start = irq->gpu_start_ns, end = irq->gpu_end_ns;
		start = start < p->rec.started_ns ? p->rec.started_ns : start > now ? now : start;
		end = end < start ? start : end > now ? now : end;
		/* Its RUNNING keeps the daemon's own time (the audit keeps both). */
		if (start != p->rec.started_ns && !p->rec.run_ns)
			p->rec.run_ns = p->rec.started_ns;
		p->rec.started_ns = start;
		p->gpu_end_ns = end;
	}

	switch (irq->kind) {
	case GSD_IRQ_DMA_COMPLETED:
		completed(d, n, p);
		break;
	case GSD_IRQ_DMA_FAULTED:
	case GSD_IRQ_DMA_PAGE_FAULTED:
		gsd_vidsch_on_fault(d, p, irq);
		break;
	case GSD_IRQ_DMA_PREEMPTED:
		requeue(d, p, irq, GSD_PS(PREEMPTED),
		        irq->stop_reason == GSD_STOP_BUDGET ? "quantum expired"
		                                            : (reason ? reason : "preempted"));
		break;
	case GSD_IRQ_ENGINE_TIMEOUT:
		gsd_vidsch_timed_out(d, n, p, irq);
		break;
	default: /* GSD_IRQ_ABORTED */
		if (guilty)
			gsd_vidsch_timed_out(d, n, p, irq);
		else if (d->stopping)
			aborted_at_stop(d, n, p);
		else /* an innocent packet caught by a reset runs again */
		{
			char why[192];
			if (irq->device_lost)
				snprintf(why, sizeof(why), "aborted: %s", irq->detail);
			else
				snprintf(why, sizeof(why), "aborted by an engine reset (%s)",
				         a_reset_why(n));
			requeue(d, p, irq, GSD_PS(ABORTED), why);
		}
		break;
	}
}

static void handle_irq(gsd_daemon *d, gsd_adapter *a, const gsd_irq *irq)
{
	gsd_node *n = &a->nodes[irq->node];
	gsd_packet *p = irq->exec->user;
	if (irq->kind == GSD_IRQ_FENCE_SIGNAL) {
		/* Checked at submission too; a sync object destroyed since is simply gone. */
		gsd_sync *s = gsd_object_get(d, irq->sync, GSD_OBJ_SYNC, p->ctx->obj.tenant);
		if (s && !s->daemon_only)
			gsd_sync_signal(d, s, irq->value, p->rec.packet);
		return;
	}
	if (irq->kind == GSD_IRQ_STARTED) {
		/* A run before this one (preempted) left its GPU end: this run's is its own. */
		p->gpu_end_ns = 0;
		p->rec.run_ns = 0;
		p->rec.started_ns = gsd_node_now(n);
		if (p->rec.resubmissions == 0 && p->rec.started_ns >= p->rec.submitted_ns)
			gsd_histo_observe(&d->stats.queue_wait,
			                  p->rec.started_ns - p->rec.submitted_ns);
		gsd_packet_transition(d, p, GSD_PS(RUNNING), NULL);
		return;
	}
	if (irq->device_lost && !a->device_lost) {
		/* Nothing more goes to the engines until the device is back. */
		a->device_lost = true;
		a->device_losses++;
	}
	run_ended(d, n, p, irq);
	if (a->device_lost)
		gsd_vidsch_recover_device(d, a);
	else
		gsd_vidsch_kick(d, n);
}

void gsd_vidsch_irq_drain(gsd_wake *h)
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
