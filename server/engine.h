/*
 * Engine backends: one engine executes the patched packets of one node on its own thread and
 * reports "interrupts" back through a callback the scheduler registered. Engines never call up
 * into the scheduler; the callback only queues the interrupt and wakes the loop.
 *
 * A backend is a table of operations chosen by name at start-up ("emu", "null").
 */
#ifndef GS_ENGINE_H
#define GS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "isa.h"

/* One segment's backing memory, as the engine sees it. */
typedef struct gs_mem_segment {
	uint32_t id; /* segment id (1..31); 0 = unused slot */
	uint8_t *base;
	uint64_t size;
} gs_mem_segment;

#define GS_MAX_SEGMENTS 32

/* The adapter memory an engine may touch: indexed by segment id. */
typedef struct gs_memory {
	gs_mem_segment seg[GS_MAX_SEGMENTS];
} gs_memory;

/* A GPU address range a packet may access (one per allocation-list entry). */
typedef struct gs_range {
	uint64_t addr; /* GPU address (see isa.h) */
	uint64_t size;
	bool write;
} gs_range;

/* A patched packet handed to an engine. The scheduler owns it; the engine reads it from
 * submit() until it reports the packet's final interrupt (COMPLETED, PREEMPTED, FAULTED,
 * PAGE_FAULTED or ABORTED) and never touches it afterwards. */
typedef struct gs_exec {
	uint64_t packet;
	uint64_t fence;
	uint32_t submit_flags; /* NullRendering: queue and complete, do not execute */
	const uint8_t *dma;    /* patched copy of the DMA buffer */
	size_t dma_len;
	size_t resume_offset; /* byte offset of the first command to run */
	const gs_range *ranges;
	size_t nranges;
	void *user; /* the scheduler's packet */
} gs_exec;

typedef enum gs_irq_kind {
	GS_IRQ_DMA_COMPLETED = 1,
	GS_IRQ_DMA_PREEMPTED = 2,
	GS_IRQ_DMA_FAULTED = 3,
	GS_IRQ_DMA_PAGE_FAULTED = 4,
	GS_IRQ_ABORTED = 5,      /* dropped by a reset */
	GS_IRQ_FENCE_SIGNAL = 6, /* a SIGNAL command ran (MONITORED_FENCE_SIGNALED) */
	GS_IRQ_STARTED = 7,      /* the engine started executing the packet */
} gs_irq_kind;

typedef struct gs_irq {
	gs_irq_kind kind;
	uint32_t node;
	gs_exec *exec;
	size_t stop_offset; /* PREEMPTED: offset of the first command not run; FAULTED: bad cmd */
	uint64_t sync;      /* FENCE_SIGNAL */
	uint64_t value;     /* FENCE_SIGNAL */
	uint64_t engine_ns; /* engine time the packet consumed in this run */
	char detail[96];    /* fault text */
} gs_irq;

/* Called on the engine thread. Must be cheap and thread-safe. */
typedef void (*gs_irq_fn)(void *arg, const gs_irq *irq);

typedef struct gs_engine_config {
	uint32_t node;
	const char *name;
	const gs_memory *memory;
	bool virtual_clock; /* SPIN consumes engine time without sleeping */
	gs_irq_fn irq;
	void *irq_arg;
} gs_engine_config;

typedef struct gs_engine gs_engine;

typedef struct gs_engine_ops {
	const char *name;
	int (*create)(const gs_engine_config *cfg, gs_engine **out); /* starts its thread */
	/* Queues a packet; the engine runs its packets in submission order. */
	int (*submit)(gs_engine *e, gs_exec *x);
	/* Asks the engine to stop the running packet at its next command boundary. */
	void (*preempt)(gs_engine *e);
	/* Stops the thread after reporting ABORTED for every packet not yet finished. */
	void (*destroy)(gs_engine *e);
} gs_engine_ops;

extern const gs_engine_ops gs_engine_emu;
extern const gs_engine_ops gs_engine_null;

/* Looks a backend up by name; NULL if unknown. */
const gs_engine_ops *gs_engine_find(const char *name);

/* The engine half of the ISA: runs one command against memory within the packet's ranges.
 * Returns 0, or -1 with a reason in detail (a page fault). Shared by backends and tests. */
int gs_engine_exec_cmd(const gs_memory *mem, const gs_exec *x, const gs_isa_cmd *cmd, char *detail,
                       size_t detail_cap);

#endif
