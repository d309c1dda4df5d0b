/*
 * bench_submit: what the daemon costs on top of its transport.
 *
 * In one run, for each transport (ipc://, tcp://127.0.0.1) and each client count (one thread
 * and one socket per client), it measures
 *
 *   echo    raw nng REQ/REP round trips against an in-process echo server served the way the
 *           daemon serves requests (one REP socket, N nng contexts, aio callbacks), with a
 *           message of exactly the size of a serialized Submit Request of one NOP;
 *   submit  gs_submit of that packet (NullRendering, one-NOP DMA buffer) through a real
 *           gpuschedd with its SQLite audit on; each client thread has its own device and
 *           context, and each answer means the SUBMITTED record is committed.
 *
 * With --completion it also measures, at each client count, a NOP submitted without
 * NullRendering and waited for (gs_packet_wait) until the client sees it COMPLETED: the
 * latency of the packet's whole life against the echo round trip (a NOP's engine time on the
 * emulator is a few microseconds; the targets are p50 <= 1.5x and p99 <= 3x at 8 clients),
 * and the same in one request: a Submit with wait_ms, answered at the packet's end.
 *
 * Every measurement runs after a warm-up and stops at --count requests (over all clients) or
 * --seconds, whichever comes first. It prints requests per second for both, their ratio and the
 * submit latency percentiles; with --json, one JSON object per line on stdout (the table then
 * goes to stderr).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "echo.h"
#include "itest.h"
#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "isa.h"
#include "testd.h"
#include "wddm.h"

#define MAX_CLIENTS     256
#define MAX_CONFIGS     16
#define CALL_TIMEOUT_MS 30000

typedef enum { T_IPC, T_TCP, T_COUNT } transport;
static const char *const transport_names[T_COUNT] = {"ipc", "tcp"};

typedef struct options {
	double seconds;
	uint64_t count;
	uint64_t warmup; /* per client */
	int nclients;
	int clients[MAX_CONFIGS];
	bool transports[T_COUNT];
	bool json;
	bool completion;
	bool audit_baseline;
	int ndaemon_args;
	const char *daemon_args[32];
} options;

/* One measurement's outcome. */
typedef struct measure {
	uint64_t requests;
	double seconds;
	double rps;
	double p50_us, p90_us, p99_us, max_us;
	/* The daemon's CPU time (all its threads) over the measurement, warm-up included, per
	 * request sent; 0 for the echo server, which runs in this process. */
	double daemon_cpu_us;
	int errors;
	char error[256];
} measure;

typedef struct result {
	transport tr;
	int clients;
	measure echo, submit, complete;
	measure complete1; /* --completion in one request: Submit with wait_ms */
	measure unaudited; /* --audit-baseline: submit on a daemon with --bench-null-audit */
} result;

/* ---- the payload ---- */

/* Size of the Submit Request a client sends: one NullRendering NOP on a context, with a
 * request id and handle of realistic width (2-byte varints, as after a few hundred calls). */
static size_t submit_request_size(void)
{
	uint8_t dma[GS_ISA_HEADER_SIZE];
	gs_isa_cmd nop = {.op = GS_OP_NOP};
	size_t dma_len = gs_isa_encode(&nop, dma, sizeof(dma));
	Gpusched__V1__SubmitRequest sr = GPUSCHED__V1__SUBMIT_REQUEST__INIT;
	sr.context = 300;
	sr.dma_buffer.data = dma;
	sr.dma_buffer.len = dma_len;
	sr.submit_flags = GS_SUBMIT_NULL_RENDERING;
	Gpusched__V1__Request rq = GPUSCHED__V1__REQUEST__INIT;
	rq.id = 1000;
	rq.body_case = GPUSCHED__V1__REQUEST__BODY_SUBMIT;
	rq.submit = &sr;
	size_t n = gpusched__v1__request__get_packed_size(&rq);
	uint8_t *buf = malloc(n);
	if (!buf)
		return n;
	/* Serialize for real: the figure is the bytes on the wire, not an estimate. */
	n = gpusched__v1__request__pack(&rq, buf);
	free(buf);
	return n;
}

/* ---- client threads ---- */

typedef enum { K_ECHO, K_SUBMIT, K_COMPLETE, K_COMPLETE1 } kind;

/* Where the clients wait for each other: each arrives, the main thread opens the gate once
 * every started client has arrived (a thread that could not be started is not waited for). */
typedef struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int arrived;
	bool open;
} gate;

static void gate_init(gate *g)
{
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->arrived = 0;
	g->open = false;
}

static void gate_destroy(gate *g)
{
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
}

static void gate_arrive(gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->arrived++;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

static void gate_open_when(gate *g, int n)
{
	pthread_mutex_lock(&g->mu);
	while (g->arrived < n)
		pthread_cond_wait(&g->cv, &g->mu);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

typedef struct run run;

typedef struct client {
	pthread_t thread;
	run *r;
	int index;
	uint64_t quota;
	uint64_t done;
	uint32_t *lat_ns; /* quota entries */
	double start, end;
	int error;
	char message[200];
} client;

struct run {
	kind k;
	const char *url;
	size_t payload;
	const options *o;
	int nclients;
	client *clients;
	gate ready; /* every client set up and warmed up: measuring starts */
	gate done;  /* every client measured: teardown may begin */
};

static void client_fail(client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void client_fail(client *cl, const char *fmt, ...)
{
	if (cl->error)
		return;
	cl->error = 1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cl->message, sizeof(cl->message), fmt, ap);
	va_end(ap);
}

/* What one client does per request; returns 0 or records why it failed. */
typedef struct session {
	/* echo */
	nng_socket sock;
	bool sock_open;
	/* submit */
	gs_client *gc;
	uint64_t device, context;
	gs_dmabuf dma;
} session;

static int echo_once(client *cl, session *s)
{
	nng_msg *m;
	int rv = nng_msg_alloc(&m, cl->r->payload);
	if (rv != 0) {
		client_fail(cl, "nng_msg_alloc: %s", nng_strerror(rv));
		return -1;
	}
	memset(nng_msg_body(m), 0x5a, cl->r->payload);
	rv = nng_sendmsg(s->sock, m, 0);
	if (rv != 0) {
		nng_msg_free(m);
		client_fail(cl, "echo send: %s", nng_strerror(rv));
		return -1;
	}
	rv = nng_recvmsg(s->sock, &m, 0);
	if (rv != 0) {
		client_fail(cl, "echo receive: %s", nng_strerror(rv));
		return -1;
	}
	size_t len = nng_msg_len(m);
	nng_msg_free(m);
	if (len != cl->r->payload) {
		client_fail(cl, "echo answered %zu bytes for %zu", len, cl->r->payload);
		return -1;
	}
	return 0;
}

static int submit_once(client *cl, session *s)
{
	gs_submit_result res;
	int rc = gs_submit(s->gc, s->context, &s->dma, GS_SUBMIT_NULL_RENDERING, &res);
	if (rc != 0) {
		client_fail(cl, "gs_submit: %s (%s)", gs_status_name(rc), gs_client_message(s->gc));
		return -1;
	}
	return 0;
}

/* A NOP that runs on the engine, and the wait until it is COMPLETED. */
static int complete_once(client *cl, session *s)
{
	gs_submit_result res;
	int rc = gs_submit(s->gc, s->context, &s->dma, 0, &res);
	gs_packet_state st = GS_PACKET_UNKNOWN;
	if (rc == 0)
		rc = gs_packet_wait(s->gc, res.packet, CALL_TIMEOUT_MS, &st, NULL);
	if (rc != 0 || st != GS_PACKET_COMPLETED) {
		client_fail(cl, "submit and wait: %s (%s), state %s", gs_status_name(rc),
		            gs_client_message(s->gc), gs_packet_state_name(st));
		return -1;
	}
	return 0;
}

/* The same in one round trip: a Submit answered at the packet's end (gs_submit_wait). */
static int complete1_once(client *cl, session *s)
{
	gs_submit_result res = {0};
	int rc = gs_submit_wait(s->gc, s->context, &s->dma, 0, CALL_TIMEOUT_MS, &res);
	if (rc != 0 || res.state != GS_PACKET_COMPLETED) {
		client_fail(cl, "submit waiting for its end: %s (%s), state %s", gs_status_name(rc),
		            gs_client_message(s->gc), gs_packet_state_name(res.state));
		return -1;
	}
	return 0;
}

static int session_open(client *cl, session *s)
{
	run *r = cl->r;
	memset(s, 0, sizeof(*s));
	if (r->k == K_ECHO) {
		int rv = nng_req0_open(&s->sock);
		if (rv == 0) {
			s->sock_open = true;
			rv = nng_socket_set_ms(s->sock, NNG_OPT_REQ_RESENDTIME,
			                       NNG_DURATION_INFINITE);
		}
		if (rv == 0)
			rv = nng_socket_set_ms(s->sock, NNG_OPT_RECVTIMEO, CALL_TIMEOUT_MS);
		if (rv == 0)
			rv = nng_socket_set_ms(s->sock, NNG_OPT_SENDTIMEO, CALL_TIMEOUT_MS);
		if (rv == 0)
			rv = nng_dial(s->sock, r->url, NULL, 0);
		if (rv != 0) {
			client_fail(cl, "echo client on %s: %s", r->url, nng_strerror(rv));
			return -1;
		}
		return 0;
	}
	char why[256] = "";
	int rc = gs_connect_ex(r->url, NULL, &s->gc, why, sizeof(why));
	if (rc != 0) {
		client_fail(cl, "gs_connect %s: %s", r->url, why);
		return -1;
	}
	gs_client_set_timeout(s->gc, CALL_TIMEOUT_MS);
	char name[32];
	snprintf(name, sizeof(name), "bench-%d", cl->index);
	rc = gs_device_create(s->gc, name, &s->device);
	if (rc == 0) {
		gs_context_desc cd;
		gs_context_desc_init(&cd, s->device, 0);
		rc = gs_context_create(s->gc, &cd, &s->context, NULL);
	}
	if (rc != 0) {
		client_fail(cl, "device/context: %s (%s)", gs_status_name(rc),
		            gs_client_message(s->gc));
		return -1;
	}
	gs_dmabuf_init(&s->dma);
	if (gs_dmabuf_nop(&s->dma) != 0) {
		client_fail(cl, "gs_dmabuf_nop failed");
		return -1;
	}
	return 0;
}

static void session_close(session *s)
{
	if (s->sock_open)
		nng_close(s->sock);
	if (s->gc) {
		if (s->device)
			gs_device_destroy(s->gc, s->device);
		gs_close(s->gc);
		gs_dmabuf_free(&s->dma);
	}
}

static void *client_main(void *arg)
{
	client *cl = arg;
	run *r = cl->r;
	int (*once)(client *, session *) = r->k == K_ECHO       ? echo_once
	                                   : r->k == K_SUBMIT   ? submit_once
	                                   : r->k == K_COMPLETE ? complete_once
	                                                        : complete1_once;
	session s;
	if (session_open(cl, &s) == 0)
		for (uint64_t i = 0; i < r->o->warmup && !cl->error; i++)
			once(cl, &s);

	gate_arrive(&r->ready);
	cl->start = gs_test_mono_s();
	double deadline = cl->start + r->o->seconds;
	while (!cl->error && cl->done < cl->quota) {
		uint64_t t0 = gs_test_mono_ns();
		if (once(cl, &s) != 0)
			break;
		uint64_t dt = gs_test_mono_ns() - t0;
		cl->lat_ns[cl->done++] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
		if (gs_test_mono_s() >= deadline)
			break;
	}
	cl->end = gs_test_mono_s();
	gate_arrive(&r->done);
	session_close(&s);
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static double percentile_us(const uint32_t *sorted, uint64_t n, double p)
{
	if (n == 0)
		return 0;
	uint64_t i = (uint64_t)(p * (double)(n - 1) + 0.5);
	return (double)sorted[i] / 1000.0;
}

/* Runs one measurement: nclients threads against url. */
static void measure_run(kind k, const char *url, size_t payload, int nclients, const options *o,
                        pid_t daemon, measure *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t cpu0 = daemon ? gs_test_proc_cpu_ns(daemon) : 0;
	run r = {.k = k, .url = url, .payload = payload, .o = o, .nclients = nclients};
	r.clients = calloc((size_t)nclients, sizeof(*r.clients));
	if (!r.clients) {
		out->errors = 1;
		snprintf(out->error, sizeof(out->error), "out of memory");
		return;
	}
	gate_init(&r.ready);
	gate_init(&r.done);
	int started = 0;
	for (int i = 0; i < nclients; i++) {
		client *cl = &r.clients[i];
		cl->r = &r;
		cl->index = i;
		cl->quota = o->count / (uint64_t)nclients +
		            ((uint64_t)i < o->count % (uint64_t)nclients);
		cl->lat_ns = malloc((cl->quota ? cl->quota : 1) * sizeof(*cl->lat_ns));
		if (!cl->lat_ns) {
			client_fail(cl, "out of memory");
			cl->quota = 0;
		}
	}
	for (int i = 0; i < nclients; i++) {
		if (pthread_create(&r.clients[i].thread, NULL, client_main, &r.clients[i]) != 0) {
			client_fail(&r.clients[i], "cannot start the client thread");
			break;
		}
		started++;
	}
	gate_open_when(&r.ready, started);
	gate_open_when(&r.done, started);
	for (int i = 0; i < started; i++)
		pthread_join(r.clients[i].thread, NULL);

	double first = 0, last = 0;
	uint64_t total = 0;
	for (int i = 0; i < nclients; i++) {
		client *cl = &r.clients[i];
		if (cl->start > 0 && (first == 0 || cl->start < first))
			first = cl->start;
		if (cl->end > last)
			last = cl->end;
		total += cl->done;
		if (cl->error && !out->errors)
			snprintf(out->error, sizeof(out->error), "client %d: %s", i, cl->message);
		out->errors += cl->error;
	}
	uint32_t *all = malloc((total ? total : 1) * sizeof(*all));
	if (all) {
		uint64_t n = 0;
		for (int i = 0; i < nclients; i++) {
			memcpy(all + n, r.clients[i].lat_ns, r.clients[i].done * sizeof(*all));
			n += r.clients[i].done;
		}
		qsort(all, total, sizeof(*all), cmp_u32);
		out->p50_us = percentile_us(all, total, 0.50);
		out->p90_us = percentile_us(all, total, 0.90);
		out->p99_us = percentile_us(all, total, 0.99);
		out->max_us = total ? (double)all[total - 1] / 1000.0 : 0;
		free(all);
	}
	out->requests = total;
	uint64_t sent = total + o->warmup * (uint64_t)nclients;
	if (daemon && sent)
		out->daemon_cpu_us =
		        (double)(gs_test_proc_cpu_ns(daemon) - cpu0) / 1000.0 / (double)sent;
	out->seconds = last > first ? last - first : 0;
	out->rps = out->seconds > 0 ? (double)total / out->seconds : 0;
	for (int i = 0; i < nclients; i++)
		free(r.clients[i].lat_ns);
	free(r.clients);
	gate_destroy(&r.ready);
	gate_destroy(&r.done);
}

/* ---- set-up ---- */

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_submit [OPTIONS]\n"
	        "Raw nng REQ/REP echo throughput vs NullRendering submit throughput through a "
	        "real\n"
	        "gpuschedd with its audit on, over ipc:// and tcp://127.0.0.1, at several client\n"
	        "counts (one thread and one socket per client), with the same payload size.\n\n"
	        "Options:\n"
	        "  --seconds S        time bound of each measurement (default 3)\n"
	        "  --count N          request bound of each measurement, over all clients\n"
	        "                     (default 20000); whichever bound is reached first ends it\n"
	        "  --warmup N         requests per client before measuring (default 200)\n"
	        "  --clients LIST     comma-separated client counts (default 1,8; at most %d)\n"
	        "  --transport LIST   ipc, tcp or ipc,tcp (default ipc,tcp)\n"
	        "  --daemon-arg ARG   pass ARG to gpuschedd (repeatable), e.g. --daemon-arg\n"
	        "                     --audit-sync-full\n"
	        "  --audit-baseline   also submit on a second daemon with --bench-null-audit\n"
	        "                     (audit records acknowledged, not written): what\n"
	        "                     auditing costs, as the ratio of the two\n"
	        "  --completion       also a NOP run on the engine and waited for until the\n"
	        "                     client sees it COMPLETED, against the echo round trip\n"
	        "  --json             one JSON object per line on stdout; the table goes to "
	        "stderr\n"
	        "  -h, --help         show this help\n\n"
	        "Exit status: 0 when every measurement ran without errors, 1 otherwise, 2 usage.\n",
	        MAX_CLIENTS);
}

static int parse_list(const char *text, options *o)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", text);
	o->nclients = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *end;
		long v = strtol(tok, &end, 10);
		if (*end || v < 1 || v > MAX_CLIENTS || o->nclients == MAX_CONFIGS)
			return -1;
		o->clients[o->nclients++] = (int)v;
	}
	return o->nclients ? 0 : -1;
}

static int parse_transports(const char *text, options *o)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", text);
	o->transports[T_IPC] = o->transports[T_TCP] = false;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "ipc"))
			o->transports[T_IPC] = true;
		else if (!strcmp(tok, "tcp"))
			o->transports[T_TCP] = true;
		else
			return -1;
	}
	return o->transports[T_IPC] || o->transports[T_TCP] ? 0 : -1;
}

static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.seconds = 3,
	               .count = 20000,
	               .warmup = 200,
	               .nclients = 2,
	               .clients = {1, 8},
	               .transports = {true, true}};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		} else if (!strcmp(a, "--completion")) {
			o->completion = true;
			continue;
		} else if (!strcmp(a, "--audit-baseline")) {
			o->audit_baseline = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "bench: %s needs a value\n", a);
			return -1;
		}
		i++;
		errno = 0;
		if (!strcmp(a, "--seconds")) {
			o->seconds = strtod(v, &end);
			if (*end || errno || !(o->seconds > 0 && o->seconds <= 3600))
				goto bad;
		} else if (!strcmp(a, "--count")) {
			o->count = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->count == 0 || o->count > 100000000)
				goto bad;
		} else if (!strcmp(a, "--warmup")) {
			o->warmup = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || o->warmup > 1000000)
				goto bad;
		} else if (!strcmp(a, "--clients")) {
			if (parse_list(v, o) != 0)
				goto bad;
		} else if (!strcmp(a, "--transport")) {
			if (parse_transports(v, o) != 0)
				goto bad;
		} else if (!strcmp(a, "--daemon-arg")) {
			if (o->ndaemon_args >= 28)
				goto bad;
			o->daemon_args[o->ndaemon_args++] = v;
		} else {
			fprintf(stderr, "bench: unknown option %s\n", a);
			return -1;
		}
		continue;
	bad:
		fprintf(stderr, "bench: bad value for %s: %s\n", a, v);
		return -1;
	}
	return 0;
}

/* ---- output ---- */

static void print_table(FILE *out, const result *res, int n, size_t payload, const options *o)
{
	fprintf(out,
	        "\nbench_submit: payload %zu bytes (serialized Submit Request, one NOP), %.1f s or "
	        "%" PRIu64 " requests per measurement, %" PRIu64 " warm-up requests per client, "
	        "%ld CPUs\n\n",
	        payload, o->seconds, o->count, o->warmup, sysconf(_SC_NPROCESSORS_ONLN));
	fprintf(out, "%-9s %7s %12s %12s %7s %9s %9s %9s %9s %11s\n", "transport", "clients",
	        "echo req/s", "submit req/s", "ratio", "echo p50", "sub p50", "sub p99", "sub max",
	        "daemon CPU");
	for (int i = 0; i < n; i++) {
		const result *r = &res[i];
		double ratio = r->echo.rps > 0 ? r->submit.rps / r->echo.rps : 0;
		fprintf(out,
		        "%-9s %7d %12.0f %12.0f %7.3f %7.1fus %7.1fus %7.1fus %7.1fus "
		        "%6.1fus/req%s\n",
		        transport_names[r->tr], r->clients, r->echo.rps, r->submit.rps, ratio,
		        r->echo.p50_us, r->submit.p50_us, r->submit.p99_us, r->submit.max_us,
		        r->submit.daemon_cpu_us,
		        r->echo.errors || r->submit.errors ? "  (errors)" : "");
	}
	for (int i = 0; i < n; i++) {
		if (res[i].clients != 1)
			continue;
		fprintf(out,
		        "\nsubmit latency, 1 client, %s: p50 %.1f us, p90 %.1f us, p99 %.1f us "
		        "(echo p50 %.1f us, p99 %.1f us)",
		        transport_names[res[i].tr], res[i].submit.p50_us, res[i].submit.p90_us,
		        res[i].submit.p99_us, res[i].echo.p50_us, res[i].echo.p99_us);
	}
	fprintf(out, "\n");
	for (int i = 0; o->completion && i < n; i++) {
		const result *r = &res[i];
		fprintf(out,
		        "submit -> COMPLETED seen by the client, %d client%s, %s: p50 %.1f us "
		        "(%.2fx "
		        "echo p50; target <= 1.5x), p99 %.1f us (%.2fx echo p99; target <= 3x)%s\n",
		        r->clients, r->clients == 1 ? "" : "s", transport_names[r->tr],
		        r->complete.p50_us,
		        r->echo.p50_us > 0 ? r->complete.p50_us / r->echo.p50_us : 0,
		        r->complete.p99_us,
		        r->echo.p99_us > 0 ? r->complete.p99_us / r->echo.p99_us : 0,
		        r->complete.errors ? "  (errors)" : "");
		fprintf(out,
		        "  the same in one request (Submit with wait_ms): p50 %.1f us (%.2fx), p99 "
		        "%.1f us (%.2fx)%s\n",
		        r->complete1.p50_us,
		        r->echo.p50_us > 0 ? r->complete1.p50_us / r->echo.p50_us : 0,
		        r->complete1.p99_us,
		        r->echo.p99_us > 0 ? r->complete1.p99_us / r->echo.p99_us : 0,
		        r->complete1.errors ? "  (errors)" : "");
	}
	for (int i = 0; o->audit_baseline && i < n; i++) {
		const result *r = &res[i];
		fprintf(out,
		        "audit on vs a null audit sink, %d client%s, %s: %.0f vs %.0f req/s, ratio "
		        "%.3f; the null-audit daemon vs echo %.3f (target >= 0.7 at 8 and 64 "
		        "clients); daemon CPU %.1f vs %.1f us per request%s\n",
		        r->clients, r->clients == 1 ? "" : "s", transport_names[r->tr],
		        r->submit.rps, r->unaudited.rps,
		        r->unaudited.rps > 0 ? r->submit.rps / r->unaudited.rps : 0,
		        r->echo.rps > 0 ? r->unaudited.rps / r->echo.rps : 0,
		        r->submit.daemon_cpu_us, r->unaudited.daemon_cpu_us,
		        r->unaudited.errors ? "  (errors)" : "");
	}
	for (int i = 0; i < n; i++) {
		if (res[i].complete.errors)
			fprintf(out, "completion %s x%d: %d client(s) failed; first: %s\n",
			        transport_names[res[i].tr], res[i].clients, res[i].complete.errors,
			        res[i].complete.error);
		if (res[i].echo.errors)
			fprintf(out, "echo %s x%d: %d client(s) failed; first: %s\n",
			        transport_names[res[i].tr], res[i].clients, res[i].echo.errors,
			        res[i].echo.error);
		if (res[i].submit.errors)
			fprintf(out, "submit %s x%d: %d client(s) failed; first: %s\n",
			        transport_names[res[i].tr], res[i].clients, res[i].submit.errors,
			        res[i].submit.error);
	}
}

static void print_json(const result *r, size_t payload)
{
	if (r->unaudited.requests)
		printf("{\"bench\":\"audit_cost\",\"transport\":\"%s\",\"clients\":%d,"
		       "\"audited_rps\":%.1f,\"unaudited_rps\":%.1f,\"ratio\":%.4f,\"errors\":%d,"
		       "\"audited_daemon_cpu_us\":%.2f,\"unaudited_daemon_cpu_us\":%.2f,"
		       "\"unaudited_vs_echo\":%.4f}\n",
		       transport_names[r->tr], r->clients, r->submit.rps, r->unaudited.rps,
		       r->unaudited.rps > 0 ? r->submit.rps / r->unaudited.rps : 0,
		       r->unaudited.errors, r->submit.daemon_cpu_us, r->unaudited.daemon_cpu_us,
		       r->echo.rps > 0 ? r->unaudited.rps / r->echo.rps : 0);
	if (r->complete.requests)
		printf("{\"bench\":\"completion\",\"transport\":\"%s\",\"clients\":%d,"
		       "\"complete_p50_us\":%.2f,\"complete_p99_us\":%.2f,\"echo_p50_us\":%.2f,"
		       "\"echo_p99_us\":%.2f,\"ratio_p50\":%.4f,\"ratio_p99\":%.4f,\"errors\":%d,"
		       "\"one_request_p50_us\":%.2f,\"one_request_p99_us\":%.2f}\n",
		       transport_names[r->tr], r->clients, r->complete.p50_us, r->complete.p99_us,
		       r->echo.p50_us, r->echo.p99_us,
		       r->echo.p50_us > 0 ? r->complete.p50_us / r->echo.p50_us : 0,
		       r->echo.p99_us > 0 ? r->complete.p99_us / r->echo.p99_us : 0,
		       r->complete.errors + r->complete1.errors, r->complete1.p50_us,
		       r->complete1.p99_us);
	double ratio = r->echo.rps > 0 ? r->submit.rps / r->echo.rps : 0;
	printf("{\"bench\":\"submit\",\"transport\":\"%s\",\"clients\":%d,\"payload_bytes\":%zu,"
	       "\"echo_rps\":%.1f,\"echo_requests\":%" PRIu64 ",\"echo_seconds\":%.3f,"
	       "\"echo_p50_us\":%.2f,\"echo_p99_us\":%.2f,"
	       "\"submit_rps\":%.1f,\"submit_requests\":%" PRIu64 ",\"submit_seconds\":%.3f,"
	       "\"submit_p50_us\":%.2f,\"submit_p90_us\":%.2f,\"submit_p99_us\":%.2f,"
	       "\"submit_max_us\":%.2f,\"ratio\":%.4f,\"errors\":%d,\"daemon_cpu_us\":%.2f}\n",
	       transport_names[r->tr], r->clients, payload, r->echo.rps, r->echo.requests,
	       r->echo.seconds, r->echo.p50_us, r->echo.p99_us, r->submit.rps, r->submit.requests,
	       r->submit.seconds, r->submit.p50_us, r->submit.p90_us, r->submit.p99_us,
	       r->submit.max_us, ratio, r->echo.errors + r->submit.errors, r->submit.daemon_cpu_us);
}

/* ---- main ---- */

static int run_echo(const options *o, size_t payload, result *res, int nres)
{
	char dir[] = "/tmp/gpusched-bench-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("bench: mkdtemp");
		return -1;
	}
	char urls[T_COUNT][320];
	snprintf(urls[T_IPC], sizeof(urls[T_IPC]), "ipc://%s/echo.sock", dir);
	int maxc = 1;
	for (int i = 0; i < o->nclients; i++)
		maxc = o->clients[i] > maxc ? o->clients[i] : maxc;
	/* As many contexts as the daemon keeps receiving by default, or one per client. */
	int nworkers = maxc > 16 ? maxc : 16;
	gs_echo_server e;
	int rv = -1;
	for (int attempt = 0; attempt < 5 && rv != 0; attempt++) {
		int port = itest_free_port();
		if (port == 0)
			continue;
		snprintf(urls[T_TCP], sizeof(urls[T_TCP]), "tcp://127.0.0.1:%d", port);
		const char *list[] = {urls[T_IPC], urls[T_TCP]};
		rv = gs_echo_start(&e, list, 2, nworkers);
	}
	if (rv != 0) {
		fprintf(stderr, "bench: cannot start the echo server\n");
		rmdir(dir);
		return -1;
	}
	for (int i = 0; i < nres; i++)
		measure_run(K_ECHO, urls[res[i].tr], payload, res[i].clients, o, 0, &res[i].echo);
	gs_echo_stop(&e);
	char sock[400];
	snprintf(sock, sizeof(sock), "%s/echo.sock", dir);
	unlink(sock);
	rmdir(dir);
	return 0;
}

/* Submit (and --completion) measurements on a daemon of its own; with null_audit on one
 * started with --bench-null-audit, into each result's `unaudited`. */
static int run_submit(const options *o, size_t payload, result *res, int nres, bool null_audit)
{
	gs_testd d;
	char tcp_url[64] = "";
	int rc = -1;
	for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
		int port = itest_free_port();
		if (port == 0)
			continue;
		snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", port);
		const char *args[40] = {"--listen", tcp_url};
		int n = 2;
		for (int i = 0; i < o->ndaemon_args; i++)
			args[n++] = o->daemon_args[i];
		if (null_audit)
			args[n++] = "--bench-null-audit";
		args[n] = NULL;
		rc = gs_testd_start(&d, args);
		if (rc != 0)
			gs_testd_cleanup(&d);
	}
	if (rc != 0) {
		fprintf(stderr, "bench: cannot start gpuschedd\n");
		return -1;
	}
	fprintf(stderr, "bench: gpuschedd pid %d, %s and %s, audit %s\n", (int)d.pid, d.url,
	        tcp_url, d.db);
	for (int i = 0; i < nres; i++) {
		const char *url = res[i].tr == T_IPC ? d.url : tcp_url;
		measure_run(K_SUBMIT, url, payload, res[i].clients, o, d.pid,
		            null_audit ? &res[i].unaudited : &res[i].submit);
		if (o->completion && !null_audit) {
			measure_run(K_COMPLETE, url, payload, res[i].clients, o, d.pid,
			            &res[i].complete);
			measure_run(K_COMPLETE1, url, payload, res[i].clients, o, d.pid,
			            &res[i].complete1);
		}
	}

	gs_client *c;
	if (gs_connect(d.url, NULL, &c) == 0) {
		gs_daemon_stats st;
		if (gs_stats(c, &st) == 0) {
			FILE *out = o->json ? stderr : stdout;
			fprintf(out,
			        "daemon: %" PRIu64 " requests, %" PRIu64
			        " packets submitted, %" PRIu64 " completed, %" PRIu64
			        " audit records in %" PRIu64 " commits (%.1f records per commit)\n",
			        st.requests, st.packets_submitted, st.packets_completed,
			        st.audit_records, st.audit_commits,
			        st.audit_commits
			                ? (double)st.audit_records / (double)st.audit_commits
			                : 0.0);
			if (o->json)
				printf("{\"bench\":\"submit_daemon\",\"requests\":%" PRIu64
				       ",\"packets_submitted\":%" PRIu64
				       ",\"packets_completed\":%" PRIu64
				       ",\"audit_records\":%" PRIu64 ",\"audit_commits\":%" PRIu64
				       "}\n",
				       st.requests, st.packets_submitted, st.packets_completed,
				       st.audit_records, st.audit_commits);
		}
		gs_close(c);
	}
	rc = gs_testd_stop(&d);
	if (rc != 0) {
		fprintf(stderr, "bench: gpuschedd exited with status %d\n", rc);
		gs_testd_dump_log(&d);
	}
	gs_testd_cleanup(&d);
	return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	options o;
	if (parse_args(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	size_t payload = submit_request_size();
	result res[T_COUNT * MAX_CONFIGS];
	int nres = 0;
	for (int t = 0; t < T_COUNT; t++) {
		if (!o.transports[t])
			continue;
		for (int i = 0; i < o.nclients; i++)
			res[nres++] = (result){.tr = (transport)t, .clients = o.clients[i]};
	}

	/* Echo first, then the daemon: neither competes with the other for the CPUs. */
	int fail = 0;
	if (run_echo(&o, payload, res, nres) != 0)
		fail = 1;
	if (run_submit(&o, payload, res, nres, false) != 0)
		fail = 1;
	if (o.audit_baseline && run_submit(&o, payload, res, nres, true) != 0)
		fail = 1;

	print_table(o.json ? stderr : stdout, res, nres, payload, &o);
	for (int i = 0; i < nres; i++) {
		if (o.json)
			print_json(&res[i], payload);
		if (res[i].echo.errors || res[i].submit.errors || res[i].complete.errors ||
		    res[i].unaudited.errors)
			fail = 1;
	}
	return fail;
}
