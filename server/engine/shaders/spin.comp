#version 460
// SPIN: one invocation runs a dependent chain of args.aux steps, a slice of busy GPU time the
// backend calibrates at start; the result goes to scratch so the loop cannot be removed.
#extension GL_GOOGLE_include_directive : require
#include "args.glsl"

void main()
{
	if (invocation() >= args.count)
		return;
	uint h = uint(args.size) | 1u;
	for (uint64_t n = 0ul; n < args.aux; n++)
		h = (h ^ (h >> 7u)) * 0x9e3779b1u + uint(n);
	Words(args.dst).v[0] = h;
}
