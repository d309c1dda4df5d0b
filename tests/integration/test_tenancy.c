/*
 * Tenants against each other and against their limits, on a real daemon: what a hostile or
 * careless tenant tries, and what it must not get.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "isa.h"
#include "itest.h"
#include "sched_util.h"
#include "testd.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)

typedef struct fx {
	itest_config cfg;
	gs_testd t;
} fx;

static int start(fx *f, const char *json)
{
	if (itest_config_write(&f->cfg, json) != 0)
		return -1;
	const char *const args[] = {"--config", f->cfg.path, NULL};
	return gs_testd_start(&f->t, args);
}

/* A daemon whose only configured tenant is the administrator "ops" (token t-ops). */
static int start_with_admin(fx *f)
{
	return start(f, "{\"tenants\": [{\"name\": \"ops\", \"token\": \"t-ops\","
	                " \"admin\": true}]}");
}

static void stop(fx *f)
{
	assert_int_equal(gs_testd_stop(&f->t), 0);
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
}

/*
 * memory_quota counts what allocations occupy once placed (256-byte units), not the bytes
 * asked for: 8,192 one-byte allocations under a 1 MiB quota used to take 2 MiB of video
 * memory. Now the 4,097th is refused, with the quota named, audited, and the tenant's other
 * work and its neighbour are untouched; freeing one makes room for exactly one.
 */
static void test_memory_quota_counts_placed_bytes(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": ["
	                           "{\"name\": \"small\", \"token\": \"t-small\","
	                           " \"memory_quota\": 1048576},"
	                           "{\"name\": \"other\", \"token\": \"t-other\"}]}"),
	                 0);
	gs_client *c = itest_connect(&f.t, "t-small");
	gs_client *o = itest_connect(&f.t, "t-other");
	uint64_t dev, odev;
	assert_int_equal(gs_device_create(c, "q", &dev), 0);
	assert_int_equal(gs_device_create(o, "o", &odev), 0);
	gs_allocation_desc ad = {.device = dev, .size = 1};
	gs_allocation_placement pl;
	enum { TRIES = 8192 };
	uint64_t *made = calloc(TRIES, sizeof(*made));
	assert_non_null(made);
	size_t ok = 0;
	int last = 0;
	for (size_t i = 0; i < TRIES; i++) {
		last = gs_allocation_create(c, &ad, &pl);
		if (last != 0)
			break;
		made[ok++] = pl.allocation;
	}
	assert_int_equal(ok, MiB / 256);
	assert_int_equal(last, GS_STATUS_QUOTA_EXCEEDED);
	assert_non_null(strstr(gs_client_message(c), "memory_quota"));
	/* Still refused, and one 256-byte allocation is as refused as a 1-byte one. */
	ad.size = 256;
	assert_int_equal(gs_allocation_create(c, &ad, &pl), GS_STATUS_QUOTA_EXCEEDED);
	/* The neighbour has no quota and is not affected. */
	gs_allocation_desc oad = {.device = odev, .size = 64 * KiB};
	assert_int_equal(gs_allocation_create(o, &oad, &pl), 0);
	/* Freeing one 1-byte allocation frees 256 bytes of quota: one more fits, not two. */
	assert_int_equal(gs_allocation_destroy(c, made[--ok]), 0);
	assert_int_equal(gs_allocation_create(c, &ad, &pl), 0);
	ad.size = 1;
	assert_int_equal(gs_allocation_create(c, &ad, &pl), GS_STATUS_QUOTA_EXCEEDED);
	/* Every refusal is in the audit (a history read commits what is queued first). */
	gs_history_filter hf = {.limit = 1};
	gs_packet_record *recs = NULL;
	size_t nrecs = 0;
	assert_int_equal(gs_history(c, &hf, &recs, &nrecs), 0);
	gs_history_free(recs, nrecs);
	assert_true(itest_audit_int(f.t.db,
	                            "SELECT count(*) FROM errors WHERE tenant = 'small' AND"
	                            " status = %d AND message LIKE '%%memory_quota%%'",
	                            (int)GS_STATUS_QUOTA_EXCEEDED) >= 3);
	free(made);
	gs_close(o);
	gs_close(c);
	stop(&f);
}

/*
 * Removed tenants free their slot: create/remove cycles with a few tenants alive used to end
 * in "too many tenants" after about 120. 300 cycles with 3 alive all succeed; the table's
 * limit counts live tenants only (128), refused QUOTA_EXCEEDED past it.
 */
static void test_tenant_slots_are_reused(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start_with_admin(&f), 0);
	gs_client *ops = itest_connect(&f.t, "t-ops");
	char name[32];
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "cycle-%d", i);
		gs_tenant nt = {.name = name, .share = 1, .priority_ceiling = 2};
		char *token = NULL;
		int rv = gs_tenant_create(ops, &nt, NULL, &token);
		if (rv != 0)
			fail_msg("cycle %d: %s: %s", i, gs_status_name(rv), gs_client_message(ops));
		free(token);
		if (i >= 3) { /* three alive between cycles */
			snprintf(name, sizeof(name), "cycle-%d", i - 3);
			assert_int_equal(gs_tenant_destroy(ops, name), 0);
		}
	}
	gs_tenant *list;
	size_t n;
	assert_int_equal(gs_tenant_list(ops, &list, &n), 0);
	assert_int_equal(n, 1 + 3);
	gs_tenant_list_free(list, n);
	/* Up to the limit of live tenants, and not one more. */
	int made = 0, rv = 0;
	for (int i = 0; i < 200 && rv == 0; i++) {
		snprintf(name, sizeof(name), "fill-%d", i);
		gs_tenant nt = {.name = name, .share = 1, .priority_ceiling = 2};
		rv = gs_tenant_create(ops, &nt, NULL, NULL);
		made += rv == 0;
	}
	assert_int_equal(rv, GS_STATUS_QUOTA_EXCEEDED);
	assert_int_equal(1 + 3 + made, 128);
	gs_close(ops);
	stop(&f);
}

/* Runs a command (bounded); its exit code, and its stdout in out when out is not NULL. */
static int run_exit(char *const argv[], char *out, size_t cap)
{
	itest_run r;
	itest_run_argv(argv, 30000, &r);
	if (out)
		snprintf(out, cap, "%s", r.out ? r.out : "");
	int code = r.exit_code;
	itest_run_free(&r);
	return code;
}

static int verify_exit(const char *db)
{
	char *argv[] = {(char *)GS_CLI_PATH, (char *)"audit", (char *)"verify", (char *)db, NULL};
	return run_exit(argv, NULL, 0);
}

/*
 * Tenants made by admin requests survive a restart (the audit file keeps them, with only the
 * salted hash of their token), removed ones stay removed, a name made again after a removal
 * is a new tenant, and the records are in the hash chain: an edited tenants row is found.
 */
static void test_admin_tenants_survive_restart(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start_with_admin(&f), 0);
	gs_client *ops = itest_connect(&f.t, "t-ops");
	gs_tenant carol = {.name = (char *)"carol", .share = 3, .priority_ceiling = 3};
	gs_tenant dave = {.name = (char *)"dave", .share = 1, .priority_ceiling = 2};
	assert_int_equal(gs_tenant_create(ops, &carol, "t-carol", NULL), 0);
	assert_int_equal(gs_tenant_create(ops, &dave, "t-dave", NULL), 0);
	assert_int_equal(gs_tenant_destroy(ops, "dave"), 0);
	gs_close(ops);
	assert_int_equal(gs_testd_stop(&f.t), 0);
	/* The file holds no token, only hashes. */
	assert_int_equal(itest_audit_int(f.t.db,
	                                 "SELECT count(*) FROM tenants WHERE token_hash"
	                                 " LIKE '%%t-carol%%' OR token_hash LIKE '%%t-dave%%'"),
	                 0);

	const char *const args[] = {"--config", f.cfg.path, NULL};
	assert_int_equal(gs_testd_restart(&f.t, args), 0);
	uint64_t dev;
	gs_client *c = itest_connect(&f.t, "t-carol");
	assert_int_equal(gs_device_create(c, "c", &dev), 0);
	gs_close(c);
	gs_client *d = itest_connect(&f.t, "t-dave");
	assert_int_equal(gs_device_create(d, "d", &dev), GS_STATUS_UNAUTHENTICATED);
	gs_close(d);
	ops = itest_connect(&f.t, "t-ops");
	gs_tenant *list;
	size_t n;
	assert_int_equal(gs_tenant_list(ops, &list, &n), 0);
	assert_int_equal(n, 2);
	bool found = false;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].name, "carol")) {
			found = true;
			assert_int_equal(list[i].share, 3);
			assert_int_equal(list[i].priority_ceiling, 3);
		}
	assert_true(found);
	gs_tenant_list_free(list, n);
	/* carol exists, so it cannot be made again; dave can, as a new tenant. */
	assert_int_equal(gs_tenant_create(ops, &carol, "t-carol-2", NULL),
	                 GS_STATUS_INVALID_ARGUMENT);
	assert_int_equal(gs_tenant_create(ops, &dave, "t-dave-2", NULL), 0);
	gs_close(ops);
	assert_int_equal(gs_testd_stop(&f.t), 0);
	assert_int_equal(itest_audit_int(f.t.db, "SELECT count(DISTINCT id) FROM tenants WHERE"
	                                         " name = 'dave'"),
	                 2);

	assert_int_equal(gs_testd_restart(&f.t, args), 0);
	d = itest_connect(&f.t, "t-dave-2");
	assert_int_equal(gs_device_create(d, "d", &dev), 0);
	gs_close(d);
	assert_int_equal(gs_testd_stop(&f.t), 0);

	/* Chained: the file verifies, and granting carol admin with the sqlite3 shell is found. */
	assert_int_equal(verify_exit(f.t.db), 0);
	char copy[400], cmd[1400];
	snprintf(copy, sizeof(copy), "%s.edited", f.t.db);
	snprintf(cmd, sizeof(cmd),
	         "sqlite3 '%s' \".backup '%s'\" && sqlite3 '%s' \"UPDATE tenants SET admin = 1"
	         " WHERE name = 'carol'\"",
	         f.t.db, copy, copy);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(verify_exit(copy), 4);
	unlink(copy);
	gs_testd_cleanup(&f.t);
	itest_config_cleanup(&f.cfg);
}

/* Submits one NOP on a fresh device and context of c and waits for it; returns its id. */
static uint64_t one_packet(gs_client *c)
{
	uint64_t dev, ctx;
	assert_int_equal(gs_device_create(c, "p", &dev), 0);
	gs_context_desc cd;
	gs_context_desc_init(&cd, dev, 0);
	assert_int_equal(gs_context_create(c, &cd, &ctx, NULL), 0);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(c, ctx, &nop, 0, &r), 0);
	gs_dmabuf_free(&nop);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(c, r.packet, 10000, &st, NULL), 0);
	assert_int_equal(gs_device_destroy(c, dev), 0);
	return r.packet;
}

/*
 * A tenant made with a removed tenant's name is another tenant: it reads none of the removed
 * one's records, before or after a restart, and is recorded as NAME#ID. '#' is refused in
 * names, so nobody can take that identity either.
 */
static void test_reused_name_is_another_tenant(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start_with_admin(&f), 0);
	gs_client *ops = itest_connect(&f.t, "t-ops");
	gs_tenant eve = {.name = (char *)"eve", .share = 1, .priority_ceiling = 2};
	assert_int_equal(gs_tenant_create(ops, &eve, "t-eve-1", NULL), 0);
	gs_client *e1 = itest_connect(&f.t, "t-eve-1");
	uint64_t old = one_packet(e1);
	gs_close(e1);
	assert_int_equal(gs_tenant_destroy(ops, "eve"), 0);
	assert_int_equal(gs_tenant_create(ops, &eve, "t-eve-2", NULL), 0);
	gs_tenant fake = {.name = (char *)"eve#1", .share = 1, .priority_ceiling = 2};
	assert_int_equal(gs_tenant_create(ops, &fake, "t-fake", NULL), GS_STATUS_INVALID_ARGUMENT);

	for (int round = 0; round < 2; round++) {
		gs_client *e2 = itest_connect(&f.t, "t-eve-2");
		gs_daemon_info *info;
		assert_int_equal(gs_info(e2, &info), 0);
		assert_non_null(strchr(info->tenant, '#')); /* eve#N */
		assert_int_equal(strncmp(info->tenant, "eve#", 4), 0);
		gs_info_free(info);
		gs_history_filter hf = {.limit = 100};
		gs_packet_record *recs;
		size_t n;
		assert_int_equal(gs_history(e2, &hf, &recs, &n), 0);
		for (size_t i = 0; i < n; i++)
			assert_true(recs[i].packet != old);
		gs_history_free(recs, n);
		gs_packet_event *ev;
		assert_int_equal(gs_packet_events(e2, old, &ev, &n), GS_STATUS_NOT_FOUND);
		if (round == 0) {
			one_packet(e2); /* its own records are its own */
			assert_int_equal(gs_history(e2, &hf, &recs, &n), 0);
			assert_int_equal(n, 1);
			gs_history_free(recs, n);
		}
		gs_close(e2);
		if (round == 0) {
			gs_close(ops);
			assert_int_equal(gs_testd_stop(&f.t), 0);
			const char *const args[] = {"--config", f.cfg.path, NULL};
			assert_int_equal(gs_testd_restart(&f.t, args), 0);
			ops = itest_connect(&f.t, "t-ops");
		}
	}
	/* The administrator reads either eve by her audit identity. */
	gs_history_filter hf = {.tenant = "eve", .limit = 100};
	gs_packet_record *recs;
	size_t n;
	assert_int_equal(gs_history(ops, &hf, &recs, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(recs[0].packet, old);
	gs_history_free(recs, n);
	gs_close(ops);
	stop(&f);
}

/* One Info request with token on a fresh connection: its status, or -1 when the connection
 * was refused (no answer within 500 ms). */
static int info_once(const char *url, const char *token)
{
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__InfoRequest ir = GPUSCHED__V1__INFO_REQUEST__INIT;
	req.token = (char *)token;
	req.id = 9;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_INFO;
	req.info = &ir;
	size_t len;
	void *bytes = itest_pack(&req, &len);
	Gpusched__V1__Response *r = NULL;
	int rv = itest_raw_call(url, bytes, len, 500, &r);
	free(bytes);
	int st = rv == 0 && r ? (int)r->status : -1;
	if (r)
		gpusched__v1__response__free_unpacked(r, NULL);
	return st;
}

/*
 * Unknown tokens are limited per peer, not only per connection: a guesser that opens a new
 * connection for every guess is cut off after max_bad_tokens_per_second (3 here) guesses in a
 * second, its next connections refused until the second is over; then the peer is served
 * again. (Over ipc the peer is the user id, so this test's own user is the peer.)
 */
static void test_bad_tokens_limited_per_peer(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"max_bad_tokens_per_second\": 3, \"tenants\": ["
	                           "{\"name\": \"ops\", \"token\": \"t-ops\"}]}"),
	                 0);
	/* Start early in a second, so the guesses below fall in one (bounded wait on the clock). */
	long long deadline = gs_test_now_ms() + 5000;
	struct timespec ts;
	do {
		clock_gettime(CLOCK_REALTIME, &ts);
	} while (ts.tv_nsec > 300000000 && gs_test_now_ms() < deadline);
	int answered = 0, refused_at = -1;
	for (int i = 0; i < 8 && refused_at < 0; i++) {
		int st = info_once(f.t.url, "guess");
		if (st == GS_STATUS_UNAUTHENTICATED)
			answered++;
		else if (st < 0)
			refused_at = i;
		else
			fail_msg("guess %d answered %d", i, st);
	}
	assert_true(answered >= 3);
	assert_true(refused_at >= 3 && refused_at <= 4);
	/* Served again once the second is over: the right token works (bounded wait). */
	int st = -1;
	while (st != GS_STATUS_OK && gs_test_now_ms() < deadline + 5000)
		st = info_once(f.t.url, "t-ops");
	assert_int_equal(st, GS_STATUS_OK);
	stop(&f);
}

/*
 * Per-tenant limits on objects and on request rate: allocation_limit counts allocations at
 * once; max_requests_per_second refuses the rest of a second's requests with QUOTA_EXCEEDED
 * naming the limit, and another tenant is served meanwhile.
 */
static void test_allocation_and_rate_limits(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": [{\"name\": \"busy\", \"token\": \"t-busy\","
	                           " \"allocation_limit\": 5, \"max_requests_per_second\": 50},"
	                           " {\"name\": \"calm\", \"token\": \"t-calm\"}]}"),
	                 0);
	gs_client *b = itest_connect(&f.t, "t-busy");
	gs_client *c = itest_connect(&f.t, "t-calm");
	uint64_t dev;
	assert_int_equal(gs_device_create(b, "b", &dev), 0);
	gs_allocation_desc ad = {.device = dev, .size = 4096};
	gs_allocation_placement pl[6];
	for (int i = 0; i < 5; i++)
		assert_int_equal(gs_allocation_create(b, &ad, &pl[i]), 0);
	assert_int_equal(gs_allocation_create(b, &ad, &pl[5]), GS_STATUS_QUOTA_EXCEEDED);
	assert_non_null(strstr(gs_client_message(b), "allocation_limit"));
	assert_int_equal(gs_allocation_destroy(b, pl[0].allocation), 0);
	assert_int_equal(gs_allocation_create(b, &ad, &pl[0]), 0);

	/* A flood of 200 cheap requests: past 50 in a second they are refused... */
	int refused = 0, served = 0;
	for (int i = 0; i < 200; i++) {
		gs_daemon_stats st;
		int rv = gs_stats(b, &st);
		if (rv == GS_STATUS_QUOTA_EXCEEDED) {
			refused++;
			assert_non_null(strstr(gs_client_message(b), "max_requests_per_second"));
		} else {
			assert_int_equal(rv, 0);
			served++;
		}
		/* ...while the other tenant is served. */
		if (i % 20 == 0) {
			gs_daemon_stats cs;
			assert_int_equal(gs_stats(c, &cs), 0);
		}
	}
	assert_true(refused > 0);
	assert_true(served > 0); /* the allocations above counted in the same second too */
	gs_close(c);
	gs_close(b);
	stop(&f);
}

/*
 * Per-tenant packet_limit and sync_limit: a tenant's own limits, below the daemon's, refuse
 * with QUOTA_EXCEEDED naming the limit while another tenant is served; an administrator
 * raises them live; max_message below 4096 is refused.
 */
static void test_packet_and_sync_limits(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f,
	                       "{\"tenants\": [{\"name\": \"ops\", \"token\": \"t-ops\","
	                       " \"admin\": true}, {\"name\": \"tight\", \"token\": \"t-tight\","
	                       " \"packet_limit\": 3, \"sync_limit\": 2},"
	                       " {\"name\": \"roomy\", \"token\": \"t-roomy\"}]}"),
	                 0);
	gs_client *t = itest_connect(&f.t, "t-tight");
	gs_client *r = itest_connect(&f.t, "t-roomy");
	gs_client *ops = itest_connect(&f.t, "t-ops");
	itest_layout l;
	itest_layout_of(t, &l);
	uint64_t dev, rdev, s[3];
	assert_int_equal(gs_device_create(t, "t", &dev), 0);
	assert_int_equal(gs_device_create(r, "r", &rdev), 0);
	assert_int_equal(gs_sync_create(t, dev, 0, &s[0]), 0);
	assert_int_equal(gs_sync_create(t, dev, 0, &s[1]), 0);
	assert_int_equal(gs_sync_create(t, dev, 0, &s[2]), GS_STATUS_QUOTA_EXCEEDED);
	assert_non_null(strstr(gs_client_message(t), "sync_limit 2"));

	/* Three packets held by a GPU wait on s[0]: not final, so the fourth is refused. */
	uint64_t ctx = itest_context(t, dev, 0, l.paging_node);
	uint64_t rctx = itest_context(r, rdev, 0, l.paging_node);
	gs_dmabuf held;
	gs_dmabuf_init(&held);
	assert_int_equal(gs_dmabuf_wait(&held, s[0], 1), 0);
	assert_int_equal(gs_dmabuf_nop(&held), 0);
	gs_submit_result res[4];
	for (int i = 0; i < 3; i++)
		assert_int_equal(gs_submit(t, ctx, &held, 0, &res[i]), 0);
	assert_int_equal(gs_submit(t, ctx, &held, 0, &res[3]), GS_STATUS_QUOTA_EXCEEDED);
	assert_non_null(strstr(gs_client_message(t), "packet_limit 3"));
	/* The neighbour is served meanwhile. */
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	itest_submit_wait(r, rctx, &nop, 0);

	/* Raised live by an administrator: the fourth goes in, and one more sync object. */
	gs_tenant more = {.packet_limit = 4, .sync_limit = 3};
	assert_int_equal(gs_tenant_update(ops, "tight", &more,
	                                  GS_TENANT_PACKET_LIMIT | GS_TENANT_SYNC_LIMIT),
	                 0);
	assert_int_equal(gs_submit(t, ctx, &held, 0, &res[3]), 0);
	assert_int_equal(gs_sync_create(t, dev, 0, &s[2]), 0);
	gs_tenant tiny = {.max_message = 100};
	assert_int_equal(gs_tenant_update(ops, "tight", &tiny, GS_TENANT_MAX_MESSAGE),
	                 GS_STATUS_INVALID_ARGUMENT);

	/* Released: every held packet completes. */
	assert_int_equal(gs_sync_signal(t, s[0], 1), 0);
	for (int i = 0; i < 4; i++) {
		gs_packet_state st;
		assert_int_equal(gs_packet_wait(t, res[i].packet, 20000, &st, NULL), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
	}
	gs_tenant *list;
	size_t n;
	assert_int_equal(gs_tenant_list(ops, &list, &n), 0);
	bool seen = false;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].name, "tight")) {
			seen = true;
			assert_int_equal(list[i].packet_limit, 4);
			assert_int_equal(list[i].sync_limit, 3);
		}
	assert_true(seen);
	gs_tenant_list_free(list, n);
	gs_dmabuf_free(&held);
	gs_dmabuf_free(&nop);
	gs_close(ops);
	gs_close(r);
	gs_close(t);
	stop(&f);
}

/* gpusched tenant ... as the admin; returns the exit code, out (may be NULL) the output. */
static int cli_admin(fx *f, const char *a1, const char *a2, const char *a3, const char *a4,
                     const char *a5, char *out, size_t cap)
{
	char url[400];
	snprintf(url, sizeof(url), "--url=%s", f->t.url);
	char *argv[] = {(char *)GS_CLI_PATH,
	                url,
	                (char *)"--token=t-ops",
	                (char *)"tenant",
	                (char *)a1,
	                (char *)a2,
	                (char *)a3,
	                (char *)a4,
	                (char *)a5,
	                NULL};
	return run_exit(argv, out, cap);
}

/*
 * An admin changes a live tenant (gpusched tenant set): the new limit holds at once, is
 * audited, and survives a restart for a tenant made by TenantCreate; a non-admin cannot, and
 * unknown tenants or no setting are refused.
 */
static void test_tenant_update_live(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start_with_admin(&f), 0);
	gs_client *ops = itest_connect(&f.t, "t-ops");
	gs_tenant frank = {
	        .name = (char *)"frank", .share = 1, .priority_ceiling = 2, .allocation_limit = 2};
	assert_int_equal(gs_tenant_create(ops, &frank, "t-frank", NULL), 0);
	gs_client *fr = itest_connect(&f.t, "t-frank");
	uint64_t dev;
	assert_int_equal(gs_device_create(fr, "f", &dev), 0);
	gs_allocation_desc ad = {.device = dev, .size = 4096};
	gs_allocation_placement pl;
	assert_int_equal(gs_allocation_create(fr, &ad, &pl), 0);
	assert_int_equal(gs_allocation_create(fr, &ad, &pl), 0);
	assert_int_equal(gs_allocation_create(fr, &ad, &pl), GS_STATUS_QUOTA_EXCEEDED);

	assert_int_equal(
	        cli_admin(&f, "set", "frank", "--allocation-limit", "3", "--share", NULL, 0),
	        2); /* --share without its value: usage */
	assert_int_equal(cli_admin(&f, "set", "frank", "--allocation-limit", "3", NULL, NULL, 0),
	                 0);
	assert_int_equal(gs_allocation_create(fr, &ad, &pl), 0);
	assert_int_equal(gs_allocation_create(fr, &ad, &pl), GS_STATUS_QUOTA_EXCEEDED);
	/* Refused: frank is not an admin; no such tenant; nothing to change. */
	gs_tenant s = {.share = 9};
	assert_int_equal(gs_tenant_update(fr, "frank", &s, GS_TENANT_SHARE),
	                 GS_STATUS_PERMISSION_DENIED);
	assert_int_equal(gs_tenant_update(ops, "nobody", &s, GS_TENANT_SHARE), GS_STATUS_NOT_FOUND);
	assert_int_equal(gs_tenant_update(ops, "frank", &s, 0), GS_ERR_INVALID);
	assert_int_equal(cli_admin(&f, "set", "frank", NULL, NULL, NULL, NULL, 0), 2);
	/* Units and names where a size or a class is asked for (issue 27); nonsense is usage. */
	assert_int_equal(cli_admin(&f, "set", "frank", "--memory-quota=64M",
	                           "--priority-ceiling=high", NULL, NULL, 0),
	                 0);
	gs_tenant *l;
	size_t ln;
	assert_int_equal(gs_tenant_list(ops, &l, &ln), 0);
	for (size_t i = 0; i < ln; i++)
		if (strcmp(l[i].name, "frank") == 0) {
			assert_int_equal(l[i].memory_quota, 64u << 20);
			assert_int_equal(l[i].priority_ceiling, GS_PRIORITY_CLASS_HIGH);
		}
	gs_tenant_list_free(l, ln);
	assert_int_equal(cli_admin(&f, "set", "frank", "--memory-quota", "64X", NULL, NULL, 0), 2);
	assert_int_equal(
	        cli_admin(&f, "set", "frank", "--priority-ceiling", "URGENT", NULL, NULL, 0), 2);
	assert_int_equal(cli_admin(&f, "set", "frank", "--memory-quota=0", "--priority-ceiling=2",
	                           NULL, NULL, 0),
	                 0);
	assert_int_equal(gs_tenant_update(ops, "frank", &s, GS_TENANT_SHARE), 0);
	gs_tenant lim = {.max_message = 65536, .packet_limit = 7, .sync_limit = 5};
	assert_int_equal(gs_tenant_update(ops, "frank", &lim,
	                                  GS_TENANT_MAX_MESSAGE | GS_TENANT_PACKET_LIMIT |
	                                          GS_TENANT_SYNC_LIMIT),
	                 0);
	gs_close(fr);
	gs_close(ops);
	assert_int_equal(gs_testd_stop(&f.t), 0);
	assert_true(itest_audit_int(f.t.db, "SELECT count(*) FROM notes WHERE kind ="
	                                    " 'tenant_updated' AND detail LIKE 'frank:%%'") >= 2);

	/* Kept across a restart: share 9, allocation_limit 3, and the limits (schema 5). */
	const char *const args[] = {"--config", f.cfg.path, NULL};
	assert_int_equal(gs_testd_restart(&f.t, args), 0);
	char out[4096];
	assert_int_equal(cli_admin(&f, "ls", "--json", NULL, NULL, NULL, out, sizeof(out)), 0);
	if (!strstr(out, "\"allocation_limit\":3"))
		fail_msg("tenant ls after the restart: %s", out);
	assert_non_null(strstr(out, "\"share\":9"));
	assert_non_null(strstr(out, "\"max_message\":65536"));
	assert_non_null(strstr(out, "\"packet_limit\":7"));
	assert_non_null(strstr(out, "\"sync_limit\":5"));
	assert_int_equal(verify_exit(f.t.db), 0);
	/* The limits are under the chain: changing one in the file is found. */
	assert_int_equal(itest_sh("sqlite3 -cmd '.timeout 10000' '%s' \"UPDATE tenants SET"
	                          " packet_limit = 70000 WHERE name = 'frank'\"",
	                          f.t.db),
	                 0);
	assert_int_not_equal(verify_exit(f.t.db), 0);
	stop(&f);
}

/*
 * On the wall clock, a light tenant's packet that arrives while a heavy tenant's long run holds
 * the engine preempts it at once (its tenant has had less than its share) instead of waiting
 * out the slice; the heavy run's record says why. Event order only: no timing is asserted.
 */
static void test_light_tenant_preempts_heavy(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": [{\"name\": \"light\", \"token\": \"t-light\"},"
	                           " {\"name\": \"heavy\", \"token\": \"t-heavy\"}]}"),
	                 0);
	gs_client *h = itest_connect(&f.t, "t-heavy");
	gs_client *l = itest_connect(&f.t, "t-light");
	uint64_t hd, ld;
	assert_int_equal(gs_device_create(h, "h", &hd), 0);
	assert_int_equal(gs_device_create(l, "l", &ld), 0);
	uint64_t hx = sched_context(h, hd, 0, 2, GS_PRIORITY_CLASS_NORMAL, 0);
	uint64_t lx = sched_context(l, ld, 0, 2, GS_PRIORITY_CLASS_NORMAL, 0);
	gs_dmabuf spin;
	gs_dmabuf_init(&spin);
	sched_spin(&spin, 300000, false); /* 300 ms, preemptible */
	gs_submit_result hr, lr;
	assert_int_equal(gs_submit(h, hx, &spin, 0, &hr), 0);
	assert_true(sched_await_event(h, hr.packet, GS_PACKET_RUNNING, 10000));
	gs_dmabuf_free(&spin);
	gs_dmabuf_init(&spin);
	sched_spin(&spin, 1000, false);
	assert_int_equal(gs_submit(l, lx, &spin, 0, &lr), 0);
	gs_dmabuf_free(&spin);
	assert_int_equal(sched_wait_final(l, lr.packet, 0), GS_PACKET_COMPLETED);
	/* The light packet finished while the heavy one was still to finish. */
	assert_false(gs_packet_state_is_final(sched_state_now(h, hr.packet)));
	assert_int_equal(sched_wait_final(h, hr.packet, 0), GS_PACKET_COMPLETED);
	gs_packet_event *ev;
	size_t n = sched_events(h, hr.packet, &ev);
	long pre = sched_event_find(ev, n, GS_PACKET_PREEMPTED, 0);
	assert_true(pre >= 0);
	assert_non_null(strstr(ev[pre].detail, "had less than its share"));
	gs_packet_events_free(ev, n);
	gs_close(l);
	gs_close(h);
	stop(&f);
}

/* True when h is not a handle this tenant can name: every kind of request answers
 * NOT_FOUND. */
static bool names_nothing(gs_client *c, uint64_t h)
{
	gs_allocation_status st;
	uint64_t v;
	gs_allocation_desc ad = {.device = h, .size = 4096};
	gs_allocation_placement pl;
	gs_context_status cs;
	return gs_allocation_query(c, h, &st) == GS_STATUS_NOT_FOUND &&
	       gs_context_query(c, h, &cs) == GS_STATUS_NOT_FOUND &&
	       gs_sync_signal(c, h, 1) == GS_STATUS_NOT_FOUND &&
	       gs_sync_create(c, h, 0, &v) == GS_STATUS_NOT_FOUND &&
	       gs_allocation_create(c, &ad, &pl) == GS_STATUS_NOT_FOUND &&
	       gs_context_set_priority(c, h, 2, 0) == GS_STATUS_NOT_FOUND;
}

/* The distance between two handles (they are below 2^53). */
static uint64_t gap(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* Random 53-bit handles come this close with probability 2^-28 a pair; sequential ones were
 * at most a few hundred apart. */
#define SMALL_STEP (UINT64_C(1) << 24)

/*
 * Issue 10: a handle says nothing about other tenants. Handles were one daemon-wide +1
 * sequence, so tenant a, creating one object before and one after, learnt how many its
 * neighbour made in between, and b's handles were a's +/- a few. Now they are random 53-bit
 * numbers: a's second handle is nowhere near its first (not +101 for b's 100 objects), twenty
 * of a's in a row do not step by small amounts, none is 0 or at/above 2^53, and guessing
 * around any handle (+/- 1 to 16), as a or as b, finds nothing.
 */
static void test_handles_reveal_nothing(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": [{\"name\": \"a\", \"token\": \"t-a\"},"
	                           " {\"name\": \"b\", \"token\": \"t-b\"}]}"),
	                 0);
	gs_client *a = itest_connect(&f.t, "t-a");
	gs_client *b = itest_connect(&f.t, "t-b");
	uint64_t da, db;
	assert_int_equal(gs_device_create(a, "a", &da), 0);
	assert_int_equal(gs_device_create(b, "b", &db), 0);
	gs_allocation_desc ada = {.device = da, .size = 4096};
	gs_allocation_desc adb = {.device = db, .size = 4096};
	gs_allocation_placement pl;
	assert_int_equal(gs_allocation_create(a, &ada, &pl), 0);
	uint64_t h1 = pl.allocation;
	enum { THEIRS = 100, MINE = 20 };
	uint64_t bh[THEIRS];
	for (int i = 0; i < THEIRS; i++) {
		if (i % 2) {
			assert_int_equal(gs_allocation_create(b, &adb, &pl), 0);
			bh[i] = pl.allocation;
		} else {
			assert_int_equal(gs_sync_create(b, db, 0, &bh[i]), 0);
		}
	}
	assert_int_equal(gs_allocation_create(a, &ada, &pl), 0);
	uint64_t h2 = pl.allocation;
	/* Before: h2 == h1 + 101. Now the gap tells nothing (and is 2^-30 likely this small). */
	assert_true(h2 != h1 + THEIRS + 1);
	assert_true(gap(h1, h2) >= SMALL_STEP);

	uint64_t mine[MINE];
	int rising = 0;
	for (int i = 0; i < MINE; i++) {
		if (i % 2)
			assert_int_equal(gs_sync_create(a, da, 0, &mine[i]), 0);
		else {
			assert_int_equal(gs_allocation_create(a, &ada, &pl), 0);
			mine[i] = pl.allocation;
		}
		assert_true(mine[i] != 0 && mine[i] < (UINT64_C(1) << 53));
		if (i > 0) {
			assert_true(gap(mine[i], mine[i - 1]) >= SMALL_STEP);
			rising += mine[i] > mine[i - 1];
		}
	}
	/* Not a sequence: about half the steps go down (all 19 going one way: 2^-18). */
	assert_true(rising > 0 && rising < MINE - 1);
	/* No two handles of either tenant are close to each other. */
	for (int i = 0; i < THEIRS; i++)
		for (int k = 0; k < MINE; k++)
			assert_true(gap(bh[i], mine[k]) >= SMALL_STEP);

	/* Guessing around a handle finds nothing, for the neighbour or for the owner. */
	const uint64_t probe[] = {h1, h2, mine[0], mine[1], bh[0], bh[1], da, db};
	for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++)
		for (int64_t d = -16; d <= 16; d++) {
			if (d == 0)
				continue;
			uint64_t g = probe[i] + (uint64_t)d;
			assert_true(names_nothing(a, g));
			assert_true(names_nothing(b, g));
		}
	/* And small numbers, the old first handles, name nothing either. */
	for (uint64_t g = 1; g <= 64; g++) {
		assert_true(names_nothing(a, g));
		assert_true(names_nothing(b, g));
	}
	/* The other tenant's real handles answer as if they did not exist. */
	assert_true(names_nothing(b, h1));
	assert_true(names_nothing(a, bh[1]));
	gs_close(b);
	gs_close(a);
	stop(&f);
}

/* The audit file's number for a value a client was shown (gpuschedd --audit-map-id), or the
 * reverse (--audit-wire-id). */
static uint64_t audit_map(const gs_testd *t, const char *opt, const char *spec)
{
	char *argv[] = {(char *)GS_DAEMON_PATH, (char *)"--db",
	                (char *)t->db,          (char *)opt,
	                (char *)spec,           NULL};
	itest_run r;
	itest_run_argv(argv, 10000, &r);
	if (r.exit_code != 0)
		fail_msg("%s %s: exit %d: %s", opt, spec, r.exit_code, r.err);
	uint64_t v = strtoull(r.out, NULL, 10);
	itest_run_free(&r);
	return v;
}

/* Opaque values of one tenant, in the order it got them: none 0 or above 2^63, no two
 * consecutive ones a small or a fixed step apart, not all rising (a sequence would show the
 * neighbour's work as its gaps). */
static void assert_opaque(const char *what, const uint64_t *v, size_t n)
{
	int rising = 0, same_step = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] == 0 || v[i] >= (UINT64_C(1) << 53))
			fail_msg("%s %zu is %" PRIu64, what, i, v[i]);
		if (i == 0)
			continue;
		if (gap(v[i], v[i - 1]) < SMALL_STEP)
			fail_msg("%s %zu and %zu are %" PRIu64 " apart", what, i - 1, i,
			         gap(v[i], v[i - 1]));
		rising += v[i] > v[i - 1];
		same_step += i > 1 && v[i] - v[i - 1] == v[i - 1] - v[i - 2];
	}
	if (rising == 0 || rising == (int)n - 1 || same_step > 0)
		fail_msg("%s: %d of %zu steps up, %d equal steps", what, rising, n - 1, same_step);
}

/* Moves one allocation of c to segment `to` and waits until the bytes are there; returns the
 * transfer's move record (the newest move of that allocation). */
static gs_move transfer_and_record(gs_client *c, uint64_t allocation, uint32_t to)
{
	gs_paging_result pr;
	assert_int_equal(gs_transfer(c, allocation, to, 0, &pr), 0);
	assert_int_equal(pr.moves, 1);
	assert_int_equal(gs_sync_wait(c, pr.paging_sync, pr.paging_fence, 10000, NULL), 0);
	gs_moves_filter mf = {.allocation = allocation, .limit = 1};
	gs_move *mv = NULL;
	size_t n = 0;
	assert_int_equal(gs_moves(c, &mf, &mv, &n), 0);
	assert_int_equal(n, 1);
	gs_move out = *mv;
	out.reason = NULL;
	gs_moves_free(mv, n);
	assert_int_equal(out.to_segment, to);
	return out;
}

/*
 * Where an allocation lies in a segment that tenants share tells where the others' allocations
 * are (the gaps between one's own). Offsets and GPU addresses are an administrator's: a tenant
 * gets 0 for both when it creates, queries or lists an allocation and in its move records,
 * while the segment it is in, and its bytes, are its own as before.
 */
static void test_placement_reveals_nothing(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": [{\"name\": \"a\", \"token\": \"t-a\"},"
	                           " {\"name\": \"ops\", \"token\": \"t-ops\","
	                           " \"admin\": true}]}"),
	                 0);
	gs_client *a = itest_connect(&f.t, "t-a");
	gs_client *ops = itest_connect(&f.t, "t-ops");
	itest_layout lay;
	itest_layout_of(a, &lay);
	assert_true(lay.memory_segment && lay.aperture_segment);
	uint64_t da, dops;
	assert_int_equal(gs_device_create(a, "a", &da), 0);
	assert_int_equal(gs_device_create(ops, "ops", &dops), 0);

	gs_allocation_placement pa, pops;
	itest_alloc(a, da, 4096, 0, 0, &pa);
	itest_alloc(ops, dops, 4096, 0, 0, &pops);
	assert_int_equal(pa.segment, lay.memory_segment);
	assert_int_equal(pops.segment, lay.memory_segment);
	assert_int_equal(pa.offset, 0);
	assert_int_equal(pa.address, 0);
	/* The administrator's is told; two allocations cannot both start at 0. */
	assert_true(pops.address != 0);
	gs_allocation_status st;
	assert_int_equal(gs_allocation_query(ops, pops.allocation, &st), 0);
	assert_int_equal(st.address, pops.address);

	assert_int_equal(gs_allocation_query(a, pa.allocation, &st), 0);
	assert_true(st.resident);
	assert_int_equal(st.segment, lay.memory_segment);
	assert_int_equal(st.offset, 0);
	assert_int_equal(st.address, 0);
	gs_allocation_status *list = NULL;
	size_t n = 0;
	assert_int_equal(gs_allocation_list(a, da, false, 0, 0, &list, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(list[0].offset, 0);
	assert_int_equal(list[0].address, 0);
	gs_allocation_list_free(list);

	/* Moves: the tenant's name segments only; the administrator's say where. */
	const uint8_t mark[4] = {1, 2, 3, 4};
	assert_int_equal(gs_allocation_write(a, pa.allocation, 100, mark, sizeof mark), 0);
	gs_move ma = transfer_and_record(a, pa.allocation, lay.aperture_segment);
	assert_int_equal(ma.from_segment, lay.memory_segment);
	assert_int_equal(ma.from_offset, 0);
	assert_int_equal(ma.to_offset, 0);
	assert_true(ma.offsets_withheld);
	uint8_t back[4];
	assert_int_equal(gs_allocation_read(a, pa.allocation, 100, back, sizeof back), 0);
	assert_memory_equal(back, mark, sizeof mark);
	gs_move mops = transfer_and_record(ops, pops.allocation, lay.aperture_segment);
	assert_false(mops.offsets_withheld);
	assert_int_equal(mops.from_offset, pops.offset);
	assert_int_equal(gs_addr_make(lay.memory_segment, mops.from_offset), pops.address);

	gs_close(a);
	gs_close(ops);
	stop(&f);
}

/*
 * Packet ids, fences and audit seqs reveal nothing about the other tenants: a submits one packet
 * at a time while b submits three between each of a's, and a's ids and event seqs come at no
 * fixed step and not in order, where the daemon's own numbers (the file's columns) step by 4;
 * a's fences are its context's count, 1..N, whatever b does. They are stable: after a restart
 * a's first packet still answers PacketWait and its events, with the same fence and seqs; the
 * administrator finds it by the id and the fence a got; gpuschedd --audit-map-id leads from
 * them to the row, and the row's id and fence columns are what a was shown.
 */
static void test_packet_ids_reveal_nothing(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": [{\"name\": \"a\", \"token\": \"t-a\"},"
	                           " {\"name\": \"b\", \"token\": \"t-b\"},"
	                           " {\"name\": \"ops\", \"token\": \"t-ops\","
	                           " \"admin\": true}]}"),
	                 0);
	gs_client *a = itest_connect(&f.t, "t-a");
	gs_client *b = itest_connect(&f.t, "t-b");
	uint64_t da, db;
	assert_int_equal(gs_device_create(a, "a", &da), 0);
	assert_int_equal(gs_device_create(b, "b", &db), 0);
	uint64_t xa = itest_context(a, da, 0, 0), xb = itest_context(b, db, 0, 0);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	enum { N = 12, BETWEEN = 3 };
	uint64_t pk[N], fe[N], sq[N];
	for (int i = 0; i < N; i++) {
		gs_submit_result r;
		assert_int_equal(gs_submit(a, xa, &nop, 0, &r), 0);
		pk[i] = r.packet;
		fe[i] = r.fence;
		gs_packet_state st;
		uint64_t fence = 0;
		assert_int_equal(gs_packet_wait(a, pk[i], 30000, &st, &fence), 0);
		assert_int_equal(st, GS_PACKET_COMPLETED);
		assert_true(fence == fe[i]);
		for (int k = 0; k < BETWEEN; k++) {
			assert_int_equal(gs_submit(b, xb, &nop, 0, &r), 0);
			assert_int_equal(gs_packet_wait(b, r.packet, 30000, &st, NULL), 0);
		}
	}
	/* The SUBMITTED event's seq of each of a's packets. */
	gs_packet_event *ev;
	size_t nev;
	for (int i = 0; i < N; i++) {
		assert_int_equal(gs_packet_events(a, pk[i], &ev, &nev), 0);
		assert_true(nev >= 2);
		assert_int_equal(ev[0].state, GS_PACKET_SUBMITTED);
		assert_true(ev[0].packet == pk[i]);
		sq[i] = ev[0].seq;
		gs_packet_events_free(ev, nev);
	}
	assert_opaque("packet ids", pk, N);
	for (int i = 0; i < N; i++)
		assert_true(fe[i] == (uint64_t)i + 1);
	assert_opaque("seqs", sq, N);

	/* The file's numbers: 1 + BETWEEN apart, as the daemon counts them; the map tool finds
	 * a's rows from what a was shown, and back. */
	char spec[96];
	uint64_t row[N];
	for (int i = 0; i < N; i++) {
		snprintf(spec, sizeof spec, "packet:%" PRIu64, pk[i]);
		row[i] = audit_map(&f.t, "--audit-map-id", spec);
		assert_int_equal(
		        itest_audit_int(f.t.db,
		                        "SELECT count(*) FROM packets WHERE packet = %" PRIu64
		                        " AND tenant = 'a'",
		                        row[i]),
		        1);
		if (i)
			assert_int_equal(row[i] - row[i - 1], 1 + BETWEEN);
		snprintf(spec, sizeof spec, "packet:%" PRIu64, row[i]);
		assert_true(audit_map(&f.t, "--audit-wire-id", spec) == pk[i]);
	}
	assert_true((uint64_t)itest_audit_int(f.t.db,
	                                      "SELECT fence FROM packets WHERE packet = %" PRIu64,
	                                      row[3]) == fe[3]);
	snprintf(spec, sizeof spec, "seq:%" PRIu64, sq[5]);
	assert_int_equal(itest_audit_int(f.t.db,
	                                 "SELECT packet FROM packet_events WHERE seq = %" PRIu64,
	                                 audit_map(&f.t, "--audit-map-id", spec)),
	                 row[5]);

	/* b cannot reach a's packets by the ids a got. */
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(b, pk[0], 0, &st, NULL), GS_STATUS_NOT_FOUND);
	assert_int_equal(gs_packet_events(b, pk[0], &ev, &nev), GS_STATUS_NOT_FOUND);
	gs_close(b);
	gs_close(a);

	assert_int_equal(gs_testd_stop(&f.t), 0);
	assert_int_equal(
	        gs_testd_restart(&f.t, (const char *const[]){"--config", f.cfg.path, NULL}), 0);
	a = itest_connect(&f.t, "t-a");
	uint64_t fence = 0;
	assert_int_equal(gs_packet_wait(a, pk[0], 0, &st, &fence), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	assert_true(fence == fe[0]);
	assert_int_equal(gs_packet_events(a, pk[1], &ev, &nev), 0);
	assert_true(ev[0].seq == sq[1]);
	gs_packet_events_free(ev, nev);
	/* a's history by a fence it got, and paged by cursors: every packet, newest first. */
	gs_history_filter hf = {.fence = fe[7], .limit = 10};
	gs_packet_record *recs;
	size_t nrec;
	assert_int_equal(gs_history(a, &hf, &recs, &nrec), 0);
	assert_int_equal(nrec, 1);
	assert_true(recs[0].packet == pk[7] && recs[0].fence == fe[7]);
	gs_history_free(recs, nrec);
	hf = (gs_history_filter){.limit = 5};
	int seen = 0;
	for (int page = 0; page < 4; page++) {
		assert_int_equal(gs_history(a, &hf, &recs, &nrec), 0);
		for (size_t i = 0; i < nrec; i++, seen++)
			assert_true(recs[i].packet == pk[N - 1 - seen]);
		if (nrec)
			hf.before_packet = recs[nrec - 1].packet;
		gs_history_free(recs, nrec);
	}
	assert_int_equal(seen, N);
	/* The administrator finds a's packet by the id and by the fence a reports. */
	gs_client *ops = itest_connect(&f.t, "t-ops");
	hf = (gs_history_filter){.fence = fe[2], .tenant = "a", .limit = 10};
	assert_int_equal(gs_history(ops, &hf, &recs, &nrec), 0);
	assert_int_equal(nrec, 1);
	assert_true(recs[0].packet == pk[2]);
	gs_history_free(recs, nrec);
	hf = (gs_history_filter){.before_packet = pk[3], .tenant = "a", .limit = 1};
	assert_int_equal(gs_history(ops, &hf, &recs, &nrec), 0);
	assert_int_equal(nrec, 1);
	assert_true(recs[0].packet == pk[2]);
	gs_history_free(recs, nrec);
	gs_dmabuf_free(&nop);
	gs_close(ops);
	gs_close(a);
	stop(&f);
}

/*
 * Bans survive a restart (issue 30): an administrator bans tenant x (TenantUpdate "banned"), x
 * is answered BANNED; after a restart x is still banned (the audit's notes say so); lifted, x
 * is served, and after another restart it still is. An administrator cannot ban itself.
 */
static void test_bans_survive_restart(void **state)
{
	(void)state;
	fx f;
	assert_int_equal(start(&f, "{\"tenants\": [{\"name\": \"ops\", \"token\": \"t-ops\","
	                           " \"admin\": true}, {\"name\": \"x\", \"token\": \"t-x\"}]}"),
	                 0);
	const char *const args[] = {"--config", f.cfg.path, NULL};
	gs_client *ops = itest_connect(&f.t, "t-ops");
	gs_tenant ban = {.banned = true}, lift = {.banned = false};
	assert_int_equal(gs_tenant_update(ops, "ops", &ban, GS_TENANT_BANNED),
	                 GS_STATUS_INVALID_ARGUMENT);
	assert_int_equal(gs_tenant_update(ops, "x", &ban, GS_TENANT_BANNED), 0);
	gs_client *x = itest_connect(&f.t, "t-x");
	uint64_t dev;
	assert_int_equal(gs_device_create(x, "x", &dev), GS_STATUS_BANNED);
	gs_close(x);
	gs_close(ops);

	for (int round = 0; round < 2; round++) {
		assert_int_equal(gs_testd_stop(&f.t), 0);
		assert_int_equal(gs_testd_restart(&f.t, args), 0);
		x = itest_connect(&f.t, "t-x");
		ops = itest_connect(&f.t, "t-ops");
		gs_tenant *ts;
		size_t n;
		assert_int_equal(gs_tenant_list(ops, &ts, &n), 0);
		bool banned = false;
		for (size_t i = 0; i < n; i++)
			banned |= strcmp(ts[i].name, "x") == 0 && ts[i].banned;
		gs_tenant_list_free(ts, n);
		if (round == 0) {
			/* Still banned after the restart; then lifted. */
			assert_true(banned);
			assert_int_equal(gs_device_create(x, "x", &dev), GS_STATUS_BANNED);
			assert_int_equal(gs_tenant_update(ops, "x", &lift, GS_TENANT_BANNED), 0);
			assert_int_equal(gs_device_create(x, "x", &dev), 0);
		} else {
			/* Lifted before the restart: served after it. */
			assert_false(banned);
			assert_int_equal(gs_device_create(x, "x", &dev), 0);
		}
		gs_close(x);
		gs_close(ops);
	}
	assert_int_equal(itest_audit_int(f.t.db, "SELECT count(*) FROM notes WHERE kind ="
	                                         " 'tenant_banned' AND tenant = 'x' AND detail"
	                                         " LIKE '%%by ops%%'"),
	                 1);
	assert_int_equal(itest_audit_int(f.t.db, "SELECT count(*) FROM notes WHERE kind ="
	                                         " 'tenant_unbanned' AND tenant = 'x'"),
	                 1);
	stop(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_memory_quota_counts_placed_bytes),
	        cmocka_unit_test(test_tenant_slots_are_reused),
	        cmocka_unit_test(test_admin_tenants_survive_restart),
	        cmocka_unit_test(test_reused_name_is_another_tenant),
	        cmocka_unit_test(test_bad_tokens_limited_per_peer),
	        cmocka_unit_test(test_allocation_and_rate_limits),
	        cmocka_unit_test(test_packet_and_sync_limits),
	        cmocka_unit_test(test_tenant_update_live),
	        cmocka_unit_test(test_light_tenant_preempts_heavy),
	        cmocka_unit_test(test_handles_reveal_nothing),
	        cmocka_unit_test(test_placement_reveals_nothing),
	        cmocka_unit_test(test_packet_ids_reveal_nothing),
	        cmocka_unit_test(test_bans_survive_restart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
