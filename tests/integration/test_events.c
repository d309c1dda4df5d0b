/* Events through EventsWait (gpusched watch): a watcher receives one Event per packet
 * transition, in order, with the packet's id, state and tenant; each event carries the audit
 * sequence number of its row; refused submissions are delivered; a watcher that falls behind
 * the daemon's ring sees every loss and reads it back from the audit. Tenant isolation is in
 * test_tenant_views.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "itest.h"
#include "testd.h"

/* Every event after gs_watch_open is promised: one packet's four, in order, nothing else in
 * between on an otherwise idle daemon. */
static void test_packet_events_delivered(void **state)
{
	(void)state;
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, NULL), 0);
	gs_client *c = itest_connect(&t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "events", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);

	gs_watch *w;
	assert_int_equal(gs_watch_open(c, &w), 0);
	uint64_t packet = itest_submit_wait(c, ctx, &b, 0);
	gs_packet_state want[] = {GS_PACKET_SUBMITTED, GS_PACKET_READY, GS_PACKET_RUNNING,
	                          GS_PACKET_COMPLETED};
	uint64_t prev = 0;
	for (size_t got = 0; got < 4; got++) {
		gs_watch_event ev;
		assert_int_equal(gs_watch_next(w, NULL, 15000, &ev), 0);
		assert_int_equal(ev.kind, GS_WATCH_PACKET);
		assert_int_equal(ev.packet.packet, packet);
		assert_int_equal(ev.packet.state, want[got]);
		assert_string_equal(ev.tenant, "default");
		assert_true(ev.packet.time_ns > 0);
		assert_true(ev.seq != prev); /* seqs are opaque: distinct, not ordered */
		prev = ev.seq;
		gs_watch_event_clear(&ev);
	}
	gs_watch_close(w);
	gs_dmabuf_free(&b);
	gs_close(c);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
}

typedef struct evfx {
	itest_config cfg;
	gs_testd t;
	gs_client *c;
	uint64_t ctx;
	gs_dmabuf nop;
} evfx;

static int ev_setup(void **state)
{
	evfx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	/* A small ring, so that a burst overflows it. */
	assert_int_equal(itest_config_write(&f->cfg, "{\"events_buffer\": 256}"), 0);
	const char *const args[] = {"--config", f->cfg.path, NULL};
	assert_int_equal(gs_testd_start(&f->t, args), 0);
	f->c = itest_connect(&f->t, NULL);
	itest_layout lay;
	itest_layout_of(f->c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(f->c, "events", &dev), 0);
	f->ctx = itest_context(f->c, dev, 0, lay.paging_node);
	gs_dmabuf_init(&f->nop);
	assert_int_equal(gs_dmabuf_nop(&f->nop), 0);
	*state = f;
	return 0;
}

static int ev_teardown(void **state)
{
	evfx *f = *state;
	gs_dmabuf_free(&f->nop);
	gs_close(f->c);
	int rc = gs_testd_stop(&f->t);
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
	free(f);
	return rc;
}

/* Runs one packet and reads its four events: returns the seq of the last (its COMPLETED). */
static uint64_t watch_one(evfx *f, gs_watch *w)
{
	uint64_t packet = itest_submit_wait(f->c, f->ctx, &f->nop, 0);
	uint64_t last = 0;
	for (int got = 0; got < 4;) {
		gs_watch_event ev;
		assert_int_equal(gs_watch_next(w, f->c, 15000, &ev), 0);
		if (ev.kind == GS_WATCH_PACKET && ev.packet.packet == packet) {
			got++;
			last = ev.seq;
		}
		gs_watch_event_clear(&ev);
	}
	return last;
}

/* Info names no event socket any more; each event carries its row's audit sequence number; a
 * refused submission is delivered as REJECTED. */
static void test_event_seq_is_audit_seq(void **state)
{
	evfx *f = *state;
	gs_daemon_info *info;
	assert_int_equal(gs_info(f->c, &info), 0);
	assert_string_equal(info->events_url, "");
	gs_info_free(info);
	gs_watch *w;
	assert_int_equal(gs_watch_open(f->c, &w), 0);

	uint64_t packet = itest_submit_wait(f->c, f->ctx, &f->nop, 0);
	/* Refused: a context that does not exist. */
	gs_submit_result sr;
	assert_int_equal(gs_submit(f->c, 987654, &f->nop, 0, &sr), GS_STATUS_NOT_FOUND);

	gs_packet_event *rows;
	size_t nrows;
	assert_int_equal(gs_packet_events(f->c, packet, &rows, &nrows), 0);
	assert_int_equal(nrows, 4);
	size_t matched = 0;
	bool rejected = false;
	long long deadline = gs_test_now_ms() + 15000;
	while ((matched < nrows || !rejected) && gs_test_now_ms() < deadline) {
		gs_watch_event ev;
		int rv = gs_watch_next(w, f->c, 200, &ev);
		if (rv == GS_ERR_TIMEOUT)
			continue;
		assert_int_equal(rv, 0);
		assert_int_not_equal(ev.kind, GS_WATCH_GAP); /* nothing was lost here */
		if (ev.kind == GS_WATCH_PACKET && ev.packet.packet == packet) {
			assert_true(matched < nrows);
			/* The same number as the row in the file, state for state. */
			assert_int_equal(ev.seq, rows[matched].seq);
			assert_int_equal(ev.packet.seq, rows[matched].seq);
			assert_int_equal(ev.packet.state, rows[matched].state);
			assert_int_equal(ev.packet.context, f->ctx);
			matched++;
		} else if (ev.kind == GS_WATCH_PACKET && ev.packet.state == GS_PACKET_REJECTED) {
			assert_int_equal(ev.packet.context, 987654);
			assert_non_null(strstr(ev.packet.detail, "987654"));
			gs_packet_event *rj;
			size_t nrj;
			assert_int_equal(gs_packet_events(f->c, ev.packet.packet, &rj, &nrj), 0);
			assert_int_equal(nrj, 1);
			assert_int_equal(rj[0].seq, ev.seq);
			gs_packet_events_free(rj, nrj);
			rejected = true;
		}
		gs_watch_event_clear(&ev);
	}
	assert_int_equal(matched, nrows);
	assert_true(rejected);
	gs_packet_events_free(rows, nrows);
	gs_watch_close(w);
}

/* A burst far larger than the daemon's ring (256 events here) while the watcher does not
 * read: it then gets GAP events, and live plus recovered events are exactly the audit's rows
 * after its start, each once, in sequence order. */
static void test_watch_fills_gaps(void **state)
{
	evfx *f = *state;
	gs_watch *w;
	assert_int_equal(gs_watch_open(f->c, &w), 0);
	uint64_t start = watch_one(f, w);

	enum { BATCH = 250, ROUNDS = 8 };
	gs_submit_desc descs[BATCH];
	gs_submit_result res[BATCH];
	for (size_t i = 0; i < BATCH; i++)
		descs[i] = (gs_submit_desc){.context = f->ctx, .dma = &f->nop};
	for (int r = 0; r < ROUNDS; r++)
		assert_int_equal(gs_submit_batch(f->c, descs, BATCH, res), 0);
	assert_int_equal(gs_packet_wait(f->c, res[BATCH - 1].packet, 30000, NULL, NULL), 0);
	uint64_t end = itest_audit_barrier(f->c, f->ctx);
	(void)end;

	/* What the audit holds after the watcher's start, up to the barrier's completion. */
	gs_packet_event *rows;
	size_t nrows;
	assert_int_equal(gs_packet_events_range(f->c, start, 0, 10000, &rows, &nrows), 0);
	assert_true(nrows >= (size_t)BATCH * ROUNDS * 4);

	size_t gaps = 0, recovered = 0, seen = 0;
	uint64_t last = start;
	int idle = 0;
	while (idle < 5 && seen < nrows) {
		gs_watch_event ev;
		int rv = gs_watch_next(w, f->c, 200, &ev);
		if (rv == GS_ERR_TIMEOUT) {
			idle++;
			continue;
		}
		assert_int_equal(rv, 0);
		idle = 0;
		if (ev.kind == GS_WATCH_GAP) {
			assert_int_equal(ev.gap_status, 0);
			gaps++;
		} else if (ev.kind == GS_WATCH_PACKET) {
			assert_true(ev.seq != last); /* never twice; the order: the audit's rows */
			last = ev.seq;
			assert_int_equal(ev.seq, rows[seen].seq);
			assert_int_equal(ev.packet.packet, rows[seen].packet);
			assert_int_equal(ev.packet.state, rows[seen].state);
			recovered += ev.recovered;
			seen++;
		}
		gs_watch_event_clear(&ev);
	}
	assert_int_equal(seen, nrows);
	assert_true(gaps >= 1);
	assert_true(recovered > 0);
	printf("watch: %zu events after a burst: %zu gaps, %zu read back from the audit\n", seen,
	       gaps, recovered);
	gs_packet_events_free(rows, nrows);
	gs_watch_close(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_packet_events_delivered),
	        cmocka_unit_test_setup_teardown(test_event_seq_is_audit_seq, ev_setup, ev_teardown),
	        cmocka_unit_test_setup_teardown(test_watch_fills_gaps, ev_setup, ev_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
