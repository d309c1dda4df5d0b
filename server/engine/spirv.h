/*
 * Users' compute kernels: what the daemon checks of a SPIR-V module before any of it reaches a
 * driver, and what it learns of the module's interface.
 *
 * A module is accepted only when
 *   - SPIRV-Tools' validator accepts it for the Vulkan environment of the device
 *     (spvValidate with SPV_ENV_VULKAN_1_<vulkan_minor>);
 *   - it declares only capabilities of the allow-list (Shader, Matrix, Int64, and those the
 *     device offers and the backend enables: Int8, Int16, Float16, Float64, Int64Atomics, the
 *     8- and 16-bit storage capabilities, GroupNonUniform*, VulkanMemoryModel*), uses the
 *     Logical addressing model (no PhysicalStorageBufferAddresses: a kernel reaches memory only
 *     through the buffers its DISPATCH binds), and has the named entry point as a GLCompute
 *     one;
 *   - its resources are storage buffers and uniform buffers in descriptor set 0, at most
 *     GSD_KERNEL_MAX_BINDINGS of them with binding numbers below GSD_KERNEL_MAX_BINDINGS,
 *     and at most one push-constant block of at most max_push_bytes: no images, samplers,
 *     atomic counters, acceleration structures or input attachments, no other set;
 *   - its local size is a literal (no LocalSizeId, no specialisation constant) within the
 *     device's maxComputeWorkGroupSize and maxComputeWorkGroupInvocations.
 *
 * The instruction walk uses SPIRV-Tools' parser (spvBinaryParse) and the reflection SPIRV-Cross'
 * C API: no hand-written SPIR-V reader. Both run only after the validator has accepted the
 * module, and neither throws past this file.
 */
#ifndef GSD_SPIRV_H
#define GSD_SPIRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GSD_KERNEL_MAX_BINDINGS 16u
#define GSD_KERNEL_MAX_PUSH     128u
#define GSD_KERNEL_ENTRY_MAX    64u /* bytes of an entry point's name, with its NUL */

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
} gsd_kernel_limits;

typedef enum gsd_binding_kind {
	GSD_BINDING_STORAGE = 1, /* storage buffer (std430 block) */
	GSD_BINDING_UNIFORM = 2, /* uniform buffer (std140 block) */
} gsd_binding_kind;

typedef struct gsd_kernel_binding {
	uint32_t binding; /* binding number in set 0 */
	gsd_binding_kind kind;
	/* The kernel may write it: a storage buffer whose block (or every member of it) is not
	 * decorated NonWritable. A DISPATCH must bind a written binding to an allocation the
	 * packet lists with write access. */
	bool writes;
	char name[48]; /* the variable's (or its block type's) name from the module; may be "" */
} gsd_kernel_binding;

typedef struct gsd_kernel_info {
	uint32_t local_size[3];
	uint32_t push_bytes; /* declared size of the push-constant block; 0: none */
	uint32_t nbindings;
	gsd_kernel_binding bindings[GSD_KERNEL_MAX_BINDINGS]; /* ordered by binding number */
} gsd_kernel_info;

/*
 * Validates `size` bytes of SPIR-V (`code`, any alignment) and reflects the entry point `entry`
 * (a NUL-terminated name). Returns 0 with *out filled, or -1 with one line in err saying what
 * was refused and why ("capability PhysicalStorageBufferAddresses is not allowed", "binding 3
 * is in descriptor set 1: only set 0", "local size 2048x1x1 exceeds the device's 1024
 * invocations", the validator's own message, ...). Thread-safe; never crashes on any input.
 */
int gsd_spirv_check(const void *code, size_t size, const char *entry, const gsd_kernel_limits *lim,
                    gsd_kernel_info *out, char *err, size_t cap);

/* The limits of lavapipe on Debian 12 with everything the allow-list knows enabled: for tests
 * and for a backend that asks nothing of its device. */
void gsd_kernel_limits_default(gsd_kernel_limits *lim);

#endif
