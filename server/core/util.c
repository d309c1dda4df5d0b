#include "core/util.h"

#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			GSD_WARN("cannot create %s: %s", path, strerror(errno));
		*p = '/';
	}
}

int gsd_listen(nng_socket s, const char *url, uint32_t ipc_mode, nng_listener *out)
{
	gsd_ensure_ipc_dir(url);
	nng_listener l;
	int rv = nng_listener_create(&l, s, url);
	if (rv != 0)
		return rv;
	if (strncmp(url, "ipc://", 6) == 0 &&
	    (rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, (int)ipc_mode)) != 0) {
		nng_listener_close(l);
		return rv;
	}
	if ((rv = nng_listener_start(l, 0)) != 0) {
		nng_listener_close(l);
		return rv;
	}
	if (out)
		*out = l;
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
