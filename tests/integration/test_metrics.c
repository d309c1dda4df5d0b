/*
 * The Prometheus endpoint (gpuschedd --metrics http://127.0.0.1:PORT): scraped over a real
 * TCP connection and parsed by the prometheus_client parser (Debian python3-prometheus-client);
 * its counters follow what the daemon did.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "itest.h"
#include "testd.h"

#define PYTHON "/usr/bin/python3"

/* GET /metrics from 127.0.0.1:port: the body, malloc'd (NULL when it cannot be read). */
static char *scrape(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return NULL;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = {5, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	static const char req[] =
	        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
		close(fd);
		return NULL;
	}
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap + 1);
	ssize_t n;
	while (buf && (n = read(fd, buf + len, cap - len)) > 0) {
		len += (size_t)n;
		if (len == cap) {
			char *g = realloc(buf, 2 * cap + 1);
			if (!g) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = g;
			cap *= 2;
		}
	}
	close(fd);
	if (!buf)
		return NULL;
	buf[len] = '\0';
	char *body = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || !body) {
		fprintf(stderr, "scrape: %.200s\n", buf);
		free(buf);
		return NULL;
	}
	char *out = strdup(body + 4);
	free(buf);
	return out;
}

/* Writes body to a file and checks it with the Python parser: every family parses, and each
 * "name{labels} >= value" expectation holds. Returns the script's exit status. */
static int check_with_parser(const char *dir, const char *body, const char *expect)
{
	char path[512], script[600], cmd[2400];
	snprintf(path, sizeof(path), "%s/metrics.txt", dir);
	snprintf(script, sizeof(script), "%s/check.py", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(body, f);
	fclose(f);
	f = fopen(script, "w");
	assert_non_null(f);
	fputs("import sys\n"
	      "from prometheus_client.parser import text_string_to_metric_families\n"
	      "samples = {}\n"
	      "for fam in text_string_to_metric_families(open(sys.argv[1]).read()):\n"
	      "    for s in fam.samples:\n"
	      "        key = s.name + ''.join('{%s=%s}' % kv for kv in sorted(s.labels.items()))\n"
	      "        samples[key] = s.value\n"
	      "ok = True\n"
	      "for want in sys.argv[2].split(';'):\n"
	      "    key, op, value = want.split(' ')\n"
	      "    got = samples.get(key)\n"
	      "    good = got is not None and (got >= float(value) if op == '>=' else "
	      "got == float(value))\n"
	      "    if not good:\n"
	      "        print('metrics: %s is %s, want %s %s' % (key, got, op, value))\n"
	      "        ok = False\n"
	      "sys.exit(0 if ok else 1)\n",
	      f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), PYTHON " '%s' '%s' '%s'", script, path, expect);
	return system(cmd);
}

/* A counter's value in a scrape (-1 when it is not there). */
static double metric(const char *body, const char *name)
{
	char key[160];
	snprintf(key, sizeof key, "\n%s ", name);
	const char *at = strstr(body, key);
	return at ? strtod(at + strlen(key), NULL) : -1;
}

/* Starts a daemon serving metrics on a free loopback port; the port. */
static uint16_t start_with_metrics(gs_testd *t)
{
	uint16_t port = itest_free_port();
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
	const char *const args[] = {"--metrics", url, NULL};
	assert_int_equal(gs_testd_start(t, args), 0);
	return port;
}

/* start_with_metrics, then a client with a device named `name` and a context on node 0 (its
 * default paging companion); the context. */
static uint64_t start_with_context(gs_testd *t, uint16_t *port, gs_client **c, const char *name)
{
	*port = start_with_metrics(t);
	*c = itest_connect(t, NULL);
	itest_layout lay;
	itest_layout_of(*c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(*c, name, &dev), 0);
	return itest_context(*c, dev, 0, lay.paging_node);
}

static void test_metrics_follow_the_daemon(void **state)
{
	(void)state;
	gs_testd t;
	uint16_t port;
	gs_client *c;
	uint64_t ctx = start_with_context(&t, &port, &c, "metrics");
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	enum { N = 20 };
	for (int i = 0; i < N; i++)
		itest_submit_wait(c, ctx, &b, 0);
	gs_submit_result sr;
	assert_int_equal(gs_submit(c, 424242, &b, 0, &sr), GS_STATUS_NOT_FOUND);
	gs_dmabuf_free(&b);

	/* Every scrape is rendered on request: it shows all the answered work. Labels in the
	 * keys below are sorted by name and unquoted. */
	char expect[700];
	snprintf(expect, sizeof(expect),
	         "gpusched_packets_total{state=submitted} >= %d;"
	         "gpusched_packets_total{state=completed} >= %d;"
	         "gpusched_packets_total{state=rejected} == 1;"
	         "gpusched_rpc_errors_total{status=NOT_FOUND} >= 1;"
	         "gpusched_rpc_requests_total{request=submit} >= %d;"
	         "gpusched_submit_latency_seconds_count >= %d;"
	         "gpusched_queue_wait_seconds_count >= %d;"
	         "gpusched_audit_healthy == 1;"
	         "gpusched_audit_commits_total >= 1",
	         N, N, N + 1, N, N);
	char *body = scrape(port);
	assert_non_null(body);
	assert_int_equal(check_with_parser(t.dir, body, expect), 0);
	/* The engine's busy time is per engine; the latency histograms are histograms. */
	assert_non_null(strstr(body, "gpusched_engine_busy_seconds_total{adapter=\"0\""));
	assert_non_null(strstr(body, "# TYPE gpusched_submit_latency_seconds histogram"));
	free(body);

	gs_close(c);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
}

/* Open file descriptors of a process. */
static int fd_count(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/*
 * A connection that closes with a request not taken yet. nng drops the request but leaves the
 * socket's receive descriptor readable, and the loop, which takes requests when it is, found
 * nothing on every wake-up: it spun at 100% of a CPU until some request came. Now it waits
 * for the next request through a callback (the doorbell). The race is forced: the client
 * asks for 4 MiB and does not read them, so the answer stays in nng; the loop thread is held
 * still with ptrace while nng reads a second request; the client then closes, the answer
 * fails, and nng closes the connection with that request still waiting.
 */
static void test_closed_before_taken(void **state)
{
	(void)state;
	gs_testd t;
	uint16_t port = start_with_metrics(&t);
	gs_client *c = itest_connect(&t, NULL);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "bell", &dev), 0);
	enum { SIZE = 4 << 20 };
	gs_allocation_placement a;
	itest_alloc(c, dev, SIZE, 0, 0, &a);
	int base = fd_count(t.pid);
	int peer = itest_raw_ipc_peer(t.url);
	assert_true(peer >= 0);

	/* The read's answer starts to arrive, and the rest waits in nng. */
	Gpusched__V1__AllocationReadRequest rd = GPUSCHED__V1__ALLOCATION_READ_REQUEST__INIT;
	rd.allocation = a.allocation;
	rd.size = SIZE;
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	req.id = 1;
	req.token = "";
	req.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ;
	req.allocation_read = &rd;
	size_t len;
	void *read_req = itest_pack(&req, &len);
	assert_true(itest_raw_send(peer, 1, read_req, len));
	uint8_t first;
	assert_int_equal(recv(peer, &first, 1, 0), 1);
	/* Until the daemon has written all it can: while it writes, the loop holds the
	 * connection's lock, and stopped there it would keep nng from reading. */
	long long until = gs_test_now_ms() + 10000;
	int inq = -1, last = -2;
	while (inq != last && gs_test_now_ms() < until) {
		last = inq;
		poll(NULL, 0, 20);
		assert_int_equal(ioctl(peer, FIONREAD, &inq), 0);
	}

	/* Only the loop thread (its id is the process's) stops. */
	if (ptrace(PTRACE_SEIZE, t.pid, NULL, NULL) != 0) {
		fprintf(stderr, "ptrace is not permitted here (%s): the race is not forced\n",
		        strerror(errno));
		close(peer);
		free(read_req);
		gs_close(c);
		assert_int_equal(gs_testd_stop(&t), 0);
		gs_testd_cleanup(&t);
		return;
	}
	/* Another request, read by nng (nothing of it left in the socket) and not taken. Should
	 * the loop have stopped inside nng after all, it runs on, and another try follows. */
	int queued = -1;
	for (int attempt = 0; attempt < 10 && queued != 0; attempt++) {
		if (attempt > 0) {
			assert_int_equal(ptrace(PTRACE_DETACH, t.pid, NULL, NULL), 0);
			poll(NULL, 0, 100);
			assert_int_equal(ptrace(PTRACE_SEIZE, t.pid, NULL, NULL), 0);
		}
		assert_int_equal(ptrace(PTRACE_INTERRUPT, t.pid, NULL, NULL), 0);
		int st;
		assert_int_equal(waitpid(t.pid, &st, __WALL), t.pid);
		assert_true(WIFSTOPPED(st));
		assert_true(itest_raw_send(peer, 2 + (uint32_t)attempt, read_req, len));
		long long settle = gs_test_now_ms() + 2000;
		while ((ioctl(peer, SIOCOUTQ, &queued) != 0 || queued > 0) &&
		       gs_test_now_ms() < settle)
			poll(NULL, 0, 5);
	}
	assert_int_equal(queued, 0);
	free(read_req);
	/* The answer fails, and nng closes the connection. */
	close(peer);
	until = gs_test_now_ms() + 10000;
	while (fd_count(t.pid) > base && gs_test_now_ms() < until)
		poll(NULL, 0, 5);
	assert_true(fd_count(t.pid) <= base);
	assert_int_equal(ptrace(PTRACE_DETACH, t.pid, NULL, NULL), 0);

	/* The loop does not spin: over half a second without a request it uses a small part
	 * of it (spinning, all of it). */
	uint64_t cpu0 = gs_test_proc_cpu_ns(t.pid), wall0 = gs_test_mono_ns();
	poll(NULL, 0, 500);
	uint64_t cpu = gs_test_proc_cpu_ns(t.pid) - cpu0, wall = gs_test_mono_ns() - wall0;
	fprintf(stderr, "daemon CPU over %.0f ms without requests: %.1f ms\n", wall / 1e6,
	        cpu / 1e6);
	assert_true(cpu < wall / 2);
	/* Requests are served, and the first came through the doorbell. */
	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	gs_info_free(info);
	char *body = scrape(port);
	assert_non_null(body);
	assert_true(metric(body, "gpusched_rpc_doorbell_total") >= 1);
	free(body);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(gs_info(c, &info), 0);
		gs_info_free(info);
	}
	gs_close(c);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
}

/*
 * A client that pipelines (here 32 submissions in flight on one connection) has its requests
 * read ahead and committed in batches. Taken one by one from the receive descriptor, each
 * request came with its own commit (39,506 commits for 42,253 submissions in bench_async).
 */
static void test_pipelined_read_ahead(void **state)
{
	(void)state;
	gs_testd t;
	uint16_t port;
	gs_client *c;
	uint64_t ctx = start_with_context(&t, &port, &c, "pipelined");
	char *body = scrape(port);
	assert_non_null(body);
	double commits0 = metric(body, "gpusched_audit_commits_total");
	double ahead0 = metric(body, "gpusched_rpc_read_ahead_total");
	free(body);
	assert_true(commits0 >= 0 && ahead0 >= 0);

	gs_async_queue *q;
	assert_int_equal(gs_async_queue_create(&q), 0);
	gs_async_opts o = {.queue = q};
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	enum { N = 2000, DEPTH = 32 };
	int sent = 0, done = 0;
	gs_async_event ev[DEPTH];
	while (done < N) {
		while (sent < N && sent - done < DEPTH) {
			assert_int_equal(gs_async_submit(c, ctx, &b, 0, &o, NULL), 0);
			sent++;
		}
		int n = gs_async_poll(q, ev, DEPTH, 20000);
		assert_true(n > 0);
		for (int i = 0; i < n; i++)
			assert_int_equal(ev[i].status, 0);
		done += n;
	}
	gs_dmabuf_free(&b);
	gs_async_queue_destroy(q);

	body = scrape(port);
	assert_non_null(body);
	double commits = metric(body, "gpusched_audit_commits_total") - commits0;
	double ahead = metric(body, "gpusched_rpc_read_ahead_total") - ahead0;
	free(body);
	fprintf(stderr, "%d pipelined submissions: %.0f read ahead, %.0f commits\n", N, ahead,
	        commits);
	assert_true(ahead >= N / 2);
	assert_true(commits < N / 2);
	gs_close(c);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
}

/*
 * gpusched_audit_packet_events_total counts every packet event committed where the file keeps
 * it: in the packet's own row (its SUBMITTED, a straight READY, RUNNING and COMPLETED), or as a
 * row of packet_event_rows. Straight NOPs, and a NOP cancelled in its queue with its context (a
 * cancellation is not straight: a row by design); then both counts must be the file's.
 */
static void test_packet_events_where_kept(void **state)
{
	(void)state;
	gs_testd t;
	uint16_t port;
	gs_client *c;
	uint64_t ctx = start_with_context(&t, &port, &c, "kept");
	gs_dmabuf nop, spin;
	gs_dmabuf_init(&nop);
	gs_dmabuf_init(&spin);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	assert_int_equal(gs_dmabuf_spin(&spin, 200000, 0), 0);
	for (int i = 0; i < 3; i++)
		itest_submit_wait(c, ctx, &nop, 0);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "doomed", &dev), 0);
	uint64_t doomed = itest_context(c, dev, 0, lay.paging_node);
	gs_submit_result res;
	assert_int_equal(gs_submit(c, doomed, &spin, 0, &res), 0);
	/* Queued behind the spin, and cancelled with its context, which the spin outlives. */
	assert_int_equal(gs_submit(c, doomed, &nop, 0, NULL), 0);
	assert_int_equal(gs_context_destroy(c, doomed), 0);
	gs_packet_state st = GS_PACKET_UNKNOWN;
	int rv = gs_packet_wait(c, res.packet, ITEST_TIMEOUT_MS, &st, NULL);
	assert_int_equal(rv, 0);
	/* Every packet is final: reading the history commits what is queued, and makes no packet
	 * event of its own. */
	gs_packet_record *recs = NULL;
	size_t n = 0;
	gs_history_filter f = {0};
	assert_int_equal(gs_history(c, &f, &recs, &n), 0);
	gs_history_free(recs, n);
	char *body = scrape(port);
	assert_non_null(body);
	double kept = metric(body, "gpusched_audit_packet_events_total{kept=\"packet_row\"}");
	double rows = metric(body, "gpusched_audit_packet_events_total{kept=\"event_row\"}");
	free(body);
	int64_t file_kept = itest_audit_int(
	        t.db, "SELECT sum((seq <> 0) + (ready_seq <> 0) + (run_seq <> 0) + (end_seq <> 0))"
	              " FROM packets");
	int64_t file_rows = itest_audit_int(t.db, "SELECT count(*) FROM packet_event_rows");
	fprintf(stderr,
	        "packet events: %.0f kept in packets rows (file %lld), %.0f as rows (file "
	        "%lld)\n",
	        kept, (long long)file_kept, rows, (long long)file_rows);
	assert_true(kept >= 5); /* every SUBMITTED is kept */
	assert_true(rows >= 1); /* the cancellations */
	assert_true(kept == (double)file_kept);
	assert_true(rows == (double)file_rows);
	gs_dmabuf_free(&nop);
	gs_dmabuf_free(&spin);
	gs_close(c);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
}

/* A metrics URL that is not http://HOST:PORT stops the daemon at start with exit 1. */
static void test_bad_metrics_url_refused(void **state)
{
	(void)state;
	const char *const args[] = {"--metrics", "ipc:///tmp/not-http", NULL};
	gs_testd t;
	assert_int_not_equal(gs_testd_start(&t, args), 0);
	gs_testd_cleanup(&t);
}

/* A connection to 127.0.0.1:port from the loopback address `src` (127.0.0.N). */
static int conn_from(const char *src, uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in me = {.sin_family = AF_INET};
	inet_pton(AF_INET, src, &me.sin_addr);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	return fd;
}

/* Sends req (all of it, or until the daemon closes) and reads the status line's code within
 * timeout_ms: the code, 0 when the connection was closed without an answer, -1 none in time. */
static int status_of(int fd, const char *req, size_t len, int timeout_ms)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char line[64] = "";
	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	ssize_t n = read(fd, line, sizeof line - 1);
	if (n <= 0)
		return 0;
	line[n] = '\0';
	int code = 0;
	return sscanf(line, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

static int get_as(const char *src, uint16_t port, const char *token)
{
	char req[256];
	int len = snprintf(req, sizeof req,
	                   "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
	                   token);
	int fd = conn_from(src, port);
	int code = status_of(fd, req, (size_t)len, 5000);
	close(fd);
	return code;
}

/*
 * The endpoint before authentication (issue 26, item 2). On main c4ca6f6 (nng's HTTP server)
 * it had no connection limit, held 400 slow connections 30 s and more, spent 5.2 s on a
 * request of 20,000 headers, and 25 bad tokens a second from one client made everyone's
 * scrapes 429. Now: a request's headers are bounded (431), a connection that sends no whole
 * request within 5 s is ended, one address holds at most 8 connections while another is
 * served, and the 429 budget is per address.
 */
static void test_metrics_endpoint_limits(void **state)
{
	(void)state;
	uint16_t port = itest_free_port();
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, "{\"tenants\": [{\"name\": \"ops\", \"token\":"
	                                          " \"tok-ops\", \"admin\": true}]}"),
	                 0);
	const char *const args[] = {"--config", cfg.path, "--metrics", url, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);
	assert_int_equal(get_as("127.0.0.1", port, "tok-ops"), 200);

	/* 20,000 headers: refused for their size, at once. */
	size_t cap = 64 + 20000 * 8;
	char *big = malloc(cap);
	assert_non_null(big);
	size_t len = (size_t)snprintf(big, cap, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
	for (int i = 0; i < 20000; i++)
		len += (size_t)snprintf(big + len, cap - len, "X-a: b\r\n");
	len += (size_t)snprintf(big + len, cap - len, "\r\n");
	int fd = conn_from("127.0.0.1", port);
	int code = status_of(fd, big, len, 5000);
	close(fd);
	free(big);
	if (code != 431 && code != 413 && code != 0)
		fail_msg("20,000 headers answered %d", code);

	/* Half a request, then nothing: ended after the header deadline (15 s is a bound). */
	fd = conn_from("127.0.0.1", port);
	static const char half[] = "GET /metrics HTTP/1.1\r\n";
	assert_int_equal(status_of(fd, half, sizeof half - 1, 15000), 0);
	close(fd);

	/* One address holds at most 8 connections; another is served meanwhile. */
	enum { N = 20 };
	int fds[N], ended = 0;
	for (int i = 0; i < N; i++)
		fds[i] = conn_from("127.0.0.4", port);
	long long deadline = gs_test_now_ms() + 3000;
	while (ended < N - 8 && gs_test_now_ms() < deadline) {
		ended = 0;
		for (int i = 0; i < N; i++) {
			struct pollfd p = {.fd = fds[i], .events = POLLIN};
			ended += poll(&p, 1, 0) == 1;
		}
		poll(NULL, 0, 20);
	}
	assert_int_equal(ended, N - 8);
	assert_int_equal(get_as("127.0.0.2", port, "tok-ops"), 200);
	for (int i = 0; i < N; i++)
		close(fds[i]);

	/* Bad tokens from one address: it gets 429; the administrator elsewhere does not. */
	int last = 0;
	for (int i = 0; i < 25; i++)
		last = get_as("127.0.0.3", port, "not-a-token");
	assert_int_equal(last, 429);
	assert_int_equal(get_as("127.0.0.2", port, "tok-ops"), 200);
	assert_int_equal(get_as("127.0.0.3", port, "not-a-token"), 429);

	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_metrics_follow_the_daemon),
	        cmocka_unit_test(test_bad_metrics_url_refused),
	        cmocka_unit_test(test_metrics_endpoint_limits),
	        cmocka_unit_test(test_closed_before_taken),
	        cmocka_unit_test(test_pipelined_read_ahead),
	        cmocka_unit_test(test_packet_events_where_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
