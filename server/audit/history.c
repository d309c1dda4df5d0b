/*
 * History reads: any thread, each on its own read-only SQLite connection, so a large query never
 * holds up the writer; in WAL mode it sees the last committed state.
 *
 * Connections are pooled between calls: opening one parses the whole schema, which costs more
 * than a small query. A pooled connection is used again only for the same path and the same
 * file (one removed and created again is opened anew). gsd_audit_close empties the pool first
 * (gsd_history_release), so that the writer's connection is the last one and its close
 * checkpoints the WAL into the file and removes it.
 */
#include "audit/audit.h"
#include "audit/internal.h"

#include "core/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#define HISTORY_DEFAULT_LIMIT 100
#define HISTORY_MAX_LIMIT     10000
#define POOL_MAX              8 /* idle connections kept */

/* Idle connections, by the identity of their file. */
static struct {
	pthread_mutex_t mu;
	struct pooled {
		dev_t dev;
		ino_t ino;
		sqlite3 *db;
	} idle[POOL_MAX];
	size_t n;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

void gsd_history_release(const char *path)
{
	struct stat st;
	bool all = !path || stat(path, &st) != 0;
	sqlite3 *gone[POOL_MAX];
	size_t k = 0;
	pthread_mutex_lock(&pool.mu);
	for (size_t i = 0; i < pool.n;) {
		if (all || (pool.idle[i].dev == st.st_dev && pool.idle[i].ino == st.st_ino)) {
			gone[k++] = pool.idle[i].db;
			pool.idle[i] = pool.idle[--pool.n];
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&pool.mu);
	for (size_t i = 0; i < k; i++)
		sqlite3_close(gone[i]);
}

static int open_reader(const char *path, sqlite3 **db, char *err, size_t errcap)
{
	struct stat st;
	*db = NULL;
	if (stat(path, &st) == 0) {
		pthread_mutex_lock(&pool.mu);
		for (size_t i = 0; i < pool.n; i++)
			if (pool.idle[i].dev == st.st_dev && pool.idle[i].ino == st.st_ino) {
				*db = pool.idle[i].db;
				pool.idle[i] = pool.idle[--pool.n];
				break;
			}
		pthread_mutex_unlock(&pool.mu);
	}
	if (*db)
		return 0;
	int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		gsd_audit_set_err(err, errcap, "cannot open audit %s: %s", path,
		                  *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
		sqlite3_close(*db);
		*db = NULL;
		return -1;
	}
	sqlite3_busy_timeout(*db, GSD_AUDIT_BUSY_TIMEOUT_MS);
	return 0;
}

/* Done with a connection from open_reader: back to the pool (any transaction a failed read
 * left is ended), or closed when the pool is full or its file is gone. */
static void close_reader(sqlite3 *db)
{
	const char *path = sqlite3_db_filename(db, "main");
	struct stat st;
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	bool there = path && path[0] && stat(path, &st) == 0;
	pthread_mutex_lock(&pool.mu);
	bool kept = there && pool.n < POOL_MAX;
	if (kept)
		pool.idle[pool.n++] = (struct pooled){st.st_dev, st.st_ino, db};
	pthread_mutex_unlock(&pool.mu);
	if (!kept)
		sqlite3_close(db);
}

/* The tenant every read is scoped to must be named; the row limit is clamped. Then a read-only
 * connection. Returns 0, or -1 with err filled. */
static int begin_read(const char *path, const char *tenant, uint32_t limit_in, uint32_t *limit,
                      sqlite3 **db, char *err, size_t errcap)
{
	if (!tenant || !tenant[0]) {
		gsd_audit_set_err(err, errcap, "history needs a tenant");
		return -1;
	}
	*limit = limit_in ? limit_in : HISTORY_DEFAULT_LIMIT;
	if (*limit > HISTORY_MAX_LIMIT)
		*limit = HISTORY_MAX_LIMIT;
	return open_reader(path, db, err, errcap);
}

static uint64_t col_u64(sqlite3_stmt *s, int i)
{
	return (uint64_t)sqlite3_column_int64(s, i);
}

static uint32_t col_u32(sqlite3_stmt *s, int i)
{
	return (uint32_t)sqlite3_column_int64(s, i);
}

/*
 * Steps a prepared query to its end (or `limit` rows), appending each row (row_size bytes,
 * filled by `read`) to an array grown as rows come, and finalises it. Returns 0 with *out
 * malloc'd (NULL when no row), or -1 with err filled ("<what> query failed: ...").
 */
typedef void (*row_reader)(sqlite3_stmt *s, void *row);

static int collect_rows(sqlite3 *db, sqlite3_stmt *s, size_t row_size, uint32_t limit,
                        row_reader read, const char *what, void **out, size_t *count, char *err,
                        size_t errcap)
{
	char *rows = NULL;
	size_t n = 0, cap = 0;
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW && n < limit) {
		char *r = gsd_grow(rows, &cap, n + 1, row_size, 16);
		if (!r) {
			gsd_audit_set_err(err, errcap, "out of memory reading %s", what);
			goto fail;
		}
		rows = r;
		read(s, rows + n++ * row_size);
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		gsd_audit_set_err(err, errcap, "%s query failed: %s", what, sqlite3_errmsg(db));
		goto fail;
	}
	sqlite3_finalize(s);
	*out = rows;
	*count = n;
	return 0;
fail:
	free(rows);
	sqlite3_finalize(s);
	return -1;
}

/* Prepares sql on db; on failure fills err, closes db and returns NULL. */
static sqlite3_stmt *prepare_or_close(sqlite3 *db, const char *sql, const char *what, char *err,
                                      size_t errcap)
{
	sqlite3_stmt *s = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK)
		return s;
	gsd_audit_set_err(err, errcap, "%s query failed: %s", what, sqlite3_errmsg(db));
	close_reader(db);
	return NULL;
}

/* A growable byte store for the strings of a history result; offsets survive reallocation. */
struct strbuf {
	char *data;
	size_t len, cap;
};

#define NO_STRING SIZE_MAX

static size_t strbuf_add(struct strbuf *b, const unsigned char *s, int n)
{
	if (!s)
		return NO_STRING;
	size_t need = b->len + (size_t)n + 1;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < need)
			cap *= 2;
		char *d = realloc(b->data, cap);
		if (!d)
			return NO_STRING - 1;
		b->data = d;
		b->cap = cap;
	}
	size_t off = b->len;
	memcpy(b->data + off, s, (size_t)n);
	b->data[off + (size_t)n] = '\0';
	b->len = need;
	return off;
}

static const char packet_select[] =
        "SELECT packet, tenant, device, context, adapter, node, fence, submit_flags, patch_flags,"
        " dma_size, allocation_count, patch_count, state, submitted_ns, ready_ns, started_ns,"
        " completed_ns, preemptions, resubmissions, result,"
        /* What its DISPATCH commands ran: the SUBMITTED event's detail (kept in the row, or
         * one index seek). */
        " CASE WHEN seq <> 0 THEN CASE WHEN submit_detail LIKE 'DISPATCH %' THEN"
        " submit_detail END ELSE (SELECT detail FROM packet_event_rows e WHERE"
        " e.packet = packets.packet AND e.state = 1 AND e.detail LIKE 'DISPATCH %' LIMIT 1)"
        " END FROM packets WHERE tenant = ?1";

/* Packets that listed the allocation, and the paging packets that moved it; both subqueries
 * read one range of their (..., allocation, packet) index (the outer query keeps the tenant's
 * own packets). */
static const char allocation_clause[] =
        " AND packet IN (SELECT packet FROM packet_allocations WHERE allocation = ?8"
        " UNION SELECT packet FROM moves WHERE tenant = ?1"
        " AND allocation = ?8 AND packet <> 0)";
/* Paging (0x1) or ContextSwitch (0x40): the memory manager's own packets. */
static const char paging_clause[] = " AND (submit_flags & 65) <> 0";

/*
 * A cursor is a packet of the tenant queried; its place in submission order is (its
 * submitted_ns, its id). Any other cursor (another tenant's packet, a made-up id, one pruned
 * by retention) has no place: before it is nothing, after it is everything. (It used to be the
 * nearest id below; with opaque wire ids a made-up cursor is a random id of the file, and
 * where it fell among the caller's own packets told how fast everybody submitted.)
 */
#define CURSOR_TIME(p) "(SELECT submitted_ns FROM packets WHERE packet = " p " AND tenant = ?1)"
static const char before_clause[] = " AND (submitted_ns, packet) < (" CURSOR_TIME("?6") ", ?6)";
static const char after_clause[] =
        " AND (submitted_ns, packet) > (IFNULL(" CURSOR_TIME("?13") ", -1), ?13)";

/*
 * The query names only the filters in use, so SQLite picks the index that matches them (a
 * "?2 = 0 OR context = ?2" form would defeat the (tenant, context, submitted_ns) index). The text
 * is built from fixed pieces only; every value is a bound parameter.
 */
void gsd_history_query_sql(const gsd_history_filter *f, char *sql, size_t cap)
{
	const char *dir = f->oldest_first ? "ASC" : "DESC";
	snprintf(sql, cap,
	         "%s%s%s%s%s%s%s%s%s%s%s%s%s ORDER BY submitted_ns %s, packet %s LIMIT ?7",
	         packet_select, f->context ? " AND context = ?2" : "",
	         f->device ? " AND device = ?3" : "", f->state ? " AND state = ?4" : "",
	         f->node >= 0 ? " AND node = ?5" : "", f->before_packet ? before_clause : "",
	         f->after_packet ? after_clause : "", f->allocation ? allocation_clause : "",
	         f->paging ? paging_clause : "", f->since_ns ? " AND submitted_ns >= ?9" : "",
	         f->until_ns ? " AND submitted_ns < ?10" : "",
	         f->flags_mask ? " AND (submit_flags & ?11) <> 0" : "",
	         f->fence ? " AND fence = ?12" : "", dir, dir);
}

/* A bound from the wire: values from 2^63 up (negative in SQLite's signed INTEGER) are as far as
 * any stored value can be, so they bound nothing rather than everything. */
static void bind_bound(sqlite3_stmt *s, int i, uint64_t v)
{
	sqlite3_bind_int64(s, i, v > INT64_MAX ? INT64_MAX : (sqlite3_int64)v);
}

_Static_assert(sizeof packet_select + sizeof allocation_clause + sizeof paging_clause +
                               sizeof before_clause + sizeof after_clause + 512 <=
                       GSD_HISTORY_SQL_MAX,
               "GSD_HISTORY_SQL_MAX holds every filter");

static void read_packet_row(sqlite3_stmt *s, gsd_packet_rec *r)
{
	memset(r, 0, sizeof *r);
	r->packet = col_u64(s, 0);
	r->device = col_u64(s, 2);
	r->context = col_u64(s, 3);
	r->adapter = col_u32(s, 4);
	r->node = col_u32(s, 5);
	r->fence = col_u64(s, 6);
	r->submit_flags = col_u32(s, 7);
	r->patch_flags = col_u32(s, 8);
	r->dma_size = col_u32(s, 9);
	r->allocation_count = col_u32(s, 10);
	r->patch_count = col_u32(s, 11);
	r->state = sqlite3_column_int(s, 12);
	r->submitted_ns = col_u64(s, 13);
	r->ready_ns = col_u64(s, 14);
	r->started_ns = col_u64(s, 15);
	r->completed_ns = col_u64(s, 16);
	r->preemptions = col_u32(s, 17);
	r->resubmissions = col_u32(s, 18);
}

int gsd_history_packets(const char *path, const gsd_history_filter *f, gsd_history_result *out,
                        char *err, size_t errcap)
{
	memset(out, 0, sizeof *out);
	uint32_t limit;
	sqlite3 *db;
	if (begin_read(path, f ? f->tenant : NULL, f ? f->limit : 0, &limit, &db, err, errcap) != 0)
		return -1;

	char sql[GSD_HISTORY_SQL_MAX];
	gsd_history_query_sql(f, sql, sizeof sql);
	sqlite3_stmt *s = NULL;
	gsd_history_row *rows = NULL;
	size_t *offs = NULL; /* tenant, result and dispatches offsets of each row, into strings */
	struct strbuf strings = {0};
	size_t count = 0;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		goto sql_fail;
	sqlite3_bind_text(s, 1, f->tenant, -1, SQLITE_STATIC);
	gsd_audit_bind_u64(s, 2, f->context);
	gsd_audit_bind_u64(s, 3, f->device);
	sqlite3_bind_int(s, 4, f->state);
	sqlite3_bind_int(s, 5, f->node);
	bind_bound(s, 6, f->before_packet);
	sqlite3_bind_int64(s, 7, limit);
	gsd_audit_bind_u64(s, 8, f->allocation);
	bind_bound(s, 9, f->since_ns);
	bind_bound(s, 10, f->until_ns);
	sqlite3_bind_int64(s, 11, f->flags_mask);
	gsd_audit_bind_u64(s, 12, f->fence);
	bind_bound(s, 13, f->after_packet);

	/* The limit bounds the rows, so allocate for it once; at most 10000 small rows. */
	rows = calloc(limit, sizeof *rows);
	offs = calloc((size_t)limit * 3, sizeof *offs);
	if (!rows || !offs)
		goto oom;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW && count < limit) {
		read_packet_row(s, &rows[count].rec);
		for (int k = 0; k < 3; k++) {
			static const int cols[3] = {1, 19, 20};
			const unsigned char *t = sqlite3_column_text(s, cols[k]);
			size_t off = strbuf_add(&strings, t, sqlite3_column_bytes(s, cols[k]));
			if (off == NO_STRING - 1)
				goto oom;
			offs[count * 3 + (size_t)k] = off;
		}
		count++;
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		goto sql_fail;
	for (size_t i = 0; i < count; i++) {
		size_t t = offs[i * 3], r = offs[i * 3 + 1], x = offs[i * 3 + 2];
		rows[i].rec.tenant = t == NO_STRING ? NULL : strings.data + t;
		rows[i].rec.result = r == NO_STRING ? NULL : strings.data + r;
		rows[i].dispatches = x == NO_STRING ? NULL : strings.data + x;
	}
	free(offs);
	sqlite3_finalize(s);
	close_reader(db);
	out->rows = rows;
	out->count = count;
	out->strings = strings.data;
	return 0;

oom:
	gsd_audit_set_err(err, errcap, "out of memory reading history");
	goto fail;
sql_fail:
	gsd_audit_set_err(err, errcap, "history query failed: %s", sqlite3_errmsg(db));
fail:
	free(rows);
	free(offs);
	free(strings.data);
	sqlite3_finalize(s);
	close_reader(db);
	return -1;
}

void gsd_history_result_free(gsd_history_result *r)
{
	if (!r)
		return;
	free(r->rows);
	free(r->strings);
	memset(r, 0, sizeof *r);
}

/* The columns read_event_row reads, of packet_events e joined with packets p. */
#define EVENT_COLUMNS "SELECT e.seq, e.packet, e.state, e.time_ns, e.detail, p.context"

static void read_event_row(sqlite3_stmt *s, void *row)
{
	gsd_event_row *e = row;
	e->seq = col_u64(s, 0);
	e->packet = col_u64(s, 1);
	e->state = sqlite3_column_int(s, 2);
	e->time_ns = col_u64(s, 3);
	e->context = col_u64(s, 5);
	const unsigned char *d = sqlite3_column_text(s, 4);
	gsd_audit_copy_text(e->detail, sizeof e->detail, d ? (const char *)d : "");
}

/*
 * The frame of the three event reads: sql selects EVENT_COLUMNS, with the
 * tenant as ?1, args as ?2.. (bind_bound) and, when `limited`, the row limit (limit_in, clamped
 * by begin_read) last; an unlimited read collects every row.
 */
static int read_events(const char *path, const char *tenant, const char *sql, const uint64_t *args,
                       int nargs, bool limited, uint32_t limit_in, gsd_event_row **out,
                       size_t *count, char *err, size_t errcap)
{
	*out = NULL;
	*count = 0;
	uint32_t limit;
	sqlite3 *db;
	if (begin_read(path, tenant, limit_in, &limit, &db, err, errcap) != 0)
		return -1;
	sqlite3_stmt *s = prepare_or_close(db, sql, "history", err, errcap);
	if (!s)
		return -1;
	sqlite3_bind_text(s, 1, tenant, -1, SQLITE_STATIC);
	for (int i = 0; i < nargs; i++)
		bind_bound(s, 2 + i, args[i]);
	if (limited)
		sqlite3_bind_int64(s, 2 + nargs, limit);
	else
		limit = UINT32_MAX;
	int rc = collect_rows(db, s, sizeof(gsd_event_row), limit, read_event_row, "history",
	                      (void **)out, count, err, errcap);
	close_reader(db);
	return rc;
}

/*
 * The events packets rows keep (schema 8) as the rows of EVENT_COLUMNS: one SELECT per kind of
 * kept event, joined by UNION ALL, the SUBMITTED narrowed by `where`, the others by
 * `where_run` (the same when NULL), in which every "%1$s" stands for that event's seq column
 * (p.seq, p.ready_seq...). Returns the length written.
 */
static size_t kept_events_sql(char *out, size_t cap, const char *where, const char *where_run)
{
	static const struct {
		const char *seq, *cols;
	} kept[] = {
	        {"p.seq", "p.seq, p.packet, 1, p.submitted_ns, p.submit_detail, p.context"},
	        {"p.ready_seq", "p.ready_seq, p.packet, 2, p.ready_ns, p.ready_detail, p.context"},
	        {"p.run_seq", "p.run_seq, p.packet, 3, IFNULL(p.run_ns, p.started_ns), NULL,"
	                      " p.context"},
	        {"p.end_seq", "p.end_seq, p.packet, p.state, p.completed_ns, NULL, p.context"},
	};
	size_t len = 0;
	for (size_t i = 0; i < sizeof kept / sizeof kept[0] && len < cap; i++) {
		char cond[512];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		snprintf(cond, sizeof cond, i && where_run ? where_run : where, kept[i].seq);
#pragma GCC diagnostic pop
		len += (size_t)snprintf(out + len, cap - len,
		                        "%sSELECT %s FROM packets p WHERE %s <> 0 AND %s",
		                        i ? " UNION ALL " : "", kept[i].cols, kept[i].seq, cond);
	}
	return len;
}

/* The event rows and the kept events, each narrowed by its condition, in seq order (and
 * limited when `limited`): the statement read_events runs. */
static void events_sql(char *out, size_t cap, const char *rows_from_where, const char *kept_where,
                       const char *kept_where_run, int limit_param)
{
	size_t len = (size_t)snprintf(out, cap, EVENT_COLUMNS " %s UNION ALL ", rows_from_where);
	if (len < cap)
		len += kept_events_sql(out + len, cap - len, kept_where, kept_where_run);
	if (len < cap && limit_param)
		snprintf(out + len, cap - len, " ORDER BY 1 LIMIT ?%d", limit_param);
	else if (len < cap)
		snprintf(out + len, cap - len, " ORDER BY 1");
}

int gsd_history_events(const char *path, const char *tenant, uint64_t packet, gsd_event_row **out,
                       size_t *count, char *err, size_t errcap)
{
	/* The packet_event_rows(packet) index holds seq, so its rows come in order; the kept
	 * events are one row's. */
	const uint64_t args[] = {packet};
	char sql[4096];
	events_sql(sql, sizeof sql,
	           "FROM packets p JOIN packet_event_rows e ON e.packet = p.packet"
	           " WHERE p.packet = ?2 AND p.tenant = ?1",
	           "p.packet = ?2 AND p.tenant = ?1", NULL, 0);
	return read_events(path, tenant, sql, args, 1, false, 0, out, count, err, errcap);
}

/* The newest seq of a packet event in the file (0: none): of the rows, and of the events
 * packets rows keep (each newest through its index). */
static uint64_t newest_event_seq(const char *path)
{
	sqlite3 *db;
	char err[8];
	if (open_reader(path, &db, err, sizeof err) != 0)
		return UINT64_MAX;
	sqlite3_stmt *s = NULL;
	uint64_t seq = UINT64_MAX;
	if (sqlite3_prepare_v2(db,
	                       "SELECT max(IFNULL((SELECT max(seq) FROM packet_event_rows), 0),"
	                       " IFNULL((SELECT max(seq) FROM packets WHERE seq <> 0), 0),"
	                       " IFNULL((SELECT max(end_seq) FROM packets WHERE end_seq <> 0), 0),"
	                       " IFNULL((SELECT max(max(ready_seq, run_seq)) FROM packets WHERE"
	                       " ready_seq <> 0 AND end_seq = 0), 0))",
	                       -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		seq = col_u64(s, 0);
	sqlite3_finalize(s);
	close_reader(db);
	return seq;
}

/*
 * The tenant's packet events with seq in (after, before), of packets submitted in [since,
 * until), in seq order, at most limit_in (clamped as every history read). Each part is read
 * through its index from `after` on: the rows by their seq (the rowid), a kept SUBMITTED by
 * packets_seq, a kept READY, RUNNING and COMPLETED by packets_end_seq (at most
 * GSD_AUDIT_FOLD_SPAN past theirs), or, while the run has not ended, by packets_open (the
 * READY at most GSD_AUDIT_FOLD_SPAN before the RUNNING). The "+" before the tenant and time columns
 * keeps the planner off the tenant's indexes, which would read every packet of the tenant or
 * window. Read in seq ranges that grow until the page is full, `before` or the file's newest event
 * is passed: a page costs the records of its range (a timeline of 200,000 packets read every packet
 * of its window for each page of 1,000: 41 s, and 13 s before schema 8; 7 s so).
 */
static int events_by_seq(const char *path, const char *tenant, uint64_t after, uint64_t before,
                         uint64_t since, uint64_t until, uint32_t limit_in, gsd_event_row **out,
                         size_t *count, char *err, size_t errcap)
{
	uint32_t want = limit_in ? limit_in : HISTORY_DEFAULT_LIMIT;
	if (want > HISTORY_MAX_LIMIT)
		want = HISTORY_MAX_LIMIT;
	uint64_t newest = newest_event_seq(path);
	uint64_t span = (uint64_t)want * 16;
	for (;;) {
		uint64_t hi = after >= UINT64_MAX - span ? UINT64_MAX : after + span + 1;
		if (hi > before)
			hi = before;
		const uint64_t args[] = {after, hi, since, until};
		char sql[4096], kept[640];
		snprintf(kept, sizeof kept,
		         "%%1$s > ?2 AND %%1$s < ?3 AND +p.tenant = ?1 AND +p.submitted_ns >= ?4"
		         " AND +p.submitted_ns < ?5 AND ((p.end_seq <> 0 AND p.end_seq > ?2 AND"
		         " p.end_seq < %llu) OR (p.ready_seq <> 0 AND p.end_seq = 0 AND"
		         " p.ready_seq > %llu AND p.ready_seq < ?3))",
		         (unsigned long long)(hi > (uint64_t)INT64_MAX - GSD_AUDIT_FOLD_SPAN
		                                      ? (uint64_t)INT64_MAX
		                                      : hi + GSD_AUDIT_FOLD_SPAN),
		         (unsigned long long)(after > GSD_AUDIT_FOLD_SPAN
		                                      ? after - GSD_AUDIT_FOLD_SPAN
		                                      : 0));
		events_sql(sql, sizeof sql,
		           "FROM packet_event_rows e JOIN packets p ON p.packet = e.packet"
		           " WHERE e.seq > ?2 AND e.seq < ?3 AND +p.tenant = ?1"
		           " AND +p.submitted_ns >= ?4 AND +p.submitted_ns < ?5",
		           "%1$s > ?2 AND %1$s < ?3 AND +p.tenant = ?1 AND +p.submitted_ns >= ?4"
		           " AND +p.submitted_ns < ?5",
		           kept, 6);
		int rc = read_events(path, tenant, sql, args, 4, true, want, out, count, err,
		                     errcap);
		if (rc != 0 || *count >= want || hi >= before || hi > newest || hi == UINT64_MAX)
			return rc;
		free(*out);
		*out = NULL;
		*count = 0;
		span = span > UINT64_MAX / 4 ? UINT64_MAX : span * 4;
	}
}

int gsd_history_events_range(const char *path, const char *tenant, uint64_t after_seq,
                             uint64_t before_seq, uint32_t limit_in, gsd_event_row **out,
                             size_t *count, char *err, size_t errcap)
{
	return events_by_seq(path, tenant, after_seq, before_seq ? before_seq : UINT64_MAX, 0,
	                     UINT64_MAX, limit_in, out, count, err, errcap);
}

int gsd_history_events_window(const char *path, const char *tenant, uint64_t after_seq,
                              uint64_t since_ns, uint64_t until_ns, uint32_t limit_in,
                              gsd_event_row **out, size_t *count, char *err, size_t errcap)
{
	return events_by_seq(path, tenant, after_seq, UINT64_MAX, since_ns,
	                     until_ns ? until_ns : UINT64_MAX, limit_in, out, count, err, errcap);
}

int gsd_history_packet(const char *path, const char *tenant, uint64_t packet, gsd_packet_rec *out,
                       char *err, size_t errcap)
{
	uint32_t limit;
	sqlite3 *db;
	memset(out, 0, sizeof *out);
	if (begin_read(path, tenant, 1, &limit, &db, err, errcap) != 0)
		return -1;
	char sql[sizeof packet_select + 32];
	snprintf(sql, sizeof sql, "%s AND packet = ?2", packet_select);
	sqlite3_stmt *s = prepare_or_close(db, sql, "history", err, errcap);
	if (!s)
		return -1;
	sqlite3_bind_text(s, 1, tenant, -1, SQLITE_STATIC);
	gsd_audit_bind_u64(s, 2, packet);
	int rc = sqlite3_step(s);
	int found = rc == SQLITE_ROW;
	if (found)
		read_packet_row(s, out);
	else if (rc != SQLITE_DONE) {
		gsd_audit_set_err(err, errcap, "history query failed: %s", sqlite3_errmsg(db));
		found = -1;
	}
	sqlite3_finalize(s);
	close_reader(db);
	return found;
}

int gsd_history_last_packet(const char *path, uint64_t *packet, char *err, size_t errcap)
{
	sqlite3 *db;
	*packet = 0;
	if (open_reader(path, &db, err, errcap) != 0)
		return -1;
	/* Paging packets share the packets' sequence, and a move may name one whose row is not
	 * (yet) in the file. */
	static const char sql[] = "SELECT MAX((SELECT IFNULL(MAX(packet), 0) FROM packets),"
	                          "     (SELECT IFNULL(MAX(packet), 0) FROM moves))";
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
		*packet = col_u64(s, 0);
		rc = SQLITE_OK;
	} else {
		gsd_audit_set_err(err, errcap, "cannot read the last packet id: %s",
		                  sqlite3_errmsg(db));
		rc = SQLITE_ERROR;
	}
	sqlite3_finalize(s);
	close_reader(db);
	return rc == SQLITE_OK ? 0 : -1;
}

int gsd_history_bans(const char *path, void (*ban)(void *arg, const char *tenant), void *arg,
                     char *err, size_t errcap)
{
	sqlite3 *db;
	if (open_reader(path, &db, err, errcap) != 0)
		return -1;
	/* Each tenant's last word: banned (by its GPU timeouts or an administrator) or not. */
	static const char sql[] =
	        "SELECT tenant FROM notes n WHERE kind = 'tenant_banned' AND tenant IS NOT NULL"
	        " AND seq = (SELECT max(seq) FROM notes m WHERE m.tenant = n.tenant AND m.kind IN"
	        " ('tenant_banned', 'tenant_unbanned'))";
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		ban(arg, (const char *)sqlite3_column_text(s, 0));
		rc = SQLITE_OK;
	}
	if (rc != SQLITE_DONE)
		gsd_audit_set_err(err, errcap, "cannot read the bans: %s", sqlite3_errmsg(db));
	sqlite3_finalize(s);
	close_reader(db);
	return rc == SQLITE_DONE ? 0 : -1;
}

int gsd_history_wire_key(const char *path, unsigned char out[GSD_AUDIT_WIRE_KEY_BYTES], char *err,
                         size_t errcap)
{
	sqlite3 *db;
	if (open_reader(path, &db, err, errcap) != 0)
		return -1;
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'wire_key'", -1, &s,
	                            NULL);
	const char *hex = NULL;
	if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
		hex = (const char *)sqlite3_column_text(s, 0);
	int ok = hex && strlen(hex) == 2 * GSD_AUDIT_WIRE_KEY_BYTES;
	for (size_t i = 0; ok && i < GSD_AUDIT_WIRE_KEY_BYTES; i++) {
		unsigned v;
		ok = sscanf(hex + 2 * i, "%2x", &v) == 1;
		out[i] = (unsigned char)v;
	}
	if (!ok)
		gsd_audit_set_err(
		        err, errcap,
		        "%s has no wire_key in meta (a daemon of schema 6 or later makes it)",
		        path);
	sqlite3_finalize(s);
	close_reader(db);
	return ok ? 0 : -1;
}

struct gsd_handle_check {
	sqlite3 *db;
	sqlite3_stmt *used;
};

int gsd_history_handles_open(const char *path, gsd_handle_check **out, uint64_t *floor, char *err,
                             size_t errcap)
{
	*out = NULL;
	*floor = 0;
	gsd_handle_check *c = calloc(1, sizeof(*c));
	if (!c) {
		gsd_audit_set_err(err, errcap, "out of memory");
		return -1;
	}
	int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		gsd_audit_set_err(err, errcap, "cannot open audit %s: %s", path,
		                  c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		gsd_history_handles_close(c);
		return -1;
	}
	sqlite3_busy_timeout(c->db, GSD_AUDIT_BUSY_TIMEOUT_MS);
	sqlite3_stmt *s = NULL;
	rc = sqlite3_prepare_v2(
	        c->db,
	        "SELECT IFNULL(MAX(CAST(value AS INTEGER)), 0) FROM meta WHERE key IN"
	        " ('chain_start_context', 'chain_start_allocation')",
	        -1, &s, NULL);
	if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
		int64_t f = sqlite3_column_int64(s, 0);
		*floor = f > 0 ? (uint64_t)f : 0;
		rc = SQLITE_OK;
	} else if (rc == SQLITE_OK) {
		rc = SQLITE_ERROR;
	}
	sqlite3_finalize(s);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v3(
		        c->db,
		        "SELECT EXISTS (SELECT 1 FROM contexts WHERE context = ?1) OR"
		        " EXISTS (SELECT 1 FROM allocations WHERE allocation = ?1)",
		        -1, SQLITE_PREPARE_PERSISTENT, &c->used, NULL);
	if (rc != SQLITE_OK) {
		gsd_audit_set_err(err, errcap, "cannot read the handles in %s: %s", path,
		                  sqlite3_errmsg(c->db));
		gsd_history_handles_close(c);
		return -1;
	}
	*out = c;
	return 0;
}

int gsd_history_handle_used(gsd_handle_check *c, uint64_t handle)
{
	if (!c)
		return 0;
	gsd_audit_bind_u64(c->used, 1, handle);
	int rc = sqlite3_step(c->used);
	int used = rc == SQLITE_ROW ? sqlite3_column_int(c->used, 0) != 0 : -1;
	/* Reset at once: a statement left open would hold its read transaction, and with it the
	 * WAL the checkpointer wants to copy back. */
	sqlite3_reset(c->used);
	return used;
}

void gsd_history_handles_close(gsd_handle_check *c)
{
	if (!c)
		return;
	sqlite3_finalize(c->used);
	sqlite3_close(c->db);
	free(c);
}

int gsd_history_tenants(const char *path, gsd_tenant_row_fn fn, void *arg, uint64_t *max_id,
                        char *err, size_t errcap)
{
	sqlite3 *db;
	*max_id = 0;
	if (open_reader(path, &db, err, errcap) != 0)
		return -1;
	sqlite3_stmt *s = prepare_or_close(db,
	                                   "SELECT id, name, token_hash, kind, share,"
	                                   " priority_ceiling, context_limit, memory_quota, admin,"
	                                   " created_ns, removed_ns, audit_name, allocation_limit,"
	                                   " max_requests_per_second, max_message, packet_limit,"
	                                   " sync_limit FROM tenants ORDER BY id",
	                                   "tenants", err, errcap);
	if (!s)
		return -1;
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		gsd_tenant_rec r = {.id = col_u64(s, 0),
		                    .tenant = (const char *)sqlite3_column_text(s, 1),
		                    .token_hash = (const char *)sqlite3_column_text(s, 2),
		                    .kind = col_u32(s, 3),
		                    .share = col_u32(s, 4),
		                    .priority_ceiling = col_u32(s, 5),
		                    .context_limit = col_u32(s, 6),
		                    .memory_quota = col_u64(s, 7),
		                    .admin = sqlite3_column_int(s, 8) != 0,
		                    .created_ns = col_u64(s, 9),
		                    .removed_ns = col_u64(s, 10),
		                    .audit_name = (const char *)sqlite3_column_text(s, 11),
		                    .allocation_limit = col_u32(s, 12),
		                    .max_requests_per_second = col_u32(s, 13),
		                    .max_message = col_u32(s, 14),
		                    .packet_limit = col_u32(s, 15),
		                    .sync_limit = col_u32(s, 16)};
		if (r.id > *max_id)
			*max_id = r.id;
		if (r.tenant && r.token_hash && r.audit_name)
			fn(arg, &r);
	}
	if (rc != SQLITE_DONE)
		gsd_audit_set_err(err, errcap, "cannot read the tenants: %s", sqlite3_errmsg(db));
	sqlite3_finalize(s);
	close_reader(db);
	return rc == SQLITE_DONE ? 0 : -1;
}

static const char moves_select[] =
        "SELECT seq, time_ns, allocation, device, adapter, packet, for_packet, kind,"
        " from_segment, from_offset, to_segment, to_offset, bytes, transfer_flags, pieces,"
        " reason FROM moves WHERE tenant = ?1";

/* Like build_packet_query: only the filters in use, every value bound. */
static void build_moves_query(const gsd_moves_filter *f, char *sql, size_t cap)
{
	snprintf(sql, cap, "%s%s%s%s%s ORDER BY seq DESC LIMIT ?6", moves_select,
	         f->allocation ? " AND allocation = ?2" : "", f->device ? " AND device = ?3" : "",
	         f->packet ? " AND (packet = ?4 OR for_packet = ?4)" : "",
	         f->before_seq ? " AND seq < ?5" : "");
}

static void read_move_row(sqlite3_stmt *s, void *row)
{
	gsd_move_row *m = row;
	memset(m, 0, sizeof *m);
	m->seq = col_u64(s, 0);
	m->rec.time_ns = col_u64(s, 1);
	m->rec.allocation = col_u64(s, 2);
	m->rec.device = col_u64(s, 3);
	m->rec.adapter = col_u32(s, 4);
	m->rec.packet = col_u64(s, 5);
	m->rec.for_packet = col_u64(s, 6);
	m->rec.kind = sqlite3_column_int(s, 7);
	m->rec.from_segment = col_u32(s, 8);
	m->rec.from_offset = col_u64(s, 9);
	m->rec.to_segment = col_u32(s, 10);
	m->rec.to_offset = col_u64(s, 11);
	m->rec.bytes = col_u64(s, 12);
	m->rec.transfer_flags = col_u32(s, 13);
	m->rec.pieces = col_u32(s, 14);
	const unsigned char *r = sqlite3_column_text(s, 15);
	gsd_audit_copy_text(m->reason, sizeof m->reason, r ? (const char *)r : "");
}

int gsd_history_moves(const char *path, const gsd_moves_filter *f, gsd_move_row **out,
                      size_t *count, char *err, size_t errcap)
{
	*out = NULL;
	*count = 0;
	uint32_t limit;
	sqlite3 *db;
	if (begin_read(path, f ? f->tenant : NULL, f ? f->limit : 0, &limit, &db, err, errcap) != 0)
		return -1;

	char sql[sizeof moves_select + 256];
	build_moves_query(f, sql, sizeof sql);
	sqlite3_stmt *s = prepare_or_close(db, sql, "moves", err, errcap);
	if (!s)
		return -1;
	sqlite3_bind_text(s, 1, f->tenant, -1, SQLITE_STATIC);
	gsd_audit_bind_u64(s, 2, f->allocation);
	gsd_audit_bind_u64(s, 3, f->device);
	gsd_audit_bind_u64(s, 4, f->packet);
	gsd_audit_bind_u64(s, 5, f->before_seq);
	sqlite3_bind_int64(s, 6, limit);
	/* Grown as rows come: a 10000-row limit usually meets far fewer moves. */
	int rc = collect_rows(db, s, sizeof(gsd_move_row), limit, read_move_row, "moves",
	                      (void **)out, count, err, errcap);
	close_reader(db);
	return rc;
}

/* ---- usage ---- */

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

/* p50, p95, p99 of v[0..n) (sorted in place); zeros when empty. */
static void percentiles(uint64_t *v, size_t n, uint64_t out[3])
{
	static const unsigned pct[3] = {50, 95, 99};
	if (n == 0) {
		out[0] = out[1] = out[2] = 0;
		return;
	}
	qsort(v, n, sizeof *v, cmp_u64);
	for (int i = 0; i < 3; i++)
		out[i] = v[(n - 1) * pct[i] / 100];
}

static bool same_key(const gsd_usage_row *r, gsd_usage_by by, const char *tenant, uint64_t context,
                     uint32_t adapter, uint32_t node)
{
	switch (by) {
	case GSD_USAGE_BY_CONTEXT:
		return r->context == context && strcmp(r->tenant, tenant) == 0;
	case GSD_USAGE_BY_NODE:
		return r->adapter == adapter && r->node == node;
	default:
		return strcmp(r->tenant, tenant) == 0;
	}
}

int gsd_history_usage(const char *path, const gsd_usage_filter *f, gsd_usage_row **rows,
                      size_t *count, bool *truncated, char *err, size_t errcap)
{
	static const char *const order[] = {"tenant", "tenant, context", "adapter, node"};
	*rows = NULL;
	*count = 0;
	*truncated = false;
	sqlite3 *db;
	if (open_reader(path, &db, err, errcap) != 0)
		return -1;
	char sql[512];
	snprintf(
	        sql, sizeof sql,
	        "SELECT tenant, context, adapter, node, state, preemptions, resubmissions, wait_ns,"
	        " run_ns, paging_bytes, submitted_ns FROM packet_usage WHERE %s submitted_ns >= ?2"
	        " AND submitted_ns < ?3 ORDER BY %s",
	        f->tenant ? "tenant = ?1 AND" : "", order[f->by <= GSD_USAGE_BY_NODE ? f->by : 0]);
	sqlite3_stmt *s = prepare_or_close(db, sql, "usage", err, errcap);
	if (!s)
		return -1;
	if (f->tenant)
		sqlite3_bind_text(s, 1, f->tenant, -1, SQLITE_STATIC);
	bind_bound(s, 2, f->since_ns);
	bind_bound(s, 3, f->until_ns ? f->until_ns : UINT64_MAX);

	gsd_usage_row *out = NULL, *cur = NULL;
	size_t n = 0, cap = 0, nw = 0, nr = 0, capw = 0, capr = 0, total = 0;
	uint64_t *waits = NULL, *runs = NULL;
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (++total > GSD_USAGE_MAX_PACKETS) {
			*truncated = true;
			break;
		}
		const char *tenant = (const char *)sqlite3_column_text(s, 0);
		uint64_t context = col_u64(s, 1);
		uint32_t adapter = col_u32(s, 2), node = col_u32(s, 3);
		if (!tenant)
			tenant = "";
		if (!cur || !same_key(cur, f->by, tenant, context, adapter, node)) {
			if (cur) {
				percentiles(waits, nw, cur->wait_ns);
				percentiles(runs, nr, cur->run_ns);
			}
			gsd_usage_row *grown = gsd_grow(out, &cap, n + 1, sizeof *out, 16);
			if (!grown)
				goto oom;
			out = grown;
			cur = &out[n++];
			memset(cur, 0, sizeof *cur);
			gsd_audit_copy_text(cur->tenant, sizeof cur->tenant, tenant);
			cur->context = context;
			cur->adapter = adapter;
			cur->node = node;
			nw = nr = 0;
		}
		int state = sqlite3_column_int(s, 4);
		uint64_t submitted = col_u64(s, 10);
		cur->packets++;
		cur->completed += state == 4;
		cur->faulted += state == 5;
		cur->cancelled += state == 9;
		cur->preemptions += col_u64(s, 5);
		cur->resubmissions += col_u64(s, 6);
		uint64_t run = col_u64(s, 8);
		cur->busy_ns += run;
		cur->paging_bytes += col_u64(s, 9);
		if (!cur->first_ns || submitted < cur->first_ns)
			cur->first_ns = submitted;
		if (submitted > cur->last_ns)
			cur->last_ns = submitted;
		if (sqlite3_column_type(s, 7) != SQLITE_NULL) {
			uint64_t *g = gsd_grow(waits, &capw, nw + 1, sizeof *waits, 1024);
			if (!g)
				goto oom;
			waits = g;
			waits[nw++] = col_u64(s, 7);
		}
		if (run) {
			uint64_t *g = gsd_grow(runs, &capr, nr + 1, sizeof *runs, 1024);
			if (!g)
				goto oom;
			runs = g;
			runs[nr++] = run;
		}
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		gsd_audit_set_err(err, errcap, "usage query failed: %s", sqlite3_errmsg(db));
		goto fail;
	}
	if (cur) {
		percentiles(waits, nw, cur->wait_ns);
		percentiles(runs, nr, cur->run_ns);
	}
	free(waits);
	free(runs);
	sqlite3_finalize(s);
	close_reader(db);
	*rows = out;
	*count = n;
	return 0;
oom:
	gsd_audit_set_err(err, errcap, "out of memory reading usage");
fail:
	free(out);
	free(waits);
	free(runs);
	sqlite3_finalize(s);
	close_reader(db);
	return -1;
}
