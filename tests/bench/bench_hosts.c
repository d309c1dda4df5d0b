/*
 * bench_hosts: the history of several hosts merged (gs_hosts_history) against one host's
 * history of the same total rows. One daemon gets N packets, four others N/4 each (the same
 * rows spread over four hosts, submitted in turn so that their times interleave); then pages
 * of history are read from the one (gs_history) and from the four (gs_hosts_history), in
 * alternation, and the medians are compared. Target: merged <= 2x the single host's time.
 *
 *   bench_hosts [--packets N] [--limit L] [--rounds R] [--json]
 */
#include "gpusched.h"
#include "testd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOSTS 4

static struct {
	uint32_t packets, limit, rounds;
	bool json;
} opt = {.packets = 40000, .limit = 0, .rounds = 9};

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: bench_hosts [--packets N] [--limit L] [--rounds R] [--json]\n"
	        "History merged over 4 daemons vs one daemon's history of the same rows, in pages\n"
	        "of L packets (default: pages of 100, 1000 and 10000 in turn).\n");
}

typedef struct filler {
	gs_client *c;
	uint64_t ctx;
	gs_dmabuf nop;
	gs_submit_desc descs[64];
} filler;

static int filler_open(filler *f, const char *url)
{
	char why[256];
	uint64_t dev;
	gs_dmabuf_init(&f->nop);
	int rv = gs_connect_ex(url, NULL, &f->c, why, sizeof(why));
	if (rv == 0)
		rv = gs_device_create(f->c, "bench", &dev);
	if (rv == 0) {
		gs_context_desc cd;
		gs_context_desc_init(&cd, dev, 0);
		rv = gs_context_create(f->c, &cd, &f->ctx, NULL);
	}
	if (rv == 0)
		rv = gs_dmabuf_nop(&f->nop);
	for (size_t i = 0; i < 64; i++)
		f->descs[i] = (gs_submit_desc){.context = f->ctx,
		                               .dma = &f->nop,
		                               .submit_flags = GS_SUBMIT_NULL_RENDERING};
	if (rv != 0)
		fprintf(stderr, "bench_hosts: %s: %s (%s)\n", url, gs_status_name(rv),
		        f->c ? gs_client_message(f->c) : why);
	return rv;
}

/* n packets, in batches of 64 (the last one shorter). */
static int fill(filler *f, uint32_t n)
{
	while (n) {
		uint32_t b = n < 64 ? n : 64;
		int rv = gs_submit_batch(f->c, f->descs, b, NULL);
		if (rv != 0) {
			fprintf(stderr, "bench_hosts: submit: %s\n", gs_status_name(rv));
			return rv;
		}
		n -= b;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			opt.json = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (v && !strcmp(a, "--packets") && atoi(v) >= HOSTS) {
			opt.packets = (uint32_t)atoi(v);
			i++;
		} else if (v && !strcmp(a, "--limit") && atoi(v) > 0 && atoi(v) <= 10000) {
			opt.limit = (uint32_t)atoi(v);
			i++;
		} else if (v && !strcmp(a, "--rounds") && atoi(v) > 0 && atoi(v) <= 1000) {
			opt.rounds = (uint32_t)atoi(v);
			i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	gs_testd d[1 + HOSTS];
	filler f[1 + HOSTS];
	memset(f, 0, sizeof(f));
	int started = 0, rv = 0;
	for (; started < 1 + HOSTS && rv == 0; started++)
		rv = gs_testd_start(&d[started], NULL);
	for (int i = 0; rv == 0 && i < 1 + HOSTS; i++)
		rv = filler_open(&f[i], d[i].url);
	/* The same rows: all on the one host, a quarter on each of the four, in turns of 64 so
	 * that the four hosts' times interleave. */
	uint32_t quarter = opt.packets / HOSTS;
	if (rv == 0)
		rv = fill(&f[0], quarter * HOSTS);
	for (uint32_t done = 0; rv == 0 && done < quarter; done += 64)
		for (int h = 1; rv == 0 && h <= HOSTS; h++)
			rv = fill(&f[h], quarter - done < 64 ? quarter - done : 64);
	gs_hosts *hosts = NULL;
	if (rv == 0) {
		const char *urls[HOSTS];
		for (int h = 0; h < HOSTS; h++)
			urls[h] = d[1 + h].url;
		rv = gs_hosts_connect(urls, HOSTS, NULL, &hosts);
	}
	static const uint32_t pages[] = {100, 1000, 10000};
	uint32_t npages = opt.limit ? 1 : 3;
	double *one = calloc(opt.rounds * 2, sizeof(double)), *merged = one + opt.rounds;
	double m1[3] = {0}, m4[3] = {0};
	for (uint32_t p = 0; p < npages && rv == 0 && one; p++) {
		uint32_t limit = opt.limit ? opt.limit : pages[p];
		uint64_t rows_one = 0, rows_merged = 0;
		for (uint32_t r = 0; rv == 0 && r < opt.rounds; r++) {
			/* Both orders in turn: the newest page, and the oldest. */
			gs_history_filter filter = {.limit = limit, .oldest_first = r % 2 == 1};
			gs_packet_record *recs;
			uint32_t *which;
			size_t n;
			double t0 = gs_test_mono_s();
			rv = gs_history(f[0].c, &filter, &recs, &n);
			one[r] = gs_test_mono_s() - t0;
			if (rv != 0)
				break;
			rows_one += n;
			gs_history_free(recs, n);
			t0 = gs_test_mono_s();
			rv = gs_hosts_history(hosts, &filter, &recs, &which, &n);
			merged[r] = gs_test_mono_s() - t0;
			if (rv != 0)
				break;
			rows_merged += n;
			gs_hosts_history_free(recs, which, n);
		}
		if (rv == 0 && rows_one != rows_merged) {
			fprintf(stderr, "bench_hosts: %llu rows from one host, %llu merged\n",
			        (unsigned long long)rows_one, (unsigned long long)rows_merged);
			rv = GS_ERR_PROTOCOL;
		}
		if (rv == 0) {
			m1[p] = median(one, opt.rounds);
			m4[p] = median(merged, opt.rounds);
		}
	}
	gs_hosts_close(hosts);
	for (int i = 0; i < 1 + HOSTS; i++) {
		gs_dmabuf_free(&f[i].nop);
		gs_close(f[i].c);
	}
	for (int i = 0; i < started; i++) {
		gs_testd_stop(&d[i]);
		gs_testd_cleanup(&d[i]);
	}
	if (rv != 0 || !one) {
		fprintf(stderr, "bench_hosts: failed: %s\n", gs_status_name(rv));
		free(one);
		return 1;
	}
	FILE *out = opt.json ? stderr : stdout;
	fprintf(out,
	        "bench_hosts: %u packets on one host, or %u on each of %d (in turns of 64); %u "
	        "rounds of a page newest first and oldest first in turn, medians (target: merged "
	        "<= "
	        "2x)\n",
	        quarter * HOSTS, quarter, HOSTS, opt.rounds);
	fprintf(out, "%10s %14s %16s %8s\n", "page", "one host ms", "4 hosts merged", "ratio");
	for (uint32_t p = 0; p < npages; p++) {
		uint32_t limit = opt.limit ? opt.limit : pages[p];
		fprintf(out, "%10u %14.2f %16.2f %8.2f\n", limit, m1[p] * 1e3, m4[p] * 1e3,
		        m4[p] / m1[p]);
		if (opt.json)
			printf("{\"benchmark\":\"hosts\",\"packets\":%u,\"hosts\":%d,\"limit\":%u,"
			       "\"one_host_ms\":%.3f,\"merged_ms\":%.3f,\"ratio\":%.3f,\"target\":"
			       "2}\n",
			       quarter * HOSTS, HOSTS, limit, m1[p] * 1e3, m4[p] * 1e3,
			       m4[p] / m1[p]);
	}
	free(one);
	return 0;
}
