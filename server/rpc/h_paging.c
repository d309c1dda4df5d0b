/*
 * Client paging requests: MakeResident, Evict and Transfer (vidmm/vidmm.c does the work).
 *
 * All three answer with the device's paging fence, which its paging sync object reaches once
 * the paging packets they queued have moved the bytes. Evict and Transfer move an allocation
 * only while no packet is ready or running with it: a request that finds one pinned waits for
 * the pins to go (it is re-dispatched then), so the transfer is issued with
 * AllocationIsIdle, as VidMm does with a busy allocation.
 */
#include "rpc/handlers.h"

#include "vidmm/vidmm.h"
#include "vidsch/vidsch.h"

#include "wddm.h"

#include <stdio.h>
#include <stdlib.h>

#define MK(x) GPUSCHED__V1__MOVE_KIND__MOVE_KIND_##x

/* Answers a paging request: the error st (with msg) when it failed, else the moves made. */
static void paging_reply(gsd_call *c, const gsd_device *dev, int st, const char *msg,
                         uint32_t moves)
{
	if (st != GSD_ST(OK)) {
		gsd_call_error(c, st, "%s", msg);
		return;
	}
	Gpusched__V1__PagingResponse pr = GPUSCHED__V1__PAGING_RESPONSE__INIT;
	pr.paging_fence = dev->paging_fence;
	pr.paging_sync = dev->paging_sync ? dev->paging_sync->obj.handle : 0;
	pr.moves = moves;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	switch (c->req->body_case) {
	case GPUSCHED__V1__REQUEST__BODY_EVICT:
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_EVICT;
		resp.evict = &pr;
		break;
	case GPUSCHED__V1__REQUEST__BODY_TRANSFER:
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_TRANSFER;
		resp.transfer = &pr;
		break;
	default:
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_MAKE_RESIDENT;
		resp.make_resident = &pr;
		break;
	}
	gsd_call_reply(c, &resp);
}

/* The device a request names and the list of its allocations it names (malloc'd); answers and
 * returns NULL on a bad one. */
static gsd_allocation **device_allocations(gsd_daemon *d, gsd_call *c, uint64_t device,
                                           const uint64_t *handles, size_t n, gsd_device **out)
{
	gsd_device *dev = gsd_call_object(c, device, GSD_OBJ_DEVICE);
	if (!dev)
		return NULL;
	if (n == 0 || n > d->cfg.max_allocation_list) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "1..%u allocations per request (got %zu)",
		               d->cfg.max_allocation_list, n);
		return NULL;
	}
	gsd_allocation **als = calloc(n, sizeof(*als));
	if (!als) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		als[i] = gsd_call_find(c, handles[i], GSD_OBJ_ALLOCATION);
		if (!als[i] || als[i]->dev != dev) {
			gsd_call_error(c, GSD_ST(NOT_FOUND),
			               "allocation %llu does not exist on device %llu",
			               (unsigned long long)handles[i],
			               (unsigned long long)dev->obj.handle);
			free(als);
			return NULL;
		}
	}
	*out = dev;
	return als;
}

/* Defers the call while any of the allocations is pinned; true when deferred (or answered
 * because it may not wait). */
static bool wait_unpinned(gsd_call *c, gsd_allocation **als, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (als[i]->pins > 0) {
			gsd_call_retry_when(c, &als[i]->pin_waiters);
			return true;
		}
	return false;
}

/* What MakeResident or Evict does to the allocations of one device: a status (msg says why
 * when not OK) and the moves made in *moves, or PAGING_DEFERRED when the call waits. */
#define PAGING_DEFERRED (-1)
typedef int (*paging_action)(gsd_daemon *d, gsd_call *c, gsd_device *dev, gsd_allocation **als,
                             size_t n, uint32_t *moves, char *msg, size_t cap);

static void paging_call(gsd_daemon *d, gsd_call *c, uint64_t device, const uint64_t *handles,
                        size_t n, paging_action act)
{
	gsd_device *dev;
	gsd_allocation **als = device_allocations(d, c, device, handles, n, &dev);
	if (!als)
		return;
	uint32_t moves = 0;
	char msg[256] = "";
	int st = act(d, c, dev, als, n, &moves, msg, sizeof(msg));
	free(als);
	if (st != PAGING_DEFERRED)
		paging_reply(c, dev, st, msg, moves);
}

static int make_resident(gsd_daemon *d, gsd_call *c, gsd_device *dev, gsd_allocation **als,
                         size_t n, uint32_t *moves, char *msg, size_t cap)
{
	(void)c;
	(void)dev;
	return gsd_vidmm_make_resident(d, als, n, moves, msg, cap);
}

static int evict(gsd_daemon *d, gsd_call *c, gsd_device *dev, gsd_allocation **als, size_t n,
                 uint32_t *moves, char *msg, size_t cap)
{
	if (wait_unpinned(c, als, n))
		return PAGING_DEFERRED;
	/* Nothing runs (or pins) between the moves: all of them go while none is in use. */
	gsd_vidsch_hold(d, true);
	int st = GSD_ST(OK);
	for (size_t i = 0; i < n && st == GSD_ST(OK); i++) {
		int r = gsd_vidmm_move_to(
		        d, als[i], gsd_vidmm_segment_by_id(dev->adapter, 0), 0, MK(EVICT_REQUEST),
		        c->deferred ? "Evict, once the packets using it were done" : "Evict", msg,
		        cap);
		if (r == 0)
			(*moves)++;
		else if (r != 1)
			st = r;
	}
	gsd_vidsch_hold(d, false);
	return st;
}

void gsd_h_make_resident(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__MakeResidentRequest *q = R(make_resident);
	paging_call(d, c, q->device, q->allocations, q->n_allocations, make_resident);
}

void gsd_h_evict(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__EvictRequest *q = R(evict);
	paging_call(d, c, q->device, q->allocations, q->n_allocations, evict);
}

void gsd_h_transfer(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__TransferRequest *q = R(transfer);
	gsd_allocation *al = gsd_call_object(c, q->allocation, GSD_OBJ_ALLOCATION);
	if (!al)
		return;
	uint32_t f = q->transfer_flags;
	if (f & ~GS_TRANSFER_VALID_MASK) {
		gsd_call_error(
		        c, GSD_ST(RESERVED_BITS),
		        "transfer flags 0x%x: bits 0x%x are reserved (DXGK_TRANSFERFLAGS has 5)", f,
		        f & ~GS_TRANSFER_VALID_MASK);
		return;
	}
	if (f & (GS_TRANSFER_ALLOCATION_IS_IDLE | GS_TRANSFER_START | GS_TRANSFER_END)) {
		gsd_call_error(
		        c, GSD_ST(FLAGS_NOT_ALLOWED),
		        "transfer flags 0x%x: AllocationIsIdle, TransferStart and TransferEnd "
		        "are set by the daemon",
		        f);
		return;
	}
	if ((f & GS_TRANSFER_SWIZZLE) && (f & GS_TRANSFER_UNSWIZZLE)) {
		gsd_call_error(c, GSD_ST(TRANSFER_FLAGS),
		               "transfer flags 0x%x: Swizzle and Unswizzle contradict each other",
		               f);
		return;
	}
	gsd_segment *dst = gsd_vidmm_segment_by_id(al->adapter, q->segment);
	if (!dst) {
		gsd_call_error(c, GSD_ST(SEGMENT_UNKNOWN),
		               "segment %u does not exist on adapter %u", q->segment,
		               al->adapter->id);
		return;
	}
	if (q->segment && !(al->supported_segment_set & (1u << q->segment))) {
		gsd_call_error(c, GSD_ST(SEGMENT_PREFERENCE),
		               "segment %u is outside allocation %llu's supported set 0x%x",
		               q->segment, (unsigned long long)al->obj.handle,
		               al->supported_segment_set);
		return;
	}
	if (wait_unpinned(c, &al, 1))
		return;
	char msg[256] = "";
	int r = gsd_vidmm_move_to(d, al, dst, f, MK(TRANSFER),
	                          c->deferred ? "Transfer, once the packets using it were done"
	                                      : "Transfer",
	                          msg, sizeof(msg));
	paging_reply(c, al->dev, r == 0 || r == 1 ? GSD_ST(OK) : r, msg, r == 0);
}
