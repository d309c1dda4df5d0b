/*
 * gpusched history / events: the audit record of packets.
 */
#include <inttypes.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>

#include "cli.h"

static const char history_help[] =
        "Usage: gpusched history [--since T] [--until T] [--context ID] [--device ID]\n"
        "                        [--state S] [--node N] [--allocation ID] [--paging]\n"
        "                        [--flags F] [--fence N] [--tenant NAME] [--oldest-first]\n"
        "                        [--limit N] [--before ID | --after ID] [--json]\n"
        "Lists packets from the daemon's audit record in the order they were submitted,\n"
        "newest first.\n"
        "\n"
        "Options:\n"
        "  --since T         only packets submitted at or after T\n"
        "  --until T         only packets submitted before T\n"
        "                    T: a duration back from now (90s, 10m, 2h, 1d), an ISO 8601\n"
        "                    time (2026-11-24T09:30:00, local; add Z or +01:00 for UTC or an\n"
        "                    offset), @SECONDS since the Unix epoch, or now\n"
        "  --context ID      only this context's packets\n"
        "  --device ID       only this device's packets\n"
        "  --state S         only packets now in state S: SUBMITTED, READY, RUNNING,\n"
        "                    COMPLETED, FAULTED, ABORTED, PREEMPTED, RESUBMITTED, CANCELLED,\n"
        "                    REJECTED (any case)\n"
        "  --node N          only packets of node N (zero-based)\n"
        "  --allocation ID   only packets that listed allocation ID, and the paging packets\n"
        "                    that moved it\n"
        "  --paging          only the memory manager's packets (flag Paging or ContextSwitch)\n"
        "  --flags F         only packets with any of these submit flags (names joined by\n"
        "                    commas, e.g. Present,Flip, or a number)\n"
        "  --fence N         only the packet with fence N (with --context: of that context)\n"
        "  --tenant NAME     another tenant's history (administrators only)\n"
        "  --oldest-first    oldest first\n"
        "  --limit N         at most N packets (default 100, at most 10000); a page that\n"
        "                    reaches it says so on stderr, with the cursor of the next one\n"
        "  --before ID       the next page newest first: packets submitted before packet ID\n"
        "  --after ID        the next page oldest first: packets submitted after packet ID\n"
        "                    (pass the last PACKET of a page; rows added meanwhile never\n"
        "                    shift the pages still to come)\n"
        "  --json            an array of objects: packet_id, context, device, node, fence,\n"
        "                    submit_flags (raw value), submit_flag_names, patch_flags, state,\n"
        "                    submitted_ns, ready_ns, started_ns, completed_ns, preemptions,\n"
        "                    resubmissions, dma_size, allocation_count, patch_count, result,\n"
        "                    tenant\n"
        "\n"
        "Columns: WAIT is submitted -> started, RUN is started -> completed.\n";

static const char events_help[] = "Usage: gpusched events PACKET [--json]\n"
                                  "Lists every state change of one packet, oldest first.\n";

static const cli_opt history_opts[] = {
        {"since", CLI_ARG_PARSE, offsetof(gs_history_filter, since_ns), .parse = cli_parse_time},
        {"until", CLI_ARG_PARSE, offsetof(gs_history_filter, until_ns), .parse = cli_parse_time},
        {"flags", CLI_ARG_PARSE, offsetof(gs_history_filter, flags_mask),
         .parse = cli_parse_submit_flags},
        {"fence", CLI_ARG_U64, offsetof(gs_history_filter, fence)},
        {"tenant", CLI_ARG_STR, offsetof(gs_history_filter, tenant)},
        {"oldest-first", CLI_SET_BOOL, offsetof(gs_history_filter, oldest_first)},
        {"after", CLI_ARG_U64, offsetof(gs_history_filter, after_packet)},
        {"context", CLI_ARG_U64, offsetof(gs_history_filter, context)},
        {"device", CLI_ARG_U64, offsetof(gs_history_filter, device)},
        {"state", CLI_ARG_PARSE, offsetof(gs_history_filter, state), .parse = cli_parse_state},
        {"node", CLI_ARG_U32, offsetof(gs_history_filter, node),
         .given = CLI_GIVEN(gs_history_filter, match_node)},
        {"limit", CLI_ARG_U32, offsetof(gs_history_filter, limit), .min = 1, .max = 10000},
        {"before", CLI_ARG_U64, offsetof(gs_history_filter, before_packet)},
        {"allocation", CLI_ARG_U64, offsetof(gs_history_filter, allocation)},
        {"paging", CLI_SET_BOOL, offsetof(gs_history_filter, paging)},
};

static const cli_syntax history_syntax = {history_help, CLI_OPTS(history_opts)};

static json_t *record_json(const void *record)
{
	const gs_packet_record *r = record;
	json_t *o = json_object();

	json_object_set_new(o, "packet_id", cli_json_u64(r->packet));
	json_object_set_new(o, "context", cli_json_u64(r->context));
	json_object_set_new(o, "device", cli_json_u64(r->device));
	json_object_set_new(o, "node", json_integer(r->node));
	json_object_set_new(o, "fence", cli_json_u64(r->fence));
	json_object_set_new(o, "submit_flags", json_integer(r->submit_flags));
	json_object_set_new(o, "submit_flag_names",
	                    cli_json_flag_names(gs_submit_flag_names, r->submit_flags));
	json_object_set_new(o, "patch_flags", json_integer(r->patch_flags));
	json_object_set_new(o, "state", json_string(gs_packet_state_name(r->state)));
	json_object_set_new(o, "submitted_ns", cli_json_u64(r->submitted_ns));
	json_object_set_new(o, "ready_ns", cli_json_u64(r->ready_ns));
	json_object_set_new(o, "started_ns", cli_json_u64(r->started_ns));
	json_object_set_new(o, "completed_ns", cli_json_u64(r->completed_ns));
	json_object_set_new(o, "preemptions", json_integer(r->preemptions));
	json_object_set_new(o, "resubmissions", json_integer(r->resubmissions));
	json_object_set_new(o, "dma_size", json_integer(r->dma_size));
	json_object_set_new(o, "allocation_count", json_integer(r->allocation_count));
	json_object_set_new(o, "patch_count", json_integer(r->patch_count));
	json_object_set_new(o, "result", json_string(r->result));
	json_object_set_new(o, "tenant", json_string(r->tenant));
	json_object_set_new(o, "dispatches", json_string(r->dispatches ? r->dispatches : ""));
	return o;
}

/* Difference of two daemon timestamps, 0 ("-") unless both were reached in order. */
static uint64_t span(uint64_t from, uint64_t to)
{
	return from && to >= from ? to - from : 0;
}

static void print_header(void)
{
	/* Handles and packet ids are opaque values below 2^53: up to 16 digits; a fence counts
	 * its context's packets. */
	printf("%-16s %-16s %-4s %-7s %-11s %-23s %10s %10s %-4s %s\n", "PACKET", "CONTEXT", "NODE",
	       "FENCE", "STATE", "SUBMITTED", "WAIT", "RUN", "PRE", "FLAGS");
}

static void print_row(const gs_packet_record *r)
{
	char when[40], wait[24], run[24], flags[320];

	cli_format_time(r->submitted_ns, when, sizeof(when));
	cli_format_duration(span(r->submitted_ns, r->started_ns), wait, sizeof(wait));
	cli_format_duration(span(r->started_ns, r->completed_ns), run, sizeof(run));
	cli_format_flags(gs_submit_flag_names, r->submit_flags, flags, sizeof(flags));
	printf("%-16" PRIu64 " %-16" PRIu64 " %-4" PRIu32 " %-7" PRIu64
	       " %-11s %-23s %10s %10s %-4" PRIu32 " %s%s%s\n",
	       r->packet, r->context, r->node, r->fence, gs_packet_state_name(r->state), when, wait,
	       run, r->preemptions, flags, r->result[0] ? "  " : "", r->result);
	/* The kernels a packet ran, under its row. */
	if (r->dispatches && r->dispatches[0])
		printf("    %s\n", r->dispatches);
}

static void print_records(const void *items, size_t n)
{
	const gs_packet_record *recs = items;

	print_header();
	for (size_t i = 0; i < n; i++)
		print_row(&recs[i]);
	if (n == 0)
		printf("(no packets)\n");
}

/* Several hosts: their packets merged in submission order, each row naming its host. */
static int history_hosts(cli *ctx, const gs_history_filter *filter)
{
	if (filter->before_packet || filter->after_packet)
		return cli_usage(
		        ctx, "--before and --after page one daemon's history (a packet id "
		             "is its host's): with several hosts, page with --since and --until");
	int rv = cli_hosts_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	gs_packet_record *recs;
	uint32_t *hosts;
	size_t n;
	int st = gs_hosts_history(ctx->hosts, filter, &recs, &hosts, &n);
	if (st != 0) {
		rv = cli_exit_code(st);
		cli_warn(ctx, "no host answered: %s", gs_strerror(st));
		return cli_hosts_report(ctx, rv);
	}
	if (ctx->json) {
		json_t *a = json_array();
		for (size_t i = 0; i < n; i++) {
			json_t *o = record_json(&recs[i]);
			json_object_set_new(o, "host",
			                    json_string(gs_hosts_url(ctx->hosts, hosts[i])));
			json_array_append_new(a, o);
		}
		cli_json_print(a);
	} else {
		for (size_t i = 0; i < gs_hosts_count(ctx->hosts); i++)
			printf("host %zu  %s%s\n", i, gs_hosts_url(ctx->hosts, i),
			       gs_hosts_client(ctx->hosts, i) && !gs_hosts_error(ctx->hosts, i)[0]
			               ? ""
			               : "  (left out)");
		printf("%-4s ", "HOST");
		print_header();
		for (size_t i = 0; i < n; i++) {
			printf("%-4" PRIu32 " ", hosts[i]);
			print_row(&recs[i]);
		}
		if (n == 0)
			printf("(no packets)\n");
	}
	if (n > 0 && n == (filter->limit ? filter->limit : 100)) {
		/* The next page by time, to the nanosecond (a cursor is one host's), including
		 * the last packet's time: packets of that very nanosecond on another host may
		 * not have fit, so they come again rather than never. */
		uint64_t t = recs[n - 1].submitted_ns + (filter->oldest_first ? 0 : 1);
		time_t secs = (time_t)(t / 1000000000u);
		struct tm tm;
		char when[64] = "?";
		if (gmtime_r(&secs, &tm))
			snprintf(when + strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm),
			         sizeof(when) - 19, ".%09" PRIu64 "Z", t % 1000000000u);
		cli_warn(ctx,
		         "%zu packets, the limit (--limit, at most 10000): there may be more; the "
		         "next page: --%s %s (it starts with the packets of this page's last "
		         "nanosecond)",
		         n, filter->oldest_first ? "since" : "until", when);
	}
	gs_hosts_history_free(recs, hosts, n);
	return cli_hosts_report(ctx, CLI_EXIT_OK);
}

int cmd_history(cli *ctx, int argc, char **argv)
{
	gs_history_filter filter = {0};
	gs_packet_record *recs = NULL;
	size_t n = 0;
	int rv;

	rv = cli_parse_args(ctx, argc, argv, &history_syntax, &filter);
	if (rv == CLI_CONTINUE)
		rv = cli_check_range(ctx, filter.since_ns, filter.until_ns);
	if (rv != CLI_CONTINUE)
		return rv;
	if (filter.before_packet && filter.after_packet)
		return cli_usage(ctx, "--before and --after are two cursors: give one");
	if (ctx->nurls > 1)
		return history_hosts(ctx, &filter);
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	rv = gs_history(ctx->client, &filter, &recs, &n);
	int st = rv;
	rv = cli_list_result(ctx, rv, recs, n, sizeof(*recs), record_json, print_records);
	/* A full page is never cut silently: say so (on stderr, so --json stays an array) and
	 * how to get the next one. */
	if (st == 0 && n > 0 && n == (filter.limit ? filter.limit : 100))
		cli_warn(ctx,
		         "%zu packets, the limit (--limit, at most 10000): there may be more; the "
		         "next"
		         " page: --%s %" PRIu64,
		         n, filter.oldest_first ? "after" : "before", recs[n - 1].packet);
	gs_history_free(recs, n);
	return rv;
}

static json_t *event_json(const void *event)
{
	const gs_packet_event *e = event;

	return json_pack("{s:o, s:o, s:s, s:o, s:s}", "seq", cli_json_u64(e->seq), "packet_id",
	                 cli_json_u64(e->packet), "state", gs_packet_state_name(e->state),
	                 "time_ns", cli_json_u64(e->time_ns), "detail", e->detail);
}

static void print_events(const void *items, size_t n)
{
	const gs_packet_event *ev = items;

	char when[40];

	printf("%-19s %-23s %-11s %s\n", "SEQ", "TIME", "STATE", "DETAIL");
	for (size_t i = 0; i < n; i++) {
		cli_format_time(ev[i].time_ns, when, sizeof(when));
		printf("%-19" PRIu64 " %-23s %-11s %s\n", ev[i].seq, when,
		       gs_packet_state_name(ev[i].state), ev[i].detail);
	}
	if (n == 0)
		printf("(no events)\n");
}

int cmd_events(cli *ctx, int argc, char **argv)
{
	gs_packet_event *ev = NULL;
	uint64_t packet;
	size_t n = 0;
	int rv;

	rv = cli_start_id(ctx, argc, argv, CLI_SIMPLE(events_help, 1, 1, "one PACKET id"), NULL,
	                  "PACKET", &packet);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_packet_events(ctx->client, packet, &ev, &n);
	rv = cli_list_result(ctx, rv, ev, n, sizeof(*ev), event_json, print_events);
	gs_packet_events_free(ev, n);
	return rv;
}

/* ---- explain ---------------------------------------------------------------------------- */

static const char explain_help[] =
        "Usage: gpusched explain PACKET [--tenant NAME] [--json]\n"
        "Prints one packet's whole life from the audit record: every state change with the\n"
        "time since submission, how long the state before it lasted, and the reason the\n"
        "daemon recorded: what a READY waited for (sync objects and the packet that last\n"
        "signalled them, paging moves, the packets it queued behind and whose context went\n"
        "first), who preempted it or that its quantum expired, which engine reset aborted it\n"
        "and whose packet caused it, and why it ended. Then the memory manager's moves made\n"
        "for it (or by it, for a paging packet), and a summary of its waiting and running.\n"
        "\n"
        "Options:\n"
        "  --tenant NAME   another tenant's packet (administrators only)\n"
        "  --json          {packet, events: [{seq, state, time_ns, offset_ns, after_ns,\n"
        "                  detail}], moves, waited_ns, ran_ns}\n";

typedef struct explain_args {
	const char *tenant;
} explain_args;

static const cli_opt explain_opts[] = {
        {"tenant", CLI_ARG_STR, offsetof(explain_args, tenant)},
};

/* How the time before state `to` is called: running until it, or waiting. */
static bool ran_before(const gs_packet_event *ev, size_t i)
{
	return i > 0 && ev[i - 1].state == GS_PACKET_RUNNING;
}

static void explain_json(const gs_explanation *e, uint64_t waited, uint64_t ran)
{
	json_t *evs = json_array();
	uint64_t t0 = e->event_count ? e->events[0].time_ns : 0;
	for (size_t i = 0; i < e->event_count; i++) {
		const gs_packet_event *v = &e->events[i];
		json_array_append_new(
		        evs,
		        json_pack("{s:o, s:s, s:o, s:o, s:o, s:s}", "seq", cli_json_u64(v->seq),
		                  "state", gs_packet_state_name(v->state), "time_ns",
		                  cli_json_u64(v->time_ns), "offset_ns",
		                  cli_json_u64(span(t0, v->time_ns)), "after_ns",
		                  cli_json_u64(i ? span(e->events[i - 1].time_ns, v->time_ns) : 0),
		                  "detail", v->detail));
	}
	cli_json_print(json_pack(
	        "{s:o, s:o, s:o, s:o, s:o}", "packet", record_json(e->packet), "events", evs,
	        "moves", cli_json_array(e->moves, e->move_count, sizeof(*e->moves), cli_json_move),
	        "waited_ns", cli_json_u64(waited), "ran_ns", cli_json_u64(ran)));
}

static void explain_text(const gs_explanation *e, uint64_t waited, uint64_t ran)
{
	const gs_packet_record *r = e->packet;
	char flags[320], at[24], len[24], w[24], rn[24];

	cli_format_flags(gs_submit_flag_names, r->submit_flags, flags, sizeof(flags));
	printf("packet %" PRIu64 ": context %" PRIu64 ", device %" PRIu64 ", node %" PRIu32
	       ", fence %" PRIu64 ", %s, flags %s\n",
	       r->packet, r->context, r->device, r->node, r->fence, gs_packet_state_name(r->state),
	       flags);
	printf("  %-12s %-11s %-22s %s\n", "AT", "STATE", "AFTER", "WHY");
	uint64_t t0 = e->event_count ? e->events[0].time_ns : 0;
	for (size_t i = 0; i < e->event_count; i++) {
		const gs_packet_event *v = &e->events[i];
		char after[40] = "";
		cli_format_duration(span(t0, v->time_ns), at, sizeof(at));
		if (i) {
			cli_format_duration(span(e->events[i - 1].time_ns, v->time_ns), len,
			                    sizeof(len));
			snprintf(after, sizeof(after), "%s %s",
			         ran_before(e->events, i) ? "ran" : "waited", len);
		}
		printf("  +%-11s %-11s %-22s %s\n", i ? at : "0", gs_packet_state_name(v->state),
		       after, v->detail);
	}
	cli_format_duration(waited, w, sizeof(w));
	cli_format_duration(ran, rn, sizeof(rn));
	printf("waited %s, ran %s; %" PRIu32 " preemptions, %" PRIu32 " resubmissions, %zu moves\n",
	       w, rn, r->preemptions, r->resubmissions, e->move_count);
	if (e->move_count) {
		printf("moves made for it:\n");
		cli_print_moves(e->moves, e->move_count, "  ");
	}
}

int cmd_explain(cli *ctx, int argc, char **argv)
{
	static const cli_syntax syntax = {explain_help, CLI_OPTS(explain_opts), 1, 1,
	                                  "one PACKET id"};
	explain_args a = {0};
	gs_explanation *e = NULL;
	uint64_t packet;
	int rv;

	rv = cli_start_id(ctx, argc, argv, &syntax, &a, "PACKET", &packet);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_explain(ctx->client, packet, a.tenant, &e);
	if (rv != 0)
		return cli_fail(ctx, rv);
	uint64_t waited = 0, ran = 0;
	for (size_t i = 1; i < e->event_count; i++) {
		uint64_t span_ns = span(e->events[i - 1].time_ns, e->events[i].time_ns);
		*(ran_before(e->events, i) ? &ran : &waited) += span_ns;
	}
	if (ctx->json)
		explain_json(e, waited, ran);
	else
		explain_text(e, waited, ran);
	gs_explanation_free(e);
	return CLI_EXIT_OK;
}

/* ---- usage ------------------------------------------------------------------------------ */

static const char usage_help[] =
        "Usage: gpusched usage [--since T] [--until T] [--by tenant|context|node]\n"
        "                      [--tenant NAME|*] [--json]\n"
        "How the GPU was used by the packets submitted in the time range, per tenant (default),\n"
        "context or engine (adapter and node): packets and how they ended, engine time and\n"
        "utilisation (engine time over the range: a fraction of one engine), preemptions,\n"
        "resubmissions, bytes paged in for them, and p50/p95/p99 of queue wait (submitted ->\n"
        "started) and engine time. The same numbers as the audit's views packet_usage and\n"
        "usage_by_tenant/context/node (schema/audit.sql) for the plain sqlite3 shell.\n"
        "\n"
        "Options:\n"
        "  --since T, --until T   the range (as in history: 10m, 2026-11-24T09:00, @SECONDS,\n"
        "                         now); default everything\n"
        "  --by KEY               tenant, context or node\n"
        "  --tenant NAME          another tenant, or * for every tenant (administrators only)\n"
        "  --json                 {window_ns, truncated, rows: [{tenant, context, adapter,\n"
        "                         node, packets, completed, faulted, cancelled, preemptions,\n"
        "                         resubmissions, busy_ns, utilisation, paging_bytes,\n"
        "                         wait_p50_ns, wait_p95_ns, wait_p99_ns, run_p50_ns,\n"
        "                         run_p95_ns, run_p99_ns}]}\n";

static int parse_usage_by(cli *ctx, const char *arg, void *field)
{
	static const char *const names[] = {"tenant", "context", "node"};
	for (int i = 0; i < 3; i++)
		if (strcasecmp(arg, names[i]) == 0) {
			*(gs_usage_by *)field = (gs_usage_by)i;
			return 0;
		}
	return cli_usage(ctx, "--by: '%s' is not tenant, context or node", arg);
}

static const cli_opt usage_opts[] = {
        {"since", CLI_ARG_PARSE, offsetof(gs_usage_filter, since_ns), .parse = cli_parse_time},
        {"until", CLI_ARG_PARSE, offsetof(gs_usage_filter, until_ns), .parse = cli_parse_time},
        {"by", CLI_ARG_PARSE, offsetof(gs_usage_filter, by), .parse = parse_usage_by},
        {"tenant", CLI_ARG_STR, offsetof(gs_usage_filter, tenant)},
};

static json_t *usage_row_json(const void *item)
{
	const gs_usage_row *r = item;
	json_t *o = json_object();

	json_object_set_new(o, "tenant", json_string(r->tenant));
	json_object_set_new(o, "context", cli_json_u64(r->context));
	json_object_set_new(o, "adapter", json_integer(r->adapter));
	json_object_set_new(o, "node", json_integer(r->node));
	json_object_set_new(o, "packets", cli_json_u64(r->packets));
	json_object_set_new(o, "completed", cli_json_u64(r->completed));
	json_object_set_new(o, "faulted", cli_json_u64(r->faulted));
	json_object_set_new(o, "cancelled", cli_json_u64(r->cancelled));
	json_object_set_new(o, "preemptions", cli_json_u64(r->preemptions));
	json_object_set_new(o, "resubmissions", cli_json_u64(r->resubmissions));
	json_object_set_new(o, "busy_ns", cli_json_u64(r->busy_ns));
	json_object_set_new(o, "utilisation", json_real(r->utilisation));
	json_object_set_new(o, "paging_bytes", cli_json_u64(r->paging_bytes));
	static const char *const wk[] = {"wait_p50_ns", "wait_p95_ns", "wait_p99_ns"};
	static const char *const rk[] = {"run_p50_ns", "run_p95_ns", "run_p99_ns"};
	for (int i = 0; i < 3; i++) {
		json_object_set_new(o, wk[i], cli_json_u64(r->wait_ns[i]));
		json_object_set_new(o, rk[i], cli_json_u64(r->run_ns[i]));
	}
	return o;
}

static void print_usage_rows(const gs_usage *u, gs_usage_by by)
{
	char busy[24], w[3][24], r[3][24], key[80];

	printf("%-34s %8s %6s %6s %8s %10s %6s %5s %10s %27s %27s\n",
	       by == GS_USAGE_BY_NODE      ? "ENGINE"
	       : by == GS_USAGE_BY_CONTEXT ? "TENANT/CONTEXT"
	                                   : "TENANT",
	       "PACKETS", "FAULT", "CANCEL", "BUSY", "UTIL", "PRE", "RESUB", "PAGED",
	       "WAIT p50/p95/p99", "RUN p50/p95/p99");
	for (size_t i = 0; i < u->count; i++) {
		const gs_usage_row *x = &u->rows[i];
		if (by == GS_USAGE_BY_NODE)
			snprintf(key, sizeof(key), "adapter %" PRIu32 " node %" PRIu32, x->adapter,
			         x->node);
		else if (by == GS_USAGE_BY_CONTEXT)
			snprintf(key, sizeof(key), "%s/%" PRIu64, x->tenant, x->context);
		else
			snprintf(key, sizeof(key), "%s", x->tenant);
		cli_format_duration(x->busy_ns, busy, sizeof(busy));
		for (int k = 0; k < 3; k++) {
			cli_format_duration(x->wait_ns[k], w[k], sizeof(w[k]));
			cli_format_duration(x->run_ns[k], r[k], sizeof(r[k]));
		}
		printf("%-34s %8" PRIu64 " %6" PRIu64 " %6" PRIu64 " %8s %9.2f%% %6" PRIu64
		       " %5" PRIu64 " %10" PRIu64 " %9s/%8s/%8s %9s/%8s/%8s\n",
		       key, x->packets, x->faulted, x->cancelled, busy, 100.0 * x->utilisation,
		       x->preemptions, x->resubmissions, x->paging_bytes, w[0], w[1], w[2], r[0],
		       r[1], r[2]);
	}
	if (u->count == 0)
		printf("(no packets in the range)\n");
	if (u->truncated)
		printf("(the first %u packets only: narrow the range)\n", 5000000u);
}

int cmd_usage(cli *ctx, int argc, char **argv)
{
	static const cli_syntax syntax = {usage_help, CLI_OPTS(usage_opts)};
	gs_usage_filter f = {0};
	gs_usage *u = NULL;
	int rv;

	rv = cli_parse_args(ctx, argc, argv, &syntax, &f);
	if (rv == CLI_CONTINUE)
		rv = cli_check_range(ctx, f.since_ns, f.until_ns);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	rv = gs_get_usage(ctx->client, &f, &u);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(json_pack(
		        "{s:o, s:b, s:o}", "window_ns", cli_json_u64(u->window_ns), "truncated",
		        u->truncated, "rows",
		        cli_json_array(u->rows, u->count, sizeof(*u->rows), usage_row_json)));
	else
		print_usage_rows(u, f.by);
	gs_usage_free(u);
	return CLI_EXIT_OK;
}
