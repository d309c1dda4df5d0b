/*
 * The tiled ("swizzled") layout of allocations with GS_ALLOC_TILED, which paging transfers with
 * DXGK_TRANSFERFLAGS Swizzle / Unswizzle convert to and from.
 *
 * Layout. An allocation of size bytes is read as a pitch-linear surface of pitch bytes per row
 * (pitch a non-zero multiple of 64). A tile is 64 bytes wide and 64 rows high (4 KiB); inside a
 * tile its 64 rows are stored one after another. A band is 64 consecutive rows (64 * pitch
 * bytes, pitch / 64 tiles); the tiles of a band are stored left to right, and bands follow each
 * other in row order. Only whole bands are tiled: the tail of size % (64 * pitch) bytes (the
 * last rows short of a band, and any bytes short of a row) stays linear, at the same offsets.
 *
 * For a linear offset L before the tail, with y = L / pitch and x = L % pitch:
 *
 *     T = (y / 64) * 64 * pitch  +  (x / 64) * 4096  +  (y % 64) * 64  +  x % 64
 *
 * and T = L in the tail. Example, pitch 128 (two tiles per band, 8 KiB bands), size 8202:
 * L 0..63 -> T 0..63 (tile 0, row 0); L 64..127 -> T 4096..4159 (tile 1, row 0);
 * L 128 -> T 64 (tile 0, row 1); L 8191 (row 63, x 127) -> T 8191; L 8192..8201 -> the same
 * (tail).
 *
 * Every band maps onto itself, so a transfer cut at band boundaries (gsd_swizzle_chunk) can
 * convert each piece on its own; the mapping is a bijection on [0, size).
 */
#ifndef GSD_SWIZZLE_H
#define GSD_SWIZZLE_H

#include <stdbool.h>
#include <stdint.h>

#define GSD_TILE_WIDTH  64u /* bytes */
#define GSD_TILE_HEIGHT 64u /* rows */
#define GSD_TILE_BYTES  (GSD_TILE_WIDTH * GSD_TILE_HEIGHT)

/* A tiled allocation carries no surface description on the wire, so the daemon reads it as a
 * 1 KiB-pitch surface: every whole 64 KiB of it is tiled. */
#define GSD_SWIZZLE_PITCH_DEFAULT 1024u

bool gsd_swizzle_pitch_valid(uint32_t pitch);
/* Bytes in one band: 64 rows of pitch bytes. */
uint64_t gsd_swizzle_band(uint32_t pitch);
/* chunk rounded down to whole bands (at least one band), so each sub-transfer of a split
 * Swizzle/Unswizzle transfer converts on its own. */
uint64_t gsd_swizzle_chunk(uint64_t chunk, uint32_t pitch);

/* The tiled offset of linear offset L (< size), and back. Both return L unchanged for an
 * invalid pitch or an offset in the tail. */
uint64_t gsd_swizzle_offset(uint64_t linear, uint64_t size, uint32_t pitch);
uint64_t gsd_unswizzle_offset(uint64_t tiled, uint64_t size, uint32_t pitch);

/* Copy size bytes converting linear -> tiled (gsd_swizzle) or tiled -> linear (gsd_unswizzle).
 * dst and src must not overlap. Returns 0, or -EINVAL (nothing copied) for an invalid pitch. */
int gsd_swizzle(void *dst_tiled, const void *src_linear, uint64_t size, uint32_t pitch);
int gsd_unswizzle(void *dst_linear, const void *src_tiled, uint64_t size, uint32_t pitch);

#endif
