/*
 * The daemon half of bench_sched_decision (see sched_decision_daemon.h).
 *
 * A SubmitBatch is queued with the scheduler held and released at once (h_submit.c), so when
 * the batch's packets start running all `contexts` contexts are in the node's run queue. A
 * NullRendering packet on an idle engine is run by the scheduler itself (vidsch.c
 * run_null_here: no engine thread), so the daemon takes one decision per packet in a tight
 * loop on its own thread: pick, READY, RUNNING, COMPLETED (each audited and published),
 * retire, requeue. The figure is (last completed_ns - first ready_ns) / (packets - 1) from the
 * history, on the daemon's wall clock: the whole cost of a decision in the daemon, not only the
 * run queue's part of it.
 */
#include "sched_decision_daemon.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpusched.h"
#include "testd.h"

#define CALL_TIMEOUT_MS 120000u
#define HISTORY_PAGE    10000u
#define MAX_REPS        100

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void fail(sdd_result *r, const char *what, int rc, const gs_client *c)
{
	if (!r->error)
		snprintf(r->message, sizeof(r->message), "%s: %s (%s)", what, gs_status_name(rc),
		         c ? gs_client_message(c) : "");
	r->error = 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Span of the batch's packets (out[0..total), their wire ids: opaque, so they are looked up,
 * not compared as numbers) from the daemon's history of `device`, newest first until all are
 * seen: earliest ready_ns to latest completed_ns of those COMPLETED. Returns 0 or a status. */
static int batch_span(gs_client *c, uint64_t device, const gs_submit_result *out, size_t total,
                      uint64_t *span_ns, uint64_t *seen)
{
	uint64_t *ids = malloc((total ? total : 1) * sizeof(*ids));
	if (!ids)
		return GS_ERR_NOMEM;
	for (size_t i = 0; i < total; i++)
		ids[i] = out[i].packet;
	qsort(ids, total, sizeof(*ids), cmp_u64);
	uint64_t lo = UINT64_MAX, hi = 0, n = 0, found = 0, before = 0;
	int rc = 0;
	while (found < total) {
		gs_history_filter f = {
		        .device = device, .limit = HISTORY_PAGE, .before_packet = before};
		gs_packet_record *recs;
		size_t m;
		if ((rc = gs_history(c, &f, &recs, &m)) != 0)
			break;
		for (size_t i = 0; i < m; i++) {
			const gs_packet_record *p = &recs[i];
			if (!bsearch(&p->packet, ids, total, sizeof(*ids), cmp_u64))
				continue;
			found++;
			if (p->state != GS_PACKET_COMPLETED)
				continue;
			n++;
			if (p->ready_ns && p->ready_ns < lo)
				lo = p->ready_ns;
			if (p->completed_ns > hi)
				hi = p->completed_ns;
		}
		if (m)
			before = recs[m - 1].packet;
		gs_history_free(recs, m);
		if (m < HISTORY_PAGE)
			break;
	}
	free(ids);
	*span_ns = hi > lo ? hi - lo : 0;
	*seen = n;
	return rc;
}

void sdd_measure(size_t contexts, uint64_t packets, int reps, double seconds, sdd_result *r)
{
	memset(r, 0, sizeof(*r));
	r->contexts = contexts;
	uint64_t per_ctx = (packets + contexts - 1) / contexts;
	if (per_ctx == 0)
		per_ctx = 1;
	size_t total = contexts * per_ctx;
	r->packets = total;
	if (reps > MAX_REPS)
		reps = MAX_REPS;

	/* The batch must fit: max_batch and the message size raised for it. */
	char dir[] = "/tmp/gpusched-bench-XXXXXX";
	if (!mkdtemp(dir)) {
		fail(r, "mkdtemp", GS_ERR_INVALID, NULL);
		return;
	}
	char cfg[sizeof(dir) + 16];
	snprintf(cfg, sizeof(cfg), "%s/cfg.json", dir);
	FILE *f = fopen(cfg, "w");
	if (!f) {
		fail(r, "config file", GS_ERR_INVALID, NULL);
		rmdir(dir);
		return;
	}
	fprintf(f, "{\"max_batch\": %zu, \"max_message\": %zu}\n", total < 1024 ? 1024 : total,
	        (size_t)64 << 20);
	fclose(f);
	const char *args[] = {"--config", cfg, "--backend", "null", "--log-level", "warn", NULL};
	gs_testd d;
	gs_client *c = NULL;
	uint64_t device = 0;
	char why[256] = "";
	double per[MAX_REPS], client[MAX_REPS];
	gs_submit_desc *descs = calloc(total, sizeof(*descs));
	gs_submit_result *out = calloc(total, sizeof(*out));
	uint64_t *ctx = calloc(contexts, sizeof(*ctx));
	gs_dmabuf nop;
	gs_dmabuf_init(&nop);
	bool started = false;
	if (!descs || !out || !ctx || gs_dmabuf_nop(&nop) != 0) {
		fail(r, "set-up", GS_ERR_NOMEM, NULL);
		goto out;
	}
	if (gs_testd_start(&d, args) != 0) {
		fail(r, "cannot start gpuschedd", GS_ERR_TRANSPORT, NULL);
		gs_testd_cleanup(&d);
		goto out;
	}
	started = true;
	int rc = gs_connect_ex(d.url, NULL, &c, why, sizeof(why));
	if (rc != 0) {
		snprintf(r->message, sizeof(r->message), "gs_connect: %.200s", why);
		r->error = 1;
		goto out;
	}
	gs_client_set_timeout(c, CALL_TIMEOUT_MS);
	double t0 = gs_test_mono_s();
	rc = gs_device_create(c, "bench-sched-decision", &device);
	for (size_t i = 0; rc == 0 && i < contexts; i++) {
		gs_context_desc cd;
		gs_context_desc_init(&cd, device, 0);
		rc = gs_context_create(c, &cd, &ctx[i], NULL);
	}
	if (rc != 0) {
		fail(r, "device/contexts", rc, c);
		goto out;
	}
	r->setup_s = gs_test_mono_s() - t0;
	/* Round-robin: every context's first packet comes before any context's second. */
	for (size_t k = 0; k < per_ctx; k++)
		for (size_t i = 0; i < contexts; i++)
			descs[k * contexts + i] =
			        (gs_submit_desc){.context = ctx[i],
			                         .dma = &nop,
			                         .submit_flags = GS_SUBMIT_NULL_RENDERING};

	double deadline = gs_test_mono_s() + seconds;
	/* Repetition 0 warms the daemon up (allocations, SQLite pages) and is not counted. */
	for (int rep = 0; rep <= reps; rep++) {
		double c0 = gs_test_mono_s();
		rc = gs_submit_batch(c, descs, total, out);
		double c1 = gs_test_mono_s();
		if (rc != 0) {
			fail(r, "gs_submit_batch", rc, c);
			if (!gs_testd_alive(&d)) {
				snprintf(r->message, sizeof(r->message),
				         "gpuschedd died running a batch of %zu packets over %zu "
				         "contexts",
				         total, contexts);
				gs_testd_dump_log(&d);
			}
			break;
		}
		/* The scheduler runs the whole batch in one go on its thread before it handles
		 * another request, so this answers at once; it is here to check the outcome. */
		gs_packet_state st;
		rc = gs_packet_wait(c, out[total - 1].packet, 60000, &st, NULL);
		if (rc != 0) {
			fail(r, "gs_packet_wait", rc, c);
			break;
		}
		uint64_t span, seen;
		rc = batch_span(c, device, out, total, &span, &seen);
		if (rc != 0 || seen != total) {
			if (rc == 0)
				snprintf(r->message, sizeof(r->message),
				         "history shows %" PRIu64 " of %zu packets completed", seen,
				         total);
			else
				fail(r, "gs_history", rc, c);
			r->error = 1;
			break;
		}
		if (rep > 0) {
			per[r->reps] = total > 1 ? (double)span / (double)(total - 1) : 0;
			client[r->reps++] = (c1 - c0) * 1e3;
		}
		if (gs_test_mono_s() >= deadline && r->reps > 0)
			break;
	}
	if (r->reps) {
		qsort(per, (size_t)r->reps, sizeof(*per), cmp_double);
		qsort(client, (size_t)r->reps, sizeof(*client), cmp_double);
		r->median_ns = r->reps % 2 ? per[r->reps / 2]
		                           : (per[r->reps / 2 - 1] + per[r->reps / 2]) / 2;
		r->min_ns = per[0];
		r->max_ns = per[r->reps - 1];
		r->client_ms = client[r->reps / 2];
	}
out:
	if (c) {
		if (device)
			gs_device_destroy(c, device);
		gs_close(c);
	}
	if (started) {
		int st = gs_testd_alive(&d) ? gs_testd_stop(&d) : -1;
		if (st != 0 && !r->error) {
			snprintf(r->message, sizeof(r->message), "gpuschedd exited with status %d",
			         st);
			r->error = 1;
		}
		gs_testd_cleanup(&d);
	}
	gs_dmabuf_free(&nop);
	free(descs);
	free(out);
	free(ctx);
	unlink(cfg);
	rmdir(dir);
}
