/*
 * The daemon on an execution backend, end to end: `gpusched info` names the device behind it,
 * the demo workload verifies byte for byte (FILL, COPY, CHECKSUM across two nodes with
 * cross-context waits), and the same demo over-committing video memory four times verifies
 * while the memory manager pages allocations in and out with TRANSFERs.
 *
 * It runs on the emulator (integration.test_backends) and with GS_TEST_BACKEND=vulkan on the
 * Vulkan backend (integration.test_backends.vulkan: lavapipe in CI), which tests/lib/testd.c
 * passes to every daemon it starts as --backend. A missing Vulkan device fails the start. The
 * Vulkan run adds what only a GPU backend has: memory segments the CPU does not map (staging
 * copies) and recovery from a device loss.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

#define MiB (1024u * 1024u)

/* The end of an adapter's config: 4 MiB of video memory and 4 MiB of aperture, 64 MiB of
 * system memory. */
#define SEGMENTS_4MIB                                                                              \
	"\"segments\": ["                                                                          \
	"{\"id\": 1, \"name\": \"vram\", \"kind\": \"memory\", \"size_mib\": 4},"                  \
	"{\"id\": 2, \"name\": \"aperture\", \"kind\": \"aperture\", \"size_mib\": 4,"             \
	" \"cpu_visible\": true}],"                                                                \
	"\"system_memory_mib\": 64}]}"

/* Three nodes (copy pages), 4 MiB of video memory and 4 MiB of aperture, 64 MiB of system
 * memory, 256 KiB paging transfers, on the wall clock. */
static const char config_json[] =
        "{\"clock\": \"wall\", \"paging_chunk\": 262144, \"adapters\": [{"
        "\"name\": \"gpu0\", \"nodes\": ["
        "{\"name\": \"3d\", \"kind\": \"3d\"},"
        "{\"name\": \"compute\", \"kind\": \"compute\"},"
        "{\"name\": \"copy\", \"kind\": \"copy\", \"paging\": true}]," SEGMENTS_4MIB;

typedef struct fx {
	gs_testd d;
	itest_config cfg;
} fx;

static const char *backend(void)
{
	const char *b = getenv("GS_TEST_BACKEND");
	return b && *b ? b : "emu";
}

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	if (!f || itest_config_write(&f->cfg, config_json) != 0)
		return -1;
	const char *args[] = {"--config", f->cfg.path, NULL};
	if (gs_testd_start(&f->d, args) != 0) {
		fprintf(stderr, "gpuschedd did not start on backend %s\n", backend());
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	int rc = gs_testd_stop(&f->d);
	if (rc != 0)
		gs_testd_dump_log(&f->d);
	gs_testd_cleanup(&f->d);
	itest_config_cleanup(&f->cfg);
	free(f);
	return rc == 0 ? 0 : -1;
}

/* Runs `gpusched --url URL --json demo ARGS...` and returns its parsed output. */
static json_t *run_demo(fx *f, const char *const *args, int *exit_code)
{
	char *argv[32];
	int n = 0;
	argv[n++] = GS_CLI_PATH;
	argv[n++] = "--url";
	argv[n++] = f->d.url;
	argv[n++] = "--json";
	argv[n++] = "demo";
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	itest_run r;
	itest_run_argv(argv, 240000, &r);
	*exit_code = r.exit_code;
	json_error_t err;
	json_t *j = json_loads(r.out ? r.out : "", 0, &err);
	if (!j || r.exit_code != 0)
		fprintf(stderr, "demo exited %d\nstdout: %s\nstderr: %s\n", r.exit_code,
		        r.out ? r.out : "", r.err ? r.err : "");
	itest_run_free(&r);
	return j;
}

static int64_t jint(const json_t *j, const char *key)
{
	const json_t *v = json_object_get(j, key);
	if (!json_is_integer(v))
		fail_msg("demo output has no integer \"%s\"", key);
	return json_integer_value(v);
}

static void test_info_names_device(void **state)
{
	fx *f = *state;
	gs_client *c = itest_connect(&f->d, NULL);
	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	const gs_adapter_info *a = &info->adapters[0];
	assert_string_equal(a->backend, backend());
	assert_string_equal(a->clock, "wall");
	assert_true(strlen(a->device) > 0);
	if (strcmp(backend(), "vulkan") == 0) {
		assert_true(strncmp(a->api, "Vulkan 1.", 9) == 0);
		assert_true(strlen(a->driver) > 0);
		assert_true(a->queues >= 1);
		assert_true(a->preempt_granularity_ns > 0);
		printf("vulkan device: %s, %s, %s, %u queue(s)\n", a->device, a->api, a->driver,
		       a->queues);
	} else {
		assert_string_equal(a->device, "emulated");
		assert_string_equal(a->api, "");
		assert_int_equal(a->queues, 0);
	}
	assert_int_equal(a->segment_count, 2);
	assert_int_equal(a->system_memory, 64 * MiB);
	gs_info_free(info);
	gs_close(c);
}

/* The demo workload verifies byte for byte: every allocation read back against the CPU's
 * model, every CHECKSUM the engine wrote against XXH64 computed here. */
static void test_demo_byte_exact(void **state)
{
	fx *f = *state;
	const char *args[] = {"--packets", "96", "--seed", "7", "--alloc-size", "262144", NULL};
	int rc;
	json_t *j = run_demo(f, args, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "ok")));
	assert_int_equal(jint(j, "packets_completed"), 96);
	assert_int_equal(jint(j, "bytes_mismatched"), 0);
	assert_int_equal(jint(j, "checksums_ok"), jint(j, "checksums_total"));
	assert_true(jint(j, "checksums_total") > 0);
	json_decref(j);
}

/* 32 working allocations of 1 MiB on 8 MiB of segments: the memory manager pages them in and
 * out between packets (TRANSFERs on the copy node), and every byte still verifies. */
static void test_demo_overcommit(void **state)
{
	fx *f = *state;
	const char *args[] = {"--packets", "64",           "--seed",  "11", "--allocs",
	                      "32",        "--alloc-size", "1048576", NULL};
	int rc;
	json_t *j = run_demo(f, args, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "ok")));
	assert_int_equal(jint(j, "bytes_mismatched"), 0);
	assert_int_equal(jint(j, "checksums_ok"), jint(j, "checksums_total"));
	assert_true(jint(j, "paging_packets") > 0);
	assert_true(jint(j, "bytes_paged") >= 4 * (int64_t)MiB);
	printf("over-commit on %s: %lld paging packets moved %lld bytes\n", backend(),
	       (long long)jint(j, "paging_packets"), (long long)jint(j, "bytes_paged"));
	json_decref(j);
}

/* One daemon, two adapters: an emulated one and a Vulkan one. Each runs the demo byte-exact,
 * and info tells them apart. (GS_TEST_BACKEND is set aside: it would make both vulkan.) */
static void test_mixed_pool(void **state)
{
	(void)state;
	static const char mixed[] =
	        "{\"clock\": \"wall\", \"adapters\": ["
	        "{\"name\": \"emu0\", \"backend\": \"emu\", \"system_memory_mib\": 64},"
	        "{\"name\": \"gpu0\", \"backend\": \"vulkan\", \"system_memory_mib\": 64}]}";
	fx f = {0};
	assert_int_equal(itest_config_write(&f.cfg, mixed), 0);
	char *saved = getenv("GS_TEST_BACKEND") ? strdup(getenv("GS_TEST_BACKEND")) : NULL;
	unsetenv("GS_TEST_BACKEND");
	const char *args[] = {"--config", f.cfg.path, NULL};
	int started = gs_testd_start(&f.d, args);
	if (saved)
		setenv("GS_TEST_BACKEND", saved, 1);
	free(saved);
	assert_int_equal(started, 0);

	gs_client *c = itest_connect(&f.d, NULL);
	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	assert_int_equal(info->adapter_count, 2);
	assert_string_equal(info->adapters[0].backend, "emu");
	assert_string_equal(info->adapters[0].device, "emulated");
	assert_string_equal(info->adapters[1].backend, "vulkan");
	assert_true(strncmp(info->adapters[1].api, "Vulkan 1.", 9) == 0);
	gs_info_free(info);
	gs_close(c);
	for (int a = 0; a < 2; a++) {
		char *argv[] = {GS_CLI_PATH, "--url", f.d.url,  "--adapter", a ? "1" : "0", "demo",
		                "--packets", "32",    "--seed", "5",         NULL};
		itest_run r;
		itest_run_argv(argv, 120000, &r);
		if (r.exit_code != 0)
			fail_msg("demo on adapter %d exited %d: %s%s", a, r.exit_code,
			         r.out ? r.out : "", r.err ? r.err : "");
		itest_run_free(&r);
	}
	assert_int_equal(gs_testd_stop(&f.d), 0);
	gs_testd_cleanup(&f.d);
	itest_config_cleanup(&f.cfg);
}

/* Runs gpuschedd with args, expecting it to refuse to start: exit 1 and `want` in stderr. */
static void expect_refused(const char *const *args, const char *want)
{
	char dir[] = "/tmp/gpusched-backend-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char db[128], url[160];
	snprintf(db, sizeof(db), "%s/a.db", dir);
	snprintf(url, sizeof(url), "ipc://%s/s.sock", dir);
	char *argv[16] = {GS_DAEMON_PATH, "--db", db, "--listen", url};
	int n = 5;
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	/* Sanitized builds: keep lavapipe mapped, as testd does (tests/support/keep_icd.c). */
	const char *preload = getenv("GS_DAEMON_PRELOAD");
	if (preload && *preload)
		setenv("LD_PRELOAD", preload, 1);
	itest_run r;
	itest_run_argv(argv, 60000, &r);
	unsetenv("LD_PRELOAD");
	if (r.exit_code != 1 || !r.err || !strstr(r.err, want))
		fail_msg("gpuschedd exited %d, stderr: %s (wanted exit 1 and \"%s\")", r.exit_code,
		         r.err ? r.err : "", want);
	itest_run_free(&r);
	unlink(db);
	char wal[160];
	snprintf(wal, sizeof(wal), "%s-wal", db);
	unlink(wal);
	snprintf(wal, sizeof(wal), "%s-shm", db);
	unlink(wal);
	rmdir(dir);
}

/* An operator's mistakes with the vulkan backend end the start with a message that says what
 * was asked for and what there is. */
static void test_vulkan_start_errors(void **state)
{
	(void)state;
	expect_refused((const char *const[]){"--backend", "vulkan", "--clock", "virtual", NULL},
	               "virtual clock");
	expect_refused(
	        (const char *const[]){"--backend", "vulkan", "--device", "no-such-gpu", NULL},
	        "no Vulkan device \"no-such-gpu\"");
	expect_refused((const char *const[]){"--backend", "vulkan", "--device", "99", NULL},
	               "found:");
	expect_refused((const char *const[]){"--backend", "cuda", NULL}, "vulkan");
}

/* Starts a daemon on config `json`, with the environment variable `env` (NAME=VALUE, NULL:
 * none) set for it alone. */
static void start_with(fx *f, const char *json, const char *env)
{
	assert_int_equal(itest_config_write(&f->cfg, json), 0);
	char name[64] = "";
	if (env) {
		const char *eq = strchr(env, '=');
		assert_non_null(eq);
		snprintf(name, sizeof(name), "%.*s", (int)(eq - env), env);
		setenv(name, eq + 1, 1);
	}
	const char *args[] = {"--config", f->cfg.path, NULL};
	int started = gs_testd_start(&f->d, args);
	if (env)
		unsetenv(name);
	assert_int_equal(started, 0);
}

/* Does one of the packet's events in `state` carry `text` in its detail? */
static bool event_says(gs_client *c, uint64_t packet, gs_packet_state state, const char *text)
{
	gs_packet_event *ev = NULL;
	size_t nev = 0;
	assert_int_equal(gs_packet_events(c, packet, &ev, &nev), 0);
	bool said = false;
	for (size_t i = 0; i < nev; i++)
		said = said || (ev[i].state == state && ev[i].detail && strstr(ev[i].detail, text));
	gs_packet_events_free(ev, nev);
	return said;
}

static void stop_fx(fx *f)
{
	int rc = gs_testd_stop(&f->d);
	if (rc != 0)
		gs_testd_dump_log(&f->d);
	gs_testd_cleanup(&f->d);
	itest_config_cleanup(&f->cfg);
	assert_int_equal(rc, 0);
}

/*
 * "local_memory": "device": the memory segment is device memory the CPU does not map (what a
 * GPU without a resizable BAR gives), every CPU access a copy through a staging buffer. info
 * says so, and the demo still verifies byte for byte, over-committed too.
 */
static void test_staging_memory(void **state)
{
	(void)state;
	static const char staged[] =
	        "{\"clock\": \"wall\", \"paging_chunk\": 262144, \"adapters\": [{"
	        "\"name\": \"gpu0\", \"backend\": \"vulkan\", \"local_memory\": \"device\","
	        " \"nodes\": ["
	        "{\"name\": \"3d\", \"kind\": \"3d\"},"
	        "{\"name\": \"copy\", \"kind\": \"copy\", \"paging\": true}]," SEGMENTS_4MIB;
	fx f = {0};
	start_with(&f, staged, NULL);
	gs_client *c = itest_connect(&f.d, NULL);
	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	assert_string_equal(info->adapters[0].cpu_access, "staging");
	gs_info_free(info);
	gs_close(c);

	const char *exact[] = {"--packets", "64", "--seed", "3", "--alloc-size", "65536", NULL};
	const char *over[] = {"--packets", "32",           "--seed", "9", "--allocs",
	                      "24",        "--alloc-size", "524288", NULL};
	for (int i = 0; i < 2; i++) {
		int rc;
		json_t *j = run_demo(&f, i ? over : exact, &rc);
		assert_int_equal(rc, 0);
		assert_non_null(j);
		assert_int_equal(jint(j, "bytes_mismatched"), 0);
		assert_int_equal(jint(j, "checksums_ok"), jint(j, "checksums_total"));
		if (i)
			assert_true(jint(j, "paging_packets") > 0);
		json_decref(j);
	}
	stop_fx(&f);
}

/* A daemon on `json` with the loss hook `env`, a client of it, the adapter's layout and a
 * device. */
static gs_client *loss_daemon(fx *f, const char *json, const char *env, itest_layout *l,
                              uint64_t *dev)
{
	start_with(f, json, env);
	gs_client *c = itest_connect(&f->d, NULL);
	itest_layout_of(c, l);
	assert_int_equal(gs_device_create(c, "loss", dev), 0);
	return c;
}

/* Submits the SPIN of `micros` the loss hook is set to on ctx: the blamed packet FAULTS. */
static void lose_device(gs_client *c, uint64_t ctx, uint64_t micros)
{
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_spin(&buf, micros, 0), 0);
	gs_submit_result r;
	assert_int_equal(gs_submit(c, ctx, &buf, 0, &r), 0);
	gs_packet_state st;
	assert_int_equal(gs_packet_wait(c, r.packet, ITEST_TIMEOUT_MS, &st, NULL),
	                 GS_STATUS_FAULTED);
	assert_int_equal(st, GS_PACKET_FAULTED);
	gs_dmabuf_free(&buf);
}

/*
 * A device loss, injected (GSD_VULKAN_INJECT_LOSS: a SPIN of that many microseconds loses
 * the device). The packet that lost it FAULTS and its context with it; a packet of another
 * context running on another node is innocent: aborted, resubmitted once the daemon has
 * recreated the device, it resumes inside its SPIN and completes with every byte right. The
 * adapter counts the loss and runs new work.
 */
static void test_device_loss(void **state)
{
	(void)state;
	fx f = {0};
	itest_layout l;
	uint64_t dev;
	gs_client *c = loss_daemon(&f, config_json, "GSD_VULKAN_INJECT_LOSS=4242", &l, &dev);
	uint64_t innocent = itest_context(c, dev, 0, l.paging_node);
	uint64_t guilty = itest_context(c, dev, 1, l.paging_node);
	gs_allocation_placement a;
	itest_alloc(c, dev, 65536, l.segment_set, 0, &a);
	uint64_t s;
	assert_int_equal(gs_sync_create(c, dev, 0, &s), 0);

	/* The innocent packet: a FILL, a SIGNAL once it ran, a long SPIN, another FILL. */
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 0, 4096, 0x11223344u), 0);
	assert_int_equal(gs_dmabuf_signal(&buf, s, 1), 0);
	assert_int_equal(gs_dmabuf_spin(&buf, 300000, 0), 0);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 4096, 4096, 0x55667788u), 0);
	gs_submit_result ri;
	assert_int_equal(gs_submit(c, innocent, &buf, 0, &ri), 0);
	uint64_t cur = 0;
	assert_int_equal(gs_sync_wait(c, s, 1, ITEST_TIMEOUT_MS, &cur), 0);

	/* Now, while it spins, the other context loses the device. */
	lose_device(c, guilty, 4242);
	gs_packet_state st;

	assert_int_equal(gs_packet_wait(c, ri.packet, ITEST_TIMEOUT_MS, &st, NULL), 0);
	assert_int_equal(st, GS_PACKET_COMPLETED);
	uint8_t got[8192];
	assert_int_equal(gs_allocation_read(c, a.allocation, 0, got, sizeof(got)), 0);
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(
		        got[i], (uint8_t)((i < 4096 ? 0x11223344u : 0x55667788u) >> (8 * (i % 4))));
	/* Its record says what happened: aborted by the loss, then resubmitted. */
	assert_true(event_says(c, ri.packet, GS_PACKET_ABORTED, "device was lost"));

	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	assert_int_equal(info->adapters[0].device_losses, 1);
	assert_false(info->adapters[0].device_dead);
	gs_info_free(info);

	/* The guilty context is faulted; a new one runs on the recreated device. */
	gs_dmabuf_reset(&buf);
	assert_int_equal(gs_dmabuf_fill(&buf, a.allocation, 0, 64, 0x01010101u), 0);
	gs_submit_result r2;
	assert_int_not_equal(gs_submit(c, guilty, &buf, 0, &r2), 0);
	uint64_t fresh = itest_context(c, dev, 1, l.paging_node);
	itest_submit_wait(c, fresh, &buf, 0);
	assert_int_equal(gs_allocation_read(c, a.allocation, 0, got, 64), 0);
	for (size_t i = 0; i < 64; i++)
		assert_int_equal(got[i], 0x01);
	gs_dmabuf_free(&buf);
	gs_close(c);
	stop_fx(&f);
}

/*
 * A device loss the backend cannot recover from: memory segments the CPU does not map
 * ("local_memory": "device") cannot be carried over, so the adapter is dead. The blamed packet
 * faults; info says the device is dead; every later packet is cancelled with the reason, at
 * once, instead of waiting forever; the daemon still answers and stops cleanly.
 */
static void test_device_loss_unrecoverable(void **state)
{
	(void)state;
	static const char staged[] = "{\"clock\": \"wall\", \"adapters\": [{"
	                             "\"name\": \"gpu0\", \"backend\": \"vulkan\","
	                             " \"local_memory\": \"device\", \"system_memory_mib\": 64}]}";
	fx f = {0};
	itest_layout l;
	uint64_t dev;
	gs_client *c = loss_daemon(&f, staged, "GSD_VULKAN_INJECT_LOSS=4243", &l, &dev);
	uint64_t ctx = itest_context(c, dev, 0, l.paging_node);
	lose_device(c, ctx, 4243);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	gs_submit_result r;
	gs_packet_state st;

	gs_daemon_info *info = NULL;
	assert_int_equal(gs_info(c, &info), 0);
	assert_int_equal(info->adapters[0].device_losses, 1);
	assert_true(info->adapters[0].device_dead);
	gs_info_free(info);

	uint64_t other = itest_context(c, dev, 0, l.paging_node);
	gs_dmabuf_reset(&buf);
	assert_int_equal(gs_dmabuf_nop(&buf), 0);
	assert_int_equal(gs_submit(c, other, &buf, 0, &r), 0);
	gs_packet_wait(c, r.packet, ITEST_TIMEOUT_MS, &st, NULL);
	assert_int_equal(st, GS_PACKET_CANCELLED);
	assert_true(event_says(c, r.packet, GS_PACKET_CANCELLED, "could not be recovered"));
	gs_dmabuf_free(&buf);
	gs_close(c);
	stop_fx(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_info_names_device, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_demo_byte_exact, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_demo_overcommit, setup, teardown),
	        cmocka_unit_test(test_vulkan_start_errors),
	        cmocka_unit_test(test_mixed_pool),
	};
	/* What only a GPU backend has: memory the CPU does not map, device loss. */
	const struct CMUnitTest gpu_tests[] = {
	        cmocka_unit_test(test_staging_memory),
	        cmocka_unit_test(test_device_loss),
	        cmocka_unit_test(test_device_loss_unrecoverable),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (strcmp(backend(), "vulkan") == 0)
		rc |= cmocka_run_group_tests(gpu_tests, NULL, NULL);
	return rc;
}
