/*
 * The daemon's core model: the packet state machine (every pair of states against a table
 * written out by hand from docs/concepts.md), the one packet constructor, and the waiter
 * mechanism through which lower layers wake upper ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/packet.h"
#include "core/waiter.h"
#include "ring.h"

enum {
	NONE = 0,
	SUB = GSD_PS(SUBMITTED),
	RDY = GSD_PS(READY),
	RUN = GSD_PS(RUNNING),
	DONE = GSD_PS(COMPLETED),
	FLT = GSD_PS(FAULTED),
	ABT = GSD_PS(ABORTED),
	PRE = GSD_PS(PREEMPTED),
	RES = GSD_PS(RESUBMITTED),
	CAN = GSD_PS(CANCELLED),
	REJ = GSD_PS(REJECTED),
	NSTATES = REJ + 1,
};

/* legal[from][to], by hand. */
static const bool legal[NSTATES][NSTATES] = {
        [NONE] = {[SUB] = true, [REJ] = true},
        [SUB] = {[RDY] = true, [CAN] = true},
        [RDY] = {[RUN] = true, [ABT] = true, [FLT] = true, [CAN] = true},
        [RUN] = {[DONE] = true, [FLT] = true, [PRE] = true, [ABT] = true},
        [PRE] = {[RES] = true, [CAN] = true},
        [ABT] = {[RES] = true, [CAN] = true},
        [RES] = {[RDY] = true, [CAN] = true},
};

static void test_transition_table(void **state)
{
	(void)state;
	for (int from = 0; from < NSTATES; from++)
		for (int to = 0; to < NSTATES; to++)
			if (gsd_packet_transition_legal(from, to) != legal[from][to])
				fail_msg("%s -> %s: expected %s", gsd_packet_state_name(from),
				         gsd_packet_state_name(to),
				         legal[from][to] ? "legal" : "illegal");
	/* Final states lead nowhere; out-of-range values are never legal. */
	for (int to = 0; to < NSTATES; to++) {
		assert_false(gsd_packet_transition_legal(DONE, to));
		assert_false(gsd_packet_transition_legal(CAN, to));
		assert_false(gsd_packet_transition_legal(REJ, to));
		assert_false(gsd_packet_transition_legal(FLT, to));
	}
	assert_false(gsd_packet_transition_legal(-1, SUB));
	assert_false(gsd_packet_transition_legal(SUB, NSTATES));
	assert_false(gsd_packet_transition_legal(NSTATES, RDY));
}

static void test_state_names(void **state)
{
	(void)state;
	assert_string_equal(gsd_packet_state_name(RUN), "RUNNING");
	assert_string_equal(gsd_packet_state_name(RES), "RESUBMITTED");
	assert_string_equal(gsd_packet_state_name(REJ), "REJECTED");
	assert_string_equal(gsd_packet_state_name(999), "?");
}

/* The arrays of one packet lie in one allocation, 8-byte aligned, without overlap, and the
 * DMA buffer is copied. */
static void test_packet_shape(void **state)
{
	(void)state;
	uint8_t dma[13];
	for (size_t i = 0; i < sizeof(dma); i++)
		dma[i] = (uint8_t)(i * 7 + 1);
	gsd_packet_shape shape = {
	        .nallocs = 3, .nranges = 3, .npatches = 5, .nwaits = 2, .dma = dma, .dma_len = 13};
	gsd_packet *p = gsd_packet_new(&shape);
	assert_non_null(p);
	assert_int_equal(p->nallocs, 3);
	assert_int_equal(p->npatches, 5);
	assert_int_equal(p->nwaits, 2);
	assert_int_equal(p->dma_len, 13);
	assert_memory_equal(p->dma, dma, 13);
	uintptr_t a = (uintptr_t)p->allocs, r = (uintptr_t)p->ranges, pt = (uintptr_t)p->patches,
	          w = (uintptr_t)p->waits, d = (uintptr_t)p->dma;
	assert_int_equal(a % 8, 0);
	assert_int_equal(r % 8, 0);
	assert_int_equal(pt % 8, 0);
	assert_int_equal(w % 8, 0);
	assert_true(a >= (uintptr_t)(p + 1));
	assert_true(r >= a + 3 * sizeof(gsd_packet_alloc));
	assert_true(pt >= r + 3 * sizeof(gsd_range));
	assert_true(w >= pt + 5 * sizeof(gsd_packet_patch));
	assert_true(d >= w + 2 * sizeof(gsd_sync_point));
	assert_int_equal(p->rec.state, 0);
	assert_true(gsd_waitq_empty(&p->waiters));
	/* Every byte is writable (ASan checks the bounds). */
	memset(p->allocs, 0xab, 3 * sizeof(gsd_packet_alloc));
	memset(p->waits, 0xcd, 2 * sizeof(gsd_sync_point));
	memset(p->dma, 0xef, 13);
	gsd_packet_free(p);

	gsd_packet_shape empty = {0};
	p = gsd_packet_new(&empty);
	assert_non_null(p);
	assert_int_equal(p->dma_len, 0);
	gsd_packet_free(p);
}

/* ---- waiters ---- */

typedef struct probe {
	gsd_waiter w;
	int woken;
	int keep_waiting; /* times it adds itself back */
	gsd_waitq *q;
	gsd_waiter *cancel; /* cancels this one when woken */
	void *event;
	int order;
} probe;

static int g_order;

static void probe_wake(gsd_waiter *w, void *event)
{
	probe *p = (probe *)((char *)w - offsetof(probe, w));
	p->woken++;
	p->event = event;
	p->order = ++g_order;
	assert_false(gsd_waiter_queued(w)); /* off every queue while its wake runs */
	if (p->cancel)
		gsd_waiter_cancel(p->cancel);
	if (p->keep_waiting > 0) {
		p->keep_waiting--;
		gsd_waitq_add(p->q, w);
	}
}

static void test_waiters_oldest_first(void **state)
{
	(void)state;
	gsd_waitq q;
	gsd_waitq_init(&q);
	probe a = {.q = &q}, b = {.q = &q}, c = {.q = &q};
	gsd_waiter_init(&a.w, probe_wake);
	gsd_waiter_init(&b.w, probe_wake);
	gsd_waiter_init(&c.w, probe_wake);
	gsd_waitq_add(&q, &a.w);
	gsd_waitq_add(&q, &b.w);
	gsd_waitq_add(&q, &c.w);
	g_order = 0;
	int ev = 42;
	gsd_waitq_wake(&q, &ev);
	assert_int_equal(a.order, 1);
	assert_int_equal(b.order, 2);
	assert_int_equal(c.order, 3);
	assert_ptr_equal(b.event, &ev);
	assert_true(gsd_waitq_empty(&q));
	/* Woken once: a second wake of the empty queue calls nobody. */
	gsd_waitq_wake(&q, NULL);
	assert_int_equal(a.woken + b.woken + c.woken, 3);
}

/* A waiter that still waits adds itself back and is woken by the next wake, not this one. */
static void test_waiter_waits_again(void **state)
{
	(void)state;
	gsd_waitq q;
	gsd_waitq_init(&q);
	probe a = {.q = &q, .keep_waiting = 2};
	gsd_waiter_init(&a.w, probe_wake);
	gsd_waitq_add(&q, &a.w);
	gsd_waitq_wake(&q, NULL);
	assert_int_equal(a.woken, 1);
	assert_true(gsd_waiter_queued(&a.w));
	gsd_waitq_wake(&q, NULL);
	gsd_waitq_wake(&q, NULL);
	assert_int_equal(a.woken, 3);
	assert_false(gsd_waiter_queued(&a.w));
	gsd_waitq_wake(&q, NULL);
	assert_int_equal(a.woken, 3);
}

/* A wake function may cancel a waiter that was queued with it and not yet woken. */
static void test_waiter_cancels_another(void **state)
{
	(void)state;
	gsd_waitq q;
	gsd_waitq_init(&q);
	probe a = {.q = &q}, b = {.q = &q}, c = {.q = &q};
	gsd_waiter_init(&a.w, probe_wake);
	gsd_waiter_init(&b.w, probe_wake);
	gsd_waiter_init(&c.w, probe_wake);
	a.cancel = &b.w;
	gsd_waitq_add(&q, &a.w);
	gsd_waitq_add(&q, &b.w);
	gsd_waitq_add(&q, &c.w);
	gsd_waitq_wake(&q, NULL);
	assert_int_equal(a.woken, 1);
	assert_int_equal(b.woken, 0);
	assert_int_equal(c.woken, 1);
	assert_true(gsd_waitq_empty(&q));
	/* Cancelling twice, or a waiter on no queue, is harmless. */
	gsd_waiter_cancel(&b.w);
	gsd_waiter_cancel(&b.w);
}

/* A wake function may wake the same queue again (a signal that signals): the inner wake sees
 * only the waiters added since, and nothing is woken twice for one wake. */
typedef struct nested {
	gsd_waiter w;
	gsd_waitq *q;
	probe *late;
	int woken;
} nested;

static void nested_wake(gsd_waiter *w, void *event)
{
	(void)event;
	nested *n = (nested *)((char *)w - offsetof(nested, w));
	n->woken++;
	gsd_waitq_add(n->q, &n->late->w);
	gsd_waitq_wake(n->q, NULL);
}

static void test_waiter_nested_wake(void **state)
{
	(void)state;
	gsd_waitq q;
	gsd_waitq_init(&q);
	probe late = {.q = &q}, after = {.q = &q};
	gsd_waiter_init(&late.w, probe_wake);
	gsd_waiter_init(&after.w, probe_wake);
	nested n = {.q = &q, .late = &late};
	gsd_waiter_init(&n.w, nested_wake);
	gsd_waitq_add(&q, &n.w);
	gsd_waitq_add(&q, &after.w);
	gsd_waitq_wake(&q, NULL);
	assert_int_equal(n.woken, 1);
	assert_int_equal(late.woken, 1);
	assert_int_equal(after.woken, 1);
	assert_true(gsd_waitq_empty(&q));
}

/* The shared FIFO keeps its order across wrap-around and growth, and a refused growth leaves
 * it as it was. */
static void test_ring_order(void **state)
{
	(void)state;
	gs_ring r = GS_RING_INIT(uint32_t);
	uint32_t next_in = 0, next_out = 0, out[64];

	/* Push and take in uneven steps so that the head walks and the ring wraps and grows
	 * with items on both sides of the array's end. */
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < round % 7 + 3; i++, next_in++)
			assert_int_equal(gs_ring_push(&r, &next_in), 0);
		size_t n = gs_ring_take(&r, out, (size_t)(round % 5 + 1));
		for (size_t i = 0; i < n; i++)
			assert_int_equal(out[i], next_out++);
	}
	assert_int_equal(r.len, next_in - next_out);
	size_t cap = r.cap, len = r.len;
	assert_int_equal(gs_ring_reserve(&r, SIZE_MAX), -1);
	assert_int_equal(r.cap, cap);
	assert_int_equal(gs_ring_reserve(&r, cap), 0);
	assert_int_equal(r.cap, cap);
	while (r.len) {
		size_t n = gs_ring_take(&r, out, 64);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(out[i], next_out++);
	}
	assert_int_equal(next_out, next_in);
	assert_true(len > 0);
	assert_int_equal(gs_ring_take(&r, out, 64), 0);
	gs_ring_free(&r);
	assert_null(r.items);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_transition_table),
	        cmocka_unit_test(test_state_names),
	        cmocka_unit_test(test_packet_shape),
	        cmocka_unit_test(test_waiters_oldest_first),
	        cmocka_unit_test(test_waiter_waits_again),
	        cmocka_unit_test(test_waiter_cancels_another),
	        cmocka_unit_test(test_waiter_nested_wake),
	        cmocka_unit_test(test_ring_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
