#include "defaults.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int gs_default_url(char *buf, size_t cap)
{
	const char *env = getenv(GS_ENV_URL);
	const char *runtime = getenv("XDG_RUNTIME_DIR");
	int n;

	if (env && env[0])
		n = snprintf(buf, cap, "%s", env);
	else if (runtime && runtime[0])
		n = snprintf(buf, cap, "ipc://%s/gpusched/gpusched.sock", runtime);
	else
		/* Per-user directory so that two users on one host never share a daemon. */
		n = snprintf(buf, cap, "ipc:///tmp/gpusched-%u/gpusched.sock", (unsigned)getuid());
	return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}
