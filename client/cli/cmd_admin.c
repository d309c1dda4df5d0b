/*
 * Small commands over single objects: stats, device, sync, tenant (alloc: cmd_alloc.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Parses the positional argument `index` (after options) as a number named `what`. */
/* Reports a failed call's status, or success as {"ok":true} or a line of text. */
static int finish(cli *ctx, int status, const char *done_text)
{
	if (status != 0)
		return cli_fail(ctx, status);
	if (ctx->json)
		cli_json_print(json_pack("{s:b}", "ok", 1));
	else
		printf("%s\n", done_text);
	return CLI_EXIT_OK;
}

/* Reports a created object's id: {"<kind>": id} or a line "<kind> <id>". */
static int report_created(cli *ctx, const char *kind, uint64_t id)
{
	if (ctx->json)
		cli_json_print(json_pack("{s:o}", kind, cli_json_u64(id)));
	else
		printf("%s %" PRIu64 "\n", kind, id);
	return CLI_EXIT_OK;
}

/* The shared shape of "<object> destroy ID": parse one ID, connect, call, report. */
static int destroy_by_id(cli *ctx, int argc, char **argv, const char *help, const char *what,
                         int (*destroy)(gs_client *, uint64_t))
{
	uint64_t id;
	int rv = cli_start_id(ctx, argc, argv, CLI_SIMPLE(help, 1, 1, what), NULL, "ID", &id);
	if (rv != CLI_CONTINUE)
		return rv;
	return finish(ctx, destroy(ctx->client, id), "destroyed");
}

/* ---- stats ------------------------------------------------------------------------------ */

static const char stats_help[] =
        "Usage: gpusched stats [--json]\n"
        "Shows the daemon's request, packet, audit and object counters, the audit's\n"
        "health (ok; failing: submissions are refused; file_gone: the file was removed),\n"
        "and the memory manager's (paging packets, bytes paged, evictions).\n"
        "A tenant that is not an administrator gets its own tenant's counters (its\n"
        "requests, packets, objects and paging) and no audit counters (scope \"tenant\");\n"
        "an administrator the daemon's (scope \"daemon\").\n";

int cmd_stats(cli *ctx, int argc, char **argv)
{
	gs_daemon_stats s;
	char uptime[24];
	int rv;

	rv = cli_start(ctx, argc, argv, CLI_SIMPLE(stats_help, 0, 0, NULL), NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_stats(ctx->client, &s);
	if (rv != 0)
		return cli_fail(ctx, rv);

	const struct {
		const char *name;
		uint64_t value;
		bool daemon_only; /* 0 for a tenant's view: not shown to it */
	} rows[] = {
	        {"requests", s.requests},
	        {"errors", s.errors},
	        {"packets_submitted", s.packets_submitted},
	        {"packets_completed", s.packets_completed},
	        {"packets_faulted", s.packets_faulted},
	        {"packets_cancelled", s.packets_cancelled},
	        {"packets_rejected", s.packets_rejected},
	        {"audit_records", s.audit_records, true},
	        {"audit_commits", s.audit_commits, true},
	        {"devices", s.devices},
	        {"contexts", s.contexts},
	        {"allocations", s.allocations},
	        {"paging_packets", s.paging_packets},
	        {"paging_bytes", s.paging_bytes},
	        {"evictions", s.evictions},
	        {"audit_queued", s.audit_queued, true},
	        {"audit_failed_commits", s.audit_failed_commits, true},
	        {"audit_dropped", s.audit_dropped, true},
	        {"uptime_ns", s.uptime_ns},
	};
	static const char *const health[] = {"ok", "failing", "file_gone"};
	const char *audit_health = s.audit_health >= 0 && s.audit_health < (int)COUNT(health)
	                                   ? health[s.audit_health]
	                                   : "unknown";
	if (ctx->json) {
		json_t *o = json_object();

		for (size_t i = 0; i < COUNT(rows); i++)
			json_object_set_new(o, rows[i].name, cli_json_u64(rows[i].value));
		json_object_set_new(o, "audit_health", json_string(audit_health));
		json_object_set_new(o, "scope", json_string(s.tenant_view ? "tenant" : "daemon"));
		cli_json_print(o);
		return CLI_EXIT_OK;
	}
	printf("%s\n", s.tenant_view
	                       ? "your tenant's counters (the daemon's are for administrators)"
	                       : "the daemon's counters (every tenant's)");
	/* The last row is the uptime, shown as a duration. */
	for (size_t i = 0; i + 1 < COUNT(rows); i++)
		if (!s.tenant_view || !rows[i].daemon_only)
			printf("%-20s %" PRIu64 "\n", rows[i].name, rows[i].value);
	printf("%-20s %s\n", "audit_health", audit_health);
	cli_format_duration(s.uptime_ns, uptime, sizeof(uptime));
	printf("%-20s %s\n", "uptime", uptime);
	return CLI_EXIT_OK;
}

/* ---- device ----------------------------------------------------------------------------- */

static const char device_help[] =
        "Usage: gpusched device create [NAME]\n"
        "       gpusched device destroy ID\n"
        "A device lives in the daemon until it is destroyed (with its contexts, allocations\n"
        "and sync objects), independent of the process that created it.\n"
        "With several hosts (--url repeated), create goes to the least-loaded adapter of all\n"
        "of them (fewest queued packets per engine, then least memory in use) and says\n"
        "which host and adapter it chose.\n";

/* Several hosts: on the least-loaded adapter of all (docs/hosts.md, Placement). */
static int device_create_hosts(cli *ctx, int argc, char **argv)
{
	int rv = cli_hosts_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	size_t host;
	uint32_t adapter;
	uint64_t device;
	int st = gs_hosts_device_create(ctx->hosts, optind < argc ? argv[optind] : "gpusched",
	                                &host, &adapter, &device);
	if (st != 0) {
		cli_warn(ctx, "no host made the device: %s", gs_strerror(st));
		return cli_hosts_report(ctx, cli_exit_code(st));
	}
	const char *url = gs_hosts_url(ctx->hosts, host);
	if (ctx->json)
		cli_json_print(json_pack("{s:o, s:s, s:I}", "device", cli_json_u64(device), "host",
		                         url, "adapter", (json_int_t)adapter));
	else
		printf("device %" PRIu64 " on %s, adapter %" PRIu32
		       " (use --url %s --adapter %" PRIu32 ")\n",
		       device, url, adapter, url, adapter);
	/* Hosts that were down did not take part: said (exit 5), but the device exists. An
	 * adapter that refused and was passed over is only said. */
	bool down = false;
	for (size_t i = 0; i < gs_hosts_count(ctx->hosts); i++) {
		const char *why = gs_hosts_error(ctx->hosts, i);
		if (!why[0])
			continue;
		/* A host that refused the device took part; one that is down, or did not
		 * answer info, did not. */
		bool refused = gs_hosts_client(ctx->hosts, i) && strncmp(why, "info:", 5) != 0;
		down = down || !refused;
		cli_warn(ctx, "%s %s: %s", gs_hosts_url(ctx->hosts, i),
		         refused ? "passed over" : "left out", why);
	}
	return down ? CLI_EXIT_PARTIAL : CLI_EXIT_OK;
}

static int device_create(cli *ctx, int argc, char **argv)
{
	uint64_t device;
	int rv;

	if (ctx->nurls > 1) {
		rv = cli_parse_args(ctx, argc, argv,
		                    CLI_SIMPLE(device_help, 0, 1, "at most a NAME"), NULL);
		return rv != CLI_CONTINUE ? rv : device_create_hosts(ctx, argc, argv);
	}
	rv = cli_start(ctx, argc, argv, CLI_SIMPLE(device_help, 0, 1, "at most a NAME"), NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_device_create(ctx->client, optind < argc ? argv[optind] : "gpusched", &device);
	if (rv != 0)
		return cli_fail(ctx, rv);
	return report_created(ctx, "device", device);
}

static int device_destroy(cli *ctx, int argc, char **argv)
{
	return destroy_by_id(ctx, argc, argv, device_help, "a device ID", gs_device_destroy);
}

int cmd_device(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"create", "create a device", device_create},
	        {"destroy", "destroy a device and everything in it", device_destroy},
	};

	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, device_help);
}

/* ---- context ---------------------------------------------------------------------------- */

static const char context_help[] =
        "Usage: gpusched context show ID [--json]\n"
        "       gpusched context destroy ID\n"
        "show: a context's node, priority and fences. Its n-th accepted packet has fence n, and\n"
        "its packets end in fence order: a packet whose fence is at or below the completed\n"
        "fence has ended (completed, faulted or cancelled). destroy cancels its queued packets.\n";

static int context_show(cli *ctx, int argc, char **argv)
{
	uint64_t id;
	gs_context_status s;
	int rv = cli_start_id(ctx, argc, argv, CLI_SIMPLE(context_help, 1, 1, "a context ID"), NULL,
	                      "ID", &id);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_context_query(ctx->client, id, &s);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json) {
		cli_json_print(json_pack("{s:o, s:I, s:o, s:o, s:I, s:b, s:s, s:I}", "context",
		                         cli_json_u64(s.context), "node", (json_int_t)s.node,
		                         "submitted_fence", cli_json_u64(s.submitted_fence),
		                         "completed_fence", cli_json_u64(s.completed_fence),
		                         "queued", (json_int_t)s.queued, "faulted", s.faulted,
		                         "priority_class", gs_priority_class_name(s.priority_class),
		                         "priority", (json_int_t)s.priority));
		return CLI_EXIT_OK;
	}
	printf("context          %" PRIu64 "\n", s.context);
	printf("node             %" PRIu32 "\n", s.node);
	printf("priority         %s %+" PRId32 "\n", gs_priority_class_name(s.priority_class),
	       s.priority);
	printf("submitted fence  %" PRIu64 "\n", s.submitted_fence);
	printf("completed fence  %" PRIu64 "\n", s.completed_fence);
	printf("queued           %" PRIu32 "%s\n", s.queued, s.faulted ? "  (faulted)" : "");
	return CLI_EXIT_OK;
}

static int context_destroy(cli *ctx, int argc, char **argv)
{
	return destroy_by_id(ctx, argc, argv, context_help, "a context ID", gs_context_destroy);
}

int cmd_context(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"show", "a context's node, priority and fences", context_show},
	        {"destroy", "destroy a context, cancelling its queued packets", context_destroy},
	};

	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, context_help);
}

/* ---- admin: drain and status ------------------------------------------------------------ */

static const char admin_help[] =
        "Usage: gpusched admin status [--json]\n"
        "       gpusched admin reload [--json]\n"
        "       gpusched admin drain [--timeout MS] [--json]\n"
        "Administrators only.\n"
        "status: the daemon's state (serving, draining or stopping), version, uptime, tenants\n"
        "and packets in flight; while draining, the time left and the packets it began with.\n"
        "reload: the daemon reads its --config file again (as on SIGHUP) and applies what\n"
        "changed (tenants, shares, limits, tokens, time slices) without dropping a\n"
        "connection or a packet; a file that does not load, or that changes what only a\n"
        "restart can (listeners, the audit file, TLS, adapters' nodes, segments, backends),\n"
        "is refused whole, and nothing changes. Prints what changed.\n"
        "drain: the step before an upgrade. The daemon takes no new devices or contexts\n"
        "(UNAVAILABLE), lets the work of the existing ones finish, cancels what is still\n"
        "queued at the timeout (default 60000 ms; at most the daemon's max_wait_ms), reports,\n"
        "and stops (exit 0). Prints the report: packets at the start, finished, cancelled.\n"
        "\n"
        "Exit status: 0 done; 1 a daemon error (BUSY: a drain is under way); 3 no connection.\n";

static int admin_status(cli *ctx, int argc, char **argv)
{
	gs_admin_status s;
	char up[24];
	int rv = cli_start(ctx, argc, argv, CLI_SIMPLE(admin_help, 0, 0, "no argument"), NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_admin_status_get(ctx->client, &s);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json) {
		json_t *o = json_pack("{s:s, s:s, s:o, s:I, s:o}", "state", s.state, "version",
		                      s.version, "uptime_ns", cli_json_u64(s.uptime_ns), "tenants",
		                      (json_int_t)s.tenants, "packets_in_flight",
		                      cli_json_u64(s.packets_in_flight));
		if (strcmp(s.state, "draining") == 0) {
			json_object_set_new(o, "drain_left_ms", json_integer(s.drain_left_ms));
			json_object_set_new(o, "drain_packets_at_start",
			                    cli_json_u64(s.drain_packets_at_start));
		}
		cli_json_print(o);
		return CLI_EXIT_OK;
	}
	cli_format_duration(s.uptime_ns, up, sizeof(up));
	printf("state              %s\n", s.state);
	printf("version            %s\n", s.version);
	printf("uptime             %s\n", up);
	printf("tenants            %" PRIu32 "\n", s.tenants);
	printf("packets in flight  %" PRIu64 "\n", s.packets_in_flight);
	if (strcmp(s.state, "draining") == 0)
		printf("drain              %" PRIu32 " ms left, %" PRIu64 " packets at its start\n",
		       s.drain_left_ms, s.drain_packets_at_start);
	return CLI_EXIT_OK;
}

static int admin_reload(cli *ctx, int argc, char **argv)
{
	uint32_t changes = 0;
	char report[1024];
	int rv = cli_start(ctx, argc, argv, CLI_SIMPLE(admin_help, 0, 0, "no argument"), NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_admin_reload(ctx->client, &changes, report, sizeof report);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(
		        json_pack("{s:I, s:s}", "changes", (json_int_t)changes, "report", report));
	else
		printf("%" PRIu32 " change%s: %s\n", changes, changes == 1 ? "" : "s", report);
	return CLI_EXIT_OK;
}

static int admin_drain(cli *ctx, int argc, char **argv)
{
	static const cli_opt opts[] = {{"timeout", CLI_ARG_U32, 0, .min = 1, .max = 86400000}};
	static const cli_syntax syntax = {admin_help, CLI_OPTS(opts), 0, 0, "no argument"};
	uint32_t timeout_ms = 60000;
	gs_drain_report r;
	int rv = cli_start(ctx, argc, argv, &syntax, &timeout_ms);
	if (rv != CLI_CONTINUE)
		return rv;
	if (isatty(STDERR_FILENO))
		fprintf(stderr, "draining (at most %" PRIu32 " ms)...\n", timeout_ms);
	rv = gs_admin_drain(ctx->client, timeout_ms, &r);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json) {
		cli_json_print(json_pack("{s:o, s:o, s:o, s:o, s:I, s:b}", "packets_at_start",
		                         cli_json_u64(r.packets_at_start), "packets_finished",
		                         cli_json_u64(r.packets_finished), "packets_cancelled",
		                         cli_json_u64(r.packets_cancelled), "packets_running",
		                         cli_json_u64(r.packets_running), "waited_ms",
		                         (json_int_t)r.waited_ms, "timed_out", r.timed_out));
		return CLI_EXIT_OK;
	}
	printf("drained in %" PRIu32 " ms: %" PRIu64 " packets at the start, %" PRIu64
	       " finished, %" PRIu64 " cancelled at the timeout, %" PRIu64
	       " still running (given the shutdown grace); the daemon stops\n",
	       r.waited_ms, r.packets_at_start, r.packets_finished, r.packets_cancelled,
	       r.packets_running);
	return CLI_EXIT_OK;
}

int cmd_admin(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"status", "the daemon's state, tenants and packets in flight", admin_status},
	        {"reload", "read the configuration file again and apply it", admin_reload},
	        {"drain", "finish the work, take no more, stop: before an upgrade", admin_drain},
	};

	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, admin_help);
}

/* ---- sync ------------------------------------------------------------------------------- */

static const char sync_help[] =
        "Usage: gpusched sync create DEVICE [INITIAL]\n"
        "       gpusched sync signal ID VALUE\n"
        "       gpusched sync wait ID VALUE [--timeout MS]\n"
        "       gpusched sync destroy ID\n"
        "Monitored fences: a value that only grows. signal sets it from the CPU (it must not go\n"
        "backwards); wait returns once it is >= VALUE, or fails with TIMEOUT (default 30000 ms).\n";

static const char *const id_value[] = {"ID", "VALUE"};

static int sync_create(cli *ctx, int argc, char **argv)
{
	uint64_t device, initial = 0, sync;
	int rv;

	rv = cli_start_ids(ctx, argc, argv, CLI_SIMPLE(sync_help, 1, 2, "DEVICE [INITIAL]"), NULL,
	                   (const char *[]){"DEVICE", "INITIAL"},
	                   (uint64_t *[]){&device, &initial});
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_sync_create(ctx->client, device, initial, &sync);
	if (rv != 0)
		return cli_fail(ctx, rv);
	return report_created(ctx, "sync", sync);
}

static int sync_signal(cli *ctx, int argc, char **argv)
{
	uint64_t sync, value;
	int rv;

	rv = cli_start_ids(ctx, argc, argv, CLI_SIMPLE(sync_help, 2, 2, "ID VALUE"), NULL, id_value,
	                   (uint64_t *[]){&sync, &value});
	if (rv != CLI_CONTINUE)
		return rv;
	return finish(ctx, gs_sync_signal(ctx->client, sync, value), "signalled");
}

static int sync_wait(cli *ctx, int argc, char **argv)
{
	/* The parse state is the timeout itself. */
	static const cli_opt opts[] = {{"timeout", CLI_ARG_U32, 0}};
	static const cli_syntax syntax = {sync_help, CLI_OPTS(opts), 2, 2, "ID VALUE"};
	uint32_t timeout_ms = GS_DEFAULT_TIMEOUT_MS;
	uint64_t sync, value, current = 0;
	int rv;

	rv = cli_start_ids(ctx, argc, argv, &syntax, &timeout_ms, id_value,
	                   (uint64_t *[]){&sync, &value});
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_sync_wait(ctx->client, sync, value, timeout_ms, &current);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(json_pack("{s:o}", "value", cli_json_u64(current)));
	else
		printf("sync %" PRIu64 " value %" PRIu64 "\n", sync, current);
	return CLI_EXIT_OK;
}

static int sync_destroy(cli *ctx, int argc, char **argv)
{
	return destroy_by_id(ctx, argc, argv, sync_help, "a sync ID", gs_sync_destroy);
}

int cmd_sync(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"create", "create a sync object", sync_create},
	        {"signal", "set its value from the CPU", sync_signal},
	        {"wait", "wait for a value", sync_wait},
	        {"destroy", "destroy a sync object", sync_destroy},
	};

	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, sync_help);
}

/* ---- tenant ----------------------------------------------------------------------------- */

static const char tenant_help[] =
        "Usage: gpusched tenant ls [--json]\n"
        "       gpusched tenant create NAME [--kind process|vm]\n"
        "                              [--share N] [--priority-ceiling C] [--memory-quota BYTES]\n"
        "                              [--context-limit N] [--allocation-limit N]\n"
        "                              [--max-requests-per-second N] [--max-message BYTES]\n"
        "                              [--packet-limit N] [--sync-limit N] [--admin] [--token T]\n"
        "       gpusched tenant set NAME [--share N] [--priority-ceiling C]\n"
        "                              [--memory-quota BYTES] [--context-limit N]\n"
        "                              [--allocation-limit N] [--max-requests-per-second N]\n"
        "                              [--max-message BYTES] [--packet-limit N]\n"
        "                              [--sync-limit N] [--admin | --no-admin]\n"
        "                              [--ban | --unban]\n"
        "              gpusched tenant rm NAME [--release-devices]\n"
        "Tenant administration; the daemon answers only an admin token (PERMISSION_DENIED\n"
        "otherwise). create prints the new tenant's token (chosen by the daemon unless --token\n"
        "is given here, after the subcommand). set changes only the settings given, at once (a\n"
        "new share applies to the tenant's queued work); 0 means no limit (for --max-message:\n"
        "the default, 128 KiB for a vm, else the daemon's max_message; for --packet-limit and\n"
        "--sync-limit: the daemon's max_queued_packets and max_syncs). How much of an engine a\n"
        "share buys is the adapter's share policy (gpusched info shows it). A vm tenant's guest\n"
        "processes reach the daemon through gpusched-relay. --priority-ceiling takes a class\n"
        "name (IDLE, BELOW_NORMAL, NORMAL, ABOVE_NORMAL, HIGH, REALTIME) or 0..5 (default\n"
        "NORMAL); --memory-quota bytes or a size with a unit (64M, 1GiB). --ban bans the\n"
        "tenant (as too many GPU timeouts do: its work is cancelled, its requests answered\n"
        "BANNED); --unban lifts a ban. A ban survives restarts until it is lifted. rm refuses\n"
        "a tenant that still has devices (BUSY) unless --release-devices: its devices are\n"
        "then destroyed first, with all in them (queued packets cancelled), as for a pod\n"
        "that is gone.\n";

static json_t *tenant_json(const void *tenant)
{
	const gs_tenant *t = tenant;

	return json_pack(
	        "{s:s, s:s, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b}", "name",
	        t->name, "kind", gs_tenant_kind_name(t->kind), "share", (json_int_t)t->share,
	        "priority_ceiling", (json_int_t)t->priority_ceiling, "memory_quota",
	        cli_json_u64(t->memory_quota), "context_limit", (json_int_t)t->context_limit,
	        "allocation_limit", (json_int_t)t->allocation_limit, "max_requests_per_second",
	        (json_int_t)t->max_requests_per_second, "max_message", (json_int_t)t->max_message,
	        "packet_limit", (json_int_t)t->packet_limit, "sync_limit",
	        (json_int_t)t->sync_limit, "admin", t->admin, "banned", t->banned);
}

static void print_tenants(const void *items, size_t n)
{
	const gs_tenant *t = items;

	char quota[32];

	printf("%-20s %-8s %6s %-13s %10s %8s %s\n", "NAME", "KIND", "SHARE", "CEILING", "QUOTA",
	       "CONTEXTS", "FLAGS");
	for (size_t i = 0; i < n; i++) {
		if (t[i].memory_quota)
			cli_format_bytes(t[i].memory_quota, quota, sizeof(quota));
		else
			snprintf(quota, sizeof(quota), "unlimited");
		printf("%-20s %-8s %6" PRIu32 " %-13s %10s %8" PRIu32 " %s%s\n", t[i].name,
		       gs_tenant_kind_name(t[i].kind), t[i].share,
		       gs_priority_class_name(t[i].priority_ceiling), quota, t[i].context_limit,
		       t[i].admin ? "admin " : "", t[i].banned ? "banned" : "");
	}
}

static int tenant_ls(cli *ctx, int argc, char **argv)
{
	gs_tenant *t = NULL;
	size_t n = 0;
	int rv;

	rv = cli_start(ctx, argc, argv, CLI_SIMPLE(tenant_help, 0, 0, NULL), NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_tenant_list(ctx->client, &t, &n);
	rv = cli_list_result(ctx, rv, t, n, sizeof(*t), tenant_json, print_tenants);
	gs_tenant_list_free(t, n);
	return rv;
}

/* What tenant create and tenant set parse: the tenant, the token to give it (NULL: the
 * daemon's), and the gs_tenant_field bits of the settings given. */
typedef struct tenant_args {
	gs_tenant t;
	const char *token;
	bool no_admin;
	bool unban; /* --unban: banned false (--ban sets t.banned) */
	unsigned fields;
} tenant_args;

static int parse_kind(cli *ctx, const char *arg, void *field)
{
	gs_tenant_kind *kind = field;

	if (strcasecmp(arg, "process") == 0)
		*kind = GS_TENANT_PROCESS;
	else if (strcasecmp(arg, "vm") == 0)
		*kind = GS_TENANT_VM;
	else
		return cli_usage(ctx, "--kind: 'process' or 'vm', not '%s'", arg);
	return 0;
}

/* An option of tenant create and tenant set: the gs_tenant member it sets, and its bit in
 * tenant_args.fields when given. */
#define TENANT_SETTING(name, kind, member, bit)                                                    \
	{                                                                                          \
		(name), (kind), offsetof(tenant_args, t.member), CLI_GIVEN(tenant_args, fields),   \
		        .given_bits = (bit)                                                        \
	}
#define TENANT_PARSED(name, member, bit, fn)                                                       \
	{                                                                                          \
		(name), CLI_ARG_PARSE, offsetof(tenant_args, t.member),                            \
		        CLI_GIVEN(tenant_args, fields), .given_bits = (bit), .parse = (fn)         \
	}
#define TENANT_SETTINGS                                                                            \
	TENANT_SETTING("share", CLI_ARG_U32, share, GS_TENANT_SHARE),                              \
	        TENANT_PARSED("priority-ceiling", priority_ceiling, GS_TENANT_PRIORITY_CEILING,    \
	                      cli_parse_priority_class),                                           \
	        TENANT_PARSED("memory-quota", memory_quota, GS_TENANT_MEMORY_QUOTA,                \
	                      cli_parse_size),                                                     \
	        TENANT_SETTING("context-limit", CLI_ARG_U32, context_limit,                        \
	                       GS_TENANT_CONTEXT_LIMIT),                                           \
	        TENANT_SETTING("allocation-limit", CLI_ARG_U32, allocation_limit,                  \
	                       GS_TENANT_ALLOCATION_LIMIT),                                        \
	        TENANT_SETTING("max-requests-per-second", CLI_ARG_U32, max_requests_per_second,    \
	                       GS_TENANT_MAX_REQUESTS_PER_SECOND),                                 \
	        TENANT_SETTING("max-message", CLI_ARG_U32, max_message, GS_TENANT_MAX_MESSAGE),    \
	        TENANT_SETTING("packet-limit", CLI_ARG_U32, packet_limit, GS_TENANT_PACKET_LIMIT), \
	        TENANT_SETTING("sync-limit", CLI_ARG_U32, sync_limit, GS_TENANT_SYNC_LIMIT),       \
	        TENANT_SETTING("admin", CLI_SET_BOOL, admin, GS_TENANT_ADMIN)

static const cli_opt tenant_opts[] = {
        {"kind", CLI_ARG_PARSE, offsetof(tenant_args, t.kind), .parse = parse_kind},
        TENANT_SETTINGS,
        {"token", CLI_ARG_STR, offsetof(tenant_args, token)},
};

static const cli_opt tenant_set_opts[] = {
        TENANT_SETTINGS,
        {"no-admin", CLI_SET_BOOL, offsetof(tenant_args, no_admin), CLI_GIVEN(tenant_args, fields),
         .given_bits = GS_TENANT_ADMIN},
        {"ban", CLI_SET_BOOL, offsetof(tenant_args, t.banned), CLI_GIVEN(tenant_args, fields),
         .given_bits = GS_TENANT_BANNED},
        {"unban", CLI_SET_BOOL, offsetof(tenant_args, unban), CLI_GIVEN(tenant_args, fields),
         .given_bits = GS_TENANT_BANNED},
};

static const cli_syntax tenant_set_syntax = {tenant_help, CLI_OPTS(tenant_set_opts), 1, 1,
                                             "one tenant NAME"};

static int tenant_set(cli *ctx, int argc, char **argv)
{
	tenant_args a = {0};
	int rv = cli_parse_args(ctx, argc, argv, &tenant_set_syntax, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	if (a.t.admin && a.no_admin)
		return cli_usage(ctx, "--admin and --no-admin: give one");
	if (a.t.banned && a.unban)
		return cli_usage(ctx, "--ban and --unban: give one");
	if (!a.fields)
		return cli_usage(ctx, "tenant set: give at least one setting to change");
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	return finish(ctx, gs_tenant_update(ctx->client, argv[optind], &a.t, a.fields), "updated");
}

static const cli_syntax tenant_create_syntax = {tenant_help, CLI_OPTS(tenant_opts), 1, 1,
                                                "one tenant NAME"};

static int tenant_create(cli *ctx, int argc, char **argv)
{
	tenant_args a = {.t = {.share = 1, .priority_ceiling = 2}};
	char *issued;
	int rv;

	rv = cli_parse_args(ctx, argc, argv, &tenant_create_syntax, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	a.t.name = argv[optind];
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	rv = gs_tenant_create(ctx->client, &a.t, a.token, &issued);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(json_pack("{s:s, s:s}", "name", a.t.name, "token", issued));
	else
		printf("tenant %s token %s\n", a.t.name, issued);
	free(issued);
	return CLI_EXIT_OK;
}

typedef struct tenant_rm_args {
	bool release_devices;
} tenant_rm_args;

static int tenant_rm(cli *ctx, int argc, char **argv)
{
	static const cli_opt opts[] = {
	        {"release-devices", CLI_SET_BOOL, offsetof(tenant_rm_args, release_devices)},
	};
	static const cli_syntax syntax = {tenant_help, CLI_OPTS(opts), 1, 1, "one tenant NAME"};
	tenant_rm_args a = {0};
	int rv = cli_start(ctx, argc, argv, &syntax, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	return finish(ctx,
	              a.release_devices ? gs_tenant_destroy_release(ctx->client, argv[optind])
	                                : gs_tenant_destroy(ctx->client, argv[optind]),
	              "destroyed");
}

int cmd_tenant(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"ls", "list tenants", tenant_ls},
	        {"create", "create a tenant", tenant_create},
	        {"set", "change a tenant's settings now", tenant_set},
	        {"rm", "destroy a tenant", tenant_rm},
	};

	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, tenant_help);
}
