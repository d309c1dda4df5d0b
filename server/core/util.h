/* Small helpers shared by every layer of the daemon. */
#ifndef GSD_UTIL_H
#define GSD_UTIL_H

#include <stdint.h>

/* CLOCK_REALTIME in ns: the timestamps of records. */
uint64_t gsd_now_ns(void);
/* Creates the directories of an ipc:// socket path (mode 0700) so defaults work for a
 * non-root user; other URLs are left alone. */
void gsd_ensure_ipc_dir(const char *url);

#endif
