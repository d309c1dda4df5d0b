/*
 * bench_preempt: how soon a high-priority packet starts when a low-priority one holds the engine.
 *
 * Against a real gpuschedd (default configuration, wall clock, emu backend) it runs two phases
 * with the same high-priority context (class HIGH) on node 0:
 *
 *   idle     the high context submits a one-NOP packet to an idle node and waits for it;
 *   preempt  a low-priority context (class NORMAL) keeps a long preemptible SPIN running on the
 *            same node; before each trial the benchmark polls the history (bounded) until that
 *            packet is RUNNING again, then the high context submits the same one-NOP packet,
 *            which preempts it, and waits for it to complete. The low packet resumes after every
 *            trial and is replaced by a new one when its SPIN is done.
 *
 * The primary figure is the daemon's own: the high packet's started_ns - submitted_ns (history).
 * From the audit events it also splits each preemption into stages: submitted -> low packet
 * PREEMPTED (preempt request, engine stops the SPIN, its interrupt handled) -> high READY
 * (picked and handed to the engine) -> high started (the engine's STARTED interrupt handled).
 * Client-side it reports the time from calling gs_submit to the start (same CLOCK_REALTIME as
 * the daemon's timestamps, same host) and from calling gs_submit to gs_packet_wait answering
 * COMPLETED (CLOCK_MONOTONIC).
 *
 * Each phase stops at --trials measured trials (after --warmup) or --seconds, whichever comes
 * first. A preempt trial in which the low packet was not on the engine after all (it finished in
 * between) is left out and counted. With --json, one JSON object per line on stdout (the table
 * then goes to stderr).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpusched.h"
#include "testd.h"

#define CLASS_NORMAL    2u
#define CLASS_HIGH      4u
#define CALL_TIMEOUT_MS 30000u
#define PACKET_WAIT_MS  10000u
#define LOW_WAIT_MS     10000 /* bound on waiting for the low packet to run again */
#define LOW_MAX_POLLS   100000
#define TARGET_P50_US   200.0
#define TARGET_P99_US   2000.0
#define HISTORY_PAGE    10000u
#define MAX_DAEMON_ARGS 28

typedef struct options {
	uint64_t trials; /* measured trials per phase */
	uint64_t warmup; /* per phase, not measured */
	double seconds;  /* bound of each phase */
	uint64_t low_spin_ms;
	bool json;
	int ndaemon_args;
	const char *daemon_args[MAX_DAEMON_ARGS + 1];
} options;

/* One high-priority submission. */
typedef struct trial {
	uint64_t packet;
	uint64_t call_rt_ns; /* CLOCK_REALTIME just before gs_submit */
	uint64_t client_ns;  /* gs_submit called -> gs_packet_wait answered (CLOCK_MONOTONIC) */
} trial;

enum phase_kind { PH_IDLE, PH_PREEMPT, PH_COUNT };
static const char *const phase_names[PH_COUNT] = {"idle", "preempt"};

/* Figures, each an array of ns over the phase's valid trials. */
enum metric {
	M_START,       /* daemon: submitted_ns -> started_ns (primary) */
	M_CALL_START,  /* client gs_submit call -> daemon started_ns */
	M_CLIENT_DONE, /* client gs_submit call -> COMPLETED answered */
	M_SUB_PRE,     /* daemon: submitted -> low packet PREEMPTED (preempt only) */
	M_PRE_READY,   /* daemon: low PREEMPTED -> high READY (preempt only) */
	M_SUB_READY,   /* daemon: submitted -> READY */
	M_READY_START, /* daemon: READY -> started */
	M_COUNT
};
static const char *const metric_keys[M_COUNT] = {
        "submit_to_start",    "call_to_start",   "call_to_completed", "submit_to_preempted",
        "preempted_to_ready", "submit_to_ready", "ready_to_start"};
static const char *const metric_text[M_COUNT] = {"submitted -> started (daemon)",
                                                 "gs_submit call -> started (client)",
                                                 "gs_submit call -> completed (client)",
                                                 "  submitted -> low PREEMPTED",
                                                 "  low PREEMPTED -> high READY",
                                                 "  submitted -> READY",
                                                 "  READY -> started"};

typedef struct summary {
	size_t n;
	double p50_us, p90_us, p99_us, max_us;
} summary;

typedef struct phase {
	enum phase_kind kind;
	trial *trials;
	size_t ntrials; /* measured (warm-up excluded) */
	double seconds;
	size_t low_packets;   /* low packets submitted (preempt phase) */
	size_t not_preempted; /* trials without a low PREEMPTED in their window */
	size_t missing;       /* trials without a usable history record */
	summary m[M_COUNT];
	int errors;
	char error[256];
} phase;

typedef struct bench {
	const options *o;
	gs_client *c;
	uint64_t device, ctx_low, ctx_high;
	gs_dmabuf nop, spin;
	uint64_t low_packet; /* the low context's packet in flight, 0 if none */
	uint64_t *lows;      /* every low packet submitted */
	size_t nlows, caplows;
} bench;

/* The daemon's clock for packet timestamps. */
static uint64_t real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void phase_fail(phase *ph, const char *what, int rc, const gs_client *c)
{
	if (!ph->errors)
		snprintf(ph->error, sizeof(ph->error), "%s: %s (%s)", what, gs_status_name(rc),
		         c ? gs_client_message(c) : "");
	ph->errors++;
}

/* ---- the low-priority packet ---- */

static int low_submit(bench *b, phase *ph)
{
	if (b->nlows == b->caplows) {
		size_t ncap = b->caplows ? 2 * b->caplows : 16;
		uint64_t *n = realloc(b->lows, ncap * sizeof(*n));
		if (!n) {
			phase_fail(ph, "low packet list", GS_ERR_NOMEM, NULL);
			return -1;
		}
		b->lows = n;
		b->caplows = ncap;
	}
	gs_submit_result res;
	int rc = gs_submit(b->c, b->ctx_low, &b->spin, 0, &res);
	if (rc != 0) {
		phase_fail(ph, "gs_submit (low)", rc, b->c);
		return -1;
	}
	b->low_packet = res.packet;
	b->lows[b->nlows++] = res.packet;
	ph->low_packets++;
	return 0;
}

/* Polls the history (bounded in polls and time) until the low context's packet is RUNNING,
 * submitting a new one whenever the last one finished. Returns 0, or -1 with ph->error set. */
static int low_running(bench *b, phase *ph)
{
	long long deadline = gs_test_now_ms() + LOW_WAIT_MS;
	for (int polls = 0; polls < LOW_MAX_POLLS && gs_test_now_ms() < deadline; polls++) {
		if (!b->low_packet && low_submit(b, ph) != 0)
			return -1;
		gs_history_filter f = {.context = b->ctx_low, .limit = 1};
		gs_packet_record *r;
		size_t n;
		int rc = gs_history(b->c, &f, &r, &n);
		if (rc != 0) {
			phase_fail(ph, "gs_history (low)", rc, b->c);
			return -1;
		}
		gs_packet_state st =
		        n && r[0].packet == b->low_packet ? r[0].state : GS_PACKET_UNKNOWN;
		gs_history_free(r, n);
		if (st == GS_PACKET_RUNNING)
			return 0;
		if (st == GS_PACKET_COMPLETED) {
			b->low_packet = 0;
		} else if (gs_packet_state_is_final(st) || st == GS_PACKET_ABORTED) {
			snprintf(ph->error, sizeof(ph->error), "low packet %" PRIu64 " ended %s",
			         b->low_packet, gs_packet_state_name(st));
			ph->errors++;
			return -1;
		}
	}
	snprintf(ph->error, sizeof(ph->error),
	         "low packet %" PRIu64 " not RUNNING within %d ms / %d polls", b->low_packet,
	         LOW_WAIT_MS, LOW_MAX_POLLS);
	ph->errors++;
	return -1;
}

/* ---- trials ---- */

/* One high-priority NOP: submit, wait for COMPLETED. */
static int high_once(bench *b, phase *ph, trial *t)
{
	gs_submit_result res;
	t->call_rt_ns = real_ns();
	uint64_t t0 = gs_test_mono_ns();
	int rc = gs_submit(b->c, b->ctx_high, &b->nop, 0, &res);
	if (rc != 0) {
		phase_fail(ph, "gs_submit (high)", rc, b->c);
		return -1;
	}
	gs_packet_state st;
	rc = gs_packet_wait(b->c, res.packet, PACKET_WAIT_MS, &st, NULL);
	t->client_ns = gs_test_mono_ns() - t0;
	t->packet = res.packet;
	if (rc != 0) {
		phase_fail(ph, "gs_packet_wait (high)", rc, b->c);
		return -1;
	}
	if (st != GS_PACKET_COMPLETED) {
		snprintf(ph->error, sizeof(ph->error), "high packet %" PRIu64 " ended %s",
		         res.packet, gs_packet_state_name(st));
		ph->errors++;
		return -1;
	}
	return 0;
}

static void run_phase(bench *b, phase *ph)
{
	const options *o = b->o;
	ph->trials = calloc(o->trials ? o->trials : 1, sizeof(*ph->trials));
	if (!ph->trials) {
		phase_fail(ph, "trials", GS_ERR_NOMEM, NULL);
		return;
	}
	double start = gs_test_mono_s();
	double deadline = start + o->seconds;
	for (uint64_t i = 0; i < o->warmup + o->trials && !ph->errors; i++) {
		if (ph->kind == PH_PREEMPT && low_running(b, ph) != 0)
			break;
		trial t;
		if (high_once(b, ph, &t) != 0)
			break;
		if (i >= o->warmup)
			ph->trials[ph->ntrials++] = t;
		if (gs_test_mono_s() >= deadline)
			break;
	}
	ph->seconds = gs_test_mono_s() - start;
}

/* ---- analysis ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int cmp_record(const void *a, const void *b)
{
	uint64_t x = ((const gs_packet_record *)a)->packet;
	uint64_t y = ((const gs_packet_record *)b)->packet;
	return (x > y) - (x < y);
}

static double pct_us(const uint64_t *sorted, size_t n, double p)
{
	if (n == 0)
		return 0;
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)sorted[i] / 1000.0;
}

static void summarize(uint64_t *v, size_t n, summary *s)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	s->n = n;
	s->p50_us = pct_us(v, n, 0.50);
	s->p90_us = pct_us(v, n, 0.90);
	s->p99_us = pct_us(v, n, 0.99);
	s->max_us = n ? (double)v[n - 1] / 1000.0 : 0;
}

/* Every record of a context, sorted by packet id (the history pages newest first). */
static int history_of(gs_client *c, uint64_t context, gs_packet_record **out, size_t *count)
{
	gs_packet_record *all = NULL;
	size_t n = 0;
	uint64_t before = 0;
	*out = NULL;
	*count = 0;
	for (;;) {
		gs_history_filter f = {
		        .context = context, .limit = HISTORY_PAGE, .before_packet = before};
		gs_packet_record *r;
		size_t m;
		int rc = gs_history(c, &f, &r, &m);
		if (rc != 0) {
			gs_history_free(all, n);
			return rc;
		}
		if (m == 0)
			break;
		gs_packet_record *grown = realloc(all, (n + m) * sizeof(*all));
		if (!grown) {
			gs_history_free(r, m);
			gs_history_free(all, n);
			return GS_ERR_NOMEM;
		}
		all = grown;
		memcpy(all + n, r, m * sizeof(*r));
		n += m;
		before = r[m - 1].packet;
		free(r); /* its strings now belong to `all` */
		if (m < HISTORY_PAGE)
			break;
	}
	if (n)
		qsort(all, n, sizeof(*all), cmp_record);
	*out = all;
	*count = n;
	return 0;
}

/* The times of every PREEMPTED event of the low packets, sorted. */
static int preempted_times(bench *b, uint64_t **out, size_t *count)
{
	uint64_t *v = NULL;
	size_t n = 0, cap = 0;
	for (size_t i = 0; i < b->nlows; i++) {
		gs_packet_event *ev;
		size_t m;
		int rc = gs_packet_events(b->c, b->lows[i], &ev, &m);
		if (rc != 0) {
			free(v);
			return rc;
		}
		for (size_t j = 0; j < m; j++) {
			if (ev[j].state != GS_PACKET_PREEMPTED)
				continue;
			if (n == cap) {
				size_t ncap = cap ? 2 * cap : 1024;
				uint64_t *g = realloc(v, ncap * sizeof(*v));
				if (!g) {
					gs_packet_events_free(ev, m);
					free(v);
					return GS_ERR_NOMEM;
				}
				v = g;
				cap = ncap;
			}
			v[n++] = ev[j].time_ns;
		}
		gs_packet_events_free(ev, m);
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_u64);
	*out = v;
	*count = n;
	return 0;
}

/* The first value >= lo in sorted v, or 0 if none is <= hi. */
static uint64_t first_in(const uint64_t *v, size_t n, uint64_t lo, uint64_t hi)
{
	size_t a = 0, z = n;
	while (a < z) {
		size_t mid = a + (z - a) / 2;
		if (v[mid] < lo)
			a = mid + 1;
		else
			z = mid;
	}
	return a < n && v[a] <= hi ? v[a] : 0;
}

static uint64_t span(uint64_t from, uint64_t to)
{
	return to > from ? to - from : 0;
}

static void analyse(phase *ph, const gs_packet_record *recs, size_t nrecs, const uint64_t *pre,
                    size_t npre)
{
	uint64_t *v[M_COUNT];
	size_t nv = 0;
	for (int m = 0; m < M_COUNT; m++)
		v[m] = malloc((ph->ntrials ? ph->ntrials : 1) * sizeof(uint64_t));
	for (int m = 0; m < M_COUNT; m++)
		if (!v[m]) {
			phase_fail(ph, "analysis", GS_ERR_NOMEM, NULL);
			goto out;
		}
	for (size_t i = 0; i < ph->ntrials; i++) {
		const trial *t = &ph->trials[i];
		gs_packet_record key = {.packet = t->packet};
		const gs_packet_record *r = bsearch(&key, recs, nrecs, sizeof(*recs), cmp_record);
		if (!r || !r->submitted_ns || !r->ready_ns || !r->started_ns ||
		    r->started_ns < r->submitted_ns) {
			ph->missing++;
			continue;
		}
		uint64_t p = 0;
		if (ph->kind == PH_PREEMPT) {
			p = first_in(pre, npre, r->submitted_ns, r->ready_ns);
			if (!p) {
				ph->not_preempted++;
				continue;
			}
		}
		v[M_START][nv] = r->started_ns - r->submitted_ns;
		v[M_CALL_START][nv] = span(t->call_rt_ns, r->started_ns);
		v[M_CLIENT_DONE][nv] = t->client_ns;
		v[M_SUB_PRE][nv] = span(r->submitted_ns, p);
		v[M_PRE_READY][nv] = span(p, r->ready_ns);
		v[M_SUB_READY][nv] = span(r->submitted_ns, r->ready_ns);
		v[M_READY_START][nv] = span(r->ready_ns, r->started_ns);
		nv++;
	}
	for (int m = 0; m < M_COUNT; m++)
		summarize(v[m], nv, &ph->m[m]);
out:
	for (int m = 0; m < M_COUNT; m++)
		free(v[m]);
}

/* ---- set-up ---- */

static int bench_open(bench *b, const char *url)
{
	char why[256] = "";
	int rc = gs_connect_ex(url, NULL, &b->c, why, sizeof(why));
	if (rc != 0) {
		fprintf(stderr, "bench: gs_connect %s: %s\n", url, why);
		return -1;
	}
	gs_client_set_timeout(b->c, CALL_TIMEOUT_MS);
	rc = gs_device_create(b->c, "bench-preempt", &b->device);
	gs_context_desc cd;
	if (rc == 0) {
		gs_context_desc_init(&cd, b->device, 0);
		cd.priority_class = CLASS_NORMAL;
		rc = gs_context_create(b->c, &cd, &b->ctx_low, NULL);
	}
	if (rc == 0) {
		gs_context_desc_init(&cd, b->device, 0);
		cd.priority_class = CLASS_HIGH;
		rc = gs_context_create(b->c, &cd, &b->ctx_high, NULL);
	}
	if (rc != 0) {
		fprintf(stderr, "bench: device/contexts: %s (%s)\n", gs_status_name(rc),
		        gs_client_message(b->c));
		return -1;
	}
	gs_dmabuf_init(&b->nop);
	gs_dmabuf_init(&b->spin);
	if (gs_dmabuf_nop(&b->nop) != 0 || gs_dmabuf_spin(&b->spin, b->o->low_spin_ms * 1000u, 0)) {
		fprintf(stderr, "bench: cannot build the DMA buffers\n");
		return -1;
	}
	return 0;
}

static void bench_close(bench *b)
{
	if (b->c) {
		if (b->device)
			gs_device_destroy(b->c, b->device);
		gs_close(b->c);
	}
	gs_dmabuf_free(&b->nop);
	gs_dmabuf_free(&b->spin);
	free(b->lows);
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_preempt [OPTIONS]\n"
	        "Preemption latency through a real gpuschedd (wall clock): a class HIGH context's\n"
	        "one-NOP packet submitted while a class NORMAL context's long preemptible SPIN "
	        "runs\n"
	        "on the same node, against the same submission to an idle node.\n\n"
	        "Options:\n"
	        "  --trials N         measured trials per phase (default 1000)\n"
	        "  --warmup N         unmeasured trials before each phase (default 20)\n"
	        "  --seconds S        time bound of each phase (default 60); whichever bound is\n"
	        "                     reached first ends it\n"
	        "  --low-spin-ms MS   length of the low-priority SPIN (default 2000); a new one "
	        "is\n"
	        "                     submitted whenever the last one is done\n"
	        "  --daemon-arg ARG   pass ARG to gpuschedd (repeatable)\n"
	        "  --json             one JSON object per line on stdout; the table goes to "
	        "stderr\n"
	        "  -h, --help         show this help\n\n"
	        "Targets (from the issue): preempt p50 <= %.0f us, p99 <= %.0f us (daemon's "
	        "submitted -> started).\n"
	        "Exit status: 0 when both phases ran without errors (whether or not the targets "
	        "are met),\n"
	        "1 otherwise, 2 usage.\n",
	        TARGET_P50_US, TARGET_P99_US);
}

static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.trials = 1000, .warmup = 20, .seconds = 60, .low_spin_ms = 2000};
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
		}
		if (!v) {
			fprintf(stderr, "bench: %s needs a value\n", a);
			return -1;
		}
		i++;
		errno = 0;
		if (!strcmp(a, "--trials")) {
			o->trials = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->trials == 0 || o->trials > 1000000)
				goto bad;
		} else if (!strcmp(a, "--warmup")) {
			o->warmup = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->warmup > 100000)
				goto bad;
		} else if (!strcmp(a, "--seconds")) {
			o->seconds = strtod(v, &end);
			if (*end || errno || !(o->seconds > 0 && o->seconds <= 3600))
				goto bad;
		} else if (!strcmp(a, "--low-spin-ms")) {
			o->low_spin_ms = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->low_spin_ms < 10 ||
			    o->low_spin_ms > 600000)
				goto bad;
		} else if (!strcmp(a, "--daemon-arg")) {
			if (o->ndaemon_args >= MAX_DAEMON_ARGS)
				goto bad;
			o->daemon_args[o->ndaemon_args++] = v;
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

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void print_table(FILE *out, const phase *ph, const options *o)
{
	const phase *idle = &ph[PH_IDLE], *pre = &ph[PH_PREEMPT];
	fprintf(out,
	        "\nbench_preempt: HIGH one-NOP packet vs NORMAL %" PRIu64
	        " ms preemptible SPIN on node 0, up to %" PRIu64 " trials (+%" PRIu64
	        " warm-up) or %.0f s per phase, %ld CPUs\n",
	        o->low_spin_ms, o->trials, o->warmup, o->seconds, sysconf(_SC_NPROCESSORS_ONLN));
	for (int k = 0; k < PH_COUNT; k++)
		fprintf(out,
		        "%-8s %zu trials in %.2f s: %zu measured, %zu not preempted (low packet "
		        "not on the engine), %zu without history%s",
		        phase_names[k], ph[k].ntrials, ph[k].seconds, ph[k].m[M_START].n,
		        ph[k].not_preempted, ph[k].missing, k == PH_PREEMPT ? "" : "\n");
	fprintf(out, "; %zu low packets\n\n", pre->low_packets);
	fprintf(out, "%-8s %-38s %9s %9s %9s %9s\n", "phase", "figure (us)", "p50", "p90", "p99",
	        "max");
	static const int rows[PH_COUNT][M_COUNT] = {
	        {M_START, M_SUB_READY, M_READY_START, M_CALL_START, M_CLIENT_DONE, -1, -1},
	        {M_START, M_SUB_PRE, M_PRE_READY, M_READY_START, M_CALL_START, M_CLIENT_DONE, -1}};
	for (int k = 0; k < PH_COUNT; k++)
		for (int j = 0; j < M_COUNT && rows[k][j] >= 0; j++) {
			const summary *s = &ph[k].m[rows[k][j]];
			fprintf(out, "%-8s %-38s %9.1f %9.1f %9.1f %9.1f\n", phase_names[k],
			        metric_text[rows[k][j]], s->p50_us, s->p90_us, s->p99_us,
			        s->max_us);
		}
	const summary *a = &pre->m[M_START], *z = &idle->m[M_START];
	fprintf(out, "%-8s %-38s %9.2f %9.2f %9.2f %9.2f\n", "ratio", "preempt / idle (daemon)",
	        ratio(a->p50_us, z->p50_us), ratio(a->p90_us, z->p90_us),
	        ratio(a->p99_us, z->p99_us), ratio(a->max_us, z->max_us));
	fprintf(out,
	        "\ntargets (preempt, daemon submitted -> started): p50 %.1f us <= %.0f us: %s; "
	        "p99 %.1f us <= %.0f us: %s\n",
	        a->p50_us, TARGET_P50_US, a->n && a->p50_us <= TARGET_P50_US ? "MET" : "MISSED",
	        a->p99_us, TARGET_P99_US, a->n && a->p99_us <= TARGET_P99_US ? "MET" : "MISSED");
	for (int k = 0; k < PH_COUNT; k++)
		if (ph[k].errors)
			fprintf(out, "%s: error: %s\n", phase_names[k], ph[k].error);
}

static void print_json(const phase *ph)
{
	for (int k = 0; k < PH_COUNT; k++) {
		for (int m = 0; m < M_COUNT; m++) {
			if (k == PH_IDLE && (m == M_SUB_PRE || m == M_PRE_READY))
				continue;
			const summary *s = &ph[k].m[m];
			printf("{\"bench\":\"preempt\",\"phase\":\"%s\",\"metric\":\"%s\",\"n\":%"
			       "zu,"
			       "\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f}\n",
			       phase_names[k], metric_keys[m], s->n, s->p50_us, s->p90_us,
			       s->p99_us, s->max_us);
		}
	}
	const summary *a = &ph[PH_PREEMPT].m[M_START], *z = &ph[PH_IDLE].m[M_START];
	printf("{\"bench\":\"preempt_summary\",\"idle_trials\":%zu,\"preempt_trials\":%zu,"
	       "\"not_preempted\":%zu,\"low_packets\":%zu,\"ratio_p50\":%.3f,\"ratio_p99\":%.3f,"
	       "\"target_p50_us\":%.0f,\"target_p99_us\":%.0f,\"p50_met\":%s,\"p99_met\":%s,"
	       "\"errors\":%d}\n",
	       z->n, a->n, ph[PH_PREEMPT].not_preempted, ph[PH_PREEMPT].low_packets,
	       ratio(a->p50_us, z->p50_us), ratio(a->p99_us, z->p99_us), TARGET_P50_US,
	       TARGET_P99_US, a->n && a->p50_us <= TARGET_P50_US ? "true" : "false",
	       a->n && a->p99_us <= TARGET_P99_US ? "true" : "false",
	       ph[PH_IDLE].errors + ph[PH_PREEMPT].errors);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	options o;
	if (parse_args(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	const char *args[MAX_DAEMON_ARGS + 1];
	for (int i = 0; i < o.ndaemon_args; i++)
		args[i] = o.daemon_args[i];
	args[o.ndaemon_args] = NULL;
	gs_testd d;
	if (gs_testd_start(&d, args) != 0) {
		fprintf(stderr, "bench: cannot start gpuschedd\n");
		gs_testd_cleanup(&d);
		return 1;
	}
	fprintf(stderr, "bench: gpuschedd pid %d, %s, audit %s\n", (int)d.pid, d.url, d.db);

	bench b = {.o = &o};
	phase ph[PH_COUNT] = {{.kind = PH_IDLE}, {.kind = PH_PREEMPT}};
	int fail = 0;
	if (bench_open(&b, d.url) != 0) {
		fail = 1;
	} else {
		/* Idle first: no low packet has been submitted yet. */
		run_phase(&b, &ph[PH_IDLE]);
		run_phase(&b, &ph[PH_PREEMPT]);

		gs_packet_record *recs = NULL;
		size_t nrecs = 0;
		uint64_t *pre = NULL;
		size_t npre = 0;
		int rc = history_of(b.c, b.ctx_high, &recs, &nrecs);
		if (rc == 0)
			rc = preempted_times(&b, &pre, &npre);
		if (rc != 0) {
			fprintf(stderr, "bench: reading the history: %s (%s)\n", gs_status_name(rc),
			        gs_client_message(b.c));
			fail = 1;
		} else {
			for (int k = 0; k < PH_COUNT; k++)
				analyse(&ph[k], recs, nrecs, pre, npre);
		}
		gs_history_free(recs, nrecs);
		free(pre);
	}
	/* Destroying the device cancels what is queued; the running low SPIN ends by itself
	 * (at most --low-spin-ms) while the daemon stops. */
	bench_close(&b);
	int st = gs_testd_stop(&d);
	if (st != 0) {
		fprintf(stderr, "bench: gpuschedd exited with status %d\n", st);
		gs_testd_dump_log(&d);
		fail = 1;
	}
	gs_testd_cleanup(&d);

	print_table(o.json ? stderr : stdout, ph, &o);
	if (o.json)
		print_json(ph);
	for (int k = 0; k < PH_COUNT; k++) {
		if (ph[k].errors || ph[k].m[M_START].n == 0)
			fail = 1;
		free(ph[k].trials);
	}
	return fail;
}
