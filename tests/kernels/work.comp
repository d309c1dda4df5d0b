#version 450
// A unit of GPU work for the scheduling tests: every invocation computes `spin` steps of an
// LCG (lavapipe caps any loop at 65535 iterations), group 0 counts the dispatch in v[0], and
// every group leaves its result in v[1..64] so nothing is optimised away. A packet of N of
// them must leave v[0] = N however often it was preempted and resubmitted.
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
layout(push_constant) uniform P { uint spin; } p;
void main()
{
	uint x = gl_WorkGroupID.x;
	uint acc = x;
	for (uint i = 0u; i < p.spin; i++)
		acc = acc * 1664525u + 1013904223u + i;
	if (x == 0u)
		v[0] += 1u;
	v[1u + (x & 63u)] = acc;
}
