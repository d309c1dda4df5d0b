/*
 * Preemption requests and their deadlines, and what happens when a packet does not stop:
 * timeout detection and recovery (TDR), faults and bans.
 *
 * A preemption not honoured within tdr_delay resets the engine (wall clock: the TDR timer
 * below, then the engine's reset(); virtual clock: the engine reports ENGINE_TIMEOUT itself).
 * The guilty packet's context faults; innocent packets aborted by the reset are resubmitted
 * (irq.c); more than tdr_limit_count timeouts within tdr_limit_time ban the tenant. A paging
 * packet hit by a reset widens it to the whole adapter.
 */
#include "vidsch/internal.h"

#include "core/events.h"
#include "core/log.h"

#include "wddm.h"

#include <stdio.h>
#include <string.h>

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
	n->resets++;
	d->stats.resets++;
	n->adapter->ops->reset(n->engine);
}

void gsd_vidsch_preempt_running(gsd_daemon *d, gsd_node *n, const char *why)
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
	/* Only worth it if someone of the running band (or higher) still waits. */
	if (n->running && gsd_policy_contended(&n->queue, &n->running->ctx->sched))
		gsd_vidsch_preempt_running(n->adapter->d, n, "quantum expired");
}

void gsd_vidsch_end_slice(gsd_daemon *d, gsd_node *n)
{
	uint64_t used_ms = (gsd_now_ns() - n->run_start) / 1000000u;
	uint64_t quantum_ms = (gsd_vidsch_params(d, n->adapter).quantum_ns + 999999u) / 1000000u;
	uv_timer_start(&n->quantum_timer, quantum_cb,
	               used_ms >= quantum_ms ? 0 : quantum_ms - used_ms, 0);
}

void gsd_vidsch_arm_tdr(gsd_daemon *d, gsd_node *n, uint64_t budget_ns)
{
	/* A budgeted run that does not stop (a non-preemptible SPIN) is a hang. */
	if (budget_ns && !d->cfg.virtual_clock)
		uv_timer_start(&n->tdr_timer, tdr_cb,
		               budget_ns / 1000000u + 1 + d->cfg.tdr_delay_ms, 0);
}

void gsd_vidsch_timers_init(gsd_daemon *d, gsd_node *n)
{
	uv_timer_init(d->loop, &n->quantum_timer);
	uv_timer_init(d->loop, &n->tdr_timer);
	uv_timer_init(d->loop, &n->refill_timer);
	n->quantum_timer.data = n->tdr_timer.data = n->refill_timer.data = n;
}

/* ---- faults, timeouts, bans ---- */

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
	         x->obj.tenant->conf.name, why);
	gsd_audit_note(d->audit, x->obj.identity, "context_faulted", why);
	/* Its queued work is discarded and later requests on it fail with STATUS_FAULTED. */
	gsd_vidsch_cancel_context(d, x, "context faulted");
}

void gsd_vidsch_ban(gsd_daemon *d, gsd_tenant *t, const char *why)
{
	if (t->banned || t == &d->system_tenant)
		return;
	t->banned = true;
	d->stats.bans++;
	char text[256];
	snprintf(text, sizeof(text), "tenant %s banned: %s", t->conf.name, why);
	GSD_WARN("%s", text);
	gsd_events_note(d, t->audit_name, "tenant_banned", text);
	for (uint32_t a = 0; a < d->nadapters; a++)
		for (uint32_t i = 0; i < d->adapters[a].nnodes; i++) {
			gsd_list *it, *tmp;
			GSD_LIST_FOREACH_SAFE(it, tmp, &d->adapters[a].nodes[i].contexts)
			{
				gsd_context *x = GSD_CONTAINER_OF(it, gsd_context, node_link);
				if (x->obj.tenant == t)
					gsd_vidsch_cancel_context(d, x, "tenant banned");
			}
		}
}

static void ban_tenant(gsd_daemon *d, gsd_tenant *t)
{
	char why[128];
	snprintf(why, sizeof why, "more than %u GPU timeouts within %u ms", d->cfg.tdr_limit_count,
	         d->cfg.tdr_limit_time_ms);
	gsd_vidsch_ban(d, t, why);
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

/* Ends a packet FAULTED with `why`, abandoning its signals from `stop_offset`, and faults its
 * context. Returns the context, kept alive for the caller (which puts it). */
static gsd_context *packet_faulted(gsd_daemon *d, gsd_packet *p, size_t stop_offset,
                                   const char *why)
{
	gsd_vidsch_end(d, p, GSD_PS(FAULTED), gsd_node_now(p->node), why);
	gsd_vidsch_abandon_signals(d, p, stop_offset);
	gsd_context *x = gsd_vidsch_retire_keep_context(d, p);
	fault_context(d, x, why);
	return x;
}

void gsd_vidsch_timed_out(gsd_daemon *d, gsd_node *n, gsd_packet *p, const gsd_irq *irq)
{
	char why[160];
	snprintf(why, sizeof(why),
	         "timeout detection and recovery: preemption not honoured within %u ms on node "
	         "%s",
	         d->cfg.tdr_delay_ms, n->cfg->name);
	gsd_tenant *t = p->ctx->obj.tenant;
	bool paging = p->rec.submit_flags & GS_SUBMIT_PAGING;
	snprintf(n->adapter->reset_why, sizeof(n->adapter->reset_why),
	         "%s packet %llu did not stop on node %s",
	         paging ? "the memory manager's paging" : "another context's",
	         (unsigned long long)gsd_wire_packet_out(&d->wire, p->rec.packet), n->cfg->name);
	gsd_events_note(d, t->audit_name, "tdr", why);
	gsd_context_put(d, packet_faulted(d, p, irq->stop_offset, why));
	count_timeout(d, t, gsd_node_now(n));
	/* A paging packet hit by the reset widens it to the whole adapter. */
	if (paging) {
		gsd_adapter *a = n->adapter;
		for (uint32_t i = 0; i < a->nnodes; i++)
			if (&a->nodes[i] != n && a->nodes[i].running)
				a->ops->reset(a->nodes[i].engine);
	}
}

static void recover_retry_cb(uv_timer_t *t)
{
	gsd_adapter *a = t->data;
	gsd_vidsch_recover_device(a->d, a);
}

void gsd_vidsch_recover_device(gsd_daemon *d, gsd_adapter *a)
{
	if (!a->device_lost || (a->device_dead && !a->device_retry) || d->stopping)
		return;
	for (uint32_t i = 0; i < a->nnodes; i++)
		if (a->nodes[i].running)
			return; /* the last engine to stop comes back here */
	char err[256] = "", why[512];
	uint64_t t0 = gsd_now_ns();
	int rc = a->ops->recover ? a->ops->recover(a->backend, &a->memory, err, sizeof(err)) : -1;
	uint64_t ms = (gsd_now_ns() - t0) / 1000000u;
	if (rc > 0) {
		/* Not now: out of service (its queued work cancelled, no new allocations)
		 * until the backend can recreate the device; asked again every second. */
		if (!a->device_retry) {
			snprintf(why, sizeof(why),
			         "adapter %s: out of service until the device can be recreated: %s",
			         a->cfg->name, err);
			GSD_ERROR("%s", why);
			gsd_events_note(d, NULL, "device_lost", why);
			a->device_dead = true;
			a->device_retry = true;
			a->dead_since_ns = t0;
			for (uint32_t i = 0; i < a->nnodes; i++)
				gsd_vidsch_kick(d, &a->nodes[i]);
		}
		uv_timer_start(&a->recover_timer, recover_retry_cb, 1000, 0);
		return;
	}
	if (rc == 0 && a->device_retry) {
		snprintf(why, sizeof(why),
		         "adapter %s: back in service after %llu ms: what hung its device ended; "
		         "recreated in %llu ms, its memory carried over",
		         a->cfg->name, (unsigned long long)((t0 - a->dead_since_ns) / 1000000u),
		         (unsigned long long)ms);
		GSD_WARN("%s", why);
		gsd_events_note(d, NULL, "device_recovered", why);
		a->device_dead = a->device_retry = a->device_lost = false;
		for (uint32_t i = 0; i < a->nnodes; i++)
			gsd_vidsch_kick(d, &a->nodes[i]);
		return;
	}
	a->device_retry = false;
	if (rc != 0) {
		snprintf(why, sizeof(why),
		         "adapter %s: the device was lost (loss %u) and could not be recreated: %s",
		         a->cfg->name, a->device_losses, err[0] ? err : "the backend cannot");
		GSD_ERROR("%s", why);
		gsd_events_note(d, NULL, "device_lost", why);
		a->device_dead = true;
	} else {
		snprintf(why, sizeof(why),
		         "adapter %s: the device was lost (loss %u); recreated in %llu ms, its "
		         "memory carried over, innocent packets resubmitted",
		         a->cfg->name, a->device_losses, (unsigned long long)ms);
		GSD_WARN("%s", why);
		gsd_events_note(d, NULL, "device_lost", why);
		a->device_lost = false;
	}
	for (uint32_t i = 0; i < a->nnodes; i++)
		gsd_vidsch_kick(d, &a->nodes[i]);
}

void gsd_vidsch_on_fault(gsd_daemon *d, gsd_packet *p, const gsd_irq *irq)
{
	gsd_context_put(d, packet_faulted(d, p, irq->stop_offset, irq->detail));
}
