/*
 * gpusched watch: the caller's tenant's events as they happen (an administrator's: all), read
 * with EventsWait on the request connection, with every loss reported and the lost packet
 * events read back from the audit.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char watch_help[] =
        "Usage: gpusched watch [--tenant NAME] [--context ID] [--packet ID] [--state S]\n"
        "                      [--count N] [--seconds N] [--json]\n"
        "Prints your tenant's events as they happen: every packet state change (refused\n"
        "submissions included) and messages about it (engine resets, bans). The daemon\n"
        "sends each tenant only its own events, checked by its token (--token); an\n"
        "administrator sees every tenant's and the daemon's own messages. Each line starts\n"
        "with the event's audit sequence number, the number of its row in the audit file.\n"
        "The daemon keeps its recent events for a watcher that falls behind, up to its\n"
        "events_buffer; watch sees every loss beyond that, prints a 'missed' line, then\n"
        "reads your lost packet events back from the audit and prints them marked 'from\n"
        "audit'. Nothing is dropped silently.\n"
        "\n"
        "Options:\n"
        "  --tenant NAME   only this tenant's events (administrators; NAME or NAME#ID)\n"
        "  --context ID    only this context's packet events\n"
        "  --packet ID     only this packet's events\n"
        "  --state S       only packet events into state S (SUBMITTED, COMPLETED, ...)\n"
        "  --count N       stop after N printed events (default: until interrupted)\n"
        "  --seconds N     stop after N seconds\n"
        "  --json          one JSON object per line: seq, kind (packet, message or gap),\n"
        "                  time_ns, tenant, and for packets packet_id (also as packet),\n"
        "                  context, state, detail,\n"
        "                  recovered; for messages message; for gaps after, before,\n"
        "                  recovered, truncated\n"
        "\n"
        "Exit status: 0 when stopped by --count, --seconds or Ctrl-C; 1 when the daemon\n"
        "refuses (an unknown token); 3 when it cannot be reached.\n";

typedef struct watch_args {
	const char *tenant;
	uint64_t context, packet;
	gs_packet_state state;
	uint64_t count;
	uint32_t seconds;
} watch_args;

static const cli_opt watch_opts[] = {
        {"tenant", CLI_ARG_STR, offsetof(watch_args, tenant)},
        {"context", CLI_ARG_U64, offsetof(watch_args, context)},
        {"packet", CLI_ARG_U64, offsetof(watch_args, packet)},
        {"state", CLI_ARG_PARSE, offsetof(watch_args, state), .parse = cli_parse_state},
        {"count", CLI_ARG_U64, offsetof(watch_args, count)},
        {"seconds", CLI_ARG_U32, offsetof(watch_args, seconds)},
};

static const cli_syntax watch_syntax = {watch_help, CLI_OPTS(watch_opts)};

#define WATCH_READ_TIMEOUT_MS 5000u

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* Does the event pass the filters? Recovered events are the caller's own (own_tenant). */
static bool wanted(const watch_args *a, const gs_watch_event *ev, const char *own_tenant)
{
	if (ev->kind == GS_WATCH_GAP)
		return true;
	const char *tenant = ev->tenant ? ev->tenant : own_tenant;
	if (a->tenant && strcmp(a->tenant, tenant) != 0)
		return false;
	if (ev->kind == GS_WATCH_MESSAGE)
		return !a->context && !a->packet && !a->state;
	return (!a->context || ev->packet.context == a->context) &&
	       (!a->packet || ev->packet.packet == a->packet) &&
	       (!a->state || ev->packet.state == a->state);
}

static void print_json(const gs_watch_event *ev, const char *own_tenant)
{
	json_t *o = json_object();

	json_object_set_new(o, "seq", cli_json_u64(ev->seq));
	if (ev->kind == GS_WATCH_GAP) {
		json_object_set_new(o, "kind", json_string("gap"));
		json_object_set_new(o, "after", cli_json_u64(ev->gap_after));
		json_object_set_new(o, "before", cli_json_u64(ev->gap_before));
		json_object_set_new(o, "recovered", cli_json_u64(ev->gap_recovered));
		json_object_set_new(o, "truncated", json_boolean(ev->gap_truncated));
		if (ev->gap_status)
			json_object_set_new(o, "error",
			                    json_string(gs_status_name(ev->gap_status)));
	} else {
		json_object_set_new(
		        o, "kind", json_string(ev->kind == GS_WATCH_PACKET ? "packet" : "message"));
		json_object_set_new(o, "time_ns", cli_json_u64(ev->time_ns));
		json_object_set_new(o, "tenant", json_string(ev->tenant ? ev->tenant : own_tenant));
	}
	if (ev->kind == GS_WATCH_PACKET) {
		/* packet_id as in history, events and explain; packet as before. */
		json_object_set_new(o, "packet_id", cli_json_u64(ev->packet.packet));
		json_object_set_new(o, "packet", cli_json_u64(ev->packet.packet));
		json_object_set_new(o, "context", cli_json_u64(ev->packet.context));
		json_object_set_new(o, "state",
		                    json_string(gs_packet_state_name(ev->packet.state)));
		json_object_set_new(o, "detail", json_string(ev->packet.detail));
		json_object_set_new(o, "recovered", json_boolean(ev->recovered));
	} else if (ev->kind == GS_WATCH_MESSAGE) {
		json_object_set_new(o, "message", json_string(ev->message));
	}
	char *line = json_dumps(o, JSON_COMPACT);
	if (line)
		printf("%s\n", line);
	free(line);
	json_decref(o);
}

static void print_text(const gs_watch_event *ev, const char *own_tenant)
{
	char when[40];

	if (ev->kind == GS_WATCH_GAP) {
		printf("-- missed events between seq %" PRIu64 " and %" PRIu64
		       " on the event socket: %" PRIu64
		       " of yours read back from the audit%s%s%s\n",
		       ev->gap_after, ev->gap_before, ev->gap_recovered,
		       ev->gap_truncated ? " (the first 100000; see gpusched history for more)"
		                         : "",
		       ev->gap_status ? "; reading back failed: " : "",
		       ev->gap_status ? gs_status_name(ev->gap_status) : "");
		return;
	}
	cli_format_time(ev->time_ns, when, sizeof(when));
	const char *tenant = ev->tenant ? ev->tenant : own_tenant;
	if (ev->kind == GS_WATCH_MESSAGE) {
		printf("%-19" PRIu64 " %s %-10s message  %s\n", ev->seq, when, tenant, ev->message);
		return;
	}
	printf("%-19" PRIu64 " %s %-10s packet %" PRIu64 " (context %" PRIu64 ") %s%s%s%s\n",
	       ev->seq, when, tenant, ev->packet.packet, ev->packet.context,
	       gs_packet_state_name(ev->packet.state), ev->packet.detail[0] ? ": " : "",
	       ev->packet.detail, ev->recovered ? "  (from audit)" : "");
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int cmd_watch(cli *ctx, int argc, char **argv)
{
	watch_args a = {0};
	gs_daemon_info *info = NULL;
	gs_watch *w = NULL;
	int rv;

	rv = cli_start(ctx, argc, argv, &watch_syntax, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_info(ctx->client, &info);
	if (rv != 0)
		return cli_fail(ctx, rv);
	rv = gs_watch_open(ctx->client, &w);
	if (rv != 0) {
		gs_info_free(info);
		return cli_fail(ctx, rv);
	}
	/* A read-back must not hold the loop much past --seconds or a Ctrl-C: a short request
	 * timeout unless --timeout says otherwise. */
	if (ctx->timeout_ms == 0)
		gs_client_set_timeout(ctx->client, WATCH_READ_TIMEOUT_MS);
	g_stop = 0;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	setvbuf(stdout, NULL, _IOLBF, 0);

	uint64_t printed = 0, deadline = a.seconds ? now_ms() + (uint64_t)a.seconds * 1000u : 0;
	rv = CLI_EXIT_OK;
	bool lost_link = false;
	while (!g_stop && (!a.count || printed < a.count) && (!deadline || now_ms() < deadline)) {
		gs_watch_event ev;
		/* Short waits, so Ctrl-C and --seconds are seen promptly. */
		int st = gs_watch_next(w, ctx->client, 200, &ev);
		if (st == GS_ERR_TIMEOUT)
			continue;
		if (st == GS_ERR_TRANSPORT) {
			/* The client reconnects by itself; after a daemon restart the next
			 * answer reports what was missed meanwhile. */
			if (!lost_link)
				cli_warn(ctx, "lost the daemon: %s; still trying",
				         gs_client_message(ctx->client));
			lost_link = true;
			struct timespec pause = {.tv_nsec = 200 * 1000000L}; /* not a hot loop */
			nanosleep(&pause, NULL);
			continue;
		}
		if (st != 0) {
			rv = cli_fail(ctx, st);
			break;
		}
		lost_link = false;
		if (wanted(&a, &ev, info->tenant)) {
			if (ctx->json)
				print_json(&ev, info->tenant);
			else
				print_text(&ev, info->tenant);
			if (ev.kind != GS_WATCH_GAP)
				printed++;
		}
		gs_watch_event_clear(&ev);
	}
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	gs_info_free(info);
	gs_watch_close(w);
	return rv;
}
