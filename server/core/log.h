/* Levelled log lines on stderr: "2026-11-23T02:40:01.123Z gpuschedd[pid] INFO  message". */
#ifndef GSD_LOG_H
#define GSD_LOG_H

typedef enum gsd_log_level {
	GSD_LOG_ERROR = 0,
	GSD_LOG_WARN = 1,
	GSD_LOG_INFO = 2,
	GSD_LOG_DEBUG = 3,
} gsd_log_level;

void gsd_log_set_level(gsd_log_level level);
/* Parses "error", "warn", "info", "debug"; returns -1 if unknown. */
int gsd_log_parse_level(const char *name);
void gsd_log(gsd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define GSD_ERROR(...) gsd_log(GSD_LOG_ERROR, __VA_ARGS__)
#define GSD_WARN(...)  gsd_log(GSD_LOG_WARN, __VA_ARGS__)
#define GSD_INFO(...)  gsd_log(GSD_LOG_INFO, __VA_ARGS__)
#define GSD_DEBUG(...) gsd_log(GSD_LOG_DEBUG, __VA_ARGS__)

#endif
