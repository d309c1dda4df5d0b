/*
 * libgpusched internals: the client object and the one request/response helper every public
 * call goes through. Not installed; tests may include it. Internal names take the prefix
 * gsc_ so that they never meet the daemon's gs_ internals when tests link both.
 */
#ifndef GS_CLIENT_RPC_H
#define GS_CLIENT_RPC_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>

#include <nng/nng.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"

#define GSC_MESSAGE_MAX 1024

/* One nng context and aio of a client, carrying one request at a time (async.c). */
typedef struct gsc_slot gsc_slot;

struct gs_client {
	nng_socket sock;
	char *url;
	char *token;
	uint32_t adapter;
	uint32_t timeout_ms;
	size_t io_piece; /* bytes per allocation read/write request; 0: never split */
	char message[GSC_MESSAGE_MAX];
	/* Requests in flight (async.c); everything below is under lock. */
	pthread_mutex_t lock;
	pthread_cond_t drained; /* inflight reached 0 while closing */
	uint64_t next_id;
	gsc_slot **slots; /* every slot made, for gs_close */
	size_t nslots, capslots;
	gsc_slot *free_slots; /* a stack through gsc_slot.next */
	gsc_slot *pending;    /* requests in flight, a list through gsc_slot.prev/next */
	size_t inflight;      /* started and not yet delivered */
	bool closing;
};

/* Sets up the client's request machinery once its socket is open (async.c): 0 or an nng
 * error. */
int gsc_async_init(gs_client *c);
/* Cancels what is in flight, waits for every completion, frees the slots and closes the
 * socket. */
void gsc_async_close(gs_client *c);

/*
 * Sends one request and receives its response: a blocking call over the asynchronous path
 * (async.c), with the client's timeout plus wait_ms as its deadline.
 *
 * body points at the request message of kind req_case (the envelope's oneof member); the
 * envelope's id, token and adapter come from the client. The call waits up to the client's
 * timeout plus wait_ms. The response must carry the same id, a known status and, on success,
 * the body `want` (RESPONSE__BODY__NOT_SET: any body, it is ignored).
 *
 * Returns 0 with the decoded response in *out (when out is non-NULL; release it with
 * gsc_response_free), the daemon's positive status, or a GS_ERR_*. The daemon's message (or a local
 * description) is left in c->message either way.
 */
int gsc_call(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body,
             Gpusched__V1__Response__BodyCase want, uint32_t wait_ms, Gpusched__V1__Response **out);
void gsc_response_free(Gpusched__V1__Response *resp);
/* TLS material of a tls+tcp:// dial; a NULL field (or a NULL gsc_tls) is read from
 * $GPUSCHED_TLS_CA, $GPUSCHED_TLS_CERT_KEY and $GPUSCHED_TLS_SERVER_NAME. */
typedef struct gsc_tls {
	const char *ca, *cert_key, *server_name;
} gsc_tls;
/* Dials url on s (flags as nng_dial; out may be NULL), a tls+tcp:// URL with the TLS client
 * configuration of tls. Returns 0 or an nng error, with why filled. */
int gsc_dial(nng_socket s, const char *url, const gsc_tls *tls, int flags, nng_dialer *out,
             char *why, size_t cap);

/* Shorthands for the generated names, which are long enough to hide the logic. */
#define GSC_REQ(x)  GPUSCHED__V1__REQUEST__BODY_##x
#define GSC_RESP(x) GPUSCHED__V1__RESPONSE__BODY_##x
#define GSC_NO_BODY GPUSCHED__V1__RESPONSE__BODY__NOT_SET

/* A call whose response carries nothing but the status. */
static inline int gsc_call_plain(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body)
{
	return gsc_call(c, req_case, body, GSC_NO_BODY, 0, NULL);
}

/* Records a local failure's description in c->message and returns err. */
int gsc_fail(gs_client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* strdup that maps NULL to "" (protobuf-c strings are never NULL, but defaults can be). */
char *gsc_strdup0(const char *s);
/* Copies the fields of *in that lie wholly within in->size (the rest: 0, the defaults). */
void gsc_connect_options_copy(const gs_connect_options *in, gs_connect_options *out);

/* Maps an nng error of the transport (dial, send, receive) to a GS_ERR_*. */
int gsc_nng_error(int rv);

/* A string of a list entry: where the entry keeps it and where the message has it. */
typedef struct gsc_string {
	size_t entry, msg;
} gsc_string;

#define GSC_STRING(etype, mtype, member)                                                           \
	{                                                                                          \
		offsetof(etype, member), offsetof(mtype, member)                                   \
	}

/*
 * Lists the library copies out of a response (history, events, moves, tenants, ...) and hands
 * to the caller, who frees them with the public gs_*_free of the list.
 */
typedef struct gsc_entry_kind {
	size_t size; /* bytes of one entry */
	/* Fills a zeroed entry's plain fields (not its strings) from one message. */
	void (*copy)(void *entry, const ProtobufCMessage *msg);
	/* The entry's strings: gsc_copy_list copies them after copy (an absent one as ""),
	 * gsc_free_list frees them, also after a failed copy. */
	size_t nstrings;
	gsc_string strings[7];
	const char *what;  /* "history": names the list in "out of memory copying the history" */
	const char *field; /* gsc_call_list: the answer's repeated field that holds the list */
} gsc_entry_kind;

/* An entry kind's .strings from a list of GSC_STRING(...) and .nstrings counted from it. */
#define GSC_STRINGS(...)                                                                           \
	.nstrings = sizeof((gsc_string[]){__VA_ARGS__}) / sizeof(gsc_string),                      \
	.strings = {__VA_ARGS__}

/* Copies the n messages of a repeated field (generated as an array of message pointers) into
 * a new array (NULL when n is 0). Returns 0 with the array in *list and n in *count, or
 * GS_ERR_NOMEM with nothing left allocated, *list NULL, *count 0 and why in c->message. */
int gsc_copy_list(gs_client *c, const gsc_entry_kind *kind, ProtobufCMessage *const *msgs, size_t n,
                  void **list, size_t *count);
/* Copies one message into a zeroed entry: its plain fields, then its strings. Returns 0, or
 * GS_ERR_NOMEM with the strings copied so far (the one that failed NULL) for the caller to
 * free. */
int gsc_copy_entry(const gsc_entry_kind *kind, void *entry, const ProtobufCMessage *msg);
/* Clears the first count entries of a list from gsc_copy_list, then frees it; NULL is fine. */
void gsc_free_list(const gsc_entry_kind *kind, void *list, size_t count);
/* The answer a successful gsc_call(..., want, ...) returned: the response's body `want`. */
const ProtobufCMessage *gsc_answer(const Gpusched__V1__Response *resp,
                                   Gpusched__V1__Response__BodyCase want);
/* A packet event (history.c), also the packet events of a watch (watch.c). */
extern const gsc_entry_kind gsc_event_kind;
/* gsc_call for a list: the answer's repeated field kind->field, copied by gsc_copy_list into
 * *list and *count (NULL and 0 on any error). */
int gsc_call_list(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body,
                  Gpusched__V1__Response__BodyCase want, const gsc_entry_kind *kind, void **list,
                  size_t *count);
/* gsc_call for an answer the caller keeps in one struct: on success copy fills *out from the
 * answer (the response's body `want`), as a gsc_entry_kind's copy fills an entry; a NULL out
 * is not filled. Returns as gsc_call, leaving *out as it is on any error. */
int gsc_call_copy(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body,
                  Gpusched__V1__Response__BodyCase want,
                  void (*copy)(void *out, const ProtobufCMessage *answer), void *out);

/* Internal starts of the submission and wait requests, shared by the blocking calls
 * (submit.c, libgpusched.c) and the public gs_async_* calls (async.c). A waiter target
 * (gsc_waiter) makes a blocking call of a request: gsc_wait returns its status and leaves
 * the event in w->ev and the daemon's message in c->message. */
typedef struct gsc_waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	gs_async_event ev;
	Gpusched__V1__Response *resp; /* gsc_call only: the decoded answer when ev.status is 0 */
	gsc_slot *slot;               /* the request, run by gsc_wait on the caller's thread */
} gsc_waiter;

/* Where a request completes: a public target (opts) or a waiter (w). */
typedef struct gsc_target {
	const gs_async_opts *opts;
	gsc_waiter *w;
} gsc_target;

int gsc_submit_start(gs_client *c, const gs_submit_desc *desc, gsc_target to, uint64_t *id);
int gsc_submit_batch_start(gs_client *c, const gs_submit_desc *packets, size_t count,
                           gs_submit_result *out, gsc_target to, uint64_t *id);
int gsc_packet_wait_start(gs_client *c, uint64_t packet, uint32_t timeout_ms, gsc_target to,
                          uint64_t *id);
int gsc_sync_wait_start(gs_client *c, uint64_t sync, uint64_t value, uint32_t timeout_ms,
                        gsc_target to, uint64_t *id);
void gsc_waiter_init(gsc_waiter *w);
/* A blocking call begins: clears the client's last message, readies w and returns the target
 * to start the request with (then gsc_wait). */
gsc_target gsc_blocking(gs_client *c, gsc_waiter *w);
/* Waits for the waiter's request (started with status 0, or not started: pass the start's
 * error as `started`); copies its message into c->message, releases the waiter and returns
 * the request's status. */
int gsc_wait(gs_client *c, gsc_waiter *w, int started);

/* Builds the SubmitRequest for one packet. The message points into `desc` and `dma` (no copy
 * of the DMA bytes); release with gsc_submit_msg_release. Exposed for tests of the encoding. */
typedef struct gsc_submit_msg {
	Gpusched__V1__SubmitRequest req;
	void *storage; /* list entries and their pointer arrays, one block */
} gsc_submit_msg;

int gsc_submit_msg_build(gsc_submit_msg *m, const gs_submit_desc *desc);
void gsc_submit_msg_release(gsc_submit_msg *m);

#endif
