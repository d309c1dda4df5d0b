/*
 * Names of status codes and of the contract's enumerations. The public enums copy the
 * values of gpusched.proto; the static asserts keep the two in step when the proto changes.
 */
#include <stdio.h>
#include <strings.h>

#include "rpc.h"

#define SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " differs from the proto")

SAME(GS_STATUS_OK, GPUSCHED__V1__STATUS__STATUS_OK);
SAME(GS_STATUS_MALFORMED, GPUSCHED__V1__STATUS__STATUS_MALFORMED);
SAME(GS_STATUS_TOO_LARGE, GPUSCHED__V1__STATUS__STATUS_TOO_LARGE);
SAME(GS_STATUS_INVALID_ARGUMENT, GPUSCHED__V1__STATUS__STATUS_INVALID_ARGUMENT);
SAME(GS_STATUS_NOT_FOUND, GPUSCHED__V1__STATUS__STATUS_NOT_FOUND);
SAME(GS_STATUS_RESERVED_BITS, GPUSCHED__V1__STATUS__STATUS_RESERVED_BITS);
SAME(GS_STATUS_FLAGS_NOT_ALLOWED, GPUSCHED__V1__STATUS__STATUS_FLAGS_NOT_ALLOWED);
SAME(GS_STATUS_UNAUTHENTICATED, GPUSCHED__V1__STATUS__STATUS_UNAUTHENTICATED);
SAME(GS_STATUS_PERMISSION_DENIED, GPUSCHED__V1__STATUS__STATUS_PERMISSION_DENIED);
SAME(GS_STATUS_QUOTA_EXCEEDED, GPUSCHED__V1__STATUS__STATUS_QUOTA_EXCEEDED);
SAME(GS_STATUS_OUT_OF_MEMORY, GPUSCHED__V1__STATUS__STATUS_OUT_OF_MEMORY);
SAME(GS_STATUS_TIMEOUT, GPUSCHED__V1__STATUS__STATUS_TIMEOUT);
SAME(GS_STATUS_FAULTED, GPUSCHED__V1__STATUS__STATUS_FAULTED);
SAME(GS_STATUS_BANNED, GPUSCHED__V1__STATUS__STATUS_BANNED);
SAME(GS_STATUS_BUSY, GPUSCHED__V1__STATUS__STATUS_BUSY);
SAME(GS_STATUS_SHUTTING_DOWN, GPUSCHED__V1__STATUS__STATUS_SHUTTING_DOWN);
SAME(GS_STATUS_UNIMPLEMENTED, GPUSCHED__V1__STATUS__STATUS_UNIMPLEMENTED);
SAME(GS_STATUS_INTERNAL, GPUSCHED__V1__STATUS__STATUS_INTERNAL);
SAME(GS_STATUS_CTX_DMA_SEGMENT_NOT_APERTURE,
     GPUSCHED__V1__STATUS__STATUS_CTX_DMA_SEGMENT_NOT_APERTURE);
SAME(GS_STATUS_CTX_GDI_ALLOCATION_LIST, GPUSCHED__V1__STATUS__STATUS_CTX_GDI_ALLOCATION_LIST);
SAME(GS_STATUS_CTX_RESERVED_NONZERO, GPUSCHED__V1__STATUS__STATUS_CTX_RESERVED_NONZERO);
SAME(GS_STATUS_CTX_BAD_NODE, GPUSCHED__V1__STATUS__STATUS_CTX_BAD_NODE);
SAME(GS_STATUS_CTX_BAD_PAGING_NODE, GPUSCHED__V1__STATUS__STATUS_CTX_BAD_PAGING_NODE);
SAME(GS_STATUS_CTX_DMA_SEGMENT_UNKNOWN, GPUSCHED__V1__STATUS__STATUS_CTX_DMA_SEGMENT_UNKNOWN);
SAME(GS_STATUS_CTX_BAD_SIZE, GPUSCHED__V1__STATUS__STATUS_CTX_BAD_SIZE);
SAME(GS_STATUS_CTX_BAD_FLAGS, GPUSCHED__V1__STATUS__STATUS_CTX_BAD_FLAGS);
SAME(GS_STATUS_DMA_INVALID, GPUSCHED__V1__STATUS__STATUS_DMA_INVALID);
SAME(GS_STATUS_PATCH_INVALID, GPUSCHED__V1__STATUS__STATUS_PATCH_INVALID);
SAME(GS_STATUS_LIST_TOO_LARGE, GPUSCHED__V1__STATUS__STATUS_LIST_TOO_LARGE);
SAME(GS_STATUS_SEGMENT_PREFERENCE, GPUSCHED__V1__STATUS__STATUS_SEGMENT_PREFERENCE);
SAME(GS_STATUS_SEGMENT_UNKNOWN, GPUSCHED__V1__STATUS__STATUS_SEGMENT_UNKNOWN);
SAME(GS_STATUS_ALLOCATION_PRIORITY, GPUSCHED__V1__STATUS__STATUS_ALLOCATION_PRIORITY);
SAME(GS_STATUS_TRANSFER_FLAGS, GPUSCHED__V1__STATUS__STATUS_TRANSFER_FLAGS);
SAME(GS_STATUS_NOT_RESIDENT_TOGETHER, GPUSCHED__V1__STATUS__STATUS_NOT_RESIDENT_TOGETHER);
SAME(GS_STATUS_AUDIT_UNAVAILABLE, GPUSCHED__V1__STATUS__STATUS_AUDIT_UNAVAILABLE);
SAME(GS_STATUS_UNAVAILABLE, GPUSCHED__V1__STATUS__STATUS_UNAVAILABLE);
SAME(GS_PACKET_UNKNOWN, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_UNKNOWN);
SAME(GS_PACKET_SUBMITTED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_SUBMITTED);
SAME(GS_PACKET_READY, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_READY);
SAME(GS_PACKET_RUNNING, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_RUNNING);
SAME(GS_PACKET_COMPLETED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_COMPLETED);
SAME(GS_PACKET_FAULTED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_FAULTED);
SAME(GS_PACKET_ABORTED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_ABORTED);
SAME(GS_PACKET_PREEMPTED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_PREEMPTED);
SAME(GS_PACKET_RESUBMITTED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_RESUBMITTED);
SAME(GS_PACKET_CANCELLED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_CANCELLED);
SAME(GS_PACKET_REJECTED, GPUSCHED__V1__PACKET_STATE__PACKET_STATE_REJECTED);
SAME(GS_NODE_3D, GPUSCHED__V1__NODE_KIND__NODE_KIND_3D);
SAME(GS_NODE_COMPUTE, GPUSCHED__V1__NODE_KIND__NODE_KIND_COMPUTE);
SAME(GS_NODE_COPY, GPUSCHED__V1__NODE_KIND__NODE_KIND_COPY);
SAME(GS_SEGMENT_MEMORY, GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY);
SAME(GS_SEGMENT_APERTURE, GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE);
SAME(GS_TENANT_PROCESS, GPUSCHED__V1__TENANT_KIND__TENANT_KIND_PROCESS);
SAME(GS_TENANT_VM, GPUSCHED__V1__TENANT_KIND__TENANT_KIND_VM);
SAME(GS_SHARE_BEST_EFFORT, GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_BEST_EFFORT);
SAME(GS_SHARE_EQUAL_SHARE, GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_EQUAL_SHARE);
SAME(GS_SHARE_FIXED_SHARE, GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_FIXED_SHARE);
SAME(GS_MOVE_UNKNOWN, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_UNKNOWN);
SAME(GS_MOVE_PLACE, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_PLACE);
SAME(GS_MOVE_PAGE_IN, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_PAGE_IN);
SAME(GS_MOVE_EVICT, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_EVICT);
SAME(GS_MOVE_TRANSFER, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_TRANSFER);
SAME(GS_MOVE_EVICT_REQUEST, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_EVICT_REQUEST);
SAME(GS_MOVE_RESIDENT, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_RESIDENT);
SAME(GS_MOVE_FREE, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_FREE);
SAME(GS_MOVE_COMPACT, GPUSCHED__V1__MOVE_KIND__MOVE_KIND_COMPACT);

typedef struct status_text {
	int status;
	const char *name;
	const char *text;
} status_text;

static const status_text status_texts[] = {
        {GS_STATUS_OK, "OK", "success"},
        {GS_STATUS_MALFORMED, "MALFORMED", "the request bytes do not decode"},
        {GS_STATUS_TOO_LARGE, "TOO_LARGE", "a message or field exceeds a configured limit"},
        {GS_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT", "a field value is out of range"},
        {GS_STATUS_NOT_FOUND, "NOT_FOUND", "unknown handle (or one owned by another tenant)"},
        {GS_STATUS_RESERVED_BITS, "RESERVED_BITS", "reserved bits set in a WDDM flags value"},
        {GS_STATUS_FLAGS_NOT_ALLOWED, "FLAGS_NOT_ALLOWED", "flags only the daemon may use"},
        {GS_STATUS_UNAUTHENTICATED, "UNAUTHENTICATED", "unknown or missing tenant token"},
        {GS_STATUS_PERMISSION_DENIED, "PERMISSION_DENIED", "the tenant may not do this"},
        {GS_STATUS_QUOTA_EXCEEDED, "QUOTA_EXCEEDED", "a tenant quota or daemon limit is reached"},
        {GS_STATUS_OUT_OF_MEMORY, "OUT_OF_MEMORY", "no segment has room for the allocation"},
        {GS_STATUS_TIMEOUT, "TIMEOUT", "the wait timed out before its condition"},
        {GS_STATUS_FAULTED, "FAULTED", "the context or device is in an error state"},
        {GS_STATUS_BANNED, "BANNED", "the tenant is banned (too many GPU timeouts)"},
        {GS_STATUS_BUSY, "BUSY", "the object is in use"},
        {GS_STATUS_SHUTTING_DOWN, "SHUTTING_DOWN", "the daemon is stopping"},
        {GS_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED", "the daemon does not serve this request yet"},
        {GS_STATUS_INTERNAL, "INTERNAL", "daemon internal error (see its log)"},
        {GS_STATUS_CTX_DMA_SEGMENT_NOT_APERTURE, "CTX_DMA_SEGMENT_NOT_APERTURE",
         "the DMA buffer segment set names a memory segment"},
        {GS_STATUS_CTX_GDI_ALLOCATION_LIST, "CTX_GDI_ALLOCATION_LIST",
         "a GDI context needs an allocation list of 256 entries"},
        {GS_STATUS_CTX_RESERVED_NONZERO, "CTX_RESERVED_NONZERO",
         "DXGK_CONTEXTINFO.Reserved is not 0"},
        {GS_STATUS_CTX_BAD_NODE, "CTX_BAD_NODE", "the context node does not exist"},
        {GS_STATUS_CTX_BAD_PAGING_NODE, "CTX_BAD_PAGING_NODE",
         "the paging companion node does not exist"},
        {GS_STATUS_CTX_DMA_SEGMENT_UNKNOWN, "CTX_DMA_SEGMENT_UNKNOWN",
         "the DMA buffer segment set names no such segment"},
        {GS_STATUS_CTX_BAD_SIZE, "CTX_BAD_SIZE", "a context size is 0 or above the maximum"},
        {GS_STATUS_CTX_BAD_FLAGS, "CTX_BAD_FLAGS", "unknown or daemon-only context flags or caps"},
        {GS_STATUS_DMA_INVALID, "DMA_INVALID", "the DMA buffer does not decode"},
        {GS_STATUS_PATCH_INVALID, "PATCH_INVALID", "a patch location is out of range"},
        {GS_STATUS_LIST_TOO_LARGE, "LIST_TOO_LARGE",
         "an allocation or patch list or the DMA buffer is above the maximum"},
        {GS_STATUS_SEGMENT_PREFERENCE, "SEGMENT_PREFERENCE",
         "the preference names a segment outside the supported set"},
        {GS_STATUS_SEGMENT_UNKNOWN, "SEGMENT_UNKNOWN",
         "the supported set names a segment that does not exist"},
        {GS_STATUS_ALLOCATION_PRIORITY, "ALLOCATION_PRIORITY", "allocation priority 0 is invalid"},
        {GS_STATUS_TRANSFER_FLAGS, "TRANSFER_FLAGS", "the transfer flags contradict the move"},
        {GS_STATUS_NOT_RESIDENT_TOGETHER, "NOT_RESIDENT_TOGETHER",
         "the allocations cannot all be resident at once"},
        {GS_STATUS_AUDIT_UNAVAILABLE, "AUDIT_UNAVAILABLE",
         "the audit file cannot record now: nothing was done; safe to retry"},
        {GS_STATUS_UNAVAILABLE, "UNAVAILABLE",
         "the relay has no link to the host daemon now; it reconnects by itself"},
        {GS_ERR_TRANSPORT, "TRANSPORT", "cannot reach the daemon"},
        {GS_ERR_TIMEOUT, "TIMEOUT", "no response from the daemon in time"},
        {GS_ERR_PROTOCOL, "PROTOCOL", "the daemon's response does not match the request"},
        {GS_ERR_NOMEM, "NOMEM", "out of memory"},
        {GS_ERR_INVALID, "INVALID", "invalid argument"},
        {GS_ERR_CANCELLED, "CANCELLED", "the request was cancelled before its answer"},
        {GS_ERR_BUSY, "BUSY", "too many requests in flight on this client"},
};

static const status_text *find_status(int status)
{
	for (size_t i = 0; i < sizeof(status_texts) / sizeof(status_texts[0]); i++)
		if (status_texts[i].status == status)
			return &status_texts[i];
	return NULL;
}

const char *gs_status_name(int status)
{
	/* Unknown codes come from a newer daemon; a static buffer keeps the call allocation
	 * free and is fine for the one-client-per-thread model's error reporting. */
	static _Thread_local char unknown[32];
	const status_text *t = find_status(status);

	if (t)
		return t->name;
	snprintf(unknown, sizeof(unknown), "STATUS_%d", status);
	return unknown;
}

const char *gs_strerror(int status)
{
	const status_text *t = find_status(status);

	return t ? t->text : "unknown status";
}

static const char *const packet_state_names[] = {
        [GS_PACKET_UNKNOWN] = "UNKNOWN",
        [GS_PACKET_SUBMITTED] = "SUBMITTED",
        [GS_PACKET_READY] = "READY",
        [GS_PACKET_RUNNING] = "RUNNING",
        [GS_PACKET_COMPLETED] = "COMPLETED",
        [GS_PACKET_FAULTED] = "FAULTED",
        [GS_PACKET_ABORTED] = "ABORTED",
        [GS_PACKET_PREEMPTED] = "PREEMPTED",
        [GS_PACKET_RESUBMITTED] = "RESUBMITTED",
        [GS_PACKET_CANCELLED] = "CANCELLED",
        [GS_PACKET_REJECTED] = "REJECTED",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Looks a value up in a dense name table; "UNKNOWN" past its end. */
static const char *table_name(const char *const *names, size_t count, unsigned v)
{
	return v < count && names[v] ? names[v] : "UNKNOWN";
}

const char *gs_packet_state_name(gs_packet_state state)
{
	return table_name(packet_state_names, COUNT(packet_state_names), (unsigned)state);
}

int gs_packet_state_parse(const char *name, gs_packet_state *out)
{
	if (!name)
		return GS_ERR_INVALID;
	/* UNKNOWN (0) is the wire's "any", not a state one asks for by name. */
	for (unsigned i = 1; i < COUNT(packet_state_names); i++) {
		if (strcasecmp(name, packet_state_names[i]) == 0) {
			*out = (gs_packet_state)i;
			return 0;
		}
	}
	return GS_ERR_INVALID;
}

bool gs_packet_state_is_final(gs_packet_state state)
{
	return state == GS_PACKET_COMPLETED || state == GS_PACKET_FAULTED ||
	       state == GS_PACKET_CANCELLED || state == GS_PACKET_REJECTED;
}

const char *gs_node_kind_name(gs_node_kind kind)
{
	static const char *const names[] = {"3D", "COMPUTE", "COPY"};

	return table_name(names, COUNT(names), (unsigned)kind);
}

const char *gs_segment_kind_name(gs_segment_kind kind)
{
	static const char *const names[] = {"MEMORY", "APERTURE"};

	return table_name(names, COUNT(names), (unsigned)kind);
}

const char *gs_tenant_kind_name(gs_tenant_kind kind)
{
	static const char *const names[] = {"PROCESS", "VM"};

	return table_name(names, COUNT(names), (unsigned)kind);
}

const char *gs_share_policy_name(gs_share_policy policy)
{
	static const char *const names[] = {"BEST_EFFORT", "EQUAL_SHARE", "FIXED_SHARE",
	                                    "WEIGHTED"};

	return table_name(names, COUNT(names), (unsigned)policy);
}

const char *gs_move_kind_name(gs_move_kind kind)
{
	static const char *const names[] = {
	        [GS_MOVE_UNKNOWN] = "UNKNOWN",   [GS_MOVE_PLACE] = "PLACE",
	        [GS_MOVE_PAGE_IN] = "PAGE_IN",   [GS_MOVE_EVICT] = "EVICT",
	        [GS_MOVE_TRANSFER] = "TRANSFER", [GS_MOVE_EVICT_REQUEST] = "EVICT_REQUEST",
	        [GS_MOVE_RESIDENT] = "RESIDENT", [GS_MOVE_FREE] = "FREE",
	        [GS_MOVE_COMPACT] = "COMPACT",
	};

	return table_name(names, COUNT(names), (unsigned)kind);
}

const char *gs_async_kind_name(gs_async_kind kind)
{
	static const char *const names[] = {
	        [GS_ASYNC_SUBMIT] = "SUBMIT",
	        [GS_ASYNC_SUBMIT_BATCH] = "SUBMIT_BATCH",
	        [GS_ASYNC_PACKET_WAIT] = "PACKET_WAIT",
	        [GS_ASYNC_SYNC_WAIT] = "SYNC_WAIT",
	};

	return table_name(names, COUNT(names), (unsigned)kind);
}
