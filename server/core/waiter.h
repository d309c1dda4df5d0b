/*
 * Waiters: how a lower layer tells an upper one that something it waited for has happened,
 * without calling it (in the spirit of Redis's blocked.c).
 *
 * The party that waits (a request of the rpc layer waiting for a packet to finish, a context of
 * the scheduler whose next packet waits for a sync object) embeds a gsd_waiter with its own wake
 * function and adds it to the gsd_waitq of the thing it waits on (a packet, a sync object, an
 * allocation). The owner of that thing (the scheduler, the object layer, the memory manager)
 * only ever calls gsd_waitq_wake: it never knows who waits or what they do when woken.
 *
 * Wake semantics: gsd_waitq_wake detaches every waiter queued at the time of the call, then
 * calls each one's wake function once, oldest first. A waiter is off every queue when its wake
 * runs; one that still waits (its condition is not met yet) adds itself back. A wake function
 * may free its own waiter, cancel others, and add waiters to any queue (those added to the
 * queue being woken wait for the next gsd_waitq_wake). Loop thread only.
 */
#ifndef GSD_WAITER_H
#define GSD_WAITER_H

#include "core/list.h"

#include <stdbool.h>

typedef struct gsd_waiter gsd_waiter;

/* `event` is what the queue's owner documents for that queue (the packet that ended, the sync
 * object whose value changed, ...). */
typedef void (*gsd_wake_fn)(gsd_waiter *w, void *event);

struct gsd_waiter {
	gsd_list link; /* in a gsd_waitq, or pointing at itself */
	gsd_wake_fn wake;
};

typedef struct gsd_waitq {
	gsd_list head;
} gsd_waitq;

static inline void gsd_waitq_init(gsd_waitq *q)
{
	gsd_list_init(&q->head);
}

static inline bool gsd_waitq_empty(const gsd_waitq *q)
{
	return gsd_list_empty(&q->head);
}

static inline void gsd_waiter_init(gsd_waiter *w, gsd_wake_fn wake)
{
	gsd_list_init(&w->link);
	w->wake = wake;
}

static inline bool gsd_waiter_queued(const gsd_waiter *w)
{
	return !gsd_list_empty(&w->link);
}

static inline void gsd_waitq_add(gsd_waitq *q, gsd_waiter *w)
{
	gsd_list_push_back(&q->head, &w->link);
}

/* Takes the waiter off whatever queue it is on (safe when it is on none). */
static inline void gsd_waiter_cancel(gsd_waiter *w)
{
	gsd_list_remove(&w->link);
}

/* Wakes every waiter queued now, as described above. */
void gsd_waitq_wake(gsd_waitq *q, void *event);

#endif
