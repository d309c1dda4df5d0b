/*
 * The gpusched command-line tool: shared state and helpers of its commands. The tool uses
 * only libgpusched's public API (gpusched.h), wddm.h for flag names and jansson for --json.
 */
#ifndef GS_CLI_H
#define GS_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "gpusched.h"
#include "wddm.h"

/* Exit codes (documented in --help). */
#define CLI_EXIT_OK        0
#define CLI_EXIT_DAEMON    1 /* the daemon answered with an error status */
#define CLI_EXIT_USAGE     2 /* bad command line */
#define CLI_EXIT_TRANSPORT 3 /* cannot connect, or the connection failed */
#define CLI_EXIT_VERIFY    4 /* demo: the GPU's results differ from the model */

/* The "go on" answer of the parsing helpers (every exit code is >= 0). */
#define CLI_CONTINUE (-1)

typedef struct cli {
	const char *url;   /* NULL = gs_default_url() */
	const char *token; /* NULL = $GPUSCHED_TOKEN */
	uint32_t adapter;
	uint32_t timeout_ms; /* --timeout: base timeout of each request */
	bool json;
	const char *command; /* for messages: "submit", "alloc show" */
	char command_buf[64];
	char prog[80];     /* "gpusched <command>", argv[0] of the running command */
	gs_client *client; /* after cli_connect */
} cli;

/* One command or subcommand; argv[0] is its name, and it prints its own --help. */
typedef struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(cli *ctx, int argc, char **argv);
} cli_command;

/* Options every command accepts besides its own: --help and --json. */
#define CLI_OPT_HELP 'h'
#define CLI_OPT_JSON 0x100
#define CLI_COMMON_OPTIONS                                                                         \
	{"help", no_argument, NULL, CLI_OPT_HELP},                                                 \
	{                                                                                          \
		"json", no_argument, NULL, CLI_OPT_JSON                                            \
	}

/* Handles one of a command's own options (arg is its optarg), filling `out`, the command's
 * parse state. Returns 0, or the exit code to return now (a usage error). */
typedef int cli_option_fn(cli *ctx, int opt, const char *arg, void *out);

/* A command's command line. */
typedef struct cli_syntax {
	const char *help; /* printed by --help */
	/* The command's own options, then CLI_COMMON_OPTIONS and {0}; NULL: only the common. */
	const struct option *options;
	cli_option_fn *on_option; /* handles the command's own options */
	int min_args, max_args;   /* positional arguments after the options */
	const char *args;         /* "ID VALUE": names them in "expected ..." (max_args > 0) */
} cli_syntax;

/* Parses the options (--help, --json and getopt's complaints itself, the command's own through
 * syntax->on_option) and checks how many positional arguments follow; they are then
 * argv[optind..argc-1]. Returns CLI_CONTINUE, or the exit code to return now. */
int cli_parse_args(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out);

/* cli_parse_args for commands whose only options are the common ones. */
int cli_simple_args(cli *ctx, int argc, char **argv, const char *help, int min, int max,
                    const char *what);

/* Runs a command (ctx->command set) on its own argv, argv[0] being its name. */
int cli_run(cli *ctx, int (*run)(cli *, int, char **), int argc, char **argv);

/* Runs the subcommand named by argv[1] from `table` (a group such as "alloc"). */
int cli_dispatch(cli *ctx, const cli_command *table, size_t count, int argc, char **argv,
                 const char *group_help);

/* Connects (once). Returns CLI_EXIT_OK or, after printing why, CLI_EXIT_TRANSPORT. */
int cli_connect(cli *ctx);
void cli_disconnect(cli *ctx);

/* Prints "gpusched: <command>: <STATUS>: <message>" for a failed call and returns the exit
 * code for that status. */
int cli_fail(cli *ctx, int status);
int cli_exit_code(int status);
/* Prints "gpusched: <command>: <message>" and a hint to stderr; returns CLI_EXIT_USAGE. */
int cli_usage(cli *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "gpusched: <command>: <message>" to stderr. */
void cli_warn(cli *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Number parsing: decimal or 0x hex, whole string, in range. */
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_u32(const char *s, uint32_t *out);
bool cli_parse_i32(const char *s, int32_t *out);
/* Parses an option's number or reports a usage error naming the option: 0 or CLI_EXIT_USAGE. */
int cli_arg_u64(cli *ctx, const char *option, const char *s, uint64_t *out);
int cli_arg_u32(cli *ctx, const char *option, const char *s, uint32_t *out);
/* Submit flags by value or names ("NullRendering,Present", "0xa"). */
int cli_arg_submit_flags(cli *ctx, const char *s, uint32_t *out);

/* "NullRendering|Present (0x00a)" */
void cli_format_flags(const gs_flag_name *table, uint32_t value, char *buf, size_t cap);
/* The names of the set bits (unknown bits as one hex string). */
json_t *cli_json_flag_names(const gs_flag_name *table, uint32_t value);
/* "12.5 MiB" */
void cli_format_bytes(uint64_t bytes, char *buf, size_t cap);
/* "350 us", "12.3 ms", "2.10 s"; "-" for 0. */
void cli_format_duration(uint64_t ns, char *buf, size_t cap);
/* Daemon time (CLOCK_REALTIME ns) as local ISO 8601 with milliseconds; "-" for 0. */
void cli_format_time(uint64_t ns, char *buf, size_t cap);

/* jansson holds integers as json_int_t (long long); ids and counters fit. */
json_t *cli_json_u64(uint64_t v);
/* A JSON array of the `count` entries of `items`, each `size` bytes, made by to_json. */
json_t *cli_json_array(const void *items, size_t count, size_t size,
                       json_t *(*to_json)(const void *item));
/* Prints one JSON document on one line to stdout and releases it. */
void cli_json_print(json_t *doc);

/* Commands, one file each. */
int cmd_info(cli *ctx, int argc, char **argv);
int cmd_demo(cli *ctx, int argc, char **argv);
int cmd_submit(cli *ctx, int argc, char **argv);
int cmd_history(cli *ctx, int argc, char **argv);
int cmd_events(cli *ctx, int argc, char **argv);
int cmd_stats(cli *ctx, int argc, char **argv);
int cmd_device(cli *ctx, int argc, char **argv);
int cmd_alloc(cli *ctx, int argc, char **argv);
int cmd_sync(cli *ctx, int argc, char **argv);
int cmd_tenant(cli *ctx, int argc, char **argv);
int cmd_moves(cli *ctx, int argc, char **argv);

/* Moves of the memory manager (cmd_moves.c), also shown by alloc show: one gs_move as a JSON
 * object as `moves --json` prints it, and the table with each line prefixed by indent. */
json_t *cli_json_move(const void *move);
void cli_print_moves(const gs_move *moves, size_t n, const char *indent);

#endif
