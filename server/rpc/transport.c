/*
 * The transport of requests: the REP socket, its pool of nng contexts ("workers"), the inbox the
 * nng threads fill and the loop drains, answers (now, after the audit commit, or computed on
 * the thread pool), deadlines, and calls parked until something they wait for happens.
 */
#include "rpc/rpc.h"

#include "core/log.h"
#include "rpc/handlers.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/util/platform.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W_RECV = 0, W_SEND = 1 };

struct gsd_rpc_worker {
	struct gsd_rpc *rpc;
	nng_ctx ctx;
	nng_aio *aio;
	int state;
};

typedef struct inbox_item {
	gsd_rpc_worker *w;
	nng_msg *msg;
} inbox_item;

struct gsd_rpc {
	gsd_daemon *d;
	nng_socket sock;
	bool sock_open;
	uint32_t nlisteners;
	nng_listener listeners[GSD_MAX_LISTEN];
	gsd_rpc_worker **workers;
	size_t nworkers, capworkers;
	size_t max_workers;
	atomic_uint idle;
	atomic_uint sending; /* answers handed to nng and not yet sent */
	atomic_bool closing;
	pthread_mutex_t lock;
	inbox_item *inbox;
	size_t ninbox, capinbox;
	uv_async_t async;
	/* Calls to handle again from the loop (their waiter.link), and the async that drains them.
	 */
	gsd_list redispatch;
	uv_async_t redispatch_async;
	uint32_t offloads; /* calls running on the thread pool */
};

/* ---- nng side (runs on nng's threads) ---- */

static void worker_arm(gsd_rpc_worker *w)
{
	w->state = W_RECV;
	if (atomic_load(&w->rpc->closing))
		return;
	atomic_fetch_add(&w->rpc->idle, 1);
	nng_ctx_recv(w->ctx, w->aio);
}

static void worker_cb(void *arg)
{
	gsd_rpc_worker *w = arg;
	struct gsd_rpc *rpc = w->rpc;
	int rv = nng_aio_result(w->aio);
	if (w->state == W_SEND) {
		atomic_fetch_sub(&rpc->sending, 1);
		if (rv != 0) {
			/* The peer went away (or we are closing): the reply is dropped. */
			nng_msg_free(nng_aio_get_msg(w->aio));
			nng_aio_set_msg(w->aio, NULL);
		}
		worker_arm(w);
		return;
	}
	atomic_fetch_sub(&rpc->idle, 1);
	if (rv != 0) {
		if (rv != NNG_ECLOSED && rv != NNG_ECANCELED && !atomic_load(&rpc->closing))
			worker_arm(w);
		return;
	}
	nng_msg *msg = nng_aio_get_msg(w->aio);
	nng_aio_set_msg(w->aio, NULL);
	pthread_mutex_lock(&rpc->lock);
	if (rpc->ninbox == rpc->capinbox) {
		size_t ncap = rpc->capinbox ? rpc->capinbox * 2 : 64;
		inbox_item *n = realloc(rpc->inbox, ncap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&rpc->lock);
			nng_msg_free(msg);
			worker_arm(w);
			return;
		}
		rpc->inbox = n;
		rpc->capinbox = ncap;
	}
	rpc->inbox[rpc->ninbox++] = (inbox_item){w, msg};
	pthread_mutex_unlock(&rpc->lock);
	uv_async_send(&rpc->async);
}

/* Sends on a worker whose request has been answered; any thread may call it, but only the one
 * that owns the worker's answer. */
static void worker_send(gsd_rpc_worker *w, nng_msg *msg)
{
	if (!msg) {
		worker_arm(w);
		return;
	}
	w->state = W_SEND;
	atomic_fetch_add(&w->rpc->sending, 1);
	nng_aio_set_msg(w->aio, msg);
	nng_ctx_send(w->ctx, w->aio);
}

static int add_worker(struct gsd_rpc *rpc)
{
	if (rpc->nworkers == rpc->capworkers) {
		size_t ncap = rpc->capworkers ? rpc->capworkers * 2 : 32;
		gsd_rpc_worker **n = realloc(rpc->workers, ncap * sizeof(*n));
		if (!n)
			return -1;
		rpc->workers = n;
		rpc->capworkers = ncap;
	}
	gsd_rpc_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->rpc = rpc;
	int rv = nng_ctx_open(&w->ctx, rpc->sock);
	if (rv == 0)
		rv = nng_aio_alloc(&w->aio, worker_cb, w);
	if (rv != 0) {
		GSD_ERROR("rpc: cannot open an nng context: %s", nng_strerror(rv));
		free(w);
		return -1;
	}
	rpc->workers[rpc->nworkers++] = w;
	worker_arm(w);
	return 0;
}

/* ---- encoding ---- */

static nng_msg *encode_response(uint64_t id, Gpusched__V1__Response *resp)
{
	resp->id = id;
	size_t len = gpusched__v1__response__get_packed_size(resp);
	nng_msg *m;
	if (nng_msg_alloc(&m, len) != 0)
		return NULL;
	gpusched__v1__response__pack(resp, nng_msg_body(m));
	return m;
}

static uint64_t call_id(const gsd_call *c)
{
	return c->req ? c->req->id : 0;
}

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

static void call_free(gsd_call *c)
{
	gsd_waiter_cancel(&c->waiter);
	if (c->timer_used) {
		uv_timer_stop(&c->timer);
		c->timer.data = c;
		uv_close((uv_handle_t *)&c->timer, timer_closed);
	} else {
		call_free_now(c);
	}
}

void gsd_call_reply(gsd_call *c, Gpusched__V1__Response *resp)
{
	worker_send(c->worker, encode_response(call_id(c), resp));
	call_free(c);
}

void gsd_call_verror(gsd_call *c, int status, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	gsd_daemon *d = c->d;
	d->stats.errors++;
	const char *req = c->req ? gsd_request_name(c->req->body_case) : "undecodable";
	if (status != GSD_ST(TIMEOUT))
		gsd_audit_error(d->audit, c->tenant ? c->tenant->name : NULL, req, status, msg);
	GSD_DEBUG("request %s from %s: status %d: %s", req, c->tenant ? c->tenant->name : "-",
	          status, msg);
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

/* ---- answers sent by the audit writer once a record is durable ---- */

typedef struct audit_reply {
	gsd_rpc_worker *w;
	nng_msg *msg;
	uint64_t id;
	uint32_t remaining; /* records not yet acked (all acks come from the writer thread) */
	bool all_ok;
} audit_reply;

static void audit_reply_ack(void *arg, bool ok)
{
	audit_reply *ar = arg;
	ar->all_ok &= ok;
	if (--ar->remaining > 0)
		return;
	nng_msg *msg = ar->msg;
	if (!ar->all_ok) {
		nng_msg_free(msg);
		Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
		resp.status = GSD_ST(INTERNAL);
		resp.message = "an audit record could not be committed; the submission is not "
		               "acknowledged";
		msg = encode_response(ar->id, &resp);
	}
	worker_send(ar->w, msg);
	free(ar);
}

void gsd_call_reply_after_audit(gsd_call *c, Gpusched__V1__Response *resp,
                                const gsd_packet_rec *const *recs, size_t n)
{
	audit_reply *ar = malloc(sizeof(*ar));
	nng_msg *msg = encode_response(call_id(c), resp);
	if (!ar || !msg) {
		free(ar);
		nng_msg_free(msg);
		for (size_t i = 0; i < n; i++)
			gsd_audit_packet(c->d->audit, recs[i], NULL, NULL, NULL);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory encoding the answer");
		return;
	}
	*ar = (audit_reply){.w = c->worker,
	                    .msg = msg,
	                    .id = call_id(c),
	                    .remaining = (uint32_t)n,
	                    .all_ok = true};
	/* Each record acks: a batch may straddle transactions, and one of them may fail. */
	for (size_t i = 0; i < n; i++)
		gsd_audit_packet(c->d->audit, recs[i], NULL, audit_reply_ack, ar);
	call_free(c);
}

/* ---- deadlines and off-loop work ---- */

static void deadline_cb(uv_timer_t *t)
{
	gsd_call *c = t->data;
	c->on_timeout(c);
}

void gsd_call_set_timeout(gsd_call *c, uint32_t ms, void (*fn)(gsd_call *c))
{
	uv_timer_init(c->d->loop, &c->timer);
	c->timer.data = c;
	c->timer_used = true;
	c->on_timeout = fn;
	uv_timer_start(&c->timer, deadline_cb, ms, 0);
}

typedef struct offload {
	uv_work_t work;
	gsd_call *c;
	void (*fn)(gsd_call *c);
} offload;

static void offload_work(uv_work_t *w)
{
	offload *o = w->data;
	o->fn(o->c);
}

static void offload_done(uv_work_t *w, int status)
{
	(void)status;
	offload *o = w->data;
	gsd_call *c = o->c;
	/* Audit calls belong to the loop: an error answered off the loop is recorded here. */
	if (c->off_status != GSD_ST(OK)) {
		c->d->stats.errors++;
		gsd_audit_error(c->d->audit, c->tenant ? c->tenant->name : NULL,
		                gsd_request_name(c->req->body_case), c->off_status, c->off_message);
	}
	/* Sent from the loop, after the audit record: a client that reads the counters or the
	 * audit right after the answer finds its error there. */
	worker_send(c->worker, c->off_reply);
	c->d->rpc->offloads--;
	call_free(c);
	free(o);
}

bool gsd_call_offload(gsd_call *c, void (*work)(gsd_call *c))
{
	offload *o = malloc(sizeof(*o));
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
	c->off_reply = encode_response(call_id(c), resp);
}

/* ---- the loop side ---- */

static const char *const g_request_names[] = {
        [GPUSCHED__V1__REQUEST__BODY_INFO] = "info",
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE] = "device_create",
        [GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY] = "device_destroy",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE] = "context_create",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY] = "context_destroy",
        [GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY] = "context_set_priority",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_CREATE] = "allocation_create",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_DESTROY] = "allocation_destroy",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_QUERY] = "allocation_query",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PRIORITY] = "allocation_set_priority",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PREFERENCE] = "allocation_set_preference",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ] = "allocation_read",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE] = "allocation_write",
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT] = "submit",
        [GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH] = "submit_batch",
        [GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT] = "packet_wait",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE] = "sync_create",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY] = "sync_destroy",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_SIGNAL] = "sync_signal",
        [GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT] = "sync_wait",
        [GPUSCHED__V1__REQUEST__BODY_MAKE_RESIDENT] = "make_resident",
        [GPUSCHED__V1__REQUEST__BODY_EVICT] = "evict",
        [GPUSCHED__V1__REQUEST__BODY_TRANSFER] = "transfer",
        [GPUSCHED__V1__REQUEST__BODY_HISTORY] = "history",
        [GPUSCHED__V1__REQUEST__BODY_PACKET_EVENTS] = "packet_events",
        [GPUSCHED__V1__REQUEST__BODY_STATS] = "stats",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_CREATE] = "tenant_create",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_DESTROY] = "tenant_destroy",
        [GPUSCHED__V1__REQUEST__BODY_TENANT_LIST] = "tenant_list",
        [GPUSCHED__V1__REQUEST__BODY_ALLOCATION_LIST] = "allocation_list",
        [GPUSCHED__V1__REQUEST__BODY_MOVES] = "moves",
};

const char *gsd_request_name(int body_case)
{
	if (body_case <= 0 ||
	    (size_t)body_case >= sizeof(g_request_names) / sizeof(*g_request_names) ||
	    !g_request_names[body_case])
		return "empty";
	return g_request_names[body_case];
}

static void handle_message(gsd_daemon *d, gsd_rpc_worker *w, nng_msg *msg)
{
	struct gsd_rpc *rpc = d->rpc;
	d->stats.requests++;
	/* Keep a few contexts receiving while others hold deferred answers. */
	if (atomic_load(&rpc->idle) < 2 && rpc->nworkers < rpc->max_workers)
		add_worker(rpc);
	gsd_call *c = calloc(1, sizeof(*c));
	if (!c) {
		nng_msg_free(msg);
		worker_arm(w);
		return;
	}
	c->d = d;
	c->worker = w;
	c->started_ns = gsd_now_ns();
	gsd_waiter_init(&c->waiter, NULL);
	size_t len = nng_msg_len(msg);
	if (len > d->cfg.max_message) {
		nng_msg_free(msg);
		gsd_call_error(c, GSD_ST(TOO_LARGE),
		               "request of %zu bytes exceeds max_message %llu", len,
		               (unsigned long long)d->cfg.max_message);
		return;
	}
	c->req = gpusched__v1__request__unpack(NULL, len, nng_msg_body(msg));
	nng_msg_free(msg);
	if (!c->req) {
		gsd_call_error(c, GSD_ST(MALFORMED),
		               "request does not decode as gpusched.v1.Request");
		return;
	}
	if (d->stopping) {
		gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		return;
	}
	c->tenant = gsd_tenant_by_token(d, c->req->token);
	if (!c->tenant) {
		gsd_call_error(c, GSD_ST(UNAUTHENTICATED), "unknown tenant token");
		return;
	}
	if (c->tenant->banned) {
		gsd_call_error(c, GSD_ST(BANNED), "tenant %s is banned", c->tenant->name);
		return;
	}
	gsd_handle_request(d, c);
}

static void inbox_cb(uv_async_t *a)
{
	gsd_daemon *d = a->data;
	struct gsd_rpc *rpc = d->rpc;
	for (;;) {
		pthread_mutex_lock(&rpc->lock);
		size_t n = rpc->ninbox;
		inbox_item items[64];
		if (n > 64)
			n = 64;
		memcpy(items, rpc->inbox, n * sizeof(*items));
		memmove(rpc->inbox, rpc->inbox + n, (rpc->ninbox - n) * sizeof(*items));
		rpc->ninbox -= n;
		pthread_mutex_unlock(&rpc->lock);
		if (n == 0)
			return;
		for (size_t i = 0; i < n; i++)
			handle_message(d, items[i].w, items[i].msg);
	}
}

/* ---- parked calls ---- */

gsd_call *gsd_call_of_waiter(gsd_waiter *w)
{
	return GSD_CONTAINER_OF(w, gsd_call, waiter);
}

void gsd_call_wait(gsd_call *c, gsd_waitq *q, gsd_wake_fn wake)
{
	c->waiter.wake = wake;
	gsd_waitq_add(q, &c->waiter);
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

void gsd_call_retry_when(gsd_call *c, gsd_waitq *q)
{
	c->deferred++;
	gsd_call_wait(c, q, retry_wake);
}

void gsd_rpc_settle(gsd_daemon *d)
{
	if (!d->rpc)
		return;
	redispatch_drain(&d->rpc->redispatch_async);
	while (d->rpc->offloads > 0)
		uv_run(d->loop, UV_RUN_ONCE);
}

int gsd_rpc_start(gsd_daemon *d)
{
	struct gsd_rpc *rpc = calloc(1, sizeof(*rpc));
	if (!rpc)
		return -1;
	d->rpc = rpc;
	rpc->d = d;
	rpc->max_workers = 4096;
	pthread_mutex_init(&rpc->lock, NULL);
	uv_async_init(d->loop, &rpc->async, inbox_cb);
	rpc->async.data = d;
	gsd_list_init(&rpc->redispatch);
	uv_async_init(d->loop, &rpc->redispatch_async, redispatch_drain);
	rpc->redispatch_async.data = d;
	int rv = nng_rep0_open(&rpc->sock);
	if (rv != 0) {
		GSD_ERROR("rpc: cannot open the REP socket: %s", nng_strerror(rv));
		return -1;
	}
	rpc->sock_open = true;
	/* nng's default is unlimited. Messages between max_message and twice that are answered
	 * with STATUS_TOO_LARGE; beyond that nng drops the connection without reading them. */
	nng_socket_set_size(rpc->sock, NNG_OPT_RECVMAXSZ, (size_t)d->cfg.max_message * 2 + 65536);
	for (uint32_t i = 0; i < d->cfg.nlisten; i++) {
		gsd_ensure_ipc_dir(d->cfg.listen[i]);
		rv = nng_listen(rpc->sock, d->cfg.listen[i], &rpc->listeners[i], 0);
		if (rv != 0) {
			GSD_ERROR("rpc: cannot listen on %s: %s", d->cfg.listen[i],
			          nng_strerror(rv));
			return -1;
		}
		rpc->nlisteners++;
		GSD_INFO("listening on %s", d->cfg.listen[i]);
	}
	for (uint32_t i = 0; i < d->cfg.rpc_workers; i++)
		if (add_worker(rpc) != 0)
			return -1;
	return 0;
}

void gsd_rpc_free(gsd_daemon *d)
{
	struct gsd_rpc *rpc = d->rpc;
	if (!rpc)
		return;
	/* The audit writer sent its last answers while closing: give them a moment (bounded)
	 * to leave before the socket closes under them. */
	for (int i = 0; i < 500 && atomic_load(&rpc->sending) > 0; i++)
		nng_msleep(1);
	atomic_store(&rpc->closing, true);
	if (rpc->sock_open)
		nng_close(rpc->sock);
	for (size_t i = 0; i < rpc->nworkers; i++) {
		/* nng_aio_free waits for a running callback to return. */
		nng_aio_free(rpc->workers[i]->aio);
		free(rpc->workers[i]);
	}
	free(rpc->workers);
	for (size_t i = 0; i < rpc->ninbox; i++)
		nng_msg_free(rpc->inbox[i].msg);
	free(rpc->inbox);
	pthread_mutex_destroy(&rpc->lock);
	uv_close((uv_handle_t *)&rpc->async, NULL);
	uv_close((uv_handle_t *)&rpc->redispatch_async, NULL);
	/* The async handle's memory must outlive uv_close: the loop frees nothing, so keep rpc
	 * until the loop has run once more; gsd_daemon_destroy frees it. */
}

void gsd_rpc_release(gsd_daemon *d)
{
	free(d->rpc);
	d->rpc = NULL;
}
