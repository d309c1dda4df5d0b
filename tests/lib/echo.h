/*
 * The baseline the benchmarks measure the daemon against: a raw nng REQ/REP echo server served
 * the way the daemon serves requests (one REP socket, a number of nng contexts, aio callbacks
 * on nng's threads), each received message sent straight back on its context.
 */
#ifndef GS_TEST_ECHO_H
#define GS_TEST_ECHO_H

#include <stdbool.h>

#include <nng/nng.h>

typedef struct gs_echo_worker {
	nng_ctx ctx;
	nng_aio *aio;
	bool sending;
} gs_echo_worker;

typedef struct gs_echo_server {
	nng_socket sock;
	int nworkers;
	gs_echo_worker *workers;
} gs_echo_server;

/* Listens on every url with nworkers contexts receiving; 0 or an nng error (said on stderr). */
int gs_echo_start(gs_echo_server *e, const char *const *urls, int nurls, int nworkers);
void gs_echo_stop(gs_echo_server *e);

#endif
