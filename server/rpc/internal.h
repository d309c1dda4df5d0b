/*
 * What the transport's files share (not for the handlers):
 *   transport.c  the REP socket, its contexts ("workers") the loop takes requests with, the
 *                inbox of in-process calls and closed connections (inbox.c: per connection,
 * round-robin), and the admission of each request (size, envelope, token, tenant limits) before it
 * is decoded and dispatched; conn.c connections: per-peer limits on nng's threads, per-connection
 * state on the loop (authentication, waiting requests), cleanup when a peer goes away; call.c
 * answering calls: now, after the audit commit, off the loop; parking calls until an event, with
 * deadlines and limits.
 */
#ifndef GSD_RPC_INTERNAL_H
#define GSD_RPC_INTERNAL_H

#include "rpc/rpc.h"

#include "core/hmap.h"
#include "core/wake.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>

struct gsd_rpc_worker {
	struct gsd_rpc *rpc;
	nng_ctx ctx;
	nng_aio *aio;                     /* receives, with worker_cb */
	nng_aio *saio;                    /* sends, without a callback (transport.c, "answers") */
	struct gsd_rpc_worker *park_next; /* gsd_rpc.parked */
	uint32_t pipe;                    /* the connection of the request it holds (0: none) */
	nng_aio *caio;  /* a read-ahead receive, with a callback (transport.c); made when needed */
	nng_aio *scaio; /* a send with a callback, while pipelining; made when needed */
	/* The tenant whose request it holds, counted in tenant->inflight until the answer is
	 * sent (NULL before authentication). */
	gsd_tenant *tenant;
	size_t bytes; /* the request's encoded size, counted in tenant->inflight_bytes */
	/* In-process calls (gsd_rpc_inject): the answer goes here instead of to nng. */
	void (*inject)(void *arg, const uint8_t *reply, size_t len);
	void *inject_arg;
};

/* An item of the inbox: a request (w, msg), or a connection event (w NULL: pipe closed). */
typedef struct gsd_inbox_item {
	gsd_rpc_worker *w;
	nng_msg *msg;
	uint32_t pipe;
} gsd_inbox_item;

/* The inbox (inbox.c): one FIFO per connection, drained round-robin. Under gsd_rpc.lock. */
typedef struct gsd_inbox {
	gsd_hmap queues; /* pipe id + 1 -> its queue, while it has work */
	struct gsd_inbox_q *cursor,
	        *tail;             /* the ring of queues with work: whose turn, and the last */
	struct gsd_inbox_q *spare; /* emptied queues kept for reuse */
	size_t nspare;
	size_t count; /* items in all */
} gsd_inbox;

void gsd_inbox_init(gsd_inbox *ib);
/* False when memory is short (the item is not queued). */
bool gsd_inbox_push(gsd_inbox *ib, gsd_inbox_item item);
/* Up to max items, one from each connection in turn; returns how many. */
size_t gsd_inbox_take(gsd_inbox *ib, gsd_inbox_item *out, size_t max);
/* Hands every queued item to drop (may be NULL), then frees the inbox. */
void gsd_inbox_free(gsd_inbox *ib, void (*drop)(gsd_inbox_item *item));

/* A client connection (an nng pipe) as the loop knows it. */
typedef struct gsd_conn {
	uint32_t pipe;
	bool authenticated; /* a request on it authenticated: the small size limit is lifted */
	uint32_t waits;     /* calls parked (gsd_call.conn_link) */
	gsd_list parked;
	uint32_t bad_tokens; /* failed authentications in the current second */
	uint64_t bad_window; /* that second (ns) */
	/* The tenant the last token on it named, and that token's digest under the daemon's
	 * key (gsd_rpc.token_key): the next request with the same token skips the lookup. */
	struct gsd_tenant *tenant;
	uint8_t token_digest[16];
	/* The listener it came on (index in gsd_rpc.listeners), looked up on its first request
	 * when a listener admits only some tenants; -1 unknown, -2 not looked up yet. */
	int listener;
} gsd_conn;

#define GSD_CLOSED_RING 4096
#define GSD_UNREAD_RING 64

struct gsd_rpc {
	gsd_daemon *d;
	uint8_t token_key[32]; /* random per daemon run: keys gsd_conn.token_digest */
	nng_socket sock;
	bool sock_open;
	uint32_t nlisteners;
	nng_listener listeners[GSD_MAX_LISTEN];
	/* A listener's own TLS configuration (config listen[].ca_file), and whether any listener
	 * admits only some tenants (listen[].tenants). */
	nng_tls_config *listener_tls[GSD_MAX_LISTEN];
	bool listeners_bound;
	/* Each listener's URL with the port it was given (a configured :0 resolved): a restart
	 * binds that one again. */
	char listen_url[GSD_MAX_LISTEN][300];
	/* New certificates waiting to go into the tls+tcp listeners (gsd_rpc_tls_swap_soon), a
	 * moment after the reload's answer left. */
	gsd_rpc_tls_next tls_pending;
	bool tls_pending_set;
	char tls_who[64];
	uv_timer_t tls_timer;
	gsd_rpc_worker **workers;
	size_t nworkers, capworkers;
	atomic_uint sending; /* answers handed to nng and not yet sent (the parked workers) */
	/* Workers whose answer waits behind their connection's previous one (transport.c):
	 * looked at again before the loop sleeps, and by park_timer while there are any. */
	pthread_mutex_t park_lock; /* parked_workers and free_workers */
	struct gsd_rpc_worker *parked_workers;
	struct gsd_rpc_worker *free_workers; /* holding no request */
	/* Answers parked per connection (pipe id -> count, as a pointer-sized int), and a
	 * connection past its limit, or any connection once all parked answers pass theirs
	 * (transport.c, "clients that do not read"). */
	gsd_hmap unsent;
	uint32_t unsent_over;
	bool unsent_all_over;
	/* Requests taken and not answered per connection (pipe id -> count), and when a
	 * connection last had two (read-ahead, transport.c). Under park_lock. */
	gsd_hmap open;
	_Atomic uint64_t pipelining_ns;
	atomic_uint ra_armed;                  /* read-ahead receives waiting */
	atomic_ullong ra_taken;                /* requests that came through them */
	uint32_t ra_want;                      /* how many should wait (the loop) */
	uint32_t unread_ring[GSD_UNREAD_RING]; /* connections closed for it lately (the loop) */
	size_t unread_next;
	uint64_t unread_closed;    /* connections closed for it */
	uint64_t unread_warned_ns; /* rate limit of its warning */
	uint64_t unread_walked_ns; /* when unsent was last walked for its largest (the loop) */
	/* The socket's receive descriptor: readable while a request waits for a worker. Stopped
	 * (recv_paused) while every worker holds one. */
	uv_poll_t recv_poll;
	bool recv_ready;
	bool recv_polling;
	atomic_bool recv_paused;
	/* The doorbell (transport.c): a receive with a callback while the descriptor is not
	 * polled; bell_rang and bell_msg under park_lock. */
	nng_aio *bell_aio;
	struct gsd_rpc_worker *bell_w;
	bool bell_rang;
	nng_msg *bell_msg;
	uint64_t bells;      /* times it rang */
	atomic_ullong parks; /* answers parked */
	uv_prepare_t park_prepare;
	uv_timer_t park_timer;
	bool park_ready; /* the two handles are made */
	atomic_bool closing;
	pthread_mutex_t lock; /* inbox and recorded */
	gsd_inbox inbox;
	gsd_wake async;
	/* Calls to handle again from the loop (their waiter.link), and the async that drains them.
	 */
	gsd_list redispatch;
	uv_async_t redispatch_async;
	/* Answered submissions whose packets may now run, or must be cancelled (call.c). */
	struct gsd_audit_reply *recorded, *recorded_tail;
	gsd_wake recorded_async;
	/* Before the loop sleeps: the audit commits what answers wait for (call.c). */
	uv_prepare_t audit_commit;
	uint32_t offloads;       /* calls running on the thread pool or the reader (reads.c) */
	struct gsd_reads *reads; /* heavy reads: the reader thread and its queue (reads.c) */
	/* ---- loop side of connections (conn.c) ---- */
	gsd_hmap conns;                   /* pipe id -> gsd_conn */
	uint32_t closed[GSD_CLOSED_RING]; /* recently closed pipes: a late request finds its own */
	size_t closed_next;
	uint32_t parked; /* calls parked, all connections */
	/* Refusals of flooding tenants held to be answered late, oldest first (call.c). */
	gsd_list tarpit;
	uv_timer_t tarpit_timer;
	uint32_t tarpitted;
	bool settling; /* gsd_rpc_settle ran: nothing is held any more */
	/* ---- nng side of connections (conn.c), under peers_lock ---- */
	pthread_mutex_t peers_lock;
	gsd_hmap peers;     /* peer key -> count of its connections (as a pointer-sized int) */
	gsd_hmap pipe_peer; /* pipe id -> peer key (as a pointer-sized int) */
	/* peer key -> its unknown tokens in the current second, packed (second << 16 | count):
	 * past max_bad_tokens_per_second a peer's new connections are refused too. */
	gsd_hmap peer_bad;
	/* TCP connections past their handshake: pipe id -> connection key (gsd_conn_key), and
	 * the set of those keys, which the gate (gate.c) leaves alone. */
	gsd_hmap pipe_conn, known_conns;
	uint32_t connections, max_connections;
	struct gsd_gate *gate;   /* gate.c */
	uint64_t rejected;       /* connections closed for a limit */
	uint64_t last_reject_ns; /* rate limit of the warning */
};

/* ---- transport.c ---- */
void gsd_rpc_worker_send(gsd_rpc_worker *w, nng_msg *msg);
nng_msg *gsd_rpc_encode(uint64_t id, Gpusched__V1__Response *resp);
/* Queues an item for the loop (any thread). False when memory is short. */
bool gsd_rpc_post(struct gsd_rpc *rpc, gsd_inbox_item item);

/* ---- gate.c ---- */
/* The timer of gsd_rpc_tls_swap_soon (transport.c): made with the other handles, closed
 * with them (what is still pending is discarded). */
void gsd_rpc_tls_timer_init(struct gsd_rpc *rpc);
void gsd_rpc_tls_timer_close(struct gsd_rpc *rpc);

/* Starts the gate over the tcp:// and tls+tcp:// listeners (none: nothing to do). */
int gsd_rpc_gate_start(struct gsd_rpc *rpc);
void gsd_rpc_gate_stop(struct gsd_rpc *rpc);

/* ---- reads.c ---- */
/* A tenant's reads waiting or running, and all reads waiting, at most (BUSY beyond). */
#define GSD_READS_PER_TENANT 4u
#define GSD_READS_QUEUED     256u
int gsd_rpc_reads_start(struct gsd_rpc *rpc);
/* Joins the reader (nothing may be queued: gsd_rpc_settle waited for every read). */
void gsd_rpc_reads_stop(struct gsd_rpc *rpc);
void gsd_rpc_reads_free(struct gsd_rpc *rpc);

/* ---- call.c ---- */
/* On the loop, after work answered off the loop: audits an error, sends the answer, frees the
 * call. */
void gsd_call_offload_finish(gsd_call *c);

/* ---- conn.c ---- */
/* Keys of a peer (an address) and of one TCP connection (address and port, the port in
 * network order as nng and the socket API give it). */
uint64_t gsd_peer_key_inet(uint32_t addr);
uint64_t gsd_peer_key_inet6(const uint8_t addr[16]);
uint64_t gsd_conn_key(uint64_t peer, uint16_t port);
/* The peer key of an IPv4 or IPv6 address, *port its port (1 << 62 and 0 for others). */
struct sockaddr;
uint64_t gsd_peer_key_sockaddr(const struct sockaddr *sa, uint16_t *port);
/* fd as a connected TCP socket: its local port, its peer's key and its connection key;
 * false when it is none (not a socket, another family, or a listening one). */
bool gsd_socket_conn(int fd, uint16_t *local_port, uint64_t *peer, uint64_t *conn);
int gsd_rpc_conns_start(struct gsd_rpc *rpc);
void gsd_rpc_conns_free(struct gsd_rpc *rpc);
/* The loop's record of a pipe, made on first use (create); NULL for in-process calls (pipe 0), a
 * pipe that closed already (*closed set), or when memory is short. */
gsd_conn *gsd_rpc_conn(struct gsd_rpc *rpc, uint32_t pipe, bool create, bool *closed);
/* The pipe closed: its parked calls end, its record goes. */
void gsd_rpc_conn_closed(struct gsd_rpc *rpc, uint32_t pipe);
/* A request on the connection presented a token no tenant has: true when it has done so too
 * often this second and the connection is being closed. */
bool gsd_rpc_conn_bad_token(struct gsd_rpc *rpc, gsd_conn *conn);

/* ---- call.c ---- */
int gsd_rpc_calls_start(struct gsd_rpc *rpc);
void gsd_rpc_calls_close(struct gsd_rpc *rpc);
void gsd_rpc_calls_free(struct gsd_rpc *rpc);

#endif
