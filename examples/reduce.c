/*
 * reduce: the sum of a million uints (kernels/reduce.comp). Each work group of 256 writes one
 * partial sum; the host adds them. Checked bit-exact, each partial sum and the total: uint
 * sums wrap modulo 2^32 in any order.
 */
#include <stdlib.h>

#include "example.h"

#define REDUCE_N  1048573u /* 2^20 - 3 */
#define REDUCE_WG 256u

_Static_assert(sizeof(uint32_t) * (uint64_t)REDUCE_N <= EXAMPLE_MAX_ALLOCATION,
               "reduce input exceeds EXAMPLE_MAX_ALLOCATION");

int example_reduce(example *ex)
{
	const uint32_t push = REDUCE_N;
	const uint32_t ngroups = ceil_div(REDUCE_N, REDUCE_WG);
	const uint32_t groups[3] = {ngroups, 1, 1};
	uint32_t *in = malloc(REDUCE_N * sizeof(uint32_t));
	uint32_t *partial = malloc(ngroups * sizeof(uint32_t));
	uint32_t seed = 0x0badf00du;
	int rv = example_kernel(ex, "reduce");

	example_size(ex, "n", REDUCE_N);
	example_size(ex, "groups", ngroups);
	if (rv == 0 && (!in || !partial))
		rv = example_out_of_memory(ex);
	if (rv != 0)
		goto out;
	/* Full 32-bit values, so that the sums wrap around many times. */
	for (uint32_t i = 0; i < REDUCE_N; i++)
		in[i] = xorshift32(&seed);
	example_buffer bufs[] = {
	        {.host = in, .size = REDUCE_N * sizeof(uint32_t), .upload = true},
	        {.host = partial, .size = ngroups * sizeof(uint32_t), .written = true},
	};
	rv = example_run(ex, bufs, 2, groups, &push, sizeof(push));
	if (rv != 0 || !example_completed(ex))
		goto out;
	/* The total is what the example computes; comparing it partial by partial as well says
	 * which group went wrong. */
	uint32_t total = 0, want_total = 0;
	for (uint32_t g = 0; g < ngroups; g++) {
		uint32_t want = 0;

		for (uint32_t i = g * REDUCE_WG; i < REDUCE_N && i < (g + 1) * REDUCE_WG; i++)
			want += in[i];
		total += partial[g];
		want_total += want;
		if (partial[g] != want)
			example_mismatch_uint(ex, g, partial[g], want);
	}
	/* Reported only if every partial sum matched: the first mismatch is the one kept. */
	if (total != want_total)
		example_mismatch_uint(ex, ngroups, total, want_total);
out:
	free(in);
	free(partial);
	return rv;
}

#ifndef EXAMPLE_NO_MAIN
static const char about[] =
        "Runs the reduce kernel (a sum of uints) on a gpusched daemon and compares the\n"
        "result with a reference computed on the CPU. The adapter must run user kernels\n"
        "(backend vulkan).\n";

int main(int argc, char **argv)
{
	static const example_program prog = {
	        .name = "example_reduce",
	        .about = about,
	        .dir_help = "where reduce.spv is",
	        .run = {example_reduce},
	};

	return example_main(argc, argv, &prog);
}
#endif
