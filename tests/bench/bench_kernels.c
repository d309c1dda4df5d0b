/*
 * bench_kernels: users' kernels (SPIR-V DISPATCH packets) through a real gpuschedd against the
 * same SPIR-V dispatched directly with Vulkan on the same device, each figure a ratio of two
 * measurements made by this program in the same run.
 *
 *   kernel create  gs_kernel_create of each example module (saxpy, reduce, matmul, blur) on a
 *                  fresh daemon: the first create (uncached: the daemon checks the module and
 *                  builds its pipeline) against the median of up to 20 later creates of the
 *                  same bytes (found by hash); ratio cached/uncached, target <= 5%;
 *   matmul         one DISPATCH of matmul.spv, square and sized here so that it runs at least
 *                  100 ms on the device: GPU time through gpusched (the packet's history record,
 *                  started_ns -> completed_ns, which the vulkan backend takes from the GPU
 *                  timestamps around the dispatch) against the direct dispatch's own
 *                  timestamps; best of --rounds each, alternating; ratio direct/gpusched,
 *                  target >= 0.95. Wall times (client submit -> completion) are shown beside,
 *                  and both sides' products are checked against a CPU reference;
 *   round trip     saxpy.spv with n = 0 over one group, which returns at once: gs_submit_wait
 *                  from the client against vkQueueSubmit + vkWaitForFences of a pre-recorded
 *                  command buffer, interleaved; p50 and p99 of --trials each; ratio
 *                  gpusched/direct, target <= 3x on lavapipe.
 *
 * The direct side is this program's own minimal Vulkan: one device (--device NAME, else
 * $GS_BENCH_DEVICE, else the CPU device, lavapipe, if there is one, else the first), one compute
 * queue, host-visible coherent storage buffers, a descriptor set and push constants, timestamps
 * before (TOP_OF_PIPE) and after (BOTTOM_OF_PIPE) the dispatch. The daemon is started with one
 * vulkan adapter on the device of that exact name, so that both sides run the same driver.
 *
 * Every loop is bounded by a count and by --seconds per measurement. With a sanitized daemon
 * the absolute times of the client path are slow; the ratios are what count (the kernels
 * themselves run in the uninstrumented driver). Exit status 0, 1 when a measurement failed,
 * 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vulkan/vulkan.h>

#include "gpusched.h"
#include "itest.h"
#include "testd.h"

#ifdef GS_EXAMPLES_SPV_DIR
#define DEFAULT_SPV_DIR GS_EXAMPLES_SPV_DIR
#else
#define DEFAULT_SPV_DIR "."
#endif

#define MAX_SPIRV        (4u << 20) /* the daemon refuses larger modules */
#define MAX_TRIALS       100000u
#define MAX_ROUNDS       1000u
#define WARMUP           20u    /* round trips of each side not counted */
#define CACHED_CREATES   20u    /* cached creates per module */
#define WAIT_MS          60000u /* one packet, or one fence, at most */
#define WAIT_NS          (60ull * 1000000000ull)
#define MATMUL_WG        16u          /* matmul.comp's local size, each way */
#define MATMUL_MIN_N     128u         /* where the sizing starts: quick on any device */
#define MATMUL_MAX_N     4096u        /* 4096^2 floats: the 64 MiB an allocation may hold */
#define MATMUL_TARGET_NS 100000000ull /* one dispatch must run at least this long */
#define MATMUL_AIM_NS    250000000ull /* what the sizing aims for: a margin above the target */
#define MATMUL_SAMPLES   64u          /* elements of C checked against a reference */
#define MATMUL_TOLERANCE 1e-4         /* relative to the sum of the terms' magnitudes */
#define EMPTY_BYTES      256u         /* each binding of the empty dispatch */

#define TARGET_CREATE    0.05 /* cached / uncached at most */
#define TARGET_MATMUL    0.95 /* direct / gpusched GPU time at least */
#define TARGET_ROUNDTRIP 3.0  /* gpusched / direct round trip at most */

typedef struct options {
	const char *device; /* a substring of the device's name; NULL: the CPU device */
	unsigned trials;
	unsigned rounds;
	double seconds;
	const char *dir;
	bool json;
} options;

static uint64_t now_ns(void)
{
	return gs_test_mono_ns();
}

static uint64_t deadline(const options *o)
{
	return now_ns() + (uint64_t)(o->seconds * 1e9);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The pct-th percentile of v[0..n) (sorted in place). */
static uint64_t percentile(uint64_t *v, size_t n, unsigned pct)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t i = n * pct / 100;
	return v[i < n ? i : n - 1];
}

static uint32_t ceil_div(uint32_t n, uint32_t d)
{
	return n / d + (n % d != 0);
}

/* Marsaglia's xorshift32: the same inputs on every run and on both sides. */
static uint32_t xorshift32(uint32_t *state)
{
	uint32_t x = *state;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

/* A float in [-1, 1), exact in 24 bits. Its smallest non-zero magnitude is 2^-23, so no
 * product is subnormal: those are slow on a CPU device and would time the inputs. */
static float random_float(uint32_t *state)
{
	return (float)(int32_t)(xorshift32(state) >> 8) / (float)(1u << 23) - 1.0f;
}

/* ---- the example modules ---------------------------------------------------------------- */

typedef struct module {
	const char *name;
	void *spirv;
	size_t size;
	uint64_t kernel; /* the first (uncached) create, kept for the dispatches */
} module;

enum { MOD_SAXPY, MOD_REDUCE, MOD_MATMUL, MOD_BLUR, MOD_COUNT };

static int read_module(const char *dir, module *m)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s.spv", dir, m->name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "bench_kernels: cannot open %s: %s (see --dir)\n", path,
		        strerror(errno));
		return -1;
	}
	/* One byte more than the daemon takes tells a module that is too large. */
	m->spirv = malloc(MAX_SPIRV + 1);
	if (!m->spirv) {
		fclose(f);
		fprintf(stderr, "bench_kernels: out of memory\n");
		return -1;
	}
	m->size = fread(m->spirv, 1, MAX_SPIRV + 1, f);
	bool bad = ferror(f) || m->size == 0 || m->size > MAX_SPIRV || m->size % 4;
	fclose(f);
	if (bad) {
		fprintf(stderr, "bench_kernels: %s: not a SPIR-V module of at most 4 MiB\n", path);
		return -1;
	}
	return 0;
}

/* ---- direct Vulkan ---------------------------------------------------------------------- */

typedef struct vk_direct {
	VkInstance instance;
	VkPhysicalDevice phys;
	VkDevice dev;
	VkQueue queue;
	uint32_t family;
	VkFence fence;
	VkCommandPool pool;
	VkPhysicalDeviceMemoryProperties mem;
	double ns_per_tick;
	uint64_t ts_mask;
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	char api[32];
} vk_direct;

typedef struct vk_buffer {
	VkBuffer buf;
	VkDeviceMemory mem;
	void *map;
	VkDeviceSize size;
} vk_buffer;

/* One kernel with its buffers bound and its dispatch recorded, ready to submit again and
 * again: a pipeline, its set, and a command buffer bracketing the dispatch with timestamps. */
typedef struct vk_job {
	VkShaderModule module;
	VkDescriptorSetLayout set_layout;
	VkPipelineLayout layout;
	VkPipeline pipe;
	VkDescriptorPool desc_pool;
	VkQueryPool ts;
	VkCommandBuffer cb;
} vk_job;

static int vk_ok(VkResult r, const char *what)
{
	if (r == VK_SUCCESS)
		return 0;
	fprintf(stderr, "bench_kernels: %s failed: VkResult %d\n", what, (int)r);
	return -1;
}

/* The queue family with compute and timestamps; -1 if none. */
static int compute_family(VkPhysicalDevice pd)
{
	VkQueueFamilyProperties qf[16];
	uint32_t n = 16;
	vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, qf);
	for (uint32_t i = 0; i < n; i++)
		if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].timestampValidBits)
			return (int)i;
	return -1;
}

/* The device named by `want` (a substring of its name), else the CPU device, else the first;
 * only devices with a compute queue that has timestamps count. */
static int vk_choose(vk_direct *v, const char *want)
{
	VkPhysicalDevice pds[16];
	uint32_t n = 16;
	VkResult r = vkEnumeratePhysicalDevices(v->instance, &n, pds);
	if (r != VK_SUCCESS && r != VK_INCOMPLETE)
		return vk_ok(r, "vkEnumeratePhysicalDevices");
	int best = -1;
	for (uint32_t i = 0; i < n; i++) {
		VkPhysicalDeviceProperties p;
		vkGetPhysicalDeviceProperties(pds[i], &p);
		if (compute_family(pds[i]) < 0 || (want && !strstr(p.deviceName, want)))
			continue;
		if (best < 0 || (!want && p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU))
			best = (int)i;
		if (want || p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
			break;
	}
	if (best < 0) {
		fprintf(stderr,
		        "bench_kernels: no Vulkan device%s%s%s with a compute queue that has "
		        "timestamps (vulkaninfo --summary lists them)\n",
		        want ? " named \"" : "", want ? want : "", want ? "\"" : "");
		return -1;
	}
	v->phys = pds[best];
	v->family = (uint32_t)compute_family(v->phys);
	VkPhysicalDeviceProperties p;
	vkGetPhysicalDeviceProperties(v->phys, &p);
	snprintf(v->name, sizeof(v->name), "%s", p.deviceName);
	snprintf(v->api, sizeof(v->api), "Vulkan %u.%u.%u", VK_API_VERSION_MAJOR(p.apiVersion),
	         VK_API_VERSION_MINOR(p.apiVersion), VK_API_VERSION_PATCH(p.apiVersion));
	v->ns_per_tick = p.limits.timestampPeriod;
	VkQueueFamilyProperties qf[16];
	uint32_t nf = 16;
	vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nf, qf);
	uint32_t bits = qf[v->family].timestampValidBits;
	v->ts_mask = bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
	vkGetPhysicalDeviceMemoryProperties(v->phys, &v->mem);
	return 0;
}

static int vk_open(vk_direct *v, const char *want)
{
	memset(v, 0, sizeof(*v));
	VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
	                         .pApplicationName = "bench_kernels",
	                         .apiVersion = VK_API_VERSION_1_1};
	VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
	                            .pApplicationInfo = &app};
	if (vk_ok(vkCreateInstance(&ici, NULL, &v->instance), "vkCreateInstance") ||
	    vk_choose(v, want))
		return -1;
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
	                               .queueFamilyIndex = v->family,
	                               .queueCount = 1,
	                               .pQueuePriorities = &prio};
	VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
	                          .queueCreateInfoCount = 1,
	                          .pQueueCreateInfos = &qci};
	if (vk_ok(vkCreateDevice(v->phys, &dci, NULL, &v->dev), "vkCreateDevice"))
		return -1;
	vkGetDeviceQueue(v->dev, v->family, 0, &v->queue);
	VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
	                               .queueFamilyIndex = v->family};
	if (vk_ok(vkCreateFence(v->dev, &fci, NULL, &v->fence), "vkCreateFence") ||
	    vk_ok(vkCreateCommandPool(v->dev, &pci, NULL, &v->pool), "vkCreateCommandPool"))
		return -1;
	return 0;
}

static void vk_close(vk_direct *v)
{
	if (v->dev) {
		vkDeviceWaitIdle(v->dev);
		if (v->pool)
			vkDestroyCommandPool(v->dev, v->pool, NULL);
		if (v->fence)
			vkDestroyFence(v->dev, v->fence, NULL);
		vkDestroyDevice(v->dev, NULL);
	}
	if (v->instance)
		vkDestroyInstance(v->instance, NULL);
	memset(v, 0, sizeof(*v));
}

static int vk_buffer_make(vk_direct *v, VkDeviceSize size, vk_buffer *b)
{
	memset(b, 0, sizeof(*b));
	b->size = size;
	VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
	                          .size = size,
	                          .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
	                          .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
	if (vk_ok(vkCreateBuffer(v->dev, &bci, NULL, &b->buf), "vkCreateBuffer"))
		return -1;
	VkMemoryRequirements req;
	vkGetBufferMemoryRequirements(v->dev, b->buf, &req);
	const VkMemoryPropertyFlags want =
	        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	uint32_t type = UINT32_MAX;
	for (uint32_t i = 0; i < v->mem.memoryTypeCount && type == UINT32_MAX; i++)
		if ((req.memoryTypeBits & (1u << i)) &&
		    (v->mem.memoryTypes[i].propertyFlags & want) == want)
			type = i;
	if (type == UINT32_MAX) {
		fprintf(stderr, "bench_kernels: no host-visible coherent memory for a buffer\n");
		return -1;
	}
	VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
	                            .allocationSize = req.size,
	                            .memoryTypeIndex = type};
	if (vk_ok(vkAllocateMemory(v->dev, &mai, NULL, &b->mem), "vkAllocateMemory") ||
	    vk_ok(vkBindBufferMemory(v->dev, b->buf, b->mem, 0), "vkBindBufferMemory") ||
	    vk_ok(vkMapMemory(v->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map), "vkMapMemory"))
		return -1;
	return 0;
}

static void vk_buffer_free(vk_direct *v, vk_buffer *b)
{
	if (b->buf)
		vkDestroyBuffer(v->dev, b->buf, NULL);
	if (b->mem)
		vkFreeMemory(v->dev, b->mem, NULL);
	memset(b, 0, sizeof(*b));
}

/*
 * Makes the job of `spirv` over bufs[0..n) (binding i is bufs[i]) with push_size bytes of push
 * constants, and records its dispatch of groups[0] x groups[1] x groups[2] work groups between
 * two timestamps.
 */
static int vk_job_make(vk_direct *v, vk_job *j, const module *m, const vk_buffer *bufs, uint32_t n,
                       const void *push, uint32_t push_size, const uint32_t groups[3])
{
	memset(j, 0, sizeof(*j));
	VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
	                                .codeSize = m->size,
	                                .pCode = m->spirv};
	VkDescriptorSetLayoutBinding lb[4];
	VkDescriptorBufferInfo dbi[4];
	VkWriteDescriptorSet w[4];
	if (n > 4)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		lb[i] = (VkDescriptorSetLayoutBinding){.binding = i,
		                                       .descriptorType =
		                                               VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		                                       .descriptorCount = 1,
		                                       .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
		dbi[i] = (VkDescriptorBufferInfo){.buffer = bufs[i].buf, .range = VK_WHOLE_SIZE};
	}
	VkDescriptorSetLayoutCreateInfo sli = {
	        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
	        .bindingCount = n,
	        .pBindings = lb};
	VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push_size};
	if (vk_ok(vkCreateShaderModule(v->dev, &smi, NULL, &j->module), "vkCreateShaderModule") ||
	    vk_ok(vkCreateDescriptorSetLayout(v->dev, &sli, NULL, &j->set_layout),
	          "vkCreateDescriptorSetLayout"))
		return -1;
	VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
	                                  .setLayoutCount = 1,
	                                  .pSetLayouts = &j->set_layout,
	                                  .pushConstantRangeCount = 1,
	                                  .pPushConstantRanges = &pr};
	if (vk_ok(vkCreatePipelineLayout(v->dev, &pli, NULL, &j->layout), "vkCreatePipelineLayout"))
		return -1;
	VkComputePipelineCreateInfo cpi = {
	        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
	        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
	                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
	                  .module = j->module,
	                  .pName = "main"},
	        .layout = j->layout};
	VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = n};
	VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
	                                  .maxSets = 1,
	                                  .poolSizeCount = 1,
	                                  .pPoolSizes = &ps};
	VkQueryPoolCreateInfo qpi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
	                             .queryType = VK_QUERY_TYPE_TIMESTAMP,
	                             .queryCount = 2};
	if (vk_ok(vkCreateComputePipelines(v->dev, VK_NULL_HANDLE, 1, &cpi, NULL, &j->pipe),
	          "vkCreateComputePipelines") ||
	    vk_ok(vkCreateDescriptorPool(v->dev, &dpi, NULL, &j->desc_pool),
	          "vkCreateDescriptorPool") ||
	    vk_ok(vkCreateQueryPool(v->dev, &qpi, NULL, &j->ts), "vkCreateQueryPool"))
		return -1;
	VkDescriptorSetAllocateInfo dai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
	                                   .descriptorPool = j->desc_pool,
	                                   .descriptorSetCount = 1,
	                                   .pSetLayouts = &j->set_layout};
	VkDescriptorSet set;
	if (vk_ok(vkAllocateDescriptorSets(v->dev, &dai, &set), "vkAllocateDescriptorSets"))
		return -1;
	for (uint32_t i = 0; i < n; i++)
		w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
		                              .dstSet = set,
		                              .dstBinding = i,
		                              .descriptorCount = 1,
		                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		                              .pBufferInfo = &dbi[i]};
	vkUpdateDescriptorSets(v->dev, n, w, 0, NULL);

	VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
	                                   .commandPool = v->pool,
	                                   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
	                                   .commandBufferCount = 1};
	/* Recorded once and submitted many times: no ONE_TIME_SUBMIT. */
	VkCommandBufferBeginInfo cbi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
	if (vk_ok(vkAllocateCommandBuffers(v->dev, &cai, &j->cb), "vkAllocateCommandBuffers") ||
	    vk_ok(vkBeginCommandBuffer(j->cb, &cbi), "vkBeginCommandBuffer"))
		return -1;
	vkCmdResetQueryPool(j->cb, j->ts, 0, 2);
	vkCmdWriteTimestamp(j->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, j->ts, 0);
	vkCmdBindPipeline(j->cb, VK_PIPELINE_BIND_POINT_COMPUTE, j->pipe);
	vkCmdBindDescriptorSets(j->cb, VK_PIPELINE_BIND_POINT_COMPUTE, j->layout, 0, 1, &set, 0,
	                        NULL);
	vkCmdPushConstants(j->cb, j->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
	vkCmdDispatch(j->cb, groups[0], groups[1], groups[2]);
	vkCmdWriteTimestamp(j->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, j->ts, 1);
	return vk_ok(vkEndCommandBuffer(j->cb), "vkEndCommandBuffer");
}

static void vk_job_free(vk_direct *v, vk_job *j)
{
	if (!v->dev)
		return;
	vkDeviceWaitIdle(v->dev);
	if (j->cb)
		vkFreeCommandBuffers(v->dev, v->pool, 1, &j->cb);
	if (j->ts)
		vkDestroyQueryPool(v->dev, j->ts, NULL);
	if (j->desc_pool)
		vkDestroyDescriptorPool(v->dev, j->desc_pool, NULL);
	if (j->pipe)
		vkDestroyPipeline(v->dev, j->pipe, NULL);
	if (j->layout)
		vkDestroyPipelineLayout(v->dev, j->layout, NULL);
	if (j->set_layout)
		vkDestroyDescriptorSetLayout(v->dev, j->set_layout, NULL);
	if (j->module)
		vkDestroyShaderModule(v->dev, j->module, NULL);
	memset(j, 0, sizeof(*j));
}

/* Submits the job and waits for its fence: *wall_ns is submit -> fence signalled as this
 * process sees it, *gpu_ns (may be NULL) the time between the two timestamps. */
static int vk_job_run(vk_direct *v, vk_job *j, uint64_t *wall_ns, uint64_t *gpu_ns)
{
	VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
	                   .commandBufferCount = 1,
	                   .pCommandBuffers = &j->cb};
	if (vk_ok(vkResetFences(v->dev, 1, &v->fence), "vkResetFences"))
		return -1;
	uint64_t t0 = now_ns();
	if (vk_ok(vkQueueSubmit(v->queue, 1, &si, v->fence), "vkQueueSubmit") ||
	    vk_ok(vkWaitForFences(v->dev, 1, &v->fence, VK_TRUE, WAIT_NS), "vkWaitForFences"))
		return -1;
	*wall_ns = now_ns() - t0;
	if (!gpu_ns)
		return 0;
	uint64_t t[2];
	if (vk_ok(vkGetQueryPoolResults(v->dev, j->ts, 0, 2, sizeof(t), t, sizeof(t[0]),
	                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
	          "vkGetQueryPoolResults"))
		return -1;
	*gpu_ns = (uint64_t)((double)((t[1] - t[0]) & v->ts_mask) * v->ns_per_tick);
	return 0;
}

/* ---- the daemon --------------------------------------------------------------------------- */

typedef struct daemon_side {
	itest_config cfg;
	gs_testd d;
	bool started;
	gs_client *c;
	uint64_t device;
	uint64_t context;
	gs_dmabuf dma;
	char device_name[256]; /* the adapter's device, as the daemon reports it */
	char api[64];
} daemon_side;

static int gs_fail(const daemon_side *s, const char *call, int status)
{
	const char *msg = s->c ? gs_client_message(s->c) : "";
	fprintf(stderr, "bench_kernels: %s: %s: %s\n", call, gs_status_name(status),
	        msg[0] ? msg : gs_strerror(status));
	return -1;
}

/* `s` as a JSON string into out (quotes and backslashes escaped, control bytes dropped). */
static void json_escape(const char *s, char *out, size_t cap)
{
	size_t n = 0;
	for (; *s && n + 3 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x20)
			continue;
		if (ch == '"' || ch == '\\')
			out[n++] = '\\';
		out[n++] = (char)ch;
	}
	out[n] = '\0';
}

/*
 * Starts a daemon with one vulkan adapter on the device of exactly `device_name` (the one
 * the direct side opened), connects, and makes the device and a context on the adapter's
 * compute node whose paging companion is the adapter's paging node.
 */
static int daemon_open(daemon_side *s, const char *device_name)
{
	char name[2 * VK_MAX_PHYSICAL_DEVICE_NAME_SIZE], json[1024];
	json_escape(device_name, name, sizeof(name));
	snprintf(json, sizeof(json),
	         "{\"clock\":\"wall\",\"adapters\":[{\"name\":\"gpu0\",\"backend\":\"vulkan\","
	         "\"device\":\"%s\",\"system_memory_mib\":512}]}",
	         name);
	if (itest_config_write(&s->cfg, json) != 0) {
		fprintf(stderr, "bench_kernels: cannot write the daemon's config\n");
		return -1;
	}
	const char *args[] = {"--config", s->cfg.path, "--log-level", "warn", NULL};
	if (gs_testd_start(&s->d, args) != 0)
		return -1;
	s->started = true;
	int rv = gs_connect(s->d.url, NULL, &s->c);
	if (rv != 0)
		return gs_fail(s, "gs_connect", rv);
	gs_daemon_info *info;
	if ((rv = gs_info(s->c, &info)) != 0)
		return gs_fail(s, "gs_info", rv);
	const gs_adapter_info *a = info->adapter_count ? &info->adapters[0] : NULL;
	if (!a || !a->kernels || !a->node_count) {
		fprintf(stderr, "bench_kernels: the daemon's adapter runs no user kernels\n");
		gs_info_free(info);
		return -1;
	}
	snprintf(s->device_name, sizeof(s->device_name), "%s", a->device);
	snprintf(s->api, sizeof(s->api), "%s", a->api);
	gs_client_set_adapter(s->c, a->id);
	uint32_t node = a->nodes[0].id, paging = 0;
	for (size_t i = a->node_count; i-- > 0;) {
		if (a->nodes[i].kind == GS_NODE_COMPUTE)
			node = a->nodes[i].id;
		if (a->nodes[i].paging)
			paging = a->nodes[i].id;
	}
	gs_info_free(info);
	if ((rv = gs_device_create(s->c, "bench_kernels", &s->device)) != 0)
		return gs_fail(s, "gs_device_create", rv);
	gs_context_desc cd;
	gs_context_desc_init(&cd, s->device, node);
	cd.info.paging_companion_node_id = paging;
	if ((rv = gs_context_create(s->c, &cd, &s->context, NULL)) != 0)
		return gs_fail(s, "gs_context_create", rv);
	gs_dmabuf_init(&s->dma);
	return 0;
}

/* Destroys the device (its context, kernels and allocations go with it) and stops the
 * daemon. */
static void daemon_close(daemon_side *s)
{
	if (s->c && s->device) {
		int rv = gs_device_destroy(s->c, s->device);
		if (rv != 0)
			gs_fail(s, "gs_device_destroy", rv);
	}
	if (s->c)
		gs_close(s->c);
	gs_dmabuf_free(&s->dma);
	if (s->started) {
		gs_testd_stop(&s->d);
		gs_testd_cleanup(&s->d);
	}
	itest_config_cleanup(&s->cfg);
}

static int gs_alloc(daemon_side *s, uint64_t size, const void *data, uint64_t *out)
{
	gs_allocation_desc ad = {.device = s->device, .size = size};
	gs_allocation_placement pl;
	int rv = gs_allocation_create(s->c, &ad, &pl);
	if (rv != 0)
		return gs_fail(s, "gs_allocation_create", rv);
	*out = pl.allocation;
	if (data && (rv = gs_allocation_write(s->c, pl.allocation, 0, data, size)) != 0)
		return gs_fail(s, "gs_allocation_write", rv);
	return 0;
}

/* Puts one DISPATCH of kernel over allocs[0..n) (binding i is allocs[i], of sizes[i] bytes)
 * into s->dma. The last binding is marked written: it is the one saxpy (y) and matmul (C)
 * write. */
static int gs_record(daemon_side *s, uint64_t kernel, const uint64_t *allocs, const uint64_t *sizes,
                     uint32_t n, const void *push, size_t push_size, const uint32_t groups[3])
{
	gs_dmabuf_binding bind[4];
	for (uint32_t i = 0; i < n && i < 4; i++)
		bind[i] = (gs_dmabuf_binding){.binding = i,
		                              .allocation = allocs[i],
		                              .range = sizes[i],
		                              .write = i == n - 1};
	gs_dmabuf_reset(&s->dma);
	int rv = gs_dmabuf_dispatch(&s->dma, kernel, groups, bind, n, push, push_size);
	return rv ? gs_fail(s, "gs_dmabuf_dispatch", rv) : 0;
}

/*
 * Submits s->dma and waits for it in one round trip: *wall_ns is the client's time around
 * gs_submit_wait. *gpu_ns (may be NULL) is the packet's GPU time from its history record: the
 * vulkan backend brackets each dispatch with timestamps and moves the record's started_ns and
 * completed_ns to them (server/vidsch/irq.c), so their difference is the same measure as the
 * direct side's. Explain reads after the audit is flushed, so the record is final here.
 */
static int gs_run(daemon_side *s, uint64_t *wall_ns, uint64_t *gpu_ns)
{
	gs_submit_result sr;
	uint64_t t0 = now_ns();
	int rv = gs_submit_wait(s->c, s->context, &s->dma, 0, WAIT_MS, &sr);
	*wall_ns = now_ns() - t0;
	if (rv != 0)
		return gs_fail(s, "gs_submit_wait", rv);
	if (sr.state != GS_PACKET_COMPLETED) {
		fprintf(stderr, "bench_kernels: packet %" PRIu64 " ended %s\n", sr.packet,
		        gs_packet_state_name(sr.state));
		return -1;
	}
	if (!gpu_ns)
		return 0;
	gs_explanation *e;
	if ((rv = gs_explain(s->c, sr.packet, NULL, &e)) != 0)
		return gs_fail(s, "gs_explain", rv);
	const gs_packet_record *p = e->packet;
	bool ok = p && p->started_ns && p->completed_ns >= p->started_ns;
	*gpu_ns = ok ? p->completed_ns - p->started_ns : 0;
	gs_explanation_free(e);
	if (!ok) {
		fprintf(stderr, "bench_kernels: packet %" PRIu64 " has no run in its record\n",
		        sr.packet);
		return -1;
	}
	return 0;
}

/* ---- kernel create ------------------------------------------------------------------------ */

typedef struct create_result {
	double uncached_ms;
	double cached_ms; /* median */
	size_t samples;
	bool first_cached; /* the first create was a hit already: its figure is no miss */
} create_result;

/* The first create of m is kept (the dispatches use it); each cached create is destroyed at
 * once, untimed, so that the tenant's kernel count stays small. */
static int bench_create(daemon_side *s, module *m, const options *o, create_result *out)
{
	gs_kernel_info ki;
	uint64_t t0 = now_ns();
	int rv = gs_kernel_create(s->c, s->device, m->spirv, m->size, NULL, &ki);
	uint64_t uncached = now_ns() - t0;
	if (rv != 0)
		return gs_fail(s, "gs_kernel_create", rv);
	m->kernel = ki.kernel;
	out->first_cached = ki.cached;
	out->uncached_ms = (double)uncached / 1e6;
	uint64_t v[CACHED_CREATES];
	size_t n = 0;
	uint64_t end = deadline(o);
	while (n < CACHED_CREATES && now_ns() < end) {
		t0 = now_ns();
		rv = gs_kernel_create(s->c, s->device, m->spirv, m->size, NULL, &ki);
		uint64_t ns = now_ns() - t0;
		if (rv != 0)
			return gs_fail(s, "gs_kernel_create", rv);
		if (!ki.cached) {
			fprintf(stderr,
			        "bench_kernels: %s: a second create of the same module was "
			        "not cached\n",
			        m->name);
			return -1;
		}
		v[n++] = ns;
		if ((rv = gs_kernel_destroy(s->c, ki.kernel)) != 0)
			return gs_fail(s, "gs_kernel_destroy", rv);
	}
	out->samples = n;
	out->cached_ms = (double)percentile(v, n, 50) / 1e6;
	return 0;
}

/* ---- matmul --------------------------------------------------------------------------------- */

typedef struct matmul_result {
	uint32_t n; /* M = N = K */
	unsigned rounds;
	uint64_t gs_gpu, vk_gpu; /* best of the rounds, ns */
	uint64_t gs_wall, vk_wall;
	double gs_err, vk_err; /* worst relative error of the sampled elements */
} matmul_result;

/* The direct side's matmul of n x n x n: buffers (A and B from the host), and the job. */
typedef struct vk_matmul {
	vk_buffer buf[3];
	vk_job job;
} vk_matmul;

static void vk_matmul_free(vk_direct *v, vk_matmul *mm)
{
	vk_job_free(v, &mm->job);
	for (int i = 0; i < 3; i++)
		vk_buffer_free(v, &mm->buf[i]);
}

static int vk_matmul_make(vk_direct *v, const module *m, uint32_t n, const float *a, const float *b,
                          vk_matmul *mm)
{
	memset(mm, 0, sizeof(*mm));
	const VkDeviceSize bytes = (VkDeviceSize)n * n * sizeof(float);
	const uint32_t push[3] = {n, n, n};
	const uint32_t groups[3] = {ceil_div(n, MATMUL_WG), ceil_div(n, MATMUL_WG), 1};
	for (int i = 0; i < 3; i++)
		if (vk_buffer_make(v, bytes, &mm->buf[i]) != 0)
			return -1;
	memcpy(mm->buf[0].map, a, bytes);
	memcpy(mm->buf[1].map, b, bytes);
	return vk_job_make(v, &mm->job, m, mm->buf, 3, push, sizeof(push), groups);
}

static void fill_inputs(float *a, float *b, size_t count)
{
	uint32_t seed = 0x12345678u;
	for (size_t i = 0; i < count; i++) {
		a[i] = random_float(&seed);
		b[i] = random_float(&seed);
	}
}

/*
 * The size: square (M = N = K), a multiple of the work-group size, grown from MATMUL_MIN_N on
 * the direct side until one dispatch runs MATMUL_TARGET_NS (aiming at MATMUL_AIM_NS: the
 * time grows as n^3), within MATMUL_MAX_N. On return mm holds the direct side at that size,
 * and *a, *b the inputs (malloc'd).
 */
static int size_matmul(vk_direct *v, const module *m, vk_matmul *mm, uint32_t *n_out, float **a,
                       float **b, const options *o)
{
	uint32_t n = MATMUL_MIN_N;
	uint64_t end = deadline(o);
	for (int step = 0;; step++) {
		size_t count = (size_t)n * n;
		free(*a);
		free(*b);
		*a = malloc(count * sizeof(float));
		*b = malloc(count * sizeof(float));
		if (!*a || !*b) {
			fprintf(stderr, "bench_kernels: out of memory\n");
			return -1;
		}
		fill_inputs(*a, *b, count);
		if (vk_matmul_make(v, m, n, *a, *b, mm) != 0)
			return -1;
		uint64_t wall, gpu;
		/* The first run pays for lazy work of the driver (compiling the kernel at its
		 * first dispatch, first touch of the memory): only the second counts. */
		if (vk_job_run(v, &mm->job, &wall, &gpu) != 0 ||
		    vk_job_run(v, &mm->job, &wall, &gpu) != 0)
			return -1;
		if (gpu >= MATMUL_TARGET_NS || n >= MATMUL_MAX_N || step >= 6 || now_ns() >= end)
			break;
		double scale = cbrt((double)MATMUL_AIM_NS / (double)(gpu ? gpu : 1));
		uint64_t next = (uint64_t)((double)n * scale);
		next = (next + MATMUL_WG - 1) / MATMUL_WG * MATMUL_WG;
		n = next > MATMUL_MAX_N ? MATMUL_MAX_N : next <= n ? n + MATMUL_WG : (uint32_t)next;
		vk_matmul_free(v, mm);
	}
	*n_out = n;
	return 0;
}

/* Element `index` of C on one side; a failure to read it sets *rv. */
typedef float (*c_reader)(void *arg, size_t index, int *rv);

/* Picks MATMUL_SAMPLES elements of C and returns the worst relative error of `c_at` against a
 * double-precision product, relative to the sum of the terms' magnitudes (run_examples.c's
 * check_matmul says why). A kernel that did not run gives a large error. */

static double matmul_error(const float *a, const float *b, uint32_t n, c_reader c_at, void *arg,
                           int *rv)
{
	uint32_t seed = 0xfeedbeefu;
	double worst = 0;
	for (unsigned s = 0; s < MATMUL_SAMPLES && *rv == 0; s++) {
		uint32_t i = xorshift32(&seed) % n, j = xorshift32(&seed) % n;
		double want = 0, scale = 0;
		for (uint32_t k = 0; k < n; k++) {
			double t = (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
			want += t;
			scale += fabs(t);
		}
		double got = c_at(arg, (size_t)i * n + j, rv);
		double err = scale > 0 ? fabs(got - want) / scale : fabs(got - want);
		if (!(err <= worst)) /* also takes NaN */
			worst = isnan(err) ? INFINITY : err;
	}
	return worst;
}

static float vk_c_at(void *arg, size_t index, int *rv)
{
	(void)rv;
	return ((const float *)arg)[index];
}

typedef struct gs_c {
	daemon_side *s;
	uint64_t allocation;
} gs_c;

static float gs_c_at(void *arg, size_t index, int *rv)
{
	gs_c *g = arg;
	float f = NAN;
	int r = gs_allocation_read(g->s->c, g->allocation, index * sizeof(float), &f, sizeof(f));
	if (r != 0)
		*rv = gs_fail(g->s, "gs_allocation_read", r);
	return f;
}

static int bench_matmul(daemon_side *s, vk_direct *v, const module *m, const options *o,
                        matmul_result *out)
{
	vk_matmul mm = {0};
	float *a = NULL, *b = NULL;
	uint64_t alloc[3] = {0, 0, 0};
	uint32_t n = 0;
	int rv = size_matmul(v, m, &mm, &n, &a, &b, o);
	if (rv != 0)
		goto out;
	const uint64_t bytes = (uint64_t)n * n * sizeof(float);
	const uint64_t sizes[3] = {bytes, bytes, bytes};
	const uint32_t push[3] = {n, n, n};
	const uint32_t groups[3] = {ceil_div(n, MATMUL_WG), ceil_div(n, MATMUL_WG), 1};
	if ((rv = gs_alloc(s, bytes, a, &alloc[0])) != 0 ||
	    (rv = gs_alloc(s, bytes, b, &alloc[1])) != 0 ||
	    (rv = gs_alloc(s, bytes, NULL, &alloc[2])) != 0 ||
	    (rv = gs_record(s, m->kernel, alloc, sizes, 3, push, sizeof(push), groups)) != 0)
		goto out;
	uint64_t wall, gpu;
	/* Warm-up, as on the direct side: the daemon's first dispatch of a kernel may compile
	 * it, and places the allocations in their segment. */
	if ((rv = gs_run(s, &wall, &gpu)) != 0)
		goto out;
	*out = (matmul_result){.n = n,
	                       .gs_gpu = UINT64_MAX,
	                       .vk_gpu = UINT64_MAX,
	                       .gs_wall = UINT64_MAX,
	                       .vk_wall = UINT64_MAX};
	uint64_t end = deadline(o);
	/* Alternating, and each side first in every other round, so that a drift of the
	 * machine (another process, the CPU's clock) touches both alike. */
	for (unsigned r = 0; r < o->rounds && now_ns() < end; r++) {
		for (int side = 0; side < 2; side++) {
			bool daemon = (side == 0) == (r % 2 == 0);
			rv = daemon ? gs_run(s, &wall, &gpu) : vk_job_run(v, &mm.job, &wall, &gpu);
			if (rv != 0)
				goto out;
			uint64_t *best_gpu = daemon ? &out->gs_gpu : &out->vk_gpu;
			uint64_t *best_wall = daemon ? &out->gs_wall : &out->vk_wall;
			if (gpu < *best_gpu)
				*best_gpu = gpu;
			if (wall < *best_wall)
				*best_wall = wall;
		}
		out->rounds = r + 1;
	}
	/* Both sides computed the product, not merely took the time. */
	gs_c g = {s, alloc[2]};
	out->vk_err = matmul_error(a, b, n, vk_c_at, mm.buf[2].map, &rv);
	if (rv == 0)
		out->gs_err = matmul_error(a, b, n, gs_c_at, &g, &rv);
	if (rv == 0 && (out->vk_err > MATMUL_TOLERANCE || out->gs_err > MATMUL_TOLERANCE)) {
		fprintf(stderr,
		        "bench_kernels: matmul result wrong (relative error %g direct, %g "
		        "gpusched)\n",
		        out->vk_err, out->gs_err);
		rv = -1;
	}
out:
	for (int i = 0; i < 3; i++)
		if (alloc[i])
			(void)gs_allocation_destroy(s->c, alloc[i]);
	vk_matmul_free(v, &mm);
	free(a);
	free(b);
	return rv;
}

/* ---- round trip of an empty dispatch ------------------------------------------------------ */

typedef struct rt_result {
	size_t trials;
	uint64_t gs_p50, gs_p99, vk_p50, vk_p99; /* ns */
} rt_result;

/* saxpy with n = 0: every invocation of its one group fails `i < n` and returns, so the
 * dispatch does no work and the figure is the path's alone. */
static int bench_round_trip(daemon_side *s, vk_direct *v, const module *m, const options *o,
                            rt_result *out)
{
	const struct {
		float a;
		uint32_t n;
	} push = {1.0f, 0};
	_Static_assert(sizeof(push) == 8, "push constants of saxpy.comp");
	const uint32_t groups[3] = {1, 1, 1};
	const uint64_t sizes[2] = {EMPTY_BYTES, EMPTY_BYTES};
	vk_buffer buf[2] = {0};
	vk_job job = {0};
	uint64_t alloc[2] = {0, 0};
	uint64_t *gs_v = calloc(o->trials, sizeof(uint64_t));
	uint64_t *vk_v = calloc(o->trials, sizeof(uint64_t));
	int rv = -1;
	if (!gs_v || !vk_v)
		goto out;
	if (vk_buffer_make(v, EMPTY_BYTES, &buf[0]) != 0 ||
	    vk_buffer_make(v, EMPTY_BYTES, &buf[1]) != 0 ||
	    vk_job_make(v, &job, m, buf, 2, &push, sizeof(push), groups) != 0 ||
	    gs_alloc(s, EMPTY_BYTES, NULL, &alloc[0]) != 0 ||
	    gs_alloc(s, EMPTY_BYTES, NULL, &alloc[1]) != 0 ||
	    gs_record(s, m->kernel, alloc, sizes, 2, &push, sizeof(push), groups) != 0)
		goto out;
	size_t n = 0;
	uint64_t end = deadline(o);
	/* Interleaved trial by trial, so that both sides see the same machine. */
	for (unsigned i = 0; i < o->trials + WARMUP && now_ns() < end; i++) {
		uint64_t gs_ns, vk_ns;
		if (gs_run(s, &gs_ns, NULL) != 0 || vk_job_run(v, &job, &vk_ns, NULL) != 0)
			goto out;
		if (i < WARMUP)
			continue;
		gs_v[n] = gs_ns;
		vk_v[n++] = vk_ns;
	}
	out->trials = n;
	out->gs_p50 = percentile(gs_v, n, 50);
	out->gs_p99 = percentile(gs_v, n, 99);
	out->vk_p50 = percentile(vk_v, n, 50);
	out->vk_p99 = percentile(vk_v, n, 99);
	rv = n ? 0 : -1;
	if (!n)
		fprintf(stderr, "bench_kernels: no round trip within --seconds\n");
out:
	for (int i = 0; i < 2; i++)
		if (alloc[i])
			(void)gs_allocation_destroy(s->c, alloc[i]);
	vk_job_free(v, &job);
	vk_buffer_free(v, &buf[0]);
	vk_buffer_free(v, &buf[1]);
	free(gs_v);
	free(vk_v);
	return rv;
}

/* ---- output --------------------------------------------------------------------------------- */

typedef struct results {
	const module *mods;
	create_result create[MOD_COUNT];
	matmul_result mm;
	rt_result rt;
} results;

static double ratio(uint64_t num, uint64_t den)
{
	return den ? (double)num / (double)den : 0;
}

static const char *verdict(bool met)
{
	return met ? "ok" : "MISSED";
}

static void print_table(FILE *f, const vk_direct *v, const daemon_side *s, const results *r)
{
	fprintf(f, "device: %s, %s (direct); daemon's adapter: %s, %s\n", v->name, v->api,
	        s->device_name, s->api);
	fprintf(f, "\nkernel create (client wall time)  %12s %12s %10s\n", "uncached", "cached p50",
	        "ratio");
	for (int i = 0; i < MOD_COUNT; i++) {
		const create_result *c = &r->create[i];
		double q = c->uncached_ms > 0 ? c->cached_ms / c->uncached_ms : 0;
		fprintf(f, "  %-32s %9.3f ms %9.3f ms %9.1f%%   (target <= %.0f%%: %s)%s\n",
		        r->mods[i].name, c->uncached_ms, c->cached_ms, q * 100, TARGET_CREATE * 100,
		        verdict(q <= TARGET_CREATE),
		        c->first_cached ? "  [first create was cached]" : "");
	}
	const matmul_result *m = &r->mm;
	double gq = ratio(m->vk_gpu, m->gs_gpu);
	char what[64];
	snprintf(what, sizeof(what), "matmul %ux%ux%u, best of %u", m->n, m->n, m->n, m->rounds);
	fprintf(f, "\n%-34s %12s %12s %10s\n", what, "gpusched", "direct", "ratio");
	fprintf(f, "  %-32s %9.2f ms %9.2f ms %10.3f   (direct/gpusched, target >= %.2f: %s)\n",
	        "GPU time", (double)m->gs_gpu / 1e6, (double)m->vk_gpu / 1e6, gq, TARGET_MATMUL,
	        verdict(gq >= TARGET_MATMUL));
	fprintf(f, "  %-32s %9.2f ms %9.2f ms %10.3f   (direct/gpusched)\n",
	        "wall time, submit -> done", (double)m->gs_wall / 1e6, (double)m->vk_wall / 1e6,
	        ratio(m->vk_wall, m->gs_wall));
	if (m->vk_gpu < MATMUL_TARGET_NS)
		fprintf(f,
		        "  (under the %llu ms a dispatch should run: the sizing stops at %u, "
		        "after 7 sizes or after --seconds)\n",
		        MATMUL_TARGET_NS / 1000000ull, MATMUL_MAX_N);
	const rt_result *t = &r->rt;
	snprintf(what, sizeof(what), "empty dispatch round trip, %zu", t->trials);
	fprintf(f, "\n%-34s %12s %12s %10s\n", what, "gpusched", "direct", "ratio");
	double p50 = ratio(t->gs_p50, t->vk_p50), p99 = ratio(t->gs_p99, t->vk_p99);
	fprintf(f, "  %-32s %9.1f us %9.1f us %9.2fx   (target <= %.0fx: %s)\n", "p50",
	        (double)t->gs_p50 / 1e3, (double)t->vk_p50 / 1e3, p50, TARGET_ROUNDTRIP,
	        verdict(p50 <= TARGET_ROUNDTRIP));
	fprintf(f, "  %-32s %9.1f us %9.1f us %9.2fx   (target <= %.0fx: %s)\n", "p99",
	        (double)t->gs_p99 / 1e3, (double)t->vk_p99 / 1e3, p99, TARGET_ROUNDTRIP,
	        verdict(p99 <= TARGET_ROUNDTRIP));
}

static void print_json(const vk_direct *v, const daemon_side *s, const results *r)
{
	char dev[2 * VK_MAX_PHYSICAL_DEVICE_NAME_SIZE], gs_dev[512];
	json_escape(v->name, dev, sizeof(dev));
	json_escape(s->device_name, gs_dev, sizeof(gs_dev));
	printf("{\"device\":\"%s\",\"api\":\"%s\",\"daemon_device\":\"%s\",\"create\":[", dev,
	       v->api, gs_dev);
	for (int i = 0; i < MOD_COUNT; i++) {
		const create_result *c = &r->create[i];
		printf("%s{\"kernel\":\"%s\",\"uncached_ms\":%.3f,\"cached_p50_ms\":%.3f,"
		       "\"cached_per_uncached\":%.4f,\"samples\":%zu,\"first_cached\":%s}",
		       i ? "," : "", r->mods[i].name, c->uncached_ms, c->cached_ms,
		       c->uncached_ms > 0 ? c->cached_ms / c->uncached_ms : 0, c->samples,
		       c->first_cached ? "true" : "false");
	}
	const matmul_result *m = &r->mm;
	const rt_result *t = &r->rt;
	/* Pairs are [gpusched, direct]. */
	printf("],\"matmul\":{\"m\":%u,\"n\":%u,\"k\":%u,\"rounds\":%u,"
	       "\"gpu_time\":\"history record started_ns..completed_ns\","
	       "\"gpu_ms\":[%.3f,%.3f],\"wall_ms\":[%.3f,%.3f],\"direct_per_gpusched\":%.4f,"
	       "\"wall_direct_per_gpusched\":%.4f,\"max_rel_err\":[%.3g,%.3g]},"
	       "\"round_trip\":{\"trials\":%zu,\"p50_us\":[%.1f,%.1f],\"p99_us\":[%.1f,%.1f],"
	       "\"p50_gpusched_per_direct\":%.3f,\"p99_gpusched_per_direct\":%.3f}}\n",
	       m->n, m->n, m->n, m->rounds, (double)m->gs_gpu / 1e6, (double)m->vk_gpu / 1e6,
	       (double)m->gs_wall / 1e6, (double)m->vk_wall / 1e6, ratio(m->vk_gpu, m->gs_gpu),
	       ratio(m->vk_wall, m->gs_wall), m->gs_err, m->vk_err, t->trials,
	       (double)t->gs_p50 / 1e3, (double)t->vk_p50 / 1e3, (double)t->gs_p99 / 1e3,
	       (double)t->vk_p99 / 1e3, ratio(t->gs_p50, t->vk_p50), ratio(t->gs_p99, t->vk_p99));
}

/* ---- options and main ----------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "Usage: bench_kernels [--device NAME] [--trials N] [--rounds N] [--seconds S]\n"
	           "                     [--dir DIR] [--json]\n"
	           "Users' kernels through gpuschedd against the same SPIR-V dispatched directly\n"
	           "with Vulkan on the same device: kernel create (cached / uncached), matmul GPU\n"
	           "time (direct / gpusched) and the round trip of an empty dispatch (gpusched /\n"
	           "direct, p50 and p99).\n"
	           "\n"
	           "  --device NAME  the Vulkan device whose name contains NAME (default\n"
	           "                 $GS_BENCH_DEVICE, else the CPU device: lavapipe)\n"
	           "  --trials N     round trips of each side (default 300)\n"
	           "  --rounds N     matmul dispatches of each side, the best counts (default 3)\n"
	           "  --seconds S    at most S seconds per measurement (default 60)\n"
	           "  --dir DIR      where saxpy.spv, reduce.spv, matmul.spv and blur.spv are\n"
	           "                 (default " DEFAULT_SPV_DIR ")\n"
	           "  --json         one JSON object on stdout (the table goes to stderr)\n"
	           "  --help         this text\n"
	           "\n"
	           "Exit status 0, 1 when a measurement failed, 2 usage.\n");
}

static bool parse_count(const char *s, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || errno || s[0] == '-' || v < 1 || v > max)
		return false;
	*out = (unsigned)v;
	return true;
}

/* "unknown option --x", "no value after --x", "bad value for --x: v" (value may be NULL). */
static int usage_error(const char *what, const char *option, const char *value)
{
	fprintf(stderr, "bench_kernels: %s %s%s%s\n", what, option, value ? ": " : "",
	        value ? value : "");
	usage(stderr);
	return 2;
}

/* 0, 1 for --help, or 2 after a usage message. */
static int parse_options(int argc, char **argv, options *o)
{
	static const char *const with_value[] = {"--device", "--dir", "--trials", "--rounds",
	                                         "--seconds"};
	const char *env = getenv("GS_BENCH_DEVICE");
	*o = (options){.device = env && *env ? env : NULL,
	               .trials = 300,
	               .rounds = 3,
	               .seconds = 60,
	               .dir = DEFAULT_SPV_DIR};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 1;
		}
		if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		bool known = false;
		for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
			known |= !strcmp(a, with_value[k]);
		if (!known)
			return usage_error("unknown option", a, NULL);
		if (i + 1 >= argc)
			return usage_error("no value after", a, NULL);
		const char *val = argv[++i];
		bool ok = true;
		if (!strcmp(a, "--device")) {
			o->device = *val ? val : NULL;
		} else if (!strcmp(a, "--dir")) {
			o->dir = val;
		} else if (!strcmp(a, "--trials")) {
			ok = parse_count(val, MAX_TRIALS, &o->trials);
		} else if (!strcmp(a, "--rounds")) {
			ok = parse_count(val, MAX_ROUNDS, &o->rounds);
		} else {
			char *end;
			o->seconds = strtod(val, &end);
			ok = *val && !*end && o->seconds > 0 && o->seconds <= 86400;
		}
		if (!ok)
			return usage_error("bad value for", a, val);
	}
	return 0;
}

int main(int argc, char **argv)
{
	options o;
	int rv = parse_options(argc, argv, &o);
	if (rv != 0)
		return rv == 1 ? 0 : rv;
	module mods[MOD_COUNT] = {
	        {.name = "saxpy"}, {.name = "reduce"}, {.name = "matmul"}, {.name = "blur"}};
	vk_direct v = {0};
	daemon_side s = {0};
	results r = {.mods = mods};
	int status = 1;
	for (int i = 0; i < MOD_COUNT; i++)
		if (read_module(o.dir, &mods[i]) != 0)
			goto out;
	/* The direct side first: it picks the device, and the daemon is given its name. */
	if (vk_open(&v, o.device) != 0 || daemon_open(&s, v.name) != 0)
		goto out;
	if (strcmp(s.device_name, v.name) != 0) {
		fprintf(stderr, "bench_kernels: the daemon opened \"%s\", not \"%s\"\n",
		        s.device_name, v.name);
		goto out;
	}
	/* Creates first: on this fresh daemon only they can be the modules' first. */
	for (int i = 0; i < MOD_COUNT; i++)
		if (bench_create(&s, &mods[i], &o, &r.create[i]) != 0)
			goto out;
	if (bench_matmul(&s, &v, &mods[MOD_MATMUL], &o, &r.mm) != 0 ||
	    bench_round_trip(&s, &v, &mods[MOD_SAXPY], &o, &r.rt) != 0)
		goto out;
	print_table(o.json ? stderr : stdout, &v, &s, &r);
	if (o.json)
		print_json(&v, &s, &r);
	status = 0;
out:
	daemon_close(&s);
	vk_close(&v);
	for (int i = 0; i < MOD_COUNT; i++)
		free(mods[i].spirv);
	return status;
}
