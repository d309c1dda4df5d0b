/*
 * The null engine: an infinitely fast engine. Every packet completes at once with zero engine
 * time and untouched memory; only its SIGNAL commands still report their fences, so waiters
 * behave as they would on a real engine (MODEL.md: NullRendering still signals fences).
 */
#include "engine_thread.h"

static void null_run(gs_engine *e, gs_exec *x, gs_irq *final)
{
	gs_emu_walk(e, x, false, final);
}

static int null_create(const gs_engine_config *cfg, gs_engine **out)
{
	return gs_engine_thread_create(cfg, null_run, out);
}

const gs_engine_ops gs_engine_null = {
        .name = "null",
        .create = null_create,
        .submit = gs_engine_thread_submit,
        .preempt = gs_engine_thread_preempt,
        .destroy = gs_engine_thread_destroy,
};
