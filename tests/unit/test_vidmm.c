/* Video memory: the tree-indexed best-fit heap against a brute-force model of the same rules,
 * exact-range claims, placement order and direction for every preference slot, and the
 * compaction planner, whose moves are applied to a model and to a real heap. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpusched.pb-c.h"
#include "vidmm/heap.h"
#include "wddm.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)

static uint64_t al(uint64_t v)
{
	return (v + GSD_HEAP_ALIGN - 1) & ~(uint64_t)(GSD_HEAP_ALIGN - 1);
}

/* Deterministic xorshift so failures reproduce. */
static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* ---- the model: a sorted array of free extents, scanned linearly ---- */

typedef struct model {
	gsd_extent ext[4096];
	size_t n;
	uint64_t size, used;
} model;

static void model_init(model *m, uint64_t size)
{
	m->n = 1;
	m->ext[0] = (gsd_extent){0, size};
	m->size = size;
	m->used = 0;
}

static int model_alloc(model *m, uint64_t size, bool top_down, uint64_t *offset)
{
	if (size == 0 || size > m->size)
		return -1;
	size = al(size);
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < m->n; i++) {
		if (m->ext[i].size < size)
			continue;
		if (best == SIZE_MAX || m->ext[i].size < m->ext[best].size ||
		    (top_down && m->ext[i].size == m->ext[best].size))
			best = i;
	}
	if (best == SIZE_MAX)
		return -1;
	gsd_extent *e = &m->ext[best];
	if (top_down) {
		*offset = e->offset + e->size - size;
	} else {
		*offset = e->offset;
		e->offset += size;
	}
	e->size -= size;
	if (e->size == 0) {
		memmove(e, e + 1, (m->n - best - 1) * sizeof(*e));
		m->n--;
	}
	m->used += size;
	return 0;
}

static void model_free(model *m, uint64_t offset, uint64_t size)
{
	size = al(size);
	size_t i = 0;
	while (i < m->n && m->ext[i].offset < offset)
		i++;
	memmove(&m->ext[i + 1], &m->ext[i], (m->n - i) * sizeof(m->ext[0]));
	m->ext[i] = (gsd_extent){offset, size};
	m->n++;
	/* Merge with the neighbours. */
	if (i + 1 < m->n && m->ext[i].offset + m->ext[i].size == m->ext[i + 1].offset) {
		m->ext[i].size += m->ext[i + 1].size;
		memmove(&m->ext[i + 1], &m->ext[i + 2], (m->n - i - 2) * sizeof(m->ext[0]));
		m->n--;
	}
	if (i > 0 && m->ext[i - 1].offset + m->ext[i - 1].size == m->ext[i].offset) {
		m->ext[i - 1].size += m->ext[i].size;
		memmove(&m->ext[i], &m->ext[i + 1], (m->n - i - 1) * sizeof(m->ext[0]));
		m->n--;
	}
	m->used -= size;
}

static void assert_same(const gsd_heap *h, const model *m)
{
	static gsd_extent got[4096];
	assert_int_equal(gsd_heap_check(h), 0);
	assert_int_equal(h->used, m->used);
	size_t n = gsd_heap_extents(h, got, 4096);
	assert_int_equal(n, m->n);
	uint64_t largest = 0;
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(got[i].offset, m->ext[i].offset);
		assert_int_equal(got[i].size, m->ext[i].size);
		if (m->ext[i].size > largest)
			largest = m->ext[i].size;
	}
	assert_int_equal(gsd_heap_largest_free(h), largest);
}

/* ---- heap: table of steps with the expected offsets ---- */

typedef struct heap_step {
	char op;        /* 'a' alloc, 'f' free, 'x' alloc expected to fail */
	uint64_t size;  /* asked for */
	bool top_down;  /* for 'a' */
	uint64_t where; /* 'a': expected offset; 'f': offset to free */
} heap_step;

static void run_steps(uint64_t heap_size, const heap_step *s, size_t n)
{
	gsd_heap h;
	assert_int_equal(gsd_heap_init(&h, heap_size), 0);
	for (size_t i = 0; i < n; i++) {
		uint64_t off = UINT64_MAX;
		if (s[i].op == 'a') {
			assert_int_equal(gsd_heap_alloc(&h, s[i].size, s[i].top_down, &off), 0);
			assert_int_equal(off, s[i].where);
		} else if (s[i].op == 'x') {
			assert_int_equal(gsd_heap_alloc(&h, s[i].size, s[i].top_down, &off), -1);
		} else {
			gsd_heap_free(&h, s[i].where, s[i].size);
		}
		assert_int_equal(gsd_heap_check(&h), 0);
	}
	gsd_heap_fini(&h);
}

static void test_heap_best_fit_table(void **state)
{
	(void)state;
	/* A 64 KiB heap cut into holes of 4 KiB (at 4K), 2 KiB (at 12K), 2 KiB (at 20K) and the
	 * rest; then best fit and its tie rules per direction. */
	const heap_step s[] = {
	        {'a', 4 * KIB, false, 0},
	        {'a', 4 * KIB, false, 4 * KIB},
	        {'a', 4 * KIB, false, 8 * KIB},
	        {'a', 2 * KIB, false, 12 * KIB},
	        {'a', 6 * KIB, false, 14 * KIB},
	        {'a', 2 * KIB, false, 20 * KIB},
	        {'a', 2 * KIB, false, 22 * KIB},
	        {'f', 4 * KIB, false, 4 * KIB},
	        {'f', 2 * KIB, false, 12 * KIB},
	        {'f', 2 * KIB, false, 20 * KIB},
	        /* 1 byte rounds to 256 and best-fits the lowest 2 KiB hole bottom-up. */
	        {'a', 1, false, 12 * KIB},
	        {'f', 1, false, 12 * KIB},
	        /* Top-down: the highest of the two 2 KiB holes, at its high end. */
	        {'a', 2 * KIB, true, 20 * KIB},
	        {'f', 2 * KIB, false, 20 * KIB},
	        {'a', 1000, true, 22 * KIB - 1024},
	        {'f', 1000, false, 22 * KIB - 1024},
	        /* 3 KiB: only the 4 KiB hole or the tail fit; the 4 KiB hole is smaller. */
	        {'a', 3 * KIB, false, 4 * KIB},
	        {'a', 3 * KIB, true, 64 * KIB - 3 * KIB},
	        /* Too big for anything. */
	        {'x', 64 * KIB, false, 0},
	        {'x', 0, false, 0},
	};
	run_steps(64 * KIB, s, sizeof(s) / sizeof(s[0]));
}

static void test_heap_merges_both_sides(void **state)
{
	(void)state;
	const heap_step s[] = {
	        {'a', 256, false, 0},    {'a', 256, false, 256}, {'a', 256, false, 512},
	        {'a', 256, false, 768},  {'f', 256, false, 256}, {'f', 256, false, 768},
	        {'f', 256, false, 512}, /* 256..4096 is one extent again */
	        {'a', 3840, false, 256}, {'x', 256, false, 0},
	};
	run_steps(4 * KIB, s, sizeof(s) / sizeof(s[0]));
}

static void test_heap_alloc_at(void **state)
{
	(void)state;
	gsd_heap h;
	assert_int_equal(gsd_heap_init(&h, 64 * KIB), 0);
	assert_int_equal(gsd_heap_alloc_at(&h, 4 * KIB, 1000), 0); /* middle: splits in two */
	assert_int_equal(h.nfree, 2);
	assert_int_equal(gsd_heap_alloc_at(&h, 4 * KIB, 256), -1);        /* in use */
	assert_int_equal(gsd_heap_alloc_at(&h, 3 * KIB + 256, 1024), -1); /* overlaps its end */
	assert_int_equal(gsd_heap_alloc_at(&h, 100, 256), -1);            /* misaligned */
	assert_int_equal(gsd_heap_alloc_at(&h, 64 * KIB - 256, 512), -1); /* past the end */
	assert_int_equal(gsd_heap_alloc_at(&h, 0, 4 * KIB), 0);           /* low edge */
	assert_int_equal(gsd_heap_alloc_at(&h, 64 * KIB - 256, 256), 0);  /* high edge */
	assert_int_equal(h.nfree, 1);
	assert_int_equal(gsd_heap_largest_free(&h), 64 * KIB - 5 * KIB - 256);
	assert_int_equal(gsd_heap_check(&h), 0);
	gsd_heap_free(&h, 4 * KIB, 1000);
	gsd_heap_free(&h, 0, 4 * KIB);
	gsd_heap_free(&h, 64 * KIB - 256, 256);
	assert_int_equal(h.nfree, 1);
	assert_int_equal(h.used, 0);
	assert_int_equal(gsd_heap_largest_free(&h), 64 * KIB);
	gsd_heap_fini(&h);
}

/* A segment size that is not a whole number of units: the heap manages only whole units, so
 * top-down offsets stay aligned. */
static void test_heap_unaligned_size(void **state)
{
	(void)state;
	const heap_step s[] = {
	        {'a', 1, true, 512},  {'a', 512, false, 0}, {'x', 256, false, 0},
	        {'f', 1, false, 512}, {'x', 257, true, 0},  {'a', 200, true, 512},
	};
	run_steps(1000, s, sizeof(s) / sizeof(s[0]));
	gsd_heap h;
	assert_int_equal(gsd_heap_init(&h, 1000), 0);
	assert_int_equal(h.size, 768);
	assert_int_equal(gsd_heap_largest_free(&h), 768);
	gsd_heap_fini(&h);
	assert_int_equal(gsd_heap_init(&h, 100), 0); /* less than a unit: nothing to place */
	uint64_t off;
	assert_int_equal(gsd_heap_alloc(&h, 1, false, &off), -1);
	assert_int_equal(gsd_heap_largest_free(&h), 0);
	assert_int_equal(gsd_heap_check(&h), 0);
	gsd_heap_fini(&h);
}

/* Random allocs and frees of mixed sizes and directions: the heap must pick exactly the
 * model's offsets and hold exactly its extents. */
static void test_heap_matches_model(void **state)
{
	(void)state;
	static model m;
	static struct {
		uint64_t off, size;
	} live[2048];
	size_t nlive = 0;
	gsd_heap h;
	const uint64_t size = 256 * MIB;
	rng_state = 0x9e3779b97f4a7c15ull;
	assert_int_equal(gsd_heap_init(&h, size), 0);
	model_init(&m, size);
	for (int step = 0; step < 60000; step++) {
		bool do_alloc = nlive == 0 || (nlive < 2048 && rnd() % 100 < 55);
		if (do_alloc) {
			/* Mostly small, a few large; sizes not multiples of the alignment too. */
			uint64_t sz =
			        rnd() % 8 == 0 ? 1 + rnd() % (2 * MIB) : 1 + rnd() % (64 * KIB);
			bool td = rnd() & 1;
			uint64_t a = 0, b = 0;
			int ra = gsd_heap_alloc(&h, sz, td, &a);
			int rb = model_alloc(&m, sz, td, &b);
			assert_int_equal(ra, rb);
			if (ra == 0) {
				assert_int_equal(a, b);
				live[nlive].off = a;
				live[nlive].size = sz;
				nlive++;
			}
		} else {
			size_t i = rnd() % nlive;
			gsd_heap_free(&h, live[i].off, live[i].size);
			model_free(&m, live[i].off, live[i].size);
			live[i] = live[--nlive];
		}
		if (step % 997 == 0)
			assert_same(&h, &m);
	}
	assert_same(&h, &m);
	while (nlive) {
		nlive--;
		gsd_heap_free(&h, live[nlive].off, live[nlive].size);
	}
	assert_int_equal(h.used, 0);
	assert_int_equal(h.nfree, 1);
	gsd_heap_fini(&h);
}

/* 100k live allocations: the case the trees exist for; the books must still balance. */
static void test_heap_many_live(void **state)
{
	(void)state;
	enum { N = 100000 };
	uint64_t *off = malloc(N * sizeof(*off));
	assert_non_null(off);
	gsd_heap h;
	assert_int_equal(gsd_heap_init(&h, 64 * 1024 * MIB), 0);
	/* The first half packs up from 0, the second down from the top: index neighbours are
	 * address neighbours, with the untouched middle between the halves. */
	for (int i = 0; i < N; i++)
		assert_int_equal(gsd_heap_alloc(&h, 4096, i >= N / 2, &off[i]), 0);
	/* Free every other one: 50k separate holes that must not merge, plus the middle. */
	for (int i = 0; i < N; i += 2)
		gsd_heap_free(&h, off[i], 4096);
	assert_int_equal(h.nfree, N / 2 + 1);
	assert_int_equal(gsd_heap_largest_free(&h), h.size - (uint64_t)N * 4096);
	assert_int_equal(gsd_heap_check(&h), 0);
	for (int i = 1; i < N; i += 2)
		gsd_heap_free(&h, off[i], 4096);
	assert_int_equal(h.nfree, 1);
	assert_int_equal(h.used, 0);
	gsd_heap_fini(&h);
	free(off);
}

/* ---- placement ---- */

#define MEM  GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY
#define APER GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE

/* Five memory segments with scattered ids (one of them 31, the highest) and one aperture. */
static const uint32_t seg_ids[] = {3, 7, 12, 20, 31, 2};
static const int seg_kinds[] = {MEM, MEM, MEM, MEM, MEM, APER};
#define NSEGS   6
#define SEGSIZE (64 * KIB)

static void segs_init(gsd_segment *s)
{
	for (int i = 0; i < NSEGS; i++)
		assert_int_equal(
		        gsd_segment_init(&s[i], seg_ids[i], "seg", seg_kinds[i], SEGSIZE, true), 0);
}

static void segs_fini(gsd_segment *s)
{
	for (int i = 0; i < NSEGS; i++)
		gsd_segment_fini(&s[i]);
}

static void seg_fill(gsd_segment *s)
{
	assert_int_equal(gsd_heap_alloc_at(&s->heap, 0, s->size), 0);
}

static int index_of_id(uint32_t id)
{
	for (int i = 0; i < NSEGS; i++)
		if (seg_ids[i] == id)
			return i;
	return -1;
}

/*
 * Every memory segment as the one with room, in every preference slot, in both directions: the
 * slots before it name other segments that are full. Placement must land in it, from the end
 * the direction asks for, and the placement order must list exactly the preferred segments,
 * then the other memory segments in configured order, then the aperture.
 */
static void test_place_every_slot_and_direction(void **state)
{
	(void)state;
	for (int target = 0; target < 5; target++) {
		for (int slot = 0; slot < GS_SEGPREF_SLOTS; slot++) {
			for (int dir = 0; dir < 2; dir++) {
				gsd_segment s[NSEGS];
				segs_init(s);
				gs_segpref p = {{0}, {0}};
				int filler = 0;
				for (int k = 0; k < slot; k++) {
					if (filler == target)
						filler++;
					p.segment[k] = (uint8_t)seg_ids[filler];
					p.direction[k] = (uint8_t)(k & 1);
					seg_fill(&s[filler]);
					filler++;
				}
				p.segment[slot] = (uint8_t)seg_ids[target];
				p.direction[slot] = (uint8_t)dir;
				uint32_t pref = gs_segpref_encode(&p);

				gsd_place_step st[GSD_PLACE_STEPS_MAX];
				size_t n =
				        gsd_place_order(s, NSEGS, 0, pref, st, GSD_PLACE_STEPS_MAX);
				assert_int_equal(n, NSEGS);
				for (int k = 0; k <= slot; k++) {
					assert_int_equal(st[k].index, index_of_id(p.segment[k]));
					assert_int_equal(st[k].top_down, p.direction[k]);
					assert_true(st[k].preferred);
				}
				for (size_t k = slot + 1, prev = 0; k < n; k++) {
					assert_false(st[k].preferred);
					assert_false(st[k].top_down);
					/* Configured order, aperture last. */
					assert_true(k == (size_t)slot + 1 || st[k].index > prev);
					prev = st[k].index;
				}
				assert_int_equal(st[n - 1].index, 5);

				uint64_t off = UINT64_MAX;
				int si = gsd_place(s, NSEGS, 0, pref, 1000, &off);
				assert_int_equal(si, target);
				assert_int_equal(off, dir ? SEGSIZE - 1024 : 0);
				segs_fini(s);
			}
		}
	}
}

typedef struct fallback_case {
	const char *what;
	uint32_t full;      /* bit i: segs[i] is full */
	uint32_t supported; /* supported segment set (by id); 0 = any */
	uint32_t pref;
	int expect; /* index into segs, or -1 */
} fallback_case;

#define ID(i) (1u << seg_ids[i])

static void test_place_fallback_table(void **state)
{
	(void)state;
	gs_segpref p20 = {{20}, {1}}, p2 = {{2}, {0}}, p99 = {{9, 20}, {0, 1}},
	           pdup = {{7, 7, 12}, {1, 0, 0}};
	const fallback_case cases[] = {
	        {"no preference: first memory segment", 0, 0, 0, 0},
	        {"no preference, first two full", 0x3, 0, 0, 2},
	        {"preferred segment first", 0, 0, gs_segpref_encode(&p20), 3},
	        {"preferred full: memory in order", 1u << 3, 0, gs_segpref_encode(&p20), 0},
	        {"all memory full: aperture", 0x1f, 0, 0, 5},
	        {"aperture preferred over memory", 0, 0, gs_segpref_encode(&p2), 5},
	        {"supported set limits the fallback", 1u << 5, ID(5) | ID(4),
	         gs_segpref_encode(&p2), 4},
	        {"unsupported segments are never used", 0x10, ID(4), 0, -1},
	        {"unknown preferred id is skipped", 0, 0, gs_segpref_encode(&p99), 3},
	        {"repeated preferred id tried once", 1u << 1, 0, gs_segpref_encode(&pdup), 2},
	        {"everything full", 0x3f, 0, 0, -1},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		gsd_segment s[NSEGS];
		segs_init(s);
		for (int i = 0; i < NSEGS; i++)
			if (cases[c].full & (1u << i))
				seg_fill(&s[i]);
		uint64_t off = 0;
		int si = gsd_place(s, NSEGS, cases[c].supported, cases[c].pref, 4096, &off);
		if (si != cases[c].expect)
			fail_msg("%s: placed in %d, expected %d", cases[c].what, si,
			         cases[c].expect);
		segs_fini(s);
	}
}

static void test_place_order_repeated_id(void **state)
{
	(void)state;
	gsd_segment s[NSEGS];
	segs_init(s);
	gs_segpref p = {{7, 7, 31, 0, 12}, {1, 0, 0, 0, 1}}; /* slot 4 is after the end */
	gsd_place_step st[GSD_PLACE_STEPS_MAX];
	size_t n = gsd_place_order(s, NSEGS, 0, gs_segpref_encode(&p), st, GSD_PLACE_STEPS_MAX);
	assert_int_equal(n, NSEGS);
	const uint32_t want[NSEGS] = {1, 4, 0, 2, 3, 5};
	for (size_t k = 0; k < n; k++)
		assert_int_equal(st[k].index, want[k]);
	assert_true(st[0].top_down);
	assert_false(st[1].top_down);
	/* A short cap writes a prefix. */
	assert_int_equal(gsd_place_order(s, NSEGS, 0, gs_segpref_encode(&p), st, 2), 2);
	segs_fini(s);
}

/*
 * A second layout for the placement order: aperture segments configured first and in between,
 * ids out of order, so "memory before aperture, each in configured order" differs from both
 * configured order and id order.
 */
static const uint32_t mix_ids[] = {4, 9, 1, 17, 31, 6};
static const int mix_kinds[] = {APER, MEM, MEM, APER, MEM, MEM};
#define NMIX 6
/* Fallback order with no preference and every segment supported: 9, 1, 31, 6, then 4, 17. */
static const uint32_t mix_fallback[NMIX] = {1, 2, 4, 5, 0, 3};

static void mix_init(gsd_segment *s)
{
	for (int i = 0; i < NMIX; i++)
		assert_int_equal(
		        gsd_segment_init(&s[i], mix_ids[i], "mix", mix_kinds[i], SEGSIZE, false),
		        0);
}

static void mix_fini(gsd_segment *s)
{
	for (int i = 0; i < NMIX; i++)
		gsd_segment_fini(&s[i]);
}

static int mix_index(uint32_t id)
{
	for (int i = 0; i < NMIX; i++)
		if (mix_ids[i] == id)
			return i;
	return -1;
}

/* The documented order, written out step by step: preference slots up to the first 0, each
 * kept if it names a configured segment in the supported set not listed yet; then the other
 * supported memory segments, then the other supported apertures, in configured order. */
static size_t model_order(uint32_t supported, const gs_segpref *p, gsd_place_step *out)
{
	bool listed[NMIX] = {false};
	size_t n = 0;
	for (int k = 0; k < GS_SEGPREF_SLOTS; k++) {
		if (p->segment[k] == 0)
			break;
		int i = mix_index(p->segment[k]);
		if (i < 0 || listed[i] || (supported && !(supported & (1u << p->segment[k]))))
			continue;
		listed[i] = true;
		out[n++] = (gsd_place_step){(uint32_t)i, p->direction[k] != 0, true};
	}
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < NMIX; i++) {
			if (mix_kinds[i] != (pass == 0 ? MEM : APER) || listed[i] ||
			    (supported && !(supported & (1u << mix_ids[i]))))
				continue;
			listed[i] = true;
			out[n++] = (gsd_place_step){(uint32_t)i, false, false};
		}
	return n;
}

static void expect_order(const gsd_segment *s, uint32_t supported, const gs_segpref *p,
                         const char *what)
{
	gsd_place_step want[GSD_PLACE_STEPS_MAX], got[GSD_PLACE_STEPS_MAX];
	size_t nw = model_order(supported, p, want);
	size_t ng =
	        gsd_place_order(s, NMIX, supported, gs_segpref_encode(p), got, GSD_PLACE_STEPS_MAX);
	bool same = nw == ng;
	for (size_t k = 0; same && k < ng; k++)
		same = got[k].index == want[k].index && got[k].top_down == want[k].top_down &&
		       got[k].preferred == want[k].preferred;
	if (!same)
		fail_msg("%s: slots {%u %u %u %u %u} dirs {%u %u %u %u %u} set 0x%x: %zu steps, "
		         "model %zu (first index %u vs %u)",
		         what, p->segment[0], p->segment[1], p->segment[2], p->segment[3],
		         p->segment[4], p->direction[0], p->direction[1], p->direction[2],
		         p->direction[3], p->direction[4], supported, ng, nw,
		         ng ? got[0].index : 99u, nw ? want[0].index : 99u);
}

/* Hand-written cases of every rule, on the mixed layout. */
static void test_place_order_rules_table(void **state)
{
	(void)state;
	gsd_segment s[NMIX];
	mix_init(s);
	gsd_place_step fb[GSD_PLACE_STEPS_MAX];
	assert_int_equal(gsd_place_order(s, NMIX, 0, 0, fb, GSD_PLACE_STEPS_MAX), NMIX);
	for (size_t k = 0; k < NMIX; k++)
		assert_int_equal(fb[k].index, mix_fallback[k]);
	const struct {
		const char *what;
		uint32_t supported;
		gs_segpref p;
		size_t n;
		struct {
			uint32_t id;
			bool top_down, preferred;
		} step[NMIX];
	} cases[] = {
	        {"no preference: memory in configured order, then apertures",
	         0,
	         {{0}, {0}},
	         6,
	         {{9, 0, 0}, {1, 0, 0}, {31, 0, 0}, {6, 0, 0}, {4, 0, 0}, {17, 0, 0}}},
	        {"one slot, top-down; an aperture may be preferred",
	         0,
	         {{17}, {1}},
	         6,
	         {{17, 1, 1}, {9, 0, 0}, {1, 0, 0}, {31, 0, 0}, {6, 0, 0}, {4, 0, 0}}},
	        {"five slots, alternating directions",
	         0,
	         {{6, 4, 31, 9, 17}, {1, 0, 1, 0, 1}},
	         6,
	         {{6, 1, 1}, {4, 0, 1}, {31, 1, 1}, {9, 0, 1}, {17, 1, 1}, {1, 0, 0}}},
	        {"id 0 ends the list: later slots and their directions are ignored",
	         0,
	         {{31, 0, 6, 4, 17}, {0, 1, 1, 1, 1}},
	         6,
	         {{31, 0, 1}, {9, 0, 0}, {1, 0, 0}, {6, 0, 0}, {4, 0, 0}, {17, 0, 0}}},
	        {"a repeated id is skipped, keeping the first slot's direction",
	         0,
	         {{1, 1, 9, 1}, {0, 1, 1, 1}},
	         6,
	         {{1, 0, 1}, {9, 1, 1}, {31, 0, 0}, {6, 0, 0}, {4, 0, 0}, {17, 0, 0}}},
	        {"ids naming no configured segment are skipped",
	         0,
	         {{2, 30, 6, 5}, {1, 1, 1, 1}},
	         6,
	         {{6, 1, 1}, {9, 0, 0}, {1, 0, 0}, {31, 0, 0}, {4, 0, 0}, {17, 0, 0}}},
	        {"ids outside the supported set are skipped, and so is their fallback",
	         (1u << 1) | (1u << 6) | (1u << 17),
	         {{9, 17, 4, 6}, {1, 1, 1, 0}},
	         3,
	         {{17, 1, 1}, {6, 0, 1}, {1, 0, 0}}},
	        {"supported set of apertures only",
	         (1u << 4) | (1u << 17),
	         {{31}, {1}},
	         2,
	         {{4, 0, 0}, {17, 0, 0}}},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		gsd_place_step st[GSD_PLACE_STEPS_MAX];
		uint32_t pref = gs_segpref_encode(&cases[c].p);
		size_t n =
		        gsd_place_order(s, NMIX, cases[c].supported, pref, st, GSD_PLACE_STEPS_MAX);
		if (n != cases[c].n)
			fail_msg("%s: %zu steps, expected %zu", cases[c].what, n, cases[c].n);
		for (size_t k = 0; k < n; k++)
			if (mix_ids[st[k].index] != cases[c].step[k].id ||
			    st[k].top_down != cases[c].step[k].top_down ||
			    st[k].preferred != cases[c].step[k].preferred)
				fail_msg("%s: step %zu is segment %u (top_down %d, preferred %d)",
				         cases[c].what, k, mix_ids[st[k].index], st[k].top_down,
				         st[k].preferred);
		expect_order(s, cases[c].supported, &cases[c].p, cases[c].what);
	}
	mix_fini(s);
}

/*
 * Every preference pattern against the model: 0..5 slots used; ids drawn from configured
 * memory and aperture segments, unconfigured ids and repeats; anything after the first 0 (ids
 * and directions); every direction bit; four supported sets. Then placement with real heaps:
 * with a random set of segments full, gsd_place must land in the first step that has
 * room, at offset 0 bottom-up or at the high end top-down.
 */
static void test_place_every_pattern_against_model(void **state)
{
	(void)state;
	static const uint8_t pool[] = {4, 9, 1, 17, 31, 6, 2, 30, 9, 31};
	const uint32_t all =
	        (1u << 4) | (1u << 9) | (1u << 1) | (1u << 17) | (1u << 31) | (1u << 6);
	const uint32_t sets[] = {0, all, all & ~((1u << 9) | (1u << 17)), (1u << 6) | (1u << 4)};
	gsd_segment s[NMIX];
	mix_init(s);
	rng_state = 0x5eed;
	size_t patterns = 0;
	for (int used = 0; used <= GS_SEGPREF_SLOTS; used++) {
		for (int round = 0; round < 300; round++) {
			gs_segpref p = {{0}, {0}};
			for (int k = 0; k < GS_SEGPREF_SLOTS; k++) {
				/* Slots past the end may hold anything: they must not count. */
				bool live = k < used;
				p.segment[k] = live ? pool[rnd() % sizeof(pool)]
				                    : (k == used ? 0 : (uint8_t)(rnd() % 32));
				p.direction[k] = (uint8_t)(rnd() & 1);
			}
			/* Every direction bit pattern of the live slots, in turn. */
			uint32_t dirs = (uint32_t)round % (1u << used);
			for (int k = 0; k < used; k++)
				p.direction[k] = (uint8_t)((dirs >> k) & 1);
			for (size_t si = 0; si < sizeof(sets) / sizeof(sets[0]); si++) {
				expect_order(s, sets[si], &p, "random pattern");
				patterns++;

				gsd_place_step want[GSD_PLACE_STEPS_MAX];
				size_t nw = model_order(sets[si], &p, want);
				uint32_t full = (uint32_t)rnd() & ((1u << NMIX) - 1);
				for (int i = 0; i < NMIX; i++)
					if (full & (1u << i))
						assert_int_equal(
						        gsd_heap_alloc_at(&s[i].heap, 0, SEGSIZE),
						        0);
				int expect = -1;
				bool top_down = false;
				for (size_t k = 0; k < nw && expect < 0; k++)
					if (!(full & (1u << want[k].index))) {
						expect = (int)want[k].index;
						top_down = want[k].top_down;
					}
				uint64_t off = UINT64_MAX;
				int got = gsd_place(s, NMIX, sets[si], gs_segpref_encode(&p), 1000,
				                    &off);
				assert_int_equal(got, expect);
				if (got >= 0) {
					assert_int_equal(off, top_down ? SEGSIZE - 1024 : 0);
					gsd_heap_free(&s[got].heap, off, 1000);
				}
				for (int i = 0; i < NMIX; i++)
					if (full & (1u << i))
						gsd_heap_free(&s[i].heap, 0, SEGSIZE);
			}
		}
	}
	assert_true(patterns >= 6 * 300 * 4);
	for (int i = 0; i < NMIX; i++) {
		assert_int_equal(s[i].heap.used, 0);
		assert_int_equal(gsd_heap_check(&s[i].heap), 0);
	}
	mix_fini(s);
}

/* Direction on a heap that already holds allocations: top-down takes the high end of the highest
 * best-fitting extent, bottom-up the low end of the lowest, both in the preferred segment. */
static void test_place_direction_on_used_heap(void **state)
{
	(void)state;
	gsd_segment s[NMIX];
	mix_init(s);
	gsd_segment *m = &s[mix_index(31)];
	/* Used: [0, 8K), [16K, 40K), [48K, 64K): two free 8 KiB holes, at 8K and at 40K. */
	assert_int_equal(gsd_heap_alloc_at(&m->heap, 0, 8 * KIB), 0);
	assert_int_equal(gsd_heap_alloc_at(&m->heap, 16 * KIB, 24 * KIB), 0);
	assert_int_equal(gsd_heap_alloc_at(&m->heap, 48 * KIB, 16 * KIB), 0);
	gs_segpref up = {{31}, {0}}, down = {{31}, {1}};
	uint64_t a = 0, b = 0, c = 0;
	/* Equal holes: top-down takes the high end of the higher one ... */
	assert_int_equal(gsd_place(s, NMIX, 0, gs_segpref_encode(&down), 3000, &b), mix_index(31));
	assert_int_equal(b, 48 * KIB - 3072);
	gsd_heap_free(&m->heap, b, 3000);
	/* ... bottom-up the low end of the lower one. */
	assert_int_equal(gsd_place(s, NMIX, 0, gs_segpref_encode(&up), 3000, &a), mix_index(31));
	assert_int_equal(a, 8 * KIB);
	/* 9 KiB fits no hole: the fallback, memory 9, bottom-up (the direction belongs to the
	 * preferred slot). */
	assert_int_equal(gsd_place(s, NMIX, 0, gs_segpref_encode(&down), 9 * KIB, &c),
	                 mix_index(9));
	assert_int_equal(c, 0);
	assert_int_equal(gsd_heap_check(&m->heap), 0);
	mix_fini(s);
}

/* ---- compaction ---- */

/*
 * Applies a plan to positions: each move must name the block where it is, go down, land on
 * space no other block holds and keep immovable blocks still. Returns the largest free extent
 * afterwards.
 */
static uint64_t apply_plan(const gsd_live_block *b, size_t n, uint64_t heap_size,
                           const gsd_move *mv, size_t nmv, uint64_t *pos)
{
	for (size_t i = 0; i < n; i++)
		pos[i] = b[i].offset;
	for (size_t k = 0; k < nmv; k++) {
		size_t i = mv[k].block;
		assert_true(i < n);
		assert_true(b[i].movable);
		assert_int_equal(mv[k].from, pos[i]);
		assert_int_equal(mv[k].size, al(b[i].size));
		assert_true(mv[k].to < mv[k].from);
		assert_int_equal(mv[k].to % GSD_HEAP_ALIGN, 0);
		for (size_t j = 0; j < n; j++)
			if (j != i)
				assert_true(mv[k].to + mv[k].size <= pos[j] ||
				            pos[j] + al(b[j].size) <= mv[k].to);
		pos[i] = mv[k].to;
	}
	/* Largest gap between the final positions (order may have changed only within runs that
	 * slid together, so sort by position). */
	uint64_t largest = 0;
	for (uint64_t cursor = 0;;) {
		uint64_t next = heap_size, next_end = heap_size;
		for (size_t j = 0; j < n; j++)
			if (pos[j] >= cursor && pos[j] < next) {
				next = pos[j];
				next_end = pos[j] + al(b[j].size);
			}
		if (next - cursor > largest)
			largest = next - cursor;
		if (next == heap_size)
			break;
		cursor = next_end;
	}
	return largest;
}

/* Live blocks left by random churn in a heap, a fraction of them pinned. */
static size_t churn_blocks(gsd_heap *h, gsd_live_block *b, size_t max, int steps, int pinned_pct)
{
	size_t n = 0;
	for (int s = 0; s < steps; s++) {
		if (n < max && (n == 0 || rnd() % 100 < 60)) {
			uint64_t off, sz = 1 + rnd() % (32 * KIB);
			if (gsd_heap_alloc(h, sz, rnd() & 1, &off) == 0)
				b[n++] = (gsd_live_block){off, sz, true};
		} else {
			size_t i = rnd() % n;
			gsd_heap_free(h, b[i].offset, b[i].size);
			b[i] = b[--n];
		}
	}
	for (size_t i = 0; i < n; i++)
		b[i].movable = (int)(rnd() % 100) >= pinned_pct;
	gsd_live_blocks_sort(b, n);
	return n;
}

static void test_compact_by_hand(void **state)
{
	(void)state;
	/* 16 KiB: [A 1K @1K] [B 2K @4K movable] [P 1K @8K pinned] [C 512 @12K] */
	const gsd_live_block b[] = {
	        {1 * KIB, 1 * KIB, true},
	        {4 * KIB, 2 * KIB, true},
	        {8 * KIB, 1 * KIB, false},
	        {12 * KIB, 512, true},
	};
	gsd_move mv[8];
	size_t n = 99;
	uint64_t largest = 0;
	assert_int_equal(gsd_heap_compact_plan(b, 4, 16 * KIB, 0, mv, 8, &n, &largest), 0);
	assert_int_equal(n, 3);
	assert_int_equal(mv[0].block, 0);
	assert_int_equal(mv[0].to, 0);
	assert_int_equal(mv[1].block, 1);
	assert_int_equal(mv[1].to, 1 * KIB);
	assert_int_equal(mv[2].block, 3);
	assert_int_equal(mv[2].to, 9 * KIB);
	/* Below P: 8K - 3K = 5K free; above: 16K - 9.5K = 6.5K. */
	assert_int_equal(largest, 6 * KIB + 512);

	/* want 5 KiB: no gap is that big (the largest is 3.5K above C). Sliding A and B (3K of
	 * moves) would make 5K below P; sliding C (512 bytes) to 9K makes 9.5K..16K = 6.5K. */
	assert_int_equal(gsd_heap_compact_plan(b, 4, 16 * KIB, 5 * KIB, mv, 8, &n, &largest), 0);
	assert_int_equal(n, 1);
	assert_int_equal(mv[0].block, 3);
	assert_int_equal(mv[0].to, 9 * KIB);
	assert_int_equal(largest, 6 * KIB + 512);
	/* want 4 KiB: sliding B down to 2K would free 4K..8K too, but moving C costs less. */
	assert_int_equal(gsd_heap_compact_plan(b, 4, 16 * KIB, 4 * KIB, mv, 8, &n, &largest), 0);
	assert_int_equal(n, 1);
	assert_int_equal(mv[0].block, 3);
	/* want 3 KiB: the gap above C is big enough: no moves. */
	assert_int_equal(gsd_heap_compact_plan(b, 4, 16 * KIB, 3 * KIB, mv, 8, &n, &largest), 0);
	assert_int_equal(n, 0);
	assert_int_equal(largest, 3 * KIB + 512);
	/* want 7 KiB: no region holds that much free space. */
	assert_int_equal(gsd_heap_compact_plan(b, 4, 16 * KIB, 7 * KIB, mv, 8, &n, &largest),
	                 -ENOSPC);
	assert_int_equal(n, 0);
	/* Too small a move array: says how many are needed. */
	assert_int_equal(gsd_heap_compact_plan(b, 4, 16 * KIB, 0, mv, 2, &n, NULL), -ENOBUFS);
	assert_int_equal(n, 3);
}

static void test_compact_rejects_bad_input(void **state)
{
	(void)state;
	gsd_move mv[4];
	size_t n;
	const gsd_live_block unsorted[] = {{4096, 256, true}, {0, 256, true}};
	const gsd_live_block overlap[] = {{0, 300, true}, {256, 256, true}}; /* 300 rounds to 512 */
	const gsd_live_block misaligned[] = {{100, 256, true}};
	const gsd_live_block outside[] = {{4096, 256, true}};
	const gsd_live_block empty[] = {{0, 0, true}};
	assert_int_equal(gsd_heap_compact_plan(unsorted, 2, 8192, 0, mv, 4, &n, NULL), -EINVAL);
	assert_int_equal(gsd_heap_compact_plan(overlap, 2, 8192, 0, mv, 4, &n, NULL), -EINVAL);
	assert_int_equal(gsd_heap_compact_plan(misaligned, 1, 8192, 0, mv, 4, &n, NULL), -EINVAL);
	assert_int_equal(gsd_heap_compact_plan(outside, 1, 4096, 0, mv, 4, &n, NULL), -EINVAL);
	assert_int_equal(gsd_heap_compact_plan(empty, 1, 4096, 0, mv, 4, &n, NULL), -EINVAL);
	assert_int_equal(gsd_heap_compact_plan(NULL, 0, 4096, 8192, mv, 4, &n, NULL), -EINVAL);
	uint64_t largest;
	assert_int_equal(gsd_heap_compact_plan(NULL, 0, 4096, 0, mv, 4, &n, &largest), 0);
	assert_int_equal(largest, 4096);
}

/* Full compaction of random churn: applied to the model, every region ends as one extent;
 * applied to the real heap (free + alloc_at per move), the heap agrees. */
static void test_compact_full_random(void **state)
{
	(void)state;
	static gsd_live_block b[4096];
	static gsd_move mv[4096];
	static uint64_t pos[4096];
	rng_state = 7;
	for (int round = 0; round < 40; round++) {
		gsd_heap h;
		const uint64_t hs = 16 * MIB;
		assert_int_equal(gsd_heap_init(&h, hs), 0);
		int pinned = round % 4 == 0 ? 0 : (int)(rnd() % 5);
		size_t n = churn_blocks(&h, b, 1500, 4000, pinned);
		size_t nmv = 0;
		uint64_t largest = 0;
		assert_int_equal(gsd_heap_compact_plan(b, n, hs, 0, mv, 4096, &nmv, &largest), 0);
		assert_int_equal(apply_plan(b, n, hs, mv, nmv, pos), largest);
		for (size_t k = 0; k < nmv; k++) {
			gsd_heap_free(&h, mv[k].from, mv[k].size);
			assert_int_equal(gsd_heap_alloc_at(&h, mv[k].to, mv[k].size), 0);
		}
		assert_int_equal(gsd_heap_check(&h), 0);
		assert_int_equal(gsd_heap_largest_free(&h), largest);
		if (pinned == 0) /* nothing pinned: all free space is one extent */
			assert_int_equal(largest, hs - h.used);
		gsd_heap_fini(&h);
	}
}

/* Brute force over every run of consecutive movable blocks: the cheapest that makes a hole of
 * want bytes. */
static uint64_t brute_cost(const gsd_live_block *b, size_t n, uint64_t hs, uint64_t want,
                           bool *found)
{
	uint64_t best = UINT64_MAX;
	*found = false;
	for (size_t k = 0; k <= n; k++) {
		uint64_t start = k == 0 ? 0 : b[k - 1].offset + al(b[k - 1].size);
		uint64_t cost = 0;
		for (size_t j = k;; j++) {
			/* Blocks k..j-1 slide to start; the hole runs to block j (or the end). */
			uint64_t end = j == n ? hs : b[j].offset;
			if (end - start - cost >= want) {
				*found = true;
				if (cost < best)
					best = cost;
				break;
			}
			if (j == n || !b[j].movable)
				break;
			cost += al(b[j].size);
		}
	}
	return best;
}

static void test_compact_window_is_cheapest(void **state)
{
	(void)state;
	gsd_live_block b[12];
	gsd_move mv[16];
	uint64_t pos[12];
	rng_state = 99;
	for (int round = 0; round < 3000; round++) {
		const uint64_t hs = 64 * KIB;
		size_t n = 1 + rnd() % 12;
		uint64_t cursor = 0;
		size_t m = 0;
		for (size_t i = 0; i < n; i++) {
			cursor += (rnd() % 5) * 512;
			uint64_t sz = 1 + rnd() % 4096;
			if (cursor + al(sz) > hs)
				break;
			b[m++] = (gsd_live_block){cursor, sz, rnd() % 4 != 0};
			cursor += al(sz);
		}
		uint64_t want = (1 + rnd() % 64) * 512;
		bool found;
		uint64_t best = brute_cost(b, m, hs, want, &found);
		size_t nmv;
		uint64_t largest;
		int rc = gsd_heap_compact_plan(b, m, hs, want, mv, 16, &nmv, &largest);
		if (!found) {
			assert_int_equal(rc, -ENOSPC);
			continue;
		}
		assert_int_equal(rc, 0);
		uint64_t cost = 0;
		for (size_t k = 0; k < nmv; k++)
			cost += mv[k].size;
		assert_int_equal(cost, best);
		uint64_t got = apply_plan(b, m, hs, mv, nmv, pos);
		assert_true(got >= al(want));
		assert_int_equal(got, largest);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_heap_best_fit_table),
	        cmocka_unit_test(test_heap_merges_both_sides),
	        cmocka_unit_test(test_heap_alloc_at),
	        cmocka_unit_test(test_heap_unaligned_size),
	        cmocka_unit_test(test_heap_matches_model),
	        cmocka_unit_test(test_heap_many_live),
	        cmocka_unit_test(test_place_every_slot_and_direction),
	        cmocka_unit_test(test_place_fallback_table),
	        cmocka_unit_test(test_place_order_repeated_id),
	        cmocka_unit_test(test_place_order_rules_table),
	        cmocka_unit_test(test_place_every_pattern_against_model),
	        cmocka_unit_test(test_place_direction_on_used_heap),
	        cmocka_unit_test(test_compact_by_hand),
	        cmocka_unit_test(test_compact_rejects_bad_input),
	        cmocka_unit_test(test_compact_full_random),
	        cmocka_unit_test(test_compact_window_is_cheapest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
