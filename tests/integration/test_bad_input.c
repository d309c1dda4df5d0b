/*
 * Bad input against a real gpuschedd: every kind of bad request gets its own status code, is
 * audited in the `errors` table, and leaves the daemon serving the next request correctly.
 * Also: raw garbage and oversize messages on the wire, a packet that faults, clients that
 * vanish mid-request or churn, and tenant isolation.
 *
 * "Audited" is checked exactly: the `errors` row count before and after each bad request,
 * with an audit barrier in between (see itest_audit_barrier), and the newest row's status.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "isa.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

#define MAX_MESSAGE    65536
#define MAX_DMA_BUFFER 32768
#define NO_SUCH_HANDLE UINT64_C(987654321)

typedef struct fx {
	gs_testd t;
	itest_config cfg;
	gs_client *c;
	itest_layout lay;
	uint64_t dev;
	uint64_t ctx;         /* node 0 */
	uint64_t barrier_ctx; /* never faulted, used for audit barriers */
} fx;

static int start(void **state, const char *config_json)
{
	fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	assert_int_equal(itest_config_write(&f->cfg, config_json), 0);
	const char *args[] = {"--config", f->cfg.path, NULL};
	if (gs_testd_start(&f->t, args) != 0) {
		gs_testd_cleanup(&f->t);
		itest_config_cleanup(&f->cfg);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup(void **state)
{
	char json[256];
	snprintf(json, sizeof(json), "{\"max_message\": %d, \"max_dma_buffer\": %d}\n", MAX_MESSAGE,
	         MAX_DMA_BUFFER);
	return start(state, json);
}

/* Called first by each test (not by setup: a failure here must still reach teardown). */
static fx *ready(void **state)
{
	fx *f = *state;
	f->c = itest_connect(&f->t, NULL);
	itest_layout_of(f->c, &f->lay);
	assert_int_equal(f->lay.max_dma_buffer, MAX_DMA_BUFFER);
	assert_int_equal(gs_device_create(f->c, "bad-input", &f->dev), 0);
	f->ctx = itest_context(f->c, f->dev, 0, f->lay.paging_node);
	f->barrier_ctx = itest_context(f->c, f->dev, 1, f->lay.paging_node);
	return f;
}

static const char tenants_json[] = "{\"tenants\": ["
                                   "{\"name\": \"root\", \"token\": \"tok-root\", \"admin\": true},"
                                   "{\"name\": \"alice\", \"token\": \"tok-alice\"},"
                                   "{\"name\": \"bob\", \"token\": \"tok-bob\"}]}\n";

static int setup_tenants(void **state)
{
	return start(state, tenants_json);
}

static int teardown(void **state)
{
	fx *f = *state;
	if (!f)
		return 0;
	gs_close(f->c);
	bool alive = gs_testd_alive(&f->t);
	int rc = gs_testd_stop(&f->t);
	if (!alive || rc != 0) {
		fprintf(stderr, "gpuschedd %s (exit %d)\n", alive ? "did not stop cleanly" : "died",
		        rc);
		gs_testd_dump_log(&f->t);
	}
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
	free(f);
	return alive && rc == 0 ? 0 : -1;
}

/* ---- the audited-error check ---- */

/* The bad request returned `rv`; it must be `status`, audited as one new `errors` row with
 * that status, and the daemon must go on serving (the barrier is a good request). */
static void audited(fx *f, int64_t before, int rv, int status, const char *what)
{
	if (rv != status)
		fail_msg("%s: got %s (%d), want %s (%d): %s", what, gs_status_name(rv), rv,
		         gs_status_name(status), status, gs_client_message(f->c));
	itest_audit_barrier(f->c, f->barrier_ctx);
	int64_t after = itest_audit_errors(f->t.db);
	if (after != before + 1)
		fail_msg("%s: %" PRId64 " new errors rows, want 1", what, after - before);
	assert_int_equal(itest_audit_last_error_status(f->t.db), status);
}

#define EXPECT_AUDITED(f, status, expr)                                                            \
	do {                                                                                       \
		int64_t before_ = itest_audit_errors((f)->t.db);                                   \
		assert_true(before_ >= 0);                                                         \
		int rv_ = (expr);                                                                  \
		audited((f), before_, rv_, (status), #expr);                                       \
	} while (0)

/* ---- raw nng ---- */

/* ---- malformed and oversize messages ---- */

static void test_garbage_bytes(void **state)
{
	fx *f = ready(state);
	/* An invalid wire type, a varint that never ends, a length running past the end. */
	static const uint8_t g1[] = {0x0f, 0x01, 0x02};
	static const uint8_t g2[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
	                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	static const uint8_t g3[] = {0x12, 0x7f, 'x'};
	const struct {
		const uint8_t *p;
		size_t n;
	} cases[] = {{g1, sizeof(g1)}, {g2, sizeof(g2)}, {g3, sizeof(g3)}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		int64_t before = itest_audit_errors(f->t.db);
		Gpusched__V1__Response *resp;
		int rv = itest_raw_call(f->t.url, cases[i].p, cases[i].n, 10000, &resp);
		if (rv != 0)
			fail_msg("garbage %zu: %s", i, nng_strerror(rv));
		assert_int_equal(resp->status, GPUSCHED__V1__STATUS__STATUS_MALFORMED);
		assert_int_equal(resp->id, 0);
		assert_true(resp->message && resp->message[0]);
		gpusched__v1__response__free_unpacked(resp, NULL);
		audited(f, before, GS_STATUS_MALFORMED, GS_STATUS_MALFORMED, "garbage");
	}

	/* A well-formed request on the same path is answered normally, with its id. */
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__InfoRequest info = GPUSCHED__V1__INFO_REQUEST__INIT;
	req.id = 77;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_INFO;
	req.info = &info;
	size_t len;
	void *bytes = itest_pack(&req, &len);
	Gpusched__V1__Response *resp;
	assert_int_equal(itest_raw_call(f->t.url, bytes, len, 10000, &resp), 0);
	free(bytes);
	assert_int_equal(resp->id, 77);
	assert_int_equal(resp->status, 0);
	assert_int_equal(resp->body_case, GPUSCHED__V1__RESPONSE__BODY_INFO);
	gpusched__v1__response__free_unpacked(resp, NULL);

	/* A request without a body is refused, not crashed on. */
	req.body_case = GPUSCHED__V1__REQUEST__BODY__NOT_SET;
	bytes = itest_pack(&req, &len);
	int64_t before = itest_audit_errors(f->t.db);
	assert_int_equal(itest_raw_call(f->t.url, bytes, len, 10000, &resp), 0);
	free(bytes);
	int st = (int)resp->status;
	assert_int_equal(resp->id, 77);
	gpusched__v1__response__free_unpacked(resp, NULL);
	audited(f, before, st, GS_STATUS_INVALID_ARGUMENT, "empty request");
}

static void test_oversize(void **state)
{
	fx *f = ready(state);
	gs_allocation_placement a;
	itest_alloc(f->c, f->dev, 2u << 20, 0, 0, &a);
	size_t big = 4u << 20;
	uint8_t *data = calloc(1, big);
	assert_non_null(data);
	/* One message per transfer, whatever its size: the daemon's limits are under test. */
	gs_client_set_io_piece(f->c, 0);

	/* Between max_message and twice that: read, refused with TOO_LARGE. */
	EXPECT_AUDITED(f, GS_STATUS_TOO_LARGE,
	               gs_allocation_write(f->c, a.allocation, 0, data, MAX_MESSAGE + 30000));
	/* A response that would not fit in one message. */
	EXPECT_AUDITED(f, GS_STATUS_TOO_LARGE,
	               gs_allocation_read(f->c, a.allocation, 0, data, MAX_MESSAGE));
	/* A DMA buffer above max_dma_buffer (but inside one message). */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	while (buf.len <= MAX_DMA_BUFFER)
		assert_int_equal(gs_dmabuf_nop(&buf), 0);
	EXPECT_AUDITED(f, GS_STATUS_LIST_TOO_LARGE, gs_submit(f->c, f->ctx, &buf, 0, NULL));
	gs_dmabuf_free(&buf);

	/* Far beyond: nng drops the connection without reading it; the sender sees a timeout or
	 * a transport error, and nothing else is disturbed. */
	gs_client *c2 = itest_connect(&f->t, NULL);
	gs_client_set_timeout(c2, 1500);
	gs_client_set_io_piece(c2, 0);
	long long t0 = gs_test_now_ms();
	int rv = gs_allocation_write(c2, a.allocation, 0, data, big);
	assert_true(rv == GS_ERR_TIMEOUT || rv == GS_ERR_TRANSPORT);
	assert_true(gs_test_now_ms() - t0 < 10000);
	gs_close(c2);
	free(data);

	gs_daemon_info *info;
	assert_int_equal(gs_info(f->c, &info), 0);
	gs_info_free(info);
	uint8_t byte = 1;
	assert_int_equal(gs_allocation_write(f->c, a.allocation, 5, &byte, 1), 0);
	uint8_t two[2];
	assert_int_equal(gs_allocation_read(f->c, a.allocation, 4, two, 2), 0);
	assert_int_equal(two[0], 0);
	assert_int_equal(two[1], 1);
}

/* ---- unknown handles ---- */

static void test_unknown_handles(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	const uint64_t h = NO_SUCH_HANDLE;
	uint64_t out = 0;
	uint8_t b[8];
	gs_allocation_status ast;
	gs_allocation_placement pl;
	gs_allocation_desc ad = {.device = h, .size = 64};
	gs_context_desc cd;
	gs_context_desc_init(&cd, h, 0);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);

	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_device_destroy(c, h));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_context_create(c, &cd, &out, NULL));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_context_destroy(c, h));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_create(c, &ad, &pl));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_destroy(c, h));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_query(c, h, &ast));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_read(c, h, 0, b, 8));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_write(c, h, 0, b, 8));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND,
	               gs_allocation_set_priority(c, h, GS_ALLOC_PRIORITY_HIGH));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_set_preference(c, h, 0));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_sync_create(c, h, 0, &out));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_sync_signal(c, h, 1));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_sync_wait(c, h, 1, 100, NULL));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_sync_destroy(c, h));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_submit(c, h, &nop, 0, NULL));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_packet_wait(c, h, 100, NULL, NULL));

	/* A handle of the wrong type is unknown too. */
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_device_destroy(c, f->ctx));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_submit(c, f->dev, &nop, 0, NULL));
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_allocation_query(c, f->dev, &ast));

	/* Unknown handles inside a packet: an allocation-list entry, a SIGNAL's sync object. */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, h, 0, 8, 1), 0);
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_submit(c, f->ctx, &buf, 0, NULL));
	gs_dmabuf_reset(&buf);
	assert_int_equal(gs_dmabuf_signal(&buf, h, 1), 0);
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_submit(c, f->ctx, &buf, 0, NULL));
	gs_dmabuf_free(&buf);

	/* An adapter that does not exist. */
	gs_client_set_adapter(c, 7);
	int64_t before = itest_audit_errors(f->t.db);
	int rv = gs_device_create(c, "nowhere", &out);
	gs_client_set_adapter(c, 0);
	audited(f, before, rv, GS_STATUS_NOT_FOUND, "adapter 7");
	gs_dmabuf_free(&nop);
}

/* PacketEvents of a packet that never existed: NOT_FOUND, audited like every other error. */
static void test_unknown_packet_events(void **state)
{
	fx *f = ready(state);
	gs_packet_event *ev;
	size_t n;
	int64_t before = itest_audit_errors(f->t.db);
	int rv = gs_packet_events(f->c, NO_SUCH_HANDLE, &ev, &n);
	assert_int_equal(rv, GS_STATUS_NOT_FOUND);
	gs_daemon_stats s;
	assert_int_equal(gs_stats(f->c, &s), 0);
	if (s.errors != 1)
		fail_msg("PacketEvents answered NOT_FOUND, but the daemon counts %" PRIu64
		         " errors, not 1: the answer bypassed gsd_call_error (not counted, not "
		         "audited)",
		         s.errors);
	audited(f, before, rv, GS_STATUS_NOT_FOUND, "packet_events of an unknown packet");
}

/* ---- submit flags, DMA bytes, patch locations ---- */

static void test_submit_rules(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);

	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS, gs_submit(c, f->ctx, &nop, 0x200, NULL));
	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS, gs_submit(c, f->ctx, &nop, 0x80000000u, NULL));
	EXPECT_AUDITED(f, GS_STATUS_FLAGS_NOT_ALLOWED,
	               gs_submit(c, f->ctx, &nop, GS_SUBMIT_PAGING, NULL));
	EXPECT_AUDITED(
	        f, GS_STATUS_FLAGS_NOT_ALLOWED,
	        gs_submit(c, f->ctx, &nop, GS_SUBMIT_CONTEXT_SWITCH | GS_SUBMIT_PRESENT, NULL));
	EXPECT_AUDITED(
	        f, GS_STATUS_FLAGS_NOT_ALLOWED,
	        gs_submit(c, f->ctx, &nop, GS_SUBMIT_PAGING | GS_SUBMIT_CONTEXT_SWITCH, NULL));
	/* The bits the daemon sets on the packets it runs: a process tenant claiming to be a VM,
	 * or a first run claiming to be a resubmission. */
	EXPECT_AUDITED(f, GS_STATUS_FLAGS_NOT_ALLOWED,
	               gs_submit(c, f->ctx, &nop, GS_SUBMIT_VIRTUAL_MACHINE_DATA, NULL));
	EXPECT_AUDITED(
	        f, GS_STATUS_FLAGS_NOT_ALLOWED,
	        gs_submit(c, f->ctx, &nop, GS_SUBMIT_RESUBMISSION | GS_SUBMIT_PRESENT, NULL));

	/* Bytes that do not decode: an unknown opcode, a wrong size field, a truncated
	 * command, a reserved header byte. */
	gs_dmabuf bad;
	gs_dmabuf_init(&bad);
	assert_int_equal(gs_dmabuf_nop(&bad), 0);
	bad.data[0] = 0x42;
	EXPECT_AUDITED(f, GS_STATUS_DMA_INVALID, gs_submit(c, f->ctx, &bad, 0, NULL));
	bad.data[0] = GS_OP_NOP;
	bad.data[2] = 16;
	EXPECT_AUDITED(f, GS_STATUS_DMA_INVALID, gs_submit(c, f->ctx, &bad, 0, NULL));
	bad.data[2] = 8;
	bad.len = 5;
	EXPECT_AUDITED(f, GS_STATUS_DMA_INVALID, gs_submit(c, f->ctx, &bad, 0, NULL));
	bad.len = 8;
	bad.data[5] = 1;
	EXPECT_AUDITED(f, GS_STATUS_DMA_INVALID, gs_submit(c, f->ctx, &bad, 0, NULL));
	gs_dmabuf_free(&bad);

	/* Patch locations outside the buffer, or naming no list entry. */
	gs_allocation_placement a;
	itest_alloc(c, f->dev, 4096, 0, 0, &a);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 0, 64, 9), 0);
	buf.patches[0].patch_offset = (uint32_t)buf.len - 4;
	EXPECT_AUDITED(f, GS_STATUS_PATCH_INVALID, gs_submit(c, f->ctx, &buf, 0, NULL));
	buf.patches[0].patch_offset = 1000;
	EXPECT_AUDITED(f, GS_STATUS_PATCH_INVALID, gs_submit(c, f->ctx, &buf, 0, NULL));
	buf.patches[0].patch_offset = GS_ISA_DST_FIELD;
	buf.patches[0].allocation_index = 1;
	EXPECT_AUDITED(f, GS_STATUS_PATCH_INVALID, gs_submit(c, f->ctx, &buf, 0, NULL));
	buf.patches[0].allocation_index = 0;
	buf.patches[0].allocation_offset = 4096;
	EXPECT_AUDITED(f, GS_STATUS_PATCH_INVALID, gs_submit(c, f->ctx, &buf, 0, NULL));
	buf.patches[0].allocation_offset = 0;

	/* Private data beyond DmaBufferPrivateDataSize (0 here). */
	gs_submit_desc d = {
	        .context = f->ctx, .dma = &buf, .private_data = "x", .private_data_size = 1};
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT, gs_submit_batch(c, &d, 1, NULL));

	/* Repaired, the same buffer is accepted and runs. */
	itest_submit_wait(c, f->ctx, &buf, 0);
	gs_dmabuf_free(&buf);

	/* Every rejected submission is in the history as REJECTED, with its raw flags. */
	gs_history_filter hf = {.context = f->ctx, .state = GS_PACKET_REJECTED, .limit = 1000};
	gs_packet_record *r;
	size_t n;
	assert_int_equal(gs_history(c, &hf, &r, &n), 0);
	assert_int_equal(n, 16);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(r[i].state, GS_PACKET_REJECTED);
		assert_int_equal(r[i].context, f->ctx);
		assert_true(r[i].result[0] != '\0');
	}
	assert_int_equal(r[n - 1].submit_flags, 0x200);
	assert_int_equal(r[n - 2].submit_flags, 0x80000000u);
	assert_int_equal(r[n - 3].submit_flags, GS_SUBMIT_PAGING);
	gs_history_free(r, n);
	gs_dmabuf_free(&nop);
}

/* ---- DXGK_CONTEXTINFO rules ---- */

static int ctx_try(fx *f, void (*tweak)(gs_context_desc *d, const itest_layout *l))
{
	gs_context_desc d;
	gs_context_desc_init(&d, f->dev, 0);
	d.info.paging_companion_node_id = f->lay.paging_node;
	d.info.dma_buffer_size = 4096;
	tweak(&d, &f->lay);
	uint64_t ctx = 0;
	int rv = gs_context_create(f->c, &d, &ctx, NULL);
	if (rv == 0)
		assert_int_equal(gs_context_destroy(f->c, ctx), 0);
	return rv;
}

static void tw_memory_dma_segment(gs_context_desc *d, const itest_layout *l)
{
	d->info.dma_buffer_segment_set = 1u << l->memory_segment;
}
static void tw_aperture_dma_segment(gs_context_desc *d, const itest_layout *l)
{
	d->info.dma_buffer_segment_set = 1u << l->aperture_segment;
}
static void tw_unknown_dma_segment(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->info.dma_buffer_segment_set = 1u << 17;
}
static void tw_segment_zero(gs_context_desc *d, const itest_layout *l)
{
	d->info.dma_buffer_segment_set = (1u << 0) | (1u << l->aperture_segment);
}
static void tw_gdi_64(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->flags = GS_CTX_GDI;
	d->info.allocation_list_size = 64;
}
static void tw_gdi_256(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->flags = GS_CTX_GDI;
	d->info.allocation_list_size = GS_GDI_ALLOCATION_LIST_SIZE;
}
static void tw_reserved(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->info.reserved = 1;
}
static void tw_bad_node(gs_context_desc *d, const itest_layout *l)
{
	d->node = l->nodes;
}
static void tw_bad_paging(gs_context_desc *d, const itest_layout *l)
{
	d->info.paging_companion_node_id = l->nodes + 5;
}
static void tw_system(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->flags = GS_CTX_SYSTEM;
}
static void tw_unknown_flag(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->flags = 0x100;
}
static void tw_reserved_caps(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->info.caps = 0x8;
}
static void tw_size_zero(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->info.dma_buffer_size = 0;
}
static void tw_size_huge(gs_context_desc *d, const itest_layout *l)
{
	d->info.dma_buffer_size = l->max_dma_buffer + 1;
}
static void tw_priority_class(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->priority_class = 6;
}
static void tw_priority(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->priority = 8;
}
static void tw_virtual_addressing(gs_context_desc *d, const itest_layout *l)
{
	(void)l;
	d->flags = GS_CTX_VIRTUAL_ADDRESSING;
	d->info.caps = GS_CTXCAPS_VALID_MASK;
}

static void test_context_rules(void **state)
{
	fx *f = ready(state);
	EXPECT_AUDITED(f, GS_STATUS_CTX_DMA_SEGMENT_NOT_APERTURE,
	               ctx_try(f, tw_memory_dma_segment));
	EXPECT_AUDITED(f, GS_STATUS_CTX_DMA_SEGMENT_UNKNOWN, ctx_try(f, tw_unknown_dma_segment));
	EXPECT_AUDITED(f, GS_STATUS_CTX_DMA_SEGMENT_UNKNOWN, ctx_try(f, tw_segment_zero));
	EXPECT_AUDITED(f, GS_STATUS_CTX_GDI_ALLOCATION_LIST, ctx_try(f, tw_gdi_64));
	EXPECT_AUDITED(f, GS_STATUS_CTX_RESERVED_NONZERO, ctx_try(f, tw_reserved));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_NODE, ctx_try(f, tw_bad_node));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_PAGING_NODE, ctx_try(f, tw_bad_paging));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_FLAGS, ctx_try(f, tw_system));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_FLAGS, ctx_try(f, tw_unknown_flag));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_FLAGS, ctx_try(f, tw_reserved_caps));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_SIZE, ctx_try(f, tw_size_zero));
	EXPECT_AUDITED(f, GS_STATUS_CTX_BAD_SIZE, ctx_try(f, tw_size_huge));
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT, ctx_try(f, tw_priority_class));
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT, ctx_try(f, tw_priority));

	/* The valid neighbours of those rules are accepted, and audit no error. */
	int64_t before = itest_audit_errors(f->t.db);
	assert_int_equal(ctx_try(f, tw_aperture_dma_segment), 0);
	assert_int_equal(ctx_try(f, tw_gdi_256), 0);
	assert_int_equal(ctx_try(f, tw_virtual_addressing), 0);
	itest_audit_barrier(f->c, f->barrier_ctx);
	assert_int_equal(itest_audit_errors(f->t.db), before);
}

/* ---- allocation rules ---- */

static void test_allocation_rules(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	uint32_t mem = f->lay.memory_segment, ap = f->lay.aperture_segment;
	gs_segpref p = {{(uint8_t)mem, 0, 0, 0, 0}, {0}};
	uint32_t pref_mem = gs_segpref_encode(&p);
	gs_allocation_placement pl;
	gs_allocation_desc d = {.device = f->dev, .size = 4096};

	d.segment_preference = pref_mem | 0x40000000u;
	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS, gs_allocation_create(c, &d, &pl));
	d.segment_preference = pref_mem | 0x80000000u;
	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS, gs_allocation_create(c, &d, &pl));
	/* Preferring a segment outside the supported set. */
	d.segment_preference = pref_mem;
	d.supported_segment_set = 1u << ap;
	EXPECT_AUDITED(f, GS_STATUS_SEGMENT_PREFERENCE, gs_allocation_create(c, &d, &pl));
	/* Preferring a segment the adapter does not have. */
	p.segment[0] = 29;
	d.segment_preference = gs_segpref_encode(&p);
	d.supported_segment_set = 0;
	EXPECT_AUDITED(f, GS_STATUS_SEGMENT_PREFERENCE, gs_allocation_create(c, &d, &pl));
	/* A preference after the end of the list. */
	p.segment[0] = 0;
	p.segment[1] = (uint8_t)mem;
	d.segment_preference = gs_segpref_encode(&p);
	EXPECT_AUDITED(f, GS_STATUS_SEGMENT_PREFERENCE, gs_allocation_create(c, &d, &pl));
	d.segment_preference = 0;
	d.supported_segment_set = 1u << 9;
	EXPECT_AUDITED(f, GS_STATUS_SEGMENT_UNKNOWN, gs_allocation_create(c, &d, &pl));
	d.supported_segment_set = 0;
	d.flags = 0x80;
	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS, gs_allocation_create(c, &d, &pl));
	d.flags = 0;
	d.size = 0;
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT, gs_allocation_create(c, &d, &pl));
	d.size = UINT64_C(1) << 40;
	EXPECT_AUDITED(f, GS_STATUS_TOO_LARGE, gs_allocation_create(c, &d, &pl));

	/* A good allocation, then bad updates and bad CPU ranges on it. */
	d.size = 4096;
	d.segment_preference = pref_mem;
	assert_int_equal(gs_allocation_create(c, &d, &pl), 0);
	assert_int_equal(pl.segment, mem);
	EXPECT_AUDITED(f, GS_STATUS_ALLOCATION_PRIORITY,
	               gs_allocation_set_priority(c, pl.allocation, 0));
	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS,
	               gs_allocation_set_preference(c, pl.allocation, 0xC0000000u));
	uint8_t b[16];
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT,
	               gs_allocation_read(c, pl.allocation, 4090, b, 16));
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT,
	               gs_allocation_write(c, pl.allocation, 4097, b, 1));
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT,
	               gs_allocation_read(c, pl.allocation, UINT64_MAX - 4, b, 16));
	/* Paging requests: unknown handles and bad transfer flags. */
	gs_paging_result paging;
	uint64_t nobody = pl.allocation + 1000000;
	EXPECT_AUDITED(f, GS_STATUS_NOT_FOUND, gs_make_resident(c, f->dev, &nobody, 1, &paging));
	EXPECT_AUDITED(f, GS_STATUS_INVALID_ARGUMENT, gs_evict(c, f->dev, NULL, 0, &paging));
	EXPECT_AUDITED(f, GS_STATUS_RESERVED_BITS, gs_transfer(c, pl.allocation, 0, 0x20, &paging));
	EXPECT_AUDITED(f, GS_STATUS_FLAGS_NOT_ALLOWED,
	               gs_transfer(c, pl.allocation, 0, 0x8, &paging));
	EXPECT_AUDITED(f, GS_STATUS_TRANSFER_FLAGS, gs_transfer(c, pl.allocation, 0, 0x3, &paging));
	EXPECT_AUDITED(f, GS_STATUS_SEGMENT_UNKNOWN, gs_transfer(c, pl.allocation, 29, 0, &paging));
	assert_int_equal(gs_make_resident(c, f->dev, &pl.allocation, 1, &paging), 0);
	assert_int_equal(paging.moves, 0); /* resident already */

	/* Zero-length CPU accesses are harmless. */
	assert_int_equal(gs_allocation_write(c, pl.allocation, 0, NULL, 0), 0);
	assert_int_equal(gs_allocation_read(c, pl.allocation, 4096, NULL, 0), 0);
	assert_int_equal(gs_allocation_set_priority(c, pl.allocation, GS_ALLOC_PRIORITY_HIGH), 0);
	gs_allocation_status st;
	assert_int_equal(gs_allocation_query(c, pl.allocation, &st), 0);
	assert_int_equal(st.priority, GS_ALLOC_PRIORITY_HIGH);
	assert_int_equal(st.segment_preference, pref_mem);
}

/* ---- a packet that touches memory it did not list ---- */

static void test_fault(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	gs_allocation_placement victim, own;
	itest_alloc(c, f->dev, 4096, 0, 0, &victim);
	itest_alloc(c, f->dev, 4096, 0, 0, &own);
	uint8_t want[4096], got[4096];
	memset(want, 0x5a, sizeof(want));
	assert_int_equal(gs_allocation_write(c, victim.allocation, 0, want, sizeof(want)), 0);

	/* Two FILLs of `own`; the second's address is forged to the victim's raw address and
	 * its patch dropped, so the victim is not in the allocation list. */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, own.allocation, 0, 4096, 0x11111111), 0);
	size_t second = buf.len;
	assert_int_equal(gs_dmabuf_fill(&buf, own.allocation, 0, 4096, 0x22222222), 0);
	assert_int_equal(buf.patch_count, 2);
	assert_int_equal(buf.alloc_count, 1);
	buf.patch_count = 1;
	gs_le64_put(buf.data + second + GS_ISA_DST_FIELD, victim.address);

	gs_submit_result res;
	assert_int_equal(gs_submit(c, f->ctx, &buf, 0, &res), 0);
	gs_packet_state st = GS_PACKET_UNKNOWN;
	assert_int_equal(gs_packet_wait(c, res.packet, ITEST_TIMEOUT_MS, &st, NULL),
	                 GS_STATUS_FAULTED);
	gs_dmabuf_free(&buf);

	/* The victim is untouched. */
	assert_int_equal(gs_allocation_read(c, victim.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, want, sizeof(want));

	/* The context is in its error state: later submissions fail with FAULTED. */
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	EXPECT_AUDITED(f, GS_STATUS_FAULTED, gs_submit(c, f->ctx, &nop, 0, NULL));
	EXPECT_AUDITED(f, GS_STATUS_FAULTED, gs_submit(c, f->ctx, &nop, 0, NULL));

	/* The audit shows the fault. */
	gs_history_filter hf = {.context = f->ctx};
	gs_packet_record *r;
	size_t n;
	assert_int_equal(gs_history(c, &hf, &r, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(r[2].packet, res.packet);
	assert_int_equal(r[2].state, GS_PACKET_FAULTED);
	assert_int_equal(r[1].state, GS_PACKET_REJECTED);
	assert_int_equal(r[0].state, GS_PACKET_REJECTED);
	gs_history_free(r, n);
	gs_packet_event *ev;
	assert_int_equal(gs_packet_events(c, res.packet, &ev, &n), 0);
	assert_true(n >= 2);
	assert_int_equal(ev[n - 1].state, GS_PACKET_FAULTED);
	assert_non_null(strstr(ev[n - 1].detail, "outside allocation list"));
	/* No GPU address in what the tenant reads (it would tell where its allocations are). */
	assert_null(strstr(ev[n - 1].detail, "0x"));
	gs_packet_events_free(ev, n);

	/* Writing an allocation listed as read-only faults too, on another context. */
	uint64_t ctx2 = itest_context(c, f->dev, 0, f->lay.paging_node);
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, victim.allocation, 0, 16, 0x33333333), 0);
	buf.allocs[0].write = false;
	assert_int_equal(gs_submit(c, ctx2, &buf, 0, &res), 0);
	assert_int_equal(gs_packet_wait(c, res.packet, ITEST_TIMEOUT_MS, &st, NULL),
	                 GS_STATUS_FAULTED);
	gs_dmabuf_free(&buf);
	assert_int_equal(gs_allocation_read(c, victim.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, want, sizeof(want));

	/* Other contexts are not affected, and a faulted context can still be destroyed. */
	itest_submit_wait(c, f->barrier_ctx, &nop, 0);
	assert_int_equal(gs_context_destroy(c, f->ctx), 0);
	assert_int_equal(gs_context_destroy(c, ctx2), 0);
	gs_dmabuf_free(&nop);
	gs_daemon_stats s;
	assert_int_equal(gs_stats(c, &s), 0);
	assert_int_equal(s.packets_faulted, 2);
}

/* PacketRecord.result is "why it ended (fault text, cancel reason)": a faulted packet's record
 * carries the fault text, as its FAULTED event does. */
static void test_fault_result_text(void **state)
{
	fx *f = ready(state);
	gs_allocation_placement victim, own;
	itest_alloc(f->c, f->dev, 4096, 0, 0, &victim);
	itest_alloc(f->c, f->dev, 4096, 0, 0, &own);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, own.allocation, 0, 64, 1), 0);
	gs_le64_put(buf.data + GS_ISA_DST_FIELD, victim.address);
	buf.patch_count = 0;
	gs_submit_result res;
	assert_int_equal(gs_submit(f->c, f->ctx, &buf, 0, &res), 0);
	gs_dmabuf_free(&buf);
	assert_int_equal(gs_packet_wait(f->c, res.packet, ITEST_TIMEOUT_MS, NULL, NULL),
	                 GS_STATUS_FAULTED);
	itest_audit_barrier(f->c, f->barrier_ctx);
	gs_history_filter hf = {.context = f->ctx};
	gs_packet_record *r;
	size_t n;
	assert_int_equal(gs_history(f->c, &hf, &r, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(r[0].state, GS_PACKET_FAULTED);
	char result[256];
	snprintf(result, sizeof(result), "%s", r[0].result);
	gs_history_free(r, n);
	if (!strstr(result, "fault"))
		fail_msg("the FAULTED packet's history result is '%s', not the fault text", result);
}

/* ---- clients that go away ---- */

/* Sends a request on a raw socket, makes sure the daemon received it, and closes the socket
 * without reading the answer. */
static void abandon(fx *f, Gpusched__V1__Request *req)
{
	gs_daemon_stats s;
	assert_int_equal(gs_stats(f->c, &s), 0);
	uint64_t base = s.requests;
	size_t len;
	void *bytes = itest_pack(req, &len);
	nng_socket sock;
	assert_int_equal(nng_req0_open(&sock), 0);
	assert_int_equal(nng_dial(sock, f->t.url, NULL, 0), 0);
	assert_int_equal(nng_send(sock, bytes, len, 0), 0);
	free(bytes);

	/* The daemon counts every request it receives; each stats call counts itself. */
	long long deadline = gs_test_now_ms() + 10000;
	for (uint64_t calls = 1;; calls++) {
		assert_int_equal(gs_stats(f->c, &s), 0);
		if (s.requests > base + calls)
			break;
		assert_true(gs_test_now_ms() < deadline);
	}
	nng_close(sock);
}

static void abandon_sync_wait(fx *f, uint64_t sync, uint64_t value, uint32_t timeout_ms)
{
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__SyncWaitRequest sw = GPUSCHED__V1__SYNC_WAIT_REQUEST__INIT;
	sw.sync = sync;
	sw.value = value;
	sw.timeout_ms = timeout_ms;
	req.id = 1;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT;
	req.sync_wait = &sw;
	abandon(f, &req);
}

static void test_client_disconnects(void **state)
{
	fx *f = ready(state);
	gs_client *c = f->c;
	uint64_t s1, s2, s3, cur;
	assert_int_equal(gs_sync_create(c, f->dev, 0, &s1), 0);
	assert_int_equal(gs_sync_create(c, f->dev, 0, &s2), 0);
	assert_int_equal(gs_sync_create(c, f->dev, 0, &s3), 0);

	/* A pending wait whose client left: answered by its timeout into the void. */
	abandon_sync_wait(f, s1, 100, 300);
	/* Outlasting that timeout guarantees the daemon has answered the abandoned call. */
	assert_int_equal(gs_sync_wait(c, s3, 1, 600, &cur), GS_STATUS_TIMEOUT);
	assert_int_equal(gs_sync_signal(c, s1, 100), 0);
	assert_int_equal(gs_sync_wait(c, s1, 100, 1000, &cur), 0);
	assert_int_equal(cur, 100);

	/* A pending wait whose client left: answered by a signal into the void. */
	abandon_sync_wait(f, s2, 5, 60000);
	assert_int_equal(gs_sync_signal(c, s2, 5), 0);
	assert_int_equal(gs_sync_wait(c, s2, 5, 1000, &cur), 0);
	/* A pending wait whose client left, its object destroyed. */
	abandon_sync_wait(f, s3, 50, 60000);
	assert_int_equal(gs_sync_destroy(c, s3), 0);

	/* A pending packet wait whose client left. */
	gs_dmabuf spin;
	gs_dmabuf_init(&spin);
	assert_int_equal(gs_dmabuf_spin(&spin, 200000, 0), 0);
	gs_submit_result res;
	assert_int_equal(gs_submit(c, f->ctx, &spin, 0, &res), 0);
	gs_dmabuf_free(&spin);
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__PacketWaitRequest pw = GPUSCHED__V1__PACKET_WAIT_REQUEST__INIT;
	pw.packet = res.packet;
	pw.timeout_ms = 60000;
	req.id = 2;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT;
	req.packet_wait = &pw;
	abandon(f, &req);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(c, res.packet, ITEST_TIMEOUT_MS, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);

	/* Everything still answers normally. */
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	gs_info_free(info);
	itest_audit_barrier(c, f->barrier_ctx);
}

static void test_client_churn(void **state)
{
	fx *f = ready(state);
	long long deadline = gs_test_now_ms() + 30000;
	int done = 0;
	for (int i = 0; i < 300 && gs_test_now_ms() < deadline; i++, done++) {
		gs_client *c = NULL;
		assert_int_equal(gs_connect(f->t.url, "", &c), 0);
		gs_client_set_timeout(c, 10000);
		if (i % 3 == 0) {
			gs_daemon_info *info;
			assert_int_equal(gs_info(c, &info), 0);
			gs_info_free(info);
		} else if (i % 3 == 1) {
			uint64_t dev;
			assert_int_equal(gs_device_create(c, "churn", &dev), 0);
			assert_int_equal(gs_device_destroy(c, dev), 0);
		}
		gs_close(c);
	}
	assert_true(done >= 100);
	gs_daemon_stats s;
	assert_int_equal(gs_stats(f->c, &s), 0);
	assert_int_equal(s.devices, 1);
	itest_audit_barrier(f->c, f->barrier_ctx);
}

/* ---- tenants ---- */

static void test_tenant_isolation(void **state)
{
	fx *f = *state;
	gs_client *a = itest_connect(&f->t, "tok-alice");
	gs_client *b = itest_connect(&f->t, "tok-bob");
	gs_client *root = itest_connect(&f->t, "tok-root");
	gs_daemon_info *info;
	assert_int_equal(gs_info(a, &info), 0);
	assert_string_equal(info->tenant, "alice");
	gs_info_free(info);
	assert_int_equal(gs_info(b, &info), 0);
	assert_string_equal(info->tenant, "bob");
	itest_layout lay;
	itest_layout_of(a, &lay);
	gs_info_free(info);

	/* Alice's objects and one finished packet. */
	uint64_t adev, actx, async;
	gs_allocation_placement aal;
	assert_int_equal(gs_device_create(a, "alice", &adev), 0);
	actx = itest_context(a, adev, 0, lay.paging_node);
	itest_alloc(a, adev, 4096, 0, 0, &aal);
	assert_int_equal(gs_sync_create(a, adev, 3, &async), 0);
	uint8_t secret[16] = "alice's secret!";
	assert_int_equal(gs_allocation_write(a, aal.allocation, 0, secret, sizeof(secret)), 0);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	uint64_t apkt = itest_submit_wait(a, actx, &buf, GS_SUBMIT_PRESENT);

	/* Bob's own device and context, for barriers and his own packets. */
	uint64_t bdev, bctx;
	assert_int_equal(gs_device_create(b, "bob", &bdev), 0);
	bctx = itest_context(b, bdev, 1, lay.paging_node);
	uint64_t bpkt = itest_submit_wait(b, bctx, &buf, 0);

	/* Every one of Alice's handles is unknown to Bob. */
	fx fb = *f;
	fb.c = b;
	fb.barrier_ctx = bctx;
	gs_context_desc cd;
	gs_context_desc_init(&cd, adev, 0);
	gs_allocation_desc ad = {.device = adev, .size = 64};
	gs_allocation_placement pl;
	gs_allocation_status ast;
	uint64_t out;
	uint8_t got[16];
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_device_destroy(b, adev));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_context_create(b, &cd, &out, NULL));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_allocation_create(b, &ad, &pl));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_sync_create(b, adev, 0, &out));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_context_destroy(b, actx));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_submit(b, actx, &buf, 0, NULL));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_allocation_query(b, aal.allocation, &ast));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND,
	               gs_allocation_read(b, aal.allocation, 0, got, sizeof(got)));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_allocation_write(b, aal.allocation, 0, "x", 1));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_allocation_destroy(b, aal.allocation));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_sync_signal(b, async, 100));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_sync_wait(b, async, 1, 100, NULL));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_sync_destroy(b, async));
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_packet_wait(b, apkt, 100, NULL, NULL));
	size_t n;
	/* Nor can Bob name them inside his own packets. */
	gs_dmabuf evil;
	gs_dmabuf_init(&evil);
	assert_int_equal(gs_dmabuf_fill(&evil, aal.allocation, 0, 16, 0), 0);
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_submit(b, bctx, &evil, 0, NULL));
	gs_dmabuf_reset(&evil);
	assert_int_equal(gs_dmabuf_signal(&evil, async, 1000), 0);
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_submit(b, bctx, &evil, 0, NULL));
	gs_dmabuf_free(&evil);
	/* Bob's errors are recorded as his. */
	assert_int_equal(
	        itest_audit_int(f->t.db, "SELECT COUNT(*) FROM errors WHERE tenant = 'bob'"), 16);

	/* Bob's history holds none of Alice's packets. */
	gs_history_filter hf = {.limit = 10000};
	gs_packet_record *r;
	assert_int_equal(gs_history(b, &hf, &r, &n), 0);
	assert_true(n >= 1);
	bool saw_own = false;
	for (size_t i = 0; i < n; i++) {
		assert_int_not_equal(r[i].packet, apkt);
		assert_string_equal(r[i].tenant, "bob");
		/* Only Bob's own refused attempt names Alice's context (as he sent it). */
		if (r[i].context == actx)
			assert_int_equal(r[i].state, GS_PACKET_REJECTED);
		saw_own |= r[i].packet == bpkt;
	}
	assert_true(saw_own);
	gs_history_free(r, n);
	hf = (gs_history_filter){.context = actx};
	assert_int_equal(gs_history(b, &hf, &r, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(r[0].state, GS_PACKET_REJECTED);
	assert_string_equal(r[0].tenant, "bob");
	gs_history_free(r, n);
	hf = (gs_history_filter){.device = adev};
	assert_int_equal(gs_history(b, &hf, &r, &n), 0);
	assert_int_equal(n, 0);
	/* Naming another tenant's history is for administrators: Bob is refused (and audited),
	 * naming himself is allowed, root reads Alice's. */
	hf = (gs_history_filter){.tenant = "alice"};
	EXPECT_AUDITED(&fb, GS_STATUS_PERMISSION_DENIED, gs_history(b, &hf, &r, &n));
	/* An empty time range and two cursors at once are refused, not answered empty. */
	hf = (gs_history_filter){.since_ns = 5, .until_ns = 5};
	EXPECT_AUDITED(&fb, GS_STATUS_INVALID_ARGUMENT, gs_history(b, &hf, &r, &n));
	hf = (gs_history_filter){.before_packet = 9, .after_packet = 3};
	EXPECT_AUDITED(&fb, GS_STATUS_INVALID_ARGUMENT, gs_history(b, &hf, &r, &n));
	hf = (gs_history_filter){.tenant = "bob"};
	assert_int_equal(gs_history(b, &hf, &r, &n), 0);
	assert_true(n >= 1);
	gs_history_free(r, n);
	/* usage: Bob sees only himself; every tenant is for administrators. */
	gs_usage *us;
	gs_usage_filter uf = {.tenant = "*"};
	EXPECT_AUDITED(&fb, GS_STATUS_PERMISSION_DENIED, gs_get_usage(b, &uf, &us));
	assert_int_equal(gs_get_usage(b, NULL, &us), 0);
	assert_int_equal(us->count, 1);
	assert_string_equal(us->rows[0].tenant, "bob");
	gs_usage_free(us);
	assert_int_equal(gs_get_usage(root, &uf, &us), 0);
	bool saw_alice = false;
	for (size_t i = 0; i < us->count; i++)
		saw_alice |= strcmp(us->rows[i].tenant, "alice") == 0;
	assert_true(saw_alice);
	gs_usage_free(us);

	/* explain: Alice's packet is unknown to Bob, naming her is refused, root may. */
	gs_explanation *ex;
	EXPECT_AUDITED(&fb, GS_STATUS_NOT_FOUND, gs_explain(b, apkt, NULL, &ex));
	EXPECT_AUDITED(&fb, GS_STATUS_PERMISSION_DENIED, gs_explain(b, apkt, "alice", &ex));
	assert_int_equal(gs_explain(root, apkt, "alice", &ex), 0);
	assert_int_equal(ex->packet->packet, apkt);
	assert_string_equal(ex->packet->tenant, "alice");
	assert_int_equal(ex->events[ex->event_count - 1].state, GS_PACKET_COMPLETED);
	gs_explanation_free(ex);
	hf = (gs_history_filter){.tenant = "alice", .context = actx};
	assert_int_equal(gs_history(root, &hf, &r, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(r[0].packet, apkt);
	assert_string_equal(r[0].tenant, "alice");
	gs_history_free(r, n);

	/* Alice's objects are as she left them. */
	assert_int_equal(gs_allocation_read(a, aal.allocation, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, secret, sizeof(secret));
	uint64_t cur;
	assert_int_equal(gs_sync_wait(a, async, 0, 0, &cur), 0);
	assert_int_equal(cur, 3);
	itest_submit_wait(a, actx, &buf, 0);
	hf = (gs_history_filter){.context = actx};
	assert_int_equal(gs_history(a, &hf, &r, &n), 0);
	assert_true(n >= 1);
	assert_int_equal(r[n - 1].packet, apkt);
	assert_string_equal(r[n - 1].tenant, "alice");
	gs_history_free(r, n);

	/* Tokens: a wrong one and none at all are refused. */
	gs_client *bad = itest_connect(&f->t, "tok-mallory");
	EXPECT_AUDITED(&fb, GS_STATUS_UNAUTHENTICATED, gs_info(bad, &info));
	EXPECT_AUDITED(&fb, GS_STATUS_UNAUTHENTICATED, gs_device_create(bad, "x", &out));
	gs_close(bad);
	bad = itest_connect(&f->t, "");
	EXPECT_AUDITED(&fb, GS_STATUS_UNAUTHENTICATED, gs_info(bad, &info));
	gs_close(bad);

	/* Administration needs an admin token. */
	gs_tenant nt = {.name = "carol", .share = 1, .priority_ceiling = 2};
	char *tok = NULL;
	EXPECT_AUDITED(&fb, GS_STATUS_PERMISSION_DENIED,
	               gs_tenant_create(b, &nt, "tok-carol", &tok));
	EXPECT_AUDITED(&fb, GS_STATUS_PERMISSION_DENIED, gs_tenant_destroy(b, "alice"));
	gs_tenant *tl;
	assert_int_equal(gs_tenant_list(b, &tl, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(tl[0].name, "bob");
	gs_tenant_list_free(tl, n);
	assert_int_equal(gs_tenant_create(root, &nt, "tok-carol", &tok), 0);
	assert_string_equal(tok, "tok-carol");
	free(tok);
	gs_client *carol = itest_connect(&f->t, "tok-carol");
	assert_int_equal(gs_info(carol, &info), 0);
	assert_string_equal(info->tenant, "carol");
	gs_info_free(info);
	gs_close(carol);
	assert_int_equal(gs_tenant_list(root, &tl, &n), 0);
	assert_int_equal(n, 4);
	gs_tenant_list_free(tl, n);

	/* Bob cannot read the events of Alice's packet either. */
	gs_packet_event *ev;
	assert_int_equal(gs_packet_events(b, apkt, &ev, &n), GS_STATUS_NOT_FOUND);

	gs_dmabuf_free(&buf);
	gs_close(a);
	gs_close(b);
	gs_close(root);
}

/* schema/audit.sql: errors.tenant is NULL when the caller was not authenticated. */
static void test_unauthenticated_audit_row(void **state)
{
	fx *f = *state;
	gs_client *a = itest_connect(&f->t, "tok-alice");
	uint64_t dev;
	assert_int_equal(gs_device_create(a, "alice", &dev), 0);
	uint64_t ctx = itest_context(a, dev, 0, 0);
	gs_client *bad = itest_connect(&f->t, "tok-mallory");
	gs_daemon_info *info;
	assert_int_equal(gs_info(bad, &info), GS_STATUS_UNAUTHENTICATED);
	gs_close(bad);
	itest_audit_barrier(a, ctx);
	gs_close(a);
	assert_int_equal(itest_audit_int(f->t.db, "SELECT COUNT(*) FROM errors WHERE status = %d",
	                                 GS_STATUS_UNAUTHENTICATED),
	                 1);
	int64_t null_rows = itest_audit_int(f->t.db,
	                                    "SELECT COUNT(*) FROM errors WHERE status = %d AND "
	                                    "tenant IS NULL",
	                                    GS_STATUS_UNAUTHENTICATED);
	if (null_rows != 1)
		fail_msg("the UNAUTHENTICATED errors row names a tenant (%s), not NULL",
		         itest_audit_int(f->t.db,
		                         "SELECT COUNT(*) FROM errors WHERE tenant = '-'") > 0
		                 ? "'-'"
		                 : "not '-'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_garbage_bytes, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_oversize, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_unknown_handles, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_unknown_packet_events, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_submit_rules, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_context_rules, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_allocation_rules, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_fault, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_fault_result_text, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_client_disconnects, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_client_churn, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_tenant_isolation, setup_tenants, teardown),
	        cmocka_unit_test_setup_teardown(test_unauthenticated_audit_row, setup_tenants,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
