#include "engine/swizzle.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

bool gsd_swizzle_pitch_valid(uint32_t pitch)
{
	return pitch != 0 && pitch % GSD_TILE_WIDTH == 0;
}

uint64_t gsd_swizzle_band(uint32_t pitch)
{
	return (uint64_t)GSD_TILE_HEIGHT * pitch;
}

uint64_t gsd_swizzle_chunk(uint64_t chunk, uint32_t pitch)
{
	if (!gsd_swizzle_pitch_valid(pitch))
		return chunk;
	uint64_t band = gsd_swizzle_band(pitch);
	return chunk < band ? band : chunk - chunk % band;
}

/* Bytes from the start that are tiled: whole bands only. */
static uint64_t tiled_bytes(uint64_t size, uint32_t pitch)
{
	uint64_t band = gsd_swizzle_band(pitch);
	return size - size % band;
}

uint64_t gsd_swizzle_offset(uint64_t linear, uint64_t size, uint32_t pitch)
{
	if (!gsd_swizzle_pitch_valid(pitch) || linear >= tiled_bytes(size, pitch))
		return linear;
	uint64_t y = linear / pitch, x = linear % pitch;
	return (y / GSD_TILE_HEIGHT) * gsd_swizzle_band(pitch) +
	       (x / GSD_TILE_WIDTH) * GSD_TILE_BYTES + (y % GSD_TILE_HEIGHT) * GSD_TILE_WIDTH +
	       x % GSD_TILE_WIDTH;
}

uint64_t gsd_unswizzle_offset(uint64_t tiled, uint64_t size, uint32_t pitch)
{
	if (!gsd_swizzle_pitch_valid(pitch) || tiled >= tiled_bytes(size, pitch))
		return tiled;
	uint64_t band = tiled / gsd_swizzle_band(pitch), in_band = tiled % gsd_swizzle_band(pitch);
	uint64_t tx = in_band / GSD_TILE_BYTES, in_tile = in_band % GSD_TILE_BYTES;
	uint64_t y = band * GSD_TILE_HEIGHT + in_tile / GSD_TILE_WIDTH;
	return y * pitch + tx * GSD_TILE_WIDTH + in_tile % GSD_TILE_WIDTH;
}

/*
 * Conversions at least this large write with streaming (non-temporal) stores: the destination
 * is far bigger than a core's cache and will not be read back soon (paging moves an allocation
 * away), so filling cache lines with it only costs a read of each line before it is written.
 * Smaller ones use ordinary stores, which leave the result in cache for whoever reads it next.
 */
#define STREAM_MIN (1024u * 1024u)

static inline void copy64(uint8_t *dst, const uint8_t *src, bool stream)
{
#if defined(__SSE2__)
	if (stream) {
		__m128i a = _mm_loadu_si128((const __m128i *)src);
		__m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
		__m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
		_mm_stream_si128((__m128i *)dst, a);
		_mm_stream_si128((__m128i *)(dst + 16), b);
		_mm_stream_si128((__m128i *)(dst + 32), c);
		_mm_stream_si128((__m128i *)(dst + 48), d);
		return;
	}
#else
	(void)stream;
#endif
	memcpy(dst, src, 64);
}

/*
 * One band. The source is read in address order (the prefetcher follows it) and every copy is
 * one 64-byte row of a tile, so each store fills exactly one cache line of the destination.
 */
static void band_convert(uint8_t *tiled, uint8_t *linear, uint32_t pitch, bool to_tiled,
                         bool stream)
{
	uint32_t tiles = pitch / GSD_TILE_WIDTH;
	if (to_tiled) {
		for (uint32_t r = 0; r < GSD_TILE_HEIGHT; r++)
			for (uint32_t t = 0; t < tiles; t++)
				copy64(tiled + (uint64_t)t * GSD_TILE_BYTES + r * GSD_TILE_WIDTH,
				       linear + (uint64_t)r * pitch + (uint64_t)t * GSD_TILE_WIDTH,
				       stream);
	} else {
		for (uint32_t t = 0; t < tiles; t++)
			for (uint32_t r = 0; r < GSD_TILE_HEIGHT; r++)
				copy64(linear + (uint64_t)r * pitch + (uint64_t)t * GSD_TILE_WIDTH,
				       tiled + (uint64_t)t * GSD_TILE_BYTES + r * GSD_TILE_WIDTH,
				       stream);
	}
}

static int convert(uint8_t *tiled, uint8_t *linear, uint64_t size, uint32_t pitch, bool to_tiled)
{
	if (!gsd_swizzle_pitch_valid(pitch))
		return -EINVAL;
	uint64_t band = gsd_swizzle_band(pitch), whole = tiled_bytes(size, pitch);
	uint8_t *dst = to_tiled ? tiled : linear;
	/* Every row lands a multiple of 64 bytes from the base, so the base decides: aligned to a
	 * cache line, each streamed row fills one whole line, which is what makes streaming pay
	 * (segment memory is page-aligned and allocations 256-byte aligned). */
	bool stream = whole >= STREAM_MIN && ((uintptr_t)dst & 63) == 0;
	for (uint64_t off = 0; off < whole; off += band)
		band_convert(tiled + off, linear + off, pitch, to_tiled, stream);
#if defined(__SSE2__)
	/* Streaming stores are weakly ordered: fence them so that whatever the caller does next
	 * (signal a fence to another thread) is seen after the bytes. */
	if (stream)
		_mm_sfence();
#endif
	/* The tail is linear on both sides. */
	if (size > whole) {
		if (to_tiled)
			memcpy(tiled + whole, linear + whole, size - whole);
		else
			memcpy(linear + whole, tiled + whole, size - whole);
	}
	return 0;
}

/* The casts drop const only to share one walker; the source side is never written. */
int gsd_swizzle(void *dst_tiled, const void *src_linear, uint64_t size, uint32_t pitch)
{
	return convert(dst_tiled, (uint8_t *)src_linear, size, pitch, true);
}

int gsd_unswizzle(void *dst_linear, const void *src_tiled, uint64_t size, uint32_t pitch)
{
	return convert((uint8_t *)src_tiled, dst_linear, size, pitch, false);
}
