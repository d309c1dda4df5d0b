/*
 * Submission: validate a packet completely before anything is queued (flags, sizes, lists,
 * patch locations, the DMA buffer's instructions and the sync objects they signal), audit it,
 * queue it, and acknowledge it only once its SUBMITTED record is committed to SQLite.
 * A rejected packet is audited too (state REJECTED), with the reason.
 */
#include "rpc/handlers.h"

#include "core/events.h"
#include "core/wire_id.h"

#include "vidsch/vidsch.h"

#include "isa.h"
#include "wddm.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct verdict {
	int status;
	char msg[256];
} verdict;

static int refuse(verdict *v, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int refuse(verdict *v, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->msg, sizeof(v->msg), fmt, ap);
	va_end(ap);
	v->status = status;
	return status;
}

/*
 * Where patch locations may point: the address fields of the commands that take an
 * allocation, and nowhere else, so patching (which runs after this check, at every
 * (re)submission) can only ever change an address, never turn a checked command into another.
 * Commands are multiples of 8 bytes long and start at 0, so address fields start on multiples
 * of 8: bit k says whether one starts at byte 8k.
 */
typedef struct patch_targets {
	uint8_t *bits;
	uint8_t local[256]; /* DMA buffers up to 16 KiB need no allocation */
} patch_targets;

static bool targets_init(patch_targets *t, size_t dma_len, bool needed)
{
	size_t bytes = dma_len / 64 + 1;
	t->bits = NULL;
	if (!needed)
		return true;
	t->bits = bytes <= sizeof(t->local) ? t->local : malloc(bytes);
	if (t->bits)
		memset(t->bits, 0, bytes);
	return t->bits != NULL;
}

static void targets_free(patch_targets *t)
{
	if (t->bits != t->local)
		free(t->bits);
}

static void targets_add(patch_targets *t, size_t cmd_at, uint8_t op)
{
	size_t f[2];
	size_t n = t->bits ? gs_isa_address_fields(op, f) : 0;
	for (size_t i = 0; i < n; i++) {
		size_t k = (cmd_at + f[i]) / 8;
		t->bits[k / 8] |= (uint8_t)(1u << (k % 8));
	}
}

static bool targets_has(const patch_targets *t, uint32_t offset)
{
	size_t k = offset / 8;
	return offset % 8 == 0 && (t->bits[k / 8] & (1u << (k % 8)));
}

/* The distinct kernels a packet's DISPATCH commands name. */
typedef struct kernel_set {
	gsd_kernel *k[GS_ISA_DISPATCH_MAX_BIND];
	uint32_t n;
} kernel_set;

/*
 * A DISPATCH's kernel, group counts and the shape of its bindings against what the kernel
 * declares and the device allows; the allocations it binds are checked once the allocation
 * list is known (check_bindings).
 */
static int check_dispatch(gsd_call *c, const gsd_context *x, const gs_isa_cmd *cmd, size_t at,
                          kernel_set *ks, verdict *v)
{
	const gsd_adapter *a = x->dev->adapter;
	if (!a->kernels)
		return refuse(v, GSD_ST(UNIMPLEMENTED),
		              "DISPATCH at byte %zu: adapter %u (%s) runs on the %s backend, which "
		              "runs no user kernels: use an adapter with backend vulkan",
		              at, a->id, a->cfg->name, a->ops->name);
	gsd_kernel *k = gsd_call_find(c, cmd->kernel, GSD_OBJ_KERNEL);
	if (!k || k->dev != x->dev)
		return refuse(v, GSD_ST(NOT_FOUND),
		              "DISPATCH at byte %zu names kernel %llu, which does not exist on the "
		              "context's device",
		              at, (unsigned long long)cmd->kernel);
	const gsd_kernel_info *ki = &k->code->info;
	const uint32_t *max_groups = a->kernel_caps.max_groups;
	static const char axis[3] = {'x', 'y', 'z'};
	for (int i = 0; i < 3; i++)
		if (cmd->groups[i] > max_groups[i])
			return refuse(
			        v, GSD_ST(INVALID_ARGUMENT),
			        "DISPATCH at byte %zu: %u groups in %c exceed the device's %u", at,
			        cmd->groups[i], axis[i], max_groups[i]);
	if (cmd->push_size != ki->push_bytes)
		return refuse(v, GSD_ST(INVALID_ARGUMENT),
		              "DISPATCH at byte %zu carries %u bytes of push constants; the kernel "
		              "declares %u",
		              at, cmd->push_size, ki->push_bytes);
	if (cmd->nbindings != ki->nbindings)
		return refuse(v, GSD_ST(INVALID_ARGUMENT),
		              "DISPATCH at byte %zu binds %u buffers; the kernel declares %u", at,
		              cmd->nbindings, ki->nbindings);
	uint32_t seen = 0;
	for (unsigned i = 0; i < cmd->nbindings; i++) {
		gs_isa_binding b;
		gs_isa_dispatch_binding(cmd, i, &b);
		bool known = gsd_kernel_binding_of(ki, b.binding) != NULL;
		if (!known || (seen & (1u << b.binding)))
			return refuse(v, GSD_ST(INVALID_ARGUMENT),
			              "DISPATCH at byte %zu: binding %u is %s", at, b.binding,
			              known ? "bound twice" : "not one the kernel declares");
		seen |= 1u << b.binding;
	}
	for (uint32_t i = 0; i < ks->n; i++)
		if (ks->k[i] == k)
			return GSD_ST(OK);
	if (ks->n == GS_ISA_DISPATCH_MAX_BIND)
		return refuse(v, GSD_ST(LIST_TOO_LARGE),
		              "DISPATCH at byte %zu: a packet names at most %u kernels", at,
		              GS_ISA_DISPATCH_MAX_BIND);
	ks->k[ks->n++] = k;
	return GSD_ST(OK);
}

/* Decodes the DMA buffer once: every command must be valid ISA, every SIGNAL must name a
 * sync object of the tenant (and guest), and every DISPATCH a kernel of the context's device
 * (collected in ks); notes the address fields patches may point at. */
static int check_dma(gsd_call *c, const gsd_context *x, const uint8_t *dma, size_t len,
                     patch_targets *targets, kernel_set *ks, verdict *v)
{
	size_t pos = 0;
	gs_isa_cmd cmd;
	for (;;) {
		size_t at = pos;
		gs_isa_err ie = gs_isa_decode(dma, len, &pos, &cmd);
		if (ie == GS_ISA_END)
			return GSD_ST(OK);
		if (ie != GS_ISA_OK)
			return refuse(v, GSD_ST(DMA_INVALID), "DMA buffer: %s at byte %zu",
			              gs_isa_strerror(ie), at);
		targets_add(targets, at, cmd.op);
		if (cmd.op == GS_OP_DISPATCH && check_dispatch(c, x, &cmd, at, ks, v) != GSD_ST(OK))
			return v->status;
		if (cmd.op == GS_OP_TRANSFER)
			return refuse(v, GSD_ST(FLAGS_NOT_ALLOWED),
			              "TRANSFER at byte %zu: paging transfers are the daemon's own",
			              at);
		const gsd_sync *s =
		        cmd.op == GS_OP_SIGNAL ? gsd_call_find(c, cmd.sync, GSD_OBJ_SYNC) : NULL;
		if (s && s->daemon_only)
			return refuse(
			        v, GSD_ST(PERMISSION_DENIED),
			        "SIGNAL at byte %zu names sync %llu, a device's paging fence: "
			        "only the daemon signals it",
			        at, (unsigned long long)cmd.sync);
		if (cmd.op == GS_OP_SIGNAL && !s)
			return refuse(
			        v, GSD_ST(NOT_FOUND),
			        "SIGNAL at byte %zu names sync object %llu, which does not exist",
			        at, (unsigned long long)cmd.sync);
	}
}

static int check_sizes(gsd_daemon *d, const gsd_context *x, const Gpusched__V1__SubmitRequest *s,
                       verdict *v)
{
	if (s->dma_buffer.len > d->cfg.max_dma_buffer)
		return refuse(v, GSD_ST(LIST_TOO_LARGE), "DMA buffer of %zu bytes exceeds %u",
		              s->dma_buffer.len, d->cfg.max_dma_buffer);
	if (s->n_allocations > d->cfg.max_allocation_list)
		return refuse(v, GSD_ST(LIST_TOO_LARGE), "allocation list of %zu exceeds %u",
		              s->n_allocations, d->cfg.max_allocation_list);
	if (s->n_patches > d->cfg.max_patch_list)
		return refuse(v, GSD_ST(LIST_TOO_LARGE), "patch location list of %zu exceeds %u",
		              s->n_patches, d->cfg.max_patch_list);
	if (s->n_waits > 64)
		return refuse(v, GSD_ST(LIST_TOO_LARGE), "%zu GPU waits exceed 64", s->n_waits);
	if (s->private_data.len > x->info.dma_buffer_private_data_size)
		return refuse(v, GSD_ST(INVALID_ARGUMENT),
		              "private data of %zu bytes exceeds DmaBufferPrivateDataSize %u",
		              s->private_data.len, x->info.dma_buffer_private_data_size);
	return GSD_ST(OK);
}

static int check_lists(gsd_call *c, const gsd_context *x, const Gpusched__V1__SubmitRequest *s,
                       const patch_targets *targets, gsd_packet *p, verdict *v)
{
	for (size_t i = 0; i < s->n_waits; i++) {
		const Gpusched__V1__SyncPoint *w = s->waits[i];
		if (!gsd_call_find(c, w->sync, GSD_OBJ_SYNC))
			return refuse(v, GSD_ST(NOT_FOUND),
			              "wait %zu names sync object %llu, which does not exist", i,
			              (unsigned long long)w->sync);
		p->waits[i] = (gsd_sync_point){w->sync, w->value};
	}
	for (size_t i = 0; i < s->n_allocations; i++) {
		const Gpusched__V1__AllocationListEntry *e = s->allocations[i];
		gsd_allocation *a = gsd_call_find(c, e->allocation, GSD_OBJ_ALLOCATION);
		if (!a || a->dev != x->dev)
			return refuse(
			        v, GSD_ST(NOT_FOUND),
			        "allocation list entry %zu: allocation %llu does not exist on "
			        "this device",
			        i, (unsigned long long)e->allocation);
		p->allocs[i] = (gsd_packet_alloc){a, e->write};
	}
	for (size_t i = 0; i < s->n_patches; i++) {
		const Gpusched__V1__PatchLocation *pl = s->patches[i];
		if (pl->allocation_index >= s->n_allocations)
			return refuse(v, GSD_ST(PATCH_INVALID),
			              "patch %zu: allocation index %u outside the list of %zu", i,
			              pl->allocation_index, s->n_allocations);
		if ((uint64_t)pl->patch_offset + 8 > s->dma_buffer.len)
			return refuse(
			        v, GSD_ST(PATCH_INVALID),
			        "patch %zu: offset %u + 8 outside the DMA buffer of %zu bytes", i,
			        pl->patch_offset, s->dma_buffer.len);
		if (!targets_has(targets, pl->patch_offset))
			return refuse(
			        v, GSD_ST(PATCH_INVALID),
			        "patch %zu: offset %u is not the address field of a FILL, COPY or "
			        "CHECKSUM command",
			        i, pl->patch_offset);
		if (pl->allocation_offset >= p->allocs[pl->allocation_index].alloc->size)
			return refuse(v, GSD_ST(PATCH_INVALID),
			              "patch %zu: allocation offset %llu outside the allocation", i,
			              (unsigned long long)pl->allocation_offset);
		p->patches[i] = (gsd_packet_patch){pl->allocation_index, pl->patch_offset,
		                                   pl->allocation_offset};
	}
	return GSD_ST(OK);
}

/*
 * Every DISPATCH binding against the allocation it names: in the list, its range inside the
 * allocation and within the device's limits, its offset aligned, and a binding the kernel
 * writes only on an entry marked written. The engine checks the same again where the
 * allocation lives when the command runs.
 */
static int check_bindings(const gsd_context *x, const gsd_packet *p, verdict *v)
{
	const gsd_kernel_caps *caps = &x->dev->adapter->kernel_caps;
	size_t pos = 0, at = 0;
	gs_isa_cmd cmd;
	for (; gs_isa_decode(p->dma, p->dma_len, &pos, &cmd) == GS_ISA_OK; at = pos) {
		if (cmd.op != GS_OP_DISPATCH)
			continue;
		const gsd_exec_kernel *k = NULL;
		for (uint32_t i = 0; i < p->nkernels && !k; i++)
			if (p->exec_kernels[i].handle == cmd.kernel)
				k = &p->exec_kernels[i];
		for (unsigned i = 0; k && i < cmd.nbindings; i++) {
			gs_isa_binding b;
			gs_isa_dispatch_binding(&cmd, i, &b);
			/* Declared: check_dispatch saw to it. */
			const gsd_kernel_binding *kb = gsd_kernel_binding_of(k->info, b.binding);
			uint64_t max = kb->kind == GSD_BINDING_UNIFORM ? caps->max_uniform_range
			                                               : caps->max_storage_range;
			if (b.alloc_index >= p->nallocs)
				return refuse(
				        v, GSD_ST(INVALID_ARGUMENT),
				        "DISPATCH at byte %zu: binding %u names allocation-list "
				        "entry %u of %u",
				        at, b.binding, b.alloc_index, p->nallocs);
			const gsd_packet_alloc *pa = &p->allocs[b.alloc_index];
			if (b.range == 0 || b.offset > pa->alloc->size ||
			    b.range > pa->alloc->size - b.offset)
				return refuse(
				        v, GSD_ST(INVALID_ARGUMENT),
				        "DISPATCH at byte %zu: binding %u: offset %llu + range "
				        "%llu is empty or outside allocation %llu (%llu bytes)",
				        at, b.binding, (unsigned long long)b.offset,
				        (unsigned long long)b.range,
				        (unsigned long long)pa->alloc->obj.handle,
				        (unsigned long long)pa->alloc->size);
			/* The device bounds accesses by the range rounded up (robustBufferAccess2):
			 * that end, too, must lie inside the allocation, or a kernel could reach
			 * the bytes after it, another allocation's. */
			uint64_t ra = kb->kind == GSD_BINDING_UNIFORM ? caps->uniform_range_align
			                                              : caps->storage_range_align;
			uint64_t rounded = ra > 1 ? (b.range + ra - 1) / ra * ra : b.range;
			if (rounded > pa->alloc->size - b.offset)
				return refuse(
				        v, GSD_ST(INVALID_ARGUMENT),
				        "DISPATCH at byte %zu: binding %u: the device checks "
				        "accesses against the range rounded up to %llu bytes, "
				        "which passes the end of allocation %llu",
				        at, b.binding, (unsigned long long)ra,
				        (unsigned long long)pa->alloc->obj.handle);
			if (b.range > max)
				return refuse(
				        v, GSD_ST(INVALID_ARGUMENT),
				        "DISPATCH at byte %zu: binding %u: range %llu exceeds the "
				        "device's %llu for a %s buffer",
				        at, b.binding, (unsigned long long)b.range,
				        (unsigned long long)max,
				        kb->kind == GSD_BINDING_UNIFORM ? "uniform" : "storage");
			if (caps->offset_align && b.offset % caps->offset_align)
				return refuse(
				        v, GSD_ST(INVALID_ARGUMENT),
				        "DISPATCH at byte %zu: binding %u: offset %llu is not a "
				        "multiple of %u",
				        at, b.binding, (unsigned long long)b.offset,
				        caps->offset_align);
			if (kb->writes && !pa->write)
				return refuse(
				        v, GSD_ST(PERMISSION_DENIED),
				        "DISPATCH at byte %zu: the kernel writes binding %u, and "
				        "allocation-list entry %u is not marked write",
				        at, b.binding, b.alloc_index);
		}
	}
	return GSD_ST(OK);
}

/* The packet of a validated-size submission, its DMA buffer copied, with the kernels it
 * names (references are taken when it is admitted). */
static gsd_packet *packet_new(const Gpusched__V1__SubmitRequest *s, const kernel_set *ks)
{
	gsd_packet_shape shape = {.nallocs = (uint32_t)s->n_allocations,
	                          .nranges = (uint32_t)s->n_allocations,
	                          .npatches = (uint32_t)s->n_patches,
	                          .nwaits = (uint32_t)s->n_waits,
	                          .nkernels = ks->n,
	                          .dma = s->dma_buffer.data,
	                          .dma_len = s->dma_buffer.len};
	gsd_packet *p = gsd_packet_new(&shape);
	if (!p)
		return NULL;
	p->nkernels = ks->n;
	for (uint32_t i = 0; i < ks->n; i++) {
		p->kernels[i] = ks->k[i];
		p->exec_kernels[i] = (gsd_exec_kernel){.handle = ks->k[i]->obj.handle,
		                                       .impl = ks->k[i]->code->impl,
		                                       .info = &ks->k[i]->code->info};
	}
	return p;
}

/* Audits a submission that failed validation as a REJECTED packet. */
static void audit_rejected(gsd_daemon *d, gsd_call *c, const gsd_context *x,
                           const Gpusched__V1__SubmitRequest *s, const verdict *v)
{
	gsd_packet_rec r = {.packet = ++d->next_packet,
	                    .tenant = c->identity,
	                    .device = x ? x->dev->obj.handle : 0,
	                    .context = s->context,
	                    .adapter = c->req->adapter,
	                    .node = x ? x->node->index : 0,
	                    .submit_flags = s->submit_flags,
	                    .dma_size = (uint32_t)s->dma_buffer.len,
	                    .allocation_count = (uint32_t)s->n_allocations,
	                    .patch_count = (uint32_t)s->n_patches,
	                    .state = GSD_PS(REJECTED),
	                    .submitted_ns = gsd_now_ns(),
	                    .result = v->msg};
	/* One time for the event everywhere: the audit row's and EventsWait's (the audit took
	 * the time it was queued when event_ns was left 0). */
	r.completed_ns = r.event_ns = r.submitted_ns;
	d->stats.packets_rejected++;
	c->tenant->stats.packets_rejected++;
	/* Published too: a watcher sees what was refused, not only what ran. */
	gsd_events_packet(d, &r, gsd_audit_packet(d->audit, &r, v->msg, NULL, NULL), v->msg);
}

/* Validates one submission completely. On success *out holds the packet, not yet queued. */
/* The DMA buffer, the lists and the patch locations: the packet when they are all valid, NULL
 * with the verdict when not. */
static gsd_packet *check_contents(gsd_call *c, const gsd_context *x,
                                  const Gpusched__V1__SubmitRequest *s, verdict *v)
{
	patch_targets targets;
	if (!targets_init(&targets, s->dma_buffer.len, s->n_patches > 0)) {
		refuse(v, GSD_ST(INTERNAL), "out of memory");
		return NULL;
	}
	gsd_packet *p = NULL;
	kernel_set ks = {.n = 0};
	if (check_dma(c, x, s->dma_buffer.data, s->dma_buffer.len, &targets, &ks, v) ==
	    GSD_ST(OK)) {
		p = packet_new(s, &ks);
		if (!p)
			refuse(v, GSD_ST(INTERNAL), "out of memory");
		else if (check_lists(c, x, s, &targets, p, v) != GSD_ST(OK) ||
		         (ks.n && check_bindings(x, p, v) != GSD_ST(OK))) {
			gsd_packet_free(p);
			p = NULL;
		}
	}
	targets_free(&targets);
	return p;
}

static int build_packet(gsd_daemon *d, gsd_call *c, const Gpusched__V1__SubmitRequest *s,
                        gsd_packet **out, verdict *v)
{
	*out = NULL;
	gsd_context *x = gsd_call_find(c, s->context, GSD_OBJ_CONTEXT);
	if (!x || x->dev->adapter->id != c->req->adapter) {
		refuse(v, GSD_ST(NOT_FOUND), "context %llu does not exist on adapter %u",
		       (unsigned long long)s->context, c->req->adapter);
		x = NULL;
		goto rejected;
	}
	if (x->faulted) {
		refuse(v, GSD_ST(FAULTED), "context %llu is in an error state after a fault",
		       (unsigned long long)s->context);
		goto rejected;
	}
	v->status = gsd_rules_submit_flags(s->submit_flags, v->msg, sizeof(v->msg));
	if (v->status != GSD_ST(OK) || check_sizes(d, x, s, v) != GSD_ST(OK))
		goto rejected;
	gsd_packet *p = check_contents(c, x, s, v);
	if (!p)
		goto rejected;
	/* Lists and the DMA buffer may grow past their initial sizes, never shrink. */
	bool grew = false;
	if (s->dma_buffer.len > x->info.dma_buffer_size) {
		x->info.dma_buffer_size = (uint32_t)s->dma_buffer.len;
		grew = true;
	}
	if (s->n_allocations > x->info.allocation_list_size) {
		x->info.allocation_list_size = (uint32_t)s->n_allocations;
		grew = true;
	}
	if (s->n_patches > x->info.patch_location_list_size) {
		x->info.patch_location_list_size = (uint32_t)s->n_patches;
		grew = true;
	}
	if (grew)
		gsd_context_audit(d, x);
	p->ctx = x;
	p->node = x->node;
	uint32_t flags = s->submit_flags;
	if (c->tenant->conf.kind == GPUSCHED__V1__TENANT_KIND__TENANT_KIND_VM)
		flags |= GS_SUBMIT_VIRTUAL_MACHINE_DATA;
	p->rec = (gsd_packet_rec){.packet = ++d->next_packet,
	                          .tenant = c->identity,
	                          .device = x->dev->obj.handle,
	                          .context = x->obj.handle,
	                          .adapter = x->dev->adapter->id,
	                          .node = x->node->index,
	                          .fence = ++x->fence_submitted,
	                          .submit_flags = flags,
	                          .dma_size = (uint32_t)s->dma_buffer.len,
	                          .allocation_count = p->nallocs,
	                          .patch_count = p->npatches,
	                          .state = GSD_PS(SUBMITTED),
	                          .submitted_ns = gsd_node_now(x->node)};
	p->rec.event_ns = p->rec.submitted_ns;
	p->node_fence = ++x->node->next_fence;
	*out = p;
	return GSD_ST(OK);
rejected:
	audit_rejected(d, c, x, s, v);
	return v->status;
}

/* Takes the packet's references and makes it findable; it is queued separately. */
static void packet_admit(gsd_daemon *d, gsd_packet *p)
{
	p->tenant = p->ctx->obj.tenant;
	p->tenant->queued_packets++;
	p->tenant->stats.packets_submitted++;
	p->ctx->refs++;
	for (uint32_t i = 0; i < p->nallocs; i++)
		gsd_allocation_busy(p->allocs[i].alloc);
	for (uint32_t i = 0; i < p->nkernels; i++)
		p->kernels[i]->refs++;
	gsd_hmap_put(&d->packets, p->rec.packet, p);
	d->stats.packets_submitted++;
}

static void submit_out(const gsd_daemon *d, const gsd_packet *p, Gpusched__V1__SubmitResponse *o)
{
	gpusched__v1__submit_response__init(o);
	o->packet = gsd_wire_packet_out(&d->wire, p->rec.packet);
	o->fence = p->rec.fence;
	o->completed_fence = gsd_vidsch_completed_fence(p->ctx);
	o->node = p->node->index;
	o->state = p->rec.state ? p->rec.state : GSD_PS(SUBMITTED);
}

/* Refuses (and answers) n more packets beyond the tenant's packet limit. */
static bool queue_quota_exceeded(gsd_daemon *d, gsd_call *c, size_t n)
{
	const gsd_tenant *t = c->tenant;
	uint32_t max = gsd_tenant_packet_limit(d, t);
	if (n <= max && t->queued_packets <= max - n)
		return false;
	gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
	               "tenant %s has %u packets not yet final: %zu more would pass %s %u",
	               t->conf.name, t->queued_packets, n,
	               t->conf.packet_limit ? "packet_limit" : "max_queued_packets", max);
	return true;
}

/*
 * While the audit cannot commit, nothing that must be acknowledged is accepted; nor once its
 * record numbers are nearly used up (audit.h: GSD_AUDIT_SEQ_RESERVE), for good. The refusal's
 * own `errors` record is the probe: once a commit succeeds again (space came back, the lock
 * was released, the file was restored), submissions are accepted again.
 */
static bool audit_unavailable(gsd_daemon *d, gsd_call *c, size_t n)
{
	_Static_assert(GSD_AUDIT_SEQ_MAX == GSD_WIRE_ISSUED_MAX,
	               "every record number is a wire id");
	if (gsd_audit_seqs_left(d->audit) < GSD_AUDIT_SEQ_RESERVE + n) {
		gsd_call_error(
		        c, GSD_ST(QUOTA_EXCEEDED),
		        "the audit file %s has used up its packet and record numbers (2^44): "
		        "no submission is accepted until the daemon starts a new audit file "
		        "(stop it, move the file away, start it again)",
		        d->cfg.db_path);
		return true;
	}
	gsd_audit_health h = gsd_audit_get_health(d->audit);
	if (h == GSD_AUDIT_OK)
		return false;
	if (h == GSD_AUDIT_FILE_GONE)
		gsd_call_error(
		        c, GSD_ST(AUDIT_UNAVAILABLE),
		        "the audit file %s was removed or replaced: no submission is accepted "
		        "until it is back (restore it, or restart the daemon)",
		        d->cfg.db_path);
	else
		gsd_call_error(
		        c, GSD_ST(AUDIT_UNAVAILABLE),
		        "the audit file %s cannot be written now (its last commit failed: disk "
		        "full, or locked by another process): retry later",
		        d->cfg.db_path);
	return true;
}

/*
 * Admits validated packets and queues them unrecorded: none may run before its SUBMITTED
 * record is committed. The answer leaves once every record is; a record that cannot be
 * committed cancels them all, unrun (gsd_call_reply_after_audit).
 */
static void queue_and_answer(gsd_daemon *d, gsd_call *c, gsd_packet *const *ps, size_t n,
                             Gpusched__V1__Response *resp)
{
	for (size_t i = 0; i < n; i++) {
		ps[i]->unrecorded = true;
		packet_admit(d, ps[i]);
		gsd_vidsch_queue(d, ps[i]);
	}
	if (gsd_call_reply_after_audit(c, resp, ps, n) != 0)
		return; /* cancelled and retired: nothing to publish */
	for (size_t i = 0; i < n; i++)
		gsd_packet_publish(d, ps[i], NULL);
}

/* A waiting Submit's answer: the packet as it is now (FAULTED: STATUS_FAULTED with the body;
 * cancelled because its record failed: AUDIT_UNAVAILABLE, it never ran). */
static void submit_wait_answer(gsd_call *c, const gsd_packet *p)
{
	if (p->record_failed) {
		gsd_call_error(c, GSD_ST(AUDIT_UNAVAILABLE),
		               "the audit file could not record the submission: nothing ran; it is "
		               "safe to retry once the audit file is writable again");
		return;
	}
	Gpusched__V1__SubmitResponse sr;
	submit_out(c->d, p, &sr);
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SUBMIT;
	resp.submit = &sr;
	if (p->rec.state == GSD_PS(FAULTED)) {
		resp.status = GSD_ST(FAULTED);
		resp.message = "the packet faulted; see its history events";
	}
	gsd_call_reply(c, &resp);
}

static void submit_wait_wake(gsd_waiter *w, void *event)
{
	submit_wait_answer(gsd_call_of_waiter(w), event);
}

/* The time limit: answered OK with the state the packet is in (PacketWait takes it on). */
static void submit_wait_expired(gsd_call *c)
{
	gsd_waiter_cancel(&c->waiter);
	submit_wait_answer(c, c->wait_object);
}

void gsd_h_submit(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__SubmitRequest *q = R(submit);
	gsd_packet *p;
	verdict v;
	if (audit_unavailable(d, c, 1) || queue_quota_exceeded(d, c, 1))
		return;
	/* A Submit that waits is counted as waiting before anything is queued: one that may not
	 * wait is answered BUSY with nothing done. */
	if (q->wait_ms && !gsd_call_may_wait(c))
		return;
	if (build_packet(d, c, q, &p, &v) != GSD_ST(OK)) {
		gsd_call_error(c, v.status, "%s", v.msg);
		return;
	}
	if (q->wait_ms) {
		p->unrecorded = true;
		packet_admit(d, p);
		gsd_vidsch_queue(d, p);
		if (gsd_call_reply_after_audit(c, NULL, &p, 1) != 0)
			return; /* cancelled and retired: nothing to publish */
		c->wait_object = p;
		gsd_call_wait(c, &p->waiters, submit_wait_wake, q->wait_ms, submit_wait_expired);
		gsd_packet_publish(d, p, NULL);
		return;
	}
	Gpusched__V1__SubmitResponse sr;
	submit_out(d, p, &sr);
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SUBMIT;
	resp.submit = &sr;
	queue_and_answer(d, c, &p, 1, &resp);
}

void gsd_h_submit_batch(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__SubmitBatchRequest *q = R(submit_batch);
	size_t n = q->n_packets;
	if (n == 0 || n > d->cfg.max_batch) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT), "a batch holds 1..%u packets (got %zu)",
		               d->cfg.max_batch, n);
		return;
	}
	if (audit_unavailable(d, c, n) || queue_quota_exceeded(d, c, n))
		return;
	gsd_packet **ps = calloc(n, sizeof(*ps));
	Gpusched__V1__SubmitResponse **srp = NULL;
	Gpusched__V1__SubmitResponse *srs = gsd_pb_repeated(n, sizeof(*srs), (void ***)&srp);
	if (!ps || !srs) {
		free(ps);
		free(srp);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	verdict v;
	/* All or nothing: validate every packet before queueing any. A rejected batch gives
	 * back the fences its packets took (newest first), so a context's fences stay
	 * consecutive: nothing else takes one meanwhile (this runs on the loop). */
	for (size_t i = 0; i < n; i++) {
		int st = q->packets[i]->wait_ms ? refuse(&v, GSD_ST(INVALID_ARGUMENT),
		                                         "wait_ms is for a single Submit")
		                                : build_packet(d, c, q->packets[i], &ps[i], &v);
		if (st != GSD_ST(OK)) {
			for (size_t j = i; j-- > 0;) {
				gsd_context *x = ps[j]->ctx;
				assert(x->fence_submitted == ps[j]->rec.fence);
				x->fence_submitted--;
				x->node->next_fence--;
				gsd_packet_free(ps[j]);
			}
			free(ps);
			free(srp);
			gsd_call_error(c, v.status, "packet %zu of the batch: %s", i, v.msg);
			return;
		}
		submit_out(d, ps[i], &srs[i]);
	}
	Gpusched__V1__SubmitBatchResponse br = GPUSCHED__V1__SUBMIT_BATCH_RESPONSE__INIT;
	br.n_packets = n;
	br.packets = srp;
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_SUBMIT_BATCH;
	resp.submit_batch = &br;
	/* The batch arrives at once: its packets become runnable together once all of their
	 * records are committed, so the first one is not started alone (and unbudgeted) before
	 * its competitors arrive. */
	queue_and_answer(d, c, ps, n, &resp);
	free(ps);
	free(srp);
}

/* ---- packet waits ---- */

static void packet_wait_expired(gsd_call *c)
{
	gsd_packet *p = c->wait_object;
	gsd_waiter_cancel(&c->waiter);
	gsd_call_error(c, GSD_ST(TIMEOUT), "packet %llu is still %s",
	               (unsigned long long)c->req->packet_wait->packet,
	               p->rec.state == GSD_PS(RUNNING) ? "running" : "queued");
}

/* The completed fence of the context of a packet in `state` with `fence`: the context's when
 * it is the caller's and lives, else what the packet tells (its own fence once it ended). */
static uint64_t context_completed_fence(gsd_call *c, uint64_t context, int state, uint64_t fence)
{
	gsd_context *x = gsd_call_find(c, context, GSD_OBJ_CONTEXT);
	if (x)
		return gsd_vidsch_completed_fence(x);
	return gsd_packet_state_final(state) ? fence : 0;
}

/* Answers a PacketWait with a packet's state (FAULTED answers STATUS_FAULTED), its fence and
 * its context's completed fence now. */
static void packet_wait_answer(gsd_call *c, int state, uint64_t fence, uint64_t context)
{
	Gpusched__V1__PacketWaitResponse pw = GPUSCHED__V1__PACKET_WAIT_RESPONSE__INIT;
	pw.packet = c->req->packet_wait->packet;
	pw.state = state;
	pw.fence = fence;
	pw.completed_fence = context_completed_fence(c, context, state, fence);
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.body_case = GPUSCHED__V1__RESPONSE__BODY_PACKET_WAIT;
	resp.packet_wait = &pw;
	if (state == GSD_PS(FAULTED)) {
		resp.status = GSD_ST(FAULTED);
		resp.message = "the packet faulted; see its history events";
	}
	gsd_call_reply(c, &resp);
}

/* The packet reached a final state (event: the packet, about to be retired). */
static void packet_wait_wake(gsd_waiter *w, void *event)
{
	const gsd_packet *p = event;
	packet_wait_answer(gsd_call_of_waiter(w), p->rec.state, p->rec.fence, p->rec.context);
}

static void packet_wait_from_audit(gsd_call *c)
{
	uint64_t wire = c->req->packet_wait->packet;
	uint64_t id = gsd_wire_packet_in(&c->d->wire, wire);
	gsd_packet_rec r;
	char err[256];
	int found = gsd_history_packet(c->d->cfg.db_path, c->identity, id, &r, err, sizeof(err));
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	Gpusched__V1__PacketWaitResponse pw = GPUSCHED__V1__PACKET_WAIT_RESPONSE__INIT;
	if (found < 0) {
		resp.status = GSD_ST(INTERNAL);
		resp.message = err;
	} else if (!found || !gsd_packet_state_final(r.state)) {
		/* Not this tenant's, never submitted, or (rarely) not final in the file yet. */
		snprintf(err, sizeof(err), "packet %llu is not in flight and not in the history",
		         (unsigned long long)wire);
		resp.status = GSD_ST(NOT_FOUND);
		resp.message = err;
	} else {
		/* Off the loop, the context is not looked at: the packet ended, so its completed
		 * fence is at least the packet's own. */
		pw.packet = wire;
		pw.state = r.state;
		pw.fence = r.fence;
		pw.completed_fence = r.fence;
		resp.body_case = GPUSCHED__V1__RESPONSE__BODY_PACKET_WAIT;
		resp.packet_wait = &pw;
		if (r.state == GSD_PS(FAULTED)) {
			resp.status = GSD_ST(FAULTED);
			resp.message = "the packet faulted; see its history events";
		}
	}
	gsd_call_reply_off_loop(c, &resp);
}

void gsd_h_packet_wait(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__PacketWaitRequest *q = R(packet_wait);
	uint64_t id = gsd_wire_packet_in(&d->wire, q->packet);
	gsd_packet *p = id ? gsd_hmap_get(&d->packets, id) : NULL;
	const gsd_retired *r = p || !id ? NULL : gsd_retired_find(d, id);
	/* Another tenant's or guest's packet answers as one that never existed. */
	if ((p && (p->ctx->obj.tenant != c->tenant || p->ctx->obj.guest != c->guest)) ||
	    (r && (r->tenant != c->tenant || r->guest != c->guest))) {
		gsd_call_error(c, GSD_ST(NOT_FOUND),
		               "packet %llu is not in flight and not in the history",
		               (unsigned long long)q->packet);
		return;
	}
	if (p) {
		if (q->timeout_ms == 0) {
			packet_wait_answer(c, p->rec.state, p->rec.fence, p->rec.context);
			return;
		}
		c->wait_object = p;
		gsd_call_wait(c, &p->waiters, packet_wait_wake, q->timeout_ms, packet_wait_expired);
		return;
	}
	if (r) {
		packet_wait_answer(c, r->state, r->fence, r->context);
		return;
	}
	/* Older: the audit file has its final state (a packet a previous daemon left in flight
	 * was recorded ABORTED when this one started). */
	gsd_call_offload(c, packet_wait_from_audit);
}
