/*
 * VidMm: the video memory manager. It decides where allocations live (segments by preference,
 * or system memory when video memory is over-committed), makes a packet's allocations resident
 * before it runs (pinning, eviction, compaction), and builds the paging packets that move the
 * bytes. Its allocator, placement order, paging plans and tiled layout are the pure modules
 * beside this one (heap.h, paging_plan.h, swizzle.h).
 *
 * It never calls the scheduler: its paging packets go to the scheduler through the
 * paging_submit hook (core/daemon.h), and requests waiting for an allocation to be unpinned
 * are woken through the allocation's pin_waiters.
 */
#ifndef GSD_VIDMM_H
#define GSD_VIDMM_H

#include "core/daemon.h"

/* Segments (and system memory) of an adapter from its configuration, and the memory
 * manager's per-adapter state. 0 or -1 (logged). */
int gsd_vidmm_adapter_init(gsd_daemon *d, gsd_adapter *a);
void gsd_vidmm_adapter_fini(gsd_daemon *d, gsd_adapter *a);
/* Installs the memory manager's hooks (allocation placement and release). */
void gsd_vidmm_install_hooks(gsd_daemon *d);

typedef enum gsd_vidmm_result {
	GSD_VIDMM_READY,   /* every allocation is resident and pinned: dispatch */
	GSD_VIDMM_PAGING,  /* paging packets were queued: wait for p->paging_wait */
	GSD_VIDMM_NO_ROOM, /* pinned allocations fill the room now: wait for pins to drop */
	GSD_VIDMM_NEVER,   /* can never fit: why says so */
} gsd_vidmm_result;
/* Pins the packet's allocations and makes them resident (the scheduler, before a render
 * packet runs). */
gsd_vidmm_result gsd_vidmm_prepare(gsd_daemon *d, gsd_packet *p, char *why, size_t cap);
/* The memory manager's sync object the packet must wait for now (paging to finish, or room
 * to appear), or NULL. */
gsd_sync *gsd_vidmm_wait_of(const gsd_adapter *a, const gsd_packet *p);
/* Releases the packet's pins (its run ended: retired, preempted, aborted). */
void gsd_vidmm_unpin(gsd_daemon *d, gsd_packet *p);
/* A paging packet reached a final state. */
void gsd_vidmm_paging_done(gsd_daemon *d, gsd_packet *p);

/* Is the allocation in a segment of its supported set? */
bool gsd_vidmm_resident(const gsd_allocation *al);
/* The wire id of where it lives: 0 for system memory. */
uint32_t gsd_vidmm_segment_id(const gsd_allocation *al);
gsd_segment *gsd_vidmm_segment_by_id(gsd_adapter *a, uint32_t wire_id);
/* Bytes of segment s (a->sysmem too) that tenant t's allocations take, counted as the heap
 * counts them (rounded to its alignment): t's share of s->heap.used. */
uint64_t gsd_vidmm_tenant_used(const gsd_adapter *a, const gsd_segment *s, const gsd_tenant *t);
/* CPU view (always linear): copies bytes out of / into the allocation where it lives now,
 * through the segment's mapping or the backend's staging copies. 0, or -1 with a message
 * (out of memory, or a device that failed the copy). */
int gsd_vidmm_cpu_read(const gsd_allocation *al, uint64_t offset, uint8_t *out, uint64_t n,
                       char *err, size_t cap);
int gsd_vidmm_cpu_write(gsd_allocation *al, uint64_t offset, const uint8_t *in, uint64_t n,
                        char *err, size_t cap);
/* Copies the first n bytes of src's memory, as they lie, over dst's (a present). 0, or -1
 * with a message. */
int gsd_vidmm_cpu_blit(const gsd_allocation *src, gsd_allocation *dst, uint64_t n, char *err,
                       size_t cap);
/* The allocation's bytes where the CPU can read them in place (linear layout in mapped
 * memory), else NULL. Valid until the loop next runs anything that may move memory. */
const uint8_t *gsd_vidmm_cpu_view(const gsd_allocation *al);

/* Client requests: move to a segment (system memory: gsd_vidmm_segment_by_id(a, 0)) with the
 * given kind (Gpusched__V1__MoveKind). The allocation must not be pinned. Returns 0, 1 when
 * already there, or a status with msg. */
int gsd_vidmm_move_to(gsd_daemon *d, gsd_allocation *al, gsd_segment *dst, uint32_t want_flags,
                      int kind, const char *reason, char *msg, size_t cap);
/* Makes allocations (of one adapter) resident for a MakeResident request, all or none.
 * Returns OK with *moved, or a status with msg (NOT_RESIDENT_TOGETHER when they can never
 * be resident together, OUT_OF_MEMORY when the room is held by packets now). */
int gsd_vidmm_make_resident(gsd_daemon *d, gsd_allocation **als, size_t n, uint32_t *moved,
                            char *msg, size_t cap);

#endif
