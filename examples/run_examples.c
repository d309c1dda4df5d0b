/*
 * run_examples: runs the example kernels of examples/kernels/ on a gpusched daemon and checks
 * every result against a reference computed here on the CPU.
 *
 * It connects, creates one device and one context on the chosen adapter, and for each example
 * (saxpy, reduce, matmul, blur) creates the kernel from its .spv file, allocates and fills the
 * buffers, submits one packet holding one DISPATCH, waits for it, reads the outputs back and
 * compares them. Each example prints one line: its sizes, the packet's final state, "ok" or
 * the first mismatch, and the kernel's reflection as the daemon reports it.
 *
 * Inputs come from a fixed-seed xorshift, so a failure reproduces exactly. The comparisons:
 *   saxpy   within 1 ulp of a * x + y rounded either fused (fmaf) or unfused
 *   reduce  bit-exact: uint sums wrap modulo 2^32 in any order
 *   matmul  relative error <= 1e-4 against a double-precision product (see check_matmul)
 *   blur    bit-exact: integer arithmetic only
 *
 * It uses only the public API of libgpusched (gpusched.h), as any client program would.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.h"

#ifdef GS_EXAMPLES_SPV_DIR
#define DEFAULT_SPV_DIR GS_EXAMPLES_SPV_DIR
#else
#define DEFAULT_SPV_DIR "."
#endif

#define EXIT_MISMATCH  4 /* a result differs, or a packet did not complete */
#define EXIT_DAEMON    1 /* the daemon answered an error */
#define EXIT_USAGE     2
#define EXIT_TRANSPORT 3 /* cannot connect, or the connection failed */

#define WAIT_MS        60000u     /* how long one packet may take before we give up on it */
#define MAX_SPIRV      (4u << 20) /* the daemon refuses larger modules (TOO_LARGE) */
#define MAX_ALLOCATION (8u << 20) /* bytes per allocation at most, for small adapters */
#define MAX_BUFFERS    3          /* bindings of the largest example */
#define MSG_MAX        256

/* Sizes of the examples. None is a multiple of its kernel's work-group size, so the guards
 * for the last, partial group are exercised. */
#define SAXPY_N   1000001u /* 1000000 is 64 * 15625: one more leaves a partial group */
#define SAXPY_A   1.75f
#define REDUCE_N  1048573u /* 2^20 - 3 */
#define REDUCE_WG 256u
#define MATMUL_M  200u
#define MATMUL_N  136u
#define MATMUL_K  77u
#define MATMUL_WG 16u
#define BLUR_W    257u
#define BLUR_H    131u
#define BLUR_WG   8u

/* The relative error matmul accepts: float accumulation of K = 77 products is off by at most
 * about K * 2^-24 (5e-6) of the sum of their magnitudes; 1e-4 leaves room for any order of
 * summation and for fused multiply-adds, and still catches a wrong or missing term. */
#define MATMUL_TOLERANCE 1e-4

_Static_assert(sizeof(float) * (uint64_t)SAXPY_N <= MAX_ALLOCATION,
               "saxpy vectors exceed MAX_ALLOCATION");
_Static_assert(sizeof(uint32_t) * (uint64_t)REDUCE_N <= MAX_ALLOCATION,
               "reduce input exceeds MAX_ALLOCATION");
_Static_assert(sizeof(float) * (uint64_t)MATMUL_M * MATMUL_K <= MAX_ALLOCATION &&
                       sizeof(float) * (uint64_t)MATMUL_K * MATMUL_N <= MAX_ALLOCATION &&
                       sizeof(float) * (uint64_t)MATMUL_M * MATMUL_N <= MAX_ALLOCATION,
               "matmul matrices exceed MAX_ALLOCATION");
_Static_assert(sizeof(uint32_t) * (uint64_t)BLUR_W * BLUR_H <= MAX_ALLOCATION,
               "blur image exceeds MAX_ALLOCATION");

static const char help[] =
        "Usage: run_examples [--url URL] [--adapter N] [--dir DIR] [--json]\n"
        "Runs the example kernels (saxpy, reduce, matmul, blur) on a gpusched daemon and\n"
        "compares every result with a reference computed on the CPU. The adapter must run\n"
        "user kernels (backend vulkan).\n"
        "\n"
        "Options:\n"
        "  --url URL      the daemon (default: $GPUSCHED_URL, else the local socket)\n"
        "  --adapter N    adapter id (default: the first that runs user kernels;\n"
        "                 gpusched info lists them)\n"
        "  --dir DIR      where saxpy.spv, reduce.spv, matmul.spv and blur.spv are\n"
        "                 (default " DEFAULT_SPV_DIR ")\n"
        "  --json         one JSON object per example instead of a line of text\n"
        "  --help         this text\n"
        "\n"
        "Exit status: 0 every result matches, 4 a result differs or a packet did not\n"
        "complete, 1 the daemon answered an error, 2 usage error or unreadable .spv file,\n"
        "3 cannot connect.\n";

/* ---- the run ---------------------------------------------------------------------------- */

typedef struct runner {
	gs_client *c;
	const char *dir;
	bool json;
	uint64_t device;
	uint64_t context;
	gs_dmabuf dma;
	const char *example; /* the one running, for messages */
	/* Kernels created so far (one per example), destroyed at the end. */
	uint64_t kernels[4];
	size_t kernel_count;
} runner;

/* One buffer of a dispatch; binding i of the kernel is buffer i. */
typedef struct buffer {
	void *host;   /* the input to upload, and where a written buffer is read back to */
	size_t size;  /* bytes */
	bool upload;  /* the kernel reads what the host put there */
	bool written; /* the kernel writes it: marked write, read back after the packet */
	uint64_t allocation;
} buffer;

/* What one example did, for its line of output. */
typedef struct outcome {
	const char *size_names[3];
	uint32_t sizes[3];
	size_t size_count;
	gs_kernel_info kernel;
	gs_submit_result packet;
	char message[MSG_MAX]; /* why the packet did not complete ("" when it did) */
	bool mismatch;
	bool is_float; /* got and want are floats (else uint32) */
	size_t index;  /* of the first mismatching element */
	double got, want;
} outcome;

/* Prints why a call failed, while gs_client_message still describes it, and returns the exit
 * code: a lost connection is 3 as when connecting fails, the daemon's refusals are 1. */
static int fail_call(runner *r, const char *call, int status)
{
	const char *msg = gs_client_message(r->c);

	fprintf(stderr, "run_examples: %s: %s: %s: %s\n", r->example, call, gs_status_name(status),
	        msg[0] ? msg : gs_strerror(status));
	if (status == GS_ERR_TRANSPORT || status == GS_ERR_TIMEOUT || status == GS_ERR_PROTOCOL)
		return EXIT_TRANSPORT;
	return EXIT_DAEMON;
}

static uint32_t ceil_div(uint32_t n, uint32_t d)
{
	return n / d + (n % d != 0);
}

/* Reads <dir>/<name>.spv into a malloc'd buffer. 0, or the exit code after saying why. */
static int read_spirv(const runner *r, const char *name, void **out, size_t *size)
{
	char path[4096];
	FILE *f;
	uint8_t *data;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s.spv", r->dir, name);
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "run_examples: %s: cannot open %s: %s (see --dir)\n", r->example,
		        path, strerror(errno));
		return EXIT_USAGE;
	}
	/* One byte more than the daemon takes tells a module that is too large. */
	data = malloc(MAX_SPIRV + 1);
	if (!data) {
		fclose(f);
		fprintf(stderr, "run_examples: out of memory\n");
		return EXIT_DAEMON;
	}
	n = fread(data, 1, MAX_SPIRV + 1, f);
	if (ferror(f) || n == 0 || n > MAX_SPIRV) {
		const char *why = n ? "larger than 4 MiB" : "empty";

		fprintf(stderr, "run_examples: %s: cannot read %s: %s\n", r->example, path,
		        ferror(f) ? strerror(errno) : why);
		fclose(f);
		free(data);
		return EXIT_USAGE;
	}
	fclose(f);
	*out = data;
	*size = n;
	return 0;
}

static int create_kernel(runner *r, const char *name, gs_kernel_info *info)
{
	void *spirv;
	size_t size;
	int rv = read_spirv(r, name, &spirv, &size);

	if (rv != 0)
		return rv;
	rv = gs_kernel_create(r->c, r->device, spirv, size, NULL, info);
	free(spirv);
	if (rv != 0)
		return fail_call(r, "gs_kernel_create", rv);
	r->kernels[r->kernel_count++] = info->kernel;
	return 0;
}

static void destroy_buffers(runner *r, buffer *bufs, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (bufs[i].allocation) {
			/* Best effort: destroying the device at the end frees what is left. */
			(void)gs_allocation_destroy(r->c, bufs[i].allocation);
			bufs[i].allocation = 0;
		}
}

static int create_buffers(runner *r, buffer *bufs, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		gs_allocation_desc desc = {.device = r->device, .size = bufs[i].size};
		gs_allocation_placement place;
		int rv = gs_allocation_create(r->c, &desc, &place);

		if (rv != 0)
			return fail_call(r, "gs_allocation_create", rv);
		bufs[i].allocation = place.allocation;
		if (bufs[i].upload) {
			rv = gs_allocation_write(r->c, place.allocation, 0, bufs[i].host,
			                         bufs[i].size);
			if (rv != 0)
				return fail_call(r, "gs_allocation_write", rv);
		}
	}
	return 0;
}

/* Submits one DISPATCH of the kernel over the buffers and waits until the packet is final. */
static int dispatch(runner *r, const buffer *bufs, size_t count, const uint32_t groups[3],
                    const void *push, size_t push_size, outcome *o)
{
	gs_dmabuf_binding bind[MAX_BUFFERS];
	int rv;

	for (size_t i = 0; i < count; i++)
		bind[i] = (gs_dmabuf_binding){.binding = (uint32_t)i,
		                              .allocation = bufs[i].allocation,
		                              .offset = 0,
		                              .range = bufs[i].size,
		                              .write = bufs[i].written};
	gs_dmabuf_reset(&r->dma);
	rv = gs_dmabuf_dispatch(&r->dma, o->kernel.kernel, groups, bind, count, push, push_size);
	if (rv != 0)
		return fail_call(r, "gs_dmabuf_dispatch", rv);
	rv = gs_submit_wait(r->c, r->context, &r->dma, 0, WAIT_MS, &o->packet);
	if (rv == GS_STATUS_FAULTED) {
		/* The packet's result, not a failure of the request: the example fails. */
		snprintf(o->message, sizeof(o->message), "%s", gs_client_message(r->c));
		return 0;
	}
	if (rv != 0)
		return fail_call(r, "gs_submit_wait", rv);
	if (!gs_packet_state_is_final(o->packet.state))
		snprintf(o->message, sizeof(o->message), "not final after %u ms", WAIT_MS);
	else if (o->packet.state != GS_PACKET_COMPLETED)
		snprintf(o->message, sizeof(o->message), "%s", gs_client_message(r->c));
	return 0;
}

/*
 * One example's kernel on the GPU: creates the kernel and the buffers, uploads the inputs,
 * runs one dispatch and, if the packet completed, reads the written buffers back into their
 * host memory. The caller checks the results when o->packet.state is COMPLETED.
 */
static int run_kernel(runner *r, const char *name, buffer *bufs, size_t count,
                      const uint32_t groups[3], const void *push, size_t push_size, outcome *o)
{
	int rv = create_kernel(r, name, &o->kernel);

	if (rv == 0)
		rv = create_buffers(r, bufs, count);
	if (rv == 0)
		rv = dispatch(r, bufs, count, groups, push, push_size, o);
	for (size_t i = 0; rv == 0 && o->packet.state == GS_PACKET_COMPLETED && i < count; i++) {
		if (!bufs[i].written)
			continue;
		rv = gs_allocation_read(r->c, bufs[i].allocation, 0, bufs[i].host, bufs[i].size);
		if (rv != 0)
			rv = fail_call(r, "gs_allocation_read", rv);
	}
	destroy_buffers(r, bufs, count);
	return rv;
}

/* ---- inputs and comparisons ------------------------------------------------------------- */

/* Marsaglia's xorshift32: deterministic across platforms, which is all the inputs need. */
static uint32_t xorshift32(uint32_t *state)
{
	uint32_t x = *state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

/* A float in [-1, 1) with 24 significant bits, so that it is exact. */
static float random_float(uint32_t *state)
{
	return (float)(int32_t)(xorshift32(state) >> 8) / (float)(1u << 23) - 1.0f;
}

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

static void set_mismatch(outcome *o, size_t index, double got, double want, bool is_float)
{
	o->mismatch = true;
	o->index = index;
	o->got = got;
	o->want = want;
	o->is_float = is_float;
}

static void set_sizes(outcome *o, const char *n0, uint32_t v0, const char *n1, uint32_t v1,
                      const char *n2, uint32_t v2)
{
	const char *names[3] = {n0, n1, n2};
	uint32_t values[3] = {v0, v1, v2};

	for (size_t i = 0; i < 3 && names[i]; i++) {
		o->size_names[i] = names[i];
		o->sizes[i] = values[i];
		o->size_count = i + 1;
	}
}

/* ---- the examples ----------------------------------------------------------------------- */

static int example_saxpy(runner *r, outcome *o)
{
	struct {
		float a;
		uint32_t n;
	} push = {SAXPY_A, SAXPY_N};
	_Static_assert(sizeof(push) == 8, "push constants of saxpy.comp");
	const uint32_t groups[3] = {ceil_div(SAXPY_N, 64), 1, 1};
	float *x = malloc(SAXPY_N * sizeof(float));
	float *y = malloc(SAXPY_N * sizeof(float));
	float *y0 = malloc(SAXPY_N * sizeof(float));
	uint32_t seed = 0x5a5a1234u;
	int rv = EXIT_DAEMON;

	set_sizes(o, "n", SAXPY_N, NULL, 0, NULL, 0);
	if (!x || !y || !y0) {
		fprintf(stderr, "run_examples: saxpy: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < SAXPY_N; i++) {
		x[i] = random_float(&seed);
		y0[i] = y[i] = random_float(&seed);
	}
	buffer bufs[] = {
	        {.host = x, .size = SAXPY_N * sizeof(float), .upload = true},
	        {.host = y, .size = SAXPY_N * sizeof(float), .upload = true, .written = true},
	};
	rv = run_kernel(r, "saxpy", bufs, 2, groups, &push, sizeof(push), o);
	for (uint32_t i = 0; rv == 0 && o->packet.state == GS_PACKET_COMPLETED && i < SAXPY_N;
	     i++) {
		/* The GPU may round once (fma) or twice (multiply, then add); volatile keeps the
		 * compiler from contracting our unfused reference into an fma. */
		volatile float product = SAXPY_A * x[i];
		float unfused = product + y0[i];
		float fused = fmaf(SAXPY_A, x[i], y0[i]);

		if (!within_ulps(y[i], unfused, 1) && !within_ulps(y[i], fused, 1)) {
			set_mismatch(o, i, y[i], unfused, true);
			break;
		}
	}
out:
	free(x);
	free(y);
	free(y0);
	return rv;
}

static int example_reduce(runner *r, outcome *o)
{
	const uint32_t push = REDUCE_N;
	const uint32_t ngroups = ceil_div(REDUCE_N, REDUCE_WG);
	const uint32_t groups[3] = {ngroups, 1, 1};
	uint32_t *in = malloc(REDUCE_N * sizeof(uint32_t));
	uint32_t *partial = malloc(ngroups * sizeof(uint32_t));
	uint32_t seed = 0x0badf00du;
	int rv = EXIT_DAEMON;

	set_sizes(o, "n", REDUCE_N, "groups", ngroups, NULL, 0);
	if (!in || !partial) {
		fprintf(stderr, "run_examples: reduce: out of memory\n");
		goto out;
	}
	/* Full 32-bit values, so that the sums wrap around many times. */
	for (uint32_t i = 0; i < REDUCE_N; i++)
		in[i] = xorshift32(&seed);
	buffer bufs[] = {
	        {.host = in, .size = REDUCE_N * sizeof(uint32_t), .upload = true},
	        {.host = partial, .size = ngroups * sizeof(uint32_t), .written = true},
	};
	rv = run_kernel(r, "reduce", bufs, 2, groups, &push, sizeof(push), o);
	if (rv != 0 || o->packet.state != GS_PACKET_COMPLETED)
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
		if (!o->mismatch && partial[g] != want)
			set_mismatch(o, g, partial[g], want, false);
	}
	if (!o->mismatch && total != want_total)
		set_mismatch(o, ngroups, total, want_total, false);
out:
	free(in);
	free(partial);
	return rv;
}

/*
 * Relative error of each element of C against a double-precision product, at most
 * MATMUL_TOLERANCE. The inputs have both signs, so an element's terms can cancel to nearly 0,
 * where any rounding is a large fraction of the result; the error is therefore measured
 * relative to the sum of the terms' magnitudes (sum over k of |a[i][k] * b[k][j]|), which is
 * the scale of the rounding errors and equals |want| whenever the terms do not cancel.
 */
static void check_matmul(const float *a, const float *b, const float *c, outcome *o)
{
	for (uint32_t i = 0; i < MATMUL_M; i++)
		for (uint32_t j = 0; j < MATMUL_N; j++) {
			double want = 0, scale = 0;

			for (uint32_t k = 0; k < MATMUL_K; k++) {
				double t = (double)a[i * MATMUL_K + k] * b[k * MATMUL_N + j];

				want += t;
				scale += fabs(t);
			}
			double got = c[i * MATMUL_N + j];
			double err = fabs(got - want);
			if (!(err <= MATMUL_TOLERANCE * scale)) { /* also catches NaN */
				set_mismatch(o, (size_t)i * MATMUL_N + j, got, want, true);
				return;
			}
		}
}

static int example_matmul(runner *r, outcome *o)
{
	const uint32_t push[3] = {MATMUL_M, MATMUL_N, MATMUL_K};
	const uint32_t groups[3] = {ceil_div(MATMUL_N, MATMUL_WG), ceil_div(MATMUL_M, MATMUL_WG),
	                            1};
	float *a = malloc(MATMUL_M * MATMUL_K * sizeof(float));
	float *b = malloc(MATMUL_K * MATMUL_N * sizeof(float));
	float *c = malloc(MATMUL_M * MATMUL_N * sizeof(float));
	uint32_t seed = 0x12345678u;
	int rv = EXIT_DAEMON;

	set_sizes(o, "M", MATMUL_M, "N", MATMUL_N, "K", MATMUL_K);
	if (!a || !b || !c) {
		fprintf(stderr, "run_examples: matmul: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < MATMUL_M * MATMUL_K; i++)
		a[i] = random_float(&seed);
	for (uint32_t i = 0; i < MATMUL_K * MATMUL_N; i++)
		b[i] = random_float(&seed);
	buffer bufs[] = {
	        {.host = a, .size = MATMUL_M * MATMUL_K * sizeof(float), .upload = true},
	        {.host = b, .size = MATMUL_K * MATMUL_N * sizeof(float), .upload = true},
	        {.host = c, .size = MATMUL_M * MATMUL_N * sizeof(float), .written = true},
	};
	rv = run_kernel(r, "matmul", bufs, 3, groups, push, sizeof(push), o);
	if (rv == 0 && o->packet.state == GS_PACKET_COMPLETED)
		check_matmul(a, b, c, o);
out:
	free(a);
	free(b);
	free(c);
	return rv;
}

static uint32_t clamp_index(int64_t v, uint32_t n)
{
	return v < 0 ? 0 : v >= n ? n - 1 : (uint32_t)v;
}

static int example_blur(runner *r, outcome *o)
{
	const uint32_t push[2] = {BLUR_W, BLUR_H};
	const uint32_t groups[3] = {ceil_div(BLUR_W, BLUR_WG), ceil_div(BLUR_H, BLUR_WG), 1};
	const size_t size = (size_t)BLUR_W * BLUR_H * sizeof(uint32_t);
	uint32_t *in = malloc(size);
	uint32_t *out = malloc(size);
	uint32_t seed = 0xdecafbadu;
	int rv = EXIT_DAEMON;

	set_sizes(o, "w", BLUR_W, "h", BLUR_H, NULL, 0);
	if (!in || !out) {
		fprintf(stderr, "run_examples: blur: out of memory\n");
		goto done;
	}
	for (uint32_t i = 0; i < BLUR_W * BLUR_H; i++)
		in[i] = xorshift32(&seed) >> 24;
	buffer bufs[] = {
	        {.host = in, .size = size, .upload = true},
	        {.host = out, .size = size, .written = true},
	};
	rv = run_kernel(r, "blur", bufs, 2, groups, push, sizeof(push), o);
	if (rv != 0 || o->packet.state != GS_PACKET_COMPLETED)
		goto done;
	for (uint32_t y = 0; y < BLUR_H && !o->mismatch; y++)
		for (uint32_t x = 0; x < BLUR_W; x++) {
			uint32_t sum = 0;

			for (int dy = -1; dy <= 1; dy++)
				for (int dx = -1; dx <= 1; dx++)
					sum += in[clamp_index((int64_t)y + dy, BLUR_H) * BLUR_W +
					          clamp_index((int64_t)x + dx, BLUR_W)];
			if (out[y * BLUR_W + x] != sum / 9) {
				set_mismatch(o, (size_t)y * BLUR_W + x, out[y * BLUR_W + x],
				             sum / 9, false);
				break;
			}
		}
done:
	free(in);
	free(out);
	return rv;
}

typedef struct example {
	const char *name;
	int (*run)(runner *r, outcome *o);
} example;

static const example examples[] = {
        {"saxpy", example_saxpy},
        {"reduce", example_reduce},
        {"matmul", example_matmul},
        {"blur", example_blur},
};
_Static_assert(sizeof(examples) / sizeof(examples[0]) <=
                       sizeof(((runner *)0)->kernels) / sizeof(uint64_t),
               "runner.kernels holds one kernel per example");

/* ---- output ----------------------------------------------------------------------------- */

static bool outcome_ok(const outcome *o)
{
	return o->packet.state == GS_PACKET_COMPLETED && !o->mismatch;
}

static const char *binding_kind_name(uint32_t kind)
{
	return kind == GS_KERNEL_UNIFORM_BUFFER ? "uniform" : "storage";
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

/* JSON has no NaN or infinity: those go as strings. */
static void json_number(double v, bool is_float)
{
	if (!is_float)
		printf("%.0f", v);
	else if (isfinite(v))
		printf("%.9g", v);
	else
		printf("\"%g\"", v);
}

static void print_json(const char *name, const outcome *o)
{
	printf("{\"example\":\"%s\",\"sizes\":{", name);
	for (size_t i = 0; i < o->size_count; i++)
		printf("%s\"%s\":%" PRIu32, i ? "," : "", o->size_names[i], o->sizes[i]);
	/* Packet ids go above 2^53, where a JSON number loses digits in JavaScript: a string
	 * keeps the value the daemon gave. */
	printf("},\"packet\":\"%" PRIu64 "\",\"state\":\"%s\",\"ok\":%s,\"message\":",
	       o->packet.packet, gs_packet_state_name(o->packet.state),
	       outcome_ok(o) ? "true" : "false");
	json_string(o->message);
	printf(",\"mismatch\":");
	if (o->mismatch) {
		printf("{\"index\":%zu,\"got\":", o->index);
		json_number(o->got, o->is_float);
		printf(",\"want\":");
		json_number(o->want, o->is_float);
		printf("}");
	} else {
		printf("null");
	}
	printf(",\"kernel\":{\"entry_point\":");
	json_string(o->kernel.entry_point);
	printf(",\"local_size\":[%" PRIu32 ",%" PRIu32 ",%" PRIu32 "]"
	       ",\"push_constant_bytes\":%" PRIu32 ",\"cached\":%s,\"bindings\":[",
	       o->kernel.local_size[0], o->kernel.local_size[1], o->kernel.local_size[2],
	       o->kernel.push_constant_bytes, o->kernel.cached ? "true" : "false");
	for (uint32_t i = 0; i < o->kernel.nbindings; i++) {
		const gs_kernel_binding_info *b = &o->kernel.bindings[i];

		printf("%s{\"binding\":%" PRIu32 ",\"kind\":\"%s\",\"writes\":%s,\"name\":",
		       i ? "," : "", b->binding, binding_kind_name(b->kind),
		       b->writes ? "true" : "false");
		json_string(b->name);
		printf("}");
	}
	printf("]}}\n");
}

static void print_text(const char *name, const outcome *o)
{
	char sizes[64] = "";
	size_t len = 0;

	for (size_t i = 0; i < o->size_count; i++)
		len += (size_t)snprintf(sizes + len, sizeof(sizes) - len, "%s%s=%" PRIu32,
		                        i ? " " : "", o->size_names[i], o->sizes[i]);
	printf("%-7s %-22s packet %s", name, sizes, gs_packet_state_name(o->packet.state));
	if (o->message[0])
		printf(" (%s)", o->message);
	if (o->mismatch && o->is_float)
		printf("  MISMATCH at %zu: got %.9g, want %.9g", o->index, o->got, o->want);
	else if (o->mismatch)
		printf("  MISMATCH at %zu: got %.0f, want %.0f", o->index, o->got, o->want);
	else if (outcome_ok(o))
		printf("  ok");
	printf("  | local %" PRIu32 "x%" PRIu32 "x%" PRIu32 ", push %" PRIu32 " B, bindings",
	       o->kernel.local_size[0], o->kernel.local_size[1], o->kernel.local_size[2],
	       o->kernel.push_constant_bytes);
	/* Without names: glslc -O strips them, and the daemon then reports placeholders such as
	 * "_40_42" that tell a reader nothing (--json has them). */
	for (uint32_t i = 0; i < o->kernel.nbindings; i++) {
		const gs_kernel_binding_info *b = &o->kernel.bindings[i];

		printf("%s %" PRIu32 ":%s:%s", i ? "," : "", b->binding, binding_kind_name(b->kind),
		       b->writes ? "rw" : "ro");
	}
	printf("\n");
}

/* ---- setup ------------------------------------------------------------------------------ */

/* The adapter named by --adapter, else the first that runs user kernels. 0, or the exit code
 * after saying why there is none. */
static int pick_adapter(const gs_daemon_info *info, bool given, uint32_t id,
                        const gs_adapter_info **out)
{
	for (size_t i = 0; i < info->adapter_count; i++) {
		const gs_adapter_info *a = &info->adapters[i];

		if (given ? a->id == id : a->kernels) {
			*out = a;
			return 0;
		}
	}
	if (given) {
		fprintf(stderr, "run_examples: adapter %" PRIu32 " does not exist\n", id);
		return EXIT_USAGE;
	}
	fprintf(stderr, "run_examples: no adapter of the daemon runs user kernels (they need "
	                "backend vulkan: gpuschedd --backend vulkan)\n");
	return EXIT_DAEMON;
}

/* Creates the device and, on the adapter's first compute node (else its first node), the one
 * context every example submits to. */
static int setup(runner *r, bool adapter_given, uint32_t adapter)
{
	gs_daemon_info *info;
	const gs_adapter_info *a = NULL;
	gs_context_desc desc;
	int rv;

	r->example = "setup";
	rv = gs_info(r->c, &info);
	if (rv != 0)
		return fail_call(r, "gs_info", rv);
	rv = pick_adapter(info, adapter_given, adapter, &a);
	if (rv == 0 && a->node_count == 0) {
		fprintf(stderr, "run_examples: adapter %" PRIu32 " has no nodes\n", a->id);
		rv = EXIT_DAEMON;
	}
	if (rv != 0) {
		gs_info_free(info);
		return rv;
	}
	/* An adapter named by --adapter that runs no kernels goes on: the daemon's refusal of
	 * the first kernel says why. */
	gs_client_set_adapter(r->c, a->id);
	rv = gs_device_create(r->c, "run_examples", &r->device);
	if (rv != 0) {
		gs_info_free(info);
		return fail_call(r, "gs_device_create", rv);
	}
	const gs_node_info *node = &a->nodes[0];
	uint32_t paging = 0;
	for (size_t i = a->node_count; i-- > 0;) {
		if (a->nodes[i].kind == GS_NODE_COMPUTE)
			node = &a->nodes[i];
		if (a->nodes[i].paging)
			paging = a->nodes[i].id;
	}
	gs_context_desc_init(&desc, r->device, node->id);
	desc.info.paging_companion_node_id = paging;
	gs_info_free(info);
	rv = gs_context_create(r->c, &desc, &r->context, NULL);
	if (rv != 0)
		return fail_call(r, "gs_context_create", rv);
	return 0;
}

/* Destroys the kernels, then the device (with its context and anything an error left). */
static void teardown(runner *r)
{
	r->example = "teardown";
	for (size_t i = 0; i < r->kernel_count; i++) {
		int rv = gs_kernel_destroy(r->c, r->kernels[i]);

		if (rv != 0)
			(void)fail_call(r, "gs_kernel_destroy", rv);
	}
	if (r->device) {
		int rv = gs_device_destroy(r->c, r->device);

		if (rv != 0)
			(void)fail_call(r, "gs_device_destroy", rv);
	}
}

/* ---- options ---------------------------------------------------------------------------- */

typedef struct options {
	const char *url; /* NULL: gs_default_url() */
	uint32_t adapter;
	bool adapter_given; /* else the first adapter that runs kernels */
	const char *dir;
	bool json;
	bool help;
} options;

static int usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "run_examples: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'run_examples --help'.\n");
	return EXIT_USAGE;
}

/* The value of option argv[*i]: "--opt=VALUE" or "--opt VALUE". NULL when it is missing. */
static const char *option_value(int argc, char **argv, int *i, const char *eq)
{
	if (eq)
		return eq + 1;
	if (*i + 1 >= argc)
		return NULL;
	return argv[++*i];
}

static int parse_options(int argc, char **argv, options *opt)
{
	*opt = (options){.dir = DEFAULT_SPV_DIR};
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		const char *value;

		if (len == 6 && !strncmp(arg, "--help", len) && !eq) {
			opt->help = true;
		} else if (len == 6 && !strncmp(arg, "--json", len) && !eq) {
			opt->json = true;
		} else if (len == 5 && !strncmp(arg, "--url", len)) {
			if (!(value = option_value(argc, argv, &i, eq)))
				return usage("%s needs a URL", arg);
			opt->url = value;
		} else if (len == 5 && !strncmp(arg, "--dir", len)) {
			if (!(value = option_value(argc, argv, &i, eq)))
				return usage("%s needs a directory", arg);
			opt->dir = value;
		} else if (len == 9 && !strncmp(arg, "--adapter", len)) {
			char *end;
			unsigned long n;

			if (!(value = option_value(argc, argv, &i, eq)))
				return usage("%s needs a number", arg);
			errno = 0;
			n = strtoul(value, &end, 10);
			if (!*value || *end || errno || n > UINT32_MAX || value[0] == '-')
				return usage("--adapter: '%s' is not an adapter id", value);
			opt->adapter = (uint32_t)n;
			opt->adapter_given = true;
		} else {
			return usage("unknown argument '%s'", arg);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	options opt;
	runner r = {0};
	char url[1024];
	char why[512] = "";
	int rv, status = 0;

	rv = parse_options(argc, argv, &opt);
	if (rv != 0)
		return rv;
	if (opt.help) {
		fputs(help, stdout);
		return 0;
	}
	/* The default is resolved here only to name it if connecting fails. */
	if (!opt.url && gs_default_url(url, sizeof(url)) != 0)
		return usage("%s", "the default URL ($GPUSCHED_URL) is too long");
	const char *target = opt.url ? opt.url : url;
	rv = gs_connect_ex(target, NULL, &r.c, why, sizeof(why));
	if (rv != 0) {
		fprintf(stderr, "run_examples: cannot connect to %s: %s (is gpuschedd running?)\n",
		        target, why[0] ? why : gs_strerror(rv));
		return EXIT_TRANSPORT;
	}
	r.dir = opt.dir;
	r.json = opt.json;
	gs_dmabuf_init(&r.dma);

	rv = setup(&r, opt.adapter_given, opt.adapter);
	for (size_t i = 0; rv == 0 && i < sizeof(examples) / sizeof(examples[0]); i++) {
		outcome o = {0};

		r.example = examples[i].name;
		rv = examples[i].run(&r, &o);
		if (rv != 0)
			break;
		if (r.json)
			print_json(examples[i].name, &o);
		else
			print_text(examples[i].name, &o);
		fflush(stdout);
		if (!outcome_ok(&o))
			status = EXIT_MISMATCH;
	}
	teardown(&r);
	gs_dmabuf_free(&r.dma);
	gs_close(r.c);
	return rv != 0 ? rv : status;
}
