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

int gsd_tls_server(const char *cert_key_file, const char *ca_file, int auth_mode,
                   nng_tls_config **out, char *err, size_t cap)
{
	/* nng reads the files whole, blocking: a FIFO or a device would hold the loop. */
	const char *files[2] = {cert_key_file, ca_file};
	for (int i = 0; i < 2; i++) {
		struct stat st;
		if (!files[i][0])
			continue;
		if (stat(files[i], &st) != 0) {
			snprintf(err, cap, "tls: %s: %s", files[i], strerror(errno));
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			snprintf(err, cap, "tls: %s: not a regular file", files[i]);
			return -1;
		}
	}
	nng_tls_config *c;
	int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_SERVER);
	if (rv != 0) {
		snprintf(err, cap, "tls: %s", nng_strerror(rv));
		return -1;
	}
	const char *what = cert_key_file;
	rv = nng_tls_config_cert_key_file(c, cert_key_file, NULL);
	if (rv == 0 && ca_file[0]) {
		what = ca_file;
		rv = nng_tls_config_ca_file(c, ca_file);
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
	if (rv != 0) {
		snprintf(err, cap, "tls: %s: %s", what, nng_strerror(rv));
		nng_tls_config_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

/* Bytes of a TLS file that are compared: certificates are a few KiB, and a path that names
 * /dev/zero or a FIFO must not hold the loop. */
#define TLS_FILE_MAX (1u << 20)

/* The bytes of one file into the hash (its errno when it cannot be read). */
static void hash_file(crypto_generichash_state *st, const char *path)
{
	crypto_generichash_update(st, (const unsigned char *)path, strlen(path) + 1);
	if (!path[0])
		return;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	unsigned char buf[8192];
	ssize_t n = fd < 0 ? -1 : 0;
	size_t total = 0;
	while (fd >= 0 && total < TLS_FILE_MAX && (n = read(fd, buf, sizeof buf)) > 0) {
		crypto_generichash_update(st, buf, (size_t)n);
		total += (size_t)n;
	}
	if (n < 0) {
		int err = errno;
		crypto_generichash_update(st, (const unsigned char *)&err, sizeof err);
	}
	if (fd >= 0)
		close(fd);
}

void gsd_tls_fingerprint(const gsd_config *c, uint8_t out[32])
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, 32);
	hash_file(&st, c->tls.cert_key_file);
	hash_file(&st, c->tls.ca_file);
	crypto_generichash_update(&st, (const unsigned char *)&c->tls.auth_mode,
	                          sizeof c->tls.auth_mode);
	for (uint32_t i = 0; i < c->nlisten; i++)
		hash_file(&st, c->listen_ca[i]);
	crypto_generichash_final(&st, out, 32);
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
