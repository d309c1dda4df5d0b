#version 450
// Refused: a physical pointer (PhysicalStorageBufferAddresses) reaches memory no binding names.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 1) in;
layout(buffer_reference, std430) buffer Ptr { uint v; };
layout(push_constant) uniform P { uint64_t addr; } p;
void main()
{
	Ptr(p.addr).v = 1u;
}
