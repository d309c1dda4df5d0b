/*
 * blur: a 3x3 box blur of an 8-bit grayscale image, one pixel per uint, clamp to edge
 * (kernels/blur.comp). Checked bit-exact against the CPU: integer arithmetic only.
 */
#include <stdlib.h>

#include "example.h"

#define BLUR_W  257u
#define BLUR_H  131u
#define BLUR_WG 8u

_Static_assert(sizeof(uint32_t) * (uint64_t)BLUR_W * BLUR_H <= EXAMPLE_MAX_ALLOCATION,
               "blur image exceeds EXAMPLE_MAX_ALLOCATION");

static uint32_t clamp_index(int64_t v, uint32_t n)
{
	return v < 0 ? 0 : v >= n ? n - 1 : (uint32_t)v;
}

int example_blur(example *ex)
{
	const uint32_t push[2] = {BLUR_W, BLUR_H};
	const uint32_t groups[3] = {ceil_div(BLUR_W, BLUR_WG), ceil_div(BLUR_H, BLUR_WG), 1};
	const size_t size = (size_t)BLUR_W * BLUR_H * sizeof(uint32_t);
	uint32_t *in = malloc(size);
	uint32_t *out = malloc(size);
	uint32_t seed = 0xdecafbadu;
	int rv = example_kernel(ex, "blur");

	example_size(ex, "w", BLUR_W);
	example_size(ex, "h", BLUR_H);
	if (rv == 0 && (!in || !out))
		rv = example_out_of_memory(ex);
	if (rv != 0)
		goto done;
	for (uint32_t i = 0; i < BLUR_W * BLUR_H; i++)
		in[i] = xorshift32(&seed) >> 24;
	example_buffer bufs[] = {
	        {.host = in, .size = size, .upload = true},
	        {.host = out, .size = size, .written = true},
	};
	rv = example_run(ex, bufs, 2, groups, push, sizeof(push));
	if (rv != 0 || !example_completed(ex))
		goto done;
	for (uint32_t y = 0; y < BLUR_H; y++)
		for (uint32_t x = 0; x < BLUR_W; x++) {
			uint32_t sum = 0;

			for (int dy = -1; dy <= 1; dy++)
				for (int dx = -1; dx <= 1; dx++)
					sum += in[clamp_index((int64_t)y + dy, BLUR_H) * BLUR_W +
					          clamp_index((int64_t)x + dx, BLUR_W)];
			if (out[y * BLUR_W + x] != sum / 9) {
				example_mismatch_uint(ex, (size_t)y * BLUR_W + x,
				                      out[y * BLUR_W + x], sum / 9);
				goto done;
			}
		}
done:
	free(in);
	free(out);
	return rv;
}

#ifndef EXAMPLE_NO_MAIN
static const char about[] =
        "Runs the blur kernel (a 3x3 box blur of a grayscale image) on a gpusched daemon\n"
        "and compares the result with a reference computed on the CPU. The adapter must\n"
        "run user kernels (backend vulkan).\n";

int main(int argc, char **argv)
{
	static const example_program prog = {
	        .name = "example_blur",
	        .about = about,
	        .dir_help = "where blur.spv is",
	        .run = {example_blur},
	};

	return example_main(argc, argv, &prog);
}
#endif
