/*
 * gpusched demo: a mixed, verified workload. Two contexts on two nodes FILL, COPY and
 * CHECKSUM a few allocations while the CPU keeps a model of every byte they must end up
 * holding; at the end every allocation is read back and compared byte-exact, and every
 * checksum the GPU wrote is compared with XXH64 computed here.
 *
 * With more working allocations (--allocs) than video memory holds, the daemon's memory
 * manager pages them in and out between packets; each packet references at most
 * DEMO_PACKET_ALLOCS of them (plus the result allocation), so that one packet's list always
 * fits. The paging packets and bytes the demo caused are read back from the audit record.
 *
 * Ordering: packets of one context run in submission order, packets of different contexts
 * do not. Every packet ends with a SIGNAL of its context's sync object; before a packet
 * touches an allocation that the other context touched in a packet that may not have run
 * yet, the CPU waits for that packet's signal value. The model is updated in submission
 * order, which those waits make the GPU's order for every allocation.
 *
 * Requests go through libgpusched's asynchronous calls: one context's submission stays in
 * flight while the other context's packet is built and submitted (a context's own packets
 * are submitted one after the other, acknowledged before the next, so the daemon receives
 * them in order), and the final wait keeps many packet waits in flight at once.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "isa.h" /* gs_isa_checksum, gs_isa_fill: the reference semantics to verify against */

#define DEMO_ALLOCS        4  /* default working allocations; one more holds checksum results */
#define DEMO_ALLOCS_MAX    64 /* --allocs at most */
#define DEMO_PACKET_ALLOCS 4  /* distinct working allocations one packet references at most */
#define DEMO_CONTEXTS      2
#define DEMO_MAX_CMDS      3            /* commands per packet besides the SIGNAL (and a SPIN) */
#define DEMO_MAX_OP        (64u << 10)  /* largest FILL/COPY */
#define DEMO_MAX_SUM       (256u << 10) /* largest CHECKSUM source */
#define DEMO_IO_CHUNK      (64u << 10)  /* bytes per allocation_read/_write request */
#define DEMO_CHECK_SIZE    8u           /* a CHECKSUM writes 8 bytes */
#define DEMO_MAX_REPORTS   5            /* mismatches described one by one before summarising */
#define DEMO_AUDIT_PAGE    10000u       /* records per history/moves request (the daemon's max) */
#define DEMO_AUDIT_PAGES   16           /* requests at most when counting paging (bounded) */
#define DEMO_WAITS         32 /* packet waits in flight while draining (< max_waits_per_conn) */
#define DEMO_POLL_MS       (2 * GS_DEFAULT_TIMEOUT_MS) /* longer than any request's deadline */

static const char help[] =
        "Usage: gpusched demo [--packets N] [--allocs N] [--alloc-size BYTES] [--seed S]\n"
        "                     [--json]\n"
        "Runs a verified workload on the adapter: creates a device, a context on each of the\n"
        "first two nodes, --allocs working allocations (default 4) with different segment\n"
        "preferences and priorities and a result allocation, then submits --packets packets\n"
        "(default 64) on both contexts mixing FILL with random patterns, COPY between\n"
        "allocations and CHECKSUM (XXH64) into the result allocation. Each packet references\n"
        "at most 4 of the working allocations (picked at random per packet) and the result\n"
        "allocation.\n"
        "Cross-context dependencies are made explicit with sync objects: every packet signals\n"
        "its context's sync object and the CPU waits for the other context's value before\n"
        "submitting a packet that touches the same allocation.\n"
        "At the end it reads every allocation back and compares it byte-exact with a CPU-side\n"
        "model, and compares every checksum the GPU wrote with one computed locally. It prints\n"
        "how many paging packets the memory manager ran for the demo's device and how many\n"
        "bytes they moved (from the audit record), then destroys everything it created.\n"
        "With more allocation bytes than the adapter's segments hold (--allocs x --alloc-size),\n"
        "the demo over-commits video memory: allocations are paged in and out between packets\n"
        "and must still read back byte-exact.\n"
        "\n"
        "Options:\n"
        "  --packets N        packets to submit (default 64)\n"
        "  --allocs N         working allocations, 1..64 (default 4)\n"
        "  --alloc-size BYTES size of each working allocation (default 1048576)\n"
        "  --seed S           random seed (default: from the clock; printed for replays)\n"
        "  --json             one object: packets_submitted, packets_completed, checksums_ok,\n"
        "                     checksums_total, bytes_verified, bytes_mismatched,\n"
        "                     cross_context_waits, allocations, alloc_size, segment_bytes,\n"
        "                     paging_packets, bytes_paged, elapsed_s, seed, nodes, ok\n"
        "\n"
        "Exit status: 0 verified, 4 a byte or checksum differs or a packet did not complete,\n"
        "1 the daemon returned an error, 3 the connection failed.\n";

typedef struct demo_alloc {
	gs_allocation_placement place;
	uint64_t size;
	uint8_t *model; /* the bytes the GPU must leave there */
	/* Signal value of the last packet of each context that touched it (0: none). */
	uint64_t last_value[DEMO_CONTEXTS];
} demo_alloc;

typedef struct demo_context {
	uint64_t context;
	uint32_t node;
	uint64_t sync;
	uint64_t signalled; /* value of the last SIGNAL submitted on this context */
	uint64_t reached;   /* value the CPU has seen reached */
} demo_context;

typedef struct demo_check {
	uint64_t slot; /* index of the 8-byte result in the result allocation */
	uint64_t expected;
} demo_check;

typedef struct demo {
	cli *ctx;
	gs_client *c;
	/* options */
	uint32_t packet_count;
	uint64_t seed;
	bool seeded; /* --seed given; else the seed comes from the clock */
	uint64_t alloc_size;
	uint32_t nallocs; /* working allocations; allocs[nallocs] is the result allocation */
	/* state */
	uint64_t rng;
	uint64_t device;
	demo_context ctxs[DEMO_CONTEXTS];
	size_t ctx_count;
	demo_alloc allocs[DEMO_ALLOCS_MAX + 1];
	size_t alloc_count;
	size_t pick[DEMO_PACKET_ALLOCS]; /* the working allocations the current packet may use */
	size_t npick;
	uint64_t segment_bytes; /* the adapter's segments, all together */
	demo_check *checks;
	size_t check_count;
	uint64_t *packets;
	size_t packet_submitted;
	gs_dmabuf buf;
	bool progress;
	/* Requests in flight (libgpusched's asynchronous calls): at most one submission per
	 * context, since packets of a context run in the order the daemon receives them, and up
	 * to DEMO_WAITS packet waits while draining. */
	gs_async_queue *q;
	int64_t submitting[DEMO_CONTEXTS]; /* index of the packet in flight, -1: none */
	/* results */
	uint64_t completed;
	uint64_t cross_waits;
	uint64_t bytes_verified;
	uint64_t bytes_mismatched;
	size_t checks_ok;
	int reports;
	uint64_t paging_packets; /* paging packets of the demo's device (audit record) */
	uint64_t bytes_paged;    /* bytes they moved */
	bool paging_known;       /* false: the daemon does not serve the audit queries */
	bool paging_partial;     /* more records than DEMO_AUDIT_PAGES requests return */
} demo;

#define RESULT_ALLOC(d) ((size_t)(d)->nallocs)

/* ---- randomness ------------------------------------------------------------------------- */

/* splitmix64: tiny, seedable from any value, and good enough to pick operations. */
static uint64_t rnd(demo *d)
{
	uint64_t z = (d->rng += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* A uniformly placed range of 1..max_len bytes inside `size` bytes. */
static void pick_range(demo *d, uint64_t size, uint64_t max_len, uint64_t *off, uint64_t *len)
{
	uint64_t cap = size < max_len ? size : max_len;

	*len = 1 + rnd(d) % cap;
	*off = rnd(d) % (size - *len + 1);
}

/* ---- setup and teardown ----------------------------------------------------------------- */

static const gs_adapter_info *find_adapter(const gs_daemon_info *info, uint32_t id)
{
	for (size_t i = 0; i < info->adapter_count; i++)
		if (info->adapters[i].id == id)
			return &info->adapters[i];
	return NULL;
}

static int create_contexts(demo *d, const gs_adapter_info *a)
{
	uint32_t paging = 0;
	gs_context_desc desc;
	int rv;

	for (size_t i = 0; i < a->node_count; i++)
		if (a->nodes[i].paging)
			paging = a->nodes[i].id;
	for (size_t i = 0; i < DEMO_CONTEXTS; i++) {
		demo_context *x = &d->ctxs[i];

		/* The first two nodes; an adapter with one node gets both contexts on it. */
		x->node = a->nodes[i < a->node_count ? i : 0].id;
		gs_context_desc_init(&desc, d->device, x->node);
		desc.info.paging_companion_node_id = paging;
		rv = gs_context_create(d->c, &desc, &x->context, NULL);
		if (rv != 0)
			return rv;
		d->ctx_count = i + 1;
		rv = gs_sync_create(d->c, d->device, 0, &x->sync);
		if (rv != 0)
			return rv;
	}
	return 0;
}

/* Writes the model's initial bytes into the allocation. */
static int upload(demo *d, const demo_alloc *a)
{
	for (uint64_t off = 0; off < a->size; off += DEMO_IO_CHUNK) {
		uint64_t n = a->size - off < DEMO_IO_CHUNK ? a->size - off : DEMO_IO_CHUNK;
		int rv = gs_allocation_write(d->c, a->place.allocation, off, a->model + off, n);

		if (rv != 0)
			return rv;
	}
	return 0;
}

static int create_allocations(demo *d, const gs_adapter_info *ad)
{
	static const uint32_t priorities[DEMO_ALLOCS] = {
	        GS_ALLOC_PRIORITY_NORMAL, GS_ALLOC_PRIORITY_HIGH, GS_ALLOC_PRIORITY_LOW, 0};
	uint32_t supported = 0;
	int rv;

	for (size_t i = 0; i < ad->segment_count; i++) {
		if (ad->segments[i].id <= GS_SEGMENT_ID_MAX)
			supported |= 1u << ad->segments[i].id;
		d->segment_bytes += ad->segments[i].size;
	}

	for (size_t i = 0; i <= d->nallocs; i++) {
		demo_alloc *a = &d->allocs[i];
		gs_allocation_desc desc = {
		        .device = d->device,
		        .supported_segment_set = supported,
		};
		gs_segpref pref = {{0}};

		if (i < d->nallocs) {
			a->size = d->alloc_size;
			desc.priority = priorities[i % DEMO_ALLOCS];
			/* Each working allocation prefers another segment, every fourth none. */
			if (i % DEMO_ALLOCS + 1 < DEMO_ALLOCS && ad->segment_count) {
				pref.segment[0] = (uint8_t)ad->segments[i % ad->segment_count].id;
				desc.segment_preference = gs_segpref_encode(&pref);
			}
		} else {
			a->size = (uint64_t)d->packet_count * DEMO_MAX_CMDS * DEMO_CHECK_SIZE;
		}
		desc.size = a->size;
		a->model = malloc(a->size);
		if (!a->model)
			return GS_ERR_NOMEM;
		for (uint64_t b = 0; b < a->size; b++)
			a->model[b] = i < d->nallocs ? (uint8_t)rnd(d) : 0;
		rv = gs_allocation_create(d->c, &desc, &a->place);
		if (rv != 0) {
			free(a->model);
			a->model = NULL;
			return rv;
		}
		d->alloc_count = i + 1;
		rv = upload(d, a);
		if (rv != 0)
			return rv;
	}
	return 0;
}

static int setup(demo *d)
{
	const gs_adapter_info *a;
	gs_daemon_info *info;
	int rv;

	rv = gs_info(d->c, &info);
	if (rv != 0)
		return rv;
	a = find_adapter(info, d->ctx->adapter);
	if (!a || a->node_count == 0) {
		gs_info_free(info);
		cli_warn(d->ctx, "adapter %" PRIu32 " %s", d->ctx->adapter,
		         a ? "has no nodes" : "does not exist (see gpusched info)");
		return GS_STATUS_NOT_FOUND;
	}
	rv = gs_device_create(d->c, "gpusched-demo", &d->device);
	if (rv == 0)
		rv = create_contexts(d, a);
	if (rv == 0)
		rv = create_allocations(d, a);
	gs_info_free(info);
	return rv;
}

/* Destroys what setup created, in the reverse order; the first failure is returned. */
static int teardown(demo *d)
{
	int first = 0, rv;

	/* Contexts first: their queued packets (only after an error) are cancelled, not left
	 * running against allocations that are about to go. */
	for (size_t i = d->ctx_count; i-- > 0;) {
		rv = gs_context_destroy(d->c, d->ctxs[i].context);
		first = first ? first : rv;
		if (d->ctxs[i].sync) {
			rv = gs_sync_destroy(d->c, d->ctxs[i].sync);
			first = first ? first : rv;
		}
	}
	for (size_t i = d->alloc_count; i-- > 0;) {
		rv = gs_allocation_destroy(d->c, d->allocs[i].place.allocation);
		first = first ? first : rv;
	}
	if (d->device) {
		rv = gs_device_destroy(d->c, d->device);
		first = first ? first : rv;
	}
	return first;
}

static void demo_free(demo *d)
{
	for (size_t i = 0; i < d->alloc_count; i++)
		free(d->allocs[i].model);
	free(d->checks);
	free(d->packets);
	gs_dmabuf_free(&d->buf);
	gs_async_queue_destroy(d->q);
}

/* ---- the workload ----------------------------------------------------------------------- */

/* One of the working allocations the current packet may use. */
static size_t pick_alloc(demo *d)
{
	return d->pick[rnd(d) % d->npick];
}

/* Chooses the packet's working allocations: all of them when there are few, else
 * DEMO_PACKET_ALLOCS distinct ones at random (a partial Fisher-Yates shuffle). */
static void pick_allocs(demo *d)
{
	size_t order[DEMO_ALLOCS_MAX];

	if (d->nallocs <= DEMO_PACKET_ALLOCS) {
		for (size_t i = 0; i < d->nallocs; i++)
			d->pick[i] = i;
		d->npick = d->nallocs;
		return;
	}
	for (size_t i = 0; i < d->nallocs; i++)
		order[i] = i;
	for (size_t i = 0; i < DEMO_PACKET_ALLOCS; i++) {
		size_t j = i + rnd(d) % (d->nallocs - i), t = order[i];

		order[i] = order[j];
		order[j] = t;
		d->pick[i] = order[i];
	}
	d->npick = DEMO_PACKET_ALLOCS;
}

static int add_fill(demo *d, bool *touched)
{
	size_t i = pick_alloc(d);
	demo_alloc *a = &d->allocs[i];
	uint32_t pattern = (uint32_t)rnd(d);
	uint64_t off, len;

	pick_range(d, a->size, DEMO_MAX_OP, &off, &len);
	touched[i] = true;
	gs_isa_fill(a->model + off, len, pattern);
	return gs_dmabuf_fill(&d->buf, a->place.allocation, off, len, pattern);
}

static int add_copy(demo *d, bool *touched)
{
	size_t di = pick_alloc(d), si = pick_alloc(d);
	demo_alloc *dst = &d->allocs[di], *src = &d->allocs[si];
	uint64_t doff, soff, len;

	/* Same-allocation copies are kept: overlapping ranges exercise memmove semantics. */
	pick_range(d, dst->size < src->size ? dst->size : src->size, DEMO_MAX_OP, &soff, &len);
	doff = rnd(d) % (dst->size - len + 1);
	soff = rnd(d) % (src->size - len + 1);
	touched[di] = touched[si] = true;
	memmove(dst->model + doff, src->model + soff, len);
	return gs_dmabuf_copy(&d->buf, dst->place.allocation, doff, src->place.allocation, soff,
	                      len);
}

static int add_checksum(demo *d, bool *touched)
{
	size_t i = pick_alloc(d);
	demo_alloc *a = &d->allocs[i], *res = &d->allocs[RESULT_ALLOC(d)];
	demo_check *chk = &d->checks[d->check_count];
	uint64_t off, len;

	pick_range(d, a->size, DEMO_MAX_SUM, &off, &len);
	touched[i] = true;
	chk->slot = d->check_count++;
	chk->expected = gs_isa_checksum(a->model + off, len);
	gs_le64_put(res->model + chk->slot * DEMO_CHECK_SIZE, chk->expected);
	return gs_dmabuf_checksum(&d->buf, res->place.allocation, chk->slot * DEMO_CHECK_SIZE,
	                          a->place.allocation, off, len);
}

/* Builds one packet for context x and updates the model as if it ran now. */
static int build_packet(demo *d, size_t x, bool *touched)
{
	int cmds = 1 + (int)(rnd(d) % DEMO_MAX_CMDS), rv = 0;

	gs_dmabuf_reset(&d->buf);
	pick_allocs(d);
	/* Some engine time now and then, so that the two nodes overlap. */
	if (rnd(d) % 8 == 0)
		rv = gs_dmabuf_spin(&d->buf, 20 + rnd(d) % 200, 0);
	for (int i = 0; rv == 0 && i < cmds; i++) {
		uint64_t r = rnd(d) % 100;

		if (r < 40)
			rv = add_fill(d, touched);
		else if (r < 75)
			rv = add_copy(d, touched);
		else
			rv = add_checksum(d, touched);
	}
	if (rv == 0)
		rv = gs_dmabuf_signal(&d->buf, d->ctxs[x].sync, d->ctxs[x].signalled + 1);
	return rv;
}

/* The completion of one request in flight; applies a submission's. */
static int collect(demo *d, gs_async_event *ev)
{
	int n = gs_async_poll(d->q, ev, 1, (int)DEMO_POLL_MS);

	if (n < 0)
		return n;
	if (n == 0)
		return GS_ERR_TIMEOUT; /* cannot happen: every request has a shorter deadline */
	if (ev->kind != GS_ASYNC_SUBMIT)
		return 0;
	for (size_t x = 0; x < DEMO_CONTEXTS; x++)
		if (d->submitting[x] == (int64_t)(uintptr_t)ev->user)
			d->submitting[x] = -1;
	if (ev->status != 0) {
		cli_warn(d->ctx, "submission: %s", ev->message);
		return ev->status;
	}
	d->packets[(size_t)(uintptr_t)ev->user] = ev->submit.packet;
	return 0;
}

/* Waits until context x's submission in flight, if any, is acknowledged. */
static int settle(demo *d, size_t x)
{
	gs_async_event ev;

	while (d->submitting[x] >= 0) {
		int rv = collect(d, &ev);

		if (rv != 0)
			return rv;
	}
	return 0;
}

/* Waits until every packet of another context that touched these allocations has run. The
 * result allocation is left out: each CHECKSUM writes its own 8 bytes of it. */
static int wait_dependencies(demo *d, size_t x, const bool *touched)
{
	for (size_t y = 0; y < DEMO_CONTEXTS; y++) {
		demo_context *other = &d->ctxs[y];
		uint64_t need = 0;
		int rv;

		if (y == x)
			continue;
		for (size_t i = 0; i < d->nallocs; i++)
			if (touched[i] && d->allocs[i].last_value[y] > need)
				need = d->allocs[i].last_value[y];
		if (need <= other->reached)
			continue;
		/* Its packet that signals `need` must be queued before the wait can end. */
		rv = settle(d, y);
		if (rv == 0)
			rv = gs_sync_wait(d->c, other->sync, need, GS_DEFAULT_TIMEOUT_MS, NULL);
		if (rv != 0)
			return rv;
		other->reached = need;
		d->cross_waits++;
	}
	return 0;
}

static void show_progress(demo *d, const char *what, size_t done, size_t total)
{
	if (d->progress)
		fprintf(stderr, "\rdemo: %s %zu/%zu\033[K", what, done, total);
}

static int run(demo *d)
{
	gs_async_opts o = {.queue = d->q};

	for (uint32_t p = 0; p < d->packet_count; p++) {
		/* Mostly alternate, sometimes repeat: both in-order runs and switches occur. */
		size_t x = (p + (rnd(d) % 4 == 0)) % DEMO_CONTEXTS;
		bool touched[DEMO_ALLOCS_MAX] = {false};
		int rv;

		rv = build_packet(d, x, touched);
		/* The previous packet of this context first: the daemon orders a context's packets
		 * as it receives them. The other context's submission stays in flight meanwhile. */
		if (rv == 0)
			rv = settle(d, x);
		if (rv == 0)
			rv = wait_dependencies(d, x, touched);
		o.user = (void *)(uintptr_t)p;
		if (rv == 0)
			rv = gs_async_submit(d->c, d->ctxs[x].context, &d->buf, 0, &o, NULL);
		if (rv != 0)
			return rv;
		d->submitting[x] = p;
		d->packet_submitted++;
		d->ctxs[x].signalled++;
		for (size_t i = 0; i < d->nallocs; i++)
			if (touched[i])
				d->allocs[i].last_value[x] = d->ctxs[x].signalled;
		show_progress(d, "submitted", p + 1, d->packet_count);
	}
	for (size_t x = 0; x < DEMO_CONTEXTS; x++) {
		int rv = settle(d, x);

		if (rv != 0)
			return rv;
	}
	return 0;
}

/* Waits for every packet, DEMO_WAITS at a time in flight; counts those that completed. */
static int drain(demo *d)
{
	gs_async_opts o = {.queue = d->q};
	size_t started = 0, done = 0;

	while (done < d->packet_submitted) {
		gs_async_event ev;
		int rv;

		while (started < d->packet_submitted && started - done < DEMO_WAITS) {
			o.user = (void *)(uintptr_t)started;
			rv = gs_async_packet_wait(d->c, d->packets[started], GS_DEFAULT_TIMEOUT_MS,
			                          &o, NULL);
			if (rv != 0)
				return rv;
			started++;
		}
		rv = collect(d, &ev);
		if (rv == 0 && ev.status != 0) {
			cli_warn(d->ctx, "waiting for packet %" PRIu64 ": %s",
			         d->packets[(size_t)(uintptr_t)ev.user], ev.message);
			rv = ev.status;
		}
		if (rv != 0)
			return rv;
		done++;
		if (ev.state == GS_PACKET_COMPLETED)
			d->completed++;
		else if (d->reports++ < DEMO_MAX_REPORTS)
			cli_warn(d->ctx, "packet %" PRIu64 " ended %s",
			         d->packets[(size_t)(uintptr_t)ev.user],
			         gs_packet_state_name(ev.state));
		show_progress(d, "completed", done, d->packet_submitted);
	}
	return 0;
}

/* ---- verification ----------------------------------------------------------------------- */

static void compare(demo *d, size_t index, const uint8_t *got)
{
	const demo_alloc *a = &d->allocs[index];
	uint64_t bad = 0, first = 0;

	for (uint64_t b = 0; b < a->size; b++) {
		if (got[b] != a->model[b] && bad++ == 0)
			first = b;
	}
	d->bytes_verified += a->size;
	d->bytes_mismatched += bad;
	if (bad && d->reports++ < DEMO_MAX_REPORTS)
		cli_warn(d->ctx,
		         "allocation %" PRIu64 ": %" PRIu64
		         " byte%s differ, the first at offset %" PRIu64
		         " (expected 0x%02x, got 0x%02x)",
		         a->place.allocation, bad, bad == 1 ? "" : "s", first, a->model[first],
		         got[first]);
}

static void compare_checks(demo *d, const uint8_t *got)
{
	for (size_t i = 0; i < d->check_count; i++) {
		const demo_check *chk = &d->checks[i];
		uint64_t v = gs_le64_get(got + chk->slot * DEMO_CHECK_SIZE);

		if (v == chk->expected)
			d->checks_ok++;
		else if (d->reports++ < DEMO_MAX_REPORTS)
			cli_warn(d->ctx,
			         "checksum %zu: expected %016" PRIx64 ", the GPU wrote %016" PRIx64,
			         i, chk->expected, v);
	}
}

static int verify(demo *d)
{
	uint8_t *got = NULL;
	int rv = 0;

	for (size_t i = 0; rv == 0 && i <= d->nallocs; i++) {
		const demo_alloc *a = &d->allocs[i];

		got = malloc(a->size);
		if (!got)
			return GS_ERR_NOMEM;
		for (uint64_t off = 0; rv == 0 && off < a->size; off += DEMO_IO_CHUNK) {
			uint64_t n = a->size - off < DEMO_IO_CHUNK ? a->size - off : DEMO_IO_CHUNK;

			rv = gs_allocation_read(d->c, a->place.allocation, off, got + off, n);
		}
		if (rv == 0) {
			compare(d, i, got);
			if (i == RESULT_ALLOC(d))
				compare_checks(d, got);
		}
		free(got);
		show_progress(d, "verified allocation", i + 1, (size_t)d->nallocs + 1);
	}
	return rv;
}

/* ---- paging ----------------------------------------------------------------------------- */

/* The demo's device is its own: every paging packet and move recorded for it was caused by
 * the demo. Both queries page through the record newest first, DEMO_AUDIT_PAGE records at a
 * time, for at most DEMO_AUDIT_PAGES requests each. */
static int count_paging_packets(demo *d)
{
	gs_history_filter f = {.device = d->device, .paging = true, .limit = DEMO_AUDIT_PAGE};

	for (int page = 0; page < DEMO_AUDIT_PAGES; page++) {
		gs_packet_record *recs;
		size_t n;
		int rv = gs_history(d->c, &f, &recs, &n);

		if (rv != 0)
			return rv;
		/* ContextSwitch packets without the Paging flag move nothing. */
		for (size_t i = 0; i < n; i++)
			if (recs[i].submit_flags & GS_SUBMIT_PAGING)
				d->paging_packets++;
		if (n)
			f.before_packet = recs[n - 1].packet;
		gs_history_free(recs, n);
		if (n < f.limit)
			return 0;
	}
	d->paging_partial = true;
	return 0;
}

static int count_paged_bytes(demo *d)
{
	gs_moves_filter f = {.device = d->device, .limit = DEMO_AUDIT_PAGE};

	for (int page = 0; page < DEMO_AUDIT_PAGES; page++) {
		gs_move *moves;
		size_t n;
		int rv = gs_moves(d->c, &f, &moves, &n);

		if (rv != 0)
			return rv;
		/* Only moves a paging packet carried out moved bytes (not PLACE, RESIDENT, FREE).
		 */
		for (size_t i = 0; i < n; i++)
			if (moves[i].packet)
				d->bytes_paged += moves[i].bytes;
		if (n)
			f.before_seq = moves[n - 1].seq;
		gs_moves_free(moves, n);
		if (n < f.limit)
			return 0;
	}
	d->paging_partial = true;
	return 0;
}

/* A daemon that does not serve the audit queries still runs the demo. */
static int count_paging(demo *d)
{
	int rv = count_paging_packets(d);

	if (rv == 0)
		rv = count_paged_bytes(d);
	if (rv == GS_STATUS_UNIMPLEMENTED) {
		cli_warn(d->ctx, "the daemon does not report paging: %s", gs_client_message(d->c));
		d->paging_packets = d->bytes_paged = 0;
		return 0;
	}
	d->paging_known = rv == 0;
	return rv;
}

/* ---- report ----------------------------------------------------------------------------- */

static bool demo_ok(const demo *d)
{
	return d->completed == d->packet_submitted && d->bytes_mismatched == 0 &&
	       d->checks_ok == d->check_count;
}

static void report(const demo *d, double elapsed)
{
	uint64_t working = (uint64_t)d->nallocs * d->alloc_size;
	char bytes[32], size[32], total[32], segs[32], paged[32];

	if (d->ctx->json) {
		json_t *o = json_pack(
		        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:o, s:[I, I], s:b}",
		        "packets_submitted", cli_json_u64(d->packet_submitted), "packets_completed",
		        cli_json_u64(d->completed), "checksums_ok", cli_json_u64(d->checks_ok),
		        "checksums_total", cli_json_u64(d->check_count), "bytes_verified",
		        cli_json_u64(d->bytes_verified), "bytes_mismatched",
		        cli_json_u64(d->bytes_mismatched), "cross_context_waits",
		        cli_json_u64(d->cross_waits), "elapsed_s", elapsed, "seed",
		        cli_json_u64(d->seed), "nodes", (json_int_t)d->ctxs[0].node,
		        (json_int_t)d->ctxs[1].node, "ok", demo_ok(d));

		json_object_set_new(o, "allocations", json_integer(d->nallocs));
		json_object_set_new(o, "alloc_size", cli_json_u64(d->alloc_size));
		json_object_set_new(o, "segment_bytes", cli_json_u64(d->segment_bytes));
		/* null: the daemon did not say. */
		json_object_set_new(o, "paging_packets",
		                    d->paging_known ? cli_json_u64(d->paging_packets)
		                                    : json_null());
		json_object_set_new(o, "bytes_paged",
		                    d->paging_known ? cli_json_u64(d->bytes_paged) : json_null());
		cli_json_print(o);
		return;
	}
	cli_format_bytes(d->bytes_verified, bytes, sizeof(bytes));
	cli_format_bytes(d->alloc_size, size, sizeof(size));
	cli_format_bytes(working, total, sizeof(total));
	cli_format_bytes(d->segment_bytes, segs, sizeof(segs));
	cli_format_bytes(d->bytes_paged, paged, sizeof(paged));
	printf("demo: contexts on nodes %" PRIu32 " and %" PRIu32 ", seed %" PRIu64 "\n",
	       d->ctxs[0].node, d->ctxs[1].node, d->seed);
	printf("demo: %" PRIu32 " working allocation%s of %s (%s) on %s of segments%s\n",
	       d->nallocs, d->nallocs == 1 ? "" : "s", size, total, segs,
	       working > d->segment_bytes ? " (over-committed)" : "");
	printf("demo: %zu packets submitted, %" PRIu64 " completed, %" PRIu64
	       " cross-context waits\n",
	       d->packet_submitted, d->completed, d->cross_waits);
	if (d->paging_known)
		printf("demo: %s%" PRIu64 " paging packet%s moved %s\n",
		       d->paging_partial ? "at least " : "", d->paging_packets,
		       d->paging_packets == 1 ? "" : "s", paged);
	printf("demo: checksums %zu/%zu ok, %s verified (%" PRIu64 " bytes differ), %.3f s\n",
	       d->checks_ok, d->check_count, bytes, d->bytes_mismatched, elapsed);
	printf("demo: %s\n", demo_ok(d) ? "OK" : "FAILED");
}

/* ---- command ---------------------------------------------------------------------------- */

static const cli_opt demo_opts[] = {
        {"packets", CLI_ARG_U32, offsetof(demo, packet_count)},
        {"seed", CLI_ARG_U64, offsetof(demo, seed), .given = CLI_GIVEN(demo, seeded)},
        {"alloc-size", CLI_ARG_U64, offsetof(demo, alloc_size)},
        {"allocs", CLI_ARG_U32, offsetof(demo, nallocs), .min = 1, .max = DEMO_ALLOCS_MAX},
};

static const cli_syntax demo_syntax = {help, CLI_OPTS(demo_opts)};

/* Returns CLI_CONTINUE to go on, or the exit code to return now. */
static int parse_args(demo *d, int argc, char **argv)
{
	int rv = cli_parse_args(d->ctx, argc, argv, &demo_syntax, d);

	if (rv != CLI_CONTINUE)
		return rv;
	if (d->packet_count == 0 || d->alloc_size == 0)
		return cli_usage(d->ctx, "--packets and --alloc-size must be positive");
	if (!d->seeded) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		d->seed = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
	return CLI_CONTINUE;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cmd_demo(cli *ctx, int argc, char **argv)
{
	demo d = {.ctx = ctx, .packet_count = 64, .alloc_size = 1u << 20, .nallocs = DEMO_ALLOCS};
	double start;
	int rv, cleanup, code;

	gs_dmabuf_init(&d.buf);
	rv = parse_args(&d, argc, argv);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	d.c = ctx->client;
	d.rng = d.seed;
	d.progress = isatty(STDERR_FILENO);
	d.packets = calloc(d.packet_count, sizeof(*d.packets));
	d.checks = calloc((size_t)d.packet_count * DEMO_MAX_CMDS, sizeof(*d.checks));
	for (size_t x = 0; x < DEMO_CONTEXTS; x++)
		d.submitting[x] = -1;
	if (!d.packets || !d.checks || gs_async_queue_create(&d.q) != 0) {
		demo_free(&d);
		return cli_fail(ctx, GS_ERR_NOMEM);
	}

	start = now_s();
	rv = setup(&d);
	if (rv == 0)
		rv = run(&d);
	if (rv == 0)
		rv = drain(&d);
	if (rv == 0)
		rv = verify(&d);
	if (rv == 0)
		rv = count_paging(&d);
	if (d.progress)
		fprintf(stderr, "\r\033[K");
	code = rv != 0 ? cli_fail(ctx, rv) : CLI_EXIT_OK;

	cleanup = teardown(&d);
	if (cleanup != 0 && code == CLI_EXIT_OK)
		code = cli_fail(ctx, cleanup);
	if (rv == 0) {
		report(&d, now_s() - start);
		if (code == CLI_EXIT_OK && !demo_ok(&d))
			code = CLI_EXIT_VERIFY;
	}
	demo_free(&d);
	return code;
}
