#include "core/config.h"

#include "defaults.h"
#include "gpusched.pb-c.h"
#include "core/log.h"
#include "core/tenant.h"
#include "wddm.h"

#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MiB (UINT64_C(1) << 20)

static void set_str(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src);
}

/* An adapter with no nodes or segments configured gets these. */
static const gsd_node_config default_nodes[3] = {
        {.name = "3d", .kind = GPUSCHED__V1__NODE_KIND__NODE_KIND_3D},
        {.name = "compute", .kind = GPUSCHED__V1__NODE_KIND__NODE_KIND_COMPUTE},
        {.name = "copy", .kind = GPUSCHED__V1__NODE_KIND__NODE_KIND_COPY, .paging = true},
};
static const gsd_segment_config default_segments[2] = {
        {.id = 1,
         .name = "vram",
         .kind = GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY,
         .size = 256 * MiB},
        {.id = 2,
         .name = "aperture",
         .kind = GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE,
         .size = 1024 * MiB,
         .cpu_visible = true},
};

static void default_adapter(gsd_adapter_config *a, uint32_t index)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->name, sizeof(a->name), "emu%u", index);
	set_str(a->backend, sizeof(a->backend), "emu");
	_Static_assert(sizeof(a->nodes) >= sizeof(default_nodes) &&
	                       sizeof(a->segments) >= sizeof(default_segments),
	               "room for the defaults");
	a->nnodes = 3;
	memcpy(a->nodes, default_nodes, sizeof(default_nodes));
	a->nsegments = 2;
	memcpy(a->segments, default_segments, sizeof(default_segments));
	a->system_memory = 4096 * MiB;
}

void gsd_config_defaults(gsd_config *c)
{
	memset(c, 0, sizeof(*c));
	c->nlisten = 1;
	gs_default_url(c->listen[0], sizeof(c->listen[0]));
	set_str(c->db_path, sizeof(c->db_path), "gpusched-audit.db");
	c->log_level = GSD_LOG_INFO;
	c->wal_limit = 64 * MiB;
	c->max_message = 8 * MiB;
	c->max_dma_buffer = 1 * MiB;
	c->max_allocation_list = 4096;
	c->max_patch_list = 65536;
	c->max_batch = 1024;
	c->max_devices = 1024;
	c->rpc_workers = 16;
	c->max_workers = 4096;
	c->max_inflight_requests = 512;
	c->max_inflight_bytes = 64u << 20;
	c->max_waits_per_connection = 64;
	c->max_wait_ms = 300000;
	c->max_connections = 0;
	c->max_connections_per_peer = 256;
	c->handshake_timeout_ms = 5000;
	c->max_handshakes = 256;
	c->unauthenticated_max_message = 64 * 1024;
	c->ipc_mode = 0600;
	c->ipc_gid = -1;
	c->max_bad_tokens_per_second = 20;
	c->events_buffer = 16384;
	c->max_queued_packets = 32768;
	c->max_syncs = 4096;
	c->max_kernels = 256;
	c->max_kernel_bytes = UINT64_C(64) << 20;
	c->shutdown_grace_ms = 5000;
	c->quantum_us = 2000;
	c->tdr_delay_ms = 2000;
	c->tdr_limit_count = 5;
	c->tdr_limit_time_ms = 60000;
	c->starvation_ms = 40;
	c->paging_chunk = 1 * MiB;
	c->refresh_hz = 60;
	c->nadapters = 1;
	default_adapter(&c->adapters[0], 0);
}

/* ---- JSON helpers: each reports the key path in errors ---- */

typedef struct cfg_err {
	char *buf;
	size_t cap;
	/* Every (object, key) the loader asked for, so that the keys nothing reads (misspelt,
	 * or of another version) can be reported (warn_unread). */
	struct cfg_read {
		const json_t *obj;
		const char *key;
	} * read;
	size_t nread, capread;
} cfg_err;

/* json_object_get, remembering that the key is one the loader knows. */
static json_t *cfg_get(cfg_err *e, json_t *obj, const char *key)
{
	if (e->nread == e->capread) {
		size_t cap = e->capread ? 2 * e->capread : 256;
		struct cfg_read *r = realloc(e->read, cap * sizeof(*r));
		if (r) {
			e->read = r;
			e->capread = cap;
		}
	}
	if (e->nread < e->capread)
		e->read[e->nread++] = (struct cfg_read){obj, key};
	return json_object_get(obj, key);
}

static bool cfg_was_read(const cfg_err *e, const json_t *obj, const char *key)
{
	for (size_t i = 0; i < e->nread; i++)
		if (e->read[i].obj == obj && strcmp(e->read[i].key, key) == 0)
			return true;
	return false;
}

/* Warns of every key of obj (at `path`) that the loader never asked for: it does nothing, and
 * is most likely misspelt. Looks inside the objects and arrays of objects it did read. Returns
 * how many there are. */
static uint32_t warn_unread(const cfg_err *e, const json_t *obj, const char *path)
{
	uint32_t n = 0;
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)obj, key, v)
	{
		char sub[256];
		snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", key);
		if (!cfg_was_read(e, obj, key)) {
			GSD_WARN("config: unknown key \"%s\" ignored (misspelt?)", sub);
			n++;
			continue;
		}
		if (json_is_object(v))
			n += warn_unread(e, v, sub);
		for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
			char elem[300];
			snprintf(elem, sizeof(elem), "%s[%zu]", sub, i);
			if (json_is_object(json_array_get(v, i)))
				n += warn_unread(e, json_array_get(v, i), elem);
		}
	}
	return n;
}

static int fail(cfg_err *e, const char *fmt, const char *key)
{
	snprintf(e->buf, e->cap, fmt, key);
	return -1;
}

static int get_u64(json_t *obj, const char *key, uint64_t *out, cfg_err *e)
{
	json_t *v = cfg_get(e, obj, key);
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return fail(e, "\"%s\" must be a non-negative integer", key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int get_u32(json_t *obj, const char *key, uint32_t *out, cfg_err *e)
{
	uint64_t v = *out;
	if (get_u64(obj, key, &v, e) != 0)
		return -1;
	if (v > UINT32_MAX)
		return fail(e, "\"%s\" is too large", key);
	*out = (uint32_t)v;
	return 0;
}

/* The array at `key` (NULL in *out when absent), of min..max elements (`what`, plural, for the
 * error text), its length in *n. */
static int get_array(json_t *obj, const char *key, size_t min, size_t max, const char *what,
                     json_t **out, uint32_t *n, cfg_err *e)
{
	json_t *v = cfg_get(e, obj, key);
	*out = NULL;
	if (!v)
		return 0;
	size_t len = json_is_array(v) ? json_array_size(v) : 0;
	if (!json_is_array(v) || len < min || len > max) {
		if (min)
			snprintf(e->buf, e->cap, "\"%s\" must be an array of %zu..%zu %s", key, min,
			         max, what);
		else
			snprintf(e->buf, e->cap, "\"%s\" must be an array of at most %zu %s", key,
			         max, what);
		return -1;
	}
	*out = v;
	*n = (uint32_t)len;
	return 0;
}

static int get_bool(json_t *obj, const char *key, bool *out, cfg_err *e)
{
	json_t *v = cfg_get(e, obj, key);
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return fail(e, "\"%s\" must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int get_str(json_t *obj, const char *key, char *out, size_t cap, cfg_err *e)
{
	json_t *v = cfg_get(e, obj, key);
	if (!v)
		return 0;
	if (!json_is_string(v))
		return fail(e, "\"%s\" must be a string", key);
	if (strlen(json_string_value(v)) >= cap)
		return fail(e, "\"%s\" is too long", key);
	set_str(out, cap, json_string_value(v));
	return 0;
}

/* "ipc_group": a group name (it must exist now) or a numeric gid, as a number or a string;
 * "" is none. */
static int get_ipc_group(json_t *root, gsd_config *c, cfg_err *e)
{
	json_t *v = cfg_get(e, root, "ipc_group");
	if (!v)
		return 0;
	if (json_is_integer(v)) {
		json_int_t g = json_integer_value(v);
		if (g < 0 || g >= (json_int_t)UINT32_MAX)
			return fail(e, "\"%s\" must be a group name or a gid", "ipc_group");
		c->ipc_gid = g;
		snprintf(c->ipc_group, sizeof(c->ipc_group), "%lld", (long long)g);
		return 0;
	}
	if (get_str(root, "ipc_group", c->ipc_group, sizeof(c->ipc_group), e) != 0)
		return -1;
	const char *name = c->ipc_group;
	if (!name[0]) {
		c->ipc_gid = -1;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long long g = strtoull(name, &end, 10);
	if (!*end && name[0] >= '0' && name[0] <= '9') {
		if (errno || g >= UINT32_MAX)
			return fail(e, "\"%s\" must be a group name or a gid", "ipc_group");
		c->ipc_gid = (int64_t)g;
		return 0;
	}
	struct group gr, *found = NULL;
	char buf[16384];
	int rv = getgrnam_r(name, &gr, buf, sizeof(buf), &found);
	if (!found) {
		snprintf(e->buf, e->cap, "\"ipc_group\": no group named \"%s\"%s%s", name,
		         rv ? ": " : "", rv ? strerror(rv) : "");
		return -1;
	}
	c->ipc_gid = gr.gr_gid;
	return 0;
}

/* Looks a word up in a NULL-terminated list; the index is the enum value. */
static int get_enum(json_t *obj, const char *key, const char *const *words, int *out, cfg_err *e)
{
	char word[32] = "";
	if (get_str(obj, key, word, sizeof(word), e) != 0)
		return -1;
	if (!word[0])
		return 0;
	for (int i = 0; words[i]; i++) {
		if (strcasecmp(word, words[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return fail(e, "\"%s\" has an unknown value", key);
}

static const char *const node_kinds[] = {"3d", "compute", "copy", NULL};
static const char *const segment_kinds[] = {"memory", "aperture", NULL};
static const char *const tenant_kinds[] = {"process", "vm", NULL};
/* Indexed by GSD_SHARE_*. */
static const char *const share_policies[] = {"weighted", "equal_share", "best_effort",
                                             "fixed_share", NULL};

const char *gsd_share_policy_name(int policy)
{
	return policy >= 0 && policy <= GSD_SHARE_FIXED ? share_policies[policy] : "?";
}

/* adapters[].local_memory: where a GPU backend puts memory segments. */
static const char *const local_memories[] = {"auto", "device", NULL};

/* A size given in bytes as key, or in MiB as key_mib (which wins when both are given). */
static int get_size(json_t *obj, const char *key, const char *key_mib, uint64_t *out, cfg_err *e)
{
	uint64_t mib = 0;
	if (get_u64(obj, key, out, e) || get_u64(obj, key_mib, &mib, e))
		return -1;
	if (mib > UINT64_MAX / MiB)
		return fail(e, "\"%s\" is more bytes than 64 bits hold", key_mib);
	if (mib)
		*out = mib * MiB;
	return 0;
}

/* nodes[i]: named "node<i>" unless it says otherwise. */
static int load_node(json_t *jn, uint32_t i, gsd_node_config *n, cfg_err *e)
{
	if (!json_is_object(jn))
		return fail(e, "%s: each node must be an object", "adapters[].nodes");
	*n = (gsd_node_config){0};
	snprintf(n->name, sizeof(n->name), "node%u", i);
	if (get_str(jn, "name", n->name, sizeof(n->name), e) ||
	    get_enum(jn, "kind", node_kinds, &n->kind, e) || get_bool(jn, "paging", &n->paging, e))
		return -1;
	return 0;
}

/* segments[i]: id i + 1 and named "segment<id>" unless it says otherwise. */
static int load_segment(json_t *js, uint32_t i, gsd_segment_config *s, cfg_err *e)
{
	if (!json_is_object(js))
		return fail(e, "%s: each segment must be an object", "adapters[].segments");
	*s = (gsd_segment_config){.id = i + 1};
	snprintf(s->name, sizeof(s->name), "segment%u", i + 1);
	if (get_u32(js, "id", &s->id, e) || get_str(js, "name", s->name, sizeof(s->name), e) ||
	    get_enum(js, "kind", segment_kinds, &s->kind, e) ||
	    get_size(js, "size", "size_mib", &s->size, e) ||
	    get_bool(js, "cpu_visible", &s->cpu_visible, e))
		return -1;
	return 0;
}

static int load_adapter(json_t *ja, gsd_adapter_config *a, cfg_err *e)
{
	if (!json_is_object(ja))
		return fail(e, "%s: each adapter must be an object", "adapters");
	if (get_str(ja, "name", a->name, sizeof(a->name), e) ||
	    get_str(ja, "backend", a->backend, sizeof(a->backend), e) ||
	    get_str(ja, "device", a->device, sizeof(a->device), e) ||
	    get_enum(ja, "local_memory", local_memories, &a->local_memory, e) ||
	    get_enum(ja, "policy", share_policies, &a->share_policy, e) ||
	    get_u32(ja, "time_slice_us", &a->time_slice_us, e))
		return -1;
	if (a->time_slice_us && (a->time_slice_us < 1000 || a->time_slice_us > 30000))
		return fail(e, "\"%s\" must be 1000..30000 (1 to 30 ms)", "time_slice_us");
	json_t *nodes, *segs;
	if (get_array(ja, "nodes", 1, GSD_MAX_NODES, "nodes", &nodes, &a->nnodes, e) ||
	    get_array(ja, "segments", 1, sizeof(a->segments) / sizeof(a->segments[0]), "segments",
	              &segs, &a->nsegments, e))
		return -1;
	for (uint32_t i = 0; nodes && i < a->nnodes; i++)
		if (load_node(json_array_get(nodes, i), i, &a->nodes[i], e))
			return -1;
	for (uint32_t i = 0; segs && i < a->nsegments; i++)
		if (load_segment(json_array_get(segs, i), i, &a->segments[i], e))
			return -1;
	if (get_size(ja, "system_memory", "system_memory_mib", &a->system_memory, e))
		return -1;
	a->system_memory_set =
	        json_object_get(ja, "system_memory") || json_object_get(ja, "system_memory_mib");
	return 0;
}

int gsd_config_add_vulkan(gsd_config *c, char *err, size_t cap)
{
	if (c->nadapters >= GSD_MAX_ADAPTERS) {
		snprintf(err, cap, "already %u adapters, the most there can be", c->nadapters);
		return -1;
	}
	gsd_adapter_config *a = &c->adapters[c->nadapters];
	default_adapter(a, c->nadapters);
	c->nadapters++;
	/* Named after the GPUs among the adapters, which the emulated ones (emuN) are not. */
	uint32_t gpus = 0;
	for (uint32_t i = 0; i + 1 < c->nadapters; i++)
		gpus += strcmp(c->adapters[i].backend, "vulkan") == 0;
	snprintf(a->name, sizeof(a->name), "gpu%u", gpus);
	set_str(a->backend, sizeof(a->backend), "vulkan");
	a->system_memory_set = false; /* the vulkan default (gsd_config_backend_defaults) */
	return 0;
}

void gsd_config_backend_defaults(gsd_config *c)
{
	for (uint32_t i = 0; i < c->nadapters; i++) {
		gsd_adapter_config *a = &c->adapters[i];
		/* Vulkan buffers top out at 4 GiB - 1 on some drivers (lavapipe among them), and
		 * the system memory is one buffer the GPU copies to and from. */
		if (strcmp(a->backend, "vulkan") == 0 && !a->system_memory_set)
			a->system_memory = 1024 * MiB;
	}
}

/* One "listen" entry: a URL, or {"url", "ca_file", "tenants": [names]} (a listener of its
 * own CA whose connections authenticate only those tenants). */
static int load_listen(json_t *j, gsd_config *c, uint32_t i, cfg_err *e)
{
	c->listen_ca[i][0] = c->listen_tenants[i][0] = '\0';
	if (json_is_string(j)) {
		set_str(c->listen[i], sizeof(c->listen[i]), json_string_value(j));
		return 0;
	}
	if (!json_is_object(j))
		return fail(e, "\"%s\" holds URLs or objects {\"url\", \"ca_file\", \"tenants\"}",
		            "listen");
	if (get_str(j, "url", c->listen[i], sizeof(c->listen[i]), e) ||
	    get_str(j, "ca_file", c->listen_ca[i], sizeof(c->listen_ca[i]), e))
		return -1;
	if (!c->listen[i][0])
		return fail(e, "\"%s\": an entry given as an object needs \"url\"", "listen");
	if (c->listen_ca[i][0] && strncmp(c->listen[i], "tls+", 4) != 0)
		return fail(e, "listen %s: ca_file is for tls+tcp:// listeners", c->listen[i]);
	json_t *names = cfg_get(e, j, "tenants");
	if (!names)
		return 0;
	if (!json_is_array(names) || json_array_size(names) == 0)
		return fail(e, "listen %s: \"tenants\" must be an array of tenant names",
		            c->listen[i]);
	size_t used = 0;
	for (size_t k = 0; k < json_array_size(names); k++) {
		const char *n = json_string_value(json_array_get(names, k));
		size_t len = n ? strlen(n) : 0;
		if (!len || strchr(n, ',') || used + len + 2 > sizeof(c->listen_tenants[i]))
			return fail(e,
			            "listen %s: \"tenants\" holds tenant names, without commas, of"
			            " 510 bytes in all at most",
			            c->listen[i]);
		used += (size_t)snprintf(c->listen_tenants[i] + used,
		                         sizeof(c->listen_tenants[i]) - used, "%s%s",
		                         used ? "," : "", n);
	}
	return 0;
}

static int load_tenant(json_t *jt, gsd_tenant_config *t, cfg_err *e)
{
	memset(t, 0, sizeof(*t));
	if (json_object_get(jt, "policy"))
		return fail(e,
		            "tenants[].\"%s\": the share policy is the adapter's "
		            "(adapters[].policy), not a tenant's",
		            "policy");
	t->share = 1;
	/* REALTIME never yields its engine: a tenant gets it only when the operator says so. */
	t->priority_ceiling = GS_PRIORITY_CLASS_NORMAL;
	if (get_str(jt, "name", t->name, sizeof(t->name), e) ||
	    get_str(jt, "token", t->token, sizeof(t->token), e) ||
	    get_str(jt, "token_hash", t->token_hash, sizeof(t->token_hash), e) ||
	    get_enum(jt, "kind", tenant_kinds, &t->kind, e) || get_u32(jt, "share", &t->share, e) ||
	    get_u32(jt, "priority_ceiling", &t->priority_ceiling, e) ||
	    get_u64(jt, "memory_quota", &t->memory_quota, e) ||
	    get_u32(jt, "context_limit", &t->context_limit, e) ||
	    get_u32(jt, "allocation_limit", &t->allocation_limit, e) ||
	    get_u32(jt, "max_requests_per_second", &t->max_requests_per_second, e) ||
	    get_u32(jt, "max_message", &t->max_message, e) ||
	    get_u32(jt, "packet_limit", &t->packet_limit, e) ||
	    get_u32(jt, "sync_limit", &t->sync_limit, e) || get_bool(jt, "admin", &t->admin, e))
		return -1;
	if (!t->name[0])
		return fail(e, "%s: every tenant needs a name", "tenants");
	if (t->max_message && t->max_message < 4096)
		return fail(e, "tenant %s: max_message must be at least 4096 (0: the default)",
		            t->name);
	if (strpbrk(t->name, "#/"))
		return fail(e, "tenant %s: a name may not contain '#' or '/'", t->name);
	uint8_t salt[GSD_TOKEN_SALT], hash[GSD_TOKEN_HASH];
	if (t->token_hash[0] && (t->token[0] || gsd_token_hash_parse(t->token_hash, salt, hash)))
		return fail(e,
		            "tenant %s: token_hash must be the output of gpuschedd --hash-token"
		            " (b2$SALT$HASH), and comes instead of token",
		            t->name);
	return 0;
}

int gsd_config_load(gsd_config *c, const char *path, char *err, size_t errcap)
{
	cfg_err e = {err, errcap};
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(err, errcap, "%s:%d: %s", path, jerr.line, jerr.text);
		return -1;
	}
	int rc = -1;
	if (!json_is_object(root)) {
		snprintf(err, errcap, "%s: the top level must be an object", path);
		goto out;
	}
	json_t *listen, *adapters, *tenants;
	if (get_array(root, "listen", 1, GSD_MAX_LISTEN, "URLs", &listen, &c->nlisten, &e))
		goto out;
	if (listen) {
		for (uint32_t i = 0; i < c->nlisten; i++)
			if (load_listen(json_array_get(listen, i), c, i, &e) != 0)
				goto out;
	}
	char level[16] = "";
	char clock[16] = "";
	if (get_str(root, "events", c->events_url, sizeof(c->events_url), &e) ||
	    get_str(root, "metrics", c->metrics_url, sizeof(c->metrics_url), &e) ||
	    get_u32(root, "events_buffer", &c->events_buffer, &e) ||
	    get_str(root, "db", c->db_path, sizeof(c->db_path), &e) ||
	    get_str(root, "clock", clock, sizeof(clock), &e) ||
	    get_str(root, "log_level", level, sizeof(level), &e) ||
	    get_bool(root, "audit_sync_full", &c->audit_sync_full, &e) ||
	    get_u64(root, "wal_limit", &c->wal_limit, &e) ||
	    get_u64(root, "max_message", &c->max_message, &e) ||
	    get_u32(root, "max_dma_buffer", &c->max_dma_buffer, &e) ||
	    get_u32(root, "max_allocation_list", &c->max_allocation_list, &e) ||
	    get_u32(root, "max_patch_list", &c->max_patch_list, &e) ||
	    get_u32(root, "max_batch", &c->max_batch, &e) ||
	    get_u32(root, "max_devices", &c->max_devices, &e) ||
	    get_u32(root, "rpc_workers", &c->rpc_workers, &e) ||
	    get_u32(root, "max_workers", &c->max_workers, &e) ||
	    get_u32(root, "max_inflight_requests", &c->max_inflight_requests, &e) ||
	    get_u64(root, "max_inflight_bytes", &c->max_inflight_bytes, &e) ||
	    get_u32(root, "max_waits_per_connection", &c->max_waits_per_connection, &e) ||
	    get_u32(root, "max_wait_ms", &c->max_wait_ms, &e) ||
	    get_u32(root, "max_connections", &c->max_connections, &e) ||
	    get_u32(root, "max_connections_per_peer", &c->max_connections_per_peer, &e) ||
	    get_u32(root, "handshake_timeout_ms", &c->handshake_timeout_ms, &e) ||
	    get_u32(root, "max_handshakes", &c->max_handshakes, &e) ||
	    get_u32(root, "unauthenticated_max_message", &c->unauthenticated_max_message, &e) ||
	    get_u32(root, "max_bad_tokens_per_second", &c->max_bad_tokens_per_second, &e) ||
	    get_u32(root, "max_queued_packets", &c->max_queued_packets, &e) ||
	    get_u32(root, "max_syncs", &c->max_syncs, &e) ||
	    get_u32(root, "max_kernels", &c->max_kernels, &e) ||
	    get_u64(root, "max_kernel_bytes", &c->max_kernel_bytes, &e) ||
	    get_u32(root, "shutdown_grace_ms", &c->shutdown_grace_ms, &e) ||
	    get_u32(root, "quantum_us", &c->quantum_us, &e) ||
	    get_u32(root, "tdr_delay_ms", &c->tdr_delay_ms, &e) ||
	    get_u32(root, "tdr_limit_count", &c->tdr_limit_count, &e) ||
	    get_u32(root, "tdr_limit_time_ms", &c->tdr_limit_time_ms, &e) ||
	    get_u32(root, "starvation_ms", &c->starvation_ms, &e) ||
	    get_u32(root, "refresh_hz", &c->refresh_hz, &e) ||
	    get_u64(root, "paging_chunk", &c->paging_chunk, &e))
		goto out;
	if (clock[0]) {
		if (strcmp(clock, "wall") && strcmp(clock, "virtual")) {
			fail(&e, "\"%s\" must be \"wall\" or \"virtual\"", "clock");
			goto out;
		}
		c->virtual_clock = strcmp(clock, "virtual") == 0;
	}
	if (level[0]) {
		c->log_level = gsd_log_parse_level(level);
		if (c->log_level < 0) {
			fail(&e, "\"%s\" must be error, warn, info or debug", "log_level");
			goto out;
		}
	}
	json_t *retention = cfg_get(&e, root, "audit_retention");
	if (retention) {
		if (!json_is_object(retention)) {
			fail(&e, "\"%s\" must be an object {\"max_age_s\": N, \"max_packets\": N}",
			     "audit_retention");
			goto out;
		}
		if (get_u64(retention, "max_age_s", &c->retention_age_s, &e) ||
		    get_u64(retention, "max_packets", &c->retention_packets, &e))
			goto out;
		if (c->retention_age_s > UINT64_MAX / 1000000000u) {
			fail(&e, "\"%s\" is too large", "audit_retention.max_age_s");
			goto out;
		}
	}
	/* Octal permission bits as a string ("0600", "0660"): JSON has no octal numbers. */
	char mode[8] = "";
	if (get_str(root, "ipc_mode", mode, sizeof(mode), &e))
		goto out;
	if (mode[0]) {
		char *end;
		unsigned long m = strtoul(mode, &end, 8);
		if (*end || m > 0777) {
			fail(&e,
			     "\"%s\" must be octal permission bits such as \"0600\" or \"0660\"",
			     "ipc_mode");
			goto out;
		}
		c->ipc_mode = (uint32_t)m;
	}
	if (get_ipc_group(root, c, &e))
		goto out;
	json_t *tls = cfg_get(&e, root, "tls");
	if (tls) {
		static const char *const auth_modes[] = {"default", "none", "optional", "required",
		                                         NULL};
		if (!json_is_object(tls)) {
			fail(&e, "\"%s\" must be an object", "tls");
			goto out;
		}
		if (get_str(tls, "cert_key_file", c->tls.cert_key_file,
		            sizeof(c->tls.cert_key_file), &e) ||
		    get_str(tls, "ca_file", c->tls.ca_file, sizeof(c->tls.ca_file), &e) ||
		    get_enum(tls, "auth_mode", auth_modes, &c->tls.auth_mode, &e))
			goto out;
		if (!c->tls.cert_key_file[0]) {
			fail(&e,
			     "\"%s\" needs cert_key_file (the daemon's certificate and key, PEM)",
			     "tls");
			goto out;
		}
		if (c->tls.auth_mode == GSD_TLS_AUTH_REQUIRED && !c->tls.ca_file[0]) {
			fail(&e, "\"%s\": auth_mode required needs ca_file", "tls");
			goto out;
		}
	}
	if (get_array(root, "adapters", 1, GSD_MAX_ADAPTERS, "adapters", &adapters, &c->nadapters,
	              &e))
		goto out;
	if (adapters) {
		for (uint32_t i = 0; i < c->nadapters; i++) {
			default_adapter(&c->adapters[i], i);
			if (load_adapter(json_array_get(adapters, i), &c->adapters[i], &e))
				goto out;
		}
	}
	if (get_array(root, "tenants", 0, GSD_MAX_TENANTS, "tenants", &tenants, &c->ntenants, &e))
		goto out;
	if (tenants) {
		for (uint32_t i = 0; i < c->ntenants; i++)
			if (load_tenant(json_array_get(tenants, i), &c->tenants[i], &e))
				goto out;
	}
	rc = 0;
	c->unknown_keys = warn_unread(&e, root, "");
out:
	free(e.read);
	json_decref(root);
	return rc;
}

int gsd_config_validate(const gsd_config *c, char *err, size_t errcap)
{
	if (c->max_message < 4096 || c->max_dma_buffer == 0 || c->max_dma_buffer > c->max_message) {
		snprintf(err, errcap, "max_message must be >= 4096 and hold max_dma_buffer (> 0)");
		return -1;
	}
	if (c->quantum_us < 100 || c->tdr_delay_ms == 0 || c->tdr_limit_count == 0 ||
	    c->tdr_limit_count > 15 || c->refresh_hz == 0 || c->refresh_hz > 1000) {
		snprintf(err, errcap,
		         "quantum_us must be >= 100, tdr_delay_ms > 0, "
		         "tdr_limit_count 1..15, refresh_hz 1..1000");
		return -1;
	}
	if (c->paging_chunk < 4096 || c->paging_chunk > (UINT64_C(1) << 30)) {
		snprintf(err, errcap, "paging_chunk must be 4 KiB..1 GiB");
		return -1;
	}
	if (c->max_workers < 128 || c->max_workers > 65536 || c->rpc_workers == 0 ||
	    c->rpc_workers > c->max_workers) {
		snprintf(err, errcap,
		         "max_workers must be 128..65536 and rpc_workers 1..max_workers");
		return -1;
	}
	if (c->max_inflight_requests == 0 || c->max_waits_per_connection == 0 ||
	    c->max_wait_ms == 0 || c->max_connections_per_peer == 0 || c->max_queued_packets == 0 ||
	    c->max_syncs == 0) {
		snprintf(err, errcap,
		         "max_inflight_requests, max_waits_per_connection, max_wait_ms, "
		         "max_connections_per_peer, max_queued_packets and max_syncs must be > 0");
		return -1;
	}
	if (c->max_inflight_bytes < 65536) {
		snprintf(err, errcap, "max_inflight_bytes must be at least 65536 (default 64 MiB)");
		return -1;
	}
	if (c->handshake_timeout_ms < 100 || c->handshake_timeout_ms > 600000 ||
	    c->max_handshakes == 0) {
		snprintf(
		        err, errcap,
		        "handshake_timeout_ms must be 100..600000 (default 5000) and max_handshakes"
		        " > 0 (default 256)");
		return -1;
	}
	/* Each kept event is a few hundred bytes: 2^20 of them is already hundreds of MiB. */
	if (c->events_buffer == 0 || c->events_buffer > (1u << 20)) {
		snprintf(err, errcap, "events_buffer must be 1..1048576 events (default 16384)");
		return -1;
	}
	if (c->unauthenticated_max_message < 1024 ||
	    c->unauthenticated_max_message > c->max_message) {
		snprintf(err, errcap, "unauthenticated_max_message must be 1 KiB..max_message");
		return -1;
	}
	for (uint32_t i = 0; i < c->nadapters; i++) {
		const gsd_adapter_config *a = &c->adapters[i];
		if (strcmp(a->backend, "emu") && strcmp(a->backend, "null") &&
		    strcmp(a->backend, "vulkan")) {
			snprintf(err, errcap,
			         "adapter %s: backend must be \"emu\", \"null\" or \"vulkan\"",
			         a->name);
			return -1;
		}
		if (a->local_memory && strcmp(a->backend, "vulkan") != 0) {
			snprintf(err, errcap,
			         "adapter %s: \"local_memory\" applies to the vulkan backend only",
			         a->name);
			return -1;
		}
		if (c->virtual_clock && strcmp(a->backend, "vulkan") == 0) {
			snprintf(
			        err, errcap,
			        "adapter %s: the virtual clock is the emulator's; a vulkan adapter "
			        "runs on the GPU's own time (use the wall clock)",
			        a->name);
			return -1;
		}
		uint32_t seen = 0;
		for (uint32_t s = 0; s < a->nsegments; s++) {
			const gsd_segment_config *sc = &a->segments[s];
			if (sc->id < 1 || sc->id > 30 || (seen & (1u << sc->id))) {
				snprintf(err, errcap,
				         "adapter %s: segment ids must be unique and in 1..30 (31 "
				         "is system memory)",
				         a->name);
				return -1;
			}
			seen |= 1u << sc->id;
			if (sc->size == 0 || sc->size > (UINT64_C(1) << 40)) {
				snprintf(err, errcap,
				         "adapter %s: segment %u size must be 1 B..1 TiB", a->name,
				         sc->id);
				return -1;
			}
		}
		if (a->system_memory < 1 * MiB || a->system_memory > (UINT64_C(1) << 40)) {
			snprintf(err, errcap, "adapter %s: system_memory must be 1 MiB..1 TiB",
			         a->name);
			return -1;
		}
		bool paging = false;
		for (uint32_t n = 0; n < a->nnodes; n++)
			paging |= a->nodes[n].paging;
		if (!paging) {
			snprintf(err, errcap, "adapter %s: one node must be the paging node",
			         a->name);
			return -1;
		}
	}
	/* Two tenants with one credential: the same token, or the same hash text (a token given
	 * once as token_hash and once in the clear is not found: the hash is salted). Tenants
	 * given by token_hash have no token to compare. */
	for (uint32_t i = 0; i < c->ntenants; i++)
		for (uint32_t j = 0; j < i; j++) {
			const gsd_tenant_config *a = &c->tenants[i], *b = &c->tenants[j];
			bool hashed = a->token_hash[0] || b->token_hash[0];
			if (!strcmp(a->name, b->name) || (!hashed && !strcmp(a->token, b->token)) ||
			    (a->token_hash[0] && !strcmp(a->token_hash, b->token_hash))) {
				snprintf(err, errcap, "tenant names and tokens must be unique (%s)",
				         c->tenants[i].name);
				return -1;
			}
		}
	return 0;
}

/* ---- the effective configuration, as a file would give it ---- */

static const char *const log_levels[] = {"error", "warn", "info", "debug"};
static const char *const auth_mode_names[] = {"default", "none", "optional", "required"};

static json_t *adapter_json(const gsd_adapter_config *a)
{
	json_t *nodes = json_array(), *segs = json_array();
	for (uint32_t i = 0; i < a->nnodes; i++)
		json_array_append_new(nodes, json_pack("{s:s, s:s, s:b}", "name", a->nodes[i].name,
		                                       "kind", node_kinds[a->nodes[i].kind],
		                                       "paging", a->nodes[i].paging));
	for (uint32_t i = 0; i < a->nsegments; i++) {
		const gsd_segment_config *s = &a->segments[i];
		json_array_append_new(
		        segs, json_pack("{s:I, s:s, s:s, s:I, s:b}", "id", (json_int_t)s->id,
		                        "name", s->name, "kind", segment_kinds[s->kind], "size",
		                        (json_int_t)s->size, "cpu_visible", s->cpu_visible));
	}
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:I}", "name", a->name,
	                 "backend", a->backend, "device", a->device, "local_memory",
	                 local_memories[a->local_memory], "policy",
	                 gsd_share_policy_name(a->share_policy), "time_slice_us",
	                 (json_int_t)a->time_slice_us, "nodes", nodes, "segments", segs,
	                 "system_memory", (json_int_t)a->system_memory);
}

/* A tenant's token is never printed: a fresh salted hash of it stands in (it authenticates
 * the same token when the output is used as a file). */
static json_t *tenant_json(const gsd_tenant_config *t)
{
	char hash[160] = "";
	if (t->token_hash[0])
		snprintf(hash, sizeof hash, "%s", t->token_hash);
	else if (t->token[0] && gsd_token_hash_text(t->token, hash, sizeof hash) != 0)
		snprintf(hash, sizeof hash, "(cannot hash)");
	json_t *o = json_pack("{s:s, s:s}", "name", t->name, "kind", tenant_kinds[t->kind]);
	if (hash[0])
		json_object_set_new(o, "token_hash", json_string(hash));
#define GSD_TENANT_SETTING_JSON(f)                                                                 \
	json_object_set_new(o, #f,                                                                 \
	                    _Generic((t->f), bool                                                  \
	                             : json_boolean((bool)(t->f)), default                         \
	                             : json_integer((json_int_t)(t->f))));
	GSD_TENANT_SETTINGS(GSD_TENANT_SETTING_JSON)
#undef GSD_TENANT_SETTING_JSON
	return o;
}

char *gsd_config_dump(const gsd_config *c)
{
	json_t *listen = json_array(), *adapters = json_array(), *tenants = json_array();
	for (uint32_t i = 0; i < c->nlisten; i++) {
		if (!c->listen_ca[i][0] && !c->listen_tenants[i][0]) {
			json_array_append_new(listen, json_string(c->listen[i]));
			continue;
		}
		json_t *l = json_pack("{s:s}", "url", c->listen[i]);
		if (c->listen_ca[i][0])
			json_object_set_new(l, "ca_file", json_string(c->listen_ca[i]));
		if (c->listen_tenants[i][0]) {
			json_t *names = json_array();
			char buf[sizeof c->listen_tenants[i]];
			snprintf(buf, sizeof buf, "%s", c->listen_tenants[i]);
			for (char *save = NULL, *n = strtok_r(buf, ",", &save); n;
			     n = strtok_r(NULL, ",", &save))
				json_array_append_new(names, json_string(n));
			json_object_set_new(l, "tenants", names);
		}
		json_array_append_new(listen, l);
	}
	for (uint32_t i = 0; i < c->nadapters; i++)
		json_array_append_new(adapters, adapter_json(&c->adapters[i]));
	for (uint32_t i = 0; i < c->ntenants; i++)
		json_array_append_new(tenants, tenant_json(&c->tenants[i]));
	char mode[8];
	snprintf(mode, sizeof mode, "0%03o", c->ipc_mode);
	json_t *o = json_pack(
	        "{s:o, s:s, s:I, s:s, s:s, s:s, s:b, s:I, s:{s:I, s:I}, s:s}", "listen", listen,
	        "db", c->db_path, "events_buffer", (json_int_t)c->events_buffer, "metrics",
	        c->metrics_url, "clock", c->virtual_clock ? "virtual" : "wall", "log_level",
	        c->log_level >= 0 && c->log_level <= 3 ? log_levels[c->log_level] : "info",
	        "audit_sync_full", c->audit_sync_full, "wal_limit", (json_int_t)c->wal_limit,
	        "audit_retention", "max_age_s", (json_int_t)c->retention_age_s, "max_packets",
	        (json_int_t)c->retention_packets, "ipc_mode", mode);
	if (c->ipc_group[0])
		json_object_set_new(o, "ipc_group", json_string(c->ipc_group));
	if (c->tls.cert_key_file[0])
		json_object_set_new(o, "tls",
		                    json_pack("{s:s, s:s, s:s}", "cert_key_file",
		                              c->tls.cert_key_file, "ca_file", c->tls.ca_file,
		                              "auth_mode", auth_mode_names[c->tls.auth_mode]));
	static const struct {
		const char *key;
		size_t off;
		bool wide;
	} limits[] = {
#define L32(k) {#k, offsetof(gsd_config, k), false}
#define L64(k)                                                                                     \
	{                                                                                          \
#k, offsetof(gsd_config, k), true                                                  \
	}
	        L64(max_message),
	        L32(max_dma_buffer),
	        L32(max_allocation_list),
	        L32(max_patch_list),
	        L32(max_batch),
	        L32(max_devices),
	        L32(rpc_workers),
	        L32(max_workers),
	        L32(max_inflight_requests),
	        L64(max_inflight_bytes),
	        L32(max_waits_per_connection),
	        L32(max_wait_ms),
	        L32(max_connections),
	        L32(max_connections_per_peer),
	        L32(handshake_timeout_ms),
	        L32(max_handshakes),
	        L32(unauthenticated_max_message),
	        L32(max_bad_tokens_per_second),
	        L32(max_queued_packets),
	        L32(max_syncs),
	        L32(max_kernels),
	        L64(max_kernel_bytes),
	        L32(shutdown_grace_ms),
	        L32(quantum_us),
	        L32(tdr_delay_ms),
	        L32(tdr_limit_count),
	        L32(tdr_limit_time_ms),
	        L32(starvation_ms),
	        L32(refresh_hz),
	        L64(paging_chunk),
#undef L32
#undef L64
	};
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		const char *at = (const char *)c + limits[i].off;
		uint64_t v;
		if (limits[i].wide) {
			memcpy(&v, at, sizeof v);
		} else {
			uint32_t v32;
			memcpy(&v32, at, sizeof v32);
			v = v32;
		}
		json_object_set_new(o, limits[i].key, json_integer((json_int_t)v));
	}
	json_object_set_new(o, "adapters", adapters);
	json_object_set_new(o, "tenants", tenants);
	char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(o);
	return text;
}
