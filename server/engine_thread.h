/*
 * The engine core shared by every backend (internal to server/engine_*.c): one thread per
 * engine, a FIFO of submitted packets, the preemption, reset and abort requests, the wait a
 * SPIN uses, and interrupt reporting. A backend supplies only the function that runs one
 * packet.
 */
#ifndef GS_ENGINE_THREAD_H
#define GS_ENGINE_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

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
	/* A request for the running packet was made (preempt, reset, destroy): wakes a SPIN
	 * at once instead of letting it poll, which is both faster and nearly free of CPU. */
	pthread_cond_t poke;
	/* Guarded by lock: a ring of queued packets, the one running, and the stop request. */
	gs_exec **queue;
	size_t queue_cap, queue_head, queue_len;
	gs_exec *running;
	bool stopping;
	/* How many packets at the head of the queue a reset aborts before anything else runs:
	 * those queued when reset() was called, and only those. */
	size_t reset_drain;

	/* Polled by the running packet without the lock. Set only while a packet is running or
	 * queued, cleared under the lock when a packet finishes, so a request is answered by
	 * exactly one final interrupt and never leaks to a later packet submitted after the
	 * engine went idle. */
	atomic_bool preempt_req;
	/* Set by reset() while a packet runs, cleared like preempt_req: that packet aborts at
	 * once, even inside a NONPREEMPTIBLE SPIN. */
	atomic_bool reset_req;
	/* Set once by destroy: the running packet stops at once, even inside a SPIN. */
	atomic_bool abort_req;
};

int gs_engine_thread_create(const gs_engine_config *cfg, gs_engine_run_fn run, gs_engine **out);
int gs_engine_thread_submit(gs_engine *e, gs_exec *x);
void gs_engine_thread_preempt(gs_engine *e);
void gs_engine_thread_reset(gs_engine *e);
void gs_engine_thread_destroy(gs_engine *e);

/* Prepares an interrupt of `kind` about packet x on this engine (everything else zero). */
void gs_engine_irq_init(gs_irq *irq, const gs_engine *e, gs_exec *x, gs_irq_kind kind);

/* Delivers an interrupt to the scheduler's callback; called on the engine thread only. */
void gs_engine_report(gs_engine *e, const gs_irq *irq);

/* The microseconds of x's first command already done: x->spin_done_us (at most the SPIN's
 * length) if resume_offset is at a SPIN, else 0. */
uint64_t gs_engine_resume_spin_done(const gs_exec *x);

static inline uint64_t gs_engine_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline bool gs_engine_preempt_pending(gs_engine *e)
{
	return atomic_load_explicit(&e->preempt_req, memory_order_acquire);
}

/* A reset or destroy wants the running packet gone, wherever it is. */
static inline bool gs_engine_abort_pending(gs_engine *e)
{
	return atomic_load_explicit(&e->abort_req, memory_order_acquire) ||
	       atomic_load_explicit(&e->reset_req, memory_order_acquire);
}

typedef enum gs_wait_result {
	GS_WAIT_TIME,    /* the clock reached the deadline */
	GS_WAIT_PREEMPT, /* a preemption request (only when preemptible) */
	GS_WAIT_ABORT,   /* a reset or destroy */
} gs_wait_result;

/*
 * Waits on the engine thread until CLOCK_MONOTONIC reaches until_ns, returning early for an
 * abort, or for a preemption request if `preemptible`. Sleeps on the poke condition (a
 * request wakes it within a thread wake-up, ~10 us) and busy-waits only the last stretch
 * before the deadline, which a timed sleep would overshoot.
 */
gs_wait_result gs_engine_wait_until(gs_engine *e, uint64_t until_ns, bool preemptible);

/*
 * The emulator's command walk (engine_emu.c). With execute false nothing touches memory or
 * consumes time and preemption, budgets and resets are never observed (an infinitely fast
 * engine finishes before any boundary), but SIGNAL commands still report their fences:
 * NullRendering still goes through fence signalling (MODEL.md). The null backend is this
 * walk with execute false.
 */
void gs_emu_walk(gs_engine *e, gs_exec *x, bool execute, gs_irq *final);

#endif
