/*
 * Users' compute kernels: the checks of spirv.h, in four steps, each on a module the one
 * before has accepted.
 *
 *   1. the byte string: a whole number of 32-bit words, at most GSD_KERNEL_MAX_MODULE, starting
 *      with the SPIR-V magic number in host byte order (what a Vulkan driver reads);
 *   2. SPIRV-Tools' validator for the device's Vulkan environment;
 *   3. a walk of the instructions with SPIRV-Tools' parser: capabilities, addressing model,
 *      the entry point, its execution modes and the storage class of every global variable;
 *   4. reflection with SPIRV-Cross: buffers, bindings, the push-constant block and the local
 *      size of the entry point.
 *
 * Both libraries are C++. SPIRV-Tools' C API never throws; SPIRV-Cross' C API catches its
 * exceptions in most functions, but not in a few (spvc_compiler_set_entry_point throws when the
 * entry point is missing): those are called only once the walk and a safe query have shown that
 * they cannot throw. Every call makes its own SPIRV-Tools and SPIRV-Cross contexts and frees
 * them before returning, so calls share nothing and may run on any number of threads.
 */
#include "engine/spirv.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libspirv.h defines a constant at file scope, which in C has external linkage: a name of its
 * own per file keeps two files that include the header from clashing at link time. */
#define kDefaultMaxIdBound gsd_spirv_c_default_max_id_bound
#include <spirv-tools/libspirv.h>
#undef kDefaultMaxIdBound
#include <spirv_cross/spirv_cross_c.h>

/* A kernel is a few kilobytes; the bound keeps a request from tying up the validator. */
#define SPIRV_HEADER_WORDS  5u
#define SPIRV_HEADER_BYTES  (SPIRV_HEADER_WORDS * 4u)
#define MEMORY_ONLY_THROUGH "kernels reach memory only through their bindings"

/* ---- refusals ---- */

/* Replaces control characters, so that a message (or a name from a module) is one line. */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

/* Writes one line to err (if there is room) and returns -1, for `return refuse(...)`. */
static int refuse(char *err, size_t cap, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int refuse(char *err, size_t cap, const char *fmt, ...)
{
	if (!err || !cap)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	one_line(err);
	return -1;
}

/* ---- names for messages ---- */

typedef struct named {
	uint32_t value;
	const char *name;
} named;

#define NAMED(prefix, x)                                                                           \
	{                                                                                          \
		prefix##x, #x                                                                      \
	}

static const char *lookup(const named *table, size_t n, uint32_t value, char *buf, size_t cap)
{
	for (size_t i = 0; i < n; i++)
		if (table[i].value == value)
			return table[i].name;
	snprintf(buf, cap, "%u", value);
	return buf;
}

static const named execution_models[] = {
        NAMED(SpvExecutionModel, Vertex),
        NAMED(SpvExecutionModel, TessellationControl),
        NAMED(SpvExecutionModel, TessellationEvaluation),
        NAMED(SpvExecutionModel, Geometry),
        NAMED(SpvExecutionModel, Fragment),
        NAMED(SpvExecutionModel, GLCompute),
        NAMED(SpvExecutionModel, Kernel),
        NAMED(SpvExecutionModel, TaskNV),
        NAMED(SpvExecutionModel, MeshNV),
        NAMED(SpvExecutionModel, RayGenerationKHR),
        NAMED(SpvExecutionModel, IntersectionKHR),
        NAMED(SpvExecutionModel, AnyHitKHR),
        NAMED(SpvExecutionModel, ClosestHitKHR),
        NAMED(SpvExecutionModel, MissKHR),
        NAMED(SpvExecutionModel, CallableKHR),
        NAMED(SpvExecutionModel, TaskEXT),
        NAMED(SpvExecutionModel, MeshEXT),
};

static const named addressing_models[] = {
        NAMED(SpvAddressingModel, Logical),
        NAMED(SpvAddressingModel, Physical32),
        NAMED(SpvAddressingModel, Physical64),
        NAMED(SpvAddressingModel, PhysicalStorageBuffer64),
};

static const named storage_classes[] = {
        NAMED(SpvStorageClass, UniformConstant),
        NAMED(SpvStorageClass, Output),
        NAMED(SpvStorageClass, CrossWorkgroup),
        NAMED(SpvStorageClass, Generic),
        NAMED(SpvStorageClass, AtomicCounter),
        NAMED(SpvStorageClass, Image),
        NAMED(SpvStorageClass, CallableDataKHR),
        NAMED(SpvStorageClass, IncomingCallableDataKHR),
        NAMED(SpvStorageClass, RayPayloadKHR),
        NAMED(SpvStorageClass, HitAttributeKHR),
        NAMED(SpvStorageClass, IncomingRayPayloadKHR),
        NAMED(SpvStorageClass, ShaderRecordBufferKHR),
        NAMED(SpvStorageClass, PhysicalStorageBuffer),
        NAMED(SpvStorageClass, TaskPayloadWorkgroupEXT),
};

#define LOOKUP(table, value, buf)                                                                  \
	lookup(table, sizeof(table) / sizeof(table[0]), value, buf, sizeof(buf))

/* ---- the capability allow-list ---- */

/* Which device feature lets a kernel declare a capability. */
typedef enum gate {
	GATE_NEVER,
	GATE_ALWAYS,
	GATE_INT8,
	GATE_INT16,
	GATE_FLOAT16,
	GATE_FLOAT64,
	GATE_INT64_ATOMICS,
	GATE_STORAGE8,
	GATE_STORAGE16,
	GATE_SUBGROUP,
	GATE_MEMORY_MODEL,
} gate;

typedef struct capability_rule {
	uint32_t capability;
	const char *name;
	gate gate;
	const char *why; /* GATE_NEVER: the reason, NULL for the generic one */
} capability_rule;

#define CAP(x, g, why)                                                                             \
	{                                                                                          \
		SpvCapability##x, #x, g, why                                                       \
	}

static const capability_rule capability_rules[] = {
        CAP(Shader, GATE_ALWAYS, NULL),
        CAP(Matrix, GATE_ALWAYS, NULL),
        CAP(Int64, GATE_ALWAYS, NULL),
        CAP(VulkanMemoryModel, GATE_MEMORY_MODEL, NULL),
        CAP(VulkanMemoryModelDeviceScope, GATE_MEMORY_MODEL, NULL),
        CAP(Int8, GATE_INT8, NULL),
        CAP(Int16, GATE_INT16, NULL),
        CAP(Float16, GATE_FLOAT16, NULL),
        CAP(Float64, GATE_FLOAT64, NULL),
        CAP(Int64Atomics, GATE_INT64_ATOMICS, NULL),
        CAP(StorageBuffer8BitAccess, GATE_STORAGE8, NULL),
        CAP(UniformAndStorageBuffer8BitAccess, GATE_STORAGE8, NULL),
        CAP(StoragePushConstant8, GATE_STORAGE8, NULL),
        CAP(StorageBuffer16BitAccess, GATE_STORAGE16, NULL),
        CAP(UniformAndStorageBuffer16BitAccess, GATE_STORAGE16, NULL),
        CAP(StoragePushConstant16, GATE_STORAGE16, NULL),
        CAP(GroupNonUniform, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformVote, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformArithmetic, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformBallot, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformShuffle, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformShuffleRelative, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformClustered, GATE_SUBGROUP, NULL),
        CAP(GroupNonUniformQuad, GATE_SUBGROUP, NULL),
        /* Refused, named for a clearer message. */
        CAP(Addresses, GATE_NEVER, MEMORY_ONLY_THROUGH),
        CAP(PhysicalStorageBufferAddresses, GATE_NEVER, MEMORY_ONLY_THROUGH),
        CAP(VariablePointers, GATE_NEVER, NULL),
        CAP(VariablePointersStorageBuffer, GATE_NEVER, NULL),
        CAP(Kernel, GATE_NEVER, "kernels are Vulkan GLCompute shaders, not OpenCL kernels"),
        CAP(Linkage, GATE_NEVER, "a kernel is a whole module, not one to link"),
        CAP(Geometry, GATE_NEVER, NULL),
        CAP(Tessellation, GATE_NEVER, NULL),
        CAP(Float16Buffer, GATE_NEVER, NULL),
        CAP(StorageInputOutput16, GATE_NEVER, NULL),
        CAP(ImageQuery, GATE_NEVER, NULL),
        CAP(RuntimeDescriptorArray, GATE_NEVER, NULL),
        CAP(ShaderNonUniform, GATE_NEVER, NULL),
        CAP(GroupNonUniformPartitionedNV, GATE_NEVER, NULL),
        CAP(GroupNonUniformRotateKHR, GATE_NEVER, NULL),
        CAP(DotProduct, GATE_NEVER, NULL),
        CAP(AtomicFloat32AddEXT, GATE_NEVER, NULL),
        CAP(Int64ImageEXT, GATE_NEVER, NULL),
};

static bool gate_open(const gsd_kernel_limits *lim, gate g)
{
	switch (g) {
	case GATE_ALWAYS:
		return true;
	case GATE_INT8:
		return lim->int8;
	case GATE_INT16:
		return lim->int16;
	case GATE_FLOAT16:
		return lim->float16;
	case GATE_FLOAT64:
		return lim->float64;
	case GATE_INT64_ATOMICS:
		return lim->int64_atomics;
	case GATE_STORAGE8:
		return lim->storage8;
	case GATE_STORAGE16:
		return lim->storage16;
	case GATE_SUBGROUP:
		return lim->subgroup;
	case GATE_MEMORY_MODEL:
		return lim->memory_model;
	case GATE_NEVER:
		break;
	}
	return false;
}

/* The device feature behind a gate, for the message when the device lacks it. */
static const char *gate_feature(gate g)
{
	switch (g) {
	case GATE_INT8:
		return "shaderInt8";
	case GATE_INT16:
		return "shaderInt16";
	case GATE_FLOAT16:
		return "shaderFloat16";
	case GATE_FLOAT64:
		return "shaderFloat64";
	case GATE_INT64_ATOMICS:
		return "shaderBufferInt64Atomics";
	case GATE_STORAGE8:
		return "8-bit storage";
	case GATE_STORAGE16:
		return "16-bit storage";
	case GATE_SUBGROUP:
		return "subgroup operations in compute shaders";
	case GATE_MEMORY_MODEL:
		return "vulkanMemoryModel";
	default:
		return "it";
	}
}

static int check_capability(uint32_t cap, const gsd_kernel_limits *lim, char *err, size_t errcap)
{
	const capability_rule *r = NULL;
	for (size_t i = 0; i < sizeof(capability_rules) / sizeof(capability_rules[0]); i++)
		if (capability_rules[i].capability == cap)
			r = &capability_rules[i];
	if (!r)
		return refuse(
		        err, errcap,
		        "capability %u is not allowed: it is not on the allow-list of compute "
		        "kernels",
		        cap);
	if (gate_open(lim, r->gate))
		return 0;
	if (r->gate != GATE_NEVER)
		return refuse(err, errcap,
		              "capability %s is not allowed: the device does not offer %s", r->name,
		              gate_feature(r->gate));
	return refuse(err, errcap, "capability %s is not allowed: %s", r->name,
	              r->why ? r->why : "it is not on the allow-list of compute kernels");
}

/* ---- step 1: the byte string ---- */

static int check_bytes(const void *code, size_t size, char *err, size_t cap)
{
	if (size == 0)
		return refuse(err, cap, "empty module: a kernel is a SPIR-V module");
	if (!code)
		return refuse(err, cap, "no module: %zu bytes at a null address", size);
	if (size % 4)
		return refuse(err, cap,
		              "module of %zu bytes is not a whole number of 32-bit SPIR-V words",
		              size);
	if (size > GSD_KERNEL_MAX_MODULE)
		return refuse(err, cap, "module of %zu bytes exceeds 4 MiB", size);
	if (size < SPIRV_HEADER_BYTES)
		return refuse(err, cap,
		              "module of %zu bytes is shorter than the %u-byte SPIR-V header", size,
		              SPIRV_HEADER_BYTES);
	uint32_t magic;
	memcpy(&magic, code, sizeof(magic));
	if (magic != SpvMagicNumber)
		return refuse(err, cap,
		              "not a SPIR-V module: the first word is 0x%08x, not the magic number "
		              "0x%08x in host byte order",
		              magic, (unsigned)SpvMagicNumber);
	return 0;
}

/* The module as words: `code` itself when it is aligned, else a copy in *copy (freed by the
 * caller). The libraries read the module as uint32_t, which needs the alignment. */
static const uint32_t *module_words(const void *code, size_t size, uint32_t **copy)
{
	*copy = NULL;
	if ((uintptr_t)code % _Alignof(uint32_t) == 0)
		return code;
	*copy = malloc(size);
	if (*copy)
		memcpy(*copy, code, size);
	return *copy;
}

/* ---- step 2: the validator ---- */

/* Copies the first line of a library's message (they add the offending instruction below). */
static void first_line(const char *msg, char *out, size_t cap)
{
	size_t n = msg ? strcspn(msg, "\r\n") : 0;
	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(out, msg, n);
	out[n] = '\0';
}

static int validate(spv_const_context ctx, const uint32_t *words, size_t nwords, char *err,
                    size_t cap)
{
	spv_validator_options opts = spvValidatorOptionsCreate();
	if (!opts)
		return refuse(err, cap, "out of memory validating the module");
	/* LocalSizeId is refused by the walk, with a clearer message than the validator's. */
	spvValidatorOptionsSetAllowLocalSizeId(opts, true);
	spv_const_binary_t bin = {words, nwords};
	spv_diagnostic diag = NULL;
	spv_result_t r = spvValidateWithOptions(ctx, opts, &bin, &diag);
	spvValidatorOptionsDestroy(opts);
	int rc = 0;
	if (r != SPV_SUCCESS) {
		char line[256];
		first_line(diag ? diag->error : NULL, line, sizeof(line));
		rc = refuse(err, cap, "SPIR-V validation: %s",
		            line[0] ? line : "the validator refused the module");
	}
	spvDiagnosticDestroy(diag);
	return rc;
}

/* ---- step 3: the instruction walk ---- */

typedef struct walk {
	const char *entry;
	const gsd_kernel_limits *lim;
	uint32_t entry_fn;       /* the function of the GLCompute entry point `entry`; 0: none */
	int64_t other_model;     /* the model of an entry point `entry` that is not GLCompute; -1 */
	uint32_t workgroup_size; /* the object decorated BuiltIn WorkgroupSize; 0: none */
	bool refused;
	char *err;
	size_t cap;
} walk;

static uint32_t operand(const spv_parsed_instruction_t *inst, uint16_t i)
{
	return i < inst->num_operands ? inst->words[inst->operands[i].offset] : 0;
}

/* True if operand i is the literal string s (the validator has checked it ends in a NUL). */
static bool operand_is(const spv_parsed_instruction_t *inst, uint16_t i, const char *s)
{
	if (i >= inst->num_operands)
		return false;
	const spv_parsed_operand_t *o = &inst->operands[i];
	const char *lit = (const char *)(inst->words + o->offset);
	size_t len = strnlen(lit, (size_t)o->num_words * 4);
	return len < (size_t)o->num_words * 4 && strcmp(lit, s) == 0;
}

static spv_result_t walk_stop(walk *w, int rc)
{
	if (rc == 0)
		return SPV_SUCCESS;
	w->refused = true;
	return SPV_REQUESTED_TERMINATION;
}

static int walk_memory_model(walk *w, const spv_parsed_instruction_t *inst)
{
	uint32_t model = operand(inst, 0);
	if (model == SpvAddressingModelLogical)
		return 0;
	char buf[16];
	return refuse(w->err, w->cap, "addressing model %s is not allowed: %s",
	              LOOKUP(addressing_models, model, buf), MEMORY_ONLY_THROUGH);
}

static void walk_entry_point(walk *w, const spv_parsed_instruction_t *inst)
{
	if (!operand_is(inst, 2, w->entry))
		return;
	uint32_t model = operand(inst, 0);
	if (model == SpvExecutionModelGLCompute)
		w->entry_fn = operand(inst, 1);
	else
		w->other_model = model;
}

static int walk_execution_mode(walk *w, const spv_parsed_instruction_t *inst)
{
	if (operand(inst, 0) != w->entry_fn || operand(inst, 1) != SpvExecutionModeLocalSizeId)
		return 0;
	return refuse(
	        w->err, w->cap,
	        "the local size is given by LocalSizeId: only a literal LocalSize is allowed, "
	        "so that the daemon knows it before the driver does");
}

static int walk_decorate(walk *w, const spv_parsed_instruction_t *inst)
{
	if (operand(inst, 1) != SpvDecorationBuiltIn || operand(inst, 2) != SpvBuiltInWorkgroupSize)
		return 0;
	uint32_t target = operand(inst, 0);
	if (w->workgroup_size && w->workgroup_size != target)
		return refuse(
		        w->err, w->cap,
		        "more than one object is decorated WorkgroupSize: the local size must be "
		        "one literal");
	w->workgroup_size = target;
	return 0;
}

/*
 * The WorkgroupSize built-in overrides LocalSize. A constant composite is a literal size
 * (reflection reads it, and refuses specialisation constants among its parts); anything else
 * (a specialisation-constant operation, a decoration group) would hide the size.
 */
static int walk_workgroup_size(walk *w, const spv_parsed_instruction_t *inst)
{
	if (inst->opcode == SpvOpConstantComposite || inst->opcode == SpvOpSpecConstantComposite)
		return 0;
	return refuse(w->err, w->cap,
	              "the WorkgroupSize built-in is not a constant composite: the local size must "
	              "be a literal");
}

/* Global variables: a kernel's memory is its buffers, its push constants, its workgroup and
 * private memory and the built-in inputs. */
static int walk_variable(walk *w, const spv_parsed_instruction_t *inst)
{
	uint32_t sc = operand(inst, 2);
	switch (sc) {
	case SpvStorageClassFunction:
	case SpvStorageClassPrivate:
	case SpvStorageClassWorkgroup:
	case SpvStorageClassInput:
	case SpvStorageClassUniform:
	case SpvStorageClassStorageBuffer:
	case SpvStorageClassPushConstant:
		return 0;
	default:
		break;
	}
	char buf[16];
	return refuse(
	        w->err, w->cap,
	        "variable %%%u is in storage class %s: a kernel's resources are storage "
	        "buffers, uniform buffers and one push-constant block (no images, samplers or "
	        "acceleration structures)",
	        inst->result_id, LOOKUP(storage_classes, sc, buf));
}

static spv_result_t walk_instruction(void *user, const spv_parsed_instruction_t *inst)
{
	walk *w = user;
	if (inst->result_id && inst->result_id == w->workgroup_size)
		return walk_stop(w, walk_workgroup_size(w, inst));
	switch (inst->opcode) {
	case SpvOpCapability:
		return walk_stop(w, check_capability(operand(inst, 0), w->lim, w->err, w->cap));
	case SpvOpMemoryModel:
		return walk_stop(w, walk_memory_model(w, inst));
	case SpvOpEntryPoint:
		walk_entry_point(w, inst);
		return SPV_SUCCESS;
	case SpvOpExecutionMode:
	case SpvOpExecutionModeId:
		return walk_stop(w, walk_execution_mode(w, inst));
	case SpvOpDecorate:
		return walk_stop(w, walk_decorate(w, inst));
	case SpvOpVariable:
		return walk_stop(w, walk_variable(w, inst));
	default:
		return SPV_SUCCESS;
	}
}

static int walk_module(spv_const_context ctx, const uint32_t *words, size_t nwords,
                       const char *entry, const gsd_kernel_limits *lim, char *err, size_t cap)
{
	walk w = {.entry = entry, .lim = lim, .other_model = -1, .err = err, .cap = cap};
	spv_diagnostic diag = NULL;
	spv_result_t r = spvBinaryParse(ctx, &w, words, nwords, NULL, walk_instruction, &diag);
	int rc = 0;
	if (w.refused) {
		rc = -1;
	} else if (r != SPV_SUCCESS) {
		char line[256];
		first_line(diag ? diag->error : NULL, line, sizeof(line));
		rc = refuse(err, cap, "SPIR-V parse: %s", line[0] ? line : "the parser failed");
	} else if (!w.entry_fn && w.other_model >= 0) {
		char buf[16];
		rc = refuse(err, cap,
		            "entry point \"%s\" is a %s entry point: kernels are GLCompute", entry,
		            LOOKUP(execution_models, (uint32_t)w.other_model, buf));
	} else if (!w.entry_fn) {
		rc = refuse(err, cap, "the module has no entry point named \"%s\"", entry);
	}
	spvDiagnosticDestroy(diag);
	return rc;
}

/* ---- step 4: reflection ---- */

typedef struct reflect {
	spvc_context ctx;
	spvc_compiler comp;
	spvc_resources res;
	const gsd_kernel_limits *lim;
	gsd_kernel_info *info;
	/* Buffers by binding number; a NULL name means the binding is free. */
	const char *seen[GSD_KERNEL_MAX_BINDINGS];
	char *err;
	size_t cap;
} reflect;

/* SPIRV-Cross' last message, for a call that failed. */
static int refuse_spvc(reflect *rf, const char *what)
{
	char line[256];
	first_line(spvc_context_get_last_error_string(rf->ctx), line, sizeof(line));
	return refuse(rf->err, rf->cap, "SPIR-V reflection: %s: %s", what,
	              line[0] ? line : "failed");
}

/* A name for messages and for the binding table: the variable's, else its block type's, else
 * "" (SPIRV-Cross' own resource names are made up, "_12", when the module has none). */
static const char *resource_name(reflect *rf, const spvc_reflected_resource *r)
{
	const char *name = spvc_compiler_get_name(rf->comp, r->id);
	if (!name || !name[0])
		name = spvc_compiler_get_name(rf->comp, r->base_type_id);
	return name ? name : "";
}

static bool read_only(reflect *rf, const spvc_reflected_resource *r)
{
	const SpvDecoration *decs = NULL;
	size_t n = 0;
	if (spvc_compiler_get_buffer_block_decorations(rf->comp, r->id, &decs, &n) != SPVC_SUCCESS)
		return false; /* unknown: assume the kernel writes it */
	for (size_t i = 0; i < n; i++)
		if (decs[i] == SpvDecorationNonWritable)
			return true;
	return false;
}

static int add_buffer(reflect *rf, const spvc_reflected_resource *r, gsd_binding_kind kind)
{
	const char *name = resource_name(rf, r);
	if (!spvc_compiler_has_decoration(rf->comp, r->id, SpvDecorationDescriptorSet) ||
	    !spvc_compiler_has_decoration(rf->comp, r->id, SpvDecorationBinding))
		return refuse(rf->err, rf->cap,
		              "buffer \"%s\" has no DescriptorSet and Binding decorations", name);
	uint32_t set = spvc_compiler_get_decoration(rf->comp, r->id, SpvDecorationDescriptorSet);
	uint32_t binding = spvc_compiler_get_decoration(rf->comp, r->id, SpvDecorationBinding);
	if (set != 0)
		return refuse(rf->err, rf->cap,
		              "binding %u (\"%s\") is in descriptor set %u: only set 0", binding,
		              name, set);
	if (binding >= GSD_KERNEL_MAX_BINDINGS)
		return refuse(rf->err, rf->cap,
		              "binding %u (\"%s\") is out of range: kernels use bindings 0 to %u",
		              binding, name, GSD_KERNEL_MAX_BINDINGS - 1);
	if (rf->seen[binding])
		return refuse(rf->err, rf->cap,
		              "binding %u is declared twice (\"%s\" and \"%s\"): one buffer per "
		              "binding",
		              binding, rf->seen[binding], name);
	spvc_type type = spvc_compiler_get_type_handle(rf->comp, r->type_id);
	if (!type)
		return refuse_spvc(rf, "buffer type");
	if (spvc_type_get_num_array_dimensions(type) != 0)
		return refuse(rf->err, rf->cap,
		              "binding %u (\"%s\") is an array of buffers: one buffer per binding",
		              binding, name);
	rf->seen[binding] = name;
	gsd_kernel_binding *b = &rf->info->bindings[binding]; /* compacted in binding order later */
	b->binding = binding;
	b->kind = kind;
	b->writes = kind == GSD_BINDING_STORAGE && !read_only(rf, r);
	snprintf(b->name, sizeof(b->name), "%s", name);
	one_line(b->name);
	return 0;
}

static int reflect_list(reflect *rf, spvc_resource_type type, const spvc_reflected_resource **list,
                        size_t *n)
{
	*list = NULL;
	*n = 0;
	if (spvc_resources_get_resource_list_for_type(rf->res, type, list, n) != SPVC_SUCCESS)
		return refuse_spvc(rf, "resource list");
	return 0;
}

static int reflect_buffers(reflect *rf, spvc_resource_type type, gsd_binding_kind kind)
{
	const spvc_reflected_resource *list;
	size_t n;
	if (reflect_list(rf, type, &list, &n) != 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (add_buffer(rf, &list[i], kind) != 0)
			return -1;
	return 0;
}

/* The block's size: its declared size, or the end of its furthest member if that lies
 * beyond (members need not be declared in offset order). */
static int block_size(reflect *rf, spvc_type type, size_t *size)
{
	if (spvc_compiler_get_declared_struct_size(rf->comp, type, size) != SPVC_SUCCESS)
		return refuse_spvc(rf, "push-constant block size");
	unsigned n = spvc_type_get_num_member_types(type);
	for (unsigned i = 0; i < n; i++) {
		unsigned offset = 0;
		size_t member = 0;
		if (spvc_compiler_type_struct_member_offset(rf->comp, type, i, &offset) !=
		            SPVC_SUCCESS ||
		    spvc_compiler_get_declared_struct_member_size(rf->comp, type, i, &member) !=
		            SPVC_SUCCESS)
			return refuse_spvc(rf, "push-constant member");
		if (offset + member > *size)
			*size = offset + member;
	}
	return 0;
}

static int reflect_push(reflect *rf)
{
	const spvc_reflected_resource *list;
	size_t n;
	if (reflect_list(rf, SPVC_RESOURCE_TYPE_PUSH_CONSTANT, &list, &n) != 0)
		return -1;
	if (n == 0)
		return 0;
	if (n > 1)
		return refuse(rf->err, rf->cap,
		              "%zu push-constant blocks: a kernel has at most one", n);
	spvc_type type = spvc_compiler_get_type_handle(rf->comp, list[0].base_type_id);
	size_t size = 0;
	if (!type)
		return refuse_spvc(rf, "push-constant type");
	if (block_size(rf, type, &size) != 0)
		return -1;
	if (size > rf->lim->max_push_bytes)
		return refuse(rf->err, rf->cap,
		              "push-constant block of %zu bytes exceeds the device's %u", size,
		              rf->lim->max_push_bytes);
	rf->info->push_bytes = (uint32_t)size;
	return 0;
}

/* Every resource that is neither a buffer nor the push-constant block is refused. */
static int refuse_other_resources(reflect *rf)
{
	static const struct {
		spvc_resource_type type;
		const char *what;
	} others[] = {
	        {SPVC_RESOURCE_TYPE_STAGE_INPUT, "a stage input"},
	        {SPVC_RESOURCE_TYPE_STAGE_OUTPUT, "a stage output"},
	        {SPVC_RESOURCE_TYPE_SUBPASS_INPUT, "a subpass input"},
	        {SPVC_RESOURCE_TYPE_STORAGE_IMAGE, "a storage image"},
	        {SPVC_RESOURCE_TYPE_SAMPLED_IMAGE, "a sampled image"},
	        {SPVC_RESOURCE_TYPE_ATOMIC_COUNTER, "an atomic counter"},
	        {SPVC_RESOURCE_TYPE_SEPARATE_IMAGE, "an image"},
	        {SPVC_RESOURCE_TYPE_SEPARATE_SAMPLERS, "a sampler"},
	        {SPVC_RESOURCE_TYPE_ACCELERATION_STRUCTURE, "an acceleration structure"},
	        {SPVC_RESOURCE_TYPE_SHADER_RECORD_BUFFER, "a shader record buffer"},
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		const spvc_reflected_resource *list;
		size_t n;
		if (reflect_list(rf, others[i].type, &list, &n) != 0)
			return -1;
		if (n)
			return refuse(
			        rf->err, rf->cap,
			        "variable %%%u (\"%s\") is %s: a kernel's resources are storage "
			        "buffers, uniform buffers and one push-constant block",
			        list[0].id, resource_name(rf, &list[0]), others[i].what);
	}
	return 0;
}

static int reflect_local_size(reflect *rf)
{
	spvc_specialization_constant x, y, z;
	spvc_compiler_get_work_group_size_specialization_constants(rf->comp, &x, &y, &z);
	if (x.id || y.id || z.id)
		return refuse(rf->err, rf->cap,
		              "the local size is a specialisation constant: only a literal local "
		              "size is allowed");
	const gsd_kernel_limits *lim = rf->lim;
	uint32_t *s = rf->info->local_size;
	for (unsigned i = 0; i < 3; i++)
		s[i] = spvc_compiler_get_execution_mode_argument_by_index(
		        rf->comp, SpvExecutionModeLocalSize, i);
	if (!s[0] || !s[1] || !s[2])
		return refuse(rf->err, rf->cap, "local size %ux%ux%u has a zero dimension", s[0],
		              s[1], s[2]);
	static const char axis[3] = {'x', 'y', 'z'};
	for (unsigned i = 0; i < 3; i++)
		if (s[i] > lim->max_local_size[i])
			return refuse(
			        rf->err, rf->cap,
			        "local size %ux%ux%u exceeds the device's maximum of %u in %c",
			        s[0], s[1], s[2], lim->max_local_size[i], axis[i]);
	uint64_t invocations = (uint64_t)s[0] * s[1] * s[2];
	if (invocations > lim->max_invocations)
		return refuse(rf->err, rf->cap,
		              "local size %ux%ux%u is %llu invocations, more than the device's %u",
		              s[0], s[1], s[2], (unsigned long long)invocations,
		              lim->max_invocations);
	return 0;
}

/* spvc_compiler_set_entry_point throws (past the C API) when the entry point is missing. The
 * walk found it, but SPIRV-Cross keeps one entry point per function: ask it first. */
static int select_entry_point(reflect *rf, const char *entry)
{
	const spvc_entry_point *eps = NULL;
	size_t n = 0;
	if (spvc_compiler_get_entry_points(rf->comp, &eps, &n) != SPVC_SUCCESS)
		return refuse_spvc(rf, "entry points");
	for (size_t i = 0; i < n; i++)
		if (eps[i].execution_model == SpvExecutionModelGLCompute && eps[i].name &&
		    strcmp(eps[i].name, entry) == 0)
			return spvc_compiler_set_entry_point(
			               rf->comp, entry, SpvExecutionModelGLCompute) == SPVC_SUCCESS
			               ? 0
			               : refuse_spvc(rf, "entry point");
	return refuse(rf->err, rf->cap,
	              "entry point \"%s\" shares its function with another entry point: give each "
	              "entry point its own function",
	              entry);
}

/* Moves the bindings, filled at their binding number, to the front in binding order. */
static void compact_bindings(reflect *rf)
{
	gsd_kernel_info *info = rf->info;
	info->nbindings = 0;
	for (uint32_t b = 0; b < GSD_KERNEL_MAX_BINDINGS; b++)
		if (rf->seen[b])
			info->bindings[info->nbindings++] = info->bindings[b];
	for (uint32_t i = info->nbindings; i < GSD_KERNEL_MAX_BINDINGS; i++)
		memset(&info->bindings[i], 0, sizeof(info->bindings[i]));
}

static int reflect_steps(reflect *rf, const uint32_t *words, size_t nwords, const char *entry)
{
	spvc_parsed_ir ir = NULL;
	if (spvc_context_parse_spirv(rf->ctx, words, nwords, &ir) != SPVC_SUCCESS)
		return refuse_spvc(rf, "parse");
	if (spvc_context_create_compiler(rf->ctx, SPVC_BACKEND_NONE, ir,
	                                 SPVC_CAPTURE_MODE_TAKE_OWNERSHIP,
	                                 &rf->comp) != SPVC_SUCCESS)
		return refuse_spvc(rf, "compiler");
	if (select_entry_point(rf, entry) != 0)
		return -1;
	/* All resources of the entry point, not only those it uses: an unused image is refused
	 * too. */
	if (spvc_compiler_create_shader_resources(rf->comp, &rf->res) != SPVC_SUCCESS)
		return refuse_spvc(rf, "resources");
	if (refuse_other_resources(rf) != 0 ||
	    reflect_buffers(rf, SPVC_RESOURCE_TYPE_STORAGE_BUFFER, GSD_BINDING_STORAGE) != 0 ||
	    reflect_buffers(rf, SPVC_RESOURCE_TYPE_UNIFORM_BUFFER, GSD_BINDING_UNIFORM) != 0 ||
	    reflect_push(rf) != 0 || reflect_local_size(rf) != 0)
		return -1;
	compact_bindings(rf);
	return 0;
}

static int reflect_module(const uint32_t *words, size_t nwords, const char *entry,
                          const gsd_kernel_limits *lim, gsd_kernel_info *info, char *err,
                          size_t cap)
{
	reflect rf = {.lim = lim, .info = info, .err = err, .cap = cap};
	if (spvc_context_create(&rf.ctx) != SPVC_SUCCESS)
		return refuse(err, cap, "out of memory reflecting the module");
	int rc = reflect_steps(&rf, words, nwords, entry);
	/* The names in rf.seen belong to the context: the bindings hold copies. */
	spvc_context_destroy(rf.ctx);
	return rc;
}

/* ---- the interface ---- */

static int check_arguments(const char *entry, const gsd_kernel_limits *lim, char *err, size_t cap)
{
	if (!lim)
		return refuse(err, cap, "no device limits to check the kernel against");
	if (lim->vulkan_minor > 3)
		return refuse(err, cap,
		              "Vulkan 1.%u is not a SPIR-V environment the validator knows",
		              lim->vulkan_minor);
	size_t len = entry ? strnlen(entry, GSD_KERNEL_ENTRY_MAX) : 0;
	if (len == 0)
		return refuse(err, cap, "no entry point name: name the kernel's entry point");
	if (len >= GSD_KERNEL_ENTRY_MAX)
		return refuse(err, cap, "entry point name \"%.*s...\" is longer than %u bytes",
		              (int)(GSD_KERNEL_ENTRY_MAX - 1), entry, GSD_KERNEL_ENTRY_MAX - 1);
	return 0;
}

static spv_target_env vulkan_env(uint32_t minor)
{
	static const spv_target_env envs[] = {SPV_ENV_VULKAN_1_0, SPV_ENV_VULKAN_1_1,
	                                      SPV_ENV_VULKAN_1_2, SPV_ENV_VULKAN_1_3};
	return envs[minor];
}

int gsd_spirv_check(const void *code, size_t size, const char *entry, const gsd_kernel_limits *lim,
                    gsd_kernel_info *out, char *err, size_t cap)
{
	if (err && cap)
		err[0] = '\0';
	if (!out)
		return refuse(err, cap, "nowhere to put the kernel's interface");
	memset(out, 0, sizeof(*out));
	if (check_arguments(entry, lim, err, cap) != 0 || check_bytes(code, size, err, cap) != 0)
		return -1;

	uint32_t *copy;
	const uint32_t *words = module_words(code, size, &copy);
	if (!words)
		return refuse(err, cap, "out of memory copying a module of %zu bytes", size);
	size_t nwords = size / 4;
	int rc = -1;
	spv_context ctx = spvContextCreate(vulkan_env(lim->vulkan_minor));
	if (!ctx)
		refuse(err, cap, "out of memory validating the module");
	else if (validate(ctx, words, nwords, err, cap) == 0 &&
	         walk_module(ctx, words, nwords, entry, lim, err, cap) == 0)
		rc = reflect_module(words, nwords, entry, lim, out, err, cap);
	if (ctx)
		spvContextDestroy(ctx);
	free(copy);
	if (rc != 0)
		memset(out, 0, sizeof(*out));
	return rc;
}

void gsd_kernel_limits_default(gsd_kernel_limits *lim)
{
	*lim = (gsd_kernel_limits){
	        .vulkan_minor = 2,
	        .max_local_size = {1024, 1024, 64},
	        .max_invocations = 1024,
	        .max_push_bytes = GSD_KERNEL_MAX_PUSH,
	        .max_shared_bytes = 32768,
	        .int8 = true,
	        .int16 = true,
	        .float16 = true,
	        .float64 = true,
	        .int64_atomics = true,
	        .storage8 = true,
	        .storage16 = true,
	        .subgroup = true,
	        .memory_model = true,
	};
}
