/*
 * bench_attack: what an attacking tenant costs another tenant.
 *
 * One real gpuschedd (default limits, wall clock, emu backend) with two tenants, "attacker" and
 * "victim", listening on its ipc:// socket and on tcp://127.0.0.1. The victim's figure is the
 * round trip of an Info request; each attack phase is compared with a baseline measured in the
 * same run:
 *
 *   baseline          Info over the victim's ipc connection, nothing else running;
 *   stall             the same while the attacker holds every request the daemon lets wait:
 *                     it sends --stall requests that would wait (AllocationRead of an
 *                     allocation its own queued packet holds, SyncWait with the longest
 *                     timeout) over 4 connections, once (attack 1 of docs/hardening.md);
 *   request-flood     the same while the attacker keeps --flood such requests in flight and
 *                     sends each again as soon as it is answered (refused BUSY, mostly);
 *   unauth-flood      the same while two attacker threads send ~8 MiB SubmitBatch messages with
 *                     an unknown token, one after the other (attack 2);
 *   baseline-connect  a new tcp connection, Info, close — nothing else running;
 *   fd-exhaustion     the same while the attacker holds up to --idle idle connections from
 *                     127.0.0.2 (attack 6).
 *   baseline-submit   a NOP submitted and waited for in one round trip (the victim's), after
 *                     the attacker filled the file with --history-packets packets;
 *   history-readers   the same while six attacker clients ask for 10,000 rows of history
 *                     each, again and again (issue 26, item 7: target p50 at most 2x).
 *
 * Then attack 3: the daemon's file-size limit is set to 4 KiB (no audit commit can succeed),
 * the victim submits --packets FILLs, each to its own range with its own pattern, the limit is
 * lifted, and every range is read back: a refused packet whose pattern is in memory ran
 * without a committed record (the target is 0).
 *
 * Every phase stops at --samples samples or --seconds, whichever comes first; the attacker's
 * threads stop and are joined at the end of each phase. With --json, one JSON object per line on
 * stdout (the table then goes to stderr).
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "isa.h"
#include "itest.h"
#include "testd.h"

#define ATTACKER        "attacker-token"
#define VICTIM          "victim-token"
#define CALL_TIMEOUT_MS 30000u
#define FLOOD_CONNS     4
#define UNAUTH_THREADS  2
#define MAX_PHASES      10
#define HISTORY_READERS 6

typedef struct options {
	uint64_t samples;
	double seconds;
	uint32_t stall; /* waiting requests the attacker sends once in the stall phase */
	uint32_t flood; /* attacker requests kept in flight in the request-flood phase */
	uint32_t idle;  /* idle connections the attacker tries to hold */
	uint32_t packets;
	uint32_t history_packets; /* the attacker's packets in the file before the history phase */
	bool json;
} options;

typedef struct phase {
	const char *name;
	const char *baseline; /* the phase it is compared with; NULL for a baseline */
	size_t n;
	double p50_us, p99_us, max_us;
	uint64_t failures; /* victim calls that did not answer OK */
	char attack[256];  /* what the attacker achieved, in words */
} phase;

static options g_opt;
static gs_testd g_daemon;
static char g_tcp_url[64];
static phase g_phases[MAX_PHASES];
static int g_nphases;

static void die(const char *what)
{
	fprintf(stderr, "bench_attack: %s\n", what);
	gs_testd_cleanup(&g_daemon);
	exit(1);
}

/* ---- the victim's samples ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

typedef int (*sample_fn)(void *arg);

/* One Info over an open connection. */
static int info_once(void *arg)
{
	gs_daemon_info *info = NULL;
	int rv = gs_info((gs_client *)arg, &info);
	gs_info_free(info);
	return rv;
}

/* A new tcp connection, one Info, close. */
static int connect_once(void *arg)
{
	(void)arg;
	gs_client *c = NULL;
	char why[128];
	if (gs_connect_ex(g_tcp_url, VICTIM, &c, why, sizeof(why)) != 0)
		return -1;
	gs_client_set_timeout(c, CALL_TIMEOUT_MS);
	int rv = info_once(c);
	gs_close(c);
	return rv;
}

static phase *measure(const char *name, const char *baseline, sample_fn fn, void *arg)
{
	if (g_nphases == MAX_PHASES)
		die("too many phases");
	phase *ph = &g_phases[g_nphases++];
	*ph = (phase){.name = name, .baseline = baseline};
	double *v = malloc(g_opt.samples * sizeof(*v));
	if (!v)
		die("out of memory");
	double end = gs_test_mono_s() + g_opt.seconds;
	while (ph->n < g_opt.samples && gs_test_mono_s() < end) {
		uint64_t t0 = gs_test_mono_ns();
		int rv = fn(arg);
		uint64_t t1 = gs_test_mono_ns();
		if (rv != 0)
			ph->failures++;
		v[ph->n++] = (double)(t1 - t0) / 1e3;
	}
	qsort(v, ph->n, sizeof(*v), cmp_double);
	ph->p50_us = pct(v, ph->n, 0.50);
	ph->p99_us = pct(v, ph->n, 0.99);
	ph->max_us = ph->n ? v[ph->n - 1] : 0;
	free(v);
	return ph;
}

/* ---- a tenant's objects ---- */

typedef struct world {
	gs_client *c;
	itest_layout lay;
	uint64_t dev, ctx, alloc;
} world;

static void world_open(world *w, const char *token, uint64_t alloc_size)
{
	char why[256];
	if (gs_connect_ex(g_daemon.url, token, &w->c, why, sizeof(why)) != 0)
		die(why);
	gs_client_set_timeout(w->c, CALL_TIMEOUT_MS);
	itest_layout_of(w->c, &w->lay);
	if (gs_device_create(w->c, "bench-attack", &w->dev) != 0)
		die("device create");
	w->ctx = itest_context(w->c, w->dev, 0, w->lay.paging_node);
	gs_allocation_placement pl;
	itest_alloc(w->c, w->dev, alloc_size, 0, 0, &pl);
	w->alloc = pl.allocation;
}

static void world_close(world *w)
{
	gs_device_destroy(w->c, w->dev);
	gs_close(w->c);
}

/* ---- attack 1: requests that wait ---- */

typedef struct flood_slot {
	nng_ctx ctx;
	nng_aio *aio;
	bool receiving;
	uint32_t index;
	struct flood *f;
} flood_slot;

typedef struct flood {
	atomic_bool stop;
	bool resend; /* send again as soon as answered (a request flood), or send once (a stall) */
	uint64_t alloc, sync;
	nng_socket socks[FLOOD_CONNS];
	flood_slot *slots;
	uint32_t nslots;
	atomic_uint_fast64_t sent, by_status[128];
} flood;

/* Alternately an AllocationRead of the held allocation and a SyncWait that never ends. */
static nng_msg *flood_msg(flood *f, uint32_t index, uint64_t id)
{
	Gpusched__V1__Request req = GPUSCHED__V1__REQUEST__INIT;
	Gpusched__V1__AllocationReadRequest rd = GPUSCHED__V1__ALLOCATION_READ_REQUEST__INIT;
	Gpusched__V1__SyncWaitRequest sw = GPUSCHED__V1__SYNC_WAIT_REQUEST__INIT;
	req.id = id;
	req.token = ATTACKER;
	if (index % 2) {
		sw.sync = f->sync;
		sw.value = 1;
		sw.timeout_ms = UINT32_MAX;
		req.body_case = GPUSCHED__V1__REQUEST__BODY_SYNC_WAIT;
		req.sync_wait = &sw;
	} else {
		rd.allocation = f->alloc;
		rd.size = 16;
		req.body_case = GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ;
		req.allocation_read = &rd;
	}
	size_t len;
	void *buf = itest_pack(&req, &len);
	nng_msg *m = NULL;
	if (nng_msg_alloc(&m, len) == 0)
		memcpy(nng_msg_body(m), buf, len);
	free(buf);
	return m;
}

static void flood_send(flood_slot *s)
{
	nng_msg *m = flood_msg(s->f, s->index, atomic_fetch_add(&s->f->sent, 1) + 1);
	if (!m)
		return;
	s->receiving = false;
	nng_aio_set_msg(s->aio, m);
	nng_ctx_send(s->ctx, s->aio);
}

/* Runs on nng's threads: a send completed (now receive), or an answer came (count, resend). */
static void flood_cb(void *arg)
{
	flood_slot *s = arg;
	if (nng_aio_result(s->aio) != 0) {
		if (!s->receiving)
			nng_msg_free(nng_aio_get_msg(s->aio));
		return; /* closed at the end of the phase */
	}
	if (!s->receiving) {
		s->receiving = true;
		nng_ctx_recv(s->ctx, s->aio);
		return;
	}
	nng_msg *m = nng_aio_get_msg(s->aio);
	Gpusched__V1__Response *r =
	        gpusched__v1__response__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	nng_msg_free(m);
	atomic_fetch_add(&s->f->by_status[r ? (unsigned)r->status % 128 : 127], 1);
	if (r)
		gpusched__v1__response__free_unpacked(r, NULL);
	if (s->f->resend && !atomic_load(&s->f->stop))
		flood_send(s);
}

static void flood_start(flood *f)
{
	f->slots = calloc(f->nslots, sizeof(*f->slots));
	if (!f->slots)
		die("out of memory");
	for (int i = 0; i < FLOOD_CONNS; i++)
		if (nng_req0_open(&f->socks[i]) != 0 ||
		    nng_dial(f->socks[i], g_daemon.url, NULL, 0))
			die("attacker cannot connect");
	for (uint32_t i = 0; i < f->nslots; i++) {
		flood_slot *s = &f->slots[i];
		s->f = f;
		s->index = i;
		if (nng_ctx_open(&s->ctx, f->socks[i % FLOOD_CONNS]) != 0 ||
		    nng_aio_alloc(&s->aio, flood_cb, s) != 0)
			die("nng");
		/* The answer may take as long as the phase: no resend by nng. */
		nng_ctx_set_ms(s->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
		flood_send(s);
	}
}

static void flood_stop(flood *f)
{
	atomic_store(&f->stop, true);
	for (uint32_t i = 0; i < f->nslots; i++) {
		nng_aio_stop(f->slots[i].aio); /* cancels, and waits for its callback */
		nng_aio_free(f->slots[i].aio);
		nng_ctx_close(f->slots[i].ctx);
	}
	for (int i = 0; i < FLOOD_CONNS; i++)
		nng_close(f->socks[i]);
	free(f->slots);
}

/* Attack 1: the attacker's requests wait for its own held allocation and sync object. With
 * resend false it sends --stall requests once and holds every one the daemon lets wait (the
 * stall); with resend true it keeps --flood in flight and sends each again as soon as it is
 * answered (a request flood). */
static void attack_waits(gs_client *victim, bool resend)
{
	world a;
	world_open(&a, ATTACKER, 4096);
	/* The attacker's packet holds its allocation until its own sync object is signalled. */
	uint64_t sync;
	if (gs_sync_create(a.c, a.dev, 0, &sync) != 0)
		die("sync create");
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	gs_submit_result held;
	if (gs_dmabuf_wait(&b, sync, 1) != 0 || gs_dmabuf_fill(&b, a.alloc, 0, 64, 1) != 0 ||
	    gs_submit(a.c, a.ctx, &b, 0, &held) != 0)
		die("attacker submit");
	gs_dmabuf_free(&b);

	static flood f;
	memset(&f, 0, sizeof(f));
	f.alloc = a.alloc;
	f.sync = sync;
	f.resend = resend;
	f.nslots = resend ? g_opt.flood : g_opt.stall;
	flood_start(&f);
	uint64_t refused = 0;
	if (!resend) {
		/* Every request the daemon does not let wait is refused (past 1000 refusals in a
		 * second, 100 ms late: docs/hardening.md, Floods): wait (bounded) until those
		 * answers stop coming, so the victim meets the attacker at its maximum. No event
		 * marks the last refusal, hence the 200 ms polls. */
		double until = gs_test_mono_s() + 20;
		uint64_t before = (uint64_t)-1, now = 0;
		while (gs_test_mono_s() < until) {
			now = 0;
			for (int i = 0; i < 128; i++)
				now += atomic_load(&f.by_status[i]);
			if (now == before)
				break;
			before = now;
			poll(NULL, 0, 200);
		}
		refused = now;
	}
	phase *ph = measure(resend ? "request-flood" : "stall", "baseline", info_once, victim);
	flood_stop(&f);
	uint64_t answered = 0;
	for (int i = 0; i < 128; i++)
		answered += atomic_load(&f.by_status[i]);
	if (resend)
		snprintf(ph->attack, sizeof(ph->attack),
		         "%u attacker requests kept in flight on %d connections, each sent again "
		         "when answered: %" PRIu64 " answered during the phase (%" PRIu64
		         " BUSY, %" PRIu64 " QUOTA_EXCEEDED)",
		         f.nslots, FLOOD_CONNS, answered,
		         (uint64_t)atomic_load(&f.by_status[GS_STATUS_BUSY]),
		         (uint64_t)atomic_load(&f.by_status[GS_STATUS_QUOTA_EXCEEDED]));
	else
		snprintf(ph->attack, sizeof(ph->attack),
		         "%u waiting requests sent on %d connections: %" PRIu64 " refused (%" PRIu64
		         " BUSY, %" PRIu64 " QUOTA_EXCEEDED), %" PRIu64
		         " held waiting through the phase",
		         f.nslots, FLOOD_CONNS, refused,
		         (uint64_t)atomic_load(&f.by_status[GS_STATUS_BUSY]),
		         (uint64_t)atomic_load(&f.by_status[GS_STATUS_QUOTA_EXCEEDED]),
		         (uint64_t)f.nslots - answered);
	if (gs_sync_signal(a.c, sync, 1) != 0 ||
	    gs_packet_wait(a.c, held.packet, CALL_TIMEOUT_MS, NULL, NULL) != 0)
		die("the attacker's held packet did not finish");
	world_close(&a);
}

/* ---- attack 2: large unauthenticated requests ---- */

typedef struct unauth {
	atomic_bool stop;
	const uint8_t *msg;
	size_t len;
	atomic_uint_fast64_t sent, too_large, other;
} unauth;

static void *unauth_main(void *arg)
{
	unauth *u = arg;
	while (!atomic_load(&u->stop)) {
		Gpusched__V1__Response *r = NULL;
		int rv = itest_raw_call(g_daemon.url, u->msg, u->len, CALL_TIMEOUT_MS, &r);
		atomic_fetch_add(&u->sent, 1);
		if (rv == 0 && r && (int)r->status == GS_STATUS_TOO_LARGE)
			atomic_fetch_add(&u->too_large, 1);
		else
			atomic_fetch_add(&u->other, 1);
		if (r)
			gpusched__v1__response__free_unpacked(r, NULL);
	}
	return NULL;
}

static long daemon_hwm_kib(void)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)g_daemon.pid);
	FILE *fp = fopen(path, "r");
	long kib = -1;
	while (fp && fgets(line, sizeof(line), fp))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	if (fp)
		fclose(fp);
	return kib;
}

static void attack_unauthenticated(gs_client *victim)
{
	static unauth u;
	memset(&u, 0, sizeof(u));
	uint8_t *batch = itest_huge_batch((8u << 20) / 2 - 64, "wrong-token", &u.len);
	if (!batch)
		die("out of memory");
	u.msg = batch;
	long hwm0 = daemon_hwm_kib();
	pthread_t th[UNAUTH_THREADS];
	for (int i = 0; i < UNAUTH_THREADS; i++)
		if (pthread_create(&th[i], NULL, unauth_main, &u) != 0)
			die("pthread_create");
	phase *ph = measure("unauth-flood", "baseline", info_once, victim);
	atomic_store(&u.stop, true);
	for (int i = 0; i < UNAUTH_THREADS; i++)
		pthread_join(th[i], NULL);
	free(batch);
	long hwm1 = daemon_hwm_kib();
	snprintf(ph->attack, sizeof(ph->attack),
	         "%" PRIu64 " messages of %.1f MiB with an unknown token from %d threads (%" PRIu64
	         " TOO_LARGE, %" PRIu64 " other); daemon peak memory +%ld MiB",
	         (uint64_t)atomic_load(&u.sent), (double)u.len / (1 << 20), UNAUTH_THREADS,
	         (uint64_t)atomic_load(&u.too_large), (uint64_t)atomic_load(&u.other),
	         (hwm1 - hwm0) / 1024);
}

/* ---- attack 6: idle connections ---- */

/* Still open: no EOF or reset within timeout_ms. */
static bool still_open(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	if (poll(&p, 1, timeout_ms) <= 0)
		return true;
	char c;
	return recv(fd, &c, 1, MSG_DONTWAIT) > 0;
}

static void attack_fds(uint16_t port)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	int *fds = malloc(g_opt.idle * sizeof(*fds));
	if (!fds)
		die("out of memory");
	uint32_t opened = 0, kept = 0;
	for (uint32_t i = 0; i < g_opt.idle; i++) {
		fds[i] = itest_idle_peer(port);
		opened += fds[i] >= 0;
	}
	/* The daemon closes those over its limits as it accepts them: give the last ones a
	 * moment (bounded) to be closed before counting. */
	for (uint32_t i = 0; i < g_opt.idle; i++)
		if (fds[i] >= 0)
			kept += still_open(fds[i], i + 1 == g_opt.idle ? 500 : 0);
	phase *ph = measure("fd-exhaustion", "baseline-connect", connect_once, NULL);
	snprintf(ph->attack, sizeof(ph->attack),
	         "%u idle connections attempted from 127.0.0.2, %u completed the handshake, %u "
	         "left open by the daemon",
	         g_opt.idle, opened, kept);
	for (uint32_t i = 0; i < g_opt.idle; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

/* ---- attack 3: the audit cannot commit ---- */

typedef struct audit_result {
	uint32_t submitted, refused, accepted, other;
	uint32_t ran_unrecorded; /* refused, yet its FILL is in memory */
	uint32_t accepted_unrecorded;
	bool ok;
} audit_result;

static int fill(world *w, uint64_t offset, uint32_t pattern, gs_submit_result *r)
{
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	int rv = gs_dmabuf_fill(&b, w->alloc, offset, 256, pattern);
	if (rv == 0)
		rv = gs_submit(w->c, w->ctx, &b, 0, r);
	gs_dmabuf_free(&b);
	return rv;
}

static bool set_fsize(rlim_t limit)
{
	struct rlimit rl = {.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
	return prlimit(g_daemon.pid, RLIMIT_FSIZE, &rl, NULL) == 0;
}

static void attack_audit(audit_result *out)
{
	*out = (audit_result){0};
	uint32_t n = g_opt.packets;
	world w;
	world_open(&w, VICTIM, (uint64_t)(n + 1) * 256);
	uint8_t *status = calloc(n, 1);
	uint64_t *ids = calloc(n, sizeof(*ids));
	if (!status || !ids || !set_fsize(4096))
		die("cannot set up the full disk");
	for (uint32_t i = 0; i < n; i++) {
		gs_submit_result r = {0};
		int rv = fill(&w, (uint64_t)i * 256, 0x01000000u + i, &r);
		out->submitted++;
		status[i] = rv == 0 ? 1 : rv == GS_STATUS_AUDIT_UNAVAILABLE ? 2 : 3;
		ids[i] = r.packet;
		out->accepted += rv == 0;
		out->refused += rv == GS_STATUS_AUDIT_UNAVAILABLE;
		out->other += rv != 0 && rv != GS_STATUS_AUDIT_UNAVAILABLE;
	}
	if (!set_fsize(RLIM_INFINITY))
		die("cannot lift the file-size limit");
	/* Accepted again (bounded): the refusals' own records probe the audit. */
	gs_submit_result last = {0};
	int rv = -1;
	for (int tries = 0; tries < 1000 && rv != 0; tries++)
		rv = fill(&w, (uint64_t)n * 256, 0x0A0A0A0Au, &last);
	if (rv != 0 || gs_packet_wait(w.c, last.packet, CALL_TIMEOUT_MS, NULL, NULL) != 0) {
		world_close(&w);
		free(status);
		free(ids);
		return;
	}
	uint8_t got[256], want[256];
	for (uint32_t i = 0; i < n; i++) {
		if (gs_allocation_read(w.c, w.alloc, (uint64_t)i * 256, got, sizeof(got)) != 0)
			die("read back");
		gs_isa_fill(want, sizeof(want), 0x01000000u + i);
		bool present = memcmp(got, want, sizeof(got)) == 0;
		if (status[i] != 1 && present)
			out->ran_unrecorded++;
		if (status[i] == 1 &&
		    itest_audit_int(g_daemon.db,
		                    "SELECT count(*) FROM packets WHERE packet = %" PRIu64,
		                    ids[i]) != 1)
			out->accepted_unrecorded++;
	}
	out->ok = true;
	world_close(&w);
	free(status);
	free(ids);
}

/* ---- attack 7: history queries as a weapon ---- */

/* The victim's figure for this attack: a NOP submitted and waited for, in one round trip. */
static int submit_once(void *arg)
{
	world *w = arg;
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	gs_dmabuf_nop(&b);
	gs_submit_result r;
	int rv = gs_submit_wait(w->c, w->ctx, &b, 0, CALL_TIMEOUT_MS, &r);
	gs_dmabuf_free(&b);
	return rv;
}

/* The attacker's file: --history-packets NOPs, submitted in batches, all completed. */
static void prefill(world *w, uint32_t packets)
{
	enum { BATCH = 1000 };
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	gs_dmabuf_nop(&b);
	static gs_submit_desc desc[BATCH];
	static gs_submit_result res[BATCH];
	for (uint32_t done = 0; done < packets;) {
		uint32_t n = packets - done < BATCH ? packets - done : BATCH;
		for (uint32_t i = 0; i < n; i++)
			desc[i] = (gs_submit_desc){.context = w->ctx, .dma = &b};
		if (gs_submit_batch(w->c, desc, n, res) != 0)
			die("prefill: SubmitBatch refused");
		gs_packet_state st;
		if (gs_packet_wait(w->c, res[n - 1].packet, CALL_TIMEOUT_MS, &st, NULL) != 0)
			die("prefill: the batch did not complete");
		done += n;
		if (isatty(STDERR_FILENO))
			fprintf(stderr, "\rprefill: %u/%u packets", done, packets);
	}
	if (isatty(STDERR_FILENO))
		fputc('\n', stderr);
	gs_dmabuf_free(&b);
}

typedef struct history_attack {
	atomic_bool stop;
	atomic_uint_fast64_t reads, rows, busy, failed;
} history_attack;

static void *history_reader(void *arg)
{
	history_attack *h = arg;
	gs_client *c = NULL;
	char why[128];
	if (gs_connect_ex(g_daemon.url, ATTACKER, &c, why, sizeof(why)) != 0)
		return NULL;
	gs_client_set_timeout(c, CALL_TIMEOUT_MS);
	while (!atomic_load(&h->stop)) {
		gs_history_filter hf = {.limit = 10000};
		gs_packet_record *recs = NULL;
		size_t n = 0;
		int rv = gs_history(c, &hf, &recs, &n);
		if (rv == 0) {
			h->reads++;
			h->rows += n;
			gs_history_free(recs, n);
		} else if (rv == GS_STATUS_BUSY) {
			h->busy++;
		} else {
			h->failed++;
		}
	}
	gs_close(c);
	return NULL;
}

/* Six attacker clients ask for 10,000 rows of history, again and again, while the victim
 * submits (issue 26, item 7; the target is a victim p50 at most 2x the quiet one). */
static void attack_history(void)
{
	world v, a;
	world_open(&a, ATTACKER, 4096);
	world_open(&v, VICTIM, 4096);
	prefill(&a, g_opt.history_packets);
	for (int i = 0; i < 20; i++) /* warm-up */
		submit_once(&v);
	measure("baseline-submit", NULL, submit_once, &v);
	history_attack h = {0};
	pthread_t th[HISTORY_READERS];
	for (int i = 0; i < HISTORY_READERS; i++)
		if (pthread_create(&th[i], NULL, history_reader, &h) != 0)
			die("pthread_create");
	phase *ph = measure("history-readers", "baseline-submit", submit_once, &v);
	atomic_store(&h.stop, true);
	for (int i = 0; i < HISTORY_READERS; i++)
		pthread_join(th[i], NULL);
	snprintf(ph->attack, sizeof ph->attack,
	         "%d clients, %u packets in the file: %" PRIu64 " reads of %" PRIu64
	         " rows in all, %" PRIu64 " answered BUSY, %" PRIu64 " failed",
	         HISTORY_READERS, g_opt.history_packets, (uint64_t)h.reads, (uint64_t)h.rows,
	         (uint64_t)h.busy, (uint64_t)h.failed);
	world_close(&v);
	world_close(&a);
}

/* ---- output ---- */

static const phase *find(const char *name)
{
	for (int i = 0; i < g_nphases; i++)
		if (!strcmp(g_phases[i].name, name))
			return &g_phases[i];
	return NULL;
}

static void report(const audit_result *au)
{
	FILE *out = g_opt.json ? stderr : stdout;
	fprintf(out, "%-17s %7s %10s %10s %10s %8s %8s %6s\n", "phase", "samples", "p50_us",
	        "p99_us", "max_us", "p50_x", "p99_x", "fails");
	for (int i = 0; i < g_nphases; i++) {
		const phase *p = &g_phases[i];
		const phase *b = p->baseline ? find(p->baseline) : NULL;
		double r50 = b && b->p50_us > 0 ? p->p50_us / b->p50_us : 1;
		double r99 = b && b->p99_us > 0 ? p->p99_us / b->p99_us : 1;
		fprintf(out, "%-17s %7zu %10.1f %10.1f %10.1f %8.2f %8.2f %6" PRIu64 "\n", p->name,
		        p->n, p->p50_us, p->p99_us, p->max_us, r50, r99, p->failures);
		if (p->attack[0])
			fprintf(out, "  attack: %s\n", p->attack);
		if (g_opt.json)
			printf("{\"phase\":\"%s\",\"baseline\":\"%s\",\"samples\":%zu,\"p50_us\":%."
			       "1f,"
			       "\"p99_us\":%.1f,\"max_us\":%.1f,\"p50_ratio\":%.3f,\"p99_ratio\":%."
			       "3f,"
			       "\"failures\":%" PRIu64 "}\n",
			       p->name, p->baseline ? p->baseline : "", p->n, p->p50_us, p->p99_us,
			       p->max_us, r50, r99, p->failures);
	}
	fprintf(out,
	        "audit-full: %u FILLs submitted with no audit commit possible: %u refused "
	        "AUDIT_UNAVAILABLE, %u accepted, %u other\n"
	        "  packets executed without a committed record: %u of %u refused; accepted "
	        "without a row: %u\n",
	        au->submitted, au->refused, au->accepted, au->other, au->ran_unrecorded,
	        au->refused + au->other, au->accepted_unrecorded);
	if (g_opt.json)
		printf("{\"phase\":\"audit-full\",\"submitted\":%u,\"refused\":%u,\"accepted\":%u,"
		       "\"other\":%u,\"executed_without_record\":%u,\"accepted_without_row\":%u}\n",
		       au->submitted, au->refused, au->accepted, au->other, au->ran_unrecorded,
		       au->accepted_unrecorded);
}

/* ---- main ---- */

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: bench_attack [OPTIONS]\n"
	        "Another tenant's Info latency while an attacker stalls the daemon with waiting\n"
	        "requests, floods it with large unauthenticated messages or holds idle\n"
	        "connections, and its submit latency while six attacker clients read history,\n"
	        "each as a ratio against the same measurement without the attack;\n"
	        "then whether any packet ran without a committed audit record while no commit\n"
	        "could succeed (a 4 KiB file-size limit on the daemon).\n\n"
	        "Options:\n"
	        "  --samples N   victim samples per phase (default 1000)\n"
	        "  --seconds S   time bound of each phase (default 10)\n"
	        "  --stall N     waiting requests the attacker sends in the stall phase (default "
	        "4200)\n"
	        "  --flood N     requests kept in flight, re-sent when answered, in the\n"
	        "                request-flood phase (default 512)\n"
	        "  --idle N      idle connections the attacker tries to hold (default 1000)\n"
	        "  --packets N   FILLs submitted while the audit cannot commit (default 200)\n"
	        "  --history-packets N  the attacker's packets in the audit file before six of\n"
	        "                its clients read 10,000 rows of history each, again and again,\n"
	        "                while the victim submits (default 60000)\n"
	        "  --json        one JSON object per line on stdout; the table goes to stderr\n"
	        "  -h, --help    show this help\n\n"
	        "Exit status: 0 when every phase ran, 1 otherwise, 2 usage.\n");
}

static int parse_args(int argc, char **argv)
{
	g_opt = (options){.samples = 1000,
	                  .seconds = 10,
	                  .stall = 4200,
	                  .flood = 512,
	                  .idle = 1000,
	                  .packets = 200,
	                  .history_packets = 60000};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!strcmp(a, "--json")) {
			g_opt.json = true;
			continue;
		}
		const char *v = i + 1 < argc ? argv[++i] : NULL;
		char *end = NULL;
		if (!v) {
			fprintf(stderr, "bench_attack: %s needs a value\n", a);
			return -1;
		}
		errno = 0;
		unsigned long long n = strtoull(v, &end, 10);
		bool bad = *end || errno || v[0] == '-' || n == 0;
		if (!strcmp(a, "--samples") && !bad && n <= 1000000) {
			g_opt.samples = n;
		} else if (!strcmp(a, "--seconds")) {
			g_opt.seconds = strtod(v, &end);
			if (*end || !(g_opt.seconds > 0 && g_opt.seconds <= 3600))
				goto bad;
		} else if (!strcmp(a, "--stall") && !bad && n <= 100000) {
			g_opt.stall = (uint32_t)n;
		} else if (!strcmp(a, "--flood") && !bad && n <= 100000) {
			g_opt.flood = (uint32_t)n;
		} else if (!strcmp(a, "--idle") && !bad && n <= 60000) {
			g_opt.idle = (uint32_t)n;
		} else if (!strcmp(a, "--packets") && !bad && n <= 10000) {
			g_opt.packets = (uint32_t)n;
		} else if (!strcmp(a, "--history-packets") && !bad && n <= 1000000) {
			g_opt.history_packets = (uint32_t)n;
		} else {
			goto bad;
		}
		continue;
	bad:
		fprintf(stderr, "bench_attack: bad option or value: %s %s\n", a, v);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (parse_args(argc, argv) != 0) {
		usage(stderr);
		return 2;
	}
	uint16_t port = itest_free_port();
	if (port == 0)
		die("no free port");
	snprintf(g_tcp_url, sizeof(g_tcp_url), "tcp://127.0.0.1:%u", port);
	static itest_config cfg;
	if (itest_config_write(&cfg,
	                       "{\"tenants\": [{\"name\": \"attacker\", \"token\": \"" ATTACKER
	                       "\"}, {\"name\": \"victim\", \"token\": \"" VICTIM "\"}]}\n") != 0)
		die("cannot write the configuration");
	const char *args[] = {"--config",    cfg.path, "--listen", g_tcp_url,
	                      "--log-level", "warn",   NULL};
	if (gs_testd_start(&g_daemon, args) != 0)
		die("the daemon did not start");
	double t0 = gs_test_mono_s();

	gs_client *victim = NULL;
	char why[256];
	if (gs_connect_ex(g_daemon.url, VICTIM, &victim, why, sizeof(why)) != 0)
		die(why);
	gs_client_set_timeout(victim, CALL_TIMEOUT_MS);
	for (int i = 0; i < 50; i++) /* warm-up */
		info_once(victim);

	measure("baseline", NULL, info_once, victim);
	attack_waits(victim, false);
	attack_waits(victim, true);
	attack_unauthenticated(victim);
	measure("baseline-connect", NULL, connect_once, NULL);
	attack_fds(port);
	audit_result au;
	attack_history();
	attack_audit(&au);
	gs_close(victim);

	bool alive = gs_testd_alive(&g_daemon);
	int stop = gs_testd_stop(&g_daemon);
	gs_testd_cleanup(&g_daemon);
	itest_config_cleanup(&cfg);
	report(&au);
	fprintf(g_opt.json ? stderr : stdout, "run: %.1f s; daemon %s, stopped with status %d\n",
	        gs_test_mono_s() - t0, alive ? "alive to the end" : "DIED", stop);
	return alive && stop == 0 && au.ok ? 0 : 1;
}
