/*
 * Video memory: segments backed by real memory, one allocator ("heap") per segment, placement
 * by D3DDDI_SEGMENTPREFERENCE, and a compaction planner.
 *
 * The heap is pure bookkeeping of byte ranges: it never touches segment memory, so it can model
 * a 64 GiB segment as cheaply as a 64 KiB one. Free extents are kept in two balanced trees over
 * the same nodes, one ordered by offset (to find the neighbours a freed range merges with) and
 * one by (size, offset) (to find the best fit), so allocating and freeing cost O(log n) in the
 * number of free extents however many allocations are live.
 */
#ifndef GS_VIDMM_H
#define GS_VIDMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every allocation starts on, and is rounded up to, this many bytes. */
#define GS_VIDMM_ALIGN 256u

/* One free extent of a segment. */
typedef struct gs_extent {
	uint64_t offset;
	uint64_t size;
} gs_extent;

struct gs_extent_node;
struct gs_extent_slab;

/*
 * Invariants: free extents never overlap and are never adjacent (a freed range merges with its
 * neighbours); every offset and size is a multiple of GS_VIDMM_ALIGN; used + the sum of the
 * free extents == size. gs_heap_check verifies all of them.
 */
typedef struct gs_heap {
	struct gs_extent_node *by_offset; /* tree root, key offset */
	struct gs_extent_node *by_size;   /* tree root, key (size, offset) */
	struct gs_extent_node *spare;     /* recycled nodes */
	struct gs_extent_slab *slabs;     /* where all nodes live; freed by gs_heap_fini */
	size_t nfree;                     /* free extents */
	uint64_t size; /* managed: the size given, in whole GS_VIDMM_ALIGN units */
	uint64_t used;
} gs_heap;

int gs_heap_init(gs_heap *h, uint64_t size);
void gs_heap_fini(gs_heap *h);
/*
 * Best fit: the smallest free extent that holds size (rounded up to GS_VIDMM_ALIGN).
 * top_down = false takes the low end of the lowest such extent; true takes the high end of the
 * highest. Returns 0, or -1 when no extent is large enough.
 */
int gs_heap_alloc(gs_heap *h, uint64_t size, bool top_down, uint64_t *offset);
/* Takes exactly [offset, offset + size) (size rounded up), which must be free: how a planned
 * move or a restored placement claims its destination. Returns 0, or -1 when any of it is in
 * use or offset is not aligned. */
int gs_heap_alloc_at(gs_heap *h, uint64_t offset, uint64_t size);
/* Returns a range from gs_heap_alloc/gs_heap_alloc_at (same size as asked for). */
void gs_heap_free(gs_heap *h, uint64_t offset, uint64_t size);
/* The largest free extent, O(log n). */
uint64_t gs_heap_largest_free(const gs_heap *h);
/* Free extents in offset order: writes up to cap of them and returns how many there are. */
size_t gs_heap_extents(const gs_heap *h, gs_extent *out, size_t cap);
/* Checks every invariant above and both trees' order and balance; 0 when all hold. For tests
 * and debug assertions: it walks the whole heap. */
int gs_heap_check(const gs_heap *h);

/*
 * Compaction planning. A live block is an allocated range of one segment; movable is false for
 * an allocation that must stay where it is (referenced by a running or ready packet).
 */
typedef struct gs_live_block {
	uint64_t offset;
	uint64_t size; /* as allocated; rounded up to GS_VIDMM_ALIGN like the heap does */
	bool movable;
} gs_live_block;

/* Move the block blocks[block] from offset from to offset to; size is the rounded size. */
typedef struct gs_move {
	size_t block;
	uint64_t from, to, size;
} gs_move;

/*
 * gs_heap_compact_plan: a pure function that plans moves sliding movable blocks towards offset
 * 0. blocks must be sorted by offset (gs_live_blocks_sort), not overlap, lie within
 * [0, heap_size) and start on GS_VIDMM_ALIGN; they are all the live blocks of the segment, so
 * whatever lies between them is free.
 *
 * Immovable blocks are barriers: they cut the segment into regions, and a block never moves
 * across one. Moves only go down (to < from); apply them in the order given: each destination is
 * free once the moves before it are done, though it may overlap the block's own old range, so
 * copy bytes with memmove semantics (or through a staging buffer).
 *
 * want == 0: full compaction. Every movable block slides down as far as it can, so each region's
 * free space becomes one extent at its top.
 * want > 0: the cheapest plan (fewest bytes moved) that leaves one free extent of at least want
 * bytes (rounded up): a run of consecutive blocks of one region slides down onto the free space
 * before it, merging the gaps around them. No moves when such an extent already exists.
 *
 * On success returns 0 and sets *nmoves; *largest_after (may be NULL) receives the largest free
 * extent once the plan is applied. -ENOBUFS: more than cap moves are needed; *nmoves says how
 * many. -ENOSPC: want cannot be met by moving (too little free space between immovable blocks);
 * no moves. -EINVAL: blocks out of order, overlapping, misaligned or out of range.
 */
int gs_heap_compact_plan(const gs_live_block *blocks, size_t n, uint64_t heap_size, uint64_t want,
                         gs_move *moves, size_t cap, size_t *nmoves, uint64_t *largest_after);
/* Sorts blocks by offset in place, as gs_heap_compact_plan expects. */
void gs_live_blocks_sort(gs_live_block *blocks, size_t n);

typedef struct gs_segment {
	uint32_t id;
	char name[64];
	int kind; /* Gpusched__V1__SegmentKind */
	bool cpu_visible;
	uint64_t size;
	uint8_t *mem;
	gs_heap heap;
} gs_segment;

int gs_segment_init(gs_segment *s, uint32_t id, const char *name, int kind, uint64_t size,
                    bool cpu_visible);
void gs_segment_fini(gs_segment *s);
/* Zero-fills a range being handed to a new owner, so no tenant reads another's old bytes. */
void gs_segment_scrub(gs_segment *s, uint64_t offset, uint64_t size);

/*
 * Placement order: each preferred segment (D3DDDI_SEGMENTPREFERENCE slots, most preferred first,
 * up to the first 0) with its direction, then every other segment of supported_set (0 = all)
 * bottom-up, memory segments before aperture segments, each in configured order. A preferred id
 * that names no configured segment, lies outside a non-zero supported_set, or repeats an earlier
 * slot, is skipped. The scheduler uses the same order to decide where to make room when
 * placement fails.
 */
typedef struct gs_place_step {
	uint32_t index; /* into segs */
	bool top_down;
	bool preferred; /* came from a preference slot, not the fallback */
} gs_place_step;

#define GS_PLACE_STEPS_MAX 32u

/* Writes the placement order into out (cap >= nsegs always suffices); returns its length. */
size_t gs_vidmm_place_order(const gs_segment *segs, uint32_t nsegs, uint32_t supported_set,
                            uint32_t preference, gs_place_step *out, size_t cap);

/* Placement: the first step of gs_vidmm_place_order whose heap has room. Returns the segment
 * index in segs, or -1 when nothing has room. */
int gs_vidmm_place(gs_segment *segs, uint32_t nsegs, uint32_t supported_set, uint32_t preference,
                   uint64_t size, uint64_t *offset);

#endif
