#include "testd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_TIMEOUT_MS 20000
#define EXIT_TIMEOUT_MS  20000

uint64_t gs_test_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t gs_test_proc_cpu_ns(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char stat[320];
		snprintf(stat, sizeof stat, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(stat, "r");
		unsigned long long ns = 0;
		if (f) {
			if (fscanf(f, "%llu", &ns) == 1)
				sum += ns;
			fclose(f);
		}
	}
	closedir(d);
	return sum;
}

long long gs_test_now_ms(void)
{
	return (long long)(gs_test_mono_ns() / 1000000u);
}

double gs_test_mono_s(void)
{
	return (double)gs_test_mono_ns() / 1e9;
}

void gs_testd_dump_log(const gs_testd *t)
{
	FILE *f = fopen(t->log, "r");
	if (!f)
		return;
	char line[1024];
	fprintf(stderr, "---- gpuschedd log (%s) ----\n", t->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "---- end of log ----\n");
	fclose(f);
}

/* Waits until the daemon's stdout shows a line containing "ready". */
static int wait_ready(gs_testd *t)
{
	char buf[4096];
	size_t len = 0;
	long long deadline = gs_test_now_ms() + READY_TIMEOUT_MS;
	while (gs_test_now_ms() < deadline) {
		struct pollfd pfd = {.fd = t->out_fd, .events = POLLIN};
		int left = (int)(deadline - gs_test_now_ms());
		int rc = poll(&pfd, 1, left > 0 ? left : 0);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			break;
		ssize_t n = read(t->out_fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break; /* the daemon exited */
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "ready"))
			return 0;
		if (len == sizeof(buf) - 1)
			len = 0;
	}
	return -1;
}

static int spawn_argv(gs_testd *t, const char *const *argv);

static int spawn(gs_testd *t, const char *const *extra_args)
{
	const char *argv[64];
	int n = 0;
	argv[n++] = GS_DAEMON_PATH;
	argv[n++] = "--listen";
	argv[n++] = t->url;
	argv[n++] = "--db";
	argv[n++] = t->db;
	/* GS_TEST_BACKEND runs every adapter on another backend (vulkan: ctest's *.vulkan
	 * tests); given first, so a test's own --backend still wins. */
	const char *backend = getenv("GS_TEST_BACKEND");
	if (backend && *backend) {
		argv[n++] = "--backend";
		argv[n++] = backend;
	}
	for (int i = 0; extra_args && extra_args[i] && n < 62; i++)
		argv[n++] = extra_args[i];
	argv[n] = NULL;
	return spawn_argv(t, argv);
}

static int spawn_argv(gs_testd *t, const char *const *argv)
{
	int out[2];
	if (pipe2(out, O_CLOEXEC) != 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* The daemon dies with the test process, even when a failed assertion or a crash
		 * skips the test's teardown: no stray daemons outlive a test run. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			_exit(127);
		int logfd = open(t->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(out[1], STDOUT_FILENO);
		if (logfd >= 0)
			dup2(logfd, STDERR_FILENO);
		/* Sanitized builds keep the Vulkan driver mapped in the daemon
		 * (tests/CMakeLists.txt, keep_icd.c), so LeakSanitizer can still see what its
		 * globals hold at exit. */
		const char *preload = getenv("GS_DAEMON_PRELOAD");
		if (preload && *preload)
			setenv("LD_PRELOAD", preload, 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	t->pid = pid;
	t->out_fd = out[0];
	t->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (wait_ready(t) != 0) {
		fprintf(stderr, "testd: %s did not become ready\n", argv[0]);
		gs_testd_dump_log(t);
		gs_testd_kill9(t);
		return -1;
	}
	return 0;
}

int gs_testd_start(gs_testd *t, const char *const *extra_args)
{
	memset(t, 0, sizeof(*t));
	t->pid = -1;
	t->pidfd = -1;
	t->out_fd = -1;
	snprintf(t->dir, sizeof(t->dir), "/tmp/gpusched-test-XXXXXX");
	if (!mkdtemp(t->dir))
		return -1;
	snprintf(t->url, sizeof(t->url), "ipc://%s/d.sock", t->dir);
	snprintf(t->db, sizeof(t->db), "%s/audit.db", t->dir);
	snprintf(t->log, sizeof(t->log), "%s/daemon.log", t->dir);
	return spawn(t, extra_args);
}

int gs_testd_spawn(gs_testd *t, const char *dir, const char *name, const char *const *argv)
{
	memset(t, 0, sizeof(*t));
	t->pid = -1;
	t->pidfd = -1;
	t->out_fd = -1;
	snprintf(t->dir, sizeof(t->dir), "%s", dir);
	snprintf(t->log, sizeof(t->log), "%s/%s.log", dir, name);
	return spawn_argv(t, argv);
}

int gs_testd_restart(gs_testd *t, const char *const *extra_args)
{
	return spawn(t, extra_args);
}

/* Waits for the process to exit (pidfd readable) and reaps it. */
static int wait_exit(gs_testd *t, int timeout_ms)
{
	if (t->pid <= 0)
		return -1;
	if (t->pidfd >= 0) {
		struct pollfd pfd = {.fd = t->pidfd, .events = POLLIN};
		int rc;
		do
			rc = poll(&pfd, 1, timeout_ms);
		while (rc < 0 && errno == EINTR);
		if (rc == 0)
			return -1;
	}
	int status = 0;
	if (waitpid(t->pid, &status, 0) != t->pid)
		return -1;
	t->pid = -1;
	if (t->pidfd >= 0)
		close(t->pidfd);
	if (t->out_fd >= 0)
		close(t->out_fd);
	t->pidfd = t->out_fd = -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int gs_testd_wait(gs_testd *t, int timeout_ms)
{
	return wait_exit(t, timeout_ms);
}

int gs_testd_stop(gs_testd *t)
{
	if (t->pid <= 0)
		return -1;
	kill(t->pid, SIGTERM);
	int rc = wait_exit(t, EXIT_TIMEOUT_MS);
	if (rc < 0) {
		fprintf(stderr, "testd: gpuschedd did not exit after SIGTERM\n");
		gs_testd_dump_log(t);
		gs_testd_kill9(t);
	}
	return rc;
}

void gs_testd_kill9(gs_testd *t)
{
	if (t->pid <= 0)
		return;
	kill(t->pid, SIGKILL);
	wait_exit(t, EXIT_TIMEOUT_MS);
}

bool gs_testd_alive(gs_testd *t)
{
	if (t->pid <= 0)
		return false;
	int status;
	if (waitpid(t->pid, &status, WNOHANG) == 0)
		return true;
	t->pid = -1; /* reaped: it exited */
	return false;
}

void gs_testd_cleanup(gs_testd *t)
{
	if (t->pid > 0)
		gs_testd_kill9(t);
	if (!t->dir[0])
		return;
	/* GS_TEST_KEEP=1 keeps the socket directory, audit file and daemon log for a post-mortem.
	 */
	const char *keep = getenv("GS_TEST_KEEP");
	if (keep && *keep && strcmp(keep, "0") != 0) {
		fprintf(stderr, "testd: kept %s\n", t->dir);
		return;
	}
	char cmd[320];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "testd: could not remove %s\n", t->dir);
}
