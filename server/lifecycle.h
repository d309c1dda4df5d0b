/*
 * The daemon's start and stop: the one place that knows every layer. It builds the state
 * (core/), wires the layers' hooks, opens the audit, starts the memory manager and the
 * scheduler of each adapter, the event publisher and the request transport; and takes them
 * down in the reverse order.
 */
#ifndef GSD_LIFECYCLE_H
#define GSD_LIFECYCLE_H

#include "core/daemon.h"

int gsd_daemon_init(gsd_daemon *d, const gsd_config *cfg, uv_loop_t *loop);
/* Stops accepting, cancels queued packets, lets running ones settle, flushes the audit. */
void gsd_daemon_stop(gsd_daemon *d);
void gsd_daemon_destroy(gsd_daemon *d);

#endif
