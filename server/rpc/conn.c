/*
 * Connections. nng tells us (on its own threads) when a pipe is added or removed; we count
 * connections per peer (an IP address over tcp, a user id over ipc) and in all, and close a
 * new pipe that would pass max_connections_per_peer or max_connections, so no peer can take
 * the daemon's file descriptors from the others. Local administrators (ipc from root or the
 * daemon's own user) keep a reserve above max_connections, so they can always connect.
 *
 * The loop keeps a record per connection: whether a request on it has authenticated (until
 * then it gets only small messages and few wrong tokens), and the calls parked on it, which
 * end when the peer goes away.
 */
#include "rpc/internal.h"

#include "core/log.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

/* Connections above max_connections that only local administrators may use. */
#define ADMIN_RESERVE 16u
/* File descriptors kept for the daemon itself (audit files, engines, listeners, logs). */
#define FD_RESERVE 128u

/* ---- per peer, on nng's threads ---- */

uint64_t gsd_peer_key_inet(uint32_t addr)
{
	return (UINT64_C(1) << 60) | addr;
}

uint64_t gsd_peer_key_inet6(const uint8_t addr[16])
{
	uint64_t h = 1469598103934665603u; /* FNV-1a over the address */
	for (int i = 0; i < 16; i++)
		h = (h ^ addr[i]) * 1099511628211u;
	return (UINT64_C(2) << 60) | (h >> 4);
}

uint64_t gsd_conn_key(uint64_t peer, uint16_t port)
{
	uint64_t k = (peer ^ ((uint64_t)port << 44)) * 0x9E3779B97F4A7C15u;
	return k ? k : 1;
}

uint64_t gsd_peer_key_sockaddr(const struct sockaddr *sa, uint16_t *port)
{
	*port = 0;
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		*port = in->sin_port;
		return gsd_peer_key_inet(in->sin_addr.s_addr);
	}
	if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		*port = in6->sin6_port;
		return gsd_peer_key_inet6(in6->sin6_addr.s6_addr);
	}
	return UINT64_C(1) << 62; /* unknown peers share one key */
}

bool gsd_socket_conn(int fd, uint16_t *local_port, uint64_t *peer, uint64_t *conn)
{
	struct sockaddr_storage local, remote;
	socklen_t ll = sizeof local, rl = sizeof remote;
	if (fd < 0 || getsockname(fd, (struct sockaddr *)&local, &ll) != 0 ||
	    (local.ss_family != AF_INET && local.ss_family != AF_INET6))
		return false; /* not a socket, or not TCP/IP */
	gsd_peer_key_sockaddr((struct sockaddr *)&local, local_port);
	if (getpeername(fd, (struct sockaddr *)&remote, &rl) != 0)
		return false; /* a listening socket */
	uint16_t port;
	*peer = gsd_peer_key_sockaddr((struct sockaddr *)&remote, &port);
	*conn = gsd_conn_key(*peer, port);
	return true;
}

/* A non-zero key for the peer of a pipe; *admin when it is a local administrator. *conn: the
 * key of its TCP connection (address and port), 0 for other transports. */
static uint64_t peer_key(nng_pipe p, bool *admin, uint64_t *conn)
{
	nng_sockaddr sa;
	*admin = false;
	*conn = 0;
	if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
		return UINT64_C(1) << 62; /* unknown peers share one key */
	if (sa.s_family == NNG_AF_INET) {
		uint64_t k = gsd_peer_key_inet(sa.s_in.sa_addr);
		*conn = gsd_conn_key(k, sa.s_in.sa_port);
		return k;
	}
	if (sa.s_family == NNG_AF_INET6) {
		uint64_t k = gsd_peer_key_inet6(sa.s_in6.sa_addr);
		*conn = gsd_conn_key(k, sa.s_in6.sa_port);
		return k;
	}
	uint64_t uid;
	if (sa.s_family == NNG_AF_IPC && nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) == 0) {
		*admin = uid == 0 || uid == (uint64_t)geteuid();
		return (UINT64_C(3) << 60) | (uid & 0xffffffffu);
	}
	return (UINT64_C(4) << 60) | sa.s_family;
}

static void warn_rejected(struct gsd_rpc *rpc, const char *why, uint32_t count, uint32_t max)
{
	rpc->rejected++;
	uint64_t now = gsd_now_ns();
	if (now - rpc->last_reject_ns < 1000000000u)
		return; /* at most one line a second under a flood */
	rpc->last_reject_ns = now;
	GSD_WARN("rpc: closed a new connection: %s (%u, max %u; %llu refused so far)", why, count,
	         max, (unsigned long long)rpc->rejected);
}

/* Distinct peers whose unknown tokens are counted at once (a flood of addresses beyond it is
 * still limited per connection). */
#define PEER_BAD_MAX 65536

/* The peer's unknown tokens in the current second (peers_lock held); expired entries go. */
static uint32_t peer_bad_now(struct gsd_rpc *rpc, uint64_t key, uint64_t second)
{
	uint64_t v = (uint64_t)(uintptr_t)gsd_hmap_get(&rpc->peer_bad, key);
	if (v && v >> 16 != second) {
		gsd_hmap_del(&rpc->peer_bad, key);
		v = 0;
	}
	return (uint32_t)(v & 0xffff);
}

static void pipe_added(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)ev;
	struct gsd_rpc *rpc = arg;
	bool admin;
	uint64_t conn;
	uint64_t key = peer_key(p, &admin, &conn);
	uint32_t per_peer = rpc->d->cfg.max_connections_per_peer;
	uint32_t max_bad = rpc->d->cfg.max_bad_tokens_per_second;
	pthread_mutex_lock(&rpc->peers_lock);
	uint32_t n = (uint32_t)(uintptr_t)gsd_hmap_get(&rpc->peers, key);
	uint32_t bad = peer_bad_now(rpc, key, gsd_now_ns() / 1000000000u);
	uint32_t limit = admin ? rpc->max_connections : rpc->max_connections - ADMIN_RESERVE;
	bool ok = false;
	if (rpc->connections >= limit)
		warn_rejected(rpc, "too many connections", rpc->connections, limit);
	else if (bad > max_bad)
		warn_rejected(rpc, "too many unknown tokens from one peer this second", bad,
		              max_bad);
	else if (n >= per_peer && !admin)
		warn_rejected(rpc, "too many connections from one peer", n, per_peer);
	else if (gsd_hmap_put(&rpc->peers, key, (void *)(uintptr_t)(n + 1)) == 0 &&
	         gsd_hmap_put(&rpc->pipe_peer, nng_pipe_id(p), (void *)(uintptr_t)key) == 0) {
		rpc->connections++;
		ok = true;
		/* Past its handshake: the gate (gate.c) leaves it alone. */
		if (conn &&
		    gsd_hmap_put(&rpc->pipe_conn, nng_pipe_id(p), (void *)(uintptr_t)conn) == 0 &&
		    gsd_hmap_put(&rpc->known_conns, conn, (void *)(uintptr_t)1) != 0)
			gsd_hmap_del(&rpc->pipe_conn, nng_pipe_id(p));
	} else if (n == 0) {
		gsd_hmap_del(&rpc->peers, key); /* out of memory half way */
	}
	pthread_mutex_unlock(&rpc->peers_lock);
	if (!ok)
		nng_pipe_close(p);
}

static void pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)ev;
	struct gsd_rpc *rpc = arg;
	uint32_t id = (uint32_t)nng_pipe_id(p);
	pthread_mutex_lock(&rpc->peers_lock);
	uint64_t key = (uint64_t)(uintptr_t)gsd_hmap_del(&rpc->pipe_peer, id);
	uint64_t conn = (uint64_t)(uintptr_t)gsd_hmap_del(&rpc->pipe_conn, id);
	if (conn)
		gsd_hmap_del(&rpc->known_conns, conn);
	if (key) {
		uint32_t n = (uint32_t)(uintptr_t)gsd_hmap_get(&rpc->peers, key);
		if (n <= 1)
			gsd_hmap_del(&rpc->peers, key);
		else
			gsd_hmap_put(&rpc->peers, key, (void *)(uintptr_t)(n - 1));
		rpc->connections--;
	}
	pthread_mutex_unlock(&rpc->peers_lock);
	/* Calls parked on it end on the loop. Without memory for the event they end at their
	 * deadline instead. */
	if (key)
		gsd_rpc_post(rpc, (gsd_inbox_item){.pipe = id});
}

/* The open-file limit bounds connections: each is a descriptor. */
static uint32_t connection_limit(const gsd_config *cfg)
{
	if (cfg->max_connections)
		return cfg->max_connections;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 65536;
	uint64_t fds = rl.rlim_cur > FD_RESERVE + 2 * ADMIN_RESERVE ? rl.rlim_cur - FD_RESERVE
	                                                            : 2 * ADMIN_RESERVE;
	return fds > UINT32_MAX ? UINT32_MAX : (uint32_t)fds;
}

int gsd_rpc_conns_start(struct gsd_rpc *rpc)
{
	gsd_hmap_init(&rpc->conns);
	gsd_hmap_init(&rpc->peers);
	gsd_hmap_init(&rpc->pipe_peer);
	gsd_hmap_init(&rpc->peer_bad);
	gsd_hmap_init(&rpc->pipe_conn);
	gsd_hmap_init(&rpc->known_conns);
	pthread_mutex_init(&rpc->peers_lock, NULL);
	rpc->max_connections = connection_limit(&rpc->d->cfg);
	if (rpc->max_connections <= ADMIN_RESERVE)
		rpc->max_connections = 2 * ADMIN_RESERVE;
	GSD_INFO("rpc: at most %u connections, %u per peer", rpc->max_connections,
	         rpc->d->cfg.max_connections_per_peer);
	if (nng_pipe_notify(rpc->sock, NNG_PIPE_EV_ADD_PRE, pipe_added, rpc) != 0 ||
	    nng_pipe_notify(rpc->sock, NNG_PIPE_EV_REM_POST, pipe_removed, rpc) != 0) {
		GSD_ERROR("rpc: cannot watch connections");
		return -1;
	}
	return 0;
}

static void free_conn(uint64_t key, void *value, void *arg)
{
	(void)key;
	(void)arg;
	free(value);
}

void gsd_rpc_conns_free(struct gsd_rpc *rpc)
{
	gsd_hmap_each(&rpc->conns, free_conn, NULL);
	gsd_hmap_free(&rpc->conns);
	gsd_hmap_free(&rpc->peers);
	gsd_hmap_free(&rpc->pipe_peer);
	gsd_hmap_free(&rpc->peer_bad);
	gsd_hmap_free(&rpc->pipe_conn);
	gsd_hmap_free(&rpc->known_conns);
	pthread_mutex_destroy(&rpc->peers_lock);
}

/* ---- per connection, on the loop ---- */

static bool recently_closed(const struct gsd_rpc *rpc, uint32_t pipe)
{
	for (size_t i = 0; i < GSD_CLOSED_RING; i++)
		if (rpc->closed[i] == pipe)
			return true;
	return false;
}

gsd_conn *gsd_rpc_conn(struct gsd_rpc *rpc, uint32_t pipe, bool create, bool *closed)
{
	*closed = false;
	if (pipe == 0)
		return NULL;
	gsd_conn *c = gsd_hmap_get(&rpc->conns, pipe);
	if (c || !create)
		return c;
	/* A request can reach the loop after its pipe's close event did (they come from
	 * different nng threads): such a pipe gets no new record. */
	if (recently_closed(rpc, pipe)) {
		*closed = true;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->pipe = pipe;
	c->listener = -2;
	gsd_list_init(&c->parked);
	if (gsd_hmap_put(&rpc->conns, pipe, c) != 0) {
		free(c);
		return NULL;
	}
	return c;
}

void gsd_rpc_conn_closed(struct gsd_rpc *rpc, uint32_t pipe)
{
	rpc->closed[rpc->closed_next++ % GSD_CLOSED_RING] = pipe;
	gsd_conn *c = gsd_hmap_get(&rpc->conns, pipe);
	if (!c)
		return;
	/* Nobody will read these answers; each is still recorded in the audit. */
	gsd_list *it;
	while ((it = gsd_list_pop_front(&c->parked))) {
		gsd_call *call = GSD_CONTAINER_OF(it, gsd_call, conn_link);
		gsd_list_init(it);
		gsd_waiter_cancel(&call->waiter);
		gsd_call_error(call, GSD_ST(BUSY),
		               "the connection closed while the request waited: it is cancelled");
	}
	gsd_hmap_del(&rpc->conns, pipe);
	free(c);
}

bool gsd_rpc_conn_bad_token(struct gsd_rpc *rpc, gsd_conn *conn)
{
	if (!conn)
		return false;
	uint64_t now = gsd_now_ns();
	/* Counted for its peer too: new connections do not buy more guesses. */
	uint64_t second = now / 1000000000u;
	pthread_mutex_lock(&rpc->peers_lock);
	uint64_t key = (uint64_t)(uintptr_t)gsd_hmap_get(&rpc->pipe_peer, conn->pipe);
	bool peer_over = false;
	if (key) {
		uint32_t bad = peer_bad_now(rpc, key, second);
		if (bad < 0xffff && (bad || rpc->peer_bad.count < PEER_BAD_MAX) &&
		    gsd_hmap_put(&rpc->peer_bad, key,
		                 (void *)(uintptr_t)(second << 16 | (bad + 1))) == 0)
			bad++;
		peer_over = bad > rpc->d->cfg.max_bad_tokens_per_second;
	}
	pthread_mutex_unlock(&rpc->peers_lock);
	if (now - conn->bad_window >= 1000000000u) {
		conn->bad_window = now;
		conn->bad_tokens = 0;
	}
	uint32_t max = rpc->d->cfg.max_bad_tokens_per_second;
	if (++conn->bad_tokens <= max && !peer_over)
		return false;
	nng_pipe p;
	p.id = conn->pipe;
	nng_pipe_close(p);
	GSD_WARN("rpc: closed connection %u: more than %u unknown tokens in a second (%s)",
	         conn->pipe, max, peer_over ? "from its peer" : "on it");
	return true;
}
