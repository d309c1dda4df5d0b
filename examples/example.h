/*
 * example.h: what the example programs share (example.c), so that each example file holds
 * only its kernel's sizes, inputs, bindings and CPU reference.
 *
 * A program fills an example_program and calls example_main. That parses the options,
 * connects, creates one device and one context, and runs the program's examples in order.
 * Each example (example_saxpy, ...) creates its kernel with example_kernel, runs it once over
 * its buffers with example_run, and compares what came back with the CPU, recording the first
 * difference with example_mismatch_*. example_main then prints the example's line of output.
 *
 * It uses only the public API of libgpusched (gpusched.h), as any client program would.
 */
#ifndef EXAMPLE_H
#define EXAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpusched.h"

/* Exit status of the programs. */
#define EXIT_DAEMON    1 /* the daemon answered an error */
#define EXIT_USAGE     2 /* a usage error, or an unreadable .spv file */
#define EXIT_TRANSPORT 3 /* cannot connect, or the connection failed */
#define EXIT_MISMATCH  4 /* a result differs, or a packet did not complete */

/* Bytes per allocation at most, for small adapters: each example asserts its buffers fit. */
#define EXAMPLE_MAX_ALLOCATION (8u << 20)
#define EXAMPLE_MSG_MAX        256

/* One buffer of a dispatch; binding i of the kernel is buffer i. */
typedef struct example_buffer {
	void *host;   /* the input to upload, and where a written buffer is read back to */
	size_t size;  /* bytes */
	bool upload;  /* the kernel reads what the host put there */
	bool written; /* the kernel writes it: marked write, read back after the packet */
	uint64_t allocation;
} example_buffer;

/* What one example did, for its line of output. */
typedef struct example_result {
	const char *size_names[3];
	uint32_t sizes[3];
	size_t size_count;
	gs_kernel_info kernel;
	gs_submit_result packet;
	char message[EXAMPLE_MSG_MAX]; /* why the packet did not complete ("" when it did) */
	bool mismatch;
	bool is_float; /* got and want are floats (else uint32) */
	size_t index;  /* of the first mismatching element */
	double got, want;
} example_result;

/* The connection and the example running. */
typedef struct example {
	const char *prog; /* the program's name, for messages */
	gs_client *c;
	const char *dir; /* where the .spv files are */
	bool json;
	uint64_t device;
	uint64_t context;
	gs_dmabuf dma;
	const char *name; /* the example running, for messages and its line */
	example_result result;
} example;

/* Runs one example: 0 when it ran and compared its results (in ex->result), else the exit
 * status of the error, after saying why on stderr. */
typedef int example_fn(example *ex);

/* The four examples, each in the file of its name. */
int example_saxpy(example *ex);
int example_reduce(example *ex);
int example_matmul(example *ex);
int example_blur(example *ex);

#define EXAMPLE_MAX_RUN 4

/* One program: an example's own main runs that example, run_examples runs all four. */
typedef struct example_program {
	const char *name;                 /* "example_saxpy": messages and --help */
	const char *about;                /* what --help says the program does, in whole lines */
	const char *dir_help;             /* --help's words for --dir: "where saxpy.spv is" */
	example_fn *run[EXAMPLE_MAX_RUN]; /* in this order, up to the first NULL */
} example_program;

/* The whole program: options, connection, the examples in order, one line of output each.
 * Returns the exit status. */
int example_main(int argc, char **argv, const example_program *prog);

/* Starts the example `name`, so an example calls it first: creates its kernel from
 * <dir>/<name>.spv, and names the example in messages and in its line. 0 or an exit status. */
int example_kernel(example *ex, const char *name);

/* The sizes its line of output reports, in order (at most 3). */
void example_size(example *ex, const char *name, uint32_t value);

/* Creates the buffers and uploads the inputs, submits one packet holding one DISPATCH of the
 * kernel over groups[0] x groups[1] x groups[2] work groups and waits for it; if it
 * completed, reads the written buffers back into their host memory. Then destroys the
 * buffers. 0 or an exit status; compare the results only if example_completed. */
int example_run(example *ex, example_buffer *bufs, size_t count, const uint32_t groups[3],
                const void *push, size_t push_size);

/* The packet completed: there are results to compare. */
bool example_completed(const example *ex);

/* Records a difference from the CPU's result; only the first is reported. */
void example_mismatch_float(example *ex, size_t index, float got, double want);
void example_mismatch_uint(example *ex, size_t index, uint32_t got, uint32_t want);

/* Says the host ran out of memory and returns the exit status for it. */
int example_out_of_memory(const example *ex);

/* Work groups of size d that cover n items. */
uint32_t ceil_div(uint32_t n, uint32_t d);

/* Marsaglia's xorshift32: deterministic across platforms, so a failure reproduces exactly. */
uint32_t xorshift32(uint32_t *state);

/* A float in [-1, 1) with 24 significant bits, so that it is exact. */
float random_float(uint32_t *state);

#endif
