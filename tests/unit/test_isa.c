/*
 * The DMA-buffer ISA: encoding round trips, every decode error, whole-buffer validation,
 * FILL's tail semantics and the CHECKSUM hash; TRANSFER's wire bytes and every refusal of its
 * transfer flags and pitch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "isa.h"

/* One example of every opcode, with every field it uses set to a distinct value. */
static const gs_isa_cmd examples[] = {
        {.op = GS_OP_NOP},
        {.op = GS_OP_FILL,
         .dst = 0x0102030405060708u,
         .size = 0x1112131415161718u,
         .pattern = 0xa1b2c3d4u},
        {.op = GS_OP_COPY,
         .dst = 0x2122232425262728u,
         .src = 0x3132333435363738u,
         .size = 0x4142434445464748u},
        {.op = GS_OP_CHECKSUM,
         .dst = 0x5152535455565758u,
         .src = 0x6162636465666768u,
         .size = 0x7172737475767778u},
        {.op = GS_OP_SPIN, .micros = 0x8182838485868788u},
        {.op = GS_OP_SPIN, .flags = GS_SPIN_NONPREEMPTIBLE, .micros = 12345},
        {.op = GS_OP_SIGNAL, .sync = 0x9192939495969798u, .value = 0xa1a2a3a4a5a6a7a8u},
        /* TRANSFER: a plain copy with every non-conversion flag, a Swizzle and an Unswizzle */
        {.op = GS_OP_TRANSFER,
         .dst = 0xb1b2b3b4b5b6b7b8u,
         .src = 0xc1c2c3c4c5c6c7c8u,
         .size = 0xd1d2d3d4d5d6d7d8u,
         .transfer_flags = 0x1c},
        {.op = GS_OP_TRANSFER,
         .dst = 1,
         .src = 2,
         .size = 3,
         .transfer_flags = GS_ISA_TRANSFER_SWIZZLE | 0x08,
         .pitch = 1024},
        {.op = GS_OP_TRANSFER,
         .dst = 4,
         .src = 5,
         .size = 6,
         .transfer_flags = GS_ISA_TRANSFER_UNSWIZZLE | 0x1c,
         .pitch = 0xffffffc0u},
};
#define NEXAMPLES (sizeof(examples) / sizeof(examples[0]))

static void test_sizes_and_names(void **state)
{
	(void)state;
	static const struct {
		uint8_t op;
		size_t size;
		const char *name;
	} want[] = {
	        {GS_OP_NOP, 8, "NOP"},
	        {GS_OP_FILL, 32, "FILL"},
	        {GS_OP_COPY, 32, "COPY"},
	        {GS_OP_CHECKSUM, 32, "CHECKSUM"},
	        {GS_OP_SPIN, 16, "SPIN"},
	        {GS_OP_SIGNAL, 24, "SIGNAL"},
	        {GS_OP_TRANSFER, 40, "TRANSFER"},
	        {GS_OP_COUNT_, 0, "?"},
	        {0xff, 0, "?"},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(gs_isa_cmd_size(want[i].op), want[i].size);
		assert_string_equal(gs_isa_op_name(want[i].op), want[i].name);
	}
}

static void test_round_trip(void **state)
{
	(void)state;
	for (size_t i = 0; i < NEXAMPLES; i++) {
		uint8_t buf[64];
		size_t n = gs_isa_encode(&examples[i], buf, sizeof(buf));
		assert_int_equal(n, gs_isa_cmd_size(examples[i].op));
		/* The header: op, flags, LE size, four zero bytes. */
		assert_int_equal(buf[0], examples[i].op);
		assert_int_equal(buf[1], examples[i].flags);
		assert_int_equal(buf[2] | (buf[3] << 8), n);
		assert_int_equal(buf[4] | buf[5] | buf[6] | buf[7], 0);

		size_t pos = 0;
		gs_isa_cmd out;
		memset(&out, 0xee, sizeof(out));
		assert_int_equal(gs_isa_decode(buf, n, &pos, &out), GS_ISA_OK);
		assert_int_equal(pos, n);
		assert_int_equal(out.op, examples[i].op);
		assert_int_equal(out.flags, examples[i].flags);
		assert_int_equal(out.dst, examples[i].dst);
		assert_int_equal(out.src, examples[i].src);
		assert_int_equal(out.size, examples[i].size);
		assert_int_equal(out.pattern, examples[i].pattern);
		assert_int_equal(out.micros, examples[i].micros);
		assert_int_equal(out.sync, examples[i].sync);
		assert_int_equal(out.value, examples[i].value);
		assert_int_equal(out.transfer_flags, examples[i].transfer_flags);
		assert_int_equal(out.pitch, examples[i].pitch);
		assert_int_equal(gs_isa_decode(buf, n, &pos, &out), GS_ISA_END);
	}
}

/* The exact bytes of a FILL, so a layout change cannot pass as a symmetric round trip. */
static void test_fill_wire_bytes(void **state)
{
	(void)state;
	static const uint8_t want[32] = {
	        0x01, 0x00, 0x20, 0x00, 0,    0,    0,    0,    /* header */
	        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* dst */
	        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* size */
	        0xd4, 0xc3, 0xb2, 0xa1, 0,    0,    0,    0,    /* pattern, reserved */
	};
	uint8_t buf[32];
	assert_int_equal(gs_isa_encode(&examples[1], buf, sizeof(buf)), 32);
	assert_memory_equal(buf, want, sizeof(want));
}

/* The exact bytes of a TRANSFER (Swizzle, pitch 1024, with TransferStart). */
static void test_transfer_wire_bytes(void **state)
{
	(void)state;
	const gs_isa_cmd t = {.op = GS_OP_TRANSFER,
	                      .dst = 0x0102030405060708u,
	                      .src = 0x1112131415161718u,
	                      .size = 0x2122232425262728u,
	                      .transfer_flags = 0x09,
	                      .pitch = 0x400};
	static const uint8_t want[40] = {
	        0x06, 0x00, 0x28, 0x00, 0,    0,    0,    0,    /* header */
	        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* dst */
	        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* src */
	        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, /* size */
	        0x09, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, /* transfer flags, pitch */
	};
	uint8_t buf[48];
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(gs_isa_encode(&t, buf, sizeof(buf)), 40);
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(buf[40], 0xee); /* nothing written past the command */
	assert_int_equal(gs_isa_encode(&t, buf, 39), 0);
	size_t pos = 0;
	gs_isa_cmd out;
	assert_int_equal(gs_isa_decode(want, sizeof(want), &pos, &out), GS_ISA_OK);
	assert_int_equal(pos, 40);
	assert_int_equal(out.op, GS_OP_TRANSFER);
	assert_int_equal(out.flags, 0);
	assert_true(out.dst == t.dst && out.src == t.src && out.size == t.size);
	assert_int_equal(out.transfer_flags, 0x09);
	assert_int_equal(out.pitch, 0x400);
	assert_int_equal(out.pattern | out.micros | out.sync | out.value, 0);
}

/* Decodes an encoded TRANSFER with these transfer flags and pitch. */
static gs_isa_err decode_transfer(uint32_t transfer_flags, uint32_t pitch)
{
	const gs_isa_cmd t = {.op = GS_OP_TRANSFER,
	                      .dst = 0x100,
	                      .src = 0x200,
	                      .size = 0x300,
	                      .transfer_flags = transfer_flags,
	                      .pitch = pitch};
	uint8_t buf[40];
	assert_int_equal(gs_isa_encode(&t, buf, sizeof(buf)), 40);
	size_t pos = 0;
	gs_isa_cmd out;
	gs_isa_err err = gs_isa_decode(buf, sizeof(buf), &pos, &out);
	assert_int_equal(pos, err == GS_ISA_OK ? 40 : 0);
	if (err == GS_ISA_OK) {
		assert_int_equal(out.transfer_flags, transfer_flags);
		assert_int_equal(out.pitch, pitch);
	}
	return err;
}

static void test_transfer_flags_and_pitch(void **state)
{
	(void)state;
	const uint32_t swz = GS_ISA_TRANSFER_SWIZZLE, unswz = GS_ISA_TRANSFER_UNSWIZZLE;
	/* Every combination of the five defined bits: accepted unless both conversions are
	 * asked for; a conversion needs a pitch, a plain copy must have none. */
	for (uint32_t f = 0; f <= GS_ISA_TRANSFER_FLAGS_MASK; f++) {
		bool both = (f & (swz | unswz)) == (swz | unswz);
		bool converts = (f & (swz | unswz)) != 0;
		if (both) {
			assert_int_equal(decode_transfer(f, 0), GS_ISA_BAD_FLAGS);
			assert_int_equal(decode_transfer(f, 1024), GS_ISA_BAD_FLAGS);
		} else if (converts) {
			assert_int_equal(decode_transfer(f, 64), GS_ISA_OK);
			assert_int_equal(decode_transfer(f, 1024), GS_ISA_OK);
			assert_int_equal(decode_transfer(f, 0), GS_ISA_BAD_FLAGS);   /* missing */
			assert_int_equal(decode_transfer(f, 100), GS_ISA_BAD_FLAGS); /* not 64k */
			assert_int_equal(decode_transfer(f, 32), GS_ISA_BAD_FLAGS);
		} else {
			assert_int_equal(decode_transfer(f, 0), GS_ISA_OK);
			assert_int_equal(decode_transfer(f, 64),
			                 GS_ISA_BAD_FLAGS); /* stray pitch */
			assert_int_equal(decode_transfer(f, 1), GS_ISA_BAD_FLAGS);
		}
	}
	/* The largest pitch that is a multiple of 64 still decodes. */
	assert_int_equal(decode_transfer(swz, 0xffffffc0u), GS_ISA_OK);
	assert_int_equal(decode_transfer(unswz, 0xffffffffu), GS_ISA_BAD_FLAGS);
	/* Every reserved bit of the transfer flags, alone and with valid ones. */
	for (uint32_t bit = 5; bit < 32; bit++) {
		assert_int_equal(decode_transfer(1u << bit, 0), GS_ISA_BAD_FLAGS);
		assert_int_equal(decode_transfer((1u << bit) | swz | 0x18, 1024), GS_ISA_BAD_FLAGS);
	}
}

static void test_encode_limits(void **state)
{
	(void)state;
	uint8_t buf[32];
	gs_isa_cmd bad = {.op = GS_OP_COUNT_};
	assert_int_equal(gs_isa_encode(&bad, buf, sizeof(buf)), 0);
	assert_int_equal(gs_isa_encode(&examples[1], buf, 31), 0);
	assert_int_equal(gs_isa_encode(&examples[0], buf, 8), 8);
}

/* Encodes `cmd` and applies one byte edit, then decodes and expects `want`. */
static void expect_decode(const gs_isa_cmd *cmd, size_t edit_at, uint8_t edit_value, size_t len_cut,
                          gs_isa_err want)
{
	uint8_t buf[64];
	size_t n = gs_isa_encode(cmd, buf, sizeof(buf));
	assert_true(n > 0);
	if (edit_at < n && edit_at < sizeof(buf))
		buf[edit_at] = edit_value;
	size_t len = n - len_cut, pos = 0;
	gs_isa_cmd out;
	assert_int_equal(gs_isa_decode(buf, len, &pos, &out), want);
	assert_int_equal(pos, want == GS_ISA_OK ? n : 0); /* errors never advance */
}

#define NO_EDIT 1000u

static void test_decode_errors(void **state)
{
	(void)state;
	gs_isa_cmd spin = {.op = GS_OP_SPIN, .micros = 5};
	gs_isa_cmd fill = {.op = GS_OP_FILL, .dst = 1, .size = 2, .pattern = 3};
	gs_isa_cmd nop = {.op = GS_OP_NOP};

	/* truncated: inside the header and inside the body, for every opcode */
	for (size_t i = 0; i < NEXAMPLES; i++) {
		size_t n = gs_isa_cmd_size(examples[i].op);
		for (size_t cut = 1; cut < n; cut++)
			expect_decode(&examples[i], NO_EDIT, 0, cut, GS_ISA_TRUNCATED);
	}
	/* unknown opcodes, even in a tail shorter than a header */
	expect_decode(&nop, 0, GS_OP_COUNT_, 0, GS_ISA_BAD_OP);
	expect_decode(&nop, 0, 0xff, 0, GS_ISA_BAD_OP);
	expect_decode(&nop, 0, 0x80, 7, GS_ISA_BAD_OP);
	/* size field not the opcode's size, either byte */
	expect_decode(&spin, 2, 24, 0, GS_ISA_BAD_SIZE);
	expect_decode(&spin, 2, 8, 0, GS_ISA_BAD_SIZE);
	expect_decode(&spin, 3, 1, 0, GS_ISA_BAD_SIZE);
	/* TRANSFER: the size field must be 40, and a short buffer is truncation */
	const gs_isa_cmd *transfer = &examples[7];
	assert_int_equal(transfer->op, GS_OP_TRANSFER);
	expect_decode(transfer, 2, 32, 0, GS_ISA_BAD_SIZE);
	expect_decode(transfer, 2, 48, 0, GS_ISA_BAD_SIZE);
	expect_decode(transfer, 2, 41, 0, GS_ISA_BAD_SIZE);
	expect_decode(transfer, 3, 1, 0, GS_ISA_BAD_SIZE);
	expect_decode(transfer, 2, 32, 8, GS_ISA_BAD_SIZE); /* checked before truncation */
	expect_decode(transfer, NO_EDIT, 0, 1, GS_ISA_TRUNCATED);
	expect_decode(transfer, NO_EDIT, 0, 4, GS_ISA_TRUNCATED);  /* the pitch missing */
	expect_decode(transfer, NO_EDIT, 0, 8, GS_ISA_TRUNCATED);  /* flags and pitch missing */
	expect_decode(transfer, NO_EDIT, 0, 32, GS_ISA_TRUNCATED); /* header only */
	/* TRANSFER has no header flags, and its reserved header bytes must be zero */
	for (uint8_t bit = 0; bit < 8; bit++)
		expect_decode(transfer, 1, (uint8_t)(1u << bit), 0, GS_ISA_BAD_FLAGS);
	for (size_t b = 4; b < 8; b++)
		expect_decode(transfer, b, 0x01, 0, GS_ISA_BAD_FLAGS);
	/* transfer flags byte 32 and the bytes above it: reserved bits */
	expect_decode(transfer, 32, 0x20, 0, GS_ISA_BAD_FLAGS);
	expect_decode(transfer, 33, 0x01, 0, GS_ISA_BAD_FLAGS);
	expect_decode(transfer, 35, 0x80, 0, GS_ISA_BAD_FLAGS);
	/* plain copy given a pitch; conversion without one */
	expect_decode(transfer, 36, 0x40, 0, GS_ISA_BAD_FLAGS);
	expect_decode(&examples[8], 37, 0x00, 0, GS_ISA_BAD_FLAGS); /* pitch 1024 -> 0 */
	expect_decode(&examples[8], 36, 0x01, 0, GS_ISA_BAD_FLAGS); /* pitch 1025 */
	expect_decode(&examples[8], 32, 0x0b, 0, GS_ISA_BAD_FLAGS); /* Swizzle + Unswizzle */
	expect_decode(&examples[8], 32, 0x0a, 0, GS_ISA_OK);        /* Unswizzle instead */
	/* flags: only SPIN knows 0x1, and nothing knows 0x2 */
	expect_decode(&nop, 1, 0x1, 0, GS_ISA_BAD_FLAGS);
	expect_decode(&fill, 1, 0x1, 0, GS_ISA_BAD_FLAGS);
	expect_decode(&spin, 1, 0x2, 0, GS_ISA_BAD_FLAGS);
	expect_decode(&spin, 1, 0x80, 0, GS_ISA_BAD_FLAGS);
	expect_decode(&spin, 1, 0x1, 0, GS_ISA_OK);
	/* reserved header bytes 4..7 and FILL's trailing u32 */
	for (size_t b = 4; b < 8; b++)
		expect_decode(&nop, b, 0x10, 0, GS_ISA_BAD_FLAGS);
	for (size_t b = 28; b < 32; b++)
		expect_decode(&fill, b, 0x01, 0, GS_ISA_BAD_FLAGS);
}

static void test_decode_position(void **state)
{
	(void)state;
	uint8_t buf[8];
	size_t pos = 9;
	gs_isa_cmd out;
	gs_isa_encode(&examples[0], buf, sizeof(buf));
	assert_int_equal(gs_isa_decode(buf, sizeof(buf), &pos, &out), GS_ISA_TRUNCATED);
	pos = 8;
	assert_int_equal(gs_isa_decode(buf, sizeof(buf), &pos, &out), GS_ISA_END);
	pos = 0;
	assert_int_equal(gs_isa_decode(buf, 0, &pos, &out), GS_ISA_END);
}

static void test_validate(void **state)
{
	(void)state;
	uint8_t buf[512];
	size_t len = 0, offsets[NEXAMPLES];

	for (size_t i = 0; i < NEXAMPLES; i++) {
		offsets[i] = len;
		len += gs_isa_encode(&examples[i], buf + len, sizeof(buf) - len);
	}
	size_t ncmds = 0, err_at = 0;
	assert_int_equal(gs_isa_validate(buf, len, &ncmds, &err_at), GS_ISA_OK);
	assert_int_equal(ncmds, NEXAMPLES);
	assert_int_equal(gs_isa_validate(buf, 0, &ncmds, &err_at), GS_ISA_OK);
	assert_int_equal(ncmds, 0);

	/* The first error wins and is located at its command's start. */
	buf[offsets[3] + 5] = 1;
	buf[offsets[5] + 0] = 0x77;
	assert_int_equal(gs_isa_validate(buf, len, &ncmds, &err_at), GS_ISA_BAD_FLAGS);
	assert_int_equal(err_at, offsets[3]);
	buf[offsets[3] + 5] = 0;
	assert_int_equal(gs_isa_validate(buf, len, &ncmds, &err_at), GS_ISA_BAD_OP);
	assert_int_equal(err_at, offsets[5]);
	buf[offsets[5] + 0] = GS_OP_SPIN;
	assert_int_equal(gs_isa_validate(buf, len - 3, &ncmds, &err_at), GS_ISA_TRUNCATED);
	assert_int_equal(err_at, offsets[NEXAMPLES - 1]);
	/* NULL outputs are allowed */
	assert_int_equal(gs_isa_validate(buf, len, NULL, NULL), GS_ISA_OK);
	/* A TRANSFER whose Swizzle lost its pitch is refused where it starts. */
	size_t t = offsets[8];
	assert_int_equal(buf[t], GS_OP_TRANSFER);
	buf[t + 37] = 0;
	assert_int_equal(gs_isa_validate(buf, len, &ncmds, &err_at), GS_ISA_BAD_FLAGS);
	assert_int_equal(err_at, t);
}

static void test_strerror(void **state)
{
	(void)state;
	const gs_isa_err errs[] = {GS_ISA_OK,     GS_ISA_END,      GS_ISA_TRUNCATED,
	                           GS_ISA_BAD_OP, GS_ISA_BAD_SIZE, GS_ISA_BAD_FLAGS};
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		const char *s = gs_isa_strerror(errs[i]);
		assert_non_null(s);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(s, gs_isa_strerror(errs[j]));
	}
}

/* Reference FILL: byte i of the output is byte (i mod 4) of the LE pattern. */
static void check_fill(uint64_t size, uint32_t pattern)
{
	uint8_t *buf = malloc(size + 16);
	assert_non_null(buf);
	memset(buf, 0x5a, size + 16);
	gs_isa_fill(buf + 8, size, pattern);
	for (uint64_t i = 0; i < size; i++)
		assert_int_equal(buf[8 + i], (uint8_t)(pattern >> (8 * (i % 4))));
	/* No byte outside [dst, dst + size) is touched. */
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(buf[i], 0x5a);
		assert_int_equal(buf[8 + size + i], 0x5a);
	}
	free(buf);
}

static void test_fill(void **state)
{
	(void)state;
	static const uint64_t sizes[] = {0,     1,     2,     3,     4,     5,      63,
	                                 64,    65,    127,   128,   1000,  4093,   16383,
	                                 16384, 16385, 32771, 65536, 99999, 1 << 20};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		check_fill(sizes[i], 0xa1b2c3d4u);
		check_fill(sizes[i], 0x77777777u); /* the memset path */
		check_fill(sizes[i], 0x00000001u);
	}
	/* The tail gets the pattern's first bytes, little-endian. */
	uint8_t tail[7];
	gs_isa_fill(tail, sizeof(tail), 0x44332211u);
	const uint8_t want[7] = {0x11, 0x22, 0x33, 0x44, 0x11, 0x22, 0x33};
	assert_memory_equal(tail, want, sizeof(want));
}

static void test_checksum(void **state)
{
	(void)state;
	/* XXH64 seed 0 reference values (from the xxHash specification's sanity checks). */
	assert_true(gs_isa_checksum("", 0) == UINT64_C(0xEF46DB3751D8E999));
	assert_true(gs_isa_checksum(NULL, 0) == UINT64_C(0xEF46DB3751D8E999));
	assert_true(gs_isa_checksum("a", 1) == UINT64_C(0xD24EC4F1A98C6E5B));
	assert_true(gs_isa_checksum("abc", 3) == UINT64_C(0x44BC2CF5AD770999));
}

/* DISPATCH: its exact bytes (two bindings, 12 bytes of push constants padded to 16), a round
 * trip, and the decoder's refusals of counts, padding, reserved bytes and sizes. */
static void test_dispatch(void **state)
{
	(void)state;
	const gs_isa_binding b[2] = {{.binding = 1, .alloc_index = 2, .offset = 256, .range = 4096},
	                             {.binding = 3, .alloc_index = 0, .offset = 0, .range = 8}};
	const uint32_t push[3] = {0x11223344u, 5, 6};
	uint8_t args[GS_ISA_DISPATCH_MAX_SIZE];
	size_t alen = gs_isa_dispatch_args(b, 2, push, 12, args, sizeof(args));
	assert_int_equal(alen, 2 * 24 + 16);
	assert_int_equal(gs_isa_dispatch_args_len(2, 12), alen);
	gs_isa_cmd d = {.op = GS_OP_DISPATCH,
	                .kernel = 0x0102030405060708u,
	                .groups = {7, 8, 9},
	                .nbindings = 2,
	                .push_size = 12,
	                .args = args};
	uint8_t buf[GS_ISA_DISPATCH_MAX_SIZE];
	size_t n = gs_isa_encode(&d, buf, sizeof(buf));
	assert_int_equal(n, 32 + alen);
	assert_int_equal(gs_isa_cmd_len(&d), n);
	assert_int_equal(gs_isa_cmd_size(GS_OP_DISPATCH), 0); /* variable */
	static const uint8_t head[32] = {
	        0x07, 0x00, 0x60, 0x00, 0,    0,    0,    0,    /* header: size 96 */
	        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* kernel */
	        7,    0,    0,    0,    8,    0,    0,    0,    /* groups x, y */
	        9,    0,    0,    0,    2,    12,   0,    0,    /* z, bindings, push bytes */
	};
	assert_memory_equal(buf, head, sizeof(head));
	static const uint8_t first[24] = {1, 0, 0, 0, 2, 0,    0, 0, 0, 1, 0, 0,
	                                  0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0};
	assert_memory_equal(buf + 32, first, sizeof(first));
	assert_int_equal(buf[32 + 48], 0x44);
	assert_int_equal(buf[n - 1], 0); /* padding */

	size_t pos = 0;
	gs_isa_cmd out;
	assert_int_equal(gs_isa_decode(buf, n, &pos, &out), GS_ISA_OK);
	assert_int_equal(pos, n);
	assert_int_equal(out.kernel, d.kernel);
	assert_int_equal(out.groups[2], 9);
	assert_int_equal(out.nbindings, 2);
	gs_isa_binding got;
	gs_isa_dispatch_binding(&out, 1, &got);
	assert_int_equal(got.binding, 3);
	assert_int_equal(got.range, 8);
	assert_memory_equal(gs_isa_dispatch_push(&out), push, 12);
	assert_string_equal(gs_isa_op_name(GS_OP_DISPATCH), "DISPATCH");

	/* Every cut is truncated; each edit is refused. */
	for (size_t cut = 1; cut < n; cut++) {
		pos = 0;
		assert_int_equal(gs_isa_decode(buf, n - cut, &pos, &out), GS_ISA_TRUNCATED);
		assert_int_equal(pos, 0);
	}
	const struct {
		size_t at;
		uint8_t value;
		gs_isa_err want;
	} edits[] = {
	        {28, 17, GS_ISA_BAD_FLAGS},  /* 17 bindings */
	        {29, 130, GS_ISA_BAD_FLAGS}, /* 130 push bytes */
	        {29, 10, GS_ISA_BAD_FLAGS},  /* not a multiple of 4 */
	        {29, 8, GS_ISA_BAD_SIZE},    /* 8 bytes: the size field disagrees */
	        {30, 1, GS_ISA_BAD_FLAGS},   /* reserved */
	        {95, 1, GS_ISA_BAD_FLAGS},   /* padding */
	        {1, 1, GS_ISA_BAD_FLAGS},    /* flags */
	        {2, 0x58, GS_ISA_BAD_SIZE},  /* size field */
	        {2, 0x10, GS_ISA_BAD_SIZE},  /* below the fixed part */
	};
	for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		uint8_t e[sizeof(buf)];
		memcpy(e, buf, n);
		e[edits[i].at] = edits[i].value;
		pos = 0;
		if (gs_isa_decode(e, n, &pos, &out) != edits[i].want)
			fail_msg("edit %zu: byte %zu = %u", i, edits[i].at, edits[i].value);
		assert_int_equal(pos, 0);
	}
	/* The builder's limits. */
	assert_int_equal(gs_isa_dispatch_args(b, 17, push, 0, args, sizeof(args)), 0);
	assert_int_equal(gs_isa_dispatch_args(b, 2, push, 132, args, sizeof(args)), 0);
	assert_int_equal(gs_isa_dispatch_args(b, 2, push, 12, args, 63), 0);
	/* No bindings, no push constants: the fixed part alone. */
	gs_isa_cmd empty = {.op = GS_OP_DISPATCH, .kernel = 1};
	assert_int_equal(gs_isa_encode(&empty, buf, sizeof(buf)), 32);
	pos = 0;
	assert_int_equal(gs_isa_decode(buf, 32, &pos, &out), GS_ISA_OK);
	/* Bindings without their bytes: nothing is encoded. */
	empty.nbindings = 1;
	assert_int_equal(gs_isa_encode(&empty, buf, sizeof(buf)), 0);
	/* A DISPATCH has no patchable address field. */
	size_t f[2];
	assert_int_equal(gs_isa_address_fields(GS_OP_DISPATCH, f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_sizes_and_names),
	        cmocka_unit_test(test_round_trip),
	        cmocka_unit_test(test_fill_wire_bytes),
	        cmocka_unit_test(test_transfer_wire_bytes),
	        cmocka_unit_test(test_transfer_flags_and_pitch),
	        cmocka_unit_test(test_encode_limits),
	        cmocka_unit_test(test_decode_errors),
	        cmocka_unit_test(test_decode_position),
	        cmocka_unit_test(test_validate),
	        cmocka_unit_test(test_strerror),
	        cmocka_unit_test(test_fill),
	        cmocka_unit_test(test_checksum),
	        cmocka_unit_test(test_dispatch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
