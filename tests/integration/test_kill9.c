/*
 * kill -9 under load: several client threads submit packets; once enough submissions were
 * acknowledged the daemon is killed with SIGKILL. Every acknowledged packet must be in the
 * audit file (a Submit is answered only after its record is committed). A daemon restarted
 * on the same file must then continue the packet and handle sequences, leaving the old rows
 * as they were.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

#define THREADS           4
#define MIN_ACKS          1000
#define MAX_PER_THREAD    20000
#define LOAD_DEADLINE_MS  30000
#define CLIENT_TIMEOUT_MS 3000

typedef struct shared {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned acks;
	bool stop;
} shared;

typedef struct worker {
	shared *sh;
	const gs_testd *t;
	uint32_t node;
	uint64_t dev, ctx;
	uint64_t *ids; /* acknowledged packet ids, in order */
	size_t n;
	int setup_rv; /* 0, or why the worker could not start */
	int last_rv;  /* the submit that ended the loop */
} worker;

static bool should_stop(shared *sh)
{
	pthread_mutex_lock(&sh->lock);
	bool stop = sh->stop;
	pthread_mutex_unlock(&sh->lock);
	return stop;
}

/* No cmocka assertions here: they must not longjmp across threads. */
static void *worker_main(void *arg)
{
	worker *w = arg;
	gs_client *c = NULL;
	gs_allocation_placement al;
	gs_allocation_desc ad = {.size = 4096};
	gs_context_desc cd;
	w->setup_rv = gs_connect(w->t->url, "", &c);
	if (w->setup_rv != 0)
		return NULL;
	gs_client_set_timeout(c, CLIENT_TIMEOUT_MS);
	w->setup_rv = gs_device_create(c, "kill9", &w->dev);
	if (w->setup_rv == 0) {
		gs_context_desc_init(&cd, w->dev, w->node);
		w->setup_rv = gs_context_create(c, &cd, &w->ctx, NULL);
	}
	ad.device = w->dev;
	if (w->setup_rv == 0)
		w->setup_rv = gs_allocation_create(c, &ad, &al);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	long long deadline = gs_test_now_ms() + LOAD_DEADLINE_MS;
	for (size_t i = 0; w->setup_rv == 0 && i < MAX_PER_THREAD && gs_test_now_ms() < deadline;
	     i++) {
		if (should_stop(w->sh))
			break;
		gs_dmabuf_reset(&buf);
		uint32_t flags = 0;
		if (i % 2) {
			gs_dmabuf_nop(&buf);
			flags = GS_SUBMIT_NULL_RENDERING;
		} else {
			gs_dmabuf_fill(&buf, al.allocation, (i * 64) % 4096, 64, (uint32_t)i);
		}
		gs_submit_result res;
		w->last_rv = gs_submit(c, w->ctx, &buf, flags, &res);
		if (w->last_rv != 0)
			break;
		w->ids[w->n++] = res.packet;
		pthread_mutex_lock(&w->sh->lock);
		w->sh->acks++;
		pthread_cond_broadcast(&w->sh->cond);
		pthread_mutex_unlock(&w->sh->lock);
	}
	gs_dmabuf_free(&buf);
	gs_close(c);
	return NULL;
}

/* Waits until at least `want` acks, or the deadline. Returns the count. */
static unsigned wait_acks(shared *sh, unsigned want, int timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&sh->lock);
	while (sh->acks < want) {
		if (pthread_cond_timedwait(&sh->cond, &sh->lock, &until) == ETIMEDOUT)
			break;
	}
	unsigned n = sh->acks;
	pthread_mutex_unlock(&sh->lock);
	return n;
}

/* The context recorded for a packet id, or 0 when the row is missing. */
static uint64_t row_context(sqlite3_stmt *q, uint64_t packet)
{
	sqlite3_reset(q);
	sqlite3_bind_int64(q, 1, (sqlite3_int64)packet);
	uint64_t ctx = 0;
	if (sqlite3_step(q) == SQLITE_ROW)
		ctx = (uint64_t)sqlite3_column_int64(q, 0);
	return ctx;
}

/* Every acknowledged packet is in `packets`, under the context that submitted it (looked up by
 * the file's number for the wire id the client was given). */
static size_t check_acked_rows(const char *db, worker *ws, int nw)
{
	sqlite3 *h = NULL;
	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		fail_msg("open %s: %s", db, sqlite3_errmsg(h));
	sqlite3_busy_timeout(h, 5000);
	sqlite3_stmt *q = NULL;
	assert_int_equal(sqlite3_prepare_v2(h, "SELECT context FROM packets WHERE packet = ?1", -1,
	                                    &q, NULL),
	                 SQLITE_OK);
	size_t checked = 0;
	for (int i = 0; i < nw; i++) {
		for (size_t k = 0; k < ws[i].n; k++, checked++) {
			uint64_t row = itest_wire_unmap(db, "packet", 0, 0, ws[i].ids[k]);
			uint64_t ctx = row_context(q, row);
			if (ctx != ws[i].ctx)
				fail_msg("acknowledged packet %" PRIu64 " (row %" PRIu64
				         ") of context %" PRIu64 ": the audit file has %s%" PRIu64,
				         ws[i].ids[k], row, ws[i].ctx, ctx ? "context " : "no row ",
				         ctx);
		}
	}
	sqlite3_finalize(q);
	sqlite3_close(h);
	return checked;
}

static void test_kill9_then_restart(void **state)
{
	gs_testd *t = *state;
	shared sh = {.acks = 0};
	pthread_mutex_init(&sh.lock, NULL);
	pthread_cond_init(&sh.cond, NULL);
	worker ws[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		ws[i] = (worker){.sh = &sh, .t = t, .node = (uint32_t)(i % 3)};
		ws[i].ids = calloc(MAX_PER_THREAD, sizeof(uint64_t));
		assert_non_null(ws[i].ids);
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
	}

	unsigned acks = wait_acks(&sh, MIN_ACKS, LOAD_DEADLINE_MS);
	gs_testd_kill9(t);
	assert_false(gs_testd_alive(t));
	pthread_mutex_lock(&sh.lock);
	sh.stop = true;
	pthread_mutex_unlock(&sh.lock);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&sh.lock);
	pthread_cond_destroy(&sh.cond);

	assert_true(acks >= MIN_ACKS);
	uint64_t max_id = 0; /* the highest file number of an acknowledged packet */
	for (int i = 0; i < THREADS; i++) {
		if (ws[i].setup_rv != 0)
			fail_msg("worker %d could not start: %s", i,
			         gs_status_name(ws[i].setup_rv));
		/* Each worker stopped because the daemon vanished (or it was told to). */
		assert_true(ws[i].last_rv <= 0);
		for (size_t k = 0; k < ws[i].n; k++) {
			uint64_t row = itest_wire_unmap(t->db, "packet", 0, 0, ws[i].ids[k]);
			max_id = row > max_id ? row : max_id;
		}
	}
	size_t checked = check_acked_rows(t->db, ws, THREADS);
	assert_true(checked >= MIN_ACKS);
	int64_t max_row = itest_audit_int(t->db, "SELECT MAX(packet) FROM packets");
	assert_true(max_row >= (int64_t)max_id);

	/* Restart on the same files. */
	assert_int_equal(gs_testd_restart(t, NULL), 0);
	gs_client *c = itest_connect(t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "after", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
	/* Handles are random and never reused, across restarts too. */
	for (int i = 0; i < THREADS; i++) {
		assert_true(dev != ws[i].ctx);
		assert_true(ctx != ws[i].ctx);
	}
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	gs_submit_result res;
	assert_int_equal(gs_submit(c, ctx, &buf, GS_SUBMIT_PRESENT, &res), 0);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(c, res.packet, ITEST_TIMEOUT_MS, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	gs_dmabuf_free(&buf);
	/* Packet numbers continue after the old ones instead of overwriting them (in the file's
	 * numbers: wire ids are opaque and not ordered), and no wire id is handed out again. */
	uint64_t new_row = itest_wire_unmap(t->db, "packet", 0, 0, res.packet);
	if (new_row <= (uint64_t)max_row)
		fail_msg("after the restart packet id %" PRIu64 " (row %" PRIu64 ") was handed out "
		         "again (the file already holds packets up to %" PRId64 ")",
		         res.packet, new_row, max_row);
	for (int i = 0; i < THREADS; i++)
		for (size_t k = 0; k < ws[i].n; k++)
			if (ws[i].ids[k] == res.packet)
				fail_msg("after the restart wire id %" PRIu64
				         " was handed out again",
				         res.packet);
	itest_audit_barrier(c, ctx);

	/* The old rows are intact, and the new packet has its own row: no row of the first run
	 * names the new device or context. */
	check_acked_rows(t->db, ws, THREADS);
	assert_int_equal(itest_audit_int(t->db,
	                                 "SELECT COUNT(*) FROM contexts WHERE context IN (%" PRIu64
	                                 ", %" PRIu64 ") OR device = %" PRIu64,
	                                 dev, ctx, dev),
	                 1);
	assert_int_equal(itest_audit_int(t->db,
	                                 "SELECT COUNT(*) FROM packets WHERE (context = %" PRIu64
	                                 " OR device = %" PRIu64 ") AND packet < %" PRIu64,
	                                 ctx, dev, new_row),
	                 0);
	assert_int_equal(itest_audit_int(t->db,
	                                 "SELECT context FROM packets WHERE packet = %" PRIu64,
	                                 new_row),
	                 (int64_t)ctx);
	assert_int_equal(itest_audit_int(t->db,
	                                 "SELECT submit_flags FROM packets WHERE packet = "
	                                 "%" PRIu64,
	                                 new_row),
	                 GS_SUBMIT_PRESENT);
	/* The old history is served by the new daemon. */
	gs_history_filter hf = {.context = ws[0].ctx, .limit = 10000};
	gs_packet_record *r;
	size_t n;
	assert_int_equal(gs_history(c, &hf, &r, &n), 0);
	assert_true(n >= ws[0].n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(r[i].context, ws[0].ctx);
	gs_history_free(r, n);
	assert_int_equal(itest_audit_int(t->db, "SELECT COUNT(*) FROM pragma_integrity_check "
	                                        "WHERE integrity_check != 'ok'"),
	                 0);
	gs_close(c);
	for (int i = 0; i < THREADS; i++)
		free(ws[i].ids);
	assert_int_equal(gs_testd_stop(t), 0);
}

static int setup(void **state)
{
	gs_testd *t = calloc(1, sizeof(*t));
	assert_non_null(t);
	if (gs_testd_start(t, NULL) != 0) {
		gs_testd_cleanup(t);
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	gs_testd *t = *state;
	gs_testd_cleanup(t);
	free(t);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_kill9_then_restart, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
