/*
 * gpusched-sim: capacity simulation of many adapters and tenants on a virtual clock.
 *
 * The decisions are the daemon's own code: which context runs, for how long and whether a
 * newcomer preempts the one running come from server/vidsch/policy.c (and runq.c) with the
 * parameters the daemon derives (gsd_policy_params); where an allocation goes and whom it
 * evicts come from server/vidmm/heap.c and paging_plan.c. What the simulator models itself:
 * the arrival of packets (the workload), their engine time, one packet at a time per engine,
 * the engine time paging takes (bytes / the adapter's paging bandwidth), and the placement of
 * tenants on engines. docs/simulation.md says all of it for users.
 *
 * One run is deterministic: the same workload, options and seed give the same result, bit for
 * bit, on the same build (every tenant draws from its own random stream).
 */
#ifndef GS_SIM_H
#define GS_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_CLASSES 16
#define SIM_MAX_ENGINES 100000u /* adapters x nodes: about 5 KiB of scheduler state each */
#define SIM_MAX_TENANTS 1000000u
#define SIM_NAME_MAX    64

/* Distributions of a packet's engine time (values in ns). */
enum { SIM_DIST_FIXED, SIM_DIST_EXPONENTIAL, SIM_DIST_UNIFORM, SIM_DIST_LOGNORMAL };
typedef struct sim_dist {
	int kind;
	double a; /* fixed: the value; exponential: the mean; uniform: min; lognormal: median */
	double b; /* uniform: max; lognormal: sigma */
} sim_dist;

/* How a tenant's packets arrive. */
enum { SIM_ARRIVAL_POISSON, SIM_ARRIVAL_PERIODIC, SIM_ARRIVAL_CLOSED, SIM_ARRIVAL_BURSTS };

/* A class of tenants: what each of them runs. */
typedef struct sim_class {
	char name[SIM_NAME_MAX];
	uint32_t weight; /* how many tenants of every sum(weight) are of this class */
	uint32_t share;  /* the tenant's share (weighted and fixed_share policies) */
	uint32_t priority_class;
	int32_t priority;
	int arrival;
	double rate;        /* poisson, periodic, bursts: packets per second (bursts: while on) */
	uint32_t in_flight; /* closed: packets each tenant keeps submitted */
	uint64_t think_ns;  /* closed: from a completion to the next submission */
	uint64_t on_ns, off_ns; /* bursts */
	sim_dist packet;        /* engine time of one packet, ns */
	uint32_t allocations;   /* the tenant's allocations */
	uint64_t allocation_bytes;
	uint32_t per_packet;     /* allocations each packet references (consecutive, wrapping) */
	uint32_t alloc_priority; /* D3DDDI allocation priority of its allocations */
} sim_class;

typedef struct sim_workload {
	char name[SIM_NAME_MAX];
	/* Every adapter. */
	uint32_t nodes;        /* engines */
	uint64_t memory_bytes; /* its local segment */
	uint64_t paging_bytes_per_s;
	uint32_t time_slice_us;
	uint32_t starvation_ms;
	uint32_t packet_limit; /* packets a tenant may have queued; more are refused */
	uint32_t nclasses;
	sim_class classes[SIM_MAX_CLASSES];
} sim_workload;

/* The workload of a preset ("inference", ...), or NULL. */
const char *sim_preset_json(const char *name);
/* Every preset name, NULL-terminated. */
extern const char *const sim_preset_names[];
/* Reads a workload from JSON text (origin names it in errors). Returns 0, or -1 with err set:
 * "origin: classes[1].arrival.rate: must be above 0". */
int sim_workload_parse(const char *json, const char *origin, sim_workload *w, char *err,
                       size_t cap);
/* A preset's name or a file's path. */
int sim_workload_load(const char *what, sim_workload *w, char *err, size_t cap);

/* How tenants are placed on engines. */
enum { SIM_PLACE_LEAST_LOADED, SIM_PLACE_ROUND_ROBIN };

typedef struct sim_options {
	uint32_t adapters;
	uint32_t tenants;
	int policy; /* GSD_SHARE_* (server/core/config.h) */
	int placement;
	uint64_t duration_ns;
	uint64_t seed;
	/* Called every so often with the simulated time reached (may be NULL). */
	void (*progress)(void *arg, uint64_t sim_ns, uint64_t duration_ns);
	void *progress_arg;
} sim_options;

/* Queue waits (arrival to first run) in log-linear buckets: 16 per power of two, so a
 * percentile is within 1/16 of the true value. */
#define SIM_HIST_SUB     16
#define SIM_HIST_BUCKETS (64 * SIM_HIST_SUB)
typedef struct sim_hist {
	uint64_t count;
	uint64_t n[SIM_HIST_BUCKETS];
} sim_hist;
void sim_hist_add(sim_hist *h, uint64_t v);
/* The p-th percentile (0 < p <= 100), the upper edge of its bucket; 0 when empty. */
uint64_t sim_hist_percentile(const sim_hist *h, double p);

typedef struct sim_engine_result {
	uint32_t adapter, node, tenants;
	uint64_t busy_ns;   /* running packets */
	uint64_t paging_ns; /* paging */
} sim_engine_result;

typedef struct sim_tenant_result {
	uint32_t adapter, node, cls;
	uint64_t demand_ns;   /* engine time of every packet accepted */
	uint64_t received_ns; /* engine time its packets got */
	uint64_t entitled_ns; /* what the policy owes it (docs/simulation.md, Fairness) */
	uint64_t submitted, completed, refused, cancelled, preempted;
} sim_tenant_result;

typedef struct sim_class_result {
	uint32_t tenants;
	uint64_t submitted, completed, refused, cancelled;
	double share_error_mean; /* mean |received - entitled| / entitled */
	sim_hist wait;
} sim_class_result;

typedef struct sim_result {
	uint32_t nengines, ntenants;
	sim_engine_result *engines;
	sim_tenant_result *tenants;
	sim_class_result classes[SIM_MAX_CLASSES];
	uint64_t submitted, completed, refused, cancelled, queued_at_end;
	uint64_t preempt_quantum; /* runs ended by their time slice */
	uint64_t preempt_arrival; /* runs preempted by a newcomer */
	uint64_t paging_in_bytes, paging_out_bytes, evictions, room_waits;
	sim_hist wait;
	/* Fairness over tenants with an entitlement of at least 0.1% of an engine. */
	uint32_t fair_tenants;
	double share_error_mean, share_error_max;
	uint32_t share_error_max_tenant;
	double jain; /* Jain's index of received / entitled */
	double util_mean, util_min, util_max, paging_mean;
	uint64_t events;
} sim_result;

/* Runs one simulation. Returns 0, or -1 with err set (memory, or options out of range). */
int sim_run(const sim_workload *w, const sim_options *o, sim_result *r, char *err, size_t cap);
void sim_result_free(sim_result *r);

#endif
