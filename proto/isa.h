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
 *   DISPATCH  size 32 + 24 * n + p rounded up to 8 (the size field says it; at most 544)
 *             runs a user kernel (KernelCreateRequest) over a grid of work groups:
 *             +8 u64 kernel handle, +16 u32 group count x, +20 u32 y, +24 u32 z,
 *             +28 u8 n bindings (<= 16), +29 u8 p push-constant bytes (<= 128, a multiple
 *             of 4), +30 u16 zero; then n bindings of 24 bytes: +0 u32 binding number (set 0),
 *             +4 u32 allocation-list index, +8 u64 byte offset in that allocation, +16 u64
 *             range in bytes; then the p bytes of push constants, zero-padded to a multiple
 *             of 8. Bindings name allocation-list entries, not addresses: nothing of a
 *             DISPATCH is patched, and the engine binds each allocation where it lives when
 *             the command runs. Group counts of 0 dispatch nothing.
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
	GS_OP_DISPATCH = 7, /* a user kernel (variable size) */
	GS_OP_COUNT_        /* not an opcode */
} gs_isa_op;

#define GS_ISA_HEADER_SIZE 8u
/* DXGK_TRANSFERFLAGS bits as TRANSFER carries them (proto/wddm.h has the same values). */
#define GS_ISA_TRANSFER_SWIZZLE    0x01u
#define GS_ISA_TRANSFER_UNSWIZZLE  0x02u
#define GS_ISA_TRANSFER_FLAGS_MASK 0x1fu
#define GS_SPIN_NONPREEMPTIBLE     0x1u

/* DISPATCH's variable part. */
#define GS_ISA_DISPATCH_FIXED    32u  /* bytes before the bindings */
#define GS_ISA_DISPATCH_BINDING  24u  /* bytes of one binding */
#define GS_ISA_DISPATCH_MAX_BIND 16u  /* bindings at most */
#define GS_ISA_DISPATCH_MAX_PUSH 128u /* push-constant bytes at most */
#define GS_ISA_DISPATCH_MAX_SIZE                                                                   \
	(GS_ISA_DISPATCH_FIXED + GS_ISA_DISPATCH_MAX_BIND * GS_ISA_DISPATCH_BINDING +              \
	 GS_ISA_DISPATCH_MAX_PUSH)

/* One binding of a DISPATCH. */
typedef struct gs_isa_binding {
	uint32_t binding;     /* binding number in descriptor set 0 */
	uint32_t alloc_index; /* index in the packet's allocation list */
	uint64_t offset;      /* bytes into the allocation */
	uint64_t range;       /* bytes the kernel sees */
} gs_isa_binding;

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
	/* DISPATCH */
	uint64_t kernel;     /* kernel handle */
	uint32_t groups[3];  /* work-group counts x, y, z */
	uint8_t nbindings;   /* bindings that follow the fixed part */
	uint8_t push_size;   /* push-constant bytes after the bindings */
	const uint8_t *args; /* the bindings, then the push constants (zero-padded to 8): in
	                      * the decoded buffer; what gs_isa_encode copies */
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
/* Size in bytes of a command of this opcode, or 0 for an unknown opcode and for DISPATCH,
 * whose size depends on its bindings and push constants (gs_isa_cmd_len). */
size_t gs_isa_cmd_size(uint8_t op);
/* Size in bytes of this command as encoded: gs_isa_cmd_size, or DISPATCH's own. */
size_t gs_isa_cmd_len(const gs_isa_cmd *cmd);
/* Bytes of DISPATCH's variable part (bindings, then push constants padded to 8). */
size_t gs_isa_dispatch_args_len(uint8_t nbindings, uint8_t push_size);
/* Binding i (< cmd->nbindings) of a decoded DISPATCH. */
void gs_isa_dispatch_binding(const gs_isa_cmd *cmd, unsigned i, gs_isa_binding *out);
/* The push constants of a decoded DISPATCH (cmd->push_size bytes). */
const uint8_t *gs_isa_dispatch_push(const gs_isa_cmd *cmd);
/* Writes DISPATCH's variable part into out (cap bytes, at least gs_isa_dispatch_args_len):
 * the bindings, then push_size bytes of push, zero-padded. Returns the bytes written, or 0
 * when it does not fit or the counts exceed the maxima. Set cmd->args to out. */
size_t gs_isa_dispatch_args(const gs_isa_binding *bindings, uint8_t nbindings, const void *push,
                            uint8_t push_size, uint8_t *out, size_t cap);

/* Name of an opcode ("FILL"), or "?" */
const char *gs_isa_op_name(uint8_t op);

/* Decodes the command at *pos; on GS_ISA_OK advances *pos past it. */
gs_isa_err gs_isa_decode(const uint8_t *buf, size_t len, size_t *pos, gs_isa_cmd *out);

/* Encodes `cmd` into out (cap bytes). Returns bytes written, or 0 if it does not fit or the
 * opcode is unknown. A DISPATCH copies gs_isa_dispatch_args_len bytes from cmd->args. */
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
