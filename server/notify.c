#include "notify.h"

#include "core/log.h"
#include "core/util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

/* How often the STATUS line is renewed (the watchdog may tick faster). */
#define STATUS_EVERY_NS (UINT64_C(5) * 1000000000u)

static void send_status(gsd_notify *n)
{
	gsd_daemon *d = n->d;
	sd_notifyf(0, "STATUS=serving: %u tenants, %zu packets in flight%s", d->ntenants,
	           d->packets.count, d->stopping ? ", stopping" : "");
	n->last_status_ns = gsd_now_ns();
}

static void tick(uv_timer_t *t)
{
	gsd_notify *n = t->data;
	if (n->watchdog_usec)
		sd_notify(0, "WATCHDOG=1");
	if (gsd_now_ns() - n->last_status_ns >= STATUS_EVERY_NS)
		send_status(n);
}

/* The test hook: the loop does nothing else for stall_ms. */
static void stall(uv_signal_t *s, int signum)
{
	(void)signum;
	gsd_notify *n = s->data;
	GSD_WARN("test hook: stalling the loop for %llu ms (SIGUSR2, GPUSCHEDD_TEST_STALL_MS)",
	         (unsigned long long)n->stall_ms);
	struct timespec ts = {.tv_sec = (time_t)(n->stall_ms / 1000),
	                      .tv_nsec = (long)(n->stall_ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

void gsd_notify_ready(gsd_notify *n, gsd_daemon *d, uv_loop_t *loop)
{
	*n = (gsd_notify){.d = d};
	const char *hook = getenv("GPUSCHEDD_TEST_STALL_MS");
	if (hook) {
		n->stall_ms = strtoull(hook, NULL, 10);
		if (n->stall_ms > 60000)
			n->stall_ms = 60000;
		uv_signal_init(loop, &n->stall);
		n->stall.data = n;
		uv_signal_start(&n->stall, stall, SIGUSR2);
		uv_unref((uv_handle_t *)&n->stall);
	}
	if (!getenv("NOTIFY_SOCKET") && !hook)
		return;
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0)
		n->watchdog_usec = usec;
	sd_notifyf(0, "READY=1\nMAINPID=%lu", (unsigned long)getpid());
	send_status(n);
	/* Pings at half the watchdog period (at least every 10 ms), or just the STATUS. */
	uint64_t every_ms = n->watchdog_usec ? n->watchdog_usec / 2000 : 1000;
	if (every_ms < 10)
		every_ms = 10;
	uv_timer_init(loop, &n->timer);
	n->timer.data = n;
	uv_timer_start(&n->timer, tick, every_ms, every_ms);
	/* The timer alone does not keep the loop alive: stopping is the daemon's decision. */
	uv_unref((uv_handle_t *)&n->timer);
	n->started = true;
	GSD_INFO("systemd: ready%s", n->watchdog_usec ? ", watchdog on" : "");
}

void gsd_notify_stopping(gsd_notify *n)
{
	if (!n->started)
		return;
	sd_notify(0, "STOPPING=1");
	send_status(n);
}

void gsd_notify_close(gsd_notify *n)
{
	if (n->started && !uv_is_closing((uv_handle_t *)&n->timer))
		uv_close((uv_handle_t *)&n->timer, NULL);
	if (n->stall_ms && !uv_is_closing((uv_handle_t *)&n->stall))
		uv_close((uv_handle_t *)&n->stall, NULL);
	n->started = false;
}
