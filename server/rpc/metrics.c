/*
 * The Prometheus endpoint (--metrics URL, config "metrics"): GET /metrics on nng's own HTTP
 * server answers the text exposition format, to a tenant's token only.
 *
 * A scrape names its tenant with "Authorization: Bearer TOKEN" (no header: the empty token,
 * the built-in default tenant of a daemon without tenants). An administrator gets everything:
 * the daemon-wide families and one series per tenant of the gpusched_tenant_* families. Any
 * other tenant gets its own gpusched_tenant_* series and the uptime, nothing daemon-wide
 * (engine queues, packet counts and the rest would show what the other tenants do). An unknown
 * token is answered 401 and audited (request "metrics", UNAUTHENTICATED); past
 * max_bad_tokens_per_second such refusals in a second, 429 without looking at the token.
 *
 * The daemon's state belongs to the loop thread, and the HTTP handler runs on an nng thread:
 * a scrape hands its token to the loop (uv_async), which authenticates it and renders the text
 * for that tenant, and waits for the answer at most RENDER_WAIT_MS (then 503), so a scrape
 * never touches live state and never hangs.
 */
#include "rpc/internal.h"

#include "audit/audit.h"
#include "core/log.h"
#include "rpc/metrics.h"

#include "pbenum.h"

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RENDER_WAIT_MS 1000

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
	int status;      /* HTTP status, set by the loop */
	char *text;      /* the body (malloc'd) */
	size_t len;
	bool done;      /* the loop has answered (under mu) */
	bool abandoned; /* the handler gave up waiting: the loop frees it (under mu) */
} scrape;

typedef struct gsd_metrics {
	gsd_daemon *d;
	nng_http_server *server;
	nng_url *url;
	uv_async_t render;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	scrape *queue; /* scrapes for the loop (under mu) */
	/* Loop only: refusals in the current second (max_bad_tokens_per_second). */
	uint64_t bad_second;
	uint32_t bad_count;
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
	if (m->bad_second != second) {
		m->bad_second = second;
		m->bad_count = 0;
	}
	if (m->bad_count >= d->cfg.max_bad_tokens_per_second) {
		set_text(sc, 429, "too many unknown tokens this second\n");
		return;
	}
	gsd_tenant *t = sc->too_long ? NULL : gsd_tenant_by_token(d, sc->token);
	if (!t) {
		m->bad_count++;
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

/* ---- serving (nng thread) ---- */

/* The token of "Authorization: Bearer TOKEN" ("" without the header). */
static void read_token(nng_aio *aio, scrape *sc)
{
	nng_http_req *req = nng_aio_get_input(aio, 0);
	const char *auth = req ? nng_http_req_get_header(req, "Authorization") : NULL;
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

static void handle(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	gsd_metrics *m = nng_http_handler_get_data(h);
	nng_http_res *res;
	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	scrape *sc = calloc(1, sizeof(*sc));
	if (!sc) {
		nng_http_res_free(res);
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	read_token(aio, sc);
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
	int status = done ? sc->status : 503;
	const char *text = done && sc->text ? sc->text : "the daemon did not answer in time\n";
	size_t len = done && sc->text ? sc->len : strlen(text);
	int rv = nng_http_res_copy_data(res, text, len);
	if (done)
		free_scrape(sc);
	if (rv == 0)
		rv = nng_http_res_set_status(res, (uint16_t)status);
	if (rv == 0 && status == 401)
		rv = nng_http_res_set_header(res, "WWW-Authenticate", "Bearer realm=\"gpusched\"");
	if (rv == 0)
		rv = nng_http_res_set_header(res, "Content-Type",
		                             "text/plain; version=0.0.4; charset=utf-8");
	if (rv != 0) {
		nng_http_res_free(res);
		nng_aio_finish(aio, rv);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

static void closed(uv_handle_t *h)
{
	gsd_metrics *m = h->data;
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	while (m->queue) {
		scrape *sc = m->queue;
		m->queue = sc->next;
		free_scrape(sc); /* abandoned: their handlers gave up */
	}
	free(m);
}

int gsd_metrics_start(gsd_daemon *d, const char *url_in)
{
	if (!url_in[0])
		return 0;
	/* tcp://HOST:PORT reads as http://HOST:PORT. */
	char url[300];
	snprintf(url, sizeof(url), "%s%s", strncmp(url_in, "tcp://", 6) == 0 ? "http://" : "",
	         strncmp(url_in, "tcp://", 6) == 0 ? url_in + 6 : url_in);
	gsd_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -1;
	m->d = d;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	uv_async_init(d->loop, &m->render, render_cb);
	m->render.data = m;
	uv_unref((uv_handle_t *)&m->render);
	nng_http_handler *h = NULL;
	int rv = nng_url_parse(&m->url, url);
	if (rv == 0 && strcmp(m->url->u_scheme, "http") != 0)
		rv = NNG_EADDRINVAL;
	if (rv == 0)
		rv = nng_http_server_hold(&m->server, m->url);
	if (rv == 0)
		rv = nng_http_handler_alloc(&h, "/metrics", handle);
	if (rv == 0)
		rv = nng_http_handler_set_data(h, m, NULL);
	if (rv == 0) {
		rv = nng_http_server_add_handler(m->server, h);
		if (rv == 0)
			h = NULL; /* the server owns it */
	}
	if (rv == 0)
		rv = nng_http_server_start(m->server);
	if (rv != 0) {
		GSD_ERROR("cannot serve metrics on %s: %s (want http://HOST:PORT)", url_in,
		          nng_strerror(rv));
		if (h)
			nng_http_handler_free(h);
		if (m->server)
			nng_http_server_release(m->server);
		if (m->url)
			nng_url_free(m->url);
		uv_close((uv_handle_t *)&m->render, closed);
		return -1;
	}
	d->metrics = m;
	GSD_INFO("metrics on %s/metrics", url);
	return 0;
}

void gsd_metrics_stop(gsd_daemon *d)
{
	gsd_metrics *m = d->metrics;
	if (!m)
		return;
	d->metrics = NULL;
	nng_http_server_stop(m->server);
	nng_http_server_release(m->server);
	nng_url_free(m->url);
	uv_close((uv_handle_t *)&m->render, closed);
}
