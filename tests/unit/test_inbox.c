/*
 * The rpc inbox: one FIFO per connection, drained round-robin, so a connection with a long
 * backlog delays another by at most one item per connection with work.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rpc/internal.h"

/* Items carry their connection in .pipe and a sequence number in .w (never dereferenced). */
static gsd_inbox_item item(uint32_t pipe, uintptr_t seq)
{
	return (gsd_inbox_item){.w = (gsd_rpc_worker *)seq, .pipe = pipe};
}

static uintptr_t seq_of(const gsd_inbox_item *it)
{
	return (uintptr_t)it->w;
}

static void test_round_robin(void **state)
{
	(void)state;
	gsd_inbox ib;
	gsd_inbox_init(&ib);
	/* Connection 7 queues 1000 requests, then connections 8 and 9 one each. */
	for (uintptr_t i = 1; i <= 1000; i++)
		assert_true(gsd_inbox_push(&ib, item(7, i)));
	assert_true(gsd_inbox_push(&ib, item(8, 5001)));
	assert_true(gsd_inbox_push(&ib, item(9, 6001)));
	assert_int_equal(ib.count, 1002);
	gsd_inbox_item out[4];
	assert_int_equal(gsd_inbox_take(&ib, out, 4), 4);
	/* 8 and 9 are served within the first round, not after 7's backlog. */
	assert_int_equal(out[0].pipe, 7);
	assert_int_equal(seq_of(&out[0]), 1);
	assert_int_equal(out[1].pipe, 8);
	assert_int_equal(out[2].pipe, 9);
	assert_int_equal(out[3].pipe, 7);
	assert_int_equal(seq_of(&out[3]), 2);
	/* The rest of 7's queue, in order. */
	uintptr_t want = 3;
	gsd_inbox_item one;
	while (gsd_inbox_take(&ib, &one, 1) == 1) {
		assert_int_equal(one.pipe, 7);
		assert_int_equal(seq_of(&one), want++);
	}
	assert_int_equal(want, 1001);
	assert_int_equal(ib.count, 0);
	gsd_inbox_free(&ib, NULL);
}

/* A connection's "closed" event comes after every request it sent before closing. */
static void test_close_after_requests(void **state)
{
	(void)state;
	gsd_inbox ib;
	gsd_inbox_init(&ib);
	for (uintptr_t i = 1; i <= 3; i++)
		assert_true(gsd_inbox_push(&ib, item(4, i)));
	assert_true(gsd_inbox_push(&ib, (gsd_inbox_item){.pipe = 4})); /* closed */
	assert_true(gsd_inbox_push(&ib, item(0, 100)));                /* in process */
	gsd_inbox_item out[8];
	size_t n = gsd_inbox_take(&ib, out, 8);
	assert_int_equal(n, 5);
	uintptr_t last = 0;
	bool closed_seen = false;
	for (size_t i = 0; i < n; i++) {
		if (out[i].pipe != 4)
			continue;
		if (!out[i].w) {
			closed_seen = true;
			continue;
		}
		assert_false(closed_seen);
		assert_true(seq_of(&out[i]) > last);
		last = seq_of(&out[i]);
	}
	assert_true(closed_seen);
	assert_int_equal(last, 3);
	gsd_inbox_free(&ib, NULL);
}

/* Queues come and go (spares reused); what is left at the end is handed to drop. */
static size_t g_dropped;
static void drop(gsd_inbox_item *it)
{
	(void)it;
	g_dropped++;
}

static void test_churn_and_free(void **state)
{
	(void)state;
	gsd_inbox ib;
	gsd_inbox_init(&ib);
	uint64_t rng = 42;
	size_t queued = 0, taken = 0;
	for (int round = 0; round < 20000; round++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t pipe = (uint32_t)(rng >> 33) % 300;
		assert_true(gsd_inbox_push(&ib, item(pipe, (uintptr_t)round + 1)));
		queued++;
		if (rng & (1ull << 20)) {
			gsd_inbox_item out[3];
			taken += gsd_inbox_take(&ib, out, 3);
		}
	}
	assert_int_equal(ib.count, queued - taken);
	g_dropped = 0;
	gsd_inbox_free(&ib, drop);
	assert_int_equal(g_dropped, queued - taken);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_round_robin),
	        cmocka_unit_test(test_close_after_requests),
	        cmocka_unit_test(test_churn_and_free),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
