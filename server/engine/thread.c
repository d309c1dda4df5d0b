/*
 * The engine core: thread, packet FIFO, preemption/reset/abort requests, the SPIN wait,
 * interrupt delivery.
 *
 * Invariants (under e->lock): a packet is in exactly one of {queue, running, reported final};
 * once stopping is set no packet is popped to run and submit refuses new ones;
 * reset_drain <= queue.len.
 */
#include "engine/thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

/*
 * The last stretch before a deadline (a SPIN's end, a budget's) is busy-waited: even with a
 * timer slack of 1 ns a timed sleep wakes 20-50 us late, more after a long sleep (measured
 * on a 2-vCPU VM: ending 10 ms SPINs with a 50 us tail, p90 17 us late, p99 86 us; with
 * 100 us, p90 1 us, p99 ~25-55 us). It costs 100 us of CPU per deadline, nothing per
 * microsecond of SPIN, and preemption requests still end it at once.
 */
#define WAIT_BUSY_NS 100000u

void gsd_engine_irq_init(gsd_irq *irq, const gsd_engine *e, gsd_exec *x, gsd_irq_kind kind)
{
	memset(irq, 0, sizeof(*irq));
	irq->kind = kind;
	irq->node = e->cfg.node;
	irq->exec = x;
}

void gsd_engine_final(gsd_irq *final, gsd_irq_kind kind, gsd_stop_reason why, size_t at,
                      uint64_t spin_done_us)
{
	final->kind = kind;
	final->stop_reason = why;
	final->stop_offset = at;
	final->spin_done_us = spin_done_us;
}

bool gsd_engine_bad_resume(const gsd_exec *x, gsd_irq *final)
{
	if (x->resume_offset <= x->dma_len)
		return false;
	gsd_engine_final(final, GSD_IRQ_DMA_FAULTED, GSD_STOP_NONE, x->resume_offset, 0);
	snprintf(final->detail, sizeof(final->detail),
	         "resume offset %zu beyond DMA buffer of %zu bytes", x->resume_offset, x->dma_len);
	return true;
}

void gsd_engine_decode_fault(gsd_irq *final, size_t at, gs_isa_err err)
{
	gsd_engine_final(final, GSD_IRQ_DMA_FAULTED, GSD_STOP_NONE, at, 0);
	snprintf(final->detail, sizeof(final->detail), "bad command at +%zu: %s", at,
	         gs_isa_strerror(err));
}

void gsd_engine_report(gsd_engine *e, const gsd_irq *irq)
{
	e->cfg.irq(e->cfg.irq_arg, irq);
}

void gsd_engine_report_signal(gsd_engine *e, gsd_exec *x, const gs_isa_cmd *cmd, size_t next_offset,
                              uint64_t engine_ns)
{
	gsd_irq sig;
	gsd_engine_irq_init(&sig, e, x, GSD_IRQ_FENCE_SIGNAL);
	sig.stop_offset = next_offset;
	sig.sync = cmd->sync;
	sig.value = cmd->value;
	sig.engine_ns = engine_ns;
	gsd_engine_report(e, &sig);
}

uint64_t gsd_engine_resume_spin_done(const gsd_exec *x)
{
	size_t pos = x->resume_offset;
	gs_isa_cmd cmd;

	if (!x->spin_done_us || pos > x->dma_len ||
	    gs_isa_decode(x->dma, x->dma_len, &pos, &cmd) != GS_ISA_OK || cmd.op != GS_OP_SPIN)
		return 0;
	return x->spin_done_us < cmd.micros ? x->spin_done_us : cmd.micros;
}

gsd_wait_result gsd_engine_wait_until(gsd_engine *e, uint64_t until_ns, bool preemptible)
{
	for (;;) {
		if (gsd_engine_abort_pending(e))
			return GSD_WAIT_ABORT;
		if (preemptible && gsd_engine_preempt_pending(e))
			return GSD_WAIT_PREEMPT;
		uint64_t t = gsd_engine_now_ns();
		if (t >= until_ns)
			return GSD_WAIT_TIME;
		if (until_ns - t <= WAIT_BUSY_NS)
			continue;
		uint64_t wake = until_ns - WAIT_BUSY_NS;
		struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000u),
		                      .tv_nsec = (long)(wake % 1000000000u)};
		/* The flags are set under the lock before poke is signalled, so checking them
		 * under the lock here cannot miss a request. Spurious wake-ups just loop. */
		pthread_mutex_lock(&e->lock);
		if (!gsd_engine_abort_pending(e) && !(preemptible && gsd_engine_preempt_pending(e)))
			pthread_cond_timedwait(&e->poke, &e->lock, &ts);
		pthread_mutex_unlock(&e->lock);
	}
}

/* Caller holds the lock. */
static int queue_push(gsd_engine *e, gsd_exec *x)
{
	return gs_ring_push(&e->queue, &x);
}

/* Caller holds the lock and has checked queue.len > 0. */
static gsd_exec *queue_pop(gsd_engine *e)
{
	gsd_exec *x = NULL;
	gs_ring_take(&e->queue, &x, 1);
	if (e->reset_drain)
		e->reset_drain--;
	return x;
}

/* Reports ABORTED for a packet that never started; called without the lock. */
static void report_dropped(gsd_engine *e, gsd_exec *x)
{
	gsd_irq irq;
	gsd_engine_irq_init(&irq, e, x, GSD_IRQ_ABORTED);
	irq.stop_offset = x->resume_offset;
	irq.spin_done_us = gsd_engine_resume_spin_done(x);
	gsd_engine_report(e, &irq);
}

static void run_packet(gsd_engine *e, gsd_exec *x)
{
	gsd_irq irq;

	gsd_engine_irq_init(&irq, e, x, GSD_IRQ_STARTED);
	irq.stop_offset = x->resume_offset;
	gsd_engine_report(e, &irq);

	gsd_engine_irq_init(&irq, e, x, GSD_IRQ_DMA_COMPLETED);
	e->run(e, x, &irq);

	/* Idle again before the final report: once the scheduler sees it, it may submit and
	 * preempt or reset the next packet, and that request must not be cleared by this
	 * one's end. */
	pthread_mutex_lock(&e->lock);
	e->running = NULL;
	atomic_store_explicit(&e->preempt_req, false, memory_order_release);
	atomic_store_explicit(&e->reset_req, false, memory_order_release);
	pthread_mutex_unlock(&e->lock);

	gsd_engine_report(e, &irq);
}

static void *engine_main(void *arg)
{
	gsd_engine *e = arg;
	char name[16];
	snprintf(name, sizeof(name), "gs-engine%u", e->cfg.node);
	pthread_setname_np(pthread_self(), name);
	/* Timed waits of this thread end SPINs and budgets: the default 50 us timer slack
	 * would make every one of them ~70 us late. Best effort; only precision depends on it. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

	pthread_mutex_lock(&e->lock);
	for (;;) {
		while (!e->stopping && e->queue.len == 0)
			pthread_cond_wait(&e->wake, &e->lock);
		if (e->stopping)
			break;
		const bool dropped = e->reset_drain > 0;
		gsd_exec *x = queue_pop(e);
		if (dropped) {
			/* A request made for a packet the reset dropped must not stop a later
			 * one submitted to the then idle engine. */
			if (e->queue.len == 0)
				atomic_store_explicit(&e->preempt_req, false, memory_order_release);
			pthread_mutex_unlock(&e->lock);
			report_dropped(e, x);
			pthread_mutex_lock(&e->lock);
			continue;
		}
		e->running = x;
		pthread_mutex_unlock(&e->lock);
		run_packet(e, x);
		pthread_mutex_lock(&e->lock);
	}
	/* Stopping: the packets never started are dropped by the reset, in submission order. */
	while (e->queue.len) {
		gsd_exec *x = queue_pop(e);
		pthread_mutex_unlock(&e->lock);
		report_dropped(e, x);
		pthread_mutex_lock(&e->lock);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

static void engine_free(gsd_engine *e)
{
	pthread_cond_destroy(&e->poke);
	pthread_cond_destroy(&e->wake);
	pthread_mutex_destroy(&e->lock);
	gs_ring_free(&e->queue);
	free(e->name_copy);
	free(e);
}

int gsd_engine_thread_create(const gsd_engine_config *cfg, gsd_engine_run_fn run, gsd_engine **out)
{
	pthread_condattr_t ca;

	if (!cfg || !cfg->irq || !run || !out)
		return -1;
	gsd_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -1;
	/* With these attributes (none, or a clock) glibc's initialisers cannot fail. */
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->wake, NULL);
	/* poke is waited on with deadlines on the engine's own clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->poke, &ca);
	pthread_condattr_destroy(&ca);
	e->cfg = *cfg;
	e->run = run;
	e->queue = GS_RING_INIT(gsd_exec *);
	e->name_copy = strdup(cfg->name ? cfg->name : "");
	e->cfg.name = e->name_copy;
	atomic_init(&e->preempt_req, false);
	atomic_init(&e->reset_req, false);
	atomic_init(&e->abort_req, false);
	if (!e->name_copy || pthread_create(&e->thread, NULL, engine_main, e) != 0) {
		engine_free(e);
		return -1;
	}
	*out = e;
	return 0;
}

int gsd_engine_thread_submit(gsd_engine *e, gsd_exec *x)
{
	int rc = -1;

	pthread_mutex_lock(&e->lock);
	if (!e->stopping && queue_push(e, x) == 0)
		rc = 0;
	pthread_mutex_unlock(&e->lock);
	/* Signalled once the lock is released: woken under it, the engine would only block on
	 * the lock again (two switches per packet instead of one). */
	if (rc == 0)
		pthread_cond_signal(&e->wake);
	return rc;
}

void gsd_engine_thread_preempt(gsd_engine *e)
{
	pthread_mutex_lock(&e->lock);
	if (e->running || e->queue.len) {
		atomic_store_explicit(&e->preempt_req, true, memory_order_release);
		pthread_cond_signal(&e->poke);
	}
	pthread_mutex_unlock(&e->lock);
}

void gsd_engine_thread_reset(gsd_engine *e)
{
	pthread_mutex_lock(&e->lock);
	/* Everything queued now goes, in order, after the running packet; whatever is
	 * submitted after this call returns is new work and runs. */
	e->reset_drain = e->queue.len;
	if (e->running) {
		atomic_store_explicit(&e->reset_req, true, memory_order_release);
		pthread_cond_signal(&e->poke);
	}
	pthread_mutex_unlock(&e->lock);
}

void gsd_engine_thread_destroy(gsd_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	atomic_store_explicit(&e->abort_req, true, memory_order_release);
	pthread_cond_signal(&e->wake);
	pthread_cond_signal(&e->poke);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	engine_free(e);
}
