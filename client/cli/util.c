/*
 * Helpers shared by the commands: connecting, reporting errors, parsing arguments and
 * formatting values for tables and JSON.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"

/* ---- errors and exit codes -------------------------------------------------------------- */

static void vwarn(cli *ctx, const char *fmt, va_list ap)
{
	if (ctx->command)
		fprintf(stderr, "gpusched: %s: ", ctx->command);
	else
		fprintf(stderr, "gpusched: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void cli_warn(cli *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(ctx, fmt, ap);
	va_end(ap);
}

int cli_usage(cli *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(ctx, fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try 'gpusched %s%s--help'.\n", ctx->command ? ctx->command : "",
	        ctx->command ? " " : "");
	return CLI_EXIT_USAGE;
}

int cli_check_range(cli *ctx, uint64_t since_ns, uint64_t until_ns)
{
	if (since_ns && until_ns && since_ns >= until_ns)
		return cli_usage(ctx, "--since must be earlier than --until");
	return CLI_CONTINUE;
}

int cli_exit_code(int status)
{
	if (status == 0)
		return CLI_EXIT_OK;
	if (status > 0)
		return CLI_EXIT_DAEMON;
	switch (status) {
	case GS_ERR_TRANSPORT:
	case GS_ERR_TIMEOUT:
	case GS_ERR_PROTOCOL:
		return CLI_EXIT_TRANSPORT;
	case GS_ERR_INVALID:
		return CLI_EXIT_USAGE;
	default:
		return CLI_EXIT_DAEMON;
	}
}

int cli_fail(cli *ctx, int status)
{
	const char *msg = ctx->client ? gs_client_message(ctx->client) : "";

	/* The daemon's words are more specific than the generic text of its status. */
	cli_warn(ctx, "%s: %s", gs_status_name(status), msg[0] ? msg : gs_strerror(status));
	return cli_exit_code(status);
}

int cli_connect(cli *ctx)
{
	char why[512];
	int rv;

	if (ctx->client)
		return CLI_EXIT_OK;
	if (ctx->nurls > 1)
		return cli_usage(
		        ctx, "talks to one daemon: give one --url (several are for info, stats, "
		             "usage, history, trace, timeline and device create)");
	rv = gs_connect_ex(ctx->url, ctx->token, &ctx->client, why, sizeof(why));
	if (rv != 0) {
		cli_warn(ctx, "cannot connect: %s%s", why[0] ? why : gs_strerror(rv),
		         rv == GS_ERR_TRANSPORT ? " (is gpuschedd running?)" : "");
		return CLI_EXIT_TRANSPORT;
	}
	gs_client_set_adapter(ctx->client, ctx->adapter);
	gs_client_set_timeout(ctx->client, ctx->timeout_ms);
	return CLI_EXIT_OK;
}

void cli_disconnect(cli *ctx)
{
	if (!ctx->hosts)
		gs_close(ctx->client); /* else the hosts' */
	ctx->client = NULL;
	gs_hosts_close(ctx->hosts);
	ctx->hosts = NULL;
}

/* ---- several hosts ---------------------------------------------------------------------- */

/* The host of the documents cli_json_print prints now (NULL: one daemon). */
static const char *json_host;

int cli_hosts_connect(cli *ctx)
{
	if (ctx->hosts)
		return CLI_EXIT_OK;
	gs_connect_options o = {.size = sizeof(o),
	                        .token = ctx->token,
	                        .timeout_ms = ctx->timeout_ms,
	                        .adapter = ctx->adapter};
	int rv = gs_hosts_connect(ctx->urls, ctx->nurls, &o, &ctx->hosts);
	if (rv == GS_ERR_TRANSPORT) {
		for (size_t i = 0; i < ctx->nurls; i++)
			cli_warn(ctx, "cannot connect to %s: %s", ctx->urls[i],
			         gs_hosts_error(ctx->hosts, i));
		cli_warn(ctx, "no host answered (is gpuschedd running?)");
		return CLI_EXIT_TRANSPORT;
	}
	if (rv != 0) {
		cli_warn(ctx, "cannot connect: %s", gs_strerror(rv));
		return cli_exit_code(rv);
	}
	return CLI_EXIT_OK;
}

int cli_hosts_report(cli *ctx, int rv)
{
	bool missing = false;
	for (size_t i = 0; i < gs_hosts_count(ctx->hosts); i++) {
		const char *why = gs_hosts_error(ctx->hosts, i);
		if (!why[0])
			continue;
		missing = true;
		cli_warn(ctx, "%s left out: %s", gs_hosts_url(ctx->hosts, i), why);
		if (ctx->json) {
			const char *was = json_host;
			json_host = NULL;
			cli_json_print(json_pack("{s:s, s:s}", "host", gs_hosts_url(ctx->hosts, i),
			                         "error", why));
			json_host = was;
		}
	}
	return rv == CLI_EXIT_OK && missing ? CLI_EXIT_PARTIAL : rv;
}

int cli_run_per_host(cli *ctx, int (*run)(cli *, int, char **), int argc, char **argv)
{
	/* --help needs no daemon, and is printed once. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return cli_run(ctx, run, argc, argv);
		/* Known before the first host's heading. */
		if (strcmp(argv[i], "--json") == 0)
			ctx->json = true;
	}
	int rv = cli_hosts_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	int worst = CLI_EXIT_OK, first_fail = CLI_EXIT_OK;
	size_t answered = 0;
	bool first = true;
	for (size_t i = 0; i < gs_hosts_count(ctx->hosts); i++) {
		gs_client *c = gs_hosts_client(ctx->hosts, i);
		if (!c)
			continue;
		ctx->client = c;
		ctx->host = gs_hosts_url(ctx->hosts, i);
		json_host = ctx->host;
		if (!ctx->json) {
			printf("%s== host %s\n", first ? "" : "\n", ctx->host);
			fflush(stdout);
		}
		first = false;
		rv = cli_run(ctx, run, argc, argv);
		if (rv == CLI_EXIT_TRANSPORT)
			gs_hosts_set_down(ctx->hosts, i, gs_client_message(c));
		else if (rv != CLI_EXIT_OK && worst == CLI_EXIT_OK)
			worst = rv;
		answered += rv != CLI_EXIT_TRANSPORT;
		if (rv != CLI_EXIT_OK && first_fail == CLI_EXIT_OK)
			first_fail = rv;
		ctx->client = NULL;
		ctx->host = NULL;
		json_host = NULL;
	}
	rv = cli_hosts_report(ctx, worst);
	/* No host answered: not a partial answer. */
	return answered ? rv : (first_fail != CLI_EXIT_OK ? first_fail : CLI_EXIT_TRANSPORT);
}

/* ---- option parsing --------------------------------------------------------------------- */

/* Handles --help/--json and getopt's errors for the command whose help text is `help`.
 * Returns CLI_CONTINUE, or the exit code the command should return now. */
static int common_option(cli *ctx, int opt, const char *help)
{
	switch (opt) {
	case CLI_OPT_HELP:
		fputs(help, stdout);
		return CLI_EXIT_OK;
	case CLI_OPT_JSON:
		ctx->json = true;
		return CLI_CONTINUE;
	default:
		/* getopt_long already said what was wrong, under the name cli_run gave. */
		fprintf(stderr, "Try 'gpusched %s --help'.\n", ctx->command);
		return CLI_EXIT_USAGE;
	}
}

int cli_run(cli *ctx, int (*run)(cli *, int, char **), int argc, char **argv)
{
	/* getopt prints its complaints under argv[0]: make that "gpusched <command>". */
	snprintf(ctx->prog, sizeof(ctx->prog), "gpusched %s", ctx->command);
	argv[0] = ctx->prog;
	/* The command parses its argv from the start: glibc's getopt re-initialises when
	 * optind is 0. */
	optind = 0;
	return run(ctx, argc, argv);
}

/* getopt_long answers '?' for an unknown option or a missing argument. */
static bool is_common_option(int opt)
{
	return opt == CLI_OPT_HELP || opt == CLI_OPT_JSON || opt == '?';
}

/* getopt_long's code for the command's own option i. */
#define OWN_OPTION(i)   (0x1000 + (int)(i))
#define MAX_OWN_OPTIONS 32

/* Stores one of the command's own options in the parse state `out`. */
static int own_option(cli *ctx, const cli_opt *o, const char *arg, void *out)
{
	char *field = (char *)out + o->field;
	char name[64];
	uint64_t v = 0;
	int rv = 0;

	snprintf(name, sizeof(name), "--%s", o->name);
	if (o->given && o->given_bits)
		*(unsigned *)((char *)out + o->given - 1) |= o->given_bits;
	else if (o->given)
		*(bool *)((char *)out + o->given - 1) = true;
	switch (o->kind) {
	case CLI_ARG_U32:
	case CLI_ARG_U64:
		if (o->kind == CLI_ARG_U32) {
			uint32_t v32 = 0;
			rv = cli_arg_u32(ctx, name, arg, &v32);
			v = v32;
		} else {
			rv = cli_arg_u64(ctx, name, arg, &v);
		}
		if (rv == 0 && o->max && (v < o->min || v > o->max))
			rv = cli_usage(ctx, "%s must be %" PRIu64 "..%" PRIu64, name, o->min,
			               o->max);
		if (rv == 0 && o->kind == CLI_ARG_U32)
			*(uint32_t *)field = (uint32_t)v;
		else if (rv == 0)
			*(uint64_t *)field = v;
		return rv;
	case CLI_ARG_STR:
		*(const char **)field = arg;
		return 0;
	case CLI_SET_BOOL:
		*(bool *)field = true;
		return 0;
	case CLI_SET_BITS:
		*(uint32_t *)field |= o->bits;
		return 0;
	case CLI_ARG_PARSE:
		return o->parse(ctx, arg, field);
	}
	return 0;
}

int cli_parse_args(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out)
{
	struct option opts[MAX_OWN_OPTIONS + 3] = {CLI_COMMON_OPTIONS};
	size_t n_own = syntax->opts ? syntax->nopts : 0;
	int opt, rv, n;

	if (n_own > MAX_OWN_OPTIONS)
		return cli_usage(ctx, "internal error: too many options");
	for (size_t i = 0; i < n_own; i++) {
		const cli_opt *o = &syntax->opts[i];
		bool takes_arg = o->kind != CLI_SET_BOOL && o->kind != CLI_SET_BITS;
		opts[2 + i] = (struct option){o->name, takes_arg ? required_argument : no_argument,
		                              NULL, OWN_OPTION(i)};
	}
	/* "h", then each own short option ("o:" for one that takes an argument). */
	char shorts[2 + 2 * MAX_OWN_OPTIONS + 1] = "h";
	size_t ns = 1;
	for (size_t i = 0; i < n_own; i++) {
		const cli_opt *o = &syntax->opts[i];
		if (!o->short_name)
			continue;
		shorts[ns++] = o->short_name;
		if (o->kind != CLI_SET_BOOL && o->kind != CLI_SET_BITS)
			shorts[ns++] = ':';
	}
	shorts[ns] = '\0';
	while ((opt = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
		if (is_common_option(opt)) {
			rv = common_option(ctx, opt, syntax->help);
			if (rv != CLI_CONTINUE)
				return rv;
			continue;
		}
		for (size_t i = 0; i < n_own && opt < OWN_OPTION(0); i++)
			if (syntax->opts[i].short_name == opt)
				opt = OWN_OPTION(i);
		if (opt < OWN_OPTION(0))
			return cli_usage(ctx, "unknown option");
		rv = own_option(ctx, &syntax->opts[opt - OWN_OPTION(0)], optarg, out);
		if (rv != 0)
			return rv;
	}
	n = argc - optind;
	if (n < syntax->min_args || n > syntax->max_args)
		return syntax->max_args == 0
		               ? cli_usage(ctx, "unexpected argument '%s'", argv[optind])
		               : cli_usage(ctx, "expected %s", syntax->args);
	return CLI_CONTINUE;
}

int cli_list_result(cli *ctx, int status, const void *items, size_t n, size_t size,
                    json_t *(*to_json)(const void *item),
                    void (*print)(const void *items, size_t n))
{
	if (status != 0)
		return cli_fail(ctx, status);
	if (ctx->json)
		cli_json_print(cli_json_array(items, n, size, to_json));
	else
		print(items, n);
	return CLI_EXIT_OK;
}

int cli_start(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out)
{
	int rv = cli_parse_args(ctx, argc, argv, syntax, out);

	if (rv == CLI_CONTINUE && (rv = cli_connect(ctx)) == CLI_EXIT_OK)
		rv = CLI_CONTINUE;
	return rv;
}

int cli_start_ids(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out,
                  const char *const *names, uint64_t *const *ids)
{
	int rv = cli_parse_args(ctx, argc, argv, syntax, out);

	for (int i = 0; rv == CLI_CONTINUE && i < argc - optind; i++)
		if ((rv = cli_arg_u64(ctx, names[i], argv[optind + i], ids[i])) == 0)
			rv = CLI_CONTINUE;
	if (rv == CLI_CONTINUE && (rv = cli_connect(ctx)) == CLI_EXIT_OK)
		rv = CLI_CONTINUE;
	return rv;
}

int cli_start_id(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out,
                 const char *what, uint64_t *id)
{
	return cli_start_ids(ctx, argc, argv, syntax, out, &what, &id);
}

int cli_dispatch(cli *ctx, const cli_command *table, size_t count, int argc, char **argv,
                 const char *group_help)
{
	const char *group = ctx->command; /* argv[0] is already "gpusched <group>" */

	if (argc < 2)
		return cli_usage(ctx, "which one? (%s --help lists them)", group);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(group_help, stdout);
		return CLI_EXIT_OK;
	}
	for (size_t i = 0; i < count; i++) {
		if (strcmp(argv[1], table[i].name) != 0)
			continue;
		snprintf(ctx->command_buf, sizeof(ctx->command_buf), "%s %s", group, argv[1]);
		ctx->command = ctx->command_buf;
		return cli_run(ctx, table[i].run, argc - 1, argv + 1);
	}
	return cli_usage(ctx, "unknown subcommand '%s'", argv[1]);
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

bool cli_parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;

	if (!cli_parse_u64(s, &v) || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

bool cli_parse_i32(const char *s, int32_t *out)
{
	char *end;
	long long v;

	if (!s || !*s)
		return false;
	errno = 0;
	v = strtoll(s, &end, 0);
	if (errno || *end || v < INT32_MIN || v > INT32_MAX)
		return false;
	*out = (int32_t)v;
	return true;
}

int cli_arg_u64(cli *ctx, const char *option, const char *s, uint64_t *out)
{
	return cli_parse_u64(s, out) ? 0 : cli_usage(ctx, "%s: '%s' is not a number", option, s);
}

int cli_arg_u32(cli *ctx, const char *option, const char *s, uint32_t *out)
{
	return cli_parse_u32(s, out) ? 0
	                             : cli_usage(ctx, "%s: '%s' is not a 32-bit number", option, s);
}

int cli_parse_time(cli *ctx, const char *arg, void *field)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	if (gs_time_parse(arg, (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec, field) !=
	    0)
		return cli_usage(ctx,
		                 "'%s' is not a time: use a duration (10m), an ISO 8601 time "
		                 "(2026-11-24T09:30:00Z), @SECONDS or now",
		                 arg);
	return 0;
}

int cli_parse_state(cli *ctx, const char *arg, void *field)
{
	if (gs_packet_state_parse(arg, field) != 0)
		return cli_usage(ctx, "--state: unknown state '%s'", arg);
	return 0;
}

/* A byte count: a number, or one with a binary suffix (K, KiB, M, MiB, G, GiB). */
bool cli_parse_bytes(const char *s, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {{"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20}, {"G", 30}, {"GiB", 30}};
	size_t digits = strspn(s, "0123456789");
	char num[32];
	uint64_t v;

	if (cli_parse_u64(s, out))
		return true;
	if (digits == 0 || digits >= sizeof(num))
		return false;
	memcpy(num, s, digits);
	num[digits] = '\0';
	if (!cli_parse_u64(num, &v))
		return false;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(s + digits, units[i].suffix) != 0)
			continue;
		if (v > (UINT64_MAX >> units[i].shift))
			return false;
		*out = v << units[i].shift;
		return true;
	}
	return false;
}

int cli_parse_size(cli *ctx, const char *arg, void *field)
{
	if (cli_parse_bytes(arg, field))
		return 0;
	return cli_usage(
	        ctx, "'%s' is not a size (a number of bytes, or with K, M or G: 64M, 1GiB)", arg);
}

int cli_parse_priority_class(cli *ctx, const char *arg, void *field)
{
	for (uint32_t c = 0; c <= GS_PRIORITY_CLASS_MAX; c++)
		if (strcasecmp(arg, gs_priority_class_name(c)) == 0) {
			*(uint32_t *)field = c;
			return 0;
		}
	char *end;
	errno = 0;
	unsigned long v = strtoul(arg, &end, 10);
	if (arg[0] == '-' || end == arg || *end || errno || v > GS_PRIORITY_CLASS_MAX)
		return cli_usage(ctx,
		                 "'%s' is not a priority class (IDLE, BELOW_NORMAL, NORMAL,"
		                 " ABOVE_NORMAL, HIGH, REALTIME, or 0..5)",
		                 arg);
	*(uint32_t *)field = (uint32_t)v;
	return 0;
}

int cli_parse_submit_flags(cli *ctx, const char *arg, void *field)
{
	const char *bad = arg;

	if (gs_flags_parse(gs_submit_flag_names, arg, field, &bad) == 0)
		return 0;
	return cli_usage(ctx,
	                 "--flags: unknown flag '%.*s' (names: Paging, Present, "
	                 "RedirectedPresent, NullRendering, Flip, FlipWithNoWait, "
	                 "ContextSwitch, Resubmission, VirtualMachineData, or a number)",
	                 (int)strcspn(bad, ",|"), bad);
}

/* ---- formatting ------------------------------------------------------------------------- */

void cli_format_flags(const gs_flag_name *table, uint32_t value, char *buf, size_t cap)
{
	char names[256];

	gs_flags_format(table, value, names, sizeof(names));
	snprintf(buf, cap, "%s (0x%03" PRIx32 ")", names, value);
}

json_t *cli_json_flag_names(const gs_flag_name *table, uint32_t value)
{
	json_t *arr = json_array();
	uint32_t rest = value;
	char hex[16];

	for (const gs_flag_name *f = table; f->name; f++) {
		if (value & f->bit) {
			json_array_append_new(arr, json_string(f->name));
			rest &= ~f->bit;
		}
	}
	if (rest) {
		snprintf(hex, sizeof(hex), "0x%" PRIx32, rest);
		json_array_append_new(arr, json_string(hex));
	}
	return arr;
}

void cli_format_bytes(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void cli_format_duration(uint64_t ns, char *buf, size_t cap)
{
	if (ns == 0)
		snprintf(buf, cap, "-");
	else if (ns < 1000)
		snprintf(buf, cap, "%" PRIu64 " ns", ns);
	else if (ns < 1000000)
		snprintf(buf, cap, "%.1f us", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, cap, "%.2f ms", (double)ns / 1e6);
	else
		snprintf(buf, cap, "%.2f s", (double)ns / 1e9);
}

void cli_format_time(uint64_t ns, char *buf, size_t cap)
{
	time_t secs = (time_t)(ns / 1000000000u);
	struct tm tm;
	char date[32];

	if (ns == 0 || !localtime_r(&secs, &tm)) {
		snprintf(buf, cap, "-");
		return;
	}
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, cap, "%s.%03u", date, (unsigned)(ns / 1000000u % 1000u));
}

#if JSON_INTEGER_IS_LONG_LONG
#define JSON_INT_MAX LLONG_MAX
#else
#define JSON_INT_MAX LONG_MAX
#endif

json_t *cli_json_u64(uint64_t v)
{
	/* Saturate rather than wrap to a negative number. */
	return json_integer(v > (uint64_t)JSON_INT_MAX ? JSON_INT_MAX : (json_int_t)v);
}

json_t *cli_json_array(const void *items, size_t count, size_t size,
                       json_t *(*to_json)(const void *item))
{
	json_t *arr = json_array();

	for (size_t i = 0; i < count; i++)
		json_array_append_new(arr, to_json((const char *)items + i * size));
	return arr;
}

void cli_json_print(json_t *doc)
{
	/* The document, the objects of an array, and the objects of its "rows" (usage). */
	json_t *items = json_is_array(doc) ? doc : json_object_get(doc, "rows");
	if (json_host && json_is_object(doc))
		json_object_set_new(doc, "host", json_string(json_host));
	if (json_host && json_is_array(items)) {
		size_t i;
		json_t *v;
		json_array_foreach(items, i, v)
		{
			if (json_is_object(v))
				json_object_set_new(v, "host", json_string(json_host));
		}
	}
	json_dumpf(doc, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
	fflush(stdout);
	json_decref(doc);
}
