#include "vidmm.h"

#include "gpusched.pb-c.h"
#include "wddm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t align_up(uint64_t v)
{
	return (v + GS_VIDMM_ALIGN - 1) & ~(uint64_t)(GS_VIDMM_ALIGN - 1);
}

int gs_heap_init(gs_heap *h, uint64_t size)
{
	memset(h, 0, sizeof(*h));
	h->capfree = 16;
	h->free = malloc(h->capfree * sizeof(*h->free));
	if (!h->free)
		return -1;
	h->size = size;
	h->nfree = 1;
	h->free[0] = (gs_extent){0, size};
	return 0;
}

void gs_heap_fini(gs_heap *h)
{
	free(h->free);
	memset(h, 0, sizeof(*h));
}

static void remove_extent(gs_heap *h, size_t i)
{
	memmove(&h->free[i], &h->free[i + 1], (h->nfree - i - 1) * sizeof(*h->free));
	h->nfree--;
}

int gs_heap_alloc(gs_heap *h, uint64_t size, bool top_down, uint64_t *offset)
{
	if (size == 0 || size > h->size)
		return -1;
	size = align_up(size);
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < h->nfree; i++) {
		if (h->free[i].size < size)
			continue;
		/* Smallest fit wins; ties go to the low extent bottom-up, the high one top-down. */
		if (best == SIZE_MAX || h->free[i].size < h->free[best].size ||
		    (top_down && h->free[i].size == h->free[best].size))
			best = i;
	}
	if (best == SIZE_MAX)
		return -1;
	gs_extent *e = &h->free[best];
	if (top_down) {
		*offset = e->offset + e->size - size;
	} else {
		*offset = e->offset;
		e->offset += size;
	}
	e->size -= size;
	if (e->size == 0)
		remove_extent(h, best);
	h->used += size;
	return 0;
}

void gs_heap_free(gs_heap *h, uint64_t offset, uint64_t size)
{
	size = align_up(size);
	/* First extent after the freed range. */
	size_t lo = 0, hi = h->nfree;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (h->free[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	bool merge_prev = lo > 0 && h->free[lo - 1].offset + h->free[lo - 1].size == offset;
	bool merge_next = lo < h->nfree && offset + size == h->free[lo].offset;
	h->used -= size;
	if (merge_prev && merge_next) {
		h->free[lo - 1].size += size + h->free[lo].size;
		remove_extent(h, lo);
	} else if (merge_prev) {
		h->free[lo - 1].size += size;
	} else if (merge_next) {
		h->free[lo].offset = offset;
		h->free[lo].size += size;
	} else {
		if (h->nfree == h->capfree) {
			size_t ncap = h->capfree * 2;
			gs_extent *n = realloc(h->free, ncap * sizeof(*n));
			if (!n)
				abort(); /* cannot lose track of free memory */
			h->free = n;
			h->capfree = ncap;
		}
		memmove(&h->free[lo + 1], &h->free[lo], (h->nfree - lo) * sizeof(*h->free));
		h->free[lo] = (gs_extent){offset, size};
		h->nfree++;
	}
}

uint64_t gs_heap_largest_free(const gs_heap *h)
{
	uint64_t best = 0;
	for (size_t i = 0; i < h->nfree; i++)
		if (h->free[i].size > best)
			best = h->free[i].size;
	return best;
}

int gs_segment_init(gs_segment *s, uint32_t id, const char *name, int kind, uint64_t size,
                    bool cpu_visible)
{
	memset(s, 0, sizeof(*s));
	s->id = id;
	strncpy(s->name, name, sizeof(s->name) - 1);
	s->kind = kind;
	s->cpu_visible = cpu_visible;
	s->size = size;
	/* Reserve the whole segment now; pages are only backed once touched. */
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	s->mem = m;
	if (gs_heap_init(&s->heap, size) != 0) {
		munmap(m, size);
		return -ENOMEM;
	}
	return 0;
}

void gs_segment_fini(gs_segment *s)
{
	if (s->mem)
		munmap(s->mem, s->size);
	gs_heap_fini(&s->heap);
	s->mem = NULL;
}

void gs_segment_scrub(gs_segment *s, uint64_t offset, uint64_t size)
{
	const uint64_t page = 4096;
	uint64_t start = (offset + page - 1) & ~(page - 1);
	uint64_t end = (offset + size) & ~(page - 1);
	if (end > start + 16 * page) {
		/* Large ranges: hand whole pages back to the kernel (they read as zero again) and
		 * clear only the partial pages at the edges. */
		memset(s->mem + offset, 0, start - offset);
		madvise(s->mem + start, end - start, MADV_DONTNEED);
		memset(s->mem + end, 0, offset + size - end);
	} else {
		memset(s->mem + offset, 0, size);
	}
}

static int try_segment(gs_segment *segs, uint32_t nsegs, uint32_t id, bool top_down, uint64_t size,
                       uint64_t *offset)
{
	for (uint32_t i = 0; i < nsegs; i++)
		if (segs[i].id == id)
			return gs_heap_alloc(&segs[i].heap, size, top_down, offset) == 0 ? (int)i
			                                                                 : -1;
	return -1;
}

int gs_vidmm_place(gs_segment *segs, uint32_t nsegs, uint32_t supported_set, uint32_t preference,
                   uint64_t size, uint64_t *offset)
{
	gs_segpref p;
	gs_segpref_decode(preference, &p);
	uint32_t tried = 0;
	for (int k = 0; k < GS_SEGPREF_SLOTS && p.segment[k]; k++) {
		tried |= 1u << p.segment[k];
		int i = try_segment(segs, nsegs, p.segment[k], p.direction[k], size, offset);
		if (i >= 0)
			return i;
	}
	/* Fall back: memory segments before aperture segments, each in configured order. */
	for (int pass = 0; pass < 2; pass++) {
		int want = pass == 0 ? GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY
		                     : GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE;
		for (uint32_t i = 0; i < nsegs; i++) {
			uint32_t bit = 1u << segs[i].id;
			if (segs[i].kind != want || (supported_set && !(supported_set & bit)) ||
			    (tried & bit))
				continue;
			if (gs_heap_alloc(&segs[i].heap, size, false, offset) == 0)
				return (int)i;
		}
	}
	return -1;
}
