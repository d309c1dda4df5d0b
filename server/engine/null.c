/*
 * The null engine: an infinitely fast engine. Every packet completes at once with zero engine
 * time and untouched memory; only its SIGNAL commands still report their fences, so waiters
 * behave as they would on a real engine (docs/concepts.md: NullRendering still signals fences).
 * Paging packets are the exception: they execute, so memory stays what the daemon says.
 * Budgets, timeouts and preemption are moot: nothing runs long enough to reach them.
 */
#include "engine/thread.h"
#include "wddm.h"

static void null_run(gsd_engine *e, gsd_exec *x, gsd_irq *final)
{
	/* The memory manager's paging packets still move their bytes (and zero new memory):
	 * allocations must keep their contents, and never show another's old bytes. */
	gsd_emu_walk(e, x, (x->submit_flags & GS_SUBMIT_PAGING) != 0, final);
}

static int null_create(const gsd_engine_config *cfg, gsd_engine **out)
{
	return gsd_engine_thread_create(cfg, null_run, out);
}

/* Nothing can hang on an engine that finishes every packet at once, so there is nothing for
 * a reset to recover; dropping queued packets would only make the scheduler redo done work. */
static void null_reset(gsd_engine *e)
{
	(void)e;
}

const gsd_engine_ops gsd_engine_null = GSD_ENGINE_THREAD_OPS("null", null_create, null_reset);
