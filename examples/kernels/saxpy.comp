#version 450
// saxpy: y = a * x + y over n floats, one invocation per element.
//
// n need not be a multiple of the work-group size: the last group's spare invocations do nothing.
// The driver may fuse a * x + y into one fma (SPIR-V does not forbid the contraction), so the
// host accepts either rounding.

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };

layout(push_constant) uniform Push {
	float a;
	uint n;
} pc;

void main()
{
	uint i = gl_GlobalInvocationID.x;

	if (i < pc.n)
		y[i] = pc.a * x[i] + y[i];
}
