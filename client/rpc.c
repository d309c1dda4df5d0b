/*
 * The client object and its connection: every public call builds its request body and hands
 * it to gsc_call or one of the start calls of async.c, which own the envelope, the transport
 * and the checks.
 */
#include "rpc.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "defaults.h"

/* Longest URL accepted; a sun_path of an ipc:// URL is shorter still. */
#define GS_URL_MAX 512

static void note(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void note(char *why, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (!why || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, cap, fmt, ap);
	va_end(ap);
}

int gsc_nng_error(int rv)
{
	switch (rv) {
	case NNG_ETIMEDOUT:
		return GS_ERR_TIMEOUT;
	case NNG_ENOMEM:
		return GS_ERR_NOMEM;
	case NNG_ECANCELED:
	case NNG_ECLOSED:
		return GS_ERR_CANCELLED;
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP:
	case NNG_EINVAL:
		return GS_ERR_INVALID;
	default:
		return GS_ERR_TRANSPORT;
	}
}

/*
 * The name the daemon's certificate must carry, into name (empty: none): `given` (else
 * $GPUSCHED_TLS_SERVER_NAME), else the URL's host when it is a DNS name. Without a name any
 * certificate from the CA would do, so anyone holding one (another VM's, where one CA signs both)
 * could pose as the daemon. The TLS library nng uses here (mbedTLS 2.28) matches DNS names only,
 * not IP addresses: a host given as an IP address is checked against the CA alone unless the
 * variable names the certificate's DNS name.
 */
static void server_name(const char *url, const char *given, char *name, size_t cap)
{
	const char *env = given ? given : getenv(GS_ENV_TLS_SERVER_NAME);
	if (env && env[0]) {
		snprintf(name, cap, "%s", env);
		return;
	}
	/* The host follows the scheme, whichever it is (tls+tcp://, tls+tcp4://, tls+tcp6://). */
	const char *h = strstr(url, "://");
	h = h ? h + 3 : url + strlen(url);
	size_t n = strcspn(h, ":/");
	bool ip = h[0] == '[' || n == 0;
	if (!ip) {
		ip = true;
		for (size_t i = 0; i < n && ip; i++)
			ip = (h[i] >= '0' && h[i] <= '9') || h[i] == '.';
	}
	snprintf(name, cap, "%.*s", ip ? 0 : (int)n, h);
}

/* A field of tls, else the environment variable. */
static const char *tls_field(const char *given, const char *env)
{
	return given ? given : getenv(env);
}

int gsc_dial(nng_socket s, const char *url, const gsc_tls *tls, int flags, nng_dialer *out,
             char *why, size_t cap)
{
	static const gsc_tls from_env;
	if (strncmp(url, "tls+", 4) != 0) {
		int rv = nng_dial(s, url, out, flags);
		if (rv != 0)
			note(why, cap, "%s: %s", url, nng_strerror(rv));
		return rv;
	}
	if (!tls)
		tls = &from_env;
	const char *ca = tls_field(tls->ca, GS_ENV_TLS_CA);
	const char *cert = tls_field(tls->cert_key, GS_ENV_TLS_CERT_KEY);
	if (!ca || !ca[0]) {
		note(why, cap,
		     "%s: tls+tcp needs a CA, the one that signed the daemon's certificate (%s)",
		     url, GS_ENV_TLS_CA);
		return NNG_EINVAL;
	}
	nng_tls_config *tc;
	nng_dialer d;
	int rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_CLIENT);
	if (rv != 0) {
		note(why, cap, "tls: %s", nng_strerror(rv));
		return rv;
	}
	const char *what = ca;
	char name[256];
	server_name(url, tls->server_name, name, sizeof(name));
	rv = nng_tls_config_ca_file(tc, ca);
	if (rv == 0)
		rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_REQUIRED);
	if (rv == 0 && name[0]) {
		what = name;
		rv = nng_tls_config_server_name(tc, name);
	}
	if (rv == 0 && cert && cert[0]) {
		what = cert;
		rv = nng_tls_config_cert_key_file(tc, cert, NULL);
	}
	if (rv != 0) {
		note(why, cap, "tls: %s: %s", what, nng_strerror(rv));
		nng_tls_config_free(tc);
		return rv;
	}
	what = url;
	rv = nng_dialer_create(&d, s, url);
	bool made = rv == 0;
	if (rv == 0)
		rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tc);
	nng_tls_config_free(tc); /* the dialer holds its own reference */
	if (rv == 0)
		rv = nng_dialer_start(d, flags);
	if (rv != 0) {
		note(why, cap, "%s: %s", what, nng_strerror(rv));
		if (made)
			nng_dialer_close(d);
		return rv;
	}
	if (out)
		*out = d;
	return 0;
}

/*
 * A dial bounded by the client's timeout: nng's blocking dial waits for its handshake (10 s
 * for a peer that accepts and never answers) or the system's TCP connect (minutes for an
 * address that drops packets). A watchdog thread closes the socket at the deadline, which ends
 * the dial; the dialing thread joins it either way, so nothing outlives the call.
 */
typedef struct dial_watch {
	pthread_mutex_t m;
	pthread_cond_t cv;
	nng_socket sock;
	struct timespec deadline;
	bool done, fired;
} dial_watch;

static void *watchdog(void *arg)
{
	dial_watch *w = arg;
	pthread_mutex_lock(&w->m);
	while (!w->done)
		if (pthread_cond_timedwait(&w->cv, &w->m, &w->deadline) == ETIMEDOUT && !w->done) {
			w->fired = true;
			nng_close(w->sock);
			break;
		}
	pthread_mutex_unlock(&w->m);
	return NULL;
}

static int open_socket(gs_client *c, const gsc_tls *tls, char *why, size_t why_cap)
{
	int rv = nng_req0_open(&c->sock);

	if (rv != 0) {
		note(why, why_cap, "cannot open a REQ socket: %s", nng_strerror(rv));
		return gsc_nng_error(rv);
	}
	/* A reply may carry up to 64 MiB of allocation contents or history; nng's default limit
	 * is the transport's, which differs between ipc and tcp. */
	rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, GS_MAX_RESPONSE_SIZE);
	/* REQ resends a request that got no reply within the resend time (default 1 min). A
	 * resent Submit would queue the packet twice and a wait may legitimately last longer,
	 * so never resend: a lost reply surfaces as GS_ERR_TIMEOUT instead. */
	if (rv == 0)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if (rv != 0) {
		note(why, why_cap, "%s: %s", c->url, nng_strerror(rv));
		nng_close(c->sock);
		return gsc_nng_error(rv);
	}
	dial_watch w = {.sock = c->sock};
	pthread_t t;
	pthread_condattr_t ca;
	bool watched = pthread_mutex_init(&w.m, NULL) == 0;
	if (watched) {
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		watched = pthread_cond_init(&w.cv, &ca) == 0;
		pthread_condattr_destroy(&ca);
		if (!watched)
			pthread_mutex_destroy(&w.m);
	}
	if (watched) {
		clock_gettime(CLOCK_MONOTONIC, &w.deadline);
		w.deadline.tv_sec += c->timeout_ms / 1000;
		w.deadline.tv_nsec += (long)(c->timeout_ms % 1000) * 1000000L;
		if (w.deadline.tv_nsec >= 1000000000L) {
			w.deadline.tv_sec++;
			w.deadline.tv_nsec -= 1000000000L;
		}
		if (pthread_create(&t, NULL, watchdog, &w) != 0) {
			pthread_cond_destroy(&w.cv);
			pthread_mutex_destroy(&w.m);
			watched = false; /* dialled unbounded, as before */
		}
	}
	rv = gsc_dial(c->sock, c->url, tls, 0, NULL, why, why_cap);
	bool fired = false;
	if (watched) {
		pthread_mutex_lock(&w.m);
		w.done = true;
		fired = w.fired;
		pthread_cond_signal(&w.cv);
		pthread_mutex_unlock(&w.m);
		pthread_join(t, NULL);
		pthread_cond_destroy(&w.cv);
		pthread_mutex_destroy(&w.m);
	}
	if (fired) {
		note(why, why_cap, "%s: no connection within %u ms", c->url, c->timeout_ms);
		return GS_ERR_TIMEOUT; /* the watchdog closed the socket */
	}
	if (rv != 0) {
		nng_close(c->sock);
		return gsc_nng_error(rv);
	}
	return 0;
}

int gs_connect_with(const gs_connect_options *opts, gs_client **out, char *why, size_t why_cap)
{
	char default_url[GS_URL_MAX];
	gs_connect_options o = {0};
	gs_client *c;
	int rv;

	note(why, why_cap, "%s", "");
	if (!out)
		return GS_ERR_INVALID;
	*out = NULL;
	if (!opts || opts->size == 0) {
		note(why, why_cap, "no options (or their size 0)");
		return GS_ERR_INVALID;
	}
	gsc_connect_options_copy(opts, &o);
	const char *url = o.url, *token = o.token;
	gsc_tls tls = {
	        .ca = o.tls_ca, .cert_key = o.tls_cert_key, .server_name = o.tls_server_name};
	if (!url || !url[0]) {
		if (gs_default_url(default_url, sizeof(default_url)) != 0) {
			note(why, why_cap, "the default URL is longer than %d bytes", GS_URL_MAX);
			return GS_ERR_INVALID;
		}
		url = default_url;
	}
	if (!token)
		token = getenv(GS_ENV_TOKEN);
	/* $GPUSCHED_URL may list several hosts, for gpusched and gs_hosts_connect. */
	if (strpbrk(url, ", \t\n")) {
		note(why, why_cap,
		     "'%s' is a list of URLs: connect to one (several: gs_hosts_connect)", url);
		return GS_ERR_INVALID;
	}

	c = calloc(1, sizeof(*c));
	if (!c)
		return GS_ERR_NOMEM;
	c->url = strdup(url);
	c->token = gsc_strdup0(token);
	c->timeout_ms = o.timeout_ms ? o.timeout_ms : GS_DEFAULT_TIMEOUT_MS;
	c->adapter = o.adapter;
	c->io_piece = GS_IO_PIECE;
	if (!c->url || !c->token) {
		rv = GS_ERR_NOMEM;
		goto fail;
	}
	rv = open_socket(c, &tls, why, why_cap);
	if (rv != 0)
		goto fail;
	rv = gsc_async_init(c);
	if (rv != 0) {
		note(why, why_cap, "cannot watch the connection: %s", nng_strerror(rv));
		gsc_async_close(c); /* closes the socket */
		rv = gsc_nng_error(rv);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	free(c->url);
	free(c->token);
	free(c);
	return rv;
}

int gs_connect_ex(const char *url, const char *token, gs_client **out, char *why, size_t why_cap)
{
	gs_connect_options o = {.size = sizeof(o), .url = url, .token = token};

	return gs_connect_with(&o, out, why, why_cap);
}

int gs_connect(const char *url, const char *token, gs_client **out)
{
	return gs_connect_ex(url, token, out, NULL, 0);
}

void gs_close(gs_client *c)
{
	if (!c)
		return;
	gsc_async_close(c); /* closes the socket too */
	free(c->url);
	free(c->token);
	free(c);
}

/* A NULL client (a failed connect's) is harmless everywhere: setters do nothing, getters
 * answer a default, calls GS_ERR_INVALID. */
void gs_client_set_adapter(gs_client *c, uint32_t adapter)
{
	if (c)
		c->adapter = adapter;
}

uint32_t gs_client_adapter(const gs_client *c)
{
	return c ? c->adapter : 0;
}

void gs_client_set_timeout(gs_client *c, uint32_t timeout_ms)
{
	if (c)
		c->timeout_ms = timeout_ms ? timeout_ms : GS_DEFAULT_TIMEOUT_MS;
}

void gs_client_set_io_piece(gs_client *c, size_t bytes)
{
	if (c)
		c->io_piece = bytes;
}

const char *gs_client_message(const gs_client *c)
{
	return c ? c->message : "";
}

const char *gs_client_url(const gs_client *c)
{
	return c ? c->url : "";
}

void gsc_connect_options_copy(const gs_connect_options *in, gs_connect_options *out)
{
	/* An older caller's smaller struct: the fields it lacks stay 0 (their defaults). A size
	 * that ends inside a field leaves that field out too: half a pointer is not one. */
	*out = (gs_connect_options){.size = sizeof(*out)};
	size_t n = in && in->size < sizeof(*in) ? in->size : sizeof(*in);
	if (!in)
		return;
#define GSC_OPT(f)                                                                                 \
	if (offsetof(gs_connect_options, f) + sizeof(in->f) <= n)                                  \
	out->f = in->f
	GSC_OPT(url);
	GSC_OPT(token);
	GSC_OPT(tls_ca);
	GSC_OPT(tls_cert_key);
	GSC_OPT(tls_server_name);
	GSC_OPT(timeout_ms);
	GSC_OPT(adapter);
#undef GSC_OPT
}

char *gsc_strdup0(const char *s)
{
	return strdup(s ? s : "");
}

int gsc_fail(gs_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (!c)
		return GS_ERR_INVALID;
	va_start(ap, fmt);
	vsnprintf(c->message, sizeof(c->message), fmt, ap);
	va_end(ap);
	return err;
}

void gsc_free_list(const gsc_entry_kind *kind, void *list, size_t count)
{
	if (!list)
		return;
	for (size_t i = 0; i < count; i++)
		for (size_t k = 0; k < kind->nstrings; k++)
			free(*(char **)((char *)list + i * kind->size + kind->strings[k].entry));
	free(list);
}

int gsc_copy_entry(const gsc_entry_kind *kind, void *entry, const ProtobufCMessage *msg)
{
	kind->copy(entry, msg);
	for (size_t k = 0; k < kind->nstrings; k++) {
		const gsc_string *s = &kind->strings[k];
		char **dst = (char **)((char *)entry + s->entry);

		*dst = gsc_strdup0(*(char *const *)((const char *)msg + s->msg));
		if (!*dst)
			return GS_ERR_NOMEM;
	}
	return 0;
}

int gsc_copy_list(gs_client *c, const gsc_entry_kind *kind, ProtobufCMessage *const *msgs, size_t n,
                  void **list, size_t *count)
{
	char *out = NULL;
	size_t i = 0;
	int rv = 0;

	*list = NULL;
	*count = 0;
	if (n) {
		out = calloc(n, kind->size);
		if (!out)
			rv = GS_ERR_NOMEM;
	}
	for (; rv == 0 && i < n; i++)
		rv = gsc_copy_entry(kind, out + i * kind->size, msgs[i]);
	if (rv != 0) {
		/* i counts the entry whose copy failed, so its partial strings go too. */
		gsc_free_list(kind, out, i);
		return gsc_fail(c, rv, "out of memory copying the %s", kind->what);
	}
	*list = out;
	*count = n;
	return 0;
}

/* The member of a message that a field descriptor names. */
static const void *member(const ProtobufCMessage *m, size_t offset)
{
	return (const char *)m + offset;
}

const ProtobufCMessage *gsc_answer(const Gpusched__V1__Response *resp,
                                   Gpusched__V1__Response__BodyCase want)
{
	/* A body case is the number of its oneof member's field. */
	const ProtobufCFieldDescriptor *f =
	        protobuf_c_message_descriptor_get_field(&gpusched__v1__response__descriptor, want);

	return *(ProtobufCMessage *const *)member(&resp->base, f->offset);
}

int gsc_call_list(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body,
                  Gpusched__V1__Response__BodyCase want, const gsc_entry_kind *kind, void **list,
                  size_t *count)
{
	const ProtobufCFieldDescriptor *f;
	const ProtobufCMessage *answer;
	Gpusched__V1__Response *resp;
	int rv;

	*list = NULL;
	*count = 0;
	rv = gsc_call(c, req_case, body, want, 0, &resp);
	if (rv != 0)
		return rv;
	/* The list is the answer's repeated field kind->field: an array of message pointers
	 * and its length. */
	answer = gsc_answer(resp, want);
	f = protobuf_c_message_descriptor_get_field_by_name(answer->descriptor, kind->field);
	if (f && f->label == PROTOBUF_C_LABEL_REPEATED && f->type == PROTOBUF_C_TYPE_MESSAGE)
		rv = gsc_copy_list(
		        c, kind, *(ProtobufCMessage *const *const *)member(answer, f->offset),
		        *(const size_t *)member(answer, f->quantifier_offset), list, count);
	else
		rv = gsc_fail(c, GS_ERR_PROTOCOL, "the answer has no list '%s'", kind->field);
	gsc_response_free(resp);
	return rv;
}

int gsc_call_copy(gs_client *c, Gpusched__V1__Request__BodyCase req_case, void *body,
                  Gpusched__V1__Response__BodyCase want,
                  void (*copy)(void *out, const ProtobufCMessage *answer), void *out)
{
	Gpusched__V1__Response *resp;
	int rv = gsc_call(c, req_case, body, want, 0, &resp);

	if (rv == 0 && out)
		copy(out, gsc_answer(resp, want));
	gsc_response_free(resp); /* NULL after a failed call */
	return rv;
}

void gsc_response_free(Gpusched__V1__Response *resp)
{
	if (resp)
		gpusched__v1__response__free_unpacked(resp, NULL);
}
