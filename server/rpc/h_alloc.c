/*
 * Allocation requests: create (placed by segment preference), destroy, query, priority and
 * preference updates, and CPU read/write. CPU access waits until no packet that references the
 * allocation is in flight, so it sees exactly what the GPU left and never races an engine.
 */
#include "rpc/handlers.h"

#include "vidmm/vidmm.h"

#include "wddm.h"

#include <stdlib.h>
#include <string.h>

void gsd_h_allocation_create(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__AllocationCreateRequest *q = R(allocation_create);
	gsd_device *dev = gsd_call_object(c, q->device, GSD_OBJ_DEVICE);
	if (!dev)
		return;
	gsd_adapter *a = dev->adapter;
	if (a->device_dead) {
		/* Its memory may still be written by what hung it: none of it is handed out. */
		gsd_call_error(c, GSD_ST(FAULTED),
		               "adapter %u (%s) lost its device and could not recreate it: no new "
		               "allocations (gpusched info)",
		               a->id, a->cfg->name);
		return;
	}
	gsd_rules_adapter ra;
	gsd_rules_adapter_of(d, a, &ra);
	char msg[256];
	int st = gsd_rules_allocation(&ra, q->size, q->supported_segment_set, q->segment_preference,
	                              q->priority, q->flags, msg, sizeof(msg));
	if (st != GSD_ST(OK)) {
		gsd_call_error(c, st, "%s", msg);
		return;
	}
	uint32_t set = gsd_rules_effective_set(&ra, q->supported_segment_set);
	uint64_t largest = 0;
	for (uint32_t i = 0; i < a->nsegments; i++)
		if ((set & (1u << a->segments[i].id)) && a->segments[i].size > largest)
			largest = a->segments[i].size;
	if (q->size > largest) {
		gsd_call_error(c, GSD_ST(TOO_LARGE),
		               "allocation of %llu bytes exceeds every supported segment (largest "
		               "%llu)",
		               (unsigned long long)q->size, (unsigned long long)largest);
		return;
	}
	gsd_tenant *t = c->tenant;
	if (t->conf.allocation_limit && t->allocations >= t->conf.allocation_limit) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s has %u allocations (allocation_limit %u)", t->conf.name,
		               t->allocations, t->conf.allocation_limit);
		return;
	}
	/* The quota counts what allocations occupy once placed, not the bytes asked for. */
	uint64_t need = gsd_memory_footprint(q->size);
	if (t->conf.memory_quota && (t->memory_used > t->conf.memory_quota ||
	                             need > t->conf.memory_quota - t->memory_used)) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s: memory_quota %llu bytes, %llu used, asked for %llu (%llu"
		               " placed, in units of %u bytes)",
		               t->conf.name, (unsigned long long)t->conf.memory_quota,
		               (unsigned long long)t->memory_used, (unsigned long long)q->size,
		               (unsigned long long)need, GSD_MEMORY_ALIGN);
		return;
	}
	gsd_allocation_params pr = {.size = q->size,
	                            .supported_segment_set = set,
	                            .segment_preference = q->segment_preference,
	                            .priority = q->priority,
	                            .flags = q->flags};
	gsd_allocation *al;
	st = gsd_allocation_create(d, dev, &pr, &al);
	if (st == GSD_ST(OUT_OF_MEMORY)) {
		gsd_call_error(c, st,
		               "no segment and no system memory has %llu free bytes in one piece",
		               (unsigned long long)q->size);
		return;
	}
	if (st != GSD_ST(OK)) {
		gsd_call_error(c, st, "out of memory");
		return;
	}
	Gpusched__V1__AllocationCreateResponse ac = GPUSCHED__V1__ALLOCATION_CREATE_RESPONSE__INIT;
	ac.allocation = al->obj.handle;
	ac.segment = gsd_vidmm_segment_id(al);
	if (c->sees_placement) {
		ac.offset = al->offset;
		ac.address = gsd_vidmm_resident(al) ? gs_addr_make(al->segment->id, al->offset) : 0;
	}
	GSD_REPLY(c, ALLOCATION_CREATE, allocation_create, &ac);
}

void gsd_h_allocation_destroy(gsd_daemon *d, gsd_call *c)
{
	gsd_allocation *al =
	        gsd_call_object(c, R(allocation_destroy)->allocation, GSD_OBJ_ALLOCATION);
	if (!al)
		return;
	/* Packets still in flight keep their reference; the memory is freed after them. */
	gsd_allocation_destroy(d, al);
	gsd_call_reply_empty(c);
}

/* Fills a query answer; tenant must outlive the answer. */
static void query_out(const gsd_call *c, const gsd_allocation *al,
                      Gpusched__V1__AllocationQueryResponse *aq)
{
	gpusched__v1__allocation_query_response__init(aq);
	aq->allocation = al->obj.handle;
	aq->device = al->dev->obj.handle;
	aq->size = al->size;
	aq->supported_segment_set = al->supported_segment_set;
	aq->segment_preference = al->segment_preference;
	aq->priority = al->priority;
	aq->flags = al->flags;
	aq->resident = gsd_vidmm_resident(al);
	aq->segment = gsd_vidmm_segment_id(al);
	if (c->sees_placement) {
		aq->offset = al->offset;
		aq->address = aq->resident ? gs_addr_make(al->segment->id, al->offset) : 0;
	}
	aq->busy_packets = al->inflight;
	aq->pinned = al->pins;
	aq->moves = al->moves;
	aq->moving = al->moving > 0;
	aq->last_used_ns = al->last_use_ns;
	aq->tenant = (char *)al->obj.identity;
}

void gsd_h_allocation_query(gsd_daemon *d, gsd_call *c)
{
	(void)d;
	gsd_allocation *al =
	        gsd_call_object(c, R(allocation_query)->allocation, GSD_OBJ_ALLOCATION);
	if (!al)
		return;
	Gpusched__V1__AllocationQueryResponse aq;
	query_out(c, al, &aq);
	GSD_REPLY(c, ALLOCATION_QUERY, allocation_query, &aq);
}

typedef struct list_filter {
	const gsd_tenant *tenant;
	uint64_t guest;
	uint32_t adapter;
	uint64_t device, after;
	bool resident_only;
} list_filter;

static bool list_keep(const gsd_object *o, void *arg)
{
	const list_filter *f = arg;
	if (o->type != GSD_OBJ_ALLOCATION || o->tenant != f->tenant || o->guest != f->guest ||
	    o->handle <= f->after)
		return false;
	const gsd_allocation *al = (const gsd_allocation *)o;
	return al->adapter->id == f->adapter && (!f->device || al->dev->obj.handle == f->device) &&
	       (!f->resident_only || gsd_vidmm_resident(al));
}

void gsd_h_allocation_list(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__AllocationListRequest *q = R(allocation_list);
	if (q->device && !gsd_call_object(c, q->device, GSD_OBJ_DEVICE))
		return;
	uint32_t limit = q->limit ? q->limit : 1000;
	if (limit > 100000) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "limit %u exceeds 100000", q->limit);
		return;
	}
	list_filter f = {.tenant = c->tenant,
	                 .guest = c->guest,
	                 .adapter = c->req->adapter,
	                 .device = q->device,
	                 .after = q->after,
	                 .resident_only = q->resident_only};
	gsd_object **found = NULL;
	size_t nfound = 0;
	int rv = gsd_object_collect(d, list_keep, &f, &found, &nfound);
	size_t n = nfound < limit ? nfound : limit;
	Gpusched__V1__AllocationQueryResponse **rp = NULL;
	Gpusched__V1__AllocationQueryResponse *rows =
	        rv == 0 ? gsd_pb_repeated(n, sizeof(*rows), (void ***)&rp) : NULL;
	if (!rows) {
		free(found);
		free(rp);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++)
		query_out(c, (gsd_allocation *)found[i], &rows[i]);
	Gpusched__V1__AllocationListResponse lr = GPUSCHED__V1__ALLOCATION_LIST_RESPONSE__INIT;
	lr.n_allocations = n;
	lr.allocations = rp;
	GSD_REPLY(c, ALLOCATION_LIST, allocation_list, &lr);
	free(found);
	free(rp);
}

void gsd_h_allocation_set_priority(gsd_daemon *d, gsd_call *c)
{
	gsd_allocation *al =
	        gsd_call_object(c, R(allocation_set_priority)->allocation, GSD_OBJ_ALLOCATION);
	if (!al)
		return;
	if (R(allocation_set_priority)->priority == 0) {
		gsd_call_error(c, GSD_ST(ALLOCATION_PRIORITY),
		               "allocation priority 0 is invalid (MINIMUM is 0x28000000)");
		return;
	}
	al->priority = R(allocation_set_priority)->priority;
	gsd_allocation_audit(d, al);
	gsd_call_reply_empty(c);
}

void gsd_h_allocation_set_preference(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__AllocationSetPreferenceRequest *q = R(allocation_set_preference);
	gsd_allocation *al = gsd_call_object(c, q->allocation, GSD_OBJ_ALLOCATION);
	if (!al)
		return;
	gsd_rules_adapter ra;
	gsd_rules_adapter_of(d, al->dev->adapter, &ra);
	char msg[256];
	int st = gsd_rules_allocation(&ra, al->size, al->supported_segment_set,
	                              q->segment_preference, al->priority, al->flags, msg,
	                              sizeof(msg));
	if (st != GSD_ST(OK)) {
		gsd_call_error(c, st, "%s", msg);
		return;
	}
	/* Takes effect at the next placement; the allocation does not move now. */
	al->segment_preference = q->segment_preference;
	gsd_allocation_audit(d, al);
	gsd_call_reply_empty(c);
}

/* Checks [offset, offset+size) against the allocation and the message limit. */
static bool cpu_range_ok(gsd_call *c, const gsd_allocation *al, uint64_t offset, uint64_t size)
{
	if (offset > al->size || size > al->size - offset) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "range %llu+%llu is outside allocation %llu of %llu bytes",
		               (unsigned long long)offset, (unsigned long long)size,
		               (unsigned long long)al->obj.handle, (unsigned long long)al->size);
		return false;
	}
	if (size > c->d->cfg.max_message - 4096) {
		gsd_call_error(c, GSD_ST(TOO_LARGE), "%llu bytes exceed one message; use chunks",
		               (unsigned long long)size);
		return false;
	}
	return true;
}

/* Defers a CPU access until the allocation is idle; returns true when it was deferred (or
 * answered because it may not wait). */
static bool defer_until_idle(gsd_call *c, gsd_allocation *al)
{
	if (al->inflight == 0)
		return false;
	gsd_call_retry_when(c, &al->idle_waiters);
	return true;
}

void gsd_h_allocation_read(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__AllocationReadRequest *q = R(allocation_read);
	/* The answer is a message too: it honours the tenant's limit, less room for the rest. */
	uint64_t max = gsd_tenant_max_message(d, c->tenant);
	if (max < d->cfg.max_message && q->size > max - 1024) {
		gsd_call_error(c, GSD_ST(TOO_LARGE),
		               "reading %llu bytes at once exceeds tenant %s's max_message %llu"
		               " less 1 KiB: read in pieces",
		               (unsigned long long)q->size, c->tenant->conf.name,
		               (unsigned long long)max);
		return;
	}
	gsd_allocation *al = gsd_call_object(c, q->allocation, GSD_OBJ_ALLOCATION);
	if (!al || !cpu_range_ok(c, al, q->offset, q->size) || defer_until_idle(c, al))
		return;
	Gpusched__V1__AllocationReadResponse ar = GPUSCHED__V1__ALLOCATION_READ_RESPONSE__INIT;
	/* Linear memory the CPU maps is answered in place; a tiled image is read through its
	 * layout, and memory the CPU does not map through the backend's staging copies. */
	uint8_t *copy = NULL;
	const uint8_t *view = gsd_vidmm_cpu_view(al);
	if (view) {
		ar.data.data = (uint8_t *)view + q->offset;
	} else {
		char err[160];
		copy = malloc(q->size ? q->size : 1);
		if (!copy) {
			gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
			return;
		}
		if (gsd_vidmm_cpu_read(al, q->offset, copy, q->size, err, sizeof(err)) != 0) {
			free(copy);
			gsd_call_error(c, GSD_ST(INTERNAL), "reading the allocation: %s", err);
			return;
		}
		ar.data.data = copy;
	}
	ar.data.len = q->size;
	GSD_REPLY(c, ALLOCATION_READ, allocation_read, &ar);
	free(copy);
}

void gsd_h_allocation_write(gsd_daemon *d, gsd_call *c)
{
	(void)d;
	const Gpusched__V1__AllocationWriteRequest *q = R(allocation_write);
	gsd_allocation *al = gsd_call_object(c, q->allocation, GSD_OBJ_ALLOCATION);
	if (!al || !cpu_range_ok(c, al, q->offset, q->data.len) || defer_until_idle(c, al))
		return;
	/* An empty bytes field decodes as data NULL: memcpy must not see it, even for 0. */
	char err[160];
	if (q->data.len &&
	    gsd_vidmm_cpu_write(al, q->offset, q->data.data, q->data.len, err, sizeof(err)) != 0) {
		gsd_call_error(c, GSD_ST(INTERNAL), "writing the allocation: %s", err);
		return;
	}
	gsd_call_reply_empty(c);
}
