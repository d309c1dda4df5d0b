/* Present and RedirectedPresent: after the packet's commands run, allocation-list entry 0 is
 * copied into entry 1, a display surface; NullRendering skips that copy; a present whose entry
 * 1 is not a display surface is still accepted (every flag bit is) but copies nothing. */
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

#define SURFACE 65536u

typedef struct fx {
	gs_testd t;
	gs_client *c;
	uint64_t dev, ctx;
	gs_allocation_placement src, display, plain;
} fx;

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	if (!f || gs_testd_start(&f->t, NULL) != 0)
		return -1;
	f->c = itest_connect(&f->t, NULL);
	itest_layout lay;
	itest_layout_of(f->c, &lay);
	assert_int_equal(gs_device_create(f->c, "present", &f->dev), 0);
	f->ctx = itest_context(f->c, f->dev, 0, lay.paging_node);
	itest_alloc(f->c, f->dev, SURFACE, 0, 0, &f->src);
	gs_allocation_desc ad = {.device = f->dev, .size = SURFACE, .flags = GS_ALLOC_DISPLAY};
	assert_int_equal(gs_allocation_create(f->c, &ad, &f->display), 0);
	itest_alloc(f->c, f->dev, SURFACE, 0, 0, &f->plain);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	gs_close(f->c);
	gs_testd_stop(&f->t);
	gs_testd_cleanup(&f->t);
	free(f);
	return 0;
}

/* FILL the source, then present it into `target` (entry 1, written: a zero-byte FILL lists it). */
static int present(fx *f, uint64_t target, uint32_t pattern, uint32_t flags, uint64_t *packet)
{
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, f->src.allocation, 0, SURFACE, pattern), 0);
	assert_int_equal(gs_dmabuf_fill(&b, target, 0, 0, 0), 0);
	gs_submit_result r;
	int rv = gs_submit(f->c, f->ctx, &b, flags, &r);
	gs_dmabuf_free(&b);
	if (rv == 0) {
		gs_packet_state st;
		assert_int_equal(gs_packet_wait(f->c, r.packet, 10000, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
		*packet = r.packet;
	}
	return rv;
}

static void expect_surface(fx *f, uint32_t pattern)
{
	uint8_t *got = malloc(SURFACE), *want = malloc(SURFACE);
	assert_non_null(got);
	assert_non_null(want);
	gs_isa_fill(want, SURFACE, pattern);
	assert_int_equal(gs_allocation_read(f->c, f->display.allocation, 0, got, SURFACE), 0);
	assert_memory_equal(got, want, SURFACE);
	free(got);
	free(want);
}

static void test_present_copies(void **state)
{
	fx *f = *state;
	uint64_t pk;
	assert_int_equal(present(f, f->display.allocation, 0x11223344u, GS_SUBMIT_PRESENT, &pk), 0);
	expect_surface(f, 0x11223344u);
	assert_int_equal(
	        present(f, f->display.allocation, 0x55667788u, GS_SUBMIT_REDIRECTED_PRESENT, &pk),
	        0);
	expect_surface(f, 0x55667788u);
}

static void test_null_rendering_skips_copy(void **state)
{
	fx *f = *state;
	uint64_t pk;
	assert_int_equal(present(f, f->display.allocation, 0x0a0b0c0du, GS_SUBMIT_PRESENT, &pk), 0);
	assert_int_equal(present(f, f->display.allocation, 0x99999999u,
	                         GS_SUBMIT_PRESENT | GS_SUBMIT_NULL_RENDERING, &pk),
	                 0);
	expect_surface(f, 0x0a0b0c0du); /* neither the FILL nor the copy ran */
}

static void test_present_without_display_surface(void **state)
{
	fx *f = *state;
	uint64_t pk = 0;
	/* Entry 1 is a plain allocation: the present is recorded, nothing is copied into it. */
	assert_int_equal(present(f, f->plain.allocation, 0x12345678u, GS_SUBMIT_PRESENT, &pk), 0);
	uint8_t *got = malloc(SURFACE), *zero = calloc(1, SURFACE);
	assert_non_null(got);
	assert_non_null(zero);
	assert_int_equal(gs_allocation_read(f->c, f->plain.allocation, 0, got, SURFACE), 0);
	assert_memory_equal(got, zero, SURFACE);
	free(got);
	free(zero);
	/* No allocation at all: accepted and completed. */
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(f->c, f->ctx, &b, GS_SUBMIT_REDIRECTED_PRESENT, &r), 0);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(f->c, r.packet, 10000, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	gs_dmabuf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_present_copies, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_null_rendering_skips_copy, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_present_without_display_surface, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
