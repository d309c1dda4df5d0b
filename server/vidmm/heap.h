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
#ifndef GSD_VIDMM_HEAP_H
#define GSD_VIDMM_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every allocation starts on, and is rounded up to, this many bytes (GSD_MEMORY_ALIGN of
 * core/util.h, what quotas count: heap.c checks they agree). */
#define GSD_HEAP_ALIGN 256u

/* v rounded up to a whole number of GSD_HEAP_ALIGN units (v well below 2^64). */
static inline uint64_t gsd_heap_round(uint64_t v)
{
	return (v + GSD_HEAP_ALIGN - 1) & ~(uint64_t)(GSD_HEAP_ALIGN - 1);
}

/*
 * Checks one block of a list sorted by offset: non-empty, aligned, inside [0, heap_size), and
 * starting at or after *end, the rounded end of the block before it (0 for the first). Moves
 * *end past this block. A list whose every block passes holds no overlaps.
 */
bool gsd_heap_block_fits(uint64_t offset, uint64_t size, uint64_t heap_size, uint64_t *end);

/* One free extent of a segment. */
typedef struct gsd_extent {
	uint64_t offset;
	uint64_t size;
} gsd_extent;

struct gsd_extent_node;
struct gsd_extent_slab;

/*
 * Invariants: free extents never overlap and are never adjacent (a freed range merges with its
 * neighbours); every offset and size is a multiple of GSD_HEAP_ALIGN; used + the sum of the
 * free extents == size. gsd_heap_check verifies all of them.
 */
typedef struct gsd_heap {
	struct gsd_extent_node *by_offset; /* tree root, key offset */
	struct gsd_extent_node *by_size;   /* tree root, key (size, offset) */
	struct gsd_extent_node *spare;     /* recycled nodes */
	struct gsd_extent_slab *slabs;     /* where all nodes live; freed by gsd_heap_fini */
	size_t nfree;                      /* free extents */
	uint64_t size; /* managed: the size given, in whole GSD_HEAP_ALIGN units */
	uint64_t used;
} gsd_heap;

int gsd_heap_init(gsd_heap *h, uint64_t size);
void gsd_heap_fini(gsd_heap *h);
/*
 * Best fit: the smallest free extent that holds size (rounded up to GSD_HEAP_ALIGN).
 * top_down = false takes the low end of the lowest such extent; true takes the high end of the
 * highest. Returns 0, or -1 when no extent is large enough.
 */
int gsd_heap_alloc(gsd_heap *h, uint64_t size, bool top_down, uint64_t *offset);
/* Takes exactly [offset, offset + size) (size rounded up), which must be free: how a planned
 * move or a restored placement claims its destination. Returns 0, or -1 when any of it is in
 * use or offset is not aligned. */
int gsd_heap_alloc_at(gsd_heap *h, uint64_t offset, uint64_t size);
/* Returns a range from gsd_heap_alloc/gsd_heap_alloc_at (same size as asked for). */
void gsd_heap_free(gsd_heap *h, uint64_t offset, uint64_t size);
/* The largest free extent, O(log n). */
uint64_t gsd_heap_largest_free(const gsd_heap *h);
/* Free extents in offset order: writes up to cap of them and returns how many there are. */
size_t gsd_heap_extents(const gsd_heap *h, gsd_extent *out, size_t cap);
/* Checks every invariant above and both trees' order and balance; 0 when all hold. For tests
 * and debug assertions: it walks the whole heap. */
int gsd_heap_check(const gsd_heap *h);

/*
 * Compaction planning. A live block is an allocated range of one segment; movable is false for
 * an allocation that must stay where it is (referenced by a running or ready packet).
 */
typedef struct gsd_live_block {
	uint64_t offset;
	uint64_t size; /* as allocated; rounded up to GSD_HEAP_ALIGN like the heap does */
	bool movable;
} gsd_live_block;

/* Move the block blocks[block] from offset from to offset to; size is the rounded size. */
typedef struct gsd_move {
	size_t block;
	uint64_t from, to, size;
} gsd_move;

/*
 * gsd_heap_compact_plan: a pure function that plans moves sliding movable blocks towards offset
 * 0. blocks must be sorted by offset (gsd_live_blocks_sort), not overlap, lie within
 * [0, heap_size) and start on GSD_HEAP_ALIGN; they are all the live blocks of the segment, so
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
int gsd_heap_compact_plan(const gsd_live_block *blocks, size_t n, uint64_t heap_size, uint64_t want,
                          gsd_move *moves, size_t cap, size_t *nmoves, uint64_t *largest_after);
/* Sorts blocks by offset in place, as gsd_heap_compact_plan expects. */
void gsd_live_blocks_sort(gsd_live_block *blocks, size_t n);

/*
 * The regions both planners work in (this one and the memory manager's choice of victims): the
 * movable blocks [s, e) between two immovable blocks (or a segment edge); lo is where the
 * region's space starts and hi where it ends. Gap i (s <= i <= e) is the free space just before
 * block i, from gsd_heap_gap_start to block i (to hi for gap e, the space after the last block).
 */
typedef struct gsd_heap_region {
	size_t s, e;
	uint64_t lo, hi;
} gsd_heap_region;

uint64_t gsd_heap_gap_start(const gsd_live_block *b, const gsd_heap_region *r, size_t i);
uint64_t gsd_heap_gap(const gsd_live_block *b, const gsd_heap_region *r, size_t i);

/* Calls fn for each region of the sorted blocks b[0..n) in offset order; stops at the first
 * non-zero return and returns it (0 once every region was seen). */
typedef int (*gsd_heap_region_fn)(const gsd_live_block *b, const gsd_heap_region *r, void *arg);
int gsd_heap_regions_each(const gsd_live_block *b, size_t n, uint64_t heap_size,
                          gsd_heap_region_fn fn, void *arg);

/*
 * The two-pointer scan both planners run over a region: for each first block k, the shortest
 * window of blocks k..hi-1 whose hole reaches need. The hole is the gaps k..hi, and also the
 * blocks' own bytes when they are evicted (evict) rather than slid down. A longer window from the
 * same k only adds to the hole, so its end never moves back: O(blocks) per region. enter and
 * leave say which blocks are in the window (they join at its end and leave at its front);
 * window is called for each first block k that has such a window, with its count blocks and the
 * offset where its hole starts (gsd_heap_gap_start of k).
 */
typedef struct gsd_heap_window {
	uint64_t need;
	bool evict;
	void (*enter)(void *arg, size_t i);
	void (*leave)(void *arg, size_t i);
	void (*window)(void *arg, const gsd_heap_region *r, size_t k, size_t count, uint64_t start);
	void *arg;
} gsd_heap_window;

void gsd_heap_window_scan(const gsd_live_block *b, const gsd_heap_region *r,
                          const gsd_heap_window *w);

typedef struct gsd_segment {
	uint32_t id;
	char name[64];
	int kind; /* Gpusched__V1__SegmentKind */
	bool cpu_visible;
	uint64_t size;
	/* Its memory, made by the adapter's backend (NULL until then); the memory manager reaches
	 * it through the backend (vidmm.c), never through a pointer of its own. */
	const struct gsd_mem_segment *backing;
	gsd_heap heap;
} gsd_segment;

/* The bookkeeping of a segment; its memory (backing) comes from the adapter's backend. */
int gsd_segment_init(gsd_segment *s, uint32_t id, const char *name, int kind, uint64_t size,
                     bool cpu_visible);
void gsd_segment_fini(gsd_segment *s);

/*
 * Placement order: each preferred segment (D3DDDI_SEGMENTPREFERENCE slots, most preferred first,
 * up to the first 0) with its direction, then every other segment of supported_set (0 = all)
 * bottom-up, memory segments before aperture segments, each in configured order. A preferred id
 * that names no configured segment, lies outside a non-zero supported_set, or repeats an earlier
 * slot, is skipped. The scheduler uses the same order to decide where to make room when
 * placement fails.
 */
typedef struct gsd_place_step {
	uint32_t index; /* into segs */
	bool top_down;
	bool preferred; /* came from a preference slot, not the fallback */
} gsd_place_step;

#define GSD_PLACE_STEPS_MAX 32u

/* Writes the placement order into out (cap >= nsegs always suffices); returns its length. */
size_t gsd_place_order(const gsd_segment *segs, uint32_t nsegs, uint32_t supported_set,
                       uint32_t preference, gsd_place_step *out, size_t cap);

/* Placement: the first step of gsd_place_order whose heap has room. Returns the segment
 * index in segs, or -1 when nothing has room. */
int gsd_place(gsd_segment *segs, uint32_t nsegs, uint32_t supported_set, uint32_t preference,
              uint64_t size, uint64_t *offset);

#endif
