/*
 * The video memory manager (server/vidmm/) against real daemons: over-committed video
 * memory under a seeded workload, moves while a packet is preempted, tiled allocations and
 * their swizzling transfers, explicit MakeResident / Evict / Transfer, and the requests the
 * memory manager refuses.
 *
 * Every wait is bounded and on daemon state: a packet reaching a final state (PacketWait), a
 * sync object reaching a value (a SIGNAL the packet executes, or the device's paging fence),
 * a packet's events (bounded polling). No test sleeps.
 *
 * The audit file is read after an audit barrier (itest_audit_barrier): once that NOP is
 * acknowledged, every record the daemon queued before it is in the file.
 *
 * GS_TEST_SEED=<n> replays the over-commit workload with another seed (it prints the one it
 * used); GS_TEST_KEEP=1 keeps each daemon's directory (audit file, log) for a post-mortem.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.h"
#include "isa.h"
#include "itest.h"
#include "sched_util.h"
#include "testd.h"
#include "wddm.h"

#define KiB        UINT64_C(1024)
#define MiB        (UINT64_C(1024) * KiB)
#define SEG_MEM    1u /* the "vram" memory segment of every configuration here */
#define SEG_APE    2u /* the aperture segment */
#define BIT(s)     (1u << (s))
#define WAIT_MS    20000u /* bound of every single wait */
#define TRANSFER_B 40u    /* bytes of one TRANSFER command (proto/isa.h) */

/* TransferStart | TransferEnd: the flags of every whole transfer (its first and last piece). */
#define START_END (GS_TRANSFER_START | GS_TRANSFER_END)

/* ---- fixture: one daemon with its configuration, and the clients opened on it ---- */

#define FX_CLIENTS 4

typedef struct fx {
	sched_daemon d;
	gs_client *c[FX_CLIENTS];
	int nc;
} fx;

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	*state = f;
	return f ? 0 : -1;
}

static int teardown(void **state)
{
	fx *f = *state;
	for (int i = 0; i < f->nc; i++)
		gs_close(f->c[i]);
	/* A daemon that does not stop cleanly (or crashed under a sanitizer) fails the test. */
	int rc = sched_daemon_stop(&f->d) == 0 ? 0 : -1;
	free(f);
	return rc;
}

/*
 * Starts a daemon with three nodes (3d, compute, copy: the paging node), a memory segment
 * "vram" (id 1) and an aperture (id 2) of the given sizes, 64 MiB of system memory, the given
 * clock and paging chunk; returns a client of the default tenant.
 */
static gs_client *fx_start(fx *f, const char *clock, uint64_t mem_kib, uint64_t ape_kib,
                           uint64_t chunk)
{
	char cfg[1024];
	snprintf(cfg, sizeof(cfg),
	         "{\"clock\": \"%s\", \"paging_chunk\": %" PRIu64 ", \"adapters\": [{"
	         "\"name\": \"emu0\", \"backend\": \"emu\", \"nodes\": ["
	         "{\"name\": \"3d\", \"kind\": \"3d\"},"
	         "{\"name\": \"compute\", \"kind\": \"compute\"},"
	         "{\"name\": \"copy\", \"kind\": \"copy\", \"paging\": true}],"
	         "\"segments\": ["
	         "{\"id\": 1, \"name\": \"vram\", \"kind\": \"memory\", \"size\": %" PRIu64 "},"
	         "{\"id\": 2, \"name\": \"aperture\", \"kind\": \"aperture\", \"size\": %" PRIu64
	         ", \"cpu_visible\": true}],"
	         "\"system_memory_mib\": 64}]}",
	         clock, chunk, mem_kib * KiB, ape_kib * KiB);
	sched_daemon_start(&f->d, cfg, false);
	assert_true(f->nc < FX_CLIENTS);
	gs_client *c = itest_connect(&f->d.t, NULL);
	f->c[f->nc++] = c;

	/* The configuration is what the daemon runs with. */
	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	const gs_adapter_info *a = &info->adapters[0];
	assert_string_equal(a->clock, clock);
	assert_int_equal(a->paging_chunk, chunk);
	assert_int_equal(a->system_memory, 64 * MiB);
	assert_int_equal(a->segment_count, 2);
	assert_int_equal(a->segments[0].id, SEG_MEM);
	assert_int_equal(a->segments[0].kind, GS_SEGMENT_MEMORY);
	assert_int_equal(a->segments[0].size, mem_kib * KiB);
	assert_int_equal(a->segments[1].id, SEG_APE);
	assert_int_equal(a->segments[1].kind, GS_SEGMENT_APERTURE);
	assert_int_equal(a->segments[1].size, ape_kib * KiB);
	gs_info_free(info);
	return c;
}

static const char *db_of(const fx *f)
{
	return f->d.t.db;
}

/* ---- small helpers ---- */

#define MUST(c, call)                                                                              \
	do {                                                                                       \
		int rv_ = (call);                                                                  \
		if (rv_ != 0)                                                                      \
			fail_msg("%s: %s: %s", #call, gs_status_name(rv_), gs_client_message(c));  \
	} while (0)

static uint32_t pref1(uint32_t seg)
{
	gs_segpref p = {{0}, {0}};
	p.segment[0] = (uint8_t)seg;
	return gs_segpref_encode(&p);
}

static uint32_t pref2(uint32_t a, uint32_t b)
{
	gs_segpref p = {{0}, {0}};
	p.segment[0] = (uint8_t)a;
	p.segment[1] = (uint8_t)b;
	return gs_segpref_encode(&p);
}

static uint64_t alloc_make(gs_client *c, uint64_t dev, uint64_t size, uint32_t set, uint32_t pref,
                           uint32_t prio, uint32_t flags, gs_allocation_placement *out)
{
	gs_allocation_desc d = {.device = dev,
	                        .size = size,
	                        .supported_segment_set = set,
	                        .segment_preference = pref,
	                        .priority = prio,
	                        .flags = flags};
	gs_allocation_placement p;
	int rv = gs_allocation_create(c, &d, &p);
	if (rv != 0)
		fail_msg("allocation_create of %" PRIu64 " bytes (set 0x%x): %s: %s", size, set,
		         gs_status_name(rv), gs_client_message(c));
	if (out)
		*out = p;
	return p.allocation;
}

static gs_allocation_status query(gs_client *c, uint64_t alloc)
{
	gs_allocation_status s;
	MUST(c, gs_allocation_query(c, alloc, &s));
	return s;
}

static void paging_wait(gs_client *c, const gs_paging_result *r)
{
	uint64_t cur = 0;
	int rv = gs_sync_wait(c, r->paging_sync, r->paging_fence, WAIT_MS, &cur);
	if (rv != 0)
		fail_msg("paging sync %" PRIu64 " did not reach %" PRIu64 " (at %" PRIu64 "): %s",
		         r->paging_sync, r->paging_fence, cur, gs_status_name(rv));
}

static void random_bytes(uint64_t *rng, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)itest_rand(rng);
}

/* Reads the whole allocation and compares; a mismatch names the first differing byte. */
static void expect_bytes(gs_client *c, uint64_t alloc, const uint8_t *want, size_t n,
                         const char *what)
{
	uint8_t *got = malloc(n ? n : 1);
	assert_non_null(got);
	int rv = gs_allocation_read(c, alloc, 0, got, n);
	if (rv != 0)
		fail_msg("%s: read of allocation %" PRIu64 ": %s: %s", what, alloc,
		         gs_status_name(rv), gs_client_message(c));
	if (memcmp(got, want, n) != 0) {
		size_t i = 0;
		while (got[i] == want[i])
			i++;
		size_t bad = 0;
		for (size_t k = i; k < n; k++)
			bad += got[k] != want[k];
		fail_msg("%s: allocation %" PRIu64 " byte %zu is 0x%02x, expected 0x%02x (%zu of "
		         "%zu bytes differ)",
		         what, alloc, i, got[i], want[i], bad, n);
	}
	free(got);
}

static uint64_t submit(gs_client *c, uint64_t ctx, const gs_dmabuf *b, uint32_t flags)
{
	gs_submit_result r;
	int rv = gs_submit(c, ctx, b, flags, &r);
	if (rv != 0)
		fail_msg("submit on context %" PRIu64 ": %s: %s", ctx, gs_status_name(rv),
		         gs_client_message(c));
	return r.packet;
}

static void expect_final(gs_client *c, uint64_t packet, gs_packet_state want)
{
	gs_packet_state st = GS_PACKET_UNKNOWN;
	int rv = gs_packet_wait(c, packet, WAIT_MS, &st, NULL);
	if (rv == GS_STATUS_FAULTED)
		st = GS_PACKET_FAULTED;
	else if (rv != 0)
		fail_msg("packet_wait %" PRIu64 ": %s: %s", packet, gs_status_name(rv),
		         gs_client_message(c));
	if (st != want)
		fail_msg("packet %" PRIu64 " ended %s, expected %s", packet,
		         gs_packet_state_name(st), gs_packet_state_name(want));
}

/* The sync reaches value (a SIGNAL executed by a running packet). */
static void sync_reached(gs_client *c, uint64_t sync, uint64_t value)
{
	uint64_t cur = 0;
	int rv = gs_sync_wait(c, sync, value, WAIT_MS, &cur);
	if (rv != 0)
		fail_msg("sync %" PRIu64 " did not reach %" PRIu64 ": %s", sync, value,
		         gs_status_name(rv));
}

/* ---- the audit file ---- */

static bool audit_has_table(const char *db, const char *table)
{
	return itest_audit_int(db,
	                       "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
	                       "name = '%s'",
	                       table) == 1;
}

/* The audit file's number of a packet a client was given wire id `packet` for (ids, fences and
 * seqs are opaque on the wire; the file keeps the daemon's numbers, in the daemon's order). */
static uint64_t packet_row(const char *db, uint64_t packet)
{
	return itest_wire_unmap(db, "packet", 0, 0, packet);
}

/* The file's seq of an event a client was shown with wire seq `seq`. */
static uint64_t seq_row(const char *db, uint64_t seq)
{
	return itest_wire_unmap(db, "seq", 0, 0, seq);
}

/* The file's seq of the first (or last) event in `state` of the packet with file number `row`;
 * -1 if none. */
static int64_t event_seq_row(const char *db, uint64_t row, gs_packet_state state, bool last)
{
	return itest_audit_int(
	        db, "SELECT %s(seq) FROM packet_events WHERE packet = %" PRIu64 " AND state = %d",
	        last ? "MAX" : "MIN", row, (int)state);
}

/* The same for the packet with wire id `packet`: file seqs, comparable with each other. */
static int64_t event_seq(const char *db, uint64_t packet, gs_packet_state state, bool last)
{
	return event_seq_row(db, packet_row(db, packet), state, last);
}

/* The newest move of an allocation of a given kind (through the API); false if none. */
static bool find_move(gs_client *c, uint64_t alloc, gs_move_kind kind, gs_move *out)
{
	gs_moves_filter mf = {.allocation = alloc, .limit = 1000};
	gs_move *mv = NULL;
	size_t n = 0;
	MUST(c, gs_moves(c, &mf, &mv, &n));
	bool found = false;
	for (size_t i = 0; i < n && !found; i++)
		if (mv[i].kind == kind) {
			*out = mv[i];
			out->reason = NULL;
			found = true;
		}
	gs_moves_free(mv, n);
	return found;
}

/* Every status / error pair: the call answered `want`, and the errors table got its row. */
typedef struct err_probe {
	const char *db;
	gs_client *c;
	uint64_t barrier_ctx;
	int64_t rows;
} err_probe;

static void expect_refused(err_probe *e, int rv, gs_status want, const char *what)
{
	if (rv != (int)want)
		fail_msg("%s: answered %s (%s), expected %s", what, gs_status_name(rv),
		         rv ? gs_client_message(e->c) : "", gs_status_name((int)want));
	itest_audit_barrier(e->c, e->barrier_ctx);
	int64_t rows = itest_audit_errors(e->db);
	if (rows != e->rows + 1)
		fail_msg("%s: errors table has %" PRId64 " rows, expected %" PRId64, what, rows,
		         e->rows + 1);
	int64_t st = itest_audit_last_error_status(e->db);
	if (st != (int64_t)want)
		fail_msg("%s: newest errors row has status %" PRId64 ", expected %d", what, st,
		         (int)want);
	e->rows = rows;
	/* Still serving. */
	gs_daemon_stats stats;
	MUST(e->c, gs_stats(e->c, &stats));
}

/* =====================================================================================
 * 1. Over-committed video memory under a seeded workload (virtual clock)
 * ===================================================================================== */

#define OC_SEED        UINT64_C(0x9a61e5eedc0ffee1)
#define OC_DEVICES     2
#define OC_CTX         4
#define OC_PACKETS     2000
#define OC_BATCH       125
#define OC_MAX_ALLOCS  96
#define OC_TOTAL       (4 * MiB + 256 * KiB) /* > 4x the memory segment */
#define OC_MEM_KIB     1024
#define OC_APE_KIB     1024
#define OC_CHUNK       16384
#define OC_SLOTS       1024 /* 8-byte checksum slots of each context's results allocation */
#define OC_LIST_MAX    4    /* allocations per packet */
#define OC_MAX_ALLOC   (128 * KiB)
#define OC_MAX_CMDS    3
#define OC_WAIT_ALL_MS 60000

typedef struct oc_alloc {
	uint64_t h;
	uint64_t size;
	int ctx;
	uint8_t *model;
} oc_alloc;

typedef struct oc_check {
	size_t packet; /* index into ids */
	int ctx;
	uint32_t slot;
	uint64_t value;
} oc_check;

typedef struct oc_state {
	uint64_t rng;
	oc_alloc al[OC_MAX_ALLOCS];
	size_t nal;
	size_t own[OC_CTX][OC_MAX_ALLOCS]; /* indices into al of each context's allocations */
	size_t nown[OC_CTX];
	oc_alloc results[OC_CTX];
	uint32_t next_slot[OC_CTX];
	oc_check *checks;
	size_t nchecks;
} oc_state;

/* The packet under construction: its distinct allocations (the builder keeps the list). */
static bool oc_fits(const gs_dmabuf *b, uint64_t x, uint64_t y)
{
	size_t extra = 0;
	bool hx = false, hy = false;
	for (size_t i = 0; i < b->alloc_count; i++) {
		hx |= b->allocs[i].allocation == x;
		hy |= b->allocs[i].allocation == y;
	}
	extra += !hx;
	extra += y && y != x && !hy;
	return b->alloc_count + extra <= OC_LIST_MAX;
}

static oc_alloc *oc_pick(oc_state *s, int ctx)
{
	return &s->al[s->own[ctx][itest_rand_below(&s->rng, s->nown[ctx])]];
}

/* A random range [*off, *off + *len) of size bytes, biased towards whole allocations. */
static void oc_range(oc_state *s, uint64_t size, uint64_t *off, uint64_t *len)
{
	if (itest_rand_below(&s->rng, 4) == 0) {
		*off = 0;
		*len = size;
		return;
	}
	*off = itest_rand_below(&s->rng, size);
	*len = 1 + itest_rand_below(&s->rng, size - *off);
}

/* Appends one random command of context ctx to b, applying it to the model; false when it
 * would take the packet past OC_LIST_MAX allocations (nothing appended). */
static bool oc_command(oc_state *s, int ctx, gs_dmabuf *b, size_t packet_index)
{
	uint64_t kind = itest_rand_below(&s->rng, 10);
	if (kind < 4) { /* FILL */
		oc_alloc *a = oc_pick(s, ctx);
		if (!oc_fits(b, a->h, 0))
			return false;
		uint64_t off, len;
		oc_range(s, a->size, &off, &len);
		uint32_t pattern = (uint32_t)itest_rand(&s->rng);
		assert_int_equal(gs_dmabuf_fill(b, a->h, off, len, pattern), 0);
		gs_isa_fill(a->model + off, len, pattern);
		return true;
	}
	if (kind < 7) { /* COPY */
		oc_alloc *src = oc_pick(s, ctx), *dst = oc_pick(s, ctx);
		if (!oc_fits(b, dst->h, src->h))
			return false;
		uint64_t soff, len;
		oc_range(s, src->size, &soff, &len);
		if (len > dst->size)
			len = dst->size;
		uint64_t doff = itest_rand_below(&s->rng, dst->size - len + 1);
		assert_int_equal(gs_dmabuf_copy(b, dst->h, doff, src->h, soff, len), 0);
		memmove(dst->model + doff, src->model + soff, len);
		return true;
	}
	/* CHECKSUM into the next 8-byte slot of the context's results allocation. */
	oc_alloc *src = oc_pick(s, ctx), *res = &s->results[ctx];
	if (!oc_fits(b, res->h, src->h) || s->next_slot[ctx] >= OC_SLOTS)
		return false;
	uint64_t off, len;
	oc_range(s, src->size, &off, &len);
	uint32_t slot = s->next_slot[ctx]++;
	assert_int_equal(gs_dmabuf_checksum(b, res->h, (uint64_t)slot * 8, src->h, off, len), 0);
	uint64_t v = gs_isa_checksum(src->model + off, len);
	gs_le64_put(res->model + (uint64_t)slot * 8, v);
	s->checks[s->nchecks++] =
	        (oc_check){.packet = packet_index, .ctx = ctx, .slot = slot, .value = v};
	return true;
}

/* Prints an allocation's moves (diagnosis of a mismatch). */
static void oc_dump_moves(gs_client *c, uint64_t alloc)
{
	gs_moves_filter mf = {.allocation = alloc, .limit = 50};
	gs_move *mv = NULL;
	size_t n = 0;
	if (gs_moves(c, &mf, &mv, &n) != 0)
		return;
	for (size_t i = n; i-- > 0;)
		fprintf(stderr,
		        "    move seq %" PRIu64 " %s %u+%" PRIu64 " -> %u+%" PRIu64
		        " packet %" PRIu64 " for %" PRIu64 " flags 0x%x pieces %u (%s)\n",
		        mv[i].seq, gs_move_kind_name(mv[i].kind), mv[i].from_segment,
		        mv[i].from_offset, mv[i].to_segment, mv[i].to_offset, mv[i].packet,
		        mv[i].for_packet, mv[i].transfer_flags, mv[i].pieces, mv[i].reason);
	gs_moves_free(mv, n);
}

/* Compares one allocation with its model; returns whether it matched (prints if not). */
static bool oc_compare(gs_client *c, const oc_alloc *a, const char *what)
{
	uint8_t *got = malloc(a->size);
	assert_non_null(got);
	MUST(c, gs_allocation_read(c, a->h, 0, got, a->size));
	bool same = memcmp(got, a->model, a->size) == 0;
	if (!same) {
		size_t first = 0, bad = 0;
		while (got[first] == a->model[first])
			first++;
		for (size_t k = 0; k < a->size; k++)
			bad += got[k] != a->model[k];
		gs_allocation_status st = query(c, a->h);
		fprintf(stderr,
		        "  %s allocation %" PRIu64 " (%" PRIu64 " bytes, context %d, segment %u, "
		        "%" PRIu64 " moves): first difference at byte %zu (0x%02x, expected "
		        "0x%02x), %zu bytes differ\n",
		        what, a->h, a->size, a->ctx, st.segment, st.moves, first, got[first],
		        a->model[first], bad);
		oc_dump_moves(c, a->h);
	}
	free(got);
	return same;
}

static uint64_t oc_seed(void)
{
	const char *env = getenv("GS_TEST_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0) : OC_SEED;
	fprintf(stderr,
	        "test_overcommit_workload: seed 0x%016" PRIx64
	        " (set GS_TEST_SEED to replay another)\n",
	        seed);
	return seed;
}

static void test_overcommit_workload(void **state)
{
	fx *f = *state;
	long long t0 = gs_test_now_ms();
	gs_client *c = fx_start(f, "virtual", OC_MEM_KIB, OC_APE_KIB, OC_CHUNK);
	itest_layout lay;
	itest_layout_of(c, &lay);
	assert_int_equal(lay.nodes, 3);
	assert_int_equal(lay.paging_node, 2);

	oc_state *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->rng = oc_seed();
	s->checks = calloc(OC_PACKETS * OC_MAX_CMDS, sizeof(*s->checks));
	assert_non_null(s->checks);

	/* Two devices, two contexts each, on three nodes and of several priorities. */
	uint64_t dev[OC_DEVICES];
	MUST(c, gs_device_create(c, "overcommit-a", &dev[0]));
	MUST(c, gs_device_create(c, "overcommit-b", &dev[1]));
	static const struct {
		int dev;
		uint32_t node, cls;
		int32_t prio;
	} cx[OC_CTX] = {{0, 0, CLASS_NORMAL, 0},
	                {0, 1, CLASS_ABOVE_NORMAL, 2},
	                {1, 0, CLASS_BELOW_NORMAL, -1},
	                {1, 2, CLASS_NORMAL, 3}};
	uint64_t ctx[OC_CTX];
	for (int i = 0; i < OC_CTX; i++)
		ctx[i] = sched_context(c, dev[cx[i].dev], cx[i].node, lay.paging_node, cx[i].cls,
		                       cx[i].prio);

	/* Allocations until their total is more than 4x the memory segment: memory only, or
	 * memory and aperture, with assorted preferences and priorities; each belongs to one
	 * context (so packets of different contexts never share one). */
	static const uint32_t prios[] = {0, GS_ALLOC_PRIORITY_LOW, GS_ALLOC_PRIORITY_NORMAL,
	                                 GS_ALLOC_PRIORITY_HIGH, GS_ALLOC_PRIORITY_MAXIMUM};
	uint64_t total = 0;
	size_t kinds[2] = {0, 0};
	while (total < OC_TOTAL) {
		assert_true(s->nal < OC_MAX_ALLOCS);
		oc_alloc *a = &s->al[s->nal];
		a->ctx = (int)(s->nal % OC_CTX);
		a->size = 4 * KiB + itest_rand_below(&s->rng, OC_MAX_ALLOC - 4 * KiB + 1);
		if (itest_rand_below(&s->rng, 3) == 0)
			a->size -= itest_rand_below(&s->rng, 256); /* not a multiple of anything */
		bool aperture_too = itest_rand_below(&s->rng, 2);
		uint32_t set = aperture_too ? BIT(SEG_MEM) | BIT(SEG_APE) : BIT(SEG_MEM);
		uint32_t pref = 0;
		switch (itest_rand_below(&s->rng, 4)) {
		case 0:
			pref = 0;
			break;
		case 1:
			pref = pref1(SEG_MEM);
			break;
		case 2:
			pref = aperture_too ? pref2(SEG_MEM, SEG_APE) : pref1(SEG_MEM);
			break;
		default:
			pref = aperture_too ? pref2(SEG_APE, SEG_MEM) : 0;
			break;
		}
		uint32_t prio = prios[itest_rand_below(&s->rng, sizeof(prios) / sizeof(prios[0]))];
		a->h = alloc_make(c, dev[cx[a->ctx].dev], a->size, set, pref, prio, 0, NULL);
		a->model = calloc(1, a->size); /* new memory reads as zero */
		assert_non_null(a->model);
		s->own[a->ctx][s->nown[a->ctx]++] = s->nal;
		kinds[aperture_too]++;
		total += a->size;
		s->nal++;
	}
	for (int i = 0; i < OC_CTX; i++) {
		oc_alloc *r = &s->results[i];
		r->ctx = i;
		r->size = OC_SLOTS * 8;
		r->h = alloc_make(c, dev[cx[i].dev], r->size, BIT(SEG_MEM) | BIT(SEG_APE), 0, 0, 0,
		                  NULL);
		r->model = calloc(1, r->size);
		assert_non_null(r->model);
		total += r->size;
	}
	fprintf(stderr,
	        "  %zu allocations (%zu memory only, %zu memory+aperture), %" PRIu64
	        " KiB live for a %u KiB memory segment\n",
	        s->nal, kinds[0], kinds[1], total / KiB, OC_MEM_KIB);
	/* Created in order of preference where there was room, the rest in system memory. */
	gs_allocation_status *list = NULL;
	size_t nlist = 0;
	MUST(c, gs_allocation_list(c, 0, false, 0, 0, &list, &nlist));
	assert_int_equal(nlist, s->nal + OC_CTX);
	size_t not_resident = 0;
	for (size_t i = 0; i < nlist; i++) {
		if (!list[i].resident) {
			assert_int_equal(list[i].segment, 0);
			not_resident++;
		}
	}
	gs_allocation_list_free(list);
	assert_true(not_resident > 0);

	/* The workload: batches of packets of random contexts, each of 1..3 FILL / COPY /
	 * CHECKSUM commands on 1..4 of its context's allocations. */
	uint64_t *ids = calloc(OC_PACKETS, sizeof(*ids));
	gs_dmabuf *bufs = calloc(OC_BATCH, sizeof(*bufs));
	gs_submit_desc *desc = calloc(OC_BATCH, sizeof(*desc));
	gs_submit_result *res = calloc(OC_BATCH, sizeof(*res));
	assert_true(ids && bufs && desc && res);
	for (size_t i = 0; i < OC_BATCH; i++)
		gs_dmabuf_init(&bufs[i]);
	size_t per_ctx[OC_CTX] = {0};
	for (size_t done = 0; done < OC_PACKETS; done += OC_BATCH) {
		for (size_t i = 0; i < OC_BATCH; i++) {
			int k = (int)itest_rand_below(&s->rng, OC_CTX);
			gs_dmabuf *b = &bufs[i];
			gs_dmabuf_reset(b);
			int ncmd = 1 + (int)itest_rand_below(&s->rng, OC_MAX_CMDS);
			for (int tries = 0; tries < 16 && ncmd > 0; tries++)
				ncmd -= oc_command(s, k, b, done + i);
			assert_true(b->len > 0 && b->alloc_count >= 1 &&
			            b->alloc_count <= OC_LIST_MAX);
			desc[i] = (gs_submit_desc){.context = ctx[k], .dma = b};
			per_ctx[k]++;
		}
		int rv = gs_submit_batch(c, desc, OC_BATCH, res);
		if (rv != 0)
			fail_msg("submit_batch at packet %zu: %s: %s", done, gs_status_name(rv),
			         gs_client_message(c));
		for (size_t i = 0; i < OC_BATCH; i++)
			ids[done + i] = res[i].packet;
	}
	long long t_sub = gs_test_now_ms();

	/* Every packet completes, none stuck. */
	long long deadline = gs_test_now_ms() + OC_WAIT_ALL_MS;
	size_t states[GS_PACKET_REJECTED + 1] = {0};
	for (size_t i = 0; i < OC_PACKETS; i++) {
		long long left = deadline - gs_test_now_ms();
		gs_packet_state st = GS_PACKET_UNKNOWN;
		int rv = gs_packet_wait(c, ids[i], left > 0 ? (uint32_t)left : 0, &st, NULL);
		if (rv == GS_STATUS_FAULTED)
			st = GS_PACKET_FAULTED;
		else if (rv != 0)
			fail_msg("packet %" PRIu64 " (%zu of %d) not final within the bound: %s "
			         "(%s)",
			         ids[i], i, OC_PACKETS, gs_status_name(rv), gs_client_message(c));
		states[st <= GS_PACKET_REJECTED ? st : 0]++;
	}
	long long t_wait = gs_test_now_ms();
	if (states[GS_PACKET_COMPLETED] != OC_PACKETS) {
		for (size_t i = 0; i < OC_PACKETS; i++) {
			gs_packet_state st = sched_state_now(c, ids[i]);
			if (st == GS_PACKET_COMPLETED)
				continue;
			gs_packet_event *ev = NULL;
			size_t n = sched_events(c, ids[i], &ev);
			fail_msg("packet %" PRIu64 " ended %s: %s (%zu of %d packets completed)",
			         ids[i], gs_packet_state_name(st), n ? ev[n - 1].detail : "",
			         states[GS_PACKET_COMPLETED], OC_PACKETS);
		}
	}

	/* Every checksum the GPU wrote is the one of the bytes the model says it read. */
	size_t bad_checks = 0;
	for (int k = 0; k < OC_CTX; k++) {
		oc_alloc *r = &s->results[k];
		uint8_t *got = malloc(r->size);
		assert_non_null(got);
		MUST(c, gs_allocation_read(c, r->h, 0, got, r->size));
		for (size_t i = 0; i < s->nchecks; i++) {
			const oc_check *ck = &s->checks[i];
			if (ck->ctx != k)
				continue;
			uint64_t v = gs_le64_get(got + (uint64_t)ck->slot * 8);
			if (v != ck->value && bad_checks++ < 10)
				fprintf(stderr,
				        "  checksum of packet %" PRIu64
				        " (context %d, slot %u): GPU "
				        "0x%016" PRIx64 ", expected 0x%016" PRIx64 "\n",
				        ids[ck->packet], k, ck->slot, v, ck->value);
		}
		free(got);
	}
	/* Every allocation holds what the model says, byte for byte. */
	size_t bad_allocs = 0;
	for (size_t i = 0; i < s->nal; i++)
		bad_allocs += !oc_compare(c, &s->al[i], "data");
	for (int k = 0; k < OC_CTX; k++)
		bad_allocs += !oc_compare(c, &s->results[k], "results");
	if (bad_checks || bad_allocs)
		fail_msg("%zu of %zu checksums and %zu of %zu allocations differ from the model "
		         "(seed: see above)",
		         bad_checks, s->nchecks, bad_allocs, s->nal + OC_CTX);

	/* Paging happened, and the audit says how. */
	itest_audit_barrier(c, ctx[0]);
	const char *db = db_of(f);
	int64_t paging = itest_audit_int(db, "SELECT COUNT(*) FROM packets WHERE submit_flags & 1");
	int64_t paging_bad = itest_audit_int(
	        db, "SELECT COUNT(*) FROM packets WHERE (submit_flags & 1) AND state != %d",
	        (int)GS_PACKET_COMPLETED);
	int64_t ready_paged = itest_audit_int(db,
	                                      "SELECT COUNT(*) FROM packet_events WHERE "
	                                      "state = %d AND detail LIKE '%%resident after%%'",
	                                      (int)GS_PACKET_READY);
	fprintf(stderr,
	        "  %" PRId64 " paging packets, %" PRId64 " render packets made resident by "
	        "paging, %zu checksums\n",
	        paging, ready_paged, s->nchecks);
	assert_true(paging > 0);
	assert_int_equal(paging_bad, 0);
	assert_true(ready_paged > 0);

	/* The tenant's history shows them (flag Paging) too. */
	gs_history_filter hf = {.paging = true, .limit = 100};
	gs_packet_record *recs = NULL;
	size_t nrecs = 0;
	MUST(c, gs_history(c, &hf, &recs, &nrecs));
	assert_true(nrecs > 0);
	for (size_t i = 0; i < nrecs; i++) {
		assert_true(recs[i].submit_flags & (GS_SUBMIT_PAGING | GS_SUBMIT_CONTEXT_SWITCH));
		assert_int_equal(recs[i].state, GS_PACKET_COMPLETED);
	}
	gs_history_free(recs, nrecs);
	/* ContextSwitch packets (the contexts of these devices run while their memory moves):
	 * zero-length, completed, never with anything but Paging and ContextSwitch. */
	int64_t switches =
	        itest_audit_int(db, "SELECT COUNT(*) FROM packets WHERE submit_flags & 64");
	fprintf(stderr, "  %" PRId64 " ContextSwitch packets (%" PRId64 " with Paging)\n", switches,
	        itest_audit_int(db, "SELECT COUNT(*) FROM packets WHERE submit_flags = 65"));
	assert_int_equal(itest_audit_int(db,
	                                 "SELECT COUNT(*) FROM packets WHERE submit_flags & 64 AND "
	                                 "(dma_size != 0 OR state_name != 'COMPLETED' OR "
	                                 "submit_flags & ~65 != 0)"),
	                 0);

	if (audit_has_table(db, "moves")) {
		int64_t evicts = itest_audit_int(db,
		                                 "SELECT COUNT(*) FROM moves WHERE kind = %d "
		                                 "AND kind_name = 'EVICT'",
		                                 (int)GS_MOVE_EVICT);
		int64_t pageins = itest_audit_int(db,
		                                  "SELECT COUNT(*) FROM moves WHERE kind = %d "
		                                  "AND kind_name = 'PAGE_IN'",
		                                  (int)GS_MOVE_PAGE_IN);
		fprintf(stderr, "  moves: %" PRId64 " EVICT, %" PRId64 " PAGE_IN\n", evicts,
		        pageins);
		assert_true(evicts > 0);
		assert_true(pageins > 0);
		/* Every paging packet that moved bytes moved an allocation it lists, and the move
		 * names it. */
		int64_t orphans = itest_audit_int(
		        db, "SELECT COUNT(*) FROM packets p WHERE (p.submit_flags & 1) AND "
		            "p.allocation_count > 0 AND NOT EXISTS (SELECT 1 FROM moves m JOIN "
		            "packet_allocations pa ON pa.packet = m.packet AND pa.allocation = "
		            "m.allocation WHERE m.packet = p.packet)");
		assert_int_equal(orphans, 0);
		/* Each move that moved bytes is one whole transfer: Start and End set, idle,
		 * no conversion (nothing here is tiled), split into ceil(bytes / chunk). */
		int64_t no_start_end =
		        itest_audit_int(db,
		                        "SELECT COUNT(*) FROM moves WHERE packet != 0 "
		                        "AND (transfer_flags & %u) != %u",
		                        START_END, START_END);
		assert_int_equal(no_start_end, 0);
		int64_t converted =
		        itest_audit_int(db, "SELECT COUNT(*) FROM moves WHERE transfer_flags & 3");
		assert_int_equal(converted, 0);
		int64_t bad_pieces = itest_audit_int(db,
		                                     "SELECT COUNT(*) FROM moves WHERE packet != 0 "
		                                     "AND pieces != (bytes + %d - 1) / "
		                                     "%d",
		                                     OC_CHUNK, OC_CHUNK);
		assert_int_equal(bad_pieces, 0);
		/* Moves made for a render packet name it; every paging packet has its move. */
		int64_t for_bad = itest_audit_int(
		        db,
		        "SELECT COUNT(*) FROM moves WHERE kind IN (%d, %d) AND for_packet != 0 "
		        "AND reason NOT LIKE '%%for packet %%'",
		        (int)GS_MOVE_PAGE_IN, (int)GS_MOVE_EVICT);
		assert_int_equal(for_bad, 0);
	} else {
		fprintf(stderr, "  the audit has no moves table yet: its checks were skipped\n");
	}

	fprintf(stderr,
	        "  %d packets (%zu/%zu/%zu/%zu per context): submitted in %lld ms, all "
	        "final %lld ms later, %lld ms in all\n",
	        OC_PACKETS, per_ctx[0], per_ctx[1], per_ctx[2], per_ctx[3], t_sub - t0,
	        t_wait - t_sub, gs_test_now_ms() - t0);

	for (size_t i = 0; i < OC_BATCH; i++)
		gs_dmabuf_free(&bufs[i]);
	free(bufs);
	free(desc);
	free(res);
	free(ids);
	for (size_t i = 0; i < s->nal; i++)
		free(s->al[i].model);
	for (int k = 0; k < OC_CTX; k++)
		free(s->results[k].model);
	free(s->checks);
	free(s);
}

/* =====================================================================================
 * 2. A packet preempted while its allocation moves is patched anew (wall clock)
 * ===================================================================================== */

#define RP_BYTES   (64 * KiB)
#define RP_SPIN_US 1000000u /* P's work: long enough to be caught inside it */
#define RP_HOLD_US 30000000u
#define RP_PATTERN 0x5eed1234u

typedef struct rp_thread {
	gs_client *c; /* connected by the main thread, used only by this one */
	uint64_t alloc;
	int rv;
	gs_paging_result r;
	char msg[256];
} rp_thread;

static void *rp_transfer_thread(void *arg)
{
	rp_thread *x = arg;
	x->rv = gs_transfer(x->c, x->alloc, SEG_APE, 0, &x->r);
	snprintf(x->msg, sizeof(x->msg), "%s", gs_client_message(x->c));
	return NULL;
}

/* The daemon's request counter (the Stats request itself included). */
static uint64_t requests_seen(gs_client *c)
{
	gs_daemon_stats st;
	MUST(c, gs_stats(c, &st));
	return st.requests;
}

/*
 * P (NORMAL, node 0): SIGNAL s1, a long preemptible SPIN, FILL A. Once it runs, a HIGH packet
 * H (SIGNAL s2, SPIN far longer than the test) preempts it, and A (in vram) is transferred to
 * the aperture while P is off the engine. H holds the engine until the test lowers H's
 * priority (and destroys its context), so P cannot resume before the move's paging fence is
 * reached.
 *
 * parked = false: the Transfer is sent once H runs, when A is not pinned: it moves A at once.
 * parked = true: the Transfer is sent (from another thread) while P runs; the test waits
 * until the daemon has handled it (its request counter, which the loop thread bumps just
 * before it dispatches a request) and checks that A has not moved: the request waits for P's
 * pin. Then H preempts P, which releases the pin, and the Transfer goes ahead.
 */
static void repatch_run(fx *f, bool parked)
{
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "repatch", &dev));
	uint64_t ctx_n = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t ctx_h = sched_context(c, dev, 0, lay.paging_node, CLASS_HIGH, 0);
	gs_allocation_placement pa;
	uint64_t a = alloc_make(c, dev, RP_BYTES, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0, 0,
	                        &pa);
	assert_int_equal(pa.segment, SEG_MEM);
	uint64_t s1, s2;
	MUST(c, gs_sync_create(c, dev, 0, &s1));
	MUST(c, gs_sync_create(c, dev, 0, &s2));

	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_signal(&b, s1, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&b, RP_SPIN_US, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&b, a, 0, RP_BYTES, RP_PATTERN), 0);
	uint64_t p = submit(c, ctx_n, &b, 0);
	gs_dmabuf_free(&b);
	sync_reached(c, s1, 1); /* P runs, inside its SPIN: A is pinned */
	assert_true(query(c, a).pinned > 0);

	rp_thread th = {.alloc = a, .rv = -100};
	pthread_t tid;
	if (parked) {
		th.c = itest_connect(&f->d.t, NULL);
		uint64_t before = requests_seen(c);
		assert_int_equal(pthread_create(&tid, NULL, rp_transfer_thread, &th), 0);
		/* Each poll is one request of ours; the Transfer is the only other one. */
		long long deadline = gs_test_now_ms() + WAIT_MS;
		uint64_t polls = 0, seen = before;
		while (seen < before + polls + 1 && gs_test_now_ms() < deadline) {
			seen = requests_seen(c);
			polls++;
		}
		if (seen < before + polls + 1)
			fail_msg("the daemon did not receive the Transfer within %u ms", WAIT_MS);
		/* Handled, and waiting: A is still where it was, pinned by P. */
		gs_allocation_status st0 = query(c, a);
		assert_int_equal(st0.segment, SEG_MEM);
		assert_int_equal(st0.moves, 0);
		assert_false(st0.moving);
		assert_true(st0.pinned > 0);
		if (gs_packet_state_is_final(sched_state_now(c, p)))
			fail_msg("P finished before the Transfer was parked");
	}

	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_signal(&b, s2, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&b, RP_HOLD_US, 0), 0);
	uint64_t h = submit(c, ctx_h, &b, 0);
	gs_dmabuf_free(&b);
	sync_reached(c, s2, 1); /* H runs: P was preempted */
	if (gs_packet_state_is_final(sched_state_now(c, p)))
		fail_msg("P finished before H preempted it: the machine is too slow for a %u ms "
		         "SPIN",
		         RP_SPIN_US / 1000);

	gs_paging_result r;
	if (parked) {
		assert_int_equal(pthread_join(tid, NULL), 0);
		gs_close(th.c);
		if (th.rv != 0)
			fail_msg("transfer (parked): %s: %s", gs_status_name(th.rv), th.msg);
		r = th.r;
	} else {
		MUST(c, gs_transfer(c, a, SEG_APE, 0, &r));
	}
	assert_int_equal(r.moves, 1);
	paging_wait(c, &r);
	gs_allocation_status st = query(c, a);
	assert_true(st.resident);
	assert_int_equal(st.segment, SEG_APE);
	assert_int_equal(st.pinned, 0);
	if (gs_packet_state_is_final(sched_state_now(c, p)))
		fail_msg("P finished while H held the engine");

	/* Let P resume: H drops below it and its context goes (H is cancelled off the
	 * engine). */
	MUST(c, gs_context_set_priority(c, ctx_h, CLASS_IDLE, 0));
	MUST(c, gs_context_destroy(c, ctx_h));
	expect_final(c, p, GS_PACKET_COMPLETED);
	expect_final(c, h, GS_PACKET_CANCELLED);

	/* P was patched with A's new address: the FILL landed in the aperture copy, which the
	 * CPU reads, and A did not move again. */
	uint8_t *want = malloc(RP_BYTES);
	assert_non_null(want);
	gs_isa_fill(want, RP_BYTES, RP_PATTERN);
	expect_bytes(c, a, want, RP_BYTES, "A after P");
	free(want);
	st = query(c, a);
	assert_int_equal(st.segment, SEG_APE);
	assert_int_equal(st.moves, 1);

	/* P's history: preempted once, resubmitted once, then it ran to completion. */
	gs_packet_event *ev = NULL;
	size_t n = sched_events(c, p, &ev);
	long run1 = sched_event_find(ev, n, GS_PACKET_RUNNING, 0);
	long pre = run1 < 0 ? -1 : sched_event_find(ev, n, GS_PACKET_PREEMPTED, (size_t)run1);
	long resub = pre < 0 ? -1 : sched_event_find(ev, n, GS_PACKET_RESUBMITTED, (size_t)pre);
	long run2 = resub < 0 ? -1 : sched_event_find(ev, n, GS_PACKET_RUNNING, (size_t)resub);
	if (run1 < 0 || pre < 0 || resub < 0 || run2 < 0)
		fail_msg("packet %" PRIu64 ": no RUNNING, PREEMPTED, RESUBMITTED, RUNNING sequence",
		         p);
	assert_int_equal(ev[n - 1].state, GS_PACKET_COMPLETED);
	if (!strstr(ev[pre].detail, "preempted by context"))
		fail_msg("PREEMPTED detail '%s'", ev[pre].detail);
	/* The file's seqs of those events, to order them against the file's other rows (wire
	 * seqs are not ordered). */
	const char *db = db_of(f);
	uint64_t seq_run1 = seq_row(db, ev[run1].seq), seq_pre = seq_row(db, ev[pre].seq),
	         seq_run2 = seq_row(db, ev[run2].seq), seq_done = seq_row(db, ev[n - 1].seq);
	gs_packet_events_free(ev, n);
	gs_packet_record *recs = NULL;
	size_t nr = sched_history_device(c, dev, &recs);
	const gs_packet_record *rec = sched_record(recs, nr, p);
	assert_non_null(rec);
	assert_int_equal(rec->preemptions, 1);
	assert_int_equal(rec->resubmissions, 1);
	assert_true(rec->submit_flags & GS_SUBMIT_RESUBMISSION);
	gs_history_free(recs, nr);

	/* The move: a Transfer of A from vram to the aperture by one paging packet X, made
	 * after P was stopped and finished before P ran again. */
	gs_move mv = {0};
	if (!find_move(c, a, GS_MOVE_TRANSFER, &mv))
		fail_msg("no TRANSFER move of allocation %" PRIu64, a);
	assert_int_equal(mv.from_segment, SEG_MEM);
	assert_int_equal(mv.from_offset, pa.offset);
	assert_int_equal(mv.to_segment, SEG_APE);
	assert_int_equal(mv.bytes, RP_BYTES);
	assert_int_equal(mv.for_packet, 0);
	assert_int_equal(mv.pieces, RP_BYTES / 16384);
	assert_int_equal(mv.transfer_flags & START_END, START_END);
	assert_int_equal(mv.transfer_flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE), 0);
	/* A Transfer that waited for the packet using the allocation says so. */
	itest_audit_barrier(c, ctx_n);
	assert_int_equal(itest_audit_int(db_of(f),
	                                 "SELECT COUNT(*) FROM moves WHERE allocation = %" PRIu64
	                                 " AND kind_name = 'TRANSFER' AND reason LIKE "
	                                 "'%%once the packets using it were done%%'",
	                                 a),
	                 parked ? 1 : 0);
	assert_true(mv.packet != 0);
	uint64_t x = mv.packet, x_row = packet_row(db, x);

	itest_audit_barrier(c, ctx_n);
	assert_int_equal(itest_audit_int(db,
	                                 "SELECT submit_flags & 1 FROM packets WHERE packet = "
	                                 "%" PRIu64,
	                                 x_row),
	                 1);
	int64_t x_sub = event_seq(db, x, GS_PACKET_SUBMITTED, false);
	int64_t x_done = event_seq(db, x, GS_PACKET_COMPLETED, true);
	assert_true(x_sub > 0 && x_done > 0);
	if (!((uint64_t)x_sub > seq_run1 && (uint64_t)x_done < seq_run2 &&
	      (uint64_t)x_done < seq_done))
		fail_msg("paging packet %" PRIu64 " (events %" PRId64 "..%" PRId64
		         ") is not between P's first run (%" PRIu64 ") and its resumption (%" PRIu64
		         ")",
		         x, x_sub, x_done, seq_run1, seq_run2);
	if (audit_has_table(db, "moves")) {
		assert_int_equal(
		        itest_audit_int(db,
		                        "SELECT COUNT(*) FROM moves WHERE allocation = "
		                        "%" PRIu64 " AND kind = %d AND packet = %" PRIu64
		                        " AND kind_name = 'TRANSFER' AND reason LIKE 'Transfer%%'",
		                        a, (int)GS_MOVE_TRANSFER, x_row),
		        1);
		/* Nothing moved A back for P. */
		assert_int_equal(itest_audit_int(db,
		                                 "SELECT COUNT(*) FROM moves WHERE allocation = "
		                                 "%" PRIu64 " AND kind NOT IN (%d, %d)",
		                                 a, (int)GS_MOVE_PLACE, (int)GS_MOVE_TRANSFER),
		                 0);
	}
	/* The audit tells the same story in the same order: P stopped (its PREEMPTED event),
	 * then A moved (the paging packet's events, and the move's time in the moves table, both
	 * on the wall clock here), then P completed. */
	char why[512] = "";
	if ((uint64_t)x_sub < seq_pre)
		snprintf(why, sizeof(why),
		         "paging packet %" PRIu64 " is SUBMITTED (event seq %" PRId64
		         ") before P's PREEMPTED event (seq %" PRIu64 "); ",
		         x, x_sub, seq_pre);
	if (audit_has_table(db, "moves")) {
		int64_t t_move = itest_audit_int(db,
		                                 "SELECT time_ns FROM moves WHERE allocation = "
		                                 "%" PRIu64 " AND packet = %" PRIu64,
		                                 a, x_row);
		int64_t t_pre = itest_audit_int(
		        db, "SELECT time_ns FROM packet_events WHERE seq = %" PRIu64, seq_pre);
		int64_t t_done = itest_audit_int(
		        db, "SELECT time_ns FROM packet_events WHERE seq = %" PRIu64, seq_done);
		assert_true(t_move > 0 && t_pre > 0 && t_done > 0);
		if (t_move < t_pre || t_move > t_done) {
			size_t len = strlen(why);
			snprintf(why + len, sizeof(why) - len,
			         "the move's time_ns %" PRId64
			         " is not between P's PREEMPTED (%" PRId64
			         ") and COMPLETED (%" PRId64 ")",
			         t_move, t_pre, t_done);
		}
	}
	if (why[0])
		fail_msg("allocation %" PRIu64 " moved while packet %" PRIu64
		         " still held it, says the audit: %s",
		         a, p, why);
}

static void test_repatch_after_preemption(void **state)
{
	repatch_run(*state, false);
}

static void test_repatch_transfer_waits_for_pin(void **state)
{
	repatch_run(*state, true);
}

/* =====================================================================================
 * 2b. A render packet never sees an allocation whose bytes are still on their way
 * ===================================================================================== */

#define MV_BYTES   (256 * KiB)
#define MV_HOLD_US 500000u /* the copy engine is busy (non-preemptible) this long */

/* Occupies the paging node with a non-preemptible SPIN of a client context, so that paging
 * packets queue behind it; returns once it runs. */
static uint64_t block_paging_node(gs_client *c, uint64_t dev, uint32_t paging_node)
{
	uint64_t ctx = sched_context(c, dev, paging_node, paging_node, CLASS_NORMAL, 0);
	uint64_t s;
	MUST(c, gs_sync_create(c, dev, 0, &s));
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_signal(&b, s, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&b, MV_HOLD_US, GS_DMABUF_SPIN_NONPREEMPTIBLE), 0);
	uint64_t k = submit(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	sync_reached(c, s, 1);
	return k;
}

/*
 * reader (a render packet that read alloc, which moved by a move of `kind` just before) ran
 * once that move's paging packet had completed, and `out` (what reader wrote from alloc)
 * holds `want`. Both are checked before either fails, so the message says what happened.
 */
static void expect_after_move(fx *f, gs_client *c, uint64_t barrier_ctx, uint64_t alloc,
                              gs_move_kind kind, uint64_t reader, uint64_t out, const uint8_t *want,
                              size_t n, const char *what)
{
	gs_move mv = {0};
	if (!find_move(c, alloc, kind, &mv))
		fail_msg("no %s move of allocation %" PRIu64, gs_move_kind_name(kind), alloc);
	itest_audit_barrier(c, barrier_ctx);
	int64_t x_done = event_seq(db_of(f), mv.packet, GS_PACKET_COMPLETED, true);
	int64_t r_run = event_seq(db_of(f), reader, GS_PACKET_RUNNING, false);
	assert_true(x_done > 0 && r_run > 0);
	uint8_t *got = malloc(n);
	assert_non_null(got);
	MUST(c, gs_allocation_read(c, out, 0, got, n));
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += got[i] != want[i];
	free(got);
	if (r_run < x_done || bad)
		fail_msg("%s: packet %" PRIu64 " started (RUNNING, event seq %" PRId64
		         ") before paging packet %" PRIu64 " had moved allocation %" PRIu64
		         " (%s %u+%" PRIu64 " -> %u+%" PRIu64 ", COMPLETED at seq %" PRId64
		         "); %zu of %zu bytes it produced are wrong",
		         what, reader, r_run, mv.packet, alloc, gs_move_kind_name(kind),
		         mv.from_segment, mv.from_offset, mv.to_segment, mv.to_offset, x_done, bad,
		         n);
}

/* A Transfer's paging packet is held up on the paging node; a packet on another node that
 * reads the allocation meanwhile must still see its bytes (it waits for the move, or runs
 * against the old copy). */
static void test_render_waits_for_transfer(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "in-flight", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t a = alloc_make(c, dev, MV_BYTES, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0, 0,
	                        NULL);
	uint64_t bb = alloc_make(c, dev, MV_BYTES, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t rng = 0x1234;
	static uint8_t pat[MV_BYTES]; /* static: nothing leaks when an assertion fails */
	random_bytes(&rng, pat, MV_BYTES);
	MUST(c, gs_allocation_write(c, a, 0, pat, MV_BYTES));

	uint64_t k = block_paging_node(c, dev, lay.paging_node);
	gs_paging_result r;
	MUST(c, gs_transfer(c, a, SEG_APE, 0, &r));
	assert_int_equal(r.moves, 1);
	/* R copies A into B right away, without waiting for the paging fence. */
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_copy(&b, bb, 0, a, 0, MV_BYTES), 0);
	uint64_t rp = submit(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	expect_final(c, rp, GS_PACKET_COMPLETED);
	expect_final(c, k, GS_PACKET_COMPLETED);
	paging_wait(c, &r);
	expect_bytes(c, a, pat, MV_BYTES, "A after its transfer");
	expect_after_move(f, c, ctx, a, GS_MOVE_TRANSFER, rp, bb, pat, MV_BYTES,
	                  "R, which copied A into B while A's transfer was queued");
}

/* The same with a move the daemon makes on its own: V is evicted from vram to the aperture
 * to make room for another packet's allocation, its eviction is held up on the paging node,
 * and a packet of another context (another node) reads V meanwhile. */
static void test_render_waits_for_eviction(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "evicted", &dev));
	uint64_t ctx0 = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t ctx1 = sched_context(c, dev, 1, lay.paging_node, CLASS_NORMAL, 0);
	gs_allocation_placement pv, pw;
	uint64_t v = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM),
	                        GS_ALLOC_PRIORITY_LOW, 0, &pv);
	assert_int_equal(pv.segment, SEG_MEM);
	uint64_t w = alloc_make(c, dev, 768 * KiB, BIT(SEG_MEM), 0, 0, 0, &pw);
	assert_int_equal(pw.segment, 0); /* no room: system memory */
	uint64_t res = alloc_make(c, dev, 4096, BIT(SEG_APE), 0, 0, 0, NULL);
	uint64_t rng = 0x5678;
	static uint8_t pat[512 * KiB]; /* static: nothing leaks when an assertion fails */
	random_bytes(&rng, pat, 512 * KiB);
	MUST(c, gs_allocation_write(c, v, 0, pat, 512 * KiB));
	uint64_t want = gs_isa_checksum(pat, 512 * KiB);

	uint64_t k = block_paging_node(c, dev, lay.paging_node);
	/* X needs W in vram: V is evicted to the aperture (its paging queued behind K). */
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, w, 0, 64, 0xabcdef01u), 0);
	uint64_t x = submit(c, ctx0, &b, 0);
	gs_dmabuf_free(&b);
	/* The plan is made when X reaches the head of its node: wait until V left vram. */
	long long deadline = gs_test_now_ms() + WAIT_MS;
	while (query(c, v).segment == SEG_MEM && gs_test_now_ms() < deadline)
		;
	gs_allocation_status sv = query(c, v);
	assert_int_equal(sv.segment, SEG_APE);
	assert_true(sv.resident);
	/* Y (node 1) checksums V now. */
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_checksum(&b, res, 0, v, 0, 512 * KiB), 0);
	uint64_t y = submit(c, ctx1, &b, 0);
	gs_dmabuf_free(&b);
	expect_final(c, y, GS_PACKET_COMPLETED);
	expect_final(c, x, GS_PACKET_COMPLETED);
	expect_final(c, k, GS_PACKET_COMPLETED);
	expect_bytes(c, v, pat, 512 * KiB, "V after its eviction");
	uint8_t sum[8];
	gs_le64_put(sum, want);
	expect_after_move(f, c, ctx1, v, GS_MOVE_EVICT, y, res, sum, sizeof(sum),
	                  "Y, which checksummed V while V's eviction was queued");
}

/*
 * A new allocation may be placed where an allocation's bytes are still waiting to be moved out
 * (its move is planned, its paging packet queued). Zeroing it, writing it from the CPU or using
 * it on the GPU must wait for that paging, or the moved allocation loses its bytes.
 */
static void test_new_allocation_waits_for_paging(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "reuse", &dev));
	gs_allocation_placement pv, pn;
	uint64_t v = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0,
	                        0, &pv);
	assert_int_equal(pv.segment, SEG_MEM);
	uint64_t rng = 0x9abc;
	static uint8_t pat[512 * KiB], pat2[512 * KiB];
	random_bytes(&rng, pat, sizeof(pat));
	random_bytes(&rng, pat2, sizeof(pat2));
	MUST(c, gs_allocation_write(c, v, 0, pat, sizeof(pat)));

	uint64_t k = block_paging_node(c, dev, lay.paging_node);
	/* V's move to the aperture is planned now and runs after K. */
	gs_paging_result pr;
	MUST(c, gs_transfer(c, v, SEG_APE, 0, &pr));
	assert_int_equal(pr.moves, 1);
	/* N takes V's old range at once. */
	uint64_t n = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pn);
	assert_int_equal(pn.segment, SEG_MEM);
	assert_int_equal(pn.offset, pv.offset);
	/* Written before K ends: the write must wait for the paging before it. */
	MUST(c, gs_allocation_write(c, n, 0, pat2, sizeof(pat2)));
	expect_final(c, k, GS_PACKET_COMPLETED);
	MUST(c, gs_sync_wait(c, pr.paging_sync, pr.paging_fence, WAIT_MS, NULL));
	expect_bytes(c, v, pat, sizeof(pat), "V, moved out of the range N took");
	expect_bytes(c, n, pat2, sizeof(pat2), "N, written while the paging before it was queued");
	/* The zero-fill of N was a paging packet of its own, recorded with N's placement. */
	gs_move mv = {0};
	assert_true(find_move(c, n, GS_MOVE_PLACE, &mv));
	assert_true(mv.packet != 0);
}

/*
 * Compaction by paging: vram holds four allocations with two 256 KiB holes between them; a
 * 512 KiB allocation that supports only vram cannot fit in one piece, so an allocation slides
 * down (a COMPACT move, a plain in-place TRANSFER) instead of being evicted, and keeps its
 * bytes.
 */
static void test_compaction(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "virtual", 1024, 1024, 65536);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "compact", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t al[4];
	gs_allocation_placement pl[4];
	for (int i = 0; i < 4; i++) {
		al[i] = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pl[i]);
		assert_int_equal(pl[i].segment, SEG_MEM);
	}
	static uint8_t pat[2][256 * KiB];
	uint64_t rng = 0xc0c0;
	for (int k = 0; k < 2; k++) {
		random_bytes(&rng, pat[k], sizeof(pat[k]));
		MUST(c, gs_allocation_write(c, al[2 * k + 1], 0, pat[k], sizeof(pat[k])));
	}
	/* Holes where 0 and 2 were: 512 KiB free, 256 KiB the largest piece. */
	MUST(c, gs_allocation_destroy(c, al[0]));
	MUST(c, gs_allocation_destroy(c, al[2]));
	gs_allocation_placement pb;
	uint64_t big = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pb);
	assert_int_equal(pb.segment, 0); /* no piece large enough: system memory for now */
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, big, 0, 512 * KiB, 0x600df00du), 0);
	itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);

	gs_allocation_status sb = query(c, big);
	assert_true(sb.resident);
	assert_int_equal(sb.segment, SEG_MEM);
	for (int k = 0; k < 2; k++) {
		gs_allocation_status st = query(c, al[2 * k + 1]);
		assert_int_equal(st.segment, SEG_MEM); /* still resident: slid, not evicted */
		expect_bytes(c, al[2 * k + 1], pat[k], sizeof(pat[k]), "a compacted allocation");
	}
	/* The cheapest plan slides 1 down onto the first hole (256 KiB moved), which merges
	 * the two holes; 3 stays where it is. */
	gs_move mv = {0};
	assert_false(find_move(c, al[3], GS_MOVE_COMPACT, &mv));
	assert_int_equal(query(c, al[3]).offset, pl[3].offset);
	assert_true(find_move(c, al[1], GS_MOVE_COMPACT, &mv));
	assert_int_equal(mv.from_offset, pl[1].offset);
	assert_int_equal(mv.to_offset, pl[0].offset);
	assert_int_equal(mv.from_segment, SEG_MEM);
	assert_int_equal(mv.to_segment, SEG_MEM);
	assert_true(mv.to_offset < mv.from_offset);
	assert_int_equal(mv.transfer_flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE), 0);
	assert_false(find_move(c, al[1], GS_MOVE_EVICT, &mv));
	assert_false(find_move(c, al[3], GS_MOVE_EVICT, &mv));
	uint8_t *got = malloc(512 * KiB);
	assert_non_null(got);
	MUST(c, gs_allocation_read(c, big, 0, got, 512 * KiB));
	for (size_t i = 0; i < 512 * KiB; i += 4)
		if (got[i] != 0x0d || got[i + 3] != 0x60)
			fail_msg("the compacted-for allocation holds 0x%02x at %zu", got[i], i);
	free(got);
}

/* Compaction where the slide overlaps the allocation's old range: x (256 KiB at 128 KiB)
 * slides to 0, through the TRANSFER's memmove semantics. */
static void test_compaction_overlapping(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "virtual", 1024, 1024, 65536);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "overlap", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	const uint64_t sizes[4] = {128 * KiB, 256 * KiB, 128 * KiB, 512 * KiB};
	uint64_t al[4];
	gs_allocation_placement pl[4];
	for (int i = 0; i < 4; i++)
		al[i] = alloc_make(c, dev, sizes[i], BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pl[i]);
	assert_int_equal(pl[1].offset, 128 * KiB);
	static uint8_t pat[256 * KiB];
	uint64_t rng = 0x0b0e;
	random_bytes(&rng, pat, sizeof(pat));
	MUST(c, gs_allocation_write(c, al[1], 0, pat, sizeof(pat)));
	MUST(c, gs_allocation_destroy(c, al[0]));
	MUST(c, gs_allocation_destroy(c, al[2]));
	uint64_t big = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, NULL);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, big, 0, 64, 1), 0);
	itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	gs_move mv = {0};
	assert_true(find_move(c, al[1], GS_MOVE_COMPACT, &mv));
	assert_int_equal(mv.from_offset, 128 * KiB);
	assert_int_equal(mv.to_offset, 0);
	assert_int_equal(query(c, al[1]).offset, 0);
	expect_bytes(c, al[1], pat, sizeof(pat), "an allocation slid over its own old range");
	assert_true(query(c, big).resident);
}

/*
 * ContextSwitch: R, a packet of device D, runs a long preemptible SPIN on node 0. Evicting
 * another allocation B of D first sends a zero-length ContextSwitch packet to node 0, which
 * switches the engine away from R (R is preempted and resumes later); B's eviction transfer
 * runs after it.
 */
static void test_context_switch_before_move(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 65536);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "switch", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t a = alloc_make(c, dev, 4096, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t b = alloc_make(c, dev, 64 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0, 0,
	                        NULL);
	static uint8_t pat[64 * KiB];
	uint64_t rng = 0x5151;
	random_bytes(&rng, pat, sizeof(pat));
	MUST(c, gs_allocation_write(c, b, 0, pat, sizeof(pat)));
	uint64_t s;
	MUST(c, gs_sync_create(c, dev, 0, &s));
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_signal(&buf, s, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&buf, 300000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, a, 0, 4096, 0x12345678u), 0);
	uint64_t r = submit(c, ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	sync_reached(c, s, 1); /* R runs */

	gs_paging_result pr;
	MUST(c, gs_evict(c, dev, &b, 1, &pr));
	assert_int_equal(pr.moves, 1);
	paging_wait(c, &pr);
	expect_final(c, r, GS_PACKET_COMPLETED);
	expect_bytes(c, b, pat, sizeof(pat), "B after its eviction");

	gs_move mv = {0};
	assert_true(find_move(c, b, GS_MOVE_EVICT_REQUEST, &mv));
	itest_audit_barrier(c, ctx);
	const char *db = db_of(f);
	/* One ContextSwitch packet on node 0: zero-length, Paging not set (R is a render packet),
	 * completed, against R, before B's transfer was submitted. */
	assert_int_equal(itest_audit_int(db,
	                                 "SELECT COUNT(*) FROM packets WHERE submit_flags & 64 AND "
	                                 "node = 0 AND dma_size = 0 AND NOT submit_flags & 1 AND "
	                                 "state_name = 'COMPLETED'"),
	                 1);
	int64_t cs = itest_audit_int(db, "SELECT packet FROM packets WHERE submit_flags & 64");
	int64_t cs_done = event_seq_row(db, (uint64_t)cs, GS_PACKET_COMPLETED, true);
	int64_t b_run = event_seq(db, mv.packet, GS_PACKET_RUNNING, false);
	assert_true(cs_done > 0 && b_run > cs_done);
	assert_int_equal(
	        itest_audit_int(db,
	                        "SELECT COUNT(*) FROM packet_events WHERE packet = %" PRId64
	                        " AND detail LIKE 'ContextSwitch away from packet %" PRIu64 "%%'",
	                        cs, r),
	        1);
	/* R was switched away from: preempted, then resumed and completed. */
	assert_true(event_seq(db, r, GS_PACKET_PREEMPTED, false) > 0);
	assert_true(event_seq(db, r, GS_PACKET_RESUBMITTED, false) > 0);
}

/* =====================================================================================
 * 3. Tiled allocations: swizzled in vram, linear elsewhere and to the CPU
 * ===================================================================================== */

#define TL_PITCH 1024u
#define TL_BAND  (64u * TL_PITCH)
#define TL_SIZE  (2 * TL_BAND + 1000) /* two tiled bands and a linear tail */

/* server/swizzle.h's layout, written out independently: linear offset -> tiled offset. */
static uint64_t ref_tiled_offset(uint64_t l, uint64_t size)
{
	uint64_t tail = size - size % TL_BAND;
	if (l >= tail)
		return l;
	uint64_t y = l / TL_PITCH, x = l % TL_PITCH;
	return (y / 64) * 64 * TL_PITCH + (x / 64) * 4096 + (y % 64) * 64 + x % 64;
}

/* The raw bytes of tiled allocation t, as a GPU COPY into a linear allocation sees them. */
static void gpu_raw(gs_client *c, uint64_t ctx, uint64_t t, uint64_t lin, uint8_t *out)
{
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, lin, 0, TL_SIZE, 0), 0);
	assert_int_equal(gs_dmabuf_copy(&b, lin, 0, t, 0, TL_SIZE), 0);
	itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	MUST(c, gs_allocation_read(c, lin, 0, out, TL_SIZE));
}

static void expect_same(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
	if (memcmp(got, want, n) == 0)
		return;
	size_t i = 0;
	while (got[i] == want[i])
		i++;
	fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, got[i], want[i]);
}

static void test_tiled(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "virtual", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "tiled", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	gs_allocation_placement pt, pl;
	uint64_t t = alloc_make(c, dev, TL_SIZE, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0,
	                        GS_ALLOC_TILED, &pt);
	uint64_t lin = alloc_make(c, dev, TL_SIZE, BIT(SEG_MEM), 0, 0, 0, &pl);
	assert_int_equal(pt.segment, SEG_MEM);
	assert_int_equal(pl.segment, SEG_MEM);
	assert_int_equal(query(c, t).flags & GS_ALLOC_TILED, GS_ALLOC_TILED);

	uint8_t *pat = malloc(TL_SIZE), *swz = malloc(TL_SIZE), *got = malloc(TL_SIZE);
	assert_true(pat && swz && got);
	uint64_t rng = 0x7117ed;
	random_bytes(&rng, pat, TL_SIZE);
	for (uint64_t l = 0; l < TL_SIZE; l++)
		swz[ref_tiled_offset(l, TL_SIZE)] = pat[l];
	/* Spot checks of the formula itself (swizzle.h's own example is pitch 128). */
	assert_int_equal(ref_tiled_offset(63, TL_SIZE), 63);
	assert_int_equal(ref_tiled_offset(64, TL_SIZE), 4096);
	assert_int_equal(ref_tiled_offset(TL_PITCH, TL_SIZE), 64);
	assert_int_equal(ref_tiled_offset(TL_BAND, TL_SIZE), TL_BAND);
	assert_int_equal(ref_tiled_offset(2 * TL_BAND + 5, TL_SIZE), 2 * TL_BAND + 5);

	/* The CPU writes linear bytes; vram holds them swizzled; the CPU reads them linear. */
	MUST(c, gs_allocation_write(c, t, 0, pat, TL_SIZE));
	expect_bytes(c, t, pat, TL_SIZE, "tiled allocation read by the CPU in vram");
	gpu_raw(c, ctx, t, lin, got);
	expect_same(got, swz, TL_SIZE, "GPU copy of the tiled allocation in vram (swizzled)");
	/* A partial CPU read and write across tile rows agree with the linear view. */
	MUST(c, gs_allocation_read(c, t, 100, got, 3000));
	expect_same(got, pat + 100, 3000, "partial CPU read");

	/* To the aperture: unswizzled on the way (the daemon chooses; asked for explicitly
	 * here). */
	gs_paging_result r;
	MUST(c, gs_transfer(c, t, SEG_APE, GS_TRANSFER_UNSWIZZLE, &r));
	assert_int_equal(r.moves, 1);
	paging_wait(c, &r);
	gs_allocation_status st = query(c, t);
	assert_int_equal(st.segment, SEG_APE);
	assert_true(st.resident);
	expect_bytes(c, t, pat, TL_SIZE, "tiled allocation read by the CPU in the aperture");
	gpu_raw(c, ctx, t, lin, got);
	expect_same(got, pat, TL_SIZE, "GPU copy of the tiled allocation in the aperture (linear)");
	gs_move mv = {0};
	assert_true(find_move(c, t, GS_MOVE_TRANSFER, &mv));
	assert_int_equal(mv.from_segment, SEG_MEM);
	assert_int_equal(mv.to_segment, SEG_APE);
	assert_int_equal(mv.transfer_flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE),
	                 GS_TRANSFER_UNSWIZZLE);
	assert_int_equal(mv.transfer_flags & START_END, START_END);
	/* Split at band boundaries: the chunk (16 KiB) is less than a band (64 KiB). */
	assert_int_equal(mv.pieces, (TL_SIZE + TL_BAND - 1) / TL_BAND);
	uint64_t unswizzle_packet = mv.packet;

	/* Back to vram with the daemon choosing the conversion: Swizzle. */
	MUST(c, gs_transfer(c, t, SEG_MEM, 0, &r));
	assert_int_equal(r.moves, 1);
	paging_wait(c, &r);
	assert_int_equal(query(c, t).segment, SEG_MEM);
	expect_bytes(c, t, pat, TL_SIZE, "tiled allocation read by the CPU back in vram");
	gpu_raw(c, ctx, t, lin, got);
	expect_same(got, swz, TL_SIZE, "GPU copy of the tiled allocation back in vram");
	assert_true(find_move(c, t, GS_MOVE_TRANSFER, &mv));
	assert_true(mv.packet != unswizzle_packet);
	assert_int_equal(mv.from_segment, SEG_APE);
	assert_int_equal(mv.to_segment, SEG_MEM);
	assert_int_equal(mv.transfer_flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE),
	                 GS_TRANSFER_SWIZZLE);

	/* A GPU write in vram goes to the tiled address; an eviction to system memory
	 * unswizzles it for the CPU. */
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_copy(&b, t, 0, lin, 0, TL_SIZE), 0); /* lin holds swz */
	itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	expect_bytes(c, t, pat, TL_SIZE, "tiled allocation after a raw GPU copy of its image");
	MUST(c, gs_evict(c, dev, &t, 1, &r));
	assert_int_equal(r.moves, 1);
	paging_wait(c, &r);
	st = query(c, t);
	assert_false(st.resident);
	assert_int_equal(st.segment, 0);
	expect_bytes(c, t, pat, TL_SIZE, "tiled allocation in system memory");
	assert_true(find_move(c, t, GS_MOVE_EVICT_REQUEST, &mv));
	assert_int_equal(mv.transfer_flags & (GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE),
	                 GS_TRANSFER_UNSWIZZLE);

	/* The audit file says the same. */
	itest_audit_barrier(c, ctx);
	const char *db = db_of(f);
	if (audit_has_table(db, "moves")) {
		assert_int_equal(itest_audit_int(db,
		                                 "SELECT COUNT(*) FROM moves WHERE allocation = "
		                                 "%" PRIu64
		                                 " AND kind = %d AND from_segment = 1 AND "
		                                 "to_segment = 2 AND (transfer_flags & 3) = 2",
		                                 t, (int)GS_MOVE_TRANSFER),
		                 1);
		assert_int_equal(itest_audit_int(db,
		                                 "SELECT COUNT(*) FROM moves WHERE allocation = "
		                                 "%" PRIu64
		                                 " AND kind = %d AND from_segment = 2 AND "
		                                 "to_segment = 1 AND (transfer_flags & 3) = 1",
		                                 t, (int)GS_MOVE_TRANSFER),
		                 1);
	} else {
		fprintf(stderr, "  the audit has no moves table yet: its checks were skipped\n");
	}
	free(pat);
	free(swz);
	free(got);
}

/* =====================================================================================
 * 4. MakeResident and Evict
 * ===================================================================================== */

static void test_make_resident_evict(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "virtual", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "residency", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	const uint64_t size = 100 * KiB + 12;
	gs_allocation_placement p;
	uint64_t a = alloc_make(c, dev, size, BIT(SEG_MEM), 0, 0, 0, &p);
	assert_int_equal(p.segment, SEG_MEM);
	uint8_t *pat = malloc(size);
	assert_non_null(pat);
	uint64_t rng = 0xe71c7;
	random_bytes(&rng, pat, size);
	MUST(c, gs_allocation_write(c, a, 0, pat, size));

	gs_paging_result r;
	MUST(c, gs_evict(c, dev, &a, 1, &r));
	assert_int_equal(r.moves, 1);
	assert_true(r.paging_sync != 0);
	assert_true(r.paging_fence > 0);
	paging_wait(c, &r);
	gs_allocation_status st = query(c, a);
	assert_false(st.resident);
	assert_int_equal(st.segment, 0);
	assert_int_equal(st.address, 0);
	assert_false(st.moving);
	assert_int_equal(st.moves, 1);
	expect_bytes(c, a, pat, size, "after Evict");
	gs_move mv = {0};
	assert_true(find_move(c, a, GS_MOVE_EVICT_REQUEST, &mv));
	assert_int_equal(mv.from_segment, SEG_MEM);
	assert_int_equal(mv.to_segment, 0);
	assert_int_equal(mv.bytes, size);
	assert_int_equal(mv.transfer_flags & START_END, START_END);
	assert_int_equal(mv.pieces, (size + 16383) / 16384);
	/* Evicting it again moves nothing; the fence answered is the current one. */
	gs_paging_result r2;
	MUST(c, gs_evict(c, dev, &a, 1, &r2));
	assert_int_equal(r2.moves, 0);
	assert_int_equal(r2.paging_sync, r.paging_sync);
	assert_int_equal(r2.paging_fence, r.paging_fence);

	MUST(c, gs_make_resident(c, dev, &a, 1, &r2));
	assert_int_equal(r2.moves, 1);
	assert_int_equal(r2.paging_sync, r.paging_sync);
	assert_true(r2.paging_fence > r.paging_fence);
	paging_wait(c, &r2);
	st = query(c, a);
	assert_true(st.resident);
	assert_int_equal(st.segment, SEG_MEM);
	assert_true(st.address != 0);
	assert_int_equal(st.moves, 2);
	expect_bytes(c, a, pat, size, "after MakeResident");
	assert_true(find_move(c, a, GS_MOVE_PAGE_IN, &mv));
	assert_int_equal(mv.from_segment, 0);
	assert_int_equal(mv.to_segment, SEG_MEM);
	/* Resident already: nothing moves, and the move log says so. */
	gs_paging_result r3;
	MUST(c, gs_make_resident(c, dev, &a, 1, &r3));
	assert_int_equal(r3.moves, 0);
	assert_int_equal(r3.paging_fence, r2.paging_fence);
	assert_true(find_move(c, a, GS_MOVE_RESIDENT, &mv));
	assert_int_equal(query(c, a).moves, 2);

	/* The GPU still sees its bytes: a checksum of it in vram. */
	uint64_t res = alloc_make(c, dev, 64, 0, 0, 0, 0, NULL);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_checksum(&b, res, 0, a, 0, size), 0);
	uint64_t reader = itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	/* History by allocation: the render packet that read it and the paging packets that
	 * moved it (two moves: the eviction and the page-in). */
	gs_history_filter hf = {.allocation = a, .limit = 100};
	gs_packet_record *recs;
	size_t nrec;
	MUST(c, gs_history(c, &hf, &recs, &nrec));
	size_t readers = 0, pagers = 0;
	for (size_t i = 0; i < nrec; i++) {
		readers += recs[i].packet == reader;
		pagers += (recs[i].submit_flags & GS_SUBMIT_PAGING) != 0;
	}
	gs_history_free(recs, nrec);
	assert_int_equal(readers, 1);
	assert_int_equal(pagers, 2);
	uint8_t got[8];
	MUST(c, gs_allocation_read(c, res, 0, got, 8));
	assert_int_equal(gs_le64_get(got), gs_isa_checksum(pat, size));

	/* The paging packets of both requests are in the history, flagged Paging, done. */
	itest_audit_barrier(c, ctx);
	assert_int_equal(itest_audit_int(db_of(f),
	                                 "SELECT COUNT(*) FROM packets WHERE (submit_flags & 1) "
	                                 "AND device = %" PRIu64 " AND state = %d",
	                                 dev, (int)GS_PACKET_COMPLETED),
	                 2);
	free(pat);
}

/* =====================================================================================
 * 5. Requests the memory manager refuses
 * ===================================================================================== */

static void test_bad_input(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "virtual", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev, dev2;
	MUST(c, gs_device_create(c, "bad", &dev));
	MUST(c, gs_device_create(c, "other", &dev2));
	/* An empty list is a list: the device has no allocations yet. */
	gs_allocation_status *none = NULL;
	size_t nnone = 99;
	MUST(c, gs_allocation_list(c, dev2, true, 10, 0, &none, &nnone));
	assert_int_equal(nnone, 0);
	gs_allocation_list_free(none);
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t ctx1 = sched_context(c, dev, 1, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t lin = alloc_make(c, dev, 8192, BIT(SEG_MEM) | BIT(SEG_APE), 0, 0, 0, NULL);
	uint64_t tiled = alloc_make(c, dev, 8192, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0,
	                            GS_ALLOC_TILED, NULL);
	uint64_t mem_only = alloc_make(c, dev, 8192, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t foreign = alloc_make(c, dev2, 8192, 0, 0, 0, 0, NULL);
	err_probe e = {.db = db_of(f), .c = c, .barrier_ctx = ctx};
	itest_audit_barrier(c, ctx);
	e.rows = itest_audit_errors(e.db);
	assert_true(e.rows >= 0);
	gs_paging_result r;

	uint64_t unknown = UINT64_C(0x7fffffff00);
	expect_refused(&e, gs_make_resident(c, dev, &unknown, 1, &r), GS_STATUS_NOT_FOUND,
	               "MakeResident of an unknown allocation");
	expect_refused(&e, gs_make_resident(c, dev, &foreign, 1, &r), GS_STATUS_NOT_FOUND,
	               "MakeResident of another device's allocation");
	expect_refused(&e, gs_evict(c, dev, &foreign, 1, &r), GS_STATUS_NOT_FOUND,
	               "Evict of another device's allocation");
	expect_refused(&e, gs_transfer(c, lin, SEG_APE, 0x20, &r), GS_STATUS_RESERVED_BITS,
	               "Transfer with reserved bit 0x20");
	expect_refused(&e, gs_transfer(c, lin, SEG_APE, GS_TRANSFER_START, &r),
	               GS_STATUS_FLAGS_NOT_ALLOWED, "Transfer with TransferStart");
	expect_refused(&e, gs_transfer(c, lin, SEG_APE, GS_TRANSFER_ALLOCATION_IS_IDLE, &r),
	               GS_STATUS_FLAGS_NOT_ALLOWED, "Transfer with AllocationIsIdle");
	expect_refused(
	        &e, gs_transfer(c, tiled, SEG_APE, GS_TRANSFER_SWIZZLE | GS_TRANSFER_UNSWIZZLE, &r),
	        GS_STATUS_TRANSFER_FLAGS, "Transfer with Swizzle|Unswizzle");
	expect_refused(&e, gs_transfer(c, lin, SEG_APE, GS_TRANSFER_SWIZZLE, &r),
	               GS_STATUS_TRANSFER_FLAGS, "Transfer with Swizzle of a linear allocation");
	expect_refused(&e, gs_transfer(c, tiled, SEG_APE, GS_TRANSFER_SWIZZLE, &r),
	               GS_STATUS_TRANSFER_FLAGS,
	               "Transfer with Swizzle of a tiled allocation out of vram");
	expect_refused(&e, gs_transfer(c, lin, 7, 0, &r), GS_STATUS_SEGMENT_UNKNOWN,
	               "Transfer to a segment that does not exist");
	expect_refused(&e, gs_transfer(c, mem_only, SEG_APE, 0, &r), GS_STATUS_SEGMENT_PREFERENCE,
	               "Transfer to a segment outside the supported set");
	/* Nothing moved. */
	assert_int_equal(query(c, lin).moves, 0);
	assert_int_equal(query(c, tiled).moves, 0);
	assert_int_equal(query(c, mem_only).moves, 0);
	assert_int_equal(query(c, foreign).moves, 0);

	/* The device's paging sync is the daemon's to signal. */
	MUST(c, gs_make_resident(c, dev, &lin, 1, &r));
	assert_true(r.paging_sync != 0);
	expect_refused(&e, gs_sync_signal(c, r.paging_sync, r.paging_fence + 1000),
	               GS_STATUS_PERMISSION_DENIED, "SyncSignal of the paging sync");
	expect_refused(&e, gs_sync_destroy(c, r.paging_sync), GS_STATUS_PERMISSION_DENIED,
	               "SyncDestroy of the paging sync");

	/* A client DMA buffer with a TRANSFER in it, written by hand after a valid FILL. */
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, lin, 0, 64, 1), 0);
	uint8_t *grown = realloc(b.data, b.len + TRANSFER_B);
	assert_non_null(grown);
	b.data = grown;
	b.cap = b.len + TRANSFER_B;
	gs_isa_cmd t = {.op = GS_OP_TRANSFER,
	                .dst = gs_addr_make(SEG_APE, 0),
	                .src = gs_addr_make(SEG_MEM, 0),
	                .size = 64,
	                .transfer_flags = START_END};
	assert_int_equal(gs_isa_encode(&t, b.data + b.len, TRANSFER_B), TRANSFER_B);
	b.len += TRANSFER_B;
	gs_submit_result sr;
	expect_refused(&e, gs_submit(c, ctx, &b, 0, &sr), GS_STATUS_FLAGS_NOT_ALLOWED,
	               "Submit of a DMA buffer with a TRANSFER");
	gs_dmabuf_free(&b);
	/* Nor may a client claim the Paging submit flag. */
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, lin, 0, 64, 1), 0);
	expect_refused(&e, gs_submit(c, ctx, &b, GS_SUBMIT_PAGING, &sr),
	               GS_STATUS_FLAGS_NOT_ALLOWED, "Submit with the Paging flag");
	gs_dmabuf_free(&b);

	/* Two allocations that only vram supports, each more than half of it: a packet that
	 * needs both can never run. It is cancelled; the packets around it are not disturbed. */
	uint64_t big1 = alloc_make(c, dev, 600 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t big2 = alloc_make(c, dev, 600 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t other = alloc_make(c, dev, 4096, BIT(SEG_MEM) | BIT(SEG_APE), 0, 0, 0, NULL);
	gs_submit_desc d[4];
	gs_dmabuf bufs[4];
	for (int i = 0; i < 4; i++)
		gs_dmabuf_init(&bufs[i]);
	assert_int_equal(gs_dmabuf_fill(&bufs[0], big1, 0, 600 * KiB, 0x01010101u), 0);
	assert_int_equal(gs_dmabuf_fill(&bufs[1], big1, 0, 600 * KiB, 0x02020202u), 0);
	assert_int_equal(gs_dmabuf_copy(&bufs[1], big2, 0, big1, 0, 600 * KiB), 0);
	assert_int_equal(gs_dmabuf_fill(&bufs[2], big2, 0, 600 * KiB, 0x03030303u), 0);
	assert_int_equal(gs_dmabuf_fill(&bufs[3], other, 0, 4096, 0x04040404u), 0);
	d[0] = (gs_submit_desc){.context = ctx, .dma = &bufs[0]};
	d[1] = (gs_submit_desc){.context = ctx, .dma = &bufs[1]};
	d[2] = (gs_submit_desc){.context = ctx, .dma = &bufs[2]};
	d[3] = (gs_submit_desc){.context = ctx1, .dma = &bufs[3]};
	gs_submit_result res[4];
	MUST(c, gs_submit_batch(c, d, 4, res));
	for (int i = 0; i < 4; i++)
		gs_dmabuf_free(&bufs[i]);
	expect_final(c, res[0].packet, GS_PACKET_COMPLETED);
	expect_final(c, res[1].packet, GS_PACKET_CANCELLED);
	expect_final(c, res[2].packet, GS_PACKET_COMPLETED);
	expect_final(c, res[3].packet, GS_PACKET_COMPLETED);
	gs_packet_event *ev = NULL;
	size_t n = sched_events(c, res[1].packet, &ev);
	assert_true(n > 0);
	assert_int_equal(ev[n - 1].state, GS_PACKET_CANCELLED);
	if (!strstr(ev[n - 1].detail, "resident together"))
		fail_msg("CANCELLED detail '%s' does not say 'resident together'",
		         ev[n - 1].detail);
	gs_packet_events_free(ev, n);
	gs_packet_record *recs = NULL;
	size_t nr = sched_history_device(c, dev, &recs);
	const gs_packet_record *rec = sched_record(recs, nr, res[1].packet);
	assert_non_null(rec);
	assert_non_null(rec->result);
	assert_non_null(strstr(rec->result, "resident together"));
	gs_history_free(recs, nr);
	uint8_t *want = malloc(600 * KiB);
	assert_non_null(want);
	gs_isa_fill(want, 600 * KiB, 0x01010101u); /* the cancelled packet wrote nothing */
	expect_bytes(c, big1, want, 600 * KiB, "big1 after the cancelled packet");
	gs_isa_fill(want, 600 * KiB, 0x03030303u);
	expect_bytes(c, big2, want, 600 * KiB, "big2 after the packet after it");
	free(want);
	uint8_t small[4096], small_want[4096];
	gs_isa_fill(small_want, sizeof(small_want), 0x04040404u);
	MUST(c, gs_allocation_read(c, other, 0, small, sizeof(small)));
	assert_memory_equal(small, small_want, sizeof(small));
	/* The context goes on. */
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, lin, 0, 64, 5), 0);
	itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	/* Still serving, and no errors row for a packet the memory manager cancelled. */
	itest_audit_barrier(c, ctx);
	assert_int_equal(itest_audit_errors(e.db), e.rows);
}

/* The device's paging sync is signalled by the daemon only (SyncSignal is refused): nor may a
 * SIGNAL command in a client's packet move it (refused at submission, or not executed), or a
 * wait for a paging fence would return before the paging is done. */
static void test_gpu_signal_of_paging_sync(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "virtual", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "signal", &dev));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t a = alloc_make(c, dev, 8192, BIT(SEG_MEM) | BIT(SEG_APE), 0, 0, 0, NULL);
	gs_paging_result r;
	MUST(c, gs_evict(c, dev, &a, 1, &r));
	paging_wait(c, &r);
	assert_true(r.paging_sync != 0);
	uint64_t before = 0;
	assert_int_equal(gs_sync_wait(c, r.paging_sync, 0, 0, &before), 0);
	assert_int_equal(before, r.paging_fence);

	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_signal(&b, r.paging_sync, before + 1000), 0);
	gs_submit_result sr;
	int rv = gs_submit(c, ctx, &b, 0, &sr);
	gs_dmabuf_free(&b);
	if (rv == 0) {
		gs_packet_state st = GS_PACKET_UNKNOWN;
		int wrv = gs_packet_wait(c, sr.packet, WAIT_MS, &st, NULL);
		assert_true(wrv == 0 || wrv == GS_STATUS_FAULTED);
	}
	uint64_t after = 0;
	assert_int_equal(gs_sync_wait(c, r.paging_sync, 0, 0, &after), 0);
	if (after != before)
		fail_msg("a client packet's SIGNAL moved the paging sync %" PRIu64 " from %" PRIu64
		         " to %" PRIu64 " (the submit answered %s)",
		         r.paging_sync, before, after, gs_status_name(rv));
	/* Still serving. */
	itest_audit_barrier(c, ctx);
}

/* =====================================================================================
 * 7. Races found by a review of the memory manager, each once reproduced against it
 * ===================================================================================== */

typedef struct ev_thread {
	gs_client *c;
	uint64_t dev;
	uint64_t al[2];
	int rv;
	gs_paging_result r;
	char msg[256];
} ev_thread;

static void *ev_thread_fn(void *arg)
{
	ev_thread *x = arg;
	x->rv = gs_evict(x->c, x->dev, x->al, 2, &x->r);
	snprintf(x->msg, sizeof(x->msg), "%s", gs_client_message(x->c));
	return NULL;
}

/*
 * races R1: Evict [A, B] is parked on A's pin (P runs with A). When P retires, the Evict is
 * re-dispatched from inside retire(); moving A releases the scheduler hold, which kicks node 0,
 * where Q {B read, C write; C in system memory} was waiting: Q pins B and C and waits for C's
 * page-in. The Evict then moves B (pinned by Q) without looking at the pin. Q runs after C's
 * page-in, patched with B's system-memory address, before B's eviction transfer has copied B.
 */
static void test_r1_multi_evict_moves_pinned(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "r1", &dev));
	uint64_t ctx_p = sched_context(c, dev, 0, lay.paging_node, CLASS_HIGH, 0);
	uint64_t ctx_q = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	gs_allocation_placement pa, pb, pf, pc;
	uint64_t a = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pa);
	uint64_t b = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pb);
	uint64_t fl = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pf);
	uint64_t cc = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &pc);
	uint64_t out = alloc_make(c, dev, 256 * KiB, BIT(SEG_APE), 0, 0, 0, NULL);
	(void)fl;
	assert_int_equal(pa.segment, SEG_MEM);
	assert_int_equal(pb.segment, SEG_MEM);
	assert_int_equal(pf.segment, SEG_MEM);
	assert_int_equal(pc.segment, 0); /* vram full: system memory */
	static uint8_t pat[256 * KiB];
	uint64_t rng = 0x77;
	random_bytes(&rng, pat, sizeof(pat));
	MUST(c, gs_allocation_write(c, b, 0, pat, sizeof(pat)));

	uint64_t s1;
	MUST(c, gs_sync_create(c, dev, 0, &s1));
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_signal(&buf, s1, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&buf, 400000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, a, 0, 64, 0x11111111u), 0);
	uint64_t p = submit(c, ctx_p, &buf, 0);
	gs_dmabuf_free(&buf);
	sync_reached(c, s1, 1); /* P runs: A pinned */

	/* Q: lower band on the same node: waits in the run queue, not prepared. */
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_copy(&buf, out, 0, b, 0, 256 * KiB), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, cc, 0, 64, 0x22222222u), 0);
	uint64_t q = submit(c, ctx_q, &buf, 0);
	gs_dmabuf_free(&buf);

	ev_thread th = {.dev = dev, .al = {a, b}, .rv = -100};
	th.c = itest_connect(&f->d.t, NULL);
	uint64_t before = requests_seen(c);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, ev_thread_fn, &th), 0);
	long long deadline = gs_test_now_ms() + WAIT_MS;
	uint64_t polls = 0, seen = before;
	while (seen < before + polls + 1 && gs_test_now_ms() < deadline) {
		seen = requests_seen(c);
		polls++;
	}
	assert_int_equal(query(c, a).moves, 0); /* parked on A's pin */
	assert_int_equal(query(c, b).moves, 0);
	if (gs_packet_state_is_final(sched_state_now(c, p)))
		fail_msg("P ended before the Evict was parked");

	assert_int_equal(pthread_join(tid, NULL), 0);
	gs_close(th.c);
	if (th.rv != 0)
		fail_msg("evict: %s: %s", gs_status_name(th.rv), th.msg);
	gs_allocation_status sb = query(c, b);
	fprintf(stderr, "races R1: after Evict: B segment %u pinned %u moving %d moves %llu\n",
	        sb.segment, sb.pinned, sb.moving, (unsigned long long)sb.moves);
	expect_final(c, p, GS_PACKET_COMPLETED);
	expect_final(c, q, GS_PACKET_COMPLETED);
	paging_wait(c, &th.r);
	gs_move mv = {0};
	assert_true(find_move(c, b, GS_MOVE_EVICT_REQUEST, &mv));
	itest_audit_barrier(c, ctx_q);
	int64_t b_done = event_seq(db_of(f), mv.packet, GS_PACKET_COMPLETED, true);
	int64_t q_ready = event_seq(db_of(f), q, GS_PACKET_READY, true);
	fprintf(stderr,
	        "races R1: Q READY at event %lld, B's eviction packet %llu COMPLETED at %lld\n",
	        (long long)q_ready, (unsigned long long)mv.packet, (long long)b_done);
	uint8_t *got = malloc(sizeof(pat));
	MUST(c, gs_allocation_read(c, out, 0, got, sizeof(pat)));
	size_t bad = 0;
	for (size_t i = 0; i < sizeof(pat); i++)
		bad += got[i] != pat[i];
	free(got);
	/* Either Q ran with B where it was and B's eviction was planned after Q finished (the
	 * Evict waited for Q's pin), or Q ran after the eviction and B's page-in. */
	int64_t b_planned = event_seq(db_of(f), mv.packet, GS_PACKET_SUBMITTED, false);
	int64_t q_done = event_seq(db_of(f), q, GS_PACKET_COMPLETED, true);
	fprintf(stderr, "races R1: B's eviction planned at event %lld, Q COMPLETED at %lld\n",
	        (long long)b_planned, (long long)q_done);
	if ((q_ready < b_done && q_done > b_planned) || bad)
		fail_msg("Q was dispatched (event %lld) before B's eviction (packet %llu, done at "
		         "%lld) moved B, which Q had pinned; %zu of %zu bytes Q copied from B are "
		         "wrong",
		         (long long)q_ready, (unsigned long long)mv.packet, (long long)b_done, bad,
		         sizeof(pat));
}

/*
 * races R2: a destroyed allocation D, still referenced by a queued (unprepared) packet, is never an
 * eviction victim and is not counted by the NO_ROOM / NEVER decision: packet P, whose single
 * 512 KiB allocation fits in vram once D goes, is cancelled as "cannot be made resident
 * together".
 */
static void test_r2_destroyed_allocation_never(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "r2", &dev));
	uint64_t ctx0 = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t ctx1 = sched_context(c, dev, 1, lay.paging_node, CLASS_NORMAL, 0);
	gs_allocation_placement pd, px;
	uint64_t dd = alloc_make(c, dev, 768 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0,
	                         0, &pd);
	uint64_t x = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, &px);
	assert_int_equal(pd.segment, SEG_MEM);
	assert_int_equal(px.segment, 0);
	/* ctx1: K spins, Q (FILL D) waits behind it, unprepared. */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_spin(&buf, 300000, 0), 0);
	uint64_t k = submit(c, ctx1, &buf, 0);
	gs_dmabuf_free(&buf);
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, dd, 0, 64, 1), 0);
	uint64_t q = submit(c, ctx1, &buf, 0);
	gs_dmabuf_free(&buf);
	MUST(c, gs_allocation_destroy(c, dd));
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, x, 0, 64, 2), 0);
	uint64_t p = submit(c, ctx0, &buf, 0);
	gs_dmabuf_free(&buf);
	expect_final(c, k, GS_PACKET_COMPLETED);
	expect_final(c, q, GS_PACKET_COMPLETED);
	gs_packet_state st = GS_PACKET_UNKNOWN;
	gs_packet_wait(c, p, WAIT_MS, &st, NULL);
	if (st != GS_PACKET_COMPLETED) {
		gs_packet_event *ev = NULL;
		size_t n = sched_events(c, p, &ev);
		fail_msg("P (one 512 KiB allocation, vram 1 MiB) ended %s: %s",
		         gs_packet_state_name(st), n ? ev[n - 1].detail : "");
	}
}

/* races R3: MakeResident of two allocations that cannot be resident together answers
 * OUT_OF_MEMORY ("in use by running packets") instead of NOT_RESIDENT_TOGETHER. */
static void test_r3_make_resident_status(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	uint64_t dev;
	MUST(c, gs_device_create(c, "r3", &dev));
	uint64_t x = alloc_make(c, dev, 768 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, NULL);
	uint64_t y = alloc_make(c, dev, 768 * KiB, BIT(SEG_MEM), pref1(SEG_MEM), 0, 0, NULL);
	uint64_t l[2] = {x, y};
	gs_paging_result r;
	int rv = gs_make_resident(c, dev, l, 2, &r);
	fprintf(stderr, "races R3: MakeResident -> %s: %s\n", gs_status_name(rv),
	        rv ? gs_client_message(c) : "");
	assert_int_equal(rv, GS_STATUS_NOT_RESIDENT_TOGETHER);
}

static void *tr_thread_fn(void *arg)
{
	rp_thread *x = arg;
	x->rv = gs_transfer(x->c, x->alloc, 0, 0, &x->r);
	snprintf(x->msg, sizeof(x->msg), "%s", gs_client_message(x->c));
	return NULL;
}

/* races R4: a Transfer parked on a pin is re-dispatched while gsd_vidsch_stop settles the aborted
 * packet, after the paging contexts were cancelled: its paging packet is queued and never
 * retired (the allocation, the packet and the paging context leak). */
static void test_r4_parked_transfer_at_shutdown(void **state)
{
	fx *f = *state;
	const char *cfg =
	        "{\"clock\": \"wall\", \"shutdown_grace_ms\": 200, \"paging_chunk\": 16384, "
	        "\"adapters\": [{\"name\": \"emu0\", \"backend\": \"emu\", \"nodes\": ["
	        "{\"name\": \"3d\", \"kind\": \"3d\"},"
	        "{\"name\": \"copy\", \"kind\": \"copy\", \"paging\": true}],"
	        "\"segments\": [{\"id\": 1, \"name\": \"vram\", \"kind\": \"memory\", "
	        "\"size\": 1048576}], \"system_memory_mib\": 64}]}";
	sched_daemon_start(&f->d, cfg, false);
	gs_client *c = itest_connect(&f->d.t, NULL);
	f->c[f->nc++] = c;
	uint64_t dev;
	MUST(c, gs_device_create(c, "r4", &dev));
	uint64_t ctx = sched_context(c, dev, 0, 1, CLASS_NORMAL, 0);
	uint64_t a = alloc_make(c, dev, 64 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t s1;
	MUST(c, gs_sync_create(c, dev, 0, &s1));
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_signal(&buf, s1, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&buf, 30000000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, a, 0, 64, 1), 0);
	(void)submit(c, ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	sync_reached(c, s1, 1);
	rp_thread th = {.alloc = a, .rv = -100};
	th.c = itest_connect(&f->d.t, NULL);
	uint64_t before = requests_seen(c);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, tr_thread_fn, &th), 0);
	long long deadline = gs_test_now_ms() + WAIT_MS;
	uint64_t polls = 0, seen = before;
	while (seen < before + polls + 1 && gs_test_now_ms() < deadline) {
		seen = requests_seen(c);
		polls++;
	}
	int rc = sched_daemon_stop(&f->d);
	assert_int_equal(pthread_join(tid, NULL), 0);
	fprintf(stderr, "races R4: parked Transfer answered %s (%s); daemon exit %d\n",
	        gs_status_name(th.rv), th.msg, rc);
	gs_close(th.c);
	assert_int_equal(rc, 0);
}

/* races R6: two NO_ROOM packets whose allocation lists cannot complete while a third packet pins
 * part of vram evict each other's partial placements on every paging completion: paging
 * ping-pong for as long as the pin lasts. */
static void test_r6_no_room_ping_pong(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	MUST(c, gs_device_create(c, "r6", &dev));
	uint64_t dev2;
	MUST(c, gs_device_create(c, "r6-other", &dev2));
	uint64_t ctx_t = sched_context(c, dev2, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t ctx_1 = sched_context(c, dev, 1, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t ctx_2 = sched_context(c, dev, 1, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t z = alloc_make(c, dev2, 512 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t fill = alloc_make(c, dev, 512 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	uint64_t al[6];
	for (int i = 0; i < 6; i++)
		al[i] = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	MUST(c, gs_allocation_destroy(c, fill));
	uint64_t s1;
	MUST(c, gs_sync_create(c, dev2, 0, &s1));
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_signal(&buf, s1, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&buf, 3000000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, z, 0, 64, 1), 0);
	uint64_t t = submit(c, ctx_t, &buf, 0);
	gs_dmabuf_free(&buf);
	sync_reached(c, s1, 1);
	uint64_t pk[2];
	for (int j = 0; j < 2; j++) {
		gs_dmabuf_init(&buf);
		for (int i = 0; i < 3; i++)
			assert_int_equal(gs_dmabuf_fill(&buf, al[3 * j + i], 0, 64, 7), 0);
		pk[j] = submit(c, j ? ctx_2 : ctx_1, &buf, 0);
		gs_dmabuf_free(&buf);
	}
	/* Count the paging packets queued while T pins Z: from now until T completes (3 s). */
	gs_daemon_stats s0, s2;
	MUST(c, gs_stats(c, &s0));
	expect_final(c, t, GS_PACKET_COMPLETED);
	MUST(c, gs_stats(c, &s2));
	fprintf(stderr, "races R6: paging packets while T pins Z: %llu (%llu bytes)\n",
	        (unsigned long long)(s2.paging_packets - s0.paging_packets),
	        (unsigned long long)(s2.paging_bytes - s0.paging_bytes));
	for (int i = 0; i < 6; i++) {
		gs_allocation_status q6 = query(c, al[i]);
		fprintf(stderr, "races R6: al[%d] seg %u moves %llu pinned %u\n", i, q6.segment,
		        (unsigned long long)q6.moves, q6.pinned);
	}
	for (int j = 0; j < 2; j++) {
		gs_packet_event *ev = NULL;
		size_t n = sched_events(c, pk[j], &ev);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, "races R6: P%d event %s %s\n", j + 1,
			        gs_packet_state_name(ev[i].state),
			        ev[i].detail ? ev[i].detail : "");
		gs_packet_events_free(ev, n);
	}
	expect_final(c, t, GS_PACKET_COMPLETED);
	expect_final(c, pk[0], GS_PACKET_COMPLETED);
	expect_final(c, pk[1], GS_PACKET_COMPLETED);
	if (s2.paging_packets - s0.paging_packets > 20)
		fail_msg("paging ping-pong: %llu paging packets while no packet was able to run",
		         (unsigned long long)(s2.paging_packets - s0.paging_packets));
}

/* races R7: the null backend ("untouched memory") does not execute the memory manager's TRANSFER or
 * FILL either: a Transfer loses the allocation's bytes, and the moved allocation shows what
 * the destination range held before (here: a destroyed allocation's bytes). */
static void test_r7_null_backend_paging(void **state)
{
	fx *f = *state;
	const char *cfg = "{\"clock\": \"wall\", \"paging_chunk\": 16384, "
	                  "\"adapters\": [{\"name\": \"emu0\", \"backend\": \"null\", \"nodes\": ["
	                  "{\"name\": \"3d\", \"kind\": \"3d\"},"
	                  "{\"name\": \"copy\", \"kind\": \"copy\", \"paging\": true}],"
	                  "\"segments\": [{\"id\": 1, \"name\": \"vram\", \"kind\": \"memory\", "
	                  "\"size\": 1048576}, {\"id\": 2, \"name\": \"aperture\", \"kind\": "
	                  "\"aperture\", \"size\": 1048576, \"cpu_visible\": true}], "
	                  "\"system_memory_mib\": 64}]}";
	sched_daemon_start(&f->d, cfg, false);
	gs_client *c = itest_connect(&f->d.t, NULL);
	f->c[f->nc++] = c;
	uint64_t dev;
	MUST(c, gs_device_create(c, "r7", &dev));
	static uint8_t secret[64 * KiB], mine[64 * KiB], got[64 * KiB];
	memset(secret, 0x5a, sizeof(secret));
	memset(mine, 0xa5, sizeof(mine));
	gs_allocation_placement po, pa;
	uint64_t old = alloc_make(c, dev, 64 * KiB, BIT(SEG_APE), 0, 0, 0, &po);
	MUST(c, gs_allocation_write(c, old, 0, secret, sizeof(secret)));
	MUST(c, gs_allocation_destroy(c, old));
	uint64_t a = alloc_make(c, dev, 64 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0, 0,
	                        &pa);
	MUST(c, gs_allocation_write(c, a, 0, mine, sizeof(mine)));
	gs_paging_result r;
	MUST(c, gs_transfer(c, a, SEG_APE, 0, &r));
	paging_wait(c, &r);
	gs_allocation_status st = query(c, a);
	MUST(c, gs_allocation_read(c, a, 0, got, sizeof(got)));
	fprintf(stderr,
	        "races R7: A now in segment %u+%llu (old was %u+%llu); first byte 0x%02x "
	        "(wrote 0xa5; the destroyed allocation held 0x5a)\n",
	        st.segment, (unsigned long long)st.offset, po.segment,
	        (unsigned long long)po.offset, got[0]);
	assert_memory_equal(got, mine, sizeof(mine));
}

/* R8 (sanity): device destroyed while paging packets of its allocations are queued. */
static void test_r8_device_destroyed_with_paging_queued(void **state)
{
	fx *f = *state;
	gs_client *c = fx_start(f, "wall", 1024, 1024, 16384);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev, dev2;
	MUST(c, gs_device_create(c, "r8", &dev));
	MUST(c, gs_device_create(c, "r8-blocker", &dev2));
	uint64_t ctx = sched_context(c, dev, 0, lay.paging_node, CLASS_NORMAL, 0);
	uint64_t a = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0,
	                        0, NULL);
	uint64_t b = alloc_make(c, dev, 256 * KiB, BIT(SEG_MEM) | BIT(SEG_APE), pref1(SEG_MEM), 0,
	                        0, NULL);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_spin(&buf, 300000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, b, 0, 64, 1), 0);
	uint64_t r = submit(c, ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	(void)r;
	uint64_t k = block_paging_node(c, dev2, lay.paging_node);
	gs_paging_result pr;
	MUST(c, gs_transfer(c, a, SEG_APE, 0, &pr));
	MUST(c, gs_device_destroy(c, dev));
	uint64_t n = alloc_make(c, dev2, 512 * KiB, BIT(SEG_MEM), 0, 0, 0, NULL);
	expect_final(c, k, GS_PACKET_COMPLETED);
	(void)n;
	gs_daemon_stats st;
	MUST(c, gs_stats(c, &st));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_overcommit_workload, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_repatch_after_preemption, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_repatch_transfer_waits_for_pin, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_render_waits_for_transfer, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_render_waits_for_eviction, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_new_allocation_waits_for_paging, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_context_switch_before_move, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_compaction, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_compaction_overlapping, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_tiled, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_make_resident_evict, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_gpu_signal_of_paging_sync, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_r1_multi_evict_moves_pinned, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_r2_destroyed_allocation_never, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_r3_make_resident_status, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_r4_parked_transfer_at_shutdown, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_r6_no_room_ping_pong, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_r7_null_backend_paging, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_r8_device_destroyed_with_paging_queued, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
