/*
 * Audit: a queue filled by the loop thread and drained by one writer thread into SQLite.
 *
 * The loop thread must never wait on the disk, so a producer call only copies its record into a
 * queue node (strings included, into fixed buffers inside the node) and appends it under a
 * mutex. The writer thread detaches the whole queue at once and writes it in transactions of at
 * most max_batch records (group commit): one fsync-free WAL append per batch instead of one per
 * record. Only after COMMIT returns does it call the records' ack callbacks, in queue order, so
 * an acknowledged record is in the file even if the process is killed the next instant.
 *
 * Nodes are recycled rather than freed: the writer returns them to a shared free list, and the
 * producer takes that whole list into a private one (loop thread only) while it already holds
 * the mutex to append, so the steady state costs one mutex round trip and no malloc per record.
 *
 * History reads (history.c) use read-only connections of their own (pooled between reads); in
 * WAL mode they see the last committed state and neither block nor are blocked by the writer.
 */
#include "audit/audit.h"
#include "audit/internal.h"
#include "audit/vfs.h"
#include "chain.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>

#include <sodium.h>
#include <sqlite3.h>

#include "gpusched.pb-c.h"
#include "pbenum.h"
#include "core/log.h"
#include "core/wire_id.h"

_Static_assert(GSD_AUDIT_SCHEMA_VERSION == GS_AUDIT_SCHEMA_KNOWN,
               "the verifier (schema/chain.h) must know the schema the daemon writes");

#define DEFAULT_MAX_BATCH 4096
/*
 * The page size of a file this daemon creates. A commit writes every page it changed to the WAL
 * as one frame (checksummed, copied into the kernel), and an unbatched Submit's commit changes
 * about eight (the packets row, its three indexes, the event row and its index, meta's chain
 * head): with 1 KiB pages instead of SQLite's 4 KiB one costs about two thirds as much
 * (bench_audit --acked). A file made with another page size keeps it.
 */
#define AUDIT_PAGE_SIZE   "1024"
#define DEFAULT_WAL_LIMIT (64ull << 20)
/* Like SQLite's own auto-checkpoint threshold, which we replace (see wal_hook). */
#define PASSIVE_CHECKPOINT_FRAMES 1000
/* Free nodes kept for reuse; beyond this a burst's nodes go back to malloc. */
#define POOL_MAX 8192
/*
 * Records nobody waits for (a state change, a note) that a failed commit could not write are
 * kept and go first into the next commit, so a change made during an outage (a lock held by a
 * reader, a full disk, a removed file) reaches the file once it is writable again. Retries back
 * off from RETRY_FIRST_NS to RETRY_LAST_NS; past RETRY_MAX kept records the oldest are dropped
 * (counted in `dropped`).
 */
#define RETRY_MAX      (1u << 20)
#define RETRY_FIRST_NS 20000000ull
#define RETRY_LAST_NS  1000000000ull
/*
 * Commit policy. A record that carries an ack (a Submit waiting to be answered) is committed at
 * once. Records nobody waits for (later transitions, contexts, notes) linger up to LINGER_NS or
 * until LINGER_MAX records are queued, so they ride along with the next commit instead of each
 * paying a commit's fixed cost. A crash loses at most that window of unacknowledged records;
 * every acknowledged record is already durable. History readers flush first (gsd_audit_flush).
 */
#define LINGER_NS 2000000ull
/*
 * 128: the rest of a SubmitBatch of 64's lives (192 records) wakes the writer once 128 of them
 * are queued, so those rows are written on the other CPU while the answer travels and the client
 * sends its next batch, instead of in one transaction with that batch's SUBMITTED records on
 * the path of its acknowledgement (bench_batch, alternated with 512: 32,000-34,000 -> 34,000-
 * 45,000 packets/s). Unbatched clients queue far fewer between two acknowledged commits (17-20
 * records a commit at 8 clients), so they are not changed by it (64 clients: 89-100 against
 * 92-101 us of daemon CPU a request). A wake in the middle of a batch's records splits some
 * packets' straight runs over two commits, which schema 9 keeps in their rows all the same
 * (schema 8 wrote them as rows: 702 event rows against 637 with 512, for 12,801 engine NOPs).
 */
#define LINGER_MAX 128
/*
 * Group commit under concurrency: when the last commit answered several waiters, more are
 * likely in flight, so the writer waits up to ACK_GATHER_NS for about as many before it pays
 * a commit's fixed cost again. With one waiter at a time (one client) it never waits.
 */
#define ACK_GATHER_NS 100000ull
/*
 * A commit on the producer's thread (gsd_audit_commit_here) holds that thread, the daemon's loop,
 * for as long as it lasts. A queue longer than CALLER_MAX_RECORDS is left to the writer, and a
 * commit that took longer than CALLER_SLOW_NS (a slow or busy disk) leaves every commit to the
 * writer for CALLER_BACKOFF_NS (one that took that long only because the thread was preempted
 * does not count: see commit_was_slow); each slow commit within CALLER_BACKOFF_MAX_NS of
 * the one before doubles that, up to CALLER_BACKOFF_MAX_NS. A file that stays slow then costs the
 * loop one such commit a second at first, and one a minute (about) after six.
 */
#define CALLER_MAX_RECORDS    1024
#define CALLER_SLOW_NS        2000000ull
#define CALLER_BACKOFF_NS     1000000000ull
#define CALLER_BACKOFF_MAX_NS 64000000000ull

enum rec_kind {
	REC_PACKET,
	REC_CONTEXT,
	REC_ALLOCATION,
	REC_ERROR,
	REC_NOTE,
	REC_FLUSH,
	REC_MOVE,
	REC_PRUNE, /* asks for retention steps now (gsd_audit_prune) */
	REC_TENANT,
};

/* A SUBMITTED packet record's allocation list: the one part of a record whose size varies, so
 * its entries live in one malloc'd block (allocations, then the write flags) that the writer
 * frees with the node. */
struct packet_allocs {
	uint64_t packet;
	size_t n;
	uint64_t *allocations;
	uint8_t *write;
};

/* Which of a node's inline strings stand for SQL NULL because the caller passed NULL. */
enum { NULL_TENANT = 1u << 0, NULL_TEXT1 = 1u << 1, NULL_TEXT2 = 1u << 2 };

struct node {
	struct node *next;
	enum rec_kind kind;
	unsigned nulls;
	bool failed;     /* SQLite refused this record alone; the rest of its batch committed */
	bool superseded; /* a later record of the same packet in this batch writes its row */
	bool fresh;      /* a SUBMITTED record of its packet is this one or earlier in its batch */
	bool no_keep;    /* its event is a row of packet_event_rows whatever (write_batch) */
	/* Where its event is kept (schema 8): FOLD_NONE a row of packet_event_rows, else a
	 * column of its packets row (see mark_straight_run). */
	enum { FOLD_NONE, FOLD_SUBMITTED, FOLD_READY, FOLD_RUN, FOLD_END } fold;
	/* A kept RUNNING or COMPLETED: the READY and RUNNING of its run in this batch (NULL:
	 * kept by an earlier commit) */
	struct node *fold_ready, *fold_run;
	uint8_t link[GS_CHAIN_HASH]; /* a kept READY or RUNNING before its run's last: its link */
	uint64_t time_ns;
	uint64_t seq; /* the audit sequence number of the row it appends; 0 = appends none */
	gsd_audit_ack_fn ack;
	void *ack_arg;
	/* The record as its producer gave it. Its pointer members (tenant, texts) are the
	 * producer's and never read here: those texts live in the buffers below. */
	union {
		gsd_packet_rec packet;
		gsd_context_rec context;
		gsd_allocation_rec allocation;
		gsd_move_rec move;     /* its reason lives in text1 */
		gsd_tenant_rec tenant; /* its token hash lives in text1 */
		int status;
	} u;
	struct packet_allocs palloc; /* a packet record's allocation list (n 0: none) */
	char tenant[GSD_AUDIT_TENANT_MAX + 1];
	/* Packet result, error request, note kind, move reason. */
	char text1[GSD_AUDIT_TEXT_MAX + 1];
	char text2[GSD_AUDIT_TEXT_MAX + 1]; /* packet event detail, error message, note detail */
};

/* Appends n to the list from *head to *tail. */
static void node_append(struct node **head, struct node **tail, struct node *n)
{
	n->next = NULL;
	if (*tail)
		(*tail)->next = n;
	else
		*head = n;
	*tail = n;
}

enum stmt_id {
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_PACKET,
	ST_PACKET_NEW,
	ST_PACKET_KEEP,
	ST_PACKET_STATE,
	ST_UNFOLD_MOVE,
	ST_UNFOLD_CLEAR,
	ST_EVENT,
	ST_CONTEXT,
	ST_ALLOCATION,
	ST_ERROR,
	ST_NOTE,
	ST_MOVE,
	ST_PACKET_ALLOC,
	ST_CHAIN,
	ST_HEAD,
	ST_OWNER,
	ST_TENANT,
	ST_COUNT
};

/*
 * The identity columns of a row (its id, owner and placement) are never updated: a record that
 * names an existing id under another tenant leaves the row alone (the WHERE of each DO UPDATE),
 * so no tenant can overwrite another's history by reusing an id.
 */
/* The seq of the newest record in the file (0: none). */
#define MAX_SEQ_SQL                                                                                \
	"(SELECT IFNULL(max(m), 0) FROM (SELECT max(seq) AS m FROM packet_event_rows UNION ALL"    \
	" SELECT max(seq) FROM packets WHERE seq <> 0 UNION ALL SELECT max(end_seq) FROM packets"  \
	" WHERE end_seq <> 0 UNION ALL SELECT max(max(ready_seq, run_seq)) FROM packets"           \
	" WHERE ready_seq <> 0 AND end_seq = 0 UNION ALL"                                          \
	" SELECT max(seq) FROM moves UNION ALL SELECT max(seq) FROM errors UNION ALL"              \
	" SELECT max(seq) FROM notes UNION ALL SELECT max(seq) FROM chain))"

static const char *const stmt_sql[ST_COUNT] = {
        [ST_BEGIN] = "BEGIN IMMEDIATE",
        [ST_COMMIT] = "COMMIT",
        [ST_ROLLBACK] = "ROLLBACK",
        [ST_PACKET] = "INSERT INTO packets (packet, tenant, device, context, adapter, node, fence,"
                      " submit_flags, patch_flags, dma_size, allocation_count, patch_count, state,"
                      " state_name, submitted_ns, ready_ns, started_ns, completed_ns, preemptions,"
                      " resubmissions, result, id, run_ns)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                      " ?16, ?17, ?18, ?19, ?20, ?21, ?22, NULLIF(?34, 0))"
                      " ON CONFLICT (packet) DO UPDATE SET fence = excluded.fence,"
                      " submit_flags = excluded.submit_flags, patch_flags = excluded.patch_flags,"
                      " dma_size = excluded.dma_size, allocation_count = excluded.allocation_count,"
                      " patch_count = excluded.patch_count, state = excluded.state,"
                      " state_name = excluded.state_name, submitted_ns = excluded.submitted_ns,"
                      " ready_ns = excluded.ready_ns, started_ns = excluded.started_ns,"
                      " completed_ns = excluded.completed_ns, preemptions = excluded.preemptions,"
                      " resubmissions = excluded.resubmissions, result = excluded.result,"
                      " run_ns = excluded.run_ns WHERE packets.tenant = excluded.tenant",
        /* A packet row that keeps events (schema 8): its SUBMITTED event, and its READY,
         * RUNNING and COMPLETED when they were written with it. Binds as ST_PACKET, then
         * seq, submit_detail, ready_seq, ready_detail, run_seq, end_seq, hash, ready_digest
         * and run_digest. Only where no row of the packet exists (checked first). */
        [ST_PACKET_NEW] = "INSERT INTO packets (packet, tenant, device, context, adapter, node,"
                          " fence, submit_flags, patch_flags, dma_size, allocation_count,"
                          " patch_count, state, state_name, submitted_ns, ready_ns, started_ns,"
                          " completed_ns, preemptions, resubmissions, result, id, seq,"
                          " submit_detail, ready_seq, ready_detail, run_seq, end_seq, hash,"
                          " ready_digest, run_digest, run_ns)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
                          " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27,"
                          " ?28, ?29, ?30, ?31, NULLIF(?34, 0))",
        /* Events of a straight run written into the packet's existing row (schema 9: a
         * READY, RUNNING or COMPLETED whose earlier events of the run an earlier commit kept
         * there): the state columns, the events of this batch (?25 and ?27 0: kept already,
         * ?28 0: no end yet), its link and the digests. Binds as ST_PACKET_NEW (?22 to ?24
         * unused). It changes nothing (the writer then writes the run's records as rows)
         * unless the row is the packet's as this record has it (its tenant and submission
         * time) and goes on the run: a READY on none kept, a RUNNING or COMPLETED on the
         * kept READY (and RUNNING) with their times as this record has them (the RUNNING's:
         * run_ns, ?34, where the GPU's own start moved started_ns) and at most ?33
         * (GSD_AUDIT_FOLD_SPAN) seqs back (history.c relies on it). */
        [ST_PACKET_KEEP] =
                "UPDATE packets SET fence = ?7, submit_flags = ?8, patch_flags = ?9,"
                " dma_size = ?10, allocation_count = ?11, patch_count = ?12,"
                " state = ?13, state_name = ?14, ready_ns = ?16, started_ns = ?17,"
                " completed_ns = ?18, preemptions = ?19, resubmissions = ?20,"
                " result = ?21, ready_seq = IIF(?25 <> 0, ?25, ready_seq),"
                " ready_detail = IIF(?25 <> 0, ?26, ready_detail),"
                " ready_digest = IIF(?25 <> 0, ?30, ready_digest),"
                " run_seq = IIF(?27 <> 0, ?27, run_seq),"
                " run_digest = IIF(?27 <> 0, ?31, run_digest),"
                " run_ns = NULLIF(?34, 0), end_seq = ?28, hash = ?29 WHERE packet = ?1 AND"
                " tenant IS ?2 AND submitted_ns = ?15 AND end_seq = 0 AND"
                " IIF(?25 <> 0, ready_seq = 0 AND run_seq = 0, ready_seq <> 0 AND"
                " ready_ns = ?16 AND max(?27, ?28) - ready_seq <= ?33) AND"
                " IIF(?27 <> 0, run_seq = 0, ?28 = 0 OR (run_seq <> 0 AND"
                " IFNULL(run_ns, started_ns) = IIF(?34 <> 0, ?34, ?17)))",
        /* A later record of a packet whose row is there: the same columns as ST_PACKET's
         * DO UPDATE but submitted_ns, which is in all three indexes and never changes, so that
         * only the state index is rewritten. Binds as ST_PACKET; no row changed (another
         * tenant's packet, no row yet, another submission time): ST_PACKET decides. */
        [ST_PACKET_STATE] = "UPDATE packets SET fence = ?7, submit_flags = ?8, patch_flags = ?9,"
                            " dma_size = ?10, allocation_count = ?11, patch_count = ?12,"
                            " state = ?13, state_name = ?14, ready_ns = ?16, started_ns = ?17,"
                            " completed_ns = ?18, preemptions = ?19, resubmissions = ?20,"
                            " result = ?21, run_ns = NULLIF(?34, 0) WHERE packet = ?1 AND"
                            " tenant = ?2 AND submitted_ns = ?15",
        /* A packet leaves its straight run (schema 9): the READY and RUNNING its row kept
         * become rows, as they were, with no link of their own (schema/chain.h). */
        [ST_UNFOLD_MOVE] = "INSERT INTO packet_event_rows (seq, packet, state, time_ns, detail,"
                           " state_digest, hash) SELECT ready_seq, packet, 2, ready_ns,"
                           " ready_detail, ready_digest, NULL FROM packets WHERE packet = ?1"
                           " AND tenant IS ?2 AND end_seq = 0 AND ready_seq <> 0 UNION ALL"
                           " SELECT run_seq, packet, 3, IFNULL(run_ns, started_ns), NULL,"
                           " run_digest, NULL"
                           " FROM packets WHERE packet = ?1 AND tenant IS ?2 AND end_seq = 0"
                           " AND run_seq <> 0",
        [ST_UNFOLD_CLEAR] = "UPDATE packets SET ready_seq = 0, ready_detail = NULL,"
                            " ready_digest = NULL, run_seq = 0, run_digest = NULL, hash = NULL"
                            " WHERE packet = ?1 AND tenant IS ?2 AND end_seq = 0 AND"
                            " (ready_seq <> 0 OR run_seq <> 0)",
        [ST_EVENT] = "INSERT INTO packet_event_rows (packet, state, time_ns, detail, seq,"
                     " state_digest, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [ST_CONTEXT] = "INSERT INTO contexts (context, tenant, device, adapter, node, flags,"
                       " priority_class, priority, dma_buffer_size, dma_buffer_segment_set,"
                       " dma_buffer_private_data_size, allocation_list_size,"
                       " patch_location_list_size, caps, paging_companion_node_id, created_ns,"
                       " destroyed_ns)"
                       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                       " ?16, ?17)"
                       " ON CONFLICT (context) DO UPDATE SET flags = excluded.flags,"
                       " priority_class = excluded.priority_class, priority = excluded.priority,"
                       " dma_buffer_size = excluded.dma_buffer_size,"
                       " dma_buffer_segment_set = excluded.dma_buffer_segment_set,"
                       " dma_buffer_private_data_size = excluded.dma_buffer_private_data_size,"
                       " allocation_list_size = excluded.allocation_list_size,"
                       " patch_location_list_size = excluded.patch_location_list_size,"
                       " caps = excluded.caps,"
                       " paging_companion_node_id = excluded.paging_companion_node_id,"
                       " created_ns = excluded.created_ns, destroyed_ns = excluded.destroyed_ns"
                       " WHERE contexts.tenant = excluded.tenant",
        [ST_ALLOCATION] = "INSERT INTO allocations (allocation, tenant, device, adapter, size,"
                          " supported_segment_set, segment_preference, priority, flags, segment,"
                          " segment_offset, created_ns, destroyed_ns)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                          " ON CONFLICT (allocation) DO UPDATE SET size = excluded.size,"
                          " supported_segment_set = excluded.supported_segment_set,"
                          " segment_preference = excluded.segment_preference,"
                          " priority = excluded.priority, flags = excluded.flags,"
                          " segment = excluded.segment, segment_offset = excluded.segment_offset,"
                          " created_ns = excluded.created_ns, destroyed_ns = excluded.destroyed_ns"
                          " WHERE allocations.tenant = excluded.tenant",
        [ST_ERROR] = "INSERT INTO errors (time_ns, tenant, request, status, message, seq, hash)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [ST_NOTE] = "INSERT INTO notes (time_ns, tenant, kind, detail, seq, hash)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [ST_MOVE] = "INSERT INTO moves (time_ns, tenant, allocation, device, adapter, packet,"
                    " for_packet, kind, kind_name, from_segment, from_offset, to_segment,"
                    " to_offset, bytes, transfer_flags, pieces, reason, seq, hash)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                    " ?16, ?17, ?18, ?19)",
        [ST_PACKET_ALLOC] = "INSERT INTO packet_allocations (packet, slot, allocation, write)"
                            " VALUES (?1, ?2, ?3, ?4)",
        [ST_CHAIN] = "INSERT INTO chain (seq, kind, ref, state, hash) VALUES (?1, ?2, ?3, ?4, ?5)",
        /* The head and the seq of its record: cutting the newest records and copying the
         * kept link into chain_head leaves them apart. */
        [ST_HEAD] = "INSERT INTO meta (key, value) VALUES ('chain_head', ?1),"
                    " ('chain_head_seq', ?2)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [ST_OWNER] = "SELECT tenant IS ?2 FROM packets WHERE packet = ?1",
        [ST_TENANT] = "INSERT INTO tenants (id, name, audit_name, token_hash, kind, share,"
                      " priority_ceiling, context_limit, allocation_limit,"
                      " max_requests_per_second, memory_quota, admin, created_ns, removed_ns,"
                      " max_message, packet_limit, sync_limit)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
                      " ?15, ?16, ?17)"
                      " ON CONFLICT (id) DO UPDATE SET share = excluded.share,"
                      " priority_ceiling = excluded.priority_ceiling,"
                      " context_limit = excluded.context_limit,"
                      " allocation_limit = excluded.allocation_limit,"
                      " max_requests_per_second = excluded.max_requests_per_second,"
                      " memory_quota = excluded.memory_quota, admin = excluded.admin,"
                      " removed_ns = excluded.removed_ns, max_message = excluded.max_message,"
                      " packet_limit = excluded.packet_limit, sync_limit = excluded.sync_limit",
};

struct gsd_audit {
	sqlite3 *db; /* owned by the writer thread once it runs */
	/* The key of the wire ids (meta 'wire_key'; random per run for a null sink), and the
	 * permutation's round key made from it: packets.id is a packet's wire id. */
	unsigned char wire_key[GSD_AUDIT_WIRE_KEY_BYTES];
	gsd_wire_key wire;
	sqlite3_stmt *st[ST_COUNT];
	uint32_t max_batch;
	uint64_t wal_limit;
	char *wal_path;
	char *db_path;  /* the main file, checked at every commit */
	dev_t db_dev;   /* its identity when opened: a file removed or replaced under the */
	ino_t db_ino;   /* daemon is never written to (and acknowledged) again */
	bool file_gone; /* writer thread: the last check failed */
	int wal_frames; /* frames in the WAL after the last commit (writer thread) */
	int busy_ms;    /* the writer's lock wait (writer_busy_wait) */
	uint64_t busy_since_ns;
	bool null_sink; /* gsd_audit_options.null_sink: acknowledge, write nothing */
	/* The checkpointer: a connection of its own that copies committed WAL frames back into
	 * the database on a thread of its own. A checkpoint syncs the files (measured: 3.5 to
	 * 6 ms each, about nine a second under load); on the writer's thread it held every
	 * acknowledgement waiting behind it. Not started (ckpt_db NULL): the writer checkpoints. */
	sqlite3 *ckpt_db;
	pthread_t ckpt_thread;
	pthread_mutex_t ckpt_mu;
	pthread_cond_t ckpt_cv;
	bool ckpt_wanted, ckpt_stop;
	int ckpt_asked_at;       /* wal_frames when the writer last asked (writer thread) */
	uint64_t frame_bytes;    /* page size + WAL frame header */
	uint64_t restart_frames; /* see RESTART_FRAMES */
	/* Packet id -> last record of it in the batch being written (writer thread). */
	struct latest_slot {
		uint64_t packet;
		uint64_t batch;
		const struct node *node;
		int owner; /* the record's tenant owns the packets row: 1, 0 no, -1 not known yet */
		/* Its SUBMITTED event, kept in the row (FOLD_SUBMITTED) and linked in this batch:
		 * the row written later in the batch keeps its seq, detail and link. */
		const struct node *sub;
		uint8_t sub_hash[GS_CHAIN_HASH];
		/* The straight run of this batch (mark_straight_run): its kept READY, RUNNING and
		 * COMPLETED, NULL for none */
		struct node *run_ready, *run_run, *run_end;
		bool unfolded; /* unfold ran for the packet in this batch (once is enough) */
	} * latest;
	size_t latest_cap; /* power of two, at least twice max_batch */
	uint64_t batch_seq;
	/* The hash chain (writer thread): the hash of the last record written, and its value at
	 * the start of the batch in progress (a failed batch goes back to it). */
	uint8_t chain_head[GS_CHAIN_HASH];
	uint8_t batch_head[GS_CHAIN_HASH];
	uint64_t chain_head_seq, batch_head_seq; /* the seq of the record each link is of */
	bool chain_off;                          /* gsd_audit_options.no_chain */
	/* Retention (writer thread): what to keep, and when the next step is due. */
	uint64_t retain_age_ns, retain_packets;
	uint64_t next_prune_ns;
	bool prune_now;

	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Under mu. */
	struct node *head, *tail;
	size_t list_count;   /* records in head..tail */
	size_t pending_acks; /* of which carry an ack */
	size_t ack_target;   /* wake the writer when this many acks are pending (0: at once) */
	size_t last_acks;    /* acks in the last list taken (writer thread) */
	bool idle;           /* the writer waits for a first record (nothing queued) */
	bool stopping;
	/* One thread writes at a time: the writer, or the producer in gsd_audit_commit_here.
	 * Every field marked "writer thread" belongs to whoever set this. */
	bool draining;
	bool writer_blocked;     /* the writer waits for the producer's commit to end */
	bool writer_wanted;      /* a queued record needs the writer's thread (a prune) */
	bool caller_commits;     /* gsd_audit_options.commit_on_caller, and allowed */
	bool txn_open;           /* the producer began the first transaction (BEGIN IMMEDIATE) */
	uint64_t caller_slow_ns; /* CALLER_SLOW_NS, or gsd_audit_options.caller_slow_ns */
	uint64_t caller_backoff_until; /* producer's: no commit of its own before (ns) */
	uint64_t caller_backoff_ns;    /* producer's: the last back-off */
	uint64_t caller_slow_at;       /* producer's: when its last slow commit ended */
	struct node *free_shared;      /* nodes the writer is done with */
	size_t free_shared_count;

	/* Loop thread only. */
	struct node *free_local;
	/* Records held back by gsd_audit_group, queued together when it ends. */
	struct node *group_head, *group_tail;
	bool grouping;
	/* The next audit sequence number: one sequence across packet events, moves, errors and
	 * notes, so every appended row has a number no other row has, in the order recorded. */
	uint64_t next_seq;
	bool seqs_spent_logged; /* past GSD_AUDIT_SEQ_MAX: said once */

	/* Writer thread only: records a failed commit keeps for the next one, oldest first. */
	struct node *retry_head, *retry_tail;
	size_t retry_count;
	uint64_t retry_delay_ns; /* the wait before the next retry; 0 when nothing failed */
	uint64_t retry_at_ns;

	_Atomic uint64_t records, commits, queued, failures, dropped, checkpoints, pruned;
	/* Packet events committed as rows of packet_event_rows, and kept in packets rows; the
	 * batch being written counts into batch_rows and batch_kept (writer) until it commits. */
	_Atomic uint64_t event_rows, events_kept;
	uint64_t batch_rows, batch_kept;
	_Atomic int health;  /* gsd_audit_health */
	uint64_t reconciled; /* packets reconciled at open */
};

/* ---- small helpers ---- */

void gsd_audit_set_err(char *err, size_t errcap, const char *fmt, ...)
{
	if (!err || errcap == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errcap, fmt, ap);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Copies at most cap - 1 bytes of src. A cut never splits a UTF-8 sequence, so every stored
 * string stays valid text for SQLite and for whoever reads the history.
 */
void gsd_audit_copy_text(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap);
	if (n == cap) {
		n = cap - 1;
		while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Fills one inline string of a node, remembering a NULL as such. */
static void node_text(struct node *n, char *dst, size_t cap, const char *src, unsigned null_bit)
{
	if (src) {
		gsd_audit_copy_text(dst, cap, src);
	} else {
		dst[0] = '\0';
		n->nulls |= null_bit;
	}
}

static const char *state_name(int state)
{
	const char *n =
	        gs_enum_name(&gpusched__v1__packet_state__descriptor, state, "PACKET_STATE_");
	return n ? n : "INVALID";
}

static const char *move_kind_name(int kind)
{
	const char *n = gs_enum_name(&gpusched__v1__move_kind__descriptor, kind, "MOVE_KIND_");
	return n ? n : "INVALID";
}

void gsd_audit_bind_u64(sqlite3_stmt *s, int i, uint64_t v)
{
	/* Same bits in a signed column: ids and nanoseconds never reach 2^63 in practice. */
	sqlite3_bind_int64(s, i, (sqlite3_int64)v);
}

/* SQLITE_STATIC: the node outlives the step that reads the string. */
static void bind_str(sqlite3_stmt *s, int i, const char *v, bool null)
{
	if (null)
		sqlite3_bind_null(s, i);
	else
		sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}

/*
 * A row the writer binds and feeds to the hash chain (schema/chain.h): its columns in INSERT
 * order, which is the order the verifier reads them. Integers keep their 64 bits (unsigned
 * values too: ids and nanoseconds never reach 2^63 in practice).
 */
typedef struct col {
	enum { COL_INT, COL_TEXT, COL_NULL } type;
	int64_t i;
	const char *s;
} col;

#define CI(v)      ((col){COL_INT, (int64_t)(v), NULL})
#define CS(v, nul) ((col){(nul) ? COL_NULL : COL_TEXT, 0, (v)})

/* Binds cols to parameters 1..n of s (NULL: none) and feeds each to d (NULL: not chained). */
static void put_row(sqlite3_stmt *s, gs_chain_row *d, const col *cols, int n)
{
	for (int i = 0; i < n; i++) {
		const col *c = &cols[i];
		if (c->type == COL_INT) {
			if (s)
				sqlite3_bind_int64(s, i + 1, c->i);
			if (d)
				gs_chain_row_int(d, c->i);
		} else {
			if (s)
				bind_str(s, i + 1, c->s, c->type == COL_NULL);
			if (d)
				gs_chain_row_text(d, c->type == COL_NULL ? NULL : c->s);
		}
	}
}

#define PUT_ROW(s, d, ...)                                                                         \
	put_row((s), (d), (const col[]){__VA_ARGS__},                                              \
	        (int)(sizeof((const col[]){__VA_ARGS__}) / sizeof(col)))

/* A row digest to feed, or NULL when the chain is off (bench_audit's baseline only). */
static gs_chain_row *chain_begin(gsd_audit *a, gs_chain_row *d, gs_chain_kind table)
{
	if (a->chain_off)
		return NULL;
	gs_chain_row_init(d, table);
	return d;
}

static void chain_end(gs_chain_row *d, uint8_t out[GS_CHAIN_DIGEST])
{
	if (d)
		gs_chain_row_final(d, out);
}

/* What one record contributes to the chain: its link, fed its appended row by its write_*,
 * and the digest of the state it leaves (has_state). */
typedef struct chain_out {
	gs_chain_kind kind;
	uint64_t ref;
	gs_chain_row link;
	bool link_open; /* link_begin ran */
	uint8_t state[GS_CHAIN_DIGEST];
	bool has_state;
	uint8_t hash[GS_CHAIN_HASH]; /* its link, once computed */
	bool linked;                 /* hash is bound into its own row (not the chain table) */
} chain_out;

/* Starts the record's link (the previous link, its seq, kind and ref) for its write_* to feed
 * its appended row into; NULL when the chain is off. */
static gs_chain_row *link_begin(gsd_audit *a, const struct node *n, chain_out *co, uint64_t ref)
{
	co->ref = ref;
	if (a->chain_off)
		return NULL;
	gs_chain_link_begin(&co->link, a->chain_head, n->seq, co->kind, ref);
	co->link_open = true;
	return &co->link;
}

/* Ends the record's link and binds it (and, at state_idx > 0, its state digest or NULL) into
 * the statement of the row it appends; NULLs when the chain is off. The head moves only once
 * the row is written (write_node). */
static void bind_link(gsd_audit *a, chain_out *co, sqlite3_stmt *s, int state_idx, int hash_idx)
{
	if (a->chain_off) {
		if (state_idx)
			sqlite3_bind_null(s, state_idx);
		sqlite3_bind_null(s, hash_idx);
		return;
	}
	gs_chain_link_end(&co->link, co->has_state ? co->state : NULL, co->hash);
	if (state_idx && co->has_state)
		sqlite3_bind_blob(s, state_idx, co->state, GS_CHAIN_DIGEST, SQLITE_STATIC);
	else if (state_idx)
		sqlite3_bind_null(s, state_idx);
	sqlite3_bind_blob(s, hash_idx, co->hash, GS_CHAIN_HASH, SQLITE_STATIC);
	co->linked = true;
}

/* Runs a statement that returns no rows and makes it ready for its next use. */
static int step_reset(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* ---- writer thread ---- */

static bool same_owner(const struct node *x, const struct node *y);

/* The slot of n's packet and tenant in the batch being written: the one mark_superseded
 * filled for them, or the free slot where it goes (its batch is an older one). */
static struct latest_slot *slot_of(gsd_audit *a, const struct node *n)
{
	size_t mask = a->latest_cap - 1;
	size_t i = (size_t)(n->u.packet.packet * 0x9E3779B97F4A7C15ull) & mask;
	while (a->latest[i].batch == a->batch_seq && !same_owner(a->latest[i].node, n))
		i = (i + 1) & mask;
	return &a->latest[i];
}

/*
 * A packet's events are read through its packets row (its tenant), so a record naming a packet
 * another tenant owns is refused rather than appended to that tenant's history. The last record
 * of the packet in the batch finds out from its upsert (nothing changed); the ones before it
 * ask once per batch: *foreign when another tenant owns it. Returns an SQLite status.
 */
static int check_owner(gsd_audit *a, const struct node *n, bool *foreign)
{
	struct latest_slot *l = slot_of(a, n);
	if (l->batch != a->batch_seq)
		l = NULL;
	if (l && l->owner >= 0) {
		*foreign = !l->owner;
		return SQLITE_OK;
	}
	sqlite3_stmt *s = a->st[ST_OWNER];
	gsd_audit_bind_u64(s, 1, n->u.packet.packet);
	bind_str(s, 2, n->tenant, n->nulls & NULL_TENANT);
	int rc = sqlite3_step(s);
	int owner = rc == SQLITE_DONE || (rc == SQLITE_ROW && sqlite3_column_int(s, 0));
	sqlite3_reset(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return rc;
	if (l)
		l->owner = owner;
	*foreign = !owner;
	return SQLITE_OK;
}

/* The columns of n's packets row, in INSERT order (what the chain's row digest covers). */
#define PACKET_COLS 21
static void packet_cols(const struct node *n, col c[PACKET_COLS])
{
	const gsd_packet_rec *r = &n->u.packet;
	const col row[PACKET_COLS] = {CI(r->packet),
	                              CS(n->tenant, n->nulls & NULL_TENANT),
	                              CI(r->device),
	                              CI(r->context),
	                              CI(r->adapter),
	                              CI(r->node),
	                              CI(r->fence),
	                              CI(r->submit_flags),
	                              CI(r->patch_flags),
	                              CI(r->dma_size),
	                              CI(r->allocation_count),
	                              CI(r->patch_count),
	                              CI(r->state),
	                              CS(state_name(r->state), false),
	                              CI(r->submitted_ns),
	                              CI(r->ready_ns),
	                              CI(r->started_ns),
	                              CI(r->completed_ns),
	                              CI(r->preemptions),
	                              CI(r->resubmissions),
	                              CS(n->text1, n->nulls & NULL_TEXT1)};
	memcpy(c, row, sizeof row);
}

/* The time of the event a packet record appends. */
static uint64_t event_time(const struct node *n)
{
	return n->u.packet.event_ns ? n->u.packet.event_ns : n->time_ns;
}

static const char *detail_of(const struct node *n)
{
	return n->nulls & NULL_TEXT2 ? NULL : n->text2;
}

/*
 * A packet event kept in its packets row (schema 8): its link covers the event as the view
 * packet_events shows it (packet, state, time, detail, seq), as a row of packet_event_rows
 * would, and the state it left (NULL: none). No row of its own: its link is in co->hash (the
 * row keeps the newest one), the head moves in write_node.
 */
static gs_chain_row *link_kept(gsd_audit *a, const struct node *n, chain_out *co, int state,
                               uint64_t time, const char *detail)
{
	gs_chain_row *dp = link_begin(a, n, co, n->u.packet.packet);
	PUT_ROW(NULL, dp, CI(n->u.packet.packet), CI(state), CI(time), CS(detail, !detail),
	        CI(n->seq));
	co->linked = true;
	return dp;
}

static void link_kept_end(gs_chain_row *dp, chain_out *co, const uint8_t *state)
{
	if (dp)
		gs_chain_link_end(dp, state, co->hash);
	else
		memset(co->hash, 0, sizeof co->hash);
}

/* A SUBMITTED record as a new packet's row has it: nothing but its submission yet (so the
 * verifier can rebuild the state it left from any later row: schema/chain.h). */
static bool submission_form(const struct node *n)
{
	const gsd_packet_rec *r = &n->u.packet;
	return r->state == GPUSCHED__V1__PACKET_STATE__PACKET_STATE_SUBMITTED && !r->ready_ns &&
	       !r->started_ns && !r->completed_ns && !r->preemptions && !r->resubmissions &&
	       !r->patch_flags && !(r->submit_flags & GS_CHAIN_RESUBMISSION_BIT) &&
	       (n->nulls & NULL_TEXT1) && event_time(n) == r->submitted_ns && r->submitted_ns;
}

static void bind_digest(sqlite3_stmt *s, int idx, const uint8_t *d, size_t len)
{
	if (d)
		sqlite3_bind_blob(s, idx, d, (int)len, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(s, idx);
}

/* The READY, RUNNING and COMPLETED of a straight run that its last kept record `last` of this
 * batch writes (NULL: none, or kept by an earlier commit). */
static void run_of(const struct node *last, const struct node **r, const struct node **u,
                   const struct node **e)
{
	*r = !last ? NULL : last->fold == FOLD_READY ? last : last->fold_ready;
	*u = !last ? NULL : last->fold == FOLD_RUN ? last : last->fold_run;
	*e = last && last->fold == FOLD_END ? last : NULL;
}

/* Binds the events a row keeps (parameters 23 to 33 of ST_PACKET_NEW and ST_PACKET_KEEP):
 * sub a SUBMITTED, last the newest kept READY, RUNNING or COMPLETED of this batch, whose
 * state digest goes with it (a READY's or RUNNING's into its column). */
static void bind_kept(sqlite3_stmt *s, const struct node *sub, const struct node *last,
                      const uint8_t *hash, const uint8_t *state, bool chain_off)
{
	const struct node *r, *u, *e;
	run_of(last, &r, &u, &e);
	gsd_audit_bind_u64(s, 23, sub ? sub->seq : 0);
	bind_str(s, 24, sub ? sub->text2 : NULL, !sub || (sub->nulls & NULL_TEXT2));
	gsd_audit_bind_u64(s, 25, r ? r->seq : 0);
	bind_str(s, 26, r ? r->text2 : NULL, !r || (r->nulls & NULL_TEXT2));
	gsd_audit_bind_u64(s, 27, u ? u->seq : 0);
	gsd_audit_bind_u64(s, 28, e ? e->seq : 0);
	bind_digest(s, 29, chain_off ? NULL : hash, GS_CHAIN_HASH);
	bind_digest(s, 30, r && r == last && !chain_off ? state : NULL, GS_CHAIN_DIGEST);
	bind_digest(s, 31, u && u == last && !chain_off ? state : NULL, GS_CHAIN_DIGEST);
	if (sqlite3_bind_parameter_count(s) >= 33)
		sqlite3_bind_int64(s, 33, GSD_AUDIT_FOLD_SPAN);
}

/* Binds n's packets row to s (NULL: none) and feeds its columns to d (NULL: not chained);
 * with_id, its client id too (parameter 22: outside the chain's digest, it follows from the
 * packet's number and the file's key). */
static void put_packet_row(gsd_audit *a, sqlite3_stmt *s, const struct node *n, gs_chain_row *d,
                           bool with_id)
{
	col c[PACKET_COLS];
	packet_cols(n, c);
	put_row(s, d, c, PACKET_COLS);
	if (s && with_id)
		sqlite3_bind_int64(
		        s, 22, (sqlite3_int64)gsd_wire_packet_out(&a->wire, n->u.packet.packet));
	/* run_ns (schema 9), NULL for 0: in the digest only where it is set (schema/chain.h). */
	uint64_t run_ns = n->u.packet.run_ns;
	if (s)
		gsd_audit_bind_u64(s, 34, run_ns);
	if (d && run_ns)
		gs_chain_row_int(d, (int64_t)run_ns);
}

/*
 * Writes the packets row bound to s (put_packet_row) with the events it keeps: a new row
 * (ST_PACKET_NEW) or a straight run's events in the existing one (ST_PACKET_KEEP). A row
 * already there to insert, or none (of n's tenant, going on the run) to update, is
 * SQLITE_CONSTRAINT.
 */
static int write_kept_row(gsd_audit *a, sqlite3_stmt *s, const struct node *sub,
                          const struct node *last, const uint8_t *hash, const uint8_t *state)
{
	bind_kept(s, sub, last, hash, state, a->chain_off);
	int rc = step_reset(s);
	if (rc == SQLITE_OK && sqlite3_changes(a->db) != 1)
		rc = SQLITE_CONSTRAINT;
	return rc;
}

/* A SUBMITTED record kept in its row: linked over its event and allocation list, with the
 * row as submitted for its state; the row is written now, or by the batch's last record of
 * the packet (its slot keeps this record and its link). */
static int write_submitted_kept(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_packet_rec *r = &n->u.packet;
	uint8_t state[GS_CHAIN_DIGEST];
	gs_chain_row d, *dp = chain_begin(a, &d, GS_CHAIN_PACKET);
	sqlite3_stmt *s = n->superseded ? NULL : a->st[ST_PACKET_NEW];
	put_packet_row(a, s, n, dp, true);
	chain_end(dp, state);
	dp = link_kept(a, n, co, r->state, event_time(n), detail_of(n));
	const struct packet_allocs *l = &n->palloc;
	for (size_t i = 0; i < l->n; i++)
		PUT_ROW(NULL, dp, CI(l->packet), CI(i), CI(l->allocations[i]), CI(l->write[i]));
	link_kept_end(dp, co, dp ? state : NULL);
	/* Its row first, where it writes it: a row it cannot write leaves no list behind. */
	int rc = s ? write_kept_row(a, s, n, NULL, co->hash, NULL) : SQLITE_OK;
	for (size_t i = 0; rc == SQLITE_OK && i < l->n; i++) {
		sqlite3_stmt *ps = a->st[ST_PACKET_ALLOC];
		PUT_ROW(ps, NULL, CI(l->packet), CI(i), CI(l->allocations[i]), CI(l->write[i]));
		rc = step_reset(ps);
	}
	if (rc != SQLITE_OK || !n->superseded)
		return rc;
	struct latest_slot *slot = slot_of(a, n);
	slot->sub = n;
	memcpy(slot->sub_hash, co->hash, GS_CHAIN_HASH);
	return SQLITE_OK;
}

/*
 * A packet leaves its straight run, or its row does not go on with it (schema 9): the READY
 * and RUNNING an earlier commit kept in its row become rows of packet_event_rows before the
 * row changes, once per packet and batch. Counts them as rows; an SQLite status.
 */
static int unfold(gsd_audit *a, const struct node *n)
{
	/* Only the first record of the packet in this batch can find any: the move clears them. */
	struct latest_slot *l = slot_of(a, n);
	if (l->unfolded)
		return SQLITE_OK;
	sqlite3_stmt *s = a->st[ST_UNFOLD_MOVE];
	gsd_audit_bind_u64(s, 1, n->u.packet.packet);
	bind_str(s, 2, n->tenant, n->nulls & NULL_TENANT);
	int rc = step_reset(s);
	int moved = rc == SQLITE_OK ? sqlite3_changes(a->db) : 0;
	if (moved > 0) {
		a->batch_rows += (uint64_t)moved;
		s = a->st[ST_UNFOLD_CLEAR];
		gsd_audit_bind_u64(s, 1, n->u.packet.packet);
		bind_str(s, 2, n->tenant, n->nulls & NULL_TENANT);
		rc = step_reset(s);
	}
	l->unfolded = rc == SQLITE_OK;
	return rc;
}

/* An event linked as kept, written as a row of packet_event_rows with that link (and the state
 * digest it covered, NULL: none). */
static int kept_as_row(gsd_audit *a, const struct node *n, const uint8_t *state,
                       const uint8_t *hash)
{
	sqlite3_stmt *s = a->st[ST_EVENT];
	const gsd_packet_rec *r = &n->u.packet;
	PUT_ROW(s, NULL, CI(r->packet), CI(r->state), CI(event_time(n)),
	        CS(n->text2, n->nulls & NULL_TEXT2), CI(n->seq));
	bind_digest(s, 6, a->chain_off ? NULL : state, GS_CHAIN_DIGEST);
	bind_digest(s, 7, a->chain_off ? NULL : hash, GS_CHAIN_HASH);
	int rc = step_reset(s);
	a->batch_rows += rc == SQLITE_OK;
	return rc;
}

/*
 * The packet's row did not go on the run its last kept record n of this batch wrote (its
 * kept events of earlier commits are not the ones n's run needs: a time changed, as a GPU's
 * own start does, or there are none): the run's events of this batch become rows with the
 * links they have, which cover the same events, after the ones the row kept; then the row
 * changes as for any other event. A row that is not there (or another tenant's) is
 * SQLITE_CONSTRAINT (write_batch writes the batch again with the packet's records as rows).
 */
static int kept_run_as_rows(gsd_audit *a, const struct node *n, const chain_out *co,
                            const uint8_t *state)
{
	int rc = unfold(a, n);
	const struct node *run[2] = {n->fold_ready, n->fold_run};
	for (size_t i = 0; rc == SQLITE_OK && i < 2; i++)
		if (run[i] && run[i] != n)
			rc = kept_as_row(a, run[i], NULL, run[i]->link);
	if (rc == SQLITE_OK)
		rc = kept_as_row(a, n, state, co->hash);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_stmt *s = a->st[ST_PACKET_STATE];
	put_packet_row(a, s, n, NULL, false);
	rc = step_reset(s);
	if (rc == SQLITE_OK && sqlite3_changes(a->db) != 1)
		rc = SQLITE_CONSTRAINT;
	return rc;
}

/*
 * The READY, RUNNING and COMPLETED of a straight run, kept in the packet's row, which the
 * last of them in this batch writes (its state is the state its link covers): new in this
 * batch (with its SUBMITTED when that is kept), or there. The others are linked only.
 * Counts what it keeps.
 */
static int write_folded(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_packet_rec *r = &n->u.packet;
	if (n->superseded) {
		link_kept_end(link_kept(a, n, co, r->state, event_time(n), detail_of(n)), co, NULL);
		memcpy(((struct node *)n)->link, co->hash, GS_CHAIN_HASH);
		a->batch_kept++;
		return SQLITE_OK;
	}
	uint8_t state[GS_CHAIN_DIGEST] = {0};
	gs_chain_row d, *dp = chain_begin(a, &d, GS_CHAIN_PACKET);
	sqlite3_stmt *s = a->st[n->fresh ? ST_PACKET_NEW : ST_PACKET_KEEP];
	put_packet_row(a, s, n, dp, true);
	chain_end(dp, state);
	link_kept_end(link_kept(a, n, co, r->state, event_time(n), detail_of(n)), co,
	              a->chain_off ? NULL : state);
	int rc = write_kept_row(a, s, n->fresh ? slot_of(a, n)->sub : NULL, n, co->hash, state);
	if (rc == SQLITE_OK) {
		a->batch_kept++;
		return rc;
	}
	if (rc != SQLITE_CONSTRAINT || n->fresh)
		return rc;
	/* Its run's events of this batch were counted as kept. */
	a->batch_kept -= (n->fold_ready != NULL) + (n->fold_run != NULL);
	return kept_run_as_rows(a, n, co, state);
}

static int write_packet(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_packet_rec *r = &n->u.packet;
	sqlite3_stmt *s = a->st[ST_PACKET];
	gs_chain_row d, *dp;
	int rc;

	if (n->fold != FOLD_NONE)
		return write_folded(a, n, co);
	if (!n->no_keep && submission_form(n)) {
		((struct node *)n)->fold = FOLD_SUBMITTED;
		rc = write_submitted_kept(a, n, co);
		a->batch_kept += rc == SQLITE_OK;
		return rc;
	}

	/* A READY or RUNNING an earlier commit kept in the row goes to the rows first. */
	if (!n->fresh && (rc = unfold(a, n)) != SQLITE_OK)
		return rc;
	/* Only the last record of the packet in this batch writes the row and keeps its digest:
	 * the row is that state after the commit (schema/chain.h). The others bind nothing. */
	bool foreign = false;
	const struct node *sub = n->fresh && !n->superseded ? slot_of(a, n)->sub : NULL;
	if (sub) {
		/* Its row is new in this batch and keeps its SUBMITTED event. */
		dp = chain_begin(a, &d, GS_CHAIN_PACKET);
		s = a->st[ST_PACKET_NEW];
		put_packet_row(a, s, n, dp, true);
		chain_end(dp, co->state);
		co->has_state = dp != NULL;
		rc = write_kept_row(a, s, sub, NULL, slot_of(a, n)->sub_hash, NULL);
	} else if (!n->superseded) {
		/* A packet submitted in this batch makes its row; a later record updates it in
		 * place (and falls back to the upsert when that finds nothing to update). */
		bool update = !n->fresh;
		if (update)
			s = a->st[ST_PACKET_STATE];
		dp = chain_begin(a, &d, GS_CHAIN_PACKET);
		for (;;) {
			put_packet_row(a, s, n, dp, !update);
			chain_end(dp, co->state);
			co->has_state = dp != NULL;
			rc = step_reset(s);
			if (!update || rc != SQLITE_OK || sqlite3_changes(a->db) > 0)
				break;
			update = false;
			s = a->st[ST_PACKET];
			dp = chain_begin(a, &d, GS_CHAIN_PACKET);
		}
		foreign = rc == SQLITE_OK && !update &&
		          sqlite3_changes(a->db) == 0; /* WHERE tenant matched none */
	} else {
		rc = check_owner(a, n, &foreign);
	}
	if (foreign) {
		GSD_WARN("audit: packet %llu belongs to another tenant than its record's: refused",
		         (unsigned long long)r->packet);
		return SQLITE_CONSTRAINT;
	}
	if (rc != SQLITE_OK)
		return rc;

	s = a->st[ST_EVENT];
	dp = link_begin(a, n, co, r->packet);
	PUT_ROW(s, dp, CI(r->packet), CI(r->state), CI(event_time(n)),
	        CS(n->text2, n->nulls & NULL_TEXT2), CI(n->seq));
	/* A SUBMITTED event's link covers the packet's allocation list, written with it. */
	const struct packet_allocs *l = &n->palloc;
	for (size_t i = 0; i < l->n; i++) {
		sqlite3_stmt *ps = a->st[ST_PACKET_ALLOC];
		PUT_ROW(ps, dp, CI(l->packet), CI(i), CI(l->allocations[i]), CI(l->write[i]));
		rc = step_reset(ps);
		if (rc != SQLITE_OK)
			return rc;
	}
	bind_link(a, co, s, 6, 7);
	rc = step_reset(s);
	a->batch_rows += rc == SQLITE_OK;
	return rc;
}

/* A row that is an object's state (context, allocation, tenant limits): written whole, its
 * digest the state the record leaves, ref the object it is of. */
static int write_state(gsd_audit *a, chain_out *co, int st, gs_chain_kind table, uint64_t ref,
                       const col *row, int ncols)
{
	sqlite3_stmt *s = a->st[st];
	gs_chain_row d, *dp = chain_begin(a, &d, table);

	put_row(s, dp, row, ncols);
	chain_end(dp, co->state);
	co->has_state = true;
	co->ref = ref;
	return step_reset(s);
}

#define WRITE_STATE(a, co, st, table, ref, ...)                                                    \
	write_state((a), (co), (st), (table), (ref), (const col[]){__VA_ARGS__},                   \
	            (int)(sizeof((const col[]){__VA_ARGS__}) / sizeof(col)))

static int write_context(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_context_rec *r = &n->u.context;

	return WRITE_STATE(a, co, ST_CONTEXT, GS_CHAIN_CONTEXT, r->context, CI(r->context),
	                   CS(n->tenant, n->nulls & NULL_TENANT), CI(r->device), CI(r->adapter),
	                   CI(r->node), CI(r->flags), CI(r->priority_class), CI(r->priority),
	                   CI(r->info.dma_buffer_size), CI(r->info.dma_buffer_segment_set),
	                   CI(r->info.dma_buffer_private_data_size),
	                   CI(r->info.allocation_list_size), CI(r->info.patch_location_list_size),
	                   CI(r->info.caps), CI(r->info.paging_companion_node_id),
	                   CI(r->created_ns), CI(r->destroyed_ns));
}

static int write_allocation(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_allocation_rec *r = &n->u.allocation;

	return WRITE_STATE(a, co, ST_ALLOCATION, GS_CHAIN_ALLOCATION, r->allocation,
	                   CI(r->allocation), CS(n->tenant, n->nulls & NULL_TENANT), CI(r->device),
	                   CI(r->adapter), CI(r->size), CI(r->supported_segment_set),
	                   CI(r->segment_preference), CI(r->priority), CI(r->flags), CI(r->segment),
	                   CI(r->offset), CI(r->created_ns), CI(r->destroyed_ns));
}

/* Its digest is of the row the upsert leaves: the columns as recorded, removed_ns the one that
 * changes. */
static int write_tenant(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_tenant_rec *r = &n->u.tenant;

	return WRITE_STATE(a, co, ST_TENANT, GS_CHAIN_TENANT_LIMITS, r->id, CI(r->id),
	                   CS(n->tenant, false), CS(n->text2, false), CS(n->text1, false),
	                   CI(r->kind), CI(r->share), CI(r->priority_ceiling), CI(r->context_limit),
	                   CI(r->allocation_limit), CI(r->max_requests_per_second),
	                   CI(r->memory_quota), CI(r->admin), CI(r->created_ns), CI(r->removed_ns),
	                   CI(r->max_message), CI(r->packet_limit), CI(r->sync_limit));
}

/* errors and notes: a time, a tenant, a text, [a status,] a text, the seq. */
static int write_texts(gsd_audit *a, const struct node *n, chain_out *co)
{
	bool error = n->kind == REC_ERROR;
	sqlite3_stmt *s = a->st[error ? ST_ERROR : ST_NOTE];
	gs_chain_row *dp;
	col row[6];
	int ncols = 0;
	row[ncols++] = CI(n->time_ns);
	row[ncols++] = CS(n->tenant, n->nulls & NULL_TENANT);
	row[ncols++] = CS(n->text1, n->nulls & NULL_TEXT1);
	if (error)
		row[ncols++] = CI(n->u.status);
	row[ncols++] = CS(n->text2, n->nulls & NULL_TEXT2);
	row[ncols++] = CI(n->seq);

	dp = link_begin(a, n, co, 0);
	put_row(s, dp, row, ncols);
	bind_link(a, co, s, 0, ncols + 1);
	return step_reset(s);
}

static int write_move(gsd_audit *a, const struct node *n, chain_out *co)
{
	const gsd_move_rec *r = &n->u.move;
	sqlite3_stmt *s = a->st[ST_MOVE];
	gs_chain_row *dp;

	dp = link_begin(a, n, co, r->allocation);
	PUT_ROW(s, dp, CI(r->time_ns ? r->time_ns : n->time_ns),
	        CS(n->tenant, n->nulls & NULL_TENANT), CI(r->allocation), CI(r->device),
	        CI(r->adapter), CI(r->packet), CI(r->for_packet), CI(r->kind),
	        CS(move_kind_name(r->kind), false), CI(r->from_segment), CI(r->from_offset),
	        CI(r->to_segment), CI(r->to_offset), CI(r->bytes), CI(r->transfer_flags),
	        CI(r->pieces), CS(n->text1, n->nulls & NULL_TEXT1), CI(n->seq));
	bind_link(a, co, s, 0, 19);
	return step_reset(s);
}

/* Links the record into the chain (its row in `chain`) once its own rows are written. */
static int write_chain(gsd_audit *a, const struct node *n, chain_out *co)
{
	uint8_t *hash = co->hash;
	sqlite3_stmt *s = a->st[ST_CHAIN];

	if (!co->link_open)
		link_begin(a, n, co, co->ref);
	gs_chain_link_end(&co->link, co->has_state ? co->state : NULL, hash);
	gsd_audit_bind_u64(s, 1, n->seq);
	sqlite3_bind_int(s, 2, co->kind);
	gsd_audit_bind_u64(s, 3, co->ref);
	if (co->has_state)
		sqlite3_bind_blob(s, 4, co->state, GS_CHAIN_DIGEST, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, 4);
	sqlite3_bind_blob(s, 5, hash, GS_CHAIN_HASH, SQLITE_STATIC);
	int rc = step_reset(s);
	if (rc == SQLITE_OK) {
		memcpy(a->chain_head, hash, GS_CHAIN_HASH);
		a->chain_head_seq = n->seq;
	}
	return rc;
}

/* Each kind of record: the chain kind of its digest and the function that writes its row. */
static const struct {
	gs_chain_kind chain;
	int (*write)(gsd_audit *a, const struct node *n, chain_out *co);
} record_writers[] = {
        [REC_PACKET] = {GS_CHAIN_PACKET, write_packet},
        [REC_CONTEXT] = {GS_CHAIN_CONTEXT, write_context},
        [REC_ALLOCATION] = {GS_CHAIN_ALLOCATION, write_allocation},
        [REC_ERROR] = {GS_CHAIN_ERROR, write_texts},
        [REC_NOTE] = {GS_CHAIN_NOTE, write_texts},
        [REC_MOVE] = {GS_CHAIN_MOVE, write_move},
        [REC_TENANT] = {GS_CHAIN_TENANT_LIMITS, write_tenant},
};

static int write_node(gsd_audit *a, const struct node *n)
{
	switch (n->kind) {
	case REC_FLUSH:
		return SQLITE_OK; /* only its ack matters */
	case REC_PRUNE:
		a->prune_now = true;
		return SQLITE_OK;
	default:
		break;
	}
	if ((size_t)n->kind >= sizeof record_writers / sizeof record_writers[0] ||
	    !record_writers[n->kind].write)
		return SQLITE_MISUSE;
	chain_out co = {.kind = record_writers[n->kind].chain};
	int rc = record_writers[n->kind].write(a, n, &co);
	if (rc != SQLITE_OK || a->chain_off)
		return rc;
	/* An event kept in its packets row (link_kept) has its link in co.hash. */
	if (!co.linked)
		return write_chain(a, n, &co);
	memcpy(a->chain_head, co.hash, GS_CHAIN_HASH);
	a->chain_head_seq = n->seq;
	return SQLITE_OK;
}

/* The highest audit sequence number in the file (0 when it has none): every table a record's
 * seq lands in, the chain table (contexts, allocations, allocation lists) included. */
/* ---- retention (writer thread, inside a batch's transaction) ---- */

/* At most this many sequence numbers leave the file per step, so a step adds milliseconds to
 * the commit it runs in; a step runs at most every PRUNE_EVERY_NS unless one is asked for. */
#define PRUNE_STEP     20000u
#define PRUNE_EVERY_NS 1000000000ull

static int64_t one_int(sqlite3 *db, const char *sql, int64_t bind1, int64_t dflt)
{
	sqlite3_stmt *s;
	int64_t v = dflt;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return dflt;
	if (sqlite3_bind_parameter_count(s) >= 1)
		sqlite3_bind_int64(s, 1, bind1);
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

static int exec_bound(sqlite3 *db, const char *sql, int64_t v1, int64_t v2)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return rc;
	int n = sqlite3_bind_parameter_count(s);
	if (n >= 1)
		sqlite3_bind_int64(s, 1, v1);
	if (n >= 2)
		sqlite3_bind_int64(s, 2, v2);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* The newest packet the retention lets go: older than max_age, or beyond the newest
 * max_packets. Packet ids grow with submission time, so a binary search over ids finds the
 * age boundary with a few lookups by rowid. 0: none. */
static int64_t prune_packet_cut(gsd_audit *a)
{
	int64_t maxp = one_int(a->db, "SELECT max(packet) FROM packets", 0, 0);
	int64_t cut = 0;
	if (a->retain_packets && maxp > (int64_t)a->retain_packets)
		cut = maxp - (int64_t)a->retain_packets;
	if (a->retain_age_ns) {
		int64_t limit = (int64_t)(now_ns() - a->retain_age_ns);
		int64_t lo = one_int(a->db, "SELECT min(packet) FROM packets", 0, 1), hi = maxp;
		/* The largest id submitted before limit: invariant submitted(lo-1) < limit. */
		if (one_int(a->db,
		            "SELECT submitted_ns FROM packets WHERE packet >= ?1 ORDER BY packet "
		            "LIMIT 1",
		            lo, INT64_MAX) < limit) {
			while (lo < hi) {
				int64_t mid = lo + (hi - lo + 1) / 2;
				int64_t t = one_int(
				        a->db,
				        "SELECT submitted_ns FROM packets WHERE packet >= ?1 "
				        "ORDER BY packet LIMIT 1",
				        mid, INT64_MAX);
				if (t < limit)
					lo = mid;
				else
					hi = mid - 1;
			}
			if (lo > cut)
				cut = lo;
		}
	}
	return cut;
}

/* Hex of the digest of every base object, in key order (what meta.chain_base_objects holds). */
static int base_objects_digest(sqlite3 *db, char hex[2 * GS_CHAIN_HASH + 1])
{
	uint8_t h[GS_CHAIN_HASH];
	int rc = gs_chain_base_objects_digest(db, h);
	if (rc == 0)
		gs_chain_hex(h, hex);
	return rc == 0 ? SQLITE_OK : SQLITE_ERROR;
}

/* The newest (or oldest) record with seq in (lo, hi] whose link is in the file, into *seq and
 * hex: 1, 0 when none, -1 on error. */
static int linked_record(gsd_audit *a, int64_t lo, int64_t hi, bool newest, int64_t *seq,
                         char hex[2 * GS_CHAIN_HASH + 1])
{
	char sql[1536];
	snprintf(sql, sizeof sql,
	         "SELECT seq, hash FROM (SELECT seq, hash FROM packet_event_rows WHERE seq > ?1"
	         " AND seq <= ?2 UNION ALL SELECT end_seq AS seq, hash FROM packets WHERE end_seq"
	         " <> 0 AND end_seq > ?1 AND end_seq <= ?2 UNION ALL SELECT seq, hash FROM packets"
	         " WHERE seq <> 0 AND seq > ?1 AND seq <= ?2 AND end_seq = 0 AND ready_seq = 0 AND"
	         " run_seq = 0 AND hash IS NOT NULL UNION ALL SELECT max(ready_seq, run_seq), hash"
	         " FROM packets WHERE ready_seq <> 0 AND end_seq = 0 AND max(ready_seq, run_seq) >"
	         " ?1 AND max(ready_seq, run_seq) <= ?2 AND hash IS NOT NULL"
	         " UNION ALL SELECT seq, hash FROM moves WHERE seq > ?1 AND seq <= ?2 UNION ALL"
	         " SELECT seq, hash FROM errors WHERE seq > ?1 AND seq <= ?2 UNION ALL SELECT seq,"
	         " hash FROM notes WHERE seq > ?1 AND seq <= ?2 UNION ALL SELECT seq, hash FROM"
	         " chain WHERE seq > ?1 AND seq <= ?2) WHERE length(hash) = %d ORDER BY seq %s"
	         " LIMIT 1",
	         GS_CHAIN_HASH, newest ? "DESC" : "ASC");
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(a->db, sql, -1, &s, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int64(s, 1, lo);
	sqlite3_bind_int64(s, 2, hi);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*seq = sqlite3_column_int64(s, 0);
		gs_chain_hex(sqlite3_column_blob(s, 1), hex);
	}
	sqlite3_finalize(s);
	return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

/*
 * One retention step: the records up to X (the last before the first event of the oldest packet
 * kept, at most PRUNE_STEP past the previous base) leave the file. What they leave behind is
 * kept verifiable: meta.chain_base_seq/hash are X and its link (the next record links to it),
 * and every row of packets, contexts or allocations whose last record goes (a packet still in
 * flight, a live context or allocation) gets its recorded state in chain_base_objects, whose
 * digest meta.chain_base_objects holds. Final packets, destroyed contexts and allocations, and
 * their allocation lists go with their records. Returns 1 when it removed records, 0 when
 * nothing was due, or an SQLite error.
 */
static int prune_step(gsd_audit *a)
{
	int64_t cut = prune_packet_cut(a);
	if (cut <= 0)
		return 0;
	/* Records up to the base are gone: the chain's base, or records older than the chain
	 * that an earlier step removed without an anchor (pruned_seq). */
	int64_t base = one_int(a->db,
	                       "SELECT max(CAST(value AS INTEGER)) FROM meta WHERE key IN"
	                       " ('chain_base_seq', 'pruned_seq')",
	                       0, 0);
	int64_t start = one_int(
	        a->db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'chain_start_seq'", 0,
	        1);
	int64_t head = one_int(a->db, "SELECT " MAX_SEQ_SQL, 0, 0);
	int64_t next =
	        one_int(a->db,
	                "SELECT min(s) FROM (SELECT min(seq) AS s FROM packet_event_rows WHERE"
	                " packet = (SELECT min(packet) FROM packets WHERE packet > ?1) UNION ALL"
	                " SELECT seq FROM packets WHERE packet = (SELECT min(packet) FROM"
	                " packets WHERE packet > ?1) AND seq <> 0)",
	                cut, head + 1);
	int64_t x = next - 1;
	if (x > head)
		x = head;
	if (x > base + (int64_t)PRUNE_STEP)
		x = base + (int64_t)PRUNE_STEP;
	if (x <= base)
		return 0;
	/* The link of record x (refused records leave gaps; none when x is older than the chain:
	 * a file from a daemon without it, or with chain format 1), which the next record links
	 * to. Events kept in packets rows keep only their row's newest link, so x moves back to
	 * the last record up to x whose link is in the file; when there is none past the base (a
	 * run of kept SUBMITTEDs whose rows' later events replaced their links), forward to the
	 * first one before the oldest kept packet's records, past PRUNE_STEP this once (else the
	 * retention stopped there for good). */
	char link_hex[2 * GS_CHAIN_HASH + 1] = "";
	if (x >= start) {
		int64_t limit = next - 1 < head ? next - 1 : head;
		int found = linked_record(a, base, x, true, &x, link_hex);
		if (found == 0 && limit > x)
			found = linked_record(a, x, limit, false, &x, link_hex);
		if (found < 0)
			return SQLITE_ERROR;
		if (found == 0 || x <= base)
			return 0;
	}

	static const char *const steps[] = {
	        /* Packets whose last event goes: final ones go, the others become base objects. */
	        /* (A packet whose last event is its SUBMITTED kept in its row keeps it there:
	         * it needs no anchor.) */
	        "INSERT OR REPLACE INTO chain_base_objects (kind, ref, state)"
	        " SELECT 1, p.packet, e.state_digest FROM packets p JOIN packet_event_rows e"
	        " ON e.seq = (SELECT max(seq) FROM packet_event_rows WHERE packet = p.packet)"
	        " WHERE p.packet <= ?2 AND e.seq <= ?1 AND p.state NOT IN (4, 5, 6, 9, 10)"
	        " AND e.state_digest IS NOT NULL AND e.seq > p.seq AND e.seq > p.ready_seq"
	        " AND e.seq > p.run_seq",
	        "DELETE FROM packet_allocations WHERE packet IN (SELECT p.packet FROM packets p"
	        " WHERE p.packet <= ?2 AND p.state IN (4, 5, 6, 9, 10) AND max(IFNULL((SELECT"
	        " max(seq) FROM packet_event_rows WHERE packet = p.packet), 0), p.seq, p.end_seq,"
	        " p.ready_seq, p.run_seq) <= ?1)",
	        "DELETE FROM packets WHERE packet <= ?2 AND state IN (4, 5, 6, 9, 10) AND"
	        " max(IFNULL((SELECT max(seq) FROM packet_event_rows WHERE packet ="
	        " packets.packet), 0), seq, end_seq, ready_seq, run_seq) <= ?1",
	        /* Contexts and allocations whose last record goes: destroyed ones go, the live
	         * ones become base objects. */
	        "INSERT OR REPLACE INTO chain_base_objects (kind, ref, state)"
	        " SELECT c.kind, c.ref, c.state FROM chain c WHERE c.kind IN (2, 3, 8) AND c.seq "
	        "<= ?1"
	        " AND c.seq = (SELECT max(seq) FROM chain d WHERE d.kind = c.kind AND d.ref = "
	        "c.ref)"
	        " AND NOT ((c.kind = 2 AND EXISTS (SELECT 1 FROM contexts WHERE context = c.ref AND"
	        " destroyed_ns <> 0)) OR (c.kind = 3 AND EXISTS (SELECT 1 FROM allocations WHERE"
	        " allocation = c.ref AND destroyed_ns <> 0)))",
	        "DELETE FROM contexts WHERE destroyed_ns <> 0 AND (SELECT max(seq) FROM chain WHERE"
	        " kind = 2 AND ref = contexts.context) <= ?1",
	        "DELETE FROM allocations WHERE destroyed_ns <> 0 AND (SELECT max(seq) FROM chain"
	        " WHERE kind = 3 AND ref = allocations.allocation) <= ?1",
	        /* Anchored rows that went in this step (a packet that has ended since, a context
	         * or allocation destroyed since) leave the anchors: every anchor names a row. */
	        "DELETE FROM chain_base_objects WHERE (kind = 1 AND NOT EXISTS (SELECT 1 FROM"
	        " packets WHERE packet = ref)) OR (kind = 2 AND NOT EXISTS (SELECT 1 FROM contexts"
	        " WHERE context = ref)) OR (kind = 3 AND NOT EXISTS (SELECT 1 FROM allocations"
	        " WHERE allocation = ref))",
	        /* A packet whose row keeps a READY or RUNNING newer than its event rows (schema
	         * 9) needs no anchor: the row's digest of it vouches for the row. An anchor an
	         * earlier step left (from a SUBMITTED row) goes, or the verifier, which places
	         * anchors at the base, would take it for the newer record once the base passes
	         * the kept one (found in review). */
	        "DELETE FROM chain_base_objects WHERE kind = 1 AND ref IN (SELECT packet FROM"
	        " packets WHERE ready_seq <> 0 AND end_seq = 0 AND max(ready_seq, run_seq) >"
	        " IFNULL((SELECT max(seq) FROM packet_event_rows e WHERE e.packet ="
	        " packets.packet), 0))",
	        "DELETE FROM packet_event_rows WHERE seq <= ?1",
	        "DELETE FROM moves WHERE seq <= ?1",
	        "DELETE FROM errors WHERE seq <= ?1",
	        "DELETE FROM notes WHERE seq <= ?1",
	        "DELETE FROM chain WHERE seq <= ?1",
	};
	int rc = sqlite3_exec(a->db, "SAVEPOINT prune", NULL, NULL, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < sizeof steps / sizeof steps[0]; i++)
		rc = exec_bound(a->db, steps[i], x, cut);
	char objects_hex[2 * GS_CHAIN_HASH + 1];
	char sql[512];
	if (rc == SQLITE_OK && !link_hex[0]) {
		snprintf(sql, sizeof sql,
		         "INSERT OR REPLACE INTO meta (key, value) VALUES ('pruned_seq', '%lld')",
		         (long long)x);
		rc = sqlite3_exec(a->db, sql, NULL, NULL, NULL);
	} else if (rc == SQLITE_OK) {
		rc = base_objects_digest(a->db, objects_hex);
	}
	if (rc == SQLITE_OK && link_hex[0]) {
		snprintf(sql, sizeof sql,
		         "INSERT OR REPLACE INTO meta (key, value) VALUES ('chain_base_seq', "
		         "'%lld'),"
		         " ('chain_base_hash', '%s'), ('chain_base_objects', '%s')",
		         (long long)x, link_hex, objects_hex);
		rc = sqlite3_exec(a->db, sql, NULL, NULL, NULL);
	}
	if (rc != SQLITE_OK) {
		GSD_WARN("audit: retention step failed: %s", sqlite3_errmsg(a->db));
		sqlite3_exec(a->db, "ROLLBACK TO prune", NULL, NULL, NULL);
		sqlite3_exec(a->db, "RELEASE prune", NULL, NULL, NULL);
		return rc;
	}
	sqlite3_exec(a->db, "RELEASE prune", NULL, NULL, NULL);
	atomic_fetch_add_explicit(&a->pruned, (uint64_t)(x - base), memory_order_relaxed);
	return 1;
}

/*
 * Writes one batch in one transaction. Returns true when it committed. A record SQLite refuses
 * on its own (a constraint) is marked failed and the others still commit; an error that ends
 * the transaction (disk full, I/O error) fails the whole batch.
 */
/*
 * Marks every packet record that a later record of the same packet in this batch follows: only
 * the last one upserts the packets row (every record still appends its event row).
 */
static bool same_owner(const struct node *x, const struct node *y)
{
	return x->u.packet.packet == y->u.packet.packet &&
	       (x->nulls & NULL_TENANT) == (y->nulls & NULL_TENANT) &&
	       strcmp(x->tenant, y->tenant) == 0;
}

/*
 * A straight run (schema 8): the first READY, the RUNNING and the COMPLETED of a packet, one
 * after the other with nothing else of the packet between them and nothing to say on the
 * RUNNING and COMPLETED (the READY's reasons are kept as its detail). Their events go into the
 * packet's row instead of rows of packet_event_rows: the row has their times (ready_ns,
 * started_ns, completed_ns: each record's own event time, which must be that column when it
 * is recorded; a GPU's own start may move started_ns when the packet ends, and the row then
 * keeps the RUNNING's time as run_ns) and seqs. Since schema 9 the run may span commits: each
 * commit keeps the events of the run it has, and ST_PACKET_KEEP checks that the row holds the
 * rest as this batch's records see them.
 * The seqs are at most GSD_AUDIT_FOLD_SPAN apart, which the readers of a seq range rely on.
 */
static bool keeps_event(const struct node *n, int state, uint64_t col_ns, bool detail_ok)
{
	const gsd_packet_rec *r = &n->u.packet;
	return !n->no_keep && r->state == state && !r->resubmissions && !r->preemptions &&
	       (detail_ok || (n->nulls & NULL_TEXT2)) && r->event_ns && r->event_ns == col_ns &&
	       !n->palloc.n;
}

/* Marks n (a packet record, prev the one of its packet before it in this batch, l their slot)
 * kept when it goes on its packet's straight run, and unmarks the run of this batch when it
 * does not. */
static void mark_straight_run(struct latest_slot *l, struct node *n, const struct node *prev)
{
	const gsd_packet_rec *e = &n->u.packet;
	struct node *kr = l->run_ready, *ku = l->run_run, *ke = l->run_end;
	/* The RUNNING's own time as this record has it. */
	uint64_t run_ns = e->run_ns ? e->run_ns : e->started_ns;
	if (keeps_event(n, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_READY, e->ready_ns, true) &&
	    !kr && !ku && !ke) {
		n->fold = FOLD_READY;
		l->run_ready = n;
		return;
	}
	/* It follows the run's last event of this batch, or begins the batch (the row holds
	 * the run before it: ST_PACKET_KEEP checks). */
	bool after_ready = kr && !ku && prev == kr, first = !prev && !ke;
	if (keeps_event(n, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_RUNNING, e->started_ns,
	                false) &&
	    !e->run_ns && (after_ready || first) && (!kr || kr->u.packet.event_ns == e->ready_ns) &&
	    (!kr || n->seq - kr->seq <= GSD_AUDIT_FOLD_SPAN)) {
		n->fold = FOLD_RUN;
		n->fold_ready = kr;
		l->run_run = n;
		return;
	}
	if (keeps_event(n, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_COMPLETED, e->completed_ns,
	                false) &&
	    ((ku && prev == ku) || first) && (!kr || kr->u.packet.event_ns == e->ready_ns) &&
	    (!ku || ku->u.packet.event_ns == run_ns) &&
	    (!kr || n->seq - kr->seq <= GSD_AUDIT_FOLD_SPAN)) {
		n->fold = FOLD_END;
		n->fold_ready = kr;
		n->fold_run = ku;
		l->run_end = n;
		return;
	}
	/* Not on the run (or after its end): the run's events of this batch are rows after all. */
	struct node *run[] = {kr, ku, ke};
	for (size_t i = 0; i < 3; i++)
		if (run[i])
			run[i]->fold = FOLD_NONE;
	l->run_ready = l->run_run = l->run_end = NULL;
}

/*
 * Marks every packet record that a later record of the same packet and tenant in this batch
 * follows: only the last one upserts the packets row (every record still appends its event).
 * Keyed by tenant too, so a record naming another tenant's packet never hides the owner's.
 */
static void mark_superseded(gsd_audit *a, struct node *first)
{
	uint64_t batch = ++a->batch_seq;
	for (struct node *n = first; n; n = n->next) {
		if (n->kind != REC_PACKET)
			continue;
		struct latest_slot *l = slot_of(a, n);
		n->fresh = n->u.packet.state == GPUSCHED__V1__PACKET_STATE__PACKET_STATE_SUBMITTED;
		n->fold = FOLD_NONE;
		n->fold_ready = n->fold_run = NULL;
		struct node *prev = NULL, *run_ready = NULL, *run_run = NULL, *run_end = NULL;
		if (l->batch == batch) {
			prev = (struct node *)l->node;
			prev->superseded = true;
			n->fresh |= prev->fresh;
			run_ready = l->run_ready;
			run_run = l->run_run;
			run_end = l->run_end;
		}
		*l = (struct latest_slot){.packet = n->u.packet.packet,
		                          .batch = batch,
		                          .node = n,
		                          .owner = -1,
		                          .run_ready = run_ready,
		                          .run_run = run_run,
		                          .run_end = run_end};
		mark_straight_run(l, n, prev);
	}
}

/* Is the file the daemon writes still the one at the configured path? A removed or replaced
 * file would take every record of this commit into a file nobody can read again. */
static bool file_still_there(gsd_audit *a)
{
	struct stat st;
	bool same = stat(a->db_path, &st) == 0 && st.st_dev == a->db_dev && st.st_ino == a->db_ino;
	if (!same && !a->file_gone)
		GSD_ERROR("audit: %s was removed or replaced: nothing is committed or acknowledged "
		          "until it is back (restore it, or restart the daemon)",
		          a->db_path);
	else if (same && a->file_gone)
		GSD_WARN("audit: %s is back: committing again", a->db_path);
	a->file_gone = !same;
	return same;
}

/*
 * Was a refused record n to keep events in its packets row: a straight run's end (its READY
 * and RUNNING are linked: the chain would hold links without a row), the record that was to
 * write a row keeping its SUBMITTED (linked earlier in the batch), or a kept SUBMITTED (its
 * packet has a row already: as a row, it takes the upsert every record had before schema 8)?
 * Its packet's records are then written again as rows.
 */
static bool leaves_kept_links(gsd_audit *a, const struct node *n)
{
	return n->kind == REC_PACKET &&
	       (n->fold != FOLD_NONE || (n->fresh && !n->superseded && slot_of(a, n)->sub));
}

static bool write_batch(gsd_audit *a, struct node *first)
{
again:
	a->batch_rows = a->batch_kept = 0;
	mark_superseded(a, first);
	/* gsd_audit_commit_here began the first transaction itself. */
	bool begun = a->txn_open;
	a->txn_open = false;
	if (!file_still_there(a)) {
		if (begun)
			step_reset(a->st[ST_ROLLBACK]);
		atomic_store(&a->health, GSD_AUDIT_FILE_GONE);
		return false;
	}
	int rc = begun ? SQLITE_OK : step_reset(a->st[ST_BEGIN]);
	if (rc != SQLITE_OK) {
		GSD_ERROR("audit: BEGIN failed: %s", sqlite3_errmsg(a->db));
		return false;
	}
	memcpy(a->batch_head, a->chain_head, GS_CHAIN_HASH);
	a->batch_head_seq = a->chain_head_seq;
	for (struct node *n = first; n; n = n->next) {
		rc = write_node(a, n);
		if (rc == SQLITE_OK)
			continue;
		if (sqlite3_get_autocommit(a->db)) {
			/* SQLite rolled the transaction back itself. */
			GSD_ERROR("audit: batch aborted: %s", sqlite3_errmsg(a->db));
			memcpy(a->chain_head, a->batch_head, GS_CHAIN_HASH);
			a->chain_head_seq = a->batch_head_seq;
			return false;
		}
		if (leaves_kept_links(a, n)) {
			/* Its packet's records are written again, as rows (no_keep), and the batch
			 * with them: a link the file does not hold would break the chain. */
			GSD_DEBUG("audit: a packet's row could not keep its events (%s): its "
			          "batch is written again with them as rows",
			          sqlite3_errmsg(a->db));
			step_reset(a->st[ST_ROLLBACK]);
			memcpy(a->chain_head, a->batch_head, GS_CHAIN_HASH);
			a->chain_head_seq = a->batch_head_seq;
			for (struct node *m = first; m; m = m->next)
				if (m->kind == REC_PACKET && same_owner(m, n))
					m->no_keep = true;
			goto again;
		}
		GSD_WARN("audit: record refused: %s", sqlite3_errmsg(a->db));
		n->failed = true;
	}
	/* Retention: a bounded step at most once a second (every step at once when asked), in
	 * this transaction, so it commits or fails with the records. */
	if ((a->retain_age_ns || a->retain_packets) && !a->chain_off &&
	    (a->prune_now || now_ns() >= a->next_prune_ns)) {
		for (int i = 0; i < (a->prune_now ? 1000 : 1) && prune_step(a) == 1; i++)
			;
		a->next_prune_ns = now_ns() + PRUNE_EVERY_NS;
	}
	a->prune_now = false;
	/* The last link, so that removing the newest records is found too. */
	if (!a->chain_off && memcmp(a->chain_head, a->batch_head, GS_CHAIN_HASH) != 0) {
		char hex[2 * GS_CHAIN_HASH + 1];
		gs_chain_hex(a->chain_head, hex);
		sqlite3_bind_text(a->st[ST_HEAD], 1, hex, -1, SQLITE_TRANSIENT);
		gsd_audit_bind_u64(a->st[ST_HEAD], 2, a->chain_head_seq);
		rc = step_reset(a->st[ST_HEAD]);
		if (rc != SQLITE_OK && sqlite3_get_autocommit(a->db)) {
			memcpy(a->chain_head, a->batch_head, GS_CHAIN_HASH);
			a->chain_head_seq = a->batch_head_seq;
			return false;
		}
	}
	rc = step_reset(a->st[ST_COMMIT]);
	if (rc == SQLITE_OK) {
		atomic_fetch_add_explicit(&a->event_rows, a->batch_rows, memory_order_relaxed);
		atomic_fetch_add_explicit(&a->events_kept, a->batch_kept, memory_order_relaxed);
		return true;
	}
	GSD_ERROR("audit: COMMIT failed: %s", sqlite3_errmsg(a->db));
	if (!sqlite3_get_autocommit(a->db))
		step_reset(a->st[ST_ROLLBACK]);
	memcpy(a->chain_head, a->batch_head, GS_CHAIN_HASH);
	a->chain_head_seq = a->batch_head_seq;
	return false;
}

/*
 * The writer's busy handler. SQLite's own (sqlite3_busy_timeout) sleeps at least 1 ms on the
 * first conflict, but the lock the writer meets is nearly always the checkpointer's RESTART,
 * which holds new writers for a fraction of that (a few hundred frames and two fsyncs): each
 * one cost the commit waiting behind it 1.1 ms (bench_audit --acked: 10 to 30 per 5000
 * commits). This one polls every BUSY_POLL_US for the first BUSY_POLL_MS, then sleeps 1 ms at
 * a time, and gives up after busy_ms in all, as sqlite3_busy_timeout(busy_ms) would.
 */
#define BUSY_POLL_US 50
#define BUSY_POLL_MS 5

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Time this thread slept in writer_busy (commit_was_slow). */
static _Thread_local uint64_t busy_sleep_ns;

static int writer_busy(void *arg, int count)
{
	gsd_audit *a = arg;
	uint64_t now = mono_ns();
	if (count == 0)
		a->busy_since_ns = now;
	uint64_t waited = now - a->busy_since_ns;
	if (waited >= (uint64_t)a->busy_ms * 1000000ull)
		return 0;
	struct timespec ts = {0,
	                      waited < BUSY_POLL_MS * 1000000ull ? BUSY_POLL_US * 1000l : 1000000l};
	nanosleep(&ts, NULL);
	busy_sleep_ns += mono_ns() - now;
	return 1;
}

/* How long the writer's connection waits for a lock (0: not at all). */
static void writer_busy_wait(gsd_audit *a, int ms)
{
	a->busy_ms = ms;
	sqlite3_busy_handler(a->db, ms > 0 ? writer_busy : NULL, a);
}

/*
 * Replaces SQLite's auto-checkpoint, which would run inside COMMIT and so delay every ack that
 * waits on that commit; we checkpoint after the acks instead (see writer_checkpoint).
 */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
	(void)db;
	(void)name;
	((gsd_audit *)arg)->wal_frames = frames;
	return SQLITE_OK;
}

/*
 * Bounds the WAL file. Past wal_limit, TRUNCATE resets it to zero bytes; with no busy wait, a
 * reader still using old frames makes it fall back to PASSIVE (copy what it can, return BUSY),
 * and the next commit tries again. This runs before the acks, but only once the WAL is over its
 * limit, which the passive checkpoints below normally prevent.
 */
static void writer_truncate_wal(gsd_audit *a)
{
	/* The WAL file is at least as large as the frames it holds. */
	if ((uint64_t)a->wal_frames * a->frame_bytes <= a->wal_limit)
		return;
	writer_busy_wait(a, 0);
	int rc = sqlite3_wal_checkpoint_v2(a->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	writer_busy_wait(a, GSD_AUDIT_BUSY_TIMEOUT_MS);
	if (rc == SQLITE_OK) {
		atomic_fetch_add_explicit(&a->checkpoints, 1, memory_order_relaxed);
		a->wal_frames = 0;
	}
}

/*
 * The checkpointer restarts the WAL past RESTART_FRAMES frames (half of wal_limit when that is
 * smaller) when at most RESTART_LEFT of them are left to copy. A RESTART holds the writer for
 * the copy and two fsyncs (2.3 ms in a bench_neighbour trace here), so every commit that waits
 * meanwhile pays that: at 4000 frames (about 500 unbatched Submits) it set the light tenant's p99
 * in bench_neighbour; at 16000 (a WAL of about 17 MB with 1 KiB pages) it is rarer than that.
 */
#define RESTART_FRAMES 16000
#define RESTART_LEFT   512
/* A RESTART holds new writers while it waits for readers of the old WAL: at most this long
 * (then it gives up, and a later one tries again), so a history reader never stalls commits
 * for more than a moment. */
#define CKPT_BUSY_MS 2

/* The checkpointer's thread: a PASSIVE checkpoint each time the writer asks. */
static void *ckpt_main(void *arg)
{
	gsd_audit *a = arg;
	pthread_setname_np(pthread_self(), "gs-ckpt");
	pthread_mutex_lock(&a->ckpt_mu);
	for (;;) {
		while (!a->ckpt_wanted && !a->ckpt_stop)
			pthread_cond_wait(&a->ckpt_cv, &a->ckpt_mu);
		if (a->ckpt_stop)
			break;
		a->ckpt_wanted = false;
		pthread_mutex_unlock(&a->ckpt_mu);
		int log = 0, done = 0;
		if (sqlite3_wal_checkpoint_v2(a->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log,
		                              &done) == SQLITE_OK)
			atomic_fetch_add_explicit(&a->checkpoints, 1, memory_order_relaxed);
		/* The writer went on appending meanwhile, so the WAL is never wholly copied and
		 * never restarts by itself: once it is long and only a little is left, a RESTART
		 * copies that little with the writer held (briefly) and lets the WAL begin again,
		 * long before it reaches wal_limit (whose TRUNCATE costs tens of ms). */
		if ((uint64_t)log >= a->restart_frames && log - done <= RESTART_LEFT &&
		    sqlite3_wal_checkpoint_v2(a->ckpt_db, NULL, SQLITE_CHECKPOINT_RESTART, &log,
		                              &done) == SQLITE_OK)
			atomic_fetch_add_explicit(&a->checkpoints, 1, memory_order_relaxed);
		pthread_mutex_lock(&a->ckpt_mu);
	}
	pthread_mutex_unlock(&a->ckpt_mu);
	return NULL;
}

/*
 * Copies committed frames back into the database so the WAL can restart from its beginning:
 * asks the checkpointer, once per PASSIVE_CHECKPOINT_FRAMES new frames (the WAL restarts at a
 * commit after a complete checkpoint, and its frame count drops), and never waits for it.
 */
static void writer_checkpoint(gsd_audit *a)
{
	if (a->wal_frames < a->ckpt_asked_at)
		a->ckpt_asked_at = 0; /* the WAL restarted */
	if (a->wal_frames - a->ckpt_asked_at < PASSIVE_CHECKPOINT_FRAMES)
		return;
	if (a->ckpt_db) {
		a->ckpt_asked_at = a->wal_frames;
		pthread_mutex_lock(&a->ckpt_mu);
		a->ckpt_wanted = true;
		pthread_cond_signal(&a->ckpt_cv);
		pthread_mutex_unlock(&a->ckpt_mu);
		return;
	}
	int log = 0, done = 0;
	sqlite3_wal_checkpoint_v2(a->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
	if (log == done)
		a->wal_frames = 0;
}

/* Hands a written batch's nodes back for reuse, or frees them past the pool's bound. */
static void writer_recycle(gsd_audit *a, struct node *first, struct node *last, size_t count)
{
	pthread_mutex_lock(&a->mu);
	if (a->free_shared_count + count <= POOL_MAX) {
		last->next = a->free_shared;
		a->free_shared = first;
		a->free_shared_count += count;
		first = NULL;
	}
	pthread_mutex_unlock(&a->mu);
	while (first) {
		struct node *next = first->next;
		free(first);
		first = next;
	}
}

/* Should a record a failed commit could not write be kept for the next one? Not one somebody
 * waits for (it was answered "not written"), and not past the bound. */
static bool worth_retry(const gsd_audit *a, const struct node *n, size_t kept)
{
	return !n->ack && n->kind != REC_FLUSH && a->retry_count + kept < RETRY_MAX;
}

static void keep_for_retry(gsd_audit *a, struct node *n)
{
	n->failed = n->superseded = false;
	node_append(&a->retry_head, &a->retry_tail, n);
	a->retry_count++;
}

/* Drops what an outage kept (the daemon is stopping and the file is still not writable). */
static void drop_retries(gsd_audit *a)
{
	if (!a->retry_head)
		return;
	GSD_ERROR("audit: %zu records could not be written before stopping", a->retry_count);
	atomic_fetch_add_explicit(&a->dropped, a->retry_count, memory_order_relaxed);
	atomic_fetch_sub_explicit(&a->queued, a->retry_count, memory_order_relaxed);
	struct node *n = a->retry_head;
	while (n) {
		struct node *next = n->next;
		free(n->palloc.allocations);
		free(n);
		n = next;
	}
	a->retry_head = a->retry_tail = NULL;
	a->retry_count = 0;
}

/* Puts the kept records in front of list: they were made first, so they are written first. */
static struct node *take_retries(gsd_audit *a, struct node *list)
{
	if (!a->retry_head)
		return list;
	a->retry_tail->next = list;
	list = a->retry_head;
	a->retry_head = a->retry_tail = NULL;
	a->retry_count = 0;
	return list;
}

/* Counts a written (or failed) batch, answers its waiters, keeps what a failed commit should
 * retry and recycles the rest. The counts are updated before the answers, so a waiter sees them. */
static void finish_batch(gsd_audit *a, struct node *first, size_t count, bool ok)
{
	size_t kept = 0, failed = 0;
	for (struct node *n = first; n; n = n->next) {
		if (ok)
			failed += n->failed;
		else if (worth_retry(a, n, kept))
			kept++;
		else
			failed++;
	}
	if (ok)
		atomic_fetch_add_explicit(&a->records, count - failed, memory_order_relaxed);
	atomic_fetch_add_explicit(&a->dropped, failed, memory_order_relaxed);
	/* What is kept stays queued. */
	atomic_fetch_sub_explicit(&a->queued, count - kept, memory_order_relaxed);

	struct node *done = NULL, *done_last = NULL;
	size_t done_count = 0;
	while (first) {
		struct node *n = first;
		first = n->next;
		if (n->ack)
			n->ack(n->ack_arg, ok && !n->failed);
		if (!ok && worth_retry(a, n, 0)) {
			keep_for_retry(a, n);
			continue;
		}
		/* The recycled node keeps no pointer into freed memory. */
		free(n->palloc.allocations);
		n->palloc = (struct packet_allocs){0};
		n->next = done;
		done = n;
		if (!done_last)
			done_last = n;
		done_count++;
	}
	if (done)
		writer_recycle(a, done, done_last, done_count);
}

/*
 * Writes a detached list in transactions of at most max_batch records, acking each after it.
 * After a failed commit the rest of the list is not tried (it would be written out of order):
 * its waiters are answered "not written" and its other records kept for the retry.
 */
static void writer_drain(gsd_audit *a, struct node *list, bool on_caller)
{
	list = take_retries(a, list);
	bool ok = true;
	while (list) {
		struct node *first = list, *last = list;
		size_t count = 1;
		/* (A packet's records queued together, gsd_audit_group, stay in one batch: its
		 * row then keeps them.) */
		while (last->next && (count < a->max_batch ||
		                      (last->kind == REC_PACKET && last->next->kind == REC_PACKET &&
		                       last->u.packet.packet == last->next->u.packet.packet))) {
			last = last->next;
			count++;
		}
		list = last->next;
		last->next = NULL;

		if (ok) {
			ok = a->null_sink || write_batch(a, first);
			if (ok) {
				atomic_store(&a->health, GSD_AUDIT_OK);
				atomic_fetch_add_explicit(&a->commits, 1, memory_order_relaxed);
				/* A producer's commit leaves a TRUNCATE (tens of ms) to the
				 * writer: gsd_audit_commit_here hands over once it is due. */
				if (!on_caller)
					writer_truncate_wal(a);
			} else {
				if (atomic_load(&a->health) == GSD_AUDIT_OK)
					atomic_store(&a->health, GSD_AUDIT_FAILING);
				atomic_fetch_add_explicit(&a->failures, 1, memory_order_relaxed);
			}
		}
		finish_batch(a, first, count, ok);
	}
	if (ok) {
		a->retry_delay_ns = 0;
		writer_checkpoint(a);
	} else {
		a->retry_delay_ns = a->retry_delay_ns ? a->retry_delay_ns * 2 : RETRY_FIRST_NS;
		if (a->retry_delay_ns > RETRY_LAST_NS)
			a->retry_delay_ns = RETRY_LAST_NS;
		a->retry_at_ns = now_ns() + a->retry_delay_ns;
	}
}

/* Under mu, by whoever holds draining: everything queued, for writer_drain. */
static struct node *take_queue(gsd_audit *a)
{
	struct node *list = a->head;
	a->head = a->tail = NULL;
	a->list_count = 0;
	a->pending_acks = 0;
	return list;
}

/* Under mu: waits while a producer commits (gsd_audit_commit_here), then holds the right to
 * write until it clears draining (under mu again). */
static void writer_claim(gsd_audit *a)
{
	while (a->draining) {
		a->writer_blocked = true;
		pthread_cond_wait(&a->cv, &a->mu);
	}
	a->writer_blocked = false;
	a->draining = true;
	a->writer_wanted = false;
}

static void *writer_main(void *arg)
{
	gsd_audit *a = arg;
	pthread_setname_np(pthread_self(), "gs-audit");

	pthread_mutex_lock(&a->mu);
	uint64_t quiet_until = 0;
	for (;;) {
		bool retry_due = false;
		/* After a commit the rest of its packets' lives (READY, RUNNING, COMPLETED) follow
		 * at once: they are queued without waking the writer, which sleeps until
		 * LINGER_NS after the commit unless an acknowledgement or a full batch wakes it
		 * (node_push). Only a writer idle past that is woken by a first record. */
		while (quiet_until && !a->head && !a->stopping) {
			struct timespec ts = {(time_t)(quiet_until / 1000000000ull),
			                      (long)(quiet_until % 1000000000ull)};
			if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) != 0)
				break;
		}
		quiet_until = 0;
		a->idle = true;
		while (!a->head && !a->stopping && !retry_due) {
			/* The retry list is read only while nobody writes (see draining). */
			if (a->draining || !a->retry_head) {
				pthread_cond_wait(&a->cv, &a->mu);
				continue;
			}
			struct timespec ts = {(time_t)(a->retry_at_ns / 1000000000ull),
			                      (long)(a->retry_at_ns % 1000000000ull)};
			retry_due = pthread_cond_timedwait(&a->cv, &a->mu, &ts) != 0;
		}
		a->idle = false;
		if (!a->head && !retry_due) {
			/* Stopping, and everything queued before it is written: one last try for
			 * what an outage kept, then it is dropped. */
			writer_claim(a);
			pthread_mutex_unlock(&a->mu);
			if (a->retry_head)
				writer_drain(a, NULL, false);
			drop_retries(a);
			pthread_mutex_lock(&a->mu);
			a->draining = false;
			break;
		}
		if (!a->head) {
			writer_claim(a);
			pthread_mutex_unlock(&a->mu);
			writer_drain(a, NULL, false);
			pthread_mutex_lock(&a->mu);
			a->draining = false;
			continue;
		}
		/* Let records nobody waits for gather (see LINGER_NS). */
		uint64_t deadline = a->head->time_ns + LINGER_NS;
		while (!a->stopping && a->pending_acks == 0 && a->list_count < LINGER_MAX) {
			struct timespec ts = {(time_t)(deadline / 1000000000ull),
			                      (long)(deadline % 1000000000ull)};
			if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) != 0)
				break; /* the deadline passed */
		}
		if (a->last_acks >= 2 && a->pending_acks < a->last_acks && !a->stopping) {
			uint64_t until = now_ns() + ACK_GATHER_NS;
			struct timespec ts = {(time_t)(until / 1000000000ull),
			                      (long)(until % 1000000000ull)};
			a->ack_target = a->last_acks;
			while (!a->stopping && a->pending_acks < a->ack_target &&
			       a->list_count < LINGER_MAX)
				if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) != 0)
					break;
			a->ack_target = 0;
		}
		/* A producer may have committed the list meanwhile (then it is empty now). */
		writer_claim(a);
		a->last_acks = a->pending_acks;
		struct node *list = take_queue(a);
		pthread_mutex_unlock(&a->mu);
		writer_drain(a, list, false);
		pthread_mutex_lock(&a->mu);
		if (!a->retry_head)
			quiet_until = now_ns() + LINGER_NS;
		a->draining = false;
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* ---- producers (loop thread) ---- */

/* A cleared node from the private pool, or a new one; NULL only when memory is exhausted. */
static struct node *node_take(gsd_audit *a, enum rec_kind kind)
{
	struct node *n = a->free_local;
	if (n)
		a->free_local = n->next;
	else if (!(n = malloc(sizeof *n)))
		return NULL;
	/* Clear only the header: the strings are always written before they are read. */
	memset(n, 0, offsetof(struct node, tenant));
	n->kind = kind;
	n->time_ns = now_ns();
	return n;
}

/* Appends the records first..last (count of them) to the queue and wakes the writer when it
 * has something to decide. */
static void queue_nodes(gsd_audit *a, struct node *first, struct node *last, size_t count)
{
	pthread_mutex_lock(&a->mu);
	bool was_empty = !a->head;
	bool wake = false;
	if (a->tail)
		a->tail->next = first;
	else
		a->head = first;
	a->tail = last;
	last->next = NULL;
	atomic_fetch_add_explicit(&a->queued, count, memory_order_relaxed);
	for (struct node *n = first; n; n = n->next) {
		a->list_count++;
		if (n->ack)
			a->pending_acks++;
		/* Wake the writer only when it has something to decide: a first record while it
		 * is idle (to start its linger deadline), an ack to honour now, or a full batch.
		 * Signalled once the lock is released: a writer woken under it would only block
		 * on it again. With commit_on_caller an ack is the producer's to honour
		 * (gsd_audit_commit_here), except a prune's, which may take long: that one is
		 * the writer's. */
		if (n->kind == REC_PRUNE)
			a->writer_wanted = true;
		wake |= !(n->ack && a->caller_commits && n->kind != REC_PRUNE) &&
		        ((was_empty && a->idle) || a->list_count == LINGER_MAX ||
		         (n->ack && a->pending_acks >= a->ack_target));
	}
	/* Refill the private pool while the lock is held anyway. */
	if (!a->free_local && a->free_shared) {
		a->free_local = a->free_shared;
		a->free_shared = NULL;
		a->free_shared_count = 0;
	}
	pthread_mutex_unlock(&a->mu);
	if (wake)
		pthread_cond_signal(&a->cv);
}

/* Hands n to the writer (or to the group being gathered); returns its seq (read first: once
 * queued, n is the writer's). */
static uint64_t node_push(gsd_audit *a, struct node *n)
{
	uint64_t seq = n->seq;
	n->next = NULL;
	if (a->grouping) {
		node_append(&a->group_head, &a->group_tail, n);
		return seq;
	}
	queue_nodes(a, n, n, 1);
	return seq;
}

void gsd_audit_group(gsd_audit *a, bool on)
{
	if (!a || a->grouping == on)
		return;
	a->grouping = on;
	if (on || !a->group_head)
		return;
	size_t count = 0;
	for (struct node *n = a->group_head; n; n = n->next)
		count++;
	struct node *first = a->group_head, *last = a->group_tail;
	a->group_head = a->group_tail = NULL;
	queue_nodes(a, first, last, count);
}

/*
 * Would a commit on the producer's thread do work that belongs to the writer's? Under mu, with
 * nobody writing: a retry after an outage (its back-off is the writer's), a file that is gone,
 * a WAL past its limit (its TRUNCATE), a retention step that is due.
 */
static bool writer_work_due(gsd_audit *a, uint64_t now)
{
	return a->stopping || a->writer_wanted || a->retry_head || a->file_gone ||
	       a->list_count > CALLER_MAX_RECORDS || now < a->caller_backoff_until ||
	       (uint64_t)a->wal_frames * a->frame_bytes > a->wal_limit ||
	       ((a->retain_age_ns || a->retain_packets) && !a->chain_off &&
	        (a->prune_now || now >= a->next_prune_ns));
}

/* The calling thread's CPU time, and its time waiting for the file (the VFS's I/O and the
 * busy handler's sleeps). */
static void thread_usage(uint64_t *cpu_ns, uint64_t *wait_ns)
{
	struct timespec ts;
	*cpu_ns = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0
	                  ? (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec
	                  : 0;
	*wait_ns = gsd_audit_vfs_thread_io_ns() + busy_sleep_ns;
}

/*
 * Was a commit on the producer's thread that took `wall` ns slow because of the file: it used
 * that much CPU (a large batch), or spent half of it waiting for the file (I/O, or a lock a
 * checkpoint held). One that took long only because its thread was preempted (on 2 CPUs, by
 * any of the daemon's or the clients' threads) was not: backing off then moved every commit
 * to the writer for a second or more, one more thread hand-off per request.
 */
static bool commit_was_slow(const gsd_audit *a, uint64_t wall, uint64_t cpu0, uint64_t wait0)
{
	if (wall <= a->caller_slow_ns)
		return false;
	uint64_t cpu, wait;
	thread_usage(&cpu, &wait);
	return cpu - cpu0 > a->caller_slow_ns || wait - wait0 > a->caller_slow_ns / 2;
}

bool gsd_audit_commit_here(gsd_audit *a, bool leave_to_writer)
{
	pthread_mutex_lock(&a->mu);
	if (!a->caller_commits || a->pending_acks == 0 || a->draining) {
		/* Nothing waits, or the writer is writing: it takes what is queued next. */
		pthread_mutex_unlock(&a->mu);
		return false;
	}
	uint64_t start = now_ns();
	if (leave_to_writer || writer_work_due(a, start)) {
		pthread_mutex_unlock(&a->mu);
		pthread_cond_signal(&a->cv);
		return false;
	}
	a->draining = true;
	pthread_mutex_unlock(&a->mu);
	uint64_t cpu0, wait0;
	thread_usage(&cpu0, &wait0);
	if (!a->null_sink) {
		/* Never wait for a lock here: a checkpoint's RESTART (or a reader it waits for)
		 * would hold the caller. The writer waits for it instead. */
		writer_busy_wait(a, 0);
		int rc = step_reset(a->st[ST_BEGIN]);
		writer_busy_wait(a, GSD_AUDIT_BUSY_TIMEOUT_MS);
		if (rc != SQLITE_OK) {
			pthread_mutex_lock(&a->mu);
			a->draining = false;
			pthread_mutex_unlock(&a->mu);
			pthread_cond_signal(&a->cv);
			return false;
		}
		a->txn_open = true;
	}
	pthread_mutex_lock(&a->mu);
	struct node *list = take_queue(a);
	pthread_mutex_unlock(&a->mu);
	writer_drain(a, list, true);
	uint64_t end = now_ns();
	if (commit_was_slow(a, end - start, cpu0, wait0)) {
		bool again = a->caller_slow_at && end - a->caller_slow_at < CALLER_BACKOFF_MAX_NS;
		uint64_t backoff = again ? 2 * a->caller_backoff_ns : CALLER_BACKOFF_NS;
		a->caller_backoff_ns =
		        backoff < CALLER_BACKOFF_MAX_NS ? backoff : CALLER_BACKOFF_MAX_NS;
		a->caller_slow_at = end;
		a->caller_backoff_until = end + a->caller_backoff_ns;
		GSD_DEBUG("audit: a commit on the loop took %llu us: the writer commits for the "
		          "next %llu s",
		          (unsigned long long)((end - start) / 1000),
		          (unsigned long long)(a->caller_backoff_ns / 1000000000ull));
	}
	pthread_mutex_lock(&a->mu);
	a->draining = false;
	/* The writer waits for this commit to end, or has a retry to schedule. */
	bool wake = a->writer_blocked || a->retry_head;
	pthread_mutex_unlock(&a->mu);
	if (wake)
		pthread_cond_signal(&a->cv);
	return true;
}

static void node_lost(gsd_audit *a, gsd_audit_ack_fn ack, void *ack_arg)
{
	GSD_ERROR("audit: out of memory, record dropped");
	atomic_fetch_add_explicit(&a->dropped, 1, memory_order_relaxed);
	if (ack)
		ack(ack_arg, false);
}

/* A node of `kind` for tenant's record, acknowledged by ack; NULL (the record is lost, and
 * acknowledged as not written) when memory is exhausted. */
static struct node *node_begin(gsd_audit *a, enum rec_kind kind, const char *tenant,
                               gsd_audit_ack_fn ack, void *ack_arg)
{
	const bool numbered = kind != REC_FLUSH && kind != REC_PRUNE;
	if (numbered && a->next_seq > GSD_AUDIT_SEQ_MAX) {
		if (!a->seqs_spent_logged)
			GSD_ERROR("audit: the file's record numbers are used up (2^44 - 1): no "
			          "record is written until a new audit file is started");
		a->seqs_spent_logged = true;
		node_lost(a, ack, ack_arg);
		return NULL;
	}
	struct node *n = node_take(a, kind);
	if (!n) {
		node_lost(a, ack, ack_arg);
		return NULL;
	}
	n->ack = ack;
	n->ack_arg = ack_arg;
	if (numbered)
		n->seq = a->next_seq++;
	node_text(n, n->tenant, sizeof n->tenant, tenant, NULL_TENANT);
	n->text1[0] = n->text2[0] = '\0';
	return n;
}

/* A record that asks the writer to do something (prune, flush) and writes no row. */
static void push_request(gsd_audit *a, enum rec_kind kind, gsd_audit_ack_fn ack, void *ack_arg)
{
	struct node *n = node_begin(a, kind, NULL, ack, ack_arg);
	if (n)
		node_push(a, n);
}

void gsd_audit_prune(gsd_audit *a, gsd_audit_ack_fn ack, void *ack_arg)
{
	push_request(a, REC_PRUNE, ack, ack_arg);
}

void gsd_audit_flush(gsd_audit *a, gsd_audit_ack_fn ack, void *ack_arg)
{
	push_request(a, REC_FLUSH, ack, ack_arg);
}

/* A packet record, with the allocation list of a SUBMITTED one (list NULL: none; the node
 * takes its block, freed here when no node can be had). */
static uint64_t push_packet(gsd_audit *a, const gsd_packet_rec *rec, const char *detail,
                            const struct packet_allocs *list, gsd_audit_ack_fn ack, void *ack_arg)
{
	struct node *n = node_begin(a, REC_PACKET, rec->tenant, ack, ack_arg);
	if (!n) {
		if (list)
			free(list->allocations);
		return 0;
	}
	if (list && rec->state == GPUSCHED__V1__PACKET_STATE__PACKET_STATE_SUBMITTED) {
		n->palloc = *list;
	} else if (list) {
		GSD_ERROR(
		        "audit: an allocation list belongs to a SUBMITTED record, not %s: dropped",
		        state_name(rec->state));
		free(list->allocations);
	}
	n->u.packet = *rec;
	node_text(n, n->text1, sizeof n->text1, rec->result, NULL_TEXT1);
	node_text(n, n->text2, sizeof n->text2, detail, NULL_TEXT2);
	return node_push(a, n);
}

uint64_t gsd_audit_packet(gsd_audit *a, const gsd_packet_rec *rec, const char *detail,
                          gsd_audit_ack_fn ack, void *ack_arg)
{
	return push_packet(a, rec, detail, NULL, ack, ack_arg);
}

/* A record of kind whose fields are the size bytes at rec, with texts t1 and t2 (NULL: SQL
 * NULL) copied into the node. Returns its seq, 0 when it was lost. */
static uint64_t push_record(gsd_audit *a, enum rec_kind kind, const char *tenant, const void *rec,
                            size_t size, const char *t1, const char *t2)
{
	struct node *n = node_begin(a, kind, tenant, NULL, NULL);
	if (!n)
		return 0;
	memcpy(&n->u, rec, size);
	node_text(n, n->text1, sizeof n->text1, t1, NULL_TEXT1);
	node_text(n, n->text2, sizeof n->text2, t2, NULL_TEXT2);
	return node_push(a, n);
}

void gsd_audit_context(gsd_audit *a, const gsd_context_rec *rec)
{
	push_record(a, REC_CONTEXT, rec->tenant, rec, sizeof *rec, NULL, NULL);
}

void gsd_audit_tenant(gsd_audit *a, const gsd_tenant_rec *rec)
{
	push_record(a, REC_TENANT, rec->tenant, rec, sizeof *rec, rec->token_hash, rec->audit_name);
}

void gsd_audit_allocation(gsd_audit *a, const gsd_allocation_rec *rec)
{
	push_record(a, REC_ALLOCATION, rec->tenant, rec, sizeof *rec, NULL, NULL);
}

uint64_t gsd_audit_move(gsd_audit *a, const gsd_move_rec *rec)
{
	return push_record(a, REC_MOVE, rec->tenant, rec, sizeof *rec, rec->reason, NULL);
}

uint64_t gsd_audit_submitted(gsd_audit *a, const gsd_packet_rec *rec, const char *detail,
                             const uint64_t *allocations, const bool *write, size_t n,
                             gsd_audit_ack_fn ack, void *ack_arg)
{
	if (n == 0)
		return gsd_audit_packet(a, rec, detail, ack, ack_arg);
	/* One block: the handles (8-byte aligned at its start), then one byte per write flag. */
	uint64_t *block = n <= SIZE_MAX / (sizeof *allocations + 1)
	                          ? malloc(n * (sizeof *allocations + 1))
	                          : NULL;
	if (!block) {
		node_lost(a, ack, ack_arg);
		return 0;
	}
	uint8_t *w = (uint8_t *)(block + n);
	memcpy(block, allocations, n * sizeof *allocations);
	for (size_t i = 0; i < n; i++)
		w[i] = write && write[i];
	struct packet_allocs list = {
	        .packet = rec->packet, .n = n, .allocations = block, .write = w};
	return push_packet(a, rec, detail, &list, ack, ack_arg);
}

uint64_t gsd_audit_error(gsd_audit *a, const char *tenant, const char *request, int status,
                         const char *message)
{
	return push_record(a, REC_ERROR, tenant, &status, sizeof status, request, message);
}

uint64_t gsd_audit_note(gsd_audit *a, const char *tenant, const char *kind, const char *detail)
{
	const int none = 0;
	return push_record(a, REC_NOTE, tenant, &none, sizeof none, kind, detail);
}

gsd_audit_health gsd_audit_get_health(gsd_audit *a)
{
	return (gsd_audit_health)atomic_load(&a->health);
}

uint64_t gsd_audit_reconciled(const gsd_audit *a)
{
	return a->reconciled;
}

uint64_t gsd_audit_seqs_left(const gsd_audit *a)
{
	return a->next_seq > GSD_AUDIT_SEQ_MAX ? 0 : GSD_AUDIT_SEQ_MAX - a->next_seq + 1;
}

void gsd_audit_get_stats(gsd_audit *a, gsd_audit_stats *out)
{
	out->records = atomic_load_explicit(&a->records, memory_order_relaxed);
	out->commits = atomic_load_explicit(&a->commits, memory_order_relaxed);
	out->queued = atomic_load_explicit(&a->queued, memory_order_relaxed);
	out->failures = atomic_load_explicit(&a->failures, memory_order_relaxed);
	out->dropped = atomic_load_explicit(&a->dropped, memory_order_relaxed);
	out->checkpoints = atomic_load_explicit(&a->checkpoints, memory_order_relaxed);
	out->pruned = atomic_load_explicit(&a->pruned, memory_order_relaxed);
	out->event_rows = atomic_load_explicit(&a->event_rows, memory_order_relaxed);
	out->events_kept = atomic_load_explicit(&a->events_kept, memory_order_relaxed);
}

/* ---- open and close ---- */

/* Runs a one-row pragma and copies its first column as text. */
static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t cap)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(s, 0);
		snprintf(out, cap, "%s", t ? (const char *)t : "");
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		out[0] = '\0';
		rc = SQLITE_OK;
	}
	sqlite3_finalize(s);
	return rc;
}

/* Does table have column? 1, 0, or -1 on error. */
static int has_column(sqlite3 *db, const char *table, const char *column)
{
	char sql[160], have[8] = "";
	snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s'",
	         table, column);
	if (pragma_text(db, sql, have, sizeof have) != SQLITE_OK)
		return -1;
	return strcmp(have, "0") != 0;
}

/*
 * Schema 4 on a file an older daemon wrote, after the embedded schema ran (inside its
 * transaction). packet_events loses tenant and state_name; packet_allocations (renamed aside
 * before the schema ran, see apply_schema) is copied into its new form with each packet's
 * entries numbered in the order they were written. A file with chain format 1 (schema 3)
 * restarts the chain after its last record: meta keeps that record's link (chain_v1_head) and
 * seq, and rows older than the restart are checked against the state their last format-1
 * record left (row digests did not change) or, without one, not at all.
 */
static int migrate_v4(sqlite3 *db, int old_version, char **msg)
{
	int rc = SQLITE_OK;
	if (has_column(db, "packet_allocations_v3", "tenant") == 1)
		rc = sqlite3_exec(db,
		                  "INSERT INTO packet_allocations (packet, slot, allocation, write)"
		                  " SELECT packet, row_number() OVER (PARTITION BY packet ORDER BY"
		                  " rowid) - 1, allocation, write FROM packet_allocations_v3;"
		                  "DROP TABLE packet_allocations_v3;",
		                  NULL, NULL, msg);
	static const char *const gone[] = {"tenant", "state_name"};
	for (size_t i = 0; rc == SQLITE_OK && i < sizeof gone / sizeof gone[0]; i++) {
		int has = has_column(db, "packet_event_rows", gone[i]);
		if (has < 0)
			return SQLITE_ERROR;
		if (has) {
			char sql[96];
			snprintf(sql, sizeof sql, "ALTER TABLE packet_event_rows DROP COLUMN %s",
			         gone[i]);
			rc = sqlite3_exec(db, sql, NULL, NULL, msg);
		}
	}
	if (rc != SQLITE_OK || old_version != 3)
		return rc;
	return sqlite3_exec(
	        db,
	        "INSERT OR REPLACE INTO meta (key, value) SELECT 'chain_v1_head', value FROM meta"
	        " WHERE key = 'chain_head';"
	        "INSERT OR REPLACE INTO meta (key, value) VALUES ('chain_v1_last_seq', " MAX_SEQ_SQL
	        "), ('chain_start_seq', 1 + " MAX_SEQ_SQL "),"
	        " ('chain_start_packet', (SELECT IFNULL(max(packet), 0) FROM packets)),"
	        " ('chain_start_context', (SELECT IFNULL(max(context), 0) FROM contexts)),"
	        " ('chain_start_allocation', (SELECT IFNULL(max(allocation), 0) FROM allocations)),"
	        " ('pruned_seq', (SELECT IFNULL(max(CAST(value AS INTEGER)), 0) FROM meta WHERE"
	        " key IN ('chain_base_seq', 'pruned_seq'))), ('chain_format', '2');"
	        "DELETE FROM meta WHERE key IN ('chain_head', 'chain_base_seq', 'chain_base_hash',"
	        " 'chain_base_objects');",
	        NULL, NULL, msg);
}

/*
 * Schema 6: the key of the wire ids (gsd_audit_wire_key), 32 random bytes in hex, made once
 * for a new file or for an older one on its upgrade and kept for good, so the ids clients were
 * given stay the same across restarts. Inside apply_schema's transaction: two daemons opening
 * one new file agree on it.
 */
static int add_wire_key(sqlite3 *db, char **msg)
{
	unsigned char key[GSD_AUDIT_WIRE_KEY_BYTES];
	char hex[2 * GSD_AUDIT_WIRE_KEY_BYTES + 1];
	randombytes_buf(key, sizeof key);
	sodium_bin2hex(hex, sizeof hex, key, sizeof key);
	sodium_memzero(key, sizeof key);
	char sql[96 + sizeof hex];
	snprintf(sql, sizeof sql,
	         "INSERT OR IGNORE INTO meta (key, value) VALUES ('wire_key', '%s')", hex);
	return sqlite3_exec(db, sql, NULL, NULL, msg);
}

/* Reads the wire ids' key from meta into a->wire_key (a null sink makes one for this run). */
static int load_wire_key(gsd_audit *a)
{
	if (a->null_sink) {
		randombytes_buf(a->wire_key, sizeof a->wire_key);
		gsd_wire_key_init(&a->wire, a->wire_key);
		return SQLITE_OK;
	}
	char hex[2 * GSD_AUDIT_WIRE_KEY_BYTES + 8] = "";
	size_t len = 0;
	int rc = pragma_text(a->db, "SELECT value FROM meta WHERE key = 'wire_key'", hex,
	                     sizeof hex);
	if (rc == SQLITE_OK && (strlen(hex) != 2 * GSD_AUDIT_WIRE_KEY_BYTES ||
	                        sodium_hex2bin(a->wire_key, sizeof a->wire_key, hex, strlen(hex),
	                                       NULL, &len, NULL) != 0 ||
	                        len != sizeof a->wire_key)) {
		GSD_ERROR("audit: meta wire_key is not %d bytes of hex", GSD_AUDIT_WIRE_KEY_BYTES);
		rc = SQLITE_CORRUPT;
	}
	if (rc == SQLITE_OK)
		gsd_wire_key_init(&a->wire, a->wire_key);
	return rc;
}

/* gs_packet_id(packet): the wire id of a packet number under the file's key. */
static void sql_packet_id(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
	(void)argc;
	const gsd_audit *a = sqlite3_user_data(cx);
	sqlite3_result_int64(cx, (sqlite3_int64)gsd_wire_packet_out(
	                                 &a->wire, (uint64_t)sqlite3_value_int64(argv[0])));
}

/*
 * Schema 7: packets.id holds each packet's wire id. Rows written by an older daemon get it
 * here, once (the packet numbers do not change, and the key is the file's), in one
 * transaction; a file with none missing costs one index lookup.
 */
static int fill_packet_ids(gsd_audit *a)
{
	if (a->null_sink)
		return SQLITE_OK;
	int rc = sqlite3_create_function(a->db, "gs_packet_id", 1,
	                                 SQLITE_UTF8 | SQLITE_DETERMINISTIC, a, sql_packet_id, NULL,
	                                 NULL);
	char *msg = NULL;
	/* Said first: it takes a while on a large file (9.2 s for a million rows on a 2-CPU test
	 * machine), and the daemon serves nothing meanwhile. */
	char missing[32] = "0";
	if (rc == SQLITE_OK &&
	    pragma_text(a->db, "SELECT count(*) FROM packets WHERE id IS NULL", missing,
	                sizeof missing) == SQLITE_OK &&
	    atoll(missing) > 0)
		GSD_INFO("audit: giving %s rows of an older file their client ids (packets.id), "
		         "once",
		         missing);
	if (rc == SQLITE_OK && atoll(missing) > 0)
		rc = sqlite3_exec(a->db,
		                  "UPDATE packets SET id = gs_packet_id(packet) WHERE id IS NULL",
		                  NULL, NULL, &msg);
	if (rc == SQLITE_OK && atoll(missing) > 0)
		GSD_INFO("audit: gave %d rows their client ids", sqlite3_changes(a->db));
	if (rc != SQLITE_OK)
		GSD_ERROR("audit: cannot fill packets.id: %s", msg ? msg : sqlite3_errmsg(a->db));
	sqlite3_free(msg);
	sqlite3_create_function(a->db, "gs_packet_id", 1, SQLITE_UTF8, NULL, NULL, NULL, NULL);
	return rc;
}

void gsd_audit_wire_key(const gsd_audit *a, unsigned char out[GSD_AUDIT_WIRE_KEY_BYTES])
{
	memcpy(out, a->wire_key, GSD_AUDIT_WIRE_KEY_BYTES);
}

/*
 * Applies the embedded schema in one IMMEDIATE transaction, so two daemons opening the same
 * new file cannot interleave, after refusing a file written by a newer daemon, and migrates an
 * older file (migrate_v4).
 */
/* The steps of schemas 8 and 9 that must come before the script (which creates a view named
 * packet_events and indexes on the new columns), inside apply_schema's transaction. Each is
 * done once: a file of schema 8 has its table renamed and most of the columns already. */
static int migrate_v8(sqlite3 *db, char **msg)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(
	        db, "SELECT type FROM sqlite_schema WHERE name = 'packet_events'", -1, &s, NULL);
	if (rc != SQLITE_OK)
		return rc;
	bool table = sqlite3_step(s) == SQLITE_ROW &&
	             !strcmp((const char *)sqlite3_column_text(s, 0), "table");
	sqlite3_finalize(s);
	if (table) {
		/* The views that read it go first (the script makes them again): renaming a
		 * table rewrites the views that name it. */
		rc = sqlite3_exec(
		        db,
		        "DROP VIEW IF EXISTS packet_event_log; DROP VIEW IF EXISTS"
		        " event_log; DROP VIEW IF EXISTS packet_usage; DROP VIEW IF EXISTS"
		        " usage_by_tenant; DROP VIEW IF EXISTS usage_by_context;"
		        " DROP VIEW IF EXISTS usage_by_node;"
		        " ALTER TABLE packet_events RENAME TO packet_event_rows",
		        NULL, NULL, msg);
		if (rc != SQLITE_OK)
			return rc;
	}
	/* The view packet_events reads the chain's columns, which a file older than schema 3
	 * lacks until apply_schema adds them after the script: they come first here. */
	static const char *const chain_cols[] = {"state_digest", "hash"};
	for (size_t i = 0; table && i < sizeof chain_cols / sizeof chain_cols[0]; i++) {
		int has = has_column(db, "packet_event_rows", chain_cols[i]);
		if (has < 0)
			return SQLITE_ERROR;
		if (has)
			continue;
		char sql[96];
		snprintf(sql, sizeof sql, "ALTER TABLE packet_event_rows ADD COLUMN %s BLOB",
		         chain_cols[i]);
		rc = sqlite3_exec(db, sql, NULL, NULL, msg);
		if (rc != SQLITE_OK)
			return rc;
	}
	if (has_column(db, "packets", "packet") != 1)
		return SQLITE_OK; /* a new file: the script makes the table */
	static const char *const cols[] = {"seq INTEGER NOT NULL DEFAULT 0",
	                                   "submit_detail TEXT",
	                                   "ready_seq INTEGER NOT NULL DEFAULT 0",
	                                   "ready_detail TEXT",
	                                   "run_seq INTEGER NOT NULL DEFAULT 0",
	                                   "end_seq INTEGER NOT NULL DEFAULT 0",
	                                   "hash BLOB",
	                                   "ready_digest BLOB",
	                                   "run_digest BLOB",
	                                   "run_ns INTEGER"};
	for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
		char name[32], sql[128];
		snprintf(name, sizeof name, "%.*s", (int)strcspn(cols[i], " "), cols[i]);
		int has = has_column(db, "packets", name);
		if (has < 0)
			return SQLITE_ERROR;
		if (has)
			continue;
		snprintf(sql, sizeof sql, "ALTER TABLE packets ADD COLUMN %s", cols[i]);
		rc = sqlite3_exec(db, sql, NULL, NULL, msg);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

static int apply_schema(sqlite3 *db)
{
	char v[32];
	char *msg = NULL;
	int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		goto fail;
	rc = pragma_text(db, "PRAGMA user_version", v, sizeof v);
	if (rc != SQLITE_OK)
		goto rollback;
	if (atoi(v) > GSD_AUDIT_SCHEMA_VERSION) {
		GSD_ERROR("audit: file has schema version %s, this daemon knows %d", v,
		          GSD_AUDIT_SCHEMA_VERSION);
		rc = SQLITE_ERROR;
		goto rollback;
	}
	int old_version = atoi(v);
	/* Schema 3's packet_allocations steps aside for the new table (migrate_v4 copies it). */
	if (old_version < GSD_AUDIT_SCHEMA_VERSION &&
	    has_column(db, "packet_allocations", "tenant") == 1) {
		rc = sqlite3_exec(db,
		                  "ALTER TABLE packet_allocations RENAME TO packet_allocations_v3",
		                  NULL, NULL, &msg);
		if (rc != SQLITE_OK)
			goto rollback;
	}
	/* Schema 7's packets.id, added to an older file's table before the schema indexes it. */
	if (old_version < 7 && has_column(db, "packets", "packet") == 1 &&
	    has_column(db, "packets", "id") == 0) {
		rc = sqlite3_exec(db, "ALTER TABLE packets ADD COLUMN id INTEGER", NULL, NULL,
		                  &msg);
		if (rc != SQLITE_OK)
			goto rollback;
	}
	/* Schema 8: the table of event rows takes its new name (the view packet_events shows
	 * it with the events packets rows keep), and packets the columns that keep them (and
	 * schema 9's ready_digest and run_digest, which its view packet_events reads). */
	if (old_version < 9 || has_column(db, "packets", "run_ns") == 0) {
		rc = migrate_v8(db, &msg);
		if (rc != SQLITE_OK)
			goto rollback;
	}
	rc = sqlite3_exec(db, gs_audit_schema_sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		goto rollback;
	/* Version 3's chain columns, added to the tables of an older file (the CREATE TABLEs
	 * above already have them in a new one). */
	static const char *const added[][2] = {{"packet_event_rows", "state_digest"},
	                                       {"packet_event_rows", "hash"},
	                                       {"moves", "hash"},
	                                       {"errors", "hash"},
	                                       {"notes", "hash"}};
	for (size_t i = 0; i < sizeof added / sizeof added[0]; i++) {
		int has = has_column(db, added[i][0], added[i][1]);
		rc = has < 0 ? SQLITE_ERROR : SQLITE_OK;
		if (has == 0) {
			char sql[160];
			snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s BLOB", added[i][0],
			         added[i][1]);
			rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
		}
		if (rc != SQLITE_OK)
			goto rollback;
	}
	/* Version 5's tenant limits, added to the tenants of an older file as "the default". */
	static const char *const limits[] = {"max_message", "packet_limit", "sync_limit"};
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		int has = has_column(db, "tenants", limits[i]);
		rc = has < 0 ? SQLITE_ERROR : SQLITE_OK;
		if (has == 0) {
			char sql[128];
			snprintf(sql, sizeof sql,
			         "ALTER TABLE tenants ADD COLUMN %s INTEGER NOT NULL DEFAULT 0",
			         limits[i]);
			rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
		}
		if (rc != SQLITE_OK)
			goto rollback;
	}
	rc = migrate_v4(db, old_version, &msg);
	if (rc == SQLITE_OK)
		rc = add_wire_key(db, &msg);
	if (rc != SQLITE_OK)
		goto rollback;
	if (old_version == 3) {
		char start[32] = "", head[2 * 32 + 8] = "";
		pragma_text(db, "SELECT value FROM meta WHERE key = 'chain_start_seq'", start,
		            sizeof start);
		pragma_text(db, "SELECT value FROM meta WHERE key = 'chain_v1_head'", head,
		            sizeof head);
		GSD_INFO("audit: upgraded the file from schema 3 to %d: the hash chain (format %d)"
		         " restarts at record %s; the format-1 chain ended at %s (meta "
		         "chain_v1_head)",
		         GSD_AUDIT_SCHEMA_VERSION, GS_CHAIN_FORMAT, start, head[0] ? head : "-");
	}
	rc = sqlite3_exec(db, "COMMIT", NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		goto rollback;
	return SQLITE_OK;
rollback:
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
fail:
	if (msg) {
		GSD_ERROR("audit: schema: %s", msg);
		sqlite3_free(msg);
	}
	return rc;
}

static int open_db(gsd_audit *a, const char *path, bool sync_full)
{
	char mode[32];
	/* The writer's connection writes each commit's WAL frames in one go (vfs.c). */
	int rc = gsd_audit_vfs_register();
	if (rc != SQLITE_OK)
		goto fail;
	rc = sqlite3_open_v2(path, &a->db,
	                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
	                     GSD_AUDIT_VFS_NAME);
	if (rc != SQLITE_OK)
		goto fail;
	writer_busy_wait(a, GSD_AUDIT_BUSY_TIMEOUT_MS);
	/* Only takes effect on a new, empty file (before WAL mode is set). */
	rc = sqlite3_exec(a->db, "PRAGMA page_size = " AUDIT_PAGE_SIZE, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	rc = pragma_text(a->db, "PRAGMA journal_mode = WAL", mode, sizeof mode);
	if (rc != SQLITE_OK)
		goto fail;
	if (strcmp(mode, "wal") != 0) {
		GSD_ERROR("audit: %s: cannot use WAL (journal mode %s)", path, mode);
		return SQLITE_ERROR;
	}
	/* In WAL mode NORMAL survives a crash of the process (not of the machine) without an
	 * fsync per commit; FULL adds that fsync for power-loss durability. */
	rc = sqlite3_exec(a->db,
	                  sync_full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
	                  NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	rc = apply_schema(a->db);
	if (rc != SQLITE_OK)
		return rc;
	for (int i = 0; i < ST_COUNT; i++) {
		rc = sqlite3_prepare_v3(a->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
		                        &a->st[i], NULL);
		if (rc != SQLITE_OK)
			goto fail;
	}
	sqlite3_wal_hook(a->db, wal_hook, a);
	return SQLITE_OK;
fail:
	GSD_ERROR("audit: %s: %s", path, a->db ? sqlite3_errmsg(a->db) : "no memory");
	return rc;
}

/* The identity of the file just opened, for file_still_there. */
static int remember_file(gsd_audit *a, const char *path)
{
	struct stat st;
	a->db_path = strdup(path);
	if (!a->db_path || stat(path, &st) != 0) {
		GSD_ERROR("audit: cannot stat %s: %s", path, strerror(errno));
		return -1;
	}
	a->db_dev = st.st_dev;
	a->db_ino = st.st_ino;
	return 0;
}

/*
 * Packets the file shows as not final were in flight when the daemon that wrote them died
 * (kill -9, a crash, power loss): nothing runs them any more. Each gets a final ABORTED record
 * now, so history and waits on them answer truthfully. One transaction, before the writer
 * starts.
 */

/* The last record's link (the genesis value in a file with no chain yet). */
static int load_chain_head(gsd_audit *a)
{
	char hex[2 * GS_CHAIN_HASH + 8] = "";
	memcpy(a->chain_head, gs_chain_genesis, GS_CHAIN_HASH);
	int rc = pragma_text(a->db, "SELECT value FROM meta WHERE key = 'chain_head'", hex,
	                     sizeof hex);
	if (rc == SQLITE_OK && hex[0] && gs_chain_unhex(hex, a->chain_head) != 0) {
		GSD_ERROR("audit: the chain head in meta is not a hash: '%s'", hex);
		rc = SQLITE_CORRUPT;
	}
	/* The head's record (a file written before chain_head_seq: the newest record). */
	a->chain_head_seq = (uint64_t)one_int(
	        a->db,
	        "SELECT IFNULL((SELECT CAST(value AS INTEGER) FROM meta WHERE key ="
	        " 'chain_head_seq'), " MAX_SEQ_SQL ")",
	        0, 0);
	return rc;
}

/* Links the ABORTED events a reconcile appended (seq > after) into the chain, reading back
 * what they wrote the way the verifier will, and records the new head. */
static int chain_reconciled(gsd_audit *a, uint64_t after)
{
	sqlite3_stmt *ev, *upd;
	int rc = sqlite3_prepare_v2(
	        a->db, "SELECT seq, packet FROM packet_event_rows WHERE seq > ?1 ORDER BY seq", -1,
	        &ev, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_prepare_v2(
	        a->db, "UPDATE packet_event_rows SET state_digest = ?2, hash = ?3 WHERE seq = ?1",
	        -1, &upd, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(ev);
		return rc;
	}
	gsd_audit_bind_u64(ev, 1, after);
	while (rc == SQLITE_OK && sqlite3_step(ev) == SQLITE_ROW) {
		uint64_t seq = (uint64_t)sqlite3_column_int64(ev, 0);
		uint64_t packet = (uint64_t)sqlite3_column_int64(ev, 1);
		uint8_t state[GS_CHAIN_DIGEST], hash[GS_CHAIN_HASH];
		const char *table;
		gs_chain_row link;
		gs_chain_link_begin(&link, a->chain_head, seq, GS_CHAIN_PACKET, packet);
		if (gs_chain_appended_feed(a->db, GS_CHAIN_PACKET, seq, packet, false, &link,
		                           &table) != 1 ||
		    gs_chain_state_digest(a->db, GS_CHAIN_PACKET, packet, state, &table) != 1) {
			rc = SQLITE_ERROR;
			break;
		}
		gs_chain_link_end(&link, state, hash);
		gsd_audit_bind_u64(upd, 1, seq);
		sqlite3_bind_blob(upd, 2, state, GS_CHAIN_DIGEST, SQLITE_STATIC);
		sqlite3_bind_blob(upd, 3, hash, GS_CHAIN_HASH, SQLITE_STATIC);
		rc = step_reset(upd);
		if (rc == SQLITE_OK) {
			memcpy(a->chain_head, hash, GS_CHAIN_HASH);
			a->chain_head_seq = seq;
		}
	}
	sqlite3_finalize(upd);
	sqlite3_finalize(ev);
	if (rc == SQLITE_OK) {
		char hex[2 * GS_CHAIN_HASH + 1], sql[640];
		gs_chain_hex(a->chain_head, hex);
		snprintf(sql, sizeof sql,
		         "INSERT INTO meta (key, value) VALUES ('chain_head', '%s'),"
		         " ('chain_head_seq', '%llu') ON CONFLICT (key)"
		         " DO UPDATE SET value = excluded.value",
		         hex, (unsigned long long)a->chain_head_seq);
		rc = sqlite3_exec(a->db, sql, NULL, NULL, NULL);
	}
	return rc;
}

static int reconcile(gsd_audit *a)
{
	static const char sql[] =
	        "INSERT INTO packet_event_rows (seq, packet, state, time_ns, detail)"
	        " SELECT ?2 + row_number() OVER (ORDER BY packet), packet, 6, ?1,"
	        " 'daemon restarted: the packet was in"
	        " flight when the daemon that ran it stopped'"
	        " FROM packets WHERE state IN (1, 2, 3, 7, 8) ORDER BY packet;"
	        "UPDATE packets SET state = 6, state_name = 'ABORTED', completed_ns = ?1,"
	        " result = 'daemon restarted' WHERE state IN (1, 2, 3, 7, 8);";
	sqlite3_stmt *s = NULL;
	const char *tail = sql;
	int changed = 0;
	uint64_t now = now_ns();
	char max[32] = "0";
	int rc = load_chain_head(a);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(a->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = pragma_text(a->db, "SELECT " MAX_SEQ_SQL, max, sizeof max);
	uint64_t base = strtoull(max, NULL, 10);
	while (rc == SQLITE_OK && tail && *tail) {
		rc = sqlite3_prepare_v2(a->db, tail, -1, &s, &tail);
		if (rc != SQLITE_OK || !s)
			break;
		gsd_audit_bind_u64(s, 1, now);
		if (sqlite3_bind_parameter_count(s) > 1)
			gsd_audit_bind_u64(s, 2, base);
		rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(a->db);
		if (rc == SQLITE_OK)
			changed = sqlite3_changes(a->db);
		sqlite3_finalize(s);
		s = NULL;
	}
	if (rc == SQLITE_OK && changed > 0)
		rc = chain_reconciled(a, base);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(a->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		GSD_ERROR("audit: reconciling packets left in flight: %s", sqlite3_errmsg(a->db));
		sqlite3_exec(a->db, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	if (changed > 0)
		GSD_WARN("audit: %d packets were in flight when the previous daemon stopped: "
		         "recorded as ABORTED (daemon restarted)",
		         changed);
	a->reconciled = (uint64_t)changed;
	/* Past every number the file used: its newest record's, and the head's and the
	 * retention's, which stay when the retention removed every record (an idle daemon past
	 * max_age). */
	rc = pragma_text(a->db,
	                 "SELECT max(" MAX_SEQ_SQL ", IFNULL((SELECT max(CAST(value AS INTEGER))"
	                 " FROM meta WHERE key IN ('chain_head_seq', 'chain_base_seq',"
	                 " 'pruned_seq')), 0))",
	                 max, sizeof max);
	a->next_seq = strtoull(max, NULL, 10) + 1;
	return rc;
}

static void free_nodes(struct node *n)
{
	while (n) {
		struct node *next = n->next;
		free(n);
		n = next;
	}
}

static void audit_free(gsd_audit *a)
{
	for (int i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(a->st[i]);
	/* Closing the last connection checkpoints the WAL into the database and removes it: the
	 * history readers' idle ones go first. */
	if (a->db_path)
		gsd_history_release(a->db_path);
	/* A clean stop leaves one self-contained file: everything checkpointed into it and the
	 * WAL emptied even if a reader elsewhere keeps it open (then the WAL file stays, empty;
	 * otherwise the close removes it). Copying the .db alone then copies all of it. */
	if (a->db && !a->null_sink) {
		int log = 0, done = 0;
		int rc = sqlite3_wal_checkpoint_v2(a->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, &log,
		                                   &done);
		if (rc != SQLITE_OK)
			GSD_WARN("audit: the last checkpoint did not complete (%s): the file needs "
			         "its"
			         " -wal file beside it",
			         sqlite3_errmsg(a->db));
	}
	sqlite3_close(a->db);
	free_nodes(a->free_local);
	free_nodes(a->group_head);
	free_nodes(a->free_shared);
	free(a->wal_path);
	free(a->db_path);
	free(a->latest);
	pthread_cond_destroy(&a->ckpt_cv);
	pthread_mutex_destroy(&a->ckpt_mu);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/* Starts the checkpointer; without it (no connection, no thread) the writer checkpoints. */
static void ckpt_start(gsd_audit *a, const char *path, bool sync_full)
{
	if (sqlite3_open_v2(path, &a->ckpt_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	            SQLITE_OK ||
	    sqlite3_busy_timeout(a->ckpt_db, CKPT_BUSY_MS) != SQLITE_OK ||
	    sqlite3_exec(a->ckpt_db,
	                 sync_full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
	                 NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	if (pthread_create(&a->ckpt_thread, NULL, ckpt_main, a) != 0)
		goto fail;
	return;
fail:
	GSD_WARN("audit: no checkpointer thread (%s): the writer checkpoints itself",
	         a->ckpt_db ? sqlite3_errmsg(a->ckpt_db) : "no memory");
	sqlite3_close(a->ckpt_db);
	a->ckpt_db = NULL;
}

/* Sets *stop under mu, wakes the thread waiting on cv and waits for it to end. */
static void stop_thread(pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop, pthread_t thread)
{
	pthread_mutex_lock(mu);
	*stop = true;
	pthread_cond_signal(cv);
	pthread_mutex_unlock(mu);
	pthread_join(thread, NULL);
}

/* Stops the checkpointer (after the writer: it may ask until its last drain). */
static void ckpt_stop(gsd_audit *a)
{
	if (!a->ckpt_db)
		return;
	stop_thread(&a->ckpt_mu, &a->ckpt_cv, &a->ckpt_stop, a->ckpt_thread);
	sqlite3_close(a->ckpt_db);
	a->ckpt_db = NULL;
}

int gsd_audit_open(const char *path, const gsd_audit_options *opt, gsd_audit **out)
{
	*out = NULL;
	if (gs_chain_init() != 0) {
		GSD_ERROR("audit: libsodium cannot be initialised");
		return -1;
	}
	gsd_audit *a = calloc(1, sizeof *a);
	if (!a)
		return -1;
	/* With no attributes glibc's initialisers cannot fail; audit_free destroys them. */
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	pthread_mutex_init(&a->ckpt_mu, NULL);
	pthread_cond_init(&a->ckpt_cv, NULL);
	gsd_audit_options o = opt ? *opt : (gsd_audit_options){0};
	a->max_batch = o.max_batch ? o.max_batch : DEFAULT_MAX_BATCH;
	a->wal_limit = o.wal_limit ? o.wal_limit : DEFAULT_WAL_LIMIT;
	a->chain_off = o.no_chain;
	a->null_sink = o.null_sink;
	a->retain_age_ns = o.retain_age_ns;
	a->retain_packets = o.retain_packets;

	if (open_db(a, path, o.sync_full) != SQLITE_OK || remember_file(a, path) != 0 ||
	    load_wire_key(a) != SQLITE_OK || fill_packet_ids(a) != SQLITE_OK)
		goto fail;
	if (reconcile(a) != SQLITE_OK)
		goto fail;
	char page[32] = "4096";
	pragma_text(a->db, "PRAGMA page_size", page, sizeof page);
	a->frame_bytes = strtoull(page, NULL, 10) + 24;
	a->restart_frames = a->wal_limit / a->frame_bytes / 2;
	if (a->restart_frames > RESTART_FRAMES)
		a->restart_frames = RESTART_FRAMES;
	a->latest_cap = 16;
	while (a->latest_cap < 2 * (size_t)a->max_batch)
		a->latest_cap *= 2;
	a->latest = calloc(a->latest_cap, sizeof *a->latest);
	if (!a->latest)
		goto fail;
	const char *file = sqlite3_db_filename(a->db, "main");
	size_t len = strlen(file);
	a->wal_path = malloc(len + sizeof "-wal");
	if (!a->wal_path)
		goto fail;
	memcpy(a->wal_path, file, len);
	memcpy(a->wal_path + len, "-wal", sizeof "-wal");

	ckpt_start(a, path, o.sync_full);
	/* A commit on the producer's thread must not sync (FULL) nor checkpoint (no
	 * checkpointer): those stay on the writer's. */
	a->caller_commits = o.commit_on_caller && !o.sync_full && (a->ckpt_db || a->null_sink);
	a->caller_slow_ns = o.caller_slow_ns ? o.caller_slow_ns : CALLER_SLOW_NS;
	if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
		ckpt_stop(a);
		goto fail;
	}
	*out = a;
	return 0;

fail:
	audit_free(a);
	return -1;
}

void gsd_audit_close(gsd_audit *a)
{
	if (!a)
		return;
	stop_thread(&a->mu, &a->cv, &a->stopping, a->thread);
	ckpt_stop(a);
	/* The head to keep elsewhere: `gpusched audit verify --head` finds a file cut or
	 * rewritten up to it later. */
	uint64_t seq = a->db && !a->chain_off ? a->chain_head_seq : 0;
	if (seq > 0) {
		char hex[2 * GS_CHAIN_HASH + 1];
		gs_chain_hex(a->chain_head, hex);
		GSD_INFO("audit: chain head %llu:%s (keep it; `gpusched audit verify --head` checks"
		         " the file against it)",
		         (unsigned long long)seq, hex);
	}
	audit_free(a);
}
