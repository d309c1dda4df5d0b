/*
 * Intrusive circular doubly linked list (as in the Linux kernel and libuv's queue.h).
 * An empty list head points at itself; a node that is in no list also points at itself, so
 * gsd_list_remove is safe to call twice.
 */
#ifndef GSD_LIST_H
#define GSD_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gsd_list {
	struct gsd_list *next, *prev;
} gsd_list;

#define GSD_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void gsd_list_init(gsd_list *l)
{
	l->next = l->prev = l;
}
static inline bool gsd_list_empty(const gsd_list *l)
{
	return l->next == l;
}
static inline void gsd_list_insert_before(gsd_list *pos, gsd_list *n)
{
	n->prev = pos->prev;
	n->next = pos;
	pos->prev->next = n;
	pos->prev = n;
}
static inline void gsd_list_push_back(gsd_list *head, gsd_list *n)
{
	gsd_list_insert_before(head, n);
}
static inline void gsd_list_push_front(gsd_list *head, gsd_list *n)
{
	gsd_list_insert_before(head->next, n);
}
static inline void gsd_list_remove(gsd_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}
static inline gsd_list *gsd_list_pop_front(gsd_list *head)
{
	if (gsd_list_empty(head))
		return NULL;
	gsd_list *n = head->next;
	gsd_list_remove(n);
	return n;
}

/* Iterates safely against removal of the current node. */
#define GSD_LIST_FOREACH_SAFE(it, tmp, head)                                                       \
	for ((it) = (head)->next, (tmp) = (it)->next; (it) != (head);                              \
	     (it) = (tmp), (tmp) = (it)->next)

#endif
