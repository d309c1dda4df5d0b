/*
 * Users' compute kernels: what the daemon checks of a SPIR-V module before any of it reaches a
 * driver, and what it learns of the module's interface.
 *
 * A module is accepted only when
 *   - it is 20 bytes (a header) to 4 MiB of whole 32-bit words, the first of them the
 *     magic number in host byte order (what a driver reads), at any alignment;
 *   - SPIRV-Tools' validator accepts it for the Vulkan environment of the device
 *     (spvValidate with SPV_ENV_VULKAN_1_<vulkan_minor>);
 *   - it declares only capabilities of the allow-list (always Shader, Matrix and Int64
 *     (the backend needs shaderInt64 itself); those the device offers and the backend
 *     enables: VulkanMemoryModel and VulkanMemoryModelDeviceScope, Int8, Int16, Float16, Float64,
 * Int64Atomics, the 8- and 16-bit storage capabilities, GroupNonUniform*), uses the Logical
 * addressing model (no PhysicalStorageBufferAddresses: a kernel reaches memory only through the
 * buffers its DISPATCH binds), and has the named entry point as a GLCompute one, with a function of
 *     its own (SPIRV-Cross reflects one entry point per function);
 *   - its resources are storage buffers and uniform buffers in descriptor set 0, at most
 *     GSD_KERNEL_MAX_BINDINGS of them with binding numbers below GSD_KERNEL_MAX_BINDINGS,
 *     one buffer per binding (no arrays of buffers, no two variables on one binding), and at
 *     most one push-constant block of at most max_push_bytes: no images, samplers, atomic
 *     counters, acceleration structures or input attachments (not even declared and unused),
 *     no stage inputs or outputs other than built-ins, no other set;
 *   - its local size is a literal (no LocalSizeId, no specialisation constant, a WorkgroupSize
 *     built-in only as a constant composite) within the device's maxComputeWorkGroupSize and
 *     maxComputeWorkGroupInvocations.
 *
 * The instruction walk uses SPIRV-Tools' parser (spvBinaryParse) and the reflection SPIRV-Cross'
 * C API: no hand-written SPIR-V reader (only the magic number is read by hand). Both run only
 * after the validator has accepted the module, and neither throws past this file.
 */
#ifndef GSD_SPIRV_H
#define GSD_SPIRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GSD_KERNEL_MAX_BINDINGS 16u
#define GSD_KERNEL_MAX_PUSH     128u
#define GSD_KERNEL_ENTRY_MAX    64u        /* bytes of an entry point's name, with its NUL */
#define GSD_KERNEL_MAX_MODULE   (4u << 20) /* bytes of SPIR-V a module may have */

/* What a device lets a user kernel do (the backend's describe_kernels). */
typedef struct gsd_kernel_limits {
	uint32_t vulkan_minor;      /* SPIR-V environment: Vulkan 1.<minor> (0..3) */
	uint32_t max_local_size[3]; /* maxComputeWorkGroupSize */
	uint32_t max_invocations;   /* maxComputeWorkGroupInvocations */
	uint32_t max_push_bytes;    /* min(maxPushConstantsSize, GSD_KERNEL_MAX_PUSH) */
	uint32_t max_shared_bytes;  /* maxComputeSharedMemorySize (not checked here: the driver) */
	bool int8, int16, float16, float64, int64_atomics;
	bool storage8, storage16; /* 8- / 16-bit storage-buffer access */
	bool subgroup;            /* GroupNonUniform and its compute operations */
	bool memory_model;        /* vulkanMemoryModel and its device scope */
} gsd_kernel_limits;

typedef enum gsd_binding_kind {
	GSD_BINDING_STORAGE = 1, /* storage buffer (std430 block) */
	GSD_BINDING_UNIFORM = 2, /* uniform buffer (std140 block) */
} gsd_binding_kind;

typedef struct gsd_kernel_binding {
	uint32_t binding; /* binding number in set 0 */
	gsd_binding_kind kind;
	/* The kernel may write it: a storage buffer, unless its variable, its block or every
	 * member of its block is decorated NonWritable. A DISPATCH must bind a written binding to
	 * an allocation the packet lists with write access. */
	bool writes;
	char name[48]; /* the variable's (or its block type's) name from the module, truncated,
	                * control characters replaced by '?'; may be "" */
} gsd_kernel_binding;

typedef struct gsd_kernel_info {
	uint32_t local_size[3];
	uint32_t push_bytes; /* declared size of the push-constant block; 0: none */
	uint32_t nbindings;
	gsd_kernel_binding bindings[GSD_KERNEL_MAX_BINDINGS]; /* ordered by binding number */
} gsd_kernel_info;

/*
 * Validates `size` bytes of SPIR-V (`code`, any alignment) and reflects the entry point `entry`
 * (a NUL-terminated name of 1 to GSD_KERNEL_ENTRY_MAX - 1 bytes). Returns 0 with *out filled,
 * or -1 with *out zeroed and one line in err (when cap allows) saying what was refused and why
 * ("capability PhysicalStorageBufferAddresses is not allowed: kernels reach memory only
 * through their bindings", "binding 3 ("out") is in descriptor set 1: only set 0", "local
 * size 64x64x1 is 4096 invocations, more than the device's 1024", "SPIR-V validation: " and
 * the first line of the validator's own message, ...). Thread-safe; never crashes on any input.
 */
int gsd_spirv_check(const void *code, size_t size, const char *entry, const gsd_kernel_limits *lim,
                    gsd_kernel_info *out, char *err, size_t cap);

/* The kernel's declaration of binding number n; NULL if it declares none. */
static inline const gsd_kernel_binding *gsd_kernel_binding_of(const gsd_kernel_info *info,
                                                              uint32_t n)
{
	for (uint32_t i = 0; i < info->nbindings; i++)
		if (info->bindings[i].binding == n)
			return &info->bindings[i];
	return NULL;
}

/* The limits of lavapipe on Debian 12 with everything the allow-list knows enabled: for tests
 * and for a backend that asks nothing of its device. */
void gsd_kernel_limits_default(gsd_kernel_limits *lim);

#endif
