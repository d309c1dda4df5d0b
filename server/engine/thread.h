/*
 * The engine core shared by every backend (internal to server/engine_*.c): one thread per
 * engine, a FIFO of submitted packets, the preemption, reset and abort requests, the wait a
 * SPIN uses, and interrupt reporting. A backend supplies only the function that runs one
 * packet.
 */
#ifndef GSD_ENGINE_THREAD_H
#define GSD_ENGINE_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "engine/engine.h"
#include "ring.h"

/*
 * Runs one packet on the engine thread, from x->resume_offset to its end or to the first
 * reason to stop. Intermediate interrupts (FENCE_SIGNAL) go through gsd_engine_report; the
 * packet's final interrupt is not reported but returned in *final, which arrives prepared as
 * COMPLETED for x: the core reports it once the engine is idle again.
 */
typedef void (*gsd_engine_run_fn)(gsd_engine *e, gsd_exec *x, gsd_irq *final);

struct gsd_engine {
	gsd_engine_config cfg; /* cfg.name points at name_copy */
	gsd_engine_run_fn run;
	void *priv; /* the backend's per-engine state (set before the first submit) */
	char *name_copy;
	pthread_t thread;

	pthread_mutex_t lock;
	pthread_cond_t wake; /* the queue gained a packet, or stopping was set */
	/* A request for the running packet was made (preempt, reset, destroy): wakes a SPIN
	 * at once instead of letting it poll, which is both faster and nearly free of CPU. */
	pthread_cond_t poke;
	/* Guarded by lock: a ring of queued packets, the one running, and the stop request. */
	gs_ring queue; /* of gsd_exec * */
	gsd_exec *running;
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

int gsd_engine_thread_create(const gsd_engine_config *cfg, gsd_engine_run_fn run, gsd_engine **out);
int gsd_engine_thread_submit(gsd_engine *e, gsd_exec *x);
void gsd_engine_thread_preempt(gsd_engine *e);
void gsd_engine_thread_reset(gsd_engine *e);
void gsd_engine_thread_destroy(gsd_engine *e);

/* The operations table of a backend that is only an engine thread per node (no device of its
 * own: emu, null); `create_fn` starts it with gsd_engine_thread_create. */
#define GSD_ENGINE_THREAD_OPS(backend, create_fn, reset_fn)                                        \
	{                                                                                          \
		.name = (backend), .create = (create_fn), .submit = gsd_engine_thread_submit,      \
		.preempt = gsd_engine_thread_preempt, .reset = (reset_fn),                         \
		.destroy = gsd_engine_thread_destroy,                                              \
	}

/* Prepares an interrupt of `kind` about packet x on this engine (everything else zero). */
void gsd_engine_irq_init(gsd_irq *irq, const gsd_engine *e, gsd_exec *x, gsd_irq_kind kind);

/* Makes *final the packet's final interrupt: kind, why, stopped at `at`, with the progress of
 * the SPIN there. */
void gsd_engine_final(gsd_irq *final, gsd_irq_kind kind, gsd_stop_reason why, size_t at,
                      uint64_t spin_done_us);
/* A resume offset past the DMA buffer: makes *final FAULTED and returns true. */
bool gsd_engine_bad_resume(const gsd_exec *x, gsd_irq *final);
/* A command at `at` that does not decode: makes *final FAULTED with the decoder's reason. */
void gsd_engine_decode_fault(gsd_irq *final, size_t at, gs_isa_err err);

/* Delivers an interrupt to the scheduler's callback; called on the engine thread only. */
void gsd_engine_report(gsd_engine *e, const gsd_irq *irq);
/* A SIGNAL command `cmd` of x ran (the next command starts at next_offset), engine_ns into the
 * packet's engine time: reports FENCE_SIGNAL for its sync object and value. */
void gsd_engine_report_signal(gsd_engine *e, gsd_exec *x, const gs_isa_cmd *cmd, size_t next_offset,
                              uint64_t engine_ns);

/* The microseconds of x's first command already done: x->spin_done_us (at most the SPIN's
 * length) if resume_offset is at a SPIN, else 0. */
uint64_t gsd_engine_resume_spin_done(const gsd_exec *x);

static inline uint64_t gsd_engine_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline bool gsd_engine_preempt_pending(gsd_engine *e)
{
	return atomic_load_explicit(&e->preempt_req, memory_order_acquire);
}

/* A reset or destroy wants the running packet gone, wherever it is. */
static inline bool gsd_engine_abort_pending(gsd_engine *e)
{
	return atomic_load_explicit(&e->abort_req, memory_order_acquire) ||
	       atomic_load_explicit(&e->reset_req, memory_order_acquire);
}

typedef enum gsd_wait_result {
	GSD_WAIT_TIME,    /* the clock reached the deadline */
	GSD_WAIT_PREEMPT, /* a preemption request (only when preemptible) */
	GSD_WAIT_ABORT,   /* a reset or destroy */
} gsd_wait_result;

/*
 * Waits on the engine thread until CLOCK_MONOTONIC reaches until_ns, returning early for an
 * abort, or for a preemption request if `preemptible`. Sleeps on the poke condition (a
 * request wakes it within a thread wake-up, ~10 us) and busy-waits only the last stretch
 * before the deadline, which a timed sleep would overshoot.
 */
gsd_wait_result gsd_engine_wait_until(gsd_engine *e, uint64_t until_ns, bool preemptible);

/*
 * The emulator's command walk (emu.c). With execute false nothing touches memory or
 * consumes time and preemption, budgets and resets are never observed (an infinitely fast
 * engine finishes before any boundary), but SIGNAL commands still report their fences:
 * NullRendering still goes through fence signalling (docs/concepts.md). The null backend is this
 * walk with execute false.
 */
void gsd_emu_walk(gsd_engine *e, gsd_exec *x, bool execute, gsd_irq *final);

#endif
