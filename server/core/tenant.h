/*
 * Tenants: the isolated customers of the daemon. A tenant is named by its token on every
 * request; every handle, packet and history row belongs to exactly one tenant.
 */
#ifndef GSD_TENANT_H
#define GSD_TENANT_H

#include "core/config.h"
#include "core/hmap.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gsd_daemon gsd_daemon;

#define GSD_TOKEN_SALT 16
#define GSD_TOKEN_HASH 32

/* The counters kept both for the daemon (gsd_stats) and for each tenant (gsd_tenant.stats),
 * under the names of the StatsResponse fields that show them: requests authenticated and
 * decoded, requests answered with a refusal, and packets by how they ended. */
#define GSD_COUNTERS(X)                                                                            \
	X(requests)                                                                                \
	X(errors)                                                                                  \
	X(packets_submitted)                                                                       \
	X(packets_completed)                                                                       \
	X(packets_faulted)                                                                         \
	X(packets_cancelled)                                                                       \
	X(packets_rejected)
#define GSD_COUNTER_FIELD(name) uint64_t name;

typedef struct gsd_tenant {
	/* As configured or created by an admin (share at least 1); conf.token is wiped: only
	 * the salted hash of the secret stays (keyed BLAKE2b-256, the salt as key). */
	gsd_tenant_config conf;
	uint64_t id; /* made by an admin request: its row in the audit's tenants; 0: configured */
	/* Who it is in the audit file (every tenant column, history, events): its name, or
	 * NAME#ID when an admin made it with the name of a removed tenant, so it never reads
	 * that tenant's records. */
	char audit_name[GSD_NAME_MAX + 24];
	uint64_t created_ns;
	uint8_t token_salt[GSD_TOKEN_SALT];
	uint8_t token_hash[GSD_TOKEN_HASH];
	bool banned;
	bool removed; /* destroyed by an admin: kept so old records can still name it */
	struct gsd_tenant *next_removed; /* in gsd_daemon.removed_tenants */
	uint64_t memory_used;
	uint32_t contexts;
	uint32_t devices;
	uint32_t syncs;          /* sync objects it created (max_syncs) */
	uint32_t kernels;        /* kernels it created (max_kernels) */
	uint64_t kernel_bytes;   /* SPIR-V bytes of those (max_kernel_bytes) */
	uint32_t kernel_builds;  /* KernelCreate requests building on the thread pool now */
	uint32_t reads;          /* history reads waiting or running (rpc/reads.c) */
	uint64_t read_turn;      /* when its last read started (the reader's count) */
	uint32_t allocations;    /* its allocations (conf.allocation_limit) */
	uint64_t rate_window;    /* the second (ns / 1e9) rate_count counts requests of */
	uint32_t rate_count;     /* requests in it (conf.max_requests_per_second) */
	uint32_t queued_packets; /* its packets not yet final (max_queued_packets) */
	/* Refusals (error answers) in the second refusal_window, and whether it floods: it had
	 * more than the daemon lets go at once in this second or the one before (rpc/call.c,
	 * tarpit). tarpitted: its refusals held now to be answered late. */
	uint64_t refusal_window;
	uint32_t refusal_count;
	bool flooding;
	uint32_t tarpitted;
	/* Requests received and not yet answered (max_inflight_requests). Answers leave from the
	 * loop, the audit writer or nng's threads: the one counter touched off the loop. */
	atomic_uint inflight;
	atomic_uint_fast64_t inflight_bytes; /* their encoded bytes (max_inflight_bytes) */
	/* Times of its recent GPU timeouts (TDR), oldest first, for the ban rule. */
	uint64_t tdr_times[16];
	uint32_t ntdr;
	/* What Stats and Info show it of itself (issue 10: a tenant that is not an administrator
	 * sees these, never the daemon-wide figures). Packets are those of its audit records:
	 * its own and the paging packets the memory manager made for its allocations. */
	struct {
		GSD_COUNTERS(GSD_COUNTER_FIELD)
		uint64_t paging_packets, paging_bytes, evictions;
		/* Its packets not yet final, by adapter and node (paging packets included). */
		uint64_t queued[GSD_MAX_ADAPTERS][GSD_MAX_NODES];
	} stats;
	/* A VM tenant's guest processes: guest id -> its audit identity (gsd_tenant_guest_name). */
	gsd_hmap guest_names;
	/* Requests parked (waiting) per guest process of a VM tenant: a relay carries every
	 * guest on one connection, so guests are counted apart (rpc/call.c, park). Values are
	 * counts, not pointers; a guest with none has no entry. */
	gsd_hmap guest_waits;
} gsd_tenant;

/* Adds a tenant described by tc to the daemon's table, keeping only the salted hash of its
 * token. Returns it, or NULL when the table is full, memory is short or tc->token_hash is not
 * a hash. Every tenant, configured or created by an admin, is made here. */
gsd_tenant *gsd_tenant_add(gsd_daemon *d, const gsd_tenant_config *tc);
/* The credential of tc (its token_hash, or a fresh salted hash of its token) becomes t's:
 * 0, or -1 when token_hash does not parse (t unchanged then). */
int gsd_tenant_set_credential(gsd_tenant *t, const gsd_tenant_config *tc);
/* Does t authenticate with the credential tc gives (its token, or the same token_hash)? */
bool gsd_tenant_has_credential(const gsd_tenant *t, const gsd_tenant_config *tc);
/* Frees a tenant (at the daemon's end: records may name it until then). */
void gsd_tenant_free(gsd_tenant *t);
/* The audit identity of one guest process of a VM tenant, "NAME/GUEST" (NAME its audit_name;
 * guest 0, the VM itself, is NAME): every record of the guest's objects and requests carries
 * it, so history, events and waits read back from the file are the guest's own. Made once and
 * kept until the daemon stops (queued records point at it). NULL when memory is short. */
const char *gsd_tenant_guest_name(gsd_tenant *t, uint64_t guest);
/* The text form of a token's salted hash with a new random salt ("b2$SALT$HASH", hex), for
 * the configuration's token_hash; 0, or -1 when cap is too small or libsodium fails. */
int gsd_token_hash_text(const char *token, char *out, size_t cap);
/* The text form of a tenant's salted hash (what gsd_token_hash_parse reads back); 0 or -1. */
int gsd_tenant_hash_text(const gsd_tenant *t, char *out, size_t cap);
/* Parses that text: 0, or -1 when it is not one. */
int gsd_token_hash_parse(const char *text, uint8_t salt[GSD_TOKEN_SALT],
                         uint8_t hash[GSD_TOKEN_HASH]);
/* The audit record of an admin-created tenant as it stands (removed_ns 0: it exists). */
void gsd_tenant_audit(gsd_daemon *d, const gsd_tenant *t, uint64_t removed_ns);

/* Live (not removed) tenants by token (compared in constant time with each tenant's salted
 * hash) or name; NULL when none. */
/* The paravirtual path's limit on a message (MODEL's 128 KiB), a VM tenant's default. */
#define GSD_VM_MAX_MESSAGE 131072u
/* The largest request the tenant may send: its max_message, or the default for its kind, never
 * above the daemon's max_message. */
uint64_t gsd_tenant_max_message(const gsd_daemon *d, const gsd_tenant *t);
/* Its packets not yet final and sync objects at most: its own limit, else the daemon's. */
uint32_t gsd_tenant_packet_limit(const gsd_daemon *d, const gsd_tenant *t);
uint32_t gsd_tenant_sync_limit(const gsd_daemon *d, const gsd_tenant *t);
/* Is token this tenant's secret? */
bool gsd_tenant_token_is(const gsd_tenant *t, const char *token);
gsd_tenant *gsd_tenant_by_token(gsd_daemon *d, const char *token);
gsd_tenant *gsd_tenant_by_name(gsd_daemon *d, const char *name);
/* Was name a removed tenant's (in this run, or recorded in the audit file)? */
bool gsd_tenant_name_used(const gsd_daemon *d, const char *name);
/* Removes a tenant: it can never authenticate again and its slot in the table is free, but it
 * stays in memory (d->removed_tenants) for what still points at it. */
void gsd_tenant_remove(gsd_daemon *d, gsd_tenant *t);

#endif
