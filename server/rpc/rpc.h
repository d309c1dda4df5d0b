/*
 * RPC: an nng REP socket served through many nng contexts, so requests are handled
 * concurrently and a request whose answer is deferred (a wait, a submit waiting for its audit
 * commit) does not hold up others.
 *
 * nng's aio callbacks run on nng's threads: they only move a received message onto the inbox
 * and wake the loop with uv_async_send. The loop decodes and dispatches each request as a
 * gsd_call (dispatch.c), which is answered exactly once with gsd_call_reply / gsd_call_error
 * (from the loop), or handed to the audit writer with gsd_call_reply_after_audit.
 *
 * A call that must wait (for a packet to end, a sync object to reach a value, an allocation to
 * go idle or be unpinned) parks its waiter on the waiter queue of that object
 * (core/waiter.h); the layer that owns the object wakes the queue without knowing who waits.
 */
#ifndef GSD_RPC_H
#define GSD_RPC_H

#include "core/daemon.h"

#include <stdarg.h>

typedef struct gsd_rpc_worker gsd_rpc_worker;
typedef struct gsd_call gsd_call;

struct gsd_call {
	gsd_daemon *d;
	gsd_rpc_worker *worker;
	Gpusched__V1__Request *req;
	gsd_tenant *tenant;
	uint64_t started_ns;
	gsd_waiter waiter; /* on a waiter queue while deferred, or on the redispatch list */
	uint32_t deferred; /* times it waited (for an allocation to be free) */
	uv_timer_t timer;  /* deadline of a deferred wait */
	bool timer_used;
	uint64_t wait_value; /* SyncWait target */
	void *wait_object;   /* what it waits on */
	void (*on_timeout)(gsd_call *c);
	void *barrier;  /* h_history.c: the audit flush an off-loop read waits for */
	int off_status; /* an error answered off the loop, audited when the work is done */
	char off_message[256];
	struct nng_msg *off_reply; /* the answer encoded off the loop, sent by the loop */
};

int gsd_rpc_start(gsd_daemon *d);
/* Answers the calls still parked for a retry and lets reads on the thread pool finish (they
 * answer through the socket and audit their errors): called while both are still open. */
void gsd_rpc_settle(gsd_daemon *d);
/* Closes the sockets and frees the workers (after the audit writer has sent its answers). */
void gsd_rpc_free(gsd_daemon *d);
/* Frees what is left once the loop has closed the async handle. */
void gsd_rpc_release(gsd_daemon *d);

/* Answers a call and frees it. */
void gsd_call_reply(gsd_call *c, Gpusched__V1__Response *resp);
void gsd_call_error(gsd_call *c, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void gsd_call_verror(gsd_call *c, int status, const char *fmt, va_list ap);
/* Encodes the answer now and sends it from the audit writer once every one of the n records is
 * committed (or an INTERNAL error if any could not be). */
void gsd_call_reply_after_audit(gsd_call *c, Gpusched__V1__Response *resp,
                                const gsd_packet_rec *const *recs, size_t n);
/* Parks the call on q; `wake` runs when q is woken (the call is off q then: it answers, or
 * parks again). */
void gsd_call_wait(gsd_call *c, gsd_waitq *q, gsd_wake_fn wake);
/* Parks the call on q and handles it again from the start, from the loop after the current
 * event, once q is woken (answered SHUTTING_DOWN if the daemon stops meanwhile). */
void gsd_call_retry_when(gsd_call *c, gsd_waitq *q);
gsd_call *gsd_call_of_waiter(gsd_waiter *w);
/* Arms a deadline for a deferred call; on expiry `fn` runs on the loop (the call is still
 * parked: fn cancels its waiter and answers). */
void gsd_call_set_timeout(gsd_call *c, uint32_t ms, void (*fn)(gsd_call *c));
/* Runs `work` on libuv's thread pool, which must answer the call with gsd_call_reply_off_loop
 * (it encodes the answer); the loop then audits an error, sends the answer, frees the call. */
/* Returns false (the call answered with an error and freed) when the work cannot be queued. */
bool gsd_call_offload(gsd_call *c, void (*work)(gsd_call *c));
void gsd_call_reply_off_loop(gsd_call *c, Gpusched__V1__Response *resp);
const char *gsd_request_name(int body_case);

/* Answers a call with one response body: GSD_REPLY(c, SYNC_WAIT, sync_wait, &sw). */
#define GSD_REPLY_WITH(fn, c, BODY, field, msg)                                                    \
	do {                                                                                       \
		Gpusched__V1__Response resp_ = GPUSCHED__V1__RESPONSE__INIT;                       \
		resp_.body_case = GPUSCHED__V1__RESPONSE__BODY_##BODY;                             \
		resp_.field = (msg);                                                               \
		fn((c), &resp_);                                                                   \
	} while (0)
#define GSD_REPLY(c, BODY, field, msg) GSD_REPLY_WITH(gsd_call_reply, c, BODY, field, msg)
#define GSD_REPLY_OFF_LOOP(c, BODY, field, msg)                                                    \
	GSD_REPLY_WITH(gsd_call_reply_off_loop, c, BODY, field, msg)

#endif
