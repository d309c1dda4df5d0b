/*
 * gpusched-relay: the way into gpuschedd for the processes of one virtual machine.
 *
 * Guest processes connect to the relay on a local socket (ipc://, created 0600) and speak the
 * daemon's own protocol with the ordinary client library. The relay forwards each request to
 * the host daemon over one connection (tls+tcp:// in production) with the virtual machine's
 * token, so the host sees one tenant of kind VM, and it marks each request with the guest
 * process that sent it (Request.guest): the daemon scopes every handle to its guest.
 *
 * A guest process is a process id on the ipc socket (every connection of one process is the
 * same guest), or one connection where the peer's process id is not known. Guest ids are
 * unique per relay run (a random 32-bit epoch, then a count), so a guest of a previous run is
 * never named again; at start the relay releases what guests of earlier runs left behind
 * (--no-sweep keeps it), and when a guest's last connection closes it releases that guest's
 * objects (GuestRelease) and nothing else.
 *
 * Forwarding is the nng device pattern: a raw REP socket for the guests and a raw REQ socket to
 * the host, so each request's routing header (guest pipe, request id) travels to the daemon and
 * comes back with its answer; nothing about a request is kept but one entry while it is on the
 * host link. When that link is down a request is answered UNAVAILABLE at once, and when it drops
 * every request on it is answered UNAVAILABLE (the daemon may or may not have done it); the
 * dialer reconnects by itself. A request above --max-message is answered TOO_LARGE without
 * reaching the host.
 */
#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "logline.h"
#include "pbwire.h"
#include "rpc.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_MESSAGE 131072u
#define NBUCKETS            4096u
/* Requests on the host link at once; beyond, a guest is told the relay is busy. */
#define MAX_INFLIGHT 65536u
/* Tries of one GuestRelease, a second apart, before the relay gives up and logs it. */
#define RELEASE_TRIES 10

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct options {
	const char *listen;
	const char *host;
	const char *token_file;
	uint32_t max_message;
	uint32_t mode;
	uint32_t wait_host_s;
	uint32_t max_connections; /* guest connections at once */
	uint32_t guest_inflight;  /* one guest's requests on the host link at once */
	uint32_t guest_conns;     /* one guest's connections at once */
	uint32_t heartbeat_ms;    /* between probes of the host link; 0: none */
	int log_level;
	bool sweep;
} options;

/* A guest process: its process id (or pipe, when unknown), id, open connections and requests
 * on the host link. It is released when its last connection closes, and freed once its last
 * request is answered too. */
typedef struct guest {
	uint64_t who;
	uint64_t id;
	uint32_t pipes;
	uint32_t inflight;
	struct guest *next;
} guest;

/* A request on the host link: its guest pipe and nng request id, its Request.id, its guest. */
typedef struct flight {
	uint64_t key; /* pipe << 32 | request id */
	uint64_t id;
	guest *g;
	struct flight *next;
} flight;

/* Which guest a connection belongs to. */
typedef struct pipe_guest {
	uint32_t pipe;
	guest *g;
	struct pipe_guest *next;
} pipe_guest;

typedef struct relay {
	options o;
	char token[256];
	nng_socket guests; /* raw REP */
	nng_socket host;   /* raw REQ */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	flight *flights[NBUCKETS];
	uint32_t nflights;
	guest *all_guests;
	pipe_guest *pipes[NBUCKETS];
	uint32_t npipes;    /* guest connections open */
	uint64_t *releases; /* guest ids to release */
	size_t nreleases, capreleases;
	int host_pipes;
	nng_pipe host_pipe; /* the forwarding link's connection, while host_pipes > 0 */
	/* Guests are served once what earlier runs' guests left is released (else the sweep
	 * could take a new guest's objects too). */
	bool swept;
	bool stopping;
	uint64_t epoch, next_guest;
	/* counters, under lock */
	uint64_t forwarded, answered, unavailable, too_large, malformed, released, busy, refused;
} relay;

static int g_level = GS_LOG_INFO;

static void logf_(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(int level, const char *fmt, ...)
{
	if (level > g_level)
		return;
	va_list ap;
	va_start(ap, fmt);
	gs_log_vwrite(STDERR_FILENO, "gpusched-relay", level, fmt, ap);
	va_end(ap);
}

/* ---- answers the relay gives itself ---- */

/*
 * Walks the top-level fields of a Request without decoding the messages inside: *id gets
 * Request.id, and when out is given, every field but token (2) and guest (4) is copied to it,
 * then the VM's token and the guest id are appended (out holds len + the token + 24 bytes).
 * Returns the bytes written (or len when out is NULL), 0 when the bytes are no protobuf
 * message; what is inside the body the daemon checks as from any client.
 */
static size_t scan_request(const uint8_t *in, size_t len, uint64_t *id, uint8_t *out,
                           const char *token, uint64_t guest_id)
{
	const uint8_t *p = in, *end = in + len;
	size_t n = 0;
	*id = 0;
	while (p < end) {
		const uint8_t *field = p;
		gs_pb_field f;
		if (!gs_pb_field_next(&p, end, &f) || f.number == 0)
			return 0;
		if (f.number == 1 && f.wire == GS_PB_VARINT)
			*id = f.value;
		if (out && f.number != 2 && f.number != 4) {
			memcpy(out + n, field, (size_t)(p - field));
			n += (size_t)(p - field);
		}
	}
	if (!out)
		return len ? len : 1;
	size_t tl = strlen(token);
	out[n++] = 2u << 3 | 2;
	n += gs_pb_put_varint(out + n, tl);
	memcpy(out + n, token, tl);
	n += tl;
	out[n++] = 4u << 3 | 0;
	n += gs_pb_put_varint(out + n, guest_id);
	return n;
}

/* Answers the guest request routed by (pipe, rid) with a status and message. */
static void answer(relay *r, uint32_t pipe, uint32_t rid, uint64_t id, int status, const char *fmt,
                   ...) __attribute__((format(printf, 6, 7)));
static void answer(relay *r, uint32_t pipe, uint32_t rid, uint64_t id, int status, const char *fmt,
                   ...)
{
	char text[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
	resp.id = id;
	resp.status = status;
	resp.message = text;
	size_t n = gpusched__v1__response__get_packed_size(&resp);
	nng_msg *m;
	if (nng_msg_alloc(&m, n) != 0)
		return;
	gpusched__v1__response__pack(&resp, nng_msg_body(m));
	if (nng_msg_header_append_u32(m, pipe) != 0 || nng_msg_header_append_u32(m, rid) != 0 ||
	    nng_sendmsg(r->guests, m, 0) != 0)
		nng_msg_free(m);
}

/* ---- requests on the host link ---- */

/* A request leaves the host link (lock held): its guest's count drops, and a guest whose
 * connections are all gone is freed with its last request. */
static void flight_done(flight *x)
{
	guest *g = x->g;
	if (--g->inflight == 0 && g->pipes == 0)
		free(g);
	free(x);
}

static flight **flight_slot(relay *r, uint64_t key)
{
	flight **f = &r->flights[(key * 0x9e3779b97f4a7c15u) >> 52];
	while (*f && (*f)->key != key)
		f = &(*f)->next;
	return f;
}

/* Takes the entry of key off the table (lock held); false when it is not there. */
static bool flight_take(relay *r, uint64_t key, uint64_t *id)
{
	flight **f = flight_slot(r, key);
	if (!*f)
		return false;
	flight *x = *f;
	*f = x->next;
	*id = x->id;
	flight_done(x);
	r->nflights--;
	return true;
}

/* Every request on the link is answered UNAVAILABLE: the link went down under it. */
static void fail_all_flights(relay *r)
{
	struct lost {
		uint64_t key, id;
	} *list = NULL;
	pthread_mutex_lock(&r->lock);
	list = r->nflights ? calloc(r->nflights, sizeof(*list)) : NULL;
	uint32_t k = 0;
	for (uint32_t b = 0; b < NBUCKETS; b++) {
		while (r->flights[b]) {
			flight *x = r->flights[b];
			r->flights[b] = x->next;
			if (list)
				list[k++] = (struct lost){x->key, x->id};
			flight_done(x);
		}
	}
	uint32_t n = r->nflights;
	r->nflights = 0;
	r->unavailable += n;
	pthread_mutex_unlock(&r->lock);
	if (n)
		logf_(GS_LOG_WARN,
		      "%u requests were on the host link when it went down: answered"
		      " UNAVAILABLE",
		      n);
	/* Without memory for the list the guests are not told: their calls time out. */
	for (uint32_t i = 0; i < k; i++)
		answer(r, (uint32_t)(list[i].key >> 32), (uint32_t)list[i].key, list[i].id,
		       GPUSCHED__V1__STATUS__STATUS_UNAVAILABLE,
		       "relay: the link to the host daemon went down while the request was on it;"
		       " whether the daemon did it is unknown");
	free(list);
}

/* ---- guests ---- */

static pipe_guest **pipe_slot(relay *r, uint32_t pipe)
{
	pipe_guest **p = &r->pipes[(pipe * 2654435761u) % NBUCKETS];
	while (*p && (*p)->pipe != pipe)
		p = &(*p)->next;
	return p;
}

/* Who is on a connection: its peer's process id, or (unknown, or not ipc) the connection.
 * Asked of nng without the relay's lock: nng calls the pipe callbacks, which take it, with
 * its own locks held. */
static uint64_t peer_who(nng_pipe p)
{
	uint64_t pid = 0;
	return nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) == 0 && pid
	               ? pid
	               : (UINT64_C(1) << 63) | (uint32_t)nng_pipe_id(p);
}

/* The guest of connection id (who: peer_who), made on its first sight (lock held); NULL when
 * memory is short. */
static guest *guest_of_pipe(relay *r, uint32_t id, uint64_t who)
{
	pipe_guest **slot = pipe_slot(r, id);
	if (*slot)
		return (*slot)->g;
	if (!who)
		return NULL; /* it was known a moment ago: it has just closed */
	guest *g = r->all_guests;
	while (g && g->who != who)
		g = g->next;
	pipe_guest *pg = calloc(1, sizeof(*pg));
	if (!pg)
		return NULL;
	if (!g) {
		g = calloc(1, sizeof(*g));
		if (!g) {
			free(pg);
			return NULL;
		}
		g->who = who;
		g->id = r->epoch << 32 | ++r->next_guest;
		g->next = r->all_guests;
		r->all_guests = g;
		logf_(GS_LOG_INFO, "guest %" PRIu64 " is %s %" PRIu64, g->id,
		      who >> 63 ? "connection" : "process", who & ~(UINT64_C(1) << 63));
	}
	g->pipes++;
	r->npipes++;
	pg->pipe = id;
	pg->g = g;
	*slot = pg;
	return g;
}

static void queue_release(relay *r, uint64_t id)
{
	if (r->nreleases == r->capreleases) {
		size_t cap = r->capreleases ? 2 * r->capreleases : 16;
		uint64_t *n = realloc(r->releases, cap * sizeof(*n));
		if (!n) {
			logf_(GS_LOG_ERROR,
			      "out of memory: guest %" PRIu64 "'s objects stay on the host", id);
			return;
		}
		r->releases = n;
		r->capreleases = cap;
	}
	r->releases[r->nreleases++] = id;
	pthread_cond_broadcast(&r->cond);
}

static void guest_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	relay *r = arg;
	uint64_t who = ev == NNG_PIPE_EV_ADD_POST ? peer_who(p) : 0;
	bool close = false;
	pthread_mutex_lock(&r->lock);
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		/* No guest takes the relay's file descriptors from the others. */
		close = r->npipes >= r->o.max_connections;
		r->refused += close;
	} else if (ev == NNG_PIPE_EV_ADD_POST) {
		guest *g = guest_of_pipe(r, (uint32_t)nng_pipe_id(p), who);
		close = !g || g->pipes > r->o.guest_conns;
		r->refused += close && g; /* its REM event undoes what guest_of_pipe counted */
	} else {
		pipe_guest **slot = pipe_slot(r, (uint32_t)nng_pipe_id(p));
		if (*slot) {
			pipe_guest *pg = *slot;
			*slot = pg->next;
			guest *g = pg->g;
			free(pg);
			r->npipes--;
			if (--g->pipes == 0) {
				guest **gp = &r->all_guests;
				while (*gp != g)
					gp = &(*gp)->next;
				*gp = g->next;
				queue_release(r, g->id);
				if (!g->inflight)
					free(g);
			}
		}
	}
	pthread_mutex_unlock(&r->lock);
	if (close)
		nng_pipe_close(p);
}

static void host_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	relay *r = arg;
	pthread_mutex_lock(&r->lock);
	r->host_pipes += ev == NNG_PIPE_EV_ADD_POST ? 1 : -1;
	if (ev == NNG_PIPE_EV_ADD_POST)
		r->host_pipe = p;
	int n = r->host_pipes;
	bool stopping = r->stopping;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	if (ev == NNG_PIPE_EV_ADD_POST) {
		logf_(GS_LOG_INFO, "connected to the host daemon at %s", r->o.host);
	} else {
		if (stopping)
			logf_(GS_LOG_INFO, "closed the link to the host daemon");
		else
			logf_(GS_LOG_WARN, "lost the link to the host daemon at %s: reconnecting",
			      r->o.host);
		if (n == 0)
			fail_all_flights(r);
	}
}

/* ---- forwarding ---- */

static uint32_t be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* One guest request: checked, marked with its guest and the VM's token, and sent on. */
static void forward(relay *r, nng_msg *m)
{
	if (nng_msg_header_len(m) < 8) {
		nng_msg_free(m);
		return;
	}
	const uint8_t *h = nng_msg_header(m);
	uint32_t pipe = be32(h), rid = be32(h + 4);
	const uint8_t *body = nng_msg_body(m);
	size_t len = nng_msg_len(m);
	uint64_t id = 0;
	bool decodes = scan_request(body, len, &id, NULL, NULL, 0) != 0;
	if (len > r->o.max_message) {
		nng_msg_free(m);
		pthread_mutex_lock(&r->lock);
		r->too_large++;
		pthread_mutex_unlock(&r->lock);
		answer(r, pipe, rid, id, GPUSCHED__V1__STATUS__STATUS_TOO_LARGE,
		       "relay: request of %zu bytes exceeds the virtual machine's max_message %u",
		       len, r->o.max_message);
		return;
	}
	if (!decodes) {
		nng_msg_free(m);
		pthread_mutex_lock(&r->lock);
		r->malformed++;
		pthread_mutex_unlock(&r->lock);
		answer(r, pipe, rid, 0, GPUSCHED__V1__STATUS__STATUS_MALFORMED,
		       "relay: request does not decode as gpusched.v1.Request");
		return;
	}
	uint64_t key = (uint64_t)pipe << 32 | rid, who = 0;
	/* A connection seen before (the usual case) needs nothing of nng; a new one is asked
	 * who is on it, without the lock. */
	pthread_mutex_lock(&r->lock);
	bool known = *pipe_slot(r, pipe) != NULL;
	pthread_mutex_unlock(&r->lock);
	if (!known) {
		nng_pipe np = NNG_PIPE_INITIALIZER;
		np.id = pipe;
		nng_sockaddr sa;
		if (nng_pipe_get_addr(np, NNG_OPT_REMADDR, &sa) != 0) {
			/* Its connection closed before its request was read: nobody to answer. */
			nng_msg_free(m);
			return;
		}
		who = peer_who(np);
	}
	pthread_mutex_lock(&r->lock);
	guest *g = guest_of_pipe(r, pipe, who);
	int status = 0;
	bool up = r->host_pipes > 0 && r->swept;
	bool full = g && (r->nflights >= MAX_INFLIGHT || g->inflight >= r->o.guest_inflight);
	if (!g || !up || full) {
		status = !g    ? GPUSCHED__V1__STATUS__STATUS_INTERNAL
		         : !up ? GPUSCHED__V1__STATUS__STATUS_UNAVAILABLE
		               : GPUSCHED__V1__STATUS__STATUS_BUSY;
		r->busy += full && up;
		r->unavailable += status == GPUSCHED__V1__STATUS__STATUS_UNAVAILABLE;
	} else {
		flight **slot = flight_slot(r, key);
		if (!*slot) {
			flight *f = calloc(1, sizeof(*f));
			if (f) {
				f->key = key;
				f->id = id;
				f->g = g;
				g->inflight++;
				*slot = f;
				r->nflights++;
			} else {
				status = GPUSCHED__V1__STATUS__STATUS_INTERNAL;
			}
		}
	}
	uint64_t gid = g ? g->id : 0;
	r->forwarded += status == 0;
	pthread_mutex_unlock(&r->lock);
	if (status) {
		nng_msg_free(m);
		answer(r, pipe, rid, id, status, "relay: %s",
		       status == GPUSCHED__V1__STATUS__STATUS_UNAVAILABLE
		               ? "no link to the host daemon now; the relay reconnects by itself"
		       : status == GPUSCHED__V1__STATUS__STATUS_BUSY
		               ? "this guest has --guest-inflight requests on the host link"
		                 " already (or the relay its maximum)"
		               : "out of memory");
		return;
	}
	/* The guest's own token and guest id are replaced: it cannot pose as the VM itself or
	 * as another guest. */
	nng_msg *out;
	int rv = nng_msg_alloc(&out, len + strlen(r->token) + 24);
	if (rv == 0) {
		size_t n = scan_request(body, len, &id, nng_msg_body(out), r->token, gid);
		rv = nng_msg_realloc(out, n);
		if (rv == 0)
			rv = nng_msg_header_append(out, nng_msg_header(m), nng_msg_header_len(m));
		nng_msg_free(m);
		m = out;
	}
	if (rv == 0)
		rv = nng_sendmsg(r->host, m, 0);
	if (rv != 0) {
		nng_msg_free(m);
		uint64_t taken;
		pthread_mutex_lock(&r->lock);
		bool mine = flight_take(r, key, &taken);
		r->unavailable += mine;
		pthread_mutex_unlock(&r->lock);
		if (mine) /* else the link's loss answered it */
			answer(r, pipe, rid, id, GPUSCHED__V1__STATUS__STATUS_UNAVAILABLE,
			       "relay: cannot send to the host daemon: %s", nng_strerror(rv));
	}
}

/* One answer from the host, back to the guest connection its routing header names. */
static void back(relay *r, nng_msg *m)
{
	/* The header holds the guest pipe and request id, or the pipe only, with the id
	 * still at the front of the body: read them from wherever nng left them. */
	uint32_t pipe = 0, rid = 0;
	bool ok = nng_msg_header_trim_u32(m, &pipe) == 0 &&
	          (nng_msg_header_trim_u32(m, &rid) == 0 || nng_msg_trim_u32(m, &rid) == 0);
	uint64_t id = 0;
	pthread_mutex_lock(&r->lock);
	ok = ok && flight_take(r, (uint64_t)pipe << 32 | rid, &id);
	r->answered += ok;
	pthread_mutex_unlock(&r->lock);
	nng_msg_header_clear(m);
	if (!ok || nng_msg_header_append_u32(m, pipe) != 0 ||
	    nng_msg_header_append_u32(m, rid) != 0 || nng_sendmsg(r->guests, m, 0) != 0)
		nng_msg_free(m); /* answered UNAVAILABLE already, or the guest has gone */
}

/* Hands every message received on `from` to fn, until the socket closes. */
static void pump(relay *r, nng_socket from, void (*fn)(relay *, nng_msg *))
{
	for (;;) {
		nng_msg *m;
		int rv = nng_recvmsg(from, &m, 0);
		if (rv == NNG_ECLOSED)
			return;
		if (rv == 0)
			fn(r, m);
	}
}

static void *forward_thread(void *arg)
{
	relay *r = arg;
	pump(r, r->guests, forward);
	return NULL;
}

static void *back_thread(void *arg)
{
	relay *r = arg;
	pump(r, r->host, back);
	return NULL;
}

/* ---- releasing guests (and the sweep at start) ---- */

static int release_one(gs_client *c, uint64_t guest_id, bool all)
{
	uint32_t devices = 0;
	int rv = all ? gs_guest_release_all(c, &devices) : gs_guest_release(c, guest_id, &devices);
	if (rv == 0) {
		if (all)
			logf_(GS_LOG_INFO, "released %u devices left by earlier runs' guests",
			      devices);
		else
			logf_(GS_LOG_INFO, "guest %" PRIu64 " has gone: released its %u devices",
			      guest_id, devices);
	}
	return rv;
}

/* Waits (lock held) until the host link is up or the relay stops, at most until deadline. */
static void wait_link(relay *r, const struct timespec *deadline)
{
	while (!r->host_pipes && !r->stopping)
		if (pthread_cond_timedwait(&r->cond, &r->lock, deadline) == ETIMEDOUT)
			break;
}

static void *release_thread(void *arg)
{
	relay *r = arg;
	gs_client *c = NULL;
	bool sweep = r->o.sweep;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		while (!sweep && !r->nreleases && !r->stopping)
			pthread_cond_wait(&r->cond, &r->lock);
		if (!sweep && !r->nreleases)
			break; /* stopping with nothing left to release */
		uint64_t id = sweep ? 0 : r->releases[0];
		int rv = -1;
		/* The sweep comes before any guest is served: it waits for the host as long as
		 * it takes. */
		while (sweep && !r->host_pipes && !r->stopping)
			pthread_cond_wait(&r->cond, &r->lock);
		for (int attempt = 0; attempt < RELEASE_TRIES && rv != 0; attempt++) {
			struct timespec deadline;
			clock_gettime(CLOCK_REALTIME, &deadline);
			deadline.tv_sec += attempt ? 1 : 5;
			wait_link(r, &deadline);
			if (r->stopping && attempt)
				break;
			/* A stop waits on the host for a second per guest at most. */
			uint32_t timeout = r->stopping ? 1000 : 5000;
			pthread_mutex_unlock(&r->lock);
			char why[256] = "";
			if (!c)
				gs_connect_ex(r->o.host, r->token, &c, why, sizeof(why));
			if (c)
				gs_client_set_timeout(c, timeout);
			rv = c ? release_one(c, id, sweep) : -1;
			if (rv != 0) {
				logf_(GS_LOG_WARN, "releasing %s%" PRIu64 " failed: %s",
				      sweep ? "earlier guests" : "guest ", id,
				      c ? gs_client_message(c) : why);
				if (c && (rv == GS_ERR_TRANSPORT || rv == GS_ERR_TIMEOUT)) {
					gs_close(c);
					c = NULL;
				}
			}
			pthread_mutex_lock(&r->lock);
			if (rv != 0 && rv != GS_ERR_TRANSPORT && rv != GS_ERR_TIMEOUT &&
			    rv != GS_STATUS_UNAVAILABLE && rv != -1)
				break; /* the daemon said no: trying again will not change that */
		}
		if (sweep) {
			sweep = false;
			r->swept = true; /* served from now on, even if the sweep failed */
			pthread_cond_broadcast(&r->cond);
			if (rv != 0)
				logf_(GS_LOG_ERROR,
				      "could not release earlier guests' objects: they stay");
			continue;
		}
		if (rv != 0)
			logf_(GS_LOG_ERROR, "guest %" PRIu64 "'s objects stay on the host: gave up",
			      id);
		else
			r->released++;
		memmove(r->releases, r->releases + 1, --r->nreleases * sizeof(*r->releases));
	}
	pthread_mutex_unlock(&r->lock);
	if (c)
		gs_close(c);
	return NULL;
}

/* ---- the host link's heartbeat ---- */

/*
 * A link that goes silent (a cable pulled, a peer that stops answering) does not close by
 * itself: TCP notices in minutes. So every --heartbeat-ms the relay asks the host for Info on a
 * connection of its own, over the same path; after two probes in a row without an answer in
 * time, the forwarding connection is closed: the requests on it are answered UNAVAILABLE and
 * nng dials again, as when the host closes it.
 */
static void *heartbeat_thread(void *arg)
{
	relay *r = arg;
	gs_client *c = NULL;
	int missed = 0;
	pthread_mutex_lock(&r->lock);
	while (!r->stopping) {
		struct timespec deadline;
		clock_gettime(CLOCK_REALTIME, &deadline);
		uint64_t ns = (uint64_t)deadline.tv_nsec + (uint64_t)r->o.heartbeat_ms * 1000000u;
		deadline.tv_sec += (time_t)(ns / 1000000000u);
		deadline.tv_nsec = (long)(ns % 1000000000u);
		while (!r->stopping &&
		       pthread_cond_timedwait(&r->cond, &r->lock, &deadline) != ETIMEDOUT)
			;
		if (r->stopping || !r->host_pipes) {
			missed = 0;
			continue;
		}
		nng_pipe link = r->host_pipe;
		pthread_mutex_unlock(&r->lock);
		/* Made while the link is up, so its dial does not wait on a dead peer. */
		char why[256] = "";
		if (!c && gs_connect_ex(r->o.host, r->token, &c, why, sizeof(why)) == 0)
			gs_client_set_timeout(c, r->o.heartbeat_ms);
		gs_daemon_info *info = NULL;
		int rv = c ? gs_info(c, &info) : GS_ERR_TRANSPORT;
		gs_info_free(info);
		/* Any answer, even a refusal, means the host is there. */
		if (rv == GS_ERR_TIMEOUT || rv == GS_ERR_TRANSPORT) {
			if (++missed >= 2) {
				logf_(GS_LOG_WARN,
				      "the host daemon did not answer two heartbeats (%u ms each):"
				      " closing the link and dialing again",
				      r->o.heartbeat_ms);
				nng_pipe_close(link);
				missed = 0; /* c stays: nng dials it again in the background */
			}
		} else {
			missed = 0;
		}
		pthread_mutex_lock(&r->lock);
	}
	pthread_mutex_unlock(&r->lock);
	if (c)
		gs_close(c);
	return NULL;
}

/* ---- start and stop ---- */

static int read_token(relay *r)
{
	const char *env = getenv("GPUSCHED_TOKEN");
	if (!r->o.token_file) {
		snprintf(r->token, sizeof(r->token), "%s", env ? env : "");
		return 0;
	}
	FILE *f = fopen(r->o.token_file, "r");
	if (!f) {
		logf_(GS_LOG_ERROR, "cannot read the token file %s: %s", r->o.token_file,
		      strerror(errno));
		return -1;
	}
	if (!fgets(r->token, sizeof(r->token), f))
		r->token[0] = '\0';
	fclose(f);
	r->token[strcspn(r->token, "\r\n")] = '\0';
	return 0;
}

static int open_sockets(relay *r)
{
	int rv = nng_rep0_open_raw(&r->guests);
	if (rv == 0)
		rv = nng_req0_open_raw(&r->host);
	if (rv != 0) {
		logf_(GS_LOG_ERROR, "cannot open sockets: %s", nng_strerror(rv));
		return -1;
	}
	/* Room for a request twice the limit, so one a little over it is read and answered
	 * TOO_LARGE; far beyond, nng drops the connection unread. */
	nng_socket_set_size(r->guests, NNG_OPT_RECVMAXSZ, 2 * (size_t)r->o.max_message + 65536);
	nng_socket_set_size(r->host, NNG_OPT_RECVMAXSZ, GS_MAX_RESPONSE_SIZE);
	nng_socket_set_ms(r->host, NNG_OPT_SENDTIMEO, 1000);
	nng_socket_set_ms(r->host, NNG_OPT_RECONNMINT, 100);
	nng_socket_set_ms(r->host, NNG_OPT_RECONNMAXT, 2000);
	nng_pipe_notify(r->guests, NNG_PIPE_EV_ADD_PRE, guest_pipe_event, r);
	nng_pipe_notify(r->guests, NNG_PIPE_EV_ADD_POST, guest_pipe_event, r);
	nng_pipe_notify(r->guests, NNG_PIPE_EV_REM_POST, guest_pipe_event, r);
	nng_pipe_notify(r->host, NNG_PIPE_EV_ADD_POST, host_pipe_event, r);
	nng_pipe_notify(r->host, NNG_PIPE_EV_REM_POST, host_pipe_event, r);
	char why[256] = "";
	rv = gsc_dial(r->host, r->o.host, NULL, NNG_FLAG_NONBLOCK, NULL, why, sizeof(why));
	if (rv != 0) {
		logf_(GS_LOG_ERROR, "cannot dial the host daemon: %s",
		      why[0] ? why : nng_strerror(rv));
		return -1;
	}
	nng_listener l;
	rv = nng_listener_create(&l, r->guests, r->o.listen);
	if (rv == 0 && strncmp(r->o.listen, "ipc://", 6) == 0)
		rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, (int)r->o.mode);
	if (rv == 0)
		rv = nng_listener_start(l, 0);
	if (rv != 0) {
		logf_(GS_LOG_ERROR, "cannot listen on %s: %s", r->o.listen, nng_strerror(rv));
		return -1;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: gpusched-relay [options]\n"
	        "Forwards the requests of a virtual machine's guest processes to the host's\n"
	        "gpuschedd as one VM tenant, each request marked with its guest process, whose\n"
	        "objects the daemon keeps apart from every other guest's.\n"
	        "\n"
	        "  --listen URL       where guest processes connect (default: the client's\n"
	        "                     default URL, so guests need no setting)\n"
	        "  --host URL         the host daemon, tls+tcp://HOST:PORT in production; the CA "
	        "and\n"
	        "                     the VM's certificate come from $GPUSCHED_TLS_CA and\n"
	        "                     $GPUSCHED_TLS_CERT_KEY (required); the daemon's\n"
	        "                     certificate must be for HOST when it is a DNS name, or\n"
	        "                     for $GPUSCHED_TLS_SERVER_NAME\n"
	        "  --token-file FILE  the VM tenant's token (default: $GPUSCHED_TOKEN)\n"
	        "  --max-message N    largest request forwarded, bytes (default %u, the\n"
	        "                     paravirtual path's limit); larger ones are answered "
	        "TOO_LARGE\n"
	        "  --mode OCTAL       permissions of an ipc:// socket (default 0600)\n"
	        "  --no-sweep         at start, leave what earlier relays' guests left on the "
	        "host\n"
	        "                     (by default it is released: one relay per VM tenant)\n"
	        "  --wait-host S      at start, wait up to S seconds (default 10) for the host\n"
	        "                     before saying ready; guests are answered UNAVAILABLE until\n"
	        "                     it is reached\n"
	        "  --max-connections N  guest connections at once (default 1024); more are closed\n"
	        "  --guest-connections N  one guest process's connections at once (default 64)\n"
	        "  --guest-inflight N   one guest's requests on the host link at once (default\n"
	        "                     1024); more are answered BUSY, so one guest cannot take the\n"
	        "                     link from the others\n"
	        "  --heartbeat-ms N   probe the host link every N ms (default 5000, 0: never);\n"
	        "                     after two probes unanswered in time the link is closed,\n"
	        "                     its requests answered UNAVAILABLE, and dialed again\n"
	        "  --log-level L      error, warn, info (default) or debug\n"
	        "  -V, --version      show the version\n"
	        "  -h, --help         this text\n"
	        "\n"
	        "Prints one line containing \"ready\" on stdout once guests can connect. Stops on\n"
	        "SIGINT or SIGTERM, releasing its guests' objects first.\n"
	        "Exit codes: 0 stopped, 1 cannot start, 2 usage.\n",
	        DEFAULT_MAX_MESSAGE);
}

/* The options that set a member of options, in getopt_long's table in this order: a string
 * (base 0), or a number in that base and range (0 allowed besides it when zero_ok). */
static const struct value_option {
	int ch;
	const char *name;
	int base;
	unsigned long long lo, hi;
	bool zero_ok;
	size_t at;
} value_options[] = {
        {'l', "listen", 0, 0, 0, false, offsetof(options, listen)},
        {'H', "host", 0, 0, 0, false, offsetof(options, host)},
        {'t', "token-file", 0, 0, 0, false, offsetof(options, token_file)},
        {'m', "max-message", 10, 1024, 64u << 20, false, offsetof(options, max_message)},
        {'M', "mode", 8, 0, 0777, false, offsetof(options, mode)},
        {'w', "wait-host", 10, 0, 3600, false, offsetof(options, wait_host_s)},
        {'C', "max-connections", 10, 1, MAX_INFLIGHT, false, offsetof(options, max_connections)},
        {'G', "guest-inflight", 10, 1, MAX_INFLIGHT, false, offsetof(options, guest_inflight)},
        {'g', "guest-connections", 10, 1, MAX_INFLIGHT, false, offsetof(options, guest_conns)},
        {'B', "heartbeat-ms", 10, 100, 600000, true, offsetof(options, heartbeat_ms)},
};

/* Sets the option ch from arg: 0; -1 (said why) when a number is out of its range, or 1
 * when ch is not one of value_options. */
static int parse_value(int ch, const char *arg, options *o)
{
	for (size_t i = 0; i < COUNT(value_options); i++) {
		const struct value_option *n = &value_options[i];
		if (n->ch != ch)
			continue;
		if (n->base == 0) {
			*(const char **)((char *)o + n->at) = arg;
			return 0;
		}
		char *end = NULL;
		errno = 0;
		unsigned long long v = strtoull(arg, &end, n->base);
		if (errno || !*arg || *end || arg[0] == '-' ||
		    ((v < n->lo || v > n->hi) && !(n->zero_ok && v == 0))) {
			if (n->base == 8)
				fprintf(stderr, "gpusched-relay: --%s takes octal %llo..%llo\n",
				        n->name, n->lo, n->hi);
			else
				fprintf(stderr, "gpusched-relay: --%s takes %s%llu..%llu\n",
				        n->name, n->zero_ok ? "0 or " : "", n->lo, n->hi);
			return -1;
		}
		*(uint32_t *)((char *)o + n->at) = (uint32_t)v;
		return 0;
	}
	return 1;
}

static int parse_args(int argc, char **argv, options *o, char *listen_buf, size_t cap)
{
	/* getopt_long's table: value_options', then the others. */
	static const struct option others[] = {
	        {"no-sweep", no_argument, NULL, 'S'},
	        {"log-level", required_argument, NULL, 'L'},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	};
	struct option longs[COUNT(value_options) + COUNT(others) + 1] = {{0}};
	for (size_t i = 0; i < COUNT(value_options); i++)
		longs[i] = (struct option){value_options[i].name, required_argument, NULL,
		                           value_options[i].ch};
	memcpy(longs + COUNT(value_options), others, sizeof(others));
	*o = (options){.max_message = DEFAULT_MAX_MESSAGE,
	               .mode = 0600,
	               .wait_host_s = 10,
	               .max_connections = 1024,
	               .guest_inflight = 1024,
	               .guest_conns = 64,
	               .heartbeat_ms = 5000,
	               .log_level = GS_LOG_INFO,
	               .sweep = true};
	int ch;
	int rv;
	while ((ch = getopt_long(argc, argv, "hV", longs, NULL)) != -1) {
		switch (ch) {
		case 'S':
			o->sweep = false;
			break;
		case 'L':
			o->log_level = gs_log_parse_level(optarg);
			if (o->log_level < 0) {
				fprintf(stderr, "gpusched-relay: unknown log level %s\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("gpusched-relay %s\n", GS_VERSION);
			exit(0);
		default:
			rv = parse_value(ch, optarg, o);
			if (rv == 0)
				break;
			if (rv > 0)
				usage(stderr);
			return 2;
		}
	}
	if (optind < argc || !o->host) {
		fprintf(stderr, "gpusched-relay: %s\n",
		        optind < argc ? "unexpected arguments" : "--host URL is required");
		usage(stderr);
		return 2;
	}
	if (!o->listen) {
		if (gs_default_url(listen_buf, cap) != 0)
			return 2;
		o->listen = listen_buf;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static relay r; /* large tables: not on the stack */
	char listen_buf[512];
	int rc = parse_args(argc, argv, &r.o, listen_buf, sizeof(listen_buf));
	if (rc)
		return rc;
	g_level = r.o.log_level;
	/* Every thread, nng's included, inherits the mask: the signals come to sigwait only. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if (read_token(&r) != 0)
		return 1;
	uint32_t epoch = 0;
	while (epoch == 0)
		if (getrandom(&epoch, sizeof(epoch), 0) != (ssize_t)sizeof(epoch))
			return 1;
	r.epoch = epoch;
	r.swept = !r.o.sweep;
	pthread_mutex_init(&r.lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_cond_init(&r.cond, &ca);
	if (open_sockets(&r) != 0)
		return 1;
	pthread_t fwd, back, rel, beat;
	pthread_create(&fwd, NULL, forward_thread, &r);
	pthread_create(&back, NULL, back_thread, &r);
	pthread_create(&rel, NULL, release_thread, &r);
	if (r.o.heartbeat_ms)
		pthread_create(&beat, NULL, heartbeat_thread, &r);
	/* Ready once guests are served, if the host answers in time. */
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += r.o.wait_host_s;
	pthread_mutex_lock(&r.lock);
	while (!(r.host_pipes && r.swept) &&
	       pthread_cond_timedwait(&r.cond, &r.lock, &deadline) != ETIMEDOUT)
		;
	bool up = r.host_pipes && r.swept;
	pthread_mutex_unlock(&r.lock);
	if (!up)
		logf_(GS_LOG_WARN,
		      "the host daemon at %s is not reached yet: guests are answered"
		      " UNAVAILABLE until it is",
		      r.o.host);
	logf_(GS_LOG_INFO, "guests on %s, host %s, max_message %u", r.o.listen, r.o.host,
	      r.o.max_message);
	printf("gpusched-relay ready on %s\n", r.o.listen);
	fflush(stdout);

	int sig = 0;
	do
		sigwait(&sigs, &sig);
	while (sig == SIGPIPE);
	logf_(GS_LOG_INFO, "stopping on signal %d", sig);
	/* No more guests: closing their socket removes their connections, which queues the
	 * release of every guest; the release thread sends them while the link allows. */
	nng_close(r.guests);
	pthread_join(fwd, NULL);
	pthread_mutex_lock(&r.lock);
	r.stopping = true;
	pthread_cond_broadcast(&r.cond);
	pthread_mutex_unlock(&r.lock);
	pthread_join(rel, NULL);
	if (r.o.heartbeat_ms)
		pthread_join(beat, NULL);
	nng_close(r.host);
	pthread_join(back, NULL);
	fail_all_flights(&r); /* nobody to answer now: frees the entries */
	logf_(GS_LOG_INFO,
	      "stopped: %" PRIu64 " requests forwarded, %" PRIu64 " answered, %" PRIu64
	      " UNAVAILABLE, %" PRIu64 " BUSY, %" PRIu64 " TOO_LARGE, %" PRIu64
	      " malformed, %" PRIu64 " connections refused, %" PRIu64 " guests released",
	      r.forwarded, r.answered, r.unavailable, r.busy, r.too_large, r.malformed, r.refused,
	      r.released);
	free(r.releases);
	for (uint32_t b = 0; b < NBUCKETS; b++)
		while (r.pipes[b]) {
			pipe_guest *pg = r.pipes[b];
			r.pipes[b] = pg->next;
			free(pg);
		}
	while (r.all_guests) {
		guest *g = r.all_guests;
		r.all_guests = g->next;
		free(g);
	}
	pthread_cond_destroy(&r.cond);
	pthread_mutex_destroy(&r.lock);
	return 0;
}
