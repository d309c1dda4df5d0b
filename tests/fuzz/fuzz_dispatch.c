/*
 * Fuzz target: a whole daemon, in process and without a network.
 *
 * Each input is handed to a running daemon instance exactly as a received message is
 * (gsd_rpc_inject): the envelope scan, the token check, decoding, dispatch, every handler,
 * the scheduler, the memory manager, the emulated engines (virtual clock) and the audit writer
 * all run for real. The daemon uses a temporary audit file and listens nowhere.
 *
 * Checked for every input:
 *   - it is answered, within ANSWER_DEADLINE_S (waits are capped by max_wait_ms = 20 ms);
 *   - the answer decodes as a Response with a status the contract defines;
 *   - a refusal explains itself (non-empty message);
 *   - the answer carries the request's id when the request decoded;
 *   - every segment's heap is consistent afterwards (gsd_heap_check).
 * Any failure calls abort(); sanitizers report the rest.
 *
 * The seeds (corpus.h) name the objects GS_FUZZ_DAEMON_HANDLES. Every daemon instance starts
 * from an empty audit file and makes exactly those objects first,
 * and a fresh instance replaces it after an input destroyed one of them (or the rest of the run
 * would meet only NOT_FOUND) and every RESTART_EVERY inputs (so start-up and shutdown with
 * state left over are exercised too).
 *
 * Built with replay_main.c (deterministic inputs, the default) or with libFuzzer
 * (-DGS_LIBFUZZER=ON, clang).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "corpus.h"
#include "core/daemon.h"
#include "core/log.h"
#include "lifecycle.h"
#include "rpc/rpc.h"
#include "vidmm/heap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RESTART_EVERY     512
#define ANSWER_DEADLINE_S 10
#define STOP_DEADLINE_S   10

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_dispatch: check failed: %s%s%s\n", what, detail ? ": " : "",
	        detail ? detail : "");
	abort();
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail(#cond, NULL);                                                         \
	} while (0)

static struct {
	bool up;
	unsigned inputs; /* handled by the current instance */
	char dir[64];
	char db[128];
	gsd_config cfg;
	gsd_daemon d;
	uv_loop_t loop;
	uv_async_t wake;   /* an answer arrived (from any thread) */
	uv_timer_t ticker; /* bounds every wait on the loop */
	/* The answer, written by whichever thread answers. */
	pthread_mutex_t mu;
	bool answered;
	uint8_t *resp;
	size_t resp_len;
	/* For the summary at exit: what the inputs reached. */
	uint64_t starts, answers, by_status[128], by_body[128];
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_reply(void *arg, const uint8_t *resp, size_t len)
{
	(void)arg;
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy)
		fail("out of memory", NULL);
	memcpy(copy, resp, len);
	pthread_mutex_lock(&G.mu);
	if (G.answered)
		fail("a request was answered twice", NULL);
	G.answered = true;
	G.resp = copy;
	G.resp_len = len;
	pthread_mutex_unlock(&G.mu);
	uv_async_send(&G.wake);
}

static void on_wake(uv_async_t *a)
{
	(void)a;
}

static void on_tick(uv_timer_t *t)
{
	(void)t;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool answered(void)
{
	pthread_mutex_lock(&G.mu);
	bool done = G.answered;
	pthread_mutex_unlock(&G.mu);
	return done;
}

/* Hands one message to the daemon and runs its loop until the answer is back; returns the
 * answer (malloc'd, *len bytes). */
static uint8_t *call(const uint8_t *msg, size_t len, size_t *resp_len)
{
	G.answered = false;
	if (gsd_rpc_inject(&G.d, msg, len, on_reply, NULL) != 0)
		fail("gsd_rpc_inject", "out of memory");
	double deadline = now_s() + ANSWER_DEADLINE_S;
	while (!answered()) {
		if (now_s() > deadline)
			fail("every request is answered", "no answer within the deadline");
		uv_run(&G.loop, UV_RUN_ONCE);
	}
	*resp_len = G.resp_len;
	uint8_t *resp = G.resp;
	G.resp = NULL;
	return resp;
}

/* Sends seed `which` and requires OK; returns the response for the caller to read. */
static Gpusched__V1__Response *setup_call(int which)
{
	static const gs_fuzz_handles h = GS_FUZZ_DAEMON_HANDLES;
	size_t len, rlen;
	uint8_t *msg = gs_fuzz_seed(which, &h, 1, &len);
	if (!msg)
		fail("building a set-up request", NULL);
	uint8_t *r = call(msg, len, &rlen);
	free(msg);
	Gpusched__V1__Response *resp = gpusched__v1__response__unpack(NULL, rlen, r);
	free(r);
	if (!resp)
		fail("set-up answer decodes", NULL);
	if (resp->status != GPUSCHED__V1__STATUS__STATUS_OK)
		fail("set-up request answered OK", resp->message);
	return resp;
}

/* The objects the seeds name; their handles must be the ones the seeds use. */
static void make_world(void)
{
	static const gs_fuzz_handles h = GS_FUZZ_DAEMON_HANDLES;
	Gpusched__V1__Response *r = setup_call(GS_SEED_DEVICE_CREATE);
	CHECK(r->device_create && r->device_create->device == h.device);
	gpusched__v1__response__free_unpacked(r, NULL);
	r = setup_call(GS_SEED_CONTEXT_CREATE);
	CHECK(r->context_create && r->context_create->context == h.context);
	gpusched__v1__response__free_unpacked(r, NULL);
	for (uint64_t want = h.allocation; want <= h.allocation + 1; want++) {
		r = setup_call(GS_SEED_ALLOCATION_CREATE);
		CHECK(r->allocation_create && r->allocation_create->allocation == want);
		gpusched__v1__response__free_unpacked(r, NULL);
	}
	r = setup_call(GS_SEED_SYNC_CREATE);
	CHECK(r->sync_create && r->sync_create->sync == h.sync);
	gpusched__v1__response__free_unpacked(r, NULL);
	r = setup_call(GS_SEED_SUBMIT_NULL);
	CHECK(r->submit && r->submit->packet == h.packet);
	gpusched__v1__response__free_unpacked(r, NULL);
}

/*
 * Handles are random in the daemon; here they come from a counter started again with every
 * daemon, so each instance gives the handles GS_FUZZ_DAEMON_HANDLES names (the old sequence)
 * and the corpus and the regression inputs keep naming live objects. The daemon still checks
 * each against its table and the audit file.
 */
static uint64_t next_handle;

static uint64_t counted_handle(void)
{
	return ++next_handle;
}

static void remove_files(void)
{
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		char p[160];
		snprintf(p, sizeof(p), "%s%s", G.db, suffix[i]);
		unlink(p);
	}
}

static void daemon_up(void)
{
	gsd_log_set_level(GSD_LOG_ERROR);
	if (!G.dir[0]) {
		snprintf(G.dir, sizeof(G.dir), "/tmp/gs-fuzz-dispatch-XXXXXX");
		if (!mkdtemp(G.dir))
			fail("mkdtemp", G.dir);
		snprintf(G.db, sizeof(G.db), "%s/audit.db", G.dir);
	}
	remove_files();
	gsd_config *c = &G.cfg;
	gsd_config_defaults(c);
	c->nlisten = 0;
	c->events_url[0] = '\0';
	snprintf(c->db_path, sizeof(c->db_path), "%s", G.db);
	c->virtual_clock = true;
	c->log_level = GSD_LOG_ERROR;
	c->max_wait_ms = 20;
	c->shutdown_grace_ms = 1000;
	/* Small segments: start-up, scrubbing and paging stay cheap. */
	c->adapters[0].segments[0].size = 8u << 20;
	c->adapters[0].segments[1].size = 16u << 20;
	c->adapters[0].system_memory = 64u << 20;
	CHECK(uv_loop_init(&G.loop) == 0);
	CHECK(uv_async_init(&G.loop, &G.wake, on_wake) == 0);
	CHECK(uv_timer_init(&G.loop, &G.ticker) == 0);
	CHECK(uv_timer_start(&G.ticker, on_tick, 100, 100) == 0);
	next_handle = 0;
	gsd_object_set_handle_source(counted_handle);
	if (gsd_daemon_init(&G.d, c, &G.loop) != 0)
		fail("the daemon starts", NULL);
	/* One wire id for the first packet in every instance (GS_FUZZ_DAEMON_HANDLES). */
	static const unsigned char zero_key[GSD_WIRE_KEY_BYTES];
	gsd_wire_key_init(&G.d.wire, zero_key);
	G.up = true;
	G.starts++;
	G.inputs = 0;
	make_world();
}

static void daemon_down(void)
{
	if (!G.up)
		return;
	gsd_daemon_stop(&G.d);
	double deadline = now_s() + STOP_DEADLINE_S;
	while (!gsd_daemon_engines_idle(&G.d)) {
		if (now_s() > deadline)
			fail("the engines drain after a stop", NULL);
		uv_run(&G.loop, UV_RUN_ONCE);
	}
	uv_close((uv_handle_t *)&G.wake, NULL);
	uv_close((uv_handle_t *)&G.ticker, NULL);
	gsd_daemon_destroy(&G.d);
	CHECK(uv_loop_close(&G.loop) == 0);
	G.up = false;
}

/* One line: how many inputs reached a handler, and how many were accepted. */
static void summary(void)
{
	uint64_t bodies = 0, handled = 0;
	for (int i = 1; i < 128; i++) {
		bodies += G.by_body[i] != 0;
		handled += G.by_body[i];
	}
	fprintf(stderr,
	        "fuzz_dispatch: %" PRIu64 " answers from %" PRIu64 " daemon instances; %" PRIu64
	        " requests decoded, of %" PRIu64 " body types; %" PRIu64 " answered OK, %" PRIu64
	        " UNAUTHENTICATED, %" PRIu64 " NOT_FOUND, %" PRIu64 " INVALID_ARGUMENT\n",
	        G.answers, G.starts, handled, bodies, G.by_status[GPUSCHED__V1__STATUS__STATUS_OK],
	        G.by_status[GPUSCHED__V1__STATUS__STATUS_UNAUTHENTICATED],
	        G.by_status[GPUSCHED__V1__STATUS__STATUS_NOT_FOUND],
	        G.by_status[GPUSCHED__V1__STATUS__STATUS_INVALID_ARGUMENT]);
}

static void at_exit(void)
{
	summary();
	daemon_down();
	remove_files();
	if (G.dir[0])
		rmdir(G.dir);
}

static bool known_status(int st)
{
	return protobuf_c_enum_descriptor_get_value(&gpusched__v1__status__descriptor, st) != NULL;
}

/* An accepted request that destroyed something the seeds name: the next input gets a fresh
 * daemon, or the rest would meet only NOT_FOUND. */
static bool destroys_world(const Gpusched__V1__Request *req, const Gpusched__V1__Response *resp)
{
	if (resp->status != GPUSCHED__V1__STATUS__STATUS_OK)
		return false;
	switch (req->body_case) {
	case GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY:
	case GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY:
	case GPUSCHED__V1__REQUEST__BODY_ALLOCATION_DESTROY:
	case GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY:
	case GPUSCHED__V1__REQUEST__BODY_TENANT_DESTROY:
		return true;
	default:
		return false;
	}
}

static void check_heaps(void)
{
	for (uint32_t i = 0; i < G.d.nadapters; i++) {
		const gsd_adapter *a = &G.d.adapters[i];
		for (uint32_t s = 0; s < a->nsegments; s++)
			if (gsd_heap_check(&a->segments[s].heap) != 0)
				fail("segment heaps stay consistent", a->segments[s].name);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool registered;
	if (!registered) {
		atexit(at_exit);
		registered = true;
	}
	if (G.up && G.inputs >= RESTART_EVERY)
		daemon_down();
	if (!G.up)
		daemon_up();
	G.inputs++;

	size_t rlen;
	uint8_t *r = call(data, size, &rlen);
	Gpusched__V1__Response *resp = gpusched__v1__response__unpack(NULL, rlen, r);
	free(r);
	if (!resp)
		fail("every answer decodes as a Response", NULL);
	if (!known_status(resp->status))
		fail("the status is one the contract defines", NULL);
	if (resp->status != GPUSCHED__V1__STATUS__STATUS_OK && !resp->message[0])
		fail("a refusal explains itself", NULL);
	G.answers++;
	G.by_status[(unsigned)resp->status % 128]++;
	Gpusched__V1__Request *req = gpusched__v1__request__unpack(NULL, size, data);
	if (req) {
		G.by_body[(unsigned)req->body_case % 128]++;
		if (destroys_world(req, resp))
			G.inputs = RESTART_EVERY;
		if (resp->id != req->id) {
			char ids[320];
			snprintf(ids, sizeof(ids), "%" PRIu64 " != %" PRIu64 " (status %d: %s)",
			         resp->id, req->id, resp->status, resp->message);
			fail("the answer carries the request's id", ids);
		}
		gpusched__v1__request__free_unpacked(req, NULL);
	}
	gpusched__v1__response__free_unpacked(resp, NULL);
	check_heaps();
	return 0;
}
