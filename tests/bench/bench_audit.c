/*
 * bench_audit: the audit store, in process, on real SQLite files in a temporary directory.
 *
 *   write    --packets normal packets (four transitions, SUBMITTED -> READY -> RUNNING ->
 *            COMPLETED, and a two-entry allocation list) queued through the audit writer as
 *            the daemon queues them (at most two chunks of CHUNK_PACKETS queued at a time, so
 *            nodes are recycled as in a running daemon), timed from the first record to the
 *            acknowledgement of a flush behind the last. Baseline: the same audit without
 *            the hash chain and with nobody reading. Measured: with the chain while a reader
 *            thread runs history queries (a context and time range, then one packet's events)
 *            --read-rate times a second (default 200) the whole time. Each variant runs
 *            --rounds times (default 3), interleaved; the best run counts (the one least
 *            disturbed by the rest of the machine). Prints records/s and the ratio (target >=
 *            0.8), and the chain alone.
 *   acked    --acked packets submitted one at a time as bench_submit's single client does: the
 *            SUBMITTED record with an acknowledgement, waited for, then READY, RUNNING and
 *            COMPLETED without one; microseconds per packet on the file and on the null sink
 *            (gpuschedd --bench-null-audit's), interleaved --rounds times: what one commit
 *            costs an unbatched client, without the transport's noise.
 *   bytes    the file's size per packet after the write (pages in use / packets), with and
 *            without the chain (target < 512 B with it).
 *   history  --rows packets (four events each) bulk-loaded into a fresh file with the daemon's
 *            schema, then --queries random reads through the daemon's own readers: a tenant's
 *            packets of one context in a one-second window, a tenant's packets in one state,
 *            and "explain" (one packet's row and its events). Prints p50/p99 in ms (target
 *            p99 <= 50 ms at 10 million rows: --rows 10000000).
 *
 * Bounded: fixed counts, and --seconds caps each write run. With --json, one JSON object per
 * measurement on stdout and the table on stderr.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "audit/audit.h"

/* Packets queued between two flushes of the write run (five records each). */
#define CHUNK_PACKETS 512

typedef struct options {
	uint32_t read_rate; /* history reads per second while writing */
	uint32_t rounds;    /* runs of each write variant */
	uint64_t packets;
	uint64_t rows;
	uint32_t queries;
	uint64_t acked; /* --acked: packets of the acknowledged run */
	double seconds;
	bool json;
	const char *only; /* --only: one part (write, acked, history) */
} options;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- acknowledgements ---- */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t acks; /* flushes acknowledged */
} g_ack = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void on_flush(void *arg, bool ok)
{
	(void)arg;
	(void)ok;
	pthread_mutex_lock(&g_ack.mu);
	g_ack.acks++;
	pthread_cond_signal(&g_ack.cv);
	pthread_mutex_unlock(&g_ack.mu);
}

/* Waits until `want` flushes are acknowledged, at most 300 s. */
static bool wait_flush(uint64_t want)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 300;
	pthread_mutex_lock(&g_ack.mu);
	int rc = 0;
	while (g_ack.acks < want && rc == 0)
		rc = pthread_cond_timedwait(&g_ack.cv, &g_ack.mu, &dl);
	bool done = g_ack.acks >= want;
	pthread_mutex_unlock(&g_ack.mu);
	return done;
}

/* ---- readers ---- */

typedef struct reader {
	const char *path;
	uint32_t rate;
	atomic_bool stop;
	uint64_t reads;
	pthread_t th;
} reader;

static void *reader_main(void *arg)
{
	reader *r = arg;
	char err[256];
	uint64_t i = 0;
	while (!atomic_load(&r->stop)) {
		gsd_history_filter f = {.tenant = "tenant-a",
		                        .node = -1,
		                        .context = 1 + i % 16,
		                        .since_ns = 1,
		                        .until_ns = UINT64_MAX / 2,
		                        .limit = 100};
		gsd_history_result h;
		if (gsd_history_packets(r->path, &f, &h, err, sizeof err) == 0) {
			if (h.count) {
				gsd_event_row *ev;
				size_t n;
				if (gsd_history_events(r->path, "tenant-a", h.rows[0].rec.packet,
				                       &ev, &n, err, sizeof err) == 0)
					free(ev);
			}
			gsd_history_result_free(&h);
		}
		r->reads++;
		i++;
		/* Paced: a reader that never pauses is a benchmark of the CPU, not of readers. */
		struct timespec ts = {0, (long)(1000000000ull / (r->rate ? r->rate : 1))};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Removes an SQLite file and its WAL and shared-memory files, after closing the history
 * readers' pooled connections to it. */
static void remove_db(const char *path)
{
	static const char *const suffix[] = {"", "-wal", "-shm"};
	char p[300];
	gsd_history_release(path);
	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		snprintf(p, sizeof p, "%s%s", path, suffix[i]);
		unlink(p);
	}
}

/* ---- write ---- */

typedef struct write_result {
	double records_per_s;
	uint64_t records;
	double bytes_per_packet;
	uint64_t reads;
} write_result;

static uint64_t file_bytes(const char *path)
{
	sqlite3 *db;
	uint64_t bytes = 0;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
		sqlite3_stmt *s;
		if (sqlite3_prepare_v2(db,
		                       "SELECT (page_count - freelist_count) * page_size FROM "
		                       "pragma_page_count, pragma_freelist_count, pragma_page_size",
		                       -1, &s, NULL) == SQLITE_OK) {
			if (sqlite3_step(s) == SQLITE_ROW)
				bytes = (uint64_t)sqlite3_column_int64(s, 0);
			sqlite3_finalize(s);
		}
	}
	sqlite3_close(db);
	return bytes;
}

static int run_write(const options *o, const char *dir, int variant, bool chain, bool readers,
                     write_result *out)
{
	char path[256];
	snprintf(path, sizeof path, "%s/write-%d.db", dir, variant);
	gsd_audit_options ao = {.no_chain = !chain};
	gsd_audit *a;
	if (gsd_audit_open(path, &ao, &a) != 0)
		return -1;
	uint64_t empty = file_bytes(path);
	reader rd = {.path = path, .rate = o->read_rate};
	if (readers)
		pthread_create(&rd.th, NULL, reader_main, &rd);

	static const int states[] = {1, 2, 3, 4}; /* SUBMITTED, READY, RUNNING, COMPLETED */
	uint64_t records = 0, p, flushes;
	pthread_mutex_lock(&g_ack.mu);
	flushes = g_ack.acks;
	pthread_mutex_unlock(&g_ack.mu);
	double t0 = now_s();
	for (p = 1; p <= o->packets && now_s() - t0 < o->seconds; p++) {
		gsd_packet_rec r = {.packet = p,
		                    .tenant = p % 2 ? "tenant-a" : "tenant-b",
		                    .device = 1 + p % 4,
		                    .context = 1 + p % 16,
		                    .adapter = 0,
		                    .node = (uint32_t)(p % 3),
		                    .fence = p,
		                    .submit_flags = 0x8,
		                    .dma_size = 64,
		                    .allocation_count = 2,
		                    .submitted_ns = 1000000 + p * 1000};
		uint64_t allocs[2] = {p % 100, 100 + p % 100};
		bool w[2] = {true, false};
		for (int k = 0; k < 4; k++) {
			r.state = states[k];
			r.ready_ns = k >= 1 ? r.submitted_ns + 10 : 0;
			r.started_ns = k >= 2 ? r.submitted_ns + 20 : 0;
			r.completed_ns = k >= 3 ? r.submitted_ns + 30 : 0;
			r.event_ns = r.submitted_ns + 10 * (uint64_t)k;
			if (k == 0) /* with its allocation list */
				gsd_audit_submitted(a, &r, NULL, allocs, w, 2, NULL, NULL);
			else
				gsd_audit_packet(a, &r, NULL, NULL, NULL);
			records++;
		}
		/* Paced like a daemon's loop: at most two chunks queued, so the queue's nodes
		 * are recycled and the producer does not compete with the writer for CPU by
		 * faulting in memory for a backlog of the whole run. */
		if (p % CHUNK_PACKETS == 0) {
			gsd_audit_flush(a, on_flush, NULL);
			if (!wait_flush(++flushes - 1))
				break;
		}
	}
	gsd_audit_flush(a, on_flush, NULL);
	bool ok = wait_flush(++flushes);
	double dt = now_s() - t0;
	if (readers) {
		atomic_store(&rd.stop, true);
		pthread_join(rd.th, NULL);
	}
	gsd_audit_close(a);
	out->records = records;
	out->records_per_s = records / dt;
	out->bytes_per_packet = (double)(file_bytes(path) - empty) / (double)(p - 1);
	out->reads = rd.reads;
	remove_db(path);
	return ok ? 0 : -1;
}

/* ---- acknowledged, one at a time ---- */

/*
 * The daemon's unbatched submit (bench_submit's NullRendering NOP), as the audit sees it: each
 * packet's SUBMITTED record carries an acknowledgement and the producer waits for it, as a
 * client waits for its answer; then READY, RUNNING and COMPLETED follow without one, and ride
 * along with the next packet's commit. The figure is microseconds per packet, on the real
 * file and on the null sink (gpuschedd --bench-null-audit), so the difference is what the
 * commit itself costs an unbatched client.
 */
static int run_acked(const options *o, const char *dir, bool null_sink, double *us_per_packet)
{
	char path[256];
	snprintf(path, sizeof path, "%s/acked-%d.db", dir, null_sink);
	gsd_audit_options ao = {.null_sink = null_sink};
	gsd_audit *a;
	if (gsd_audit_open(path, &ao, &a) != 0)
		return -1;
	uint64_t acks;
	pthread_mutex_lock(&g_ack.mu);
	acks = g_ack.acks;
	pthread_mutex_unlock(&g_ack.mu);
	bool ok = true;
	uint64_t p;
	double t0 = now_s();
	for (p = 1; ok && p <= o->acked && now_s() - t0 < o->seconds; p++) {
		gsd_packet_rec r = {.packet = p,
		                    .tenant = "tenant-a",
		                    .device = 1,
		                    .context = 1,
		                    .fence = p,
		                    .submit_flags = 0x8,
		                    .dma_size = 16,
		                    .state = 1,
		                    .submitted_ns = 1000000 + p * 1000};
		gsd_audit_packet(a, &r, NULL, on_flush, NULL);
		ok = wait_flush(++acks);
		for (int k = 2; k <= 4; k++) {
			r.state = k;
			r.ready_ns = r.submitted_ns + 10;
			r.started_ns = k >= 3 ? r.submitted_ns + 20 : 0;
			r.completed_ns = k >= 4 ? r.submitted_ns + 30 : 0;
			gsd_audit_packet(a, &r, NULL, NULL, NULL);
		}
	}
	double dt = now_s() - t0;
	gsd_audit_close(a);
	remove_db(path);
	*us_per_packet = p > 1 ? dt * 1e6 / (double)(p - 1) : 0;
	return ok ? 0 : -1;
}

/* ---- history at scale ---- */

static int bulk_load(sqlite3 *db, uint64_t rows)
{
	char sql[2048];
	snprintf(sql, sizeof sql,
	         "BEGIN;"
	         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %" PRIu64
	         ")"
	         " INSERT INTO packets SELECT i, 'tenant-' || (i %% 8), 1 + i %% 64, 1 + i %% 512,"
	         " 0, i %% 3, i, 8, 0, 64, 2, 0, CASE WHEN i %% 100 = 0 THEN 5 ELSE 4 END,"
	         " 'COMPLETED', 1000000000 + i * 1000, 1000000000 + i * 1000 + 10,"
	         " 1000000000 + i * 1000 + 20, 1000000000 + i * 1000 + 30, 0, 0, NULL FROM n;"
	         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %" PRIu64
	         ")"
	         " INSERT INTO packet_events (seq, packet, state, time_ns)"
	         " SELECT 4 * (i - 1) + k, i, k, 1000000000 + i * 1000 + k FROM n, (SELECT 1 AS k "
	         "UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL"
	         " SELECT 4);"
	         "COMMIT;",
	         rows, rows);
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fprintf(stderr, "bench_audit: bulk load: %s\n", err ? err : "?");
	sqlite3_free(err);
	return rc == SQLITE_OK ? 0 : -1;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

typedef struct lat {
	const char *name;
	double p50_ms, p99_ms;
	size_t rows_seen;
} lat;

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int run_history(const options *o, const char *dir, lat out[3])
{
	char path[256];
	snprintf(path, sizeof path, "%s/history.db", dir);
	gsd_audit *a;
	if (gsd_audit_open(path, NULL, &a) != 0) /* the daemon's schema and indexes */
		return -1;
	gsd_audit_close(a);
	sqlite3 *db;
	if (sqlite3_open(path, &db) != SQLITE_OK)
		return -1;
	sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF", NULL, NULL, NULL);
	double t0 = now_s();
	int rc = bulk_load(db, o->rows);
	sqlite3_close(db);
	if (rc != 0)
		return -1;
	fprintf(stderr, "bench_audit: loaded %" PRIu64 " packets (%" PRIu64 " events) in %.1f s\n",
	        o->rows, o->rows * 4, now_s() - t0);

	double *t = calloc(o->queries, sizeof *t);
	if (!t)
		return -1;
	uint64_t seed = 42;
	char err[256];
	for (int kind = 0; kind < 3; kind++) {
		size_t seen = 0;
		for (uint32_t q = 0; q < o->queries; q++) {
			uint64_t i = 1 + rnd(&seed) % o->rows;
			double s = now_s();
			if (kind < 2) {
				/* A one-second window of one context (it holds about 1000/512 of
				 * its packets), or one tenant's FAULTED packets (1 in 100, newest
				 * first). */
				gsd_history_filter f = {.tenant =
				                                kind == 0 ? "tenant-1" : "tenant-4",
				                        .node = -1,
				                        .limit = 100};
				if (kind == 0) {
					f.context = 1 + i % 512;
					f.since_ns = 1000000000 + i * 1000;
					f.until_ns = f.since_ns + 1000000000;
				} else {
					f.state = 5;
					f.before_packet = i;
				}
				gsd_history_result h;
				if (gsd_history_packets(path, &f, &h, err, sizeof err) != 0) {
					fprintf(stderr, "bench_audit: %s\n", err);
					free(t);
					return -1;
				}
				seen += h.count;
				gsd_history_result_free(&h);
			} else {
				gsd_packet_rec r;
				gsd_event_row *ev;
				size_t n = 0;
				char tenant[16];
				snprintf(tenant, sizeof tenant, "tenant-%" PRIu64, i % 8);
				if (gsd_history_packet(path, tenant, i, &r, err, sizeof err) != 1 ||
				    gsd_history_events(path, tenant, i, &ev, &n, err, sizeof err) !=
				            0) {
					fprintf(stderr, "bench_audit: explain %" PRIu64 ": %s\n", i,
					        err);
					free(t);
					return -1;
				}
				seen += n;
				free(ev);
			}
			t[q] = (now_s() - s) * 1e3;
		}
		qsort(t, o->queries, sizeof *t, cmp_double);
		static const char *const names[] = {"context + 1 s window", "tenant + state",
		                                    "explain (row + events)"};
		out[kind] = (lat){names[kind], t[o->queries / 2], t[o->queries * 99 / 100], seen};
	}
	free(t);
	remove_db(path);
	return 0;
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fprintf(f, "Usage: bench_audit [--packets N] [--rows N] [--queries N] [--seconds S] "
	           "[--rounds N]"
	           " [--json]\n"
	           "Audit write throughput with the hash chain and readers vs without them, bytes\n"
	           "per packet, and history latency at --rows packets.\n\n"
	           "  --packets N    packets per write run (default 100000)\n"
	           "  --rows N       packets bulk-loaded for the history reads (default 1000000;\n"
	           "                 the target is stated at 10000000)\n"
	           "  --queries N    reads per query kind (default 300)\n"
	           "  --seconds S    cap on each write run (default 60)\n"
	           "  --read-rate N  history reads per second during the write (default 200)\n"
	           "  --rounds N     runs of each write variant, interleaved; the best counts\n"
	           "                 (default 3)\n"
	           "  --acked N      packets of the acknowledged run (default 20000)\n"
	           "  --only PART    run one part: write, acked or history\n"
	           "  --json         one JSON object per measurement on stdout, table on stderr\n"
	           "  -h, --help     show this help\n");
}

int main(int argc, char **argv)
{
	options o = {.packets = 100000,
	             .rows = 1000000,
	             .queries = 300,
	             .seconds = 60,
	             .read_rate = 200,
	             .rounds = 3,
	             .acked = 20000};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--json")) {
			o.json = true;
		} else if (i + 1 < argc && !strcmp(a, "--packets")) {
			o.packets = strtoull(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(a, "--rows")) {
			o.rows = strtoull(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(a, "--queries")) {
			o.queries = (uint32_t)strtoul(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(a, "--rounds")) {
			o.rounds = (uint32_t)strtoul(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(a, "--read-rate")) {
			o.read_rate = (uint32_t)strtoul(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(a, "--acked")) {
			o.acked = strtoull(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(a, "--only")) {
			o.only = argv[++i];
		} else if (i + 1 < argc && !strcmp(a, "--seconds")) {
			o.seconds = strtod(argv[++i], NULL);
		} else {
			usage(stderr);
			return 2;
		}
	}
	bool do_write = !o.only || !strcmp(o.only, "write");
	bool do_acked = !o.only || !strcmp(o.only, "acked");
	bool do_history = !o.only || !strcmp(o.only, "history");
	if (!o.packets || !o.rows || !o.queries || o.seconds <= 0 || !o.read_rate || !o.rounds ||
	    o.rounds > 20 || !o.acked || !(do_write || do_acked || do_history)) {
		usage(stderr);
		return 2;
	}
	char dir[] = "/tmp/bench-audit-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}

	/* Interleaved: base, chain+readers, chain alone, --rounds times; the best of each counts.
	 */
	write_result best[3] = {{0}}, r;
	for (uint32_t round = 0; do_write && round < o.rounds; round++)
		for (int v = 0; v < 3; v++) {
			if (run_write(&o, dir, v, v != 0, v == 1, &r) != 0) {
				fprintf(stderr, "bench_audit: write run failed\n");
				return 1;
			}
			if (r.records_per_s > best[v].records_per_s)
				best[v] = r;
		}
	/* Acknowledged: null sink, then the file, --rounds times; each round's ratio counts. */
	double acked_us[2] = {0, 0}, ratio_lo = 0, ratio_hi = 0;
	for (uint32_t round = 0; do_acked && round < o.rounds; round++) {
		double us[2];
		for (int v = 0; v < 2; v++) {
			if (run_acked(&o, dir, v == 0, &us[v]) != 0) {
				fprintf(stderr, "bench_audit: acknowledged run failed\n");
				return 1;
			}
			if (round == 0 || us[v] < acked_us[v])
				acked_us[v] = us[v];
		}
		double q = us[0] / us[1];
		ratio_lo = round == 0 || q < ratio_lo ? q : ratio_lo;
		ratio_hi = round == 0 || q > ratio_hi ? q : ratio_hi;
	}
	lat h[3];
	if (do_history && run_history(&o, dir, h) != 0)
		return 1;
	rmdir(dir);

	FILE *t = o.json ? stderr : stdout;
	double ratio = best[1].records_per_s / best[0].records_per_s;
	double chain_only = best[2].records_per_s / best[0].records_per_s;
	if (do_write) {
		fprintf(t,
		        "audit write, %" PRIu64 " packets (%" PRIu64 " records), best of %" PRIu32
		        ":\n",
		        o.packets, best[0].records, o.rounds);
		fprintf(t, "  no chain, no readers        %10.0f records/s  %6.0f B/packet\n",
		        best[0].records_per_s, best[0].bytes_per_packet);
		fprintf(t,
		        "  chain, history readers      %10.0f records/s  %6.0f B/packet  (%" PRIu64
		        " reads, %u/s)\n",
		        best[1].records_per_s, best[1].bytes_per_packet, best[1].reads,
		        o.read_rate);
		fprintf(t, "  chain alone                 %10.0f records/s\n",
		        best[2].records_per_s);
		fprintf(t, "  ratio chain+readers / base  %10.2f  (target >= 0.8)\n", ratio);
		fprintf(t, "  ratio chain alone / base    %10.2f\n", chain_only);
		fprintf(t, "  bytes per packet with chain %10.0f  (target < 512)\n",
		        best[1].bytes_per_packet);
	}
	if (do_acked) {
		fprintf(t,
		        "acknowledged SUBMITTED one at a time, %" PRIu64 " packets, %" PRIu32
		        " rounds:\n",
		        o.acked, o.rounds);
		fprintf(t, "  null sink                   %10.1f us/packet (best)\n", acked_us[0]);
		fprintf(t, "  SQLite file                 %10.1f us/packet (best)\n", acked_us[1]);
		fprintf(t, "  commit cost                 %10.1f us/packet\n",
		        acked_us[1] - acked_us[0]);
		fprintf(t, "  ratio null / file per round %.2f-%.2f\n", ratio_lo, ratio_hi);
	}
	if (do_history) {
		fprintf(t, "history at %" PRIu64 " packets, %u reads each:\n", o.rows, o.queries);
		for (int k = 0; k < 3; k++)
			fprintf(t, "  %-24s p50 %7.3f ms  p99 %7.3f ms  (%zu rows)\n", h[k].name,
			        h[k].p50_ms, h[k].p99_ms, h[k].rows_seen);
	}
	if (o.json && do_write)
		printf("{\"bench\":\"audit_write\",\"packets\":%" PRIu64
		       ",\"base_records_per_s\":%.0f,"
		       "\"chain_readers_records_per_s\":%.0f,\"chain_records_per_s\":%.0f,"
		       "\"ratio\":%.3f,\"chain_ratio\":%.3f,\"bytes_per_packet\":%.0f,"
		       "\"bytes_per_packet_no_chain\":%.0f}\n",
		       o.packets, best[0].records_per_s, best[1].records_per_s,
		       best[2].records_per_s, ratio, chain_only, best[1].bytes_per_packet,
		       best[0].bytes_per_packet);
	if (o.json && do_acked)
		printf("{\"bench\":\"audit_acked\",\"packets\":%" PRIu64
		       ",\"null_us\":%.2f,\"file_us\":%.2f,\"ratio_min\":%.3f,"
		       "\"ratio_max\":%.3f}\n",
		       o.acked, acked_us[0], acked_us[1], ratio_lo, ratio_hi);
	for (int k = 0; o.json && do_history && k < 3; k++)
		printf("{\"bench\":\"history\",\"rows\":%" PRIu64 ",\"query\":\"%s\","
		       "\"p50_ms\":%.3f,\"p99_ms\":%.3f}\n",
		       o.rows, h[k].name, h[k].p50_ms, h[k].p99_ms);
	return 0;
}
