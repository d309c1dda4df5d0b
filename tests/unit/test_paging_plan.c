/* Paging plans: sub-transfer flags for every size around the chunk and every base flag set (and
 * for band-aligned Swizzle chunks), victim choice by priority and age (tables, pinned and tie
 * cases, plus properties on random input), the contiguous variant against a brute force and by
 * its tie rules, and the priority rule for honouring preferences, also checked for exactness
 * against what the pickers choose. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vidmm/paging_plan.h"
#include "engine/swizzle.h"
#include "vidmm/heap.h"
#include "wddm.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)

#define LOW  GS_ALLOC_PRIORITY_LOW
#define MINP GS_ALLOC_PRIORITY_MINIMUM
#define NORM GS_ALLOC_PRIORITY_NORMAL
#define HIGH GS_ALLOC_PRIORITY_HIGH
#define MAXP GS_ALLOC_PRIORITY_MAXIMUM

static uint64_t al(uint64_t v)
{
	return (v + GSD_HEAP_ALIGN - 1) & ~(uint64_t)(GSD_HEAP_ALIGN - 1);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* ---- transfers ---- */

static void test_split_sizes_and_flags(void **state)
{
	(void)state;
	const uint64_t chunk = 64 * KIB;
	const struct {
		uint64_t size, pieces;
	} sizes[] = {{1, 1}, {chunk - 1, 1}, {chunk, 1}, {chunk + 1, 2}, {10 * chunk, 10}};
	const uint32_t bases[] = {
	        0,
	        GS_TRANSFER_SWIZZLE,
	        GS_TRANSFER_UNSWIZZLE,
	        GS_TRANSFER_ALLOCATION_IS_IDLE,
	        GS_TRANSFER_SWIZZLE | GS_TRANSFER_ALLOCATION_IS_IDLE,
	        GS_TRANSFER_UNSWIZZLE | GS_TRANSFER_ALLOCATION_IS_IDLE,
	};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
			gsd_subtransfer out[16];
			int64_t n = gsd_transfer_split(sizes[s].size, chunk, bases[b], out, 16);
			assert_int_equal(n, sizes[s].pieces);
			assert_int_equal(gsd_transfer_pieces(sizes[s].size, chunk),
			                 sizes[s].pieces);
			uint64_t next = 0;
			for (int64_t i = 0; i < n; i++) {
				uint32_t want = bases[b];
				if (i == 0)
					want |= GS_TRANSFER_START;
				if (i == n - 1)
					want |= GS_TRANSFER_END;
				assert_int_equal(out[i].flags, want);
				assert_int_equal(out[i].flags & ~GS_TRANSFER_VALID_MASK, 0);
				assert_int_equal(out[i].offset, next);
				assert_true(out[i].size > 0 && out[i].size <= chunk);
				if (i < n - 1)
					assert_int_equal(out[i].size, chunk);
				next += out[i].size;
			}
			assert_int_equal(next, sizes[s].size);
		}
	}
}

static void test_split_rejects(void **state)
{
	(void)state;
	gsd_subtransfer out[4];
	const struct {
		uint64_t size, chunk;
		uint32_t base;
		size_t cap;
		int64_t rc;
	} cases[] = {
	        {0, 4096, 0, 4, -EINVAL},
	        {4096, 0, 0, 4, -EINVAL},
	        {4096, 4096, GS_TRANSFER_START, 4, -EINVAL},
	        {4096, 4096, GS_TRANSFER_END, 4, -EINVAL},
	        {4096, 4096, 0x20, 4, -EINVAL},        /* reserved */
	        {4096, 4096, 0x80000000u, 4, -EINVAL}, /* reserved */
	        {4096, 4096, GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE, 4, -EINVAL},
	        {5 * 4096, 4096, 0, 4, -ENOBUFS},
	        {4 * 4096, 4096, 0, 4, 4},
	        {1, 4096, 0, 0, -ENOBUFS},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(gsd_transfer_split(cases[i].size, cases[i].chunk, cases[i].base,
		                                    out, cases[i].cap),
		                 cases[i].rc);
	assert_int_equal(gsd_transfer_pieces(0, 1), 0);
	assert_int_equal(gsd_transfer_pieces(1, 0), 0);
	assert_int_equal(gsd_transfer_pieces(UINT64_MAX, 1ull << 63), 2);
}

/* The daemon's recipe for a converting transfer: a band-aligned chunk from gsd_swizzle_chunk, so
 * every piece but the last is whole bands; Start only on the first piece, End only on the last,
 * both on a single one, and the conversion flag on all of them. */
static void test_split_swizzle_chunks(void **state)
{
	(void)state;
	const uint32_t pitches[] = {64, 1024, 4096, 6400};
	for (size_t p = 0; p < sizeof(pitches) / sizeof(pitches[0]); p++) {
		const uint64_t band = gsd_swizzle_band(pitches[p]);
		const uint64_t chunk = gsd_swizzle_chunk(1 * MIB, pitches[p]);
		assert_int_equal(chunk % band, 0);
		assert_true(chunk <= 1 * MIB || chunk == band);
		const uint64_t sizes[] = {1,     band - 1,  band,
		                          chunk, chunk + 1, 3 * chunk + band + 7};
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			for (int conv = 0; conv < 2; conv++) {
				const uint32_t base = conv ? GS_TRANSFER_UNSWIZZLE |
				                                      GS_TRANSFER_ALLOCATION_IS_IDLE
				                           : GS_TRANSFER_SWIZZLE;
				gsd_subtransfer out[8];
				int64_t n = gsd_transfer_split(sizes[i], chunk, base, out, 8);
				assert_int_equal(n, gsd_transfer_pieces(sizes[i], chunk));
				uint64_t next = 0;
				for (int64_t k = 0; k < n; k++) {
					assert_int_equal(out[k].offset, next);
					assert_int_equal(out[k].offset % band, 0);
					if (k < n - 1)
						assert_int_equal(out[k].size, chunk);
					assert_int_equal(out[k].flags & GSD_TRANSFER_BASE_MASK,
					                 base);
					assert_int_equal((out[k].flags & GS_TRANSFER_START) != 0,
					                 k == 0);
					assert_int_equal((out[k].flags & GS_TRANSFER_END) != 0,
					                 k == n - 1);
					next += out[k].size;
				}
				assert_int_equal(next, sizes[i]);
				if (n == 1)
					assert_int_equal(out[0].flags, base | GS_TRANSFER_START |
					                                       GS_TRANSFER_END);
			}
		}
	}
}

/* ---- victims by bytes ---- */

static const gsd_victim_candidate cands[] = {
        {0, 1 * MIB, NORM, 10, false}, /* 0 */
        {0, 1 * MIB, LOW, 50, false},  /* 1 */
        {0, 1 * MIB, LOW, 20, false},  /* 2 */
        {0, 4 * MIB, MINP, 90, true},  /* 3: pinned, never chosen */
        {0, 2 * MIB, HIGH, 5, false},  /* 4 */
        {0, 1 * MIB, 0, 5, false},     /* 5: priority 0 reads as NORMAL */
};
#define NCANDS (sizeof(cands) / sizeof(cands[0]))

static void test_pick_victims_table(void **state)
{
	(void)state;
	/* Order: 2 (LOW, older), 1 (LOW), 5 (NORMAL, older), 0 (NORMAL), 4 (HIGH). */
	const struct {
		uint64_t need;
		int rc;
		size_t n;
		size_t idx[6];
	} cases[] = {
	        {0, 0, 0, {0}},
	        {1, 0, 1, {2}},
	        {1 * MIB, 0, 1, {2}},
	        {1 * MIB + 1, 0, 2, {2, 1}},
	        {3 * MIB, 0, 3, {2, 1, 5}},
	        /* 2,1,5,0 make 4 MiB; 4 (2 MiB) is needed; then 0 is no longer. */
	        {5 * MIB, 0, 4, {2, 1, 5, 4}},
	        {6 * MIB, 0, 5, {2, 1, 5, 0, 4}},
	        {6 * MIB + 1, -ENOSPC, 0, {0}}, /* only the pinned 4 MiB would do */
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t out[NCANDS], n = 99;
		assert_int_equal(gsd_pick_victims(cands, NCANDS, cases[c].need, out, NCANDS, &n),
		                 cases[c].rc);
		assert_int_equal(n, cases[c].n);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(out[i], cases[c].idx[i]);
	}
	size_t out[NCANDS], n;
	assert_int_equal(gsd_pick_victims(cands, NCANDS, 1, out, NCANDS - 1, &n), -EINVAL);
	assert_int_equal(gsd_victims_max_priority(cands, (size_t[]){2, 5, 1}, 3), NORM);
	assert_int_equal(gsd_victims_max_priority(cands, NULL, 0), 0);
}

static void test_pick_victims_spares_small_ones(void **state)
{
	(void)state;
	const gsd_victim_candidate c[] = {
	        {0, 256, LOW, 1, false},
	        {0, 300, LOW, 2, false}, /* counts as 512 */
	        {0, 8 * MIB, NORM, 3, false},
	        {0, 8 * MIB, MAXP, 4, false},
	};
	size_t out[4], n;
	assert_int_equal(gsd_pick_victims(c, 4, 8 * MIB, out, 4, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0], 2);
	/* 8 MiB + 512: the 512-byte one is needed with the big one, the 256-byte one is not. */
	assert_int_equal(gsd_pick_victims(c, 4, 8 * MIB + 512, out, 4, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 2);
}

/* Pinned is absolute: the cheapest, oldest, exactly fitting candidate is never taken when it is
 * pinned. Equal priority and age: the lower index goes first. */
static void test_pick_victims_pinned_and_ties(void **state)
{
	(void)state;
	const gsd_victim_candidate c[] = {
	        {0, 1 * MIB, MINP, 0, true},  /* 0: the best in every way, but pinned */
	        {0, 1 * MIB, NORM, 7, false}, /* 1 */
	        {0, 1 * MIB, NORM, 7, false}, /* 2: ties with 1 */
	        {0, 1 * MIB, LOW, 9, false},  /* 3: lower priority beats older age */
	        {0, 1 * MIB, NORM, 3, false}, /* 4: older than 1 and 2 */
	        {0, 1 * MIB, MAXP, 1, false}, /* 5 */
	        {0, 1 * MIB, 0, 5, false},    /* 6: NORMAL, between 4 and 1 */
	};
	const size_t order[] = {3, 4, 6, 1, 2, 5};
	for (size_t k = 1; k <= 6; k++) {
		size_t out[7], n = 0;
		assert_int_equal(gsd_pick_victims(c, 7, k * MIB, out, 7, &n), 0);
		assert_int_equal(n, k);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(out[i], order[i]);
	}
	size_t out[7], n = 9;
	assert_int_equal(gsd_pick_victims(c, 7, 6 * MIB + 1, out, 7, &n), -ENOSPC);
	assert_int_equal(n, 0);
	/* Only pinned candidates: nothing can help. */
	assert_int_equal(gsd_pick_victims(c, 1, 1, out, 7, &n), -ENOSPC);
	/* The contiguous picker never takes a pinned block either, however cheap: the pinned
	 * MINIMUM block at 4K splits the segment, and the hole comes from the NORMAL one. */
	const gsd_victim_candidate seg[] = {
	        {0, 4 * KIB, NORM, 0, false},
	        {4 * KIB, 4 * KIB, MINP, 0, true},
	        {8 * KIB, 4 * KIB, HIGH, 0, false},
	};
	uint64_t hole = 0;
	assert_int_equal(gsd_pick_victims_contiguous(seg, 3, 16 * KIB, 8 * KIB, out, 3, &n, &hole),
	                 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0], 2);
	assert_int_equal(hole, 8 * KIB);
	assert_int_equal(gsd_pick_victims_contiguous(seg, 3, 16 * KIB, 12 * KIB, out, 3, &n, &hole),
	                 -ENOSPC);
}

/* Equal highest priority: the run evicting fewer bytes; equal bytes too: the lower one. */
static void test_contiguous_ties(void **state)
{
	(void)state;
	/* 32 KiB, all LOW: [A 2K @0][B 4K @4K][C 2K @12K][D 2K @20K] with free 2K..4K, 8K..12K,
	 * 14K..20K, 22K..32K. */
	const gsd_victim_candidate c[] = {
	        {0, 2 * KIB, LOW, 0, false},
	        {4 * KIB, 4 * KIB, LOW, 0, false},
	        {12 * KIB, 2 * KIB, LOW, 0, false},
	        {20 * KIB, 2 * KIB, LOW, 0, false},
	};
	size_t out[4], n;
	uint64_t hole;
	/* 12 KiB: evicting B (4K) gives 2K..12K = 10K, not enough; C alone gives 8K..20K = 12K
	 * (2K evicted); D alone gives 14K..32K = 18K (2K evicted): equal, the lower wins. */
	assert_int_equal(gsd_pick_victims_contiguous(c, 4, 32 * KIB, 12 * KIB, out, 4, &n, &hole),
	                 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0], 2);
	assert_int_equal(hole, 8 * KIB);
	/* 16 KiB: only D (2K) makes 18K; C+... would cost more. */
	assert_int_equal(gsd_pick_victims_contiguous(c, 4, 32 * KIB, 16 * KIB, out, 4, &n, &hole),
	                 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0], 3);
	assert_int_equal(hole, 14 * KIB);
	/* Priority beats bytes: make D HIGH, and C+D (max HIGH) loses to B+C (max LOW, 6K) for
	 * 17 KiB: B+C frees 2K..20K = 18K. */
	gsd_victim_candidate d[4];
	memcpy(d, c, sizeof(d));
	d[3].priority = HIGH;
	assert_int_equal(gsd_pick_victims_contiguous(d, 4, 32 * KIB, 17 * KIB, out, 4, &n, &hole),
	                 0);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 2);
	assert_int_equal(hole, 2 * KIB);
	/* Least recently used comes before bytes and position: for 12 KiB, C (2K), D (2K) and
	 * A+B (6K) each do; the run whose newest victim is the oldest goes. */
	memcpy(d, c, sizeof(d));
	d[0].last_use = d[1].last_use = 8; /* A+B (6K) would free 12K too, but more recently used */
	d[2].last_use = 9;
	d[3].last_use = 1;
	assert_int_equal(gsd_pick_victims_contiguous(d, 4, 32 * KIB, 12 * KIB, out, 4, &n, &hole),
	                 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0], 3);
	assert_int_equal(hole, 14 * KIB);
	d[2].last_use = 2;
	d[3].last_use = 5;
	d[0].last_use = d[1].last_use = 3; /* A+B (newest 3) loses to C (2) */
	assert_int_equal(gsd_pick_victims_contiguous(d, 4, 32 * KIB, 12 * KIB, out, 4, &n, &hole),
	                 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0], 2);
}

/* The ranking gsd_pick_victims documents, written out independently. */
static bool rank_before(const gsd_victim_candidate *c, size_t a, size_t b)
{
	uint32_t pa = gsd_alloc_priority_effective(c[a].priority);
	uint32_t pb = gsd_alloc_priority_effective(c[b].priority);
	if (pa != pb)
		return pa < pb;
	if (c[a].last_use != c[b].last_use)
		return c[a].last_use < c[b].last_use;
	return a < b;
}

/* Random candidates: every victim is unpinned and necessary, the sum reaches need, victims come
 * out in ranking order, and they are drawn from the shortest ranked prefix that reaches need. */
static void test_pick_victims_properties(void **state)
{
	(void)state;
	rng_state = 3;
	const uint32_t prios[] = {0, MINP, LOW, NORM, HIGH, MAXP, LOW + 7};
	for (int round = 0; round < 2000; round++) {
		gsd_victim_candidate c[24];
		size_t n = 1 + rnd() % 24;
		uint64_t total = 0;
		for (size_t i = 0; i < n; i++) {
			c[i] = (gsd_victim_candidate){0, 1 + rnd() % (4 * MIB), prios[rnd() % 7],
			                              rnd() % 8, rnd() % 5 == 0};
			if (!c[i].pinned)
				total += al(c[i].size);
		}
		uint64_t need = rnd() % (total + 2 * MIB + 1);
		size_t out[24], k;
		int rc = gsd_pick_victims(c, n, need, out, 24, &k);
		if (need > total) {
			assert_int_equal(rc, -ENOSPC);
			assert_int_equal(k, 0);
			continue;
		}
		assert_int_equal(rc, 0);
		uint64_t sum = 0;
		bool chosen[24] = {false};
		for (size_t i = 0; i < k; i++) {
			assert_false(c[out[i]].pinned);
			assert_false(chosen[out[i]]);
			chosen[out[i]] = true;
			sum += al(c[out[i]].size);
		}
		assert_true(sum >= need);
		for (size_t i = 0; i < k; i++)
			assert_true(sum - al(c[out[i]].size) < need);
		/* Eviction order is non-decreasing in (priority, last_use). */
		for (size_t i = 1; i < k; i++) {
			uint32_t pa = gsd_alloc_priority_effective(c[out[i - 1]].priority);
			uint32_t pb = gsd_alloc_priority_effective(c[out[i]].priority);
			assert_true(pa < pb ||
			            (pa == pb && c[out[i - 1]].last_use <= c[out[i]].last_use));
		}
		/* Victims come from the shortest prefix of the ranking that reaches need, and
		 * include its last element. */
		size_t rank[24], m = 0;
		for (size_t i = 0; i < n; i++) {
			if (c[i].pinned)
				continue;
			size_t j = m++;
			while (j > 0 && rank_before(c, i, rank[j - 1])) {
				rank[j] = rank[j - 1];
				j--;
			}
			rank[j] = i;
		}
		size_t plen = 0;
		for (uint64_t psum = 0; need && psum < need; plen++)
			psum += al(c[rank[plen]].size);
		bool in_prefix[24] = {false};
		for (size_t i = 0; i < plen; i++)
			in_prefix[rank[i]] = true;
		for (size_t i = 0; i < k; i++)
			assert_true(in_prefix[out[i]]);
		if (plen)
			assert_true(chosen[rank[plen - 1]]);
	}
}

/* ---- victims for one hole ---- */

static void test_contiguous_by_hand(void **state)
{
	(void)state;
	/* 16 KiB: free 1K-2K, 4K-6K, 7K-8K, 10K-12K, 13K-16K. */
	const gsd_victim_candidate c[] = {
	        {0, 1 * KIB, LOW, 0, false},        /* 0 */
	        {2 * KIB, 1 * KIB, HIGH, 0, false}, /* 1 */
	        {3 * KIB, 1 * KIB, LOW, 0, true},   /* 2: pinned */
	        {6 * KIB, 1 * KIB, NORM, 0, false}, /* 3 */
	        {8 * KIB, 2 * KIB, LOW, 0, false},  /* 4 */
	        {12 * KIB, 1 * KIB, MINP, 0, false} /* 5 */
	};
	const struct {
		uint64_t need;
		int rc;
		size_t n;
		size_t idx[3];
		uint64_t hole;
	} cases[] = {
	        {0, 0, 0, {0}, 0},
	        {2 * KIB, 0, 0, {0}, 4 * KIB}, /* the first gap that is big enough */
	        {3 * KIB, 0, 0, {0}, 13 * KIB},
	        {4 * KIB, 0, 1, {5}, 10 * KIB},   /* MINIMUM beats LOW (4) and NORMAL (3) */
	        {7 * KIB, 0, 2, {4, 5}, 7 * KIB}, /* LOW run beats 3+4 (NORMAL) */
	        {12 * KIB, 0, 3, {3, 4, 5}, 4 * KIB},
	        {13 * KIB, -ENOSPC, 0, {0}, 0}, /* the pinned block bounds every hole */
	        {3 * KIB + 1, 0, 1, {5}, 10 * KIB},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		size_t out[6], n = 99;
		uint64_t hole = 99;
		assert_int_equal(gsd_pick_victims_contiguous(c, 6, 16 * KIB, cases[k].need, out, 6,
		                                             &n, &hole),
		                 cases[k].rc);
		assert_int_equal(n, cases[k].n);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(out[i], cases[k].idx[i]);
		assert_int_equal(hole, cases[k].hole);
	}
	size_t out[6], n;
	uint64_t hole;
	assert_int_equal(gsd_pick_victims_contiguous(c, 6, 16 * KIB, 1, out, 5, &n, &hole),
	                 -EINVAL);
	const gsd_victim_candidate bad[] = {{4096, 256, LOW, 0, false}, {0, 256, LOW, 0, false}};
	assert_int_equal(gsd_pick_victims_contiguous(bad, 2, 16 * KIB, 1, out, 6, &n, &hole),
	                 -EINVAL);
}

typedef struct run {
	bool found;
	uint32_t maxp;
	uint64_t bytes, hole;
	size_t k, count;
} run;

static run brute_run(const gsd_victim_candidate *c, size_t n, uint64_t seg, uint64_t need)
{
	run best = {false, 0, 0, 0, 0, 0};
	need = al(need);
	for (size_t k = 0; k <= n; k++) {
		uint64_t start = k == 0 ? 0 : c[k - 1].offset + al(c[k - 1].size);
		uint32_t maxp = 0;
		uint64_t bytes = 0;
		for (size_t j = k;; j++) {
			uint64_t end = j == n ? seg : c[j].offset;
			if (end - start >= need) {
				if (!best.found || maxp < best.maxp ||
				    (maxp == best.maxp && bytes < best.bytes))
					best = (run){true, maxp, bytes, start, k, j - k};
				break;
			}
			if (j == n || c[j].pinned)
				break;
			uint32_t p = gsd_alloc_priority_effective(c[j].priority);
			maxp = p > maxp ? p : maxp;
			bytes += al(c[j].size);
		}
	}
	return best;
}

static void test_contiguous_matches_brute_force(void **state)
{
	(void)state;
	rng_state = 11;
	const uint32_t prios[] = {0, MINP, LOW, NORM, HIGH, MAXP};
	for (int round = 0; round < 5000; round++) {
		const uint64_t seg = 64 * KIB;
		gsd_victim_candidate c[14];
		size_t n = 0;
		uint64_t cursor = 0;
		for (size_t i = 0; i < 14; i++) {
			cursor += (rnd() % 4) * 512;
			uint64_t sz = 1 + rnd() % 6000;
			if (cursor + al(sz) > seg)
				break;
			c[n++] = (gsd_victim_candidate){cursor, sz, prios[rnd() % 6], 0,
			                                rnd() % 5 == 0};
			cursor += al(sz);
		}
		uint64_t need = 1 + rnd() % (40 * KIB);
		run want = brute_run(c, n, seg, need);
		size_t out[14], k;
		uint64_t hole;
		int rc = gsd_pick_victims_contiguous(c, n, seg, need, out, 14, &k, &hole);
		if (!want.found) {
			assert_int_equal(rc, -ENOSPC);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(k, want.count);
		assert_int_equal(hole, want.hole);
		for (size_t i = 0; i < k; i++)
			assert_int_equal(out[i], want.k + i);
	}
}

/* ---- priority rule ---- */

static void test_should_evict_for_preference(void **state)
{
	(void)state;
	const struct {
		uint32_t newp;
		uint32_t v[3];
		size_t n;
		bool evict;
	} cases[] = {
	        {HIGH, {LOW, NORM}, 2, true},
	        {HIGH, {HIGH}, 1, false}, /* never an equal */
	        {HIGH, {LOW, MAXP}, 2, false},
	        {HIGH, {0}, 1, true}, /* 0 reads as NORMAL */
	        {HIGH, {0}, 0, true}, /* nothing to evict: priority alone */
	        {HIGH - 1, {MINP}, 1, false},
	        {HIGH + 1, {HIGH}, 1, true},
	        {MAXP, {HIGH, 0, MINP}, 3, true},
	        {MAXP, {MAXP}, 1, false},
	        {NORM, {MINP}, 1, false}, /* below HIGH: fall back first */
	        {0, {0}, 0, false},
	        {MINP, {0}, 0, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (gsd_should_evict_for_preference(cases[i].newp, cases[i].v, cases[i].n) !=
		    cases[i].evict)
			fail_msg("case %zu: new 0x%x", i, cases[i].newp);
	assert_int_equal(gsd_alloc_priority_effective(0), NORM);
	assert_int_equal(gsd_alloc_priority_effective(LOW), LOW);
}

/*
 * The exactness gsd_should_evict_for_preference claims: applied to what either picker chose, it
 * says "evict" exactly when the new allocation is HIGH or more and some set of unpinned victims
 * of strictly lower priority would make the room (by bytes for gsd_pick_victims, as one hole for
 * the contiguous picker, found by brute force over runs).
 */
static void test_should_evict_exact_for_pickers(void **state)
{
	(void)state;
	rng_state = 29;
	const uint32_t prios[] = {0, MINP, LOW, NORM, HIGH, MAXP};
	const uint32_t news[] = {NORM, HIGH, HIGH + 1, MAXP, 0xffffffffu};
	for (int round = 0; round < 3000; round++) {
		const uint64_t seg = 64 * KIB;
		gsd_victim_candidate c[12];
		size_t n = 0;
		uint64_t cursor = 0;
		for (size_t i = 0; i < 12; i++) {
			cursor += (rnd() % 3) * 512;
			uint64_t sz = 1 + rnd() % 8000;
			if (cursor + al(sz) > seg)
				break;
			c[n++] = (gsd_victim_candidate){cursor, sz, prios[rnd() % 6], rnd() % 4,
			                                rnd() % 6 == 0};
			cursor += al(sz);
		}
		const uint32_t newp = news[rnd() % 5];
		const uint64_t need = 1 + rnd() % (48 * KIB);
		const bool qualifies = newp >= HIGH;

		/* Candidates a preference may evict: unpinned and strictly lower. */
		gsd_victim_candidate lower[12];
		uint64_t lower_bytes = 0;
		for (size_t i = 0; i < n; i++) {
			lower[i] = c[i];
			if (gsd_alloc_priority_effective(c[i].priority) >= newp)
				lower[i].pinned = true;
			if (!lower[i].pinned)
				lower_bytes += al(c[i].size);
		}

		size_t out[12], k;
		uint32_t vp[12];
		if (gsd_pick_victims(c, n, need, out, 12, &k) == 0) {
			for (size_t i = 0; i < k; i++)
				vp[i] = c[out[i]].priority;
			assert_int_equal(gsd_should_evict_for_preference(newp, vp, k),
			                 qualifies && lower_bytes >= need);
		}
		uint64_t hole;
		if (gsd_pick_victims_contiguous(c, n, seg, need, out, 12, &k, &hole) == 0) {
			for (size_t i = 0; i < k; i++)
				vp[i] = c[out[i]].priority;
			assert_int_equal(gsd_victims_max_priority(c, out, k) <
			                                 gsd_alloc_priority_effective(newp) ||
			                         k == 0,
			                 brute_run(lower, n, seg, need).found);
			assert_int_equal(gsd_should_evict_for_preference(newp, vp, k),
			                 qualifies && brute_run(lower, n, seg, need).found);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_split_sizes_and_flags),
	        cmocka_unit_test(test_split_rejects),
	        cmocka_unit_test(test_split_swizzle_chunks),
	        cmocka_unit_test(test_pick_victims_table),
	        cmocka_unit_test(test_pick_victims_spares_small_ones),
	        cmocka_unit_test(test_pick_victims_pinned_and_ties),
	        cmocka_unit_test(test_pick_victims_properties),
	        cmocka_unit_test(test_contiguous_by_hand),
	        cmocka_unit_test(test_contiguous_matches_brute_force),
	        cmocka_unit_test(test_contiguous_ties),
	        cmocka_unit_test(test_should_evict_for_preference),
	        cmocka_unit_test(test_should_evict_exact_for_pickers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
