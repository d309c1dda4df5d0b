/*
 * Engine backends: one engine executes the patched packets of one node on its own thread and
 * reports "interrupts" back through a callback the scheduler registered. Engines never call up
 * into the scheduler; the callback only queues the interrupt and wakes the loop.
 *
 * A backend is a table of operations chosen by name at start-up ("emu", "null").
 */
#ifndef GSD_ENGINE_H
#define GSD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/spirv.h"

#include "isa.h"

/*
 * One segment's backing memory, as the engine sees it. The backend makes it (segment_create):
 * host memory for the emulator, device memory for a real GPU. base is where the CPU reads and
 * writes it, or NULL for memory the CPU cannot map (a GPU's memory beyond what its BAR
 * shows): then the daemon reaches it only through gsd_backend_segment_read/write/clear, which
 * copy through a staging buffer. base may change when the backend recovers a lost device
 * (recover), so the daemon never keeps a copy of it.
 */
typedef struct gsd_mem_segment {
	uint32_t id; /* segment id (1..31); 0 = unused slot */
	uint8_t *base;
	uint64_t size;
	/* base is private anonymous memory: whole pages can be given back to the kernel with
	 * MADV_DONTNEED, after which they read as zero (a cheap scrub). */
	bool reclaimable;
	void *priv; /* the backend's object for the segment (a VkBuffer's holder, say) */
} gsd_mem_segment;

#define GSD_MAX_SEGMENTS 32

/* The adapter memory an engine may touch: indexed by segment id. */
typedef struct gsd_memory {
	gsd_mem_segment seg[GSD_MAX_SEGMENTS];
} gsd_memory;

/* A GPU address range a packet may access (one per allocation-list entry). */
typedef struct gsd_range {
	uint64_t addr; /* GPU address (see isa.h) */
	uint64_t size;
	bool write;
} gsd_range;

/* A kernel a packet's DISPATCH commands name: its handle (the command's kernel field), the
 * backend's object for it (kernel_create), and what its module declares. */
typedef struct gsd_exec_kernel {
	uint64_t handle;
	void *impl;
	const gsd_kernel_info *info;
} gsd_exec_kernel;

/*
 * A patched packet handed to an engine. The scheduler owns it; the engine reads it from
 * submit() until it reports the packet's final interrupt (COMPLETED, PREEMPTED, FAULTED,
 * PAGE_FAULTED, ABORTED or ENGINE_TIMEOUT) and never touches it afterwards.
 *
 * Engine time of one run ("engine_ns"): on the wall clock, CLOCK_MONOTONIC time from the
 * start of the run; on the virtual clock, 100 ns for every command the run issues (a SPIN
 * resumed in its middle is issued again) plus the SPIN microseconds the run consumed, plus
 * 1 ns per 16 bytes a TRANSFER moves (rounded up per TRANSFER: a 16 GB/s copy engine).
 * The fields after `user` are zero in a plain submission, meaning "no limit, nothing done".
 */
typedef struct gsd_exec {
	uint64_t packet;
	uint64_t fence;
	uint32_t submit_flags; /* NullRendering: queue and complete, do not execute */
	const uint8_t *dma;    /* patched copy of the DMA buffer */
	size_t dma_len;
	size_t resume_offset; /* byte offset of the first command to run */
	const gsd_range *ranges;
	size_t nranges;
	/* The kernels of its DISPATCH commands (each one named once); the daemon checked every
	 * DISPATCH against its kernel's bindings and push constants at submission. */
	const gsd_exec_kernel *kernels;
	size_t nkernels;
	void *user; /* the scheduler's packet */

	/* Engine time this run may consume (0 = unlimited). Once the run has consumed it, the
	 * engine stops the packet at the next command boundary, or inside a preemptible SPIN,
	 * and reports PREEMPTED with stop_reason BUDGET. A NONPREEMPTIBLE SPIN runs whole. */
	uint64_t budget_ns;
	/* Virtual clock only, and only with budget_ns != 0: a NONPREEMPTIBLE SPIN that would
	 * carry the run past budget_ns + tdr_ns ends the packet with ENGINE_TIMEOUT instead
	 * (0 = never). On the wall clock the scheduler times out itself and calls reset(). */
	uint64_t tdr_ns;
	/* Microseconds already done of the SPIN at resume_offset (the spin_done_us of the
	 * interrupt that stopped it there); only its remainder runs. Ignored unless the
	 * command at resume_offset is a SPIN. */
	uint64_t spin_done_us;
} gsd_exec;

typedef enum gsd_irq_kind {
	GSD_IRQ_DMA_COMPLETED = 1,
	GSD_IRQ_DMA_PREEMPTED = 2,
	GSD_IRQ_DMA_FAULTED = 3,
	GSD_IRQ_DMA_PAGE_FAULTED = 4,
	GSD_IRQ_ABORTED = 5,      /* dropped by a reset */
	GSD_IRQ_FENCE_SIGNAL = 6, /* a SIGNAL command ran (MONITORED_FENCE_SIGNALED) */
	GSD_IRQ_STARTED = 7,      /* the engine started executing the packet */
	/* GPU_ENGINE_TIMEOUT (virtual clock): a NONPREEMPTIBLE SPIN would have run past
	 * budget_ns + tdr_ns. Final: the packet is off the engine, which goes on with the
	 * next one; engine_ns is budget_ns + tdr_ns exactly, stop_offset the SPIN. */
	GSD_IRQ_ENGINE_TIMEOUT = 8,
} gsd_irq_kind;

/* Why a packet was PREEMPTED. */
typedef enum gsd_stop_reason {
	GSD_STOP_NONE = 0,    /* every other interrupt */
	GSD_STOP_REQUEST = 1, /* preempt() */
	GSD_STOP_BUDGET = 2,  /* the run consumed exec->budget_ns (checked first when both hold) */
} gsd_stop_reason;

typedef struct gsd_irq {
	gsd_irq_kind kind;
	uint32_t node;
	gsd_exec *exec;
	/* PREEMPTED, ABORTED, ENGINE_TIMEOUT: offset of the first command not finished, where a
	 * resubmission resumes; FAULTED, PAGE_FAULTED: the bad command; COMPLETED: dma_len;
	 * STARTED: resume_offset; FENCE_SIGNAL: just past the SIGNAL. */
	size_t stop_offset;
	uint64_t sync;               /* FENCE_SIGNAL */
	uint64_t value;              /* FENCE_SIGNAL */
	uint64_t engine_ns;          /* engine time the packet consumed in this run */
	gsd_stop_reason stop_reason; /* PREEMPTED */
	/* PREEMPTED, ABORTED, ENGINE_TIMEOUT when stop_offset is a SPIN: its microseconds done
	 * so far, over all runs (pass it back as exec->spin_done_us); 0 otherwise. */
	uint64_t spin_done_us;
	/* Final interrupts: the run ended because the device was lost. The packet the backend
	 * blames (the one whose work saw the loss first) is FAULTED, every other packet running
	 * then is ABORTED (innocent, stop_offset where it resumes). No engine of the adapter runs
	 * anything before the daemon calls recover(); a packet submitted meanwhile is ABORTED
	 * with device_lost before its first command. */
	bool device_lost;
	/* Final interrupts of a backend with a GPU clock: CLOCK_MONOTONIC times at which the
	 * device started the run's first command and finished its last, from GPU timestamps
	 * (0: not known, as on the emulator, which runs on the thread's own clock). */
	uint64_t gpu_start_ns, gpu_end_ns;
	char detail[96]; /* fault text */
} gsd_irq;

/* Called on the engine thread. Must be cheap and thread-safe. */
typedef void (*gsd_irq_fn)(void *arg, const gsd_irq *irq);

/* The device behind one adapter, opened by its backend before segments and engines. */
typedef struct gsd_backend gsd_backend;

typedef struct gsd_backend_config {
	const char *adapter; /* adapter name, for messages */
	const char *device;  /* which device: "" = the first fitting one; an index; a name part */
	bool virtual_clock;  /* the daemon runs on the virtual clock */
	uint32_t nodes;      /* engines the adapter will create (queues worth asking for) */
	/* Memory segments in device memory the CPU does not map, reached through staging
	 * copies, even where mappable device memory exists (what a GPU without a resizable BAR
	 * offers; the config's "local_memory": "device"). */
	bool device_only_memory;
} gsd_backend_config;

/* What `gpusched info` shows of a backend's device. */
typedef struct gsd_backend_info {
	char device[128]; /* "emulated" or the physical device's name */
	char driver[128]; /* driver name and version; "" for the emulator */
	char api[32];     /* "Vulkan 1.3.230"; "" for the emulator */
	/* Hardware queues the nodes run on; 0: each node is its own engine. Fewer queues than
	 * nodes means nodes share a queue. */
	uint32_t queues;
	/* The longest a running packet can go on after a preemption request before it stops
	 * (ns); 0: at the next command boundary, or at once inside a SPIN. */
	uint64_t preempt_granularity_ns;
	/* How the CPU reaches the memory segments: "mapped" or "staging" (copies through a
	 * staging buffer); "" for the emulator, whose memory is host memory. */
	char cpu_access[16];
} gsd_backend_info;

/* What a backend's device lets a DISPATCH do, beside what its module may declare. */
typedef struct gsd_kernel_caps {
	gsd_kernel_limits module;
	uint32_t max_groups[3];     /* maxComputeWorkGroupCount */
	uint64_t max_storage_range; /* maxStorageBufferRange */
	uint64_t max_uniform_range; /* maxUniformBufferRange */
	uint32_t offset_align;      /* a binding's offset in its segment is a multiple */
	/* robustBufferAccess2 bounds an access by the binding's range rounded up to these (1 to
	 * 256 bytes): a binding's rounded end must stay inside its allocation. */
	uint32_t storage_range_align, uniform_range_align;
	uint64_t preempt_granularity_ns; /* 0: unknown (a dispatch runs whole) */
} gsd_kernel_caps;

/* Segment kinds as a backend places them. */
typedef enum gsd_mem_kind {
	GSD_MEM_LOCAL = 0,    /* the adapter's own memory (a memory segment) */
	GSD_MEM_APERTURE = 1, /* system memory the GPU reaches (an aperture segment) */
	GSD_MEM_SYSTEM = 2,   /* where evicted allocations live; host memory */
} gsd_mem_kind;

typedef struct gsd_engine_config {
	uint32_t node;
	gsd_backend *backend; /* the adapter's device (NULL for a backend without open) */
	const char *name;
	const gsd_memory *memory;
	bool virtual_clock; /* SPIN consumes engine time without sleeping */
	gsd_irq_fn irq;
	void *irq_arg;
} gsd_engine_config;

typedef struct gsd_engine gsd_engine;

typedef struct gsd_engine_ops {
	const char *name;
	/*
	 * The adapter level, each optional (NULL: host memory from mmap, no device). open
	 * returns 0, or -1 with a message in err naming what it looked for. segment_create
	 * makes size bytes of memory of a kind, mapped for the CPU at seg->base (host memory
	 * reads as zero, a device's may hold anything: the memory manager scrubs or fills every
	 * range before an allocation gets it); on failure -1 and a message.
	 */
	int (*open)(const gsd_backend_config *cfg, gsd_backend **out, char *err, size_t cap);
	void (*close)(gsd_backend *b);
	void (*describe)(const gsd_backend *b, gsd_backend_info *out);
	int (*segment_create)(gsd_backend *b, uint32_t id, gsd_mem_kind kind, uint64_t size,
	                      gsd_mem_segment *seg, char *err, size_t cap);
	void (*segment_destroy)(gsd_backend *b, gsd_mem_segment *seg);
	/*
	 * CPU access to a segment whose base is NULL (optional for a backend that always maps):
	 * copy len bytes at off to buf (to_segment false) or from buf (true); clear writes
	 * zeros. The range is idle (no packet touches it). 0, or -1 with a message.
	 */
	int (*segment_copy)(gsd_backend *b, const gsd_mem_segment *seg, uint64_t off, void *buf,
	                    uint64_t len, bool to_segment, char *err, size_t cap);
	int (*segment_clear)(gsd_backend *b, const gsd_mem_segment *seg, uint64_t off, uint64_t len,
	                     char *err, size_t cap);
	/*
	 * After a final interrupt with device_lost, once no engine of the adapter runs or holds
	 * a packet: recreates the device, every segment of mem (the bytes carried over; base may
	 * change) and the engines' own objects. 0; -1 with a message: the device stays lost; 1
	 * with a message: not now (the device still runs what hung it), ask again later.
	 * NULL: the backend never loses its device.
	 */
	int (*recover)(gsd_backend *b, gsd_memory *mem, char *err, size_t cap);
	/*
	 * Users' kernels, each optional (NULL: the backend runs none, and the daemon refuses
	 * kernels and DISPATCH on its adapters). kernel_caps fills what the device allows;
	 * kernel_create makes the backend's object (a compute pipeline) for a module that
	 * gsd_spirv_check accepted with those limits, whose reflection is info (copied); 0, or
	 * -1 with a message. It may run on any thread, beside the engines, other kernel_create
	 * calls and recover() (which waits for it), never beside close(). kernel_destroy runs once
	 * no packet that names it is on an engine. recover() makes every live kernel's objects
	 * anew.
	 */
	bool (*kernel_caps)(const gsd_backend *b, gsd_kernel_caps *out);
	int (*kernel_create)(gsd_backend *b, const void *code, size_t size, const char *entry,
	                     const gsd_kernel_info *info, void **out, char *err, size_t cap);
	void (*kernel_destroy)(gsd_backend *b, void *kernel);
	int (*create)(const gsd_engine_config *cfg, gsd_engine **out); /* starts its thread */
	/* Queues a packet; the engine runs its packets in submission order. */
	int (*submit)(gsd_engine *e, gsd_exec *x);
	/*
	 * Asks the engine to stop the running packet at its next command boundary or inside a
	 * preemptible SPIN (wall clock: within a thread wake-up; virtual clock: at boundaries
	 * only) with PREEMPTED, stop_reason REQUEST. Without a running packet it stops the next
	 * queued one before its first command; on an idle engine it is forgotten. Asynchronous:
	 * the request is used up by that packet's final interrupt, whatever it is (it may be
	 * COMPLETED, the packet having finished first), and never reaches a later packet.
	 */
	void (*preempt)(gsd_engine *e);
	/*
	 * Engine reset (TDR): aborts the running packet at once, even inside a NONPREEMPTIBLE
	 * SPIN, then every packet queued at the time of the call, in order, each with one
	 * ABORTED interrupt (a packet that finished meanwhile reports as it finished). Packets
	 * submitted after the call run normally; an idle engine ignores it. Asynchronous.
	 */
	void (*reset)(gsd_engine *e);
	/* Stops the thread after reporting ABORTED for every packet not yet finished. */
	void (*destroy)(gsd_engine *e);
} gsd_engine_ops;

extern const gsd_engine_ops gsd_engine_emu;
extern const gsd_engine_ops gsd_engine_null;
extern const gsd_engine_ops gsd_engine_vulkan;

/* The kernel a DISPATCH names, among x's; NULL if it names none of them. */
const gsd_exec_kernel *gsd_exec_find_kernel(const gsd_exec *x, uint64_t handle);

/* Looks a backend up by name; NULL if unknown. */
const gsd_engine_ops *gsd_engine_find(const char *name);

/* The adapter-level operations with the host defaults filled in for a backend that has none. */
int gsd_backend_open(const gsd_engine_ops *ops, const gsd_backend_config *cfg, gsd_backend **out,
                     char *err, size_t cap);
void gsd_backend_close(const gsd_engine_ops *ops, gsd_backend *b);
void gsd_backend_describe(const gsd_engine_ops *ops, const gsd_backend *b, gsd_backend_info *out);
int gsd_backend_segment_create(const gsd_engine_ops *ops, gsd_backend *b, uint32_t id,
                               gsd_mem_kind kind, uint64_t size, gsd_mem_segment *seg, char *err,
                               size_t cap);
void gsd_backend_segment_destroy(const gsd_engine_ops *ops, gsd_backend *b, gsd_mem_segment *seg);
/* CPU access to bytes [off, off + len) of a segment, through base where it is mapped, else
 * through the backend's staging copies. The caller has checked the range. 0, or -1 with a
 * message in err. */
int gsd_backend_segment_read(const gsd_engine_ops *ops, gsd_backend *b, const gsd_mem_segment *seg,
                             uint64_t off, void *out, uint64_t len, char *err, size_t cap);
int gsd_backend_segment_write(const gsd_engine_ops *ops, gsd_backend *b, const gsd_mem_segment *seg,
                              uint64_t off, const void *in, uint64_t len, char *err, size_t cap);
/* Zeros; whole pages of reclaimable memory are handed back to the kernel instead. */
int gsd_backend_segment_clear(const gsd_engine_ops *ops, gsd_backend *b, const gsd_mem_segment *seg,
                              uint64_t off, uint64_t len, char *err, size_t cap);

/* Host memory for a segment: size bytes reserved with mmap, backed only once touched. */
int gsd_host_segment_create(uint32_t id, uint64_t size, gsd_mem_segment *seg, char *err,
                            size_t cap);
void gsd_host_segment_destroy(gsd_mem_segment *seg);

/*
 * Checks one access of packet x against its allocation list and the segment table: returns
 * the segment and sets *offset, or NULL with a page-fault text in detail.
 */
const gsd_mem_segment *gsd_engine_check(const gsd_memory *mem, const gsd_exec *x, uint64_t addr,
                                        uint64_t size, bool write, uint64_t *offset, char *detail,
                                        size_t cap);

/* The memory one command touches, checked against the packet's allocation list: src is read
 * (NULL: nothing), dst written (NULL: nothing, as for NOP, SPIN, SIGNAL and empty commands). */
typedef struct gsd_cmd_access {
	const gsd_mem_segment *src, *dst;
	uint64_t src_off, src_len;
	uint64_t dst_off, dst_len;
} gsd_cmd_access;

/* Fills *a for cmd: returns 1 when cmd writes memory, 0 when it touches none (a->dst NULL:
 * nothing to do), or -1 with a page-fault (or bad TRANSFER) text in detail. A
 * converting TRANSFER must not overlap itself and needs a valid pitch. Every backend checks a
 * command with this before it runs any of it. */
int gsd_engine_cmd_access(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                          gsd_cmd_access *a, char *detail, size_t cap);

/* One binding of a DISPATCH, resolved against the packet's allocation list. */
typedef struct gsd_dispatch_binding {
	const gsd_mem_segment *seg;
	uint64_t off, range; /* bytes [off, off + range) of seg */
	uint32_t binding;    /* binding number in set 0 */
	bool write;          /* the kernel may write it */
	bool uniform;        /* a uniform buffer (else a storage buffer) */
} gsd_dispatch_binding;

/* Resolves a DISPATCH: its kernel among x's, and each binding (out[0..cmd->nbindings)) as the
 * range of its allocation-list entry, checked like any access (in the entry, written only
 * where the entry is written). 0, or -1 with a page-fault text in detail. */
int gsd_engine_dispatch_access(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                               const gsd_exec_kernel **kernel, gsd_dispatch_binding *out,
                               char *detail, size_t cap);

/* Do the read and written ranges share bytes? */
static inline bool gsd_cmd_access_overlaps(const gsd_cmd_access *a)
{
	return a->src && a->src == a->dst &&
	       (a->src_off < a->dst_off ? a->dst_off - a->src_off : a->src_off - a->dst_off) <
	               a->dst_len;
}

/* The engine half of the ISA: runs one command against memory within the packet's ranges.
 * Returns 0, or -1 with a reason in detail (a page fault). Shared by backends and tests. */
int gsd_engine_exec_cmd(const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                        char *detail, size_t detail_cap);

#endif
