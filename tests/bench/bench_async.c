/*
 * bench_async: pipelined submission from one client thread against the same transport
 * pipelined, in one run.
 *
 *   echo      raw nng: one REQ socket with K contexts, each with an aio whose callback sends the
 *             next request as soon as the answer came, against an in-process REP echo server
 *             with K contexts; the message is exactly a serialized Submit Request of one NOP;
 *   callback  gs_async_submit of that packet (NullRendering, one NOP) through a real gpuschedd
 *             with its audit on, K in flight on one gs_client; each completion callback starts
 *             the next submission;
 *   queue     the same with the completions read by the one client thread (gs_async_poll),
 *             which starts the next submissions.
 *
 * Each measurement starts after a warm-up and runs to --count requests. It prints requests per
 * second and the ratio of each submit mode to echo; with --json one JSON object on stdout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
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

#define MAX_INFLIGHT 1024
#define BOUND_S      120.0 /* a measurement that takes longer has failed */

typedef struct options {
	uint64_t count;
	uint64_t warmup;
	int inflight;
	bool tcp;
	bool json;
	int ndaemon_args;
	const char *daemon_args[8];
} options;

/* Requests per second of one measurement, or an error. */
typedef struct measure {
	double rps;
	double seconds;
	uint64_t requests;
	char error[256];
} measure;

/* The bytes a client sends for one NullRendering NOP (a request id and handle of realistic
 * width), serialized for real. */
static size_t payload_size(void)
{
	uint8_t dma[GS_ISA_HEADER_SIZE];
	gs_isa_cmd nop = {.op = GS_OP_NOP};
	Gpusched__V1__SubmitRequest sr = GPUSCHED__V1__SUBMIT_REQUEST__INIT;
	Gpusched__V1__Request rq = GPUSCHED__V1__REQUEST__INIT;

	sr.context = 300;
	sr.dma_buffer.data = dma;
	sr.dma_buffer.len = gs_isa_encode(&nop, dma, sizeof(dma));
	sr.submit_flags = GS_SUBMIT_NULL_RENDERING;
	rq.id = 1000;
	rq.body_case = GPUSCHED__V1__REQUEST__BODY_SUBMIT;
	rq.submit = &sr;
	return gpusched__v1__request__get_packed_size(&rq);
}

/* ---- completion counting shared by every mode ---- */

typedef struct counter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	atomic_uint_fast64_t started, done;
	uint64_t total;
	atomic_int failed;
	char error[256];
} counter;

static void counter_setup(counter *k)
{
	pthread_condattr_t a;

	pthread_mutex_init(&k->mu, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&k->cv, &a);
	pthread_condattr_destroy(&a);
}

/* Starts a phase of `total` requests (no callback of an earlier phase runs any more). */
static void counter_reset(counter *k, uint64_t total)
{
	atomic_store(&k->started, 0);
	atomic_store(&k->done, 0);
	atomic_store(&k->failed, 0);
	k->total = total;
	k->error[0] = '\0';
}

static void counter_destroy(counter *k)
{
	pthread_mutex_destroy(&k->mu);
	pthread_cond_destroy(&k->cv);
}

/* Claims the right to start one more request. */
static bool counter_claim(counter *k)
{
	return atomic_fetch_add(&k->started, 1) < k->total;
}

static void counter_done(counter *k, const char *error)
{
	if (error && atomic_fetch_add(&k->failed, 1) == 0)
		snprintf(k->error, sizeof(k->error), "%.*s", (int)sizeof(k->error) - 1, error);
	if (atomic_fetch_add(&k->done, 1) + 1 >= k->total || error) {
		pthread_mutex_lock(&k->mu);
		pthread_cond_broadcast(&k->cv);
		pthread_mutex_unlock(&k->mu);
	}
}

/* Waits (bounded) until every request completed or one failed. */
static void counter_wait(counter *k, uint64_t completions)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)BOUND_S;
	pthread_mutex_lock(&k->mu);
	while (atomic_load(&k->done) < completions && !atomic_load(&k->failed))
		if (pthread_cond_timedwait(&k->cv, &k->mu, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&k->mu);
}

/* ---- echo: server and pipelined client ---- */

typedef struct echo_ctx {
	nng_ctx ctx;
	nng_aio *aio;
	bool sending;
	counter *k; /* client side */
	size_t payload;
} echo_ctx;

static int echo_send(echo_ctx *e)
{
	nng_msg *m;
	int rv = nng_msg_alloc(&m, e->payload);

	if (rv != 0)
		return rv;
	memset(nng_msg_body(m), 0x5a, e->payload);
	nng_aio_set_msg(e->aio, m);
	e->sending = true;
	nng_ctx_send(e->ctx, e->aio);
	return 0;
}

static void echo_client_cb(void *arg)
{
	echo_ctx *e = arg;
	int rv = nng_aio_result(e->aio);
	char why[128];

	if (rv != 0) {
		if (e->sending) {
			nng_msg_free(nng_aio_get_msg(e->aio));
			nng_aio_set_msg(e->aio, NULL);
		}
		snprintf(why, sizeof(why), "echo %s: %s", e->sending ? "send" : "receive",
		         nng_strerror(rv));
		counter_done(e->k, why);
		return;
	}
	if (e->sending) {
		e->sending = false;
		nng_ctx_recv(e->ctx, e->aio);
		return;
	}
	nng_msg *m = nng_aio_get_msg(e->aio);
	nng_aio_set_msg(e->aio, NULL);
	bool ok = nng_msg_len(m) == e->payload;
	nng_msg_free(m);
	counter_done(e->k, ok ? NULL : "echo answered another size");
	if (ok && counter_claim(e->k) && echo_send(e) != 0)
		counter_done(e->k, "echo: out of memory");
}

static void run_echo(const char *url, size_t payload, const options *o, measure *out)
{
	nng_socket cli = NNG_SOCKET_INITIALIZER;
	gs_echo_server srv;
	echo_ctx *c = calloc((size_t)o->inflight, sizeof(*c));
	counter k;
	int rv;

	memset(out, 0, sizeof(*out));
	counter_setup(&k);
	if (!c || gs_echo_start(&srv, &url, 1, o->inflight) != 0) {
		counter_destroy(&k);
		snprintf(out->error, sizeof(out->error), "cannot set up the echo server");
		free(c);
		return;
	}
	rv = nng_req0_open(&cli);
	if (rv == 0)
		rv = nng_socket_set_ms(cli, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if (rv == 0)
		rv = nng_dial(cli, url, NULL, 0);
	for (int i = 0; rv == 0 && i < o->inflight; i++) {
		c[i].k = &k;
		c[i].payload = payload;
		rv = nng_ctx_open(&c[i].ctx, cli);
		if (rv == 0)
			rv = nng_aio_alloc(&c[i].aio, echo_client_cb, &c[i]);
	}
	if (rv != 0) {
		snprintf(out->error, sizeof(out->error), "echo on %.150s: %s", url,
		         nng_strerror(rv));
		goto done;
	}
	for (int phase = 0; phase < 2; phase++) { /* warm-up, then the measurement */
		uint64_t total = phase ? o->count : o->warmup;
		double t0;

		counter_reset(&k, total);
		t0 = gs_test_mono_s();
		for (int i = 0; i < o->inflight && counter_claim(&k); i++)
			if (echo_send(&c[i]) != 0)
				counter_done(&k, "echo: out of memory");
		counter_wait(&k, total);
		out->seconds = gs_test_mono_s() - t0;
		out->requests = atomic_load(&k.done);
		if (atomic_load(&k.failed) || out->requests < total) {
			snprintf(out->error, sizeof(out->error), "%s",
			         k.error[0] ? k.error : "echo did not finish in time");
			for (int i = 0; i < o->inflight; i++)
				nng_aio_stop(c[i].aio);
			goto done;
		}
		/* Every context is idle once the last answer has been counted... nearly: the
		 * callback that counted it may still be returning. */
		for (int i = 0; i < o->inflight; i++)
			nng_aio_wait(c[i].aio);
	}
	out->rps = out->seconds > 0 ? (double)out->requests / out->seconds : 0;
done:
	for (int i = 0; i < o->inflight; i++)
		if (c[i].aio)
			nng_aio_stop(c[i].aio);
	nng_close(cli);
	gs_echo_stop(&srv);
	for (int i = 0; i < o->inflight; i++)
		nng_aio_free(c[i].aio);
	counter_destroy(&k);
	free(c);
}

/* ---- submit: callback and queue modes ---- */

typedef struct submitter {
	gs_client *c;
	uint64_t context;
	gs_dmabuf dma;
	/* Warm-up and measurement each have their own: a callback of the warm-up may still be
	 * returning when the measurement starts. Released after gs_close (callbacks done). */
	counter phases[2];
	counter *k; /* the current phase's */
	gs_async_opts opts;
} submitter;

static int submit_one(submitter *s)
{
	return gs_async_submit(s->c, s->context, &s->dma, GS_SUBMIT_NULL_RENDERING, &s->opts, NULL);
}

static void submit_cb(const gs_async_event *ev)
{
	submitter *s = ev->user;
	char why[GS_ASYNC_MESSAGE_MAX + 32];

	if (ev->status != 0) {
		snprintf(why, sizeof(why), "%s: %.500s", gs_status_name(ev->status), ev->message);
		counter_done(s->k, why);
		return;
	}
	counter_done(s->k, NULL);
	if (counter_claim(s->k) && submit_one(s) != 0)
		counter_done(s->k, "gs_async_submit refused");
}

/* One phase in callback mode: the callbacks keep `inflight` submissions going. */
static void phase_callback(submitter *s, uint64_t total, int inflight, measure *out)
{
	double t0;

	counter_reset(s->k, total);
	t0 = gs_test_mono_s();
	for (int i = 0; i < inflight && counter_claim(s->k); i++)
		if (submit_one(s) != 0)
			counter_done(s->k, "gs_async_submit refused");
	counter_wait(s->k, total);
	out->seconds = gs_test_mono_s() - t0;
	out->requests = atomic_load(&s->k->done);
	if (atomic_load(&s->k->failed) || out->requests < total)
		snprintf(out->error, sizeof(out->error), "%s",
		         s->k->error[0] ? s->k->error : "the submissions did not finish in time");
}

/* One phase in queue mode: this thread polls and starts the next ones. */
static void phase_queue(submitter *s, gs_async_queue *q, uint64_t total, int inflight, measure *out)
{
	gs_async_event evs[64];
	uint64_t started = 0, done = 0;
	double t0 = gs_test_mono_s();

	while (done < total) {
		while (started < total && started - done < (uint64_t)inflight) {
			if (submit_one(s) != 0) {
				snprintf(out->error, sizeof(out->error), "gs_async_submit refused");
				return;
			}
			started++;
		}
		int n = gs_async_poll(q, evs, 64, (int)(BOUND_S * 1000));
		if (n <= 0) {
			snprintf(out->error, sizeof(out->error), "no completion in time");
			return;
		}
		for (int i = 0; i < n; i++)
			if (evs[i].status != 0 && !out->error[0])
				snprintf(out->error, sizeof(out->error), "%s: %.200s",
				         gs_status_name(evs[i].status), evs[i].message);
		done += (uint64_t)n;
		if (out->error[0])
			return;
	}
	out->seconds = gs_test_mono_s() - t0;
	out->requests = done;
}

static void run_submit(const char *url, const options *o, measure *cb, measure *qm)
{
	gs_async_queue *q = NULL;
	uint64_t device = 0;
	submitter s = {0};
	char why[256] = "";
	int rv;

	memset(cb, 0, sizeof(*cb));
	memset(qm, 0, sizeof(*qm));
	counter_setup(&s.phases[0]);
	counter_setup(&s.phases[1]);
	gs_dmabuf_init(&s.dma);
	rv = gs_connect_ex(url, NULL, &s.c, why, sizeof(why));
	if (rv == 0)
		rv = gs_device_create(s.c, "bench-async", &device);
	if (rv == 0) {
		gs_context_desc cd;

		gs_context_desc_init(&cd, device, 0);
		rv = gs_context_create(s.c, &cd, &s.context, NULL);
	}
	if (rv == 0)
		rv = gs_dmabuf_nop(&s.dma);
	if (rv == 0)
		rv = gs_async_queue_create(&q);
	if (rv != 0) {
		snprintf(cb->error, sizeof(cb->error), "set-up: %s %.200s", gs_status_name(rv),
		         why[0] ? why : (s.c ? gs_client_message(s.c) : ""));
		snprintf(qm->error, sizeof(qm->error), "%s", cb->error);
		goto done;
	}
	s.opts = (gs_async_opts){.callback = submit_cb, .user = &s};
	s.k = &s.phases[0];
	phase_callback(&s, o->warmup, o->inflight, cb);
	s.k = &s.phases[1];
	if (!cb->error[0])
		phase_callback(&s, o->count, o->inflight, cb);
	cb->rps = cb->error[0] || cb->seconds <= 0 ? 0 : (double)cb->requests / cb->seconds;
	/* The last callback may still be returning: the queue phase starts with none in flight
	 * from the one before (gs_async_inflight counts a callback until it has returned). */
	s.opts = (gs_async_opts){.queue = q};
	phase_queue(&s, q, o->warmup, o->inflight, qm);
	if (!qm->error[0])
		phase_queue(&s, q, o->count, o->inflight, qm);
	qm->rps = qm->error[0] || qm->seconds <= 0 ? 0 : (double)qm->requests / qm->seconds;
done:
	if (s.c && device)
		gs_device_destroy(s.c, device);
	gs_close(s.c);
	for (int i = 0; i < 2; i++)
		counter_destroy(&s.phases[i]);
	gs_async_queue_destroy(q);
	gs_dmabuf_free(&s.dma);
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_async [--count N] [--warmup N] [--inflight K] [--tcp]\n"
	        "                   [--daemon-arg ARG]... [--json]\n"
	        "Pipelined NullRendering submissions from one client thread (gs_async_submit, K "
	        "in\n"
	        "flight on one connection, completions by callback and by queue) through a real\n"
	        "gpuschedd with its audit on, against raw nng REQ/REP echo pipelined the same way\n"
	        "(K contexts on one socket), with the same payload, in the same run.\n\n"
	        "  --count N     requests per measurement (default 20000)\n"
	        "  --warmup N    requests before each measurement (default 2000)\n"
	        "  --inflight K  requests in flight, 1..%d (default 64)\n"
	        "  --tcp         tcp://127.0.0.1 instead of ipc://\n"
	        "  --daemon-arg ARG  pass ARG to gpuschedd (repeatable, at most 8), e.g.\n"
	        "                --daemon-arg --bench-writer-commits\n"
	        "  --json        one JSON object on stdout (the table goes to stderr)\n\n"
	        "Exit status: 0 when every measurement ran, 1 otherwise, 2 usage.\n",
	        MAX_INFLIGHT);
}

static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.count = 20000, .warmup = 2000, .inflight = 64};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char *end = NULL;

		if (!strcmp(a, "--tcp")) {
			o->tcp = true;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--daemon-arg") && i + 1 < argc) {
			if (o->ndaemon_args >= 8)
				return -1;
			o->daemon_args[o->ndaemon_args++] = argv[++i];
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (i + 1 < argc && (!strcmp(a, "--count") || !strcmp(a, "--warmup") ||
		                            !strcmp(a, "--inflight"))) {
			const char *v = argv[++i];
			unsigned long long n;

			errno = 0;
			n = strtoull(v, &end, 10);
			if (*end || errno || v[0] == '-' || n > 100000000)
				return -1;
			if (!strcmp(a, "--count") && n > 0)
				o->count = n;
			else if (!strcmp(a, "--warmup"))
				o->warmup = n;
			else if (!strcmp(a, "--inflight") && n >= 1 && n <= MAX_INFLIGHT)
				o->inflight = (int)n;
			else
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/gpusched-bench-async-XXXXXX", echo_url[320], tcp_url[64] = "";
	measure echo, cb, qm;
	options o;
	gs_testd d;
	int rc = -1;

	if (parse_args(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("bench: mkdtemp");
		return 1;
	}
	size_t payload = payload_size();
	if (o.tcp) {
		int port = (int)itest_free_port();
		snprintf(echo_url, sizeof(echo_url), "tcp://127.0.0.1:%d", port);
	} else {
		snprintf(echo_url, sizeof(echo_url), "ipc://%s/echo.sock", dir);
	}
	/* Echo first, then the daemon: neither competes with the other for the CPUs. */
	run_echo(echo_url, payload, &o, &echo);

	for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
		const char *args[11] = {NULL};
		int n = 0;

		if (o.tcp) {
			snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d",
			         (int)itest_free_port());
			args[n++] = "--listen";
			args[n++] = tcp_url;
		}
		for (int i = 0; i < o.ndaemon_args; i++)
			args[n++] = o.daemon_args[i];
		rc = gs_testd_start(&d, args);
		if (rc != 0)
			gs_testd_cleanup(&d);
	}
	if (rc != 0) {
		fprintf(stderr, "bench: cannot start gpuschedd\n");
		return 1;
	}
	uint64_t cpu0 = gs_test_proc_cpu_ns(d.pid);
	run_submit(o.tcp ? tcp_url : d.url, &o, &cb, &qm);
	/* The daemon's CPU per request of both measurements, warm-ups included. */
	uint64_t sent = cb.requests + qm.requests + 2 * o.warmup;
	double cpu_us =
	        sent ? (double)(gs_test_proc_cpu_ns(d.pid) - cpu0) / 1000.0 / (double)sent : 0;
	rc = gs_testd_stop(&d);
	if (rc != 0)
		gs_testd_dump_log(&d);
	gs_testd_cleanup(&d);
	char sock[400];
	snprintf(sock, sizeof(sock), "%s/echo.sock", dir);
	unlink(sock);
	rmdir(dir);

	FILE *out = o.json ? stderr : stdout;
	double rcb = echo.rps > 0 ? cb.rps / echo.rps : 0,
	       rq = echo.rps > 0 ? qm.rps / echo.rps : 0;
	fprintf(out,
	        "\nbench_async: %s, payload %zu bytes, %d in flight from one client thread, "
	        "%" PRIu64 " requests per measurement (after %" PRIu64 "), %ld CPUs\n\n",
	        o.tcp ? "tcp" : "ipc", payload, o.inflight, o.count, o.warmup,
	        sysconf(_SC_NPROCESSORS_ONLN));
	fprintf(out, "%-28s %12s %8s\n", "", "req/s", "ratio");
	fprintf(out, "%-28s %12.0f %8s\n", "echo, pipelined", echo.rps, "1");
	fprintf(out, "%-28s %12.0f %8.3f\n", "submit, callback completion", cb.rps, rcb);
	fprintf(out, "%-28s %12.0f %8.3f\n", "submit, queue completion", qm.rps, rq);
	fprintf(out, "daemon CPU per submission (all its threads): %.1f us\n", cpu_us);
	if (echo.error[0])
		fprintf(out, "echo: %s\n", echo.error);
	if (cb.error[0])
		fprintf(out, "submit (callback): %s\n", cb.error);
	if (qm.error[0])
		fprintf(out, "submit (queue): %s\n", qm.error);
	if (o.json)
		printf("{\"bench\":\"async\",\"transport\":\"%s\",\"inflight\":%d,\"payload_"
		       "bytes\":%zu,"
		       "\"requests\":%" PRIu64 ",\"echo_rps\":%.1f,\"submit_callback_rps\":%.1f,"
		       "\"submit_queue_rps\":%.1f,\"ratio_callback\":%.4f,\"ratio_queue\":%.4f,"
		       "\"errors\":%d,\"daemon_cpu_us\":%.2f}\n",
		       o.tcp ? "tcp" : "ipc", o.inflight, payload, o.count, echo.rps, cb.rps,
		       qm.rps, rcb, rq,
		       (echo.error[0] != 0) + (cb.error[0] != 0) + (qm.error[0] != 0), cpu_us);
	return echo.error[0] || cb.error[0] || qm.error[0] || rc != 0 ? 1 : 0;
}
