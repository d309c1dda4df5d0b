/*
 * bench_sched_decision's daemon half: the same decisions, timed through a real gpuschedd over
 * the client API, kept apart from the in-process half that drives the policy module directly.
 */
#ifndef GS_SCHED_DECISION_DAEMON_H
#define GS_SCHED_DECISION_DAEMON_H

#include <stddef.h>
#include <stdint.h>

typedef struct sdd_result {
	size_t contexts;
	uint64_t packets; /* per repetition */
	int reps;
	double median_ns, min_ns, max_ns; /* daemon ns per packet (one decision each) */
	double client_ms;                 /* median SubmitBatch round trip */
	double setup_s;                   /* creating the contexts */
	int error;
	char message[256];
} sdd_result;

/* Starts a daemon, creates `contexts` contexts on node 0, then `reps` times submits one batch of
 * about `packets` NullRendering NOPs spread round-robin over them (so every context has ready
 * work when the batch is released) and measures from the daemon's history how long it took to
 * run them. Bounded by `seconds` after the set-up (at least one repetition). */
void sdd_measure(size_t contexts, uint64_t packets, int reps, double seconds, sdd_result *out);

#endif
