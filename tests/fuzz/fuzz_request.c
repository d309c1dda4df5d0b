/*
 * Fuzz target: request decoding and validation, without a network.
 *
 * Each input is treated the way the daemon treats a received message: it is decoded as a
 * gpusched.v1.Request and, when it decodes, every pure validation rule the daemon would apply
 * runs over it (the DMA-buffer instruction set, submit flags, DXGK_CONTEXTINFO rules on a fixed
 * adapter, allocation rules, D3DDDI_SEGMENTPREFERENCE). Each rule's answer is checked against
 * an independent statement of the rule, and the request must re-encode to a stable byte string.
 * The raw input is also validated as a DMA buffer. Any disagreement calls abort().
 *
 * Built with replay_main.c (deterministic inputs, the default) or with libFuzzer
 * (-DGS_LIBFUZZER=ON, clang).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.pb-c.h"
#include "isa.h"
#include "rpc/rules.h"
#include "wddm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ST(x) GPUSCHED__V1__STATUS__STATUS_##x

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_request: check failed: %s\n", what);
	abort();
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail(#cond);                                                               \
	} while (0)

/* The daemon's default adapter: nodes 3D, compute, copy; segment 1 memory, 2 aperture. */
static const gsd_rules_adapter *adapter(void)
{
	static gsd_rules_adapter a;
	static bool ready;
	if (!ready) {
		a.nnodes = 3;
		for (int i = 0; i < 32; i++)
			a.segment_kind[i] = -1;
		a.segment_kind[1] = GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY;
		a.segment_kind[2] = GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE;
		a.max_dma_buffer = 1u << 20;
		a.max_allocation_list = 4096;
		a.max_patch_list = 65536;
		ready = true;
	}
	return &a;
}

/* A status the contract defines (a rule must never invent one). */
static bool known_status(int st)
{
	return protobuf_c_enum_descriptor_get_value(&gpusched__v1__status__descriptor, st) != NULL;
}

/* A refusal names a known status and explains itself. */
static void check_verdict(int st, const char *msg)
{
	CHECK(known_status(st));
	if (st != ST(OK))
		CHECK(msg[0] != '\0');
}

/* ---- the DMA-buffer instruction set ---- */

/*
 * gs_isa_validate and a gs_isa_decode walk must agree on the command count or on the first
 * error and its offset; every decoded command re-encodes to exactly the bytes it came from
 * (decoding is strict, so nothing is lost).
 */
static void check_isa(const uint8_t *buf, size_t len)
{
	size_t ncmds = 0, err_at = 0;
	gs_isa_err verdict = gs_isa_validate(buf, len, &ncmds, &err_at);
	CHECK(verdict == GS_ISA_OK || verdict < 0);
	CHECK(gs_isa_strerror(verdict) != NULL);

	size_t pos = 0, n = 0;
	gs_isa_err e;
	for (;;) {
		size_t at = pos;
		gs_isa_cmd cmd;
		e = gs_isa_decode(buf, len, &pos, &cmd);
		if (e != GS_ISA_OK) {
			CHECK(pos == at);
			if (e != GS_ISA_END)
				CHECK(verdict == e && err_at == at);
			break;
		}
		size_t size = gs_isa_cmd_len(&cmd);
		CHECK(size >= GS_ISA_HEADER_SIZE && pos == at + size && pos <= len);
		CHECK(strcmp(gs_isa_op_name(cmd.op), "?") != 0);
		uint8_t again[GS_ISA_DISPATCH_MAX_SIZE];
		CHECK(size <= sizeof(again));
		CHECK(gs_isa_encode(&cmd, again, sizeof(again)) == size);
		CHECK(memcmp(again, buf + at, size) == 0);
		/* The address helpers split and rebuild every 64-bit address. */
		CHECK(gs_addr_make(gs_addr_segment(cmd.dst), gs_addr_offset(cmd.dst)) == cmd.dst);
		CHECK(gs_addr_make(gs_addr_segment(cmd.src), gs_addr_offset(cmd.src)) == cmd.src);
		n++;
		CHECK(n <= len / GS_ISA_HEADER_SIZE);
	}
	if (e == GS_ISA_END)
		CHECK(verdict == GS_ISA_OK && ncmds == n && pos == len);
}

/* ---- submissions ---- */

static void check_submit_flags(uint32_t flags)
{
	char msg[256] = "";
	int st = gsd_rules_submit_flags(flags, msg, sizeof(msg));
	check_verdict(st, msg);
	bool ok = !(flags & ~GS_SUBMIT_VALID_MASK) && !(flags & GS_SUBMIT_CLIENT_REFUSED);
	CHECK((st == ST(OK)) == ok);
	if (flags & ~GS_SUBMIT_VALID_MASK)
		CHECK(st == ST(RESERVED_BITS));
	else if (!ok)
		CHECK(st == ST(FLAGS_NOT_ALLOWED));
	/* Every value prints as names (and hex for unknown bits) that parse back to itself. */
	char text[256];
	CHECK(gs_flags_format(gs_submit_flag_names, flags, text, sizeof(text)) < sizeof(text));
	uint32_t back = ~flags;
	CHECK(gs_flags_parse(gs_submit_flag_names, text, &back, NULL) == 0);
	CHECK(back == flags);
	if (ok)
		CHECK((gs_patch_flags_for_submit(flags) & ~GS_PATCH_VALID_MASK) == 0);
}

static void check_submit(const Gpusched__V1__SubmitRequest *s)
{
	if (!s)
		return;
	check_submit_flags(s->submit_flags);
	CHECK(s->dma_buffer.len == 0 || s->dma_buffer.data != NULL);
	check_isa(s->dma_buffer.data, s->dma_buffer.len);
	for (size_t i = 0; i < s->n_allocations; i++)
		CHECK(s->allocations[i] != NULL);
	for (size_t i = 0; i < s->n_patches; i++)
		CHECK(s->patches[i] != NULL);
}

/* ---- contexts ---- */

static void check_context_create(const Gpusched__V1__ContextCreateRequest *q)
{
	if (!q || !q->info)
		return; /* the daemon refuses a missing info before any rule */
	const gsd_rules_adapter *a = adapter();
	gsd_rules_context rc;
	gsd_rules_context_of(q, &rc);
	char msg[256] = "";
	int hi = gsd_rules_context_create(a, &rc, GS_PRIORITY_CLASS_MAX, msg, sizeof(msg));
	check_verdict(hi, msg);
	msg[0] = '\0';
	int lo = gsd_rules_context_create(a, &rc, 2, msg, sizeof(msg));
	check_verdict(lo, msg);
	/* A lower ceiling can only add the ceiling's own refusal. */
	CHECK(lo == hi || (hi == ST(OK) && lo == ST(PERMISSION_DENIED)));
	if (hi != ST(OK))
		return;
	/* Accepted: every rule of the contract holds. */
	CHECK(!(rc.flags & ~GS_CTX_VALID_MASK) && !(rc.flags & GS_CTX_SYSTEM));
	CHECK(rc.info.reserved == 0);
	CHECK(rc.node < a->nnodes && rc.info.paging_companion_node_id < a->nnodes);
	CHECK(!(rc.info.caps & ~GS_CTXCAPS_VALID_MASK));
	for (uint32_t id = 0; id < 32; id++)
		if (rc.info.dma_buffer_segment_set & (1u << id))
			CHECK(id > 0 && a->segment_kind[id] ==
			                        GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE);
	if (rc.flags & GS_CTX_GDI)
		CHECK(rc.info.allocation_list_size == GS_GDI_ALLOCATION_LIST_SIZE);
	CHECK(rc.info.dma_buffer_size >= 1 && rc.info.dma_buffer_size <= a->max_dma_buffer);
	CHECK(rc.info.allocation_list_size <= a->max_allocation_list);
	CHECK(rc.info.patch_location_list_size <= a->max_patch_list);
	CHECK(rc.info.dma_buffer_private_data_size <= GSD_MAX_PRIVATE_DATA);
	CHECK(rc.priority_class <= GS_PRIORITY_CLASS_MAX);
	CHECK(rc.priority >= -7 && rc.priority <= 7);
	CHECK(gs_priority_class_name(rc.priority_class) != NULL);
}

/* ---- allocations ---- */

/* D3DDDI_SEGMENTPREFERENCE: decode/encode round trip and the validator against a restatement
 * of the rule. */
static void check_segpref(uint32_t value, uint32_t set)
{
	gs_segpref p;
	gs_segpref_decode(value, &p);
	CHECK(gs_segpref_encode(&p) == (value & ~GS_SEGPREF_RESERVED_MASK));
	gs_segpref_check got = gs_segpref_validate(value, set);
	gs_segpref_check want = GS_SEGPREF_OK;
	if (value & GS_SEGPREF_RESERVED_MASK) {
		want = GS_SEGPREF_RESERVED;
	} else {
		bool ended = false;
		for (int k = 0; k < GS_SEGPREF_SLOTS && want == GS_SEGPREF_OK; k++) {
			CHECK(p.segment[k] <= GS_SEGMENT_ID_MAX && p.direction[k] <= 1);
			if (ended || p.segment[k] == 0) {
				if (ended ? p.segment[k] || p.direction[k] : p.direction[k])
					want = GS_SEGPREF_AFTER_END;
				ended = true;
			} else if (!(set & (1u << p.segment[k]))) {
				want = GS_SEGPREF_UNSUPPORTED;
			}
		}
	}
	CHECK(got == want);
}

static void check_allocation(uint64_t size, uint32_t set, uint32_t pref, uint32_t priority,
                             uint32_t flags)
{
	const gsd_rules_adapter *a = adapter();
	char msg[256] = "";
	int st = gsd_rules_allocation(a, size, set, pref, priority, flags, msg, sizeof(msg));
	check_verdict(st, msg);
	uint32_t eff = gsd_rules_effective_set(a, set);
	CHECK(set ? eff == set : eff == ((1u << 1) | (1u << 2)));
	check_segpref(pref, eff);
	check_segpref(pref, set);
	if (st != ST(OK))
		return;
	CHECK(size > 0 && !(flags & ~GS_ALLOC_VALID_MASK));
	CHECK(!(set & ~((1u << 1) | (1u << 2))));
	CHECK(gs_segpref_validate(pref, eff) == GS_SEGPREF_OK);
}

/* ---- the envelope ---- */

/*
 * True if the message, or one embedded in it, kept an unknown field numbered 0. protobuf-c
 * (1.4.1) rejects the one-byte tag 0x00 but accepts an overlong tag that decodes to field 0
 * (80 80 00) and keeps it as an unknown field, which pack() then writes as 0x00, bytes its own
 * unpack() refuses. The daemon never re-encodes a request, so this is tolerated below.
 */
static bool has_unknown_field0(const ProtobufCMessage *m)
{
	for (unsigned i = 0; i < m->n_unknown_fields; i++)
		if (m->unknown_fields[i].tag == 0)
			return true;
	const ProtobufCMessageDescriptor *d = m->descriptor;
	const char *base = (const char *)m;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			ProtobufCMessage *const *arr =
			        *(ProtobufCMessage *const *const *)(base + f->offset);
			for (size_t j = 0; j < n; j++)
				if (arr[j] && has_unknown_field0(arr[j]))
					return true;
			continue;
		}
		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)(base + f->quantifier_offset) != f->id)
			continue;
		const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
		if (sub && has_unknown_field0(sub))
			return true;
	}
	return false;
}

/* Packing is deterministic and a packed request decodes to one that packs the same. */
static void check_round_trip(const Gpusched__V1__Request *req)
{
	size_t n1 = gpusched__v1__request__get_packed_size(req);
	uint8_t *b1 = malloc(n1 ? n1 : 1);
	CHECK(b1 != NULL);
	CHECK(gpusched__v1__request__pack(req, b1) == n1);
	Gpusched__V1__Request *again = gpusched__v1__request__unpack(NULL, n1, b1);
	if (!again && has_unknown_field0(&req->base)) {
		free(b1);
		return;
	}
	CHECK(again != NULL);
	CHECK(again->id == req->id && again->adapter == req->adapter);
	CHECK(again->body_case == req->body_case);
	CHECK(strcmp(again->token, req->token) == 0);
	size_t n2 = gpusched__v1__request__get_packed_size(again);
	CHECK(n2 == n1);
	uint8_t *b2 = malloc(n2 ? n2 : 1);
	CHECK(b2 != NULL);
	CHECK(gpusched__v1__request__pack(again, b2) == n2);
	CHECK(memcmp(b1, b2, n1) == 0);
	gpusched__v1__request__free_unpacked(again, NULL);
	free(b2);
	free(b1);
}

static void check_request(const Gpusched__V1__Request *req)
{
	CHECK(req->token != NULL);
	switch (req->body_case) {
	case GPUSCHED__V1__REQUEST__BODY_SUBMIT:
		check_submit(req->submit);
		break;
	case GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH:
		if (!req->submit_batch)
			break;
		for (size_t i = 0; i < req->submit_batch->n_packets; i++)
			check_submit(req->submit_batch->packets[i]);
		break;
	case GPUSCHED__V1__REQUEST__BODY_CONTEXT_CREATE:
		check_context_create(req->context_create);
		break;
	case GPUSCHED__V1__REQUEST__BODY_ALLOCATION_CREATE: {
		const Gpusched__V1__AllocationCreateRequest *q = req->allocation_create;
		if (q)
			check_allocation(q->size, q->supported_segment_set, q->segment_preference,
			                 q->priority, q->flags);
		break;
	}
	case GPUSCHED__V1__REQUEST__BODY_ALLOCATION_SET_PREFERENCE:
		/* The daemon re-runs the allocation rules with the allocation's own values; an
		 * allocation that exists passed them, so only the preference is new here. */
		if (req->allocation_set_preference)
			check_allocation(4096, 0,
			                 req->allocation_set_preference->segment_preference, 0, 0);
		break;
	case GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE:
		/* Arbitrary client bytes: the ISA decoder must survive them too. */
		if (req->allocation_write)
			check_isa(req->allocation_write->data.data,
			          req->allocation_write->data.len);
		break;
	case GPUSCHED__V1__REQUEST__BODY_TRANSFER: {
		const Gpusched__V1__TransferRequest *q = req->transfer;
		char text[128];
		if (q)
			CHECK(gs_flags_format(gs_transfer_flag_names, q->transfer_flags, text,
			                      sizeof(text)) < sizeof(text));
		break;
	}
	default:
		break;
	}
	check_round_trip(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A message is also an arbitrary byte string for the ISA decoder. */
	check_isa(data, size);
	Gpusched__V1__Request *req = gpusched__v1__request__unpack(NULL, size, data);
	if (!req)
		return 0;
	check_request(req);
	gpusched__v1__request__free_unpacked(req, NULL);
	return 0;
}
