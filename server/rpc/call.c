/*
 * Answering calls: at once from the loop, after the audit has committed a submission's
 * records, or computed on libuv's thread pool; and parking calls until something they wait for
 * happens, within limits and deadlines, so that no tenant or connection can hold the workers
 * others need.
 */
#include "rpc/internal.h"

#include "core/log.h"
#include "rpc/handlers.h"
#include "vidsch/vidsch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Workers never parked: room for requests that answer at once, whoever waits. */
#define RESERVED_WORKERS 64u

/* ---- freeing ---- */

static void call_free_now(gsd_call *c)
{
	if (c->req)
		gpusched__v1__request__free_unpacked(c->req, NULL);
	free(c);
}

static void timer_closed(uv_handle_t *h)
{
	call_free_now(h->data);
}

/* The waiting requests of a VM tenant's guest process (behind a relay, every guest shares the
 * relay's connection, so its own count is what bounds one guest). */
static uintptr_t guest_waits(const gsd_tenant *t, uint64_t guest)
{
	return (uintptr_t)gsd_hmap_get(&t->guest_waits, guest);
}

static int guest_waits_set(gsd_tenant *t, uint64_t guest, uintptr_t n)
{
	if (n == 0) {
		gsd_hmap_del(&t->guest_waits, guest);
		return 0;
	}
	return gsd_hmap_put(&t->guest_waits, guest, (void *)n);
}

/* Stops counting the call as waiting. */
static void unpark(gsd_call *c)
{
	if (!c->parked)
		return;
	c->parked = false;
	c->d->rpc->parked--;
	gsd_list_remove(&c->conn_link);
	if (c->parked_by_guest) {
		c->parked_by_guest = false;
		guest_waits_set(c->tenant, c->guest, guest_waits(c->tenant, c->guest) - 1);
		return;
	}
	bool closed;
	gsd_conn *conn = gsd_rpc_conn(c->d->rpc, c->pipe, false, &closed);
	if (conn)
		conn->waits--;
}

static void call_free(gsd_call *c)
{
	gsd_waiter_cancel(&c->waiter);
	unpark(c);
	if (c->timer_used) {
		uv_timer_stop(&c->timer);
		c->timer.data = c;
		uv_close((uv_handle_t *)&c->timer, timer_closed);
	} else {
		call_free_now(c);
	}
}

/* ---- answers from the loop ---- */

void gsd_call_reply(gsd_call *c, Gpusched__V1__Response *resp)
{
	gsd_rpc_worker_send(c->worker, gsd_rpc_encode(c->id, resp));
	call_free(c);
}

/*
 * Floods. A tenant whose requests are refused more than TARPIT_AFTER times in a second is
 * re-sending refusals as fast as they come back (a client that retries BUSY or QUOTA_EXCEEDED at
 * once, or sends what can only fail). For the rest of that second and the next, its refusals
 * are answered TARPIT_MS late: the flood's rate falls to what the tenant may have waiting over
 * TARPIT_MS, instead of taking the daemon's and nng's CPU from every other tenant
 * (bench_attack, request-flood). Each refusal is still audited at once. A held call keeps its
 * worker, so at most max_inflight_requests per tenant and a quarter of max_workers in all are
 * held; past that, and while stopping, refusals are answered at once.
 */
#define TARPIT_AFTER 1000u
#define TARPIT_MS    100u

static bool tarpit_wanted(gsd_call *c)
{
	gsd_tenant *t = c->tenant;
	struct gsd_rpc *rpc = c->d->rpc;
	if (!t || !rpc || !c->pipe || c->parked || c->timer_used || rpc->settling)
		return false;
	uint64_t second = gsd_now_ns() / 1000000000u;
	if (t->refusal_window != second) {
		t->flooding = t->refusal_window + 1 == second && t->refusal_count > TARPIT_AFTER;
		t->refusal_window = second;
		t->refusal_count = 0;
	}
	if (++t->refusal_count == TARPIT_AFTER + 1 && !t->flooding) {
		t->flooding = true;
		GSD_WARN("tenant %s: more than %u requests refused this second: its refusals are "
		         "answered %u ms late",
		         t->conf.name, TARPIT_AFTER, TARPIT_MS);
	}
	return t->flooding && t->tarpitted < c->d->cfg.max_inflight_requests &&
	       rpc->tarpitted < c->d->cfg.max_workers / 4;
}

static void tarpit_answer(gsd_call *c)
{
	struct gsd_rpc *rpc = c->d->rpc;
	gsd_list_remove(&c->tarpit_link);
	rpc->tarpitted--;
	c->tenant->tarpitted--;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.status = c->off_status;
	resp.message = c->off_message;
	gsd_call_reply(c, &resp);
}

static void tarpit_due(uv_timer_t *tm)
{
	struct gsd_rpc *rpc = tm->data;
	uint64_t now = uv_now(tm->loop);
	while (!gsd_list_empty(&rpc->tarpit)) {
		gsd_call *c = GSD_CONTAINER_OF(rpc->tarpit.next, gsd_call, tarpit_link);
		if (c->tarpit_due_ms > now) {
			uv_timer_start(tm, tarpit_due, c->tarpit_due_ms - now, 0);
			return;
		}
		tarpit_answer(c);
	}
}

/* Holds c's refusal (status, message) to be answered TARPIT_MS from now. */
static void tarpit_hold(gsd_call *c, int status, const char *msg)
{
	struct gsd_rpc *rpc = c->d->rpc;
	c->off_status = status;
	size_t n = strnlen(msg, sizeof(c->off_message) - 1);
	memcpy(c->off_message, msg, n);
	c->off_message[n] = '\0';
	c->tarpit_due_ms = uv_now(c->d->loop) + TARPIT_MS;
	bool first = gsd_list_empty(&rpc->tarpit);
	gsd_list_push_back(&rpc->tarpit, &c->tarpit_link);
	rpc->tarpitted++;
	c->tenant->tarpitted++;
	if (first)
		uv_timer_start(&rpc->tarpit_timer, tarpit_due, TARPIT_MS, 0);
}

void gsd_call_verror(gsd_call *c, int status, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	gsd_daemon *d = c->d;
	d->stats.errors++;
	if (c->tenant)
		c->tenant->stats.errors++;
	if (status >= 0 && status < GSD_STATS_STATUSES)
		d->stats.by_status[status]++;
	const char *req = c->req ? gsd_request_name(c->req->body_case) : "undecodable";
	if (status != GSD_ST(TIMEOUT))
		gsd_audit_error(d->audit, gsd_call_identity(c), req, status, msg);
	GSD_DEBUG("request %s from %s: status %d: %s", req, c->tenant ? c->tenant->conf.name : "-",
	          status, msg);
	if (status != GSD_ST(TIMEOUT) && tarpit_wanted(c)) {
		tarpit_hold(c, status, msg);
		return;
	}
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.status = status;
	resp.message = msg;
	gsd_call_reply(c, &resp);
}

void gsd_call_error(gsd_call *c, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	gsd_call_verror(c, status, fmt, ap);
	va_end(ap);
}

/* ---- answers sent by the audit writer once a submission is durable ---- */

/*
 * A submission's answer waits here for its packets' SUBMITTED records. The writer thread acks
 * each record; the last ack sends the answer (OK, or AUDIT_UNAVAILABLE when any record could
 * not be committed) and hands the outcome to the loop (recorded_drain), which lets the packets
 * run, or cancels them: a packet whose record was not committed never runs, so a client that
 * retries after AUDIT_UNAVAILABLE never runs its work twice.
 */
typedef struct gsd_audit_reply {
	struct gsd_audit_reply *next; /* in gsd_rpc.recorded */
	gsd_rpc_worker *w;
	nng_msg *msg;
	uint64_t id;
	uint64_t started_ns; /* when the request arrived (the submit latency histogram) */
	uint32_t remaining;  /* records not yet acked (all acks come from the writer thread) */
	bool all_ok;
	bool answer; /* msg is sent with the last ack (else no answer leaves from here) */
	size_t npackets;
	uint64_t packets[]; /* ids */
} gsd_audit_reply;

/* The loop thread is in gsd_audit_commit_here (audit_commit): acks come on it. */
static _Thread_local bool committing_on_loop;

static void audit_reply_ack(void *arg, bool ok)
{
	gsd_audit_reply *ar = arg;
	ar->all_ok &= ok;
	if (--ar->remaining > 0)
		return;
	nng_msg *msg = ar->msg;
	ar->msg = NULL;
	if (!ar->all_ok && ar->answer) {
		nng_msg_free(msg);
		Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
		resp.status = GSD_ST(AUDIT_UNAVAILABLE);
		resp.message = "the audit file could not record the submission: nothing ran; it is "
		               "safe to retry once the audit file is writable again";
		msg = gsd_rpc_encode(ar->id, &resp);
	}
	struct gsd_rpc *rpc = ar->w->rpc;
	if (ar->all_ok)
		gsd_histo_observe(&rpc->d->stats.submit_latency, gsd_now_ns() - ar->started_ns);
	if (ar->answer) /* else the call waits for the packet's end, which answers it */
		gsd_rpc_worker_send(ar->w, msg);
	pthread_mutex_lock(&rpc->lock);
	ar->next = NULL;
	if (rpc->recorded_tail)
		rpc->recorded_tail->next = ar;
	else
		rpc->recorded = ar;
	rpc->recorded_tail = ar;
	pthread_mutex_unlock(&rpc->lock);
	/* Committed on the loop (audit_commit): it drains the list itself right after. */
	if (!committing_on_loop)
		gsd_wake_send(&rpc->recorded_async);
}

/* On the loop: the packets of answered submissions may run, or are cancelled. */
static void recorded_drain(gsd_wake *h)
{
	gsd_daemon *d = h->data;
	struct gsd_rpc *rpc = d->rpc;
	pthread_mutex_lock(&rpc->lock);
	gsd_audit_reply *list = rpc->recorded;
	rpc->recorded = rpc->recorded_tail = NULL;
	pthread_mutex_unlock(&rpc->lock);
	/* A batch's packets become runnable together, as they arrived. */
	gsd_vidsch_hold(d, true);
	while (list) {
		gsd_audit_reply *ar = list;
		list = ar->next;
		for (size_t i = 0; i < ar->npackets; i++) {
			gsd_packet *p = gsd_hmap_get(&d->packets, ar->packets[i]);
			if (p && p->unrecorded)
				gsd_vidsch_recorded(d, p, ar->all_ok);
		}
		free(ar);
	}
	gsd_vidsch_hold(d, false);
}

/*
 * Before the loop sleeps, the requests it handled in this round have queued their records: the
 * loop commits them itself when the writer is idle, and answers, which saves waking the
 * writer and then the loop again for each answer (audit.h, gsd_audit_commit_here). Not while
 * a packet is on an engine: an engine thread then takes a CPU (the emulator's SPIN), and a
 * commit on the loop, preempted, held every tenant's interrupts and answers behind it
 * (bench_neighbour: a light tenant's p99 under a flood went from 1.0-1.8x to 1.2-3.5x alone).
 */
static void audit_commit(uv_prepare_t *h)
{
	gsd_daemon *d = h->data;
	if (!d->audit)
		return;
	committing_on_loop = true;
	bool committed = gsd_audit_commit_here(d->audit, !gsd_daemon_engines_idle(d));
	committing_on_loop = false;
	if (committed)
		recorded_drain(&d->rpc->recorded_async);
}

int gsd_call_reply_after_audit(gsd_call *c, Gpusched__V1__Response *resp,
                               gsd_packet *const *packets, size_t n)
{
	gsd_audit_reply *ar = malloc(sizeof(*ar) + n * sizeof(ar->packets[0]));
	nng_msg *msg = resp ? gsd_rpc_encode(c->id, resp) : NULL;
	if (!ar || (resp && !msg)) {
		free(ar);
		nng_msg_free(msg);
		/* Recorded as submitted and cancelled at once: none of them ever runs. */
		for (size_t i = 0; i < n; i++)
			packets[i]->audit_seq =
			        gsd_packet_audit_submitted(c->d, packets[i], NULL, NULL);
		for (size_t i = 0; i < n; i++)
			gsd_vidsch_recorded(c->d, packets[i], false);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory encoding the answer");
		return -1;
	}
	*ar = (gsd_audit_reply){.w = c->worker,
	                        .started_ns = c->started_ns,
	                        .msg = msg,
	                        .id = c->id,
	                        .remaining = (uint32_t)n,
	                        .all_ok = true,
	                        .answer = resp != NULL,
	                        .npackets = n};
	for (size_t i = 0; i < n; i++)
		ar->packets[i] = packets[i]->rec.packet;
	/* Each record acks: a batch may straddle transactions, and one of them may fail. */
	for (size_t i = 0; i < n; i++)
		packets[i]->audit_seq =
		        gsd_packet_audit_submitted(c->d, packets[i], audit_reply_ack, ar);
	if (resp)
		call_free(c);
	return 0;
}

/* ---- answers computed off the loop ---- */

typedef struct offload {
	uv_work_t work;
	gsd_call *c;
	void (*fn)(gsd_call *c);
	/* gsd_call_offload_then: work(arg) on the pool, then(c, arg) on the loop. */
	void (*work_arg)(void *arg);
	void (*then)(gsd_call *c, void *arg);
	void *arg;
} offload;

static void offload_work(uv_work_t *w)
{
	offload *o = w->data;
	if (o->work_arg)
		o->work_arg(o->arg);
	else
		o->fn(o->c);
}

void gsd_call_offload_finish(gsd_call *c)
{
	/* Audit calls belong to the loop: an error answered off the loop is recorded here. */
	if (c->off_status != GSD_ST(OK)) {
		c->d->stats.errors++;
		if (c->tenant)
			c->tenant->stats.errors++;
		if (c->off_status < GSD_STATS_STATUSES)
			c->d->stats.by_status[c->off_status]++;
		gsd_audit_error(c->d->audit, gsd_call_identity(c),
		                gsd_request_name(c->req->body_case), c->off_status, c->off_message);
	}
	/* Sent from the loop, after the audit record: a client that reads the counters or the
	 * audit right after the answer finds its error there. */
	gsd_rpc_worker_send(c->worker, c->off_reply);
	c->d->rpc->offloads--;
	call_free(c);
}

static void offload_done(uv_work_t *w, int status)
{
	(void)status;
	offload *o = w->data;
	gsd_call *c = o->c;
	if (o->then) {
		/* It answers on the loop like any handler. */
		c->d->rpc->offloads--;
		o->then(c, o->arg);
		free(o);
		return;
	}
	gsd_call_offload_finish(c);
	free(o);
}

bool gsd_call_offload_then(gsd_call *c, void (*work)(void *arg),
                           void (*then)(gsd_call *c, void *arg), void *arg)
{
	offload *o = calloc(1, sizeof(*o));
	if (!o)
		return false;
	o->c = c;
	o->work_arg = work;
	o->then = then;
	o->arg = arg;
	o->work.data = o;
	if (uv_queue_work(c->d->loop, &o->work, offload_work, offload_done) != 0) {
		free(o);
		return false;
	}
	c->d->rpc->offloads++;
	return true;
}

bool gsd_call_offload(gsd_call *c, void (*work)(gsd_call *c))
{
	offload *o = calloc(1, sizeof(*o));
	if (!o) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return false;
	}
	o->c = c;
	o->fn = work;
	o->work.data = o;
	if (uv_queue_work(c->d->loop, &o->work, offload_work, offload_done) != 0) {
		free(o);
		gsd_call_error(c, GSD_ST(INTERNAL), "cannot queue work");
		return false;
	}
	c->d->rpc->offloads++;
	return true;
}

void gsd_call_reply_off_loop(gsd_call *c, Gpusched__V1__Response *resp)
{
	if (resp->status != GSD_ST(OK)) {
		c->off_status = resp->status;
		snprintf(c->off_message, sizeof(c->off_message), "%s",
		         resp->message ? resp->message : "");
	}
	c->off_reply = gsd_rpc_encode(c->id, resp);
}

/* ---- parked calls ---- */

gsd_call *gsd_call_of_waiter(gsd_waiter *w)
{
	return GSD_CONTAINER_OF(w, gsd_call, waiter);
}

static void deadline_cb(uv_timer_t *t)
{
	gsd_call *c = t->data;
	c->on_timeout(c);
}

/* Counts the call as waiting, if the limits allow it; answers BUSY and returns false if not. */
static bool park(gsd_call *c)
{
	if (c->parked)
		return true;
	gsd_daemon *d = c->d;
	struct gsd_rpc *rpc = d->rpc;
	bool closed = false;
	gsd_conn *conn = gsd_rpc_conn(rpc, c->pipe, true, &closed);
	if (closed) {
		gsd_call_error(c, GSD_ST(BUSY), "the connection closed: the request cannot wait");
		return false;
	}
	/* A guest process is counted on its own: one guest's waits never use up another's. */
	bool by_guest = c->guest != 0 && c->tenant;
	uintptr_t gw = by_guest ? guest_waits(c->tenant, c->guest) : 0;
	if (by_guest && gw >= d->cfg.max_waits_per_connection) {
		gsd_call_error(c, GSD_ST(BUSY),
		               "guest %llu already has %u waiting requests "
		               "(max_waits_per_connection, counted per guest)",
		               (unsigned long long)c->guest, (unsigned)gw);
		return false;
	}
	if (!by_guest && conn && conn->waits >= d->cfg.max_waits_per_connection) {
		gsd_call_error(c, GSD_ST(BUSY),
		               "the connection already has %u waiting requests "
		               "(max_waits_per_connection %u)",
		               conn->waits, d->cfg.max_waits_per_connection);
		return false;
	}
	if (rpc->parked >= d->cfg.max_workers - RESERVED_WORKERS) {
		gsd_call_error(c, GSD_ST(BUSY),
		               "the daemon already has %u waiting requests: try again later",
		               rpc->parked);
		return false;
	}
	if (by_guest && guest_waits_set(c->tenant, c->guest, gw + 1) != 0) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return false;
	}
	c->parked = true;
	c->parked_by_guest = by_guest;
	rpc->parked++;
	if (conn) {
		if (!by_guest)
			conn->waits++;
		gsd_list_push_back(&conn->parked, &c->conn_link);
	}
	return true;
}

bool gsd_call_may_wait(gsd_call *c)
{
	return park(c);
}

bool gsd_call_wait(gsd_call *c, gsd_waitq *q, gsd_wake_fn wake, uint32_t timeout_ms,
                   void (*on_timeout)(gsd_call *c))
{
	if (!park(c))
		return false;
	c->waiter.wake = wake;
	gsd_waitq_add(q, &c->waiter);
	/* One deadline for the call's whole wait, however often it is woken and waits again. */
	if (!c->timer_used) {
		uint32_t max = c->d->cfg.max_wait_ms;
		uv_timer_init(c->d->loop, &c->timer);
		c->timer.data = c;
		c->timer_used = true;
		c->on_timeout = on_timeout;
		uv_timer_start(&c->timer, deadline_cb,
		               timeout_ms && timeout_ms < max ? timeout_ms : max, 0);
	}
	return true;
}

static void redispatch_drain(uv_async_t *h)
{
	gsd_daemon *d = h->data;
	gsd_list *it;
	while ((it = gsd_list_pop_front(&d->rpc->redispatch))) {
		gsd_call *c = gsd_call_of_waiter(GSD_CONTAINER_OF(it, gsd_waiter, link));
		if (d->stopping)
			gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		else
			gsd_handle_request(d, c);
	}
}

/* Woken: handled again from the loop once the current event is done, never from inside the
 * state changes of the layer that woke it. */
static void retry_wake(gsd_waiter *w, void *event)
{
	(void)event;
	gsd_call *c = gsd_call_of_waiter(w);
	gsd_list_push_back(&c->d->rpc->redispatch, &w->link);
	uv_async_send(&c->d->rpc->redispatch_async);
}

static void retry_expired(gsd_call *c)
{
	gsd_call_error(c, GSD_ST(TIMEOUT),
	               "still waiting after %u ms (max_wait_ms) for packets to be done with the "
	               "allocation",
	               c->d->cfg.max_wait_ms);
}

bool gsd_call_retry_when(gsd_call *c, gsd_waitq *q)
{
	c->deferred++;
	return gsd_call_wait(c, q, retry_wake, 0, retry_expired);
}

/* ---- start and stop ---- */

int gsd_rpc_calls_start(struct gsd_rpc *rpc)
{
	gsd_daemon *d = rpc->d;
	gsd_list_init(&rpc->redispatch);
	gsd_list_init(&rpc->tarpit);
	uv_timer_init(d->loop, &rpc->tarpit_timer);
	rpc->tarpit_timer.data = rpc;
	gsd_rpc_tls_timer_init(rpc);
	uv_async_init(d->loop, &rpc->redispatch_async, redispatch_drain);
	rpc->redispatch_async.data = d;
	uv_prepare_init(d->loop, &rpc->audit_commit);
	rpc->audit_commit.data = d;
	uv_prepare_start(&rpc->audit_commit, audit_commit);
	uv_unref((uv_handle_t *)&rpc->audit_commit);
	if (gsd_wake_init(d->loop, &rpc->recorded_async, recorded_drain) != 0)
		return -1;
	rpc->recorded_async.data = d;
	return gsd_rpc_reads_start(rpc);
}

void gsd_rpc_settle(gsd_daemon *d)
{
	if (!d->rpc)
		return;
	redispatch_drain(&d->rpc->redispatch_async);
	d->rpc->settling = true;
	while (!gsd_list_empty(&d->rpc->tarpit))
		tarpit_answer(GSD_CONTAINER_OF(d->rpc->tarpit.next, gsd_call, tarpit_link));
	uv_timer_stop(&d->rpc->tarpit_timer);
	while (d->rpc->offloads > 0)
		uv_run(d->loop, UV_RUN_ONCE);
}

void gsd_rpc_calls_close(struct gsd_rpc *rpc)
{
	uv_close((uv_handle_t *)&rpc->audit_commit, NULL);
	uv_close((uv_handle_t *)&rpc->redispatch_async, NULL);
	uv_close((uv_handle_t *)&rpc->tarpit_timer, NULL);
	gsd_rpc_tls_timer_close(rpc);
	gsd_wake_close(&rpc->recorded_async, false);
	gsd_rpc_reads_stop(rpc);
}

void gsd_rpc_calls_free(struct gsd_rpc *rpc)
{
	gsd_rpc_reads_free(rpc);
	/* Outcomes the loop will not process any more: their packets are long gone. */
	while (rpc->recorded) {
		gsd_audit_reply *ar = rpc->recorded;
		rpc->recorded = ar->next;
		free(ar);
	}
}
