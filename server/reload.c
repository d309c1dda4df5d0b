#include "reload.h"

#include "core/log.h"
#include "core/tenant.h"
#include "core/util.h"
#include "rpc/rpc.h"
#include "vidsch/vidsch.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends to a bounded text. */
static void add(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t cap, const char *fmt, ...)
{
	size_t len = strlen(buf);
	if (len + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + len, cap - len, fmt, ap);
	va_end(ap);
}

/* Do two adapters differ in what only a restart changes (all but the time slice and the share
 * policy)? Field by field: strings to their end, no padding compared. */
static bool adapter_differs(const gsd_adapter_config *x, const gsd_adapter_config *y)
{
	if (strcmp(x->name, y->name) || strcmp(x->backend, y->backend) ||
	    strcmp(x->device, y->device) || x->local_memory != y->local_memory ||
	    x->nnodes != y->nnodes || x->nsegments != y->nsegments ||
	    x->system_memory != y->system_memory)
		return true;
	for (uint32_t n = 0; n < x->nnodes; n++)
		if (strcmp(x->nodes[n].name, y->nodes[n].name) ||
		    x->nodes[n].kind != y->nodes[n].kind ||
		    x->nodes[n].paging != y->nodes[n].paging)
			return true;
	for (uint32_t s = 0; s < x->nsegments; s++) {
		const gsd_segment_config *p = &x->segments[s], *q = &y->segments[s];
		if (p->id != q->id || strcmp(p->name, q->name) || p->kind != q->kind ||
		    p->size != q->size || p->cpu_visible != q->cpu_visible)
			return true;
	}
	return false;
}

/* What only a restart can change: the first difference, named, into why. */
static bool needs_restart(const gsd_config *a, const gsd_config *b, char *why, size_t cap)
{
	why[0] = '\0';
	bool listen = a->nlisten != b->nlisten;
	for (uint32_t i = 0; !listen && i < a->nlisten; i++)
		listen = strcmp(a->listen[i], b->listen[i]) ||
		         strcmp(a->listen_tenants[i], b->listen_tenants[i]);
	if (listen)
		add(why, cap, "listen ");
	if (strcmp(a->db_path, b->db_path))
		add(why, cap, "db ");
	if (strcmp(a->metrics_url, b->metrics_url))
		add(why, cap, "metrics ");
	if (a->virtual_clock != b->virtual_clock)
		add(why, cap, "clock ");
	if (a->rpc_workers != b->rpc_workers || a->max_workers != b->max_workers)
		add(why, cap, "rpc_workers/max_workers ");
	if (a->events_buffer != b->events_buffer)
		add(why, cap, "events_buffer ");
	if (a->refresh_hz != b->refresh_hz || a->paging_chunk != b->paging_chunk)
		add(why, cap, "refresh_hz/paging_chunk ");
	if (a->ipc_mode != b->ipc_mode || strcmp(a->ipc_group, b->ipc_group))
		add(why, cap, "ipc_mode/ipc_group ");
	if (a->audit_sync_full != b->audit_sync_full || a->wal_limit != b->wal_limit ||
	    a->retention_age_s != b->retention_age_s ||
	    a->retention_packets != b->retention_packets)
		add(why, cap, "audit_sync_full/wal_limit/audit_retention ");
	/* Without tenants the daemon has its built-in administrator, default, instead. */
	if ((a->ntenants == 0) != (b->ntenants == 0))
		add(why, cap, "tenants (a file without them has the built-in tenant default) ");
	if (a->nadapters != b->nadapters) {
		add(why, cap, "adapters ");
	} else {
		for (uint32_t i = 0; i < a->nadapters; i++)
			if (adapter_differs(&a->adapters[i], &b->adapters[i]))
				add(why, cap,
				    "adapters[%u] (only time_slice_us and policy change live) ", i);
	}
	return why[0] != '\0';
}

/* The daemon-wide limits a reload changes live (read where they are used). */
#define LIVE_LIMITS(X)                                                                             \
	X(max_message)                                                                             \
	X(max_dma_buffer)                                                                          \
	X(max_allocation_list)                                                                     \
	X(max_patch_list)                                                                          \
	X(max_batch)                                                                               \
	X(max_devices)                                                                             \
	X(max_inflight_requests)                                                                   \
	X(max_inflight_bytes)                                                                      \
	X(max_waits_per_connection)                                                                \
	X(max_wait_ms)                                                                             \
	X(max_connections)                                                                         \
	X(max_connections_per_peer)                                                                \
	X(handshake_timeout_ms)                                                                    \
	X(max_handshakes)                                                                          \
	X(unauthenticated_max_message)                                                             \
	X(max_bad_tokens_per_second)                                                               \
	X(max_queued_packets)                                                                      \
	X(max_syncs)                                                                               \
	X(max_kernels)                                                                             \
	X(max_kernel_bytes)                                                                        \
	X(shutdown_grace_ms)                                                                       \
	X(quantum_us)                                                                              \
	X(tdr_delay_ms)                                                                            \
	X(tdr_limit_count)                                                                         \
	X(tdr_limit_time_ms)                                                                       \
	X(starvation_ms)                                                                           \
	X(log_level)

static const gsd_tenant_config *config_tenant(const gsd_config *c, const char *name)
{
	for (uint32_t i = 0; i < c->ntenants; i++)
		if (strcmp(c->tenants[i].name, name) == 0)
			return &c->tenants[i];
	return NULL;
}

int gsd_reload_apply(gsd_daemon *d, const gsd_config *next, const char *who, char *msg, size_t cap)
{
	msg[0] = '\0';
	char why[512];
	if (needs_restart(&d->cfg, next, why, sizeof why)) {
		snprintf(msg, cap, "refused: only a restart changes %s(nothing was changed)", why);
		return -1;
	}
	/* First pass: every tenant change must be possible. */
	for (uint32_t i = 0; i < next->ntenants; i++) {
		const gsd_tenant_config *tc = &next->tenants[i];
		gsd_tenant *t = gsd_tenant_by_name(d, tc->name);
		if (t && t->id) {
			snprintf(msg, cap,
			         "refused: tenant %s was made by an administrator (TenantCreate); "
			         "remove it first or rename it in the file (nothing was changed)",
			         tc->name);
			return -1;
		}
		if (t && t->conf.kind != tc->kind) {
			snprintf(msg, cap,
			         "refused: tenant %s cannot change its kind live (nothing was "
			         "changed)",
			         tc->name);
			return -1;
		}
	}
	/* New TLS material (other files named, or the same files rewritten): loaded now, so that
	 * a certificate that does not load refuses the whole file; compared by the bytes loaded. */
	uint8_t fingerprint[32];
	gsd_rpc_tls_next tls = {0};
	if (gsd_rpc_tls_prepare(next, &tls, fingerprint, why, sizeof why) != 0) {
		snprintf(msg, cap, "refused: %s%s (nothing was changed)",
		         strncmp(why, "tls", 3) == 0 ? "" : "tls: ", why);
		return -1;
	}
	bool tls_changed = memcmp(fingerprint, d->tls_fingerprint, sizeof fingerprint) != 0;
	if (!tls_changed)
		gsd_rpc_tls_discard(&tls);
	int changes = 0;
	char note[512];
	/* Tenants of the file: changed or new. */
	for (uint32_t i = 0; i < next->ntenants; i++) {
		const gsd_tenant_config *tc = &next->tenants[i];
		gsd_tenant *t = gsd_tenant_by_name(d, tc->name);
		if (!t) {
			t = gsd_tenant_add(d, tc);
			if (!t) {
				add(msg, cap, "tenant %s not added (no room or memory); ",
				    tc->name);
				continue;
			}
			snprintf(note, sizeof note, "by %s (reload): %s", who, tc->name);
			gsd_audit_note(d->audit, who, "tenant_created", note);
			add(msg, cap, "tenant %s added; ", tc->name);
			changes++;
			continue;
		}
		note[0] = '\0';
		uint32_t share = t->conf.share;
#define DIFF(f)                                                                                    \
	if ((uint64_t)t->conf.f != (uint64_t)tc->f) {                                              \
		add(note, sizeof note, " " #f " %llu -> %llu", (unsigned long long)t->conf.f,      \
		    (unsigned long long)tc->f);                                                    \
		t->conf.f = tc->f;                                                                 \
	}
		GSD_TENANT_SETTINGS(DIFF)
#undef DIFF
		if (!t->conf.share)
			t->conf.share = 1;
		if (!gsd_tenant_has_credential(t, tc)) {
			gsd_tenant_set_credential(t, tc); /* it parses: the file validated */
			add(note, sizeof note, " token replaced");
		}
		if (!note[0])
			continue;
		if (t->conf.share != share)
			gsd_vidsch_tenant_share(d, t);
		char text[640];
		snprintf(text, sizeof text, "by %s (reload): %s:%s", who, t->audit_name, note);
		gsd_audit_note(d->audit, who, "tenant_updated", text);
		add(msg, cap, "tenant %s:%s; ", t->conf.name, note);
		changes++;
	}
	/* Configured tenants no longer in the file: removed, unless they still have devices. */
	for (uint32_t i = 0; i < d->ntenants;) {
		gsd_tenant *t = d->tenants[i];
		bool configured = !t->id && t != &d->system_tenant;
		if (!configured || next->ntenants == 0 || config_tenant(next, t->conf.name)) {
			i++;
			continue;
		}
		if (t->devices) {
			snprintf(note, sizeof note,
			         "by %s (reload): %s is no longer in the file but has %u devices: "
			         "kept"
			         " until they are destroyed and the next reload",
			         who, t->audit_name, t->devices);
			gsd_audit_note(d->audit, who, "tenant_kept", note);
			add(msg, cap, "tenant %s kept (%u devices); ", t->conf.name, t->devices);
			i++;
			continue;
		}
		snprintf(note, sizeof note, "by %s (reload): %s", who, t->audit_name);
		gsd_audit_note(d->audit, who, "tenant_removed", note);
		add(msg, cap, "tenant %s removed; ", t->conf.name);
		gsd_tenant_remove(d, t); /* shifts the table: i stays */
		changes++;
	}
	/* Limits. */
	note[0] = '\0';
#define LIMIT(f)                                                                                   \
	if ((uint64_t)d->cfg.f != (uint64_t)next->f) {                                             \
		add(note, sizeof note, " " #f " %llu -> %llu", (unsigned long long)d->cfg.f,       \
		    (unsigned long long)next->f);                                                  \
		d->cfg.f = next->f;                                                                \
		changes++;                                                                         \
	}
	LIVE_LIMITS(LIMIT)
#undef LIMIT
	for (uint32_t i = 0; i < d->cfg.nadapters; i++)
		if (d->cfg.adapters[i].share_policy != next->adapters[i].share_policy) {
			add(note, sizeof note, " adapters[%u].policy %s -> %s", i,
			    gsd_share_policy_name(d->cfg.adapters[i].share_policy),
			    gsd_share_policy_name(next->adapters[i].share_policy));
			d->cfg.adapters[i].share_policy = next->adapters[i].share_policy;
			if (gsd_vidsch_adapter_policy(d, &d->adapters[i]) != 0)
				add(note, sizeof note, " (out of memory regrouping: see the log)");
			changes++;
		}
	for (uint32_t i = 0; i < d->cfg.nadapters; i++)
		if (d->cfg.adapters[i].time_slice_us != next->adapters[i].time_slice_us) {
			add(note, sizeof note, " adapters[%u].time_slice_us %u -> %u", i,
			    d->cfg.adapters[i].time_slice_us, next->adapters[i].time_slice_us);
			d->cfg.adapters[i].time_slice_us = next->adapters[i].time_slice_us;
			changes++;
		}
	if (note[0]) {
		char text[640];
		snprintf(text, sizeof text, "by %s (reload):%s", who, note);
		gsd_audit_note(d->audit, who, "limits_changed", text);
		gsd_log_set_level(d->cfg.log_level);
		add(msg, cap, "limits:%s; ", note);
	}
	if (tls_changed) {
		/* The listeners restart a moment after this answer leaves (it may be going out
		 * through one of them); the outcome is audited then. */
		gsd_rpc_tls_swap_soon(d, &tls, who);
		d->cfg.tls = next->tls;
		for (uint32_t i = 0; i < d->cfg.nlisten; i++)
			memcpy(d->cfg.listen_ca[i], next->listen_ca[i], sizeof d->cfg.listen_ca[i]);
		memcpy(d->tls_fingerprint, fingerprint, sizeof fingerprint);
		add(msg, cap, "tls: new certificates: the tls+tcp listeners restart in %d ms; ",
		    GSD_TLS_SWAP_DELAY_MS);
		changes++;
	}
	/* The file's tenants are the running configuration's now (their secrets wiped). */
	d->cfg.ntenants = next->ntenants;
	memcpy(d->cfg.tenants, next->tenants, sizeof d->cfg.tenants);
	for (uint32_t i = 0; i < d->cfg.ntenants; i++)
		sodium_memzero(d->cfg.tenants[i].token, sizeof d->cfg.tenants[i].token);
	if (!changes && !msg[0])
		snprintf(msg, cap, "nothing changed");
	return changes;
}
