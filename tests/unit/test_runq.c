/* Run queue: band order, weighted-runtime order inside a band, deterministic ties, removal
 * from the middle, no credit banking, and a randomized check against a brute-force model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "vidsch/runq.h"

static gsd_runq_entry mk(uint32_t cls, int32_t prio, uint64_t key, uint64_t seq)
{
	gsd_runq_entry e;
	gsd_runq_entry_init(&e);
	e.band = gsd_band_of(cls, prio);
	e.key = key;
	e.seq = seq;
	return e;
}

static void test_band_mapping(void **state)
{
	(void)state;
	assert_int_equal(gsd_band_of(0, -7), 0);
	assert_int_equal(gsd_band_of(0, 7), 14);
	assert_int_equal(gsd_band_of(2, 0), 37);
	assert_int_equal(gsd_band_of(5, 7), GSD_CLIENT_BANDS - 1);
	assert_int_equal(gsd_band_of(GSD_CLASS_SYSTEM, GSD_PRIORITY_MIN), GSD_BAND_SYSTEM);
	assert_int_equal(gsd_band_class(gsd_band_of(4, -3)), 4);
}

static void test_higher_band_first(void **state)
{
	(void)state;
	gsd_runq q;
	gsd_runq_init(&q);
	gsd_runq_entry idle = mk(0, 7, 0, 1), normal = mk(2, 0, 100, 2), high = mk(4, -7, 500, 3),
	               rt = mk(5, -7, 900, 4);
	assert_int_equal(gsd_runq_insert(&q, &idle), 0);
	assert_int_equal(gsd_runq_insert(&q, &high), 0);
	assert_int_equal(gsd_runq_insert(&q, &normal), 0);
	assert_int_equal(gsd_runq_insert(&q, &rt), 0);
	assert_int_equal(gsd_runq_top_band(&q), (int)gsd_band_of(5, -7));
	assert_ptr_equal(gsd_runq_pop(&q), &rt);
	assert_ptr_equal(gsd_runq_pop(&q), &high);
	assert_ptr_equal(gsd_runq_pop(&q), &normal);
	assert_ptr_equal(gsd_runq_pop(&q), &idle);
	assert_null(gsd_runq_pop(&q));
	assert_int_equal(gsd_runq_top_band(&q), -1);
	gsd_runq_fini(&q);
}

static void test_key_then_seq_in_band(void **state)
{
	(void)state;
	gsd_runq q;
	gsd_runq_init(&q);
	gsd_runq_entry a = mk(2, 0, 30, 1), b = mk(2, 0, 10, 2), c = mk(2, 0, 10, 1),
	               d = mk(2, 0, 20, 9);
	gsd_runq_insert(&q, &a);
	gsd_runq_insert(&q, &b);
	gsd_runq_insert(&q, &c);
	gsd_runq_insert(&q, &d);
	assert_ptr_equal(gsd_runq_pop(&q), &c); /* key 10, seq 1 */
	assert_ptr_equal(gsd_runq_pop(&q), &b);
	assert_ptr_equal(gsd_runq_pop(&q), &d);
	assert_ptr_equal(gsd_runq_pop(&q), &a);
	gsd_runq_fini(&q);
}

static void test_remove_middle_and_requeue(void **state)
{
	(void)state;
	gsd_runq q;
	gsd_runq_init(&q);
	gsd_runq_entry e[6];
	for (int i = 0; i < 6; i++) {
		e[i] = mk(2, 0, (uint64_t)(10 * (6 - i)), (uint64_t)i);
		gsd_runq_insert(&q, &e[i]);
	}
	gsd_runq_remove(&q, &e[2]);
	assert_false(gsd_runq_queued(&e[2]));
	gsd_runq_remove(&q, &e[2]); /* twice is harmless */
	assert_int_equal(q.count, 5);
	assert_ptr_equal(gsd_runq_pop(&q), &e[5]);
	assert_ptr_equal(gsd_runq_pop(&q), &e[4]);
	assert_ptr_equal(gsd_runq_pop(&q), &e[3]);
	assert_ptr_equal(gsd_runq_pop(&q), &e[1]);
	assert_ptr_equal(gsd_runq_pop(&q), &e[0]);
	gsd_runq_fini(&q);
}

/* A context that slept re-enters at the band's clock, not with its old, small key. */
static void test_no_credit_banking(void **state)
{
	(void)state;
	gsd_runq q;
	gsd_runq_init(&q);
	gsd_runq_entry busy = mk(2, 0, 1000000, 1), sleeper = mk(2, 0, 5, 2);
	gsd_runq_insert(&q, &busy);
	assert_ptr_equal(gsd_runq_pop(&q), &busy);
	gsd_runq_insert(&q, &sleeper);
	assert_true(sleeper.key >= 1000000);
	gsd_runq_fini(&q);
}

/*
 * Random operations against a brute-force model of the same order: n entries over `classes`
 * classes (15 priorities each), keys drawn below `keys` so that equal keys are common.
 */
static void random_against_model(int n, uint32_t classes, int keys, unsigned seed)
{
	gsd_runq q;
	gsd_runq_init(&q);
	gsd_runq_entry *e = calloc((size_t)n, sizeof(*e));
	bool *in = calloc((size_t)n, sizeof(*in));
	assert_non_null(e);
	assert_non_null(in);
	srand(seed);
	for (int i = 0; i < n; i++) {
		uint32_t cls = (uint32_t)rand() % classes;
		e[i] = mk(cls, classes > 1 ? rand() % 15 - 7 : 0, 0, (uint64_t)i);
		e[i].key = (uint64_t)(rand() % keys);
	}
	for (int step = 0; step < 50 * n; step++) {
		int i = rand() % n;
		int op = rand() % 3;
		if (op == 0 && !in[i]) {
			/* Keep keys at or above the band clock so the model needs no clamping. */
			uint64_t floor = q.bands[e[i].band].min_key;
			if (e[i].key < floor)
				e[i].key = floor + (uint64_t)(rand() % keys);
			assert_int_equal(gsd_runq_insert(&q, &e[i]), 0);
			in[i] = true;
		} else if (op == 1 && in[i]) {
			gsd_runq_remove(&q, &e[i]);
			in[i] = false;
		} else if (op == 2) {
			int best = -1;
			for (int j = 0; j < n; j++) {
				if (!in[j])
					continue;
				if (best < 0 || e[j].band > e[best].band ||
				    (e[j].band == e[best].band &&
				     (e[j].key < e[best].key ||
				      (e[j].key == e[best].key && e[j].seq < e[best].seq))))
					best = j;
			}
			gsd_runq_entry *got = gsd_runq_pop(&q);
			if (best < 0) {
				assert_null(got);
			} else {
				assert_ptr_equal(got, &e[best]);
				in[best] = false;
			}
		}
	}
	gsd_runq_fini(&q);
	free(e);
	free(in);
}

/* Many small heaps (a few entries a band). */
static void test_random_against_model(void **state)
{
	(void)state;
	random_against_model(400, 6, 50, 12345);
}

/* One deep heap (full groups of four children, ties at every level): the path that compares
 * four keys at once and falls back to seq on equal keys. */
static void test_random_one_deep_band(void **state)
{
	(void)state;
	random_against_model(2000, 1, 8, 777);
	random_against_model(2000, 1, 1000000, 778);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_band_mapping),
	        cmocka_unit_test(test_higher_band_first),
	        cmocka_unit_test(test_key_then_seq_in_band),
	        cmocka_unit_test(test_remove_middle_and_requeue),
	        cmocka_unit_test(test_no_credit_banking),
	        cmocka_unit_test(test_random_against_model),
	        cmocka_unit_test(test_random_one_deep_band),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
