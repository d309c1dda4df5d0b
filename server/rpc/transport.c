/*
 * The transport of requests: an nng REP socket served through many nng contexts ("workers"),
 * so requests are handled concurrently and one whose answer is deferred does not hold up
 * others. The loop takes each request from nng itself, when the socket's receive descriptor
 * says one is waiting, and answers without waking nng's task threads (below).
 *
 * Admission, on the loop, before a request costs anything: its size (a connection that has
 * not authenticated yet may send only small requests), its envelope (id, token, adapter) read
 * straight from the bytes without decoding the body, its token, and the tenant's limit on
 * requests in flight. Only then is the body decoded and the request dispatched.
 */
#include "rpc/internal.h"

#include "core/log.h"
#include "core/util.h"
#include "rpc/handlers.h"

#include "pbwire.h"

#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

/* ---- workers and the inbox ---- */

/* The worker's answer has left (or was dropped): the tenant's request is no longer in flight. */
static void worker_done(gsd_rpc_worker *w)
{
	if (w->tenant) {
		atomic_fetch_sub(&w->tenant->inflight, 1);
		atomic_fetch_sub(&w->tenant->inflight_bytes, w->bytes);
		w->tenant = NULL;
		w->bytes = 0;
	}
}

bool gsd_rpc_post(struct gsd_rpc *rpc, gsd_inbox_item item)
{
	pthread_mutex_lock(&rpc->lock);
	bool ok = gsd_inbox_push(&rpc->inbox, item);
	pthread_mutex_unlock(&rpc->lock);
	if (ok)
		gsd_wake_send(&rpc->async);
	return ok;
}

/* ---- receiving (the loop) ----
 *
 * Requests are taken on the loop, not handed over by nng's threads. The REP socket's receive
 * descriptor (NNG_OPT_RECVFD) is readable while some connection has a request that no
 * context is waiting for; the loop then takes requests with contexts whose aio has no
 * callback, which nng completes on the calling thread. A callback would wake one of nng's
 * task threads per request, which then woke the loop: two hand-offs where there is now one.
 *
 * nng reads a connection's next request only once its last one is taken, so taking them in
 * nng's order serves the connections in turn, as the inbox did (which now carries only
 * in-process calls and closed connections).
 */

/* Under park_lock: a connection's count in m moves by delta; the new count. */
static uintptr_t count_add(gsd_hmap *m, uint32_t pipe, int delta)
{
	uintptr_t n = (uintptr_t)gsd_hmap_get(m, pipe) + (uintptr_t)(intptr_t)delta;
	if (n == 0 || n > UINTPTR_MAX / 2)
		gsd_hmap_del(m, pipe);
	else if (gsd_hmap_put(m, pipe, (void *)n) != 0)
		return 0; /* memory: not counted */
	return n > UINTPTR_MAX / 2 ? 0 : n;
}

/* Under park_lock: w holds no request any more; worker_freed once the lock is released. */
static void worker_release_locked(gsd_rpc_worker *w)
{
	w->pipe = 0;
	w->park_next = w->rpc->free_workers;
	w->rpc->free_workers = w;
}

/* The loop stopped taking requests for want of a worker: tell it there is one. */
static void worker_freed(struct gsd_rpc *rpc)
{
	if (atomic_load(&rpc->recv_paused))
		gsd_wake_send(&rpc->async);
}

/* Any thread: w holds no request any more. */
static void worker_release(gsd_rpc_worker *w)
{
	struct gsd_rpc *rpc = w->rpc;
	pthread_mutex_lock(&rpc->park_lock);
	worker_release_locked(w);
	pthread_mutex_unlock(&rpc->park_lock);
	worker_freed(rpc);
}

static int add_worker(struct gsd_rpc *rpc);

/* The loop: a worker free to take a request (a new one while there are fewer than
 * max_workers), or NULL. */
static gsd_rpc_worker *worker_take(struct gsd_rpc *rpc)
{
	pthread_mutex_lock(&rpc->park_lock);
	gsd_rpc_worker *w = rpc->free_workers;
	if (w)
		rpc->free_workers = w->park_next;
	pthread_mutex_unlock(&rpc->park_lock);
	if (w || rpc->nworkers >= rpc->d->cfg.max_workers || add_worker(rpc) != 0)
		return w;
	return worker_take(rpc);
}

/* Takes a waiting request into w's context, if there is one. */
static nng_msg *worker_try_recv(gsd_rpc_worker *w)
{
	nng_ctx_recv(w->ctx, w->aio);
	if (!nng_aio_get_msg(w->aio)) {
		/* None was waiting (the aio is queued in the context), or the socket is closed:
		 * withdrawn. A request that came in the meantime completed it all the same. */
		nng_aio_cancel(w->aio);
	}
	nng_aio_wait(w->aio);
	nng_msg *msg = nng_aio_get_msg(w->aio);
	nng_aio_set_msg(w->aio, NULL);
	return msg;
}

static void handle_message(gsd_daemon *d, gsd_rpc_worker *w, nng_msg *msg);
static bool park_reap(struct gsd_rpc *rpc, unsigned *freed);
static void ra_arm(struct gsd_rpc *rpc);
static void ra_want_at_least(struct gsd_rpc *rpc, uint32_t n);

/* Requests taken per turn of the loop: the loop's other work (commits, timers, engines'
 * interrupts) runs between turns. */
#define RECV_TURN 64
/* Requests taken in one turn from which the loop counts as busy (read-ahead). */
#define RA_BUSY_TURN 8

static void recv_cb(uv_poll_t *h, int status, int events);

/* The loop: polls the receive descriptor exactly when nothing else takes the next request:
 * not while every worker holds one (recv_paused), not while the doorbell or read-ahead
 * receives wait for it. */
static void recv_poll_update(struct gsd_rpc *rpc)
{
	if (!rpc->recv_ready)
		return;
	bool want = !atomic_load(&rpc->closing) && !atomic_load(&rpc->recv_paused) &&
	            !rpc->bell_w && atomic_load(&rpc->ra_armed) == 0;
	if (want == rpc->recv_polling)
		return;
	rpc->recv_polling = want;
	if (want)
		uv_poll_start(&rpc->recv_poll, UV_READABLE, recv_cb);
	else
		uv_poll_stop(&rpc->recv_poll);
}

/*
 * The doorbell. nng leaves the receive descriptor readable when a connection closes with its
 * request not taken yet (it drops the request, not the signal), and clears it only when a
 * take empties its list of waiting connections. Polled, the descriptor would then wake the
 * loop for nothing, without end. So when the loop finds nothing on a wake-up, it stops polling
 * and waits for the next request with a context whose aio has a callback, as nng's threads
 * used to hand every request over. That take clears the descriptor if a request was already
 * waiting; otherwise the bell waits for the next request again, and polling resumes once
 * two requests come close together. Meanwhile each request costs the old hand-off, never a
 * loop that spins.
 */
static void bell_cb(void *arg)
{
	struct gsd_rpc *rpc = arg;
	pthread_mutex_lock(&rpc->park_lock);
	rpc->bell_msg = nng_aio_result(rpc->bell_aio) == 0 ? nng_aio_get_msg(rpc->bell_aio) : NULL;
	nng_aio_set_msg(rpc->bell_aio, NULL);
	rpc->bell_rang = true;
	pthread_mutex_unlock(&rpc->park_lock);
	gsd_wake_send(&rpc->async);
}

static void bell_arm(struct gsd_rpc *rpc, gsd_rpc_worker *w)
{
	rpc->bell_w = w;
	recv_poll_update(rpc);
	nng_ctx_recv(w->ctx, rpc->bell_aio);
}

/* The loop (inbox_cb): the bell rang; the descriptor is polled again. */
static void bell_answered(struct gsd_rpc *rpc)
{
	pthread_mutex_lock(&rpc->park_lock);
	bool rang = rpc->bell_rang;
	nng_msg *msg = rpc->bell_msg;
	rpc->bell_rang = false;
	rpc->bell_msg = NULL;
	pthread_mutex_unlock(&rpc->park_lock);
	if (!rang)
		return;
	gsd_rpc_worker *w = rpc->bell_w;
	rpc->bell_w = NULL;
	rpc->bells++;
	if (msg)
		handle_message(rpc->d, w, msg);
	else
		worker_release(w);
	/* Polled again only once a take clears the descriptor: a request already waiting (two
	 * came close together) does; otherwise the bell waits for the next one, as every request
	 * used to be received. */
	if (atomic_load(&rpc->closing) || atomic_load(&rpc->recv_paused))
		return;
	gsd_rpc_worker *next = worker_take(rpc);
	nng_msg *more = next ? worker_try_recv(next) : NULL;
	if (next && !more) {
		bell_arm(rpc, next);
		return;
	}
	recv_poll_update(rpc);
	if (more)
		handle_message(rpc->d, next, more);
}

static void recv_cb(uv_poll_t *h, int status, int events)
{
	struct gsd_rpc *rpc = h->data;
	(void)events;
	if (status < 0 || atomic_load(&rpc->closing) || rpc->bell_w)
		return;
	unsigned freed;
	if (atomic_load(&rpc->sending) > 0)
		park_reap(rpc, &freed); /* answered requests no longer count against admission */
	int i;
	for (i = 0; i < RECV_TURN; i++) {
		gsd_rpc_worker *w = worker_take(rpc);
		if (!w) {
			/* Every worker holds a request (max_workers): the next waits in nng until
			 * one is answered. */
			atomic_store(&rpc->recv_paused, true);
			recv_poll_update(rpc);
			return;
		}
		nng_msg *msg = worker_try_recv(w);
		if (!msg && i == 0) {
			bell_arm(rpc, w); /* woken for nothing: see "the doorbell" */
			return;
		}
		if (!msg) {
			worker_release(w);
			break;
		}
		handle_message(rpc->d, w, msg);
	}
	/* Busy: many connections had a request waiting at once. The loop taking each is then the
	 * bound (every take also re-arms the connection's read on the loop); contexts waiting
	 * with callbacks let nng's threads share that work, as with pipelining. */
	if (i >= RA_BUSY_TURN)
		ra_want_at_least(rpc, (uint32_t)i * 2);
	ra_arm(rpc);
}

/* The loop: takes requests again once a worker is free. */
static void recv_resume(struct gsd_rpc *rpc)
{
	if (!atomic_load(&rpc->recv_paused) || atomic_load(&rpc->closing))
		return;
	pthread_mutex_lock(&rpc->park_lock);
	bool any = rpc->free_workers != NULL;
	pthread_mutex_unlock(&rpc->park_lock);
	if (!any)
		return;
	atomic_store(&rpc->recv_paused, false);
	recv_poll_update(rpc);
}

/*
 * Read-ahead. nng reads a connection's next request only once its last one is taken or a
 * context waits for it. A client that pipelines (several requests in flight on one
 * connection) would have its requests taken one per wake-up of the loop, each with a commit
 * of its own. So while some connection pipelines (a request of it taken while another of it
 * is unanswered, within RA_WINDOW_NS), contexts wait with callbacks, as every context used to
 * (RA_WORKERS, or twice the most requests a connection was seen to have open, at most a
 * quarter of max_workers): nng hands them what it reads ahead, and the loop takes those from the
 * inbox in batches. They are not withdrawn when pipelining stops (that too would wake nng's
 * threads): the next requests use them up.
 */
#define RA_WORKERS   16
#define RA_WINDOW_NS 100000000u

/* The loop: read-ahead for the next RA_WINDOW_NS, with at least n contexts waiting. */
static void ra_want_at_least(struct gsd_rpc *rpc, uint32_t n)
{
	uint64_t now = gsd_now_ns();
	if (now - atomic_load(&rpc->pipelining_ns) > RA_WINDOW_NS)
		rpc->ra_want = RA_WORKERS;
	atomic_store(&rpc->pipelining_ns, now);
	uint32_t cap = rpc->d->cfg.max_workers / 4;
	if (n > rpc->ra_want)
		rpc->ra_want = n > cap ? cap : n;
}

static void ra_cb(void *arg)
{
	gsd_rpc_worker *w = arg;
	struct gsd_rpc *rpc = w->rpc;
	atomic_fetch_sub(&rpc->ra_armed, 1);
	nng_msg *msg = nng_aio_result(w->caio) == 0 ? nng_aio_get_msg(w->caio) : NULL;
	nng_aio_set_msg(w->caio, NULL);
	if (!msg) {
		worker_release(w);
		gsd_wake_send(&rpc->async); /* the loop may poll again */
		return;
	}
	atomic_fetch_add(&rpc->ra_taken, 1);
	gsd_inbox_item item = {.w = w, .msg = msg, .pipe = nng_pipe_id(nng_msg_get_pipe(msg))};
	if (!gsd_rpc_post(rpc, item)) {
		nng_msg_free(msg);
		worker_release(w);
		gsd_wake_send(&rpc->async); /* the loop may poll again */
	}
}

/* The loop, after a round of requests: read-ahead receives while pipelining, else the
 * descriptor. */
static void ra_arm(struct gsd_rpc *rpc)
{
	bool pipelining = gsd_now_ns() - atomic_load(&rpc->pipelining_ns) <= RA_WINDOW_NS;
	while (pipelining && !atomic_load(&rpc->closing) &&
	       atomic_load(&rpc->ra_armed) < rpc->ra_want) {
		gsd_rpc_worker *w = worker_take(rpc);
		if (!w)
			break;
		if (!w->caio && nng_aio_alloc(&w->caio, ra_cb, w) != 0) {
			worker_release(w);
			break;
		}
		atomic_fetch_add(&rpc->ra_armed, 1);
		nng_ctx_recv(w->ctx, w->caio);
	}
	recv_poll_update(rpc);
}

/*
 * ---- answers ----
 *
 * An answer goes out through an aio without a callback. nng completes such an aio on the
 * thread that finishes it instead of handing it to one of its task threads, and the REP
 * context sends at once when its connection has nothing else going out: the send is then
 * over when nng_ctx_send returns, and the worker is free again right away. A callback cost
 * a wake of a task thread per answer, on the CPU the client needs to read it.
 *
 * When the connection is still sending an earlier answer, nng queues this one, and the
 * worker is parked: its context may not take a request until the send is over (nng would
 * link it into a second send queue). nng 1.5 has no call that tells whether an aio is busy, so a
 * parked send is looked at: nng clears the aio's message when the answer has left (or its
 * connection is gone), and sets a result when it failed; both happen before the completion
 * ends, which nng_aio_wait then waits for (briefly). The loop looks before it sleeps and every
 * millisecond while any worker is parked.
 */

/*
 * Clients that do not read. Every answer a connection has not read holds a worker, and a client
 * that sends requests without reading would take every worker (max_workers) and stop the
 * daemon for everyone. So a connection is closed once it has more answers handed to nng and
 * not sent than twice what its tenant may have requests in flight (max_inflight_requests),
 * and while more than half of max_workers hold such answers, the connection with the most
 * (at least UNREAD_MIN, or any once three quarters hold them: a client could spread them
 * thin over many connections) is. Closing fails its answers, which frees their workers.
 */

/* Under park_lock: w's answer is handed to nng and has not left; true when a limit is
 * passed (the loop is to close a connection). */
static bool unsent_add(struct gsd_rpc *rpc, gsd_rpc_worker *w)
{
	unsigned unsent = atomic_fetch_add(&rpc->sending, 1) + 1;
	bool over = false;
	if (w->pipe && count_add(&rpc->unsent, w->pipe, 1) >
	                       2 * (uintptr_t)rpc->d->cfg.max_inflight_requests) {
		rpc->unsent_over = w->pipe;
		over = true;
	}
	if (unsent > rpc->d->cfg.max_workers / 2) {
		over |= !rpc->unsent_all_over;
		rpc->unsent_all_over = true;
	}
	/* Past three quarters the loop looks at once, even with a walk put off (close_unread). */
	over |= unsent == rpc->d->cfg.max_workers / 4 * 3 + 1;
	return over;
}

/* Under park_lock: w's answer has left, or failed (before w can be taken and send again). */
static void unsent_done_locked(gsd_rpc_worker *w)
{
	if (w->pipe)
		count_add(&w->rpc->unsent, w->pipe, -1);
	atomic_fetch_sub(&w->rpc->sending, 1);
}

/* Any thread: w's answer has left, or failed. */
static void unsent_done(gsd_rpc_worker *w)
{
	pthread_mutex_lock(&w->rpc->park_lock);
	unsent_done_locked(w);
	pthread_mutex_unlock(&w->rpc->park_lock);
}

/* Any thread: w's answer waits behind its connection's earlier ones. */
static void park(gsd_rpc_worker *w)
{
	struct gsd_rpc *rpc = w->rpc;
	atomic_fetch_add(&rpc->parks, 1);
	pthread_mutex_lock(&rpc->park_lock);
	/* The loop may be about to sleep without a reason to look (a commit of its own parks
	 * answers too): the first parked worker wakes it. */
	bool wake = rpc->parked_workers == NULL;
	w->park_next = rpc->parked_workers;
	rpc->parked_workers = w;
	wake |= unsent_add(rpc, w);
	pthread_mutex_unlock(&rpc->park_lock);
	if (wake)
		gsd_wake_send(&rpc->async);
}

static void close_for_unread(struct gsd_rpc *rpc, uint32_t pipe, uintptr_t n)
{
	/* Its answers count until they fail: a connection closed a moment ago is not again. */
	for (size_t i = 0; i < GSD_UNREAD_RING; i++)
		if (rpc->unread_ring[i] == pipe)
			return;
	rpc->unread_ring[rpc->unread_next++ % GSD_UNREAD_RING] = pipe;
	nng_pipe p = NNG_PIPE_INITIALIZER;
	p.id = pipe;
	nng_pipe_close(p);
	rpc->unread_closed++;
	char text[200];
	snprintf(text, sizeof text,
	         "closed connection %u: %lu answers it has not read (max_inflight_requests %u, "
	         "max_workers %u)",
	         pipe, (unsigned long)n, rpc->d->cfg.max_inflight_requests,
	         rpc->d->cfg.max_workers);
	uint64_t now = gsd_now_ns();
	if (now - rpc->unread_warned_ns >= 1000000000u) {
		rpc->unread_warned_ns = now; /* at most a line a second */
		GSD_WARN("rpc: %s; %llu so far", text, (unsigned long long)rpc->unread_closed);
	}
	gsd_audit_note(rpc->d->audit, "-", "connection_closed", text);
}

/* The connection with most unread answers is closed for the total only past this many. */
#define UNREAD_MIN 32
/* While over half of max_workers hold unread answers, the connections are walked for the
 * largest at most this often (each walk holds park_lock, which every answer takes, over as
 * many entries as there are connections with answers out), except once over three quarters. */
#define UNREAD_WALK_NS 5000000ull

struct most_unsent {
	uint32_t pipe;
	uintptr_t n;
};

static void most_of(uint64_t key, void *value, void *arg)
{
	struct most_unsent *m = arg;
	if ((uintptr_t)value > m->n) {
		m->n = (uintptr_t)value;
		m->pipe = (uint32_t)key;
	}
}

static void park_timer_cb(uv_timer_t *t);

/* The loop: closes the connections found past their limits. */
static void close_unread(struct gsd_rpc *rpc)
{
	if (!rpc->d->audit || atomic_load(&rpc->closing))
		return; /* stopping: every connection closes anyway */
	pthread_mutex_lock(&rpc->park_lock);
	uint32_t over = rpc->unsent_over, biggest = 0;
	uintptr_t n_over = over ? (uintptr_t)gsd_hmap_get(&rpc->unsent, over) : 0, most = 0;
	rpc->unsent_over = 0;
	unsigned sending = atomic_load(&rpc->sending);
	uint64_t now = rpc->unsent_all_over ? gsd_now_ns() : 0;
	bool put_off = rpc->unsent_all_over && now - rpc->unread_walked_ns < UNREAD_WALK_NS &&
	               sending <= rpc->d->cfg.max_workers / 4 * 3;
	if (rpc->unsent_all_over && !put_off) {
		rpc->unsent_all_over = false;
		rpc->unread_walked_ns = now;
		struct most_unsent m = {0, 0};
		if (sending > rpc->d->cfg.max_workers / 2)
			gsd_hmap_each(&rpc->unsent, most_of, &m);
		biggest = m.pipe;
		most = m.n;
	}
	pthread_mutex_unlock(&rpc->park_lock);
	/* A walk put off stays due (the flag stays set, and the answers that follow no longer
	 * wake the loop for it): the park timer comes back for it when the 5 ms are over, even
	 * with no worker parked (it stops itself after one look then). */
	if (put_off && rpc->park_ready && !uv_is_active((uv_handle_t *)&rpc->park_timer)) {
		uint64_t left_ms = (UNREAD_WALK_NS - (now - rpc->unread_walked_ns)) / 1000000 + 1;
		uv_timer_start(&rpc->park_timer, park_timer_cb, left_ms, 1);
	}
	if (over && n_over > 2 * (uintptr_t)rpc->d->cfg.max_inflight_requests)
		close_for_unread(rpc, over, n_over);
	if (biggest && biggest != over &&
	    (most >= UNREAD_MIN || atomic_load(&rpc->sending) > rpc->d->cfg.max_workers / 4 * 3))
		close_for_unread(rpc, biggest, most);
}

/* Whether w's send is over; its message freed if it failed. */
static bool send_over(gsd_rpc_worker *w)
{
	if (nng_aio_get_msg(w->saio) && nng_aio_result(w->saio) == 0)
		return false; /* queued behind the connection's previous answer */
	nng_aio_wait(w->saio);
	nng_msg *left = nng_aio_get_msg(w->saio);
	if (left) {
		nng_msg_free(left);
		nng_aio_set_msg(w->saio, NULL);
	}
	return true;
}

/* On the loop: the parked workers whose answer has gone are free again. True when some are
 * still parked; *freed counts those that are not. */
static bool park_reap(struct gsd_rpc *rpc, unsigned *freed)
{
	pthread_mutex_lock(&rpc->park_lock);
	gsd_rpc_worker *list = rpc->parked_workers;
	rpc->parked_workers = NULL;
	pthread_mutex_unlock(&rpc->park_lock);
	gsd_rpc_worker *kept = NULL, *kept_tail = NULL;
	*freed = 0;
	while (list) {
		gsd_rpc_worker *w = list;
		list = w->park_next;
		if (!send_over(w)) {
			w->park_next = NULL;
			if (kept_tail)
				kept_tail->park_next = w;
			else
				kept = w;
			kept_tail = w;
			continue;
		}
		unsent_done(w);
		worker_done(w);
		worker_release(w);
		++*freed;
	}
	close_unread(rpc);
	if (!kept)
		return false;
	pthread_mutex_lock(&rpc->park_lock);
	kept_tail->park_next = rpc->parked_workers;
	rpc->parked_workers = kept;
	pthread_mutex_unlock(&rpc->park_lock);
	return true;
}

/* How often an idle loop looks at parked workers: every millisecond while answers leave,
 * backing off to PARK_POLL_MAX_MS while none does (a client that never reads its answers
 * keeps them parked; its tenant's max_inflight_requests bounds how many). */
#define PARK_POLL_MAX_MS 64

static void park_timer_cb(uv_timer_t *t)
{
	struct gsd_rpc *rpc = t->data;
	unsigned freed;
	if (!park_reap(rpc, &freed)) {
		uv_timer_stop(t);
		return;
	}
	uint64_t next = freed ? 1 : uv_timer_get_repeat(t) * 2;
	if (next > PARK_POLL_MAX_MS)
		next = PARK_POLL_MAX_MS;
	if (next != uv_timer_get_repeat(t))
		uv_timer_start(t, park_timer_cb, next, next);
}

/* Before the loop sleeps. */
static void park_prepare_cb(uv_prepare_t *h)
{
	struct gsd_rpc *rpc = h->data;
	unsigned freed;
	recv_resume(rpc);
	if (atomic_load(&rpc->sending) == 0 || !park_reap(rpc, &freed))
		return;
	if (freed || !uv_is_active((uv_handle_t *)&rpc->park_timer))
		uv_timer_start(&rpc->park_timer, park_timer_cb, 1, 1);
}

/* nng's thread: an answer sent with a callback (while pipelining) has left, or failed. */
static void sent_cb(void *arg)
{
	gsd_rpc_worker *w = arg;
	struct gsd_rpc *rpc = w->rpc;
	if (nng_aio_result(w->scaio) != 0) {
		nng_msg_free(nng_aio_get_msg(w->scaio));
		nng_aio_set_msg(w->scaio, NULL);
	}
	/* unsent_done, worker_done and worker_release under one hold of park_lock. The tenant
	 * is let go under it too: a socket whose close was abandoned (gsd_rpc_free) clears the
	 * workers' tenants under it before the daemon frees them, and nng may still call this
	 * afterwards. */
	pthread_mutex_lock(&rpc->park_lock);
	unsent_done_locked(w);
	worker_done(w);
	worker_release_locked(w);
	pthread_mutex_unlock(&rpc->park_lock);
	worker_freed(rpc);
}

/* Any thread (the loop, or the audit writer with the answers its commit waited for). */
void gsd_rpc_worker_send(gsd_rpc_worker *w, nng_msg *msg)
{
	if (w->inject) {
		if (msg)
			w->inject(w->inject_arg, nng_msg_body(msg), nng_msg_len(msg));
		nng_msg_free(msg);
		worker_done(w);
		free(w);
		return;
	}
	struct gsd_rpc *rpc = w->rpc;
	/* Pipelining, and an earlier answer of its connection already queued (parked, or sent
	 * with a callback, and not over): this one waits behind it, and a callback on nng's
	 * thread ends it sooner than the loop looking at it. Any other answer goes without one:
	 * it leaves at once when the connection is idle, and parks in the rarer case that nng is
	 * still writing one that completed inline. A callback for every answer woke one of nng's
	 * threads for each, which at 8 clients took 30% of the loop's time in futex wake-ups
	 * while read-ahead was on. */
	bool may_call_back = msg && w->pipe &&
	                     gsd_now_ns() - atomic_load(&rpc->pipelining_ns) <= RA_WINDOW_NS &&
	                     (w->scaio || nng_aio_alloc(&w->scaio, sent_cb, w) == 0);
	/* Answered: no longer open, before the client can see the answer and send again; and
	 * counted as unsent in the same hold of the lock when it goes with a callback. */
	bool behind = false, over = false;
	if (w->pipe) {
		pthread_mutex_lock(&rpc->park_lock);
		count_add(&rpc->open, w->pipe, -1);
		behind = gsd_hmap_get(&rpc->unsent, w->pipe) != NULL;
		if (may_call_back && behind)
			over = unsent_add(rpc, w);
		pthread_mutex_unlock(&rpc->park_lock);
	}
	if (may_call_back && behind) {
		if (over)
			gsd_wake_send(&rpc->async);
		nng_aio_set_msg(w->scaio, msg);
		nng_ctx_send(w->ctx, w->scaio);
		return;
	}
	if (msg) {
		nng_aio_set_msg(w->saio, msg);
		nng_ctx_send(w->ctx, w->saio);
		if (!send_over(w)) {
			park(w);
			return;
		}
	}
	worker_done(w);
	worker_release(w);
}

static int add_worker(struct gsd_rpc *rpc)
{
	gsd_rpc_worker **n =
	        gsd_grow(rpc->workers, &rpc->capworkers, rpc->nworkers + 1, sizeof(*n), 32);
	if (!n)
		return -1;
	rpc->workers = n;
	gsd_rpc_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->rpc = rpc;
	int rv = nng_ctx_open(&w->ctx, rpc->sock);
	if (rv == 0)
		rv = nng_aio_alloc(&w->aio, NULL, NULL);
	if (rv == 0)
		rv = nng_aio_alloc(&w->saio, NULL, NULL);
	if (rv != 0) {
		GSD_ERROR("rpc: cannot open an nng context: %s", nng_strerror(rv));
		if (nng_ctx_id(w->ctx) > 0)
			nng_ctx_close(w->ctx);
		nng_aio_free(w->aio);
		free(w);
		return -1;
	}
	rpc->workers[rpc->nworkers++] = w;
	worker_release(w);
	return 0;
}

nng_msg *gsd_rpc_encode(uint64_t id, Gpusched__V1__Response *resp)
{
	resp->id = id;
	size_t len = gpusched__v1__response__get_packed_size(resp);
	nng_msg *m;
	if (nng_msg_alloc(&m, len) != 0)
		return NULL;
	gpusched__v1__response__pack(resp, nng_msg_body(m));
	return m;
}

/* ---- the envelope, read without decoding the body ---- */

typedef struct envelope {
	uint64_t id;
	uint64_t guest; /* Request.guest (field 4) */
	char token[128];
	bool token_too_long;
} envelope;

/*
 * Reads Request.id (field 1), Request.token (field 2) and Request.guest (field 4) from the
 * protobuf bytes, skipping every other field without copying it, so that an unauthenticated
 * request costs one pass over its bytes and nothing else. False when the bytes are not a
 * protobuf message. Field number 0 is not valid protobuf, but protobuf-c skips it like an
 * unknown field: the scan agrees with the decoder on what decodes.
 */
static bool read_envelope(const uint8_t *buf, size_t len, envelope *e)
{
	const uint8_t *p = buf, *end = buf + len;
	memset(e, 0, sizeof(*e));
	while (p < end) {
		gs_pb_field f;
		if (!gs_pb_field_next(&p, end, &f))
			return false;
		if (f.wire == GS_PB_VARINT && f.number == 1)
			e->id = f.value;
		else if (f.wire == GS_PB_VARINT && f.number == 4)
			e->guest = f.value;
		else if (f.wire == GS_PB_LEN && f.number == 2) {
			e->token_too_long = f.value >= sizeof(e->token);
			if (!e->token_too_long) {
				memcpy(e->token, f.data, f.value);
				e->token[f.value] = '\0';
			}
		}
	}
	return true;
}

/* ---- limits that bind before decoding ---- */

/*
 * The decoder makes a structure for every element of a repeated field, so a request's size
 * alone does not bound its cost: 8 MiB of empty SubmitBatch entries are four million packets
 * to decode (1.4 s of the loop and 750 MiB once). These limits are counted in place, on the
 * encoded bytes, before anything is decoded; the handlers check the same again on the
 * decoded request.
 */
#define BODY_FIELDS_MAX 65536u /* fields of a request body, whatever it is */

/* Request fields (proto/gpusched.proto). */
enum { REQ_SUBMIT = 23, REQ_SUBMIT_BATCH = 24 };
/* SubmitRequest fields. */
enum { SUB_DMA = 2, SUB_ALLOCATIONS = 3, SUB_PATCHES = 4, SUB_WAITS = 7 };
/* SubmitBatchRequest fields. */
enum { BATCH_PACKETS = 1 };

/* One SubmitRequest's lists against the daemon's limits. */
static bool submit_within(gsd_daemon *d, gsd_call *c, const uint8_t *p, const uint8_t *end)
{
	uint64_t allocs = 0, patches = 0, waits = 0;
	while (p < end) {
		gs_pb_field f;
		if (!gs_pb_field_next(&p, end, &f))
			return true; /* the decoder says MALFORMED */
		if (f.wire != GS_PB_LEN)
			continue;
		if (f.number == SUB_DMA && f.value > d->cfg.max_dma_buffer) {
			gsd_call_error(c, GSD_ST(LIST_TOO_LARGE),
			               "DMA buffer of %llu bytes exceeds %u",
			               (unsigned long long)f.value, d->cfg.max_dma_buffer);
			return false;
		}
		allocs += f.number == SUB_ALLOCATIONS;
		patches += f.number == SUB_PATCHES;
		waits += f.number == SUB_WAITS;
		if (allocs > d->cfg.max_allocation_list || patches > d->cfg.max_patch_list ||
		    waits > 64) {
			gsd_call_error(
			        c, GSD_ST(LIST_TOO_LARGE), "a packet's %s list is longer than %u",
			        allocs > d->cfg.max_allocation_list ? "allocation"
			        : patches > d->cfg.max_patch_list   ? "patch location"
			                                            : "GPU wait",
			        allocs > d->cfg.max_allocation_list ? d->cfg.max_allocation_list
			        : patches > d->cfg.max_patch_list   ? d->cfg.max_patch_list
			                                            : 64u);
			return false;
		}
	}
	return true;
}

/* The request body's field count, a batch's packets and each packet's lists, in place:
 * false when a limit is passed (the call answered). */
static bool within_limits(gsd_daemon *d, gsd_call *c, const uint8_t *buf, size_t len)
{
	const uint8_t *p = buf, *end = buf + len;
	while (p < end) {
		gs_pb_field f;
		if (!gs_pb_field_next(&p, end, &f))
			return true; /* the decoder says MALFORMED */
		if (f.wire != GS_PB_LEN || f.number < 10)
			continue; /* the envelope's own fields */
		const uint8_t *q = f.data, *qend = f.data + f.value;
		if (f.number == REQ_SUBMIT) {
			if (!submit_within(d, c, q, qend))
				return false;
			continue;
		}
		uint64_t fields = 0, packets = 0;
		while (q < qend) {
			gs_pb_field g;
			if (!gs_pb_field_next(&q, qend, &g))
				break;
			if (++fields > BODY_FIELDS_MAX) {
				gsd_call_error(c, GSD_ST(TOO_LARGE),
				               "a request body of more than %u fields",
				               BODY_FIELDS_MAX);
				return false;
			}
			if (f.number != REQ_SUBMIT_BATCH || g.number != BATCH_PACKETS ||
			    g.wire != GS_PB_LEN)
				continue;
			if (++packets > d->cfg.max_batch) {
				gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
				               "a batch holds 1..%u packets (got more)",
				               d->cfg.max_batch);
				return false;
			}
			if (!submit_within(d, c, g.data, g.data + g.value))
				return false;
		}
	}
	return true;
}

/* ---- admission and dispatch (the loop) ---- */

static gsd_call *call_new(gsd_daemon *d, gsd_rpc_worker *w, uint32_t pipe)
{
	gsd_call *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->d = d;
	c->worker = w;
	c->pipe = pipe;
	c->started_ns = gsd_now_ns();
	gsd_waiter_init(&c->waiter, NULL);
	gsd_list_init(&c->conn_link);
	return c;
}

/*
 * The tenant a token names. A connection remembers the tenant of its last token, by the
 * token's digest under the daemon's random key (compared in constant time), so a client that
 * sends the same token on every request pays the lookup over every tenant's salted hash once.
 */
static gsd_tenant *conn_tenant(gsd_daemon *d, gsd_conn *conn, const char *token)
{
	if (!conn)
		return gsd_tenant_by_token(d, token);
	uint8_t dg[sizeof conn->token_digest];
	crypto_generichash(dg, sizeof dg, (const unsigned char *)token, strlen(token),
	                   d->rpc->token_key, sizeof d->rpc->token_key);
	if (conn->tenant && !conn->tenant->removed &&
	    sodium_memcmp(dg, conn->token_digest, sizeof dg) == 0)
		return conn->tenant;
	gsd_tenant *t = gsd_tenant_by_token(d, token);
	conn->tenant = t;
	memcpy(conn->token_digest, dg, sizeof dg);
	return t;
}

/* A virtual machine's requests are no larger than its max_message (the paravirtual path's
 * limit); only a VM names a guest process (checked once the request decodes). */
static bool admit_guest(gsd_daemon *d, gsd_call *c, const gsd_tenant *t, const envelope *e,
                        size_t len)
{
	uint64_t max = gsd_tenant_max_message(d, t);
	if (len > max) {
		gsd_call_error(c, GSD_ST(TOO_LARGE),
		               "request of %zu bytes exceeds tenant %s's max_message %llu", len,
		               t->conf.name, (unsigned long long)max);
		return false;
	}
	c->guest = e->guest;
	return true;
}

/* Is a token of tenant t good on the connection's listener? Listeners with "tenants" admit
 * only those (a connection whose listener cannot be told is refused while any listener has
 * them). In-process calls have no listener. */
static bool listener_admits(struct gsd_rpc *rpc, uint32_t pipe, gsd_conn *conn, const gsd_tenant *t)
{
	if (!rpc->listeners_bound || pipe == 0)
		return true;
	if (!conn)
		return false; /* its connection closed already */
	if (conn->listener == -2) {
		nng_pipe p = NNG_PIPE_INITIALIZER;
		p.id = conn->pipe;
		int id = nng_listener_id(nng_pipe_listener(p));
		conn->listener = -1;
		for (uint32_t i = 0; i < rpc->nlisteners; i++)
			if (id > 0 && id == nng_listener_id(rpc->listeners[i]))
				conn->listener = (int)i;
	}
	if (conn->listener < 0)
		return false;
	const char *names = rpc->d->cfg.listen_tenants[conn->listener];
	if (!names[0])
		return true;
	size_t n = strlen(t->conf.name);
	for (const char *p = names; p; p = strchr(p, ',')) {
		p += *p == ',';
		if (strncmp(p, t->conf.name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return true;
	}
	return false;
}

/* Checks everything that needs no decoding; true when the request may be decoded (c->tenant
 * set and counted in flight), false when it was answered. */
static bool admit(gsd_daemon *d, gsd_call *c, gsd_conn *conn, const uint8_t *buf, size_t len)
{
	if (len > d->cfg.max_message) {
		gsd_call_error(c, GSD_ST(TOO_LARGE),
		               "request of %zu bytes exceeds max_message %llu", len,
		               (unsigned long long)d->cfg.max_message);
		return false;
	}
	if (conn && !conn->authenticated && len > d->cfg.unauthenticated_max_message) {
		/* A failed attempt like an unknown token: so many of them close the connection and
		 * shut its peer out for the second, or every one would cost a whole receive. */
		gsd_rpc_conn_bad_token(d->rpc, conn);
		gsd_call_error(
		        c, GSD_ST(TOO_LARGE),
		        "request of %zu bytes on a connection that has not authenticated yet "
		        "(limit %u bytes until a request with a valid token)",
		        len, d->cfg.unauthenticated_max_message);
		return false;
	}
	envelope e;
	if (!read_envelope(buf, len, &e)) {
		gsd_call_error(c, GSD_ST(MALFORMED),
		               "request does not decode as gpusched.v1.Request");
		return false;
	}
	c->id = e.id;
	if (d->stopping) {
		gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		return false;
	}
	gsd_tenant *t = e.token_too_long ? NULL : conn_tenant(d, conn, e.token);
	if (!t) {
		gsd_rpc_conn_bad_token(d->rpc, conn);
		gsd_call_error(c, GSD_ST(UNAUTHENTICATED), "unknown tenant token");
		return false;
	}
	if (!listener_admits(d->rpc, c->pipe, conn, t)) {
		gsd_rpc_conn_bad_token(d->rpc, conn);
		gsd_call_error(c, GSD_ST(UNAUTHENTICATED),
		               "this listener does not admit tenant %s (listen[].tenants)",
		               t->conf.name);
		return false;
	}
	c->tenant = t;
	t->stats.requests++;
	if (conn)
		conn->authenticated = true;
	if (t->banned) {
		gsd_call_error(c, GSD_ST(BANNED), "tenant %s is banned", t->conf.name);
		return false;
	}
	if (!admit_guest(d, c, t, &e, len))
		return false;
	/* Its requests per second, over the current second (refusals count: a flood is one). */
	if (t->conf.max_requests_per_second) {
		uint64_t second = gsd_now_ns() / 1000000000u;
		if (t->rate_window != second) {
			t->rate_window = second;
			t->rate_count = 0;
		}
		if (++t->rate_count > t->conf.max_requests_per_second) {
			gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
			               "tenant %s: more than %u requests this second"
			               " (max_requests_per_second)",
			               t->conf.name, t->conf.max_requests_per_second);
			return false;
		}
	}
	/* One tenant's requests in flight never take the workers the others need. */
	if (atomic_load(&t->inflight) >= d->cfg.max_inflight_requests) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s has %u requests in flight (max_inflight_requests %u)",
		               t->conf.name, atomic_load(&t->inflight),
		               d->cfg.max_inflight_requests);
		return false;
	}
	/* Nor the memory: the bytes of its requests in flight are bounded too (one request is
	 * always let in, max_message bounds it). */
	uint64_t held = atomic_load(&t->inflight_bytes);
	if (held > 0 && held + len > d->cfg.max_inflight_bytes) {
		gsd_call_error(
		        c, GSD_ST(QUOTA_EXCEEDED),
		        "tenant %s has %llu bytes of requests in flight; this one of %zu would"
		        " pass max_inflight_bytes %llu",
		        t->conf.name, (unsigned long long)held, len,
		        (unsigned long long)d->cfg.max_inflight_bytes);
		return false;
	}
	atomic_fetch_add(&t->inflight, 1);
	atomic_fetch_add(&t->inflight_bytes, len);
	c->worker->tenant = t;
	c->worker->bytes = len;
	return true;
}

static void handle_message(gsd_daemon *d, gsd_rpc_worker *w, nng_msg *msg)
{
	struct gsd_rpc *rpc = d->rpc;
	d->stats.requests++;
	uint32_t pipe = w->inject ? 0 : (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
	w->pipe = pipe;
	if (pipe) {
		pthread_mutex_lock(&rpc->park_lock);
		uintptr_t open = count_add(&rpc->open, pipe, 1);
		pthread_mutex_unlock(&rpc->park_lock);
		if (open >= 2) /* as many as the client keeps in flight, and some */
			ra_want_at_least(rpc, (uint32_t)(open > 65536 ? 65536 : open) * 2);
	}
	gsd_call *c = call_new(d, w, pipe);
	if (!c) {
		nng_msg_free(msg);
		gsd_rpc_worker_send(w, NULL);
		return;
	}
	bool closed;
	gsd_conn *conn = gsd_rpc_conn(rpc, pipe, true, &closed);
	const uint8_t *buf = nng_msg_body(msg);
	size_t len = nng_msg_len(msg);
	if (!admit(d, c, conn, buf, len) || !within_limits(d, c, buf, len)) {
		nng_msg_free(msg);
		return;
	}
	c->req = gpusched__v1__request__unpack(NULL, len, buf);
	nng_msg_free(msg);
	if (!c->req) {
		c->id = 0; /* the contract: a request that does not decode is answered with id 0 */
		gsd_call_error(c, GSD_ST(MALFORMED),
		               "request does not decode as gpusched.v1.Request");
		return;
	}
	if (c->guest && c->tenant->conf.kind != GPUSCHED__V1__TENANT_KIND__TENANT_KIND_VM) {
		gsd_call_error(c, GSD_ST(PERMISSION_DENIED),
		               "tenant %s is not a virtual machine: only gpusched-relay for a VM "
		               "tenant names a guest process (Request.guest)",
		               c->tenant->conf.name);
		return;
	}
	c->identity = gsd_tenant_guest_name(c->tenant, c->guest);
	c->sees_placement = c->tenant->conf.admin;
	if (!c->identity) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	gsd_handle_request(d, c);
}

static void inbox_cb(gsd_wake *a)
{
	gsd_daemon *d = a->data;
	struct gsd_rpc *rpc = d->rpc;
	unsigned freed;
	if (atomic_load(&rpc->sending) > 0)
		park_reap(rpc, &freed);
	else
		close_unread(rpc);
	bell_answered(rpc);
	recv_resume(rpc);
	for (;;) {
		gsd_inbox_item items[64];
		pthread_mutex_lock(&rpc->lock);
		size_t n = gsd_inbox_take(&rpc->inbox, items, 64);
		pthread_mutex_unlock(&rpc->lock);
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++) {
			if (items[i].w)
				handle_message(d, items[i].w, items[i].msg);
			else
				gsd_rpc_conn_closed(rpc, items[i].pipe);
		}
	}
	ra_arm(rpc);
}

int gsd_rpc_inject(gsd_daemon *d, const void *req, size_t len,
                   void (*reply)(void *arg, const uint8_t *resp, size_t len), void *arg)
{
	gsd_rpc_worker *w = calloc(1, sizeof(*w));
	nng_msg *msg = NULL;
	if (!w || nng_msg_alloc(&msg, len) != 0) {
		free(w);
		return -1;
	}
	if (len)
		memcpy(nng_msg_body(msg), req, len);
	w->rpc = d->rpc;
	w->inject = reply;
	w->inject_arg = arg;
	if (!gsd_rpc_post(d->rpc, (gsd_inbox_item){.w = w, .msg = msg})) {
		nng_msg_free(msg);
		free(w);
		return -1;
	}
	return 0;
}

/* ---- start and stop ---- */

/* The URL to listen on again: the configured one, with the port it was given when that was 0
 * (clients know that one now). Taken when it starts listening. */
static void rebind_url(nng_listener l, const char *url, char *out, size_t cap)
{
	size_t n = strlen(url);
	int port = 0;
	if (n > 2 && strcmp(url + n - 2, ":0") == 0 &&
	    nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0 && port > 0)
		snprintf(out, cap, "%.*s:%d", (int)(n - 2), url, port);
	else
		snprintf(out, cap, "%s", url);
}

int gsd_rpc_start(gsd_daemon *d)
{
	struct gsd_rpc *rpc = calloc(1, sizeof(*rpc));
	if (!rpc || sodium_init() < 0) {
		free(rpc);
		return -1;
	}
	randombytes_buf(rpc->token_key, sizeof(rpc->token_key));
	d->rpc = rpc;
	rpc->d = d;
	pthread_mutex_init(&rpc->lock, NULL);
	gsd_inbox_init(&rpc->inbox);
	rpc->async.fd = -1; /* not made yet: gsd_rpc_free closes only what was */
	if (gsd_rpc_calls_start(rpc) != 0 || gsd_wake_init(d->loop, &rpc->async, inbox_cb) != 0) {
		GSD_ERROR("rpc: cannot make the loop's wake-ups (eventfd)");
		return -1;
	}
	rpc->async.data = d;
	pthread_mutex_init(&rpc->park_lock, NULL);
	gsd_hmap_init(&rpc->unsent);
	gsd_hmap_init(&rpc->open);
	uv_prepare_init(d->loop, &rpc->park_prepare);
	rpc->park_prepare.data = rpc;
	uv_prepare_start(&rpc->park_prepare, park_prepare_cb);
	uv_unref((uv_handle_t *)&rpc->park_prepare);
	uv_timer_init(d->loop, &rpc->park_timer);
	rpc->park_timer.data = rpc;
	uv_unref((uv_handle_t *)&rpc->park_timer);
	rpc->park_ready = true;
	int rv = nng_rep0_open(&rpc->sock);
	if (rv != 0) {
		GSD_ERROR("rpc: cannot open the REP socket: %s", nng_strerror(rv));
		return -1;
	}
	rpc->sock_open = true;
	if (gsd_rpc_conns_start(rpc) != 0)
		return -1;
	/* nng's default is unlimited. Messages between max_message and twice that are answered
	 * with STATUS_TOO_LARGE; beyond that nng drops the connection without reading them. */
	nng_socket_set_size(rpc->sock, NNG_OPT_RECVMAXSZ, (size_t)d->cfg.max_message * 2 + 65536);
	/* The certificates, loaded as a reload loads them, and their fingerprint, which a reload
	 * compares with: the "tls" block's, and those of listeners with a CA of their own (a
	 * client certificate from it is good there only). */
	gsd_rpc_tls_next tls;
	char err[512];
	if (gsd_rpc_tls_prepare(&d->cfg, &tls, d->tls_fingerprint, err, sizeof err) != 0) {
		GSD_ERROR("rpc: %s", err);
		return -1;
	}
	d->tls = tls.main;
	memcpy(rpc->listener_tls, tls.listener, sizeof rpc->listener_tls);
	for (uint32_t i = 0; i < d->cfg.nlisten; i++) {
		rpc->listeners_bound |= d->cfg.listen_tenants[i][0] != '\0';
		rv = gsd_listen(rpc->sock, d->cfg.listen[i], d->cfg.ipc_mode, d->cfg.ipc_gid,
		                rpc->listener_tls[i] ? rpc->listener_tls[i] : d->tls,
		                &rpc->listeners[i]);
		if (rv != 0) {
			GSD_ERROR("rpc: cannot listen on %s: %s", d->cfg.listen[i],
			          nng_strerror(rv));
			return -1;
		}
		rebind_url(rpc->listeners[i], d->cfg.listen[i], rpc->listen_url[i],
		           sizeof rpc->listen_url[i]);
		rpc->nlisteners++;
		GSD_INFO("listening on %s%s%s%s%s", d->cfg.listen[i],
		         d->cfg.listen_ca[i][0] ? ", clients of CA " : "", d->cfg.listen_ca[i],
		         d->cfg.listen_tenants[i][0] ? ", tenants " : "", d->cfg.listen_tenants[i]);
	}
	if (gsd_rpc_gate_start(rpc) != 0) {
		GSD_ERROR("rpc: cannot start the gate of the tcp listeners");
		return -1;
	}
	for (uint32_t i = 0; i < d->cfg.rpc_workers; i++)
		if (add_worker(rpc) != 0)
			return -1;
	int fd;
	rv = nng_aio_alloc(&rpc->bell_aio, bell_cb, rpc);
	if (rv == 0)
		rv = nng_socket_get_int(rpc->sock, NNG_OPT_RECVFD, &fd);
	if (rv != 0 || uv_poll_init(d->loop, &rpc->recv_poll, fd) != 0) {
		GSD_ERROR("rpc: cannot poll the request socket: %s",
		          rv ? nng_strerror(rv) : "uv_poll_init");
		return -1;
	}
	rpc->recv_poll.data = rpc;
	rpc->recv_ready = true;
	recv_poll_update(rpc);
	return 0;
}

/* ---- new certificates (a reload) ---- */

int gsd_rpc_tls_prepare(const gsd_config *next, gsd_rpc_tls_next *out, uint8_t fingerprint[32],
                        char *why, size_t cap)
{
	crypto_generichash_state fp;
	crypto_generichash_init(&fp, NULL, 0, 32);
	memset(out, 0, sizeof *out);
	if (next->tls.cert_key_file[0] &&
	    gsd_tls_server(next->tls.cert_key_file, next->tls.ca_file, next->tls.auth_mode,
	                   &out->main, &fp, why, cap) != 0)
		return -1;
	for (uint32_t i = 0; i < next->nlisten; i++) {
		if (!next->listen_ca[i][0])
			continue;
		char err[512];
		if (!next->tls.cert_key_file[0] ||
		    gsd_tls_server(next->tls.cert_key_file, next->listen_ca[i],
		                   GSD_TLS_AUTH_REQUIRED, &out->listener[i], &fp, err,
		                   sizeof err) != 0) {
			snprintf(why, cap, "listen %s: %s", next->listen[i],
			         next->tls.cert_key_file[0] ? err
			                                    : "ca_file needs tls.cert_key_file");
			gsd_rpc_tls_discard(out);
			return -1;
		}
	}
	for (uint32_t i = 0; i < next->nlisten; i++)
		if (strncmp(next->listen[i], "tls+", 4) == 0 && !out->main && !out->listener[i]) {
			snprintf(why, cap, "listen %s: tls+tcp:// needs \"tls\" (cert_key_file)",
			         next->listen[i]);
			gsd_rpc_tls_discard(out);
			return -1;
		}
	crypto_generichash_final(&fp, fingerprint, 32);
	return 0;
}

void gsd_rpc_tls_discard(gsd_rpc_tls_next *n)
{
	if (n->main)
		nng_tls_config_free(n->main);
	for (uint32_t i = 0; i < GSD_MAX_LISTEN; i++)
		if (n->listener[i])
			nng_tls_config_free(n->listener[i]);
	memset(n, 0, sizeof *n);
}

/* Restarts the tls+tcp:// listeners with n's configurations (taken): how many, or -1 with why
 * when one could not listen again (it is down). */
static int tls_swap(gsd_daemon *d, gsd_rpc_tls_next *n, char *why, size_t cap)
{
	struct gsd_rpc *rpc = d->rpc;
	int restarted = 0, failed = 0;
	why[0] = '\0';
	for (uint32_t i = 0; i < rpc->nlisteners; i++) {
		const char *url = rpc->listen_url[i];
		if (strncmp(url, "tls+", 4) != 0)
			continue;
		/* Its connections close with it; its port is free again once this returns. */
		nng_listener_close(rpc->listeners[i]);
		rpc->listeners[i] = (nng_listener)NNG_LISTENER_INITIALIZER;
		nng_tls_config *tls = n->listener[i] ? n->listener[i] : n->main;
		int rv = gsd_listen(rpc->sock, url, d->cfg.ipc_mode, d->cfg.ipc_gid, tls,
		                    &rpc->listeners[i]);
		if (rv != 0) {
			GSD_ERROR("rpc: %s could not listen again with the new certificates: %s; "
			          "it is "
			          "down until a reload that succeeds, or a restart",
			          url, nng_strerror(rv));
			snprintf(why, cap, "%s could not listen again: %s (it is down)", url,
			         nng_strerror(rv));
			failed++;
			continue;
		}
		GSD_INFO("listening on %s again, with the new certificates", url);
		restarted++;
	}
	for (uint32_t i = 0; i < GSD_MAX_LISTEN; i++) {
		if (rpc->listener_tls[i])
			nng_tls_config_free(rpc->listener_tls[i]);
		rpc->listener_tls[i] = n->listener[i];
		n->listener[i] = NULL;
	}
	if (d->tls)
		nng_tls_config_free(d->tls);
	d->tls = n->main;
	n->main = NULL;
	return failed ? -1 : restarted;
}

static void tls_swap_due(uv_timer_t *t)
{
	struct gsd_rpc *rpc = t->data;
	gsd_daemon *d = rpc->d;
	if (!rpc->tls_pending_set || d->stopping)
		return;
	rpc->tls_pending_set = false;
	char why[512], note[700];
	int n = tls_swap(d, &rpc->tls_pending, why, sizeof why);
	if (n < 0) {
		/* The next reload tries again: what is in use is not what the files say. */
		memset(d->tls_fingerprint, 0, sizeof d->tls_fingerprint);
		snprintf(note, sizeof note, "by %s (reload): new certificates: %s", rpc->tls_who,
		         why);
		gsd_audit_note(d->audit, rpc->tls_who, "tls_reload_failed", note);
		return;
	}
	snprintf(note, sizeof note,
	         "by %s (reload): new certificates: %d tls+tcp listener(s) restarted (their "
	         "clients reconnect)",
	         rpc->tls_who, n);
	gsd_audit_note(d->audit, rpc->tls_who, "tls_reloaded", note);
}

void gsd_rpc_tls_swap_soon(gsd_daemon *d, gsd_rpc_tls_next *n, const char *who)
{
	struct gsd_rpc *rpc = d->rpc;
	/* A newer reload's certificates replace those still waiting. */
	if (rpc->tls_pending_set)
		gsd_rpc_tls_discard(&rpc->tls_pending);
	rpc->tls_pending = *n;
	memset(n, 0, sizeof *n);
	rpc->tls_pending_set = true;
	snprintf(rpc->tls_who, sizeof rpc->tls_who, "%s", who);
	uv_timer_start(&rpc->tls_timer, tls_swap_due, GSD_TLS_SWAP_DELAY_MS, 0);
}

void gsd_rpc_tls_timer_init(struct gsd_rpc *rpc)
{
	uv_timer_init(rpc->d->loop, &rpc->tls_timer);
	rpc->tls_timer.data = rpc;
}

void gsd_rpc_tls_timer_close(struct gsd_rpc *rpc)
{
	uv_timer_stop(&rpc->tls_timer);
	uv_close((uv_handle_t *)&rpc->tls_timer, NULL);
	if (rpc->tls_pending_set)
		gsd_rpc_tls_discard(&rpc->tls_pending);
	rpc->tls_pending_set = false;
}

static void park_close(struct gsd_rpc *rpc)
{
	if (rpc->recv_ready) {
		rpc->recv_ready = false;
		uv_close((uv_handle_t *)&rpc->recv_poll, NULL);
	}
	if (!rpc->park_ready)
		return;
	rpc->park_ready = false;
	uv_close((uv_handle_t *)&rpc->park_prepare, NULL);
	uv_close((uv_handle_t *)&rpc->park_timer, NULL);
}

/* An item still queued when the daemon stops: never handled. */
static void drop_item(gsd_inbox_item *item)
{
	nng_msg_free(item->msg);
	if (item->w && item->w->inject)
		free(item->w);
}

/*
 * nng 1.5 (Debian 12's) can deadlock in nng_close: its reaper waits for a pipe's receive to
 * stop, and it never does (nanomsg/nng issues 1543 and 1813; a client that closed with
 * requests in flight is enough). The daemon must stop all the same, so the socket is closed
 * on a thread of its own and waited for at most CLOSE_WAIT_MS. If it does not return, the
 * socket and everything nng may still call into (workers, inbox, connections) are left to
 * the process's exit, reachable from abandoned_rpc.
 */
#define CLOSE_WAIT_MS 2000

struct closer {
	nng_socket sock;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
};

static struct gsd_rpc *abandoned_rpc;
static struct closer *abandoned_closer;

static void *close_main(void *arg)
{
	struct closer *c = arg;
	nng_close(c->sock);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Closes s; false if nng_close did not return within CLOSE_WAIT_MS. */
static bool close_bounded(nng_socket s)
{
	struct closer *c = calloc(1, sizeof(*c));
	pthread_t th;
	if (!c) {
		nng_close(s);
		return true;
	}
	c->sock = s;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	if (pthread_create(&th, NULL, close_main, c) != 0) {
		nng_close(s);
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return true;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += CLOSE_WAIT_MS / 1000;
	pthread_mutex_lock(&c->mu);
	while (!c->done)
		if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
			break;
	bool done = c->done;
	pthread_mutex_unlock(&c->mu);
	if (!done) {
		pthread_detach(th);
		abandoned_closer = c;
		return false;
	}
	pthread_join(th, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
	return true;
}

void gsd_rpc_free(gsd_daemon *d)
{
	struct gsd_rpc *rpc = d->rpc;
	if (!rpc)
		return;
	gsd_rpc_gate_stop(rpc);
	/* The audit writer sent its last answers while closing: give them a moment (bounded)
	 * to leave before the socket closes under them. */
	unsigned freed;
	for (int i = 0; i < 500 && park_reap(rpc, &freed); i++)
		nng_msleep(1);
	atomic_store(&rpc->closing, true);
	/* Before nng closes the descriptor under it (closing a poll handle tells epoll about its
	 * descriptor again). */
	if (rpc->recv_ready) {
		rpc->recv_ready = false;
		uv_close((uv_handle_t *)&rpc->recv_poll, NULL);
	}
	if (rpc->sock_open && !close_bounded(rpc->sock)) {
		GSD_WARN("rpc: the request socket did not close within %d ms (an nng 1.5 "
		         "deadlock); it is left to the process's exit",
		         CLOSE_WAIT_MS);
		abandoned_rpc = rpc;
		/* A send nng completes later (sent_cb) must not reach a tenant the daemon frees
		 * next: the workers let go of theirs now, under the lock sent_cb takes. */
		pthread_mutex_lock(&rpc->park_lock);
		for (size_t i = 0; i < rpc->nworkers; i++)
			rpc->workers[i]->tenant = NULL;
		pthread_mutex_unlock(&rpc->park_lock);
		gsd_wake_close(&rpc->async, true); /* nng's threads may still post */
		park_close(rpc);
		gsd_rpc_calls_close(rpc);
		return;
	}
	/* nng_aio_stop waits for a running callback to return: after it nothing is posted. The
	 * requests received and never handled then go before the workers they name. */
	for (size_t i = 0; i < rpc->nworkers; i++) {
		nng_aio_stop(rpc->workers[i]->aio);
		nng_aio_stop(rpc->workers[i]->saio);
		if (rpc->workers[i]->caio)
			nng_aio_stop(rpc->workers[i]->caio);
		if (rpc->workers[i]->scaio)
			nng_aio_stop(rpc->workers[i]->scaio);
	}
	nng_aio_free(rpc->bell_aio); /* stops it first */
	nng_msg_free(rpc->bell_msg);
	gsd_inbox_free(&rpc->inbox, drop_item);
	for (size_t i = 0; i < rpc->nworkers; i++) {
		gsd_rpc_worker *w = rpc->workers[i];
		nng_msg_free(nng_aio_get_msg(w->saio)); /* an answer that never left */
		nng_aio_free(w->aio);
		nng_aio_free(w->saio);
		nng_aio_free(w->caio);
		nng_aio_free(w->scaio);
		free(w);
	}
	park_close(rpc);
	gsd_hmap_free(&rpc->unsent);
	gsd_hmap_free(&rpc->open);
	free(rpc->workers);
	for (uint32_t i = 0; i < GSD_MAX_LISTEN; i++)
		if (rpc->listener_tls[i])
			nng_tls_config_free(rpc->listener_tls[i]);
	pthread_mutex_destroy(&rpc->lock);
	gsd_wake_close(&rpc->async, false);
	gsd_rpc_calls_close(rpc);
	/* The async handles' memory must outlive uv_close: the loop frees nothing, so keep rpc
	 * until the loop has run once more; gsd_daemon_destroy frees it. */
}

void gsd_rpc_release(gsd_daemon *d)
{
	if (d->rpc && d->rpc == abandoned_rpc) {
		/* nng may still call into it (gsd_rpc_free): it stays, reachable, until exit. */
		d->rpc = NULL;
		return;
	}
	if (d->rpc) {
		gsd_rpc_calls_free(d->rpc);
		if (d->rpc->sock_open)
			gsd_rpc_conns_free(d->rpc);
	}
	free(d->rpc);
	d->rpc = NULL;
}
