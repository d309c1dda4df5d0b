/*
 * Fuzz target: the checks of users' compute kernels (engine/spirv.h), without a device.
 *
 * Each input is used twice:
 *   - as a module itself: arbitrary bytes (or SPIR-V, when a libFuzzer corpus holds some);
 *   - as a script of mutations applied to one of the built-in seed kernels (valid modules,
 *     assembled once from the SPIR-V assembly below): edits of whole words, mostly of the
 *     operands of instructions (binding numbers, capabilities, storage classes, local sizes,
 *     execution models...), so that many results still pass the validator and reach the walk
 *     and the reflection. The script also picks the device limits and the entry point name.
 *     When the script runs out, a PRNG seeded from the input continues it.
 *
 * Checked for every call: the answer is 0 or -1; a refusal is one non-empty line and leaves the
 * interface zeroed; an accepted kernel obeys the limits (bindings in increasing order below
 * GSD_KERNEL_MAX_BINDINGS, uniform buffers never written, push constants and local size within
 * the limits); the same bytes at an odd address get the same answer. Any failure calls
 * abort(); sanitizers (leaks included) report the rest.
 *
 * Built with replay_main.c (deterministic inputs, the default) or with libFuzzer
 * (-DGS_LIBFUZZER=ON, clang). The replay driver's inputs are serialized requests and their
 * mutations: as scripts they are as good as any bytes.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libspirv.h defines a constant with external linkage (in C): spirv.c includes it too. */
#define kDefaultMaxIdBound fuzz_spirv_default_max_id_bound
#include <spirv-tools/libspirv.h>
#undef kDefaultMaxIdBound
#include <spirv/unified1/spirv.h>

#include "engine/spirv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_spirv: check failed: %s\n", what);
	abort();
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail(#cond);                                                               \
	} while (0)

/* ---- seed kernels ---- */

/* The types, constants and built-in input every seed uses. */
#define SEED_TYPES                                                                                 \
	"%void = OpTypeVoid\n"                                                                     \
	"%fn = OpTypeFunction %void\n"                                                             \
	"%bool = OpTypeBool\n"                                                                     \
	"%uint = OpTypeInt 32 0\n"                                                                 \
	"%int = OpTypeInt 32 1\n"                                                                  \
	"%float = OpTypeFloat 32\n"                                                                \
	"%v3uint = OpTypeVector %uint 3\n"                                                         \
	"%int_0 = OpConstant %int 0\n"                                                             \
	"%int_1 = OpConstant %int 1\n"                                                             \
	"%uint_1 = OpConstant %uint 1\n"                                                           \
	"%uint_2 = OpConstant %uint 2\n"                                                           \
	"%uint_64 = OpConstant %uint 64\n"                                                         \
	"%ptr_in_v3 = OpTypePointer Input %v3uint\n"                                               \
	"%gid = OpVariable %ptr_in_v3 Input\n"                                                     \
	"%rt_float = OpTypeRuntimeArray %float\n"                                                  \
	"%ptr_sb_float = OpTypePointer StorageBuffer %float\n"

/* SAXPY: a read-only and a written storage buffer, 8 bytes of push constants, 64x1x1. */
static const char seed_saxpy[] =
        "OpCapability Shader\n"
        "OpMemoryModel Logical GLSL450\n"
        "OpEntryPoint GLCompute %main \"main\" %gid %x_buf %y_buf %pc\n"
        "OpExecutionMode %main LocalSize 64 1 1\n"
        "OpName %x_buf \"x\"\n"
        "OpName %y_buf \"y\"\n"
        "OpDecorate %gid BuiltIn GlobalInvocationId\n"
        "OpDecorate %rt_float ArrayStride 4\n"
        "OpDecorate %XBuf Block\n"
        "OpMemberDecorate %XBuf 0 Offset 0\n"
        "OpMemberDecorate %XBuf 0 NonWritable\n"
        "OpDecorate %YBuf Block\n"
        "OpMemberDecorate %YBuf 0 Offset 0\n"
        "OpDecorate %x_buf DescriptorSet 0\n"
        "OpDecorate %x_buf Binding 0\n"
        "OpDecorate %y_buf DescriptorSet 0\n"
        "OpDecorate %y_buf Binding 1\n"
        "OpDecorate %PC Block\n"
        "OpMemberDecorate %PC 0 Offset 0\n"
        "OpMemberDecorate %PC 1 Offset 4\n" SEED_TYPES "%XBuf = OpTypeStruct %rt_float\n"
        "%YBuf = OpTypeStruct %rt_float\n"
        "%ptr_x = OpTypePointer StorageBuffer %XBuf\n"
        "%ptr_y = OpTypePointer StorageBuffer %YBuf\n"
        "%x_buf = OpVariable %ptr_x StorageBuffer\n"
        "%y_buf = OpVariable %ptr_y StorageBuffer\n"
        "%PC = OpTypeStruct %float %uint\n"
        "%ptr_pc = OpTypePointer PushConstant %PC\n"
        "%pc = OpVariable %ptr_pc PushConstant\n"
        "%ptr_pc_float = OpTypePointer PushConstant %float\n"
        "%ptr_pc_uint = OpTypePointer PushConstant %uint\n"
        "%main = OpFunction %void None %fn\n"
        "%entry = OpLabel\n"
        "%g = OpLoad %v3uint %gid\n"
        "%i = OpCompositeExtract %uint %g 0\n"
        "%np = OpAccessChain %ptr_pc_uint %pc %int_1\n"
        "%n = OpLoad %uint %np\n"
        "%in = OpULessThan %bool %i %n\n"
        "OpSelectionMerge %end None\n"
        "OpBranchConditional %in %body %end\n"
        "%body = OpLabel\n"
        "%ap = OpAccessChain %ptr_pc_float %pc %int_0\n"
        "%a = OpLoad %float %ap\n"
        "%xp = OpAccessChain %ptr_sb_float %x_buf %int_0 %i\n"
        "%xv = OpLoad %float %xp\n"
        "%yp = OpAccessChain %ptr_sb_float %y_buf %int_0 %i\n"
        "%yv = OpLoad %float %yp\n"
        "%ax = OpFMul %float %a %xv\n"
        "%r = OpFAdd %float %ax %yv\n"
        "OpStore %yp %r\n"
        "OpBranch %end\n"
        "%end = OpLabel\n"
        "OpReturn\n"
        "OpFunctionEnd\n";

/*
 * A uniform buffer scaled into a storage buffer with a subgroup sum through workgroup memory:
 * the Vulkan memory model, subgroup and 8-bit capabilities, the WorkgroupSize built-in as a
 * constant (64x2x1), and a second, Fragment entry point.
 */
static const char seed_reduce[] =
        "OpCapability Shader\n"
        "OpCapability Int8\n"
        "OpCapability GroupNonUniform\n"
        "OpCapability GroupNonUniformArithmetic\n"
        "OpCapability VulkanMemoryModel\n"
        "OpMemoryModel Logical Vulkan\n"
        "OpEntryPoint GLCompute %main \"main\" %gid %u_buf %o_buf %shared\n"
        "OpEntryPoint Fragment %frag \"frag\"\n"
        "OpExecutionMode %main LocalSize 1 1 1\n"
        "OpExecutionMode %frag OriginUpperLeft\n"
        "OpName %u_buf \"params\"\n"
        "OpName %o_buf \"out\"\n"
        "OpDecorate %gid BuiltIn GlobalInvocationId\n"
        "OpDecorate %wgs BuiltIn WorkgroupSize\n"
        "OpDecorate %rt_float ArrayStride 4\n"
        "OpDecorate %UBuf Block\n"
        "OpMemberDecorate %UBuf 0 Offset 0\n"
        "OpDecorate %OBuf Block\n"
        "OpMemberDecorate %OBuf 0 Offset 0\n"
        "OpDecorate %u_buf DescriptorSet 0\n"
        "OpDecorate %u_buf Binding 3\n"
        "OpDecorate %o_buf DescriptorSet 0\n"
        "OpDecorate %o_buf Binding 7\n" SEED_TYPES "%uchar = OpTypeInt 8 0\n"
        "%uint_3 = OpConstant %uint 3\n"
        "%wgs = OpConstantComposite %v3uint %uint_64 %uint_2 %uint_1\n"
        "%UBuf = OpTypeStruct %float\n"
        "%OBuf = OpTypeStruct %rt_float\n"
        "%ptr_u = OpTypePointer Uniform %UBuf\n"
        "%ptr_o = OpTypePointer StorageBuffer %OBuf\n"
        "%ptr_u_float = OpTypePointer Uniform %float\n"
        "%u_buf = OpVariable %ptr_u Uniform\n"
        "%o_buf = OpVariable %ptr_o StorageBuffer\n"
        "%ptr_wg = OpTypePointer Workgroup %float\n"
        "%shared = OpVariable %ptr_wg Workgroup\n"
        "%main = OpFunction %void None %fn\n"
        "%entry = OpLabel\n"
        "%g = OpLoad %v3uint %gid\n"
        "%i = OpCompositeExtract %uint %g 0\n"
        "%sp = OpAccessChain %ptr_u_float %u_buf %int_0\n"
        "%s = OpLoad %float %sp\n"
        "%sum = OpGroupNonUniformFAdd %float %uint_3 Reduce %s\n"
        "OpStore %shared %sum\n"
        "%v = OpLoad %float %shared\n"
        "%op = OpAccessChain %ptr_sb_float %o_buf %int_0 %i\n"
        "OpStore %op %v\n"
        "OpReturn\n"
        "OpFunctionEnd\n"
        "%frag = OpFunction %void None %fn\n"
        "%fl = OpLabel\n"
        "OpReturn\n"
        "OpFunctionEnd\n";

/* Refused as it stands (a storage image): a mutation may make it a kernel. */
static const char seed_image[] =
        "OpCapability Shader\n"
        "OpMemoryModel Logical GLSL450\n"
        "OpEntryPoint GLCompute %main \"main\" %gid %image %b_buf\n"
        "OpExecutionMode %main LocalSize 8 8 1\n"
        "OpDecorate %gid BuiltIn GlobalInvocationId\n"
        "OpDecorate %image DescriptorSet 0\n"
        "OpDecorate %image Binding 0\n"
        "OpDecorate %rt_float ArrayStride 4\n"
        "OpDecorate %BBuf Block\n"
        "OpMemberDecorate %BBuf 0 Offset 0\n"
        "OpDecorate %b_buf DescriptorSet 0\n"
        "OpDecorate %b_buf Binding 1\n" SEED_TYPES "%img = OpTypeImage %float 2D 0 0 0 2 Rgba32f\n"
        "%ptr_img = OpTypePointer UniformConstant %img\n"
        "%image = OpVariable %ptr_img UniformConstant\n"
        "%BBuf = OpTypeStruct %rt_float\n"
        "%ptr_b = OpTypePointer StorageBuffer %BBuf\n"
        "%b_buf = OpVariable %ptr_b StorageBuffer\n"
        "%main = OpFunction %void None %fn\n"
        "%entry = OpLabel\n"
        "OpReturn\n"
        "OpFunctionEnd\n";

#define NSEEDS 3

typedef struct seed {
	uint32_t *words;
	size_t nwords;
} seed;

/* Assembled on first use (SPIR-V 1.5, for Vulkan 1.2); a seed that does not assemble is a bug
 * of this file. */
static const seed *seeds(void)
{
	static seed s[NSEEDS];
	static bool ready;
	if (ready)
		return s;
	static const char *const text[NSEEDS] = {seed_saxpy, seed_reduce, seed_image};
	spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_2);
	CHECK(ctx != NULL);
	for (int i = 0; i < NSEEDS; i++) {
		spv_binary bin = NULL;
		spv_diagnostic diag = NULL;
		if (spvTextToBinary(ctx, text[i], strlen(text[i]), &bin, &diag) != SPV_SUCCESS) {
			fprintf(stderr, "fuzz_spirv: seed %d: %s\n", i, diag ? diag->error : "?");
			fail("a seed assembles");
		}
		s[i].nwords = bin->wordCount;
		s[i].words = malloc(bin->wordCount * 4);
		CHECK(s[i].words != NULL);
		memcpy(s[i].words, bin->code, bin->wordCount * 4);
		spvBinaryDestroy(bin);
		spvDiagnosticDestroy(diag);
	}
	spvContextDestroy(ctx);
	ready = true;
	return s;
}

/* ---- the script ---- */

/*
 * The input's bytes in order, each mixed with a fixed stream (so that byte i still decides the
 * same choice, and an input of zeros does not always choose the first option), then a
 * splitmix64 stream seeded from the whole input.
 */
typedef struct script {
	const uint8_t *p;
	size_t left;
	uint64_t mask; /* the fixed stream */
	uint64_t rng;
} script;

static uint64_t splitmix(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

static uint32_t script_byte(script *s)
{
	if (s->left) {
		s->left--;
		return (*s->p++ ^ (uint32_t)splitmix(&s->mask)) & 0xff;
	}
	return (uint32_t)(splitmix(&s->rng) & 0xff);
}

/* Uniform enough in [0, n) for n up to 2^16; 0 when n is 0. */
static uint32_t script_below(script *s, uint32_t n)
{
	uint32_t lo = script_byte(s);
	uint32_t v = lo | script_byte(s) << 8;
	return n ? v % n : 0;
}

static void script_init(script *s, const uint8_t *data, size_t size)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * UINT64_C(0x100000001b3);
	*s = (script){data, size, 0, h};
}

/* ---- mutations ---- */

#define MAX_WORDS 1024
#define MAX_INSTS 512

/* Where each instruction starts (after the 5-word header), as far as the word counts hold. */
static size_t instruction_starts(const uint32_t *w, size_t n, size_t *at)
{
	size_t k = 0;
	for (size_t i = 5; i < n && k < MAX_INSTS;) {
		size_t wc = w[i] >> 16;
		if (wc == 0 || i + wc > n)
			break;
		at[k++] = i;
		i += wc;
	}
	return k;
}

/* The instructions that make a kernel's interface: what the checks look at. */
static bool interface_op(uint32_t op)
{
	switch (op) {
	case SpvOpCapability:
	case SpvOpMemoryModel:
	case SpvOpEntryPoint:
	case SpvOpExecutionMode:
	case SpvOpExecutionModeId:
	case SpvOpDecorate:
	case SpvOpMemberDecorate:
	case SpvOpTypeInt:
	case SpvOpTypeArray:
	case SpvOpTypeStruct:
	case SpvOpTypePointer:
	case SpvOpTypeImage:
	case SpvOpConstant:
	case SpvOpConstantComposite:
	case SpvOpVariable:
		return true;
	default:
		return false;
	}
}

/* An instruction to edit: three times in four one of the interface's, if there are any. */
static size_t pick_instruction(script *s, const uint32_t *w, const size_t *at, size_t k)
{
	size_t pick = at[script_below(s, (uint32_t)k)];
	if (script_below(s, 4) == 0)
		return pick;
	size_t interface[MAX_INSTS], m = 0;
	for (size_t i = 0; i < k; i++)
		if (interface_op(w[at[i]] & 0xffff))
			interface[m++] = at[i];
	return m ? interface[script_below(s, (uint32_t)m)] : pick;
}

/* A value worth trying in place of a word: limits of the checks, ids, enums nearby. */
static uint32_t interesting(script *s, uint32_t old, uint32_t bound)
{
	static const uint32_t values[] = {
	        0,    1,    2,    3,    4,    5,      6,       7,          8,
	        9,    12,   15,   16,   17,   22,     39,      63,         64,
	        65,   128,  129,  256,  1024, 1025,   2048,    4096,       4433,
	        4448, 5345, 5347, 5348, 5349, 0xffff, 0x10000, 0x7fffffff, 0xffffffff};
	switch (script_below(s, 6)) {
	case 0:
		return old + 1;
	case 1:
		return old - 1;
	case 2:
		return script_below(s, bound ? bound + 1 : 64);
	case 3:
		return old ^ (1u << script_below(s, 32));
	default:
		return values[script_below(s, sizeof(values) / sizeof(values[0]))];
	}
}

static size_t remove_words(uint32_t *w, size_t n, size_t at, size_t count)
{
	memmove(w + at, w + at + count, (n - at - count) * 4);
	return n - count;
}

static size_t insert_words(uint32_t *w, size_t n, size_t at, const uint32_t *src, size_t count)
{
	if (n + count > MAX_WORDS)
		return n;
	memmove(w + at + count, w + at, (n - at) * 4);
	memcpy(w + at, src, count * 4);
	return n + count;
}

/* The first operand word of an instruction that is a literal (not an id): editing it keeps
 * the module's ids consistent, so the result more often reaches the daemon's own checks. */
static size_t first_literal(uint32_t op)
{
	switch (op) {
	case SpvOpExecutionMode:
	case SpvOpExecutionModeId:
	case SpvOpDecorate:
	case SpvOpMemberDecorate:
	case SpvOpTypeInt:
	case SpvOpTypePointer:
		return 2;
	case SpvOpTypeImage:
	case SpvOpConstant:
	case SpvOpVariable:
		return 3;
	default:
		return 1;
	}
}

/* One edit of the module in w (n words); returns its new length. */
static size_t mutate(script *s, uint32_t *w, size_t n)
{
	size_t at[MAX_INSTS];
	size_t k = instruction_starts(w, n, at);
	uint32_t bound = n >= 4 ? w[3] : 0;
	uint32_t how = script_below(s, 16);
	if (k == 0 || how == 15) {
		/* Any word, the header's (version, id bound) included. */
		if (n) {
			size_t i = script_below(s, (uint32_t)n);
			w[i] = script_below(s, 2) ? interesting(s, w[i], bound)
			                          : w[i] ^ (1u << script_below(s, 32));
		}
		return n;
	}
	size_t i = pick_instruction(s, w, at, k);
	size_t wc = w[i] >> 16;
	uint32_t tmp[64];
	switch (how) {
	case 11: /* a different opcode, same operands */
		w[i] = (w[i] & 0xffff0000u) | (interesting(s, w[i] & 0xffff, 400) & 0xffff);
		return n;
	case 12: /* drop the instruction */
		return remove_words(w, n, i, wc);
	case 13: /* repeat it, here or elsewhere */
		if (wc > sizeof(tmp) / 4)
			return n;
		memcpy(tmp, w + i, wc * 4);
		return insert_words(w, n, script_below(s, 2) ? i : at[script_below(s, (uint32_t)k)],
		                    tmp, wc);
	case 14: /* a word count that lies, or the module cut short */
		if (script_below(s, 2))
			return i + script_below(s, (uint32_t)wc + 1);
		w[i] = (w[i] & 0xffff) | (interesting(s, (uint32_t)wc, 8) << 16);
		return n;
	default: { /* an operand, mostly a literal one */
		size_t from = script_below(s, 4) ? first_literal(w[i] & 0xffff) : 1;
		if (from < wc) {
			size_t j = i + from + script_below(s, (uint32_t)(wc - from));
			w[j] = interesting(s, w[j], bound);
		}
		return n;
	}
	}
}

/* ---- checks ---- */

static void check_info(const gsd_kernel_info *info, const gsd_kernel_limits *lim)
{
	CHECK(info->nbindings <= GSD_KERNEL_MAX_BINDINGS);
	for (uint32_t i = 0; i < info->nbindings; i++) {
		const gsd_kernel_binding *b = &info->bindings[i];
		CHECK(b->binding < GSD_KERNEL_MAX_BINDINGS);
		CHECK(i == 0 || b->binding > info->bindings[i - 1].binding);
		CHECK(b->kind == GSD_BINDING_STORAGE || b->kind == GSD_BINDING_UNIFORM);
		CHECK(b->kind == GSD_BINDING_STORAGE || !b->writes);
		CHECK(memchr(b->name, '\0', sizeof(b->name)) != NULL);
		for (const char *c = b->name; *c; c++)
			CHECK((unsigned char)*c >= 0x20 && *c != 0x7f);
	}
	CHECK(info->push_bytes <= lim->max_push_bytes && info->push_bytes <= GSD_KERNEL_MAX_PUSH);
	uint64_t invocations = 1;
	for (int d = 0; d < 3; d++) {
		CHECK(info->local_size[d] >= 1 && info->local_size[d] <= lim->max_local_size[d]);
		invocations *= info->local_size[d];
	}
	CHECK(invocations <= lim->max_invocations);
}

static bool same_info(const gsd_kernel_info *a, const gsd_kernel_info *b)
{
	if (a->nbindings != b->nbindings || a->push_bytes != b->push_bytes ||
	    memcmp(a->local_size, b->local_size, sizeof(a->local_size)) != 0)
		return false;
	for (uint32_t i = 0; i < a->nbindings; i++)
		if (a->bindings[i].binding != b->bindings[i].binding ||
		    a->bindings[i].kind != b->bindings[i].kind ||
		    a->bindings[i].writes != b->bindings[i].writes ||
		    strcmp(a->bindings[i].name, b->bindings[i].name) != 0)
			return false;
	return true;
}

static bool zeroed(const gsd_kernel_info *info)
{
	static const gsd_kernel_info zero;
	return same_info(info, &zero);
}

/* One call and its invariants; returns its answer. */
static int check_once(const void *code, size_t size, const char *entry,
                      const gsd_kernel_limits *lim, gsd_kernel_info *info, char *err, size_t cap)
{
	memset(info, 0xa5, sizeof(*info));
	memset(err, 'x', cap);
	int rc = gsd_spirv_check(code, size, entry, lim, info, err, cap);
	CHECK(rc == 0 || rc == -1);
	CHECK(memchr(err, '\0', cap) != NULL);
	CHECK(strchr(err, '\n') == NULL && strchr(err, '\r') == NULL);
	if (rc == 0) {
		CHECK(err[0] == '\0');
		check_info(info, lim);
	} else {
		CHECK(err[0] != '\0');
		CHECK(zeroed(info));
	}
	return rc;
}

/* A heap copy of exactly `size` bytes at `skew` bytes past an aligned address, so that a
 * sanitizer sees any read past its end; free what *block holds. */
static const uint8_t *heap_copy(const uint8_t *code, size_t size, size_t skew, uint8_t **block)
{
	*block = malloc(size + skew ? size + skew : 1);
	CHECK(*block != NULL);
	if (size)
		memcpy(*block + skew, code, size);
	return *block + skew;
}

/* The module, and when asked again one byte past an aligned address: the same answer. */
static void check_module(const uint8_t *code, size_t size, const char *entry,
                         const gsd_kernel_limits *lim, bool also_unaligned)
{
	uint8_t *block;
	gsd_kernel_info a, b;
	char ea[256], eb[256];
	int ra = check_once(heap_copy(code, size, 0, &block), size, entry, lim, &a, ea, sizeof(ea));
	free(block);
	if (!also_unaligned)
		return;
	int rb = check_once(heap_copy(code, size, 1, &block), size, entry, lim, &b, eb, sizeof(eb));
	free(block);
	CHECK(ra == rb);
	CHECK(strcmp(ea, eb) == 0);
	CHECK(same_info(&a, &b));
}

/* The device: mostly the default one, sometimes with features or sizes taken away. */
static void pick_limits(script *s, gsd_kernel_limits *lim)
{
	gsd_kernel_limits_default(lim);
	if (script_below(s, 4) != 0)
		return;
	uint32_t features = script_byte(s);
	lim->int8 = features & 1;
	lim->int16 = features & 2;
	lim->float16 = features & 4;
	lim->float64 = features & 8;
	lim->int64_atomics = features & 16;
	lim->storage8 = features & 32;
	lim->storage16 = features & 64;
	lim->subgroup = features & 128;
	/* The seeds are SPIR-V 1.5: Vulkan 1.0 and 1.1 refuse them whole, so rarely. */
	lim->vulkan_minor = script_below(s, 8) ? 2 + script_below(s, 2) : script_below(s, 2);
	lim->max_push_bytes = script_below(s, GSD_KERNEL_MAX_PUSH + 1);
	lim->max_invocations = 1 + script_below(s, 1024);
	for (int d = 0; d < 3; d++)
		lim->max_local_size[d] = 1 + script_below(s, 1024);
}

static const char *pick_entry(script *s)
{
	static const char *const others[] = {"frag", "mai", "", "main\n"};
	if (script_below(s, 16))
		return "main";
	return others[script_below(s, sizeof(others) / sizeof(others[0]))];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gsd_kernel_limits lim;
	gsd_kernel_limits_default(&lim);
	/* The bytes themselves, as a module. */
	check_module(data, size, "main", &lim, true);

	/* The bytes as a script of edits to a seed kernel. */
	script s;
	script_init(&s, data, size);
	/* The image kernel, refused as it stands, less often than the others. */
	static const int weights[] = {0, 0, 1, 1, 2};
	const seed *sd = &seeds()[weights[script_below(&s, sizeof(weights) / sizeof(weights[0]))]];
	static uint32_t words[MAX_WORDS];
	size_t n = sd->nwords;
	CHECK(n <= MAX_WORDS);
	memcpy(words, sd->words, n * 4);
	/* Mostly one edit, so that most modules stay close to a valid kernel. */
	uint32_t edits = script_below(&s, 3) ? 1 : 2 + script_below(&s, 3);
	for (; edits > 0; edits--)
		n = mutate(&s, words, n);
	pick_limits(&s, &lim);
	const char *entry = pick_entry(&s);
	/* Bytes rather than words at times: a module need not be a whole number of them. */
	size_t bytes = n * 4;
	if (script_below(&s, 16) == 0 && bytes)
		bytes -= 1 + script_below(&s, 3);
	check_module((const uint8_t *)words, bytes, entry, &lim, script_below(&s, 8) == 0);
	return 0;
}
