/* Reloading the configuration live (issue 30): 20 reloads that change a tenant's share while
 * another tenant submits without pause (no request fails, each share is in force when the
 * reload answers, every change is audited with who asked); a broken file and one that changes
 * what only a restart can are refused whole; SIGHUP reloads too; a replaced token takes over at
 * once; a tenant taken out of the file while it has devices is kept. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

#define RELOADS 20

typedef struct fx {
	gs_testd t;
	itest_config cfg;
	gs_client *ops;
	uint64_t ops_ctx; /* for audit barriers */
} fx;

/* The configuration with b's share, b's token and whether tenant c is in it; written whole
 * to a new file, then renamed over the old one (an editor's atomic save). */
static void write_config(fx *f, uint32_t share_b, const char *token_b, bool with_c,
                         const char *extra)
{
	char json[1024], tmp[400];
	snprintf(json, sizeof json,
	         "{\"tenants\": [{\"name\": \"ops\", \"token\": \"t-ops\", \"admin\": true},"
	         " {\"name\": \"a\", \"token\": \"t-a\"},"
	         " {\"name\": \"b\", \"token\": \"%s\", \"share\": %u}%s]%s}\n",
	         token_b, share_b, with_c ? ", {\"name\": \"c\", \"token\": \"t-c\"}" : "",
	         extra ? extra : "");
	snprintf(tmp, sizeof tmp, "%s.new", f->cfg.path);
	FILE *out = fopen(tmp, "w");
	assert_non_null(out);
	assert_true(fputs(json, out) >= 0);
	assert_int_equal(fclose(out), 0);
	assert_int_equal(rename(tmp, f->cfg.path), 0);
}

static uint32_t share_of(gs_client *c, const char *name)
{
	gs_tenant *ts;
	size_t n;
	assert_int_equal(gs_tenant_list(c, &ts, &n), 0);
	uint32_t share = 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(ts[i].name, name) == 0)
			share = ts[i].share;
	gs_tenant_list_free(ts, n);
	return share;
}

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	if (!f || itest_config_write(&f->cfg, "{}") != 0)
		return -1;
	write_config(f, 1, "t-b", true, NULL);
	const char *args[] = {"--config", f->cfg.path, NULL};
	if (gs_testd_start(&f->t, args) != 0)
		return -1;
	f->ops = itest_connect(&f->t, "t-ops");
	uint64_t dev;
	if (gs_device_create(f->ops, "ops", &dev) != 0)
		return -1;
	f->ops_ctx = itest_context(f->ops, dev, 0, 2);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	gs_close(f->ops);
	assert_int_equal(gs_testd_stop(&f->t), 0);
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
	free(f);
	return 0;
}

/* Tenant a submits and waits, packet after packet, until told to stop (bounded). */
typedef struct load {
	const gs_testd *t;
	atomic_bool stop;
	atomic_uint_fast64_t done;
	int first_error;
} load;

static void *load_main(void *arg)
{
	load *l = arg;
	gs_client *c = itest_connect(l->t, "t-a");
	uint64_t dev;
	if (gs_device_create(c, "load", &dev) != 0) {
		l->first_error = -1;
		gs_close(c);
		return NULL;
	}
	uint64_t ctx = itest_context(c, dev, 0, 2);
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	gs_dmabuf_nop(&nop);
	long long deadline = gs_test_now_ms() + 120000;
	while (!atomic_load(&l->stop) && gs_test_now_ms() < deadline &&
	       atomic_load(&l->done) < 1000000) {
		gs_submit_result r;
		int rv = gs_submit_wait(c, ctx, &nop, GS_SUBMIT_NULL_RENDERING, 10000, &r);
		if (rv != 0) {
			l->first_error = rv;
			break;
		}
		atomic_fetch_add(&l->done, 1);
	}
	gs_dmabuf_free(&nop);
	gs_close(c);
	return NULL;
}

/* Starts tenant a's load and waits (30 s at most) until 10 of its packets ended. */
static void load_start(load *l, pthread_t *th)
{
	assert_int_equal(pthread_create(th, NULL, load_main, l), 0);
	long long deadline = gs_test_now_ms() + 30000;
	while (atomic_load(&l->done) < 10 && !l->first_error)
		assert_true(gs_test_now_ms() < deadline);
}

static void test_reloads_under_load(void **state)
{
	fx *f = *state;
	load l = {.t = &f->t};
	pthread_t th;
	/* The load runs before the first reload and goes on through all of them. */
	load_start(&l, &th);
	uint64_t before = atomic_load(&l.done);
	for (uint32_t i = 0; i < RELOADS; i++) {
		uint32_t share = 2 + i;
		write_config(f, share, "t-b", true, NULL);
		uint32_t changes = 0;
		char report[1024];
		int rv = gs_admin_reload(f->ops, &changes, report, sizeof report);
		if (rv != 0)
			fail_msg("reload %u: %s: %s", i, gs_status_name(rv),
			         gs_client_message(f->ops));
		assert_int_equal(changes, 1);
		assert_non_null(strstr(report, "share"));
		/* In force when the reload answers. */
		assert_int_equal(share_of(f->ops, "b"), share);
	}
	uint64_t during = atomic_load(&l.done) - before;
	atomic_store(&l.stop, true);
	assert_int_equal(pthread_join(th, NULL), 0);
	if (l.first_error)
		fail_msg("tenant a's submission failed during the reloads: %s",
		         gs_status_name(l.first_error));
	assert_true(during > 0); /* packets ended between the first reload and the last */
	itest_audit_barrier(f->ops, f->ops_ctx);
	assert_int_equal(itest_audit_int(f->t.db, "SELECT count(*) FROM notes WHERE kind ="
	                                          " 'tenant_updated' AND detail LIKE"
	                                          " 'by ops (reload): b: share %%'"),
	                 RELOADS);
	assert_int_equal(
	        itest_audit_int(f->t.db, "SELECT count(*) FROM notes WHERE kind = 'reload'"),
	        RELOADS);
}

static gs_share_policy policy_of(gs_client *c)
{
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	gs_share_policy p = info->adapters[0].share_policy;
	gs_info_free(info);
	return p;
}

/* An adapter's share policy changes live too: its contexts are regrouped at once while tenant
 * a's work goes on, and b's work queued before the change ends. */
static void test_policy_reload(void **state)
{
	fx *f = *state;
	load l = {.t = &f->t};
	pthread_t th;
	load_start(&l, &th);
	/* b: packets queued behind a SPIN when the policy changes. */
	gs_client *b = itest_connect(&f->t, "t-b");
	uint64_t dev, last = 0;
	assert_int_equal(gs_device_create(b, "b", &dev), 0);
	uint64_t ctx = itest_context(b, dev, 0, 2);
	gs_dmabuf spin, nop;
	gs_dmabuf_init(&spin);
	gs_dmabuf_init(&nop);
	assert_int_equal(gs_dmabuf_spin(&spin, 20000, 0), 0);
	assert_int_equal(gs_dmabuf_nop(&nop), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(b, ctx, &spin, 0, &r), 0);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(gs_submit(b, ctx, &nop, 0, &r), 0);
		last = r.packet;
	}
	static const struct {
		const char *name;
		gs_share_policy p;
	} seq[] = {{"equal_share", GS_SHARE_EQUAL_SHARE},
	           {"best_effort", GS_SHARE_BEST_EFFORT},
	           {"fixed_share", GS_SHARE_FIXED_SHARE},
	           {"weighted", GS_SHARE_WEIGHTED}};
	for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
		char extra[96];
		snprintf(extra, sizeof extra, ", \"adapters\": [{\"policy\": \"%s\"}]",
		         seq[i].name);
		write_config(f, 1, "t-b", true, extra);
		uint32_t changes = 0;
		char report[1024];
		int rv = gs_admin_reload(f->ops, &changes, report, sizeof report);
		if (rv != 0)
			fail_msg("reload to %s: %s", seq[i].name, gs_client_message(f->ops));
		assert_non_null(strstr(report, "policy"));
		assert_int_equal(policy_of(f->ops), seq[i].p);
	}
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(b, last, 30000, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	gs_dmabuf_free(&spin);
	gs_dmabuf_free(&nop);
	gs_close(b);
	uint64_t before = atomic_load(&l.done);
	long long deadline = gs_test_now_ms() + 30000;
	while (atomic_load(&l.done) < before + 10 && !l.first_error)
		assert_true(gs_test_now_ms() < deadline);
	atomic_store(&l.stop, true);
	assert_int_equal(pthread_join(th, NULL), 0);
	if (l.first_error)
		fail_msg("tenant a's submission failed: %s", gs_status_name(l.first_error));
}

static void test_refused_whole(void **state)
{
	fx *f = *state;
	write_config(f, 5, "t-b", true, NULL);
	assert_int_equal(gs_admin_reload(f->ops, NULL, NULL, 0), 0);
	assert_int_equal(share_of(f->ops, "b"), 5);

	/* A broken file: nothing changes, the reason names the file's line. */
	FILE *out = fopen(f->cfg.path, "w");
	assert_non_null(out);
	fputs("{\"tenants\": [{\"name\": \"b\", \"share\": 9}\n", out);
	fclose(out);
	assert_int_equal(gs_admin_reload(f->ops, NULL, NULL, 0), GS_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(gs_client_message(f->ops), "nothing was changed"));
	assert_int_equal(share_of(f->ops, "b"), 5);

	/* A file that changes b's share and an adapter's backend: refused whole, share stays. */
	write_config(f, 9, "t-b", true, ", \"adapters\": [{\"backend\": \"null\"}]");
	assert_int_equal(gs_admin_reload(f->ops, NULL, NULL, 0), GS_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(gs_client_message(f->ops), "adapters[0]"));
	assert_int_equal(share_of(f->ops, "b"), 5);

	/* A misspelt key is no error for a reload (as at start): it is logged, and ignored. */
	itest_audit_barrier(f->ops, f->ops_ctx);
	assert_int_equal(
	        itest_audit_int(f->t.db,
	                        "SELECT count(*) FROM notes WHERE kind = 'reload_refused'"),
	        2);

	/* Not an administrator: refused. */
	gs_client *a = itest_connect(&f->t, "t-a");
	assert_int_equal(gs_admin_reload(a, NULL, NULL, 0), GS_STATUS_PERMISSION_DENIED);
	gs_close(a);
}

static void test_sighup_tokens_and_kept_tenants(void **state)
{
	fx *f = *state;
	/* c has a device: taken out of the file, it is kept. */
	gs_client *c = itest_connect(&f->t, "t-c");
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "stays", &dev), 0);

	/* SIGHUP: b's share 99, b's token replaced, c out of the file. */
	write_config(f, 99, "t-b2", false, NULL);
	assert_int_equal(kill(f->t.pid, SIGHUP), 0);
	long long deadline = gs_test_now_ms() + 10000;
	while (share_of(f->ops, "b") != 99)
		assert_true(gs_test_now_ms() < deadline);
	gs_client *old = NULL;
	assert_int_equal(gs_connect(f->t.url, "t-b", &old), 0);
	gs_daemon_info *info;
	assert_int_equal(gs_info(old, &info), GS_STATUS_UNAUTHENTICATED);
	gs_close(old);
	gs_client *b = itest_connect(&f->t, "t-b2");
	assert_int_equal(gs_info(b, &info), 0);
	assert_string_equal(info->tenant, "b");
	gs_info_free(info);
	gs_close(b);
	/* c still serves, with its device. */
	uint64_t ctx = itest_context(c, dev, 0, 2);
	assert_true(ctx != 0);
	gs_close(c);
	itest_audit_barrier(f->ops, f->ops_ctx);
	assert_int_equal(itest_audit_int(f->t.db, "SELECT count(*) FROM notes WHERE kind ="
	                                          " 'tenant_kept' AND detail LIKE '%%c is no"
	                                          " longer in the file%%'"),
	                 1);
	assert_true(itest_audit_int(f->t.db, "SELECT count(*) FROM notes WHERE kind = 'reload'"
	                                     " AND detail LIKE 'by SIGHUP%%'") >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_reloads_under_load, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_refused_whole, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_policy_reload, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_sighup_tokens_and_kept_tenants, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
