/*
 * Public calls for adapter information, devices, contexts, allocations, sync objects and
 * paging. Each fills one request body, goes through gsc_call and copies the answer out.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* ---- information ------------------------------------------------------------------------ */

static void copy_node(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__NodeInfo *n = (const Gpusched__V1__NodeInfo *)msg;

	*(gs_node_info *)entry = (gs_node_info){
	        .id = n->id,
	        .kind = (gs_node_kind)n->kind,
	        .engines = n->engines,
	        .paging = n->paging,
	        .fence = n->fence,
	        .queued = n->queued,
	};
}

static void copy_segment(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__SegmentInfo *s = (const Gpusched__V1__SegmentInfo *)msg;

	*(gs_segment_info *)entry = (gs_segment_info){
	        .id = s->id,
	        .kind = (gs_segment_kind)s->kind,
	        .size = s->size,
	        .used = s->used,
	        .largest_free = s->largest_free,
	        .cpu_visible = s->cpu_visible,
	};
}

/* The adapter's own fields; its nodes and segments are lists of their own (gs_info). */
static void copy_adapter(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__AdapterInfo *a = (const Gpusched__V1__AdapterInfo *)msg;

	*(gs_adapter_info *)entry = (gs_adapter_info){
	        .id = a->id,
	        .caps = a->caps,
	        .max_dma_buffer = a->max_dma_buffer,
	        .max_allocation_list = a->max_allocation_list,
	        .max_patch_list = a->max_patch_list,
	        .system_memory = a->system_memory,
	        .system_memory_used = a->system_memory_used,
	        .paging_chunk = a->paging_chunk,
	        .queues = a->queues,
	        .preempt_granularity_ns = a->preempt_granularity_ns,
	        .device_losses = a->device_losses,
	        .device_dead = a->device_dead,
	        .device_retrying = a->device_retrying,
	        .share_policy = (gs_share_policy)a->share_policy,
	        .time_slice_us = a->time_slice_us,
	        .kernels = a->kernels,
	        .max_invocations = a->max_invocations,
	        .max_push_constant_bytes = a->max_push_constant_bytes,
	        .max_storage_buffer_range = a->max_storage_buffer_range,
	        .max_uniform_buffer_range = a->max_uniform_buffer_range,
	        .binding_offset_alignment = a->binding_offset_alignment,
	};
	for (size_t i = 0; i < a->n_max_local_size && i < 3; i++)
		((gs_adapter_info *)entry)->max_local_size[i] = a->max_local_size[i];
}

#define ADAPTER_STRING(member) GSC_STRING(gs_adapter_info, Gpusched__V1__AdapterInfo, member)

/* gs_info reports any copy that fails as one of the whole adapter information. */
static const gsc_entry_kind node_kind = {
        .size = sizeof(gs_node_info),
        .copy = copy_node,
        GSC_STRINGS(GSC_STRING(gs_node_info, Gpusched__V1__NodeInfo, name)),
        .what = "adapter information",
};

static const gsc_entry_kind segment_kind = {
        .size = sizeof(gs_segment_info),
        .copy = copy_segment,
        GSC_STRINGS(GSC_STRING(gs_segment_info, Gpusched__V1__SegmentInfo, name)),
        .what = "adapter information",
};

static const gsc_entry_kind adapter_kind = {
        .size = sizeof(gs_adapter_info),
        .copy = copy_adapter,
        GSC_STRINGS(ADAPTER_STRING(name), ADAPTER_STRING(backend), ADAPTER_STRING(clock),
                    ADAPTER_STRING(device), ADAPTER_STRING(driver), ADAPTER_STRING(api),
                    ADAPTER_STRING(cpu_access)),
        .what = "adapter information",
};

void gs_info_free(gs_daemon_info *info)
{
	if (!info)
		return;
	for (size_t i = 0; i < info->adapter_count; i++) {
		gs_adapter_info *a = &info->adapters[i];

		gsc_free_list(&node_kind, a->nodes, a->node_count);
		gsc_free_list(&segment_kind, a->segments, a->segment_count);
	}
	gsc_free_list(&adapter_kind, info->adapters, info->adapter_count);
	free(info->version);
	free(info->tenant);
	free(info->events_url);
	free(info);
}

/* Copies an adapter's nodes and segments; on failure what was copied stays for gs_info_free
 * to release. */
static int copy_adapter_lists(gs_client *c, gs_adapter_info *dst,
                              const Gpusched__V1__AdapterInfo *src)
{
	void *list;
	int rv;

	rv = gsc_copy_list(c, &node_kind, (ProtobufCMessage *const *)src->nodes, src->n_nodes,
	                   &list, &dst->node_count);
	dst->nodes = list;
	if (rv != 0)
		return rv;
	rv = gsc_copy_list(c, &segment_kind, (ProtobufCMessage *const *)src->segments,
	                   src->n_segments, &list, &dst->segment_count);
	dst->segments = list;
	return rv;
}

int gs_info(gs_client *c, gs_daemon_info **out)
{
	Gpusched__V1__InfoRequest body = GPUSCHED__V1__INFO_REQUEST__INIT;
	Gpusched__V1__Response *resp;
	const Gpusched__V1__InfoResponse *r;
	gs_daemon_info *info;
	void *list;
	int rv;

	*out = NULL;
	rv = gsc_call(c, GSC_REQ(INFO), &body, GSC_RESP(INFO), 0, &resp);
	if (rv != 0)
		return rv;
	r = resp->info;

	rv = GS_ERR_NOMEM;
	info = calloc(1, sizeof(*info));
	if (!info)
		goto done;
	info->version = gsc_strdup0(r->version);
	info->tenant = gsc_strdup0(r->tenant);
	info->events_url = gsc_strdup0(r->events_url);
	info->tenant_view = r->tenant_view;
	if (!info->version || !info->tenant || !info->events_url)
		goto done;
	rv = gsc_copy_list(c, &adapter_kind, (ProtobufCMessage *const *)r->adapters, r->n_adapters,
	                   &list, &info->adapter_count);
	info->adapters = list;
	for (size_t i = 0; rv == 0 && i < info->adapter_count; i++)
		rv = copy_adapter_lists(c, &info->adapters[i], r->adapters[i]);
done:
	gsc_response_free(resp);
	if (rv != 0) {
		gs_info_free(info);
		return gsc_fail(c, rv, "out of memory copying the adapter information");
	}
	*out = info;
	return 0;
}

/* ---- devices and contexts --------------------------------------------------------------- */

static void copy_device(void *out, const ProtobufCMessage *answer)
{
	*(uint64_t *)out = ((const Gpusched__V1__DeviceCreateResponse *)answer)->device;
}

int gs_device_create(gs_client *c, const char *name, uint64_t *device)
{
	Gpusched__V1__DeviceCreateRequest body = GPUSCHED__V1__DEVICE_CREATE_REQUEST__INIT;

	/* protobuf-c only reads the string; the cast is its API's, not a write. */
	body.name = (char *)(name ? name : "");
	return gsc_call_copy(c, GSC_REQ(DEVICE_CREATE), &body, GSC_RESP(DEVICE_CREATE), copy_device,
	                     device);
}

int gs_device_destroy(gs_client *c, uint64_t device)
{
	Gpusched__V1__DeviceDestroyRequest body = GPUSCHED__V1__DEVICE_DESTROY_REQUEST__INIT;

	body.device = device;
	return gsc_call_plain(c, GSC_REQ(DEVICE_DESTROY), &body);
}

void gs_context_info_default(gs_context_info *info)
{
	*info = (gs_context_info){
	        .dma_buffer_size = 64u << 10,
	        .dma_buffer_segment_set = 0,
	        .dma_buffer_private_data_size = 0,
	        .allocation_list_size = 64,
	        .patch_location_list_size = 64,
	        .reserved = 0,
	        .caps = 0,
	        .paging_companion_node_id = 0,
	};
}

void gs_context_desc_init(gs_context_desc *desc, uint64_t device, uint32_t node)
{
	*desc = (gs_context_desc){
	        .device = device, .node = node, .priority_class = 2, /* NORMAL */
	};
	gs_context_info_default(&desc->info);
}

int gs_context_create(gs_client *c, const gs_context_desc *desc, uint64_t *context,
                      gs_context_info *effective)
{
	Gpusched__V1__ContextCreateRequest body = GPUSCHED__V1__CONTEXT_CREATE_REQUEST__INIT;
	Gpusched__V1__ContextInfo info = GPUSCHED__V1__CONTEXT_INFO__INIT;
	Gpusched__V1__Response *resp;
	const Gpusched__V1__ContextInfo *e;
	int rv;

	info.dma_buffer_size = desc->info.dma_buffer_size;
	info.dma_buffer_segment_set = desc->info.dma_buffer_segment_set;
	info.dma_buffer_private_data_size = desc->info.dma_buffer_private_data_size;
	info.allocation_list_size = desc->info.allocation_list_size;
	info.patch_location_list_size = desc->info.patch_location_list_size;
	info.reserved = desc->info.reserved;
	info.caps = desc->info.caps;
	info.paging_companion_node_id = desc->info.paging_companion_node_id;
	body.device = desc->device;
	body.node = desc->node;
	body.flags = desc->flags;
	body.info = &info;
	body.priority_class = desc->priority_class;
	body.priority = desc->priority;

	rv = gsc_call(c, GSC_REQ(CONTEXT_CREATE), &body, GSC_RESP(CONTEXT_CREATE), 0, &resp);
	if (rv != 0)
		return rv;
	*context = resp->context_create->context;
	e = resp->context_create->info;
	if (effective && e) {
		*effective = (gs_context_info){
		        .dma_buffer_size = e->dma_buffer_size,
		        .dma_buffer_segment_set = e->dma_buffer_segment_set,
		        .dma_buffer_private_data_size = e->dma_buffer_private_data_size,
		        .allocation_list_size = e->allocation_list_size,
		        .patch_location_list_size = e->patch_location_list_size,
		        .reserved = e->reserved,
		        .caps = e->caps,
		        .paging_companion_node_id = e->paging_companion_node_id,
		};
	} else if (effective) {
		/* A daemon that echoes nothing took the request as given. */
		*effective = desc->info;
	}
	gsc_response_free(resp);
	return 0;
}

int gs_context_destroy(gs_client *c, uint64_t context)
{
	Gpusched__V1__ContextDestroyRequest body = GPUSCHED__V1__CONTEXT_DESTROY_REQUEST__INIT;

	body.context = context;
	return gsc_call_plain(c, GSC_REQ(CONTEXT_DESTROY), &body);
}

int gs_context_set_priority(gs_client *c, uint64_t context, uint32_t priority_class,
                            int32_t priority)
{
	Gpusched__V1__ContextSetPriorityRequest body =
	        GPUSCHED__V1__CONTEXT_SET_PRIORITY_REQUEST__INIT;

	body.context = context;
	body.priority_class = priority_class;
	body.priority = priority;
	return gsc_call_plain(c, GSC_REQ(CONTEXT_SET_PRIORITY), &body);
}

static void copy_context_status(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__ContextQueryResponse *r =
	        (const Gpusched__V1__ContextQueryResponse *)answer;

	*(gs_context_status *)out = (gs_context_status){
	        .context = r->context,
	        .node = r->node,
	        .submitted_fence = r->submitted_fence,
	        .completed_fence = r->completed_fence,
	        .queued = r->queued,
	        .faulted = r->faulted,
	        .priority_class = r->priority_class,
	        .priority = r->priority,
	};
}

int gs_context_query(gs_client *c, uint64_t context, gs_context_status *out)
{
	Gpusched__V1__ContextQueryRequest body = GPUSCHED__V1__CONTEXT_QUERY_REQUEST__INIT;

	body.context = context;
	return gsc_call_copy(c, GSC_REQ(CONTEXT_QUERY), &body, GSC_RESP(CONTEXT_QUERY),
	                     copy_context_status, out);
}

/* ---- maintenance ------------------------------------------------------------------------ */

int gs_admin_drain(gs_client *c, uint32_t timeout_ms, gs_drain_report *out)
{
	Gpusched__V1__AdminDrainRequest body = GPUSCHED__V1__ADMIN_DRAIN_REQUEST__INIT;
	Gpusched__V1__Response *resp = NULL;

	body.timeout_ms = timeout_ms;
	body.confirm = "drain";
	/* The answer comes at the drain's end: up to its timeout, and the daemon's margin. */
	int rv = gsc_call(c, GSC_REQ(ADMIN_DRAIN), &body, GSC_RESP(ADMIN_DRAIN),
	                  (timeout_ms ? timeout_ms : 60000u) + 10000u, &resp);
	if (rv == 0 && out) {
		const Gpusched__V1__AdminDrainResponse *r = resp->admin_drain;
		*out = (gs_drain_report){.packets_at_start = r->packets_at_start,
		                         .packets_finished = r->packets_finished,
		                         .packets_cancelled = r->packets_cancelled,
		                         .packets_running = r->packets_running,
		                         .waited_ms = r->waited_ms,
		                         .timed_out = r->timed_out};
	}
	gsc_response_free(resp);
	return rv;
}

static void copy_admin_status(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__AdminStatusResponse *r =
	        (const Gpusched__V1__AdminStatusResponse *)answer;
	gs_admin_status *s = out;

	*s = (gs_admin_status){.uptime_ns = r->uptime_ns,
	                       .tenants = r->tenants,
	                       .packets_in_flight = r->packets_in_flight,
	                       .drain_left_ms = r->drain_left_ms,
	                       .drain_packets_at_start = r->drain_packets_at_start};
	snprintf(s->state, sizeof s->state, "%s", r->state ? r->state : "");
	snprintf(s->version, sizeof s->version, "%s", r->version ? r->version : "");
}

int gs_admin_reload(gs_client *c, uint32_t *changes, char *report, size_t cap)
{
	Gpusched__V1__AdminReloadRequest body = GPUSCHED__V1__ADMIN_RELOAD_REQUEST__INIT;
	Gpusched__V1__Response *resp = NULL;

	int rv = gsc_call(c, GSC_REQ(ADMIN_RELOAD), &body, GSC_RESP(ADMIN_RELOAD), 0, &resp);
	if (rv == 0) {
		if (changes)
			*changes = resp->admin_reload->changes;
		if (report && cap)
			snprintf(report, cap, "%s",
			         resp->admin_reload->report ? resp->admin_reload->report : "");
	}
	gsc_response_free(resp);
	return rv;
}

int gs_admin_status_get(gs_client *c, gs_admin_status *out)
{
	Gpusched__V1__AdminStatusRequest body = GPUSCHED__V1__ADMIN_STATUS_REQUEST__INIT;

	return gsc_call_copy(c, GSC_REQ(ADMIN_STATUS), &body, GSC_RESP(ADMIN_STATUS),
	                     copy_admin_status, out);
}

/* ---- allocations ------------------------------------------------------------------------ */

static void copy_placement(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__AllocationCreateResponse *r =
	        (const Gpusched__V1__AllocationCreateResponse *)answer;

	*(gs_allocation_placement *)out = (gs_allocation_placement){
	        .allocation = r->allocation,
	        .segment = r->segment,
	        .offset = r->offset,
	        .address = r->address,
	};
}

int gs_allocation_create(gs_client *c, const gs_allocation_desc *desc, gs_allocation_placement *out)
{
	Gpusched__V1__AllocationCreateRequest body = GPUSCHED__V1__ALLOCATION_CREATE_REQUEST__INIT;

	body.device = desc->device;
	body.size = desc->size;
	body.supported_segment_set = desc->supported_segment_set;
	body.segment_preference = desc->segment_preference;
	body.priority = desc->priority;
	body.flags = desc->flags;
	return gsc_call_copy(c, GSC_REQ(ALLOCATION_CREATE), &body, GSC_RESP(ALLOCATION_CREATE),
	                     copy_placement, out);
}

int gs_allocation_destroy(gs_client *c, uint64_t allocation)
{
	Gpusched__V1__AllocationDestroyRequest body =
	        GPUSCHED__V1__ALLOCATION_DESTROY_REQUEST__INIT;

	body.allocation = allocation;
	return gsc_call_plain(c, GSC_REQ(ALLOCATION_DESTROY), &body);
}

/* An AllocationQuery's answer, also the entry of an AllocationList's. */
static void copy_allocation_status(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__AllocationQueryResponse *r =
	        (const Gpusched__V1__AllocationQueryResponse *)answer;

	*(gs_allocation_status *)out = (gs_allocation_status){
	        .allocation = r->allocation,
	        .device = r->device,
	        .size = r->size,
	        .supported_segment_set = r->supported_segment_set,
	        .segment_preference = r->segment_preference,
	        .priority = r->priority,
	        .flags = r->flags,
	        .resident = r->resident,
	        .segment = r->segment,
	        .offset = r->offset,
	        .address = r->address,
	        .busy_packets = r->busy_packets,
	        .pinned = r->pinned,
	        .moves = r->moves,
	        .moving = r->moving,
	        .last_used_ns = r->last_used_ns,
	};
}

int gs_allocation_query(gs_client *c, uint64_t allocation, gs_allocation_status *out)
{
	Gpusched__V1__AllocationQueryRequest body = GPUSCHED__V1__ALLOCATION_QUERY_REQUEST__INIT;

	body.allocation = allocation;
	return gsc_call_copy(c, GSC_REQ(ALLOCATION_QUERY), &body, GSC_RESP(ALLOCATION_QUERY),
	                     copy_allocation_status, out);
}

static const gsc_entry_kind allocation_kind = {
        .size = sizeof(gs_allocation_status),
        .copy = copy_allocation_status,
        .what = "allocation list",
        .field = "allocations",
};

int gs_allocation_list(gs_client *c, uint64_t device, bool resident_only, uint32_t limit,
                       uint64_t after, gs_allocation_status **out, size_t *count)
{
	Gpusched__V1__AllocationListRequest body = GPUSCHED__V1__ALLOCATION_LIST_REQUEST__INIT;
	void *list;
	int rv;

	body.device = device;
	body.resident_only = resident_only;
	body.limit = limit;
	body.after = after;
	rv = gsc_call_list(c, GSC_REQ(ALLOCATION_LIST), &body, GSC_RESP(ALLOCATION_LIST),
	                   &allocation_kind, &list, count);
	*out = list;
	return rv;
}

void gs_allocation_list_free(gs_allocation_status *allocations)
{
	free(allocations);
}

int gs_allocation_set_priority(gs_client *c, uint64_t allocation, uint32_t priority)
{
	Gpusched__V1__AllocationSetPriorityRequest body =
	        GPUSCHED__V1__ALLOCATION_SET_PRIORITY_REQUEST__INIT;

	body.allocation = allocation;
	body.priority = priority;
	return gsc_call_plain(c, GSC_REQ(ALLOCATION_SET_PRIORITY), &body);
}

int gs_allocation_set_preference(gs_client *c, uint64_t allocation, uint32_t segment_preference)
{
	Gpusched__V1__AllocationSetPreferenceRequest body =
	        GPUSCHED__V1__ALLOCATION_SET_PREFERENCE_REQUEST__INIT;

	body.allocation = allocation;
	body.segment_preference = segment_preference;
	return gsc_call_plain(c, GSC_REQ(ALLOCATION_SET_PREFERENCE), &body);
}

/* One piece of a read: at most GS_IO_PIECE bytes. */
static int read_piece(gs_client *c, uint64_t allocation, uint64_t offset, uint8_t *buf, size_t size)
{
	Gpusched__V1__AllocationReadRequest body = GPUSCHED__V1__ALLOCATION_READ_REQUEST__INIT;
	Gpusched__V1__Response *resp;
	const ProtobufCBinaryData *data;
	int rv;

	body.allocation = allocation;
	body.offset = offset;
	body.size = size;
	rv = gsc_call(c, GSC_REQ(ALLOCATION_READ), &body, GSC_RESP(ALLOCATION_READ), 0, &resp);
	if (rv != 0)
		return rv;
	data = &resp->allocation_read->data;
	if (data->len != size) {
		rv = gsc_fail(c, GS_ERR_PROTOCOL, "asked for %zu bytes, got %zu", size, data->len);
	} else if (size) {
		memcpy(buf, data->data, size);
	}
	gsc_response_free(resp);
	return rv;
}

/* The size of the next piece of a transfer of `size` bytes of which `done` are done. */
static size_t piece(const gs_client *c, size_t size, size_t done)
{
	size_t left = size - done;
	return c && c->io_piece && left > c->io_piece ? c->io_piece : left;
}

int gs_allocation_read(gs_client *c, uint64_t allocation, uint64_t offset, void *buf, size_t size)
{
	if (size && !buf)
		return gsc_fail(c, GS_ERR_INVALID, "no buffer for %zu bytes", size);
	size_t done = 0;
	do { /* an empty read is one request too: it checks the handle */
		size_t n = piece(c, size, done);
		/* A range past the allocation's end is refused by the daemon at its first piece
		 * out of range, before any piece could wrap around. */
		int rv = read_piece(c, allocation, offset + done, (uint8_t *)buf + done, n);
		if (rv != 0)
			return rv;
		done += n;
	} while (done < size);
	return 0;
}

int gs_allocation_write(gs_client *c, uint64_t allocation, uint64_t offset, const void *data,
                        size_t size)
{
	if (size && !data)
		return gsc_fail(c, GS_ERR_INVALID, "no data for %zu bytes", size);
	size_t done = 0;
	do {
		Gpusched__V1__AllocationWriteRequest body =
		        GPUSCHED__V1__ALLOCATION_WRITE_REQUEST__INIT;
		size_t n = piece(c, size, done);
		body.allocation = allocation;
		body.offset = offset + done;
		/* Packing only reads the bytes; ProtobufCBinaryData just has no const member. */
		body.data.data = (uint8_t *)data + done;
		body.data.len = n;
		int rv = gsc_call_plain(c, GSC_REQ(ALLOCATION_WRITE), &body);
		if (rv != 0)
			return rv;
		done += n;
	} while (done < size);
	return 0;
}

/* ---- kernels ---------------------------------------------------------------------------- */

static void copy_kernel(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__KernelInfo *r = (const Gpusched__V1__KernelInfo *)answer;
	gs_kernel_info *k = out;

	memset(k, 0, sizeof(*k));
	k->kernel = r->kernel;
	k->device = r->device;
	if (r->hash.len == sizeof(k->hash))
		memcpy(k->hash, r->hash.data, sizeof(k->hash));
	snprintf(k->entry_point, sizeof(k->entry_point), "%s",
	         r->entry_point ? r->entry_point : "");
	for (size_t i = 0; i < r->n_local_size && i < 3; i++)
		k->local_size[i] = r->local_size[i];
	k->push_constant_bytes = r->push_constant_bytes;
	k->spirv_bytes = r->spirv_bytes;
	k->cached = r->cached;
	k->created_ns = r->created_ns;
	for (size_t i = 0; i < r->n_bindings && i < GS_KERNEL_MAX_BINDINGS; i++) {
		gs_kernel_binding_info *b = &k->bindings[k->nbindings++];
		b->binding = r->bindings[i]->binding;
		b->kind = (uint32_t)r->bindings[i]->kind;
		b->writes = r->bindings[i]->writes;
		snprintf(b->name, sizeof(b->name), "%s",
		         r->bindings[i]->name ? r->bindings[i]->name : "");
	}
}

static void copy_kernel_created(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__KernelCreateResponse *r =
	        (const Gpusched__V1__KernelCreateResponse *)answer;
	if (r->kernel)
		copy_kernel(out, &r->kernel->base);
	else
		memset(out, 0, sizeof(gs_kernel_info));
}

int gs_kernel_create(gs_client *c, uint64_t device, const void *spirv, size_t size,
                     const char *entry_point, gs_kernel_info *out)
{
	Gpusched__V1__KernelCreateRequest body = GPUSCHED__V1__KERNEL_CREATE_REQUEST__INIT;

	if (!spirv && size)
		return GS_ERR_INVALID;
	body.device = device;
	body.spirv.data = (uint8_t *)spirv;
	body.spirv.len = size;
	body.entry_point = (char *)(entry_point ? entry_point : "");
	return gsc_call_copy(c, GSC_REQ(KERNEL_CREATE), &body, GSC_RESP(KERNEL_CREATE),
	                     copy_kernel_created, out);
}

int gs_kernel_destroy(gs_client *c, uint64_t kernel)
{
	Gpusched__V1__KernelDestroyRequest body = GPUSCHED__V1__KERNEL_DESTROY_REQUEST__INIT;

	body.kernel = kernel;
	return gsc_call_plain(c, GSC_REQ(KERNEL_DESTROY), &body);
}

static const gsc_entry_kind kernel_kind = {
        .size = sizeof(gs_kernel_info),
        .copy = copy_kernel,
        .what = "kernel list",
        .field = "kernels",
};

int gs_kernel_list(gs_client *c, uint64_t device, gs_kernel_info **out, size_t *count)
{
	Gpusched__V1__KernelListRequest body = GPUSCHED__V1__KERNEL_LIST_REQUEST__INIT;
	void *list;
	int rv;

	body.device = device;
	rv = gsc_call_list(c, GSC_REQ(KERNEL_LIST), &body, GSC_RESP(KERNEL_LIST), &kernel_kind,
	                   &list, count);
	*out = list;
	return rv;
}

/* ---- sync objects ----------------------------------------------------------------------- */

static void copy_sync(void *out, const ProtobufCMessage *answer)
{
	*(uint64_t *)out = ((const Gpusched__V1__SyncCreateResponse *)answer)->sync;
}

int gs_sync_create(gs_client *c, uint64_t device, uint64_t initial_value, uint64_t *sync)
{
	Gpusched__V1__SyncCreateRequest body = GPUSCHED__V1__SYNC_CREATE_REQUEST__INIT;

	body.device = device;
	body.initial_value = initial_value;
	return gsc_call_copy(c, GSC_REQ(SYNC_CREATE), &body, GSC_RESP(SYNC_CREATE), copy_sync,
	                     sync);
}

int gs_sync_destroy(gs_client *c, uint64_t sync)
{
	Gpusched__V1__SyncDestroyRequest body = GPUSCHED__V1__SYNC_DESTROY_REQUEST__INIT;

	body.sync = sync;
	return gsc_call_plain(c, GSC_REQ(SYNC_DESTROY), &body);
}

int gs_sync_signal(gs_client *c, uint64_t sync, uint64_t value)
{
	Gpusched__V1__SyncSignalRequest body = GPUSCHED__V1__SYNC_SIGNAL_REQUEST__INIT;

	body.sync = sync;
	body.value = value;
	return gsc_call_plain(c, GSC_REQ(SYNC_SIGNAL), &body);
}

int gs_sync_wait(gs_client *c, uint64_t sync, uint64_t value, uint32_t timeout_ms,
                 uint64_t *current)
{
	gsc_waiter w;
	int rv;

	rv = gsc_wait(c, &w,
	              gsc_sync_wait_start(c, sync, value, timeout_ms, gsc_blocking(c, &w), NULL));
	if (rv == 0 && current)
		*current = w.ev.value;
	return rv;
}

/* ---- paging ----------------------------------------------------------------------------- */

/* The three paging requests answer the same PagingResponse, each in its own oneof member. */
static void copy_paging(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__PagingResponse *r = (const Gpusched__V1__PagingResponse *)answer;

	*(gs_paging_result *)out = (gs_paging_result){
	        .paging_fence = r->paging_fence,
	        .paging_sync = r->paging_sync,
	        .moves = r->moves,
	};
}

int gs_make_resident(gs_client *c, uint64_t device, const uint64_t *allocations, size_t count,
                     gs_paging_result *out)
{
	Gpusched__V1__MakeResidentRequest body = GPUSCHED__V1__MAKE_RESIDENT_REQUEST__INIT;

	if (count && !allocations)
		return gsc_fail(c, GS_ERR_INVALID, "no array for %zu allocations", count);
	body.device = device;
	body.n_allocations = count;
	body.allocations = (uint64_t *)allocations; /* read only, see allocation_write */
	return gsc_call_copy(c, GSC_REQ(MAKE_RESIDENT), &body, GSC_RESP(MAKE_RESIDENT), copy_paging,
	                     out);
}

int gs_evict(gs_client *c, uint64_t device, const uint64_t *allocations, size_t count,
             gs_paging_result *out)
{
	Gpusched__V1__EvictRequest body = GPUSCHED__V1__EVICT_REQUEST__INIT;

	if (count && !allocations)
		return gsc_fail(c, GS_ERR_INVALID, "no array for %zu allocations", count);
	body.device = device;
	body.n_allocations = count;
	body.allocations = (uint64_t *)allocations; /* read only, see allocation_write */
	return gsc_call_copy(c, GSC_REQ(EVICT), &body, GSC_RESP(EVICT), copy_paging, out);
}

int gs_transfer(gs_client *c, uint64_t allocation, uint32_t segment, uint32_t transfer_flags,
                gs_paging_result *out)
{
	Gpusched__V1__TransferRequest body = GPUSCHED__V1__TRANSFER_REQUEST__INIT;

	body.allocation = allocation;
	body.segment = segment;
	body.transfer_flags = transfer_flags;
	return gsc_call_copy(c, GSC_REQ(TRANSFER), &body, GSC_RESP(TRANSFER), copy_paging, out);
}
