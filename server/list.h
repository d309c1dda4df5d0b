/*
 * Intrusive circular doubly linked list (as in the Linux kernel and libuv's queue.h).
 * An empty list head points at itself; a node that is in no list also points at itself, so
 * gs_list_remove is safe to call twice.
 */
#ifndef GS_LIST_H
#define GS_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gs_list {
	struct gs_list *next, *prev;
} gs_list;

#define GS_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void gs_list_init(gs_list *l)
{
	l->next = l->prev = l;
}
static inline bool gs_list_empty(const gs_list *l)
{
	return l->next == l;
}
static inline void gs_list_insert_before(gs_list *pos, gs_list *n)
{
	n->prev = pos->prev;
	n->next = pos;
	pos->prev->next = n;
	pos->prev = n;
}
static inline void gs_list_push_back(gs_list *head, gs_list *n)
{
	gs_list_insert_before(head, n);
}
static inline void gs_list_push_front(gs_list *head, gs_list *n)
{
	gs_list_insert_before(head->next, n);
}
static inline void gs_list_remove(gs_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}
static inline gs_list *gs_list_pop_front(gs_list *head)
{
	if (gs_list_empty(head))
		return NULL;
	gs_list *n = head->next;
	gs_list_remove(n);
	return n;
}

/* Iterates safely against removal of the current node. */
#define GS_LIST_FOREACH_SAFE(it, tmp, head)                                                        \
	for ((it) = (head)->next, (tmp) = (it)->next; (it) != (head);                              \
	     (it) = (tmp), (tmp) = (it)->next)

#endif
