/*
 * The audit writer's VFS: SQLite's default VFS with the writes of one transaction to the -wal
 * file coalesced.
 *
 * A WAL commit appends its frames with two xWrite calls each (the 24-byte frame header, then
 * the page): with 1 KiB pages an audit commit is some 17 pwrite calls, most of the cost of the
 * commit. Here contiguous writes to a -wal file collect in a buffer and reach the file as one
 * pwrite, at the latest when the commit frame is complete, so that COMMIT still returns only
 * after every byte of it is in the file (kill -9 keeps all acknowledged records) and a failed
 * write still fails the COMMIT.
 *
 * Nobody may see the WAL while bytes of it are only in the buffer. Other connections learn of
 * frames from the wal-index header in shared memory, which SQLite updates after writing them
 * (sqlite3WalFrames: frames, then xSync if the mode syncs, then the wal-index, published with
 * xShmBarrier); this connection reads the WAL through xRead. So the buffer is written out
 * first on:
 *  - every call on the main database file of the connection, its shared memory included
 *    (xShmMap, xShmLock, xShmBarrier, xShmUnmap), so before any lock changes hands and before
 *    the wal-index header names the new frames;
 *  - every call on the -wal file other than xWrite, xSectorSize and xDeviceCharacteristics
 *    (xRead, xSync, xTruncate, xFileSize, xClose, file controls, locks);
 *  - an xWrite that does not continue or overwrite the buffered range, or that would take it
 *    past BUF_CAP;
 *  - the write of a commit frame's page (the frame header before it has a nonzero database
 *    size): the commit is then in the file before sqlite3WalFrames goes on to the wal-index,
 *    and an error is the xWrite's, which fails the COMMIT. A commit frame header that does not
 *    continue buffered frames (a one-page transaction, or walRewriteChecksums rewriting
 *    headers one at a time between xReads) is written through at once, so that no commit
 *    frame is ever left for the xShmBarrier flush, which cannot report an error.
 * If a flush fails anyway where it cannot be reported (xShmBarrier, xShmUnmap), the WAL is
 * marked failed and every later call on it or its database returns SQLITE_IOERR: the daemon
 * then refuses work as on any audit I/O error.
 *
 * Only the connection opened with this VFS buffers; the checkpointer and the history readers
 * use the default VFS on the same files (the unix VFS's locks and shared memory are per inode,
 * whichever sqlite3_vfs opened the file). A connection and its files are used by one thread
 * at a time, as SQLite requires of NOMUTEX connections; the buffer needs no lock.
 */
#include "audit/vfs.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

/* At most this much of a WAL is held back (62 frames of 1 KiB pages). Not more than 128 KiB:
 * the unix VFS cuts every write to 17 bits of length (seekAndWrite), and reports what it then
 * failed to write as SQLITE_FULL. */
#define BUF_CAP (64 * 1024)
/* sqlite3WalFrames: each frame is a 24-byte header, then the page; the file starts with a
 * 32-byte header. Bytes 4-7 of a frame header hold the database size after a commit, zero in
 * the other frames of a transaction. */
#define WAL_HDR_BYTES   32
#define FRAME_HDR_BYTES 24

typedef struct shim_file shim_file;
struct shim_file {
	sqlite3_file base;  /* pMethods: shim_methods */
	sqlite3_file *real; /* the default VFS's file, in the same allocation */
	bool is_wal;
	shim_file *wal; /* main database: its connection's -wal file while open */
	shim_file *db;  /* -wal file: the main database it belongs to */
	/* -wal file: bytes [off, off + len) not yet written */
	unsigned char *buf;
	sqlite3_int64 off;
	size_t len;
	sqlite3_int64 commit_page; /* where the armed commit frame's page starts, or -1 */
	int failed;                /* a flush that could not be reported failed: its error */
};

static sqlite3_vfs shim_vfs;
static sqlite3_vfs *real_vfs;
static _Atomic uint64_t stat_in, stat_out;
/* Time this thread spent in the file's reads, writes, syncs and SQLite's sleeps. */
static _Thread_local uint64_t thread_io_ns;

static uint64_t mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Runs `call` (an expression yielding an int) and counts its time in thread_io_ns. */
#define TIMED(call)                                                                                \
	({                                                                                         \
		uint64_t t0_ = mono_now();                                                         \
		int r_ = (call);                                                                   \
		thread_io_ns += mono_now() - t0_;                                                  \
		r_;                                                                                \
	})

uint64_t gsd_audit_vfs_thread_io_ns(void)
{
	return thread_io_ns;
}

static sqlite3_file *real_of(sqlite3_file *f)
{
	return ((shim_file *)f)->real;
}

static int write_out(shim_file *w, const void *p, size_t n, sqlite3_int64 off)
{
	atomic_fetch_add_explicit(&stat_out, 1, memory_order_relaxed);
	return TIMED(w->real->pMethods->xWrite(w->real, p, (int)n, off));
}

/* Writes the buffer of a -wal file out (or drops it if the file has failed). */
static int flush(shim_file *w)
{
	if (!w || !w->is_wal)
		return SQLITE_OK;
	w->commit_page = -1;
	if (w->len == 0)
		return w->failed;
	size_t n = w->len;
	w->len = 0;
	if (w->failed)
		return w->failed;
	return write_out(w, w->buf, n, w->off);
}

/* A flush whose error has no caller to go to: later calls on the WAL report it. */
static void flush_or_fail(shim_file *w)
{
	int rc = flush(w);
	if (rc != SQLITE_OK && w && !w->failed)
		w->failed = (rc & 0xff) == SQLITE_IOERR ? rc : SQLITE_IOERR_WRITE;
}

/* Flushes the WAL a call on f could make visible: f's own buffer, or its database's WAL. */
static int flush_for(sqlite3_file *f)
{
	shim_file *s = (shim_file *)f;
	return flush(s->is_wal ? s : s->wal);
}

static unsigned be32(const unsigned char *p)
{
	return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static int wal_write(shim_file *w, const void *data, int amt, sqlite3_int64 off)
{
	const unsigned char *p = data;
	size_t n = (size_t)amt;
	if (w->failed)
		return w->failed;
	bool commit_hdr = n == FRAME_HDR_BYTES && off >= WAL_HDR_BYTES && be32(p + 4) != 0;
	bool commit_page = w->commit_page >= 0 && off == w->commit_page;
	/* Joins the buffer if it starts inside or right after the buffered range and fits. */
	bool joins = w->len > 0 && off >= w->off && off <= w->off + (sqlite3_int64)w->len &&
	             (size_t)(off - w->off) + n <= BUF_CAP;
	if (!joins) {
		int rc = flush(w);
		if (rc != SQLITE_OK)
			return rc;
		/* A commit frame that does not continue buffered frames goes straight out. */
		if (commit_hdr || commit_page || n > BUF_CAP ||
		    (!w->buf && !(w->buf = sqlite3_malloc(BUF_CAP)))) {
			rc = write_out(w, p, n, off);
			if (rc == SQLITE_OK && commit_hdr)
				w->commit_page = off + FRAME_HDR_BYTES;
			return rc;
		}
		w->off = off;
	}
	size_t at = (size_t)(off - w->off);
	memcpy(w->buf + at, p, n);
	if (at + n > w->len)
		w->len = at + n;
	if (commit_hdr) {
		w->commit_page = off + FRAME_HDR_BYTES;
		return SQLITE_OK;
	}
	return commit_page ? flush(w) : SQLITE_OK;
}

/* ---- sqlite3_io_methods ---- */

static int shim_close(sqlite3_file *f)
{
	shim_file *s = (shim_file *)f;
	int rc = flush_for(f);
	if (s->is_wal) {
		if (s->db && s->db->wal == s)
			s->db->wal = NULL;
		sqlite3_free(s->buf);
		s->buf = NULL;
	} else if (s->wal) {
		s->wal->db = NULL;
		s->wal = NULL;
	}
	int rc2 = s->real->pMethods->xClose(s->real);
	return rc != SQLITE_OK ? rc : rc2;
}

static int shim_read(sqlite3_file *f, void *p, int amt, sqlite3_int64 off)
{
	int rc = flush_for(f);
	return rc != SQLITE_OK ? rc : TIMED(real_of(f)->pMethods->xRead(real_of(f), p, amt, off));
}

static int shim_write(sqlite3_file *f, const void *p, int amt, sqlite3_int64 off)
{
	shim_file *s = (shim_file *)f;
	if (s->is_wal) {
		atomic_fetch_add_explicit(&stat_in, 1, memory_order_relaxed);
		return wal_write(s, p, amt, off);
	}
	int rc = flush_for(f);
	return rc != SQLITE_OK ? rc : TIMED(s->real->pMethods->xWrite(s->real, p, amt, off));
}

/* The calls that flush first and then do what the default VFS does. */
#define FLUSH_THEN(call)                                                                           \
	do {                                                                                       \
		int rc_ = flush_for(f);                                                            \
		return rc_ != SQLITE_OK ? rc_ : real_of(f)->pMethods->call;                        \
	} while (0)

static int shim_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	FLUSH_THEN(xTruncate(real_of(f), size));
}

static int shim_sync(sqlite3_file *f, int flags)
{
	int rc = flush_for(f);
	return rc != SQLITE_OK ? rc : TIMED(real_of(f)->pMethods->xSync(real_of(f), flags));
}

static int shim_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	FLUSH_THEN(xFileSize(real_of(f), size));
}

static int shim_lock(sqlite3_file *f, int lock)
{
	FLUSH_THEN(xLock(real_of(f), lock));
}

static int shim_unlock(sqlite3_file *f, int lock)
{
	FLUSH_THEN(xUnlock(real_of(f), lock));
}

static int shim_check_reserved(sqlite3_file *f, int *out)
{
	FLUSH_THEN(xCheckReservedLock(real_of(f), out));
}

static int shim_file_control(sqlite3_file *f, int op, void *arg)
{
	FLUSH_THEN(xFileControl(real_of(f), op, arg));
}

/* Neither reads nor changes the file: no flush (SQLite asks them between frame writes). */
static int shim_sector_size(sqlite3_file *f)
{
	return real_of(f)->pMethods->xSectorSize(real_of(f));
}

static int shim_device_characteristics(sqlite3_file *f)
{
	return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}

static int shim_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **pp)
{
	FLUSH_THEN(xShmMap(real_of(f), region, size, extend, pp));
}

static int shim_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
	FLUSH_THEN(xShmLock(real_of(f), offset, n, flags));
}

static void shim_shm_barrier(sqlite3_file *f)
{
	shim_file *s = (shim_file *)f;
	flush_or_fail(s->is_wal ? s : s->wal);
	s->real->pMethods->xShmBarrier(s->real);
}

static int shim_shm_unmap(sqlite3_file *f, int delete_flag)
{
	shim_file *s = (shim_file *)f;
	flush_or_fail(s->is_wal ? s : s->wal);
	return s->real->pMethods->xShmUnmap(s->real, delete_flag);
}

static int shim_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
	FLUSH_THEN(xFetch(real_of(f), off, amt, pp));
}

static int shim_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	FLUSH_THEN(xUnfetch(real_of(f), off, p));
}

static const sqlite3_io_methods shim_methods = {
        .iVersion = 3,
        .xClose = shim_close,
        .xRead = shim_read,
        .xWrite = shim_write,
        .xTruncate = shim_truncate,
        .xSync = shim_sync,
        .xFileSize = shim_file_size,
        .xLock = shim_lock,
        .xUnlock = shim_unlock,
        .xCheckReservedLock = shim_check_reserved,
        .xFileControl = shim_file_control,
        .xSectorSize = shim_sector_size,
        .xDeviceCharacteristics = shim_device_characteristics,
        .xShmMap = shim_shm_map,
        .xShmLock = shim_shm_lock,
        .xShmBarrier = shim_shm_barrier,
        .xShmUnmap = shim_shm_unmap,
        .xFetch = shim_fetch,
        .xUnfetch = shim_unfetch,
};

/* ---- sqlite3_vfs ---- */

/* The default VFS's file lives right after ours, aligned as SQLite aligns its own. */
#define REAL_AT ((sizeof(shim_file) + 7) & ~(size_t)7)

static int shim_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
	(void)vfs;
	shim_file *s = (shim_file *)f;
	memset(s, 0, sizeof *s);
	s->real = (sqlite3_file *)((char *)f + REAL_AT);
	s->commit_page = -1;
	int rc = real_vfs->xOpen(real_vfs, name, s->real, flags, out_flags);
	if (rc != SQLITE_OK) {
		/* pMethods stays NULL: SQLite does not close a file that failed to open, but the
		 * default VFS may have set its own. */
		if (s->real->pMethods)
			s->real->pMethods->xClose(s->real);
		return rc;
	}
	if (!s->real->pMethods || s->real->pMethods->iVersion < 3) {
		if (s->real->pMethods)
			s->real->pMethods->xClose(s->real);
		return SQLITE_CANTOPEN;
	}
	if ((flags & SQLITE_OPEN_WAL) && name) {
		/* The main database's file object: ours, as its connection uses this VFS. */
		shim_file *db = (shim_file *)sqlite3_database_file_object(name);
		if (db && db->base.pMethods == &shim_methods && !db->is_wal) {
			s->is_wal = true;
			s->db = db;
			db->wal = s;
		}
	}
	s->base.pMethods = &shim_methods;
	return SQLITE_OK;
}

static int shim_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void)vfs;
	return real_vfs->xDelete(real_vfs, name, sync_dir);
}

static int shim_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	(void)vfs;
	return real_vfs->xAccess(real_vfs, name, flags, out);
}

static int shim_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
	(void)vfs;
	return real_vfs->xFullPathname(real_vfs, name, n, out);
}

static void *shim_dl_open(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	return real_vfs->xDlOpen(real_vfs, name);
}

static void shim_dl_error(sqlite3_vfs *vfs, int n, char *msg)
{
	(void)vfs;
	real_vfs->xDlError(real_vfs, n, msg);
}

static void (*shim_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
	(void)vfs;
	return real_vfs->xDlSym(real_vfs, h, sym);
}

static void shim_dl_close(sqlite3_vfs *vfs, void *h)
{
	(void)vfs;
	real_vfs->xDlClose(real_vfs, h);
}

static int shim_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return real_vfs->xRandomness(real_vfs, n, out);
}

static int shim_sleep(sqlite3_vfs *vfs, int us)
{
	(void)vfs;
	return TIMED(real_vfs->xSleep(real_vfs, us));
}

static int shim_current_time(sqlite3_vfs *vfs, double *out)
{
	(void)vfs;
	return real_vfs->xCurrentTime(real_vfs, out);
}

static int shim_last_error(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return real_vfs->xGetLastError(real_vfs, n, out);
}

static int shim_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
	(void)vfs;
	return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

static int register_rc = SQLITE_ERROR;
static pthread_once_t register_once = PTHREAD_ONCE_INIT;

static void register_vfs(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	/* Version 2 has xCurrentTimeInt64; the system-call overrides (version 3) are not
	 * offered. */
	if (!real_vfs || real_vfs->iVersion < 2)
		return;
	shim_vfs = (sqlite3_vfs){
	        .iVersion = 2,
	        .szOsFile = (int)REAL_AT + real_vfs->szOsFile,
	        .mxPathname = real_vfs->mxPathname,
	        .zName = GSD_AUDIT_VFS_NAME,
	        .xOpen = shim_open,
	        .xDelete = shim_delete,
	        .xAccess = shim_access,
	        .xFullPathname = shim_full_pathname,
	        .xDlOpen = shim_dl_open,
	        .xDlError = shim_dl_error,
	        .xDlSym = shim_dl_sym,
	        .xDlClose = shim_dl_close,
	        .xRandomness = shim_randomness,
	        .xSleep = shim_sleep,
	        .xCurrentTime = shim_current_time,
	        .xGetLastError = shim_last_error,
	        .xCurrentTimeInt64 = shim_current_time64,
	};
	register_rc = sqlite3_vfs_register(&shim_vfs, 0);
}

int gsd_audit_vfs_register(void)
{
	pthread_once(&register_once, register_vfs);
	return register_rc;
}

void gsd_audit_vfs_stats_get(gsd_audit_vfs_stats *out)
{
	out->wal_writes_in = atomic_load_explicit(&stat_in, memory_order_relaxed);
	out->wal_writes_out = atomic_load_explicit(&stat_out, memory_order_relaxed);
}
