/*
 * main() for the fuzz targets when they are not built with libFuzzer: feeds a target's
 * LLVMFuzzerTestOneInput deterministic inputs.
 *
 *   1. every seed of the built-in corpus (corpus.h: a valid serialized Request of every body
 *      type), unchanged;
 *   2. --iterations N inputs, each from its own PRNG stream derived from --seed and its index:
 *      random byte strings, and seeds with 1..4 stacked mutations (mostly one) (bit flips,
 * interesting bytes, truncation, insertion, deletion, splicing with another seed, length-prefix and
 * varint rewrites, fields duplicated or dropped);
 *   3. the contents of every FILE argument (a crash reproducer, a libFuzzer corpus).
 *
 * If a check aborts or a sanitizer reports, the input being run is first written to
 * fuzz-crash-<seed>-<index>.bin in the current directory; replay it by passing that file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Weak: present only when a sanitizer runtime is linked. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static const uint8_t *g_input;
static size_t g_input_len;
static char g_crash_path[128];

/* Async-signal-safe: open/write/close only. */
static void dump_input(void)
{
	if (!g_input || !g_crash_path[0])
		return;
	int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	size_t off = 0;
	while (off < g_input_len) {
		ssize_t n = write(fd, g_input + off, g_input_len - off);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	static const char note[] = "fuzz: the failing input was written to ";
	if (write(STDERR_FILENO, note, sizeof(note) - 1) < 0 ||
	    write(STDERR_FILENO, g_crash_path, strlen(g_crash_path)) < 0 ||
	    write(STDERR_FILENO, "\n", 1) < 0)
		return;
}

static void on_fatal_signal(int sig)
{
	dump_input();
	signal(sig, SIG_DFL);
	raise(sig);
}

typedef struct stats {
	uint64_t inputs, decoded, random, mutated, seeds, files;
} stats;

/* Runs one input from an exact-size heap copy, so a sanitizer sees any read past its end. */
static void run_one(const uint8_t *data, size_t len, uint64_t seed, uint64_t index, stats *st)
{
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy) {
		fprintf(stderr, "fuzz: out of memory\n");
		exit(1);
	}
	if (len)
		memcpy(copy, data, len);
	snprintf(g_crash_path, sizeof(g_crash_path), "fuzz-crash-%" PRIu64 "-%" PRIu64 ".bin", seed,
	         index);
	g_input = copy;
	g_input_len = len;
	LLVMFuzzerTestOneInput(copy, len);
	g_input = NULL;
	Gpusched__V1__Request *req = gpusched__v1__request__unpack(NULL, len, copy);
	if (req) {
		st->decoded++;
		gpusched__v1__request__free_unpacked(req, NULL);
	}
	st->inputs++;
	free(copy);
}

static int run_file(const char *path, uint64_t seed, size_t max_len, stats *st)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
		return -1;
	}
	uint8_t *buf = malloc(max_len ? max_len : 1);
	size_t len = buf ? fread(buf, 1, max_len, f) : 0;
	int rc = buf && !ferror(f) ? 0 : -1;
	fclose(f);
	if (rc == 0) {
		run_one(buf, len, seed, UINT64_MAX - st->files, st);
		st->files++;
	} else {
		fprintf(stderr, "fuzz: cannot read %s\n", path);
	}
	free(buf);
	return rc;
}

static int write_corpus(const char *dir, uint8_t *const *seeds, const size_t *lens, size_t n)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "fuzz: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/seed-%02zu.bin", dir, i);
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(seeds[i], 1, lens[i], f) != lens[i]) {
			fprintf(stderr, "fuzz: cannot write %s\n", path);
			if (f)
				fclose(f);
			return 1;
		}
		fclose(f);
	}
	printf("wrote %zu seeds to %s\n", n, dir);
	return 0;
}

static void usage(FILE *out, const char *prog)
{
	fprintf(out,
	        "Usage: %s [OPTIONS] [FILE...]\n"
	        "Runs the fuzz target over deterministic inputs: the built-in seed corpus, then\n"
	        "N random and mutated inputs, then each FILE.\n\n"
	        "Options:\n"
	        "  --iterations N     generated inputs (default 10000; 0 when FILEs are given)\n"
	        "  --seed S           PRNG seed (default 1)\n"
	        "  --first I          index of the first generated input (to reproduce one)\n"
	        "  --max-len N        longest input in bytes (default 4096)\n"
	        "  --write-corpus DIR write the seed corpus as files (for libFuzzer) and exit\n"
	        "  -h, --help         show this help\n",
	        prog);
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || !*s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t iterations = 10000, seed = 1, first = 0, max_len = 4096;
	bool iterations_given = false;
	const char *corpus_dir = NULL;
	int nfiles = 0;
	char **files = calloc((size_t)argc, sizeof(*files));
	if (!files)
		return 1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		uint64_t *target = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout, argv[0]);
			free(files);
			return 0;
		} else if (!strcmp(a, "--iterations")) {
			target = &iterations;
			iterations_given = true;
		} else if (!strcmp(a, "--seed")) {
			target = &seed;
		} else if (!strcmp(a, "--first")) {
			target = &first;
		} else if (!strcmp(a, "--max-len")) {
			target = &max_len;
		} else if (!strcmp(a, "--write-corpus") && i + 1 < argc) {
			corpus_dir = argv[++i];
			continue;
		} else if (a[0] == '-' && a[1]) {
			usage(stderr, argv[0]);
			free(files);
			return 2;
		} else {
			files[nfiles++] = argv[i];
			continue;
		}
		if (i + 1 >= argc || parse_u64(argv[++i], target) != 0) {
			fprintf(stderr, "fuzz: %s needs a non-negative number\n", a);
			free(files);
			return 2;
		}
	}
	if (max_len < 16 || max_len > (64u << 20)) {
		fprintf(stderr, "fuzz: --max-len must be 16..%u\n", 64u << 20);
		free(files);
		return 2;
	}
	if (nfiles && !iterations_given)
		iterations = 0;

	const gs_fuzz_handles handles = GS_FUZZ_DAEMON_HANDLES;
	uint8_t *seeds[GS_SEED_COUNT];
	size_t lens[GS_SEED_COUNT];
	for (int i = 0; i < GS_SEED_COUNT; i++) {
		seeds[i] = gs_fuzz_seed(i, &handles, 1000 + (uint64_t)i, &lens[i]);
		if (!seeds[i] || lens[i] > max_len) {
			fprintf(stderr, "fuzz: cannot build seed %d\n", i);
			return 1;
		}
	}
	int rc = 0;
	if (corpus_dir) {
		rc = write_corpus(corpus_dir, seeds, lens, GS_SEED_COUNT);
		goto out;
	}

	signal(SIGABRT, on_fatal_signal);
	signal(SIGSEGV, on_fatal_signal);
	signal(SIGBUS, on_fatal_signal);
	signal(SIGFPE, on_fatal_signal);
	signal(SIGILL, on_fatal_signal);
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(dump_input);

	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	stats st = {0};
	for (int i = 0; i < GS_SEED_COUNT; i++) {
		run_one(seeds[i], lens[i], seed, UINT64_MAX / 2 + (uint64_t)i, &st);
		st.seeds++;
	}

	uint8_t *buf = malloc(max_len);
	if (!buf) {
		rc = 1;
		goto out;
	}
	for (uint64_t n = 0; n < iterations; n++) {
		uint64_t index = first + n;
		/* One stream per index: input I is the same whatever ran before it. */
		gs_rng r = {seed * UINT64_C(0x9E3779B97F4A7C15) ^ (index + 1)};
		gs_rng_next(&r);
		size_t len;
		if (gs_rng_below(&r, 5) == 0) {
			len = gs_rng_below(&r, 4) ? gs_rng_below(&r, 65)
			                          : gs_rng_below(&r, max_len + 1);
			gs_rng_bytes(&r, buf, len);
			st.random++;
		} else {
			size_t s = gs_rng_below(&r, GS_SEED_COUNT);
			size_t o = gs_rng_below(&r, GS_SEED_COUNT);
			memcpy(buf, seeds[s], lens[s]);
			len = lens[s];
			for (unsigned m = gs_fuzz_depth(&r); m > 0; m--)
				len = gs_fuzz_mutate(&r, buf, len, max_len, seeds[o], lens[o]);
			st.mutated++;
		}
		run_one(buf, len, seed, index, &st);
	}
	free(buf);

	for (int i = 0; i < nfiles; i++)
		if (run_file(files[i], seed, max_len, &st) != 0)
			rc = 1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%s: %" PRIu64 " inputs (%" PRIu64 " seeds, %" PRIu64 " random, %" PRIu64
	       " mutated, %" PRIu64 " files), %" PRIu64
	       " decoded as a Request, %.2f s, seed %" PRIu64 "\n",
	       argv[0], st.inputs, st.seeds, st.random, st.mutated, st.files, st.decoded, secs,
	       seed);
out:
	for (int i = 0; i < GS_SEED_COUNT; i++)
		free(seeds[i]);
	free(files);
	return rc;
}
