/*
 * bench_batch: batched submission through the daemon, audited, against raw SQLite inserts of
 * the same rows into the same schema, in the same run.
 *
 *   raw     a fresh file with the audit's schema (schema/audit.sql), WAL and synchronous
 *           NORMAL as the daemon sets them; per batch of --batch packets, one transaction
 *           inserting each packet's row (what the daemon commits before it answers), then
 *           one updating each row to COMPLETED (what it commits after), the rows of schema 8
 *           (the baseline of the ratio); and the same with the rows of schema 7 (each
 *           state change also an event row) for comparison. No hash chain, no daemon.
 *   daemon  one client sending SubmitBatch requests of --batch NullRendering NOPs (each packet
 *           then goes through the same four states), then one more submission whose answer
 *           means every record before it is committed.
 *
 * Each runs --batches batches (bounded by --seconds); the figure is packets per second and the
 * ratio daemon / raw new rows (target >= 0.8: auditing is the limit; and >= 40,000 packets/s). With
 * --json, one JSON object on stdout (the table goes to stderr).
 */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

static struct {
	uint32_t batches, batch;
	double seconds;
	bool json;
} opt = {400, 64, 20, false};

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = '\0';
	fclose(f);
	return s;
}

static bool step(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE;
}

/* The statements of one raw run. */
struct raw_stmts {
	sqlite3_stmt *ins, *upd, *ev;
};

/*
 * One batch of the old rows (schema 7): each packet's row and its SUBMITTED event, committed;
 * then its READY, RUNNING and COMPLETED, an update of the row and an event row each.
 */
static bool raw_batch_v7(sqlite3 *db, const struct raw_stmts *st, uint64_t first, uint32_t n)
{
	static const char *const names[] = {"READY", "RUNNING", "COMPLETED"};
	bool ok = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	for (uint64_t id = first; ok && id < first + n; id++) {
		sqlite3_bind_int64(st->ins, 1, (int64_t)id);
		sqlite3_bind_int64(st->ins, 2, (int64_t)gs_test_mono_ns());
		sqlite3_bind_int64(st->ev, 1, (int64_t)id);
		sqlite3_bind_int64(st->ev, 2, 1);
		sqlite3_bind_int64(st->ev, 3, (int64_t)gs_test_mono_ns());
		ok = step(st->ins) && step(st->ev);
	}
	ok = ok && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK &&
	     sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	for (uint64_t p = first; ok && p < first + n; p++)
		for (int k = 0; ok && k < 3; k++) {
			sqlite3_bind_int64(st->upd, 1, (int64_t)p);
			sqlite3_bind_int64(st->upd, 2, k + 2);
			sqlite3_bind_text(st->upd, 3, names[k], -1, SQLITE_STATIC);
			sqlite3_bind_int64(st->upd, 4, (int64_t)gs_test_mono_ns());
			sqlite3_bind_int64(st->ev, 1, (int64_t)p);
			sqlite3_bind_int64(st->ev, 2, k + 2);
			sqlite3_bind_int64(st->ev, 3, (int64_t)gs_test_mono_ns());
			ok = step(st->upd) && step(st->ev);
		}
	return ok && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
}

/*
 * One batch of the new rows (schema 8): each packet's row with its client id, its SUBMITTED's
 * seq and a 16-byte link, committed; then one update of the row to COMPLETED with its times,
 * the seqs of its READY, RUNNING and COMPLETED and a new link.
 */
static bool raw_batch_v8(sqlite3 *db, const struct raw_stmts *st, uint64_t first, uint32_t n)
{
	static const uint8_t link[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	bool ok = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	for (uint64_t id = first; ok && id < first + n; id++) {
		sqlite3_bind_int64(st->ins, 1, (int64_t)id);
		sqlite3_bind_int64(st->ins, 2, (int64_t)gs_test_mono_ns());
		/* Client ids are spread over 53 bits, as the daemon's are. */
		sqlite3_bind_int64(st->ins, 3, (int64_t)((id * 0x9E3779B97F4A7C15ull) >> 11 | 1));
		sqlite3_bind_int64(st->ins, 4, (int64_t)(4 * id));
		sqlite3_bind_blob(st->ins, 5, link, sizeof link, SQLITE_STATIC);
		ok = step(st->ins);
	}
	ok = ok && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK &&
	     sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	for (uint64_t p = first; ok && p < first + n; p++) {
		sqlite3_bind_int64(st->upd, 1, (int64_t)p);
		sqlite3_bind_int64(st->upd, 2, (int64_t)gs_test_mono_ns());
		sqlite3_bind_int64(st->upd, 3, (int64_t)(4 * p + 1));
		sqlite3_bind_blob(st->upd, 4, link, sizeof link, SQLITE_STATIC);
		ok = step(st->upd);
	}
	return ok && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
}

/* Packets per second of the raw inserts of the old rows (v8 false) or the new; 0 on
 * failure. */
static double run_raw(const char *dir, bool v8, uint32_t *done)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/raw.db", dir);
	char *schema = read_file(GS_SOURCE_DIR "/schema/audit.sql");
	sqlite3 *db = NULL;
	struct raw_stmts st = {0};
	double rate = 0;
	*done = 0;
	const char *ins_sql =
	        v8 ? "INSERT INTO packets (packet, tenant, device, context, adapter, node, fence,"
	             " submit_flags, patch_flags, dma_size, allocation_count, patch_count, state,"
	             " state_name, submitted_ns, ready_ns, started_ns, completed_ns, preemptions,"
	             " resubmissions, result, id, seq, hash) VALUES (?1, 'default', 1, 2, 0, 0,"
	             " ?1, 1024, 0, 8, 0, 0, 1, 'SUBMITTED', ?2, 0, 0, 0, 0, 0, NULL, ?3, ?4, ?5)"
	           : "INSERT INTO packets (packet, tenant, device, context, adapter, node, "
	             "fence, submit_flags, patch_flags, dma_size, allocation_count, "
	             "patch_count, state, state_name, submitted_ns, ready_ns, started_ns, "
	             "completed_ns, preemptions, resubmissions, result) VALUES (?1, "
	             "'default', 1, 2, 0, 0, ?1, 1024, 0, 8, 0, 0, 1, 'SUBMITTED', ?2, 0, "
	             "0, 0, 0, 0, NULL)";
	const char *upd_sql =
	        v8 ? "UPDATE packets SET state = 4, state_name = 'COMPLETED', patch_flags = 0,"
	             " ready_ns = ?2, started_ns = ?2, completed_ns = ?2, ready_seq = ?3,"
	             " run_seq = ?3 + 1, end_seq = ?3 + 2, hash = ?4 WHERE packet = ?1"
	           : "UPDATE packets SET state = ?2, state_name = ?3, ready_ns = ?4, "
	             "started_ns = ?4, completed_ns = ?4 WHERE packet = ?1";
	if (!schema || sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL", NULL, NULL,
	                 NULL) != SQLITE_OK ||
	    sqlite3_exec(db, schema, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, ins_sql, -1, &st.ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, upd_sql, -1, &st.upd, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "INSERT INTO packet_event_rows (packet, state, time_ns, detail)"
	                       " VALUES (?1, ?2, ?3, NULL)",
	                       -1, &st.ev, NULL) != SQLITE_OK) {
		fprintf(stderr, "bench_batch: raw SQLite: %s\n",
		        db ? sqlite3_errmsg(db) : "cannot read schema/audit.sql");
		goto out;
	}
	if (!v8) /* the old schema's packets indexes, less the two on the new columns */
		sqlite3_exec(db, "DROP INDEX packets_seq; DROP INDEX packets_end_seq", NULL, NULL,
		             NULL);
	double t0 = gs_test_mono_s();
	uint64_t id = 1;
	bool ok = true;
	for (uint32_t b = 0; ok && b < opt.batches && gs_test_mono_s() - t0 < opt.seconds; b++) {
		ok = v8 ? raw_batch_v8(db, &st, id, opt.batch)
		        : raw_batch_v7(db, &st, id, opt.batch);
		id += opt.batch;
		if (ok)
			*done += opt.batch;
	}
	double took = gs_test_mono_s() - t0;
	if (!ok)
		fprintf(stderr, "bench_batch: raw SQLite: %s\n", sqlite3_errmsg(db));
	else
		rate = took > 0 ? *done / took : 0;
out:
	sqlite3_finalize(st.ins);
	sqlite3_finalize(st.upd);
	sqlite3_finalize(st.ev);
	sqlite3_close(db);
	free(schema);
	char wal[600];
	unlink(path);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	unlink(wal);
	snprintf(wal, sizeof(wal), "%s-shm", path);
	unlink(wal);
	return rate;
}

/* The daemon's CPU time per packet of the last run_daemon, in microseconds (all its threads,
 * from the first batch to the answer of the last submission). */
static double daemon_cpu_us;

/* Packets per second through the daemon; 0 on failure. */
static double run_daemon(uint32_t *done)
{
	static gs_testd d;
	static itest_config cfg;
	char json[128];
	double rate = 0;
	*done = 0;
	snprintf(json, sizeof(json), "{\"max_batch\": %u}", opt.batch);
	if (itest_config_write(&cfg, json) != 0)
		return 0;
	const char *args[] = {"--config", cfg.path, "--log-level", "warn", NULL};
	if (gs_testd_start(&d, args) != 0) {
		itest_config_cleanup(&cfg);
		return 0;
	}
	gs_client *c = NULL;
	char why[256];
	uint64_t dev = 0, ctx = 0;
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	gs_submit_desc *descs = calloc(opt.batch, sizeof(*descs));
	int rv = descs ? gs_connect_ex(d.url, NULL, &c, why, sizeof(why)) : GS_ERR_NOMEM;
	if (rv == 0)
		rv = gs_device_create(c, "batch", &dev);
	if (rv == 0) {
		gs_context_desc cd;
		gs_context_desc_init(&cd, dev, 0);
		rv = gs_context_create(c, &cd, &ctx, NULL);
	}
	if (rv == 0)
		rv = gs_dmabuf_nop(&nop);
	for (uint32_t i = 0; descs && i < opt.batch; i++)
		descs[i] = (gs_submit_desc){
		        .context = ctx, .dma = &nop, .submit_flags = GS_SUBMIT_NULL_RENDERING};
	double t0 = gs_test_mono_s();
	uint64_t cpu0 = gs_test_proc_cpu_ns(d.pid);
	for (uint32_t b = 0; rv == 0 && b < opt.batches && gs_test_mono_s() - t0 < opt.seconds;
	     b++) {
		rv = gs_submit_batch(c, descs, opt.batch, NULL);
		if (rv == 0)
			*done += opt.batch;
	}
	/* Every transition record queued before this one's SUBMITTED record is committed when it
	 * is answered (the audit is one FIFO). */
	if (rv == 0)
		rv = gs_submit(c, ctx, &nop, GS_SUBMIT_NULL_RENDERING, NULL);
	double took = gs_test_mono_s() - t0;
	daemon_cpu_us = (double)(gs_test_proc_cpu_ns(d.pid) - cpu0) / 1000.0 / (double)(*done + 1);
	if (rv != 0)
		fprintf(stderr, "bench_batch: daemon: %s (%s)\n", gs_status_name(rv),
		        c ? gs_client_message(c) : why);
	else
		rate = took > 0 ? *done / took : 0;
	gs_dmabuf_free(&nop);
	free(descs);
	if (c)
		gs_close(c);
	gs_testd_stop(&d);
	gs_testd_cleanup(&d);
	itest_config_cleanup(&cfg);
	return rate;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_batch [--batches N] [--batch K] [--seconds S] [--json]\n"
	        "SubmitBatch requests of K NullRendering NOPs (default 64) through a gpuschedd\n"
	        "with its audit on, against raw SQLite inserts of the same rows into the same\n"
	        "schema, in the same run: N batches each (default 400), at most S seconds "
	        "each\n"
	        "(default 20). Prints packets per second and the ratio (target >= 0.8).\n"
	        "Exit status: 0 when both ran, 1 otherwise, 2 usage.\n");
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			opt.json = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (v && !strcmp(a, "--batches") && atoi(v) > 0) {
			opt.batches = (uint32_t)atoi(v);
			i++;
		} else if (v && !strcmp(a, "--batch") && atoi(v) > 0 && atoi(v) <= 1024) {
			opt.batch = (uint32_t)atoi(v);
			i++;
		} else if (v && !strcmp(a, "--seconds") && atof(v) > 0) {
			opt.seconds = atof(v);
			i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	char dir[] = "/tmp/gpusched-bench-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	uint32_t raw_n = 0, raw7_n = 0, d_n = 0;
	double raw7 = run_raw(dir, false, &raw7_n);
	double raw = run_raw(dir, true, &raw_n);
	rmdir(dir);
	double daemon = run_daemon(&d_n);
	double ratio = raw > 0 ? daemon / raw : 0;
	FILE *out = opt.json ? stderr : stdout;
	fprintf(out, "bench_batch: SubmitBatch of %u, %u packets through the daemon, %u raw\n",
	        opt.batch, d_n, raw_n);
	fprintf(out, "raw SQLite, old rows (row + 4 events)      %10.0f packets/s\n", raw7);
	fprintf(out, "raw SQLite, new rows (1 insert, 1 update)  %10.0f packets/s\n", raw);
	fprintf(out,
	        "daemon, audited SubmitBatch                %10.0f packets/s"
	        " (target >= 40000)\n",
	        daemon);
	fprintf(out, "ratio daemon / raw new rows                %10.3f (target >= 0.8)\n", ratio);
	fprintf(out, "daemon CPU per packet (all its threads)    %10.1f us\n", daemon_cpu_us);
	if (opt.json)
		printf("{\"bench\": \"batch\", \"batch\": %u, \"raw_pps\": %.1f, "
		       "\"raw_old_rows_pps\": %.1f, \"daemon_pps\": %.1f, "
		       "\"ratio\": %.4f, \"daemon_cpu_us\": %.2f}\n",
		       opt.batch, raw, raw7, daemon, ratio, daemon_cpu_us);
	return raw > 0 && daemon > 0 ? 0 : 1;
}
