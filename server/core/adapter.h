/*
 * Adapters and their nodes: the GPUs the daemon owns. An adapter has segments of memory (the
 * memory manager's, vidmm/) and nodes, each an engine with its own queue (the scheduler's,
 * vidsch/). The fields are grouped by the layer that owns them; the loop thread owns them all.
 */
#ifndef GSD_ADAPTER_H
#define GSD_ADAPTER_H

#include "core/config.h"
#include "core/list.h"
#include "core/wake.h"
#include "engine/engine.h"
#include "vidmm/heap.h"
#include "vidsch/policy.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct gsd_daemon gsd_daemon;
typedef struct gsd_adapter gsd_adapter;
typedef struct gsd_packet gsd_packet;
typedef struct gsd_context gsd_context;
typedef struct gsd_device gsd_device;
typedef struct gsd_sync gsd_sync;

/* Internal segment id of system memory, where evicted allocations live (0 on the wire). */
#define GSD_SYSMEM_ID 31u
/* Where every node's virtual clock starts: 0 means "not reached" in packet records. */
#define GSD_VIRTUAL_EPOCH_NS UINT64_C(1000000000)

typedef struct gsd_node {
	uint32_t index;
	const gsd_node_config *cfg;
	gsd_adapter *adapter;
	gsd_engine *engine;
	/* ---- scheduler (vidsch/) ---- */
	gsd_sched_queue queue; /* contexts with a packet ready to run */
	gsd_list contexts;     /* every live context of this node */
	gsd_packet *running; /* the packet on the engine (one at a time, so it can be preempted) */
	uint32_t inflight;   /* 1 while running != NULL */
	uint64_t run_start;  /* wall ns when running started */
	uint64_t run_budget; /* budget it was given (0 = none) */
	bool in_kick;        /* the dispatch loop is on the stack for this node */
	const char *preempt_reason; /* why a preemption was asked for, NULL if none */
	char preempt_why[112];      /* backing store of preempt_reason when composed */
	uint64_t dispatches;        /* packets sent to the engine so far */
	uint64_t busy_ns;           /* engine time of every run so far */
	uint64_t resets;            /* engine resets (timeout detection and recovery) */
	gsd_packet *tdr_guilty;     /* the packet a reset was issued against */
	uv_timer_t quantum_timer;   /* wall clock: ends an unbudgeted run when others wait */
	uv_timer_t tdr_timer;       /* wall clock: resets the engine when a preemption hangs */
	uv_timer_t refill_timer;    /* fixed_share: wakes the node when the next period begins */
	uint64_t next_fence;
	uint64_t completed_fence;
	uint64_t vtime_ns; /* virtual clock of this node's engine */
	uint64_t queued;   /* packets of this node not yet final */
	/* ---- memory manager (vidmm/) ---- */
	uint64_t switch_for; /* packet a ContextSwitch was queued against */
} gsd_node;

struct gsd_adapter {
	uint32_t id;
	const gsd_adapter_config *cfg;
	const gsd_engine_ops *ops;
	gsd_backend *backend;  /* the device its backend opened (NULL for emu and null) */
	gsd_backend_info info; /* what `gpusched info` shows of that device */
	/* Users' kernels: whether the backend runs them, what they may do, and the modules
	 * made into the backend's objects (gsd_kernel_code, core/object.c), busy and idle. */
	bool kernels;
	gsd_kernel_caps kernel_caps;
	gsd_list kernel_codes;
	uint32_t idle_kernel_codes;
	gsd_daemon *d;
	uint32_t nsegments;
	gsd_segment segments[8];
	bool sysmem_ready; /* sysmem's bookkeeping is initialised */
	gsd_memory memory; /* what the engines may touch, by segment id */
	uint32_t nnodes;
	gsd_node nodes[GSD_MAX_NODES];
	/* ---- scheduler (vidsch/) ---- */
	/* Interrupts posted by engine threads, drained on the loop. */
	gsd_wake irq_async;
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
	/* The system context of each node, which runs the memory manager's paging packets in
	 * the system band, and the device they belong to. */
	gsd_context *paging_ctx[GSD_MAX_NODES];
	gsd_device *sysdev;
	/* Why the engines were last reset, for the records of the innocent packets it aborts. */
	char reset_why[128];
	/* An engine reported the device lost: nothing is dispatched until every node is idle and
	 * the backend has recovered it (vidsch/tdr.c); dead when that failed. */
	bool device_lost, device_dead;
	uint32_t device_losses;
	/* Dead for now: the backend could not recreate the device yet (a dispatch that hung it
	 * still runs) and is asked again every second by recover_timer; back in service then. */
	bool device_retry;
	uint64_t dead_since_ns;
	uv_timer_t recover_timer;
	/* ---- memory manager (vidmm/) ---- */
	gsd_segment sysmem; /* system memory: where evicted allocations live */
	gsd_list
	        residents[GSD_MAX_SEGMENTS]; /* allocations by segment id (sysmem: GSD_SYSMEM_ID) */
	uint32_t paging_node;                /* the configured paging node (requests' default) */
	/* Paging packets of the adapter run one at a time in the order they were built (seq),
	 * so the bytes always follow the heap bookkeeping, which is updated when a move is
	 * planned. paging_done.value is the seq of the last one finished; render packets made
	 * resident by paging wait on it like on a sync object. */
	uint64_t paging_seq;
	gsd_sync *paging_done;
	/* Bumped whenever room may have appeared: packets that found no room wait on it. */
	gsd_sync *room;
	uint64_t pinned_allocs; /* allocations with pins > 0 */
	uint64_t paging_vns;    /* virtual clock: when the last paging packet finished */
	uint64_t paging_packets, paging_bytes, evictions;
};

/* Timestamps of a node's packets: wall time, or the node's virtual engine clock. */
uint64_t gsd_node_now(const gsd_node *n);

#endif
