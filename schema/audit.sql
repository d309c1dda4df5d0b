-- gpusched audit store, schema version 9.
--
-- The daemon embeds this file in its binary and runs it, inside one transaction, every time it
-- opens the audit file. Every statement is therefore idempotent (IF NOT EXISTS, upserts), so an
-- existing file keeps its rows. A later version adds numbered migrations beside this file and
-- raises the version in both places below; a daemon refuses a file newer than it knows.
--
-- 64-bit unsigned values (ids, fences, nanosecond timestamps) are stored as SQLite's signed
-- 64-bit INTEGER with the same bits. Timestamps are nanoseconds; 0 means "not yet".
-- PacketState values are those of gpusched.v1.PacketState in proto/gpusched.proto; packets
-- stores the name beside the number and the table packet_states lists them all, so that the
-- file reads on its own; MoveKind values likewise (moves.kind_name).
--
-- Version 2 added the tables moves and packet_allocations. Their statements, like every other,
-- are idempotent, so a version 1 file opened by this daemon gains them and keeps its rows.
-- Version 3 orders history by submission time: the packets indexes changed (see below).
-- Version 4 makes a packet's audit smaller (the hash chain's format 2: 16-byte links, and a
-- packet event keeps the packets row's digest only where it is the last of its commit):
-- packet_events loses tenant and state_name (read them from packets and packet_states, or the
-- view packet_event_log), packet_allocations is keyed by (packet, slot) and loses tenant. The
-- daemon migrates an older file when it opens it (server/audit/audit.c, migrate_v4): the chain
-- restarts after the last record the older daemon wrote, whose link meta keeps.
-- Version 5 keeps a tenant's max_message, packet_limit and sync_limit in its tenants row
-- (columns added to an older file with 0, "the default"); a row written with them is recorded
-- as chain kind 9, one written before as kind 8 (whose digest does not cover them).
-- Version 6 gives clients packet ids, fences and sequence numbers through a keyed permutation
-- (server/core/wire_id.h): meta 'wire_key' holds its key (32 random bytes in hex), made by the
-- daemon with the file or when it upgrades an older one. The columns keep the daemon's own
-- numbers; `gpuschedd --audit-map-id` turns a client's id into a row's and back.
-- Version 7 speaks the clients' language (docs/queries.md): packets.id is the packet id clients
-- see (indexed; the daemon fills it in for the rows of an older file when it opens it), wire
-- ids are below 2^53 (JSON numbers) so every wire id changes once with this version, a packet's
-- fence is its context's count (1, 2, 3...; rows written before keep a node's fence), and the
-- *_log views give ISO 8601 times (UTC), names of states, flags and move kinds, and the ids
-- clients see, for the sqlite3 shell.
-- Version 8 writes about one row per packet: a packet that goes SUBMITTED -> READY -> RUNNING ->
-- COMPLETED without anything else (no preemption, resubmission, fault or cancellation) keeps its
-- events in its packets row (the columns seq, submit_detail, ready_seq, ready_detail, run_seq,
-- end_seq and hash) instead of four packet_event_rows; every other event is a row of
-- packet_event_rows as before. The view packet_events gives both as one table with the columns
-- the table of that name had, so every query of an older file's packet_events works unchanged.
-- The daemon upgrades an older file when it opens it: its table packet_events is renamed
-- packet_event_rows and the packets table gains the columns (0 and NULL: "a row event").
-- Version 9 keeps a straight run in the row when its events are written in different commits
-- (a packet that takes engine time: its READY and RUNNING are committed while it runs, its
-- COMPLETED later). A READY or RUNNING kept so, the last of its packet in its commit, keeps
-- the digest of the row it left (ready_digest, run_digest) for the hash chain. If the packet
-- then leaves the straight run (preempted, faulted, cancelled...), its kept READY and RUNNING
-- move to packet_event_rows with that digest and no link of their own (their links are checked
-- through the records after them). A version 8 file gains the two columns (NULL) and the
-- index packets_open; its rows mean what they meant. A kept RUNNING's time is run_ns where the
-- row's started_ns is no longer it (a GPU that reports its own start moves started_ns when the
-- packet ends), else started_ns.

PRAGMA user_version = 9;

CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY NOT NULL,
	value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '9')
	ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- One row per packet, updated in place at every state change. The packet id is the rowid, so
-- the upsert finds its row without a separate index.
CREATE TABLE IF NOT EXISTS packets (
	packet           INTEGER PRIMARY KEY NOT NULL,
	tenant           TEXT    NOT NULL,
	device           INTEGER NOT NULL,
	context          INTEGER NOT NULL,
	adapter          INTEGER NOT NULL,
	node             INTEGER NOT NULL,
	fence            INTEGER NOT NULL, -- its context's fence (paging: its device's paging fence)
	submit_flags     INTEGER NOT NULL, -- raw DXGK_SUBMITCOMMANDFLAGS Value
	patch_flags      INTEGER NOT NULL, -- raw DXGK_PATCHFLAGS Value
	dma_size         INTEGER NOT NULL,
	allocation_count INTEGER NOT NULL,
	patch_count      INTEGER NOT NULL,
	state            INTEGER NOT NULL,
	state_name       TEXT    NOT NULL,
	submitted_ns     INTEGER NOT NULL,
	ready_ns         INTEGER NOT NULL,
	started_ns       INTEGER NOT NULL,
	completed_ns     INTEGER NOT NULL,
	preemptions      INTEGER NOT NULL,
	resubmissions    INTEGER NOT NULL,
	result           TEXT,
	id               INTEGER, -- the packet id clients see (PacketRecord.packet); added by
	                          -- version 7 (an older file's rows get it when a daemon opens it)
	-- Version 8: the events kept in the row (packet_events shows them as rows). Each seq is
	-- the audit sequence number of that event, 0 when it is a row of packet_event_rows (or
	-- did not happen): seq its SUBMITTED event (at submitted_ns, detail submit_detail: what
	-- its DISPATCH commands ran), ready_seq its READY (at ready_ns, detail ready_detail: why
	-- it waited), run_seq its RUNNING (at started_ns, or run_ns) and end_seq its COMPLETED (at
	-- completed_ns). Each is set by the commit that records its event (version 8: READY,
	-- RUNNING and COMPLETED in one commit only); a READY or RUNNING kept while its packet is in
	-- flight goes back to packet_event_rows if the run does not end straight (version 9 above).
	-- hash is the hash chain's link of the newest of them (NULL after such a move).
	-- ready_digest and run_digest (version 9): the digest of the row that kept READY or RUNNING
	-- left, where it was the last event of its packet in its commit (else NULL). run_ns
	-- (version 9): the kept RUNNING's time where started_ns is not it (the GPU's own start
	-- replaced it when the packet ended), else NULL.
	seq              INTEGER NOT NULL DEFAULT 0,
	submit_detail    TEXT,
	ready_seq        INTEGER NOT NULL DEFAULT 0,
	ready_detail     TEXT,
	run_seq          INTEGER NOT NULL DEFAULT 0,
	end_seq          INTEGER NOT NULL DEFAULT 0,
	hash             BLOB,
	ready_digest     BLOB,
	run_digest       BLOB,
	run_ns           INTEGER
);
-- History is always read per tenant in submission order (submitted_ns, then the packet id for
-- equal times), optionally narrowed to a context or state and to a time range. Every index ends
-- with the rowid (the packet id), so each of these reads one range already in that order: a
-- time range and a cursor cost a seek, not a sort. Version 2's packet-ordered indexes go.
DROP INDEX IF EXISTS packets_tenant;
DROP INDEX IF EXISTS packets_tenant_context;
DROP INDEX IF EXISTS packets_tenant_state;
CREATE INDEX IF NOT EXISTS packets_tenant_time ON packets (tenant, submitted_ns);
CREATE INDEX IF NOT EXISTS packets_tenant_context_time ON packets (tenant, context, submitted_ns);
CREATE INDEX IF NOT EXISTS packets_tenant_state_time ON packets (tenant, state, submitted_ns);
-- No index finds a row by its client id (packets.id) or by (context, fence): the daemon finds
-- a client's packet by its number (it unmaps the id with the file's key), and the sqlite3
-- shell reads the table through to find an id (80 ms for 200,000 packets here; or map
-- the id first: `gpuschedd --audit-map-id packet:ID` gives the row's number, docs/queries.md).
-- Client ids are random, so each insert of an index on them landed at a random place of it:
-- version 8 dropped it, which doubled raw inserts of 64,000 packets (31-32k to 59-65k a
-- second, bench_batch's rows); an index on (context, fence) cost 6 % before. An operator who
-- wants one anyway may make it under another name: the daemon keeps indexes it does not know.
DROP INDEX IF EXISTS packets_context_fence;
DROP INDEX IF EXISTS packets_id;
-- The events kept in rows, by sequence number (watch's catch-up reads a range of them). Both
-- grow with time, so each insert lands at the end of its index.
CREATE INDEX IF NOT EXISTS packets_seq ON packets (seq) WHERE seq <> 0;
CREATE INDEX IF NOT EXISTS packets_end_seq ON packets (end_seq) WHERE end_seq <> 0;
-- Version 9: the rows that keep a READY (and perhaps a RUNNING) of a run not ended straight yet,
-- by the READY's seq (a kept RUNNING is at most GSD_AUDIT_FOLD_SPAN past it). A row joins it
-- while its packet runs and leaves it when the run ends, so it holds about the packets in
-- flight.
CREATE INDEX IF NOT EXISTS packets_open ON packets (ready_seq) WHERE ready_seq <> 0 AND end_seq = 0;

-- Append-only: one row per state change of a packet that its packets row does not keep (see
-- version 8 above), in the order the daemon saw them. The packet's tenant is in packets; the
-- state's name in packet_states. Read packet_events (below) for every event.
CREATE TABLE IF NOT EXISTS packet_event_rows (
	seq        INTEGER PRIMARY KEY NOT NULL,
	packet     INTEGER NOT NULL,
	state      INTEGER NOT NULL,
	time_ns    INTEGER NOT NULL, -- wall clock (CLOCK_REALTIME) when the change was audited
	detail     TEXT,
	state_digest BLOB,            -- hash chain: digest of the packets row this record left
	                              -- (NULL where a later event of the same commit left it)
	hash       BLOB               -- hash chain: this record's link (see the chain table);
	                              -- NULL for a READY or RUNNING moved here from its packets
	                              -- row (version 9)
);
-- The index carries the rowid (seq), so one packet's events come out already in order.
CREATE INDEX IF NOT EXISTS packet_events_packet ON packet_event_rows (packet);

-- Every state change of every packet: the rows of packet_event_rows and the events kept in
-- packets rows, with the columns of packet_events before version 8 (a kept event's
-- state_digest is its row's ready_digest or run_digest, or NULL, and its hash is the row's
-- on the newest kept event of its packet).
DROP VIEW IF EXISTS packet_events;
CREATE VIEW packet_events AS
SELECT seq, packet, state, time_ns, detail, state_digest, hash FROM packet_event_rows
UNION ALL SELECT seq, packet, 1, submitted_ns, submit_detail, NULL,
       CASE WHEN ready_seq = 0 AND run_seq = 0 AND end_seq = 0 THEN hash END FROM packets
       WHERE seq <> 0
UNION ALL SELECT ready_seq, packet, 2, ready_ns, ready_detail, ready_digest,
       CASE WHEN run_seq = 0 AND end_seq = 0 THEN hash END FROM packets WHERE ready_seq <> 0
UNION ALL SELECT run_seq, packet, 3, IFNULL(run_ns, started_ns), NULL, run_digest,
       CASE WHEN end_seq = 0 THEN hash END FROM packets WHERE run_seq <> 0
UNION ALL SELECT end_seq, packet, state, completed_ns, NULL, NULL, hash FROM packets
       WHERE end_seq <> 0;

-- The names of gpusched.v1.PacketState values.
CREATE TABLE IF NOT EXISTS packet_states (
	state INTEGER PRIMARY KEY NOT NULL,
	name  TEXT    NOT NULL
);
INSERT OR REPLACE INTO packet_states (state, name) VALUES (0, 'UNKNOWN'), (1, 'SUBMITTED'),
	(2, 'READY'), (3, 'RUNNING'), (4, 'COMPLETED'), (5, 'FAULTED'), (6, 'ABORTED'),
	(7, 'PREEMPTED'), (8, 'RESUBMITTED'), (9, 'CANCELLED'), (10, 'REJECTED');

-- Every packet event with the columns of its packet the views below show: each part reads its
-- own rows, so a condition on any column (a packet, a client id, a tenant) reaches every part
-- (a join with packet_events would read all of them first).
DROP VIEW IF EXISTS packet_event_facts;
CREATE VIEW packet_event_facts AS
SELECT e.seq, e.packet, e.state, e.time_ns, e.detail, p.tenant, p.context, p.fence, p.id
  FROM packet_event_rows e JOIN packets p ON p.packet = e.packet
UNION ALL SELECT seq, packet, 1, submitted_ns, submit_detail, tenant, context, fence, id
  FROM packets WHERE seq <> 0
UNION ALL SELECT ready_seq, packet, 2, ready_ns, ready_detail, tenant, context, fence, id
  FROM packets WHERE ready_seq <> 0
UNION ALL SELECT run_seq, packet, 3, IFNULL(run_ns, started_ns), NULL, tenant, context, fence, id
  FROM packets WHERE run_seq <> 0
UNION ALL SELECT end_seq, packet, state, completed_ns, NULL, tenant, context, fence, id
  FROM packets WHERE end_seq <> 0;

-- Every packet event with its packet's tenant and its state's name, for the sqlite3 shell.
DROP VIEW IF EXISTS packet_event_log;
CREATE VIEW packet_event_log AS
SELECT seq, packet, tenant, context, state,
       (SELECT name FROM packet_states s WHERE s.state = f.state) AS state_name, time_ns, detail
  FROM packet_event_facts f;

-- One row per tenant made by an admin request (TenantCreate), updated in place when an admin
-- changes it (TenantUpdate) or removes it (removed_ns), so a restarted daemon has it again; tenants of the configuration are
-- not recorded here. Only the salted hash of its token is kept. id is never reused: a tenant
-- made later with a removed one's name is another tenant, recorded everywhere as name#id, so it
-- never reads the removed one's records. Chain kind 9 (kind 8: a row written before version 5,
-- its digest without the last three columns).
CREATE TABLE IF NOT EXISTS tenants (
	id               INTEGER PRIMARY KEY NOT NULL,
	name             TEXT    NOT NULL,
	audit_name       TEXT    NOT NULL, -- its value in every tenant column: name, or name#id
	                                   -- when made with a removed tenant's name
	token_hash       TEXT    NOT NULL,
	kind             INTEGER NOT NULL,
	share            INTEGER NOT NULL,
	priority_ceiling INTEGER NOT NULL,
	context_limit    INTEGER NOT NULL,
	allocation_limit INTEGER NOT NULL,
	max_requests_per_second INTEGER NOT NULL,
	memory_quota     INTEGER NOT NULL,
	admin            INTEGER NOT NULL,
	created_ns       INTEGER NOT NULL,
	removed_ns       INTEGER NOT NULL,
	max_message      INTEGER NOT NULL DEFAULT 0, -- 0: the default for its kind
	packet_limit     INTEGER NOT NULL DEFAULT 0, -- 0: the daemon's max_queued_packets
	sync_limit       INTEGER NOT NULL DEFAULT 0  -- 0: the daemon's max_syncs
);

-- One row per context, updated in place; destroyed_ns stays 0 while it lives.
CREATE TABLE IF NOT EXISTS contexts (
	context                      INTEGER PRIMARY KEY NOT NULL,
	tenant                       TEXT    NOT NULL,
	device                       INTEGER NOT NULL,
	adapter                      INTEGER NOT NULL,
	node                         INTEGER NOT NULL,
	flags                        INTEGER NOT NULL,
	priority_class               INTEGER NOT NULL,
	priority                     INTEGER NOT NULL,
	dma_buffer_size              INTEGER NOT NULL,
	dma_buffer_segment_set       INTEGER NOT NULL,
	dma_buffer_private_data_size INTEGER NOT NULL,
	allocation_list_size         INTEGER NOT NULL,
	patch_location_list_size     INTEGER NOT NULL,
	caps                         INTEGER NOT NULL,
	paging_companion_node_id     INTEGER NOT NULL,
	created_ns                   INTEGER NOT NULL,
	destroyed_ns                 INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS contexts_tenant ON contexts (tenant, context);

-- One row per allocation, updated in place as it moves between segments.
CREATE TABLE IF NOT EXISTS allocations (
	allocation            INTEGER PRIMARY KEY NOT NULL,
	tenant                TEXT    NOT NULL,
	device                INTEGER NOT NULL,
	adapter               INTEGER NOT NULL,
	size                  INTEGER NOT NULL,
	supported_segment_set INTEGER NOT NULL,
	segment_preference    INTEGER NOT NULL, -- raw D3DDDI_SEGMENTPREFERENCE Value
	priority              INTEGER NOT NULL,
	flags                 INTEGER NOT NULL,
	segment               INTEGER NOT NULL, -- current placement; 0 = not resident
	segment_offset        INTEGER NOT NULL,
	created_ns            INTEGER NOT NULL,
	destroyed_ns          INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS allocations_tenant ON allocations (tenant, allocation);

-- Rejected or failed requests: what was asked, the status answered and why.
CREATE TABLE IF NOT EXISTS errors (
	seq     INTEGER PRIMARY KEY NOT NULL,
	time_ns INTEGER NOT NULL,
	tenant  TEXT,              -- NULL when the caller was not authenticated
	request TEXT    NOT NULL,
	status  INTEGER NOT NULL,  -- gpusched.v1.Status value
	message TEXT,
	hash    BLOB               -- hash chain link
);
CREATE INDEX IF NOT EXISTS errors_tenant ON errors (tenant, seq);

-- Free-form daemon events: start, stop, engine reset, ban...
CREATE TABLE IF NOT EXISTS notes (
	seq     INTEGER PRIMARY KEY NOT NULL,
	time_ns INTEGER NOT NULL,
	tenant  TEXT,              -- NULL for daemon-wide events
	kind    TEXT    NOT NULL,
	detail  TEXT,
	hash    BLOB               -- hash chain link
);

-- Append-only: one row per action of the video memory manager on an allocation (placed, paged
-- in, evicted, transferred, freed...), in the order the daemon took them. Segment 0 is system
-- memory (or nowhere: the source of a PLACE, the destination of a FREE).
CREATE TABLE IF NOT EXISTS moves (
	seq            INTEGER PRIMARY KEY NOT NULL,
	time_ns        INTEGER NOT NULL,
	tenant         TEXT    NOT NULL, -- the allocation's owner
	allocation     INTEGER NOT NULL,
	device         INTEGER NOT NULL,
	adapter        INTEGER NOT NULL,
	packet         INTEGER NOT NULL, -- the paging packet that moves the bytes; 0 = none
	for_packet     INTEGER NOT NULL, -- the render packet it was made resident for; 0 = none
	kind           INTEGER NOT NULL, -- gpusched.v1.MoveKind value
	kind_name      TEXT    NOT NULL,
	from_segment   INTEGER NOT NULL,
	from_offset    INTEGER NOT NULL,
	to_segment     INTEGER NOT NULL,
	to_offset      INTEGER NOT NULL,
	bytes          INTEGER NOT NULL,
	transfer_flags INTEGER NOT NULL, -- raw DXGK_TRANSFERFLAGS Value of the whole transfer
	pieces         INTEGER NOT NULL, -- sub-transfers it was split into
	reason         TEXT,
	hash           BLOB              -- hash chain link
);
-- Moves are read per tenant, newest first, optionally narrowed to one allocation, or to the
-- moves a paging packet made or a render packet needed.
CREATE INDEX IF NOT EXISTS moves_tenant ON moves (tenant, seq DESC);
CREATE INDEX IF NOT EXISTS moves_tenant_allocation ON moves (tenant, allocation, seq);
CREATE INDEX IF NOT EXISTS moves_packet ON moves (packet);
CREATE INDEX IF NOT EXISTS moves_for_packet ON moves (for_packet);

-- The hash chain (format 2, schema version 4). Every record the daemon writes has a seq and a
-- 16-byte BLAKE2b link over the previous record's link, its own seq, kind and id, the digest of
-- the row(s) it appended and the digest of the row it left in packets, contexts or allocations.
-- Records that append a row of their own keep their link in it (the hash column of
-- packet_events, moves, errors and notes; packet_events also keeps state_digest); the others
-- (kind 2 context, 3 allocation) have a row here; a SUBMITTED event's link also covers its
-- packet's allocation list (packet_allocations, by slot). meta holds
-- the seq and link of the last record committed. `gpusched audit verify` recomputes it all
-- (schema/chain.h has the rules): a row changed, removed, added or moved with another tool is
-- found at that row (a removed one at the record after it).
CREATE TABLE IF NOT EXISTS chain (
	seq   INTEGER PRIMARY KEY NOT NULL,
	kind  INTEGER NOT NULL,
	ref   INTEGER NOT NULL,
	state BLOB,
	hash  BLOB    NOT NULL
);
-- Retention: rows of packets, contexts and allocations whose last record was removed, with
-- the state that record left (kind 1 packet, 2 context, 3 allocation); meta.chain_base_seq and
-- chain_base_hash are the last removed record and its link, chain_base_objects the digest of
-- this table.
CREATE TABLE IF NOT EXISTS chain_base_objects (
	kind  INTEGER NOT NULL,
	ref   INTEGER NOT NULL,
	state BLOB    NOT NULL,
	PRIMARY KEY (kind, ref)
) WITHOUT ROWID;
-- The last record about a context, an allocation or a tenant (verification of their rows).
DROP INDEX IF EXISTS chain_objects;
DROP INDEX IF EXISTS chain_objects_v4;
CREATE INDEX IF NOT EXISTS chain_objects_v5 ON chain (kind, ref) WHERE kind IN (2, 3, 8, 9);
-- Where the chain starts in a file a daemon without it wrote (or, after an upgrade from
-- schema 3, a daemon with chain format 1): older rows are not covered.
INSERT OR IGNORE INTO meta (key, value) VALUES ('chain_format', '2');
INSERT OR IGNORE INTO meta (key, value) SELECT 'chain_start_seq', 1 + IFNULL(max(m), 0) FROM
	(SELECT max(seq) AS m FROM packet_events UNION ALL SELECT max(seq) FROM moves
	 UNION ALL SELECT max(seq) FROM errors UNION ALL SELECT max(seq) FROM notes);
INSERT OR IGNORE INTO meta (key, value)
	SELECT 'chain_start_packet', IFNULL(max(packet), 0) FROM packets;
INSERT OR IGNORE INTO meta (key, value)
	SELECT 'chain_start_context', IFNULL(max(context), 0) FROM contexts;
INSERT OR IGNORE INTO meta (key, value)
	SELECT 'chain_start_allocation', IFNULL(max(allocation), 0) FROM allocations;

-- ---- Views: the usage questions, answered by the plain sqlite3 shell ----
-- (`gpusched usage` reads packet_usage with a time range and computes the same sums, plus
-- percentiles.)
--
-- One row per packet: how long it waited (submitted -> first started), how long it ran on the
-- engine (the sum of its RUNNING spans, each up to the event that ended it), and the bytes the
-- memory manager moved to make it resident.
DROP VIEW IF EXISTS packet_usage;
CREATE VIEW packet_usage AS
SELECT p.packet, p.tenant, p.context, p.adapter, p.node, p.state, p.state_name, p.submit_flags,
       p.submitted_ns, p.preemptions, p.resubmissions,
       CASE WHEN p.started_ns > 0 AND p.started_ns >= p.submitted_ns
            THEN p.started_ns - p.submitted_ns END AS wait_ns,
       CASE WHEN p.end_seq <> 0
            THEN max(p.completed_ns - p.started_ns, 0)
            ELSE (SELECT IFNULL(sum((SELECT min(n.time_ns) FROM packet_event_rows n
                                     WHERE n.packet = e.packet AND n.seq > e.seq)
                                    - e.time_ns), 0)
                    FROM packet_event_rows e WHERE e.packet = p.packet AND e.state = 3)
                 -- a RUNNING its row keeps, up to the event that ended it (version 9)
                 + CASE WHEN p.run_seq <> 0
                        THEN IFNULL((SELECT min(n.time_ns) FROM packet_event_rows n
                                     WHERE n.packet = p.packet AND n.seq > p.run_seq)
                                    - p.started_ns, 0)
                        ELSE 0 END
       END AS run_ns,
       (SELECT IFNULL(sum(m.bytes), 0) FROM moves m WHERE m.for_packet = p.packet)
          AS paging_bytes
  FROM packets p;
-- Per tenant, per context, per engine (adapter, node): packets and how they ended, engine time,
-- preemptions, resubmissions, paging bytes, mean wait. For a time range, filter packet_usage
-- on submitted_ns first, e.g.
--   SELECT tenant, count(*), sum(run_ns) FROM packet_usage
--    WHERE tenant = 'default' AND submitted_ns >= 1700000000000000000 GROUP BY tenant;
-- and for a percentile, order: SELECT wait_ns FROM packet_usage WHERE tenant = 'default'
--   ORDER BY wait_ns LIMIT 1 OFFSET (SELECT count(*) * 99 / 100 FROM packets
--   WHERE tenant = 'default');
DROP VIEW IF EXISTS usage_by_tenant;
CREATE VIEW usage_by_tenant AS
SELECT tenant, count(*) AS packets, sum(state = 4) AS completed, sum(state = 5) AS faulted,
       sum(state = 9) AS cancelled, sum(preemptions) AS preemptions,
       sum(resubmissions) AS resubmissions, sum(run_ns) AS busy_ns,
       sum(paging_bytes) AS paging_bytes, avg(wait_ns) AS mean_wait_ns
  FROM packet_usage GROUP BY tenant;
DROP VIEW IF EXISTS usage_by_context;
CREATE VIEW usage_by_context AS
SELECT tenant, context, count(*) AS packets, sum(state = 4) AS completed,
       sum(state = 5) AS faulted, sum(state = 9) AS cancelled, sum(preemptions) AS preemptions,
       sum(resubmissions) AS resubmissions, sum(run_ns) AS busy_ns,
       sum(paging_bytes) AS paging_bytes, avg(wait_ns) AS mean_wait_ns
  FROM packet_usage GROUP BY tenant, context;
DROP VIEW IF EXISTS usage_by_node;
CREATE VIEW usage_by_node AS
SELECT adapter, node, count(*) AS packets, sum(state = 4) AS completed,
       sum(state = 5) AS faulted, sum(state = 9) AS cancelled, sum(preemptions) AS preemptions,
       sum(resubmissions) AS resubmissions, sum(run_ns) AS busy_ns,
       sum(paging_bytes) AS paging_bytes, avg(wait_ns) AS mean_wait_ns
  FROM packet_usage GROUP BY adapter, node;

-- One row per allocation-list entry of a packet, written once when it is submitted, so that
-- history can answer "which packets referenced this allocation". Keyed by the packet and the
-- entry's place in its list (slot), so one packet's list is one range; the packet's owner is in
-- packets.
CREATE TABLE IF NOT EXISTS packet_allocations (
	packet     INTEGER NOT NULL,
	slot       INTEGER NOT NULL, -- 0-based place in the packet's allocation list
	allocation INTEGER NOT NULL,
	write      INTEGER NOT NULL, -- 1 when the packet writes it (WriteOperation)
	PRIMARY KEY (packet, slot)
) WITHOUT ROWID;
DROP INDEX IF EXISTS packet_allocations_tenant;
CREATE INDEX IF NOT EXISTS packet_allocations_allocation
	ON packet_allocations (allocation, packet);

-- ---- Views in the clients' language (docs/queries.md has the questions they answer) ----
-- Times are ISO 8601 in UTC with milliseconds (NULL for "not yet"); `id` and `packet_id` are
-- the packet ids clients print; states, flags and move kinds by name. The daemon's own numbers
-- stay in the tables.

-- The names of DXGK_SUBMITCOMMANDFLAGS bits (docs/wddm.md).
CREATE TABLE IF NOT EXISTS submit_flag_names (
	bit  INTEGER PRIMARY KEY NOT NULL, -- the bit's value
	name TEXT    NOT NULL
);
INSERT OR REPLACE INTO submit_flag_names (bit, name) VALUES (1, 'Paging'), (2, 'Present'),
	(4, 'RedirectedPresent'), (8, 'NullRendering'), (16, 'Flip'), (32, 'FlipWithNoWait'),
	(64, 'ContextSwitch'), (128, 'Resubmission'), (256, 'VirtualMachineData');

-- One row per packet: who, where, when, how long, how it ended.
DROP VIEW IF EXISTS packet_log;
CREATE VIEW packet_log AS
SELECT p.id, p.tenant, p.device, p.context, p.adapter, p.node, p.fence, p.state_name AS state,
       (SELECT group_concat(f.name, ',') FROM submit_flag_names f
         WHERE p.submit_flags & f.bit) AS flags,
       CASE WHEN p.submitted_ns > 0
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', p.submitted_ns / 1e9, 'unixepoch') END
          AS submitted,
       CASE WHEN p.ready_ns > 0
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', p.ready_ns / 1e9, 'unixepoch') END AS ready,
       CASE WHEN p.started_ns > 0
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', p.started_ns / 1e9, 'unixepoch') END
          AS started,
       CASE WHEN p.completed_ns > 0
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', p.completed_ns / 1e9, 'unixepoch') END
          AS ended,
       CASE WHEN p.started_ns >= p.submitted_ns AND p.started_ns > 0
            THEN (p.started_ns - p.submitted_ns) / 1e6 END AS wait_ms,
       CASE WHEN p.completed_ns >= p.started_ns AND p.started_ns > 0
            THEN (p.completed_ns - p.started_ns) / 1e6 END AS run_ms,
       p.preemptions, p.resubmissions, p.dma_size, p.result,
       p.submitted_ns, p.packet AS row
  FROM packets p;

-- One row per state change of a packet, with the detail the daemon wrote (why it waited, what
-- preempted it...).
DROP VIEW IF EXISTS event_log;
CREATE VIEW event_log AS
SELECT id AS packet_id, tenant, context, fence,
       (SELECT name FROM packet_states s WHERE s.state = f.state) AS state,
       strftime('%Y-%m-%dT%H:%M:%fZ', time_ns / 1e9, 'unixepoch') AS time, detail, time_ns, seq
  FROM packet_event_facts f;

-- One row per action of the memory manager, with the packet ids clients see.
DROP VIEW IF EXISTS move_log;
CREATE VIEW move_log AS
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', m.time_ns / 1e9, 'unixepoch') AS time, m.tenant,
       m.allocation, m.device, m.kind_name AS kind, m.from_segment, m.to_segment, m.bytes,
       pp.id AS packet_id, fp.id AS for_packet_id, m.reason, m.time_ns, m.seq
  FROM moves m
  LEFT JOIN packets pp ON pp.packet = m.packet AND m.packet <> 0
  LEFT JOIN packets fp ON fp.packet = m.for_packet AND m.for_packet <> 0;

-- The names of gpusched.v1.Status values (proto/gpusched.proto).
CREATE TABLE IF NOT EXISTS status_names (
	status INTEGER PRIMARY KEY NOT NULL,
	name   TEXT    NOT NULL
);
INSERT OR REPLACE INTO status_names (status, name) VALUES
	(0, 'OK'), (1, 'MALFORMED'), (2, 'TOO_LARGE'), (3, 'INVALID_ARGUMENT'), (4, 'NOT_FOUND'),
	(5, 'RESERVED_BITS'), (6, 'FLAGS_NOT_ALLOWED'), (7, 'UNAUTHENTICATED'),
	(8, 'PERMISSION_DENIED'), (9, 'QUOTA_EXCEEDED'), (10, 'OUT_OF_MEMORY'), (11, 'TIMEOUT'),
	(12, 'FAULTED'), (13, 'BANNED'), (14, 'BUSY'), (15, 'SHUTTING_DOWN'), (16, 'UNIMPLEMENTED'),
	(17, 'INTERNAL'), (20, 'CTX_DMA_SEGMENT_NOT_APERTURE'), (21, 'CTX_GDI_ALLOCATION_LIST'),
	(22, 'CTX_RESERVED_NONZERO'), (23, 'CTX_BAD_NODE'), (24, 'CTX_BAD_PAGING_NODE'),
	(25, 'CTX_DMA_SEGMENT_UNKNOWN'), (26, 'CTX_BAD_SIZE'), (27, 'CTX_BAD_FLAGS'),
	(30, 'DMA_INVALID'), (31, 'PATCH_INVALID'), (32, 'LIST_TOO_LARGE'), (40, 'SEGMENT_PREFERENCE'),
	(41, 'SEGMENT_UNKNOWN'), (42, 'ALLOCATION_PRIORITY'), (43, 'TRANSFER_FLAGS'),
	(44, 'NOT_RESIDENT_TOGETHER'), (45, 'AUDIT_UNAVAILABLE'), (46, 'UNAVAILABLE');

-- Refused requests, the status by name, without the chain's bytes.
DROP VIEW IF EXISTS error_log;
CREATE VIEW error_log AS
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', r.time_ns / 1e9, 'unixepoch') AS time, r.tenant,
       r.request, IFNULL(n.name, r.status) AS status, r.message, r.time_ns, r.seq
  FROM errors r LEFT JOIN status_names n ON n.status = r.status;

-- The daemon's own notes (start, stop, faults, bans...), without the chain's bytes.
DROP VIEW IF EXISTS note_log;
CREATE VIEW note_log AS
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', time_ns / 1e9, 'unixepoch') AS time, tenant, kind, detail,
       time_ns, seq
  FROM notes;
