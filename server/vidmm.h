/*
 * Video memory: segments backed by real memory and a best-fit allocator per segment, and
 * placement by D3DDDI_SEGMENTPREFERENCE. (Residency, eviction and paging are the video memory
 * manager issue's work; here every allocation is placed at creation and stays.)
 */
#ifndef GS_VIDMM_H
#define GS_VIDMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GS_VIDMM_ALIGN 256u

/* One free extent of a segment. */
typedef struct gs_extent {
	uint64_t offset;
	uint64_t size;
} gs_extent;

/* Free extents sorted by offset, never adjacent (they are merged on free). */
typedef struct gs_heap {
	gs_extent *free;
	size_t nfree, capfree;
	uint64_t size;
	uint64_t used;
} gs_heap;

int gs_heap_init(gs_heap *h, uint64_t size);
void gs_heap_fini(gs_heap *h);
/* Best fit. top_down = false takes the low end of the chosen extent (lowest offset among
 * equal fits); true takes the high end of the highest best-fitting extent. */
int gs_heap_alloc(gs_heap *h, uint64_t size, bool top_down, uint64_t *offset);
void gs_heap_free(gs_heap *h, uint64_t offset, uint64_t size);
uint64_t gs_heap_largest_free(const gs_heap *h);

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

/* Placement: tries each preferred segment in order (with its direction), then every other
 * supported segment in the order given (memory segments first). Returns the segment index in
 * segs, or -1 when nothing has room. */
int gs_vidmm_place(gs_segment *segs, uint32_t nsegs, uint32_t supported_set, uint32_t preference,
                   uint64_t size, uint64_t *offset);

#endif
