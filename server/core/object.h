/*
 * Handle-named objects: devices, contexts, allocations and sync objects, each created and
 * destroyed here and nowhere else.
 *
 * Handles are daemon-wide 64-bit numbers that are never reused; every lookup is scoped to the
 * asking tenant, so one tenant can never name another's objects (it gets NULL, as for a handle
 * that never existed).
 *
 * Contexts and allocations are reference counted: the handle holds one reference and every
 * live packet one more, so destroying a handle while packets still run defers freeing the
 * memory until the last packet retires.
 *
 * The scheduler and the memory manager keep state in these objects and are told about their
 * creation and destruction through the daemon's hooks (core/daemon.h), so this layer never
 * calls up into them.
 */
#ifndef GSD_OBJECT_H
#define GSD_OBJECT_H

#include "core/adapter.h"
#include "core/config.h"
#include "core/list.h"
#include "core/tenant.h"
#include "core/waiter.h"
#include "vidsch/policy.h"

#include "wddm.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum gsd_obj_type {
	GSD_OBJ_DEVICE = 1,
	GSD_OBJ_CONTEXT,
	GSD_OBJ_ALLOCATION,
	GSD_OBJ_SYNC,
	GSD_OBJ_KERNEL,
} gsd_obj_type;

/* Leading fields of every handle-named object. */
typedef struct gsd_object {
	uint64_t handle;
	gsd_obj_type type;
	gsd_tenant *tenant;
	/* The guest process of a VM tenant that made it (Request.guest, set by gpusched-relay; a
	 * device's objects are its guest's); 0 for every other tenant. */
	uint64_t guest;
	/* Who it is in the audit: its tenant's audit_name, or its guest's (NAME/GUEST). */
	const char *identity;
	uint64_t created_ns; /* when it was registered, gsd_now_ns() */
} gsd_object;

struct gsd_device {
	gsd_object obj;
	gsd_adapter *adapter;
	char name[GSD_NAME_MAX];
	gsd_list contexts;
	gsd_list allocations;
	gsd_list syncs;
	gsd_list kernels;
	/* The device's paging queue: every paging packet that moves one of its allocations takes
	 * the next fence; the sync (daemon-signalled) reaches it when that packet finishes. */
	gsd_sync *paging_sync;
	uint64_t paging_fence;
};

struct gsd_context {
	gsd_object obj;
	gsd_device *dev;
	gsd_node *node;
	gsd_list dev_link;
	gsd_list node_link;
	/* ---- scheduler (vidsch/) ---- */
	gsd_list pending;       /* its packets not yet final, in submission order; head runs next */
	gsd_sched_entity sched; /* its place in the node's queue (vidsch/policy.h) */
	gsd_waiter wait;        /* on blocked_on's waiters while its head packet waits */
	gsd_sync *blocked_on;
	/* Its fences (docs/wddm.md, Fences): the n-th packet accepted on it has fence n, kept
	 * through preemption and resubmission; fence_ended is the highest of its packets retired.
	 * Its completed fence is computed from them and pending (gsd_vidsch_completed_fence). */
	uint64_t fence_submitted, fence_ended;
	/* ---- what it declared ---- */
	uint32_t flags;
	gs_context_info info; /* effective DXGK_CONTEXTINFO: list sizes only ever grow */
	bool faulted;
	bool destroyed;
	uint32_t refs; /* 1 for the handle + 1 per live packet */
};

/* What a context is created with (validated by the caller). */
typedef struct gsd_context_params {
	uint32_t node;
	uint32_t flags;
	uint32_t priority_class;
	int32_t priority;
	gs_context_info info;
} gsd_context_params;

typedef struct gsd_allocation {
	gsd_object obj;
	gsd_device *dev;
	gsd_adapter *adapter; /* outlives the device, which may go before the last packet */
	gsd_list dev_link;
	uint64_t size;
	uint32_t supported_segment_set;
	uint32_t segment_preference;
	uint32_t priority;
	uint32_t flags;
	bool destroyed;
	uint32_t refs;          /* 1 for the handle + 1 per live packet */
	uint32_t inflight;      /* live packets that reference it */
	gsd_waitq idle_waiters; /* woken (event: the allocation) when inflight drops to 0 */
	/* ---- memory manager (vidmm/) ---- */
	gsd_segment *segment; /* where it lives: a segment, or system memory (not resident) */
	uint64_t offset;
	gsd_list res_link;     /* in adapter->residents[segment id] */
	uint32_t pins;         /* packets ready or running (or being made ready) that hold it */
	gsd_waitq pin_waiters; /* woken (event: the allocation) when pins drop to 0 */
	uint64_t last_use;     /* d->use_seq when a packet last pinned it (LRU) */
	uint64_t last_use_ns;
	uint64_t moves;
	uint32_t moving;   /* paging packets queued or running that move it */
	uint64_t move_seq; /* paging seq of its latest move: its bytes are in place once
	                      adapter->paging_done reaches it */
	uint32_t pitch;    /* tiled layout pitch (GS_ALLOC_TILED) */
	uint32_t mark;     /* scratch of the memory manager's planner */
} gsd_allocation;

/* What an allocation is created with (validated by the caller). */
typedef struct gsd_allocation_params {
	uint64_t size;
	uint32_t supported_segment_set; /* effective: never 0 */
	uint32_t segment_preference;
	uint32_t priority; /* 0 = NORMAL */
	uint32_t flags;
} gsd_allocation_params;

/*
 * A monitored fence. Its waiters (CPU waits of clients, contexts whose next packet waits for a
 * value, the memory manager's packets waiting for paging or room) are woken with the sync
 * object as the event whenever its value rises, values are abandoned, or it is destroyed
 * (then `destroyed` is set and no handle names it any more); each checks its own condition.
 */
struct gsd_sync {
	gsd_object obj;
	gsd_device *dev; /* NULL for the memory manager's internal ones */
	gsd_list dev_link;
	uint64_t value;
	uint64_t signalled_by; /* the packet whose SIGNAL set value (0: the CPU or never) */
	gsd_waitq waiters;
	/* A packet that would have signalled values up to this one faulted or was cancelled:
	 * waits for values in (value, abandoned] can never be satisfied. */
	uint64_t abandoned;
	bool daemon_only; /* signalled by the daemon only (a device's paging sync) */
	bool destroyed;   /* set while its waiters are woken for the last time */
};

/*
 * A SPIR-V module an adapter's backend accepted, and the backend's object for it (a compute
 * pipeline): shared by the kernels of one tenant (and guest) made from the same module and
 * entry point, and kept a while after the last of them goes, so that making it again costs a
 * lookup. Never shared between tenants: whether a module was already there tells a tenant
 * nothing about the others.
 */
typedef struct gsd_kernel_code {
	gsd_list link; /* adapter->kernel_codes, most recently used first */
	const gsd_tenant *tenant;
	uint64_t guest;
	uint8_t hash[32]; /* BLAKE2b-256 of the entry point's name, a NUL, and the module */
	char entry[GSD_KERNEL_ENTRY_MAX];
	gsd_kernel_info info;
	uint64_t size; /* bytes of SPIR-V */
	void *impl;    /* the backend's object */
	uint32_t refs; /* kernels that use it */
} gsd_kernel_code;

/* A user kernel: a tenant's handle to a module on its device. */
typedef struct gsd_kernel {
	gsd_object obj;
	gsd_device *dev;
	gsd_adapter *adapter; /* outlives the device, which may go before the last packet */
	gsd_list dev_link;
	gsd_kernel_code *code;
	bool destroyed;
	uint32_t refs; /* 1 for the handle + 1 per live packet that names it */
} gsd_kernel;

/* ---- handles ---- */

/* Handles are random (object.c says how they are drawn). Tests only: source, when not NULL,
 * replaces libsodium's generator, so an in-process fuzzer gets the same handles every run;
 * the checks against live objects and the audit file still apply. */
void gsd_object_set_handle_source(uint64_t (*source)(void));
/* Looks a handle up for a tenant: NULL when absent, of another type, or another tenant's
 * (tenant NULL: any tenant's). */
void *gsd_object_get(gsd_daemon *d, uint64_t handle, gsd_obj_type type, const gsd_tenant *t);
/* The same, for one guest process of the tenant: what a request sees (another guest's object
 * is NULL, as one that never existed). */
void *gsd_object_get_guest(gsd_daemon *d, uint64_t handle, gsd_obj_type type, const gsd_tenant *t,
                           uint64_t guest);
/* The objects in the handle table for which keep(o, arg) is true, in handle order: *out (the
 * caller frees it) and *n. -1 when memory is short (*out NULL). */
int gsd_object_collect(gsd_daemon *d, bool (*keep)(const gsd_object *o, void *arg), void *arg,
                       gsd_object ***out, size_t *n);
/* The adapter an object lives on. */
gsd_adapter *gsd_object_adapter(const gsd_object *o);
const char *gsd_object_type_name(gsd_obj_type type);

/* ---- lifecycle: the only places objects are made and unmade ---- */

/* A device of tenant t (and its guest process, 0 outside a VM) on adapter a, with its paging
 * sync object. A system device (the memory manager's) has no handle in the table: no client
 * can name it. NULL: out of memory. */
gsd_device *gsd_device_create(gsd_daemon *d, gsd_adapter *a, gsd_tenant *t, uint64_t guest,
                              const char *name, bool system);
/* Destroys every context, allocation and sync object of the device, then the device. */
void gsd_device_destroy(gsd_daemon *d, gsd_device *dev);
/* Every client device goes (shutdown). */
void gsd_device_destroy_all(gsd_daemon *d);

/* A context of dev (its tenant's) on node pr->node, attached to the scheduler. A system
 * context (paging) has no handle in the table. NULL: out of memory. */
gsd_context *gsd_context_create(gsd_daemon *d, gsd_device *dev, const gsd_context_params *pr,
                                bool system);
/* Cancels its queued packets (the scheduler's hook), removes its handle; freed once its last
 * packet retires. */
void gsd_context_destroy(gsd_daemon *d, gsd_context *x, const char *why);
void gsd_context_put(gsd_daemon *d, gsd_context *x);
/* The context's row in the audit (created, changed or destroyed). */
void gsd_context_audit(gsd_daemon *d, const gsd_context *x);

/* An allocation of dev, placed by the memory manager (the hook). Returns OK, or
 * OUT_OF_MEMORY / INTERNAL (nothing created). */
int gsd_allocation_create(gsd_daemon *d, gsd_device *dev, const gsd_allocation_params *pr,
                          gsd_allocation **out);
/* Removes the handle; the memory goes back once the last packet holding it retires. */
void gsd_allocation_destroy(gsd_daemon *d, gsd_allocation *al);
void gsd_allocation_put(gsd_daemon *d, gsd_allocation *al);
void gsd_allocation_audit(gsd_daemon *d, const gsd_allocation *al);
/* One more packet uses it / one packet that used it is done (wakes idle_waiters at 0). */
void gsd_allocation_busy(gsd_allocation *al);
void gsd_allocation_idle(gsd_allocation *al);

/* A sync object of dev starting at value (dev NULL: an internal one of the memory manager,
 * without a handle); daemon_only: only the daemon signals it (a device's paging fence), and it
 * does not count against the tenant's max_syncs. NULL: out of memory. */
gsd_sync *gsd_sync_create(gsd_daemon *d, gsd_device *dev, uint64_t value, bool daemon_only);
void gsd_sync_destroy(gsd_daemon *d, gsd_sync *s);
/*
 * Making a kernel, in three steps so that the costly middle one (checking the module and
 * compiling its pipeline: milliseconds) runs off the loop:
 *  1. gsd_kernel_prepare (loop): OK with *out when the tenant already has this module on the
 *     adapter (a cached kernel, made now); GSD_KERNEL_BUILD with b filled when it must be
 *     built; UNIMPLEMENTED (the backend runs no kernels) with err.
 *  2. gsd_kernel_build_run (any thread): checks the module (gsd_spirv_check with the
 *     adapter's limits) and makes the backend's object. Reads only b and the module bytes,
 *     which the caller keeps alive.
 *  3. gsd_kernel_adopt (loop): the kernel of dev, with *cached when an identical module got
 *     there first; or the build's status (INVALID_ARGUMENT: refused) with err. If dev is gone
 *     meanwhile, gsd_kernel_build_drop instead. The caller checked the tenant's limits.
 */
#define GSD_KERNEL_BUILD 1000

typedef struct gsd_kernel_build {
	const gsd_engine_ops *ops;
	gsd_backend *backend;
	gsd_kernel_limits limits;
	const void *code;
	size_t size;
	char entry[GSD_KERNEL_ENTRY_MAX];
	uint8_t hash[32];
	/* The result. */
	int status;
	char err[512];
	gsd_kernel_info info;
	void *impl;
} gsd_kernel_build;

int gsd_kernel_prepare(gsd_daemon *d, gsd_device *dev, const void *code, size_t size,
                       const char *entry, gsd_kernel_build *b, gsd_kernel **out, char *err,
                       size_t cap);
void gsd_kernel_build_run(gsd_kernel_build *b);
int gsd_kernel_adopt(gsd_daemon *d, gsd_device *dev, gsd_kernel_build *b, gsd_kernel **out,
                     bool *cached, char *err, size_t cap);
void gsd_kernel_build_drop(gsd_kernel_build *b);
/* Removes the handle; the module stays until the last packet naming it retires. */
void gsd_kernel_destroy(gsd_daemon *d, gsd_kernel *k);
void gsd_kernel_put(gsd_daemon *d, gsd_kernel *k);
/* Frees every module of the adapter (no kernel is left: the daemon stops). */
void gsd_kernel_codes_free(gsd_adapter *a);

/* Raises the value (a monitored fence never goes backwards) and wakes the waiters. */
/* by_packet: the packet whose SIGNAL sets it (0: the CPU). */
void gsd_sync_signal(gsd_daemon *d, gsd_sync *s, uint64_t value, uint64_t by_packet);
/* Values up to `upto` will never be signalled: wakes the waiters so such waits fail. */
void gsd_sync_abandon(gsd_daemon *d, gsd_sync *s, uint64_t upto);
/* Wakes the waiters without a change of its own (an internal sync bumped in place). */
void gsd_sync_changed(gsd_daemon *d, gsd_sync *s);

#endif
