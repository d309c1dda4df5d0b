#version 460
// FILL for the bytes vkCmdFillBuffer cannot write (an unaligned head or tail): byte i of the
// range gets byte (mode + i) % 4 of the little-endian pattern.
#extension GL_GOOGLE_include_directive : require
#include "args.glsl"

void main()
{
	uint64_t i = invocation();
	if (i >= args.count)
		return;
	uint phase = uint((uint64_t(args.mode) + i) % 4ul);
	st8(args.dst + i, uint(args.aux >> (8u * phase)));
}
