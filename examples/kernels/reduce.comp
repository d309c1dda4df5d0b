#version 450
// Integer sum reduction: each work group sums its 256 inputs in shared memory and writes one
// partial sum, out[group]; the host adds the partial sums.
//
// uint addition wraps modulo 2^32, which is associative and commutative, so the order of the
// tree gives the same bits as a sequential sum on the CPU.

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer In { uint v[]; };
layout(std430, binding = 1) writeonly buffer Out { uint partial[]; };

layout(push_constant) uniform Push {
	uint n;
} pc;

shared uint sums[256];

void main()
{
	uint i = gl_GlobalInvocationID.x;
	uint t = gl_LocalInvocationID.x;

	// Invocations past n add 0, so the last, partial group needs no special case below.
	sums[t] = i < pc.n ? v[i] : 0u;
	barrier();
	// Each step halves the live sums; barrier() also orders the shared-memory writes of one
	// step before the reads of the next (GLSL 4.50, compute shaders).
	for (uint stride = 128u; stride > 0u; stride >>= 1) {
		if (t < stride)
			sums[t] += sums[t + stride];
		barrier();
	}
	if (t == 0u)
		partial[gl_WorkGroupID.x] = sums[0];
}
