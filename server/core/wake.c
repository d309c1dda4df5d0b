/* The loop's wake-ups from other threads (wake.h). */
#include "core/wake.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void wake_io(uv_poll_t *p, int status, int events)
{
	(void)status;
	(void)events;
	gsd_wake *w = p->data;
	/* The eventfd is read before the flag is cleared: a sender that finds the flag set
	 * queued its work before the callback below looks for it, and one that finds it clear
	 * writes the eventfd again (read after this one, so the loop runs the callback again). */
	uint64_t n;
	while (read(w->fd, &n, sizeof n) < 0 && errno == EINTR)
		;
	atomic_store(&w->pending, false);
	w->cb(w);
}

int gsd_wake_init(uv_loop_t *loop, gsd_wake *w, gsd_wake_cb cb)
{
	w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->fd < 0)
		return -errno;
	atomic_init(&w->pending, false);
	w->cb = cb;
	int rc = uv_poll_init(loop, &w->poll, w->fd);
	if (rc == 0) {
		w->poll.data = w;
		rc = uv_poll_start(&w->poll, UV_READABLE, wake_io);
		if (rc != 0)
			uv_close((uv_handle_t *)&w->poll, NULL);
	}
	if (rc != 0) {
		close(w->fd);
		w->fd = -1;
	}
	return rc;
}

void gsd_wake_send(gsd_wake *w)
{
	if (atomic_exchange(&w->pending, true))
		return; /* the loop has not run the callback since the last one: it will */
	uint64_t one = 1;
	while (write(w->fd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

static void wake_closed(uv_handle_t *h)
{
	gsd_wake *w = h->data;
	close(w->fd);
	w->fd = -1;
}

void gsd_wake_close(gsd_wake *w, bool keep_fd)
{
	if (w->fd < 0)
		return;
	/* With the fd kept, the flag is never cleared again: a late sender writes at most once,
	 * into an eventfd nobody reads, never into a file that took the number. */
	uv_close((uv_handle_t *)&w->poll, keep_fd ? NULL : wake_closed);
}
