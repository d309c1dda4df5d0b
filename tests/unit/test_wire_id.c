/* Wire ids (server/core/wire_id.c): the keyed permutation is a bijection on the non-zero 53-bit
 * values (inverse, no collisions on samples, 0 fixed, nothing maps to 0, values < 2^53, so JSON
 * keeps them), each domain and key gives unrelated values, and consecutive internal values do
 * not come out consecutive, ordered or at a fixed step. The source is included so the cycle-walking
 * case (the one value the bare network sends to 0) can be reached through the network itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "core/wire_id.c"

#define SAMPLES 20000u

static gsd_wire_key key_of(unsigned char fill)
{
	unsigned char raw[GSD_WIRE_KEY_BYTES];
	memset(raw, fill, sizeof raw);
	raw[0] ^= 0x5a;
	gsd_wire_key k;
	gsd_wire_key_init(&k, raw);
	return k;
}

static uint64_t rand53(uint64_t *s)
{
	/* xorshift64*, a fixed seed: the samples are the same on every run. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (*s * UINT64_C(2685821657736338717)) >> 11;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

static void test_zero_and_range(void **state)
{
	(void)state;
	gsd_wire_key k = key_of(1);
	const uint64_t tweaks[] = {GSD_WIRE_PACKET, GSD_WIRE_SEQ, GSD_WIRE_EVENTS,
	                           gsd_wire_fence_tweak(0, 0), gsd_wire_fence_tweak(3, 7)};
	for (size_t t = 0; t < sizeof tweaks / sizeof tweaks[0]; t++) {
		assert_int_equal(gsd_wire_map(&k, tweaks[t], 0), 0);
		assert_int_equal(gsd_wire_unmap(&k, tweaks[t], 0), 0);
		/* Never a wire value: finds nothing. */
		assert_true(gsd_wire_unmap(&k, tweaks[t], GSD_WIRE_MAX + 1) == GSD_WIRE_NONE);
		assert_true(gsd_wire_unmap(&k, tweaks[t], UINT64_C(1) << 63) == GSD_WIRE_NONE);
		assert_true(gsd_wire_map(&k, tweaks[t], GSD_WIRE_MAX + 1) == GSD_WIRE_NONE);
		assert_true(gsd_wire_unmap(&k, tweaks[t], UINT64_MAX) == GSD_WIRE_NONE);
		/* The extremes of the domain map inside it and back. */
		uint64_t top = GSD_WIRE_MAX;
		uint64_t w = gsd_wire_map(&k, tweaks[t], top);
		assert_true(w != 0 && w <= top);
		assert_true(gsd_wire_unmap(&k, tweaks[t], w) == top);
		w = gsd_wire_map(&k, tweaks[t], 1);
		assert_true(w != 0 && w <= top);
		assert_true(gsd_wire_unmap(&k, tweaks[t], w) == 1);
	}
}

/* Consecutive and random inputs: every output non-zero, below 2^53, distinct, and undone by
 * unmap; random wire values come back through unmap then map. */
static void test_bijection_on_samples(void **state)
{
	(void)state;
	gsd_wire_key k = key_of(2);
	uint64_t *out = malloc(2 * SAMPLES * sizeof(*out));
	assert_non_null(out);
	uint64_t s = 88172645463325252u;
	for (uint64_t i = 0; i < 2 * SAMPLES; i++) {
		uint64_t v = i < SAMPLES ? i + 1 : rand53(&s) | 1;
		uint64_t w = gsd_wire_map(&k, GSD_WIRE_PACKET, v);
		assert_true(w != 0);
		assert_true(w <= GSD_WIRE_MAX);
		assert_true(gsd_wire_unmap(&k, GSD_WIRE_PACKET, w) == v);
		out[i] = w;
		uint64_t r = rand53(&s);
		if (r)
			assert_true(gsd_wire_map(&k, GSD_WIRE_PACKET,
			                         gsd_wire_unmap(&k, GSD_WIRE_PACKET, r)) == r);
	}
	/* Distinct inputs (the random ones are odd and above SAMPLES, almost surely distinct
	 * from each other: checked) give distinct outputs. */
	qsort(out, 2 * SAMPLES, sizeof(*out), cmp_u64);
	for (size_t i = 1; i < 2 * SAMPLES; i++)
		assert_true(out[i] != out[i - 1]);
	free(out);
}

/* The one non-zero value the bare network sends to 0 walks on to the image of 0, and back. */
static void test_cycle_walk(void **state)
{
	(void)state;
	gsd_wire_key k = key_of(3);
	const uint64_t tweaks[] = {GSD_WIRE_PACKET, GSD_WIRE_SEQ, gsd_wire_fence_tweak(1, 2)};
	for (size_t t = 0; t < sizeof tweaks / sizeof tweaks[0]; t++) {
		uint64_t to_zero = permute(&k, tweaks[t], 0, true);
		uint64_t of_zero = permute(&k, tweaks[t], 0, false);
		assert_true(to_zero != 0 && of_zero != 0);
		assert_true(permute(&k, tweaks[t], to_zero, false) == 0);
		assert_true(gsd_wire_map(&k, tweaks[t], to_zero) == of_zero);
		assert_true(gsd_wire_unmap(&k, tweaks[t], of_zero) == to_zero);
		/* Everything else is the bare network. */
		assert_true(gsd_wire_map(&k, tweaks[t], to_zero + 1) ==
		            permute(&k, tweaks[t], to_zero + 1, false));
	}
}

/* Equal internal values in two domains (or two nodes' fences, or under two keys) give unrelated
 * wire values. */
static void test_tweak_and_key_separation(void **state)
{
	(void)state;
	gsd_wire_key k = key_of(4), other = key_of(5);
	const uint64_t tweaks[] = {GSD_WIRE_PACKET,
	                           GSD_WIRE_SEQ,
	                           GSD_WIRE_EVENTS,
	                           gsd_wire_fence_tweak(0, 0),
	                           gsd_wire_fence_tweak(0, 1),
	                           gsd_wire_fence_tweak(1, 0)};
	const size_t nt = sizeof tweaks / sizeof tweaks[0];
	unsigned same = 0, same_key = 0;
	for (uint64_t v = 1; v <= SAMPLES; v++) {
		for (size_t a = 0; a < nt; a++) {
			uint64_t wa = gsd_wire_map(&k, tweaks[a], v);
			same_key += wa == gsd_wire_map(&other, tweaks[a], v);
			for (size_t b = a + 1; b < nt; b++)
				same += wa == gsd_wire_map(&k, tweaks[b], v);
		}
	}
	assert_int_equal(same, 0);
	assert_int_equal(same_key, 0);
}

/* A tenant that gets internal values i and i+1 learns nothing from their wire values: the step
 * is never small, never the same twice, and up or down about as often. */
static void test_consecutive_inputs_scatter(void **state)
{
	(void)state;
	gsd_wire_key k = key_of(6);
	const uint64_t tweaks[] = {GSD_WIRE_PACKET, GSD_WIRE_SEQ, gsd_wire_fence_tweak(0, 0)};
	for (size_t t = 0; t < sizeof tweaks / sizeof tweaks[0]; t++) {
		uint64_t *steps = malloc(SAMPLES * sizeof(*steps));
		assert_non_null(steps);
		unsigned up = 0, small = 0;
		uint64_t prev = gsd_wire_map(&k, tweaks[t], 1000);
		for (uint64_t i = 0; i < SAMPLES; i++) {
			uint64_t w = gsd_wire_map(&k, tweaks[t], 1001 + i);
			uint64_t d = w > prev ? w - prev : prev - w;
			up += w > prev;
			small += d < (UINT64_C(1) << 30); /* 1 in 2^22 for a random pair */
			steps[i] = w - prev;
			prev = w;
		}
		assert_true(small <= 1);
		assert_in_range(up, SAMPLES * 45 / 100, SAMPLES * 55 / 100);
		qsort(steps, SAMPLES, sizeof(*steps), cmp_u64);
		unsigned repeats = 0;
		for (size_t i = 1; i < SAMPLES; i++)
			repeats += steps[i] == steps[i - 1];
		assert_true(repeats <= 1);
		free(steps);
	}
}

/* At a crossing, a value the daemon issued comes back as itself, and a made-up one names
 * nothing (GSD_WIRE_NONE) but for about 1 in 2^9 (the issued range, 2^44, in the 2^53 wire
 * values). */
static void test_made_up_values_name_nothing(void **state)
{
	(void)state;
	gsd_wire_key k = key_of(5);
	uint64_t s = 0x9e3779b97f4a7c15u;
	for (uint64_t i = 1; i <= 1000; i++) {
		uint64_t v = i == 1000 ? GSD_WIRE_ISSUED_MAX : i * 7919;
		assert_true(gsd_wire_packet_in(&k, gsd_wire_packet_out(&k, v)) == v);
		assert_true(gsd_wire_seq_in(&k, gsd_wire_seq_out(&k, v)) == v);
		assert_true(gsd_wire_fence_in(&k, 1, 2, gsd_wire_fence_out(&k, 1, 2, v)) == v);
	}
	/* Above the issued range: not a value the daemon hands out, so it cannot come back. */
	uint64_t w = gsd_wire_packet_out(&k, GSD_WIRE_ISSUED_MAX + 1);
	assert_true(gsd_wire_packet_in(&k, w) == GSD_WIRE_NONE);
	size_t landed = 0;
	for (int i = 0; i < 200000; i++) {
		uint64_t r = rand53(&s);
		if (r && gsd_wire_in(&k, GSD_WIRE_SEQ, r) != GSD_WIRE_NONE)
			landed++;
	}
	/* 200000 / 2^9 is 391 on average (standard deviation 20); without the check every one
	 * would land. */
	assert_in_range(landed, 250, 550);
	assert_int_equal(gsd_wire_in(&k, GSD_WIRE_SEQ, 0), 0);
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_zero_and_range),
	        cmocka_unit_test(test_bijection_on_samples),
	        cmocka_unit_test(test_cycle_walk),
	        cmocka_unit_test(test_tweak_and_key_separation),
	        cmocka_unit_test(test_consecutive_inputs_scatter),
	        cmocka_unit_test(test_made_up_values_name_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
