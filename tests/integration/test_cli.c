/*
 * The gpusched CLI (GS_CLI_PATH) as a user runs it, against a real test daemon: help and
 * usage errors, exit codes, and the JSON documents of info, demo, submit, history, events,
 * stats, moves and alloc, cross-checked against the daemon through the client library; and
 * the demo over-committing a daemon with little video memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"
#include "wddm.h"

#define CLI_TIMEOUT_MS 60000

/* Exit codes documented in `gpusched --help`. */
enum { EXIT_OK = 0, EXIT_DAEMON = 1, EXIT_USAGE = 2, EXIT_TRANSPORT = 3 };

typedef struct fx {
	gs_testd t;
	itest_config cfg; /* only for a daemon started with a configuration */
	char url_opt[340];
} fx;

/* A small adapter: a 1 MiB memory segment and a 1 MiB aperture, 64 KiB paging chunks. */
#define SMALL_MEMORY   (1u << 20)
#define SMALL_APERTURE (1u << 20)
static const char small_vram_json[] =
        "{\"paging_chunk\": 65536, \"adapters\": [{\"name\": \"small0\", \"backend\": \"emu\","
        " \"nodes\": [{\"name\": \"3d\", \"kind\": \"3d\"},"
        " {\"name\": \"compute\", \"kind\": \"compute\"},"
        " {\"name\": \"copy\", \"kind\": \"copy\", \"paging\": true}],"
        " \"segments\": [{\"id\": 1, \"name\": \"vram\", \"kind\": \"memory\", \"size\": 1048576},"
        " {\"id\": 2, \"name\": \"aperture\", \"kind\": \"aperture\", \"size_mib\": 1,"
        " \"cpu_visible\": true}],"
        " \"system_memory_mib\": 64}]}\n";

static int start(void **state, const char *config_json)
{
	fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	const char *args[] = {"--config", f->cfg.path, NULL};
	if (config_json && itest_config_write(&f->cfg, config_json) != 0) {
		itest_config_cleanup(&f->cfg);
		free(f);
		return -1;
	}
	if (gs_testd_start(&f->t, config_json ? args : NULL) != 0) {
		gs_testd_cleanup(&f->t);
		itest_config_cleanup(&f->cfg);
		free(f);
		return -1;
	}
	snprintf(f->url_opt, sizeof(f->url_opt), "--url=%s", f->t.url);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return start(state, NULL);
}

static int setup_small_vram(void **state)
{
	return start(state, small_vram_json);
}

static int teardown(void **state)
{
	fx *f = *state;
	int rc = gs_testd_stop(&f->t);
	gs_testd_cleanup(&f->t);
	itest_config_cleanup(&f->cfg);
	free(f);
	return rc == 0 ? 0 : -1;
}

/* Runs the CLI with the given arguments (NULL-terminated). */
static void cli(itest_run *r, const char *first, ...)
{
	char *argv[32];
	int n = 0;
	argv[n++] = (char *)GS_CLI_PATH;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	itest_run_argv(argv, CLI_TIMEOUT_MS, r);
	if (r->exit_code < 0)
		fail_msg("gpusched %s did not finish within %d ms", first, CLI_TIMEOUT_MS);
}

static void expect_exit(itest_run *r, int code, const char *what)
{
	if (r->exit_code != code)
		fail_msg("gpusched %s: exit %d, want %d\nstdout: %s\nstderr: %s", what,
		         r->exit_code, code, r->out, r->err);
}

/* Parses stdout as one JSON document. */
static json_t *parse(const itest_run *r)
{
	json_error_t err;
	json_t *doc = json_loads(r->out, 0, &err);
	if (!doc)
		fail_msg("stdout is not JSON (%s at line %d): %s", err.text, err.line, r->out);
	return doc;
}

static json_int_t int_of(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_integer(v))
		fail_msg("\"%s\" is missing or not an integer", key);
	return json_integer_value(v);
}

static const char *str_of(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_string(v))
		fail_msg("\"%s\" is missing or not a string", key);
	return json_string_value(v);
}

/* ---- without a daemon ---- */

static const char *const commands[] = {"info",   "demo",    "submit", "history", "events",  "stats",
                                       "device", "alloc",   "sync",   "tenant",  "moves",   "watch",
                                       "audit",  "explain", "usage",  "trace",   "timeline"};
static const char *const alloc_subcommands[] = {"create",   "destroy", "ls",      "show",
                                                "resident", "evict",   "transfer"};

static void test_help(void **state)
{
	(void)state;
	itest_run r;
	cli(&r, "--help", NULL);
	expect_exit(&r, EXIT_OK, "--help");
	assert_non_null(strstr(r.out, "Usage"));
	for (size_t i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		assert_non_null(strstr(r.out, commands[i]));
	itest_run_free(&r);
	for (size_t i = 0; i < sizeof(commands) / sizeof(*commands); i++) {
		cli(&r, commands[i], "--help", NULL);
		expect_exit(&r, EXIT_OK, commands[i]);
		assert_non_null(strstr(r.out, "Usage"));
		itest_run_free(&r);
	}
	for (size_t i = 0; i < sizeof(alloc_subcommands) / sizeof(*alloc_subcommands); i++) {
		cli(&r, "alloc", alloc_subcommands[i], "--help", NULL);
		expect_exit(&r, EXIT_OK, alloc_subcommands[i]);
		assert_non_null(strstr(r.out, "Usage"));
		assert_non_null(strstr(r.out, "alloc transfer ID SEGMENT"));
		assert_non_null(strstr(r.out, "alloc create DEVICE SIZE"));
		assert_non_null(strstr(r.out, "alloc destroy ID"));
		itest_run_free(&r);
	}
	cli(&r, "demo", "--help", NULL);
	assert_non_null(strstr(r.out, "--allocs N"));
	assert_non_null(strstr(r.out, "paging_packets"));
	itest_run_free(&r);
	/* The new filters are documented. */
	cli(&r, "history", "--help", NULL);
	assert_non_null(strstr(r.out, "--allocation ID"));
	assert_non_null(strstr(r.out, "--paging"));
	itest_run_free(&r);
	cli(&r, "moves", "--help", NULL);
	assert_non_null(strstr(r.out, "--allocation ID"));
	assert_non_null(strstr(r.out, "--packet ID"));
	itest_run_free(&r);
	cli(&r, "--version", NULL);
	expect_exit(&r, EXIT_OK, "--version");
	assert_non_null(strstr(r.out, "gpusched"));
	itest_run_free(&r);
}

static void test_usage_errors(void **state)
{
	(void)state;
	/* No daemon listens here: usage errors are found before connecting. */
	const char *url = "--url=ipc:///nonexistent/gpusched-cli-test.sock";
	itest_run r;
	cli(&r, url, "frobnicate", NULL);
	expect_exit(&r, EXIT_USAGE, "frobnicate");
	assert_non_null(strstr(r.err, "frobnicate"));
	itest_run_free(&r);
	cli(&r, url, NULL);
	expect_exit(&r, EXIT_USAGE, "(no command)");
	itest_run_free(&r);
	cli(&r, url, "info", "--frob", NULL);
	expect_exit(&r, EXIT_USAGE, "info --frob");
	itest_run_free(&r);
	cli(&r, url, "submit", "--flags", "Present", NULL);
	expect_exit(&r, EXIT_USAGE, "submit without --node");
	itest_run_free(&r);
	cli(&r, url, "submit", "--node", "1", "--flags", "Bogus", NULL);
	expect_exit(&r, EXIT_USAGE, "submit --flags Bogus");
	itest_run_free(&r);
	cli(&r, url, "history", "--state", "sleeping", NULL);
	expect_exit(&r, EXIT_USAGE, "history --state sleeping");
	itest_run_free(&r);
	cli(&r, url, "history", "--limit", "many", NULL);
	expect_exit(&r, EXIT_USAGE, "history --limit many");
	itest_run_free(&r);

	/* The memory commands check their arguments before connecting too. */
	static const char *const bad[][8] = {
	        {"history", "--allocation", "x"},
	        {"moves", "--limit", "many"},
	        {"moves", "--allocation", "-1"},
	        {"moves", "extra"},
	        {"alloc"},
	        {"alloc", "frob"},
	        {"alloc", "ls", "--limit", "x"},
	        {"alloc", "ls", "7"},
	        {"alloc", "show"},
	        {"alloc", "show", "1", "2"},
	        {"alloc", "show", "1", "--moves", "x"},
	        {"alloc", "resident"},
	        {"alloc", "resident", "1"},
	        {"alloc", "resident", "1", "x"},
	        {"alloc", "evict", "1"},
	        {"alloc", "evict", "1", "2", "--flags", "swizzle"},
	        {"alloc", "evict", "1", "2", "--timeout-ms", "soon"},
	        {"alloc", "transfer", "1"},
	        {"alloc", "transfer", "1", "2", "3"},
	        {"alloc", "transfer", "1", "nowhere"},
	        {"alloc", "transfer", "1", "32"},
	        {"alloc", "transfer", "1", "2", "--flags", "sideways"},
	        {"alloc", "create"},
	        {"alloc", "create", "1"},
	        {"alloc", "create", "1", "2", "3"},
	        {"alloc", "create", "x", "4096"},
	        {"alloc", "create", "1", "0"},
	        {"alloc", "create", "1", "-5"},
	        {"alloc", "create", "1", "12X"},
	        {"alloc", "create", "1", "4096", "--segments", "all"},
	        {"alloc", "create", "1", "4096", "--priority", "urgent"},
	        {"alloc", "create", "1", "4096", "--preference", "1,2,3,4,5,6"},
	        {"alloc", "create", "1", "4096", "--preference", "1:sideways"},
	        {"alloc", "create", "1", "4096", "--preference", "0,1"},
	        {"alloc", "create", "1", "4096", "--frob"},
	        {"alloc", "destroy"},
	        {"alloc", "destroy", "x"},
	        {"alloc", "destroy", "1", "2"},
	        {"demo", "--allocs", "0"},
	        {"demo", "--allocs", "65"},
	        {"demo", "--allocs", "many"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		const char *const *a = bad[i];
		char what[128];
		snprintf(what, sizeof(what), "%s %s %s %s %s", a[0], a[1] ? a[1] : "",
		         a[1] && a[2] ? a[2] : "", a[1] && a[2] && a[3] ? a[3] : "",
		         a[1] && a[2] && a[3] && a[4] ? a[4] : "");
		cli(&r, url, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], NULL);
		expect_exit(&r, EXIT_USAGE, what);
		assert_non_null(strstr(r.err, "Try 'gpusched"));
		itest_run_free(&r);
	}
}

static void test_no_daemon(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpusched-cli-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char url[128];
	snprintf(url, sizeof(url), "--url=ipc://%s/nobody.sock", dir);
	itest_run r;
	cli(&r, url, "info", "--json", NULL);
	expect_exit(&r, EXIT_TRANSPORT, "info without a daemon");
	assert_true(r.err[0] != '\0');
	itest_run_free(&r);
	cli(&r, url, "history", NULL);
	expect_exit(&r, EXIT_TRANSPORT, "history without a daemon");
	itest_run_free(&r);
	assert_int_equal(rmdir(dir), 0);
}

/* ---- against the daemon ---- */

static void test_info_json(void **state)
{
	fx *f = *state;
	itest_run r;
	cli(&r, f->url_opt, "info", "--json", NULL);
	expect_exit(&r, EXIT_OK, "info --json");
	json_t *doc = parse(&r);
	itest_run_free(&r);

	gs_client *c = itest_connect(&f->t, NULL);
	gs_daemon_info *info;
	assert_int_equal(gs_info(c, &info), 0);
	assert_string_equal(str_of(doc, "version"), info->version);
	assert_string_equal(str_of(doc, "tenant"), "default");
	json_t *adapters = json_object_get(doc, "adapters");
	assert_true(json_is_array(adapters));
	assert_int_equal(json_array_size(adapters), info->adapter_count);
	json_t *a = json_array_get(adapters, 0);
	const gs_adapter_info *ai = &info->adapters[0];
	assert_string_equal(str_of(a, "name"), ai->name);
	assert_string_equal(str_of(a, "backend"), ai->backend);
	assert_string_equal(str_of(a, "clock"), "wall");
	assert_int_equal(int_of(a, "max_dma_buffer"), ai->max_dma_buffer);
	json_t *nodes = json_object_get(a, "nodes");
	assert_int_equal(json_array_size(nodes), ai->node_count);
	for (size_t i = 0; i < ai->node_count; i++) {
		json_t *n = json_array_get(nodes, i);
		assert_int_equal(int_of(n, "id"), ai->nodes[i].id);
		assert_string_equal(str_of(n, "name"), ai->nodes[i].name);
		assert_int_equal(json_is_true(json_object_get(n, "paging")), ai->nodes[i].paging);
	}
	json_t *segs = json_object_get(a, "segments");
	assert_int_equal(json_array_size(segs), ai->segment_count);
	for (size_t i = 0; i < ai->segment_count; i++) {
		json_t *s = json_array_get(segs, i);
		assert_int_equal(int_of(s, "id"), ai->segments[i].id);
		assert_string_equal(str_of(s, "kind"), gs_segment_kind_name(ai->segments[i].kind));
		assert_int_equal(int_of(s, "size"), (json_int_t)ai->segments[i].size);
	}
	gs_info_free(info);
	gs_close(c);
	json_decref(doc);

	/* --json as a global option works too. */
	cli(&r, f->url_opt, "--json", "info", NULL);
	expect_exit(&r, EXIT_OK, "--json info");
	json_decref(parse(&r));
	itest_run_free(&r);
}

static void test_demo_json(void **state)
{
	fx *f = *state;
	itest_run r;
	cli(&r, f->url_opt, "demo", "--packets", "32", "--seed", "7", "--json", NULL);
	expect_exit(&r, EXIT_OK, "demo --packets 32 --json");
	json_t *doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(int_of(doc, "packets_submitted"), 32);
	assert_int_equal(int_of(doc, "packets_completed"), int_of(doc, "packets_submitted"));
	assert_true(int_of(doc, "checksums_total") > 0);
	assert_int_equal(int_of(doc, "checksums_ok"), int_of(doc, "checksums_total"));
	assert_int_equal(int_of(doc, "bytes_mismatched"), 0);
	assert_true(int_of(doc, "bytes_verified") > 0);
	assert_int_equal(int_of(doc, "seed"), 7);
	assert_true(json_is_true(json_object_get(doc, "ok")));
	json_decref(doc);

	/* The daemon saw the packets. */
	gs_client *c = itest_connect(&f->t, NULL);
	gs_daemon_stats s;
	assert_int_equal(gs_stats(c, &s), 0);
	assert_true(s.packets_completed >= 32);
	assert_int_equal(s.packets_faulted, 0);
	gs_close(c);
}

static void test_submit_json(void **state)
{
	fx *f = *state;
	itest_run r;
	cli(&r, f->url_opt, "submit", "--node", "1", "--flags", "Present,NullRendering", "--json",
	    "--wait", NULL);
	expect_exit(&r, EXIT_OK, "submit --json --wait");
	json_t *doc = parse(&r);
	itest_run_free(&r);
	json_int_t packet = int_of(doc, "packet_id");
	assert_true(packet > 0);
	assert_true(int_of(doc, "fence") > 0);
	assert_int_equal(int_of(doc, "node"), 1);
	assert_int_equal(int_of(doc, "submit_flags"), 10);
	assert_string_equal(str_of(doc, "state"), "COMPLETED");
	json_t *names = json_object_get(doc, "submit_flag_names");
	assert_int_equal(json_array_size(names), 2);
	json_decref(doc);

	/* The same packet in the daemon's record (events of a finished packet are durable
	 * once a later submission is acknowledged: the next command submits one). */
	cli(&r, f->url_opt, "submit", "--node", "0", "--spin-us", "1000", NULL);
	expect_exit(&r, EXIT_OK, "submit --spin-us 1000");
	assert_non_null(strstr(r.out, "packet "));
	itest_run_free(&r);
	char id[32];
	snprintf(id, sizeof(id), "%" PRId64, (int64_t)packet);
	cli(&r, f->url_opt, "events", id, "--json", NULL);
	expect_exit(&r, EXIT_OK, "events --json");
	doc = parse(&r);
	itest_run_free(&r);
	static const char *const life[] = {"SUBMITTED", "READY", "RUNNING", "COMPLETED"};
	assert_int_equal(json_array_size(doc), 4);
	for (size_t i = 0; i < 4; i++) {
		json_t *e = json_array_get(doc, i);
		assert_int_equal(int_of(e, "packet_id"), packet);
		assert_string_equal(str_of(e, "state"), life[i]);
	}
	json_decref(doc);

	/* Daemon refusals exit 1 with the status named. */
	cli(&r, f->url_opt, "submit", "--node", "1", "--flags", "Paging", NULL);
	expect_exit(&r, EXIT_DAEMON, "submit --flags Paging");
	assert_non_null(strstr(r.err, "FLAGS_NOT_ALLOWED"));
	itest_run_free(&r);
	cli(&r, f->url_opt, "submit", "--node", "9", NULL);
	expect_exit(&r, EXIT_DAEMON, "submit --node 9");
	assert_non_null(strstr(r.err, "CTX_BAD_NODE"));
	itest_run_free(&r);
	cli(&r, f->url_opt, "events", "999999", NULL);
	expect_exit(&r, EXIT_DAEMON, "events 999999");
	itest_run_free(&r);
}

static void test_history_json(void **state)
{
	fx *f = *state;
	itest_run r;
	/* Seven packets, each in its own context: the CLI's submit makes a fresh one. */
	json_int_t last = 0;
	for (int i = 0; i < 7; i++) {
		cli(&r, f->url_opt, "submit", "--node", i % 2 ? "1" : "0", "--flags",
		    i % 2 ? "Present" : "0", "--json", NULL);
		expect_exit(&r, EXIT_OK, "submit --json");
		json_t *doc = parse(&r);
		last = int_of(doc, "packet_id");
		json_decref(doc);
		itest_run_free(&r);
	}
	/* A later acknowledged submission makes the last completion durable. */
	gs_client *c = itest_connect(&f->t, NULL);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "cli", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 2, 2);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	uint64_t mine = itest_submit_wait(c, ctx, &buf, 0);
	gs_dmabuf_free(&buf);
	itest_audit_barrier(c, ctx);

	cli(&r, f->url_opt, "history", "--json", "--limit", "5", NULL);
	expect_exit(&r, EXIT_OK, "history --json --limit 5");
	json_t *doc = parse(&r);
	itest_run_free(&r);
	assert_true(json_is_array(doc));
	assert_int_equal(json_array_size(doc), 5);
	static const char *const keys[] = {
	        "packet_id",    "context",           "device",       "node",        "fence",
	        "submit_flags", "submit_flag_names", "patch_flags",  "state",       "submitted_ns",
	        "ready_ns",     "started_ns",        "completed_ns", "preemptions", "resubmissions",
	        "dma_size",     "allocation_count",  "patch_count",  "result",      "tenant"};
	/* Newest first: by submission in the file (wire ids are opaque, not ordered). */
	uint64_t prev = UINT64_MAX;
	for (size_t i = 0; i < 5; i++) {
		json_t *o = json_array_get(doc, i);
		for (size_t k = 0; k < sizeof(keys) / sizeof(*keys); k++)
			if (!json_object_get(o, keys[k]))
				fail_msg("history record %zu has no \"%s\"", i, keys[k]);
		uint64_t in_file =
		        itest_wire_unmap(f->t.db, "packet", 0, 0, (uint64_t)int_of(o, "packet_id"));
		assert_true(in_file < prev);
		prev = in_file;
		assert_string_equal(str_of(o, "tenant"), "default");
	}
	/* Newest first: the barrier, my packet, then the CLI's last one. */
	assert_int_equal(int_of(json_array_get(doc, 1), "packet_id"), (json_int_t)mine);
	json_t *cli_last = json_array_get(doc, 2);
	assert_int_equal(int_of(cli_last, "packet_id"), last);
	assert_string_equal(str_of(cli_last, "state"), "COMPLETED");
	assert_int_equal(int_of(cli_last, "node"), 0);
	assert_int_equal(int_of(cli_last, "submit_flags"), 0);
	json_t *older = json_array_get(doc, 3);
	assert_int_equal(int_of(older, "submit_flags"), GS_SUBMIT_PRESENT);
	assert_int_equal(int_of(older, "node"), 1);
	json_decref(doc);

	/* Filters pass through. */
	char ctxs[32];
	snprintf(ctxs, sizeof(ctxs), "%" PRIu64, ctx);
	cli(&r, f->url_opt, "history", "--json", "--context", ctxs, NULL);
	expect_exit(&r, EXIT_OK, "history --context");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(json_array_size(doc), 2);
	json_decref(doc);
	cli(&r, f->url_opt, "history", "--json", "--node", "1", "--state", "completed", NULL);
	expect_exit(&r, EXIT_OK, "history --node 1 --state completed");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(json_array_size(doc), 3);
	json_decref(doc);

	/* By flags, by time, oldest first, with a cursor. */
	cli(&r, f->url_opt, "history", "--json", "--flags", "Present", NULL);
	expect_exit(&r, EXIT_OK, "history --flags Present");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(json_array_size(doc), 3);
	json_decref(doc);
	cli(&r, f->url_opt, "history", "--json", "--until", "1d", NULL);
	expect_exit(&r, EXIT_OK, "history --until 1d");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(json_array_size(doc), 0); /* nothing is a day old */
	json_decref(doc);
	cli(&r, f->url_opt, "history", "--json", "--since", "1h", "--until", "now",
	    "--oldest-first", "--limit", "3", NULL);
	expect_exit(&r, EXIT_OK, "history --since 1h --oldest-first");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(json_array_size(doc), 3);
	json_int_t oldest = int_of(json_array_get(doc, 0), "packet_id");
	json_int_t third = int_of(json_array_get(doc, 2), "packet_id");
	assert_true(itest_wire_unmap(f->t.db, "packet", 0, 0, (uint64_t)oldest) <
	            itest_wire_unmap(f->t.db, "packet", 0, 0, (uint64_t)third));
	assert_true(int_of(json_array_get(doc, 0), "submitted_ns") <=
	            int_of(json_array_get(doc, 2), "submitted_ns"));
	json_decref(doc);
	char cursor[32];
	snprintf(cursor, sizeof(cursor), "%" PRId64, (int64_t)third);
	cli(&r, f->url_opt, "history", "--json", "--oldest-first", "--after", cursor, "--limit",
	    "1", NULL);
	expect_exit(&r, EXIT_OK, "history --after");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(json_array_size(doc), 1);
	assert_true(itest_wire_unmap(f->t.db, "packet", 0, 0,
	                             (uint64_t)int_of(json_array_get(doc, 0), "packet_id")) >
	            itest_wire_unmap(f->t.db, "packet", 0, 0, (uint64_t)third));
	json_decref(doc);
	cli(&r, f->url_opt, "history", "--since", "yesterday-ish", NULL);
	expect_exit(&r, EXIT_USAGE, "history --since yesterday-ish");
	itest_run_free(&r);
	cli(&r, f->url_opt, "history", "--since", "now", "--until", "1h", NULL);
	expect_exit(&r, EXIT_USAGE, "history with an empty time range");
	itest_run_free(&r);

	/* explain: the packet, its events from SUBMITTED on, waited + ran. */
	char pid[32];
	snprintf(pid, sizeof(pid), "%" PRIu64, mine);
	cli(&r, f->url_opt, "explain", pid, "--json", NULL);
	expect_exit(&r, EXIT_OK, "explain --json");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(int_of(json_object_get(doc, "packet"), "packet_id"), (json_int_t)mine);
	json_t *evs = json_object_get(doc, "events");
	assert_true(json_array_size(evs) >= 4);
	assert_string_equal(str_of(json_array_get(evs, 0), "state"), "SUBMITTED");
	assert_int_equal(int_of(json_array_get(evs, 0), "offset_ns"), 0);
	assert_true(int_of(doc, "ran_ns") >= 0 && int_of(doc, "waited_ns") >= 0);
	json_decref(doc);
	cli(&r, f->url_opt, "explain", pid, NULL);
	expect_exit(&r, EXIT_OK, "explain");
	assert_non_null(strstr(r.out, "COMPLETED"));
	assert_non_null(strstr(r.out, "waited"));
	itest_run_free(&r);
	cli(&r, f->url_opt, "explain", "999999", NULL);
	expect_exit(&r, EXIT_DAEMON, "explain of an unknown packet");
	assert_non_null(strstr(r.err, "NOT_FOUND"));
	itest_run_free(&r);

	/* Plain output has a header and one line per packet. */
	cli(&r, f->url_opt, "history", "--limit", "2", NULL);
	expect_exit(&r, EXIT_OK, "history --limit 2");
	assert_non_null(strstr(r.out, "PACKET"));
	itest_run_free(&r);

	/* stats --json carries the counters. */
	cli(&r, f->url_opt, "stats", "--json", NULL);
	expect_exit(&r, EXIT_OK, "stats --json");
	doc = parse(&r);
	itest_run_free(&r);
	gs_daemon_stats s;
	assert_int_equal(gs_stats(c, &s), 0);
	assert_int_equal(int_of(doc, "packets_submitted"), (json_int_t)s.packets_submitted);
	assert_int_equal(int_of(doc, "packets_completed"), (json_int_t)s.packets_completed);
	json_decref(doc);
	gs_close(c);
}

static json_t *cli_json(fx *f, const char *what, const char *a1, const char *a2, const char *a3,
                        const char *a4, const char *a5)
{
	itest_run r;
	cli(&r, f->url_opt, "--json", a1, a2, a3, a4, a5, NULL);
	expect_exit(&r, EXIT_OK, what);
	json_t *doc = parse(&r);
	itest_run_free(&r);
	return doc;
}

/* Every move object carries the documented keys. */
static void check_move_keys(json_t *m)
{
	static const char *const keys[] = {
	        "seq",       "time_ns",      "allocation",     "device",
	        "kind",      "from_segment", "from_offset",    "to_segment",
	        "to_offset", "bytes",        "transfer_flags", "transfer_flag_names",
	        "pieces",    "packet",       "for_packet",     "reason"};
	for (size_t k = 0; k < sizeof(keys) / sizeof(*keys); k++)
		if (!json_object_get(m, keys[k]))
			fail_msg("move has no \"%s\"", keys[k]);
}

/* moves, alloc ls/show/resident/evict/transfer and history --allocation/--paging. The daemon
 * side of the paging requests and of the allocation list may answer UNIMPLEMENTED (a later
 * issue): then the CLI must say so with exit 1, and the rest is checked when served. */
static void test_memory_commands(void **state)
{
	fx *f = *state;
	itest_run r;
	gs_client *c = itest_connect(&f->t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "cli-mem", &dev), 0);
	gs_allocation_placement pl;
	itest_alloc(c, dev, 65536, 0, 0, &pl);
	char dev_s[32], id_s[32];
	snprintf(dev_s, sizeof(dev_s), "%" PRIu64, dev);
	snprintf(id_s, sizeof(id_s), "%" PRIu64, pl.allocation);

	/* moves: an array (the daemon may or may not record PLACE moves at creation), each
	 * move the tenant's and, filtered, of the allocation asked for. */
	json_t *doc = cli_json(f, "moves --json", "moves", NULL, NULL, NULL, NULL);
	assert_true(json_is_array(doc));
	for (size_t i = 0; i < json_array_size(doc); i++)
		check_move_keys(json_array_get(doc, i));
	json_decref(doc);
	doc = cli_json(f, "moves --allocation", "moves", "--allocation", id_s, "--limit", "5");
	assert_true(json_is_array(doc));
	assert_true(json_array_size(doc) <= 5);
	for (size_t i = 0; i < json_array_size(doc); i++)
		assert_int_equal(int_of(json_array_get(doc, i), "allocation"),
		                 (json_int_t)pl.allocation);
	json_decref(doc);
	doc = cli_json(f, "moves --allocation (none)", "moves", "--allocation", "999999", NULL,
	               NULL);
	assert_int_equal(json_array_size(doc), 0);
	json_decref(doc);
	cli(&r, f->url_opt, "moves", "--packet", "999999", NULL);
	expect_exit(&r, EXIT_OK, "moves --packet");
	assert_non_null(strstr(r.out, "SEQ"));
	assert_non_null(strstr(r.out, "(no moves)"));
	itest_run_free(&r);

	/* history with the new filters answers (a fresh allocation has no render packets). */
	doc = cli_json(f, "history --allocation", "history", "--allocation", "999999", NULL, NULL);
	assert_int_equal(json_array_size(doc), 0);
	json_decref(doc);
	doc = cli_json(f, "history --paging", "history", "--paging", NULL, NULL, NULL);
	assert_true(json_is_array(doc));
	for (size_t i = 0; i < json_array_size(doc); i++)
		assert_true(int_of(json_array_get(doc, i), "submit_flags") &
		            (GS_SUBMIT_PAGING | GS_SUBMIT_CONTEXT_SWITCH));
	json_decref(doc);

	/* alloc show: the status with the new fields and its recent moves. */
	doc = cli_json(f, "alloc show --json", "alloc", "show", id_s, NULL, NULL);
	assert_int_equal(int_of(doc, "allocation"), (json_int_t)pl.allocation);
	assert_int_equal(int_of(doc, "device"), (json_int_t)dev);
	assert_int_equal(int_of(doc, "size"), 65536);
	assert_int_equal(int_of(doc, "pinned"), 0);
	assert_true(int_of(doc, "moves") >= 0);
	assert_true(json_is_boolean(json_object_get(doc, "moving")));
	assert_true(int_of(doc, "last_used_ns") >= 0);
	assert_string_equal(str_of(doc, "priority_name"), "NORMAL");
	json_t *recent = json_object_get(doc, "recent_moves");
	assert_true(json_is_array(recent));
	for (size_t i = 0; i < json_array_size(recent); i++) {
		check_move_keys(json_array_get(recent, i));
		assert_int_equal(int_of(json_array_get(recent, i), "allocation"),
		                 (json_int_t)pl.allocation);
	}
	json_decref(doc);
	cli(&r, f->url_opt, "alloc", "show", id_s, NULL);
	expect_exit(&r, EXIT_OK, "alloc show");
	assert_non_null(strstr(r.out, "last used"));
	assert_non_null(strstr(r.out, "recent moves"));
	itest_run_free(&r);
	cli(&r, f->url_opt, "alloc", "show", "999999", NULL);
	expect_exit(&r, EXIT_DAEMON, "alloc show 999999");
	assert_non_null(strstr(r.err, "NOT_FOUND"));
	itest_run_free(&r);

	/* alloc ls, as served. */
	gs_allocation_status *list;
	size_t n;
	int rv = gs_allocation_list(c, dev, false, 0, 0, &list, &n);
	cli(&r, f->url_opt, "--json", "alloc", "ls", "--device", dev_s, NULL);
	if (rv == GS_STATUS_UNIMPLEMENTED) {
		expect_exit(&r, EXIT_DAEMON, "alloc ls (not served)");
		assert_non_null(strstr(r.err, "UNIMPLEMENTED"));
		itest_run_free(&r);
	} else {
		assert_int_equal(rv, 0);
		expect_exit(&r, EXIT_OK, "alloc ls --device --json");
		doc = parse(&r);
		itest_run_free(&r);
		assert_int_equal(json_array_size(doc), n);
		assert_int_equal(n, 1);
		assert_int_equal(int_of(json_array_get(doc, 0), "allocation"),
		                 (json_int_t)pl.allocation);
		assert_int_equal(int_of(json_array_get(doc, 0), "size"), 65536);
		json_decref(doc);
		gs_allocation_list_free(list);
		cli(&r, f->url_opt, "alloc", "ls", NULL);
		expect_exit(&r, EXIT_OK, "alloc ls");
		assert_non_null(strstr(r.out, "HANDLE"));
		assert_non_null(strstr(r.out, id_s));
		itest_run_free(&r);
	}

	/* resident / evict / transfer, as served. */
	gs_paging_result pr;
	rv = gs_make_resident(c, dev, &pl.allocation, 1, &pr);
	cli(&r, f->url_opt, "--json", "alloc", "resident", dev_s, id_s, "--wait", NULL);
	if (rv == GS_STATUS_UNIMPLEMENTED) {
		expect_exit(&r, EXIT_DAEMON, "alloc resident (not served)");
		assert_non_null(strstr(r.err, "UNIMPLEMENTED"));
		itest_run_free(&r);
	} else {
		assert_int_equal(rv, 0);
		expect_exit(&r, EXIT_OK, "alloc resident --wait --json");
		doc = parse(&r);
		itest_run_free(&r);
		assert_true(int_of(doc, "paging_fence") >= (json_int_t)pr.paging_fence);
		assert_int_equal(int_of(doc, "paging_sync"), (json_int_t)pr.paging_sync);
		assert_true(int_of(doc, "value") >= int_of(doc, "paging_fence"));
		json_decref(doc);
		cli(&r, f->url_opt, "alloc", "evict", dev_s, id_s, "--wait", NULL);
		expect_exit(&r, EXIT_OK, "alloc evict --wait");
		assert_non_null(strstr(r.out, "paging fence"));
		itest_run_free(&r);
		char seg[16];
		snprintf(seg, sizeof(seg), "%" PRIu32, lay.memory_segment);
		cli(&r, f->url_opt, "alloc", "transfer", id_s, seg, "--wait", NULL);
		expect_exit(&r, EXIT_OK, "alloc transfer --wait");
		itest_run_free(&r);
		gs_allocation_status st;
		assert_int_equal(gs_allocation_query(c, pl.allocation, &st), 0);
		assert_true(st.resident);
		assert_int_equal(st.segment, lay.memory_segment);
		cli(&r, f->url_opt, "alloc", "transfer", id_s, "system", "--wait", NULL);
		expect_exit(&r, EXIT_OK, "alloc transfer system --wait");
		itest_run_free(&r);
		assert_int_equal(gs_allocation_query(c, pl.allocation, &st), 0);
		assert_false(st.resident);
		/* The moves just made are in the record, newest first. */
		doc = cli_json(f, "moves after paging", "moves", "--allocation", id_s, NULL, NULL);
		assert_true(json_array_size(doc) >= 2);
		assert_true(itest_wire_unmap(f->t.db, "seq", 0, 0,
		                             (uint64_t)int_of(json_array_get(doc, 0), "seq")) >
		            itest_wire_unmap(f->t.db, "seq", 0, 0,
		                             (uint64_t)int_of(json_array_get(doc, 1), "seq")));
		json_decref(doc);
	}
	assert_int_equal(gs_device_destroy(c, dev), 0);
	gs_close(c);
}

/* Runs the CLI and parses its one JSON document, exit 0 required. */
static json_t *cli_json_argv(fx *f, const char *what, const char *const *args)
{
	char *argv[24];
	int n = 0;
	argv[n++] = (char *)GS_CLI_PATH;
	argv[n++] = f->url_opt;
	argv[n++] = (char *)"--json";
	for (; *args && n < 23; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	itest_run r;
	itest_run_argv(argv, CLI_TIMEOUT_MS, &r);
	expect_exit(&r, EXIT_OK, what);
	json_t *doc = parse(&r);
	itest_run_free(&r);
	return doc;
}

/* alloc create and destroy: what the CLI asked for is what the daemon holds, the allocation
 * outlives the CLI, and the daemon's refusals exit 1. */
static void test_alloc_create_destroy(void **state)
{
	fx *f = *state;
	itest_run r;
	gs_client *c = itest_connect(&f->t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "cli-create", &dev), 0);
	char dev_s[32], set_s[32], pref_s[32], raw_s[32];
	snprintf(dev_s, sizeof(dev_s), "%" PRIu64, dev);

	/* Defaults: every segment, no preference, NORMAL, no flags; size with a suffix. */
	const char *plain[] = {"alloc", "create", dev_s, "64K", NULL};
	json_t *doc = cli_json_argv(f, "alloc create DEV 64K", plain);
	uint64_t id = (uint64_t)int_of(doc, "allocation");
	assert_true(id > 0);
	assert_int_equal(int_of(doc, "device"), (json_int_t)dev);
	assert_int_equal(int_of(doc, "size"), 65536);
	assert_true(json_is_true(json_object_get(doc, "resident")));
	gs_allocation_status st;
	assert_int_equal(gs_allocation_query(c, id, &st), 0);
	assert_int_equal(st.device, dev);
	assert_int_equal(st.size, 65536);
	assert_true(st.resident);
	assert_int_equal(int_of(doc, "segment"), st.segment);
	assert_int_equal(int_of(doc, "offset"), (json_int_t)st.offset);
	assert_int_equal(int_of(doc, "address"), (json_int_t)st.address);
	assert_int_equal(st.priority, GS_ALLOC_PRIORITY_NORMAL);
	assert_int_equal(st.segment_preference, 0);
	assert_int_equal(st.flags, 0);
	json_decref(doc);

	/* Every option: the aperture only, preferred top-down, HIGH, tiled and display. */
	snprintf(set_s, sizeof(set_s), "0x%x", 1u << lay.aperture_segment);
	snprintf(pref_s, sizeof(pref_s), "%u:down", lay.aperture_segment);
	const char *full[] = {"alloc",   "create",       dev_s,  "8192",       "--segments",
	                      set_s,     "--preference", pref_s, "--priority", "high",
	                      "--tiled", "--display",    NULL};
	doc = cli_json_argv(f, "alloc create (every option)", full);
	uint64_t id2 = (uint64_t)int_of(doc, "allocation");
	assert_int_equal(int_of(doc, "segment"), lay.aperture_segment);
	json_decref(doc);
	assert_int_equal(gs_allocation_query(c, id2, &st), 0);
	gs_segpref want = {{0}};
	want.segment[0] = (uint8_t)lay.aperture_segment;
	want.direction[0] = 1;
	assert_int_equal(st.supported_segment_set, 1u << lay.aperture_segment);
	assert_int_equal(st.segment_preference, gs_segpref_encode(&want));
	assert_int_equal(st.priority, GS_ALLOC_PRIORITY_HIGH);
	assert_int_equal(st.flags, GS_ALLOC_TILED | GS_ALLOC_DISPLAY);
	assert_int_equal(st.segment, lay.aperture_segment);

	/* A raw preference Value and priority number, plain output. */
	snprintf(raw_s, sizeof(raw_s), "%u", gs_segpref_encode(&want));
	cli(&r, f->url_opt, "alloc", "create", dev_s, "4096", "--preference", raw_s, "--priority",
	    "0x50000000", NULL);
	expect_exit(&r, EXIT_OK, "alloc create --preference RAW");
	unsigned long long id3 = 0, dev3 = 0;
	assert_int_equal(sscanf(r.out, "allocation %llu (device %llu", &id3, &dev3), 2);
	assert_int_equal(dev3, dev);
	assert_non_null(strstr(r.out, "segment "));
	assert_non_null(strstr(r.out, " offset 0x"));
	itest_run_free(&r);
	assert_int_equal(gs_allocation_query(c, id3, &st), 0);
	assert_int_equal(st.segment_preference, gs_segpref_encode(&want));
	assert_int_equal(st.priority, GS_ALLOC_PRIORITY_LOW);

	/* The daemon's refusals: unknown device, a preference outside the supported set. */
	cli(&r, f->url_opt, "alloc", "create", "999999", "4096", NULL);
	expect_exit(&r, EXIT_DAEMON, "alloc create on an unknown device");
	assert_non_null(strstr(r.err, "NOT_FOUND"));
	itest_run_free(&r);
	snprintf(set_s, sizeof(set_s), "0x%x", 1u << lay.memory_segment);
	cli(&r, f->url_opt, "alloc", "create", dev_s, "4096", "--segments", set_s, "--preference",
	    pref_s, NULL);
	expect_exit(&r, EXIT_DAEMON, "alloc create --preference outside --segments");
	assert_non_null(strstr(r.err, "SEGMENT_PREFERENCE"));
	itest_run_free(&r);

	/* They are listed, and destroy removes them one at a time. */
	doc = cli_json(f, "alloc ls --device", "alloc", "ls", "--device", dev_s, NULL);
	assert_int_equal(json_array_size(doc), 3);
	json_decref(doc);
	char id_s[32];
	snprintf(id_s, sizeof(id_s), "%" PRIu64, id);
	cli(&r, f->url_opt, "alloc", "destroy", id_s, NULL);
	expect_exit(&r, EXIT_OK, "alloc destroy");
	assert_non_null(strstr(r.out, "destroyed"));
	itest_run_free(&r);
	assert_int_equal(gs_allocation_query(c, id, &st), GS_STATUS_NOT_FOUND);
	cli(&r, f->url_opt, "alloc", "destroy", id_s, NULL);
	expect_exit(&r, EXIT_DAEMON, "alloc destroy (again)");
	assert_non_null(strstr(r.err, "NOT_FOUND"));
	itest_run_free(&r);
	snprintf(id_s, sizeof(id_s), "%" PRIu64, id2);
	doc = cli_json(f, "alloc destroy --json", "alloc", "destroy", id_s, NULL, NULL);
	assert_true(json_is_true(json_object_get(doc, "ok")));
	json_decref(doc);
	assert_int_equal(gs_allocation_query(c, id2, &st), GS_STATUS_NOT_FOUND);
	assert_int_equal(gs_allocation_query(c, id3, &st), 0);
	assert_int_equal(gs_device_destroy(c, dev), 0);
	gs_close(c);
}

/* Over-commit from the CLI: once the 1 MiB memory segment and the aperture are full, a new
 * allocation is created in system memory and says so. */
static void test_alloc_create_overcommit(void **state)
{
	fx *f = *state;
	itest_run r;
	gs_client *c = itest_connect(&f->t, NULL);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "cli-overcommit", &dev), 0);
	char dev_s[32];
	snprintf(dev_s, sizeof(dev_s), "%" PRIu64, dev);
	const char *args[] = {"alloc", "create", dev_s, "512K", NULL};
	int resident = 0;
	for (int i = 0; i < 4; i++) {
		json_t *doc = cli_json_argv(f, "alloc create 512K", args);
		assert_true(json_is_true(json_object_get(doc, "resident")));
		assert_true(int_of(doc, "segment") > 0);
		resident++;
		json_decref(doc);
	}
	json_t *doc = cli_json_argv(f, "alloc create 512K (over-commit, json)", args);
	assert_false(json_is_true(json_object_get(doc, "resident")));
	assert_int_equal(int_of(doc, "segment"), 0);
	gs_allocation_status st;
	assert_int_equal(gs_allocation_query(c, (uint64_t)int_of(doc, "allocation"), &st), 0);
	assert_false(st.resident);
	json_decref(doc);
	cli(&r, f->url_opt, "alloc", "create", dev_s, "512K", NULL);
	expect_exit(&r, EXIT_OK, "alloc create 512K (over-commit)");
	assert_non_null(strstr(r.out, "system memory (not resident)"));
	itest_run_free(&r);
	assert_int_equal(resident, 4);
	assert_int_equal(gs_device_destroy(c, dev), 0);
	gs_close(c);
}

/* The demo with 12 allocations of 256 KiB (3 MiB) on 2 MiB of segments: every byte and
 * checksum still verifies, and the paging it reports is the paging the daemon recorded. */
static void test_demo_overcommit(void **state)
{
	fx *f = *state;
	const char *args[] = {"demo",   "--allocs", "12", "--alloc-size",
	                      "262144", "--seed",   "11", NULL};
	json_t *doc = cli_json_argv(f, "demo --allocs 12 --alloc-size 262144", args);
	assert_true(json_is_true(json_object_get(doc, "ok")));
	assert_int_equal(int_of(doc, "packets_completed"), int_of(doc, "packets_submitted"));
	assert_int_equal(int_of(doc, "checksums_ok"), int_of(doc, "checksums_total"));
	assert_int_equal(int_of(doc, "bytes_mismatched"), 0);
	assert_true(int_of(doc, "bytes_verified") >= 12 * 262144);
	assert_int_equal(int_of(doc, "allocations"), 12);
	assert_int_equal(int_of(doc, "alloc_size"), 262144);
	assert_int_equal(int_of(doc, "segment_bytes"), SMALL_MEMORY + SMALL_APERTURE);
	json_int_t paging = int_of(doc, "paging_packets");
	json_int_t paged = int_of(doc, "bytes_paged");
	assert_true(paging > 0);
	assert_true(paged >= 262144);
	json_decref(doc);

	/* The demo's device was the only one: its count is every Paging packet of the record. */
	gs_client *c = itest_connect(&f->t, NULL);
	gs_history_filter hf = {.paging = true, .limit = 10000};
	gs_packet_record *recs;
	size_t n;
	assert_int_equal(gs_history(c, &hf, &recs, &n), 0);
	json_int_t seen = 0;
	for (size_t i = 0; i < n; i++)
		seen += (recs[i].submit_flags & GS_SUBMIT_PAGING) != 0;
	gs_history_free(recs, n);
	assert_int_equal(seen, paging);
	gs_daemon_stats s;
	assert_int_equal(gs_stats(c, &s), 0);
	assert_int_equal(s.packets_faulted, 0);
	assert_int_equal(s.packets_cancelled, 0);
	assert_int_equal(s.allocations, 0); /* the demo destroyed what it made */
	gs_close(c);

	/* The plain output says it too. */
	itest_run r;
	cli(&r, f->url_opt, "demo", "--allocs", "12", "--alloc-size", "262144", "--packets", "16",
	    NULL);
	expect_exit(&r, EXIT_OK, "demo --allocs 12 (plain)");
	assert_non_null(strstr(r.out, "12 working allocations"));
	assert_non_null(strstr(r.out, "over-committed"));
	assert_non_null(strstr(r.out, "paging packet"));
	assert_non_null(strstr(r.out, "demo: OK"));
	itest_run_free(&r);
}

/* audit verify on the running daemon's file: OK with its records; a copy edited with the
 * sqlite3 shell is a mismatch (exit 4) naming the edited row. */
static void test_audit_verify(void **state)
{
	fx *f = *state;
	itest_run r;
	cli(&r, f->url_opt, "demo", "--packets", "16", NULL);
	expect_exit(&r, EXIT_OK, "demo");
	itest_run_free(&r);
	gs_client *c = itest_connect(&f->t, NULL);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "verify", &dev), 0);
	itest_audit_barrier(c, itest_context(c, dev, 0, 2));
	gs_close(c);

	/* usage --by node: the same sums as the audit's usage_by_node view, percentiles in
	 * order, utilisation the engine time over the window. */
	cli(&r, f->url_opt, "usage", "--by", "node", "--json", NULL);
	expect_exit(&r, EXIT_OK, "usage --by node --json");
	json_t *doc = parse(&r);
	itest_run_free(&r);
	json_t *rows = json_object_get(doc, "rows");
	assert_true(json_array_size(rows) >= 2);
	json_int_t window = int_of(doc, "window_ns");
	assert_true(window > 0);
	for (size_t i = 0; i < json_array_size(rows); i++) {
		json_t *row = json_array_get(rows, i);
		json_int_t node = int_of(row, "node");
		assert_int_equal(
		        int_of(row, "packets"),
		        itest_audit_int(f->t.db,
		                        "SELECT packets FROM usage_by_node WHERE node = %d",
		                        (int)node));
		assert_int_equal(
		        int_of(row, "busy_ns"),
		        itest_audit_int(f->t.db,
		                        "SELECT busy_ns FROM usage_by_node WHERE node = %d",
		                        (int)node));
		assert_true(int_of(row, "wait_p50_ns") <= int_of(row, "wait_p95_ns"));
		assert_true(int_of(row, "wait_p95_ns") <= int_of(row, "wait_p99_ns"));
		assert_true(int_of(row, "run_p50_ns") <= int_of(row, "run_p99_ns"));
		double util = json_real_value(json_object_get(row, "utilisation"));
		assert_true(util >= 0.0 && util <= 1.0);
		assert_true(fabs(util - (double)int_of(row, "busy_ns") / (double)window) < 1e-9);
	}
	json_decref(doc);
	cli(&r, f->url_opt, "usage", NULL);
	expect_exit(&r, EXIT_OK, "usage");
	assert_non_null(strstr(r.out, "default"));
	itest_run_free(&r);
	cli(&r, f->url_opt, "usage", "--by", "engine", NULL);
	expect_exit(&r, EXIT_USAGE, "usage --by engine");
	itest_run_free(&r);

	/* trace: Chrome trace-event JSON; one run slice per RUNNING event of the audit, each
	 * flow start with its finish, slices placed at the events' times. */
	char trace_path[400];
	snprintf(trace_path, sizeof(trace_path), "%s.trace.json", f->t.db);
	cli(&r, f->url_opt, "trace", "-o", trace_path, "--json", NULL);
	expect_exit(&r, EXIT_OK, "trace -o FILE --json");
	doc = parse(&r);
	itest_run_free(&r);
	json_int_t nruns = itest_audit_int(f->t.db, "SELECT count(*) FROM packet_event_log"
	                                            " WHERE state = 3 AND tenant = 'default'");
	assert_int_equal(int_of(doc, "packets"),
	                 itest_audit_int(f->t.db, "SELECT count(*) FROM packets"
	                                          " WHERE tenant = 'default'"));
	json_decref(doc);
	json_error_t jerr;
	json_t *trace = json_load_file(trace_path, 0, &jerr);
	if (!trace)
		fail_msg("trace is not JSON: %s", jerr.text);
	json_t *tev = json_object_get(trace, "traceEvents");
	json_int_t epoch = int_of(json_object_get(trace, "otherData"), "epoch_ns");
	json_int_t runs = 0, starts = 0, finishes = 0;
	for (size_t i = 0; i < json_array_size(tev); i++) {
		json_t *e = json_array_get(tev, i);
		const char *ph = str_of(e, "ph");
		/* Perfetto keeps 32 bits of a thread id (issue 27): tracks are numbered. */
		json_t *tid = json_object_get(e, "tid");
		if (tid)
			assert_true(json_integer_value(tid) >= 0 &&
			            json_integer_value(tid) < ((json_int_t)1 << 31));
		if (!strcmp(ph, "s"))
			starts++;
		if (!strcmp(ph, "f"))
			finishes++;
		if (strcmp(ph, "X") != 0 || !strcmp(str_of(e, "cat"), "packet"))
			continue;
		runs++;
		/* This run is one of the packet's RUNNING events, at the same time. Ids are
		 * strings: a JSON number above 2^53 is rounded by JavaScript and jq. */
		uint64_t pkt = strtoull(str_of(json_object_get(e, "args"), "packet"), NULL, 10);
		double ts = json_number_value(json_object_get(e, "ts"));
		json_int_t at = epoch + (json_int_t)(ts * 1000.0 + 0.5);
		assert_true(
		        itest_audit_int(f->t.db,
		                        "SELECT count(*) FROM packet_events WHERE packet = %lld"
		                        " AND state = 3 AND abs(time_ns - %lld) <= 1",
		                        (long long)itest_wire_unmap(f->t.db, "packet", 0, 0, pkt),
		                        (long long)at) >= 1);
	}
	assert_int_equal(runs, nruns);
	assert_true(starts > 0);
	assert_int_equal(starts, finishes);
	json_decref(trace);
	unlink(trace_path);

	/* timeline: an SVG with one box per run of the audit; the HTML page rendered by a real
	 * browser (headless Chromium) is a picture, not a blank page. */
	char svg_path[400], html_path[400], png_path[400], check[2400];
	snprintf(svg_path, sizeof(svg_path), "%s.timeline.svg", f->t.db);
	snprintf(html_path, sizeof(html_path), "%s.timeline.html", f->t.db);
	snprintf(png_path, sizeof(png_path), "%s.timeline.png", f->t.db);
	cli(&r, f->url_opt, "timeline", "-o", svg_path, "--json", NULL);
	expect_exit(&r, EXIT_OK, "timeline -o FILE.svg --json");
	doc = parse(&r);
	itest_run_free(&r);
	assert_int_equal(int_of(doc, "runs"), nruns);
	json_decref(doc);
	snprintf(check, sizeof(check),
	         "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E;"
	         " n = sum(1 for e in E.parse(sys.argv[1]).iter('{http://www.w3.org/2000/svg}rect')"
	         " if e.get('class') == 'run'); sys.exit(0 if n == int(sys.argv[2]) else 1)\""
	         " '%s' %lld",
	         svg_path, (long long)nruns);
	assert_int_equal(system(check), 0);
	cli(&r, f->url_opt, "timeline", "-o", html_path, NULL);
	expect_exit(&r, EXIT_OK, "timeline -o FILE.html");
	itest_run_free(&r);
	/* A cap is never silent (issue 27): fewer packets drawn than the range has says so;
	 * a --limit above what an answer holds is refused, not cut. */
	cli(&r, f->url_opt, "timeline", "-o", svg_path, "--max-packets", "2", NULL);
	expect_exit(&r, EXIT_OK, "timeline --max-packets 2");
	assert_non_null(strstr(r.err, "only the oldest 2 are drawn"));
	itest_run_free(&r);
	cli(&r, f->url_opt, "history", "--limit", "20000", NULL);
	expect_exit(&r, EXIT_USAGE, "history --limit 20000");
	itest_run_free(&r);
	snprintf(check, sizeof(check),
	         "timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars"
	         " --screenshot='%s' --window-size=1600,400 'file://%s' >/dev/null 2>&1",
	         png_path, html_path);
	assert_int_equal(system(check), 0);
	/* Not blank: the coloured boxes of the runs are on the screenshot. */
	snprintf(check, sizeof(check), "/usr/bin/python3 '%s/tests/lib/png_colored.py' '%s' 200",
	         GS_SOURCE_DIR, png_path);
	assert_int_equal(system(check), 0);
	unlink(svg_path);
	unlink(html_path);
	unlink(png_path);

	cli(&r, "audit", "verify", "--json", f->t.db, NULL);
	expect_exit(&r, EXIT_OK, "audit verify");
	doc = parse(&r);
	itest_run_free(&r);
	assert_true(json_is_true(json_object_get(doc, "ok")));
	assert_true(int_of(doc, "records") > 16 * 4);
	assert_int_equal(strlen(str_of(doc, "head")), 32); /* 16-byte link in hex */
	assert_true(json_is_true(json_object_get(doc, "schema_checked")));
	/* The head kept, passed back: it matches; another link at that seq does not. */
	char pin[96];
	snprintf(pin, sizeof pin, "%lld:%s", (long long)int_of(doc, "head_seq"),
	         str_of(doc, "head"));
	json_decref(doc);
	cli(&r, "audit", "verify", "--head", pin, f->t.db, NULL);
	expect_exit(&r, EXIT_OK, "audit verify --head");
	assert_non_null(strstr(r.out, "matches"));
	itest_run_free(&r);
	char *link = strchr(pin, ':') + 1;
	link[0] = link[0] == '0' ? '1' : '0';
	cli(&r, "audit", "verify", "--head", pin, f->t.db, NULL);
	expect_exit(&r, 4, "audit verify --head with another link");
	itest_run_free(&r);
	cli(&r, "audit", "verify", "--head", "12", f->t.db, NULL);
	expect_exit(&r, EXIT_USAGE, "audit verify --head without a link");
	itest_run_free(&r);

	char copy[400], cmd[1400];
	snprintf(copy, sizeof(copy), "%s.edited", f->t.db);
	snprintf(cmd, sizeof(cmd),
	         "sqlite3 '%s' \".backup '%s'\" && sqlite3 '%s' \"UPDATE packets SET result = "
	         "'edited',"
	         " preemptions = 0 WHERE packet = (SELECT min(packet) FROM packets)\"",
	         f->t.db, copy, copy);
	assert_int_equal(system(cmd), 0);
	cli(&r, "audit", "verify", copy, NULL);
	expect_exit(&r, 4, "audit verify of an edited copy");
	assert_non_null(strstr(r.out, "MISMATCH"));
	assert_non_null(strstr(r.out, "packets row"));
	itest_run_free(&r);
	unlink(copy);

	cli(&r, "audit", "verify", "/nonexistent/audit.db", NULL);
	expect_exit(&r, EXIT_DAEMON, "audit verify of a missing file");
	itest_run_free(&r);
	/* A file without audit tables (what a .db copied without its -wal looks like) is said to
	 * be that, not "an older schema" (issue 27). */
	char empty[400];
	snprintf(empty, sizeof(empty), "%s.empty", f->t.db);
	snprintf(cmd, sizeof(cmd), "sqlite3 '%s' 'PRAGMA journal_mode=WAL;' >/dev/null", empty);
	assert_int_equal(system(cmd), 0);
	cli(&r, "audit", "verify", empty, NULL);
	expect_exit(&r, EXIT_DAEMON, "audit verify of a file without tables");
	assert_non_null(strstr(r.err, "without its -wal"));
	itest_run_free(&r);
	unlink(empty);
}

/* watch with a token the daemon does not know is refused, and says so; with the right one,
 * --count and --json give one JSON line per event, in sequence order. */
static void test_watch_unknown_token(void **state)
{
	fx *f = *state;
	itest_run r;
	cli(&r, f->url_opt, "--token", "no-such-tenant", "watch", "--count", "1", NULL);
	expect_exit(&r, EXIT_DAEMON, "watch with an unknown token");
	assert_non_null(strstr(r.err, "UNAUTHENTICATED"));
	itest_run_free(&r);
}

typedef struct watch_run {
	const char *url_opt;
	itest_run r;
} watch_run;

static void *run_watch(void *arg)
{
	watch_run *w = arg;
	cli(&w->r, w->url_opt, "watch", "--json", "--count", "6", "--seconds", "20", NULL);
	return NULL;
}

static void test_watch_json(void **state)
{
	fx *f = *state;
	gs_client *c = itest_connect(&f->t, NULL);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "watch", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, 2);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);

	watch_run w = {.url_opt = f->url_opt};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, run_watch, &w), 0);
	/* Submit until the watcher has seen its 6 events and exited (it starts watching at some
	 * point after it was started: only later events reach it). Bounded by its --seconds. */
	bool joined = false;
	for (int i = 0; i < 3000 && !(joined = pthread_tryjoin_np(th, NULL) == 0); i++)
		itest_submit_wait(c, ctx, &buf, 0);
	if (!joined)
		assert_int_equal(pthread_join(th, NULL), 0);
	expect_exit(&w.r, EXIT_OK, "watch --json --count 6");
	size_t lines = 0;
	uint64_t prev = 0;
	for (char *line = strtok(w.r.out, "\n"); line; line = strtok(NULL, "\n")) {
		json_error_t err;
		json_t *o = json_loads(line, 0, &err);
		if (!o)
			fail_msg("watch line is not JSON: %s", line);
		assert_string_equal(str_of(o, "kind"), "packet");
		uint64_t seq = itest_wire_unmap(f->t.db, "seq", 0, 0, (uint64_t)int_of(o, "seq"));
		assert_true(seq > prev && seq != UINT64_MAX);
		prev = seq;
		assert_string_equal(str_of(o, "tenant"), "default");
		assert_int_equal(int_of(o, "context"), (json_int_t)ctx);
		json_decref(o);
		lines++;
	}
	assert_int_equal(lines, 6);
	itest_run_free(&w.r);
	gs_dmabuf_free(&buf);
	gs_close(c);
}

int main(void)
{
	/* The CLI reads these; the tests pass everything explicitly. */
	unsetenv("GPUSCHED_URL");
	unsetenv("GPUSCHED_TOKEN");
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_help),
	        cmocka_unit_test(test_usage_errors),
	        cmocka_unit_test(test_no_daemon),
	        cmocka_unit_test_setup_teardown(test_info_json, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_demo_json, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_submit_json, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_history_json, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_watch_unknown_token, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_audit_verify, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_watch_json, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_memory_commands, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_alloc_create_destroy, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_alloc_create_overcommit, setup_small_vram,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_demo_overcommit, setup_small_vram, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
