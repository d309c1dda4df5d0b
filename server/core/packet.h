/*
 * Packets: one submission of a DMA buffer, the unit the scheduler queues, runs, preempts,
 * resubmits and audits. Client packets (rpc/h_submit.c) and the memory manager's paging
 * packets (vidmm/) are made by the same constructor.
 *
 * Packet life, checked by gsd_packet_transition against one table (packet.c):
 *
 *   SUBMITTED -> READY -> RUNNING -> COMPLETED
 *                  ^        |  \--> FAULTED (the context faulted; TDR: it hung)
 *                  |        |  \--> ABORTED (an engine reset: innocent ones are resubmitted)
 *                  |        \-----> PREEMPTED
 *                  +-- RESUBMITTED <-- PREEMPTED | ABORTED
 *   CANCELLED from any non-final state while not on an engine; REJECTED (validation failed)
 *   is recorded without ever being queued.
 */
#ifndef GSD_PACKET_H
#define GSD_PACKET_H

#include "audit/audit.h"
#include "core/adapter.h"
#include "core/list.h"
#include "core/tenant.h"
#include "core/waiter.h"
#include "engine/engine.h"

#include "gpusched.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GSD_PS(x) GPUSCHED__V1__PACKET_STATE__PACKET_STATE_##x

typedef struct gsd_allocation gsd_allocation;
typedef struct gsd_kernel gsd_kernel;

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
	/* Whose packet it is (its audit record's tenant): its context's tenant, or for a paging
	 * packet the tenant of the device whose allocation it moves. Set when it is admitted. */
	gsd_tenant *tenant;
	gsd_node *node;
	uint8_t *dma;
	size_t dma_len;
	uint32_t nallocs, npatches, nwaits, nranges;
	gsd_packet_alloc *allocs;
	gsd_packet_patch *patches;
	gsd_sync_point *waits; /* GPU waits: the packet runs once every one is reached */
	gsd_range *ranges;     /* what the engine may touch (paging: source and destination) */
	/* The kernels its DISPATCH commands name, each once (a reference on each), and what
	 * the engine is given of them. */
	uint32_t nkernels;
	gsd_kernel **kernels;
	gsd_exec_kernel *exec_kernels;
	gsd_exec exec;
	gsd_packet_rec rec; /* the audit row, kept current */
	uint64_t audit_seq; /* audit sequence number of its latest queued record */
	gsd_waitq waiters;  /* woken (event: the packet) when it reaches a final state */
	char result[192];   /* backing store of rec.result when the daemon composes it */
	/* ---- scheduler (vidsch/) ---- */
	bool unrecorded;    /* its SUBMITTED record is not committed yet: it may not run */
	bool record_failed; /* it could not be: cancelled unrun (a waiting Submit says so) */
	bool on_engine;
	size_t resume_offset;  /* where its next run starts */
	uint64_t spin_done_us; /* of the SPIN at resume_offset */
	/* When the GPU finished its last run (the daemon's clock; 0: the backend has no GPU
	 * clock): its completion time in history, unless a flip makes it wait for a blank. */
	uint64_t gpu_end_ns;
	bool needs_resubmit; /* preempted or aborted: the next run is a resubmission */
	/* Its node's submission fence (WDDM's SubmissionFenceId: the node counts them): taken at
	 * submission, and again at each resubmission of a render packet. The daemon's own; a
	 * client sees the context's fence (rec.fence). */
	uint64_t node_fence;
	bool flip_waiting; /* executed; completes at the next vertical blank */
	/* When it first headed a context in its node's queue, and what that queue looked like:
	 * the READY record says what it waited behind. */
	uint64_t runnable_ns;
	uint64_t recorded_ns;      /* when its SUBMITTED record was committed (0: not yet) */
	uint64_t ahead_in_context; /* its context's packets not yet ended when it was queued */
	uint64_t dispatches_then;  /* node->dispatches then */
	uint64_t behind_context;   /* the context on the engine then (0: idle) */
	uint32_t behind_class;
	bool behind_foreign; /* that context is another tenant's (its id is not recorded) */
	/* ---- memory manager (vidmm/) ---- */
	bool pinned;           /* its allocations are pinned (prepared .. run ends) */
	uint64_t paging_wait;  /* runs once adapter->paging_done reaches this (0: no wait) */
	uint64_t paging_seq;   /* paging packets: place in the adapter's paging order */
	uint64_t paging_sync;  /* paging packets: the device paging sync handle to signal */
	uint64_t paging_fence; /* ... with this value */
	uint32_t paging_moves; /* render packets: moves made for its latest residency */
	uint64_t room_wait;    /* runs once adapter->room reaches this (found no room) */
};

/* Whose packet p is (p->tenant, or its context's before it was admitted). */
gsd_tenant *gsd_packet_tenant(const gsd_packet *p);

/* The sizes of a packet's arrays; its DMA buffer is copied from dma (may be NULL). */
typedef struct gsd_packet_shape {
	uint32_t nallocs, nranges, npatches, nwaits, nkernels;
	const uint8_t *dma;
	size_t dma_len;
} gsd_packet_shape;

/* One allocation holds the packet and all its arrays (the submit path's hottest malloc),
 * zeroed. NULL: out of memory. */
gsd_packet *gsd_packet_new(const gsd_packet_shape *shape);
void gsd_packet_free(gsd_packet *p);

/* Does a packet in this state never change again? (COMPLETED, FAULTED, ABORTED, CANCELLED,
 * REJECTED: ABORTED is final unless the daemon resubmits it, which it never does for a
 * packet that has left memory.) */
bool gsd_packet_state_final(int state);
/* Is the value a PacketState (UNKNOWN included)? */
bool gsd_packet_state_valid(int state);
/* The state's name ("RUNNING"); "?" for a value out of range. */
const char *gsd_packet_state_name(int state);
/* Can a packet go from one state to the other? (0 = a new packet.) */
bool gsd_packet_transition_legal(int from, int to);
/*
 * Moves the packet to `state`, updating its row, and appends an audit event (and a published
 * event). An illegal transition is a daemon bug: it asserts in debug builds; in release builds
 * it is logged and audited as a note, and the packet goes on in the new state.
 */
void gsd_packet_transition(gsd_daemon *d, gsd_packet *p, int state, const char *detail);
/* Queues a new packet's SUBMITTED record with its allocation list (history by allocation),
 * acknowledged by ack; returns its audit sequence number (0: not queued). */
uint64_t gsd_packet_audit_submitted(gsd_daemon *d, const gsd_packet *p, gsd_audit_ack_fn ack,
                                    void *ack_arg);
/* Publishes the packet's latest record (p->audit_seq): used for a packet that just got its
 * first state (SUBMITTED: acknowledged by the caller's own audit record). */
void gsd_packet_publish(gsd_daemon *d, const gsd_packet *p, const char *detail);

/* Final state of a packet no longer in memory, for PacketWait on old packets. */
typedef struct gsd_retired {
	uint64_t packet;
	uint64_t fence;   /* its context's fence */
	uint64_t context; /* its context (whose completed fence a wait reports while it lives) */
	const gsd_tenant *tenant;
	uint64_t guest;
	int state;
} gsd_retired;

#define GSD_RETIRED_RING 65536

void gsd_retired_record(gsd_daemon *d, const gsd_packet *p);
const gsd_retired *gsd_retired_find(const gsd_daemon *d, uint64_t packet);

#endif
