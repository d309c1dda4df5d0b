/*
 * libgpusched: the C client library of the gpusched daemon.
 *
 * Every function talks to the daemon with one request and one response over nng REQ/REP
 * (proto/gpusched.proto is the wire contract). The blocking calls wait until the answer
 * arrives or the call's timeout expires; the asynchronous calls (gs_async_*, "Asynchronous
 * calls" below) keep many requests in flight over the same connection, each on its own nng
 * context, and deliver each answer through a callback or a completion queue. The blocking
 * calls are thin wrappers over the same path: start one request, wait for its completion.
 *
 * Threads: a gs_client is one REQ socket (one connection to the daemon). Its blocking calls
 * must not be made from several threads at once (gs_client_message() describes the last
 * one); open one gs_client per thread for that (each is cheap). The gs_async_* calls and
 * gs_async_cancel() may be made from any thread, also while a blocking call runs on the
 * same client.
 *
 * Status: every call returns an int.
 *   0              success
 *   > 0            the daemon's answer: a gs_status value (gs_client_message() has its words)
 *   < 0            a local failure: GS_ERR_* below
 * gs_strerror() and gs_status_name() describe any of them.
 *
 * Memory: output strings and arrays are malloc'd by the library; each has a matching free
 * function. Input pointers are only read during the call.
 *
 * WDDM values (submit flags, context caps and flags, allocation priorities, segment
 * preferences) use the names and helpers of wddm.h, included here.
 */
#ifndef GPUSCHED_H
#define GPUSCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wddm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Status codes                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* Local failures (negative). */
#define GS_ERR_TRANSPORT (-1) /* cannot connect, or the connection failed */
#define GS_ERR_TIMEOUT   (-2) /* no response within the call's timeout */
#define GS_ERR_PROTOCOL  (-3) /* the response does not decode or does not match the request */
#define GS_ERR_NOMEM     (-4) /* out of memory in this process */
#define GS_ERR_INVALID   (-5) /* a bad argument, caught before sending */
#define GS_ERR_CANCELLED (-6) /* gs_async_cancel(), or gs_close() with the request in flight */
#define GS_ERR_BUSY      (-7) /* the client has GS_ASYNC_MAX_INFLIGHT requests in flight */

/* The daemon's status codes: the exact values of gpusched.v1.Status. */
typedef enum gs_status {
	GS_STATUS_OK = 0,
	GS_STATUS_MALFORMED = 1,
	GS_STATUS_TOO_LARGE = 2,
	GS_STATUS_INVALID_ARGUMENT = 3,
	GS_STATUS_NOT_FOUND = 4,
	GS_STATUS_RESERVED_BITS = 5,
	GS_STATUS_FLAGS_NOT_ALLOWED = 6,
	GS_STATUS_UNAUTHENTICATED = 7,
	GS_STATUS_PERMISSION_DENIED = 8,
	GS_STATUS_QUOTA_EXCEEDED = 9,
	GS_STATUS_OUT_OF_MEMORY = 10,
	GS_STATUS_TIMEOUT = 11,
	GS_STATUS_FAULTED = 12,
	GS_STATUS_BANNED = 13,
	GS_STATUS_BUSY = 14,
	GS_STATUS_SHUTTING_DOWN = 15,
	GS_STATUS_UNIMPLEMENTED = 16,
	GS_STATUS_INTERNAL = 17,
	GS_STATUS_CTX_DMA_SEGMENT_NOT_APERTURE = 20,
	GS_STATUS_CTX_GDI_ALLOCATION_LIST = 21,
	GS_STATUS_CTX_RESERVED_NONZERO = 22,
	GS_STATUS_CTX_BAD_NODE = 23,
	GS_STATUS_CTX_BAD_PAGING_NODE = 24,
	GS_STATUS_CTX_DMA_SEGMENT_UNKNOWN = 25,
	GS_STATUS_CTX_BAD_SIZE = 26,
	GS_STATUS_CTX_BAD_FLAGS = 27,
	GS_STATUS_DMA_INVALID = 30,
	GS_STATUS_PATCH_INVALID = 31,
	GS_STATUS_LIST_TOO_LARGE = 32,
	GS_STATUS_SEGMENT_PREFERENCE = 40,
	GS_STATUS_SEGMENT_UNKNOWN = 41,
	GS_STATUS_ALLOCATION_PRIORITY = 42,
	GS_STATUS_TRANSFER_FLAGS = 43,        /* transfer flags contradict the move */
	GS_STATUS_NOT_RESIDENT_TOGETHER = 44, /* the allocations cannot all be resident at once */
	GS_STATUS_AUDIT_UNAVAILABLE = 45,     /* nothing was recorded or run: safe to retry */
	GS_STATUS_UNAVAILABLE = 46,           /* gpusched-relay cannot reach the host daemon now */
} gs_status;

/* Short name of a status or local error: "NOT_FOUND", "TRANSPORT"; "STATUS_<n>" if unknown. */
const char *gs_status_name(int status);
/* One readable sentence fragment: "unknown handle (or one owned by another tenant)". */
const char *gs_strerror(int status);

/* ---------------------------------------------------------------------------------------- */
/* Enumerations of the contract, with names                                                  */
/* ---------------------------------------------------------------------------------------- */

typedef enum gs_packet_state {
	GS_PACKET_UNKNOWN = 0,
	GS_PACKET_SUBMITTED = 1,
	GS_PACKET_READY = 2,
	GS_PACKET_RUNNING = 3,
	GS_PACKET_COMPLETED = 4,
	GS_PACKET_FAULTED = 5,
	GS_PACKET_ABORTED = 6,
	GS_PACKET_PREEMPTED = 7,
	GS_PACKET_RESUBMITTED = 8,
	GS_PACKET_CANCELLED = 9,
	GS_PACKET_REJECTED = 10,
} gs_packet_state;

/* "COMPLETED"; "UNKNOWN" for values outside the enum. */
const char *gs_packet_state_name(gs_packet_state state);
/* Case-insensitive name ("completed", "COMPLETED") -> state. 0 or GS_ERR_INVALID. */
int gs_packet_state_parse(const char *name, gs_packet_state *out);
/* True for states a packet never leaves: COMPLETED, FAULTED, CANCELLED, REJECTED. */
bool gs_packet_state_is_final(gs_packet_state state);

/* A time as a user writes it -> CLOCK_REALTIME ns (the audit's clock): "now"; a duration back
 * from now_ns ("90s", "10m", "2h", "1d"; units ns us ms s m h d); "@SECONDS" since the epoch;
 * or ISO 8601 "2026-11-24T09:30[:00[.250]]" in local time, with "Z" or "+01:00" for UTC or an
 * offset ("T" may be a space). 0 or GS_ERR_INVALID. */
int gs_time_parse(const char *s, uint64_t now_ns, uint64_t *out);

typedef enum gs_node_kind {
	GS_NODE_3D = 0,
	GS_NODE_COMPUTE = 1,
	GS_NODE_COPY = 2,
} gs_node_kind;
const char *gs_node_kind_name(gs_node_kind kind); /* "3D", "COMPUTE", "COPY" */

typedef enum gs_segment_kind {
	GS_SEGMENT_MEMORY = 0,   /* holds its own pages (VRAM) */
	GS_SEGMENT_APERTURE = 1, /* maps system pages; may hold DMA buffers */
} gs_segment_kind;
const char *gs_segment_kind_name(gs_segment_kind kind); /* "MEMORY", "APERTURE" */

typedef enum gs_tenant_kind {
	GS_TENANT_PROCESS = 0,
	GS_TENANT_VM = 1,
} gs_tenant_kind;
const char *gs_tenant_kind_name(gs_tenant_kind kind); /* "PROCESS", "VM" */

/* How the tenants of an adapter share each of its engines (gs_adapter_info.share_policy). */
typedef enum gs_share_policy {
	GS_SHARE_BEST_EFFORT = 0, /* no per-tenant accounting: every context for itself */
	GS_SHARE_EQUAL_SHARE = 1, /* work conserving; active tenants alike, whatever their shares */
	GS_SHARE_FIXED_SHARE = 2, /* each tenant exactly its fraction; an idle one's time unused */
	GS_SHARE_WEIGHTED = 3,    /* work conserving, in proportion to each tenant's share */
} gs_share_policy;
const char *gs_share_policy_name(gs_share_policy policy); /* "BEST_EFFORT", ... */

/* What the memory manager did to an allocation (gs_move.kind). */
typedef enum gs_move_kind {
	GS_MOVE_UNKNOWN = 0,
	GS_MOVE_PLACE = 1,         /* placed at creation (no bytes moved) */
	GS_MOVE_PAGE_IN = 2,       /* brought into video memory for a packet or make-resident */
	GS_MOVE_EVICT = 3,         /* moved out to make room (to an aperture or system memory) */
	GS_MOVE_TRANSFER = 4,      /* explicit gs_transfer */
	GS_MOVE_EVICT_REQUEST = 5, /* explicit gs_evict */
	GS_MOVE_RESIDENT = 6,      /* make-resident found it resident already (no bytes moved) */
	GS_MOVE_FREE = 7,          /* destroyed: its range was freed */
	GS_MOVE_COMPACT = 8,       /* slid within its segment to open a hole (compaction) */
} gs_move_kind;
/* "PLACE", "PAGE_IN", "EVICT", "TRANSFER", "EVICT_REQUEST", "RESIDENT", "FREE", "COMPACT";
 * "UNKNOWN" for values outside the enum. */
const char *gs_move_kind_name(gs_move_kind kind);

/* ---------------------------------------------------------------------------------------- */
/* Connection                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct gs_client gs_client;

#define GS_DEFAULT_TIMEOUT_MS 30000u
#define GS_MAX_RESPONSE_SIZE  (64u << 20)

/*
 * Writes the default daemon URL into buf: $GPUSCHED_URL, else
 * ipc://$XDG_RUNTIME_DIR/gpusched/gpusched.sock, else ipc:///tmp/gpusched-$UID/gpusched.sock.
 * Returns 0, or -1 if it does not fit in cap bytes. (The daemon uses the same rule.)
 */
int gs_default_url(char *buf, size_t cap);

/*
 * Connects to the daemon. url NULL or "" = gs_default_url(); token NULL = $GPUSCHED_TOKEN
 * (unset = empty: the daemon's default tenant). On success *out is a new client whose current
 * adapter is 0. Returns 0, GS_ERR_TRANSPORT, GS_ERR_NOMEM or GS_ERR_INVALID.
 * A tls+tcp://HOST:PORT URL verifies the daemon's certificate against the CA file named by
 * $GPUSCHED_TLS_CA (required) and, when HOST is a DNS name, for HOST (a DNS subjectAltName);
 * $GPUSCHED_TLS_SERVER_NAME names the expected name instead (the way to check a daemon reached
 * by IP address: the TLS library matches DNS names only). It presents $GPUSCHED_TLS_CERT_KEY
 * (certificate and key, one PEM file) when set.
 * gs_connect_ex also writes why a connection failed into `why` (why_cap bytes; may be NULL).
 * A URL that is a list (commas or white space, as $GPUSCHED_URL may be for several hosts) is
 * GS_ERR_INVALID: gs_hosts_connect takes several.
 */
int gs_connect(const char *url, const char *token, gs_client **out);
int gs_connect_ex(const char *url, const char *token, gs_client **out, char *why, size_t why_cap);

/*
 * gs_connect_ex with everything it reads from the environment given explicitly (a program
 * that talks to several daemons, or a language binding, should not set process-wide
 * variables). Zero-initialise it and set `size` to sizeof(gs_connect_options): fields may be
 * added at its end, and the library reads only the first `size` bytes (a smaller size than
 * the library knows is valid; 0 or NULL options are GS_ERR_INVALID).
 * Every NULL string, and every 0, means what gs_connect_ex would use. The tls_ fields are
 * read for tls+tcp:// URLs only (gs_connect_ex says what each does).
 */
typedef struct gs_connect_options {
	size_t size;
	const char *url;          /* NULL or "": gs_default_url() */
	const char *token;        /* NULL: $GPUSCHED_TOKEN */
	const char *tls_ca;       /* the CA file; NULL: $GPUSCHED_TLS_CA */
	const char *tls_cert_key; /* certificate and key, one PEM; NULL: $GPUSCHED_TLS_CERT_KEY */
	const char *tls_server_name; /* NULL: $GPUSCHED_TLS_SERVER_NAME, else the URL's host */
	uint32_t timeout_ms; /* 0: GS_DEFAULT_TIMEOUT_MS (gs_client_set_timeout); it also bounds
	                      * connecting: no connection by then is GS_ERR_TIMEOUT */
	uint32_t adapter;    /* the current adapter (gs_client_set_adapter) */
} gs_connect_options;

int gs_connect_with(const gs_connect_options *opts, gs_client **out, char *why, size_t why_cap);
/* Cancels the client's requests in flight and waits until each has completed
 * (GS_ERR_CANCELLED, unless another outcome came first): every callback has returned and every
 * event is in its queue when gs_close returns. Then it closes the connection. Not from one of
 * the client's own callbacks, nor while another thread is inside a call on it. */
void gs_close(gs_client *c);

/* A NULL client (what a failed connect leaves in *out) is safe to pass: every call answers
 * GS_ERR_INVALID, setters do nothing, getters give defaults. */

/* The adapter every later request addresses (InfoResponse adapter ids). */
void gs_client_set_adapter(gs_client *c, uint32_t adapter);
uint32_t gs_client_adapter(const gs_client *c);

/* Base timeout of each call in ms (default GS_DEFAULT_TIMEOUT_MS, 0 = the default). Calls
 * that wait in the daemon (packet_wait, sync_wait) add their own wait timeout to it. */
void gs_client_set_timeout(gs_client *c, uint32_t timeout_ms);
/* Bytes per request of gs_allocation_read/_write (default GS_IO_PIECE); 0 sends each transfer
 * as one request, whatever its size (the daemon refuses one above its limit as TOO_LARGE). */
void gs_client_set_io_piece(gs_client *c, size_t bytes);

/* The daemon's message of the last response (empty on success), or a description of the
 * last local failure. Valid until the next call on c. */
const char *gs_client_message(const gs_client *c);
/* The URL the client connected to. */
const char *gs_client_url(const gs_client *c);

/* ---------------------------------------------------------------------------------------- */
/* Adapter information                                                                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct gs_node_info {
	uint32_t id; /* zero-based node ordinal */
	char *name;
	gs_node_kind kind;
	uint32_t engines;
	bool paging;    /* the default paging companion */
	uint64_t fence; /* administrators: the node's last completed submission fence (opaque);
	                   tenants: 0 */
	uint64_t queued;
} gs_node_info;

typedef struct gs_segment_info {
	uint32_t id; /* 1..31 */
	char *name;
	gs_segment_kind kind;
	uint64_t size;
	uint64_t used;
	uint64_t largest_free;
	bool cpu_visible;
} gs_segment_info;

#define GS_ADAPTER_CAP_PREEMPTION    0x1u
#define GS_ADAPTER_CAP_VIRTUAL_CLOCK 0x2u

typedef struct gs_adapter_info {
	uint32_t id;
	char *name;
	char *backend;   /* "emu", "null" or "vulkan" */
	char *clock;     /* "wall" or "virtual" */
	char *device;    /* "emulated", or the GPU's name */
	char *driver;    /* its driver and version ("" for the emulator) */
	char *api;       /* "Vulkan 1.3.230" ("" for the emulator) */
	uint32_t queues; /* hardware queues the nodes share; 0: each node its own engine */
	uint64_t preempt_granularity_ns; /* longest run after a preemption request; 0: next
	                                  * command boundary */
	char *cpu_access; /* "mapped", or "staging": copies through a staging buffer ("" emu) */
	uint32_t device_losses; /* device losses since start (each recovered unless dead) */
	bool device_dead;       /* lost and not recreated: every packet is cancelled */
	bool device_retrying;   /* dead for now: back once a dispatch that did not stop ends */
	gs_share_policy share_policy; /* how tenants share its engines */
	uint32_t time_slice_us;       /* how long a tenant's turn on an engine lasts */
	size_t node_count;
	gs_node_info *nodes;
	size_t segment_count;
	gs_segment_info *segments;
	uint32_t caps; /* GS_ADAPTER_CAP_* */
	uint32_t max_dma_buffer;
	uint32_t max_allocation_list;
	uint32_t max_patch_list;
	uint64_t system_memory;      /* bytes of the pool allocations are evicted to */
	uint64_t system_memory_used; /* bytes of it in use */
	uint64_t paging_chunk;       /* bytes per sub-transfer of a paging transfer */
	/* Users' kernels (gs_kernel_create): whether the adapter runs them, and the limits a
	 * kernel and a DISPATCH must fit (0 where kernels is false). */
	bool kernels;
	uint32_t max_local_size[3];
	uint32_t max_invocations;
	uint32_t max_push_constant_bytes;
	uint64_t max_storage_buffer_range;
	uint64_t max_uniform_buffer_range;
	uint32_t binding_offset_alignment;
} gs_adapter_info;

typedef struct gs_daemon_info {
	char *version;
	char *tenant;     /* the tenant this client's token authenticated as */
	char *events_url; /* where the daemon publishes events; "" = nowhere */
	size_t adapter_count;
	gs_adapter_info *adapters;
	/* The tenant is not an administrator: each node's queued, each segment's used and the
	 * system memory used are its own share; each node's fence and largest_free are 0
	 * (issue 10; its fences are its contexts': gs_context_query). */
	bool tenant_view;
} gs_daemon_info;

/* *out is malloc'd; release it with gs_info_free. */
int gs_info(gs_client *c, gs_daemon_info **out);
void gs_info_free(gs_daemon_info *info);

/* ---------------------------------------------------------------------------------------- */
/* Devices and contexts                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* name: free text for history and logs (NULL = ""). */
int gs_device_create(gs_client *c, const char *name, uint64_t *device);
/* Also destroys the device's contexts (their queued packets are cancelled), allocations and
 * sync objects. */
int gs_device_destroy(gs_client *c, uint64_t device);

/* gs_context_info (DXGK_CONTEXTINFO) is declared in wddm.h. */

/* Sane defaults: DMA buffer 64 KiB in system memory, no private data, lists of 64 entries,
 * no caps, paging companion node 0 (override it with the adapter's paging node). */
void gs_context_info_default(gs_context_info *info);

typedef struct gs_context_desc {
	uint64_t device;
	uint32_t node;           /* zero-based node ordinal */
	uint32_t flags;          /* GS_CTX_* create flags of wddm.h */
	uint32_t priority_class; /* 0..5 = IDLE..REALTIME */
	int32_t priority;        /* -7..+7 within the class */
	gs_context_info info;
} gs_context_desc;

/* Defaults for a context of `device` on `node`: no flags, class NORMAL (2), priority 0,
 * gs_context_info_default(). */
void gs_context_desc_init(gs_context_desc *desc, uint64_t device, uint32_t node);

/* effective (may be NULL) receives the values the daemon uses. */
int gs_context_create(gs_client *c, const gs_context_desc *desc, uint64_t *context,
                      gs_context_info *effective);
/* Queued packets of the context become CANCELLED. */
int gs_context_destroy(gs_client *c, uint64_t context);
int gs_context_set_priority(gs_client *c, uint64_t context, uint32_t priority_class,
                            int32_t priority);

/* ---------------------------------------------------------------------------------------- */
/* Maintenance (administrators)                                                              */
/* ---------------------------------------------------------------------------------------- */

typedef struct gs_drain_report {
	uint64_t packets_at_start;  /* not yet final when the drain began */
	uint64_t packets_finished;  /* ended during the drain */
	uint64_t packets_cancelled; /* cancelled at the timeout */
	uint64_t packets_running;   /* on an engine at the timeout: given the shutdown grace */
	uint32_t waited_ms;
	bool timed_out;
} gs_drain_report;

/* Drains the daemon for maintenance: no new devices or contexts (UNAVAILABLE), the work of
 * the existing ones goes on; answered once no packet is left, or at timeout_ms (0: 60000)
 * when the queued ones are cancelled; then the daemon stops and exits 0. Waits up to the
 * client's timeout plus timeout_ms. GS_STATUS_BUSY while another drain runs. */
int gs_admin_drain(gs_client *c, uint32_t timeout_ms, gs_drain_report *out);

typedef struct gs_admin_status {
	char state[16]; /* "serving", "draining" or "stopping" */
	char version[32];
	uint64_t uptime_ns;
	uint32_t tenants;
	uint64_t packets_in_flight; /* every tenant's */
	uint32_t drain_left_ms;     /* draining: until the drain's timeout */
	uint64_t drain_packets_at_start;
} gs_admin_status;
int gs_admin_status_get(gs_client *c, gs_admin_status *out);
/* Makes the daemon read its --config file again (as SIGHUP does) and apply what changed:
 * *changes (may be NULL) counts them, report (may be NULL) says what they were. A file that
 * does not load, or changes what only a restart can, is refused whole: GS_STATUS_INVALID_ARGUMENT
 * with the reason in gs_client_message. */
int gs_admin_reload(gs_client *c, uint32_t *changes, char *report, size_t cap);

/* A context's fences (docs/wddm.md, Fences): its n-th accepted packet has fence n, and its
 * packets end in fence order, so a packet with fence <= completed_fence has ended. */
typedef struct gs_context_status {
	uint64_t context;
	uint32_t node;
	uint64_t submitted_fence; /* its latest accepted packet's (0: none yet) */
	uint64_t completed_fence; /* every packet with a fence up to this one has ended */
	uint32_t queued;          /* packets not yet ended */
	bool faulted;             /* in an error state: new submissions are refused */
	uint32_t priority_class;
	int32_t priority;
} gs_context_status;
int gs_context_query(gs_client *c, uint64_t context, gs_context_status *out);

/* ---------------------------------------------------------------------------------------- */
/* Allocations                                                                               */
/* ---------------------------------------------------------------------------------------- */

typedef struct gs_allocation_desc {
	uint64_t device;
	uint64_t size;                  /* bytes, > 0 */
	uint32_t supported_segment_set; /* bit (id) per segment; 0 = every segment */
	uint32_t segment_preference;    /* D3DDDI_SEGMENTPREFERENCE Value (gs_segpref_encode) */
	uint32_t priority;              /* 0 = NORMAL */
	uint32_t flags;                 /* GS_ALLOC_* of wddm.h */
} gs_allocation_desc;

typedef struct gs_allocation_placement {
	uint64_t allocation; /* the handle */
	uint32_t segment;
	uint64_t offset;
	uint64_t address; /* GPU address as patched into DMA buffers */
} gs_allocation_placement;

typedef struct gs_allocation_status {
	uint64_t allocation;
	uint64_t device;
	uint64_t size;
	uint32_t supported_segment_set;
	uint32_t segment_preference;
	uint32_t priority;
	uint32_t flags;
	bool resident;
	uint32_t segment;
	uint64_t offset;
	uint64_t address;
	uint64_t busy_packets; /* packets in flight that reference it (render and paging) */
	uint32_t pinned;       /* packets running or about to run that hold it in place */
	uint64_t moves;        /* times the memory manager moved it since creation */
	bool moving;           /* a paging transfer of it is queued or running */
	uint64_t last_used_ns; /* when a packet last referenced it (daemon clock; 0 = never) */
} gs_allocation_status;

int gs_allocation_create(gs_client *c, const gs_allocation_desc *desc,
                         gs_allocation_placement *out);
int gs_allocation_destroy(gs_client *c, uint64_t allocation);
int gs_allocation_query(gs_client *c, uint64_t allocation, gs_allocation_status *out);
/*
 * The tenant's allocations on the client's adapter, lowest handle first (handles are random:
 * not the order they were made in). device 0 = every device; resident_only: only those
 * resident in a segment now; limit 0 = 1000 (at most 100000); after: only handles greater than
 * this (0 = from the start; pass the last handle of one call to the next to page through a
 * long list; one made meanwhile may fall before the cursor).
 * *out is malloc'd (NULL when *count is 0); release it with gs_allocation_list_free.
 */
int gs_allocation_list(gs_client *c, uint64_t device, bool resident_only, uint32_t limit,
                       uint64_t after, gs_allocation_status **out, size_t *count);
void gs_allocation_list_free(gs_allocation_status *allocations);
int gs_allocation_set_priority(gs_client *c, uint64_t allocation, uint32_t priority);
/* Takes effect at the allocation's next placement. */
int gs_allocation_set_preference(gs_client *c, uint64_t allocation, uint32_t segment_preference);
/* Bytes per request of gs_allocation_read/_write: larger transfers go in pieces of this size,
 * so they fit the 128 KiB message limit of a virtual machine's path (gpusched-relay). A
 * transfer in pieces is not atomic against another client writing the same bytes. */
#define GS_IO_PIECE (120u * 1024u)
/* Reads exactly `size` bytes at `offset` into buf. The daemon answers once every packet
 * already submitted that references the allocation has finished. */
int gs_allocation_read(gs_client *c, uint64_t allocation, uint64_t offset, void *buf, size_t size);
int gs_allocation_write(gs_client *c, uint64_t allocation, uint64_t offset, const void *data,
                        size_t size);

/* ---------------------------------------------------------------------------------------- */
/* DMA-buffer builder                                                                        */
/* ---------------------------------------------------------------------------------------- */

/* One entry of the allocation list (D3DDDI_ALLOCATIONLIST). */
typedef struct gs_dmabuf_alloc {
	uint64_t allocation;
	bool write; /* some command writes it */
} gs_dmabuf_alloc;

/* One patch location (D3DDDI_PATCHLOCATIONLIST). */
typedef struct gs_dmabuf_patch {
	uint32_t allocation_index; /* into the buffer's allocation list */
	uint32_t slot_id;          /* the patch's ordinal in this buffer */
	uint32_t patch_offset;     /* byte offset of the 8-byte address field */
	uint64_t allocation_offset;
} gs_dmabuf_patch;

/*
 * A DMA buffer under construction: commands (proto/isa.h encoding) with zeroed address fields,
 * plus the allocation list and the patch locations the daemon needs to fill them in.
 * The fields are public so that callers (and tests) can inspect, or deliberately corrupt,
 * what gets submitted; the builder functions keep them consistent.
 */
typedef struct gs_dmabuf {
	uint8_t *data;
	size_t len;
	size_t cap;
	gs_dmabuf_alloc *allocs;
	size_t alloc_count;
	size_t alloc_cap;
	gs_dmabuf_patch *patches;
	size_t patch_count;
	size_t patch_cap;
	struct gs_dmabuf_wait_entry *waits; /* GPU waits sent with the packet */
	size_t wait_count;
	size_t wait_cap;
} gs_dmabuf;

/* A GPU wait: the packet runs once the sync object reaches value. */
typedef struct gs_dmabuf_wait_entry {
	uint64_t sync;
	uint64_t value;
} gs_dmabuf_wait_entry;

void gs_dmabuf_init(gs_dmabuf *buf);
void gs_dmabuf_free(gs_dmabuf *buf);
/* Empties the buffer but keeps its memory for the next packet. */
void gs_dmabuf_reset(gs_dmabuf *buf);

/*
 * Append one command. Each returns 0, GS_ERR_NOMEM or GS_ERR_INVALID (handle 0, or the buffer
 * would outgrow 32-bit patch offsets); on failure the buffer is unchanged.
 * Allocation handles are those of gs_allocation_create; offsets are bytes inside them.
 */
int gs_dmabuf_nop(gs_dmabuf *buf);
/* Writes the 32-bit pattern repeatedly over size bytes. */
int gs_dmabuf_fill(gs_dmabuf *buf, uint64_t allocation, uint64_t offset, uint64_t size,
                   uint32_t pattern);
/* memmove semantics. */
int gs_dmabuf_copy(gs_dmabuf *buf, uint64_t dst_allocation, uint64_t dst_offset,
                   uint64_t src_allocation, uint64_t src_offset, uint64_t size);
/* Writes the 8-byte little-endian XXH64 (seed 0) of the source bytes at the destination. */
int gs_dmabuf_checksum(gs_dmabuf *buf, uint64_t dst_allocation, uint64_t dst_offset,
                       uint64_t src_allocation, uint64_t src_offset, uint64_t size);
/* flags: GS_DMABUF_SPIN_NONPREEMPTIBLE (the engine cannot stop inside it), or 0. */
#define GS_DMABUF_SPIN_NONPREEMPTIBLE 0x1u
int gs_dmabuf_spin(gs_dmabuf *buf, uint64_t micros, uint8_t flags);
/* Signals the sync object to `value` when the engine reaches this command. */
int gs_dmabuf_signal(gs_dmabuf *buf, uint64_t sync, uint64_t value);
/* Holds this packet (and every later packet of its context) until the sync object reaches
 * value: a GPU wait, satisfied by a SIGNAL on any context or node, or by the CPU. If the packet
 * that would signal it faults or is cancelled, the waiting packet is cancelled with a reason. */
int gs_dmabuf_wait(gs_dmabuf *buf, uint64_t sync, uint64_t value);

/* One binding of a DISPATCH: a range of an allocation for binding number `binding` of the
 * kernel's descriptor set 0. The allocation joins the buffer's allocation list (marked write
 * when `write`: it must be where the kernel writes the binding). */
typedef struct gs_dmabuf_binding {
	uint32_t binding;
	uint64_t allocation;
	uint64_t offset; /* a multiple of the adapter's binding_offset_alignment */
	uint64_t range;  /* bytes the kernel sees (> 0); beyond them it reads 0, writes nothing */
	bool write;
} gs_dmabuf_binding;

/* Runs a kernel (gs_kernel_create) over groups[0] x groups[1] x groups[2] work groups, with
 * one binding per buffer the kernel declares (at most 16) and exactly the push-constant bytes
 * it declares (a multiple of 4, at most 128). GS_ERR_INVALID for kernel 0, a zero range or
 * allocation, or counts out of range; the daemon checks the rest against the kernel. */
int gs_dmabuf_dispatch(gs_dmabuf *buf, uint64_t kernel, const uint32_t groups[3],
                       const gs_dmabuf_binding *bindings, size_t nbindings, const void *push,
                       size_t push_size);

/* ---------------------------------------------------------------------------------------- */
/* Users' kernels (docs/kernels.md)                                                          */
/* ---------------------------------------------------------------------------------------- */

#define GS_KERNEL_MAX_BINDINGS   16
#define GS_KERNEL_STORAGE_BUFFER 1
#define GS_KERNEL_UNIFORM_BUFFER 2

typedef struct gs_kernel_binding_info {
	uint32_t binding;
	uint32_t kind; /* GS_KERNEL_STORAGE_BUFFER or GS_KERNEL_UNIFORM_BUFFER */
	bool writes;   /* bind it to an allocation the packet writes */
	char name[48];
} gs_kernel_binding_info;

typedef struct gs_kernel_info {
	uint64_t kernel; /* handle */
	uint64_t device;
	uint8_t hash[32]; /* BLAKE2b-256 of the entry point's name, a NUL, and the module */
	char entry_point[64];
	uint32_t local_size[3];
	uint32_t push_constant_bytes;
	uint32_t nbindings;
	gs_kernel_binding_info bindings[GS_KERNEL_MAX_BINDINGS];
	uint64_t spirv_bytes;
	bool cached; /* gs_kernel_create: the adapter had this module already */
	uint64_t created_ns;
} gs_kernel_info;

/* Creates a kernel on a device from a SPIR-V module (size bytes) and its GLCompute entry
 * point (NULL or "": "main"). A refused module is GS_STATUS_INVALID_ARGUMENT with the reason
 * in gs_client_message; an adapter whose backend runs no kernels GS_STATUS_UNIMPLEMENTED. */
int gs_kernel_create(gs_client *c, uint64_t device, const void *spirv, size_t size,
                     const char *entry_point, gs_kernel_info *out);
int gs_kernel_destroy(gs_client *c, uint64_t kernel);
/* The caller's kernels on the client's adapter (device 0: of every device); *out is
 * malloc'd (NULL when *count is 0), freed with free(). */
int gs_kernel_list(gs_client *c, uint64_t device, gs_kernel_info **out, size_t *count);

/* ---------------------------------------------------------------------------------------- */
/* Submission                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct gs_submit_result {
	uint64_t packet;
	uint64_t fence; /* its context's fence: one more than the context's previous packet */
	uint32_t node;
	/* GS_PACKET_SUBMITTED; with gs_submit_desc.wait_ms, the state when answered: final, or
	 * not yet when wait_ms ran out. */
	gs_packet_state state;
	/* The context's completed fence when answered: its packets with a fence up to this one
	 * have ended. */
	uint64_t completed_fence;
} gs_submit_result;

/* One packet of a batch. */
typedef struct gs_submit_desc {
	uint64_t context;
	const gs_dmabuf *dma;
	uint32_t submit_flags; /* DXGK_SUBMITCOMMANDFLAGS Value (GS_SUBMIT_* of wddm.h) */
	const void *private_data;
	size_t private_data_size;
	/* 0: answered once the submission is recorded. Above 0 (gs_async_submit_desc; not in a
	 * batch, which is refused): answered once the packet is final or after wait_ms, submit and
	 * gs_packet_wait in one round trip; a faulted packet answers GS_STATUS_FAULTED with the
	 * result filled in (state GS_PACKET_FAULTED). */
	uint32_t wait_ms;
} gs_submit_desc;

int gs_submit(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
              gs_submit_result *out);
/* gs_submit, then gs_packet_wait, in one round trip: answered once the packet is final (out
 * then has its final state and fence) or after wait_ms (1.. ; out->state not final then).
 * GS_STATUS_FAULTED with out filled when it faulted; the other errors as gs_submit's. */
int gs_submit_wait(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
                   uint32_t wait_ms, gs_submit_result *out);
/* Packets one SubmitBatch may carry at most, as far as the library goes (the daemon's own
 * limit, max_batch, is lower by default: 1024). More: GS_ERR_INVALID before sending. */
#define GS_MAX_BATCH_PACKETS 65536u

/* All or nothing: out[i] answers packets[i] (out may be NULL). count 0 is sent, and the
 * daemon answers GS_STATUS_INVALID_ARGUMENT. */
int gs_submit_batch(gs_client *c, const gs_submit_desc *packets, size_t count,
                    gs_submit_result *out);

/* Waits up to timeout_ms for the packet to reach a final state. state and fence may be NULL.
 * Returns GS_STATUS_TIMEOUT if it did not, and GS_STATUS_FAULTED (with *state set to
 * GS_PACKET_FAULTED) when the packet faulted. */
int gs_packet_wait(gs_client *c, uint64_t packet, uint32_t timeout_ms, gs_packet_state *state,
                   uint64_t *fence);

/* ---------------------------------------------------------------------------------------- */
/* Sync objects (monitored fences)                                                           */
/* ---------------------------------------------------------------------------------------- */

int gs_sync_create(gs_client *c, uint64_t device, uint64_t initial_value, uint64_t *sync);
int gs_sync_destroy(gs_client *c, uint64_t sync);
/* The value must not go backwards. */
int gs_sync_signal(gs_client *c, uint64_t sync, uint64_t value);
/* Waits until the value is >= `value` (GS_STATUS_TIMEOUT after timeout_ms). current (may be
 * NULL) receives the value the daemon saw. */
int gs_sync_wait(gs_client *c, uint64_t sync, uint64_t value, uint32_t timeout_ms,
                 uint64_t *current);

/* ---------------------------------------------------------------------------------------- */
/* Asynchronous calls                                                                        */
/* ---------------------------------------------------------------------------------------- */

/*
 * Pipelining: gs_async_submit, gs_async_submit_batch, gs_async_packet_wait and
 * gs_async_sync_wait send their request and return at once with the request's id; up to
 * GS_ASYNC_MAX_INFLIGHT requests of one client are in flight together over its one
 * connection (each on its own nng context). The id is the request's envelope id on the
 * wire: unique per client, never 0.
 *
 * Completion: when a start call returns 0, the request completes exactly once, as a
 * gs_async_event delivered either
 *   - to a callback (gs_async_opts.callback), called on one of the library's (nng's) threads.
 *     It must return soon, must not make blocking gs_* calls and must not close the client
 *     it belongs to; it may start new gs_async_* requests (on any client) and cancel others.
 *     Callbacks of different requests may run at the same time on different threads.
 *   - or into a completion queue (gs_async_opts.queue), read with gs_async_poll() from any
 *     thread; gs_async_queue_fd() is readable while the queue holds events, for poll(2) or
 *     an event loop. One queue may collect the requests of several clients.
 * A start call that returns an error delivers nothing.
 *
 * Every request completes, with status (as the blocking call would return it):
 *   0 or a daemon status   the daemon answered;
 *   GS_ERR_CANCELLED       gs_async_cancel(), or gs_close() while it was in flight;
 *   GS_ERR_TIMEOUT         its deadline (gs_async_opts.timeout_ms) passed first;
 *   GS_ERR_TRANSPORT       the connection dropped while it was in flight (the daemon died or
 *                          restarted): whether the daemon acted on it is unknown;
 *   GS_ERR_PROTOCOL        the answer does not decode or does not match the request;
 *   GS_ERR_NOMEM.
 * After a cancellation, a timeout or a lost connection the daemon may still have acted on a
 * request it had received (a submission queued, a wait still parked until its own timeout):
 * the protocol has no way to withdraw a request. When the connection drops, every request
 * in flight on the client fails at once, also one not yet written: none started before the
 * drop reaches a restarted daemon, whose handles may name other objects, and no request is
 * ever sent twice. The client reconnects by itself (nng); a request started while it is
 * disconnected waits for the connection within its deadline, so requests started after a
 * daemon restart succeed.
 *
 * Order: requests in flight together are independent. The daemon may handle them in any
 * order, so two submissions to one context in flight together may get their fences (and so
 * run) in either order; wait for one's completion before starting the next where the order
 * matters, or put the packets in one batch.
 *
 * Limits of the daemon that apply per connection or tenant (docs/hardening.md): at most
 * max_waits_per_connection (default 64) waits parked at once per connection (more are
 * answered GS_STATUS_BUSY) and max_inflight_requests (default 512) requests in flight per
 * tenant (more: GS_STATUS_QUOTA_EXCEEDED).
 */

#define GS_ASYNC_MAX_INFLIGHT 4096u /* requests in flight per client, blocking ones included */
#define GS_ASYNC_MESSAGE_MAX  512u  /* bytes of gs_async_event.message, with its NUL */

typedef enum gs_async_kind {
	GS_ASYNC_SUBMIT = 1,
	GS_ASYNC_SUBMIT_BATCH = 2,
	GS_ASYNC_PACKET_WAIT = 3,
	GS_ASYNC_SYNC_WAIT = 4,
} gs_async_kind;

/* "SUBMIT", "SUBMIT_BATCH", "PACKET_WAIT", "SYNC_WAIT"; "UNKNOWN" otherwise. */
const char *gs_async_kind_name(gs_async_kind kind);

typedef struct gs_async_event {
	uint64_t id; /* what the start call returned */
	gs_async_kind kind;
	void *user; /* gs_async_opts.user */
	int status; /* as above */
	/* The daemon's message (empty on success) or a description of the local failure. */
	char message[GS_ASYNC_MESSAGE_MAX];
	gs_submit_result submit; /* SUBMIT, status 0 */
	/* SUBMIT_BATCH: the caller's out array (NULL if none was given), filled when status is
	 * 0, and its length. */
	gs_submit_result *batch;
	size_t batch_count;
	/* PACKET_WAIT: the final state and fence (status 0), or GS_PACKET_FAULTED with status
	 * GS_STATUS_FAULTED, as gs_packet_wait; and its context's completed fence then. */
	gs_packet_state state;
	uint64_t fence;
	uint64_t completed_fence;
	uint64_t value; /* SYNC_WAIT, status 0: the value the daemon saw */
} gs_async_event;

typedef void (*gs_async_cb)(const gs_async_event *ev);

typedef struct gs_async_queue gs_async_queue;

/* Where and how a request completes. Exactly one of queue and callback. */
typedef struct gs_async_opts {
	gs_async_queue *queue;
	gs_async_cb callback;
	void *user; /* handed back in the event */
	/* The request's deadline, counted from the start call, in ms (at most INT32_MAX);
	 * 0 = the client's timeout (gs_client_set_timeout) plus, for waits, the wait's own
	 * timeout_ms, as the blocking calls. */
	uint32_t timeout_ms;
} gs_async_opts;

/* A completion queue. 0, GS_ERR_NOMEM (or GS_ERR_INVALID for a NULL out). */
int gs_async_queue_create(gs_async_queue **out);
/* Releases the queue; events still queued are discarded, and so are the completions of
 * requests still in flight towards it (they still complete: callbacks of nothing). */
void gs_async_queue_destroy(gs_async_queue *q);
/* A file descriptor that polls readable while the queue holds events (do not read or close
 * it). -1 for a NULL queue. */
int gs_async_queue_fd(const gs_async_queue *q);
/* Events queued now. */
size_t gs_async_queue_length(gs_async_queue *q);
/*
 * Moves up to max queued events, oldest first, into events, waiting up to timeout_ms
 * (0: do not wait; -1: no bound) for the first one. Returns how many (0: none came in time),
 * or GS_ERR_INVALID (NULL queue or events, max 0, timeout below -1).
 */
int gs_async_poll(gs_async_queue *q, gs_async_event *events, size_t max, int timeout_ms);

/*
 * Start calls. Each returns 0 with the request's id in *id (id may be NULL), GS_ERR_INVALID
 * (NULL client, options, DMA buffer or packets, both or neither of queue and callback, a batch
 * of 0 or more than GS_MAX_BATCH_PACKETS packets), GS_ERR_BUSY (GS_ASYNC_MAX_INFLIGHT in
 * flight already), GS_ERR_NOMEM or GS_ERR_CANCELLED (the client is closing). The request is
 * encoded before the call returns: the DMA buffers and descriptions may be reused at once.
 */
int gs_async_submit(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
                    const gs_async_opts *opts, uint64_t *id);
/* One packet with all of gs_submit_desc (private data; wait_ms: the completion then comes at
 * the packet's end, with its final state in the event's submit result). */
int gs_async_submit_desc(gs_client *c, const gs_submit_desc *desc, const gs_async_opts *opts,
                         uint64_t *id);
/* out (may be NULL) receives the results and must stay valid until the completion. */
int gs_async_submit_batch(gs_client *c, const gs_submit_desc *packets, size_t count,
                          gs_submit_result *out, const gs_async_opts *opts, uint64_t *id);
/* Completes when the packet reaches a final state (status 0, or GS_STATUS_FAULTED), or with
 * GS_STATUS_TIMEOUT after timeout_ms in the daemon (0: the daemon's max_wait_ms). */
int gs_async_packet_wait(gs_client *c, uint64_t packet, uint32_t timeout_ms,
                         const gs_async_opts *opts, uint64_t *id);
/* Completes when the sync object reaches value, or with GS_STATUS_TIMEOUT after timeout_ms in
 * the daemon (0: the daemon's max_wait_ms). */
int gs_async_sync_wait(gs_client *c, uint64_t sync, uint64_t value, uint32_t timeout_ms,
                       const gs_async_opts *opts, uint64_t *id);

/* Cancels a request in flight on c: 0 when its completion had not been delivered yet (it
 * follows, or is being delivered, once as always: GS_ERR_CANCELLED unless the answer or
 * another outcome came first), GS_ERR_INVALID when no request of c with that id is in flight
 * (never started, or delivered already). */
int gs_async_cancel(gs_client *c, uint64_t id);
/* Requests of c started and not yet completed (their completion delivered). */
size_t gs_async_inflight(gs_client *c);

/* ---------------------------------------------------------------------------------------- */
/* Paging                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/*
 * Every memory move is a paging packet the daemon runs on the device's paging queue. The
 * answer names the device's paging sync object and the paging fence value it reaches once the
 * moves a request queued are done: gs_sync_wait(c, r.paging_sync, r.paging_fence, ...) waits
 * for them on the CPU, and a SyncPoint / gs_dmabuf_wait on the same pair makes a packet wait.
 * When nothing had to move, paging_fence is the device's current value.
 */
typedef struct gs_paging_result {
	uint64_t paging_fence; /* the device's paging fence value to wait for */
	uint64_t paging_sync;  /* the device's paging sync object (signalled by the daemon only) */
	uint32_t moves;        /* allocations this request moved (paging transfers queued) */
} gs_paging_result;

/* Places each allocation in a segment of its supported set (by its preference, evicting
 * others if needed); it stays there until evicted. out may be NULL. */
int gs_make_resident(gs_client *c, uint64_t device, const uint64_t *allocations, size_t count,
                     gs_paging_result *out);
/* Moves each allocation out of video memory (to system memory) once no packet uses it. */
int gs_evict(gs_client *c, uint64_t device, const uint64_t *allocations, size_t count,
             gs_paging_result *out);
/* Moves one allocation to `segment` (0 = system memory) once no packet uses it.
 * transfer_flags: GS_TRANSFER_SWIZZLE / _UNSWIZZLE naming the conversion the move implies for
 * a tiled allocation, or 0 to let the daemon choose (GS_STATUS_TRANSFER_FLAGS when they
 * contradict the move). */
int gs_transfer(gs_client *c, uint64_t allocation, uint32_t segment, uint32_t transfer_flags,
                gs_paging_result *out);

/* ---------------------------------------------------------------------------------------- */
/* History and statistics                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* A zero-initialised filter matches everything (the newest 100 packets). */
typedef struct gs_history_filter {
	uint64_t context;       /* 0 = any */
	uint64_t device;        /* 0 = any */
	gs_packet_state state;  /* GS_PACKET_UNKNOWN = any */
	bool match_node;        /* false = any node */
	uint32_t node;          /* zero-based, used when match_node */
	uint32_t limit;         /* 0 = 100; at most 10000 */
	uint64_t before_packet; /* newest-first cursor: packets submitted before this one */
	uint64_t allocation;    /* 0 = any; else packets that referenced or moved it */
	bool paging;            /* only the memory manager's packets (Paging / ContextSwitch) */
	uint64_t since_ns;      /* submitted_ns >= this (CLOCK_REALTIME ns); 0 = no bound */
	uint64_t until_ns;      /* submitted_ns < this; 0 = no bound */
	uint32_t flags_mask;    /* packets with any of these submit flags; 0 = any */
	uint64_t fence;         /* 0 = any */
	bool oldest_first;      /* default newest first */
	uint64_t after_packet;  /* oldest-first cursor: packets submitted after this one */
	const char *tenant;     /* admins: another tenant's history; NULL = the caller's */
} gs_history_filter;

typedef struct gs_packet_record {
	uint64_t packet;
	uint64_t device;
	uint64_t context;
	uint32_t node;
	uint64_t fence;
	uint32_t submit_flags; /* raw DXGK_SUBMITCOMMANDFLAGS Value */
	uint32_t patch_flags;  /* raw DXGK_PATCHFLAGS Value */
	uint32_t dma_size;
	uint32_t allocation_count;
	uint32_t patch_count;
	gs_packet_state state;
	uint64_t submitted_ns; /* CLOCK_REALTIME ns; 0 = not reached */
	uint64_t ready_ns;
	uint64_t started_ns;
	uint64_t completed_ns;
	uint32_t preemptions;
	uint32_t resubmissions;
	char *result;
	char *tenant;
	/* gs_history: what its DISPATCH commands ran ("DISPATCH kernel HANDLE HASH16 groups XxYxZ
	 * ..."), "" without DISPATCH (docs/kernels.md). */
	char *dispatches;
} gs_packet_record;

/* Packets in submission order (submitted_ns, then id), newest first unless oldest_first; pass
 * the last packet id of a page as the cursor of the next. *records is malloc'd (NULL when
 * *count is 0); release with gs_history_free. */
int gs_history(gs_client *c, const gs_history_filter *filter, gs_packet_record **records,
               size_t *count);
void gs_history_free(gs_packet_record *records, size_t count);

typedef struct gs_packet_event {
	uint64_t seq; /* audit sequence number */
	uint64_t packet;
	gs_packet_state state;
	uint64_t time_ns;
	char *detail;
	uint64_t context;
} gs_packet_event;

/* One packet's events, oldest first. */
int gs_packet_events(gs_client *c, uint64_t packet, gs_packet_event **events, size_t *count);
/* The caller's events of every packet with after_seq < seq < before_seq (before_seq 0: no
 * bound), in seq order, at most limit (0: 100; at most 10000). */
int gs_packet_events_range(gs_client *c, uint64_t after_seq, uint64_t before_seq, uint32_t limit,
                           gs_packet_event **events, size_t *count);
/* The caller's events of packets submitted in [since_ns, until_ns) (0: unbounded) with seq >
 * after_seq, in seq order, at most limit (0: 100; at most 10000): page with the last seq. */
int gs_packet_events_window(gs_client *c, uint64_t since_ns, uint64_t until_ns, uint64_t after_seq,
                            uint32_t limit, gs_packet_event **events, size_t *count);
void gs_packet_events_free(gs_packet_event *events, size_t count);

/*
 * Watching events live, through EventsWait on a client's connection. The daemon gives each
 * tenant only its own events (an administrator: every tenant's, and the daemon's messages). It
 * keeps its recent events in a ring; when one this watcher had not read yet left the ring (it
 * fell behind, or the daemon restarted), gs_watch_next returns a GAP event that says what was
 * lost, then the caller's lost packet events read back from the audit (recovered = true);
 * nothing is dropped without a GAP.
 */
typedef enum gs_watch_kind {
	GS_WATCH_PACKET = 1,  /* a packet's state change: packet */
	GS_WATCH_MESSAGE = 2, /* a daemon message (an engine reset, a ban): message */
	GS_WATCH_GAP = 3,     /* events between gap_after and gap_before left the daemon's ring */
} gs_watch_kind;

typedef struct gs_watch_event {
	gs_watch_kind kind;
	uint64_t seq; /* audit sequence number (GAP: 0) */
	uint64_t time_ns;
	char *tenant; /* NULL for recovered events (they are the caller's) */
	gs_packet_event packet;
	char *message;
	bool recovered; /* read back from the audit after a GAP */
	/* GAP: the lost range (gap_after, gap_before) and how many packet events of the caller's
	 * came back from the audit (the others were messages). */
	uint64_t gap_after, gap_before;
	uint64_t gap_recovered;
	bool gap_truncated; /* more than 100000 lost: read the rest with gs_packet_events_range */
	int gap_status;     /* 0, or why reading back failed (the status of the call) */
} gs_watch_event;

typedef struct gs_watch gs_watch;
/* Starts watching from now on c's connection and tenant: every event after this call is
 * promised. 0, the daemon's status (UNAUTHENTICATED for an unknown token), or a GS_ERR_*. */
int gs_watch_open(gs_client *c, gs_watch **out);
/* The next event, waiting up to timeout_ms (< 0: without a bound): 0, GS_ERR_TIMEOUT, the
 * daemon's status, or a GS_ERR_* of the call (GS_ERR_TRANSPORT: call again; after a daemon
 * restart the next call reports a GAP). c (NULL: the client given to gs_watch_open) is the
 * connection it waits on and reads lost events back with. Clear *ev with
 * gs_watch_event_clear. */
int gs_watch_next(gs_watch *w, gs_client *c, int timeout_ms, gs_watch_event *ev);
void gs_watch_event_clear(gs_watch_event *ev);
void gs_watch_close(gs_watch *w);

/* A zero-initialised filter matches every move of the tenant's allocations (the newest 100). */
typedef struct gs_moves_filter {
	uint64_t allocation; /* 0 = any */
	uint64_t device;     /* 0 = any */
	uint64_t packet;     /* 0 = any; else moves made by this paging packet or for this render
	                        packet */
	uint32_t limit;      /* 0 = 100; at most 10000 */
	uint64_t before_seq; /* 0 = from the newest; else moves with seq < this */
} gs_moves_filter;

/* One action of the memory manager on an allocation, from the audit record. Segment 0 is
 * system memory (or nowhere: the source of a PLACE, the destination of a FREE). */
typedef struct gs_move {
	uint64_t seq;
	uint64_t time_ns; /* daemon clock */
	uint64_t allocation;
	uint64_t device;
	uint64_t packet;     /* the paging packet that moved the bytes; 0 = none */
	uint64_t for_packet; /* the render packet it was made resident for; 0 = none */
	gs_move_kind kind;
	uint32_t from_segment;
	uint64_t from_offset;
	uint32_t to_segment;
	uint64_t to_offset;
	uint64_t bytes;
	uint32_t transfer_flags; /* DXGK_TRANSFERFLAGS (GS_TRANSFER_*) of the whole transfer */
	uint32_t pieces;         /* sub-transfers it was split into */
	char *reason;            /* "for packet 41", "MakeResident", ...; "" when none */
	/* The offsets are 0 because only administrators are told where allocations lie. */
	bool offsets_withheld;
} gs_move;

/* Newest first. *moves is malloc'd (NULL when *count is 0); release with gs_moves_free. */
int gs_moves(gs_client *c, const gs_moves_filter *filter, gs_move **moves, size_t *count);
void gs_moves_free(gs_move *moves, size_t count);

/* Everything the audit holds about one packet: its record, its state changes in order (each
 * detail says what it waited for, what stopped it, why it ended) and the memory manager's
 * moves made for it or by it, oldest first. */
typedef struct gs_explanation {
	gs_packet_record *packet; /* one record */
	gs_packet_event *events;
	size_t event_count;
	gs_move *moves;
	size_t move_count;
} gs_explanation;

/* tenant: administrators may name another tenant's packet (NULL: the caller's own).
 * GS_STATUS_NOT_FOUND when the history has no such packet of that tenant. */
int gs_explain(gs_client *c, uint64_t packet, const char *tenant, gs_explanation **out);
void gs_explanation_free(gs_explanation *e);

/* How the GPU was used by the packets submitted in [since_ns, until_ns) (0: unbounded). */
typedef enum gs_usage_by {
	GS_USAGE_BY_TENANT = 0,
	GS_USAGE_BY_CONTEXT = 1,
	GS_USAGE_BY_NODE = 2,
} gs_usage_by;

typedef struct gs_usage_filter {
	uint64_t since_ns, until_ns;
	gs_usage_by by;
	const char *tenant; /* administrators: a name or "*" (every tenant); NULL: the caller */
} gs_usage_filter;

typedef struct gs_usage_row {
	char *tenant;
	uint64_t context;
	uint32_t adapter, node;
	uint64_t packets, completed, faulted, cancelled, preemptions, resubmissions;
	uint64_t busy_ns;   /* engine time: the packets' RUNNING spans */
	double utilisation; /* busy_ns / the window: a fraction of one engine */
	uint64_t paging_bytes;
	uint64_t wait_ns[3]; /* p50, p95, p99: submitted -> started */
	uint64_t run_ns[3];  /* p50, p95, p99: engine time */
} gs_usage_row;

typedef struct gs_usage {
	gs_usage_row *rows;
	size_t count;
	uint64_t window_ns;
	bool truncated; /* more packets than the daemon reads for one answer */
} gs_usage;

int gs_get_usage(gs_client *c, const gs_usage_filter *filter, gs_usage **out);
void gs_usage_free(gs_usage *u);

typedef struct gs_daemon_stats {
	uint64_t requests;
	uint64_t errors;
	uint64_t packets_submitted;
	uint64_t packets_completed;
	uint64_t packets_faulted;
	uint64_t packets_cancelled;
	uint64_t packets_rejected;
	uint64_t audit_records;
	uint64_t audit_commits;
	uint64_t devices;
	uint64_t contexts;
	uint64_t allocations;
	uint64_t uptime_ns;
	uint64_t paging_packets; /* paging and ContextSwitch packets of the memory manager */
	uint64_t paging_bytes;   /* bytes they moved */
	uint64_t evictions;      /* allocations moved out of video memory */
	uint64_t audit_queued;   /* records waiting to be committed */
	uint64_t audit_failed_commits;
	uint64_t audit_dropped; /* records never written (see docs/hardening.md) */
	int audit_health;       /* 0 ok, 1 failing (submissions refused), 2 file removed/replaced */
	/* The tenant is not an administrator: requests, errors, packets, objects and paging are
	 * its own, the audit counters 0 (uptime and audit_health are the daemon's). */
	bool tenant_view;
} gs_daemon_stats;

int gs_stats(gs_client *c, gs_daemon_stats *out);

/* ---------------------------------------------------------------------------------------- */
/* Tenants (administration: needs an admin token)                                            */
/* ---------------------------------------------------------------------------------------- */

typedef struct gs_tenant {
	char *name;
	gs_tenant_kind kind;
	uint32_t share;            /* weight under the adapter's share policy */
	uint32_t priority_ceiling; /* highest priority class its contexts may use */
	uint64_t memory_quota;     /* bytes; 0 = unlimited */
	uint32_t context_limit;    /* 0 = unlimited */
	bool admin;
	bool banned;
	uint32_t allocation_limit;        /* allocations held at once; 0 = unlimited */
	uint32_t max_requests_per_second; /* 0 = unlimited */
	/* Largest request in bytes; 0 = the default (128 KiB for a VM, else the daemon's). */
	uint32_t max_message;
	uint32_t packet_limit; /* packets not yet final at once; 0 = the daemon's limit */
	uint32_t sync_limit;   /* sync objects held at once; 0 = the daemon's limit */
} gs_tenant;

/* Settings gs_tenant_update may change (a mask of them). */
typedef enum gs_tenant_field {
	GS_TENANT_SHARE = 1u << 0,
	GS_TENANT_PRIORITY_CEILING = 1u << 1,
	GS_TENANT_MEMORY_QUOTA = 1u << 2,
	GS_TENANT_CONTEXT_LIMIT = 1u << 3,
	GS_TENANT_ALLOCATION_LIMIT = 1u << 4,
	GS_TENANT_MAX_REQUESTS_PER_SECOND = 1u << 5,
	GS_TENANT_ADMIN = 1u << 6,
	GS_TENANT_MAX_MESSAGE = 1u << 7,
	GS_TENANT_PACKET_LIMIT = 1u << 8,
	GS_TENANT_SYNC_LIMIT = 1u << 9,
	/* Ban (true) or lift a ban (false); a ban survives restarts until lifted. */
	GS_TENANT_BANNED = 1u << 10,
} gs_tenant_field;

/* token: the tenant's token, or NULL/"" to let the daemon choose one. *token_out (may be NULL)
 * receives the token in effect, malloc'd. */
int gs_tenant_create(gs_client *c, const gs_tenant *tenant, const char *token, char **token_out);
int gs_tenant_destroy(gs_client *c, const char *name);
/* gs_tenant_destroy of a tenant that may still have devices: they are destroyed first, with
 * everything in them (its queued packets cancelled), then the tenant (a pod that is gone). */
int gs_tenant_destroy_release(gs_client *c, const char *name);
/* Changes the settings in fields (gs_tenant_field mask) of the live tenant `name` to those of
 * *settings (its name is not read), now: a new share applies to its queued work at once. */
int gs_tenant_update(gs_client *c, const char *name, const gs_tenant *settings, unsigned fields);
int gs_tenant_list(gs_client *c, gs_tenant **tenants, size_t *count);
void gs_tenant_list_free(gs_tenant *tenants, size_t count);

/* For gpusched-relay, as a virtual machine's tenant itself (not as a guest): destroys every
 * device, with all in it, of one guest process (gs_guest_release) or of every guest
 * (gs_guest_release_all, the VM's own objects stay). *devices (may be NULL) gets how many. */
int gs_guest_release(gs_client *c, uint64_t guest, uint32_t *devices);
int gs_guest_release_all(gs_client *c, uint32_t *devices);

/* ---------------------------------------------------------------------------------------- */
/* Several daemons as one (docs/hosts.md)                                                    */
/* ---------------------------------------------------------------------------------------- */

#define GS_MAX_HOSTS 64

/*
 * Splits a list of daemon URLs, separated by commas or white space (the form $GPUSCHED_URL may
 * take: "ipc:///run/a.sock,tcp://10.0.0.2:7700"), in place: list is modified and urls[i]
 * point into it. Returns how many (1 for a plain URL), or GS_ERR_INVALID when the list holds
 * none or more than cap.
 */
int gs_url_list_split(char *list, const char **urls, size_t cap);

/* Daemons on several hosts, each with its own client. */
typedef struct gs_hosts gs_hosts;

/*
 * Connects to every URL at once, each with opts' token, TLS files, timeout and adapter (opts
 * may be NULL: gs_connect_ex's defaults; its url is not read). A host that cannot be reached
 * is kept, down, with the reason (gs_hosts_error), and left out of every call below. Returns
 * 0 when at least one host is up, GS_ERR_TRANSPORT when none is (*out is set either way, so
 * that the reasons can be read: close it), GS_ERR_INVALID (count 0 or above GS_MAX_HOSTS, a
 * NULL or empty URL, a URL given twice) or GS_ERR_NOMEM.
 */
int gs_hosts_connect(const char *const *urls, size_t count, const gs_connect_options *opts,
                     gs_hosts **out);
void gs_hosts_close(gs_hosts *h);
size_t gs_hosts_count(const gs_hosts *h);
const char *gs_hosts_url(const gs_hosts *h, size_t host);
/* Host `host`'s client, or NULL while it is down. Calls on it are the caller's (one thread at
 * a time per client, as always). */
gs_client *gs_hosts_client(const gs_hosts *h, size_t host);
/* Why host `host` is down, or why it failed in the last gs_hosts_ call; "" when it did not. */
const char *gs_hosts_error(const gs_hosts *h, size_t host);
/* Marks a host down with a reason (a caller's own call on its client failed). */
void gs_hosts_set_down(gs_hosts *h, size_t host, const char *why);

/*
 * The packet history of every host that is up, merged into one list in the filter's order by
 * submitted_ns (hosts' ties in host order), at most filter->limit (0: 100; at most 10000)
 * packets: exactly the first packets of the union of the hosts' histories, fetched from all
 * hosts at once, in pages sized so that usually each host sends about limit / hosts of them.
 * (*hosts)[i] is the host of (*records)[i]. A packet id is its host's: the cursors
 * before_packet and after_packet are GS_ERR_INVALID here (page by time with since_ns and
 * until_ns). A host whose call fails is left out of the result and keeps the reason
 * (gs_hosts_error). Returns 0 when at least one host answered, else the first host's error.
 * Release with gs_hosts_history_free.
 */
int gs_hosts_history(gs_hosts *h, const gs_history_filter *filter, gs_packet_record **records,
                     uint32_t **hosts, size_t *count);
void gs_hosts_history_free(gs_packet_record *records, uint32_t *hosts, size_t count);

/*
 * Creates a device on the least-loaded adapter of every host that is up. The load of an
 * adapter is its nodes' queued packets per engine, then the share of its memory segments in
 * use, then the host's place in the list and the adapter id (docs/hosts.md, Placement);
 * adapters that lost their device are skipped. The packet counts are what the client may see:
 * every tenant's for an administrator, the caller's own for a tenant. When the daemon refuses
 * (a status: draining, quota), the next adapter in that order is tried; a local failure
 * (GS_ERR_TIMEOUT, GS_ERR_TRANSPORT: the device may exist) ends the attempt with it. On
 * success the chosen host's client addresses that adapter (gs_client_set_adapter), and *host,
 * *adapter and *device say where the device is. Returns 0, the last refusal or failure, or
 * GS_STATUS_NOT_FOUND when the hosts that answered have no working adapter.
 */
int gs_hosts_device_create(gs_hosts *h, const char *name, size_t *host, uint32_t *adapter,
                           uint64_t *device);

#ifdef __cplusplus
}
#endif
#endif
