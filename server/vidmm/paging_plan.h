/*
 * Paging plans: pure functions the scheduler calls to build paging buffers and make room in a
 * segment. Nothing here touches daemon state or memory; inputs describe the situation and the
 * outputs say what to do.
 *
 *  - gsd_transfer_split cuts one allocation's transfer into sub-transfers with the
 *    DXGK_TRANSFERFLAGS each must carry;
 *  - gsd_pick_victims / gsd_pick_victims_contiguous choose allocations to evict from a segment;
 *  - gsd_should_evict_for_preference says whether an allocation's priority justifies evicting
 *    those victims rather than falling back to a less preferred segment.
 */
#ifndef GSD_PAGING_PLAN_H
#define GSD_PAGING_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- transfers ---- */

typedef struct gsd_subtransfer {
	uint64_t offset; /* within the allocation */
	uint64_t size;
	uint32_t flags; /* DXGK_TRANSFERFLAGS */
} gsd_subtransfer;

/* Flags a caller may ask for on every piece; Start/End are the split's to set. */
#define GSD_TRANSFER_BASE_MASK 0x07u /* Swizzle | Unswizzle | AllocationIsIdle */

/* How many pieces gsd_transfer_split makes: ceil(size / chunk); 0 for size or chunk 0. */
uint64_t gsd_transfer_pieces(uint64_t size, uint64_t chunk);

/*
 * Splits a transfer of size bytes into pieces of chunk bytes (the last one shorter), in offset
 * order. Every piece carries base_flags; the first also TransferStart (0x8) and the last also
 * TransferEnd (0x10), so a transfer that fits in one piece carries both. Reserved bits are never
 * set. For a Swizzle or Unswizzle transfer pass a chunk from gsd_swizzle_chunk so every piece
 * converts on its own.
 *
 * Returns the number of pieces written, or -EINVAL (size or chunk 0; base_flags outside
 * GSD_TRANSFER_BASE_MASK; Swizzle and Unswizzle both set, a contradiction), or -ENOBUFS when more
 * than cap pieces are needed (nothing written; gsd_transfer_pieces says how many).
 */
int64_t gsd_transfer_split(uint64_t size, uint64_t chunk, uint32_t base_flags, gsd_subtransfer *out,
                           size_t cap);

/* ---- victims ---- */

/*
 * One allocation resident in the segment that needs room. pinned: referenced by a running or
 * ready packet, so it must stay (never chosen). priority: the D3DDDI allocation priority, 0
 * read as NORMAL. last_use: any stamp that grows with time (ns, a packet sequence): smaller =
 * used longer ago. Sizes are counted rounded up to GSD_HEAP_ALIGN, as the heap holds them.
 */
typedef struct gsd_victim_candidate {
	uint64_t offset;
	uint64_t size;
	uint32_t priority;
	uint64_t last_use;
	bool pinned;
} gsd_victim_candidate;

/*
 * Chooses victims whose sizes add up to at least need_bytes (the room still missing beyond what
 * is free already): unpinned candidates by lowest priority first, then least recently used, then
 * lowest index. Once that prefix reaches need_bytes, any victim it no longer needs is spared,
 * trying from the most valued back to the least, so a big victim late in the order does not drag
 * small ones along for nothing. Candidates may come in any order.
 *
 * out (cap >= n; also used as scratch) receives the indices into c, in eviction order; *nout
 * their count. Returns 0 (need_bytes 0: no victims), -ENOSPC when all unpinned candidates
 * together are too small (*nout 0: evicting would not help), -EINVAL when cap < n.
 *
 * This is room in bytes; the heap may still be too fragmented for one allocation of that size,
 * which the compaction planner (gsd_heap_compact_plan) or the contiguous variant settles.
 */
int gsd_pick_victims(const gsd_victim_candidate *c, size_t n, uint64_t need_bytes, size_t *out,
                     size_t cap, size_t *nout);

/*
 * Best effort for an allocator that needs need_bytes in one piece: chooses a run of adjacent
 * victims whose eviction, with the free gaps around them, leaves one free hole of at least
 * need_bytes (rounded up to GSD_HEAP_ALIGN). c must list every live allocation of the segment
 * (pinned ones too: they bound the hole) sorted by offset; what lies between them is free.
 *
 * Among all such runs it takes the one whose highest victim priority is lowest, then the one
 * whose most recently used victim was used longest ago (LRU), then the one evicting the fewest
 * bytes, then the lowest in the segment. out (cap >= n; also scratch)
 * receives the victims' indices in offset order, *nout their count, *hole_offset where the hole
 * starts. Returns 0 (no victims when a gap is big enough already), -ENOSPC when no run of
 * unpinned allocations can make such a hole (then fall back to gsd_pick_victims plus compaction),
 * -ENOMEM, or -EINVAL for cap < n or candidates out of order, overlapping, misaligned or outside
 * the segment.
 */
int gsd_pick_victims_contiguous(const gsd_victim_candidate *c, size_t n, uint64_t segment_size,
                                uint64_t need_bytes, size_t *out, size_t cap, size_t *nout,
                                uint64_t *hole_offset);

/* The highest (effective) priority among the chosen victims; 0 when there are none. */
uint32_t gsd_victims_max_priority(const gsd_victim_candidate *c, const size_t *idx, size_t n);

/* ---- priorities ---- */

/* A priority as VidMm weighs it: 0 (invalid, never stored) reads as NORMAL. */
uint32_t gsd_alloc_priority_effective(uint32_t priority);

/*
 * The rule for "a higher allocation priority makes VidMm honour preferences harder": when an
 * allocation does not fit in its preferred segment, VidMm evicts others from that segment rather
 * than falling back to a less preferred one if and only if
 *
 *   - the new allocation's priority is HIGH (0xA0000000) or more, and
 *   - every victim's priority is strictly lower than the new allocation's.
 *
 * Below HIGH it falls back first (eviction is then only the last resort, once no supported
 * segment has room), and an allocation never evicts one of equal or higher priority to keep its
 * preference. With no victims it returns whether the priority alone qualifies.
 *
 * Because both pickers take low priorities first (gsd_pick_victims) or minimise the highest
 * priority of the run (gsd_pick_victims_contiguous), checking their result is exact: when it
 * contains a victim of priority >= the new one, no set of strictly lower victims would do.
 */
bool gsd_should_evict_for_preference(uint32_t new_priority, const uint32_t *victim_priorities,
                                     size_t n);

#endif
