/* Small helpers shared by every layer of the daemon. */
#ifndef GSD_UTIL_H
#define GSD_UTIL_H

/* Video and system memory are placed in units of this many bytes: an allocation occupies its
 * size rounded up to it (gsd_memory_footprint), and that is what quotas count. */
#define GSD_MEMORY_ALIGN 256u

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <sodium.h>

/* The bytes an allocation of size occupies once placed (size well below 2^64). */
static inline uint64_t gsd_memory_footprint(uint64_t size)
{
	return (size + GSD_MEMORY_ALIGN - 1) & ~(uint64_t)(GSD_MEMORY_ALIGN - 1);
}

/* CLOCK_REALTIME in ns: the timestamps of records. */
uint64_t gsd_now_ns(void);
/* Creates the directory of an ipc:// socket (mode 0700) when its parent exists, so defaults
 * ($XDG_RUNTIME_DIR/gpusched, /tmp/gpusched-UID) work; nothing deeper. Other URLs are left
 * alone. */
void gsd_ensure_ipc_dir(const char *url);
/* Listens on url with socket s (its directories made first); an ipc:// socket gets the
 * permissions ipc_mode (0600: only the daemon's user may connect) and, when ipc_gid is not -1,
 * that group (the group's bits are set only once the file has it: nobody of the group it was
 * made with can connect meanwhile); a tls+tcp:// one the TLS configuration tls (NNG_EINVAL
 * when it is NULL: no certificate configured). out may be NULL. Returns 0 or an nng error
 * (NNG_ESYSERR + errno when the group cannot be given, logged with the path). */
int gsd_listen(nng_socket s, const char *url, uint32_t ipc_mode, int64_t ipc_gid,
               nng_tls_config *tls, nng_listener *out);
/* The daemon's TLS configuration: its certificate and key (one PEM file), the CA its clients'
 * certificates must chain to (may be ""), and auth_mode (GSD_TLS_AUTH_*). Each file is read
 * once (a regular file of at most 1 MiB), loaded from memory, and its path and bytes go into
 * fp (may be NULL) with the auth mode: equal hashes, equal certificates served. 0, or -1 with
 * err. */
int gsd_tls_server(const char *cert_key_file, const char *ca_file, int auth_mode,
                   nng_tls_config **out, crypto_generichash_state *fp, char *err, size_t cap);

/* Room for `need` elements of `elem` bytes in the array `items` of *cap elements: returns items
 * itself when it has room, else the array reallocated to double the capacity (at least `first`,
 * and at least need), with *cap updated. NULL when memory is short or the size would overflow;
 * items and *cap are then unchanged and still valid. */
void *gsd_grow(void *items, size_t *cap, size_t need, size_t elem, size_t first);

#endif
