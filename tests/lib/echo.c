#include "echo.h"

#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs on nng's threads: a received message goes straight back on the same context. */
static void echo_cb(void *arg)
{
	gs_echo_worker *w = arg;
	int rv = nng_aio_result(w->aio);
	if (w->sending) {
		w->sending = false;
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(w->aio));
			nng_aio_set_msg(w->aio, NULL);
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
				return;
		}
		nng_ctx_recv(w->ctx, w->aio);
		return;
	}
	if (rv != 0) {
		if (rv != NNG_ECLOSED && rv != NNG_ECANCELED)
			nng_ctx_recv(w->ctx, w->aio);
		return;
	}
	w->sending = true;
	nng_ctx_send(w->ctx, w->aio); /* the received message is still on the aio */
}

int gs_echo_start(gs_echo_server *e, const char *const *urls, int nurls, int nworkers)
{
	memset(e, 0, sizeof(*e));
	int rv = nng_rep0_open(&e->sock);
	if (rv != 0)
		return rv;
	nng_socket_set_size(e->sock, NNG_OPT_RECVMAXSZ, 1u << 20);
	for (int i = 0; i < nurls; i++) {
		rv = nng_listen(e->sock, urls[i], NULL, 0);
		if (rv != 0) {
			fprintf(stderr, "bench: echo server cannot listen on %s: %s\n", urls[i],
			        nng_strerror(rv));
			nng_close(e->sock);
			return rv;
		}
	}
	e->workers = calloc((size_t)nworkers, sizeof(*e->workers));
	if (!e->workers) {
		nng_close(e->sock);
		return NNG_ENOMEM;
	}
	for (int i = 0; i < nworkers; i++) {
		gs_echo_worker *w = &e->workers[i];
		rv = nng_ctx_open(&w->ctx, e->sock);
		if (rv == 0)
			rv = nng_aio_alloc(&w->aio, echo_cb, w);
		if (rv != 0)
			break;
		e->nworkers++;
		nng_ctx_recv(w->ctx, w->aio);
	}
	if (rv != 0)
		gs_echo_stop(e);
	return rv;
}

void gs_echo_stop(gs_echo_server *e)
{
	for (int i = 0; i < e->nworkers; i++)
		nng_aio_stop(e->workers[i].aio);
	nng_close(e->sock);
	for (int i = 0; i < e->nworkers; i++) {
		nng_msg_free(nng_aio_get_msg(e->workers[i].aio));
		nng_aio_free(e->workers[i].aio);
	}
	free(e->workers);
	e->workers = NULL;
	e->nworkers = 0;
}
