/*
 * Audit: every packet's life, every context and allocation, and every rejected request is
 * written to SQLite by one writer thread in large transactions (group commit, WAL).
 *
 * All gsd_audit_* producer calls are made from the loop thread only; they copy what they are
 * given into an in-memory queue and return at once. The writer thread drains the queue in one
 * transaction per batch, then calls each record's ack callback (on the writer thread), so a
 * caller can answer a client only once its record is durable in the file.
 *
 * History reads use their own read-only connections (gsd_history_*), callable from any thread.
 */
#ifndef GSD_AUDIT_H
#define GSD_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wddm.h"

typedef struct gsd_audit gsd_audit;

/* The schema version this daemon writes; a file with a newer one is refused at open. */
#define GSD_AUDIT_SCHEMA_VERSION 9
/* The READY, RUNNING and COMPLETED events a packets row keeps (schema 8) have seqs at most
 * this far apart, so a read of the events in a seq range finds them by the row's end_seq (or,
 * before the run ends, by its ready_seq: schema 9). */
#define GSD_AUDIT_FOLD_SPAN 65536
/* schema/audit.sql is compiled in as gs_audit_schema_sql (schema/chain.h), shared with the
 * verifier. */

/* Longer strings are cut (at a UTF-8 character boundary) to these many bytes when queued. */
#define GSD_AUDIT_TENANT_MAX 63
#define GSD_AUDIT_TEXT_MAX   255

/* Called on the writer thread (or on the thread in gsd_audit_commit_here) once the record is
 * committed (ok = true) or could not be written (ok = false: its commit failed, or SQLite
 * refused the record itself). If the record cannot even be queued (out of memory), it is
 * called at once, on the caller's thread, with ok = false. */
typedef void (*gsd_audit_ack_fn)(void *arg, bool ok);

typedef struct gsd_audit_options {
	bool sync_full;     /* PRAGMA synchronous=FULL (fsync per commit); default NORMAL */
	uint32_t max_batch; /* records per transaction, 0 = 4096 */
	uint64_t wal_limit; /* bytes; checkpoint (TRUNCATE) when the WAL grows past it */
	/* Writes no hash chain: only bench_audit's baseline uses it (the file does not verify). */
	bool no_chain;
	/* Benchmarks only (gpuschedd --bench-null-audit): every record is acknowledged as
	 * written without being written, so a benchmark can measure what auditing costs. The
	 * file keeps nothing of the run: no history, no verification, no guarantee. */
	bool null_sink;
	/* Retention: records of packets older than retain_age_ns, or beyond the newest
	 * retain_packets packets, leave the file (0: no limit). Verification still holds: see
	 * schema/chain.h. */
	uint64_t retain_age_ns;
	uint64_t retain_packets;
	/* Records that carry an ack are committed by the producer's thread in
	 * gsd_audit_commit_here, when the writer is idle, instead of waking the writer (whose
	 * wake-up costs more than the commit on a small machine). Ignored with sync_full. */
	bool commit_on_caller;
	/* A commit on the caller's thread longer than this leaves commits to the writer for a
	 * second (0: 2 ms); tests make it tiny. */
	uint64_t caller_slow_ns;
} gsd_audit_options;

/* The mutable and immutable columns of one packet row. Strings are copied. */
typedef struct gsd_packet_rec {
	uint64_t packet;
	const char *tenant;
	uint64_t device;
	uint64_t context;
	uint32_t adapter;
	uint32_t node;
	uint64_t fence;
	uint32_t submit_flags;
	uint32_t patch_flags;
	uint32_t dma_size;
	uint32_t allocation_count;
	uint32_t patch_count;
	int state; /* Gpusched__V1__PacketState value */
	uint64_t submitted_ns, ready_ns, started_ns, completed_ns;
	/* Time of the event this record appends, on the daemon's clock (the node's virtual
	 * clock under --clock virtual); 0 = the wall time it was queued. */
	uint64_t event_ns;
	uint32_t preemptions;
	uint32_t resubmissions;
	const char *result;
	/* The time of its RUNNING where started_ns is no longer it (a GPU that reports its own
	 * start moves started_ns to it when the run ends); 0 = started_ns is. */
	uint64_t run_ns;
} gsd_packet_rec;

typedef struct gsd_context_rec {
	uint64_t context;
	const char *tenant;
	uint64_t device;
	uint32_t adapter;
	uint32_t node;
	uint32_t flags;
	uint32_t priority_class;
	int32_t priority;
	gs_context_info info; /* DXGK_CONTEXTINFO (reserved is not recorded) */
	uint64_t created_ns;
	uint64_t destroyed_ns; /* 0 while alive */
} gsd_context_rec;

typedef struct gsd_allocation_rec {
	uint64_t allocation;
	const char *tenant;
	uint64_t device;
	uint32_t adapter;
	uint64_t size;
	uint32_t supported_segment_set;
	uint32_t segment_preference;
	uint32_t priority;
	uint32_t flags;
	uint32_t segment; /* current placement; 0 = not resident */
	uint64_t offset;
	uint64_t created_ns;
	uint64_t destroyed_ns;
} gsd_allocation_rec;

/* A tenant made by an admin request, as it stands (schema table `tenants`): recorded when it is
 * created and when it is removed, so a restarted daemon has it again (gsd_history_tenants). */
typedef struct gsd_tenant_rec {
	uint64_t id;            /* never reused in a file */
	const char *tenant;     /* its name */
	const char *audit_name; /* who it is in the tenant columns (NAME, or NAME#ID) */
	const char *token_hash; /* the salted hash of its token ("b2$SALT$HASH") */
	uint32_t kind;          /* Gpusched__V1__TenantKind */
	uint32_t share;
	uint32_t priority_ceiling;
	uint32_t context_limit;
	uint32_t allocation_limit;
	uint32_t max_requests_per_second;
	uint64_t memory_quota;
	bool admin;
	uint64_t created_ns;
	uint64_t removed_ns;                            /* 0 while it exists */
	uint32_t max_message, packet_limit, sync_limit; /* 0: the defaults */
} gsd_tenant_rec;

int gsd_audit_open(const char *path, const gsd_audit_options *opt, gsd_audit **out);
/* The key of the wire ids (core/wire_id.h): meta 'wire_key' of the file, made with it (or when
 * an older file was upgraded) and the same at every open; a null sink's is random per run. */
#define GSD_AUDIT_WIRE_KEY_BYTES 32
void gsd_audit_wire_key(const gsd_audit *a, unsigned char out[GSD_AUDIT_WIRE_KEY_BYTES]);
/* Drains and commits everything queued, stops the writer thread, closes the file. */
void gsd_audit_close(gsd_audit *a);
/*
 * With commit_on_caller: commits everything queued, on the calling thread, when a record waits
 * for its ack; its acks are called on this thread. It leaves the work to the writer (and wakes
 * it) when the writer is writing, when a lock is held (a checkpoint), for a queue of over 1024
 * records, for a second after one of its commits took over caller_slow_ns (doubling while
 * they stay slow, up to 64 s), and for what only the writer does: retries after a failed
 * commit, a retention step, the WAL's TRUNCATE, a prune.
 * The producer calls it after a round of work (the daemon: before its loop sleeps), never
 * while it holds a lock an ack takes; with leave_to_writer it only wakes the writer for what
 * waits (the producer has other work). True when it committed.
 */
bool gsd_audit_commit_here(gsd_audit *a, bool leave_to_writer);

/*
 * Every record that appends a row (a packet's event, a move, an error, a note) is numbered when
 * it is queued: the audit sequence number, one sequence across those four tables (their seq
 * column), in the order recorded, continued from the file at open. The producers below return
 * it (0 when the record could not be queued), so events published about a record can carry
 * the number that finds it in the file.
 */

/* Loop thread: with on, the records queued from now on are held back and reach the writer
 * together when it is called with off, so that no commit falls between them (a packet's READY,
 * RUNNING and COMPLETED, made one after the other, then go into its packets row: schema 8).
 * Calls in between must not wait for an acknowledgement. NULL a: nothing. */
void gsd_audit_group(gsd_audit *a, bool on);

/* Upserts the packet row and appends one event (state = rec->state, detail may be NULL). */
uint64_t gsd_audit_packet(gsd_audit *a, const gsd_packet_rec *rec, const char *detail,
                          gsd_audit_ack_fn ack, void *ack_arg);
void gsd_audit_context(gsd_audit *a, const gsd_context_rec *rec);
/* Commits everything queued so far now (records nobody waits for otherwise linger up to 2 ms)
 * and then calls ack on the writer thread: a barrier for readers of the file. */
void gsd_audit_flush(gsd_audit *a, gsd_audit_ack_fn ack, void *ack_arg);
/* Runs the retention now, every step due, in order with the records queued before it; ack as
 * for a flush. Nothing happens when no retention is configured. */
void gsd_audit_prune(gsd_audit *a, gsd_audit_ack_fn ack, void *ack_arg);
void gsd_audit_allocation(gsd_audit *a, const gsd_allocation_rec *rec);
/* Copies the record (strings included); nothing is acknowledged. */
void gsd_audit_tenant(gsd_audit *a, const gsd_tenant_rec *rec);
/* One action of the memory manager on an allocation (schema table `moves`). Segment 0 means
 * system memory (or nowhere, for PLACE's from and FREE's to). */
typedef struct gsd_move_rec {
	uint64_t allocation;
	const char *tenant; /* the allocation's owner */
	uint64_t device;
	uint32_t adapter;
	uint64_t packet;     /* the paging packet moving the bytes; 0 = none */
	uint64_t for_packet; /* the render packet it was made resident for; 0 = none */
	int kind;            /* Gpusched__V1__MoveKind */
	uint32_t from_segment;
	uint64_t from_offset;
	uint32_t to_segment;
	uint64_t to_offset;
	uint64_t bytes;
	uint32_t transfer_flags; /* DXGK_TRANSFERFLAGS of the whole transfer */
	uint32_t pieces;         /* sub-transfers */
	const char *reason;      /* may be NULL */
	uint64_t time_ns;        /* 0 = the wall time it is queued */
} gsd_move_rec;
/* Copies the record (strings included); nothing is acknowledged. */
uint64_t gsd_audit_move(gsd_audit *a, const gsd_move_rec *rec);
/* The SUBMITTED record of a packet (rec->state must be SUBMITTED) with its allocation list
 * (schema table `packet_allocations`, so history can be filtered by allocation): one record,
 * whose link in the hash chain covers the list. write may be NULL (all read). Both arrays are
 * copied (one malloc; an empty list records none). Otherwise as gsd_audit_packet. */
uint64_t gsd_audit_submitted(gsd_audit *a, const gsd_packet_rec *rec, const char *detail,
                             const uint64_t *allocations, const bool *write, size_t n,
                             gsd_audit_ack_fn ack, void *ack_arg);

/* A rejected or failed request: what was asked, the status returned and why. */
uint64_t gsd_audit_error(gsd_audit *a, const char *tenant, const char *request, int status,
                         const char *message);
/* Free-form daemon event (start, stop, engine reset, ban...). */
uint64_t gsd_audit_note(gsd_audit *a, const char *tenant, const char *kind, const char *detail);

typedef struct gsd_audit_stats {
	uint64_t records;  /* committed */
	uint64_t commits;  /* transactions */
	uint64_t queued;   /* waiting now */
	uint64_t failures; /* failed commits */
	uint64_t dropped;  /* records never written: refused by SQLite on their own, answered "not
	                      written" after a failed commit, past RETRY_MAX kept during an
	                      outage or still kept at close, or not queued for want of memory */
	uint64_t checkpoints; /* TRUNCATE checkpoints run because the WAL grew past wal_limit */
	uint64_t pruned;      /* sequence numbers the retention removed */
	/* Packet events committed: as rows of packet_event_rows (a wait, a preemption, a fault,
	 * or a straight run whose records were not all in one commit), and kept in the packet's
	 * own row (its SUBMITTED, and a straight READY, RUNNING and COMPLETED). */
	uint64_t event_rows, events_kept;
} gsd_audit_stats;
void gsd_audit_get_stats(gsd_audit *a, gsd_audit_stats *out);

/* Whether records are being committed. A failed commit (disk full, the file locked by another
 * process) makes it FAILING until a later commit succeeds; FILE_GONE when the file at the
 * configured path was removed or replaced under the daemon (nothing is committed until the
 * same file is back). Callers refuse work that needs an acknowledged record meanwhile. */
typedef enum gsd_audit_health {
	GSD_AUDIT_OK = 0,
	GSD_AUDIT_FAILING = 1,
	GSD_AUDIT_FILE_GONE = 2,
} gsd_audit_health;
gsd_audit_health gsd_audit_get_health(gsd_audit *a);
/* Packets found in flight (not final) at open, recorded then as ABORTED "daemon restarted":
 * what a previous daemon left when it died. */
uint64_t gsd_audit_reconciled(const gsd_audit *a);

/*
 * Record numbers (seq) stay at or below GSD_AUDIT_SEQ_MAX, the highest value a wire id may
 * name (core/wire_id.h: GSD_WIRE_ISSUED_MAX). Every packet has a record, so packet ids and
 * fences stay below it too. Past it a record is not made (dropped, counted, logged once); the
 * daemon refuses new submissions GSD_AUDIT_SEQ_RESERVE numbers earlier, so the requests that
 * still make records meanwhile (objects, errors, notes) have room while an operator starts a
 * new audit file. gsd_audit_seqs_left: how many numbers are left (loop thread).
 */
#define GSD_AUDIT_SEQ_MAX     ((UINT64_C(1) << 44) - 1)
#define GSD_AUDIT_SEQ_RESERVE (UINT64_C(1) << 32)
uint64_t gsd_audit_seqs_left(const gsd_audit *a);

/* ---- history reads (own read-only connection; any thread) ---- */

typedef struct gsd_history_filter {
	const char *tenant;     /* required: a tenant only ever sees its own rows */
	uint64_t context;       /* 0 = any */
	uint64_t device;        /* 0 = any */
	int state;              /* 0 = any */
	int32_t node;           /* -1 = any */
	uint64_t before_packet; /* newest-first cursor: rows submitted before this packet */
	uint32_t limit;
	uint64_t allocation; /* 0 = any; else packets that listed it (packet_allocations) or
	                        moved it (moves) */
	bool paging;         /* only the memory manager's packets (Paging or ContextSwitch) */
	uint64_t since_ns;   /* submitted_ns >= this; 0 = no bound */
	uint64_t until_ns;   /* submitted_ns < this; 0 = no bound */
	uint32_t flags_mask; /* any of these submit flags; 0 = any */
	/* 0 = any; else the packets with this fence (a fence is a context's: with `context` it
	 * names one packet; without, one on each context that got that far). */
	uint64_t fence;
	bool oldest_first;
	uint64_t after_packet; /* oldest-first cursor: rows submitted after this packet */
} gsd_history_filter;

/* A fetched packet row; strings point into storage owned by the result. */
typedef struct gsd_history_row {
	gsd_packet_rec rec;
	const char *dispatches; /* its SUBMITTED event's DISPATCH summary, or NULL */
} gsd_history_row;

typedef struct gsd_history_result {
	gsd_history_row *rows;
	size_t count;
	char *strings; /* backing store of tenant/result strings */
} gsd_history_result;

typedef struct gsd_event_row {
	uint64_t seq;
	uint64_t packet;
	uint64_t context;
	int state;
	uint64_t time_ns;
	char detail[GSD_AUDIT_TEXT_MAX + 1]; /* whole: a READY's reasons fill it */
} gsd_event_row;

/* Rows in submission order (submitted_ns, then packet id), newest first unless
 * f->oldest_first. A cursor packet that is not in the file counts as if it were, at the
 * submission time of the nearest packet id below it. Return 0 or -1 with err filled. */
int gsd_history_packets(const char *path, const gsd_history_filter *f, gsd_history_result *out,
                        char *err, size_t errcap);
void gsd_history_result_free(gsd_history_result *r);
/* History reads keep idle read-only connections for the next read; this closes those of the
 * file at path (NULL: all). gsd_audit_close calls it for its own file. */
void gsd_history_release(const char *path);
/* The SQL text gsd_history_packets runs for f (parameters ?1.. bound there), for tests and
 * tools that check its plan with EXPLAIN QUERY PLAN. */
#define GSD_HISTORY_SQL_MAX 8192
void gsd_history_query_sql(const gsd_history_filter *f, char *sql, size_t cap);
/* Calls ban(arg, audit_name) for every tenant whose last note of kind tenant_banned or
 * tenant_unbanned is a ban: bans survive a restart. 0, or -1 with err filled. */
int gsd_history_bans(const char *path, void (*ban)(void *arg, const char *tenant), void *arg,
                     char *err, size_t errcap);

/* One packet of `tenant` (state, fence, result...) into *out, its strings NULL. Returns 1 when
 * found, 0 when the file has no such packet of that tenant, -1 with err filled. */
int gsd_history_packet(const char *path, const char *tenant, uint64_t packet, gsd_packet_rec *out,
                       char *err, size_t errcap);
/* Every tenant recorded in the file at path (removed ones too), in id order, to fn; *max_id the
 * highest id (0: none). 0, or -1 with err filled. Read before the daemon serves. */
typedef void (*gsd_tenant_row_fn)(void *arg, const gsd_tenant_rec *rec);
int gsd_history_tenants(const char *path, gsd_tenant_row_fn fn, void *arg, uint64_t *max_id,
                        char *err, size_t errcap);
/* The highest packet id recorded in the file, so a restarted daemon continues the sequence
 * instead of reusing (and overwriting) old rows. */
int gsd_history_last_packet(const char *path, uint64_t *packet, char *err, size_t errcap);
/* The wire ids' key of the file at path (meta 'wire_key'), read-only: 0, or -1 with err filled
 * (no such file, or one no daemon of schema 6 opened yet). */
int gsd_history_wire_key(const char *path, unsigned char out[GSD_AUDIT_WIRE_KEY_BYTES], char *err,
                         size_t errcap);
/*
 * Object handles are random (core/object.c); before one is given out the daemon asks the file
 * whether it names a row of contexts or allocations (the tables keyed by handle) of an earlier
 * run or of this one. One read-only connection, used by the loop thread only, and a prepared
 * point lookup on each table's primary key. *floor: the highest handle rows older than the
 * hash chain may have (meta chain_start_context / chain_start_allocation, 0 in a file that had
 * the chain from the start): the verifier takes a row with no record and a handle at or below
 * it for one written before the chain, so no new handle may be at or below it.
 */
typedef struct gsd_handle_check gsd_handle_check;
int gsd_history_handles_open(const char *path, gsd_handle_check **out, uint64_t *floor, char *err,
                             size_t errcap);
/* 1: a row of contexts or allocations has this handle; 0: none; -1: the lookup failed. */
int gsd_history_handle_used(gsd_handle_check *c, uint64_t handle);
void gsd_history_handles_close(gsd_handle_check *c);
/* Events of one packet of `tenant`, oldest first. *out is malloc'd. */
int gsd_history_events(const char *path, const char *tenant, uint64_t packet, gsd_event_row **out,
                       size_t *count, char *err, size_t errcap);
/* Events of any packet of `tenant` with after_seq < seq < before_seq (before_seq 0: no upper
 * bound), in seq order, at most `limit` (0: the history default): what a subscriber that
 * missed published events reads back. *out is malloc'd. */
int gsd_history_events_range(const char *path, const char *tenant, uint64_t after_seq,
                             uint64_t before_seq, uint32_t limit, gsd_event_row **out,
                             size_t *count, char *err, size_t errcap);
/* The same for the events of packets submitted in [since_ns, until_ns) (0: unbounded), read
 * through the packets' (tenant, submitted_ns) index. */
int gsd_history_events_window(const char *path, const char *tenant, uint64_t after_seq,
                              uint64_t since_ns, uint64_t until_ns, uint32_t limit,
                              gsd_event_row **out, size_t *count, char *err, size_t errcap);

/* ---- usage: packet_usage (schema/audit.sql) summed per tenant, context or engine ---- */

typedef enum gsd_usage_by {
	GSD_USAGE_BY_TENANT = 0,
	GSD_USAGE_BY_CONTEXT = 1,
	GSD_USAGE_BY_NODE = 2,
} gsd_usage_by;

typedef struct gsd_usage_filter {
	const char *tenant; /* NULL: every tenant (administrators) */
	uint64_t since_ns;  /* packets submitted in [since, until); 0 = unbounded */
	uint64_t until_ns;
	gsd_usage_by by;
} gsd_usage_filter;

typedef struct gsd_usage_row {
	char tenant[GSD_AUDIT_TENANT_MAX + 1]; /* by tenant and context */
	uint64_t context;                      /* by context */
	uint32_t adapter, node;                /* by node */
	uint64_t packets, completed, faulted, cancelled, preemptions, resubmissions;
	uint64_t busy_ns;      /* engine time: the sum of the packets' RUNNING spans */
	uint64_t paging_bytes; /* moved to make its packets resident */
	uint64_t wait_ns[3];   /* p50, p95, p99 of submitted -> started (packets that started) */
	uint64_t run_ns[3];    /* p50, p95, p99 of engine time (packets that ran) */
	uint64_t first_ns, last_ns; /* submission times of its first and last packet */
} gsd_usage_row;

/* At most this many packets are read for one usage answer (*truncated says so). */
#define GSD_USAGE_MAX_PACKETS 5000000u

/* Rows ordered by key. *rows is malloc'd. Returns 0 or -1 with err filled. */
int gsd_history_usage(const char *path, const gsd_usage_filter *f, gsd_usage_row **rows,
                      size_t *count, bool *truncated, char *err, size_t errcap);

typedef struct gsd_moves_filter {
	const char *tenant;  /* required: a tenant only ever sees the moves of its allocations */
	uint64_t allocation; /* 0 = any */
	uint64_t device;     /* 0 = any */
	uint64_t packet;     /* 0 = any; else moves made by this paging packet or for this render
	                        packet (packet = X or for_packet = X) */
	uint64_t before_seq; /* 0 = from the newest; else moves with seq < this */
	uint32_t limit;      /* 0 = 100; at most 10000 */
} gsd_moves_filter;

/* A fetched moves row: the record as written (its tenant and reason pointers NULL), its
 * sequence number, and the reason copied into the row (cut to fit, "" when none). */
typedef struct gsd_move_row {
	uint64_t seq;
	gsd_move_rec rec;
	char reason[128];
} gsd_move_row;

/* Moves newest first. *out is malloc'd (NULL when *count is 0). Returns 0 or -1 with err. */
int gsd_history_moves(const char *path, const gsd_moves_filter *f, gsd_move_row **out,
                      size_t *count, char *err, size_t errcap);

#endif
