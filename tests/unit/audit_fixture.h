/*
 * The fixture of the audit unit tests: a fresh temporary directory with the path of an audit
 * file in it, and a teardown that removes the file with its WAL, shared memory and journal.
 * Included by test_audit.c and test_audit_vfs.c (after cmocka.h).
 */
#ifndef GS_TEST_AUDIT_FIXTURE_H
#define GS_TEST_AUDIT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct fixture {
	char dir[64];
	char path[96];
};

/* A fixture in a new directory named from prefix ("/tmp/gs-audit"). */
static struct fixture *audit_fixture_new(const char *prefix)
{
	struct fixture *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	snprintf(fx->dir, sizeof fx->dir, "%s-XXXXXX", prefix);
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->path, sizeof fx->path, "%s/audit.db", fx->dir);
	return fx;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	char p[128];
	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		snprintf(p, sizeof p, "%s%s", fx->path, suffix[i]);
		unlink(p);
	}
	rmdir(fx->dir);
	free(fx);
	return 0;
}

#endif
