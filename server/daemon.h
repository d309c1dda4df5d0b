/*
 * The daemon's state. Everything here is owned by the loop thread (libuv): no other thread
 * reads or writes these structures. Engine threads see only the gs_exec they were handed and
 * the segment memory; the audit thread sees only copies.
 */
#ifndef GS_DAEMON_H
#define GS_DAEMON_H

#include "audit.h"
#include "config.h"
#include "engine.h"
#include "hmap.h"
#include "list.h"
#include "rules.h"
#include "runq.h"
#include "vidmm.h"

#include "gpusched.pb-c.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define GS_ST(x) GPUSCHED__V1__STATUS__STATUS_##x
#define GS_PS(x) GPUSCHED__V1__PACKET_STATE__PACKET_STATE_##x

typedef struct gs_daemon gs_daemon;
typedef struct gs_adapter gs_adapter;
typedef struct gs_call gs_call;

typedef struct gs_tenant {
	char name[GS_NAME_MAX];
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
} gs_tenant;

typedef struct gs_packet gs_packet;

typedef struct gs_node {
	uint32_t index;
	const gs_node_config *cfg;
	gs_adapter *adapter;
	gs_engine *engine;
	gs_runq rq;          /* contexts with a packet ready to run */
	gs_list ready_fifo;  /* the same contexts, longest waiting first (starvation) */
	gs_list contexts;    /* every live context of this node */
	gs_packet *running;  /* the packet on the engine (one at a time, so it can be preempted) */
	uint32_t inflight;   /* 1 while running != NULL */
	uint64_t run_start;  /* wall ns when running started */
	uint64_t run_budget; /* budget it was given (0 = none) */
	bool in_kick;        /* kick() is on the stack for this node */
	const char *preempt_reason; /* why a preemption was asked for, NULL if none */
	gs_packet *tdr_guilty;      /* the packet a reset was issued against */
	uv_timer_t quantum_timer;   /* wall clock: ends an unbudgeted run when others wait */
	uv_timer_t tdr_timer;       /* wall clock: resets the engine when a preemption hangs */
	uint64_t next_fence;
	uint64_t completed_fence;
	uint64_t vtime_ns;   /* virtual clock of this node's engine */
	uint64_t queued;     /* packets of this node not yet final */
	uint64_t switch_for; /* packet a ContextSwitch was queued against (memory manager) */
} gs_node;

struct gs_adapter {
	uint32_t id;
	const gs_adapter_config *cfg;
	const gs_engine_ops *ops;
	gs_daemon *d;
	uint32_t nsegments;
	gs_segment segments[8];
	gs_memory memory;
	uint32_t nnodes;
	gs_node nodes[GS_MAX_NODES];
	/* Interrupts posted by engine threads, drained on the loop. */
	uv_async_t irq_async;
	pthread_mutex_t irq_lock;
	gs_irq *irqs;
	size_t nirqs, capirqs;
	/* Emulated display: vertical blanks at cfg refresh rate; Flip packets wait for one. */
	uv_timer_t vblank_timer;
	uint64_t vblank_period_ns;
	uint64_t vblank_epoch_ns; /* wall time of vblank 0 */
	uint64_t vblanks;
	uint64_t vblank_target; /* the blank the timer is armed for */
	uint32_t flips_waiting;
	/* ---- memory manager (residency.c) ---- */
	gs_segment sysmem;                  /* system memory: where evicted allocations live */
	gs_list residents[GS_MAX_SEGMENTS]; /* allocations by segment id (sysmem: GS_SYSMEM_ID) */
	struct gs_context
	        *paging_ctx[GS_MAX_NODES]; /* system context per node for paging buffers */
	struct gs_device *sysdev;          /* the device of those contexts */
	uint32_t paging_node;              /* the configured paging node (requests' default) */
	/* Paging packets of the adapter run one at a time in the order they were built (seq),
	 * so the bytes always follow the heap bookkeeping, which is updated when a move is
	 * planned. paging_done.value is the seq of the last one finished; render packets made
	 * resident by paging wait on it like on a sync object. */
	uint64_t paging_seq;
	struct gs_sync *paging_done;
	/* Bumped whenever pins are released: packets that found no room wait on it. */
	struct gs_sync *room;
	uint64_t pinned_allocs; /* allocations with pins > 0 */
	uint64_t paging_vns;    /* virtual clock: when the last paging packet finished */
	uint64_t paging_packets, paging_bytes, evictions;
};

typedef enum gs_obj_type {
	GS_OBJ_DEVICE = 1,
	GS_OBJ_CONTEXT,
	GS_OBJ_ALLOCATION,
	GS_OBJ_SYNC,
} gs_obj_type;

/* Leading fields of every handle-named object. */
typedef struct gs_object {
	uint64_t handle;
	gs_obj_type type;
	gs_tenant *tenant;
} gs_object;

typedef struct gs_device {
	gs_object obj;
	gs_adapter *adapter;
	char name[GS_NAME_MAX];
	gs_list contexts;
	gs_list allocations;
	gs_list syncs;
	/* The device's paging queue: every paging packet that moves one of its allocations takes
	 * the next fence; the sync (daemon-signalled) reaches it when that packet finishes. */
	struct gs_sync *paging_sync;
	uint64_t paging_fence;
} gs_device;

typedef struct gs_sync gs_sync;

typedef struct gs_context {
	gs_object obj;
	gs_device *dev;
	gs_node *node;
	gs_list dev_link;
	gs_list node_link;
	gs_list pending;    /* its packets not yet final, in submission order; head runs next */
	gs_runq_entry rq;   /* in node->rq while its head packet is ready */
	gs_list ready_link; /* in node->ready_fifo while in node->rq */
	uint64_t ready_since;
	uint32_t weight;    /* share of its band (the tenant's share) */
	uint64_t engine_ns; /* engine time consumed */
	gs_list wait_link;  /* in blocked_on->gpu_waiters while its head packet waits */
	gs_sync *blocked_on;
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
} gs_context;

typedef struct gs_allocation {
	gs_object obj;
	gs_device *dev;
	gs_list dev_link;
	uint64_t size;
	uint32_t supported_segment_set;
	uint32_t segment_preference;
	uint32_t priority;
	uint32_t flags;
	gs_segment *segment; /* NULL when not resident */
	uint64_t offset;
	uint32_t inflight; /* live packets that reference it */
	bool destroyed;
	uint32_t refs;   /* 1 for the handle + 1 per live packet */
	gs_list waiters; /* CPU reads/writes waiting for it to go idle */
	uint64_t created_ns;
	/* Memory manager. */
	gs_list res_link;    /* in adapter->residents[segment id] */
	uint32_t pins;       /* packets ready or running (or being made ready) that hold it */
	gs_list pin_waiters; /* Evict/Transfer requests waiting for pins to drop to 0 */
	uint64_t last_use;   /* d->use_seq when a packet last pinned it (LRU) */
	uint64_t moves;
	uint32_t moving;   /* paging packets queued or running that move it */
	uint64_t move_seq; /* paging seq of its latest move: its bytes are in place once
	                      adapter->paging_done reaches it */
	uint32_t pitch;    /* tiled layout pitch (GS_ALLOC_TILED) */
	uint32_t mark;     /* scratch of gs_res_prepare */
	uint64_t last_use_ns;
	gs_adapter *adapter; /* outlives the device, which may go before the last packet */
} gs_allocation;

struct gs_sync {
	gs_object obj;
	gs_device *dev;
	gs_list dev_link;
	uint64_t value;
	gs_list waiters;     /* CPU waits, sorted by nothing: all are checked on each signal */
	gs_list gpu_waiters; /* contexts whose head packet waits for a value */
	/* A packet that would have signalled values up to this one faulted or was cancelled:
	 * waits for values in (value, abandoned] can never be satisfied. */
	uint64_t abandoned;
	bool daemon_only; /* signalled by the daemon only (a device's paging sync) */
};

typedef struct gs_packet_alloc {
	gs_allocation *alloc;
	bool write;
} gs_packet_alloc;

typedef struct gs_packet_patch {
	uint32_t allocation_index;
	uint32_t patch_offset;
	uint64_t allocation_offset;
} gs_packet_patch;

typedef struct gs_sync_point {
	uint64_t sync;
	uint64_t value;
} gs_sync_point;

struct gs_packet {
	gs_list link; /* its context's pending list */
	gs_context *ctx;
	gs_node *node;
	uint8_t *dma;
	size_t dma_len;
	uint32_t nallocs, npatches;
	gs_packet_alloc *allocs;
	gs_packet_patch *patches;
	gs_range *ranges;
	gs_exec exec;
	gs_packet_rec rec; /* the audit row, kept current */
	gs_list waiters;   /* PacketWait calls */
	bool on_engine;
	char result[192];     /* backing store of rec.result when the daemon composes it */
	gs_sync_point *waits; /* GPU waits: the packet runs once every one is reached */
	uint32_t nwaits;
	size_t resume_offset;  /* where its next run starts */
	uint64_t spin_done_us; /* of the SPIN at resume_offset */
	bool needs_resubmit;   /* preempted or aborted: the next run is a resubmission */
	bool flip_waiting;     /* executed; completes at the next vertical blank */
	/* Memory manager. */
	uint32_t nranges;      /* ranges the engine may touch (paging: source and destination) */
	bool pinned;           /* its allocations are pinned (gs_res_prepare .. run ends) */
	uint64_t paging_wait;  /* runs once adapter->paging_done reaches this (0: no wait) */
	uint64_t paging_seq;   /* paging packets: place in the adapter's paging order */
	uint64_t paging_sync;  /* paging packets: the device paging sync handle to signal */
	uint64_t paging_fence; /* ... with this value */
	uint32_t paging_moves; /* render packets: moves made for its latest residency */
	uint64_t room_wait;    /* runs once adapter->room reaches this (found no room) */
};

/* Final state of a packet no longer in memory, for PacketWait on old packets. */
typedef struct gs_retired {
	uint64_t packet;
	uint64_t fence;
	const gs_tenant *tenant;
	int state;
} gs_retired;

#define GS_RETIRED_RING     65536
#define GS_VIRTUAL_EPOCH_NS UINT64_C(1000000000) /* where every node's virtual clock starts */

typedef struct gs_stats {
	uint64_t requests, errors;
	uint64_t packets_submitted, packets_completed, packets_faulted, packets_cancelled,
	        packets_rejected;
} gs_stats;

typedef struct gs_rpc gs_rpc;

struct gs_daemon {
	gs_config cfg;
	uv_loop_t *loop;
	gs_audit *audit;
	gs_rpc *rpc;
	uint32_t nadapters;
	gs_adapter adapters[GS_MAX_ADAPTERS];
	uint32_t ntenants;
	gs_tenant *tenants[GS_MAX_TENANTS * 2];
	gs_hmap objects; /* handle -> gs_object */
	gs_hmap packets; /* packet id -> live gs_packet */
	uint64_t next_handle;
	uint64_t next_packet;
	gs_retired *retired; /* ring of GS_RETIRED_RING */
	uint64_t devices, contexts, allocations;
	gs_stats stats;
	gs_tenant system_tenant; /* owns the system contexts; never authenticates */
	uint64_t use_seq;        /* LRU clock of allocations */
	uint64_t start_ns;
	bool stopping;
	bool sched_held;   /* gs_vidsch_hold */
	uint32_t offloads; /* calls running on the thread pool */
	uv_signal_t sigint, sigterm;
	uv_async_t redispatch_async; /* drains `redispatch` */
	gs_list redispatch;
	uv_timer_t stop_timer;
	int exit_code;
};

/* ---- daemon.c ---- */
/* Handles the call again from the loop, after the current event (a request that waited for
 * an allocation to be free); answered SHUTTING_DOWN once the daemon stops. */
void gs_redispatch(gs_daemon *d, gs_call *c);
int gs_daemon_init(gs_daemon *d, const gs_config *cfg, uv_loop_t *loop);
/* Stops accepting, cancels queued packets, lets running ones settle, flushes the audit. */
void gs_daemon_stop(gs_daemon *d);
void gs_daemon_destroy(gs_daemon *d);
uint64_t gs_now_ns(void);
uint64_t gs_node_now(const gs_node *n);
gs_tenant *gs_tenant_by_token(gs_daemon *d, const char *token);
gs_tenant *gs_tenant_by_name(gs_daemon *d, const char *name);

/* ---- objects.c: handle tables ---- */
uint64_t gs_object_register(gs_daemon *d, gs_object *o, gs_obj_type type, gs_tenant *t);
/* Looks a handle up for a tenant: NULL when absent, of another type, or another tenant's. */
void *gs_object_get(gs_daemon *d, uint64_t handle, gs_obj_type type, const gs_tenant *t);
void gs_object_unregister(gs_daemon *d, gs_object *o);
void gs_context_put(gs_daemon *d, gs_context *c);
void gs_allocation_put(gs_daemon *d, gs_allocation *a);
void gs_obj_context_destroy(gs_daemon *d, gs_context *c, const char *why);
void gs_obj_allocation_destroy(gs_daemon *d, gs_allocation *a);
void gs_obj_sync_destroy(gs_daemon *d, gs_sync *s);
void gs_obj_device_destroy(gs_daemon *d, gs_device *dev);
void gs_obj_sync_signal(gs_daemon *d, gs_sync *s, uint64_t value);
/* The value rose or values were abandoned: answers CPU waits and wakes GPU waiters. */
void gs_obj_sync_changed(gs_daemon *d, gs_sync *s);
void gs_audit_context_of(gs_daemon *d, const gs_context *c);
void gs_audit_allocation_of(gs_daemon *d, const gs_allocation *a);

/* ---- vidsch.c: queues, engines, interrupts ---- */
int gs_vidsch_start(gs_daemon *d, gs_adapter *a);
void gs_vidsch_stop(gs_daemon *d, gs_adapter *a);
/* Queues a validated packet on its context (takes ownership). */
void gs_vidsch_queue(gs_daemon *d, gs_packet *p);
/* While held, queued work is not started; releasing schedules every node. */
void gs_vidsch_hold(gs_daemon *d, bool hold);
/* A context was created, re-prioritised or destroyed: keep the node's queues in step. */
void gs_vidsch_context_added(gs_daemon *d, gs_context *x);
void gs_vidsch_context_priority(gs_daemon *d, gs_context *x, uint32_t cls, int32_t prio);
void gs_vidsch_context_removed(gs_daemon *d, gs_context *x);
/* A sync object's value rose or it is going away: wake the contexts waiting on it. */
void gs_vidsch_sync_changed(gs_daemon *d, gs_sync *s);
void gs_vidsch_sync_destroyed(gs_daemon *d, gs_sync *s);
/* Cancels every queued packet (not yet on an engine) of a context, or of all when ctx NULL. */
void gs_vidsch_cancel(gs_daemon *d, gs_adapter *a, const gs_context *ctx, const char *why);
/* Records a packet transition: updates its row and appends an audit event. */
void gs_packet_transition(gs_daemon *d, gs_packet *p, int state, const char *detail);
/* Publishes the packet's current state on the PUB socket (SUBMITTED is audited by the
 * acknowledgement path and published by the submit handler with this). */
void gs_packet_publish(gs_daemon *d, const gs_packet *p, const char *detail);
const gs_retired *gs_retired_find(const gs_daemon *d, uint64_t packet);
void gs_packet_free(gs_packet *p);
bool gs_packet_final(int state);

/* ---- residency.c: the memory manager ---- */
#define GS_SYSMEM_ID 31u /* internal segment id of system memory (0 on the wire) */
int gs_res_adapter_init(gs_daemon *d, gs_adapter *a);
void gs_res_adapter_fini(gs_daemon *d, gs_adapter *a);
/* The device's paging sync object, created with it. 0 or -1 (out of memory). */
int gs_res_device_init(gs_daemon *d, gs_device *dev);
/* Places a new allocation: free room by preference, else system memory (over-commit; made
 * resident when a packet needs it). Never evicts. Returns false when even system memory is
 * full. */
bool gs_res_place_new(gs_daemon *d, gs_allocation *al);
/* The allocation's range goes back to its segment (last reference gone). */
void gs_res_free(gs_daemon *d, gs_allocation *al);
typedef enum gs_res_result {
	GS_RES_READY,   /* every allocation is resident and pinned: dispatch */
	GS_RES_PAGING,  /* paging packets were queued: wait for p->paging_wait */
	GS_RES_NO_ROOM, /* pinned allocations fill the room now: wait for pins to drop */
	GS_RES_NEVER,   /* can never fit: why says so */
} gs_res_result;
gs_res_result gs_res_prepare(gs_daemon *d, gs_packet *p, char *why, size_t cap);
/* Releases the packet's pins (its run ended: retired, preempted, aborted). */
void gs_res_unpin(gs_daemon *d, gs_packet *p);
/* A paging packet reached a final state. */
void gs_res_paging_done(gs_daemon *d, gs_packet *p);
/* Is the allocation in a segment of its supported set? */
bool gs_res_resident(const gs_allocation *al);
/* The wire id of where it lives: 0 for system memory. */
uint32_t gs_res_segment_id(const gs_allocation *al);
/* CPU view (always linear): copies bytes out of / into the allocation where it lives now. */
void gs_res_cpu_read(const gs_allocation *al, uint64_t offset, uint8_t *out, uint64_t n);
void gs_res_cpu_write(gs_allocation *al, uint64_t offset, const uint8_t *in, uint64_t n);
/* Client requests: move to a segment (NULL = system memory) with the given kind
 * (Gpusched__V1__MoveKind). Returns 0, 1 when already there, or a status with msg. */
int gs_res_move_to(gs_daemon *d, gs_allocation *al, gs_segment *dst, uint32_t want_flags, int kind,
                   const char *reason, char *msg, size_t cap);
/* Makes allocations (of one adapter) resident for a MakeResident request, all or none.
 * Returns OK with *moved, or a status with msg (NOT_RESIDENT_TOGETHER when they can never
 * be resident together, OUT_OF_MEMORY when the room is held by packets now). */
int gs_res_make_resident(gs_daemon *d, gs_allocation **als, size_t n, uint32_t *moved, char *msg,
                         size_t cap);
gs_segment *gs_res_segment_by_id(gs_adapter *a, uint32_t wire_id);

/* ---- handlers.c, h_*.c ---- */
void gs_handle_request(gs_daemon *d, gs_call *c);
/* Looks up the adapter the request names; answers NOT_FOUND and returns NULL if none. */
gs_adapter *gs_call_adapter(gs_call *c);
/* Looks up a handle of the call's tenant on the call's adapter; answers NOT_FOUND (or FAULTED
 * for a faulted context) and returns NULL when it cannot be used. */
void *gs_call_object(gs_call *c, uint64_t handle, gs_obj_type type);
void gs_rules_adapter_of(const gs_daemon *d, const gs_adapter *a, gs_rules_adapter *out);
void gs_h_allocation_create(gs_daemon *d, gs_call *c);
void gs_h_allocation_destroy(gs_daemon *d, gs_call *c);
void gs_h_allocation_query(gs_daemon *d, gs_call *c);
void gs_h_allocation_set_priority(gs_daemon *d, gs_call *c);
void gs_h_allocation_set_preference(gs_daemon *d, gs_call *c);
void gs_h_allocation_read(gs_daemon *d, gs_call *c);
void gs_h_allocation_write(gs_daemon *d, gs_call *c);
void gs_h_submit(gs_daemon *d, gs_call *c);
void gs_h_submit_batch(gs_daemon *d, gs_call *c);
void gs_h_packet_wait(gs_daemon *d, gs_call *c);
/* Answers a PacketWait with a packet's state (FAULTED answers STATUS_FAULTED). */
void gs_packet_wait_answer(gs_call *c, uint64_t packet, int state, uint64_t fence);
void gs_h_allocation_list(gs_daemon *d, gs_call *c);
void gs_h_make_resident(gs_daemon *d, gs_call *c);
void gs_h_evict(gs_daemon *d, gs_call *c);
void gs_h_transfer(gs_daemon *d, gs_call *c);
void gs_h_history(gs_daemon *d, gs_call *c);
/* MovesRequest: the memory manager's moves of the tenant's allocations (h_history.c). */
void gs_h_moves(gs_daemon *d, gs_call *c);
void gs_h_packet_events(gs_daemon *d, gs_call *c);

#endif
