/*
 * The daemon's state. Everything here is owned by the loop thread (libuv): no other thread
 * reads or writes these structures. Engine threads see only the gsd_exec they were handed and
 * the segment memory; the audit thread sees only copies.
 *
 * The layers (docs/architecture.md): rpc/ handles requests and calls down into vidsch/ (the
 * scheduler) and vidmm/ (the memory manager), which call down into engine/; audit/ is called
 * by all of them and calls nobody; core/ (this folder) is the model they share. A lower layer
 * tells an upper one about an event through a waiter (core/waiter.h) or one of the hooks
 * below, never by calling it.
 */
#ifndef GSD_DAEMON_H
#define GSD_DAEMON_H

#include "audit/audit.h"
#include "core/adapter.h"
#include "core/config.h"
#include "core/histo.h"
#include "core/hmap.h"
#include "core/list.h"
#include "core/object.h"
#include "core/packet.h"
#include "core/tenant.h"
#include "core/util.h"
#include "core/wire_id.h"

#include "gpusched.pb-c.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define GSD_ST(x) GPUSCHED__V1__STATUS__STATUS_##x

#define GSD_STATS_BODIES   96  /* request kinds counted (Request body numbers, up to 95) */
#define GSD_STATS_STATUSES 128 /* statuses counted */

typedef struct gsd_stats {
	GSD_COUNTERS(GSD_COUNTER_FIELD)
	uint64_t preemptions, resets, bans;
	uint64_t by_request[GSD_STATS_BODIES];  /* decoded requests by body number */
	uint64_t by_status[GSD_STATS_STATUSES]; /* error answers by status */
	gsd_histo submit_latency; /* request received -> answered after its audit commit */
	gsd_histo queue_wait;     /* packet submitted -> started on its engine */
} gsd_stats;

/*
 * What a lower layer tells an upper one without calling it: the upper layers install these at
 * start (server/lifecycle.c). Every one runs on the loop thread.
 */
typedef struct gsd_hooks {
	/* core -> vidsch: a context was made (put it on its node) / is being destroyed (cancel
	 * its packets that are not on an engine, take it off its node). */
	void (*context_attach)(gsd_daemon *d, gsd_context *x);
	void (*context_detach)(gsd_daemon *d, gsd_context *x, const char *why);
	/* core -> vidmm: place a new allocation (false: no room even in system memory); give its
	 * memory back once its last reference is gone. */
	bool (*allocation_place)(gsd_daemon *d, gsd_allocation *al);
	void (*allocation_release)(gsd_daemon *d, gsd_allocation *al);
	/* vidmm -> vidsch: queue the paging packets a plan built (a list of gsd_packet.link), in
	 * order, all before any of them may start. */
	void (*paging_submit)(gsd_daemon *d, gsd_list *packets);
} gsd_hooks;

struct gsd_daemon {
	gsd_config cfg;
	int lock_fd; /* the audit file's lock (<db>.lock, flock) held for the daemon's life; -1 */
	uv_loop_t *loop;
	gsd_hooks hooks;
	gsd_audit *audit;
	struct gsd_rpc *rpc;         /* rpc/ */
	struct gsd_events *events;   /* core/events.h */
	struct gsd_metrics *metrics; /* rpc/metrics.c */
	nng_tls_config *tls;         /* tls+tcp:// listeners (config "tls"); NULL: none */
	uint8_t tls_fingerprint[32]; /* of the TLS material in use (gsd_rpc_tls_prepare) */
	uint32_t nadapters;
	gsd_adapter adapters[GSD_MAX_ADAPTERS];
	uint32_t ntenants;
	gsd_tenant *tenants[GSD_MAX_TENANTS * 2]; /* the live ones, in the order made */
	/* Removed by an admin: out of the table (their slots are free again), kept in memory for
	 * what may still point at them (retired packets, a connection's last token). */
	gsd_tenant *removed_tenants;
	uint64_t next_tenant_id; /* the last id given to an admin-created tenant (audit: tenants) */
	gsd_tenant system_tenant; /* owns the system contexts; never authenticates */
	gsd_hmap objects;         /* handle -> gsd_object */
	gsd_hmap packets;         /* packet id -> live gsd_packet */
	/* Handles are random (new_handle, core/object.c); these two keep a new one off old rows. */
	gsd_handle_check *handles; /* the audit file's contexts and allocations */
	uint64_t handle_floor;     /* no new handle at or below: rows older than the chain */
	uint64_t context_seq;      /* contexts made: their creation order, the policy's tie-break */
	uint64_t next_packet;
	/* Packet ids, fences and audit seqs cross the wire through it (core/wire_id.h). */
	gsd_wire_key wire;
	gsd_retired *retired; /* ring of GSD_RETIRED_RING */
	uint64_t devices, contexts, allocations;
	gsd_stats stats;
	uint64_t use_seq; /* LRU clock of allocations */
	uint64_t start_ns;
	bool stopping;
	/* AdminDrain (rpc/h_admin.c): no new devices or contexts; answered when no packet is left
	 * or at the deadline, then on_drained (set by main) stops the daemon. */
	struct {
		bool on;
		uint64_t started_ns, deadline_ns;
		uint64_t packets_at_start, finished_at_start; /* d->stats.packets_* then */
		gsd_waitq waiters; /* the drain call, woken with its report */
		uv_timer_t timer;
		char who[GSD_NAME_MAX * 2];
	} drain;
	void (*on_drained)(gsd_daemon *d);
	/* Reloads the configuration file (main.c; AdminReload): changes, or -1 with why. */
	int (*on_reload)(gsd_daemon *d, const char *who, char *msg, size_t cap);
	uint32_t sched_held; /* while > 0, queued work is not started (gsd_vidsch_hold) */
	uv_signal_t sigint, sigterm;
	uv_timer_t stop_timer;
};

/* No packet is on any engine (after a stop: the daemon can be destroyed without aborting any;
 * while running: no engine thread is busy, see audit_commit in rpc/call.c). */
bool gsd_daemon_engines_idle(const gsd_daemon *d);

#endif
