/*
 * What one tenant can see of another through the live views (issue 10): the event stream
 * (EventsWait, gpusched watch), the Prometheus endpoint, and Stats and Info. Tenant alice watches
 * and scrapes while bob works: she never gets bob's packet events or figures, whatever she asks for
 * (the whole stream from an old cursor, the PUB socket the daemon used to open); the administrator
 * sees both; a tenant made again with a removed tenant's name never gets the old one's events;
 * an unknown token is refused and the refusal audited. Every wait is on an event, bounded.
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

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "itest.h"
#include "testd.h"

#define WAIT_MS 15000

typedef struct fx {
	itest_config cfg;
	gs_testd t;
	uint16_t port;
	char events_url[300]; /* the obsolete "events" setting: nothing may listen there */
	gs_client *ops, *alice, *bob;
	uint64_t alice_ctx, bob_ctx;
	gs_dmabuf nop;
} fx;

static uint64_t context_of(gs_client *c, const char *name)
{
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, name, &dev), 0);
	return itest_context(c, dev, 0, lay.paging_node);
}

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->port = itest_free_port();
	assert_int_not_equal(f->port, 0);
	snprintf(f->events_url, sizeof(f->events_url), "ipc:///tmp/gs-views-ev-%d.sock",
	         (int)getpid());
	char json[1024], metrics[64];
	snprintf(json, sizeof(json),
	         "{\"events\": \"%s\", \"events_buffer\": 64, \"tenants\": ["
	         "{\"name\": \"ops\", \"token\": \"t-ops\", \"admin\": true},"
	         "{\"name\": \"alice\", \"token\": \"t-alice\"},"
	         "{\"name\": \"bob\", \"token\": \"t-bob\"}]}",
	         f->events_url);
	assert_int_equal(itest_config_write(&f->cfg, json), 0);
	snprintf(metrics, sizeof(metrics), "http://127.0.0.1:%u", f->port);
	const char *const args[] = {"--config", f->cfg.path, "--metrics", metrics, NULL};
	assert_int_equal(gs_testd_start(&f->t, args), 0);
	f->ops = itest_connect(&f->t, "t-ops");
	f->alice = itest_connect(&f->t, "t-alice");
	f->bob = itest_connect(&f->t, "t-bob");
	f->alice_ctx = context_of(f->alice, "alice-dev");
	f->bob_ctx = context_of(f->bob, "bob-dev");
	gs_dmabuf_init(&f->nop);
	assert_int_equal(gs_dmabuf_nop(&f->nop), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	gs_dmabuf_free(&f->nop);
	gs_close(f->ops);
	gs_close(f->alice);
	gs_close(f->bob);
	int rc = gs_testd_stop(&f->t);
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
	free(f);
	return rc;
}

/* ---- events ---- */

/* Reads w until it has delivered packet's COMPLETED (bounded), checking every event against
 * `tenant` (NULL: anyone's) and that none is `forbidden`'s; returns how many it read. Sets
 * *saw_other when an event of a tenant other than `tenant`'s own name came. */
static size_t read_until_completed(gs_watch *w, uint64_t packet, const char *tenant,
                                   uint64_t forbidden, const char *want_also, bool *saw_also)
{
	size_t n = 0;
	long long deadline = gs_test_now_ms() + WAIT_MS;
	for (;;) {
		assert_true(gs_test_now_ms() < deadline);
		gs_watch_event ev;
		int rv = gs_watch_next(w, NULL, 500, &ev);
		if (rv == GS_ERR_TIMEOUT)
			continue;
		assert_int_equal(rv, 0);
		assert_int_not_equal(ev.kind, GS_WATCH_GAP);
		n++;
		if (tenant)
			assert_string_equal(ev.tenant, tenant);
		if (want_also && strcmp(ev.tenant, want_also) == 0)
			*saw_also = true;
		bool last = ev.kind == GS_WATCH_PACKET && ev.packet.packet == packet &&
		            ev.packet.state == GS_PACKET_COMPLETED;
		if (ev.kind == GS_WATCH_PACKET)
			assert_int_not_equal(ev.packet.packet, forbidden);
		gs_watch_event_clear(&ev);
		if (last)
			return n;
	}
}

/* An EventsWait sent as raw bytes, as a hostile client would: any cursor, any size. */
static Gpusched__V1__Response *raw_events_wait(fx *f, const char *token, uint64_t after,
                                               uint32_t max, uint32_t timeout_ms)
{
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__EventsWaitRequest ew = GPUSCHED__V1__EVENTS_WAIT_REQUEST__INIT;
	ew.after = after;
	ew.max_events = max;
	ew.timeout_ms = timeout_ms;
	req.id = 7;
	req.token = (char *)token;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_EVENTS_WAIT;
	req.events_wait = &ew;
	size_t len;
	void *data = itest_pack(&req, &len);
	Gpusched__V1__Response *resp = NULL;
	assert_int_equal(itest_raw_call(f->t.url, data, len, WAIT_MS, &resp), 0);
	free(data);
	return resp;
}

/*
 * alice and the administrator watch; bob runs a packet, then alice runs one. alice's stream
 * has her four events and nothing of bob's, though his came first; the administrator's has
 * both. A raw EventsWait of alice's from the cursor before bob's packet (the whole stream, the
 * "empty topic" of the old PUB socket) still gives only hers. The old event socket is not
 * there to subscribe to.
 */
static void test_events_only_own_tenant(void **state)
{
	fx *f = *state;
	gs_watch *wa, *wo;
	assert_int_equal(gs_watch_open(f->alice, &wa), 0);
	assert_int_equal(gs_watch_open(f->ops, &wo), 0);
	Gpusched__V1__Response *start = raw_events_wait(f, "t-ops", 0, 0, 0);
	assert_int_equal(start->status, GPUSCHED__V1__STATUS__STATUS_OK);
	uint64_t before_bob = start->events_wait->cursor;
	gpusched__v1__response__free_unpacked(start, NULL);

	uint64_t bobs = itest_submit_wait(f->bob, f->bob_ctx, &f->nop, 0);
	uint64_t alices = itest_submit_wait(f->alice, f->alice_ctx, &f->nop, 0);

	assert_int_equal(read_until_completed(wa, alices, "alice", bobs, NULL, NULL), 4);
	/* The administrator: bob's events, then alice's. */
	bool saw_bob = false;
	assert_true(read_until_completed(wo, alices, NULL, 0, "bob", &saw_bob) >= 8);
	assert_true(saw_bob);

	/* alice asks from the cursor before bob's packet, for as many as the daemon gives. */
	Gpusched__V1__Response *r = raw_events_wait(f, "t-alice", before_bob, 100000, 0);
	assert_int_equal(r->status, GPUSCHED__V1__STATUS__STATUS_OK);
	size_t hers = 0;
	for (size_t i = 0; i < r->events_wait->n_events; i++) {
		const Gpusched__V1__Event *ev = r->events_wait->events[i];
		assert_string_equal(ev->tenant, "alice");
		assert_int_equal(ev->body_case, GPUSCHED__V1__EVENT__BODY_PACKET);
		assert_int_not_equal(ev->packet->packet, bobs);
		hers += ev->packet->packet == alices;
	}
	assert_int_equal(hers, 4);
	gpusched__v1__response__free_unpacked(r, NULL);
	/* The same from the administrator has bob's four too. */
	r = raw_events_wait(f, "t-ops", before_bob, 100000, 0);
	size_t his = 0;
	for (size_t i = 0; i < r->events_wait->n_events; i++) {
		const Gpusched__V1__Event *ev = r->events_wait->events[i];
		his += ev->body_case == GPUSCHED__V1__EVENT__BODY_PACKET &&
		       ev->packet->packet == bobs && strcmp(ev->tenant, "bob") == 0;
	}
	assert_int_equal(his, 4);
	gpusched__v1__response__free_unpacked(r, NULL);

	/* "events" in the config opens nothing: a subscriber to every topic has nowhere to
	 * connect (a synchronous dial fails at once). */
	nng_socket sub;
	assert_int_equal(nng_sub0_open(&sub), 0);
	assert_int_equal(nng_socket_set(sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
	assert_int_not_equal(nng_dial(sub, f->events_url, NULL, 0), 0);
	nng_close(sub);
	assert_int_equal(access(f->events_url + 6, F_OK), -1);

	gs_watch_close(wa);
	gs_watch_close(wo);
}

/* A waiting watcher is woken by its own events only: bob's packet does not end alice's wait
 * (she is answered with nothing when her wait runs out), and her cursor stays where it was. */
static void test_events_wait_not_woken_by_others(void **state)
{
	fx *f = *state;
	Gpusched__V1__Response *r = raw_events_wait(f, "t-alice", 0, 0, 0);
	uint64_t cursor = r->events_wait->cursor, cursor_seq = r->events_wait->cursor_seq;
	gpusched__v1__response__free_unpacked(r, NULL);
	itest_submit_wait(f->bob, f->bob_ctx, &f->nop, 0);
	/* bob's events are in the ring already: alice's wait runs out empty (200 ms: a bound,
	 * not a synchronisation; nothing of hers can come). */
	r = raw_events_wait(f, "t-alice", cursor, 0, 200);
	assert_int_equal(r->status, GPUSCHED__V1__STATUS__STATUS_OK);
	assert_int_equal(r->events_wait->n_events, 0);
	assert_int_equal(r->events_wait->lost_before_seq, 0);
	assert_int_equal(r->events_wait->cursor, cursor);
	assert_int_equal(r->events_wait->cursor_seq, cursor_seq);
	gpusched__v1__response__free_unpacked(r, NULL);
}

/* What alice's EventsWait answers (cursor, cursor_seq, lost_before_seq, count) from `after`. */
typedef struct ew_answer {
	uint64_t cursor, cursor_seq, lost;
	size_t n;
} ew_answer;

static ew_answer ask(fx *f, const char *token, uint64_t after)
{
	Gpusched__V1__Response *r = raw_events_wait(f, token, after, 0, 0);
	assert_int_equal(r->status, GPUSCHED__V1__STATUS__STATUS_OK);
	ew_answer a = {r->events_wait->cursor, r->events_wait->cursor_seq,
	               r->events_wait->lost_before_seq, r->events_wait->n_events};
	gpusched__v1__response__free_unpacked(r, NULL);
	return a;
}

/*
 * The cursor is no side channel (issue 26, item 5): alice, idle, polls her cursor while bob
 * runs 25 packets. Neither a poll from her cursor nor a fresh "from now" cursor changes while
 * he works, though his events overflow the ring (on main c4ca6f6 the cursor moved about 1.2
 * times per packet of bob's); her own packet moves it and is delivered, and she is told of a
 * loss only when her own events leave the ring.
 */
static void test_events_cursor_moves_only_with_own(void **state)
{
	fx *f = *state;
	ew_answer start = ask(f, "t-alice", 0);
	ew_answer from = ask(f, "t-alice", start.cursor);
	assert_int_equal(from.n, 0);
	assert_int_equal(from.cursor, start.cursor);
	size_t moves = 0;
	for (int i = 0; i < 25; i++) {
		itest_submit_wait(f->bob, f->bob_ctx, &f->nop, 0);
		ew_answer now = ask(f, "t-alice", 0), polled = ask(f, "t-alice", start.cursor);
		moves += now.cursor != start.cursor || now.cursor_seq != start.cursor_seq;
		moves += polled.cursor != start.cursor || polled.cursor_seq != start.cursor_seq ||
		         polled.n || polled.lost;
	}
	assert_int_equal(moves, 0);
	uint64_t mine = itest_submit_wait(f->alice, f->alice_ctx, &f->nop, 0);
	Gpusched__V1__Response *r = raw_events_wait(f, "t-alice", start.cursor, 100, 0);
	assert_int_equal(r->events_wait->n_events, 4);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(r->events_wait->events[i]->packet->packet, mine);
	assert_int_not_equal(r->events_wait->cursor, start.cursor);
	/* From now on, the same as after her last event. */
	uint64_t after_mine = r->events_wait->cursor;
	assert_int_equal(ask(f, "t-alice", 0).cursor, after_mine);
	gpusched__v1__response__free_unpacked(r, NULL);

	/* bob's packets push hers out of the ring (64 events): from her cursor nothing is lost,
	 * from the one before her packet, her four events are (and are in the audit). */
	for (int i = 0; i < 20; i++)
		itest_submit_wait(f->bob, f->bob_ctx, &f->nop, 0);
	ew_answer kept = ask(f, "t-alice", after_mine);
	assert_int_equal(kept.n, 0);
	assert_int_equal(kept.lost, 0);
	assert_int_equal(kept.cursor, after_mine);
	ew_answer lost = ask(f, "t-alice", start.cursor);
	assert_int_equal(lost.n, 0);
	assert_int_not_equal(lost.lost, 0);
	assert_int_equal(ask(f, "t-alice", 0).cursor, after_mine);
}

/*
 * carol works and is removed; a new tenant named carol is made. Its audit identity is
 * carol#ID, and from a cursor before the old carol's packet it gets only its own events.
 */
static void test_events_reused_name(void **state)
{
	fx *f = *state;
	gs_tenant carol = {.name = "carol", .share = 1, .priority_ceiling = 2};
	assert_int_equal(gs_tenant_create(f->ops, &carol, "t-carol-1", NULL), 0);
	Gpusched__V1__Response *r = raw_events_wait(f, "t-ops", 0, 0, 0);
	uint64_t before = r->events_wait->cursor;
	gpusched__v1__response__free_unpacked(r, NULL);

	gs_client *c1 = itest_connect(&f->t, "t-carol-1");
	itest_layout lay;
	itest_layout_of(c1, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c1, "carol-dev", &dev), 0);
	uint64_t ctx = itest_context(c1, dev, 0, lay.paging_node);
	uint64_t old = itest_submit_wait(c1, ctx, &f->nop, 0);
	assert_int_equal(gs_device_destroy(c1, dev), 0);
	gs_close(c1);
	assert_int_equal(gs_tenant_destroy(f->ops, "carol"), 0);

	assert_int_equal(gs_tenant_create(f->ops, &carol, "t-carol-2", NULL), 0);
	gs_client *c2 = itest_connect(&f->t, "t-carol-2");
	gs_daemon_info *info;
	assert_int_equal(gs_info(c2, &info), 0);
	char identity[96];
	snprintf(identity, sizeof(identity), "%s", info->tenant);
	gs_info_free(info);
	assert_non_null(strstr(identity, "carol#"));
	assert_int_equal(gs_device_create(c2, "carol-dev", &dev), 0);
	ctx = itest_context(c2, dev, 0, lay.paging_node);
	uint64_t mine = itest_submit_wait(c2, ctx, &f->nop, 0);

	r = raw_events_wait(f, "t-carol-2", before, 100000, 0);
	assert_int_equal(r->status, GPUSCHED__V1__STATUS__STATUS_OK);
	size_t own = 0;
	for (size_t i = 0; i < r->events_wait->n_events; i++) {
		const Gpusched__V1__Event *ev = r->events_wait->events[i];
		assert_string_equal(ev->tenant, identity);
		if (ev->body_case == GPUSCHED__V1__EVENT__BODY_PACKET) {
			assert_int_not_equal(ev->packet->packet, old);
			own += ev->packet->packet == mine;
		}
	}
	assert_int_equal(own, 4);
	gpusched__v1__response__free_unpacked(r, NULL);
	assert_int_equal(gs_device_destroy(c2, dev), 0);
	gs_close(c2);
}

/* An unknown token gets no events, UNAUTHENTICATED, and the refusal is in the audit. */
static void test_events_unknown_token_refused(void **state)
{
	fx *f = *state;
	int64_t errors = itest_audit_errors(f->t.db);
	gs_client *bad = itest_connect(&f->t, "t-nobody");
	gs_watch *w = NULL;
	assert_int_equal(gs_watch_open(bad, &w), GS_STATUS_UNAUTHENTICATED);
	assert_null(w);
	Gpusched__V1__Response *r = raw_events_wait(f, "t-nobody", 1, 100000, 0);
	assert_int_equal(r->status, GPUSCHED__V1__STATUS__STATUS_UNAUTHENTICATED);
	assert_int_equal(r->body_case, GPUSCHED__V1__RESPONSE__BODY__NOT_SET);
	gpusched__v1__response__free_unpacked(r, NULL);
	gs_close(bad);
	itest_audit_barrier(f->alice, f->alice_ctx); /* every refusal before it is committed */
	assert_true(itest_audit_errors(f->t.db) >= errors + 2);
	assert_int_equal(itest_audit_last_error_status(f->t.db), GS_STATUS_UNAUTHENTICATED);
}

/* ---- metrics ---- */

/* GET /metrics with `token` as a Bearer token (NULL: no header): the HTTP status, and the
 * body in *body (malloc'd). */
static int scrape(uint16_t port, const char *token, char **body)
{
	*body = NULL;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = {5, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char req[512];
	int n = snprintf(req, sizeof(req),
	                 "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%sConnection: "
	                 "close\r\n\r\n",
	                 token ? "Authorization: Bearer " : "", token ? token : "",
	                 token ? "\r\n" : "");
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(fd, req, (size_t)n), n);
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap + 1);
	ssize_t got;
	while ((got = read(fd, buf + len, cap - len)) > 0) {
		len += (size_t)got;
		if (len == cap) {
			buf = realloc(buf, 2 * cap + 1);
			assert_non_null(buf);
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = '\0';
	int status = 0;
	assert_int_equal(sscanf(buf, "HTTP/1.1 %d", &status), 1);
	char *b = strstr(buf, "\r\n\r\n");
	*body = strdup(b ? b + 4 : "");
	free(buf);
	return status;
}

/* The value of the first sample line that starts with `series` (-1 when there is none). */
static double sample(const char *body, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

/*
 * alice's scrape has her own series and nothing of bob's, nor any daemon-wide family (packet
 * counts, engine queues, RPC counts would show his work); the administrator's has both tenants
 * and everything; no token and a wrong token are 401, audited.
 */
static void test_metrics_only_own_tenant(void **state)
{
	fx *f = *state;
	/* bob has two contexts, alice one. */
	context_of(f->bob, "bob-2");
	char *body;

	assert_int_equal(scrape(f->port, "t-alice", &body), 200);
	assert_null(strstr(body, "bob"));
	assert_true(sample(body, "gpusched_tenant_contexts{tenant=\"alice\"}") == 1);
	assert_true(sample(body, "gpusched_tenant_devices{tenant=\"alice\"}") == 1);
	assert_null(strstr(body, "gpusched_packets_total"));
	assert_null(strstr(body, "gpusched_engine_"));
	assert_null(strstr(body, "gpusched_rpc_"));
	assert_null(strstr(body, "tenant=\"ops\""));
	assert_true(sample(body, "gpusched_uptime_seconds") >= 0);
	free(body);

	assert_int_equal(scrape(f->port, "t-bob", &body), 200);
	assert_null(strstr(body, "alice"));
	assert_true(sample(body, "gpusched_tenant_contexts{tenant=\"bob\"}") == 2);
	free(body);

	assert_int_equal(scrape(f->port, "t-ops", &body), 200);
	assert_true(sample(body, "gpusched_tenant_contexts{tenant=\"alice\"}") == 1);
	assert_true(sample(body, "gpusched_tenant_contexts{tenant=\"bob\"}") == 2);
	assert_non_null(strstr(body, "gpusched_packets_total{state=\"submitted\"}"));
	assert_non_null(strstr(body, "gpusched_engine_busy_seconds_total{adapter=\"0\""));
	free(body);

	int64_t errors = itest_audit_errors(f->t.db);
	assert_int_equal(scrape(f->port, NULL, &body), 401);
	assert_null(strstr(body, "gpusched_"));
	free(body);
	assert_int_equal(scrape(f->port, "t-wrong", &body), 401);
	assert_null(strstr(body, "gpusched_"));
	free(body);
	itest_audit_barrier(f->alice, f->alice_ctx);
	assert_int_equal(itest_audit_errors(f->t.db), errors + 2);
	assert_int_equal(itest_audit_int(f->t.db,
	                                 "SELECT count(*) FROM errors WHERE request = "
	                                 "'metrics' AND status = %d",
	                                 GS_STATUS_UNAUTHENTICATED),
	                 2);
}

/* ---- Stats and Info ---- */

/* The figures of an Info answer that change with the tenants' work, for adapter 0. */
typedef struct info_view {
	uint64_t fence[8], queued[8], used[8], largest_free[8], system_used;
	size_t nodes, segments;
	bool tenant_view;
} info_view;

static void info_of(gs_client *c, info_view *v)
{
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	assert_true(info->adapter_count >= 1);
	const gs_adapter_info *a = &info->adapters[0];
	memset(v, 0, sizeof(*v));
	assert_true(a->node_count <= 8 && a->segment_count <= 8);
	v->nodes = a->node_count;
	v->segments = a->segment_count;
	for (size_t i = 0; i < a->node_count; i++) {
		v->fence[i] = a->nodes[i].fence;
		v->queued[i] = a->nodes[i].queued;
	}
	for (size_t i = 0; i < a->segment_count; i++) {
		v->used[i] = a->segments[i].used;
		v->largest_free[i] = a->segments[i].largest_free;
	}
	v->system_used = a->system_memory_used;
	v->tenant_view = info->tenant_view;
	gs_info_free(info);
}

static uint64_t memory_of(const info_view *v)
{
	uint64_t sum = v->system_used;
	for (size_t i = 0; i < v->segments; i++)
		sum += v->used[i];
	return sum;
}

static uint64_t queued_of(const info_view *v)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < v->nodes; i++)
		sum += v->queued[i];
	return sum;
}

/* Every counter of a and b but requests and uptime is the same. */
static bool same_but_requests(const gs_daemon_stats *a, const gs_daemon_stats *b)
{
#define SAME(f) (a->f == b->f)
	return SAME(errors) && SAME(packets_submitted) && SAME(packets_completed) &&
	       SAME(packets_faulted) && SAME(packets_cancelled) && SAME(packets_rejected) &&
	       SAME(audit_records) && SAME(audit_commits) && SAME(devices) && SAME(contexts) &&
	       SAME(allocations) && SAME(paging_packets) && SAME(paging_bytes) && SAME(evictions) &&
	       SAME(audit_queued) && SAME(audit_failed_commits) && SAME(audit_dropped) &&
	       SAME(audit_health) && SAME(tenant_view);
#undef SAME
}

/*
 * Stats and Info (gpusched stats, gpusched info) tell a tenant about itself only. alice
 * allocates and runs a packet; then bob allocates, runs packets, holds four more on a GPU
 * wait and has a request refused. alice's Stats and Info are the same before and after bob's
 * work (bar her own requests); the administrator's grow by bob's; bob's show his own.
 */
static void test_stats_info_only_own_tenant(void **state)
{
	fx *f = *state;
	itest_layout lay;
	itest_layout_of(f->alice, &lay);
	uint64_t adev, bdev, sync;
	gs_allocation_placement pl;
	assert_int_equal(gs_device_create(f->alice, "alice-mem", &adev), 0);
	itest_alloc(f->alice, adev, 65536, 0, 0, &pl);
	itest_submit_wait(f->alice, f->alice_ctx, &f->nop, 0);

	gs_daemon_stats a0, a1, o0, o1, b;
	info_view ai0, ai1, oi0, oi1, bi;
	assert_int_equal(gs_stats(f->alice, &a0), 0);
	info_of(f->alice, &ai0);
	assert_int_equal(gs_stats(f->ops, &o0), 0);
	info_of(f->ops, &oi0);
	/* alice sees herself: one device more than setup's, her allocation, her packet. */
	assert_true(a0.tenant_view && ai0.tenant_view);
	assert_false(o0.tenant_view || oi0.tenant_view);
	assert_int_equal(a0.devices, 2);
	assert_int_equal(a0.contexts, 1);
	assert_int_equal(a0.allocations, 1);
	assert_int_equal(a0.packets_submitted, 1);
	assert_int_equal(a0.packets_completed, 1);
	assert_int_equal(a0.audit_records, 0);
	assert_int_equal(a0.audit_commits, 0);
	assert_int_equal(memory_of(&ai0), 65536);
	assert_int_equal(queued_of(&ai0), 0);
	for (size_t i = 0; i < ai0.segments; i++)
		assert_int_equal(ai0.largest_free[i], 0);
	assert_true(o0.audit_records > 0);

	/* bob's work: two packets run, four held, three allocations, a refusal. */
	assert_int_equal(gs_device_create(f->bob, "bob-mem", &bdev), 0);
	for (int i = 0; i < 3; i++)
		itest_alloc(f->bob, bdev, 262144, 0, 0, &pl);
	itest_submit_wait(f->bob, f->bob_ctx, &f->nop, 0);
	itest_submit_wait(f->bob, f->bob_ctx, &f->nop, 0);
	assert_int_equal(gs_sync_create(f->bob, bdev, 0, &sync), 0);
	uint64_t held_ctx = itest_context(f->bob, bdev, 0, lay.paging_node);
	gs_dmabuf held;
	gs_dmabuf_init(&held);
	assert_int_equal(gs_dmabuf_wait(&held, sync, 1), 0);
	assert_int_equal(gs_dmabuf_nop(&held), 0);
	gs_submit_result res[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(gs_submit(f->bob, held_ctx, &held, 0, &res[i]), 0);
	assert_int_equal(gs_allocation_destroy(f->bob, 987654321), GS_STATUS_NOT_FOUND);
	/* His records are committed; the barrier itself done too, so it counts as completed. */
	uint64_t barrier = itest_audit_barrier(f->bob, f->bob_ctx);
	gs_packet_state bst;
	assert_int_equal(gs_packet_wait(f->bob, barrier, 20000, &bst, NULL), 0);
	assert_int_equal(bst, GS_PACKET_COMPLETED);

	assert_int_equal(gs_stats(f->alice, &a1), 0);
	info_of(f->alice, &ai1);
	/* Nothing of bob's: only her own requests since (her Info, this Stats) count. */
	assert_int_equal(a1.requests, a0.requests + 2);
	assert_true(same_but_requests(&a1, &a0));
	assert_memory_equal(&ai1, &ai0, sizeof(ai0));

	/* The administrator sees the daemon: bob's packets, allocations, memory and queue. */
	assert_int_equal(gs_stats(f->ops, &o1), 0);
	info_of(f->ops, &oi1);
	assert_true(o1.packets_submitted >= o0.packets_submitted + 6);
	assert_true(o1.packets_completed >= o0.packets_completed + 2);
	assert_int_equal(o1.allocations, o0.allocations + 3);
	assert_true(o1.errors >= o0.errors + 1);
	assert_true(o1.audit_records > o0.audit_records);
	assert_true(memory_of(&oi1) >= memory_of(&oi0) + 3 * 262144);
	assert_true(queued_of(&oi1) >= 4);
	assert_true(oi1.fence[0] != 0); /* the node's fence: administrators only */
	assert_true(ai1.fence[0] == 0); /* a tenant's fences are its contexts'*/

	/* bob sees his own. */
	assert_int_equal(gs_stats(f->bob, &b), 0);
	info_of(f->bob, &bi);
	assert_true(b.tenant_view);
	assert_int_equal(b.allocations, 3);
	assert_int_equal(b.devices, 2);
	assert_int_equal(b.contexts, 2);
	assert_int_equal(b.packets_submitted, 2 + 4 + 1); /* and the barrier */
	assert_int_equal(b.packets_completed, 2 + 1);
	assert_int_equal(b.errors, 1);
	assert_int_equal(bi.queued[0], 4);
	assert_int_equal(memory_of(&bi), 3 * 262144);

	/* Released, his queue empties (in his view and the administrator's). */
	assert_int_equal(gs_sync_signal(f->bob, sync, 1), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gs_packet_wait(f->bob, res[i].packet, WAIT_MS, NULL, NULL), 0);
	info_of(f->bob, &bi);
	assert_int_equal(queued_of(&bi), 0);
	assert_int_equal(gs_stats(f->bob, &b), 0);
	assert_int_equal(b.packets_completed, 2 + 1 + 4);
	info_of(f->alice, &ai1);
	assert_memory_equal(&ai1, &ai0, sizeof(ai0));
	gs_dmabuf_free(&held);
}

/* The share policy is the adapter's: Info shows it (and the time slice) to every tenant, and a
 * TenantCreate that names a policy of its own is refused, audited, and makes no tenant. */
static void test_share_policy_is_the_adapters(void **state)
{
	fx *f = *state;
	gs_daemon_info *info;
	assert_int_equal(gs_info(f->alice, &info), 0);
	assert_true(info->adapter_count >= 1);
	assert_int_equal(info->adapters[0].share_policy, GS_SHARE_WEIGHTED);
	assert_string_equal(gs_share_policy_name(info->adapters[0].share_policy), "WEIGHTED");
	assert_int_equal(info->adapters[0].time_slice_us, 2000); /* quantum_us by default */
	gs_info_free(info);

	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__TenantCreateRequest tc = GPUSCHED__V1__TENANT_CREATE_REQUEST__INIT;
	Gpusched__V1__Tenant tn = GPUSCHED__V1__TENANT__INIT;
	tn.name = "carol";
	tn.share = 1;
	tn.policy = GPUSCHED__V1__SHARE_POLICY__SHARE_POLICY_FIXED_SHARE;
	tc.tenant = &tn;
	tc.token = "t-carol";
	req.id = 9;
	req.token = "t-ops";
	req.body_case = GPUSCHED__V1__REQUEST__BODY_TENANT_CREATE;
	req.tenant_create = &tc;
	size_t len;
	void *bytes = itest_pack(&req, &len);
	int64_t before = itest_audit_errors(f->t.db);
	Gpusched__V1__Response *resp;
	assert_int_equal(itest_raw_call(f->t.url, bytes, len, WAIT_MS, &resp), 0);
	free(bytes);
	assert_int_equal(resp->status, GS_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(resp->message, "adapter"));
	gpusched__v1__response__free_unpacked(resp, NULL);
	itest_audit_barrier(f->alice, f->alice_ctx); /* the refusal before it is committed */
	assert_int_equal(itest_audit_errors(f->t.db), before + 1);
	assert_int_equal(itest_audit_last_error_status(f->t.db), GS_STATUS_INVALID_ARGUMENT);
	gs_client *carol = itest_connect(&f->t, "t-carol");
	assert_int_equal(gs_info(carol, &info), GS_STATUS_UNAUTHENTICATED);
	assert_null(info);
	gs_close(carol);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_events_only_own_tenant, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_events_cursor_moves_only_with_own, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_events_wait_not_woken_by_others, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_events_reused_name, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_events_unknown_token_refused, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_metrics_only_own_tenant, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stats_info_only_own_tenant, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_share_policy_is_the_adapters, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
