/*
 * The GPU scheduler (server/vidsch/) against real daemons: what a client can observe of
 * priorities, time slices, preemption and resubmission, starvation, timeout detection and
 * recovery, bans, GPU waits, priority changes and flips (docs/concepts.md).
 *
 * Most tests run on the virtual clock, where a SPIN takes engine time but no wall time and a
 * schedule is a function of the workload alone: they submit their workload as one batch (the
 * daemon queues all of a batch before it schedules any of it) and read the schedule back from
 * the audit: every packet's events in audit order, and its history record with virtual
 * timestamps. The engine time of each run comes from the event that ended it (a PREEMPTED
 * event says how much engine time the run used) or, for the run that completed the packet,
 * from the record (completed_ns - started_ns of its last run).
 *
 * Wall-clock tests synchronise on daemon state only: a packet's RUNNING event (bounded
 * polling), a SIGNAL the packet executes (gs_sync_wait), PacketWait.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.h"
#include "isa.h"
#include "itest.h"
#include "sched_util.h"
#include "testd.h"

/* Every node's virtual clock starts here (server/core/adapter.h GSD_VIRTUAL_EPOCH_NS). */
#define VIRTUAL_EPOCH_NS UINT64_C(1000000000)
#include "wddm.h"

#define MS          UINT64_C(1000000)           /* ns */
#define CMD_NS      UINT64_C(100)               /* virtual engine time of issuing one command */
#define PERIOD_60HZ (UINT64_C(1000000000) / 60) /* ns, as vidsch/display.c computes it */
#define AWAIT_MS    10000                       /* bound of every poll for a packet's state */

/* ---- fixture: up to two daemons and their clients, released by teardown ---- */

#define FX_CLIENTS 8

typedef struct fx {
	sched_daemon d[2];
	gs_client *c[FX_CLIENTS];
	int nc;
} fx;

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	*state = f;
	return f ? 0 : -1;
}

static int teardown(void **state)
{
	fx *f = *state;
	for (int i = 0; i < f->nc; i++)
		gs_close(f->c[i]);
	int rc = 0;
	/* A daemon that does not stop cleanly (or crashed under a sanitizer) fails the test. */
	for (int i = 0; i < 2; i++)
		if (sched_daemon_stop(&f->d[i]) != 0)
			rc = -1;
	free(f);
	return rc;
}

static void fx_start(fx *f, int k, const char *json, bool virtual_clock)
{
	sched_daemon_start(&f->d[k], json, virtual_clock);
}

static gs_client *fx_connect(fx *f, int k, const char *token)
{
	assert_true(f->nc < FX_CLIENTS);
	gs_client *c = itest_connect(&f->d[k].t, token);
	f->c[f->nc++] = c;
	return c;
}

/* A client's view: its device and the adapter's layout. */
typedef struct world {
	gs_client *c;
	itest_layout lay;
	uint64_t dev;
} world;

static void world_open(world *w, fx *f, int k, const char *token, const char *name)
{
	w->c = fx_connect(f, k, token);
	itest_layout_of(w->c, &w->lay);
	assert_true(w->lay.nodes >= 2);
	int rv = gs_device_create(w->c, name, &w->dev);
	if (rv != 0)
		fail_msg("device_create: %s: %s", gs_status_name(rv), gs_client_message(w->c));
}

static uint64_t world_context(world *w, uint32_t node, uint32_t cls, int32_t prio)
{
	return sched_context(w->c, w->dev, node, w->lay.paging_node, cls, prio);
}

static uint64_t world_alloc(world *w, uint64_t size)
{
	gs_allocation_placement p;
	itest_alloc(w->c, w->dev, size, 0, 0, &p);
	return p.allocation;
}

static uint64_t submit_one(gs_client *c, uint64_t ctx, const gs_dmabuf *buf, uint32_t flags,
                           uint64_t *fence)
{
	gs_submit_result res;
	int rv = gs_submit(c, ctx, buf, flags, &res);
	if (rv != 0)
		fail_msg("submit: %s: %s", gs_status_name(rv), gs_client_message(c));
	if (fence)
		*fence = res.fence;
	return res.packet;
}

/* A growing list of packets to submit as one batch; each owns its DMA buffer. */
typedef struct batch {
	gs_dmabuf *bufs;
	gs_submit_desc *desc;
	uint64_t *ids;
	size_t n, cap;
} batch;

static gs_dmabuf *batch_add(batch *b, uint64_t ctx, uint32_t flags)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 32;
		b->bufs = realloc(b->bufs, cap * sizeof(*b->bufs));
		b->desc = realloc(b->desc, cap * sizeof(*b->desc));
		b->ids = realloc(b->ids, cap * sizeof(*b->ids));
		assert_true(b->bufs && b->desc && b->ids);
		b->cap = cap;
	}
	gs_dmabuf_init(&b->bufs[b->n]);
	b->desc[b->n] = (gs_submit_desc){.context = ctx, .submit_flags = flags};
	return &b->bufs[b->n++];
}

static void batch_submit(batch *b, gs_client *c)
{
	gs_submit_result *res = calloc(b->n, sizeof(*res));
	assert_non_null(res);
	for (size_t i = 0; i < b->n; i++)
		b->desc[i].dma = &b->bufs[i];
	int rv = gs_submit_batch(c, b->desc, b->n, res);
	if (rv != 0)
		fail_msg("submit_batch of %zu: %s: %s", b->n, gs_status_name(rv),
		         gs_client_message(c));
	for (size_t i = 0; i < b->n; i++)
		b->ids[i] = res[i].packet;
	free(res);
}

/* Waits for every packet of the batch; each must end in `want`. */
static void batch_wait(batch *b, gs_client *c, gs_packet_state want)
{
	for (size_t i = 0; i < b->n; i++) {
		gs_packet_state st = sched_wait_final(c, b->ids[i], 0);
		if (st != want)
			fail_msg("packet %" PRIu64 " ended %s, expected %s", b->ids[i],
			         gs_packet_state_name(st), gs_packet_state_name(want));
	}
}

static void batch_free(batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		gs_dmabuf_free(&b->bufs[i]);
	free(b->bufs);
	free(b->desc);
	free(b->ids);
	memset(b, 0, sizeof(*b));
}

/* Packets of `b` submitted on context ctx, in order. Returns the count. */
static size_t batch_ids_of(const batch *b, uint64_t ctx, uint64_t *out)
{
	size_t n = 0;
	for (size_t i = 0; i < b->n; i++)
		if (b->desc[i].context == ctx)
			out[n++] = b->ids[i];
	return n;
}

static void expect_bytes(gs_client *c, uint64_t alloc, const uint8_t *want, size_t n,
                         const char *what)
{
	uint8_t *got = malloc(n);
	assert_non_null(got);
	int rv = gs_allocation_read(c, alloc, 0, got, n);
	if (rv != 0)
		fail_msg("%s: read: %s: %s", what, gs_status_name(rv), gs_client_message(c));
	if (memcmp(got, want, n) != 0) {
		size_t i = 0;
		while (got[i] == want[i])
			i++;
		fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, got[i], want[i]);
	}
	free(got);
}

static const char *state_name(gs_packet_state s)
{
	return gs_packet_state_name(s);
}

/* =====================================================================================
 * 1. Determinism on the virtual clock
 * ===================================================================================== */

#define DET_SEED    UINT64_C(0xd15ea5e5ca1ab1e5)
#define DET_CTX     8
#define DET_PACKETS 96
#define DET_ALLOC   16384

static const struct {
	uint32_t node, cls;
	int32_t prio;
} det_ctx[DET_CTX] = {
        {0, CLASS_NORMAL, 0},       {0, CLASS_NORMAL, 0},        {0, CLASS_NORMAL, 2},
        {0, CLASS_ABOVE_NORMAL, 0}, {0, CLASS_BELOW_NORMAL, -3}, {0, CLASS_HIGH, -5},
        {1, CLASS_NORMAL, 0},       {1, CLASS_NORMAL, 0},
};

typedef struct det_result {
	batch b;
	gs_packet_record *recs;
	size_t nrecs;
	sched_timeline tl;
	uint8_t *mem[DET_CTX];
} det_result;

/* Runs the seeded workload on daemon k and reads back its schedule and memory. */
static void det_run(fx *f, int k, det_result *out)
{
	world w;
	world_open(&w, f, k, NULL, "determinism");
	uint64_t ctx[DET_CTX], alloc[DET_CTX];
	for (int i = 0; i < DET_CTX; i++) {
		ctx[i] = world_context(&w, det_ctx[i].node, det_ctx[i].cls, det_ctx[i].prio);
		alloc[i] = world_alloc(&w, DET_ALLOC);
	}
	uint64_t rng = DET_SEED;
	memset(out, 0, sizeof(*out));
	for (int p = 0; p < DET_PACKETS; p++) {
		int x = (int)itest_rand_below(&rng, DET_CTX);
		gs_dmabuf *buf = batch_add(&out->b, ctx[x], 0);
		int ncmds = 1 + (int)itest_rand_below(&rng, 3);
		for (int i = 0; i < ncmds; i++) {
			uint64_t r = itest_rand_below(&rng, 20);
			if (r < 10) {
				sched_spin(buf, 200 + itest_rand_below(&rng, 5800), false);
			} else if (r < 13) {
				sched_spin(buf, 50 + itest_rand_below(&rng, 1450), true);
			} else {
				uint64_t size = 1 + itest_rand_below(&rng, DET_ALLOC);
				uint64_t off = itest_rand_below(&rng, DET_ALLOC - size + 1);
				assert_int_equal(gs_dmabuf_fill(buf, alloc[x], off, size,
				                                (uint32_t)itest_rand(&rng)),
				                 0);
			}
		}
	}
	batch_submit(&out->b, w.c);
	batch_wait(&out->b, w.c, GS_PACKET_COMPLETED);
	out->nrecs = sched_history_device(w.c, w.dev, &out->recs);
	assert_int_equal(out->nrecs, DET_PACKETS);
	sched_timeline_init(&out->tl);
	sched_timeline_add(&out->tl, w.c, w.dev, out->b.ids, out->b.n);
	sched_timeline_finish(&out->tl);
	for (int i = 0; i < DET_CTX; i++) {
		out->mem[i] = malloc(DET_ALLOC);
		assert_non_null(out->mem[i]);
		assert_int_equal(gs_allocation_read(w.c, alloc[i], 0, out->mem[i], DET_ALLOC), 0);
	}
}

static void det_free(det_result *r)
{
	batch_free(&r->b);
	gs_history_free(r->recs, r->nrecs);
	sched_timeline_free(&r->tl);
	for (int i = 0; i < DET_CTX; i++)
		free(r->mem[i]);
}

/* The events of one node, in audit order. */
static size_t det_node_events(const sched_timeline *tl, uint32_t node, const sched_event **out)
{
	size_t n = 0;
	for (size_t i = 0; i < tl->nev; i++)
		if (tl->ev[i].node == node)
			out[n++] = &tl->ev[i];
	return n;
}

/* Wire ids are opaque and each daemon has its own key, so two runs are compared by the
 * numbers of their audit files: a wire packet id or node fence (in event details) of daemon
 * k, as its file numbers it. */
static uint64_t det_packet(const fx *f, int k, uint64_t wire)
{
	return itest_wire_unmap(f->d[k].t.db, "packet", 0, 0, wire);
}

static uint64_t det_fence(const fx *f, int k, uint32_t node, uint64_t wire)
{
	return itest_wire_unmap(f->d[k].t.db, "fence", 0, node, wire);
}

/* An event's detail with the wire ids it names ("packet N", "fence N" of the event's node)
 * replaced by daemon k's file numbers. */
static void det_detail(const fx *f, int k, const sched_event *e, char *out, size_t size)
{
	const char *s = e->detail;
	size_t o = 0;
	while (*s && o + 1 < size) {
		static const char *const words[] = {"packet ", "fence "};
		int w = -1;
		for (int i = 0; i < 2 && w < 0; i++)
			if (strncmp(s, words[i], strlen(words[i])) == 0 &&
			    s[strlen(words[i])] >= '0' && s[strlen(words[i])] <= '9')
				w = i;
		if (w < 0) {
			out[o++] = *s++;
			continue;
		}
		s += strlen(words[w]);
		char *end;
		unsigned long long v = strtoull(s, &end, 10);
		s = end;
		uint64_t file = w == 0 ? det_packet(f, k, v) : det_fence(f, k, e->node, v);
		int n = snprintf(out + o, size - o, "%s#%" PRIu64, words[w], file);
		o = n < 0 || (size_t)n >= size - o ? size - 1 : o + (size_t)n;
	}
	out[o] = '\0';
}

static void test_virtual_determinism(void **state)
{
	static const char cfg[] = "{\"quantum_us\": 1000, \"starvation_ms\": 10}";
	fx *f = *state;
	det_result r[2];
	for (int k = 0; k < 2; k++) {
		fx_start(f, k, cfg, true);
		det_run(f, k, &r[k]);
	}

	/* The same packets, each with the same record: fences, flags, virtual timestamps,
	 * preemption and resubmission counts. */
	uint64_t preemptions = 0, resubmissions = 0;
	for (size_t i = 0; i < DET_PACKETS; i++) {
		assert_int_equal(det_packet(f, 0, r[0].b.ids[i]), det_packet(f, 1, r[1].b.ids[i]));
		const gs_packet_record *a = sched_record(r[0].recs, r[0].nrecs, r[0].b.ids[i]);
		const gs_packet_record *b = sched_record(r[1].recs, r[1].nrecs, r[1].b.ids[i]);
		assert_non_null(a);
		assert_non_null(b);
		assert_int_equal(a->node, b->node);
		uint64_t fa = a->fence, fb = b->fence; /* contexts' fences: the same numbers */
		if (fa != fb || a->submit_flags != b->submit_flags || a->state != b->state ||
		    a->submitted_ns != b->submitted_ns || a->ready_ns != b->ready_ns ||
		    a->started_ns != b->started_ns || a->completed_ns != b->completed_ns ||
		    a->preemptions != b->preemptions || a->resubmissions != b->resubmissions)
			fail_msg("packet %" PRIu64 " differs: fence %" PRIu64 "/%" PRIu64
			         ", started %" PRIu64 "/%" PRIu64 ", completed %" PRIu64 "/%" PRIu64
			         ", preemptions %u/%u, resubmissions %u/%u",
			         det_packet(f, 0, a->packet), fa, fb, a->started_ns, b->started_ns,
			         a->completed_ns, b->completed_ns, a->preemptions, b->preemptions,
			         a->resubmissions, b->resubmissions);
		assert_int_equal(a->state, GS_PACKET_COMPLETED);
		assert_int_equal(a->resubmissions, a->preemptions);
		preemptions += a->preemptions;
		resubmissions += a->resubmissions;
	}
	/* A schedule worth comparing: contexts were time-sliced and resubmitted. */
	assert_true(preemptions >= 10);
	assert_int_equal(resubmissions, preemptions);

	/* The same sequence of transitions on each node, details included (engine time of
	 * every preempted run, resume offsets, fences). Nodes run in parallel, so only the
	 * order within a node is a function of the workload. */
	const sched_event **e0 = calloc(r[0].tl.nev + 1, sizeof(*e0));
	const sched_event **e1 = calloc(r[1].tl.nev + 1, sizeof(*e1));
	assert_true(e0 && e1);
	assert_int_equal(r[0].tl.nev, r[1].tl.nev);
	for (uint32_t node = 0; node < 2; node++) {
		size_t n0 = det_node_events(&r[0].tl, node, e0);
		size_t n1 = det_node_events(&r[1].tl, node, e1);
		assert_int_equal(n0, n1);
		assert_true(n0 > 0);
		for (size_t i = 0; i < n0; i++) {
			char d0[512], d1[512];
			det_detail(f, 0, e0[i], d0, sizeof d0);
			det_detail(f, 1, e1[i], d1, sizeof d1);
			uint64_t p0 = det_packet(f, 0, e0[i]->packet);
			uint64_t p1 = det_packet(f, 1, e1[i]->packet);
			if (p0 != p1 || e0[i]->state != e1[i]->state || strcmp(d0, d1) != 0)
				fail_msg("node %u, event %zu: packet #%" PRIu64
				         " %s '%s' vs packet "
				         "#%" PRIu64 " %s '%s' (file numbers)",
				         node, i, p0, state_name(e0[i]->state), d0, p1,
				         state_name(e1[i]->state), d1);
		}
	}
	free(e0);
	free(e1);
	/* And the same runs with the same engine time each. */
	assert_int_equal(r[0].tl.nruns, r[1].tl.nruns);
	for (int i = 0; i < DET_CTX; i++)
		assert_memory_equal(r[0].mem[i], r[1].mem[i], DET_ALLOC);
	det_free(&r[0]);
	det_free(&r[1]);
}

/* =====================================================================================
 * 2. Weighted time slices inside a band (virtual clock)
 * ===================================================================================== */

#define SHARE_PACKETS 120
#define SHARE_SPIN_US 10000
#define HOG_BYTES     (UINT64_C(64) << 20)
#define HOG_FILLS     8

/* gpusched explain's view of packet id has an event into `state` whose reason contains why. */
static void expect_explained(world *w, uint64_t id, gs_packet_state state, const char *why)
{
	gs_explanation *e;
	assert_int_equal(gs_explain(w->c, id, NULL, &e), 0);
	assert_int_equal(e->packet->packet, id);
	assert_true(e->event_count >= 2);
	assert_int_equal(e->events[0].state, GS_PACKET_SUBMITTED);
	bool found = false;
	for (size_t i = 0; i < e->event_count; i++) {
		if (i)
			assert_true(e->events[i].seq != e->events[i - 1].seq);
		found |= e->events[i].state == state && strstr(e->events[i].detail, why);
	}
	if (!found) {
		for (size_t i = 0; i < e->event_count; i++)
			fprintf(stderr, "  %s: %s\n", gs_packet_state_name(e->events[i].state),
			        e->events[i].detail);
		fail_msg("packet %" PRIu64 ": no %s explained by '%s'", id,
		         gs_packet_state_name(state), why);
	}
	gs_explanation_free(e);
}

/*
 * Tenants "a" and "b" with the given shares, one NORMAL context each on node 0, each with
 * a backlog of SHARE_PACKETS preemptible 10 ms SPINs (2 ms quanta). Returns the engine time
 * of a and b over the window in which both were backlogged.
 *
 * The two backlogs come from two clients, so they cannot be one batch. Meanwhile a HIGH
 * context of tenant a keeps the engine busy in wall time with large FILLs (the virtual
 * clock makes SPINs free, memory traffic is not): both backlogs queue behind it. Should it
 * finish early (a loaded machine), a's backlog runs alone first: its last solo run is a
 * credit the newcomer b still holds when the window opens, which skews the shares by about
 * one SPIN. So this returns whether both backlogs were queued behind the FILLs, and the
 * caller measures again on a fresh daemon when they were not.
 */
/* What a share measurement sets up: the tenants' shares, how many contexts a opens (its
 * backlog spread over them), and the adapter's share policy. */
typedef struct share_setup {
	uint32_t share_a, share_b;
	uint32_t contexts_a; /* 1..SHARE_MAX_CTX */
	const char *policy;  /* adapters[].policy */
} share_setup;

#define SHARE_MAX_CTX 4

static bool share_measure(fx *f, const share_setup *su, uint64_t *ta, uint64_t *tb,
                          uint64_t *window)
{
	uint32_t share_a = su->share_a, share_b = su->share_b;
	char cfg[512];
	snprintf(cfg, sizeof(cfg),
	         "{\"quantum_us\": 2000, \"adapters\": [{\"policy\": \"%s\"}], \"tenants\": ["
	         "{\"name\": \"a\", \"token\": \"tok-a\", \"share\": %u,"
	         " \"priority_ceiling\": 4},"
	         "{\"name\": \"b\", \"token\": \"tok-b\", \"share\": %u}]}",
	         su->policy, share_a, share_b);
	fx_start(f, 0, cfg, true);
	world wa, wb;
	world_open(&wa, f, 0, "tok-a", "share-a");
	world_open(&wb, f, 0, "tok-b", "share-b");
	uint64_t xas[SHARE_MAX_CTX];
	for (uint32_t i = 0; i < su->contexts_a; i++)
		xas[i] = world_context(&wa, 0, CLASS_NORMAL, 0);
	uint64_t xb = world_context(&wb, 0, CLASS_NORMAL, 0);

	uint64_t hog_ctx = world_context(&wa, 0, CLASS_HIGH, 0);
	uint64_t hog_alloc = world_alloc(&wa, HOG_BYTES);
	gs_dmabuf hog;
	gs_dmabuf_init(&hog);
	for (int i = 0; i < HOG_FILLS; i++)
		assert_int_equal(gs_dmabuf_fill(&hog, hog_alloc, 0, HOG_BYTES, (uint32_t)i), 0);
	uint64_t hog_id = submit_one(wa.c, hog_ctx, &hog, 0, NULL);
	gs_dmabuf_free(&hog);

	batch ba = {0}, bb = {0};
	for (int i = 0; i < SHARE_PACKETS; i++) {
		sched_spin(batch_add(&ba, xas[i % su->contexts_a], 0), SHARE_SPIN_US, false);
		sched_spin(batch_add(&bb, xb, 0), SHARE_SPIN_US, false);
	}
	batch_submit(&ba, wa.c);
	batch_submit(&bb, wb.c);
	assert_int_equal(sched_wait_final(wa.c, hog_id, 0), GS_PACKET_COMPLETED);
	batch_wait(&ba, wa.c, GS_PACKET_COMPLETED);
	batch_wait(&bb, wb.c, GS_PACKET_COMPLETED);

	sched_timeline tl;
	sched_timeline_init(&tl);
	sched_timeline_add(&tl, wa.c, wa.dev, ba.ids, ba.n);
	sched_timeline_add(&tl, wa.c, wa.dev, &hog_id, 1);
	sched_timeline_add(&tl, wb.c, wb.dev, bb.ids, bb.n);
	sched_timeline_finish(&tl);

	/* Both backlogs are queued once the later batch's last SUBMITTED event is audited. */
	uint64_t queued_seq = 0;
	for (size_t i = 0; i < tl.nev; i++)
		if (tl.ev[i].state == GS_PACKET_SUBMITTED && tl.ev[i].seq > queued_seq)
			queued_seq = tl.ev[i].seq;
	uint64_t last_a = ba.ids[ba.n - 1], last_b = bb.ids[bb.n - 1];
	*ta = *tb = *window = 0;
	bool started = false;
	uint32_t runs = 0;
	for (size_t i = 0; i < tl.nruns; i++) {
		const sched_run *r = &tl.runs[i];
		if (r->packet == hog_id)
			continue;
		/* The window opens with the first run dispatched once both were queued... */
		if (!started && r->ready_seq < queued_seq)
			continue;
		started = true;
		runs++;
		if (r->context == xb)
			*tb += r->engine_ns;
		else
			*ta += r->engine_ns;
		/* ...and closes with the run that ends either backlog. */
		if (r->end == GS_PACKET_COMPLETED && (r->packet == last_a || r->packet == last_b))
			break;
	}
	*window = *ta + *tb;
	const sched_run *hog_run = NULL;
	for (size_t i = 0; i < tl.nruns; i++)
		if (tl.runs[i].packet == hog_id)
			hog_run = &tl.runs[i];
	assert_non_null(hog_run);
	fprintf(stderr,
	        "policy %s, shares %u:%u, a with %u contexts: engine time a %" PRIu64
	        " us, b %" PRIu64
	        " us over %u runs (ratio a/b %.4f); the HIGH FILLs held the engine %" PRIu64
	        " ms of wall time, %s\n",
	        su->policy, share_a, share_b, su->contexts_a, *ta / 1000, *tb / 1000, runs,
	        (double)*ta / (double)*tb, hog_run->wall_ns / MS,
	        hog_run->end_seq > queued_seq ? "both backlogs queued behind them"
	                                      : "ending before both backlogs were queued");
	const bool fixed = strcmp(su->policy, "fixed_share") == 0;
	/* Slices on the virtual clock are exact: every preempted run used one quantum (2000.1
	 * us: the SPIN stops at the first whole microsecond past the budget; its detail says
	 * 2000 us), and each packet's runs add up to its SPIN plus 100 ns per run: every
	 * resubmission did exactly the work that was left. */
	unsigned sliced = 0;
	for (size_t p = 0; p < ba.n + bb.n; p++) {
		uint64_t id = p < ba.n ? ba.ids[p] : bb.ids[p - ba.n];
		uint64_t sum = 0, nruns = 0;
		for (size_t i = 0; i < tl.nruns; i++) {
			const sched_run *r = &tl.runs[i];
			if (r->packet != id)
				continue;
			nruns++;
			if (r->end == GS_PACKET_PREEMPTED) {
				/* fixed_share: a run also ends where its tenant's part of the
				 * period does, at most one quantum. */
				if (fixed)
					assert_true(r->engine_ns > 0 &&
					            r->engine_ns <= 2000 * 1000);
				else
					assert_int_equal(r->engine_ns, 2000 * 1000);
				sum += r->engine_ns + CMD_NS;
				/* explain names the reason: its slice ended. */
				if (sliced++ == 0)
					expect_explained(p < ba.n ? &wa : &wb, id,
					                 GS_PACKET_PREEMPTED, "quantum expired");
			} else {
				assert_int_equal(r->end, GS_PACKET_COMPLETED);
				sum += r->engine_ns;
			}
		}
		if (sum != SHARE_SPIN_US * 1000 + nruns * CMD_NS)
			fail_msg("packet %" PRIu64 ": %" PRIu64 " runs, %" PRIu64
			         " ns of engine time for a %u us SPIN",
			         id, nruns, sum, SHARE_SPIN_US);
	}
	assert_true(sliced >= runs / 2);
	bool behind = hog_run->end_seq > queued_seq;
	sched_timeline_free(&tl);
	batch_free(&ba);
	batch_free(&bb);
	return behind;
}

static void expect_share(uint64_t ta, uint64_t tb, uint64_t window, double want)
{
	/* A window long enough for the 2 % to mean something: hundreds of quanta. */
	assert_true(window >= 1000 * MS);
	double ratio = (double)ta / (double)tb;
	if (ratio < want * 0.98 || ratio > want * 1.02)
		fail_msg("engine time split a:b = %" PRIu64 ":%" PRIu64 " us = %.4f, expected "
		         "%.4f (within 2%%)",
		         ta / 1000, tb / 1000, ratio, want);
}

/* Closes the clients and the daemon of one measurement, for the next on a fresh daemon. */
static void share_test_teardown_between(fx *f)
{
	for (int i = 0; i < f->nc; i++)
		gs_close(f->c[i]);
	f->nc = 0;
	assert_int_equal(sched_daemon_stop(&f->d[0]), 0);
}

/* Measures until both backlogs were queued behind the FILLs (at most 3 daemons), then
 * checks that a:b is `want`. */
static void share_test_setup(fx *f, const share_setup *su, double want)
{
	uint64_t ta, tb, window;
	for (int attempt = 1; !share_measure(f, su, &ta, &tb, &window); attempt++) {
		if (attempt == 3)
			fail_msg("3 times the FILLs ended before both backlogs were queued");
		share_test_teardown_between(f);
	}
	expect_share(ta, tb, window, want);
}

/* One context each: the tenants' engine time is in the ratio of their shares. */
static void share_test(fx *f, uint32_t share_a, uint32_t share_b)
{
	share_setup su = {share_a, share_b, 1, "weighted"};
	share_test_setup(f, &su, (double)share_a / (double)share_b);
}

static void test_share_weighted(void **state)
{
	share_test(*state, 1, 3);
}

static void test_share_equal(void **state)
{
	share_test(*state, 1, 1);
}

/* Shares count per tenant: a with four contexts against b with one gets its share (1:1, then
 * 3:1), not four times it; equal_share splits evenly whatever the shares; best_effort, with
 * no per-tenant accounting, gives every context the same time (4:1). */
static void test_share_per_tenant(void **state)
{
	fx *f = *state;
	share_setup su = {1, 1, SHARE_MAX_CTX, "weighted"};
	share_test_setup(f, &su, 1.0);
	share_test_teardown_between(f);
	su = (share_setup){3, 1, SHARE_MAX_CTX, "weighted"};
	share_test_setup(f, &su, 3.0);
	share_test_teardown_between(f);
	su = (share_setup){1, 3, SHARE_MAX_CTX, "equal_share"};
	share_test_setup(f, &su, 1.0);
	share_test_teardown_between(f);
	su = (share_setup){1, 1, SHARE_MAX_CTX, "best_effort"};
	share_test_setup(f, &su, (double)SHARE_MAX_CTX);
	share_test_teardown_between(f);
	/* fixed_share: 2:3 of every 20 ms period (8 and 12 ms, whole quanta), per tenant. */
	su = (share_setup){2, 3, SHARE_MAX_CTX, "fixed_share"};
	share_test_setup(f, &su, 2.0 / 3.0);
}

/*
 * fixed_share leaves an idle tenant's part unused: tenant a (share 1) is alone busy while b
 * (share 3) has a context and nothing to run, so a gets 5 ms of every 20 ms period and its
 * backlog takes four times its engine time to finish; under weighted the same backlog runs
 * back to back. On the virtual clock both are exact but for the period boundaries.
 */
static void fixed_share_idle(fx *f, int from, int to)
{
	static const char *const policies[] = {"fixed_share", "weighted", "fixed_share"};
	for (int k = from; k < to; k++) {
		/* The third run: fixed_share on the wall clock, where a timer wakes the idle
		 * engine at each period (a slow machine only makes the span longer). */
		const bool wall = k == 2;
		char cfg[512];
		snprintf(cfg, sizeof(cfg),
		         "{\"quantum_us\": 2000, \"adapters\": [{\"policy\": \"%s\"}], "
		         "\"tenants\": [{\"name\": \"a\", \"token\": \"tok-a\", \"share\": 1},"
		         "{\"name\": \"b\", \"token\": \"tok-b\", \"share\": 3}]}",
		         policies[k]);
		fx_start(f, 0, cfg, !wall);
		world wa, wb;
		world_open(&wa, f, 0, "tok-a", "busy");
		world_open(&wb, f, 0, "tok-b", "idle");
		uint64_t xa = world_context(&wa, 0, CLASS_NORMAL, 0);
		(void)world_context(&wb, 0, CLASS_NORMAL, 0);
		batch ba = {0};
		for (int i = 0; i < (wall ? 5 : 20); i++)
			sched_spin(batch_add(&ba, xa, 0), SHARE_SPIN_US, false);
		batch_submit(&ba, wa.c);
		batch_wait(&ba, wa.c, GS_PACKET_COMPLETED);
		sched_timeline tl;
		sched_timeline_init(&tl);
		sched_timeline_add(&tl, wa.c, wa.dev, ba.ids, ba.n);
		sched_timeline_finish(&tl);
		uint64_t first = UINT64_MAX, last = 0;
		for (size_t i = 0; i < tl.nrecs; i++) {
			if (tl.recs[i].completed_ns > last)
				last = tl.recs[i].completed_ns;
			if (tl.recs[i].started_ns < first)
				first = tl.recs[i].started_ns;
		}
		/* 20 SPINs of 10 ms: 200 ms of engine time (on the wall clock 5: 50 ms). */
		double span_ms = (double)(last - first) / 1e6;
		fprintf(stderr, "%s%s: a alone, %d ms of engine time done in %.1f ms\n",
		        policies[k], wall ? " (wall clock)" : "", wall ? 50 : 200, span_ms);
		/* On the wall clock, at least 1.5 times the engine time (4x expected; weighted
		 * takes 1x, so this still tells them apart): a run that overshoots its budget uses
		 * the part up sooner, the first packet's record starts at its last run, and a
		 * loaded machine (CI runs two test programs at once, lavapipe among them) stretches
		 * runs past their budgets. (2x was the bound: a CI run measured 99.5 ms.) */
		if (wall && span_ms < 1.5 * 50)
			fail_msg("fixed_share on the wall clock: a's backlog took %.1f ms, want at "
			         "least 75 (1.5 times its engine time)",
			         span_ms);
		if (k == 0 && (span_ms < 0.9 * 4 * 200 || span_ms > 1.1 * 4 * 200))
			fail_msg("fixed_share: a's backlog took %.1f ms, want about 800", span_ms);
		if (k == 1 && span_ms > 1.1 * 200)
			fail_msg("weighted: a's backlog took %.1f ms, want about 200", span_ms);
		sched_timeline_free(&tl);
		batch_free(&ba);
		share_test_teardown_between(f);
	}
}

static void test_fixed_share_idle_unused(void **state)
{
	fixed_share_idle(*state, 0, 2);
}

/* The same on the wall clock (also on a GPU backend). */
static void test_fixed_share_wall(void **state)
{
	fixed_share_idle(*state, 2, 3);
}

/* =====================================================================================
 * 3. Band order and REALTIME (virtual clock)
 * ===================================================================================== */

/* Seq of the first event of `state` among the timeline's events of packet p. */
static uint64_t first_seq(const sched_timeline *tl, uint64_t p, gs_packet_state state)
{
	for (size_t i = 0; i < tl->nev; i++)
		if (tl->ev[i].packet == p && tl->ev[i].state == state)
			return tl->ev[i].seq;
	fail_msg("packet %" PRIu64 " has no %s event", p, state_name(state));
	return 0;
}

static void test_band_order(void **state)
{
	fx *f = *state;
	/* No starvation boost inside this run: band order alone. */
	fx_start(f, 0, "{\"quantum_us\": 1000, \"starvation_ms\": 100000}", true);
	world w;
	world_open(&w, f, 0, NULL, "bands");
	uint64_t normal = world_context(&w, 0, CLASS_NORMAL, 0);
	uint64_t high = world_context(&w, 0, CLASS_HIGH, 0);
	uint64_t an = world_alloc(&w, 4096), ah = world_alloc(&w, 4096);

	/* NORMAL's work first in the batch, HIGH's interleaved after it. */
	batch b = {0};
	for (int i = 0; i < 5; i++) {
		if (i < 3) {
			gs_dmabuf *buf = batch_add(&b, normal, 0);
			sched_spin(buf, 20000, false);
			assert_int_equal(gs_dmabuf_fill(buf, an, 0, 4096, 0x4e4e0000u + i), 0);
		}
		gs_dmabuf *buf = batch_add(&b, high, 0);
		sched_spin(buf, 5000, false);
		assert_int_equal(gs_dmabuf_fill(buf, ah, 0, 4096, 0x48480000u + i), 0);
	}
	batch_submit(&b, w.c);
	batch_wait(&b, w.c, GS_PACKET_COMPLETED);

	sched_timeline tl;
	sched_timeline_init(&tl);
	sched_timeline_add(&tl, w.c, w.dev, b.ids, b.n);
	sched_timeline_finish(&tl);
	uint64_t hid[8], nid[8];
	size_t nh = batch_ids_of(&b, high, hid), nn = batch_ids_of(&b, normal, nid);
	uint64_t high_done_seq = 0, high_done_ns = 0, normal_start_seq = UINT64_MAX,
	         normal_start_ns = UINT64_MAX;
	for (size_t i = 0; i < nh; i++) {
		uint64_t s = first_seq(&tl, hid[i], GS_PACKET_COMPLETED);
		const sched_rec *r = sched_timeline_rec(&tl, hid[i]);
		high_done_seq = s > high_done_seq ? s : high_done_seq;
		high_done_ns = r->completed_ns > high_done_ns ? r->completed_ns : high_done_ns;
	}
	for (size_t i = 0; i < nn; i++) {
		uint64_t s = first_seq(&tl, nid[i], GS_PACKET_RUNNING);
		const sched_rec *r = sched_timeline_rec(&tl, nid[i]);
		normal_start_seq = s < normal_start_seq ? s : normal_start_seq;
		normal_start_ns = r->started_ns < normal_start_ns ? r->started_ns : normal_start_ns;
	}
	/* Every HIGH packet completed before any NORMAL packet started running. */
	if (normal_start_seq < high_done_seq)
		fail_msg("a NORMAL packet started (event %" PRIu64 ") before the last HIGH packet "
		         "completed (event %" PRIu64 ")",
		         normal_start_seq, high_done_seq);
	assert_true(normal_start_ns >= high_done_ns);
	/* Alone in its band, HIGH was never sliced; nothing outranked NORMAL afterwards. */
	for (size_t i = 0; i < tl.nruns; i++)
		assert_int_equal(tl.runs[i].end, GS_PACKET_COMPLETED);
	assert_int_equal(tl.nruns, b.n);
	sched_timeline_free(&tl);
	batch_free(&b);
}

static void test_realtime_not_sliced(void **state)
{
	fx *f = *state;
	/* A starvation threshold far below the work: REALTIME still never yields. */
	fx_start(f, 0, "{\"quantum_us\": 1000, \"starvation_ms\": 1}", true);
	world w;
	world_open(&w, f, 0, NULL, "realtime");
	uint64_t rt[2] = {world_context(&w, 0, CLASS_REALTIME, 0),
	                  world_context(&w, 0, CLASS_REALTIME, 0)};
	uint64_t normal = world_context(&w, 0, CLASS_NORMAL, 0);
	batch b = {0};
	sched_spin(batch_add(&b, normal, 0), 1000, false);
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 2; k++)
			sched_spin(batch_add(&b, rt[k], 0), 10000, false); /* 10 quanta each */
	sched_spin(batch_add(&b, normal, 0), 1000, false);
	batch_submit(&b, w.c);
	batch_wait(&b, w.c, GS_PACKET_COMPLETED);

	gs_packet_record *recs;
	size_t n = sched_history_device(w.c, w.dev, &recs);
	uint64_t rt_done = 0, normal_start = UINT64_MAX;
	unsigned rt_packets = 0;
	for (size_t i = 0; i < n; i++) {
		const gs_packet_record *r = &recs[i];
		if (r->context == normal) {
			normal_start = r->started_ns < normal_start ? r->started_ns : normal_start;
			continue;
		}
		rt_packets++;
		/* Two REALTIME contexts of one band, each with work waiting: no quantum. */
		if (r->preemptions != 0 || r->resubmissions != 0)
			fail_msg("REALTIME packet %" PRIu64 ": %u preemptions, %u resubmissions",
			         r->packet, r->preemptions, r->resubmissions);
		assert_int_equal(r->completed_ns - r->started_ns, 10000 * 1000 + CMD_NS);
		rt_done = r->completed_ns > rt_done ? r->completed_ns : rt_done;
	}
	assert_int_equal(rt_packets, 8);
	/* No starvation boost for NORMAL while REALTIME work is ready. */
	assert_true(normal_start >= rt_done);
	gs_history_free(recs, n);
	batch_free(&b);
}

/* =====================================================================================
 * 4. Priority preemption on the wall clock
 * ===================================================================================== */

#define LONG_SPIN1_US 300000  /* before the SIGNAL the test waits for */
#define LONG_SPIN2_US 1200000 /* after it: when the preemption comes */
#define PRE_BYTES     65536

/* A long packet: SPIN, SIGNAL sync=1, SPIN, FILL alloc. Returns the second SPIN's offset. */
static size_t long_packet(gs_dmabuf *buf, uint64_t sync, uint64_t alloc, uint32_t pattern)
{
	gs_dmabuf_init(buf);
	sched_spin(buf, LONG_SPIN1_US, false);
	assert_int_equal(gs_dmabuf_signal(buf, sync, 1), 0);
	size_t spin2 = buf->len;
	sched_spin(buf, LONG_SPIN2_US, false);
	assert_int_equal(gs_dmabuf_fill(buf, alloc, 0, PRE_BYTES, pattern), 0);
	return spin2;
}

/* Starts a long packet and returns once it is running, in the middle of its work (past the
 * SIGNAL): its RUNNING event by bounded polling, then the SIGNAL by a GPU-signalled wait. */
static uint64_t start_long(world *w, uint64_t ctx, uint64_t alloc, uint32_t pattern,
                           uint64_t *fence)
{
	uint64_t sync;
	assert_int_equal(gs_sync_create(w->c, w->dev, 0, &sync), 0);
	gs_dmabuf buf;
	long_packet(&buf, sync, alloc, pattern);
	uint64_t id = submit_one(w->c, ctx, &buf, 0, fence);
	gs_dmabuf_free(&buf);
	if (!sched_await_event(w->c, id, GS_PACKET_RUNNING, AWAIT_MS))
		fail_msg("packet %" PRIu64 " did not start running within %d ms", id, AWAIT_MS);
	uint64_t cur = 0;
	assert_int_equal(gs_sync_wait(w->c, sync, 1, AWAIT_MS, &cur), 0);
	return id;
}

/*
 * Checks the record and events of a long packet preempted once: PREEMPTED (detail naming
 * `why`) then RESUBMITTED with a new node fence and the Resubmission flag, resumed (not
 * restarted) past its first SPIN, and its total engine time that of its work. The client's
 * fence, its context's, is the one it was submitted with.
 */
static void expect_preempted_once(world *w, uint64_t id, uint64_t fence0, const char *why,
                                  const char *alt_why)
{
	gs_packet_event *ev;
	size_t n = sched_events(w->c, id, &ev);
	long pre = sched_event_find(ev, n, GS_PACKET_PREEMPTED, 0);
	long resub = pre < 0 ? -1 : sched_event_find(ev, n, GS_PACKET_RESUBMITTED, (size_t)pre);
	long run2 = resub < 0 ? -1 : sched_event_find(ev, n, GS_PACKET_RUNNING, (size_t)resub);
	if (pre < 0 || resub < 0 || run2 < 0)
		fail_msg("packet %" PRIu64 ": no PREEMPTED, RESUBMITTED, RUNNING sequence", id);
	assert_int_equal(ev[n - 1].state, GS_PACKET_COMPLETED);
	assert_int_equal(sched_event_find(ev, n, GS_PACKET_PREEMPTED, (size_t)pre + 1), -1);
	if (!strstr(ev[pre].detail, why) && !(alt_why && strstr(ev[pre].detail, alt_why)))
		fail_msg("PREEMPTED detail '%s' does not say '%s'", ev[pre].detail, why);
	uint64_t run1_ns = sched_detail_engine_ns(ev[pre].detail);
	assert_true(run1_ns != UINT64_MAX);
	/* Preempted past the SIGNAL: inside the second SPIN. */
	assert_true(run1_ns >= LONG_SPIN1_US * 1000);
	/* It resumes inside the second SPIN, where it stopped, not at byte 0: the SIGNAL
	 * before it is not run again. */
	unsigned long long fence_r = 0;
	size_t at = 0;
	if (sscanf(ev[resub].detail, "node fence %llu, resuming at byte %zu", &fence_r, &at) != 2)
		fail_msg("RESUBMITTED detail '%s'", ev[resub].detail);
	assert_true(fence_r != 0);
	gs_dmabuf shape;
	size_t spin2 = long_packet(&shape, 1, 1, 0);
	gs_dmabuf_free(&shape);
	assert_int_equal(at, spin2);
	gs_packet_events_free(ev, n);

	gs_history_filter hf = {.device = w->dev, .limit = 1000};
	gs_packet_record *recs;
	size_t nr;
	assert_int_equal(gs_history(w->c, &hf, &recs, &nr), 0);
	const gs_packet_record *r = sched_record(recs, nr, id);
	assert_non_null(r);
	assert_int_equal(r->state, GS_PACKET_COMPLETED);
	assert_int_equal(r->preemptions, 1);
	assert_int_equal(r->resubmissions, 1);
	assert_true(r->submit_flags & GS_SUBMIT_RESUBMISSION);
	assert_int_equal(r->patch_flags, gs_patch_flags_for_submit(r->submit_flags));
	assert_int_equal(r->fence, fence0);
	/* The second run did only what was left: the total is the packet's work. (The second
	 * run is timed by the loop's handling of its interrupts, a few hundred microseconds
	 * either way; running the first SPIN again would add 300 ms.) */
	uint64_t run2_ns = r->completed_ns - r->started_ns;
	uint64_t total = run1_ns + run2_ns;
	uint64_t work = (LONG_SPIN1_US + LONG_SPIN2_US) * 1000;
	/* On lavapipe a SPIN is CPU work that stretches when the machine is busy (a CI run under
	 * -j2 gave 1,519 ms for a 1,200 ms SPIN): there only the lower bound is checked, and the
	 * resume offset above (at == spin2) is what shows the first SPIN was not run again. */
	const char *backend = getenv("GS_TEST_BACKEND");
	bool cpu_spins = backend && *backend && strcmp(backend, "emu") != 0;
	if (total + 5 * MS < work || (!cpu_spins && total > work + 250 * MS))
		fail_msg("engine time %" PRIu64 " + %" PRIu64 " us for %" PRIu64 " us of work",
		         run1_ns / 1000, run2_ns / 1000, work / 1000);
	gs_history_free(recs, nr);
}

static void test_priority_preemption_wall(void **state)
{
	fx *f = *state;
	fx_start(f, 0, "{}", false);
	world w;
	world_open(&w, f, 0, NULL, "preempt");
	uint64_t normal = world_context(&w, 0, CLASS_NORMAL, 0);
	uint64_t high = world_context(&w, 0, CLASS_HIGH, 0);
	uint64_t an = world_alloc(&w, PRE_BYTES), ah = world_alloc(&w, PRE_BYTES);

	uint64_t fence0 = 0;
	uint64_t nid = start_long(&w, normal, an, 0x11223344u, &fence0);

	/* HIGH arrives: the NORMAL packet is preempted at once, HIGH runs and completes while
	 * NORMAL still has about a second of work left. */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, ah, 0, PRE_BYTES, 0x55667788u), 0);
	uint64_t hid = submit_one(w.c, high, &buf, 0, NULL);
	gs_dmabuf_free(&buf);
	assert_int_equal(sched_wait_final(w.c, hid, 0), GS_PACKET_COMPLETED);
	gs_packet_state st = sched_state_now(w.c, nid);
	if (gs_packet_state_is_final(st))
		fail_msg("the NORMAL packet is already %s when HIGH completes", state_name(st));

	assert_int_equal(sched_wait_final(w.c, nid, 0), GS_PACKET_COMPLETED);
	/* The record names the preempting context and its class (same tenant); explain shows
	 * it, the resubmission, and a READY that queued behind the NORMAL context. */
	char why[96];
	snprintf(why, sizeof(why), "preempted by context %" PRIu64 " (priority class HIGH)", high);
	expect_preempted_once(&w, nid, fence0, why, NULL);
	expect_explained(&w, nid, GS_PACKET_PREEMPTED, why);
	expect_explained(&w, nid, GS_PACKET_RESUBMITTED, "resuming at byte");
	snprintf(why, sizeof(why), "first context %" PRIu64 "'s (priority class NORMAL)", normal);
	expect_explained(&w, hid, GS_PACKET_READY, why);

	/* Byte-exact after the resumption: the FILL after the SPINs ran once, patched again. */
	uint8_t want[PRE_BYTES];
	gs_isa_fill(want, PRE_BYTES, 0x11223344u);
	expect_bytes(w.c, an, want, PRE_BYTES, "NORMAL allocation");
	gs_isa_fill(want, PRE_BYTES, 0x55667788u);
	expect_bytes(w.c, ah, want, PRE_BYTES, "HIGH allocation");
}

/* =====================================================================================
 * 5. Starvation freedom (virtual clock)
 * ===================================================================================== */

#define STARVE_MS 5

/*
 * A HIGH context with 60 ms of backlog in 2 ms packets, a NORMAL one with four 1 ms packets
 * and an IDLE one with two, in one batch whose first packets come in the given order of
 * contexts. NORMAL must complete every packet while HIGH work remains (a boost each time it
 * waited starvation_ms); IDLE has no such guarantee, and gets no boost.
 */
static void starvation_run(fx *f, const int order[3])
{
	char cfg[128];
	snprintf(cfg, sizeof(cfg), "{\"quantum_us\": 2000, \"starvation_ms\": %d}", STARVE_MS);
	fx_start(f, 0, cfg, true);
	world w;
	world_open(&w, f, 0, NULL, "starvation");
	uint64_t ctx[3] = {world_context(&w, 0, CLASS_HIGH, 0),
	                   world_context(&w, 0, CLASS_NORMAL, 0),
	                   world_context(&w, 0, CLASS_IDLE, 0)};
	const int count[3] = {30, 4, 2};
	const uint64_t spin_us[3] = {2000, 1000, 1000};
	uint64_t alloc = world_alloc(&w, 4096);
	batch b = {0};
	for (int round = 0; round < 30; round++)
		for (int k = 0; k < 3; k++) {
			int x = order[k];
			if (round >= count[x])
				continue;
			gs_dmabuf *buf = batch_add(&b, ctx[x], 0);
			sched_spin(buf, spin_us[x], false);
			assert_int_equal(
			        gs_dmabuf_fill(buf, alloc, (uint64_t)x * 64, 64, (uint32_t)round),
			        0);
		}
	batch_submit(&b, w.c);
	batch_wait(&b, w.c, GS_PACKET_COMPLETED);

	gs_packet_record *recs;
	size_t n = sched_history_device(w.c, w.dev, &recs);
	uint64_t high_last = 0, normal_first = UINT64_MAX, idle_first = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		const gs_packet_record *r = &recs[i];
		if (r->context == ctx[0] && r->completed_ns > high_last)
			high_last = r->completed_ns;
		if (r->context == ctx[1] && r->started_ns < normal_first)
			normal_first = r->started_ns;
		if (r->context == ctx[2] && r->started_ns < idle_first)
			idle_first = r->started_ns;
	}
	for (size_t i = 0; i < n; i++) {
		const gs_packet_record *r = &recs[i];
		if (r->context != ctx[1])
			continue;
		if (r->completed_ns >= high_last)
			fail_msg("NORMAL packet %" PRIu64 " completed at %" PRIu64
			         " us, after the HIGH backlog (%" PRIu64 " us): it starved",
			         r->packet, r->completed_ns / 1000, high_last / 1000);
	}
	/* The first boost comes once NORMAL waited starvation_ms, at the next HIGH packet's
	 * end at the latest. */
	assert_true(normal_first - VIRTUAL_EPOCH_NS <= (STARVE_MS + 2 * 2) * MS);
	/* IDLE: no boost while higher work is ready. */
	assert_true(idle_first >= high_last);
	gs_history_free(recs, n);
	batch_free(&b);
}

static void test_starvation_normal_progresses(void **state)
{
	static const int order[3] = {1, 2, 0}; /* NORMAL, IDLE, HIGH */
	starvation_run(*state, order);
}

/* The same with the IDLE context queued first: it is the longest waiting, but it is not
 * owed a boost and must not stand in the way of NORMAL's. */
static void test_starvation_idle_queued_first(void **state)
{
	static const int order[3] = {2, 1, 0}; /* IDLE, NORMAL, HIGH */
	starvation_run(*state, order);
}

/* =====================================================================================
 * 6. Timeout detection and recovery
 * ===================================================================================== */

#define TDR_DELAY_MS  200
#define TDR_QUANTUM   1000 /* us */
#define TDR_INNOCENTS 3
#define TDR_BYTES     8192

typedef struct innocent {
	uint64_t ctx, src, dst, sum;
	uint8_t src_m[TDR_BYTES], dst_m[TDR_BYTES], sum_m[64];
} innocent;

/* Two packets of FILL, COPY and CHECKSUM over the innocent's own allocations (so their
 * result does not depend on how the innocents interleave), modelled on the CPU. */
static void innocent_setup(world *w, innocent *in, uint32_t node, uint64_t seed)
{
	in->ctx = world_context(w, node, CLASS_NORMAL, 0);
	in->src = world_alloc(w, TDR_BYTES);
	in->dst = world_alloc(w, TDR_BYTES);
	in->sum = world_alloc(w, 64);
	for (size_t i = 0; i < TDR_BYTES; i++)
		in->src_m[i] = (uint8_t)itest_rand(&seed);
	assert_int_equal(gs_allocation_write(w->c, in->src, 0, in->src_m, TDR_BYTES), 0);
	memset(in->dst_m, 0, sizeof(in->dst_m));
	memset(in->sum_m, 0, sizeof(in->sum_m));
}

static void innocent_packets(innocent *in, batch *b, uint32_t pattern)
{
	gs_dmabuf *p1 = batch_add(b, in->ctx, 0);
	assert_int_equal(gs_dmabuf_fill(p1, in->src, 100, 3000, pattern), 0);
	assert_int_equal(gs_dmabuf_copy(p1, in->dst, 0, in->src, 0, TDR_BYTES), 0);
	gs_isa_fill(in->src_m + 100, 3000, pattern);
	memcpy(in->dst_m, in->src_m, TDR_BYTES);
	gs_dmabuf *p2 = batch_add(b, in->ctx, 0);
	assert_int_equal(gs_dmabuf_checksum(p2, in->sum, 8, in->dst, 0, TDR_BYTES), 0);
	assert_int_equal(gs_dmabuf_fill(p2, in->dst, 5000, 1000, ~pattern), 0);
	gs_le64_put(in->sum_m + 8, gs_isa_checksum(in->dst_m, TDR_BYTES));
	gs_isa_fill(in->dst_m + 5000, 1000, ~pattern);
}

static void innocent_verify(world *w, const innocent *in)
{
	expect_bytes(w->c, in->src, in->src_m, TDR_BYTES, "innocent source");
	expect_bytes(w->c, in->dst, in->dst_m, TDR_BYTES, "innocent destination");
	expect_bytes(w->c, in->sum, in->sum_m, 64, "innocent checksum");
}

static int64_t notes(const fx *f, const char *kind)
{
	return itest_audit_int(f->d[0].t.db, "SELECT COUNT(*) FROM notes WHERE kind = '%s'", kind);
}

static int64_t notes_of(const fx *f, const char *kind, const char *tenant)
{
	return itest_audit_int(f->d[0].t.db,
	                       "SELECT COUNT(*) FROM notes WHERE kind = '%s' AND tenant = '%s'",
	                       kind, tenant);
}

/* The guilty packet's end: FAULTED by TDR, in its record and its last event. */
static void expect_tdr_fault(world *w, uint64_t id, const gs_packet_record **rec_out,
                             gs_packet_record **recs, size_t *nrecs)
{
	*nrecs = sched_history_device(w->c, w->dev, recs);
	const gs_packet_record *r = sched_record(*recs, *nrecs, id);
	assert_non_null(r);
	assert_int_equal(r->state, GS_PACKET_FAULTED);
	if (!strstr(r->result, "timeout detection and recovery"))
		fail_msg("the guilty packet's result is '%s'", r->result);
	gs_packet_event *ev;
	size_t n = sched_events(w->c, id, &ev);
	assert_int_equal(ev[n - 1].state, GS_PACKET_FAULTED);
	assert_non_null(strstr(ev[n - 1].detail, "timeout detection and recovery"));
	assert_true(sched_event_find(ev, n, GS_PACKET_RUNNING, 0) >= 0);
	gs_packet_events_free(ev, n);
	expect_explained(w, id, GS_PACKET_FAULTED, "timeout detection and recovery");
	*rec_out = r;
}

static void tdr_scenario(fx *f, bool virtual_clock)
{
	char cfg[128];
	snprintf(cfg, sizeof(cfg), "{\"tdr_delay_ms\": %d, \"quantum_us\": %d}", TDR_DELAY_MS,
	         TDR_QUANTUM);
	fx_start(f, 0, cfg, virtual_clock);
	world w;
	world_open(&w, f, 0, NULL, "tdr");
	/* Created first, the guilty context runs first among equals. */
	uint64_t guilty = world_context(&w, 0, CLASS_NORMAL, 0);
	innocent *in = calloc(TDR_INNOCENTS, sizeof(*in));
	assert_non_null(in);
	for (int i = 0; i < TDR_INNOCENTS; i++)
		innocent_setup(&w, &in[i], 0, 1000 + (uint64_t)i);

	/* One batch: the guilty hang first, then the innocents' work, so the hang is budgeted
	 * (others of its band wait) and must stop after one quantum; it cannot. */
	batch b = {0};
	gs_dmabuf *g = batch_add(&b, guilty, 0);
	sched_spin(g, 5000000, true);
	for (int i = 0; i < TDR_INNOCENTS; i++)
		innocent_packets(&in[i], &b, 0xa0b0c0d0u + (uint32_t)i);
	long long t0 = gs_test_now_ms();
	batch_submit(&b, w.c);
	uint64_t gid = b.ids[0];
	assert_int_equal(sched_wait_final(w.c, gid, GS_STATUS_FAULTED), GS_PACKET_FAULTED);
	long long took = gs_test_now_ms() - t0;
	/* Reset long before the 5 s SPIN could have ended. */
	assert_true(took < 3000);
	for (size_t i = 1; i < b.n; i++)
		assert_int_equal(sched_wait_final(w.c, b.ids[i], 0), GS_PACKET_COMPLETED);

	gs_packet_record *recs;
	size_t nrecs;
	const gs_packet_record *r;
	expect_tdr_fault(&w, gid, &r, &recs, &nrecs);
	uint64_t ran = r->completed_ns - r->started_ns;
	if (virtual_clock) {
		/* ENGINE_TIMEOUT: the budget plus TdrDelay of engine time, exactly. */
		assert_int_equal(ran, (uint64_t)TDR_QUANTUM * 1000 + TDR_DELAY_MS * MS);
	} else {
		/* The TDR timer: budget + TdrDelay after the dispatch, then the reset (started_ns
		 * is when the loop saw the start: some milliseconds of slack). */
		if (ran + 20 * MS < TDR_DELAY_MS * MS || ran > 2000 * MS)
			fail_msg("guilty packet ran %" PRIu64 " ms before its reset", ran / MS);
	}
	for (size_t i = 1; i < b.n; i++) {
		const gs_packet_record *ri = sched_record(recs, nrecs, b.ids[i]);
		assert_non_null(ri);
		assert_int_equal(ri->state, GS_PACKET_COMPLETED);
		/* The guilty one held the engine first; the innocents ran after the recovery. */
		assert_true(ri->started_ns >= r->completed_ns);
	}
	gs_history_free(recs, nrecs);

	/* The guilty context is in its error state; the innocents' bytes are exact. */
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	assert_int_equal(gs_submit(w.c, guilty, &nop, 0, NULL), GS_STATUS_FAULTED);
	assert_int_equal(gs_submit(w.c, guilty, &nop, 0, NULL), GS_STATUS_FAULTED);
	gs_dmabuf_free(&nop);
	for (int i = 0; i < TDR_INNOCENTS; i++)
		innocent_verify(&w, &in[i]);

	/* Audited: one TDR, the guilty context faulted, nobody banned. */
	itest_audit_barrier(w.c, in[0].ctx);
	assert_int_equal(notes(f, "tdr"), 1);
	assert_int_equal(notes(f, "context_faulted"), 1);
	assert_int_equal(notes(f, "tenant_banned"), 0);
	free(in);
	batch_free(&b);
}

static void test_tdr_wall(void **state)
{
	tdr_scenario(*state, false);
}

static void test_tdr_virtual(void **state)
{
	tdr_scenario(*state, true);
}

/* =====================================================================================
 * 7. Bans
 * ===================================================================================== */

#define BAN_CONFIG_FMT                                                                             \
	"{\"tdr_delay_ms\": 100, \"quantum_us\": 1000, \"tdr_limit_count\": 2, "                   \
	"\"tdr_limit_time_ms\": %u, \"tenants\": ["                                                \
	"{\"name\": \"bad\", \"token\": \"tok-bad\"},"                                             \
	"{\"name\": \"good\", \"token\": \"tok-good\"}]}"

static void ban_start(fx *f, uint32_t window_ms, bool virtual_clock, world *bad, world *good)
{
	char cfg[512];
	snprintf(cfg, sizeof(cfg), BAN_CONFIG_FMT, window_ms);
	fx_start(f, 0, cfg, virtual_clock);
	world_open(bad, f, 0, "tok-bad", "bad");
	world_open(good, f, 0, "tok-good", "good");
}

/* One batch of tenant bad: three 1 s hangs on three contexts, then four short packets on a
 * fourth context that competes with them (so each hang is budgeted). Returns the rival. */
static uint64_t ban_batch(world *bad, batch *b)
{
	uint64_t g[3];
	for (int i = 0; i < 3; i++)
		g[i] = world_context(bad, 0, CLASS_NORMAL, 0);
	uint64_t rival = world_context(bad, 0, CLASS_NORMAL, 0);
	for (int i = 0; i < 3; i++)
		sched_spin(batch_add(b, g[i], 0), 1000000, true);
	for (int i = 0; i < 4; i++)
		sched_spin(batch_add(b, rival, 0), 500, false);
	batch_submit(b, bad->c);
	return rival;
}

/* Polls (bounded) until the tenant's requests are refused with BANNED. */
static void await_ban(world *bad)
{
	long long deadline = gs_test_now_ms() + AWAIT_MS;
	int rv = 0;
	while (gs_test_now_ms() < deadline) {
		gs_daemon_info *info = NULL;
		rv = gs_info(bad->c, &info);
		gs_info_free(info);
		if (rv != 0)
			break;
	}
	if (rv != GS_STATUS_BANNED)
		fail_msg("tenant bad was not banned within %d ms (%s)", AWAIT_MS,
		         gs_status_name(rv));
}

/* After the third timeout of tenant bad: its requests are refused with BANNED, tenant good
 * works as before, and the audit says so: three TDRs of its packets, one ban. */
static void expect_banned(fx *f, world *bad, world *good, uint64_t good_ctx)
{
	uint64_t dev;
	assert_int_equal(gs_device_create(bad->c, "after the ban", &dev), GS_STATUS_BANNED);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	assert_int_equal(gs_submit(bad->c, good_ctx, &nop, 0, NULL), GS_STATUS_BANNED);
	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(bad->c, &info), GS_STATUS_BANNED);

	uint64_t a = world_alloc(good, 4096);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a, 0, 4096, 0x600d600du), 0);
	itest_submit_wait(good->c, good_ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	uint8_t want[4096];
	gs_isa_fill(want, sizeof(want), 0x600d600du);
	expect_bytes(good->c, a, want, sizeof(want), "good tenant after the ban");

	itest_audit_barrier(good->c, good_ctx);
	gs_dmabuf_free(&nop);
	assert_int_equal(notes_of(f, "tdr", "bad"), 3);
	assert_int_equal(itest_audit_int(f->d[0].t.db,
	                                 "SELECT COUNT(*) FROM packets WHERE tenant = 'bad' AND "
	                                 "state = %d AND result LIKE "
	                                 "'timeout detection and recovery%%'",
	                                 GS_PACKET_FAULTED),
	                 3);
	assert_int_equal(notes_of(f, "tenant_banned", "bad"), 1);
	assert_int_equal(notes(f, "tenant_banned"), 1);
	assert_int_equal(notes_of(f, "tdr", "good"), 0);
}

/*
 * Virtual clock: one batch of tenant bad holds three hangs on three contexts and, on a
 * fourth, work that competes with them, so each hang is budgeted and ends in ENGINE_TIMEOUT.
 * (On the virtual clock work of another tenant cannot be made to wait beside them: its own
 * batch would run to its end in no wall time. The wall-clock test below has that.)
 */
static void test_ban_virtual(void **state)
{
	fx *f = *state;
	world bad, good;
	ban_start(f, 60000, true, &bad, &good);
	uint64_t good_ctx = world_context(&good, 0, CLASS_NORMAL, 0);
	batch b = {0};
	uint64_t rival = ban_batch(&bad, &b);
	/* The hangs time out in no wall time; once the third has, tenant bad is banned and
	 * even PacketWait is refused. */
	await_ban(&bad);
	assert_int_equal(gs_packet_wait(bad.c, b.ids[0], 0, NULL, NULL), GS_STATUS_BANNED);
	expect_banned(f, &bad, &good, good_ctx);
	/* The rival's work was the banned tenant's too: cancelled with the ban. */
	assert_int_equal(itest_audit_int(f->d[0].t.db,
	                                 "SELECT COUNT(*) FROM packets WHERE context = %" PRIu64
	                                 " AND state = %d AND result = 'tenant banned'",
	                                 rival, GS_PACKET_CANCELLED),
	                 4);
	batch_free(&b);
}

/* The same three timeouts spread over more virtual time than tdr_limit_time_ms (each takes
 * 1 ms of budget + 100 ms of TdrDelay: 202 ms from the first to the third): no ban. */
static void test_ban_needs_timeouts_within_window(void **state)
{
	fx *f = *state;
	world bad, good;
	ban_start(f, 150, true, &bad, &good);
	batch b = {0};
	uint64_t rival = ban_batch(&bad, &b);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(sched_wait_final(bad.c, b.ids[i], GS_STATUS_FAULTED),
		                 GS_PACKET_FAULTED);
	for (size_t i = 3; i < b.n; i++)
		assert_int_equal(sched_wait_final(bad.c, b.ids[i], 0), GS_PACKET_COMPLETED);
	/* Still served: a new context of tenant bad works. */
	uint64_t ctx = world_context(&bad, 0, CLASS_NORMAL, 0);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	itest_submit_wait(bad.c, ctx, &nop, 0);
	itest_submit_wait(bad.c, rival, &nop, 0);
	gs_dmabuf_free(&nop);
	itest_audit_barrier(bad.c, ctx);
	assert_int_equal(notes_of(f, "tdr", "bad"), 3);
	assert_int_equal(notes(f, "tenant_banned"), 0);
	batch_free(&b);
}

/*
 * Wall clock, across tenants: a hang of tenant bad runs alone; tenant good's packet arrives
 * on the same band; the hang's quantum expires, the preemption is not honoured, the engine
 * is reset. Three times.
 */
static void test_ban_wall(void **state)
{
	fx *f = *state;
	world bad, good;
	ban_start(f, 60000, false, &bad, &good);
	uint64_t good_ctx = world_context(&good, 0, CLASS_NORMAL, 0);
	uint64_t a = world_alloc(&good, 4096);
	gs_dmabuf hang, work;
	gs_dmabuf_init(&hang);
	gs_dmabuf_init(&work);
	sched_spin(&hang, 5000000, true);
	for (int i = 0; i < 3; i++) {
		uint64_t g = world_context(&bad, 0, CLASS_NORMAL, 0);
		uint64_t gid = submit_one(bad.c, g, &hang, 0, NULL);
		if (!sched_await_event(bad.c, gid, GS_PACKET_RUNNING, AWAIT_MS))
			fail_msg("hang %d did not start within %d ms", i, AWAIT_MS);
		gs_dmabuf_reset(&work);
		assert_int_equal(gs_dmabuf_fill(&work, a, 0, 4096, (uint32_t)i), 0);
		uint64_t wid = submit_one(good.c, good_ctx, &work, 0, NULL);
		/* Good's packet runs once the hang is off the engine: reset and faulted. */
		assert_int_equal(sched_wait_final(good.c, wid, 0), GS_PACKET_COMPLETED);
		if (i == 2)
			break; /* the third timeout banned tenant bad: it can ask nothing */
		assert_int_equal(sched_wait_final(bad.c, gid, GS_STATUS_FAULTED),
		                 GS_PACKET_FAULTED);
		gs_packet_event *ev;
		size_t n = sched_events(bad.c, gid, &ev);
		assert_int_equal(ev[n - 1].state, GS_PACKET_FAULTED);
		assert_non_null(strstr(ev[n - 1].detail, "timeout detection and recovery"));
		gs_packet_events_free(ev, n);
	}
	await_ban(&bad);
	gs_dmabuf_free(&hang);
	gs_dmabuf_free(&work);
	expect_banned(f, &bad, &good, good_ctx);
}

/* =====================================================================================
 * 8. GPU waits across contexts and nodes
 * ===================================================================================== */

typedef struct cpu_waiter {
	const gs_testd *t;
	uint64_t sync, value;
	int rv;
} cpu_waiter;

static void *cpu_waiter_main(void *arg)
{
	cpu_waiter *cw = arg;
	gs_client *c = NULL;
	cw->rv = gs_connect(cw->t->url, "", &c);
	if (cw->rv == 0) {
		gs_client_set_timeout(c, ITEST_TIMEOUT_MS);
		uint64_t cur;
		cw->rv = gs_sync_wait(c, cw->sync, cw->value, ITEST_TIMEOUT_MS, &cur);
		gs_close(c);
	}
	return NULL;
}

static void test_gpu_waits(void **state)
{
	fx *f = *state;
	fx_start(f, 0, "{}", false);
	world w;
	world_open(&w, f, 0, NULL, "waits");
	uint64_t ca = world_context(&w, 1, CLASS_NORMAL, 0); /* A: waits, on node 1 */
	uint64_t cb = world_context(&w, 0, CLASS_NORMAL, 0); /* B: signals, on node 0 */
	uint64_t src = world_alloc(&w, 4096), dst = world_alloc(&w, 4096);
	uint64_t s;
	assert_int_equal(gs_sync_create(w.c, w.dev, 0, &s), 0);

	/* A's packet is queued first and must wait for B's FILL, however long B spins. */
	gs_dmabuf pa, pb;
	gs_dmabuf_init(&pa);
	assert_int_equal(gs_dmabuf_wait(&pa, s, 1), 0);
	assert_int_equal(gs_dmabuf_copy(&pa, dst, 0, src, 0, 4096), 0);
	uint64_t aid = submit_one(w.c, ca, &pa, 0, NULL);
	gs_dmabuf_init(&pb);
	sched_spin(&pb, 50000, false);
	assert_int_equal(gs_dmabuf_fill(&pb, src, 0, 4096, 0xb0b0b0b0u), 0);
	assert_int_equal(gs_dmabuf_signal(&pb, s, 1), 0);
	uint64_t bid = submit_one(w.c, cb, &pb, 0, NULL);
	assert_int_equal(sched_wait_final(w.c, aid, 0), GS_PACKET_COMPLETED);
	assert_int_equal(sched_wait_final(w.c, bid, 0), GS_PACKET_COMPLETED);
	uint8_t want[4096];
	gs_isa_fill(want, sizeof(want), 0xb0b0b0b0u);
	expect_bytes(w.c, dst, want, sizeof(want), "A's copy of B's result");
	gs_dmabuf_free(&pa);
	gs_dmabuf_free(&pb);
	/* explain says what A waited for and whose SIGNAL released it. */
	char want_why[128];
	snprintf(want_why, sizeof(want_why),
	         "waited for sync %" PRIu64 " >= 1 (last signalled by packet %" PRIu64 ")", s, bid);
	expect_explained(&w, aid, GS_PACKET_READY, want_why);

	/* Now B faults before its SIGNAL: A's waiting packet is cancelled with a reason, the
	 * packet queued behind it on A still runs, and CPU waits for the value fail. */
	gs_dmabuf_init(&pa);
	assert_int_equal(gs_dmabuf_wait(&pa, s, 2), 0);
	assert_int_equal(gs_dmabuf_copy(&pa, dst, 0, src, 0, 4096), 0);
	uint64_t aid2 = submit_one(w.c, ca, &pa, 0, NULL);
	gs_dmabuf_reset(&pa);
	assert_int_equal(gs_dmabuf_fill(&pa, dst, 0, 16, 0xa1a1a1a1u), 0);
	uint64_t aid3 = submit_one(w.c, ca, &pa, 0, NULL);
	gs_dmabuf_free(&pa);
	assert_int_equal(sched_state_now(w.c, aid2), GS_PACKET_SUBMITTED);

	cpu_waiter cw = {.t = &f->d[0].t, .sync = s, .value = 2, .rv = -100};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, cpu_waiter_main, &cw), 0);

	gs_allocation_placement victim;
	itest_alloc(w.c, w.dev, 4096, 0, 0, &victim);
	gs_dmabuf_init(&pb);
	sched_spin(&pb, 20000, false);
	assert_int_equal(gs_dmabuf_fill(&pb, src, 0, 64, 0x1u), 0);
	size_t forged = pb.len;
	assert_int_equal(gs_dmabuf_fill(&pb, src, 0, 64, 0x2u), 0);
	assert_int_equal(gs_dmabuf_signal(&pb, s, 2), 0);
	/* The second FILL's address is forged to an allocation outside its list. */
	pb.patch_count = 1;
	gs_le64_put(pb.data + forged + GS_ISA_DST_FIELD, victim.address);
	uint64_t bid2 = submit_one(w.c, cb, &pb, 0, NULL);
	gs_dmabuf_free(&pb);
	assert_int_equal(sched_wait_final(w.c, bid2, GS_STATUS_FAULTED), GS_PACKET_FAULTED);
	assert_int_equal(sched_wait_final(w.c, aid2, 0), GS_PACKET_CANCELLED);
	assert_int_equal(sched_wait_final(w.c, aid3, 0), GS_PACKET_COMPLETED);
	pthread_join(th, NULL);
	assert_int_equal(cw.rv, GS_STATUS_FAULTED);
	long long t0 = gs_test_now_ms();
	uint64_t cur = 0;
	assert_int_equal(gs_sync_wait(w.c, s, 2, 5000, &cur), GS_STATUS_FAULTED);
	assert_true(gs_test_now_ms() - t0 < 4000); /* answered, not timed out */
	assert_int_equal(gs_sync_wait(w.c, s, 1, 0, &cur), 0);
	assert_int_equal(cur, 1); /* B's first SIGNAL stands */

	gs_packet_record *recs;
	size_t n = sched_history_device(w.c, w.dev, &recs);
	const gs_packet_record *r = sched_record(recs, n, aid2);
	assert_non_null(r);
	assert_int_equal(r->state, GS_PACKET_CANCELLED);
	if (!strstr(r->result, "can never be satisfied") || !strstr(r->result, "faulted"))
		fail_msg("the cancelled waiter's result is '%s'", r->result);
	gs_history_free(recs, n);
	expect_explained(&w, aid2, GS_PACKET_CANCELLED, "can never be satisfied");
	/* Nothing of A's cancelled COPY reached dst: it holds B's first result, then A's FILL. */
	gs_isa_fill(want, 16, 0xa1a1a1a1u);
	expect_bytes(w.c, dst, want, sizeof(want), "A's destination after the cancel");
}

/* =====================================================================================
 * 9. ContextSetPriority
 * ===================================================================================== */

static void test_set_priority(void **state)
{
	fx *f = *state;
	fx_start(f, 0,
	         "{\"tenants\": [{\"name\": \"capped\", \"token\": \"tok-capped\", "
	         "\"priority_ceiling\": 3}]}",
	         false);
	world w;
	world_open(&w, f, 0, "tok-capped", "set-priority");
	uint64_t lowered = world_context(&w, 0, CLASS_NORMAL, 0);
	uint64_t waiting = world_context(&w, 0, CLASS_BELOW_NORMAL, 0);
	uint64_t al = world_alloc(&w, PRE_BYTES), aw = world_alloc(&w, PRE_BYTES);

	/* Refused: out of range, above the ceiling. Nothing changes. */
	assert_int_equal(gs_context_set_priority(w.c, lowered, 6, 0), GS_STATUS_INVALID_ARGUMENT);
	assert_int_equal(gs_context_set_priority(w.c, lowered, 2, 8), GS_STATUS_INVALID_ARGUMENT);
	assert_int_equal(gs_context_set_priority(w.c, lowered, 2, -8), GS_STATUS_INVALID_ARGUMENT);
	assert_int_equal(gs_context_set_priority(w.c, lowered, CLASS_HIGH, 0),
	                 GS_STATUS_PERMISSION_DENIED);
	assert_int_equal(gs_context_set_priority(w.c, lowered, CLASS_REALTIME, -7),
	                 GS_STATUS_PERMISSION_DENIED);
	assert_int_equal(gs_context_set_priority(w.c, 987654321, CLASS_NORMAL, 0),
	                 GS_STATUS_NOT_FOUND);
	/* At the ceiling and the range's ends: accepted. */
	assert_int_equal(gs_context_set_priority(w.c, waiting, CLASS_ABOVE_NORMAL, 7), 0);
	assert_int_equal(gs_context_set_priority(w.c, waiting, CLASS_BELOW_NORMAL, -7), 0);
	itest_audit_barrier(w.c, waiting);
	assert_int_equal(itest_audit_int(f->d[0].t.db,
	                                 "SELECT priority_class * 100 + priority FROM contexts "
	                                 "WHERE context = %" PRIu64,
	                                 waiting),
	                 CLASS_BELOW_NORMAL * 100 - 7);

	/* A running NORMAL packet, and a BELOW_NORMAL one that waits behind it. */
	uint64_t fence0 = 0;
	uint64_t lid = start_long(&w, lowered, al, 0x10101010u, &fence0);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, aw, 0, PRE_BYTES, 0x20202020u), 0);
	uint64_t wid = submit_one(w.c, waiting, &buf, 0, NULL);
	gs_dmabuf_free(&buf);
	/* Lower band: it waits; nothing preempts a higher band for it. */
	gs_packet_state st = sched_state_now(w.c, wid);
	assert_false(gs_packet_state_is_final(st));
	assert_int_equal(sched_state_now(w.c, lid), GS_PACKET_RUNNING);

	/* Lowered below the waiting one: preempted, the other runs and completes first. */
	assert_int_equal(gs_context_set_priority(w.c, lowered, CLASS_IDLE, 0), 0);
	assert_int_equal(sched_wait_final(w.c, wid, 0), GS_PACKET_COMPLETED);
	st = sched_state_now(w.c, lid);
	if (gs_packet_state_is_final(st))
		fail_msg("the lowered packet is already %s", state_name(st));
	assert_int_equal(sched_wait_final(w.c, lid, 0), GS_PACKET_COMPLETED);
	/* The submission is answered once its record is committed, and the packet joins the
	 * queue just after: the lowering may come first (reason: lowered) or the waiting
	 * packet's arrival may find the lowered one running (reason: it names the waiting
	 * context). Either names the cause. */
	char by_waiting[96];
	snprintf(by_waiting, sizeof(by_waiting), "preempted by context %" PRIu64, waiting);
	expect_preempted_once(&w, lid, fence0, "priority was lowered", by_waiting);
	uint8_t want[PRE_BYTES];
	gs_isa_fill(want, PRE_BYTES, 0x10101010u);
	expect_bytes(w.c, al, want, PRE_BYTES, "lowered context's allocation");
	gs_isa_fill(want, PRE_BYTES, 0x20202020u);
	expect_bytes(w.c, aw, want, PRE_BYTES, "waiting context's allocation");
}

/* =====================================================================================
 * 10. Flips
 * ===================================================================================== */

#define FLIPS 8

static void test_flip_wall(void **state)
{
	fx *f = *state;
	fx_start(f, 0, "{\"refresh_hz\": 60}", false);
	world w;
	world_open(&w, f, 0, NULL, "flip");
	uint64_t ctx = world_context(&w, 0, CLASS_NORMAL, 0);
	batch wait = {0}, nowait = {0};
	for (int i = 0; i < FLIPS; i++) {
		assert_int_equal(gs_dmabuf_nop(batch_add(&wait, ctx, GS_SUBMIT_FLIP)), 0);
		assert_int_equal(
		        gs_dmabuf_nop(batch_add(&nowait, ctx,
		                                GS_SUBMIT_FLIP | GS_SUBMIT_FLIP_WITH_NO_WAIT)),
		        0);
	}
	batch_submit(&wait, w.c);
	batch_wait(&wait, w.c, GS_PACKET_COMPLETED);
	batch_submit(&nowait, w.c);
	batch_wait(&nowait, w.c, GS_PACKET_COMPLETED);

	gs_packet_record *recs;
	size_t n = sched_history_device(w.c, w.dev, &recs);
	/* Each Flip completes at a vertical blank of its own, within a period of running. */
	unsigned long long prev_blank = 0;
	for (int i = 0; i < FLIPS; i++) {
		gs_packet_event *ev;
		size_t ne = sched_events(w.c, wait.ids[i], &ev);
		assert_int_equal(ev[ne - 1].state, GS_PACKET_COMPLETED);
		unsigned long long blank = 0;
		if (sscanf(ev[ne - 1].detail, "vertical blank %llu", &blank) != 1)
			fail_msg("flip %d completed with detail '%s'", i, ev[ne - 1].detail);
		const gs_packet_record *r = sched_record(recs, n, wait.ids[i]);
		assert_non_null(r);
		/* Each ran after the one before had completed (the first after blank 0, the
		 * daemon's start), so it waits for a later blank. */
		if (blank <= prev_blank)
			fail_msg("flip %d (ran at %" PRIu64 " ns, completed %" PRIu64
			         " ns) completed at vertical blank %llu, though it ran after "
			         "blank %llu",
			         i, r->started_ns, r->completed_ns, blank, prev_blank);
		prev_blank = blank;
		gs_packet_events_free(ev, ne);
		uint64_t held = r->completed_ns - r->started_ns;
		if (held > PERIOD_60HZ + 30 * MS)
			fail_msg("flip %d completed %" PRIu64 " us after it ran (period %" PRIu64
			         " us)",
			         i, held / 1000, PERIOD_60HZ / 1000);
	}
	/* FlipWithNoWait completes when executed: no blank named, and all of them take less
	 * time than three periods (as many waiting flips need FLIPS - 1 periods at least). */
	uint64_t first = UINT64_MAX, last = 0;
	for (int i = 0; i < FLIPS; i++) {
		gs_packet_event *ev;
		size_t ne = sched_events(w.c, nowait.ids[i], &ev);
		assert_int_equal(ev[ne - 1].state, GS_PACKET_COMPLETED);
		assert_null(strstr(ev[ne - 1].detail, "vertical blank"));
		gs_packet_events_free(ev, ne);
		const gs_packet_record *r = sched_record(recs, n, nowait.ids[i]);
		assert_non_null(r);
		first = r->started_ns < first ? r->started_ns : first;
		last = r->completed_ns > last ? r->completed_ns : last;
	}
	assert_true(last - first < 3 * PERIOD_60HZ);
	gs_history_free(recs, n);
	batch_free(&wait);
	batch_free(&nowait);
}

static void test_flip_virtual(void **state)
{
	fx *f = *state;
	fx_start(f, 0, "{\"refresh_hz\": 60}", true);
	world w;
	world_open(&w, f, 0, NULL, "flip");
	uint64_t ctx = world_context(&w, 0, CLASS_NORMAL, 0);
	batch b = {0};
	uint64_t spin_us[2 * FLIPS];
	for (int i = 0; i < FLIPS; i++) {
		uint64_t us = 1234 + 5000 * (uint64_t)i;
		spin_us[b.n] = us;
		sched_spin(batch_add(&b, ctx, GS_SUBMIT_FLIP), us, false);
		spin_us[b.n] = 1234;
		sched_spin(batch_add(&b, ctx, GS_SUBMIT_FLIP | GS_SUBMIT_FLIP_WITH_NO_WAIT), 1234,
		           false);
	}
	batch_submit(&b, w.c);
	batch_wait(&b, w.c, GS_PACKET_COMPLETED);
	gs_packet_record *recs;
	size_t n = sched_history_device(w.c, w.dev, &recs);
	for (size_t i = 0; i < b.n; i++) {
		const gs_packet_record *r = sched_record(recs, n, b.ids[i]);
		assert_non_null(r);
		uint64_t end = r->started_ns + spin_us[i] * 1000 + CMD_NS; /* its work done */
		if (!(b.desc[i].submit_flags & GS_SUBMIT_FLIP_WITH_NO_WAIT)) {
			/* At the next vertical blank after its work: a multiple of the period. */
			uint64_t blank = (end / PERIOD_60HZ + 1) * PERIOD_60HZ;
			if (r->completed_ns != blank)
				fail_msg("flip %" PRIu64 " ran %" PRIu64 "..%" PRIu64
				         " ns and completed at %" PRIu64
				         " ns, not at blank %" PRIu64,
				         r->packet, r->started_ns, end, r->completed_ns, blank);
		} else {
			assert_int_equal(r->completed_ns, end);
			assert_true(r->completed_ns % PERIOD_60HZ != 0);
		}
	}
	gs_history_free(recs, n);
	batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_virtual_determinism, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_share_weighted, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_share_equal, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_share_per_tenant, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_fixed_share_idle_unused, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_fixed_share_wall, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_band_order, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_realtime_not_sliced, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_priority_preemption_wall, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_starvation_normal_progresses, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_starvation_idle_queued_first, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_tdr_wall, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_tdr_virtual, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_ban_virtual, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_ban_needs_timeouts_within_window, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_ban_wall, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_gpu_waits, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_set_priority, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_flip_wall, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_flip_virtual, setup, teardown),
	};
	/* GS_TEST_FILTER=test_flip_wall (a glob) runs only the matching tests. */
	if (getenv("GS_TEST_FILTER"))
		cmocka_set_test_filter(getenv("GS_TEST_FILTER"));
	/* On a GPU backend (GS_TEST_BACKEND, integration.test_scheduler.vulkan) only the wall-clock
	 * tests run: the virtual clock is the emulator's. */
	const char *backend = getenv("GS_TEST_BACKEND");
	if (backend && *backend && strcmp(backend, "emu") != 0)
		cmocka_set_test_filter("*_wall");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
