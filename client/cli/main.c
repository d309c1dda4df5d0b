/*
 * gpusched: the command-line client of gpuschedd. Parses the global options, then hands the
 * rest of the command line to one command.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The build defines GS_VERSION (the project version) where it passes it on. */
#ifndef GS_VERSION
#define GS_VERSION "unknown"
#endif

static const cli_command commands[] = {
        {"info", "show the daemon's adapters, nodes, segments and limits", cmd_info, CLI_PER_HOST},
        {"demo", "run a verified mixed workload on two nodes", cmd_demo},
        {"submit", "submit one packet (a spin or a no-op) and report it", cmd_submit},
        {"history", "list packets from the audit record", cmd_history, CLI_HOSTS},
        {"events", "list the state changes of one packet", cmd_events},
        {"explain", "one packet's life, with the reason for every wait and stop", cmd_explain},
        {"watch", "print your tenant's events live; lost ones are read from the audit", cmd_watch},
        {"trace", "write the schedule as Chrome trace JSON (Perfetto)", cmd_trace, CLI_HOSTS},
        {"timeline", "draw the schedule as a picture (HTML or SVG)", cmd_timeline, CLI_HOSTS},
        {"stats", "show the daemon's counters", cmd_stats, CLI_PER_HOST},
        {"usage", "GPU time, waits and faults per tenant, context or engine", cmd_usage,
         CLI_PER_HOST},
        {"device", "create or destroy devices (device --help)", cmd_device, CLI_HOSTS},
        {"context", "show a context's fences, or destroy it (context --help)", cmd_context},
        {"alloc", "list, inspect and move allocations (alloc --help)", cmd_alloc},
        {"moves", "list the memory manager's moves of allocations", cmd_moves},
        {"sync", "create, signal, wait for and destroy sync objects (sync --help)", cmd_sync},
        {"kernel", "create, list and destroy your SPIR-V kernels (kernel --help)", cmd_kernel},
        {"run", "run a SPIR-V kernel once over input files, outputs to files", cmd_run},
        {"tenant", "administer tenants (tenant --help)", cmd_tenant},
        {"admin", "the daemon's state; drain it for maintenance (admin --help)", cmd_admin},
        {"audit", "verify the audit file's hash chain (audit --help)", cmd_audit},
};

#define COMMAND_COUNT (sizeof(commands) / sizeof(commands[0]))

static void print_help(void)
{
	printf("Usage: gpusched [OPTIONS] COMMAND [ARGS]\n"
	       "Client of gpuschedd, the networked GPU scheduler.\n"
	       "\n"
	       "Options:\n"
	       "  --url URL        daemon address (default: $GPUSCHED_URL, else\n"
	       "                   ipc://$XDG_RUNTIME_DIR/gpusched/gpusched.sock, else\n"
	       "                   ipc:///tmp/gpusched-$UID/gpusched.sock); repeat it, or give\n"
	       "                   $GPUSCHED_URL as a list (commas or spaces), for several hosts:\n"
	       "                   info, stats and usage then answer per host, history merges\n"
	       "                   the hosts' packets, trace and timeline draw every host, device "
	       "create\n"
	       "                   picks the least-loaded adapter of all\n"
	       "  --token T        tenant token (default: $GPUSCHED_TOKEN)\n"
	       "  --adapter N      adapter the requests address (default $GPUSCHED_ADAPTER,\n"
	       "                   which the Kubernetes device plugin sets, else 0)\n"
	       "  --json           machine-readable output: one JSON document per line\n"
	       "  --timeout MS     timeout of each request in ms (default %u)\n"
	       "  --help           this text; COMMAND --help describes a command\n"
	       "  --version        print the version\n"
	       "\n"
	       "Commands:\n",
	       GS_DEFAULT_TIMEOUT_MS);
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		printf("  %-10s %s\n", commands[i].name, commands[i].summary);
	printf("\n"
	       "A tls+tcp://HOST:PORT URL needs $GPUSCHED_TLS_CA (the CA that signed the daemon's\n"
	       "certificate, checked for HOST when it is a DNS name, or for the name in\n"
	       "$GPUSCHED_TLS_SERVER_NAME) and, when the daemon asks for one,\n"
	       "$GPUSCHED_TLS_CERT_KEY (this client's certificate and key, one PEM file).\n"
	       "\n"
	       "Exit status: 0 ok, 1 the daemon returned an error, 2 usage error,\n"
	       "3 cannot connect or the connection failed, 4 verification failed (demo, audit\n"
	       "verify), 5 several hosts: some did not answer (the output is the others').\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"url", required_argument, NULL, 'u'},
	        {"token", required_argument, NULL, 't'},
	        {"adapter", required_argument, NULL, 'a'},
	        {"timeout", required_argument, NULL, 'T'},
	        {"version", no_argument, NULL, 'V'},
	        CLI_COMMON_OPTIONS,
	        {0},
	};
	cli ctx = {0};
	int opt, rv;
	bool adapter_given = false;

	/* '+': stop at the command name, so that its options are its own. */
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'u':
			if (ctx.nurls == GS_MAX_HOSTS)
				return cli_usage(&ctx, "--url: at most %d hosts", GS_MAX_HOSTS);
			ctx.urls[ctx.nurls++] = optarg;
			ctx.url = ctx.urls[0];
			break;
		case 't':
			ctx.token = optarg;
			break;
		case 'a':
			adapter_given = true;
			if (!cli_parse_u32(optarg, &ctx.adapter))
				return cli_usage(&ctx, "--adapter: '%s' is not a number", optarg);
			break;
		case 'T':
			if (!cli_parse_u32(optarg, &ctx.timeout_ms) || ctx.timeout_ms == 0)
				return cli_usage(&ctx, "--timeout: '%s' is not a positive number",
				                 optarg);
			break;
		case 'V':
			printf("gpusched %s\n", GS_VERSION);
			return CLI_EXIT_OK;
		case CLI_OPT_HELP:
			print_help();
			return CLI_EXIT_OK;
		case CLI_OPT_JSON:
			ctx.json = true;
			break;
		default:
			fprintf(stderr, "Try 'gpusched --help'.\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "gpusched: no command given\nTry 'gpusched --help'.\n");
		return CLI_EXIT_USAGE;
	}
	/* $GPUSCHED_ADAPTER (a pod's, from the device plugin) unless --adapter was given. */
	const char *adapter_env = getenv("GPUSCHED_ADAPTER");
	if (!adapter_given && adapter_env && adapter_env[0] &&
	    !cli_parse_u32(adapter_env, &ctx.adapter))
		return cli_usage(&ctx, "$GPUSCHED_ADAPTER: '%s' is not a number", adapter_env);
	/* $GPUSCHED_URL may be a list of hosts. */
	const char *env = getenv("GPUSCHED_URL");
	if (ctx.nurls == 0 && env && env[0] && strpbrk(env, ", \t\n")) {
		ctx.url_list = strdup(env);
		int n = ctx.url_list ? gs_url_list_split(ctx.url_list, ctx.urls, GS_MAX_HOSTS)
		                     : GS_ERR_NOMEM;
		if (n < 0) {
			free(ctx.url_list);
			return cli_usage(&ctx, "$GPUSCHED_URL: not a list of 1 to %d URLs",
			                 GS_MAX_HOSTS);
		}
		ctx.nurls = (size_t)n;
		ctx.url = ctx.urls[0];
	}
	for (size_t i = 0; i < ctx.nurls; i++)
		for (size_t k = 0; k < i; k++)
			if (strcmp(ctx.urls[k], ctx.urls[i]) == 0) {
				free(ctx.url_list);
				return cli_usage(
				        &ctx, "%s is given twice (its packets would count twice)",
				        ctx.urls[i]);
			}

	for (size_t i = 0; i < COMMAND_COUNT; i++) {
		if (strcmp(argv[optind], commands[i].name) != 0)
			continue;
		ctx.command = commands[i].name;
		if (ctx.nurls > 1 && commands[i].hosts == CLI_PER_HOST)
			rv = cli_run_per_host(&ctx, commands[i].run, argc - optind, argv + optind);
		else
			rv = cli_run(&ctx, commands[i].run, argc - optind, argv + optind);
		cli_disconnect(&ctx);
		free(ctx.url_list);
		return rv;
	}
	fprintf(stderr, "gpusched: unknown command '%s'\nTry 'gpusched --help'.\n", argv[optind]);
	return CLI_EXIT_USAGE;
}
