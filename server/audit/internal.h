/* What the audit writer (audit.c) and the history reads (history.c) share. */
#ifndef GSD_AUDIT_INTERNAL_H
#define GSD_AUDIT_INTERNAL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* How long a connection waits for a lock held by another one. */
#define GSD_AUDIT_BUSY_TIMEOUT_MS 5000

void gsd_audit_set_err(char *err, size_t errcap, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Copies src into dst, cut at a UTF-8 character boundary to fit. */
void gsd_audit_copy_text(char *dst, size_t cap, const char *src);
/* Binds an unsigned 64-bit value (SQLite integers are signed: stored as its bit pattern). */
void gsd_audit_bind_u64(sqlite3_stmt *s, int i, uint64_t v);

#endif
