/* The PUB event stream (gpuschedd --events URL): a subscriber receives one Event per packet
 * transition, in order, with the packet's id, state and tenant; each event carries the audit
 * sequence number of its row and that of the event before it; refused submissions are
 * published; a watcher that falls behind sees every loss and reads it back from the audit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "itest.h"
#include "testd.h"

static void test_packet_events_published(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpusched-events-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char url[300];
	snprintf(url, sizeof(url), "ipc://%s/events.sock", dir);
	const char *const args[] = {"--events", url, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);

	nng_socket sub;
	assert_int_equal(nng_sub0_open(&sub), 0);
	assert_int_equal(nng_socket_set(sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
	assert_int_equal(nng_socket_set_ms(sub, NNG_OPT_RECVTIMEO, 5000), 0);
	assert_int_equal(nng_dial(sub, url, NULL, 0), 0);

	gs_client *c = itest_connect(&t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "events", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	/* PUB drops what is sent before the subscription is connected: submit until one
	 * packet's events arrive (bounded), then check that packet's whole sequence. */
	uint64_t packet = 0;
	int want[] = {GPUSCHED__V1__PACKET_STATE__PACKET_STATE_SUBMITTED,
	              GPUSCHED__V1__PACKET_STATE__PACKET_STATE_READY,
	              GPUSCHED__V1__PACKET_STATE__PACKET_STATE_RUNNING,
	              GPUSCHED__V1__PACKET_STATE__PACKET_STATE_COMPLETED};
	size_t got = 0;
	long long deadline = gs_test_now_ms() + 15000;
	while (got < 4 && gs_test_now_ms() < deadline) {
		if (got == 0)
			packet = itest_submit_wait(c, ctx, &b, 0);
		nng_msg *m;
		if (nng_recvmsg(sub, &m, 0) != 0)
			continue;
		Gpusched__V1__Event *ev =
		        gpusched__v1__event__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
		nng_msg_free(m);
		assert_non_null(ev);
		assert_true(ev->seq > 0);
		assert_true(ev->prev_seq < ev->seq);
		if (ev->body_case == GPUSCHED__V1__EVENT__BODY_PACKET &&
		    ev->packet->packet == packet) {
			assert_int_equal(ev->packet->state, want[got]);
			assert_string_equal(ev->tenant, "default");
			assert_true(ev->packet->time_ns > 0);
			got++;
		} else if (ev->body_case == GPUSCHED__V1__EVENT__BODY_PACKET && got == 0 &&
		           (int)ev->packet->state == want[0]) {
			/* The first event seen starts a packet's sequence. */
			packet = ev->packet->packet;
			got = 1;
		}
		gpusched__v1__event__free_unpacked(ev, NULL);
	}
	assert_int_equal(got, 4);
	gs_dmabuf_free(&b);
	gs_close(c);
	nng_close(sub);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	char cmd[320];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

typedef struct evfx {
	char dir[64];
	char url[300];
	gs_testd t;
	gs_client *c;
	uint64_t ctx;
	gs_dmabuf nop;
} evfx;

static int ev_setup(void **state)
{
	evfx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/gpusched-events-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->url, sizeof(f->url), "ipc://%s/events.sock", f->dir);
	const char *const args[] = {"--events", f->url, NULL};
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
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		rc = -1;
	free(f);
	return rc;
}

/* Submits until the watcher delivers an event (PUB drops what precedes the connection);
 * returns the seq of the last event read. Bounded. */
static uint64_t watch_connected(evfx *f, gs_watch *w)
{
	long long deadline = gs_test_now_ms() + 15000;
	uint64_t last = 0;
	while (gs_test_now_ms() < deadline) {
		itest_submit_wait(f->c, f->ctx, &f->nop, 0);
		gs_watch_event ev;
		while (gs_watch_next(w, f->c, 100, &ev) == 0) {
			last = ev.seq;
			gs_watch_event_clear(&ev);
		}
		if (last)
			return last;
	}
	fail_msg("no event reached the watcher in 15 s");
	return 0;
}

/* Info names the socket; each published event carries its row's audit sequence number; a
 * refused submission is published as REJECTED. */
static void test_event_seq_is_audit_seq(void **state)
{
	evfx *f = *state;
	gs_daemon_info *info;
	assert_int_equal(gs_info(f->c, &info), 0);
	assert_string_equal(info->events_url, f->url);
	gs_info_free(info);
	gs_watch *w;
	assert_int_equal(gs_watch_open(f->url, &w), 0);
	watch_connected(f, w);

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

/* A burst far larger than the socket's queues while the watcher does not read: it then gets
 * GAP events, and live plus recovered events are exactly the audit's rows after its start,
 * each once, in sequence order. */
static void test_watch_fills_gaps(void **state)
{
	evfx *f = *state;
	gs_watch *w;
	assert_int_equal(gs_watch_open(f->url, &w), 0);
	uint64_t start = watch_connected(f, w);

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
			assert_true(ev.gap_after >= last);
			assert_int_equal(ev.gap_status, 0);
			gaps++;
		} else if (ev.kind == GS_WATCH_PACKET) {
			assert_true(ev.seq > last); /* in order, never twice */
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
	        cmocka_unit_test(test_packet_events_published),
	        cmocka_unit_test_setup_teardown(test_event_seq_is_audit_seq, ev_setup, ev_teardown),
	        cmocka_unit_test_setup_teardown(test_watch_fills_gaps, ev_setup, ev_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
