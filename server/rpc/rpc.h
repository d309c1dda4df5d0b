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
	uint64_t id;   /* the request's id (known before it is decoded) */
	uint32_t pipe; /* the connection it came on (0: in process) */
	Gpusched__V1__Request *req;
	gsd_tenant *tenant;
	uint64_t guest; /* Request.guest: a VM tenant's guest process (0 otherwise) */
	/* Who the caller is in the audit (tenant or guest identity; NULL before it decodes). */
	const char *identity;
	/* Where its allocations lie (segment offsets, GPU addresses) may be told to it: an
	 * administrator only, since in a shared segment the gaps between one tenant's allocations
	 * are the other tenants'. Set with identity, so off-loop reads need not look at tenant. */
	bool sees_placement;
	uint64_t started_ns;
	gsd_waiter waiter;      /* on a waiter queue while parked, or on the redispatch list */
	gsd_list conn_link;     /* in its connection's list of parked calls */
	gsd_list tarpit_link;   /* in gsd_rpc.tarpit while its refusal is held (call.c) */
	uint64_t tarpit_due_ms; /* uv_now when the held refusal is answered */
	bool parked;            /* counted as waiting (gsd_call_wait) until answered */
	bool parked_by_guest;   /* counted under its guest (tenant guest_waits), not its conn */
	uint32_t deferred;      /* times it waited (for an allocation to be free) */
	uv_timer_t timer;       /* deadline of a parked call */
	bool timer_used;
	uint64_t wait_value; /* SyncWait target */
	void *wait_object;   /* what it waits on */
	void (*on_timeout)(gsd_call *c);
	void *barrier; /* h_history.c: the audit flush an off-loop read waits for */
	/* An error answered off the loop, audited when the work is done; or a refusal held to
	 * be answered late (call.c, floods): a call is never both. */
	int off_status;
	char off_message[256];
	struct nng_msg *off_reply; /* the answer encoded off the loop, sent by the loop */
};

int gsd_rpc_start(gsd_daemon *d);

/*
 * New certificates on the tls+tcp:// listeners (a reload). nng cannot change a started
 * listener's TLS configuration, and closing a listener closes the connections it accepted: the
 * listeners are restarted, their clients redial by themselves (requests in flight on those
 * connections fail; the other listeners' connections, and all queued work, are untouched).
 * gsd_rpc_tls_prepare builds the configurations of `next` before anything changes (-1 with
 * why: nothing changed), and fingerprints the bytes it loaded (every file read once: equal
 * fingerprints, the same certificates). gsd_rpc_tls_swap_soon takes them and restarts the listeners
 * with them TLS_SWAP_DELAY_MS later, so that the answer to a reload asked over one of them leaves
 * first; then it audits the outcome ("tls_reloaded", or "tls_reload_failed" when a listener
 * could not listen again: it is down, and the next reload tries again). gsd_rpc_tls_discard
 * frees what was prepared and not handed over.
 */
typedef struct gsd_rpc_tls_next {
	nng_tls_config *main;                     /* the "tls" block's; NULL: none */
	nng_tls_config *listener[GSD_MAX_LISTEN]; /* listeners with a CA of their own */
} gsd_rpc_tls_next;
int gsd_rpc_tls_prepare(const gsd_config *next, gsd_rpc_tls_next *out, uint8_t fingerprint[32],
                        char *why, size_t cap);
#define GSD_TLS_SWAP_DELAY_MS 200
void gsd_rpc_tls_swap_soon(gsd_daemon *d, gsd_rpc_tls_next *n, const char *who);
void gsd_rpc_tls_discard(gsd_rpc_tls_next *n);
/* Answers the calls still parked for a retry and lets reads on the thread pool finish (they
 * answer through the socket and audit their errors): called while both are still open. */
void gsd_rpc_settle(gsd_daemon *d);
/* A stop that comes during an AdminDrain: the drain's caller is answered with its report now. */
void gsd_rpc_drain_stop(gsd_daemon *d);
/* Closes the sockets and frees the workers (after the audit writer has sent its answers). */
void gsd_rpc_free(gsd_daemon *d);
/* Frees what is left once the loop has closed the async handles. */
void gsd_rpc_release(gsd_daemon *d);
/* Handles one request given as bytes, in process and without a connection (the fuzz target,
 * tests): `reply` gets the encoded answer on the thread that answers (the loop, the audit
 * writer). The loop must run for the request to be handled. Returns 0, or -1 (memory). */
int gsd_rpc_inject(gsd_daemon *d, const void *req, size_t len,
                   void (*reply)(void *arg, const uint8_t *resp, size_t len), void *arg);

/* Who the call is in the audit: its guest's or tenant's identity, NULL before a token names
 * its tenant. */
static inline const char *gsd_call_identity(const gsd_call *c)
{
	return c->identity ? c->identity : c->tenant ? c->tenant->audit_name : NULL;
}

/* Answers a call and frees it. */
void gsd_call_reply(gsd_call *c, Gpusched__V1__Response *resp);
void gsd_call_error(gsd_call *c, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void gsd_call_verror(gsd_call *c, int status, const char *fmt, va_list ap);
/* The packets of a submission were queued unrecorded (they may not run yet): encodes the
 * answer now and sends it from the audit writer once every packet's SUBMITTED record is
 * committed, then lets them run; if any record could not be committed the answer is
 * AUDIT_UNAVAILABLE and every one of them is cancelled without having run. With resp NULL
 * nothing is answered from there: the call stays the caller's, which waits for the packets'
 * end (a packet whose record failed ends CANCELLED with record_failed set). Returns 0, or -1
 * when out of memory: then the call was answered, and the packets cancelled and retired (they
 * are gone). */
int gsd_call_reply_after_audit(gsd_call *c, Gpusched__V1__Response *resp,
                               gsd_packet *const *packets, size_t n);
/* Counts the call as waiting before it waits (gsd_call_wait then parks it at once): false when
 * it may not wait (it was answered BUSY and freed), so nothing is done on its behalf. */
bool gsd_call_may_wait(gsd_call *c);
/*
 * Parks the call on q until an event; `wake` runs when q is woken (the call is off q then: it
 * answers, or parks again with gsd_call_wait). At most timeout_ms (capped by max_wait_ms),
 * then on_timeout runs (it cancels the waiter and answers). A call may wait only within the
 * limits that keep others served (max_waits_per_connection, and room for requests that do not
 * wait): otherwise it is answered BUSY and false is returned.
 */
bool gsd_call_wait(gsd_call *c, gsd_waitq *q, gsd_wake_fn wake, uint32_t timeout_ms,
                   void (*on_timeout)(gsd_call *c));
/* Parks the call on q and handles it again from the start, from the loop after the current
 * event, once q is woken (answered SHUTTING_DOWN if the daemon stops meanwhile, TIMEOUT after
 * max_wait_ms). False as gsd_call_wait. */
bool gsd_call_retry_when(gsd_call *c, gsd_waitq *q);
gsd_call *gsd_call_of_waiter(gsd_waiter *w);
/* Runs `work` on libuv's thread pool, which must answer the call with gsd_call_reply_off_loop
 * (it encodes the answer); the loop then audits an error, sends the answer, frees the call.
 * Returns false (the call answered with an error and freed) when the work cannot be queued. */
bool gsd_call_offload(gsd_call *c, void (*work)(gsd_call *c));
void gsd_call_reply_off_loop(gsd_call *c, Gpusched__V1__Response *resp);
/* Runs `work` as gsd_call_offload does, but on the daemon's one reader thread for reads of
 * the audit file (rpc/reads.c): one at a time, at a lower CPU priority, tenants in turn. False
 * (the call answered BUSY, audited, and freed) when the tenant has GSD_READS_PER_TENANT reads
 * waiting or running already, or the daemon too many in all. */
bool gsd_call_read(gsd_call *c, void (*work)(gsd_call *c));
/* Reads waiting or running, all tenants (loop). */
uint32_t gsd_rpc_reads_in(const gsd_daemon *d);
/* Runs work(arg) on libuv's thread pool, then then(c, arg) on the loop, which answers the call
 * as any handler does. work touches nothing of the daemon's but arg. Returns false (nothing
 * queued, the call not answered) when the work cannot be queued. */
bool gsd_call_offload_then(gsd_call *c, void (*work)(void *arg),
                           void (*then)(gsd_call *c, void *arg), void *arg);
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
