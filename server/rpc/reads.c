/*
 * Heavy reads: history, packet events, moves, explain and usage (rpc/h_history.c) query the
 * audit file, and a query of 10,000 rows over a large file costs tens of milliseconds of CPU.
 * On libuv's shared pool, six clients asking at once took every pool thread and the CPU the
 * loop and the audit writer needed: another tenant's submissions waited ×10 at p50 (issue 26,
 * item 7). Such reads now cost the reader, not the neighbours:
 *
 *   - one reader thread runs them, one at a time, at a lower CPU priority (nice +10 for that
 *     thread only): when the CPU is short, the loop and the audit writer run first;
 *   - waiting reads are served tenant by tenant: the next one is the oldest of the tenant
 *     served least recently, so one tenant's many readers make only that tenant wait;
 *   - a tenant has at most GSD_READS_PER_TENANT reads waiting or running, and the daemon
 *     GSD_READS_QUEUED in all; beyond, a read is answered BUSY (and audited) at once;
 *   - each read still returns at most its row cap (10,000 packets or events).
 *
 * Everything but the query itself runs on the loop: queueing, the choice of the next read,
 * and the answer (gsd_call_offload_finish).
 */
#include "rpc/internal.h"

#include "core/log.h"
#include "core/tenant.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The reader thread's nice value above the daemon's. */
#define READER_NICE 10

typedef struct read_job {
	gsd_list link; /* in reads.queue */
	gsd_call *c;
	void (*fn)(gsd_call *c);
} read_job;

struct gsd_reads {
	gsd_daemon *d;
	gsd_list queue;  /* waiting jobs, oldest first (loop) */
	uint32_t queued; /* their count (loop) */
	uint32_t in;     /* reads waiting or running (loop) */
	uint64_t turns;  /* reads started, for the tenants' turns (loop) */
	gsd_wake done_wake;
	bool wake_open;
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	read_job *running; /* handed to the thread (mu) */
	read_job *done;    /* finished, for the loop (mu) */
	bool stop;         /* (mu) */
};

static void *reader_main(void *arg)
{
	struct gsd_reads *r = arg;
	pthread_setname_np(pthread_self(), "gs-reader");
	/* On Linux a thread's nice value is its own: this lowers only the reader. */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), READER_NICE) != 0)
		GSD_DEBUG("rpc: the history reader keeps the daemon's priority: %s",
		          strerror(errno));
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->stop && (!r->running || r->done))
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->stop)
			break;
		read_job *j = r->running;
		pthread_mutex_unlock(&r->mu);
		j->fn(j->c);
		pthread_mutex_lock(&r->mu);
		r->done = j;
		r->running = NULL;
		gsd_wake_send(&r->done_wake);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* The waiting job of the tenant served least recently (its oldest); NULL when none waits. */
static read_job *next_job(struct gsd_reads *r)
{
	read_job *best = NULL;
	for (gsd_list *l = r->queue.next; l != &r->queue; l = l->next) {
		read_job *j = GSD_CONTAINER_OF(l, read_job, link);
		if (!best || j->c->tenant->read_turn < best->c->tenant->read_turn)
			best = j;
	}
	return best;
}

/* Hands the next job to the thread when it is idle (loop). */
static void start_next(struct gsd_reads *r)
{
	pthread_mutex_lock(&r->mu);
	bool idle = !r->running && !r->done;
	pthread_mutex_unlock(&r->mu);
	read_job *j = idle ? next_job(r) : NULL;
	if (!j)
		return;
	gsd_list_remove(&j->link);
	r->queued--;
	j->c->tenant->read_turn = ++r->turns;
	pthread_mutex_lock(&r->mu);
	r->running = j;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void done_cb(gsd_wake *w)
{
	struct gsd_reads *r = w->data;
	pthread_mutex_lock(&r->mu);
	read_job *j = r->done;
	r->done = NULL;
	pthread_mutex_unlock(&r->mu);
	if (j) {
		j->c->tenant->reads--;
		r->in--;
		gsd_call *c = j->c;
		free(j);
		gsd_call_offload_finish(c);
	}
	start_next(r);
}

int gsd_rpc_reads_start(struct gsd_rpc *rpc)
{
	struct gsd_reads *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	r->d = rpc->d;
	gsd_list_init(&r->queue);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	rpc->reads = r;
	if (gsd_wake_init(rpc->d->loop, &r->done_wake, done_cb) != 0)
		return -1;
	r->done_wake.data = r;
	r->wake_open = true;
	if (pthread_create(&r->thread, NULL, reader_main, r) != 0)
		return -1;
	r->thread_started = true;
	return 0;
}

bool gsd_call_read(gsd_call *c, void (*work)(gsd_call *c))
{
	struct gsd_reads *r = c->d->rpc->reads;
	gsd_tenant *t = c->tenant;
	if (t->reads >= GSD_READS_PER_TENANT) {
		gsd_call_error(
		        c, GSD_ST(BUSY),
		        "%u history reads of this tenant are waiting or running (at most %u);"
		        " retry when one is answered",
		        t->reads, GSD_READS_PER_TENANT);
		return false;
	}
	if (r->queued >= GSD_READS_QUEUED) {
		gsd_call_error(c, GSD_ST(BUSY),
		               "%u history reads are waiting (at most %u); retry later", r->queued,
		               GSD_READS_QUEUED);
		return false;
	}
	read_job *j = calloc(1, sizeof *j);
	if (!j) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return false;
	}
	j->c = c;
	j->fn = work;
	t->reads++;
	r->in++;
	gsd_list_push_back(&r->queue, &j->link);
	r->queued++;
	c->d->rpc->offloads++;
	start_next(r);
	return true;
}

void gsd_rpc_reads_stop(struct gsd_rpc *rpc)
{
	struct gsd_reads *r = rpc->reads;
	if (!r)
		return;
	if (r->thread_started) {
		pthread_mutex_lock(&r->mu);
		r->stop = true;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
		r->thread_started = false;
	}
	if (r->wake_open)
		gsd_wake_close(&r->done_wake, false);
	r->wake_open = false;
}

void gsd_rpc_reads_free(struct gsd_rpc *rpc)
{
	struct gsd_reads *r = rpc->reads;
	if (!r)
		return;
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
	rpc->reads = NULL;
}

uint32_t gsd_rpc_reads_in(const gsd_daemon *d)
{
	return d->rpc && d->rpc->reads ? d->rpc->reads->in : 0;
}
