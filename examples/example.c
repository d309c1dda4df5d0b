/*
 * example.c: the part of the example programs that is the same for every kernel (example.h).
 *
 * example_main parses the options, connects, creates one device and, on the adapter's first
 * compute node, one context, then runs each example of the program: the example creates its
 * kernel from its .spv file, allocates and fills the buffers, submits one packet holding one
 * DISPATCH, waits for it, reads the outputs back and compares them. Each example prints one
 * line: its sizes, the packet's final state, "ok" or the first mismatch, and the kernel's
 * reflection as the daemon reports it. A daemon error stops the program; a mismatch does not.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example.h"

#ifdef GS_EXAMPLES_SPV_DIR
#define DEFAULT_SPV_DIR GS_EXAMPLES_SPV_DIR
#else
#define DEFAULT_SPV_DIR "."
#endif

#define WAIT_MS   60000u     /* how long one packet may take before we give up on it */
#define MAX_SPIRV (4u << 20) /* the daemon refuses larger modules (TOO_LARGE) */

/* ---- calls to the daemon ---------------------------------------------------------------- */

/* Prints why a call failed, while gs_client_message still describes it, and returns the exit
 * code: a lost connection is 3 as when connecting fails, the daemon's refusals are 1. */
static int fail_call(const example *ex, const char *call, int status)
{
	const char *msg = gs_client_message(ex->c);

	fprintf(stderr, "%s: %s: %s: %s: %s\n", ex->prog, ex->name, call, gs_status_name(status),
	        msg[0] ? msg : gs_strerror(status));
	if (status == GS_ERR_TRANSPORT || status == GS_ERR_TIMEOUT || status == GS_ERR_PROTOCOL)
		return EXIT_TRANSPORT;
	return EXIT_DAEMON;
}

int example_out_of_memory(const example *ex)
{
	fprintf(stderr, "%s: %s: out of memory\n", ex->prog, ex->name);
	return EXIT_DAEMON;
}

/* Reads <dir>/<name>.spv into a malloc'd buffer. 0, or the exit code after saying why. */
static int read_spirv(const example *ex, void **out, size_t *size)
{
	char path[4096];
	FILE *f;
	uint8_t *data;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s.spv", ex->dir, ex->name);
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: %s: cannot open %s: %s (see --dir)\n", ex->prog, ex->name,
		        path, strerror(errno));
		return EXIT_USAGE;
	}
	/* One byte more than the daemon takes tells a module that is too large. */
	data = malloc(MAX_SPIRV + 1);
	if (!data) {
		fclose(f);
		return example_out_of_memory(ex);
	}
	n = fread(data, 1, MAX_SPIRV + 1, f);
	if (ferror(f) || n == 0 || n > MAX_SPIRV) {
		const char *why = n ? "larger than 4 MiB" : "empty";

		fprintf(stderr, "%s: %s: cannot read %s: %s\n", ex->prog, ex->name, path,
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

int example_kernel(example *ex, const char *name)
{
	gs_kernel_info info;
	void *spirv = NULL;
	size_t size = 0;
	int rv;

	ex->name = name;
	rv = read_spirv(ex, &spirv, &size);
	if (rv != 0)
		return rv;
	rv = gs_kernel_create(ex->c, ex->device, spirv, size, NULL, &info);
	free(spirv);
	if (rv != 0)
		return fail_call(ex, "gs_kernel_create", rv);
	ex->result.kernel = info;
	return 0;
}

static int create_buffers(example *ex, example_buffer *bufs, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		gs_allocation_desc desc = {.device = ex->device, .size = bufs[i].size};
		gs_allocation_placement place;
		int rv = gs_allocation_create(ex->c, &desc, &place);

		if (rv != 0)
			return fail_call(ex, "gs_allocation_create", rv);
		bufs[i].allocation = place.allocation;
		if (bufs[i].upload) {
			rv = gs_allocation_write(ex->c, place.allocation, 0, bufs[i].host,
			                         bufs[i].size);
			if (rv != 0)
				return fail_call(ex, "gs_allocation_write", rv);
		}
	}
	return 0;
}

static void destroy_buffers(example *ex, example_buffer *bufs, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (bufs[i].allocation) {
			/* Best effort: destroying the device at the end frees what is left. */
			(void)gs_allocation_destroy(ex->c, bufs[i].allocation);
			bufs[i].allocation = 0;
		}
}

/* Submits one DISPATCH of the kernel over the buffers and waits until the packet is final. */
static int dispatch(example *ex, const example_buffer *bufs, size_t count, const uint32_t groups[3],
                    const void *push, size_t push_size)
{
	example_result *res = &ex->result;
	gs_dmabuf_binding bind[GS_KERNEL_MAX_BINDINGS];
	int rv;

	if (count > GS_KERNEL_MAX_BINDINGS)
		return fail_call(ex, "gs_dmabuf_dispatch", GS_ERR_INVALID);
	for (size_t i = 0; i < count; i++)
		bind[i] = (gs_dmabuf_binding){.binding = (uint32_t)i,
		                              .allocation = bufs[i].allocation,
		                              .offset = 0,
		                              .range = bufs[i].size,
		                              .write = bufs[i].written};
	gs_dmabuf_reset(&ex->dma);
	rv = gs_dmabuf_dispatch(&ex->dma, res->kernel.kernel, groups, bind, count, push, push_size);
	if (rv != 0)
		return fail_call(ex, "gs_dmabuf_dispatch", rv);
	rv = gs_submit_wait(ex->c, ex->context, &ex->dma, 0, WAIT_MS, &res->packet);
	if (rv == GS_STATUS_FAULTED) {
		/* The packet's result, not a failure of the request: the example fails. */
		snprintf(res->message, sizeof(res->message), "%s", gs_client_message(ex->c));
		return 0;
	}
	if (rv != 0)
		return fail_call(ex, "gs_submit_wait", rv);
	if (!gs_packet_state_is_final(res->packet.state))
		snprintf(res->message, sizeof(res->message), "not final after %u ms", WAIT_MS);
	else if (res->packet.state != GS_PACKET_COMPLETED)
		snprintf(res->message, sizeof(res->message), "%s", gs_client_message(ex->c));
	return 0;
}

int example_run(example *ex, example_buffer *bufs, size_t count, const uint32_t groups[3],
                const void *push, size_t push_size)
{
	int rv = create_buffers(ex, bufs, count);

	if (rv == 0)
		rv = dispatch(ex, bufs, count, groups, push, push_size);
	for (size_t i = 0; rv == 0 && example_completed(ex) && i < count; i++) {
		if (!bufs[i].written)
			continue;
		rv = gs_allocation_read(ex->c, bufs[i].allocation, 0, bufs[i].host, bufs[i].size);
		if (rv != 0)
			rv = fail_call(ex, "gs_allocation_read", rv);
	}
	destroy_buffers(ex, bufs, count);
	return rv;
}

/* ---- inputs and results ----------------------------------------------------------------- */

uint32_t ceil_div(uint32_t n, uint32_t d)
{
	return n / d + (n % d != 0);
}

uint32_t xorshift32(uint32_t *state)
{
	uint32_t x = *state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

float random_float(uint32_t *state)
{
	return (float)(int32_t)(xorshift32(state) >> 8) / (float)(1u << 23) - 1.0f;
}

void example_size(example *ex, const char *name, uint32_t value)
{
	example_result *res = &ex->result;

	if (res->size_count < 3) {
		res->size_names[res->size_count] = name;
		res->sizes[res->size_count++] = value;
	}
}

bool example_completed(const example *ex)
{
	return ex->result.packet.state == GS_PACKET_COMPLETED;
}

static void set_mismatch(example *ex, size_t index, double got, double want, bool is_float)
{
	example_result *res = &ex->result;

	if (res->mismatch)
		return;
	res->mismatch = true;
	res->index = index;
	res->got = got;
	res->want = want;
	res->is_float = is_float;
}

void example_mismatch_float(example *ex, size_t index, float got, double want)
{
	set_mismatch(ex, index, got, want, true);
}

void example_mismatch_uint(example *ex, size_t index, uint32_t got, uint32_t want)
{
	set_mismatch(ex, index, got, want, false);
}

/* ---- output ----------------------------------------------------------------------------- */

static bool result_ok(const example_result *res)
{
	return res->packet.state == GS_PACKET_COMPLETED && !res->mismatch;
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

static void print_json(const char *name, const example_result *res)
{
	const gs_kernel_info *k = &res->kernel;

	printf("{\"example\":\"%s\",\"sizes\":{", name);
	for (size_t i = 0; i < res->size_count; i++)
		printf("%s\"%s\":%" PRIu32, i ? "," : "", res->size_names[i], res->sizes[i]);
	/* Packet ids go above 2^53, where a JSON number loses digits in JavaScript: a string
	 * keeps the value the daemon gave. */
	printf("},\"packet\":\"%" PRIu64 "\",\"state\":\"%s\",\"ok\":%s,\"message\":",
	       res->packet.packet, gs_packet_state_name(res->packet.state),
	       result_ok(res) ? "true" : "false");
	json_string(res->message);
	printf(",\"mismatch\":");
	if (res->mismatch) {
		printf("{\"index\":%zu,\"got\":", res->index);
		json_number(res->got, res->is_float);
		printf(",\"want\":");
		json_number(res->want, res->is_float);
		printf("}");
	} else {
		printf("null");
	}
	printf(",\"kernel\":{\"entry_point\":");
	json_string(k->entry_point);
	printf(",\"local_size\":[%" PRIu32 ",%" PRIu32 ",%" PRIu32 "]"
	       ",\"push_constant_bytes\":%" PRIu32 ",\"cached\":%s,\"bindings\":[",
	       k->local_size[0], k->local_size[1], k->local_size[2], k->push_constant_bytes,
	       k->cached ? "true" : "false");
	for (uint32_t i = 0; i < k->nbindings; i++) {
		const gs_kernel_binding_info *b = &k->bindings[i];

		printf("%s{\"binding\":%" PRIu32 ",\"kind\":\"%s\",\"writes\":%s,\"name\":",
		       i ? "," : "", b->binding, binding_kind_name(b->kind),
		       b->writes ? "true" : "false");
		json_string(b->name);
		printf("}");
	}
	printf("]}}\n");
}

static void print_text(const char *name, const example_result *res)
{
	const gs_kernel_info *k = &res->kernel;
	char sizes[64] = "";
	size_t len = 0;

	for (size_t i = 0; i < res->size_count; i++)
		len += (size_t)snprintf(sizes + len, sizeof(sizes) - len, "%s%s=%" PRIu32,
		                        i ? " " : "", res->size_names[i], res->sizes[i]);
	printf("%-7s %-22s packet %s", name, sizes, gs_packet_state_name(res->packet.state));
	if (res->message[0])
		printf(" (%s)", res->message);
	if (res->mismatch && res->is_float)
		printf("  MISMATCH at %zu: got %.9g, want %.9g", res->index, res->got, res->want);
	else if (res->mismatch)
		printf("  MISMATCH at %zu: got %.0f, want %.0f", res->index, res->got, res->want);
	else if (result_ok(res))
		printf("  ok");
	printf("  | local %" PRIu32 "x%" PRIu32 "x%" PRIu32 ", push %" PRIu32 " B, bindings",
	       k->local_size[0], k->local_size[1], k->local_size[2], k->push_constant_bytes);
	/* Without names: glslc -O strips them, and the daemon then reports placeholders such as
	 * "_40_42" that tell a reader nothing (--json has them). */
	for (uint32_t i = 0; i < k->nbindings; i++) {
		const gs_kernel_binding_info *b = &k->bindings[i];

		printf("%s %" PRIu32 ":%s:%s", i ? "," : "", b->binding, binding_kind_name(b->kind),
		       b->writes ? "rw" : "ro");
	}
	printf("\n");
}

/* ---- setup ------------------------------------------------------------------------------ */

/* The adapter named by --adapter, else the first that runs user kernels. 0, or the exit code
 * after saying why there is none. */
static int pick_adapter(const example *ex, const gs_daemon_info *info, bool given, uint32_t id,
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
		fprintf(stderr, "%s: adapter %" PRIu32 " does not exist\n", ex->prog, id);
		return EXIT_USAGE;
	}
	fprintf(stderr,
	        "%s: no adapter of the daemon runs user kernels (they need backend vulkan: "
	        "gpuschedd --backend vulkan)\n",
	        ex->prog);
	return EXIT_DAEMON;
}

/* Creates the device and, on the adapter's first compute node (else its first node), the one
 * context every example submits to. */
static int setup(example *ex, bool adapter_given, uint32_t adapter)
{
	gs_daemon_info *info;
	const gs_adapter_info *a = NULL;
	gs_context_desc desc;
	int rv;

	ex->name = "setup";
	rv = gs_info(ex->c, &info);
	if (rv != 0)
		return fail_call(ex, "gs_info", rv);
	rv = pick_adapter(ex, info, adapter_given, adapter, &a);
	if (rv == 0 && a->node_count == 0) {
		fprintf(stderr, "%s: adapter %" PRIu32 " has no nodes\n", ex->prog, a->id);
		rv = EXIT_DAEMON;
	}
	if (rv != 0) {
		gs_info_free(info);
		return rv;
	}
	/* An adapter named by --adapter that runs no kernels goes on: the daemon's refusal of
	 * the first kernel says why. */
	gs_client_set_adapter(ex->c, a->id);
	rv = gs_device_create(ex->c, ex->prog, &ex->device);
	if (rv != 0) {
		gs_info_free(info);
		return fail_call(ex, "gs_device_create", rv);
	}
	const gs_node_info *node = &a->nodes[0];
	uint32_t paging = 0;
	for (size_t i = a->node_count; i-- > 0;) {
		if (a->nodes[i].kind == GS_NODE_COMPUTE)
			node = &a->nodes[i];
		if (a->nodes[i].paging)
			paging = a->nodes[i].id;
	}
	gs_context_desc_init(&desc, ex->device, node->id);
	desc.info.paging_companion_node_id = paging;
	gs_info_free(info);
	rv = gs_context_create(ex->c, &desc, &ex->context, NULL);
	if (rv != 0)
		return fail_call(ex, "gs_context_create", rv);
	return 0;
}

/* Best effort: a failure is reported, but the results stand. */
static void destroy_kernel(example *ex)
{
	if (ex->result.kernel.kernel) {
		int rv = gs_kernel_destroy(ex->c, ex->result.kernel.kernel);

		if (rv != 0)
			(void)fail_call(ex, "gs_kernel_destroy", rv);
	}
}

/* Destroys the device, with its context and anything an error left. */
static void teardown(example *ex)
{
	ex->name = "teardown";
	if (ex->device) {
		int rv = gs_device_destroy(ex->c, ex->device);

		if (rv != 0)
			(void)fail_call(ex, "gs_device_destroy", rv);
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

static void print_help(const example_program *prog)
{
	printf("Usage: %s [--url URL] [--adapter N] [--dir DIR] [--json]\n"
	       "%s"
	       "\n"
	       "Options:\n"
	       "  --url URL      the daemon (default: $GPUSCHED_URL, else the local socket)\n"
	       "  --adapter N    adapter id (default: the first that runs user kernels;\n"
	       "                 gpusched info lists them)\n"
	       "  --dir DIR      %s\n"
	       "                 (default " DEFAULT_SPV_DIR ")\n"
	       "  --json         one JSON object per example instead of a line of text\n"
	       "  --help         this text\n"
	       "\n"
	       "Exit status: 0 every result matches, 4 a result differs or a packet did not\n"
	       "complete, 1 the daemon answered an error, 2 usage error or unreadable .spv file,\n"
	       "3 cannot connect.\n",
	       prog->name, prog->about, prog->dir_help);
}

static int usage(const char *prog, const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry '%s --help'.\n", prog);
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

static int parse_options(const char *prog, int argc, char **argv, options *opt)
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
				return usage(prog, "%s needs a URL", arg);
			opt->url = value;
		} else if (len == 5 && !strncmp(arg, "--dir", len)) {
			if (!(value = option_value(argc, argv, &i, eq)))
				return usage(prog, "%s needs a directory", arg);
			opt->dir = value;
		} else if (len == 9 && !strncmp(arg, "--adapter", len)) {
			char *end;
			unsigned long n;

			if (!(value = option_value(argc, argv, &i, eq)))
				return usage(prog, "%s needs a number", arg);
			errno = 0;
			n = strtoul(value, &end, 10);
			if (!*value || *end || errno || n > UINT32_MAX || value[0] == '-')
				return usage(prog, "--adapter: '%s' is not an adapter id", value);
			opt->adapter = (uint32_t)n;
			opt->adapter_given = true;
		} else {
			return usage(prog, "unknown argument '%s'", arg);
		}
	}
	return 0;
}

/* ---- the program ------------------------------------------------------------------------ */

int example_main(int argc, char **argv, const example_program *prog)
{
	options opt;
	example ex = {.prog = prog->name};
	char url[1024];
	char why[512] = "";
	int rv, status = 0;

	rv = parse_options(prog->name, argc, argv, &opt);
	if (rv != 0)
		return rv;
	if (opt.help) {
		print_help(prog);
		return 0;
	}
	/* The default is resolved here only to name it if connecting fails. */
	if (!opt.url && gs_default_url(url, sizeof(url)) != 0)
		return usage(prog->name, "%s", "the default URL ($GPUSCHED_URL) is too long");
	const char *target = opt.url ? opt.url : url;
	rv = gs_connect_ex(target, NULL, &ex.c, why, sizeof(why));
	if (rv != 0) {
		fprintf(stderr, "%s: cannot connect to %s: %s (is gpuschedd running?)\n",
		        prog->name, target, why[0] ? why : gs_strerror(rv));
		return EXIT_TRANSPORT;
	}
	ex.dir = opt.dir;
	ex.json = opt.json;
	gs_dmabuf_init(&ex.dma);

	rv = setup(&ex, opt.adapter_given, opt.adapter);
	for (size_t i = 0; rv == 0 && i < EXAMPLE_MAX_RUN && prog->run[i]; i++) {
		ex.result = (example_result){0};
		rv = prog->run[i](&ex);
		if (rv == 0) {
			if (ex.json)
				print_json(ex.name, &ex.result);
			else
				print_text(ex.name, &ex.result);
			fflush(stdout);
			if (!result_ok(&ex.result))
				status = EXIT_MISMATCH;
		}
		destroy_kernel(&ex);
	}
	teardown(&ex);
	gs_dmabuf_free(&ex.dma);
	gs_close(ex.c);
	return rv != 0 ? rv : status;
}
