/*
 * What the scheduler's files share among themselves (not for other layers):
 *   vidsch.c   queues, GPU waits, dispatch, retirement, cancellation, start and stop;
 *   irq.c      interrupts from the engines: completion, preemption, faults, resets;
 *   tdr.c      preemption requests, quantum and TDR timers, faults, timeouts, bans;
 *   display.c  vertical blanks, flips and presents.
 */
#ifndef GSD_VIDSCH_INTERNAL_H
#define GSD_VIDSCH_INTERNAL_H

#include "vidsch/vidsch.h"

#include "engine/engine.h"

/* ---- vidsch.c ---- */
/* The policy's parameters on an adapter: its time slice (or the daemon's quantum). */
gsd_sched_params gsd_vidsch_params(const gsd_daemon *d, const gsd_adapter *a);
/* Puts a context whose head packet may run into its node's queue, and preempts or time-slices
 * the running packet if the newcomer outranks or equals it. Starts nothing. */
void gsd_vidsch_enqueue_ready(gsd_daemon *d, gsd_context *x);
/* enqueue_ready, then start what the node can run. */
void gsd_vidsch_make_ready(gsd_daemon *d, gsd_context *x);
/* Starts what the node can run (iterative: a nested call returns at once). */
void gsd_vidsch_kick(gsd_daemon *d, gsd_node *n);
/* Ends a packet in a final state at `at` (node clock): its result text (NULL: none; for
 * COMPLETED only the record's detail), the
 * daemon's and its tenant's counter of that ending, the audited transition. Nothing else:
 * the caller abandons signals and retires it. */
void gsd_vidsch_end(gsd_daemon *d, gsd_packet *p, int state, uint64_t at, const char *why);
/* Records COMPLETED (the node's completed fence moves on). */
void gsd_vidsch_complete(gsd_daemon *d, gsd_node *n, gsd_packet *p, const char *detail);
/* A packet reached a final state: release what it held and remember how it ended. */
void gsd_vidsch_retire(gsd_daemon *d, gsd_packet *p);
/* Retires a packet but keeps its context alive for what the caller does next (requeue,
 * fault); the caller ends with gsd_context_put. */
gsd_context *gsd_vidsch_retire_keep_context(gsd_daemon *d, gsd_packet *p);
/* Ends a packet that will not run (again): CANCELLED, its unreached signals abandoned. */
void gsd_vidsch_cancel_packet(gsd_daemon *d, gsd_packet *p, const char *why);
/* Cancels the packets of a context that are not on the engine. */
void gsd_vidsch_cancel_context(gsd_daemon *d, gsd_context *x, const char *why);
/* The SIGNAL commands from byte `from` on will never run: their values are abandoned. */
void gsd_vidsch_abandon_signals(gsd_daemon *d, gsd_packet *p, size_t from);
/* The run on the node ended (whatever the interrupt): it is free for the next packet. */
void gsd_vidsch_node_idle(gsd_node *n);

/* ---- irq.c ---- */
void gsd_vidsch_irq_post(void *arg, const gsd_irq *irq);
void gsd_vidsch_irq_drain(gsd_wake *h);

/* ---- tdr.c ---- */
/* Asks the engine to preempt the running packet (once); it must stop within tdr_delay. */
void gsd_vidsch_preempt_running(gsd_daemon *d, gsd_node *n, const char *why);
/* An unbudgeted run now shares its band: it may finish its quantum, then it is preempted. */
void gsd_vidsch_end_slice(gsd_daemon *d, gsd_node *n);
/* Arms the TDR timer of a budgeted run (wall clock). */
void gsd_vidsch_arm_tdr(gsd_daemon *d, gsd_node *n, uint64_t budget_ns);
void gsd_vidsch_timers_init(gsd_daemon *d, gsd_node *n);
/* The packet faulted (the engine reported it): FAULTED, and its context faults. */
void gsd_vidsch_on_fault(gsd_daemon *d, gsd_packet *p, const gsd_irq *irq);
/* After a device loss, once every node of a is idle: has the backend recreate the device and
 * lets the nodes run again; an adapter whose device cannot be recreated is dead (every packet
 * for it is cancelled). */
void gsd_vidsch_recover_device(gsd_daemon *d, gsd_adapter *a);
/* The packet hung (TDR): FAULTED, its context faults, its tenant is charged a timeout. */
void gsd_vidsch_timed_out(gsd_daemon *d, gsd_node *n, gsd_packet *p, const gsd_irq *irq);

/* ---- display.c ---- */
void gsd_vidsch_display_init(gsd_daemon *d, gsd_adapter *a);
/* A Flip (without FlipWithNoWait) completes at the next vertical blank after it executed;
 * the engine stays with it until then. Returns true when it now waits. */
bool gsd_vidsch_flip_waits(gsd_daemon *d, gsd_node *n, gsd_packet *p);
/* Present / RedirectedPresent: copies the source into the display surface once it ran. */
void gsd_vidsch_present(gsd_packet *p);

#endif
