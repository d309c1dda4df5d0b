/*
 * Validation rules of the wire contract, as pure functions over plain values so each rule can
 * be unit-tested directly. Each returns a Gpusched__V1__Status value and, when not OK, a
 * message naming the field and the rule.
 */
#ifndef GSD_RULES_H
#define GSD_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "wddm.h"

/* What the rules need to know about an adapter. */
typedef struct gsd_rules_adapter {
	uint32_t nnodes;
	int segment_kind[32]; /* by segment id; -1 = no such segment */
	uint32_t max_dma_buffer;
	uint32_t max_allocation_list;
	uint32_t max_patch_list;
} gsd_rules_adapter;

/* A context as the client declared it. */
typedef struct gsd_rules_context {
	uint32_t node;
	uint32_t flags;
	gs_context_info info;
	uint32_t priority_class;
	int32_t priority;
} gsd_rules_context;

#define GSD_MAX_PRIVATE_DATA 65536u

typedef struct Gpusched__V1__ContextCreateRequest Gpusched__V1__ContextCreateRequest;
/* The context a ContextCreate request declares (q->info must not be NULL). */
void gsd_rules_context_of(const Gpusched__V1__ContextCreateRequest *q, gsd_rules_context *out);

int gsd_rules_context_create(const gsd_rules_adapter *a, const gsd_rules_context *c,
                             uint32_t priority_ceiling, char *msg, size_t cap);

/* DXGK_SUBMITCOMMANDFLAGS from a client. */
int gsd_rules_submit_flags(uint32_t flags, char *msg, size_t cap);

/* Allocation creation: size, supported set, D3DDDI_SEGMENTPREFERENCE, priority, flags.
 * `largest` = size of the largest supported segment. */
int gsd_rules_allocation(const gsd_rules_adapter *a, uint64_t size, uint32_t supported_set,
                         uint32_t preference, uint32_t priority, uint32_t flags, char *msg,
                         size_t cap);
/* The supported set with 0 replaced by every segment of the adapter. */
uint32_t gsd_rules_effective_set(const gsd_rules_adapter *a, uint32_t supported_set);

#endif
