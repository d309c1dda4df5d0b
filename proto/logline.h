/*
 * The log line both daemons write, gpuschedd and gpusched-relay, so that one reader (or one
 * grep) serves both:
 *
 *   2026-11-23T02:40:01.123Z gpuschedd[4242] INFO  message
 *
 * UTC to the millisecond, the program and its pid, the level padded to five characters, the
 * message. Each line is one write(2), so lines from different threads never interleave.
 */
#ifndef GS_LOGLINE_H
#define GS_LOGLINE_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Numbered as the daemon's gsd_log_level: a lower level is more severe. */
enum { GS_LOG_ERROR = 0, GS_LOG_WARN = 1, GS_LOG_INFO = 2, GS_LOG_DEBUG = 3 };

/* Parses "error", "warn", "info" or "debug" (any case); returns -1 if unknown. */
int gs_log_parse_level(const char *name);

/* Writes one line to fd; a message longer than the line (1 KiB) is cut. */
void gs_log_vwrite(int fd, const char *program, int level, const char *fmt, va_list ap)
        __attribute__((format(printf, 4, 0)));

#ifdef __cplusplus
}
#endif

#endif
