/*
 * WDDM bit layouts gpusched honours (docs/wddm.md), with names <-> values.
 * Shared by the daemon, the client library and the CLI.
 */
#ifndef GS_WDDM_H
#define GS_WDDM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DXGK_SUBMITCOMMANDFLAGS */
#define GS_SUBMIT_PAGING               0x001u
#define GS_SUBMIT_PRESENT              0x002u
#define GS_SUBMIT_REDIRECTED_PRESENT   0x004u
#define GS_SUBMIT_NULL_RENDERING       0x008u
#define GS_SUBMIT_FLIP                 0x010u
#define GS_SUBMIT_FLIP_WITH_NO_WAIT    0x020u
#define GS_SUBMIT_CONTEXT_SWITCH       0x040u
#define GS_SUBMIT_RESUBMISSION         0x080u
#define GS_SUBMIT_VIRTUAL_MACHINE_DATA 0x100u
#define GS_SUBMIT_VALID_MASK           0x1ffu
/* Flags only the daemon sets on its own packets. */
#define GS_SUBMIT_DAEMON_ONLY (GS_SUBMIT_PAGING | GS_SUBMIT_CONTEXT_SWITCH)
/* What a client may not set: the daemon's own packets, and the two bits the daemon sets on the
 * packets it runs (Resubmission on a resubmitted one, VirtualMachineData on a VM tenant's). */
#define GS_SUBMIT_CLIENT_REFUSED                                                                   \
	(GS_SUBMIT_DAEMON_ONLY | GS_SUBMIT_RESUBMISSION | GS_SUBMIT_VIRTUAL_MACHINE_DATA)

/* DXGK_PATCHFLAGS */
#define GS_PATCH_PAGING             0x1u
#define GS_PATCH_PRESENT            0x2u
#define GS_PATCH_REDIRECTED_PRESENT 0x4u
#define GS_PATCH_NULL_RENDERING     0x8u
#define GS_PATCH_VALID_MASK         0xfu

/* DXGK_TRANSFERFLAGS */
#define GS_TRANSFER_SWIZZLE            0x01u
#define GS_TRANSFER_UNSWIZZLE          0x02u
#define GS_TRANSFER_ALLOCATION_IS_IDLE 0x04u
#define GS_TRANSFER_START              0x08u
#define GS_TRANSFER_END                0x10u
#define GS_TRANSFER_VALID_MASK         0x1fu

/* DXGK_CONTEXTINFO_CAPS */
#define GS_CTXCAPS_NO_PATCHING_REQUIRED     0x1u
#define GS_CTXCAPS_DRIVER_MANAGES_RESIDENCY 0x2u
#define GS_CTXCAPS_USE_IOMMU                0x4u
#define GS_CTXCAPS_VALID_MASK               0x7u

/* DXGK_CONTEXTINFO, field by field: what a context declares at creation. */
typedef struct gs_context_info {
	uint32_t dma_buffer_size;
	uint32_t dma_buffer_segment_set; /* aperture segments only; 0 = system memory */
	uint32_t dma_buffer_private_data_size;
	uint32_t allocation_list_size; /* 256 for a GDI context */
	uint32_t patch_location_list_size;
	uint32_t reserved; /* must be 0 */
	uint32_t caps;     /* GS_CTXCAPS_* */
	uint32_t paging_companion_node_id;
} gs_context_info;

/* Context create flags */
#define GS_CTX_SYSTEM               0x1u
#define GS_CTX_GDI                  0x2u
#define GS_CTX_VIRTUAL_ADDRESSING   0x4u
#define GS_CTX_VALID_MASK           0x7u
#define GS_GDI_ALLOCATION_LIST_SIZE 256u

/* Allocation priorities */
#define GS_ALLOC_PRIORITY_MINIMUM 0x28000000u
#define GS_ALLOC_PRIORITY_LOW     0x50000000u
#define GS_ALLOC_PRIORITY_NORMAL  0x78000000u
#define GS_ALLOC_PRIORITY_HIGH    0xA0000000u
#define GS_ALLOC_PRIORITY_MAXIMUM 0xC8000000u

/* Allocation flags (gpusched's own) */
#define GS_ALLOC_TILED      0x1u
#define GS_ALLOC_DISPLAY    0x2u /* a display surface: the target of Present/RedirectedPresent */
#define GS_ALLOC_VALID_MASK 0x3u

/* D3DDDI_SEGMENTPREFERENCE: five (SegmentId:5, Direction:1) pairs, then 2 reserved bits. */
#define GS_SEGPREF_SLOTS         5
#define GS_SEGPREF_RESERVED_MASK 0xC0000000u
#define GS_SEGMENT_ID_MAX        31u

typedef struct gs_segpref {
	uint8_t segment[GS_SEGPREF_SLOTS];   /* 1..31; 0 ends the list */
	uint8_t direction[GS_SEGPREF_SLOTS]; /* 0 allocator's choice, 1 top-down */
} gs_segpref;

uint32_t gs_segpref_encode(const gs_segpref *p);
void gs_segpref_decode(uint32_t value, gs_segpref *out);

typedef enum gs_segpref_check {
	GS_SEGPREF_OK = 0,
	GS_SEGPREF_RESERVED = 1,    /* bits 30..31 set */
	GS_SEGPREF_UNSUPPORTED = 2, /* a preferred id is not in the supported set */
	GS_SEGPREF_AFTER_END = 3,   /* a non-zero id after a zero (the list ended) */
} gs_segpref_check;

/* Checks a preference Value against a supported segment set (bit n = segment id n). */
gs_segpref_check gs_segpref_validate(uint32_t value, uint32_t supported_set);

/*
 * Flag names. Each table maps bit -> name as written in docs/wddm.md ("NullRendering").
 * gs_flags_format writes "Present|NullRendering" (or "none"); unknown bits appear as hex.
 * gs_flags_parse accepts a number (decimal or 0x hex) or names separated by ',' or '|'
 * (case-insensitive); returns 0 on success, -1 with *bad pointing at the unknown name.
 */
typedef struct gs_flag_name {
	uint32_t bit;
	const char *name;
} gs_flag_name;

extern const gs_flag_name gs_submit_flag_names[];
extern const gs_flag_name gs_patch_flag_names[];
extern const gs_flag_name gs_transfer_flag_names[];

size_t gs_flags_format(const gs_flag_name *table, uint32_t value, char *buf, size_t cap);
int gs_flags_parse(const gs_flag_name *table, const char *text, uint32_t *out, const char **bad);

/* The patch flags the daemon uses for a packet with these submit flags. */
uint32_t gs_patch_flags_for_submit(uint32_t submit_flags);

/* Scheduling priority classes (D3DKMT_SCHEDULINGPRIORITYCLASS) */
#define GS_PRIORITY_CLASS_IDLE         0u
#define GS_PRIORITY_CLASS_BELOW_NORMAL 1u
#define GS_PRIORITY_CLASS_NORMAL       2u
#define GS_PRIORITY_CLASS_ABOVE_NORMAL 3u
#define GS_PRIORITY_CLASS_HIGH         4u
#define GS_PRIORITY_CLASS_REALTIME     5u
#define GS_PRIORITY_CLASS_MAX          GS_PRIORITY_CLASS_REALTIME
const char *gs_priority_class_name(uint32_t cls);

#ifdef __cplusplus
}
#endif
#endif
