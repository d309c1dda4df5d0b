/*
 * Request handlers: one function per request of the wire contract (proto/gpusched.proto),
 * dispatched by dispatch.c. Each answers its call exactly once, now or later, and every error
 * answer is audited by gsd_call_error.
 *   dispatch.c  dispatch, info, statistics, tenants
 *   h_objects.c devices, contexts, sync objects
 *   h_alloc.c   allocations and CPU access to them
 *   h_submit.c  submission and packet waits
 *   h_paging.c  MakeResident, Evict, Transfer
 *   h_history.c history, packet events and moves (read from the audit file)
 *   h_kernel.c  users' kernels
 */
#ifndef GSD_HANDLERS_H
#define GSD_HANDLERS_H

#include "rpc/rpc.h"
#include "rpc/rules.h"

#define R(field) (c->req->field)

void gsd_handle_request(gsd_daemon *d, gsd_call *c);
/* Looks up the adapter the request names; answers NOT_FOUND and returns NULL if none. */
gsd_adapter *gsd_call_adapter(gsd_call *c);
/* Looks up a handle of the call's tenant on the call's adapter; answers NOT_FOUND (or FAULTED
 * for a faulted context) and returns NULL when it cannot be used. */
void *gsd_call_object(gsd_call *c, uint64_t handle, gsd_obj_type type);
/* The object of that type a request may name (its tenant's, and its guest's inside a VM), or
 * NULL; answers nothing. */
static inline void *gsd_call_find(gsd_call *c, uint64_t handle, gsd_obj_type type)
{
	return gsd_object_get_guest(c->d, handle, type, c->tenant, c->guest);
}
/* The n messages (of size bytes each) of a repeated field and the array of pointers to them
 * the field wants, in one zeroed allocation: returns the messages and sets *ptrs, which is
 * what to free. NULL when memory is short. */
void *gsd_pb_repeated(size_t n, size_t size, void ***ptrs);
/* Answers with an empty body (OK). */
void gsd_call_reply_empty(gsd_call *c);
void gsd_rules_adapter_of(const gsd_daemon *d, const gsd_adapter *a, gsd_rules_adapter *out);

void gsd_h_device_create(gsd_daemon *d, gsd_call *c);
void gsd_h_device_destroy(gsd_daemon *d, gsd_call *c);
void gsd_h_guest_release(gsd_daemon *d, gsd_call *c);
/* Destroys every device of tenant t, with all in them (TenantDestroy's release_devices);
 * returns how many, or -1 without memory. */
int gsd_tenant_release_devices(gsd_daemon *d, gsd_tenant *t);
void gsd_h_context_create(gsd_daemon *d, gsd_call *c);
void gsd_h_context_destroy(gsd_daemon *d, gsd_call *c);
void gsd_h_context_set_priority(gsd_daemon *d, gsd_call *c);
void gsd_h_context_query(gsd_daemon *d, gsd_call *c);
void gsd_h_sync_create(gsd_daemon *d, gsd_call *c);
void gsd_h_sync_destroy(gsd_daemon *d, gsd_call *c);
void gsd_h_sync_signal(gsd_daemon *d, gsd_call *c);
void gsd_h_sync_wait(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_create(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_destroy(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_query(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_set_priority(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_set_preference(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_read(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_write(gsd_daemon *d, gsd_call *c);
void gsd_h_allocation_list(gsd_daemon *d, gsd_call *c);
void gsd_h_submit(gsd_daemon *d, gsd_call *c);
void gsd_h_submit_batch(gsd_daemon *d, gsd_call *c);
void gsd_h_packet_wait(gsd_daemon *d, gsd_call *c);
void gsd_h_make_resident(gsd_daemon *d, gsd_call *c);
void gsd_h_evict(gsd_daemon *d, gsd_call *c);
void gsd_h_transfer(gsd_daemon *d, gsd_call *c);
void gsd_h_history(gsd_daemon *d, gsd_call *c);
void gsd_h_moves(gsd_daemon *d, gsd_call *c);
void gsd_h_explain(gsd_daemon *d, gsd_call *c);
void gsd_h_usage(gsd_daemon *d, gsd_call *c);
void gsd_h_packet_events(gsd_daemon *d, gsd_call *c);
void gsd_h_kernel_create(gsd_daemon *d, gsd_call *c);
void gsd_h_kernel_destroy(gsd_daemon *d, gsd_call *c);
void gsd_h_kernel_list(gsd_daemon *d, gsd_call *c);
/* h_events.c: EventsWait, the caller's tenant's events (an administrator's: all). */
void gsd_h_events_wait(gsd_daemon *d, gsd_call *c);

#endif
