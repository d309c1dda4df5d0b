/*
 * run_examples: runs the four example programs' kernels (saxpy.c, reduce.c, matmul.c,
 * blur.c) one after the other on a gpusched daemon, over one connection, device and context,
 * and checks every result against the CPU. Built with EXAMPLE_NO_MAIN, so that the example
 * files bring their example_* functions without their own main.
 */
#include "example.h"

static const char about[] =
        "Runs the example kernels (saxpy, reduce, matmul, blur) on a gpusched daemon and\n"
        "compares every result with a reference computed on the CPU. The adapter must run\n"
        "user kernels (backend vulkan).\n";

int main(int argc, char **argv)
{
	static const example_program prog = {
	        .name = "run_examples",
	        .about = about,
	        .dir_help = "where saxpy.spv, reduce.spv, matmul.spv and blur.spv are",
	        .run = {example_saxpy, example_reduce, example_matmul, example_blur},
	};

	return example_main(argc, argv, &prog);
}
