/* Destroying contexts and devices while their packets run: the running packet finishes (or
 * faults) after its context is gone, and the daemon stays healthy. Regression test for a
 * use-after-free when a destroyed context's last packet retired. */
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
