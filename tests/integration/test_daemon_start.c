/* gpuschedd's own command line and start-up failures (exit codes, no crash), and tenant
 * removal: a removed tenant can never authenticate again and its name can be reused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

static itest_run daemon_run(const char *a1, const char *a2, const char *a3, const char *a4)
{
	char *argv[] = {
	        (char *)GS_DAEMON_PATH, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
	itest_run r;
	itest_run_argv(argv, 20000, &r);
	return r;
}

static void test_help_version_usage(void **state)
{
	(void)state;
	itest_run r = daemon_run("--help", NULL, NULL, NULL);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "Usage: gpuschedd"));
	itest_run_free(&r);
	r = daemon_run("--version", NULL, NULL, NULL);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "gpuschedd"));
	itest_run_free(&r);
	r = daemon_run("--no-such-flag", NULL, NULL, NULL);
	assert_int_equal(r.exit_code, 2);
	itest_run_free(&r);
	r = daemon_run("--clock", "sideways", NULL, NULL);
	assert_int_equal(r.exit_code, 2);
	itest_run_free(&r);
}

/* Failures after parsing exit 1 with a message; none crashes (once: a NULL audit did). */
static void test_startup_failures_exit_1(void **state)
{
	(void)state;
	itest_run r = daemon_run("--db", "/nonexistent-dir/audit.db", "--listen",
	                         "ipc:///tmp/gpusched-start-test.sock");
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "audit"));
	itest_run_free(&r);

	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, "{\"adapters\": [{\"backend\": \"quantum\"}]}"),
	                 0);
	r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "backend"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);

	assert_int_equal(itest_config_write(&cfg, "{\"listen\": 42}"), 0);
	r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	itest_run_free(&r);
	itest_config_cleanup(&cfg);

	/* audit_retention is an object of counts; a bare number is refused by name. */
	assert_int_equal(itest_config_write(&cfg, "{\"audit_retention\": 5}"), 0);
	r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "audit_retention"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);
	assert_int_equal(itest_config_write(&cfg, "{\"audit_retention\": {\"max_age_s\":"
	                                          " 18446744074}}"),
	                 0);
	r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "max_age_s"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);
}

static void test_removed_tenant_cannot_authenticate(void **state)
{
	(void)state;
	itest_config cfg;
	assert_int_equal(
	        itest_config_write(&cfg,
	                           "{\"tenants\": [{\"name\": \"ops\", \"token\": \"t-ops\", "
	                           "\"admin\": true}, {\"name\": \"bob\", \"token\": \"t-bob\"}]}"),
	        0);
	const char *const args[] = {"--config", cfg.path, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);
	gs_client *ops = itest_connect(&t, "t-ops");
	gs_client *bob = itest_connect(&t, "t-bob");
	uint64_t dev, ctx;
	assert_int_equal(gs_device_create(bob, "b", &dev), 0);
	/* A configured tenant without priority_ceiling is capped at NORMAL: REALTIME (or HIGH)
	 * must be granted. */
	gs_context_desc cd;
	gs_context_desc_init(&cd, dev, 0);
	cd.priority_class = GS_PRIORITY_CLASS_REALTIME;
	assert_int_equal(gs_context_create(bob, &cd, &ctx, NULL), GS_STATUS_PERMISSION_DENIED);
	cd.priority_class = GS_PRIORITY_CLASS_ABOVE_NORMAL;
	assert_int_equal(gs_context_create(bob, &cd, &ctx, NULL), GS_STATUS_PERMISSION_DENIED);
	cd.priority_class = GS_PRIORITY_CLASS_NORMAL;
	assert_int_equal(gs_context_create(bob, &cd, &ctx, NULL), 0);
	assert_int_equal(gs_context_destroy(bob, ctx), 0);
	assert_int_equal(gs_tenant_destroy(ops, "bob"), GS_STATUS_BUSY); /* still has a device */
	assert_int_equal(gs_device_destroy(bob, dev), 0);
	assert_int_equal(gs_tenant_destroy(ops, "bob"), 0);
	assert_int_equal(gs_device_create(bob, "b", &dev), GS_STATUS_UNAUTHENTICATED);
	gs_close(bob);
	/* Neither an empty nor a degenerate token reaches the removed tenant. */
	gs_client *probe = itest_connect(&t, "");
	assert_int_equal(gs_device_create(probe, "p", &dev), GS_STATUS_UNAUTHENTICATED);
	gs_close(probe);
	probe = itest_connect(&t, "!");
	assert_int_equal(gs_device_create(probe, "p", &dev), GS_STATUS_UNAUTHENTICATED);
	gs_close(probe);
	/* The name is free again. */
	gs_tenant nt = {.name = (char *)"bob", .share = 1, .priority_ceiling = 2};
	char *token = NULL;
	assert_int_equal(gs_tenant_create(ops, &nt, "t-bob-2", &token), 0);
	free(token);
	gs_client *bob2 = itest_connect(&t, "t-bob-2");
	assert_int_equal(gs_device_create(bob2, "b2", &dev), 0);
	gs_close(bob2);
	gs_close(ops);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_help_version_usage),
	        cmocka_unit_test(test_startup_failures_exit_1),
	        cmocka_unit_test(test_removed_tenant_cannot_authenticate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
