#include "logline.h"

#include <stdio.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *const g_words[] = {"error", "warn", "info", "debug"};
static const char *const g_names[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};

int gs_log_parse_level(const char *name)
{
	for (int i = GS_LOG_ERROR; i <= GS_LOG_DEBUG; i++)
		if (strcasecmp(name, g_words[i]) == 0)
			return i;
	return -1;
}

void gs_log_vwrite(int fd, const char *program, int level, const char *fmt, va_list ap)
{
	struct timespec ts;
	struct tm tm;
	char line[1024];

	if (level < GS_LOG_ERROR || level > GS_LOG_DEBUG)
		level = GS_LOG_ERROR;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, program, (int)getpid(), g_names[level]);
	if (n < 0)
		return;
	if ((size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t w = write(fd, line, (size_t)n);
	(void)w;
}
