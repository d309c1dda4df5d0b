#include "rpc/rules.h"

#include "gpusched.pb-c.h"
#include "wddm.h"

#include <stdarg.h>
#include <stdio.h>

#define ST(x) GPUSCHED__V1__STATUS__STATUS_##x

static int fail(int status, char *msg, size_t cap, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int fail(int status, char *msg, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
	return status;
}

int gsd_rules_context_create(const gsd_rules_adapter *a, const gsd_rules_context *c,
                             uint32_t priority_ceiling, char *msg, size_t cap)
{
	if (c->flags & ~GS_CTX_VALID_MASK)
		return fail(ST(CTX_BAD_FLAGS), msg, cap, "create flags 0x%x: unknown bits 0x%x",
		            c->flags, c->flags & ~GS_CTX_VALID_MASK);
	if (c->flags & GS_CTX_SYSTEM)
		return fail(ST(CTX_BAD_FLAGS), msg, cap,
		            "SystemContext (0x1) is reserved for the daemon's own paging contexts");
	if (c->info.reserved != 0)
		return fail(ST(CTX_RESERVED_NONZERO), msg, cap,
		            "DXGK_CONTEXTINFO.Reserved must be 0 (got 0x%x)", c->info.reserved);
	if (c->node >= a->nnodes)
		return fail(ST(CTX_BAD_NODE), msg, cap, "node %u does not exist (adapter has %u)",
		            c->node, a->nnodes);
	if (c->info.paging_companion_node_id >= a->nnodes)
		return fail(ST(CTX_BAD_PAGING_NODE), msg, cap,
		            "PagingCompanionNodeId %u does not exist (adapter has %u nodes)",
		            c->info.paging_companion_node_id, a->nnodes);
	if (c->info.caps & ~GS_CTXCAPS_VALID_MASK)
		return fail(ST(CTX_BAD_FLAGS), msg, cap, "Caps 0x%x: reserved bits 0x%x set",
		            c->info.caps, c->info.caps & ~GS_CTXCAPS_VALID_MASK);
	for (uint32_t id = 0; id < 32; id++) {
		if (!(c->info.dma_buffer_segment_set & (1u << id)))
			continue;
		if (id == 0 || a->segment_kind[id] < 0)
			return fail(
			        ST(CTX_DMA_SEGMENT_UNKNOWN), msg, cap,
			        "DmaBufferSegmentSet 0x%x names segment %u, which does not exist",
			        c->info.dma_buffer_segment_set, id);
		if (a->segment_kind[id] != GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE)
			return fail(ST(CTX_DMA_SEGMENT_NOT_APERTURE), msg, cap,
			            "DmaBufferSegmentSet 0x%x names memory segment %u: DMA buffers "
			            "may live in aperture segments only",
			            c->info.dma_buffer_segment_set, id);
	}
	if ((c->flags & GS_CTX_GDI) && c->info.allocation_list_size != GS_GDI_ALLOCATION_LIST_SIZE)
		return fail(ST(CTX_GDI_ALLOCATION_LIST), msg, cap,
		            "a GdiContext must use AllocationListSize 256 (got %u)",
		            c->info.allocation_list_size);
	if (c->info.dma_buffer_size == 0 || c->info.dma_buffer_size > a->max_dma_buffer)
		return fail(ST(CTX_BAD_SIZE), msg, cap, "DmaBufferSize %u must be 1..%u",
		            c->info.dma_buffer_size, a->max_dma_buffer);
	if (c->info.allocation_list_size > a->max_allocation_list)
		return fail(ST(CTX_BAD_SIZE), msg, cap, "AllocationListSize %u exceeds %u",
		            c->info.allocation_list_size, a->max_allocation_list);
	if (c->info.patch_location_list_size > a->max_patch_list)
		return fail(ST(CTX_BAD_SIZE), msg, cap, "PatchLocationListSize %u exceeds %u",
		            c->info.patch_location_list_size, a->max_patch_list);
	if (c->info.dma_buffer_private_data_size > GSD_MAX_PRIVATE_DATA)
		return fail(ST(CTX_BAD_SIZE), msg, cap, "DmaBufferPrivateDataSize %u exceeds %u",
		            c->info.dma_buffer_private_data_size, GSD_MAX_PRIVATE_DATA);
	if (c->priority_class > GS_PRIORITY_CLASS_MAX)
		return fail(ST(INVALID_ARGUMENT), msg, cap, "priority class %u must be 0..5",
		            c->priority_class);
	if (c->priority < -7 || c->priority > 7)
		return fail(ST(INVALID_ARGUMENT), msg, cap, "context priority %d must be -7..+7",
		            c->priority);
	if (c->priority_class > priority_ceiling)
		return fail(ST(PERMISSION_DENIED), msg, cap,
		            "priority class %s is above the tenant's ceiling %s",
		            gs_priority_class_name(c->priority_class),
		            gs_priority_class_name(priority_ceiling));
	return ST(OK);
}

int gsd_rules_submit_flags(uint32_t flags, char *msg, size_t cap)
{
	if (flags & ~GS_SUBMIT_VALID_MASK)
		return fail(ST(RESERVED_BITS), msg, cap,
		            "submit flags 0x%x: reserved bits 0x%x must be zero", flags,
		            flags & ~GS_SUBMIT_VALID_MASK);
	if (flags & GS_SUBMIT_CLIENT_REFUSED) {
		char names[128];
		gs_flags_format(gs_submit_flag_names, flags & GS_SUBMIT_CLIENT_REFUSED, names,
		                sizeof(names));
		return fail(ST(FLAGS_NOT_ALLOWED), msg, cap,
		            "submit flags 0x%x: %s: only the daemon sets %s", flags, names,
		            flags & GS_SUBMIT_DAEMON_ONLY ? "these (its own packets)" : "these");
	}
	return ST(OK);
}

uint32_t gsd_rules_effective_set(const gsd_rules_adapter *a, uint32_t supported_set)
{
	if (supported_set)
		return supported_set;
	uint32_t all = 0;
	for (uint32_t id = 1; id < 32; id++)
		if (a->segment_kind[id] >= 0)
			all |= 1u << id;
	return all;
}

int gsd_rules_allocation(const gsd_rules_adapter *a, uint64_t size, uint32_t supported_set,
                         uint32_t preference, uint32_t priority, uint32_t flags, char *msg,
                         size_t cap)
{
	if (size == 0)
		return fail(ST(INVALID_ARGUMENT), msg, cap, "allocation size must be > 0");
	if (flags & ~GS_ALLOC_VALID_MASK)
		return fail(ST(RESERVED_BITS), msg, cap, "allocation flags 0x%x: unknown bits 0x%x",
		            flags, flags & ~GS_ALLOC_VALID_MASK);
	for (uint32_t id = 0; id < 32; id++)
		if ((supported_set & (1u << id)) && (id == 0 || a->segment_kind[id] < 0))
			return fail(ST(SEGMENT_UNKNOWN), msg, cap,
			            "supported segment set 0x%x names segment %u, which does not "
			            "exist",
			            supported_set, id);
	uint32_t set = gsd_rules_effective_set(a, supported_set);
	switch (gs_segpref_validate(preference, set)) {
	case GS_SEGPREF_OK:
		break;
	case GS_SEGPREF_RESERVED:
		return fail(ST(RESERVED_BITS), msg, cap,
		            "segment preference 0x%08x: reserved bits 30-31 must be zero",
		            preference);
	case GS_SEGPREF_AFTER_END:
		return fail(
		        ST(SEGMENT_PREFERENCE), msg, cap,
		        "segment preference 0x%08x: a segment follows the end of the list (id 0)",
		        preference);
	default:
		return fail(ST(SEGMENT_PREFERENCE), msg, cap,
		            "segment preference 0x%08x names a segment outside the supported set "
		            "0x%x",
		            preference, set);
	}
	(void)priority; /* 0 means NORMAL on the wire; every other value is a valid priority */
	return ST(OK);
}

void gsd_rules_context_of(const Gpusched__V1__ContextCreateRequest *q, gsd_rules_context *out)
{
	const Gpusched__V1__ContextInfo *i = q->info;
	*out = (gsd_rules_context){
	        .node = q->node,
	        .flags = q->flags,
	        .info = {.dma_buffer_size = i->dma_buffer_size,
	                 .dma_buffer_segment_set = i->dma_buffer_segment_set,
	                 .dma_buffer_private_data_size = i->dma_buffer_private_data_size,
	                 .allocation_list_size = i->allocation_list_size,
	                 .patch_location_list_size = i->patch_location_list_size,
	                 .reserved = i->reserved,
	                 .caps = i->caps,
	                 .paging_companion_node_id = i->paging_companion_node_id},
	        .priority_class = q->priority_class,
	        .priority = q->priority};
}
