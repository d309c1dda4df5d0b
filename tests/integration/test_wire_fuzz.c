/*
 * Wire fuzz against a real gpuschedd: a bounded, seeded stream of mutated valid Requests and
 * random byte strings on a raw nng REQ socket. Every message must be answered with a Response
 * that decodes: one that echoes the request's id and carries a status of the contract when the
 * bytes decode as a Request, and one with id 0 and STATUS_MALFORMED when they do not. Afterwards
 * the daemon must still be running, serve a FILL and its read-back through libgpusched, and stop
 * cleanly.
 *
 * The daemon runs on the virtual clock, so a mutated SPIN of years of engine time completes at
 * once; waits the mutations make long are capped before sending (see cap_waits).
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

#include "../fuzz/corpus.h"
#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "isa.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

#define MESSAGES 3000
#define MAX_LEN  4096
#define SEED     UINT64_C(0x5eed0f0220)
/* Per message: generous for an ASan daemon, far below the test's own timeout. */
#define RECV_TIMEOUT_MS 5000
/* Longest wait a fuzzed PacketWait/SyncWait may ask the daemon for. */
#define WAIT_CAP_MS      20
#define MAX_FUZZ_DEVICES 4096
/* Messages between two refreshes of the objects the seeds name. */
#define REFRESH_EVERY 100

typedef struct tally {
	unsigned decoded, malformed, random, mutated;
	unsigned by_status[64];
	uint64_t devices[MAX_FUZZ_DEVICES]; /* devices fuzzed requests created */
	size_t ndevices;
} tally;

static const char *status_name(int st)
{
	const ProtobufCEnumValue *v =
	        protobuf_c_enum_descriptor_get_value(&gpusched__v1__status__descriptor, st);
	return v ? v->name : "?";
}

static void hex_dump(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n && i < 256; i++)
		fprintf(stderr, "%02x%s", p[i], (i + 1) % 32 ? "" : "\n");
	fprintf(stderr, "\n");
}

/* Waits a mutation made long would hold the REQ socket (one request at a time) for up to
 * 2^32 ms; they are capped and re-encoded, everything else goes out byte for byte. */
static size_t cap_waits(Gpusched__V1__Request *req, uint8_t *buf, size_t len)
{
	uint32_t *t = NULL;
	if (req->body_case == GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT && req->packet_wait)
		t = &req->packet_wait->timeout_ms;
	else if (req->body_case == GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT && req->sync_wait)
		t = &req->sync_wait->timeout_ms;
	if (!t || *t <= WAIT_CAP_MS)
		return len;
	*t = WAIT_CAP_MS;
	size_t n = gpusched__v1__request__get_packed_size(req);
	assert_true(n <= MAX_LEN);
	return gpusched__v1__request__pack(req, buf);
}

/* Sends one message and checks its answer. */
static void exchange(nng_socket s, uint8_t *buf, size_t len, unsigned index, tally *t)
{
	Gpusched__V1__Request *req = gpusched__v1__request__unpack(NULL, len, buf);
	uint64_t want_id = 0;
	if (req) {
		len = cap_waits(req, buf, len);
		want_id = req->id;
		t->decoded++;
	} else {
		t->malformed++;
	}

	nng_msg *m;
	assert_int_equal(nng_msg_alloc(&m, len), 0);
	if (len)
		memcpy(nng_msg_body(m), buf, len);
	int rv = nng_sendmsg(s, m, 0);
	if (rv != 0) {
		nng_msg_free(m);
		fail_msg("message %u: send: %s", index, nng_strerror(rv));
	}
	rv = nng_recvmsg(s, &m, 0);
	if (rv != 0) {
		fprintf(stderr, "message %u (%zu bytes, %s) got no answer: %s\n", index, len,
		        req ? "decodes" : "malformed", nng_strerror(rv));
		hex_dump(buf, len);
		fail_msg("message %u: receive: %s", index, nng_strerror(rv));
	}
	Gpusched__V1__Response *resp =
	        gpusched__v1__response__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	nng_msg_free(m);
	if (!resp) {
		hex_dump(buf, len);
		fail_msg("message %u: the answer does not decode as a Response", index);
	}
	if (!req) {
		/* The token is checked from the envelope before the body is decoded: bytes that do
		 * not decode but carry an unknown token are refused as such (with the id read from
		 * the envelope); the rest are MALFORMED, id 0. */
		bool refused = resp->status == GPUSCHED__V1__STATUS__STATUS_UNAUTHENTICATED;
		if (!refused &&
		    (resp->status != GPUSCHED__V1__STATUS__STATUS_MALFORMED || resp->id != 0)) {
			hex_dump(buf, len);
			fail_msg("message %u: undecodable bytes answered with status %d (%s), id "
			         "%" PRIu64,
			         index, resp->status, status_name(resp->status), resp->id);
		}
	} else {
		if (resp->id != want_id ||
		    !protobuf_c_enum_descriptor_get_value(&gpusched__v1__status__descriptor,
		                                          resp->status)) {
			hex_dump(buf, len);
			fail_msg("message %u: request id %" PRIu64 " answered with id %" PRIu64
			         ", status %d",
			         index, want_id, resp->id, resp->status);
		}
		/* An error explains itself. */
		if (resp->status != GPUSCHED__V1__STATUS__STATUS_OK && !resp->message[0])
			fail_msg("message %u: status %s without a message", index,
			         status_name(resp->status));
		if (resp->status == GPUSCHED__V1__STATUS__STATUS_OK &&
		    resp->body_case == GPUSCHED__V1__RESPONSE__BODY_DEVICE_CREATE &&
		    t->ndevices < MAX_FUZZ_DEVICES)
			t->devices[t->ndevices++] = resp->device_create->device;
	}
	if (resp->status < 64)
		t->by_status[resp->status]++;
	gpusched__v1__response__free_unpacked(resp, NULL);
	if (req)
		gpusched__v1__request__free_unpacked(req, NULL);
}

/* Real objects for the seeds to name, so mutations reach the handlers' deeper checks. */
static void make_objects(gs_client *c, gs_fuzz_handles *h)
{
	assert_int_equal(gs_device_create(c, "wire-fuzz", &h->device), 0);
	gs_context_desc cd;
	gs_context_desc_init(&cd, h->device, 0);
	cd.info.paging_companion_node_id = 2;
	assert_int_equal(gs_context_create(c, &cd, &h->context, NULL), 0);
	gs_allocation_desc ad = {.device = h->device, .size = 4096};
	gs_allocation_placement pl;
	assert_int_equal(gs_allocation_create(c, &ad, &pl), 0);
	h->allocation = pl.allocation;
	assert_int_equal(gs_sync_create(c, h->device, 0, &h->sync), 0);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(c, h->context, &nop, GS_SUBMIT_NULL_RENDERING, &r), 0);
	h->packet = r.packet;
	gs_dmabuf_free(&nop);
}

/*
 * Fuzzed requests destroy the objects the seeds name and fault their context, after which
 * everything else only meets NOT_FOUND or FAULTED. So every REFRESH_EVERY messages the seeds
 * get fresh objects: at fixed points, so the stream of inputs does not depend on answers.
 */
static void refresh(gs_client *c, gs_fuzz_handles *h, uint8_t **seeds, size_t *lens)
{
	if (seeds[0])
		gs_device_destroy(c, h->device); /* may already be gone */
	make_objects(c, h);
	for (int i = 0; i < GS_SEED_COUNT; i++) {
		free(seeds[i]);
		seeds[i] = gs_fuzz_seed(i, h, 1 + (uint64_t)i, &lens[i]);
		assert_non_null(seeds[i]);
	}
}

/* After the storm: a fresh device, a FILL, its read-back. */
static void check_still_serves(gs_client *c)
{
	uint64_t dev, ctx;
	assert_int_equal(gs_device_create(c, "after-fuzz", &dev), 0);
	gs_context_desc cd;
	gs_context_desc_init(&cd, dev, 0);
	cd.info.paging_companion_node_id = 2;
	assert_int_equal(gs_context_create(c, &cd, &ctx, NULL), 0);
	enum { SIZE = 4096 };
	gs_allocation_desc ad = {.device = dev, .size = SIZE};
	gs_allocation_placement pl;
	assert_int_equal(gs_allocation_create(c, &ad, &pl), 0);
	gs_dmabuf fill;
	gs_dmabuf_init(&fill);
	assert_int_equal(gs_dmabuf_fill(&fill, pl.allocation, 0, SIZE, 0xC0FFEE11u), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(c, ctx, &fill, 0, &r), 0);
	gs_packet_state state = GS_PACKET_UNKNOWN;
	assert_int_equal(gs_packet_wait(c, r.packet, 10000, &state, NULL), 0);
	assert_int_equal(state, GS_PACKET_COMPLETED);
	static uint8_t got[SIZE], want[SIZE];
	assert_int_equal(gs_allocation_read(c, pl.allocation, 0, got, SIZE), 0);
	gs_isa_fill(want, SIZE, 0xC0FFEE11u);
	assert_memory_equal(got, want, SIZE);
	gs_dmabuf_free(&fill);
	assert_int_equal(gs_device_destroy(c, dev), 0);
}

/* The daemon lives in the fixture, so a failed check (which leaves the test at once) still
 * stops and removes it in teardown. */
static gs_testd g_daemon;

static int daemon_up(void **state)
{
	(void)state;
	/* Every message must be answered: no connection is closed for its many wrong tokens
	 * (that limit has its own test in test_hardening). */
	static itest_config cfg;
	if (itest_config_write(&cfg, "{\"max_bad_tokens_per_second\": 1000000}\n") != 0)
		return -1;
	const char *const args[] = {"--clock", "virtual", "--config", cfg.path, NULL};
	if (gs_testd_start(&g_daemon, args) != 0) {
		gs_testd_cleanup(&g_daemon);
		return -1;
	}
	return 0;
}

static int daemon_down(void **state)
{
	(void)state;
	gs_testd_cleanup(&g_daemon); /* kills the daemon if a failed check left it running */
	return 0;
}

static void test_wire_fuzz(void **state)
{
	(void)state;
	gs_testd *d = &g_daemon;
	gs_client *c;
	assert_int_equal(gs_connect(d->url, NULL, &c), 0);
	gs_client_set_timeout(c, 20000);
	gs_fuzz_handles h;
	uint8_t *seeds[GS_SEED_COUNT] = {NULL};
	size_t lens[GS_SEED_COUNT];
	refresh(c, &h, seeds, lens);

	nng_socket s;
	assert_int_equal(nng_req0_open(&s), 0);
	assert_int_equal(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, RECV_TIMEOUT_MS), 0);
	assert_int_equal(nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, RECV_TIMEOUT_MS), 0);
	/* A resent request would be a second, unchecked one. */
	assert_int_equal(nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE), 0);
	assert_int_equal(nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 64u << 20), 0);
	assert_int_equal(nng_dial(s, d->url, NULL, 0), 0);

	static tally t;
	memset(&t, 0, sizeof(t));
	static uint8_t buf[MAX_LEN];
	gs_rng r = {SEED};
	long long t0 = gs_test_now_ms();
	for (unsigned i = 0; i < MESSAGES; i++) {
		size_t len;
		if (i > 0 && i % REFRESH_EVERY == 0)
			refresh(c, &h, seeds, lens);
		if (i < GS_SEED_COUNT) {
			/* The seeds themselves first: each must be answered as well. */
			memcpy(buf, seeds[i], lens[i]);
			len = lens[i];
			t.mutated++;
		} else if (gs_rng_below(&r, 5) == 0) {
			len = gs_rng_below(&r, 4) ? gs_rng_below(&r, 65)
			                          : gs_rng_below(&r, MAX_LEN);
			gs_rng_bytes(&r, buf, len);
			t.random++;
		} else {
			size_t a = gs_rng_below(&r, GS_SEED_COUNT);
			size_t b = gs_rng_below(&r, GS_SEED_COUNT);
			memcpy(buf, seeds[a], lens[a]);
			len = lens[a];
			for (unsigned m = gs_fuzz_depth(&r); m > 0; m--)
				len = gs_fuzz_mutate(&r, buf, len, MAX_LEN, seeds[b], lens[b]);
			t.mutated++;
		}
		exchange(s, buf, len, i, &t);
	}
	long long elapsed = gs_test_now_ms() - t0;
	nng_close(s);

	printf("wire fuzz: %u messages in %lld ms (%u mutated, %u random; %u decoded, %u "
	       "malformed)\n",
	       MESSAGES, elapsed, t.mutated, t.random, t.decoded, t.malformed);
	for (int st = 0; st < 64; st++)
		if (t.by_status[st])
			printf("  %-40s %u\n", status_name(st), t.by_status[st]);
	/* The stream must exercise both paths. */
	assert_true(t.decoded > MESSAGES / 4);
	assert_true(t.malformed > MESSAGES / 20);

	if (!gs_testd_alive(d)) {
		gs_testd_dump_log(d);
		fail_msg("the daemon died during the wire fuzz");
	}
	/* Give back what fuzzed requests took, so the final check is not out of memory. */
	for (size_t i = 0; i < t.ndevices; i++)
		gs_device_destroy(c, t.devices[i]);
	gs_device_destroy(c, h.device);
	check_still_serves(c);

	gs_daemon_stats ds;
	assert_int_equal(gs_stats(c, &ds), 0);
	assert_true(ds.requests >= MESSAGES);
	printf("daemon: %" PRIu64 " requests, %" PRIu64 " errors, %" PRIu64
	       " packets submitted, %" PRIu64 " rejected\n",
	       ds.requests, ds.errors, ds.packets_submitted, ds.packets_rejected);
	gs_close(c);
	for (int i = 0; i < GS_SEED_COUNT; i++)
		free(seeds[i]);

	int rc = gs_testd_stop(d);
	if (rc != 0)
		gs_testd_dump_log(d);
	assert_int_equal(rc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_wire_fuzz, daemon_up, daemon_down),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
