/*
 * The gpusched command-line tool: shared state and helpers of its commands. The tool uses
 * only libgpusched's public API (gpusched.h), wddm.h for flag names and jansson for --json.
 */
#ifndef GS_CLI_H
#define GS_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gpusched.h"
#include "wddm.h"

/* Exit codes (documented in --help). */
#define CLI_EXIT_OK        0
#define CLI_EXIT_DAEMON    1 /* the daemon answered with an error status */
#define CLI_EXIT_USAGE     2 /* bad command line */
#define CLI_EXIT_TRANSPORT 3 /* cannot connect, or the connection failed */
#define CLI_EXIT_VERIFY                                                                            \
	4                  /* demo: the GPU's results differ from the model; audit verify:         \
	                      the file does not match its hash chain */
#define CLI_EXIT_PARTIAL 5 /* several hosts: some did not answer (the output is the others') */

/* The "go on" answer of the parsing helpers (every exit code is >= 0). */
#define CLI_CONTINUE (-1)

typedef struct cli {
	const char *url; /* NULL = gs_default_url() */
	/* Several hosts (--url repeated, or $GPUSCHED_URL a list): docs/hosts.md. */
	const char *urls[GS_MAX_HOSTS];
	size_t nurls;
	char *url_list;    /* $GPUSCHED_URL split in place */
	gs_hosts *hosts;   /* connected when nurls > 1, for the commands that take several */
	const char *host;  /* the host a per-host run addresses now (its output names it) */
	const char *token; /* NULL = $GPUSCHED_TOKEN */
	uint32_t adapter;
	uint32_t timeout_ms; /* --timeout: base timeout of each request */
	bool json;
	const char *command; /* for messages: "submit", "alloc show" */
	char command_buf[64];
	char prog[80];     /* "gpusched <command>", argv[0] of the running command */
	gs_client *client; /* after cli_connect */
} cli;

/* How a command treats several hosts. */
enum {
	CLI_ONE_HOST = 0, /* one daemon only */
	CLI_PER_HOST,     /* run once per host, each output naming its host */
	CLI_HOSTS,        /* the command merges the hosts itself (ctx->hosts) */
};

/* One command or subcommand; argv[0] is its name, and it prints its own --help. */
typedef struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(cli *ctx, int argc, char **argv);
	int hosts; /* CLI_ONE_HOST, CLI_PER_HOST or CLI_HOSTS */
} cli_command;

/* Options every command accepts besides its own: --help and --json. */
#define CLI_OPT_HELP 'h'
#define CLI_OPT_JSON 0x100
#define CLI_COMMON_OPTIONS                                                                         \
	{"help", no_argument, NULL, CLI_OPT_HELP},                                                 \
	{                                                                                          \
		"json", no_argument, NULL, CLI_OPT_JSON                                            \
	}

/*
 * A command's own options are data: each says where its value goes in the command's parse
 * state (the `out` of cli_parse_args) and how the argument is read. Errors name the option
 * ("--limit: '12x' is not a number").
 */
typedef enum cli_opt_kind {
	CLI_ARG_U32,   /* a number (decimal or 0x hex) into a uint32_t; min..max when max > 0 */
	CLI_ARG_U64,   /* the same into a uint64_t */
	CLI_ARG_STR,   /* the argument itself into a const char * */
	CLI_SET_BOOL,  /* no argument: sets a bool */
	CLI_SET_BITS,  /* no argument: ORs `bits` into a uint32_t */
	CLI_ARG_PARSE, /* parse() reads the argument into the field */
} cli_opt_kind;

typedef struct cli_opt {
	const char *name; /* without the leading "--" */
	cli_opt_kind kind;
	size_t field; /* offsetof the value in the parse state */
	/* CLI_GIVEN(type, member): a bool also set when the option is given; 0 = none. */
	size_t given;
	/* With given: bits ORed into that member, an unsigned, instead (0: it is a bool). */
	unsigned given_bits;
	uint64_t min, max; /* CLI_ARG_U32/U64 range, checked when max > 0 */
	uint32_t bits;     /* CLI_SET_BITS */
	/* CLI_ARG_PARSE: reads arg into field; 0, or the exit code (a usage error). */
	int (*parse)(cli *ctx, const char *arg, void *field);
	char short_name; /* also -c (0: none) */
} cli_opt;

#define CLI_GIVEN(type, member) (offsetof(type, member) + 1)

/* A command's command line. */
typedef struct cli_syntax {
	const char *help;       /* printed by --help */
	const cli_opt *opts;    /* its own options (--help and --json come on top); may be NULL */
	size_t nopts;           /* CLI_OPTS(array) gives both */
	int min_args, max_args; /* positional arguments after the options */
	const char *args;       /* "ID VALUE": names them in "expected ..." (max_args > 0) */
} cli_syntax;

#define CLI_OPTS(array) (array), (sizeof(array) / sizeof((array)[0]))

/* Parses the options (--help, --json and getopt's complaints, then the command's own into
 * `out` as syntax->opts say) and checks how many positional arguments follow; they are then
 * argv[optind..argc-1]. Returns CLI_CONTINUE, or the exit code to return now. */
int cli_parse_args(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out);

/* The syntax of a command whose only options are the common ones. */
#define CLI_SIMPLE(help, min, max, what)                                                           \
	(&(const cli_syntax){(help), NULL, 0, (min), (max), (what)})

/* cli_parse_args, then cli_connect: CLI_CONTINUE when the command may call the daemon, else the
 * exit code to return now. */
int cli_start(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out);
/* cli_start for a command whose first positional argument is an id: it goes to *id, and `what`
 * names it in the error when it is not a number. */
int cli_start_id(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out,
                 const char *what, uint64_t *id);
/* cli_start for a command whose positional arguments are all numbers: the i-th one given goes
 * to *ids[i] and names[i] names it in the error (both arrays hold syntax->max_args entries;
 * optional ones not given are left as they are). */
int cli_start_ids(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *out,
                  const char *const *names, uint64_t *const *ids);

/* Runs a command (ctx->command set) on its own argv, argv[0] being its name. */
int cli_run(cli *ctx, int (*run)(cli *, int, char **), int argc, char **argv);

/* Runs the subcommand named by argv[1] from `table` (a group such as "alloc"). */
int cli_dispatch(cli *ctx, const cli_command *table, size_t count, int argc, char **argv,
                 const char *group_help);

/* Connects (once). Returns CLI_EXIT_OK or, after printing why, CLI_EXIT_TRANSPORT; with
 * several hosts given to a command that talks to one daemon, CLI_EXIT_USAGE. */
int cli_connect(cli *ctx);
void cli_disconnect(cli *ctx);

/* Several hosts (docs/hosts.md): connects to every URL (ctx->hosts). Returns CLI_EXIT_OK when
 * at least one answered (those that did not are reported by cli_hosts_report), else
 * CLI_EXIT_TRANSPORT after printing why. */
int cli_hosts_connect(cli *ctx);
/* Reports every host that is down or failed, on stderr (and with --json as a document
 * {"host", "error"}). Returns rv, or CLI_EXIT_PARTIAL when rv is CLI_EXIT_OK and a host was
 * left out. */
int cli_hosts_report(cli *ctx, int rv);
/* Runs a command once per host that is up, ctx->client and ctx->host set to it: its JSON
 * documents get "host", its text a heading line per host. */
int cli_run_per_host(cli *ctx, int (*run)(cli *, int, char **), int argc, char **argv);

/* Prints "gpusched: <command>: <STATUS>: <message>" for a failed call and returns the exit
 * code for that status. */
int cli_fail(cli *ctx, int status);
int cli_exit_code(int status);
/* Prints "gpusched: <command>: <message>" and a hint to stderr; returns CLI_EXIT_USAGE. */
int cli_usage(cli *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --since and --until (0: not given) in order: CLI_CONTINUE, or the usage error's exit code. */
int cli_check_range(cli *ctx, uint64_t since_ns, uint64_t until_ns);
/* Prints "gpusched: <command>: <message>" to stderr. */
void cli_warn(cli *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Number parsing: decimal or 0x hex, whole string, in range. */
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_u32(const char *s, uint32_t *out);
bool cli_parse_i32(const char *s, int32_t *out);
/* Parses an option's number or reports a usage error naming the option: 0 or CLI_EXIT_USAGE. */
int cli_arg_u64(cli *ctx, const char *option, const char *s, uint64_t *out);
int cli_arg_u32(cli *ctx, const char *option, const char *s, uint32_t *out);
/* CLI_ARG_PARSE hooks. Submit flags by value or names ("NullRendering,Present", "0xa") into a
 * uint32_t. */
int cli_parse_submit_flags(cli *ctx, const char *arg, void *field);
/* A time as gs_time_parse reads it (10m, ISO 8601, @SECONDS, now) into a uint64_t of
 * CLOCK_REALTIME ns. */
int cli_parse_time(cli *ctx, const char *arg, void *field);
/* A packet state by name (--state) into a gs_packet_state. */
int cli_parse_state(cli *ctx, const char *arg, void *field);
/* A byte count: a number, or one with a binary suffix (K, KiB, M, MiB, G, GiB). */
bool cli_parse_bytes(const char *s, uint64_t *out);
/* The same as an option's parser, into a uint64_t (64M, 64MiB, 1G, 4096). */
int cli_parse_size(cli *ctx, const char *arg, void *field);
/* A priority class into a uint32_t: its name (HIGH, case ignored) or 0..5. */
int cli_parse_priority_class(cli *ctx, const char *arg, void *field);

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
/* Prints one JSON document on one line to stdout and releases it. During a per-host run
 * (cli_run_per_host) an object, or each object of an array, first gets "host": its URL. */
void cli_json_print(json_t *doc);
/* The answer to a list request: a failed status as cli_fail does; else the `n` items, each
 * `size` bytes, as a JSON array made by to_json with --json, or as print's table. Returns the
 * exit code (the caller still frees the list). */
int cli_list_result(cli *ctx, int status, const void *items, size_t n, size_t size,
                    json_t *(*to_json)(const void *item),
                    void (*print)(const void *items, size_t n));

/* Commands, one file each. */
int cmd_info(cli *ctx, int argc, char **argv);
int cmd_demo(cli *ctx, int argc, char **argv);
int cmd_submit(cli *ctx, int argc, char **argv);
int cmd_history(cli *ctx, int argc, char **argv);
int cmd_events(cli *ctx, int argc, char **argv);
int cmd_stats(cli *ctx, int argc, char **argv);
int cmd_device(cli *ctx, int argc, char **argv);
int cmd_context(cli *ctx, int argc, char **argv);
int cmd_admin(cli *ctx, int argc, char **argv);
int cmd_alloc(cli *ctx, int argc, char **argv);
int cmd_sync(cli *ctx, int argc, char **argv);
int cmd_tenant(cli *ctx, int argc, char **argv);
int cmd_moves(cli *ctx, int argc, char **argv);
int cmd_watch(cli *ctx, int argc, char **argv);
int cmd_audit(cli *ctx, int argc, char **argv);
int cmd_explain(cli *ctx, int argc, char **argv);
int cmd_usage(cli *ctx, int argc, char **argv);
int cmd_kernel(cli *ctx, int argc, char **argv);
int cmd_run(cli *ctx, int argc, char **argv);
int cmd_trace(cli *ctx, int argc, char **argv);
int cmd_timeline(cli *ctx, int argc, char **argv);

/* The caller's packets submitted in [since, until) (0: unbounded), at most max_packets, oldest
 * first, sorted by id, and their events in seq order (schedule.c). */
typedef struct cli_schedule {
	gs_packet_record *recs;
	size_t nrecs, caprecs;
	gs_packet_event *evs;
	size_t nevs, capevs;
	bool truncated; /* the range had more than max_packets packets: the newest are left out */
} cli_schedule;
int cli_schedule_fetch(cli *ctx, uint64_t since_ns, uint64_t until_ns, uint64_t max_packets,
                       cli_schedule *s);
/* The options of a command that draws a schedule (trace, timeline): its parse state starts
 * with this, and its option table with CLI_SCHEDULE_OPTS(its type, max packets). */
typedef struct cli_schedule_args {
	uint64_t since_ns, until_ns;
	const char *output;
	uint64_t max_packets;
} cli_schedule_args;
#define CLI_SCHEDULE_OPTS(type, most)                                                              \
	{"since", CLI_ARG_PARSE, offsetof(type, sched.since_ns), .parse = cli_parse_time},         \
	        {"until", CLI_ARG_PARSE, offsetof(type, sched.until_ns), .parse = cli_parse_time}, \
	        {"output", CLI_ARG_STR, offsetof(type, sched.output), .short_name = 'o'},          \
	{                                                                                          \
		"max-packets", CLI_ARG_U64, offsetof(type, sched.max_packets), .min = 1,           \
		                                                               .max = (most)       \
	}
/* Parses the command line into args (a struct starting with cli_schedule_args), connects and
 * fetches the schedule: CLI_CONTINUE, or the exit code to return (s is then empty). */
int cli_schedule_start(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *args,
                       cli_schedule *s);
/* The record of packet (NULL: not in the schedule). */
/* cli_schedule_start for several hosts (ctx->nurls > 1): connects to them all and fetches each
 * one's schedule into (*per_host)[i] (empty for a host that is down, or whose fetch failed:
 * it is then marked down, for cli_hosts_report), saying which were cut at --max-packets.
 * Returns CLI_CONTINUE with the array (free each, then it), or the exit code to return now
 * (no host answered: CLI_EXIT_TRANSPORT, after reporting them). */
int cli_schedule_start_hosts(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *args,
                             cli_schedule **per_host);
const gs_packet_record *cli_schedule_find(const cli_schedule *s, uint64_t packet);
/* Sorts the records by packet id again, as cli_schedule_find needs (after they were changed). */
void cli_schedule_sort(cli_schedule *s);
void cli_schedule_free(cli_schedule *s);

/* Moves of the memory manager (cmd_moves.c), also shown by alloc show: one gs_move as a JSON
 * object as `moves --json` prints it, and the table with each line prefixed by indent. */
json_t *cli_json_move(const void *move);
void cli_print_moves(const gs_move *moves, size_t n, const char *indent);

#endif
