/*
 * End to end, through the client library against a real gpuschedd: contexts on two nodes,
 * allocations placed by segment preference, a seeded workload of FILL/COPY/CHECKSUM packets
 * on both contexts with explicit cross-context dependencies checked byte for byte against a
 * CPU model, then the audit record of that workload (history filters, events), NullRendering,
 * all-or-nothing batches, sync objects, CPU access, statistics and the virtual clock.
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
#include "testd.h"
#include "wddm.h"

/* ---- fixture: one daemon per test ---- */

typedef struct fx {
	gs_testd t;
	gs_client *c;
	itest_layout lay;
	uint64_t dev;
	uint64_t barrier_dev; /* a device of its own, so filters on `dev` stay exact */
	uint64_t barrier_ctx;
} fx;

static int start(void **state, const char *const *args)
{
	fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	if (gs_testd_start(&f->t, args) != 0) {
		gs_testd_cleanup(&f->t);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

/* Called first by each test (not by setup: a failure here must still reach teardown). */
static fx *ready(void **state)
{
	fx *f = *state;
	f->c = itest_connect(&f->t, NULL);
	itest_layout_of(f->c, &f->lay);
	assert_int_equal(gs_device_create(f->c, "e2e", &f->dev), 0);
	assert_int_equal(gs_device_create(f->c, "barrier", &f->barrier_dev), 0);
	f->barrier_ctx =
	        itest_context(f->c, f->barrier_dev, f->lay.paging_node, f->lay.paging_node);
	return f;
}

static int setup(void **state)
{
	return start(state, NULL);
}

static int setup_virtual(void **state)
{
	static const char *const args[] = {"--clock", "virtual", NULL};
	return start(state, args);
}

static int teardown(void **state)
{
	fx *f = *state;
	if (!f)
		return 0;
	gs_close(f->c);
	int rc = gs_testd_stop(&f->t);
	if (rc != 0)
		gs_testd_dump_log(&f->t);
	gs_testd_cleanup(&f->t);
	free(f);
	/* A daemon that does not stop cleanly (or crashed under a sanitizer) fails the test. */
	if (rc != 0)
		fprintf(stderr, "gpuschedd exited with %d\n", rc);
	return rc == 0 ? 0 : -1;
}

static uint32_t segpref(uint8_t s0, uint8_t d0, uint8_t s1, uint8_t d1)
{
	gs_segpref p = {{s0, s1, 0, 0, 0}, {d0, d1, 0, 0, 0}};
	return gs_segpref_encode(&p);
}

/* ---- the seeded workload ---- */

#define WL_SEED    UINT64_C(0x5eed0fa11c0ffee)
#define WL_PACKETS 600
#define WL_NALLOC  4
#define WL_SLOTS   2048 /* checksum slots of 8 bytes */
#define WL_MAX_OP  4096

typedef struct wl_packet {
	uint64_t id;
	uint64_t fence;
	int ctx;
	uint32_t flags;
	uint32_t dma_size;
	uint32_t allocs;
	uint32_t patches;
} wl_packet;

typedef struct wl_checksum {
	uint32_t slot;
	uint64_t value;
} wl_checksum;

typedef struct wl {
	fx *f;
	uint64_t rng;
	uint64_t ctx[2];
	uint32_t node[2];
	uint64_t sync[2];
	uint64_t seq[2];      /* last SIGNAL value submitted per context */
	uint64_t done_seq[2]; /* highest SIGNAL value known reached per context */
	gs_allocation_placement al[WL_NALLOC];
	uint64_t size[WL_NALLOC];
	uint8_t *model[WL_NALLOC];
	/* Per allocation and context: the last packet touching it and its SIGNAL value. */
	uint64_t last_pkt[WL_NALLOC][2];
	uint64_t last_seq[WL_NALLOC][2];
	gs_allocation_placement cs;
	uint8_t *cs_model;
	uint32_t next_slot;
	wl_checksum *checks;
	size_t nchecks;
	wl_packet *pk;
	size_t npk;
	unsigned deps_sync, deps_wait;
} wl;

/* Flags a client may set; none changes execution except NullRendering. */
static const uint32_t wl_flags[] = {
        0,
        GS_SUBMIT_PRESENT,
        GS_SUBMIT_PRESENT | GS_SUBMIT_NULL_RENDERING,
        GS_SUBMIT_PRESENT | GS_SUBMIT_REDIRECTED_PRESENT,
        GS_SUBMIT_FLIP,
        GS_SUBMIT_FLIP_WITH_NO_WAIT | GS_SUBMIT_PRESENT,
        GS_SUBMIT_NULL_RENDERING,
        0,
        0,
        GS_SUBMIT_PRESENT,
};

static void rand_range(wl *w, int a, uint64_t *off, uint64_t *size)
{
	uint64_t max = w->size[a] < WL_MAX_OP ? w->size[a] : WL_MAX_OP;
	*size = 1 + itest_rand_below(&w->rng, max);
	*off = itest_rand_below(&w->rng, w->size[a] - *size + 1);
}

/* Before a packet of context k touches allocation a, whatever the other context did to it
 * must be finished: wait for it, alternately by its SIGNAL and by PacketWait. */
static void depend(wl *w, int k, int a)
{
	int o = 1 - k;
	uint64_t need = w->last_seq[a][o];
	if (need == 0 || w->done_seq[o] >= need)
		return;
	gs_client *c = w->f->c;
	if (itest_rand_below(&w->rng, 2) == 0) {
		uint64_t cur = 0;
		int rv = gs_sync_wait(c, w->sync[o], need, ITEST_TIMEOUT_MS, &cur);
		if (rv != 0)
			fail_msg("sync_wait %" PRIu64 ": %s: %s", need, gs_status_name(rv),
			         gs_client_message(c));
		assert_true(cur >= need);
		w->done_seq[o] = cur;
		w->deps_sync++;
	} else {
		gs_packet_state st = GS_PACKET_UNKNOWN;
		int rv = gs_packet_wait(c, w->last_pkt[a][o], ITEST_TIMEOUT_MS, &st, NULL);
		if (rv != 0)
			fail_msg("packet_wait: %s: %s", gs_status_name(rv), gs_client_message(c));
		assert_int_equal(st, GS_PACKET_COMPLETED);
		w->done_seq[o] = need;
		w->deps_wait++;
	}
}

static void touch(wl *w, int k, int a, uint64_t pkt)
{
	w->last_pkt[a][k] = pkt;
	w->last_seq[a][k] = w->seq[k];
}

/* Builds, models and submits one packet. */
static void wl_packet_one(wl *w, gs_dmabuf *buf)
{
	gs_client *c = w->f->c;
	int k = (int)itest_rand_below(&w->rng, 2);
	uint32_t flags = wl_flags[itest_rand_below(&w->rng, sizeof(wl_flags) / sizeof(*wl_flags))];
	bool exec = !(flags & GS_SUBMIT_NULL_RENDERING);
	bool used[WL_NALLOC] = {false};
	int ncmds = 1 + (int)itest_rand_below(&w->rng, 4);

	gs_dmabuf_reset(buf);
	/* Some packets take engine time first, so that without its dependencies a packet of
	 * the other context would overtake them. */
	if (itest_rand_below(&w->rng, 3) == 0)
		assert_int_equal(gs_dmabuf_spin(buf, 200 + itest_rand_below(&w->rng, 1800), 0), 0);
	for (int i = 0; i < ncmds; i++) {
		int op = (int)itest_rand_below(&w->rng, 3);
		int a = (int)itest_rand_below(&w->rng, WL_NALLOC);
		uint64_t off, size;
		rand_range(w, a, &off, &size);
		if (op == 2 && w->next_slot >= WL_SLOTS)
			op = 0;
		if (op == 0) {
			uint32_t pattern = (uint32_t)itest_rand(&w->rng);
			assert_int_equal(
			        gs_dmabuf_fill(buf, w->al[a].allocation, off, size, pattern), 0);
			depend(w, k, a);
			used[a] = true;
			if (exec)
				gs_isa_fill(w->model[a] + off, size, pattern);
		} else if (op == 1) {
			int b = (int)itest_rand_below(&w->rng, WL_NALLOC);
			uint64_t doff;
			if (size > w->size[b])
				size = w->size[b];
			doff = itest_rand_below(&w->rng, w->size[b] - size + 1);
			assert_int_equal(gs_dmabuf_copy(buf, w->al[b].allocation, doff,
			                                w->al[a].allocation, off, size),
			                 0);
			depend(w, k, a);
			depend(w, k, b);
			used[a] = used[b] = true;
			if (exec)
				memmove(w->model[b] + doff, w->model[a] + off, size);
		} else {
			uint32_t slot = w->next_slot++;
			assert_int_equal(gs_dmabuf_checksum(buf, w->cs.allocation,
			                                    (uint64_t)slot * 8, w->al[a].allocation,
			                                    off, size),
			                 0);
			depend(w, k, a);
			used[a] = true;
			if (exec) {
				uint64_t sum = gs_isa_checksum(w->model[a] + off, size);
				gs_le64_put(w->cs_model + (size_t)slot * 8, sum);
				w->checks[w->nchecks++] = (wl_checksum){slot, sum};
			}
		}
	}
	/* Every packet ends by signalling its context's sync object: the other context's
	 * dependencies may wait for exactly this point. */
	uint64_t value = ++w->seq[k];
	assert_int_equal(gs_dmabuf_signal(buf, w->sync[k], value), 0);

	gs_submit_result res;
	int rv = gs_submit(c, w->ctx[k], buf, flags, &res);
	if (rv != 0)
		fail_msg("submit: %s: %s", gs_status_name(rv), gs_client_message(c));
	assert_int_equal(res.node, w->node[k]);
	for (int a = 0; a < WL_NALLOC; a++)
		if (used[a])
			touch(w, k, a, res.packet);
	w->pk[w->npk++] = (wl_packet){.id = res.packet,
	                              .fence = res.fence,
	                              .ctx = k,
	                              .flags = flags,
	                              .dma_size = (uint32_t)buf->len,
	                              .allocs = (uint32_t)buf->alloc_count,
	                              .patches = (uint32_t)buf->patch_count};
}

static void wl_setup(wl *w, fx *f)
{
	memset(w, 0, sizeof(*w));
	w->f = f;
	w->rng = WL_SEED;
	gs_client *c = f->c;
	uint32_t mem = f->lay.memory_segment, ap = f->lay.aperture_segment;
	assert_true(mem != 0 && ap != 0);
	assert_true(f->lay.nodes >= 2);

	/* Node 0 with the adapter's paging node as companion, and node 1. */
	w->node[0] = 0;
	w->node[1] = 1;
	gs_context_info eff;
	gs_context_desc desc;
	gs_context_desc_init(&desc, f->dev, 0);
	desc.info.paging_companion_node_id = f->lay.paging_node;
	assert_int_equal(gs_context_create(c, &desc, &w->ctx[0], &eff), 0);
	assert_int_equal(eff.paging_companion_node_id, f->lay.paging_node);
	assert_int_equal(eff.dma_buffer_size, desc.info.dma_buffer_size);
	w->ctx[1] = itest_context(c, f->dev, 1, f->lay.paging_node);
	for (int k = 0; k < 2; k++)
		assert_int_equal(gs_sync_create(c, f->dev, 0, &w->sync[k]), 0);

	/* Allocations in different segments; each lands in its first preferred segment. */
	const struct {
		uint64_t size;
		uint32_t set;
		uint32_t pref;
		uint32_t want;
	} spec[WL_NALLOC] = {
	        {64 << 10, 0, segpref((uint8_t)mem, 0, 0, 0), mem},
	        {64 << 10, 0, segpref((uint8_t)ap, 0, 0, 0), ap},
	        {32 << 10, 0, segpref((uint8_t)ap, 1, (uint8_t)mem, 0), ap},
	        {(48 << 10) + 100, (1u << mem) | (1u << ap),
	         segpref((uint8_t)mem, 1, (uint8_t)ap, 0), mem},
	};
	for (int a = 0; a < WL_NALLOC; a++) {
		itest_alloc(c, f->dev, spec[a].size, spec[a].set, spec[a].pref, &w->al[a]);
		assert_int_equal(w->al[a].segment, spec[a].want);
		assert_int_equal(w->al[a].address, gs_addr_make(w->al[a].segment, w->al[a].offset));
		gs_allocation_status st;
		assert_int_equal(gs_allocation_query(c, w->al[a].allocation, &st), 0);
		assert_int_equal(st.segment, spec[a].want);
		assert_int_equal(st.segment_preference, spec[a].pref);
		assert_int_equal(st.size, spec[a].size);
		assert_true(st.resident);
		w->size[a] = spec[a].size;
		/* New video memory reads as zero. */
		w->model[a] = calloc(1, spec[a].size);
		assert_non_null(w->model[a]);
	}
	itest_alloc(c, f->dev, WL_SLOTS * 8, 0, segpref((uint8_t)mem, 0, 0, 0), &w->cs);
	assert_int_equal(w->cs.segment, mem);
	w->cs_model = calloc(WL_SLOTS, 8);
	w->checks = calloc(WL_SLOTS, sizeof(*w->checks));
	w->pk = calloc(WL_PACKETS, sizeof(*w->pk));
	assert_non_null(w->cs_model);
	assert_non_null(w->checks);
	assert_non_null(w->pk);
}

static void wl_free(wl *w)
{
	for (int a = 0; a < WL_NALLOC; a++)
		free(w->model[a]);
	free(w->cs_model);
	free(w->checks);
	free(w->pk);
}

static void expect_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
	if (memcmp(got, want, n) == 0)
		return;
	size_t i = 0;
	while (got[i] == want[i])
		i++;
	fail_msg("%s: byte %zu is 0x%02x, the model says 0x%02x (seed 0x%" PRIx64 ")", what, i,
	         got[i], want[i], WL_SEED);
}

static void wl_verify_memory(wl *w)
{
	gs_client *c = w->f->c;
	for (int a = 0; a < WL_NALLOC; a++) {
		uint8_t *got = malloc(w->size[a]);
		assert_non_null(got);
		assert_int_equal(gs_allocation_read(c, w->al[a].allocation, 0, got, w->size[a]), 0);
		char what[64];
		snprintf(what, sizeof(what), "allocation %d", a);
		expect_bytes(got, w->model[a], w->size[a], what);
		free(got);
	}
	uint8_t *cs = malloc(WL_SLOTS * 8);
	assert_non_null(cs);
	assert_int_equal(gs_allocation_read(c, w->cs.allocation, 0, cs, WL_SLOTS * 8), 0);
	for (size_t i = 0; i < w->nchecks; i++) {
		uint64_t got = gs_le64_get(cs + (size_t)w->checks[i].slot * 8);
		if (got != w->checks[i].value)
			fail_msg("checksum slot %u: GPU 0x%016" PRIx64 ", model 0x%016" PRIx64,
			         w->checks[i].slot, got, w->checks[i].value);
	}
	expect_bytes(cs, w->cs_model, WL_SLOTS * 8, "checksum slots");
	free(cs);
}

static const wl_packet *wl_find(const wl *w, uint64_t id)
{
	for (size_t i = 0; i < w->npk; i++)
		if (w->pk[i].id == id)
			return &w->pk[i];
	return NULL;
}

/* Ids of the context's packets (k < 0: of both), oldest first: in the order the workload
 * submitted them, one at a time (ids are opaque and not ordered). Returns the count. */
static size_t wl_ids(const wl *w, int k, uint64_t *ids)
{
	size_t n = 0;
	for (size_t i = 0; i < w->npk; i++)
		if (k < 0 || w->pk[i].ctx == k)
			ids[n++] = w->pk[i].id;
	return n;
}

/* The audit file's number of a wire packet id. */
static uint64_t file_packet(const fx *f, uint64_t wire)
{
	return itest_wire_unmap(f->t.db, "packet", 0, 0, wire);
}

static void history(gs_client *c, const gs_history_filter *f, gs_packet_record **r, size_t *n)
{
	int rv = gs_history(c, f, r, n);
	if (rv != 0)
		fail_msg("history: %s: %s", gs_status_name(rv), gs_client_message(c));
	/* Newest first (ids are opaque: by submission time). */
	for (size_t i = 1; i < *n; i++)
		assert_true((*r)[i - 1].submitted_ns >= (*r)[i].submitted_ns);
}

/* Checks that the records are exactly `ids` (oldest first) in newest-first order. */
static void expect_ids(const gs_packet_record *r, size_t n, const uint64_t *ids, size_t nids)
{
	assert_int_equal(n, nids);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(r[i].packet, ids[nids - 1 - i]);
}

static void wl_verify_history(wl *w)
{
	fx *f = w->f;
	gs_client *c = f->c;
	uint64_t *ids = calloc(WL_PACKETS, sizeof(*ids));
	assert_non_null(ids);
	for (int k = 0; k < 2; k++) {
		size_t nids = wl_ids(w, k, ids);
		assert_true(nids > 0);
		gs_packet_record *r;
		size_t n;

		/* By context: exactly the packets submitted there, each as submitted. */
		gs_history_filter hf = {.context = w->ctx[k], .limit = 10000};
		history(c, &hf, &r, &n);
		expect_ids(r, n, ids, nids);
		for (size_t i = 0; i < n; i++) {
			const gs_packet_record *p = &r[i];
			const wl_packet *s = wl_find(w, p->packet);
			assert_non_null(s);
			assert_int_equal(p->context, w->ctx[k]);
			assert_int_equal(p->device, f->dev);
			assert_int_equal(p->node, w->node[k]);
			assert_int_equal(p->fence, s->fence);
			assert_int_equal(p->submit_flags, s->flags);
			assert_int_equal(p->patch_flags, gs_patch_flags_for_submit(s->flags));
			assert_int_equal(p->dma_size, s->dma_size);
			assert_int_equal(p->allocation_count, s->allocs);
			assert_int_equal(p->patch_count, s->patches);
			assert_int_equal(p->state, GS_PACKET_COMPLETED);
			assert_string_equal(p->result, "");
			assert_string_equal(p->tenant, "default");
			assert_true(p->submitted_ns > 0);
			assert_true(p->submitted_ns <= p->ready_ns);
			assert_true(p->ready_ns <= p->started_ns);
			assert_true(p->started_ns <= p->completed_ns);
			/* A context's fences count its packets: newest first, n down to 1. */
			assert_int_equal(p->fence, n - i);
		}
		gs_history_free(r, n);

		/* By node (the contexts are the device's only ones on their nodes). */
		hf = (gs_history_filter){
		        .device = f->dev, .match_node = true, .node = w->node[k], .limit = 10000};
		history(c, &hf, &r, &n);
		expect_ids(r, n, ids, nids);
		gs_history_free(r, n);

		/* By state. */
		hf = (gs_history_filter){
		        .context = w->ctx[k], .state = GS_PACKET_COMPLETED, .limit = 10000};
		history(c, &hf, &r, &n);
		expect_ids(r, n, ids, nids);
		gs_history_free(r, n);
		hf.state = GS_PACKET_REJECTED;
		history(c, &hf, &r, &n);
		assert_int_equal(n, 0);
		gs_history_free(r, n);

		/* Limit: the newest few. */
		hf = (gs_history_filter){.context = w->ctx[k], .limit = 7};
		history(c, &hf, &r, &n);
		assert_true(nids >= 7);
		expect_ids(r, n, ids + nids - 7, 7);
		gs_history_free(r, n);

		/* Before: the older half. */
		size_t mid = nids / 2;
		hf = (gs_history_filter){
		        .context = w->ctx[k], .before_packet = ids[mid], .limit = 10000};
		history(c, &hf, &r, &n);
		expect_ids(r, n, ids, mid);
		gs_history_free(r, n);
	}

	/* The whole device: both contexts, nothing else. */
	size_t nall = wl_ids(w, -1, ids);
	gs_history_filter hf = {.device = f->dev, .limit = 10000};
	gs_packet_record *r;
	size_t n;
	history(c, &hf, &r, &n);
	expect_ids(r, n, ids, nall);
	gs_history_free(r, n);
	/* The default limit is 100. */
	hf = (gs_history_filter){.device = f->dev};
	history(c, &hf, &r, &n);
	assert_int_equal(n, 100);
	gs_history_free(r, n);
	free(ids);
}

/* The events of one packet: its whole life, in order. */
static void expect_life(gs_client *c, uint64_t packet)
{
	gs_packet_event *ev;
	size_t n;
	int rv = gs_packet_events(c, packet, &ev, &n);
	if (rv != 0)
		fail_msg("packet_events: %s: %s", gs_status_name(rv), gs_client_message(c));
	static const gs_packet_state life[] = {GS_PACKET_SUBMITTED, GS_PACKET_READY,
	                                       GS_PACKET_RUNNING, GS_PACKET_COMPLETED};
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(ev[i].packet, packet);
		assert_int_equal(ev[i].state, life[i]);
		assert_true(ev[i].time_ns > 0);
		if (i)
			assert_true(ev[i].seq != ev[i - 1].seq);
	}
	gs_packet_events_free(ev, n);
}

static void test_workload(void **state)
{
	fx *f = ready(state);
	wl w;
	wl_setup(&w, f);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	long long t0 = gs_test_now_ms();
	for (int i = 0; i < WL_PACKETS; i++) {
		wl_packet_one(&w, &buf);
		assert_true(gs_test_now_ms() - t0 < 120000);
	}
	gs_dmabuf_free(&buf);

	/* Each context runs its packets in order: its last packet finishing means all did. */
	for (int k = 0; k < 2; k++) {
		uint64_t last = 0;
		for (size_t i = 0; i < w.npk; i++)
			if (w.pk[i].ctx == k)
				last = w.pk[i].id;
		gs_packet_state st;
		assert_int_equal(gs_packet_wait(f->c, last, ITEST_TIMEOUT_MS, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
		uint64_t cur = 0;
		assert_int_equal(gs_sync_wait(f->c, w.sync[k], w.seq[k], 0, &cur), 0);
		assert_int_equal(cur, w.seq[k]);
	}
	wl_verify_memory(&w);
	/* Both dependency mechanisms were exercised, and checksums were computed. */
	assert_true(w.deps_sync > 10);
	assert_true(w.deps_wait > 10);
	assert_true(w.nchecks > 50);

	/* Completions are audited after the waits are answered: a barrier makes them visible. */
	itest_audit_barrier(f->c, f->barrier_ctx);
	wl_verify_history(&w);
	expect_life(f->c, w.pk[0].id);
	expect_life(f->c, w.pk[w.npk - 1].id);
	wl_free(&w);
}

/* ---- flags ---- */

static void test_flags_round_trip(void **state)
{
	fx *f = ready(state);
	uint64_t ctx = itest_context(f->c, f->dev, 1, f->lay.paging_node);
	static const uint32_t flags[] = {
	        0,
	        GS_SUBMIT_PRESENT | GS_SUBMIT_NULL_RENDERING, /* 10 */
	        GS_SUBMIT_PRESENT | GS_SUBMIT_REDIRECTED_PRESENT,
	        GS_SUBMIT_FLIP,
	        GS_SUBMIT_FLIP_WITH_NO_WAIT,
	        GS_SUBMIT_PRESENT | GS_SUBMIT_FLIP | GS_SUBMIT_NULL_RENDERING,
	        GS_SUBMIT_REDIRECTED_PRESENT | GS_SUBMIT_FLIP_WITH_NO_WAIT,
	};
	const size_t nf = sizeof(flags) / sizeof(*flags);
	uint64_t ids[16];
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	for (size_t i = 0; i < nf; i++)
		ids[i] = itest_submit_wait(f->c, ctx, &buf, flags[i]);
	gs_dmabuf_free(&buf);
	itest_audit_barrier(f->c, f->barrier_ctx);

	gs_history_filter hf = {.context = ctx};
	gs_packet_record *r;
	size_t n;
	history(f->c, &hf, &r, &n);
	assert_int_equal(n, nf);
	for (size_t i = 0; i < nf; i++) {
		const gs_packet_record *p = &r[nf - 1 - i];
		assert_int_equal(p->packet, ids[i]);
		assert_int_equal(p->submit_flags, flags[i]);
		assert_int_equal(p->patch_flags, gs_patch_flags_for_submit(flags[i]));
		assert_int_equal(p->node, 1);
		assert_int_equal(p->state, GS_PACKET_COMPLETED);
	}
	gs_history_free(r, n);
	/* Present|NullRendering is 0x00a on the wire. */
	assert_int_equal(flags[1], 10);
}

/* ---- NullRendering ---- */

static void test_null_rendering(void **state)
{
	fx *f = ready(state);
	uint64_t ctx = itest_context(f->c, f->dev, 0, f->lay.paging_node);
	gs_allocation_placement a;
	itest_alloc(f->c, f->dev, 8192, 0, 0, &a);
	uint8_t want[8192], got[8192];
	for (size_t i = 0; i < sizeof(want); i++)
		want[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(gs_allocation_write(f->c, a.allocation, 0, want, sizeof(want)), 0);

	/* A NullRendering FILL goes through the queue and completes without touching memory. */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 0, sizeof(want), 0xdeadbeef), 0);
	uint64_t id = itest_submit_wait(f->c, ctx, &buf, GS_SUBMIT_NULL_RENDERING);
	assert_int_equal(gs_allocation_read(f->c, a.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, want, sizeof(want));
	itest_audit_barrier(f->c, f->barrier_ctx);
	expect_life(f->c, id);

	/* The same FILL without the flag does write: the control. */
	itest_submit_wait(f->c, ctx, &buf, GS_SUBMIT_PRESENT);
	gs_dmabuf_free(&buf);
	gs_isa_fill(want, sizeof(want), 0xdeadbeef);
	assert_int_equal(gs_allocation_read(f->c, a.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, want, sizeof(want));
}

/* ---- submit and wait in one request ---- */

/* Submit with wait_ms answers at the packet's end: the bytes are written when the answer
 * comes, the state and fence are the final ones (PacketWait agrees); a packet still running at
 * the time limit is answered with its state and can be waited for; a fault answers FAULTED
 * with the packet named; a batch's packet may not wait. */
static void test_submit_wait(void **state)
{
	fx *f = ready(state);
	uint64_t ctx = itest_context(f->c, f->dev, 0, f->lay.paging_node);
	gs_allocation_placement a;
	itest_alloc(f->c, f->dev, 8192, 0, 0, &a);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 0, 8192, 0x5eed1234u), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit_wait(f->c, ctx, &buf, 0, 10000, &r), 0);
	assert_int_equal(r.state, GS_PACKET_COMPLETED);
	assert_true(r.packet != 0);
	uint8_t want[8192], got[8192];
	gs_isa_fill(want, sizeof(want), 0x5eed1234u);
	assert_int_equal(gs_allocation_read(f->c, a.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, want, sizeof(want));
	gs_packet_state st;
	uint64_t fence;
	assert_int_equal(gs_packet_wait(f->c, r.packet, 0, &st, &fence), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	assert_int_equal(fence, r.fence);
	gs_dmabuf_free(&buf);

	/* Without wait_ms the answer is the acknowledgement, as before. */
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_spin(&buf, 300000, 0), 0);
	assert_int_equal(gs_submit(f->c, ctx, &buf, 0, &r), 0);
	assert_int_equal(r.state, GS_PACKET_SUBMITTED);
	/* Still running at the limit: answered OK with a state that is not final. */
	gs_submit_result late;
	assert_int_equal(gs_submit_wait(f->c, ctx, &buf, 0, 20, &late), 0);
	assert_true(late.state == GS_PACKET_READY || late.state == GS_PACKET_RUNNING ||
	            late.state == GS_PACKET_SUBMITTED);
	assert_int_equal(gs_packet_wait(f->c, late.packet, 10000, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	gs_dmabuf_free(&buf);

	/* A FILL past the allocation's end faults on the engine. */
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 4096, 8192, 1), 0);
	memset(&r, 0, sizeof(r));
	assert_int_equal(gs_submit_wait(f->c, ctx, &buf, 0, 10000, &r), GS_STATUS_FAULTED);
	assert_int_equal(r.state, GS_PACKET_FAULTED);
	assert_int_equal(gs_packet_wait(f->c, r.packet, 0, &st, NULL), GS_STATUS_FAULTED);
	gs_dmabuf_free(&buf);

	/* A batch's packet may not wait: the whole batch is refused, nothing queued. */
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	gs_submit_desc d = {.context = ctx, .dma = &buf, .wait_ms = 100};
	gs_submit_result br;
	assert_int_equal(gs_submit_batch(f->c, &d, 1, &br), GS_STATUS_INVALID_ARGUMENT);
	gs_dmabuf_free(&buf);
}

/* ---- batches ---- */

static void test_batch_all_or_nothing(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	uint64_t ctx = itest_context(c, f->dev, 0, f->lay.paging_node);
	gs_allocation_placement a;
	itest_alloc(c, f->dev, 4096, 0, 0, &a);

	gs_dmabuf nop, fill, bad;
	gs_dmabuf_init(&nop);
	gs_dmabuf_init(&fill);
	gs_dmabuf_init(&bad);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	assert_int_equal(gs_dmabuf_fill(&fill, a.allocation, 0, 4096, 0x01020304), 0);
	assert_int_equal(gs_dmabuf_nop(&bad), 0);
	bad.data[0] = 0x7f; /* no such opcode */

	gs_submit_result first;
	assert_int_equal(gs_submit(c, ctx, &nop, 0, &first), 0);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(c, first.packet, ITEST_TIMEOUT_MS, &st, NULL), 0);

	/* A bad packet in the middle (reserved flag bit) or at the end (bad bytes) rejects the
	 * whole batch: the good packets before it are not queued. */
	gs_submit_desc b1[3] = {{.context = ctx, .dma = &fill},
	                        {.context = ctx, .dma = &nop, .submit_flags = 0x400},
	                        {.context = ctx, .dma = &nop}};
	gs_submit_result res[3];
	assert_int_equal(gs_submit_batch(c, b1, 3, res), GS_STATUS_RESERVED_BITS);
	gs_submit_desc b2[3] = {{.context = ctx, .dma = &fill},
	                        {.context = ctx, .dma = &nop, .submit_flags = GS_SUBMIT_PRESENT},
	                        {.context = ctx, .dma = &bad}};
	assert_int_equal(gs_submit_batch(c, b2, 3, res), GS_STATUS_DMA_INVALID);
	assert_int_equal(gs_submit_batch(c, b2, 0, res), GS_STATUS_INVALID_ARGUMENT);

	/* Nothing ran: the FILL of the rejected batches never touched the allocation. */
	uint8_t zero[4096] = {0}, got[4096];
	assert_int_equal(gs_allocation_read(c, a.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, zero, sizeof(got));

	/* Only the rejections were recorded; nothing of the batches was queued. */
	itest_audit_barrier(c, f->barrier_ctx);
	gs_history_filter hf = {.context = ctx};
	gs_packet_record *r;
	size_t n;
	history(c, &hf, &r, &n);
	assert_int_equal(n, 3);
	assert_int_equal(r[2].packet, first.packet);
	assert_int_equal(r[2].state, GS_PACKET_COMPLETED);
	assert_int_equal(r[1].state, GS_PACKET_REJECTED);
	assert_int_equal(r[1].submit_flags, 0x400);
	assert_true(r[1].result[0] != '\0');
	assert_int_equal(r[0].state, GS_PACKET_REJECTED);
	gs_history_free(r, n);
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	assert_int_equal(info->adapters[0].nodes[0].queued, 0);
	gs_info_free(info);

	/* A good batch: every packet queued, fences consecutive after the first packet's: the
	 * rejected packets and batches took none. */
	gs_submit_desc b3[3] = {
	        {.context = ctx, .dma = &nop},
	        {.context = ctx, .dma = &fill, .submit_flags = GS_SUBMIT_PRESENT},
	        {.context = ctx, .dma = &nop, .submit_flags = GS_SUBMIT_NULL_RENDERING}};
	assert_int_equal(gs_submit_batch(c, b3, 3, res), 0);
	/* Wire ids are opaque: their order is the file's numbers'. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(res[i].node, 0);
		assert_int_equal(res[i].fence, first.fence + 1 + (uint64_t)i);
		if (i)
			assert_true(file_packet(f, res[i].packet) >
			            file_packet(f, res[i - 1].packet));
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(gs_packet_wait(c, res[i].packet, ITEST_TIMEOUT_MS, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
	}
	gs_isa_fill(zero, sizeof(zero), 0x01020304);
	assert_int_equal(gs_allocation_read(c, a.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, zero, sizeof(got));
	itest_audit_barrier(c, f->barrier_ctx);
	hf.state = GS_PACKET_COMPLETED;
	history(c, &hf, &r, &n);
	assert_int_equal(n, 4);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(r[i].packet, res[2 - i].packet);
		assert_int_equal(r[i].fence, res[2 - i].fence);
	}
	gs_history_free(r, n);
	gs_dmabuf_free(&nop);
	gs_dmabuf_free(&fill);
	gs_dmabuf_free(&bad);
}

/* ---- sync objects ---- */

typedef struct waiter {
	const gs_testd *t;
	uint64_t sync;
	uint64_t value;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool sending;
	int rv;
	uint64_t seen;
} waiter;

static void *waiter_main(void *arg)
{
	waiter *w = arg;
	gs_client *c = NULL;
	w->rv = gs_connect(w->t->url, "", &c);
	pthread_mutex_lock(&w->lock);
	w->sending = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	if (w->rv == 0) {
		w->rv = gs_sync_wait(c, w->sync, w->value, 15000, &w->seen);
		gs_close(c);
	}
	return NULL;
}

static void test_sync_objects(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	uint64_t s, cur = 0;
	assert_int_equal(gs_sync_create(c, f->dev, 5, &s), 0);

	/* CPU signal and wait. */
	assert_int_equal(gs_sync_wait(c, s, 5, 1000, &cur), 0);
	assert_int_equal(cur, 5);
	assert_int_equal(gs_sync_signal(c, s, 10), 0);
	assert_int_equal(gs_sync_wait(c, s, 7, 1000, &cur), 0);
	assert_int_equal(cur, 10);
	assert_int_equal(gs_sync_signal(c, s, 10), 0); /* the same value is not backwards */

	/* Backwards is refused and changes nothing. */
	assert_int_equal(gs_sync_signal(c, s, 9), GS_STATUS_INVALID_ARGUMENT);
	assert_int_equal(gs_sync_wait(c, s, 0, 0, &cur), 0);
	assert_int_equal(cur, 10);

	/* A wait that cannot be satisfied times out on time. */
	long long t0 = gs_test_now_ms();
	assert_int_equal(gs_sync_wait(c, s, 11, 200, &cur), GS_STATUS_TIMEOUT);
	long long took = gs_test_now_ms() - t0;
	assert_true(took >= 190);
	assert_true(took < 5000);
	t0 = gs_test_now_ms();
	assert_int_equal(gs_sync_wait(c, s, 11, 0, &cur), GS_STATUS_TIMEOUT);
	assert_true(gs_test_now_ms() - t0 < 5000);

	/* A GPU SIGNAL wakes a CPU wait that is already pending: the packet spins first. */
	uint64_t ctx = itest_context(c, f->dev, 1, f->lay.paging_node);
	waiter w = {.t = &f->t, .sync = s, .value = 20};
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
	pthread_mutex_lock(&w.lock);
	while (!w.sending)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_spin(&buf, 300000, 0), 0);
	assert_int_equal(gs_dmabuf_signal(&buf, s, 20), 0);
	itest_submit_wait(c, ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	pthread_join(th, NULL);
	assert_int_equal(w.rv, 0);
	assert_int_equal(w.seen, 20);
	assert_int_equal(gs_sync_wait(c, s, 20, 0, &cur), 0);
	assert_int_equal(cur, 20);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);

	/* A SIGNAL never moves the value backwards either. */
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_signal(&buf, s, 15), 0);
	itest_submit_wait(c, ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	assert_int_equal(gs_sync_wait(c, s, 0, 0, &cur), 0);
	assert_int_equal(cur, 20);

	assert_int_equal(gs_sync_destroy(c, s), 0);
	assert_int_equal(gs_sync_wait(c, s, 0, 0, &cur), GS_STATUS_NOT_FOUND);
}

/* ---- CPU access ---- */

static void test_cpu_write_gpu_copy_read(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	uint64_t ctx = itest_context(c, f->dev, 0, f->lay.paging_node);
	gs_allocation_placement src, dst;
	itest_alloc(c, f->dev, 20000, 0, segpref((uint8_t)f->lay.aperture_segment, 0, 0, 0), &src);
	itest_alloc(c, f->dev, 20000, 0, segpref((uint8_t)f->lay.memory_segment, 0, 0, 0), &dst);
	uint8_t data[20000], got[20000];
	uint64_t rng = 42;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)itest_rand(&rng);
	assert_int_equal(gs_allocation_write(c, src.allocation, 0, data, sizeof(data)), 0);
	assert_int_equal(gs_allocation_write(c, src.allocation, 100, "gpusched", 8), 0);
	memcpy(data + 100, "gpusched", 8);

	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_copy(&buf, dst.allocation, 0, src.allocation, 0, sizeof(data)),
	                 0);
	assert_int_equal(gs_dmabuf_checksum(&buf, src.allocation, 19992, dst.allocation, 0, 19992),
	                 0);
	/* No wait: the read itself waits for the packet. */
	gs_submit_result res;
	assert_int_equal(gs_submit(c, ctx, &buf, 0, &res), 0);
	gs_dmabuf_free(&buf);
	assert_int_equal(gs_allocation_read(c, dst.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, data, sizeof(data));
	uint8_t sum[8];
	assert_int_equal(gs_allocation_read(c, src.allocation, 19992, sum, 8), 0);
	assert_int_equal(gs_le64_get(sum), gs_isa_checksum(data, 19992));
	/* A partial read at an offset. */
	assert_int_equal(gs_allocation_read(c, dst.allocation, 100, got, 8), 0);
	assert_memory_equal(got, "gpusched", 8);
}

/* ---- statistics ---- */

static void test_stats(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	gs_daemon_stats s0, s1;
	assert_int_equal(gs_stats(c, &s0), 0);

	uint64_t dev;
	assert_int_equal(gs_device_create(c, "stats", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, f->lay.paging_node);
	gs_allocation_placement a;
	itest_alloc(c, dev, 4096, 0, 0, &a);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 0, 4096, 7), 0);
	for (int i = 0; i < 5; i++)
		itest_submit_wait(c, ctx, &buf, 0);
	assert_int_equal(gs_submit(c, ctx, &buf, 0x1000, NULL), GS_STATUS_RESERVED_BITS);
	gs_dmabuf_free(&buf);
	assert_int_equal(gs_stats(c, &s1), 0);

	assert_true(s1.requests >= s0.requests + 15);
	assert_int_equal(s1.errors, s0.errors + 1);
	assert_int_equal(s1.packets_submitted, s0.packets_submitted + 5);
	assert_int_equal(s1.packets_completed, s0.packets_completed + 5);
	assert_int_equal(s1.packets_rejected, s0.packets_rejected + 1);
	assert_int_equal(s1.packets_faulted, s0.packets_faulted);
	assert_int_equal(s1.devices, s0.devices + 1);
	assert_int_equal(s1.contexts, s0.contexts + 1);
	assert_int_equal(s1.allocations, s0.allocations + 1);
	assert_true(s1.audit_records > s0.audit_records);
	assert_true(s1.audit_commits > s0.audit_commits);
	assert_true(s1.uptime_ns > s0.uptime_ns);

	/* Destroying the device takes its context and allocation along. */
	assert_int_equal(gs_device_destroy(c, dev), 0);
	assert_int_equal(gs_stats(c, &s1), 0);
	assert_int_equal(s1.devices, s0.devices);
	assert_int_equal(s1.contexts, s0.contexts);
	assert_int_equal(s1.allocations, s0.allocations);
}

/* ---- the virtual clock ---- */

static void test_virtual_clock(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	assert_string_equal(info->adapters[0].clock, "virtual");
	assert_true(info->adapters[0].caps & GS_ADAPTER_CAP_VIRTUAL_CLOCK);
	gs_info_free(info);

	uint64_t ctx = itest_context(c, f->dev, 0, f->lay.paging_node);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_spin(&buf, 10u * 1000 * 1000, GS_DMABUF_SPIN_NONPREEMPTIBLE), 0);
	long long t0 = gs_test_now_ms();
	uint64_t first = itest_submit_wait(c, ctx, &buf, 0);
	uint64_t second = itest_submit_wait(c, ctx, &buf, 0);
	long long took = gs_test_now_ms() - t0;
	gs_dmabuf_free(&buf);
	/* 20 s of engine time in far less wall time. */
	assert_true(took < 5000);

	itest_audit_barrier(c, f->barrier_ctx);
	gs_history_filter hf = {.context = ctx};
	gs_packet_record *r;
	size_t n;
	history(c, &hf, &r, &n);
	assert_int_equal(n, 2);
	assert_int_equal(r[0].packet, second);
	assert_int_equal(r[1].packet, first);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(r[i].state, GS_PACKET_COMPLETED);
		assert_true(r[i].submitted_ns <= r[i].ready_ns);
		assert_true(r[i].ready_ns <= r[i].started_ns);
		assert_true(r[i].completed_ns - r[i].started_ns >= UINT64_C(10000000000));
	}
	/* Virtual time moves on: the second ran after the first. */
	assert_true(r[0].started_ns >= r[1].completed_ns);
	/* Events carry the same (virtual) clock as the packet's row. */
	for (size_t i = 0; i < n; i++) {
		gs_packet_event *ev;
		size_t nev;
		assert_int_equal(gs_packet_events(c, r[i].packet, &ev, &nev), 0);
		bool seen = false;
		for (size_t k = 0; k < nev; k++) {
			if (ev[k].state == GS_PACKET_COMPLETED) {
				assert_int_equal(ev[k].time_ns, r[i].completed_ns);
				seen = true;
			}
			if (ev[k].state == GS_PACKET_RUNNING)
				assert_int_equal(ev[k].time_ns, r[i].started_ns);
		}
		assert_true(seen);
		gs_packet_events_free(ev, nev);
	}
	gs_history_free(r, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_workload, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_flags_round_trip, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_null_rendering, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_submit_wait, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_batch_all_or_nothing, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_sync_objects, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cpu_write_gpu_copy_read, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_virtual_clock, setup_virtual, teardown),
	};
	/* On a GPU backend (GS_TEST_BACKEND, integration.test_e2e.vulkan) the virtual clock is
	 * refused at start, by design: that test is the emulator's alone. */
	const char *backend = getenv("GS_TEST_BACKEND");
	if (backend && *backend && strcmp(backend, "emu") != 0)
		cmocka_set_skip_filter("test_virtual_clock");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
