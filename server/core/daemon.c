#include "core/daemon.h"

#include "core/log.h"
#include "rpc/rpc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t gsd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Timestamps of a node's packets: wall time, or the node's virtual engine clock. */
uint64_t gsd_node_now(const gsd_node *n)
{
	if (n->adapter->d->cfg.virtual_clock)
		return n->vtime_ns;
	return gsd_now_ns();
}

gsd_tenant *gsd_tenant_by_token(gsd_daemon *d, const char *token)
{
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (!d->tenants[i]->removed &&
		    strcmp(d->tenants[i]->token, token ? token : "") == 0)
			return d->tenants[i];
	return NULL;
}

gsd_tenant *gsd_tenant_by_name(gsd_daemon *d, const char *name)
{
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (!d->tenants[i]->removed && strcmp(d->tenants[i]->name, name) == 0)
			return d->tenants[i];
	return NULL;
}

static gsd_tenant *tenant_from_config(const gsd_tenant_config *tc)
{
	gsd_tenant *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	snprintf(t->name, sizeof(t->name), "%s", tc->name);
	snprintf(t->token, sizeof(t->token), "%s", tc->token);
	t->kind = tc->kind;
	t->policy = tc->policy;
	t->share = tc->share;
	t->priority_ceiling = tc->priority_ceiling;
	t->memory_quota = tc->memory_quota;
	t->context_limit = tc->context_limit;
	t->admin = tc->admin;
	return t;
}

static int adapter_init(gsd_daemon *d, gsd_adapter *a, uint32_t id, const gsd_adapter_config *ac)
{
	memset(a, 0, sizeof(*a));
	a->id = id;
	a->cfg = ac;
	a->d = d;
	a->ops = gsd_engine_find(ac->backend);
	if (!a->ops) {
		GSD_ERROR("adapter %s: unknown backend %s", ac->name, ac->backend);
		return -1;
	}
	for (uint32_t i = 0; i < ac->nsegments; i++) {
		const gsd_segment_config *sc = &ac->segments[i];
		int rc = gsd_segment_init(&a->segments[i], sc->id, sc->name, sc->kind, sc->size,
		                          sc->cpu_visible);
		if (rc != 0) {
			GSD_ERROR("adapter %s: cannot reserve %llu bytes for segment %s", ac->name,
			          (unsigned long long)sc->size, sc->name);
			return -1;
		}
		a->nsegments++;
		a->memory.seg[sc->id] = (gsd_mem_segment){sc->id, a->segments[i].mem, sc->size};
	}
	for (uint32_t i = 0; i < ac->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		n->index = i;
		n->cfg = &ac->nodes[i];
		n->adapter = a;
	}
	a->nnodes = ac->nnodes;
	return 0;
}

static void redispatch_drain(uv_async_t *h)
{
	gsd_daemon *d = h->data;
	gsd_list *it;
	while ((it = gsd_list_pop_front(&d->redispatch))) {
		gsd_call *c = GSD_CONTAINER_OF(it, gsd_call, link);
		gsd_list_init(it);
		if (d->stopping)
			gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		else
			gsd_handle_request(d, c);
	}
}

void gsd_redispatch(gsd_daemon *d, gsd_call *c)
{
	gsd_list_push_back(&d->redispatch, &c->link);
	uv_async_send(&d->redispatch_async);
}

int gsd_daemon_init(gsd_daemon *d, const gsd_config *cfg, uv_loop_t *loop)
{
	memset(d, 0, sizeof(*d));
	d->cfg = *cfg;
	d->loop = loop;
	d->start_ns = gsd_now_ns();
	/* Owns the daemon's own contexts (paging); no token names it. */
	snprintf(d->system_tenant.name, sizeof(d->system_tenant.name), "gpuschedd");
	d->system_tenant.share = 1;
	d->system_tenant.priority_ceiling = GSD_CLASS_SYSTEM;
	gsd_hmap_init(&d->objects);
	gsd_hmap_init(&d->packets);
	gsd_list_init(&d->redispatch);
	uv_async_init(loop, &d->redispatch_async, redispatch_drain);
	d->redispatch_async.data = d;
	d->retired = calloc(GSD_RETIRED_RING, sizeof(*d->retired));
	if (!d->retired)
		return -1;
	if (cfg->ntenants == 0) {
		/* No tenants configured: one default tenant, named by the empty token. */
		gsd_tenant_config def = {
		        .name = "default", .share = 1, .priority_ceiling = 5, .admin = true};
		d->tenants[d->ntenants++] = tenant_from_config(&def);
	}
	for (uint32_t i = 0; i < cfg->ntenants; i++)
		d->tenants[d->ntenants++] = tenant_from_config(&cfg->tenants[i]);
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (!d->tenants[i])
			return -1;
	gsd_audit_options ao = {.sync_full = cfg->audit_sync_full, .wal_limit = cfg->wal_limit};
	if (gsd_audit_open(cfg->db_path, &ao, &d->audit) != 0) {
		GSD_ERROR("cannot open the audit database %s", cfg->db_path);
		return -1;
	}
	char err[256];
	if (gsd_history_last_ids(cfg->db_path, &d->next_packet, &d->next_handle, err,
	                         sizeof(err)) != 0) {
		GSD_ERROR("%s", err);
		return -1;
	}
	if (d->next_packet)
		GSD_INFO("audit file holds packets up to %llu: continuing from there",
		         (unsigned long long)d->next_packet);
	gsd_audit_note(d->audit, "-", "daemon_start", GS_VERSION);
	for (uint32_t i = 0; i < d->cfg.nadapters; i++) {
		if (adapter_init(d, &d->adapters[i], i, &d->cfg.adapters[i]) != 0)
			return -1;
		/* Counted before its engines start, so a failed start is still cleaned up. */
		d->nadapters++;
		if (gsd_vidsch_start(d, &d->adapters[i]) != 0 ||
		    gsd_vidmm_adapter_init(d, &d->adapters[i]) != 0)
			return -1;
	}
	return gsd_rpc_start(d);
}

static void destroy_tenant_devices(uint64_t key, void *value, void *arg)
{
	(void)key;
	gsd_object *o = value;
	gsd_object **list = arg;
	if (o->type == GSD_OBJ_DEVICE) {
		/* Collected first: destroying while iterating would modify the map. */
		size_t n = (size_t)list[0];
		list[n + 1] = o;
		list[0] = (gsd_object *)(n + 1);
	}
}

void gsd_daemon_stop(gsd_daemon *d)
{
	if (d->stopping)
		return;
	d->stopping = true;
	GSD_INFO("stopping: no new requests; cancelling queued packets");
	/* The listeners stay open: in nng closing one closes every connection it accepted, and
	 * clients waiting on packets that this stop cancels would lose their answers. New
	 * requests are answered SHUTTING_DOWN instead; the socket closes last. */
	for (uint32_t i = 0; i < d->nadapters; i++)
		gsd_vidsch_cancel(d, &d->adapters[i], NULL, "daemon stopping");
}

/* Every device goes, which answers the waits still pending on its objects. */
static void destroy_all_devices(gsd_daemon *d)
{
	size_t n = d->devices;
	gsd_object **list = calloc(n + 2, sizeof(*list));
	if (!list)
		return;
	gsd_hmap_each(&d->objects, destroy_tenant_devices, list);
	size_t got = (size_t)list[0];
	for (size_t i = 0; i < got; i++)
		gsd_device_destroy(d, (gsd_device *)list[i + 1]);
	free(list);
}

void gsd_daemon_destroy(gsd_daemon *d)
{
	for (uint32_t i = 0; i < d->nadapters; i++)
		gsd_vidsch_stop(d, &d->adapters[i]);
	destroy_all_devices(d);
	/* Requests that were to be handled again are answered now. */
	redispatch_drain(&d->redispatch_async);
	/* Reads on the thread pool answer through the socket and audit their errors: let them
	 * finish while both are still open. */
	while (d->offloads > 0)
		uv_run(d->loop, UV_RUN_ONCE);
	/* Closing the audit commits everything and sends the answers it still held. It is NULL
	 * when start-up failed before opening it. */
	if (d->audit) {
		gsd_audit_note(d->audit, "-", "daemon_stop", "clean shutdown");
		gsd_audit_close(d->audit);
	}
	d->audit = NULL;
	gsd_rpc_free(d);
	for (uint32_t i = 0; i < d->nadapters; i++) {
		gsd_adapter *a = &d->adapters[i];
		uv_close((uv_handle_t *)&a->irq_async, NULL);
	}
	uv_close((uv_handle_t *)&d->redispatch_async, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT); /* let the close callbacks run */
	for (uint32_t i = 0; i < d->nadapters; i++) {
		gsd_adapter *a = &d->adapters[i];
		gsd_vidmm_adapter_fini(d, a);
		for (uint32_t s = 0; s < a->nsegments; s++)
			gsd_segment_fini(&a->segments[s]);
		free(a->irqs);
		pthread_mutex_destroy(&a->irq_lock);
	}
	gsd_rpc_release(d);
	for (uint32_t i = 0; i < d->ntenants; i++)
		free(d->tenants[i]);
	gsd_hmap_free(&d->objects);
	gsd_hmap_free(&d->packets);
	free(d->retired);
}
