#version 450
// A kernel that does not end in any time a test waits for: the TDR's case. lavapipe cuts every
// loop of an invocation short after 65535 iterations in all, so the length comes from the
// grid: dispatched over 65535 x 65535 groups, its 65535 iterations each add up to about 2^48.
// It writes inside its loop so that no compiler may remove it.
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
layout(push_constant) uniform P { uint stop; } p;
void main()
{
	uint i = 0u;
	while (v[0] != p.stop)
		v[1 + (gl_WorkGroupID.x & 7u)] = i++;
}
