/* Tiled layout: the worked example of swizzle.h by hand, the offset mapping is a bijection that
 * keeps every band in place, the copies follow the mapping, round trips restore the bytes, the
 * tail stays linear, and band-sized pieces convert on their own. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/swizzle.h"

static void test_example_by_hand(void **state)
{
	(void)state;
	/* swizzle.h: pitch 128, size 8202. */
	const struct {
		uint64_t linear, tiled;
	} map[] = {
	        {0, 0},      {63, 63},     {64, 4096},   {127, 4159},  {128, 64},    {129, 65},
	        {192, 4160}, {8127, 4095}, {8064, 4032}, {8191, 8191}, {8192, 8192}, {8201, 8201},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		assert_int_equal(gsd_swizzle_offset(map[i].linear, 8202, 128), map[i].tiled);
		assert_int_equal(gsd_unswizzle_offset(map[i].tiled, 8202, 128), map[i].linear);
	}
	/* A 64-wide surface is one tile per band: the layout is the identity. */
	for (uint64_t l = 0; l < 3 * 4096; l += 37)
		assert_int_equal(gsd_swizzle_offset(l, 3 * 4096, 64), l);
}

static void test_pitch_and_chunk_helpers(void **state)
{
	(void)state;
	assert_false(gsd_swizzle_pitch_valid(0));
	assert_false(gsd_swizzle_pitch_valid(100));
	assert_true(gsd_swizzle_pitch_valid(64));
	assert_true(gsd_swizzle_pitch_valid(GSD_SWIZZLE_PITCH_DEFAULT));
	assert_int_equal(gsd_swizzle_band(1024), 64 * 1024);
	assert_int_equal(gsd_swizzle_chunk(1, 1024), 64 * 1024);
	assert_int_equal(gsd_swizzle_chunk(200 * 1024, 1024), 192 * 1024);
	assert_int_equal(gsd_swizzle_chunk(128 * 1024, 1024), 128 * 1024);
	assert_int_equal(gsd_swizzle_chunk(5000, 100), 5000); /* invalid pitch: unchanged */
	/* Invalid pitch: offsets unchanged, copies refused. */
	assert_int_equal(gsd_swizzle_offset(77, 1000, 96), 77);
	uint8_t a[16] = {1}, b[16] = {0};
	assert_int_equal(gsd_swizzle(b, a, sizeof(a), 96), -EINVAL);
	assert_int_equal(gsd_unswizzle(b, a, sizeof(a), 0), -EINVAL);
	assert_int_equal(b[0], 0);
}

/* Data-driven over pitches and sizes: whole bands, a partial band, bytes short of a row, less
 * than one band, and empty. */
static const uint32_t pitches[] = {64, 128, 192, 1024, 4096};
static uint64_t sizes_for(uint32_t pitch, uint64_t *out)
{
	uint64_t band = 64ull * pitch;
	uint64_t s[] = {0,        1,        band - 1,         band,
	                band + 1, 3 * band, 3 * band + pitch, 3 * band + 5 * pitch + 17};
	memcpy(out, s, sizeof(s));
	return sizeof(s) / sizeof(s[0]);
}

static void test_offsets_bijective_and_band_local(void **state)
{
	(void)state;
	for (size_t p = 0; p < sizeof(pitches) / sizeof(pitches[0]); p++) {
		uint64_t sizes[8];
		uint64_t ns = sizes_for(pitches[p], sizes);
		uint64_t band = gsd_swizzle_band(pitches[p]);
		for (uint64_t si = 0; si < ns; si++) {
			uint64_t size = sizes[si];
			uint8_t *seen = calloc(size ? size : 1, 1);
			assert_non_null(seen);
			for (uint64_t l = 0; l < size; l++) {
				uint64_t t = gsd_swizzle_offset(l, size, pitches[p]);
				assert_true(t < size);
				assert_int_equal(seen[t], 0);
				seen[t] = 1;
				assert_int_equal(t / band, l / band); /* stays in its band */
				if (l >= size - size % band)
					assert_int_equal(t, l); /* tail linear */
				assert_int_equal(gsd_unswizzle_offset(t, size, pitches[p]), l);
			}
			free(seen);
		}
	}
}

static void fill_pattern(uint8_t *p, uint64_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static void test_copies_follow_mapping_and_round_trip(void **state)
{
	(void)state;
	for (size_t p = 0; p < sizeof(pitches) / sizeof(pitches[0]); p++) {
		uint64_t sizes[8];
		uint64_t ns = sizes_for(pitches[p], sizes);
		for (uint64_t si = 0; si < ns; si++) {
			uint64_t size = sizes[si], alloc = size ? size : 1;
			uint8_t *lin = malloc(alloc), *til = malloc(alloc), *back = malloc(alloc);
			assert_true(lin && til && back);
			fill_pattern(lin, size, (uint32_t)(p * 16 + si));
			memset(til, 0xee, alloc);
			assert_int_equal(gsd_swizzle(til, lin, size, pitches[p]), 0);
			for (uint64_t l = 0; l < size; l++)
				if (til[gsd_swizzle_offset(l, size, pitches[p])] != lin[l])
					fail_msg("pitch %u size %llu: byte %llu misplaced",
					         pitches[p], (unsigned long long)size,
					         (unsigned long long)l);
			memset(back, 0x11, alloc);
			assert_int_equal(gsd_unswizzle(back, til, size, pitches[p]), 0);
			assert_memory_equal(back, lin, size ? size : 0);
			free(lin);
			free(til);
			free(back);
		}
	}
}

/* A transfer cut with gsd_swizzle_chunk: each piece swizzled alone gives the whole result. */
static void test_band_pieces_convert_alone(void **state)
{
	(void)state;
	const uint32_t pitch = GSD_SWIZZLE_PITCH_DEFAULT;
	const uint64_t size = 5 * 64 * 1024 + 3000;
	uint8_t *lin = malloc(size), *whole = malloc(size), *pieces = malloc(size);
	assert_true(lin && whole && pieces);
	fill_pattern(lin, size, 5);
	assert_int_equal(gsd_swizzle(whole, lin, size, pitch), 0);
	uint64_t chunk = gsd_swizzle_chunk(150 * 1024, pitch); /* 128 KiB */
	assert_int_equal(chunk, 128 * 1024);
	for (uint64_t off = 0; off < size; off += chunk) {
		uint64_t n = size - off < chunk ? size - off : chunk;
		assert_int_equal(gsd_swizzle(pieces + off, lin + off, n, pitch), 0);
	}
	assert_memory_equal(pieces, whole, size);
	free(lin);
	free(whole);
	free(pieces);
}

/* Large conversions take the streaming-store path when the destination is cache-line aligned
 * and ordinary stores otherwise: both must place every byte where the mapping says. */
static void test_large_aligned_and_not(void **state)
{
	(void)state;
	const uint32_t pitch = 4096;
	const uint64_t size = 3 * 64 * 4096 * 4 + 5 * 4096 + 7; /* > 1 MiB, with a tail */
	/* Sizes rounded up to the alignment, as aligned_alloc wants. */
	uint64_t cap = (size + 1 + 63) & ~63ull;
	uint8_t *lin = malloc(size), *til = aligned_alloc(64, cap), *back = aligned_alloc(64, cap);
	assert_true(lin && til && back);
	fill_pattern(lin, size, 9);
	for (int shift = 0; shift < 2; shift++) {
		uint8_t *t = til + shift, *b = back + shift;
		assert_int_equal(gsd_swizzle(t, lin, size, pitch), 0);
		for (uint64_t l = 0; l < size; l += 61)
			assert_int_equal(t[gsd_swizzle_offset(l, size, pitch)], lin[l]);
		assert_int_equal(gsd_unswizzle(b, t, size, pitch), 0);
		assert_memory_equal(b, lin, size);
	}
	free(lin);
	free(til);
	free(back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_example_by_hand),
	        cmocka_unit_test(test_pitch_and_chunk_helpers),
	        cmocka_unit_test(test_offsets_bijective_and_band_local),
	        cmocka_unit_test(test_copies_follow_mapping_and_round_trip),
	        cmocka_unit_test(test_band_pieces_convert_alone),
	        cmocka_unit_test(test_large_aligned_and_not),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
