/*
 * gpusched submit: one packet on a fresh device and context, or (--count) many, pipelined
 * over one connection with libgpusched's asynchronous calls.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char help[] =
        "Usage: gpusched submit --node N [--flags FLAGS] [--spin-us N] [--nonpreemptible]\n"
        "                       [--priority-class C] [--priority P] [--wait] [--timeout MS]\n"
        "                       [--count N] [--inflight K] [--json]\n"
        "Creates a device and a context on node N, submits one packet (a SPIN of N\n"
        "microseconds of engine time, or a NOP when N is 0) and prints\n"
        "  packet <id> fence <fence> node <node> flags <names>\n"
        "as soon as the daemon acknowledges it.\n"
        "\n"
        "With --count N it submits N such packets over one connection, keeping up to\n"
        "--inflight K submissions in flight at once (libgpusched's asynchronous calls), and\n"
        "prints a summary instead: packets acknowledged and failed, elapsed time, submits per\n"
        "second and the acknowledgement latency (p50, p99) of the submissions. On a terminal\n"
        "it shows its progress while it runs. Submissions in flight together are independent:\n"
        "their packets may get their fences in another order than they were sent. It stops\n"
        "starting new ones at the first failure.\n"
        "\n"
        "A CLI process is short-lived, and destroying a context cancels its queued packets, so\n"
        "the command always waits for its packets to finish (up to --timeout) before it\n"
        "destroys the device and context it created. --wait also reports the final state (of\n"
        "each packet with --count: how many ended in each state). When the connection to the\n"
        "daemon is lost (a daemon or relay that died, no answer in time), it waits for\n"
        "nothing more and reports the packets whose end it does not know as failed waits.\n"
        "\n"
        "Options:\n"
        "  --node N              zero-based node ordinal (see gpusched info)\n"
        "  --flags FLAGS         DXGK_SUBMITCOMMANDFLAGS: a number (0x00a) or names joined by\n"
        "                        ',' or '|' (NullRendering,Present). Paging, ContextSwitch,\n"
        "                        Resubmission and VirtualMachineData are the daemon's to set\n"
        "                        and are rejected\n"
        "  --spin-us N           engine time of the packet in microseconds (default 0: NOP)\n"
        "  --nonpreemptible      the spin cannot be preempted (models a long shader)\n"
        "  --priority-class C    IDLE, BELOW_NORMAL, NORMAL (default), ABOVE_NORMAL, HIGH,\n"
        "                        REALTIME, or 0..5\n"
        "  --priority P          -7..+7 within the class (default 0)\n"
        "  --wait                print the packet's final state after it finishes\n"
        "  --timeout MS          how long to wait for the packet (default 30000)\n"
        "  --count N             packets to submit, 1..10000000 (default 1)\n"
        "  --inflight K          submissions in flight at once, 1..4096 (default 1); the\n"
        "                        daemon's max_inflight_requests (default 512) bounds it too\n"
        "  --json                one JSON object: {packet_id, fence, node, submit_flags,\n"
        "                        submit_flag_names} at the acknowledgement, or with --wait\n"
        "                        after the wait, with \"state\" added. With --count: {count,\n"
        "                        inflight, acknowledged, failed, elapsed_s, submits_per_s,\n"
        "                        ack_p50_us, ack_p99_us, first_packet, last_packet, node,\n"
        "                        submit_flags, submit_flag_names, error} and with --wait\n"
        "                        \"states\" (final state name -> packets)\n"
        "\n"
        "Exit status: 0 when every packet was acknowledged and finished (with --wait:\n"
        "COMPLETED), 1 on a daemon error, a timeout or (with --wait) another final state,\n"
        "3 when the connection failed.\n";

typedef struct submit_args {
	uint32_t node;
	bool has_node;
	uint32_t flags;
	uint64_t spin_us;
	bool nonpreemptible;
	uint32_t priority_class;
	int32_t priority;
	bool wait;
	uint32_t timeout_ms;
	uint32_t count;
	uint32_t inflight;
	bool pipelined; /* --count or --inflight given */
} submit_args;

static int priority_option(cli *ctx, const char *arg, void *field)
{
	if (!cli_parse_i32(arg, field))
		return cli_usage(ctx, "--priority: '%s' is not a number", arg);
	return 0;
}

static const cli_opt submit_opts[] = {
        {"node", CLI_ARG_U32, offsetof(submit_args, node),
         .given = CLI_GIVEN(submit_args, has_node)},
        {"flags", CLI_ARG_PARSE, offsetof(submit_args, flags), .parse = cli_parse_submit_flags},
        {"spin-us", CLI_ARG_U64, offsetof(submit_args, spin_us)},
        {"nonpreemptible", CLI_SET_BOOL, offsetof(submit_args, nonpreemptible)},
        {"priority-class", CLI_ARG_PARSE, offsetof(submit_args, priority_class),
         .parse = cli_parse_priority_class},
        {"priority", CLI_ARG_PARSE, offsetof(submit_args, priority), .parse = priority_option},
        {"wait", CLI_SET_BOOL, offsetof(submit_args, wait)},
        {"timeout", CLI_ARG_U32, offsetof(submit_args, timeout_ms)},
        {"count", CLI_ARG_U32, offsetof(submit_args, count), .min = 1, .max = 10000000,
         .given = CLI_GIVEN(submit_args, pipelined)},
        {"inflight", CLI_ARG_U32, offsetof(submit_args, inflight), .min = 1,
         .max = GS_ASYNC_MAX_INFLIGHT, .given = CLI_GIVEN(submit_args, pipelined)},
};

static const cli_syntax submit_syntax = {help, CLI_OPTS(submit_opts)};

/* Returns CLI_CONTINUE to go on, or the exit code to return now (0 after --help). */
static int parse_args(cli *ctx, int argc, char **argv, submit_args *a)
{
	int rv;

	*a = (submit_args){.priority_class = 2,
	                   .timeout_ms = GS_DEFAULT_TIMEOUT_MS,
	                   .count = 1,
	                   .inflight = 1};
	rv = cli_parse_args(ctx, argc, argv, &submit_syntax, a);
	if (rv == CLI_CONTINUE && !a->has_node)
		return cli_usage(ctx, "--node is required");
	return rv;
}

static json_t *packet_json(const gs_submit_result *r, uint32_t flags)
{
	return json_pack("{s:o, s:o, s:I, s:I, s:o}", "packet_id", cli_json_u64(r->packet), "fence",
	                 cli_json_u64(r->fence), "node", (json_int_t)r->node, "submit_flags",
	                 (json_int_t)flags, "submit_flag_names",
	                 cli_json_flag_names(gs_submit_flag_names, flags));
}

/* Submits the packet on an existing context and reports it; the caller owns cleanup. */
static int submit_and_wait(cli *ctx, const submit_args *a, uint64_t context)
{
	gs_packet_state state = GS_PACKET_UNKNOWN;
	gs_submit_result res;
	char flags[320];
	gs_dmabuf buf;
	uint64_t fence = 0;
	int rv;

	gs_dmabuf_init(&buf);
	rv = a->spin_us ? gs_dmabuf_spin(&buf, a->spin_us,
	                                 a->nonpreemptible ? GS_DMABUF_SPIN_NONPREEMPTIBLE : 0)
	                : gs_dmabuf_nop(&buf);
	if (rv == 0)
		rv = gs_submit(ctx->client, context, &buf, a->flags, &res);
	gs_dmabuf_free(&buf);
	if (rv != 0)
		return cli_fail(ctx, rv);

	cli_format_flags(gs_submit_flag_names, a->flags, flags, sizeof(flags));
	/* Printed at the acknowledgement, before the wait: a script sees the id at once. Only
	 * --wait --json holds it back, to print one object with the final state. */
	if (!ctx->json)
		printf("packet %" PRIu64 " fence %" PRIu64 " node %" PRIu32 " flags %s\n",
		       res.packet, res.fence, res.node, flags);
	else if (!a->wait)
		cli_json_print(packet_json(&res, a->flags));
	fflush(stdout);

	rv = gs_packet_wait(ctx->client, res.packet, a->timeout_ms, &state, &fence);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (a->wait && ctx->json) {
		json_t *doc = packet_json(&res, a->flags);

		json_object_set_new(doc, "state", json_string(gs_packet_state_name(state)));
		cli_json_print(doc);
	} else if (a->wait) {
		printf("packet %" PRIu64 " %s fence %" PRIu64 "\n", res.packet,
		       gs_packet_state_name(state), fence);
	}
	if (a->wait && state != GS_PACKET_COMPLETED) {
		cli_warn(ctx, "packet %" PRIu64 " ended %s", res.packet,
		         gs_packet_state_name(state));
		return CLI_EXIT_DAEMON;
	}
	return CLI_EXIT_OK;
}

/* ---- --count: many submissions in flight over one connection ---------------------------- */

#define WAITS_IN_FLIGHT 32 /* packet waits at once: under the daemon's max_waits_per_connection */
#define PROGRESS_NS     100000000u /* redraw the progress line at most every 100 ms */

typedef struct many {
	cli *ctx;
	const submit_args *a;
	gs_async_queue *q;
	uint64_t *t0;      /* start of each submission (ns), by index */
	uint32_t *lat_us;  /* acknowledgement latency of each acknowledged one */
	uint64_t *packets; /* the packets acknowledged, in order of acknowledgement */
	uint64_t acked, failed;
	uint64_t first_packet, last_packet;
	uint32_t node;
	int error; /* the first failure's status */
	char message[GS_ASYNC_MESSAGE_MAX];
	uint64_t states[GS_PACKET_REJECTED + 1];
	uint64_t wait_failed;
	/* A request failed for the link, not the packet (the connection dropped, no answer in
	 * time, the relay lost the host, the daemon stops): the others would fail alike, each at
	 * its own deadline, so no more waits are started. */
	bool link_lost;
	bool progress;
	uint64_t drawn_ns;
} many;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void show_progress(many *m, const char *what, uint64_t done, uint64_t total, bool force)
{
	uint64_t now;

	if (!m->progress)
		return;
	now = mono_ns();
	if (!force && now - m->drawn_ns < PROGRESS_NS)
		return;
	m->drawn_ns = now;
	printf("\r%s %" PRIu64 "/%" PRIu64 ", %" PRIu64 " failed\033[K", what, done, total,
	       m->failed);
	fflush(stdout);
}

static void first_error(many *m, const gs_async_event *ev)
{
	if (m->error)
		return;
	m->error = ev->status;
	snprintf(m->message, sizeof(m->message), "%s",
	         ev->message[0] ? ev->message : gs_strerror(ev->status));
}

/* An error of the way to the daemon rather than of one packet. */
static bool link_error(int status)
{
	return status == GS_ERR_TRANSPORT || status == GS_ERR_TIMEOUT ||
	       status == GS_STATUS_UNAVAILABLE || status == GS_STATUS_SHUTTING_DOWN;
}

/* Waits (up to the client's timeout) for completions and counts them; returns how many came. */
static int drain_some(many *m, gs_async_event *evs, size_t max, bool submits)
{
	int n = gs_async_poll(
	        m->q, evs, max,
	        (int)(m->ctx->timeout_ms ? m->ctx->timeout_ms : GS_DEFAULT_TIMEOUT_MS) +
	                (int)m->a->timeout_ms);

	for (int k = 0; k < n; k++) {
		const gs_async_event *ev = &evs[k];

		/* Without --wait a wait only says the packet finished, however it ended. */
		if (!submits && !m->a->wait && ev->status == GS_STATUS_FAULTED)
			continue;
		if (ev->status != 0) {
			first_error(m, ev);
			if (submits)
				m->failed++;
			else
				m->wait_failed++;
			if (link_error(ev->status))
				m->link_lost = true;
			if (!submits && ev->state == GS_PACKET_FAULTED)
				m->states[GS_PACKET_FAULTED]++;
			continue;
		}
		if (!submits) {
			if (ev->state <= GS_PACKET_REJECTED)
				m->states[ev->state]++;
			continue;
		}
		uint64_t dt = (mono_ns() - m->t0[(size_t)(uintptr_t)ev->user]) / 1000u;
		m->lat_us[m->acked] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
		/* Packet ids and fences are opaque (unordered): first and last as acknowledged. */
		m->packets[m->acked++] = ev->submit.packet;
		if (!m->first_packet)
			m->first_packet = ev->submit.packet;
		m->last_packet = ev->submit.packet;
		m->node = ev->submit.node;
	}
	return n;
}

static int submit_all(many *m, uint64_t context, const gs_dmabuf *buf)
{
	gs_async_event evs[64];
	uint64_t started = 0, done = 0;
	size_t inflight = 0;

	while (done < started || (started < m->a->count && !m->error)) {
		while (started < m->a->count && inflight < m->a->inflight && !m->error) {
			gs_async_opts o = {.queue = m->q, .user = (void *)(uintptr_t)started};
			int rv;

			m->t0[started] = mono_ns();
			rv = gs_async_submit(m->ctx->client, context, buf, m->a->flags, &o, NULL);
			if (rv != 0) {
				gs_async_event ev = {.status = rv};
				first_error(m, &ev);
				break;
			}
			started++;
			inflight++;
		}
		if (done == started)
			break;
		int n = drain_some(m, evs, 64, true);
		if (n <= 0) {
			/* Nothing within the timeout: the requests' own deadlines end them. */
			continue;
		}
		done += (uint64_t)n;
		inflight -= (size_t)n;
		show_progress(m, "submitted", m->acked, m->a->count, false);
	}
	show_progress(m, "submitted", m->acked, m->a->count, true);
	return 0;
}

/* --wait: a packet wait for each acknowledged packet, WAITS_IN_FLIGHT at a time. */
static void wait_all(many *m)
{
	gs_async_event evs[WAITS_IN_FLIGHT];
	uint64_t started = 0, done = 0;

	while (done < started || (started < m->acked && !m->link_lost)) {
		while (started < m->acked && started - done < WAITS_IN_FLIGHT && !m->link_lost) {
			gs_async_opts o = {.queue = m->q};
			int rv = gs_async_packet_wait(m->ctx->client, m->packets[started],
			                              m->a->timeout_ms, &o, NULL);

			if (rv != 0) {
				gs_async_event ev = {.status = rv};
				first_error(m, &ev);
				m->wait_failed += m->acked - started;
				return;
			}
			started++;
		}
		if (done == started)
			break;
		int n = drain_some(m, evs, WAITS_IN_FLIGHT, false);
		if (n > 0)
			done += (uint64_t)n;
		show_progress(m, "finished", done, m->acked, false);
	}
	/* The waits never started: their packets' ends are unknown here. */
	m->wait_failed += m->acked - started;
	show_progress(m, "finished", done, m->acked, true);
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return (a > b) - (a < b);
}

static double percentile(const uint32_t *sorted, uint64_t n, double p)
{
	return n ? (double)sorted[(uint64_t)(p * (double)(n - 1) + 0.5)] : 0.0;
}

static void report_many(const many *m, double elapsed)
{
	const submit_args *a = m->a;
	double rate = elapsed > 0 ? (double)m->acked / elapsed : 0;
	double p50 = percentile(m->lat_us, m->acked, 0.50);
	double p99 = percentile(m->lat_us, m->acked, 0.99);
	char flags[320];

	if (m->ctx->json) {
		json_t *o = json_pack(
		        "{s:I, s:I, s:o, s:o, s:f, s:f, s:f, s:f, s:o, s:o, s:I, s:I, "
		        "s:o}",
		        "count", (json_int_t)a->count, "inflight", (json_int_t)a->inflight,
		        "acknowledged", cli_json_u64(m->acked), "failed", cli_json_u64(m->failed),
		        "elapsed_s", elapsed, "submits_per_s", rate, "ack_p50_us", p50,
		        "ack_p99_us", p99, "first_packet", cli_json_u64(m->first_packet),
		        "last_packet", cli_json_u64(m->last_packet), "node", (json_int_t)m->node,
		        "submit_flags", (json_int_t)a->flags, "submit_flag_names",
		        cli_json_flag_names(gs_submit_flag_names, a->flags));

		json_object_set_new(o, "error", m->error ? json_string(m->message) : json_null());
		if (a->wait) {
			json_t *st = json_object();

			for (int s = 0; s <= GS_PACKET_REJECTED; s++)
				if (m->states[s])
					json_object_set_new(st, gs_packet_state_name(s),
					                    cli_json_u64(m->states[s]));
			json_object_set_new(o, "states", st);
		}
		cli_json_print(o);
		return;
	}
	cli_format_flags(gs_submit_flag_names, a->flags, flags, sizeof(flags));
	printf("submitted %" PRIu64 " of %" PRIu32 " packets (%" PRIu32
	       " in flight) in %.3f s: %.0f submits/s, %" PRIu64 " failed\n",
	       m->acked, a->count, a->inflight, elapsed, rate, m->failed);
	printf("acknowledgement latency: p50 %.0f us, p99 %.0f us\n", p50, p99);
	if (m->acked)
		printf("packets %" PRIu64 "..%" PRIu64 " on node %" PRIu32 ", flags %s\n",
		       m->first_packet, m->last_packet, m->node, flags);
	if (a->wait) {
		printf("final states:");
		for (int s = 0; s <= GS_PACKET_REJECTED; s++)
			if (m->states[s])
				printf(" %s %" PRIu64, gs_packet_state_name(s), m->states[s]);
		printf("\n");
	}
}

static int submit_many(cli *ctx, const submit_args *a, uint64_t context)
{
	many m = {.ctx = ctx, .a = a, .progress = isatty(STDOUT_FILENO)};
	gs_dmabuf buf;
	double start;
	int rv, code = CLI_EXIT_OK;

	m.t0 = calloc(a->count, sizeof(*m.t0));
	m.lat_us = calloc(a->count, sizeof(*m.lat_us));
	m.packets = calloc(a->count, sizeof(*m.packets));
	rv = m.t0 && m.lat_us && m.packets ? gs_async_queue_create(&m.q) : GS_ERR_NOMEM;
	gs_dmabuf_init(&buf);
	if (rv == 0)
		rv = a->spin_us
		             ? gs_dmabuf_spin(&buf, a->spin_us,
		                              a->nonpreemptible ? GS_DMABUF_SPIN_NONPREEMPTIBLE : 0)
		             : gs_dmabuf_nop(&buf);
	if (rv != 0) {
		code = cli_fail(ctx, rv);
		goto done;
	}
	start = (double)mono_ns() / 1e9;
	submit_all(&m, context, &buf);
	double elapsed = (double)mono_ns() / 1e9 - start;
	qsort(m.lat_us, m.acked, sizeof(*m.lat_us), cmp_u32);

	/* Before the device goes: every packet must have finished. Fences are opaque (which
	 * packet is the last one of the context is not to be read from them), so each is
	 * waited for. */
	wait_all(&m);
	if (m.progress)
		printf("\r\033[K");
	report_many(&m, elapsed);
	if (m.error) {
		cli_warn(ctx, "%s: %s", gs_status_name(m.error), m.message);
		code = cli_exit_code(m.error);
	}
	if (code == CLI_EXIT_OK && (m.acked != a->count || m.wait_failed ||
	                            (a->wait && m.states[GS_PACKET_COMPLETED] != m.acked)))
		code = CLI_EXIT_DAEMON;
done:
	gs_dmabuf_free(&buf);
	gs_async_queue_destroy(m.q);
	free(m.t0);
	free(m.lat_us);
	free(m.packets);
	return code;
}

int cmd_submit(cli *ctx, int argc, char **argv)
{
	gs_context_desc desc;
	submit_args a;
	uint64_t device, context;
	int rv, cleanup;

	rv = parse_args(ctx, argc, argv, &a);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;

	rv = gs_device_create(ctx->client, "gpusched-submit", &device);
	if (rv != 0)
		return cli_fail(ctx, rv);
	gs_context_desc_init(&desc, device, a.node);
	desc.priority_class = a.priority_class;
	desc.priority = a.priority;
	rv = gs_context_create(ctx->client, &desc, &context, NULL);
	if (rv != 0)
		rv = cli_fail(ctx, rv);
	else if (a.pipelined)
		rv = submit_many(ctx, &a, context);
	else
		rv = submit_and_wait(ctx, &a, context);

	/* The device takes its context along; a packet still queued here (timeout) is
	 * cancelled, which is why the wait above comes first. */
	cleanup = gs_device_destroy(ctx->client, device);
	if (cleanup != 0 && rv == CLI_EXIT_OK)
		rv = cli_fail(ctx, cleanup);
	return rv;
}
