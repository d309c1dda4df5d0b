/*
 * The scheduling policy (server/vidsch/policy.c) driven in process by a mock engine on a
 * virtual clock, the way drm_sched's KUnit tests drive a mock scheduler: contexts with backlogs
 * of packets, one engine that runs whatever the policy picks for as long as the policy's
 * budget allows, and assertions on who ran, when and for how long. No daemon, no threads, no
 * wall time: every run is deterministic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vidsch/policy.h"
#include "wddm.h"

#define MS       1000000ull
#define QUANTUM  (2 * MS)
#define STARVING (40 * MS)
#define MAX_CTX  64

/* A context of the mock: its policy entity and a backlog of packets of equal length. */
typedef struct mock_ctx {
	gsd_sched_entity e;
	uint64_t packet_ns; /* length of each packet */
	uint64_t left_ns;   /* of the packet at the head */
	uint64_t packets;   /* still to run, the head included; UINT64_MAX = endless */
	uint64_t ran_ns;    /* engine time it got */
	uint64_t first_run; /* clock when it first ran (0 = never) */
	uint64_t boosts;    /* runs the starvation rule chose */
	uint64_t budgeted;  /* runs that had a budget */
} mock_ctx;

/* The mock engine of one node. */
typedef struct mock {
	gsd_sched_queue q;
	gsd_sched_params p;
	uint64_t now;
	mock_ctx ctx[MAX_CTX];
	int n;
} mock;

static void mock_init(mock *m)
{
	memset(m, 0, sizeof(*m));
	gsd_policy_queue_init(&m->q);
	m->p = (gsd_sched_params){.quantum_ns = QUANTUM, .starvation_ns = STARVING};
	m->now = 1000 * MS;
}

/* Adds a context, in group g (NULL: none), with a backlog, and queues it. */
static mock_ctx *mock_add_in(mock *m, gsd_sched_group *g, uint32_t cls, int32_t prio,
                             uint32_t weight, uint64_t packet_ns, uint64_t packets)
{
	assert_true(m->n < MAX_CTX);
	mock_ctx *c = &m->ctx[m->n];
	gsd_policy_entity_init(&c->e, cls, prio, weight, (uint64_t)m->n + 1);
	if (g)
		gsd_policy_entity_join(&c->e, g);
	c->packet_ns = packet_ns;
	c->left_ns = packet_ns;
	c->packets = packets;
	m->n++;
	assert_int_equal(gsd_policy_enqueue(&m->q, &c->e, m->now), 0);
	return c;
}

static mock_ctx *mock_add(mock *m, uint32_t cls, int32_t prio, uint32_t weight, uint64_t packet_ns,
                          uint64_t packets)
{
	return mock_add_in(m, NULL, cls, prio, weight, packet_ns, packets);
}

static mock_ctx *ctx_of(gsd_sched_entity *e)
{
	return (mock_ctx *)((char *)e - offsetof(mock_ctx, e));
}

/* One decision and the run it leads to, as the scheduler's dispatch loop does: pick, run the
 * head packet for at most the budget, charge, queue again while work is left. Returns the
 * context that ran, or NULL when nothing is ready. */
static mock_ctx *mock_step(mock *m)
{
	bool boosted = false;
	gsd_sched_entity *e = gsd_policy_pick(&m->q, m->now, &m->p, &boosted);
	if (!e)
		return NULL;
	mock_ctx *c = ctx_of(e);
	uint64_t budget = gsd_policy_budget(&m->q, e, &m->p);
	uint64_t ran = budget && budget < c->left_ns ? budget : c->left_ns;
	if (!c->first_run)
		c->first_run = m->now;
	c->boosts += boosted;
	c->budgeted += budget != 0;
	m->now += ran;
	c->ran_ns += ran;
	c->left_ns -= ran;
	gsd_policy_charge(e, ran);
	if (c->left_ns == 0) {
		if (c->packets != UINT64_MAX)
			c->packets--;
		c->left_ns = c->packet_ns;
	}
	if (c->packets)
		assert_int_equal(gsd_policy_enqueue(&m->q, e, m->now), 0);
	return c;
}

/* Runs until the clock passes `until` or nothing is ready. With fixed shares the engine idles
 * while every ready context's group is throttled: the clock jumps to the next period, as the
 * scheduler's timer would wake it. */
static void mock_run(mock *m, uint64_t until)
{
	while (m->now < until) {
		if (mock_step(m))
			continue;
		uint64_t at = gsd_policy_refill_at(&m->q, &m->p);
		if (!at || at <= m->now)
			break;
		m->now = at;
	}
}

static void mock_fini(mock *m)
{
	for (int i = 0; i < m->n; i++) {
		gsd_policy_dequeue(&m->q, &m->ctx[i].e);
		gsd_policy_entity_fini(&m->ctx[i].e);
	}
	gsd_policy_queue_fini(&m->q);
}

/* A context of the tenant `owner` (its group on the mock's node, of weight group_weight),
 * endless packets of packet_ns, NORMAL. */
static mock_ctx *mock_add_tenant(mock *m, const void *owner, uint32_t group_weight,
                                 uint64_t packet_ns)
{
	gsd_sched_group *g = gsd_policy_group(&m->q, owner, group_weight);
	assert_non_null(g);
	return mock_add_in(m, g, GS_PRIORITY_CLASS_NORMAL, 0, 1, packet_ns, UINT64_MAX);
}

static double share(const mock *m, const mock_ctx *c)
{
	uint64_t total = 0;
	for (int i = 0; i < m->n; i++)
		total += m->ctx[i].ran_ns;
	return total ? (double)c->ran_ns / (double)total : 0;
}

/* The share of the first n contexts from index first. */
static double share_of(const mock *m, int first, int n)
{
	double s = 0;
	for (int i = first; i < first + n; i++)
		s += share(m, &m->ctx[i]);
	return s;
}

/* Contexts of one band share the engine in proportion to their weights, through quantum
 * budgets, however long their packets are. */
static void test_weighted_shares(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *a = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 10 * MS, UINT64_MAX);
	mock_ctx *b = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 3, 7 * MS, UINT64_MAX);
	mock_run(&m, m.now + 10000 * MS);
	assert_true(share(&m, a) > 0.25 - 0.005 && share(&m, a) < 0.25 + 0.005);
	assert_true(share(&m, b) > 0.75 - 0.005 && share(&m, b) < 0.75 + 0.005);
	/* Every run was time-sliced: someone of the band always waited. */
	assert_true(a->budgeted > 0 && b->budgeted > 0);
	mock_fini(&m);
}

/* Tenant groups: a tenant with ten contexts and one with a single context, equal group
 * weights, share the engine 1:1 (not 10:1), and the ten share their half evenly; with group
 * weights 3:1 the shares are 3:1 whichever side has the contexts. */
static void test_tenant_groups_share_per_tenant(void **state)
{
	(void)state;
	static const int many = 10;
	static const struct {
		uint32_t wa, wb;
		double want_a;
	} cases[] = {{1, 1, 0.5}, {3, 1, 0.75}, {1, 3, 0.25}};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		mock m;
		mock_init(&m);
		int ta = 1, tb = 2; /* owners */
		for (int i = 0; i < many; i++)
			mock_add_tenant(&m, &ta, cases[k].wa, 3 * MS);
		mock_ctx *b = mock_add_tenant(&m, &tb, cases[k].wb, 5 * MS);
		mock_run(&m, m.now + 20000 * MS);
		double a = share_of(&m, 0, many);
		if (a < cases[k].want_a - 0.01 || a > cases[k].want_a + 0.01)
			fail_msg("weights %u:%u: tenant A has %.3f, want %.3f", cases[k].wa,
			         cases[k].wb, a, cases[k].want_a);
		assert_true(share(&m, b) > 1 - cases[k].want_a - 0.01);
		for (int i = 0; i < many; i++) {
			double one = share(&m, &m.ctx[i]);
			assert_true(one > cases[k].want_a / many * 0.9 &&
			            one < cases[k].want_a / many * 1.1);
		}
		mock_fini(&m);
	}
	/* Without groups the same contexts share per context: ten against one. */
	mock m;
	mock_init(&m);
	for (int i = 0; i < many; i++)
		mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 3 * MS, UINT64_MAX);
	mock_ctx *b = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 5 * MS, UINT64_MAX);
	mock_run(&m, m.now + 20000 * MS);
	assert_true(share(&m, b) > 1.0 / 11 - 0.01 && share(&m, b) < 1.0 / 11 + 0.01);
	mock_fini(&m);
}

/* Shares count per tenant for 2, 4 and 8 tenants of unequal weights (tenant i has weight i + 1
 * and 1 to 3 contexts), while half of them go idle and come back: each window, every busy
 * tenant gets its weight's part of the busy ones' within a point, and one back from idle banks
 * no credit. Then 50 contexts against 1 at equal weights: half each, not 50 to 1. */
static void test_tenant_shares_2_4_8_idle_and_back(void **state)
{
	(void)state;
	static const int counts[] = {2, 4, 8};
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		int n = counts[k];
		mock m;
		mock_init(&m);
		int owner[8], first[9];
		for (int t = 0; t < n; t++) {
			first[t] = m.n;
			for (int c = 0; c <= t % 3; c++)
				mock_add_tenant(&m, &owner[t], (uint32_t)t + 1,
				                (2 + (uint64_t)c) * MS);
		}
		first[n] = m.n;
		/* Three windows: all busy, odd tenants idle, all busy again. */
		for (int phase = 0; phase < 3; phase++) {
			if (phase > 0)
				for (int t = 1; t < n; t += 2)
					for (int i = first[t]; i < first[t + 1]; i++) {
						mock_ctx *c = &m.ctx[i];
						if (phase == 1) {
							gsd_policy_dequeue(&m.q, &c->e);
							c->packets = 0;
						} else {
							c->packets = UINT64_MAX;
							assert_int_equal(gsd_policy_enqueue(&m.q,
							                                    &c->e,
							                                    m.now),
							                 0);
						}
					}
			uint64_t before[MAX_CTX], total = 0;
			for (int i = 0; i < m.n; i++)
				before[i] = m.ctx[i].ran_ns;
			mock_run(&m, m.now + 10000 * MS);
			uint32_t wsum = 0;
			for (int t = 0; t < n; t++)
				wsum += phase == 1 && t % 2 ? 0 : (uint32_t)t + 1;
			for (int i = 0; i < m.n; i++)
				total += m.ctx[i].ran_ns - before[i];
			for (int t = 0; t < n; t++) {
				uint64_t got = 0;
				for (int i = first[t]; i < first[t + 1]; i++)
					got += m.ctx[i].ran_ns - before[i];
				double want = phase == 1 && t % 2 ? 0 : (double)(t + 1) / wsum;
				double have = (double)got / (double)total;
				if (have < want - 0.01 || have > want + 0.01)
					fail_msg("%d tenants, window %d: tenant %d (weight %d) had "
					         "%.4f,"
					         " want %.4f",
					         n, phase, t, t + 1, have, want);
			}
		}
		mock_fini(&m);
	}
	mock m;
	mock_init(&m);
	int ta = 1, tb = 2;
	for (int i = 0; i < 50; i++)
		mock_add_tenant(&m, &ta, 1, 3 * MS);
	mock_ctx *b = mock_add_tenant(&m, &tb, 1, 3 * MS);
	mock_run(&m, m.now + 20000 * MS);
	if (share(&m, b) < 0.49 || share(&m, b) > 0.51)
		fail_msg("one context against 50 of another tenant got %.3f, want 0.5",
		         share(&m, b));
	mock_fini(&m);
}

/* A group given a new weight (an admin changed the tenant's share) is charged by it from its
 * next run: 1:1, then 3:1 over the following window. */
static void test_tenant_group_reweigh(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	int ta = 1, tb = 2;
	mock_ctx *a = mock_add_tenant(&m, &ta, 1, 2 * MS);
	mock_ctx *b = mock_add_tenant(&m, &tb, 1, 2 * MS);
	mock_run(&m, m.now + 2000 * MS);
	assert_true(share(&m, a) > 0.49 && share(&m, a) < 0.51);
	gsd_policy_group_reweigh(&m.q, &ta, 3);
	uint64_t a0 = a->ran_ns, b0 = b->ran_ns;
	mock_run(&m, m.now + 4000 * MS);
	double got = (double)(a->ran_ns - a0) / (double)(a->ran_ns - a0 + b->ran_ns - b0);
	if (got < 0.74 || got > 0.76)
		fail_msg("after the reweigh A had %.3f, want 0.75", got);
	mock_fini(&m);
}

/* A tenant that was idle banks no credit: back after a long absence it gets its share from
 * then on, not the engine until it has caught up. */
static void test_tenant_group_no_credit_after_idle(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	int ta = 1, tb = 2;
	mock_ctx *a = mock_add_tenant(&m, &ta, 1, 2 * MS);
	mock_run(&m, m.now + 5000 * MS); /* A alone for 5 s */
	uint64_t a0 = a->ran_ns;
	mock_ctx *b = mock_add_tenant(&m, &tb, 1, 2 * MS);
	uint64_t t0 = m.now;
	mock_run(&m, t0 + 1000 * MS);
	double window = (double)(m.now - t0);
	double sb = (double)b->ran_ns / window, sa = (double)(a->ran_ns - a0) / window;
	if (sb > 0.52 || sa < 0.48)
		fail_msg("after A ran alone, B got %.3f and A %.3f of the next second", sb, sa);
	mock_fini(&m);
}

/* A higher band runs to the end of its work before a lower one gets anything (the lower one
 * does not starve within the limit here: the high work is short). */
static void test_higher_band_first(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *lo = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 1 * MS, 5);
	mock_ctx *hi = mock_add(&m, GS_PRIORITY_CLASS_HIGH, 0, 1, 1 * MS, 5);
	uint64_t t0 = m.now;
	for (int i = 0; i < 5; i++)
		assert_ptr_equal(mock_step(&m), hi);
	assert_int_equal(lo->ran_ns, 0);
	/* Alone in its band and nobody above: never time-sliced. */
	assert_int_equal(hi->budgeted, 0);
	mock_run(&m, UINT64_MAX);
	assert_int_equal(lo->first_run, t0 + 5 * MS);
	assert_int_equal(lo->budgeted, 0);
	mock_fini(&m);
}

/* A context owed progress that waited longer than the starvation limit runs next for one
 * quantum, even with a higher band ready; then the higher band goes on. */
static void test_starvation_boost(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *lo = mock_add(&m, GS_PRIORITY_CLASS_BELOW_NORMAL, 0, 1, 100 * MS, UINT64_MAX);
	mock_ctx *hi = mock_add(&m, GS_PRIORITY_CLASS_HIGH, 0, 1, 1 * MS, UINT64_MAX);
	uint64_t t0 = m.now;
	mock_run(&m, t0 + 1000 * MS);
	/* First run: after waiting at least the limit, at most one high packet later. */
	assert_true(lo->first_run >= t0 + STARVING);
	assert_true(lo->first_run <= t0 + STARVING + 1 * MS);
	assert_true(lo->boosts > 0);
	/* Each boost is one quantum, so the low context gets about quantum / (limit + quantum). */
	double want = (double)QUANTUM / (double)(STARVING + QUANTUM);
	assert_true(share(&m, lo) > want * 0.8 && share(&m, lo) < want * 1.2);
	assert_int_equal(hi->boosts, 0);
	mock_fini(&m);
}

/* IDLE gets no guarantee: it never runs while anything else is ready. */
static void test_idle_never_boosted(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *idle = mock_add(&m, GS_PRIORITY_CLASS_IDLE, 7, 1, 1 * MS, UINT64_MAX);
	mock_ctx *normal = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 1 * MS, 500);
	mock_run(&m, m.now + 499 * MS);
	assert_int_equal(idle->ran_ns, 0);
	assert_int_equal(normal->ran_ns, 499 * MS);
	/* Once the others are done, IDLE runs. */
	mock_run(&m, m.now + 10 * MS);
	assert_true(idle->ran_ns > 0);
	mock_fini(&m);
}

/* REALTIME never yields: not time-sliced in its own band, and nobody is boosted past it. */
static void test_realtime_never_yields(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *normal = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 1 * MS, UINT64_MAX);
	mock_ctx *rt1 = mock_add(&m, GS_PRIORITY_CLASS_REALTIME, 0, 1, 10 * MS, 20);
	mock_ctx *rt2 = mock_add(&m, GS_PRIORITY_CLASS_REALTIME, 0, 1, 10 * MS, 20);
	mock_run(&m, m.now + 400 * MS);
	assert_int_equal(normal->ran_ns, 0);
	assert_int_equal(rt1->budgeted + rt2->budgeted, 0);
	assert_int_equal(rt1->ran_ns + rt2->ran_ns, 400 * MS);
	mock_fini(&m);
}

/* The budget: none alone, one quantum when its band or a higher one waits, none when only
 * lower bands wait. */
static void test_budget(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *a = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, MS, 1);
	gsd_sched_entity *e = gsd_policy_pick(&m.q, m.now, &m.p, NULL);
	assert_ptr_equal(e, &a->e);
	assert_int_equal(gsd_policy_budget(&m.q, e, &m.p), 0);
	mock_ctx *same = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, MS, 1);
	assert_int_equal(gsd_policy_budget(&m.q, e, &m.p), QUANTUM);
	gsd_policy_dequeue(&m.q, &same->e);
	mock_add(&m, GS_PRIORITY_CLASS_BELOW_NORMAL, 7, 1, MS, 1);
	assert_int_equal(gsd_policy_budget(&m.q, e, &m.p), 0);
	mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 1, 1, MS, 1);
	assert_int_equal(gsd_policy_budget(&m.q, e, &m.p), QUANTUM);
	mock_fini(&m);
}

/* What a newcomer does to the run. */
static void test_arrival(void **state)
{
	(void)state;
	gsd_sched_entity run, higher, same, lower, rt, rt_same;
	gsd_policy_entity_init(&run, GS_PRIORITY_CLASS_NORMAL, 0, 1, 1);
	gsd_policy_entity_init(&higher, GS_PRIORITY_CLASS_NORMAL, 1, 1, 2);
	gsd_policy_entity_init(&same, GS_PRIORITY_CLASS_NORMAL, 0, 1, 3);
	gsd_policy_entity_init(&lower, GS_PRIORITY_CLASS_BELOW_NORMAL, 7, 1, 4);
	gsd_policy_entity_init(&rt, GS_PRIORITY_CLASS_REALTIME, 0, 1, 5);
	gsd_policy_entity_init(&rt_same, GS_PRIORITY_CLASS_REALTIME, 0, 1, 6);
	assert_int_equal(gsd_policy_on_arrival(&higher, &run, 0, 0), GSD_POLICY_PREEMPT);
	assert_int_equal(gsd_policy_on_arrival(&higher, &run, QUANTUM, 0), GSD_POLICY_PREEMPT);
	assert_int_equal(gsd_policy_on_arrival(&same, &run, 0, 0), GSD_POLICY_END_SLICE);
	assert_int_equal(gsd_policy_on_arrival(&same, &run, QUANTUM, 0), GSD_POLICY_KEEP);
	assert_int_equal(gsd_policy_on_arrival(&lower, &run, 0, 0), GSD_POLICY_KEEP);
	assert_int_equal(gsd_policy_on_arrival(&rt_same, &rt, 0, 0), GSD_POLICY_KEEP);
	assert_int_equal(gsd_policy_on_arrival(&rt, &run, 0, 0), GSD_POLICY_PREEMPT);

	/* Tenant groups: a newcomer of a group that has had less than the running group will
	 * have once charged preempts; one that has had more, or of the same group, does not;
	 * nothing is preempted on this rule when the running time is not known (0). */
	gsd_sched_queue q;
	gsd_policy_queue_init(&q);
	int ta = 1, tb = 2;
	gsd_sched_group *ga = gsd_policy_group(&q, &ta, 1), *gb = gsd_policy_group(&q, &tb, 1);
	gsd_sched_group *ga2 = gsd_policy_group(&q, &ta, 1);
	assert_ptr_equal(ga, ga2);
	gsd_sched_entity heavy, light, sibling;
	gsd_policy_entity_init(&heavy, GS_PRIORITY_CLASS_NORMAL, 0, 1, 10);
	gsd_policy_entity_init(&light, GS_PRIORITY_CLASS_NORMAL, 0, 1, 11);
	gsd_policy_entity_init(&sibling, GS_PRIORITY_CLASS_NORMAL, 0, 1, 12);
	gsd_policy_entity_join(&heavy, ga);
	gsd_policy_entity_join(&sibling, ga2);
	gsd_policy_entity_join(&light, gb);
	ga->vruntime = 100 * MS * GSD_WEIGHT_SCALE;
	gb->vruntime = 100 * MS * GSD_WEIGHT_SCALE;
	assert_int_equal(gsd_policy_on_arrival(&light, &heavy, 0, 1 * MS), GSD_POLICY_PREEMPT_OWED);
	assert_int_equal(gsd_policy_on_arrival(&light, &heavy, 0, 0), GSD_POLICY_END_SLICE);
	assert_int_equal(gsd_policy_on_arrival(&sibling, &heavy, 0, 1 * MS), GSD_POLICY_END_SLICE);
	gb->vruntime = 102 * MS * GSD_WEIGHT_SCALE; /* b has had more, even counting the run */
	assert_int_equal(gsd_policy_on_arrival(&light, &heavy, 0, 1 * MS), GSD_POLICY_END_SLICE);
	gsd_policy_entity_fini(&heavy);
	gsd_policy_entity_fini(&sibling);
	gsd_policy_entity_fini(&light);
	gsd_policy_queue_fini(&q);
}

/* A context that slept does not bank credit: coming back to a busy band, it shares from then
 * on instead of owning the engine until its key catches up. */
static void test_no_credit_after_sleep(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *a = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 1 * MS, UINT64_MAX);
	mock_run(&m, m.now + 1000 * MS);
	mock_ctx *b = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, 1 * MS, UINT64_MAX);
	uint64_t a0 = a->ran_ns;
	mock_run(&m, m.now + 100 * MS);
	/* Equal weights from b's arrival on: about 50 ms each, give or take a run. */
	assert_true(a->ran_ns - a0 >= 48 * MS && a->ran_ns - a0 <= 52 * MS);
	assert_true(b->ran_ns >= 48 * MS && b->ran_ns <= 52 * MS);
	mock_fini(&m);
}

/* A priority change moves a queued context to its new band at once. */
static void test_set_priority(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *a = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, MS, 1);
	mock_ctx *b = mock_add(&m, GS_PRIORITY_CLASS_NORMAL, 0, 1, MS, 1);
	assert_int_equal(gsd_policy_set_priority(&m.q, &b->e, GS_PRIORITY_CLASS_HIGH, 0, m.now), 0);
	assert_ptr_equal(mock_step(&m), b);
	assert_int_equal(gsd_policy_set_priority(&m.q, &b->e, GS_PRIORITY_CLASS_IDLE, 0, m.now), 0);
	assert_false(gsd_policy_queued(&b->e)); /* b had no work left: not queued again */
	assert_ptr_equal(mock_step(&m), a);
	assert_null(mock_step(&m));
	mock_fini(&m);
}

/* The system band (paging) is above REALTIME and never time-sliced. */
static void test_system_band(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	mock_ctx *rt = mock_add(&m, GS_PRIORITY_CLASS_REALTIME, 7, 1, MS, 3);
	mock_ctx *sys = mock_add(&m, GSD_CLASS_SYSTEM, GSD_PRIORITY_MIN, 1, MS, 3);
	assert_ptr_equal(mock_step(&m), sys);
	assert_ptr_equal(mock_step(&m), sys);
	assert_ptr_equal(mock_step(&m), sys);
	assert_int_equal(sys->budgeted, 0);
	assert_ptr_equal(mock_step(&m), rt);
	assert_false(gsd_policy_owed_progress(GSD_CLASS_SYSTEM));
	assert_false(gsd_policy_time_sliced(GSD_CLASS_SYSTEM));
	mock_fini(&m);
}

/* ---- fixed shares ---- */

#define PERIOD (10 * QUANTUM)

/* Busy tenants get exactly their fractions, however many contexts each opens: 1:3 is 25% and
 * 75% of the engine, ten contexts against one. */
static void test_fixed_shares(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	m.p.period_ns = PERIOD;
	int ta = 1, tb = 2;
	for (int i = 0; i < 10; i++)
		mock_add_tenant(&m, &ta, 1, 3 * MS);
	mock_ctx *b = mock_add_tenant(&m, &tb, 3, 5 * MS);
	uint64_t t0 = m.now;
	mock_run(&m, t0 + 10000 * MS);
	double a = share_of(&m, 0, 10);
	if (a < 0.24 || a > 0.26)
		fail_msg("tenant A (1 of 4) has %.3f of the engine", a);
	assert_true(share(&m, b) > 0.74 && share(&m, b) < 0.76);
	/* Both busy: the engine never idled. */
	uint64_t total = 0;
	for (int i = 0; i < m.n; i++)
		total += m.ctx[i].ran_ns;
	assert_true(total >= m.now - t0 - PERIOD);
	mock_fini(&m);
}

/* A tenant's idle time stays unused: with its neighbour idle (contexts, no work) a busy tenant
 * of share 1 against 3 still gets 25% of the time, and the engine idles the rest. Its first
 * run's budget ends where its part of the period does. */
static void test_fixed_share_idle_unused(void **state)
{
	(void)state;
	mock m;
	mock_init(&m);
	m.p.period_ns = PERIOD;
	int ta = 1, tb = 2;
	mock_ctx *a = mock_add_tenant(&m, &ta, 1, 100 * MS);
	/* B: a group with a context that has nothing to run. */
	gsd_sched_group *gb = gsd_policy_group(&m.q, &tb, 3);
	assert_non_null(gb);
	gsd_sched_entity idle;
	gsd_policy_entity_init(&idle, GS_PRIORITY_CLASS_NORMAL, 0, 1, 99);
	gsd_policy_entity_join(&idle, gb);

	uint64_t t0 = m.now;
	gsd_sched_entity *e = gsd_policy_pick(&m.q, m.now, &m.p, NULL);
	assert_ptr_equal(e, &a->e);
	assert_int_equal(gsd_policy_budget(&m.q, e, &m.p), PERIOD / 4);
	assert_int_equal(gsd_policy_enqueue(&m.q, e, m.now), 0);
	mock_run(&m, t0 + 4000 * MS);
	double busy = (double)a->ran_ns / (double)(m.now - t0);
	if (busy < 0.24 || busy > 0.26)
		fail_msg("tenant A alone got %.3f of the time, want 0.25", busy);
	assert_int_equal(a->boosts, 0);

	/* Work conserving again without the period: A alone has the whole engine. */
	m.p.period_ns = 0;
	uint64_t t1 = m.now, before = a->ran_ns;
	mock_run(&m, t1 + 1000 * MS);
	assert_true(a->ran_ns - before >= m.now - t1 - 100 * MS);
	gsd_policy_entity_fini(&idle);
	mock_fini(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_weighted_shares),
	        cmocka_unit_test(test_tenant_groups_share_per_tenant),
	        cmocka_unit_test(test_tenant_shares_2_4_8_idle_and_back),
	        cmocka_unit_test(test_tenant_group_no_credit_after_idle),
	        cmocka_unit_test(test_tenant_group_reweigh),
	        cmocka_unit_test(test_higher_band_first),
	        cmocka_unit_test(test_starvation_boost),
	        cmocka_unit_test(test_idle_never_boosted),
	        cmocka_unit_test(test_realtime_never_yields),
	        cmocka_unit_test(test_budget),
	        cmocka_unit_test(test_arrival),
	        cmocka_unit_test(test_no_credit_after_sleep),
	        cmocka_unit_test(test_set_priority),
	        cmocka_unit_test(test_system_band),
	        cmocka_unit_test(test_fixed_shares),
	        cmocka_unit_test(test_fixed_share_idle_unused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
