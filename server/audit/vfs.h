/*
 * The audit writer's SQLite VFS: the default (unix) VFS, except that the frames one
 * transaction appends to the -wal file reach the file as one write instead of two per page.
 * See vfs.c for when the buffered bytes are written.
 */
#ifndef GSD_AUDIT_VFS_H
#define GSD_AUDIT_VFS_H

#include <stdint.h>

#define GSD_AUDIT_VFS_NAME "gs-audit"

/* Registers the VFS under GSD_AUDIT_VFS_NAME (not as the default), once per process; later
 * calls return the first one's result. SQLITE_OK or an SQLite error code. */
int gsd_audit_vfs_register(void);

/* Write calls the VFS made to -wal files, and xWrite calls it was given for them, since the
 * process started (for tests and benchmarks). */
typedef struct gsd_audit_vfs_stats {
	uint64_t wal_writes_in;  /* xWrite calls SQLite made on -wal files */
	uint64_t wal_writes_out; /* writes that reached the file */
} gsd_audit_vfs_stats;
void gsd_audit_vfs_stats_get(gsd_audit_vfs_stats *out);

/* Nanoseconds the calling thread has spent in the VFS's file reads, writes and syncs and in
 * SQLite's sleeps (waiting for a lock), since it started: what a slow or busy file costs it. */
uint64_t gsd_audit_vfs_thread_io_ns(void);

#endif
