/*
 * matmul: C = A * B for row-major float matrices, A M x K and B K x N, in 16 x 16 tiles
 * (kernels/matmul.comp). Checked against a double-precision product on the CPU, to a relative
 * error of at most MATMUL_TOLERANCE (see check_matmul).
 */
#include <math.h>
#include <stdlib.h>

#include "example.h"

#define MATMUL_M  200u
#define MATMUL_N  136u
#define MATMUL_K  77u
#define MATMUL_WG 16u

/* The relative error matmul accepts: float accumulation of K = 77 products is off by at most
 * about K * 2^-24 (5e-6) of the sum of their magnitudes; 1e-4 leaves room for any order of
 * summation and for fused multiply-adds, and still catches a wrong or missing term. */
#define MATMUL_TOLERANCE 1e-4

_Static_assert(sizeof(float) * (uint64_t)MATMUL_M * MATMUL_K <= EXAMPLE_MAX_ALLOCATION &&
                       sizeof(float) * (uint64_t)MATMUL_K * MATMUL_N <= EXAMPLE_MAX_ALLOCATION &&
                       sizeof(float) * (uint64_t)MATMUL_M * MATMUL_N <= EXAMPLE_MAX_ALLOCATION,
               "matmul matrices exceed EXAMPLE_MAX_ALLOCATION");

/*
 * Relative error of each element of C against a double-precision product, at most
 * MATMUL_TOLERANCE. The inputs have both signs, so an element's terms can cancel to nearly 0,
 * where any rounding is a large fraction of the result; the error is therefore measured
 * relative to the sum of the terms' magnitudes (sum over k of |a[i][k] * b[k][j]|), which is
 * the scale of the rounding errors and equals |want| whenever the terms do not cancel.
 */
static void check_matmul(example *ex, const float *a, const float *b, const float *c)
{
	for (uint32_t i = 0; i < MATMUL_M; i++)
		for (uint32_t j = 0; j < MATMUL_N; j++) {
			double want = 0, scale = 0;

			for (uint32_t k = 0; k < MATMUL_K; k++) {
				double t = (double)a[i * MATMUL_K + k] * b[k * MATMUL_N + j];

				want += t;
				scale += fabs(t);
			}
			float got = c[i * MATMUL_N + j];
			double err = fabs(got - want);
			if (!(err <= MATMUL_TOLERANCE * scale)) { /* also catches NaN */
				example_mismatch_float(ex, (size_t)i * MATMUL_N + j, got, want);
				return;
			}
		}
}

int example_matmul(example *ex)
{
	const uint32_t push[3] = {MATMUL_M, MATMUL_N, MATMUL_K};
	const uint32_t groups[3] = {ceil_div(MATMUL_N, MATMUL_WG), ceil_div(MATMUL_M, MATMUL_WG),
	                            1};
	float *a = malloc(MATMUL_M * MATMUL_K * sizeof(float));
	float *b = malloc(MATMUL_K * MATMUL_N * sizeof(float));
	float *c = malloc(MATMUL_M * MATMUL_N * sizeof(float));
	uint32_t seed = 0x12345678u;
	int rv = example_kernel(ex, "matmul");

	example_size(ex, "M", MATMUL_M);
	example_size(ex, "N", MATMUL_N);
	example_size(ex, "K", MATMUL_K);
	if (rv == 0 && (!a || !b || !c))
		rv = example_out_of_memory(ex);
	if (rv != 0)
		goto out;
	for (uint32_t i = 0; i < MATMUL_M * MATMUL_K; i++)
		a[i] = random_float(&seed);
	for (uint32_t i = 0; i < MATMUL_K * MATMUL_N; i++)
		b[i] = random_float(&seed);
	example_buffer bufs[] = {
	        {.host = a, .size = MATMUL_M * MATMUL_K * sizeof(float), .upload = true},
	        {.host = b, .size = MATMUL_K * MATMUL_N * sizeof(float), .upload = true},
	        {.host = c, .size = MATMUL_M * MATMUL_N * sizeof(float), .written = true},
	};
	rv = example_run(ex, bufs, 3, groups, push, sizeof(push));
	if (rv == 0 && example_completed(ex))
		check_matmul(ex, a, b, c);
out:
	free(a);
	free(b);
	free(c);
	return rv;
}

#ifndef EXAMPLE_NO_MAIN
static const char about[] =
        "Runs the matmul kernel (C = A * B over float matrices) on a gpusched daemon and\n"
        "compares the result with a reference computed on the CPU. The adapter must run\n"
        "user kernels (backend vulkan).\n";

int main(int argc, char **argv)
{
	static const example_program prog = {
	        .name = "example_matmul",
	        .about = about,
	        .dir_help = "where matmul.spv is",
	        .run = {example_matmul},
	};

	return example_main(argc, argv, &prog);
}
#endif
