/*
 * tls+tcp:// on loopback with a CA and certificates made at test time with the openssl CLI
 * (ECDSA P-256): the daemon's certificate is verified by the client for 127.0.0.1, and the
 * daemon requires a client certificate from its CA (mutual TLS). A client with a certificate
 * from another CA, without one, or speaking plain tcp:// is not served; a tls+tcp:// listener
 * without "tls" in the config does not start.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cmocka.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

/* Info over url with the client certificate cert (NULL: none): 0 when served. */
static int try_info(const char *url, const char *cert, char *why, size_t cap)
{
	if (cert)
		setenv("GPUSCHED_TLS_CERT_KEY", cert, 1);
	else
		unsetenv("GPUSCHED_TLS_CERT_KEY");
	gs_client *c;
	int rv = gs_connect_ex(url, "", &c, why, cap);
	if (rv != 0)
		return rv;
	gs_client_set_timeout(c, 2000);
	gs_daemon_info *info = NULL;
	rv = gs_info(c, &info);
	if (rv == 0) {
		assert_string_equal(info->tenant, "default");
		gs_info_free(info);
	}
	gs_close(c);
	return rv;
}

/* Info through gs_connect_with(o): 0 when served. */
static int info_with(const gs_connect_options *o, char *why, size_t cap)
{
	gs_client *c = NULL;
	gs_daemon_info *info = NULL;
	int rv = gs_connect_with(o, &c, why, cap);
	if (rv != 0)
		return rv;
	rv = gs_info(c, &info);
	if (rv != 0)
		snprintf(why, cap, "%s", gs_client_message(c));
	gs_info_free(info);
	gs_close(c);
	return rv;
}

static void test_mutual_tls(void **state)
{
	(void)state;
	itest_pki k;
	itest_pki_make(&k);
	char url[64], json[512];
	snprintf(url, sizeof(url), "tls+tcp://127.0.0.1:%u", itest_free_port());
	snprintf(json, sizeof(json), "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"}}",
	         k.server, k.ca);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, json), 0);
	const char *const args[] = {"--config", cfg.path, "--listen", url, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);

	char why[256] = "";
	setenv("GPUSCHED_TLS_CA", k.ca, 1);
	int rv = try_info(url, k.client, why, sizeof(why));
	if (rv != 0)
		fail_msg("a client with a certificate from the CA was not served: %d %s", rv, why);
	/* The daemon's certificate is for daemon.test: named so, it is the daemon; named as
	 * another host, the same CA's certificate is refused (anyone with one could pose as it). */
	setenv("GPUSCHED_TLS_SERVER_NAME", "daemon.test", 1);
	assert_int_equal(try_info(url, k.client, why, sizeof(why)), 0);
	setenv("GPUSCHED_TLS_SERVER_NAME", "elsewhere.test", 1);
	assert_int_not_equal(try_info(url, k.client, why, sizeof(why)), 0);
	unsetenv("GPUSCHED_TLS_SERVER_NAME");
	/* Refused: a certificate from another CA, none at all, plain tcp on the TLS port. */
	assert_int_not_equal(try_info(url, k.stranger, why, sizeof(why)), 0);
	assert_int_not_equal(try_info(url, NULL, why, sizeof(why)), 0);
	char plain[64];
	snprintf(plain, sizeof(plain), "tcp://%s", url + strlen("tls+tcp://"));
	assert_int_not_equal(try_info(plain, NULL, why, sizeof(why)), 0);
	/* A client that does not trust the daemon's CA does not talk to it either. */
	char other_ca[160];
	snprintf(other_ca, sizeof(other_ca), "%s/other.pem", k.dir);
	setenv("GPUSCHED_TLS_CA", other_ca, 1);
	assert_int_not_equal(try_info(url, k.client, why, sizeof(why)), 0);
	/* gs_connect_with names the material itself, over the environment (which still names
	 * the other CA here): served with the right CA; refused for another server name. */
	gs_connect_options o = {.size = sizeof(o),
	                        .url = url,
	                        .token = "",
	                        .tls_ca = k.ca,
	                        .tls_cert_key = k.client,
	                        .tls_server_name = "daemon.test",
	                        .timeout_ms = 2000};
	assert_int_equal(info_with(&o, why, sizeof(why)), 0);
	o.tls_server_name = "elsewhere.test";
	assert_int_not_equal(info_with(&o, why, sizeof(why)), 0);
	/* A smaller (older) struct leaves the rest at their defaults: without tls_ca it reads
	 * the environment's other CA and is not served. */
	o.tls_server_name = "daemon.test";
	o.size = offsetof(gs_connect_options, tls_ca);
	assert_int_not_equal(info_with(&o, why, sizeof(why)), 0);
	/* A DNS name in a tls+tcp4:// URL is checked too (the host was read at a fixed offset:
	 * "tls+tcp4://localhost" named no host, and any certificate of the CA passed). */
	char by_name[96];
	snprintf(by_name, sizeof by_name, "tls+tcp4://localhost:%s", strrchr(url, ':') + 1);
	o.size = sizeof o;
	o.url = by_name;
	o.tls_server_name = NULL;
	assert_int_not_equal(info_with(&o, why, sizeof why), 0);
	o.tls_server_name = "daemon.test";
	assert_int_equal(info_with(&o, why, sizeof why), 0);
	o.url = url;
	/* Options of size 0 are refused. */
	o.size = 0;
	gs_client *none = NULL;
	assert_int_equal(gs_connect_with(&o, &none, why, sizeof(why)), GS_ERR_INVALID);
	assert_null(none);
	/* No CA named: refused by the client library before any connection. */
	unsetenv("GPUSCHED_TLS_CA");
	assert_int_equal(try_info(url, k.client, why, sizeof(why)), GS_ERR_INVALID);
	assert_non_null(strstr(why, "GPUSCHED_TLS_CA"));
	unsetenv("GPUSCHED_TLS_CERT_KEY");
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);

	/* tls+tcp without a certificate in the config: the daemon does not start. */
	char *argv[] = {(char *)GS_DAEMON_PATH,
	                (char *)"--listen",
	                url,
	                (char *)"--db",
	                (char *)"/tmp/gs-tls-nocert.db",
	                NULL};
	itest_run r;
	itest_run_argv(argv, 20000, &r);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "tls"));
	itest_run_free(&r);
	itest_sh("rm -f /tmp/gs-tls-nocert.db*; rm -rf '%s'", k.dir);
}

/* Info as token over url with the client certificate cert: the status (0 served). */
static int info_as(const char *url, const char *cert, const char *token)
{
	setenv("GPUSCHED_TLS_CERT_KEY", cert, 1);
	gs_client *c;
	char why[256];
	int rv = gs_connect_ex(url, token, &c, why, sizeof(why));
	if (rv != 0)
		return rv;
	gs_client_set_timeout(c, 3000);
	gs_daemon_info *info = NULL;
	rv = gs_info(c, &info);
	gs_info_free(info);
	gs_close(c);
	return rv;
}

/*
 * A client certificate names its tenant through the listener: each VM's listener has a CA of
 * its own (listen[].ca_file) and admits only that VM's token (listen[].tenants). With the
 * other's token, or on the other's listener, the same client is refused (audited).
 */
static void test_listener_per_tenant(void **state)
{
	(void)state;
	itest_pki k;
	itest_pki_make(&k);
	char a_url[64], b_url[64], other_ca[160], json[2048];
	snprintf(a_url, sizeof(a_url), "tls+tcp://127.0.0.1:%u", itest_free_port());
	snprintf(b_url, sizeof(b_url), "tls+tcp://127.0.0.1:%u", itest_free_port());
	snprintf(other_ca, sizeof(other_ca), "%s/other.pem", k.dir);
	/* The config's listeners, not testd's --listen (which would replace them). */
	char dir[] = "/tmp/gs-tls-bound-XXXXXX";
	assert_non_null(mkdtemp(dir));
	snprintf(json, sizeof(json),
	         "{\"tls\": {\"cert_key_file\": \"%s\"},"
	         " \"listen\": [\"ipc://%s/d.sock\","
	         " {\"url\": \"%s\", \"ca_file\": \"%s\", \"tenants\": [\"vm-a\"]},"
	         " {\"url\": \"%s\", \"ca_file\": \"%s\", \"tenants\": [\"vm-b\", \"ops\"]}],"
	         " \"tenants\": [{\"name\": \"vm-a\", \"token\": \"tok-a\", \"kind\": \"vm\"},"
	         " {\"name\": \"vm-b\", \"token\": \"tok-b\", \"kind\": \"vm\"},"
	         " {\"name\": \"ops\", \"token\": \"tok-ops\", \"admin\": true}]}",
	         k.server, dir, a_url, k.ca, b_url, other_ca);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, json), 0);
	gs_testd t;
	char db[96];
	snprintf(db, sizeof(db), "%s/audit.db", dir);
	const char *const argv0[] = {GS_DAEMON_PATH, "--config", cfg.path, "--db", db, NULL};
	assert_int_equal(gs_testd_spawn(&t, dir, "daemon", argv0), 0);
	snprintf(t.url, sizeof(t.url), "ipc://%s/d.sock", dir);
	snprintf(t.db, sizeof(t.db), "%s", db);
	setenv("GPUSCHED_TLS_CA", k.ca, 1);

	/* vm-a's certificate (from k.ca) with vm-a's token on vm-a's listener: served. */
	assert_int_equal(info_as(a_url, k.client, "tok-a"), 0);
	/* The same certificate with vm-b's token: refused by the listener, audited. */
	int64_t errors = itest_audit_errors(t.db);
	assert_int_equal(info_as(a_url, k.client, "tok-b"), GS_STATUS_UNAUTHENTICATED);
	/* vm-b's certificate (another CA) does not get onto vm-a's listener at all... */
	assert_int_not_equal(info_as(a_url, k.stranger, "tok-a"), 0);
	/* ...is served on its own with its own tokens, and refuses vm-a's there. */
	assert_int_equal(info_as(b_url, k.stranger, "tok-b"), 0);
	assert_int_equal(info_as(b_url, k.stranger, "tok-ops"), 0);
	assert_int_equal(info_as(b_url, k.stranger, "tok-a"), GS_STATUS_UNAUTHENTICATED);
	assert_int_not_equal(info_as(b_url, k.client, "tok-b"), 0);
	/* The refusals are in the file (a served request after them is the barrier). */
	gs_client *ops = itest_connect(&t, "tok-ops");
	uint64_t dev;
	assert_int_equal(gs_device_create(ops, "barrier", &dev), 0);
	itest_layout l;
	itest_layout_of(ops, &l);
	itest_audit_barrier(ops, itest_context(ops, dev, 0, l.paging_node));
	assert_int_equal(itest_audit_errors(t.db), errors + 2);
	gs_close(ops);
	unsetenv("GPUSCHED_TLS_CERT_KEY");
	unsetenv("GPUSCHED_TLS_CA");
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t); /* removes dir */
	itest_config_cleanup(&cfg);

	/* A listener with its own CA but no daemon certificate does not start. */
	snprintf(json, sizeof(json), "{\"listen\": [{\"url\": \"%s\", \"ca_file\": \"%s\"}]}",
	         a_url, k.ca);
	assert_int_equal(itest_config_write(&cfg, json), 0);
	char *argv[] = {(char *)GS_DAEMON_PATH,
	                (char *)"--config",
	                cfg.path,
	                (char *)"--db",
	                (char *)"/tmp/gs-tls-bound.db",
	                NULL};
	itest_run r;
	itest_run_argv(argv, 20000, &r);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "cert_key_file"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);
	itest_sh("rm -f /tmp/gs-tls-bound.db* /tmp/gs-tls-bound-%d.sock; rm -rf '%s'",
	         (int)getpid(), k.dir);
}

/* Info over o, retried once: a client whose connection the daemon closed may learn it from
 * its first request (TRANSPORT), and redials for the next. */
static int info_redial(gs_client *c)
{
	gs_daemon_info *info = NULL;
	int rv = gs_info(c, &info);
	if (rv == GS_ERR_TRANSPORT)
		rv = gs_info(c, &info);
	gs_info_free(info);
	return rv;
}

/*
 * New certificates without a restart: the daemon's certificate file is rewritten in place (a
 * rotation) and the configuration reloaded. New clients get the new certificate at once; a
 * client connected before goes on after redialling by itself; the ipc connection and the work
 * queued on it are untouched; the change is audited. A certificate file that does not load is
 * refused whole, and the certificate in use stays.
 */
static void test_certificates_reloaded(void **state)
{
	(void)state;
	itest_pki k;
	itest_pki_make(&k);
	char renewed[160];
	itest_pki_cert(&k, "renewed", "IP:127.0.0.1,DNS:daemon.test,DNS:renewed.test", renewed,
	               sizeof renewed);
	char dir[] = "/tmp/gs-tls-reload-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char served[160], url[64], json[1024], db[96];
	snprintf(served, sizeof served, "%s/served.pem", dir);
	assert_int_equal(itest_sh("cp '%s' '%s'", k.server, served), 0);
	snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%u", itest_free_port());
	snprintf(json, sizeof json,
	         "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"},"
	         " \"listen\": [\"ipc://%s/d.sock\", \"%s\"]}",
	         served, k.ca, dir, url);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, json), 0);
	snprintf(db, sizeof db, "%s/audit.db", dir);
	const char *const argv0[] = {GS_DAEMON_PATH, "--config", cfg.path, "--db", db, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_spawn(&t, dir, "daemon", argv0), 0);
	snprintf(t.url, sizeof t.url, "ipc://%s/d.sock", dir);
	snprintf(t.db, sizeof t.db, "%s", db);

	char why[256];
	gs_connect_options o = {.size = sizeof o,
	                        .url = url,
	                        .token = "",
	                        .tls_ca = k.ca,
	                        .tls_cert_key = k.client,
	                        .tls_server_name = "daemon.test",
	                        .timeout_ms = 5000};
	gs_client *before = NULL, *local = NULL;
	assert_int_equal(gs_connect_with(&o, &before, why, sizeof why), 0);
	assert_int_equal(info_redial(before), 0);
	gs_connect_options renewed_name = o;
	renewed_name.tls_server_name = "renewed.test";
	assert_int_not_equal(info_with(&renewed_name, why, sizeof why), 0);

	/* Work queued on the ipc connection across the reload. */
	assert_int_equal(gs_connect(t.url, "", &local), 0);
	uint64_t dev;
	assert_int_equal(gs_device_create(local, "rotation", &dev), 0);
	uint64_t ctx = itest_context(local, dev, 0, 2);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_spin(&b, 300000, 0), 0);
	gs_submit_result sr;
	assert_int_equal(gs_submit(local, ctx, &b, 0, &sr), 0);

	/* The rotation, asked for over the TLS connection itself: its answer leaves before the
	 * listener restarts (it restarts 200 ms later). */
	assert_int_equal(itest_sh("cp '%s' '%s'", renewed, served), 0);
	uint32_t changes = 0;
	char report[1024];
	int rv = gs_admin_reload(before, &changes, report, sizeof report);
	if (rv != 0)
		fail_msg("reload over tls: %s: %s", gs_status_name(rv), gs_client_message(before));
	assert_int_equal(changes, 1);
	assert_non_null(strstr(report, "tls: new certificates"));
	/* Served once the listener restarted (10 s at most; each try is one handshake). */
	long long deadline = gs_test_now_ms() + 10000;
	while (info_with(&renewed_name, why, sizeof why) != 0)
		if (gs_test_now_ms() > deadline)
			fail_msg("the renewed certificate is not served: %s", why);
	rv = info_redial(before);
	if (rv != 0)
		fail_msg("the client connected before the reload: %s: %s", gs_status_name(rv),
		         gs_client_message(before));
	gs_packet_state st = GS_PACKET_UNKNOWN;
	assert_int_equal(gs_packet_wait(local, sr.packet, 30000, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);

	/* A certificate file that does not load: refused whole, the renewed one still served. */
	assert_int_equal(itest_sh("echo 'not a certificate' > '%s'", served), 0);
	assert_int_equal(gs_admin_reload(local, &changes, report, sizeof report),
	                 GS_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(gs_client_message(local), "tls"));
	assert_int_equal(info_with(&renewed_name, why, sizeof why), 0);
	assert_int_equal(info_redial(before), 0);
	/* Nor does a FIFO, which must not hold the daemon (it would block a reader forever). */
	assert_int_equal(itest_sh("rm -f '%s' && mkfifo '%s'", served, served), 0);
	assert_int_equal(gs_admin_reload(local, &changes, report, sizeof report),
	                 GS_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(gs_client_message(local), "not a regular file"));
	assert_int_equal(info_with(&renewed_name, why, sizeof why), 0);
	/* Nor a file of 2 MiB (it would be read whole on the loop). */
	assert_int_equal(itest_sh("rm -f '%s' && head -c 2097152 /dev/zero > '%s'", served, served),
	                 0);
	assert_int_equal(gs_admin_reload(local, &changes, report, sizeof report),
	                 GS_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(gs_client_message(local), "larger than 1 MiB"));

	itest_audit_barrier(local, ctx);
	assert_int_equal(
	        itest_audit_int(t.db, "SELECT count(*) FROM notes WHERE kind = 'tls_reloaded'"), 1);
	assert_int_equal(
	        itest_audit_int(t.db, "SELECT count(*) FROM notes WHERE kind = 'reload_refused'"),
	        3);
	gs_dmabuf_free(&b);
	gs_close(before);
	gs_close(local);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t); /* removes dir */
	itest_config_cleanup(&cfg);
	itest_sh("rm -rf '%s'", k.dir);
}

/* Connects to path (ipc, when port is 0) or 127.0.0.1:port and writes the bytes: the socket,
 * -2 when the daemon closed it while we wrote, -1 when it could not connect. */
static int garbage_send(const char *path, unsigned port, const void *bytes, size_t len)
{
	int fd;
	if (port) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = {.sin_family = AF_INET,
		                        .sin_port = htons((uint16_t)port),
		                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
			close(fd);
			fd = -1;
		}
	} else {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", path ? path : "");
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0 && write(fd, bytes, len) != (ssize_t)len) {
		close(fd);
		fd = -2;
	}
	return fd;
}

/* Waits for the daemon to close fd (from garbage_send), within 30 s (nng's handshake alone
 * may take 10): true when it did. Closes fd. */
static bool closed_by_daemon(int fd)
{
	if (fd == -2)
		return true;
	if (fd < 0)
		return false;
	bool closed = false;
	long long deadline = gs_test_now_ms() + 30000;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		long long left = deadline - gs_test_now_ms();
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		char buf[256];
		if (read(fd, buf, sizeof(buf)) <= 0) {
			closed = true;
			break;
		}
	}
	close(fd);
	return closed;
}

static bool garbage_closed(const char *path, unsigned port, const void *bytes, size_t len)
{
	return closed_by_daemon(garbage_send(path, port, bytes, len));
}

/*
 * Garbage on every listener kind: below the protocol (bytes that are no TLS, no SP header)
 * on ipc://, tcp:// and tls+tcp://, a half SP header that then stalls, and connections closed
 * by the client at once: each connection is closed, and a proper client is served on each
 * afterwards.
 */
static void test_garbage_on_every_listener(void **state)
{
	(void)state;
	itest_pki k;
	itest_pki_make(&k);
	unsigned tls_port = itest_free_port(), tcp_port = itest_free_port();
	char dir[] = "/tmp/gs-garbage-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char json[1024], tls_url[64], tcp_url[64], ipc_path[128], ipc_url[160], db[128];
	snprintf(tls_url, sizeof(tls_url), "tls+tcp://127.0.0.1:%u", tls_port);
	snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%u", tcp_port);
	snprintf(ipc_path, sizeof(ipc_path), "%s/d.sock", dir);
	snprintf(ipc_url, sizeof(ipc_url), "ipc://%s", ipc_path);
	snprintf(db, sizeof(db), "%s/audit.db", dir);
	snprintf(json, sizeof(json),
	         "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"},"
	         " \"listen\": [\"%s\", \"%s\", \"%s\"]}",
	         k.server, k.ca, ipc_url, tcp_url, tls_url);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, json), 0);
	const char *const argv[] = {GS_DAEMON_PATH, "--config", cfg.path, "--db", db, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_spawn(&t, dir, "daemon", argv), 0);

	uint8_t noise[4096];
	uint64_t seed = 42;
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (uint8_t)itest_rand(&seed);
	static const uint8_t half_sp[4] = {0, 'S', 'P', 0};
	static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	const struct {
		const void *b;
		size_t n;
	} payloads[] = {{noise, sizeof(noise)}, {noise, 7}, {http, sizeof(http) - 1}};
	for (size_t i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
		assert_true(garbage_closed(ipc_path, 0, payloads[i].b, payloads[i].n));
		assert_true(garbage_closed(NULL, tcp_port, payloads[i].b, payloads[i].n));
		assert_true(garbage_closed(NULL, tls_port, payloads[i].b, payloads[i].n));
	}
	/* Half a header, then nothing: nng's handshake timeout closes it (both at once). */
	int stalled_ipc = garbage_send(ipc_path, 0, half_sp, sizeof(half_sp));
	int stalled_tcp = garbage_send(NULL, tcp_port, half_sp, sizeof(half_sp));
	assert_true(closed_by_daemon(stalled_ipc));
	assert_true(closed_by_daemon(stalled_tcp));

	/* Connected and gone at once, before the daemon's header is out: nng 1.5.2 stopped the
	 * ipc:// and tls+tcp:// listeners for good on this (its issue 1518; server/core/
	 * nng_epipe.c). */
	for (int i = 0; i < 5; i++) {
		close(garbage_send(ipc_path, 0, "", 0));
		close(garbage_send(NULL, tcp_port, "", 0));
		close(garbage_send(NULL, tls_port, "", 0));
	}
	/* The daemon still serves on each. */
	char why[256];
	setenv("GPUSCHED_TLS_CA", k.ca, 1);
	assert_int_equal(try_info(tls_url, k.client, why, sizeof(why)), 0);
	unsetenv("GPUSCHED_TLS_CERT_KEY");
	assert_int_equal(try_info(tcp_url, NULL, why, sizeof(why)), 0);
	assert_int_equal(try_info(ipc_url, NULL, why, sizeof(why)), 0);
	unsetenv("GPUSCHED_TLS_CA");
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);
	itest_sh("rm -rf '%s'", k.dir);
}

/* A daemon on a fresh port with the certificate `cert` (cert and key in one PEM file), its
 * clients' CA `client_ca`; its URL in url. */
static void start_with_cert(gs_testd *t, itest_config *cfg, const char *cert, const char *client_ca,
                            char *url, size_t cap)
{
	snprintf(url, cap, "tls+tcp://127.0.0.1:%u", itest_free_port());
	char json[512];
	snprintf(json, sizeof(json), "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"}}",
	         cert, client_ca);
	assert_int_equal(itest_config_write(cfg, json), 0);
	const char *const args[] = {"--config", cfg->path, "--listen", url, NULL};
	assert_int_equal(gs_testd_start(t, args), 0);
}

/*
 * Pinning the daemon's certificate (issue 26, item 3): a daemon with a self-signed certificate
 * of its own, and clients whose GPUSCHED_TLS_CA is that certificate alone, trust that daemon
 * and nothing else, whatever the URL's host (an IP address too): an impostor with another
 * self-signed certificate for the very same name is refused, and so is a daemon with a
 * certificate from a CA, however valid.
 */
static void test_pinned_certificate(void **state)
{
	(void)state;
	itest_pki k;
	itest_pki_make(&k);
	assert_int_equal(itest_sh("cd '%s' && for n in pinned impostor; do openssl req -x509"
	                          " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout"
	                          " $n.key -out $n.pem -days 2 -subj /CN=daemon.test -addext"
	                          " subjectAltName=DNS:daemon.test >/dev/null 2>&1 && cat $n.pem"
	                          " $n.key > $n-both.pem || exit 1; done",
	                          k.dir),
	                 0);
	char pinned[160], pinned_both[160], impostor_both[160];
	snprintf(pinned, sizeof pinned, "%s/pinned.pem", k.dir);
	snprintf(pinned_both, sizeof pinned_both, "%s/pinned-both.pem", k.dir);
	snprintf(impostor_both, sizeof impostor_both, "%s/impostor-both.pem", k.dir);
	setenv("GPUSCHED_TLS_CA", pinned, 1);
	char why[256];
	const char *const certs[] = {pinned_both, impostor_both, k.server};
	for (int i = 0; i < 3; i++) {
		gs_testd t;
		itest_config cfg;
		char url[64];
		start_with_cert(&t, &cfg, certs[i], k.ca, url, sizeof url);
		for (int named = 0; named < 2; named++) {
			if (named)
				setenv("GPUSCHED_TLS_SERVER_NAME", "daemon.test", 1);
			int rv = try_info(url, k.client, why, sizeof(why));
			if (i == 0 && rv != 0)
				fail_msg("the pinned daemon was not served (%s): %d %s",
				         named ? "named" : "by IP", rv, why);
			if (i > 0 && rv == 0)
				fail_msg("a daemon with another certificate (%s) passed for the "
				         "pinned"
				         " one (%s)",
				         i == 1 ? "self-signed, same name" : "from a CA",
				         named ? "named" : "by IP");
			unsetenv("GPUSCHED_TLS_SERVER_NAME");
		}
		assert_int_equal(gs_testd_stop(&t), 0);
		gs_testd_cleanup(&t);
		itest_config_cleanup(&cfg);
	}
	unsetenv("GPUSCHED_TLS_CA");
	unsetenv("GPUSCHED_TLS_CERT_KEY");
	itest_sh("rm -rf '%s'", k.dir);
}

/* Whether the daemon has closed fd (a read gives EOF or an error) within timeout_ms. */
static bool ended_within(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b[64];
	return poll(&p, 1, timeout_ms) == 1 && read(fd, b, sizeof b) <= 0;
}

/*
 * Connections that open the TLS port and never finish a handshake (issue 26, item 2): nng 1.5
 * holds them for good (on main c4ca6f6, 600 were still held after 40 s and 1,100 took every
 * file descriptor). The gate ends each after handshake_timeout_ms, and those of a peer beyond
 * max_connections_per_peer at once; a client that does its handshake is served meanwhile and
 * is not ended after it.
 */
static void test_silent_handshakes_ended(void **state)
{
	(void)state;
	itest_pki k;
	itest_pki_make(&k);
	unsigned port = itest_free_port();
	char url[64], json[512];
	snprintf(url, sizeof(url), "tls+tcp://127.0.0.1:%u", port);
	snprintf(json, sizeof(json),
	         "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"},"
	         " \"handshake_timeout_ms\": 1500, \"max_connections_per_peer\": 8}",
	         k.server, k.ca);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, json), 0);
	const char *const args[] = {"--config", cfg.path, "--listen", url, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);

	enum { N = 24 };
	int fds[N];
	for (int i = 0; i < N; i++) {
		static const uint8_t nothing[1] = {0x16}; /* the first byte of a ClientHello */
		fds[i] = garbage_send(NULL, port, nothing, sizeof nothing);
		assert_true(fds[i] >= 0);
	}
	/* Over the peer's limit: ended well before the handshake timeout (the gate looks every
	 * 200 ms; 1.2 s is a bound). */
	int early = 0;
	long long deadline = gs_test_now_ms() + 1200;
	while (early < N - 8 && gs_test_now_ms() < deadline) {
		for (int i = 0; i < N; i++)
			if (fds[i] >= 0 && ended_within(fds[i], 0)) {
				close(fds[i]);
				fds[i] = -1;
				early++;
			}
		poll(NULL, 0, 20);
	}
	if (early < N - 8)
		fail_msg("%d of %d silent connections ended early, want %d", early, N, N - 8);
	/* The rest at the timeout (10 s: a bound; nng alone never ends them). */
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0) {
			assert_true(ended_within(fds[i], 10000));
			close(fds[i]);
		}
	/* A client with its handshake done stays connected past the timeout and is served. */
	setenv("GPUSCHED_TLS_CA", k.ca, 1);
	setenv("GPUSCHED_TLS_CERT_KEY", k.client, 1);
	gs_client *c;
	assert_int_equal(gs_connect(url, NULL, &c), 0);
	gs_client_set_timeout(c, 10000);
	gs_daemon_info *di = NULL;
	assert_int_equal(gs_info(c, &di), 0);
	gs_info_free(di);
	struct pollfd none = {.fd = -1};
	poll(&none, 1, 2000); /* longer than handshake_timeout_ms: what is checked, not a sync */
	assert_int_equal(gs_info(c, &di), 0);
	gs_info_free(di);
	gs_close(c);
	unsetenv("GPUSCHED_TLS_CA");
	unsetenv("GPUSCHED_TLS_CERT_KEY");
	char logtext[65536] = "";
	FILE *lf = fopen(t.log, "r");
	assert_non_null(lf);
	logtext[fread(logtext, 1, sizeof logtext - 1, lf)] = '\0';
	fclose(lf);
	assert_non_null(strstr(logtext, "in their handshake"));
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);
	itest_sh("rm -rf '%s'", k.dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_mutual_tls),
	        cmocka_unit_test(test_listener_per_tenant),
	        cmocka_unit_test(test_garbage_on_every_listener),
	        cmocka_unit_test(test_silent_handshakes_ended),
	        cmocka_unit_test(test_pinned_certificate),
	        cmocka_unit_test(test_certificates_reloaded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
