/*
 * Users' kernels: KernelCreate, KernelDestroy, KernelList. The module is checked and made into
 * the backend's object by core/object.c (gsd_kernel_prepare, _build_run, _adopt); this file
 * applies the tenant's limits, runs the build on libuv's thread pool (checking a module and
 * compiling its pipeline takes milliseconds, which the loop and every other tenant would
 * otherwise wait for) and speaks the wire.
 */
#include "rpc/handlers.h"

#include <stdlib.h>
#include <string.h>

static const char *entry_of(const char *e)
{
	return e && e[0] ? e : "main";
}

/* The wire form of a kernel; the strings and arrays point into k and into the storage the
 * caller passes (bindings, kb[]: GSD_KERNEL_MAX_BINDINGS each). */
static void kernel_out(const gsd_kernel *k, bool cached, Gpusched__V1__KernelInfo *o,
                       Gpusched__V1__KernelBinding *kb, Gpusched__V1__KernelBinding **kbp)
{
	const gsd_kernel_code *kc = k->code;
	gpusched__v1__kernel_info__init(o);
	o->kernel = k->obj.handle;
	o->device = k->dev->obj.handle;
	o->hash.data = (uint8_t *)kc->hash;
	o->hash.len = sizeof(kc->hash);
	o->entry_point = (char *)kc->entry;
	o->n_local_size = 3;
	o->local_size = (uint32_t *)kc->info.local_size;
	o->push_constant_bytes = kc->info.push_bytes;
	o->spirv_bytes = kc->size;
	o->cached = cached;
	o->created_ns = k->obj.created_ns;
	o->n_bindings = kc->info.nbindings;
	o->bindings = kbp;
	for (uint32_t i = 0; i < kc->info.nbindings; i++) {
		const gsd_kernel_binding *b = &kc->info.bindings[i];
		gpusched__v1__kernel_binding__init(&kb[i]);
		kb[i].binding = b->binding;
		kb[i].kind = b->kind == GSD_BINDING_UNIFORM
		                     ? GPUSCHED__V1__BINDING_KIND__BINDING_KIND_UNIFORM_BUFFER
		                     : GPUSCHED__V1__BINDING_KIND__BINDING_KIND_STORAGE_BUFFER;
		kb[i].writes = b->writes;
		kb[i].name = (char *)b->name;
		kbp[i] = &kb[i];
	}
}

/* Builds a tenant may have on the thread pool at once; more are answered BUSY. */
#define MAX_BUILDS_PER_TENANT 2u

static void answer_created(gsd_call *c, const gsd_kernel *k, bool cached)
{
	Gpusched__V1__KernelInfo info;
	Gpusched__V1__KernelBinding kb[GSD_KERNEL_MAX_BINDINGS];
	Gpusched__V1__KernelBinding *kbp[GSD_KERNEL_MAX_BINDINGS];
	kernel_out(k, cached, &info, kb, kbp);
	Gpusched__V1__KernelCreateResponse kr = GPUSCHED__V1__KERNEL_CREATE_RESPONSE__INIT;
	kr.kernel = &info;
	GSD_REPLY(c, KERNEL_CREATE, kernel_create, &kr);
}

/* The tenant's limits on count and bytes, for one more kernel of `size` bytes. */
static bool within_limits(gsd_daemon *d, gsd_call *c, size_t size)
{
	const gsd_tenant *t = c->tenant;
	if (t->kernels >= d->cfg.max_kernels) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s has %u kernels: max_kernels %u", t->conf.name, t->kernels,
		               d->cfg.max_kernels);
		return false;
	}
	if (size > d->cfg.max_kernel_bytes || t->kernel_bytes > d->cfg.max_kernel_bytes - size) {
		gsd_call_error(c, GSD_ST(QUOTA_EXCEEDED),
		               "tenant %s has %llu bytes of kernels: %zu more would pass "
		               "max_kernel_bytes %llu",
		               t->conf.name, (unsigned long long)t->kernel_bytes, size,
		               (unsigned long long)d->cfg.max_kernel_bytes);
		return false;
	}
	return true;
}

/* The device a request names, usable for a new kernel (answered when not). */
static gsd_device *kernel_device(gsd_call *c, uint64_t handle)
{
	gsd_device *dev = gsd_call_object(c, handle, GSD_OBJ_DEVICE);
	if (dev && dev->adapter->device_dead) {
		gsd_call_error(c, GSD_ST(FAULTED),
		               "adapter %u (%s) lost its device and could not recreate it",
		               dev->adapter->id, dev->adapter->cfg->name);
		return NULL;
	}
	return dev;
}

static void build_work(void *arg)
{
	gsd_kernel_build_run(arg);
}

/* Back on the loop: the device may be gone, or the limits reached, meanwhile. */
static void build_done(gsd_call *c, void *arg)
{
	gsd_kernel_build *b = arg;
	gsd_daemon *d = c->d;
	c->tenant->kernel_builds--;
	const Gpusched__V1__KernelCreateRequest *q = R(kernel_create);
	gsd_device *dev = b->status == GSD_ST(OK) ? kernel_device(c, q->device) : NULL;
	if (b->status == GSD_ST(OK) && (!dev || !within_limits(d, c, b->size))) {
		gsd_kernel_build_drop(b);
		free(b);
		return;
	}
	gsd_kernel *k;
	bool cached;
	char err[512];
	int st = b->status == GSD_ST(OK)
	                 ? gsd_kernel_adopt(d, dev, b, &k, &cached, err, sizeof(err))
	                 : b->status;
	if (st != GSD_ST(OK))
		gsd_call_error(c, st, "kernel refused: %s", b->status != GSD_ST(OK) ? b->err : err);
	else
		answer_created(c, k, cached);
	free(b);
}

void gsd_h_kernel_create(gsd_daemon *d, gsd_call *c)
{
	const Gpusched__V1__KernelCreateRequest *q = R(kernel_create);
	gsd_device *dev = kernel_device(c, q->device);
	if (!dev)
		return;
	const char *entry = entry_of(q->entry_point);
	size_t size = q->spirv.len;
	if (size > GSD_KERNEL_MAX_MODULE) {
		gsd_call_error(c, GSD_ST(TOO_LARGE), "a module of %zu bytes exceeds %u bytes", size,
		               GSD_KERNEL_MAX_MODULE);
		return;
	}
	if (strlen(entry) >= GSD_KERNEL_ENTRY_MAX) {
		gsd_call_error(c, GSD_ST(INVALID_ARGUMENT),
		               "the entry point's name is longer than %u bytes",
		               GSD_KERNEL_ENTRY_MAX - 1);
		return;
	}
	if (!within_limits(d, c, size))
		return;
	gsd_kernel_build *b = malloc(sizeof(*b));
	if (!b) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	gsd_kernel *k;
	char err[512];
	int st = gsd_kernel_prepare(d, dev, q->spirv.data, size, entry, b, &k, err, sizeof(err));
	if (st == GSD_ST(OK)) {
		free(b);
		answer_created(c, k, true);
		return;
	}
	if (st != GSD_KERNEL_BUILD) {
		free(b);
		gsd_call_error(c, st, "kernel refused: %s", err);
		return;
	}
	/* The module bytes stay in the request, which lives as long as the call. */
	if (c->tenant->kernel_builds >= MAX_BUILDS_PER_TENANT) {
		free(b);
		gsd_call_error(c, GSD_ST(BUSY),
		               "tenant %s is making %u kernels already: retry once one is made",
		               c->tenant->conf.name, c->tenant->kernel_builds);
		return;
	}
	c->tenant->kernel_builds++;
	if (!gsd_call_offload_then(c, build_work, build_done, b)) {
		c->tenant->kernel_builds--;
		free(b);
		gsd_call_error(c, GSD_ST(INTERNAL), "cannot queue the kernel's build");
	}
}

void gsd_h_kernel_destroy(gsd_daemon *d, gsd_call *c)
{
	gsd_kernel *k = gsd_call_object(c, R(kernel_destroy)->kernel, GSD_OBJ_KERNEL);
	if (!k)
		return;
	gsd_kernel_destroy(d, k);
	gsd_call_reply_empty(c);
}

typedef struct list_filter {
	const gsd_tenant *tenant;
	uint64_t guest;
	uint32_t adapter;
	uint64_t device; /* 0: any */
} list_filter;

static bool keep_kernel(const gsd_object *o, void *arg)
{
	const list_filter *f = arg;
	const gsd_kernel *k = (const gsd_kernel *)o;
	return o->type == GSD_OBJ_KERNEL && o->tenant == f->tenant && o->guest == f->guest &&
	       k->adapter->id == f->adapter && (!f->device || k->dev->obj.handle == f->device);
}

void gsd_h_kernel_list(gsd_daemon *d, gsd_call *c)
{
	list_filter f = {.tenant = c->tenant,
	                 .guest = c->guest,
	                 .adapter = c->req->adapter,
	                 .device = R(kernel_list)->device};
	if (f.device && !gsd_call_object(c, f.device, GSD_OBJ_DEVICE))
		return;
	gsd_object **objs;
	size_t n;
	if (gsd_object_collect(d, keep_kernel, &f, &objs, &n) != 0) {
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	/* One block: the infos, their pointers, and each one's bindings and pointers. */
	size_t per = sizeof(Gpusched__V1__KernelInfo) + sizeof(Gpusched__V1__KernelInfo *) +
	             GSD_KERNEL_MAX_BINDINGS * (sizeof(Gpusched__V1__KernelBinding) +
	                                        sizeof(Gpusched__V1__KernelBinding *));
	uint8_t *mem = n ? calloc(n, per) : NULL;
	if (n && !mem) {
		free(objs);
		gsd_call_error(c, GSD_ST(INTERNAL), "out of memory");
		return;
	}
	Gpusched__V1__KernelInfo *infos = (Gpusched__V1__KernelInfo *)mem;
	Gpusched__V1__KernelInfo **ptrs = (Gpusched__V1__KernelInfo **)(infos + n);
	Gpusched__V1__KernelBinding *kb = (Gpusched__V1__KernelBinding *)(ptrs + n);
	Gpusched__V1__KernelBinding **kbp =
	        (Gpusched__V1__KernelBinding **)(kb + n * GSD_KERNEL_MAX_BINDINGS);
	for (size_t i = 0; i < n; i++) {
		kernel_out((const gsd_kernel *)objs[i], false, &infos[i],
		           kb + i * GSD_KERNEL_MAX_BINDINGS, kbp + i * GSD_KERNEL_MAX_BINDINGS);
		ptrs[i] = &infos[i];
	}
	Gpusched__V1__KernelListResponse lr = GPUSCHED__V1__KERNEL_LIST_RESPONSE__INIT;
	lr.n_kernels = n;
	lr.kernels = ptrs;
	GSD_REPLY(c, KERNEL_LIST, kernel_list, &lr);
	free(mem);
	free(objs);
}
