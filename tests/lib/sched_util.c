#include "sched_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- daemons ---- */

/* The audit file of the daemon started last: a timeline orders events by the file's seqs
 * (the wire's are opaque). */
static char last_db[512];

void sched_daemon_start(sched_daemon *sd, const char *json, bool virtual_clock)
{
	memset(sd, 0, sizeof(*sd));
	if (itest_config_write(&sd->cfg, json) != 0)
		fail_msg("cannot write the configuration file");
	const char *args[] = {"--config", sd->cfg.path, virtual_clock ? "--clock" : NULL, "virtual",
	                      NULL};
	if (gs_testd_start(&sd->t, args) != 0) {
		gs_testd_cleanup(&sd->t);
		itest_config_cleanup(&sd->cfg);
		fail_msg("gpuschedd did not start with configuration %s", json);
	}
	sd->running = true;
	snprintf(last_db, sizeof last_db, "%s", sd->t.db);
}

int sched_daemon_stop(sched_daemon *sd)
{
	if (!sd->running)
		return 0;
	sd->running = false;
	int rc = gs_testd_stop(&sd->t);
	if (rc != 0) {
		fprintf(stderr, "gpuschedd exited with %d\n", rc);
		gs_testd_dump_log(&sd->t);
	}
	gs_testd_cleanup(&sd->t);
	itest_config_cleanup(&sd->cfg);
	return rc;
}

/* ---- objects ---- */

uint64_t sched_context(gs_client *c, uint64_t device, uint32_t node, uint32_t paging_node,
                       uint32_t priority_class, int32_t priority)
{
	gs_context_desc desc;
	gs_context_desc_init(&desc, device, node);
	desc.info.paging_companion_node_id = paging_node;
	desc.info.dma_buffer_size = 4096;
	desc.priority_class = priority_class;
	desc.priority = priority;
	uint64_t ctx = 0;
	int rv = gs_context_create(c, &desc, &ctx, NULL);
	if (rv != 0)
		fail_msg("context_create (node %u, class %u, priority %d): %s: %s", node,
		         priority_class, priority, gs_status_name(rv), gs_client_message(c));
	return ctx;
}

void sched_spin(gs_dmabuf *buf, uint64_t micros, bool nonpreemptible)
{
	assert_int_equal(
	        gs_dmabuf_spin(buf, micros, nonpreemptible ? GS_DMABUF_SPIN_NONPREEMPTIBLE : 0), 0);
}

gs_packet_state sched_wait_final(gs_client *c, uint64_t packet, int want_rv)
{
	gs_packet_state st = GS_PACKET_UNKNOWN;
	int rv = gs_packet_wait(c, packet, ITEST_TIMEOUT_MS, &st, NULL);
	if (rv != want_rv)
		fail_msg("packet_wait %" PRIu64 ": %s (%s), expected %s", packet,
		         gs_status_name(rv), gs_client_message(c), gs_status_name(want_rv));
	/* A FAULTED answer brings no state back through the library: the status says it. */
	return rv == GS_STATUS_FAULTED ? GS_PACKET_FAULTED : st;
}

gs_packet_state sched_state_now(gs_client *c, uint64_t packet)
{
	gs_packet_state st = GS_PACKET_UNKNOWN;
	int rv = gs_packet_wait(c, packet, 0, &st, NULL);
	if (rv != 0 && rv != GS_STATUS_FAULTED)
		fail_msg("packet_wait %" PRIu64 " (no wait): %s: %s", packet, gs_status_name(rv),
		         gs_client_message(c));
	return rv == GS_STATUS_FAULTED ? GS_PACKET_FAULTED : st;
}

/* ---- the audit ---- */

size_t sched_events(gs_client *c, uint64_t packet, gs_packet_event **ev)
{
	size_t n = 0;
	int rv = gs_packet_events(c, packet, ev, &n);
	if (rv != 0)
		fail_msg("packet_events %" PRIu64 ": %s: %s", packet, gs_status_name(rv),
		         gs_client_message(c));
	return n;
}

long sched_event_find(const gs_packet_event *ev, size_t n, gs_packet_state state, size_t from)
{
	for (size_t i = from; i < n; i++)
		if (ev[i].state == state)
			return (long)i;
	return -1;
}

bool sched_await_event(gs_client *c, uint64_t packet, gs_packet_state state, int timeout_ms)
{
	long long deadline = gs_test_now_ms() + timeout_ms;
	/* Bounded twice: by the deadline and by a number of polls no test comes near. */
	for (int polls = 0; polls < 1000000 && gs_test_now_ms() < deadline; polls++) {
		gs_packet_event *ev = NULL;
		size_t n = 0;
		int rv = gs_packet_events(c, packet, &ev, &n);
		if (rv != 0 && rv != GS_STATUS_NOT_FOUND)
			fail_msg("packet_events %" PRIu64 ": %s: %s", packet, gs_status_name(rv),
			         gs_client_message(c));
		bool seen = sched_event_find(ev, n, state, 0) >= 0;
		gs_packet_events_free(ev, n);
		if (seen)
			return true;
	}
	return false;
}

size_t sched_history_device(gs_client *c, uint64_t device, gs_packet_record **rec)
{
	gs_history_filter f = {.device = device, .limit = 10000};
	size_t n = 0;
	int rv = gs_history(c, &f, rec, &n);
	if (rv != 0)
		fail_msg("history of device %" PRIu64 ": %s: %s", device, gs_status_name(rv),
		         gs_client_message(c));
	return n;
}

const gs_packet_record *sched_record(const gs_packet_record *recs, size_t n, uint64_t packet)
{
	for (size_t i = 0; i < n; i++)
		if (recs[i].packet == packet)
			return &recs[i];
	return NULL;
}

/* ---- timelines ---- */

void sched_timeline_init(sched_timeline *tl)
{
	memset(tl, 0, sizeof(*tl));
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return p;
	size_t ncap = *cap ? *cap : 64;
	while (ncap < need)
		ncap *= 2;
	void *np = realloc(p, ncap * elem);
	assert_non_null(np);
	*cap = ncap;
	return np;
}

void sched_timeline_add(sched_timeline *tl, gs_client *c, uint64_t device, const uint64_t *packets,
                        size_t npackets)
{
	gs_packet_record *recs = NULL;
	size_t nrecs = sched_history_device(c, device, &recs);
	for (size_t i = 0; i < npackets; i++) {
		const gs_packet_record *r = sched_record(recs, nrecs, packets[i]);
		if (!r)
			fail_msg("packet %" PRIu64 " is not in the history of device %" PRIu64,
			         packets[i], device);
		tl->recs = grow(tl->recs, &tl->caprecs, tl->nrecs + 1, sizeof(*tl->recs));
		tl->recs[tl->nrecs++] = (sched_rec){.packet = r->packet,
		                                    .context = r->context,
		                                    .node = r->node,
		                                    .started_ns = r->started_ns,
		                                    .completed_ns = r->completed_ns};
		gs_packet_event *ev = NULL;
		size_t n = sched_events(c, packets[i], &ev);
		tl->ev = grow(tl->ev, &tl->capev, tl->nev + n, sizeof(*tl->ev));
		for (size_t k = 0; k < n; k++) {
			assert_int_equal(ev[k].packet, packets[i]);
			tl->ev[tl->nev++] = (sched_event){
			        .seq = itest_wire_unmap(last_db, "seq", 0, 0, ev[k].seq),
			        .packet = ev[k].packet,
			        .context = r->context,
			        .node = r->node,
			        .state = ev[k].state,
			        .time_ns = ev[k].time_ns,
			        .detail = strdup(ev[k].detail)};
			assert_non_null(tl->ev[tl->nev - 1].detail);
		}
		gs_packet_events_free(ev, n);
	}
	gs_history_free(recs, nrecs);
}

static int cmp_event_seq(const void *a, const void *b)
{
	const sched_event *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

const sched_rec *sched_timeline_rec(const sched_timeline *tl, uint64_t packet)
{
	for (size_t i = 0; i < tl->nrecs; i++)
		if (tl->recs[i].packet == packet)
			return &tl->recs[i];
	return NULL;
}

uint64_t sched_detail_engine_ns(const char *detail)
{
	const char *p = strstr(detail, " after ");
	unsigned long long us = 0;
	if (!p || sscanf(p, " after %llu us of engine time", &us) != 1)
		return UINT64_MAX;
	return (uint64_t)us * 1000u;
}

static bool ends_run(gs_packet_state s)
{
	return s == GS_PACKET_PREEMPTED || s == GS_PACKET_COMPLETED || s == GS_PACKET_FAULTED ||
	       s == GS_PACKET_ABORTED || s == GS_PACKET_CANCELLED;
}

void sched_timeline_finish(sched_timeline *tl)
{
	qsort(tl->ev, tl->nev, sizeof(*tl->ev), cmp_event_seq);
	free(tl->runs);
	tl->runs = calloc(tl->nev + 1, sizeof(*tl->runs));
	assert_non_null(tl->runs);
	tl->nruns = 0;
	for (size_t i = 0; i < tl->nev; i++) {
		const sched_event *s = &tl->ev[i];
		if (s->state != GS_PACKET_RUNNING)
			continue;
		/* A run starts at a RUNNING event, ends at the packet's next run-ending event... */
		size_t j = i + 1;
		while (j < tl->nev && !(tl->ev[j].packet == s->packet && ends_run(tl->ev[j].state)))
			j++;
		if (j == tl->nev)
			fail_msg("packet %" PRIu64 " is RUNNING at the end of its events",
			         s->packet);
		const sched_event *e = &tl->ev[j];
		/* ...and was dispatched by the packet's READY event before it. */
		size_t k = i;
		while (k > 0 && !(tl->ev[k - 1].packet == s->packet &&
		                  tl->ev[k - 1].state == GS_PACKET_READY))
			k--;
		if (k == 0)
			fail_msg("packet %" PRIu64 " RUNNING without READY", s->packet);
		sched_run *r = &tl->runs[tl->nruns++];
		*r = (sched_run){.packet = s->packet,
		                 .context = s->context,
		                 .node = s->node,
		                 .ready_seq = tl->ev[k - 1].seq,
		                 .start_seq = s->seq,
		                 .end_seq = e->seq,
		                 .end = e->state,
		                 .wall_ns = e->time_ns - s->time_ns};
		if (e->state == GS_PACKET_PREEMPTED || e->state == GS_PACKET_ABORTED) {
			r->engine_ns = sched_detail_engine_ns(e->detail);
			if (r->engine_ns == UINT64_MAX)
				fail_msg("packet %" PRIu64 ": no engine time in '%s'", s->packet,
				         e->detail);
		} else {
			const sched_rec *rec = sched_timeline_rec(tl, s->packet);
			assert_non_null(rec);
			r->engine_ns = rec->completed_ns - rec->started_ns;
		}
	}
}

void sched_timeline_free(sched_timeline *tl)
{
	for (size_t i = 0; i < tl->nev; i++)
		free(tl->ev[i].detail);
	free(tl->ev);
	free(tl->recs);
	free(tl->runs);
	memset(tl, 0, sizeof(*tl));
}
