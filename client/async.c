/*
 * Requests in flight: every request, blocking or not, travels on a slot (an nng context of the
 * client's REQ socket and an aio) from the start call to its one completion, delivered to a
 * callback, a completion queue or a blocking caller's waiter.
 *
 * A slot's life per request: start (the caller's thread) sends on the slot's context; the
 * aio's callback (nng's threads) posts the receive once the send is done, decodes the answer
 * and delivers the event; then the slot goes back on the client's free stack. Cancellation
 * sets the slot's cancel flag and cancels the aio; whoever starts an operation on the aio
 * looks at the flag again afterwards, so a cancellation that lands between the send and the
 * receive is not lost. Every path ends in finish(), once per request.
 *
 * A blocking call's slot takes the same steps on the caller's thread instead (slot_run, from
 * gsc_wait), with an aio of its own that has no callback: its completions wake the caller
 * directly rather than through nng's task threads (two thread hand-offs fewer per call).
 */
#include "ring.h"
#include "rpc.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

/* ev.kind of a blocking call of any request (gsc_call): the waiter takes the Response. */
#define GSC_KIND_CALL 0

struct gsc_slot {
	gs_client *c;
	nng_ctx ctx;
	nng_aio *aio;
	nng_aio *baio;         /* a blocking call's: no callback, waited for by slot_run */
	gsc_slot *prev, *next; /* the client's pending list, or its free stack (next) */
	/* The request it carries. */
	atomic_bool cancel;
	bool lost; /* cancelled because the connection dropped (under c->lock) */
	bool receiving;
	nng_time deadline;
	uint32_t timeout_ms;
	Gpusched__V1__Response__BodyCase want;
	gs_async_cb cb;
	gs_async_queue *q;
	gsc_waiter *w;
	Gpusched__V1__Response *resp; /* GSC_KIND_CALL with a waiter, status 0 */
	gs_async_event ev;
};

struct gs_async_queue {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	gs_ring ring;    /* of gs_async_event */
	size_t reserved; /* requests in flight towards it: room is kept for each */
	size_t refs;     /* the owner's (until destroy) and one per request in flight */
	bool destroyed;
	int efd; /* readable while count > 0 */
};

/* One request as the start calls describe it. */
typedef struct gsc_request {
	Gpusched__V1__Request__BodyCase req_case;
	void *body;
	Gpusched__V1__Response__BodyCase want;
	int kind;         /* gs_async_kind, or GSC_KIND_CALL */
	uint32_t wait_ms; /* the wait the daemon is asked for (added to the default deadline) */
	gs_submit_result *batch;
	size_t batch_count;
} gsc_request;

static void slot_run(gsc_slot *s);

/* The fields of a gsc_request for the request `name` (its body case and its answer's). */
#define REQUEST(name, b) .req_case = GSC_REQ(name), .body = (b), .want = GSC_RESP(name)

/* ---- completion queues ------------------------------------------------------------------ */

int gs_async_queue_create(gs_async_queue **out)
{
	pthread_condattr_t attr;
	gs_async_queue *q;

	if (!out)
		return GS_ERR_INVALID;
	*out = NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return GS_ERR_NOMEM;
	q->ring = GS_RING_INIT(gs_async_event);
	q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->efd < 0) {
		free(q);
		return GS_ERR_NOMEM;
	}
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cv, &attr);
	pthread_condattr_destroy(&attr);
	q->refs = 1;
	*out = q;
	return 0;
}

static void queue_free(gs_async_queue *q)
{
	close(q->efd);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	gs_ring_free(&q->ring);
	free(q);
}

/* Drops one reference, with q->mu held; frees the queue (and unlocks) at the last. */
static void queue_unref_locked(gs_async_queue *q)
{
	bool last = --q->refs == 0;

	pthread_mutex_unlock(&q->mu);
	if (last)
		queue_free(q);
}

void gs_async_queue_destroy(gs_async_queue *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	if (q->destroyed) { /* a second destroy: the owner's reference is gone already */
		pthread_mutex_unlock(&q->mu);
		return;
	}
	q->destroyed = true;
	q->ring.len = 0;
	queue_unref_locked(q);
}

int gs_async_queue_fd(const gs_async_queue *q)
{
	return q ? q->efd : -1;
}

/* A count read under the lock that guards it. */
static size_t locked_count(pthread_mutex_t *mu, const size_t *count)
{
	size_t n;

	pthread_mutex_lock(mu);
	n = *count;
	pthread_mutex_unlock(mu);
	return n;
}

size_t gs_async_queue_length(gs_async_queue *q)
{
	return q ? locked_count(&q->mu, &q->ring.len) : 0;
}

/* Keeps room for one more event: a completion never needs memory it might not get. */
static int queue_reserve(gs_async_queue *q)
{
	size_t need;
	int rv = 0;

	pthread_mutex_lock(&q->mu);
	need = q->ring.len + q->reserved + 1;
	if (q->destroyed)
		rv = GS_ERR_INVALID;
	else if (gs_ring_reserve(&q->ring, need) != 0)
		rv = GS_ERR_NOMEM;
	if (rv == 0) {
		q->reserved++;
		q->refs++;
	}
	pthread_mutex_unlock(&q->mu);
	return rv;
}

static void queue_unreserve(gs_async_queue *q)
{
	pthread_mutex_lock(&q->mu);
	q->reserved--;
	queue_unref_locked(q);
}

static void queue_push(gs_async_queue *q, const gs_async_event *ev)
{
	pthread_mutex_lock(&q->mu);
	q->reserved--;
	if (!q->destroyed) {
		/* Cannot fail: queue_reserve made room for it. */
		(void)gs_ring_push(&q->ring, ev);
		if (q->ring.len == 1) {
			uint64_t one = 1;
			ssize_t n = write(q->efd, &one, sizeof(one));
			(void)n; /* cannot fail: the counter is 0 here */
		}
		pthread_cond_broadcast(&q->cv);
	}
	queue_unref_locked(q);
}

int gs_async_poll(gs_async_queue *q, gs_async_event *events, size_t max, int timeout_ms)
{
	struct timespec deadline;
	size_t n;

	if (!q || !events || max == 0 || timeout_ms < -1)
		return GS_ERR_INVALID;
	if (timeout_ms > 0) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&q->mu);
	while (q->ring.len == 0 && timeout_ms != 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&q->cv, &q->mu);
		else if (pthread_cond_timedwait(&q->cv, &q->mu, &deadline) == ETIMEDOUT)
			break;
	}
	n = gs_ring_take(&q->ring, events, max < INT_MAX ? max : INT_MAX);
	if (n) {
		if (q->ring.len == 0) {
			uint64_t v;
			ssize_t r = read(q->efd, &v, sizeof(v));
			(void)r; /* the counter was 1: it was written when the ring left empty */
		}
	}
	pthread_mutex_unlock(&q->mu);
	return (int)n;
}

/* ---- waiters (blocking calls) ----------------------------------------------------------- */

void gsc_waiter_init(gsc_waiter *w)
{
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->done = false;
	w->resp = NULL;
	w->slot = NULL;
	memset(&w->ev, 0, sizeof(w->ev));
}

gsc_target gsc_blocking(gs_client *c, gsc_waiter *w)
{
	if (c)
		c->message[0] = '\0';
	gsc_waiter_init(w);
	return (gsc_target){.w = w};
}

static void waiter_deliver(gsc_waiter *w, const gs_async_event *ev, Gpusched__V1__Response *resp)
{
	pthread_mutex_lock(&w->mu);
	w->ev = *ev;
	w->resp = resp;
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

int gsc_wait(gs_client *c, gsc_waiter *w, int started)
{
	int rv;

	if (started == 0) {
		if (w->slot)
			slot_run(w->slot);
		/* Bounded: the request's deadline is on its aio. */
		pthread_mutex_lock(&w->mu);
		while (!w->done)
			pthread_cond_wait(&w->cv, &w->mu);
		pthread_mutex_unlock(&w->mu);
		if (c)
			snprintf(c->message, sizeof(c->message), "%s", w->ev.message);
		rv = w->ev.status;
	} else {
		rv = gsc_fail(c, started, "the request was not sent: %s", gs_strerror(started));
	}
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	return rv;
}

/* ---- slots ------------------------------------------------------------------------------ */

static void slot_cb(void *arg);

/*
 * The connection dropped (the daemon died or restarted): every request in flight fails with
 * GS_ERR_TRANSPORT, also one still waiting to be written. None is sent again on the next
 * connection, where a restarted daemon's handles may name other objects. nng reconnects by
 * itself; requests started from now on go out on the new connection.
 */
static void pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	gs_client *c = arg;

	(void)p;
	(void)ev;
	pthread_mutex_lock(&c->lock);
	for (gsc_slot *s = c->closing ? NULL : c->pending; s; s = s->next) {
		s->lost = true;
		atomic_store(&s->cancel, true);
		nng_aio_cancel(s->aio);
		nng_aio_cancel(s->baio);
	}
	pthread_mutex_unlock(&c->lock);
}

int gsc_async_init(gs_client *c)
{
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->drained, NULL);
	c->next_id = 1;
	return nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_removed, c);
}

/* A new slot, with c->lock held; NULL when nng or memory fails. */
static gsc_slot *slot_new(gs_client *c)
{
	gsc_slot *s;

	if (c->nslots == c->capslots) {
		size_t cap = c->capslots ? c->capslots * 2 : 16;
		gsc_slot **n = realloc(c->slots, cap * sizeof(*n));

		if (!n)
			return NULL;
		c->slots = n;
		c->capslots = cap;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->c = c;
	if (nng_ctx_open(&s->ctx, c->sock) != 0) {
		free(s);
		return NULL;
	}
	/* Never resend (see open_socket in rpc.c): a lost answer is a timeout, not a second
	 * submission. */
	if (nng_ctx_set_ms(s->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE) != 0 ||
	    nng_aio_alloc(&s->aio, slot_cb, s) != 0) {
		nng_ctx_close(s->ctx);
		free(s);
		return NULL;
	}
	if (nng_aio_alloc(&s->baio, NULL, NULL) != 0) {
		nng_aio_free(s->aio);
		nng_ctx_close(s->ctx);
		free(s);
		return NULL;
	}
	c->slots[c->nslots++] = s;
	return s;
}

static void pending_unlink(gs_client *c, gsc_slot *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		c->pending = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
}

/* Takes the slot back, with c->lock held. */
static void slot_release_locked(gs_client *c, gsc_slot *s)
{
	pending_unlink(c, s);
	s->next = c->free_slots;
	c->free_slots = s;
	if (--c->inflight == 0 && c->closing)
		pthread_cond_broadcast(&c->drained);
}

/* Delivers the slot's event (its one completion) and takes the slot back. */
static void finish(gsc_slot *s)
{
	gs_client *c = s->c;

	if (s->cb) {
		/* A callback is a completion once it has returned. */
		s->cb(&s->ev);
		pthread_mutex_lock(&c->lock);
		slot_release_locked(c, s);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* Queued (or handed to the blocking caller) and no longer in flight in one step, as
	 * gs_async_inflight sees it: c->lock, then the queue's or waiter's, the only order in
	 * which they are ever nested. */
	pthread_mutex_lock(&c->lock);
	if (s->q)
		queue_push(s->q, &s->ev);
	else
		waiter_deliver(s->w, &s->ev, s->resp);
	s->resp = NULL;
	slot_release_locked(c, s);
	pthread_mutex_unlock(&c->lock);
}

#define LOST_FMT                                                                                   \
	"the connection to %.300s was lost with the request in flight: the daemon may or may "     \
	"not have acted on it"

static void fail(gsc_slot *s, int rv)
{
	gs_client *c = s->c;
	gs_async_event *ev = &s->ev;
	bool closing, lost;

	pthread_mutex_lock(&c->lock);
	closing = c->closing;
	lost = s->lost;
	pthread_mutex_unlock(&c->lock);
	if (closing && (rv == NNG_ECANCELED || rv == NNG_ECONNRESET)) {
		rv = NNG_ECLOSED; /* gs_close ended it, connection and all */
	} else if (lost && rv == NNG_ECANCELED) {
		rv = NNG_ECONNRESET;
	}
	ev->status = gsc_nng_error(rv);
	switch (rv) {
	case NNG_ECANCELED:
	case NNG_ECLOSED:
		snprintf(ev->message, sizeof(ev->message), "%s",
		         closing ? "the client was closed with the request in flight"
		                 : "the request was cancelled");
		break;
	case NNG_ETIMEDOUT:
		snprintf(ev->message, sizeof(ev->message), "no answer from %.400s within %u ms",
		         c->url, s->timeout_ms);
		break;
	case NNG_ECONNRESET:
		ev->status = GS_ERR_TRANSPORT;
		snprintf(ev->message, sizeof(ev->message), LOST_FMT, c->url);
		break;
	default:
		snprintf(ev->message, sizeof(ev->message), "%s %.400s: %s",
		         s->receiving ? "receive from" : "send to", c->url, nng_strerror(rv));
		break;
	}
	finish(s);
}

static void set_error(gs_async_event *ev, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void set_error(gs_async_event *ev, int status, const char *fmt, ...)
{
	va_list ap;

	ev->status = status;
	va_start(ap, fmt);
	vsnprintf(ev->message, sizeof(ev->message), fmt, ap);
	va_end(ap);
}

static void copy_result(gs_submit_result *out, const Gpusched__V1__SubmitResponse *r)
{
	out->packet = r->packet;
	out->fence = r->fence;
	out->node = r->node;
	out->state = (gs_packet_state)r->state;
	out->completed_fence = r->completed_fence;
}

/* Fills the event from a successful answer of the expected body. */
static void extract(gsc_slot *s, const Gpusched__V1__Response *resp)
{
	gs_async_event *ev = &s->ev;

	switch (ev->kind) {
	case GS_ASYNC_SUBMIT:
		copy_result(&ev->submit, resp->submit);
		break;
	case GS_ASYNC_SUBMIT_BATCH:
		if (resp->submit_batch->n_packets != ev->batch_count) {
			set_error(ev, GS_ERR_PROTOCOL, "batch of %zu packets answered with %zu",
			          ev->batch_count, resp->submit_batch->n_packets);
			break;
		}
		for (size_t i = 0; ev->batch && i < ev->batch_count; i++)
			copy_result(&ev->batch[i], resp->submit_batch->packets[i]);
		break;
	case GS_ASYNC_PACKET_WAIT:
		ev->state = (gs_packet_state)resp->packet_wait->state;
		ev->fence = resp->packet_wait->fence;
		ev->completed_fence = resp->packet_wait->completed_fence;
		break;
	case GS_ASYNC_SYNC_WAIT:
		ev->value = resp->sync_wait->value;
		break;
	default:
		break;
	}
}

/* Decodes and checks the answer (the checks every call has always made). */
static void decode(gsc_slot *s, nng_msg *m)
{
	gs_async_event *ev = &s->ev;
	Gpusched__V1__Response *resp;

	resp = gpusched__v1__response__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	if (!resp) {
		set_error(ev, GS_ERR_PROTOCOL, "the response does not decode");
		return;
	}
	snprintf(ev->message, sizeof(ev->message), "%s", resp->message ? resp->message : "");
	/* id 0 is the daemon's answer to bytes it could not decode: its status stands. */
	if (resp->id != ev->id && !(resp->id == 0 && resp->status != 0)) {
		set_error(ev, GS_ERR_PROTOCOL, "response id %llu answers no request (sent %llu)",
		          (unsigned long long)resp->id, (unsigned long long)ev->id);
	} else if ((int)resp->status < 0) {
		set_error(ev, GS_ERR_PROTOCOL, "negative status %d", (int)resp->status);
	} else if (resp->status != 0) {
		ev->status = (int)resp->status;
		/* The daemon answers a faulted packet with its status. */
		if (ev->kind == GS_ASYNC_PACKET_WAIT && ev->status == GS_STATUS_FAULTED)
			ev->state = GS_PACKET_FAULTED;
		/* A Submit that waited for its end says which packet faulted. */
		if (ev->kind == GS_ASYNC_SUBMIT && ev->status == GS_STATUS_FAULTED &&
		    resp->body_case == GPUSCHED__V1__RESPONSE__BODY_SUBMIT)
			copy_result(&ev->submit, resp->submit);
	} else if (s->want != GSC_NO_BODY && resp->body_case != s->want) {
		set_error(ev, GS_ERR_PROTOCOL, "response body %d where %d was expected",
		          (int)resp->body_case, (int)s->want);
	} else {
		extract(s, resp);
	}
	if (ev->status == 0 && ev->kind == GSC_KIND_CALL && s->w) {
		s->resp = resp; /* the blocking caller takes it */
		return;
	}
	gpusched__v1__response__free_unpacked(resp, NULL);
}

static nng_duration remaining_ms(const gsc_slot *s)
{
	nng_time now = nng_clock();

	return s->deadline > now ? (nng_duration)(s->deadline - now) : 0;
}

/* The send of s's request on aio a ended with rv: starts the receive of its answer on a, or
 * delivers the failure. Returns whether the receive was started. */
static bool sent(gsc_slot *s, nng_aio *a, int rv)
{
	if (rv != 0) {
		/* A send that did not happen gives the message back. */
		nng_msg_free(nng_aio_get_msg(a));
		nng_aio_set_msg(a, NULL);
		fail(s, rv);
		return false;
	}
	if (atomic_load(&s->cancel)) {
		fail(s, NNG_ECANCELED);
		return false;
	}
	s->receiving = true;
	nng_aio_set_timeout(a, remaining_ms(s));
	nng_ctx_recv(s->ctx, a);
	/* A cancellation between the flag test above and the receive found no operation to
	 * cancel; this one does. */
	if (atomic_load(&s->cancel))
		nng_aio_cancel(a);
	return true;
}

/* The receive on aio a ended with rv: delivers the answer, or the failure. */
static void received(gsc_slot *s, nng_aio *a, int rv)
{
	nng_msg *m;

	if (rv != 0) {
		fail(s, rv);
		return;
	}
	m = nng_aio_get_msg(a);
	nng_aio_set_msg(a, NULL);
	decode(s, m);
	nng_msg_free(m);
	finish(s);
}

static void slot_cb(void *arg)
{
	gsc_slot *s = arg;
	int rv = nng_aio_result(s->aio);

	if (!s->receiving)
		sent(s, s->aio, rv);
	else
		received(s, s->aio, rv);
}

/* A blocking call, on its caller's thread: slot_cb's steps, each waited for. */
static void slot_run(gsc_slot *s)
{
	nng_aio *a = s->baio;

	nng_ctx_send(s->ctx, a);
	if (atomic_load(&s->cancel))
		nng_aio_cancel(a);
	nng_aio_wait(a);
	if (!sent(s, a, nng_aio_result(a)))
		return;
	nng_aio_wait(a);
	received(s, a, nng_aio_result(a));
}

/* Starts one request towards `to`. On error nothing is delivered. */
static int start(gs_client *c, const gsc_request *r, gsc_target to, uint64_t *id)
{
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	gs_async_queue *q = NULL;
	uint64_t timeout;
	gsc_slot *s;
	nng_msg *msg;
	size_t len;
	int rv = 0;

	if (!c || (!to.opts && !to.w))
		return GS_ERR_INVALID;
	if (to.opts) {
		if (!to.opts->queue == !to.opts->callback || to.opts->timeout_ms > INT32_MAX)
			return GS_ERR_INVALID;
		q = to.opts->queue;
	}
	timeout = to.opts && to.opts->timeout_ms ? to.opts->timeout_ms
	                                         : (uint64_t)c->timeout_ms + r->wait_ms;
	if (timeout > INT32_MAX)
		timeout = INT32_MAX;
	if (q) {
		rv = queue_reserve(q);
		if (rv != 0)
			return rv;
	}

	pthread_mutex_lock(&c->lock);
	if (c->closing) {
		rv = GS_ERR_CANCELLED;
	} else if (c->inflight >= GS_ASYNC_MAX_INFLIGHT) {
		rv = GS_ERR_BUSY;
	} else if (c->free_slots) {
		s = c->free_slots;
		c->free_slots = s->next;
	} else if (!(s = slot_new(c))) {
		rv = GS_ERR_NOMEM;
	}
	if (rv != 0) {
		pthread_mutex_unlock(&c->lock);
		if (q)
			queue_unreserve(q);
		return rv;
	}
	atomic_store(&s->cancel, false);
	s->lost = false;
	s->receiving = false;
	s->timeout_ms = (uint32_t)timeout;
	s->deadline = nng_clock() + timeout;
	s->want = r->want;
	s->cb = to.opts ? to.opts->callback : NULL;
	s->q = q;
	s->w = to.w;
	s->resp = NULL;
	s->ev.id = c->next_id++;
	s->ev.kind = (gs_async_kind)r->kind;
	s->ev.user = to.opts ? to.opts->user : NULL;
	s->ev.status = 0;
	s->ev.message[0] = '\0';
	s->ev.submit = (gs_submit_result){0};
	s->ev.batch = r->batch;
	s->ev.batch_count = r->batch_count;
	s->ev.state = GS_PACKET_UNKNOWN;
	s->ev.fence = 0;
	s->ev.value = 0;
	s->prev = NULL;
	s->next = c->pending;
	if (c->pending)
		c->pending->prev = s;
	c->pending = s;
	c->inflight++;
	req.id = s->ev.id;
	req.token = c->token;
	req.adapter = c->adapter;
	pthread_mutex_unlock(&c->lock);

	req.body_case = r->req_case;
	/* Every oneof member is a pointer to a message struct, and C11 (6.2.5p28) gives all
	 * such pointers one representation: storing through one member stores the pointer that
	 * protobuf-c reads for whichever case body_case names. */
	req.info = r->body;
	len = gpusched__v1__request__get_packed_size(&req);
	if (nng_msg_alloc(&msg, len) != 0) {
		pthread_mutex_lock(&c->lock);
		slot_release_locked(c, s);
		pthread_mutex_unlock(&c->lock);
		if (q)
			queue_unreserve(q);
		return GS_ERR_NOMEM;
	}
	/* Packed straight into the message body: a 64 MiB write is not copied twice. */
	gpusched__v1__request__pack(&req, nng_msg_body(msg));
	if (id)
		*id = req.id;
	if (to.w) {
		/* Sent by gsc_wait on this thread (slot_run). */
		nng_aio_set_msg(s->baio, msg);
		nng_aio_set_timeout(s->baio, (nng_duration)timeout);
		to.w->slot = s;
		return 0;
	}
	nng_aio_set_msg(s->aio, msg);
	nng_aio_set_timeout(s->aio, (nng_duration)timeout);
	nng_ctx_send(s->ctx, s->aio);
	/* A cancellation since the slot was listed found no operation to cancel. */
	if (atomic_load(&s->cancel))
		nng_aio_cancel(s->aio);
	return 0;
}

void gsc_async_close(gs_client *c)
{
	pthread_mutex_lock(&c->lock);
	c->closing = true; /* no new request starts, and the pipe callback does nothing */
	for (gsc_slot *s = c->pending; s; s = s->next) {
		atomic_store(&s->cancel, true);
		nng_aio_cancel(s->aio);
		nng_aio_cancel(s->baio);
	}
	while (c->inflight > 0)
		pthread_cond_wait(&c->drained, &c->lock);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < c->nslots; i++) {
		/* Waits for a callback still returning from its last delivery. */
		nng_aio_free(c->slots[i]->aio);
		nng_aio_free(c->slots[i]->baio);
		nng_ctx_close(c->slots[i]->ctx);
		free(c->slots[i]);
	}
	free(c->slots);
	/* Pipe callbacks have run by the time nng_close returns; only then the lock goes. */
	nng_close(c->sock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->drained);
}

/* ---- the requests ----------------------------------------------------------------------- */

int gsc_call(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body,
             Gpusched__V1__Response__BodyCase want, uint32_t wait_ms, Gpusched__V1__Response **out)
{
	gsc_request r = {.req_case = req_case,
	                 .body = body,
	                 .want = want,
	                 .kind = GSC_KIND_CALL,
	                 .wait_ms = wait_ms};
	gsc_waiter w;
	int rv;

	if (out)
		*out = NULL;
	rv = gsc_wait(c, &w, start(c, &r, gsc_blocking(c, &w), NULL));
	if (rv == 0 && out)
		*out = w.resp;
	else
		gsc_response_free(w.resp);
	return rv;
}

int gsc_submit_start(gs_client *c, const gs_submit_desc *desc, gsc_target to, uint64_t *id)
{
	gsc_submit_msg m;
	int rv;

	if (!desc)
		return GS_ERR_INVALID;
	/* A Submit that waits for the packet's end is given that long on top of the timeout. */
	gsc_request r = {REQUEST(SUBMIT, NULL), .kind = GS_ASYNC_SUBMIT, .wait_ms = desc->wait_ms};
	rv = gsc_submit_msg_build(&m, desc);
	if (rv != 0)
		return rv;
	r.body = &m.req;
	rv = start(c, &r, to, id);
	gsc_submit_msg_release(&m);
	return rv;
}

int gsc_submit_batch_start(gs_client *c, const gs_submit_desc *packets, size_t count,
                           gs_submit_result *out, gsc_target to, uint64_t *id)
{
	Gpusched__V1__SubmitBatchRequest body = GPUSCHED__V1__SUBMIT_BATCH_REQUEST__INIT;
	gsc_request r = {REQUEST(SUBMIT_BATCH, &body), .kind = GS_ASYNC_SUBMIT_BATCH, .batch = out,
	                 .batch_count = count};
	Gpusched__V1__SubmitRequest **reqs;
	gsc_submit_msg *msgs;
	size_t built = 0;
	int rv = 0;

	if ((count && !packets) || count > GS_MAX_BATCH_PACKETS)
		return GS_ERR_INVALID;
	msgs = calloc(count ? count : 1, sizeof(*msgs));
	reqs = calloc(count ? count : 1, sizeof(*reqs));
	if (!msgs || !reqs)
		rv = GS_ERR_NOMEM;
	for (; rv == 0 && built < count; built++) {
		rv = gsc_submit_msg_build(&msgs[built], &packets[built]);
		if (rv != 0)
			break;
		reqs[built] = &msgs[built].req;
	}
	if (rv == 0) {
		body.n_packets = count;
		body.packets = reqs;
		rv = start(c, &r, to, id);
	}
	for (size_t i = 0; i < built; i++)
		gsc_submit_msg_release(&msgs[i]);
	free(msgs);
	free(reqs);
	return rv;
}

int gsc_packet_wait_start(gs_client *c, uint64_t packet, uint32_t timeout_ms, gsc_target to,
                          uint64_t *id)
{
	Gpusched__V1__PacketWaitRequest body = GPUSCHED__V1__PACKET_WAIT_REQUEST__INIT;
	gsc_request r = {REQUEST(PACKET_WAIT, &body), .kind = GS_ASYNC_PACKET_WAIT,
	                 .wait_ms = timeout_ms};

	body.packet = packet;
	body.timeout_ms = timeout_ms;
	return start(c, &r, to, id);
}

int gsc_sync_wait_start(gs_client *c, uint64_t sync, uint64_t value, uint32_t timeout_ms,
                        gsc_target to, uint64_t *id)
{
	Gpusched__V1__SyncWaitRequest body = GPUSCHED__V1__SYNC_WAIT_REQUEST__INIT;
	gsc_request r = {REQUEST(SYNC_WAIT, &body), .kind = GS_ASYNC_SYNC_WAIT,
	                 .wait_ms = timeout_ms};

	body.sync = sync;
	body.value = value;
	body.timeout_ms = timeout_ms;
	return start(c, &r, to, id);
}

/* ---- the public calls ------------------------------------------------------------------- */

int gs_async_submit(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
                    const gs_async_opts *opts, uint64_t *id)
{
	gs_submit_desc desc = {.context = context, .dma = dma, .submit_flags = submit_flags};

	if (!c || !opts || !dma)
		return GS_ERR_INVALID;
	return gsc_submit_start(c, &desc, (gsc_target){.opts = opts}, id);
}

int gs_async_submit_desc(gs_client *c, const gs_submit_desc *desc, const gs_async_opts *opts,
                         uint64_t *id)
{
	if (!c || !opts || !desc || !desc->dma)
		return GS_ERR_INVALID;
	return gsc_submit_start(c, desc, (gsc_target){.opts = opts}, id);
}

int gs_async_submit_batch(gs_client *c, const gs_submit_desc *packets, size_t count,
                          gs_submit_result *out, const gs_async_opts *opts, uint64_t *id)
{
	if (!c || !opts || !packets || count == 0)
		return GS_ERR_INVALID;
	return gsc_submit_batch_start(c, packets, count, out, (gsc_target){.opts = opts}, id);
}

int gs_async_packet_wait(gs_client *c, uint64_t packet, uint32_t timeout_ms,
                         const gs_async_opts *opts, uint64_t *id)
{
	if (!c || !opts)
		return GS_ERR_INVALID;
	return gsc_packet_wait_start(c, packet, timeout_ms, (gsc_target){.opts = opts}, id);
}

int gs_async_sync_wait(gs_client *c, uint64_t sync, uint64_t value, uint32_t timeout_ms,
                       const gs_async_opts *opts, uint64_t *id)
{
	if (!c || !opts)
		return GS_ERR_INVALID;
	return gsc_sync_wait_start(c, sync, value, timeout_ms, (gsc_target){.opts = opts}, id);
}

int gs_async_cancel(gs_client *c, uint64_t id)
{
	int rv = GS_ERR_INVALID;

	if (!c || id == 0)
		return GS_ERR_INVALID;
	pthread_mutex_lock(&c->lock);
	for (gsc_slot *s = c->pending; s; s = s->next) {
		/* Blocking calls are not the caller's to cancel. */
		if (s->ev.id != id || s->w)
			continue;
		atomic_store(&s->cancel, true);
		nng_aio_cancel(s->aio);
		rv = 0;
		break;
	}
	pthread_mutex_unlock(&c->lock);
	return rv;
}

size_t gs_async_inflight(gs_client *c)
{
	return c ? locked_count(&c->lock, &c->inflight) : 0;
}
