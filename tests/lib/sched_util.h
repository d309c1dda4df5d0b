/*
 * Helpers of the scheduler tests (tests/integration/test_sched*.c): daemons started with a JSON
 * configuration, contexts of a given priority, SPIN packets, bounded polling of a packet's
 * events, and the reconstruction of a node's schedule from the audit (gs_packet_events and
 * gs_history): the runs of each packet on the engine, in the order the daemon saw them, with
 * the engine time each consumed.
 *
 * Helpers that "must" succeed fail the calling cmocka test (fail_msg) when they do not.
 */
#ifndef GS_SCHED_UTIL_H
#define GS_SCHED_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

/* Priority classes (D3DKMT_SCHEDULINGPRIORITYCLASS). */
enum {
	CLASS_IDLE = 0,
	CLASS_BELOW_NORMAL = 1,
	CLASS_NORMAL = 2,
	CLASS_ABOVE_NORMAL = 3,
	CLASS_HIGH = 4,
	CLASS_REALTIME = 5,
};

/* ---- daemons ---- */

/* A test daemon with its own configuration file. */
typedef struct sched_daemon {
	gs_testd t;
	itest_config cfg;
	bool running;
} sched_daemon;

/* Writes `json` to a configuration file and starts a daemon with --config (and --clock
 * virtual when virtual_clock); must succeed. */
void sched_daemon_start(sched_daemon *sd, const char *json, bool virtual_clock);
/* Stops the daemon (SIGTERM) and removes its files. Returns its exit status (0 = clean),
 * or 0 when it was not running. Safe to call twice. */
int sched_daemon_stop(sched_daemon *sd);

/* ---- objects ---- */

/* A context on `node` of the given class and priority (paging companion: paging_node);
 * must succeed. */
uint64_t sched_context(gs_client *c, uint64_t device, uint32_t node, uint32_t paging_node,
                       uint32_t priority_class, int32_t priority);

/* Appends a SPIN; must succeed. */
void sched_spin(gs_dmabuf *buf, uint64_t micros, bool nonpreemptible);

/* Waits (bounded) for a packet to reach a final state; returns the state. The status of
 * PacketWait must be `want_rv` (0, or GS_STATUS_FAULTED for a faulted packet). */
gs_packet_state sched_wait_final(gs_client *c, uint64_t packet, int want_rv);

/* The packet's state now (PacketWait with a zero timeout). */
gs_packet_state sched_state_now(gs_client *c, uint64_t packet);

/* ---- the audit ---- */

/* Every event of a packet, oldest first; must succeed. Free with gs_packet_events_free. */
size_t sched_events(gs_client *c, uint64_t packet, gs_packet_event **ev);
/* Index of the first event in `state` at or after `from`, or -1. */
long sched_event_find(const gs_packet_event *ev, size_t n, gs_packet_state state, size_t from);
/* Polls the packet's events (each poll is one round trip to the daemon) until one in `state`
 * shows up or timeout_ms passes. Returns whether it did. */
bool sched_await_event(gs_client *c, uint64_t packet, gs_packet_state state, int timeout_ms);

/* The history records of a device (every packet, newest first); must succeed. */
size_t sched_history_device(gs_client *c, uint64_t device, gs_packet_record **rec);
/* The record of `packet` in recs, or NULL. */
const gs_packet_record *sched_record(const gs_packet_record *recs, size_t n, uint64_t packet);

/* One event of a schedule, with the packet's context and node. */
typedef struct sched_event {
	uint64_t seq;
	uint64_t packet;
	uint64_t context;
	uint32_t node;
	gs_packet_state state;
	uint64_t time_ns; /* wall clock, when audited */
	char *detail;
} sched_event;

/* One stay of a packet on the engine: from its RUNNING event to the event that ended it. */
typedef struct sched_run {
	uint64_t packet;
	uint64_t context;
	uint32_t node;
	uint64_t ready_seq; /* of the READY event that dispatched it */
	uint64_t start_seq;
	uint64_t end_seq;
	gs_packet_state end; /* PREEMPTED, COMPLETED, FAULTED, ABORTED, ... */
	/* Engine time of the run: for a run that was stopped, what its PREEMPTED or ABORTED
	 * event reports; for the run that ended the packet, completed_ns - started_ns of its
	 * history record (started_ns is the start of the packet's last run). */
	uint64_t engine_ns;
	uint64_t wall_ns; /* end event time - RUNNING event time */
} sched_run;

/* What the timeline keeps of a packet's history record. */
typedef struct sched_rec {
	uint64_t packet;
	uint64_t context;
	uint32_t node;
	uint64_t started_ns;
	uint64_t completed_ns;
} sched_rec;

/* The schedule of a set of packets of one daemon (possibly of several tenants): their events
 * merged in audit order (seq, which is daemon-wide), and the runs they make up. */
typedef struct sched_timeline {
	sched_event *ev;
	size_t nev, capev;
	sched_rec *recs;
	size_t nrecs, caprecs;
	sched_run *runs;
	size_t nruns;
} sched_timeline;

void sched_timeline_init(sched_timeline *tl);
/* Adds `packets` of `device`, read through c (a client of their tenant); must succeed. */
void sched_timeline_add(sched_timeline *tl, gs_client *c, uint64_t device, const uint64_t *packets,
                        size_t npackets);
/* Orders the events by seq and derives the runs. */
void sched_timeline_finish(sched_timeline *tl);
void sched_timeline_free(sched_timeline *tl);
const sched_rec *sched_timeline_rec(const sched_timeline *tl, uint64_t packet);

/* Engine ns reported in a PREEMPTED/ABORTED detail ("... after N us of engine time ..."), or
 * UINT64_MAX when the detail has none. */
uint64_t sched_detail_engine_ns(const char *detail);

#endif
