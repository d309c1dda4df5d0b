/*
 * Watching the daemon's events live, through EventsWait on the client's own connection: the
 * daemon answers each tenant with its own events only (an administrator's with all), since the
 * request carries the token like any other. Nothing is lost silently: the daemon keeps its
 * recent events in a ring, and when the ring has dropped events this watcher had not read yet
 * (it fell behind, or the daemon restarted) the answer says below which audit sequence number
 * they were; the next call returns a GAP event, then the caller's packet events of that range
 * read back from the audit (PacketEventsRequest by sequence range), then the live ones.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* Events per answer, and read-back pages: the gap is read in pages of WATCH_PAGE events, up
 * to WATCH_MAX_RECOVER of them per gap (a watcher that stalled for long reads the rest with
 * history). */
#define WATCH_BATCH       1000u
#define WATCH_PAGE        1000u
#define WATCH_MAX_RECOVER 100000u
/* A wait without a bound is a series of waits of this long. */
#define WATCH_FOREVER_MS 60000u

struct gs_watch {
	gs_client *c;
	uint64_t cursor;     /* the daemon's position after the last answer */
	uint64_t cursor_seq; /* the highest audit seq that position has passed */
	/* Events to hand out before asking again, in order. */
	gs_watch_event *pending;
	size_t npending, next;
};

/* Asks for the events after the watcher's cursor, waiting up to timeout_ms for one. */
static int events_wait(gs_watch *w, gs_client *c, uint32_t timeout_ms, Gpusched__V1__Response **out)
{
	Gpusched__V1__EventsWaitRequest body = GPUSCHED__V1__EVENTS_WAIT_REQUEST__INIT;
	body.after = w->cursor;
	body.max_events = WATCH_BATCH;
	body.timeout_ms = timeout_ms;
	return gsc_call(c, GSC_REQ(EVENTS_WAIT), &body, GSC_RESP(EVENTS_WAIT), timeout_ms, out);
}

int gs_watch_open(gs_client *c, gs_watch **out)
{
	*out = NULL;
	gs_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return GS_ERR_NOMEM;
	w->c = c;
	/* Cursor 0: the answer is where the daemon is now; every later event is promised. */
	Gpusched__V1__Response *resp;
	int rv = events_wait(w, c, 0, &resp);
	if (rv != 0) {
		free(w);
		return rv;
	}
	w->cursor = resp->events_wait->cursor;
	w->cursor_seq = resp->events_wait->cursor_seq;
	gsc_response_free(resp);
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

void gs_watch_close(gs_watch *w)
{
	if (!w)
		return;
	drop_pending(w);
	free(w);
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

/* Decodes one Event into ev (strings copied). */
static int from_wire(const Gpusched__V1__Event *e, gs_watch_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->seq = e->seq;
	ev->time_ns = e->time_ns;
	ev->tenant = gsc_strdup0(e->tenant);
	if (!ev->tenant)
		return GS_ERR_NOMEM;
	if (e->body_case == GPUSCHED__V1__EVENT__BODY_PACKET) {
		ev->kind = GS_WATCH_PACKET;
		/* The same entry as gs_packet_events copies. */
		if (gsc_copy_entry(&gsc_event_kind, &ev->packet, &e->packet->base) != 0)
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

	for (uint64_t from = after; rv == 0;) {
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

/* Queues what one answer brought: a GAP and the read-back first, then its events. */
static int take_answer(gs_watch *w, gs_client *c, const Gpusched__V1__EventsWaitResponse *r)
{
	size_t cap = 0;
	int rv = 0;
	if (r->lost_before_seq)
		rv = fill_gap(w, c, w->cursor_seq, r->lost_before_seq, &cap);
	for (size_t i = 0; i < r->n_events && rv == 0; i++) {
		gs_watch_event ev;
		rv = from_wire(r->events[i], &ev);
		if (rv == 0)
			rv = push(w, &cap, &ev);
		if (rv != 0)
			gs_watch_event_clear(&ev);
	}
	if (rv != 0) {
		drop_pending(w);
		return rv;
	}
	w->cursor = r->cursor;
	w->cursor_seq = r->cursor_seq;
	return 0;
}

int gs_watch_next(gs_watch *w, gs_client *c, int timeout_ms, gs_watch_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	if (!c)
		c = w->c;
	for (;;) {
		if (w->next < w->npending) {
			*ev = w->pending[w->next++];
			if (w->next == w->npending)
				drop_pending(w);
			return 0;
		}
		uint32_t wait = timeout_ms < 0 ? WATCH_FOREVER_MS : (uint32_t)timeout_ms;
		Gpusched__V1__Response *resp;
		int rv = events_wait(w, c, wait, &resp);
		if (rv != 0)
			return rv;
		rv = take_answer(w, c, resp->events_wait);
		gsc_response_free(resp);
		if (rv != 0)
			return rv;
		if (w->npending == 0 && timeout_ms >= 0)
			return GS_ERR_TIMEOUT;
	}
}
