/*
 * bench_rss: the daemon's resident memory with many objects. It starts a gpuschedd, measures
 * its RSS idle, creates --contexts contexts and --allocations allocations (10,000 and 100,000
 * by default, from --threads clients, each with its own device), and measures again.
 *
 * The memory segments' own bytes are left out of both figures: an allocation's bytes are the
 * emulated GPU's memory, not the daemon's bookkeeping. The segments are given sizes no other
 * mapping has (memory 96 MiB, aperture 48 MiB, system memory 2,000 MiB), and the mappings of
 * exactly those sizes (or their sums: the kernel merges neighbours) are left out of the sum of
 * /proc/PID/smaps. Allocations are 256 bytes by default, the heap's granule, so that all of them
 * fit in the memory segment: an allocation placed in system memory would touch pages of a
 * mapping the kernel may have merged with another, which this could not tell apart. The figure
 * that counts is the total (and the growth) against the target of 64 MiB, with the
 * bytes per object.
 * With --json, one JSON object on stdout (the table goes to stderr).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

#define MiB              (1024ull * 1024ull)
#define MAX_THREADS      64
#define TARGET_MIB       64.0
#define SEGMENT_MEM_MIB  96ull
#define SEGMENT_APER_MIB 48ull
#define SYSTEM_MIB       2000ull

static struct {
	uint32_t contexts, allocations, threads;
	uint64_t alloc_size;
	bool json;
} opt = {10000, 100000, 4, 256, false};

typedef struct worker {
	const char *url;
	uint32_t contexts, allocations;
	int failed;
	char why[256];
} worker;

/* Resident bytes of process pid, less the mappings of exactly the segments' sizes. */
static int rss_of(pid_t pid, uint64_t *out, uint64_t *segments)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	/* The kernel merges adjacent mappings of the same kind into one: any sum of the
	 * segments' sizes is theirs. */
	static const uint64_t sizes[] = {SEGMENT_MEM_MIB * MiB, SEGMENT_APER_MIB * MiB,
	                                 SYSTEM_MIB * MiB};
	char line[512];
	bool skipping = false;
	uint64_t total = 0, left_out = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, kb;
		if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, ' ')) {
			skipping = false;
			for (unsigned set = 1; set < 8 && !skipping; set++) {
				uint64_t sum = 0;
				for (unsigned i = 0; i < 3; i++)
					sum += (set >> i & 1u) ? sizes[i] : 0;
				skipping = hi - lo == sum;
			}
		} else if (sscanf(line, "Rss: %llu kB", &kb) == 1) {
			if (skipping)
				left_out += kb * 1024ull;
			else
				total += kb * 1024ull;
		}
	}
	fclose(f);
	*out = total;
	if (segments)
		*segments = left_out;
	return 0;
}

static void *work(void *arg)
{
	worker *w = arg;
	gs_client *c = NULL;
	uint64_t dev;
	if (gs_connect_ex(w->url, NULL, &c, w->why, sizeof(w->why)) != 0) {
		w->failed = 1;
		return NULL;
	}
	gs_client_set_timeout(c, 30000);
	int rv = gs_device_create(c, "rss", &dev);
	for (uint32_t i = 0; rv == 0 && i < w->contexts; i++) {
		gs_context_desc d;
		gs_context_desc_init(&d, dev, 0);
		uint64_t ctx;
		rv = gs_context_create(c, &d, &ctx, NULL);
	}
	for (uint32_t i = 0; rv == 0 && i < w->allocations; i++) {
		gs_allocation_desc d = {.device = dev, .size = opt.alloc_size};
		gs_allocation_placement p;
		rv = gs_allocation_create(c, &d, &p);
	}
	if (rv != 0) {
		w->failed = 1;
		snprintf(w->why, sizeof(w->why), "%s: %s", gs_status_name(rv),
		         gs_client_message(c));
	}
	/* The objects stay: the daemon keeps a vanished client's devices until they are
	 * destroyed, and this connection stays open until the measurement is taken. */
	return c;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_rss [--contexts N] [--allocations N] [--threads T] [--alloc-size B] "
	        "[--json]\n"
	        "Starts a gpuschedd, measures its resident memory idle and after creating N "
	        "contexts\n"
	        "(default 10000) and N allocations (default 100000, of B bytes, default 256) from "
	        "T\n"
	        "clients (default 4), leaving the memory segments' own bytes out; prints the "
	        "growth,\n"
	        "the bytes per object and the target (64 MiB).\n"
	        "Exit status: 0 when every object was created, 1 otherwise, 2 usage.\n");
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			opt.json = true;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!v)
			return -1;
		unsigned long long n = strtoull(v, NULL, 10);
		if (!strcmp(a, "--contexts"))
			opt.contexts = (uint32_t)n;
		else if (!strcmp(a, "--allocations"))
			opt.allocations = (uint32_t)n;
		else if (!strcmp(a, "--threads") && n >= 1 && n <= MAX_THREADS)
			opt.threads = (uint32_t)n;
		else if (!strcmp(a, "--alloc-size") && n >= 1)
			opt.alloc_size = n;
		else
			return -1;
		i++;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (parse_args(argc, argv) != 0) {
		usage(stderr);
		return 2;
	}
	char json[1024];
	snprintf(json, sizeof(json),
	         "{\"adapters\": [{\"name\": \"gpu0\", \"segments\": ["
	         "{\"id\": 1, \"name\": \"vram\", \"kind\": \"memory\", \"size_mib\": %llu},"
	         "{\"id\": 2, \"name\": \"aperture\", \"kind\": \"aperture\", \"size_mib\": %llu}],"
	         "\"system_memory_mib\": %llu}]}",
	         SEGMENT_MEM_MIB, SEGMENT_APER_MIB, SYSTEM_MIB);
	static itest_config cfg;
	static gs_testd d;
	if (itest_config_write(&cfg, json) != 0)
		return 1;
	const char *args[] = {"--config", cfg.path, "--log-level", "warn", NULL};
	if (gs_testd_start(&d, args) != 0)
		return 1;

	uint64_t idle = 0, after = 0, seg_after = 0;
	rss_of(d.pid, &idle, NULL);
	worker w[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	gs_client *clients[MAX_THREADS] = {0};
	double t0 = mono_s();
	for (uint32_t i = 0; i < opt.threads; i++) {
		w[i] = (worker){.url = d.url,
		                .contexts = opt.contexts / opt.threads +
		                            (i < opt.contexts % opt.threads ? 1 : 0),
		                .allocations = opt.allocations / opt.threads +
		                               (i < opt.allocations % opt.threads ? 1 : 0)};
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	int failed = 0;
	for (uint32_t i = 0; i < opt.threads; i++) {
		void *c = NULL;
		pthread_join(th[i], &c);
		clients[i] = c;
		if (w[i].failed) {
			fprintf(stderr, "bench_rss: client %u: %s\n", i, w[i].why);
			failed = 1;
		}
	}
	double took = mono_s() - t0;
	rss_of(d.pid, &after, &seg_after);
	for (uint32_t i = 0; i < opt.threads; i++)
		if (clients[i])
			gs_close(clients[i]);
	gs_testd_stop(&d);
	gs_testd_cleanup(&d);
	itest_config_cleanup(&cfg);

	uint64_t objects = (uint64_t)opt.contexts + opt.allocations;
	double grew = after > idle ? (double)(after - idle) : 0;
	FILE *out = opt.json ? stderr : stdout;
	fprintf(out,
	        "bench_rss: %u contexts and %u allocations of %llu bytes from %u clients in %.1f "
	        "s\n",
	        opt.contexts, opt.allocations, (unsigned long long)opt.alloc_size, opt.threads,
	        took);
	fprintf(out, "RSS idle                   %8.1f MiB\n", (double)idle / MiB);
	fprintf(out,
	        "RSS with the objects       %8.1f MiB   (segments' own bytes left out: %.1f MiB)\n",
	        (double)after / MiB, (double)seg_after / MiB);
	fprintf(out, "growth                     %8.1f MiB   %.0f bytes per object\n", grew / MiB,
	        objects ? grew / (double)objects : 0);
	fprintf(out, "target: RSS with the objects <= %.0f MiB: %s\n", TARGET_MIB,
	        (double)after / MiB <= TARGET_MIB ? "MET" : "MISSED");
	if (opt.json)
		printf("{\"bench\": \"rss\", \"contexts\": %u, \"allocations\": %u, "
		       "\"idle_bytes\": "
		       "%llu, \"bytes\": %llu, \"segment_bytes_left_out\": %llu, "
		       "\"bytes_per_object\": %.1f, \"target_bytes\": %llu, \"seconds\": %.2f, "
		       "\"ok\": %s}\n",
		       opt.contexts, opt.allocations, (unsigned long long)idle,
		       (unsigned long long)after, (unsigned long long)seg_after,
		       objects ? grew / (double)objects : 0, (unsigned long long)(TARGET_MIB * MiB),
		       took, failed ? "false" : "true");
	return failed;
}
