/*
 * Daemon configuration: built-in defaults (work with no file), then a JSON file
 * (--config), then command-line flags. See deploy/gpuschedd.example.json for every key.
 */
#ifndef GSD_CONFIG_H
#define GSD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GSD_MAX_LISTEN   8
#define GSD_MAX_ADAPTERS 16
#define GSD_MAX_NODES    8
#define GSD_MAX_TENANTS  64
#define GSD_NAME_MAX     64

typedef struct gsd_node_config {
	char name[GSD_NAME_MAX];
	int kind; /* Gpusched__V1__NodeKind */
	bool paging;
} gsd_node_config;

typedef struct gsd_segment_config {
	uint32_t id; /* 1..31 */
	char name[GSD_NAME_MAX];
	int kind; /* Gpusched__V1__SegmentKind */
	uint64_t size;
	bool cpu_visible;
} gsd_segment_config;

enum { GSD_TLS_AUTH_DEFAULT = 0, GSD_TLS_AUTH_NONE, GSD_TLS_AUTH_OPTIONAL, GSD_TLS_AUTH_REQUIRED };

/* How the tenants of an adapter share each engine (adapters[].policy; docs/concepts.md, Priorities
 * and bands). */
enum {
	GSD_SHARE_WEIGHTED = 0, /* work conserving, in proportion to each tenant's share */
	GSD_SHARE_EQUAL,        /* work conserving, active tenants alike whatever their shares */
	GSD_SHARE_BEST_EFFORT,  /* no per-tenant accounting: every context for itself */
	GSD_SHARE_FIXED,        /* exact fractions per period, idle time left unused */
};

typedef struct gsd_adapter_config {
	char name[GSD_NAME_MAX];
	char backend[16]; /* "emu" | "null" | "vulkan" */
	char device[128]; /* vulkan: "" (first fitting device), an index, or part of a name */
	/* vulkan: 0 ("auto"): memory segments in device memory the CPU maps where there is
	 * enough, else in device memory reached by staging copies; 1 ("device"): always the
	 * latter, as on a GPU without a resizable BAR. */
	int local_memory;
	int share_policy;       /* GSD_SHARE_* */
	uint32_t time_slice_us; /* time slice on its engines; 0: the daemon's quantum_us */
	uint32_t nnodes;
	gsd_node_config nodes[GSD_MAX_NODES];
	uint32_t nsegments;
	gsd_segment_config segments[8];
	uint64_t system_memory; /* bytes of system memory evicted allocations may use */
	bool system_memory_set; /* given in the file (else the backend's default applies) */
} gsd_adapter_config;

/* "weighted", "equal_share"...: the config's name of a GSD_SHARE_* policy. */
const char *gsd_share_policy_name(int policy);

/* The settings of a tenant that an administrator chooses, under the names they have in
 * gsd_tenant_config, in the audit's tenants row (gsd_tenant_rec) and in the wire's Tenant
 * message: copied among the three with this one list, so that none is left behind. */
#define GSD_TENANT_SETTINGS(X)                                                                     \
	X(share)                                                                                   \
	X(priority_ceiling)                                                                        \
	X(memory_quota)                                                                            \
	X(context_limit)                                                                           \
	X(allocation_limit)                                                                        \
	X(max_requests_per_second)                                                                 \
	X(max_message)                                                                             \
	X(packet_limit)                                                                            \
	X(sync_limit)                                                                              \
	X(admin)

typedef struct gsd_tenant_config {
	char name[GSD_NAME_MAX];
	char token[128];      /* the secret as given (wiped once the tenant is made), or */
	char token_hash[128]; /* its salted hash ("b2$SALT$HASH", gpuschedd --hash-token) */
	int kind;             /* Gpusched__V1__TenantKind */
	uint32_t share;
	uint32_t priority_ceiling;
	uint64_t memory_quota;
	uint32_t context_limit;
	uint32_t allocation_limit;        /* allocations at once; 0: no limit */
	uint32_t max_requests_per_second; /* over a one-second window; 0: no limit */
	/* Largest request (and AllocationRead) in bytes; 0: GSD_VM_MAX_MESSAGE for a virtual
	 * machine, the daemon's max_message for a process (gsd_tenant_max_message). */
	uint32_t max_message;
	uint32_t packet_limit; /* packets not yet final; 0: the daemon's max_queued_packets */
	uint32_t sync_limit;   /* sync objects; 0: the daemon's max_syncs */
	bool admin;
} gsd_tenant_config;

typedef struct gsd_config {
	uint32_t nlisten;
	char listen[GSD_MAX_LISTEN][256];
	/* Per listener (a "listen" entry given as an object): the CA its tls+tcp:// clients'
	 * certificates must chain to, instead of tls.ca_file, and the tenants whose tokens are
	 * accepted on it, comma-separated ("" = every tenant). A client certificate from a CA
	 * used only there then authenticates only those tenants. */
	char listen_ca[GSD_MAX_LISTEN][256];
	char listen_tenants[GSD_MAX_LISTEN][512];
	/* Obsolete (it was the PUB socket): ignored with a warning. */
	char events_url[256];
	/* Recent events kept for EventsWait (core/events.c). */
	uint32_t events_buffer;
	char metrics_url[256]; /* Prometheus endpoint: http://HOST:PORT; "" = none */
	/* tls+tcp:// listeners (requests and events): the daemon's certificate and key (one PEM
	 * file), the CA its clients' certificates must chain to, and whether they must show one
	 * (GSD_TLS_AUTH_*: none, optional, required; required when ca_file is set). */
	struct {
		char cert_key_file[256];
		char ca_file[256];
		int auth_mode;
	} tls;
	char db_path[512];
	bool virtual_clock;
	int log_level;
	bool audit_sync_full;
	bool bench_null_audit;     /* gpuschedd --bench-null-audit: benchmarks only */
	bool bench_writer_commits; /* gpuschedd --bench-writer-commits: benchmarks only */
	uint64_t wal_limit;
	/* audit_retention: keep packets younger than max_age_s and at most max_packets of them
	 * (0: no limit); older records leave the file, verification still holds. */
	uint64_t retention_age_s, retention_packets;
	uint64_t max_message;    /* soft limit answered with STATUS_TOO_LARGE */
	uint32_t max_dma_buffer; /* bytes */
	uint32_t max_allocation_list;
	uint32_t max_patch_list;
	uint32_t max_batch;   /* packets per SubmitBatch */
	uint32_t max_devices; /* per tenant */
	uint32_t rpc_workers; /* nng contexts kept receiving */
	/* Limits that keep one tenant or one peer from stalling the others. */
	uint32_t max_workers;              /* nng contexts at most (each holds one request) */
	uint32_t max_inflight_requests;    /* per tenant: received and not yet answered */
	uint64_t max_inflight_bytes;       /* per tenant: bytes of those requests */
	uint32_t max_waits_per_connection; /* requests waiting for an event, per connection */
	uint32_t max_wait_ms;              /* the longest any request waits */
	uint32_t max_connections;          /* 0 = the open-file limit less a reserve */
	uint32_t max_connections_per_peer; /* per IP address (tcp) or user id (ipc) */
	/* tcp:// and tls+tcp:// connections not past their handshake (rpc/gate.c): each must
	 * finish it within handshake_timeout_ms; at most max_handshakes at once in all. */
	uint32_t handshake_timeout_ms;
	uint32_t max_handshakes;
	uint32_t unauthenticated_max_message; /* bytes, until a connection authenticates */
	uint32_t ipc_mode; /* permissions of ipc:// sockets (requests and events); 0600 */
	/* The group ipc:// sockets are given (ipc_group: a name or a gid, as written, and the gid
	 * it names; -1: none, the socket keeps the group it is made with). */
	char ipc_group[64];
	int64_t ipc_gid;
	uint32_t max_bad_tokens_per_second; /* per connection; more close it */
	uint32_t max_queued_packets;        /* per tenant: packets not yet final */
	uint32_t max_syncs;                 /* per tenant: sync objects */
	uint32_t max_kernels;               /* per tenant: kernels (KernelCreate) */
	uint64_t max_kernel_bytes;          /* per tenant: SPIR-V bytes of its kernels */
	uint32_t shutdown_grace_ms;
	/* Scheduler (docs/concepts.md: priorities, preemption, TDR). */
	uint32_t quantum_us;        /* time slice inside a band, engine time */
	uint32_t tdr_delay_ms;      /* a preemption not honoured this long resets the engine */
	uint32_t tdr_limit_count;   /* more timeouts than this ... */
	uint32_t tdr_limit_time_ms; /* ... within this window ban the tenant */
	uint32_t starvation_ms;     /* a ready context (not IDLE) waiting this long runs next */
	uint32_t refresh_hz;        /* emulated display: vertical blanks per second */
	uint64_t paging_chunk;      /* bytes per sub-transfer of a paging transfer */
	uint32_t nadapters;
	gsd_adapter_config adapters[GSD_MAX_ADAPTERS];
	uint32_t ntenants;
	gsd_tenant_config tenants[GSD_MAX_TENANTS];
	uint32_t unknown_keys; /* keys of the file nothing reads (warned of; --check-config: errors)
	                        */
} gsd_config;

/* Fills the built-in defaults: one emulated adapter with a 3D, a compute and a copy (paging)
 * node, a 256 MiB memory segment (id 1) and a 1 GiB aperture segment (id 2); an ipc:// socket
 * in the runtime directory and gpusched-audit.db in the working directory. */
void gsd_config_defaults(gsd_config *c);

/* Loads a JSON file over the current values. Returns 0, or -1 with err filled. */
int gsd_config_load(gsd_config *c, const char *path, char *err, size_t errcap);

/* Checks cross-field rules (segment ids unique and 1..30 (31 is system memory's), a paging node,
 * sizes > 0). */
/* Appends an adapter with the default nodes and segments and backend vulkan, named gpuN
 * (gpuschedd --with-vulkan). 0, or -1 with why in err. */
int gsd_config_add_vulkan(gsd_config *c, char *err, size_t cap);
/* Defaults that depend on an adapter's backend (vulkan: 1 GiB of system memory unless set);
 * called once the file and the command line have chosen the backends. */
void gsd_config_backend_defaults(gsd_config *c);
int gsd_config_validate(const gsd_config *c, char *err, size_t errcap);
/* The effective configuration as JSON text a file could give (malloc'd; NULL without memory):
 * every key with its value, defaults included; tenants' tokens as salted hashes (token_hash),
 * never in the clear. gpuschedd --check-config prints it. */
char *gsd_config_dump(const gsd_config *c);

#endif
