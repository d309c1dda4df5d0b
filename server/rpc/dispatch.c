/*
 * Request dispatch, and the handlers for adapter info, devices, contexts, sync objects,
 * statistics and tenants. Allocations are in h_alloc.c, submission and waits in h_submit.c,
 * history in h_history.c.
 *
 * Every handler answers its call exactly once, now or later (a deferred wait), and every
 * error answer is audited by gsd_call_error.
 */
#include "core/daemon.h"
#include "core/log.h"
#include "rpc/rpc.h"
#include "rpc/rules.h"
#include "wddm.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R(field) (c->req->field)

static void reply_empty(gsd_call *c)
{
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	gsd_call_reply(c, &resp);
}

gsd_adapter *gsd_call_adapter(gsd_call *c)
{
	if (c->req->adapter >= c->d->nadapters) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "adapter %u does not exist (%u adapters)",
		               c->req->adapter, c->d->nadapters);
		return NULL;
	}
	return &c->d->adapters[c->req->adapter];
}

static gsd_adapter *object_adapter(gsd_object *o)
{
	switch (o->type) {
	case GSD_OBJ_DEVICE:
		return ((gsd_device *)o)->adapter;
	case GSD_OBJ_CONTEXT:
		return ((gsd_context *)o)->dev->adapter;
	case GSD_OBJ_ALLOCATION:
		return ((gsd_allocation *)o)->dev->adapter;
	case GSD_OBJ_SYNC:
		return ((gsd_sync *)o)->dev->adapter;
	}
	return NULL;
}

static const char *const g_type_names[] = {"", "device", "context", "allocation", "sync object"};

void *gsd_call_object(gsd_call *c, uint64_t handle, gsd_obj_type type)
{
	gsd_object *o = gsd_object_get(c->d, handle, type, c->tenant);
	if (!o || object_adapter(o)->id != c->req->adapter) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "%s %llu does not exist on adapter %u",
		               g_type_names[type], (unsigned long long)handle, c->req->adapter);
		return NULL;
	}
	if (type == GSD_OBJ_CONTEXT && ((gsd_context *)o)->faulted) {
		gsd_call_error(c, GSD_ST(FAULTED),
		               "context %llu is in an error state after a fault",
		               (unsigned long long)handle);
		return NULL;
	}
	return o;
}

void gsd_rules_adapter_of(const gsd_daemon *d, const gsd_adapter *a, gsd_rules_adapter *out)
{
	memset(out, 0, sizeof(*out));
	out->nnodes = a->nnodes;
	for (int i = 0; i < 32; i++)
		out->segment_kind[i] = -1;
	for (uint32_t i = 0; i < a->nsegments; i++)
		out->segment_kind[a->segments[i].id] = a->segments[i].kind;
	out->max_dma_buffer = d->cfg.max_dma_buffer;
	out->max_allocation_list = d->cfg.max_allocation_list;
	out->max_patch_list = d->cfg.max_patch_list;
}

/* ---- info ---- */

static void h_info(gsd_daemon *d, gsd_call *c)
{
	Gpusched__V1__AdapterInfo ai[GSD_MAX_ADAPTERS];
	Gpusched__V1__AdapterInfo *aip[GSD_MAX_ADAPTERS];
	Gpusched__V1__NodeInfo ni[GSD_MAX_ADAPTERS][GSD_MAX_NODES];
	Gpusched__V1__NodeInfo *nip[GSD_MAX_ADAPTERS][GSD_MAX_NODES];
	Gpusched__V1__SegmentInfo si[GSD_MAX_ADAPTERS][8];
	Gpusched__V1__SegmentInfo *sip[GSD_MAX_ADAPTERS][8];
	for (uint32_t i = 0; i < d->nadapters; i++) {
		gsd_adapter *a = &d->adapters[i];
		gpusched__v1__adapter_info__init(&ai[i]);
		aip[i] = &ai[i];
		ai[i].id = a->id;
		ai[i].name = (char *)a->cfg->name;
		ai[i].backend = (char *)a->ops->name;
		ai[i].clock = d->cfg.virtual_clock ? "virtual" : "wall";
		ai[i].caps = 0x1u | (d->cfg.virtual_clock ? 0x2u : 0);
		ai[i].max_dma_buffer = d->cfg.max_dma_buffer;
		ai[i].max_allocation_list = d->cfg.max_allocation_list;
		ai[i].max_patch_list = d->cfg.max_patch_list;
		ai[i].system_memory = a->sysmem.size;
		ai[i].system_memory_used = a->sysmem.heap.used;
		ai[i].paging_chunk = d->cfg.paging_chunk;
		for (uint32_t n = 0; n < a->nnodes; n++) {
			gpusched__v1__node_info__init(&ni[i][n]);
			nip[i][n] = &ni[i][n];
			ni[i][n].id = n;
			ni[i][n].name = (char *)a->nodes[n].cfg->name;
			ni[i][n].kind = a->nodes[n].cfg->kind;
			ni[i][n].engines = 1;
			ni[i][n].paging = a->nodes[n].cfg->paging;
			ni[i][n].fence = a->nodes[n].completed_fence;
			ni[i][n].queued = a->nodes[n].queued;
		}
		ai[i].n_nodes = a->nnodes;
		ai[i].nodes = nip[i];
		for (uint32_t s = 0; s < a->nsegments; s++) {
			gsd_segment *seg = &a->segments[s];
			gpusched__v1__segment_info__init(&si[i][s]);
			sip[i][s] = &si[i][s];
			si[i][s].id = seg->id;
			si[i][s].name = seg->name;
			si[i][s].kind = seg->kind;
			si[i][s].size = seg->size;
			si[i][s].used = seg->heap.used;
			si[i][s].largest_free = gsd_heap_largest_free(&seg->heap);
			si[i][s].cpu_visible = seg->cpu_visible;
		}
		ai[i].n_segments = a->nsegments;
		ai[i].segments = sip[i];
	}
	Gpusched__V1__InfoResponse info = GPUSCHED__V1__INFO_RESPONSE__INIT;
	info.version = GS_VERSION;
	info.n_adapters = d->nadapters;
	info.adapters = aip;
	info.tenant = c->tenant->name;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_INFO;
	resp.info = &info;
	gsd_call_reply(c, &resp);
}

/* ---- devices ---- */

static void h_device_create(gsd_daemon *d, gsd_call *c)
{
	gsd_adapter *a = gsd_call_adapter(c);
	if (!a)
		return;
	if (c->tenant->devices >= d->cfg.max_devices) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s already has %u devices (max %u)", c->tenant->name,
		               c->tenant->devices, d->cfg.max_devices);
		return;
	}
	gsd_device *dev = calloc(1, sizeof(*dev));
	if (!dev) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	dev->adapter = a;
	snprintf(dev->name, sizeof(dev->name), "%s", R(device_create)->name);
	gsd_list_init(&dev->contexts);
	gsd_list_init(&dev->allocations);
	gsd_list_init(&dev->syncs);
	if (!gsd_object_register(d, &dev->obj, GSD_OBJ_DEVICE, c->tenant)) {
		free(dev);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	if (gsd_vidmm_device_init(d, dev) != 0) {
		gsd_object_unregister(d, &dev->obj);
		free(dev);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	c->tenant->devices++;
	d->devices++;
	gsd_audit_note(d->audit, c->tenant->name, "device_created", dev->name);
	Gpusched__V1__DeviceCreateResponse dc = GPUSCHED__V1__DEVICE_CREATE_RESPONSE__INIT;
	dc.device = dev->obj.handle;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_DEVICE_CREATE;
	resp.device_create = &dc;
	gsd_call_reply(c, &resp);
}

static void h_device_destroy(gsd_daemon *d, gsd_call *c)
{
	gsd_device *dev = gsd_call_object(c, R(device_destroy)->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	gsd_device_destroy(d, dev);
	reply_empty(c);
}

/* ---- contexts ---- */

static void context_info_out(const gsd_context *x, Gpusched__V1__ContextInfo *o)
{
	o->dma_buffer_size = x->dma_buffer_size;
	o->dma_buffer_segment_set = x->dma_buffer_segment_set;
	o->dma_buffer_private_data_size = x->dma_buffer_private_data_size;
	o->allocation_list_size = x->allocation_list_size;
	o->patch_location_list_size = x->patch_location_list_size;
	o->caps = x->caps;
	o->paging_companion_node_id = x->paging_companion_node_id;
}

static void h_context_create(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__ContextCreateRequest *q = R(context_create);
	gsd_device *dev = gsd_call_object(c, q->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	if (!q->info) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "context_create needs info "
		               "(DXGK_CONTEXTINFO)");
		return;
	}
	gsd_rules_adapter ra;
	gsd_rules_adapter_of(d, dev->adapter, &ra);
	gsd_rules_context rc = {.node = q->node,
	                        .flags = q->flags,
	                        .dma_buffer_size = q->info->dma_buffer_size,
	                        .dma_buffer_segment_set = q->info->dma_buffer_segment_set,
	                        .dma_buffer_private_data_size =
	                                q->info->dma_buffer_private_data_size,
	                        .allocation_list_size = q->info->allocation_list_size,
	                        .patch_location_list_size = q->info->patch_location_list_size,
	                        .reserved = q->info->reserved,
	                        .caps = q->info->caps,
	                        .paging_companion_node_id = q->info->paging_companion_node_id,
	                        .priority_class = q->priority_class,
	                        .priority = q->priority};
	char msg[256];
	int st = gsd_rules_context_create(&ra, &rc, c->tenant->priority_ceiling, msg, sizeof(msg));
	if (st != GSD_ST(OK)) {
		gsd_call_error(c, st, "%s", msg);
		return;
	}
	if (c->tenant->context_limit && c->tenant->contexts >= c->tenant->context_limit) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED), "tenant %s reached its context limit %u",
		               c->tenant->name, c->tenant->context_limit);
		return;
	}
	gsd_context *x = calloc(1, sizeof(*x));
	if (!x) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	x->dev = dev;
	x->node = &dev->adapter->nodes[q->node];
	x->flags = q->flags;
	x->priority_class = q->priority_class;
	x->priority = q->priority;
	x->dma_buffer_size = rc.dma_buffer_size;
	x->dma_buffer_segment_set = rc.dma_buffer_segment_set;
	x->dma_buffer_private_data_size = rc.dma_buffer_private_data_size;
	x->allocation_list_size = rc.allocation_list_size;
	x->patch_location_list_size = rc.patch_location_list_size;
	x->caps = rc.caps;
	x->paging_companion_node_id = rc.paging_companion_node_id;
	x->refs = 1;
	x->created_ns = gsd_now_ns();
	if (!gsd_object_register(d, &x->obj, GSD_OBJ_CONTEXT, c->tenant)) {
		free(x);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	gsd_list_push_back(&dev->contexts, &x->dev_link);
	gsd_vidsch_context_added(d, x);
	c->tenant->contexts++;
	d->contexts++;
	gsd_audit_context_of(d, x);
	Gpusched__V1__ContextInfo info = GPUSCHED__V1__CONTEXT_INFO__INIT;
	context_info_out(x, &info);
	Gpusched__V1__ContextCreateResponse cc = GPUSCHED__V1__CONTEXT_CREATE_RESPONSE__INIT;
	cc.context = x->obj.handle;
	cc.info = &info;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_CONTEXT_CREATE;
	resp.context_create = &cc;
	gsd_call_reply(c, &resp);
}

static void h_context_destroy(gsd_daemon *d, gsd_call *c)
{
	uint64_t h = R(context_destroy)->context;
	/* A faulted context can still be destroyed: look it up without the fault check. */
	gsd_context *x = gsd_object_get(d, h, GSD_OBJ_CONTEXT, c->tenant);
	if (!x || x->dev->adapter->id != c->req->adapter) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "context %llu does not exist on adapter %u",
		               (unsigned long long)h, c->req->adapter);
		return;
	}
	gsd_context_destroy(d, x, "context destroyed");
	reply_empty(c);
}

/* ---- sync objects ---- */

static void h_sync_create(gsd_daemon *d, gsd_call *c)
{
	gsd_device *dev = gsd_call_object(c, R(sync_create)->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	gsd_sync *s = calloc(1, sizeof(*s));
	if (!s || !gsd_object_register(d, &s->obj, GSD_OBJ_SYNC, c->tenant)) {
		free(s);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	s->dev = dev;
	s->value = R(sync_create)->initial_value;
	gsd_list_init(&s->waiters);
	gsd_list_init(&s->gpu_waiters);
	gsd_list_push_back(&dev->syncs, &s->dev_link);
	Gpusched__V1__SyncCreateResponse sc = GPUSCHED__V1__SYNC_CREATE_RESPONSE__INIT;
	sc.sync = s->obj.handle;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SYNC_CREATE;
	resp.sync_create = &sc;
	gsd_call_reply(c, &resp);
}

static void h_sync_destroy(gsd_daemon *d, gsd_call *c)
{
	gsd_sync *s = gsd_call_object(c, R(sync_destroy)->sync, GSD_OBJ_SYNC);
	if (!s)
		return;
	if (s->daemon_only) {
		gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
		               "sync %llu is its device's paging fence: it goes with the device",
		               (unsigned long long)s->obj.handle);
		return;
	}
	gsd_sync_destroy(d, s);
	reply_empty(c);
}

static void h_sync_signal(gsd_daemon *d, gsd_call *c)
{
	gsd_sync *s = gsd_call_object(c, R(sync_signal)->sync, GSD_OBJ_SYNC);
	if (!s)
		return;
	uint64_t v = R(sync_signal)->value;
	if (s->daemon_only) {
		gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
		               "sync %llu is its device's paging fence: only the daemon signals it",
		               (unsigned long long)s->obj.handle);
		return;
	}
	if (v < s->value) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "a monitored fence never goes backwards (value %llu < current %llu)",
		               (unsigned long long)v, (unsigned long long)s->value);
		return;
	}
	gsd_sync_signal(d, s, v);
	reply_empty(c);
}

static void sync_wait_expired(gsd_call *c)
{
	gsd_sync *s = c->wait_object;
	gsd_list_remove(&c->link);
	gsd_call_error(c, GSD_ST(TIMEOUT), "sync %llu is at %llu, waited for %llu",
	               (unsigned long long)s->obj.handle, (unsigned long long)s->value,
	               (unsigned long long)c->wait_value);
}

static void h_sync_wait(gsd_daemon *d, gsd_call *c)
{
	(void)d;
	const Gpusched__V1__SyncWaitRequest *q = R(sync_wait);
	gsd_sync *s = gsd_call_object(c, q->sync, GSD_OBJ_SYNC);
	if (!s)
		return;
	if (s->value >= q->value) {
		Gpusched__V1__SyncWaitResponse sw = GPUSCHED__V1__SYNC_WAIT_RESPONSE__INIT;
		sw.value = s->value;
		Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SYNC_WAIT;
		resp.sync_wait = &sw;
		gsd_call_reply(c, &resp);
		return;
	}
	c->wait_object = s;
	c->wait_value = q->value;
	if (q->value <= s->abandoned) {
		gsd_call_error(c, GSD_ST(FAULTED),
		               "sync %llu will never reach %llu: the packet that would signal it "
		               "faulted or was cancelled",
		               (unsigned long long)s->obj.handle, (unsigned long long)q->value);
		return;
	}
	if (q->timeout_ms == 0) {
		sync_wait_expired(c);
		return;
	}
	gsd_list_push_back(&s->waiters, &c->link);
	gsd_call_set_timeout(c, q->timeout_ms, sync_wait_expired);
}

/* ---- statistics ---- */

static void h_stats(gsd_daemon *d, gsd_call *c)
{
	gsd_audit_stats as;
	gsd_audit_get_stats(d->audit, &as);
	Gpusched__V1__StatsResponse st = GPUSCHED__V1__STATS_RESPONSE__INIT;
	st.requests = d->stats.requests;
	st.errors = d->stats.errors;
	st.packets_submitted = d->stats.packets_submitted;
	st.packets_completed = d->stats.packets_completed;
	st.packets_faulted = d->stats.packets_faulted;
	st.packets_cancelled = d->stats.packets_cancelled;
	st.packets_rejected = d->stats.packets_rejected;
	st.audit_records = as.records;
	st.audit_commits = as.commits;
	st.devices = d->devices;
	st.contexts = d->contexts;
	st.allocations = d->allocations;
	st.uptime_ns = gsd_now_ns() - d->start_ns;
	for (uint32_t i = 0; i < d->nadapters; i++) {
		st.paging_packets += d->adapters[i].paging_packets;
		st.paging_bytes += d->adapters[i].paging_bytes;
		st.evictions += d->adapters[i].evictions;
	}
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_STATS;
	resp.stats = &st;
	gsd_call_reply(c, &resp);
}

/* ---- tenants ---- */

static bool require_admin(gsd_call *c)
{
	if (c->tenant->admin)
		return true;
	gsd_call_error(c, GSD_ST(PERMISSION_DENIED), "tenant %s is not an administrator",
	               c->tenant->name);
	return false;
}

static void tenant_out(const gsd_tenant *t, Gpusched__V1__Tenant *o)
{
	gpusched__v1__tenant__init(o);
	o->name = (char *)t->name;
	o->kind = t->kind;
	o->policy = t->policy;
	o->share = t->share;
	o->priority_ceiling = t->priority_ceiling;
	o->memory_quota = t->memory_quota;
	o->context_limit = t->context_limit;
	o->admin = t->admin;
	o->banned = t->banned;
}

static int random_token(char *out, size_t cap)
{
	unsigned char raw[16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, raw, sizeof(raw));
	close(fd);
	if (n != (ssize_t)sizeof(raw) || cap < 2 * sizeof(raw) + 1)
		return -1;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

static void h_tenant_create(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	const Gpusched__V1__TenantCreateRequest *q = R(tenant_create);
	const Gpusched__V1__Tenant *t = q->tenant;
	if (!t || !t->name[0] || strlen(t->name) >= GSD_NAME_MAX || strlen(q->token) >= 128) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "a tenant needs a name of 1..63 bytes "
		               "(and a token under 128)");
		return;
	}
	if (gsd_tenant_by_name(d, t->name)) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "tenant %s already exists", t->name);
		return;
	}
	if (d->ntenants >= sizeof(d->tenants) / sizeof(d->tenants[0])) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED), "too many tenants");
		return;
	}
	if (t->priority_ceiling > GS_PRIORITY_CLASS_MAX || t->kind > 1 || t->policy > 2) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "tenant kind, policy or ceiling out of "
		               "range");
		return;
	}
	gsd_tenant_config tc = {.kind = t->kind,
	                        .policy = t->policy,
	                        .share = t->share ? t->share : 1,
	                        .priority_ceiling = t->priority_ceiling,
	                        .memory_quota = t->memory_quota,
	                        .context_limit = t->context_limit,
	                        .admin = t->admin};
	snprintf(tc.name, sizeof(tc.name), "%s", t->name);
	if (q->token[0])
		snprintf(tc.token, sizeof(tc.token), "%s", q->token);
	else if (random_token(tc.token, sizeof(tc.token)) != 0) {
		gsd_call_error(c, GSD_ST(INTERNAL), "cannot read /dev/urandom");
		return;
	}
	if (gsd_tenant_by_token(d, tc.token)) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "that token is already in use");
		return;
	}
	gsd_tenant *nt = calloc(1, sizeof(*nt));
	if (!nt) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	snprintf(nt->name, sizeof(nt->name), "%s", tc.name);
	snprintf(nt->token, sizeof(nt->token), "%s", tc.token);
	nt->kind = tc.kind;
	nt->policy = tc.policy;
	nt->share = tc.share;
	nt->priority_ceiling = tc.priority_ceiling;
	nt->memory_quota = tc.memory_quota;
	nt->context_limit = tc.context_limit;
	nt->admin = tc.admin;
	d->tenants[d->ntenants++] = nt;
	gsd_audit_note(d->audit, c->tenant->name, "tenant_created", nt->name);
	Gpusched__V1__TenantCreateResponse tr = GPUSCHED__V1__TENANT_CREATE_RESPONSE__INIT;
	tr.token = nt->token;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_TENANT_CREATE;
	resp.tenant_create = &tr;
	gsd_call_reply(c, &resp);
}

static void h_tenant_destroy(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	gsd_tenant *t = gsd_tenant_by_name(d, R(tenant_destroy)->name);
	if (!t || t->removed) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "no tenant %s", R(tenant_destroy)->name);
		return;
	}
	if (t->devices) {
		gsd_call_error(c, GSD_ST(BUSY), "tenant %s still has %u devices", t->name,
		               t->devices);
		return;
	}
	if (t == c->tenant) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "a tenant cannot remove itself");
		return;
	}
	/* Kept in memory (old records and retired packets point at it), but a removed tenant is
	 * skipped by every token and name lookup, so it can never authenticate again. */
	t->removed = true;
	memset(t->token, 0, sizeof(t->token));
	gsd_audit_note(d->audit, c->tenant->name, "tenant_removed", t->name);
	reply_empty(c);
}

static void h_tenant_list(gsd_daemon *d, gsd_call *c)
{
	Gpusched__V1__Tenant tl[GSD_MAX_TENANTS * 2];
	Gpusched__V1__Tenant *tp[GSD_MAX_TENANTS * 2];
	size_t n = 0;
	for (uint32_t i = 0; i < d->ntenants; i++) {
		const gsd_tenant *t = d->tenants[i];
		if (t->removed || (!c->tenant->admin && t != c->tenant))
			continue;
		tenant_out(t, &tl[n]);
		tp[n] = &tl[n];
		n++;
	}
	Gpusched__V1__TenantListResponse lr = GPUSCHED__V1__TENANT_LIST_RESPONSE__INIT;
	lr.n_tenants = n;
	lr.tenants = tp;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_TENANT_LIST;
	resp.tenant_list = &lr;
	gsd_call_reply(c, &resp);
}

static void h_context_set_priority(gsd_daemon *d, gsd_call *c)
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
	if (q->priority_class > c->tenant->priority_ceiling) {
		gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
		               "priority class %s is above the tenant's ceiling %s",
		               gs_priority_class_name(q->priority_class),
		               gs_priority_class_name(c->tenant->priority_ceiling));
		return;
	}
	gsd_vidsch_context_priority(d, x, q->priority_class, q->priority);
	gsd_audit_context_of(d, x);
	reply_empty(c);
}

typedef void (*handler_fn)(gsd_daemon *d, gsd_call *c);

static const handler_fn g_handlers[] = {
        [GPUSCHED__V1__REQUEST__BODY_INFO] = h_info,
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE] = h_device_create,
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY] = h_device_destroy,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE] = h_context_create,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY] = h_context_destroy,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY] = h_context_set_priority,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_CREATE] = gsd_h_allocation_create,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_DESTROY] = gsd_h_allocation_destroy,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_QUERY] = gsd_h_allocation_query,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PRIORITY] = gsd_h_allocation_set_priority,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PREFERENCE] = gsd_h_allocation_set_preference,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ] = gsd_h_allocation_read,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE] = gsd_h_allocation_write,
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT] = gsd_h_submit,
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH] = gsd_h_submit_batch,
        [GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT] = gsd_h_packet_wait,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE] = h_sync_create,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY] = h_sync_destroy,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_SIGNAL] = h_sync_signal,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT] = h_sync_wait,
        [GPUSCHED__V1__REQUEST__BODY_MAKE_RESIDENT] = gsd_h_make_resident,
        [GPUSCHED__V1__REQUEST__BODY_EVICT] = gsd_h_evict,
        [GPUSCHED__V1__REQUEST__BODY_TRANSFER] = gsd_h_transfer,
        [GPUSCHED__V1__REQUEST__BODY_HISTORY] = gsd_h_history,
        [GPUSCHED__V1__REQUEST__BODY_PACKET_EVENTS] = gsd_h_packet_events,
        [GPUSCHED__V1__REQUEST__BODY_STATS] = h_stats,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_CREATE] = h_tenant_create,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_DESTROY] = h_tenant_destroy,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_LIST] = h_tenant_list,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_LIST] = gsd_h_allocation_list,
        [GPUSCHED__V1__REQUEST__BODY_MOVES] = gsd_h_moves,
};

void gsd_handle_request(gsd_daemon *d, gsd_call *c)
{
	int bc = c->req->body_case;
	if (bc <= 0 || (size_t)bc >= sizeof(g_handlers) / sizeof(g_handlers[0]) ||
	    !g_handlers[bc]) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "the request carries no known body");
		return;
	}
	if (c->req->adapter >= d->nadapters) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "adapter %u does not exist (%u adapters)",
		               c->req->adapter, d->nadapters);
		return;
	}
	g_handlers[bc](d, c);
}
