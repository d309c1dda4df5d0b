/*
 * Events: every packet transition (rejected submissions included) and daemon message, kept in
 * a ring of the most recent events_buffer events for EventsWait requests (rpc/h_events.c).
 * Each event names its tenant by audit identity (NAME, or NAME#ID for a tenant made again with
 * a removed one's name), so a reader is given only its own tenant's events, whoever else
 * shares the daemon; an administrator reads them all, and the daemon's own messages.
 *
 * Positions in the ring are a count that starts at the daemon's start time in nanoseconds
 * (wall clock), so a position from an earlier run is never mistaken for one of this run. The
 * ring records nothing until the first reader asks (gsd_events_read): a daemon nobody watches
 * pays nothing per transition. Recording never blocks: an event that does not fit pushes the
 * oldest out, and a reader whose position it passed is told which audit sequence numbers to
 * read back from the audit file.
 */
#ifndef GSD_EVENTS_H
#define GSD_EVENTS_H

#include "audit/audit.h"
#include "core/waiter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gsd_daemon gsd_daemon;
typedef struct gsd_events gsd_events;

/* One recorded event: a packet's state change (packet non-zero or state set) or a message. */
typedef struct gsd_event {
	uint64_t seq; /* audit sequence number of its record (0: none) */
	uint64_t time_ns;
	const char *tenant; /* audit identity; NULL: the daemon's own (administrators only) */
	bool is_packet;
	uint64_t packet, context;
	int state;
	const char *text; /* the packet event's detail, or the message */
} gsd_event;

/* Where a read stopped, and what it could not give. */
typedef struct gsd_events_pos {
	/* The position after the last event read: the next read's after. A tenant's moves only
	 * with its own events (it is after its newest), so it tells nothing of the others. */
	uint64_t cursor;
	uint64_t scan; /* where the read stopped looking: a waiting reader goes on from here */
	/* The highest audit seq of the events up to the cursor (a tenant's: of its own). */
	uint64_t cursor_seq;
	/* 0, or events after the reader's position left the ring (or the position was not of
	 * this run): the reader's packet events below this seq are to be read from the audit. */
	uint64_t lost_before_seq;
} gsd_events_pos;

#define GSD_EVENTS_BUFFER_DEFAULT 16384u

/* Makes the ring of `capacity` events (0: the default). Returns 0 or -1 (memory). */
int gsd_events_open(gsd_daemon *d, uint32_t capacity);
/* Wakes the readers still waiting (they answer: the daemon is stopping) and frees the ring
 * once the loop has closed its handle. */
void gsd_events_close(gsd_daemon *d);
/* A packet's record `seq` (rec->state, at rec->event_ns or its submission time). */
void gsd_events_packet(gsd_daemon *d, const gsd_packet_rec *rec, uint64_t seq, const char *detail);
/* Audits a note of a tenant (NULL: the daemon's) and records its text as a message event. */
void gsd_events_note(gsd_daemon *d, const char *tenant, const char *kind, const char *text);

/*
 * Up to max events after position `after` (0: from now, none) that `tenant` may see (its
 * audit identity; NULL: every event, an administrator), oldest first, into out (pointers into
 * the ring, valid until the loop records another event). *pos says where to continue.
 * Starts recording if nothing asked before.
 */
size_t gsd_events_read(gsd_daemon *d, const char *tenant, uint64_t after, const gsd_event **out,
                       size_t max, gsd_events_pos *pos);
/* The queue readers wait on: woken from the loop, after the event that recorded something. */
gsd_waitq *gsd_events_waitq(gsd_daemon *d);

#endif
