/*
 * gpuschedd: the gpusched daemon. Parses options, loads the configuration, starts the
 * adapters, the audit writer and the RPC sockets, prints "ready", and runs the libuv loop
 * until SIGINT or SIGTERM.
 */
#include "core/log.h"
#include "core/tenant.h"
#include "core/wire_id.h"
#include "lifecycle.h"
#include "notify.h"
#include "reload.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <pthread.h>
#include <sodium.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: gpuschedd [OPTIONS]\n"
	        "The gpusched daemon: schedules DMA-buffer packets on real or emulated GPU\n"
	        "adapters for remote clients (protobuf over nng) and audits every packet to\n"
	        "SQLite.\n\n"
	        "Options:\n"
	        "  -l, --listen URL      serve requests on URL (ipc://PATH, tcp://HOST:PORT,\n"
	        "                        tls+tcp://HOST:PORT with \"tls\" in the config);\n"
	        "                        repeatable; default ipc://$XDG_RUNTIME_DIR/gpusched/"
	        "gpusched.sock\n"
	        "                        (or ipc:///tmp/gpusched-$UID/gpusched.sock)\n"
	        "  -d, --db PATH         SQLite audit file (default ./gpusched-audit.db)\n"
	        "  -c, --config FILE     JSON configuration (see deploy/gpuschedd.example.json)\n"
	        "      --check-config FILE  check FILE (with the other options given) and exit:\n"
	        "                        print the effective configuration as JSON, every key\n"
	        "                        with its value, defaults included, tokens as salted\n"
	        "                        hashes (exit 0); or each error, with its key and why,\n"
	        "                        unknown (misspelt) keys included (exit 1)\n"
	        "      --clock MODE      wall (engines take real time) or virtual (SPIN is\n"
	        "                        instant, time is simulated); default wall\n"
	        "  -e, --events URL      obsolete, ignored: events are read with EventsWait on\n"
	        "                        the request socket, each tenant its own (gpusched watch)\n"
	        "      --metrics URL     serve Prometheus metrics at http://HOST:PORT/metrics\n"
	        "                        (Authorization: Bearer TOKEN; a tenant sees its own\n"
	        "                        figures, an administrator everything)\n"
	        "      --backend NAME    engine backend of every adapter: emu (default), null,\n"
	        "                        or vulkan (a real GPU, or Mesa's lavapipe on the CPU)\n"
	        "      --device WHICH    vulkan: the device of every adapter, an index or part\n"
	        "                        of its name (default: the first with what we need)\n"
	        "      --with-vulkan     one more adapter, gpu0, with backend vulkan (on "
	        "--device,\n"
	        "                        else the first fitting device: a GPU, or lavapipe),\n"
	        "                        after the configured ones: users' kernels run there\n"
	        "      --log-level L     error, warn, info (default) or debug\n"
	        "      --audit-sync-full fsync every audit commit (survives power loss, slower);\n"
	        "                        default survives a daemon crash (kill -9)\n"
	        "      --bench-null-audit  benchmarks only: acknowledge audit records without\n"
	        "                        writing them (no history, no guarantees), to measure\n"
	        "                        what auditing costs\n"
	        "      --bench-writer-commits  benchmarks only: every audit commit on the\n"
	        "                        writer thread, as before the loop committed what an\n"
	        "                        answer waits for (to measure what that saves)\n"
	        "      --hash-token      read a tenant token from stdin, print its salted hash\n"
	        "                        for a tenant's \"token_hash\" in the config, and exit\n"
	        "      --audit-map-id ID print the audit file's number (a column's value) for a\n"
	        "                        packet id or seq a client was given, or a node fence\n"
	        "                        an event names, and exit; ID is packet:N, seq:N or\n"
	        "                        fence:ADAPTER:NODE:N (packets.id holds each packet's)\n"
	        "      --audit-wire-id ID the reverse: what a client is shown for the file's N\n"
	        "  -h, --help            show this help\n"
	        "  -V, --version         show the version\n\n"
	        "Prints one line containing \"ready\" on stdout once it serves requests.\n"
	        "SIGINT/SIGTERM: stop accepting, cancel queued packets (audited), let running\n"
	        "packets finish (bounded by shutdown_grace_ms), flush the audit, exit 0.\n\n"
	        "Exit status: 0 clean stop, 1 start-up failure, 2 usage error.\n");
}

enum {
	OPT_CLOCK = 256,
	OPT_LOG_LEVEL,
	OPT_BACKEND,
	OPT_DEVICE,
	OPT_AUDIT_SYNC,
	OPT_BENCH_NULL_AUDIT,
	OPT_BENCH_WRITER_COMMITS,
	OPT_WITH_VULKAN,
	OPT_METRICS,
	OPT_HASH_TOKEN,
	OPT_AUDIT_MAP_ID,
	OPT_AUDIT_WIRE_ID,
	OPT_CHECK_CONFIG
};

/*
 * --audit-map-id / --audit-wire-id: an operator's way between what clients were shown and the
 * audit file's columns. spec is packet:N, seq:N or fence:ADAPTER:NODE:N; the key is the file's
 * (meta wire_key, read-only). Prints the other number; 2 on a bad spec, 1 without a key.
 */
static int map_id(const char *db, const char *spec, bool to_wire)
{
	unsigned a = 0, n = 0;
	unsigned long long v = 0;
	uint64_t tweak;
	char end;
	if (sscanf(spec, "packet:%llu%c", &v, &end) == 1)
		tweak = GSD_WIRE_PACKET;
	else if (sscanf(spec, "seq:%llu%c", &v, &end) == 1)
		tweak = GSD_WIRE_SEQ;
	else if (sscanf(spec, "fence:%u:%u:%llu%c", &a, &n, &v, &end) == 3)
		tweak = gsd_wire_fence_tweak(a, n);
	else {
		fprintf(stderr, "gpuschedd: '%s' is not packet:N, seq:N or fence:ADAPTER:NODE:N\n",
		        spec);
		return 2;
	}
	if (v > GSD_WIRE_MAX) {
		fprintf(stderr, "gpuschedd: %llu is above 2^53 - 1: no id is\n", v);
		return 2;
	}
	unsigned char raw[GSD_AUDIT_WIRE_KEY_BYTES];
	char err[256] = "libsodium cannot be initialised";
	if (sodium_init() < 0 || gsd_history_wire_key(db, raw, err, sizeof err) != 0) {
		fprintf(stderr, "gpuschedd: %s\n", err);
		return 1;
	}
	gsd_wire_key k;
	gsd_wire_key_init(&k, raw);
	printf("%llu\n", (unsigned long long)(to_wire ? gsd_wire_map(&k, tweak, v)
	                                              : gsd_wire_unmap(&k, tweak, v)));
	return 0;
}

/* --hash-token: one line from stdin (without its newline) -> its hash text on stdout. */
static int hash_token(void)
{
	char token[256], out[160];
	if (!fgets(token, sizeof(token), stdin)) {
		fprintf(stderr, "gpuschedd: --hash-token reads the token from stdin\n");
		return 2;
	}
	token[strcspn(token, "\r\n")] = '\0';
	if (strlen(token) >= 128) {
		fprintf(stderr, "gpuschedd: a token is at most 127 bytes\n");
		return 2;
	}
	if (gsd_token_hash_text(token, out, sizeof(out)) != 0) {
		fprintf(stderr, "gpuschedd: cannot hash the token (libsodium)\n");
		return 1;
	}
	printf("%s\n", out);
	return 0;
}

#define STRING_OPT(ch, member)                                                                     \
	{                                                                                          \
		(ch), offsetof(cli_opts, member), false                                            \
	}
#define FLAG_OPT(ch, member)                                                                       \
	{                                                                                          \
		(ch), offsetof(cli_opts, member), true                                             \
	}

typedef struct cli_opts {
	const char *config;
	uint32_t nlisten;
	const char *listen[GSD_MAX_LISTEN];
	const char *db;
	const char *clock;
	const char *events;
	const char *metrics;
	const char *backend;
	const char *device;
	const char *log_level;
	bool audit_sync_full;
	bool bench_null_audit;
	bool bench_writer_commits;
	bool with_vulkan;
	bool check_config;   /* --check-config FILE: config is FILE; print, then exit */
	const char *map_id;  /* --audit-map-id: a wire value to the file's */
	const char *wire_id; /* --audit-wire-id: the file's value to the wire's */
} cli_opts;

/* The options that only keep their argument, or only say they were given: the field of
 * cli_opts each one sets (a const char *, or a bool for a flag). */
static const struct {
	int ch;
	size_t field;
	bool flag;
} plain_opts[] = {
        STRING_OPT('d', db),
        STRING_OPT('c', config),
        STRING_OPT('e', events),
        STRING_OPT(OPT_CLOCK, clock),
        STRING_OPT(OPT_BACKEND, backend),
        STRING_OPT(OPT_DEVICE, device),
        STRING_OPT(OPT_LOG_LEVEL, log_level),
        STRING_OPT(OPT_METRICS, metrics),
        STRING_OPT(OPT_AUDIT_MAP_ID, map_id),
        STRING_OPT(OPT_AUDIT_WIRE_ID, wire_id),
        FLAG_OPT(OPT_AUDIT_SYNC, audit_sync_full),
        FLAG_OPT(OPT_BENCH_NULL_AUDIT, bench_null_audit),
        FLAG_OPT(OPT_BENCH_WRITER_COMMITS, bench_writer_commits),
        FLAG_OPT(OPT_WITH_VULKAN, with_vulkan),
};

/* Sets the field of a plain option: false when ch is not one. */
static bool set_plain_opt(cli_opts *o, int ch, const char *arg)
{
	for (size_t i = 0; i < sizeof(plain_opts) / sizeof(plain_opts[0]); i++) {
		if (plain_opts[i].ch != ch)
			continue;
		if (plain_opts[i].flag)
			*(bool *)((char *)o + plain_opts[i].field) = true;
		else
			*(const char **)((char *)o + plain_opts[i].field) = arg;
		return true;
	}
	return false;
}

static int parse_args(int argc, char **argv, cli_opts *o)
{
	static const struct option longopts[] = {
	        {"listen", required_argument, NULL, 'l'},
	        {"db", required_argument, NULL, 'd'},
	        {"config", required_argument, NULL, 'c'},
	        {"clock", required_argument, NULL, OPT_CLOCK},
	        {"events", required_argument, NULL, 'e'},
	        {"metrics", required_argument, NULL, OPT_METRICS},
	        {"backend", required_argument, NULL, OPT_BACKEND},
	        {"device", required_argument, NULL, OPT_DEVICE},
	        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
	        {"audit-sync-full", no_argument, NULL, OPT_AUDIT_SYNC},
	        {"bench-null-audit", no_argument, NULL, OPT_BENCH_NULL_AUDIT},
	        {"bench-writer-commits", no_argument, NULL, OPT_BENCH_WRITER_COMMITS},
	        {"with-vulkan", no_argument, NULL, OPT_WITH_VULKAN},
	        {"hash-token", no_argument, NULL, OPT_HASH_TOKEN},
	        {"audit-map-id", required_argument, NULL, OPT_AUDIT_MAP_ID},
	        {"audit-wire-id", required_argument, NULL, OPT_AUDIT_WIRE_ID},
	        {"check-config", required_argument, NULL, OPT_CHECK_CONFIG},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {NULL, 0, NULL, 0}};
	int ch;
	while ((ch = getopt_long(argc, argv, "l:d:c:e:hV", longopts, NULL)) != -1) {
		if (set_plain_opt(o, ch, optarg))
			continue;
		switch (ch) {
		case 'l':
			if (o->nlisten == GSD_MAX_LISTEN) {
				fprintf(stderr, "gpuschedd: at most %d --listen URLs\n",
				        GSD_MAX_LISTEN);
				return 2;
			}
			o->listen[o->nlisten++] = optarg;
			break;
		case OPT_HASH_TOKEN:
			exit(hash_token());
		case OPT_CHECK_CONFIG:
			o->config = optarg;
			o->check_config = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("gpuschedd %s\n", GS_VERSION);
			exit(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gpuschedd: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return 0;
}

/* Flags override the file, which overrides the defaults. */
/* Fills why (without "gpuschedd: ") when it returns non-zero. */
static int apply_args(gsd_config *cfg, const cli_opts *o, char *why, size_t cap)
{
	char err[512];
	if (o->config && gsd_config_load(cfg, o->config, err, sizeof(err)) != 0) {
		snprintf(why, cap, "%s", err);
		return 1;
	}
	/* A key nothing reads is a warning when the daemon starts, an error when checking: it
	 * is most likely misspelt, and its setting is not in force. */
	if (o->check_config && cfg->unknown_keys) {
		snprintf(why, cap, "%s: %u unknown key%s (named above): nothing reads %s",
		         o->config, cfg->unknown_keys, cfg->unknown_keys == 1 ? "" : "s",
		         cfg->unknown_keys == 1 ? "it" : "them");
		return 1;
	}
	if (o->nlisten) {
		cfg->nlisten = o->nlisten;
		/* They replace the config's listeners, with their own CAs and tenants. */
		for (uint32_t i = 0; i < o->nlisten; i++) {
			snprintf(cfg->listen[i], sizeof(cfg->listen[i]), "%s", o->listen[i]);
			cfg->listen_ca[i][0] = cfg->listen_tenants[i][0] = '\0';
		}
	}
	if (o->db)
		snprintf(cfg->db_path, sizeof(cfg->db_path), "%s", o->db);
	if (o->events)
		snprintf(cfg->events_url, sizeof(cfg->events_url), "%s", o->events);
	if (o->metrics)
		snprintf(cfg->metrics_url, sizeof(cfg->metrics_url), "%s", o->metrics);
	if (o->clock) {
		if (strcmp(o->clock, "wall") && strcmp(o->clock, "virtual")) {
			snprintf(why, cap, "--clock must be wall or virtual");
			return 2;
		}
		cfg->virtual_clock = strcmp(o->clock, "virtual") == 0;
	}
	if (o->backend)
		for (uint32_t i = 0; i < cfg->nadapters; i++)
			snprintf(cfg->adapters[i].backend, sizeof(cfg->adapters[i].backend), "%s",
			         o->backend);
	if (o->log_level) {
		cfg->log_level = gsd_log_parse_level(o->log_level);
		if (cfg->log_level < 0) {
			snprintf(why, cap, "--log-level must be error, warn, info or debug");
			return 2;
		}
	}
	if (o->with_vulkan && gsd_config_add_vulkan(cfg, err, sizeof(err)) != 0) {
		snprintf(why, cap, "--with-vulkan: %s", err);
		return 2;
	}
	if (o->device)
		for (uint32_t i = 0; i < cfg->nadapters; i++)
			snprintf(cfg->adapters[i].device, sizeof(cfg->adapters[i].device), "%s",
			         o->device);
	if (o->audit_sync_full)
		cfg->audit_sync_full = true;
	cfg->bench_null_audit = o->bench_null_audit;
	cfg->bench_writer_commits = o->bench_writer_commits;
	gsd_config_backend_defaults(cfg);
	if (gsd_config_validate(cfg, err, sizeof(err)) != 0) {
		snprintf(why, cap, "configuration: %s", err);
		return 1;
	}
	return 0;
}

/* Every connection takes a file descriptor: the soft limit (often 1,024) goes up to the hard
 * limit, so a few hundred idle clients cannot lock everyone out. */
static void raise_open_file_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
		GSD_INFO("open-file limit raised from %llu to %llu", (unsigned long long)was,
		         (unsigned long long)rl.rlim_max);
	else
		GSD_WARN("cannot raise the open-file limit from %llu: %s", (unsigned long long)was,
		         strerror(errno));
}

/* ---- stopping: wait (bounded) for running packets, then leave the loop ---- */

static uint64_t g_stop_deadline;
static gsd_notify g_notify;  /* systemd: READY, STATUS, WATCHDOG, STOPPING (notify.h) */
static uv_signal_t g_sighup; /* reloads the configuration file (reload.h) */

static void stop_poll(uv_timer_t *t)
{
	gsd_daemon *d = t->data;
	if (gsd_daemon_engines_idle(d) || gsd_now_ns() >= g_stop_deadline) {
		if (!gsd_daemon_engines_idle(d))
			GSD_WARN("packets still running after %u ms: aborting them",
			         d->cfg.shutdown_grace_ms);
		uv_close((uv_handle_t *)t, NULL);
		uv_close((uv_handle_t *)&d->sigint, NULL);
		uv_close((uv_handle_t *)&d->sigterm, NULL);
		uv_close((uv_handle_t *)&g_sighup, NULL);
		gsd_notify_close(&g_notify);
		uv_stop(d->loop);
	}
}

/* A stop: no new requests, queued packets cancelled, running ones given the grace period. */
static void begin_stop(gsd_daemon *d)
{
	gsd_notify_stopping(&g_notify);
	gsd_daemon_stop(d);
	g_stop_deadline = gsd_now_ns() + (uint64_t)d->cfg.shutdown_grace_ms * 1000000u;
	/* Completions arrive as interrupts on the loop; this timer only checks whether the
	 * engines have drained, and gives up at the deadline. */
	uv_timer_init(d->loop, &d->stop_timer);
	d->stop_timer.data = d;
	uv_timer_start(&d->stop_timer, stop_poll, 0, 10);
}

static void on_signal(uv_signal_t *s, int signum)
{
	gsd_daemon *d = s->data;
	if (d->stopping)
		return;
	GSD_INFO("received %s", signum == SIGINT ? "SIGINT" : "SIGTERM");
	begin_stop(d);
}

/* The options the daemon was started with: a reload reads the file again under them. */
static cli_opts g_opts;

/* Reloads the configuration file (SIGHUP, AdminReload): the number of changes, or -1 with why
 * in msg (nothing changed). Every outcome is logged and audited. */
static int reload(gsd_daemon *d, const char *who, char *msg, size_t cap)
{
	static gsd_config next; /* large: not on the stack */
	char why[1024];
	int rc = -1;
	if (!g_opts.config) {
		snprintf(msg, cap,
		         "refused: the daemon was started without --config: nothing to read");
	} else if (d->stopping) {
		/* Its listeners stay open through the stop's grace for the answers still due. */
		snprintf(msg, cap, "refused: the daemon is stopping");
	} else {
		gsd_config_defaults(&next);
		if (apply_args(&next, &g_opts, why, sizeof why) != 0)
			snprintf(msg, cap, "refused: %s (nothing was changed)", why);
		else
			rc = gsd_reload_apply(d, &next, who, msg, cap);
		sodium_memzero(next.tenants, sizeof next.tenants);
	}
	char note[1200];
	snprintf(note, sizeof note, "by %s: %s: %s", who, g_opts.config ? g_opts.config : "-", msg);
	if (rc < 0) {
		GSD_WARN("reload %s", note);
		gsd_audit_note(d->audit, who, "reload_refused", note);
	} else {
		GSD_INFO("reload %s", note);
		gsd_audit_note(d->audit, who, "reload", note);
	}
	return rc;
}

static void on_sighup(uv_signal_t *s, int signum)
{
	(void)signum;
	char msg[1024];
	reload(s->data, "SIGHUP", msg, sizeof msg);
}

/* An administrator's drain is over (AdminDrain): the daemon stops, and exits 0. */
static void on_drained(gsd_daemon *d)
{
	if (!d->stopping)
		begin_stop(d);
}

int main(int argc, char **argv)
{
	cli_opts o = {0};
	int rc = parse_args(argc, argv, &o);
	g_opts = o;
	if (rc)
		return rc;
	static gsd_config cfg;
	gsd_config_defaults(&cfg);
	char why[1024];
	rc = apply_args(&cfg, &o, why, sizeof why);
	if (rc) {
		fprintf(stderr, "gpuschedd: %s\n", why);
		return rc;
	}
	if (o.map_id || o.wire_id)
		return map_id(cfg.db_path, o.map_id ? o.map_id : o.wire_id, o.wire_id != NULL);
	if (o.check_config) {
		char *text = gsd_config_dump(&cfg);
		if (!text) {
			fprintf(stderr, "gpuschedd: out of memory\n");
			return 1;
		}
		printf("%s\n", text);
		free(text);
		return 0;
	}
	gsd_log_set_level(cfg.log_level);
	signal(SIGPIPE, SIG_IGN);
	/* A file-size limit makes the audit's writes fail (and submissions be refused) rather
	 * than kill the daemon. */
	signal(SIGXFSZ, SIG_IGN);
	raise_open_file_limit();
	/* The loop runs on the main thread, which keeps the program's name: the process's name
	 * is its main thread's, and pidof, pkill and killall look for "gpuschedd". */

	static gsd_daemon d;
	uv_loop_t *loop = uv_default_loop();
	if (gsd_daemon_init(&d, &cfg, loop) != 0) {
		GSD_ERROR("start-up failed");
		gsd_daemon_destroy(&d);
		return 1;
	}
	uv_signal_init(loop, &d.sigint);
	uv_signal_init(loop, &d.sigterm);
	d.sigint.data = d.sigterm.data = &d;
	uv_signal_start(&d.sigint, on_signal, SIGINT);
	uv_signal_start(&d.sigterm, on_signal, SIGTERM);
	d.on_drained = on_drained;
	d.on_reload = reload;
	uv_signal_init(loop, &g_sighup);
	g_sighup.data = &d;
	uv_signal_start(&g_sighup, on_sighup, SIGHUP);
	uv_unref((uv_handle_t *)&g_sighup);

	for (uint32_t i = 0; i < d.nadapters; i++) {
		const gsd_adapter *a = &d.adapters[i];
		GSD_INFO("adapter %u %s: backend %s, %u nodes, %u segments, clock %s, policy %s,"
		         " time slice %u us",
		         a->id, a->cfg->name, a->ops->name, a->nnodes, a->nsegments,
		         cfg.virtual_clock ? "virtual" : "wall",
		         gsd_share_policy_name(a->cfg->share_policy),
		         a->cfg->time_slice_us ? a->cfg->time_slice_us : cfg.quantum_us);
	}
	GSD_INFO("audit file %s", cfg.db_path);
	printf("gpuschedd %s ready on %s\n", GS_VERSION, cfg.listen[0]);
	fflush(stdout);
	gsd_notify_ready(&g_notify, &d, loop);

	uv_run(loop, UV_RUN_DEFAULT);
	gsd_daemon_destroy(&d);
	uv_loop_close(loop);
	GSD_INFO("stopped");
	return 0;
}
