#version 450
// A hostile kernel: reads and writes `far` elements past the start of its binding. With
// robustBufferAccess2 every access beyond the binding's range reads zero and writes nothing.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Data { uint d[]; };
layout(set = 0, binding = 1) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint n; uint far; } p;
void main()
{
	uint i = gl_GlobalInvocationID.x;
	if (i >= p.n)
		return;
	o[i] = d[i + p.far];
	d[i + p.far] = 0xdeadbeefu;
}
