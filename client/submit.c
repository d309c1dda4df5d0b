/*
 * Submission: turning a built DMA buffer into a SubmitRequest (one or a batch), and waiting
 * for packets.
 */
#include <stdlib.h>

#include "rpc.h"

int gsc_submit_msg_build(gsc_submit_msg *m, const gs_submit_desc *desc)
{
	const gs_dmabuf *dma = desc->dma;
	Gpusched__V1__AllocationListEntry *entries, **entry_ptrs;
	Gpusched__V1__PatchLocation *patches, **patch_ptrs;
	Gpusched__V1__SyncPoint *waits, **wait_ptrs;
	size_t na, np, nw;
	char *block;

	gpusched__v1__submit_request__init(&m->req);
	m->storage = NULL;
	if (!dma || (desc->private_data_size && !desc->private_data))
		return GS_ERR_INVALID;
	na = dma->alloc_count;
	np = dma->patch_count;
	nw = dma->wait_count;

	/* One block: the entry structs first (8-byte aligned members), then the pointer arrays
	 * protobuf-c wants for repeated messages. */
	block = malloc(na * (sizeof(*entries) + sizeof(*entry_ptrs)) +
	               np * (sizeof(*patches) + sizeof(*patch_ptrs)) +
	               nw * (sizeof(*waits) + sizeof(*wait_ptrs)) + 1);
	if (!block)
		return GS_ERR_NOMEM;
	entries = (void *)block;
	patches = (void *)(entries + na);
	waits = (void *)(patches + np);
	entry_ptrs = (void *)(waits + nw);
	patch_ptrs = (void *)(entry_ptrs + na);
	wait_ptrs = (void *)(patch_ptrs + np);
	for (size_t i = 0; i < nw; i++) {
		gpusched__v1__sync_point__init(&waits[i]);
		waits[i].sync = dma->waits[i].sync;
		waits[i].value = dma->waits[i].value;
		wait_ptrs[i] = &waits[i];
	}

	for (size_t i = 0; i < na; i++) {
		gpusched__v1__allocation_list_entry__init(&entries[i]);
		entries[i].allocation = dma->allocs[i].allocation;
		entries[i].write = dma->allocs[i].write;
		entry_ptrs[i] = &entries[i];
	}
	for (size_t i = 0; i < np; i++) {
		gpusched__v1__patch_location__init(&patches[i]);
		patches[i].allocation_index = dma->patches[i].allocation_index;
		patches[i].slot_id = dma->patches[i].slot_id;
		patches[i].patch_offset = dma->patches[i].patch_offset;
		patches[i].allocation_offset = dma->patches[i].allocation_offset;
		patch_ptrs[i] = &patches[i];
	}

	m->storage = block;
	m->req.context = desc->context;
	m->req.dma_buffer.data = dma->data;
	m->req.dma_buffer.len = dma->len;
	m->req.n_allocations = na;
	m->req.allocations = entry_ptrs;
	m->req.n_patches = np;
	m->req.patches = patch_ptrs;
	m->req.n_waits = nw;
	m->req.waits = wait_ptrs;
	m->req.submit_flags = desc->submit_flags;
	m->req.wait_ms = desc->wait_ms;
	/* Packing only reads the bytes; ProtobufCBinaryData just has no const member. */
	m->req.private_data.data = (uint8_t *)desc->private_data;
	m->req.private_data.len = desc->private_data_size;
	return 0;
}

void gsc_submit_msg_release(gsc_submit_msg *m)
{
	free(m->storage);
	m->storage = NULL;
}

/* The blocking calls: one request each, started on the asynchronous path and waited for. */

int gs_submit(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
              gs_submit_result *out)
{
	gs_submit_desc desc = {.context = context, .dma = dma, .submit_flags = submit_flags};
	gsc_waiter w;
	int rv;

	rv = gsc_wait(c, &w, gsc_submit_start(c, &desc, gsc_blocking(c, &w), NULL));
	if (rv == 0 && out)
		*out = w.ev.submit;
	return rv;
}

int gs_submit_wait(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
                   uint32_t wait_ms, gs_submit_result *out)
{
	gs_submit_desc desc = {
	        .context = context, .dma = dma, .submit_flags = submit_flags, .wait_ms = wait_ms};
	gsc_waiter w;
	int rv = gsc_wait(c, &w, gsc_submit_start(c, &desc, gsc_blocking(c, &w), NULL));
	/* A faulted packet: GS_STATUS_FAULTED with the result (its id, to read its history). */
	if ((rv == 0 || (rv == GS_STATUS_FAULTED && w.ev.submit.packet)) && out)
		*out = w.ev.submit;
	return rv;
}

int gs_submit_batch(gs_client *c, const gs_submit_desc *packets, size_t count,
                    gs_submit_result *out)
{
	gsc_waiter w;

	return gsc_wait(c, &w,
	                gsc_submit_batch_start(c, packets, count, out, gsc_blocking(c, &w), NULL));
}

int gs_packet_wait(gs_client *c, uint64_t packet, uint32_t timeout_ms, gs_packet_state *state,
                   uint64_t *fence)
{
	gsc_waiter w;
	int rv;

	rv = gsc_wait(c, &w,
	              gsc_packet_wait_start(c, packet, timeout_ms, gsc_blocking(c, &w), NULL));
	/* A faulted packet: GS_STATUS_FAULTED with the state (see gs_async_event). */
	if ((rv == 0 || w.ev.state == GS_PACKET_FAULTED) && state)
		*state = w.ev.state;
	if (rv == 0 && fence)
		*fence = w.ev.fence;
	return rv;
}
