/*
 * The audit hash chain: row digests, links, and the verifier (see chain.h).
 */
#include "chain.h"

#include "core/wire_id.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

const uint8_t gs_chain_genesis[GS_CHAIN_HASH] = {0};

int gs_chain_init(void)
{
	return sodium_init() < 0 ? -1 : 0;
}

/* Column tags, and the two that end a link (the state it left, or none). */
enum { TAG_NULL = 0, TAG_INT = 1, TAG_TEXT = 2, TAG_NO_STATE = 0xfe, TAG_STATE = 0xff };

void gs_chain_row_init(gs_chain_row *r, gs_chain_kind table)
{
	uint8_t t = (uint8_t)table;
	crypto_generichash_init(&r->st, NULL, 0, GS_CHAIN_DIGEST);
	crypto_generichash_update(&r->st, &t, 1);
}

void gs_chain_row_int(gs_chain_row *r, int64_t v)
{
	uint8_t b[9] = {TAG_INT};
	uint64_t u = (uint64_t)v;
	for (int i = 0; i < 8; i++)
		b[1 + i] = (uint8_t)(u >> (8 * i));
	crypto_generichash_update(&r->st, b, sizeof b);
}

void gs_chain_row_text(gs_chain_row *r, const char *s)
{
	if (!s) {
		uint8_t t = TAG_NULL;
		crypto_generichash_update(&r->st, &t, 1);
		return;
	}
	size_t n = strlen(s);
	uint8_t b[5] = {TAG_TEXT, (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
	                (uint8_t)(n >> 24)};
	crypto_generichash_update(&r->st, b, sizeof b);
	crypto_generichash_update(&r->st, (const unsigned char *)s, n);
}

void gs_chain_row_final(gs_chain_row *r, uint8_t out[GS_CHAIN_DIGEST])
{
	crypto_generichash_final(&r->st, out, GS_CHAIN_DIGEST);
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void gs_chain_link_begin(gs_chain_row *r, const uint8_t prev[GS_CHAIN_HASH], uint64_t seq,
                         gs_chain_kind kind, uint64_t ref)
{
	uint8_t b[GS_CHAIN_HASH + 8 + 1 + 8];
	memcpy(b, prev, GS_CHAIN_HASH);
	put_le64(b + GS_CHAIN_HASH, seq);
	b[GS_CHAIN_HASH + 8] = (uint8_t)kind;
	put_le64(b + GS_CHAIN_HASH + 9, ref);
	crypto_generichash_init(&r->st, NULL, 0, GS_CHAIN_HASH);
	crypto_generichash_update(&r->st, b, sizeof b);
}

void gs_chain_link_end(gs_chain_row *r, const uint8_t *state, uint8_t out[GS_CHAIN_HASH])
{
	uint8_t b[1 + GS_CHAIN_DIGEST] = {state ? TAG_STATE : TAG_NO_STATE};
	if (state)
		memcpy(b + 1, state, GS_CHAIN_DIGEST);
	crypto_generichash_update(&r->st, b, state ? sizeof b : 1);
	crypto_generichash_final(&r->st, out, GS_CHAIN_HASH);
}

void gs_chain_hex(const uint8_t h[GS_CHAIN_HASH], char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < GS_CHAIN_HASH; i++) {
		out[2 * i] = digits[h[i] >> 4];
		out[2 * i + 1] = digits[h[i] & 15];
	}
	out[2 * GS_CHAIN_HASH] = '\0';
}

static int nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int gs_chain_unhex(const char *hex, uint8_t h[GS_CHAIN_HASH])
{
	if (strlen(hex) != 2 * GS_CHAIN_HASH)
		return -1;
	for (int i = 0; i < GS_CHAIN_HASH; i++) {
		int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		h[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int gs_chain_base_objects_digest(sqlite3 *db, uint8_t out[GS_CHAIN_HASH])
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(db,
	                       "SELECT kind, ref, state FROM chain_base_objects ORDER BY kind, ref",
	                       -1, &s, NULL) != SQLITE_OK)
		return -1;
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, GS_CHAIN_HASH);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		uint8_t b[17 + GS_CHAIN_DIGEST] = {0};
		put_le64(b, (uint64_t)sqlite3_column_int64(s, 0));
		put_le64(b + 8, (uint64_t)sqlite3_column_int64(s, 1));
		int n = sqlite3_column_bytes(s, 2);
		b[16] = (uint8_t)n;
		memcpy(b + 17, sqlite3_column_blob(s, 2),
		       n < GS_CHAIN_DIGEST ? (size_t)n : GS_CHAIN_DIGEST);
		crypto_generichash_update(&st, b, sizeof b);
	}
	sqlite3_finalize(s);
	crypto_generichash_final(&st, out, GS_CHAIN_HASH);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* ---- verification ---- */

/* The columns of each table in the order of the daemon's INSERT (server/audit/audit.c). */
static const char packet_event_sql[] =
        "SELECT packet, state, time_ns, detail, seq FROM packet_event_rows WHERE seq = ?1";
/* The events a packets row keeps (schema 8), as packet_events shows them, by kept_kind. */
static const char *const kept_event_sql[] = {
        NULL,
        "SELECT packet, 1, submitted_ns, submit_detail, seq FROM packets WHERE packet = ?1",
        "SELECT packet, 2, ready_ns, ready_detail, ready_seq FROM packets WHERE packet = ?1",
        "SELECT packet, 3, started_ns, NULL, run_seq FROM packets WHERE packet = ?1",
        "SELECT packet, state, completed_ns, NULL, end_seq FROM packets WHERE packet = ?1",
};
/* Schema 9: a kept RUNNING's time is run_ns where the GPU's own start moved started_ns. */
static const char kept_run_v9_sql[] =
        "SELECT packet, 3, IFNULL(run_ns, started_ns), NULL, run_seq FROM packets WHERE"
        " packet = ?1";
enum { KEPT_NONE, KEPT_SUBMITTED, KEPT_READY, KEPT_RUN, KEPT_END };
/* check_states: a packet's last event is one its row keeps (not chain kinds). */
enum { LAST_KEPT_SUBMITTED = 101, LAST_KEPT_END = 104 };
/* A packets row as it was submitted: the state its kept SUBMITTED event left (the columns of
 * packet_row_sql, those a later event changes as they were then). */
static const char packet_submitted_sql[] =
        "SELECT packet, tenant, device, context, adapter, node, fence, submit_flags & ~128, 0,"
        " dma_size, allocation_count, patch_count, 1, 'SUBMITTED', submitted_ns, 0, 0, 0, 0, 0,"
        " NULL FROM packets WHERE packet = ?1";
static const char error_sql[] =
        "SELECT time_ns, tenant, request, status, message, seq FROM errors WHERE seq = ?1";
static const char note_sql[] =
        "SELECT time_ns, tenant, kind, detail, seq FROM notes WHERE seq = ?1";
static const char move_sql[] =
        "SELECT time_ns, tenant, allocation, device, adapter, packet, for_packet, kind,"
        " kind_name, from_segment, from_offset, to_segment, to_offset, bytes, transfer_flags,"
        " pieces, reason, seq FROM moves WHERE seq = ?1";
static const char palloc_sql[] = "SELECT packet, slot, allocation, write FROM packet_allocations"
                                 " WHERE packet = ?1 ORDER BY slot";
static const char packet_row_sql[] =
        "SELECT packet, tenant, device, context, adapter, node, fence, submit_flags, patch_flags,"
        " dma_size, allocation_count, patch_count, state, state_name, submitted_ns, ready_ns,"
        " started_ns, completed_ns, preemptions, resubmissions, result FROM packets"
        " WHERE packet = ?1";
static const char packet_run_ns_sql[] =
        "SELECT run_ns FROM packets WHERE packet = ?1 AND run_ns IS NOT NULL";
static const char context_row_sql[] =
        "SELECT context, tenant, device, adapter, node, flags, priority_class, priority,"
        " dma_buffer_size, dma_buffer_segment_set, dma_buffer_private_data_size,"
        " allocation_list_size, patch_location_list_size, caps, paging_companion_node_id,"
        " created_ns, destroyed_ns FROM contexts WHERE context = ?1";
static const char tenant_row_sql[] =
        "SELECT id, name, audit_name, token_hash, kind, share, priority_ceiling, context_limit,"
        " allocation_limit, max_requests_per_second, memory_quota, admin, created_ns, removed_ns"
        " FROM tenants WHERE id = ?1";
static const char tenant_limits_row_sql[] =
        "SELECT id, name, audit_name, token_hash, kind, share, priority_ceiling, context_limit,"
        " allocation_limit, max_requests_per_second, memory_quota, admin, created_ns, removed_ns,"
        " max_message, packet_limit, sync_limit FROM tenants WHERE id = ?1";
static const char allocation_row_sql[] =
        "SELECT allocation, tenant, device, adapter, size, supported_segment_set,"
        " segment_preference, priority, flags, segment, segment_offset, created_ns, destroyed_ns"
        " FROM allocations WHERE allocation = ?1";

static void digest_columns(sqlite3_stmt *s, gs_chain_row *r)
{
	int n = sqlite3_column_count(s);
	for (int i = 0; i < n; i++) {
		switch (sqlite3_column_type(s, i)) {
		case SQLITE_NULL:
			gs_chain_row_text(r, NULL);
			break;
		case SQLITE_INTEGER:
			gs_chain_row_int(r, sqlite3_column_int64(s, i));
			break;
		default: /* text (a value of another type reads as its text: it will not match) */
			gs_chain_row_text(r, (const char *)sqlite3_column_text(s, i));
			break;
		}
	}
}

/* Feeds the row(s) the prepared statement s finds for key into r and resets it: 1 found, 0
 * none, -1 error. */
static int feed_stmt(sqlite3_stmt *s, int64_t key, gs_chain_row *r)
{
	sqlite3_bind_int64(s, 1, key);
	int rc, found = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		digest_columns(s, r);
		found = 1;
	}
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? found : -1;
}

/* The same with a statement prepared for this one call. */
static int feed_query(sqlite3 *db, const char *sql, int64_t key, gs_chain_row *r)
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return -1;
	int found = feed_stmt(s, key, r);
	sqlite3_finalize(s);
	return found;
}

/* The verifier's statements, prepared once per verification (a file has millions of rows). */
typedef struct stmt_cache {
	sqlite3 *db;
	bool before_v9; /* the file has no packets.run_ns (schema 8, not upgraded yet) */
	const char *sql[16];
	sqlite3_stmt *s[16];
} stmt_cache;

static void cache_close(stmt_cache *c)
{
	for (size_t i = 0; i < sizeof c->s / sizeof c->s[0]; i++)
		sqlite3_finalize(c->s[i]);
}

/* Feeds like feed_query, through the cache (or prepared once when it is full). */
static int feed_cached(stmt_cache *c, const char *sql, int64_t key, gs_chain_row *r)
{
	size_t i, n = sizeof c->s / sizeof c->s[0];
	for (i = 0; i < n && c->sql[i] && c->sql[i] != sql; i++)
		;
	if (i == n)
		return feed_query(c->db, sql, key, r);
	if (!c->sql[i]) {
		if (sqlite3_prepare_v2(c->db, sql, -1, &c->s[i], NULL) != SQLITE_OK)
			return -1;
		c->sql[i] = sql;
	}
	return feed_stmt(c->s[i], key, r);
}

/* The query and key of a record's appended row(s); NULL sql for kinds with none (table NULL)
 * or unknown ones (table "chain"). */
static const char *appended_sql(gs_chain_kind kind, uint64_t seq, int64_t *key, const char **table)
{
	*key = (int64_t)seq;
	switch (kind) {
	case GS_CHAIN_PACKET:
		*table = "packet_event_rows";
		return packet_event_sql;
	case GS_CHAIN_ERROR:
		*table = "errors";
		return error_sql;
	case GS_CHAIN_NOTE:
		*table = "notes";
		return note_sql;
	case GS_CHAIN_MOVE:
		*table = "moves";
		return move_sql;
	case GS_CHAIN_CONTEXT:
	case GS_CHAIN_ALLOCATION:
	case GS_CHAIN_TENANT:
	case GS_CHAIN_TENANT_LIMITS:
		*table = NULL;
		return NULL;
	}
	*table = "chain";
	return NULL;
}

static int appended_feed(stmt_cache *c, sqlite3 *db, gs_chain_kind kind, uint64_t seq, uint64_t ref,
                         bool with_list, gs_chain_row *r, const char **table)
{
	int64_t key;
	const char *sql = appended_sql(kind, seq, &key, table);
	if (!sql)
		return *table ? -1 : 0; /* unknown kind, or no appended row */
	int found = c ? feed_cached(c, sql, key, r) : feed_query(db, sql, key, r);
	/* A SUBMITTED event's link goes on over its packet's allocation list. */
	if (found == 1 && with_list &&
	    (c ? feed_cached(c, palloc_sql, (int64_t)ref, r)
	       : feed_query(db, palloc_sql, (int64_t)ref, r)) < 0)
		return -1;
	return found;
}

int gs_chain_appended_feed(sqlite3 *db, gs_chain_kind kind, uint64_t seq, uint64_t ref,
                           bool with_list, gs_chain_row *r, const char **table)
{
	return appended_feed(NULL, db, kind, seq, ref, with_list, r, table);
}

static const char *state_sql(gs_chain_kind kind, const char **table)
{
	switch (kind) {
	case GS_CHAIN_PACKET:
		*table = "packets";
		return packet_row_sql;
	case GS_CHAIN_CONTEXT:
		*table = "contexts";
		return context_row_sql;
	case GS_CHAIN_ALLOCATION:
		*table = "allocations";
		return allocation_row_sql;
	case GS_CHAIN_TENANT:
		*table = "tenants";
		return tenant_row_sql;
	case GS_CHAIN_TENANT_LIMITS:
		*table = "tenants";
		return tenant_limits_row_sql;
	default:
		*table = NULL;
		return NULL;
	}
}

static int state_digest(stmt_cache *c, sqlite3 *db, gs_chain_kind kind, uint64_t ref,
                        uint8_t out[GS_CHAIN_DIGEST], const char **table)
{
	const char *sql = state_sql(kind, table);
	if (!sql)
		return 0;
	gs_chain_row r;
	gs_chain_row_init(&r, kind);
	int found =
	        c ? feed_cached(c, sql, (int64_t)ref, &r) : feed_query(db, sql, (int64_t)ref, &r);
	/* A packets row's run_ns (schema 9) follows its columns where it is set. */
	if (found == 1 && kind == GS_CHAIN_PACKET && !(c && c->before_v9) &&
	    (c ? feed_cached(c, packet_run_ns_sql, (int64_t)ref, &r)
	       : feed_query(db, packet_run_ns_sql, (int64_t)ref, &r)) < 0)
		found = -1;
	gs_chain_row_final(&r, out);
	return found;
}

int gs_chain_state_digest(sqlite3 *db, gs_chain_kind kind, uint64_t ref,
                          uint8_t out[GS_CHAIN_DIGEST], const char **table)
{
	return state_digest(NULL, db, kind, ref, out, table);
}

static void bad(gs_chain_report *out, uint64_t seq, const char *table, int64_t row, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));

static void bad(gs_chain_report *out, uint64_t seq, const char *table, int64_t row, const char *fmt,
                ...)
{
	if (!out->ok)
		return; /* the first finding is the one reported */
	out->ok = false;
	out->bad_seq = seq;
	snprintf(out->bad_table, sizeof out->bad_table, "%s", table ? table : "");
	out->bad_row = row;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out->why, sizeof out->why, fmt, ap);
	va_end(ap);
}

static void meta_text(sqlite3 *db, const char *key, char *out, size_t cap)
{
	sqlite3_stmt *s;
	out[0] = '\0';
	if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &s, NULL) !=
	    SQLITE_OK)
		return;
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
		snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
}

static int64_t meta_int(sqlite3 *db, const char *key, int64_t dflt)
{
	sqlite3_stmt *s;
	int64_t v = dflt;
	if (sqlite3_prepare_v2(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?1", -1, &s,
	                       NULL) != SQLITE_OK)
		return dflt;
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(s) == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

/*
 * Feeds an event a packets row keeps (schema 8) into r as packet_events shows it, and sets
 * *state to the state it left: a SUBMITTED's is the row as submitted (packet_submitted_sql),
 * a straight run's end the row as it is; a READY's and a RUNNING's stays the one the walk
 * read (their row's ready_digest and run_digest, schema 9: NULL for none). 1, 0 when the row
 * is missing, -1 on error.
 */
static int feed_kept(stmt_cache *c, int kept, uint64_t ref, gs_chain_row *r,
                     uint8_t buf[GS_CHAIN_DIGEST], const void **state, const char **table)
{
	*table = "packets";
	if (kept == KEPT_SUBMITTED || kept == KEPT_END)
		*state = NULL;
	int found = feed_cached(
	        c, kept == KEPT_RUN && !c->before_v9 ? kept_run_v9_sql : kept_event_sql[kept],
	        (int64_t)ref, r);
	if (found != 1)
		return found;
	if (kept == KEPT_SUBMITTED) {
		if (feed_cached(c, palloc_sql, (int64_t)ref, r) < 0)
			return -1;
		gs_chain_row d;
		gs_chain_row_init(&d, GS_CHAIN_PACKET);
		if (feed_cached(c, packet_submitted_sql, (int64_t)ref, &d) != 1)
			return -1;
		gs_chain_row_final(&d, buf);
		*state = buf;
	} else if (kept == KEPT_END) {
		const char *t;
		if (state_digest(c, c->db, GS_CHAIN_PACKET, ref, buf, &t) != 1)
			return -1;
		*state = buf;
	}
	return 1;
}

/* Walks the chain in seq order: every link and every appended row. digests: the file has the
 * columns ready_digest, run_digest and run_ns (schema 9; an older file not yet upgraded by a
 * daemon has none). */
static int walk_chain(sqlite3 *db, gs_chain_report *out, const uint8_t base[GS_CHAIN_HASH],
                      const gs_chain_pin *pin, bool digests)
{
	sqlite3_stmt *s;
	char sql[2048];
	snprintf(sql, sizeof sql,
	         /* The row's link is its newest kept event's; a READY or
	          * RUNNING moved out of its row has none (schema 9). */
	         "SELECT seq, 1, packet, state_digest, hash, state = 1, 0,"
	         " state IN (2, 3) FROM packet_event_rows WHERE seq >= ?1 UNION ALL"
	         " SELECT seq, 1, packet, NULL, CASE WHEN ready_seq = 0 AND"
	         " run_seq = 0 AND end_seq = 0 THEN hash END, 1, 1, 0 FROM packets"
	         " WHERE seq <> 0 AND seq >= ?1 UNION ALL"
	         " SELECT ready_seq, 1, packet, %s, CASE WHEN run_seq = 0"
	         " AND end_seq = 0 THEN hash END, 0, 2, 0 FROM packets"
	         " WHERE ready_seq <> 0 AND ready_seq >= ?1 UNION ALL"
	         " SELECT run_seq, 1, packet, %s, CASE WHEN end_seq = 0"
	         " THEN hash END, 0, 3, 0 FROM packets"
	         " WHERE run_seq <> 0 AND run_seq >= ?1 UNION ALL"
	         " SELECT end_seq, 1, packet, NULL, hash, 0, 4, 0 FROM packets"
	         " WHERE end_seq <> 0 AND end_seq >= ?1 UNION ALL"
	         " SELECT seq, 4, 0, NULL, hash, 0, 0, 0 FROM errors WHERE seq >= ?1"
	         " UNION ALL SELECT seq, 5, 0, NULL, hash, 0, 0, 0 FROM notes"
	         " WHERE seq >= ?1 UNION ALL SELECT seq, 6, allocation, NULL, hash,"
	         " 0, 0, 0 FROM moves WHERE seq >= ?1 UNION ALL SELECT seq, kind,"
	         " ref, state, hash, 0, 0, 0 FROM chain WHERE seq >= ?1 ORDER BY 1",
	         digests ? "ready_digest" : "NULL", digests ? "run_digest" : "NULL");
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int64(s, 1, (int64_t)out->first_seq);
	stmt_cache cache = {.db = db, .before_v9 = !digests};
	uint8_t prev[GS_CHAIN_HASH];
	memcpy(prev, base, sizeof prev);
	int rc = SQLITE_DONE;
	/* The last packet whose kept events were linked without a link in the file to compare
	 * with (its row keeps only the newest): a later mismatch may be its. */
	uint64_t unchecked = 0;
	while (out->ok && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
		gs_chain_kind kind = (gs_chain_kind)sqlite3_column_int(s, 1);
		uint64_t ref = (uint64_t)sqlite3_column_int64(s, 2);
		const void *state = sqlite3_column_blob(s, 3);
		int state_len = sqlite3_column_bytes(s, 3);
		const void *hash = sqlite3_column_blob(s, 4);
		int hash_len = sqlite3_column_bytes(s, 4);
		int kept = sqlite3_column_int(s, 6);
		if (kept < KEPT_NONE || kept > KEPT_END)
			kept = KEPT_NONE;
		bool moved = sqlite3_column_int(s, 7) != 0; /* may have no link: see above */
		if (!hash && !kept && !moved) {
			const char *t = kind == GS_CHAIN_PACKET  ? "packet_event_rows"
			                : kind == GS_CHAIN_ERROR ? "errors"
			                : kind == GS_CHAIN_NOTE  ? "notes"
			                : kind == GS_CHAIN_MOVE  ? "moves"
			                                         : "chain";
			bad(out, seq, t, (int64_t)seq,
			    "row %llu of %s has no link: it was added after the fact",
			    (unsigned long long)seq, t);
			break;
		}
		if ((state && state_len != GS_CHAIN_DIGEST) ||
		    (hash && hash_len != GS_CHAIN_HASH)) {
			bad(out, seq, "chain", (int64_t)seq, "the link of record %llu is malformed",
			    (unsigned long long)seq);
			break;
		}
		uint8_t link[GS_CHAIN_HASH];
		const char *table;
		gs_chain_row r;
		gs_chain_link_begin(&r, prev, seq, kind, ref);
		bool with_list = sqlite3_column_int(s, 5) != 0; /* a SUBMITTED event */
		uint8_t kept_state[GS_CHAIN_DIGEST];
		int found = kept ? feed_kept(&cache, kept, ref, &r, kept_state, &state, &table)
		                 : appended_feed(&cache, db, kind, seq, ref, with_list, &r, &table);
		if (found < 0 && !strcmp(table, "chain")) {
			bad(out, seq, "chain", (int64_t)seq, "record %llu has an unknown kind %d",
			    (unsigned long long)seq, (int)kind);
			break;
		}
		if (found < 0) {
			rc = SQLITE_ERROR;
			break;
		}
		if (table && !found) {
			bad(out, seq, table, (int64_t)seq,
			    "the %s row of record %llu is missing (deleted)", table,
			    (unsigned long long)seq);
			break;
		}
		gs_chain_link_end(&r, state, link);
		if (hash && memcmp(link, hash, GS_CHAIN_HASH) != 0) {
			bool row = kept || unchecked;
			bad(out, seq,
			    row     ? "packets"
			    : table ? table
			            : "chain",
			    row ? (int64_t)(kept ? ref : unchecked) : (int64_t)seq,
			    "record %llu does not match its link: its row in %s%s was changed or"
			    " moved, or the record before it was removed%s",
			    (unsigned long long)seq, table ? table : "chain",
			    with_list ? " or its packet's allocation list in packet_allocations"
			              : "",
			    unchecked ? " (or an event kept in an earlier packets row: see its row)"
			              : "");
			break;
		}
		unchecked = hash ? 0 : ref;
		memcpy(prev, link, GS_CHAIN_HASH);
		if (pin && seq == pin->seq) {
			out->pin_found = true;
			out->pin_matched = memcmp(link, pin->hash, GS_CHAIN_HASH) == 0;
		}
		out->records++;
		out->last_seq = seq;
	}
	sqlite3_finalize(s);
	cache_close(&cache);
	memcpy(out->head, prev, GS_CHAIN_HASH);
	return out->ok && rc != SQLITE_DONE ? -1 : 0;
}

/* The newest records: the walk must end at the head the daemon last committed. */
static int check_head(sqlite3 *db, gs_chain_report *out)
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'chain_head'", -1, &s,
	                       NULL) != SQLITE_OK)
		return -1;
	int rc = sqlite3_step(s);
	uint8_t head[GS_CHAIN_HASH];
	if (rc == SQLITE_ROW) {
		const char *hex = (const char *)sqlite3_column_text(s, 0);
		if (!hex || gs_chain_unhex(hex, head) != 0)
			bad(out, out->last_seq, "meta", 0, "the chain head in meta is not a link");
		else if (memcmp(head, out->head, GS_CHAIN_HASH) != 0)
			bad(out, out->last_seq, "meta", 0,
			    "the chain ends at record %llu, which is not the last one committed: "
			    "the"
			    " newest records were removed (or meta's chain_head changed)",
			    (unsigned long long)out->last_seq);
	} else if (rc == SQLITE_DONE && out->records) {
		bad(out, out->last_seq, "meta", 0, "the chain head is missing from meta");
	}
	sqlite3_finalize(s);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/*
 * Each row of an updated-in-place table must be the state its last record left. `last_sql`
 * finds, for a row key, the seq and state of that record; rows older than the chain (key at or
 * below the file's pre-chain maximum) with no record are not covered. Handles are random, but
 * the daemon never gives one out at or below that maximum (new_handle, server/core/object.c),
 * so every row there predates the chain.
 */
static int check_states(sqlite3 *db, bool before_v9, gs_chain_report *out, const char *table,
                        const char *key, gs_chain_kind kind, const char *last_sql,
                        int64_t prechain_max)
{
	uint64_t chain_start = out->first_seq;
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT %s FROM %s ORDER BY %s", key, table, key);
	sqlite3_stmt *rows, *last;
	if (sqlite3_prepare_v2(db, sql, -1, &rows, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(db, last_sql, -1, &last, NULL) != SQLITE_OK) {
		sqlite3_finalize(rows);
		return -1;
	}
	int rc = SQLITE_DONE;
	stmt_cache cache = {.db = db, .before_v9 = before_v9};
	while (out->ok && (rc = sqlite3_step(rows)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(rows, 0);
		sqlite3_reset(last);
		sqlite3_bind_int64(last, 1, id);
		int lrc = sqlite3_step(last);
		const void *state = lrc == SQLITE_ROW ? sqlite3_column_blob(last, 1) : NULL;
		int state_len = lrc == SQLITE_ROW ? sqlite3_column_bytes(last, 1) : 0;
		uint64_t seq = lrc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(last, 0) : 0;
		int last_kind = lrc == SQLITE_ROW ? sqlite3_column_int(last, 2) : 0;
		/* A packet's last event kept in its row: a straight run's end covers the row as it
		 * is (the walk checked it); a SUBMITTED the row as submitted, which must be it. */
		if (last_kind == LAST_KEPT_END) {
			out->rows++;
			continue;
		}
		uint8_t submitted[GS_CHAIN_DIGEST];
		if (last_kind == LAST_KEPT_SUBMITTED) {
			gs_chain_row d;
			gs_chain_row_init(&d, GS_CHAIN_PACKET);
			if (feed_cached(&cache, packet_submitted_sql, id, &d) != 1) {
				rc = SQLITE_ERROR;
				break;
			}
			gs_chain_row_final(&d, submitted);
			state = submitted;
			state_len = GS_CHAIN_DIGEST;
			last_kind = GS_CHAIN_PACKET;
		}
		if (lrc == SQLITE_ROW && !state && seq >= chain_start) {
			bad(out, seq, table, id,
			    "%s row %lld: its last record (%llu) does not hold its state", table,
			    (long long)id, (unsigned long long)seq);
			continue;
		}
		if (!state || state_len != GS_CHAIN_DIGEST) {
			if (id > prechain_max)
				bad(out, seq, table, id,
				    "%s row %lld has no record in the chain (added after the fact)",
				    table, (long long)id);
			continue;
		}
		uint8_t now[GS_CHAIN_DIGEST];
		const char *t;
		/* The row as the kind of its last record covers it. */
		gs_chain_kind k = (gs_chain_kind)last_kind;
		if (state_digest(&cache, db, k ? k : kind, (uint64_t)id, now, &t) != 1) {
			rc = SQLITE_ERROR;
			break;
		}
		if (memcmp(now, state, GS_CHAIN_DIGEST) != 0)
			bad(out, seq, table, id,
			    "%s row %lld is not the state its last record (%llu) left: it was "
			    "changed",
			    table, (long long)id, (unsigned long long)seq);
		out->rows++;
	}
	cache_close(&cache);
	sqlite3_finalize(last);
	sqlite3_finalize(rows);
	return out->ok && rc != SQLITE_DONE ? -1 : 0;
}

/* The first row found by `sql` (seq or key, id), with ?1 bound to the chain's first seq: 1
 * found, 0 none, -1 error. */
static int first_found(sqlite3 *db, const char *sql, int64_t first_seq, int64_t *a, int64_t *b)
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_bind_parameter_count(s) >= 1)
		sqlite3_bind_int64(s, 1, first_seq);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*a = sqlite3_column_int64(s, 0);
		*b = sqlite3_column_int64(s, 1);
	}
	sqlite3_finalize(s);
	return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

/*
 * Every row a record of the chain vouches for is there: the packets row of each packet event,
 * the contexts, allocations and tenants rows of their records, and the row of each anchor the
 * retention left. (The walk finds a removed appended row; this finds a removed updated-in-place
 * row, which no record after it would miss: the packet would just vanish from history.)
 */
static int check_rows_exist(sqlite3 *db, gs_chain_report *out)
{
	static const struct {
		const char *table, *sql;
	} q[] = {
	        {"packets",
	         "SELECT e.seq, e.packet FROM packet_event_rows e WHERE e.seq >= ?1 AND NOT"
	         " EXISTS (SELECT 1 FROM packets p WHERE p.packet = e.packet)"
	         " ORDER BY e.seq LIMIT 1"},
	        {"contexts", "SELECT c.seq, c.ref FROM chain c WHERE c.kind = 2 AND c.seq >= ?1 AND"
	                     " NOT EXISTS (SELECT 1 FROM contexts WHERE context = c.ref)"
	                     " ORDER BY c.seq LIMIT 1"},
	        {"allocations", "SELECT c.seq, c.ref FROM chain c WHERE c.kind = 3 AND c.seq >= ?1"
	                        " AND NOT EXISTS (SELECT 1 FROM allocations WHERE allocation ="
	                        " c.ref) ORDER BY c.seq LIMIT 1"},
	        {"tenants",
	         "SELECT c.seq, c.ref FROM chain c WHERE c.kind IN (8, 9) AND c.seq >= ?1"
	         " AND NOT EXISTS (SELECT 1 FROM tenants WHERE id = c.ref)"
	         " ORDER BY c.seq LIMIT 1"},
	        {"packets", "SELECT 0, ref FROM chain_base_objects WHERE kind = 1 AND NOT EXISTS"
	                    " (SELECT 1 FROM packets WHERE packet = ref) LIMIT 1"},
	        {"contexts", "SELECT 0, ref FROM chain_base_objects WHERE kind = 2 AND NOT EXISTS"
	                     " (SELECT 1 FROM contexts WHERE context = ref) LIMIT 1"},
	        {"allocations", "SELECT 0, ref FROM chain_base_objects WHERE kind = 3 AND NOT"
	                        " EXISTS (SELECT 1 FROM allocations WHERE allocation = ref)"
	                        " LIMIT 1"},
	};
	for (size_t i = 0; out->ok && i < sizeof q / sizeof q[0]; i++) {
		int64_t seq, id;
		int found = first_found(db, q[i].sql, (int64_t)out->first_seq, &seq, &id);
		if (found < 0)
			return -1;
		if (found && seq)
			bad(out, (uint64_t)seq, q[i].table, id,
			    "%s row %lld is gone (deleted), though record %lld vouches for it",
			    q[i].table, (long long)id, (long long)seq);
		else if (found)
			bad(out, out->base_seq, q[i].table, id,
			    "%s row %lld is gone (deleted), though the retention anchored it",
			    q[i].table, (long long)id);
	}
	return 0;
}

/*
 * Where the chain starts. A file that had no records before the chain (chain_start_seq 1) has
 * no rows older than it (chain_start_packet, _context, _allocation 0); records below
 * chain_start_seq predate the chain (format-1 links of 32 bytes, or none), so a format-2 link
 * there means chain_start_seq was moved to leave records out of the walk.
 */
static int check_start(sqlite3 *db, gs_chain_report *out)
{
	static const char *const keys[] = {"chain_start_packet", "chain_start_context",
	                                   "chain_start_allocation"};
	if (out->first_seq == 1 && !out->base_seq)
		for (size_t i = 0; out->ok && i < sizeof keys / sizeof keys[0]; i++)
			if (meta_int(db, keys[i], 0) != 0)
				bad(out, 0, "meta", 0,
				    "%s is not 0 though the chain starts at the first record: rows "
				    "it"
				    " covers would not be checked",
				    keys[i]);
	int64_t seq, len;
	int found = first_found(
	        db,
	        "SELECT seq, length(hash) FROM (SELECT seq, hash FROM packet_event_rows WHERE seq "
	        "< ?1"
	        " UNION ALL SELECT seq, hash FROM moves WHERE seq < ?1 UNION ALL SELECT seq, hash"
	        " FROM errors WHERE seq < ?1 UNION ALL SELECT seq, hash FROM notes WHERE seq < ?1"
	        " UNION ALL SELECT seq, hash FROM chain WHERE seq < ?1) WHERE length(hash) = 16"
	        " ORDER BY seq DESC LIMIT 1",
	        (int64_t)out->first_seq, &seq, &len);
	if (found < 0)
		return -1;
	if (found && (uint64_t)seq > out->base_seq)
		bad(out, (uint64_t)seq, "meta", 0,
		    "record %lld has a link of the chain but lies before chain_start_seq (%llu): "
		    "the"
		    " start was moved to leave records out",
		    (long long)seq, (unsigned long long)out->first_seq);
	return 0;
}

/* meta.chain_head_seq (written with the head since schema 6) names the newest record. */
static void check_head_seq(sqlite3 *db, gs_chain_report *out)
{
	int64_t seq = meta_int(db, "chain_head_seq", -1);
	if (seq >= 0 && (uint64_t)seq != out->last_seq)
		bad(out, out->last_seq, "meta", 0,
		    "the chain ends at record %llu, but the head was written after record %lld: the"
		    " newest records were removed (and chain_head copied)",
		    (unsigned long long)out->last_seq, (long long)seq);
}

/*
 * The schema objects a reader trusts: the views (packet_event_log, the usage views) and the
 * lookup table packet_states must be the ones of the schema this verifier carries (the daemon
 * writes them again at each start), and there must be no trigger. Checked when the file says
 * it has that schema version; an older file's are reported as not checked.
 */
static int check_schema(sqlite3 *db, gs_chain_report *out)
{
	sqlite3 *ref = NULL;
	int rc = -1;
	if (sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
	    sqlite3_exec(ref, gs_audit_schema_sql, NULL, NULL, NULL) != SQLITE_OK)
		goto done;
	int64_t want = meta_int(ref, "schema_version", 0);
	int64_t have = meta_int(db, "schema_version", 0);
	if (have != want) {
		out->schema_checked = false;
		rc = 0;
		goto done;
	}
	out->schema_checked = true;
	/* Every object of the file against the reference, then the reverse, by (type, name). */
	static const char objects[] =
	        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger')"
	        " ORDER BY type, name";
	sqlite3 *dbs[2] = {db, ref};
	for (int pass = 0; pass < 2 && out->ok; pass++) {
		sqlite3_stmt *s, *o;
		if (sqlite3_prepare_v2(dbs[pass], objects, -1, &s, NULL) != SQLITE_OK)
			goto done;
		if (sqlite3_prepare_v2(
		            dbs[!pass],
		            "SELECT sql FROM sqlite_master WHERE type = ?1 AND name = ?2", -1, &o,
		            NULL) != SQLITE_OK) {
			sqlite3_finalize(s);
			goto done;
		}
		while (out->ok && sqlite3_step(s) == SQLITE_ROW) {
			const char *type = (const char *)sqlite3_column_text(s, 0);
			const char *name = (const char *)sqlite3_column_text(s, 1);
			const char *sql = (const char *)sqlite3_column_text(s, 2);
			sqlite3_reset(o);
			sqlite3_bind_text(o, 1, type, -1, SQLITE_TRANSIENT);
			sqlite3_bind_text(o, 2, name, -1, SQLITE_TRANSIENT);
			const char *other = sqlite3_step(o) == SQLITE_ROW
			                            ? (const char *)sqlite3_column_text(o, 0)
			                            : NULL;
			if (!other)
				bad(out, 0, "sqlite_master", 0, "%s %s %s",
				    pass ? "the" : "a foreign", type ? type : "?",
				    pass ? "of the schema is missing (dropped)"
				         : "was added: readers of the file would run it");
			else if (!sql || strcmp(sql, other) != 0)
				bad(out, 0, "sqlite_master", 0,
				    "the %s %s is not the schema's: it was changed", type, name);
			if (!out->ok)
				snprintf(out->bad_table, sizeof out->bad_table, "%s",
				         name ? name : "");
		}
		sqlite3_finalize(o);
		sqlite3_finalize(s);
	}
	/* The lookup tables the views read names from, row for row. */
	static const char *const lookups[][2] = {
	        {"packet_states", "SELECT group_concat(state || '=' || name, ',') FROM"
	                          " (SELECT state, name FROM packet_states ORDER BY state)"},
	        {"submit_flag_names", "SELECT group_concat(bit || '=' || name, ',') FROM"
	                              " (SELECT bit, name FROM submit_flag_names ORDER BY bit)"},
	        {"status_names", "SELECT group_concat(status || '=' || name, ',') FROM"
	                         " (SELECT status, name FROM status_names ORDER BY status)"}};
	for (size_t t = 0; t < sizeof lookups / sizeof lookups[0] && out->ok; t++) {
		char a[2048] = "", b[2048] = "";
		sqlite3_stmt *s;
		for (int pass = 0; pass < 2; pass++) {
			if (sqlite3_prepare_v2(dbs[pass], lookups[t][1], -1, &s, NULL) != SQLITE_OK)
				goto done;
			if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
				snprintf(pass ? b : a, sizeof a, "%s",
				         (const char *)sqlite3_column_text(s, 0));
			sqlite3_finalize(s);
		}
		if (strcmp(a, b) != 0) {
			bad(out, 0, lookups[t][0], 0,
			    "%s is not the schema's: its names were changed", lookups[t][0]);
			snprintf(out->bad_table, sizeof out->bad_table, "%s", lookups[t][0]);
		}
	}
	rc = 0;
done:
	if (rc != 0 && !out->why[0])
		snprintf(out->why, sizeof out->why, "the reference schema cannot be built: %s",
		         ref ? sqlite3_errmsg(ref) : "out of memory");
	sqlite3_close(ref);
	return rc;
}

/* With a head kept elsewhere: the chain must pass record pin->seq with link pin->hash. */
static void check_pin(const gs_chain_pin *pin, gs_chain_report *out)
{
	if (!out->ok)
		return;
	if (pin->seq <= out->base_seq) {
		out->pin_checked = false; /* the retention removed it: nothing to compare */
		return;
	}
	out->pin_checked = true;
	if (!out->pin_found)
		bad(out, pin->seq, "chain", (int64_t)pin->seq,
		    out->last_seq < pin->seq ? "the kept head is record %llu, but the chain ends "
		                               "before it: the newest"
		                               " records were removed"
		                             : "the kept head is record %llu, which is not in the "
		                               "chain: records were"
		                               " removed or renumbered",
		    (unsigned long long)pin->seq);
	else if (!out->pin_matched)
		bad(out, pin->seq, "chain", (int64_t)pin->seq,
		    "record %llu does not have the link of the kept head: the chain was rewritten "
		    "up"
		    " to it",
		    (unsigned long long)pin->seq);
}

/*
 * packets.id (schema 7) is the packet's wire id: its number through the permutation keyed by
 * meta.wire_key. It is not in the chain's digests (it follows from the row's number and the
 * file's key), so it is recomputed here: an edited id would lead a person with the sqlite3
 * shell and a client's id to another packet. A file without the column has nothing to check.
 */
static int check_packet_ids(sqlite3 *db, gs_chain_report *out)
{
	sqlite3_stmt *s = NULL;
	if (sqlite3_prepare_v2(db, "SELECT packet, id FROM packets", -1, &s, NULL) != SQLITE_OK)
		return 0;
	char hex[2 * GSD_WIRE_KEY_BYTES + 8] = "";
	unsigned char raw[GSD_WIRE_KEY_BYTES];
	size_t len = 0;
	meta_text(db, "wire_key", hex, sizeof hex);
	if (sodium_hex2bin(raw, sizeof raw, hex, strlen(hex), NULL, &len, NULL) != 0 ||
	    len != sizeof raw) {
		sqlite3_finalize(s);
		bad(out, 0, "meta", 0, "meta wire_key is not %d bytes of hex", GSD_WIRE_KEY_BYTES);
		return 0;
	}
	gsd_wire_key k;
	gsd_wire_key_init(&k, raw);
	int rc;
	while (out->ok && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t packet = sqlite3_column_int64(s, 0);
		if (sqlite3_column_type(s, 1) == SQLITE_NULL)
			bad(out, 0, "packets", packet,
			    "packets row %lld has no client id (packets.id)", (long long)packet);
		else if ((uint64_t)sqlite3_column_int64(s, 1) !=
		         gsd_wire_packet_out(&k, (uint64_t)packet))
			bad(out, 0, "packets", packet,
			    "packets.id of row %lld is not that packet's client id: it was changed",
			    (long long)packet);
	}
	sqlite3_finalize(s);
	return 0;
}

int gs_chain_verify(sqlite3 *db, gs_chain_report *out)
{
	return gs_chain_verify_pinned(db, NULL, out);
}

int gs_chain_verify_pinned(sqlite3 *db, const gs_chain_pin *pin, gs_chain_report *out)
{
	memset(out, 0, sizeof *out);
	out->ok = true;
	if (gs_chain_init() != 0) {
		snprintf(out->why, sizeof out->why, "libsodium cannot be initialised");
		return -1;
	}
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
		snprintf(out->why, sizeof out->why, "%s", sqlite3_errmsg(db));
		return -1;
	}
	int64_t start = meta_int(db, "chain_start_seq", -1);
	int64_t format = meta_int(db, "chain_format", 1);
	int rc = 0;
	if (start < 0 && meta_int(db, "schema_version", -1) < 0) {
		/* No meta at all: not an older schema, but no audit data. A file in WAL mode keeps
		 * everything in DB-wal until a checkpoint: a .db copied alone while the daemon ran
		 * (or after it was killed) looks like this. */
		snprintf(out->why, sizeof out->why,
		         "the file holds no audit tables: it is empty, or it was copied without its"
		         " -wal file while the daemon ran (copy it after a clean stop, which folds"
		         " the WAL in, or copy FILE and FILE-wal together)");
		rc = -1;
		goto done;
	}
	if (start < 0) {
		snprintf(out->why, sizeof out->why,
		         "the file has no hash chain (written by a daemon older than schema 3)");
		rc = -1;
		goto done;
	}
	if (format != GS_CHAIN_FORMAT) {
		snprintf(out->why, sizeof out->why,
		         "the file has chain format %lld, this verifier reads format %d (a daemon"
		         " upgrades the file when it opens it)",
		         (long long)format, GS_CHAIN_FORMAT);
		rc = -1;
		goto done;
	}
	/* A newer schema may keep records where this verifier does not look (schema 8 keeps a
	 * straight packet's events in its row): it would call them missing. */
	int64_t version = meta_int(db, "schema_version", 0);
	if (version > GS_AUDIT_SCHEMA_KNOWN) {
		snprintf(out->why, sizeof out->why,
		         "the file has schema version %lld, this verifier knows up to %d: verify it"
		         " with the gpusched of the daemon that wrote it",
		         (long long)version, GS_AUDIT_SCHEMA_KNOWN);
		rc = -1;
		goto done;
	}
	/* After a retention step the chain starts past the base: the last removed record's link,
	 * and the state of the rows it left, whose digest meta holds. */
	int64_t base_seq = meta_int(db, "chain_base_seq", 0);
	uint8_t base[GS_CHAIN_HASH];
	memcpy(base, gs_chain_genesis, sizeof base);
	if (base_seq > 0) {
		char hex[2 * GS_CHAIN_HASH + 8] = "", objs[2 * GS_CHAIN_HASH + 8] = "";
		uint8_t want[GS_CHAIN_HASH], have[GS_CHAIN_HASH];
		meta_text(db, "chain_base_hash", hex, sizeof hex);
		meta_text(db, "chain_base_objects", objs, sizeof objs);
		if (gs_chain_unhex(hex, base) != 0 || gs_chain_unhex(objs, want) != 0) {
			bad(out, (uint64_t)base_seq, "meta", 0,
			    "the retention base in meta is not a link");
			goto done;
		}
		if (gs_chain_base_objects_digest(db, have) != 0) {
			snprintf(out->why, sizeof out->why, "reading chain_base_objects failed: %s",
			         sqlite3_errmsg(db));
			rc = -1;
			goto done;
		}
		if (memcmp(want, have, GS_CHAIN_HASH) != 0) {
			bad(out, (uint64_t)base_seq, "chain_base_objects", 0,
			    "the rows the retention anchored were changed (chain_base_objects does "
			    "not"
			    " match meta)");
			goto done;
		}
		if ((uint64_t)base_seq + 1 > (uint64_t)start)
			start = base_seq + 1;
		out->base_seq = (uint64_t)base_seq;
	}
	out->first_seq = (uint64_t)start;
	/* The chain ends at the base when the retention removed every record. */
	out->last_seq = out->base_seq;
	/* The updated-in-place tables, each against the last record about its rows. */
	static const struct {
		const char *table, *key;
		gs_chain_kind kind;
		const char *kinds;    /* the record kinds about its rows, as SQL (a tenants row's
		                       * last record is kind 8 or 9, which says what it covers) */
		const char *prechain; /* meta key: rows up to it predate the chain */
	} updated[] = {
	        {"packets", "packet", GS_CHAIN_PACKET, "1", "chain_start_packet"},
	        {"contexts", "context", GS_CHAIN_CONTEXT, "2", "chain_start_context"},
	        {"allocations", "allocation", GS_CHAIN_ALLOCATION, "3", "chain_start_allocation"},
	        {"tenants", "id", GS_CHAIN_TENANT, "8, 9", NULL},
	};
	bool digests = version >= 9;
	bool failed = walk_chain(db, out, base, pin, digests) != 0 ||
	              (out->ok && check_head(db, out) != 0);
	if (!failed && out->ok)
		check_head_seq(db, out);
	if (!failed && out->ok && pin)
		check_pin(pin, out);
	failed = failed || (out->ok && check_start(db, out) != 0) ||
	         (out->ok && check_rows_exist(db, out) != 0) ||
	         (out->ok && check_schema(db, out) != 0) ||
	         (out->ok && check_packet_ids(db, out) != 0);
	for (size_t i = 0; !failed && i < sizeof updated / sizeof updated[0]; i++) {
		/* Kinds as literals, so the partial index chain_objects_v5 serves the lookup. */
		char last[768];
		if (updated[i].kind == GS_CHAIN_PACKET)
			snprintf(
			        last, sizeof last,
			        "SELECT seq, state_digest, 1 FROM packet_event_rows WHERE packet = "
			        "?1"
			        " UNION ALL SELECT seq, NULL, %d FROM packets WHERE packet = ?1 AND"
			        " seq <> 0 UNION ALL SELECT end_seq, NULL, %d FROM packets WHERE"
			        " packet = ?1 AND end_seq <> 0"
			        /* A kept READY or RUNNING (schema 9): the state its row keeps. */
			        " UNION ALL SELECT ready_seq, %s, 1 FROM packets WHERE"
			        " packet = ?1 AND ready_seq <> 0 UNION ALL SELECT run_seq,"
			        " %s, 1 FROM packets WHERE packet = ?1 AND run_seq <> 0"
			        /* An anchor stands for records up to the base: newer than a
			         * kept SUBMITTED its row still holds (the anchored event
			         * followed it). */
			        " UNION ALL SELECT %llu, state, kind FROM chain_base_objects WHERE"
			        " kind = %d AND ref = ?1 ORDER BY 1 DESC LIMIT 1",
			        LAST_KEPT_SUBMITTED, LAST_KEPT_END,
			        digests ? "ready_digest" : "NULL", digests ? "run_digest" : "NULL",
			        (unsigned long long)out->base_seq, (int)updated[i].kind);
		else
			snprintf(
			        last, sizeof last,
			        "SELECT seq, state, kind FROM chain WHERE kind IN (%s) AND ref = ?1"
			        " UNION ALL SELECT 0, state, kind FROM chain_base_objects WHERE "
			        "kind"
			        " IN (%s) AND ref = ?1 ORDER BY 1 DESC LIMIT 1",
			        updated[i].kinds, updated[i].kinds);
		failed = check_states(db, !digests, out, updated[i].table, updated[i].key,
		                      updated[i].kind, last,
		                      updated[i].prechain ? meta_int(db, updated[i].prechain, 0)
		                                          : 0) != 0;
	}
	if (failed) {
		if (!out->why[0])
			snprintf(out->why, sizeof out->why, "reading the file failed: %s",
			         sqlite3_errmsg(db));
		rc = -1;
	}
done:
	sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	return rc;
}
