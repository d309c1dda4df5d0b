/*
 * bench_sched_decision: the CPU cost of one scheduling decision as the number of contexts with
 * ready work grows (10, 1,000, 10,000 by default).
 *
 * In process, on the daemon's own code: N gsd_context objects (allocated one by one, as the
 * daemon does) queued in a node's queue by the scheduling policy the daemon runs
 * (server/vidsch/policy.c, linked from gs_server). One decision is exactly what the scheduler
 * does between two runs of a node's engine:
 *
 *   pick     gsd_policy_pick: the oldest ready context if it starves, else the run queue's best;
 *   charge   gsd_policy_charge: engine time to the context and its weighted key;
 *   requeue  gsd_policy_enqueue: band, key, ready_since, FIFO append.
 *
 * The engine time charged per run is one quantum (2 ms, the default) with +-10% deterministic
 * jitter, and the node's clock advances by it, so the starvation rule (40 ms, the default) fires
 * as it would in the daemon. Two layouts of the contexts over the 90 bands:
 *
 *   band    all contexts in one band (class NORMAL, priority 0): one heap of N, the worst case;
 *   spread  classes BELOW_NORMAL..HIGH and priorities -7..+7 drawn at random (60 bands).
 *
 * A third figure isolates the data structure: "runq" is the band layout with the decision cut
 * down to gsd_runq_pop + key update + gsd_runq_insert (no FIFO, no starvation check).
 *
 * For each layout and size: 0.2 s of warm-up, then --reps timed repetitions of --decisions
 * decisions each (CLOCK_MONOTONIC around the whole repetition), bounded by --seconds per size;
 * the figure is the median ns per decision. The target (from the issue) is a ratio
 * 10,000 / 10 <= 2.
 *
 * With --daemon it also times decisions through a real gpuschedd (sched_decision_daemon.c): the
 * daemon's whole per-packet cost with every context ready, of which the run queue is one part.
 * With --json, one JSON object per line on stdout (the table then goes to stderr).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/daemon.h"
#include "vidsch/policy.h"

#include "wddm.h"
#include "testd.h"
#include "sched_decision_daemon.h"

#define QUANTUM_NS    2000000u
#define STARVATION_NS 40000000u
#define MAX_SIZES     16
#define MAX_REPS      101
#define WARMUP_NS     200000000u
#define TARGET_RATIO  2.0
#define MAX_CONTEXTS  1000000u
#define LAYOUTS       3

enum layout { L_BAND, L_SPREAD, L_RUNQ };
static const char *const layout_names[LAYOUTS] = {"band", "spread", "runq"};

typedef struct options {
	size_t sizes[MAX_SIZES];
	int nsizes;
	uint64_t decisions; /* per repetition */
	int reps;
	double seconds; /* bound per layout and size */
	bool layouts[LAYOUTS];
	bool daemon;
	uint64_t daemon_packets;
	bool json;
} options;

typedef struct result {
	enum layout layout;
	size_t contexts;
	int reps;
	double median_ns, min_ns, max_ns;
	double boosted; /* fraction of decisions taken by the starvation rule */
	int error;
} result;

/* The scheduler's view of one node: its queue (vidsch/policy.h) and its clock. */
typedef struct node {
	gsd_sched_queue q;
	gsd_sched_params params;
	uint64_t now; /* the node's clock */
} node;

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* vidsch.c gsd_vidsch_enqueue_ready(), past its checks (the context's head packet may run,
 * nothing is running to preempt). */
static void make_ready(node *n, gsd_context *x)
{
	if (gsd_policy_enqueue(&n->q, &x->sched, n->now) != 0)
		abort(); /* the heaps never shrink: only the set-up can grow them */
}

/* One decision and the run it leads to. Returns whether the starvation rule chose. */
static bool decide(node *n, uint64_t *rng)
{
	bool boosted;
	gsd_sched_entity *e = gsd_policy_pick(&n->q, n->now, &n->params, &boosted);
	/* The run: one quantum, +-10%. */
	uint64_t ns = QUANTUM_NS - QUANTUM_NS / 10 + xorshift(rng) % (QUANTUM_NS / 5 + 1);
	n->now += ns;
	gsd_policy_charge(e, ns);
	make_ready(n, GSD_CONTAINER_OF(e, gsd_context, sched));
	return boosted;
}

/* The run queue alone: pop the best, charge it one quantum, insert it again. */
static bool decide_runq(node *n, uint64_t *rng)
{
	gsd_runq_entry *r = gsd_runq_pop(&n->q.rq);
	gsd_sched_entity *e = GSD_CONTAINER_OF(r, gsd_sched_entity, rq);
	uint64_t ns = QUANTUM_NS - QUANTUM_NS / 10 + xorshift(rng) % (QUANTUM_NS / 5 + 1);
	n->now += ns;
	gsd_policy_charge(e, ns);
	if (gsd_runq_insert(&n->q.rq, r) != 0)
		abort();
	return false;
}

typedef struct world {
	node n;
	gsd_context **ctx;
	size_t count;
} world;

static void world_free(world *w)
{
	for (size_t i = 0; i < w->count; i++)
		free(w->ctx[i]);
	free(w->ctx);
	gsd_policy_queue_fini(&w->n.q);
	memset(w, 0, sizeof(*w));
}

/* N ready contexts: weights 1..4, keys spread over one quantum's worth of weighted time. */
static int world_build(world *w, enum layout l, size_t count, uint64_t *rng)
{
	memset(w, 0, sizeof(*w));
	gsd_policy_queue_init(&w->n.q);
	w->n.params = (gsd_sched_params){.quantum_ns = QUANTUM_NS, .starvation_ns = STARVATION_NS};
	w->ctx = calloc(count, sizeof(*w->ctx));
	if (!w->ctx)
		return -1;
	for (size_t i = 0; i < count; i++) {
		gsd_context *x = calloc(1, sizeof(*x));
		if (!x) {
			world_free(w);
			return -1;
		}
		w->ctx[w->count++] = x;
		x->obj.handle = 1000 + i;
		uint32_t weight = 1u + (uint32_t)(xorshift(rng) % 4);
		uint32_t cls = GS_PRIORITY_CLASS_NORMAL;
		int32_t prio = 0;
		if (l == L_SPREAD) {
			cls = 1u + (uint32_t)(xorshift(rng) % 4);
			prio = GSD_PRIORITY_MIN +
			       (int32_t)(xorshift(rng) % GSD_PRIORITIES_PER_CLASS);
		}
		gsd_policy_entity_init(&x->sched, cls, prio, weight, x->obj.handle);
		x->sched.rq.key = xorshift(rng) % ((uint64_t)QUANTUM_NS * GSD_WEIGHT_SCALE);
		make_ready(&w->n, x);
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void measure(const options *o, enum layout l, size_t count, result *r)
{
	*r = (result){.layout = l, .contexts = count};
	uint64_t rng = 0x9e3779b97f4a7c15ull ^ count;
	world w;
	if (world_build(&w, l, count, &rng) != 0) {
		r->error = 1;
		return;
	}
	double per[MAX_REPS];
	uint64_t boosted = 0, total = 0;
	uint64_t deadline = gs_test_mono_ns() + (uint64_t)(o->seconds * 1e9);
	bool (*once)(node *, uint64_t *) = l == L_RUNQ ? decide_runq : decide;
	/* Warm-up, not counted: caches, branch predictors and the CPU's clock, for at least
	 * WARMUP_NS and one repetition (at most 1000 repetitions). */
	uint64_t warm_until = gs_test_mono_ns() + WARMUP_NS;
	for (int i = 0; i < 1000; i++) {
		for (uint64_t k = 0; k < o->decisions; k++)
			once(&w.n, &rng);
		if (gs_test_mono_ns() >= warm_until)
			break;
	}
	for (int rep = 1; rep <= o->reps; rep++) {
		uint64_t b = 0;
		uint64_t t0 = gs_test_mono_ns();
		for (uint64_t i = 0; i < o->decisions; i++)
			b += once(&w.n, &rng);
		uint64_t t1 = gs_test_mono_ns();
		per[r->reps++] = (double)(t1 - t0) / (double)o->decisions;
		boosted += b;
		total += o->decisions;
		if (t1 >= deadline)
			break;
	}
	if (w.n.q.rq.count != count)
		r->error = 1; /* a lost context: the replica of vidsch is broken */
	world_free(&w);
	if (r->reps == 0)
		return;
	qsort(per, (size_t)r->reps, sizeof(*per), cmp_double);
	r->median_ns =
	        r->reps % 2 ? per[r->reps / 2] : (per[r->reps / 2 - 1] + per[r->reps / 2]) / 2;
	r->min_ns = per[0];
	r->max_ns = per[r->reps - 1];
	r->boosted = total ? (double)boosted / (double)total : 0;
}

/* ---- options ---- */

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_sched_decision [OPTIONS]\n"
	        "Cost of one scheduling decision (vidsch pick + unqueue + charge + requeue) on "
	        "the\n"
	        "daemon's run queue (runq.c) with N contexts ready, in process.\n\n"
	        "Options:\n"
	        "  --sizes LIST       comma-separated context counts (default 10,1000,10000; at "
	        "most %d)\n"
	        "  --decisions N      decisions per repetition (default 200000)\n"
	        "  --reps N           timed repetitions per size, median reported (default 9, at "
	        "most %d)\n"
	        "  --seconds S        time bound per layout and size (default 10); at least one "
	        "repetition runs\n"
	        "  --layout LIST      any of band, spread, runq, comma-separated (default all):\n"
	        "                     band/spread = the full vidsch decision with the contexts in\n"
	        "                     one band / over 60 bands; runq = pop + insert only, one "
	        "band\n"
	        "  --daemon           also time the decisions through a real gpuschedd (backend\n"
	        "                     null, NullRendering NOPs run by the scheduler itself, one\n"
	        "                     SubmitBatch spread over all the contexts; see\n"
	        "                     sched_decision_daemon.c): daemon ns per packet\n"
	        "  --daemon-packets N packets per batch in --daemon (default 20000)\n"
	        "  --json             one JSON object per line on stdout; the table goes to "
	        "stderr\n"
	        "  -h, --help         show this help\n\n"
	        "Target (from the issue): ns per decision at the largest size / at the smallest "
	        "<= %.0f.\n"
	        "Exit status: 0 when every measurement ran (whether or not the target is met), 1 "
	        "otherwise, 2 usage.\n",
	        MAX_SIZES, MAX_REPS - 1, TARGET_RATIO);
}

static int parse_sizes(const char *text, options *o)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", text);
	o->nsizes = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(tok, &end, 10);
		if (*end || errno || tok[0] == '-' || v < 1 || v > MAX_CONTEXTS ||
		    o->nsizes == MAX_SIZES)
			return -1;
		o->sizes[o->nsizes++] = (size_t)v;
	}
	return o->nsizes ? 0 : -1;
}

static int parse_layouts(const char *text, options *o)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", text);
	memset(o->layouts, 0, sizeof(o->layouts));
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "band"))
			o->layouts[L_BAND] = true;
		else if (!strcmp(tok, "spread"))
			o->layouts[L_SPREAD] = true;
		else if (!strcmp(tok, "runq"))
			o->layouts[L_RUNQ] = true;
		else
			return -1;
	}
	return o->layouts[L_BAND] || o->layouts[L_SPREAD] || o->layouts[L_RUNQ] ? 0 : -1;
}

static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.sizes = {10, 1000, 10000},
	               .nsizes = 3,
	               .decisions = 200000,
	               .reps = 9,
	               .seconds = 10,
	               .layouts = {true, true, true},
	               .daemon_packets = 20000};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		} else if (!strcmp(a, "--daemon")) {
			o->daemon = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "bench: %s needs a value\n", a);
			return -1;
		}
		i++;
		errno = 0;
		if (!strcmp(a, "--sizes")) {
			if (parse_sizes(v, o) != 0)
				goto bad;
		} else if (!strcmp(a, "--decisions")) {
			o->decisions = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->decisions == 0 ||
			    o->decisions > 1000000000)
				goto bad;
		} else if (!strcmp(a, "--reps")) {
			long n = strtol(v, &end, 10);
			if (*end || errno || n < 1 || n > MAX_REPS - 1)
				goto bad;
			o->reps = (int)n;
		} else if (!strcmp(a, "--seconds")) {
			o->seconds = strtod(v, &end);
			if (*end || errno || !(o->seconds > 0 && o->seconds <= 3600))
				goto bad;
		} else if (!strcmp(a, "--daemon-packets")) {
			o->daemon_packets = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->daemon_packets < 2 ||
			    o->daemon_packets > 1000000)
				goto bad;
		} else if (!strcmp(a, "--layout")) {
			if (parse_layouts(v, o) != 0)
				goto bad;
		} else {
			fprintf(stderr, "bench: unknown option %s\n", a);
			return -1;
		}
		continue;
	bad:
		fprintf(stderr, "bench: bad value for %s: %s\n", a, v);
		return -1;
	}
	return 0;
}

/* ---- output ---- */

/* The smallest and largest sizes measured for a layout, or -1. */
static void extremes(const result *res, int n, enum layout l, int *lo, int *hi)
{
	*lo = *hi = -1;
	for (int i = 0; i < n; i++) {
		if (res[i].layout != l || res[i].error || res[i].reps == 0)
			continue;
		if (*lo < 0 || res[i].contexts < res[*lo].contexts)
			*lo = i;
		if (*hi < 0 || res[i].contexts > res[*hi].contexts)
			*hi = i;
	}
}

static void print_table(FILE *out, const result *res, int n, const options *o)
{
	fprintf(out,
	        "\nbench_sched_decision: gsd_policy_pick + charge + enqueue (vidsch/policy.c), "
	        "%" PRIu64 " decisions x %d reps (median), quantum %u us, %ld CPUs\n\n",
	        o->decisions, o->reps, QUANTUM_NS / 1000u, sysconf(_SC_NPROCESSORS_ONLN));
	fprintf(out, "%-7s %9s %6s %14s %9s %9s %9s\n", "layout", "contexts", "reps", "ns/decision",
	        "min", "max", "boosted");
	for (int i = 0; i < n; i++) {
		const result *r = &res[i];
		if (r->error) {
			fprintf(out, "%-7s %9zu  (failed)\n", layout_names[r->layout], r->contexts);
			continue;
		}
		fprintf(out, "%-7s %9zu %6d %14.1f %9.1f %9.1f %8.1f%%\n", layout_names[r->layout],
		        r->contexts, r->reps, r->median_ns, r->min_ns, r->max_ns, 100 * r->boosted);
	}
	fprintf(out, "\n");
	for (int l = 0; l < LAYOUTS; l++) {
		int lo, hi;
		extremes(res, n, (enum layout)l, &lo, &hi);
		if (lo < 0 || hi == lo)
			continue;
		double ratio = res[lo].median_ns > 0 ? res[hi].median_ns / res[lo].median_ns : 0;
		fprintf(out, "ratio %s %zu / %zu: %.2f (target <= %.0f: %s)\n", layout_names[l],
		        res[hi].contexts, res[lo].contexts, ratio, TARGET_RATIO,
		        ratio <= TARGET_RATIO ? "MET" : "MISSED");
	}
}

static void print_json(const result *res, int n)
{
	for (int i = 0; i < n; i++) {
		const result *r = &res[i];
		printf("{\"bench\":\"sched_decision\",\"layout\":\"%s\",\"contexts\":%zu,\"reps\":%"
		       "d,"
		       "\"ns_per_decision\":%.2f,\"min_ns\":%.2f,\"max_ns\":%.2f,\"boosted\":%.4f,"
		       "\"errors\":%d}\n",
		       layout_names[r->layout], r->contexts, r->reps, r->median_ns, r->min_ns,
		       r->max_ns, r->boosted, r->error);
	}
	for (int l = 0; l < LAYOUTS; l++) {
		int lo, hi;
		extremes(res, n, (enum layout)l, &lo, &hi);
		if (lo < 0 || hi == lo)
			continue;
		double ratio = res[lo].median_ns > 0 ? res[hi].median_ns / res[lo].median_ns : 0;
		printf("{\"bench\":\"sched_decision_ratio\",\"layout\":\"%s\",\"large\":%zu,"
		       "\"small\":%zu,\"ratio\":%.3f,\"target\":%.1f,\"met\":%s}\n",
		       layout_names[l], res[hi].contexts, res[lo].contexts, ratio, TARGET_RATIO,
		       ratio <= TARGET_RATIO ? "true" : "false");
	}
}

static void print_daemon(FILE *out, const sdd_result *res, int n, bool json)
{
	if (!json) {
		fprintf(out, "\nthrough gpuschedd (backend null, NullRendering NOPs run by the "
		             "scheduler, "
		             "one batch over all contexts; median of reps)\n\n");
		fprintf(out, "%9s %8s %5s %14s %9s %9s %11s %9s\n", "contexts", "packets", "reps",
		        "ns/packet", "min", "max", "batch RTT", "set-up");
		for (int i = 0; i < n; i++) {
			const sdd_result *r = &res[i];
			if (r->error && !r->reps) {
				fprintf(out, "%9zu  failed: %s\n", r->contexts, r->message);
				continue;
			}
			fprintf(out,
			        "%9zu %8" PRIu64 " %5d %14.1f %9.1f %9.1f %9.1fms %8.1fs%s%s\n",
			        r->contexts, r->packets, r->reps, r->median_ns, r->min_ns,
			        r->max_ns, r->client_ms, r->setup_s, r->error ? "  error: " : "",
			        r->error ? r->message : "");
		}
		if (n > 1 && res[0].median_ns > 0 && res[n - 1].median_ns > 0)
			fprintf(out, "\nratio daemon %zu / %zu: %.2f (target <= %.0f: %s)\n",
			        res[n - 1].contexts, res[0].contexts,
			        res[n - 1].median_ns / res[0].median_ns, TARGET_RATIO,
			        res[n - 1].median_ns / res[0].median_ns <= TARGET_RATIO ? "MET"
			                                                                : "MISSED");
		return;
	}
	for (int i = 0; i < n; i++) {
		const sdd_result *r = &res[i];
		printf("{\"bench\":\"sched_decision_daemon\",\"contexts\":%zu,\"packets\":%" PRIu64
		       ",\"reps\":%d,\"ns_per_packet\":%.2f,\"min_ns\":%.2f,\"max_ns\":%.2f,"
		       "\"batch_rtt_ms\":%.3f,\"setup_s\":%.3f,\"errors\":%d}\n",
		       r->contexts, r->packets, r->reps, r->median_ns, r->min_ns, r->max_ns,
		       r->client_ms, r->setup_s, r->error);
	}
}

int main(int argc, char **argv)
{
	options o;
	if (parse_args(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	result res[LAYOUTS * MAX_SIZES];
	int n = 0, fail = 0;
	for (int l = 0; l < LAYOUTS; l++) {
		if (!o.layouts[l])
			continue;
		for (int i = 0; i < o.nsizes; i++) {
			measure(&o, (enum layout)l, o.sizes[i], &res[n]);
			fail |= res[n].error;
			n++;
		}
	}
	sdd_result dres[MAX_SIZES];
	int nd = 0;
	for (int i = 0; o.daemon && i < o.nsizes; i++) {
		sdd_measure(o.sizes[i], o.daemon_packets, o.reps, o.seconds, &dres[nd]);
		fail |= dres[nd].error;
		nd++;
	}
	FILE *out = o.json ? stderr : stdout;
	print_table(out, res, n, &o);
	if (nd)
		print_daemon(out, dres, nd, false);
	if (o.json) {
		print_json(res, n);
		if (nd)
			print_daemon(stdout, dres, nd, true);
	}
	return fail;
}
