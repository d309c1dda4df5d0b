#include "core/util.h"

#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t gsd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gsd_ensure_ipc_dir(const char *url)
{
	if (strncmp(url, "ipc://", 6) != 0)
		return;
	char path[256];
	snprintf(path, sizeof(path), "%s", url + 6);
	/* Only the socket's own directory (the daemon's runtime directory, 0700), inside one that
	 * exists: a daemon running as root does not make a tree of directories wherever a URL
	 * points. A path whose parent is missing fails at listen, naming it. */
	char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return;
	*slash = '\0';
	if (mkdir(path, 0700) != 0 && errno != EEXIST && errno != ENOENT)
		GSD_WARN("cannot create %s: %s", path, strerror(errno));
}

/* Gives an ipc socket file its group, then the mode with the group's bits. */
static int ipc_give_group(const char *path, uint32_t ipc_mode, int64_t ipc_gid)
{
	if (chown(path, (uid_t)-1, (gid_t)ipc_gid) != 0) {
		int err = errno;
		GSD_ERROR("cannot give %s to group %lld (ipc_group): %s", path, (long long)ipc_gid,
		          strerror(err));
		return NNG_ESYSERR + err;
	}
	if (chmod(path, (mode_t)ipc_mode) != 0) {
		int err = errno;
		GSD_ERROR("cannot set the mode of %s to %04o (ipc_mode): %s", path, ipc_mode,
		          strerror(err));
		return NNG_ESYSERR + err;
	}
	return 0;
}

int gsd_listen(nng_socket s, const char *url, uint32_t ipc_mode, int64_t ipc_gid,
               nng_tls_config *tls, nng_listener *out)
{
	gsd_ensure_ipc_dir(url);
	bool is_tls = strncmp(url, "tls+", 4) == 0;
	bool is_ipc = strncmp(url, "ipc://", 6) == 0;
	if (is_tls && !tls)
		return NNG_EINVAL;
	nng_listener l;
	int rv = nng_listener_create(&l, s, url);
	if (rv != 0)
		return rv;
	/* With a group to give, the owner's bits only until the file has that group. */
	if (is_ipc)
		rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS,
		                          (int)(ipc_gid >= 0 ? ipc_mode & 0700u : ipc_mode));
	else if (is_tls)
		rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls);
	if (rv != 0) {
		nng_listener_close(l);
		return rv;
	}
	if ((rv = nng_listener_start(l, 0)) != 0) {
		nng_listener_close(l);
		return rv;
	}
	if (is_ipc && ipc_gid >= 0 && (rv = ipc_give_group(url + 6, ipc_mode, ipc_gid)) != 0) {
		nng_listener_close(l);
		return rv;
	}
	if (out)
		*out = l;
	return 0;
}

/* Bytes of a TLS file at most: certificates are a few KiB, and the file is read on the loop. */
#define TLS_FILE_MAX (1u << 20)

/* A TLS file read whole into *out (malloc'd, NUL-terminated: PEM for mbedTLS), its path and
 * bytes into fp (may be NULL). A FIFO or a device would block the reader: regular files only.
 * 0, or -1 with why. */
static int read_tls_file(const char *path, char **out, crypto_generichash_state *fp, char *err,
                         size_t cap)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		snprintf(err, cap, "tls: %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TLS_FILE_MAX) {
		snprintf(err, cap, "tls: %s: %s", path,
		         S_ISREG(st.st_mode) ? "larger than 1 MiB" : "not a regular file");
		close(fd);
		return -1;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t len = 0;
	ssize_t n = 1;
	while (buf && len < (size_t)st.st_size &&
	       (n = read(fd, buf + len, (size_t)st.st_size - len)) > 0)
		len += (size_t)n;
	int saved = errno;
	close(fd);
	if (!buf || n < 0) {
		snprintf(err, cap, "tls: %s: %s", path, buf ? strerror(saved) : "out of memory");
		free(buf);
		return -1;
	}
	buf[len] = '\0';
	if (fp) {
		crypto_generichash_update(fp, (const unsigned char *)path, strlen(path) + 1);
		crypto_generichash_update(fp, (const unsigned char *)buf, len + 1);
	}
	*out = buf;
	return 0;
}

int gsd_tls_server(const char *cert_key_file, const char *ca_file, int auth_mode,
                   nng_tls_config **out, crypto_generichash_state *fp, char *err, size_t cap)
{
	char *cert = NULL, *ca = NULL;
	if (read_tls_file(cert_key_file, &cert, fp, err, cap) != 0 ||
	    (ca_file[0] && read_tls_file(ca_file, &ca, fp, err, cap) != 0)) {
		if (cert)
			sodium_memzero(cert, strlen(cert));
		free(cert);
		return -1;
	}
	if (fp)
		crypto_generichash_update(fp, (const unsigned char *)&auth_mode, sizeof auth_mode);
	nng_tls_config *c = NULL;
	int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_SERVER);
	const char *what = "tls";
	if (rv == 0) {
		/* One PEM with the certificate (chain) and its key, as cert_key_file is. */
		what = cert_key_file;
		rv = nng_tls_config_own_cert(c, cert, cert, NULL);
	}
	if (rv == 0 && ca) {
		what = ca_file;
		rv = nng_tls_config_ca_chain(c, ca, NULL);
	}
	if (rv == 0) {
		/* A CA set means clients are verified unless the config says otherwise. */
		nng_tls_auth_mode m =
		        auth_mode == GSD_TLS_AUTH_REQUIRED   ? NNG_TLS_AUTH_MODE_REQUIRED
		        : auth_mode == GSD_TLS_AUTH_OPTIONAL ? NNG_TLS_AUTH_MODE_OPTIONAL
		        : auth_mode == GSD_TLS_AUTH_NONE     ? NNG_TLS_AUTH_MODE_NONE
		        : ca_file[0]                         ? NNG_TLS_AUTH_MODE_REQUIRED
		                                             : NNG_TLS_AUTH_MODE_NONE;
		what = "auth_mode";
		rv = nng_tls_config_auth_mode(c, m);
	}
	sodium_memzero(cert, strlen(cert)); /* the key was in it */
	free(cert);
	free(ca);
	if (rv != 0) {
		snprintf(err, cap, "tls: %s: %s", what, nng_strerror(rv));
		if (c)
			nng_tls_config_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

void *gsd_grow(void *items, size_t *cap, size_t need, size_t elem, size_t first)
{
	if (need <= *cap)
		return items;
	size_t ncap = *cap ? *cap : (first ? first : 1);
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return NULL;
		ncap *= 2;
	}
	if (elem && ncap > SIZE_MAX / elem)
		return NULL;
	void *n = realloc(items, ncap * elem);
	if (n)
		*cap = ncap;
	return n;
}
