/*
 * The engine core: thread, packet FIFO, preemption/abort requests, interrupt delivery.
 *
 * Invariants (under e->lock): a packet is in exactly one of {queue, running, reported final};
 * once stopping is set no packet is popped to run and submit refuses new ones.
 */
#include "engine_thread.h"

#include <pthread.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

void gs_engine_irq_init(gs_irq *irq, const gs_engine *e, gs_exec *x, gs_irq_kind kind)
{
	memset(irq, 0, sizeof(*irq));
	irq->kind = kind;
	irq->node = e->cfg.node;
	irq->exec = x;
}

void gs_engine_report(gs_engine *e, const gs_irq *irq)
{
	e->cfg.irq(e->cfg.irq_arg, irq);
}

/* Caller holds the lock. */
static int queue_push(gs_engine *e, gs_exec *x)
{
	if (e->queue_len == e->queue_cap) {
		size_t cap = e->queue_cap ? 2 * e->queue_cap : 16;
		gs_exec **q = malloc(cap * sizeof(*q));
		if (!q)
			return -1;
		/* Unroll the ring into the new array so that head is 0 again. */
		for (size_t i = 0; i < e->queue_len; i++)
			q[i] = e->queue[(e->queue_head + i) % e->queue_cap];
		free(e->queue);
		e->queue = q;
		e->queue_cap = cap;
		e->queue_head = 0;
	}
	e->queue[(e->queue_head + e->queue_len) % e->queue_cap] = x;
	e->queue_len++;
	return 0;
}

/* Caller holds the lock and has checked queue_len > 0. */
static gs_exec *queue_pop(gs_engine *e)
{
	gs_exec *x = e->queue[e->queue_head];
	e->queue_head = (e->queue_head + 1) % e->queue_cap;
	e->queue_len--;
	return x;
}

static void run_packet(gs_engine *e, gs_exec *x)
{
	gs_irq irq;

	gs_engine_irq_init(&irq, e, x, GS_IRQ_STARTED);
	irq.stop_offset = x->resume_offset;
	gs_engine_report(e, &irq);

	gs_engine_irq_init(&irq, e, x, GS_IRQ_DMA_COMPLETED);
	e->run(e, x, &irq);

	/* Idle again before the final report: once the scheduler sees it, it may submit and
	 * preempt the next packet, and that request must not be cleared by this one's end. */
	pthread_mutex_lock(&e->lock);
	e->running = NULL;
	atomic_store_explicit(&e->preempt_req, false, memory_order_release);
	pthread_mutex_unlock(&e->lock);

	gs_engine_report(e, &irq);
}

static void *engine_main(void *arg)
{
	gs_engine *e = arg;
	char name[16];
	snprintf(name, sizeof(name), "gs-engine%u", e->cfg.node);
	pthread_setname_np(pthread_self(), name);

	pthread_mutex_lock(&e->lock);
	for (;;) {
		while (!e->stopping && e->queue_len == 0)
			pthread_cond_wait(&e->wake, &e->lock);
		if (e->stopping)
			break;
		gs_exec *x = queue_pop(e);
		e->running = x;
		pthread_mutex_unlock(&e->lock);
		run_packet(e, x);
		pthread_mutex_lock(&e->lock);
	}
	/* Stopping: the packets never started are dropped by the reset, in submission order. */
	while (e->queue_len) {
		gs_exec *x = queue_pop(e);
		gs_irq irq;
		pthread_mutex_unlock(&e->lock);
		gs_engine_irq_init(&irq, e, x, GS_IRQ_ABORTED);
		irq.stop_offset = x->resume_offset;
		gs_engine_report(e, &irq);
		pthread_mutex_lock(&e->lock);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

int gs_engine_thread_create(const gs_engine_config *cfg, gs_engine_run_fn run, gs_engine **out)
{
	if (!cfg || !cfg->irq || !run || !out)
		return -1;
	gs_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -1;
	e->cfg = *cfg;
	e->run = run;
	e->name_copy = strdup(cfg->name ? cfg->name : "");
	e->cfg.name = e->name_copy;
	atomic_init(&e->preempt_req, false);
	atomic_init(&e->abort_req, false);
	if (!e->name_copy)
		goto fail_alloc;
	if (pthread_mutex_init(&e->lock, NULL) != 0)
		goto fail_alloc;
	if (pthread_cond_init(&e->wake, NULL) != 0)
		goto fail_mutex;
	if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
		goto fail_cond;
	*out = e;
	return 0;

fail_cond:
	pthread_cond_destroy(&e->wake);
fail_mutex:
	pthread_mutex_destroy(&e->lock);
fail_alloc:
	free(e->name_copy);
	free(e);
	return -1;
}

int gs_engine_thread_submit(gs_engine *e, gs_exec *x)
{
	int rc = -1;

	pthread_mutex_lock(&e->lock);
	if (!e->stopping && queue_push(e, x) == 0) {
		pthread_cond_signal(&e->wake);
		rc = 0;
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

void gs_engine_thread_preempt(gs_engine *e)
{
	pthread_mutex_lock(&e->lock);
	if (e->running || e->queue_len)
		atomic_store_explicit(&e->preempt_req, true, memory_order_release);
	pthread_mutex_unlock(&e->lock);
}

void gs_engine_thread_destroy(gs_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	atomic_store_explicit(&e->abort_req, true, memory_order_release);
	pthread_cond_signal(&e->wake);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);

	pthread_cond_destroy(&e->wake);
	pthread_mutex_destroy(&e->lock);
	free(e->queue);
	free(e->name_copy);
	free(e);
}
