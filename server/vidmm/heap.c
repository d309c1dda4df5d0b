#include "vidmm/heap.h"

#include "core/util.h"
#include "gpusched.pb-c.h"
#include "wddm.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static_assert(GSD_HEAP_ALIGN == GSD_MEMORY_ALIGN, "the heap places in the units quotas count");

bool gsd_heap_block_fits(uint64_t offset, uint64_t size, uint64_t heap_size, uint64_t *end)
{
	if (size == 0 || size > heap_size || offset % GSD_HEAP_ALIGN || offset < *end ||
	    offset > heap_size - gsd_heap_round(size))
		return false;
	*end = offset + gsd_heap_round(size);
	return true;
}

/* ---- AVL trees over intrusive links ----
 *
 * Each free extent is one node that sits in two trees at once, so the tree code works on links
 * and a comparison function, and the heap code converts between links and nodes. Recursion depth
 * is the tree height, at most ~1.44 log2(n): 25 levels for a million extents. */

typedef struct avl_link {
	struct avl_link *child[2];
	int height;
} avl_link;

typedef int (*avl_cmp)(const avl_link *a, const avl_link *b);

static int avl_height(const avl_link *t)
{
	return t ? t->height : 0;
}

static void avl_fix(avl_link *t)
{
	int l = avl_height(t->child[0]), r = avl_height(t->child[1]);
	t->height = 1 + (l > r ? l : r);
}

/* dir 0 lifts the right child (a left rotation), dir 1 the left child. */
static avl_link *avl_rotate(avl_link *t, int dir)
{
	avl_link *up = t->child[!dir];
	t->child[!dir] = up->child[dir];
	up->child[dir] = t;
	avl_fix(t);
	avl_fix(up);
	return up;
}

static avl_link *avl_balance(avl_link *t)
{
	avl_fix(t);
	int bf = avl_height(t->child[0]) - avl_height(t->child[1]);
	if (bf > 1) {
		if (avl_height(t->child[0]->child[0]) < avl_height(t->child[0]->child[1]))
			t->child[0] = avl_rotate(t->child[0], 0);
		return avl_rotate(t, 1);
	}
	if (bf < -1) {
		if (avl_height(t->child[1]->child[1]) < avl_height(t->child[1]->child[0]))
			t->child[1] = avl_rotate(t->child[1], 1);
		return avl_rotate(t, 0);
	}
	return t;
}

static avl_link *avl_insert(avl_link *t, avl_link *x, avl_cmp cmp)
{
	if (!t) {
		x->child[0] = x->child[1] = NULL;
		x->height = 1;
		return x;
	}
	int side = cmp(x, t) > 0;
	t->child[side] = avl_insert(t->child[side], x, cmp);
	return avl_balance(t);
}

static avl_link *avl_remove_min(avl_link *t, avl_link **min)
{
	if (!t->child[0]) {
		*min = t;
		return t->child[1];
	}
	t->child[0] = avl_remove_min(t->child[0], min);
	return avl_balance(t);
}

/* Removes x, which must be in the tree; keys are unique, so cmp finds exactly x. */
static avl_link *avl_remove(avl_link *t, avl_link *x, avl_cmp cmp)
{
	assert(t);
	int c = cmp(x, t);
	if (c != 0) {
		t->child[c > 0] = avl_remove(t->child[c > 0], x, cmp);
		return avl_balance(t);
	}
	if (!t->child[1])
		return t->child[0];
	avl_link *m;
	avl_link *right = avl_remove_min(t->child[1], &m);
	m->child[0] = t->child[0];
	m->child[1] = right;
	return avl_balance(m);
}

/* ---- extent nodes ---- */

typedef struct gsd_extent_node {
	gsd_extent ext;
	avl_link off; /* in h->by_offset */
	avl_link sz;  /* in h->by_size */
} node;

#define SLAB_NODES 256

typedef struct gsd_extent_slab {
	struct gsd_extent_slab *next;
	node nodes[SLAB_NODES];
} slab;

#define NODE_OF(link, member) ((node *)((char *)(link)-offsetof(node, member)))

static node *of_off(const avl_link *l)
{
	return l ? NODE_OF(l, off) : NULL;
}

static node *of_sz(const avl_link *l)
{
	return l ? NODE_OF(l, sz) : NULL;
}

static int cmp_off(const avl_link *a, const avl_link *b)
{
	uint64_t x = of_off(a)->ext.offset, y = of_off(b)->ext.offset;
	return (x > y) - (x < y);
}

/* Size first, then offset: equal sizes sit in offset order, which is what the tie rules of
 * best fit (lowest bottom-up, highest top-down) walk. */
static int cmp_sz(const avl_link *a, const avl_link *b)
{
	const gsd_extent *x = &of_sz(a)->ext, *y = &of_sz(b)->ext;
	if (x->size != y->size)
		return x->size > y->size ? 1 : -1;
	return (x->offset > y->offset) - (x->offset < y->offset);
}

static avl_link *root_off(const gsd_heap *h)
{
	return h->by_offset ? &h->by_offset->off : NULL;
}

static avl_link *root_sz(const gsd_heap *h)
{
	return h->by_size ? &h->by_size->sz : NULL;
}

static void off_insert(gsd_heap *h, node *n)
{
	h->by_offset = of_off(avl_insert(root_off(h), &n->off, cmp_off));
}

static void off_remove(gsd_heap *h, node *n)
{
	h->by_offset = of_off(avl_remove(root_off(h), &n->off, cmp_off));
}

static void sz_insert(gsd_heap *h, node *n)
{
	h->by_size = of_sz(avl_insert(root_sz(h), &n->sz, cmp_sz));
}

static void sz_remove(gsd_heap *h, node *n)
{
	h->by_size = of_sz(avl_remove(root_sz(h), &n->sz, cmp_sz));
}

static node *node_new(gsd_heap *h)
{
	if (!h->spare) {
		slab *s = malloc(sizeof(*s));
		if (!s)
			return NULL;
		s->next = h->slabs;
		h->slabs = s;
		for (size_t i = 0; i < SLAB_NODES; i++) {
			s->nodes[i].off.child[0] = h->spare ? &h->spare->off : NULL;
			h->spare = &s->nodes[i];
		}
	}
	node *n = h->spare;
	h->spare = of_off(n->off.child[0]);
	return n;
}

static void node_recycle(gsd_heap *h, node *n)
{
	n->off.child[0] = h->spare ? &h->spare->off : NULL;
	h->spare = n;
}

/* Adds a new free extent to both trees; the caller has checked it touches no other. */
static void extent_add(gsd_heap *h, node *n, uint64_t offset, uint64_t size)
{
	n->ext = (gsd_extent){offset, size};
	off_insert(h, n);
	sz_insert(h, n);
	h->nfree++;
}

static void extent_drop(gsd_heap *h, node *n)
{
	off_remove(h, n);
	sz_remove(h, n);
	node_recycle(h, n);
	h->nfree--;
}

/* Changes an extent in place. The new range must keep its position among the other extents
 * (it grows or shrinks into space no other extent holds), so the offset tree stays ordered
 * without being touched; only the size tree, whose key changes, is updated. */
static void extent_set(gsd_heap *h, node *n, uint64_t offset, uint64_t size)
{
	sz_remove(h, n);
	n->ext = (gsd_extent){offset, size};
	sz_insert(h, n);
}

/*
 * The four lookups below are one walk. A tree's order puts the nodes whose key (offset, or size
 * in the size tree) is below k first, then those equal to it, then those above it, so the walk
 * finds the last node whose key is < k (<= k unless strict) when `last`, else the first whose
 * key is > k (>= k unless strict); NULL when there is none.
 */
static avl_link *avl_bound(avl_link *t, uint64_t (*key)(const avl_link *), uint64_t k, bool last,
                           bool strict)
{
	avl_link *best = NULL;
	while (t) {
		uint64_t v = key(t);
		bool hit = v == k ? !strict : (v < k) == last;
		if (hit)
			best = t;
		t = t->child[hit ? last : !last];
	}
	return best;
}

static uint64_t key_off(const avl_link *l)
{
	return of_off(l)->ext.offset;
}

static uint64_t key_sz(const avl_link *l)
{
	return of_sz(l)->ext.size;
}

/* The extent with the largest offset <= offset (or < offset when strict). */
static node *extent_at_or_before(const gsd_heap *h, uint64_t offset, bool strict)
{
	return of_off(avl_bound(root_off(h), key_off, offset, true, strict));
}

static node *extent_after(const gsd_heap *h, uint64_t offset)
{
	return of_off(avl_bound(root_off(h), key_off, offset, false, true));
}

/* The first extent in (size, offset) order whose size is >= size: the lowest best fit. */
static node *best_fit_lowest(const gsd_heap *h, uint64_t size)
{
	return of_sz(avl_bound(root_sz(h), key_sz, size, false, false));
}

/* The last extent in (size, offset) order whose size is <= size. */
static node *last_of_size_at_most(const gsd_heap *h, uint64_t size)
{
	return of_sz(avl_bound(root_sz(h), key_sz, size, true, false));
}

/* ---- heap ---- */

int gsd_heap_init(gsd_heap *h, uint64_t size)
{
	memset(h, 0, sizeof(*h));
	/* Every allocation takes whole units of GSD_HEAP_ALIGN, so bytes past the last whole unit
	 * could never be used; leaving them out keeps top-down offsets aligned too. */
	size -= size % GSD_HEAP_ALIGN;
	h->size = size;
	if (size == 0)
		return 0;
	node *n = node_new(h);
	if (!n)
		return -1;
	extent_add(h, n, 0, size);
	return 0;
}

void gsd_heap_fini(gsd_heap *h)
{
	for (slab *s = h->slabs, *next; s; s = next) {
		next = s->next;
		free(s);
	}
	memset(h, 0, sizeof(*h));
}

int gsd_heap_alloc(gsd_heap *h, uint64_t size, bool top_down, uint64_t *offset)
{
	if (size == 0 || size > h->size)
		return -1;
	size = gsd_heap_round(size);
	node *e = best_fit_lowest(h, size);
	if (!e)
		return -1;
	if (top_down)
		e = last_of_size_at_most(h, e->ext.size); /* the highest extent of that size */
	gsd_extent x = e->ext;
	if (x.size == size) {
		extent_drop(h, e);
		*offset = x.offset;
	} else if (top_down) {
		extent_set(h, e, x.offset, x.size - size);
		*offset = x.offset + x.size - size;
	} else {
		extent_set(h, e, x.offset + size, x.size - size);
		*offset = x.offset;
	}
	h->used += size;
	return 0;
}

int gsd_heap_alloc_at(gsd_heap *h, uint64_t offset, uint64_t size)
{
	if (size == 0 || size > h->size || offset % GSD_HEAP_ALIGN)
		return -1;
	size = gsd_heap_round(size);
	if (offset > h->size - size)
		return -1;
	node *e = extent_at_or_before(h, offset, false);
	if (!e || e->ext.offset + e->ext.size < offset + size)
		return -1;
	gsd_extent x = e->ext;
	uint64_t left = offset - x.offset, right = x.offset + x.size - (offset + size);
	if (left && right) {
		/* Get the second node first: failing must leave the heap as it was. */
		node *r = node_new(h);
		if (!r)
			return -1;
		extent_set(h, e, x.offset, left);
		extent_add(h, r, offset + size, right);
	} else if (left) {
		extent_set(h, e, x.offset, left);
	} else if (right) {
		extent_set(h, e, offset + size, right);
	} else {
		extent_drop(h, e);
	}
	h->used += size;
	return 0;
}

void gsd_heap_free(gsd_heap *h, uint64_t offset, uint64_t size)
{
	size = gsd_heap_round(size);
	node *prev = extent_at_or_before(h, offset, true);
	node *next = extent_after(h, offset);
	/* Freeing a range that is (partly) free already would corrupt the books. */
	assert(!prev || prev->ext.offset + prev->ext.size <= offset);
	assert(!next || offset + size <= next->ext.offset);
	assert(offset + size <= h->size && size <= h->used);
	bool merge_prev = prev && prev->ext.offset + prev->ext.size == offset;
	bool merge_next = next && offset + size == next->ext.offset;
	h->used -= size;
	if (merge_prev && merge_next) {
		uint64_t grown = prev->ext.size + size + next->ext.size;
		extent_drop(h, next);
		extent_set(h, prev, prev->ext.offset, grown);
	} else if (merge_prev) {
		extent_set(h, prev, prev->ext.offset, prev->ext.size + size);
	} else if (merge_next) {
		extent_set(h, next, offset, next->ext.size + size);
	} else {
		node *n = node_new(h);
		if (!n)
			abort(); /* cannot lose track of free memory */
		extent_add(h, n, offset, size);
	}
}

uint64_t gsd_heap_largest_free(const gsd_heap *h)
{
	avl_link *t = root_sz(h);
	if (!t)
		return 0;
	while (t->child[1])
		t = t->child[1];
	return of_sz(t)->ext.size;
}

static void extents_walk(const avl_link *t, gsd_extent *out, size_t cap, size_t *n)
{
	if (!t)
		return;
	extents_walk(t->child[0], out, cap, n);
	if (*n < cap)
		out[*n] = of_off(t)->ext;
	(*n)++;
	extents_walk(t->child[1], out, cap, n);
}

size_t gsd_heap_extents(const gsd_heap *h, gsd_extent *out, size_t cap)
{
	size_t n = 0;
	extents_walk(root_off(h), out, cap, &n);
	return n;
}

/* Walks one tree in order: checks heights, balance and strictly increasing keys. Returns the
 * height, or -1 on a violation. */
static int tree_check(const avl_link *t, avl_cmp cmp, const avl_link **last, size_t *count)
{
	if (!t)
		return 0;
	int l = tree_check(t->child[0], cmp, last, count);
	if (l < 0 || (*last && cmp(*last, t) >= 0))
		return -1;
	*last = t;
	(*count)++;
	int r = tree_check(t->child[1], cmp, last, count);
	if (r < 0 || l - r > 1 || r - l > 1 || t->height != 1 + (l > r ? l : r))
		return -1;
	return t->height;
}

int gsd_heap_check(const gsd_heap *h)
{
	const avl_link *last = NULL;
	size_t noff = 0, nsz = 0;
	if (tree_check(root_off(h), cmp_off, &last, &noff) < 0)
		return -1;
	last = NULL;
	if (tree_check(root_sz(h), cmp_sz, &last, &nsz) < 0)
		return -1;
	if (noff != h->nfree || nsz != h->nfree)
		return -1;
	gsd_extent *ext = malloc((h->nfree ? h->nfree : 1) * sizeof(*ext));
	if (!ext)
		return -1;
	gsd_heap_extents(h, ext, h->nfree);
	uint64_t free_bytes = 0;
	int rc = 0;
	for (size_t i = 0; i < h->nfree && rc == 0; i++) {
		const gsd_extent *e = &ext[i];
		if (e->size == 0 || e->offset % GSD_HEAP_ALIGN || e->size % GSD_HEAP_ALIGN ||
		    e->offset > h->size || e->size > h->size - e->offset)
			rc = -1;
		else if (i > 0 && ext[i - 1].offset + ext[i - 1].size >= e->offset)
			rc = -1; /* overlapping, or adjacent and not merged */
		free_bytes += e->size;
	}
	free(ext);
	if (rc == 0 && free_bytes + h->used != h->size)
		rc = -1;
	return rc;
}

/* ---- compaction planning ---- */

static int cmp_block(const void *a, const void *b)
{
	uint64_t x = ((const gsd_live_block *)a)->offset, y = ((const gsd_live_block *)b)->offset;
	return (x > y) - (x < y);
}

void gsd_live_blocks_sort(gsd_live_block *blocks, size_t n)
{
	if (n > 1)
		qsort(blocks, n, sizeof(*blocks), cmp_block);
}

static uint64_t block_end(const gsd_live_block *b)
{
	return b->offset + gsd_heap_round(b->size);
}

/* Collects moves; counts past cap so the caller learns how many it needs. */
typedef struct plan {
	gsd_move *moves;
	size_t cap, n;
} plan;

/* Slides blocks [k, j] down so that they start at cursor and touch; returns the new cursor. */
static uint64_t slide(plan *p, const gsd_live_block *b, size_t k, size_t j, uint64_t cursor)
{
	for (size_t i = k; i <= j; i++) {
		uint64_t size = gsd_heap_round(b[i].size);
		assert(cursor <= b[i].offset);
		if (cursor != b[i].offset) {
			if (p->n < p->cap)
				p->moves[p->n] = (gsd_move){i, b[i].offset, cursor, size};
			p->n++;
		}
		cursor += size;
	}
	return cursor;
}

uint64_t gsd_heap_gap_start(const gsd_live_block *b, const gsd_heap_region *r, size_t i)
{
	return i == r->s ? r->lo : block_end(&b[i - 1]);
}

uint64_t gsd_heap_gap(const gsd_live_block *b, const gsd_heap_region *r, size_t i)
{
	uint64_t end = i == r->e ? r->hi : b[i].offset;
	return end - gsd_heap_gap_start(b, r, i);
}

int gsd_heap_regions_each(const gsd_live_block *b, size_t n, uint64_t heap_size,
                          gsd_heap_region_fn fn, void *arg)
{
	gsd_heap_region r = {0, 0, 0, 0};
	for (size_t i = 0; i <= n; i++) {
		if (i < n && b[i].movable)
			continue;
		r.e = i;
		r.hi = i < n ? b[i].offset : heap_size;
		int rc = fn(b, &r, arg);
		if (rc)
			return rc;
		if (i < n) {
			r.s = i + 1;
			r.lo = block_end(&b[i]);
		}
	}
	return 0;
}

typedef struct full_state {
	plan *p;
	uint64_t largest;
} full_state;

static int region_compact(const gsd_live_block *b, const gsd_heap_region *r, void *arg)
{
	full_state *st = arg;
	uint64_t cursor = r->e > r->s ? slide(st->p, b, r->s, r->e - 1, r->lo) : r->lo;
	if (r->hi - cursor > st->largest)
		st->largest = r->hi - cursor;
	return 0;
}

static int region_largest_gap(const gsd_live_block *b, const gsd_heap_region *r, void *arg)
{
	uint64_t *largest = arg;
	for (size_t i = r->s; i <= r->e; i++) {
		uint64_t g = gsd_heap_gap(b, r, i);
		if (g > *largest)
			*largest = g;
	}
	return 0;
}

void gsd_heap_window_scan(const gsd_live_block *b, const gsd_heap_region *r,
                          const gsd_heap_window *w)
{
	size_t k = r->s, hi = r->s; /* the window: blocks k..hi-1, gaps k..hi */
	uint64_t hole = gsd_heap_gap(b, r, k);
	while (k <= r->e) {
		while (hole < w->need && hi < r->e) {
			w->enter(w->arg, hi);
			if (w->evict)
				hole += gsd_heap_round(b[hi].size);
			hi++;
			hole += gsd_heap_gap(b, r, hi);
		}
		if (hole < w->need)
			return;
		w->window(w->arg, r, k, hi - k, gsd_heap_gap_start(b, r, k));
		hole -= gsd_heap_gap(b, r, k);
		if (hi > k) {
			w->leave(w->arg, k);
			if (w->evict)
				hole -= gsd_heap_round(b[k].size);
			k++;
		} else {
			k++;
			hi = k;
			hole = k <= r->e ? gsd_heap_gap(b, r, k) : 0;
		}
	}
}

/* The cheapest window (fewest bytes slid down) over all regions. */
typedef struct window_state {
	const gsd_live_block *b;
	uint64_t want;
	uint64_t moved; /* bytes of the blocks in the current window */
	bool found;
	uint64_t cost;     /* bytes the best window moves */
	gsd_heap_region r; /* the best window's region */
	size_t k;          /* its first block */
	size_t count;      /* how many blocks from k slide down (0: the gap alone is enough) */
	uint64_t start;    /* where its hole starts: they slide down to there */
} window_state;

static void window_enter(void *arg, size_t i)
{
	window_state *st = arg;
	st->moved += gsd_heap_round(st->b[i].size);
}

static void window_leave(void *arg, size_t i)
{
	window_state *st = arg;
	st->moved -= gsd_heap_round(st->b[i].size);
}

static void window_found(void *arg, const gsd_heap_region *r, size_t k, size_t count,
                         uint64_t start)
{
	window_state *st = arg;
	if (!st->found || st->moved < st->cost)
		*st = (window_state){st->b, st->want, st->moved, true, st->moved,
		                     *r,    k,        count,     start};
}

static int region_window(const gsd_live_block *b, const gsd_heap_region *r, void *arg)
{
	window_state *st = arg;
	st->moved = 0;
	const gsd_heap_window w = {st->want, false, window_enter, window_leave, window_found, st};
	gsd_heap_window_scan(b, r, &w);
	return 0;
}

int gsd_heap_compact_plan(const gsd_live_block *blocks, size_t n, uint64_t heap_size, uint64_t want,
                          gsd_move *moves, size_t cap, size_t *nmoves, uint64_t *largest_after)
{
	*nmoves = 0;
	if (want > heap_size)
		return -EINVAL;
	for (uint64_t i = 0, end = 0; i < n; i++)
		if (!gsd_heap_block_fits(blocks[i].offset, blocks[i].size, heap_size, &end))
			return -EINVAL;
	plan p = {moves, cap, 0};
	uint64_t largest = 0;
	if (want == 0) {
		full_state st = {&p, 0};
		gsd_heap_regions_each(blocks, n, heap_size, region_compact, &st);
		largest = st.largest;
	} else {
		want = gsd_heap_round(want);
		gsd_heap_regions_each(blocks, n, heap_size, region_largest_gap, &largest);
		if (largest < want) {
			window_state st = {.b = blocks, .want = want};
			gsd_heap_regions_each(blocks, n, heap_size, region_window, &st);
			if (!st.found)
				return -ENOSPC;
			uint64_t start = st.start;
			uint64_t cursor =
			        st.count ? slide(&p, blocks, st.k, st.k + st.count - 1, start)
			                 : start;
			size_t after = st.k + st.count;
			largest = (after == st.r.e ? st.r.hi : blocks[after].offset) - cursor;
		}
	}
	*nmoves = p.n;
	if (largest_after)
		*largest_after = largest;
	return p.n > cap ? -ENOBUFS : 0;
}

/* ---- segments ---- */

int gsd_segment_init(gsd_segment *s, uint32_t id, const char *name, int kind, uint64_t size,
                     bool cpu_visible)
{
	memset(s, 0, sizeof(*s));
	s->id = id;
	strncpy(s->name, name, sizeof(s->name) - 1);
	s->kind = kind;
	s->cpu_visible = cpu_visible;
	s->size = size;
	return gsd_heap_init(&s->heap, size) != 0 ? -ENOMEM : 0;
}

void gsd_segment_fini(gsd_segment *s)
{
	gsd_heap_fini(&s->heap);
	s->backing = NULL;
}

/* ---- placement ---- */

static int segment_index(const gsd_segment *segs, uint32_t nsegs, uint32_t id)
{
	for (uint32_t i = 0; i < nsegs; i++)
		if (segs[i].id == id)
			return (int)i;
	return -1;
}

size_t gsd_place_order(const gsd_segment *segs, uint32_t nsegs, uint32_t supported_set,
                       uint32_t preference, gsd_place_step *out, size_t cap)
{
	gs_segpref p;
	gs_segpref_decode(preference, &p);
	uint32_t tried = 0;
	size_t n = 0;
	for (int k = 0; k < GS_SEGPREF_SLOTS && p.segment[k] && n < cap; k++) {
		uint32_t bit = 1u << p.segment[k];
		int i = segment_index(segs, nsegs, p.segment[k]);
		/* A repeated slot would only retry a segment that just had no room; a segment
		 * outside the supported set is never a place for the allocation, whatever the
		 * preference says (creation refuses such a preference, but a caller placing for
		 * a narrower set must not be led outside it). */
		if (i < 0 || (tried & bit) || (supported_set && !(supported_set & bit)))
			continue;
		tried |= bit;
		out[n++] = (gsd_place_step){(uint32_t)i, p.direction[k] != 0, true};
	}
	/* Fall back: memory segments before aperture segments, each in configured order. */
	for (int pass = 0; pass < 2; pass++) {
		int want = pass == 0 ? GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_MEMORY
		                     : GPUSCHED__V1__SEGMENT_KIND__SEGMENT_KIND_APERTURE;
		for (uint32_t i = 0; i < nsegs && n < cap; i++) {
			uint32_t bit = 1u << segs[i].id;
			if (segs[i].kind != want || (supported_set && !(supported_set & bit)) ||
			    (tried & bit))
				continue;
			tried |= bit;
			out[n++] = (gsd_place_step){i, false, false};
		}
	}
	return n;
}

int gsd_place(gsd_segment *segs, uint32_t nsegs, uint32_t supported_set, uint32_t preference,
              uint64_t size, uint64_t *offset)
{
	gsd_place_step steps[GSD_PLACE_STEPS_MAX];
	size_t n =
	        gsd_place_order(segs, nsegs, supported_set, preference, steps, GSD_PLACE_STEPS_MAX);
	for (size_t k = 0; k < n; k++)
		if (gsd_heap_alloc(&segs[steps[k].index].heap, size, steps[k].top_down, offset) ==
		    0)
			return (int)steps[k].index;
	return -1;
}
