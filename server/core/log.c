#include "core/log.h"

#include "logline.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <unistd.h>

atomic_int gsd_log_level_now = GSD_LOG_INFO;

_Static_assert((int)GSD_LOG_ERROR == (int)GS_LOG_ERROR && (int)GSD_LOG_DEBUG == (int)GS_LOG_DEBUG,
               "the daemon's levels are the shared log line's");

void gsd_log_set_level(gsd_log_level level)
{
	atomic_store(&gsd_log_level_now, (int)level);
}

int gsd_log_parse_level(const char *name)
{
	return gs_log_parse_level(name);
}

void gsd_log(gsd_log_level level, const char *fmt, ...)
{
	if (!gsd_log_enabled(level))
		return;
	va_list ap;
	va_start(ap, fmt);
	gs_log_vwrite(STDERR_FILENO, "gpuschedd", (int)level, fmt, ap);
	va_end(ap);
}
