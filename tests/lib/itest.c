#include "itest.h"

#include "core/wire_id.h"

#include <sodium.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sqlite3.h>

#include "gpusched.pb-c.h"

gs_client *itest_connect(const gs_testd *t, const char *token)
{
	gs_client *c = NULL;
	char why[256];
	int rv = gs_connect_ex(t->url, token ? token : "", &c, why, sizeof(why));
	if (rv != 0)
		fail_msg("connect to %s: %s (%s)", t->url, gs_status_name(rv), why);
	gs_client_set_timeout(c, ITEST_TIMEOUT_MS);
	return c;
}

void itest_layout_of(gs_client *c, itest_layout *out)
{
	gs_daemon_info *info = NULL;
	int rv = gs_info(c, &info);
	if (rv != 0)
		fail_msg("info: %s: %s", gs_status_name(rv), gs_client_message(c));
	assert_true(info->adapter_count >= 1);
	const gs_adapter_info *a = &info->adapters[0];
	memset(out, 0, sizeof(*out));
	out->nodes = (uint32_t)a->node_count;
	out->paging_node = UINT32_MAX;
	for (size_t i = 0; i < a->node_count; i++)
		if (a->nodes[i].paging && out->paging_node == UINT32_MAX)
			out->paging_node = a->nodes[i].id;
	for (size_t i = 0; i < a->segment_count; i++) {
		const gs_segment_info *s = &a->segments[i];
		out->segment_set |= 1u << s->id;
		if (s->kind == GS_SEGMENT_MEMORY && !out->memory_segment)
			out->memory_segment = s->id;
		if (s->kind == GS_SEGMENT_APERTURE && !out->aperture_segment)
			out->aperture_segment = s->id;
	}
	out->max_dma_buffer = a->max_dma_buffer;
	gs_info_free(info);
	assert_int_not_equal(out->paging_node, UINT32_MAX);
}

uint64_t itest_context(gs_client *c, uint64_t device, uint32_t node, uint32_t paging_node)
{
	gs_context_desc desc;
	gs_context_desc_init(&desc, device, node);
	desc.info.paging_companion_node_id = paging_node;
	/* Small enough for any configured max_dma_buffer; DMA buffers may grow past it. */
	desc.info.dma_buffer_size = 4096;
	uint64_t ctx = 0;
	int rv = gs_context_create(c, &desc, &ctx, NULL);
	if (rv != 0)
		fail_msg("context_create on node %u: %s: %s", node, gs_status_name(rv),
		         gs_client_message(c));
	return ctx;
}

void itest_alloc(gs_client *c, uint64_t device, uint64_t size, uint32_t supported_set,
                 uint32_t preference, gs_allocation_placement *out)
{
	gs_allocation_desc desc = {.device = device,
	                           .size = size,
	                           .supported_segment_set = supported_set,
	                           .segment_preference = preference};
	int rv = gs_allocation_create(c, &desc, out);
	if (rv != 0)
		fail_msg("allocation_create of %llu bytes: %s: %s", (unsigned long long)size,
		         gs_status_name(rv), gs_client_message(c));
}

uint64_t itest_audit_barrier(gs_client *c, uint64_t context)
{
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	gs_submit_result res;
	int rv = gs_submit(c, context, &buf, GS_SUBMIT_NULL_RENDERING, &res);
	gs_dmabuf_free(&buf);
	if (rv != 0)
		fail_msg("audit barrier submit: %s: %s", gs_status_name(rv), gs_client_message(c));
	return res.packet;
}

uint64_t itest_submit_wait(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t flags)
{
	gs_submit_result res;
	int rv = gs_submit(c, context, dma, flags, &res);
	if (rv != 0)
		fail_msg("submit: %s: %s", gs_status_name(rv), gs_client_message(c));
	gs_packet_state st = GS_PACKET_UNKNOWN;
	rv = gs_packet_wait(c, res.packet, ITEST_TIMEOUT_MS, &st, NULL);
	if (rv != 0)
		fail_msg("packet_wait %llu: %s: %s", (unsigned long long)res.packet,
		         gs_status_name(rv), gs_client_message(c));
	assert_int_equal(st, GS_PACKET_COMPLETED);
	return res.packet;
}

/* ---- audit file ---- */

int64_t itest_audit_int(const char *db, const char *fmt, ...)
{
	char sql[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	sqlite3 *h = NULL;
	int64_t v = -1;
	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		fprintf(stderr, "itest: cannot open %s: %s\n", db, h ? sqlite3_errmsg(h) : "?");
		sqlite3_close(h);
		return -1;
	}
	sqlite3_busy_timeout(h, 5000);
	sqlite3_stmt *s = NULL;
	if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) {
		fprintf(stderr, "itest: %s: %s\n", sql, sqlite3_errmsg(h));
	} else if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
		v = sqlite3_column_int64(s, 0);
	}
	sqlite3_finalize(s);
	sqlite3_close(h);
	return v;
}

int64_t itest_audit_errors(const char *db)
{
	return itest_audit_int(db, "SELECT COUNT(*) FROM errors");
}

int64_t itest_audit_last_error_status(const char *db)
{
	return itest_audit_int(db, "SELECT status FROM errors ORDER BY seq DESC LIMIT 1");
}

/* ---- configuration files ---- */

int itest_config_write(itest_config *cfg, const char *json)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->dir, sizeof(cfg->dir), "/tmp/gpusched-cfg-XXXXXX");
	if (!mkdtemp(cfg->dir)) {
		cfg->dir[0] = '\0';
		return -1;
	}
	snprintf(cfg->path, sizeof(cfg->path), "%s/config.json", cfg->dir);
	FILE *f = fopen(cfg->path, "w");
	if (!f)
		return -1;
	int rc = fputs(json, f) < 0 ? -1 : 0;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

void itest_config_cleanup(itest_config *cfg)
{
	if (!cfg->dir[0])
		return;
	unlink(cfg->path);
	rmdir(cfg->dir);
	cfg->dir[0] = '\0';
}

/* ---- child processes ---- */

typedef struct sink {
	char *buf;
	size_t len, cap;
} sink;

static void sink_add(sink *s, const char *data, size_t n)
{
	if (s->len + n + 1 > s->cap) {
		size_t ncap = s->cap ? s->cap : 4096;
		while (s->len + n + 1 > ncap)
			ncap *= 2;
		char *nb = realloc(s->buf, ncap);
		assert_non_null(nb);
		s->buf = nb;
		s->cap = ncap;
	}
	memcpy(s->buf + s->len, data, n);
	s->len += n;
	s->buf[s->len] = '\0';
}

static void sink_finish(sink *s)
{
	if (!s->buf)
		sink_add(s, "", 0);
}

void itest_run_argv(char *const argv[], int timeout_ms, itest_run *out)
{
	memset(out, 0, sizeof(*out));
	out->exit_code = -1;
	int po[2], pe[2];
	assert_int_equal(pipe2(po, O_CLOEXEC), 0);
	assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0)
			dup2(devnull, STDIN_FILENO);
		dup2(po[1], STDOUT_FILENO);
		dup2(pe[1], STDERR_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	sink so = {0}, se = {0};
	struct pollfd pfd[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
	long long deadline = gs_test_now_ms() + timeout_ms;
	int open_fds = 2;
	bool timed_out = false;
	while (open_fds > 0) {
		long long left = deadline - gs_test_now_ms();
		if (left <= 0) {
			timed_out = true;
			break;
		}
		int rc = poll(pfd, 2, (int)left);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0) {
			timed_out = true;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char chunk[4096];
			ssize_t n = read(pfd[i].fd, chunk, sizeof(chunk));
			if (n > 0) {
				sink_add(i == 0 ? &so : &se, chunk, (size_t)n);
			} else if (n == 0 || errno != EINTR) {
				close(pfd[i].fd);
				pfd[i].fd = -1;
				open_fds--;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (pfd[i].fd >= 0)
			close(pfd[i].fd);
	int status = 0;
	if (timed_out) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		out->exit_code = -1;
	} else {
		/* Both pipes reached EOF: the child closed them, which it does by exiting (they
		 * are not inherited further). Bound the wait with the pidfd anyway. */
		int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (pidfd >= 0) {
			long long left = deadline - gs_test_now_ms();
			struct pollfd pp = {.fd = pidfd, .events = POLLIN};
			if (poll(&pp, 1, left > 0 ? (int)left : 0) <= 0)
				kill(pid, SIGKILL);
			close(pidfd);
		}
		waitpid(pid, &status, 0);
		out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	}
	sink_finish(&so);
	sink_finish(&se);
	out->out = so.buf;
	out->err = se.buf;
}

void itest_run_free(itest_run *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

uint64_t itest_rand(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

uint64_t itest_rand_below(uint64_t *state, uint64_t n)
{
	return n ? itest_rand(state) % n : 0;
}

void *itest_pack(const Gpusched__V1__Request *req, size_t *len)
{
	*len = gpusched__v1__request__get_packed_size(req);
	uint8_t *buf = malloc(*len ? *len : 1);
	assert_non_null(buf);
	gpusched__v1__request__pack(req, buf);
	return buf;
}

int itest_raw_call(const char *url, const void *data, size_t len, int timeout_ms,
                   Gpusched__V1__Response **out)
{
	/*
	 * A raw REQ socket, with the request id written by hand: a cooked REQ socket keeps a
	 * request it could not send yet (the daemon closed the connection at once, as it does
	 * for a peer past its limits) and nng 1.5 leaks it at close; a raw send that finds no
	 * connection in time gives the message back.
	 */
	nng_socket s;
	nng_msg *m = NULL;
	*out = NULL;
	int rv = nng_req0_open_raw(&s);
	if (rv != 0)
		return rv;
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0);
	rv = nng_dial(s, url, NULL, 0);
	if (rv == 0)
		rv = nng_msg_alloc(&m, 0);
	if (rv == 0 && ((rv = nng_msg_append(m, data, len)) != 0 ||
	                (rv = nng_msg_header_append_u32(m, 0x80000001u)) != 0 ||
	                (rv = nng_sendmsg(s, m, 0)) != 0))
		nng_msg_free(m);
	m = NULL;
	if (rv == 0)
		rv = nng_recvmsg(s, &m, 0);
	if (rv == 0) {
		uint32_t id = 0;
		/* The id is in the header, or still at the front of the body. */
		if (nng_msg_header_len(m) < 4)
			rv = nng_msg_trim_u32(m, &id);
		if (rv == 0) {
			*out = gpusched__v1__response__unpack(NULL, nng_msg_len(m),
			                                      nng_msg_body(m));
			if (!*out)
				rv = NNG_EPROTO;
		}
		nng_msg_free(m);
	}
	nng_close(s);
	return rv;
}

/* ---- attacks ---- */

int itest_raw_ipc_peer(const char *url)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url + strlen("ipc://"));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0}; /* REQ0 */
	uint8_t reply[8];
	struct timeval tv = {5, 0};
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello) ||
	    recv(fd, reply, sizeof(reply), MSG_WAITALL) != (ssize_t)sizeof(reply)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

bool itest_raw_send(int fd, uint32_t id, const void *body, size_t len)
{
	uint8_t head[13] = {1}; /* a message: its length, then the request id */
	uint64_t n = len + 4;
	for (int i = 0; i < 8; i++)
		head[1 + i] = (uint8_t)(n >> (56 - 8 * i));
	id |= 0x80000000u;
	for (int i = 0; i < 4; i++)
		head[9 + i] = (uint8_t)(id >> (24 - 8 * i));
	return send(fd, head, sizeof(head), MSG_NOSIGNAL) == (ssize_t)sizeof(head) &&
	       send(fd, body, len, MSG_NOSIGNAL) == (ssize_t)len;
}

uint16_t itest_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	uint16_t port = 0;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

int itest_idle_peer(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002)};
	struct sockaddr_in to = {.sin_family = AF_INET,
	                         .sin_port = htons(port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {2, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0}; /* REQ0 */
	uint8_t reply[8];
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
	    connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0 ||
	    send(fd, hello, sizeof(hello), 0) != (ssize_t)sizeof(hello) ||
	    recv(fd, reply, sizeof(reply), MSG_WAITALL) != (ssize_t)sizeof(reply)) {
		close(fd);
		return -1;
	}
	return fd;
}

uint8_t *itest_huge_batch(size_t n, const char *token, size_t *len)
{
	size_t tok = strlen(token);
	size_t body = 2 * n;
	uint8_t *buf = malloc(2 + tok + 16 + body);
	if (!buf || tok > 127) {
		free(buf);
		return NULL;
	}
	size_t at = 0;
	buf[at++] = 0x12; /* field 2 (token), length-delimited */
	buf[at++] = (uint8_t)tok;
	memcpy(buf + at, token, tok);
	at += tok;
	buf[at++] = 0xc2; /* field 24 (submit_batch): (24 << 3) | 2 = 194 = 0xc2 0x01 */
	buf[at++] = 0x01;
	size_t v = body;
	do {
		buf[at++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	for (size_t i = 0; i < n; i++) {
		buf[at++] = 0x0a; /* SubmitBatchRequest.packets, empty */
		buf[at++] = 0x00;
	}
	*len = at;
	return buf;
}

/* ---- certificates ---- */

int itest_sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* A key and a certificate signed by ca (or self-signed CA when ca is NULL), cert+key in one
 * PEM file at both. */
static void make_cert(const char *dir, const char *name, const char *ca, const char *san,
                      char *both, size_t cap)
{
	snprintf(both, cap, "%s/%s-both.pem", dir, name);
	if (!ca) {
		assert_int_equal(
		        itest_sh("cd '%s' && openssl req -x509 -newkey ec -pkeyopt "
		                 "ec_paramgen_curve:prime256v1 -nodes -keyout %s.key -out %s.pem "
		                 "-days 2 "
		                 "-subj /CN=%s >/dev/null 2>&1 && cat %s.pem %s.key > %s-both.pem",
		                 dir, name, name, name, name, name, name),
		        0);
		return;
	}
	assert_int_equal(
	        itest_sh("cd '%s' && printf 'subjectAltName=%s\\n' > %s.ext && openssl req -new"
	                 " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout"
	                 " %s.key -out %s.csr -subj /CN=%s >/dev/null 2>&1 && openssl x509 -req"
	                 " -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial -out %s.pem -days"
	                 " 2 -extfile %s.ext >/dev/null 2>&1 && cat %s.pem %s.key > %s-both.pem",
	                 dir, san, name, name, name, name, name, ca, ca, name, name, name, name,
	                 name),
	        0);
}

void itest_pki_make(itest_pki *k)
{
	snprintf(k->dir, sizeof(k->dir), "/tmp/gs-tls-XXXXXX");
	assert_non_null(mkdtemp(k->dir));
	char unused[128];
	make_cert(k->dir, "ca", NULL, NULL, unused, sizeof(unused));
	snprintf(k->ca, sizeof(k->ca), "%s/ca.pem", k->dir);
	make_cert(k->dir, "server", "ca", "IP:127.0.0.1,DNS:daemon.test", k->server,
	          sizeof(k->server));
	make_cert(k->dir, "client", "ca", "DNS:client", k->client, sizeof(k->client));
	make_cert(k->dir, "other", NULL, NULL, unused, sizeof(unused));
	make_cert(k->dir, "stranger", "other", "DNS:stranger", k->stranger, sizeof(k->stranger));
}

void itest_pki_cert(const itest_pki *k, const char *name, const char *san, char *out, size_t cap)
{
	make_cert(k->dir, name, "ca", san, out, cap);
}

uint64_t itest_wire_unmap(const char *db, const char *domain, uint32_t adapter, uint32_t node,
                          uint64_t wire)
{
	/* The last file's key, kept: a timeline maps hundreds of seqs. */
	static char last_db[512];
	static gsd_wire_key k;
	uint64_t tweak = strcmp(domain, "packet") == 0   ? GSD_WIRE_PACKET
	                 : strcmp(domain, "seq") == 0    ? GSD_WIRE_SEQ
	                 : strcmp(domain, "events") == 0 ? GSD_WIRE_EVENTS
	                                                 : gsd_wire_fence_tweak(adapter, node);
	if (strcmp(last_db, db) == 0)
		return gsd_wire_unmap(&k, tweak, wire);
	sqlite3 *h = NULL;
	sqlite3_stmt *s = NULL;
	unsigned char raw[GSD_WIRE_KEY_BYTES];
	size_t len = 0;
	assert_int_equal(sodium_init() < 0, 0);
	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h, "SELECT value FROM meta WHERE key = 'wire_key'", -1,
	                                    &s, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	const char *hex = (const char *)sqlite3_column_text(s, 0);
	assert_int_equal(sodium_hex2bin(raw, sizeof raw, hex, strlen(hex), NULL, &len, NULL), 0);
	assert_int_equal(len, sizeof raw);
	sqlite3_finalize(s);
	sqlite3_close(h);
	gsd_wire_key_init(&k, raw);
	snprintf(last_db, sizeof last_db, "%s", db);
	return gsd_wire_unmap(&k, tweak, wire);
}
