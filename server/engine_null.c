/*
 * The null engine: an infinitely fast engine. Every packet completes at once with zero engine
 * time and untouched memory; only its SIGNAL commands still report their fences, so waiters
 * behave as they would on a real engine (MODEL.md: NullRendering still signals fences).
 * Paging packets are the exception: they execute, so memory stays what the daemon says.
 * Budgets, timeouts and preemption are moot: nothing runs long enough to reach them.
 */
#include "engine_thread.h"
#include "wddm.h"

static void null_run(gs_engine *e, gs_exec *x, gs_irq *final)
{
	/* The memory manager's paging packets still move their bytes (and zero new memory):
	 * allocations must keep their contents, and never show another's old bytes. */
	gs_emu_walk(e, x, (x->submit_flags & GS_SUBMIT_PAGING) != 0, final);
}

static int null_create(const gs_engine_config *cfg, gs_engine **out)
{
	return gs_engine_thread_create(cfg, null_run, out);
}

/* Nothing can hang on an engine that finishes every packet at once, so there is nothing for
 * a reset to recover; dropping queued packets would only make the scheduler redo done work. */
static void null_reset(gs_engine *e)
{
	(void)e;
}

const gs_engine_ops gs_engine_null = {
        .name = "null",
        .create = null_create,
        .submit = gs_engine_thread_submit,
        .preempt = gs_engine_thread_preempt,
        .reset = null_reset,
        .destroy = gs_engine_thread_destroy,
};
