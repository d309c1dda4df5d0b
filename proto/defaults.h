/*
 * Defaults shared by the daemon and the client library, so that both ends agree on where to
 * meet without configuration.
 */
#ifndef GS_DEFAULTS_H
#define GS_DEFAULTS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Environment variables both programs read. */
#define GS_ENV_URL   "GPUSCHED_URL"
#define GS_ENV_TOKEN "GPUSCHED_TOKEN"
/* tls+tcp:// (clients): the CA that signed the daemon's certificate (required), and this
 * client's certificate and key in one PEM file (when the daemon asks for one). */
#define GS_ENV_TLS_CA "GPUSCHED_TLS_CA"
/* The name the daemon's certificate must carry (a DNS subjectAltName or, without SANs, its CN):
 * by default the URL's host when that is a DNS name. */
#define GS_ENV_TLS_SERVER_NAME "GPUSCHED_TLS_SERVER_NAME"
#define GS_ENV_TLS_CERT_KEY    "GPUSCHED_TLS_CERT_KEY"

/*
 * Writes the default request URL into buf (cap bytes, always NUL-terminated when cap > 0):
 *   $GPUSCHED_URL if set and non-empty, else
 *   ipc://$XDG_RUNTIME_DIR/gpusched/gpusched.sock if XDG_RUNTIME_DIR is set and non-empty, else
 *   ipc:///tmp/gpusched-$UID/gpusched.sock
 * Returns 0, or -1 if the URL does not fit (buf then holds a truncated copy).
 */
int gs_default_url(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
