/*
 * Reloading the configuration live (SIGHUP, or an administrator's AdminReload): tenants (new,
 * changed, removed), their shares, ceilings, limits and tokens, the daemon's limits and the
 * adapters' time slices and share policies change without dropping a connection or a packet
 * (a new policy regroups the contexts of the adapter's nodes at once). The new file is
 * checked whole first; a file that does not load, does not validate, or changes what only a
 * restart can (listeners' addresses and tenants, the audit file, adapters' nodes, segments or
 * backends, worker and event buffer counts, the clock) is refused whole, and the running
 * configuration stays. New TLS certificates (other files, or the same ones rewritten) restart
 * the tls+tcp listeners with them (rpc.h, gsd_rpc_tls_swap_soon). Every change is an audit note
 * naming who asked and what changed.
 */
#ifndef GSD_RELOAD_H
#define GSD_RELOAD_H

#include <stddef.h>

#include "core/config.h"
#include "core/daemon.h"

/* Applies `next` (a loaded and validated configuration) to the running daemon. Returns the
 * number of changes (0: nothing changed), or -1 with why in msg when it is refused (nothing
 * changed then). `who` is recorded in the notes. msg also gets a summary on success. */
int gsd_reload_apply(gsd_daemon *d, const gsd_config *next, const char *who, char *msg, size_t cap);

#endif
