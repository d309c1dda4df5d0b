/*
 * Users' kernels from the command line: `gpusched kernel create|ls|destroy`, and `gpusched run`,
 * which runs one kernel over input files on a device of its own and writes the outputs to
 * files: the one-line way to run a kernel remotely.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Largest module or input file the CLI reads. */
#define MAX_FILE (256u << 20)

/* Reads a whole file: 0 with *data (malloc'd) and *size, or -1 after printing why. */
static int read_file(cli *ctx, const char *path, uint8_t **data, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		cli_warn(ctx, "%s: %s", path, strerror(errno));
		return -1;
	}
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = malloc(cap);
	while (buf) {
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n < cap)
			break;
		uint8_t *bigger = cap < MAX_FILE ? realloc(buf, cap * 2) : NULL;
		if (!bigger) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = bigger;
		cap *= 2;
	}
	bool bad = ferror(f) != 0;
	fclose(f);
	if (!buf || bad) {
		free(buf);
		cli_warn(ctx, "%s: %s", path, bad ? "read error" : "too large or out of memory");
		return -1;
	}
	*data = buf;
	*size = n;
	return 0;
}

static void hash_hex(const uint8_t hash[32], size_t bytes, char *out)
{
	for (size_t i = 0; i < bytes; i++)
		sprintf(out + 2 * i, "%02x", hash[i]);
}

static const char *kind_name(uint32_t kind)
{
	return kind == GS_KERNEL_UNIFORM_BUFFER ? "uniform" : "storage";
}

static json_t *kernel_json(const void *item)
{
	const gs_kernel_info *k = item;
	char hex[65];
	hash_hex(k->hash, 32, hex);
	json_t *b = json_array();
	for (uint32_t i = 0; i < k->nbindings; i++)
		json_array_append_new(
		        b, json_pack("{s:i,s:s,s:b,s:s}", "binding", (int)k->bindings[i].binding,
		                     "kind", kind_name(k->bindings[i].kind), "writes",
		                     k->bindings[i].writes, "name", k->bindings[i].name));
	return json_pack("{s:o,s:o,s:s,s:s,s:[i,i,i],s:i,s:o,s:o,s:b}", "kernel",
	                 cli_json_u64(k->kernel), "device", cli_json_u64(k->device), "hash", hex,
	                 "entry_point", k->entry_point, "local_size", (int)k->local_size[0],
	                 (int)k->local_size[1], (int)k->local_size[2], "push_constant_bytes",
	                 (int)k->push_constant_bytes, "bindings", b, "spirv_bytes",
	                 cli_json_u64(k->spirv_bytes), "cached", k->cached);
}

static void kernel_print_one(const gs_kernel_info *k)
{
	char hex[17];
	hash_hex(k->hash, 8, hex);
	printf("kernel %" PRIu64 "  device %" PRIu64 "  %s  entry %s  local %ux%ux%u  push %u B  "
	       "%" PRIu64 " B of SPIR-V%s\n",
	       k->kernel, k->device, hex, k->entry_point, k->local_size[0], k->local_size[1],
	       k->local_size[2], k->push_constant_bytes, k->spirv_bytes,
	       k->cached ? "  (cached)" : "");
	for (uint32_t i = 0; i < k->nbindings; i++)
		printf("  binding %u: %s buffer, %s%s%s\n", k->bindings[i].binding,
		       kind_name(k->bindings[i].kind),
		       k->bindings[i].writes ? "written" : "read only",
		       k->bindings[i].name[0] ? ", " : "", k->bindings[i].name);
}

static void kernel_print(const void *items, size_t n)
{
	const gs_kernel_info *k = items;
	if (n == 0)
		printf("no kernels\n");
	for (size_t i = 0; i < n; i++)
		kernel_print_one(&k[i]);
}

/* ---- kernel create | ls | destroy ------------------------------------------------------- */

static const char kernel_help[] =
        "Usage: gpusched kernel create DEVICE FILE.spv [--entry NAME]\n"
        "       gpusched kernel ls [--device DEVICE]\n"
        "       gpusched kernel destroy ID\n"
        "A kernel is a SPIR-V compute module (glslc -o k.spv k.comp) on one of your devices,\n"
        "run by DISPATCH commands on an adapter whose backend is vulkan (gpusched info says\n"
        "'kernels'). The daemon validates the module, allows storage and uniform buffers in\n"
        "descriptor set 0 and push constants only, and answers the bindings, local size and\n"
        "push-constant size it found. Exit codes: 0 ok, 1 the daemon refused (the reason is\n"
        "printed), 2 usage, 3 no connection.\n";

typedef struct create_args {
	const char *entry;
} create_args;

static int kernel_create(cli *ctx, int argc, char **argv)
{
	static const cli_opt opts[] = {{"entry", CLI_ARG_STR, offsetof(create_args, entry)}};
	static const cli_syntax syntax = {kernel_help, CLI_OPTS(opts), 2, 2, "DEVICE FILE"};
	create_args a = {NULL};
	uint64_t device;
	/* DEVICE is a number, FILE not: cli_start_id would read both as numbers. */
	int rv = cli_start(ctx, argc, argv, &syntax, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	if ((rv = cli_arg_u64(ctx, "DEVICE", argv[optind], &device)) != 0)
		return rv;
	uint8_t *code;
	size_t size;
	if (read_file(ctx, argv[optind + 1], &code, &size) != 0)
		return CLI_EXIT_USAGE;
	gs_kernel_info k;
	rv = gs_kernel_create(ctx->client, device, code, size, a.entry, &k);
	free(code);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(kernel_json(&k));
	else
		kernel_print_one(&k);
	return CLI_EXIT_OK;
}

typedef struct ls_args {
	uint64_t device;
} ls_args;

static int kernel_ls(cli *ctx, int argc, char **argv)
{
	static const cli_opt opts[] = {{"device", CLI_ARG_U64, offsetof(ls_args, device)}};
	static const cli_syntax syntax = {kernel_help, CLI_OPTS(opts), 0, 0, NULL};
	ls_args a = {0};
	int rv = cli_start(ctx, argc, argv, &syntax, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	gs_kernel_info *list = NULL;
	size_t n = 0;
	rv = gs_kernel_list(ctx->client, a.device, &list, &n);
	rv = cli_list_result(ctx, rv, list, n, sizeof(*list), kernel_json, kernel_print);
	free(list);
	return rv;
}

static int kernel_destroy(cli *ctx, int argc, char **argv)
{
	uint64_t id;
	int rv = cli_start_id(ctx, argc, argv, CLI_SIMPLE(kernel_help, 1, 1, "a kernel ID"), NULL,
	                      "ID", &id);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_kernel_destroy(ctx->client, id);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(
		        json_pack("{s:o,s:s}", "kernel", cli_json_u64(id), "result", "destroyed"));
	else
		printf("kernel %" PRIu64 " destroyed\n", id);
	return CLI_EXIT_OK;
}

int cmd_kernel(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"create", "create a kernel from a SPIR-V file", kernel_create},
	        {"ls", "list your kernels", kernel_ls},
	        {"destroy", "destroy a kernel", kernel_destroy},
	};
	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, kernel_help);
}

/* ---- run -------------------------------------------------------------------------------- */

static const char run_help[] =
        "Usage: gpusched run FILE.spv --groups X[,Y[,Z]] [--in B=FILE]... [--out "
        "B=FILE[:SIZE]]...\n"
        "                    [--push-u32 N]... [--push-i32 N]... [--push-f32 X]... [--entry NAME]\n"
        "                    [--wait-ms MS]\n"
        "Runs a kernel once on the current adapter (--adapter; it must run kernels: gpusched\n"
        "info) on a device of its own, destroyed afterwards:\n"
        "  --in B=FILE         binding B starts with FILE's bytes (its size is the file's)\n"
        "  --out B=FILE[:SIZE] binding B is written to FILE after the run; SIZE bytes of zeros\n"
        "                      to start with, unless --in gives B its bytes\n"
        "  --push-u32/-i32/-f32 V  appends 4 bytes of push constants, in the order given\n"
        "  --groups X,Y,Z      work groups in each dimension (Y and Z default to 1)\n"
        "  --wait-ms MS        how long to wait for the packet (default 60000)\n"
        "Every binding the kernel declares needs --in or --out. Prints the kernel's reflection,\n"
        "the packet and its state. Exit codes: 0 completed, 1 the daemon refused or the packet\n"
        "did not complete, 2 usage or file errors, 3 no connection.\n";

#define RUN_MAX_IO 16

typedef struct run_io {
	uint32_t binding;
	const char *path;
	uint64_t size; /* --out's SIZE (0: none given) */
} run_io;

typedef struct run_args {
	run_io in[RUN_MAX_IO], out[RUN_MAX_IO];
	size_t nin, nout;
	uint8_t push[GS_KERNEL_MAX_BINDINGS * 8];
	size_t npush;
	uint32_t groups[3];
	bool groups_given;
	const char *entry;
	uint32_t wait_ms;
	bool bad; /* a parse hook failed */
} run_args;

/* The run_args a parse hook's field belongs to: every hook's field is the struct itself. */
static int parse_io(cli *ctx, const char *arg, run_io *list, size_t *n, bool sized)
{
	char *eq = strchr(arg, '=');
	uint32_t b;
	char num[16];
	if (!eq || (size_t)(eq - arg) >= sizeof(num))
		return cli_usage(ctx, "'%s': expected BINDING=FILE", arg);
	memcpy(num, arg, (size_t)(eq - arg));
	num[eq - arg] = '\0';
	if (!cli_parse_u32(num, &b) || b >= GS_KERNEL_MAX_BINDINGS)
		return cli_usage(ctx, "'%s': binding must be 0..%d", arg,
		                 GS_KERNEL_MAX_BINDINGS - 1);
	if (*n == RUN_MAX_IO)
		return cli_usage(ctx, "at most %d of each", RUN_MAX_IO);
	run_io *io = &list[(*n)++];
	io->binding = b;
	io->path = eq + 1;
	io->size = 0;
	char *colon = sized ? strrchr(eq + 1, ':') : NULL;
	if (colon) {
		if (!cli_parse_u64(colon + 1, &io->size) || io->size == 0)
			return cli_usage(ctx, "'%s': SIZE must be a number of bytes > 0", arg);
		/* The path ends at the colon: keep a copy of it. */
		static char paths[RUN_MAX_IO][512];
		snprintf(paths[*n - 1], sizeof(paths[0]), "%.*s", (int)(colon - (eq + 1)), eq + 1);
		io->path = paths[*n - 1];
	}
	if (!io->path[0])
		return cli_usage(ctx, "'%s': no file", arg);
	return 0;
}

static int parse_in(cli *ctx, const char *arg, void *field)
{
	run_args *a = field;
	return parse_io(ctx, arg, a->in, &a->nin, false);
}

static int parse_out(cli *ctx, const char *arg, void *field)
{
	run_args *a = field;
	return parse_io(ctx, arg, a->out, &a->nout, true);
}

static int push_word(cli *ctx, run_args *a, const void *word)
{
	if (a->npush + 4 > GS_KERNEL_MAX_BINDINGS * 8)
		return cli_usage(ctx, "at most 128 bytes of push constants");
	memcpy(a->push + a->npush, word, 4);
	a->npush += 4;
	return 0;
}

static int parse_push_u32(cli *ctx, const char *arg, void *field)
{
	uint32_t v;
	if (!cli_parse_u32(arg, &v))
		return cli_usage(ctx, "--push-u32: '%s' is not a 32-bit unsigned number", arg);
	return push_word(ctx, field, &v);
}

static int parse_push_i32(cli *ctx, const char *arg, void *field)
{
	int32_t v;
	if (!cli_parse_i32(arg, &v))
		return cli_usage(ctx, "--push-i32: '%s' is not a 32-bit number", arg);
	return push_word(ctx, field, &v);
}

static int parse_push_f32(cli *ctx, const char *arg, void *field)
{
	char *end;
	errno = 0;
	float v = strtof(arg, &end);
	if (!*arg || *end || errno)
		return cli_usage(ctx, "--push-f32: '%s' is not a number", arg);
	return push_word(ctx, field, &v);
}

static int parse_groups(cli *ctx, const char *arg, void *field)
{
	run_args *a = field;
	a->groups[0] = a->groups[1] = a->groups[2] = 1;
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", arg);
	int i = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",x", &save); tok;
	     tok = strtok_r(NULL, ",x", &save)) {
		if (i == 3 || !cli_parse_u32(tok, &a->groups[i]) || a->groups[i] == 0)
			return cli_usage(ctx, "--groups: '%s': expected X[,Y[,Z]] of counts > 0",
			                 arg);
		i++;
	}
	if (i == 0)
		return cli_usage(ctx, "--groups: '%s': expected X[,Y[,Z]]", arg);
	a->groups_given = true;
	return 0;
}

static int write_file(cli *ctx, const char *path, const void *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
		cli_warn(ctx, "%s: %s", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	return 0;
}

/* What `run` made on the daemon, undone at the end. */
typedef struct run_state {
	uint64_t device, context, kernel;
	gs_kernel_info info;
	uint64_t alloc[GS_KERNEL_MAX_BINDINGS];
	uint64_t size[GS_KERNEL_MAX_BINDINGS];
	uint8_t *data[GS_KERNEL_MAX_BINDINGS];
	const run_io *out[GS_KERNEL_MAX_BINDINGS];
} run_state;

static const run_io *find_io(const run_io *list, size_t n, uint32_t binding)
{
	for (size_t i = 0; i < n; i++)
		if (list[i].binding == binding)
			return &list[i];
	return NULL;
}

/* The device's context on node 0, with the adapter's paging node as its companion. */
static int make_context(cli *ctx, run_state *s)
{
	gs_daemon_info *info = NULL;
	int rv = gs_info(ctx->client, &info);
	if (rv != 0)
		return rv;
	uint32_t paging = 0;
	for (size_t i = 0; i < info->adapter_count; i++) {
		const gs_adapter_info *a = &info->adapters[i];
		if (a->id != ctx->adapter)
			continue;
		for (size_t n = 0; n < a->node_count; n++)
			if (a->nodes[n].paging)
				paging = a->nodes[n].id;
	}
	gs_info_free(info);
	gs_context_desc desc;
	gs_context_desc_init(&desc, s->device, 0);
	desc.info.paging_companion_node_id = paging;
	desc.info.dma_buffer_size = 4096;
	return gs_context_create(ctx->client, &desc, &s->context, NULL);
}

/* Allocations for every binding, the inputs written: 0, a status, or CLI_EXIT_USAGE + 1000
 * for a local problem (already reported). */
static int make_bindings(cli *ctx, const run_args *a, run_state *s)
{
	const gs_kernel_info *k = &s->info;
	for (uint32_t i = 0; i < k->nbindings; i++) {
		uint32_t b = k->bindings[i].binding;
		const run_io *in = find_io(a->in, a->nin, b), *out = find_io(a->out, a->nout, b);
		if (!in && !out) {
			cli_usage(ctx, "binding %u of the kernel has neither --in nor --out", b);
			return 1000 + CLI_EXIT_USAGE;
		}
		size_t size = out ? out->size : 0;
		if (in) {
			if (read_file(ctx, in->path, &s->data[i], &size) != 0)
				return 1000 + CLI_EXIT_USAGE;
		}
		if (size == 0) {
			cli_usage(ctx,
			          "binding %u: no bytes (an empty --in, or --out without SIZE)", b);
			return 1000 + CLI_EXIT_USAGE;
		}
		s->size[i] = size;
		s->out[i] = out;
		gs_allocation_desc d = {.device = s->device, .size = size};
		gs_allocation_placement p;
		int rv = gs_allocation_create(ctx->client, &d, &p);
		if (rv != 0)
			return rv;
		s->alloc[i] = p.allocation;
		if (s->data[i] &&
		    (rv = gs_allocation_write(ctx->client, p.allocation, 0, s->data[i], size)) != 0)
			return rv;
	}
	for (size_t i = 0; i < a->nin + a->nout; i++) {
		uint32_t b = i < a->nin ? a->in[i].binding : a->out[i - a->nin].binding;
		bool declared = false;
		for (uint32_t j = 0; j < k->nbindings; j++)
			declared = declared || k->bindings[j].binding == b;
		if (!declared) {
			cli_usage(ctx, "the kernel declares no binding %u", b);
			return 1000 + CLI_EXIT_USAGE;
		}
	}
	return 0;
}

static void run_report(cli *ctx, const run_state *s, const run_args *a, const gs_submit_result *r,
                       double secs)
{
	const char *state = gs_packet_state_name(r->state);
	if (ctx->json) {
		json_t *o = kernel_json(&s->info);
		json_object_set_new(o, "groups",
		                    json_pack("[i,i,i]", (int)a->groups[0], (int)a->groups[1],
		                              (int)a->groups[2]));
		json_object_set_new(o, "packet", cli_json_u64(r->packet));
		json_object_set_new(o, "state", json_string(state));
		json_object_set_new(o, "seconds", json_real(secs));
		cli_json_print(o);
		return;
	}
	kernel_print_one(&s->info);
	printf("groups %ux%ux%u  packet %" PRIu64 "  %s  in %.3f s\n", a->groups[0], a->groups[1],
	       a->groups[2], r->packet, state, secs);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Creates, runs, reads back; the device (and all in it) goes at the end whatever happens. */
static int run_kernel(cli *ctx, const char *path, const run_args *a, run_state *s)
{
	uint8_t *code;
	size_t size;
	if (read_file(ctx, path, &code, &size) != 0)
		return CLI_EXIT_USAGE;
	int rv = gs_kernel_create(ctx->client, s->device, code, size, a->entry, &s->info);
	free(code);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (a->npush != s->info.push_constant_bytes)
		return cli_usage(ctx, "the kernel takes %u bytes of push constants; %zu given",
		                 s->info.push_constant_bytes, a->npush);
	if ((rv = make_context(ctx, s)) != 0)
		return cli_fail(ctx, rv);
	rv = make_bindings(ctx, a, s);
	if (rv >= 1000)
		return rv - 1000;
	if (rv != 0)
		return cli_fail(ctx, rv);
	gs_dmabuf_binding bind[GS_KERNEL_MAX_BINDINGS];
	for (uint32_t i = 0; i < s->info.nbindings; i++)
		bind[i] = (gs_dmabuf_binding){.binding = s->info.bindings[i].binding,
		                              .allocation = s->alloc[i],
		                              .range = s->size[i],
		                              .write = s->info.bindings[i].writes};
	gs_dmabuf dma;
	gs_dmabuf_init(&dma);
	rv = gs_dmabuf_dispatch(&dma, s->info.kernel, a->groups, bind, s->info.nbindings, a->push,
	                        a->npush);
	gs_submit_result r;
	memset(&r, 0, sizeof(r));
	double t0 = now_s();
	if (rv == 0)
		rv = gs_submit_wait(ctx->client, s->context, &dma, 0, a->wait_ms, &r);
	double secs = now_s() - t0;
	gs_dmabuf_free(&dma);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (r.state != GS_PACKET_COMPLETED) {
		run_report(ctx, s, a, &r, secs);
		cli_warn(ctx, "the packet did not complete (%s)", gs_packet_state_name(r.state));
		return CLI_EXIT_DAEMON;
	}
	for (uint32_t i = 0; i < s->info.nbindings; i++) {
		if (!s->out[i])
			continue;
		uint8_t *buf = malloc(s->size[i]);
		if (!buf)
			return cli_usage(ctx, "out of memory");
		rv = gs_allocation_read(ctx->client, s->alloc[i], 0, buf, s->size[i]);
		if (rv == 0 && write_file(ctx, s->out[i]->path, buf, s->size[i]) != 0)
			rv = 1000 + CLI_EXIT_USAGE;
		free(buf);
		if (rv >= 1000)
			return rv - 1000;
		if (rv != 0)
			return cli_fail(ctx, rv);
	}
	run_report(ctx, s, a, &r, secs);
	return CLI_EXIT_OK;
}

int cmd_run(cli *ctx, int argc, char **argv)
{
	static const cli_opt opts[] = {
	        {"in", CLI_ARG_PARSE, 0, .parse = parse_in},
	        {"out", CLI_ARG_PARSE, 0, .parse = parse_out},
	        {"push-u32", CLI_ARG_PARSE, 0, .parse = parse_push_u32},
	        {"push-i32", CLI_ARG_PARSE, 0, .parse = parse_push_i32},
	        {"push-f32", CLI_ARG_PARSE, 0, .parse = parse_push_f32},
	        {"groups", CLI_ARG_PARSE, 0, .parse = parse_groups},
	        {"entry", CLI_ARG_STR, offsetof(run_args, entry)},
	        {"wait-ms", CLI_ARG_U32, offsetof(run_args, wait_ms), .min = 1, .max = 3600000},
	};
	static const cli_syntax syntax = {run_help, CLI_OPTS(opts), 1, 1, "FILE.spv"};
	run_args *a = calloc(1, sizeof(*a));
	run_state *s = calloc(1, sizeof(*s));
	if (!a || !s) {
		free(a);
		free(s);
		return cli_usage(ctx, "out of memory");
	}
	a->wait_ms = 60000;
	int rv = cli_parse_args(ctx, argc, argv, &syntax, a);
	if (rv == CLI_CONTINUE && !a->groups_given)
		rv = cli_usage(ctx, "--groups is required");
	/* --help answers CLI_EXIT_OK from the parse: only a CLI_CONTINUE goes on. */
	if (rv == CLI_CONTINUE && (rv = cli_connect(ctx)) == CLI_EXIT_OK) {
		rv = gs_device_create(ctx->client, "gpusched run", &s->device);
		if (rv != 0) {
			rv = cli_fail(ctx, rv);
		} else {
			rv = run_kernel(ctx, argv[optind], a, s);
			int drv = gs_device_destroy(ctx->client, s->device);
			if (drv != 0 && rv == CLI_EXIT_OK)
				rv = cli_fail(ctx, drv);
		}
	}
	for (size_t i = 0; i < GS_KERNEL_MAX_BINDINGS; i++)
		free(s->data[i]);
	free(a);
	free(s);
	return rv;
}
