/*
 * Virtual machines through gpusched-relay: three VM tenants, each behind its own relay that
 * reaches the host daemon over tls+tcp:// (mutual TLS, certificates made at test time), and
 * guest processes (this program run again as `--guest`) connected to the relays over ipc://.
 *
 * Guest processes are isolated from each other inside a VM and between VMs; the daemon marks
 * every VM packet VirtualMachineData; a guest's exit releases its objects and nothing else; the
 * paravirtual message limit holds at the relay and at the daemon; a relay whose host is down
 * answers UNAVAILABLE and reconnects; killing one VM's relay mid-stream leaves the others
 * serving and the audit file verifiable.
 *
 * Network namespaces are not used: the relays reach the daemon over loopback TLS and guests
 * reach the relays over ipc:// paths in the test's directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "itest.h"
#include "testd.h"

#define NVM        3
#define GUEST_SIZE (256u * 1024u)

/* ---- the guest process (this program with --guest URL) ---- */

/* Makes a device, an allocation filled with a pattern of its pid, a context and one packet;
 * prints "dev=D alloc=A ctx=C packet=P" and then, for each "check" line on stdin, "ok" when
 * the allocation still holds its pattern. Exits 0 at end of input. */
static int guest_main(const char *url)
{
	gs_client *c;
	char why[256] = "";
	if (gs_connect_ex(url, "", &c, why, sizeof(why)) != 0) {
		fprintf(stderr, "guest %d: cannot connect to %s: %s\n", (int)getpid(), url, why);
		_exit(3);
	}
	gs_client_set_timeout(c, ITEST_TIMEOUT_MS);
	uint64_t dev;
	gs_allocation_placement pl;
	gs_submit_result sr;
	uint8_t *pattern = malloc(GUEST_SIZE), *back = malloc(GUEST_SIZE);
	for (size_t i = 0; i < GUEST_SIZE; i++)
		pattern[i] = (uint8_t)(getpid() * 31u + i * 7u);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	gs_dmabuf_nop(&buf);
	if (gs_device_create(c, "guest", &dev) != 0) {
		fprintf(stderr, "guest %d: %s\n", (int)getpid(), gs_client_message(c));
		_exit(4); /* a failed guest: the test that started it fails */
	}
	itest_layout l;
	itest_layout_of(c, &l);
	itest_alloc(c, dev, GUEST_SIZE, 0, 0, &pl);
	uint64_t ctx = itest_context(c, dev, 0, l.paging_node);
	if (gs_allocation_write(c, pl.allocation, 0, pattern, GUEST_SIZE) != 0 ||
	    gs_submit(c, ctx, &buf, 0, &sr) != 0) {
		fprintf(stderr, "guest %d: %s\n", (int)getpid(), gs_client_message(c));
		_exit(4); /* a failed guest: the test that started it fails */
	}
	uint64_t packet = sr.packet;
	gs_dmabuf_free(&buf);
	gs_daemon_info *di;
	if (gs_info(c, &di) != 0)
		_exit(4);
	printf("dev=%llu alloc=%llu ctx=%llu packet=%llu who=%s\n", (unsigned long long)dev,
	       (unsigned long long)pl.allocation, (unsigned long long)ctx,
	       (unsigned long long)packet, di->tenant);
	gs_info_free(di);
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		bool ok = gs_allocation_read(c, pl.allocation, 0, back, GUEST_SIZE) == 0 &&
		          memcmp(back, pattern, GUEST_SIZE) == 0;
		printf("%s\n", ok ? "ok" : "bad");
		fflush(stdout);
	}
	free(pattern);
	free(back);
	gs_close(c);
	return 0;
}

typedef struct guest {
	pid_t pid;
	int in, out; /* its stdin (we write), its stdout (we read) */
	uint64_t dev, alloc, ctx, packet;
	char who[96]; /* its identity in the audit (Info.tenant): vmN/GUEST */
} guest;

/* Reads one line from fd within timeout_ms; false on timeout or end of file. */
static bool read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;
	long long deadline = gs_test_now_ms() + timeout_ms;
	while (n + 1 < cap) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		long long left = deadline - gs_test_now_ms();
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		if (read(fd, buf + n, 1) != 1)
			return false;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return true;
}

static void guest_start(guest *g, const char *url)
{
	int in[2], out[2];
	assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	g->pid = fork();
	assert_true(g->pid >= 0);
	if (g->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		execl("/proc/self/exe", "test_relay", "--guest", url, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	g->in = in[1];
	g->out = out[0];
	char line[256];
	assert_true(read_line(g->out, line, sizeof(line), ITEST_TIMEOUT_MS));
	unsigned long long d, a, x, p;
	assert_int_equal(sscanf(line, "dev=%llu alloc=%llu ctx=%llu packet=%llu who=%95s", &d, &a,
	                        &x, &p, g->who),
	                 5);
	g->dev = d;
	g->alloc = a;
	g->ctx = x;
	g->packet = p;
}

/* The guest reads its allocation back: true when every byte is its own. */
static bool guest_check(guest *g)
{
	char line[16];
	return write(g->in, "check\n", 6) == 6 &&
	       read_line(g->out, line, sizeof(line), ITEST_TIMEOUT_MS) && strcmp(line, "ok") == 0;
}

/* Ends the guest process (end of its input) and reaps it: its exit status. */
static int guest_stop(guest *g)
{
	close(g->in);
	int status = -1;
	waitpid(g->pid, &status, 0);
	close(g->out);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- the host and its relays ---- */

typedef struct fx {
	itest_pki k;
	itest_config cfg;
	gs_testd d;
	char tls_url[64];
	gs_testd relay[NVM];
	char relay_url[NVM][320];
} fx;

static const char *const vm_tokens[NVM] = {"tok-vm1", "tok-vm2", "tok-vm3"};

/* Starts relay i for VM i, its host `host`. */
static int relay_start(fx *f, int i, const char *host)
{
	char tok[320];
	snprintf(tok, sizeof(tok), "%s/vm%d.token", f->d.dir, i + 1);
	FILE *t = fopen(tok, "w");
	assert_non_null(t);
	fprintf(t, "%s\n", vm_tokens[i]);
	fclose(t);
	snprintf(f->relay_url[i], sizeof(f->relay_url[i]), "ipc://%s/vm%d.sock", f->d.dir, i + 1);
	char name[24];
	snprintf(name, sizeof(name), "relay%d", i + 1);
	const char *const argv[] = {
	        GS_RELAY_PATH,  "--host", host,          "--listen", f->relay_url[i],
	        "--token-file", tok,      "--log-level", "debug",    NULL};
	return gs_testd_spawn(&f->relay[i], f->d.dir, name, argv);
}

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	itest_pki_make(&f->k);
	/* The relays dial with the VM's certificate and trust the daemon's CA. */
	setenv("GPUSCHED_TLS_CA", f->k.ca, 1);
	setenv("GPUSCHED_TLS_CERT_KEY", f->k.client, 1);
	char json[1024];
	snprintf(json, sizeof(json),
	         "{\"tls\": {\"cert_key_file\": \"%s\", \"ca_file\": \"%s\"},"
	         " \"tenants\": ["
	         "{\"name\": \"ops\", \"token\": \"tok-ops\", \"admin\": true},"
	         "{\"name\": \"proc\", \"token\": \"tok-proc\"},"
	         "{\"name\": \"vm1\", \"token\": \"tok-vm1\", \"kind\": \"vm\"},"
	         "{\"name\": \"vm2\", \"token\": \"tok-vm2\", \"kind\": \"vm\"},"
	         "{\"name\": \"vm3\", \"token\": \"tok-vm3\", \"kind\": \"vm\"}]}",
	         f->k.server, f->k.ca);
	assert_int_equal(itest_config_write(&f->cfg, json), 0);
	snprintf(f->tls_url, sizeof(f->tls_url), "tls+tcp://127.0.0.1:%u", itest_free_port());
	const char *const args[] = {"--config", f->cfg.path, "--listen", f->tls_url, NULL};
	if (gs_testd_start(&f->d, args) != 0)
		return -1;
	for (int i = 0; i < NVM; i++)
		if (relay_start(f, i, f->tls_url) != 0)
			return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	int rc = 0;
	for (int i = 0; i < NVM; i++) {
		if (f->relay[i].pid > 0 && gs_testd_stop(&f->relay[i]) != 0) {
			gs_testd_dump_log(&f->relay[i]);
			rc = -1;
		}
	}
	if (gs_testd_stop(&f->d) != 0) {
		gs_testd_dump_log(&f->d);
		rc = -1;
	}
	gs_testd_cleanup(&f->d);
	itest_config_cleanup(&f->cfg);
	free(f);
	return rc;
}

static gs_client *guest_connect(fx *f, int vm)
{
	gs_client *c;
	if (gs_connect(f->relay_url[vm], "", &c) != 0)
		fail_msg("cannot connect to relay %d", vm + 1);
	gs_client_set_timeout(c, ITEST_TIMEOUT_MS);
	return c;
}

/* The allocation cannot be read by c: NOT_FOUND, as a handle that never existed. */
static void assert_invisible(gs_client *c, uint64_t alloc, uint64_t dev)
{
	uint8_t b[16];
	assert_int_equal(gs_allocation_read(c, alloc, 0, b, sizeof(b)), GS_STATUS_NOT_FOUND);
	assert_int_equal(gs_allocation_write(c, alloc, 0, b, sizeof(b)), GS_STATUS_NOT_FOUND);
	assert_int_equal(gs_device_destroy(c, dev), GS_STATUS_NOT_FOUND);
}

/* Waits (bounded) until the audit has a guest_released note for `guest_text`. */
static bool wait_note(const char *db, const char *tenant, const char *like, int timeout_ms)
{
	long long deadline = gs_test_now_ms() + timeout_ms;
	while (gs_test_now_ms() < deadline) {
		if (itest_audit_int(db,
		                    "SELECT count(*) FROM notes WHERE kind = 'guest_released' AND"
		                    " tenant = '%s' AND detail LIKE '%s'",
		                    tenant, like) > 0)
			return true;
		/* The relay releases a guest when its connection's close reaches it: poll the file
		 * the daemon commits to until then. */
		poll(NULL, 0, 20);
	}
	return false;
}

/* Stops a relay started by a test: it must exit 0 (its log is shown when not). */
static void relay_stop(gs_testd *relay)
{
	int rc = gs_testd_stop(relay);
	if (rc != 0) {
		gs_testd_dump_log(relay);
		fail_msg("gpusched-relay exited %d", rc);
	}
}

/* ---- tests ---- */

static void test_guests_isolated(void **state)
{
	fx *f = *state;
	guest a, b, c3;
	guest_start(&a, f->relay_url[0]);
	guest_start(&b, f->relay_url[0]);
	guest_start(&c3, f->relay_url[1]);

	/* Another process of the same VM, another VM, the VM itself (its token, guest 0), an
	 * administrator and a process tenant: none of them sees guest a's objects. */
	gs_client *same_vm = guest_connect(f, 0);
	gs_client *other_vm = guest_connect(f, 1);
	gs_client *vm_itself = itest_connect(&f->d, "tok-vm1");
	gs_client *admin = itest_connect(&f->d, "tok-ops");
	gs_client *proc = itest_connect(&f->d, "tok-proc");
	gs_client *all[] = {same_vm, other_vm, vm_itself, admin, proc};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		assert_invisible(all[i], a.alloc, a.dev);
		assert_int_equal(gs_packet_wait(all[i], a.packet, 0, NULL, NULL),
		                 GS_STATUS_NOT_FOUND);
	}
	/* Guest b's and c3's objects are theirs too. */
	assert_invisible(same_vm, b.alloc, b.dev);
	assert_invisible(other_vm, c3.alloc, c3.dev);
	/* ... and each guest still reads its own bytes. */
	assert_true(guest_check(&a));
	assert_true(guest_check(&b));
	assert_true(guest_check(&c3));

	/* The daemon set VirtualMachineData on every VM packet. */
	for (guest *g = &a; g; g = g == &a ? &c3 : NULL)
		assert_int_equal(itest_audit_int(f->d.db,
		                                 "SELECT submit_flags & 256 FROM packets WHERE"
		                                 " packet = %llu",
		                                 (unsigned long long)itest_wire_unmap(
		                                         f->d.db, "packet", 0, 0, g->packet)),
		                 256);

	int64_t errors = itest_audit_errors(f->d.db);
	/* History is per guest: the audit names guest a "vm1/GUEST"; a's packet is in no one
	 * else's history, the VM itself may read its guest's, another guest may not. */
	gs_packet_record *rec;
	size_t nrec;
	const char *a_identity = a.who;
	assert_int_equal(strncmp(a_identity, "vm1/", 4), 0);
	assert_string_not_equal(a.who, b.who);
	gs_history_filter mine = {.limit = 1000};
	for (size_t k = 0; k < 3; k++) {
		gs_client *who = k == 0 ? same_vm : k == 1 ? vm_itself : other_vm;
		assert_int_equal(gs_history(who, &mine, &rec, &nrec), 0);
		for (size_t i = 0; i < nrec; i++)
			assert_int_not_equal(rec[i].packet, a.packet);
		gs_history_free(rec, nrec);
	}
	gs_history_filter of_a = {.tenant = a_identity, .limit = 1000};
	assert_int_equal(gs_history(vm_itself, &of_a, &rec, &nrec), 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].packet, a.packet);
	gs_history_free(rec, nrec);
	assert_int_equal(gs_history(same_vm, &of_a, &rec, &nrec), GS_STATUS_PERMISSION_DENIED);
	assert_int_equal(gs_history(other_vm, &of_a, &rec, &nrec), GS_STATUS_PERMISSION_DENIED);

	/* A guest cannot release another guest (nor pose as the VM): refused and audited. */
	assert_int_equal(gs_guest_release(same_vm, 1, NULL), GS_STATUS_PERMISSION_DENIED);
	assert_int_equal(gs_guest_release_all(same_vm, NULL), GS_STATUS_PERMISSION_DENIED);
	/* A process tenant cannot name a guest, nor release one. */
	assert_int_equal(gs_guest_release(proc, 1, NULL), GS_STATUS_PERMISSION_DENIED);
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__InfoRequest info = GPUSCHED__V1__INFO_REQUEST__INIT;
	req.id = 9;
	req.token = "tok-proc";
	req.guest = 7;
	req.body_case = GPUSCHED__V1__REQUEST__BODY_INFO;
	req.info = &info;
	size_t len;
	void *bytes = itest_pack(&req, &len);
	Gpusched__V1__Response *resp;
	assert_int_equal(itest_raw_call(f->d.url, bytes, len, 10000, &resp), 0);
	free(bytes);
	assert_int_equal(resp->status, GS_STATUS_PERMISSION_DENIED);
	assert_int_equal(resp->id, 9);
	gpusched__v1__response__free_unpacked(resp, NULL);
	/* Every refusal is an errors row, in the file before the barrier packet's record. */
	uint64_t vdev;
	assert_int_equal(gs_device_create(vm_itself, "barrier", &vdev), 0);
	itest_layout l;
	itest_layout_of(vm_itself, &l);
	itest_audit_barrier(vm_itself, itest_context(vm_itself, vdev, 0, l.paging_node));
	assert_int_equal(itest_audit_errors(f->d.db), errors + 6);

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		gs_close(all[i]);
	assert_int_equal(guest_stop(&a), 0);
	assert_int_equal(guest_stop(&b), 0);
	assert_int_equal(guest_stop(&c3), 0);
}

static void test_guest_exit_releases_only_its_objects(void **state)
{
	fx *f = *state;
	guest a, b;
	guest_start(&a, f->relay_url[2]);
	guest_start(&b, f->relay_url[2]);
	assert_int_equal(guest_stop(&a), 0);
	/* Its device (with context and allocation) is destroyed on the host... */
	if (!wait_note(f->d.db, "vm3", "guest % 1 devices destroyed", 20000)) {
		gs_testd_dump_log(&f->relay[2]);
		fail_msg("the relay did not release the guest that exited");
	}
	/* ... and the other guest of the VM is untouched. */
	assert_true(guest_check(&b));
	assert_int_equal(guest_stop(&b), 0);
	assert_true(wait_note(f->d.db, "vm3", "guest % 1 devices destroyed", 20000));
	assert_int_equal(itest_audit_int(f->d.db,
	                                 "SELECT count(*) FROM notes WHERE kind = 'guest_released'"
	                                 " AND tenant = 'vm3' AND detail LIKE '%% 1 devices%%'"),
	                 2);
}

static void test_message_limit(void **state)
{
	fx *f = *state;
	gs_client *g = guest_connect(f, 0);
	uint64_t dev;
	assert_int_equal(gs_device_create(g, "big", &dev), 0);
	gs_allocation_placement pl;
	itest_alloc(g, dev, 1u << 20, 0, 0, &pl);
	uint8_t *data = malloc(1u << 20), *back = malloc(1u << 20);
	for (size_t i = 0; i < (1u << 20); i++)
		data[i] = (uint8_t)(i * 13u + 5u);
	/* One request of 200 KiB: over the VM's 128 KiB, refused by the relay. */
	gs_client_set_io_piece(g, 0);
	assert_int_equal(gs_allocation_write(g, pl.allocation, 0, data, 200u * 1024u),
	                 GS_STATUS_TOO_LARGE);
	assert_non_null(strstr(gs_client_message(g), "relay"));
	/* In the library's pieces, 1 MiB goes through byte-exact. */
	gs_client_set_io_piece(g, GS_IO_PIECE);
	assert_int_equal(gs_allocation_write(g, pl.allocation, 0, data, 1u << 20), 0);
	assert_int_equal(gs_allocation_read(g, pl.allocation, 0, back, 1u << 20), 0);
	assert_memory_equal(data, back, 1u << 20);

	/* The daemon holds the VM to the same limit without the relay: audited refusals. */
	gs_client *vm = itest_connect(&f->d, "tok-vm1");
	uint64_t vdev;
	assert_int_equal(gs_device_create(vm, "direct", &vdev), 0);
	gs_allocation_placement vpl;
	itest_alloc(vm, vdev, 1u << 20, 0, 0, &vpl);
	gs_client_set_io_piece(vm, 0);
	int64_t errors = itest_audit_errors(f->d.db);
	assert_int_equal(gs_allocation_write(vm, vpl.allocation, 0, data, 200u * 1024u),
	                 GS_STATUS_TOO_LARGE);
	assert_int_equal(gs_allocation_read(vm, vpl.allocation, 0, back, 200u * 1024u),
	                 GS_STATUS_TOO_LARGE);
	assert_non_null(strstr(gs_client_message(vm), "max_message"));
	/* A process tenant keeps the daemon's limit. */
	gs_client *proc = itest_connect(&f->d, "tok-proc");
	gs_client_set_io_piece(proc, 0);
	uint64_t pdev;
	assert_int_equal(gs_device_create(proc, "p", &pdev), 0);
	gs_allocation_placement ppl;
	itest_alloc(proc, pdev, 1u << 20, 0, 0, &ppl);
	assert_int_equal(gs_allocation_write(proc, ppl.allocation, 0, data, 200u * 1024u), 0);
	itest_layout l;
	itest_layout_of(proc, &l);
	itest_audit_barrier(proc, itest_context(proc, pdev, 0, l.paging_node));
	assert_int_equal(itest_audit_errors(f->d.db), errors + 2);

	/* Bytes that are no request: the relay answers MALFORMED and goes on. */
	Gpusched__V1__Response *resp;
	assert_int_equal(itest_raw_call(f->relay_url[0], "\xff\xff\xff", 3, 10000, &resp), 0);
	assert_int_equal(resp->status, GS_STATUS_MALFORMED);
	gpusched__v1__response__free_unpacked(resp, NULL);
	gs_daemon_info *di;
	assert_int_equal(gs_info(g, &di), 0);
	assert_int_equal(strncmp(di->tenant, "vm1/", 4), 0); /* the guest's identity */
	gs_info_free(di);

	free(data);
	free(back);
	gs_close(proc);
	gs_close(vm);
	gs_close(g);
}

/* Connects to an ipc:// path as an nng REQ peer (the SP header exchange) and waits up to
 * timeout_ms for the other side to close the connection: true when it did. Plain sockets, so
 * nothing keeps redialing. */
static bool ipc_peer_closes(const char *path, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return false;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0}; /* REQ v0 */
	bool closed = false;
	if (write(fd, hello, sizeof(hello)) == (ssize_t)sizeof(hello)) {
		long long deadline = gs_test_now_ms() + timeout_ms;
		uint8_t buf[64];
		for (;;) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			long long left = deadline - gs_test_now_ms();
			if (left <= 0 || poll(&p, 1, (int)left) <= 0)
				break;
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n <= 0) {
				closed = true;
				break;
			}
		}
	}
	close(fd);
	return closed;
}

/* Retries Info through the relay until it is served (the relay reconnects on its own timer,
 * 0.1-2 s), within timeout_ms: the last status. */
static int info_until_served(gs_client *c, int timeout_ms)
{
	long long deadline = gs_test_now_ms() + timeout_ms;
	int rv;
	for (;;) {
		gs_daemon_info *di = NULL;
		rv = gs_info(c, &di);
		gs_info_free(di);
		if (rv != GS_STATUS_UNAVAILABLE || gs_test_now_ms() >= deadline)
			return rv;
		poll(NULL, 0, 50);
	}
}

static void test_host_down_unavailable_and_reconnect(void **state)
{
	fx *f = *state;
	/* A relay for a host that is not there yet. */
	char url[320];
	snprintf(url, sizeof(url), "ipc://%s/later.sock", f->d.dir);
	char tok[320];
	snprintf(tok, sizeof(tok), "%s/later.token", f->d.dir);
	FILE *t = fopen(tok, "w");
	fprintf(t, "tok-vm2\n");
	fclose(t);
	char rurl[320];
	snprintf(rurl, sizeof(rurl), "ipc://%s/later-relay.sock", f->d.dir);
	const char *const argv[] = {GS_RELAY_PATH,  "--host", url,           "--listen", rurl,
	                            "--token-file", tok,      "--wait-host", "0",        NULL};
	gs_testd relay;
	assert_int_equal(gs_testd_spawn(&relay, f->d.dir, "later-relay", argv), 0);
	gs_client *g;
	assert_int_equal(gs_connect(rurl, "", &g), 0);
	gs_client_set_timeout(g, ITEST_TIMEOUT_MS);
	gs_daemon_info *di = NULL;
	long long t0 = gs_test_now_ms();
	assert_int_equal(gs_info(g, &di), GS_STATUS_UNAVAILABLE);
	assert_true(gs_test_now_ms() - t0 < 5000); /* at once, not at the client's timeout */
	assert_non_null(strstr(gs_client_message(g), "relay"));

	/* The host comes up: the relay connects by itself and serves. */
	gs_testd host;
	const char *const hargs[] = {"--config", f->cfg.path, NULL};
	assert_int_equal(gs_testd_start(&host, hargs), 0);
	/* gs_testd_start picked its own socket: point the relay's address at it. */
	char path[320];
	snprintf(path, sizeof(path), "%s", url + strlen("ipc://"));
	assert_int_equal(symlink(host.url + strlen("ipc://"), path), 0);
	assert_int_equal(info_until_served(g, 20000), 0);

	/* A request on the link when the host dies is answered UNAVAILABLE at once. */
	uint64_t dev, sync;
	assert_int_equal(gs_device_create(g, "w", &dev), 0);
	assert_int_equal(gs_sync_create(g, dev, 0, &sync), 0);
	gs_async_queue *q;
	assert_int_equal(gs_async_queue_create(&q), 0);
	gs_async_opts o = {.queue = q};
	/* A wait that only the host's death ends. */
	assert_int_equal(gs_async_sync_wait(g, sync, 1, 60000, &o, NULL), 0);
	gs_testd_kill9(&host);
	t0 = gs_test_now_ms();
	gs_async_event ev;
	assert_int_equal(gs_async_poll(q, &ev, 1, 30000), 1);
	assert_int_equal(ev.status, GS_STATUS_UNAVAILABLE);
	assert_true(gs_test_now_ms() - t0 < 10000);
	gs_async_queue_destroy(q);

	gs_close(g);
	relay_stop(&relay);
	gs_testd_cleanup(&host);
}

/*
 * `gpusched submit --count` through a relay that is killed and stays down ends by itself
 * (issue 26, item 11): on main c4ca6f6 it started a packet wait after another for every packet
 * acknowledged, each waiting for a connection that never came back, and ran for hours.
 */
static void test_cli_through_dead_relay_ends(void **state)
{
	fx *f = *state;
	char out[400];
	snprintf(out, sizeof out, "%s/submit-count.out", f->d.dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(GS_CLI_PATH, GS_CLI_PATH, "--url", f->relay_url[1], "submit", "--node", "0",
		      "--count", "1000000", "--inflight", "64", (char *)NULL);
		_exit(127);
	}
	/* Once the stream runs (packets of vm2 in the audit file), the relay dies. */
	long long deadline = gs_test_now_ms() + 30000;
	while (itest_audit_int(f->d.db, "SELECT count(*) FROM packets WHERE tenant = 'vm2/%%'") <
	               200 &&
	       gs_test_now_ms() < deadline)
		poll(NULL, 0, 20);
	gs_testd_kill9(&f->relay[1]);
	/* It ends on its own, well before its requests' 30 s deadlines add up (a bound). */
	int status = -1;
	deadline = gs_test_now_ms() + 90000;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (gs_test_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("gpusched submit --count still ran 90 s after its relay died");
		}
		poll(NULL, 0, 20);
	}
	assert_true(WIFEXITED(status));
	assert_int_not_equal(WEXITSTATUS(status), 0);
	char text[4096] = "";
	FILE *fp = fopen(out, "r");
	assert_non_null(fp);
	size_t n = fread(text, 1, sizeof text - 1, fp);
	text[n] = '\0';
	fclose(fp);
	if (!strstr(text, "submitted"))
		fail_msg("no summary:\n%s", text);
	/* A new relay serves the VM again. */
	assert_int_equal(relay_start(f, 1, f->tls_url), 0);
}

static void test_cut_one_vm_link_mid_stream(void **state)
{
	fx *f = *state;
	guest other;
	guest_start(&other, f->relay_url[0]);
	/* VM 2 streams submissions; its relay is killed under them. */
	gs_client *g = guest_connect(f, 1);
	gs_client_set_timeout(g, 5000);
	uint64_t dev;
	assert_int_equal(gs_device_create(g, "stream", &dev), 0);
	itest_layout l;
	itest_layout_of(g, &l);
	uint64_t ctx = itest_context(g, dev, 0, l.paging_node);
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	gs_dmabuf_nop(&buf);
	enum { N = 256 };
	gs_async_queue *q;
	assert_int_equal(gs_async_queue_create(&q), 0);
	gs_async_opts o = {.queue = q};
	int ok = 0, failed = 0;
	/* Half the stream is served; the other half is on its way when the relay dies. */
	for (int half = 0; half < 2; half++) {
		for (int i = 0; i < N / 2; i++)
			assert_int_equal(gs_async_submit(g, ctx, &buf, 0, &o, NULL), 0);
		if (half == 1)
			gs_testd_kill9(&f->relay[1]);
		while (ok + failed < (half + 1) * N / 2) {
			gs_async_event ev[64];
			int n = gs_async_poll(q, ev, 64, 30000);
			assert_true(n > 0);
			for (int i = 0; i < n; i++)
				ev[i].status == 0 ? ok++ : failed++;
		}
		if (half == 0)
			assert_int_equal(ok, N / 2);
	}
	/* Every request completed exactly once; nothing more is served on the dead link. */
	assert_int_equal(gs_async_poll(q, NULL, 0, 0), GS_ERR_INVALID);
	assert_int_equal(ok + failed, N);
	gs_daemon_info *gone = NULL;
	assert_int_not_equal(gs_info(g, &gone), 0);
	gs_async_queue_destroy(q);
	gs_dmabuf_free(&buf);
	gs_close(g);
	/* The other VMs go on; the audit file still verifies. */
	assert_true(guest_check(&other));
	assert_int_equal(guest_stop(&other), 0);
	gs_client *vm3 = guest_connect(f, 2);
	gs_daemon_info *di;
	assert_int_equal(gs_info(vm3, &di), 0);
	gs_info_free(di);
	gs_close(vm3);
	char *av[] = {(char *)GS_CLI_PATH, (char *)"audit", (char *)"verify", f->d.db, NULL};
	itest_run r;
	itest_run_argv(av, 60000, &r);
	if (r.exit_code != 0)
		fail_msg("audit verify: %d\n%s%s", r.exit_code, r.out, r.err);
	itest_run_free(&r);
	/* A new relay for the VM serves it again. */
	assert_int_equal(relay_start(f, 1, f->tls_url), 0);
	g = guest_connect(f, 1);
	assert_int_equal(info_until_served(g, 20000), 0);
	gs_close(g);
}

/*
 * One guest cannot take the relay from the others: past --guest-connections its next
 * connections are closed, past --guest-inflight its requests are answered BUSY, while another
 * guest of the same VM is served.
 */
static void test_guest_limits(void **state)
{
	fx *f = *state;
	char tok[320], url[320];
	snprintf(tok, sizeof(tok), "%s/vm3.token", f->d.dir);
	snprintf(url, sizeof(url), "ipc://%s/limits.sock", f->d.dir);
	const char *const argv[] = {GS_RELAY_PATH,
	                            "--host",
	                            f->tls_url,
	                            "--listen",
	                            url,
	                            "--token-file",
	                            tok,
	                            "--no-sweep",
	                            "--guest-connections",
	                            "3",
	                            "--guest-inflight",
	                            "3",
	                            NULL};
	gs_testd relay;
	assert_int_equal(gs_testd_spawn(&relay, f->d.dir, "limits-relay", argv), 0);
	gs_client *c[3];
	for (int i = 0; i < 3; i++) {
		assert_int_equal(gs_connect(url, "", &c[i]), 0);
		gs_client_set_timeout(c[i], ITEST_TIMEOUT_MS);
	}
	gs_daemon_info *di = NULL;
	assert_int_equal(gs_info(c[2], &di), 0); /* all three are counted by now */
	gs_info_free(di);
	/* The fourth connection of this process is closed by the relay. */
	assert_true(ipc_peer_closes(url + strlen("ipc://"), 10000));
	/* Another guest process is. */
	guest other;
	guest_start(&other, url);

	uint64_t dev, sync;
	assert_int_equal(gs_device_create(c[0], "held", &dev), 0);
	assert_int_equal(gs_sync_create(c[0], dev, 0, &sync), 0);
	gs_async_queue *q;
	assert_int_equal(gs_async_queue_create(&q), 0);
	gs_async_opts o = {.queue = q};
	for (int i = 0; i < 3; i++)
		assert_int_equal(gs_async_sync_wait(c[0], sync, 1, 1000, &o, NULL), 0);
	/* Three of its requests wait on the host: its fourth is BUSY (sent on the same
	 * connection, so the relay reads it after the three)... */
	assert_int_equal(gs_info(c[0], &di), GS_STATUS_BUSY);
	assert_null(di);
	assert_non_null(strstr(gs_client_message(c[0]), "guest-inflight"));
	/* ...while the other guest is served. */
	assert_true(guest_check(&other));
	/* The waits end (TIMEOUT in the daemon) and the guest is served again. */
	gs_async_event ev[3];
	int got = 0;
	while (got < 3) {
		int n = gs_async_poll(q, ev + got, (size_t)(3 - got), 30000);
		assert_true(n > 0);
		got += n;
	}
	for (int i = 0; i < 3; i++)
		assert_int_equal(ev[i].status, GS_STATUS_TIMEOUT);
	assert_int_equal(gs_info(c[1], &di), 0);
	gs_info_free(di);
	gs_async_queue_destroy(q);
	assert_int_equal(guest_stop(&other), 0);
	for (int i = 0; i < 3; i++)
		gs_close(c[i]);
	relay_stop(&relay);
}

/* ---- virtual machines in network namespaces ---- */

#define NNS 2

typedef struct netvm {
	char ns[48], host_if[32], vm_if[32];
	char host_ip[32];
} netvm;

static const char *ip_tool(void)
{
	return access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip";
}

/* A network namespace for VM i, joined to this one by a veth pair 10.213.(i+1).0/24: the
 * host side .1, the VM side .2. False when namespaces cannot be made here. */
static bool netvm_make(netvm *v, int i)
{
	int id = (int)(getpid() % 100000);
	i %= 10; /* interface names stay under IFNAMSIZ */
	snprintf(v->ns, sizeof(v->ns), "gsvm%d-%d", id, i);
	snprintf(v->host_if, sizeof(v->host_if), "gsh%d%d", id, i);
	snprintf(v->vm_if, sizeof(v->vm_if), "gsv%d%d", id, i);
	snprintf(v->host_ip, sizeof(v->host_ip), "10.213.%d.1", i + 1);
	const char *ip = ip_tool();
	return itest_sh("%s netns add %s 2>/dev/null", ip, v->ns) == 0 &&
	       itest_sh("%s link add %s type veth peer name %s && %s link set %s netns %s &&"
	                " %s addr add %s/24 dev %s && %s link set %s up &&"
	                " %s -n %s addr add 10.213.%d.2/24 dev %s && %s -n %s link set %s up &&"
	                " %s -n %s link set lo up",
	                ip, v->host_if, v->vm_if, ip, v->vm_if, v->ns, ip, v->host_ip, v->host_if,
	                ip, v->host_if, ip, v->ns, i + 1, v->vm_if, ip, v->ns, v->vm_if, ip,
	                v->ns) == 0;
}

static void netvm_free(netvm *v)
{
	itest_sh("%s link del %s 2>/dev/null; %s netns del %s 2>/dev/null", ip_tool(), v->host_if,
	         ip_tool(), v->ns);
}

/*
 * Two virtual machines, each a network namespace of its own reached over a veth pair, each
 * with its relay inside dialing the daemon's listener for that VM over mutual TLS (the VM's
 * certificate admitted for its own tenant only). Pulling one VM's link (its veth down) while a
 * request is on it: the relay's heartbeat notices, the request is answered UNAVAILABLE, the
 * other VM is served all along, the link comes back and the VM is served again with its
 * guest's objects intact, and the audit file verifies. Skipped where namespaces cannot be
 * made (not root, no iproute2).
 */
static void test_vms_in_network_namespaces(void **state)
{
	(void)state;
	netvm vm[NNS];
	int made = 0;
	while (made < NNS && netvm_make(&vm[made], made))
		made++;
	if (made < NNS) {
		for (int i = 0; i <= made && i < NNS; i++)
			netvm_free(&vm[i]);
		fprintf(stderr, "test_vms_in_network_namespaces: skipped: cannot make network"
		                " namespaces here (needs root and iproute2)\n");
		skip();
	}
	itest_pki k;
	itest_pki_make(&k);
	char server[128];
	itest_pki_cert(&k, "server-ns", "IP:10.213.1.1,IP:10.213.2.1", server, sizeof(server));
	setenv("GPUSCHED_TLS_CA", k.ca, 1);
	setenv("GPUSCHED_TLS_CERT_KEY", k.client, 1);
	char dir[] = "/tmp/gs-netvm-XXXXXX";
	assert_non_null(mkdtemp(dir));
	unsigned port = itest_free_port();
	char json[2048];
	snprintf(json, sizeof(json),
	         "{\"tls\": {\"cert_key_file\": \"%s\"}, \"listen\": [\"ipc://%s/d.sock\","
	         " {\"url\": \"tls+tcp://%s:%u\", \"ca_file\": \"%s\", \"tenants\": [\"vm1\"]},"
	         " {\"url\": \"tls+tcp://%s:%u\", \"ca_file\": \"%s\", \"tenants\": [\"vm2\"]}],"
	         " \"tenants\": [{\"name\": \"vm1\", \"token\": \"tok-vm1\", \"kind\": \"vm\"},"
	         " {\"name\": \"vm2\", \"token\": \"tok-vm2\", \"kind\": \"vm\"}]}",
	         server, dir, vm[0].host_ip, port, k.ca, vm[1].host_ip, port, k.ca);
	itest_config cfg;
	assert_int_equal(itest_config_write(&cfg, json), 0);
	gs_testd d;
	char db[96];
	snprintf(db, sizeof(db), "%s/audit.db", dir);
	const char *const dargs[] = {GS_DAEMON_PATH, "--config", cfg.path, "--db", db, NULL};
	assert_int_equal(gs_testd_spawn(&d, dir, "daemon", dargs), 0);
	snprintf(d.db, sizeof(d.db), "%s", db);

	gs_testd relay[NNS];
	char rurl[NNS][128], host[NNS][64], tok[NNS][96];
	for (int i = 0; i < NNS; i++) {
		snprintf(tok[i], sizeof(tok[i]), "%s/vm%d.token", dir, i + 1);
		FILE *t = fopen(tok[i], "w");
		assert_non_null(t);
		fprintf(t, "%s\n", vm_tokens[i]);
		fclose(t);
		snprintf(rurl[i], sizeof(rurl[i]), "ipc://%s/vm%d.sock", dir, i + 1);
		snprintf(host[i], sizeof(host[i]), "tls+tcp://%s:%u", vm[i].host_ip, port);
		char name[16];
		snprintf(name, sizeof(name), "relay%d", i + 1);
		const char *const argv[] = {
		        ip_tool(), "netns",          "exec",     vm[i].ns, GS_RELAY_PATH,
		        "--host",  host[i],          "--listen", rurl[i],  "--token-file",
		        tok[i],    "--heartbeat-ms", "1000",     NULL};
		assert_int_equal(gs_testd_spawn(&relay[i], dir, name, argv), 0);
	}
	guest g[NNS];
	for (int i = 0; i < NNS; i++)
		guest_start(&g[i], rurl[i]);
	/* VM 2 sees nothing of VM 1's guest. */
	gs_client *c2;
	assert_int_equal(gs_connect(rurl[1], "", &c2), 0);
	gs_client_set_timeout(c2, ITEST_TIMEOUT_MS);
	assert_invisible(c2, g[0].alloc, g[0].dev);

	/* A request on VM 1's link when it is pulled: answered UNAVAILABLE once the heartbeat
	 * misses twice, while VM 2 is served. */
	gs_client *c1;
	assert_int_equal(gs_connect(rurl[0], "", &c1), 0);
	gs_client_set_timeout(c1, ITEST_TIMEOUT_MS);
	uint64_t dev, sync;
	assert_int_equal(gs_device_create(c1, "held", &dev), 0);
	assert_int_equal(gs_sync_create(c1, dev, 0, &sync), 0);
	gs_async_queue *q;
	assert_int_equal(gs_async_queue_create(&q), 0);
	gs_async_opts o = {.queue = q};
	assert_int_equal(gs_async_sync_wait(c1, sync, 1, 60000, &o, NULL), 0);
	assert_int_equal(itest_sh("%s link set %s down", ip_tool(), vm[0].host_if), 0);
	long long t0 = gs_test_now_ms();
	gs_async_event ev;
	assert_int_equal(gs_async_poll(q, &ev, 1, 30000), 1);
	assert_int_equal(ev.status, GS_STATUS_UNAVAILABLE);
	assert_true(gs_test_now_ms() - t0 < 20000);
	gs_async_queue_destroy(q);
	assert_true(guest_check(&g[1]));
	/* The link comes back: the relay dials again and VM 1's guest still has its bytes. */
	assert_int_equal(itest_sh("%s link set %s up", ip_tool(), vm[0].host_if), 0);
	assert_int_equal(info_until_served(c1, 30000), 0);
	assert_true(guest_check(&g[0]));

	gs_close(c1);
	gs_close(c2);
	for (int i = 0; i < NNS; i++) {
		assert_int_equal(guest_stop(&g[i]), 0);
		relay_stop(&relay[i]);
	}
	char *av[] = {(char *)GS_CLI_PATH, (char *)"audit", (char *)"verify", db, NULL};
	itest_run r;
	itest_run_argv(av, 60000, &r);
	if (r.exit_code != 0)
		fail_msg("audit verify: %d\n%s%s", r.exit_code, r.out, r.err);
	itest_run_free(&r);
	assert_int_equal(gs_testd_stop(&d), 0);
	gs_testd_cleanup(&d);
	itest_config_cleanup(&cfg);
	for (int i = 0; i < NNS; i++)
		netvm_free(&vm[i]);
	itest_sh("rm -rf '%s'", k.dir);
	unsetenv("GPUSCHED_TLS_CA");
	unsetenv("GPUSCHED_TLS_CERT_KEY");
}

/* The relay's command line: --help (exit 0), a missing --host and a bad value (exit 2). */
static void test_relay_command_line(void **state)
{
	(void)state;
	static const struct {
		const char *a1, *a2, *a3, *a4;
		int exit_code;
		const char *says;
	} cases[] = {
	        {"--help", NULL, NULL, NULL, 0, "--heartbeat-ms"},
	        {"--version", NULL, NULL, NULL, 0, "gpusched-relay 0."},
	        {"--listen", "ipc:///tmp/x", NULL, NULL, 2, "--host URL is required"},
	        {"--host", "ipc:///tmp/x", "--mode", "999", 2, "octal"},
	        {"--host", "ipc:///tmp/x", "--max-message", "12", 2, "1024"},
	        {"--host", "ipc:///tmp/x", "--log-level", "loud", 2, "log level"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[] = {(char *)GS_RELAY_PATH, (char *)cases[i].a1, (char *)cases[i].a2,
		                (char *)cases[i].a3,   (char *)cases[i].a4, NULL};
		itest_run r;
		itest_run_argv(argv, 10000, &r);
		if (r.exit_code != cases[i].exit_code ||
		    (!strstr(r.out, cases[i].says) && !strstr(r.err, cases[i].says)))
			fail_msg("gpusched-relay %s: exit %d, want %d and \"%s\"\n%s%s",
			         cases[i].a1, r.exit_code, cases[i].exit_code, cases[i].says, r.out,
			         r.err);
		itest_run_free(&r);
	}
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--guest") == 0)
		return guest_main(argv[2]);
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_guests_isolated, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_guest_exit_releases_only_its_objects, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_message_limit, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_host_down_unavailable_and_reconnect, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_cut_one_vm_link_mid_stream, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cli_through_dead_relay_ends, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_guest_limits, setup, teardown),
	        cmocka_unit_test(test_vms_in_network_namespaces),
	        cmocka_unit_test(test_relay_command_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
