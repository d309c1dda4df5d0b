/*
 * The gate: connections to the tcp:// and tls+tcp:// listeners before their handshake.
 *
 * nng accepts a connection and tells the daemon only once the TLS handshake and the SP
 * header exchange are done (the pipe event conn.c counts). Until then a connection holds a
 * file descriptor that no limit of ours saw, and nng 1.5 (Debian 12's) never ends a TLS
 * handshake that stalls: its negotiation timeout cancels a send that waits for the handshake,
 * and that cancel does not reach the handshake. 1,100 silent connections took every descriptor
 * and locked the local administrator out; 600 were still held after 40 s (issue 26, item 2).
 *
 * The gate thread looks at the daemon's own sockets every GATE_PERIOD_MS: a socket whose local
 * port is a listener's and whose peer is no pipe yet is a connection in its handshake. It is
 * ended (shutdown(2): nng sees the peer gone and closes it) when it is older than
 * handshake_timeout_ms, when its peer has max_connections_per_peer connections with the
 * established ones, or when max_handshakes are in their handshake at once (the newest go
 * first). shutdown leaves the descriptor to nng, so no number is closed under it; each socket
 * is checked again right before.
 */
#include "rpc/internal.h"

#include "core/log.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define GATE_PERIOD_MS 200u

typedef struct pending {
	int fd;
	uint64_t peer, conn; /* peer and connection keys (conn.c) */
	uint64_t since_ns;
} pending;

struct gsd_gate {
	struct gsd_rpc *rpc;
	uint16_t ports[GSD_MAX_LISTEN]; /* network order */
	uint32_t nports;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	/* What the last scan saw: (fd, connection key) -> first seen (ns). Gate thread only. */
	gsd_hmap seen;
	pending *list;
	size_t cap;
	uint64_t ended_timeout, ended_peer, ended_total; /* since start, for the log */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The keys of fd's connection when it is one accepted by a listener of the gate: true. */
static bool accepted_on_listener(const struct gsd_gate *g, int fd, uint64_t *peer, uint64_t *conn)
{
	uint16_t port;
	if (!gsd_socket_conn(fd, &port, peer, conn))
		return false;
	for (uint32_t i = 0; i < g->nports; i++)
		if (g->ports[i] == port)
			return true;
	return false; /* another socket of the daemon */
}

static int by_age(const void *a, const void *b)
{
	const pending *x = a, *y = b;
	return (x->since_ns > y->since_ns) - (x->since_ns < y->since_ns);
}

static void end(struct gsd_gate *g, const pending *p, uint64_t *counter)
{
	uint64_t peer, conn;
	/* The same connection still: the number was not reused meanwhile. */
	if (!accepted_on_listener(g, p->fd, &peer, &conn) || conn != p->conn)
		return;
	shutdown(p->fd, SHUT_RDWR);
	(*counter)++;
	g->ended_total++;
}

static uint64_t seen_key(int fd, uint64_t conn)
{
	uint64_t k = conn ^ ((uint64_t)(unsigned)fd * 0xC2B2AE3D27D4EB4Fu);
	return k ? k : 1;
}

/* One look at the daemon's sockets. */
static void scan(struct gsd_gate *g)
{
	struct gsd_rpc *rpc = g->rpc;
	DIR *dir = opendir("/proc/self/fd");
	if (!dir)
		return;
	uint64_t now = mono_ns();
	size_t n = 0;
	gsd_hmap next;
	gsd_hmap_init(&next);
	struct dirent *de;
	while ((de = readdir(dir))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		int fd = atoi(de->d_name);
		uint64_t peer, conn;
		if (fd == dirfd(dir) || !accepted_on_listener(g, fd, &peer, &conn))
			continue;
		pthread_mutex_lock(&rpc->peers_lock);
		bool known = gsd_hmap_get(&rpc->known_conns, conn) != NULL;
		pthread_mutex_unlock(&rpc->peers_lock);
		if (known)
			continue;
		uint64_t k = seen_key(fd, conn);
		uint64_t since = (uint64_t)(uintptr_t)gsd_hmap_get(&g->seen, k);
		if (!since)
			since = now;
		if (gsd_hmap_put(&next, k, (void *)(uintptr_t)since) != 0)
			continue;
		if (n == g->cap) {
			size_t cap = g->cap ? 2 * g->cap : 256;
			pending *l = realloc(g->list, cap * sizeof *l);
			if (!l)
				continue;
			g->list = l;
			g->cap = cap;
		}
		g->list[n++] = (pending){fd, peer, conn, since};
	}
	closedir(dir);
	gsd_hmap_free(&g->seen);
	g->seen = next;

	/* Oldest first: under a cap the newest go. */
	if (n > 1)
		qsort(g->list, n, sizeof *g->list, by_age);
	const gsd_config *cfg = &rpc->d->cfg;
	uint64_t timeout_ns = (uint64_t)cfg->handshake_timeout_ms * 1000000u;
	gsd_hmap per_peer; /* peer -> connections counted so far (established + in handshake) */
	gsd_hmap_init(&per_peer);
	uint32_t kept = 0;
	uint64_t before = g->ended_total;
	for (size_t i = 0; i < n; i++) {
		const pending *p = &g->list[i];
		if (now - p->since_ns >= timeout_ns) {
			end(g, p, &g->ended_timeout);
			continue;
		}
		uint64_t count = (uint64_t)(uintptr_t)gsd_hmap_get(&per_peer, p->peer);
		if (!count) {
			pthread_mutex_lock(&rpc->peers_lock);
			count = (uint64_t)(uintptr_t)gsd_hmap_get(&rpc->peers, p->peer);
			pthread_mutex_unlock(&rpc->peers_lock);
		}
		if (count >= cfg->max_connections_per_peer || kept >= cfg->max_handshakes) {
			end(g, p, &g->ended_peer);
			continue;
		}
		gsd_hmap_put(&per_peer, p->peer, (void *)(uintptr_t)(count + 1));
		kept++;
	}
	gsd_hmap_free(&per_peer);
	if (g->ended_total != before)
		GSD_WARN(
		        "rpc: ended %llu connections in their handshake (%llu too slow, %llu over a"
		        " limit since start; handshake_timeout_ms %u, max_handshakes %u)",
		        (unsigned long long)(g->ended_total - before),
		        (unsigned long long)g->ended_timeout, (unsigned long long)g->ended_peer,
		        cfg->handshake_timeout_ms, cfg->max_handshakes);
}

static void *gate_main(void *arg)
{
	struct gsd_gate *g = arg;
	pthread_setname_np(pthread_self(), "gs-gate");
	pthread_mutex_lock(&g->mu);
	while (!g->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)GATE_PERIOD_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&g->cv, &g->mu, &ts);
		if (g->stop)
			break;
		pthread_mutex_unlock(&g->mu);
		scan(g);
		pthread_mutex_lock(&g->mu);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

int gsd_rpc_gate_start(struct gsd_rpc *rpc)
{
	gsd_daemon *d = rpc->d;
	struct gsd_gate *g = calloc(1, sizeof *g);
	if (!g)
		return -1;
	g->rpc = rpc;
	for (uint32_t i = 0; i < rpc->nlisteners; i++) {
		const char *url = d->cfg.listen[i];
		if (strncmp(url, "tcp", 3) != 0 && strncmp(url, "tls+tcp", 7) != 0)
			continue;
		int port;
		if (nng_listener_get_int(rpc->listeners[i], NNG_OPT_TCP_BOUND_PORT, &port) == 0)
			g->ports[g->nports++] = htons((uint16_t)port);
	}
	if (!g->nports) {
		free(g);
		return 0;
	}
	gsd_hmap_init(&g->seen);
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	if (pthread_create(&g->thread, NULL, gate_main, g) != 0) {
		pthread_mutex_destroy(&g->mu);
		pthread_cond_destroy(&g->cv);
		free(g);
		return -1;
	}
	rpc->gate = g;
	return 0;
}

void gsd_rpc_gate_stop(struct gsd_rpc *rpc)
{
	struct gsd_gate *g = rpc->gate;
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	g->stop = true;
	pthread_cond_signal(&g->cv);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->thread, NULL);
	gsd_hmap_free(&g->seen);
	free(g->list);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
	rpc->gate = NULL;
}
