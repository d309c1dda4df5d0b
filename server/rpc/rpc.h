/*
 * RPC: an nng REP socket served through many nng contexts, so requests are handled
 * concurrently and a request whose answer is deferred (a wait, a submit waiting for its audit
 * commit) does not hold up others.
 *
 * nng's aio callbacks run on nng's threads: they only move a received message onto the inbox
 * and wake the loop with uv_async_send. The loop decodes and dispatches each request as a
 * gsd_call, which is answered exactly once with gsd_call_reply / gsd_call_error (from the loop), or
 * handed to the audit writer with gsd_call_reply_after_audit.
 */
#ifndef GSD_RPC_H
#define GSD_RPC_H

#include "core/daemon.h"

#include <stdarg.h>

typedef struct gsd_rpc_worker gsd_rpc_worker;

struct gsd_call {
	gsd_daemon *d;
	gsd_rpc_worker *worker;
	Gpusched__V1__Request *req;
	gsd_tenant *tenant;
	uint64_t started_ns;
	gsd_list link;     /* on a waiter list while deferred */
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
/* Closes the sockets and frees the workers (after the audit writer has sent its answers). */
void gsd_rpc_free(gsd_daemon *d);
/* Frees what is left once the loop has closed the async handle. */
void gsd_rpc_release(gsd_daemon *d);
/* Publishes an event on the PUB socket, if one is configured. */
void gsd_rpc_publish(gsd_daemon *d, Gpusched__V1__Event *ev);
/* True when a PUB socket is configured (callers skip building events otherwise). */
bool gsd_rpc_publishing(const gsd_daemon *d);

/* Answers a call and frees it. */
void gsd_call_reply(gsd_call *c, Gpusched__V1__Response *resp);
void gsd_call_error(gsd_call *c, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void gsd_call_verror(gsd_call *c, int status, const char *fmt, va_list ap);
/* Encodes the answer now and sends it from the audit writer once every one of the n records is
 * committed (or an INTERNAL error if any could not be). */
void gsd_call_reply_after_audit(gsd_call *c, Gpusched__V1__Response *resp,
                                const gsd_packet_rec *const *recs, size_t n);
/* Arms a deadline for a deferred call; on expiry `fn` runs on the loop. */
void gsd_call_set_timeout(gsd_call *c, uint32_t ms, void (*fn)(gsd_call *c));
/* Runs `work` on libuv's thread pool, which must answer the call with gsd_call_reply_off_loop
 * (it encodes the answer); the loop then audits an error, sends the answer, frees the call. */
/* Returns false (the call answered with an error and freed) when the work cannot be queued. */
bool gsd_call_offload(gsd_call *c, void (*work)(gsd_call *c));
void gsd_call_reply_off_loop(gsd_call *c, Gpusched__V1__Response *resp);
const char *gsd_request_name(int body_case);

#endif
