/*
 * Helpers shared by the integration tests (tests/integration/test_*.c): connecting to a test
 * daemon, the adapter's layout, contexts with the right paging companion, an audit barrier,
 * read-only queries of the audit file, temporary configuration files and a bounded child
 * process runner.
 *
 * Helpers that "must" succeed fail the calling cmocka test (fail_msg) when they do not.
 */
#ifndef GS_ITEST_H
#define GS_ITEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpusched.h"
#include "testd.h"

/* Base timeout of the helpers' clients: long enough for an ASan daemon on a busy machine. */
#define ITEST_TIMEOUT_MS 20000u

/* Connects to the daemon of t with `token` (NULL or "" = the default tenant). */
gs_client *itest_connect(const gs_testd *t, const char *token);

/* What the tests need to know about adapter 0. */
typedef struct itest_layout {
	uint32_t nodes;
	uint32_t paging_node;      /* the node flagged as the default paging companion */
	uint32_t memory_segment;   /* id of the first memory segment (0 if none) */
	uint32_t aperture_segment; /* id of the first aperture segment (0 if none) */
	uint32_t segment_set;      /* bit (id) of every segment */
	uint32_t max_dma_buffer;
} itest_layout;

void itest_layout_of(gs_client *c, itest_layout *out);

/* Creates a context on `node` whose paging companion is `paging_node` (initial DMA buffer
 * 4 KiB, otherwise gs_context_desc_init's defaults); must succeed. */
uint64_t itest_context(gs_client *c, uint64_t device, uint32_t node, uint32_t paging_node);

/* Creates an allocation; must succeed. */
void itest_alloc(gs_client *c, uint64_t device, uint64_t size, uint32_t supported_set,
                 uint32_t preference, gs_allocation_placement *out);

/*
 * Audit barrier. The daemon writes audit records in one FIFO queue and answers a Submit only
 * once its SUBMITTED record is committed, so when this NullRendering NOP on `context` is
 * acknowledged, every record the daemon queued before it (errors, transitions) is in the file.
 * Returns the barrier's packet id.
 */
uint64_t itest_audit_barrier(gs_client *c, uint64_t context);

/* Submits and waits for COMPLETED; returns the packet id. */
uint64_t itest_submit_wait(gs_client *c, uint64_t context, const gs_dmabuf *dma, uint32_t flags);

/* ---- the audit file, read-only ---- */

/* Runs a query whose first column of the first row is an integer; -1 when it fails or
 * returns no row. The format is printf-style. */
int64_t itest_audit_int(const char *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Rows of the `errors` table. */
int64_t itest_audit_errors(const char *db);
/* The audit file's number for a wire value a client was shown (core/wire_id.h), with the key in
 * the file's meta: domain "packet", "seq", "events" (an EventsWait cursor: a position in the
 * daemon's event ring), or "fence" (then adapter and node name its node). */
uint64_t itest_wire_unmap(const char *db, const char *domain, uint32_t adapter, uint32_t node,
                          uint64_t wire);
/* Status of the newest `errors` row (-1 if none). */
int64_t itest_audit_last_error_status(const char *db);

/* ---- temporary configuration files ---- */

typedef struct itest_config {
	char dir[256];
	char path[320];
} itest_config;

/* Writes `json` to a new temporary directory's config.json. Returns 0 or -1. */
int itest_config_write(itest_config *cfg, const char *json);
void itest_config_cleanup(itest_config *cfg);

/* ---- child processes ---- */

typedef struct itest_run {
	int exit_code; /* exit status, 128 + signal, or -1 when it did not finish in time */
	char *out;     /* stdout, NUL-terminated, malloc'd */
	char *err;     /* stderr, NUL-terminated, malloc'd */
} itest_run;

/* Runs argv (argv[0] is the path) with stdin from /dev/null, collecting stdout and stderr;
 * a child still running after timeout_ms is killed. */
void itest_run_argv(char *const argv[], int timeout_ms, itest_run *out);
void itest_run_free(itest_run *r);

/* ---- raw requests ---- */

/* A raw REQ connection to an ipc:// URL, past the SP handshake (5 s send and receive
 * timeouts); -1 on failure. */
int itest_raw_ipc_peer(const char *url);
/* Sends one SP message on it: the request id (end bit set) and body. False when the
 * connection is gone (no SIGPIPE) or the send timed out. */
bool itest_raw_send(int fd, uint32_t id, const void *body, size_t len);

typedef struct Gpusched__V1__Request Gpusched__V1__Request;
typedef struct Gpusched__V1__Response Gpusched__V1__Response;
/* Encodes a request (malloc'd; *len set). */
void *itest_pack(const Gpusched__V1__Request *req, size_t *len);
/* Sends raw bytes on a fresh REQ socket and decodes the answer into *out (free it with
 * gpusched__v1__response__free_unpacked). Returns 0, or the nng error. */
int itest_raw_call(const char *url, const void *data, size_t len, int timeout_ms,
                   Gpusched__V1__Response **out);

/* ---- attacks (test_hardening, bench_attack) ---- */

/* A TCP port on 127.0.0.1 that was free a moment ago; 0 when none could be found. */
uint16_t itest_free_port(void);
/* A connection from 127.0.0.2 to 127.0.0.1:port that completes nng's handshake as a REQ peer
 * and then stays idle. Returns the socket, or -1. */
int itest_idle_peer(uint16_t port);
/* A Request with `token` and a SubmitBatch of n empty packets, encoded by hand (2 bytes a
 * packet: ~4 million packets in 8 MiB); malloc'd, or NULL. */
uint8_t *itest_huge_batch(size_t n, const char *token, size_t *len);

/* Runs a printf-formatted shell command: system()'s status. */
int itest_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- certificates for tls+tcp:// (openssl CLI, ECDSA P-256) ---- */

typedef struct itest_pki {
	char dir[64];
	/* ca.pem; cert+key PEM files: the daemon's (for IP 127.0.0.1 and DNS daemon.test) and a
	 * client's, both from
	 * the CA, and a stranger's from another CA (its certificate dir/other.pem) */
	char ca[128], server[128], client[128], stranger[128];
} itest_pki;

/* Makes a CA and those certificates in a new temporary directory; fails the test if the
 * openssl CLI cannot. */
void itest_pki_make(itest_pki *k);
/* One more certificate from k's CA, for subjectAltName san ("IP:10.0.0.1,DNS:x"): its
 * cert+key PEM file in out. */
void itest_pki_cert(const itest_pki *k, const char *name, const char *san, char *out, size_t cap);

/* splitmix64: a small seeded generator for reproducible workloads. */
uint64_t itest_rand(uint64_t *state);
/* Uniform in [0, n). */
uint64_t itest_rand_below(uint64_t *state, uint64_t n);

#endif
