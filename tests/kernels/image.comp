#version 450
// Refused: an image binding.
layout(local_size_x = 1) in;
layout(set = 0, binding = 0, r32ui) uniform uimage2D img;
void main()
{
	imageStore(img, ivec2(0, 0), uvec4(1u));
}
