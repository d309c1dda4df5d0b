/*
 * bench_batch: batched submission through the daemon, audited, against raw SQLite inserts of
 * the same rows into the same schema, in the same run.
 *
 *   raw     a fresh file with the audit's schema (schema/audit.sql), WAL and synchronous
 *           NORMAL as the daemon sets them; per batch of --batch packets, one transaction
 *           inserting each packet's row and its SUBMITTED event (what the daemon commits
 *           before it answers), then one updating each row through READY, RUNNING and
 *           COMPLETED with an event each (what it commits after). No hash chain, no daemon.
 *   daemon  one client sending SubmitBatch requests of --batch NullRendering NOPs (each packet
 *           then goes through the same four states), then one more submission whose answer
 *           means every record before it is committed.
 *
 * Each runs --batches batches (bounded by --seconds); the figure is packets per second and the
 * ratio daemon / raw (target >= 0.7: auditing is the limit). With --json, one JSON object on
 * stdout (the table goes to stderr).
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

/* Packets per second of the raw inserts; 0 on failure. */
static double run_raw(const char *dir, uint32_t *done)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/raw.db", dir);
	char *schema = read_file(GS_SOURCE_DIR "/schema/audit.sql");
	sqlite3 *db = NULL;
	sqlite3_stmt *ins = NULL, *upd = NULL, *ev = NULL;
	double rate = 0;
	*done = 0;
	if (!schema || sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL", NULL, NULL,
	                 NULL) != SQLITE_OK ||
	    sqlite3_exec(db, schema, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(
	            db,
	            "INSERT INTO packets (packet, tenant, device, context, adapter, node, "
	            "fence, submit_flags, patch_flags, dma_size, allocation_count, "
	            "patch_count, state, state_name, submitted_ns, ready_ns, started_ns, "
	            "completed_ns, preemptions, resubmissions, result) VALUES (?1, "
	            "'default', 1, 2, 0, 0, ?1, 1024, 0, 8, 0, 0, 1, 'SUBMITTED', ?2, 0, "
	            "0, 0, 0, 0, NULL)",
	            -1, &ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "UPDATE packets SET state = ?2, state_name = ?3, ready_ns = ?4, "
	                       "started_ns = ?4, completed_ns = ?4 WHERE packet = ?1",
	                       -1, &upd, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "INSERT INTO packet_events (packet, state, time_ns, detail) VALUES "
	                       "(?1, ?2, ?3, NULL)",
	                       -1, &ev, NULL) != SQLITE_OK) {
		fprintf(stderr, "bench_batch: raw SQLite: %s\n",
		        db ? sqlite3_errmsg(db) : "cannot read schema/audit.sql");
		goto out;
	}
	static const char *const names[] = {"READY", "RUNNING", "COMPLETED"};
	double t0 = gs_test_mono_s();
	uint64_t id = 1;
	bool ok = true;
	for (uint32_t b = 0; ok && b < opt.batches && gs_test_mono_s() - t0 < opt.seconds; b++) {
		uint64_t first = id;
		ok = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
		for (uint32_t i = 0; ok && i < opt.batch; i++, id++) {
			sqlite3_bind_int64(ins, 1, (int64_t)id);
			sqlite3_bind_int64(ins, 2, (int64_t)gs_test_mono_ns());
			sqlite3_bind_int64(ev, 1, (int64_t)id);
			sqlite3_bind_int64(ev, 2, 1);
			sqlite3_bind_int64(ev, 3, (int64_t)gs_test_mono_ns());
			ok = step(ins) && step(ev);
		}
		ok = ok && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK &&
		     sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
		for (uint64_t p = first; ok && p < id; p++)
			for (int k = 0; ok && k < 3; k++) {
				sqlite3_bind_int64(upd, 1, (int64_t)p);
				sqlite3_bind_int64(upd, 2, k + 2);
				sqlite3_bind_text(upd, 3, names[k], -1, SQLITE_STATIC);
				sqlite3_bind_int64(upd, 4, (int64_t)gs_test_mono_ns());
				sqlite3_bind_int64(ev, 1, (int64_t)p);
				sqlite3_bind_int64(ev, 2, k + 2);
				sqlite3_bind_int64(ev, 3, (int64_t)gs_test_mono_ns());
				ok = step(upd) && step(ev);
			}
		ok = ok && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
		if (ok)
			*done += opt.batch;
	}
	double took = gs_test_mono_s() - t0;
	if (!ok)
		fprintf(stderr, "bench_batch: raw SQLite: %s\n", sqlite3_errmsg(db));
	else
		rate = took > 0 ? *done / took : 0;
out:
	sqlite3_finalize(ins);
	sqlite3_finalize(upd);
	sqlite3_finalize(ev);
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
	        "(default 20). Prints packets per second and the ratio (target >= 0.7).\n"
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
	uint32_t raw_n = 0, d_n = 0;
	double raw = run_raw(dir, &raw_n);
	rmdir(dir);
	double daemon = run_daemon(&d_n);
	double ratio = raw > 0 ? daemon / raw : 0;
	FILE *out = opt.json ? stderr : stdout;
	fprintf(out, "bench_batch: SubmitBatch of %u, %u packets through the daemon, %u raw\n",
	        opt.batch, d_n, raw_n);
	fprintf(out, "raw SQLite inserts, same rows and schema   %10.0f packets/s\n", raw);
	fprintf(out, "daemon, audited SubmitBatch                %10.0f packets/s\n", daemon);
	fprintf(out, "ratio daemon / raw                         %10.3f (target >= 0.7)\n", ratio);
	fprintf(out, "daemon CPU per packet (all its threads)    %10.1f us\n", daemon_cpu_us);
	if (opt.json)
		printf("{\"bench\": \"batch\", \"batch\": %u, \"raw_pps\": %.1f, \"daemon_pps\": "
		       "%.1f, "
		       "\"ratio\": %.4f, \"daemon_cpu_us\": %.2f}\n",
		       opt.batch, raw, daemon, ratio, daemon_cpu_us);
	return raw > 0 && daemon > 0 ? 0 : 1;
}
