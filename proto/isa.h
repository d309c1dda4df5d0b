/*
 * The gpusched DMA-buffer instruction set: part of the wire contract, shared by the client's
 * DMA-buffer builder and the daemon's engines. One encoding, written once (isa.c).
 *
 * A DMA buffer is a sequence of commands, all fields little-endian. Every command starts with
 * an 8-byte header:
 *
 *   byte 0     opcode (gs_isa_op)
 *   byte 1     flags (per opcode; unknown bits must be zero)
 *   bytes 2-3  command size in bytes, including the header (must equal the opcode's size)
 *   bytes 4-7  reserved, zero
 *
 * Commands (offsets from the command start):
 *
 *   NOP       size 8
 *   FILL      size 32  +8 u64 dst address, +16 u64 size, +24 u32 pattern, +28 u32 zero
 *             writes the 32-bit pattern repeatedly (size need not be a multiple of 4: the
 *             last bytes get the pattern's first bytes)
 *   COPY      size 32  +8 u64 dst address, +16 u64 src address, +24 u64 size
 *             (ranges may overlap: memmove semantics)
 *   CHECKSUM  size 32  +8 u64 dst address, +16 u64 src address, +24 u64 size
 *             writes the 8-byte XXH64 (seed 0) of the source bytes at dst
 *   SPIN      size 16  +8 u64 microseconds of engine time
 *             flag 0x1 NONPREEMPTIBLE: the engine cannot stop inside it (models a long shader)
 *   SIGNAL    size 24  +8 u64 sync object handle, +16 u64 value
 *             signals a monitored fence to `value` when the engine reaches it
 *   TRANSFER  size 40  +8 u64 dst address, +16 u64 src address, +24 u64 size,
 *             +32 u32 DXGK_TRANSFERFLAGS Value (bits 0..4; reserved bits zero; not both
 *             Swizzle and Unswizzle), +36 u32 pitch (bytes per row of the tiled layout,
 *             server/swizzle.h: a non-zero multiple of 64 when Swizzle or Unswizzle is set,
 *             else 0). Copies size bytes, swizzling (linear src -> tiled dst) or unswizzling
 *             (tiled src -> linear dst) when asked. A plain transfer may overlap (memmove
 *             semantics: compaction slides allocations within a segment); a converting one
 *             must not.
 *             Daemon only: it builds paging buffers out of TRANSFER commands (submit flag
 *             Paging), and a client DMA buffer that contains one is refused.
 *
 * Addresses are GPU addresses: (segment id << 40) | byte offset in the segment. The client
 * writes 0 there and lists a patch location at the field's offset; the daemon writes the
 * allocation's current address (plus the patch's allocation offset) before each
 * (re)submission. An access outside the allocations of the packet's allocation list, or a
 * write to an allocation not listed as written, faults the packet (DMA_PAGE_FAULTED).
 */
#ifndef GS_ISA_H
#define GS_ISA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gs_isa_op {
	GS_OP_NOP = 0,
	GS_OP_FILL = 1,
	GS_OP_COPY = 2,
	GS_OP_CHECKSUM = 3,
	GS_OP_SPIN = 4,
	GS_OP_SIGNAL = 5,
	GS_OP_TRANSFER = 6, /* daemon only (paging buffers) */
	GS_OP_COUNT_        /* not an opcode */
} gs_isa_op;

#define GS_ISA_HEADER_SIZE 8u
/* DXGK_TRANSFERFLAGS bits as TRANSFER carries them (proto/wddm.h has the same values). */
#define GS_ISA_TRANSFER_SWIZZLE    0x01u
#define GS_ISA_TRANSFER_UNSWIZZLE  0x02u
#define GS_ISA_TRANSFER_FLAGS_MASK 0x1fu
#define GS_SPIN_NONPREEMPTIBLE     0x1u

/* Byte offsets of the address fields inside a command (patch locations point here). */
#define GS_ISA_DST_FIELD 8u
#define GS_ISA_SRC_FIELD 16u

#define GS_ADDR_SEGMENT_SHIFT 40u
#define GS_ADDR_OFFSET_MASK   ((UINT64_C(1) << GS_ADDR_SEGMENT_SHIFT) - 1u)

static inline uint64_t gs_addr_make(uint32_t segment, uint64_t offset)
{
	return ((uint64_t)segment << GS_ADDR_SEGMENT_SHIFT) | (offset & GS_ADDR_OFFSET_MASK);
}
static inline uint32_t gs_addr_segment(uint64_t addr)
{
	return (uint32_t)(addr >> GS_ADDR_SEGMENT_SHIFT);
}
static inline uint64_t gs_addr_offset(uint64_t addr)
{
	return addr & GS_ADDR_OFFSET_MASK;
}

/* One decoded command. Fields not used by the opcode are zero. */
typedef struct gs_isa_cmd {
	uint8_t op;
	uint8_t flags;
	uint64_t dst;            /* FILL, COPY, CHECKSUM, TRANSFER */
	uint64_t src;            /* COPY, CHECKSUM, TRANSFER */
	uint64_t size;           /* FILL, COPY, CHECKSUM, TRANSFER: bytes */
	uint32_t pattern;        /* FILL */
	uint64_t micros;         /* SPIN */
	uint64_t sync;           /* SIGNAL */
	uint64_t value;          /* SIGNAL */
	uint32_t transfer_flags; /* TRANSFER: DXGK_TRANSFERFLAGS Value */
	uint32_t pitch;          /* TRANSFER: tiled layout pitch (Swizzle/Unswizzle) */
} gs_isa_cmd;

typedef enum gs_isa_err {
	GS_ISA_OK = 0,
	GS_ISA_END = 1,        /* no more commands (pos == len) */
	GS_ISA_TRUNCATED = -1, /* the command runs past the end of the buffer */
	GS_ISA_BAD_OP = -2,    /* unknown opcode */
	GS_ISA_BAD_SIZE = -3,  /* size field does not match the opcode */
	GS_ISA_BAD_FLAGS = -4, /* unknown flag bits, or reserved header/field bytes not zero */
} gs_isa_err;

/* The address fields of a command of this opcode (offsets from the command start, written to
 * out[0..n-1], n <= 2): the only places a patch location may point at. Returns n. */
size_t gs_isa_address_fields(uint8_t op, size_t out[2]);
/* Size in bytes of a command of this opcode, or 0 for an unknown opcode. */
size_t gs_isa_cmd_size(uint8_t op);

/* Name of an opcode ("FILL"), or "?" */
const char *gs_isa_op_name(uint8_t op);

/* Decodes the command at *pos; on GS_ISA_OK advances *pos past it. */
gs_isa_err gs_isa_decode(const uint8_t *buf, size_t len, size_t *pos, gs_isa_cmd *out);

/* Encodes `cmd` into out (cap bytes). Returns bytes written, or 0 if it does not fit or the
 * opcode is unknown. */
size_t gs_isa_encode(const gs_isa_cmd *cmd, uint8_t *out, size_t cap);

/* Validates a whole buffer. Returns GS_ISA_OK (== 0) and the command count in *ncmds, or the
 * first error and its byte offset in *err_offset. */
gs_isa_err gs_isa_validate(const uint8_t *buf, size_t len, size_t *ncmds, size_t *err_offset);

const char *gs_isa_strerror(gs_isa_err err);

/* Little-endian helpers, also used for patching. */
static inline void gs_le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t gs_le64_get(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* The checksum CHECKSUM computes: XXH64 with seed 0. */
uint64_t gs_isa_checksum(const void *data, size_t size);

/* FILL's semantics on host memory (shared by the engine and tests). */
void gs_isa_fill(uint8_t *dst, uint64_t size, uint32_t pattern);

#ifdef __cplusplus
}
#endif
#endif
