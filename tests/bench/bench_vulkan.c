/*
 * bench_vulkan: the Vulkan backend against the emulator and against plain Vulkan, each figure a
 * ratio of two measurements made by this program in the same run.
 *
 *   round trip   a small packet (FILL 4 KiB, CHECKSUM of it) submitted through a real gpuschedd
 *                and waited for by the client (gs_submit + gs_packet_wait), on a daemon with
 *                --backend vulkan and on one with the emulator: p50 and p99, and their ratio;
 *   preemption   in process, an engine running a 1 s preemptible SPIN is asked to preempt at a
 *                varying moment: preempt() -> PREEMPTED interrupt, p50 and p99, on both
 *                backends (target on lavapipe: p99 <= 2 ms);
 *   transfer     in process, one paging packet of TRANSFERs (1 MiB each, as the daemon splits
 *                them) moving --mib MiB from a memory segment to system memory, submit -> final
 *                interrupt, against one plain vkCmdCopyBuffer of the same bytes between the same
 *                buffers, submit -> fence (target >= 0.8), best of --rounds each.
 *
 * Every loop is bounded by a count and by --seconds. Options: --device WHICH (as gpuschedd's),
 * --trials N, --mib N, --rounds N, --seconds S, --json (one object on stdout).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/vulkan.h"
#include "gpusched.h"
#include "isa.h"
#include "testd.h"
#include "wddm.h"

#define MiB          (1024u * 1024u)
#define SEG_MEM      1u
#define SEG_SYS      31u
#define CHUNK        MiB
#define MAX_TRIALS   5000
#define WAIT_NS      (30ull * 1000000000ull)
#define SPIN_US      1000000u
#define CALL_TIMEOUT 30000u

typedef struct options {
	const char *device;
	unsigned trials;
	unsigned mib;
	unsigned rounds;
	double seconds;
	bool json;
} options;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct_us(uint64_t *v, size_t n, unsigned pct)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t i = n * pct / 100;
	return (double)v[i < n ? i : n - 1] / 1e3;
}

/* ---- an engine in process ---- */

typedef struct rig {
	const gsd_engine_ops *ops;
	gsd_backend *backend;
	gsd_memory mem;
	gsd_engine *engine;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	gsd_exec *waiting;
	gsd_irq final;
	uint64_t final_ns;
	bool done;
} rig;

static void on_irq(void *arg, const gsd_irq *irq)
{
	rig *r = arg;
	if (irq->kind == GSD_IRQ_STARTED || irq->kind == GSD_IRQ_FENCE_SIGNAL)
		return;
	uint64_t t = now_ns();
	pthread_mutex_lock(&r->lock);
	r->final = *irq;
	r->final_ns = t;
	r->done = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static int rig_open(rig *r, const char *backend, const options *o, uint64_t mem_bytes)
{
	memset(r, 0, sizeof(*r));
	r->ops = gsd_engine_find(backend);
	char err[512];
	gsd_backend_config bc = {.adapter = "bench", .device = o->device};
	if (!r->ops || gsd_backend_open(r->ops, &bc, &r->backend, err, sizeof(err)) != 0) {
		fprintf(stderr, "bench_vulkan: backend %s: %s\n", backend, err);
		return -1;
	}
	if (gsd_backend_segment_create(r->ops, r->backend, SEG_MEM, GSD_MEM_LOCAL, mem_bytes,
	                               &r->mem.seg[SEG_MEM], err, sizeof(err)) != 0 ||
	    gsd_backend_segment_create(r->ops, r->backend, SEG_SYS, GSD_MEM_SYSTEM, mem_bytes,
	                               &r->mem.seg[SEG_SYS], err, sizeof(err)) != 0) {
		fprintf(stderr, "bench_vulkan: %s segments: %s\n", backend, err);
		return -1;
	}
	/* Touch every page before timing anything. */
	memset(r->mem.seg[SEG_MEM].base, 0x5a, mem_bytes);
	memset(r->mem.seg[SEG_SYS].base, 0, mem_bytes);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&r->lock, NULL);
	gsd_engine_config ec = {.node = 0,
	                        .backend = r->backend,
	                        .name = "bench",
	                        .memory = &r->mem,
	                        .irq = on_irq,
	                        .irq_arg = r};
	if (r->ops->create(&ec, &r->engine) != 0) {
		fprintf(stderr, "bench_vulkan: %s engine did not start\n", backend);
		return -1;
	}
	return 0;
}

static void rig_close(rig *r)
{
	if (r->engine)
		r->ops->destroy(r->engine);
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++)
		gsd_backend_segment_destroy(r->ops, r->backend, &r->mem.seg[i]);
	gsd_backend_close(r->ops, r->backend);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
}

/* Submits x (forgetting the last final interrupt); 0 or -1. */
static int rig_submit(rig *r, gsd_exec *x)
{
	pthread_mutex_lock(&r->lock);
	r->done = false;
	pthread_mutex_unlock(&r->lock);
	return r->ops->submit(r->engine, x);
}

/* Waits up to WAIT_NS from `from` for the final interrupt; false on a timeout. *final and
 * *at (when it came) are set either way. */
static bool rig_wait(rig *r, uint64_t from, gsd_irq *final, uint64_t *at)
{
	uint64_t end = from + WAIT_NS;
	struct timespec dl = {.tv_sec = (time_t)(end / 1000000000u),
	                      .tv_nsec = (long)(end % 1000000000u)};
	pthread_mutex_lock(&r->lock);
	while (!r->done)
		if (pthread_cond_timedwait(&r->cond, &r->lock, &dl) != 0)
			break;
	bool done = r->done;
	*final = r->final;
	*at = r->final_ns;
	pthread_mutex_unlock(&r->lock);
	return done;
}

/* Submits x and waits (bounded) for its final interrupt; returns its time, 0 on a timeout. */
static uint64_t rig_run(rig *r, gsd_exec *x, gsd_irq *final)
{
	uint64_t t0 = now_ns(), t1;
	if (rig_submit(r, x) != 0)
		return 0;
	return rig_wait(r, t0, final, &t1) ? t1 - t0 : 0;
}

/* ---- transfer ---- */

static double transfer_gibs(rig *r, const options *o, uint64_t bytes, uint64_t *best_ns)
{
	size_t n = bytes / CHUNK;
	size_t cap = n * 64 + 64;
	uint8_t *dma = malloc(cap);
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		gs_isa_cmd c = {.op = GS_OP_TRANSFER,
		                .src = gs_addr_make(SEG_MEM, i * CHUNK),
		                .dst = gs_addr_make(SEG_SYS, i * CHUNK),
		                .size = CHUNK};
		len += gs_isa_encode(&c, dma + len, cap - len);
	}
	gsd_range ranges[2] = {{gs_addr_make(SEG_MEM, 0), bytes, false},
	                       {gs_addr_make(SEG_SYS, 0), bytes, true}};
	*best_ns = UINT64_MAX;
	uint64_t t_end = now_ns() + (uint64_t)(o->seconds * 1e9);
	for (unsigned k = 0; k < o->rounds && now_ns() < t_end; k++) {
		gsd_exec x = {.packet = k + 1,
		              .fence = k + 1,
		              .submit_flags = GS_SUBMIT_PAGING,
		              .dma = dma,
		              .dma_len = len,
		              .ranges = ranges,
		              .nranges = 2};
		gsd_irq f;
		uint64_t ns = rig_run(r, &x, &f);
		if (!ns || f.kind != GSD_IRQ_DMA_COMPLETED) {
			fprintf(stderr, "bench_vulkan: transfer did not complete (%d %s)\n", f.kind,
			        f.detail);
			free(dma);
			return 0;
		}
		if (ns < *best_ns)
			*best_ns = ns;
	}
	free(dma);
	if (memcmp(r->mem.seg[SEG_MEM].base, r->mem.seg[SEG_SYS].base, bytes) != 0) {
		fprintf(stderr, "bench_vulkan: transferred bytes differ\n");
		return 0;
	}
	return (double)bytes / ((double)*best_ns / 1e9) / (1024.0 * 1024.0 * 1024.0);
}

static double plain_copy_gibs(rig *r, const options *o, uint64_t bytes)
{
	uint64_t best = UINT64_MAX;
	uint64_t t_end = now_ns() + (uint64_t)(o->seconds * 1e9);
	for (unsigned k = 0; k < o->rounds && now_ns() < t_end; k++) {
		uint64_t ns = gsd_vulkan_plain_copy(r->backend, &r->mem.seg[SEG_MEM],
		                                    &r->mem.seg[SEG_SYS], bytes);
		if (!ns)
			return 0;
		if (ns < best)
			best = ns;
	}
	return (double)bytes / ((double)best / 1e9) / (1024.0 * 1024.0 * 1024.0);
}

/* ---- preemption inside a SPIN ---- */

typedef struct lat {
	double p50, p99;
	size_t n;
} lat;

static int preempt_latency(rig *r, const options *o, lat *out)
{
	uint8_t dma[64];
	gs_isa_cmd c = {.op = GS_OP_SPIN, .micros = SPIN_US};
	size_t len = gs_isa_encode(&c, dma, sizeof(dma));
	uint64_t *v = calloc(o->trials, sizeof(*v));
	size_t n = 0;
	uint64_t t_end = now_ns() + (uint64_t)(o->seconds * 1e9);
	for (unsigned i = 0; i < o->trials && now_ns() < t_end; i++) {
		gsd_exec x = {.packet = i + 1, .fence = i + 1, .dma = dma, .dma_len = len};
		if (rig_submit(r, &x) != 0)
			break;
		/* Not synchronisation: lands the request at different points of the SPIN. */
		struct timespec pause = {.tv_nsec = 200000 + (long)(i % 8) * 100000};
		nanosleep(&pause, NULL);
		uint64_t t = now_ns(), at;
		r->ops->preempt(r->engine);
		gsd_irq f;
		bool ok = rig_wait(r, t, &f, &at) && f.kind == GSD_IRQ_DMA_PREEMPTED;
		if (!ok) {
			fprintf(stderr, "bench_vulkan: trial %u was not preempted\n", i);
			free(v);
			return -1;
		}
		v[n++] = at - t;
	}
	out->n = n;
	out->p50 = pct_us(v, n, 50);
	out->p99 = pct_us(v, n, 99);
	free(v);
	return 0;
}

/* A SPIN of 200 ms: wall time on the engine against the engine time it reports (1.0: the
 * engine never idles inside a SPIN). */
static double spin_wall_ratio(rig *r, uint64_t *engine_ns)
{
	uint8_t dma[64];
	gs_isa_cmd c = {.op = GS_OP_SPIN, .micros = 200000};
	size_t len = gs_isa_encode(&c, dma, sizeof(dma));
	gsd_exec x = {.packet = 1, .fence = 1, .dma = dma, .dma_len = len};
	gsd_irq f;
	uint64_t wall = rig_run(r, &x, &f);
	*engine_ns = f.engine_ns;
	return wall && f.engine_ns ? (double)wall / (double)f.engine_ns : 0;
}

/* ---- round trip through a daemon ---- */

static int round_trip(const char *backend, const options *o, lat *out)
{
	gs_testd d;
	const char *args[] = {"--backend", backend, "--log-level", "warn", NULL, NULL, NULL};
	if (o->device && *o->device) {
		args[4] = "--device";
		args[5] = o->device;
	}
	if (gs_testd_start(&d, args) != 0)
		return -1;
	gs_client *c = NULL;
	int rc = -1;
	uint64_t dev = 0, ctx = 0, al = 0;
	uint64_t *v = calloc(o->trials, sizeof(*v));
	if (gs_connect(d.url, NULL, &c) != 0 || gs_device_create(c, "bench", &dev) != 0)
		goto out;
	gs_context_desc cd;
	gs_context_desc_init(&cd, dev, 0);
	gs_allocation_desc ad = {.device = dev, .size = 8192};
	gs_allocation_placement pl;
	if (gs_context_create(c, &cd, &ctx, NULL) != 0 || gs_allocation_create(c, &ad, &pl) != 0)
		goto out;
	al = pl.allocation;
	gs_dmabuf buf;
	gs_dmabuf_init(&buf);
	gs_dmabuf_fill(&buf, al, 0, 4096, 0x01020304u);
	gs_dmabuf_checksum(&buf, al, 4096, al, 0, 4096);
	size_t n = 0;
	uint64_t t_end = now_ns() + (uint64_t)(o->seconds * 1e9);
	for (unsigned i = 0; i < o->trials + 20 && now_ns() < t_end; i++) {
		gs_submit_result sr;
		gs_packet_state st;
		uint64_t t0 = now_ns();
		if (gs_submit(c, ctx, &buf, 0, &sr) != 0 ||
		    gs_packet_wait(c, sr.packet, CALL_TIMEOUT, &st, NULL) != 0 ||
		    st != GS_PACKET_COMPLETED) {
			fprintf(stderr, "bench_vulkan: %s round trip %u failed\n", backend, i);
			gs_dmabuf_free(&buf);
			goto out;
		}
		if (i >= 20) /* warm-up */
			v[n++] = now_ns() - t0;
	}
	gs_dmabuf_free(&buf);
	out->n = n;
	out->p50 = pct_us(v, n, 50);
	out->p99 = pct_us(v, n, 99);
	rc = 0;
out:
	free(v);
	if (c)
		gs_close(c);
	gs_testd_stop(&d);
	gs_testd_cleanup(&d);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: bench_vulkan [--device WHICH] [--trials N] [--mib N] [--rounds N]\n"
	           "                    [--seconds S] [--json]\n"
	           "Round trip through gpuschedd (vulkan vs emu), preemption latency inside a\n"
	           "SPIN (both backends, in process), and paging TRANSFER throughput against a\n"
	           "plain vkCmdCopyBuffer of the same bytes. Defaults: 300 trials, 64 MiB,\n"
	           "5 rounds, 20 s per measurement. Exit status 0, 1 when a measurement failed,\n"
	           "2 usage.\n");
}

int main(int argc, char **argv)
{
	options o = {.device = "", .trials = 300, .mib = 64, .rounds = 5, .seconds = 20};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--json")) {
			o.json = true;
		} else if (val && !strcmp(a, "--device")) {
			o.device = val, i++;
		} else if (val && !strcmp(a, "--trials")) {
			o.trials = (unsigned)strtoul(val, NULL, 10), i++;
		} else if (val && !strcmp(a, "--mib")) {
			o.mib = (unsigned)strtoul(val, NULL, 10), i++;
		} else if (val && !strcmp(a, "--rounds")) {
			o.rounds = (unsigned)strtoul(val, NULL, 10), i++;
		} else if (val && !strcmp(a, "--seconds")) {
			o.seconds = strtod(val, NULL), i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (o.trials < 1 || o.trials > MAX_TRIALS || o.mib < 1 || o.mib > 1024 || o.rounds < 1 ||
	    o.seconds <= 0) {
		usage(stderr);
		return 2;
	}
	FILE *tab = o.json ? stderr : stdout;
	uint64_t bytes = (uint64_t)o.mib * MiB;

	lat rt_emu = {0}, rt_vk = {0}, pl_emu = {0}, pl_vk = {0};
	if (round_trip("emu", &o, &rt_emu) != 0 || round_trip("vulkan", &o, &rt_vk) != 0)
		return 1;

	rig r;
	uint64_t ns;
	if (rig_open(&r, "emu", &o, bytes) != 0)
		return 1;
	uint64_t spin_emu_ns, spin_vk_ns;
	double spin_emu = spin_wall_ratio(&r, &spin_emu_ns);
	double emu_gibs = transfer_gibs(&r, &o, bytes, &ns);
	int bad = preempt_latency(&r, &o, &pl_emu);
	rig_close(&r);
	if (rig_open(&r, "vulkan", &o, bytes) != 0)
		return 1;
	gsd_backend_info bi;
	gsd_backend_describe(r.ops, r.backend, &bi);
	uint32_t mem_flags = gsd_vulkan_segment_flags(r.backend, &r.mem.seg[SEG_MEM]);
	uint32_t sys_flags = gsd_vulkan_segment_flags(r.backend, &r.mem.seg[SEG_SYS]);
	double spin_vk = spin_wall_ratio(&r, &spin_vk_ns);
	double plain_gibs = plain_copy_gibs(&r, &o, bytes);
	double vk_gibs = transfer_gibs(&r, &o, bytes, &ns);
	bad |= preempt_latency(&r, &o, &pl_vk);
	rig_close(&r);
	if (bad || !emu_gibs || !vk_gibs || !plain_gibs)
		return 1;

	fprintf(tab, "device: %s, %s, %s\n", bi.device, bi.api, bi.driver);
	fprintf(tab, "memory segment: VkMemoryPropertyFlags 0x%x%s; system memory: 0x%x%s\n",
	        mem_flags, (mem_flags & 1u) ? " (device-local)" : "", sys_flags,
	        (sys_flags & 1u) ? " (device-local)" : "");
	fprintf(tab, "%-34s %12s %12s %10s\n", "measurement", "emu", "vulkan", "ratio");
	fprintf(tab, "%-34s %10.1f us %9.1f us %9.2fx\n", "round trip p50 (client)", rt_emu.p50,
	        rt_vk.p50, rt_vk.p50 / rt_emu.p50);
	fprintf(tab, "%-34s %10.1f us %9.1f us %9.2fx\n", "round trip p99 (client)", rt_emu.p99,
	        rt_vk.p99, rt_vk.p99 / rt_emu.p99);
	fprintf(tab, "%-34s %10.1f us %9.1f us %9.2fx\n", "preempt -> PREEMPTED p50", pl_emu.p50,
	        pl_vk.p50, pl_vk.p50 / pl_emu.p50);
	fprintf(tab, "%-34s %10.1f us %9.1f us %9.2fx   (target vulkan <= 2000 us)\n",
	        "preempt -> PREEMPTED p99", pl_emu.p99, pl_vk.p99, pl_vk.p99 / pl_emu.p99);
	fprintf(tab, "%-34s %12.3f %12.3f   (engine time %.1f / %.1f ms)\n",
	        "200 ms SPIN: wall / engine time", spin_emu, spin_vk, (double)spin_emu_ns / 1e6,
	        (double)spin_vk_ns / 1e6);
	fprintf(tab, "%-34s %8.2f GiB/s %7.2f GiB/s\n", "paging TRANSFER, 1 MiB pieces", emu_gibs,
	        vk_gibs);
	fprintf(tab, "%-34s %12s %7.2f GiB/s %9.2fx   (target >= 0.8)\n",
	        "plain vkCmdCopyBuffer, same bytes", "-", plain_gibs, vk_gibs / plain_gibs);
	if (o.json)
		printf("{\"device\":\"%s\",\"api\":\"%s\",\"rt_p50_us\":[%.1f,%.1f],"
		       "\"rt_p99_us\":[%.1f,%.1f],\"preempt_p50_us\":[%.1f,%.1f],"
		       "\"preempt_p99_us\":[%.1f,%.1f],\"transfer_gibs\":[%.3f,%.3f],"
		       "\"plain_copy_gibs\":%.3f,\"transfer_vs_plain\":%.3f,\"trials\":%zu,"
		       "\"spin_wall_per_engine\":[%.3f,%.3f]}\n",
		       bi.device, bi.api, rt_emu.p50, rt_vk.p50, rt_emu.p99, rt_vk.p99, pl_emu.p50,
		       pl_vk.p50, pl_emu.p99, pl_vk.p99, emu_gibs, vk_gibs, plain_gibs,
		       vk_gibs / plain_gibs, pl_vk.n, spin_emu, spin_vk);
	return 0;
}
