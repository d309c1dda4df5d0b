#include "core/packet.h"

#include "core/daemon.h"
#include "core/events.h"
#include "core/log.h"
#include "core/object.h"

#include "pbenum.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- construction ---- */

/* Carves n elements of size bytes at *at (kept 8-byte aligned). */
static void *carve(uint8_t **at, size_t n, size_t size)
{
	void *p = *at;
	*at += (n * size + 7u) & ~(size_t)7u;
	return p;
}

static size_t rounded8(size_t n)
{
	return (n + 7u) & ~(size_t)7u;
}

gsd_packet *gsd_packet_new(const gsd_packet_shape *s)
{
	size_t bytes = rounded8(sizeof(gsd_packet)) +
	               rounded8(s->nallocs * sizeof(gsd_packet_alloc)) +
	               rounded8(s->nranges * sizeof(gsd_range)) +
	               rounded8(s->npatches * sizeof(gsd_packet_patch)) +
	               rounded8(s->nwaits * sizeof(gsd_sync_point)) +
	               rounded8(s->nkernels * sizeof(gsd_kernel *)) +
	               rounded8(s->nkernels * sizeof(gsd_exec_kernel)) + s->dma_len;
	uint8_t *at = calloc(1, bytes);
	if (!at)
		return NULL;
	gsd_packet *p = carve(&at, 1, sizeof(gsd_packet));
	gsd_list_init(&p->link);
	gsd_waitq_init(&p->waiters);
	p->nallocs = s->nallocs;
	p->nranges = s->nranges;
	p->npatches = s->npatches;
	p->nwaits = s->nwaits;
	p->allocs = carve(&at, s->nallocs, sizeof(gsd_packet_alloc));
	p->ranges = carve(&at, s->nranges, sizeof(gsd_range));
	p->patches = carve(&at, s->npatches, sizeof(gsd_packet_patch));
	p->waits = carve(&at, s->nwaits, sizeof(gsd_sync_point));
	p->kernels = carve(&at, s->nkernels, sizeof(gsd_kernel *));
	p->exec_kernels = carve(&at, s->nkernels, sizeof(gsd_exec_kernel));
	p->dma = carve(&at, s->dma_len, 1);
	p->dma_len = s->dma_len;
	if (s->dma_len && s->dma)
		memcpy(p->dma, s->dma, s->dma_len);
	return p;
}

gsd_tenant *gsd_packet_tenant(const gsd_packet *p)
{
	return p->tenant ? p->tenant : p->ctx->obj.tenant;
}

void gsd_packet_free(gsd_packet *p)
{
	free(p); /* its arrays live in the same allocation */
}

/* ---- the state machine ---- */

#define NSTATES (GSD_PS(REJECTED) + 1)
#define BIT(s)  (1u << GSD_PS(s))

/*
 * The legal transitions, by the state a packet leaves. A packet is READY only while it is
 * handed to its engine, so the engine's first report takes it on (RUNNING, or ABORTED by a
 * reset before it started, or FAULTED when that reset was against it); CANCELLED ends any
 * packet that is not on an engine. ABORTED ends a packet for good only when nothing runs it
 * again (a reset that hit it while the daemon stopped); an innocent one is resubmitted.
 */
static const uint32_t g_legal[NSTATES] = {
        [0] = BIT(SUBMITTED) | BIT(REJECTED),
        [GSD_PS(SUBMITTED)] = BIT(READY) | BIT(CANCELLED),
        [GSD_PS(READY)] = BIT(RUNNING) | BIT(ABORTED) | BIT(FAULTED) | BIT(CANCELLED),
        [GSD_PS(RUNNING)] = BIT(COMPLETED) | BIT(FAULTED) | BIT(PREEMPTED) | BIT(ABORTED),
        [GSD_PS(PREEMPTED)] = BIT(RESUBMITTED) | BIT(CANCELLED),
        [GSD_PS(ABORTED)] = BIT(RESUBMITTED) | BIT(CANCELLED),
        [GSD_PS(RESUBMITTED)] = BIT(READY) | BIT(CANCELLED),
};

bool gsd_packet_state_final(int state)
{
	return state == GSD_PS(COMPLETED) || state == GSD_PS(FAULTED) || state == GSD_PS(ABORTED) ||
	       state == GSD_PS(CANCELLED) || state == GSD_PS(REJECTED);
}

bool gsd_packet_state_valid(int state)
{
	return state >= 0 && state < NSTATES;
}

const char *gsd_packet_state_name(int state)
{
	const char *n =
	        gs_enum_name(&gpusched__v1__packet_state__descriptor, state, "PACKET_STATE_");
	return n ? n : "?";
}

bool gsd_packet_transition_legal(int from, int to)
{
	return from >= 0 && from < NSTATES && to >= 0 && to < NSTATES &&
	       (g_legal[from] & (1u << to)) != 0;
}

void gsd_packet_publish(gsd_daemon *d, const gsd_packet *p, const char *detail)
{
	gsd_events_packet(d, &p->rec, p->audit_seq, detail);
}

void gsd_packet_transition(gsd_daemon *d, gsd_packet *p, int state, const char *detail)
{
	int from = p->rec.state;
	if (!gsd_packet_transition_legal(from, state)) {
		char what[160];
		snprintf(what, sizeof(what), "packet %llu: illegal transition %s -> %s",
		         (unsigned long long)gsd_wire_packet_out(&d->wire, p->rec.packet),
		         gsd_packet_state_name(from), gsd_packet_state_name(state));
		GSD_ERROR("%s", what);
		gsd_audit_note(d->audit, p->rec.tenant, "illegal_transition", what);
		assert(!"illegal packet transition");
	}
	p->rec.state = state;
	/* The event's time is the row's time of that state where the caller just set it (a
	 * straight run's events are kept in the row by those times: server/audit/audit.c). */
	uint64_t at = 0;
	if (state == GSD_PS(READY))
		at = p->rec.ready_ns;
	else if (state == GSD_PS(RUNNING))
		at = p->rec.started_ns;
	else if (state == GSD_PS(COMPLETED) || state == GSD_PS(FAULTED) ||
	         state == GSD_PS(CANCELLED))
		at = p->rec.completed_ns;
	p->rec.event_ns = at ? at : gsd_node_now(p->node);
	GSD_DEBUG("packet %llu -> %s%s%s", (unsigned long long)p->rec.packet,
	          gsd_packet_state_name(state), detail ? ": " : "", detail ? detail : "");
	p->audit_seq = gsd_audit_packet(d->audit, &p->rec, detail, NULL, NULL);
	gsd_packet_publish(d, p, detail);
}

/* The hash of the kernel a DISPATCH names (the packet's own list of them); NULL if none. */
static const uint8_t *kernel_hash_of(const gsd_packet *p, uint64_t handle)
{
	for (uint32_t i = 0; i < p->nkernels; i++)
		if (p->kernels[i]->obj.handle == handle)
			return p->kernels[i]->code->hash;
	return NULL;
}

/*
 * What the SUBMITTED record says of a packet's DISPATCH commands, for history, events and
 * explain: each one's kernel (handle and the first 8 bytes of its hash), group counts and
 * bindings as "binding=allocation-list entry+offset:range" (the list's handles are in
 * packet_allocations), as many as fit the record's text; "" without DISPATCH.
 */
static void dispatch_summary(const gsd_packet *p, char *buf, size_t cap)
{
	size_t len = 0, pos = 0, shown = 0, total = 0;
	gs_isa_cmd cmd;
	buf[0] = '\0';
	while (gs_isa_decode(p->dma, p->dma_len, &pos, &cmd) == GS_ISA_OK) {
		if (cmd.op != GS_OP_DISPATCH)
			continue;
		total++;
		char one[256];
		const uint8_t *h = kernel_hash_of(p, cmd.kernel);
		int n = snprintf(one, sizeof(one), "%sDISPATCH kernel %llu ", shown ? "; " : "",
		                 (unsigned long long)cmd.kernel);
		for (int i = 0; h && i < 8; i++)
			n += snprintf(one + n, sizeof(one) - (size_t)n, "%02x", h[i]);
		n += snprintf(one + n, sizeof(one) - (size_t)n, " groups %ux%ux%u", cmd.groups[0],
		              cmd.groups[1], cmd.groups[2]);
		for (unsigned i = 0; i < cmd.nbindings && (size_t)n < sizeof(one); i++) {
			gs_isa_binding b;
			gs_isa_dispatch_binding(&cmd, i, &b);
			n += snprintf(one + n, sizeof(one) - (size_t)n, " %u=#%u+%llu:%llu",
			              b.binding, b.alloc_index, (unsigned long long)b.offset,
			              (unsigned long long)b.range);
		}
		/* Room is kept for the "(+N more)" that says what did not fit. */
		if ((size_t)n >= sizeof(one) || len + (size_t)n + 16 >= cap)
			continue;
		memcpy(buf + len, one, (size_t)n + 1);
		len += (size_t)n;
		shown++;
	}
	if (total > shown && len + 16 < cap)
		snprintf(buf + len, cap - len, " (+%zu more)", total - shown);
}

uint64_t gsd_packet_audit_submitted(gsd_daemon *d, const gsd_packet *p, gsd_audit_ack_fn ack,
                                    void *ack_arg)
{
	char summary[GSD_AUDIT_TEXT_MAX + 1];
	const char *detail = NULL;
	if (p->nkernels) {
		dispatch_summary(p, summary, sizeof(summary));
		detail = summary;
	}
	if (p->nallocs == 0)
		return gsd_audit_packet(d->audit, &p->rec, detail, ack, ack_arg);
	uint64_t hs[64];
	bool ws[64];
	uint64_t *h = hs;
	bool *w = ws;
	if (p->nallocs > 64) {
		h = malloc(p->nallocs * sizeof(*h));
		w = malloc(p->nallocs * sizeof(*w));
	}
	uint64_t seq;
	if (h && w) {
		for (uint32_t i = 0; i < p->nallocs; i++) {
			h[i] = p->allocs[i].alloc->obj.handle;
			w[i] = p->allocs[i].write;
		}
		seq = gsd_audit_submitted(d->audit, &p->rec, detail, h, w, p->nallocs, ack,
		                          ack_arg);
	} else {
		GSD_ERROR("packet %llu: out of memory listing its %u allocations for the audit",
		          (unsigned long long)p->rec.packet, p->nallocs);
		seq = gsd_audit_packet(d->audit, &p->rec, detail, ack, ack_arg);
	}
	if (h != hs)
		free(h);
	if (w != ws)
		free(w);
	return seq;
}

/* ---- retired packets ---- */

void gsd_retired_record(gsd_daemon *d, const gsd_packet *p)
{
	gsd_retired *r = &d->retired[p->rec.packet % GSD_RETIRED_RING];
	r->packet = p->rec.packet;
	r->fence = p->rec.fence;
	r->context = p->rec.context;
	r->tenant = p->ctx->obj.tenant;
	r->guest = p->ctx->obj.guest;
	r->state = p->rec.state;
}

const gsd_retired *gsd_retired_find(const gsd_daemon *d, uint64_t packet)
{
	const gsd_retired *r = &d->retired[packet % GSD_RETIRED_RING];
	return r->packet == packet ? r : NULL;
}
