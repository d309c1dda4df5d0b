/* Levelled log lines on stderr, in the format of proto/logline.h:
 * "2026-11-23T02:40:01.123Z gpuschedd[pid] INFO  message". */
#ifndef GSD_LOG_H
#define GSD_LOG_H

#include <stdatomic.h>
#include <stdbool.h>

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

extern atomic_int gsd_log_level_now;
static inline bool gsd_log_enabled(gsd_log_level level)
{
	return (int)level <= atomic_load_explicit(&gsd_log_level_now, memory_order_relaxed);
}

/* The arguments are evaluated only when the level is enabled: debug lines on the hot path
 * cost one load when debug logging is off. */
#define GSD_LOG_AT(level, ...)                                                                     \
	do {                                                                                       \
		if (gsd_log_enabled(level))                                                        \
			gsd_log(level, __VA_ARGS__);                                               \
	} while (0)
#define GSD_ERROR(...) GSD_LOG_AT(GSD_LOG_ERROR, __VA_ARGS__)
#define GSD_WARN(...)  GSD_LOG_AT(GSD_LOG_WARN, __VA_ARGS__)
#define GSD_INFO(...)  GSD_LOG_AT(GSD_LOG_INFO, __VA_ARGS__)
#define GSD_DEBUG(...) GSD_LOG_AT(GSD_LOG_DEBUG, __VA_ARGS__)

#endif
