/*
 * EventsWait: the daemon's recent events (core/events.c), given to each caller filtered by its
 * tenant. A tenant sees only the events whose tenant is its own audit identity (NAME or
 * NAME#ID), so neither another tenant's packets nor those of a removed tenant whose name it
 * reuses; an administrator sees every event, the daemon's own messages included. The token
 * is checked like on every request (an unknown one is UNAUTHENTICATED and audited), which is
 * what a PUB socket could not do: there every subscriber chose its own topics.
 *
 * The call waits up to timeout_ms for the first visible event; it is woken from the loop after
 * the event that recorded something, so one answer carries what one turn of the loop did. An
 * idle wait is answered OK with no events (a TIMEOUT would be an audited error every poll).
 */
#include "rpc/handlers.h"

#include "core/events.h"

#include <stdlib.h>

#define EVENTS_DEFAULT 1000u
#define EVENTS_MAX     10000u

/* The audit identity whose events the caller sees; NULL: all (an administrator). */
static const char *visible_to(const gsd_call *c)
{
	return c->tenant->conf.admin ? NULL : c->identity;
}

static void reply(gsd_call *c, const gsd_event *const *evs, size_t n, const gsd_events_pos *pos)
{
	Gpusched__V1__EventsWaitResponse r = GPUSCHED__V1__EVENTS_WAIT_RESPONSE__INIT;
	void **ptrs = NULL;
	Gpusched__V1__Event *ev = n ? gsd_pb_repeated(n, sizeof(*ev), &ptrs) : NULL;
	Gpusched__V1__PacketEvent *pe = n ? calloc(n, sizeof(*pe)) : NULL;
	if (n && (!ev || !pe)) {
		free(ptrs);
		free(pe);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory for %zu events", n);
		return;
	}
	/* Seqs, packet ids and ring positions leave through the wire ids (core/wire_id.h). */
	const gsd_wire_key *k = &c->d->wire;
	for (size_t i = 0; i < n; i++) {
		const gsd_event *e = evs[i];
		gpusched__v1__event__init(&ev[i]);
		ev[i].seq = gsd_wire_seq_out(k, e->seq);
		ev[i].time_ns = e->time_ns;
		ev[i].tenant = (char *)(e->tenant ? e->tenant : "");
		if (e->is_packet) {
			gpusched__v1__packet_event__init(&pe[i]);
			pe[i].seq = ev[i].seq;
			pe[i].packet = gsd_wire_packet_out(k, e->packet);
			pe[i].context = e->context;
			pe[i].state = e->state;
			pe[i].time_ns = e->time_ns;
			pe[i].detail = (char *)e->text;
			ev[i].body_case = GPUSCHED__V1__EVENT__BODY_PACKET;
			ev[i].packet = &pe[i];
		} else {
			ev[i].body_case = GPUSCHED__V1__EVENT__BODY_MESSAGE;
			ev[i].message = (char *)e->text;
		}
	}
	r.n_events = n;
	r.events = (Gpusched__V1__Event **)ptrs;
	r.cursor = gsd_wire_map(k, GSD_WIRE_EVENTS, pos->cursor);
	r.cursor_seq = gsd_wire_seq_out(k, pos->cursor_seq);
	r.lost_before_seq = gsd_wire_seq_out(k, pos->lost_before_seq);
	GSD_REPLY(c, EVENTS_WAIT, events_wait, &r);
	free(ptrs);
	free(pe);
}

/* Answers when there is something to say (or always, `now`); false when the call waits on.
 * c->wait_value is the position it reads from: while it waits it moves past other tenants'
 * events, so a wait woken by them does not look at them again, but the cursor it answers
 * moves with the caller's own events only. */
static bool try_answer(gsd_call *c, bool now)
{
	const Gpusched__V1__EventsWaitRequest *q = R(events_wait);
	size_t max = q->max_events ? q->max_events : EVENTS_DEFAULT;
	if (max > EVENTS_MAX)
		max = EVENTS_MAX;
	const gsd_event **evs = malloc(max * sizeof(*evs));
	if (!evs) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return true;
	}
	gsd_events_pos pos;
	size_t n = gsd_events_read(c->d, visible_to(c), c->wait_value, evs, max, &pos);
	bool answer = now || n || pos.lost_before_seq || c->wait_value == 0;
	if (answer)
		reply(c, evs, n, &pos);
	else
		c->wait_value = pos.scan; /* past the others' events, not to look at them again */
	free(evs);
	return answer;
}

static void events_wake(gsd_waiter *w, void *event)
{
	(void)event;
	gsd_call *c = gsd_call_of_waiter(w);
	if (!c->d->events) {
		gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		return;
	}
	if (!try_answer(c, false))
		gsd_call_wait(c, gsd_events_waitq(c->d), events_wake, 0, NULL); /* parked already */
}

static void events_expired(gsd_call *c)
{
	gsd_waiter_cancel(&c->waiter);
	if (!c->d->events)
		gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
	else
		try_answer(c, true);
}

void gsd_h_events_wait(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__EventsWaitRequest *q = R(events_wait);
	if (!d->events) {
		gsd_call_error(c, GSD_ST(SHUTTING_DOWN), "the daemon is stopping");
		return;
	}
	/* A position of the ring, as the daemon counts them (one that is not, or of an earlier
	 * run, is answered as lost: lost_before_seq). Positions start at the run's start time in
	 * microseconds (below GSD_WIRE_MAX until the year 2255, above GSD_WIRE_ISSUED_MAX); a
	 * made-up cursor unmaps to a random position, which is inside this run's few held events
	 * with a chance of about events_buffer / 2^53, and is otherwise answered as lost whatever
	 * its value. */
	c->wait_value = gsd_wire_unmap(&d->wire, GSD_WIRE_EVENTS, q->after);
	if (try_answer(c, q->timeout_ms == 0))
		return;
	gsd_call_wait(c, gsd_events_waitq(d), events_wake, q->timeout_ms, events_expired);
}
