/*
 * The audit writer's VFS (server/audit/vfs.c): WAL writes of a commit coalesced, and nothing
 * else changed. Each test writes through a connection opened with the VFS, the way the audit
 * writer does (WAL, 1 KiB pages, synchronous=NORMAL, no auto-checkpoint), and reads through
 * connections on the default VFS, the way the checkpointer and the history readers do.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "audit/vfs.h"

#include "audit_fixture.h"

static int setup(void **state)
{
	struct fixture *fx = audit_fixture_new("/tmp/gs-vfs");
	assert_int_equal(gsd_audit_vfs_register(), SQLITE_OK);
	*state = fx;
	return 0;
}

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
}

/* The audit writer's settings, on the given VFS (NULL: the default one). */
static sqlite3 *open_db(const char *path, const char *vfs)
{
	sqlite3 *db = NULL;
	assert_int_equal(
	        sqlite3_open_v2(path, &db,
	                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
	                        vfs),
	        SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	exec_ok(db, "PRAGMA page_size = 1024");
	exec_ok(db, "PRAGMA journal_mode = WAL");
	exec_ok(db, "PRAGMA synchronous = NORMAL");
	return db;
}

static sqlite3 *open_writer(const char *path)
{
	sqlite3 *db = open_db(path, GSD_AUDIT_VFS_NAME);
	/* The daemon checkpoints from its own thread, never inside COMMIT. */
	sqlite3_wal_autocheckpoint(db, 0);
	exec_ok(db, "CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)");
	return db;
}

/* A one-value query's value, or -1 if it failed (no cmocka assert: threads use it too). */
static int64_t try_query_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *s;
	int64_t v = -1;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(s) == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

static int64_t query_int(sqlite3 *db, const char *sql)
{
	int64_t v = try_query_int(db, sql);
	if (v < 0)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	return v;
}

/* One transaction of n rows of bytes each (k from first), the row's bytes all (k & 0xff). */
static int insert_rows(sqlite3 *db, int64_t first, int n, int bytes)
{
	sqlite3_stmt *s;
	unsigned char *v = malloc((size_t)bytes);
	assert_non_null(v);
	int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO t (k, v) VALUES (?, ?)", -1, &s, NULL),
	                 SQLITE_OK);
	for (int i = 0; rc == SQLITE_OK && i < n; i++) {
		memset(v, (int)((first + i) & 0xff), (size_t)bytes);
		sqlite3_bind_int64(s, 1, first + i);
		sqlite3_bind_blob(s, 2, v, bytes, SQLITE_STATIC);
		rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
		sqlite3_reset(s);
	}
	sqlite3_finalize(s);
	free(v);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK && !sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

/* n rows, each with its bytes, and the file is sound. */
static void check_rows(sqlite3 *db, int64_t n)
{
	assert_int_equal(query_int(db, "SELECT count(*) FROM t"), n);
	assert_int_equal(query_int(db, "SELECT count(*) FROM t WHERE k < 1"
	                               " OR hex(substr(v, 1, 1)) != printf('%02X', k & 255)"
	                               " OR substr(v, -1, 1) != substr(v, 1, 1)"),
	                 0);
	sqlite3_stmt *s;
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
	sqlite3_finalize(s);
}

static off_t file_size(const char *path, const char *suffix)
{
	char p[128];
	struct stat st;
	snprintf(p, sizeof p, "%s%s", path, suffix);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

static void *thread_io_of_new_thread(void *arg)
{
	*(uint64_t *)arg = gsd_audit_vfs_thread_io_ns();
	return NULL;
}

/*
 * A commit of several pages reaches the WAL in one write, and a reader on another connection
 * (default VFS) sees each commit as soon as COMMIT returns, and nothing of an open one.
 */
static void test_coalesced_and_visible(void **state)
{
	struct fixture *fx = *state;
	sqlite3 *w = open_writer(fx->path);
	sqlite3 *r = open_db(fx->path, NULL);
	for (int i = 0; i < 50; i++) {
		gsd_audit_vfs_stats before, after;
		gsd_audit_vfs_stats_get(&before);
		/* Eight rows of 600 bytes: some five pages, ten xWrite calls or more. */
		assert_int_equal(insert_rows(w, 1 + 8 * i, 8, 600), SQLITE_OK);
		gsd_audit_vfs_stats_get(&after);
		uint64_t in = after.wal_writes_in - before.wal_writes_in;
		uint64_t out = after.wal_writes_out - before.wal_writes_out;
		assert_true(in >= 8);
		/* One write, or two when the WAL just started (its header goes with the frames
		 * unless the WAL is new). */
		assert_true(out >= 1 && out <= 2);
		assert_int_equal(query_int(r, "SELECT count(*) FROM t"), 8 * (i + 1));
	}
	/* A large commit: one write per 64 KiB (the default VFS takes no write of 128 KiB). Its
	 * writes count in this thread's time in the file (what tells a slow disk from a busy
	 * CPU: server/audit/audit.c, commit_was_slow), and in no other thread's. */
	gsd_audit_vfs_stats before, after;
	gsd_audit_vfs_stats_get(&before);
	uint64_t io0 = gsd_audit_vfs_thread_io_ns();
	assert_int_equal(insert_rows(w, 401, 200, 900), SQLITE_OK);
	assert_true(gsd_audit_vfs_thread_io_ns() > io0);
	pthread_t other;
	uint64_t other_io = 1;
	assert_int_equal(pthread_create(&other, NULL, thread_io_of_new_thread, &other_io), 0);
	assert_int_equal(pthread_join(other, NULL), 0);
	assert_int_equal(other_io, 0);
	gsd_audit_vfs_stats_get(&after);
	assert_true(after.wal_writes_in - before.wal_writes_in >= 2 * 200);
	assert_true(after.wal_writes_out - before.wal_writes_out >= 3);
	assert_true(after.wal_writes_out - before.wal_writes_out <= 6);
	assert_int_equal(query_int(r, "SELECT count(*) FROM t"), 600);
	assert_int_equal(sqlite3_exec(w, "DELETE FROM t WHERE k > 400", NULL, NULL, NULL),
	                 SQLITE_OK);
	/* An open transaction, however large (past the buffer, spilled from a small cache), is
	 * not seen; its commit is, whole. */
	exec_ok(w, "PRAGMA cache_size = 20");
	exec_ok(w, "BEGIN");
	sqlite3_stmt *s;
	assert_int_equal(sqlite3_prepare_v2(w, "INSERT INTO t (k, v) SELECT k + 512, v FROM t", -1,
	                                    &s, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_DONE);
	sqlite3_finalize(s);
	assert_int_equal(query_int(r, "SELECT count(*) FROM t"), 400);
	exec_ok(w, "COMMIT");
	assert_int_equal(query_int(r, "SELECT count(*) FROM t"), 800);
	check_rows(r, 800);
	check_rows(w, 800);
	assert_true(file_size(fx->path, "-wal") > 400 * 1024);
	sqlite3_close(r);
	assert_int_equal(sqlite3_close(w), SQLITE_OK);
	/* Reopened after a clean close (which checkpoints). */
	sqlite3 *again = open_db(fx->path, NULL);
	check_rows(again, 800);
	sqlite3_close(again);
}

/*
 * Killed with SIGKILL after COMMIT returned, with no checkpoint and no close: every committed
 * transaction is in the WAL and recovered by the next opener.
 */
static void test_killed_without_checkpoint(void **state)
{
	struct fixture *fx = *state;
	const int commits = 200;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sqlite3 *w = open_writer(fx->path);
		for (int i = 0; i < commits; i++)
			if (insert_rows(w, 1 + 3 * i, 3, 200 + 37 * (i % 40)) != SQLITE_OK)
				_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* Not checkpointed: the rows are only in the WAL. */
	assert_true(file_size(fx->path, "-wal") > 100 * 1024);
	sqlite3 *r = open_db(fx->path, NULL);
	check_rows(r, 3 * commits);
	sqlite3_close(r);
	/* And through the VFS itself, which goes on from there. */
	sqlite3 *w = open_writer(fx->path);
	check_rows(w, 3 * commits);
	assert_int_equal(insert_rows(w, 3 * commits + 1, 5, 900), SQLITE_OK);
	check_rows(w, 3 * commits + 5);
	sqlite3_close(w);
}

struct ckpt_arg {
	const char *path;
	volatile bool stop;
	int checkpoints;
	int reads;
	int bad; /* reads that went back or saw a broken row */
};

/* The checkpointer and a history reader of the daemon, on one connection (default VFS). */
static void *ckpt_main(void *p)
{
	struct ckpt_arg *c = p;
	sqlite3 *db = open_db(c->path, NULL);
	int64_t seen = 0;
	while (!c->stop) {
		int mode = c->checkpoints % 3 == 2 ? SQLITE_CHECKPOINT_RESTART
		                                   : SQLITE_CHECKPOINT_PASSIVE;
		if (sqlite3_wal_checkpoint_v2(db, NULL, mode, NULL, NULL) == SQLITE_OK)
			c->checkpoints++;
		/* A reader never sees fewer rows than before, nor a broken row. */
		int64_t n = query_int(db, "SELECT count(*) FROM t");
		if (n < seen ||
		    query_int(db, "SELECT count(*) FROM t WHERE k > (SELECT max(k) - 20 "
		                  "FROM t) AND length(v) != 300") != 0)
			c->bad++;
		seen = n;
		c->reads++;
		usleep(200);
	}
	sqlite3_close(db);
	return NULL;
}

/* Commits while another connection checkpoints (restarting the WAL) and reads. */
static void test_concurrent_checkpoints(void **state)
{
	struct fixture *fx = *state;
	sqlite3 *w = open_writer(fx->path);
	struct ckpt_arg c = {.path = fx->path};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, ckpt_main, &c), 0);
	for (int i = 0; i < 1500; i++)
		assert_int_equal(insert_rows(w, 1 + 4 * i, 4, 300), SQLITE_OK);
	c.stop = true;
	pthread_join(t, NULL);
	assert_true(c.checkpoints > 0);
	assert_true(c.reads > 0);
	assert_int_equal(c.bad, 0);
	/* The writer's own TRUNCATE, as the daemon does past its WAL limit. */
	assert_int_equal(sqlite3_wal_checkpoint_v2(w, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL),
	                 SQLITE_OK);
	assert_int_equal(file_size(fx->path, "-wal"), 0);
	assert_int_equal(insert_rows(w, 6001, 4, 300), SQLITE_OK);
	check_rows(w, 6004);
	sqlite3 *r = open_db(fx->path, NULL);
	check_rows(r, 6004);
	sqlite3_close(r);
	sqlite3_close(w);
}

/*
 * A write that fails (the file may not grow: EFBIG, as on a full disk) fails the COMMIT, and
 * nobody sees any of it; once the file may grow again, commits go on.
 */
static void test_write_error_fails_commit(void **state)
{
	struct fixture *fx = *state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGXFSZ, SIG_IGN);
		sqlite3 *w = open_writer(fx->path);
		sqlite3 *r = open_db(fx->path, NULL);
		if (insert_rows(w, 1, 10, 500) != SQLITE_OK)
			_exit(10);
		off_t wal = file_size(fx->path, "-wal");
		struct rlimit lim = {(rlim_t)wal + 2048, RLIM_INFINITY};
		if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
			_exit(11);
		int failed = 0;
		for (int i = 0; i < 5; i++)
			if (insert_rows(w, 11, 10, 500) != SQLITE_OK)
				failed++;
		if (failed != 5)
			_exit(12);
		if (query_int(r, "SELECT count(*) FROM t") != 10 ||
		    query_int(w, "SELECT count(*) FROM t") != 10)
			_exit(13);
		lim.rlim_cur = RLIM_INFINITY;
		if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
			_exit(14);
		if (insert_rows(w, 11, 10, 500) != SQLITE_OK)
			_exit(15);
		if (query_int(r, "SELECT count(*) FROM t") != 20)
			_exit(16);
		sqlite3_close(r);
		sqlite3_close(w);
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	sqlite3 *r = open_db(fx->path, NULL);
	check_rows(r, 20);
	sqlite3_close(r);
}

int main(void)
{
#define T_(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	        T_(test_coalesced_and_visible),
	        T_(test_killed_without_checkpoint),
	        T_(test_concurrent_checkpoints),
	        T_(test_write_error_fails_commit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
