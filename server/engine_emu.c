/*
 * The emulated engine: executes the packet's commands against real host memory, with time
 * from the wall clock (SPIN really takes its time) or a virtual clock (SPIN only adds to the
 * engine time it reports).
 *
 * Preemption is at command boundaries: the request flag is polled before each command, and a
 * preempted packet reports the offset of the first command it did not run, so resubmitting
 * from there finishes exactly the remaining work. A SPIN, preemptible or not, runs whole; an
 * abort (engine reset) is the only thing that interrupts it.
 */
#include "engine_thread.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "wddm.h"

/* Virtual engine time charged for decoding and issuing any command. */
#define VIRTUAL_CMD_NS 100u
/* Longest sleep inside a SPIN between checks for an abort request. */
#define SPIN_SLEEP_SLICE_NS 1000000u
/* The end of a SPIN is busy-waited: sleeps overshoot by tens of microseconds. */
#define SPIN_BUSY_NS 50000u

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t micros_to_ns(uint64_t micros)
{
	return micros > UINT64_MAX / 1000u ? UINT64_MAX : micros * 1000u;
}

/* Consumes `micros` of wall-clock time; returns false if an abort cut it short. */
static bool spin_wall(gs_engine *e, uint64_t micros)
{
	uint64_t deadline = sat_add(now_ns(), micros_to_ns(micros));

	for (;;) {
		if (gs_engine_abort_pending(e))
			return false;
		uint64_t t = now_ns();
		if (t >= deadline)
			return true;
		uint64_t left = deadline - t;
		if (left <= SPIN_BUSY_NS)
			continue;
		uint64_t nap = left - SPIN_BUSY_NS;
		uint64_t wake = t + (nap < SPIN_SLEEP_SLICE_NS ? nap : SPIN_SLEEP_SLICE_NS);
		struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000u),
		                      .tv_nsec = (long)(wake % 1000000000u)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
}

static void finish(gs_irq *final, gs_irq_kind kind, size_t stop_offset)
{
	final->kind = kind;
	final->stop_offset = stop_offset;
}

void gs_emu_walk(gs_engine *e, gs_exec *x, bool execute, gs_irq *final)
{
	const bool virtual_clock = e->cfg.virtual_clock;
	const uint64_t t0 = now_ns();
	uint64_t vns = 0; /* virtual engine time */
	size_t pos = x->resume_offset;
	gs_isa_cmd cmd;

	if (pos > x->dma_len) {
		finish(final, GS_IRQ_DMA_FAULTED, pos);
		snprintf(final->detail, sizeof(final->detail),
		         "resume offset %zu beyond DMA buffer of %zu bytes", pos, x->dma_len);
		return;
	}
	for (;;) {
		const size_t at = pos;
		if (execute && gs_engine_abort_pending(e)) {
			finish(final, GS_IRQ_ABORTED, at);
			break;
		}
		if (execute && gs_engine_preempt_pending(e)) {
			finish(final, GS_IRQ_DMA_PREEMPTED, at);
			break;
		}
		gs_isa_err err = gs_isa_decode(x->dma, x->dma_len, &pos, &cmd);
		if (err == GS_ISA_END) {
			finish(final, GS_IRQ_DMA_COMPLETED, at);
			break;
		}
		if (err != GS_ISA_OK) {
			finish(final, GS_IRQ_DMA_FAULTED, at);
			snprintf(final->detail, sizeof(final->detail), "bad command at +%zu: %s",
			         at, gs_isa_strerror(err));
			break;
		}
		vns += VIRTUAL_CMD_NS;
		if (cmd.op == GS_OP_SIGNAL) {
			gs_irq sig;
			gs_engine_irq_init(&sig, e, x, GS_IRQ_FENCE_SIGNAL);
			sig.stop_offset = pos;
			sig.sync = cmd.sync;
			sig.value = cmd.value;
			sig.engine_ns = !execute ? 0 : virtual_clock ? vns : now_ns() - t0;
			gs_engine_report(e, &sig);
			continue;
		}
		if (!execute)
			continue;
		if (cmd.op == GS_OP_SPIN) {
			if (virtual_clock) {
				vns = sat_add(vns, micros_to_ns(cmd.micros));
			} else if (!spin_wall(e, cmd.micros)) {
				finish(final, GS_IRQ_ABORTED, at);
				break;
			}
			continue;
		}
		if (gs_engine_exec_cmd(e->cfg.memory, x, &cmd, final->detail,
		                       sizeof(final->detail)) != 0) {
			finish(final, GS_IRQ_DMA_PAGE_FAULTED, at);
			break;
		}
	}
	final->engine_ns = !execute ? 0 : virtual_clock ? vns : now_ns() - t0;
}

/* NullRendering packets go through queueing and fence signalling but do not execute. */
static void emu_run(gs_engine *e, gs_exec *x, gs_irq *final)
{
	gs_emu_walk(e, x, !(x->submit_flags & GS_SUBMIT_NULL_RENDERING), final);
}

static int emu_create(const gs_engine_config *cfg, gs_engine **out)
{
	return gs_engine_thread_create(cfg, emu_run, out);
}

const gs_engine_ops gs_engine_emu = {
        .name = "emu",
        .create = emu_create,
        .submit = gs_engine_thread_submit,
        .preempt = gs_engine_thread_preempt,
        .destroy = gs_engine_thread_destroy,
};
