/*
 * Test harness: runs a real gpuschedd on a private ipc:// socket and audit file in a fresh
 * temporary directory, waits (bounded) for its "ready" line, and stops or kills it. Every
 * wait is on an event (pipe readable, process exit via pidfd) with a deadline: no sleeps.
 */
#ifndef GS_TESTD_H
#define GS_TESTD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct gs_testd {
	pid_t pid;
	int pidfd;
	int out_fd; /* the daemon's stdout */
	char dir[256];
	char url[320];
	char db[320];
	char log[320];
} gs_testd;

/* Starts a daemon; extra_args (NULL-terminated, may be NULL) are appended to its command
 * line. Returns 0 once it printed "ready", -1 otherwise (its log is printed). */
int gs_testd_start(gs_testd *t, const char *const *extra_args);
/* Like gs_testd_start but reuses t->dir and t->db (a restart after a crash). */
int gs_testd_restart(gs_testd *t, const char *const *extra_args);
/* Starts another program the same way (argv[0] its path, NULL-terminated), its stderr in
 * DIR/NAME.log, waiting for its "ready" line; t->dir is dir but belongs to the caller (do not
 * gs_testd_cleanup it). Returns 0 or -1. */
int gs_testd_spawn(gs_testd *t, const char *dir, const char *name, const char *const *argv);
/* SIGTERM and wait for exit; returns the exit status (or -1 on timeout). */
int gs_testd_stop(gs_testd *t);
/* Waits (at most timeout_ms) for the daemon to exit by itself; its exit status, or -1. */
int gs_testd_wait(gs_testd *t, int timeout_ms);
/* SIGKILL and wait. */
void gs_testd_kill9(gs_testd *t);
/* True while the process is alive. */
bool gs_testd_alive(gs_testd *t);
/* Removes the temporary directory. */
void gs_testd_cleanup(gs_testd *t);
/* Prints the daemon's log (for failures). */
void gs_testd_dump_log(const gs_testd *t);
/* Milliseconds since an arbitrary start (CLOCK_MONOTONIC). */
long long gs_test_now_ms(void);
/* The same clock in nanoseconds, and in seconds (for benchmarks). */
uint64_t gs_test_mono_ns(void);
double gs_test_mono_s(void);
/* CPU time a process's threads have run, in nanoseconds (the sum of the first field of
 * /proc/PID/task/TID/schedstat over its threads now); 0 when it cannot be read. Benchmarks
 * take it before and after a measurement to print the daemon's CPU per request. */
uint64_t gs_test_proc_cpu_ns(pid_t pid);

#endif
