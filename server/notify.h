/*
 * systemd integration (deploy/gpuschedd.service is Type=notify): READY=1 once the audit is
 * open and the listeners are bound, a STATUS line (tenants, packets in flight) every few
 * seconds, WATCHDOG=1 from a timer of the loop at half of WatchdogSec (so a loop that stops
 * turning stops the pings, and systemd restarts the daemon), and STOPPING=1 when a stop
 * begins. Everything is a no-op when the daemon was not started by systemd (no NOTIFY_SOCKET).
 *
 * Test hook: with GPUSCHEDD_TEST_STALL_MS=N in the environment, SIGUSR2 blocks the loop for N
 * ms (at most 60000), as a stuck loop would (tests/shell/test_notify.sh).
 */
#ifndef GSD_NOTIFY_H
#define GSD_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/daemon.h"

typedef struct gsd_notify {
	gsd_daemon *d;
	uv_timer_t timer;
	uv_signal_t stall;
	uint64_t watchdog_usec; /* WatchdogSec in microseconds (0: no watchdog) */
	uint64_t stall_ms;      /* the test hook's stall (0: off) */
	uint64_t last_status_ns;
	bool started;
} gsd_notify;

/* READY=1 with a first STATUS, then the timer. Call once the daemon serves requests. */
void gsd_notify_ready(gsd_notify *n, gsd_daemon *d, uv_loop_t *loop);
/* STOPPING=1 (the timer keeps the watchdog fed while the engines drain). */
void gsd_notify_stopping(gsd_notify *n);
/* Closes the timer and signal handles (before the loop is closed). */
void gsd_notify_close(gsd_notify *n);

#endif
