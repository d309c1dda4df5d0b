/*
 * The paging TRANSFER command on the engine: run through gsd_engine_exec_cmd against real segment
 * memory, a plain transfer copies the bytes; Swizzle places every byte where the formula of
 * swizzle.h says (checked against a reference written here from that formula, not with the
 * library's own mapping) and Unswizzle puts it back; a transfer cut into band-aligned pieces
 * (gsd_swizzle_chunk + gsd_transfer_split, the daemon's recipe) converts to the same bytes as one
 * whole transfer; reads outside the allocation list, writes to read-only allocations and
 * overlapping ranges of a converting transfer fault with a reason and touch nothing, while a
 * plain overlapping transfer moves like memmove (compaction slides allocations in place). On the
 * emulated engine's virtual clock a TRANSFER costs 100 ns plus 1 ns per 16 bytes (rounded up),
 * deterministically.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "isa.h"
#include "vidmm/paging_plan.h"
#include "engine/swizzle.h"
#include "wddm.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)

/* Two 8 MiB segments, ids 1 and 2, page-aligned like segment memory. Seg 1 holds a read-only
 * source half and a writable scratch half; seg 2 is writable, split in halves A and B. */
#define SEG_SIZE  (8 * MIB)
#define HALF      (4 * MIB)
#define GPU(s, o) (((uint64_t)(s) << GS_ADDR_SEGMENT_SHIFT) | (uint64_t)(o))
#define SRC       GPU(1, 0)
#define SCRATCH   GPU(1, HALF)
#define DST_A     GPU(2, 0)
#define DST_B     GPU(2, HALF)

static gsd_memory mem;
static const gsd_range ranges[] = {
        {SRC, HALF, false},
        {SCRATCH, HALF, true},
        {DST_A, HALF, true},
        {DST_B, HALF, true},
};
#define NRANGES (sizeof(ranges) / sizeof(ranges[0]))

static int group_setup(void **state)
{
	(void)state;
	for (uint32_t id = 1; id <= 2; id++) {
		mem.seg[id].id = id;
		mem.seg[id].size = SEG_SIZE;
		mem.seg[id].base = aligned_alloc(4096, SEG_SIZE);
		if (!mem.seg[id].base)
			return -1;
		memset(mem.seg[id].base, 0, SEG_SIZE);
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	for (uint32_t id = 1; id <= 2; id++)
		free(mem.seg[id].base);
	memset(&mem, 0, sizeof(mem));
	return 0;
}

static uint8_t *host(uint64_t addr)
{
	return mem.seg[gs_addr_segment(addr)].base + gs_addr_offset(addr);
}

static void fill_random(uint8_t *p, uint64_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 12345u;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)(x >> 3);
	}
}

static gs_isa_cmd transfer(uint64_t dst, uint64_t src, uint64_t size, uint32_t flags,
                           uint32_t pitch)
{
	return (gs_isa_cmd){.op = GS_OP_TRANSFER,
	                    .dst = dst,
	                    .src = src,
	                    .size = size,
	                    .transfer_flags = flags,
	                    .pitch = pitch};
}

/* Runs one command as the engine does: through the wire encoding and the strict decoder
 * first, then gsd_engine_exec_cmd with the packet's ranges. */
static int exec_ranges(gs_isa_cmd c, const gsd_range *r, size_t nr, char *detail, size_t cap)
{
	uint8_t buf[64];
	size_t n = gs_isa_encode(&c, buf, sizeof(buf)), pos = 0;
	assert_int_equal(n, 40);
	gs_isa_cmd d;
	assert_int_equal(gs_isa_decode(buf, n, &pos, &d), GS_ISA_OK);
	gsd_exec x = {.packet = 1, .ranges = r, .nranges = nr};
	detail[0] = '\0';
	return gsd_engine_exec_cmd(&mem, &x, &d, detail, cap);
}

static int exec(gs_isa_cmd c, char *detail, size_t cap)
{
	return exec_ranges(c, ranges, NRANGES, detail, cap);
}

static void exec_ok(gs_isa_cmd c)
{
	char detail[96];
	if (exec(c, detail, sizeof(detail)) != 0)
		fail_msg("TRANSFER of %llu bytes failed: %s", (unsigned long long)c.size, detail);
}

/* ---- the reference layout, from the formula in swizzle.h ---- */

/* T for linear offset L of a surface of size bytes at this pitch: whole bands of 64 rows are
 * tiled, the tail is not. */
static uint64_t ref_tiled_offset(uint64_t L, uint64_t size, uint32_t pitch)
{
	uint64_t band = 64ull * pitch;
	if (L >= size - size % band)
		return L;
	uint64_t y = L / pitch, x = L % pitch;
	return (y / 64) * 64 * pitch + (x / 64) * 4096 + (y % 64) * 64 + x % 64;
}

static void ref_swizzle(uint8_t *tiled, const uint8_t *linear, uint64_t size, uint32_t pitch)
{
	for (uint64_t L = 0; L < size; L++)
		tiled[ref_tiled_offset(L, size, pitch)] = linear[L];
}

static void ref_unswizzle(uint8_t *linear, const uint8_t *tiled, uint64_t size, uint32_t pitch)
{
	for (uint64_t L = 0; L < size; L++)
		linear[L] = tiled[ref_tiled_offset(L, size, pitch)];
}

/* The reference itself, on the worked example of swizzle.h (pitch 128, size 8202). */
static void test_reference_matches_worked_example(void **state)
{
	(void)state;
	const struct {
		uint64_t l, t;
	} ex[] = {{0, 0},    {63, 63},     {64, 4096},   {127, 4159},
	          {128, 64}, {8191, 8191}, {8192, 8192}, {8201, 8201}};
	for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++)
		assert_int_equal(ref_tiled_offset(ex[i].l, 8202, 128), ex[i].t);
}

/* ---- copies ---- */

static void test_plain_copy(void **state)
{
	(void)state;
	const uint64_t sizes[] = {1, 15, 16, 17, 4096 + 3, 64 * KIB, MIB + 5, HALF - 1};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t n = sizes[i];
		fill_random(host(SRC), n, (uint32_t)i + 1);
		memset(host(DST_A), 0xee, HALF);
		exec_ok(transfer(DST_A, SRC, n, 0, 0));
		assert_memory_equal(host(DST_A), host(SRC), n);
		if (n < HALF)
			assert_int_equal(host(DST_A)[n], 0xee);
	}
	/* The flags that do not convert change nothing about the bytes. */
	fill_random(host(SRC) + 100, 5000, 77);
	memset(host(DST_B), 0, 8192);
	exec_ok(transfer(DST_B + 3, SRC + 100, 5000,
	                 GS_TRANSFER_ALLOCATION_IS_IDLE | GS_TRANSFER_START | GS_TRANSFER_END, 0));
	assert_memory_equal(host(DST_B) + 3, host(SRC) + 100, 5000);
	assert_int_equal(host(DST_B)[2], 0);
	assert_int_equal(host(DST_B)[5003], 0);
	/* Adjacent ranges in one allocation do not overlap. */
	fill_random(host(SCRATCH), 4096, 5);
	exec_ok(transfer(SCRATCH + 4096, SCRATCH, 4096, 0, 0));
	assert_memory_equal(host(SCRATCH) + 4096, host(SCRATCH), 4096);
	exec_ok(transfer(SCRATCH, SCRATCH + 4096, 4096, 0, 0));
	/* An empty transfer touches nothing, so nothing is checked. */
	char detail[96];
	assert_int_equal(exec(transfer(GPU(9, 0), GPU(9, 0), 0, 0, 0), detail, sizeof(detail)), 0);
}

/* Pitches with one and several tiles per band, powers of two or not; sizes below one band, on
 * and around band edges, with tails of whole rows and of a partial row. */
static const uint32_t pitches[] = {64, 128, 320, 1024, 4096, 6400};
#define NPITCHES (sizeof(pitches) / sizeof(pitches[0]))

static size_t sizes_for(uint32_t pitch, uint64_t *out)
{
	const uint64_t band = 64ull * pitch;
	const uint64_t s[] = {1,
	                      pitch + 7,
	                      band - 1,
	                      band,
	                      band + 1,
	                      2 * band + 3 * pitch,
	                      3 * band + 5 * pitch + 17,
	                      5 * band + 3 * pitch + 1};
	size_t n = 0;
	for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
		if (s[i] <= HALF - 64)
			out[n++] = s[i];
	return n;
}

/* Swizzle into seg 2 (at a cache-line-aligned offset and at an odd one: the large conversions
 * stream their stores only when aligned) against the reference, then Unswizzle back into the
 * scratch half of seg 1. */
static void test_swizzle_and_unswizzle_match_reference(void **state)
{
	(void)state;
	uint8_t *want = malloc(HALF);
	assert_non_null(want);
	for (size_t p = 0; p < NPITCHES; p++) {
		uint64_t sizes[8];
		size_t ns = sizes_for(pitches[p], sizes);
		for (size_t si = 0; si < ns; si++) {
			const uint64_t size = sizes[si];
			const uint64_t shift = si % 2 ? 8 : 0;
			const uint32_t pitch = pitches[p];
			fill_random(host(SRC), size, (uint32_t)(p * 31 + si));
			memset(host(DST_A), 0xee, size + 64);
			exec_ok(transfer(DST_A + shift, SRC, size, GS_TRANSFER_SWIZZLE, pitch));
			ref_swizzle(want, host(SRC), size, pitch);
			if (memcmp(host(DST_A) + shift, want, size) != 0)
				fail_msg("Swizzle pitch %u size %llu differs from the formula",
				         pitch, (unsigned long long)size);
			assert_int_equal(host(DST_A)[shift + size], 0xee);
			if (shift)
				assert_int_equal(host(DST_A)[shift - 1], 0xee);

			/* Unswizzle inverts it. */
			memset(host(SCRATCH), 0x11, size + 1);
			exec_ok(transfer(SCRATCH, DST_A + shift, size, GS_TRANSFER_UNSWIZZLE,
			                 pitch));
			if (memcmp(host(SCRATCH), host(SRC), size) != 0)
				fail_msg("Unswizzle pitch %u size %llu does not restore the source",
				         pitch, (unsigned long long)size);
			assert_int_equal(host(SCRATCH)[size], 0x11);

			/* And follows the formula on bytes that were never swizzled. */
			fill_random(host(DST_B), size, (uint32_t)(p * 131 + si + 7));
			exec_ok(transfer(SCRATCH, DST_B, size, GS_TRANSFER_UNSWIZZLE | 0x4, pitch));
			ref_unswizzle(want, host(DST_B), size, pitch);
			if (memcmp(host(SCRATCH), want, size) != 0)
				fail_msg("Unswizzle pitch %u size %llu differs from the formula",
				         pitch, (unsigned long long)size);
		}
	}
	free(want);
}

/*
 * Cuts a transfer as the daemon does (a band-aligned chunk, pieces with TransferStart/End),
 * encodes the pieces into one DMA buffer, validates it and runs each decoded command.
 */
static void run_split(uint64_t dst, uint64_t src, uint64_t size, uint64_t chunk, uint32_t flags,
                      uint32_t pitch, size_t want_pieces)
{
	gsd_subtransfer pieces[64];
	int64_t n = gsd_transfer_split(size, chunk, flags, pieces, 64);
	assert_int_equal(n, want_pieces);
	static uint8_t dma[64 * 40];
	size_t len = 0;
	for (int64_t i = 0; i < n; i++) {
		assert_int_equal(pieces[i].offset % chunk, 0);
		gs_isa_cmd c = transfer(dst + pieces[i].offset, src + pieces[i].offset,
		                        pieces[i].size, pieces[i].flags, pitch);
		len += gs_isa_encode(&c, dma + len, sizeof(dma) - len);
	}
	size_t ncmds = 0, err_at = 0;
	assert_int_equal(gs_isa_validate(dma, len, &ncmds, &err_at), GS_ISA_OK);
	assert_int_equal(ncmds, (size_t)n);
	gsd_exec x = {
	        .packet = 1, .dma = dma, .dma_len = len, .ranges = ranges, .nranges = NRANGES};
	size_t pos = 0;
	gs_isa_cmd c;
	char detail[96];
	for (int64_t i = 0; i < n; i++) {
		assert_int_equal(gs_isa_decode(dma, len, &pos, &c), GS_ISA_OK);
		assert_int_equal(c.transfer_flags & (GS_TRANSFER_START | GS_TRANSFER_END),
		                 (i == 0 ? GS_TRANSFER_START : 0) |
		                         (i == n - 1 ? GS_TRANSFER_END : 0));
		if (gsd_engine_exec_cmd(&mem, &x, &c, detail, sizeof(detail)) != 0)
			fail_msg("piece %lld: %s", (long long)i, detail);
	}
	assert_int_equal(gs_isa_decode(dma, len, &pos, &c), GS_ISA_END);
}

static void test_split_converts_like_whole(void **state)
{
	(void)state;
	const struct {
		uint32_t pitch;
		uint64_t size, ask; /* ask: the chunk the caller would like */
		size_t pieces;
	} cases[] = {
	        /* 5 bands and a tail, 150 KiB asked, 128 KiB (two bands) used */
	        {GSD_SWIZZLE_PITCH_DEFAULT, 5 * 64 * KIB + 3000, 150 * KIB, 3},
	        /* the daemon's 1 MiB sub-transfers: 4 bands of 256 KiB each, plus a tail */
	        {4096, 3 * MIB + 5 * 4096 + 7, MIB, 4},
	        /* a band larger than the chunk asked for: one band per piece */
	        {6400, 3 * 64 * 6400 + 100, 64 * KIB, 4},
	        /* fits in one piece: Start and End together */
	        {1024, 40 * KIB, MIB, 1},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const uint32_t pitch = cases[k].pitch;
		const uint64_t size = cases[k].size;
		const uint64_t chunk = gsd_swizzle_chunk(cases[k].ask, pitch);
		assert_int_equal(chunk % gsd_swizzle_band(pitch), 0);
		fill_random(host(SRC), size, (uint32_t)k + 40);
		exec_ok(transfer(DST_A, SRC, size, GS_TRANSFER_SWIZZLE, pitch));
		memset(host(DST_B), 0, size);
		run_split(DST_B, SRC, size, chunk, GS_TRANSFER_SWIZZLE, pitch, cases[k].pieces);
		assert_memory_equal(host(DST_B), host(DST_A), size);
		/* Unswizzle in pieces, with AllocationIsIdle as eviction sets it. */
		memset(host(SCRATCH), 0, size);
		run_split(SCRATCH, DST_B, size, chunk,
		          GS_TRANSFER_UNSWIZZLE | GS_TRANSFER_ALLOCATION_IS_IDLE, pitch,
		          cases[k].pieces);
		assert_memory_equal(host(SCRATCH), host(SRC), size);
	}
	/* Why the chunk must be band-aligned: 100 KiB pieces at pitch 1024 cut band 1 in two,
	 * and each piece tiles only its own whole bands. */
	const uint64_t size = 4 * 64 * KIB;
	fill_random(host(SRC), size, 99);
	exec_ok(transfer(DST_A, SRC, size, GS_TRANSFER_SWIZZLE, 1024));
	run_split(DST_B, SRC, size, 100 * KIB, GS_TRANSFER_SWIZZLE, 1024, 3);
	assert_memory_not_equal(host(DST_B), host(DST_A), size);
}

/* ---- faults ---- */

static void test_faults(void **state)
{
	(void)state;
	const uint32_t swz = GS_TRANSFER_SWIZZLE;
	const struct {
		gs_isa_cmd c;
		const char *why, *also;
	} cases[] = {
	        /* a read running past the read-only source allocation */
	        {transfer(DST_A, SRC + HALF - 16, 32, 0, 0), "page fault: read",
	         "outside allocation"},
	        /* a read from nowhere in the list */
	        {transfer(DST_A, GPU(2, SEG_SIZE - 8), 16, 0, 0), "read of 16 bytes",
	         "outside allocation"},
	        {transfer(DST_A, GPU(3, 0), 16, 0, 0), "page fault: read", "outside allocation"},
	        /* writes to the read-only allocation, plain and converting */
	        {transfer(SRC, SCRATCH, 64, 0, 0), "page fault: write", "read-only"},
	        {transfer(SRC + 4096, DST_A, 64 * 64, swz, 64), "write", "read-only"},
	        /* a write past the end of its allocation (into the next one) */
	        {transfer(DST_A + HALF - 8, SRC, 16, 0, 0), "page fault: write", "outside"},
	        /* a size that would wrap a 64-bit sum */
	        {transfer(DST_A, SRC, UINT64_MAX, 0, 0), "page fault", "outside allocation"},
	        /* overlap while converting, either way round */
	        {transfer(SCRATCH + 8192, SCRATCH, 3 * 64 * 64, swz, 64), "overlap", "TRANSFER"},
	        {transfer(SCRATCH, SCRATCH + 4096, 2 * 4096, GS_TRANSFER_UNSWIZZLE, 64), "overlap",
	         "TRANSFER"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(host(SCRATCH), 0x5a, 64 * KIB);
		memset(host(DST_A), 0x5a, 64 * KIB);
		memset(host(DST_A) + HALF - 64 * KIB, 0x5a, 64 * KIB);
		memset(host(SRC), 0xa5, 64 * KIB);
		char detail[96];
		assert_int_equal(exec(cases[i].c, detail, sizeof(detail)), -1);
		if (!strstr(detail, cases[i].why) || !strstr(detail, cases[i].also))
			fail_msg("case %zu: detail \"%s\", expected \"%s\" and \"%s\"", i, detail,
			         cases[i].why, cases[i].also);
		/* Nothing was written anywhere. */
		for (size_t b = 0; b < 64 * KIB; b++) {
			if (host(SCRATCH)[b] != 0x5a || host(DST_A)[b] != 0x5a ||
			    host(DST_A)[HALF - 64 * KIB + b] != 0x5a || host(SRC)[b] != 0xa5)
				fail_msg("case %zu: byte %zu written by a faulting TRANSFER", i, b);
		}
	}
	/* A list entry the segment table cannot back. */
	const gsd_range bad[] = {{GPU(1, SEG_SIZE - 16), 4096, false}, {DST_A, 4096, true}};
	char detail[96];
	assert_int_equal(
	        exec_ranges(transfer(DST_A, GPU(1, SEG_SIZE - 16), 32, 0, 0), bad, 2, detail, 96),
	        -1);
	assert_non_null(strstr(detail, "outside segment 1"));
}

/* A plain TRANSFER whose ranges overlap moves like memmove, down and up (compaction). */
static void test_overlap_plain(void **state)
{
	(void)state;
	uint8_t want[8192];
	for (int dir = 0; dir < 2; dir++) {
		fill_random(host(SCRATCH), 16 * KIB, 7 + dir);
		uint64_t from = dir ? SCRATCH : SCRATCH + 4096, to = dir ? SCRATCH + 4095 : SCRATCH;
		memmove(want, host(from), sizeof(want));
		exec_ok(transfer(to, from, sizeof(want), 0, 0));
		assert_memory_equal(host(to), want, sizeof(want));
	}
	/* Onto itself: nothing changes. */
	fill_random(host(SCRATCH), 4096, 9);
	memcpy(want, host(SCRATCH), 4096);
	exec_ok(transfer(SCRATCH, SCRATCH, 4096, 0, 0));
	assert_memory_equal(host(SCRATCH), want, 4096);
}

/* ---- engine time on the virtual clock ---- */

#define MAX_IRQS 64

typedef struct recorder {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	gsd_irq irqs[MAX_IRQS];
	size_t n;
} recorder;

static void on_irq(void *arg, const gsd_irq *irq)
{
	recorder *r = arg;
	pthread_mutex_lock(&r->lock);
	if (r->n < MAX_IRQS)
		r->irqs[r->n++] = *irq;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static bool is_final(gsd_irq_kind k)
{
	return k != GSD_IRQ_STARTED && k != GSD_IRQ_FENCE_SIGNAL;
}

/* Submits x and waits (bounded) for its final interrupt. */
static gsd_irq run_packet(gsd_engine *e, recorder *r, gsd_exec *x)
{
	assert_int_equal(gsd_engine_emu.submit(e, x), 0);
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 20;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		for (size_t i = 0; i < r->n; i++) {
			if (r->irqs[i].exec == x && is_final(r->irqs[i].kind)) {
				gsd_irq irq = r->irqs[i];
				r->n = 0;
				pthread_mutex_unlock(&r->lock);
				return irq;
			}
		}
		if (pthread_cond_timedwait(&r->cond, &r->lock, &deadline) != 0) {
			pthread_mutex_unlock(&r->lock);
			fail_msg("no final interrupt within 20 s");
		}
	}
}

typedef struct packet_buf {
	uint8_t buf[1024];
	size_t len;
} packet_buf;

static size_t emit(packet_buf *p, gs_isa_cmd c)
{
	size_t at = p->len;
	size_t n = gs_isa_encode(&c, p->buf + p->len, sizeof(p->buf) - p->len);
	assert_true(n > 0);
	p->len += n;
	return at;
}

static gsd_exec packet(const packet_buf *p)
{
	return (gsd_exec){.packet = 1,
	                  .fence = 1,
	                  .dma = p->buf,
	                  .dma_len = p->len,
	                  .ranges = ranges,
	                  .nranges = NRANGES};
}

static void test_virtual_engine_time(void **state)
{
	(void)state;
	recorder r = {.n = 0};
	pthread_mutex_init(&r.lock, NULL);
	pthread_cond_init(&r.cond, NULL);
	gsd_engine_config cfg = {.node = 1,
	                         .name = "transfer",
	                         .memory = &mem,
	                         .virtual_clock = true,
	                         .irq = on_irq,
	                         .irq_arg = &r};
	gsd_engine *e = NULL;
	assert_int_equal(gsd_engine_emu.create(&cfg, &e), 0);

	/* [0] TRANSFER 4096 (256 ns)  [40] Swizzle 1000 (63)  [80] TRANSFER 17 (2)
	 * [120] TRANSFER 16 (1)  [160] FILL 4096 (none)  [192] COPY 4096 (none)  [224] end */
	packet_buf p = {.len = 0};
	fill_random(host(SRC), 8192, 3);
	assert_int_equal(emit(&p, transfer(DST_A, SRC, 4096, 0, 0)), 0);
	assert_int_equal(emit(&p, transfer(DST_B, SRC, 1000, GS_TRANSFER_SWIZZLE, 64)), 40);
	assert_int_equal(emit(&p, transfer(SCRATCH, SRC + 4096, 17, 0, 0)), 80);
	assert_int_equal(emit(&p, transfer(SCRATCH + 64, SRC, 16, 0, 0)), 120);
	assert_int_equal(emit(&p, (gs_isa_cmd){.op = GS_OP_FILL,
	                                       .dst = DST_A + 8192,
	                                       .size = 4096,
	                                       .pattern = 0x01020304u}),
	                 160);
	assert_int_equal(
	        emit(&p,
	             (gs_isa_cmd){.op = GS_OP_COPY, .dst = DST_B + 8192, .src = SRC, .size = 4096}),
	        192);
	const uint64_t whole = 6 * 100 + 256 + 63 + 2 + 1;

	for (int round = 0; round < 2; round++) { /* the same every time */
		gsd_exec x = packet(&p);
		gsd_irq irq = run_packet(e, &r, &x);
		assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
		assert_int_equal(irq.engine_ns, whole);
	}
	assert_memory_equal(host(DST_A), host(SRC), 4096);
	assert_memory_equal(host(SCRATCH), host(SRC) + 4096, 17);

	/* A budget is checked at the boundary after the TRANSFER that reached it, and the time
	 * of the resumed rest adds up to the whole. */
	gsd_exec x = packet(&p);
	x.budget_ns = 300;
	gsd_irq irq = run_packet(e, &r, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_reason, GSD_STOP_BUDGET);
	assert_int_equal(irq.stop_offset, 40);
	assert_int_equal(irq.engine_ns, 356);
	gsd_exec y = packet(&p);
	y.resume_offset = 40;
	y.budget_ns = 163; /* exactly the Swizzle: stops before the next command */
	irq = run_packet(e, &r, &y);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_offset, 80);
	assert_int_equal(irq.engine_ns, 163);
	gsd_exec z = packet(&p);
	z.resume_offset = 80;
	irq = run_packet(e, &r, &z);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_int_equal(356 + 163 + irq.engine_ns, whole);

	/* A faulting TRANSFER moved nothing and is charged only its issue. */
	packet_buf f = {.len = 0};
	emit(&f, transfer(DST_A, SRC, 4096, 0, 0));
	emit(&f, transfer(SRC, DST_A, 4096, 0, 0)); /* write to the read-only source */
	gsd_exec w = packet(&f);
	irq = run_packet(e, &r, &w);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PAGE_FAULTED);
	assert_int_equal(irq.stop_offset, 40);
	assert_int_equal(irq.engine_ns, 100 + 256 + 100);
	assert_non_null(strstr(irq.detail, "read-only"));

	/* 1 MiB at 16 GB/s: 65 536 ns; NullRendering: nothing runs, no time. */
	packet_buf big = {.len = 0};
	emit(&big, transfer(DST_A, SRC, MIB, GS_TRANSFER_SWIZZLE, 1024));
	gsd_exec b = packet(&big);
	irq = run_packet(e, &r, &b);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_int_equal(irq.engine_ns, 100 + MIB / 16);
	gsd_exec nr = packet(&big);
	nr.submit_flags = GS_SUBMIT_NULL_RENDERING;
	irq = run_packet(e, &r, &nr);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_int_equal(irq.engine_ns, 0);

	gsd_engine_emu.destroy(e);
	pthread_cond_destroy(&r.cond);
	pthread_mutex_destroy(&r.lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_reference_matches_worked_example),
	        cmocka_unit_test(test_plain_copy),
	        cmocka_unit_test(test_swizzle_and_unswizzle_match_reference),
	        cmocka_unit_test(test_split_converts_like_whole),
	        cmocka_unit_test(test_faults),
	        cmocka_unit_test(test_overlap_plain),
	        cmocka_unit_test(test_virtual_engine_time),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
