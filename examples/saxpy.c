/*
 * saxpy: y = a * x + y over a million floats (kernels/saxpy.comp), checked against the CPU to
 * within 1 ulp of a * x + y rounded either fused (fmaf) or unfused: the GPU may use either.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "example.h"

#define SAXPY_N  1000001u /* 1000000 is 64 * 15625: one more leaves a partial group */
#define SAXPY_A  1.75f
#define SAXPY_WG 64u /* local_size_x of saxpy.comp */

_Static_assert(sizeof(float) * (uint64_t)SAXPY_N <= EXAMPLE_MAX_ALLOCATION,
               "saxpy vectors exceed EXAMPLE_MAX_ALLOCATION");

/* Maps a float's bits to an integer that grows with its value, so that the distance between
 * two floats in ulps is the difference of the integers (+0 and -0 are 0 apart). */
static int64_t float_order(float f)
{
	int32_t bits;

	memcpy(&bits, &f, sizeof(bits));
	return bits < 0 ? -(int64_t)(bits & INT32_MAX) : (int64_t)bits;
}

static bool within_ulps(float got, float want, int64_t ulps)
{
	if (isnan(got) || isnan(want))
		return false;
	return llabs(float_order(got) - float_order(want)) <= ulps;
}

int example_saxpy(example *ex)
{
	struct {
		float a;
		uint32_t n;
	} push = {SAXPY_A, SAXPY_N};
	_Static_assert(sizeof(push) == 8, "push constants of saxpy.comp");
	const uint32_t groups[3] = {ceil_div(SAXPY_N, SAXPY_WG), 1, 1};
	float *x = malloc(SAXPY_N * sizeof(float));
	float *y = malloc(SAXPY_N * sizeof(float));
	float *y0 = malloc(SAXPY_N * sizeof(float)); /* y before the kernel, for the reference */
	uint32_t seed = 0x5a5a1234u;
	int rv = example_kernel(ex, "saxpy");

	example_size(ex, "n", SAXPY_N);
	if (rv == 0 && (!x || !y || !y0))
		rv = example_out_of_memory(ex);
	if (rv != 0)
		goto out;
	for (uint32_t i = 0; i < SAXPY_N; i++) {
		x[i] = random_float(&seed);
		y0[i] = y[i] = random_float(&seed);
	}
	example_buffer bufs[] = {
	        {.host = x, .size = SAXPY_N * sizeof(float), .upload = true},
	        {.host = y, .size = SAXPY_N * sizeof(float), .upload = true, .written = true},
	};
	rv = example_run(ex, bufs, 2, groups, &push, sizeof(push));
	for (uint32_t i = 0; rv == 0 && example_completed(ex) && i < SAXPY_N; i++) {
		/* The GPU may round once (fma) or twice (multiply, then add); volatile keeps the
		 * compiler from contracting our unfused reference into an fma. */
		volatile float product = SAXPY_A * x[i];
		float unfused = product + y0[i];
		float fused = fmaf(SAXPY_A, x[i], y0[i]);

		if (!within_ulps(y[i], unfused, 1) && !within_ulps(y[i], fused, 1)) {
			example_mismatch_float(ex, i, y[i], unfused);
			break;
		}
	}
out:
	free(x);
	free(y);
	free(y0);
	return rv;
}

#ifndef EXAMPLE_NO_MAIN
static const char about[] =
        "Runs the saxpy kernel (y = a * x + y over floats) on a gpusched daemon and\n"
        "compares the result with a reference computed on the CPU. The adapter must run\n"
        "user kernels (backend vulkan).\n";

int main(int argc, char **argv)
{
	static const example_program prog = {
	        .name = "example_saxpy",
	        .about = about,
	        .dir_help = "where saxpy.spv is",
	        .run = {example_saxpy},
	};

	return example_main(argc, argv, &prog);
}
#endif
