/*
 * A subscriber to the daemon's event socket that never loses an event silently.
 *
 * Every published Event carries its audit sequence number (seq) and that of the event published
 * before it (prev_seq). When prev_seq is not the last seq this subscriber saw, the socket dropped
 * events in between: the next call returns a GAP event, then the caller's packet events of that
 * range read back from the audit (PacketEventsRequest by sequence range), then the live event.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

#include <nng/protocol/pubsub0/sub.h>

/* Read-back pages: the gap is read in pages of this many events, up to WATCH_MAX_RECOVER of
 * them per gap (a subscriber that stalled for long reads the rest with history). */
#define WATCH_PAGE        1000u
#define WATCH_MAX_RECOVER 100000u

struct gs_watch {
	nng_socket sub;
	nng_dialer dialer;
	int recv_fd; /* readable while a message waits (NNG_OPT_RECVFD) */
	_Atomic bool connected;
	uint64_t last_seq; /* of the last event delivered from the socket; 0 before the first */
	/* Events to hand out before reading the socket again, in order. */
	gs_watch_event *pending;
	size_t npending, next;
};

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	gs_watch *w = arg;
	atomic_store(&w->connected, ev == NNG_PIPE_EV_ADD_POST);
}

bool gs_watch_connected(const gs_watch *w)
{
	return atomic_load(&((gs_watch *)w)->connected);
}

int gs_watch_open(const char *url, gs_watch **out)
{
	gs_watch *w = calloc(1, sizeof(*w));

	*out = NULL;
	if (!w)
		return GS_ERR_NOMEM;
	if (nng_sub0_open(&w->sub) != 0) {
		free(w);
		return GS_ERR_TRANSPORT;
	}
	/* The daemon may not be up yet: a non-blocking dial keeps retrying in the background. */
	if (nng_pipe_notify(w->sub, NNG_PIPE_EV_ADD_POST, pipe_event, w) != 0 ||
	    nng_pipe_notify(w->sub, NNG_PIPE_EV_REM_POST, pipe_event, w) != 0 ||
	    nng_socket_set(w->sub, NNG_OPT_SUB_SUBSCRIBE, "", 0) != 0 ||
	    nng_socket_get_int(w->sub, NNG_OPT_RECVFD, &w->recv_fd) != 0 ||
	    gsc_dial(w->sub, url, NNG_FLAG_NONBLOCK, &w->dialer, NULL, 0) != 0) {
		nng_close(w->sub);
		free(w);
		return GS_ERR_TRANSPORT;
	}
	*out = w;
	return 0;
}

void gs_watch_event_clear(gs_watch_event *ev)
{
	if (!ev)
		return;
	free(ev->tenant);
	free(ev->packet.detail);
	free(ev->message);
	memset(ev, 0, sizeof(*ev));
}

static void drop_pending(gs_watch *w)
{
	for (size_t i = w->next; i < w->npending; i++)
		gs_watch_event_clear(&w->pending[i]);
	free(w->pending);
	w->pending = NULL;
	w->npending = w->next = 0;
}

/*
 * libnng 1.5 (Debian 12) can hang in nng_close of a subscriber that messages are still
 * reaching (reproduced: about 1 close in 10 during a burst, waiting forever on a pipe). The
 * close runs on a thread of its own; after CLOSE_WAIT_MS it is left to finish (or to the
 * process's exit) and gs_watch_close returns.
 */
#define CLOSE_WAIT_MS 2000

typedef struct closer {
	gs_watch *w; /* freed once its socket is closed (its pipe callbacks use it until then) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done, abandoned;
} closer;

static void *close_main(void *arg)
{
	closer *c = arg;
	nng_close(c->w->sub);
	free(c->w);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	bool abandoned = c->abandoned;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (abandoned) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
	}
	return NULL;
}

void gs_watch_close(gs_watch *w)
{
	if (!w)
		return;
	drop_pending(w);
	closer *c = calloc(1, sizeof(*c));
	pthread_t th;
	if (!c || pthread_mutex_init(&c->mu, NULL) != 0) {
		free(c);
		nng_close(w->sub); /* no thread to spare: close here */
		free(w);
		return;
	}
	pthread_cond_init(&c->cv, NULL);
	c->w = w;
	if (pthread_create(&th, NULL, close_main, c) != 0) {
		close_main(c);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
		return;
	}
	pthread_detach(th);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += CLOSE_WAIT_MS / 1000;
	pthread_mutex_lock(&c->mu);
	int rc = 0;
	while (!c->done && rc == 0)
		rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
	bool done = c->done;
	if (!done)
		c->abandoned = true; /* the thread frees it when nng_close returns */
	pthread_mutex_unlock(&c->mu);
	if (done) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
	}
}

static int push(gs_watch *w, size_t *cap, const gs_watch_event *ev)
{
	if (w->npending == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		gs_watch_event *n = realloc(w->pending, ncap * sizeof(*n));
		if (!n)
			return GS_ERR_NOMEM;
		w->pending = n;
		*cap = ncap;
	}
	w->pending[w->npending++] = *ev;
	return 0;
}

/* Decodes one published Event into ev (strings copied). */
static int from_wire(const Gpusched__V1__Event *e, gs_watch_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->seq = e->seq;
	ev->time_ns = e->time_ns;
	ev->tenant = gsc_strdup0(e->tenant);
	if (!ev->tenant)
		return GS_ERR_NOMEM;
	if (e->body_case == GPUSCHED__V1__EVENT__BODY_PACKET) {
		const Gpusched__V1__PacketEvent *p = e->packet;
		ev->kind = GS_WATCH_PACKET;
		ev->packet = (gs_packet_event){.seq = p->seq,
		                               .packet = p->packet,
		                               .state = (gs_packet_state)p->state,
		                               .time_ns = p->time_ns,
		                               .detail = gsc_strdup0(p->detail),
		                               .context = p->context};
		if (!ev->packet.detail)
			return GS_ERR_NOMEM;
	} else {
		ev->kind = GS_WATCH_MESSAGE;
		ev->message = gsc_strdup0(
		        e->body_case == GPUSCHED__V1__EVENT__BODY_MESSAGE ? e->message : "");
		if (!ev->message)
			return GS_ERR_NOMEM;
	}
	return 0;
}

/*
 * Queues the GAP, then the caller's packet events with after < seq < before read back page by
 * page (each becomes a recovered event; the GAP's count says how many came back).
 */
static int fill_gap(gs_watch *w, gs_client *c, uint64_t after, uint64_t before, size_t *cap)
{
	gs_watch_event gap = {.kind = GS_WATCH_GAP, .gap_after = after, .gap_before = before};
	int rv = push(w, cap, &gap);
	size_t gap_at = w->npending - 1;

	for (uint64_t from = after; rv == 0 && c;) {
		gs_packet_event *evs;
		size_t n;
		if (w->pending[gap_at].gap_recovered >= WATCH_MAX_RECOVER) {
			w->pending[gap_at].gap_truncated = true;
			break;
		}
		int st = gs_packet_events_range(c, from, before, WATCH_PAGE, &evs, &n);
		if (st != 0) {
			/* The GAP still goes out, saying why nothing more came back. */
			w->pending[gap_at].gap_status = st;
			break;
		}
		for (size_t i = 0; i < n && rv == 0; i++) {
			gs_watch_event r = {.kind = GS_WATCH_PACKET,
			                    .seq = evs[i].seq,
			                    .time_ns = evs[i].time_ns,
			                    .packet = evs[i],
			                    .recovered = true};
			evs[i].detail = NULL; /* moved into r */
			rv = push(w, cap, &r);
			if (rv != 0)
				free(r.packet.detail);
			else
				w->pending[gap_at].gap_recovered++;
		}
		if (n)
			from = evs[n - 1].seq;
		gs_packet_events_free(evs, n);
		if (n < WATCH_PAGE)
			break;
	}
	return rv;
}

int gs_watch_next(gs_watch *w, gs_client *c, int timeout_ms, gs_watch_event *ev)
{
	nng_msg *m;
	int rv;

	memset(ev, 0, sizeof(*ev));
	if (w->next < w->npending) {
		*ev = w->pending[w->next++];
		if (w->next == w->npending)
			drop_pending(w);
		return 0;
	}
	/* Waits on the socket's receive descriptor and takes the message without blocking: a
	 * receive that times out inside libnng 1.5 can leave the socket unable to close. */
	struct pollfd pfd = {.fd = w->recv_fd, .events = POLLIN};
	rv = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
	if (rv < 0 && errno != EINTR)
		return GS_ERR_TRANSPORT;
	rv = nng_recvmsg(w->sub, &m, NNG_FLAG_NONBLOCK);
	if (rv == NNG_EAGAIN)
		return GS_ERR_TIMEOUT;
	if (rv != 0)
		return GS_ERR_TRANSPORT;
	Gpusched__V1__Event *e = gpusched__v1__event__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	nng_msg_free(m);
	if (!e)
		return GS_ERR_PROTOCOL;

	gs_watch_event live;
	rv = from_wire(e, &live);
	/* The first event sets where this subscriber starts: nothing before it was promised. */
	bool lost = w->last_seq != 0 && e->prev_seq != w->last_seq;
	uint64_t after = w->last_seq;
	if (e->seq)
		w->last_seq = e->seq;
	gpusched__v1__event__free_unpacked(e, NULL);
	if (rv != 0) {
		gs_watch_event_clear(&live);
		return rv;
	}
	if (!lost) {
		*ev = live;
		return 0;
	}
	size_t cap = 0;
	rv = fill_gap(w, c, after, live.seq, &cap);
	if (rv == 0)
		rv = push(w, &cap, &live);
	if (rv != 0) {
		gs_watch_event_clear(&live);
		drop_pending(w);
		return rv;
	}
	return gs_watch_next(w, c, timeout_ms, ev);
}
