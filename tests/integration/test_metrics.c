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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpusched.h"
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

static void test_metrics_follow_the_daemon(void **state)
{
	(void)state;
	uint16_t port = itest_free_port();
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
	const char *const args[] = {"--metrics", url, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);
	gs_client *c = itest_connect(&t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "metrics", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
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

/* A metrics URL that is not http://HOST:PORT stops the daemon at start with exit 1. */
static void test_bad_metrics_url_refused(void **state)
{
	(void)state;
	const char *const args[] = {"--metrics", "ipc:///tmp/not-http", NULL};
	gs_testd t;
	assert_int_not_equal(gs_testd_start(&t, args), 0);
	gs_testd_cleanup(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_metrics_follow_the_daemon),
	        cmocka_unit_test(test_bad_metrics_url_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
