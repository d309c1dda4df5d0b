/*
 * Audit store: group commit, acks after durability, upserts and events, history reads with
 * tenant isolation and filters, reopening, kill -9 and I/O-error behaviour.
 *
 * Every wait on the writer thread is a condition variable with a deadline: the test waits for
 * the acks it expects, never for a guessed amount of time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "audit/audit.h"
#include "chain.h"

#define ACK_DEADLINE_S 60

enum {
	ST_SUBMITTED = 1,
	ST_READY = 2,
	ST_RUNNING = 3,
	ST_COMPLETED = 4,
	ST_FAULTED = 5,
	ST_PREEMPTED = 7,
	ST_RESUBMITTED = 8,
};

/* ---- fixture: a fresh temporary directory per test ---- */

#include "audit_fixture.h"

static int setup(void **state)
{
	struct fixture *fx = audit_fixture_new("/tmp/gs-audit");
	*state = fx;
	return 0;
}

/* ---- ack tracking ---- */

/* Acks carry the sequence number the test gave the record, so order can be checked. */
static struct tracker {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t issued; /* sequence numbers handed out (loop thread side) */
	uint64_t acked;  /* acks seen */
	uint64_t ok, failed;
	bool out_of_order;
	/* The ack of gate_seq blocks the writer until the test opens the gate. */
	uint64_t gate_seq;
	bool gate_reached, gate_open;
	pthread_t caller;   /* the test's thread (tracker_reset) */
	uint64_t on_caller; /* acks that came on it (gsd_audit_commit_here) */
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void tracker_reset(void)
{
	pthread_mutex_lock(&T.mu);
	T.issued = T.acked = T.ok = T.failed = T.gate_seq = 0;
	T.out_of_order = T.gate_reached = T.gate_open = false;
	T.caller = pthread_self();
	T.on_caller = 0;
	pthread_mutex_unlock(&T.mu);
}

static void on_ack(void *arg, bool ok)
{
	uint64_t seq = (uint64_t)(uintptr_t)arg;
	pthread_mutex_lock(&T.mu);
	if (seq != T.acked + 1)
		T.out_of_order = true;
	T.acked = seq;
	T.on_caller += pthread_equal(pthread_self(), T.caller) != 0;
	if (ok)
		T.ok++;
	else
		T.failed++;
	if (seq == T.gate_seq) {
		T.gate_reached = true;
		pthread_cond_broadcast(&T.cv);
		while (!T.gate_open)
			pthread_cond_wait(&T.cv, &T.mu);
	}
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
}

static struct timespec deadline(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ACK_DEADLINE_S;
	return ts;
}

/* Waits until `n` acks arrived in all; false on the deadline. */
static bool wait_acks(uint64_t n)
{
	struct timespec ts = deadline();
	int rc = 0;
	pthread_mutex_lock(&T.mu);
	while (T.acked < n && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&T.cv, &T.mu, &ts);
	bool done = T.acked >= n;
	pthread_mutex_unlock(&T.mu);
	return done;
}

/* ---- records ---- */

static gsd_packet_rec packet(uint64_t id, const char *tenant, uint64_t context, int state,
                             uint32_t node)
{
	return (gsd_packet_rec){
	        .packet = id,
	        .tenant = tenant,
	        .device = 100 + context,
	        .context = context,
	        .adapter = 1,
	        .node = node,
	        .fence = id * 10,
	        .submit_flags = 0x5,
	        .patch_flags = 0x2,
	        .dma_size = 4096,
	        .allocation_count = 3,
	        .patch_count = 2,
	        .state = state,
	        .submitted_ns = 1000 + id,
	};
}

/* Queues a packet record whose ack is tracked; returns its sequence number. */
static uint64_t queue(gsd_audit *a, const gsd_packet_rec *rec, const char *detail)
{
	uint64_t seq = ++T.issued;
	gsd_audit_packet(a, rec, detail, on_ack, (void *)(uintptr_t)seq);
	return seq;
}

/* Queues a packet's tracked SUBMITTED record with its allocation list. */
static uint64_t queue_submitted(gsd_audit *a, uint64_t id, const char *tenant,
                                const uint64_t *allocs, const bool *write, size_t n)
{
	gsd_packet_rec r = packet(id, tenant, 1, ST_SUBMITTED, 0);
	uint64_t seq = ++T.issued;
	gsd_audit_submitted(a, &r, NULL, allocs, write, n, on_ack, (void *)(uintptr_t)seq);
	return seq;
}

/* Queues a tracked flush: its ack means every record queued before it is committed. */
static uint64_t flush(gsd_audit *a)
{
	uint64_t seq = ++T.issued;
	gsd_audit_flush(a, on_ack, (void *)(uintptr_t)seq);
	return seq;
}

static gsd_audit *open_audit(const char *path, const gsd_audit_options *opt)
{
	gsd_audit *a = NULL;
	assert_int_equal(gsd_audit_open(path, opt, &a), 0);
	assert_non_null(a);
	return a;
}

static gsd_history_filter filter(const char *tenant)
{
	return (gsd_history_filter){.tenant = tenant, .node = -1};
}

static size_t history(const char *path, const gsd_history_filter *f, gsd_history_result *r)
{
	char err[256] = "";
	int rc = gsd_history_packets(path, f, r, err, sizeof err);
	if (rc != 0)
		fail_msg("history: %s", err);
	return r->count;
}

/* Runs a query that yields one integer, on a connection of the test's own. */
static int64_t query_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *s;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	return v;
}

static void exec_sql(const char *path, const char *sql)
{
	sqlite3 *db;
	char *err = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("%s: %s", sql, err);
	sqlite3_close(db);
}

/* ---- tests ---- */

static void test_acked_records_are_readable(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	gsd_packet_rec r = packet(1, "alpha", 7, ST_COMPLETED, 2);
	r.ready_ns = 2001;
	r.started_ns = 3001;
	r.completed_ns = 4001;
	r.preemptions = 2;
	r.resubmissions = 1;
	r.result = "ok";
	queue(a, &r, "done");
	gsd_packet_rec r2 = packet(2, "alpha", 7, ST_SUBMITTED, 2);
	queue(a, &r2, NULL);
	assert_true(wait_acks(2));
	assert_int_equal(T.ok, 2);

	gsd_history_filter f = filter("alpha");
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 2);
	assert_int_equal(h.rows[0].rec.packet, 2); /* newest first */
	const gsd_packet_rec *g = &h.rows[1].rec;
	assert_int_equal(g->packet, 1);
	assert_string_equal(g->tenant, "alpha");
	assert_int_equal(g->device, 107);
	assert_int_equal(g->context, 7);
	assert_int_equal(g->adapter, 1);
	assert_int_equal(g->node, 2);
	assert_int_equal(g->fence, 10);
	assert_int_equal(g->submit_flags, 0x5);
	assert_int_equal(g->patch_flags, 0x2);
	assert_int_equal(g->dma_size, 4096);
	assert_int_equal(g->allocation_count, 3);
	assert_int_equal(g->patch_count, 2);
	assert_int_equal(g->state, ST_COMPLETED);
	assert_int_equal(g->submitted_ns, 1001);
	assert_int_equal(g->ready_ns, 2001);
	assert_int_equal(g->started_ns, 3001);
	assert_int_equal(g->completed_ns, 4001);
	assert_int_equal(g->preemptions, 2);
	assert_int_equal(g->resubmissions, 1);
	assert_string_equal(g->result, "ok");
	assert_null(h.rows[0].rec.result);
	gsd_history_result_free(&h);

	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet = 1 AND "
	                                     "state_name = 'COMPLETED'"),
	                 1);

	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.records, 2);
	assert_true(st.commits >= 1);
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.failures, 0);
	gsd_audit_close(a);
}

/* The benchmarks' null sink (gpuschedd --bench-null-audit) acknowledges every record as written
 * and writes none: the file has no packet row afterwards. */
static void test_null_sink_writes_nothing(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.null_sink = true};
	gsd_audit *a = open_audit(fx->path, &o);
	for (uint64_t id = 1; id <= 100; id++) {
		gsd_packet_rec r = packet(id, "alpha", 7, ST_SUBMITTED, 0);
		queue(a, &r, NULL);
	}
	flush(a);
	assert_true(wait_acks(101));
	assert_int_equal(T.ok, 101);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 0);
}

/*
 * The first record's ack holds the writer while 9999 more are queued, so they are all waiting
 * when it next looks: they must go in ceil(9999 / 4096) = 3 transactions, 4 in all.
 */
static void test_group_commit(void **state)
{
	struct fixture *fx = *state;
	const uint64_t n = 10000;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	pthread_mutex_lock(&T.mu);
	T.gate_seq = 1;
	pthread_mutex_unlock(&T.mu);
	gsd_packet_rec r = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &r, NULL);

	struct timespec ts = deadline();
	pthread_mutex_lock(&T.mu);
	while (!T.gate_reached)
		assert_int_not_equal(pthread_cond_timedwait(&T.cv, &T.mu, &ts), ETIMEDOUT);
	pthread_mutex_unlock(&T.mu);

	for (uint64_t id = 2; id <= n; id++) {
		r = packet(id, "alpha", 1 + id % 3, ST_SUBMITTED, 0);
		queue(a, &r, "queued");
	}
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.queued, n - 1);

	pthread_mutex_lock(&T.mu);
	T.gate_open = true;
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
	assert_true(wait_acks(n));
	assert_false(T.out_of_order);
	assert_int_equal(T.ok, n);

	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.records, n);
	assert_int_equal(st.commits, 4);
	assert_true(st.commits < st.records);
	assert_int_equal(st.queued, 0);

	/* The default limit is 100 and the largest is 10000. */
	gsd_history_filter f = filter("alpha");
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 100);
	assert_int_equal(h.rows[0].rec.packet, n);
	assert_int_equal(h.rows[99].rec.packet, n - 99);
	gsd_history_result_free(&h);
	f.limit = 20000;
	assert_int_equal(history(fx->path, &f, &h), 10000);
	gsd_history_result_free(&h);
	gsd_audit_close(a);
}

static void test_upsert_and_events(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	static const int states[] = {ST_SUBMITTED,   ST_READY, ST_RUNNING, ST_PREEMPTED,
	                             ST_RESUBMITTED, ST_READY, ST_RUNNING, ST_COMPLETED};
	static const char *const details[] = {"submit", "ready", "run", "preempt",
	                                      NULL,     "ready", "run", "done"};
	const size_t n = sizeof states / sizeof states[0];
	gsd_packet_rec r = packet(42, "alpha", 3, ST_SUBMITTED, 1);
	for (size_t i = 0; i < n; i++) {
		r.state = states[i];
		if (states[i] == ST_PREEMPTED)
			r.preemptions++;
		if (states[i] == ST_RESUBMITTED) {
			r.resubmissions++;
			r.submit_flags |= 0x100;
		}
		if (states[i] == ST_READY)
			r.ready_ns = 5000 + i;
		if (states[i] == ST_RUNNING)
			r.started_ns = 6000 + i;
		if (states[i] == ST_COMPLETED) {
			r.completed_ns = 9000;
			r.result = "ok";
		}
		queue(a, &r, details[i]);
	}
	assert_true(wait_acks(n));
	assert_int_equal(T.ok, n);

	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 1);
	gsd_history_filter f = filter("alpha");
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 1);
	assert_int_equal(h.rows[0].rec.state, ST_COMPLETED);
	assert_int_equal(h.rows[0].rec.preemptions, 1);
	assert_int_equal(h.rows[0].rec.resubmissions, 1);
	assert_int_equal(h.rows[0].rec.submit_flags, 0x105);
	assert_int_equal(h.rows[0].rec.ready_ns, 5005);
	assert_int_equal(h.rows[0].rec.started_ns, 6006);
	assert_int_equal(h.rows[0].rec.completed_ns, 9000);
	assert_string_equal(h.rows[0].rec.result, "ok");
	gsd_history_result_free(&h);

	gsd_event_row *ev;
	size_t count;
	char err[256];
	assert_int_equal(gsd_history_events(fx->path, "alpha", 42, &ev, &count, err, sizeof err),
	                 0);
	assert_int_equal(count, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(ev[i].packet, 42);
		assert_int_equal(ev[i].state, states[i]);
		assert_string_equal(ev[i].detail, details[i] ? details[i] : "");
		assert_true(ev[i].time_ns > 0);
		if (i > 0) {
			assert_true(ev[i].seq > ev[i - 1].seq); /* oldest first */
			assert_true(ev[i].time_ns >= ev[i - 1].time_ns);
		}
	}
	free(ev);
	gsd_audit_close(a);
}

/* A later commit's record of a packet updates its row in place (not the three time indexes):
 * the row and its chain must be as the upsert left them, and the upsert still decides when
 * the row is not there, is another tenant's or has another submission time. Each record is
 * committed on its own (its ack waited for), so none is folded into another's commit. */
static gs_chain_report verify_file(const char *path);

static void test_update_in_place(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	uint64_t n = 0;
	gsd_packet_rec r = packet(7, "alpha", 2, ST_SUBMITTED, 0);
	static const int states[] = {ST_SUBMITTED, ST_READY, ST_RUNNING, ST_COMPLETED};
	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
		r.state = states[i];
		r.started_ns = states[i] >= ST_RUNNING ? 6000 : 0;
		r.result = states[i] == ST_COMPLETED ? "ok" : NULL;
		assert_true(wait_acks(n = queue(a, &r, "alpha")));
	}
	assert_int_equal(T.ok, n);
	/* Another tenant naming it: refused, the row untouched. */
	gsd_packet_rec steal = packet(7, "beta", 2, ST_FAULTED, 0);
	assert_true(wait_acks(n = queue(a, &steal, "steal")));
	assert_int_equal(T.failed, 1);
	/* No row yet (its SUBMITTED never came): made by the upsert. */
	gsd_packet_rec late = packet(8, "alpha", 2, ST_RUNNING, 0);
	assert_true(wait_acks(n = queue(a, &late, "late")));
	/* Another submission time: the upsert rewrites it, as before. */
	late.state = ST_COMPLETED;
	late.submitted_ns = 777;
	assert_true(wait_acks(n = queue(a, &late, "moved")));
	assert_int_equal(T.ok, n - 1);
	gsd_audit_close(a);

	gsd_history_filter f = filter("alpha");
	f.oldest_first = true;
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 2);
	assert_int_equal(h.rows[0].rec.packet, 8);
	assert_int_equal(h.rows[0].rec.submitted_ns, 777);
	assert_int_equal(h.rows[0].rec.state, ST_COMPLETED);
	assert_int_equal(h.rows[1].rec.packet, 7);
	assert_string_equal(h.rows[1].rec.tenant, "alpha");
	assert_int_equal(h.rows[1].rec.state, ST_COMPLETED);
	assert_int_equal(h.rows[1].rec.started_ns, 6000);
	assert_string_equal(h.rows[1].rec.result, "ok");
	gsd_history_result_free(&h);
	f.state = ST_COMPLETED; /* the state index follows the updates */
	assert_int_equal(history(fx->path, &f, &h), 2);
	gsd_history_result_free(&h);
	f.state = ST_RUNNING;
	assert_int_equal(history(fx->path, &f, &h), 0);
	gsd_history_result_free(&h);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 2);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("does not verify: %s", rep.why);
}

static void test_tenant_isolation(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	for (uint64_t id = 1; id <= 5; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_RUNNING, 0);
		queue(a, &r, "a");
	}
	for (uint64_t id = 6; id <= 8; id++) {
		gsd_packet_rec r = packet(id, "beta", 2, ST_RUNNING, 0);
		queue(a, &r, "b");
	}
	/* beta names alpha's packet: alpha's row must not change hands or state. */
	gsd_packet_rec steal = packet(3, "beta", 2, ST_FAULTED, 0);
	steal.result = "stolen";
	queue(a, &steal, "steal");
	assert_true(wait_acks(9));

	gsd_history_filter f = filter("beta");
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 3);
	for (size_t i = 0; i < h.count; i++) {
		assert_string_equal(h.rows[i].rec.tenant, "beta");
		assert_true(h.rows[i].rec.packet >= 6);
	}
	gsd_history_result_free(&h);
	f.context = 1; /* alpha's context, asked by beta */
	assert_int_equal(history(fx->path, &f, &h), 0);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.before_packet = 4;
	f.limit = 1;
	assert_int_equal(history(fx->path, &f, &h), 1);
	assert_int_equal(h.rows[0].rec.packet, 3);
	assert_string_equal(h.rows[0].rec.tenant, "alpha");
	assert_int_equal(h.rows[0].rec.state, ST_RUNNING);
	assert_null(h.rows[0].rec.result);
	gsd_history_result_free(&h);

	/* Each tenant sees only its own events of packet 3. */
	gsd_event_row *ev;
	size_t count;
	char err[256];
	assert_int_equal(gsd_history_events(fx->path, "alpha", 3, &ev, &count, err, sizeof err), 0);
	assert_int_equal(count, 1);
	assert_string_equal(ev[0].detail, "a");
	free(ev);
	assert_int_equal(gsd_history_events(fx->path, "beta", 1, &ev, &count, err, sizeof err), 0);
	assert_int_equal(count, 0);
	free(ev);
	assert_int_equal(gsd_history_events(fx->path, "gamma", 3, &ev, &count, err, sizeof err), 0);
	assert_int_equal(count, 0);
	free(ev);

	/* No tenant, no history. */
	f = filter(NULL);
	assert_int_equal(gsd_history_packets(fx->path, &f, &h, err, sizeof err), -1);
	assert_true(strlen(err) > 0);
	f = filter("");
	assert_int_equal(gsd_history_packets(fx->path, &f, &h, err, sizeof err), -1);
	assert_int_equal(gsd_history_events(fx->path, NULL, 3, &ev, &count, err, sizeof err), -1);
	gsd_audit_close(a);
}

static void assert_ids(const gsd_history_result *h, const uint64_t *ids, size_t n)
{
	assert_int_equal(h->count, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(h->rows[i].rec.packet, ids[i]);
}

static void test_filters(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	/* Packet i: context 1 + i % 2, node i % 3, state COMPLETED when i % 4 == 0. */
	for (uint64_t id = 1; id <= 12; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1 + id % 2,
		                          id % 4 ? ST_RUNNING : ST_COMPLETED, (uint32_t)(id % 3));
		queue(a, &r, NULL);
	}
	assert_true(wait_acks(12));

	gsd_history_result h;
	gsd_history_filter f = filter("alpha");
	f.context = 2;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){11, 9, 7, 5, 3, 1}, 6);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.device = 101; /* device = 100 + context */
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){12, 10, 8, 6, 4, 2}, 6);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.state = ST_COMPLETED;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){12, 8, 4}, 3);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.node = 0;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){12, 9, 6, 3}, 4);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.node = 2;
	f.context = 1;
	f.state = ST_RUNNING;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){2}, 1);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.limit = 5;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){12, 11, 10, 9, 8}, 5);
	gsd_history_result_free(&h);

	/* Paging with before_packet visits every row once, newest first. */
	f = filter("alpha");
	f.limit = 5;
	uint64_t expect = 12;
	for (;;) {
		history(fx->path, &f, &h);
		if (h.count == 0) {
			gsd_history_result_free(&h);
			break;
		}
		for (size_t i = 0; i < h.count; i++)
			assert_int_equal(h.rows[i].rec.packet, expect--);
		f.before_packet = h.rows[h.count - 1].rec.packet;
		gsd_history_result_free(&h);
	}
	assert_int_equal(expect, 0);

	f = filter("alpha");
	f.context = 2;
	f.before_packet = 7;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){5, 3, 1}, 3);
	gsd_history_result_free(&h);
	gsd_audit_close(a);
}

/* Packets 1..30 of alpha, submitted at 10 * id except: 20 at the same time as 19, and 25 earlier
 * than 24 (a clock step back). Submission order is (time, id). */
static uint64_t seeded_time(uint64_t id)
{
	if (id == 20)
		return 190;
	if (id == 25)
		return 235;
	return 10 * id;
}

/* The ids of seed_times' packets in submission order. */
static const uint64_t time_order[30] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                        16, 17, 18, 19, 20, 21, 22, 23, 25, 24, 26, 27, 28, 29, 30};

static void seed_times(gsd_audit *a, uint64_t first, uint64_t last)
{
	for (uint64_t id = first; id <= last; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1 + id % 2, ST_COMPLETED, 0);
		r.submitted_ns = seeded_time(id);
		r.submit_flags = id % 5 == 0 ? 0x2 /* Present */ : 0x8 /* NullRendering */;
		queue(a, &r, NULL);
	}
}

static void assert_order(const gsd_history_result *h, const uint64_t *order, size_t from, size_t n,
                         bool reverse)
{
	assert_int_equal(h->count, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(h->rows[i].rec.packet, order[reverse ? from - i : from + i]);
}

static void test_time_range_and_order(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	seed_times(a, 1, 30);
	assert_true(wait_acks(30));

	gsd_history_result h;
	gsd_history_filter f = filter("alpha");
	history(fx->path, &f, &h); /* newest first by (time, id) */
	assert_order(&h, time_order, 29, 30, true);
	gsd_history_result_free(&h);

	f.oldest_first = true;
	history(fx->path, &f, &h);
	assert_order(&h, time_order, 0, 30, false);
	gsd_history_result_free(&h);

	/* [190, 240): 19, 20 (both at 190), 21, 22, 23, 25 (235); not 24 (240). */
	f = filter("alpha");
	f.since_ns = 190;
	f.until_ns = 240;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){25, 23, 22, 21, 20, 19}, 6);
	gsd_history_result_free(&h);

	f.context = 1; /* context 1 + id % 2: even ids */
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){22, 20}, 2);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.until_ns = 30; /* strictly before */
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){2, 1}, 2);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.since_ns = 1ull << 63; /* at the limit: nothing is that late */
	history(fx->path, &f, &h);
	assert_int_equal(h.count, 0);
	gsd_history_result_free(&h);
	f = filter("alpha");
	f.until_ns = UINT64_MAX; /* bounds nothing */
	history(fx->path, &f, &h);
	assert_int_equal(h.count, 30);
	gsd_history_result_free(&h);

	/* Flags: Present on every fifth packet; fence: packet(id) has fence 10 * id. */
	f = filter("alpha");
	f.flags_mask = 0x2;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){30, 25, 20, 15, 10, 5}, 6);
	gsd_history_result_free(&h);
	f.flags_mask = 0x2 | 0x8;
	history(fx->path, &f, &h);
	assert_int_equal(h.count, 30);
	gsd_history_result_free(&h);
	/* A fence is a context's: the filter matches the column, alone or with the context. */
	f = filter("alpha");
	f.fence = 170;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){17}, 1);
	gsd_history_result_free(&h);
	f.fence = 175; /* no packet has it */
	history(fx->path, &f, &h);
	assert_int_equal(h.count, 0);
	gsd_history_result_free(&h);
	gsd_audit_close(a);
}

/* Pages through with a cursor while new packets arrive between pages: newest first, the pages
 * still to come are exactly the older rows; oldest first, the new rows come at the end. */
static void test_cursor_stable_while_rows_arrive(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	seed_times(a, 1, 24);
	assert_true(wait_acks(24));

	/* Newest first, pages of 7, from a snapshot of 24 rows whose order is time_order[0..23]
	 * minus 25 (not yet written): 1..23, 24. */
	gsd_history_filter f = filter("alpha");
	f.limit = 7;
	uint64_t seen[64];
	size_t nseen = 0;
	uint64_t next_id = 25;
	for (int page = 0; page < 10; page++) {
		gsd_history_result h;
		history(fx->path, &f, &h);
		for (size_t i = 0; i < h.count; i++)
			seen[nseen++] = h.rows[i].rec.packet;
		size_t n = h.count;
		if (n)
			f.before_packet = h.rows[n - 1].rec.packet;
		gsd_history_result_free(&h);
		if (n == 0)
			break;
		/* A packet arrives between pages, later than all; none of them is seen. */
		gsd_packet_rec r = packet(next_id, "alpha", 1, ST_SUBMITTED, 0);
		r.submitted_ns = 1000 + next_id++;
		queue(a, &r, NULL);
		assert_true(wait_acks(next_id - 1));
	}
	assert_int_equal(nseen, 24);
	for (size_t i = 0; i < 24; i++)
		assert_int_equal(seen[i], 24 - i);

	/* Oldest first from the start: every row once, including those added while paging. */
	f = filter("alpha");
	f.limit = 5;
	f.oldest_first = true;
	nseen = 0;
	uint64_t last_time = 0;
	for (int page = 0; page < 20; page++) {
		gsd_history_result h;
		history(fx->path, &f, &h);
		for (size_t i = 0; i < h.count; i++) {
			assert_true(h.rows[i].rec.submitted_ns >= last_time);
			last_time = h.rows[i].rec.submitted_ns;
			seen[nseen++] = h.rows[i].rec.packet;
		}
		size_t n = h.count;
		if (n)
			f.after_packet = h.rows[n - 1].rec.packet;
		gsd_history_result_free(&h);
		if (n == 0)
			break;
		if (page < 3) {
			gsd_packet_rec r = packet(next_id, "alpha", 1, ST_SUBMITTED, 0);
			r.submitted_ns = 1000 + next_id++;
			queue(a, &r, NULL);
			assert_true(wait_acks(next_id - 1));
		}
	}
	assert_int_equal(nseen, next_id - 1);
	for (size_t i = 0; i < nseen; i++)
		for (size_t j = i + 1; j < nseen; j++)
			assert_true(seen[i] != seen[j]);

	/* A cursor naming no packet of the tenant (made up, beyond every id, or another tenant's)
	 * has no place: nothing is before it, everything is after it. Standing at the nearest id
	 * below, as it used to, would place a made-up cursor among other tenants' packets. */
	gsd_packet_rec other = packet(next_id, "beta", 1, ST_SUBMITTED, 0);
	other.submitted_ns = 1000 + next_id;
	queue(a, &other, NULL);
	assert_true(wait_acks(next_id));
	const uint64_t cursors[] = {1000000, UINT64_MAX, next_id};
	for (size_t k = 0; k < sizeof(cursors) / sizeof(cursors[0]); k++) {
		gsd_history_result h;
		f = filter("alpha");
		f.limit = 1000;
		f.before_packet = cursors[k];
		history(fx->path, &f, &h);
		assert_int_equal(h.count, 0);
		gsd_history_result_free(&h);
		f.before_packet = 0;
		f.after_packet = cursors[k];
		f.oldest_first = true;
		history(fx->path, &f, &h);
		assert_int_equal(h.count, next_id - 1);
		gsd_history_result_free(&h);
	}
	gsd_audit_close(a);
}

/* Each query shape reads one index range in order: no table scan, no sort. */
static void test_history_query_plans(void **state)
{
	struct fixture *fx = *state;
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_audit_close(a);

	static const struct {
		gsd_history_filter f;
		const char *index;
	} cases[] = {
	        {{.tenant = "a", .node = -1}, "packets_tenant_time"},
	        {{.tenant = "a", .node = -1, .since_ns = 5, .until_ns = 9}, "packets_tenant_time"},
	        {{.tenant = "a", .node = -1, .since_ns = 5, .oldest_first = true},
	         "packets_tenant_time"},
	        {{.tenant = "a", .node = -1, .context = 3, .since_ns = 5, .until_ns = 9},
	         "packets_tenant_context_time"},
	        {{.tenant = "a", .node = -1, .state = ST_RUNNING, .until_ns = 9},
	         "packets_tenant_state_time"},
	        {{.tenant = "a", .node = -1, .before_packet = 77}, "packets_tenant_time"},
	        {{.tenant = "a",
	          .node = -1,
	          .context = 3,
	          .after_packet = 77,
	          .oldest_first = true},
	         "packets_tenant_context_time"},
	};
	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char sql[GSD_HISTORY_SQL_MAX], plan[2048] = "";
		char eqp[GSD_HISTORY_SQL_MAX + 32];
		gsd_history_query_sql(&cases[i].f, sql, sizeof sql);
		snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sql);
		sqlite3_stmt *s;
		assert_int_equal(sqlite3_prepare_v2(db, eqp, -1, &s, NULL), SQLITE_OK);
		while (sqlite3_step(s) == SQLITE_ROW) {
			strncat(plan, (const char *)sqlite3_column_text(s, 3),
			        sizeof plan - strlen(plan) - 2);
			strcat(plan, ";");
		}
		sqlite3_finalize(s);
		if (!strstr(plan, cases[i].index) || strstr(plan, "TEMP B-TREE") ||
		    strstr(plan, "SCAN packets"))
			fail_msg("case %zu: plan '%s' does not read %s in order", i, plan,
			         cases[i].index);
	}
	sqlite3_close(db);
}

/* One sequence numbers the appended rows of all four tables, returned when queued, continued
 * after a reopen, and used by the ABORTED rows of a reconcile too. */
static gs_chain_report verify_file(const char *path);

static void test_audit_sequence(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_packet_rec r = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	uint64_t s1 = gsd_audit_packet(a, &r, NULL, NULL, NULL);
	uint64_t s2 = gsd_audit_note(a, "alpha", "k", "d");
	uint64_t s3 = gsd_audit_error(a, "alpha", "submit", 3, "bad");
	gsd_move_rec m = {.allocation = 4, .tenant = "alpha", .kind = 1};
	uint64_t s4 = gsd_audit_move(a, &m);
	r.state = ST_RUNNING;
	uint64_t s5 = gsd_audit_packet(a, &r, NULL, NULL, NULL);
	assert_int_equal(s1, 1);
	assert_int_equal(s2, 2);
	assert_int_equal(s3, 3);
	assert_int_equal(s4, 4);
	assert_int_equal(s5, 5);
	assert_true(wait_acks(flush(a)));
	assert_int_equal(query_int(fx->path, "SELECT group_concat(seq) = '1,5' FROM packet_events"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT seq FROM notes"), 2);
	assert_int_equal(query_int(fx->path, "SELECT seq FROM errors"), 3);
	assert_int_equal(query_int(fx->path, "SELECT seq FROM moves"), 4);
	gsd_audit_close(a);

	/* Packet 1 was left RUNNING: the reopen records it ABORTED as seq 6; new rows go on. */
	a = open_audit(fx->path, NULL);
	assert_int_equal(query_int(fx->path, "SELECT max(seq) FROM packet_events"), 6);
	assert_int_equal(query_int(fx->path, "SELECT state FROM packet_events WHERE seq = 6"), 6);
	assert_int_equal(gsd_audit_note(a, NULL, "k", NULL), 7);
	gsd_audit_close(a);
	a = open_audit(fx->path, NULL);
	assert_int_equal(gsd_audit_note(a, NULL, "k", NULL), 8);
	gsd_audit_close(a);

	/* A context record is the last one a daemon wrote (its seq lives in the chain table):
	 * the next daemon's numbers go on past it, and its records are not refused. */
	tracker_reset();
	a = open_audit(fx->path, NULL);
	gsd_context_rec x = {.context = 4, .tenant = "alpha", .device = 1};
	gsd_audit_context(a, &x);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT max(seq) FROM chain"), 9);
	tracker_reset();
	a = open_audit(fx->path, NULL);
	x.priority = 1;
	gsd_audit_context(a, &x);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM chain"), 2);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("%s", rep.why);
}

/* ---- the hash chain ---- */

static gs_chain_report verify_file(const char *path)
{
	sqlite3 *db;
	gs_chain_report rep;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	if (gs_chain_verify(db, &rep) != 0)
		fail_msg("verify could not read %s: %s", path, rep.why);
	sqlite3_close(db);
	return rep;
}

/* A copy of the file at `path` as `<path>.<tag>`, edited with `sql` (the way a person with the
 * sqlite3 shell would), then verified. */
static gs_chain_report tampered(const char *path, const char *tag, const char *sql)
{
	char copy[160], cmd[800];
	snprintf(copy, sizeof copy, "%s.%s", path, tag);
	/* With its WAL, for a file a daemon still writes (its last connection folds it in). */
	snprintf(cmd, sizeof cmd, "cp '%s' '%s' && { ! test -e '%s-wal' || cp '%s-wal' '%s-wal'; }",
	         path, copy, path, path, copy);
	assert_int_equal(system(cmd), 0);
	exec_sql(copy, sql);
	gs_chain_report rep = verify_file(copy);
	unlink(copy);
	return rep;
}

/* Every kind of record, some packets with all their transitions in one batch (only the last
 * writes the packets row), others one per commit. */
static uint64_t write_mixed_history(gsd_audit *a)
{
	uint64_t records = 0;
	for (uint64_t id = 1; id <= 6; id++) {
		static const int states[] = {ST_SUBMITTED, ST_READY, ST_RUNNING, ST_COMPLETED};
		uint64_t allocs[2] = {id * 10, id * 10 + 1};
		bool w[2] = {true, false};
		for (int k = 0; k < 4; k++) {
			gsd_packet_rec r =
			        packet(id, id % 2 ? "alpha" : "beta", 1 + id % 3, states[k], 0);
			if (k == 0) /* the SUBMITTED record carries the allocation list */
				gsd_audit_submitted(a, &r, NULL, allocs, w, 2, NULL, NULL);
			else
				queue(a, &r, k == 3 ? "done" : NULL);
			records++;
			if (id > 3)
				assert_true(wait_acks(flush(a)));
		}
	}
	gsd_context_rec x = {.context = 9, .tenant = "alpha", .device = 3, .priority_class = 2};
	gsd_audit_context(a, &x);
	x.priority = 3;
	gsd_audit_context(a, &x);
	gsd_allocation_rec al = {.allocation = 21, .tenant = "beta", .size = 4096, .segment = 1};
	gsd_audit_allocation(a, &al);
	gsd_move_rec m = {.allocation = 21, .tenant = "beta", .kind = 1, .bytes = 4096};
	gsd_audit_move(a, &m);
	gsd_audit_error(a, NULL, "submit", 3, "bad packet");
	gsd_audit_note(a, "alpha", "tdr", NULL);
	records += 6;
	assert_true(wait_acks(flush(a)));
	return records;
}

static void test_chain_verifies_and_finds_edits(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	uint64_t records = write_mixed_history(a);
	gsd_audit_close(a);

	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("fresh file does not verify: %s", rep.why);
	assert_int_equal(rep.records, records);
	assert_int_equal(rep.first_seq, 1);
	assert_int_equal(rep.last_seq, records);
	assert_int_equal(rep.rows, 6 + 1 + 1); /* packets, contexts, allocations */

	/* A packet's last event always holds the packets row's state; one committed on its own
	 * does too, while an event a later one of the same commit follows holds none. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events e WHERE seq ="
	                                     " (SELECT max(seq) FROM packet_events WHERE packet ="
	                                     " e.packet) AND state_digest IS NULL"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events WHERE packet > 3"
	                                     " AND length(state_digest) = 16"),
	                 12);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events WHERE"
	                                     " length(hash) = 16"),
	                 24);
	/* Removing a state, or adding one, breaks the record's link. */
	int64_t seq = query_int(fx->path, "SELECT seq FROM packet_events WHERE packet = 5 AND"
	                                  " state = 3");
	rep = tampered(fx->path, "nostate",
	               "UPDATE packet_event_rows SET state_digest = NULL WHERE seq ="
	               " (SELECT seq FROM packet_events WHERE packet = 5 AND state = 3)");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, seq);
	rep = tampered(fx->path, "lastnostate",
	               "UPDATE packet_event_rows SET state_digest = NULL, hash = NULL WHERE seq ="
	               " (SELECT max(seq) FROM packet_events WHERE packet = 5)");
	assert_false(rep.ok);

	/* An edited event: found at its own seq. */
	rep = tampered(fx->path, "ev",
	               "UPDATE packet_event_rows SET time_ns = time_ns + 1 WHERE seq ="
	               " (SELECT seq FROM packet_events WHERE packet = 5 AND state = 3)");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, seq);
	assert_string_equal(rep.bad_table, "packet_event_rows");

	/* Removed rows: the record after a removed one no longer links; removing the newest
	 * leaves the chain short of the head in meta. */
	int64_t note = query_int(fx->path, "SELECT seq FROM notes");
	rep = tampered(fx->path, "error", "DELETE FROM errors");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, note); /* the error came just before the note */
	rep = tampered(fx->path, "note", "DELETE FROM notes");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "meta");
	assert_int_equal(rep.bad_seq, note - 1);
	int64_t ctx_seq = query_int(fx->path, "SELECT min(seq) FROM chain"); /* a context */
	rep = tampered(fx->path, "chain",
	               "DELETE FROM chain WHERE seq = (SELECT min(seq) FROM chain)");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, ctx_seq + 1);
	/* A packet's allocation list is part of its SUBMITTED record. */
	rep = tampered(fx->path, "list",
	               "DELETE FROM packet_allocations WHERE packet = 1 AND slot = 1");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, 1);
	assert_string_equal(rep.bad_table, "packet_event_rows");
	rep = tampered(fx->path, "listadd", "INSERT INTO packet_allocations VALUES (2, 2, 99, 1)");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, 5);
	rep = tampered(fx->path, "events", "DELETE FROM packet_event_rows WHERE seq = 3");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, 4);
	rep = tampered(fx->path, "add",
	               "INSERT INTO errors (seq, time_ns, tenant, request, status,"
	               " message) VALUES (100000, 1, 'alpha', 'x', 1, 'forged')");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, 100000);
	assert_string_equal(rep.bad_table, "errors");

	/* Two events swapped (reordered): found at the first of them. */
	rep = tampered(fx->path, "swap",
	               "UPDATE packet_event_rows SET seq = -seq WHERE seq IN (2, 3);"
	               " UPDATE packet_event_rows SET seq = CASE seq WHEN -2 THEN 3 ELSE 2 END"
	               " WHERE seq < 0");
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, 2);

	/* Rows updated in place: a packet's state, a context's priority, a placement. */
	rep = tampered(fx->path, "pkt",
	               "UPDATE packets SET result = 'nothing happened' WHERE"
	               " packet = 4");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 4);
	rep = tampered(fx->path, "ctx", "UPDATE contexts SET priority = 7");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "contexts");
	assert_int_equal(rep.bad_row, 9);
	rep = tampered(fx->path, "al", "UPDATE allocations SET segment = 2");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "allocations");
	rep = tampered(fx->path, "pa", "UPDATE packet_allocations SET write = 0");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packet_event_rows"); /* the SUBMITTED event */
	assert_non_null(strstr(rep.why, "allocation list in packet_allocations"));
	rep = tampered(fx->path, "newpkt",
	               "INSERT INTO packets (packet, tenant, device, context, adapter, node, fence,"
	               " submit_flags, patch_flags, dma_size, allocation_count, patch_count, state,"
	               " state_name, submitted_ns, ready_ns, started_ns, completed_ns, preemptions,"
	               " resubmissions, result, id)"
	               " SELECT 999, tenant, device, context, adapter, node, fence,"
	               " submit_flags, patch_flags, dma_size, allocation_count, patch_count, state,"
	               " state_name, submitted_ns, ready_ns, started_ns, completed_ns, preemptions,"
	               " resubmissions, result, id + 1 FROM packets WHERE packet = 1");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 999);
	/* A client's id pointed at another packet's row. */
	rep = tampered(fx->path, "pktid", "UPDATE packets SET id = id + 1 WHERE packet = 2");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 2);
	assert_non_null(strstr(rep.why, "client id"));
	assert_true(verify_file(fx->path).schema_checked);

	/* Issue 26, item 6: what verified OK on main c4ca6f6. A removed row of a table updated in
	 * place: the packet would vanish from history, explain and usage. */
	rep = tampered(fx->path, "delpkt", "DELETE FROM packets WHERE packet = 4");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 4);
	rep = tampered(fx->path, "delctx", "DELETE FROM contexts");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "contexts");
	assert_int_equal(rep.bad_row, 9);
	rep = tampered(fx->path, "delal", "DELETE FROM allocations");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "allocations");
	assert_int_equal(rep.bad_row, 21);
	/* The newest record cut and the kept one's link copied into chain_head. */
	rep = tampered(fx->path, "cut",
	               "DELETE FROM notes; UPDATE meta SET value = (SELECT lower(hex(hash)) FROM"
	               " errors) WHERE key = 'chain_head'");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "meta");
	assert_non_null(strstr(rep.why, "newest records were removed"));
	/* The start moved past every record (and the head removed): nothing would be walked. */
	rep = tampered(fx->path, "start",
	               "UPDATE meta SET value = '1000000' WHERE key = 'chain_start_seq';"
	               " DELETE FROM meta WHERE key IN ('chain_head', 'chain_head_seq')");
	assert_false(rep.ok);
	assert_non_null(strstr(rep.why, "start was moved"));
	/* Rows declared older than the chain, so that an added one would not be checked. */
	rep = tampered(fx->path, "startpkt",
	               "UPDATE meta SET value = '1000' WHERE key = 'chain_start_packet'");
	assert_false(rep.ok);
	assert_non_null(strstr(rep.why, "chain_start_packet"));
	/* The schema objects readers trust: a view, the state names, a trigger. */
	rep = tampered(fx->path, "view",
	               "DROP VIEW usage_by_tenant; CREATE VIEW usage_by_tenant AS SELECT"
	               " 'nobody' AS tenant, 0 AS packets");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "usage_by_tenant");
	rep = tampered(fx->path, "states",
	               "UPDATE packet_states SET name = 'COMPLETED' WHERE"
	               " state = 5");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packet_states");
	rep = tampered(fx->path, "trigger",
	               "CREATE TRIGGER hide AFTER INSERT ON errors BEGIN DELETE FROM errors"
	               " WHERE seq = new.seq; END");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "hide");
	rep = tampered(fx->path, "dropview", "DROP VIEW packet_event_log");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packet_event_log");
}

/* Verifies the file at path against a kept head. */
static gs_chain_report verify_pinned(const char *path, const gs_chain_pin *pin)
{
	sqlite3 *db;
	gs_chain_report rep;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	if (gs_chain_verify_pinned(db, pin, &rep) != 0)
		fail_msg("verify could not read %s: %s", path, rep.why);
	sqlite3_close(db);
	return rep;
}

/* A head kept elsewhere (seq and link, as verify prints it) catches what a file edited
 * consistently hides: the newest records cut with chain_head and chain_head_seq rewritten. */
static void test_chain_pinned_head(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	write_mixed_history(a);
	gsd_audit_close(a);
	gs_chain_report rep = verify_file(fx->path);
	assert_true(rep.ok);
	gs_chain_pin pin = {.seq = rep.last_seq};
	memcpy(pin.hash, rep.head, GS_CHAIN_HASH);
	rep = verify_pinned(fx->path, &pin);
	assert_true(rep.ok);
	assert_true(rep.pin_checked);

	char copy[160];
	snprintf(copy, sizeof copy, "%s.cut", fx->path);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "cp '%s' '%s'", fx->path, copy);
	assert_int_equal(system(cmd), 0);
	exec_sql(copy, "DELETE FROM notes; UPDATE meta SET value = (SELECT lower(hex(hash)) FROM"
	               " errors) WHERE key = 'chain_head'; UPDATE meta SET value = (SELECT seq"
	               " FROM errors) WHERE key = 'chain_head_seq'");
	assert_true(verify_file(copy).ok); /* consistent in itself */
	rep = verify_pinned(copy, &pin);
	assert_false(rep.ok);
	assert_int_equal(rep.bad_seq, pin.seq);
	assert_non_null(strstr(rep.why, "chain ends before it"));
	/* An older kept head (the error's record) still matches the file that grew after it;
	 * another link at that seq does not. */
	pin.seq = (uint64_t)query_int(fx->path, "SELECT seq FROM errors");
	sqlite3 *db;
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT hash FROM errors", -1, &st, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	memcpy(pin.hash, sqlite3_column_blob(st, 0), GS_CHAIN_HASH);
	sqlite3_finalize(st);
	sqlite3_close(db);
	assert_true(verify_pinned(fx->path, &pin).ok);
	pin.hash[0] ^= 1;
	rep = verify_pinned(fx->path, &pin);
	assert_false(rep.ok);
	assert_non_null(strstr(rep.why, "rewritten"));
	unlink(copy);
}

/* Records after a daemon died (reconciled ABORTED rows) and after reopening continue the chain;
 * a failed commit does not advance it. */
static void test_chain_across_reopen_and_failure(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t id = 1; id <= 5; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_RUNNING, 0);
		queue(a, &r, NULL);
	}
	assert_true(wait_acks(5));
	gsd_audit_close(a);
	a = open_audit(fx->path, NULL); /* 5 packets reconciled as ABORTED */
	assert_int_equal(gsd_audit_reconciled(a), 5);
	gsd_audit_note(a, NULL, "started", NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("reopened file does not verify: %s", rep.why);
	assert_int_equal(rep.records, 5 + 5 + 1);

	/* A record SQLite refuses on its own (a NULL tenant in packets) is not in the chain and
	 * the chain stays whole. */
	tracker_reset();
	a = open_audit(fx->path, NULL);
	gsd_packet_rec bad = packet(50, NULL, 1, ST_SUBMITTED, 0);
	queue(a, &bad, NULL);
	gsd_audit_note(a, NULL, "after", NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("a refused record broke the chain: %s", rep.why);
	assert_int_equal(rep.records, 5 + 5 + 1 + 1);
}

/* ---- schema 8: the events a packets row keeps ---- */

/* A packet's records as the daemon makes them: SUBMITTED as submitted (no patch flags yet, its
 * event at its submission time), then READY, RUNNING and COMPLETED each at the row's time of
 * that state. With `straight`, one run; otherwise preempted once and run again. */
static void straight_records(gsd_audit *a, uint64_t id, const char *tenant, bool straight,
                             const char *ready_why, bool commit_submitted)
{
	gsd_packet_rec r = packet(id, tenant, 1, ST_SUBMITTED, 0);
	uint64_t allocs[2] = {id * 10, id * 10 + 1};
	bool w[2] = {true, false};
	r.patch_flags = 0;
	r.event_ns = r.submitted_ns;
	gsd_audit_submitted(a, &r, id % 2 ? "DISPATCH kernel 1" : NULL, allocs, w, 2, NULL, NULL);
	if (commit_submitted)
		assert_true(wait_acks(flush(a)));
	r.patch_flags = 0x2;
	r.state = ST_READY;
	r.ready_ns = r.event_ns = r.submitted_ns + 100;
	gsd_audit_packet(a, &r, ready_why, NULL, NULL);
	r.state = ST_RUNNING;
	r.started_ns = r.event_ns = r.ready_ns + 100;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	if (!straight) {
		r.state = ST_PREEMPTED;
		r.preemptions = 1;
		r.event_ns = r.started_ns + 50;
		gsd_audit_packet(a, &r, "quantum expired", NULL, NULL);
		r.state = ST_RESUBMITTED;
		r.resubmissions = 1;
		r.submit_flags |= 0x80;
		r.event_ns += 10;
		gsd_audit_packet(a, &r, "node fence 2", NULL, NULL);
		r.state = ST_READY;
		r.ready_ns = r.event_ns = r.event_ns + 10;
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
		r.state = ST_RUNNING;
		r.started_ns = r.event_ns = r.ready_ns + 10;
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
	}
	r.state = ST_COMPLETED;
	r.completed_ns = r.event_ns = r.started_ns + 1000;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
}

/* A straight run costs its packets row alone: its four events live in the row, the file
 * verifies, every reader sees the four events, and an edit of any kept column, of its list or
 * of a packet still SUBMITTED is found. Other packets keep their event rows. */
static void test_kept_events(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t id = 1; id <= 3; id++) /* all four records in one commit */
		straight_records(a, id, "alpha", true, id == 2 ? "after 1 earlier packet" : NULL,
		                 false);
	for (uint64_t id = 4; id <= 6; id++) /* SUBMITTED acknowledged on its own first */
		straight_records(a, id, "alpha", true, NULL, true);
	straight_records(a, 7, "alpha", false, NULL, true); /* preempted: event rows */
	gsd_packet_rec waiting = packet(8, "beta", 2, ST_SUBMITTED, 0);
	waiting.patch_flags = 0;
	waiting.event_ns = waiting.submitted_ns;
	gsd_audit_packet(a, &waiting, NULL, NULL, NULL); /* stays SUBMITTED */
	gsd_audit_note(a, NULL, "after", NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);

	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("kept events do not verify: %s", rep.why);
	assert_int_equal(rep.records, 6 * 4 + 8 + 1 + 1);
	/* Packets 1 to 6: no event rows. Packet 7: its SUBMITTED in its row, 7 rows. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows"), 7);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows WHERE"
	                                     " packet <> 7"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE end_seq <> 0"), 6);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE seq <> 0"), 8);
	/* The view shows every event, in the order they were recorded. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 6 * 4 + 8 + 1);
	assert_int_equal(query_int(fx->path, "SELECT group_concat(state, '') FROM (SELECT state"
	                                     " FROM packet_events WHERE packet = 2 ORDER BY seq)"),
	                 1234);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM event_log WHERE packet_id ="
	                                     " (SELECT id FROM packets WHERE packet = 2) AND"
	                                     " detail = 'after 1 earlier packet'"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT run_ns FROM packet_usage WHERE packet = 3"),
	                 1000);
	assert_int_equal(query_int(fx->path, "SELECT run_ns FROM packet_usage WHERE packet = 7"),
	                 50 + 1000);

	/* The daemon's readers: one packet's events, a seq range, a time window. */
	gsd_event_row *ev;
	size_t n;
	char err[256];
	assert_int_equal(gsd_history_events(fx->path, "alpha", 2, &ev, &n, err, sizeof err), 0);
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(ev[i].state, (int)i + 1);
		assert_int_equal(ev[i].time_ns,
		                 1002 + 100 * (i > 0) + 100 * (i > 1) + 1000 * (i > 2));
		assert_true(i == 0 || ev[i].seq > ev[i - 1].seq);
	}
	assert_string_equal(ev[1].detail, "after 1 earlier packet");
	free(ev);
	assert_int_equal(
	        gsd_history_events_range(fx->path, "alpha", 0, 0, 1000, &ev, &n, err, sizeof err),
	        0);
	assert_int_equal(n, 6 * 4 + 8);
	for (size_t i = 1; i < n; i++)
		assert_true(ev[i].seq > ev[i - 1].seq);
	uint64_t mid = ev[10].seq;
	free(ev);
	assert_int_equal(
	        gsd_history_events_range(fx->path, "alpha", mid, 0, 5, &ev, &n, err, sizeof err),
	        0);
	assert_int_equal(n, 5);
	assert_true(ev[0].seq > mid);
	free(ev);
	assert_int_equal(gsd_history_events_window(fx->path, "alpha", 0, 1003, 1005, 100, &ev, &n,
	                                           err, sizeof err),
	                 0);
	assert_int_equal(n, 8); /* packets 3 and 4 */
	free(ev);
	assert_int_equal(gsd_history_events(fx->path, "beta", 8, &ev, &n, err, sizeof err), 0);
	assert_int_equal(n, 1);
	free(ev);
	/* A page of one: the seq ranges read grow past the other tenant's events to it. */
	assert_int_equal(
	        gsd_history_events_range(fx->path, "beta", 0, 0, 1, &ev, &n, err, sizeof err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].packet, 8);
	free(ev);
	assert_int_equal(
	        gsd_history_events_window(fx->path, "beta", 0, 0, 0, 1, &ev, &n, err, sizeof err),
	        0);
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].packet, 8);
	free(ev);

	/* Every kept column is covered: an edit is found at the packet's row. */
	static const struct {
		const char *tag, *sql;
		int64_t row;
	} edits[] = {
	        {"sub", "UPDATE packets SET submitted_ns = submitted_ns + 1 WHERE packet = 2", 2},
	        {"subd", "UPDATE packets SET submit_detail = 'x' WHERE packet = 3", 3},
	        {"ready", "UPDATE packets SET ready_ns = ready_ns + 1 WHERE packet = 5", 5},
	        {"readyd", "UPDATE packets SET ready_detail = NULL WHERE packet = 2", 2},
	        {"run", "UPDATE packets SET started_ns = started_ns - 1 WHERE packet = 4", 4},
	        {"end", "UPDATE packets SET completed_ns = 1 WHERE packet = 6", 6},
	        {"result", "UPDATE packets SET result = 'x' WHERE packet = 1", 1},
	        /* (a moved record: found at the record after its place, packet 7's SUBMITTED) */
	        {"endseq", "UPDATE packets SET end_seq = end_seq + 100 WHERE packet = 6", 7},
	        {"hash", "UPDATE packets SET hash = zeroblob(16) WHERE packet = 1", 1},
	        {"list", "UPDATE packet_allocations SET write = 0 WHERE packet = 4", 4},
	        {"waiting", "UPDATE packets SET state = 4 WHERE packet = 8", 8},
	        {"waitsub", "UPDATE packets SET device = 1 WHERE packet = 8", 8},
	        {"mixed", "UPDATE packets SET submit_detail = 'y' WHERE packet = 7", 7},
	};
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		rep = tampered(fx->path, edits[i].tag, edits[i].sql);
		if (rep.ok)
			fail_msg("edit '%s' not found", edits[i].tag);
		if (strcmp(rep.bad_table, "packets") != 0 && strcmp(rep.bad_table, "meta") != 0)
			fail_msg("edit '%s' found at %s row %lld: %s", edits[i].tag, rep.bad_table,
			         (long long)rep.bad_row, rep.why);
		if (!strcmp(rep.bad_table, "packets") && rep.bad_row != edits[i].row)
			fail_msg("edit '%s' found at packets row %lld: %s", edits[i].tag,
			         (long long)rep.bad_row, rep.why);
	}
	/* A file of a newer schema is refused, not misread. */
	{
		char copy[160], cmd[400];
		snprintf(copy, sizeof copy, "%s.newer", fx->path);
		snprintf(cmd, sizeof cmd, "cp '%s' '%s'", fx->path, copy);
		assert_int_equal(system(cmd), 0);
		exec_sql(copy, "UPDATE meta SET value = '10' WHERE key = 'schema_version'");
		sqlite3 *db;
		assert_int_equal(sqlite3_open_v2(copy, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		gs_chain_report newer;
		assert_int_equal(gs_chain_verify(db, &newer), -1);
		assert_non_null(strstr(newer.why, "schema version 10"));
		sqlite3_close(db);
		unlink(copy);
	}
	/* Removing a straight packet's row is found too. */
	rep = tampered(fx->path, "gone", "DELETE FROM packets WHERE packet = 3");
	assert_false(rep.ok);

	/* Writing goes on after a reopen: the next seq is past the kept ones. */
	tracker_reset();
	a = open_audit(fx->path, NULL);
	straight_records(a, 9, "alpha", true, NULL, false);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after a reopen: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(DISTINCT seq) FROM packet_events"),
	                 query_int(fx->path, "SELECT count(*) FROM packet_events"));
}

/* A refused record that was to write a row keeping events already linked (a straight run's
 * end; here its packet has no tenant, which the table refuses): its packet's batch is written
 * again with those events as rows, so the chain holds every link it made (review of schema
 * 8: the links stayed in the chain with no row, and verify failed at the next record). The
 * other packets of the batch keep theirs. */
static void test_refused_row_keeps_the_chain(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_audit_group(a, true); /* one batch */
	for (uint64_t id = 1; id <= 5; id++)
		straight_records(a, id, id == 3 ? NULL : "alpha", true, NULL, false);
	gsd_audit_note(a, NULL, "after", NULL);
	gsd_audit_group(a, false);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE end_seq <> 0"), 4);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet = 3"), 0);
	/* What remains of packet 3 is its event rows, which name a row that is not there: the
	 * only finding. */
	gs_chain_report rep = verify_file(fx->path);
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 3);
	if (!strstr(rep.why, "gone"))
		fail_msg("not the missing row: %s", rep.why);
}

/* A SUBMITTED that would be kept names a packet whose row is there: another tenant's (refused,
 * the row untouched) or its own (written as a row, as before schema 8). No check reads the
 * row first: the insert's conflict sends the packet's records to rows. */
static void test_kept_submitted_over_a_row(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	straight_records(a, 1, "alpha", true, NULL, true);
	gsd_packet_rec r = packet(2, "alpha", 1, ST_SUBMITTED, 0); /* no allocation list */
	r.patch_flags = 0;
	r.event_ns = r.submitted_ns;
	queue(a, &r, NULL);
	assert_true(wait_acks(flush(a)));
	assert_int_equal(query_int(fx->path, "SELECT seq <> 0 FROM packets WHERE packet = 2"), 1);
	r = packet(1, "beta", 1, ST_SUBMITTED, 0);
	r.patch_flags = 0;
	r.event_ns = r.submitted_ns;
	queue(a, &r, NULL); /* another tenant's packet: refused */
	r = packet(2, "alpha", 1, ST_SUBMITTED, 0);
	r.patch_flags = 0;
	r.event_ns = r.submitted_ns;
	queue(a, &r, NULL); /* its own row again: an event row */
	assert_true(wait_acks(flush(a)));
	assert_int_equal(T.failed, 1);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet = 1 AND"
	                                     " tenant = 'alpha' AND state = 4 AND end_seq <> 0"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT state FROM packets WHERE packet = 2"), 1);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows WHERE"
	                                     " packet = 2 AND state = 1"),
	                 1);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("does not verify: %s", rep.why);
}

/* Schema 9: a straight run whose events are committed apart (a packet that takes engine time
 * while others are submitted) keeps them in its row all the same. The file verifies after
 * every commit, a running packet's row is covered by its kept READY or RUNNING, and every
 * reader sees the events while the run goes on. A run that then leaves the straight path
 * (preempted; its start moved by the GPU's own clock; the daemon stopped) still verifies:
 * the kept events become rows where the row changes under them. */
static void test_kept_runs_across_commits(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_packet_rec r[7];
	for (uint64_t id = 1; id <= 6; id++) {
		r[id] = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		r[id].patch_flags = 0;
		r[id].event_ns = r[id].submitted_ns;
		gsd_audit_packet(a, &r[id], NULL, NULL, NULL);
	}
	assert_true(wait_acks(flush(a)));
	for (uint64_t id = 1; id <= 6; id++) {
		r[id].patch_flags = 2;
		r[id].state = ST_READY;
		r[id].ready_ns = r[id].event_ns = r[id].submitted_ns + 100;
		if (id != 2) /* packet 2's READY goes with its RUNNING */
			gsd_audit_packet(a, &r[id], id == 1 ? "behind 1 packet" : NULL, NULL, NULL);
	}
	assert_true(wait_acks(flush(a)));
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("kept READYs do not verify: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE ready_seq <> 0"
	                                     " AND ready_digest IS NOT NULL"),
	                 5);
	/* (Found where the chain next has a link in the file: a row keeps only its newest.) */
	rep = tampered(fx->path, "rd", "UPDATE packets SET dma_size = 1 WHERE packet = 3");
	assert_false(rep.ok);
	for (uint64_t id = 1; id <= 6; id++) {
		if (id == 2)
			gsd_audit_packet(a, &r[id], NULL, NULL, NULL);
		r[id].state = ST_RUNNING;
		r[id].started_ns = r[id].event_ns = r[id].ready_ns + 100;
		gsd_audit_packet(a, &r[id], NULL, NULL, NULL);
	}
	assert_true(wait_acks(flush(a)));
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("kept RUNNINGs do not verify: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows"), 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE run_seq <> 0 AND"
	                                     " run_digest IS NOT NULL AND end_seq = 0"),
	                 6);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet = 2 AND"
	                                     " ready_seq <> 0 AND ready_digest IS NULL"),
	                 1);
	/* Readers see the events of the runs still going on: by packet, by seq range. */
	gsd_event_row *ev;
	size_t n;
	char err[256];
	assert_int_equal(gsd_history_events(fx->path, "alpha", 1, &ev, &n, err, sizeof err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(ev[2].state, ST_RUNNING);
	assert_string_equal(ev[1].detail, "behind 1 packet");
	free(ev);
	assert_int_equal(
	        gsd_history_events_range(fx->path, "alpha", 0, 0, 1000, &ev, &n, err, sizeof err),
	        0);
	assert_int_equal(n, 18);
	uint64_t mid = ev[7].seq;
	free(ev);
	assert_int_equal(
	        gsd_history_events_range(fx->path, "alpha", mid, 0, 1000, &ev, &n, err, sizeof err),
	        0);
	assert_int_equal(n, 18 - 8);
	free(ev);
	static const char *const edits[][2] = {
	        {"st", "UPDATE packets SET started_ns = started_ns + 1 WHERE packet = 3"},
	        {"rn", "UPDATE packets SET ready_ns = ready_ns + 1 WHERE packet = 4"},
	        {"dg", "UPDATE packets SET run_digest = zeroblob(16) WHERE packet = 5"},
	        {"rdg", "UPDATE packets SET ready_digest = zeroblob(16) WHERE packet = 1"},
	        {"row", "UPDATE packets SET fence = 1 WHERE packet = 2"},
	        {"rs", "UPDATE packets SET run_seq = 0 WHERE packet = 2"},
	        {"hs", "UPDATE packets SET hash = NULL, run_seq = 0 WHERE packet = 5"},
	};
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		rep = tampered(fx->path, edits[i][0], edits[i][1]);
		if (rep.ok)
			fail_msg("edit '%s' not found", edits[i][0]);
	}

	/* 1 and 2 end straight; 3 is preempted; 4 ends with the GPU's own start, later than the
	 * RUNNING's (the row keeps that as run_ns); 5 is still running when the daemon stops; 6
	 * ends with another READY time than the one its row kept (the row does not go on the
	 * run: its events become rows). */
	for (uint64_t id = 1; id <= 2; id++) {
		r[id].state = ST_COMPLETED;
		r[id].completed_ns = r[id].event_ns = r[id].started_ns + 1000;
		gsd_audit_packet(a, &r[id], NULL, NULL, NULL);
	}
	r[3].state = ST_PREEMPTED;
	r[3].preemptions = 1;
	r[3].event_ns = r[3].started_ns + 50;
	gsd_audit_packet(a, &r[3], "quantum expired", NULL, NULL);
	uint64_t run4 = r[4].started_ns;
	r[4].state = ST_COMPLETED;
	r[4].run_ns = run4; /* as the daemon records the GPU's own start */
	r[4].started_ns += 7;
	r[4].completed_ns = r[4].event_ns = r[4].started_ns + 1000;
	gsd_audit_packet(a, &r[4], NULL, NULL, NULL);
	uint64_t ready6 = r[6].ready_ns;
	r[6].state = ST_COMPLETED;
	r[6].ready_ns += 3;
	r[6].completed_ns = r[6].event_ns = r[6].started_ns + 1000;
	gsd_audit_packet(a, &r[6], NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("runs ended do not verify: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows WHERE"
	                                     " packet IN (1, 2, 4, 5)"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE end_seq <> 0"), 3);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE run_ns IS NOT"
	                                     " NULL"),
	                 1);
	/* 3 and 6: the kept READY and RUNNING moved to rows (no link of their own), then the
	 * event that left the run. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows WHERE"
	                                     " packet IN (3, 6) AND hash IS NULL"),
	                 4);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows"), 6);
	assert_int_equal(query_int(fx->path, "SELECT ready_seq + run_seq + (hash IS NOT NULL) FROM"
	                                     " packets WHERE packet = 3"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT group_concat(state, '') FROM (SELECT state"
	                                     " FROM packet_events WHERE packet = 4 ORDER BY seq)"),
	                 1234);
	assert_int_equal(query_int(fx->path, "SELECT time_ns FROM packet_events WHERE packet = 4"
	                                     " AND state = 3"),
	                 (int64_t)run4);
	assert_int_equal(query_int(fx->path, "SELECT group_concat(state, '') FROM (SELECT state"
	                                     " FROM packet_events WHERE packet = 6 ORDER BY seq)"),
	                 1234);
	assert_int_equal(query_int(fx->path, "SELECT time_ns FROM packet_events WHERE packet = 6"
	                                     " AND state = 2"),
	                 (int64_t)ready6);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 6 * 3 + 5);
	rep = tampered(fx->path, "rns", "UPDATE packets SET run_ns = run_ns + 1 WHERE packet = 4");
	assert_false(rep.ok);
	rep = tampered(fx->path, "mv",
	               "UPDATE packet_event_rows SET time_ns = 1 WHERE packet = 3"
	               " AND state = 2");
	assert_false(rep.ok);

	/* The daemon that ran packets 3 (preempted) and 5 stopped: the next one records them
	 * ABORTED; 5's kept READY and RUNNING stay in its row, and the file verifies. */
	tracker_reset();
	a = open_audit(fx->path, NULL);
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after the restart: %s", rep.why);
	assert_int_equal(rep.records, 6 + 5 + 7 + 5 + 2);
	assert_int_equal(query_int(fx->path, "SELECT state FROM packets WHERE packet = 5"), 6);
	assert_int_equal(query_int(fx->path, "SELECT group_concat(state, '') FROM (SELECT state"
	                                     " FROM packet_events WHERE packet = 5 ORDER BY seq)"),
	                 1236);
	/* A seq range read: every event once. */
	assert_int_equal(
	        gsd_history_events_range(fx->path, "alpha", 0, 0, 1000, &ev, &n, err, sizeof err),
	        0);
	assert_int_equal(n, 6 * 3 + 5 + 2);
	free(ev);
	rep = tampered(fx->path, "ab", "UPDATE packets SET started_ns = 9 WHERE packet = 5");
	assert_false(rep.ok);
}

/* A run's end whose record has another submission time than the row that keeps the run (the
 * row digest covers submitted_ns, which ST_PACKET_KEEP does not write): the run is written as
 * rows and the row takes the record's time, so the file verifies (found in review of schema
 * 9: the update went on the run, and verify called the row changed). Its SUBMITTED is a row
 * here: a kept one is rebuilt from the row's submission time, which the daemon never changes
 * (a record that did would break its link, as since schema 8). */
static void test_kept_run_other_submission(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_packet_rec r = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	r.event_ns = r.submitted_ns;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	r.patch_flags = 2;
	r.state = ST_READY;
	r.ready_ns = r.event_ns = r.submitted_ns + 10;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	r.state = ST_RUNNING;
	r.started_ns = r.event_ns = r.ready_ns + 10;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	r.state = ST_COMPLETED;
	r.submitted_ns += 1;
	r.completed_ns = r.event_ns = r.started_ns + 10;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("does not verify: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows"), 4);
	assert_int_equal(query_int(fx->path, "SELECT group_concat(state, '') FROM (SELECT state"
	                                     " FROM packet_events WHERE packet = 1 ORDER BY seq)"),
	                 1234);
}

/* Retention with rows that keep their events: the removed ones go, the file verifies, and the
 * packet still SUBMITTED keeps its row (its event is in it). */
static void test_retention_of_kept_events(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.retain_packets = 10};
	gsd_audit *a = open_audit(fx->path, &o);
	gsd_packet_rec waiting = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	waiting.patch_flags = 0;
	waiting.event_ns = waiting.submitted_ns;
	gsd_audit_packet(a, &waiting, NULL, NULL, NULL);
	/* Packet 2 runs through the whole test: its SUBMITTED, READY and RUNNING kept in its row
	 * (each in its own commit, schema 9), so its row needs no anchor; before schema 9 its
	 * READY and RUNNING were rows, pruned, and its row anchored (review of schema 8: the
	 * kept SUBMITTED was taken for its last record, and verify failed). */
	gsd_packet_rec running = packet(2, "alpha", 1, ST_SUBMITTED, 0);
	running.patch_flags = 0;
	running.event_ns = running.submitted_ns;
	gsd_audit_packet(a, &running, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	running.patch_flags = 2;
	running.state = ST_READY;
	running.ready_ns = running.event_ns = running.submitted_ns + 5;
	gsd_audit_packet(a, &running, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	running.state = ST_RUNNING;
	running.started_ns = running.event_ns = running.ready_ns + 5;
	gsd_audit_packet(a, &running, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	for (uint64_t id = 3; id <= 60; id++)
		straight_records(a, id, "alpha", id % 7 != 0, NULL, id % 3 == 0);
	gsd_audit_note(a, NULL, "n", NULL);
	uint64_t seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 12);
	assert_int_equal(query_int(fx->path, "SELECT min(packet) FROM packets WHERE packet > 2"),
	                 51);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_allocations"), 2 * 10);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows WHERE"
	                                     " packet = 2"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM chain_base_objects WHERE"
	                                     " kind = 1 AND ref = 2"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT (ready_seq <> 0) + (run_seq <> 0) +"
	                                     " (run_digest IS NOT NULL) FROM packets WHERE"
	                                     " packet = 2"),
	                 3);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after retention: %s", rep.why);
	assert_true(rep.base_seq > 0);
	rep = tampered(fx->path, "w", "UPDATE packets SET state = 6 WHERE packet = 1");
	assert_false(rep.ok);
	rep = tampered(fx->path, "k", "UPDATE packets SET ready_ns = 5 WHERE packet = 55");
	assert_false(rep.ok);
	rep = tampered(fx->path, "r", "UPDATE packets SET started_ns = 5 WHERE packet = 2");
	assert_false(rep.ok);
	/* Writing goes on after a reopen. */
	tracker_reset();
	a = open_audit(fx->path, &o);
	straight_records(a, 61, "alpha", true, NULL, false);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after a reopen: %s", rep.why);
}

/* Retention anchors a packet still queued (its SUBMITTED a row), which then keeps its READY
 * and RUNNING in its row; a later step moves the base past them while it runs. Its row's
 * kept RUNNING vouches for it, and the old anchor goes (found in review of schema 9: the
 * verifier, which places anchors at the base, took the anchor for the newer record and
 * called the row changed). */
static void test_retention_anchor_then_kept_run(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.retain_packets = 10};
	gsd_audit *a = open_audit(fx->path, &o);
	gsd_packet_rec p = packet(1, "alpha", 1, ST_SUBMITTED, 0); /* patch flags: a row */
	p.event_ns = p.submitted_ns;
	gsd_audit_packet(a, &p, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	for (uint64_t id = 2; id <= 30; id++)
		straight_records(a, id, "alpha", true, NULL, true);
	uint64_t seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM chain_base_objects WHERE"
	                                     " kind = 1 AND ref = 1"),
	                 1);
	p.state = ST_READY;
	p.ready_ns = p.event_ns = p.submitted_ns + 5;
	gsd_audit_packet(a, &p, NULL, NULL, NULL);
	p.state = ST_RUNNING;
	p.started_ns = p.event_ns = p.ready_ns + 5;
	gsd_audit_packet(a, &p, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	for (uint64_t id = 31; id <= 60; id++)
		straight_records(a, id, "alpha", true, NULL, true);
	seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	gsd_audit_close(a);
	assert_true(query_int(fx->path, "SELECT CAST(value AS INTEGER) FROM meta WHERE key ="
	                                " 'chain_base_seq'") >
	            query_int(fx->path, "SELECT run_seq FROM packets WHERE packet = 1"));
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after retention: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM chain_base_objects WHERE"
	                                     " kind = 1 AND ref = 1"),
	                 0);
	rep = tampered(fx->path, "r", "UPDATE packets SET started_ns = 5 WHERE packet = 1");
	assert_false(rep.ok);
	/* It ends, with the GPU's own start: the row keeps its RUNNING's time as run_ns, which
	 * its digest covers, since no link of a record the file still walks does (found in
	 * review: an edit of run_ns past the base went unseen). */
	tracker_reset();
	a = open_audit(fx->path, &o);
	p.state = ST_COMPLETED;
	p.run_ns = p.started_ns;
	p.started_ns += 3;
	p.completed_ns = p.event_ns = p.started_ns + 5;
	gsd_audit_packet(a, &p, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet = 1 AND"
	                                     " end_seq <> 0 AND run_ns IS NOT NULL"),
	                 1);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after its end: %s", rep.why);
	rep = tampered(fx->path, "rn", "UPDATE packets SET run_ns = run_ns + 1 WHERE packet = 1");
	assert_false(rep.ok);
}

/* More kept SUBMITTEDs in a row than a retention step takes (PRUNE_STEP, 20,000), each row's
 * link later replaced by its straight run's end: no record of the first step's range has its
 * link in the file. The step goes on to the first that has (review of schema 8: retention
 * stopped there for good). */
static void test_retention_past_kept_submissions(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL); /* no retention while they are written */
	const uint64_t n = 20100;
	for (uint64_t id = 1; id <= n; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		r.patch_flags = 0;
		r.event_ns = r.submitted_ns;
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
	}
	assert_true(wait_acks(flush(a)));
	for (uint64_t id = 1; id <= n; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_READY, 0);
		gsd_audit_group(a, true); /* one commit for the run, as the daemon does */
		r.ready_ns = r.event_ns = r.submitted_ns + 1;
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
		r.state = ST_RUNNING;
		r.started_ns = r.event_ns = r.ready_ns + 1;
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
		r.state = ST_COMPLETED;
		r.completed_ns = r.event_ns = r.started_ns + 1;
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
		gsd_audit_group(a, false);
	}
	/* Then newer packets, the ones retention keeps. */
	for (uint64_t id = n + 1; id <= n + 20; id++)
		straight_records(a, id, "alpha", true, NULL, false);
	assert_true(wait_acks(flush(a)));
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE end_seq <> 0"),
	                 n + 20);
	gsd_audit_close(a);
	tracker_reset();
	gsd_audit_options o = {.retain_packets = 10};
	a = open_audit(fx->path, &o);
	uint64_t seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 10);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after retention: %s", rep.why);
	assert_true(rep.base_seq > 20000);
}

/* An idle daemon past max_age: the retention removes every record. The next records, after a
 * reopen, still get numbers past the removed ones (review of schema 8: the next number came
 * from the rows left, below the head, and verify failed). */
static void test_retention_of_everything(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.retain_age_ns = 1};
	gsd_audit *a = open_audit(fx->path, &o);
	for (uint64_t id = 1; id <= 5; id++)
		straight_records(a, id, "alpha", true, NULL, false);
	uint64_t seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 0);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after retention: %s", rep.why);
	tracker_reset();
	gsd_audit_options keep = {0};
	a = open_audit(fx->path, &keep);
	straight_records(a, 6, "alpha", true, NULL, false);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("after a reopen: %s", rep.why);
	assert_int_equal(rep.records, 4);
}

/* Retention keeps the newest packets, anchors what the removed records leave (a packet still in
 * flight, a live context, a live allocation) and the file still verifies; edits are still
 * found, in the anchored rows too; writing goes on after a reopen. */
static void test_retention_keeps_verification(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.retain_packets = 10};
	gsd_audit *a = open_audit(fx->path, &o);
	/* Packet 1 stays RUNNING (in flight) through the whole test. */
	gsd_packet_rec long_run = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &long_run, NULL);
	long_run.state = ST_RUNNING;
	queue(a, &long_run, NULL);
	gsd_context_rec live = {.context = 9, .tenant = "alpha", .device = 3, .priority_class = 2};
	gsd_audit_context(a, &live);
	gsd_context_rec gone = {.context = 10, .tenant = "alpha", .device = 3};
	gsd_audit_context(a, &gone);
	gone.destroyed_ns = 5;
	gsd_audit_context(a, &gone);
	gsd_allocation_rec al = {.allocation = 21, .tenant = "alpha", .size = 4096, .segment = 1};
	gsd_audit_allocation(a, &al);
	static const int states[] = {ST_SUBMITTED, ST_READY, ST_RUNNING, ST_COMPLETED};
	for (uint64_t id = 2; id <= 60; id++)
		for (int k = 0; k < 4; k++) {
			gsd_packet_rec r = packet(id, "alpha", 1, states[k], 0);
			queue(a, &r, NULL);
		}
	gsd_audit_note(a, NULL, "n", NULL);
	uint64_t seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_true(st.pruned > 0);
	gsd_audit_close(a);

	/* The newest 10 packets by id, and the one in flight; their events from the cut on. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 11);
	assert_int_equal(query_int(fx->path, "SELECT min(packet) FROM packets WHERE packet > 1"),
	                 51);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 10 * 4 + 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM contexts"), 1);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM chain_base_objects"), 3);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("pruned file does not verify: %s", rep.why);
	assert_true(rep.base_seq > 0);
	assert_int_equal(rep.first_seq, rep.base_seq + 1);
	assert_int_equal(rep.rows, 11 + 1 + 1);

	/* Edits are still found: an anchored row, the anchor table, a kept event. */
	rep = tampered(fx->path, "p1", "UPDATE packets SET state = 4 WHERE packet = 1");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 1);
	rep = tampered(fx->path, "ctx", "UPDATE contexts SET priority = 5 WHERE context = 9");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "contexts");
	rep = tampered(fx->path, "base",
	               "UPDATE chain_base_objects SET state = zeroblob(16)"
	               " WHERE kind = 3");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "chain_base_objects");
	rep = tampered(fx->path, "ev",
	               "UPDATE packet_event_rows SET detail = 'x' WHERE seq ="
	               " (SELECT min(seq) FROM packet_events)");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packet_event_rows");
	/* An anchored row removed (issue 26, item 6), and the packet in flight. */
	rep = tampered(fx->path, "delanchored", "DELETE FROM contexts WHERE context = 9");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "contexts");
	assert_int_equal(rep.bad_row, 9);
	rep = tampered(fx->path, "delinflight", "DELETE FROM packets WHERE packet = 1");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");

	/* Reopened: records go on, the in-flight packet is reconciled, it all verifies. */
	tracker_reset();
	a = open_audit(fx->path, &o);
	gsd_audit_note(a, NULL, "again", NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("reopened pruned file does not verify: %s", rep.why);
}

/* Loads an SQL dump into a new file at path. */
static void load_dump(const char *path, const char *dump)
{
	FILE *f = fopen(dump, "r");
	assert_non_null(f);
	static char sql[1 << 20];
	size_t n = fread(sql, 1, sizeof sql - 1, f);
	assert_true(n > 0 && n < sizeof sql - 1);
	sql[n] = '\0';
	fclose(f);
	exec_sql(path, sql);
}

/*
 * A schema 4 file (tests/fixtures/audit-v4-tenants.sql, written by the daemon before version 5:
 * an admin-made tenant updated once, one removed, a VM's demo) is upgraded: its tenants gain
 * the limits as 0 and verify as they were (their last records are kind 8, whose digest does
 * not cover the limits); a new record of a tenant with limits is kind 9 and covers them, so a
 * limit changed in the file is found.
 */
/* The wire ids' key: made with the file, the same at every open (so are the ids clients were
 * given), kept in meta as hex; an older file gets one when it is upgraded; a null sink makes a
 * new one every run. */
static void test_wire_key_kept(void **state)
{
	struct fixture *fx = *state;
	unsigned char k1[GSD_AUDIT_WIRE_KEY_BYTES], k2[GSD_AUDIT_WIRE_KEY_BYTES],
	        zero[GSD_AUDIT_WIRE_KEY_BYTES] = {0};
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_audit_wire_key(a, k1);
	gsd_audit_close(a);
	assert_memory_not_equal(k1, zero, sizeof k1);
	a = open_audit(fx->path, NULL);
	gsd_audit_wire_key(a, k2);
	gsd_audit_close(a);
	assert_memory_equal(k1, k2, sizeof k1);
	/* In meta, as hex: the byte 0 of the key is the first two digits. */
	char sql[128];
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM meta WHERE key = 'wire_key' AND length(value) = 64"
	         " AND substr(value, 1, 2) = '%02x'",
	         k1[0]);
	assert_int_equal(query_int(fx->path, sql), 1);
	/* A file without one (as an older daemon left it) gets a new one at the next open. */
	sqlite3 *db;
	assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
	assert_int_equal(
	        sqlite3_exec(db, "DELETE FROM meta WHERE key = 'wire_key'", NULL, NULL, NULL),
	        SQLITE_OK);
	sqlite3_close(db);
	a = open_audit(fx->path, NULL);
	gsd_audit_wire_key(a, k2);
	gsd_audit_close(a);
	assert_memory_not_equal(k1, k2, sizeof k1);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM meta WHERE key = 'wire_key'"),
	                 1);
	/* A null sink keeps nothing: a key of its own each run. */
	gsd_audit_options o = {.null_sink = true};
	a = open_audit(fx->path, &o);
	gsd_audit_wire_key(a, k1);
	gsd_audit_close(a);
	a = open_audit(fx->path, &o);
	unsigned char k3[GSD_AUDIT_WIRE_KEY_BYTES];
	gsd_audit_wire_key(a, k3);
	gsd_audit_close(a);
	assert_memory_not_equal(k1, k3, sizeof k1);
	assert_memory_not_equal(k1, k2, sizeof k1);
}

static void test_upgrade_tenants_from_schema_4(void **state)
{
	struct fixture *fx = *state;
	load_dump(fx->path, GS_SOURCE_DIR "/tests/fixtures/audit-v4-tenants.sql");
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), 4);
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), GSD_AUDIT_SCHEMA_VERSION);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM tenants WHERE max_message = 0"
	                                     " AND packet_limit = 0 AND sync_limit = 0"),
	                 2);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM meta WHERE key = 'wire_key'"),
	                 1);
	gsd_audit_close(a);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("upgraded schema 4 file does not verify: %s", rep.why);

	/* The VM tenant given limits: its row now records them, under a kind 9 record. */
	tracker_reset();
	a = open_audit(fx->path, NULL);
	/* As the daemon records it: the row's settings as they are, the limits new. */
	gsd_tenant_rec t = {.id = 1,
	                    .tenant = "vm-a",
	                    .audit_name = "vm-a",
	                    .token_hash = "b2$717cf870bfdea2d086d2f0ed479c671b$0d87a225d65fa585ac98"
	                                  "e67430e243f9235853409fefe073798897b95b966829",
	                    .kind = 1,
	                    .share = 3,
	                    .priority_ceiling = 2,
	                    .created_ns = (uint64_t)query_int(fx->path, "SELECT created_ns FROM"
	                                                                " tenants WHERE id = 1"),
	                    .max_message = 65536,
	                    .packet_limit = 7,
	                    .sync_limit = 5};
	gsd_audit_tenant(a, &t);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT packet_limit FROM tenants WHERE id = 1"), 7);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM chain WHERE kind = 9"), 1);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("file with a kind 9 tenant record does not verify: %s", rep.why);
	rep = tampered(fx->path, "limit", "UPDATE tenants SET sync_limit = 500 WHERE id = 1");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "tenants");
}

/* A file the schema-3 daemon wrote (format-1 chain, 32-byte links): opening it migrates it;
 * every row stays readable, the chain restarts after its last record and verifies, rows from
 * before are still checked against their last record's state, and retention can remove the
 * old records (which have no format-2 link to anchor to). */
static void test_upgrade_from_schema_3(void **state)
{
	struct fixture *fx = *state;
	load_dump(fx->path, GS_SOURCE_DIR "/tests/fixtures/audit-v3.sql");
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), 3);
	int64_t old_events = query_int(fx->path, "SELECT count(*) FROM packet_events");
	int64_t old_pallocs = query_int(fx->path, "SELECT count(*) FROM packet_allocations");
	int64_t old_last =
	        query_int(fx->path, "SELECT max(m) FROM (SELECT max(seq) AS m FROM packet_events"
	                            " UNION ALL SELECT max(seq) FROM moves UNION ALL SELECT"
	                            " max(seq) FROM notes UNION ALL SELECT max(seq) FROM chain)");
	assert_int_equal(old_events, 256);
	assert_int_equal(old_pallocs, 151);

	/* The verifier refuses format 1 rather than report every record as a mismatch. */
	sqlite3 *db;
	gs_chain_report rep;
	assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(gs_chain_verify(db, &rep), -1);
	assert_non_null(strstr(rep.why, "chain format 1"));
	sqlite3_close(db);

	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), GSD_AUDIT_SCHEMA_VERSION);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), old_events);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_allocations"),
	                 old_pallocs);
	/* Each packet's list keeps its order, numbered from 0. */
	assert_int_equal(query_int(fx->path, "SELECT group_concat(allocation) = '13,15,14,11' FROM"
	                                     " (SELECT allocation FROM packet_allocations WHERE"
	                                     " packet = 64 ORDER BY slot)"),
	                 1);
	assert_int_equal(query_int(fx->path,
	                           "SELECT count(*) FROM meta WHERE key ="
	                           " 'chain_v1_head' AND value = '0f816da4276d5015be873e13"
	                           "ac7603137f60b856cb3c7782a9790dd7e79ab65e'"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT CAST(value AS INTEGER) FROM meta WHERE key ="
	                                     " 'chain_start_seq'"),
	                 old_last + 1);

	/* The old rows read as before: a packet's events, and packets by allocation. */
	char err[256];
	gsd_event_row *ev;
	size_t count;
	assert_int_equal(gsd_history_events(fx->path, "default", 1, &ev, &count, err, sizeof err),
	                 0);
	assert_int_equal(count, 4);
	assert_int_equal(ev[3].state, ST_COMPLETED);
	free(ev);
	gsd_history_filter f = filter("default");
	f.allocation = 11;
	gsd_history_result h;
	assert_int_equal(gsd_history_packets(fx->path, &f, &h, err, sizeof err), 0);
	assert_true(h.count >= 1);
	assert_int_equal(h.rows[0].rec.packet, 64);
	gsd_history_result_free(&h);

	/* New records go on from there. */
	static const int states[] = {ST_SUBMITTED, ST_READY, ST_RUNNING, ST_COMPLETED};
	for (uint64_t id = 1001; id <= 1003; id++) {
		uint64_t allocs[2] = {id, id + 1};
		queue_submitted(a, id, "alpha", allocs, NULL, 2);
		for (int k = 1; k < 4; k++) {
			gsd_packet_rec r = packet(id, "alpha", 1, states[k], 0);
			queue(a, &r, NULL);
		}
	}
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("upgraded file does not verify: %s", rep.why);
	assert_int_equal(rep.first_seq, old_last + 1);
	assert_int_equal(rep.records, 3 * 4);
	if (rep.rows <= 64)
		fail_msg("%llu rows checked", (unsigned long long)rep.rows);

	/* An old packet edited is still found; so is a new event. */
	rep = tampered(fx->path, "old", "UPDATE packets SET result = 'x' WHERE packet = 1");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packets");
	assert_int_equal(rep.bad_row, 1);
	rep = tampered(fx->path, "new",
	               "UPDATE packet_event_rows SET time_ns = 1 WHERE seq = (SELECT max(seq) FROM"
	               " packet_events)");
	assert_false(rep.ok);
	assert_string_equal(rep.bad_table, "packet_event_rows");

	/* Retention removes the format-1 records too, and the file still verifies. */
	tracker_reset();
	gsd_audit_options o = {.retain_packets = 5};
	a = open_audit(fx->path, &o);
	uint64_t seq = ++T.issued;
	gsd_audit_prune(a, on_ack, (void *)(uintptr_t)seq);
	assert_true(wait_acks(seq));
	gsd_audit_close(a);
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM packet_events WHERE seq <= %lld",
	         (long long)old_last);
	assert_int_equal(query_int(fx->path, sql), 0);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("pruned upgraded file does not verify: %s", rep.why);
	/* Retention keeps the packets within 5 ids of the newest: 1001..1003. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 3);
}

static void test_reopen_keeps_rows_and_version(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t id = 1; id <= 10; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		queue(a, &r, NULL);
	}
	assert_true(wait_acks(10));
	/* Close drains what is still queued: these 1000 are never waited for. */
	for (uint64_t id = 11; id <= 1010; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		gsd_audit_packet(a, &r, NULL, NULL, NULL);
	}
	gsd_audit_close(a);

	/* Readable with no writer open. */
	gsd_history_filter f = filter("alpha");
	f.limit = 5000;
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 1010);
	gsd_history_result_free(&h);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), GSD_AUDIT_SCHEMA_VERSION);

	tracker_reset();
	a = open_audit(fx->path, NULL);
	/* No daemon runs them any more: reopening records each as ABORTED (daemon restarted). */
	assert_int_equal(gsd_audit_reconciled(a), 1010);
	gsd_packet_rec r = packet(5, "alpha", 1, ST_COMPLETED, 0);
	queue(a, &r, "again");
	assert_true(wait_acks(1));
	gsd_audit_close(a);

	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 1010);
	assert_int_equal(query_int(fx->path, "SELECT state FROM packets WHERE packet = 5"),
	                 ST_COMPLETED);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE state = 6 AND "
	                                     "result = 'daemon restarted'"),
	                 1009);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"),
	                 1010 + 1010 + 1);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), GSD_AUDIT_SCHEMA_VERSION);
	assert_int_equal(query_int(fx->path, "SELECT CAST(value AS INTEGER) FROM meta"
	                                     " WHERE key = 'schema_version'"),
	                 GSD_AUDIT_SCHEMA_VERSION);
	/* schema_version and the wire ids' key, made on the upgrade: 32 bytes of hex. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM meta WHERE key NOT LIKE"
	                                     " 'chain_%'"),
	                 2);
	assert_int_equal(query_int(fx->path,
	                           "SELECT count(*) FROM meta WHERE key = 'wire_key'"
	                           " AND length(value) = 64 AND NOT value GLOB '*[^0-9a-f]*'"),
	                 1);
	assert_int_equal(
	        query_int(fx->path, "SELECT value FROM meta WHERE key = 'chain_start_seq'"), 1);
}

/* Packets a dead daemon left in flight are each recorded ABORTED ("daemon restarted") when the
 * file is opened again, with an event; final ones are left alone; a second open finds none. */
static void test_reconcile_in_flight(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	static const int states[] = {ST_SUBMITTED,   ST_READY,     ST_RUNNING, ST_PREEMPTED,
	                             ST_RESUBMITTED, ST_COMPLETED, ST_FAULTED};
	for (uint64_t i = 0; i < 7; i++) {
		gsd_packet_rec r = packet(i + 1, "alpha", 1, states[i], 0);
		queue(a, &r, NULL);
	}
	assert_true(wait_acks(7));
	assert_int_equal(gsd_audit_reconciled(a), 0);
	gsd_audit_close(a);

	a = open_audit(fx->path, NULL);
	assert_int_equal(gsd_audit_reconciled(a), 5);
	gsd_audit_close(a);
	for (uint64_t id = 1; id <= 5; id++) {
		char sql[160];
		snprintf(sql, sizeof sql,
		         "SELECT count(*) FROM packets WHERE packet = %llu AND state = 6 AND "
		         "result = 'daemon restarted' AND completed_ns > 0",
		         (unsigned long long)id);
		assert_int_equal(query_int(fx->path, sql), 1);
		snprintf(sql, sizeof sql,
		         "SELECT state FROM packet_events WHERE packet = %llu ORDER BY seq DESC "
		         "LIMIT 1",
		         (unsigned long long)id);
		assert_int_equal(query_int(fx->path, sql), 6);
	}
	assert_int_equal(query_int(fx->path, "SELECT state FROM packets WHERE packet = 6"),
	                 ST_COMPLETED);
	assert_int_equal(query_int(fx->path, "SELECT state FROM packets WHERE packet = 7"),
	                 ST_FAULTED);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 7 + 5);
	a = open_audit(fx->path, NULL);
	assert_int_equal(gsd_audit_reconciled(a), 0);
	gsd_audit_close(a);
}

/* A file removed under the writer is never committed to again: the records of every commit
 * after it are acknowledged as not written and the audit says FILE_GONE; putting the same
 * file back resumes commits. */
static void test_removed_file_stops_acks(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_packet_rec r = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &r, NULL);
	assert_true(wait_acks(1));
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_OK);

	char moved[160];
	snprintf(moved, sizeof moved, "%s.moved", fx->path);
	assert_int_equal(rename(fx->path, moved), 0);
	r = packet(2, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &r, NULL);
	assert_true(wait_acks(2));
	assert_int_equal(T.failed, 1);
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_FILE_GONE);

	assert_int_equal(rename(moved, fx->path), 0);
	r = packet(3, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &r, NULL);
	assert_true(wait_acks(3));
	assert_int_equal(T.ok, 2);
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_OK);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet = 2"), 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet IN (1, 3)"),
	                 2);
}

/* A file replaced by another one (same path, another inode) is never written to. */
static void test_replaced_file_stops_acks(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	assert_int_equal(unlink(fx->path), 0);
	FILE *f = fopen(fx->path, "w");
	assert_non_null(f);
	fclose(f);
	gsd_packet_rec r = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &r, NULL);
	assert_true(wait_acks(1));
	assert_int_equal(T.failed, 1);
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_FILE_GONE);
	gsd_audit_close(a);
	struct stat st;
	assert_int_equal(stat(fx->path, &st), 0);
	assert_int_equal(st.st_size, 0); /* the new file was left alone */
}

static void test_newer_schema_refused(void **state)
{
	struct fixture *fx = *state;
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_audit_close(a);
	char sql[64];
	snprintf(sql, sizeof sql, "PRAGMA user_version = %d", GSD_AUDIT_SCHEMA_VERSION + 1);
	exec_sql(fx->path, sql);

	a = (gsd_audit *)&a; /* must be cleared on failure */
	assert_int_equal(gsd_audit_open(fx->path, NULL, &a), -1);
	assert_null(a);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), GSD_AUDIT_SCHEMA_VERSION + 1);
}

/* History of a file that does not exist is an error with a reason, and creates nothing. */
static void test_history_missing_file(void **state)
{
	struct fixture *fx = *state;
	gsd_history_filter f = filter("alpha");
	gsd_history_result h;
	gsd_event_row *ev;
	size_t count;
	char err[256] = "";
	assert_int_equal(gsd_history_packets(fx->path, &f, &h, err, sizeof err), -1);
	assert_non_null(strstr(err, fx->path));
	assert_null(h.rows);
	err[0] = '\0';
	assert_int_equal(gsd_history_events(fx->path, "alpha", 1, &ev, &count, err, sizeof err),
	                 -1);
	assert_true(strlen(err) > 0);
	assert_null(ev);
	struct stat st;
	assert_int_equal(stat(fx->path, &st), -1);
}

static void test_errors_notes_contexts_allocations(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	char long_tenant[100];
	memset(long_tenant, 't', sizeof long_tenant - 1);
	long_tenant[sizeof long_tenant - 1] = '\0';
	/* 254 ASCII bytes then a two-byte character: a 255-byte cut would split it. */
	char long_msg[300];
	memset(long_msg, 'm', 254);
	strcpy(long_msg + 254, "\xc3\xa9tail");

	gsd_audit_error(a, NULL, "Hello", 16, "bad token");
	gsd_audit_error(a, long_tenant, "Submit", 3, long_msg);
	gsd_audit_note(a, NULL, "start", "daemon up");
	gsd_audit_note(a, "alpha", "ban", NULL);

	gsd_context_rec c = {.context = 9,
	                     .tenant = "alpha",
	                     .device = 3,
	                     .node = 1,
	                     .priority = -2,
	                     .info = {.dma_buffer_size = 65536},
	                     .created_ns = 11};
	gsd_audit_context(a, &c);
	c.destroyed_ns = 99;
	gsd_audit_context(a, &c);
	gsd_allocation_rec al = {.allocation = 5,
	                         .tenant = "alpha",
	                         .size = 1 << 20,
	                         .supported_segment_set = 0x6,
	                         .created_ns = 12};
	gsd_audit_allocation(a, &al);
	al.segment = 2;
	al.offset = 8192;
	gsd_audit_allocation(a, &al);

	/* Acks come in queue order, so this one's ack means everything above is committed. */
	gsd_packet_rec r = packet(1, "alpha", 9, ST_SUBMITTED, 1);
	queue(a, &r, NULL);
	assert_true(wait_acks(1));

	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM errors"), 2);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM errors WHERE tenant IS NULL"
	                                     " AND request = 'Hello' AND status = 16"
	                                     " AND message = 'bad token' AND time_ns > 0"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT length(CAST(tenant AS BLOB))"
	                                     " FROM errors WHERE request = 'Submit'"),
	                 GSD_AUDIT_TENANT_MAX);
	assert_int_equal(query_int(fx->path, "SELECT length(CAST(message AS BLOB))"
	                                     " FROM errors WHERE request = 'Submit'"),
	                 254);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM notes"), 2);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM notes WHERE tenant IS NULL AND"
	                                     " kind = 'start' AND detail = 'daemon up'"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM notes WHERE tenant = 'alpha'"
	                                     " AND kind = 'ban' AND detail IS NULL"),
	                 1);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM contexts"), 1);
	assert_int_equal(query_int(fx->path, "SELECT destroyed_ns FROM contexts"), 99);
	assert_int_equal(query_int(fx->path, "SELECT priority FROM contexts"), -2);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM allocations"), 1);
	assert_int_equal(query_int(fx->path, "SELECT segment * 100000 + segment_offset"
	                                     " FROM allocations"),
	                 208192);
	gsd_audit_close(a);
}

/* A record SQLite refuses (no tenant) fails alone; its batch-mates still commit. */
static void test_refused_record_fails_alone(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t id = 1; id <= 5; id++) {
		gsd_packet_rec r = packet(id, id == 3 ? NULL : "alpha", 1, ST_SUBMITTED, 0);
		queue(a, &r, NULL);
	}
	assert_true(wait_acks(5));
	assert_false(T.out_of_order);
	assert_int_equal(T.ok, 4);
	assert_int_equal(T.failed, 1);
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.records, 4);
	assert_int_equal(st.dropped, 1);
	assert_int_equal(st.failures, 0);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 4);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 4);
}

/* Another connection holding the write lock delays the writer but loses nothing. */
static void test_lock_holder_delays_only(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	sqlite3 *db;
	assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	for (uint64_t id = 1; id <= 100; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		queue(a, &r, NULL);
	}
	/* The producer calls returned although the writer cannot have begun. */
	pthread_mutex_lock(&T.mu);
	assert_int_equal(T.acked, 0);
	pthread_mutex_unlock(&T.mu);
	assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);

	assert_true(wait_acks(100));
	assert_int_equal(T.ok, 100);
	gsd_audit_close(a);
}

/*
 * A commit that fails (here: another process holds the write lock past the busy timeout)
 * answers its waiters "not written", but the records nobody waits for (later state changes,
 * notes) are kept and written, in order, by the first commit after the outage.
 */
static void test_outage_keeps_unacked_records(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	sqlite3 *db;
	assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
	gsd_packet_rec r = packet(2, "alpha", 1, ST_SUBMITTED, 0);
	gsd_audit_packet(a, &r, "submitted", NULL, NULL);
	r = packet(2, "alpha", 1, ST_COMPLETED, 0);
	r.result = "done";
	gsd_audit_packet(a, &r, "completed", NULL, NULL);
	gsd_audit_note(a, "alpha", "outage", "made while the file was locked");
	r = packet(1, "alpha", 1, ST_SUBMITTED, 0);
	queue(a, &r, "acked"); /* somebody waits for this one */
	assert_true(wait_acks(1));
	assert_int_equal(T.failed, 1);
	assert_int_not_equal(gsd_audit_get_health(a), GSD_AUDIT_OK);
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.queued, 3); /* kept for the retry */
	assert_int_equal(st.dropped, 1);

	assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	flush(a);
	assert_true(wait_acks(2));
	assert_int_equal(T.ok, 1);
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_OK);
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.dropped, 1);

	/* Packet 2 ends COMPLETED (the kept records were written in the order they were made),
	 * packet 1 (answered "not written") is absent, the note is there. */
	assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(
	        sqlite3_prepare_v2(db,
	                           "SELECT (SELECT state FROM packets WHERE packet = 2),"
	                           " (SELECT count(*) FROM packet_events WHERE packet = 2),"
	                           " (SELECT count(*) FROM packets WHERE packet = 1),"
	                           " (SELECT count(*) FROM notes WHERE kind = 'outage')",
	                           -1, &q, NULL),
	        SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(q, 0), ST_COMPLETED);
	assert_int_equal(sqlite3_column_int(q, 1), 2);
	assert_int_equal(sqlite3_column_int(q, 2), 0);
	assert_int_equal(sqlite3_column_int(q, 3), 1);
	sqlite3_finalize(q);
	sqlite3_close(db);
	gsd_audit_close(a);
}

/* ---- commits on the producer's thread (commit_on_caller) ---- */

static uint64_t acks_on_caller(void)
{
	pthread_mutex_lock(&T.mu);
	uint64_t n = T.on_caller;
	pthread_mutex_unlock(&T.mu);
	return n;
}

/*
 * With commit_on_caller the producer commits what an ack waits for: when gsd_audit_commit_here
 * returns true the record is in the file and its ack was called, on the producer's thread. The
 * writer may be busy (then it commits instead): the test tries until the producer's turn comes.
 */
static void test_caller_commits(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.commit_on_caller = true};
	gsd_audit *a = open_audit(fx->path, &o);
	bool committed = false;
	uint64_t id = 0;
	for (int i = 0; i < 1000 && !committed; i++) {
		gsd_packet_rec r = packet(++id, "alpha", 1, ST_SUBMITTED, 0);
		uint64_t seq = queue(a, &r, NULL);
		committed = gsd_audit_commit_here(a, false);
		if (!committed)
			assert_true(wait_acks(seq));
	}
	assert_true(committed);
	/* Nothing waited: the ack came on this thread before the call returned. */
	pthread_mutex_lock(&T.mu);
	assert_int_equal(T.acked, id);
	assert_int_equal(T.ok, id);
	pthread_mutex_unlock(&T.mu);
	assert_true(acks_on_caller() >= 1);
	char sql[96];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM packets WHERE packet = %" PRIu64, id);
	assert_int_equal(query_int(fx->path, sql), 1);
	/* Nothing waits for an ack: nothing to do. */
	assert_false(gsd_audit_commit_here(a, false));
	gsd_audit_close(a);
}

/*
 * The producer never waits for a lock: while another connection holds the write lock,
 * gsd_audit_commit_here hands the records to the writer, which commits them (on its own
 * thread) once the lock is released.
 */
static void test_caller_commit_leaves_a_held_lock_to_the_writer(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.commit_on_caller = true};
	gsd_audit *a = open_audit(fx->path, &o);
	sqlite3 *db;
	assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	for (uint64_t id = 1; id <= 10; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		queue(a, &r, NULL);
		assert_false(gsd_audit_commit_here(a, false));
	}
	assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_true(wait_acks(10));
	assert_int_equal(T.ok, 10);
	assert_false(T.out_of_order);
	assert_int_equal(acks_on_caller(), 0);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 10);
}

/*
 * The producer's commit holds the daemon's loop: a long queue is the writer's, so is every
 * commit the producer leaves to it, and after a commit slower than caller_slow_ns (a slow disk;
 * here every commit counts as slow) the writer commits everything for a second.
 */
static void test_caller_commit_bounded(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.commit_on_caller = true};
	gsd_audit *a = open_audit(fx->path, &o);
	uint64_t last = 0;
	for (uint64_t id = 1; id <= 1500; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		last = queue(a, &r, NULL);
	}
	assert_false(gsd_audit_commit_here(a, false));
	assert_true(wait_acks(last));
	assert_int_equal(T.ok, 1500);
	assert_int_equal(acks_on_caller(), 0);
	/* The producer has other work (the daemon: an engine runs): the writer commits. */
	gsd_packet_rec one = packet(1600, "alpha", 1, ST_SUBMITTED, 0);
	last = queue(a, &one, NULL);
	assert_false(gsd_audit_commit_here(a, true));
	assert_true(wait_acks(last));
	assert_int_equal(acks_on_caller(), 0);
	gsd_audit_close(a);

	tracker_reset();
	o.caller_slow_ns = 1;
	a = open_audit(fx->path, &o);
	bool committed = false;
	for (uint64_t id = 2000; id < 3000 && !committed; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		last = queue(a, &r, NULL);
		committed = gsd_audit_commit_here(a, false);
		assert_true(wait_acks(last));
	}
	assert_true(committed);
	uint64_t mine = acks_on_caller();
	gsd_packet_rec r = packet(5000, "alpha", 1, ST_SUBMITTED, 0);
	last = queue(a, &r, NULL);
	assert_false(gsd_audit_commit_here(a, false)); /* backing off: the writer's */
	assert_true(wait_acks(last));
	assert_int_equal(acks_on_caller(), mine);
	assert_int_equal(T.ok, T.acked);
	gsd_audit_close(a);
}

/*
 * Commits on the producer's thread and on the writer's interleave (records nobody waits for
 * wake the writer; acks are the producer's): every record is written once, in the order
 * queued, and the file still verifies.
 */
static void test_caller_and_writer_commits_keep_order(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.commit_on_caller = true};
	gsd_audit *a = open_audit(fx->path, &o);
	const uint64_t n = 3000;
	uint64_t last = 0;
	for (uint64_t id = 1; id <= n; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		last = queue(a, &r, NULL);
		r.state = ST_COMPLETED;
		gsd_audit_packet(a, &r, "done", NULL, NULL); /* nobody waits: the writer's */
		if (id % 3 == 0)
			gsd_audit_commit_here(a, false);
	}
	gsd_audit_commit_here(a, false);
	assert_true(wait_acks(last));
	uint64_t fl = flush(a);
	gsd_audit_commit_here(a, false);
	assert_true(wait_acks(fl));
	assert_false(T.out_of_order);
	assert_int_equal(T.ok, T.acked);
	assert_true(acks_on_caller() > 0);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 2 * n);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE state = 4"), n);
	/* seq follows packet order: no record overtook one queued before it. */
	assert_int_equal(query_int(fx->path,
	                           "SELECT count(*) FROM packet_events e JOIN packet_events f"
	                           " ON f.seq = e.seq + 1 WHERE f.packet < e.packet"),
	                 0);
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("does not verify: %s", rep.why);
}

/*
 * A commit on the producer's thread that fails (the file was removed) answers its waiters
 * "not written" there, keeps the records nobody waits for, and leaves the retry to the writer,
 * which writes them once the file is back. (When the writer happens to take a round instead,
 * the round is undone and tried again.)
 */
static void test_caller_commit_failure_retried_by_writer(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.commit_on_caller = true};
	gsd_audit *a = open_audit(fx->path, &o);
	char moved[160];
	snprintf(moved, sizeof moved, "%s.moved", fx->path);
	bool committed = false;
	uint64_t rounds = 0, seq = 0;
	while (!committed && rounds < 1000) {
		rounds++;
		assert_int_equal(rename(fx->path, moved), 0);
		gsd_packet_rec r = packet(100000 + rounds, "alpha", 1, ST_SUBMITTED, 0);
		seq = queue(a, &r, NULL);
		r.packet = rounds; /* nobody waits: kept through the outage */
		gsd_audit_packet(a, &r, "kept", NULL, NULL);
		uint64_t before = acks_on_caller();
		committed = gsd_audit_commit_here(a, false);
		assert_true(wait_acks(seq));
		if (committed) {
			assert_int_equal(acks_on_caller(), before + 1);
			break;
		}
		assert_int_equal(rename(moved, fx->path), 0);
		uint64_t fl = flush(a);
		assert_false(gsd_audit_commit_here(a, false)); /* the retry is the writer's */
		assert_true(wait_acks(fl));
	}
	assert_true(committed);
	pthread_mutex_lock(&T.mu);
	assert_int_equal(T.failed, rounds); /* every acked record of an outage: not written */
	pthread_mutex_unlock(&T.mu);
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_FILE_GONE);
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.queued, 1); /* the kept record, for the writer's retry */
	/* While the outage lasts the producer leaves everything to the writer. */
	gsd_packet_rec r = packet(500000, "alpha", 1, ST_SUBMITTED, 0);
	seq = queue(a, &r, NULL);
	assert_false(gsd_audit_commit_here(a, false));
	assert_true(wait_acks(seq));

	assert_int_equal(rename(moved, fx->path), 0);
	uint64_t fl = flush(a);
	assert_false(gsd_audit_commit_here(a, false));
	assert_true(wait_acks(fl));
	assert_int_equal(gsd_audit_get_health(a), GSD_AUDIT_OK);
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.queued, 0);
	gsd_audit_close(a);
	/* Every kept record was written; no record answered "not written" was. */
	char sql[96];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM packets WHERE packet <= %" PRIu64, rounds);
	assert_int_equal(query_int(fx->path, sql), rounds);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE packet > 100000"),
	                 0);
}

static off_t wal_size(const char *path)
{
	char wal[128];
	snprintf(wal, sizeof wal, "%s-wal", path);
	struct stat st;
	assert_int_equal(stat(wal, &st), 0);
	return st.st_size;
}

static uint64_t queue_burst(gsd_audit *a, uint64_t first, uint64_t count)
{
	uint64_t seq = 0;
	for (uint64_t id = first; id < first + count; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
		seq = queue(a, &r, "x");
	}
	return seq;
}

/*
 * Past wal_limit the WAL is checkpointed and truncated to nothing before the acks. A reader in
 * the middle of a read transaction makes that impossible: the writer must then neither wait for
 * it nor fail, and truncate on a later commit once the reader is gone.
 */
static void test_wal_bounded(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit_options o = {.wal_limit = 1};
	gsd_audit *a = open_audit(fx->path, &o);
	assert_true(wait_acks(queue_burst(a, 1, 500)));
	assert_int_equal(wal_size(fx->path), 0);
	gsd_audit_stats s;
	gsd_audit_get_stats(a, &s);
	assert_true(s.checkpoints >= 1);

	sqlite3 *db;
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT packet FROM packets", -1, &q, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW); /* holds a read snapshot until reset */
	uint64_t before = s.checkpoints;
	assert_true(wait_acks(queue_burst(a, 501, 500)));
	assert_true(wait_acks(queue_burst(a, 1001, 500)));
	assert_int_equal(T.ok, 1500);
	assert_true(wal_size(fx->path) > 0);
	sqlite3_finalize(q);
	sqlite3_close(db);

	assert_true(wait_acks(queue_burst(a, 1501, 1)));
	assert_int_equal(wal_size(fx->path), 0);
	gsd_audit_get_stats(a, &s);
	assert_true(s.checkpoints > before);
	gsd_audit_close(a);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 1501);
}

/* ---- child processes ---- */

static int child_fd = -1;

static void child_ack(void *arg, bool ok)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	if (!ok)
		id |= 1ull << 63;
	/* 8 bytes is below PIPE_BUF, so each write lands whole. */
	if (write(child_fd, &id, sizeof id) != (ssize_t)sizeof id)
		_exit(3);
}

struct ack_log {
	uint64_t count;  /* acks read */
	uint64_t ok;     /* of which ok */
	uint64_t ok_max; /* highest id acked ok */
	bool *ok_ids;    /* optional: ok_ids[id] set for each id acked ok */
	uint64_t cap;    /* ids below cap are recorded in ok_ids */
};

/*
 * Reads the child's 8-byte ack words (the id, top bit set when the ack said "failed") until end
 * of file, SIGKILLing `pid` once `kill_after` acks have been read (0 = never).
 */
static void read_acks(int fd, uint64_t kill_after, pid_t pid, struct ack_log *log)
{
	uint64_t id, prev = 0;
	while (read(fd, &id, sizeof id) == (ssize_t)sizeof id) {
		bool ok = !(id >> 63);
		id &= ~(1ull << 63);
		assert_int_equal(id, prev + 1); /* acks arrive in queue order */
		prev = id;
		if (ok) {
			log->ok++;
			log->ok_max = id;
			if (log->ok_ids && id < log->cap)
				log->ok_ids[id] = true;
		}
		if (++log->count == kill_after)
			kill(pid, SIGKILL);
	}
}

/*
 * A child queues packets as fast as the writer takes them and reports every ack through a
 * pipe; the parent SIGKILLs it after a few thousand. Every packet acknowledged before the kill
 * must be in the file when it is opened again.
 */
static void test_kill9_keeps_acked(void **state)
{
	struct fixture *fx = *state;
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		child_fd = fds[1];
		gsd_audit *a;
		if (gsd_audit_open(fx->path, NULL, &a) != 0)
			_exit(2);
		for (uint64_t id = 1;; id++) {
			gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
			gsd_audit_packet(a, &r, "k", child_ack, (void *)(uintptr_t)id);
			/* Keep the backlog bounded; the kill comes while it is still full. */
			gsd_audit_stats st;
			gsd_audit_get_stats(a, &st);
			while (st.queued > 20000) {
				sched_yield();
				gsd_audit_get_stats(a, &st);
			}
		}
	}
	close(fds[1]);
	struct ack_log log = {0};
	read_acks(fds[0], 5000, pid, &log);
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	assert_true(log.count >= 5000);
	assert_int_equal(log.ok, log.count);
	uint64_t ok_max = log.ok_max;

	gsd_audit *a = open_audit(fx->path, NULL); /* recovers the WAL */
	gsd_audit_close(a);
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM packets WHERE packet <= %" PRIu64, ok_max);
	assert_int_equal(query_int(fx->path, sql), ok_max);
	gsd_history_filter f = filter("alpha");
	f.after_packet = ok_max - 1; /* a cursor must name a packet of the file */
	f.oldest_first = true;
	f.limit = 1;
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 1);
	assert_int_equal(h.rows[0].rec.packet, ok_max);
	gsd_history_result_free(&h);
	print_message("kill -9: all %" PRIu64 " packets acked before it are in the file\n", ok_max);
}

/*
 * A child whose files may not grow past a few hundred KiB (RLIMIT_FSIZE) keeps writing: the
 * batch that hits the limit fails and is acked as failed, nothing acked ok is lost, and the
 * writer keeps running and closes cleanly.
 */
static void test_io_error_fails_batch(void **state)
{
	struct fixture *fx = *state;
	const uint64_t n = 20000;
	gsd_audit *a = open_audit(fx->path, NULL);
	gsd_audit_close(a);

	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		child_fd = fds[1];
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit rl = {.rlim_cur = 512 * 1024, .rlim_max = 512 * 1024};
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(4);
		gsd_audit_options o = {.max_batch = 512};
		if (gsd_audit_open(fx->path, &o, &a) != 0)
			_exit(2);
		for (uint64_t id = 1; id <= n; id++) {
			gsd_packet_rec r = packet(id, "alpha", 1, ST_SUBMITTED, 0);
			r.result = "padding padding padding padding padding padding padding";
			gsd_audit_packet(a, &r, "io", child_ack, (void *)(uintptr_t)id);
		}
		gsd_audit_close(a); /* must return: the writer survives the errors */
		_exit(0);
	}
	close(fds[1]);
	bool *ok_ids = calloc(n + 1, sizeof *ok_ids);
	assert_non_null(ok_ids);
	struct ack_log log = {.ok_ids = ok_ids, .cap = n + 1};
	read_acks(fds[0], 0, pid, &log);
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(log.count, n); /* every record was acked, one way or the other */
	assert_true(log.ok < n);        /* the limit was hit */
	assert_true(log.ok > 0);        /* ... but not before some batches committed */

	/* Exactly the records acked ok are in the file. */
	sqlite3 *db;
	sqlite3_stmt *s;
	assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT packet FROM packets", -1, &s, NULL),
	                 SQLITE_OK);
	uint64_t rows = 0;
	while (sqlite3_step(s) == SQLITE_ROW) {
		uint64_t id = (uint64_t)sqlite3_column_int64(s, 0);
		assert_true(id >= 1 && id <= n);
		assert_true(ok_ids[id]);
		rows++;
	}
	sqlite3_finalize(s);
	sqlite3_close(db);
	assert_int_equal(rows, log.ok);
	free(ok_ids);
	print_message("file size limit: %" PRIu64 " acked ok, %" PRIu64 " acked failed\n", log.ok,
	              n - log.ok);
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Not a pass/fail figure: prints the committed rate for a burst of 100k packet records. */
static void test_burst_throughput(void **state)
{
	struct fixture *fx = *state;
	const uint64_t n = 100000;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t id = 1; id <= n; id++) {
		gsd_packet_rec r = packet(id, id % 2 ? "alpha" : "beta", 1 + id % 8, ST_SUBMITTED,
		                          (uint32_t)(id % 4));
		queue(a, &r, "submitted");
	}
	double queued_s = seconds_since(&t0);
	assert_true(wait_acks(n));
	double total_s = seconds_since(&t0);
	assert_int_equal(T.ok, n);
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	print_message("burst: %" PRIu64 " packet records queued in %.3f s, committed in %.3f s "
	              "(%.0f records/s, %" PRIu64 " commits)\n",
	              n, queued_s, total_s, (double)n / total_s, st.commits);
	gsd_audit_close(a);
}

/* ---- the memory manager's records: moves and packet allocation lists ---- */

enum { MK_PLACE = 1, MK_PAGE_IN = 2, MK_EVICT = 3, MK_TRANSFER = 4, MK_FREE = 7 };

static gsd_move_rec move(const char *tenant, uint64_t allocation, int kind, uint64_t packet,
                         uint64_t for_packet)
{
	return (gsd_move_rec){
	        .allocation = allocation,
	        .tenant = tenant,
	        .device = 100 + allocation % 2,
	        .adapter = 1,
	        .packet = packet,
	        .for_packet = for_packet,
	        .kind = kind,
	        .from_segment = 0,
	        .from_offset = 0,
	        .to_segment = 1,
	        .to_offset = allocation * 4096,
	        .bytes = 65536,
	        .transfer_flags = 0x18, /* TransferStart | TransferEnd */
	        .pieces = 2,
	        .time_ns = 5000 + allocation,
	};
}

static size_t moves(const char *path, const gsd_moves_filter *f, gsd_move_row **rows)
{
	char err[256] = "";
	size_t n = 0;
	if (gsd_history_moves(path, f, rows, &n, err, sizeof err) != 0)
		fail_msg("moves: %s", err);
	return n;
}

static void assert_move_allocs(const gsd_move_row *rows, size_t n, const uint64_t *allocs,
                               size_t want)
{
	assert_int_equal(n, want);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(rows[i].rec.allocation, allocs[i]);
}

static void test_moves_round_trip(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	/* seq 1..6 alpha, 7 beta; allocation 5 moves three times. */
	gsd_move_rec m = move("alpha", 5, MK_PLACE, 0, 0);
	m.bytes = 0;
	m.pieces = 0;
	m.transfer_flags = 0;
	m.reason = "created";
	gsd_audit_move(a, &m);
	m = move("alpha", 6, MK_PLACE, 0, 0);
	gsd_audit_move(a, &m); /* no reason: NULL in the file, "" when read */
	m = move("alpha", 5, MK_EVICT, 40, 0);
	m.from_segment = 1;
	m.from_offset = 20480;
	m.to_segment = 2;
	m.to_offset = 0x10000;
	m.transfer_flags = 0x1a; /* Unswizzle | Start | End */
	m.reason = "room for allocation 9";
	gsd_audit_move(a, &m);
	m = move("alpha", 5, MK_PAGE_IN, 42, 41);
	char long_reason[300];
	memset(long_reason, 'r', sizeof long_reason - 1);
	long_reason[sizeof long_reason - 1] = '\0';
	m.reason = long_reason;
	gsd_audit_move(a, &m);
	m = move("alpha", 6, MK_TRANSFER, 43, 0);
	m.time_ns = 0; /* stamped with the time it was queued */
	gsd_audit_move(a, &m);
	m = move("alpha", 8, MK_FREE, 0, 0);
	m.to_segment = 0;
	gsd_audit_move(a, &m);
	m = move("beta", 7, MK_PAGE_IN, 44, 42);
	gsd_audit_move(a, &m);
	assert_true(wait_acks(flush(a)));

	gsd_move_row *rows;
	gsd_moves_filter f = {.tenant = "alpha"};
	size_t n = moves(fx->path, &f, &rows);
	assert_move_allocs(rows, n, (const uint64_t[]){8, 6, 5, 5, 6, 5}, 6);
	for (size_t i = 0; i + 1 < n; i++)
		assert_true(rows[i].seq > rows[i + 1].seq);
	/* Every field of the eviction comes back. */
	const gsd_move_row *e = &rows[3];
	assert_int_equal(e->rec.kind, MK_EVICT);
	assert_int_equal(e->rec.device, 101);
	assert_int_equal(e->rec.adapter, 1);
	assert_int_equal(e->rec.packet, 40);
	assert_int_equal(e->rec.for_packet, 0);
	assert_int_equal(e->rec.from_segment, 1);
	assert_int_equal(e->rec.from_offset, 20480);
	assert_int_equal(e->rec.to_segment, 2);
	assert_int_equal(e->rec.to_offset, 0x10000);
	assert_int_equal(e->rec.bytes, 65536);
	assert_int_equal(e->rec.transfer_flags, 0x1a);
	assert_int_equal(e->rec.pieces, 2);
	assert_int_equal(e->rec.time_ns, 5005);
	assert_string_equal(e->reason, "room for allocation 9");
	/* A long reason is cut to the row's buffer; no reason reads as "". */
	assert_int_equal(strlen(rows[2].reason), sizeof rows[2].reason - 1);
	assert_int_equal(rows[2].rec.for_packet, 41);
	assert_string_equal(rows[4].reason, "");
	assert_true(rows[1].rec.time_ns > 1000000000ull); /* wall time at queueing */
	free(rows);

	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM moves WHERE reason IS NULL"), 4);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM moves WHERE kind = 2"
	                                     " AND kind_name = 'PAGE_IN'"),
	                 2);
	assert_int_equal(query_int(fx->path, "SELECT length(reason) FROM moves WHERE kind = 2"
	                                     " AND tenant = 'alpha'"),
	                 GSD_AUDIT_TEXT_MAX);

	/* Filters: allocation, device, packet (paging packet or render packet), paging back. */
	f = (gsd_moves_filter){.tenant = "alpha", .allocation = 5};
	n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 3);
	assert_int_equal(rows[0].rec.kind, MK_PAGE_IN);
	assert_int_equal(rows[1].rec.kind, MK_EVICT);
	assert_int_equal(rows[2].rec.kind, MK_PLACE);
	assert_string_equal(rows[2].reason, "created");
	uint64_t second = rows[1].seq;
	free(rows);
	f.before_seq = second;
	n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 1);
	assert_int_equal(rows[0].rec.kind, MK_PLACE);
	free(rows);
	f = (gsd_moves_filter){.tenant = "alpha", .allocation = 5, .limit = 1};
	n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 1);
	assert_int_equal(rows[0].rec.kind, MK_PAGE_IN);
	free(rows);
	f = (gsd_moves_filter){.tenant = "alpha",
	                       .device = 100}; /* device = 100 + allocation % 2 */
	n = moves(fx->path, &f, &rows);
	assert_move_allocs(rows, n, (const uint64_t[]){8, 6, 6}, 3);
	free(rows);
	f = (gsd_moves_filter){.tenant = "alpha", .packet = 42}; /* the paging packet */
	n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 1);
	assert_int_equal(rows[0].rec.packet, 42);
	free(rows);
	f = (gsd_moves_filter){.tenant = "alpha", .packet = 41}; /* the render packet */
	n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 1);
	assert_int_equal(rows[0].rec.for_packet, 41);
	free(rows);
	f = (gsd_moves_filter){.tenant = "alpha", .packet = 99};
	assert_int_equal(moves(fx->path, &f, &rows), 0);
	assert_null(rows);

	/* Tenant scoping: beta sees its one move and nothing of alpha's, even by name. */
	f = (gsd_moves_filter){.tenant = "beta"};
	n = moves(fx->path, &f, &rows);
	assert_move_allocs(rows, n, (const uint64_t[]){7}, 1);
	free(rows);
	f = (gsd_moves_filter){.tenant = "beta", .allocation = 5};
	assert_int_equal(moves(fx->path, &f, &rows), 0);
	f = (gsd_moves_filter){.tenant = "beta", .packet = 42}; /* for_packet of beta's move */
	n = moves(fx->path, &f, &rows);
	assert_move_allocs(rows, n, (const uint64_t[]){7}, 1);
	free(rows);
	f = (gsd_moves_filter){.tenant = "gamma"};
	assert_int_equal(moves(fx->path, &f, &rows), 0);

	/* No tenant, no moves. */
	char err[256] = "";
	f = (gsd_moves_filter){.tenant = NULL};
	assert_int_equal(gsd_history_moves(fx->path, &f, &rows, &n, err, sizeof err), -1);
	assert_true(strlen(err) > 0);
	f.tenant = "";
	assert_int_equal(gsd_history_moves(fx->path, &f, &rows, &n, err, sizeof err), -1);
	assert_int_equal(gsd_history_moves(fx->path, NULL, &rows, &n, err, sizeof err), -1);

	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.dropped, 0);
	assert_int_equal(st.records, 8); /* 7 moves and the flush */
	gsd_audit_close(a);
}

/* Limits as for packets: 100 by default, at most 10000. */
static void test_moves_limits(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t i = 1; i <= 10050; i++) {
		gsd_move_rec m = move("alpha", i, MK_PLACE, 0, 0);
		gsd_audit_move(a, &m);
	}
	assert_true(wait_acks(flush(a)));
	gsd_move_row *rows;
	gsd_moves_filter f = {.tenant = "alpha"};
	size_t n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 100);
	assert_int_equal(rows[0].rec.allocation, 10050);
	free(rows);
	f.limit = 50000;
	n = moves(fx->path, &f, &rows);
	assert_int_equal(n, 10000);
	assert_int_equal(rows[9999].rec.allocation, 51);
	free(rows);
	gsd_audit_close(a);
}

static void test_history_by_allocation_and_paging(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);

	/* alpha: 1 lists {5, 6}; 2 lists {6}; 3 writes 5; 4 is a paging packet that moves 5;
	 * 5 is a context switch; 6 lists nothing. beta: 7 lists its own allocation 5. */
	static const uint32_t flags[] = {0, 0x2, 0x8, 0x10, 0x1, 0x40, 0x0, 0x0};
	static const struct {
		uint64_t allocs[2];
		bool write[2];
		size_t n;
	} lists[8] = {[1] = {{5, 6}, {false, false}, 2},
	              [2] = {{6}, {true}, 1},
	              [3] = {{9, 5}, {false, true}, 2},
	              [7] = {{5}, {false}, 1}};
	for (uint64_t id = 1; id <= 7; id++) {
		gsd_packet_rec r = packet(id, id == 7 ? "beta" : "alpha", 1, ST_SUBMITTED, 0);
		r.submit_flags = flags[id];
		gsd_audit_submitted(a, &r, NULL, lists[id].allocs, lists[id].write, lists[id].n,
		                    NULL, NULL); /* 4, 5 and 6 list nothing */
		r.state = ST_COMPLETED;
		queue(a, &r, NULL);
	}
	gsd_move_rec m = move("alpha", 5, MK_EVICT, 4, 0);
	gsd_audit_move(a, &m);
	m = move("alpha", 6, MK_PLACE, 0, 0); /* no packet: names none */
	gsd_audit_move(a, &m);
	assert_true(wait_acks(flush(a)));

	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_allocations"), 6);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_allocations"
	                                     " WHERE write = 1"),
	                 2);
	assert_int_equal(query_int(fx->path, "SELECT write FROM packet_allocations"
	                                     " WHERE packet = 3 AND allocation = 5"),
	                 1);
	assert_int_equal(query_int(fx->path,
	                           "SELECT count(*) FROM packet_allocations pa JOIN packets p"
	                           " USING (packet) WHERE packet = 1 AND write = 0 AND"
	                           " p.tenant = 'alpha'"),
	                 2);

	gsd_history_result h;
	gsd_history_filter f = filter("alpha");
	f.allocation = 5;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){4, 3, 1}, 3);
	gsd_history_result_free(&h);
	f.allocation = 6;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){2, 1}, 2);
	gsd_history_result_free(&h);
	f.allocation = 77;
	history(fx->path, &f, &h);
	assert_ids(&h, NULL, 0);
	gsd_history_result_free(&h);

	f = filter("alpha");
	f.paging = true;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){5, 4}, 2);
	gsd_history_result_free(&h);
	f.allocation = 5;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){4}, 1);
	gsd_history_result_free(&h);

	/* Combined with the other filters and paging back. */
	f = filter("alpha");
	f.allocation = 5;
	f.before_packet = 4;
	f.limit = 1;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){3}, 1);
	gsd_history_result_free(&h);

	/* Tenant scoping: beta's allocation 5 is its own; alpha's packets never show. */
	f = filter("beta");
	f.allocation = 5;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){7}, 1);
	gsd_history_result_free(&h);
	f.allocation = 6;
	history(fx->path, &f, &h);
	assert_ids(&h, NULL, 0);
	gsd_history_result_free(&h);
	f = filter("beta");
	f.paging = true;
	history(fx->path, &f, &h);
	assert_ids(&h, NULL, 0);
	gsd_history_result_free(&h);
	gsd_audit_close(a);
}

/* Allocation lists of every size, through more nodes than the pool keeps (the writer frees
 * each list with its node; ASan's leak check runs in CI). */
static void test_packet_allocations_many(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	enum { PACKETS = 12000, MAXLIST = 40 };
	uint64_t list[MAXLIST];
	bool wr[MAXLIST];
	uint64_t rows = 0;
	for (size_t i = 0; i < MAXLIST; i++) {
		list[i] = 1000 + i;
		wr[i] = i % 3 == 0;
	}
	for (uint64_t p = 1; p <= PACKETS; p++) {
		size_t n = p % MAXLIST;
		queue_submitted(a, p, "alpha", list, wr, n);
		rows += n;
	}
	assert_true(wait_acks(flush(a)));
	char sql[64];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM packet_allocations");
	assert_int_equal(query_int(fx->path, sql), (int64_t)rows);
	gsd_audit_stats st;
	gsd_audit_get_stats(a, &st);
	assert_int_equal(st.dropped, 0);
	assert_int_equal(st.queued, 0);
	gsd_audit_close(a);
}

/* A file of schema 8 (its straight runs kept in rows only within one commit): this verifier
 * reads it as it is, and a daemon upgrades it to schema 9, after which runs committed apart
 * are kept too (an upgrade once stopped at the view that reads the new columns). */
static void test_schema8_file_upgraded(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t id = 1; id <= 3; id++)
		straight_records(a, id, "alpha", id != 2, NULL, true);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	exec_sql(fx->path, "DROP VIEW packet_events; DROP INDEX packets_open;"
	                   " ALTER TABLE packets DROP COLUMN run_digest;"
	                   " ALTER TABLE packets DROP COLUMN ready_digest; PRAGMA user_version = 8;"
	                   " UPDATE meta SET value = '8' WHERE key = 'schema_version'");
	gs_chain_report rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("the schema 8 file does not verify: %s", rep.why);

	tracker_reset();
	a = open_audit(fx->path, NULL);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), 9);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM sqlite_master WHERE name ="
	                                     " 'packets_open'"),
	                 1);
	gsd_packet_rec r = packet(4, "alpha", 1, ST_SUBMITTED, 0);
	r.patch_flags = 0;
	r.event_ns = r.submitted_ns;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	r.patch_flags = 2;
	r.state = ST_READY;
	r.ready_ns = r.event_ns = r.submitted_ns + 10;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	r.state = ST_RUNNING;
	r.started_ns = r.event_ns = r.ready_ns + 10;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	r.state = ST_COMPLETED;
	r.completed_ns = r.event_ns = r.started_ns + 10;
	gsd_audit_packet(a, &r, NULL, NULL, NULL);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	rep = verify_file(fx->path);
	if (!rep.ok)
		fail_msg("the upgraded file does not verify: %s", rep.why);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_event_rows WHERE"
	                                     " packet <> 2"),
	                 0);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 4 * 4 + 4);
}

/* A version 1 file (no moves, no packet_allocations) opens, gains both, keeps its rows. */
static void test_old_file_upgraded(void **state)
{
	struct fixture *fx = *state;
	tracker_reset();
	gsd_audit *a = open_audit(fx->path, NULL);
	for (uint64_t id = 1; id <= 20; id++) {
		gsd_packet_rec r = packet(id, "alpha", 1, ST_COMPLETED, 0);
		queue(a, &r, "v1");
	}
	gsd_allocation_rec al = {.allocation = 5, .tenant = "alpha", .size = 4096};
	gsd_audit_allocation(a, &al);
	assert_true(wait_acks(flush(a)));
	gsd_audit_close(a);
	/* What a version 1 daemon left: the same tables less the new ones, and the events in a
	 * table named packet_events without the chain's columns (an upgrade to schema 8 once
	 * stopped at the view that reads them). (The packets table keeps schema 8's columns:
	 * SQLite cannot drop its last one, whose definition ends in a comment.) */
	exec_sql(fx->path,
	         "DROP VIEW packet_events; DROP VIEW packet_event_facts; DROP VIEW"
	         " packet_event_log; DROP VIEW packet_usage; DROP VIEW usage_by_tenant; DROP VIEW"
	         " usage_by_context; DROP VIEW usage_by_node; DROP VIEW packet_log; DROP VIEW"
	         " event_log; DROP VIEW move_log; DROP VIEW error_log; DROP VIEW note_log;"
	         " ALTER TABLE packet_event_rows RENAME TO packet_events;"
	         " ALTER TABLE packet_events DROP COLUMN state_digest;"
	         " ALTER TABLE packet_events DROP COLUMN hash;"
	         " DROP INDEX packets_seq; DROP INDEX packets_end_seq;"
	         " DROP TABLE moves; DROP TABLE packet_allocations;"
	         " DROP INDEX packets_tenant_time; DROP INDEX packets_tenant_context_time;"
	         " DROP INDEX packets_tenant_state_time;"
	         " CREATE INDEX packets_tenant ON packets (tenant, packet DESC);"
	         " CREATE INDEX packets_tenant_state ON packets (tenant, state, packet);"
	         " PRAGMA user_version = 1;"
	         " UPDATE meta SET value = '1' WHERE key = 'schema_version'");
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM sqlite_master"
	                                     " WHERE name IN ('moves', 'packet_allocations')"),
	                 0);

	tracker_reset();
	a = open_audit(fx->path, NULL);
	assert_int_equal(query_int(fx->path, "PRAGMA user_version"), GSD_AUDIT_SCHEMA_VERSION);
	assert_int_equal(query_int(fx->path, "SELECT CAST(value AS INTEGER) FROM meta"
	                                     " WHERE key = 'schema_version'"),
	                 GSD_AUDIT_SCHEMA_VERSION);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM sqlite_master WHERE type ="
	                                     " 'index' AND tbl_name IN ('moves',"
	                                     " 'packet_allocations')"),
	                 5);
	/* Version 3 reads history in submission order: the packet-ordered indexes went;
	 * version 8 finds the events rows keep by seq, and no longer indexes client ids;
	 * version 9 finds the runs rows keep while they go on (packets_open). */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM sqlite_master WHERE type ="
	                                     " 'index' AND tbl_name = 'packets'"),
	                 6);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM sqlite_master WHERE name ="
	                                     " 'packets_id'"),
	                 0);
	/* Every row of the older file got its client id. */
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets WHERE id IS NULL"), 0);
	assert_int_equal(query_int(fx->path, "SELECT count(DISTINCT id) FROM packets"),
	                 query_int(fx->path, "SELECT count(*) FROM packets"));
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM sqlite_master WHERE name"
	                                     " LIKE 'packets_tenant%_time'"),
	                 3);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packets"), 20);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM packet_events"), 20);
	assert_int_equal(query_int(fx->path, "SELECT count(*) FROM allocations"), 1);

	/* The new tables work at once, beside the old rows. */
	gsd_packet_rec r = packet(21, "alpha", 1, ST_SUBMITTED, 0);
	r.submit_flags = 0x1;
	gsd_audit_submitted(a, &r, NULL, (const uint64_t[]){5}, NULL, 1, NULL, NULL);
	gsd_move_rec m = move("alpha", 5, MK_PAGE_IN, 21, 0);
	gsd_audit_move(a, &m);
	assert_true(wait_acks(flush(a)));
	gsd_history_filter f = filter("alpha");
	gsd_history_result h;
	assert_int_equal(history(fx->path, &f, &h), 21);
	gsd_history_result_free(&h);
	f.allocation = 5;
	history(fx->path, &f, &h);
	assert_ids(&h, (const uint64_t[]){21}, 1);
	gsd_history_result_free(&h);
	gsd_move_row *rows;
	gsd_moves_filter mf = {.tenant = "alpha", .allocation = 5};
	assert_int_equal(moves(fx->path, &mf, &rows), 1);
	free(rows);
	gsd_audit_close(a);

	/* A restarted daemon continues after the highest packet, whichever table names it. */
	uint64_t last_packet;
	char err[256];
	assert_int_equal(gsd_history_last_packet(fx->path, &last_packet, err, sizeof err), 0);
	assert_int_equal(last_packet, 21);
	exec_sql(fx->path,
	         "INSERT INTO moves (time_ns, tenant, allocation, device, adapter, packet,"
	         " for_packet, kind, kind_name, from_segment, from_offset, to_segment,"
	         " to_offset, bytes, transfer_flags, pieces)"
	         " VALUES (1, 'alpha', 5, 1, 0, 30, 0, 3, 'EVICT', 1, 0, 0, 0, 1, 0, 1)");
	assert_int_equal(gsd_history_last_packet(fx->path, &last_packet, err, sizeof err), 0);
	assert_int_equal(last_packet, 30);
}

/*
 * Handles are random: the daemon asks the file whether a candidate names a row of contexts or
 * allocations (either table, whichever kind the new object is), and never draws at or below
 * the chain's start in an upgraded file, where the verifier takes a row without records for one
 * older than the chain.
 */
static void test_handle_check(void **state)
{
	struct fixture *fx = *state;
	gsd_audit *a = open_audit(fx->path, NULL);
	const uint64_t big = UINT64_C(0x7fffffffffffff01);
	gsd_context_rec x = {.context = big, .tenant = "alpha", .device = 3, .priority_class = 2};
	gsd_audit_context(a, &x);
	gsd_allocation_rec al = {.allocation = 21, .tenant = "beta", .size = 4096, .segment = 1};
	gsd_audit_allocation(a, &al);
	assert_true(wait_acks(flush(a)));
	gsd_handle_check *c;
	uint64_t floor = 99;
	char err[256] = "";
	assert_int_equal(gsd_history_handles_open(fx->path, &c, &floor, err, sizeof err), 0);
	assert_int_equal(floor, 0); /* the file had the chain from the start */
	assert_int_equal(gsd_history_handle_used(c, big), 1);
	assert_int_equal(gsd_history_handle_used(c, 21), 1);
	assert_int_equal(gsd_history_handle_used(c, 3), 0); /* a device keys no row */
	assert_int_equal(gsd_history_handle_used(c, big - 1), 0);
	assert_int_equal(gsd_history_handle_used(c, 22), 0);
	/* Rows the writer commits later are seen: the lookup holds no read transaction. */
	x.context = 5;
	gsd_audit_context(a, &x);
	assert_true(wait_acks(flush(a)));
	assert_int_equal(gsd_history_handle_used(c, 5), 1);
	gsd_history_handles_close(c);
	gsd_audit_close(a);
	exec_sql(fx->path, "UPDATE meta SET value = '40' WHERE key = 'chain_start_context';"
	                   "UPDATE meta SET value = '70' WHERE key = 'chain_start_allocation'");
	assert_int_equal(gsd_history_handles_open(fx->path, &c, &floor, err, sizeof err), 0);
	assert_int_equal(floor, 70);
	gsd_history_handles_close(c);
	gsd_history_handles_close(NULL);
	assert_int_equal(gsd_history_handle_used(NULL, 21), 0);
}

int main(void)
{
#define T_(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	        T_(test_acked_records_are_readable),
	        T_(test_null_sink_writes_nothing),
	        T_(test_group_commit),
	        T_(test_upsert_and_events),
	        T_(test_tenant_isolation),
	        T_(test_filters),
	        T_(test_time_range_and_order),
	        T_(test_cursor_stable_while_rows_arrive),
	        T_(test_history_query_plans),
	        T_(test_update_in_place),
	        T_(test_audit_sequence),
	        T_(test_chain_verifies_and_finds_edits),
	        T_(test_chain_pinned_head),
	        T_(test_chain_across_reopen_and_failure),
	        T_(test_retention_keeps_verification),
	        T_(test_kept_events),
	        T_(test_kept_runs_across_commits),
	        T_(test_kept_run_other_submission),
	        T_(test_refused_row_keeps_the_chain),
	        T_(test_kept_submitted_over_a_row),
	        T_(test_retention_of_kept_events),
	        T_(test_retention_anchor_then_kept_run),
	        T_(test_retention_of_everything),
	        T_(test_retention_past_kept_submissions),
	        T_(test_upgrade_from_schema_3),
	        T_(test_upgrade_tenants_from_schema_4),
	        T_(test_wire_key_kept),
	        T_(test_reopen_keeps_rows_and_version),
	        T_(test_reconcile_in_flight),
	        T_(test_removed_file_stops_acks),
	        T_(test_replaced_file_stops_acks),
	        T_(test_newer_schema_refused),
	        T_(test_history_missing_file),
	        T_(test_errors_notes_contexts_allocations),
	        T_(test_refused_record_fails_alone),
	        T_(test_lock_holder_delays_only),
	        T_(test_caller_commits),
	        T_(test_caller_commit_leaves_a_held_lock_to_the_writer),
	        T_(test_caller_and_writer_commits_keep_order),
	        T_(test_caller_commit_bounded),
	        T_(test_caller_commit_failure_retried_by_writer),
	        T_(test_outage_keeps_unacked_records),
	        T_(test_wal_bounded),
	        T_(test_kill9_keeps_acked),
	        T_(test_io_error_fails_batch),
	        T_(test_burst_throughput),
	        T_(test_moves_round_trip),
	        T_(test_moves_limits),
	        T_(test_history_by_allocation_and_paging),
	        T_(test_packet_allocations_many),
	        T_(test_old_file_upgraded),
	        T_(test_schema8_file_upgraded),
	        T_(test_handle_check),
	};
#undef T_
	return cmocka_run_group_tests(tests, NULL, NULL);
}
