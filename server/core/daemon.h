/*
 * The daemon's state. Everything here is owned by the loop thread (libuv): no other thread
 * reads or writes these structures. Engine threads see only the gsd_exec they were handed and
 * the segment memory; the audit thread sees only copies.
 */
#ifndef GSD_DAEMON_H
#define GSD_DAEMON_H

#include "audit/audit.h"
#include "core/config.h"
#include "engine/engine.h"
#include "core/hmap.h"
#include "core/list.h"
#include "rpc/rules.h"
#include "vidsch/runq.h"
#include "vidmm/heap.h"

#include "gpusched.pb-c.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define GSD_ST(x) GPUSCHED__V1__STATUS__STATUS_##x
#define GSD_PS(x) GPUSCHED__V1__PACKET_STATE__PACKET_STATE_##x

typedef struct gsd_daemon gsd_daemon;
typedef struct gsd_adapter gsd_adapter;
typedef struct gsd_call gsd_call;

typedef struct gsd_tenant {
	char name[GSD_NAME_MAX];
	char token[128];
	int kind;   /* Gpusched__V1__TenantKind */
	int policy; /* Gpusched__V1__SharePolicy */
	uint32_t share;
	uint32_t priority_ceiling;
	uint64_t memory_quota;
	uint32_t context_limit;
	bool admin;
	bool banned;
	bool removed; /* destroyed by an admin: kept so old records can still name it */
	uint64_t memory_used;
	uint32_t contexts;
	uint32_t devices;
	/* Times of its recent GPU timeouts (TDR), oldest first, for the ban rule. */
	uint64_t tdr_times[16];
	uint32_t ntdr;
} gsd_tenant;

typedef struct gsd_packet gsd_packet;

typedef struct gsd_node {
	uint32_t index;
	const gsd_node_config *cfg;
	gsd_adapter *adapter;
	gsd_engine *engine;
	gsd_runq rq;         /* contexts with a packet ready to run */
	gsd_list ready_fifo; /* the same contexts, longest waiting first (starvation) */
	gsd_list contexts;   /* every live context of this node */
	gsd_packet *running; /* the packet on the engine (one at a time, so it can be preempted) */
	uint32_t inflight;   /* 1 while running != NULL */
	uint64_t run_start;  /* wall ns when running started */
	uint64_t run_budget; /* budget it was given (0 = none) */
	bool in_kick;        /* kick() is on the stack for this node */
	const char *preempt_reason; /* why a preemption was asked for, NULL if none */
	gsd_packet *tdr_guilty;     /* the packet a reset was issued against */
	uv_timer_t quantum_timer;   /* wall clock: ends an unbudgeted run when others wait */
	uv_timer_t tdr_timer;       /* wall clock: resets the engine when a preemption hangs */
	uint64_t next_fence;
	uint64_t completed_fence;
	uint64_t vtime_ns;   /* virtual clock of this node's engine */
	uint64_t queued;     /* packets of this node not yet final */
	uint64_t switch_for; /* packet a ContextSwitch was queued against (memory manager) */
} gsd_node;

struct gsd_adapter {
	uint32_t id;
	const gsd_adapter_config *cfg;
	const gsd_engine_ops *ops;
	gsd_daemon *d;
	uint32_t nsegments;
	gsd_segment segments[8];
	gsd_memory memory;
	uint32_t nnodes;
	gsd_node nodes[GSD_MAX_NODES];
	/* Interrupts posted by engine threads, drained on the loop. */
	uv_async_t irq_async;
	pthread_mutex_t irq_lock;
	gsd_irq *irqs;
	size_t nirqs, capirqs;
	/* Emulated display: vertical blanks at cfg refresh rate; Flip packets wait for one. */
	uv_timer_t vblank_timer;
	uint64_t vblank_period_ns;
	uint64_t vblank_epoch_ns; /* wall time of vblank 0 */
	uint64_t vblanks;
	uint64_t vblank_target; /* the blank the timer is armed for */
	uint32_t flips_waiting;
	/* ---- memory manager (residency.c) ---- */
	gsd_segment sysmem; /* system memory: where evicted allocations live */
	gsd_list
	        residents[GSD_MAX_SEGMENTS]; /* allocations by segment id (sysmem: GSD_SYSMEM_ID) */
	struct gsd_context
	        *paging_ctx[GSD_MAX_NODES]; /* system context per node for paging buffers */
	struct gsd_device *sysdev;          /* the device of those contexts */
	uint32_t paging_node;               /* the configured paging node (requests' default) */
	/* Paging packets of the adapter run one at a time in the order they were built (seq),
	 * so the bytes always follow the heap bookkeeping, which is updated when a move is
	 * planned. paging_done.value is the seq of the last one finished; render packets made
	 * resident by paging wait on it like on a sync object. */
	uint64_t paging_seq;
	struct gsd_sync *paging_done;
	/* Bumped whenever pins are released: packets that found no room wait on it. */
	struct gsd_sync *room;
	uint64_t pinned_allocs; /* allocations with pins > 0 */
	uint64_t paging_vns;    /* virtual clock: when the last paging packet finished */
	uint64_t paging_packets, paging_bytes, evictions;
};

typedef enum gsd_obj_type {
	GSD_OBJ_DEVICE = 1,
	GSD_OBJ_CONTEXT,
	GSD_OBJ_ALLOCATION,
	GSD_OBJ_SYNC,
} gsd_obj_type;

/* Leading fields of every handle-named object. */
typedef struct gsd_object {
	uint64_t handle;
	gsd_obj_type type;
	gsd_tenant *tenant;
} gsd_object;

typedef struct gsd_device {
	gsd_object obj;
	gsd_adapter *adapter;
	char name[GSD_NAME_MAX];
	gsd_list contexts;
	gsd_list allocations;
	gsd_list syncs;
	/* The device's paging queue: every paging packet that moves one of its allocations takes
	 * the next fence; the sync (daemon-signalled) reaches it when that packet finishes. */
	struct gsd_sync *paging_sync;
	uint64_t paging_fence;
} gsd_device;

typedef struct gsd_sync gsd_sync;

typedef struct gsd_context {
	gsd_object obj;
	gsd_device *dev;
	gsd_node *node;
	gsd_list dev_link;
	gsd_list node_link;
	gsd_list pending;    /* its packets not yet final, in submission order; head runs next */
	gsd_runq_entry rq;   /* in node->rq while its head packet is ready */
	gsd_list ready_link; /* in node->ready_fifo while in node->rq */
	uint64_t ready_since;
	uint32_t weight;    /* share of its band (the tenant's share) */
	uint64_t engine_ns; /* engine time consumed */
	gsd_list wait_link; /* in blocked_on->gpu_waiters while its head packet waits */
	gsd_sync *blocked_on;
	uint32_t flags;
	uint32_t priority_class;
	int32_t priority;
	/* Effective DXGK_CONTEXTINFO: list sizes only ever grow. */
	uint32_t dma_buffer_size, dma_buffer_segment_set, dma_buffer_private_data_size;
	uint32_t allocation_list_size, patch_location_list_size, caps, paging_companion_node_id;
	bool faulted;
	bool destroyed;
	uint32_t refs; /* 1 for the handle + 1 per live packet */
	uint64_t created_ns;
} gsd_context;

typedef struct gsd_allocation {
	gsd_object obj;
	gsd_device *dev;
	gsd_list dev_link;
	uint64_t size;
	uint32_t supported_segment_set;
	uint32_t segment_preference;
	uint32_t priority;
	uint32_t flags;
	gsd_segment *segment; /* NULL when not resident */
	uint64_t offset;
	uint32_t inflight; /* live packets that reference it */
	bool destroyed;
	uint32_t refs;    /* 1 for the handle + 1 per live packet */
	gsd_list waiters; /* CPU reads/writes waiting for it to go idle */
	uint64_t created_ns;
	/* Memory manager. */
	gsd_list res_link;    /* in adapter->residents[segment id] */
	uint32_t pins;        /* packets ready or running (or being made ready) that hold it */
	gsd_list pin_waiters; /* Evict/Transfer requests waiting for pins to drop to 0 */
	uint64_t last_use;    /* d->use_seq when a packet last pinned it (LRU) */
	uint64_t moves;
	uint32_t moving;   /* paging packets queued or running that move it */
	uint64_t move_seq; /* paging seq of its latest move: its bytes are in place once
	                      adapter->paging_done reaches it */
	uint32_t pitch;    /* tiled layout pitch (GS_ALLOC_TILED) */
	uint32_t mark;     /* scratch of gsd_vidmm_prepare */
	uint64_t last_use_ns;
	gsd_adapter *adapter; /* outlives the device, which may go before the last packet */
} gsd_allocation;

struct gsd_sync {
	gsd_object obj;
	gsd_device *dev;
	gsd_list dev_link;
	uint64_t value;
	gsd_list waiters;     /* CPU waits, sorted by nothing: all are checked on each signal */
	gsd_list gpu_waiters; /* contexts whose head packet waits for a value */
	/* A packet that would have signalled values up to this one faulted or was cancelled:
	 * waits for values in (value, abandoned] can never be satisfied. */
	uint64_t abandoned;
	bool daemon_only; /* signalled by the daemon only (a device's paging sync) */
};

typedef struct gsd_packet_alloc {
	gsd_allocation *alloc;
	bool write;
} gsd_packet_alloc;

typedef struct gsd_packet_patch {
	uint32_t allocation_index;
	uint32_t patch_offset;
	uint64_t allocation_offset;
} gsd_packet_patch;

typedef struct gsd_sync_point {
	uint64_t sync;
	uint64_t value;
} gsd_sync_point;

struct gsd_packet {
	gsd_list link; /* its context's pending list */
	gsd_context *ctx;
	gsd_node *node;
	uint8_t *dma;
	size_t dma_len;
	uint32_t nallocs, npatches;
	gsd_packet_alloc *allocs;
	gsd_packet_patch *patches;
	gsd_range *ranges;
	gsd_exec exec;
	gsd_packet_rec rec; /* the audit row, kept current */
	gsd_list waiters;   /* PacketWait calls */
	bool on_engine;
	char result[192];      /* backing store of rec.result when the daemon composes it */
	gsd_sync_point *waits; /* GPU waits: the packet runs once every one is reached */
	uint32_t nwaits;
	size_t resume_offset;  /* where its next run starts */
	uint64_t spin_done_us; /* of the SPIN at resume_offset */
	bool needs_resubmit;   /* preempted or aborted: the next run is a resubmission */
	bool flip_waiting;     /* executed; completes at the next vertical blank */
	/* Memory manager. */
	uint32_t nranges;      /* ranges the engine may touch (paging: source and destination) */
	bool pinned;           /* its allocations are pinned (gsd_vidmm_prepare .. run ends) */
	uint64_t paging_wait;  /* runs once adapter->paging_done reaches this (0: no wait) */
	uint64_t paging_seq;   /* paging packets: place in the adapter's paging order */
	uint64_t paging_sync;  /* paging packets: the device paging sync handle to signal */
	uint64_t paging_fence; /* ... with this value */
	uint32_t paging_moves; /* render packets: moves made for its latest residency */
	uint64_t room_wait;    /* runs once adapter->room reaches this (found no room) */
};

/* Final state of a packet no longer in memory, for PacketWait on old packets. */
typedef struct gsd_retired {
	uint64_t packet;
	uint64_t fence;
	const gsd_tenant *tenant;
	int state;
} gsd_retired;

#define GSD_RETIRED_RING     65536
#define GSD_VIRTUAL_EPOCH_NS UINT64_C(1000000000) /* where every node's virtual clock starts */

typedef struct gsd_stats {
	uint64_t requests, errors;
	uint64_t packets_submitted, packets_completed, packets_faulted, packets_cancelled,
	        packets_rejected;
} gsd_stats;

typedef struct gsd_rpc gsd_rpc;

struct gsd_daemon {
	gsd_config cfg;
	uv_loop_t *loop;
	gsd_audit *audit;
	gsd_rpc *rpc;
	uint32_t nadapters;
	gsd_adapter adapters[GSD_MAX_ADAPTERS];
	uint32_t ntenants;
	gsd_tenant *tenants[GSD_MAX_TENANTS * 2];
	gsd_hmap objects; /* handle -> gsd_object */
	gsd_hmap packets; /* packet id -> live gsd_packet */
	uint64_t next_handle;
	uint64_t next_packet;
	gsd_retired *retired; /* ring of GSD_RETIRED_RING */
	uint64_t devices, contexts, allocations;
	gsd_stats stats;
	gsd_tenant system_tenant; /* owns the system contexts; never authenticates */
	uint64_t use_seq;         /* LRU clock of allocations */
	uint64_t start_ns;
	bool stopping;
	bool sched_held;   /* gsd_vidsch_hold */
	uint32_t offloads; /* calls running on the thread pool */
	uv_signal_t sigint, sigterm;
	uv_async_t redispatch_async; /* drains `redispatch` */
	gsd_list redispatch;
	uv_timer_t stop_timer;
	int exit_code;
};

/* ---- daemon.c ---- */
/* Handles the call again from the loop, after the current event (a request that waited for
 * an allocation to be free); answered SHUTTING_DOWN once the daemon stops. */
void gsd_redispatch(gsd_daemon *d, gsd_call *c);
int gsd_daemon_init(gsd_daemon *d, const gsd_config *cfg, uv_loop_t *loop);
/* Stops accepting, cancels queued packets, lets running ones settle, flushes the audit. */
void gsd_daemon_stop(gsd_daemon *d);
void gsd_daemon_destroy(gsd_daemon *d);
uint64_t gsd_now_ns(void);
uint64_t gsd_node_now(const gsd_node *n);
gsd_tenant *gsd_tenant_by_token(gsd_daemon *d, const char *token);
gsd_tenant *gsd_tenant_by_name(gsd_daemon *d, const char *name);

/* ---- objects.c: handle tables ---- */
uint64_t gsd_object_register(gsd_daemon *d, gsd_object *o, gsd_obj_type type, gsd_tenant *t);
/* Looks a handle up for a tenant: NULL when absent, of another type, or another tenant's. */
void *gsd_object_get(gsd_daemon *d, uint64_t handle, gsd_obj_type type, const gsd_tenant *t);
void gsd_object_unregister(gsd_daemon *d, gsd_object *o);
void gsd_context_put(gsd_daemon *d, gsd_context *c);
void gsd_allocation_put(gsd_daemon *d, gsd_allocation *a);
void gsd_context_destroy(gsd_daemon *d, gsd_context *c, const char *why);
void gsd_allocation_destroy(gsd_daemon *d, gsd_allocation *a);
void gsd_sync_destroy(gsd_daemon *d, gsd_sync *s);
void gsd_device_destroy(gsd_daemon *d, gsd_device *dev);
void gsd_sync_signal(gsd_daemon *d, gsd_sync *s, uint64_t value);
/* The value rose or values were abandoned: answers CPU waits and wakes GPU waiters. */
void gsd_sync_changed(gsd_daemon *d, gsd_sync *s);
void gsd_audit_context_of(gsd_daemon *d, const gsd_context *c);
void gsd_audit_allocation_of(gsd_daemon *d, const gsd_allocation *a);

/* ---- vidsch.c: queues, engines, interrupts ---- */
int gsd_vidsch_start(gsd_daemon *d, gsd_adapter *a);
void gsd_vidsch_stop(gsd_daemon *d, gsd_adapter *a);
/* Queues a validated packet on its context (takes ownership). */
void gsd_vidsch_queue(gsd_daemon *d, gsd_packet *p);
/* While held, queued work is not started; releasing schedules every node. */
void gsd_vidsch_hold(gsd_daemon *d, bool hold);
/* A context was created, re-prioritised or destroyed: keep the node's queues in step. */
void gsd_vidsch_context_added(gsd_daemon *d, gsd_context *x);
void gsd_vidsch_context_priority(gsd_daemon *d, gsd_context *x, uint32_t cls, int32_t prio);
void gsd_vidsch_context_removed(gsd_daemon *d, gsd_context *x);
/* A sync object's value rose or it is going away: wake the contexts waiting on it. */
void gsd_vidsch_sync_changed(gsd_daemon *d, gsd_sync *s);
void gsd_vidsch_sync_destroyed(gsd_daemon *d, gsd_sync *s);
/* Cancels every queued packet (not yet on an engine) of a context, or of all when ctx NULL. */
void gsd_vidsch_cancel(gsd_daemon *d, gsd_adapter *a, const gsd_context *ctx, const char *why);
/* Records a packet transition: updates its row and appends an audit event. */
void gsd_packet_transition(gsd_daemon *d, gsd_packet *p, int state, const char *detail);
/* Publishes the packet's current state on the PUB socket (SUBMITTED is audited by the
 * acknowledgement path and published by the submit handler with this). */
void gsd_packet_publish(gsd_daemon *d, const gsd_packet *p, const char *detail);
const gsd_retired *gsd_retired_find(const gsd_daemon *d, uint64_t packet);
void gsd_packet_free(gsd_packet *p);
bool gsd_packet_final(int state);

/* ---- residency.c: the memory manager ---- */
#define GSD_SYSMEM_ID 31u /* internal segment id of system memory (0 on the wire) */
int gsd_vidmm_adapter_init(gsd_daemon *d, gsd_adapter *a);
void gsd_vidmm_adapter_fini(gsd_daemon *d, gsd_adapter *a);
/* The device's paging sync object, created with it. 0 or -1 (out of memory). */
int gsd_vidmm_device_init(gsd_daemon *d, gsd_device *dev);
/* Places a new allocation: free room by preference, else system memory (over-commit; made
 * resident when a packet needs it). Never evicts. Returns false when even system memory is
 * full. */
bool gsd_vidmm_place_new(gsd_daemon *d, gsd_allocation *al);
/* The allocation's range goes back to its segment (last reference gone). */
void gsd_vidmm_free(gsd_daemon *d, gsd_allocation *al);
typedef enum gsd_vidmm_result {
	GSD_VIDMM_READY,   /* every allocation is resident and pinned: dispatch */
	GSD_VIDMM_PAGING,  /* paging packets were queued: wait for p->paging_wait */
	GSD_VIDMM_NO_ROOM, /* pinned allocations fill the room now: wait for pins to drop */
	GSD_VIDMM_NEVER,   /* can never fit: why says so */
} gsd_vidmm_result;
gsd_vidmm_result gsd_vidmm_prepare(gsd_daemon *d, gsd_packet *p, char *why, size_t cap);
/* Releases the packet's pins (its run ended: retired, preempted, aborted). */
void gsd_vidmm_unpin(gsd_daemon *d, gsd_packet *p);
/* A paging packet reached a final state. */
void gsd_vidmm_paging_done(gsd_daemon *d, gsd_packet *p);
/* Is the allocation in a segment of its supported set? */
bool gsd_vidmm_resident(const gsd_allocation *al);
/* The wire id of where it lives: 0 for system memory. */
uint32_t gsd_vidmm_segment_id(const gsd_allocation *al);
/* CPU view (always linear): copies bytes out of / into the allocation where it lives now. */
void gsd_vidmm_cpu_read(const gsd_allocation *al, uint64_t offset, uint8_t *out, uint64_t n);
void gsd_vidmm_cpu_write(gsd_allocation *al, uint64_t offset, const uint8_t *in, uint64_t n);
/* Client requests: move to a segment (NULL = system memory) with the given kind
 * (Gpusched__V1__MoveKind). Returns 0, 1 when already there, or a status with msg. */
int gsd_vidmm_move_to(gsd_daemon *d, gsd_allocation *al, gsd_segment *dst, uint32_t want_flags,
                      int kind, const char *reason, char *msg, size_t cap);
/* Makes allocations (of one adapter) resident for a MakeResident request, all or none.
 * Returns OK with *moved, or a status with msg (NOT_RESIDENT_TOGETHER when they can never
 * be resident together, OUT_OF_MEMORY when the room is held by packets now). */
int gsd_vidmm_make_resident(gsd_daemon *d, gsd_allocation **als, size_t n, uint32_t *moved,
                            char *msg, size_t cap);
gsd_segment *gsd_vidmm_segment_by_id(gsd_adapter *a, uint32_t wire_id);

/* ---- handlers.c, h_*.c ---- */
void gsd_handle_request(gsd_daemon *d, gsd_call *c);
/* Looks up the adapter the request names; answers NOT_FOUND and returns NULL if none. */
gsd_adapter *gsd_call_adapter(gsd_call *c);
/* Looks up a handle of the call's tenant on the call's adapter; answers NOT_FOUND (or FAULTED
 * for a faulted context) and returns NULL when it cannot be used. */
void *gsd_call_object(gsd_call *c, uint64_t handle, gsd_obj_type type);
void gsd_rules_adapter_of(const gsd_daemon *d, const gsd_adapter *a, gsd_rules_adapter *out);
void gsd_h_allocation_create(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_destroy(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_query(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_set_priority(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_set_preference(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_read(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_write(gsd_daemon *d, gsd_call *c);
void gsd_h_submit(gsd_daemon *d, gsd_call *c);
void gsd_h_submit_batch(gsd_daemon *d, gsd_call *c);
void gsd_h_packet_wait(gsd_daemon *d, gsd_call *c);
/* Answers a PacketWait with a packet's state (FAULTED answers STATUS_FAULTED). */
void gsd_packet_wait_answer(gsd_call *c, uint64_t packet, int state, uint64_t fence);
void gsd_h_allocation_list(gsd_daemon *d, gsd_call *c);
void gsd_h_make_resident(gsd_daemon *d, gsd_call *c);
void gsd_h_evict(gsd_daemon *d, gsd_call *c);
void gsd_h_transfer(gsd_daemon *d, gsd_call *c);
void gsd_h_history(gsd_daemon *d, gsd_call *c);
/* MovesRequest: the memory manager's moves of the tenant's allocations (h_history.c). */
void gsd_h_moves(gsd_daemon *d, gsd_call *c);
void gsd_h_packet_events(gsd_daemon *d, gsd_call *c);

#endif
