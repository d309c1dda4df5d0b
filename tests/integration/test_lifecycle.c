/* Destroying contexts and devices while their packets run: the running packet finishes (or
 * faults) after its context is gone, and the daemon stays healthy. Regression test for a
 * use-after-free when a destroyed context's last packet retired. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpusched.h"
#include "isa.h"
#include "itest.h"
#include "testd.h"

typedef struct fx {
	gs_testd t;
	gs_client *c;
	itest_layout lay;
} fx;

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	if (!f || gs_testd_start(&f->t, NULL) != 0)
		return -1;
	f->c = itest_connect(&f->t, NULL);
	itest_layout_of(f->c, &f->lay);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	gs_close(f->c);
	assert_int_equal(gs_testd_stop(&f->t), 0); /* exit 0: it did not crash */
	gs_testd_cleanup(&f->t);
	free(f);
	return 0;
}

/* Submits a SPIN then (optionally) a write outside its allocation list; returns the packet. */
static uint64_t submit_running(fx *f, uint64_t ctx, uint64_t victim_addr)
{
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_spin(&b, 150000, 0), 0);
	if (victim_addr) {
		/* A FILL whose address is forged (no patch location): it faults on the engine. */
		gs_isa_cmd cmd = {.op = GS_OP_FILL, .dst = victim_addr, .size = 64, .pattern = 7};
		uint8_t raw[32];
		size_t n = gs_isa_encode(&cmd, raw, sizeof(raw));
		assert_int_equal(n, 32);
		/* Room for it through the builder (4 NOPs = 32 bytes), then the raw bytes. */
		for (int i = 0; i < 4; i++)
			assert_int_equal(gs_dmabuf_nop(&b), 0);
		memcpy(b.data + b.len - n, raw, n);
	}
	gs_submit_result r;
	assert_int_equal(gs_submit(f->c, ctx, &b, 0, &r), 0);
	gs_dmabuf_free(&b);
	return r.packet;
}

static void wait_running(fx *f, uint64_t packet)
{
	long long deadline = gs_test_now_ms() + 10000;
	for (;;) {
		gs_packet_event *ev;
		size_t n;
		assert_int_equal(gs_packet_events(f->c, packet, &ev, &n), 0);
		bool running = false;
		for (size_t i = 0; i < n; i++)
			running |= ev[i].state == GS_PACKET_RUNNING;
		gs_packet_events_free(ev, n);
		if (running)
			return;
		assert_true(gs_test_now_ms() < deadline);
	}
}

static void still_serves(fx *f)
{
	uint64_t dev;
	assert_int_equal(gs_device_create(f->c, "after", &dev), 0);
	uint64_t ctx = itest_context(f->c, dev, 1, f->lay.paging_node);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	itest_submit_wait(f->c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	assert_int_equal(gs_device_destroy(f->c, dev), 0);
}

static void test_destroy_context_while_running(void **state)
{
	fx *f = *state;
	uint64_t dev;
	assert_int_equal(gs_device_create(f->c, "lifecycle", &dev), 0);
	for (int round = 0; round < 3; round++) {
		uint64_t ctx = itest_context(f->c, dev, 0, f->lay.paging_node);
		uint64_t pk = submit_running(f, ctx, 0);
		submit_running(f, ctx, 0); /* queued behind: cancelled by the destroy */
		wait_running(f, pk);
		assert_int_equal(gs_context_destroy(f->c, ctx), 0);
		gs_packet_state st = GS_PACKET_UNKNOWN;
		assert_int_equal(gs_packet_wait(f->c, pk, 10000, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
	}
	still_serves(f);
	assert_int_equal(gs_device_destroy(f->c, dev), 0);
}

static void test_destroy_device_while_faulting(void **state)
{
	fx *f = *state;
	uint64_t dev;
	assert_int_equal(gs_device_create(f->c, "lifecycle", &dev), 0);
	gs_allocation_placement other;
	itest_alloc(f->c, dev, 4096, 0, 0, &other);
	uint64_t ctx = itest_context(f->c, dev, 0, f->lay.paging_node);
	uint64_t pk = submit_running(f, ctx, other.address);
	wait_running(f, pk);
	/* The device (and the context) go while the packet runs; it then faults. */
	assert_int_equal(gs_device_destroy(f->c, dev), 0);
	still_serves(f);
}

/* Two contexts wait on one sync object; a CPU signal below their value must leave both
 * waiting (the daemon once looped forever re-parking them), and reaching it runs both. */
static void test_two_gpu_waiters_partial_signal(void **state)
{
	fx *f = *state;
	uint64_t dev, sync;
	assert_int_equal(gs_device_create(f->c, "waiters", &dev), 0);
	assert_int_equal(gs_sync_create(f->c, dev, 0, &sync), 0);
	uint64_t pk[2];
	for (int i = 0; i < 2; i++) {
		uint64_t ctx = itest_context(f->c, dev, 0, f->lay.paging_node);
		gs_dmabuf b;
		gs_dmabuf_init(&b);
		assert_int_equal(gs_dmabuf_wait(&b, sync, 10), 0);
		assert_int_equal(gs_dmabuf_nop(&b), 0);
		gs_submit_result r;
		assert_int_equal(gs_submit(f->c, ctx, &b, 0, &r), 0);
		gs_dmabuf_free(&b);
		pk[i] = r.packet;
	}
	assert_int_equal(gs_sync_signal(f->c, sync, 5), 0);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(f->c, pk[0], 0, &st, NULL), 0);
	assert_false(gs_packet_state_is_final(st));
	still_serves(f);
	assert_int_equal(gs_sync_signal(f->c, sync, 10), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(gs_packet_wait(f->c, pk[i], 10000, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
	}
	assert_int_equal(gs_device_destroy(f->c, dev), 0);
}

/* A destroyed context's running packet that is then preempted ends (CANCELLED) instead of
 * being stranded: its waiter is answered and its allocation becomes idle. */
static void test_destroyed_context_preempted(void **state)
{
	fx *f = *state;
	uint64_t dev;
	assert_int_equal(gs_device_create(f->c, "preempted", &dev), 0);
	gs_allocation_placement a;
	itest_alloc(f->c, dev, 4096, 0, 0, &a);
	uint64_t low = itest_context(f->c, dev, 0, f->lay.paging_node);
	gs_context_desc cd;
	gs_context_desc_init(&cd, dev, 0);
	cd.priority_class = 4; /* HIGH */
	cd.info.paging_companion_node_id = f->lay.paging_node;
	uint64_t high;
	assert_int_equal(gs_context_create(f->c, &cd, &high, NULL), 0);

	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_spin(&b, 1000000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&b, a.allocation, 0, 64, 1), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(f->c, low, &b, 0, &r), 0);
	gs_dmabuf_free(&b);
	wait_running(f, r.packet);
	assert_int_equal(gs_context_destroy(f->c, low), 0);

	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	itest_submit_wait(f->c, high, &b, 0);
	gs_dmabuf_free(&b);

	gs_packet_state st = GS_PACKET_UNKNOWN;
	assert_int_equal(gs_packet_wait(f->c, r.packet, 10000, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_CANCELLED);
	gs_allocation_status as;
	assert_int_equal(gs_allocation_query(f->c, a.allocation, &as), 0);
	assert_int_equal(as.busy_packets, 0);
	uint8_t byte;
	assert_int_equal(gs_allocation_read(f->c, a.allocation, 0, &byte, 1), 0);
	assert_int_equal(gs_device_destroy(f->c, dev), 0);
}

/* ---- drain for maintenance (issue 30) ---- */

typedef struct drain_call {
	const gs_testd *t;
	uint32_t timeout_ms;
	int status;
	gs_drain_report report;
} drain_call;

/* The drain, on a connection of its own (it is answered at the drain's end). */
static void *drain_thread(void *arg)
{
	drain_call *dc = arg;
	gs_client *c = itest_connect(dc->t, NULL);
	dc->status = gs_admin_drain(c, dc->timeout_ms, &dc->report);
	gs_close(c);
	return NULL;
}

/*
 * Starts a daemon, connects, makes a device and queues, on a context of each of the three
 * nodes, a SPIN of spin_us then `behind` NOPs: 3 * (1 + behind) packets in flight.
 */
static gs_client *start_with_work(gs_testd *t, uint32_t spin_us, int behind, uint64_t *dev)
{
	assert_int_equal(gs_testd_start(t, NULL), 0);
	gs_client *c = itest_connect(t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	assert_int_equal(gs_device_create(c, "drain", dev), 0);
	gs_dmabuf spin, nop;
	gs_dmabuf_init(&spin);
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_spin(&spin, spin_us, 0), 0);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	for (uint32_t node = 0; node < 3; node++) {
		uint64_t ctx = itest_context(c, *dev, node, lay.paging_node);
		gs_submit_result r;
		assert_int_equal(gs_submit(c, ctx, &spin, 0, &r), 0);
		for (int i = 0; i < behind; i++)
			assert_int_equal(gs_submit(c, ctx, &nop, 0, &r), 0);
	}
	gs_dmabuf_free(&spin);
	gs_dmabuf_free(&nop);
	return c;
}

/* The daemon's state as AdminStatus gives it, polled (bounded) until `state`. */
static void await_state(gs_client *c, const char *state, gs_admin_status *s)
{
	long long deadline = gs_test_now_ms() + 10000;
	do {
		assert_int_equal(gs_admin_status_get(c, s), 0);
		if (strcmp(s->state, state) == 0)
			return;
	} while (gs_test_now_ms() < deadline);
	fail_msg("the daemon is %s, not %s", s->state, state);
}

/*
 * A drain with packets queued on three nodes: while it runs, no new device or context
 * (UNAVAILABLE), submissions on the existing contexts still go, status says draining, a second
 * drain is BUSY; it answers once every packet ended (none cancelled), notes its start and end
 * in the audit, and the daemon exits 0 by itself.
 */
static void test_drain_finishes_work(void **state)
{
	(void)state;
	gs_testd t;
	uint64_t dev;
	gs_client *c = start_with_work(&t, 400000, 2, &dev);

	gs_admin_status s;
	assert_int_equal(gs_admin_status_get(c, &s), 0);
	assert_string_equal(s.state, "serving");
	assert_true(s.packets_in_flight >= 1);
	drain_call dc = {.t = &t, .timeout_ms = 30000};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, drain_thread, &dc), 0);
	await_state(c, "draining", &s);
	assert_true(s.drain_left_ms > 0 && s.drain_left_ms <= 30000);
	assert_true(s.drain_packets_at_start >= 1 && s.drain_packets_at_start <= 9);

	uint64_t other;
	assert_int_equal(gs_device_create(c, "new", &other), GS_STATUS_UNAVAILABLE);
	assert_non_null(strstr(gs_client_message(c), "draining"));
	gs_context_desc cd;
	gs_context_desc_init(&cd, dev, 0);
	uint64_t ctx;
	assert_int_equal(gs_context_create(c, &cd, &ctx, NULL), GS_STATUS_UNAVAILABLE);
	gs_drain_report again;
	assert_int_equal(gs_admin_drain(c, 1000, &again), GS_STATUS_BUSY);

	assert_int_equal(pthread_join(th, NULL), 0);
	if (dc.status != 0)
		fail_msg("drain: %s", gs_status_name(dc.status));
	assert_false(dc.report.timed_out);
	assert_int_equal(dc.report.packets_cancelled, 0);
	assert_int_equal(dc.report.packets_finished, dc.report.packets_at_start);
	gs_close(c);
	assert_int_equal(gs_testd_wait(&t, 30000), 0);
	/* Every queued packet ended COMPLETED (the daemon is gone: the file says so). */
	assert_int_equal(itest_audit_int(t.db, "SELECT count(*) FROM packets WHERE tenant ="
	                                       " 'default' AND state_name = 'COMPLETED'"),
	                 9);
	assert_int_equal(itest_audit_int(t.db, "SELECT count(*) FROM packets WHERE state_name <>"
	                                       " 'COMPLETED'"),
	                 0);
	assert_int_equal(itest_audit_int(t.db, "SELECT count(*) FROM notes WHERE kind IN"
	                                       " ('drain_started', 'drain_finished')"),
	                 2);
	gs_testd_cleanup(&t);
}

/*
 * A drain whose timeout comes first: the packets still queued are CANCELLED with the drain as
 * the reason, the report says so, and the daemon exits 0 (the running SPINs get its shutdown
 * grace).
 */
static void test_drain_timeout_cancels(void **state)
{
	(void)state;
	gs_testd t;
	uint64_t dev;
	gs_client *c = start_with_work(&t, 1500000, 3, &dev);
	gs_drain_report r;
	assert_int_equal(gs_admin_drain(c, 200, &r), 0);
	assert_true(r.timed_out);
	assert_true(r.packets_cancelled >= 9); /* the NOPs behind the three SPINs */
	/* Every packet is accounted for: ended, cancelled, or on an engine at the timeout. */
	assert_true(r.packets_running <= 3);
	assert_int_equal(r.packets_finished + r.packets_cancelled + r.packets_running,
	                 r.packets_at_start);
	assert_true(r.waited_ms >= 200);
	gs_close(c);
	assert_int_equal(gs_testd_wait(&t, 30000), 0);
	assert_true(itest_audit_int(t.db, "SELECT count(*) FROM packets WHERE state_name ="
	                                  " 'CANCELLED' AND result LIKE '%%drain%%'") >= 9);
	gs_testd_cleanup(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_destroy_context_while_running, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_destroy_device_while_faulting, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_two_gpu_waiters_partial_signal, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_destroyed_context_preempted, setup, teardown),
	        cmocka_unit_test(test_drain_finishes_work),
	        cmocka_unit_test(test_drain_timeout_cancels),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
