/*
 * An engine with a real thread and real memory: command effects on the bytes, page faults,
 * NullRendering, preemption at command boundaries and inside SPINs, resumption, run budgets,
 * the virtual clock and its timeout, resets, aborts on destroy, and the null backend.
 * Interrupts are collected under a mutex and awaited with bounded timed waits; nothing here
 * sleeps to synchronise.
 *
 * GS_TEST_BACKEND=vulkan runs the wall-clock tests and the edge cases of FILL, COPY, CHECKSUM
 * and Swizzle against the Vulkan backend instead of the emulator (ctest: unit.test_engine.vulkan,
 * on lavapipe in CI), with its segments in Vulkan memory. The virtual-clock, null-backend and
 * CPU-cost tests are the emulator's alone and are not in that list. A missing Vulkan device
 * fails the run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/swizzle.h"
#include "isa.h"
#include "wddm.h"

#define NODE     3u
#define SEG_SIZE (8u << 20)
#define MAX_IRQS 256
#define WAIT_S   20 /* generous bound for sanitizer builds; a pass takes milliseconds */

/* The backend under test: the emulator, or with GS_TEST_BACKEND=vulkan the Vulkan backend
 * and its device (opened once, in main). */
static const gsd_engine_ops *g_ops = &gsd_engine_emu;
static gsd_backend *g_backend;

/* ---- fixture: two 1 MiB segments (ids 1 and 2) and an irq recorder ---- */

typedef struct fixture {
	gsd_memory mem;
	const gsd_engine_ops *ops;
	gsd_engine *engine;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	gsd_irq irqs[MAX_IRQS];
	uint64_t irq_ns[MAX_IRQS]; /* CLOCK_MONOTONIC when each irq was reported */
	size_t nirqs;
	/* A SIGNAL with this sync object makes the callback request preemption, which pins the
	 * moment of the request to an exact command boundary. 0 = off. */
	uint64_t preempt_on_sync;
	/* The same at STARTED: the request is pending before the packet's first command. */
	bool preempt_on_started;
	bool overflow;
} fixture;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_irq(void *arg, const gsd_irq *irq)
{
	fixture *f = arg;

	/* No cmocka assertion here: this runs on the engine thread, where a failing assertion
	 * could not unwind the test. Overflow is recorded and checked by teardown. */
	uint64_t t = now_ns();
	pthread_mutex_lock(&f->lock);
	if (f->nirqs < MAX_IRQS) {
		f->irq_ns[f->nirqs] = t;
		f->irqs[f->nirqs++] = *irq;
	} else
		f->overflow = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	if ((irq->kind == GSD_IRQ_FENCE_SIGNAL && f->preempt_on_sync &&
	     irq->sync == f->preempt_on_sync) ||
	    (irq->kind == GSD_IRQ_STARTED && f->preempt_on_started))
		f->ops->preempt(f->engine);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	for (uint32_t id = 1; id <= 2; id++) {
		char err[256];
		if (gsd_backend_segment_create(g_ops, g_backend, id,
		                               id == 1 ? GSD_MEM_LOCAL : GSD_MEM_APERTURE, SEG_SIZE,
		                               &f->mem.seg[id], err, sizeof(err)) != 0) {
			fprintf(stderr, "segment %u: %s\n", id, err);
			return -1;
		}
		memset(f->mem.seg[id].base, 0, SEG_SIZE); /* device memory starts undefined */
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&f->lock, NULL);
	*state = f;
	return 0;
}

static void start_engine(fixture *f, const gsd_engine_ops *ops, bool virtual_clock)
{
	/* Wall-clock tests of the emulator run on the backend under test. */
	if (ops == &gsd_engine_emu && !virtual_clock)
		ops = g_ops;
	gsd_engine_config cfg = {
	        .node = NODE,
	        .backend = ops == g_ops ? g_backend : NULL,
	        .name = "test",
	        .memory = &f->mem,
	        .virtual_clock = virtual_clock,
	        .irq = on_irq,
	        .irq_arg = f,
	};
	f->ops = ops;
	assert_int_equal(ops->create(&cfg, &f->engine), 0);
}

static void stop_engine(fixture *f)
{
	if (f->engine)
		f->ops->destroy(f->engine);
	f->engine = NULL;
}

static int teardown(void **state)
{
	fixture *f = *state;
	stop_engine(f);
	bool overflow = f->overflow;
	for (uint32_t id = 1; id <= 2; id++)
		gsd_backend_segment_destroy(g_ops, g_backend, &f->mem.seg[id]);
	for (uint32_t id = 3; id < GSD_MAX_SEGMENTS; id++)
		free(f->mem.seg[id].base);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return overflow ? -1 : 0;
}

static bool is_final(gsd_irq_kind k)
{
	return k == GSD_IRQ_DMA_COMPLETED || k == GSD_IRQ_DMA_PREEMPTED ||
	       k == GSD_IRQ_DMA_FAULTED || k == GSD_IRQ_DMA_PAGE_FAULTED || k == GSD_IRQ_ABORTED ||
	       k == GSD_IRQ_ENGINE_TIMEOUT;
}

/* Index of the first irq of x matching `kind` (0 = any final one), waiting up to timeout_ns;
 * SIZE_MAX if none came. */
static size_t wait_irq_for(fixture *f, const gsd_exec *x, gsd_irq_kind kind, uint64_t timeout_ns)
{
	uint64_t end = now_ns() + timeout_ns;
	struct timespec deadline = {.tv_sec = (time_t)(end / 1000000000u),
	                            .tv_nsec = (long)(end % 1000000000u)};

	pthread_mutex_lock(&f->lock);
	for (;;) {
		for (size_t i = 0; i < f->nirqs; i++) {
			if (f->irqs[i].exec != x)
				continue;
			if (kind ? f->irqs[i].kind == kind : is_final(f->irqs[i].kind)) {
				pthread_mutex_unlock(&f->lock);
				return i;
			}
		}
		if (pthread_cond_timedwait(&f->cond, &f->lock, &deadline) != 0) {
			pthread_mutex_unlock(&f->lock);
			return SIZE_MAX;
		}
	}
}

/* The same, failing the test after WAIT_S. */
static size_t wait_irq(fixture *f, const gsd_exec *x, gsd_irq_kind kind)
{
	size_t i = wait_irq_for(f, x, kind, (uint64_t)WAIT_S * 1000000000u);
	if (i == SIZE_MAX)
		fail_msg("timed out waiting for irq %d of packet %p", kind, (void *)x);
	return i;
}

static gsd_irq wait_final(fixture *f, const gsd_exec *x)
{
	size_t i = wait_irq(f, x, 0);
	pthread_mutex_lock(&f->lock);
	gsd_irq irq = f->irqs[i];
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(irq.node, NODE);
	return irq;
}

/* Forgets the recorded irqs: packets on the stack reuse addresses between iterations. */
static void forget_irqs(fixture *f)
{
	pthread_mutex_lock(&f->lock);
	f->nirqs = 0;
	pthread_mutex_unlock(&f->lock);
}

/* All irqs of x, in the order reported. */
static size_t irqs_of(fixture *f, const gsd_exec *x, gsd_irq *out, size_t cap)
{
	size_t n = 0;
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->nirqs && n < cap; i++)
		if (f->irqs[i].exec == x)
			out[n++] = f->irqs[i];
	pthread_mutex_unlock(&f->lock);
	return n;
}

/* ---- DMA buffer building ---- */

typedef struct dma {
	uint8_t buf[1024];
	size_t len;
} dma;

/* Appends a command; returns its offset. */
static size_t emit(dma *d, gs_isa_cmd c)
{
	size_t at = d->len;
	size_t n = gs_isa_encode(&c, d->buf + d->len, sizeof(d->buf) - d->len);
	assert_true(n > 0);
	d->len += n;
	return at;
}

static gs_isa_cmd fill(uint64_t dst, uint64_t size, uint32_t pattern)
{
	return (gs_isa_cmd){.op = GS_OP_FILL, .dst = dst, .size = size, .pattern = pattern};
}

static gs_isa_cmd copy(uint64_t dst, uint64_t src, uint64_t size)
{
	return (gs_isa_cmd){.op = GS_OP_COPY, .dst = dst, .src = src, .size = size};
}

static gs_isa_cmd checksum(uint64_t dst, uint64_t src, uint64_t size)
{
	return (gs_isa_cmd){.op = GS_OP_CHECKSUM, .dst = dst, .src = src, .size = size};
}

static gs_isa_cmd spin(uint64_t micros)
{
	return (gs_isa_cmd){.op = GS_OP_SPIN, .micros = micros};
}

static gs_isa_cmd signal_cmd(uint64_t sync, uint64_t value)
{
	return (gs_isa_cmd){.op = GS_OP_SIGNAL, .sync = sync, .value = value};
}

static gsd_exec packet(const dma *d, const gsd_range *ranges, size_t nranges)
{
	return (gsd_exec){.packet = 1,
	                  .fence = 1,
	                  .dma = d->buf,
	                  .dma_len = d->len,
	                  .ranges = ranges,
	                  .nranges = nranges};
}

static uint8_t *host(fixture *f, uint64_t addr)
{
	return f->mem.seg[gs_addr_segment(addr)].base + gs_addr_offset(addr);
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* The allocations most tests use: A (seg 1, written), B (seg 2, written), R (seg 1, read). */
/* gs_addr_make as a constant expression, for static tables */
#define GPU_ADDR(seg, off) (((uint64_t)(seg) << GS_ADDR_SEGMENT_SHIFT) | (uint64_t)(off))
#define ADDR_A             GPU_ADDR(1, 0x1000)
#define ADDR_B             GPU_ADDR(2, 0x0)
#define ADDR_R             GPU_ADDR(1, 0x8000)
#define ALLOC_SIZE         4096u
static const gsd_range ranges_abr[] = {
        {ADDR_A, ALLOC_SIZE, true},
        {ADDR_B, ALLOC_SIZE, true},
        {ADDR_R, ALLOC_SIZE, false},
};

/* ---- tests ---- */

static void test_fill_copy_checksum(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	for (size_t i = 0; i < ALLOC_SIZE; i++)
		host(f, ADDR_R)[i] = (uint8_t)(i * 7);
	dma d = {0};
	emit(&d, fill(ADDR_A, 1001, 0xa1b2c3d4u));
	emit(&d, copy(ADDR_B + 8, ADDR_R, 2000));
	emit(&d, checksum(ADDR_B, ADDR_B + 8, 2000));
	/* overlapping copy inside A: memmove semantics */
	emit(&d, copy(ADDR_A + 2, ADDR_A, 1000));
	gsd_exec x = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);

	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_int_equal(irq.stop_offset, d.len);
	assert_true(irq.engine_ns > 0);

	uint8_t want[1002];
	gs_isa_fill(want, 1001, 0xa1b2c3d4u);
	memmove(want + 2, want, 1000);
	assert_memory_equal(host(f, ADDR_A), want, 1002);
	assert_int_equal(host(f, ADDR_A)[1002], 0); /* nothing past the fill */
	for (size_t i = 0; i < 2000; i++)
		assert_int_equal(host(f, ADDR_B)[8 + i], (uint8_t)(i * 7));
	assert_true(gs_le64_get(host(f, ADDR_B)) == gs_isa_checksum(host(f, ADDR_R), 2000));

	/* STARTED comes first, then the final interrupt, and nothing else. */
	gsd_irq all[4];
	assert_int_equal(irqs_of(f, &x, all, 4), 2);
	assert_int_equal(all[0].kind, GSD_IRQ_STARTED);
	assert_int_equal(all[1].kind, GSD_IRQ_DMA_COMPLETED);
}

static void test_signal_and_order(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d1 = {0}, d2 = {0};
	emit(&d1, signal_cmd(77, 5));
	emit(&d1, fill(ADDR_A, 16, 1));
	size_t sig2 = emit(&d1, signal_cmd(77, 6));
	emit(&d2, signal_cmd(78, 1));
	gsd_exec x1 = packet(&d1, ranges_abr, 3), x2 = packet(&d2, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x1), 0);
	assert_int_equal(f->ops->submit(f->engine, &x2), 0);
	assert_int_equal(wait_final(f, &x2).kind, GSD_IRQ_DMA_COMPLETED);

	/* Packets run in submission order; each one's irqs are STARTED, signals, final. */
	pthread_mutex_lock(&f->lock);
	static const struct {
		int packet;
		gsd_irq_kind kind;
		uint64_t sync, value;
	} want[] = {
	        {1, GSD_IRQ_STARTED, 0, 0},       {1, GSD_IRQ_FENCE_SIGNAL, 77, 5},
	        {1, GSD_IRQ_FENCE_SIGNAL, 77, 6}, {1, GSD_IRQ_DMA_COMPLETED, 0, 0},
	        {2, GSD_IRQ_STARTED, 0, 0},       {2, GSD_IRQ_FENCE_SIGNAL, 78, 1},
	        {2, GSD_IRQ_DMA_COMPLETED, 0, 0},
	};
	assert_int_equal(f->nirqs, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < f->nirqs; i++) {
		assert_ptr_equal(f->irqs[i].exec, want[i].packet == 1 ? &x1 : &x2);
		assert_int_equal(f->irqs[i].kind, want[i].kind);
		assert_int_equal(f->irqs[i].sync, want[i].sync);
		assert_int_equal(f->irqs[i].value, want[i].value);
	}
	/* A signal reports the offset just past itself. */
	assert_int_equal(f->irqs[2].stop_offset, sig2 + 24);
	pthread_mutex_unlock(&f->lock);
}

/* Runs a one-packet buffer and expects a page fault at the offset of command `bad`. */
static void expect_page_fault(fixture *f, const dma *d, size_t bad, const char *why)
{
	gsd_exec x = packet(d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PAGE_FAULTED);
	assert_int_equal(irq.stop_offset, bad);
	assert_non_null(strstr(irq.detail, "page fault"));
	assert_non_null(strstr(irq.detail, why));
	/* The text reaches the tenant: no GPU address in it (it would tell the placement). */
	assert_null(strstr(irq.detail, "0x"));
}

static void test_page_faults(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	static const struct {
		gs_isa_cmd cmd;
		const char *why;
	} cases[] = {
	        /* one byte past the end of A */
	        {{.op = GS_OP_FILL, .dst = ADDR_A + 1, .size = ALLOC_SIZE}, "outside allocation"},
	        /* one byte before A */
	        {{.op = GS_OP_FILL, .dst = ADDR_A - 1, .size = 2}, "outside allocation"},
	        /* write to the read-only R, by FILL, COPY and CHECKSUM */
	        {{.op = GS_OP_FILL, .dst = ADDR_R, .size = 1}, "read-only"},
	        {{.op = GS_OP_COPY, .dst = ADDR_R, .src = ADDR_A, .size = 1}, "read-only"},
	        {{.op = GS_OP_CHECKSUM, .dst = ADDR_R, .src = ADDR_A, .size = 1}, "read-only"},
	        /* CHECKSUM needs 8 writable bytes at dst */
	        {{.op = GS_OP_CHECKSUM, .dst = ADDR_A + ALLOC_SIZE - 7, .src = ADDR_A, .size = 1},
	         "outside allocation"},
	        /* reads outside any allocation */
	        {{.op = GS_OP_COPY, .dst = ADDR_A, .src = ADDR_R + ALLOC_SIZE, .size = 1},
	         "read of 1 bytes"},
	        /* sizes that would wrap a 64-bit sum */
	        {{.op = GS_OP_FILL, .dst = ADDR_A, .size = UINT64_MAX}, "outside allocation"},
	        {{.op = GS_OP_COPY, .dst = ADDR_A + 16, .src = UINT64_MAX, .size = 2},
	         "outside allocation"},
	        /* another segment, same offset */
	        {{.op = GS_OP_FILL, .dst = GPU_ADDR(2, 0x1000), .size = 1}, "outside allocation"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(host(f, ADDR_A), 0, ALLOC_SIZE);
		dma d = {0};
		emit(&d, fill(ADDR_A, 8, 0x01010101u));
		size_t bad = emit(&d, cases[i].cmd);
		emit(&d, fill(ADDR_A + 8, 8, 0x02020202u));
		expect_page_fault(f, &d, bad, cases[i].why);
		forget_irqs(f);
		/* The command before the fault ran; the one after did not. */
		assert_true(all_bytes(host(f, ADDR_A), 8, 0x01));
		assert_true(all_bytes(host(f, ADDR_A + 8), 8, 0x00));
	}
	/* The read-only allocation was never written. */
	assert_true(all_bytes(host(f, ADDR_R), ALLOC_SIZE, 0));
}

static void test_range_outside_segment(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	/* Allocation-list entries the memory cannot back: an unmapped segment, and a range that
	 * runs past its segment's end. The engine must still refuse. */
	const gsd_range bad_ranges[] = {
	        {gs_addr_make(7, 0), 4096, true},
	        {gs_addr_make(1, SEG_SIZE - 16), 4096, true},
	};
	dma d = {0};
	emit(&d, fill(gs_addr_make(7, 0), 16, 1));
	dma e = {0};
	emit(&e, fill(gs_addr_make(1, SEG_SIZE - 16), 32, 1));
	gsd_exec x = packet(&d, bad_ranges, 2), y = packet(&e, bad_ranges, 2);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	assert_int_equal(f->ops->submit(f->engine, &y), 0);
	gsd_irq ix = wait_final(f, &x), iy = wait_final(f, &y);
	assert_int_equal(ix.kind, GSD_IRQ_DMA_PAGE_FAULTED);
	assert_non_null(strstr(ix.detail, "outside segment 7"));
	assert_int_equal(iy.kind, GSD_IRQ_DMA_PAGE_FAULTED);
	assert_non_null(strstr(iy.detail, "outside segment 1"));
}

static void test_decode_fault(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, fill(ADDR_A, 4, 0x09090909u));
	size_t bad = emit(&d, spin(1));
	d.buf[bad + 1] = 0x2; /* unknown SPIN flag */
	gsd_exec x = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_FAULTED);
	assert_int_equal(irq.stop_offset, bad);
	assert_non_null(strstr(irq.detail, "flags"));
	assert_true(all_bytes(host(f, ADDR_A), 4, 0x09));

	/* A resume offset inside a command or past the end faults too. */
	gsd_exec y = packet(&d, ranges_abr, 3);
	y.resume_offset = 4;
	gsd_exec z = packet(&d, ranges_abr, 3);
	z.resume_offset = d.len + 1;
	assert_int_equal(f->ops->submit(f->engine, &y), 0);
	assert_int_equal(f->ops->submit(f->engine, &z), 0);
	assert_int_equal(wait_final(f, &y).kind, GSD_IRQ_DMA_FAULTED);
	assert_int_equal(wait_final(f, &z).kind, GSD_IRQ_DMA_FAULTED);
}

static void test_null_rendering(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, fill(ADDR_A, ALLOC_SIZE, 0xffffffffu));
	emit(&d, spin(10 * 1000 * 1000)); /* 10 s of wall time, if it ran */
	emit(&d, fill(ADDR_R, 1, 1));     /* would even fault */
	emit(&d, signal_cmd(5, 9));
	gsd_exec x = packet(&d, ranges_abr, 3);
	x.submit_flags = GS_SUBMIT_NULL_RENDERING;
	uint64_t t0 = now_ns();
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	assert_true(now_ns() - t0 < 5000000000u);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_int_equal(irq.engine_ns, 0);
	assert_true(all_bytes(host(f, ADDR_A), ALLOC_SIZE, 0));
	/* Fences still signal: NullRendering goes through fence signalling. */
	size_t i = wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL);
	pthread_mutex_lock(&f->lock);
	assert_int_equal(f->irqs[i].sync, 5);
	assert_int_equal(f->irqs[i].value, 9);
	pthread_mutex_unlock(&f->lock);
}

static void test_null_backend(void **state)
{
	fixture *f = *state;
	assert_ptr_equal(gsd_engine_find("emu"), &gsd_engine_emu);
	assert_ptr_equal(gsd_engine_find("null"), &gsd_engine_null);
	assert_null(gsd_engine_find("real"));
	assert_null(gsd_engine_find(NULL));
	start_engine(f, gsd_engine_find("null"), false);

	dma d = {0};
	emit(&d, fill(ADDR_A, ALLOC_SIZE, 0x12345678u));
	emit(&d, spin(10 * 1000 * 1000));
	gsd_exec x[8];
	for (size_t i = 0; i < 8; i++) {
		x[i] = packet(&d, ranges_abr, 3);
		assert_int_equal(f->ops->submit(f->engine, &x[i]), 0);
	}
	for (size_t i = 0; i < 8; i++) {
		gsd_irq irq = wait_final(f, &x[i]);
		assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
		assert_int_equal(irq.engine_ns, 0);
	}
	assert_true(all_bytes(host(f, ADDR_A), ALLOC_SIZE, 0));
}

/*
 * Preemption at an exact command boundary: the callback requests it when the engine reports
 * SIGNAL(99), so the request is pending before the SPIN that follows. The packet must stop
 * at that SPIN, and resubmitting from stop_offset must do exactly the rest of the work.
 */
static void test_preempt_and_resume(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	f->preempt_on_sync = 99;

	dma d = {0};
	emit(&d, fill(ADDR_A, 64, 0x11111111u));
	emit(&d, signal_cmd(99, 1));
	size_t stop = emit(&d, spin(20000));
	emit(&d, fill(ADDR_A + 64, 64, 0x22222222u));
	emit(&d, copy(ADDR_B, ADDR_A, 128));
	gsd_exec x = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_offset, stop);
	assert_true(irq.engine_ns < 20000000u); /* the SPIN did not run */
	assert_true(all_bytes(host(f, ADDR_A), 64, 0x11));
	assert_true(all_bytes(host(f, ADDR_A + 64), 64, 0x00));
	assert_true(all_bytes(host(f, ADDR_B), 128, 0x00));

	/* Resubmission: the scheduler's next packet for the same buffer. */
	f->preempt_on_sync = 0;
	gsd_exec y = packet(&d, ranges_abr, 3);
	y.submit_flags = GS_SUBMIT_RESUBMISSION;
	y.resume_offset = irq.stop_offset;
	assert_int_equal(f->ops->submit(f->engine, &y), 0);
	irq = wait_final(f, &y);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_true(irq.engine_ns >= 20000000u); /* the SPIN ran this time, in wall time */
	assert_true(all_bytes(host(f, ADDR_A + 64), 64, 0x22));
	assert_true(all_bytes(host(f, ADDR_B), 64, 0x11));
	assert_true(all_bytes(host(f, ADDR_B + 64), 64, 0x22));
	/* The first part did not run twice: no second SIGNAL. */
	gsd_irq all[8];
	size_t n = irqs_of(f, &y, all, 8);
	for (size_t i = 0; i < n; i++)
		assert_int_not_equal(all[i].kind, GSD_IRQ_FENCE_SIGNAL);
}

/*
 * A request made while a packet is queued behind a running one is not lost: it stops the
 * running packet at its next boundary (here after a non-preemptible SPIN ran whole).
 */
static void test_preempt_running_spin(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, signal_cmd(1, 1));
	size_t spin_at = emit(
	        &d,
	        (gs_isa_cmd){.op = GS_OP_SPIN, .flags = GS_SPIN_NONPREEMPTIBLE, .micros = 50000});
	size_t after_spin = emit(&d, fill(ADDR_A, 1, 0x33333333u));
	gsd_exec x = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL);
	f->ops->preempt(f->engine);
	gsd_irq irq = wait_final(f, &x);
	/* Honoured at a boundary, never inside the SPIN: before it if the request beat the engine
	 * back from the SIGNAL callback, usually after it; or not at all if this thread was
	 * descheduled for the whole 50 ms and the packet completed first. */
	if (irq.kind == GSD_IRQ_DMA_PREEMPTED && irq.stop_offset == spin_at) {
		assert_true(irq.engine_ns < 50000000u);
	} else if (irq.kind == GSD_IRQ_DMA_PREEMPTED) {
		assert_int_equal(irq.stop_offset, after_spin);
		assert_true(irq.engine_ns >= 50000000u);
	} else {
		assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	}
	assert_int_equal(host(f, ADDR_A)[0], irq.kind == GSD_IRQ_DMA_COMPLETED ? 0x33 : 0);
}

static void test_preempt_idle_is_noop(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	f->ops->preempt(f->engine); /* nothing running or queued: forgotten */
	dma d = {0};
	emit(&d, fill(ADDR_A, 4, 0x44444444u));
	gsd_exec x = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	assert_int_equal(wait_final(f, &x).kind, GSD_IRQ_DMA_COMPLETED);

	/* A request made after a packet completed does not touch the next packet either. */
	f->ops->preempt(f->engine);
	gsd_exec y = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &y), 0);
	assert_int_equal(wait_final(f, &y).kind, GSD_IRQ_DMA_COMPLETED);
}

static void test_virtual_clock(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, true);

	dma d = {0};
	emit(&d, spin(10u * 1000 * 1000)); /* 10 s */
	emit(&d, fill(ADDR_A, 4, 0x55555555u));
	uint64_t t0 = now_ns();
	gsd_exec x = packet(&d, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	uint64_t wall = now_ns() - t0;
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	/* 10 s of SPIN plus 100 ns for each of the two commands */
	assert_true(irq.engine_ns == 10000000000u + 200u);
	assert_true(wall < 2000000000u);
	assert_true(all_bytes(host(f, ADDR_A), 4, 0x55));
}

static void test_wall_spin(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, spin(30000));
	gsd_exec x = packet(&d, ranges_abr, 3);
	uint64_t t0 = now_ns();
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_true(irq.engine_ns >= 30000000u);
	assert_true(now_ns() - t0 >= 30000000u);
}

static void test_destroy_aborts(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma running = {0}, queued = {0};
	emit(&running, signal_cmd(1, 1));
	size_t spin_at = emit(&running, spin(60u * 1000 * 1000)); /* 60 s: only a reset ends it */
	emit(&queued, fill(ADDR_A, 4, 0x66666666u));
	gsd_exec x = packet(&running, ranges_abr, 3);
	gsd_exec q[3];
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	for (size_t i = 0; i < 3; i++) {
		q[i] = packet(&queued, ranges_abr, 3);
		assert_int_equal(f->ops->submit(f->engine, &q[i]), 0);
	}
	wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL); /* x is inside its SPIN */

	uint64_t t0 = now_ns();
	stop_engine(f);
	assert_true(now_ns() - t0 < 2000000000u);

	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_ABORTED);
	assert_int_equal(irq.stop_offset, spin_at);
	/* The queued packets are aborted in submission order, never started. */
	size_t last = 0;
	for (size_t i = 0; i < 3; i++) {
		size_t at = wait_irq(f, &q[i], 0);
		assert_int_equal(f->irqs[at].kind, GSD_IRQ_ABORTED);
		assert_true(at > last);
		last = at;
		gsd_irq all[4];
		assert_int_equal(irqs_of(f, &q[i], all, 4), 1);
	}
	assert_true(all_bytes(host(f, ADDR_A), 4, 0));
}

/* ---- budgets, preemption inside SPINs, resets, the virtual timeout ---- */

static gs_isa_cmd spin_np(uint64_t micros)
{
	return (gs_isa_cmd){.op = GS_OP_SPIN, .flags = GS_SPIN_NONPREEMPTIBLE, .micros = micros};
}

/* Submits x and returns its final interrupt, checking that it is x's only final one. */
static gsd_irq run_final(fixture *f, gsd_exec *x)
{
	assert_int_equal(f->ops->submit(f->engine, x), 0);
	gsd_irq irq = wait_final(f, x);
	gsd_irq all[16];
	size_t n = irqs_of(f, x, all, 16), finals = 0;
	for (size_t i = 0; i < n; i++)
		finals += is_final(all[i].kind);
	assert_int_equal(finals, 1);
	return irq;
}

static void expect_stop(const gsd_irq *irq, gsd_irq_kind kind, gsd_stop_reason why, size_t at,
                        uint64_t spin_done_us, uint64_t engine_ns)
{
	assert_int_equal(irq->kind, kind);
	assert_int_equal(irq->stop_reason, why);
	assert_int_equal(irq->stop_offset, at);
	assert_int_equal(irq->spin_done_us, spin_done_us);
	assert_int_equal(irq->engine_ns, engine_ns);
}

/*
 * The packet the virtual budget tests use (offsets in brackets):
 *   [0] FILL A  [32] SPIN 1000 us  [48] FILL A+64  [80] SPIN 500 us NONPREEMPTIBLE
 *   [96] FILL B  [128] end
 * Uninterrupted it costs 5 x 100 ns + 1.5 ms = 1 500 500 ns of virtual engine time.
 */
static void budget_packet(dma *d)
{
	assert_int_equal(emit(d, fill(ADDR_A, 64, 0x11111111u)), 0);
	assert_int_equal(emit(d, spin(1000)), 32);
	assert_int_equal(emit(d, fill(ADDR_A + 64, 64, 0x22222222u)), 48);
	assert_int_equal(emit(d, spin_np(500)), 80);
	assert_int_equal(emit(d, fill(ADDR_B, 64, 0x33333333u)), 96);
	assert_int_equal(d->len, 128);
}

/* Every stop position a budget can produce on the virtual clock, each run twice. */
static void test_budget_virtual_deterministic(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, true);
	dma d = {0};
	budget_packet(&d);

	static const struct {
		uint64_t budget;
		gsd_irq_kind kind;
		gsd_stop_reason why;
		size_t at;
		uint64_t spin_done_us, engine_ns;
	} cases[] = {
	        /* reached between commands: after the first FILL */
	        {100, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 32, 0, 100},
	        /* inside the preemptible SPIN, at the first whole microsecond reaching it:
	         * 200 ns issued + 300 us >= 300 000 ns */
	        {300000, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 32, 300, 300200},
	        {300200, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 32, 300, 300200},
	        {300201, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 32, 301, 301200},
	        /* the SPIN ends exactly on the budget: it finishes, the next boundary stops */
	        {1000200, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 48, 0, 1000200},
	        {1000250, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 80, 0, 1000300},
	        /* the NONPREEMPTIBLE SPIN runs whole through the budget */
	        {1000400, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 96, 0, 1500400},
	        /* the last command reaches it: nothing left, so the packet completes */
	        {1500500, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, 128, 0, 1500500},
	        {0, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, 128, 0, 1500500},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		gsd_irq first = {0};
		for (int round = 0; round < 2; round++) {
			gsd_exec x = packet(&d, ranges_abr, 3);
			x.budget_ns = cases[i].budget;
			gsd_irq irq = run_final(f, &x);
			forget_irqs(f);
			expect_stop(&irq, cases[i].kind, cases[i].why, cases[i].at,
			            cases[i].spin_done_us, cases[i].engine_ns);
			if (round == 0) {
				first = irq;
				continue;
			}
			assert_int_equal(irq.kind, first.kind);
			assert_int_equal(irq.stop_offset, first.stop_offset);
			assert_int_equal(irq.spin_done_us, first.spin_done_us);
			assert_int_equal(irq.engine_ns, first.engine_ns);
		}
	}
}

/* Resubmitting from each stop with its spin_done_us finishes exactly the remaining work. */
static void test_budget_virtual_resume(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, true);
	dma d = {0};
	budget_packet(&d);

	/* Budget 300 us per run: three cuts inside the SPIN, then a run that ends the SPIN,
	 * the FILL and the NONPREEMPTIBLE SPIN, then the last FILL. A resumed SPIN is issued
	 * again (100 ns), so the sum is the uninterrupted time plus 3 x 100 ns. */
	static const struct {
		gsd_irq_kind kind;
		size_t at;
		uint64_t spin_done_us, engine_ns;
	} runs[] = {
	        {GSD_IRQ_DMA_PREEMPTED, 32, 300, 300200},
	        {GSD_IRQ_DMA_PREEMPTED, 32, 600, 300100},
	        {GSD_IRQ_DMA_PREEMPTED, 32, 900, 300100},
	        {GSD_IRQ_DMA_PREEMPTED, 96, 0, 100 + 100000 + 100 + 100 + 500000},
	        {GSD_IRQ_DMA_COMPLETED, 128, 0, 100},
	};
	size_t resume = 0;
	uint64_t done = 0, total = 0;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		gsd_exec x = packet(&d, ranges_abr, 3);
		x.submit_flags = i ? GS_SUBMIT_RESUBMISSION : 0;
		x.budget_ns = 300000;
		x.resume_offset = resume;
		x.spin_done_us = done;
		gsd_irq irq = run_final(f, &x);
		forget_irqs(f);
		expect_stop(&irq, runs[i].kind,
		            runs[i].kind == GSD_IRQ_DMA_PREEMPTED ? GSD_STOP_BUDGET : GSD_STOP_NONE,
		            runs[i].at, runs[i].spin_done_us, runs[i].engine_ns);
		resume = irq.stop_offset;
		done = irq.spin_done_us;
		total += irq.engine_ns;
	}
	assert_int_equal(total, 1500500 + 3 * 100);
	assert_true(all_bytes(host(f, ADDR_A), 64, 0x11));
	assert_true(all_bytes(host(f, ADDR_A + 64), 64, 0x22));
	assert_true(all_bytes(host(f, ADDR_B), 64, 0x33));

	/* Without a budget a resumed SPIN runs only its remainder ... */
	gsd_exec y = packet(&d, ranges_abr, 3);
	y.resume_offset = 32;
	y.spin_done_us = 250;
	gsd_irq irq = run_final(f, &y);
	expect_stop(&irq, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, 128, 0, 4 * 100 + 750000 + 500000);
	/* ... none of it when it is all done ... */
	gsd_exec z = packet(&d, ranges_abr, 3);
	z.resume_offset = 32;
	z.spin_done_us = 5000;
	irq = run_final(f, &z);
	expect_stop(&irq, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, 128, 0, 4 * 100 + 500000);
	/* ... and spin_done_us means nothing when the resume point is not a SPIN. */
	gsd_exec w = packet(&d, ranges_abr, 3);
	w.resume_offset = 48;
	w.spin_done_us = 400;
	irq = run_final(f, &w);
	expect_stop(&irq, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, 128, 0, 3 * 100 + 500000);
}

/* GPU_ENGINE_TIMEOUT on the virtual clock, and when it does not apply. */
static void test_virtual_timeout(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, true);

	dma d = {0};
	emit(&d, fill(ADDR_A, 16, 0x44444444u));
	size_t spin_at = emit(&d, spin_np(10u * 1000 * 1000)); /* 10 s */
	size_t after = emit(&d, fill(ADDR_B, 16, 0x55555555u));
	dma next = {0};
	emit(&next, fill(ADDR_B + 64, 16, 0x66666666u));

	/* budget 1 ms + tdr 2 s < 10 s: the timeout ends the packet at exactly 2.001 s, and
	 * the packet queued behind it runs normally. */
	gsd_exec x = packet(&d, ranges_abr, 3);
	x.budget_ns = 1000000;
	x.tdr_ns = 2000000000u;
	gsd_exec y = packet(&next, ranges_abr, 3);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	assert_int_equal(f->ops->submit(f->engine, &y), 0);
	gsd_irq irq = wait_final(f, &x);
	expect_stop(&irq, GSD_IRQ_ENGINE_TIMEOUT, GSD_STOP_NONE, spin_at,
	            (2001000000u - 200u) / 1000u, 2001000000u);
	assert_int_equal(wait_final(f, &y).kind, GSD_IRQ_DMA_COMPLETED);
	gsd_irq all[4];
	assert_int_equal(irqs_of(f, &x, all, 4), 2); /* STARTED, ENGINE_TIMEOUT */
	assert_true(all_bytes(host(f, ADDR_A), 16, 0x44));
	assert_true(all_bytes(host(f, ADDR_B), 16, 0x00)); /* never reached */
	assert_true(all_bytes(host(f, ADDR_B + 64), 16, 0x66));
	forget_irqs(f);

	/* budget + tdr covers the SPIN: it runs whole, the budget stops the packet after it */
	x = packet(&d, ranges_abr, 3);
	x.budget_ns = 1000000;
	x.tdr_ns = 9999001000u;
	irq = run_final(f, &x);
	expect_stop(&irq, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, after, 0, 10000000000u + 200u);
	forget_irqs(f);
	/* exactly on the limit is not past it */
	x = packet(&d, ranges_abr, 3);
	x.budget_ns = 200;
	x.tdr_ns = 10000000000u;
	irq = run_final(f, &x);
	expect_stop(&irq, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, after, 0, 10000000000u + 200u);
	forget_irqs(f);

	/* no budget, or no tdr: no timeout */
	x = packet(&d, ranges_abr, 3);
	x.tdr_ns = 1000;
	irq = run_final(f, &x);
	expect_stop(&irq, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, d.len, 0, 10000000000u + 300u);
	forget_irqs(f);
	x = packet(&d, ranges_abr, 3);
	x.budget_ns = 1000;
	irq = run_final(f, &x);
	expect_stop(&irq, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, after, 0, 10000000000u + 200u);
	forget_irqs(f);

	/* A preemptible SPIN never times out: the budget stops it first. */
	dma p = {0};
	emit(&p, spin(10u * 1000 * 1000));
	x = packet(&p, ranges_abr, 3);
	x.budget_ns = 1000000;
	x.tdr_ns = 1;
	irq = run_final(f, &x);
	expect_stop(&irq, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, 0, 1000, 1000100);
}

/* On the wall clock the budget cuts a preemptible SPIN, and waits out a NONPREEMPTIBLE one;
 * tdr_ns is ignored there (the scheduler times out with its own timer). */
static void test_budget_wall(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, spin(1000u * 1000));
	emit(&d, fill(ADDR_A, 4, 0x77777777u));
	gsd_exec x = packet(&d, ranges_abr, 3);
	x.budget_ns = 20000000;
	x.tdr_ns = 1;
	gsd_irq irq = run_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_reason, GSD_STOP_BUDGET);
	assert_int_equal(irq.stop_offset, 0);
	assert_true(irq.engine_ns >= 20000000u);
	assert_true(irq.engine_ns < 500000000u);
	assert_true(irq.spin_done_us >= 19000u);
	assert_true(irq.spin_done_us * 1000u <= irq.engine_ns);
	assert_true(all_bytes(host(f, ADDR_A), 4, 0));
	printf("[ budget ] 20 ms wall budget stopped the SPIN after %.1f us of engine time\n",
	       (double)irq.engine_ns / 1e3);
	forget_irqs(f);

	dma n = {0};
	emit(&n, spin_np(10000));
	size_t after = emit(&n, fill(ADDR_A, 4, 0x77777777u));
	gsd_exec y = packet(&n, ranges_abr, 3);
	y.budget_ns = 1000000;
	y.tdr_ns = 1;
	irq = run_final(f, &y);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_reason, GSD_STOP_BUDGET);
	assert_int_equal(irq.stop_offset, after);
	assert_int_equal(irq.spin_done_us, 0);
	assert_true(irq.engine_ns >= 10000000u);
}

/*
 * A preemption request stops a wall-clock SPIN of 1 s early and reports its progress;
 * resubmitting with that progress runs only the rest.
 */
static void test_preempt_inside_wall_spin(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, signal_cmd(1, 1));
	size_t spin_at = emit(&d, spin(1000u * 1000));
	emit(&d, fill(ADDR_A, 4, 0x88888888u));
	gsd_exec x = packet(&d, ranges_abr, 3);
	uint64_t t0 = now_ns();
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL);
	f->ops->preempt(f->engine);
	gsd_irq irq = wait_final(f, &x);
	/* The request lands before or inside the SPIN, never after it. */
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_reason, GSD_STOP_REQUEST);
	assert_int_equal(irq.stop_offset, spin_at);
	assert_true(irq.spin_done_us < 500000u);
	assert_true(irq.engine_ns < 500000000u);
	assert_true(now_ns() - t0 < 500000000u);
	assert_true(all_bytes(host(f, ADDR_A), 4, 0));

	/* Resume with all but 10 ms of it done. */
	gsd_exec y = packet(&d, ranges_abr, 3);
	y.submit_flags = GS_SUBMIT_RESUBMISSION;
	y.resume_offset = irq.stop_offset;
	y.spin_done_us = 990000;
	irq = run_final(f, &y);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_true(irq.engine_ns >= 10000000u);
	assert_true(irq.engine_ns < 500000000u);
	assert_true(all_bytes(host(f, ADDR_A), 4, 0x88));

	/* A request pending before a resumed SPIN starts keeps the SPIN's progress. */
	f->preempt_on_started = true;
	gsd_exec z = packet(&d, ranges_abr, 3);
	z.resume_offset = spin_at;
	z.spin_done_us = 999000;
	irq = run_final(f, &z);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
	assert_int_equal(irq.stop_reason, GSD_STOP_REQUEST);
	assert_int_equal(irq.stop_offset, spin_at);
	assert_int_equal(irq.spin_done_us, 999000);
	assert_true(irq.engine_ns < 500000000u);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

#define LATENCY_TRIALS 250

/*
 * Engine preemption latency on the wall clock: from preempt() to the PREEMPTED interrupt
 * while a 1 s preemptible SPIN runs. Prints p50/p99; asserts only correctness.
 */
static void test_preempt_latency(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, signal_cmd(1, 1));
	size_t spin_at = emit(&d, spin(1000u * 1000));
	uint64_t lat[LATENCY_TRIALS];
	size_t inside = 0;
	for (size_t i = 0; i < LATENCY_TRIALS; i++) {
		gsd_exec x = packet(&d, ranges_abr, 3);
		assert_int_equal(f->ops->submit(f->engine, &x), 0);
		wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL);
		/* Not synchronisation: lets the request land at different points of the SPIN,
		 * as a high-priority submission would. Any point is correct. */
		struct timespec pause = {.tv_nsec = 100000 + (long)(i % 8) * 50000};
		nanosleep(&pause, NULL);
		uint64_t t = now_ns();
		f->ops->preempt(f->engine);
		size_t at = wait_irq(f, &x, 0);
		pthread_mutex_lock(&f->lock);
		gsd_irq irq = f->irqs[at];
		lat[i] = f->irq_ns[at] - t;
		pthread_mutex_unlock(&f->lock);
		assert_int_equal(irq.kind, GSD_IRQ_DMA_PREEMPTED);
		assert_int_equal(irq.stop_reason, GSD_STOP_REQUEST);
		assert_int_equal(irq.stop_offset, spin_at);
		assert_true(irq.spin_done_us < 1000000u);
		inside += irq.spin_done_us > 0;
		forget_irqs(f);
	}
	qsort(lat, LATENCY_TRIALS, sizeof(lat[0]), cmp_u64);
	printf("[ latency ] preempt() -> PREEMPTED inside a wall SPIN, %d trials (%zu inside "
	       "the SPIN): p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n",
	       LATENCY_TRIALS, inside, (double)lat[LATENCY_TRIALS / 2] / 1e3,
	       (double)lat[LATENCY_TRIALS * 9 / 10] / 1e3,
	       (double)lat[LATENCY_TRIALS * 99 / 100] / 1e3, (double)lat[LATENCY_TRIALS - 1] / 1e3);
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* A preemptible SPIN sleeps: 1 s of it must cost far less than a core-second of CPU. */
static void test_spin_cpu_cost(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, spin(1000u * 1000));
	gsd_exec x = packet(&d, ranges_abr, 3);
	uint64_t c0 = cpu_ns(), t0 = now_ns();
	gsd_irq irq = run_final(f, &x);
	uint64_t cpu = cpu_ns() - c0, wall = now_ns() - t0;
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_true(irq.engine_ns >= 1000000000u);
	printf("[ cpu ] 1 s preemptible SPIN: %.2f ms CPU (%.3f%% of a core) for %.3f ms wall, "
	       "ended %.1f us late\n",
	       (double)cpu / 1e6, 100.0 * (double)cpu / (double)wall, (double)wall / 1e6,
	       (double)(irq.engine_ns - 1000000000u) / 1e3);
	assert_true(cpu < 300000000u);
}

/*
 * A NONPREEMPTIBLE SPIN ignores preemption requests and its budget, but a reset aborts it at
 * once; the engine then serves new packets, and the stale request does not touch them.
 */
static void test_reset_aborts_nonpreemptible(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	dma d = {0};
	emit(&d, signal_cmd(1, 1));
	size_t spin_at = emit(&d, spin_np(60u * 1000 * 1000)); /* 60 s */
	emit(&d, fill(ADDR_A, 4, 0x99999999u));
	gsd_exec x;
	for (int attempt = 0;; attempt++) {
		assert_true(attempt < 20);
		x = packet(&d, ranges_abr, 3);
		x.budget_ns = 1000000;
		assert_int_equal(f->ops->submit(f->engine, &x), 0);
		wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL);
		/* Not synchronisation: gives the engine time to enter the SPIN. If the request
		 * still beats it there, the packet stops before the SPIN, and we try again. */
		struct timespec pause = {.tv_nsec = 1000000};
		nanosleep(&pause, NULL);
		f->ops->preempt(f->engine);
		/* Neither the request nor the 1 ms budget ends the SPIN within 50 ms. */
		size_t at = wait_irq_for(f, &x, 0, 50000000u);
		if (at == SIZE_MAX)
			break;
		pthread_mutex_lock(&f->lock);
		gsd_irq early = f->irqs[at];
		pthread_mutex_unlock(&f->lock);
		expect_stop(&early, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_REQUEST, spin_at, 0,
		            early.engine_ns);
		assert_true(early.engine_ns < 50000000u);
		forget_irqs(f);
	}

	uint64_t t = now_ns();
	f->ops->reset(f->engine);
	size_t at = wait_irq(f, &x, 0);
	pthread_mutex_lock(&f->lock);
	gsd_irq irq = f->irqs[at];
	uint64_t latency = f->irq_ns[at] - t;
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(irq.kind, GSD_IRQ_ABORTED);
	assert_int_equal(irq.stop_reason, GSD_STOP_NONE);
	assert_int_equal(irq.stop_offset, spin_at);
	assert_true(irq.spin_done_us < 60000000u);
	if (g_ops == &gsd_engine_emu) {
		assert_true(irq.engine_ns >= 50000000u);
	} else {
		/* GPU time: the slices that ran, without the host's turns between them. */
		assert_true(irq.spin_done_us > 0);
		assert_true(irq.engine_ns >= irq.spin_done_us * 1000u);
	}
	assert_true(latency < 1000000000u);
	printf("[ reset ] reset() -> ABORTED inside a NONPREEMPTIBLE SPIN: %.1f us\n",
	       (double)latency / 1e3);

	/* The engine goes on; the old request is gone with the aborted packet. */
	gsd_exec y = packet(&d, ranges_abr, 3);
	y.resume_offset = spin_at;
	y.spin_done_us = 60u * 1000 * 1000 - 1000; /* 1 ms left */
	irq = run_final(f, &y);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_true(all_bytes(host(f, ADDR_A), 4, 0x99));
	gsd_irq all[8];
	assert_int_equal(irqs_of(f, &x, all, 8), 3); /* STARTED, SIGNAL, ABORTED */
}

/* A reset aborts the running packet, then the queued ones in order, never starting them;
 * what is submitted after it runs. On an idle engine it does nothing. */
static void test_reset_aborts_queue(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);

	f->ops->reset(f->engine); /* idle: nothing to do, nothing remembered */
	dma d = {0};
	emit(&d, fill(ADDR_B, 4, 0xaaaaaaaau));
	gsd_exec w = packet(&d, ranges_abr, 3);
	assert_int_equal(run_final(f, &w).kind, GSD_IRQ_DMA_COMPLETED);
	forget_irqs(f);

	dma running = {0}, queued = {0};
	emit(&running, signal_cmd(1, 1));
	size_t spin_at = emit(&running, spin_np(60u * 1000 * 1000));
	emit(&queued, spin(10));
	emit(&queued, fill(ADDR_A, 4, 0xbbbbbbbbu));
	gsd_exec x = packet(&running, ranges_abr, 3);
	gsd_exec q[3];
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	for (size_t i = 0; i < 3; i++) {
		q[i] = packet(&queued, ranges_abr, 3);
		assert_int_equal(f->ops->submit(f->engine, &q[i]), 0);
	}
	q[1].spin_done_us = 7; /* a resumed SPIN reports its progress back when dropped */
	wait_irq(f, &x, GSD_IRQ_FENCE_SIGNAL);

	f->ops->reset(f->engine);
	gsd_exec y = packet(&queued, ranges_abr, 3); /* after the reset: new work */
	assert_int_equal(f->ops->submit(f->engine, &y), 0);
	gsd_irq irq = wait_final(f, &y);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);

	size_t ix = wait_irq(f, &x, 0);
	pthread_mutex_lock(&f->lock);
	assert_int_equal(f->irqs[ix].kind, GSD_IRQ_ABORTED);
	assert_int_equal(f->irqs[ix].stop_offset, spin_at);
	pthread_mutex_unlock(&f->lock);
	size_t last = ix;
	for (size_t i = 0; i < 3; i++) {
		size_t at = wait_irq(f, &q[i], 0);
		pthread_mutex_lock(&f->lock);
		assert_int_equal(f->irqs[at].kind, GSD_IRQ_ABORTED);
		assert_int_equal(f->irqs[at].stop_offset, 0);
		assert_int_equal(f->irqs[at].spin_done_us, i == 1 ? 7 : 0);
		pthread_mutex_unlock(&f->lock);
		assert_true(at > last);
		last = at;
		gsd_irq all[4];
		assert_int_equal(irqs_of(f, &q[i], all, 4), 1); /* never STARTED */
	}
	/* y ran after all of them, and only y wrote A. */
	assert_true(wait_irq(f, &y, GSD_IRQ_STARTED) > last);
	assert_true(all_bytes(host(f, ADDR_A), 4, 0xbb));
	assert_true(all_bytes(host(f, ADDR_B), 4, 0xaa));
}

/* The null backend takes the new fields and the reset without effect. */
static void test_null_backend_budget_reset(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_null, false);
	assert_non_null(f->ops->reset);

	dma d = {0};
	emit(&d, spin_np(10u * 1000 * 1000));
	emit(&d, signal_cmd(3, 4));
	gsd_exec x[4];
	for (size_t i = 0; i < 4; i++) {
		x[i] = packet(&d, ranges_abr, 3);
		x[i].budget_ns = 1;
		x[i].tdr_ns = 1;
		assert_int_equal(f->ops->submit(f->engine, &x[i]), 0);
	}
	f->ops->reset(f->engine);
	f->ops->preempt(f->engine);
	for (size_t i = 0; i < 4; i++) {
		gsd_irq irq = wait_final(f, &x[i]);
		assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
		assert_int_equal(irq.engine_ns, 0);
		wait_irq(f, &x[i], GSD_IRQ_FENCE_SIGNAL);
	}
}

/* ---- throughput: 64 MiB through the engine vs plain memset/memcpy (printed) ---- */

#define BIG    (64u << 20)
#define ROUNDS 7

static double gib_per_s(uint64_t ns)
{
	return ns ? (double)BIG / (double)ns * 1e9 / (double)(1u << 30) : 0.0;
}

/* Engine time (as the engine measured it) of a one-command packet. */
static uint64_t engine_time(fixture *f, gs_isa_cmd c, const gsd_range *ranges, size_t n)
{
	dma d = {0};
	emit(&d, c);
	gsd_exec x = packet(&d, ranges, n);
	assert_int_equal(f->ops->submit(f->engine, &x), 0);
	gsd_irq irq = wait_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	forget_irqs(f); /* the recorder is bounded; x goes out of scope */
	return irq.engine_ns;
}

static void keep_min(uint64_t *best, uint64_t t)
{
	if (t < *best)
		*best = t;
}

/*
 * Not a pass/fail benchmark (the figures depend on the machine); it checks the 64 MiB
 * results and prints best-of-ROUNDS throughputs, the rounds interleaving the library call
 * and the engine command so that both see the same machine state.
 */
static void test_throughput_64mib(void **state)
{
	fixture *f = *state;
	for (uint32_t id = 3; id <= 4; id++) {
		f->mem.seg[id].id = id;
		f->mem.seg[id].size = BIG;
		f->mem.seg[id].base = malloc(BIG);
		assert_non_null(f->mem.seg[id].base);
		memset(f->mem.seg[id].base, (int)id, BIG); /* fault the pages in before timing */
	}
	uint8_t *src = f->mem.seg[3].base, *dst = f->mem.seg[4].base;
	const uint64_t gsrc = gs_addr_make(3, 0), gdst = gs_addr_make(4, 0);
	const gsd_range big[] = {{gsrc, BIG, false}, {gdst, BIG, true}};
	start_engine(f, &gsd_engine_emu, false);

	/* FILL_DIRECT (gs_isa_fill on this thread) separates FILL's algorithm from the engine;
	 * FILL_BYTE (the memset path through the engine) shows what the engine thread and its
	 * core placement alone cost. */
	enum { MEMSET, FILL_DIRECT, FILL, FILL_BYTE, MEMCPY, COPY, NTIMES };
	uint64_t best[NTIMES];
	for (int k = 0; k < NTIMES; k++)
		best[k] = UINT64_MAX;
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t0 = now_ns();
		memset(dst, r, BIG);
		keep_min(&best[MEMSET], now_ns() - t0);
		t0 = now_ns();
		gs_isa_fill(dst, BIG, 0xa1b2c3d4u);
		keep_min(&best[FILL_DIRECT], now_ns() - t0);
		keep_min(&best[FILL], engine_time(f, fill(gdst, BIG, 0xa1b2c3d4u), big, 2));
		keep_min(&best[FILL_BYTE], engine_time(f, fill(gdst, BIG, 0x5a5a5a5au), big, 2));
		t0 = now_ns();
		memcpy(dst, src, BIG);
		keep_min(&best[MEMCPY], now_ns() - t0);
		memset(dst, 0, BIG);
		keep_min(&best[COPY], engine_time(f, copy(gdst, gsrc, BIG), big, 2));
	}
	assert_memory_equal(dst, src, BIG);
	/* A fill of BIG - 1 bytes: the tail gets the pattern's first three bytes, the last
	 * byte keeps the copied source. */
	engine_time(f, fill(gdst, BIG - 1, 0xa1b2c3d4u), big, 2);
	for (size_t i = 0; i < BIG - 1; i += 4093)
		assert_int_equal(dst[i], (uint8_t)(0xa1b2c3d4u >> (8 * (i % 4))));
	assert_int_equal(dst[BIG - 4], 0xd4);
	assert_int_equal(dst[BIG - 2], 0xb2);
	assert_int_equal(dst[BIG - 1], 3);

	printf("[ throughput ] 64 MiB, best of %d, engine time as the engine measured it:\n",
	       ROUNDS);
	printf("    memset               %6.2f GiB/s\n", gib_per_s(best[MEMSET]));
	printf("    gs_isa_fill direct   %6.2f GiB/s  (%.2f x memset)\n",
	       gib_per_s(best[FILL_DIRECT]), (double)best[MEMSET] / (double)best[FILL_DIRECT]);
	printf("    FILL 0xa1b2c3d4      %6.2f GiB/s  (%.2f x memset)\n", gib_per_s(best[FILL]),
	       (double)best[MEMSET] / (double)best[FILL]);
	printf("    FILL 0x5a5a5a5a      %6.2f GiB/s  (%.2f x memset)\n",
	       gib_per_s(best[FILL_BYTE]), (double)best[MEMSET] / (double)best[FILL_BYTE]);
	printf("    memcpy               %6.2f GiB/s\n", gib_per_s(best[MEMCPY]));
	printf("    COPY                 %6.2f GiB/s  (%.2f x memcpy)\n", gib_per_s(best[COPY]),
	       (double)best[MEMCPY] / (double)best[COPY]);
}

/* ---- edge cases every backend must execute as the emulator does ---- */

/* Both segments whole, written. */
static const gsd_range ranges_all[] = {
        {GPU_ADDR(1, 0), SEG_SIZE, true},
        {GPU_ADDR(2, 0), SEG_SIZE, true},
};

/* A small deterministic generator (splitmix64) for sizes, offsets and bytes. */
static uint64_t next_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static void random_bytes(uint8_t *p, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)next_rand(seed);
}

/* Runs one command alone and expects it to complete. */
static void run_one(fixture *f, gs_isa_cmd c)
{
	dma d = {0};
	emit(&d, c);
	gsd_exec x = packet(&d, ranges_all, 2);
	gsd_irq irq = run_final(f, &x);
	if (irq.kind != GSD_IRQ_DMA_COMPLETED)
		fail_msg("op %u: final irq %d: %s", c.op, irq.kind, irq.detail);
	forget_irqs(f);
}

/* CHECKSUM over random bytes at every alignment and many sizes (across the 32-byte stripes and
 * the 8/4/1-byte tails of XXH64) equals the library's XXH64. */
static void test_checksum_matches_library(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	uint64_t seed = 42;
	uint8_t *src = host(f, GPU_ADDR(1, 0));
	random_bytes(src, 256 * 1024, &seed);
	static const uint64_t sizes[] = {0,  1,  3,  4,  7,   8,    15,   31,
	                                 32, 33, 63, 64, 100, 4095, 65537};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) * 3; i++) {
		uint64_t size = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
		uint64_t off = next_rand(&seed) % 4096;
		uint64_t out = GPU_ADDR(2, 8 * i + (i % 3)); /* unaligned results too */
		run_one(f, checksum(out, GPU_ADDR(1, off), size));
		uint64_t want = gs_isa_checksum(src + off, size);
		uint64_t got = gs_le64_get(host(f, out));
		if (got != want)
			fail_msg("CHECKSUM of %" PRIu64 " bytes at +%" PRIu64 ": %016" PRIx64
			         " != XXH64 %016" PRIx64,
			         size, off, got, want);
	}
}

/* Long CHECKSUMs: sizes around 1 MiB (where the Vulkan backend starts hashing in several
 * dispatches) and 2 MiB - 8 (65,535 stripes: past it lavapipe cut the one loop short, and the
 * packet completed with a wrong value), up to 5 MiB, at odd offsets, equal the library's
 * XXH64; two long ones in one packet do not share their carried state. */
static void test_checksum_long(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	uint64_t seed = 7;
	uint8_t *src = host(f, GPU_ADDR(1, 0));
	random_bytes(src, 6u << 20, &seed);
	static const uint64_t sizes[] = {(1u << 20) - 1,  1u << 20,        (1u << 20) + 31,
	                                 (1u << 20) + 32, (2u << 20) - 9,  (2u << 20) - 8,
	                                 2u << 20,        (2u << 20) + 33, (5u << 20) + 7};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t off = 1 + next_rand(&seed) % 4095;
		uint64_t out = GPU_ADDR(2, 16 * i + 3);
		run_one(f, checksum(out, GPU_ADDR(1, off), sizes[i]));
		uint64_t want = gs_isa_checksum(src + off, sizes[i]);
		uint64_t got = gs_le64_get(host(f, out));
		if (got != want)
			fail_msg("CHECKSUM of %" PRIu64 " bytes at +%" PRIu64 ": %016" PRIx64
			         " != XXH64 %016" PRIx64,
			         sizes[i], off, got, want);
	}
	dma d = {0};
	emit(&d, checksum(GPU_ADDR(2, 1024), GPU_ADDR(1, 5), 3u << 20));
	emit(&d, checksum(GPU_ADDR(2, 2048), GPU_ADDR(1, 77), (3u << 20) + 5));
	gsd_exec x = packet(&d, ranges_all, 2);
	gsd_irq irq = run_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	forget_irqs(f);
	assert_true(gs_le64_get(host(f, GPU_ADDR(2, 1024))) == gs_isa_checksum(src + 5, 3u << 20));
	assert_true(gs_le64_get(host(f, GPU_ADDR(2, 2048))) ==
	            gs_isa_checksum(src + 77, (3u << 20) + 5));
}

/* FILL at every start alignment with sizes around the 4-byte words, and a long unaligned one:
 * the pattern stays in phase with the start, and no byte outside the range changes. */
static void test_fill_unaligned(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	uint8_t *mem = host(f, GPU_ADDR(1, 0));
	static uint8_t want[70000];
	memset(want, 0xee, sizeof(want));
	memset(mem, 0xee, sizeof(want));
	for (uint64_t off = 0; off < 8; off++)
		for (uint64_t size = 0; size < 14; size++) {
			uint64_t at = 64 * (off * 14 + size) + off;
			run_one(f, fill(GPU_ADDR(1, at), size, 0x04030201u));
			gs_isa_fill(want + at, size, 0x04030201u);
		}
	run_one(f, fill(GPU_ADDR(1, 8193), 60001, 0xa1b2c3d4u));
	gs_isa_fill(want + 8193, 60001, 0xa1b2c3d4u);
	assert_memory_equal(mem, want, sizeof(want));
}

/* COPY with memmove semantics: overlapping forwards and backwards by small and large shifts,
 * longer than a backend's staging step, and unaligned. */
static void test_copy_overlap(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	uint8_t *mem = host(f, GPU_ADDR(1, 0));
	uint8_t *want = malloc(SEG_SIZE);
	assert_non_null(want);
	uint64_t seed = 7;
	random_bytes(mem, SEG_SIZE, &seed);
	memcpy(want, mem, SEG_SIZE);
	static const struct {
		uint64_t dst, src, size;
	} moves[] = {
	        {100, 101, 5000},      {101, 100, 5000},     {3, 4096 + 1, 900000},
	        {4096 + 1, 3, 900000}, {0, 1, SEG_SIZE - 1}, {1, 0, SEG_SIZE - 1},
	        {5000, 5000, 10},      {65536, 17, 12345},
	};
	for (size_t i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
		run_one(f,
		        copy(GPU_ADDR(1, moves[i].dst), GPU_ADDR(1, moves[i].src), moves[i].size));
		memmove(want + moves[i].dst, want + moves[i].src, moves[i].size);
		if (memcmp(mem, want, SEG_SIZE) != 0)
			fail_msg("move %zu (%" PRIu64 " <- %" PRIu64 ", %" PRIu64 " bytes) differs",
			         i, moves[i].dst, moves[i].src, moves[i].size);
	}
	/* Between segments, unaligned both sides. */
	run_one(f, copy(GPU_ADDR(2, 7), GPU_ADDR(1, 13), 777777));
	assert_memory_equal(host(f, GPU_ADDR(2, 7)), want + 13, 777777);

	/* In one packet: two overlapping moves of disjoint ranges (both through a backend's
	 * staging), then a copy of what the first one wrote, then a FILL over what the copy read:
	 * each command sees the bytes the ones before it left. */
	uint8_t *other = host(f, GPU_ADDR(2, 0));
	memcpy(other, mem, 4096);
	dma d = {0};
	emit(&d, copy(GPU_ADDR(1, 1000), GPU_ADDR(1, 1003), 3000));
	emit(&d, copy(GPU_ADDR(1, 200003), GPU_ADDR(1, 200000), 3000));
	emit(&d, copy(GPU_ADDR(2, 100), GPU_ADDR(1, 1000), 3000));
	emit(&d, fill(GPU_ADDR(1, 1500), 100, 0xabababab));
	memmove(want + 1000, want + 1003, 3000);
	memmove(want + 200003, want + 200000, 3000);
	uint8_t *want2 = malloc(4096);
	assert_non_null(want2);
	memcpy(want2, other, 4096);
	memcpy(want2 + 100, want + 1000, 3000);
	memset(want + 1500, 0xab, 100);
	gsd_exec x = packet(&d, ranges_all, 2);
	assert_int_equal(run_final(f, &x).kind, GSD_IRQ_DMA_COMPLETED);
	assert_memory_equal(mem, want, SEG_SIZE);
	assert_memory_equal(other, want2, 4096);
	free(want2);
	free(want);
}

/* Swizzle and Unswizzle transfers equal the CPU's gsd_swizzle, tail included, and undo each
 * other. */
static void test_swizzle_transfer(void **state)
{
	fixture *f = *state;
	start_engine(f, &gsd_engine_emu, false);
	static const uint32_t pitches[] = {64, 128, 1024};
	uint64_t seed = 9;
	for (size_t i = 0; i < 3; i++) {
		uint32_t pitch = pitches[i];
		uint64_t size = 3 * gsd_swizzle_band(pitch) + 1000 + i;
		uint8_t *lin = host(f, GPU_ADDR(1, 0));
		uint8_t *til = host(f, GPU_ADDR(2, 0));
		uint8_t *back = host(f, GPU_ADDR(1, 512 * 1024));
		random_bytes(lin, size, &seed);
		uint8_t *want = malloc(size);
		assert_non_null(want);
		assert_int_equal(gsd_swizzle(want, lin, size, pitch), 0);
		run_one(f, (gs_isa_cmd){.op = GS_OP_TRANSFER,
		                        .dst = GPU_ADDR(2, 0),
		                        .src = GPU_ADDR(1, 0),
		                        .size = size,
		                        .transfer_flags = GS_ISA_TRANSFER_SWIZZLE,
		                        .pitch = pitch});
		assert_memory_equal(til, want, size);
		run_one(f, (gs_isa_cmd){.op = GS_OP_TRANSFER,
		                        .dst = GPU_ADDR(1, 512 * 1024),
		                        .src = GPU_ADDR(2, 0),
		                        .size = size,
		                        .transfer_flags = GS_ISA_TRANSFER_UNSWIZZLE,
		                        .pitch = pitch});
		assert_memory_equal(back, lin, size);
		free(want);
	}
}

/* ---- a GPU backend's own: memory the CPU does not map, device loss, the GPU's clock ---- */

/* Opens a second device of the backend under test with its own settings. */
static gsd_backend *open_backend(uint32_t nodes, bool device_only)
{
	char err[512];
	gsd_backend_config bc = {.adapter = "test2",
	                         .device = getenv("GS_TEST_DEVICE"),
	                         .nodes = nodes,
	                         .device_only_memory = device_only};
	gsd_backend *b = NULL;
	if (gsd_backend_open(g_ops, &bc, &b, err, sizeof(err)) != 0)
		fail_msg("opening a second device: %s", err);
	return b;
}

static void make_segment(gsd_backend *b, gsd_memory *mem, uint32_t id, gsd_mem_kind kind,
                         uint64_t size)
{
	char err[512];
	if (gsd_backend_segment_create(g_ops, b, id, kind, size, &mem->seg[id], err, sizeof(err)) !=
	    0)
		fail_msg("segment %u: %s", id, err);
}

/* An engine of the fixture's (its interrupts land in f) on device b, memory mem. */
static gsd_engine *engine_on(fixture *f, gsd_backend *b, const gsd_memory *mem, uint32_t node)
{
	gsd_engine_config cfg = {.node = node,
	                         .backend = b,
	                         .name = "test2",
	                         .memory = mem,
	                         .irq = on_irq,
	                         .irq_arg = f};
	gsd_engine *e = NULL;
	assert_int_equal(g_ops->create(&cfg, &e), 0);
	return e;
}

static void fill_random(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/*
 * Memory segments in device memory the CPU does not map (a GPU without a resizable BAR, or
 * "local_memory": "device"): no base, every CPU access a copy through the staging buffer, in
 * steps of its size, at any alignment, and the engine's commands see the same bytes.
 */
static void test_vk_staging(void **state)
{
	fixture *f = *state;
	const uint64_t big = (9u << 20) + 64;
	gsd_backend *b = open_backend(1, true);
	gsd_memory mem = {0};
	make_segment(b, &mem, 1, GSD_MEM_LOCAL, big);
	make_segment(b, &mem, 2, GSD_MEM_APERTURE, SEG_SIZE);
	assert_null(mem.seg[1].base);
	assert_non_null(mem.seg[2].base);
	gsd_backend_info bi;
	gsd_backend_describe(g_ops, b, &bi);
	assert_string_equal(bi.cpu_access, "staging");

	/* Through the staging buffer and back, across its 4 MiB steps, unaligned. */
	const size_t n = (9u << 20) + 5;
	uint8_t *in = malloc(n), *out = malloc(n);
	assert_non_null(in);
	assert_non_null(out);
	fill_random(in, n, 7);
	char err[256];
	assert_int_equal(
	        gsd_backend_segment_write(g_ops, b, &mem.seg[1], 3, in, n, err, sizeof(err)), 0);
	memset(out, 0, n);
	assert_int_equal(
	        gsd_backend_segment_read(g_ops, b, &mem.seg[1], 3, out, n, err, sizeof(err)), 0);
	assert_memory_equal(in, out, n);
	/* Clearing an unaligned range leaves its neighbours alone. */
	assert_int_equal(
	        gsd_backend_segment_clear(g_ops, b, &mem.seg[1], 7, 100003, err, sizeof(err)), 0);
	assert_int_equal(
	        gsd_backend_segment_read(g_ops, b, &mem.seg[1], 3, out, 100016, err, sizeof(err)),
	        0);
	assert_memory_equal(out, in, 4);
	assert_true(all_bytes(out + 4, 100003, 0));
	assert_memory_equal(out + 4 + 100003, in + 4 + 100003, 9);
	/* A range outside the segment is refused, not copied. */
	assert_int_not_equal(
	        gsd_backend_segment_read(g_ops, b, &mem.seg[1], big - 4, out, 8, err, sizeof(err)),
	        0);

	/* The engine's FILL and COPY land where the CPU's copies find them. */
	f->engine = engine_on(f, b, &mem, NODE);
	f->ops = g_ops;
	const gsd_range ranges[] = {{GPU_ADDR(1, 0), big, true}, {GPU_ADDR(2, 0), SEG_SIZE, true}};
	dma d = {0};
	emit(&d, fill(GPU_ADDR(1, 1), 1000, 0xa1b2c3d4u));
	emit(&d, copy(GPU_ADDR(2, 5), GPU_ADDR(1, 0), 1002));
	gsd_exec x = packet(&d, ranges, 2);
	gsd_irq irq = run_final(f, &x);
	assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
	assert_int_equal(
	        gsd_backend_segment_read(g_ops, b, &mem.seg[1], 0, out, 1002, err, sizeof(err)), 0);
	for (size_t i = 1; i <= 1000; i++)
		assert_int_equal(out[i], (uint8_t)(0xa1b2c3d4u >> (8 * ((i - 1) % 4))));
	assert_int_equal(out[1001], 0); /* cleared above */
	assert_memory_equal(mem.seg[2].base + 5, out, 1002);

	stop_engine(f);
	gsd_backend_segment_destroy(g_ops, b, &mem.seg[1]);
	gsd_backend_segment_destroy(g_ops, b, &mem.seg[2]);
	gsd_backend_close(g_ops, b);
	free(in);
	free(out);
}

/* The final interrupt of x on any node, within WAIT_S. */
static gsd_irq final_of(fixture *f, const gsd_exec *x)
{
	size_t i = wait_irq(f, x, 0);
	pthread_mutex_lock(&f->lock);
	gsd_irq irq = f->irqs[i];
	pthread_mutex_unlock(&f->lock);
	return irq;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A device loss (injected: a SPIN of GSD_VULKAN_INJECT_LOSS microseconds): the packet whose
 * work saw it FAULTS with device_lost; a packet running on another engine then stops at its
 * next slice as innocent (ABORTED, device_lost, with its SPIN progress); one submitted before
 * recovery aborts before its first command. recover() brings the device back with every
 * segment's bytes, and the aborted packet resumes and completes. Twice.
 */
static void test_vk_device_loss(void **state)
{
	fixture *f = *state;
	setenv("GSD_VULKAN_INJECT_LOSS", "777", 1);
	gsd_backend *b = open_backend(2, false);
	unsetenv("GSD_VULKAN_INJECT_LOSS");
	gsd_memory mem = {0};
	make_segment(b, &mem, 1, GSD_MEM_LOCAL, SEG_SIZE);
	make_segment(b, &mem, 2, GSD_MEM_SYSTEM, SEG_SIZE);
	memset(mem.seg[1].base, 0xa5, SEG_SIZE);
	memset(mem.seg[2].base, 0x5a, SEG_SIZE);
	f->ops = g_ops;
	f->engine = engine_on(f, b, &mem, NODE);
	gsd_engine *other = engine_on(f, b, &mem, NODE + 1);
	const gsd_range ranges[] = {{GPU_ADDR(1, 0), SEG_SIZE, true},
	                            {GPU_ADDR(2, 0), SEG_SIZE, true}};

	for (int round = 0; round < 2; round++) {
		forget_irqs(f);
		/* Another engine runs a long SPIN when the device goes. */
		dma dl = {0};
		emit(&dl, fill(GPU_ADDR(2, 64), 64, 0x33333333u));
		emit(&dl, signal_cmd(1, 1));
		size_t long_at = emit(&dl, spin(200000));
		gsd_exec xl = packet(&dl, ranges, 2);
		assert_int_equal(g_ops->submit(other, &xl), 0);
		/* Its FILL is done (STARTED alone comes before the engine ran any command: a loss
		 * then would stop it at offset 0). */
		wait_irq(f, &xl, GSD_IRQ_FENCE_SIGNAL);

		dma dg = {0};
		emit(&dg, fill(GPU_ADDR(1, 0), 64, 0x11111111u));
		size_t lose_at = emit(&dg, spin(777));
		gsd_exec xg = packet(&dg, ranges, 2);
		gsd_irq irq = run_final(f, &xg);
		assert_int_equal(irq.kind, GSD_IRQ_DMA_FAULTED);
		assert_true(irq.device_lost);
		assert_int_equal(irq.stop_offset, lose_at);
		assert_non_null(strstr(irq.detail, "device lost"));

		gsd_irq li = final_of(f, &xl);
		assert_int_equal(li.kind, GSD_IRQ_ABORTED);
		assert_true(li.device_lost);
		assert_int_equal(li.stop_offset, long_at);
		assert_true(li.spin_done_us < 200000);

		/* Submitted while the device is lost: aborted before its first command. */
		dma dq = {0};
		emit(&dq, fill(GPU_ADDR(1, 256), 64, 0x44444444u));
		gsd_exec xq = packet(&dq, ranges, 2);
		gsd_irq qi = run_final(f, &xq);
		assert_int_equal(qi.kind, GSD_IRQ_ABORTED);
		assert_true(qi.device_lost);
		assert_int_equal(qi.stop_offset, 0);

		char err[512];
		assert_int_equal(g_ops->recover(b, &mem, err, sizeof(err)), 0);
		assert_non_null(mem.seg[1].base);
		assert_non_null(mem.seg[2].base);
		/* Every byte carried over: what ran before the loss, and the rest. */
		assert_true(all_bytes(mem.seg[1].base, 64, 0x11));
		assert_true(all_bytes(mem.seg[1].base + 64, SEG_SIZE - 64, 0xa5));
		assert_true(all_bytes(mem.seg[2].base, 64, 0x5a));
		assert_true(all_bytes(mem.seg[2].base + 64, 64, 0x33));
		assert_true(all_bytes(mem.seg[2].base + 128, SEG_SIZE - 128, 0x5a));

		/* The innocent packet resumes where it stopped and completes. */
		xl.resume_offset = li.stop_offset;
		xl.spin_done_us = li.spin_done_us;
		gsd_irq ri = {0};
		forget_irqs(f);
		assert_int_equal(g_ops->submit(other, &xl), 0);
		ri = final_of(f, &xl);
		assert_int_equal(ri.kind, GSD_IRQ_DMA_COMPLETED);
		xq.resume_offset = 0;
		assert_int_equal(run_final(f, &xq).kind, GSD_IRQ_DMA_COMPLETED);
		assert_true(all_bytes(mem.seg[1].base + 256, 64, 0x44));
		memset(mem.seg[1].base, 0xa5, 64);
		memset(mem.seg[1].base + 256, 0xa5, 64);
	}
	g_ops->destroy(other);
	stop_engine(f);
	gsd_backend_segment_destroy(g_ops, b, &mem.seg[1]);
	gsd_backend_segment_destroy(g_ops, b, &mem.seg[2]);
	gsd_backend_close(g_ops, b);
}

/* A run's start and end as the GPU's timestamps tell them, on the daemon's clock
 * (CLOCK_REALTIME): inside the window the test saw, and at least the engine time apart. */
static void test_vk_gpu_clock(void **state)
{
	fixture *f = *state;
	start_engine(f, g_ops, false);
	const gsd_range ranges[] = {{ADDR_A, ALLOC_SIZE, true}};
	for (int i = 0; i < 3; i++) {
		dma d = {0};
		emit(&d, fill(ADDR_A, 64, 0x01020304u));
		emit(&d, spin(3000));
		emit(&d, fill(ADDR_A + 64, 64, 0x01020304u));
		gsd_exec x = packet(&d, ranges, 1);
		forget_irqs(f);
		uint64_t t0 = realtime_ns();
		gsd_irq irq = run_final(f, &x);
		uint64_t t1 = realtime_ns();
		assert_int_equal(irq.kind, GSD_IRQ_DMA_COMPLETED);
		assert_true(irq.gpu_start_ns && irq.gpu_end_ns);
		/* The clocks are matched to within a few microseconds; 1 ms of slack. */
		assert_true(irq.gpu_start_ns + 1000000u >= t0);
		assert_true(irq.gpu_end_ns <= t1 + 1000000u);
		assert_true(irq.gpu_end_ns >= irq.gpu_start_ns);
		assert_true(irq.engine_ns >= 3000000u);
		assert_true(irq.gpu_end_ns - irq.gpu_start_ns + 100000u >= irq.engine_ns);
	}
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	        T(test_fill_copy_checksum),
	        T(test_signal_and_order),
	        T(test_page_faults),
	        T(test_range_outside_segment),
	        T(test_decode_fault),
	        T(test_null_rendering),
	        T(test_null_backend),
	        T(test_preempt_and_resume),
	        T(test_preempt_running_spin),
	        T(test_preempt_idle_is_noop),
	        T(test_virtual_clock),
	        T(test_wall_spin),
	        T(test_destroy_aborts),
	        T(test_budget_virtual_deterministic),
	        T(test_budget_virtual_resume),
	        T(test_virtual_timeout),
	        T(test_budget_wall),
	        T(test_preempt_inside_wall_spin),
	        T(test_preempt_latency),
	        T(test_spin_cpu_cost),
	        T(test_reset_aborts_nonpreemptible),
	        T(test_reset_aborts_queue),
	        T(test_null_backend_budget_reset),
	        T(test_throughput_64mib),
	        T(test_checksum_matches_library),
	        T(test_checksum_long),
	        T(test_fill_unaligned),
	        T(test_copy_overlap),
	        T(test_swizzle_transfer),
	};
	/* What a GPU backend must do as the emulator does; the rest is the emulator's own
	 * (its virtual clock, the null backend, the CPU a sleeping SPIN costs). */
	const struct CMUnitTest gpu_tests[] = {
	        T(test_fill_copy_checksum),
	        T(test_signal_and_order),
	        T(test_page_faults),
	        T(test_range_outside_segment),
	        T(test_decode_fault),
	        T(test_null_rendering),
	        T(test_preempt_and_resume),
	        T(test_preempt_running_spin),
	        T(test_preempt_idle_is_noop),
	        T(test_wall_spin),
	        T(test_destroy_aborts),
	        T(test_budget_wall),
	        T(test_preempt_inside_wall_spin),
	        T(test_preempt_latency),
	        T(test_reset_aborts_nonpreemptible),
	        T(test_reset_aborts_queue),
	        T(test_checksum_matches_library),
	        T(test_checksum_long),
	        T(test_fill_unaligned),
	        T(test_copy_overlap),
	        T(test_swizzle_transfer),
	        T(test_vk_staging),
	        T(test_vk_device_loss),
	        T(test_vk_gpu_clock),
	};
#undef T
	const char *backend = getenv("GS_TEST_BACKEND");
	if (!backend || !*backend || strcmp(backend, "emu") == 0)
		return cmocka_run_group_tests(tests, NULL, NULL);
	g_ops = gsd_engine_find(backend);
	/* Keeps lavapipe mapped past vkDestroyInstance, so LeakSanitizer sees what its globals
	 * hold (tests/support/keep_icd.c says why; the daemon under test preloads that). */
	(void)dlopen("libvulkan_lvp.so", RTLD_NOW | RTLD_NODELETE);
	char err[512];
	gsd_backend_config bc = {.adapter = "test", .device = getenv("GS_TEST_DEVICE"), .nodes = 1};
	if (!g_ops || gsd_backend_open(g_ops, &bc, &g_backend, err, sizeof(err)) != 0) {
		fprintf(stderr, "GS_TEST_BACKEND=%s: %s\n", backend,
		        g_ops ? err : "unknown backend");
		return 1;
	}
	gsd_backend_info bi;
	gsd_backend_describe(g_ops, g_backend, &bi);
	printf("backend %s: %s on %s (%s)\n", backend, bi.api, bi.device, bi.driver);
	int rc = cmocka_run_group_tests(gpu_tests, NULL, NULL);
	gsd_backend_close(g_ops, g_backend);
	return rc;
}
