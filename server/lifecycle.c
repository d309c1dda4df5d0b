#include "lifecycle.h"

#include "core/events.h"
#include "core/log.h"
#include "core/wire_id.h"
#include "rpc/metrics.h"
#include "rpc/rpc.h"
#include "vidmm/vidmm.h"
#include "vidsch/vidsch.h"

#include "wddm.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/*
 * Every tenant has a secret of its own: two tenants that one token authenticates would let
 * one's holder in as the other (a VM guest as the administrator, say). The configuration still
 * holds the plain tokens: each must match exactly one tenant's hash; two token_hash texts
 * alike are the same secret too. (Two hashes of one token under different salts cannot be told
 * apart: that is what a salt is for.) The message names the tenants, never the secret.
 */
static int secrets_distinct(gsd_daemon *d, const gsd_config *cfg)
{
	for (uint32_t i = 0; i < cfg->ntenants; i++) {
		const gsd_tenant_config *a = &cfg->tenants[i];
		const gsd_tenant *other = NULL;
		if (a->token[0]) {
			for (uint32_t k = 0; k < d->ntenants && !other; k++)
				if (strcmp(d->tenants[k]->conf.name, a->name) != 0 &&
				    gsd_tenant_token_is(d->tenants[k], a->token))
					other = d->tenants[k];
		} else if (a->token_hash[0]) {
			for (uint32_t k = 0; k < i && !other; k++)
				if (strcmp(cfg->tenants[k].token_hash, a->token_hash) == 0)
					other = gsd_tenant_by_name(d, cfg->tenants[k].name);
		}
		if (other) {
			GSD_ERROR("tenants %s and %s have the same secret (token or token_hash): "
			          "each "
			          "tenant needs its own",
			          other->conf.name, a->name);
			return -1;
		}
	}
	return 0;
}

static int add_tenants(gsd_daemon *d, const gsd_config *cfg)
{
	/* Owns the daemon's own contexts (paging); no token names it. */
	snprintf(d->system_tenant.conf.name, sizeof(d->system_tenant.conf.name), "gpuschedd");
	snprintf(d->system_tenant.audit_name, sizeof(d->system_tenant.audit_name), "gpuschedd");
	d->system_tenant.conf.share = 1;
	d->system_tenant.conf.priority_ceiling = GSD_CLASS_SYSTEM;
	if (cfg->ntenants == 0) {
		/* No tenants configured: one default tenant, named by the empty token. */
		gsd_tenant_config def = {.name = "default",
		                         .share = 1,
		                         .priority_ceiling = GS_PRIORITY_CLASS_REALTIME,
		                         .admin = true};
		return gsd_tenant_add(d, &def) ? 0 : -1;
	}
	for (uint32_t i = 0; i < cfg->ntenants; i++)
		if (!gsd_tenant_add(d, &cfg->tenants[i]))
			return -1;
	return secrets_distinct(d, cfg);
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
	for (uint32_t i = 0; i < ac->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		n->index = i;
		n->cfg = &ac->nodes[i];
		n->adapter = a;
	}
	a->nnodes = ac->nnodes;
	char err[512];
	gsd_backend_config bc = {.adapter = ac->name,
	                         .device = ac->device,
	                         .virtual_clock = d->cfg.virtual_clock,
	                         .nodes = ac->nnodes,
	                         .device_only_memory = ac->local_memory == 1};
	if (gsd_backend_open(a->ops, &bc, &a->backend, err, sizeof(err)) != 0) {
		GSD_ERROR("adapter %s: backend %s: %s", ac->name, ac->backend, err);
		return -1;
	}
	gsd_backend_describe(a->ops, a->backend, &a->info);
	gsd_list_init(&a->kernel_codes);
	a->kernels = a->ops->kernel_caps && a->ops->kernel_create &&
	             a->ops->kernel_caps(a->backend, &a->kernel_caps);
	const gsd_backend_info bi = a->info;
	if (a->backend)
		GSD_INFO("adapter %s: %s on %s (%s), %u queue%s for %u node%s", ac->name, bi.api,
		         bi.device, bi.driver, bi.queues, bi.queues == 1 ? "" : "s", a->nnodes,
		         a->nnodes == 1 ? "" : "s");
	return 0;
}

/* Packet ids continue from the audit file: a restarted daemon never reuses (and overwrites)
 * old rows. Handles are random; the file is asked about each new one (new_handle,
 * core/object.c). */
static int continue_ids(gsd_daemon *d)
{
	char err[256];
	if (gsd_history_last_packet(d->cfg.db_path, &d->next_packet, err, sizeof(err)) != 0 ||
	    gsd_history_handles_open(d->cfg.db_path, &d->handles, &d->handle_floor, err,
	                             sizeof(err)) != 0) {
		GSD_ERROR("%s", err);
		return -1;
	}
	if (d->next_packet)
		GSD_INFO("audit file holds packets up to %llu: continuing from there",
		         (unsigned long long)d->next_packet);
	return 0;
}

/* A tenant the audit says is banned: banned again (its name as recorded, name or name#id). */
static void ban_again(void *arg, const char *audit_name)
{
	gsd_daemon *d = arg;
	for (uint32_t i = 0; i < d->ntenants; i++) {
		gsd_tenant *t = d->tenants[i];
		if (!t->banned && strcmp(t->audit_name, audit_name) == 0) {
			t->banned = true;
			GSD_WARN("tenant %s stays banned, as the audit file says (gpusched tenant "
			         "set %s"
			         " --unban lifts it)",
			         audit_name, t->conf.name);
		}
	}
}

/* Bans survive a restart: the audit's notes (tenant_banned, tenant_unbanned) say who is. */
static int restore_bans(gsd_daemon *d)
{
	char err[256];
	if (gsd_history_bans(d->cfg.db_path, ban_again, d, err, sizeof err) != 0) {
		GSD_ERROR("%s", err);
		return -1;
	}
	return 0;
}

/* Tenants that admin requests made (and did not remove) before the last stop: they come back
 * with their token's hash, unless the configuration now has a tenant of that name. */
static void restore_tenant(void *arg, const gsd_tenant_rec *r)
{
	gsd_daemon *d = arg;
	if (r->removed_ns) {
		/* Kept only as a name that was used: a tenant made again with it gets another
		 * audit identity. */
		gsd_tenant *gone = calloc(1, sizeof(*gone));
		if (!gone)
			return;
		snprintf(gone->conf.name, sizeof(gone->conf.name), "%s", r->tenant);
		snprintf(gone->audit_name, sizeof(gone->audit_name), "%s", r->audit_name);
		gone->id = r->id;
		gone->removed = true;
		gone->next_removed = d->removed_tenants;
		d->removed_tenants = gone;
		return;
	}
	if (gsd_tenant_by_name(d, r->tenant)) {
		GSD_WARN("tenant %s made by an admin request is also in the configuration: the"
		         " configuration's is used",
		         r->tenant);
		return;
	}
	gsd_tenant_config tc = {.kind = (int)r->kind};
#define FROM_REC(name) tc.name = r->name;
	GSD_TENANT_SETTINGS(FROM_REC)
#undef FROM_REC
	snprintf(tc.name, sizeof(tc.name), "%s", r->tenant);
	snprintf(tc.token_hash, sizeof(tc.token_hash), "%s", r->token_hash);
	gsd_tenant *t = gsd_tenant_add(d, &tc);
	if (!t) {
		GSD_ERROR("tenant %s (made by an admin request) cannot be restored", r->tenant);
		return;
	}
	t->id = r->id;
	t->created_ns = r->created_ns;
	snprintf(t->audit_name, sizeof(t->audit_name), "%s", r->audit_name);
	/* A configured tenant's token now names it too: the configuration's tenant keeps it. */
	for (uint32_t i = 0; i < d->cfg.ntenants; i++)
		if (d->cfg.tenants[i].token[0] && gsd_tenant_token_is(t, d->cfg.tenants[i].token)) {
			GSD_ERROR("tenant %s (made by an admin request) has the same secret as the "
			          "configured tenant %s: not restored (give it a new token)",
			          r->tenant, d->cfg.tenants[i].name);
			gsd_tenant_remove(d, t);
			return;
		}
}

static int restore_tenants(gsd_daemon *d)
{
	char err[256];
	uint32_t before = d->ntenants;
	if (gsd_history_tenants(d->cfg.db_path, restore_tenant, d, &d->next_tenant_id, err,
	                        sizeof(err)) != 0) {
		GSD_ERROR("%s", err);
		return -1;
	}
	if (d->ntenants > before)
		GSD_INFO("%u tenants made by admin requests restored from the audit file",
		         d->ntenants - before);
	return 0;
}

/*
 * One daemon per socket and per audit file. A second gpuschedd started on a live daemon's
 * ipc:// socket or audit file used to take the socket path from it (clients then reached
 * nobody) and mark its running packets ABORTED in its file. Before anything is opened:
 *
 *   - an ipc:// path that is a socket a process answers on belongs to that process: the start
 *     fails naming its pid (SO_PEERCRED); one nobody answers on is a dead daemon's and is
 *     removed;
 *   - the audit file is locked (flock on DB.lock, which holds the owner's pid) for the
 *     daemon's life; the kernel drops the lock when the process dies, however it dies.
 */
static int claim_sockets(const gsd_config *cfg)
{
	for (uint32_t i = 0; i < cfg->nlisten; i++) {
		if (strncmp(cfg->listen[i], "ipc://", 6) != 0)
			continue;
		const char *path = cfg->listen[i] + 6;
		struct stat st;
		if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
			continue;
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(path) >= sizeof sa.sun_path)
			continue; /* nng refuses it */
		memcpy(sa.sun_path, path, strlen(path) + 1);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			struct ucred cred = {0};
			socklen_t len = sizeof cred;
			getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
			close(fd);
			GSD_ERROR("%s: another process (pid %d) answers on this socket: a "
			          "gpuschedd is"
			          " running there already; stop it, or listen elsewhere",
			          cfg->listen[i], (int)cred.pid);
			return -1;
		}
		int err = errno;
		close(fd);
		if (err == ECONNREFUSED && unlink(path) == 0)
			GSD_INFO("%s: removed the socket of a daemon that is gone", cfg->listen[i]);
	}
	return 0;
}

static int lock_audit(gsd_daemon *d, const gsd_config *cfg)
{
	d->lock_fd = -1;
	if (cfg->bench_null_audit || !cfg->db_path[0])
		return 0;
	char path[sizeof cfg->db_path + 8];
	snprintf(path, sizeof path, "%s.lock", cfg->db_path);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		GSD_ERROR("cannot open %s (the audit file's lock): %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int err = errno;
		char pid[32] = "";
		ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		close(fd);
		if (err == EWOULDBLOCK)
			GSD_ERROR("the audit file %s is in use by another gpuschedd (pid %s): one "
			          "daemon"
			          " per audit file",
			          cfg->db_path, pid[0] ? pid : "unknown");
		else
			GSD_ERROR("cannot lock %s: %s", path, strerror(err));
		return -1;
	}
	char pid[32];
	int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
		GSD_WARN("cannot write the pid into %s: %s", path, strerror(errno));
	d->lock_fd = fd;
	return 0;
}

int gsd_daemon_init(gsd_daemon *d, const gsd_config *cfg, uv_loop_t *loop)
{
	memset(d, 0, sizeof(*d));
	d->cfg = *cfg;
	d->loop = loop;
	d->start_ns = gsd_now_ns();
	gsd_hmap_init(&d->objects);
	gsd_hmap_init(&d->packets);
	gsd_vidsch_install_hooks(d);
	gsd_vidmm_install_hooks(d);
	d->lock_fd = -1;
	if (lock_audit(d, cfg) != 0 || claim_sockets(cfg) != 0)
		return -1;
	d->retired = calloc(GSD_RETIRED_RING, sizeof(*d->retired));
	if (!d->retired || add_tenants(d, cfg) != 0)
		return -1;
	gsd_audit_options ao = {.sync_full = cfg->audit_sync_full,
	                        .null_sink = cfg->bench_null_audit,
	                        .commit_on_caller = !cfg->bench_writer_commits,
	                        .wal_limit = cfg->wal_limit,
	                        .retain_age_ns = cfg->retention_age_s * 1000000000u,
	                        .retain_packets = cfg->retention_packets};
	if (cfg->bench_null_audit)
		GSD_WARN("--bench-null-audit: nothing is written to the audit file (benchmarks "
		         "only): no history, no verification, no durability");
	if (gsd_audit_open(cfg->db_path, &ao, &d->audit) != 0) {
		GSD_ERROR("cannot open the audit database %s", cfg->db_path);
		return -1;
	}
	unsigned char key[GSD_AUDIT_WIRE_KEY_BYTES];
	gsd_audit_wire_key(d->audit, key);
	gsd_wire_key_init(&d->wire, key);
	sodium_memzero(key, sizeof key);
	if (continue_ids(d) != 0 || restore_tenants(d) != 0 || restore_bans(d) != 0)
		return -1;
	/* From here on only the tenants' hashes are in memory, not the configuration's tokens. */
	for (uint32_t i = 0; i < d->cfg.ntenants; i++)
		sodium_memzero(d->cfg.tenants[i].token, sizeof(d->cfg.tenants[i].token));
	gsd_audit_note(d->audit, "-", "daemon_start", GS_VERSION);
	if (gsd_audit_reconciled(d->audit)) {
		char text[128];
		snprintf(text, sizeof(text),
		         "%llu packets in flight when the previous daemon stopped were recorded "
		         "ABORTED",
		         (unsigned long long)gsd_audit_reconciled(d->audit));
		gsd_audit_note(d->audit, "-", "reconciled", text);
	}
	for (uint32_t i = 0; i < d->cfg.nadapters; i++) {
		gsd_adapter *a = &d->adapters[i];
		if (adapter_init(d, a, i, &d->cfg.adapters[i]) != 0)
			return -1;
		/* Counted before its engines start, so a failed start is still cleaned up. */
		d->nadapters++;
		if (gsd_vidmm_adapter_init(d, a) != 0 || gsd_vidsch_start(d, a) != 0)
			return -1;
	}
	/* The PUB socket showed every tenant's events to whoever subscribed: events are read
	 * with EventsWait now, each tenant its own. */
	if (d->cfg.events_url[0]) {
		GSD_WARN("\"events\" (--events %s) is obsolete and ignored: clients read events "
		         "with EventsWait on the request socket (gpusched watch)",
		         d->cfg.events_url);
		d->cfg.events_url[0] = '\0';
	}
	if (gsd_events_open(d, d->cfg.events_buffer) != 0)
		return -1;
	if (gsd_rpc_start(d) != 0)
		return -1;
	return gsd_metrics_start(d, d->cfg.metrics_url);
}

void gsd_daemon_stop(gsd_daemon *d)
{
	if (d->stopping)
		return;
	gsd_rpc_drain_stop(d);
	d->stopping = true;
	GSD_INFO("stopping: no new requests; cancelling queued packets");
	/* The listeners stay open: in nng closing one closes every connection it accepted, and
	 * clients waiting on packets that this stop cancels would lose their answers. New
	 * requests are answered SHUTTING_DOWN instead; the socket closes last. */
	for (uint32_t i = 0; i < d->nadapters; i++)
		gsd_vidsch_cancel(d, &d->adapters[i], NULL, "daemon stopping");
}

void gsd_daemon_destroy(gsd_daemon *d)
{
	gsd_metrics_stop(d);
	for (uint32_t i = 0; i < d->nadapters; i++)
		gsd_vidsch_stop(d, &d->adapters[i]);
	/* Every device goes, which answers the waits still pending on its objects. */
	gsd_device_destroy_all(d);
	gsd_events_close(d); /* answers the EventsWait calls still waiting */
	gsd_rpc_settle(d);
	/* Closing the audit commits everything and sends the answers it still held. It is NULL
	 * when start-up failed before opening it. */
	/* The handle checker's connection first: the writer's must be the file's last, whose
	 * close folds the WAL into the file (gsd_audit_close). */
	gsd_history_handles_close(d->handles);
	d->handles = NULL;
	if (d->audit) {
		gsd_audit_note(d->audit, "-", "daemon_stop", "clean shutdown");
		gsd_audit_close(d->audit);
	}
	d->audit = NULL;
	gsd_rpc_free(d);
	if (d->tls)
		nng_tls_config_free(d->tls);
	d->tls = NULL;
	for (uint32_t i = 0; i < d->nadapters; i++)
		gsd_wake_close(&d->adapters[i].irq_async, false);
	uv_run(d->loop, UV_RUN_DEFAULT); /* let the close callbacks run */
	for (uint32_t i = 0; i < d->nadapters; i++) {
		gsd_vidsch_release(d, &d->adapters[i]);
		gsd_vidmm_adapter_fini(d, &d->adapters[i]);
		gsd_kernel_codes_free(&d->adapters[i]);
		gsd_backend_close(d->adapters[i].ops, d->adapters[i].backend);
		d->adapters[i].backend = NULL;
	}
	gsd_rpc_release(d);
	for (uint32_t i = 0; i < d->ntenants; i++)
		gsd_tenant_free(d->tenants[i]);
	while (d->removed_tenants) {
		gsd_tenant *t = d->removed_tenants;
		d->removed_tenants = t->next_removed;
		gsd_tenant_free(t);
	}
	gsd_hmap_free(&d->objects);
	gsd_hmap_free(&d->packets);
	free(d->retired);
	if (d->lock_fd >= 0)
		close(d->lock_fd); /* the next daemon may have the file now */
	d->lock_fd = -1;
}
