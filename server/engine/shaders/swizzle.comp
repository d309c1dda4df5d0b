#version 460
// Swizzle (mode 0: linear source, tiled destination) or Unswizzle (mode 1) of whole bands: one
// invocation moves one 64-byte row of a tile. The layout is the one of swizzle.h: for a linear
// offset L = y * pitch + x, the tiled offset is
//     (y / 64) * 64 * pitch + (x / 64) * 4096 + (y % 64) * 64 + x % 64.
// The linear tail after the last whole band is copied by the caller.
#extension GL_GOOGLE_include_directive : require
#include "args.glsl"

void main()
{
	uint64_t i = invocation();
	if (i >= args.count)
		return;
	uint64_t pitch = args.aux;
	uint64_t lin = i * 64ul;
	uint64_t y = lin / pitch;
	uint64_t x = lin % pitch;
	uint64_t til = (y / 64ul) * 64ul * pitch + (x / 64ul) * 4096ul + (y % 64ul) * 64ul;
	uint64_t from = args.mode == 0u ? lin : til;
	uint64_t to = args.mode == 0u ? til : lin;
	for (uint k = 0u; k < 64u; k++)
		st8(args.dst + to + k, ld8(args.src + from + k));
}
