#version 460
// SPIN: one invocation runs a dependent chain of up to args.aux steps, a slice of busy GPU time
// the backend calibrates at start. Every 16 steps it reads the stop words at args.src, which
// the host sets without waiting for the GPU: word 1 (a reset) always ends the slice, word 0 (a
// preemption request) only when mode bit 0 says the SPIN is preemptible. The result goes to
// args.dst so the loop cannot be removed.
#extension GL_GOOGLE_include_directive : require
#include "args.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer Stop {
	uint v[];
};

void main()
{
	if (invocation() >= args.count)
		return;
	Stop stop = Stop(args.src);
	bool preemptible = (args.mode & 1u) != 0u;
	uint h = uint(args.size) | 1u;
	for (uint64_t n = 0ul; n < args.aux; n++) {
		h = (h ^ (h >> 7u)) * 0x9e3779b1u + uint(n);
		if ((n & 15ul) == 15ul && (stop.v[1] != 0u || (preemptible && stop.v[0] != 0u)))
			break;
	}
	Words(args.dst).v[0] = h;
}
