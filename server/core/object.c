#include "core/object.h"

#include "core/daemon.h"
#include "core/log.h"
#include "core/util.h"
#include "core/wire_id.h"

#include "wddm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* ---- handles ---- */

static uint64_t (*handle_source)(void);

void gsd_object_set_handle_source(uint64_t (*source)(void))
{
	handle_source = source;
}

/*
 * A handle says nothing about anyone else's objects: it is a random non-zero 53-bit number
 * (at most 2^53 - 1, so SQLite's signed INTEGER, jq and JavaScript keep it exactly), drawn
 * again while it is
 *  - a live object's (the handle table),
 *  - at or below d->handle_floor: the audit verifier takes a row with no record of the chain
 *    and a handle up to meta chain_start_context / chain_start_allocation for one written
 *    before the chain began, so the daemon keeps its new rows out of that range,
 *  - a row of the audit file's contexts or allocations, from an earlier run or this one: both
 *    tables are keyed by handle and a new object's records would update the old row. One
 *    point lookup per table on its primary key, cheap next to what making a context or an
 *    allocation costs; devices and sync objects are looked up the same way.
 * Not looked up: devices and sync objects of earlier runs, and this run's destroyed ones
 * (they key no row: the file names a device only in the rows of its contexts, allocations
 * and packets, and a sync object nowhere), the memory manager's own device (not in the
 * table), and an object destroyed before the writer committed its creation record. A new
 * handle meets one of those with probability n / 2^53 for n such handles (~1e-7 per new
 * handle with a billion of them).
 * A failed lookup counts as used; after GSD_HANDLE_TRIES draws the creation fails.
 */
#define GSD_HANDLE_TRIES 16

static uint64_t new_handle(gsd_daemon *d)
{
	for (int i = 0; i < GSD_HANDLE_TRIES; i++) {
		uint64_t h;
		if (handle_source)
			h = handle_source();
		else
			randombytes_buf(&h, sizeof h);
		h &= GSD_WIRE_MAX;
		if (h == 0 || h <= d->handle_floor || gsd_hmap_get(&d->objects, h))
			continue;
		if (gsd_history_handle_used(d->handles, h) == 0)
			return h;
	}
	GSD_ERROR("no free handle after %d draws (is the audit file readable?)", GSD_HANDLE_TRIES);
	return 0;
}

static uint64_t object_register(gsd_daemon *d, gsd_object *o, gsd_obj_type type, gsd_tenant *t,
                                uint64_t guest, bool in_table)
{
	o->handle = new_handle(d);
	if (!o->handle)
		return 0;
	o->type = type;
	o->tenant = t;
	o->guest = guest;
	o->created_ns = gsd_now_ns();
	o->identity = gsd_tenant_guest_name(t, guest);
	if (!o->identity)
		return 0;
	if (in_table && gsd_hmap_put(&d->objects, o->handle, o) != 0)
		return 0;
	return o->handle;
}

void *gsd_object_get(gsd_daemon *d, uint64_t handle, gsd_obj_type type, const gsd_tenant *t)
{
	gsd_object *o = gsd_hmap_get(&d->objects, handle);
	if (!o || o->type != type || (t && o->tenant != t))
		return NULL;
	return o;
}

void *gsd_object_get_guest(gsd_daemon *d, uint64_t handle, gsd_obj_type type, const gsd_tenant *t,
                           uint64_t guest)
{
	gsd_object *o = gsd_object_get(d, handle, type, t);
	return o && o->guest == guest ? o : NULL;
}

static void object_unregister(gsd_daemon *d, gsd_object *o)
{
	gsd_hmap_del(&d->objects, o->handle);
}

gsd_adapter *gsd_object_adapter(const gsd_object *o)
{
	switch (o->type) {
	case GSD_OBJ_DEVICE:
		return ((const gsd_device *)o)->adapter;
	case GSD_OBJ_CONTEXT:
		return ((const gsd_context *)o)->dev->adapter;
	case GSD_OBJ_ALLOCATION:
		return ((const gsd_allocation *)o)->adapter;
	case GSD_OBJ_SYNC:
		return ((const gsd_sync *)o)->dev->adapter;
	case GSD_OBJ_KERNEL:
		return ((const gsd_kernel *)o)->adapter;
	}
	return NULL;
}

const char *gsd_object_type_name(gsd_obj_type type)
{
	static const char *const names[] = {"",           "device",      "context",
	                                    "allocation", "sync object", "kernel"};
	return type <= GSD_OBJ_KERNEL ? names[type] : "?";
}

/* ---- kernels ---- */

/* Idle modules (no kernel uses them) an adapter keeps for a tenant to make again cheaply. */
#define IDLE_KERNEL_CODES 32u

static void kernel_hash(const void *code, size_t size, const char *entry, uint8_t out[32])
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, 32);
	crypto_generichash_update(&st, (const unsigned char *)entry, strlen(entry) + 1);
	crypto_generichash_update(&st, code, size);
	crypto_generichash_final(&st, out, 32);
}

static void code_free(gsd_adapter *a, gsd_kernel_code *kc)
{
	gsd_list_remove(&kc->link);
	if (kc->impl && a->ops->kernel_destroy)
		a->ops->kernel_destroy(a->backend, kc->impl);
	free(kc);
}

/* The tenant's module with this hash on the adapter, moved to the front; NULL if none. */
static gsd_kernel_code *code_find(gsd_adapter *a, const gsd_tenant *t, uint64_t guest,
                                  const uint8_t hash[32])
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &a->kernel_codes)
	{
		gsd_kernel_code *kc = GSD_CONTAINER_OF(it, gsd_kernel_code, link);
		if (kc->tenant == t && kc->guest == guest && memcmp(kc->hash, hash, 32) == 0) {
			gsd_list_remove(&kc->link);
			gsd_list_push_front(&a->kernel_codes, &kc->link);
			return kc;
		}
	}
	return NULL;
}

/* One kernel fewer uses kc: past IDLE_KERNEL_CODES idle ones, the least recently used goes. */
static void code_put(gsd_adapter *a, gsd_kernel_code *kc)
{
	if (--kc->refs > 0)
		return;
	a->idle_kernel_codes++;
	/* From the least recently used end. */
	for (gsd_list *it = a->kernel_codes.prev, *prev = it->prev;
	     it != &a->kernel_codes && a->idle_kernel_codes > IDLE_KERNEL_CODES;
	     it = prev, prev = it->prev) {
		gsd_kernel_code *old = GSD_CONTAINER_OF(it, gsd_kernel_code, link);
		if (old->refs == 0) {
			code_free(a, old);
			a->idle_kernel_codes--;
		}
	}
}

void gsd_kernel_codes_free(gsd_adapter *a)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &a->kernel_codes)
	code_free(a, GSD_CONTAINER_OF(it, gsd_kernel_code, link));
	a->idle_kernel_codes = 0;
}

static int kernel_register(gsd_daemon *d, gsd_device *dev, gsd_kernel_code *kc, bool cached,
                           gsd_kernel **out, char *err, size_t cap);

int gsd_kernel_prepare(gsd_daemon *d, gsd_device *dev, const void *code, size_t size,
                       const char *entry, gsd_kernel_build *b, gsd_kernel **out, char *err,
                       size_t cap)
{
	gsd_adapter *a = dev->adapter;
	*out = NULL;
	if (!a->kernels) {
		snprintf(err, cap,
		         "adapter %u (%s) runs on the %s backend, which runs no user kernels: use "
		         "an adapter with backend vulkan (gpusched info lists the adapters)",
		         a->id, a->cfg->name, a->ops->name);
		return GSD_ST(UNIMPLEMENTED);
	}
	memset(b, 0, sizeof(*b));
	kernel_hash(code, size, entry, b->hash);
	gsd_kernel_code *kc = code_find(a, dev->obj.tenant, dev->obj.guest, b->hash);
	if (!kc) {
		b->ops = a->ops;
		b->backend = a->backend;
		b->limits = a->kernel_caps.module;
		b->code = code;
		b->size = size;
		snprintf(b->entry, sizeof(b->entry), "%s", entry);
		return GSD_KERNEL_BUILD;
	}
	return kernel_register(d, dev, kc, true, out, err, cap);
}

void gsd_kernel_build_run(gsd_kernel_build *b)
{
	if (gsd_spirv_check(b->code, b->size, b->entry, &b->limits, &b->info, b->err,
	                    sizeof(b->err)) != 0) {
		b->status = GSD_ST(INVALID_ARGUMENT);
		return;
	}
	char why[256];
	if (b->ops->kernel_create(b->backend, b->code, b->size, b->entry, &b->info, &b->impl, why,
	                          sizeof(why)) != 0) {
		snprintf(b->err, sizeof(b->err), "the backend refused the module: %s", why);
		b->status = GSD_ST(INVALID_ARGUMENT);
		b->impl = NULL;
		return;
	}
	b->status = GSD_ST(OK);
}

void gsd_kernel_build_drop(gsd_kernel_build *b)
{
	if (b->impl && b->ops->kernel_destroy)
		b->ops->kernel_destroy(b->backend, b->impl);
	b->impl = NULL;
}

int gsd_kernel_adopt(gsd_daemon *d, gsd_device *dev, gsd_kernel_build *b, gsd_kernel **out,
                     bool *cached, char *err, size_t cap)
{
	gsd_adapter *a = dev->adapter;
	*out = NULL;
	*cached = false;
	if (b->status != GSD_ST(OK)) {
		snprintf(err, cap, "%s", b->err);
		return b->status;
	}
	/* The same module may have been made meanwhile by another request of the tenant. */
	gsd_kernel_code *kc = code_find(a, dev->obj.tenant, dev->obj.guest, b->hash);
	if (kc) {
		gsd_kernel_build_drop(b);
		*cached = true;
		return kernel_register(d, dev, kc, true, out, err, cap);
	}
	kc = calloc(1, sizeof(*kc));
	if (!kc) {
		gsd_kernel_build_drop(b);
		snprintf(err, cap, "out of memory");
		return GSD_ST(INTERNAL);
	}
	kc->tenant = dev->obj.tenant;
	kc->guest = dev->obj.guest;
	memcpy(kc->hash, b->hash, 32);
	snprintf(kc->entry, sizeof(kc->entry), "%s", b->entry);
	kc->info = b->info;
	kc->size = b->size;
	kc->impl = b->impl;
	b->impl = NULL;
	gsd_list_push_front(&a->kernel_codes, &kc->link);
	a->idle_kernel_codes++; /* kernel_register takes it out of the idle count */
	return kernel_register(d, dev, kc, false, out, err, cap);
}

/* A kernel of dev on the module kc (cached: kc was found, not made now). */
static int kernel_register(gsd_daemon *d, gsd_device *dev, gsd_kernel_code *kc, bool cached,
                           gsd_kernel **out, char *err, size_t cap)
{
	gsd_adapter *a = dev->adapter;
	if (kc->refs == 0)
		a->idle_kernel_codes--;
	kc->refs++;
	gsd_kernel *k = calloc(1, sizeof(*k));
	if (!k ||
	    !object_register(d, &k->obj, GSD_OBJ_KERNEL, dev->obj.tenant, dev->obj.guest, true)) {
		free(k);
		code_put(a, kc);
		snprintf(err, cap, "out of memory or handles");
		return GSD_ST(INTERNAL);
	}
	k->dev = dev;
	k->adapter = a;
	k->code = kc;
	k->refs = 1;
	gsd_list_push_back(&dev->kernels, &k->dev_link);
	dev->obj.tenant->kernels++;
	dev->obj.tenant->kernel_bytes += kc->size;
	char hex[65], note[200];
	sodium_bin2hex(hex, sizeof(hex), kc->hash, 32);
	snprintf(note, sizeof(note), "kernel %llu %s entry %s, %llu bytes%s",
	         (unsigned long long)k->obj.handle, hex, kc->entry, (unsigned long long)kc->size,
	         cached ? " (cached)" : "");
	gsd_audit_note(d->audit, k->obj.identity, "kernel_created", note);
	*out = k;
	return GSD_ST(OK);
}

void gsd_kernel_put(gsd_daemon *d, gsd_kernel *k)
{
	(void)d;
	if (--k->refs > 0)
		return;
	code_put(k->adapter, k->code);
	free(k);
}

void gsd_kernel_destroy(gsd_daemon *d, gsd_kernel *k)
{
	gsd_list_remove(&k->dev_link);
	object_unregister(d, &k->obj);
	k->destroyed = true;
	k->obj.tenant->kernels--;
	k->obj.tenant->kernel_bytes -= k->code->size;
	char note[64];
	snprintf(note, sizeof(note), "kernel %llu", (unsigned long long)k->obj.handle);
	gsd_audit_note(d->audit, k->obj.identity, "kernel_destroyed", note);
	gsd_kernel_put(d, k);
}

/* ---- sync objects ---- */

gsd_sync *gsd_sync_create(gsd_daemon *d, gsd_device *dev, uint64_t value, bool daemon_only)
{
	gsd_sync *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	gsd_waitq_init(&s->waiters);
	gsd_list_init(&s->dev_link);
	s->value = value;
	s->daemon_only = daemon_only;
	if (!dev)
		return s; /* internal: no handle, no device */
	if (!object_register(d, &s->obj, GSD_OBJ_SYNC, dev->obj.tenant, dev->obj.guest, true)) {
		free(s);
		return NULL;
	}
	s->dev = dev;
	gsd_list_push_back(&dev->syncs, &s->dev_link);
	if (!daemon_only)
		dev->obj.tenant->syncs++;
	return s;
}

void gsd_sync_changed(gsd_daemon *d, gsd_sync *s)
{
	(void)d;
	gsd_waitq_wake(&s->waiters, s);
}

void gsd_sync_signal(gsd_daemon *d, gsd_sync *s, uint64_t value, uint64_t by_packet)
{
	/* A monitored fence never goes backwards. */
	if (value <= s->value)
		return;
	s->value = value;
	s->signalled_by = by_packet;
	gsd_sync_changed(d, s);
}

void gsd_sync_abandon(gsd_daemon *d, gsd_sync *s, uint64_t upto)
{
	if (upto <= s->value || upto <= s->abandoned)
		return;
	s->abandoned = upto;
	gsd_sync_changed(d, s);
}

void gsd_sync_destroy(gsd_daemon *d, gsd_sync *s)
{
	gsd_list_remove(&s->dev_link);
	if (s->dev) {
		object_unregister(d, &s->obj);
		if (!s->daemon_only)
			s->obj.tenant->syncs--;
	}
	/* Every waiter learns it is gone: a CPU wait fails, a context whose packet waits on it
	 * finds the handle missing and cancels that packet. */
	s->destroyed = true;
	gsd_sync_changed(d, s);
	free(s);
}

/* ---- devices ---- */

gsd_device *gsd_device_create(gsd_daemon *d, gsd_adapter *a, gsd_tenant *t, uint64_t guest,
                              const char *name, bool system)
{
	gsd_device *dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	dev->adapter = a;
	snprintf(dev->name, sizeof(dev->name), "%s", name);
	gsd_list_init(&dev->contexts);
	gsd_list_init(&dev->allocations);
	gsd_list_init(&dev->syncs);
	gsd_list_init(&dev->kernels);
	if (!object_register(d, &dev->obj, GSD_OBJ_DEVICE, t, guest, !system)) {
		free(dev);
		return NULL;
	}
	if (system)
		return dev;
	/* The device's paging fence: signalled by the daemon as its paging packets finish. */
	dev->paging_sync = gsd_sync_create(d, dev, 0, true);
	if (!dev->paging_sync) {
		object_unregister(d, &dev->obj);
		free(dev);
		return NULL;
	}
	t->devices++;
	d->devices++;
	gsd_audit_note(d->audit, dev->obj.identity, "device_created", dev->name);
	return dev;
}

void gsd_device_destroy(gsd_daemon *d, gsd_device *dev)
{
	gsd_list *it, *tmp;
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->contexts)
	gsd_context_destroy(d, GSD_CONTAINER_OF(it, gsd_context, dev_link), "device destroyed");
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->allocations)
	gsd_allocation_destroy(d, GSD_CONTAINER_OF(it, gsd_allocation, dev_link));
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->syncs)
	gsd_sync_destroy(d, GSD_CONTAINER_OF(it, gsd_sync, dev_link));
	GSD_LIST_FOREACH_SAFE(it, tmp, &dev->kernels)
	gsd_kernel_destroy(d, GSD_CONTAINER_OF(it, gsd_kernel, dev_link));
	object_unregister(d, &dev->obj);
	gsd_audit_note(d->audit, dev->obj.identity, "device_destroyed", dev->name);
	dev->obj.tenant->devices--;
	d->devices--;
	free(dev);
}

typedef struct collector {
	bool (*keep)(const gsd_object *o, void *arg);
	void *arg;
	gsd_object **items;
	size_t n, cap;
	bool fixed;  /* items is the caller's: keep the first cap matches */
	bool failed; /* out of memory */
} collector;

static void collect_one(uint64_t key, void *value, void *arg)
{
	(void)key;
	gsd_object *o = value;
	collector *l = arg;
	if (l->failed || !l->keep(o, l->arg))
		return;
	if (!l->fixed) {
		gsd_object **n = gsd_grow(l->items, &l->cap, l->n + 1, sizeof(*n), 64);
		if (!n) {
			l->failed = true;
			return;
		}
		l->items = n;
	}
	if (l->n < l->cap)
		l->items[l->n++] = o;
}

static int cmp_handle(const void *x, const void *y)
{
	const gsd_object *a = *(gsd_object *const *)x, *b = *(gsd_object *const *)y;
	return a->handle < b->handle ? -1 : a->handle > b->handle;
}

int gsd_object_collect(gsd_daemon *d, bool (*keep)(const gsd_object *o, void *arg), void *arg,
                       gsd_object ***out, size_t *n)
{
	collector l = {.keep = keep, .arg = arg};
	gsd_hmap_each(&d->objects, collect_one, &l);
	if (l.failed) {
		free(l.items);
		*out = NULL;
		*n = 0;
		return -1;
	}
	if (l.n > 1)
		qsort(l.items, l.n, sizeof(*l.items), cmp_handle);
	*out = l.items;
	*n = l.n;
	return 0;
}

static bool is_device(const gsd_object *o, void *arg)
{
	(void)arg;
	return o->type == GSD_OBJ_DEVICE;
}

void gsd_device_destroy_all(gsd_daemon *d)
{
	/* Collected first: destroying while iterating would modify the map. */
	gsd_object **devs;
	size_t n;
	if (gsd_object_collect(d, is_device, NULL, &devs, &n) != 0) {
		/* Without the list, destroy one device per walk of the table: slower, never
		 * skipped (every device's waits must be answered). */
		gsd_object *one;
		collector l = {.keep = is_device, .items = &one, .cap = 1, .fixed = true};
		for (; gsd_hmap_each(&d->objects, collect_one, &l), l.n; l.n = 0)
			gsd_device_destroy(d, (gsd_device *)one);
		return;
	}
	for (size_t i = 0; i < n; i++)
		gsd_device_destroy(d, (gsd_device *)devs[i]);
	free(devs);
}

/* ---- contexts ---- */

void gsd_context_audit(gsd_daemon *d, const gsd_context *x)
{
	gsd_context_rec r = {.context = x->obj.handle,
	                     .tenant = x->obj.identity,
	                     .device = x->dev->obj.handle,
	                     .adapter = x->dev->adapter->id,
	                     .node = x->node->index,
	                     .flags = x->flags,
	                     .priority_class = x->sched.priority_class,
	                     .priority = x->sched.priority,
	                     .info = x->info,
	                     .created_ns = x->obj.created_ns,
	                     .destroyed_ns = x->destroyed ? gsd_now_ns() : 0};
	gsd_audit_context(d->audit, &r);
}

gsd_context *gsd_context_create(gsd_daemon *d, gsd_device *dev, const gsd_context_params *pr,
                                bool system)
{
	gsd_context *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	gsd_tenant *t = dev->obj.tenant;
	if (!object_register(d, &x->obj, GSD_OBJ_CONTEXT, t, dev->obj.guest, !system)) {
		free(x);
		return NULL;
	}
	x->dev = dev;
	x->node = &dev->adapter->nodes[pr->node];
	x->flags = pr->flags;
	x->info = pr->info;
	x->refs = 1;
	gsd_list_init(&x->pending);
	gsd_list_init(&x->dev_link);
	gsd_list_init(&x->node_link);
	/* Ties go to the older context: its creation order, not its (random) handle. */
	gsd_policy_entity_init(&x->sched, pr->priority_class, pr->priority, t->conf.share,
	                       ++d->context_seq);
	d->hooks.context_attach(d, x);
	if (!system) {
		gsd_list_push_back(&dev->contexts, &x->dev_link);
		t->contexts++;
		d->contexts++;
	}
	gsd_context_audit(d, x);
	return x;
}

void gsd_context_put(gsd_daemon *d, gsd_context *x)
{
	(void)d;
	if (--x->refs > 0)
		return;
	gsd_policy_entity_fini(&x->sched); /* lets go of its tenant's group */
	free(x);
}

void gsd_context_destroy(gsd_daemon *d, gsd_context *x, const char *why)
{
	d->hooks.context_detach(d, x, why);
	x->destroyed = true;
	gsd_list_remove(&x->dev_link);
	object_unregister(d, &x->obj);
	gsd_context_audit(d, x);
	x->obj.tenant->contexts--;
	d->contexts--;
	gsd_context_put(d, x);
}

/* ---- allocations ---- */

void gsd_allocation_audit(gsd_daemon *d, const gsd_allocation *al)
{
	gsd_allocation_rec r = {
	        .allocation = al->obj.handle,
	        .tenant = al->obj.identity,
	        .device = al->dev->obj.handle,
	        .adapter = al->adapter->id,
	        .size = al->size,
	        .supported_segment_set = al->supported_segment_set,
	        .segment_preference = al->segment_preference,
	        .priority = al->priority,
	        .flags = al->flags,
	        .segment = al->segment && al->segment->id != GSD_SYSMEM_ID &&
	                                   (al->supported_segment_set & (1u << al->segment->id))
	                           ? al->segment->id
	                           : 0,
	        .offset = al->offset,
	        .created_ns = al->obj.created_ns,
	        .destroyed_ns = al->destroyed ? gsd_now_ns() : 0};
	gsd_audit_allocation(d->audit, &r);
}

int gsd_allocation_create(gsd_daemon *d, gsd_device *dev, const gsd_allocation_params *pr,
                          gsd_allocation **out)
{
	*out = NULL;
	gsd_tenant *t = dev->obj.tenant;
	gsd_allocation *al = calloc(1, sizeof(*al));
	if (!al || !object_register(d, &al->obj, GSD_OBJ_ALLOCATION, t, dev->obj.guest, true)) {
		free(al);
		return GSD_ST(INTERNAL);
	}
	al->dev = dev;
	al->adapter = dev->adapter;
	al->size = pr->size;
	al->supported_segment_set = pr->supported_segment_set;
	al->segment_preference = pr->segment_preference;
	al->priority = pr->priority ? pr->priority : GS_ALLOC_PRIORITY_NORMAL;
	al->flags = pr->flags;
	al->refs = 1;
	gsd_list_init(&al->dev_link);
	gsd_list_init(&al->res_link);
	gsd_waitq_init(&al->idle_waiters);
	gsd_waitq_init(&al->pin_waiters);
	/* Video memory may be over-committed: with no room, it starts in system memory and is
	 * made resident when a packet needs it. */
	if (!d->hooks.allocation_place(d, al)) {
		object_unregister(d, &al->obj);
		free(al);
		return GSD_ST(OUT_OF_MEMORY);
	}
	gsd_list_push_back(&dev->allocations, &al->dev_link);
	t->memory_used += gsd_memory_footprint(al->size); /* what it occupies, as quotas count */
	t->allocations++;
	d->allocations++;
	gsd_allocation_audit(d, al);
	*out = al;
	return GSD_ST(OK);
}

void gsd_allocation_put(gsd_daemon *d, gsd_allocation *al)
{
	if (--al->refs > 0)
		return;
	/* Last reference: the memory goes back to its segment. */
	d->hooks.allocation_release(d, al);
	al->obj.tenant->memory_used -= gsd_memory_footprint(al->size);
	al->obj.tenant->allocations--;
	d->allocations--;
	free(al);
}

void gsd_allocation_destroy(gsd_daemon *d, gsd_allocation *al)
{
	al->destroyed = true;
	gsd_list_remove(&al->dev_link);
	object_unregister(d, &al->obj);
	gsd_allocation_audit(d, al);
	gsd_allocation_put(d, al);
}

void gsd_allocation_busy(gsd_allocation *al)
{
	al->refs++;
	al->inflight++;
}

void gsd_allocation_idle(gsd_allocation *al)
{
	if (--al->inflight == 0)
		gsd_waitq_wake(&al->idle_waiters, al);
}
