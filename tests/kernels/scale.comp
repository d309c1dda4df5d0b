#version 450
// A uniform buffer beside storage buffers: o[i] = in[i] * u.scale + u.bias.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer In { uint v[]; } src;
layout(set = 0, binding = 1) buffer Out { uint v[]; } dst;
layout(set = 0, binding = 2) uniform U { uint scale; uint bias; } u;
layout(push_constant) uniform P { uint n; } p;
void main()
{
	uint i = gl_GlobalInvocationID.x;
	if (i < p.n)
		dst.v[i] = src.v[i] * u.scale + u.bias;
}
