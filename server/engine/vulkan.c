/*
 * The Vulkan backend: the same instruction set as the emulator, run on a real GPU (or on Mesa's
 * lavapipe, a Vulkan driver that runs on the CPU).
 *
 * Memory. Every segment is one VkBuffer over one VkDeviceMemory: memory segments prefer
 * DEVICE_LOCAL | HOST_VISIBLE memory, mapped for the CPU, and take DEVICE_LOCAL memory the CPU
 * cannot map where there is none big enough (or the config asks for it): the CPU then reaches
 * them through copies via a staging buffer. Aperture segments are HOST_VISIBLE memory that is
 * not device-local, and system memory is host memory (imported with
 * VK_EXT_external_memory_host where the device has it). The built-in kernels reach memory
 * through buffer device addresses, so they need no descriptor sets; a user's kernel (DISPATCH)
 * gets descriptors pushed over the ranges of these buffers its bindings name, and the device
 * runs with robustBufferAccess2, so it can reach nothing else.
 *
 * Commands. FILL is vkCmdFillBuffer (a kernel writes an unaligned head and tail); COPY and a
 * plain TRANSFER are vkCmdCopyBuffer (overlapping ranges go through a scratch buffer, in the
 * order memmove would use); CHECKSUM, Swizzle/Unswizzle and SPIN are compute kernels
 * (shaders/). Every access is checked against the packet's allocation list before anything is
 * recorded (gsd_engine_check), exactly as the emulator checks it.
 *
 * Pieces. A packet runs as a series of submissions: up to BATCH_CMDS commands or BATCH_BYTES
 * touched, with a barrier only between commands whose ranges conflict; then the engine
 * waits for them and looks for a reason to stop (preemption, budget, reset). A SPIN runs as
 * slices of SLICE_US of GPU time, with the same check between slices, so a preempted SPIN
 * resumes with its remainder just as the emulator's does. A SIGNAL ends a piece: the fence is
 * reported once everything before it has completed.
 *
 * Time. Engine time is GPU time: each submission is bracketed by timestamps (vkCmdWriteTimestamp)
 * and a run's engine time is the sum of its submissions' times. The first and last timestamps
 * of a run, moved onto the daemon's clock (VK_EXT_calibrated_timestamps, else a measured
 * offset), are the start and end its history shows.
 *
 * Queues. Each node gets a queue of its own where the family has enough; otherwise nodes share
 * (lavapipe has one queue) and take turns under a lock, and `gpusched info` says so. Every piece
 * begins with a barrier that makes visible what other queues wrote before it was submitted.
 *
 * Device loss. VK_ERROR_DEVICE_LOST (or the injected loss of GSD_VULKAN_INJECT_LOSS, for tests)
 * marks the device lost: the engine that saw it first faults its packet, every other engine
 * aborts its own at the start of the piece that was lost, and nothing runs until the daemon
 * calls recover(), which recreates the device, carries every segment's bytes over through the
 * CPU's mapping and rebuilds the engines' objects.
 */
#include "engine/swizzle.h"
#include "engine/thread.h"
#include "engine/vulkan.h"

#include "wddm.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <vulkan/vulkan.h>

/* The kernels, compiled from shaders/ to SPIR-V at build time. */
static const uint32_t spv_fill[] =
#include "fill.spv.inc"
        ;
static const uint32_t spv_swizzle[] =
#include "swizzle.spv.inc"
        ;
static const uint32_t spv_spin[] =
#include "spin.spv.inc"
        ;
static const uint32_t spv_xxh64[] =
#include "xxh64.spv.inc"
        ;

enum { K_FILL, K_SWIZZLE, K_SPIN, K_XXH64, K_COUNT };

static const struct {
	const uint32_t *code;
	size_t size;
} kernels[K_COUNT] = {
        [K_FILL] = {spv_fill, sizeof(spv_fill)},
        [K_SWIZZLE] = {spv_swizzle, sizeof(spv_swizzle)},
        [K_SPIN] = {spv_spin, sizeof(spv_spin)},
        [K_XXH64] = {spv_xxh64, sizeof(spv_xxh64)},
};

/* The push constants of every kernel (Args in shaders/args.glsl). */
typedef struct vk_args {
	uint64_t src, dst, size, aux, count;
	uint32_t mode, pad;
} vk_args;

#define LOCAL_SIZE 64u
/* A piece (one submission) ends after BATCH_CMDS commands or once its commands have touched
 * BATCH_BYTES: outside a SPIN, a preemption request waits for at most one piece. */
#define BATCH_CMDS  32u
#define BATCH_BYTES (64u << 20)
/* GPU time per SPIN slice. A request does not wait for the slice: the kernel polls stop
 * words the host sets at once (STOP_AT), so slices only bound how far the host's view of the
 * SPIN's progress lags, and how often the engine thread turns around. */
#define SLICE_US 2000u
/* How often the SPIN kernel reads its stop words (shaders/spin.comp). */
#define SPIN_POLL_STEPS 16u
/* Bytes of the scratch buffer overlapping copies go through, per step. */
#define SCRATCH_BYTES (512u << 10)
/* After them in the scratch buffer: the SPIN kernel's stop words (0: preempt, 1: reset),
 * where it writes its result, and the XXH64 accumulators a long CHECKSUM carries from one
 * dispatch to the next. */
#define STOP_AT   SCRATCH_BYTES
#define RESULT_AT (SCRATCH_BYTES + 64u)
#define LANES_AT  (SCRATCH_BYTES + 96u)
/* Bytes of 32-byte stripes one dispatch of the xxh64 kernel hashes: its loop stays far below
 * the 65,535 iterations after which lavapipe cuts an invocation's loops short. */
#define XXH_CHUNK (1u << 20)
/* Bytes of the staging buffer the CPU's copies to and from unmapped memory go through. */
#define STAGE_BYTES (4u << 20)
/* Queues asked for, at most: one per node. */
#define MAX_QUEUES 8u
/* Engines one adapter can have (recover rebuilds each). */
#define MAX_ENGINES 32u

typedef struct vk_engine vk_engine;

/* A segment's Vulkan objects (gsd_mem_segment.priv). */
typedef struct vk_seg {
	VkBuffer buf;
	VkDeviceMemory mem;
	VkDeviceAddress addr;
	gsd_mem_kind kind;
	uint64_t size;
	uint8_t *map;    /* where the CPU reaches it: the mapping or the imported memory; NULL */
	void *host;      /* imported host memory to unmap, or NULL */
	uint64_t mapped; /* bytes of host mapping */
	uint32_t type;   /* memory type index */
	bool staged;     /* a memory segment the CPU reaches by staging copies */
} vk_seg;

struct gsd_backend {
	VkInstance instance;
	VkPhysicalDevice phys;
	VkDevice dev;
	VkQueue queues[MAX_QUEUES];
	pthread_mutex_t queue_locks[MAX_QUEUES]; /* nodes beyond nqueues share */
	uint32_t nqueues, nodes;
	uint32_t family;
	VkPhysicalDeviceProperties props;
	VkPhysicalDeviceMemoryProperties mem;
	char driver[128];
	double ns_per_tick;
	uint64_t ts_mask;
	bool host_import; /* VK_EXT_external_memory_host */
	bool calibrated;  /* VK_EXT_calibrated_timestamps, with the CLOCK_MONOTONIC domain */
	PFN_vkGetCalibratedTimestampsEXT get_calibrated;
	/* Without it: CLOCK_MONOTONIC ns = ticks * ns_per_tick + tick_offset_ns, measured. */
	double tick_offset_ns;
	bool device_only;            /* memory segments in unmapped device memory (config) */
	atomic_uint staged_segments; /* memory segments the CPU reaches by staging copies */
	uint64_t import_align;
	PFN_vkGetMemoryHostPointerPropertiesEXT host_pointer_props;
	VkPipelineLayout layout;
	VkPipeline pipe[K_COUNT];
	double iters_per_us; /* SPIN kernel steps per microsecond of GPU time */
	/* The longest a running packet goes on after a request: a batch of commands is not
	 * interrupted; a SPIN polls every SPIN_POLL_STEPS steps. */
	uint64_t preempt_ns;

	/* Set by the first engine to see the device lost; cleared by recover(). */
	atomic_bool lost;
	/* A dispatch did not finish after the engine was reset: the GPU cannot stop it, so the
	 * device can be neither waited for nor recreated. Its objects and memory are never
	 * freed (the dispatch may still be writing its bindings), and recover() fails: the
	 * adapter is out of service until the daemon restarts. */
	atomic_bool hung;
	VkFence hung_fence;             /* the dispatch's submission (set before hung) */
	struct vk_kernel *hung_kernels; /* destroyed while hung: freed once the device is idle */
	bool stage_inflight;            /* a staged copy was given up on, unfinished */
	/* What a hung device's objects were, kept (never freed) until the process ends. */
	pthread_mutex_t kept_lock;
	uint64_t *kept;
	size_t nkept, capkept;
	uint32_t losses;
	/* Test hook (GSD_VULKAN_INJECT_LOSS=MICROS): a SPIN of exactly that many microseconds
	 * loses the device instead of running. 0: off. */
	uint64_t inject_spin_us;
	pthread_mutex_t engines_lock;
	vk_engine *engines[MAX_ENGINES];

	/* Users' kernels: possible where the device has push descriptors and robustBufferAccess2
	 * (every access a kernel makes is bounded by the range its binding names); what the
	 * device lets a module use; every live kernel, for recover() to make again. */
	bool ukernels_ok;
	gsd_kernel_caps ukernel_caps;
	PFN_vkCmdPushDescriptorSetKHR push_descriptor;
	pthread_mutex_t ukernels_lock;
	struct vk_kernel *ukernels;
	/* kernel_create runs on the daemon's worker threads: it holds this for reading while it
	 * uses the device, recover() for writing while it replaces it. */
	pthread_rwlock_t device_lock;

	/* The CPU's copies to and from unmapped memory (made at first use; the loop's thread). */
	pthread_mutex_t stage_lock;
	VkCommandPool stage_pool;
	VkCommandBuffer stage_cb;
	VkFence stage_fence;
	vk_seg stage;
};

/* Submissions one engine can have in flight: a SPIN keeps its next slice queued behind the
 * running one, so the GPU does not idle while the engine thread turns around. */
#define SLOTS 2

/* One node's engine state (gsd_engine.priv). */
struct vk_engine {
	gsd_backend *b;
	uint32_t queue; /* index into b->queues */
	VkCommandPool pool;
	VkCommandBuffer cbs[SLOTS];
	VkFence fences[SLOTS];
	VkQueryPool tss[SLOTS];
	/* The slot being recorded (one of the above). */
	VkCommandBuffer cb;
	VkFence fence;
	VkQueryPool ts;
	vk_seg scratch;
	/* The SPIN kernel's stop words, in host-visible coherent memory: set by preempt() and
	 * reset() on other threads, cleared by the engine thread when a SPIN starts. */
	_Atomic uint32_t *stop_words;
	_Atomic uint32_t no_stop_words[2]; /* where they point while the engine has no scratch */
	/* What the open piece's commands read and wrote since its last barrier: a command that
	 * touches none of it with a write on either side needs no barrier before it. */
	struct vk_access {
		const vk_seg *seg;
		uint64_t off, len;
		bool write;
	} acc[2 * BATCH_CMDS];
	unsigned nacc;
	bool unordered;       /* the next command may run without a barrier */
	uint64_t piece_bytes; /* bytes the open piece's commands touch */
	bool recording;
	unsigned ncmds;
	uint64_t gpu_ns; /* engine time of the run so far */
	/* Raw timestamps of the run's first piece's start and last piece's end (0: none yet). */
	uint64_t first_tick, last_tick;
	bool blamed; /* this run saw the device lost first */
	/* The engine whose thread runs this one's packets (set by each run), and whether the
	 * submission being waited for is a user's dispatch, which nothing can stop early. */
	gsd_engine *owner;
	bool in_dispatch;
	unsigned slot;        /* the slot being recorded */
	bool inflight[SLOTS]; /* submitted and not yet waited for to the end */
};

/* How often a wait looks for a reason to give up, and how long a dispatch may go on after
 * its engine was reset before the device counts as hung. */
#define WAIT_SLICE_NS 10000000u
#define HANG_GRACE_NS 100000000u

static const char *vk_strerror(VkResult r)
{
	switch (r) {
	case VK_ERROR_OUT_OF_HOST_MEMORY:
		return "out of host memory";
	case VK_ERROR_OUT_OF_DEVICE_MEMORY:
		return "out of device memory";
	case VK_ERROR_INITIALIZATION_FAILED:
		return "initialization failed";
	case VK_ERROR_DEVICE_LOST:
		return "device lost";
	case VK_ERROR_INCOMPATIBLE_DRIVER:
		return "no compatible Vulkan driver (ICD) installed";
	case VK_ERROR_EXTENSION_NOT_PRESENT:
		return "extension not present";
	case VK_ERROR_FEATURE_NOT_PRESENT:
		return "feature not present";
	case VK_ERROR_INVALID_EXTERNAL_HANDLE:
		return "invalid external handle";
	default:
		return "error";
	}
}

#define VK_FAIL(err, cap, r, what)                                                                 \
	(snprintf((err), (cap), "%s: %s (VkResult %d)", (what), vk_strerror(r), (int)(r)), -1)

/* ---- choosing a device ---- */

static bool has_extension(VkPhysicalDevice pd, const char *name)
{
	uint32_t n = 0;
	vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL);
	VkExtensionProperties *ext = calloc(n ? n : 1, sizeof(*ext));
	bool found = false;
	if (ext && vkEnumerateDeviceExtensionProperties(pd, NULL, &n, ext) == VK_SUCCESS)
		for (uint32_t i = 0; i < n && !found; i++)
			found = strcmp(ext[i].extensionName, name) == 0;
	free(ext);
	return found;
}

/* The queue family the engines use: compute (which can also copy) with timestamps. */
static int pick_family(VkPhysicalDevice pd)
{
	uint32_t n = 0;
	vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
	VkQueueFamilyProperties q[16];
	if (n > 16)
		n = 16;
	vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
	for (uint32_t i = 0; i < n; i++)
		if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && q[i].timestampValidBits)
			return (int)i;
	return -1;
}

/* NULL if device pd has what the backend needs, else what it lacks. */
static const char *lacks(VkPhysicalDevice pd)
{
	VkPhysicalDeviceProperties p;
	vkGetPhysicalDeviceProperties(pd, &p);
	if (p.apiVersion < VK_API_VERSION_1_2)
		return "Vulkan 1.2";
	VkPhysicalDeviceVulkan12Features f12 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
	                               .pNext = &f12};
	vkGetPhysicalDeviceFeatures2(pd, &f);
	if (!f.features.shaderInt64)
		return "shaderInt64";
	if (!f12.bufferDeviceAddress)
		return "bufferDeviceAddress";
	if (!f12.storageBuffer8BitAccess)
		return "storageBuffer8BitAccess";
	if (pick_family(pd) < 0)
		return "a compute queue with timestamps";
	return NULL;
}

/* Discrete GPUs first, the CPU (lavapipe) last. */
static int type_rank(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
		return 0;
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
		return 1;
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
		return 2;
	case VK_PHYSICAL_DEVICE_TYPE_CPU:
		return 4;
	default:
		return 3;
	}
}

static int choose_device(gsd_backend *b, const char *want, char *err, size_t cap)
{
	uint32_t n = 0;
	VkResult r = vkEnumeratePhysicalDevices(b->instance, &n, NULL);
	if (r != VK_SUCCESS)
		return VK_FAIL(err, cap, r, "vkEnumeratePhysicalDevices");
	if (n == 0) {
		snprintf(err, cap,
		         "no Vulkan device found (looked for any physical device; for one on the "
		         "CPU "
		         "install Mesa's lavapipe, Debian package mesa-vulkan-drivers)");
		return -1;
	}
	VkPhysicalDevice pds[16];
	if (n > 16)
		n = 16;
	vkEnumeratePhysicalDevices(b->instance, &n, pds);

	char *end = NULL;
	long index = want && *want ? strtol(want, &end, 10) : -1;
	bool by_index = want && *want && end && *end == '\0';
	char seen[512] = "";
	size_t used = 0;
	int best = -1, best_rank = 99;
	for (uint32_t i = 0; i < n; i++) {
		VkPhysicalDeviceProperties p;
		vkGetPhysicalDeviceProperties(pds[i], &p);
		const char *missing = lacks(pds[i]);
		if (used < sizeof(seen))
			used += (size_t)snprintf(seen + used, sizeof(seen) - used, "%s%u: %s%s%s",
			                         i ? "; " : "", i, p.deviceName,
			                         missing ? " lacks " : "", missing ? missing : "");
		bool named = !want || !*want ||
		             (by_index ? index == (long)i : strstr(p.deviceName, want) != NULL);
		if (!named || missing)
			continue;
		int rank = type_rank(p.deviceType);
		if (rank < best_rank) {
			best = (int)i;
			best_rank = rank;
		}
	}
	if (best < 0) {
		snprintf(
		        err, cap,
		        "no Vulkan device %s%s%swith Vulkan 1.2, shaderInt64, bufferDeviceAddress, "
		        "storageBuffer8BitAccess and a compute queue with timestamps (found: %s)",
		        want && *want ? "\"" : "", want && *want ? want : "",
		        want && *want ? "\" " : "", seen);
		return -1;
	}
	b->phys = pds[best];
	b->family = (uint32_t)pick_family(b->phys);
	vkGetPhysicalDeviceProperties(b->phys, &b->props);
	vkGetPhysicalDeviceMemoryProperties(b->phys, &b->mem);
	return 0;
}

/*
 * The features the device is made with: what the built-in kernels need (shaderInt64,
 * bufferDeviceAddress, 8-bit storage), and for users' kernels robust buffer access
 * (robustBufferAccess2: an access outside a binding's range reads zero and writes nothing)
 * and every optional feature the module allow-list knows that the device has (spirv.h).
 * Users' kernels are offered only with push descriptors and robustBufferAccess2; the limits
 * they must fit are noted in b->ukernel_caps.
 */
static void kernel_features(gsd_backend *b, VkPhysicalDeviceFeatures2 *f,
                            VkPhysicalDeviceVulkan11Features *f11,
                            VkPhysicalDeviceVulkan12Features *f12,
                            VkPhysicalDeviceRobustness2FeaturesEXT *rb2)
{
	bool ext = has_extension(b->phys, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) &&
	           has_extension(b->phys, VK_EXT_ROBUSTNESS_2_EXTENSION_NAME);
	VkPhysicalDeviceRobustness2FeaturesEXT have_rb2 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT};
	VkPhysicalDeviceVulkan11Features h11 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
	        .pNext = ext ? &have_rb2 : NULL};
	VkPhysicalDeviceVulkan12Features h12 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &h11};
	VkPhysicalDeviceFeatures2 h = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
	                               .pNext = &h12};
	vkGetPhysicalDeviceFeatures2(b->phys, &h);
	VkPhysicalDeviceRobustness2PropertiesEXT rb2p = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_PROPERTIES_EXT};
	VkPhysicalDeviceSubgroupProperties sub = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
	        .pNext = ext ? &rb2p : NULL};
	VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
	                                  .pNext = &sub};
	vkGetPhysicalDeviceProperties2(b->phys, &p2);

	b->ukernels_ok = ext && have_rb2.robustBufferAccess2 && h.features.robustBufferAccess;
	f12->bufferDeviceAddress = VK_TRUE;
	f12->storageBuffer8BitAccess = VK_TRUE;
	f->features.shaderInt64 = VK_TRUE;
	f->pNext = f12;
	f12->pNext = f11;
	if (!b->ukernels_ok)
		return;
	f->features.robustBufferAccess = VK_TRUE;
	f->features.shaderInt16 = h.features.shaderInt16;
	f->features.shaderFloat64 = h.features.shaderFloat64;
	f12->shaderInt8 = h12.shaderInt8;
	f12->shaderFloat16 = h12.shaderFloat16;
	f12->shaderBufferInt64Atomics = h12.shaderBufferInt64Atomics;
	f12->uniformAndStorageBuffer8BitAccess = h12.uniformAndStorageBuffer8BitAccess;
	f12->vulkanMemoryModel = h12.vulkanMemoryModel;
	f12->vulkanMemoryModelDeviceScope = h12.vulkanMemoryModelDeviceScope;
	f11->storageBuffer16BitAccess = h11.storageBuffer16BitAccess;
	f11->uniformAndStorageBuffer16BitAccess = h11.uniformAndStorageBuffer16BitAccess;
	rb2->robustBufferAccess2 = VK_TRUE;
	f11->pNext = rb2;

	const VkPhysicalDeviceLimits *l = &b->props.limits;
	gsd_kernel_caps *c = &b->ukernel_caps;
	memset(c, 0, sizeof(*c));
	uint32_t minor = VK_API_VERSION_MINOR(b->props.apiVersion);
	c->module.vulkan_minor = minor > 3 ? 3 : minor < 2 ? 2 : minor;
	for (int i = 0; i < 3; i++) {
		c->module.max_local_size[i] = l->maxComputeWorkGroupSize[i];
		c->max_groups[i] = l->maxComputeWorkGroupCount[i];
	}
	c->module.max_invocations = l->maxComputeWorkGroupInvocations;
	c->module.max_push_bytes = l->maxPushConstantsSize < GSD_KERNEL_MAX_PUSH
	                                   ? l->maxPushConstantsSize
	                                   : GSD_KERNEL_MAX_PUSH;
	c->module.max_shared_bytes = l->maxComputeSharedMemorySize;
	c->module.int8 = h12.shaderInt8;
	c->module.int16 = h.features.shaderInt16;
	c->module.float16 = h12.shaderFloat16;
	c->module.float64 = h.features.shaderFloat64;
	c->module.int64_atomics = h12.shaderBufferInt64Atomics;
	c->module.storage8 = h12.uniformAndStorageBuffer8BitAccess;
	c->module.storage16 =
	        h11.storageBuffer16BitAccess && h11.uniformAndStorageBuffer16BitAccess;
	const VkSubgroupFeatureFlags ops =
	        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT |
	        VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_BALLOT_BIT |
	        VK_SUBGROUP_FEATURE_SHUFFLE_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT |
	        VK_SUBGROUP_FEATURE_CLUSTERED_BIT | VK_SUBGROUP_FEATURE_QUAD_BIT;
	c->module.memory_model = h12.vulkanMemoryModel && h12.vulkanMemoryModelDeviceScope;
	c->module.subgroup = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
	                     (sub.supportedOperations & ops) == ops;
	c->max_storage_range = l->maxStorageBufferRange;
	c->max_uniform_range = l->maxUniformBufferRange;
	uint64_t align = l->minStorageBufferOffsetAlignment > l->minUniformBufferOffsetAlignment
	                         ? l->minStorageBufferOffsetAlignment
	                         : l->minUniformBufferOffsetAlignment;
	c->offset_align = (uint32_t)align;
	c->storage_range_align = rb2p.robustStorageBufferAccessSizeAlignment
	                                 ? (uint32_t)rb2p.robustStorageBufferAccessSizeAlignment
	                                 : 1;
	c->uniform_range_align = rb2p.robustUniformBufferAccessSizeAlignment
	                                 ? (uint32_t)rb2p.robustUniformBufferAccessSizeAlignment
	                                 : 1;
}

static int make_device(gsd_backend *b, char *err, size_t cap)
{
	VkPhysicalDeviceDriverProperties drv = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
	VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
	b->host_import = has_extension(b->phys, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
	drv.pNext = b->host_import ? &hostp : NULL;
	VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
	                                  .pNext = &drv};
	vkGetPhysicalDeviceProperties2(b->phys, &p2);
	snprintf(b->driver, sizeof(b->driver), "%.60s %.60s", drv.driverName, drv.driverInfo);
	b->import_align = hostp.minImportedHostPointerAlignment;

	uint32_t nq = 0;
	vkGetPhysicalDeviceQueueFamilyProperties(b->phys, &nq, NULL);
	VkQueueFamilyProperties qf[16];
	if (nq > 16)
		nq = 16;
	vkGetPhysicalDeviceQueueFamilyProperties(b->phys, &nq, qf);
	uint32_t bits = qf[b->family].timestampValidBits;
	b->ts_mask = bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
	b->ns_per_tick = b->props.limits.timestampPeriod;

	/* A queue per node where the family has them. */
	b->nqueues = b->nodes < qf[b->family].queueCount ? b->nodes : qf[b->family].queueCount;
	if (b->nqueues > MAX_QUEUES)
		b->nqueues = MAX_QUEUES;
	if (b->nqueues == 0)
		b->nqueues = 1;
	float prio[MAX_QUEUES];
	for (uint32_t i = 0; i < MAX_QUEUES; i++)
		prio[i] = 1.0f;
	VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
	                               .queueFamilyIndex = b->family,
	                               .queueCount = b->nqueues,
	                               .pQueuePriorities = prio};
	VkPhysicalDeviceVulkan12Features f12 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceVulkan11Features f11 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
	VkPhysicalDeviceRobustness2FeaturesEXT rb2 = {
	        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT};
	VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
	kernel_features(b, &f, &f11, &f12, &rb2);
	const char *ext[4];
	uint32_t next = 0;
	if (b->ukernels_ok) {
		ext[next++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
		ext[next++] = VK_EXT_ROBUSTNESS_2_EXTENSION_NAME;
	}
	if (b->host_import)
		ext[next++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
	bool calibrated = has_extension(b->phys, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
	if (calibrated)
		ext[next++] = VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME;
	VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
	                          .pNext = &f,
	                          .queueCreateInfoCount = 1,
	                          .pQueueCreateInfos = &qci,
	                          .enabledExtensionCount = next,
	                          .ppEnabledExtensionNames = ext};
	VkResult r = vkCreateDevice(b->phys, &dci, NULL, &b->dev);
	if (r != VK_SUCCESS) {
		b->dev = VK_NULL_HANDLE;
		return VK_FAIL(err, cap, r, "vkCreateDevice");
	}
	for (uint32_t i = 0; i < b->nqueues; i++)
		vkGetDeviceQueue(b->dev, b->family, i, &b->queues[i]);
	if (b->ukernels_ok) {
		b->push_descriptor = (PFN_vkCmdPushDescriptorSetKHR)vkGetDeviceProcAddr(
		        b->dev, "vkCmdPushDescriptorSetKHR");
		b->ukernels_ok = b->push_descriptor != NULL;
	}
	b->calibrated = false;
	if (calibrated) {
		PFN_vkGetPhysicalDeviceCalibrateableTimeDomainsEXT domains =
		        (PFN_vkGetPhysicalDeviceCalibrateableTimeDomainsEXT)vkGetInstanceProcAddr(
		                b->instance, "vkGetPhysicalDeviceCalibrateableTimeDomainsEXT");
		b->get_calibrated = (PFN_vkGetCalibratedTimestampsEXT)vkGetDeviceProcAddr(
		        b->dev, "vkGetCalibratedTimestampsEXT");
		VkTimeDomainEXT dom[8];
		uint32_t nd = 8;
		bool dev_dom = false, mono = false;
		if (domains && b->get_calibrated && domains(b->phys, &nd, dom) >= 0)
			for (uint32_t i = 0; i < nd && i < 8; i++) {
				dev_dom = dev_dom || dom[i] == VK_TIME_DOMAIN_DEVICE_EXT;
				mono = mono || dom[i] == VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT;
			}
		b->calibrated = dev_dom && mono;
	}
	if (b->host_import)
		b->host_pointer_props =
		        (PFN_vkGetMemoryHostPointerPropertiesEXT)vkGetDeviceProcAddr(
		                b->dev, "vkGetMemoryHostPointerPropertiesEXT");
	b->host_import = b->host_import && b->host_pointer_props;
	return 0;
}

/* The compute pipeline of a module's entry point with a layout (*out stays NULL on failure). */
static int make_pipeline(gsd_backend *b, const uint32_t *code, size_t size, const char *entry,
                         VkPipelineLayout layout, VkPipeline *out, char *err, size_t cap)
{
	VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
	                                .codeSize = size,
	                                .pCode = code};
	VkShaderModule mod;
	VkResult r = vkCreateShaderModule(b->dev, &mci, NULL, &mod);
	if (r != VK_SUCCESS)
		return VK_FAIL(err, cap, r, "vkCreateShaderModule");
	VkComputePipelineCreateInfo pci = {
	        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
	        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
	                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
	                  .module = mod,
	                  .pName = entry},
	        .layout = layout};
	r = vkCreateComputePipelines(b->dev, VK_NULL_HANDLE, 1, &pci, NULL, out);
	vkDestroyShaderModule(b->dev, mod, NULL);
	if (r != VK_SUCCESS) {
		*out = VK_NULL_HANDLE;
		return VK_FAIL(err, cap, r, "vkCreateComputePipelines");
	}
	return 0;
}

static int make_pipelines(gsd_backend *b, char *err, size_t cap)
{
	VkPushConstantRange pc = {
	        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = sizeof(vk_args)};
	VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
	                                  .pushConstantRangeCount = 1,
	                                  .pPushConstantRanges = &pc};
	VkResult r = vkCreatePipelineLayout(b->dev, &lci, NULL, &b->layout);
	if (r != VK_SUCCESS)
		return VK_FAIL(err, cap, r, "vkCreatePipelineLayout");
	for (int k = 0; k < K_COUNT; k++)
		if (make_pipeline(b, kernels[k].code, kernels[k].size, "main", b->layout,
		                  &b->pipe[k], err, cap) != 0)
			return -1;
	return 0;
}

/* ---- memory ---- */

/* A memory type allowed by `bits` with every flag of `want` and none of `avoid`, whose heap
 * holds size bytes; -1 if none. */
static int find_type(const gsd_backend *b, uint32_t bits, VkMemoryPropertyFlags want,
                     VkMemoryPropertyFlags avoid, uint64_t size)
{
	for (uint32_t i = 0; i < b->mem.memoryTypeCount; i++) {
		const VkMemoryType *t = &b->mem.memoryTypes[i];
		if ((bits & (1u << i)) && (t->propertyFlags & want) == want &&
		    !(t->propertyFlags & avoid) && b->mem.memoryHeaps[t->heapIndex].size >= size)
			return (int)i;
	}
	return -1;
}

/* The memory type of a segment kind, best first. A memory segment the CPU maps (map) wants
 * DEVICE_LOCAL | HOST_VISIBLE memory and takes DEVICE_LOCAL memory it cannot map where none is
 * big enough; one the CPU must not map takes DEVICE_LOCAL memory, not host-visible where
 * the device has such. */
static int type_for(const gsd_backend *b, uint32_t bits, gsd_mem_kind kind, bool map, uint64_t size)
{
	const VkMemoryPropertyFlags host =
	        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
	int t = -1;
	switch (kind) {
	case GSD_MEM_LOCAL:
		if (map)
			t = find_type(b, bits, host | local, 0, size);
		if (t < 0)
			t = find_type(b, bits, local, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, size);
		if (t < 0)
			t = find_type(b, bits, local, 0, size);
		break;
	case GSD_MEM_APERTURE:
		t = find_type(b, bits, host, local, size);
		break;
	case GSD_MEM_SYSTEM:
		t = find_type(b, bits, host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, local, size);
		if (t < 0)
			t = find_type(b, bits, host, local, size);
		break;
	}
	return t >= 0 ? t : find_type(b, bits, host, 0, size);
}

static VkDeviceAddress buffer_address(gsd_backend *b, VkBuffer buf)
{
	VkBufferDeviceAddressInfo ai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
	                                .buffer = buf};
	return vkGetBufferDeviceAddress(b->dev, &ai);
}

/* Notes an object of a hung device, which is never destroyed: the device still runs a
 * dispatch. (Kept where the leak checker, and a debugger, can see it.) */
static void keep(gsd_backend *b, uint64_t handle)
{
	if (!handle)
		return;
	pthread_mutex_lock(&b->kept_lock);
	if (b->nkept == b->capkept) {
		size_t cap = b->capkept ? 2 * b->capkept : 64;
		uint64_t *n = realloc(b->kept, cap * sizeof(*n));
		if (n) {
			b->kept = n;
			b->capkept = cap;
		}
	}
	if (b->nkept < b->capkept)
		b->kept[b->nkept++] = handle;
	pthread_mutex_unlock(&b->kept_lock);
}

static void seg_free(gsd_backend *b, vk_seg *s)
{
	if (atomic_load(&b->hung)) {
		/* A dispatch may still write it: it stays, with the device. */
		keep(b, (uint64_t)s->buf);
		keep(b, (uint64_t)s->mem);
		keep(b, (uint64_t)(uintptr_t)s->host);
		memset(s, 0, sizeof(*s));
		return;
	}
	if (s->buf)
		vkDestroyBuffer(b->dev, s->buf, NULL);
	if (s->mem) {
		if (!s->host && s->map)
			vkUnmapMemory(b->dev, s->mem);
		vkFreeMemory(b->dev, s->mem, NULL);
	}
	if (s->host)
		munmap(s->host, s->mapped);
	memset(s, 0, sizeof(*s));
}

/*
 * Makes one buffer of size bytes over memory of `kind`, at s->map for the CPU where it is
 * host-visible and `map` (type_for). System memory is imported host memory where the device
 * can import it: the pages at reuse (of an earlier import of the same size) if not NULL, else
 * new ones.
 */
static int seg_make(gsd_backend *b, gsd_mem_kind kind, uint64_t size, bool map, void *reuse,
                    vk_seg *s, char *err, size_t cap)
{
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->size = size;
	bool import = kind == GSD_MEM_SYSTEM && b->host_import && b->import_align;
	const VkExternalMemoryHandleTypeFlagBits host_handle =
	        VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
	VkExternalMemoryBufferCreateInfo ebi = {
	        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
	        .handleTypes = host_handle};
	VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
	                          .pNext = import ? &ebi : NULL,
	                          .size = size,
	                          .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
	                                   VK_BUFFER_USAGE_TRANSFER_DST_BIT |
	                                   VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
	                                   VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
	                          .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
	VkResult r = vkCreateBuffer(b->dev, &bci, NULL, &s->buf);
	if (r != VK_SUCCESS) {
		s->buf = VK_NULL_HANDLE;
		return VK_FAIL(err, cap, r, "vkCreateBuffer (a segment is one buffer)");
	}
	VkMemoryRequirements req;
	vkGetBufferMemoryRequirements(b->dev, s->buf, &req);

	VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
	                                   .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
	VkImportMemoryHostPointerInfoEXT imp = {
	        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
	        .pNext = &flags,
	        .handleType = host_handle};
	uint32_t bits = req.memoryTypeBits;
	uint64_t alloc = req.size;
	if (import) {
		alloc = (req.size + b->import_align - 1) / b->import_align * b->import_align;
		void *m = reuse ? reuse
		                : mmap(NULL, alloc, PROT_READ | PROT_WRITE,
		                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		VkMemoryHostPointerPropertiesEXT hp = {
		        .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
		if (m != MAP_FAILED &&
		    b->host_pointer_props(b->dev, host_handle, m, &hp) == VK_SUCCESS &&
		    (hp.memoryTypeBits & bits)) {
			s->host = m;
			s->mapped = alloc;
			imp.pHostPointer = m;
			bits &= hp.memoryTypeBits;
		} else if (reuse) {
			seg_free(b, s);
			snprintf(err, cap,
			         "the device no longer imports the segment's host memory");
			return -1;
		} else {
			if (m != MAP_FAILED)
				munmap(m, alloc);
			import = false;
			alloc = req.size;
		}
	}
	int type = type_for(b, bits, kind, map, alloc);
	if (type < 0) {
		seg_free(b, s);
		snprintf(err, cap, "no host-visible memory type with a heap of %" PRIu64 " bytes",
		         size);
		return -1;
	}
	s->type = (uint32_t)type;
	VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
	                            .pNext = import ? (void *)&imp : (void *)&flags,
	                            .allocationSize = alloc,
	                            .memoryTypeIndex = s->type};
	r = vkAllocateMemory(b->dev, &mai, NULL, &s->mem);
	if (r != VK_SUCCESS) {
		s->mem = VK_NULL_HANDLE;
		seg_free(b, s);
		return VK_FAIL(err, cap, r, "vkAllocateMemory");
	}
	r = vkBindBufferMemory(b->dev, s->buf, s->mem, 0);
	if (r != VK_SUCCESS) {
		seg_free(b, s);
		return VK_FAIL(err, cap, r, "vkBindBufferMemory");
	}
	if (import) {
		s->map = s->host;
	} else if (map && (b->mem.memoryTypes[s->type].propertyFlags &
	                   VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
		void *p = NULL;
		r = vkMapMemory(b->dev, s->mem, 0, VK_WHOLE_SIZE, 0, &p);
		if (r != VK_SUCCESS) {
			seg_free(b, s);
			return VK_FAIL(err, cap, r, "vkMapMemory");
		}
		s->map = p;
	}
	s->addr = buffer_address(b, s->buf);
	return 0;
}

static int vk_segment_create(gsd_backend *b, uint32_t id, gsd_mem_kind kind, uint64_t size,
                             gsd_mem_segment *seg, char *err, size_t cap)
{
	memset(seg, 0, sizeof(*seg));
	vk_seg *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	bool map = kind != GSD_MEM_LOCAL || !b->device_only;
	if (seg_make(b, kind, size, map, NULL, s, err, cap) != 0) {
		free(s);
		return -1;
	}
	/* Not reclaimable: giving pages back under a device's mapping (or a pinned import)
	 * would not zero what the GPU sees. The daemon scrubs new allocations with memset, or
	 * through the backend where the CPU does not map the memory. */
	*seg = (gsd_mem_segment){.id = id, .base = s->map, .size = size, .priv = s};
	s->staged = !s->map;
	if (s->staged)
		atomic_fetch_add(&b->staged_segments, 1);
	return 0;
}

static void vk_segment_destroy(gsd_backend *b, gsd_mem_segment *seg)
{
	vk_seg *s = seg->priv;
	if (s) {
		if (s->staged)
			atomic_fetch_sub(&b->staged_segments, 1);
		seg_free(b, s);
		free(s);
	}
	memset(seg, 0, sizeof(*seg));
}

static uint64_t clock_ns(clockid_t id);

/* ---- recording and submitting ---- */

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access)
{
	VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
	                      .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
	                      .dstAccessMask = dst_access};
	vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, dst_stage, 0, 1, &mb, 0, NULL,
	                     0, NULL);
}

/* Starts a piece if none is open, and orders the next command after the previous ones. */
static void record_next(vk_engine *v)
{
	if (!v->recording) {
		VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		                               .flags =
		                                       VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
		vkResetCommandBuffer(v->cb, 0);
		vkBeginCommandBuffer(v->cb, &bi);
		vkCmdResetQueryPool(v->cb, v->ts, 0, 2);
		vkCmdWriteTimestamp(v->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, v->ts, 0);
		/* What another queue wrote before this piece was submitted (its fence waited
		 * for, so already available) becomes visible to this piece. */
		if (v->b->nqueues > 1)
			barrier(v->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
			        VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
		v->recording = true;
		v->ncmds = 0;
	} else if (!v->unordered) {
		barrier(v->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
		        VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
	}
	v->unordered = false;
	v->ncmds++;
}

static bool overlaps(const struct vk_access *a, const vk_seg *s, uint64_t off, uint64_t len)
{
	return s && a->seg == s && off < a->off + a->len && a->off < off + len;
}

/*
 * Notes the next command's read (rs, may be NULL) and write, and whether it can go without a
 * barrier: it may not read what an earlier command of the piece wrote, nor write what one read
 * or wrote. After a barrier only the new command's accesses are left to track.
 */
static void order(vk_engine *v, const vk_seg *rs, uint64_t ro, uint64_t rn, const vk_seg *ws,
                  uint64_t wo, uint64_t wn)
{
	bool hazard = v->nacc + 2 > sizeof(v->acc) / sizeof(v->acc[0]);
	for (unsigned i = 0; i < v->nacc && !hazard; i++)
		hazard = (v->acc[i].write && overlaps(&v->acc[i], rs, ro, rn)) ||
		         overlaps(&v->acc[i], ws, wo, wn);
	if (hazard)
		v->nacc = 0;
	v->unordered = !hazard;
	if (rs)
		v->acc[v->nacc++] = (struct vk_access){rs, ro, rn, false};
	v->acc[v->nacc++] = (struct vk_access){ws, wo, wn, true};
	v->piece_bytes += rn + wn;
}

static void use_slot(vk_engine *v, unsigned i)
{
	v->slot = i;
	v->cb = v->cbs[i];
	v->fence = v->fences[i];
	v->ts = v->tss[i];
}

/*
 * Marks the device lost. True for the first to do so since the last recovery: that engine's
 * packet is the one blamed.
 */
static bool lose(gsd_backend *b)
{
	bool expected = false;
	return atomic_compare_exchange_strong(&b->lost, &expected, true);
}

/* Passes r on; a device loss in it marks the device lost (and this engine's packet blamed if
 * it is the first to see it). Other engines notice the mark between pieces (stop_here). */
static VkResult check_lost(vk_engine *v, VkResult r)
{
	if (r == VK_ERROR_DEVICE_LOST && lose(v->b))
		v->blamed = true;
	return r;
}

/* Ends the open piece of the current slot and submits it. */
static VkResult submit(vk_engine *v)
{
	gsd_backend *b = v->b;
	v->recording = false;
	v->nacc = 0;
	v->piece_bytes = 0;
	barrier(v->cb, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
	vkCmdWriteTimestamp(v->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, v->ts, 1);
	VkResult r = vkEndCommandBuffer(v->cb);
	if (r != VK_SUCCESS)
		return r;
	VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
	                   .commandBufferCount = 1,
	                   .pCommandBuffers = &v->cb};
	pthread_mutex_lock(&b->queue_locks[v->queue]);
	r = vkQueueSubmit(b->queues[v->queue], 1, &si, v->fence);
	pthread_mutex_unlock(&b->queue_locks[v->queue]);
	if (r == VK_SUCCESS)
		v->inflight[v->slot] = true;
	return check_lost(v, r);
}

/*
 * Waits for a submission's fence, in slices. Every submission but a user's dispatch ends by
 * itself soon (pieces are bounded, a SPIN polls its stop words). A dispatch can run for as long
 * as its kernel loops: once the engine has been reset (TDR) and the dispatch has still not
 * finished HANG_GRACE_NS later, the device is hung and this engine's packet is blamed. Every
 * other wait on the device gives up then too: what is queued behind the dispatch never runs.
 */
static VkResult wait_fence(vk_engine *v, VkFence fence)
{
	gsd_backend *b = v->b;
	uint64_t reset_at = 0;
	for (;;) {
		VkResult r = vkWaitForFences(b->dev, 1, &fence, VK_TRUE, WAIT_SLICE_NS);
		if (r != VK_TIMEOUT)
			return r;
		if (atomic_load(&b->hung))
			return VK_ERROR_DEVICE_LOST;
		if (!v->in_dispatch || !v->owner || !gsd_engine_abort_pending(v->owner))
			continue;
		uint64_t now = clock_ns(CLOCK_MONOTONIC);
		if (!reset_at)
			reset_at = now;
		else if (now - reset_at >= HANG_GRACE_NS) {
			/* Lost first, then hung: an engine that sees the hang is never first. */
			v->blamed = lose(b);
			b->hung_fence = fence;
			atomic_store(&b->hung, true);
			return VK_ERROR_DEVICE_LOST;
		}
	}
}

/* Waits for the submission of slot i; its GPU time joins v->gpu_ns and, if ns is not NULL,
 * is stored there. */
static VkResult await(vk_engine *v, unsigned i, uint64_t *ns)
{
	gsd_backend *b = v->b;
	VkResult r = wait_fence(v, v->fences[i]);
	if (r == VK_SUCCESS) {
		vkResetFences(b->dev, 1, &v->fences[i]);
		v->inflight[i] = false;
	}
	if ((r = check_lost(v, r)) != VK_SUCCESS)
		return r;
	uint64_t t[2] = {0, 0};
	r = vkGetQueryPoolResults(b->dev, v->tss[i], 0, 2, sizeof(t), t, sizeof(t[0]),
	                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
	uint64_t took = 0;
	if (r == VK_SUCCESS) {
		took = (uint64_t)((double)((t[1] - t[0]) & b->ts_mask) * b->ns_per_tick);
		if (!v->first_tick)
			v->first_tick = t[0] ? t[0] : 1;
		v->last_tick = t[1];
	}
	v->gpu_ns += took;
	if (ns)
		*ns = took;
	return check_lost(v, r == VK_ERROR_DEVICE_LOST ? r : VK_SUCCESS);
}

/*
 * Submits the open piece (slot 0) and waits for it; its GPU time joins v->gpu_ns. Returns the
 * VkResult (VK_ERROR_DEVICE_LOST when the device is gone).
 */
static VkResult flush(vk_engine *v)
{
	if (!v->recording)
		return VK_SUCCESS;
	VkResult r = submit(v);
	return r != VK_SUCCESS ? r : await(v, 0, NULL);
}

/* Records kernel k over `count` invocations of LOCAL_SIZE-wide groups. */
static void dispatch(vk_engine *v, int k, vk_args *a)
{
	const gsd_backend *b = v->b;
	uint64_t groups = (a->count + LOCAL_SIZE - 1) / LOCAL_SIZE;
	uint32_t gx = groups < 65535u ? (uint32_t)groups : 65535u;
	uint32_t gy = gx ? (uint32_t)((groups + gx - 1) / gx) : 0;
	if (!gx)
		return;
	vkCmdBindPipeline(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, b->pipe[k]);
	vkCmdPushConstants(v->cb, b->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(*a), a);
	vkCmdDispatch(v->cb, gx, gy, 1);
}

static const vk_seg *seg_of(const gsd_mem_segment *m)
{
	return m->priv;
}

/* Bytes [off, off + n) of segment s get the pattern, byte i of it being pattern byte
 * (phase + i) % 4. */
static void record_fill(vk_engine *v, const vk_seg *s, uint64_t off, uint64_t n, uint32_t pattern)
{
	uint64_t head = (4 - off % 4) % 4;
	if (head > n)
		head = n;
	uint64_t mid = (n - head) & ~UINT64_C(3);
	uint64_t tail = n - head - mid;
	record_next(v);
	if (head) {
		vk_args a = {.dst = s->addr + off, .aux = pattern, .count = head, .mode = 0};
		dispatch(v, K_FILL, &a);
	}
	if (mid) {
		uint32_t sh = (uint32_t)(8 * head);
		uint32_t rot = sh ? (pattern >> sh) | (pattern << (32 - sh)) : pattern;
		vkCmdFillBuffer(v->cb, s->buf, off + head, mid, rot);
	}
	if (tail) {
		vk_args a = {.dst = s->addr + off + head + mid,
		             .aux = pattern,
		             .count = tail,
		             .mode = (uint32_t)((head + mid) % 4)};
		dispatch(v, K_FILL, &a);
	}
}

/* memmove of n bytes between segments (or within one): a straight copy where the ranges do not
 * overlap, else through the scratch buffer in steps, forwards when the destination is below the
 * source and backwards otherwise, so no step overwrites bytes a later step reads. */
static void record_move(vk_engine *v, const vk_seg *ss, uint64_t so, const vk_seg *ds, uint64_t dof,
                        uint64_t n)
{
	bool overlap = ss == ds && (so < dof ? dof - so : so - dof) < n;
	record_next(v);
	if (!overlap) {
		VkBufferCopy c = {.srcOffset = so, .dstOffset = dof, .size = n};
		vkCmdCopyBuffer(v->cb, ss->buf, ds->buf, 1, &c);
		return;
	}
	if (so == dof)
		return;
	bool forward = dof < so;
	for (uint64_t done = 0; done < n;) {
		uint64_t step = n - done < SCRATCH_BYTES ? n - done : SCRATCH_BYTES;
		uint64_t at = forward ? done : n - done - step;
		VkBufferCopy in = {.srcOffset = so + at, .dstOffset = 0, .size = step};
		VkBufferCopy out = {.srcOffset = 0, .dstOffset = dof + at, .size = step};
		if (done)
			barrier(v->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
			        VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
		vkCmdCopyBuffer(v->cb, ss->buf, v->scratch.buf, 1, &in);
		barrier(v->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
		        VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
		vkCmdCopyBuffer(v->cb, v->scratch.buf, ds->buf, 1, &out);
		done += step;
	}
}

/* Swizzle (unswizzle false) or Unswizzle of n bytes: the whole bands by the kernel, the linear
 * tail by a copy at the same offsets. */
static void record_swizzle(vk_engine *v, const vk_seg *ss, uint64_t so, const vk_seg *ds,
                           uint64_t dof, uint64_t n, uint32_t pitch, bool unswizzle)
{
	uint64_t band = gsd_swizzle_band(pitch);
	uint64_t tiled = n / band * band;
	record_next(v);
	if (tiled) {
		vk_args a = {.src = ss->addr + so,
		             .dst = ds->addr + dof,
		             .size = tiled,
		             .aux = pitch,
		             .count = tiled / GSD_TILE_WIDTH,
		             .mode = unswizzle ? 1u : 0u};
		dispatch(v, K_SWIZZLE, &a);
	}
	if (n > tiled) {
		VkBufferCopy c = {
		        .srcOffset = so + tiled, .dstOffset = dof + tiled, .size = n - tiled};
		vkCmdCopyBuffer(v->cb, ss->buf, ds->buf, 1, &c);
	}
}

/*
 * XXH64 of n bytes at src, written at dst: in one dispatch below XXH_CHUNK, else the stripes
 * in dispatches of XXH_CHUNK bytes carrying the accumulators in the scratch buffer (each after
 * the one before), then the tail and the avalanche.
 */
static void record_checksum(vk_engine *v, uint64_t src, uint64_t dst, uint64_t n)
{
	record_next(v);
	if (n < XXH_CHUNK) {
		vk_args k = {.src = src, .dst = dst, .size = n, .count = 1};
		dispatch(v, K_XXH64, &k);
		return;
	}
	uint64_t body = n / 32u * 32u, lanes = v->scratch.addr + LANES_AT;
	for (uint64_t at = 0; at < body; at += XXH_CHUNK) {
		uint64_t step = body - at < XXH_CHUNK ? body - at : XXH_CHUNK;
		vk_args k = {.src = src + at,
		             .dst = lanes,
		             .size = step,
		             .aux = at == 0,
		             .count = 1,
		             .mode = 1};
		if (at)
			barrier(v->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
			        VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
		dispatch(v, K_XXH64, &k);
	}
	barrier(v->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
	        VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
	vk_args k = {.src = src + body,
	             .dst = dst,
	             .size = n - body,
	             .aux = lanes,
	             .count = n,
	             .mode = 2};
	dispatch(v, K_XXH64, &k);
}

/*
 * Checks one command against the packet's allocation list and records it into the open piece.
 * Returns 0, or -1 with a page-fault text in detail (nothing recorded).
 */
static int record_cmd(vk_engine *v, const gsd_memory *mem, const gsd_exec *x, const gs_isa_cmd *cmd,
                      char *detail, size_t cap)
{
	gsd_cmd_access a;
	int rc = gsd_engine_cmd_access(mem, x, cmd, &a, detail, cap);
	if (rc <= 0)
		return rc;
	const vk_seg *src = a.src ? seg_of(a.src) : NULL, *dst = seg_of(a.dst);
	order(v, src, a.src_off, a.src_len, dst, a.dst_off, a.dst_len);
	/* An overlapping move goes through the scratch buffer, which an earlier one of the piece
	 * may still be using. */
	if (gsd_cmd_access_overlaps(&a))
		v->unordered = false;
	/* So does a long CHECKSUM's carried state (an earlier one may still be using it). */
	if (cmd->op == GS_OP_CHECKSUM && cmd->size >= XXH_CHUNK)
		v->unordered = false;
	uint32_t conv = cmd->transfer_flags & (GS_ISA_TRANSFER_SWIZZLE | GS_ISA_TRANSFER_UNSWIZZLE);
	switch ((gs_isa_op)cmd->op) {
	case GS_OP_FILL:
		record_fill(v, dst, a.dst_off, cmd->size, cmd->pattern);
		break;
	case GS_OP_CHECKSUM:
		record_checksum(v, src ? src->addr + a.src_off : 0, dst->addr + a.dst_off,
		                cmd->size);
		break;
	case GS_OP_TRANSFER:
		if (conv) {
			record_swizzle(v, src, a.src_off, dst, a.dst_off, cmd->size, cmd->pitch,
			               conv & GS_ISA_TRANSFER_UNSWIZZLE);
			break;
		}
		record_move(v, src, a.src_off, dst, a.dst_off, cmd->size);
		break;
	case GS_OP_COPY:
		record_move(v, src, a.src_off, dst, a.dst_off, cmd->size);
		break;
	default:
		break;
	}
	return 0;
}

/* ---- users' kernels ---- */

/* A user kernel's Vulkan objects (kernel_create's object), made again by recover(). */
typedef struct vk_kernel {
	struct vk_kernel *next, **pprev; /* b->ukernels */
	uint32_t *code;
	size_t size;
	char entry[GSD_KERNEL_ENTRY_MAX];
	gsd_kernel_info info; /* what the module declares (a copy) */
	VkDescriptorSetLayout set_layout;
	VkPipelineLayout layout;
	VkPipeline pipe;
} vk_kernel;

static void ukernel_objects_free(gsd_backend *b, vk_kernel *k)
{
	if (k->pipe)
		vkDestroyPipeline(b->dev, k->pipe, NULL);
	if (k->layout)
		vkDestroyPipelineLayout(b->dev, k->layout, NULL);
	if (k->set_layout)
		vkDestroyDescriptorSetLayout(b->dev, k->set_layout, NULL);
	k->pipe = VK_NULL_HANDLE;
	k->layout = VK_NULL_HANDLE;
	k->set_layout = VK_NULL_HANDLE;
}

/* Set 0 as pushed descriptors, one per binding the module declares; its push constants; the
 * compute pipeline of its entry point. */
static int ukernel_objects_make(gsd_backend *b, vk_kernel *k, char *err, size_t cap)
{
	const gsd_kernel_info *info = &k->info;
	VkDescriptorSetLayoutBinding lb[GSD_KERNEL_MAX_BINDINGS];
	for (uint32_t i = 0; i < info->nbindings; i++)
		lb[i] = (VkDescriptorSetLayoutBinding){
		        .binding = info->bindings[i].binding,
		        .descriptorType = info->bindings[i].kind == GSD_BINDING_UNIFORM
		                                  ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER
		                                  : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		        .descriptorCount = 1,
		        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
	VkDescriptorSetLayoutCreateInfo dci = {
	        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
	        .flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
	        .bindingCount = info->nbindings,
	        .pBindings = lb};
	VkResult r = vkCreateDescriptorSetLayout(b->dev, &dci, NULL, &k->set_layout);
	if (r != VK_SUCCESS)
		return VK_FAIL(err, cap, r, "vkCreateDescriptorSetLayout");
	VkPushConstantRange pc = {
	        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = info->push_bytes};
	VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
	                                  .setLayoutCount = 1,
	                                  .pSetLayouts = &k->set_layout,
	                                  .pushConstantRangeCount = info->push_bytes ? 1u : 0u,
	                                  .pPushConstantRanges = &pc};
	r = vkCreatePipelineLayout(b->dev, &lci, NULL, &k->layout);
	if (r != VK_SUCCESS)
		return VK_FAIL(err, cap, r, "vkCreatePipelineLayout");
	return make_pipeline(b, k->code, k->size, k->entry, k->layout, &k->pipe, err, cap);
}

static bool vk_kernel_caps(const gsd_backend *b, gsd_kernel_caps *out)
{
	if (!b || !b->ukernels_ok)
		return false;
	*out = b->ukernel_caps;
	out->preempt_granularity_ns = 0; /* a dispatch runs whole: its own length */
	return true;
}

static void vk_kernel_destroy(gsd_backend *b, void *impl)
{
	vk_kernel *k = impl;
	pthread_mutex_lock(&b->ukernels_lock);
	if (k->next)
		k->next->pprev = k->pprev;
	*k->pprev = k->next;
	pthread_mutex_unlock(&b->ukernels_lock);
	if (atomic_load(&b->hung)) {
		/* The hung dispatch may be this kernel's: its objects wait for the device. */
		pthread_mutex_lock(&b->ukernels_lock);
		k->next = b->hung_kernels;
		b->hung_kernels = k;
		pthread_mutex_unlock(&b->ukernels_lock);
		return;
	}
	ukernel_objects_free(b, k);
	free(k->code);
	free(k);
}

static int vk_kernel_create(gsd_backend *b, const void *code, size_t size, const char *entry,
                            const gsd_kernel_info *info, void **out, char *err, size_t cap)
{
	vk_kernel *k = calloc(1, sizeof(*k));
	if (k)
		k->code = malloc(size);
	if (!k || !k->code) {
		free(k);
		snprintf(err, cap, "out of memory");
		return -1;
	}
	memcpy(k->code, code, size);
	k->size = size;
	k->info = *info;
	snprintf(k->entry, sizeof(k->entry), "%s", entry);
	pthread_rwlock_rdlock(&b->device_lock);
	if (ukernel_objects_make(b, k, err, cap) != 0) {
		ukernel_objects_free(b, k);
		pthread_rwlock_unlock(&b->device_lock);
		free(k->code);
		free(k);
		return -1;
	}
	/* Listed before the device can be replaced: recover() makes it again. */
	pthread_mutex_lock(&b->ukernels_lock);
	k->next = b->ukernels;
	if (k->next)
		k->next->pprev = &k->next;
	k->pprev = &b->ukernels;
	b->ukernels = k;
	pthread_mutex_unlock(&b->ukernels_lock);
	pthread_rwlock_unlock(&b->device_lock);
	*out = k;
	return 0;
}

/*
 * Checks a DISPATCH against the packet's allocation list and records it alone in a piece:
 * set 0 pushed with each binding's range of its segment's buffer (robustBufferAccess2 keeps
 * every access of the kernel inside those ranges), the push constants, the dispatch. Returns
 * 0, or -1 with a page-fault text in detail (nothing recorded).
 */
static int record_dispatch(vk_engine *v, const gsd_memory *mem, const gsd_exec *x,
                           const gs_isa_cmd *cmd, char *detail, size_t cap)
{
	const gsd_exec_kernel *ek;
	gsd_dispatch_binding db[GS_ISA_DISPATCH_MAX_BIND];
	if (gsd_engine_dispatch_access(mem, x, cmd, &ek, db, detail, cap) != 0)
		return -1;
	gsd_backend *b = v->b;
	const vk_kernel *k = ek->impl;
	VkDescriptorBufferInfo bi[GS_ISA_DISPATCH_MAX_BIND];
	VkWriteDescriptorSet w[GS_ISA_DISPATCH_MAX_BIND];
	uint64_t bytes = 0;
	for (unsigned i = 0; i < cmd->nbindings; i++) {
		if (b->ukernel_caps.offset_align && db[i].off % b->ukernel_caps.offset_align) {
			/* (A detail cut short is still a fault.) */
			int n = snprintf(detail, cap,
			                 "binding %u: its allocation is not placed at the device's "
			                 "offset alignment",
			                 db[i].binding);
			(void)n;
			return -1;
		}
		bi[i] = (VkDescriptorBufferInfo){.buffer = seg_of(db[i].seg)->buf,
		                                 .offset = db[i].off,
		                                 .range = db[i].range};
		w[i] = (VkWriteDescriptorSet){
		        .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
		        .dstBinding = db[i].binding,
		        .descriptorCount = 1,
		        .descriptorType = db[i].uniform ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER
		                                        : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		        .pBufferInfo = &bi[i]};
		bytes += db[i].range;
	}
	v->unordered = false;
	record_next(v);
	vkCmdBindPipeline(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipe);
	if (cmd->nbindings)
		b->push_descriptor(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0,
		                   cmd->nbindings, w);
	if (cmd->push_size)
		vkCmdPushConstants(v->cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, cmd->push_size,
		                   gs_isa_dispatch_push(cmd));
	if (cmd->groups[0] && cmd->groups[1] && cmd->groups[2])
		vkCmdDispatch(v->cb, cmd->groups[0], cmd->groups[1], cmd->groups[2]);
	v->piece_bytes += bytes;
	v->nacc = 0;
	return 0;
}

/* ---- clocks ---- */

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * The daemon's clock (CLOCK_REALTIME, as history shows it) at GPU timestamp `tick`: through a
 * calibrated pair of the device's clock and CLOCK_MONOTONIC taken now where the device offers
 * one, else through the offset measured at start-up.
 */
static uint64_t daemon_clock(const gsd_backend *b, uint64_t tick)
{
	int64_t mono = (int64_t)((double)tick * b->ns_per_tick + b->tick_offset_ns);
	if (b->calibrated) {
		VkCalibratedTimestampInfoEXT ci[2] = {
		        {.sType = VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT,
		         .timeDomain = VK_TIME_DOMAIN_DEVICE_EXT},
		        {.sType = VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT,
		         .timeDomain = VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
		uint64_t ts[2], dev_max = 0;
		if (b->get_calibrated(b->dev, 2, ci, ts, &dev_max) == VK_SUCCESS)
			mono = (int64_t)ts[1] -
			       (int64_t)((double)((ts[0] - tick) & b->ts_mask) * b->ns_per_tick);
	}
	/* CLOCK_REALTIME - CLOCK_MONOTONIC, now. */
	int64_t real =
	        mono + ((int64_t)clock_ns(CLOCK_REALTIME) - (int64_t)clock_ns(CLOCK_MONOTONIC));
	return real > 0 ? (uint64_t)real : 0;
}

/* ---- running a packet ---- */

typedef struct run {
	gsd_engine *e;
	vk_engine *v;
	gsd_exec *x;
	gsd_irq *final;
	size_t piece_at; /* the first command of the open piece */
} run;

static void stop(run *r, gsd_irq_kind kind, gsd_stop_reason why, size_t at, uint64_t spin_done_us)
{
	gsd_engine_final(r->final, kind, why, at, spin_done_us);
}

/* The reason to stop before the command at `at`, if any (the emulator's order). */
static bool stop_here(run *r, size_t at, uint64_t spin_done_us, bool preemptible)
{
	if (atomic_load(&r->v->b->lost)) {
		/* Another engine saw the device lost: this packet is innocent. */
		stop(r, GSD_IRQ_ABORTED, GSD_STOP_NONE, at, spin_done_us);
		r->final->device_lost = true;
		snprintf(r->final->detail, sizeof(r->final->detail),
		         "the device was lost while another packet ran");
	} else if (gsd_engine_abort_pending(r->e))
		stop(r, GSD_IRQ_ABORTED, GSD_STOP_NONE, at, spin_done_us);
	else if (preemptible && r->x->budget_ns && r->v->gpu_ns >= r->x->budget_ns)
		stop(r, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_BUDGET, at, spin_done_us);
	else if (preemptible && gsd_engine_preempt_pending(r->e))
		stop(r, GSD_IRQ_DMA_PREEMPTED, GSD_STOP_REQUEST, at, spin_done_us);
	else
		return false;
	return true;
}

/*
 * Ends the run on a failed submission or wait, whose work starts at `at` (with spin_done_us
 * of a SPIN there done). A lost device blames the packet of the engine that saw it first,
 * which FAULTS; any other packet is innocent and ABORTED, to resume at `at` once the device
 * is back. Any other failure FAULTS the packet.
 */
static void device_fault(run *r, size_t at, VkResult res, uint64_t spin_done_us)
{
	if (res == VK_ERROR_DEVICE_LOST) {
		r->final->device_lost = true;
		if (!r->v->blamed) {
			stop(r, GSD_IRQ_ABORTED, GSD_STOP_NONE, at, spin_done_us);
			snprintf(r->final->detail, sizeof(r->final->detail),
			         "the device was lost while another packet ran");
			return;
		}
	}
	stop(r, GSD_IRQ_DMA_FAULTED, GSD_STOP_NONE, at, 0);
	snprintf(r->final->detail, sizeof(r->final->detail), "vulkan: %s (VkResult %d)%s",
	         vk_strerror(res), (int)res,
	         res == VK_ERROR_DEVICE_LOST ? " while this packet ran" : "");
}

/* Queues one SPIN slice of slice_us in slot i. */
static VkResult spin_slice(run *r, unsigned i, size_t at, uint64_t slice_us, bool preemptible)
{
	vk_engine *v = r->v;
	use_slot(v, i);
	record_next(v);
	vk_args a = {.src = v->scratch.addr + STOP_AT,
	             .dst = v->scratch.addr + RESULT_AT,
	             .size = at,
	             .aux = (uint64_t)(v->b->iters_per_us * (double)slice_us) + 1,
	             .count = 1,
	             .mode = preemptible ? 1u : 0u};
	dispatch(v, K_SPIN, &a);
	VkResult res = submit(v);
	use_slot(v, 0);
	return res;
}

/*
 * Runs what is left of the SPIN at `at` as slices of GPU time, keeping the next slice queued
 * behind the running one. Between slices it looks for a reason to stop; a stop lets the slice
 * already queued finish (its time counts as done), so a request waits at most two slices.
 * False if the run stopped.
 */
static bool spin(run *r, const gs_isa_cmd *cmd, size_t at, uint64_t done_us)
{
	const bool preemptible = !(cmd->flags & GS_SPIN_NONPREEMPTIBLE);
	const uint64_t need_ns = (cmd->micros - done_us) * 1000u;
	uint64_t spun_ns = 0, queued_ns = 0;
	unsigned head = 0, n = 0; /* slots in flight: head, head + 1 (mod SLOTS) */
	/* Requests made from here on reach the kernel through the stop words, earlier ones
	 * through the engine's flags, checked just after. */
	atomic_store(&r->v->stop_words[0], 0);
	atomic_store(&r->v->stop_words[1], 0);
	bool stopping = stop_here(r, at, done_us, preemptible);
	VkResult res = VK_SUCCESS;
	if (!stopping && r->v->b->inject_spin_us && cmd->micros == r->v->b->inject_spin_us) {
		/* The test hook: this SPIN loses the device. */
		device_fault(r, at, check_lost(r->v, VK_ERROR_DEVICE_LOST), done_us);
		return false;
	}

	while (!stopping || n) {
		while (!stopping && n < SLOTS && spun_ns + queued_ns < need_ns) {
			uint64_t left_us = (need_ns - spun_ns - queued_ns + 999u) / 1000u;
			uint64_t slice_us = left_us < SLICE_US ? left_us : SLICE_US;
			/* A preemptible SPIN's slices end where its budget does. */
			uint64_t budget = r->x->budget_ns;
			uint64_t used = r->v->gpu_ns + queued_ns;
			if (preemptible && budget && used < budget &&
			    (budget - used + 999u) / 1000u < slice_us)
				slice_us = (budget - used + 999u) / 1000u;
			if ((res = spin_slice(r, (head + n) % SLOTS, at, slice_us, preemptible)) !=
			    VK_SUCCESS)
				break;
			queued_ns += slice_us * 1000u;
			n++;
		}
		if (!n)
			break;
		uint64_t took = 0;
		VkResult w = await(r->v, head, &took);
		if (w != VK_SUCCESS && res == VK_SUCCESS)
			res = w;
		uint64_t planned = queued_ns < SLICE_US * 1000u ? queued_ns : SLICE_US * 1000u;
		queued_ns = queued_ns > planned ? queued_ns - planned : 0;
		/* A slice always advances, even on a clock too coarse to see it. */
		if (w == VK_SUCCESS)
			spun_ns += took ? took : 1000u;
		head = (head + 1) % SLOTS;
		n--;
		if (res != VK_SUCCESS) {
			stopping = true;
			continue;
		}
		if (!stopping && spun_ns < need_ns)
			stopping = stop_here(r, at, done_us + spun_ns / 1000u, preemptible);
	}
	if (res != VK_SUCCESS) {
		device_fault(r, at, res, done_us + spun_ns / 1000u);
		return false;
	}
	if (spun_ns >= need_ns) {
		/* Finished while a stop was being asked for: the SPIN is done, and the next
		 * boundary answers the request. */
		return true;
	}
	if (stopping) {
		/* stop_here set the final interrupt; the queued slice ran too. */
		r->final->spin_done_us = done_us + spun_ns / 1000u;
		return false;
	}
	return true;
}

static void vk_run(gsd_engine *e, gsd_exec *x, gsd_irq *final)
{
	vk_engine *v = e->priv;
	run r = {.e = e, .v = v, .x = x, .final = final, .piece_at = x->resume_offset};
	size_t pos = x->resume_offset;
	gs_isa_cmd cmd;
	VkResult res;

	if (x->submit_flags & GS_SUBMIT_NULL_RENDERING) {
		gsd_emu_walk(e, x, false, final);
		return;
	}
	v->owner = e;
	v->gpu_ns = 0;
	v->first_tick = v->last_tick = 0;
	v->blamed = false;
	v->recording = false;
	if (gsd_engine_bad_resume(x, final))
		return;
	for (;;) {
		const size_t at = pos;
		gs_isa_err err = gs_isa_decode(x->dma, x->dma_len, &pos, &cmd);
		if (err != GS_ISA_OK) {
			if ((res = flush(v)) != VK_SUCCESS) {
				device_fault(&r, r.piece_at, res, 0);
				break;
			}
			if (err == GS_ISA_END) {
				stop(&r, GSD_IRQ_DMA_COMPLETED, GSD_STOP_NONE, at, 0);
				break;
			}
			gsd_engine_decode_fault(final, at, err);
			break;
		}
		const uint64_t done_us = at == x->resume_offset && cmd.op == GS_OP_SPIN
		                                 ? gsd_engine_resume_spin_done(x)
		                                 : 0;
		/* Pieces end at a SIGNAL, a SPIN, or the batch bounds; the engine looks for a
		 * reason to stop only between pieces. */
		bool ends_piece =
		        cmd.op == GS_OP_SIGNAL || cmd.op == GS_OP_SPIN ||
		        cmd.op == GS_OP_DISPATCH ||
		        (v->recording && (v->ncmds >= BATCH_CMDS || v->piece_bytes >= BATCH_BYTES));
		if (ends_piece && (res = flush(v)) != VK_SUCCESS) {
			device_fault(&r, r.piece_at, res, 0);
			break;
		}
		if (!v->recording && stop_here(&r, at, done_us, true))
			break;
		if (cmd.op == GS_OP_SIGNAL) {
			gsd_engine_report_signal(e, x, &cmd, pos, v->gpu_ns);
			continue;
		}
		if (cmd.op == GS_OP_SPIN) {
			if (!spin(&r, &cmd, at, done_us))
				break;
			continue;
		}
		if (!v->recording)
			r.piece_at = at;
		if (cmd.op == GS_OP_DISPATCH) {
			/* A dispatch is a piece of its own: the engine can stop between any two,
			 * and its GPU time is bracketed by its own timestamps. */
			if (record_dispatch(v, e->cfg.memory, x, &cmd, final->detail,
			                    sizeof(final->detail)) != 0) {
				stop(&r, GSD_IRQ_DMA_PAGE_FAULTED, GSD_STOP_NONE, at, 0);
				break;
			}
			v->in_dispatch = true;
			res = flush(v);
			v->in_dispatch = false;
			if (res != VK_SUCCESS) {
				device_fault(&r, at, res, 0);
				if (atomic_load(&v->b->hung) && v->blamed)
					snprintf(final->detail, sizeof(final->detail),
					         "the dispatch did not finish after the engine "
					         "reset: "
					         "the GPU cannot stop it");
				break;
			}
			continue;
		}
		if (record_cmd(v, e->cfg.memory, x, &cmd, final->detail, sizeof(final->detail)) !=
		    0) {
			/* What came before the bad command still runs, as on the emulator. */
			char keep[sizeof(final->detail)];
			memcpy(keep, final->detail, sizeof(keep));
			if ((res = flush(v)) != VK_SUCCESS) {
				device_fault(&r, r.piece_at, res, 0);
				break;
			}
			stop(&r, GSD_IRQ_DMA_PAGE_FAULTED, GSD_STOP_NONE, at, 0);
			memcpy(final->detail, keep, sizeof(keep));
			break;
		}
	}
	if (v->recording) {
		/* Left open only by a stop between pieces: run what was recorded. */
		flush(v);
	}
	final->engine_ns = v->gpu_ns;
	if (v->first_tick) {
		final->gpu_start_ns = daemon_clock(v->b, v->first_tick);
		final->gpu_end_ns = daemon_clock(v->b, v->last_tick);
	}
}

/* ---- engines ---- */

/* The engine's Vulkan objects (made again by recover); the stop words fall back to memory of
 * the engine's own while there are none, so a request never writes into freed memory. */
static void engine_objects_free(vk_engine *v)
{
	gsd_backend *b = v->b;
	v->stop_words = v->no_stop_words;
	seg_free(b, &v->scratch);
	if (atomic_load(&b->hung)) {
		for (unsigned i = 0; i < SLOTS; i++) {
			keep(b, (uint64_t)v->tss[i]);
			keep(b, (uint64_t)v->fences[i]);
			keep(b, (uint64_t)(uintptr_t)v->cbs[i]);
		}
		keep(b, (uint64_t)v->pool);
		memset(v->tss, 0, sizeof(v->tss));
		memset(v->fences, 0, sizeof(v->fences));
		memset(v->cbs, 0, sizeof(v->cbs));
		v->pool = VK_NULL_HANDLE;
		return;
	}
	for (unsigned i = 0; i < SLOTS; i++) {
		if (v->tss[i])
			vkDestroyQueryPool(b->dev, v->tss[i], NULL);
		if (v->fences[i])
			vkDestroyFence(b->dev, v->fences[i], NULL);
		v->tss[i] = VK_NULL_HANDLE;
		v->fences[i] = VK_NULL_HANDLE;
		v->cbs[i] = VK_NULL_HANDLE;
	}
	if (v->pool)
		vkDestroyCommandPool(b->dev, v->pool, NULL);
	v->pool = VK_NULL_HANDLE;
}

static int engine_objects_make(vk_engine *v, char *err, size_t cap)
{
	gsd_backend *b = v->b;
	memset(v->inflight, 0, sizeof(v->inflight));
	VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
	                               .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
	                               .queueFamilyIndex = b->family};
	VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
	                             .queryType = VK_QUERY_TYPE_TIMESTAMP,
	                             .queryCount = 2};
	VkResult r = vkCreateCommandPool(b->dev, &pci, NULL, &v->pool);
	if (r != VK_SUCCESS)
		v->pool = VK_NULL_HANDLE;
	for (unsigned i = 0; i < SLOTS && r == VK_SUCCESS; i++)
		if ((r = vkCreateFence(b->dev, &fci, NULL, &v->fences[i])) == VK_SUCCESS)
			r = vkCreateQueryPool(b->dev, &qci, NULL, &v->tss[i]);
	if (r != VK_SUCCESS) {
		engine_objects_free(v);
		return VK_FAIL(err, cap, r, "engine objects");
	}
	VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
	                                   .commandPool = v->pool,
	                                   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
	                                   .commandBufferCount = SLOTS};
	if ((r = vkAllocateCommandBuffers(b->dev, &cai, v->cbs)) != VK_SUCCESS) {
		engine_objects_free(v);
		return VK_FAIL(err, cap, r, "vkAllocateCommandBuffers");
	}
	use_slot(v, 0);
	if (seg_make(b, GSD_MEM_LOCAL, SCRATCH_BYTES + 128u, true, NULL, &v->scratch, err, cap) !=
	    0) {
		engine_objects_free(v);
		return -1;
	}
	if (!v->scratch.map) {
		engine_objects_free(v);
		snprintf(err, cap, "no host-visible memory for the engine's stop words");
		return -1;
	}
	v->stop_words = (_Atomic uint32_t *)(void *)(v->scratch.map + STOP_AT);
	atomic_store(&v->stop_words[0], 0);
	atomic_store(&v->stop_words[1], 0);
	return 0;
}

static void engine_free(vk_engine *v)
{
	if (!v)
		return;
	engine_objects_free(v);
	free(v);
}

/* An engine on queue index `queue` (b->queues). */
static int engine_make(gsd_backend *b, uint32_t queue, vk_engine **out, char *err, size_t cap)
{
	vk_engine *v = calloc(1, sizeof(*v));
	if (!v) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	v->b = b;
	v->queue = queue < b->nqueues ? queue : queue % b->nqueues;
	v->stop_words = v->no_stop_words;
	if (engine_objects_make(v, err, cap) != 0) {
		free(v);
		return -1;
	}
	*out = v;
	return 0;
}

/* The adapter's engines, for recover. */
static bool engine_register(gsd_backend *b, vk_engine *v, bool add)
{
	bool done = false;
	pthread_mutex_lock(&b->engines_lock);
	for (unsigned i = 0; i < MAX_ENGINES && !done; i++)
		if (b->engines[i] == (add ? NULL : v)) {
			b->engines[i] = add ? v : NULL;
			done = true;
		}
	pthread_mutex_unlock(&b->engines_lock);
	return done;
}

static int vk_create(const gsd_engine_config *cfg, gsd_engine **out)
{
	char err[256];
	vk_engine *v = NULL;
	if (!cfg->backend || engine_make(cfg->backend, cfg->node, &v, err, sizeof(err)) != 0)
		return -1;
	if (!engine_register(cfg->backend, v, true)) {
		engine_free(v);
		return -1;
	}
	if (gsd_engine_thread_create(cfg, vk_run, out) != 0) {
		engine_register(cfg->backend, v, false);
		engine_free(v);
		return -1;
	}
	/* No packet reaches the thread before create returns, so setting it now is safe. */
	(*out)->priv = v;
	return 0;
}

/* The core's request, and the stop word a running SPIN kernel polls. */
static void vk_preempt(gsd_engine *e)
{
	vk_engine *v = e->priv;
	gsd_engine_thread_preempt(e);
	atomic_store(&v->stop_words[0], 1);
}

static void vk_reset(gsd_engine *e)
{
	vk_engine *v = e->priv;
	gsd_engine_thread_reset(e);
	atomic_store(&v->stop_words[1], 1);
}

static void vk_destroy(gsd_engine *e)
{
	vk_engine *v = e->priv;
	atomic_store(&v->stop_words[1], 1);
	gsd_engine_thread_destroy(e);
	engine_register(v->b, v, false);
	engine_free(v);
}

uint32_t gsd_vulkan_segment_flags(const gsd_backend *b, const gsd_mem_segment *seg)
{
	const vk_seg *s = seg->priv;
	return s ? b->mem.memoryTypes[s->type].propertyFlags : 0;
}

uint64_t gsd_vulkan_plain_copy(gsd_backend *b, const gsd_mem_segment *src,
                               const gsd_mem_segment *dst, uint64_t bytes)
{
	char err[256];
	vk_engine *v;
	if (!src->priv || !dst->priv || engine_make(b, 0, &v, err, sizeof(err)) != 0)
		return 0;
	record_next(v);
	VkBufferCopy c = {.srcOffset = 0, .dstOffset = 0, .size = bytes};
	vkCmdCopyBuffer(v->cb, seg_of(src)->buf, seg_of(dst)->buf, 1, &c);
	uint64_t t0 = gsd_engine_now_ns();
	VkResult r = flush(v);
	uint64_t ns = gsd_engine_now_ns() - t0;
	engine_free(v);
	return r == VK_SUCCESS ? ns : 0;
}

/* ---- the adapter ---- */

/* One SPIN kernel run of iters steps; its GPU time in *ns. */
static VkResult spin_once(vk_engine *v, uint64_t iters, uint64_t *ns)
{
	record_next(v);
	vk_args a = {.src = v->scratch.addr + STOP_AT,
	             .dst = v->scratch.addr + RESULT_AT,
	             .aux = iters,
	             .count = 1};
	dispatch(v, K_SPIN, &a);
	v->gpu_ns = 0;
	VkResult r = flush(v);
	*ns = v->gpu_ns;
	return r;
}

/* Without calibrated timestamps: the GPU clock's offset from CLOCK_MONOTONIC, from the
 * tightest of a few submissions bracketed by the host's clock. */
static VkResult measure_offset(gsd_backend *b, vk_engine *v)
{
	uint64_t best = UINT64_MAX, ns;
	VkResult r = VK_SUCCESS;
	for (int i = 0; i < 5 && r == VK_SUCCESS; i++) {
		v->first_tick = 0;
		uint64_t h0 = clock_ns(CLOCK_MONOTONIC);
		r = spin_once(v, 1, &ns);
		uint64_t h1 = clock_ns(CLOCK_MONOTONIC);
		if (r == VK_SUCCESS && v->first_tick && h1 - h0 < best) {
			best = h1 - h0;
			b->tick_offset_ns = (double)(h0 + (h1 - h0) / 2) -
			                    (double)v->first_tick * b->ns_per_tick;
		}
	}
	return r;
}

static int sync_clock(gsd_backend *b, char *err, size_t cap)
{
	vk_engine *v;
	if (engine_make(b, 0, &v, err, cap) != 0)
		return -1;
	VkResult r = measure_offset(b, v);
	engine_free(v);
	return r == VK_SUCCESS ? 0 : VK_FAIL(err, cap, r, "measuring the GPU clock");
}

/*
 * SPIN kernel steps per microsecond of GPU time. The first run only warms up (a driver may
 * compile the kernel at its first dispatch: lavapipe does, taking milliseconds); then runs
 * grow until one takes CALIBRATE_NS, and the median rate of three runs of that size counts.
 */
#define CALIBRATE_NS 4000000u

static int calibrate(gsd_backend *b, char *err, size_t cap)
{
	vk_engine *v;
	if (engine_make(b, 0, &v, err, cap) != 0)
		return -1;
	uint64_t iters = 256, ns = 0;
	VkResult r = spin_once(v, iters, &ns);
	if (r == VK_SUCCESS)
		r = measure_offset(b, v);
	for (int tries = 0; r == VK_SUCCESS && tries < 32; tries++) {
		r = spin_once(v, iters, &ns);
		if (r != VK_SUCCESS || ns >= CALIBRATE_NS)
			break;
		iters *= ns < CALIBRATE_NS / 16 ? 8 : 2;
	}
	double rate[3] = {0, 0, 0};
	for (int i = 0; i < 3 && r == VK_SUCCESS; i++) {
		if (i)
			r = spin_once(v, iters, &ns);
		rate[i] = (double)iters / ((double)(ns ? ns : 1) / 1000.0);
	}
	engine_free(v);
	if (r != VK_SUCCESS)
		return VK_FAIL(err, cap, r, "calibrating SPIN");
	double lo = rate[0] < rate[1] ? rate[0] : rate[1],
	       hi = rate[0] < rate[1] ? rate[1] : rate[0];
	double median = rate[2] < lo ? lo : rate[2] > hi ? hi : rate[2];
	b->iters_per_us = median > 0 ? median : 1;
	b->preempt_ns = (uint64_t)((double)SPIN_POLL_STEPS / b->iters_per_us * 1000.0) + 1;
	return 0;
}

/* ---- the CPU's copies to and from unmapped memory ---- */

static void stage_free(gsd_backend *b)
{
	seg_free(b, &b->stage);
	if (b->stage_fence)
		vkDestroyFence(b->dev, b->stage_fence, NULL);
	if (b->stage_pool)
		vkDestroyCommandPool(b->dev, b->stage_pool, NULL);
	b->stage_fence = VK_NULL_HANDLE;
	b->stage_pool = VK_NULL_HANDLE;
	b->stage_cb = VK_NULL_HANDLE;
}

static int stage_make(gsd_backend *b, char *err, size_t cap)
{
	if (b->stage_cb)
		return 0;
	VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
	                               .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
	                               .queueFamilyIndex = b->family};
	VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	VkResult r = vkCreateCommandPool(b->dev, &pci, NULL, &b->stage_pool);
	if (r != VK_SUCCESS)
		b->stage_pool = VK_NULL_HANDLE;
	else if ((r = vkCreateFence(b->dev, &fci, NULL, &b->stage_fence)) != VK_SUCCESS)
		b->stage_fence = VK_NULL_HANDLE;
	VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
	                                   .commandPool = b->stage_pool,
	                                   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
	                                   .commandBufferCount = 1};
	if (r == VK_SUCCESS)
		r = vkAllocateCommandBuffers(b->dev, &cai, &b->stage_cb);
	if (r != VK_SUCCESS) {
		b->stage_cb = VK_NULL_HANDLE;
		stage_free(b);
		return VK_FAIL(err, cap, r, "staging objects");
	}
	if (seg_make(b, GSD_MEM_APERTURE, STAGE_BYTES, true, NULL, &b->stage, err, cap) != 0 ||
	    !b->stage.map) {
		if (b->stage.buf)
			snprintf(err, cap, "no host-visible memory for a staging buffer");
		b->stage_cb = VK_NULL_HANDLE;
		stage_free(b);
		return -1;
	}
	return 0;
}

/*
 * One step of a copy between the staging buffer and segment s, or a fill of s with zeros
 * (fill: at and n multiples of 4): recorded, submitted on the first queue and waited for.
 */
static VkResult stage_step(gsd_backend *b, const vk_seg *s, uint64_t at, uint64_t n,
                           bool to_segment, bool fill)
{
	VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
	                               .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
	vkResetCommandBuffer(b->stage_cb, 0);
	vkBeginCommandBuffer(b->stage_cb, &bi);
	/* What the engines wrote (their fences waited for) becomes visible to the copy. */
	barrier(b->stage_cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
	        VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
	if (fill) {
		vkCmdFillBuffer(b->stage_cb, s->buf, at, n, 0);
	} else {
		VkBufferCopy c = {.srcOffset = to_segment ? 0 : at,
		                  .dstOffset = to_segment ? at : 0,
		                  .size = n};
		vkCmdCopyBuffer(b->stage_cb, to_segment ? b->stage.buf : s->buf,
		                to_segment ? s->buf : b->stage.buf, 1, &c);
	}
	barrier(b->stage_cb, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
	VkResult r = vkEndCommandBuffer(b->stage_cb);
	VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
	                   .commandBufferCount = 1,
	                   .pCommandBuffers = &b->stage_cb};
	if (r == VK_SUCCESS) {
		pthread_mutex_lock(&b->queue_locks[0]);
		r = vkQueueSubmit(b->queues[0], 1, &si, b->stage_fence);
		pthread_mutex_unlock(&b->queue_locks[0]);
	}
	if (r == VK_SUCCESS) {
		/* Behind a hung dispatch the copy never runs: give up rather than block the
		 * daemon's loop for good. */
		do
			r = atomic_load(&b->hung) ? VK_ERROR_DEVICE_LOST
			                          : vkWaitForFences(b->dev, 1, &b->stage_fence,
			                                            VK_TRUE, WAIT_SLICE_NS);
		while (r == VK_TIMEOUT);
		if (r == VK_SUCCESS)
			vkResetFences(b->dev, 1, &b->stage_fence);
		else
			b->stage_inflight = true;
	}
	if (r == VK_ERROR_DEVICE_LOST)
		lose(b);
	return r;
}

static int vk_segment_copy(gsd_backend *b, const gsd_mem_segment *seg, uint64_t off, void *buf,
                           uint64_t len, bool to_segment, char *err, size_t cap)
{
	const vk_seg *s = seg->priv;
	if (!s || off > s->size || len > s->size - off) {
		snprintf(err, cap, "range outside segment %u", seg->id);
		return -1;
	}
	if (s->map) {
		if (to_segment)
			memcpy(s->map + off, buf, len);
		else
			memcpy(buf, s->map + off, len);
		return 0;
	}
	if (atomic_load(&b->lost)) {
		snprintf(err, cap, "the device is lost");
		return -1;
	}
	pthread_mutex_lock(&b->stage_lock);
	int rc = stage_make(b, err, cap);
	for (uint64_t done = 0; rc == 0 && done < len;) {
		uint64_t n = len - done < STAGE_BYTES ? len - done : STAGE_BYTES;
		if (to_segment)
			memcpy(b->stage.map, (uint8_t *)buf + done, n);
		VkResult r = stage_step(b, s, off + done, n, to_segment, false);
		if (r != VK_SUCCESS) {
			rc = VK_FAIL(err, cap, r, "staging copy");
			break;
		}
		if (!to_segment)
			memcpy((uint8_t *)buf + done, b->stage.map, n);
		done += n;
	}
	pthread_mutex_unlock(&b->stage_lock);
	return rc;
}

static int vk_segment_clear(gsd_backend *b, const gsd_mem_segment *seg, uint64_t off, uint64_t len,
                            char *err, size_t cap)
{
	const vk_seg *s = seg->priv;
	if (!s || off > s->size || len > s->size - off) {
		snprintf(err, cap, "range outside segment %u", seg->id);
		return -1;
	}
	if (s->map) {
		memset(s->map + off, 0, len);
		return 0;
	}
	/* vkCmdFillBuffer for the words, copies of zeros for an unaligned head and tail. */
	static const uint8_t zeros[4];
	uint64_t head = (4 - off % 4) % 4;
	if (head > len)
		head = len;
	uint64_t mid = (len - head) & ~UINT64_C(3), tail = len - head - mid;
	if (head && vk_segment_copy(b, seg, off, (void *)zeros, head, true, err, cap) != 0)
		return -1;
	if (tail && vk_segment_copy(b, seg, off + head + mid, (void *)zeros, tail, true, err, cap))
		return -1;
	if (!mid)
		return 0;
	pthread_mutex_lock(&b->stage_lock);
	int rc = stage_make(b, err, cap);
	VkResult r = rc == 0 ? stage_step(b, s, off + head, mid, true, true) : VK_SUCCESS;
	pthread_mutex_unlock(&b->stage_lock);
	if (rc == 0 && r != VK_SUCCESS)
		rc = VK_FAIL(err, cap, r, "staging fill");
	return rc;
}

/* ---- the adapter ---- */

static void device_free(gsd_backend *b)
{
	if (!b->dev || atomic_load(&b->hung))
		return;
	vkDeviceWaitIdle(b->dev);
	stage_free(b);
	pthread_mutex_lock(&b->ukernels_lock);
	for (vk_kernel *k = b->ukernels; k; k = k->next)
		ukernel_objects_free(b, k);
	pthread_mutex_unlock(&b->ukernels_lock);
	for (int k = 0; k < K_COUNT; k++)
		if (b->pipe[k])
			vkDestroyPipeline(b->dev, b->pipe[k], NULL);
	memset(b->pipe, 0, sizeof(b->pipe));
	if (b->layout)
		vkDestroyPipelineLayout(b->dev, b->layout, NULL);
	b->layout = VK_NULL_HANDLE;
	vkDestroyDevice(b->dev, NULL);
	b->dev = VK_NULL_HANDLE;
}

/* Fails with a message; for the chains of steps below. */
static int failf(char *err, size_t cap, const char *what, uint32_t seg)
{
	snprintf(err, cap, "%s %u", what, seg);
	return -1;
}

/* Rebuilds the device's part of every segment, putting back the bytes of saved[i] (or of the
 * imported host memory hosts[i], which it imports again). */
static int segments_remake(gsd_backend *b, gsd_memory *mem, void *const saved[],
                           void *const hosts[], const uint64_t host_len[], char *err, size_t cap)
{
	int rc = 0;
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++) {
		vk_seg *s = mem->seg[i].priv;
		if (!s)
			continue;
		gsd_mem_kind kind = s->kind;
		uint64_t size = mem->seg[i].size;
		memset(s, 0, sizeof(*s));
		s->kind = kind;
		if (rc == 0)
			rc = seg_make(b, kind, size, true, hosts[i], s, err, cap);
		if (rc == 0 && !s->map)
			rc = failf(err, cap, "no mappable memory now for segment", i);
		if (rc == 0 && saved[i])
			memcpy(s->map, saved[i], size);
		if (rc == 0 && hosts[i] && s->host != hosts[i])
			memcpy(s->map, hosts[i], size); /* not imported this time */
		if (hosts[i] && s->host != hosts[i])
			munmap(hosts[i], host_len[i]);
		mem->seg[i].base = rc == 0 ? s->map : NULL;
	}
	return rc;
}

/*
 * Whether the dispatch that hung the device has ended, and with it everything submitted behind
 * it (every engine's unfinished submissions, a staged copy): then the device is idle, the
 * objects destroyed meanwhile are freed, and it can be recreated like a lost one. Engines are
 * idle (recover's caller waits for that).
 */
static bool hang_over(gsd_backend *b)
{
	bool idle = vkGetFenceStatus(b->dev, b->hung_fence) == VK_SUCCESS;
	if (idle && b->stage_inflight)
		idle = vkGetFenceStatus(b->dev, b->stage_fence) == VK_SUCCESS;
	pthread_mutex_lock(&b->engines_lock);
	for (unsigned i = 0; i < MAX_ENGINES && idle; i++)
		for (unsigned j = 0; b->engines[i] && j < SLOTS && idle; j++)
			if (b->engines[i]->inflight[j])
				idle = vkGetFenceStatus(b->dev, b->engines[i]->fences[j]) ==
				       VK_SUCCESS;
	pthread_mutex_unlock(&b->engines_lock);
	if (!idle)
		return false;
	atomic_store(&b->hung, false);
	b->stage_inflight = false;
	pthread_mutex_lock(&b->ukernels_lock);
	while (b->hung_kernels) {
		struct vk_kernel *k = b->hung_kernels;
		b->hung_kernels = k->next;
		ukernel_objects_free(b, k);
		free(k->code);
		free(k);
	}
	pthread_mutex_unlock(&b->ukernels_lock);
	return true;
}

/*
 * The device is lost and every engine idle: carry each segment's bytes over (through the CPU's
 * mapping; imported host memory is the daemon's own and is imported again as it is), make a
 * new device, its kernels and segments, and the engines' objects. Memory the CPU does not map
 * cannot be carried over: such an adapter stays lost.
 */
static int vk_recover(gsd_backend *b, gsd_memory *mem, char *err, size_t cap)
{
	if (!atomic_load(&b->lost))
		return 0;
	if (atomic_load(&b->hung) && !hang_over(b)) {
		snprintf(err, cap,
		         "a dispatch did not finish after the engine reset, and still runs: a GPU "
		         "cannot stop a running dispatch, so the device can be neither waited for "
		         "nor recreated until it ends");
		return 1;
	}
	b->losses++;
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++) {
		const vk_seg *s = mem->seg[i].priv;
		if (s && !s->map)
			return failf(err, cap,
			             "device memory the CPU does not map cannot be carried over a "
			             "device loss: segment",
			             i);
	}
	/* Copies of what is mapped but not ours (a driver's mapping goes with the device). */
	void *saved[GSD_MAX_SEGMENTS] = {0}, *hosts[GSD_MAX_SEGMENTS] = {0};
	uint64_t saved_len[GSD_MAX_SEGMENTS] = {0}, host_len[GSD_MAX_SEGMENTS] = {0};
	int rc = 0;
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS && rc == 0; i++) {
		const vk_seg *s = mem->seg[i].priv;
		if (!s || s->host)
			continue;
		void *m = mmap(NULL, s->size, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED) {
			rc = failf(err, cap, "out of memory saving segment", i);
			break;
		}
		saved[i] = m;
		saved_len[i] = s->size;
		memcpy(m, s->map, s->size);
	}
	if (rc == 0) {
		pthread_rwlock_wrlock(&b->device_lock);
		pthread_mutex_lock(&b->engines_lock);
		for (unsigned i = 0; i < MAX_ENGINES; i++)
			if (b->engines[i])
				engine_objects_free(b->engines[i]);
		/* The old device goes; imported host memory stays (the daemon's pages). */
		for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++) {
			vk_seg *s = mem->seg[i].priv;
			if (!s)
				continue;
			hosts[i] = s->host;
			host_len[i] = s->mapped;
			s->host = NULL; /* kept: seg_free must not unmap it */
			gsd_mem_kind kind = s->kind;
			seg_free(b, s);
			s->kind = kind;
			mem->seg[i].base = NULL;
		}
		device_free(b);
		rc = make_device(b, err, cap);
		if (rc == 0)
			rc = make_pipelines(b, err, cap);
		pthread_mutex_lock(&b->ukernels_lock);
		for (vk_kernel *k = b->ukernels; k && rc == 0; k = k->next)
			rc = ukernel_objects_make(b, k, err, cap);
		pthread_mutex_unlock(&b->ukernels_lock);
		rc |= segments_remake(b, mem, saved, hosts, host_len, err, cap);
		for (unsigned i = 0; i < MAX_ENGINES && rc == 0; i++)
			if (b->engines[i])
				rc = engine_objects_make(b->engines[i], err, cap);
		pthread_mutex_unlock(&b->engines_lock);
		pthread_rwlock_unlock(&b->device_lock);
	}
	for (uint32_t i = 0; i < GSD_MAX_SEGMENTS; i++)
		if (saved[i])
			munmap(saved[i], saved_len[i]);
	if (rc == 0 && !b->calibrated)
		rc = sync_clock(b, err, cap);
	if (rc == 0)
		atomic_store(&b->lost, false);
	return rc;
}

/* Hung backends, kept whole until the process exits: their device still runs a dispatch
 * that may write their memory, and nothing of them can be freed safely. */
static pthread_mutex_t hung_lock = PTHREAD_MUTEX_INITIALIZER;
static gsd_backend *hung_backends[MAX_ENGINES];

static void vk_close(gsd_backend *b)
{
	if (!b)
		return;
	if (atomic_load(&b->hung)) {
		pthread_mutex_lock(&hung_lock);
		for (unsigned i = 0; i < MAX_ENGINES; i++)
			if (!hung_backends[i]) {
				hung_backends[i] = b;
				break;
			}
		pthread_mutex_unlock(&hung_lock);
		return;
	}
	device_free(b);
	if (b->instance)
		vkDestroyInstance(b->instance, NULL);
	for (uint32_t i = 0; i < MAX_QUEUES; i++)
		pthread_mutex_destroy(&b->queue_locks[i]);
	pthread_mutex_destroy(&b->engines_lock);
	pthread_mutex_destroy(&b->stage_lock);
	pthread_mutex_destroy(&b->ukernels_lock);
	pthread_mutex_destroy(&b->kept_lock);
	pthread_rwlock_destroy(&b->device_lock);
	free(b->kept);
	free(b);
}

static int vk_open(const gsd_backend_config *cfg, gsd_backend **out, char *err, size_t cap)
{
	*out = NULL;
	if (cfg->virtual_clock) {
		snprintf(err, cap, "the virtual clock is the emulator's: vulkan runs on GPU time");
		return -1;
	}
	gsd_backend *b = calloc(1, sizeof(*b));
	if (!b) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	for (uint32_t i = 0; i < MAX_QUEUES; i++)
		pthread_mutex_init(&b->queue_locks[i], NULL);
	pthread_mutex_init(&b->engines_lock, NULL);
	pthread_mutex_init(&b->stage_lock, NULL);
	pthread_mutex_init(&b->ukernels_lock, NULL);
	pthread_mutex_init(&b->kept_lock, NULL);
	pthread_rwlock_init(&b->device_lock, NULL);
	atomic_init(&b->lost, false);
	atomic_init(&b->hung, false);
	b->nodes = cfg->nodes ? cfg->nodes : 1;
	b->device_only = cfg->device_only_memory;
	const char *inject = getenv("GSD_VULKAN_INJECT_LOSS");
	b->inject_spin_us = inject ? strtoull(inject, NULL, 10) : 0;
	VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
	                         .pApplicationName = "gpuschedd",
	                         .pEngineName = "gpusched",
	                         .apiVersion = VK_API_VERSION_1_2};
	VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
	                            .pApplicationInfo = &app};
	VkResult r = vkCreateInstance(&ici, NULL, &b->instance);
	if (r != VK_SUCCESS) {
		b->instance = VK_NULL_HANDLE;
		vk_close(b);
		snprintf(err, cap,
		         "vkCreateInstance: %s (VkResult %d): is a Vulkan driver installed? (for "
		         "one on the CPU: Debian package mesa-vulkan-drivers)",
		         vk_strerror(r), (int)r);
		return -1;
	}
	if (choose_device(b, cfg->device, err, cap) != 0 || make_device(b, err, cap) != 0 ||
	    make_pipelines(b, err, cap) != 0 || calibrate(b, err, cap) != 0) {
		vk_close(b);
		return -1;
	}
	*out = b;
	return 0;
}

static void vk_describe(const gsd_backend *b, gsd_backend_info *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->device, sizeof(out->device), "%.127s", b->props.deviceName);
	snprintf(out->driver, sizeof(out->driver), "%.127s", b->driver);
	snprintf(out->api, sizeof(out->api), "Vulkan %u.%u.%u",
	         VK_API_VERSION_MAJOR(b->props.apiVersion),
	         VK_API_VERSION_MINOR(b->props.apiVersion),
	         VK_API_VERSION_PATCH(b->props.apiVersion));
	out->queues = b->nqueues;
	out->preempt_granularity_ns = b->preempt_ns;
	snprintf(out->cpu_access, sizeof(out->cpu_access), "%s",
	         atomic_load(&b->staged_segments) ? "staging" : "mapped");
}

/* A reset cannot stop a submission on the GPU; the engine stops at the next piece or slice
 * boundary, which the core's reset request already makes it look for. */
const gsd_engine_ops gsd_engine_vulkan = {
        .name = "vulkan",
        .open = vk_open,
        .close = vk_close,
        .describe = vk_describe,
        .segment_create = vk_segment_create,
        .segment_destroy = vk_segment_destroy,
        .segment_copy = vk_segment_copy,
        .segment_clear = vk_segment_clear,
        .recover = vk_recover,
        .kernel_caps = vk_kernel_caps,
        .kernel_create = vk_kernel_create,
        .kernel_destroy = vk_kernel_destroy,
        .create = vk_create,
        .submit = gsd_engine_thread_submit,
        .preempt = vk_preempt,
        .reset = vk_reset,
        .destroy = vk_destroy,
};
