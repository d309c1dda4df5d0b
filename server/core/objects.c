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
#include "core/daemon.h"
#include "core/log.h"
#include "rpc/rpc.h"

#include <stdlib.h>

uint64_t gsd_object_register(gsd_daemon *d, gsd_object *o, gsd_obj_type type, gsd_tenant *t)
{
	o->handle = ++d->next_handle;
	o->type = type;
	o->tenant = t;
	if (gsd_hmap_put(&d->objects, o->handle, o) != 0)
		return 0;
	return o->handle;
}

void *gsd_object_get(gsd_daemon *d, uint64_t handle, gsd_obj_type type, const gsd_tenant *t)
{
	gsd_object *o = gsd_hmap_get(&d->objects, handle);
	if (!o || o->type != type || (t && o->tenant != t))
		return NULL;
	return o;
}

void gsd_object_unregister(gsd_daemon *d, gsd_object *o)
{
	gsd_hmap_del(&d->objects, o->handle);
}

void gsd_audit_context_of(gsd_daemon *d, const gsd_context *c)
{
	gsd_context_rec r = {.context = c->obj.handle,
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
	                     .destroyed_ns = c->destroyed ? gsd_now_ns() : 0};
	gsd_audit_context(d->audit, &r);
}

void gsd_audit_allocation_of(gsd_daemon *d, const gsd_allocation *a)
{
	gsd_allocation_rec r = {.allocation = a->obj.handle,
	                        .tenant = a->obj.tenant->name,
	                        .device = a->dev->obj.handle,
	                        .adapter = a->dev->adapter->id,
	                        .size = a->size,
	                        .supported_segment_set = a->supported_segment_set,
	                        .segment_preference = a->segment_preference,
	                        .priority = a->priority,
	                        .flags = a->flags,
	                        .segment = a->segment && gsd_vidmm_resident(a) ? a->segment->id : 0,
	                        .offset = a->offset,
	                        .created_ns = a->created_ns,
	                        .destroyed_ns = a->destroyed ? gsd_now_ns() : 0};
	gsd_audit_allocation(d->audit, &r);
}

void gsd_context_put(gsd_daemon *d, gsd_context *c)
{
	(void)d;
	if (--c->refs == 0)
		free(c);
}

void gsd_allocation_put(gsd_daemon *d, gsd_allocation *a)
{
	if (--a->refs > 0)
		return;
	/* Last reference: the memory goes back to its segment. */
	gsd_vidmm_free(d, a);
	a->obj.tenant->memory_used -= a->size;
	d->allocations--;
	free(a);
}

void gsd_context_destroy(gsd_daemon *d, gsd_context *c, const char *why)
{
	(void)why;
	gsd_vidsch_context_removed(d, c);
	c->destroyed = true;
	gsd_list_remove(&c->dev_link);
	gsd_object_unregister(d, &c->obj);
	gsd_audit_context_of(d, c);
	c->obj.tenant->contexts--;
	d->contexts--;
	gsd_context_put(d, c);
}

void gsd_allocation_destroy(gsd_daemon *d, gsd_allocation *a)
{
	a->destroyed = true;
	gsd_list_remove(&a->dev_link);
	gsd_object_unregister(d, &a->obj);
	gsd_audit_allocation_of(d, a);
	gsd_allocation_put(d, a);
}

static void answer_sync_wait(gsd_call *c, int status, uint64_t value, const char *msg)
{
	if (status != GSD_ST(OK)) {
		gsd_call_error(c, status, "%s", msg);
		return;
	}
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	Gpusched__V1__SyncWaitResponse sw = GPUSCHED__V1__SYNC_WAIT_RESPONSE__INIT;
	sw.value = value;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SYNC_WAIT;
	resp.sync_wait = &sw;
	gsd_call_reply(c, &resp);
}

void gsd_sync_changed(gsd_daemon *d, gsd_sync *s)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &s->waiters)
	{
		gsd_call *c = GSD_CONTAINER_OF(it, gsd_call, link);
		if (c->wait_value <= s->value) {
			gsd_list_remove(it);
			answer_sync_wait(c, GSD_ST(OK), s->value, NULL);
		} else if (c->wait_value <= s->abandoned) {
			gsd_list_remove(it);
			answer_sync_wait(c, GSD_ST(FAULTED), s->value,
			                 "the packet that would signal this value faulted or was "
			                 "cancelled");
		}
	}
	gsd_vidsch_sync_changed(d, s);
}

void gsd_sync_signal(gsd_daemon *d, gsd_sync *s, uint64_t value)
{
	/* A monitored fence never goes backwards. */
	if (value <= s->value)
		return;
	s->value = value;
	gsd_sync_changed(d, s);
}

void gsd_sync_destroy(gsd_daemon *d, gsd_sync *s)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &s->waiters)
	{
		gsd_call *c = GSD_CONTAINER_OF(it, gsd_call, link);
		gsd_list_remove(it);
		answer_sync_wait(c, d->stopping ? GSD_ST(SHUTTING_DOWN) : GSD_ST(NOT_FOUND),
		                 s->value, "the sync object was destroyed while waited on");
	}
	gsd_list_remove(&s->dev_link);
	gsd_object_unregister(d, &s->obj);
	gsd_vidsch_sync_destroyed(d, s);
	free(s);
}

void gsd_device_destroy(gsd_daemon *d, gsd_device *dev)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->contexts)
	gsd_context_destroy(d, GSD_CONTAINER_OF(it, gsd_context, dev_link), "device destroyed");
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->allocations)
	gsd_allocation_destroy(d, GSD_CONTAINER_OF(it, gsd_allocation, dev_link));
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->syncs)
	gsd_sync_destroy(d, GSD_CONTAINER_OF(it, gsd_sync, dev_link));
	gsd_object_unregister(d, &dev->obj);
	gsd_audit_note(d->audit, dev->obj.tenant->name, "device_destroyed", dev->name);
	dev->obj.tenant->devices--;
	d->devices--;
	free(dev);
}
