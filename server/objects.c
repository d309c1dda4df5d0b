/*
 * Handle-named objects: devices, contexts, allocations, sync objects. Handles are daemon-wide
 * 64-bit numbers that are never reused; every lookup is scoped to the asking tenant, so one
 * tenant can never name another's objects (it gets NOT_FOUND, as for a handle that never
 * existed).
 *
 * Contexts and allocations are reference counted: the handle holds one reference and every
 * live packet one more, so destroying a handle while packets still run defers freeing the
 * memory until the last packet retires.
 */
#include "daemon.h"
#include "log.h"
#include "rpc.h"

#include <stdlib.h>

uint64_t gs_object_register(gs_daemon *d, gs_object *o, gs_obj_type type, gs_tenant *t)
{
	o->handle = ++d->next_handle;
	o->type = type;
	o->tenant = t;
	if (gs_hmap_put(&d->objects, o->handle, o) != 0)
		return 0;
	return o->handle;
}

void *gs_object_get(gs_daemon *d, uint64_t handle, gs_obj_type type, const gs_tenant *t)
{
	gs_object *o = gs_hmap_get(&d->objects, handle);
	if (!o || o->type != type || (t && o->tenant != t))
		return NULL;
	return o;
}

void gs_object_unregister(gs_daemon *d, gs_object *o)
{
	gs_hmap_del(&d->objects, o->handle);
}

void gs_audit_context_of(gs_daemon *d, const gs_context *c)
{
	gs_context_rec r = {.context = c->obj.handle,
	                    .tenant = c->obj.tenant->name,
	                    .device = c->dev->obj.handle,
	                    .adapter = c->dev->adapter->id,
	                    .node = c->node->index,
	                    .flags = c->flags,
	                    .priority_class = c->priority_class,
	                    .priority = c->priority,
	                    .dma_buffer_size = c->dma_buffer_size,
	                    .dma_buffer_segment_set = c->dma_buffer_segment_set,
	                    .dma_buffer_private_data_size = c->dma_buffer_private_data_size,
	                    .allocation_list_size = c->allocation_list_size,
	                    .patch_location_list_size = c->patch_location_list_size,
	                    .caps = c->caps,
	                    .paging_companion_node_id = c->paging_companion_node_id,
	                    .created_ns = c->created_ns,
	                    .destroyed_ns = c->destroyed ? gs_now_ns() : 0};
	gs_audit_context(d->audit, &r);
}

void gs_audit_allocation_of(gs_daemon *d, const gs_allocation *a)
{
	gs_allocation_rec r = {.allocation = a->obj.handle,
	                       .tenant = a->obj.tenant->name,
	                       .device = a->dev->obj.handle,
	                       .adapter = a->dev->adapter->id,
	                       .size = a->size,
	                       .supported_segment_set = a->supported_segment_set,
	                       .segment_preference = a->segment_preference,
	                       .priority = a->priority,
	                       .flags = a->flags,
	                       .segment = a->segment && gs_res_resident(a) ? a->segment->id : 0,
	                       .offset = a->offset,
	                       .created_ns = a->created_ns,
	                       .destroyed_ns = a->destroyed ? gs_now_ns() : 0};
	gs_audit_allocation(d->audit, &r);
}

void gs_context_put(gs_daemon *d, gs_context *c)
{
	(void)d;
	if (--c->refs == 0)
		free(c);
}

void gs_allocation_put(gs_daemon *d, gs_allocation *a)
{
	if (--a->refs > 0)
		return;
	/* Last reference: the memory goes back to its segment. */
	gs_res_free(d, a);
	a->obj.tenant->memory_used -= a->size;
	d->allocations--;
	free(a);
}

void gs_obj_context_destroy(gs_daemon *d, gs_context *c, const char *why)
{
	(void)why;
	gs_vidsch_context_removed(d, c);
	c->destroyed = true;
	gs_list_remove(&c->dev_link);
	gs_object_unregister(d, &c->obj);
	gs_audit_context_of(d, c);
	c->obj.tenant->contexts--;
	d->contexts--;
	gs_context_put(d, c);
}

void gs_obj_allocation_destroy(gs_daemon *d, gs_allocation *a)
{
	a->destroyed = true;
	gs_list_remove(&a->dev_link);
	gs_object_unregister(d, &a->obj);
	gs_audit_allocation_of(d, a);
	gs_allocation_put(d, a);
}

static void answer_sync_wait(gs_call *c, int status, uint64_t value, const char *msg)
{
	if (status != GS_ST(OK)) {
		gs_call_error(c, status, "%s", msg);
		return;
	}
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	Gpusched__V1__SyncWaitResponse sw = GPUSCHED__V1__SYNC_WAIT_RESPONSE__INIT;
	sw.value = value;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SYNC_WAIT;
	resp.sync_wait = &sw;
	gs_call_reply(c, &resp);
}

void gs_obj_sync_changed(gs_daemon *d, gs_sync *s)
{
	gs_list *it, *tmp;
	GS_LIST_FOREACH_SAFE(it, tmp, &s->waiters)
	{
		gs_call *c = GS_CONTAINER_OF(it, gs_call, link);
		if (c->wait_value <= s->value) {
			gs_list_remove(it);
			answer_sync_wait(c, GS_ST(OK), s->value, NULL);
		} else if (c->wait_value <= s->abandoned) {
			gs_list_remove(it);
			answer_sync_wait(c, GS_ST(FAULTED), s->value,
			                 "the packet that would signal this value faulted or was "
			                 "cancelled");
		}
	}
	gs_vidsch_sync_changed(d, s);
}

void gs_obj_sync_signal(gs_daemon *d, gs_sync *s, uint64_t value)
{
	/* A monitored fence never goes backwards. */
	if (value <= s->value)
		return;
	s->value = value;
	gs_obj_sync_changed(d, s);
}

void gs_obj_sync_destroy(gs_daemon *d, gs_sync *s)
{
	gs_list *it, *tmp;
	GS_LIST_FOREACH_SAFE(it, tmp, &s->waiters)
	{
		gs_call *c = GS_CONTAINER_OF(it, gs_call, link);
		gs_list_remove(it);
		answer_sync_wait(c, d->stopping ? GS_ST(SHUTTING_DOWN) : GS_ST(NOT_FOUND), s->value,
		                 "the sync object was destroyed while waited on");
	}
	gs_list_remove(&s->dev_link);
	gs_object_unregister(d, &s->obj);
	gs_vidsch_sync_destroyed(d, s);
	free(s);
}

void gs_obj_device_destroy(gs_daemon *d, gs_device *dev)
{
	gs_list *it, *tmp;
	GS_LIST_FOREACH_SAFE(it, tmp, &dev->contexts)
	gs_obj_context_destroy(d, GS_CONTAINER_OF(it, gs_context, dev_link), "device destroyed");
	GS_LIST_FOREACH_SAFE(it, tmp, &dev->allocations)
	gs_obj_allocation_destroy(d, GS_CONTAINER_OF(it, gs_allocation, dev_link));
	GS_LIST_FOREACH_SAFE(it, tmp, &dev->syncs)
	gs_obj_sync_destroy(d, GS_CONTAINER_OF(it, gs_sync, dev_link));
	gs_object_unregister(d, &dev->obj);
	gs_audit_note(d->audit, dev->obj.tenant->name, "device_destroyed", dev->name);
	dev->obj.tenant->devices--;
	d->devices--;
	free(dev);
}
