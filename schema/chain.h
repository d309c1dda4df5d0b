/*
 * The audit file's hash chain: what makes an edit of the file with any SQLite tool visible.
 *
 * Every record the daemon writes has an audit sequence number (seq) and a link:
 *
 *   link(seq) = BLAKE2b-128(link(previous) | seq | kind | ref | columns of its appended row(s)
 *                           | digest of the state it left)
 *
 * kind says what the record is (gs_chain_kind), ref the id it is about. Columns are encoded in
 * the order of the daemon's INSERT, each as a tag byte and its value (integer: 8 bytes
 * little-endian; text: 4-byte length and bytes; NULL: the tag alone); the link and digest
 * columns themselves are not part of it. The state is a row digest: BLAKE2b-128 of a table tag
 * and the row's columns, preceded in the link by tag 0xff (0xfe alone when there is none). A record
 * that appends a row (a packet event, a move, an error, a note) keeps its link in that row, and a
 * packet event also the digest of the packets row it left (state_digest), unless a later event of
 * the same packet in the same commit left the row (then no state: 16 zero bytes stand in, and the
 * column is NULL); the others (a context, an allocation) have a row in the table chain. A
 * SUBMITTED event's link also covers its packet's allocation list (packet_allocations rows, by
 * slot), written in the same record. meta.chain_head is the link of the last record committed.
 *
 * Events a packets row keeps (schema 8: its SUBMITTED, and a straight run's READY, RUNNING and
 * COMPLETED; schema/audit.sql) are records like the rows of packet_event_rows: kind 1, their
 * appended row the event as the view packet_events shows it (packet, state, time, detail, seq)
 * read from the packets row, a SUBMITTED's followed by its allocation list. Their states: a
 * kept SUBMITTED's is the row as submitted (the row's columns with state SUBMITTED, patch flags
 * 0, no times but submitted_ns, no counts, no result, the Resubmission flag clear), a kept
 * COMPLETED's the row as it is, a kept READY's and RUNNING's the row's ready_digest and
 * run_digest (schema 9: set where it was the last event of its packet in its commit, else NULL
 * for none). A packets row's digest ends with its run_ns (schema 9: the RUNNING's own time where
 * the GPU's start moved started_ns) where that is set, so it covers the time a kept RUNNING
 * shows even after the retention removed that record's link. The row keeps only its newest link
 * (packets.hash): a kept event before it is checked through the links after it. A kept READY or
 * RUNNING whose packet then leaves the straight run moves to packet_event_rows unchanged (its
 * digest as state_digest) with no link of its own (hash NULL), so its link is checked the same way.
 *
 * This is chain format 2 (schema 4). Format 1 (schema 3) had 32-byte links and a state digest
 * on every packet event; a file upgraded from it restarts the chain after the last format-1
 * record (meta.chain_start_seq) and keeps that record's link as meta.chain_v1_head.
 *
 * 16-byte links keep a packet's audit under 512 bytes: finding a second record with the same
 * link takes about 2^128 BLAKE2b evaluations, and two records made up together to share one
 * about 2^64; the daemon writes what it observed, not what a tenant chooses.
 *
 * Verifying walks every record in seq order, reads its rows back, digests them again and
 * recomputes each link: a changed, moved or added row breaks the link of its record, a removed
 * one the link of the record after it (or, for the newest, the head in meta). Each row of an
 * updated-in-place table (packets, contexts, allocations) must match the state of the last
 * record about it (a packet's last event always carries one: it is the last of its commit).
 * Every such row a record (or a retention anchor) vouches for must exist; meta.chain_head_seq
 * must name the newest record; records below meta.chain_start_seq must not carry format-2
 * links, and a chain that starts at record 1 has no pre-chain rows; the views, triggers and
 * packet_states must be those of the embedded schema (gs_audit_schema_sql). A head kept
 * elsewhere (gs_chain_pin) must be a record of the chain with that link.
 *
 * The writer (server/audit) and the verifier (gpusched audit verify) share this code, so they
 * cannot disagree on the encoding. Libsodium provides BLAKE2b. Anyone who can write the file can
 * also recompute every link after an edit: keep the head that verify prints (or the daemon logs
 * at stop) somewhere else to catch that.
 */
#ifndef GS_AUDIT_CHAIN_H
#define GS_AUDIT_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sodium.h>
#include <sqlite3.h>

#define GS_CHAIN_HASH 16 /* bytes of a link */
/* The newest schema version (meta.schema_version) whose records the verifier knows where to
 * find: schema/audit.sql's. A newer file is refused, not misread. */
#define GS_AUDIT_SCHEMA_KNOWN 9
#define GS_CHAIN_FORMAT       2  /* meta.chain_format */
#define GS_CHAIN_DIGEST       16 /* bytes of a row digest */

/* DXGK_SUBMITCOMMANDFLAGS.Resubmission: the daemon sets it when a packet runs again, never a
 * client, so a packet's flags as submitted are its row's without it. */
#define GS_CHAIN_RESUBMISSION_BIT 0x80u

/* Record kinds in chain.kind. */
typedef enum gs_chain_kind {
	GS_CHAIN_PACKET = 1,     /* a packet event (packet_events) and the packets row */
	GS_CHAIN_CONTEXT = 2,    /* the contexts row */
	GS_CHAIN_ALLOCATION = 3, /* the allocations row */
	GS_CHAIN_ERROR = 4,      /* an errors row */
	GS_CHAIN_NOTE = 5,       /* a notes row */
	GS_CHAIN_MOVE = 6,       /* a moves row */
	/* 7 was a packet's allocation list, a record of its own before format 2 */
	GS_CHAIN_TENANT = 8, /* the tenants row of an admin-created tenant (before schema 5) */
	/* the same row with its limits (max_message, packet_limit, sync_limit): schema 5 on */
	GS_CHAIN_TENANT_LIMITS = 9,
} gs_chain_kind;

/* A row digest being computed, one column at a time in INSERT order. */
typedef struct gs_chain_row {
	crypto_generichash_state st;
} gs_chain_row;

void gs_chain_row_init(gs_chain_row *r, gs_chain_kind table);
void gs_chain_row_int(gs_chain_row *r, int64_t v);
/* s NULL: SQL NULL. */
void gs_chain_row_text(gs_chain_row *r, const char *s);
void gs_chain_row_final(gs_chain_row *r, uint8_t out[GS_CHAIN_DIGEST]);

/*
 * The link of one record, computed as a stream: begin with the previous link and the record's
 * seq, kind and ref; feed the columns of the row(s) it appended with gs_chain_row_int/_text
 * (none for a context or an allocation); end with the digest of the state it left (NULL: none).
 */
void gs_chain_link_begin(gs_chain_row *r, const uint8_t prev[GS_CHAIN_HASH], uint64_t seq,
                         gs_chain_kind kind, uint64_t ref);
void gs_chain_link_end(gs_chain_row *r, const uint8_t *state, uint8_t out[GS_CHAIN_HASH]);

/* Feeds the appended row of a record (by seq) into the link r, as the verifier reads it, and
 * with_list (a SUBMITTED packet event) then the packet's allocation list (packet_allocations
 * rows of packet ref, by slot): 1, 0 when the row is missing, -1 on error; *table names the
 * table (NULL for kinds with no appended row). */
int gs_chain_appended_feed(sqlite3 *db, gs_chain_kind kind, uint64_t seq, uint64_t ref,
                           bool with_list, gs_chain_row *r, const char **table);
/* The digest of the current row of an updated-in-place table (packets, contexts,
 * allocations) with key ref: 1, 0 when missing, -1 on error; 0 and *table NULL for others. */
int gs_chain_state_digest(sqlite3 *db, gs_chain_kind kind, uint64_t ref,
                          uint8_t out[GS_CHAIN_DIGEST], const char **table);

/* Initialises libsodium (its fastest BLAKE2b for this CPU); 0, or -1 when it cannot. Safe to
 * call again and from any thread. */
int gs_chain_init(void);

/* Hex text of a link (2 * GS_CHAIN_HASH + 1 bytes with the NUL), and back: 0 or -1. */
void gs_chain_hex(const uint8_t h[GS_CHAIN_HASH], char *out);
int gs_chain_unhex(const char *hex, uint8_t h[GS_CHAIN_HASH]);

/* The digest of the table chain_base_objects (the rows the retention anchored), in key order:
 * what meta.chain_base_objects holds. 0 or -1. */
int gs_chain_base_objects_digest(sqlite3 *db, uint8_t out[GS_CHAIN_HASH]);

/* The hash before the first record of a file. */
extern const uint8_t gs_chain_genesis[GS_CHAIN_HASH];

/* What a verification found. */
typedef struct gs_chain_report {
	bool ok;
	uint64_t records;   /* chain rows checked */
	uint64_t rows;      /* rows of the updated-in-place tables checked */
	uint64_t first_seq; /* the chain covers seq >= this (older records predate it) */
	uint64_t base_seq;  /* the retention removed records up to this one (0: none) */
	uint64_t last_seq;  /* the head of the chain */
	uint8_t head[GS_CHAIN_HASH];
	uint64_t bad_seq;   /* the first record that does not match (0: see bad_table) */
	char bad_table[32]; /* the table of the row that does not match */
	int64_t bad_row;    /* its key (seq, packet, context or allocation id) */
	char why[256];
	bool schema_checked; /* the views, triggers and packet_states were compared with the
	                      * schema (false: the file has another schema version) */
	bool pin_checked;    /* a kept head was compared (false: none, or the retention removed
	                      * its record) */
	bool pin_found, pin_matched; /* (the walk's findings about the kept head) */
} gs_chain_report;

/* A head kept elsewhere (what verify printed, or the daemon logged at stop): the record's seq
 * and its link. */
typedef struct gs_chain_pin {
	uint64_t seq;
	uint8_t hash[GS_CHAIN_HASH];
} gs_chain_pin;

/* The daemon's schema (schema/audit.sql, embedded at build time). */
extern const char gs_audit_schema_sql[];

/* Verifies the file open on db (read in one transaction): 0 with *out filled (out->ok says
 * whether it matched), or -1 with out->why saying why it could not be read. */
int gs_chain_verify(sqlite3 *db, gs_chain_report *out);
/* The same, and with pin non-NULL the chain must also pass that record with that link. */
int gs_chain_verify_pinned(sqlite3 *db, const gs_chain_pin *pin, gs_chain_report *out);

#endif
