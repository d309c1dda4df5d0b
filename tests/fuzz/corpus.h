/*
 * Fuzz inputs shared by the replay driver (replay_main.c) and the wire fuzz integration test:
 * a seed corpus of valid serialized Requests, one or more of every body type, built with the
 * generated protobuf code; a small deterministic PRNG; and mutations that know the protobuf
 * wire format (length and varint fields, whole fields duplicated or appended) on top of the
 * plain byte ones (bit flips, interesting bytes, truncation, insertion, deletion, splicing).
 *
 * Header-only (static functions): each user compiles it with its own flags and links nothing
 * new. Everything is deterministic for a given PRNG seed.
 */
#ifndef GS_FUZZ_CORPUS_H
#define GS_FUZZ_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.pb-c.h"
#include "isa.h"
#include "wddm.h"

/* ---- PRNG (splitmix64) ---- */

typedef struct gs_rng {
	uint64_t s;
} gs_rng;

static inline uint64_t gs_rng_next(gs_rng *r)
{
	uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Uniform in [0, n); 0 when n is 0. */
static inline uint64_t gs_rng_below(gs_rng *r, uint64_t n)
{
	return n ? gs_rng_next(r) % n : 0;
}

/* Fills n random bytes. */
static inline void gs_rng_bytes(gs_rng *r, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)gs_rng_next(r);
}

/* ---- seed corpus ---- */

/* Object handles the seeds name; the wire test fills in real ones from a live daemon. */
typedef struct gs_fuzz_handles {
	uint64_t device;
	uint64_t context;
	uint64_t allocation;
	uint64_t sync;
	uint64_t packet;
} gs_fuzz_handles;

/*
 * The handles the seeds name by default: those a fresh daemon with the default adapter gives
 * the first objects a tenant makes, in this order: a device, a context, two allocations, a sync
 * object, and the first packet. (The daemon's own paging device and its three paging contexts,
 * one per node, take handles 1 to 4; the device's paging fence takes 6.) The daemon's handles
 * are random: fuzz_dispatch gives it a counter instead (gsd_object_set_handle_source), makes
 * these objects and checks the handles. Packet ids are opaque on the wire (server/core/wire_id.h):
 * fuzz_dispatch gives the daemon an all-zero wire key, under which the first packet is this
 * number.
 */
#define GS_FUZZ_DAEMON_HANDLES                                                                     \
	{                                                                                          \
		.device = 5, .context = 7, .allocation = 8, .sync = 10,                            \
		.packet = UINT64_C(8106248228193909)                                               \
	}

enum {
	GS_SEED_INFO,
	GS_SEED_INFO_TOKEN,
	GS_SEED_DEVICE_CREATE,
	GS_SEED_DEVICE_DESTROY,
	GS_SEED_CONTEXT_CREATE,
	GS_SEED_CONTEXT_CREATE_GDI,
	GS_SEED_CONTEXT_DESTROY,
	GS_SEED_CONTEXT_SET_PRIORITY,
	GS_SEED_ALLOCATION_CREATE,
	GS_SEED_ALLOCATION_DESTROY,
	GS_SEED_ALLOCATION_QUERY,
	GS_SEED_ALLOCATION_SET_PRIORITY,
	GS_SEED_ALLOCATION_SET_PREFERENCE,
	GS_SEED_ALLOCATION_READ,
	GS_SEED_ALLOCATION_WRITE,
	GS_SEED_SUBMIT_NULL,
	GS_SEED_SUBMIT_FILL,
	GS_SEED_SUBMIT_ALL_OPS,
	GS_SEED_SUBMIT_BATCH,
	GS_SEED_PACKET_WAIT,
	GS_SEED_SYNC_CREATE,
	GS_SEED_SYNC_DESTROY,
	GS_SEED_SYNC_SIGNAL,
	GS_SEED_SYNC_WAIT,
	GS_SEED_MAKE_RESIDENT,
	GS_SEED_EVICT,
	GS_SEED_TRANSFER,
	GS_SEED_HISTORY,
	GS_SEED_PACKET_EVENTS,
	GS_SEED_STATS,
	GS_SEED_TENANT_CREATE,
	GS_SEED_TENANT_DESTROY,
	GS_SEED_TENANT_LIST,
	GS_SEED_ALLOCATION_LIST,
	GS_SEED_MOVES,
	GS_SEED_HISTORY_BY_ALLOCATION,
	GS_SEED_HISTORY_BY_TIME,
	GS_SEED_EVENTS_WINDOW,
	GS_SEED_EXPLAIN,
	GS_SEED_USAGE,
	GS_SEED_CONTEXT_QUERY,
	GS_SEED_ADMIN_STATUS,
	GS_SEED_ADMIN_DRAIN_UNCONFIRMED, /* refused: it lacks confirm "drain" (the daemon lives on)
	                                  */
	GS_SEED_COUNT
};

/* A DMA buffer of the given commands, encoded; returns its length (0 if cap is too small). */
static inline size_t gs_fuzz_encode_cmds(const gs_isa_cmd *cmds, size_t n, uint8_t *out, size_t cap)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		size_t w = gs_isa_encode(&cmds[i], out + len, cap - len);
		if (w == 0)
			return 0;
		len += w;
	}
	return len;
}

/* Serializes the packed request into a new buffer; NULL on allocation failure. */
static inline uint8_t *gs_fuzz_pack(const Gpusched__V1__Request *req, size_t *len)
{
	size_t n = gpusched__v1__request__get_packed_size(req);
	uint8_t *out = malloc(n ? n : 1);
	if (!out)
		return NULL;
	*len = gpusched__v1__request__pack(req, out);
	return out;
}

/*
 * Builds seed `which` (GS_SEED_*) with envelope id `id`, naming the objects in h. Returns the
 * malloc'd serialized Request and its length, or NULL (unknown seed, out of memory).
 */
static inline uint8_t *gs_fuzz_seed(int which, const gs_fuzz_handles *h, uint64_t id, size_t *len)
{
	Gpusched__V1__Request rq = GPUSCHED__V1__REQUEST__INIT;
	rq.id = id;

	/* Every body the seeds use, on the stack; only the one the switch picks is linked. */
	Gpusched__V1__InfoRequest info = GPUSCHED__V1__INFO_REQUEST__INIT;
	Gpusched__V1__DeviceCreateRequest dc = GPUSCHED__V1__DEVICE_CREATE_REQUEST__INIT;
	Gpusched__V1__DeviceDestroyRequest dd = GPUSCHED__V1__DEVICE_DESTROY_REQUEST__INIT;
	Gpusched__V1__ContextInfo ci = GPUSCHED__V1__CONTEXT_INFO__INIT;
	Gpusched__V1__ContextCreateRequest cc = GPUSCHED__V1__CONTEXT_CREATE_REQUEST__INIT;
	Gpusched__V1__ContextDestroyRequest cd = GPUSCHED__V1__CONTEXT_DESTROY_REQUEST__INIT;
	Gpusched__V1__ContextSetPriorityRequest cp =
	        GPUSCHED__V1__CONTEXT_SET_PRIORITY_REQUEST__INIT;
	Gpusched__V1__ContextQueryRequest cq = GPUSCHED__V1__CONTEXT_QUERY_REQUEST__INIT;
	Gpusched__V1__AdminStatusRequest ast = GPUSCHED__V1__ADMIN_STATUS_REQUEST__INIT;
	Gpusched__V1__AdminDrainRequest adr = GPUSCHED__V1__ADMIN_DRAIN_REQUEST__INIT;
	Gpusched__V1__AllocationCreateRequest ac = GPUSCHED__V1__ALLOCATION_CREATE_REQUEST__INIT;
	Gpusched__V1__AllocationDestroyRequest ad = GPUSCHED__V1__ALLOCATION_DESTROY_REQUEST__INIT;
	Gpusched__V1__AllocationQueryRequest aq = GPUSCHED__V1__ALLOCATION_QUERY_REQUEST__INIT;
	Gpusched__V1__AllocationSetPriorityRequest ap =
	        GPUSCHED__V1__ALLOCATION_SET_PRIORITY_REQUEST__INIT;
	Gpusched__V1__AllocationSetPreferenceRequest af =
	        GPUSCHED__V1__ALLOCATION_SET_PREFERENCE_REQUEST__INIT;
	Gpusched__V1__AllocationReadRequest ar = GPUSCHED__V1__ALLOCATION_READ_REQUEST__INIT;
	Gpusched__V1__AllocationWriteRequest aw = GPUSCHED__V1__ALLOCATION_WRITE_REQUEST__INIT;
	Gpusched__V1__SubmitRequest sb[2] = {GPUSCHED__V1__SUBMIT_REQUEST__INIT,
	                                     GPUSCHED__V1__SUBMIT_REQUEST__INIT};
	Gpusched__V1__SubmitRequest *sbp[2] = {&sb[0], &sb[1]};
	Gpusched__V1__SubmitBatchRequest bt = GPUSCHED__V1__SUBMIT_BATCH_REQUEST__INIT;
	Gpusched__V1__AllocationListEntry ale[2] = {GPUSCHED__V1__ALLOCATION_LIST_ENTRY__INIT,
	                                            GPUSCHED__V1__ALLOCATION_LIST_ENTRY__INIT};
	Gpusched__V1__AllocationListEntry *alep[2] = {&ale[0], &ale[1]};
	Gpusched__V1__PatchLocation pl[5];
	Gpusched__V1__PatchLocation *plp[5];
	for (int i = 0; i < 5; i++) {
		gpusched__v1__patch_location__init(&pl[i]);
		plp[i] = &pl[i];
	}
	Gpusched__V1__PacketWaitRequest pw = GPUSCHED__V1__PACKET_WAIT_REQUEST__INIT;
	Gpusched__V1__SyncCreateRequest sc = GPUSCHED__V1__SYNC_CREATE_REQUEST__INIT;
	Gpusched__V1__SyncDestroyRequest sd = GPUSCHED__V1__SYNC_DESTROY_REQUEST__INIT;
	Gpusched__V1__SyncSignalRequest ss = GPUSCHED__V1__SYNC_SIGNAL_REQUEST__INIT;
	Gpusched__V1__SyncWaitRequest sw = GPUSCHED__V1__SYNC_WAIT_REQUEST__INIT;
	Gpusched__V1__MakeResidentRequest mr = GPUSCHED__V1__MAKE_RESIDENT_REQUEST__INIT;
	Gpusched__V1__EvictRequest ev = GPUSCHED__V1__EVICT_REQUEST__INIT;
	Gpusched__V1__TransferRequest tr = GPUSCHED__V1__TRANSFER_REQUEST__INIT;
	Gpusched__V1__HistoryRequest hi = GPUSCHED__V1__HISTORY_REQUEST__INIT;
	Gpusched__V1__PacketEventsRequest pe = GPUSCHED__V1__PACKET_EVENTS_REQUEST__INIT;
	Gpusched__V1__StatsRequest st = GPUSCHED__V1__STATS_REQUEST__INIT;
	Gpusched__V1__Tenant tn = GPUSCHED__V1__TENANT__INIT;
	Gpusched__V1__TenantCreateRequest tc = GPUSCHED__V1__TENANT_CREATE_REQUEST__INIT;
	Gpusched__V1__TenantDestroyRequest td = GPUSCHED__V1__TENANT_DESTROY_REQUEST__INIT;
	Gpusched__V1__TenantListRequest tl = GPUSCHED__V1__TENANT_LIST_REQUEST__INIT;
	Gpusched__V1__AllocationListRequest al = GPUSCHED__V1__ALLOCATION_LIST_REQUEST__INIT;
	Gpusched__V1__MovesRequest mv = GPUSCHED__V1__MOVES_REQUEST__INIT;
	Gpusched__V1__ExplainRequest ex = GPUSCHED__V1__EXPLAIN_REQUEST__INIT;
	Gpusched__V1__UsageRequest us = GPUSCHED__V1__USAGE_REQUEST__INIT;
	uint64_t allocs[2] = {h->allocation, h->allocation + 1};
	uint8_t dma[2][256];
	uint8_t bytes[16] = {0xde, 0xad, 0xbe, 0xef, 0,    1,    2,    3,
	                     4,    5,    6,    7,    0x80, 0xff, 0x7f, 0x10};

	switch (which) {
	case GS_SEED_INFO:
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_INFO;
		rq.info = &info;
		break;
	case GS_SEED_INFO_TOKEN:
		rq.token = "not-a-token";
		rq.adapter = 1;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_INFO;
		rq.info = &info;
		break;
	case GS_SEED_DEVICE_CREATE:
		dc.name = "fuzz-device";
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE;
		rq.device_create = &dc;
		break;
	case GS_SEED_DEVICE_DESTROY:
		dd.device = h->device;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_DEVICE_DESTROY;
		rq.device_destroy = &dd;
		break;
	case GS_SEED_CONTEXT_CREATE:
		ci.dma_buffer_size = 65536;
		ci.allocation_list_size = 64;
		ci.patch_location_list_size = 64;
		ci.paging_companion_node_id = 2;
		cc.device = h->device;
		cc.node = 0;
		cc.info = &ci;
		cc.priority_class = 2;
		cc.priority = -3; /* a negative int32: the 10-byte varint */
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE;
		rq.context_create = &cc;
		break;
	case GS_SEED_CONTEXT_CREATE_GDI:
		ci.dma_buffer_size = 4096;
		ci.dma_buffer_segment_set = 1u << 2;
		ci.dma_buffer_private_data_size = 64;
		ci.allocation_list_size = GS_GDI_ALLOCATION_LIST_SIZE;
		ci.patch_location_list_size = 16;
		ci.caps = GS_CTXCAPS_NO_PATCHING_REQUIRED;
		ci.paging_companion_node_id = 2;
		cc.device = h->device;
		cc.node = 1;
		cc.flags = GS_CTX_GDI | GS_CTX_VIRTUAL_ADDRESSING;
		cc.info = &ci;
		cc.priority_class = 4;
		cc.priority = 7;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE;
		rq.context_create = &cc;
		break;
	case GS_SEED_CONTEXT_DESTROY:
		cd.context = h->context;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_CONTEXT_DESTROY;
		rq.context_destroy = &cd;
		break;
	case GS_SEED_CONTEXT_SET_PRIORITY:
		cp.context = h->context;
		cp.priority_class = 3;
		cp.priority = -7;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY;
		rq.context_set_priority = &cp;
		break;
	case GS_SEED_ALLOCATION_CREATE: {
		gs_segpref sp = {.segment = {1, 2}, .direction = {0, 1}};
		ac.device = h->device;
		ac.size = 4096;
		ac.supported_segment_set = (1u << 1) | (1u << 2);
		ac.segment_preference = gs_segpref_encode(&sp);
		ac.priority = GS_ALLOC_PRIORITY_HIGH;
		ac.flags = GS_ALLOC_TILED;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_CREATE;
		rq.allocation_create = &ac;
		break;
	}
	case GS_SEED_ALLOCATION_DESTROY:
		ad.allocation = h->allocation;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_DESTROY;
		rq.allocation_destroy = &ad;
		break;
	case GS_SEED_ALLOCATION_QUERY:
		aq.allocation = h->allocation;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_QUERY;
		rq.allocation_query = &aq;
		break;
	case GS_SEED_ALLOCATION_SET_PRIORITY:
		ap.allocation = h->allocation;
		ap.priority = GS_ALLOC_PRIORITY_LOW;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PRIORITY;
		rq.allocation_set_priority = &ap;
		break;
	case GS_SEED_ALLOCATION_SET_PREFERENCE: {
		gs_segpref sp = {.segment = {2}, .direction = {1}};
		af.allocation = h->allocation;
		af.segment_preference = gs_segpref_encode(&sp);
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PREFERENCE;
		rq.allocation_set_preference = &af;
		break;
	}
	case GS_SEED_ALLOCATION_READ:
		ar.allocation = h->allocation;
		ar.offset = 8;
		ar.size = 64;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ;
		rq.allocation_read = &ar;
		break;
	case GS_SEED_ALLOCATION_WRITE:
		aw.allocation = h->allocation;
		aw.offset = 16;
		aw.data.data = bytes;
		aw.data.len = sizeof(bytes);
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE;
		rq.allocation_write = &aw;
		break;
	case GS_SEED_SUBMIT_NULL: {
		gs_isa_cmd nop = {.op = GS_OP_NOP};
		sb[0].context = h->context;
		sb[0].dma_buffer.data = dma[0];
		sb[0].dma_buffer.len = gs_fuzz_encode_cmds(&nop, 1, dma[0], sizeof(dma[0]));
		sb[0].submit_flags = GS_SUBMIT_NULL_RENDERING;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SUBMIT;
		rq.submit = &sb[0];
		break;
	}
	case GS_SEED_SUBMIT_FILL: {
		gs_isa_cmd fill = {.op = GS_OP_FILL, .size = 256, .pattern = 0xa5a5f00du};
		sb[0].context = h->context;
		sb[0].dma_buffer.data = dma[0];
		sb[0].dma_buffer.len = gs_fuzz_encode_cmds(&fill, 1, dma[0], sizeof(dma[0]));
		ale[0].allocation = h->allocation;
		ale[0].write = true;
		sb[0].n_allocations = 1;
		sb[0].allocations = alep;
		pl[0].patch_offset = GS_ISA_DST_FIELD;
		pl[0].allocation_offset = 128;
		sb[0].n_patches = 1;
		sb[0].patches = plp;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SUBMIT;
		rq.submit = &sb[0];
		break;
	}
	case GS_SEED_SUBMIT_ALL_OPS: {
		const gs_isa_cmd cmds[] = {
		        {.op = GS_OP_NOP},
		        {.op = GS_OP_FILL, .size = 64, .pattern = 0x01020304u},
		        {.op = GS_OP_COPY, .size = 32},
		        {.op = GS_OP_CHECKSUM, .size = 64},
		        {.op = GS_OP_SPIN, .flags = GS_SPIN_NONPREEMPTIBLE, .micros = 5},
		        {.op = GS_OP_SIGNAL, .sync = h->sync, .value = 1},
		};
		sb[0].context = h->context;
		sb[0].dma_buffer.data = dma[0];
		sb[0].dma_buffer.len = gs_fuzz_encode_cmds(cmds, sizeof(cmds) / sizeof(cmds[0]),
		                                           dma[0], sizeof(dma[0]));
		ale[0].allocation = h->allocation;
		ale[0].write = true;
		ale[1].allocation = h->allocation;
		sb[0].n_allocations = 2;
		sb[0].allocations = alep;
		/* The address fields of FILL (at 8), COPY (at 40) and CHECKSUM (at 72), each
		 * pointing at its own 512-byte window of the allocation. */
		const uint32_t at[5] = {8 + GS_ISA_DST_FIELD, 40 + GS_ISA_DST_FIELD,
		                        40 + GS_ISA_SRC_FIELD, 72 + GS_ISA_DST_FIELD,
		                        72 + GS_ISA_SRC_FIELD};
		for (uint32_t i = 0; i < 5; i++) {
			pl[i].allocation_index = i == 2 || i == 4 ? 1 : 0;
			pl[i].slot_id = i;
			pl[i].patch_offset = at[i];
			pl[i].allocation_offset = i * 512;
		}
		sb[0].n_patches = 5;
		sb[0].patches = plp;
		sb[0].submit_flags = GS_SUBMIT_PRESENT;
		sb[0].private_data.data = bytes;
		sb[0].private_data.len = 4;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SUBMIT;
		rq.submit = &sb[0];
		break;
	}
	case GS_SEED_SUBMIT_BATCH: {
		const gs_isa_cmd two[] = {{.op = GS_OP_NOP}, {.op = GS_OP_SPIN, .micros = 1}};
		for (int i = 0; i < 2; i++) {
			sb[i].context = h->context;
			sb[i].dma_buffer.data = dma[i];
			sb[i].dma_buffer.len =
			        gs_fuzz_encode_cmds(two, (size_t)i + 1, dma[i], sizeof(dma[i]));
			sb[i].submit_flags = i ? GS_SUBMIT_FLIP : GS_SUBMIT_NULL_RENDERING;
		}
		bt.n_packets = 2;
		bt.packets = sbp;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH;
		rq.submit_batch = &bt;
		break;
	}
	case GS_SEED_PACKET_WAIT:
		pw.packet = h->packet;
		pw.timeout_ms = 10;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT;
		rq.packet_wait = &pw;
		break;
	case GS_SEED_SYNC_CREATE:
		sc.device = h->device;
		sc.initial_value = 3;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE;
		rq.sync_create = &sc;
		break;
	case GS_SEED_SYNC_DESTROY:
		sd.sync = h->sync;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SYNC_DESTROY;
		rq.sync_destroy = &sd;
		break;
	case GS_SEED_SYNC_SIGNAL:
		ss.sync = h->sync;
		ss.value = 2;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SYNC_SIGNAL;
		rq.sync_signal = &ss;
		break;
	case GS_SEED_SYNC_WAIT:
		sw.sync = h->sync;
		sw.value = 1;
		sw.timeout_ms = 10;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT;
		rq.sync_wait = &sw;
		break;
	case GS_SEED_MAKE_RESIDENT:
		mr.device = h->device;
		mr.n_allocations = 2;
		mr.allocations = allocs;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_MAKE_RESIDENT;
		rq.make_resident = &mr;
		break;
	case GS_SEED_EVICT:
		ev.device = h->device;
		ev.n_allocations = 1;
		ev.allocations = allocs;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_EVICT;
		rq.evict = &ev;
		break;
	case GS_SEED_TRANSFER:
		tr.allocation = h->allocation;
		tr.segment = 1;
		tr.transfer_flags = GS_TRANSFER_SWIZZLE;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_TRANSFER;
		rq.transfer = &tr;
		break;
	case GS_SEED_HISTORY:
		hi.context = h->context;
		hi.state = GPUSCHED__V1__PACKET_STATE__PACKET_STATE_COMPLETED;
		hi.limit = 5;
		hi.before_packet = h->packet + 10;
		hi.node = 1;
		hi.device = h->device;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_HISTORY;
		rq.history = &hi;
		break;
	case GS_SEED_PACKET_EVENTS:
		pe.packet = h->packet;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_PACKET_EVENTS;
		rq.packet_events = &pe;
		break;
	case GS_SEED_STATS:
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_STATS;
		rq.stats = &st;
		break;
	case GS_SEED_TENANT_CREATE:
		tn.name = "fuzz-tenant";
		tn.kind = GPUSCHED__V1__TENANT_KIND__TENANT_KIND_VM;
		tn.share = 3;
		tn.priority_ceiling = 2;
		tn.memory_quota = 1u << 20;
		tn.context_limit = 4;
		tc.tenant = &tn;
		tc.token = "fuzz-token";
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_TENANT_CREATE;
		rq.tenant_create = &tc;
		break;
	case GS_SEED_TENANT_DESTROY:
		td.name = "fuzz-tenant";
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_TENANT_DESTROY;
		rq.tenant_destroy = &td;
		break;
	case GS_SEED_TENANT_LIST:
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_TENANT_LIST;
		rq.tenant_list = &tl;
		break;
	case GS_SEED_ALLOCATION_LIST:
		al.device = h->device;
		al.resident_only = true;
		al.limit = 10;
		al.after = h->allocation - 1;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_LIST;
		rq.allocation_list = &al;
		break;
	case GS_SEED_MOVES:
		mv.allocation = h->allocation;
		mv.device = h->device;
		mv.limit = 5;
		mv.before_seq = 1000;
		mv.packet = h->packet;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_MOVES;
		rq.moves = &mv;
		break;
	case GS_SEED_HISTORY_BY_ALLOCATION:
		hi.allocation = h->allocation;
		hi.paging = true;
		hi.limit = 5;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_HISTORY;
		rq.history = &hi;
		break;
	case GS_SEED_HISTORY_BY_TIME:
		hi.since_ns = 1;
		hi.until_ns = UINT64_MAX;
		hi.flags_mask = 0x2;
		hi.fence = 1;
		hi.oldest_first = true;
		hi.after_packet = h->packet;
		hi.limit = 7;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_HISTORY;
		rq.history = &hi;
		break;
	case GS_SEED_EVENTS_WINDOW:
		pe.since_ns = 1;
		pe.until_ns = UINT64_MAX;
		pe.after_seq = 1;
		pe.limit = 3;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_PACKET_EVENTS;
		rq.packet_events = &pe;
		break;
	case GS_SEED_EXPLAIN:
		ex.packet = h->packet;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_EXPLAIN;
		rq.explain = &ex;
		break;
	case GS_SEED_USAGE:
		us.by = GPUSCHED__V1__USAGE_KEY__USAGE_BY_NODE;
		us.since_ns = 1;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_USAGE;
		rq.usage = &us;
		break;
	case GS_SEED_CONTEXT_QUERY:
		cq.context = h->context;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_CONTEXT_QUERY;
		rq.context_query = &cq;
		break;
	case GS_SEED_ADMIN_STATUS:
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ADMIN_STATUS;
		rq.admin_status = &ast;
		break;
	case GS_SEED_ADMIN_DRAIN_UNCONFIRMED:
		adr.timeout_ms = 1;
		rq.body_case = GPUSCHED__V1__REQUEST__BODY_ADMIN_DRAIN;
		rq.admin_drain = &adr;
		break;
	default:
		return NULL;
	}
	return gs_fuzz_pack(&rq, len);
}

/* ---- protobuf wire-format scanning ---- */

/* Reads a varint of at most 10 bytes; returns its length, or 0 if it is cut or too long. */
static inline size_t gs_pb_varint(const uint8_t *p, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	for (size_t i = 0; i < n && i < 10; i++) {
		x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = x;
			return i + 1;
		}
	}
	return 0;
}

static inline size_t gs_pb_put_varint(uint8_t *out, uint64_t v)
{
	size_t n = 0;
	do {
		uint8_t b = (uint8_t)(v & 0x7f);
		v >>= 7;
		out[n++] = (uint8_t)(b | (v ? 0x80 : 0));
	} while (v);
	return n;
}

/* Where a mutation can aim: a length prefix, a varint value, or a whole top-level field. */
typedef enum { GS_PB_LEN, GS_PB_VARINT, GS_PB_FIELD } gs_pb_kind;

typedef struct gs_pb_span {
	gs_pb_kind kind;
	size_t at;  /* first byte (of the varint, or of the field's tag) */
	size_t len; /* bytes of the varint, or of the whole field */
	uint64_t value;
	int parent; /* index of the length prefix of the enclosing message, or -1 */
} gs_pb_span;

#define GS_PB_MAX_SPANS 128

/* True if [p, p + n) parses as a sequence of fields. */
static inline bool gs_pb_wellformed(const uint8_t *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint64_t tag, v;
		size_t k = gs_pb_varint(p + i, n - i, &tag);
		if (!k || (tag >> 3) == 0)
			return false;
		i += k;
		switch (tag & 7) {
		case 0:
			k = gs_pb_varint(p + i, n - i, &v);
			if (!k)
				return false;
			i += k;
			break;
		case 1:
			if (n - i < 8)
				return false;
			i += 8;
			break;
		case 2:
			k = gs_pb_varint(p + i, n - i, &v);
			if (!k || v > n - i - k)
				return false;
			i += k + (size_t)v;
			break;
		case 5:
			if (n - i < 4)
				return false;
			i += 4;
			break;
		default:
			return false;
		}
	}
	return true;
}

/* Appends a span; returns its index, or -1 when the table is full. */
static inline int gs_pb_add(gs_pb_span *out, size_t *nout, gs_pb_kind kind, size_t at, size_t len,
                            uint64_t value, int parent)
{
	if (*nout >= GS_PB_MAX_SPANS)
		return -1;
	out[*nout] = (gs_pb_span){kind, at, len, value, parent};
	return (int)(*nout)++;
}

/* Records the mutation targets of the message at [base, base + n) of buf, recursing into
 * embedded messages (length-delimited fields whose bytes parse as fields); `parent` is the span
 * of the message's own length prefix (-1 for the outermost). */
static inline void gs_pb_scan(const uint8_t *buf, size_t base, size_t n, int depth, int parent,
                              gs_pb_span *out, size_t *nout)
{
	const uint8_t *p = buf + base;
	size_t i = 0;
	while (i < n) {
		size_t field_at = i;
		uint64_t tag, v;
		size_t k = gs_pb_varint(p + i, n - i, &tag);
		if (!k)
			return;
		i += k;
		switch (tag & 7) {
		case 0:
			k = gs_pb_varint(p + i, n - i, &v);
			if (!k)
				return;
			gs_pb_add(out, nout, GS_PB_VARINT, base + i, k, v, parent);
			i += k;
			break;
		case 1:
			if (n - i < 8)
				return;
			i += 8;
			break;
		case 2: {
			k = gs_pb_varint(p + i, n - i, &v);
			if (!k || v > n - i - k)
				return;
			int me = gs_pb_add(out, nout, GS_PB_LEN, base + i, k, v, parent);
			if (me >= 0 && depth < 4 && v > 0 && gs_pb_wellformed(p + i + k, (size_t)v))
				gs_pb_scan(buf, base + i + k, (size_t)v, depth + 1, me, out, nout);
			i += k + (size_t)v;
			break;
		}
		case 5:
			if (n - i < 4)
				return;
			i += 4;
			break;
		default:
			return;
		}
		if (depth == 0)
			gs_pb_add(out, nout, GS_PB_FIELD, base + field_at, i - field_at, tag, -1);
	}
}

/* Replaces buf[at, at + old) with rep[0, n); returns the new length, or len if it would not
 * fit in cap. */
static inline size_t gs_fuzz_replace(uint8_t *buf, size_t len, size_t cap, size_t at, size_t old,
                                     const uint8_t *rep, size_t n)
{
	if (len - old + n > cap)
		return len;
	memmove(buf + at + n, buf + at + old, len - at - old);
	if (n)
		memcpy(buf + at, rep, n);
	return len - old + n;
}

/* A varint value worth trying in place of v. */
static inline uint64_t gs_fuzz_interesting(gs_rng *r, uint64_t v)
{
	switch (gs_rng_below(r, 12)) {
	case 0:
		return 0;
	case 1:
		return 1;
	case 2:
		return v + 1;
	case 3:
		return v ? v - 1 : 0;
	case 4:
		return v * 2 + 1;
	case 5:
		return UINT32_MAX;
	case 6:
		return (uint64_t)INT32_MAX + 1;
	case 7:
		return UINT64_MAX;
	case 8:
		return UINT64_C(1) << gs_rng_below(r, 64);
	case 9:
		return v ^ (UINT64_C(1) << gs_rng_below(r, 64));
	case 10:
		return gs_rng_below(r, 300);
	default:
		return gs_rng_next(r);
	}
}

/*
 * Applies one random mutation to buf (len bytes, room for cap) and returns the new length.
 * `other` (may be NULL) is a second input for splicing.
 */
static inline size_t gs_fuzz_mutate(gs_rng *r, uint8_t *buf, size_t len, size_t cap,
                                    const uint8_t *other, size_t olen)
{
	static const uint8_t special[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x10, 0x12, 0x22};
	uint8_t tmp[16];
	gs_pb_span spans[GS_PB_MAX_SPANS];
	size_t nspans = 0;

	/* 6/16 byte-level, 10/16 structure-aware (which mostly keeps the bytes decodable, so the
	 * input reaches validation). */
	switch (gs_rng_below(r, 16)) {
	case 0: /* flip 1..4 bits */
		if (!len)
			break;
		for (uint64_t n = 1 + gs_rng_below(r, 4); n > 0; n--) {
			size_t at = gs_rng_below(r, len);
			buf[at] ^= (uint8_t)(1u << gs_rng_below(r, 8));
		}
		break;
	case 1: /* an interesting byte */
		if (len)
			buf[gs_rng_below(r, len)] = special[gs_rng_below(r, sizeof(special))];
		break;
	case 2: /* truncate */
		len = gs_rng_below(r, len + 1);
		break;
	case 3: { /* insert 1..16 random bytes */
		size_t n = 1 + gs_rng_below(r, sizeof(tmp));
		gs_rng_bytes(r, tmp, n);
		len = gs_fuzz_replace(buf, len, cap, gs_rng_below(r, len + 1), 0, tmp, n);
		break;
	}
	case 4: { /* delete a range */
		if (!len)
			break;
		size_t at = gs_rng_below(r, len);
		size_t n = 1 + gs_rng_below(r, len - at);
		len = gs_fuzz_replace(buf, len, cap, at, n, NULL, 0);
		break;
	}
	case 5: { /* splice: our head, the other input's tail */
		if (!other || !olen)
			break;
		size_t keep = gs_rng_below(r, len + 1);
		size_t from = gs_rng_below(r, olen);
		size_t n = olen - from;
		if (keep + n > cap)
			n = cap - keep;
		memcpy(buf + keep, other + from, n);
		len = keep + n;
		break;
	}
	default: /* structure-aware: aim at a length prefix, a varint or a whole field */
		gs_pb_scan(buf, 0, len, 0, -1, spans, &nspans);
		if (!nspans) {
			if (len)
				buf[gs_rng_below(r, len)] ^= 0xff;
			break;
		}
		const gs_pb_span *s = &spans[gs_rng_below(r, nspans)];
		if (s->kind == GS_PB_FIELD) {
			/* Drop the field, end the message after it, or duplicate it at the end (a
			 * repeated oneof member, a second value for a scalar). */
			uint64_t how = gs_rng_below(r, 3);
			if (how == 0) {
				len = gs_fuzz_replace(buf, len, cap, s->at, s->len, NULL, 0);
			} else if (how == 1) {
				len = s->at + s->len;
			} else if (len + s->len <= cap) {
				memmove(buf + len, buf + s->at, s->len);
				len += s->len;
			}
			break;
		}
		/* A new value; for a length prefix, half the time the same one re-encoded (a wrong
		 * length mostly just ends decoding, which byte-level mutations cover already). */
		bool same = s->kind == GS_PB_LEN && gs_rng_below(r, 2);
		uint64_t v = same ? s->value : gs_fuzz_interesting(r, s->value);
		size_t n = gs_pb_put_varint(tmp, v);
		if ((same || gs_rng_below(r, 8) == 0) && n < 10) {
			/* An overlong but legal encoding of the value. */
			tmp[n - 1] |= 0x80;
			tmp[n++] = 0x00;
		}
		size_t before = len;
		len = gs_fuzz_replace(buf, len, cap, s->at, s->len, tmp, n);
		/* Keep the enclosing messages' length prefixes right, innermost first: each lies
		 * before everything changed so far, so its position still holds. */
		int64_t delta = (int64_t)len - (int64_t)before;
		for (int p = s->parent; p >= 0 && delta != 0; p = spans[p].parent) {
			const gs_pb_span *ps = &spans[p];
			size_t pn = gs_pb_put_varint(tmp, (uint64_t)((int64_t)ps->value + delta));
			before = len;
			len = gs_fuzz_replace(buf, len, cap, ps->at, ps->len, tmp, pn);
			if (len == before && pn != ps->len)
				break; /* no room: leave it inconsistent */
			delta += (int64_t)pn - (int64_t)ps->len;
		}
		break;
	}
	return len;
}

/* How many mutations to stack: mostly one, so most inputs stay close enough to a valid request
 * to reach validation, sometimes up to four. */
static inline unsigned gs_fuzz_depth(gs_rng *r)
{
	return gs_rng_below(r, 3) ? 1u : 2u + (unsigned)gs_rng_below(r, 3);
}

#endif
