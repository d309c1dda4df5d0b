/*
 * gpusched timeline: the schedule of a time range as one self-contained picture, in the spirit
 * of GPUView: an engine per lane, each run of a packet a box coloured by its context (paging
 * packets grey) and named by the context's short label (c1, c2, ... in the order the contexts
 * first submitted), preemptions and resets marked, the packets in flight on each engine drawn
 * under its lane, a time axis, a legend in as many rows as it needs (each label with its
 * tenant and context id), and hover text with each packet's details. SVG, alone or in an HTML
 * page that fits its window's width; nothing is fetched from the network to view it.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char timeline_help[] =
        "Usage: gpusched timeline [--since T] [--until T] [-o FILE] [--max-packets N]\n"
        "                         [--width PX] [--json]\n"
        "Draws the schedule of your packets submitted in the range as one picture: a lane per\n"
        "engine, each run of a packet a box coloured by its context and labelled with the\n"
        "context's short name (c1, c2, ...; the legend under the lanes gives each one's tenant\n"
        "and context id; the memory manager's paging packets grey), red marks where a run\n"
        "was preempted and black ones where a\n"
        "reset aborted it or it faulted, the packets in flight on each engine under its lane,\n"
        "and a time axis. Hover a box for the packet's id, context, fence, flags, how long it\n"
        "ran and how the run ended. A FILE ending in .svg gets the bare SVG; anything else an\n"
        "HTML page with the SVG inside. It needs nothing from the network to view. With\n"
        "several hosts (--url repeated) every host's engines are lanes of their own, named\n"
        "hH node N (the host's URL on hover), on one time axis.\n"
        "\n"
        "Options:\n"
        "  --since T, --until T   the range (as in history: 10m, 2026-11-24T09:00, @SECONDS,\n"
        "                         now); default everything\n"
        "  -o, --output FILE      where to write it (default timeline.html)\n"
        "  --max-packets N        at most N packets, the oldest first (default 20000)\n"
        "  --width PX             width of the drawing (default 1600)\n"
        "  --json                 print {file, packets, contexts, runs, markers, lanes,\n"
        "                         truncated}\n";

typedef struct timeline_args {
	cli_schedule_args sched;
	uint32_t width;
} timeline_args;

static const cli_opt timeline_opts[] = {
        CLI_SCHEDULE_OPTS(timeline_args, 1000000),
        {"width", CLI_ARG_U32, offsetof(timeline_args, width), .min = 400, .max = 20000},
};

#define LEFT    110.0
#define RIGHT   20.0
#define TOP     50.0
#define LANE_H  34.0
#define DEPTH_H 26.0
#define GAP     22.0

/* A context of the schedule: its short label is c<number>, numbered in the order the contexts
 * first appear in the schedule (the oldest packet first). */
typedef struct ctx_label {
	uint64_t context;
	const char *tenant;
	size_t number; /* 1.. */
} ctx_label;

typedef struct drawing {
	FILE *f;
	const cli_schedule *s;
	uint64_t t0, t1;
	double width;
	uint32_t nodes[64];
	size_t nlanes;
	uint64_t runs, markers;
	ctx_label *ctxs;  /* by number */
	ctx_label *by_id; /* the same, sorted by context id */
	size_t nctx;
	size_t legend_cols, legend_rows;
	double legend_col_w;
	/* Several hosts: ids carry their host in their low HOST_BITS bits, nodes in bits 8 and
	 * up (merge_hosts); hosts[h] is host h's URL. */
	size_t nhosts;
	const char *hosts[GS_MAX_HOSTS];
} drawing;

#define HOST_BITS 6 /* GS_MAX_HOSTS = 64 */

/* An id as its host shows it. */
static uint64_t shown(const drawing *d, uint64_t id)
{
	return d->nhosts ? id >> HOST_BITS : id;
}

/* " on HOST" after an id of a record or event, or "". */
static const char *on_host(const drawing *d, uint64_t id, char *buf, size_t cap)
{
	if (!d->nhosts)
		return "";
	snprintf(buf, cap, " on %s", d->hosts[id & ((1u << HOST_BITS) - 1)]);
	return buf;
}

#define LEGEND_ROW_H 18.0
/* Contexts named in the legend at most; a last row says how many more there are (their runs
 * still carry their labels and hover text). */
#define LEGEND_MAX 1000
#define CHAR_W     6.6 /* a generous average width of an 11px sans-serif character */

static int cmp_ctx_id(const void *x, const void *y)
{
	const ctx_label *a = x, *b = y;
	return (a->context > b->context) - (a->context < b->context);
}

/* The label of a client context (NULL: not in the schedule). */
static const ctx_label *label_of(const drawing *d, uint64_t context)
{
	ctx_label key = {.context = context};
	return bsearch(&key, d->by_id, d->nctx, sizeof(*d->by_id), cmp_ctx_id);
}

/* By context id, then by first appearance (number holds a record's index while sorting). */
static int cmp_ctx_first(const void *x, const void *y)
{
	const ctx_label *a = x, *b = y;
	if (a->context != b->context)
		return (a->context > b->context) - (a->context < b->context);
	return (a->number > b->number) - (a->number < b->number);
}

static int cmp_ctx_number(const void *x, const void *y)
{
	const ctx_label *a = x, *b = y;
	return (a->number > b->number) - (a->number < b->number);
}

/* Numbers the contexts of the client packets in the order they first appear: every record's
 * context sorted by id and first appearance, one entry kept per context (by_id), then the
 * same entries by first appearance, numbered (ctxs). O(n log n) in the packets. */
static int label_contexts(drawing *d)
{
	const cli_schedule *s = d->s;
	d->ctxs = calloc(s->nrecs + 1, sizeof(*d->ctxs));
	d->by_id = calloc(s->nrecs + 1, sizeof(*d->by_id));
	if (!d->ctxs || !d->by_id)
		return -1;
	size_t n = 0;
	for (size_t i = 0; i < s->nrecs; i++)
		if (!(s->recs[i].submit_flags & GS_SUBMIT_PAGING))
			d->by_id[n++] = (ctx_label){.context = s->recs[i].context,
			                            .tenant = s->recs[i].tenant,
			                            .number = i};
	qsort(d->by_id, n, sizeof(*d->by_id), cmp_ctx_first);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || d->by_id[i].context != d->by_id[i - 1].context)
			d->ctxs[d->nctx++] = d->by_id[i];
	qsort(d->ctxs, d->nctx, sizeof(*d->ctxs), cmp_ctx_number);
	for (size_t i = 0; i < d->nctx; i++)
		d->ctxs[i].number = i + 1;
	memcpy(d->by_id, d->ctxs, d->nctx * sizeof(*d->by_id));
	qsort(d->by_id, d->nctx, sizeof(*d->by_id), cmp_ctx_id);
	return 0;
}

static double xof(const drawing *d, uint64_t ns)
{
	double span = d->t1 > d->t0 ? (double)(d->t1 - d->t0) : 1.0;
	double t = ns > d->t0 ? (double)(ns - d->t0) : 0.0;
	return LEFT + t * (d->width - LEFT - RIGHT) / span;
}

static double lane_y(size_t lane)
{
	return TOP + (double)lane * (LANE_H + DEPTH_H + GAP);
}

static size_t lane_of(const drawing *d, uint32_t node)
{
	for (size_t i = 0; i < d->nlanes; i++)
		if (d->nodes[i] == node)
			return i;
	return 0;
}

/* The colour of the context numbered n: the golden angle between consecutive hues keeps any
 * two far apart, and three lightnesses and two saturations in turn set neighbours apart
 * further; the hue in tenths of a degree, so that no two of the first thousand are equal. */
static void color_of(size_t n, char *out, size_t cap)
{
	double hue = fmod((double)n * 137.50776, 360.0);
	snprintf(out, cap, "hsl(%.1f,%d%%,%d%%)", hue, (n / 3) % 2 ? 55 : 75,
	         38 + (int)(n % 3) * 12);
}

/* A legend entry's text: "c7 tenant, context 1234" (with several hosts, " (h2)" after it). */
static void legend_text(const drawing *d, const ctx_label *l, char *out, size_t cap)
{
	int n = snprintf(out, cap, "c%zu %s, context %" PRIu64, l->number,
	                 l->tenant ? l->tenant : "", shown(d, l->context));
	if (d->nhosts && n > 0 && (size_t)n < cap)
		snprintf(out + n, cap - (size_t)n, " (h%u)",
		         (unsigned)(l->context & ((1u << HOST_BITS) - 1)));
}

/* Lays the legend out in columns as wide as its longest entry, as many as the width holds. */
static void legend_layout(drawing *d)
{
	size_t longest = 0, shown = d->nctx < LEGEND_MAX ? d->nctx : LEGEND_MAX;
	char text[256];
	for (size_t i = 0; i < shown; i++) {
		legend_text(d, &d->ctxs[i], text, sizeof text);
		if (strlen(text) > longest)
			longest = strlen(text);
	}
	d->legend_col_w = 16 + (double)longest * CHAR_W + 18;
	double avail = d->width - LEFT - RIGHT;
	d->legend_cols = avail > d->legend_col_w ? (size_t)(avail / d->legend_col_w) : 1;
	/* The first row holds the marks (paging, preempted, reset); then the contexts, and one
	 * for the rest beyond LEGEND_MAX. */
	d->legend_rows = 1 + (shown + d->legend_cols - 1) / d->legend_cols + (shown < d->nctx);
}

/* Text for SVG: &, <, > and quotes escaped. */
static void put_text(FILE *f, const char *s)
{
	static const char *const entities[256] = {
	        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;"};

	for (; *s; s++) {
		const char *e = entities[(unsigned char)*s];

		if (e)
			fputs(e, f);
		else
			fputc(*s, f);
	}
}

static void axis(drawing *d, double bottom)
{
	uint64_t span = d->t1 > d->t0 ? d->t1 - d->t0 : 1;
	/* A 1, 2 or 5 step giving about ten ticks. */
	uint64_t step = 1;
	while (step * 10 < span)
		step *= 10;
	if (span / step < 2)
		step /= 5;
	else if (span / step < 5)
		step /= 2;
	if (step == 0)
		step = 1;
	fprintf(d->f, "<g class=\"axis\" font-size=\"11\" fill=\"#333\">\n");
	fprintf(d->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
	        LEFT, bottom, d->width - RIGHT, bottom);
	for (uint64_t t = 0; t <= span; t += step) {
		double x = xof(d, d->t0 + t);
		char label[32];
		cli_format_duration(t, label, sizeof(label));
		fprintf(d->f,
		        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>"
		        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
		        x, TOP - 6, x, bottom + 4, x, bottom + 18, t ? label : "0");
	}
	fprintf(d->f, "</g>\n");
}

/* Runs, markers and the in-flight count of one lane. */
static void lanes(drawing *d)
{
	const cli_schedule *s = d->s;
	char color[32], flags[256], ran[24];
	for (size_t i = 0; i < d->nlanes; i++) {
		double y = lane_y(i);
		char name[32];
		if (d->nhosts)
			snprintf(name, sizeof name, "h%" PRIu32 " node %" PRIu32, d->nodes[i] >> 8,
			         d->nodes[i] & 0xff);
		else
			snprintf(name, sizeof name, "node %" PRIu32, d->nodes[i]);
		fprintf(d->f, "<text x=\"8\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">%s",
		        y + LANE_H / 2 + 4, name);
		if (d->nhosts) { /* the host's URL on hover */
			fputs("<title>", d->f);
			put_text(d->f, d->hosts[d->nodes[i] >> 8]);
			fputs("</title>", d->f);
		}
		fprintf(d->f,
		        "</text>\n<rect class=\"lane\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
		        "height=\"%.1f\" fill=\"#f4f4f4\"/>\n"
		        "<text x=\"8\" y=\"%.1f\" font-size=\"10\" fill=\"#666\">in "
		        "flight</text>\n",
		        LEFT, y, d->width - LEFT - RIGHT, LANE_H, y + LANE_H + DEPTH_H / 2 + 4);
	}
	/* One pass over the events, keeping each packet's last RUNNING event. */
	size_t *running = calloc(s->nrecs + 1, sizeof(*running));
	if (!running)
		return;
	for (size_t i = 0; i < s->nevs; i++) {
		const gs_packet_event *e = &s->evs[i];
		const gs_packet_record *r = cli_schedule_find(s, e->packet);
		size_t k = (size_t)(r - s->recs);
		double y = lane_y(lane_of(d, r->node));
		if (running[k]) {
			/* This event ends the run that began at running[k] - 1. */
			const gs_packet_event *st = &s->evs[running[k] - 1];
			running[k] = 0;
			double x0 = xof(d, st->time_ns), x1 = xof(d, e->time_ns);
			bool paging = r->submit_flags & GS_SUBMIT_PAGING;
			const ctx_label *l = paging ? NULL : label_of(d, r->context);
			if (l)
				color_of(l->number, color, sizeof(color));
			else
				snprintf(color, sizeof(color), "#9a9a9a");
			gs_flags_format(gs_submit_flag_names, r->submit_flags, flags,
			                sizeof(flags));
			cli_format_duration(e->time_ns - st->time_ns, ran, sizeof(ran));
			char label[32] = "paging";
			if (l)
				snprintf(label, sizeof label, "c%zu", l->number);
			char host[300];
			fprintf(d->f,
			        "<rect class=\"run\" data-packet=\"%" PRIu64
			        "\" data-label=\"%s\" x=\"%.2f\" y=\"%.1f\" "
			        "width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#222\" "
			        "stroke-width=\"0.3\"><title>%s: packet %" PRIu64
			        "%s, context %" PRIu64 ", fence %" PRIu64
			        ", flags %s: ran %s, then %s",
			        shown(d, r->packet), label, x0, y + 3,
			        x1 - x0 < 0.6 ? 0.6 : x1 - x0, LANE_H - 6, color, label,
			        shown(d, r->packet), on_host(d, r->packet, host, sizeof host),
			        shown(d, r->context), r->fence, flags, ran,
			        gs_packet_state_name(e->state));
			if (e->detail[0]) {
				fputs(": ", d->f);
				put_text(d->f, e->detail);
			}
			fputs("</title></rect>\n", d->f);
			/* The label inside a box wide enough for it. */
			if (x1 - x0 >= 8 + CHAR_W * (double)strlen(label))
				fprintf(d->f,
				        "<text class=\"runlabel\" x=\"%.2f\" y=\"%.1f\" "
				        "font-size=\"11\" fill=\"#fff\" "
				        "pointer-events=\"none\">%s</text>\n",
				        x0 + 4, y + LANE_H / 2 + 4, label);
			d->runs++;
		}
		if (e->state == GS_PACKET_RUNNING)
			running[k] = i + 1;
		const char *mark =
		        e->state == GS_PACKET_PREEMPTED ? "#d62728"
		        : (e->state == GS_PACKET_ABORTED || e->state == GS_PACKET_FAULTED) ? "#000"
		                                                                           : NULL;
		if (mark) {
			double x = xof(d, e->time_ns);
			char host[300];
			fprintf(d->f,
			        "<path class=\"marker\" d=\"M%.2f %.1f l-4 -7 h8 z\" fill=\"%s\">"
			        "<title>packet %" PRIu64 "%s %s: ",
			        x, y + 1, mark, shown(d, r->packet),
			        on_host(d, r->packet, host, sizeof host),
			        gs_packet_state_name(e->state));
			put_text(d->f, e->detail);
			fputs("</title></path>\n", d->f);
			d->markers++;
		}
	}
	free(running);
}

static int cmp_step(const void *x, const void *y)
{
	const int64_t *a = x, *b = y;
	return (a[0] > b[0]) - (a[0] < b[0]);
}

/* Under each lane: how many of its packets were submitted and not yet final, over time. */
static void in_flight(drawing *d)
{
	const cli_schedule *s = d->s;
	int64_t *steps = malloc((2 * s->nrecs + 1) * 2 * sizeof(*steps));
	if (!steps)
		return;
	for (size_t lane = 0; lane < d->nlanes; lane++) {
		size_t n = 0;
		for (size_t i = 0; i < s->nrecs; i++) {
			const gs_packet_record *r = &s->recs[i];
			if (r->node != d->nodes[lane])
				continue;
			steps[2 * n] = (int64_t)r->submitted_ns;
			steps[2 * n + 1] = 1;
			n++;
			uint64_t end = r->completed_ns ? r->completed_ns : d->t1;
			steps[2 * n] = (int64_t)end;
			steps[2 * n + 1] = -1;
			n++;
		}
		qsort(steps, n, 2 * sizeof(*steps), cmp_step);
		int64_t depth = 0, max = 1;
		for (size_t i = 0; i < n; i++) {
			depth += steps[2 * i + 1];
			if (depth > max)
				max = depth;
		}
		double base = lane_y(lane) + LANE_H + DEPTH_H - 2;
		fprintf(d->f, "<polyline class=\"depth\" fill=\"none\" stroke=\"#1f77b4\" "
		              "stroke-width=\"1\" points=\"");
		depth = 0;
		double last_y = base;
		fprintf(d->f, "%.1f,%.1f", LEFT, base);
		for (size_t i = 0; i < n; i++) {
			double x = xof(d, (uint64_t)steps[2 * i]);
			depth += steps[2 * i + 1];
			double y = base - (double)depth * (DEPTH_H - 6) / (double)max;
			fprintf(d->f, " %.1f,%.1f %.1f,%.1f", x, last_y, x, y);
			last_y = y;
		}
		fprintf(d->f,
		        " %.1f,%.1f\"><title>packets in flight on node %" PRIu32
		        "%s, at most %" PRId64 "</title></polyline>\n",
		        d->width - RIGHT, last_y,
		        d->nhosts ? d->nodes[lane] & 0xff : d->nodes[lane],
		        d->nhosts ? " of that host" : "", max);
	}
	free(steps);
}

/* The marks' row, then one entry per context, row by row. */
static void legend(drawing *d, double y)
{
	char color[32], text[256];
	double x = LEFT;
	fprintf(d->f, "<g class=\"legend\" font-size=\"11\">\n");
	fprintf(d->f,
	        "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"#9a9a9a\"/>"
	        "<text x=\"%.1f\" y=\"%.1f\">paging</text>"
	        "<path d=\"M%.1f %.1f l-4 -7 h8 z\" fill=\"#d62728\"/><text x=\"%.1f\" "
	        "y=\"%.1f\">preempted</text>"
	        "<path d=\"M%.1f %.1f l-4 -7 h8 z\" fill=\"#000\"/><text x=\"%.1f\" "
	        "y=\"%.1f\">reset or fault</text>\n",
	        x, y, x + 16, y + 10, x + 84, y + 11, x + 92, y + 10, x + 170, y + 11, x + 178,
	        y + 10);
	size_t shown = d->nctx < LEGEND_MAX ? d->nctx : LEGEND_MAX;
	for (size_t i = 0; i < shown; i++) {
		double ex = LEFT + (double)(i % d->legend_cols) * d->legend_col_w;
		double ey = y + LEGEND_ROW_H * (double)(1 + i / d->legend_cols);
		color_of(d->ctxs[i].number, color, sizeof(color));
		legend_text(d, &d->ctxs[i], text, sizeof text);
		fprintf(d->f,
		        "<rect class=\"ctx\" data-label=\"c%zu\" x=\"%.1f\" y=\"%.1f\" "
		        "width=\"12\" "
		        "height=\"12\" fill=\"%s\"/><text class=\"ctx\" x=\"%.1f\" y=\"%.1f\">",
		        d->ctxs[i].number, ex, ey, color, ex + 16, ey + 10);
		put_text(d->f, text);
		fputs("</text>\n", d->f);
	}
	if (shown < d->nctx)
		fprintf(d->f,
		        "<text x=\"%.1f\" y=\"%.1f\">and %zu more contexts, c%zu to c%zu (their "
		        "runs"
		        " carry their labels; hover one for its context)</text>\n",
		        LEFT,
		        y +
		                LEGEND_ROW_H * (double)(1 + (shown + d->legend_cols - 1) /
		                                                    d->legend_cols) +
		                10,
		        d->nctx - shown, shown + 1, d->nctx);
	fputs("</g>\n", d->f);
}

static void draw(drawing *d, bool html)
{
	const cli_schedule *s = d->s;
	double bottom = lane_y(d->nlanes) - GAP + 6;
	legend_layout(d);
	double height = bottom + 30 + LEGEND_ROW_H * (double)d->legend_rows + 12;
	char start[40], span[24];
	cli_format_time(d->t0, start, sizeof(start));
	cli_format_duration(d->t1 - d->t0, span, sizeof(span));
	if (html)
		fprintf(d->f,
		        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
		        "<title>gpusched timeline</title><style>body{font-family:sans-serif;"
		        "margin:8px;background:#fff}svg{max-width:100%%;height:auto}"
		        "rect.run:hover{stroke-width:2}</style></head>"
		        "<body><h2>gpusched timeline: %zu packets from %s over %s</h2>\n",
		        s->nrecs, start, span);
	fprintf(d->f,
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
	        "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
	        "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
	        "<text x=\"8\" y=\"20\" font-size=\"13\">%zu packets from %s, over %s</text>\n",
	        d->width, height, d->width, height, s->nrecs, start, span);
	axis(d, bottom);
	lanes(d);
	in_flight(d);
	legend(d, bottom + 30);
	fputs("</svg>\n", d->f);
	if (html)
		fputs("</body></html>\n", d->f);
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return (a > b) - (a < b);
}

/*
 * Several hosts: every host's schedule in one, each packet and context id carrying its host in
 * its low HOST_BITS bits (ids are below 2^53, so they still fit) and each node its host in
 * bits 8 and up, so that hosts' ids never meet; the drawing shows them as their hosts do.
 * Takes the hosts' schedules (freed here). Returns 0, or -1 without memory.
 */
static int merge_hosts(cli_schedule *per_host, size_t n, cli_schedule *out)
{
	size_t nrecs = 0, nevs = 0;
	for (size_t h = 0; h < n; h++) {
		nrecs += per_host[h].nrecs;
		nevs += per_host[h].nevs;
	}
	out->recs = malloc((nrecs + 1) * sizeof(*out->recs));
	out->evs = malloc((nevs + 1) * sizeof(*out->evs));
	int rv = out->recs && out->evs ? 0 : -1;
	for (size_t h = 0; h < n; h++) {
		cli_schedule *one = &per_host[h];
		for (size_t i = 0; rv == 0 && i < one->nrecs; i++) {
			gs_packet_record r = one->recs[i];
			r.packet = r.packet << HOST_BITS | h;
			r.context = r.context << HOST_BITS | h;
			r.node = (uint32_t)h << 8 | r.node;
			r.dispatches = NULL;
			out->recs[out->nrecs++] = r;
			one->recs[i].result = one->recs[i].tenant = NULL; /* moved */
		}
		for (size_t i = 0; rv == 0 && i < one->nevs; i++) {
			gs_packet_event e = one->evs[i];
			e.packet = e.packet << HOST_BITS | h;
			e.context = e.context << HOST_BITS | h;
			out->evs[out->nevs++] = e;
			one->evs[i].detail = NULL; /* moved */
		}
		out->truncated = out->truncated || one->truncated;
		cli_schedule_free(one);
	}
	free(per_host);
	if (rv == 0)
		cli_schedule_sort(out);
	return rv;
}

int cmd_timeline(cli *ctx, int argc, char **argv)
{
	static const cli_syntax syntax = {timeline_help, CLI_OPTS(timeline_opts)};
	timeline_args a = {.sched = {.output = "timeline.html", .max_packets = 20000},
	                   .width = 1600};
	cli_schedule s = {0};
	int rv;

	drawing d = {.s = &s, .width = a.width, .t0 = UINT64_MAX};
	if (ctx->nurls > 1) {
		cli_schedule *per_host;
		rv = cli_schedule_start_hosts(ctx, argc, argv, &syntax, &a, &per_host);
		if (rv != CLI_CONTINUE)
			return rv;
		d.nhosts = gs_hosts_count(ctx->hosts);
		for (size_t h = 0; h < d.nhosts; h++)
			d.hosts[h] = gs_hosts_url(ctx->hosts, h);
		if (merge_hosts(per_host, d.nhosts, &s) != 0) {
			cli_schedule_free(&s);
			return cli_fail(ctx, GS_ERR_NOMEM);
		}
	} else {
		rv = cli_schedule_start(ctx, argc, argv, &syntax, &a, &s);
		if (rv != CLI_CONTINUE)
			return rv;
	}
	if (label_contexts(&d) != 0) {
		cli_warn(ctx, "out of memory");
		free(d.ctxs);
		free(d.by_id);
		cli_schedule_free(&s);
		return CLI_EXIT_DAEMON;
	}
	for (size_t i = 0; i < s.nrecs; i++) {
		const gs_packet_record *r = &s.recs[i];
		if (r->submitted_ns && r->submitted_ns < d.t0)
			d.t0 = r->submitted_ns;
		if (r->completed_ns > d.t1)
			d.t1 = r->completed_ns;
		bool seen = false;
		for (size_t j = 0; j < d.nlanes; j++)
			seen |= d.nodes[j] == r->node;
		if (!seen && d.nlanes < 64)
			d.nodes[d.nlanes++] = r->node;
	}
	for (size_t i = 0; i < s.nevs; i++)
		if (s.evs[i].time_ns > d.t1)
			d.t1 = s.evs[i].time_ns;
	if (d.t0 == UINT64_MAX)
		d.t0 = d.t1;
	qsort(d.nodes, d.nlanes, sizeof(d.nodes[0]), cmp_u32);
	size_t len = strlen(a.sched.output);
	bool svg = len >= 4 && strcmp(a.sched.output + len - 4, ".svg") == 0;
	d.f = fopen(a.sched.output, "w");
	if (!d.f) {
		cli_warn(ctx, "cannot write %s", a.sched.output);
		free(d.ctxs);
		free(d.by_id);
		cli_schedule_free(&s);
		return CLI_EXIT_DAEMON;
	}
	draw(&d, !svg);
	bool ok = fclose(d.f) == 0;
	if (!ok) {
		cli_warn(ctx, "cannot write %s", a.sched.output);
		free(d.ctxs);
		free(d.by_id);
		cli_schedule_free(&s);
		return CLI_EXIT_DAEMON;
	}
	if (ctx->json)
		cli_json_print(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "file",
		                         a.sched.output, "packets", (json_int_t)s.nrecs, "contexts",
		                         (json_int_t)d.nctx, "runs", (json_int_t)d.runs, "markers",
		                         (json_int_t)d.markers, "lanes", (json_int_t)d.nlanes,
		                         "truncated", s.truncated));
	else
		printf("%s: %zu packets of %zu contexts, %" PRIu64 " runs on %zu engines, %" PRIu64
		       " markers\n",
		       a.sched.output, s.nrecs, d.nctx, d.runs, d.nlanes, d.markers);
	free(d.ctxs);
	free(d.by_id);
	cli_schedule_free(&s);
	return ctx->hosts ? cli_hosts_report(ctx, CLI_EXIT_OK) : CLI_EXIT_OK;
}
