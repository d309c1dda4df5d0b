/* Levelled log lines on stderr: "2026-11-23T02:40:01.123Z gpuschedd[pid] INFO  message". */
#ifndef GS_LOG_H
#define GS_LOG_H

typedef enum gs_log_level {
	GS_LOG_ERROR = 0,
	GS_LOG_WARN = 1,
	GS_LOG_INFO = 2,
	GS_LOG_DEBUG = 3,
} gs_log_level;

void gs_log_set_level(gs_log_level level);
/* Parses "error", "warn", "info", "debug"; returns -1 if unknown. */
int gs_log_parse_level(const char *name);
void gs_log(gs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define GS_ERROR(...) gs_log(GS_LOG_ERROR, __VA_ARGS__)
#define GS_WARN(...)  gs_log(GS_LOG_WARN, __VA_ARGS__)
#define GS_INFO(...)  gs_log(GS_LOG_INFO, __VA_ARGS__)
#define GS_DEBUG(...) gs_log(GS_LOG_DEBUG, __VA_ARGS__)

#endif
