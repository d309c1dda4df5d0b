#version 450
// Refused: 64 x 64 invocations per work group exceed the device's 1024.
layout(local_size_x = 64, local_size_y = 64) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
void main()
{
	v[gl_LocalInvocationIndex] = 1u;
}
