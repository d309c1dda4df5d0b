/*
 * Devices, contexts and sync objects: create, destroy, context priority, and signalling and
 * waiting on sync objects. The objects themselves are made and unmade in core/object.c.
 */
#include "rpc/handlers.h"

#include "vidsch/vidsch.h"

#include "wddm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- devices ---- */

/* While the daemon drains for maintenance nothing new is set up: true when c was answered. */
static bool refused_draining(gsd_daemon *d, gsd_call *c)
{
	if (!d->drain.on)
		return false;
	gsd_call_error(c, GSD_ST(UNAVAILABLE),
	               "the daemon is draining for maintenance: no new devices or contexts (it "
	               "stops once its work is done)");
	return true;
}

void gsd_h_device_create(gsd_daemon *d, gsd_call *c)
{
	if (refused_draining(d, c))
		return;
	gsd_adapter *a = gsd_call_adapter(c);
	if (!a)
		return;
	if (c->tenant->devices >= d->cfg.max_devices) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s already has %u devices (max %u)", c->tenant->conf.name,
		               c->tenant->devices, d->cfg.max_devices);
		return;
	}
	gsd_device *dev =
	        gsd_device_create(d, a, c->tenant, c->guest, R(device_create)->name, false);
	if (!dev) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	Gpusched__V1__DeviceCreateResponse dc = GPUSCHED__V1__DEVICE_CREATE_RESPONSE__INIT;
	dc.device = dev->obj.handle;
	GSD_REPLY(c, DEVICE_CREATE, device_create, &dc);
}

void gsd_h_device_destroy(gsd_daemon *d, gsd_call *c)
{
	gsd_device *dev = gsd_call_object(c, R(device_destroy)->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	gsd_device_destroy(d, dev);
	gsd_call_reply_empty(c);
}

/* A guest process of a VM went away: its devices (and all in them) go, nothing else. */
typedef struct guest_of {
	const gsd_tenant *tenant;
	uint64_t guest;
} guest_of;

static bool is_guest_device(const gsd_object *o, void *arg)
{
	const guest_of *g = arg;
	return o->type == GSD_OBJ_DEVICE && o->tenant == g->tenant &&
	       (g->guest ? o->guest == g->guest : o->guest != 0);
}

static bool is_tenant_device(const gsd_object *o, void *arg)
{
	return o->type == GSD_OBJ_DEVICE && o->tenant == arg;
}

int gsd_tenant_release_devices(gsd_daemon *d, gsd_tenant *t)
{
	gsd_object **devs;
	size_t n;
	if (gsd_object_collect(d, is_tenant_device, t, &devs, &n) != 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		gsd_device_destroy(d, (gsd_device *)devs[i]);
	free(devs);
	return (int)n;
}

void gsd_h_guest_release(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__GuestReleaseRequest *q = R(guest_release);
	if (c->tenant->conf.kind != GPUSCHED__V1__TENANT_KIND__TENANT_KIND_VM || c->guest) {
		gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
		               "only a virtual machine (its relay, as guest 0) releases a guest"
		               " process");
		return;
	}
	if (!q->guest == !q->all_guests) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "name one guest process, or all_guests (guest 0 is the virtual"
		               " machine itself)");
		return;
	}
	guest_of g = {c->tenant, q->guest};
	gsd_object **devs;
	size_t n;
	if (gsd_object_collect(d, is_guest_device, &g, &devs, &n) != 0) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++)
		gsd_device_destroy(d, (gsd_device *)devs[i]);
	free(devs);
	char text[96];
	if (q->all_guests)
		snprintf(text, sizeof(text), "every guest: %zu devices destroyed", n);
	else
		snprintf(text, sizeof(text), "guest %llu: %zu devices destroyed",
		         (unsigned long long)q->guest, n);
	gsd_audit_note(d->audit, c->identity, "guest_released", text);
	Gpusched__V1__GuestReleaseResponse gr = GPUSCHED__V1__GUEST_RELEASE_RESPONSE__INIT;
	gr.devices = (uint32_t)n;
	GSD_REPLY(c, GUEST_RELEASE, guest_release, &gr);
}

/* ---- contexts ---- */

static void context_info_out(const gsd_context *x, Gpusched__V1__ContextInfo *o)
{
	o->dma_buffer_size = x->info.dma_buffer_size;
	o->dma_buffer_segment_set = x->info.dma_buffer_segment_set;
	o->dma_buffer_private_data_size = x->info.dma_buffer_private_data_size;
	o->allocation_list_size = x->info.allocation_list_size;
	o->patch_location_list_size = x->info.patch_location_list_size;
	o->caps = x->info.caps;
	o->paging_companion_node_id = x->info.paging_companion_node_id;
}

void gsd_h_context_create(gsd_daemon *d, gsd_call *c)
{
	if (refused_draining(d, c))
		return;
	const Gpusched__V1__ContextCreateRequest *q = R(context_create);
	gsd_device *dev = gsd_call_object(c, q->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	if (!q->info) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "context_create needs info (DXGK_CONTEXTINFO)");
		return;
	}
	gsd_rules_adapter ra;
	gsd_rules_adapter_of(d, dev->adapter, &ra);
	gsd_rules_context rc;
	gsd_rules_context_of(q, &rc);
	char msg[256];
	int st = gsd_rules_context_create(&ra, &rc, c->tenant->conf.priority_ceiling, msg,
	                                  sizeof(msg));
	if (st != GSD_ST(OK)) {
		gsd_call_error(c, st, "%s", msg);
		return;
	}
	if (c->tenant->conf.context_limit && c->tenant->contexts >= c->tenant->conf.context_limit) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED), "tenant %s reached its context limit %u",
		               c->tenant->conf.name, c->tenant->conf.context_limit);
		return;
	}
	gsd_context_params pr = {.node = q->node,
	                         .flags = q->flags,
	                         .priority_class = q->priority_class,
	                         .priority = q->priority,
	                         .info = rc.info};
	gsd_context *x = gsd_context_create(d, dev, &pr, false);
	if (!x) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	Gpusched__V1__ContextInfo info = GPUSCHED__V1__CONTEXT_INFO__INIT;
	context_info_out(x, &info);
	Gpusched__V1__ContextCreateResponse cc = GPUSCHED__V1__CONTEXT_CREATE_RESPONSE__INIT;
	cc.context = x->obj.handle;
	cc.info = &info;
	GSD_REPLY(c, CONTEXT_CREATE, context_create, &cc);
}

void gsd_h_context_destroy(gsd_daemon *d, gsd_call *c)
{
	uint64_t h = R(context_destroy)->context;
	/* A faulted context can still be destroyed: look it up without the fault check. */
	gsd_context *x = gsd_call_find(c, h, GSD_OBJ_CONTEXT);
	if (!x || x->dev->adapter->id != c->req->adapter) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "context %llu does not exist on adapter %u",
		               (unsigned long long)h, c->req->adapter);
		return;
	}
	gsd_context_destroy(d, x, "context destroyed");
	gsd_call_reply_empty(c);
}

void gsd_h_context_query(gsd_daemon *d, gsd_call *c)
{
	(void)d;
	uint64_t h = R(context_query)->context;
	/* A faulted context answers too: that it faulted is part of the answer. */
	gsd_context *x = gsd_call_find(c, h, GSD_OBJ_CONTEXT);
	if (!x || x->dev->adapter->id != c->req->adapter) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "context %llu does not exist on adapter %u",
		               (unsigned long long)h, c->req->adapter);
		return;
	}
	Gpusched__V1__ContextQueryResponse cq = GPUSCHED__V1__CONTEXT_QUERY_RESPONSE__INIT;
	cq.context = x->obj.handle;
	cq.node = x->node->index;
	cq.submitted_fence = x->fence_submitted;
	cq.completed_fence = gsd_vidsch_completed_fence(x);
	cq.queued = (uint32_t)(cq.submitted_fence - cq.completed_fence);
	cq.faulted = x->faulted;
	cq.priority_class = x->sched.priority_class;
	cq.priority = x->sched.priority;
	GSD_REPLY(c, CONTEXT_QUERY, context_query, &cq);
}

void gsd_h_context_set_priority(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__ContextSetPriorityRequest *q = R(context_set_priority);
	gsd_context *x = gsd_call_object(c, q->context, GSD_OBJ_CONTEXT);
	if (!x)
		return;
	if (q->priority_class > GS_PRIORITY_CLASS_MAX || q->priority < -7 || q->priority > 7) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "priority class %u must be 0..5 and priority %d must be -7..+7",
		               q->priority_class, q->priority);
		return;
	}
	if (q->priority_class > c->tenant->conf.priority_ceiling) {
		gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
		               "priority class %s is above the tenant's ceiling %s",
		               gs_priority_class_name(q->priority_class),
		               gs_priority_class_name(c->tenant->conf.priority_ceiling));
		return;
	}
	gsd_vidsch_context_priority(d, x, q->priority_class, q->priority);
	gsd_context_audit(d, x);
	gsd_call_reply_empty(c);
}

/* ---- sync objects ---- */

void gsd_h_sync_create(gsd_daemon *d, gsd_call *c)
{
	gsd_device *dev = gsd_call_object(c, R(sync_create)->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	uint32_t max = gsd_tenant_sync_limit(d, c->tenant);
	if (c->tenant->syncs >= max) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s has %u sync objects: %s %u reached", c->tenant->conf.name,
		               c->tenant->syncs,
		               c->tenant->conf.sync_limit ? "sync_limit" : "max_syncs", max);
		return;
	}
	gsd_sync *s = gsd_sync_create(d, dev, R(sync_create)->initial_value, false);
	if (!s) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	Gpusched__V1__SyncCreateResponse sc = GPUSCHED__V1__SYNC_CREATE_RESPONSE__INIT;
	sc.sync = s->obj.handle;
	GSD_REPLY(c, SYNC_CREATE, sync_create, &sc);
}

/* The device's paging fence is the daemon's: clients may wait on it, nothing else. */
static bool refuse_daemon_sync(gsd_call *c, const gsd_sync *s, const char *what)
{
	if (!s->daemon_only)
		return false;
	gsd_call_error(c, GSD_ST(PERMISSION_DENIED), "sync %llu is its device's paging fence: %s",
	               (unsigned long long)s->obj.handle, what);
	return true;
}

void gsd_h_sync_destroy(gsd_daemon *d, gsd_call *c)
{
	gsd_sync *s = gsd_call_object(c, R(sync_destroy)->sync, GSD_OBJ_SYNC);
	if (!s || refuse_daemon_sync(c, s, "it goes with the device"))
		return;
	gsd_sync_destroy(d, s);
	gsd_call_reply_empty(c);
}

void gsd_h_sync_signal(gsd_daemon *d, gsd_call *c)
{
	gsd_sync *s = gsd_call_object(c, R(sync_signal)->sync, GSD_OBJ_SYNC);
	if (!s || refuse_daemon_sync(c, s, "only the daemon signals it"))
		return;
	uint64_t v = R(sync_signal)->value;
	if (v < s->value) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "a monitored fence never goes backwards (value %llu < current %llu)",
		               (unsigned long long)v, (unsigned long long)s->value);
		return;
	}
	gsd_sync_signal(d, s, v, 0);
	gsd_call_reply_empty(c);
}

static void answer_sync_wait(gsd_call *c, uint64_t value)
{
	Gpusched__V1__SyncWaitResponse sw = GPUSCHED__V1__SYNC_WAIT_RESPONSE__INIT;
	sw.value = value;
	GSD_REPLY(c, SYNC_WAIT, sync_wait, &sw);
}

static void sync_wait_expired(gsd_call *c)
{
	gsd_sync *s = c->wait_object;
	gsd_waiter_cancel(&c->waiter);
	gsd_call_error(c, GSD_ST(TIMEOUT), "sync %llu is at %llu, waited for %llu",
	               (unsigned long long)s->obj.handle, (unsigned long long)s->value,
	               (unsigned long long)c->wait_value);
}

/* Answers a wait that can be answered now; false when it must go on waiting. */
static bool sync_wait_answer(gsd_call *c, const gsd_sync *s)
{
	if (s->destroyed)
		gsd_call_error(c, c->d->stopping ? GSD_ST(SHUTTING_DOWN) : GSD_ST(NOT_FOUND),
		               "the sync object was destroyed while waited on");
	else if (s->value >= c->wait_value)
		answer_sync_wait(c, s->value);
	else if (c->wait_value <= s->abandoned)
		gsd_call_error(c, GSD_ST(FAULTED),
		               "sync %llu will never reach %llu: the packet that would signal it "
		               "faulted or was cancelled",
		               (unsigned long long)s->obj.handle,
		               (unsigned long long)c->wait_value);
	else
		return false;
	return true;
}

/* The sync object changed: answer, or wait on. */
static void sync_wait_wake(gsd_waiter *w, void *event)
{
	gsd_call *c = gsd_call_of_waiter(w);
	gsd_sync *s = event;
	if (!sync_wait_answer(c, s))
		gsd_call_wait(c, &s->waiters, sync_wait_wake, 0, NULL); /* parked already */
}

void gsd_h_sync_wait(gsd_daemon *d, gsd_call *c)
{
	(void)d;
	const Gpusched__V1__SyncWaitRequest *q = R(sync_wait);
	gsd_sync *s = gsd_call_object(c, q->sync, GSD_OBJ_SYNC);
	if (!s)
		return;
	c->wait_object = s;
	c->wait_value = q->value;
	if (sync_wait_answer(c, s))
		return;
	if (q->timeout_ms == 0) {
		sync_wait_expired(c);
		return;
	}
	gsd_call_wait(c, &s->waiters, sync_wait_wake, q->timeout_ms, sync_wait_expired);
}
