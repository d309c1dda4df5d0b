/*
 * The audit file's hash chain: what makes an edit of the file with any SQLite tool visible.
 *
 * Every record the daemon writes has an audit sequence number (seq) and one row in the table
 * `chain` (see audit.sql). That row holds the record's kind, the id it is about (ref), the
 * digest of the row state it leaves in an updated-in-place table (packets, contexts,
 * allocations: state) and a hash linking it to the record before it:
 *
 *   hash(seq) = BLAKE2b-256(hash(previous) | seq | kind | ref | digest of its appended row(s)
 *                           | state)
 *
 * A row digest is BLAKE2b-128 of the row's columns in the order of the daemon's INSERT, each
 * as a tag byte and its value (integer: 8 bytes little-endian; text: 4-byte length and bytes;
 * NULL: the tag alone). The appended rows (packet_events, moves, errors, notes by seq;
 * packet_allocations by packet) are read back and digested again when verifying, so changing,
 * removing or moving one breaks the hash of its record; a row of an updated-in-place table must
 * match the state of the last record about it.
 *
 * The writer (server/audit) and the verifier (gpusched audit verify) share this code, so they
 * cannot disagree on the encoding. Libsodium provides BLAKE2b.
 */
#ifndef GS_AUDIT_CHAIN_H
#define GS_AUDIT_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sodium.h>
#include <sqlite3.h>

#define GS_CHAIN_HASH   32 /* bytes of a link */
#define GS_CHAIN_DIGEST 16 /* bytes of a row digest */

/* Record kinds in chain.kind. */
typedef enum gs_chain_kind {
	GS_CHAIN_PACKET = 1,        /* a packet event (packet_events) and the packets row */
	GS_CHAIN_CONTEXT = 2,       /* the contexts row */
	GS_CHAIN_ALLOCATION = 3,    /* the allocations row */
	GS_CHAIN_ERROR = 4,         /* an errors row */
	GS_CHAIN_NOTE = 5,          /* a notes row */
	GS_CHAIN_MOVE = 6,          /* a moves row */
	GS_CHAIN_PACKET_ALLOCS = 7, /* a packet's packet_allocations rows */
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

/* The link of one record; appended and state may be NULL (none: 16 zero bytes stand in). */
void gs_chain_link(const uint8_t prev[GS_CHAIN_HASH], uint64_t seq, gs_chain_kind kind,
                   uint64_t ref, const uint8_t *appended, const uint8_t *state,
                   uint8_t out[GS_CHAIN_HASH]);

/* The digest of the appended row(s) of a record (by seq; packet_allocations by ref): 1, 0 when
 * missing, -1 on error; *table names the table (NULL for kinds with no appended row). */
int gs_chain_appended_digest(sqlite3 *db, gs_chain_kind kind, uint64_t seq, uint64_t ref,
                             uint8_t out[GS_CHAIN_DIGEST], const char **table);
/* The digest of the current row of an updated-in-place table (packets, contexts,
 * allocations) with key ref: 1, 0 when missing, -1 on error; 0 and *table NULL for others. */
int gs_chain_state_digest(sqlite3 *db, gs_chain_kind kind, uint64_t ref,
                          uint8_t out[GS_CHAIN_DIGEST], const char **table);

/* The hash before the first record of a file. */
extern const uint8_t gs_chain_genesis[GS_CHAIN_HASH];

/* What a verification found. */
typedef struct gs_chain_report {
	bool ok;
	uint64_t records;   /* chain rows checked */
	uint64_t rows;      /* rows of the updated-in-place tables checked */
	uint64_t first_seq; /* the chain covers seq >= this (older records predate it) */
	uint64_t last_seq;  /* the head of the chain */
	uint8_t head[GS_CHAIN_HASH];
	uint64_t bad_seq;   /* the first record that does not match (0: see bad_table) */
	char bad_table[32]; /* the table of the row that does not match */
	int64_t bad_row;    /* its key (seq, packet, context or allocation id) */
	char why[256];
} gs_chain_report;

/* Verifies the file open on db (read in one transaction): 0 with *out filled (out->ok says
 * whether it matched), or -1 with out->why saying why it could not be read. */
int gs_chain_verify(sqlite3 *db, gs_chain_report *out);

#endif
