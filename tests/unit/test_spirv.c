/*
 * Users' compute kernels (engine/spirv.h): what a valid kernel reflects to, and every refusal.
 *
 * The modules are assembled here from SPIR-V assembly with SPIRV-Tools (no compiler at test
 * time): one SAXPY kernel, y = a * x + y, with slots that each test fills to make the variant
 * it needs. The kernel as written:
 *
 *   layout(local_size_x = 64) in;
 *   layout(set = 0, binding = 0) readonly buffer X { float x[]; };
 *   layout(set = 0, binding = 1) buffer Y { float y[]; };
 *   layout(push_constant) uniform Push { float a; uint n; };
 *   void main() { uint i = gl_GlobalInvocationID.x; if (i < n) y[i] = a * x[i] + y[i]; }
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
/* libspirv.h defines a constant with external linkage (in C): spirv.c includes it too. */
#define kDefaultMaxIdBound test_spirv_default_max_id_bound
#include <spirv-tools/libspirv.h>
#undef kDefaultMaxIdBound

#include "engine/spirv.h"

/* Each slot is inserted as is; NULL takes the default (most are empty). */
typedef struct kernel_src {
	const char *caps;         /* OpCapability / OpExtension lines after Shader */
	const char *memory_model; /* default "Logical GLSL450" */
	const char *interface;    /* ids appended to main's OpEntryPoint */
	const char *entry_points; /* more OpEntryPoint lines */
	const char *modes;        /* default "OpExecutionMode %main LocalSize 64 1 1" */
	const char *names;        /* more OpName lines */
	const char *y_binding;    /* default y in set 0, binding 1 */
	const char *decorations;  /* more decorations */
	const char *globals;      /* types, constants, variables after the buffers */
	const char *push_members; /* more members of the push-constant block, e.g. " %pad" */
	const char *functions;    /* more functions after main */
} kernel_src;

static const char kernel_template[] =
        "OpCapability Shader\n"
        "%s\n"
        "OpMemoryModel %s\n"
        "OpEntryPoint GLCompute %%main \"main\" %%gid %%x_buf %%y_buf %%pc%s\n"
        "%s\n"
        "%s\n"
        "OpName %%main \"main\"\n"
        "OpName %%x_buf \"x\"\n"
        "OpName %%y_buf \"y\"\n"
        "OpName %%PC \"Push\"\n"
        "%s\n"
        "OpDecorate %%gid BuiltIn GlobalInvocationId\n"
        "OpDecorate %%rt_float ArrayStride 4\n"
        "OpDecorate %%XBuf Block\n"
        "OpMemberDecorate %%XBuf 0 Offset 0\n"
        "OpMemberDecorate %%XBuf 0 NonWritable\n"
        "OpDecorate %%YBuf Block\n"
        "OpMemberDecorate %%YBuf 0 Offset 0\n"
        "OpDecorate %%x_buf DescriptorSet 0\n"
        "OpDecorate %%x_buf Binding 0\n"
        "%s\n"
        "OpDecorate %%PC Block\n"
        "OpMemberDecorate %%PC 0 Offset 0\n"
        "OpMemberDecorate %%PC 1 Offset 4\n"
        "%s\n"
        "%%void = OpTypeVoid\n"
        "%%fn = OpTypeFunction %%void\n"
        "%%bool = OpTypeBool\n"
        "%%uint = OpTypeInt 32 0\n"
        "%%int = OpTypeInt 32 1\n"
        "%%float = OpTypeFloat 32\n"
        "%%v3uint = OpTypeVector %%uint 3\n"
        "%%int_0 = OpConstant %%int 0\n"
        "%%int_1 = OpConstant %%int 1\n"
        "%%uint_1 = OpConstant %%uint 1\n"
        "%%uint_64 = OpConstant %%uint 64\n"
        "%%ptr_in_v3 = OpTypePointer Input %%v3uint\n"
        "%%gid = OpVariable %%ptr_in_v3 Input\n"
        "%%rt_float = OpTypeRuntimeArray %%float\n"
        "%%XBuf = OpTypeStruct %%rt_float\n"
        "%%YBuf = OpTypeStruct %%rt_float\n"
        "%%ptr_x = OpTypePointer StorageBuffer %%XBuf\n"
        "%%ptr_y = OpTypePointer StorageBuffer %%YBuf\n"
        "%%x_buf = OpVariable %%ptr_x StorageBuffer\n"
        "%%y_buf = OpVariable %%ptr_y StorageBuffer\n"
        "%s\n"
        "%%PC = OpTypeStruct %%float %%uint%s\n"
        "%%ptr_pc = OpTypePointer PushConstant %%PC\n"
        "%%pc = OpVariable %%ptr_pc PushConstant\n"
        "%%ptr_sb_float = OpTypePointer StorageBuffer %%float\n"
        "%%ptr_pc_float = OpTypePointer PushConstant %%float\n"
        "%%ptr_pc_uint = OpTypePointer PushConstant %%uint\n"
        "%%main = OpFunction %%void None %%fn\n"
        "%%entry = OpLabel\n"
        "%%g = OpLoad %%v3uint %%gid\n"
        "%%i = OpCompositeExtract %%uint %%g 0\n"
        "%%np = OpAccessChain %%ptr_pc_uint %%pc %%int_1\n"
        "%%n = OpLoad %%uint %%np\n"
        "%%in = OpULessThan %%bool %%i %%n\n"
        "OpSelectionMerge %%end None\n"
        "OpBranchConditional %%in %%body %%end\n"
        "%%body = OpLabel\n"
        "%%ap = OpAccessChain %%ptr_pc_float %%pc %%int_0\n"
        "%%a = OpLoad %%float %%ap\n"
        "%%xp = OpAccessChain %%ptr_sb_float %%x_buf %%int_0 %%i\n"
        "%%xv = OpLoad %%float %%xp\n"
        "%%yp = OpAccessChain %%ptr_sb_float %%y_buf %%int_0 %%i\n"
        "%%yv = OpLoad %%float %%yp\n"
        "%%ax = OpFMul %%float %%a %%xv\n"
        "%%r = OpFAdd %%float %%ax %%yv\n"
        "OpStore %%yp %%r\n"
        "OpBranch %%end\n"
        "%%end = OpLabel\n"
        "OpReturn\n"
        "OpFunctionEnd\n"
        "%s\n";

static const char *or_default(const char *slot, const char *def)
{
	return slot ? slot : def;
}

/* Assembles a variant as SPIR-V 1.5 (Vulkan 1.2); returns malloc'd words and their size. */
static uint32_t *assemble(const kernel_src *k, size_t *size)
{
	static char text[16384];
	int n = snprintf(text, sizeof(text), kernel_template, or_default(k->caps, ""),
	                 or_default(k->memory_model, "Logical GLSL450"),
	                 or_default(k->interface, ""), or_default(k->entry_points, ""),
	                 or_default(k->modes, "OpExecutionMode %main LocalSize 64 1 1"),
	                 or_default(k->names, ""),
	                 or_default(k->y_binding, "OpDecorate %y_buf DescriptorSet 0\n"
	                                          "OpDecorate %y_buf Binding 1"),
	                 or_default(k->decorations, ""), or_default(k->globals, ""),
	                 or_default(k->push_members, ""), or_default(k->functions, ""));
	assert_true(n > 0 && (size_t)n < sizeof(text));

	spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_2);
	spv_binary bin = NULL;
	spv_diagnostic diag = NULL;
	spv_result_t r = spvTextToBinary(ctx, text, (size_t)n, &bin, &diag);
	if (r != SPV_SUCCESS)
		fail_msg("assembly failed: %s", diag ? diag->error : "?");
	*size = bin->wordCount * 4;
	uint32_t *words = malloc(*size);
	assert_non_null(words);
	memcpy(words, bin->code, *size);
	spvBinaryDestroy(bin);
	spvDiagnosticDestroy(diag);
	spvContextDestroy(ctx);
	return words;
}

static gsd_kernel_limits limits(void)
{
	gsd_kernel_limits lim;
	gsd_kernel_limits_default(&lim);
	return lim;
}

/* A refusal: -1, the substring in one line of err, and an info cleared to zero. */
static void expect_refused(const void *code, size_t size, const char *entry,
                           const gsd_kernel_limits *lim, const char *want)
{
	gsd_kernel_info info;
	memset(&info, 0xa5, sizeof(info));
	char err[256] = "";
	assert_int_equal(gsd_spirv_check(code, size, entry, lim, &info, err, sizeof(err)), -1);
	if (!strstr(err, want))
		fail_msg("wanted \"%s\" in \"%s\"", want, err);
	assert_null(strchr(err, '\n'));
	assert_int_equal(info.nbindings, 0);
	assert_int_equal(info.push_bytes, 0);
}

static void expect_variant_refused(const kernel_src *k, const gsd_kernel_limits *lim,
                                   const char *want)
{
	size_t size;
	uint32_t *words = assemble(k, &size);
	gsd_kernel_limits def = limits();
	expect_refused(words, size, "main", lim ? lim : &def, want);
	free(words);
}

static void accept(const uint32_t *words, size_t size, const gsd_kernel_limits *lim,
                   gsd_kernel_info *info)
{
	char err[256] = "";
	int rc = gsd_spirv_check(words, size, "main", lim, info, err, sizeof(err));
	if (rc != 0)
		fail_msg("refused: %s", err);
	assert_string_equal(err, "");
}

static void accept_variant(const kernel_src *k, const gsd_kernel_limits *lim, gsd_kernel_info *info)
{
	size_t size;
	uint32_t *words = assemble(k, &size);
	gsd_kernel_limits def = limits();
	accept(words, size, lim ? lim : &def, info);
	free(words);
}

/* ---- accepted kernels ---- */

static void test_defaults(void **state)
{
	(void)state;
	gsd_kernel_limits lim;
	memset(&lim, 0x5a, sizeof(lim));
	gsd_kernel_limits_default(&lim);
	assert_int_equal(lim.vulkan_minor, 2);
	assert_int_equal(lim.max_local_size[0], 1024);
	assert_int_equal(lim.max_local_size[1], 1024);
	assert_int_equal(lim.max_local_size[2], 64);
	assert_int_equal(lim.max_invocations, 1024);
	assert_int_equal(lim.max_push_bytes, 128);
	assert_int_equal(lim.max_shared_bytes, 32768);
	assert_true(lim.int8 && lim.int16 && lim.float16 && lim.float64 && lim.int64_atomics);
	assert_true(lim.storage8 && lim.storage16 && lim.subgroup);
}

static void expect_saxpy(const gsd_kernel_info *info)
{
	assert_int_equal(info->local_size[0], 64);
	assert_int_equal(info->local_size[1], 1);
	assert_int_equal(info->local_size[2], 1);
	assert_int_equal(info->push_bytes, 8);
	assert_int_equal(info->nbindings, 2);
	assert_int_equal(info->bindings[0].binding, 0);
	assert_int_equal(info->bindings[0].kind, GSD_BINDING_STORAGE);
	assert_false(info->bindings[0].writes); /* every member NonWritable */
	assert_string_equal(info->bindings[0].name, "x");
	assert_int_equal(info->bindings[1].binding, 1);
	assert_int_equal(info->bindings[1].kind, GSD_BINDING_STORAGE);
	assert_true(info->bindings[1].writes);
	assert_string_equal(info->bindings[1].name, "y");
}

static void test_saxpy(void **state)
{
	(void)state;
	const kernel_src k = {0};
	gsd_kernel_info info;
	memset(&info, 0xa5, sizeof(info));
	accept_variant(&k, NULL, &info);
	expect_saxpy(&info);
	/* The slots past nbindings are cleared. */
	for (uint32_t i = info.nbindings; i < GSD_KERNEL_MAX_BINDINGS; i++)
		assert_int_equal(info.bindings[i].kind, 0);
}

/* The module at an address that is not 4-byte aligned: the check copies it. */
static void test_unaligned(void **state)
{
	(void)state;
	const kernel_src k = {0};
	size_t size;
	uint32_t *words = assemble(&k, &size);
	uint8_t *buf = malloc(size + 1);
	assert_non_null(buf);
	memcpy(buf + 1, words, size);
	gsd_kernel_limits lim = limits();
	gsd_kernel_info info;
	char err[256] = "";
	assert_int_equal(gsd_spirv_check(buf + 1, size, "main", &lim, &info, err, sizeof(err)), 0);
	expect_saxpy(&info);
	free(buf);
	free(words);
}

/* A uniform buffer, a read-only storage buffer by its variable's decoration, bindings out of
 * declaration order: the table comes back in binding order. */
static void test_uniform_and_order(void **state)
{
	(void)state;
	const kernel_src k = {
	        .interface = " %ubo %z_buf",
	        .names = "OpName %ubo \"params\"\nOpName %z_buf \"z\"",
	        .y_binding = "OpDecorate %y_buf DescriptorSet 0\nOpDecorate %y_buf Binding 9",
	        .decorations = "OpDecorate %UBuf Block\n"
	                       "OpMemberDecorate %UBuf 0 Offset 0\n"
	                       "OpDecorate %ubo DescriptorSet 0\n"
	                       "OpDecorate %ubo Binding 5\n"
	                       "OpDecorate %z_buf DescriptorSet 0\n"
	                       "OpDecorate %z_buf Binding 15\n"
	                       "OpDecorate %z_buf NonWritable",
	        .globals = "%UBuf = OpTypeStruct %float\n"
	                   "%ptr_u = OpTypePointer Uniform %UBuf\n"
	                   "%ubo = OpVariable %ptr_u Uniform\n"
	                   "%z_buf = OpVariable %ptr_y StorageBuffer",
	};
	gsd_kernel_info info;
	accept_variant(&k, NULL, &info);
	assert_int_equal(info.nbindings, 4);
	static const struct {
		uint32_t binding;
		gsd_binding_kind kind;
		bool writes;
		const char *name;
	} want[] = {
	        {0, GSD_BINDING_STORAGE, false, "x"},
	        {5, GSD_BINDING_UNIFORM, false, "params"},
	        {9, GSD_BINDING_STORAGE, true, "y"},
	        {15, GSD_BINDING_STORAGE, false, "z"},
	};
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(info.bindings[i].binding, want[i].binding);
		assert_int_equal(info.bindings[i].kind, want[i].kind);
		assert_int_equal(info.bindings[i].writes, want[i].writes);
		assert_string_equal(info.bindings[i].name, want[i].name);
	}
}

/* The WorkgroupSize built-in overrides LocalSize; a constant one is a literal size. */
static void test_workgroup_size_constant(void **state)
{
	(void)state;
	const kernel_src k = {
	        .decorations = "OpDecorate %wgs BuiltIn WorkgroupSize",
	        .globals = "%uint_32 = OpConstant %uint 32\n"
	                   "%uint_2 = OpConstant %uint 2\n"
	                   "%wgs = OpConstantComposite %v3uint %uint_32 %uint_2 %uint_1",
	};
	gsd_kernel_info info;
	accept_variant(&k, NULL, &info);
	assert_int_equal(info.local_size[0], 32);
	assert_int_equal(info.local_size[1], 2);
	assert_int_equal(info.local_size[2], 1);
}

/* The largest kernel the limits allow, and the push-constant limit exactly. */
static void test_at_the_limits(void **state)
{
	(void)state;
	const kernel_src k = {
	        .modes = "OpExecutionMode %main LocalSize 16 4 16",
	        .decorations = "OpDecorate %pad ArrayStride 4\nOpMemberDecorate %PC 2 Offset 8",
	        .globals = "%uint_30 = OpConstant %uint 30\n%pad = OpTypeArray %float %uint_30",
	        .push_members = " %pad",
	};
	gsd_kernel_info info;
	accept_variant(&k, NULL, &info);
	assert_int_equal(info.push_bytes, 128);
	assert_int_equal(info.local_size[0] * info.local_size[1] * info.local_size[2], 1024);
}

/* ---- capabilities and addressing ---- */

static void test_physical_storage_buffer(void **state)
{
	(void)state;
	const kernel_src k = {
	        .caps = "OpCapability PhysicalStorageBufferAddresses",
	        .memory_model = "PhysicalStorageBuffer64 GLSL450",
	};
	expect_variant_refused(&k, NULL,
	                       "capability PhysicalStorageBufferAddresses is not allowed: kernels "
	                       "reach memory only through their bindings");
}

static void test_int8_follows_the_device(void **state)
{
	(void)state;
	const kernel_src k = {
	        .caps = "OpCapability Int8",
	        .globals = "%uchar = OpTypeInt 8 0",
	};
	gsd_kernel_limits lim = limits();
	gsd_kernel_info info;
	accept_variant(&k, &lim, &info);
	assert_int_equal(info.nbindings, 2);
	lim.int8 = false;
	expect_variant_refused(&k, &lim, "capability Int8 is not allowed");
}

static void test_gated_capabilities(void **state)
{
	(void)state;
	static const struct {
		const char *caps;
		size_t flag; /* offsetof the bool that gates it */
	} cases[] = {
	        {"OpCapability Int16", offsetof(gsd_kernel_limits, int16)},
	        {"OpCapability Float64", offsetof(gsd_kernel_limits, float64)},
	        {"OpCapability GroupNonUniform\nOpCapability GroupNonUniformBallot",
	         offsetof(gsd_kernel_limits, subgroup)},
	        {"OpCapability StorageBuffer16BitAccess", offsetof(gsd_kernel_limits, storage16)},
	        {"OpCapability StorageBuffer8BitAccess", offsetof(gsd_kernel_limits, storage8)},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const kernel_src k = {.caps = cases[i].caps};
		gsd_kernel_limits lim = limits();
		gsd_kernel_info info;
		accept_variant(&k, &lim, &info);
		*(bool *)((char *)&lim + cases[i].flag) = false;
		expect_variant_refused(&k, &lim, "is not allowed: the device does not offer");
	}
	/* The Vulkan memory model: where the device has it. */
	const kernel_src vmm = {
	        .caps = "OpCapability VulkanMemoryModel\nOpCapability VulkanMemoryModelDeviceScope",
	        .memory_model = "Logical Vulkan",
	};
	gsd_kernel_info info;
	accept_variant(&vmm, NULL, &info);
	gsd_kernel_limits lim = limits();
	lim.memory_model = false;
	expect_variant_refused(&vmm, &lim, "is not allowed: the device does not offer");
}

/* ---- resources ---- */

static void test_storage_image(void **state)
{
	(void)state;
	const kernel_src k = {
	        .interface = " %image",
	        .decorations = "OpDecorate %image DescriptorSet 0\nOpDecorate %image Binding 2",
	        .globals = "%img = OpTypeImage %float 2D 0 0 0 2 Rgba32f\n"
	                   "%ptr_img = OpTypePointer UniformConstant %img\n"
	                   "%image = OpVariable %ptr_img UniformConstant",
	};
	expect_variant_refused(&k, NULL, "storage class UniformConstant");
	/* Declared but not in the entry point's interface (SPIR-V 1.4 and later): refused too. */
	const kernel_src unused = {
	        .decorations = k.decorations,
	        .globals = k.globals,
	};
	expect_variant_refused(&unused, NULL, "storage class UniformConstant");
}

static void test_sampler(void **state)
{
	(void)state;
	const kernel_src k = {
	        .interface = " %smp",
	        .decorations = "OpDecorate %smp DescriptorSet 0\nOpDecorate %smp Binding 3",
	        .globals = "%sampler = OpTypeSampler\n"
	                   "%ptr_smp = OpTypePointer UniformConstant %sampler\n"
	                   "%smp = OpVariable %ptr_smp UniformConstant",
	};
	expect_variant_refused(&k, NULL, "no images, samplers");
}

/* Only buffers: a user-defined input or output, however declared, is refused too. */
static void test_stage_interface(void **state)
{
	(void)state;
	const kernel_src in = {
	        .interface = " %uin",
	        .decorations = "OpDecorate %uin Location 0",
	        .globals = "%uin = OpVariable %ptr_in_v3 Input",
	};
	expect_variant_refused(&in, NULL, "is a stage input");
	const kernel_src out = {
	        .interface = " %uout",
	        .decorations = "OpDecorate %uout Location 0",
	        .globals = "%ptr_out = OpTypePointer Output %v3uint\n"
	                   "%uout = OpVariable %ptr_out Output",
	};
	expect_variant_refused(&out, NULL, "storage class Output");
}

static void test_descriptor_set_1(void **state)
{
	(void)state;
	const kernel_src k = {
	        .y_binding = "OpDecorate %y_buf DescriptorSet 1\nOpDecorate %y_buf Binding 1",
	};
	expect_variant_refused(&k, NULL, "binding 1 (\"y\") is in descriptor set 1: only set 0");
}

static void test_binding_16(void **state)
{
	(void)state;
	const kernel_src k = {
	        .y_binding = "OpDecorate %y_buf DescriptorSet 0\nOpDecorate %y_buf Binding 16",
	};
	expect_variant_refused(&k, NULL, "binding 16 (\"y\") is out of range");
}

static void test_duplicate_binding(void **state)
{
	(void)state;
	const kernel_src k = {
	        .y_binding = "OpDecorate %y_buf DescriptorSet 0\nOpDecorate %y_buf Binding 0",
	};
	expect_variant_refused(&k, NULL, "binding 0 is declared twice");
}

static void test_buffer_array(void **state)
{
	(void)state;
	const kernel_src k = {
	        .interface = " %zs",
	        .decorations = "OpDecorate %zs DescriptorSet 0\nOpDecorate %zs Binding 4",
	        .globals = "%uint_4 = OpConstant %uint 4\n"
	                   "%arr = OpTypeArray %YBuf %uint_4\n"
	                   "%ptr_arr = OpTypePointer StorageBuffer %arr\n"
	                   "%zs = OpVariable %ptr_arr StorageBuffer",
	};
	expect_variant_refused(&k, NULL, "is an array of buffers");
}

static void test_push_constants_too_big(void **state)
{
	(void)state;
	/* 8 bytes, then 62 floats: 256 bytes. */
	const kernel_src k = {
	        .decorations = "OpDecorate %pad ArrayStride 4\nOpMemberDecorate %PC 2 Offset 8",
	        .globals = "%uint_62 = OpConstant %uint 62\n%pad = OpTypeArray %float %uint_62",
	        .push_members = " %pad",
	};
	expect_variant_refused(&k, NULL,
	                       "push-constant block of 256 bytes exceeds the device's 128");
	/* A device that offers fewer bytes than the daemon's cap. */
	gsd_kernel_limits lim = limits();
	lim.max_push_bytes = 4;
	const kernel_src plain = {0};
	expect_variant_refused(&plain, &lim,
	                       "push-constant block of 8 bytes exceeds the device's 4");
}

/* ---- the entry point and its local size ---- */

static void test_local_size(void **state)
{
	(void)state;
	const kernel_src wide = {.modes = "OpExecutionMode %main LocalSize 2048 1 1"};
	expect_variant_refused(&wide, NULL, "local size 2048x1x1 exceeds");
	const kernel_src deep = {.modes = "OpExecutionMode %main LocalSize 1 1 65"};
	expect_variant_refused(&deep, NULL, "local size 1x1x65 exceeds the device's maximum of 64");
	const kernel_src square = {.modes = "OpExecutionMode %main LocalSize 64 64 1"};
	expect_variant_refused(
	        &square, NULL,
	        "local size 64x64x1 is 4096 invocations, more than the device's 1024");
}

static void test_local_size_id(void **state)
{
	(void)state;
	const kernel_src k = {
	        .modes = "OpExecutionModeId %main LocalSizeId %uint_64 %uint_1 %uint_1",
	};
	expect_variant_refused(&k, NULL, "LocalSizeId");
}

static void test_workgroup_size_spec_constant(void **state)
{
	(void)state;
	const kernel_src k = {
	        .decorations = "OpDecorate %wgs BuiltIn WorkgroupSize\nOpDecorate %sx SpecId 0",
	        .globals = "%sx = OpSpecConstant %uint 64\n"
	                   "%wgs = OpSpecConstantComposite %v3uint %sx %uint_1 %uint_1",
	};
	expect_variant_refused(&k, NULL, "specialisation constant");
}

/* A specialisation-constant operation as the WorkgroupSize built-in hides the size too. */
static void test_workgroup_size_spec_op(void **state)
{
	(void)state;
	const kernel_src k = {
	        .decorations = "OpDecorate %wgs BuiltIn WorkgroupSize",
	        .globals = "%cc = OpConstantComposite %v3uint %uint_64 %uint_1 %uint_1\n"
	                   "%wgs = OpSpecConstantOp %v3uint VectorShuffle %cc %cc 0 1 2",
	};
	expect_variant_refused(&k, NULL, "the WorkgroupSize built-in is not a constant composite");
}

static void test_entry_point(void **state)
{
	(void)state;
	const kernel_src k = {
	        .entry_points = "OpEntryPoint Fragment %frag \"frag\"\n"
	                        "OpEntryPoint Vertex %vert \"vert\"",
	        .modes = "OpExecutionMode %main LocalSize 64 1 1\n"
	                 "OpExecutionMode %frag OriginUpperLeft",
	        .functions = "%frag = OpFunction %void None %fn\n%fl = OpLabel\nOpReturn\n"
	                     "OpFunctionEnd\n"
	                     "%vert = OpFunction %void None %fn\n%vl = OpLabel\nOpReturn\n"
	                     "OpFunctionEnd",
	};
	size_t size;
	uint32_t *words = assemble(&k, &size);
	gsd_kernel_limits lim = limits();
	gsd_kernel_info info;
	accept(words, size, &lim, &info); /* main is still there */
	expect_refused(words, size, "frag", &lim, "entry point \"frag\" is a Fragment entry point");
	expect_refused(words, size, "vert", &lim, "entry point \"vert\" is a Vertex entry point");
	expect_refused(words, size, "nope", &lim, "no entry point named \"nope\"");
	expect_refused(words, size, "", &lim, "no entry point name");
	expect_refused(words, size, NULL, &lim, "no entry point name");
	char longname[GSD_KERNEL_ENTRY_MAX + 1];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	expect_refused(words, size, longname, &lim, "is longer than 63 bytes");
	longname[GSD_KERNEL_ENTRY_MAX - 1] = '\0'; /* 63 bytes: a name, merely absent */
	expect_refused(words, size, longname, &lim, "no entry point named");
	free(words);
}

/* Two entry points on one function: SPIRV-Cross keeps one of them, and selecting the other
 * must be a refusal, not an exception thrown through C. */
static void test_shared_entry_function(void **state)
{
	(void)state;
	const kernel_src k = {
	        .entry_points = "OpEntryPoint GLCompute %main \"other\" %gid %x_buf %y_buf %pc",
	};
	size_t size;
	uint32_t *words = assemble(&k, &size);
	gsd_kernel_limits lim = limits();
	gsd_kernel_info info;
	char err_main[256] = "", err_other[256] = "";
	int a = gsd_spirv_check(words, size, "main", &lim, &info, err_main, sizeof(err_main));
	int b = gsd_spirv_check(words, size, "other", &lim, &info, err_other, sizeof(err_other));
	assert_true((a == 0) != (b == 0));
	assert_non_null(strstr(a ? err_main : err_other, "shares its function"));
	free(words);
}

/* ---- the validator and the byte string ---- */

static void test_validator(void **state)
{
	(void)state;
	const kernel_src k = {0};
	size_t size;
	uint32_t *words = assemble(&k, &size);
	gsd_kernel_limits lim = limits();
	lim.vulkan_minor = 0; /* SPIR-V 1.5 is too new for Vulkan 1.0 */
	expect_refused(words, size, "main", &lim, "SPIR-V validation: ");
	lim.vulkan_minor = 4;
	expect_refused(words, size, "main", &lim, "Vulkan 1.4 is not a SPIR-V environment");
	/* An instruction cut short: the validator's message, on one line. */
	lim = limits();
	uint32_t *cut = malloc(size);
	assert_non_null(cut);
	memcpy(cut, words, size);
	cut[5] = (cut[5] & 0xffff) | (9u << 16); /* OpCapability Shader claims 9 words */
	expect_refused(cut, size, "main", &lim, "SPIR-V validation: ");
	free(cut);
	free(words);
}

static void test_malformed(void **state)
{
	(void)state;
	const kernel_src k = {0};
	size_t size;
	uint32_t *words = assemble(&k, &size);
	gsd_kernel_limits lim = limits();
	uint32_t *bad = malloc(size);
	assert_non_null(bad);

	memcpy(bad, words, size);
	bad[0] = 0x03022307; /* the magic number byte-swapped */
	expect_refused(bad, size, "main", &lim, "not a SPIR-V module");
	bad[0] = 0xdeadbeef;
	expect_refused(bad, size, "main", &lim, "0xdeadbeef");

	expect_refused(words, size - 8, "main", &lim, "SPIR-V validation: ");
	expect_refused(words, 12, "main", &lim, "shorter than the 20-byte SPIR-V header");
	expect_refused(words, 20, "main", &lim, "SPIR-V validation: ");
	expect_refused(words, size - 1, "main", &lim, "not a whole number of 32-bit");
	expect_refused(words, 0, "main", &lim, "empty module");
	expect_refused(NULL, 0, "main", &lim, "empty module");

	size_t huge = (4u << 20) + 4;
	uint32_t *big = calloc(1, huge);
	assert_non_null(big);
	memcpy(big, words, size);
	expect_refused(big, huge, "main", &lim, "module of 4194308 bytes exceeds 4 MiB");
	free(big);

	/* Random words after a good magic number, and wholly random bytes. */
	uint64_t s = 0x9e3779b97f4a7c15u;
	for (int round = 0; round < 200; round++) {
		size_t n = 5 + (size_t)(round % 40);
		uint32_t *r = malloc(n * 4);
		assert_non_null(r);
		for (size_t i = 0; i < n; i++) {
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			r[i] = (uint32_t)s;
		}
		if (round % 2)
			r[0] = 0x07230203;
		gsd_kernel_info info;
		char err[256] = "";
		assert_int_equal(gsd_spirv_check(r, n * 4, "main", &lim, &info, err, sizeof(err)),
		                 -1);
		assert_true(err[0] != '\0' && !strchr(err, '\n'));
		free(r);
	}
	free(bad);
	free(words);
}

/* err may be small or absent; out must be given. */
static void test_error_buffer(void **state)
{
	(void)state;
	gsd_kernel_limits lim = limits();
	gsd_kernel_info info;
	char err[8];
	memset(err, 'x', sizeof(err));
	assert_int_equal(gsd_spirv_check("abc", 3, "main", &lim, &info, err, sizeof(err)), -1);
	assert_int_equal(strlen(err), sizeof(err) - 1);
	assert_int_equal(gsd_spirv_check("abc", 3, "main", &lim, &info, NULL, 0), -1);
	assert_int_equal(gsd_spirv_check("abc", 3, "main", &lim, NULL, err, sizeof(err)), -1);
	assert_int_equal(gsd_spirv_check("abcd", 4, "main", NULL, &info, err, sizeof(err)), -1);
}

/* ---- threads ---- */

typedef struct job {
	const uint32_t *words;
	size_t size;
	int failures;
} job;

static void *check_many(void *arg)
{
	job *j = arg;
	gsd_kernel_limits lim = limits();
	for (int i = 0; i < 20; i++) {
		gsd_kernel_info info;
		char err[256];
		if (gsd_spirv_check(j->words, j->size, "main", &lim, &info, err, sizeof(err)) !=
		            0 ||
		    info.nbindings != 2 || info.push_bytes != 8 || info.local_size[0] != 64)
			j->failures++;
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	const kernel_src k = {0};
	size_t size;
	uint32_t *words = assemble(&k, &size);
	pthread_t t[4];
	job jobs[4];
	for (int i = 0; i < 4; i++) {
		jobs[i] = (job){words, size, 0};
		assert_int_equal(pthread_create(&t[i], NULL, check_many, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(jobs[i].failures, 0);
	}
	free(words);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_defaults),
	        cmocka_unit_test(test_saxpy),
	        cmocka_unit_test(test_unaligned),
	        cmocka_unit_test(test_uniform_and_order),
	        cmocka_unit_test(test_workgroup_size_constant),
	        cmocka_unit_test(test_at_the_limits),
	        cmocka_unit_test(test_physical_storage_buffer),
	        cmocka_unit_test(test_int8_follows_the_device),
	        cmocka_unit_test(test_gated_capabilities),
	        cmocka_unit_test(test_storage_image),
	        cmocka_unit_test(test_sampler),
	        cmocka_unit_test(test_stage_interface),
	        cmocka_unit_test(test_descriptor_set_1),
	        cmocka_unit_test(test_binding_16),
	        cmocka_unit_test(test_duplicate_binding),
	        cmocka_unit_test(test_buffer_array),
	        cmocka_unit_test(test_push_constants_too_big),
	        cmocka_unit_test(test_local_size),
	        cmocka_unit_test(test_local_size_id),
	        cmocka_unit_test(test_workgroup_size_spec_constant),
	        cmocka_unit_test(test_workgroup_size_spec_op),
	        cmocka_unit_test(test_entry_point),
	        cmocka_unit_test(test_shared_entry_function),
	        cmocka_unit_test(test_validator),
	        cmocka_unit_test(test_malformed),
	        cmocka_unit_test(test_error_buffer),
	        cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
