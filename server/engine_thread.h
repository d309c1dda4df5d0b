/*
 * The engine core shared by every backend (internal to server/engine_*.c): one thread per
 * engine, a FIFO of submitted packets, the preemption and abort requests, and interrupt
 * reporting. A backend supplies only the function that runs one packet.
 */
#ifndef GS_ENGINE_THREAD_H
#define GS_ENGINE_THREAD_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine.h"

/*
 * Runs one packet on the engine thread, from x->resume_offset to its end or to the first
 * reason to stop. Intermediate interrupts (FENCE_SIGNAL) go through gs_engine_report; the
 * packet's final interrupt is not reported but returned in *final, which arrives prepared as
 * COMPLETED for x: the core reports it once the engine is idle again.
 */
typedef void (*gs_engine_run_fn)(gs_engine *e, gs_exec *x, gs_irq *final);

struct gs_engine {
	gs_engine_config cfg; /* cfg.name points at name_copy */
	gs_engine_run_fn run;
	char *name_copy;
	pthread_t thread;

	pthread_mutex_t lock;
	pthread_cond_t wake; /* the queue gained a packet, or stopping was set */
	/* Guarded by lock: a ring of queued packets, the one running, and the stop request. */
	gs_exec **queue;
	size_t queue_cap, queue_head, queue_len;
	gs_exec *running;
	bool stopping;

	/* Polled by the running packet at command boundaries without the lock. Set only while a
	 * packet is running or queued, cleared under the lock when a packet finishes, so a
	 * request is answered by exactly one final interrupt and never leaks to a later packet
	 * submitted after the engine went idle. */
	atomic_bool preempt_req;
	/* Set once by destroy: the running packet stops at once, even inside a SPIN (a reset). */
	atomic_bool abort_req;
};

int gs_engine_thread_create(const gs_engine_config *cfg, gs_engine_run_fn run, gs_engine **out);
int gs_engine_thread_submit(gs_engine *e, gs_exec *x);
void gs_engine_thread_preempt(gs_engine *e);
void gs_engine_thread_destroy(gs_engine *e);

/* Prepares an interrupt of `kind` about packet x on this engine (everything else zero). */
void gs_engine_irq_init(gs_irq *irq, const gs_engine *e, gs_exec *x, gs_irq_kind kind);

/* Delivers an interrupt to the scheduler's callback; called on the engine thread only. */
void gs_engine_report(gs_engine *e, const gs_irq *irq);

static inline bool gs_engine_preempt_pending(gs_engine *e)
{
	return atomic_load_explicit(&e->preempt_req, memory_order_acquire);
}

static inline bool gs_engine_abort_pending(gs_engine *e)
{
	return atomic_load_explicit(&e->abort_req, memory_order_acquire);
}

/*
 * The emulator's command walk (engine_emu.c). With execute false nothing touches memory or
 * consumes time and preemption is never observed (an infinitely fast engine finishes before
 * any boundary), but SIGNAL commands still report their fences: NullRendering still goes
 * through fence signalling (MODEL.md). The null backend is this walk with execute false.
 */
void gs_emu_walk(gs_engine *e, gs_exec *x, bool execute, gs_irq *final);

#endif
