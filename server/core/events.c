#include "core/events.h"

#include "core/daemon.h"
#include "core/hmap.h"
#include "core/log.h"
#include "core/util.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct slot {
	gsd_event ev;
	uint64_t cursor_seq; /* the highest seq recorded up to and including this one */
	char *strings;       /* tenant and text, one allocation */
} slot;

/*
 * What a tenant's cursor may depend on: its own events. For each audit identity that has had
 * an event: the position and seq of its newest, and the position of its newest pushed out of
 * the ring. A tenant's cursor is the position after its newest event read, never a position
 * other tenants' events moved (that would count their packets); whether a tenant lost events
 * is whether one of its own left the ring after its cursor.
 */
typedef struct own {
	uint64_t last_pos, last_seq; /* its newest event (last_pos 0: none held or pushed out) */
	uint64_t lost_pos;           /* its newest event pushed out of the ring (0: none) */
} own;

struct gsd_events {
	gsd_daemon *d;
	gsd_hmap owners; /* keyed identity hash (owner_key) -> own */
	unsigned char owner_salt[crypto_shorthash_KEYBYTES];
	uv_async_t wake; /* wakes the readers from the loop, after the recording event */
	gsd_waitq waiters;
	bool recording;     /* since the first read */
	uint64_t start_seq; /* the audit's next seq when recording began */
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
	e->origin = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
	e->head = e->origin;
	e->d = d;
	gsd_hmap_init(&e->owners);
	randombytes_buf(e->owner_salt, sizeof e->owner_salt);
	gsd_waitq_init(&e->waiters);
	uv_async_init(d->loop, &e->wake, wake_cb);
	e->wake.data = e;
	uv_unref((uv_handle_t *)&e->wake);
	d->events = e;
	return 0;
}

static void free_own(uint64_t key, void *value, void *arg)
{
	(void)key;
	(void)arg;
	free(value);
}

static void closed(uv_handle_t *h)
{
	gsd_events *e = h->data;
	gsd_hmap_each(&e->owners, free_own, NULL);
	gsd_hmap_free(&e->owners);
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

/* A keyed hash of an audit identity: two identities share a record with a chance of 2^-64,
 * and no tenant can choose a name that collides with another's. Never 0. */
static uint64_t owner_key(const gsd_events *e, const char *tenant)
{
	unsigned char h[crypto_shorthash_BYTES];
	crypto_shorthash(h, (const unsigned char *)tenant, strlen(tenant), e->owner_salt);
	uint64_t k;
	memcpy(&k, h, sizeof k);
	return k ? k : 1;
}

static own *owner(gsd_events *e, const char *tenant, bool make)
{
	uint64_t key = owner_key(e, tenant);
	own *o = gsd_hmap_get(&e->owners, key);
	if (!o && make && (o = calloc(1, sizeof *o)) && gsd_hmap_put(&e->owners, key, o) != 0) {
		free(o);
		o = NULL;
	}
	return o;
}

static void record(gsd_events *e, const gsd_event *ev)
{
	size_t tl = ev->tenant ? strlen(ev->tenant) + 1 : 0;
	size_t xl = strlen(ev->text) + 1;
	char *s = malloc(tl + xl);
	if (!s)
		return; /* a reader past it sees its seq skipped; the audit has it */
	own *o = ev->tenant ? owner(e, ev->tenant, true) : NULL;
	if (ev->tenant && !o) {
		free(s); /* the same as without memory for its strings */
		return;
	}
	if (e->count == e->cap) {
		slot *old = at(e, e->head - e->count);
		own *oo = old->ev.tenant ? owner(e, old->ev.tenant, false) : NULL;
		if (oo)
			oo->lost_pos = e->head - e->count;
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
	if (o) {
		o->last_pos = e->head;
		o->last_seq = ev->seq;
	}
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

/* A tenant's read: only its own events move its cursor, its cursor_seq and its losses. */
static size_t read_own(gsd_events *e, const char *tenant, uint64_t after, const gsd_event **out,
                       size_t max, gsd_events_pos *pos)
{
	uint64_t first = e->head - e->count;
	const own *o = owner(e, tenant, false);
	/* Where a reader that has seen all of its events stands: after its newest one (the run's
	 * origin for a tenant that has none), whatever the others did meanwhile. */
	pos->cursor = o && o->last_pos ? o->last_pos + 1 : e->origin;
	pos->cursor_seq = o ? o->last_seq : 0;
	pos->scan = e->head;
	if (after == 0)
		return 0;
	uint64_t p = after;
	if (after < e->origin || after > e->head) {
		p = first; /* not a position of this run: all it had is in the audit */
		pos->lost_before_seq = 1;
	} else if (after < first) {
		p = first;
		if (o && o->lost_pos >= after)
			pos->lost_before_seq = 1; /* one of its own left the ring */
	}
	size_t n = 0;
	for (; p < e->head && n < max; p++) {
		const gsd_event *ev = &at(e, p)->ev;
		if (ev->tenant && strcmp(ev->tenant, tenant) == 0) {
			out[n++] = ev;
			pos->cursor = p + 1;
			pos->cursor_seq = ev->seq;
		}
	}
	if (n == max)
		pos->scan = pos->cursor;
	/* Its events below the first it is given (or, with none, all up to its newest) are in
	 * the audit. */
	if (pos->lost_before_seq)
		pos->lost_before_seq = n ? out[0]->seq : o ? o->last_seq + 1 : e->start_seq;
	return n;
}

size_t gsd_events_read(gsd_daemon *d, const char *tenant, uint64_t after, const gsd_event **out,
                       size_t max, gsd_events_pos *pos)
{
	gsd_events *e = d->events;
	if (!e->recording) {
		e->recording = true;
		e->start_seq = GSD_AUDIT_SEQ_MAX + 1 - gsd_audit_seqs_left(d->audit);
	}
	uint64_t first = e->head - e->count;
	memset(pos, 0, sizeof(*pos));
	if (tenant)
		return read_own(e, tenant, after, out, max, pos);
	if (after == 0) {
		pos->cursor = pos->scan = e->head;
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
	for (; p < e->head && n < max; p++)
		out[n++] = &at(e, p)->ev;
	pos->cursor = pos->scan = p;
	pos->cursor_seq = seq_before(e, p);
	return n;
}
