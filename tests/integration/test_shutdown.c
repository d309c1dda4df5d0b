/*
 * SIGTERM with work queued: the daemon stops accepting, cancels what is queued, lets what is
 * on the engines finish within shutdown_grace_ms (aborting it after that), flushes the audit
 * and exits 0. Every acknowledged packet ends in a final state in the audit file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

/* Packets on engines when the stop comes: one running on each of two nodes (an engine runs one
 * packet at a time). They are not cancelled by a stop, they run or are aborted. */
#define ON_ENGINE    2
#define QUEUED       4
#define SPIN_LONG_US (20u * 1000 * 1000)

typedef struct fx {
	gs_testd t;
	itest_config cfg;
	uint32_t grace_ms;
} fx;

static int start(void **state, uint32_t grace_ms)
{
	fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->grace_ms = grace_ms;
	char json[128];
	snprintf(json, sizeof(json), "{\"shutdown_grace_ms\": %u}\n", grace_ms);
	assert_int_equal(itest_config_write(&f->cfg, json), 0);
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

static int setup_short_grace(void **state)
{
	return start(state, 1000);
}

static int setup_long_grace(void **state)
{
	return start(state, 8000);
}

static int teardown(void **state)
{
	fx *f = *state;
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
	free(f);
	return 0;
}

static uint64_t submit_spin(gs_client *c, uint64_t ctx, uint64_t micros)
{
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(micros ? gs_dmabuf_spin(&buf, micros, 0) : gs_dmabuf_nop(&buf), 0);
	gs_submit_result res;
	int rv = gs_submit(c, ctx, &buf, 0, &res);
	gs_dmabuf_free(&buf);
	if (rv != 0)
		fail_msg("submit: %s: %s", gs_status_name(rv), gs_client_message(c));
	return res.packet;
}

/* The audit file's number of the packet a client was given id `packet` for (ids are opaque on
 * the wire: the file keeps the daemon's own numbers). */
static uint64_t row_of(const fx *f, uint64_t packet)
{
	return itest_wire_unmap(f->t.db, "packet", 0, 0, packet);
}

static int64_t state_of(const fx *f, uint64_t packet)
{
	return itest_audit_int(f->t.db, "SELECT state FROM packets WHERE packet = %" PRIu64,
	                       row_of(f, packet));
}

static bool has_event(const fx *f, uint64_t packet, gs_packet_state st)
{
	return itest_audit_int(f->t.db,
	                       "SELECT COUNT(*) FROM packet_events WHERE packet = %" PRIu64
	                       " AND state = %d",
	                       row_of(f, packet), (int)st) == 1;
}

/* Submits: finished packets on node 1, then `ON_ENGINE` packets spinning `engine_us`, one
 * on each of nodes 0 and 2 (an engine runs one packet at a time), and `QUEUED` long ones behind
 * the first on node 0. Sends SIGTERM and returns the wall time
 * until the daemon exited; *exit_code gets its status. */
static long long run(fx *f, uint64_t engine_us, uint64_t *done, uint64_t *engine, uint64_t *queued,
                     int *exit_code)
{
	gs_client *c = itest_connect(&f->t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "shutdown", &dev), 0);
	uint64_t ctx0 = itest_context(c, dev, 0, lay.paging_node);
	uint64_t ctx1 = itest_context(c, dev, 1, lay.paging_node);
	uint64_t ctx2 = itest_context(c, dev, 2, lay.paging_node);
	const uint64_t engine_ctx[ON_ENGINE] = {ctx0, ctx2};
	for (int i = 0; i < 3; i++) {
		done[i] = submit_spin(c, ctx1, 0);
		gs_packet_state st;
		assert_int_equal(gs_packet_wait(c, done[i], ITEST_TIMEOUT_MS, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
	}
	for (int i = 0; i < ON_ENGINE; i++)
		engine[i] = submit_spin(c, engine_ctx[i], engine_us);
	for (int i = 0; i < QUEUED; i++)
		queued[i] = submit_spin(c, ctx0, SPIN_LONG_US);
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	assert_int_equal(info->adapters[0].nodes[0].queued, 1 + QUEUED);
	assert_int_equal(info->adapters[0].nodes[2].queued, 1);
	gs_info_free(info);
	gs_close(c);

	long long t0 = gs_test_now_ms();
	*exit_code = gs_testd_stop(&f->t);
	long long took = gs_test_now_ms() - t0;
	if (*exit_code != 0)
		gs_testd_dump_log(&f->t);
	return took;
}

/* The file records the clean stop and leaves every acknowledged packet in a final state. */
static void check_common(const fx *f, const uint64_t *done, const uint64_t *queued)
{
	/* One self-contained file (issue 27): the WAL is folded in and gone (or empty), so a
	 * copy of the .db alone holds every packet and verifies. On main c4ca6f6 the records
	 * stayed in the WAL and such a copy was empty. */
	char wal[400], copy[400];
	snprintf(wal, sizeof wal, "%s-wal", f->t.db);
	snprintf(copy, sizeof copy, "%s.copy", f->t.db);
	struct stat st;
	assert_true(stat(wal, &st) != 0 || st.st_size == 0);
	assert_int_equal(itest_sh("cp '%s' '%s'", f->t.db, copy), 0);
	assert_int_equal(itest_audit_int(copy, "SELECT COUNT(*) FROM packets"),
	                 3 + ON_ENGINE + QUEUED);
	char *av[] = {(char *)GS_CLI_PATH, (char *)"audit", (char *)"verify", copy, NULL};
	itest_run r;
	itest_run_argv(av, 60000, &r);
	if (r.exit_code != 0)
		fail_msg("audit verify of the copied .db: %d\n%s%s", r.exit_code, r.out, r.err);
	itest_run_free(&r);
	for (int i = 0; i < 3; i++)
		assert_int_equal(state_of(f, done[i]), GS_PACKET_COMPLETED);
	for (int i = 0; i < QUEUED; i++) {
		assert_int_equal(state_of(f, queued[i]), GS_PACKET_CANCELLED);
		assert_true(has_event(f, queued[i], GS_PACKET_CANCELLED));
		/* A queued packet never reached an engine. */
		assert_false(has_event(f, queued[i], GS_PACKET_RUNNING));
		assert_int_equal(itest_audit_int(f->t.db,
		                                 "SELECT COUNT(*) FROM packets WHERE packet = "
		                                 "%" PRIu64
		                                 " AND result != '' AND completed_ns > 0",
		                                 row_of(f, queued[i])),
		                 1);
	}
	/* Nothing acknowledged was left in a non-final state. */
	assert_int_equal(
	        itest_audit_int(f->t.db,
	                        "SELECT COUNT(*) FROM packets WHERE state NOT IN (%d, %d, %d)",
	                        GS_PACKET_COMPLETED, GS_PACKET_CANCELLED, GS_PACKET_ABORTED),
	        0);
	assert_int_equal(itest_audit_int(f->t.db, "SELECT COUNT(*) FROM packets"),
	                 3 + ON_ENGINE + QUEUED);
	assert_int_equal(
	        itest_audit_int(f->t.db, "SELECT COUNT(*) FROM notes WHERE kind = 'daemon_stop'"),
	        1);
}

/* What is on the engine finishes inside the grace period; the queue is cancelled. */
static void test_sigterm_drains_engines(void **state)
{
	fx *f = *state;
	uint64_t done[3], engine[ON_ENGINE], queued[QUEUED];
	int rc;
	long long took = run(f, 300000, done, engine, queued, &rc);
	assert_int_equal(rc, 0);
	/* Two 300 ms spins ran, and the daemon did not wait for the 20 s ones. */
	assert_true(took < f->grace_ms);
	for (int i = 0; i < ON_ENGINE; i++) {
		assert_int_equal(state_of(f, engine[i]), GS_PACKET_COMPLETED);
		assert_true(has_event(f, engine[i], GS_PACKET_RUNNING));
	}
	check_common(f, done, queued);
}

/* What is on the engine past the grace period is aborted; the daemon still exits 0. */
static void test_sigterm_aborts_after_grace(void **state)
{
	fx *f = *state;
	uint64_t done[3], engine[ON_ENGINE], queued[QUEUED];
	int rc;
	long long took = run(f, SPIN_LONG_US, done, engine, queued, &rc);
	assert_int_equal(rc, 0);
	/* It waited for the running packet, but not much past the grace period. */
	assert_true(took >= f->grace_ms - 100);
	assert_true(took < f->grace_ms + 5000);
	for (int i = 0; i < ON_ENGINE; i++) {
		assert_int_equal(state_of(f, engine[i]), GS_PACKET_ABORTED);
		assert_true(has_event(f, engine[i], GS_PACKET_ABORTED));
	}
	check_common(f, done, queued);
}

/* A client waiting for a queued packet when SIGTERM arrives. */
typedef struct waiter {
	const char *url;
	uint64_t packet;
	int rv;
	gs_packet_state state;
} waiter;

static void *waiter_main(void *arg)
{
	waiter *w = arg;
	gs_client *c = NULL;
	w->rv = gs_connect(w->url, "", &c);
	if (w->rv != 0)
		return NULL;
	gs_client_set_timeout(c, 10000);
	w->rv = gs_packet_wait(c, w->packet, 30000, &w->state, NULL);
	gs_close(c);
	return NULL;
}

/* The queued packet is cancelled by the stop, and whoever waits for it is told so (the
 * daemon answers pending waits before it closes its connections). */
static void test_sigterm_answers_pending_waits(void **state)
{
	fx *f = *state;
	gs_client *c = itest_connect(&f->t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "shutdown", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
	uint64_t pkts[ON_ENGINE + 1];
	for (int i = 0; i < ON_ENGINE; i++)
		pkts[i] = submit_spin(c, ctx, 200000);
	pkts[ON_ENGINE] = submit_spin(c, ctx, SPIN_LONG_US);

	gs_daemon_stats s;
	assert_int_equal(gs_stats(c, &s), 0);
	uint64_t base = s.requests;
	waiter w = {.url = f->t.url, .packet = pkts[ON_ENGINE]};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
	/* The daemon counts each request it receives (each stats call counts itself): once
	 * the count passes ours, the wait is pending in the daemon. */
	long long deadline = gs_test_now_ms() + 10000;
	for (uint64_t calls = 1;; calls++) {
		assert_int_equal(gs_stats(c, &s), 0);
		if (s.requests > base + calls)
			break;
		assert_true(gs_test_now_ms() < deadline);
	}
	gs_close(c);
	assert_int_equal(gs_testd_stop(&f->t), 0);
	pthread_join(th, NULL);
	assert_int_equal(state_of(f, pkts[ON_ENGINE]), GS_PACKET_CANCELLED);
	if (w.rv != 0)
		fail_msg("the wait for a packet cancelled by SIGTERM got %s, not its answer",
		         gs_status_name(w.rv));
	assert_int_equal(w.state, GS_PACKET_CANCELLED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_sigterm_drains_engines, setup_long_grace,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_sigterm_aborts_after_grace, setup_short_grace,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_sigterm_answers_pending_waits,
	                                        setup_long_grace, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
