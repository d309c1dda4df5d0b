#version 450
// 3x3 box blur of an 8-bit grayscale image, one pixel per uint (0..255), row-major w x h.
//
// Neighbours outside the image take the nearest edge pixel (clamp to edge). The result is the
// integer quotient of the nine pixels' sum by 9, so the host can compare it bit for bit.

layout(local_size_x = 8, local_size_y = 8) in;

layout(std430, binding = 0) readonly buffer In { uint px[]; } src;
layout(std430, binding = 1) writeonly buffer Out { uint px[]; } dst;

layout(push_constant) uniform Push {
	uint w;
	uint h;
} pc;

void main()
{
	uint x = gl_GlobalInvocationID.x;
	uint y = gl_GlobalInvocationID.y;

	if (x >= pc.w || y >= pc.h)
		return;
	uint sum = 0u;
	for (int dy = -1; dy <= 1; dy++) {
		uint yy = uint(clamp(int(y) + dy, 0, int(pc.h) - 1));
		for (int dx = -1; dx <= 1; dx++) {
			uint xx = uint(clamp(int(x) + dx, 0, int(pc.w) - 1));
			sum += src.px[yy * pc.w + xx];
		}
	}
	dst.px[y * pc.w + x] = sum / 9u;
}
