#include "core/events.h"

#include "core/daemon.h"
#include "core/log.h"
#include "core/util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct slot {
	gsd_event ev;
	uint64_t cursor_seq; /* the highest seq recorded up to and including this one */
	char *strings;       /* tenant and text, one allocation */
} slot;

struct gsd_events {
	gsd_daemon *d;
	uv_async_t wake; /* wakes the readers from the loop, after the recording event */
	gsd_waitq waiters;
	bool recording; /* since the first read */
	slot *ring;
	uint32_t cap;
	uint64_t origin;   /* the first position of this run */
	uint64_t head;     /* the next event's position */
	uint64_t count;    /* events held: positions head - count .. head - 1 */
	uint64_t base_seq; /* cursor_seq of the last event pushed out (or before the first) */
	uint64_t last_seq; /* the highest seq recorded */
};

static void wake_cb(uv_async_t *h)
{
	gsd_events *e = h->data;
	gsd_waitq_wake(&e->waiters, NULL);
}

int gsd_events_open(gsd_daemon *d, uint32_t capacity)
{
	gsd_events *e = calloc(1, sizeof(*e));
	if (!e)
		return -1;
	e->cap = capacity ? capacity : GSD_EVENTS_BUFFER_DEFAULT;
	e->ring = calloc(e->cap, sizeof(*e->ring));
	if (!e->ring) {
		free(e);
		return -1;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	e->origin = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	e->head = e->origin;
	e->d = d;
	gsd_waitq_init(&e->waiters);
	uv_async_init(d->loop, &e->wake, wake_cb);
	e->wake.data = e;
	uv_unref((uv_handle_t *)&e->wake);
	d->events = e;
	return 0;
}

static void closed(uv_handle_t *h)
{
	gsd_events *e = h->data;
	for (uint32_t i = 0; i < e->cap; i++)
		free(e->ring[i].strings);
	free(e->ring);
	free(e);
}

void gsd_events_close(gsd_daemon *d)
{
	gsd_events *e = d->events;
	if (!e)
		return;
	d->events = NULL;
	gsd_waitq_wake(&e->waiters, NULL); /* with d->events gone, each answers */
	uv_close((uv_handle_t *)&e->wake, closed);
}

gsd_waitq *gsd_events_waitq(gsd_daemon *d)
{
	return &d->events->waiters;
}

static slot *at(gsd_events *e, uint64_t pos)
{
	return &e->ring[(pos - e->origin) % e->cap];
}

static void record(gsd_events *e, const gsd_event *ev)
{
	size_t tl = ev->tenant ? strlen(ev->tenant) + 1 : 0;
	size_t xl = strlen(ev->text) + 1;
	char *s = malloc(tl + xl);
	if (!s)
		return; /* a reader past it sees its seq skipped; the audit has it */
	if (e->count == e->cap) {
		slot *old = at(e, e->head - e->count);
		e->base_seq = old->cursor_seq;
		free(old->strings);
		old->strings = NULL;
		e->count--;
	}
	slot *sl = at(e, e->head);
	sl->ev = *ev;
	if (tl) {
		memcpy(s, ev->tenant, tl);
		sl->ev.tenant = s;
	}
	memcpy(s + tl, ev->text, xl);
	sl->ev.text = s + tl;
	sl->strings = s;
	if (ev->seq > e->last_seq)
		e->last_seq = ev->seq;
	sl->cursor_seq = e->last_seq;
	e->head++;
	e->count++;
	if (!gsd_waitq_empty(&e->waiters))
		uv_async_send(&e->wake);
}

void gsd_events_packet(gsd_daemon *d, const gsd_packet_rec *rec, uint64_t seq, const char *detail)
{
	/* Every transition passes here: nothing to do until someone reads events. */
	gsd_events *e = d->events;
	if (!e || !e->recording)
		return;
	gsd_event ev = {.seq = seq,
	                /* The same clock as the audit event. */
	                .time_ns = rec->event_ns ? rec->event_ns : rec->submitted_ns,
	                .tenant = rec->tenant,
	                .is_packet = true,
	                .packet = rec->packet,
	                .context = rec->context,
	                .state = rec->state,
	                .text = detail ? detail : ""};
	record(e, &ev);
}

void gsd_events_note(gsd_daemon *d, const char *tenant, const char *kind, const char *text)
{
	uint64_t seq = gsd_audit_note(d->audit, tenant, kind, text);
	gsd_events *e = d->events;
	if (!e || !e->recording)
		return;
	gsd_event ev = {.seq = seq, .time_ns = gsd_now_ns(), .tenant = tenant, .text = text};
	record(e, &ev);
}

/* The highest seq recorded before position pos (one held, or the first held). */
static uint64_t seq_before(gsd_events *e, uint64_t pos)
{
	return pos == e->head - e->count ? e->base_seq : at(e, pos - 1)->cursor_seq;
}

size_t gsd_events_read(gsd_daemon *d, const char *tenant, uint64_t after, const gsd_event **out,
                       size_t max, gsd_events_pos *pos)
{
	gsd_events *e = d->events;
	e->recording = true;
	uint64_t first = e->head - e->count;
	memset(pos, 0, sizeof(*pos));
	if (after == 0) {
		pos->cursor = e->head;
		pos->cursor_seq = e->last_seq;
		return 0;
	}
	uint64_t p = after;
	if (after < first || after > e->head) {
		/* Pushed out, or not a position of this run: what it missed is in the audit,
		 * below the first event still held (or the next to come). */
		p = first;
		pos->lost_before_seq = e->count ? at(e, first)->ev.seq : e->last_seq + 1;
		if (!pos->lost_before_seq)
			pos->lost_before_seq = at(e, first)->cursor_seq + 1;
	}
	size_t n = 0;
	for (; p < e->head && n < max; p++) {
		const gsd_event *ev = &at(e, p)->ev;
		if (!tenant || (ev->tenant && strcmp(ev->tenant, tenant) == 0))
			out[n++] = ev;
	}
	pos->cursor = p;
	pos->cursor_seq = seq_before(e, p);
	return n;
}
