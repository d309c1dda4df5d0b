/*
 * The Prometheus endpoint (--metrics URL, config "metrics"): GET /metrics on libmicrohttpd's
 * HTTP server answers the text exposition format, to a tenant's token only. The server bounds
 * what a client may hold before any token is read: connections in all and per address, the
 * bytes of a request's headers, idle time, and the time to send a whole request.
 *
 * A scrape names its tenant with "Authorization: Bearer TOKEN" (no header: the empty token,
 * the built-in default tenant of a daemon without tenants). An administrator gets everything:
 * the daemon-wide families and one series per tenant of the gpusched_tenant_* families. Any
 * other tenant gets its own gpusched_tenant_* series and the uptime, nothing daemon-wide
 * (engine queues, packet counts and the rest would show what the other tenants do). An unknown
 * token is answered 401 and audited (request "metrics", UNAUTHENTICATED); past
 * max_bad_tokens_per_second such refusals in a second from one client address, that address
 * is answered 429 without looking at its token.
 *
 * The daemon's state belongs to the loop thread, and the HTTP handler runs on the server's:
 * a scrape hands its token to the loop (uv_async), which authenticates it and renders the text
 * for that tenant, and waits for the answer at most RENDER_WAIT_MS (then 503), so a scrape
 * never touches live state and never hangs.
 */
#include "rpc/internal.h"

#include "audit/audit.h"
#include "core/log.h"
#include "rpc/metrics.h"

#include "pbenum.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RENDER_WAIT_MS 1000
/* The HTTP server's limits: connections in all and per client address, bytes a request's
 * line and headers may take (16 KiB: a few hundred headers at most), seconds without a byte,
 * and how long a connection may take to send a whole request's headers (or stay idle
 * between requests) before it is ended. */
#define HTTP_MAX_CONNECTIONS   64u
#define HTTP_PER_PEER          8u
#define HTTP_MEMORY_LIMIT      (16u * 1024u)
#define HTTP_IDLE_S            5u
#define HTTP_HEADER_TIMEOUT_MS 5000u
#define HTTP_CHECK_MS          250u
/* Distinct client addresses whose unknown tokens are counted at once. */
#define PEER_BAD_MAX 65536u

static const char *gsd_status_name(int status)
{
	const char *n = gs_enum_name(&gpusched__v1__status__descriptor, status, "STATUS_");
	return n ? n : "UNKNOWN";
}

/* One scrape, handed from the HTTP handler to the loop and back. */
typedef struct scrape {
	struct scrape *next;
	char token[160]; /* from the Authorization header ("" without one) */
	bool too_long;   /* a token longer than any tenant's: refused unread */
	uint64_t peer;   /* the client's address, as a key (its 429 budget) */
	int status;      /* HTTP status, set by the loop */
	char *text;      /* the body (malloc'd) */
	size_t len;
	bool done;      /* the loop has answered (under mu) */
	bool abandoned; /* the handler gave up waiting: the loop frees it (under mu) */
} scrape;

/* A connection to the HTTP server, for its header deadline (under gsd_metrics.conns_mu). */
typedef struct mconn {
	struct mconn *prev, *next;
	int fd;
	uint64_t peer_conn; /* its address and port (gsd_conn_key) */
	uint64_t since_ns;  /* accepted, or its last request answered */
	bool in_request;    /* its headers are in: the handler has it */
} mconn;

typedef struct gsd_metrics {
	gsd_daemon *d;
	struct MHD_Daemon *http;
	uint16_t port; /* network order */
	uv_async_t render;
	uv_timer_t deadlines;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	scrape *queue; /* scrapes for the loop (under mu) */
	pthread_mutex_t conns_mu;
	mconn *conns;   /* live connections (under conns_mu) */
	uint64_t ended; /* connections ended for a slow request */
	/* Loop only: each client address's refusals in the current second, packed (second << 16
	 * | count): past max_bad_tokens_per_second that address is answered 429. */
	gsd_hmap peer_bad;
	uint32_t handles; /* uv handles still open */
} gsd_metrics;

/* ---- rendering (loop thread) ---- */

typedef struct buf {
	char *p;
	size_t len, cap;
	bool failed;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(buf *b, const char *fmt, ...)
{
	for (int attempt = 0; attempt < 2 && !b->failed; attempt++) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)n;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

static void header(buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram(buf *b, const char *name, const char *help, gsd_histo *h)
{
	header(b, name, "histogram", help);
	uint64_t cum = 0;
	for (int i = 0; i <= GSD_HISTO_BUCKETS; i++) {
		cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
		if (i < GSD_HISTO_BUCKETS)
			put(b, "%s_bucket{le=\"%g\"} %llu\n", name,
			    (double)gsd_histo_bounds_ns[i] / 1e9, (unsigned long long)cum);
		else
			put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	}
	put(b, "%s_sum %.9f\n%s_count %llu\n", name,
	    (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9, name,
	    (unsigned long long)cum);
}

/* Label values are names from the configuration or the protocol: escape what Prometheus
 * requires (backslash, quote, newline). */
static const char *label(const char *s, char *out, size_t cap)
{
	size_t j = 0;
	for (size_t i = 0; s[i] && j + 2 < cap; i++) {
		if (s[i] == '\\' || s[i] == '"' || s[i] == '\n') {
			out[j++] = '\\';
			out[j++] = s[i] == '\n' ? 'n' : s[i];
		} else {
			out[j++] = s[i];
		}
	}
	out[j] = '\0';
	return out;
}

/* One series per tenant it may see (all for NULL: an administrator), per family. */
static void render_tenants(gsd_daemon *d, buf *b, const gsd_tenant *only)
{
	char l1[128];
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
	        {"gpusched_tenant_queued_packets", "gauge", "The tenant's packets not yet final."},
	        {"gpusched_tenant_devices", "gauge", "The tenant's devices."},
	        {"gpusched_tenant_contexts", "gauge", "The tenant's contexts."},
	        {"gpusched_tenant_allocations", "gauge", "The tenant's allocations."},
	        {"gpusched_tenant_memory_bytes", "gauge",
	         "Video memory the tenant's allocations occupy as placed."},
	        {"gpusched_tenant_sync_objects", "gauge", "The tenant's sync objects."},
	        {"gpusched_tenant_banned", "gauge", "1 once the tenant is banned."},
	};
	for (size_t m = 0; m < sizeof(fam) / sizeof(fam[0]); m++) {
		header(b, fam[m].name, fam[m].type, fam[m].help);
		for (uint32_t i = 0; i < d->ntenants; i++) {
			const gsd_tenant *t = d->tenants[i];
			if (t->removed || (only && t != only))
				continue;
			uint64_t v = m == 0   ? t->queued_packets
			             : m == 1 ? t->devices
			             : m == 2 ? t->contexts
			             : m == 3 ? t->allocations
			             : m == 4 ? t->memory_used
			             : m == 5 ? t->syncs
			                      : t->banned;
			put(b, "%s{tenant=\"%s\"} %llu\n", fam[m].name,
			    label(t->audit_name, l1, sizeof(l1)), (unsigned long long)v);
		}
	}
}

static void render_uptime(gsd_daemon *d, buf *b)
{
	header(b, "gpusched_uptime_seconds", "gauge", "Seconds since the daemon started.");
	put(b, "gpusched_uptime_seconds %.3f\n", (double)(gsd_now_ns() - d->start_ns) / 1e9);
}

/* What only an administrator sees: every family that sums all tenants' work. */
static void render_daemon(gsd_daemon *d, buf *b)
{
	char l1[128], l2[128];
	const gsd_stats *st = &d->stats;

	/* Per engine: a gauge and two counters, one family each. */
	static const struct {
		const char *name, *type, *help;
	} engine[] = {
	        {"gpusched_engine_queue_depth", "gauge",
	         "Packets of the engine not yet final (queued or running)."},
	        {"gpusched_engine_busy_seconds_total", "counter",
	         "Engine time of every packet run; its rate is the engine's utilisation."},
	        {"gpusched_engine_resets_total", "counter",
	         "Engine resets by timeout detection and recovery."},
	};
	for (int m = 0; m < 3; m++) {
		header(b, engine[m].name, engine[m].type, engine[m].help);
		for (uint32_t a = 0; a < d->nadapters; a++)
			for (uint32_t i = 0; i < d->adapters[a].nnodes; i++) {
				const gsd_node *n = &d->adapters[a].nodes[i];
				double v = m == 0   ? (double)n->queued
				           : m == 1 ? (double)n->busy_ns / 1e9
				                    : (double)n->resets;
				put(b, "%s{adapter=\"%u\",node=\"%s\"} %.9g\n", engine[m].name, a,
				    label(n->cfg->name, l1, sizeof(l1)), v);
			}
	}

	header(b, "gpusched_packets_total", "counter", "Packets by how they ended (or began).");
	static const char *const states[] = {"submitted", "completed", "faulted", "cancelled",
	                                     "rejected"};
	const uint64_t counts[] = {st->packets_submitted, st->packets_completed,
	                           st->packets_faulted, st->packets_cancelled,
	                           st->packets_rejected};
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		put(b, "gpusched_packets_total{state=\"%s\"} %llu\n", states[i],
		    (unsigned long long)counts[i]);
	header(b, "gpusched_preemptions_total", "counter", "Runs preempted.");
	put(b, "gpusched_preemptions_total %llu\n", (unsigned long long)st->preemptions);
	header(b, "gpusched_bans_total", "counter", "Tenants banned for too many GPU timeouts.");
	put(b, "gpusched_bans_total %llu\n", (unsigned long long)st->bans);

	uint64_t paging_bytes = 0, evictions = 0;
	for (uint32_t a = 0; a < d->nadapters; a++) {
		paging_bytes += d->adapters[a].paging_bytes;
		evictions += d->adapters[a].evictions;
	}
	header(b, "gpusched_paging_bytes_total", "counter",
	       "Bytes the memory manager's paging packets moved.");
	put(b, "gpusched_paging_bytes_total %llu\n", (unsigned long long)paging_bytes);
	header(b, "gpusched_evictions_total", "counter", "Allocations moved out of a segment.");
	put(b, "gpusched_evictions_total %llu\n", (unsigned long long)evictions);

	gsd_audit_stats as;
	gsd_audit_get_stats(d->audit, &as);
	header(b, "gpusched_audit_queued_records", "gauge",
	       "Records waiting to be committed: the audit's lag.");
	put(b, "gpusched_audit_queued_records %llu\n", (unsigned long long)as.queued);
	header(b, "gpusched_audit_records_total", "counter", "Records committed.");
	put(b, "gpusched_audit_records_total %llu\n", (unsigned long long)as.records);
	header(b, "gpusched_audit_commits_total", "counter",
	       "Group commits; records_total over commits_total is the commit size.");
	put(b, "gpusched_audit_commits_total %llu\n", (unsigned long long)as.commits);
	header(b, "gpusched_audit_failed_commits_total", "counter", "Commits that failed.");
	put(b, "gpusched_audit_failed_commits_total %llu\n", (unsigned long long)as.failures);
	header(b, "gpusched_audit_dropped_records_total", "counter", "Records never written.");
	put(b, "gpusched_audit_dropped_records_total %llu\n", (unsigned long long)as.dropped);
	header(b, "gpusched_audit_packet_events_total", "counter",
	       "Packet events committed, by where they are kept: in the packet's own row (its "
	       "SUBMITTED and a straight READY, RUNNING, COMPLETED) or as rows of "
	       "packet_event_rows (everything else; a kept READY or RUNNING moved there when its "
	       "run left the straight path counts again).");
	put(b, "gpusched_audit_packet_events_total{kept=\"packet_row\"} %llu\n",
	    (unsigned long long)as.events_kept);
	put(b, "gpusched_audit_packet_events_total{kept=\"event_row\"} %llu\n",
	    (unsigned long long)as.event_rows);
	header(b, "gpusched_audit_healthy", "gauge", "1 while records are being committed.");
	put(b, "gpusched_audit_healthy %d\n", gsd_audit_get_health(d->audit) == GSD_AUDIT_OK);

	header(b, "gpusched_rpc_requests_total", "counter", "Requests decoded, by kind.");
	for (int i = 0; i < GSD_STATS_BODIES; i++)
		if (st->by_request[i])
			put(b, "gpusched_rpc_requests_total{request=\"%s\"} %llu\n",
			    gsd_request_name(i), (unsigned long long)st->by_request[i]);
	header(b, "gpusched_rpc_errors_total", "counter",
	       "Requests answered with an error, by status.");
	for (int i = 0; i < GSD_STATS_STATUSES; i++)
		if (st->by_status[i])
			put(b, "gpusched_rpc_errors_total{status=\"%s\"} %llu\n",
			    label(gsd_status_name(i), l2, sizeof(l2)),
			    (unsigned long long)st->by_status[i]);
	header(b, "gpusched_rpc_doorbell_total", "counter",
	       "Wake-ups that found no request (a connection closed with its request not yet "
	       "taken): the next request came through a callback instead.");
	put(b, "gpusched_rpc_doorbell_total %llu\n",
	    (unsigned long long)(d->rpc ? d->rpc->bells : 0));
	header(b, "gpusched_rpc_answers_parked_total", "counter",
	       "Answers that waited behind their connection's previous answer.");
	put(b, "gpusched_rpc_answers_parked_total %llu\n",
	    (unsigned long long)(d->rpc ? atomic_load(&d->rpc->parks) : 0));
	header(b, "gpusched_rpc_read_ahead_total", "counter",
	       "Requests nng read ahead for a pipelining connection (taken through callbacks).");
	put(b, "gpusched_rpc_read_ahead_total %llu\n",
	    (unsigned long long)(d->rpc ? atomic_load(&d->rpc->ra_taken) : 0));
	header(b, "gpusched_rpc_unread_closed_total", "counter",
	       "Connections closed for leaving answers unread (twice max_inflight_requests, or "
	       "the most while half of max_workers hold unread answers).");
	put(b, "gpusched_rpc_unread_closed_total %llu\n",
	    (unsigned long long)(d->rpc ? d->rpc->unread_closed : 0));
	histogram(
	        b, "gpusched_submit_latency_seconds",
	        "Submit and SubmitBatch: request received to answer sent (after its audit commit).",
	        &d->stats.submit_latency);
	histogram(b, "gpusched_queue_wait_seconds",
	          "Packets: submitted to first started on the engine.", &d->stats.queue_wait);
}

static void set_text(scrape *sc, int status, const char *text)
{
	sc->status = status;
	sc->text = strdup(text);
	sc->len = sc->text ? strlen(text) : 0;
}

/* Authenticates one scrape and renders what its tenant may see (loop thread). */
static void answer(gsd_metrics *m, scrape *sc)
{
	gsd_daemon *d = m->d;
	uint64_t second = gsd_now_ns() / 1000000000u;
	uint64_t v = (uint64_t)(uintptr_t)gsd_hmap_get(&m->peer_bad, sc->peer);
	uint32_t bad = v >> 16 == second ? (uint32_t)(v & 0xffff) : 0;
	if (bad >= d->cfg.max_bad_tokens_per_second) {
		set_text(sc, 429, "too many unknown tokens from this address this second\n");
		return;
	}
	gsd_tenant *t = sc->too_long ? NULL : gsd_tenant_by_token(d, sc->token);
	if (!t) {
		if (bad < 0xffff && (bad || m->peer_bad.count < PEER_BAD_MAX))
			gsd_hmap_put(&m->peer_bad, sc->peer,
			             (void *)(uintptr_t)(second << 16 | (bad + 1)));
		gsd_audit_error(d->audit, NULL, "metrics", GSD_ST(UNAUTHENTICATED),
		                sc->token[0] || sc->too_long
		                        ? "unknown tenant token on /metrics"
		                        : "no token on /metrics (Authorization: Bearer TOKEN)");
		set_text(sc, 401, "a tenant token is needed: Authorization: Bearer TOKEN\n");
		return;
	}
	buf b = {.cap = 8192};
	b.p = malloc(b.cap);
	if (!b.p) {
		set_text(sc, 500, "out of memory\n");
		return;
	}
	b.p[0] = '\0';
	if (t->conf.admin)
		render_daemon(d, &b);
	render_tenants(d, &b, t->conf.admin ? NULL : t);
	render_uptime(d, &b);
	if (b.failed) {
		free(b.p);
		set_text(sc, 500, "out of memory\n");
		return;
	}
	sc->status = 200;
	sc->text = b.p;
	sc->len = b.len;
}

static void free_scrape(scrape *sc)
{
	sodium_memzero(sc->token, sizeof(sc->token));
	free(sc->text);
	free(sc);
}

static void render_cb(uv_async_t *h)
{
	gsd_metrics *m = h->data;
	pthread_mutex_lock(&m->mu);
	scrape *q = m->queue;
	m->queue = NULL;
	pthread_mutex_unlock(&m->mu);
	while (q) {
		scrape *sc = q;
		q = sc->next;
		answer(m, sc);
		sodium_memzero(sc->token, sizeof(sc->token));
		pthread_mutex_lock(&m->mu);
		bool abandoned = sc->abandoned;
		sc->done = true;
		pthread_cond_broadcast(&m->cv);
		pthread_mutex_unlock(&m->mu);
		if (abandoned)
			free_scrape(sc);
	}
}

/* ---- serving (libmicrohttpd's thread) ---- */

/* The token of "Authorization: Bearer TOKEN" ("" without the header). */
static void read_token(struct MHD_Connection *conn, scrape *sc)
{
	const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
	if (!auth)
		return;
	if (strncasecmp(auth, "Bearer ", 7) != 0) {
		sc->too_long = true; /* another scheme: no token of ours */
		return;
	}
	const char *tok = auth + 7;
	while (*tok == ' ')
		tok++;
	size_t n = strlen(tok);
	while (n && (tok[n - 1] == ' ' || tok[n - 1] == '\r' || tok[n - 1] == '\n'))
		n--;
	if (n >= sizeof(sc->token)) {
		sc->too_long = true;
		return;
	}
	memcpy(sc->token, tok, n);
	sc->token[n] = '\0';
}

static enum MHD_Result reply(struct MHD_Connection *conn, int status, const char *text, size_t len)
{
	struct MHD_Response *r =
	        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"gpusched\"");
	MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	enum MHD_Result rv = MHD_queue_response(conn, (unsigned)status, r);
	MHD_destroy_response(r);
	return rv;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req_cls)
{
	(void)version;
	(void)upload;
	gsd_metrics *m = cls;
	const union MHD_ConnectionInfo *ci =
	        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	mconn *mc = ci ? ci->socket_context : NULL;
	if (mc) {
		pthread_mutex_lock(&m->conns_mu);
		mc->in_request = true;
		pthread_mutex_unlock(&m->conns_mu);
	}
	if (*upload_size) {
		*upload_size = 0; /* a body is not read: GET has none */
		return MHD_YES;
	}
	if (!*req_cls) {
		*req_cls = m; /* headers are in; answer on the next call, body or none */
		return MHD_YES;
	}
	if (strcmp(url, "/metrics") != 0) {
		static const char nf[] = "not found: the endpoint is /metrics\n";
		return reply(conn, 404, nf, sizeof nf - 1);
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		static const char na[] = "only GET\n";
		return reply(conn, 405, na, sizeof na - 1);
	}
	scrape *sc = calloc(1, sizeof(*sc));
	if (!sc)
		return MHD_NO;
	read_token(conn, sc);
	uint16_t port;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	sc->peer = gsd_peer_key_sockaddr(ci ? ci->client_addr : NULL, &port);
	/* The loop's answer, or 503 after RENDER_WAIT_MS. */
	pthread_mutex_lock(&m->mu);
	sc->next = m->queue;
	m->queue = sc;
	uv_async_send(&m->render);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += RENDER_WAIT_MS / 1000;
	int wrc = 0;
	while (!sc->done && wrc == 0)
		wrc = pthread_cond_timedwait(&m->cv, &m->mu, &dl);
	bool done = sc->done;
	if (!done)
		sc->abandoned = true; /* the loop frees it when it gets to it */
	pthread_mutex_unlock(&m->mu);
	enum MHD_Result rv;
	if (done && sc->text)
		rv = reply(conn, sc->status, sc->text, sc->len);
	else if (done)
		rv = reply(conn, sc->status, "", 0);
	else
		rv = reply(conn, 503, "the daemon did not answer in time\n", 34);
	if (done)
		free_scrape(sc);
	return rv;
}

/* Tracks each connection for its header deadline. */
static void notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                              enum MHD_ConnectionNotificationCode code)
{
	gsd_metrics *m = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		mconn *mc = calloc(1, sizeof *mc);
		if (!mc)
			return;
		const union MHD_ConnectionInfo *fi =
		        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *ai =
		        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		uint16_t port;
		uint64_t peer = gsd_peer_key_sockaddr(ai ? ai->client_addr : NULL, &port);
		mc->fd = fi ? fi->connect_fd : -1;
		mc->peer_conn = gsd_conn_key(peer, port);
		mc->since_ns = gsd_now_ns();
		pthread_mutex_lock(&m->conns_mu);
		mc->next = m->conns;
		if (m->conns)
			m->conns->prev = mc;
		m->conns = mc;
		pthread_mutex_unlock(&m->conns_mu);
		*socket_context = mc;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
		mconn *mc = *socket_context;
		pthread_mutex_lock(&m->conns_mu);
		if (mc->prev)
			mc->prev->next = mc->next;
		else
			m->conns = mc->next;
		if (mc->next)
			mc->next->prev = mc->prev;
		pthread_mutex_unlock(&m->conns_mu);
		free(mc);
		*socket_context = NULL;
	}
}

/* A request answered: the connection's next one has its own deadline. */
static void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                              enum MHD_RequestTerminationCode code)
{
	(void)code;
	(void)req_cls;
	gsd_metrics *m = cls;
	const union MHD_ConnectionInfo *ci =
	        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	mconn *mc = ci ? ci->socket_context : NULL;
	if (!mc)
		return;
	pthread_mutex_lock(&m->conns_mu);
	mc->in_request = false;
	mc->since_ns = gsd_now_ns();
	pthread_mutex_unlock(&m->conns_mu);
}

static void http_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[256];
	vsnprintf(line, sizeof line, fmt, ap);
	size_t n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	GSD_DEBUG("metrics: %s", line);
}

/* ---- deadlines (loop) ---- */

/* fd is still the connection `key` accepted on the metrics port (the number was not reused). */
static bool still_conn(const gsd_metrics *m, int fd, uint64_t key)
{
	uint16_t port;
	uint64_t peer, conn;
	return gsd_socket_conn(fd, &port, &peer, &conn) && port == m->port && conn == key;
}

/* A connection that has not sent a whole request's headers within HTTP_HEADER_TIMEOUT_MS of
 * its start (or of its last answer) is ended: a slow sender holds no connection for long. */
static void deadlines_cb(uv_timer_t *t)
{
	gsd_metrics *m = t->data;
	uint64_t now = gsd_now_ns();
	uint64_t ended = 0;
	pthread_mutex_lock(&m->conns_mu);
	for (mconn *mc = m->conns; mc; mc = mc->next)
		if (!mc->in_request && now - mc->since_ns > HTTP_HEADER_TIMEOUT_MS * 1000000ull &&
		    still_conn(m, mc->fd, mc->peer_conn)) {
			shutdown(mc->fd, SHUT_RDWR);
			mc->since_ns = now; /* once */
			ended++;
		}
	m->ended += ended;
	pthread_mutex_unlock(&m->conns_mu);
	if (ended)
		GSD_WARN("metrics: ended %llu connections that sent no whole request within %u ms"
		         " (%llu since start)",
		         (unsigned long long)ended, HTTP_HEADER_TIMEOUT_MS,
		         (unsigned long long)m->ended);
}

static void closed(uv_handle_t *h)
{
	gsd_metrics *m = h->data;
	if (--m->handles)
		return;
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->conns_mu);
	while (m->queue) {
		scrape *sc = m->queue;
		m->queue = sc->next;
		free_scrape(sc); /* abandoned: their handlers gave up */
	}
	gsd_hmap_free(&m->peer_bad);
	free(m);
}

static void close_handles(gsd_metrics *m)
{
	uv_close((uv_handle_t *)&m->render, closed);
	uv_close((uv_handle_t *)&m->deadlines, closed);
}

/* http://HOST:PORT (or tcp://HOST:PORT) as an address to listen on: 0 or -1. */
static int parse_url(const char *url_in, struct sockaddr_storage *sa, socklen_t *len)
{
	const char *rest = !strncmp(url_in, "http://", 7)  ? url_in + 7
	                   : !strncmp(url_in, "tcp://", 6) ? url_in + 6
	                                                   : NULL;
	if (!rest)
		return -1;
	char host[256];
	const char *port;
	if (rest[0] == '[') {
		const char *end = strchr(rest, ']');
		if (!end || end[1] != ':' || (size_t)(end - rest - 1) >= sizeof host)
			return -1;
		memcpy(host, rest + 1, (size_t)(end - rest - 1));
		host[end - rest - 1] = '\0';
		port = end + 2;
	} else {
		const char *colon = strrchr(rest, ':');
		if (!colon || (size_t)(colon - rest) >= sizeof host)
			return -1;
		memcpy(host, rest, (size_t)(colon - rest));
		host[colon - rest] = '\0';
		port = colon + 1;
	}
	char portbuf[8];
	size_t pl = strcspn(port, "/");
	if (pl == 0 || pl >= sizeof portbuf || strspn(port, "0123456789") != pl)
		return -1;
	memcpy(portbuf, port, pl);
	portbuf[pl] = '\0';
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	if (getaddrinfo(host[0] ? host : NULL, portbuf, &hints, &ai) != 0)
		return -1;
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

int gsd_metrics_start(gsd_daemon *d, const char *url_in)
{
	if (!url_in[0])
		return 0;
	struct sockaddr_storage sa;
	socklen_t salen;
	if (parse_url(url_in, &sa, &salen) != 0) {
		GSD_ERROR("cannot serve metrics on %s: want http://HOST:PORT", url_in);
		return -1;
	}
	gsd_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -1;
	m->d = d;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_mutex_init(&m->conns_mu, NULL);
	gsd_hmap_init(&m->peer_bad);
	uv_async_init(d->loop, &m->render, render_cb);
	m->render.data = m;
	uv_unref((uv_handle_t *)&m->render);
	uv_timer_init(d->loop, &m->deadlines);
	m->deadlines.data = m;
	m->handles = 2;
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
	                 (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	m->http = MHD_start_daemon(
	        flags, 0, NULL, NULL, handle, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
	        MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
	        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_PER_PEER,
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY_LIMIT,
	        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S, MHD_OPTION_NOTIFY_CONNECTION,
	        notify_connection, m, MHD_OPTION_NOTIFY_COMPLETED, request_completed, m,
	        MHD_OPTION_EXTERNAL_LOGGER, http_log, m, MHD_OPTION_END);
	const union MHD_DaemonInfo *di =
	        m->http ? MHD_get_daemon_info(m->http, MHD_DAEMON_INFO_BIND_PORT) : NULL;
	if (!m->http || !di) {
		GSD_ERROR("cannot serve metrics on %s: %s", url_in,
		          m->http ? "no port"
		                  : "cannot listen there (in use, or not an address of"
		                    " this host)");
		if (m->http)
			MHD_stop_daemon(m->http);
		close_handles(m);
		return -1;
	}
	m->port = htons(di->port);
	uv_timer_start(&m->deadlines, deadlines_cb, HTTP_CHECK_MS, HTTP_CHECK_MS);
	uv_unref((uv_handle_t *)&m->deadlines);
	d->metrics = m;
	GSD_INFO("metrics on %s/metrics (at most %u connections, %u per address)", url_in,
	         HTTP_MAX_CONNECTIONS, HTTP_PER_PEER);
	return 0;
}

void gsd_metrics_stop(gsd_daemon *d)
{
	gsd_metrics *m = d->metrics;
	if (!m)
		return;
	d->metrics = NULL;
	MHD_stop_daemon(m->http);
	close_handles(m);
}
