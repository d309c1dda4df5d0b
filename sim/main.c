/*
 * gpusched-sim: how would N adapters and M tenants behave under a policy? Runs the daemon's
 * scheduling policy and memory manager on a virtual clock (sim.h) and prints what came of it.
 *
 * Exit status: 0 done, 1 the run failed (out of memory), 2 bad arguments or workload.
 */
#include "report.h"
#include "sim.h"

#include "core/config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: gpusched-sim [OPTIONS]\n"
	        "\n"
	        "Simulates adapters and tenants on a virtual clock with gpusched's own scheduling\n"
	        "policy and memory manager, and prints engine utilisation, queue waits, "
	        "preemptions,\n"
	        "paging and how fairly each tenant was served (docs/simulation.md).\n"
	        "\n"
	        "Options:\n"
	        "  --adapters N        adapters to simulate, 1 to 100000 (default 1; at most\n"
	        "                      100000 engines in all)\n"
	        "  --tenants M         tenants, spread over the adapters' engines, 1 to 1000000\n"
	        "                      (default 10)\n"
	        "  --workload W        a preset (mixed, inference, training, overcommit, bursty)\n"
	        "                      or a workload file in JSON (default mixed)\n"
	        "  --policy P          how tenants share an engine: weighted, equal_share,\n"
	        "                      best_effort or fixed_share (default weighted)\n"
	        "  --placement P       least_loaded (each tenant to the engine with the least "
	        "load\n"
	        "                      its workload states) or round_robin (default least_loaded)\n"
	        "  --duration T        simulated time: 90s, 10m, 1h, 500ms (default 60s)\n"
	        "  --seed S            random seed; the same seed gives the same output (default "
	        "1)\n"
	        "  --per-engine        a row for every engine\n"
	        "  --per-tenant        a row for every tenant\n"
	        "  --json              JSON for scripts instead of the report\n"
	        "  --quiet             no progress line on a terminal\n"
	        "  --print-workload    print the workload (a preset's JSON, to start a file from)\n"
	        "                      and exit\n"
	        "  --version           print the version and exit\n"
	        "  -h, --help          this help\n"
	        "\n"
	        "Exit status: 0 done, 1 the simulation failed, 2 bad arguments or workload.\n");
}

/* "10m", "90s", "500ms", "1h", or a number of seconds. */
static int parse_duration(const char *s, uint64_t *ns)
{
	static const struct {
		const char *unit;
		uint64_t ns;
	} units[] = {{"", 1000000000ull},
	             {"ns", 1},
	             {"us", 1000},
	             {"ms", 1000000},
	             {"s", 1000000000ull},
	             {"m", 60000000000ull},
	             {"h", 3600000000000ull},
	             {"d", 86400000000000ull}};
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (strcmp(end, units[i].unit) == 0) {
			if (v > UINT64_MAX / units[i].ns)
				return -1;
			*ns = v * units[i].ns;
			return 0;
		}
	return -1;
}

static int parse_count(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct progress {
	double start;
	bool shown;
} progress;

static void show_progress(void *arg, uint64_t sim_ns, uint64_t duration_ns)
{
	progress *p = arg;
	fprintf(stderr, "\rsimulated %.1f s of %.1f s (%.0f%%), %.1f s of wall time ",
	        (double)sim_ns / 1e9, (double)duration_ns / 1e9,
	        100.0 * (double)sim_ns / (double)duration_ns, now_s() - p->start);
	p->shown = true;
}

int main(int argc, char **argv)
{
	enum {
		O_ADAPTERS = 256,
		O_TENANTS,
		O_WORKLOAD,
		O_POLICY,
		O_PLACEMENT,
		O_DURATION,
		O_SEED,
		O_PER_ENGINE,
		O_PER_TENANT,
		O_JSON,
		O_QUIET,
		O_PRINT,
		O_VERSION,
	};
	static const struct option opts[] = {
	        {"adapters", required_argument, NULL, O_ADAPTERS},
	        {"tenants", required_argument, NULL, O_TENANTS},
	        {"workload", required_argument, NULL, O_WORKLOAD},
	        {"policy", required_argument, NULL, O_POLICY},
	        {"placement", required_argument, NULL, O_PLACEMENT},
	        {"duration", required_argument, NULL, O_DURATION},
	        {"seed", required_argument, NULL, O_SEED},
	        {"per-engine", no_argument, NULL, O_PER_ENGINE},
	        {"per-tenant", no_argument, NULL, O_PER_TENANT},
	        {"json", no_argument, NULL, O_JSON},
	        {"quiet", no_argument, NULL, O_QUIET},
	        {"print-workload", no_argument, NULL, O_PRINT},
	        {"version", no_argument, NULL, O_VERSION},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	sim_options o = {.adapters = 1,
	                 .tenants = 10,
	                 .policy = GSD_SHARE_WEIGHTED,
	                 .placement = SIM_PLACE_LEAST_LOADED,
	                 .duration_ns = 60000000000ull,
	                 .seed = 1};
	const char *workload = "mixed";
	bool json = false, quiet = false, print = false, per_engine = false, per_tenant = false;
	int opt;
	uint64_t v;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case O_ADAPTERS:
		case O_TENANTS:
			if (parse_count(optarg,
			                opt == O_ADAPTERS ? SIM_MAX_ENGINES : SIM_MAX_TENANTS,
			                &v) ||
			    !v) {
				fprintf(stderr, "gpusched-sim: --%s: a whole number from 1 to %u\n",
				        opt == O_ADAPTERS ? "adapters" : "tenants",
				        opt == O_ADAPTERS ? SIM_MAX_ENGINES : SIM_MAX_TENANTS);
				return 2;
			}
			*(opt == O_ADAPTERS ? &o.adapters : &o.tenants) = (uint32_t)v;
			break;
		case O_WORKLOAD:
			workload = optarg;
			break;
		case O_POLICY: {
			int found = -1;
			for (int p = GSD_SHARE_WEIGHTED; p <= GSD_SHARE_FIXED; p++)
				if (strcmp(optarg, gsd_share_policy_name(p)) == 0)
					found = p;
			if (found < 0) {
				fprintf(stderr, "gpusched-sim: --policy: weighted, equal_share, "
				                "best_effort or "
				                "fixed_share\n");
				return 2;
			}
			o.policy = found;
			break;
		}
		case O_PLACEMENT:
			if (strcmp(optarg, "least_loaded") == 0)
				o.placement = SIM_PLACE_LEAST_LOADED;
			else if (strcmp(optarg, "round_robin") == 0)
				o.placement = SIM_PLACE_ROUND_ROBIN;
			else {
				fprintf(stderr,
				        "gpusched-sim: --placement: least_loaded or round_robin\n");
				return 2;
			}
			break;
		case O_DURATION:
			/* Up to 30 simulated days. */
			if (parse_duration(optarg, &o.duration_ns) || !o.duration_ns ||
			    o.duration_ns > 30 * 86400000000000ull) {
				fprintf(stderr, "gpusched-sim: --duration: a time from 1ns to 30d "
				                "such as 90s, 10m, "
				                "1h\n");
				return 2;
			}
			break;
		case O_SEED:
			if (parse_count(optarg, INT64_MAX, &o.seed)) {
				fprintf(stderr,
				        "gpusched-sim: --seed: a whole number from 0 to 2^63-1\n");
				return 2;
			}
			break;
		case O_PER_ENGINE:
			per_engine = true;
			break;
		case O_PER_TENANT:
			per_tenant = true;
			break;
		case O_JSON:
			json = true;
			break;
		case O_QUIET:
			quiet = true;
			break;
		case O_PRINT:
			print = true;
			break;
		case O_VERSION:
			printf("gpusched-sim %s\n", GS_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gpusched-sim: unexpected argument \"%s\" (see --help)\n",
		        argv[optind]);
		return 2;
	}
	if (print) {
		const char *text = sim_preset_json(workload);
		if (!text) {
			fprintf(stderr, "gpusched-sim: --print-workload: \"%s\" is not a preset\n",
			        workload);
			return 2;
		}
		fputs(text, stdout);
		return 0;
	}
	sim_workload w;
	char err[512];
	if (sim_workload_load(workload, &w, err, sizeof err) != 0) {
		fprintf(stderr, "gpusched-sim: %s\n", err);
		return 2;
	}
	progress pr = {.start = now_s()};
	if (!quiet && isatty(STDERR_FILENO)) {
		o.progress = show_progress;
		o.progress_arg = &pr;
	}
	sim_result r;
	double t0 = now_s();
	int rc = sim_run(&w, &o, &r, err, sizeof err);
	double wall = now_s() - t0;
	if (pr.shown)
		fprintf(stderr, "\r\033[K");
	if (rc != 0) {
		fprintf(stderr, "gpusched-sim: %s\n", err);
		return 1;
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	sim_run_info run = {.wall_s = wall, .peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024u};
	if (json) {
		json_t *j = sim_result_json(&w, &o, &r, &run, per_engine, per_tenant);
		if (!j || json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
			fprintf(stderr, "gpusched-sim: out of memory for the JSON output\n");
			json_decref(j);
			sim_result_free(&r);
			return 1;
		}
		putchar('\n');
		json_decref(j);
	} else {
		sim_result_print(stdout, &w, &o, &r, &run, per_engine, per_tenant);
	}
	sim_result_free(&r);
	return fflush(stdout) == 0 ? 0 : 1;
}
