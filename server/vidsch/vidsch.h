/*
 * VidSch: the GPU scheduler. It owns each node's queue of contexts, decides what runs (the
 * policy, policy.h), hands patched packets to the engines and takes their interrupts, and
 * carries out preemption, resubmission, timeout detection and recovery, flips and presents.
 *
 * Calls go down only: into the memory manager (vidmm/) to make a packet's allocations
 * resident before it runs, into the engines (engine/), the object model (core/) and the audit.
 * What it must tell the request layer (a packet ended, an allocation went idle, a sync object
 * changed) it tells through waiters (core/waiter.h).
 */
#ifndef GSD_VIDSCH_H
#define GSD_VIDSCH_H

#include "core/daemon.h"

/* Starts the engines of an adapter and makes its system (paging) contexts. 0 or -1 (logged). */
int gsd_vidsch_start(gsd_daemon *d, gsd_adapter *a);
/* Cancels what is queued, completes waiting flips, stops the engines (their aborted packets are
 * settled here) and closes the adapter's handles. */
void gsd_vidsch_stop(gsd_daemon *d, gsd_adapter *a);
/* Frees the system contexts (after the loop closed the handles). */
void gsd_vidsch_release(gsd_daemon *d, gsd_adapter *a);
/* Installs the scheduler's hooks (context attach/detach, paging submission). */
void gsd_vidsch_install_hooks(gsd_daemon *d);

/* Queues a validated packet on its context (takes ownership). A packet queued unrecorded
 * (p->unrecorded) waits for gsd_vidsch_recorded before it may run. */
void gsd_vidsch_queue(gsd_daemon *d, gsd_packet *p);
/* The context's completed fence: every packet of it with a fence at or below has ended (and
 * none above has). */
uint64_t gsd_vidsch_completed_fence(const gsd_context *x);
/* The SUBMITTED record of an unrecorded packet was committed (ok): it may run now. Or it could
 * not be: the packet is cancelled, never having run, so a client that retries never runs the
 * work twice. */
void gsd_vidsch_recorded(gsd_daemon *d, gsd_packet *p, bool ok);
/* While held (counted: holds nest), queued work is not started; the last release schedules
 * every node. */
void gsd_vidsch_hold(gsd_daemon *d, bool hold);
/* Changes a context's priority; preempts or requeues as the new band requires. */
void gsd_vidsch_context_priority(gsd_daemon *d, gsd_context *x, uint32_t cls, int32_t prio);
/* The tenant's share changed: its groups on every node of a weighted adapter take it now. */
void gsd_vidsch_tenant_share(gsd_daemon *d, const gsd_tenant *t);
/* The adapter's share policy (a->cfg->share_policy) changed: every client context of its
 * nodes is regrouped under it, queued ones queued again. 0, or -1 when memory is short. */
int gsd_vidsch_adapter_policy(gsd_daemon *d, gsd_adapter *a);
/* Bans the tenant (why: the reason, in the note tenant_banned): its contexts' work is
 * cancelled and its requests are answered BANNED, across restarts too, until an administrator
 * lifts it (TenantUpdate "banned"). */
void gsd_vidsch_ban(gsd_daemon *d, gsd_tenant *t, const char *why);
/* Cancels every packet not on an engine of a context, or of a whole adapter when ctx is NULL. */
void gsd_vidsch_cancel(gsd_daemon *d, gsd_adapter *a, gsd_context *ctx, const char *why);

#endif
