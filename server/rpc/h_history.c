/*
 * History queries run on the daemon's reader thread (rpc/reads.c: one at a time, at a lower
 * CPU priority, tenants in turn) with their own read-only SQLite connection (WAL lets them
 * read while the writer commits), so a large query never stalls the loop and costs the
 * reader, not the neighbours. A tenant only ever sees its own rows.
 */
#include "rpc/handlers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HISTORY 10000u

/*
 * Transitions nobody waits for linger briefly in the audit queue (see audit/audit.c). A reader
 * first queues a flush and waits for its ack on the reader thread, so the answer includes
 * everything the daemon did before the query arrived. The audit acks every record, even when it
 * cannot write it, so the wait ends.
 */
typedef struct flush_barrier {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
} flush_barrier;

static void barrier_ack(void *arg, bool ok)
{
	(void)ok;
	flush_barrier *b = arg;
	pthread_mutex_lock(&b->mu);
	b->done = true;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

static void barrier_free(flush_barrier *b)
{
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv);
	free(b);
}

static void barrier_wait(gsd_call *c)
{
	flush_barrier *b = c->barrier;
	pthread_mutex_lock(&b->mu);
	while (!b->done)
		pthread_cond_wait(&b->cv, &b->mu);
	pthread_mutex_unlock(&b->mu);
	barrier_free(b);
	c->barrier = NULL;
}

/* Flushes the audit, then runs `work` on the reader thread once the flush is committed. */
static void read_after_flush(gsd_daemon *d, gsd_call *c, void (*work)(gsd_call *c))
{
	flush_barrier *b = calloc(1, sizeof(*b));
	if (!b) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	c->barrier = b;
	/* Queue the read first: if that fails the call is answered and nothing waits on b. */
	if (!gsd_call_read(c, work)) {
		barrier_free(b);
		return;
	}
	gsd_audit_flush(d->audit, barrier_ack, b);
}

/* Another tenant's records are for administrators (a removed tenant's stay in the file: any
 * name may be read); a virtual machine itself (guest 0) reads its guests' (NAME/GUEST), a
 * guest only its own. False: answered PERMISSION_DENIED. */
static bool may_read_tenant(gsd_call *c, const char *name)
{
	size_t n = strlen(c->identity);
	bool own_guest =
	        !c->guest && strncmp(name, c->identity, n) == 0 && name[n] == '/' && name[n + 1];
	if (!name[0] || strcmp(name, c->identity) == 0 || own_guest || c->tenant->conf.admin)
		return true;
	gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
	               "%s is not an administrator: it may read only its own history", c->identity);
	return false;
}

/* Answers the call off the loop with an error status. */
static void reply_status_off_loop(gsd_call *c, int status, const char *message)
{
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.status = status;
	resp.message = (char *)message;
	gsd_call_reply_off_loop(c, &resp);
}

/* A read of the audit file failed: the call is answered INTERNAL with why. */
static void reply_read_failed(gsd_call *c, const char *err)
{
	reply_status_off_loop(c, GSD_ST(INTERNAL), err);
}

/* A time range (0: open at that end) must not be empty; false: answered INVALID_ARGUMENT. */
static bool time_range_valid(gsd_call *c, uint64_t since_ns, uint64_t until_ns)
{
	if (!since_ns || !until_ns || since_ns < until_ns)
		return true;
	gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
	               "the time range is empty: since_ns %llu is not before until_ns %llu",
	               (unsigned long long)since_ns, (unsigned long long)until_ns);
	return false;
}

/* A limit above what one answer holds is refused, not cut: a caller must know it pages. */
static bool limit_valid(gsd_call *c, uint32_t limit)
{
	if (limit <= MAX_HISTORY)
		return true;
	gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
	               "limit %u is above the %u rows one answer holds: ask for pages (the"
	               " cursor fields)",
	               limit, MAX_HISTORY);
	return false;
}

static uint32_t clamp_limit(uint32_t limit)
{
	return limit == 0 ? 100 : (limit > MAX_HISTORY ? MAX_HISTORY : limit);
}

/* Rows of the file carry the daemon's own packet ids, fences and seqs: each leaves through
 * the wire ids' permutation (core/wire_id.h), and a value from a request is unmapped before it
 * reaches a query. */
static void packet_record_out(const gsd_wire_key *k, const gsd_packet_rec *r,
                              Gpusched__V1__PacketRecord *o)
{
	gpusched__v1__packet_record__init(o);
	o->packet = gsd_wire_packet_out(k, r->packet);
	o->device = r->device;
	o->context = r->context;
	o->node = r->node;
	o->fence = r->fence; /* its context's: says nothing of other tenants */
	o->submit_flags = r->submit_flags;
	o->patch_flags = r->patch_flags;
	o->dma_size = r->dma_size;
	o->allocation_count = r->allocation_count;
	o->patch_count = r->patch_count;
	o->state = r->state;
	o->submitted_ns = r->submitted_ns;
	o->ready_ns = r->ready_ns;
	o->started_ns = r->started_ns;
	o->completed_ns = r->completed_ns;
	o->preemptions = r->preemptions;
	o->resubmissions = r->resubmissions;
	o->result = (char *)(r->result ? r->result : "");
	o->tenant = (char *)(r->tenant ? r->tenant : "");
}

static void history_work(gsd_call *c)
{
	barrier_wait(c);
	const Gpusched__V1__HistoryRequest *q = c->req->history;
	const gsd_wire_key *k = &c->d->wire;
	gsd_history_filter f = {.tenant = q->tenant[0] ? q->tenant : c->identity,
	                        .context = q->context,
	                        .device = q->device,
	                        .state = q->state,
	                        .node = q->node ? (int32_t)(q->node - 1) : -1,
	                        .before_packet = gsd_wire_packet_in(k, q->before_packet),
	                        .limit = clamp_limit(q->limit),
	                        .allocation = q->allocation,
	                        .paging = q->paging,
	                        .since_ns = q->since_ns,
	                        .until_ns = q->until_ns,
	                        .flags_mask = q->flags_mask,
	                        .fence = q->fence,
	                        .oldest_first = q->oldest_first,
	                        .after_packet = gsd_wire_packet_in(k, q->after_packet)};
	gsd_history_result res = {0};
	char err[256];
	if (gsd_history_packets(c->d->cfg.db_path, &f, &res, err, sizeof(err)) != 0) {
		reply_read_failed(c, err);
		return;
	}
	Gpusched__V1__PacketRecord **rp;
	Gpusched__V1__PacketRecord *recs = gsd_pb_repeated(res.count, sizeof(*recs), (void ***)&rp);
	if (!recs) {
		reply_read_failed(c, "out of memory");
	} else {
		for (size_t i = 0; i < res.count; i++) {
			packet_record_out(k, &res.rows[i].rec, &recs[i]);
			recs[i].dispatches =
			        (char *)(res.rows[i].dispatches ? res.rows[i].dispatches : "");
		}
		Gpusched__V1__HistoryResponse hr = GPUSCHED__V1__HISTORY_RESPONSE__INIT;
		hr.n_packets = res.count;
		hr.packets = rp;
		GSD_REPLY_OFF_LOOP(c, HISTORY, history, &hr);
		free(rp);
	}
	gsd_history_result_free(&res);
}

void gsd_h_history(gsd_daemon *d, gsd_call *c)
{
	/* Every number from the wire is checked before use: node is an ordinal + 1 of at most
	 * GSD_MAX_NODES nodes (a larger one would overflow the signed filter), state a
	 * PacketState. */
	const Gpusched__V1__HistoryRequest *q = R(history);
	if (q->node > GSD_MAX_NODES) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "node %u is out of range (0 = any, else "
		               "node ordinal + 1, at most %u)",
		               q->node, GSD_MAX_NODES);
		return;
	}
	if (!gsd_packet_state_valid((int)q->state)) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "state %d is not a PacketState",
		               (int)q->state);
		return;
	}
	if (!time_range_valid(c, q->since_ns, q->until_ns))
		return;
	if (q->before_packet && q->after_packet) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "before_packet and after_packet are two cursors: give one");
		return;
	}
	if (!may_read_tenant(c, q->tenant) || !limit_valid(c, q->limit))
		return;
	read_after_flush(d, c, history_work);
}

static void event_out(const gsd_wire_key *k, gsd_event_row *r, Gpusched__V1__PacketEvent *o)
{
	gpusched__v1__packet_event__init(o);
	o->seq = gsd_wire_seq_out(k, r->seq);
	o->packet = gsd_wire_packet_out(k, r->packet);
	o->state = r->state;
	o->time_ns = r->time_ns;
	o->context = r->context;
	o->detail = r->detail;
}

static void events_work(gsd_call *c)
{
	barrier_wait(c);
	const Gpusched__V1__PacketEventsRequest *q = c->req->packet_events;
	const gsd_wire_key *k = &c->d->wire;
	uint64_t after = gsd_wire_seq_in(k, q->after_seq),
	         before = gsd_wire_seq_in(k, q->before_seq);
	gsd_event_row *rows = NULL;
	size_t n = 0;
	char err[256];
	const char *path = c->d->cfg.db_path, *tenant = c->identity;
	int rc;
	if (q->packet)
		rc = gsd_history_events(path, tenant, gsd_wire_packet_in(k, q->packet), &rows, &n,
		                        err, sizeof(err));
	else if (q->since_ns || q->until_ns)
		rc = gsd_history_events_window(path, tenant, after, q->since_ns, q->until_ns,
		                               clamp_limit(q->limit), &rows, &n, err, sizeof(err));
	else
		rc = gsd_history_events_range(path, tenant, after, before, clamp_limit(q->limit),
		                              &rows, &n, err, sizeof(err));
	if (rc != 0) {
		reply_read_failed(c, err);
		return;
	}
	Gpusched__V1__PacketEvent **ep = NULL;
	Gpusched__V1__PacketEvent *evs = gsd_pb_repeated(n, sizeof(*evs), (void ***)&ep);
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	Gpusched__V1__PacketEventsResponse er = GPUSCHED__V1__PACKET_EVENTS_RESPONSE__INIT;
	if (!evs) {
		resp.status = GSD_ST(INTERNAL);
		resp.message = "out of memory";
	} else if (n == 0 && q->packet) {
		resp.status = GSD_ST(NOT_FOUND);
		resp.message = "no such packet in the history";
	} else {
		for (size_t i = 0; i < n; i++)
			event_out(k, &rows[i], &evs[i]);
		er.n_events = n;
		er.events = ep;
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_PACKET_EVENTS;
		resp.packet_events = &er;
	}
	gsd_call_reply_off_loop(c, &resp);
	free(ep);
	free(rows);
}

void gsd_h_packet_events(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__PacketEventsRequest *q = R(packet_events);
	if (!limit_valid(c, q->limit))
		return;
	if (q->packet && (q->after_seq || q->before_seq || q->since_ns || q->until_ns)) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "give a packet or a range of sequence numbers or times, not both");
		return;
	}
	if ((q->since_ns || q->until_ns) && q->before_seq) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "a time window pages with after_seq only, not before_seq");
		return;
	}
	if (q->since_ns && q->until_ns && q->since_ns >= q->until_ns) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "the time range is empty");
		return;
	}
	/* Sequence numbers are compared as the daemon counts them. */
	if (q->before_seq &&
	    gsd_wire_seq_in(&d->wire, q->before_seq) <= gsd_wire_seq_in(&d->wire, q->after_seq)) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "the range is empty: before_seq %llu is not above after_seq %llu",
		               (unsigned long long)q->before_seq, (unsigned long long)q->after_seq);
		return;
	}
	read_after_flush(d, c, events_work);
}

static void move_record_out(const gsd_call *c, const gsd_move_row *m, Gpusched__V1__MoveRecord *o)
{
	const gsd_wire_key *k = &c->d->wire;
	gpusched__v1__move_record__init(o);
	const gsd_move_rec *r = &m->rec;
	o->seq = gsd_wire_seq_out(k, m->seq);
	o->time_ns = r->time_ns;
	o->allocation = r->allocation;
	o->device = r->device;
	o->packet = gsd_wire_packet_out(k, r->packet);
	o->for_packet = gsd_wire_packet_out(k, r->for_packet);
	o->kind = r->kind;
	o->from_segment = r->from_segment;
	o->to_segment = r->to_segment;
	if (c->sees_placement) {
		o->from_offset = r->from_offset;
		o->to_offset = r->to_offset;
	} else {
		o->offsets_withheld = true;
	}
	o->bytes = r->bytes;
	o->transfer_flags = r->transfer_flags;
	o->pieces = r->pieces;
	o->reason = (char *)m->reason;
}

static void moves_work(gsd_call *c)
{
	barrier_wait(c);
	const Gpusched__V1__MovesRequest *q = c->req->moves;
	const gsd_wire_key *k = &c->d->wire;
	gsd_moves_filter f = {.tenant = c->identity,
	                      .allocation = q->allocation,
	                      .device = q->device,
	                      .packet = gsd_wire_packet_in(k, q->packet),
	                      .before_seq = gsd_wire_seq_in(k, q->before_seq),
	                      .limit = clamp_limit(q->limit)};
	gsd_move_row *rows = NULL;
	size_t n = 0;
	char err[256];
	if (gsd_history_moves(c->d->cfg.db_path, &f, &rows, &n, err, sizeof(err)) != 0) {
		reply_read_failed(c, err);
		return;
	}
	Gpusched__V1__MoveRecord **rp;
	Gpusched__V1__MoveRecord *recs = gsd_pb_repeated(n, sizeof(*recs), (void ***)&rp);
	if (!recs) {
		reply_read_failed(c, "out of memory");
	} else {
		for (size_t i = 0; i < n; i++)
			move_record_out(c, &rows[i], &recs[i]);
		Gpusched__V1__MovesResponse mr = GPUSCHED__V1__MOVES_RESPONSE__INIT;
		mr.n_moves = n;
		mr.moves = rp;
		GSD_REPLY_OFF_LOOP(c, MOVES, moves, &mr);
		free(rp);
	}
	free(rows);
}

void gsd_h_moves(gsd_daemon *d, gsd_call *c)
{
	if (!limit_valid(c, R(moves)->limit))
		return;
	read_after_flush(d, c, moves_work);
}

static void explain_work(gsd_call *c)
{
	barrier_wait(c);
	const Gpusched__V1__ExplainRequest *q = c->req->explain;
	const char *tenant = q->tenant[0] ? q->tenant : c->identity;
	const char *path = c->d->cfg.db_path;
	const gsd_wire_key *k = &c->d->wire;
	uint64_t id = gsd_wire_packet_in(k, q->packet);
	char err[256];
	gsd_packet_rec rec;
	int found = gsd_history_packet(path, tenant, id, &rec, err, sizeof(err));
	if (found <= 0) {
		if (found == 0)
			snprintf(err, sizeof(err), "packet %llu is not in the history",
			         (unsigned long long)q->packet);
		reply_status_off_loop(c, found == 0 ? GSD_ST(NOT_FOUND) : GSD_ST(INTERNAL), err);
		return;
	}
	gsd_event_row *evr = NULL;
	gsd_move_row *mvr = NULL;
	size_t nev = 0, nmv = 0;
	gsd_moves_filter mf = {.tenant = tenant, .packet = id, .limit = MAX_HISTORY};
	if (gsd_history_events(path, tenant, id, &evr, &nev, err, sizeof(err)) != 0 ||
	    gsd_history_moves(path, &mf, &mvr, &nmv, err, sizeof(err)) != 0) {
		reply_read_failed(c, err);
		free(evr);
		return;
	}
	Gpusched__V1__PacketEvent **ep = NULL;
	Gpusched__V1__MoveRecord **mp = NULL;
	Gpusched__V1__PacketEvent *evs = gsd_pb_repeated(nev, sizeof(*evs), (void ***)&ep);
	Gpusched__V1__MoveRecord *mvs = gsd_pb_repeated(nmv, sizeof(*mvs), (void ***)&mp);
	if (!evs || !mvs) {
		reply_read_failed(c, "out of memory");
	} else {
		Gpusched__V1__PacketRecord pr;
		rec.tenant = tenant;
		/* The row's result text is the last event's detail (a final state's reason). */
		rec.result = nev ? evr[nev - 1].detail : NULL;
		packet_record_out(k, &rec, &pr);
		for (size_t i = 0; i < nev; i++)
			event_out(k, &evr[i], &evs[i]);
		/* Moves come newest first: the timeline wants them in order. */
		for (size_t i = 0; i < nmv; i++)
			move_record_out(c, &mvr[nmv - 1 - i], &mvs[i]);
		Gpusched__V1__ExplainResponse er = GPUSCHED__V1__EXPLAIN_RESPONSE__INIT;
		er.packet = &pr;
		er.n_events = nev;
		er.events = ep;
		er.n_moves = nmv;
		er.moves = mp;
		GSD_REPLY_OFF_LOOP(c, EXPLAIN, explain, &er);
	}
	free(ep);
	free(mp);
	free(evr);
	free(mvr);
}

void gsd_h_explain(gsd_daemon *d, gsd_call *c)
{
	if (!may_read_tenant(c, R(explain)->tenant))
		return;
	read_after_flush(d, c, explain_work);
}

static void usage_work(gsd_call *c)
{
	barrier_wait(c);
	const Gpusched__V1__UsageRequest *q = c->req->usage;
	gsd_usage_filter f = {.tenant = strcmp(q->tenant, "*") == 0 ? NULL
	                                : q->tenant[0]              ? q->tenant
	                                                            : c->identity,
	                      .since_ns = q->since_ns,
	                      .until_ns = q->until_ns,
	                      .by = (gsd_usage_by)q->by};
	gsd_usage_row *rows = NULL;
	size_t n = 0;
	bool truncated = false;
	char err[256];
	if (gsd_history_usage(c->d->cfg.db_path, &f, &rows, &n, &truncated, err, sizeof(err)) !=
	    0) {
		reply_read_failed(c, err);
		return;
	}
	/* The window: as asked, else from the first to the last submission seen. */
	uint64_t first = UINT64_MAX, last = 0;
	for (size_t i = 0; i < n; i++) {
		if (rows[i].first_ns < first)
			first = rows[i].first_ns;
		if (rows[i].last_ns > last)
			last = rows[i].last_ns;
	}
	uint64_t from = q->since_ns ? q->since_ns : first;
	uint64_t to = q->until_ns ? q->until_ns : last;
	uint64_t window = n && to > from ? to - from : 0;
	Gpusched__V1__UsageRow **rp = NULL;
	Gpusched__V1__UsageRow *out = gsd_pb_repeated(n, sizeof(*out), (void ***)&rp);
	if (!out) {
		reply_read_failed(c, "out of memory");
	} else {
		for (size_t i = 0; i < n; i++) {
			const gsd_usage_row *r = &rows[i];
			Gpusched__V1__UsageRow *o = &out[i];
			gpusched__v1__usage_row__init(o);
			o->tenant = (char *)r->tenant;
			o->context = r->context;
			o->adapter = r->adapter;
			o->node = r->node;
			o->packets = r->packets;
			o->completed = r->completed;
			o->faulted = r->faulted;
			o->cancelled = r->cancelled;
			o->preemptions = r->preemptions;
			o->resubmissions = r->resubmissions;
			o->busy_ns = r->busy_ns;
			o->utilisation = window ? (double)r->busy_ns / (double)window : 0.0;
			o->paging_bytes = r->paging_bytes;
			o->wait_p50_ns = r->wait_ns[0];
			o->wait_p95_ns = r->wait_ns[1];
			o->wait_p99_ns = r->wait_ns[2];
			o->run_p50_ns = r->run_ns[0];
			o->run_p95_ns = r->run_ns[1];
			o->run_p99_ns = r->run_ns[2];
		}
		Gpusched__V1__UsageResponse ur = GPUSCHED__V1__USAGE_RESPONSE__INIT;
		ur.n_rows = n;
		ur.rows = rp;
		ur.window_ns = window;
		ur.truncated = truncated;
		GSD_REPLY_OFF_LOOP(c, USAGE, usage, &ur);
	}
	free(rp);
	free(rows);
}

void gsd_h_usage(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__UsageRequest *q = R(usage);
	if (q->by > GPUSCHED__V1__USAGE_KEY__USAGE_BY_NODE) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "by %d is not a UsageKey", (int)q->by);
		return;
	}
	if (!time_range_valid(c, q->since_ns, q->until_ns))
		return;
	/* "*" (every tenant) is for administrators, like another tenant's name. */
	if (!may_read_tenant(c, q->tenant))
		return;
	read_after_flush(d, c, usage_work);
}
