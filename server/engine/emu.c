/*
 * The emulated engine: executes the packet's commands against real host memory, with time
 * from the wall clock (SPIN really takes its time) or a virtual clock (SPIN only adds to the
 * engine time it reports).
 *
 * Where a packet can stop: at command boundaries (a preemption request, an exhausted budget,
 * a reset), and inside a SPIN. A preemptible SPIN stops for a request or the budget and
 * reports how much of it was done, so resubmitting from its offset with that progress
 * finishes exactly the remaining work. A NONPREEMPTIBLE SPIN (a long shader) runs whole
 * unless the engine is reset, or on the virtual clock hits the timeout.
 *
 * The virtual clock is exact: a SPIN advances in whole microseconds and stops at the first
 * one at which the run's engine time reaches the budget, so a packet with a given budget
 * stops at the same place every time. On the virtual clock SPINs take no wall time, so
 * preemption requests are seen at command boundaries only.
 *
 * Virtual engine time: VIRTUAL_CMD_NS for issuing any command, the SPIN microseconds, and
 * for a TRANSFER also its bytes at VIRTUAL_TRANSFER_BYTES_PER_NS (a 16 GB/s copy engine),
 * rounded up to a whole nanosecond: a function of the size alone, so it is deterministic.
 * It is charged once the transfer has moved its bytes (a faulting one moved none). Other
 * commands (FILL, COPY, CHECKSUM) cost the per-command time only.
 */
#include "engine/thread.h"

#include <stdio.h>

#include "wddm.h"

/* Virtual engine time charged for decoding and issuing any command. */
#define VIRTUAL_CMD_NS 100u
/* Bytes a TRANSFER moves per nanosecond of virtual engine time (16 GB/s). */
#define VIRTUAL_TRANSFER_BYTES_PER_NS 16u

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t micros_to_ns(uint64_t micros)
{
	return micros > UINT64_MAX / 1000u ? UINT64_MAX : micros * 1000u;
}

/* Virtual engine time of the bytes of a TRANSFER: ceil(bytes / 16) ns, no overflow. */
static uint64_t transfer_ns(uint64_t bytes)
{
	return bytes / VIRTUAL_TRANSFER_BYTES_PER_NS + (bytes % VIRTUAL_TRANSFER_BYTES_PER_NS != 0);
}

/* One run of one packet. */
typedef struct walk {
	gsd_engine *e;
	gsd_exec *x;
	gsd_irq *final;
	bool execute;
	bool virtual_clock;
	uint64_t t0;  /* wall clock at the start of the run */
	uint64_t vns; /* virtual engine time of the run */
} walk;

static uint64_t engine_ns(const walk *w)
{
	return !w->execute ? 0 : w->virtual_clock ? w->vns : gsd_engine_now_ns() - w->t0;
}

static bool budget_spent(const walk *w)
{
	return w->x->budget_ns && engine_ns(w) >= w->x->budget_ns;
}

/* Ends the run with a final interrupt stopped at `at` (spin_done_us: of the SPIN there). */
static void stop(walk *w, gsd_irq_kind kind, gsd_stop_reason why, size_t at, uint64_t spin_done_us)
{
	gsd_engine_final(w->final, kind, why, at, spin_done_us);
}

/* The reason to stop before the command at `at`, if any. Budget before request: on the
 * virtual clock that keeps the reported reason a function of the packet and budget alone. */
static bool stop_at_boundary(walk *w, size_t at, uint64_t spin_done_us)
{
	if (gsd_engine_abort_pending(w->e))
		stop(w, GSD_IRQ_ABORTED, GSD_STOP_NONE, at, spin_done_us);
	else if (budget_spent(w))
		stop(w, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, at, spin_done_us);
	else if (gsd_engine_preempt_pending(w->e))
		stop(w, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_REQUEST, at, spin_done_us);
	else
		return false;
	return true;
}

/* Runs what is left of the SPIN at `at` (done_us of it already done) on the virtual clock.
 * Returns false if the run stopped inside it. */
static bool spin_virtual(walk *w, const gs_isa_cmd *cmd, size_t at, uint64_t done_us)
{
	const uint64_t budget = w->x->budget_ns;
	const uint64_t left_us = cmd->micros - done_us;
	const uint64_t end = sat_add(w->vns, micros_to_ns(left_us));

	if (cmd->flags & GS_SPIN_NONPREEMPTIBLE) {
		const uint64_t limit = sat_add(budget, w->x->tdr_ns);
		if (budget && w->x->tdr_ns && end > limit) {
			uint64_t ran_us = limit > w->vns ? (limit - w->vns) / 1000u : 0;
			w->vns = limit;
			stop(w, GSD_IRQ_ENGINE_TIMEOUT, GSD_STOP_NONE, at, done_us + ran_us);
			return false;
		}
		w->vns = end;
		return true;
	}
	if (budget && end > budget) {
		/* The first whole microsecond at which the budget is reached. */
		uint64_t ran_us = w->vns >= budget ? 0 : (budget - w->vns + 999u) / 1000u;
		if (ran_us < left_us) {
			w->vns += ran_us * 1000u;
			stop(w, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, at, done_us + ran_us);
			return false;
		}
	}
	w->vns = end;
	return true;
}

/* The same on the wall clock: sleeps until the SPIN's end, or for a preemptible one the
 * budget's, waking at once for a request. */
static bool spin_wall(walk *w, const gs_isa_cmd *cmd, size_t at, uint64_t done_us)
{
	const bool preemptible = !(cmd->flags & GS_SPIN_NONPREEMPTIBLE);
	const uint64_t need = micros_to_ns(cmd->micros - done_us);
	const uint64_t s0 = gsd_engine_now_ns();
	const uint64_t end = sat_add(s0, need);
	uint64_t until = end;

	if (preemptible && w->x->budget_ns) {
		uint64_t budget_end = sat_add(w->t0, w->x->budget_ns);
		if (budget_end < until)
			until = budget_end;
	}
	gsd_wait_result r = gsd_engine_wait_until(w->e, until, preemptible);
	uint64_t ran = gsd_engine_now_ns() - s0;
	/* A thread descheduled past the end finished the SPIN whatever woke it. */
	if (ran >= need)
		return true;
	uint64_t spin_done_us = done_us + ran / 1000u;
	switch (r) {
	case GSD_WAIT_ABORT:
		stop(w, GSD_IRQ_ABORTED, GSD_STOP_NONE, at, spin_done_us);
		break;
	case GSD_WAIT_PREEMPT:
		stop(w, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_REQUEST, at, spin_done_us);
		break;
	case GSD_WAIT_TIME:
		stop(w, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, at, spin_done_us);
		break;
	}
	return false;
}

void gsd_emu_walk(gsd_engine *e, gsd_exec *x, bool execute, gsd_irq *final)
{
	walk w = {.e = e,
	          .x = x,
	          .final = final,
	          .execute = execute,
	          .virtual_clock = e->cfg.virtual_clock,
	          .t0 = gsd_engine_now_ns()};
	size_t pos = x->resume_offset;
	gs_isa_cmd cmd;

	if (gsd_engine_bad_resume(x, final))
		return;
	for (;;) {
		const size_t at = pos;
		/* Decoded before the stop checks: a packet with nothing left completes rather than
		 * being preempted into an empty resubmission. */
		gs_isa_err err = gs_isa_decode(x->dma, x->dma_len, &pos, &cmd);
		if (err == GS_ISA_END) {
			stop(&w, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, at, 0);
			break;
		}
		if (err != GS_ISA_OK) {
			gsd_engine_decode_fault(final, at, err);
			break;
		}
		/* Only the command at resume_offset can be a partly done SPIN. */
		const uint64_t done_us = at == x->resume_offset && cmd.op == GS_OP_SPIN
		                                 ? gsd_engine_resume_spin_done(x)
		                                 : 0;
		if (execute && stop_at_boundary(&w, at, done_us))
			break;
		w.vns += VIRTUAL_CMD_NS;
		if (cmd.op == GS_OP_SIGNAL) {
			gsd_engine_report_signal(e, x, &cmd, pos, engine_ns(&w));
			continue;
		}
		if (!execute)
			continue;
		if (cmd.op == GS_OP_SPIN) {
			bool whole = w.virtual_clock ? spin_virtual(&w, &cmd, at, done_us)
			                             : spin_wall(&w, &cmd, at, done_us);
			if (!whole)
				break;
			continue;
		}
		if (gsd_engine_exec_cmd(e->cfg.memory, x, &cmd, final->detail,
		                        sizeof(final->detail)) != 0) {
			stop(&w, GSD_IRQ_DMA_PAGE_FAULTED, GSD_STOP_NONE, at, 0);
			break;
		}
		if (cmd.op == GS_OP_TRANSFER)
			w.vns = sat_add(w.vns, transfer_ns(cmd.size));
	}
	final->engine_ns = engine_ns(&w);
}

/* NullRendering packets go through queueing and fence signalling but do not execute. */
static void emu_run(gsd_engine *e, gsd_exec *x, gsd_irq *final)
{
	gsd_emu_walk(e, x, !(x->submit_flags & GS_SUBMIT_NULL_RENDERING), final);
}

static int emu_create(const gsd_engine_config *cfg, gsd_engine **out)
{
	return gsd_engine_thread_create(cfg, emu_run, out);
}

const gsd_engine_ops gsd_engine_emu =
        GSD_ENGINE_THREAD_OPS("emu", emu_create, gsd_engine_thread_reset);
