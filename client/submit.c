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

static void copy_result(gs_submit_result *out, const Gpusched__V1__SubmitResponse *r)
{
	out->packet = r->packet;
	out->fence = r->fence;
	out->node = r->node;
}

int gs_submit(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t submit_flags,
              gs_submit_result *out)
{
	gs_submit_desc desc = {.context = context, .dma = dma, .submit_flags = submit_flags};
	Gpusched__V1__Response *resp;
	gsc_submit_msg m;
	int rv;

	rv = gsc_submit_msg_build(&m, &desc);
	if (rv != 0)
		return gsc_fail(c, rv, "cannot build the submission");
	rv = gsc_call(c, GSC_REQ(SUBMIT), &m.req, GSC_RESP(SUBMIT), 0, &resp);
	gsc_submit_msg_release(&m);
	if (rv != 0)
		return rv;
	if (out)
		copy_result(out, resp->submit);
	gsc_response_free(resp);
	return 0;
}

int gs_submit_batch(gs_client *c, const gs_submit_desc *packets, size_t count,
                    gs_submit_result *out)
{
	Gpusched__V1__SubmitBatchRequest body = GPUSCHED__V1__SUBMIT_BATCH_REQUEST__INIT;
	Gpusched__V1__SubmitRequest **reqs = NULL;
	Gpusched__V1__Response *resp = NULL;
	gsc_submit_msg *msgs;
	size_t built = 0;
	int rv = 0;

	msgs = calloc(count ? count : 1, sizeof(*msgs));
	reqs = calloc(count ? count : 1, sizeof(*reqs));
	if (!msgs || !reqs) {
		rv = gsc_fail(c, GS_ERR_NOMEM, "cannot build the batch");
		goto done;
	}
	for (; built < count; built++) {
		rv = gsc_submit_msg_build(&msgs[built], &packets[built]);
		if (rv != 0) {
			rv = gsc_fail(c, rv, "cannot build packet %zu of the batch", built);
			goto done;
		}
		reqs[built] = &msgs[built].req;
	}
	body.n_packets = count;
	body.packets = reqs;
	rv = gsc_call(c, GSC_REQ(SUBMIT_BATCH), &body, GSC_RESP(SUBMIT_BATCH), 0, &resp);
	if (rv != 0)
		goto done;
	if (resp->submit_batch->n_packets != count) {
		rv = gsc_fail(c, GS_ERR_PROTOCOL, "batch of %zu packets answered with %zu", count,
		              resp->submit_batch->n_packets);
		goto done;
	}
	for (size_t i = 0; out && i < count; i++)
		copy_result(&out[i], resp->submit_batch->packets[i]);
done:
	gsc_response_free(resp);
	for (size_t i = 0; i < built; i++)
		gsc_submit_msg_release(&msgs[i]);
	free(msgs);
	free(reqs);
	return rv;
}

int gs_packet_wait(gs_client *c, uint64_t packet, uint32_t timeout_ms, gs_packet_state *state,
                   uint64_t *fence)
{
	Gpusched__V1__PacketWaitRequest body = GPUSCHED__V1__PACKET_WAIT_REQUEST__INIT;
	Gpusched__V1__Response *resp;
	int rv;

	body.packet = packet;
	body.timeout_ms = timeout_ms;
	rv = gsc_call(c, GSC_REQ(PACKET_WAIT), &body, GSC_RESP(PACKET_WAIT), timeout_ms, &resp);
	if (rv == GS_STATUS_FAULTED && state)
		*state =
		        GS_PACKET_FAULTED; /* the daemon answers a faulted packet with its status */
	if (rv != 0)
		return rv;
	if (state)
		*state = (gs_packet_state)resp->packet_wait->state;
	if (fence)
		*fence = resp->packet_wait->fence;
	gsc_response_free(resp);
	return 0;
}
