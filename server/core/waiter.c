#include "core/waiter.h"

void gsd_waitq_wake(gsd_waitq *q, void *event)
{
	/* Move the waiters to a private list first: a waiter still short of its condition adds
	 * itself back to q while we go, and a wake function may wake q again; draining the
	 * private list from its front is safe against both, and against a wake function that
	 * cancels a waiter still on the private list. */
	gsd_list woken;
	gsd_list_init(&woken);
	if (gsd_list_empty(&q->head))
		return;
	woken.next = q->head.next;
	woken.prev = q->head.prev;
	woken.next->prev = &woken;
	woken.prev->next = &woken;
	gsd_list_init(&q->head);
	gsd_list *it;
	while ((it = gsd_list_pop_front(&woken))) {
		gsd_waiter *w = GSD_CONTAINER_OF(it, gsd_waiter, link);
		w->wake(w, event);
	}
}
