/*
 * bench_relay: what gpusched-relay costs a guest process, as ratios measured in one run.
 *
 * One gpuschedd with a VM tenant listens on tls+tcp:// (mutual TLS, certificates made now with
 * the openssl CLI) and on ipc://; one gpusched-relay forwards a guest's requests to it over the
 * TLS link. The same work is timed three ways, in interleaved blocks so that noise falls on all
 * of them alike:
 *
 *   relay   a guest process on the relay's ipc:// socket (guest -> relay -> TLS -> daemon);
 *   direct  a client on the daemon's tls+tcp:// listener with the VM's token (the link the
 *           relay itself uses): the baseline of the ratio (target relay/direct <= 1.5);
 *   ipc     a client on the daemon's ipc:// socket, for reference.
 *
 * The work is one NullRendering NOP submitted and acknowledged (gs_submit: the daemon answers
 * once its SUBMITTED record is committed), and one Info round trip. Bounded by --rounds and
 * --seconds. Options: --rounds N (per way and kind, default 2000), --seconds S (default 20),
 * --json (one object on stdout).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

#define BLOCK 50u

enum { W_RELAY, W_DIRECT, W_IPC, NWAYS };
static const char *const way_names[NWAYS] = {"relay", "direct", "ipc"};

typedef struct way {
	gs_client *c;
	uint64_t ctx;
	double *submit_us, *info_us;
	unsigned n;
} way;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, unsigned n, double p)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return n ? v[(unsigned)((n - 1) * p)] : 0;
}

static gs_client *connect_or_die(const char *url, const char *token)
{
	gs_client *c;
	char why[256] = "";
	if (gs_connect_ex(url, token, &c, why, sizeof(why)) != 0) {
		fprintf(stderr, "bench_relay: cannot connect to %s: %s\n", url, why);
		exit(1);
	}
	gs_client_set_timeout(c, 30000);
	return c;
}

static void way_open(way *w, const char *url, const char *token, unsigned rounds)
{
	w->c = connect_or_die(url, token);
	uint64_t dev;
	if (gs_device_create(w->c, "bench", &dev) != 0) {
		fprintf(stderr, "bench_relay: device on %s: %s\n", url, gs_client_message(w->c));
		exit(1);
	}
	itest_layout l;
	itest_layout_of(w->c, &l);
	w->ctx = itest_context(w->c, dev, 0, l.paging_node);
	w->submit_us = calloc(rounds, sizeof(double));
	w->info_us = calloc(rounds, sizeof(double));
}

/* One block of BLOCK submits and BLOCK infos on w; false when a call fails. */
static bool way_block(way *w, const gs_dmabuf *nop, unsigned rounds)
{
	for (unsigned i = 0; i < BLOCK && w->n < rounds; i++, w->n++) {
		uint64_t t0 = gs_test_mono_ns();
		if (gs_submit(w->c, w->ctx, nop, GS_SUBMIT_NULL_RENDERING, NULL) != 0)
			return false;
		uint64_t t1 = gs_test_mono_ns();
		gs_daemon_info *di = NULL;
		if (gs_info(w->c, &di) != 0)
			return false;
		uint64_t t2 = gs_test_mono_ns();
		gs_info_free(di);
		w->submit_us[w->n] = (double)(t1 - t0) / 1e3;
		w->info_us[w->n] = (double)(t2 - t1) / 1e3;
	}
	return true;
}

int main(int argc, char **argv)
{
	unsigned rounds = 2000;
	double seconds = 20;
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = strtod(argv[++i], NULL);
		else if (!strcmp(argv[i], "--json"))
			json = true;
		else {
			bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
			fprintf(help ? stdout : stderr,
			        "Usage: bench_relay [--rounds N] [--seconds S] [--json]\n"
			        "A guest's round trip through gpusched-relay vs the same client on "
			        "the\n"
			        "daemon's TLS listener (target <= 1.5x), and on its ipc:// "
			        "socket.\n");
			return help ? 0 : 2;
		}
	}
	if (rounds < BLOCK)
		rounds = BLOCK;
	signal(SIGPIPE, SIG_IGN);

	itest_pki k;
	itest_pki_make(&k);
	setenv("GPUSCHED_TLS_CA", k.ca, 1);
	setenv("GPUSCHED_TLS_CERT_KEY", k.client, 1);
	char json_cfg[1024], tls_url[64];
	snprintf(json_cfg, sizeof(json_cfg),
	         "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"}, \"tenants\": ["
	         "{\"name\": \"vm\", \"token\": \"tok-vm\", \"kind\": \"vm\"}]}",
	         k.server, k.ca);
	itest_config cfg;
	if (itest_config_write(&cfg, json_cfg) != 0)
		return 1;
	snprintf(tls_url, sizeof(tls_url), "tls+tcp://127.0.0.1:%u", itest_free_port());
	const char *const dargs[] = {"--config", cfg.path, "--listen", tls_url, NULL};
	gs_testd d;
	if (gs_testd_start(&d, dargs) != 0)
		return 1;
	char tok[320], rurl[320];
	snprintf(tok, sizeof(tok), "%s/vm.token", d.dir);
	FILE *t = fopen(tok, "w");
	fprintf(t, "tok-vm\n");
	fclose(t);
	snprintf(rurl, sizeof(rurl), "ipc://%s/relay.sock", d.dir);
	const char *const rargs[] = {GS_RELAY_PATH, "--host",       tls_url, "--listen",
	                             rurl,          "--token-file", tok,     NULL};
	gs_testd relay;
	if (gs_testd_spawn(&relay, d.dir, "relay", rargs) != 0)
		return 1;

	way w[NWAYS] = {0};
	way_open(&w[W_RELAY], rurl, "", rounds);
	way_open(&w[W_DIRECT], tls_url, "tok-vm", rounds);
	way_open(&w[W_IPC], d.url, "tok-vm", rounds);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	gs_dmabuf_nop(&nop);
	/* Warm every path (TLS session, caches) before measuring. */
	for (int i = 0; i < NWAYS; i++) {
		unsigned keep = w[i].n;
		way_block(&w[i], &nop, rounds);
		w[i].n = keep;
	}
	double end = gs_test_mono_s() + seconds;
	bool ok = true;
	while (ok && w[W_IPC].n < rounds && gs_test_mono_s() < end)
		for (int i = 0; i < NWAYS && ok; i++)
			ok = way_block(&w[i], &nop, rounds);
	if (!ok)
		fprintf(stderr, "bench_relay: a call failed; figures cover what was measured\n");

	double p50[NWAYS][2], p99[NWAYS][2];
	for (int i = 0; i < NWAYS; i++) {
		p50[i][0] = pct(w[i].submit_us, w[i].n, 0.5);
		p99[i][0] = pct(w[i].submit_us, w[i].n, 0.99);
		p50[i][1] = pct(w[i].info_us, w[i].n, 0.5);
		p99[i][1] = pct(w[i].info_us, w[i].n, 0.99);
	}
	FILE *tab = json ? stderr : stdout;
	fprintf(tab, "%u rounds per way, interleaved in blocks of %u\n", w[W_IPC].n, BLOCK);
	fprintf(tab, "%-22s %12s %12s %12s %14s\n", "round trip (us)", way_names[W_RELAY],
	        way_names[W_DIRECT], way_names[W_IPC], "relay/direct");
	for (int k2 = 0; k2 < 2; k2++) {
		fprintf(tab, "%-22s %12.1f %12.1f %12.1f %13.2fx%s\n",
		        k2 ? "info p50" : "submit p50", p50[W_RELAY][k2], p50[W_DIRECT][k2],
		        p50[W_IPC][k2], p50[W_RELAY][k2] / p50[W_DIRECT][k2],
		        k2 ? "" : "   (target <= 1.5x)");
		fprintf(tab, "%-22s %12.1f %12.1f %12.1f %13.2fx\n", k2 ? "info p99" : "submit p99",
		        p99[W_RELAY][k2], p99[W_DIRECT][k2], p99[W_IPC][k2],
		        p99[W_RELAY][k2] / p99[W_DIRECT][k2]);
	}
	if (json)
		printf("{\"bench\":\"relay\",\"rounds\":%u,"
		       "\"submit_p50_us\":{\"relay\":%.1f,\"direct\":%.1f,\"ipc\":%.1f},"
		       "\"submit_p99_us\":{\"relay\":%.1f,\"direct\":%.1f,\"ipc\":%.1f},"
		       "\"info_p50_us\":{\"relay\":%.1f,\"direct\":%.1f,\"ipc\":%.1f},"
		       "\"submit_p50_ratio\":%.3f,\"info_p50_ratio\":%.3f}\n",
		       w[W_IPC].n, p50[W_RELAY][0], p50[W_DIRECT][0], p50[W_IPC][0],
		       p99[W_RELAY][0], p99[W_DIRECT][0], p99[W_IPC][0], p50[W_RELAY][1],
		       p50[W_DIRECT][1], p50[W_IPC][1], p50[W_RELAY][0] / p50[W_DIRECT][0],
		       p50[W_RELAY][1] / p50[W_DIRECT][1]);

	gs_dmabuf_free(&nop);
	for (int i = 0; i < NWAYS; i++) {
		gs_close(w[i].c);
		free(w[i].submit_us);
		free(w[i].info_us);
	}
	gs_testd_stop(&relay);
	gs_testd_stop(&d);
	gs_testd_cleanup(&d);
	itest_config_cleanup(&cfg);
	itest_sh("rm -rf '%s'", k.dir);
	return ok ? 0 : 1;
}
