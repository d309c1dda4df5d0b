#version 450
// C = A * B for row-major float matrices: A is M x K, B is K x N, C is M x N.
//
// Each 16 x 16 work group computes one 16 x 16 tile of C. It walks K in steps of 16, loading a
// tile of A and a tile of B into shared memory so that each element is read from the buffer
// once per group instead of 16 times. Elements outside the matrices load as 0, which adds
// nothing to the products, so M, N and K need not be multiples of 16.

layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Push {
	uint M;
	uint N;
	uint K;
} pc;

shared float tile_a[16][16];
shared float tile_b[16][16];

void main()
{
	uint col = gl_GlobalInvocationID.x;
	uint row = gl_GlobalInvocationID.y;
	uint tx = gl_LocalInvocationID.x;
	uint ty = gl_LocalInvocationID.y;
	float acc = 0.0;

	for (uint k0 = 0u; k0 < pc.K; k0 += 16u) {
		uint ka = k0 + tx; // column of A this invocation loads
		uint kb = k0 + ty; // row of B this invocation loads

		// Branches, not ?:, so that no out-of-range index is ever computed into a load.
		if (row < pc.M && ka < pc.K)
			tile_a[ty][tx] = a[row * pc.K + ka];
		else
			tile_a[ty][tx] = 0.0;
		if (kb < pc.K && col < pc.N)
			tile_b[ty][tx] = b[kb * pc.N + col];
		else
			tile_b[ty][tx] = 0.0;
		// Every invocation reaches both barriers (the loop bound is uniform): the tiles are
		// complete before use, and not overwritten until everyone has used them.
		barrier();
		for (uint k = 0u; k < 16u; k++)
			acc += tile_a[ty][k] * tile_b[k][tx];
		barrier();
	}
	if (row < pc.M && col < pc.N)
		c[row * pc.N + col] = acc;
}
