/*
 * Events: an nng PUB socket (--events URL) on which every packet transition and daemon message
 * is published as a gpusched.v1.Event. Publishing never blocks: a slow subscriber loses events
 * rather than stalling the loop.
 */
#ifndef GSD_EVENTS_H
#define GSD_EVENTS_H

#include "gpusched.pb-c.h"

#include <stdbool.h>

typedef struct gsd_daemon gsd_daemon;
typedef struct gsd_events gsd_events;

/* Opens the PUB socket on url (nothing when url is empty). Returns 0 or -1 (logged). */
int gsd_events_open(gsd_daemon *d, const char *url);
void gsd_events_close(gsd_daemon *d);
/* True when a PUB socket is open (callers skip building events otherwise). */
bool gsd_events_on(const gsd_daemon *d);
void gsd_events_publish(gsd_daemon *d, Gpusched__V1__Event *ev);
/* A free-form message event of a tenant (a ban, a timeout). */
void gsd_events_message(gsd_daemon *d, const char *tenant, const char *text);

#endif
