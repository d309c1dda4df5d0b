/*
 * Request dispatch, and the handlers for adapter info, devices, contexts, sync objects,
 * statistics and tenants. Allocations are in h_alloc.c, submission and waits in h_submit.c,
 * history in h_history.c.
 *
 * Every handler answers its call exactly once, now or later (a deferred wait), and every
 * error answer is audited by gs_call_error.
 */
#include "daemon.h"
#include "log.h"
#include "rpc.h"
#include "rules.h"
#include "wddm.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R(field) (c->req->field)

static void reply_empty(gs_call *c)
{
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	gs_call_reply(c, &resp);
}

gs_adapter *gs_call_adapter(gs_call *c)
{
	if (c->req->adapter >= c->d->nadapters) {
		gs_call_error(c, GS_ST(NOT_FOUND), "adapter %u does not exist (%u adapters)",
		              c->req->adapter, c->d->nadapters);
		return NULL;
	}
	return &c->d->adapters[c->req->adapter];
}

static gs_adapter *object_adapter(gs_object *o)
{
	switch (o->type) {
	case GS_OBJ_DEVICE:
		return ((gs_device *)o)->adapter;
	case GS_OBJ_CONTEXT:
		return ((gs_context *)o)->dev->adapter;
	case GS_OBJ_ALLOCATION:
		return ((gs_allocation *)o)->dev->adapter;
	case GS_OBJ_SYNC:
		return ((gs_sync *)o)->dev->adapter;
	}
	return NULL;
}

static const char *const g_type_names[] = {"", "device", "context", "allocation", "sync object"};

void *gs_call_object(gs_call *c, uint64_t handle, gs_obj_type type)
{
	gs_object *o = gs_object_get(c->d, handle, type, c->tenant);
	if (!o || object_adapter(o)->id != c->req->adapter) {
		gs_call_error(c, GS_ST(NOT_FOUND), "%s %llu does not exist on adapter %u",
		              g_type_names[type], (unsigned long long)handle, c->req->adapter);
		return NULL;
	}
	if (type == GS_OBJ_CONTEXT && ((gs_context *)o)->faulted) {
		gs_call_error(c, GS_ST(FAULTED), "context %llu is in an error state after a fault",
		              (unsigned long long)handle);
		return NULL;
	}
	return o;
}

void gs_rules_adapter_of(const gs_daemon *d, const gs_adapter *a, gs_rules_adapter *out)
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

static void h_info(gs_daemon *d, gs_call *c)
{
	Gpusched__V1__AdapterInfo ai[GS_MAX_ADAPTERS];
	Gpusched__V1__AdapterInfo *aip[GS_MAX_ADAPTERS];
	Gpusched__V1__NodeInfo ni[GS_MAX_ADAPTERS][GS_MAX_NODES];
	Gpusched__V1__NodeInfo *nip[GS_MAX_ADAPTERS][GS_MAX_NODES];
	Gpusched__V1__SegmentInfo si[GS_MAX_ADAPTERS][8];
	Gpusched__V1__SegmentInfo *sip[GS_MAX_ADAPTERS][8];
	for (uint32_t i = 0; i < d->nadapters; i++) {
		gs_adapter *a = &d->adapters[i];
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
			gs_segment *seg = &a->segments[s];
			gpusched__v1__segment_info__init(&si[i][s]);
			sip[i][s] = &si[i][s];
			si[i][s].id = seg->id;
			si[i][s].name = seg->name;
			si[i][s].kind = seg->kind;
			si[i][s].size = seg->size;
			si[i][s].used = seg->heap.used;
			si[i][s].largest_free = gs_heap_largest_free(&seg->heap);
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
	gs_call_reply(c, &resp);
}

/* ---- devices ---- */

static void h_device_create(gs_daemon *d, gs_call *c)
{
	gs_adapter *a = gs_call_adapter(c);
	if (!a)
		return;
	if (c->tenant->devices >= d->cfg.max_devices) {
		gs_call_error(c, GS_ST(QUOTA_EXCEEDED), "tenant %s already has %u devices (max %u)",
		              c->tenant->name, c->tenant->devices, d->cfg.max_devices);
		return;
	}
	gs_device *dev = calloc(1, sizeof(*dev));
	if (!dev) {
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
		return;
	}
	dev->adapter = a;
	snprintf(dev->name, sizeof(dev->name), "%s", R(device_create)->name);
	gs_list_init(&dev->contexts);
	gs_list_init(&dev->allocations);
	gs_list_init(&dev->syncs);
	if (!gs_object_register(d, &dev->obj, GS_OBJ_DEVICE, c->tenant)) {
		free(dev);
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
		return;
	}
	if (gs_res_device_init(d, dev) != 0) {
		gs_object_unregister(d, &dev->obj);
		free(dev);
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
		return;
	}
	c->tenant->devices++;
	d->devices++;
	gs_audit_note(d->audit, c->tenant->name, "device_created", dev->name);
	Gpusched__V1__DeviceCreateResponse dc = GPUSCHED__V1__DEVICE_CREATE_RESPONSE__INIT;
	dc.device = dev->obj.handle;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_DEVICE_CREATE;
	resp.device_create = &dc;
	gs_call_reply(c, &resp);
}

static void h_device_destroy(gs_daemon *d, gs_call *c)
{
	gs_device *dev = gs_call_object(c, R(device_destroy)->device, GS_OBJ_DEVICE);
	if (!dev)
		return;
	gs_obj_device_destroy(d, dev);
	reply_empty(c);
}

/* ---- contexts ---- */

static void context_info_out(const gs_context *x, Gpusched__V1__ContextInfo *o)
{
	o->dma_buffer_size = x->dma_buffer_size;
	o->dma_buffer_segment_set = x->dma_buffer_segment_set;
	o->dma_buffer_private_data_size = x->dma_buffer_private_data_size;
	o->allocation_list_size = x->allocation_list_size;
	o->patch_location_list_size = x->patch_location_list_size;
	o->caps = x->caps;
	o->paging_companion_node_id = x->paging_companion_node_id;
}

static void h_context_create(gs_daemon *d, gs_call *c)
{
	const Gpusched__V1__ContextCreateRequest *q = R(context_create);
	gs_device *dev = gs_call_object(c, q->device, GS_OBJ_DEVICE);
	if (!dev)
		return;
	if (!q->info) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT),
		              "context_create needs info "
		              "(DXGK_CONTEXTINFO)");
		return;
	}
	gs_rules_adapter ra;
	gs_rules_adapter_of(d, dev->adapter, &ra);
	gs_rules_context rc = {.node = q->node,
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
	int st = gs_rules_context_create(&ra, &rc, c->tenant->priority_ceiling, msg, sizeof(msg));
	if (st != GS_ST(OK)) {
		gs_call_error(c, st, "%s", msg);
		return;
	}
	if (c->tenant->context_limit && c->tenant->contexts >= c->tenant->context_limit) {
		gs_call_error(c, GS_ST(QUOTA_EXCEEDED), "tenant %s reached its context limit %u",
		              c->tenant->name, c->tenant->context_limit);
		return;
	}
	gs_context *x = calloc(1, sizeof(*x));
	if (!x) {
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
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
	x->created_ns = gs_now_ns();
	if (!gs_object_register(d, &x->obj, GS_OBJ_CONTEXT, c->tenant)) {
		free(x);
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
		return;
	}
	gs_list_push_back(&dev->contexts, &x->dev_link);
	gs_vidsch_context_added(d, x);
	c->tenant->contexts++;
	d->contexts++;
	gs_audit_context_of(d, x);
	Gpusched__V1__ContextInfo info = GPUSCHED__V1__CONTEXT_INFO__INIT;
	context_info_out(x, &info);
	Gpusched__V1__ContextCreateResponse cc = GPUSCHED__V1__CONTEXT_CREATE_RESPONSE__INIT;
	cc.context = x->obj.handle;
	cc.info = &info;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_CONTEXT_CREATE;
	resp.context_create = &cc;
	gs_call_reply(c, &resp);
}

static void h_context_destroy(gs_daemon *d, gs_call *c)
{
	uint64_t h = R(context_destroy)->context;
	/* A faulted context can still be destroyed: look it up without the fault check. */
	gs_context *x = gs_object_get(d, h, GS_OBJ_CONTEXT, c->tenant);
	if (!x || x->dev->adapter->id != c->req->adapter) {
		gs_call_error(c, GS_ST(NOT_FOUND), "context %llu does not exist on adapter %u",
		              (unsigned long long)h, c->req->adapter);
		return;
	}
	gs_obj_context_destroy(d, x, "context destroyed");
	reply_empty(c);
}

/* ---- sync objects ---- */

static void h_sync_create(gs_daemon *d, gs_call *c)
{
	gs_device *dev = gs_call_object(c, R(sync_create)->device, GS_OBJ_DEVICE);
	if (!dev)
		return;
	gs_sync *s = calloc(1, sizeof(*s));
	if (!s || !gs_object_register(d, &s->obj, GS_OBJ_SYNC, c->tenant)) {
		free(s);
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
		return;
	}
	s->dev = dev;
	s->value = R(sync_create)->initial_value;
	gs_list_init(&s->waiters);
	gs_list_init(&s->gpu_waiters);
	gs_list_push_back(&dev->syncs, &s->dev_link);
	Gpusched__V1__SyncCreateResponse sc = GPUSCHED__V1__SYNC_CREATE_RESPONSE__INIT;
	sc.sync = s->obj.handle;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SYNC_CREATE;
	resp.sync_create = &sc;
	gs_call_reply(c, &resp);
}

static void h_sync_destroy(gs_daemon *d, gs_call *c)
{
	gs_sync *s = gs_call_object(c, R(sync_destroy)->sync, GS_OBJ_SYNC);
	if (!s)
		return;
	if (s->daemon_only) {
		gs_call_error(c, GS_ST(PERMISSION_DENIED),
		              "sync %llu is its device's paging fence: it goes with the device",
		              (unsigned long long)s->obj.handle);
		return;
	}
	gs_obj_sync_destroy(d, s);
	reply_empty(c);
}

static void h_sync_signal(gs_daemon *d, gs_call *c)
{
	gs_sync *s = gs_call_object(c, R(sync_signal)->sync, GS_OBJ_SYNC);
	if (!s)
		return;
	uint64_t v = R(sync_signal)->value;
	if (s->daemon_only) {
		gs_call_error(c, GS_ST(PERMISSION_DENIED),
		              "sync %llu is its device's paging fence: only the daemon signals it",
		              (unsigned long long)s->obj.handle);
		return;
	}
	if (v < s->value) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT),
		              "a monitored fence never goes backwards (value %llu < current %llu)",
		              (unsigned long long)v, (unsigned long long)s->value);
		return;
	}
	gs_obj_sync_signal(d, s, v);
	reply_empty(c);
}

static void sync_wait_expired(gs_call *c)
{
	gs_sync *s = c->wait_object;
	gs_list_remove(&c->link);
	gs_call_error(c, GS_ST(TIMEOUT), "sync %llu is at %llu, waited for %llu",
	              (unsigned long long)s->obj.handle, (unsigned long long)s->value,
	              (unsigned long long)c->wait_value);
}

static void h_sync_wait(gs_daemon *d, gs_call *c)
{
	(void)d;
	const Gpusched__V1__SyncWaitRequest *q = R(sync_wait);
	gs_sync *s = gs_call_object(c, q->sync, GS_OBJ_SYNC);
	if (!s)
		return;
	if (s->value >= q->value) {
		Gpusched__V1__SyncWaitResponse sw = GPUSCHED__V1__SYNC_WAIT_RESPONSE__INIT;
		sw.value = s->value;
		Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SYNC_WAIT;
		resp.sync_wait = &sw;
		gs_call_reply(c, &resp);
		return;
	}
	c->wait_object = s;
	c->wait_value = q->value;
	if (q->value <= s->abandoned) {
		gs_call_error(c, GS_ST(FAULTED),
		              "sync %llu will never reach %llu: the packet that would signal it "
		              "faulted or was cancelled",
		              (unsigned long long)s->obj.handle, (unsigned long long)q->value);
		return;
	}
	if (q->timeout_ms == 0) {
		sync_wait_expired(c);
		return;
	}
	gs_list_push_back(&s->waiters, &c->link);
	gs_call_set_timeout(c, q->timeout_ms, sync_wait_expired);
}

/* ---- statistics ---- */

static void h_stats(gs_daemon *d, gs_call *c)
{
	gs_audit_stats as;
	gs_audit_get_stats(d->audit, &as);
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
	st.uptime_ns = gs_now_ns() - d->start_ns;
	for (uint32_t i = 0; i < d->nadapters; i++) {
		st.paging_packets += d->adapters[i].paging_packets;
		st.paging_bytes += d->adapters[i].paging_bytes;
		st.evictions += d->adapters[i].evictions;
	}
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_STATS;
	resp.stats = &st;
	gs_call_reply(c, &resp);
}

/* ---- tenants ---- */

static bool require_admin(gs_call *c)
{
	if (c->tenant->admin)
		return true;
	gs_call_error(c, GS_ST(PERMISSION_DENIED), "tenant %s is not an administrator",
	              c->tenant->name);
	return false;
}

static void tenant_out(const gs_tenant *t, Gpusched__V1__Tenant *o)
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

static void h_tenant_create(gs_daemon *d, gs_call *c)
{
	if (!require_admin(c))
		return;
	const Gpusched__V1__TenantCreateRequest *q = R(tenant_create);
	const Gpusched__V1__Tenant *t = q->tenant;
	if (!t || !t->name[0] || strlen(t->name) >= GS_NAME_MAX || strlen(q->token) >= 128) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT),
		              "a tenant needs a name of 1..63 bytes "
		              "(and a token under 128)");
		return;
	}
	if (gs_tenant_by_name(d, t->name)) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT), "tenant %s already exists", t->name);
		return;
	}
	if (d->ntenants >= sizeof(d->tenants) / sizeof(d->tenants[0])) {
		gs_call_error(c, GS_ST(QUOTA_EXCEEDED), "too many tenants");
		return;
	}
	if (t->priority_ceiling > GS_PRIORITY_CLASS_MAX || t->kind > 1 || t->policy > 2) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT),
		              "tenant kind, policy or ceiling out of "
		              "range");
		return;
	}
	gs_tenant_config tc = {.kind = t->kind,
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
		gs_call_error(c, GS_ST(INTERNAL), "cannot read /dev/urandom");
		return;
	}
	if (gs_tenant_by_token(d, tc.token)) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT), "that token is already in use");
		return;
	}
	gs_tenant *nt = calloc(1, sizeof(*nt));
	if (!nt) {
		gs_call_error(c, GS_ST(INTERNAL), "out of memory");
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
	gs_audit_note(d->audit, c->tenant->name, "tenant_created", nt->name);
	Gpusched__V1__TenantCreateResponse tr = GPUSCHED__V1__TENANT_CREATE_RESPONSE__INIT;
	tr.token = nt->token;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_TENANT_CREATE;
	resp.tenant_create = &tr;
	gs_call_reply(c, &resp);
}

static void h_tenant_destroy(gs_daemon *d, gs_call *c)
{
	if (!require_admin(c))
		return;
	gs_tenant *t = gs_tenant_by_name(d, R(tenant_destroy)->name);
	if (!t || t->removed) {
		gs_call_error(c, GS_ST(NOT_FOUND), "no tenant %s", R(tenant_destroy)->name);
		return;
	}
	if (t->devices) {
		gs_call_error(c, GS_ST(BUSY), "tenant %s still has %u devices", t->name,
		              t->devices);
		return;
	}
	if (t == c->tenant) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT), "a tenant cannot remove itself");
		return;
	}
	/* Kept in memory (old records and retired packets point at it), but a removed tenant is
	 * skipped by every token and name lookup, so it can never authenticate again. */
	t->removed = true;
	memset(t->token, 0, sizeof(t->token));
	gs_audit_note(d->audit, c->tenant->name, "tenant_removed", t->name);
	reply_empty(c);
}

static void h_tenant_list(gs_daemon *d, gs_call *c)
{
	Gpusched__V1__Tenant tl[GS_MAX_TENANTS * 2];
	Gpusched__V1__Tenant *tp[GS_MAX_TENANTS * 2];
	size_t n = 0;
	for (uint32_t i = 0; i < d->ntenants; i++) {
		const gs_tenant *t = d->tenants[i];
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
	gs_call_reply(c, &resp);
}

static void h_context_set_priority(gs_daemon *d, gs_call *c)
{
	const Gpusched__V1__ContextSetPriorityRequest *q = R(context_set_priority);
	gs_context *x = gs_call_object(c, q->context, GS_OBJ_CONTEXT);
	if (!x)
		return;
	if (q->priority_class > GS_PRIORITY_CLASS_MAX || q->priority < -7 || q->priority > 7) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT),
		              "priority class %u must be 0..5 and priority %d must be -7..+7",
		              q->priority_class, q->priority);
		return;
	}
	if (q->priority_class > c->tenant->priority_ceiling) {
		gs_call_error(c, GS_ST(PERMISSION_DENIED),
		              "priority class %s is above the tenant's ceiling %s",
		              gs_priority_class_name(q->priority_class),
		              gs_priority_class_name(c->tenant->priority_ceiling));
		return;
	}
	gs_vidsch_context_priority(d, x, q->priority_class, q->priority);
	gs_audit_context_of(d, x);
	reply_empty(c);
}

typedef void (*handler_fn)(gs_daemon *d, gs_call *c);

static const handler_fn g_handlers[] = {
        [GPUSCHED__V1__REQUEST__BODY_INFO] = h_info,
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE] = h_device_create,
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY] = h_device_destroy,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE] = h_context_create,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY] = h_context_destroy,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY] = h_context_set_priority,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_CREATE] = gs_h_allocation_create,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_DESTROY] = gs_h_allocation_destroy,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_QUERY] = gs_h_allocation_query,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PRIORITY] = gs_h_allocation_set_priority,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PREFERENCE] = gs_h_allocation_set_preference,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ] = gs_h_allocation_read,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE] = gs_h_allocation_write,
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT] = gs_h_submit,
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH] = gs_h_submit_batch,
        [GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT] = gs_h_packet_wait,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE] = h_sync_create,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY] = h_sync_destroy,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_SIGNAL] = h_sync_signal,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT] = h_sync_wait,
        [GPUSCHED__V1__REQUEST__BODY_MAKE_RESIDENT] = gs_h_make_resident,
        [GPUSCHED__V1__REQUEST__BODY_EVICT] = gs_h_evict,
        [GPUSCHED__V1__REQUEST__BODY_TRANSFER] = gs_h_transfer,
        [GPUSCHED__V1__REQUEST__BODY_HISTORY] = gs_h_history,
        [GPUSCHED__V1__REQUEST__BODY_PACKET_EVENTS] = gs_h_packet_events,
        [GPUSCHED__V1__REQUEST__BODY_STATS] = h_stats,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_CREATE] = h_tenant_create,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_DESTROY] = h_tenant_destroy,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_LIST] = h_tenant_list,
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_LIST] = gs_h_allocation_list,
        [GPUSCHED__V1__REQUEST__BODY_MOVES] = gs_h_moves,
};

void gs_handle_request(gs_daemon *d, gs_call *c)
{
	int bc = c->req->body_case;
	if (bc <= 0 || (size_t)bc >= sizeof(g_handlers) / sizeof(g_handlers[0]) ||
	    !g_handlers[bc]) {
		gs_call_error(c, GS_ST(INVALID_ARGUMENT), "the request carries no known body");
		return;
	}
	if (c->req->adapter >= d->nadapters) {
		gs_call_error(c, GS_ST(NOT_FOUND), "adapter %u does not exist (%u adapters)",
		              c->req->adapter, d->nadapters);
		return;
	}
	g_handlers[bc](d, c);
}
