#version 450
// Refused: a buffer in descriptor set 1 (only set 0 is bound).
layout(local_size_x = 1) in;
layout(set = 1, binding = 0) buffer B { uint v[]; };
void main()
{
	v[0] = 1u;
}
