/*
 * Request dispatch, and the handlers for adapter info, statistics and tenants. Devices,
 * contexts and sync objects are in h_objects.c, allocations in h_alloc.c, submission and waits
 * in h_submit.c, paging requests in h_paging.c, history in h_history.c.
 */
#include "rpc/handlers.h"

#include "core/events.h"
#include "core/log.h"
#include "vidmm/vidmm.h"
#include "vidsch/vidsch.h"

#include "wddm.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

void *gsd_pb_repeated(size_t n, size_t size, void ***ptrs)
{
	size_t head = (n * sizeof(void *) + 15u) & ~(size_t)15u;
	void **p = calloc(1, head + n * size + 1);
	if (!p)
		return NULL;
	char *items = (char *)p + head;
	for (size_t i = 0; i < n; i++)
		p[i] = items + i * size;
	*ptrs = p;
	return items;
}

void gsd_call_reply_empty(gsd_call *c)
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

void *gsd_call_object(gsd_call *c, uint64_t handle, gsd_obj_type type)
{
	gsd_object *o = gsd_call_find(c, handle, type);
	if (!o || gsd_object_adapter(o)->id != c->req->adapter) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "%s %llu does not exist on adapter %u",
		               gsd_object_type_name(type), (unsigned long long)handle,
		               c->req->adapter);
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

/* The wire's SharePolicy of a GSD_SHARE_* adapter policy. */
static Gpusched__V1__SharePolicy wire_share_policy(int policy)
{
	switch (policy) {
	case GSD_SHARE_EQUAL:
		return GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_EQUAL_SHARE;
	case GSD_SHARE_BEST_EFFORT:
		return GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_BEST_EFFORT;
	case GSD_SHARE_FIXED:
		return GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_FIXED_SHARE;
	default:
		return GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_WEIGHTED;
	}
}

/*
 * Names, sizes, limits and capabilities are for everyone; what changes with the tenants' work
 * (queued packets and fences per node, memory used per segment) is the caller's own share
 * unless it is an administrator (issue 10: one tenant learns nothing of another's activity).
 */
static void h_info(gsd_daemon *d, gsd_call *c)
{
	const gsd_tenant *me = c->tenant->conf.admin ? NULL : c->tenant;
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
		ai[i].system_memory_used =
		        me ? gsd_vidmm_tenant_used(a, &a->sysmem, me) : a->sysmem.heap.used;
		ai[i].paging_chunk = d->cfg.paging_chunk;
		/* What can change while the daemon runs (how memory is reached) is asked anew. */
		gsd_backend_describe(a->ops, a->backend, &a->info);
		ai[i].device = a->info.device;
		ai[i].driver = a->info.driver;
		ai[i].api = a->info.api;
		ai[i].queues = a->info.queues;
		ai[i].preempt_granularity_ns = a->info.preempt_granularity_ns;
		ai[i].cpu_access = a->info.cpu_access;
		ai[i].device_losses = a->device_losses;
		ai[i].device_dead = a->device_dead;
		ai[i].device_retrying = a->device_retry;
		ai[i].share_policy = wire_share_policy(a->cfg->share_policy);
		ai[i].time_slice_us =
		        a->cfg->time_slice_us ? a->cfg->time_slice_us : d->cfg.quantum_us;
		if (a->kernels) {
			const gsd_kernel_caps *kc = &a->kernel_caps;
			ai[i].kernels = true;
			ai[i].n_max_local_size = 3;
			ai[i].max_local_size = (uint32_t *)kc->module.max_local_size;
			ai[i].max_invocations = kc->module.max_invocations;
			ai[i].max_push_constant_bytes = kc->module.max_push_bytes;
			ai[i].max_storage_buffer_range = kc->max_storage_range;
			ai[i].max_uniform_buffer_range = kc->max_uniform_range;
			ai[i].binding_offset_alignment = kc->offset_align;
			ai[i].kernel_preemption = "dispatch boundary";
		}
		for (uint32_t n = 0; n < a->nnodes; n++) {
			gpusched__v1__node_info__init(&ni[i][n]);
			nip[i][n] = &ni[i][n];
			ni[i][n].id = n;
			ni[i][n].name = (char *)a->nodes[n].cfg->name;
			ni[i][n].kind = a->nodes[n].cfg->kind;
			ni[i][n].engines = 1;
			ni[i][n].paging = a->nodes[n].cfg->paging;
			/* A node's fence counts every tenant's packets: administrators only. */
			ni[i][n].fence = me ? 0
			                    : gsd_wire_fence_out(&d->wire, i, n,
			                                         a->nodes[n].completed_fence);
			ni[i][n].queued = me ? me->stats.queued[i][n] : a->nodes[n].queued;
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
			si[i][s].used = me ? gsd_vidmm_tenant_used(a, seg, me) : seg->heap.used;
			si[i][s].largest_free = me ? 0 : gsd_heap_largest_free(&seg->heap);
			si[i][s].cpu_visible = seg->cpu_visible;
		}
		ai[i].n_segments = a->nsegments;
		ai[i].segments = sip[i];
	}
	Gpusched__V1__InfoResponse info = GPUSCHED__V1__INFO_RESPONSE__INIT;
	info.version = GS_VERSION;
	info.n_adapters = d->nadapters;
	info.adapters = aip;
	info.tenant = (char *)c->identity; /* who it is in history and events */
	info.events_url = d->cfg.events_url;
	info.tenant_view = me != NULL;
	GSD_REPLY(c, INFO, info, &info);
}

/* ---- statistics ---- */

/* A tenant that is not an administrator gets its own figures (tenant_view). */
static void stats_of_tenant(const gsd_tenant *t, Gpusched__V1__StatsResponse *st)
{
#define TENANT_COUNTER(name) st->name = t->stats.name;
	GSD_COUNTERS(TENANT_COUNTER)
#undef TENANT_COUNTER
	st->tenant_view = true;
	st->devices = t->devices;
	st->contexts = t->contexts;
	st->allocations = t->allocations;
	st->paging_packets = t->stats.paging_packets;
	st->paging_bytes = t->stats.paging_bytes;
	st->evictions = t->stats.evictions;
	st->history_reads = t->reads;
}

static void stats_of_daemon(gsd_daemon *d, Gpusched__V1__StatsResponse *st)
{
#define DAEMON_COUNTER(name) st->name = d->stats.name;
	GSD_COUNTERS(DAEMON_COUNTER)
#undef DAEMON_COUNTER
	gsd_audit_stats as;
	gsd_audit_get_stats(d->audit, &as);
	st->audit_records = as.records;
	st->audit_commits = as.commits;
	st->audit_queued = as.queued;
	st->audit_failed_commits = as.failures;
	st->audit_dropped = as.dropped;
	st->devices = d->devices;
	st->contexts = d->contexts;
	st->allocations = d->allocations;
	st->history_reads = gsd_rpc_reads_in(d);
	for (uint32_t i = 0; i < d->nadapters; i++) {
		st->paging_packets += d->adapters[i].paging_packets;
		st->paging_bytes += d->adapters[i].paging_bytes;
		st->evictions += d->adapters[i].evictions;
	}
}

static void h_stats(gsd_daemon *d, gsd_call *c)
{
	Gpusched__V1__StatsResponse st = GPUSCHED__V1__STATS_RESPONSE__INIT;
	if (c->tenant->conf.admin)
		stats_of_daemon(d, &st);
	else
		stats_of_tenant(c->tenant, &st);
	st.uptime_ns = gsd_now_ns() - d->start_ns;
	st.audit_health = (Gpusched__V1__AuditHealth)gsd_audit_get_health(d->audit);
	GSD_REPLY(c, STATS, stats, &st);
}

/* ---- tenants ---- */

static bool require_admin(gsd_call *c)
{
	if (c->tenant->conf.admin)
		return true;
	gsd_call_error(c, GSD_ST(PERMISSION_DENIED), "tenant %s is not an administrator",
	               c->tenant->conf.name);
	return false;
}

static void tenant_out(const gsd_tenant *t, Gpusched__V1__Tenant *o)
{
	gpusched__v1__tenant__init(o);
	o->name = (char *)t->conf.name;
	o->kind = t->conf.kind;
	o->banned = t->banned;
#define TO_WIRE(name) o->name = t->conf.name;
	GSD_TENANT_SETTINGS(TO_WIRE)
#undef TO_WIRE
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
		               "a tenant needs a name of 1..63 bytes (and a token under 128)");
		return;
	}
	/* NAME#ID is how the audit tells a tenant made again with a removed one's name, and
	 * NAME/GUEST a virtual machine's guest process. */
	if (strpbrk(t->name, "#/")) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "a tenant name may not contain '#' or '/'");
		return;
	}
	if (gsd_tenant_by_name(d, t->name)) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "tenant %s already exists", t->name);
		return;
	}
	if (t->max_message && t->max_message < 4096) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "max_message %u is below 4096 bytes (0: the default)",
		               t->max_message);
		return;
	}
	if (t->priority_ceiling > GS_PRIORITY_CLASS_MAX || t->kind > 1) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "tenant kind or ceiling out of range");
		return;
	}
	if (t->policy) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "a tenant has no share policy: the adapter's decides "
		               "(adapters[].policy; Info shows it)");
		return;
	}
	gsd_tenant_config tc = {.kind = t->kind};
#define FROM_WIRE(name) tc.name = t->name;
	GSD_TENANT_SETTINGS(FROM_WIRE)
#undef FROM_WIRE
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
	gsd_tenant *nt = gsd_tenant_add(d, &tc);
	if (!nt) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED), "too many tenants");
		return;
	}
	nt->id = ++d->next_tenant_id;
	nt->created_ns = gsd_now_ns();
	/* A removed tenant's name: another identity in the audit, so none of its records. */
	if (gsd_tenant_name_used(d, nt->conf.name))
		snprintf(nt->audit_name, sizeof(nt->audit_name), "%s#%llu", nt->conf.name,
		         (unsigned long long)nt->id);
	gsd_tenant_audit(d, nt, 0); /* a restarted daemon has it again */
	gsd_audit_note(d->audit, c->identity, "tenant_created", nt->audit_name);
	Gpusched__V1__TenantCreateResponse tr = GPUSCHED__V1__TENANT_CREATE_RESPONSE__INIT;
	tr.token = tc.token; /* shown once: the daemon keeps only its salted hash */
	GSD_REPLY(c, TENANT_CREATE, tenant_create, &tr);
	sodium_memzero(tc.token, sizeof(tc.token));
}

static void h_tenant_destroy(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	gsd_tenant *t = gsd_tenant_by_name(d, R(tenant_destroy)->name);
	if (!t) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "no tenant %s", R(tenant_destroy)->name);
		return;
	}
	if (t == c->tenant) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "a tenant cannot remove itself");
		return;
	}
	if (t->devices && R(tenant_destroy)->release_devices) {
		int n = gsd_tenant_release_devices(d, t);
		if (n < 0) {
			gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
			return;
		}
		char text[GSD_NAME_MAX + 72];
		snprintf(text, sizeof(text), "%s: %d devices destroyed", t->audit_name, n);
		gsd_audit_note(d->audit, c->identity, "tenant_devices_released", text);
	}
	if (t->devices) {
		gsd_call_error(c, GSD_ST(BUSY),
		               "tenant %s still has %u devices (release_devices destroys them)",
		               t->conf.name, t->devices);
		return;
	}
	gsd_tenant_audit(d, t, gsd_now_ns()); /* before its hash is wiped */
	gsd_tenant_remove(d, t);
	gsd_audit_note(d->audit, c->identity, "tenant_removed", t->audit_name);
	gsd_call_reply_empty(c);
}

/* The settings TenantUpdate may change, by the names its fields carry. */
/* The settings TenantUpdate may change, by the names its fields carry: where each lives in
 * the tenant's configuration and in the wire's Tenant, and its width (admin, a bool in one
 * and a protobuf_c_boolean in the other, is copied by hand). */
enum { UPD_SHARE, UPD_CEILING, UPD_ADMIN, UPD_MESSAGE, UPD_BANNED, UPD_COPIED };
#define UPD_FIELD(name, wire)                                                                      \
	{                                                                                          \
#name, offsetof(gsd_tenant_config, name), offsetof(Gpusched__V1__Tenant, wire),    \
		        sizeof(((gsd_tenant_config *)0)->name)                                     \
	}
static const struct update_field {
	const char *name;
	size_t conf_at, wire_at, size;
} update_fields[] = {
        [UPD_SHARE] = UPD_FIELD(share, share),
        [UPD_CEILING] = UPD_FIELD(priority_ceiling, priority_ceiling),
        [UPD_ADMIN] = {"admin", 0, 0, 0},
        [UPD_MESSAGE] = UPD_FIELD(max_message, max_message),
        [UPD_BANNED] = {"banned", 0, 0, 0},
        UPD_FIELD(memory_quota, memory_quota),
        UPD_FIELD(context_limit, context_limit),
        UPD_FIELD(allocation_limit, allocation_limit),
        UPD_FIELD(max_requests_per_second, max_requests_per_second),
        UPD_FIELD(packet_limit, packet_limit),
        UPD_FIELD(sync_limit, sync_limit),
};
/* The copy is by the configuration's width: the wire's must be the same. */
#define UPD_SAME(name)                                                                             \
	_Static_assert(sizeof(((gsd_tenant_config *)0)->name) ==                                   \
	                       sizeof(((Gpusched__V1__Tenant *)0)->name),                          \
	               #name)
UPD_SAME(share);
UPD_SAME(priority_ceiling);
UPD_SAME(max_message);
UPD_SAME(memory_quota);
UPD_SAME(context_limit);
UPD_SAME(allocation_limit);
UPD_SAME(max_requests_per_second);
UPD_SAME(packet_limit);
UPD_SAME(sync_limit);

static void h_tenant_update(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	const Gpusched__V1__TenantUpdateRequest *q = R(tenant_update);
	gsd_tenant *t = gsd_tenant_by_name(d, q->name);
	if (!t) {
		gsd_call_error(c, GSD_ST(NOT_FOUND), "no tenant %s", q->name);
		return;
	}
	const Gpusched__V1__Tenant *n = q->tenant;
	unsigned mask = 0;
	for (size_t i = 0; i < q->n_fields; i++) {
		size_t k = 0, nk = sizeof(update_fields) / sizeof(update_fields[0]);
		while (k < nk && strcmp(q->fields[i], update_fields[k].name) != 0)
			k++;
		if (k == nk) {
			gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "TenantUpdate: no field \"%s\"",
			               q->fields[i]);
			return;
		}
		mask |= 1u << k;
	}
	if (!mask || !n) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "TenantUpdate names no field to change");
		return;
	}
	if ((mask & 1u << UPD_CEILING) && n->priority_ceiling > GS_PRIORITY_CLASS_MAX) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "priority_ceiling %u is not a class",
		               n->priority_ceiling);
		return;
	}
	if ((mask & 1u << UPD_MESSAGE) && n->max_message && n->max_message < 4096) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "max_message %u is below 4096 bytes (0: the default)",
		               n->max_message);
		return;
	}
	if ((mask & 1u << UPD_ADMIN) && t == c->tenant && !n->admin) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "an administrator cannot demote itself");
		return;
	}
	if ((mask & 1u << UPD_BANNED) && t == c->tenant && n->banned) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "an administrator cannot ban itself");
		return;
	}
	/* A ban, or its end: a note each, which a restart reads back (bans survive it). */
	if ((mask & 1u << UPD_BANNED) && n->banned != t->banned) {
		char why[160];
		if (n->banned) {
			snprintf(why, sizeof why, "by %s", c->identity);
			gsd_vidsch_ban(d, t, why);
		} else {
			t->banned = false;
			snprintf(why, sizeof why, "tenant %s unbanned by %s", t->conf.name,
			         c->identity);
			gsd_events_note(d, t->audit_name, "tenant_unbanned", why);
		}
	}
	if (mask == 1u << UPD_BANNED) {
		gsd_call_reply_empty(c);
		return;
	}
	gsd_tenant_config *conf = &t->conf;
	for (size_t k = 0; k < sizeof(update_fields) / sizeof(update_fields[0]); k++)
		if ((mask & 1u << k) && update_fields[k].size)
			memcpy((char *)conf + update_fields[k].conf_at,
			       (const char *)n + update_fields[k].wire_at, update_fields[k].size);
	if (mask & 1u << UPD_SHARE && !conf->share)
		conf->share = 1;
	if (mask & 1u << UPD_ADMIN)
		conf->admin = n->admin;
	if (mask & 1u << UPD_SHARE)
		gsd_vidsch_tenant_share(d, t);
	char text[256];
	snprintf(text, sizeof(text),
	         "%s: share %u, priority_ceiling %u, memory_quota %llu, context_limit %u,"
	         " allocation_limit %u, max_requests_per_second %u, admin %d, max_message %llu,"
	         " packet_limit %u, sync_limit %u",
	         t->audit_name, conf->share, conf->priority_ceiling,
	         (unsigned long long)conf->memory_quota, conf->context_limit,
	         conf->allocation_limit, conf->max_requests_per_second, conf->admin,
	         (unsigned long long)gsd_tenant_max_message(d, t), gsd_tenant_packet_limit(d, t),
	         gsd_tenant_sync_limit(d, t));
	gsd_audit_note(d->audit, c->identity, "tenant_updated", text);
	gsd_tenant_audit(d, t, 0); /* made by TenantCreate: its row, so a restart keeps it */
	gsd_call_reply_empty(c);
}

static void h_tenant_list(gsd_daemon *d, gsd_call *c)
{
	Gpusched__V1__Tenant tl[GSD_MAX_TENANTS * 2];
	Gpusched__V1__Tenant *tp[GSD_MAX_TENANTS * 2];
	size_t n = 0;
	for (uint32_t i = 0; i < d->ntenants; i++) {
		const gsd_tenant *t = d->tenants[i];
		if (t->removed || (!c->tenant->conf.admin && t != c->tenant))
			continue;
		tenant_out(t, &tl[n]);
		tp[n] = &tl[n];
		n++;
	}
	Gpusched__V1__TenantListResponse lr = GPUSCHED__V1__TENANT_LIST_RESPONSE__INIT;
	lr.n_tenants = n;
	lr.tenants = tp;
	GSD_REPLY(c, TENANT_LIST, tenant_list, &lr);
}

/* ---- maintenance: drain and status ---- */

#define DRAIN_DEFAULT_MS 60000u
#define DRAIN_CHECK_MS   20u

/* The report a drain answers with (the event its waiters are woken with). */
typedef struct drain_report {
	Gpusched__V1__AdminDrainResponse r;
} drain_report;

static uint64_t packets_ended(const gsd_daemon *d)
{
	return d->stats.packets_completed + d->stats.packets_faulted + d->stats.packets_cancelled;
}

static void drain_answer(gsd_call *c, Gpusched__V1__AdminDrainResponse *r)
{
	GSD_REPLY(c, ADMIN_DRAIN, admin_drain, r);
}

static void drain_wake(gsd_waiter *w, void *event)
{
	drain_answer(gsd_call_of_waiter(w), &((drain_report *)event)->r);
}

/* The drain's caller gave up waiting (its own bound): it learns that the drain goes on. */
static void drain_expired(gsd_call *c)
{
	gsd_waiter_cancel(&c->waiter);
	gsd_call_error(c, GSD_ST(TIMEOUT), "the drain goes on; gpusched admin status follows it");
}

/* The end of a drain: at the deadline the packets still queued are cancelled; then the report,
 * a note, and (unless the daemon stops already) the daemon stops. */
static void drain_finish(gsd_daemon *d, bool stop_after)
{
	uint64_t now = gsd_now_ns();
	bool timed_out = now >= d->drain.deadline_ns;
	uv_timer_stop(&d->drain.timer);
	uv_close((uv_handle_t *)&d->drain.timer, NULL);
	drain_report rep;
	gpusched__v1__admin_drain_response__init(&rep.r);
	rep.r.packets_at_start = d->drain.packets_at_start;
	rep.r.timed_out = timed_out && d->packets.count;
	if (rep.r.timed_out) {
		uint64_t before = d->stats.packets_cancelled;
		for (uint32_t i = 0; i < d->nadapters; i++)
			gsd_vidsch_cancel(
			        d, &d->adapters[i], NULL,
			        "cancelled: the daemon's drain for maintenance timed out");
		rep.r.packets_cancelled = d->stats.packets_cancelled - before;
		rep.r.packets_running = d->packets.count;
	}
	rep.r.packets_finished =
	        packets_ended(d) - d->drain.finished_at_start - rep.r.packets_cancelled;
	rep.r.waited_ms = (uint32_t)((now - d->drain.started_ns) / 1000000u);
	char detail[256];
	snprintf(detail, sizeof detail,
	         "by %s: %llu packets at the start, %llu finished, %llu cancelled at the timeout,"
	         " %llu still running (given the shutdown grace), %u ms",
	         d->drain.who, (unsigned long long)rep.r.packets_at_start,
	         (unsigned long long)rep.r.packets_finished,
	         (unsigned long long)rep.r.packets_cancelled,
	         (unsigned long long)rep.r.packets_running, rep.r.waited_ms);
	GSD_INFO("drain finished %s", detail);
	gsd_audit_note(d->audit, "-", "drain_finished", detail);
	gsd_waitq_wake(&d->drain.waiters, &rep);
	if (stop_after && d->on_drained)
		d->on_drained(d);
}

/* Every DRAIN_CHECK_MS: done when no packet is left, or at the deadline. */
static void drain_check(uv_timer_t *t)
{
	gsd_daemon *d = t->data;
	if (d->packets.count && gsd_now_ns() < d->drain.deadline_ns)
		return;
	drain_finish(d, true);
}

void gsd_rpc_drain_stop(gsd_daemon *d)
{
	/* Stopped another way (a signal) while draining: the caller gets its report now. */
	if (d->drain.on && !uv_is_closing((uv_handle_t *)&d->drain.timer))
		drain_finish(d, false);
}

static void h_admin_drain(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	if (strcmp(R(admin_drain)->confirm, "drain") != 0) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "AdminDrain stops the daemon: confirm must be \"drain\"");
		return;
	}
	if (d->drain.on) {
		gsd_call_error(c, GSD_ST(BUSY), "a drain is under way (gpusched admin status)");
		return;
	}
	if (d->stopping) {
		gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		return;
	}
	uint32_t ms = R(admin_drain)->timeout_ms ? R(admin_drain)->timeout_ms : DRAIN_DEFAULT_MS;
	if (ms > d->cfg.max_wait_ms)
		ms = d->cfg.max_wait_ms;
	if (!gsd_call_may_wait(c))
		return;
	d->drain.on = true;
	d->drain.started_ns = gsd_now_ns();
	d->drain.deadline_ns = d->drain.started_ns + (uint64_t)ms * 1000000u;
	d->drain.packets_at_start = d->packets.count;
	d->drain.finished_at_start = packets_ended(d);
	snprintf(d->drain.who, sizeof d->drain.who, "%s", c->identity);
	gsd_waitq_init(&d->drain.waiters);
	char detail[160];
	snprintf(detail, sizeof detail, "by %s: %llu packets in flight, timeout %u ms", c->identity,
	         (unsigned long long)d->drain.packets_at_start, ms);
	GSD_INFO("drain started %s", detail);
	gsd_audit_note(d->audit, "-", "drain_started", detail);
	/* Its caller waits a little past the deadline: the report comes at it at the latest. */
	gsd_call_wait(c, &d->drain.waiters, drain_wake, ms + 10000u, drain_expired);
	uv_timer_init(d->loop, &d->drain.timer);
	d->drain.timer.data = d;
	uv_timer_start(&d->drain.timer, drain_check, 0, DRAIN_CHECK_MS);
}

static void h_admin_reload(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	char msg[1024];
	int n = d->on_reload ? d->on_reload(d, c->identity, msg, sizeof msg) : -1;
	if (!d->on_reload)
		snprintf(msg, sizeof msg, "this daemon cannot reload its configuration");
	if (n < 0) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "%s", msg);
		return;
	}
	Gpusched__V1__AdminReloadResponse ar = GPUSCHED__V1__ADMIN_RELOAD_RESPONSE__INIT;
	ar.changes = (uint32_t)n;
	ar.report = msg;
	GSD_REPLY(c, ADMIN_RELOAD, admin_reload, &ar);
}

static void h_admin_status(gsd_daemon *d, gsd_call *c)
{
	if (!require_admin(c))
		return;
	Gpusched__V1__AdminStatusResponse as = GPUSCHED__V1__ADMIN_STATUS_RESPONSE__INIT;
	uint64_t now = gsd_now_ns();
	as.state = d->stopping ? "stopping" : d->drain.on ? "draining" : "serving";
	as.version = GS_VERSION;
	as.uptime_ns = now - d->start_ns;
	as.tenants = d->ntenants;
	as.packets_in_flight = d->packets.count;
	if (d->drain.on && !d->stopping) {
		as.drain_left_ms = d->drain.deadline_ns > now
		                           ? (uint32_t)((d->drain.deadline_ns - now) / 1000000u)
		                           : 0;
		as.drain_packets_at_start = d->drain.packets_at_start;
	}
	GSD_REPLY(c, ADMIN_STATUS, admin_status, &as);
}

/* ---- dispatch ---- */

static const char *const g_request_names[] = {
        [GPUSCHED__V1__REQUEST__BODY_INFO] = "info",
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE] = "device_create",
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY] = "device_destroy",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE] = "context_create",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY] = "context_destroy",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY] = "context_set_priority",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_QUERY] = "context_query",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_CREATE] = "allocation_create",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_DESTROY] = "allocation_destroy",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_QUERY] = "allocation_query",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PRIORITY] = "allocation_set_priority",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PREFERENCE] = "allocation_set_preference",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ] = "allocation_read",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE] = "allocation_write",
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT] = "submit",
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH] = "submit_batch",
        [GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT] = "packet_wait",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE] = "sync_create",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY] = "sync_destroy",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_SIGNAL] = "sync_signal",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT] = "sync_wait",
        [GPUSCHED__V1__REQUEST__BODY_MAKE_RESIDENT] = "make_resident",
        [GPUSCHED__V1__REQUEST__BODY_EVICT] = "evict",
        [GPUSCHED__V1__REQUEST__BODY_TRANSFER] = "transfer",
        [GPUSCHED__V1__REQUEST__BODY_HISTORY] = "history",
        [GPUSCHED__V1__REQUEST__BODY_PACKET_EVENTS] = "packet_events",
        [GPUSCHED__V1__REQUEST__BODY_STATS] = "stats",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_CREATE] = "tenant_create",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_DESTROY] = "tenant_destroy",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_LIST] = "tenant_list",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_LIST] = "allocation_list",
        [GPUSCHED__V1__REQUEST__BODY_MOVES] = "moves",
        [GPUSCHED__V1__REQUEST__BODY_EXPLAIN] = "explain",
        [GPUSCHED__V1__REQUEST__BODY_USAGE] = "usage",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_UPDATE] = "tenant_update",
        [GPUSCHED__V1__REQUEST__BODY_GUEST_RELEASE] = "guest_release",
        [GPUSCHED__V1__REQUEST__BODY_EVENTS_WAIT] = "events_wait",
        [GPUSCHED__V1__REQUEST__BODY_KERNEL_CREATE] = "kernel_create",
        [GPUSCHED__V1__REQUEST__BODY_KERNEL_DESTROY] = "kernel_destroy",
        [GPUSCHED__V1__REQUEST__BODY_KERNEL_LIST] = "kernel_list",
        [GPUSCHED__V1__REQUEST__BODY_ADMIN_DRAIN] = "admin_drain",
        [GPUSCHED__V1__REQUEST__BODY_ADMIN_STATUS] = "admin_status",
        [GPUSCHED__V1__REQUEST__BODY_ADMIN_RELOAD] = "admin_reload",
};

const char *gsd_request_name(int body_case)
{
	if (body_case <= 0 ||
	    (size_t)body_case >= sizeof(g_request_names) / sizeof(*g_request_names) ||
	    !g_request_names[body_case])
		return "empty";
	return g_request_names[body_case];
}

typedef void (*handler_fn)(gsd_daemon *d, gsd_call *c);

static const handler_fn g_handlers[] = {
        [GPUSCHED__V1__REQUEST__BODY_INFO] = h_info,
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE] = gsd_h_device_create,
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY] = gsd_h_device_destroy,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE] = gsd_h_context_create,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY] = gsd_h_context_destroy,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY] = gsd_h_context_set_priority,
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_QUERY] = gsd_h_context_query,
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
        [GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE] = gsd_h_sync_create,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY] = gsd_h_sync_destroy,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_SIGNAL] = gsd_h_sync_signal,
        [GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT] = gsd_h_sync_wait,
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
        [GPUSCHED__V1__REQUEST__BODY_EXPLAIN] = gsd_h_explain,
        [GPUSCHED__V1__REQUEST__BODY_USAGE] = gsd_h_usage,
        [GPUSCHED__V1__REQUEST__BODY_TENANT_UPDATE] = h_tenant_update,
        [GPUSCHED__V1__REQUEST__BODY_GUEST_RELEASE] = gsd_h_guest_release,
        [GPUSCHED__V1__REQUEST__BODY_EVENTS_WAIT] = gsd_h_events_wait,
        [GPUSCHED__V1__REQUEST__BODY_KERNEL_CREATE] = gsd_h_kernel_create,
        [GPUSCHED__V1__REQUEST__BODY_KERNEL_DESTROY] = gsd_h_kernel_destroy,
        [GPUSCHED__V1__REQUEST__BODY_KERNEL_LIST] = gsd_h_kernel_list,
        [GPUSCHED__V1__REQUEST__BODY_ADMIN_DRAIN] = h_admin_drain,
        [GPUSCHED__V1__REQUEST__BODY_ADMIN_STATUS] = h_admin_status,
        [GPUSCHED__V1__REQUEST__BODY_ADMIN_RELOAD] = h_admin_reload,
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
	if (bc < GSD_STATS_BODIES)
		d->stats.by_request[bc]++;
	g_handlers[bc](d, c);
}
