/*
 * What the Vulkan backend offers beyond the engine interface: a baseline for benchmarks.
 */
#ifndef GSD_ENGINE_VULKAN_H
#define GSD_ENGINE_VULKAN_H

#include <stdint.h>

#include "engine/engine.h"

/*
 * Copies bytes from the start of segment src to the start of segment dst with one
 * vkCmdCopyBuffer, submitted on the backend's queue and waited for: the plain copy a paging
 * TRANSFER is measured against (bench_vulkan). Returns the wall nanoseconds from submit to
 * the fence, or 0 when it failed. Not for use while engines run on the same segments.
 */
uint64_t gsd_vulkan_plain_copy(gsd_backend *b, const gsd_mem_segment *src,
                               const gsd_mem_segment *dst, uint64_t bytes);

/* The VkMemoryPropertyFlags of a segment's memory (0 for one the backend did not make). */
uint32_t gsd_vulkan_segment_flags(const gsd_backend *b, const gsd_mem_segment *seg);

#endif
