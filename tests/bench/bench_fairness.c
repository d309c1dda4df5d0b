/*
 * bench_fairness: how evenly the scheduling policy the daemon runs (server/vidsch/policy.c)
 * shares one engine between 8 tenants that saturate it, under each adapter share policy.
 *
 * In process, on a virtual clock, with a mock engine like tests/unit/test_policy.c: tenant i
 * (1..8) has share i and 9 - i contexts (the tenant with the largest share opens the fewest
 * contexts: the case per-context weights got wrong), every context an endless backlog of 3 ms
 * packets, time slices of 2 ms. Each policy runs --seconds of engine time (default 20). For
 * each tenant the share of engine time it got is compared with the policy's promise:
 *
 *   weighted      share_i / sum of shares
 *   equal_share   1/8
 *   best_effort   contexts_i / all contexts (every context for itself)
 *
 * Printed per policy: the largest absolute error in percentage points (target <= 2) and Jain's
 * fairness index of got_i / promised_i (1 = exactly as promised; target >= 0.99). A second
 * run has tenants 5..8 idle for the first half and measures the second half: a tenant coming
 * back gets its promise, not a catch-up. Deterministic: the same figures on every machine.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "vidsch/policy.h"
#include "wddm.h"

#define MS       1000000ull
#define TENANTS  8
#define PACKET   (3 * MS)
#define QUANTUM  (2 * MS)
#define STARVING (40 * MS)

typedef struct mctx {
	gsd_sched_entity e;
	int tenant;
	uint64_t left_ns;
	bool active; /* has work (idle tenants' contexts are not queued) */
} mctx;

typedef struct sim {
	gsd_sched_queue q;
	gsd_sched_params p;
	uint64_t now;
	mctx *ctx;
	int n;
	uint64_t ran[TENANTS];
	int owner[TENANTS]; /* group owners (addresses only) */
} sim;

static int contexts_of(int t)
{
	return TENANTS - t; /* tenant t (0-based) has share t + 1 and 8 - t contexts */
}

static void sim_init(sim *s, int policy)
{
	memset(s, 0, sizeof(*s));
	gsd_policy_queue_init(&s->q);
	s->p = (gsd_sched_params){.quantum_ns = QUANTUM, .starvation_ns = STARVING};
	s->now = 1000 * MS;
	int total = 0;
	for (int t = 0; t < TENANTS; t++)
		total += contexts_of(t);
	s->ctx = calloc((size_t)total, sizeof(*s->ctx));
	if (!s->ctx)
		abort();
	for (int t = 0; t < TENANTS; t++) {
		gsd_sched_group *g = NULL;
		if (policy != GSD_SHARE_BEST_EFFORT)
			g = gsd_policy_group(&s->q, &s->owner[t],
			                     policy == GSD_SHARE_WEIGHTED ? (uint32_t)t + 1 : 1);
		for (int k = 0; k < contexts_of(t); k++) {
			mctx *c = &s->ctx[s->n];
			gsd_policy_entity_init(&c->e, GS_PRIORITY_CLASS_NORMAL, 0, 1,
			                       (uint64_t)s->n + 1);
			if (g) {
				if (k > 0) /* each context holds the group */
					g = gsd_policy_group(&s->q, &s->owner[t], g->weight);
				gsd_policy_entity_join(&c->e, g);
			}
			c->tenant = t;
			c->left_ns = PACKET;
			s->n++;
		}
	}
}

static void sim_activate(sim *s, int tenant_from, int tenant_to)
{
	for (int i = 0; i < s->n; i++) {
		mctx *c = &s->ctx[i];
		if (c->tenant >= tenant_from && c->tenant <= tenant_to && !c->active) {
			c->active = true;
			if (gsd_policy_enqueue(&s->q, &c->e, s->now) != 0)
				abort();
		}
	}
}

/* Runs until the clock has advanced by span. */
static void sim_run(sim *s, uint64_t span)
{
	uint64_t until = s->now + span;
	while (s->now < until) {
		gsd_sched_entity *e = gsd_policy_pick(&s->q, s->now, &s->p, NULL);
		if (!e)
			break;
		mctx *c = (mctx *)((char *)e - offsetof(mctx, e));
		uint64_t budget = gsd_policy_budget(&s->q, e, &s->p);
		uint64_t ran = budget && budget < c->left_ns ? budget : c->left_ns;
		s->now += ran;
		s->ran[c->tenant] += ran;
		c->left_ns -= ran;
		gsd_policy_charge(e, ran);
		if (!c->left_ns)
			c->left_ns = PACKET;
		if (gsd_policy_enqueue(&s->q, e, s->now) != 0)
			abort();
	}
}

static void sim_fini(sim *s)
{
	for (int i = 0; i < s->n; i++) {
		gsd_policy_dequeue(&s->q, &s->ctx[i].e);
		gsd_policy_entity_fini(&s->ctx[i].e);
	}
	gsd_policy_queue_fini(&s->q);
	free(s->ctx);
}

/* What the policy promises tenant t among the tenants first..TENANTS-1 (all active). */
static double promised(int policy, int t, int first)
{
	double num = 0, den = 0;
	for (int u = first; u < TENANTS; u++) {
		double w = policy == GSD_SHARE_WEIGHTED ? u + 1
		           : policy == GSD_SHARE_EQUAL  ? 1
		                                        : contexts_of(u);
		den += w;
		if (u == t)
			num = w;
	}
	return num / den;
}

typedef struct figures {
	double max_err_pp;
	double jain;
} figures;

static figures judge(const uint64_t *ran, int policy, int first)
{
	uint64_t total = 0;
	for (int t = first; t < TENANTS; t++)
		total += ran[t];
	figures f = {0, 0};
	double sum = 0, sq = 0;
	int n = 0;
	for (int t = first; t < TENANTS; t++) {
		double got = total ? (double)ran[t] / (double)total : 0;
		double want = promised(policy, t, first);
		double err = fabs(got - want) * 100;
		if (err > f.max_err_pp)
			f.max_err_pp = err;
		double x = got / want;
		sum += x;
		sq += x * x;
		n++;
	}
	f.jain = sq > 0 ? sum * sum / (n * sq) : 0;
	return f;
}

int main(int argc, char **argv)
{
	double seconds = 20;
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) {
			seconds = strtod(argv[++i], NULL);
		} else {
			fprintf(!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ? stdout
			                                                             : stderr,
			        "Usage: bench_fairness [--seconds S] [--json]\n"
			        "Engine time of 8 saturating tenants (shares 1..8, 8..1 contexts) "
			        "under\n"
			        "each share policy, on a virtual clock: the largest error against "
			        "the\n"
			        "policy's promise (target <= 2 points) and Jain's index (target >= "
			        "0.99).\n"
			        "  --seconds S  engine time simulated per run (default 20, at most "
			        "3600)\n"
			        "  --json       one JSON object per line on stdout, table on "
			        "stderr\n");
			return !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ? 0 : 2;
		}
	}
	if (!(seconds > 0 && seconds <= 3600)) {
		fprintf(stderr, "bench_fairness: --seconds must be in (0, 3600]\n");
		return 2;
	}
	uint64_t span = (uint64_t)(seconds * 1e9);
	static const int policies[] = {GSD_SHARE_WEIGHTED, GSD_SHARE_EQUAL, GSD_SHARE_BEST_EFFORT};
	FILE *t = json ? stderr : stdout;
	fprintf(t,
	        "bench_fairness: 8 tenants (share i, 9 - i contexts), 3 ms packets, 2 ms slices,"
	        " %.0f s of engine time per run\n\n",
	        seconds);
	fprintf(t, "%-12s %-22s %12s %8s\n", "policy", "run", "max err (pp)", "Jain");
	bool ok = true;
	for (size_t k = 0; k < sizeof(policies) / sizeof(policies[0]); k++) {
		int pol = policies[k];
		for (int phase = 0; phase < 2; phase++) {
			sim s;
			sim_init(&s, pol);
			figures f;
			const char *run;
			if (phase == 0) {
				sim_activate(&s, 0, TENANTS - 1);
				sim_run(&s, span);
				f = judge(s.ran, pol, 0);
				run = "all busy";
			} else {
				/* Tenants 5..8 idle for the first half; the second half is
				 * measured. */
				sim_activate(&s, 0, 3);
				sim_run(&s, span / 2);
				sim_activate(&s, 4, TENANTS - 1);
				memset(s.ran, 0, sizeof(s.ran));
				sim_run(&s, span / 2);
				f = judge(s.ran, pol, 0);
				run = "half idle, then back";
			}
			sim_fini(&s);
			ok = ok && f.max_err_pp <= 2 && f.jain >= 0.99;
			fprintf(t, "%-12s %-22s %12.2f %8.4f\n", gsd_share_policy_name(pol), run,
			        f.max_err_pp, f.jain);
			if (json)
				printf("{\"policy\":\"%s\",\"run\":\"%s\",\"max_err_pp\":%.3f,"
				       "\"jain\":%.5f}\n",
				       gsd_share_policy_name(pol),
				       phase ? "idle_then_back" : "all_busy", f.max_err_pp, f.jain);
		}
	}
	fprintf(t, "\ntargets (max err <= 2 pp, Jain >= 0.99): %s\n", ok ? "met" : "MISSED");
	return 0;
}
