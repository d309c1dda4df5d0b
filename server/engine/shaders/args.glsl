// The arguments every kernel of the Vulkan backend takes (push constants; vk_args in vulkan.c),
// and byte access to memory through buffer device addresses.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require

layout(local_size_x = 64) in;

layout(push_constant) uniform Args {
	uint64_t src;   // device address read
	uint64_t dst;   // device address written
	uint64_t size;  // bytes
	uint64_t aux;   // fill: the 32-bit pattern; swizzle: pitch; spin: iterations
	uint64_t count; // invocations that do work; the rest return at once
	uint mode;      // fill: pattern phase of dst; swizzle: 0 linear->tiled, 1 tiled->linear
	uint pad;
} args;

layout(buffer_reference, std430, buffer_reference_align = 1) buffer Bytes {
	uint8_t v[];
};

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words {
	uint v[];
};

// The invocation's index over a dispatch that may use the y dimension for more than 65535
// groups.
uint64_t invocation()
{
	return uint64_t(gl_GlobalInvocationID.x) +
	       uint64_t(gl_GlobalInvocationID.y) * uint64_t(gl_NumWorkGroups.x) * 64ul;
}

uint ld8(uint64_t addr)
{
	return uint(Bytes(addr).v[0]);
}

void st8(uint64_t addr, uint value)
{
	Bytes(addr).v[0] = uint8_t(value & 0xffu);
}
