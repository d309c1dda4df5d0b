#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

atomic_int gsd_log_level_now = GSD_LOG_INFO;
static const char *const g_names[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};

void gsd_log_set_level(gsd_log_level level)
{
	atomic_store(&gsd_log_level_now, (int)level);
}

int gsd_log_parse_level(const char *name)
{
	static const char *const words[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (strcasecmp(name, words[i]) == 0)
			return i;
	return -1;
}

void gsd_log(gsd_log_level level, const char *fmt, ...)
{
	if (!gsd_log_enabled(level))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char line[1024];
	int n = snprintf(line, sizeof(line),
	                 "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ gpuschedd[%d] %s ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), g_names[level]);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line so lines from different threads never interleave. */
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}
