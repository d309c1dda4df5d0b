/*
 * Several daemons as one (gpusched.h, "Several daemons as one"; docs/hosts.md): a client per
 * host, calls made on every host at once (a thread per host: each client is blocking), merged
 * history and placement of new devices on the least-loaded adapter.
 */
#include "gpusched.h"
#include "rpc.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct host {
	char *url;
	gs_client *c; /* NULL while down */
	char why[256];
} host;

struct gs_hosts {
	size_t n;
	host h[];
};

int gs_url_list_split(char *list, const char **urls, size_t cap)
{
	size_t n = 0;
	if (!list || !urls)
		return GS_ERR_INVALID;
	for (char *p = list;;) {
		while (*p == ',' || isspace((unsigned char)*p))
			*p++ = 0;
		if (!*p)
			break;
		if (n == cap)
			return GS_ERR_INVALID;
		urls[n++] = p;
		while (*p && *p != ',' && !isspace((unsigned char)*p))
			p++;
	}
	return n ? (int)n : GS_ERR_INVALID;
}

static void note(host *x, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->why, sizeof(x->why), fmt, ap);
	va_end(ap);
}

/* ---- one call per host, all at once ---- */

typedef struct job {
	gs_hosts *h;
	size_t i;
	void (*fn)(struct job *);
	void *arg; /* the caller's, per host */
	int rv;
} job;

static void *job_main(void *p)
{
	job *j = p;
	j->fn(j);
	return NULL;
}

/* Runs fn for every host in `which` (NULL: every host that is up) on its own thread, and waits
 * for all. A thread that cannot start runs its host's job here instead. */
static void each_host(gs_hosts *h, const bool *which, void (*fn)(job *), void **args, job *jobs)
{
	pthread_t t[GS_MAX_HOSTS];
	bool started[GS_MAX_HOSTS] = {false};
	for (size_t i = 0; i < h->n; i++) {
		jobs[i] = (job){.h = h, .i = i, .fn = fn, .arg = args ? args[i] : NULL, .rv = 0};
		if (which ? !which[i] : !h->h[i].c)
			continue;
		/* The last one runs on this thread: one thread fewer. */
		bool last = true;
		for (size_t k = i + 1; k < h->n && last; k++)
			last = which ? !which[k] : !h->h[k].c;
		if (!last && pthread_create(&t[i], NULL, job_main, &jobs[i]) == 0)
			started[i] = true;
		else
			fn(&jobs[i]);
	}
	for (size_t i = 0; i < h->n; i++)
		if (started[i])
			pthread_join(t[i], NULL);
}

/* ---- connecting ---- */

static void connect_one(job *j)
{
	host *x = &j->h->h[j->i];
	gs_connect_options o = *(const gs_connect_options *)j->arg;
	o.url = x->url;
	j->rv = gs_connect_with(&o, &x->c, x->why, sizeof(x->why));
	if (j->rv != 0 && !x->why[0])
		note(x, "%s", gs_strerror(j->rv));
}

int gs_hosts_connect(const char *const *urls, size_t count, const gs_connect_options *opts,
                     gs_hosts **out)
{
	if (!out)
		return GS_ERR_INVALID;
	*out = NULL;
	if (!urls || count == 0 || count > GS_MAX_HOSTS)
		return GS_ERR_INVALID;
	for (size_t i = 0; i < count; i++) {
		if (!urls[i] || !urls[i][0])
			return GS_ERR_INVALID;
		/* The same daemon twice would count each of its packets twice. */
		for (size_t k = 0; k < i; k++)
			if (strcmp(urls[k], urls[i]) == 0)
				return GS_ERR_INVALID;
	}
	gs_connect_options o;
	gsc_connect_options_copy(opts && opts->size ? opts : NULL, &o);
	gs_hosts *h = calloc(1, sizeof(*h) + count * sizeof(host));
	if (!h)
		return GS_ERR_NOMEM;
	h->n = count;
	for (size_t i = 0; i < count; i++) {
		h->h[i].url = strdup(urls[i]);
		if (!h->h[i].url) {
			gs_hosts_close(h);
			return GS_ERR_NOMEM;
		}
	}
	bool all[GS_MAX_HOSTS];
	void *args[GS_MAX_HOSTS];
	job jobs[GS_MAX_HOSTS];
	for (size_t i = 0; i < count; i++) {
		all[i] = true;
		args[i] = &o;
	}
	each_host(h, all, connect_one, args, jobs);
	*out = h;
	for (size_t i = 0; i < count; i++)
		if (h->h[i].c)
			return 0;
	return GS_ERR_TRANSPORT;
}

void gs_hosts_close(gs_hosts *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++) {
		gs_close(h->h[i].c);
		free(h->h[i].url);
	}
	free(h);
}

size_t gs_hosts_count(const gs_hosts *h)
{
	return h ? h->n : 0;
}

const char *gs_hosts_url(const gs_hosts *h, size_t i)
{
	return h && i < h->n ? h->h[i].url : NULL;
}

gs_client *gs_hosts_client(const gs_hosts *h, size_t i)
{
	return h && i < h->n ? h->h[i].c : NULL;
}

const char *gs_hosts_error(const gs_hosts *h, size_t i)
{
	return h && i < h->n ? h->h[i].why : NULL;
}

void gs_hosts_set_down(gs_hosts *h, size_t i, const char *why)
{
	if (!h || i >= h->n)
		return;
	note(&h->h[i], "%s", why ? why : "");
	gs_close(h->h[i].c);
	h->h[i].c = NULL;
}

/* The reason of a failed call on host x: the daemon's message, or the local error. */
static void failed(host *x, const char *what, int rv)
{
	const char *msg = x->c ? gs_client_message(x->c) : "";
	note(x, "%s: %s%s%s", what, gs_strerror(rv), msg && msg[0] ? ": " : "", msg ? msg : "");
}

/* ---- merged history ---- */

typedef struct part {
	gs_history_filter f;
	gs_packet_record *recs;
	size_t n, cap;
	size_t next; /* merge position */
	bool full;   /* its last page was full: it may have more */
	bool failed; /* left out of this result */
	uint32_t page, max_page;
	int rv; /* why it failed */
} part;

static void fetch_page(job *j)
{
	host *x = &j->h->h[j->i];
	part *p = j->arg;
	gs_packet_record *recs = NULL;
	size_t n = 0;
	if (p->n) {
		uint64_t last = p->recs[p->n - 1].packet;
		if (p->f.oldest_first)
			p->f.after_packet = last;
		else
			p->f.before_packet = last;
	}
	/* A host asked again holds the merge up: twice the page each time, so that a host with
	 * most of the newest packets takes few rounds. */
	if (p->n)
		p->page = p->page * 2 < p->max_page ? p->page * 2 : p->max_page;
	p->f.limit = p->page;
	j->rv = p->rv = gs_history(x->c, &p->f, &recs, &n);
	if (j->rv != 0) {
		failed(x, "history", j->rv);
		p->failed = true;
		return;
	}
	if (p->n + n > p->cap) {
		size_t cap = p->n + n + p->cap;
		gs_packet_record *g = realloc(p->recs, cap * sizeof(*g));
		if (!g) {
			gs_history_free(recs, n);
			note(x, "history: out of memory");
			j->rv = p->rv = GS_ERR_NOMEM;
			p->failed = true;
			return;
		}
		p->recs = g;
		p->cap = cap;
	}
	if (n)
		memcpy(p->recs + p->n, recs, n * sizeof(*recs));
	p->n += n;
	free(recs); /* the strings moved into p->recs */
	p->full = n == p->page;
}

/* Does a come before b in the merged order? */
static bool before(uint64_t a, uint64_t b, bool oldest_first)
{
	return oldest_first ? a < b : a > b;
}

/* The next record of the merge (ties: the lower host), or -1 when every part is used up. */
static int next_part(const part *parts, size_t n, bool oldest_first)
{
	int best = -1;
	for (size_t i = 0; i < n; i++) {
		const part *p = &parts[i];
		if (p->failed || p->next >= p->n)
			continue;
		if (best < 0 ||
		    before(p->recs[p->next].submitted_ns,
		           parts[best].recs[parts[best].next].submitted_ns, oldest_first))
			best = (int)i;
	}
	return best;
}

/*
 * How many of the merged records are certain, and which parts hold that up. A part that may
 * have more (full) knows nothing past its last record's time; the merge is certain for every
 * record strictly before the least advanced of those times (the bound). Returns how many
 * merged records are before the bound (capped at limit); sets want[i] for the full parts
 * whose last time is the bound, whose next pages move it. *more: some part is full.
 */
static size_t certain(part *parts, size_t n, bool oldest_first, size_t limit, bool *want,
                      bool *more)
{
	bool have = false;
	uint64_t bound = 0;
	for (size_t i = 0; i < n; i++) {
		const part *p = &parts[i];
		if (p->failed || !p->full)
			continue;
		uint64_t t = p->recs[p->n - 1].submitted_ns;
		/* The least advanced: the first in the merged order. */
		if (!have || before(t, bound, oldest_first))
			bound = t;
		have = true;
	}
	*more = have;
	for (size_t i = 0; i < n; i++) {
		want[i] = have && !parts[i].failed && parts[i].full &&
		          parts[i].recs[parts[i].n - 1].submitted_ns == bound;
		parts[i].next = 0;
	}
	size_t count = 0;
	int b;
	while (count < limit && (b = next_part(parts, n, oldest_first)) >= 0) {
		if (have && !before(parts[b].recs[parts[b].next].submitted_ns, bound, oldest_first))
			break;
		parts[b].next++;
		count++;
	}
	return count;
}

int gs_hosts_history(gs_hosts *h, const gs_history_filter *filter, gs_packet_record **records,
                     uint32_t **hosts, size_t *count)
{
	if (!h || !filter || !records || !hosts || !count)
		return GS_ERR_INVALID;
	*records = NULL;
	*hosts = NULL;
	*count = 0;
	if (filter->before_packet || filter->after_packet || filter->limit > 10000)
		return GS_ERR_INVALID;
	size_t limit = filter->limit ? filter->limit : 100, live = 0;
	for (size_t i = 0; i < h->n; i++)
		live += h->h[i].c != NULL;
	if (!live)
		return GS_ERR_TRANSPORT;
	part *parts = calloc(h->n, sizeof(*parts));
	if (!parts)
		return GS_ERR_NOMEM;
	/* A quarter more than an even split, so that one round usually settles it. */
	size_t page = (limit * 5 + 4 * live - 1) / (4 * live) + 8;
	if (page > limit)
		page = limit;
	bool want[GS_MAX_HOSTS];
	void *args[GS_MAX_HOSTS];
	job jobs[GS_MAX_HOSTS];
	for (size_t i = 0; i < h->n; i++) {
		parts[i].f = *filter;
		parts[i].page = (uint32_t)page;
		parts[i].max_page = (uint32_t)limit;
		parts[i].failed = !h->h[i].c;
		if (h->h[i].c)
			h->h[i].why[0] = 0;
		want[i] = h->h[i].c != NULL;
		args[i] = &parts[i];
	}
	size_t have;
	for (;;) {
		each_host(h, want, fetch_page, args, jobs);
		bool more;
		have = certain(parts, h->n, filter->oldest_first, limit, want, &more);
		if (have >= limit || !more)
			break;
	}
	int rv = 0;
	size_t answered = 0;
	for (size_t i = 0; i < h->n; i++)
		if (h->h[i].c) {
			answered += !parts[i].failed;
			if (parts[i].failed && rv == 0)
				rv = parts[i].rv;
		}
	if (answered) {
		rv = 0;
		*records = have ? malloc(have * sizeof(**records)) : NULL;
		*hosts = have ? malloc(have * sizeof(**hosts)) : NULL;
		if (have && (!*records || !*hosts)) {
			free(*records);
			free(*hosts);
			*records = NULL;
			*hosts = NULL;
			rv = GS_ERR_NOMEM;
		} else {
			for (size_t i = 0; i < h->n; i++)
				parts[i].next = 0;
			for (size_t k = 0; k < have; k++) {
				int b = next_part(parts, h->n, filter->oldest_first);
				(*records)[k] = parts[b].recs[parts[b].next];
				memset(&parts[b].recs[parts[b].next], 0, sizeof(gs_packet_record));
				(*hosts)[k] = (uint32_t)b;
				parts[b].next++;
			}
			*count = have;
		}
	}
	for (size_t i = 0; i < h->n; i++)
		gs_history_free(parts[i].recs, parts[i].n);
	free(parts);
	return rv;
}

void gs_hosts_history_free(gs_packet_record *records, uint32_t *hosts, size_t count)
{
	gs_history_free(records, count);
	free(hosts);
}

/* ---- placement ---- */

typedef struct candidate {
	size_t host;
	uint32_t adapter;
	double queued_per_engine, memory_used;
} candidate;

static void info_one(job *j)
{
	host *x = &j->h->h[j->i];
	j->rv = gs_info(x->c, (gs_daemon_info **)j->arg);
	if (j->rv != 0)
		failed(x, "info", j->rv);
}

static int by_load(const void *a, const void *b)
{
	const candidate *x = a, *y = b;
	if (x->queued_per_engine != y->queued_per_engine)
		return x->queued_per_engine < y->queued_per_engine ? -1 : 1;
	if (x->memory_used != y->memory_used)
		return x->memory_used < y->memory_used ? -1 : 1;
	if (x->host != y->host)
		return x->host < y->host ? -1 : 1;
	return (x->adapter > y->adapter) - (x->adapter < y->adapter);
}

int gs_hosts_device_create(gs_hosts *h, const char *name, size_t *host_out, uint32_t *adapter,
                           uint64_t *device)
{
	if (!h || !device)
		return GS_ERR_INVALID;
	gs_daemon_info *infos[GS_MAX_HOSTS] = {NULL};
	void *args[GS_MAX_HOSTS];
	job jobs[GS_MAX_HOSTS];
	size_t total = 0;
	for (size_t i = 0; i < h->n; i++) {
		args[i] = &infos[i];
		if (h->h[i].c)
			h->h[i].why[0] = 0;
	}
	each_host(h, NULL, info_one, args, jobs);
	for (size_t i = 0; i < h->n; i++)
		if (infos[i])
			total += infos[i]->adapter_count;
	candidate *cands = calloc(total ? total : 1, sizeof(*cands));
	int rv = cands ? GS_ERR_TRANSPORT : GS_ERR_NOMEM;
	size_t n = 0, answered = 0;
	for (size_t i = 0; cands && i < h->n; i++) {
		if (!infos[i]) {
			if (h->h[i].c && rv == GS_ERR_TRANSPORT)
				rv = jobs[i].rv;
			continue;
		}
		answered++;
		for (size_t a = 0; a < infos[i]->adapter_count; a++) {
			const gs_adapter_info *ai = &infos[i]->adapters[a];
			if (ai->device_dead || ai->device_retrying)
				continue;
			uint64_t queued = 0, engines = 0, used = 0, size = 0;
			for (size_t k = 0; k < ai->node_count; k++) {
				queued += ai->nodes[k].queued;
				engines += ai->nodes[k].engines ? ai->nodes[k].engines : 1;
			}
			for (size_t k = 0; k < ai->segment_count; k++)
				if (ai->segments[k].kind == GS_SEGMENT_MEMORY) {
					used += ai->segments[k].used;
					size += ai->segments[k].size;
				}
			cands[n++] = (candidate){
			        .host = i,
			        .adapter = ai->id,
			        .queued_per_engine = engines ? (double)queued / (double)engines : 0,
			        .memory_used = size ? (double)used / (double)size : 0};
		}
	}
	if (cands)
		qsort(cands, n, sizeof(*cands), by_load);
	/* Hosts answered, but none has an adapter that works. */
	if (cands && answered && !n)
		rv = GS_STATUS_NOT_FOUND;
	for (size_t k = 0; k < n; k++) {
		gs_client *c = h->h[cands[k].host].c;
		uint32_t was = gs_client_adapter(c);
		gs_client_set_adapter(c, cands[k].adapter);
		rv = gs_device_create(c, name, device);
		if (rv == 0) {
			if (host_out)
				*host_out = cands[k].host;
			if (adapter)
				*adapter = cands[k].adapter;
			break;
		}
		failed(&h->h[cands[k].host], "device create", rv);
		gs_client_set_adapter(c, was);
		/* Only a refusal moves on to the next adapter. A lost answer may have made the
		 * device: another one elsewhere would be a second. */
		if (rv < 0)
			break;
	}
	free(cands);
	for (size_t i = 0; i < h->n; i++)
		gs_info_free(infos[i]);
	return rv;
}
