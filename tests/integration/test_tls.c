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

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_mutual_tls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
