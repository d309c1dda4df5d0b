/*
 * The DMA-buffer instruction set: the one encoder/decoder shared by the client's builder and
 * the daemon's engines (see isa.h for the layout).
 *
 * Decoding is strict on purpose: the daemon validates every buffer at submission with the
 * same decoder its engines use, so anything the engines could misread (reserved bytes, stray
 * flags, a size field that disagrees with the opcode) is refused before it reaches a queue.
 */
#include "isa.h"

#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

/* Byte offsets inside a command, after the header. */
#define OFF_A 8u  /* dst / micros / sync */
#define OFF_B 16u /* src (COPY, CHECKSUM) / size (FILL) / value (SIGNAL) */
#define OFF_C 24u /* size (COPY, CHECKSUM) / pattern (FILL) */
#define OFF_D 28u /* FILL: reserved u32 */
#define OFF_E 32u /* TRANSFER: transfer flags */
#define OFF_F 36u /* TRANSFER: pitch */

static const struct {
	const char *name;
	uint16_t size;
	uint8_t flags; /* the flag bits this opcode accepts */
} op_info[GS_OP_COUNT_] = {
        [GS_OP_NOP] = {"NOP", 8, 0},
        [GS_OP_FILL] = {"FILL", 32, 0},
        [GS_OP_COPY] = {"COPY", 32, 0},
        [GS_OP_CHECKSUM] = {"CHECKSUM", 32, 0},
        [GS_OP_SPIN] = {"SPIN", 16, GS_SPIN_NONPREEMPTIBLE},
        [GS_OP_SIGNAL] = {"SIGNAL", 24, 0},
        [GS_OP_TRANSFER] = {"TRANSFER", 40, 0},
        [GS_OP_DISPATCH] = {"DISPATCH", 0, 0}, /* variable: dispatch_size */
};

/* DISPATCH's fixed part, after the header. */
#define OFF_GROUPS 16u /* three u32 */
#define OFF_NBIND  28u
#define OFF_NPUSH  29u
#define OFF_DRES   30u /* u16 reserved */

static void le16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static uint16_t le16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static void le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t le32_get(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}

size_t gs_isa_cmd_size(uint8_t op)
{
	return op < GS_OP_COUNT_ ? op_info[op].size : 0;
}

size_t gs_isa_dispatch_args_len(uint8_t nbindings, uint8_t push_size)
{
	return (size_t)nbindings * GS_ISA_DISPATCH_BINDING + ((size_t)push_size + 7u) / 8u * 8u;
}

size_t gs_isa_cmd_len(const gs_isa_cmd *cmd)
{
	if (cmd->op == GS_OP_DISPATCH)
		return GS_ISA_DISPATCH_FIXED +
		       gs_isa_dispatch_args_len(cmd->nbindings, cmd->push_size);
	return gs_isa_cmd_size(cmd->op);
}

void gs_isa_dispatch_binding(const gs_isa_cmd *cmd, unsigned i, gs_isa_binding *out)
{
	const uint8_t *p = cmd->args + (size_t)i * GS_ISA_DISPATCH_BINDING;
	out->binding = le32_get(p);
	out->alloc_index = le32_get(p + 4);
	out->offset = gs_le64_get(p + 8);
	out->range = gs_le64_get(p + 16);
}

const uint8_t *gs_isa_dispatch_push(const gs_isa_cmd *cmd)
{
	return cmd->args + (size_t)cmd->nbindings * GS_ISA_DISPATCH_BINDING;
}

size_t gs_isa_dispatch_args(const gs_isa_binding *bindings, uint8_t nbindings, const void *push,
                            uint8_t push_size, uint8_t *out, size_t cap)
{
	size_t n = gs_isa_dispatch_args_len(nbindings, push_size);
	if (nbindings > GS_ISA_DISPATCH_MAX_BIND || push_size > GS_ISA_DISPATCH_MAX_PUSH || cap < n)
		return 0;
	memset(out, 0, n);
	for (unsigned i = 0; i < nbindings; i++) {
		uint8_t *p = out + (size_t)i * GS_ISA_DISPATCH_BINDING;
		le32_put(p, bindings[i].binding);
		le32_put(p + 4, bindings[i].alloc_index);
		gs_le64_put(p + 8, bindings[i].offset);
		gs_le64_put(p + 16, bindings[i].range);
	}
	if (push_size)
		memcpy(out + (size_t)nbindings * GS_ISA_DISPATCH_BINDING, push, push_size);
	return n;
}

/* The size a DISPATCH's fixed part says it has, or 0 when its counts are out of range. */
static size_t dispatch_size(const uint8_t *p)
{
	uint8_t nb = p[OFF_NBIND], np = p[OFF_NPUSH];
	if (nb > GS_ISA_DISPATCH_MAX_BIND || np > GS_ISA_DISPATCH_MAX_PUSH || np % 4u != 0)
		return 0;
	return GS_ISA_DISPATCH_FIXED + gs_isa_dispatch_args_len(nb, np);
}

/* The padding after a DISPATCH's push constants is zero. */
static bool dispatch_padding_zero(const uint8_t *p, size_t size)
{
	for (size_t i = GS_ISA_DISPATCH_FIXED + (size_t)p[OFF_NBIND] * GS_ISA_DISPATCH_BINDING +
	                p[OFF_NPUSH];
	     i < size; i++)
		if (p[i])
			return false;
	return true;
}

const char *gs_isa_op_name(uint8_t op)
{
	return op < GS_OP_COUNT_ ? op_info[op].name : "?";
}

gs_isa_err gs_isa_decode(const uint8_t *buf, size_t len, size_t *pos, gs_isa_cmd *out)
{
	size_t at = *pos;

	if (at >= len)
		return at == len ? GS_ISA_END : GS_ISA_TRUNCATED;
	size_t left = len - at;
	const uint8_t *p = buf + at;

	/* The opcode byte is readable even in a short tail, so an unknown opcode is reported as
	 * such rather than as truncation. */
	uint8_t op = p[0];
	if (op >= GS_OP_COUNT_)
		return GS_ISA_BAD_OP;
	if (left < GS_ISA_HEADER_SIZE)
		return GS_ISA_TRUNCATED;
	size_t size = op_info[op].size;
	if (op == GS_OP_DISPATCH) {
		/* The counts that fix its size are in the fixed part. */
		if (le16_get(p + 2) < GS_ISA_DISPATCH_FIXED)
			return GS_ISA_BAD_SIZE;
		if (left < GS_ISA_DISPATCH_FIXED)
			return GS_ISA_TRUNCATED;
		size = dispatch_size(p);
		if (size == 0)
			return GS_ISA_BAD_FLAGS;
	}
	if (le16_get(p + 2) != size)
		return GS_ISA_BAD_SIZE;
	if (left < size)
		return GS_ISA_TRUNCATED;
	if ((p[1] & ~op_info[op].flags) != 0 || le32_get(p + 4) != 0)
		return GS_ISA_BAD_FLAGS;

	gs_isa_cmd c;
	memset(&c, 0, sizeof(c));
	c.op = op;
	c.flags = p[1];
	switch ((gs_isa_op)op) {
	case GS_OP_NOP:
		break;
	case GS_OP_FILL:
		if (le32_get(p + OFF_D) != 0)
			return GS_ISA_BAD_FLAGS;
		c.dst = gs_le64_get(p + OFF_A);
		c.size = gs_le64_get(p + OFF_B);
		c.pattern = le32_get(p + OFF_C);
		break;
	case GS_OP_COPY:
	case GS_OP_CHECKSUM:
		c.dst = gs_le64_get(p + OFF_A);
		c.src = gs_le64_get(p + OFF_B);
		c.size = gs_le64_get(p + OFF_C);
		break;
	case GS_OP_SPIN:
		c.micros = gs_le64_get(p + OFF_A);
		break;
	case GS_OP_SIGNAL:
		c.sync = gs_le64_get(p + OFF_A);
		c.value = gs_le64_get(p + OFF_B);
		break;
	case GS_OP_TRANSFER: {
		c.dst = gs_le64_get(p + OFF_A);
		c.src = gs_le64_get(p + OFF_B);
		c.size = gs_le64_get(p + OFF_C);
		c.transfer_flags = le32_get(p + OFF_E);
		c.pitch = le32_get(p + OFF_F);
		const uint32_t swz = GS_ISA_TRANSFER_SWIZZLE | GS_ISA_TRANSFER_UNSWIZZLE;
		if ((c.transfer_flags & ~GS_ISA_TRANSFER_FLAGS_MASK) != 0 ||
		    (c.transfer_flags & swz) == swz)
			return GS_ISA_BAD_FLAGS;
		if ((c.transfer_flags & swz) ? (c.pitch == 0 || c.pitch % 64u != 0) : c.pitch != 0)
			return GS_ISA_BAD_FLAGS;
		break;
	}
	case GS_OP_DISPATCH:
		if (le16_get(p + OFF_DRES) != 0 || !dispatch_padding_zero(p, size))
			return GS_ISA_BAD_FLAGS;
		c.kernel = gs_le64_get(p + OFF_A);
		for (int i = 0; i < 3; i++)
			c.groups[i] = le32_get(p + OFF_GROUPS + 4 * i);
		c.nbindings = p[OFF_NBIND];
		c.push_size = p[OFF_NPUSH];
		c.args = p + GS_ISA_DISPATCH_FIXED;
		break;
	case GS_OP_COUNT_:
		return GS_ISA_BAD_OP;
	}
	*out = c;
	*pos = at + size;
	return GS_ISA_OK;
}

/* Writes cmd->flags as given (unknown bits included): the encoder is a serialiser, and the
 * decoder is where strictness lives, so tests can build invalid commands with it. */
size_t gs_isa_encode(const gs_isa_cmd *cmd, uint8_t *out, size_t cap)
{
	size_t size = gs_isa_cmd_len(cmd);

	if (size == 0 || cap < size || size > UINT16_MAX)
		return 0;
	if (cmd->op == GS_OP_DISPATCH && size > GS_ISA_DISPATCH_FIXED && !cmd->args)
		return 0;
	memset(out, 0, size);
	out[0] = cmd->op;
	out[1] = cmd->flags;
	le16_put(out + 2, (uint16_t)size);
	switch ((gs_isa_op)cmd->op) {
	case GS_OP_NOP:
		break;
	case GS_OP_FILL:
		gs_le64_put(out + OFF_A, cmd->dst);
		gs_le64_put(out + OFF_B, cmd->size);
		le32_put(out + OFF_C, cmd->pattern);
		break;
	case GS_OP_COPY:
	case GS_OP_CHECKSUM:
		gs_le64_put(out + OFF_A, cmd->dst);
		gs_le64_put(out + OFF_B, cmd->src);
		gs_le64_put(out + OFF_C, cmd->size);
		break;
	case GS_OP_SPIN:
		gs_le64_put(out + OFF_A, cmd->micros);
		break;
	case GS_OP_SIGNAL:
		gs_le64_put(out + OFF_A, cmd->sync);
		gs_le64_put(out + OFF_B, cmd->value);
		break;
	case GS_OP_TRANSFER:
		gs_le64_put(out + OFF_A, cmd->dst);
		gs_le64_put(out + OFF_B, cmd->src);
		gs_le64_put(out + OFF_C, cmd->size);
		le32_put(out + OFF_E, cmd->transfer_flags);
		le32_put(out + OFF_F, cmd->pitch);
		break;
	case GS_OP_DISPATCH:
		gs_le64_put(out + OFF_A, cmd->kernel);
		for (int i = 0; i < 3; i++)
			le32_put(out + OFF_GROUPS + 4 * i, cmd->groups[i]);
		out[OFF_NBIND] = cmd->nbindings;
		out[OFF_NPUSH] = cmd->push_size;
		if (size > GS_ISA_DISPATCH_FIXED)
			memcpy(out + GS_ISA_DISPATCH_FIXED, cmd->args,
			       size - GS_ISA_DISPATCH_FIXED);
		break;
	case GS_OP_COUNT_:
		return 0;
	}
	return size;
}

gs_isa_err gs_isa_validate(const uint8_t *buf, size_t len, size_t *ncmds, size_t *err_offset)
{
	size_t pos = 0, n = 0;
	gs_isa_cmd c;

	for (;;) {
		size_t at = pos;
		gs_isa_err err = gs_isa_decode(buf, len, &pos, &c);
		if (err == GS_ISA_END)
			break;
		if (err != GS_ISA_OK) {
			if (err_offset)
				*err_offset = at;
			return err;
		}
		n++;
	}
	if (ncmds)
		*ncmds = n;
	return GS_ISA_OK;
}

const char *gs_isa_strerror(gs_isa_err err)
{
	switch (err) {
	case GS_ISA_OK:
		return "ok";
	case GS_ISA_END:
		return "end of buffer";
	case GS_ISA_TRUNCATED:
		return "command truncated";
	case GS_ISA_BAD_OP:
		return "unknown opcode";
	case GS_ISA_BAD_SIZE:
		return "command size does not match opcode";
	case GS_ISA_BAD_FLAGS:
		return "unknown flags or nonzero reserved bytes";
	}
	return "unknown ISA error";
}

uint64_t gs_isa_checksum(const void *data, size_t size)
{
	return XXH64(data, size, 0);
}

/* Size of the pattern block FILL copies from: small enough to stay in L2 while it is read
 * again and again, large enough that each memcpy is a long streaming copy (measured: 64 KiB
 * beats 4-16 KiB by ~15% on 64 MiB fills, larger blocks gain nothing). */
#define FILL_BLOCK 65536u

void gs_isa_fill(uint8_t *dst, uint64_t size, uint32_t pattern)
{
	uint8_t b0 = (uint8_t)pattern;

	/* A pattern of four equal bytes is memset, which the C library does best. */
	if (pattern == b0 * UINT32_C(0x01010101)) {
		memset(dst, b0, size);
		return;
	}

	uint8_t seed[64];
	for (size_t i = 0; i < sizeof(seed); i += 4)
		le32_put(seed + i, pattern);
	if (size <= sizeof(seed)) {
		memcpy(dst, seed, size);
		return;
	}

	/* Invariant: dst[0..done) holds the pattern from byte 0, and done is a multiple of 4, so
	 * copying any prefix of it to dst + done continues the pattern in phase. */
	memcpy(dst, seed, sizeof(seed));
	uint64_t done = sizeof(seed);
	while (done < FILL_BLOCK && done < size) {
		uint64_t n = size - done < done ? size - done : done;
		memcpy(dst + done, dst, n);
		done += n;
	}
	while (done < size) {
		uint64_t n = size - done < FILL_BLOCK ? size - done : FILL_BLOCK;
		memcpy(dst + done, dst, n);
		done += n;
	}
}

size_t gs_isa_address_fields(uint8_t op, size_t out[2])
{
	switch ((gs_isa_op)op) {
	case GS_OP_FILL:
		out[0] = GS_ISA_DST_FIELD;
		return 1;
	case GS_OP_COPY:
	case GS_OP_CHECKSUM:
	case GS_OP_TRANSFER:
		out[0] = GS_ISA_DST_FIELD;
		out[1] = GS_ISA_SRC_FIELD;
		return 2;
	default:
		return 0;
	}
}
