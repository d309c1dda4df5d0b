/* gpuschedd's own command line and start-up failures (exit codes, no crash), tenant removal (a
 * removed tenant can never authenticate again and its name can be reused) and tenant secrets
 * kept as salted hashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
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

	/* Configurations refused at start, each with what the message must name (NULL: any). */
	static const struct {
		const char *json, *says;
	} bad[] = {
	        {"{\"adapters\": [{\"backend\": \"quantum\"}]}", "backend"},
	        {"{\"listen\": 42}", NULL},
	        /* audit_retention is an object of counts; a bare number is refused by name. */
	        {"{\"audit_retention\": 5}", "audit_retention"},
	        {"{\"audit_retention\": {\"max_age_s\": 18446744074}}", "max_age_s"},
	        /* Sizes in MiB that would wrap (2^44 + 1 MiB became 1 MiB), and nodes or
	         * segments that are not objects (they became defaults). */
	        {"{\"adapters\": [{\"segments\": [{\"size_mib\": 17592186044417}]}]}", "size_mib"},
	        {"{\"adapters\": [{\"system_memory_mib\": 17592186044417}]}", "system_memory_mib"},
	        {"{\"adapters\": [{\"nodes\": [1, {\"paging\": true}]}]}", "each node"},
	        {"{\"adapters\": [{\"segments\": [\"vram\"]}]}", "each segment"},
	        /* An events ring of 2^32 - 1 events failed with only "start-up failed". */
	        {"{\"events_buffer\": 4294967295}", "events_buffer"},
	        {"{\"events_buffer\": 0}", "events_buffer"},
	        /* The kernel limits are counts. */
	        {"{\"max_kernels\": -1}", "max_kernels"},
	        /* A tenant has no share policy of its own: the adapter's decides, and the error
	         * says so. */
	        {"{\"tenants\": [{\"name\": \"a\", \"token\": \"t\", \"policy\": "
	         "\"fixed_share\"}]}",
	         "adapters[].policy"},
	};
	itest_config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(itest_config_write(&cfg, bad[i].json), 0);
		r = daemon_run("--config", cfg.path, NULL, NULL);
		assert_int_equal(r.exit_code, 1);
		if (bad[i].says)
			assert_non_null(strstr(r.err, bad[i].says));
		itest_run_free(&r);
		itest_config_cleanup(&cfg);
	}

	/* A key nothing reads (misspelt) is named with its place in a warning; here the start
	 * then fails on the backend, after the file was read. */
	assert_int_equal(itest_config_write(&cfg,
	                                    "{\"quantum_uz\": 5, \"adapters\": [{\"backend\": "
	                                    "\"quantum\", \"nodes\": [{\"pagin\": true}]}],"
	                                    " \"tenants\": [{\"name\": \"a\", \"token\":"
	                                    " \"t\", \"memory_qouta\": 5}]}"),
	                 0);
	r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "unknown key \"quantum_uz\""));
	assert_non_null(strstr(r.err, "unknown key \"adapters[0].nodes[0].pagin\""));
	assert_non_null(strstr(r.err, "unknown key \"tenants[0].memory_qouta\""));
	assert_null(strstr(r.err, "unknown key \"adapters[0].backend\""));
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

/* Asks Info with token on the raw socket sock: the status, and the tenant it answered as. */
static int raw_info(nng_socket sock, const char *token, char *tenant, size_t cap)
{
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__InfoRequest ir = GPUSCHED__V1__INFO_REQUEST__INIT;
	req.id = 7;
	req.token = (char *)token;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_INFO;
	req.info = &ir;
	size_t len;
	void *bytes = itest_pack(&req, &len);
	assert_int_equal(nng_send(sock, bytes, len, 0), 0);
	free(bytes);
	void *ans;
	size_t alen;
	assert_int_equal(nng_recv(sock, &ans, &alen, NNG_FLAG_ALLOC), 0);
	Gpusched__V1__Response *resp = gpusched__v1__response__unpack(NULL, alen, ans);
	nng_free(ans, alen);
	assert_non_null(resp);
	int st = (int)resp->status;
	snprintf(tenant, cap, "%s",
	         resp->body_case == GPUSCHED__V1__RESPONSE__BODY_INFO ? resp->info->tenant : "");
	gpusched__v1__response__free_unpacked(resp, NULL);
	return st;
}

/* Tenant secrets: gpuschedd --hash-token gives the salted hash a config may hold instead of
 * the token; the token then authenticates, anything else does not; a config holding both, or
 * a hash that is not one, does not start. */
static void test_token_hash(void **state)
{
	(void)state;
	char cmd[512], line[256] = "";
	snprintf(cmd, sizeof(cmd), "printf 's3cret\\n' | '%s' --hash-token", GS_DAEMON_PATH);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(line, sizeof(line), p));
	assert_int_equal(pclose(p), 0);
	line[strcspn(line, "\n")] = '\0';
	assert_int_equal(strncmp(line, "b2$", 3), 0);
	assert_int_equal(strlen(line), 3 + 32 + 1 + 64);
	/* A new salt every time: the same token never hashes to the same text. */
	char again[256] = "";
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(again, sizeof(again), p));
	pclose(p);
	again[strcspn(again, "\n")] = '\0';
	assert_string_not_equal(line, again);

	itest_config cfg;
	char json[512];
	snprintf(json, sizeof(json),
	         "{\"tenants\": [{\"name\": \"ops\", \"token_hash\": \"%s\", \"admin\": true}]}",
	         line);
	assert_int_equal(itest_config_write(&cfg, json), 0);
	const char *const args[] = {"--config", cfg.path, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);
	uint64_t dev;
	gs_client *ok = itest_connect(&t, "s3cret");
	assert_int_equal(gs_device_create(ok, "d", &dev), 0);
	assert_int_equal(gs_device_destroy(ok, dev), 0);
	/* An admin-created tenant's token is shown once and works; the daemon keeps its hash. */
	gs_tenant nt = {.name = (char *)"carol", .share = 1, .priority_ceiling = 2};
	char *token = NULL;
	assert_int_equal(gs_tenant_create(ok, &nt, NULL, &token), 0);
	assert_int_equal(strlen(token), 32);
	gs_client *carol = itest_connect(&t, token);
	assert_int_equal(gs_device_create(carol, "c", &dev), 0);
	gs_close(carol);
	/* One connection, tokens changing between requests: each request is the tenant its own
	 * token names (a connection remembers only the last token's tenant). */
	nng_socket sock;
	char who[64];
	assert_int_equal(nng_req0_open(&sock), 0);
	nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 10000);
	assert_int_equal(nng_dial(sock, t.url, NULL, 0), 0);
	assert_int_equal(raw_info(sock, "s3cret", who, sizeof(who)), GS_STATUS_OK);
	assert_string_equal(who, "ops");
	assert_int_equal(raw_info(sock, token, who, sizeof(who)), GS_STATUS_OK);
	assert_string_equal(who, "carol");
	assert_int_equal(raw_info(sock, "s3cret!", who, sizeof(who)), GS_STATUS_UNAUTHENTICATED);
	assert_int_equal(raw_info(sock, "s3cret", who, sizeof(who)), GS_STATUS_OK);
	assert_string_equal(who, "ops");
	/* Removed, carol's token stops working on a connection that used it before. */
	assert_int_equal(raw_info(sock, token, who, sizeof(who)), GS_STATUS_OK);
	carol = itest_connect(&t, token);
	assert_int_equal(gs_device_destroy(carol, dev), 0);
	gs_close(carol);
	assert_int_equal(gs_tenant_destroy(ok, "carol"), 0);
	assert_int_equal(raw_info(sock, token, who, sizeof(who)), GS_STATUS_UNAUTHENTICATED);
	nng_close(sock);
	free(token);
	gs_close(ok);
	const char *const wrong[] = {"s3cret2", "s3cre", "", line}; /* the hash is not the token */
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		gs_client *bad = itest_connect(&t, wrong[i]);
		assert_int_equal(gs_device_create(bad, "x", &dev), GS_STATUS_UNAUTHENTICATED);
		gs_close(bad);
	}
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);

	snprintf(json, sizeof(json),
	         "{\"tenants\": [{\"name\": \"ops\", \"token\": \"s3cret\", \"token_hash\": "
	         "\"%s\"}]}",
	         line);
	assert_int_equal(itest_config_write(&cfg, json), 0);
	itest_run r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "token_hash"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);
	assert_int_equal(itest_config_write(&cfg, "{\"tenants\": [{\"name\": \"ops\", "
	                                          "\"token_hash\": \"b2$00$11\"}]}"),
	                 0);
	r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "token_hash"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);

	/* Two tenants with one secret do not start: a VM whose token_hash is the administrator's
	 * token's (its guests would log in as the administrator), two equal tokens, two equal
	 * hashes. The message names the tenants, not the secret. */
	static const struct {
		const char *json, *why;
	} same[] = {
	        {"{\"tenants\": [{\"name\": \"ops\", \"token\": \"s3cret\", \"admin\": true},"
	         " {\"name\": \"vm1\", \"kind\": \"vm\", \"token_hash\": \"%s\"}]}",
	         "same secret"},
	        {"{\"tenants\": [{\"name\": \"vm1\", \"kind\": \"vm\", \"token_hash\": \"%s\"},"
	         " {\"name\": \"ops\", \"token\": \"s3cret\", \"admin\": true}]}",
	         "same secret"},
	        {"{\"tenants\": [{\"name\": \"ops\", \"token_hash\": \"%s\"},"
	         " {\"name\": \"vm1\", \"token_hash\": \"%s\"}]}",
	         "unique"},
	        {"{\"tenants\": [{\"name\": \"ops\", \"token\": \"tok\"},"
	         " {\"name\": \"vm1\", \"token\": \"tok\"}]}",
	         "unique"},
	};
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		snprintf(json, sizeof(json), same[i].json, line, line);
		assert_int_equal(itest_config_write(&cfg, json), 0);
		r = daemon_run("--config", cfg.path, NULL, NULL);
		if (r.exit_code != 1 || !strstr(r.err, same[i].why) || strstr(r.err, "s3cret") ||
		    strstr(r.err, "tok\""))
			fail_msg("case %zu: exit %d: %s", i, r.exit_code, r.err ? r.err : "");
		itest_run_free(&r);
		itest_config_cleanup(&cfg);
	}
}

/* An ipc:// path whose directories are missing: the daemon makes only the socket's own
 * directory, where its parent exists; it no longer makes a tree of them (as root, anywhere a
 * URL points): deeper, the start fails and nothing is created. */
static void test_ipc_directories(void **state)
{
	(void)state;
	char dir[] = "/tmp/gs-ipcdir-XXXXXX", url[256], db[256], deep[256];
	assert_non_null(mkdtemp(dir));
	snprintf(url, sizeof(url), "ipc://%s/a/b/c/d.sock", dir);
	snprintf(db, sizeof(db), "%s/audit.db", dir);
	snprintf(deep, sizeof(deep), "%s/a", dir);
	itest_run r = daemon_run("--listen", url, "--db", db);
	assert_int_equal(r.exit_code, 1);
	itest_run_free(&r);
	struct stat st;
	assert_int_not_equal(stat(deep, &st), 0);
	itest_sh("rm -rf '%s'", dir);
}

/* Mode bits of the file of an ipc:// URL. */
static unsigned ipc_mode(const char *url)
{
	struct stat st;
	assert_int_equal(strncmp(url, "ipc://", 6), 0);
	assert_int_equal(stat(url + 6, &st), 0);
	return (unsigned)(st.st_mode & 0777);
}

/* ipc sockets are 0600 unless ipc_mode says otherwise: another local user cannot even connect.
 * A mode that is not octal permission bits does not start. The obsolete --events (the PUB
 * socket every tenant could read) is accepted and ignored: no socket appears there. */
static void test_ipc_socket_mode(void **state)
{
	(void)state;
	char ev[128];
	snprintf(ev, sizeof(ev), "ipc:///tmp/gs-ev-mode-%d.sock", (int)getpid());
	const char *const args[] = {"--events", ev, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);
	assert_int_equal(ipc_mode(t.url), 0600);
	assert_int_equal(access(ev + 6, F_OK), -1);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);

	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, "{\"ipc_mode\": \"0660\"}"), 0);
	const char *const args2[] = {"--config", cfg.path, "--events", ev, NULL};
	assert_int_equal(gs_testd_start(&t, args2), 0);
	assert_int_equal(ipc_mode(t.url), 0660);
	assert_int_equal(access(ev + 6, F_OK), -1);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	itest_config_cleanup(&cfg);
	unlink(ev + 6);

	assert_int_equal(itest_config_write(&cfg, "{\"ipc_mode\": \"0999\"}"), 0);
	itest_run r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "ipc_mode"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);
}

/* A group the test may give a file to other than its own: any other group when it runs as
 * root, else a supplementary group; its own when there is none (the test is weaker then). */
static gid_t other_group(void)
{
	gid_t mine = getegid();
	if (geteuid() == 0) {
		for (gid_t g = 1; g < 65536; g++)
			if (g != mine && getgrgid(g))
				return g;
		return mine;
	}
	gid_t groups[256];
	int n = getgroups(256, groups);
	for (int i = 0; i < n; i++)
		if (groups[i] != mine)
			return groups[i];
	return mine;
}

/* ipc_group gives the ipc socket to that group (by name or gid) with ipc_mode's bits; a group
 * that does not exist, or one the daemon may not give its file to, does not start (exit 1,
 * the message names ipc_group). */
static void test_ipc_socket_group(void **state)
{
	(void)state;
	gid_t g = other_group();
	struct group *gr = getgrgid(g);
	assert_non_null(gr);
	char json[256], name[128];
	snprintf(name, sizeof(name), "%s", gr->gr_name);
	for (int by_gid = 0; by_gid < 2; by_gid++) {
		if (by_gid)
			snprintf(json, sizeof(json), "{\"ipc_mode\": \"0660\", \"ipc_group\": %u}",
			         (unsigned)g);
		else
			snprintf(json, sizeof(json),
			         "{\"ipc_mode\": \"0660\", \"ipc_group\": \"%s\"}", name);
		itest_config cfg;
		assert_int_equal(itest_config_write(&cfg, json), 0);
		const char *const args[] = {"--config", cfg.path, NULL};
		gs_testd t;
		assert_int_equal(gs_testd_start(&t, args), 0);
		struct stat st;
		assert_int_equal(stat(t.url + 6, &st), 0);
		assert_int_equal(st.st_gid, g);
		assert_int_equal(st.st_mode & 0777, 0660);
		/* And it serves. */
		gs_client *c = itest_connect(&t, NULL);
		gs_daemon_info *info;
		assert_int_equal(gs_info(c, &info), 0);
		gs_info_free(info);
		gs_close(c);
		assert_int_equal(gs_testd_stop(&t), 0);
		gs_testd_cleanup(&t);
		itest_config_cleanup(&cfg);
	}

	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, "{\"ipc_group\": \"gs-no-such-group-for-sure\"}"),
	                 0);
	itest_run r = daemon_run("--config", cfg.path, NULL, NULL);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "ipc_group"));
	assert_non_null(strstr(r.err, "gs-no-such-group-for-sure"));
	itest_run_free(&r);
	itest_config_cleanup(&cfg);

	/* Not root: a group it is not in cannot be given (root can give any). */
	if (geteuid() != 0) {
		gid_t groups[256];
		int n = getgroups(256, groups);
		gid_t foreign = 0;
		for (;; foreign++) {
			bool in = foreign == getegid();
			for (int i = 0; i < n; i++)
				in |= groups[i] == foreign;
			if (!in)
				break;
		}
		char url[128];
		snprintf(url, sizeof(url), "ipc:///tmp/gs-group-%d.sock", (int)getpid());
		snprintf(json, sizeof(json), "{\"ipc_group\": %u}", (unsigned)foreign);
		assert_int_equal(itest_config_write(&cfg, json), 0);
		r = daemon_run("--config", cfg.path, "--listen", url);
		assert_int_equal(r.exit_code, 1);
		assert_non_null(strstr(r.err, "ipc_group"));
		itest_run_free(&r);
		itest_config_cleanup(&cfg);
		unlink(url + 6);
	}
}

/* A running daemon answers Info, and a packet of it completes. */
static void still_serves(gs_testd *t)
{
	gs_client *c = itest_connect(t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "still", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	itest_submit_wait(c, ctx, &b, 0);
	gs_dmabuf_free(&b);
	assert_int_equal(gs_device_destroy(c, dev), 0);
	gs_close(c);
}

/*
 * One daemon per socket and per audit file (issue 27): a second gpuschedd on a running one's
 * ipc socket, on its audit file, or both, exits 1 naming the running one's pid, and the running
 * one keeps serving with a file that verifies. On main c4ca6f6 the second took the socket path
 * (the first stopped answering, spinning) and marked the first's packets ABORTED in its file.
 * A dead daemon's socket and lock are taken over by the next start.
 */
/* The process keeps its program's name (its main thread's, where the loop runs): pidof,
 * pkill and killall find "gpuschedd", while the other threads have names of their own. */
static void test_process_name(void **state)
{
	(void)state;
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, NULL), 0);
	char path[64], name[32] = "";
	snprintf(path, sizeof path, "/proc/%d/comm", (int)t.pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(name, sizeof name, f));
	fclose(f);
	assert_string_equal(name, "gpuschedd\n");
	/* pidof reads the same name. */
	assert_int_equal(itest_sh("pidof gpuschedd | tr ' ' '\\n' | grep -qx %d", (int)t.pid), 0);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
}

static void test_one_daemon_per_socket_and_file(void **state)
{
	(void)state;
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, NULL), 0);
	char pid[32], other_db[400], other_url[400];
	snprintf(pid, sizeof pid, "pid %d", (int)t.pid);
	snprintf(other_db, sizeof other_db, "%s/other.db", t.dir);
	snprintf(other_url, sizeof other_url, "ipc://%s/other.sock", t.dir);
	const char *cases[][2] = {{t.url, other_db}, {other_url, t.db}, {t.url, t.db}};
	for (size_t i = 0; i < 3; i++) {
		itest_run r = daemon_run("--listen", cases[i][0], "--db", cases[i][1]);
		if (r.exit_code != 1 || !strstr(r.err, pid))
			fail_msg("second daemon on %s and %s: exit %d\n%s", cases[i][0],
			         cases[i][1], r.exit_code, r.err);
		itest_run_free(&r);
		still_serves(&t);
	}
	assert_int_equal(itest_audit_int(t.db, "SELECT count(*) FROM packets WHERE state = 6"), 0);
	/* Killed: its socket file and its lock file stay; the next start takes both over. */
	gs_testd_kill9(&t);
	assert_int_equal(access(t.url + strlen("ipc://"), F_OK), 0);
	assert_int_equal(gs_testd_restart(&t, NULL), 0);
	still_serves(&t);
	assert_int_equal(gs_testd_stop(&t), 0);
	char *av[] = {(char *)GS_CLI_PATH, (char *)"audit", (char *)"verify", t.db, NULL};
	itest_run r;
	itest_run_argv(av, 60000, &r);
	if (r.exit_code != 0)
		fail_msg("audit verify: %d\n%s%s", r.exit_code, r.out, r.err);
	itest_run_free(&r);
	gs_testd_cleanup(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_help_version_usage),
	        cmocka_unit_test(test_startup_failures_exit_1),
	        cmocka_unit_test(test_removed_tenant_cannot_authenticate),
	        cmocka_unit_test(test_token_hash),
	        cmocka_unit_test(test_ipc_directories),
	        cmocka_unit_test(test_ipc_socket_mode),
	        cmocka_unit_test(test_ipc_socket_group),
	        cmocka_unit_test(test_one_daemon_per_socket_and_file),
	        cmocka_unit_test(test_process_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
