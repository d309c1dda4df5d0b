/*
 * gpusched submit: one packet on a fresh device and context.
 */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

static const char help[] =
        "Usage: gpusched submit --node N [--flags FLAGS] [--spin-us N] [--nonpreemptible]\n"
        "                       [--priority-class C] [--priority P] [--wait] [--timeout MS]\n"
        "                       [--json]\n"
        "Creates a device and a context on node N, submits one packet (a SPIN of N\n"
        "microseconds of engine time, or a NOP when N is 0) and prints\n"
        "  packet <id> fence <fence> node <node> flags <names>\n"
        "as soon as the daemon acknowledges it.\n"
        "\n"
        "A CLI process is short-lived, and destroying a context cancels its queued packets, so\n"
        "the command always waits for the packet to finish (up to --timeout) before it\n"
        "destroys the device and context it created. --wait also reports the final state.\n"
        "\n"
        "Options:\n"
        "  --node N              zero-based node ordinal (see gpusched info)\n"
        "  --flags FLAGS         DXGK_SUBMITCOMMANDFLAGS: a number (0x00a) or names joined by\n"
        "                        ',' or '|' (NullRendering,Present). Paging, ContextSwitch,\n"
        "                        Resubmission and VirtualMachineData are the daemon's to set\n"
        "                        and are rejected\n"
        "  --spin-us N           engine time of the packet in microseconds (default 0: NOP)\n"
        "  --nonpreemptible      the spin cannot be preempted (models a long shader)\n"
        "  --priority-class C    0..5 = IDLE..REALTIME (default 2, NORMAL)\n"
        "  --priority P          -7..+7 within the class (default 0)\n"
        "  --wait                print the packet's final state after it finishes\n"
        "  --timeout MS          how long to wait for the packet (default 30000)\n"
        "  --json                one JSON object: {packet_id, fence, node, submit_flags,\n"
        "                        submit_flag_names} at the acknowledgement, or with --wait\n"
        "                        after the wait, with \"state\" added\n"
        "\n"
        "Exit status: 0 when the packet was acknowledged and finished (with --wait: COMPLETED),\n"
        "1 on a daemon error, a timeout or (with --wait) another final state.\n";

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
} submit_args;

static int submit_flags(cli *ctx, const char *arg, void *field)
{
	return cli_arg_submit_flags(ctx, arg, field);
}

static int priority_option(cli *ctx, const char *arg, void *field)
{
	if (!cli_parse_i32(arg, field))
		return cli_usage(ctx, "--priority: '%s' is not a number", arg);
	return 0;
}

static const cli_opt submit_opts[] = {
        {"node", CLI_ARG_U32, offsetof(submit_args, node),
         .given = CLI_GIVEN(submit_args, has_node)},
        {"flags", CLI_ARG_PARSE, offsetof(submit_args, flags), .parse = submit_flags},
        {"spin-us", CLI_ARG_U64, offsetof(submit_args, spin_us)},
        {"nonpreemptible", CLI_SET_BOOL, offsetof(submit_args, nonpreemptible)},
        {"priority-class", CLI_ARG_U32, offsetof(submit_args, priority_class)},
        {"priority", CLI_ARG_PARSE, offsetof(submit_args, priority), .parse = priority_option},
        {"wait", CLI_SET_BOOL, offsetof(submit_args, wait)},
        {"timeout", CLI_ARG_U32, offsetof(submit_args, timeout_ms)},
};

static const cli_syntax submit_syntax = {help, CLI_OPTS(submit_opts)};

/* Returns CLI_CONTINUE to go on, or the exit code to return now (0 after --help). */
static int parse_args(cli *ctx, int argc, char **argv, submit_args *a)
{
	int rv;

	*a = (submit_args){.priority_class = 2, .timeout_ms = GS_DEFAULT_TIMEOUT_MS};
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
	else
		rv = submit_and_wait(ctx, &a, context);

	/* The device takes its context along; a packet still queued here (timeout) is
	 * cancelled, which is why the wait above comes first. */
	cleanup = gs_device_destroy(ctx->client, device);
	if (cleanup != 0 && rv == CLI_EXIT_OK)
		rv = cli_fail(ctx, cleanup);
	return rv;
}
