/*
 * Events: an nng PUB socket (--events URL) on which every packet transition (rejected
 * submissions included) and daemon message is published as a gpusched.v1.Event. Publishing
 * never blocks: a slow subscriber loses events rather than stalling the loop. Each event carries
 * the audit sequence number of the record it reports and that of the event published before it,
 * so a subscriber sees every loss and can read what it missed from the audit.
 */
#ifndef GSD_EVENTS_H
#define GSD_EVENTS_H

#include "audit/audit.h"
#include "gpusched.pb-c.h"

#include <stdbool.h>

typedef struct gsd_daemon gsd_daemon;
typedef struct gsd_events gsd_events;

/* Opens the PUB socket on url (nothing when url is empty). Returns 0 or -1 (logged). */
int gsd_events_open(gsd_daemon *d, const char *url);
void gsd_events_close(gsd_daemon *d);
/* True when a PUB socket is open (callers skip building events otherwise). */
bool gsd_events_on(const gsd_daemon *d);
/* Publishes ev; ev->seq is the audit sequence number of its record (0: none). */
void gsd_events_publish(gsd_daemon *d, Gpusched__V1__Event *ev);
/* A packet's record `seq` (rec->state, at rec->event_ns or its submission time). */
void gsd_events_packet(gsd_daemon *d, const gsd_packet_rec *rec, uint64_t seq, const char *detail);
/* Audits a note of a tenant (a ban, a timeout) and publishes its text as a message event. */
void gsd_events_note(gsd_daemon *d, const char *tenant, const char *kind, const char *text);

#endif
