/* The Prometheus endpoint (rpc/metrics.c). */
#ifndef GSD_METRICS_H
#define GSD_METRICS_H

#include "core/daemon.h"

/* Serves GET /metrics on url (http://HOST:PORT, or tcp://HOST:PORT); "" serves nothing.
 * 0, or -1 (logged) when it cannot listen there. */
int gsd_metrics_start(gsd_daemon *d, const char *url);
void gsd_metrics_stop(gsd_daemon *d);

#endif
