/*
 * The schedule of a time range as the audit has it: the caller's packets submitted in the range
 * and all their state changes, read in pages. gpusched trace and timeline draw it.
 */
#include <stdlib.h>

#include "cli.h"

#define PAGE 10000u

static int cmp_rec(const void *x, const void *y)
{
	const gs_packet_record *a = x, *b = y;
	return (a->packet > b->packet) - (a->packet < b->packet);
}

/* items with room for one more than its n entries of `size` bytes: items itself, or a larger copy
 * (*cap updated, `first` entries at first); NULL, with items left as it is, without memory. */
static void *room_for_one(void *items, size_t *cap, size_t n, size_t size, size_t first)
{
	size_t more = *cap ? 2 * *cap : first;
	void *g;

	if (n < *cap)
		return items;
	g = realloc(items, more * size);
	if (g)
		*cap = more;
	return g;
}

void cli_schedule_sort(cli_schedule *t)
{
	qsort(t->recs, t->nrecs, sizeof(*t->recs), cmp_rec);
}

const gs_packet_record *cli_schedule_find(const cli_schedule *t, uint64_t packet)
{
	gs_packet_record key = {.packet = packet};
	return bsearch(&key, t->recs, t->nrecs, sizeof(*t->recs), cmp_rec);
}

int cli_schedule_fetch(cli *ctx, uint64_t since_ns, uint64_t until_ns, uint64_t max_packets,
                       cli_schedule *t)
{
	gs_history_filter f = {
	        .since_ns = since_ns, .until_ns = until_ns, .oldest_first = true, .limit = PAGE};
	for (;;) {
		gs_packet_record *recs;
		size_t n;
		/* One more than still wanted: whether the range had more is then known. */
		uint64_t want = max_packets - t->nrecs + 1;
		f.limit = want < PAGE ? (uint32_t)want : PAGE;
		int rv = gs_history(ctx->client, &f, &recs, &n);
		if (rv != 0)
			return rv;
		t->truncated = t->truncated || (n && t->nrecs + n > max_packets);
		for (size_t i = 0; i < n && t->nrecs < max_packets; i++) {
			gs_packet_record *g =
			        room_for_one(t->recs, &t->caprecs, t->nrecs, sizeof(*g), 1024);
			if (!g) {
				gs_history_free(recs, n);
				return GS_ERR_NOMEM;
			}
			t->recs = g;
			/* Moved out: the result and tenant now belong to t (the dispatches, not
			 * drawn, are freed with the page). */
			t->recs[t->nrecs] = recs[i];
			t->recs[t->nrecs++].dispatches = NULL;
			recs[i].result = recs[i].tenant = NULL;
		}
		if (n)
			f.after_packet = recs[n - 1].packet;
		gs_history_free(recs, n);
		if (n < f.limit || t->nrecs >= max_packets)
			break;
	}
	qsort(t->recs, t->nrecs, sizeof(*t->recs), cmp_rec);
	uint64_t after = 0;
	for (;;) {
		gs_packet_event *evs;
		size_t n;
		int rv = gs_packet_events_window(ctx->client, since_ns, until_ns, after, PAGE, &evs,
		                                 &n);
		if (rv != 0)
			return rv;
		for (size_t i = 0; i < n; i++) {
			if (!cli_schedule_find(t, evs[i].packet))
				continue; /* past --max-packets */
			gs_packet_event *g =
			        room_for_one(t->evs, &t->capevs, t->nevs, sizeof(*g), 4096);
			if (!g) {
				gs_packet_events_free(evs, n);
				return GS_ERR_NOMEM;
			}
			t->evs = g;
			t->evs[t->nevs++] = evs[i];
			evs[i].detail = NULL;
		}
		if (n)
			after = evs[n - 1].seq;
		gs_packet_events_free(evs, n);
		if (n < PAGE)
			break;
	}
	return 0;
}

void cli_schedule_free(cli_schedule *t)
{
	for (size_t i = 0; i < t->nrecs; i++) {
		free(t->recs[i].result);
		free(t->recs[i].tenant);
	}
	free(t->recs);
	for (size_t i = 0; i < t->nevs; i++)
		free(t->evs[i].detail);
	free(t->evs);
	*t = (cli_schedule){0};
}

int cli_schedule_start(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *args,
                       cli_schedule *s)
{
	const cli_schedule_args *a = args;
	int rv = cli_parse_args(ctx, argc, argv, syntax, args);

	if (rv != CLI_CONTINUE)
		return rv;
	rv = cli_check_range(ctx, a->since_ns, a->until_ns);
	if (rv == CLI_CONTINUE)
		rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	rv = cli_schedule_fetch(ctx, a->since_ns, a->until_ns, a->max_packets, s);
	if (rv != 0) {
		cli_schedule_free(s);
		return cli_fail(ctx, rv);
	}
	/* Never cut silently: the caller learns what it got, and how to get the rest. */
	if (s->truncated)
		cli_warn(ctx,
		         "the range has more than %llu packets: only the oldest %zu are drawn;"
		         " narrow --since/--until, or raise --max-packets",
		         (unsigned long long)a->max_packets, s->nrecs);
	return CLI_CONTINUE;
}

int cli_schedule_start_hosts(cli *ctx, int argc, char **argv, const cli_syntax *syntax, void *args,
                             cli_schedule **per_host)
{
	const cli_schedule_args *a = args;
	*per_host = NULL;
	int rv = cli_parse_args(ctx, argc, argv, syntax, args);
	if (rv == CLI_CONTINUE)
		rv = cli_check_range(ctx, a->since_ns, a->until_ns);
	if (rv != CLI_CONTINUE)
		return rv;
	if ((rv = cli_hosts_connect(ctx)) != CLI_EXIT_OK)
		return rv;
	size_t n = gs_hosts_count(ctx->hosts), answered = 0;
	cli_schedule *s = calloc(n, sizeof(*s));
	if (!s)
		return cli_fail(ctx, GS_ERR_NOMEM);
	for (size_t h = 0; h < n; h++) {
		if (!(ctx->client = gs_hosts_client(ctx->hosts, h)))
			continue;
		int st = cli_schedule_fetch(ctx, a->since_ns, a->until_ns, a->max_packets, &s[h]);
		if (st != 0) {
			char why[256];
			snprintf(why, sizeof why, "%s: %s: %s", ctx->command, gs_status_name(st),
			         gs_client_message(ctx->client));
			gs_hosts_set_down(ctx->hosts, h, why);
			cli_schedule_free(&s[h]);
			continue;
		}
		answered++;
		if (s[h].truncated)
			cli_warn(ctx,
			         "%s: more than %llu packets in the range: only the oldest %zu",
			         gs_hosts_url(ctx->hosts, h), (unsigned long long)a->max_packets,
			         s[h].nrecs);
	}
	ctx->client = NULL;
	if (!answered) {
		free(s);
		cli_warn(ctx, "no host answered: nothing written");
		return cli_hosts_report(ctx, CLI_EXIT_TRANSPORT);
	}
	*per_host = s;
	return CLI_CONTINUE;
}
