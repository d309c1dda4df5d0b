/*
 * A wake-up of the loop from another thread: what uv_async_t does, without its spin.
 *
 * libuv 1.44's uv_async_send marks the handle busy, writes the loop's eventfd and then marks
 * it done; a loop woken inside that window spins (997 pauses, tens of microseconds) and then
 * sched_yield()s until the sender finishes, and on a small machine the woken loop often lands
 * exactly there (measured: a third of the packets of a single unbatched client). Here the
 * sender sets a flag and writes an eventfd of the handle's own only when the flag was clear;
 * the loop clears the flag before it reads the eventfd and runs the callback, so a wake-up
 * sent meanwhile is never lost and the loop never waits for a sender.
 */
#ifndef GSD_CORE_WAKE_H
#define GSD_CORE_WAKE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

typedef struct gsd_wake gsd_wake;
typedef void (*gsd_wake_cb)(gsd_wake *w);

struct gsd_wake {
	uv_poll_t poll;
	int fd;
	atomic_bool pending;
	gsd_wake_cb cb;
	void *data; /* the owner's */
};

/* On the loop thread; 0, or a negative errno (nothing to close then). */
int gsd_wake_init(uv_loop_t *loop, gsd_wake *w, gsd_wake_cb cb);
/* From any thread: the callback runs on the loop once at least, after this call. */
void gsd_wake_send(gsd_wake *w);
/* On the loop thread; w's memory stays valid until the loop has run the close. keep_fd leaves
 * the eventfd open for good, for a sender that may still run (one that never stopped). */
void gsd_wake_close(gsd_wake *w, bool keep_fd);

#endif
