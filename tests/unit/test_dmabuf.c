/*
 * The client's DMA-buffer builder: patch locations point exactly at the address fields the
 * ISA decoder reads, the allocation list is deduplicated with write marking, buffers grow,
 * failed appends leave the buffer untouched, and the CLI's flag names parse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpusched.h"
#include "isa.h"
#include "wddm.h"

/* A fake GPU address per allocation handle: distinct segment and offset bits. */
static uint64_t fake_address(uint64_t handle)
{
	return gs_addr_make((uint32_t)(handle % 31) + 1, handle * 0x10000u);
}

/* Applies the patch list the way the daemon does, on a copy of the buffer. */
static uint8_t *patched_copy(const gs_dmabuf *b)
{
	uint8_t *copy = malloc(b->len ? b->len : 1);

	assert_non_null(copy);
	memcpy(copy, b->data, b->len);
	for (size_t i = 0; i < b->patch_count; i++) {
		const gs_dmabuf_patch *p = &b->patches[i];

		assert_true(p->allocation_index < b->alloc_count);
		assert_true((size_t)p->patch_offset + 8 <= b->len);
		gs_le64_put(copy + p->patch_offset,
		            fake_address(b->allocs[p->allocation_index].allocation) +
		                    p->allocation_offset);
	}
	return copy;
}

/* Decodes the buffer into at most `max` commands; returns the count, asserting validity. */
static size_t decode_all(const uint8_t *data, size_t len, gs_isa_cmd *cmds, size_t *starts,
                         size_t max)
{
	size_t pos = 0, n = 0;

	while (pos < len) {
		assert_true(n < max);
		starts[n] = pos;
		assert_int_equal(gs_isa_decode(data, len, &pos, &cmds[n]), GS_ISA_OK);
		n++;
	}
	return n;
}

/* Finds the patch at byte `offset`, or fails the test. */
static const gs_dmabuf_patch *patch_at(const gs_dmabuf *b, size_t offset)
{
	for (size_t i = 0; i < b->patch_count; i++)
		if (b->patches[i].patch_offset == offset)
			return &b->patches[i];
	fail_msg("no patch location at offset %zu", offset);
	return NULL;
}

static void test_fill_patch(void **state)
{
	gs_isa_cmd cmd;
	gs_dmabuf b;
	size_t pos = 0;

	(void)state;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, 7, 16, 100, 0xdeadbeefu), 0);

	assert_int_equal(b.len, gs_isa_cmd_size(GS_OP_FILL));
	assert_int_equal(gs_isa_decode(b.data, b.len, &pos, &cmd), GS_ISA_OK);
	assert_int_equal(cmd.op, GS_OP_FILL);
	assert_int_equal(cmd.dst, 0); /* the daemon patches it */
	assert_int_equal(cmd.size, 100);
	assert_int_equal(cmd.pattern, 0xdeadbeefu);

	assert_int_equal(b.alloc_count, 1);
	assert_int_equal(b.allocs[0].allocation, 7);
	assert_true(b.allocs[0].write);
	assert_int_equal(b.patch_count, 1);
	assert_int_equal(b.patches[0].allocation_index, 0);
	assert_int_equal(b.patches[0].slot_id, 0);
	assert_int_equal(b.patches[0].patch_offset, GS_ISA_DST_FIELD);
	assert_int_equal(b.patches[0].allocation_offset, 16);
	gs_dmabuf_free(&b);
	assert_null(b.data);
}

/* Every command kind in one buffer: after patching, each decoded address is exactly the
 * allocation's address plus the offset given to the builder. */
static void test_patches_hit_address_fields(void **state)
{
	gs_isa_cmd cmds[8];
	size_t starts[8], n;
	uint8_t *patched;
	gs_dmabuf b;

	(void)state;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	assert_int_equal(gs_dmabuf_copy(&b, 5, 0x100, 6, 0x200, 50), 0);
	assert_int_equal(gs_dmabuf_spin(&b, 250, GS_DMABUF_SPIN_NONPREEMPTIBLE), 0);
	assert_int_equal(gs_dmabuf_checksum(&b, 9, 8, 5, 3, 10), 0);
	assert_int_equal(gs_dmabuf_fill(&b, 6, 1, 2, 0x01020304u), 0);
	assert_int_equal(gs_dmabuf_signal(&b, 77, 12), 0);
	assert_int_equal(gs_isa_validate(b.data, b.len, &n, NULL), GS_ISA_OK);
	assert_int_equal(n, 6);

	/* Unpatched: every address field is zero. */
	n = decode_all(b.data, b.len, cmds, starts, 8);
	assert_int_equal(cmds[1].dst | cmds[1].src | cmds[3].dst | cmds[3].src | cmds[4].dst, 0);

	patched = patched_copy(&b);
	n = decode_all(patched, b.len, cmds, starts, 8);
	assert_int_equal(n, 6);
	assert_int_equal(cmds[0].op, GS_OP_NOP);
	assert_int_equal(cmds[1].op, GS_OP_COPY);
	assert_int_equal(cmds[1].dst, fake_address(5) + 0x100);
	assert_int_equal(cmds[1].src, fake_address(6) + 0x200);
	assert_int_equal(cmds[1].size, 50);
	assert_int_equal(cmds[2].op, GS_OP_SPIN);
	assert_int_equal(cmds[2].micros, 250);
	assert_int_equal(cmds[2].flags, GS_SPIN_NONPREEMPTIBLE);
	assert_int_equal(cmds[3].op, GS_OP_CHECKSUM);
	assert_int_equal(cmds[3].dst, fake_address(9) + 8);
	assert_int_equal(cmds[3].src, fake_address(5) + 3);
	assert_int_equal(cmds[4].op, GS_OP_FILL);
	assert_int_equal(cmds[4].dst, fake_address(6) + 1);
	assert_int_equal(cmds[4].pattern, 0x01020304u);
	assert_int_equal(cmds[5].op, GS_OP_SIGNAL);
	assert_int_equal(cmds[5].sync, 77); /* a handle, not an address: never patched */
	assert_int_equal(cmds[5].value, 12);

	/* One patch per address field, at command start + field, and nothing else. */
	assert_int_equal(b.patch_count, 5);
	assert_int_equal(patch_at(&b, starts[1] + GS_ISA_DST_FIELD)->allocation_offset, 0x100);
	assert_int_equal(patch_at(&b, starts[1] + GS_ISA_SRC_FIELD)->allocation_offset, 0x200);
	assert_int_equal(patch_at(&b, starts[3] + GS_ISA_DST_FIELD)->allocation_offset, 8);
	assert_int_equal(patch_at(&b, starts[3] + GS_ISA_SRC_FIELD)->allocation_offset, 3);
	assert_int_equal(patch_at(&b, starts[4] + GS_ISA_DST_FIELD)->allocation_offset, 1);
	for (size_t i = 0; i < b.patch_count; i++)
		assert_int_equal(b.patches[i].slot_id, i);
	free(patched);
	gs_dmabuf_free(&b);
}

static void test_allocation_list_dedupe_and_write(void **state)
{
	gs_dmabuf b;

	(void)state;
	gs_dmabuf_init(&b);
	/* 1 is read first, then written: one entry, promoted to write. */
	assert_int_equal(gs_dmabuf_copy(&b, 2, 0, 1, 0, 8), 0);
	assert_int_equal(gs_dmabuf_checksum(&b, 3, 0, 2, 0, 8), 0);
	assert_int_equal(gs_dmabuf_copy(&b, 2, 8, 4, 0, 8), 0);
	assert_int_equal(gs_dmabuf_fill(&b, 1, 0, 4, 0), 0);
	/* A copy within one allocation: one entry, written. */
	assert_int_equal(gs_dmabuf_copy(&b, 5, 0, 5, 4, 4), 0);

	assert_int_equal(b.alloc_count, 5);
	static const struct {
		uint64_t handle;
		bool write;
	} want[] = {{2, true}, {1, true}, {3, true}, {4, false}, {5, true}};
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(b.allocs[i].allocation, want[i].handle);
		assert_int_equal(b.allocs[i].write, want[i].write);
	}
	/* Every patch names the entry of its own handle. */
	assert_int_equal(b.patch_count, 9);
	assert_int_equal(b.allocs[b.patches[0].allocation_index].allocation, 2);
	assert_int_equal(b.allocs[b.patches[1].allocation_index].allocation, 1);
	assert_int_equal(b.allocs[b.patches[3].allocation_index].allocation, 2);
	assert_int_equal(b.allocs[b.patches[5].allocation_index].allocation, 4);
	assert_int_equal(b.allocs[b.patches[6].allocation_index].allocation, 1);
	assert_int_equal(b.patches[7].allocation_index, b.patches[8].allocation_index);
	gs_dmabuf_free(&b);
}

static void test_growth(void **state)
{
	enum { COMMANDS = 5000, HANDLES = 300 };
	uint8_t *patched;
	gs_isa_cmd cmd;
	size_t n, pos = 0;
	gs_dmabuf b;

	(void)state;
	gs_dmabuf_init(&b);
	for (size_t i = 0; i < COMMANDS; i++)
		assert_int_equal(gs_dmabuf_fill(&b, 1 + i % HANDLES, i, 4, (uint32_t)i), 0);
	assert_int_equal(b.len, COMMANDS * gs_isa_cmd_size(GS_OP_FILL));
	assert_true(b.cap >= b.len);
	assert_int_equal(b.alloc_count, HANDLES);
	assert_true(b.alloc_cap >= HANDLES);
	assert_int_equal(b.patch_count, COMMANDS);
	assert_true(b.patch_cap >= COMMANDS);
	assert_int_equal(gs_isa_validate(b.data, b.len, &n, NULL), GS_ISA_OK);
	assert_int_equal(n, COMMANDS);

	/* Data written before a reallocation survived it. */
	patched = patched_copy(&b);
	for (size_t i = 0; i < COMMANDS; i++) {
		assert_int_equal(gs_isa_decode(patched, b.len, &pos, &cmd), GS_ISA_OK);
		assert_int_equal(cmd.pattern, (uint32_t)i);
		assert_int_equal(cmd.dst, fake_address(1 + i % HANDLES) + i);
	}
	free(patched);

	/* reset keeps the memory for the next packet. */
	size_t cap = b.cap;
	gs_dmabuf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.alloc_count, 0);
	assert_int_equal(b.patch_count, 0);
	assert_int_equal(b.cap, cap);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	assert_int_equal(b.len, GS_ISA_HEADER_SIZE);
	gs_dmabuf_free(&b);
}

static void test_invalid_leaves_buffer_unchanged(void **state)
{
	gs_dmabuf b;

	(void)state;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_fill(&b, 3, 0, 8, 1), 0);
	size_t len = b.len, allocs = b.alloc_count, patches = b.patch_count;

	/* Handle 0 is never an allocation; as a source it must not leave a half command. */
	assert_int_equal(gs_dmabuf_fill(&b, 0, 0, 8, 1), GS_ERR_INVALID);
	assert_int_equal(gs_dmabuf_copy(&b, 4, 0, 0, 0, 8), GS_ERR_INVALID);
	assert_int_equal(gs_dmabuf_checksum(&b, 0, 0, 3, 0, 8), GS_ERR_INVALID);
	/* Unknown SPIN flags would make the daemon reject the whole buffer. */
	assert_int_equal(gs_dmabuf_spin(&b, 10, 0x80), GS_ERR_INVALID);

	assert_int_equal(b.len, len);
	assert_int_equal(b.alloc_count, allocs);
	assert_int_equal(b.patch_count, patches);
	assert_int_equal(b.allocs[0].allocation, 3);
	gs_dmabuf_free(&b);
}

/* The CLI's --flags goes through gs_flags_parse with the submit table. */
static void test_submit_flag_names(void **state)
{
	const char *bad = NULL;
	uint32_t v = 0;

	(void)state;
	assert_int_equal(gs_flags_parse(gs_submit_flag_names, "NullRendering,Present", &v, &bad),
	                 0);
	assert_int_equal(v, GS_SUBMIT_NULL_RENDERING | GS_SUBMIT_PRESENT);
	assert_int_equal(gs_flags_parse(gs_submit_flag_names, "nullrendering|present", &v, &bad),
	                 0);
	assert_int_equal(v, 0xa);
	assert_int_equal(gs_flags_parse(gs_submit_flag_names, "0x00a", &v, &bad), 0);
	assert_int_equal(v, 0xa);
	assert_int_equal(gs_flags_parse(gs_submit_flag_names, "Present,Bogus", &v, &bad), -1);
	assert_string_equal(bad, "Bogus");
}

/* State names: printed upper case, parsed in any case, UNKNOWN is not a filter. */
static void test_packet_state_names(void **state)
{
	gs_packet_state s;

	(void)state;
	assert_string_equal(gs_packet_state_name(GS_PACKET_COMPLETED), "COMPLETED");
	assert_string_equal(gs_packet_state_name((gs_packet_state)99), "UNKNOWN");
	assert_int_equal(gs_packet_state_parse("completed", &s), 0);
	assert_int_equal(s, GS_PACKET_COMPLETED);
	assert_int_equal(gs_packet_state_parse("ReSubmitted", &s), 0);
	assert_int_equal(s, GS_PACKET_RESUBMITTED);
	assert_int_equal(gs_packet_state_parse("REJECTED", &s), 0);
	assert_int_equal(s, GS_PACKET_REJECTED);
	assert_int_equal(gs_packet_state_parse("unknown", &s), GS_ERR_INVALID);
	assert_int_equal(gs_packet_state_parse("done", &s), GS_ERR_INVALID);
	for (int i = GS_PACKET_SUBMITTED; i <= GS_PACKET_REJECTED; i++) {
		assert_int_equal(
		        gs_packet_state_parse(gs_packet_state_name((gs_packet_state)i), &s), 0);
		assert_int_equal(s, i);
	}
	assert_string_equal(gs_status_name(GS_STATUS_UNIMPLEMENTED), "UNIMPLEMENTED");
	assert_string_equal(gs_status_name(GS_ERR_TRANSPORT), "TRANSPORT");
	assert_string_equal(gs_status_name(99), "STATUS_99");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_fill_patch),
	        cmocka_unit_test(test_patches_hit_address_fields),
	        cmocka_unit_test(test_allocation_list_dedupe_and_write),
	        cmocka_unit_test(test_growth),
	        cmocka_unit_test(test_invalid_leaves_buffer_unchanged),
	        cmocka_unit_test(test_submit_flag_names),
	        cmocka_unit_test(test_packet_state_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
