/*
 * gpusched trace: the schedule as Chrome trace-event JSON, for Perfetto (ui.perfetto.dev) and
 * chrome://tracing. Everything comes from the audit: the packets submitted in the range and
 * their state changes.
 *
 *   process "adapter N", one thread per node: a slice per run of a packet on the engine
 *            (RUNNING to the event that ended it), named by packet id and submit flags; instant
 *            markers where a run was preempted, aborted by a reset or faulted, and where a
 *            paging packet ran.
 *   process "contexts", one thread per context: a slice per packet from submission to its
 *            final state.
 *   flows    submission (context track) -> first run (engine track); the run of the packet
 *            whose SIGNAL last released a wait -> the run of the packet that waited.
 *
 * Times are microseconds from the earliest submission in the file (otherData.epoch_ns holds
 * that time in ns since the Unix epoch).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char trace_help[] =
        "Usage: gpusched trace [--since T] [--until T] [-o FILE] [--max-packets N] [--json]\n"
        "Writes the schedule of your packets submitted in the range as Chrome trace-event\n"
        "JSON: open it in Perfetto (ui.perfetto.dev) or chrome://tracing. A track per engine\n"
        "with a slice per run of a packet (named by packet id and submit flags) and markers\n"
        "for preemptions, resets, faults and paging; a track per context with each packet's\n"
        "life; flow arrows from each submission to its first run, and from the packet whose\n"
        "SIGNAL released a GPU wait to the packet that waited. Context tracks are numbered\n"
        "1..N and named by tenant and context id; ids in a slice's args are strings (JSON\n"
        "numbers above 2^53 are rounded by JavaScript). With several hosts (--url repeated)\n"
        "each host's engines and contexts are processes of their own, named by its URL, on\n"
        "one time axis.\n"
        "\n"
        "Options:\n"
        "  --since T, --until T   the range (as in history: 10m, 2026-11-24T09:00, @SECONDS,\n"
        "                         now); default everything\n"
        "  -o, --output FILE      where to write it (default trace.json; - for stdout)\n"
        "  --max-packets N        at most N packets, the oldest first (default 100000)\n"
        "  --json                 print {file, packets, events, slices, markers, flows,\n"
        "                         truncated} (the trace itself always goes to the file)\n";

typedef struct trace_args {
	cli_schedule_args sched;
} trace_args;

static const cli_opt trace_opts[] = {
        CLI_SCHEDULE_OPTS(trace_args, 10000000),
};

#define PAGE         10000u
#define PID_CONTEXTS 100000

typedef struct trace {
	cli_schedule s;
	/* The contexts, sorted: context i is track (thread id) i + 1. Context handles are 64-bit
	 * and Perfetto keeps 32 bits of a thread id, so distinct contexts would share a track. */
	uint64_t *ctxs;
	size_t nctx;
	uint64_t t0;
	json_t *out;
	uint64_t slices, markers, flows;
	/* Its processes: the engines' and the contexts' (one pair per host with several). */
	int pid_eng, pid_ctx;
	const char *host; /* NULL: one daemon */
} trace;

static double us(const trace *t, uint64_t ns)
{
	return ns >= t->t0 ? (double)(ns - t->t0) / 1000.0 : 0.0;
}

static void add(trace *t, json_t *ev)
{
	json_array_append_new(t->out, ev);
}

static json_t *base(const char *ph, const char *name, const char *cat, int pid, uint64_t tid,
                    double ts)
{
	return json_pack("{s:s, s:s, s:s, s:i, s:I, s:f}", "ph", ph, "name", name, "cat", cat,
	                 "pid", pid, "tid", (json_int_t)tid, "ts", ts);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

static void name_track(trace *t, int pid, uint64_t tid, const char *name)
{
	add(t, json_pack("{s:s, s:s, s:i, s:I, s:{s:s}}", "ph", "M", "name", "thread_name", "pid",
	                 pid, "tid", (json_int_t)tid, "args", "name", name));
}

/* The track of a context: its place among the trace's contexts, from 1. */
static uint64_t context_tid(const trace *t, uint64_t context)
{
	size_t lo = 0, hi = t->nctx;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->ctxs[mid] < context)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo + 1;
}

/* An id as a JSON string in the trace's args, as trace viewers show them (every id is below
 * 2^53, so a number would keep it too). */
static json_t *id_json(uint64_t v)
{
	char s[24];
	snprintf(s, sizeof s, "%" PRIu64, v);
	return json_string(s);
}

static int track_names(trace *t)
{
	char name[160], eng[320], ctxs[320];
	snprintf(eng, sizeof eng, "engines%s%s", t->host ? " of " : "", t->host ? t->host : "");
	snprintf(ctxs, sizeof ctxs, "contexts%s%s", t->host ? " of " : "", t->host ? t->host : "");
	add(t, json_pack("{s:s, s:s, s:i, s:{s:s}}", "ph", "M", "name", "process_name", "pid",
	                 t->pid_eng, "args", "name", eng));
	add(t, json_pack("{s:s, s:s, s:i, s:{s:s}}", "ph", "M", "name", "process_name", "pid",
	                 t->pid_ctx, "args", "name", ctxs));
	uint64_t *ids = malloc((t->s.nrecs + 1) * sizeof(*ids));
	t->ctxs = malloc((t->s.nrecs + 1) * sizeof(*t->ctxs));
	if (!ids || !t->ctxs) {
		free(ids);
		return GS_ERR_NOMEM;
	}
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < t->s.nrecs; i++)
			ids[i] = pass ? t->s.recs[i].context : t->s.recs[i].node;
		qsort(ids, t->s.nrecs, sizeof(*ids), cmp_u64);
		for (size_t i = 0; i < t->s.nrecs; i++) {
			if (i && ids[i] == ids[i - 1])
				continue;
			if (!pass) {
				snprintf(name, sizeof(name), "node %" PRIu64, ids[i]);
				name_track(t, t->pid_eng, ids[i] + 1, name);
				continue;
			}
			t->ctxs[t->nctx++] = ids[i];
		}
	}
	/* Each context's track is named by its tenant and its id. */
	for (size_t k = 0; k < t->nctx; k++) {
		const char *tenant = "";
		for (size_t i = 0; i < t->s.nrecs && !tenant[0]; i++)
			if (t->s.recs[i].context == t->ctxs[k] && t->s.recs[i].tenant)
				tenant = t->s.recs[i].tenant;
		snprintf(name, sizeof(name), "%s%scontext %" PRIu64, tenant, tenant[0] ? " " : "",
		         t->ctxs[k]);
		name_track(t, t->pid_ctx, k + 1, name);
	}
	free(ids);
	return 0;
}

/* A complete slice of packet r from from_ns to to_ns on track pid/tid, named by the packet and
 * its submit flags. */
static void packet_slice(trace *t, const gs_packet_record *r, const char *cat, int pid,
                         uint64_t tid, uint64_t from_ns, uint64_t to_ns, json_t *args)
{
	char name[320], flags[256];
	gs_flags_format(gs_submit_flag_names, r->submit_flags, flags, sizeof(flags));
	snprintf(name, sizeof(name), "packet %" PRIu64 " %s", r->packet, flags);
	json_t *x = base("X", name, cat, pid, tid, us(t, from_ns));
	json_object_set_new(x, "dur",
	                    json_real(to_ns >= from_ns ? (double)(to_ns - from_ns) / 1000.0 : 0.0));
	json_object_set_new(x, "args", args);
	add(t, x);
	t->slices++;
}

static void packet_life(trace *t, const gs_packet_record *r)
{
	uint64_t end = r->completed_ns ? r->completed_ns : r->submitted_ns;
	packet_slice(t, r, "packet", t->pid_ctx, context_tid(t, r->context), r->submitted_ns, end,
	             json_pack("{s:o, s:o, s:s, s:I}", "packet", id_json(r->packet), "fence",
	                       id_json(r->fence), "state", gs_packet_state_name(r->state), "node",
	                       (json_int_t)r->node));
}

/* A run of packet r from event e until `end` (NULL: still running). */
static void packet_run(trace *t, const gs_packet_record *r, const gs_packet_event *e,
                       const gs_packet_event *end)
{
	bool paging = r->submit_flags & GS_SUBMIT_PAGING;
	packet_slice(t, r, paging ? "paging" : "run", t->pid_eng, r->node + 1, e->time_ns,
	             end ? end->time_ns : e->time_ns,
	             json_pack("{s:o, s:o, s:o, s:s, s:s}", "packet", id_json(r->packet), "context",
	                       id_json(r->context), "fence", id_json(r->fence), "ended",
	                       end ? gs_packet_state_name(end->state) : "running", "detail",
	                       end ? end->detail : ""));
	if (paging) {
		json_t *m =
		        base("i", "paging", "paging", t->pid_eng, r->node + 1, us(t, e->time_ns));
		json_object_set_new(m, "s", json_string("t"));
		add(t, m);
		t->markers++;
	}
}

/* A flow arrow; its id is its number (packet ids and seqs are opaque values: no arithmetic on
 * them). */
static void flow(trace *t, const char *cat, int pid_from, uint64_t tid_from, uint64_t ns_from,
                 uint64_t tid_to, uint64_t ns_to)
{
	json_int_t id = (json_int_t)t->flows + 1;
	json_t *s = base("s", cat, cat, pid_from, tid_from, us(t, ns_from));
	json_object_set_new(s, "id", json_integer(id));
	add(t, s);
	json_t *f = base("f", cat, cat, t->pid_eng, tid_to, us(t, ns_to));
	json_object_set_new(f, "id", json_integer(id));
	json_object_set_new(f, "bp", json_string("e"));
	add(t, f);
	t->flows++;
}

#define NONE SIZE_MAX

/* The earliest submission of the schedule, or UINT64_MAX. */
static uint64_t first_ns(const cli_schedule *s)
{
	uint64_t t0 = UINT64_MAX;
	for (size_t i = 0; i < s->nrecs; i++)
		if (s->recs[i].submitted_ns && s->recs[i].submitted_ns < t0)
			t0 = s->recs[i].submitted_ns;
	return t0;
}

/* Writes t's schedule into t->out; t->t0 is set. */
static int emit(trace *t)
{
	if (track_names(t) != 0)
		return GS_ERR_NOMEM;
	for (size_t i = 0; i < t->s.nrecs; i++)
		packet_life(t, &t->s.recs[i]);

	/* Per event: the record index and the next event of the same packet; per record: its last
	 * run so far and whether it ran yet. */
	size_t *rec = malloc((t->s.nevs + 1) * sizeof(*rec)),
	       *next = malloc((t->s.nevs + 1) * sizeof(*next));
	size_t *last = malloc((t->s.nrecs + 1) * sizeof(*last));
	if (!rec || !next || !last) {
		free(rec);
		free(next);
		free(last);
		return GS_ERR_NOMEM;
	}
	for (size_t k = 0; k < t->s.nrecs; k++)
		last[k] = NONE;
	for (size_t i = t->s.nevs; i-- > 0;) {
		rec[i] = (size_t)(cli_schedule_find(&t->s, t->s.evs[i].packet) - t->s.recs);
		next[i] = last[rec[i]];
		last[rec[i]] = i;
	}
	for (size_t k = 0; k < t->s.nrecs; k++)
		last[k] = NONE; /* now: the packet's latest RUNNING event so far */
	for (size_t i = 0; i < t->s.nevs; i++) {
		const gs_packet_event *e = &t->s.evs[i];
		const gs_packet_record *r = &t->s.recs[rec[i]];
		const gs_packet_event *end = next[i] == NONE ? NULL : &t->s.evs[next[i]];
		if (e->state == GS_PACKET_RUNNING) {
			packet_run(t, r, e, end);
			if (last[rec[i]] == NONE) /* its first run: from its submission */
				flow(t, "submit", t->pid_ctx, context_tid(t, r->context),
				     r->submitted_ns, r->node + 1, e->time_ns);
			last[rec[i]] = i;
			continue;
		}
		const char *what = e->state == GS_PACKET_PREEMPTED ? "preempted"
		                   : e->state == GS_PACKET_ABORTED ? "reset"
		                   : e->state == GS_PACKET_FAULTED ? "fault"
		                                                   : NULL;
		if (what) {
			char name[64];
			snprintf(name, sizeof(name), "%s: packet %" PRIu64, what, r->packet);
			json_t *m =
			        base("i", name, what, t->pid_eng, r->node + 1, us(t, e->time_ns));
			json_object_set_new(m, "s", json_string("t"));
			json_object_set_new(m, "args", json_pack("{s:s}", "detail", e->detail));
			add(t, m);
			t->markers++;
		}
		/* A READY released by a SIGNAL: from the signaller's latest run to this one's. */
		static const char by_text[] = "last signalled by packet ";
		const char *by = e->state == GS_PACKET_READY ? strstr(e->detail, by_text) : NULL;
		if (!by || !end || end->state != GS_PACKET_RUNNING)
			continue;
		const gs_packet_record *sr =
		        cli_schedule_find(&t->s, strtoull(by + strlen(by_text), NULL, 10));
		size_t srun = sr ? last[(size_t)(sr - t->s.recs)] : NONE;
		if (srun != NONE)
			flow(t, "signal", t->pid_eng, sr->node + 1, t->s.evs[srun].time_ns,
			     r->node + 1, end->time_ns);
	}
	free(rec);
	free(next);
	free(last);
	return 0;
}

static void trace_free(trace *t)
{
	cli_schedule_free(&t->s);
	free(t->ctxs);
	json_decref(t->out);
}

/* Writes the trace document to a.output (or stdout) and reports it. */
static int write_trace(cli *ctx, const trace_args *a, json_t *events, uint64_t t0, size_t packets,
                       size_t nevents, uint64_t slices, uint64_t markers, uint64_t flows,
                       bool truncated)
{
	json_t *doc = json_pack("{s:O, s:s, s:{s:I, s:I}}", "traceEvents", events,
	                        "displayTimeUnit", "ns", "otherData", "epoch_ns", (json_int_t)t0,
	                        "packets", (json_int_t)packets);
	bool to_stdout = strcmp(a->sched.output, "-") == 0;
	int w = doc ? (to_stdout ? json_dumpf(doc, stdout, JSON_COMPACT)
	                         : json_dump_file(doc, a->sched.output, JSON_COMPACT))
	            : -1;
	json_decref(doc);
	if (w != 0) {
		cli_warn(ctx, "cannot write %s", a->sched.output);
		return CLI_EXIT_DAEMON;
	}
	if (ctx->json && !to_stdout)
		cli_json_print(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "file",
		                         a->sched.output, "packets", (json_int_t)packets, "events",
		                         (json_int_t)nevents, "slices", (json_int_t)slices,
		                         "markers", (json_int_t)markers, "flows", (json_int_t)flows,
		                         "truncated", truncated));
	else if (!to_stdout)
		printf("%s: %zu packets, %" PRIu64 " slices, %" PRIu64 " markers, %" PRIu64
		       " flows (open it in ui.perfetto.dev or chrome://tracing)\n",
		       a->sched.output, packets, slices, markers, flows);
	return CLI_EXIT_OK;
}

/* Several hosts: each host's schedule as a pair of processes of its own ("engines of URL",
 * "contexts of URL"), on one time axis. */
static int trace_hosts(cli *ctx, int argc, char **argv, const cli_syntax *syntax, trace_args *a)
{
	cli_schedule *sched;
	int rv = cli_schedule_start_hosts(ctx, argc, argv, syntax, a, &sched);
	if (rv != CLI_CONTINUE)
		return rv;
	size_t n = gs_hosts_count(ctx->hosts);
	trace *ts = calloc(n, sizeof(*ts));
	json_t *out = json_array();
	uint64_t t0 = UINT64_MAX, slices = 0, markers = 0, flows = 0;
	size_t packets = 0, events = 0;
	bool truncated = false;
	rv = ts && out ? CLI_EXIT_OK : cli_fail(ctx, GS_ERR_NOMEM);
	for (size_t h = 0; h < n; h++) {
		uint64_t f = first_ns(&sched[h]);
		t0 = f < t0 ? f : t0;
		if (ts)
			ts[h].s = sched[h]; /* moved: trace_free frees it */
		else
			cli_schedule_free(&sched[h]);
	}
	free(sched);
	for (size_t h = 0; rv == CLI_EXIT_OK && h < n; h++) {
		if (!gs_hosts_client(ctx->hosts, h))
			continue;
		trace *t = &ts[h];
		t->out = json_incref(out);
		t->t0 = t0 == UINT64_MAX ? 0 : t0;
		t->pid_eng = 1 + (int)h;
		t->pid_ctx = PID_CONTEXTS + (int)h;
		t->host = gs_hosts_url(ctx->hosts, h);
		t->flows = flows; /* flow ids stay unique across hosts */
		if (emit(t) != 0)
			rv = cli_fail(ctx, GS_ERR_NOMEM);
		flows = t->flows;
		slices += t->slices;
		markers += t->markers;
		packets += t->s.nrecs;
		events += t->s.nevs;
		truncated = truncated || t->s.truncated;
	}
	if (rv == CLI_EXIT_OK)
		rv = write_trace(ctx, a, out, t0 == UINT64_MAX ? 0 : t0, packets, events, slices,
		                 markers, flows, truncated);
	for (size_t h = 0; ts && h < n; h++)
		trace_free(&ts[h]);
	free(ts);
	json_decref(out);
	return cli_hosts_report(ctx, rv);
}

int cmd_trace(cli *ctx, int argc, char **argv)
{
	static const cli_syntax syntax = {trace_help, CLI_OPTS(trace_opts)};
	trace_args a = {.sched = {.output = "trace.json", .max_packets = 100000}};
	trace t = {0};
	int rv;

	if (ctx->nurls > 1)
		return trace_hosts(ctx, argc, argv, &syntax, &a);
	rv = cli_schedule_start(ctx, argc, argv, &syntax, &a, &t.s);
	if (rv != CLI_CONTINUE)
		return rv;
	t.out = json_array();
	t.pid_eng = 1;
	t.pid_ctx = PID_CONTEXTS;
	t.t0 = first_ns(&t.s);
	if (t.t0 == UINT64_MAX)
		t.t0 = 0;
	rv = t.out ? emit(&t) : GS_ERR_NOMEM;
	if (rv != 0) {
		trace_free(&t);
		return cli_fail(ctx, rv);
	}
	rv = write_trace(ctx, &a, t.out, t.t0, t.s.nrecs, t.s.nevs, t.slices, t.markers, t.flows,
	                 t.s.truncated);
	trace_free(&t);
	return rv;
}
