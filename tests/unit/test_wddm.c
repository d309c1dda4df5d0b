/*
 * WDDM bit layouts against docs/wddm.md: every value below is written out by hand from the
 * document, never computed with the code under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "wddm.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct expected_flag {
	uint32_t bit;
	const char *name;
} expected_flag;

/* DXGK_SUBMITCOMMANDFLAGS (docs/wddm.md). */
static const expected_flag submit_flags[] = {
        {0x001, "Paging"},        {0x002, "Present"},      {0x004, "RedirectedPresent"},
        {0x008, "NullRendering"}, {0x010, "Flip"},         {0x020, "FlipWithNoWait"},
        {0x040, "ContextSwitch"}, {0x080, "Resubmission"}, {0x100, "VirtualMachineData"},
};
/* DXGK_PATCHFLAGS (seed 001). */
static const expected_flag patch_flags[] = {
        {0x1, "Paging"},
        {0x2, "Present"},
        {0x4, "RedirectedPresent"},
        {0x8, "NullRendering"},
};
/* DXGK_TRANSFERFLAGS (seed 002). */
static const expected_flag transfer_flags[] = {
        {0x01, "Swizzle"},       {0x02, "Unswizzle"},   {0x04, "AllocationIsIdle"},
        {0x08, "TransferStart"}, {0x10, "TransferEnd"},
};

static void check_table(const gs_flag_name *table, const expected_flag *want, size_t n,
                        uint32_t valid_mask)
{
	uint32_t all = 0;
	size_t i;

	for (i = 0; table[i].name; i++) {
		assert_true(i < n);
		assert_int_equal(table[i].bit, want[i].bit);
		assert_string_equal(table[i].name, want[i].name);
		all |= want[i].bit;
	}
	assert_int_equal(i, n);
	assert_int_equal(table[i].bit, 0); /* the {0, NULL} terminator */
	assert_int_equal(all, valid_mask);

	for (i = 0; i < n; i++) {
		/* bit -> name */
		char buf[64];
		assert_int_equal(gs_flags_format(table, want[i].bit, buf, sizeof(buf)),
		                 strlen(want[i].name));
		assert_string_equal(buf, want[i].name);
		/* name -> bit */
		uint32_t v = 0xdeadbeef;
		assert_int_equal(gs_flags_parse(table, want[i].name, &v, NULL), 0);
		assert_int_equal(v, want[i].bit);
	}
}

static void test_flag_tables(void **state)
{
	(void)state;
	check_table(gs_submit_flag_names, submit_flags, COUNT(submit_flags), GS_SUBMIT_VALID_MASK);
	check_table(gs_patch_flag_names, patch_flags, COUNT(patch_flags), GS_PATCH_VALID_MASK);
	check_table(gs_transfer_flag_names, transfer_flags, COUNT(transfer_flags),
	            GS_TRANSFER_VALID_MASK);
	/* The macros themselves, against the document. */
	assert_int_equal(GS_SUBMIT_NULL_RENDERING, 0x008);
	assert_int_equal(GS_SUBMIT_RESUBMISSION, 0x080);
	assert_int_equal(GS_SUBMIT_VIRTUAL_MACHINE_DATA, 0x100);
	assert_int_equal(GS_TRANSFER_END, 0x10);
}

static void test_flags_format(void **state)
{
	(void)state;
	static const struct {
		uint32_t value;
		const char *text;
	} cases[] = {
	        {0, "none"},
	        {0x00a, "Present|NullRendering"},
	        {0x1ff, "Paging|Present|RedirectedPresent|NullRendering|Flip|FlipWithNoWait|"
	                "ContextSwitch|Resubmission|VirtualMachineData"},
	        {0x200, "0x200"},
	        {0xc0000201u, "Paging|0xc0000200"},
	};
	char buf[256];
	for (size_t i = 0; i < COUNT(cases); i++) {
		size_t n = gs_flags_format(gs_submit_flag_names, cases[i].value, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].text);
		assert_int_equal(n, strlen(cases[i].text));
		/* and back */
		uint32_t v;
		assert_int_equal(gs_flags_parse(gs_submit_flag_names, buf, &v, NULL), 0);
		assert_int_equal(v, cases[i].value);
	}
	/* Truncation: snprintf's contract, always terminated. */
	char small[8];
	assert_int_equal(gs_flags_format(gs_submit_flag_names, 0x00a, small, sizeof(small)),
	                 strlen("Present|NullRendering"));
	assert_string_equal(small, "Present");
	assert_int_equal(gs_flags_format(gs_submit_flag_names, 0x00a, NULL, 0),
	                 strlen("Present|NullRendering"));
}

static void test_flags_parse(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint32_t value;
	} good[] = {
	        {"0", 0},
	        {"264", 264},
	        {"010", 10}, /* decimal, not octal */
	        {"0x108", 0x108},
	        {"0X1FF", 0x1ff},
	        {"4294967295", 0xffffffffu},
	        {"none", 0},
	        {"NONE", 0},
	        {"present", 0x002},
	        {"NULLRENDERING", 0x008},
	        {"nullRendering|PRESENT", 0x00a},
	        {"Present,Flip", 0x012},
	        {" Present , flip | resubmission ", 0x092},
	        {"Paging|0x200", 0x201},
	        {"Present|Present", 0x002},
	};
	for (size_t i = 0; i < COUNT(good); i++) {
		uint32_t v = 0xdeadbeef;
		const char *bad = NULL;
		assert_int_equal(gs_flags_parse(gs_submit_flag_names, good[i].text, &v, &bad), 0);
		assert_int_equal(v, good[i].value);
		assert_null(bad);
	}

	static const struct {
		const char *text;
		size_t bad_at; /* offset of the token *bad must point at */
	} bad_cases[] = {
	        {"Bogus", 0},
	        {"Present|Bogus", 8},
	        {"Present,Presentx", 8},
	        {"Swizzle", 0}, /* a transfer flag is not a submit flag */
	        {"", 0},
	        {"Present||Flip", 8},
	        {"Present|", 8},
	        {"0x", 0},
	        {"0x1ffffffff", 0},
	        {"4294967296", 0},
	        {"12abc", 0},
	        {"-1", 0},
	};
	for (size_t i = 0; i < COUNT(bad_cases); i++) {
		uint32_t v = 0x1234;
		const char *bad = NULL;
		assert_int_equal(gs_flags_parse(gs_submit_flag_names, bad_cases[i].text, &v, &bad),
		                 -1);
		assert_ptr_equal(bad, bad_cases[i].text + bad_cases[i].bad_at);
		assert_int_equal(v, 0x1234); /* untouched on failure */
	}
	/* Each table knows only its own names. */
	uint32_t v;
	assert_int_equal(gs_flags_parse(gs_transfer_flag_names, "swizzle|TransferEnd", &v, NULL),
	                 0);
	assert_int_equal(v, 0x11);
	assert_int_equal(gs_flags_parse(gs_patch_flag_names, "Flip", &v, NULL), -1);
}

/*
 * D3DDDI_SEGMENTPREFERENCE: slot k holds SegmentId at bits 6k..6k+4 and Direction at bit
 * 6k+5. Each row sets one field of one slot; `value` is written by hand from the table in
 * docs/wddm.md.
 */
static const struct {
	unsigned slot;
	uint8_t segment, direction;
	uint32_t value;
} segpref_one_hot[] = {
        {0, 1, 0, 0x00000001u}, {0, 2, 0, 0x00000002u},  {0, 4, 0, 0x00000004u},
        {0, 8, 0, 0x00000008u}, {0, 16, 0, 0x00000010u}, {0, 31, 0, 0x0000001fu},
        {0, 0, 1, 0x00000020u},

        {1, 1, 0, 0x00000040u}, {1, 2, 0, 0x00000080u},  {1, 4, 0, 0x00000100u},
        {1, 8, 0, 0x00000200u}, {1, 16, 0, 0x00000400u}, {1, 31, 0, 0x000007c0u},
        {1, 0, 1, 0x00000800u},

        {2, 1, 0, 0x00001000u}, {2, 2, 0, 0x00002000u},  {2, 4, 0, 0x00004000u},
        {2, 8, 0, 0x00008000u}, {2, 16, 0, 0x00010000u}, {2, 31, 0, 0x0001f000u},
        {2, 0, 1, 0x00020000u},

        {3, 1, 0, 0x00040000u}, {3, 2, 0, 0x00080000u},  {3, 4, 0, 0x00100000u},
        {3, 8, 0, 0x00200000u}, {3, 16, 0, 0x00400000u}, {3, 31, 0, 0x007c0000u},
        {3, 0, 1, 0x00800000u},

        {4, 1, 0, 0x01000000u}, {4, 2, 0, 0x02000000u},  {4, 4, 0, 0x04000000u},
        {4, 8, 0, 0x08000000u}, {4, 16, 0, 0x10000000u}, {4, 31, 0, 0x1f000000u},
        {4, 0, 1, 0x20000000u},
};

static void test_segpref_bits(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(segpref_one_hot); i++) {
		gs_segpref p;
		memset(&p, 0, sizeof(p));
		p.segment[segpref_one_hot[i].slot] = segpref_one_hot[i].segment;
		p.direction[segpref_one_hot[i].slot] = segpref_one_hot[i].direction;
		assert_int_equal(gs_segpref_encode(&p), segpref_one_hot[i].value);

		gs_segpref back;
		memset(&back, 0xee, sizeof(back));
		gs_segpref_decode(segpref_one_hot[i].value, &back);
		assert_memory_equal(&back, &p, sizeof(p));
	}

	/* All five slots at once: ids 1..5, directions 1,0,1,0,1. */
	gs_segpref full = {.segment = {1, 2, 3, 4, 5}, .direction = {1, 0, 1, 0, 1}};
	assert_int_equal(gs_segpref_encode(&full), 0x251230a1u);
	gs_segpref back;
	gs_segpref_decode(0x251230a1u, &back);
	assert_memory_equal(&back, &full, sizeof(full));

	/* Reserved bits 30..31 are not part of any field. */
	assert_int_equal(GS_SEGPREF_RESERVED_MASK, 0xc0000000u);
	gs_segpref_decode(0xc0000000u, &back);
	gs_segpref zero;
	memset(&zero, 0, sizeof(zero));
	assert_memory_equal(&back, &zero, sizeof(zero));
	/* Out-of-range inputs cannot spill into the neighbouring field. */
	gs_segpref wide = {.segment = {0xff}, .direction = {0xfe}};
	assert_int_equal(gs_segpref_encode(&wide), 0x0000001fu);
}

static void test_segpref_validate(void **state)
{
	(void)state;
	/* Supported: segments 1, 2 and 5. */
	const uint32_t supported = (1u << 1) | (1u << 2) | (1u << 5);
	static const struct {
		uint32_t value;
		gs_segpref_check want;
	} cases[] = {
	        {0x00000000u, GS_SEGPREF_OK}, /* no preference */
	        {0x00000001u, GS_SEGPREF_OK}, /* 1 */
	        {0x00000021u, GS_SEGPREF_OK}, /* 1 top-down */
	        {0x00000081u, GS_SEGPREF_OK}, /* 1, 2 */
	        {0x05000000u | 0x00140000u | 0x00001000u | 0x00000080u | 0x00000005u,
	         GS_SEGPREF_OK},                       /* 5, 2, 1, 5, 5 */
	        {0x00000003u, GS_SEGPREF_UNSUPPORTED}, /* 3 */
	        {0x000000c1u, GS_SEGPREF_UNSUPPORTED}, /* 1, 3 */
	        {0x0000001fu, GS_SEGPREF_UNSUPPORTED}, /* 31 */
	        {0x00001001u, GS_SEGPREF_AFTER_END},   /* 1, 0, 1 */
	        {0x01000000u, GS_SEGPREF_AFTER_END},   /* 0, 0, 0, 0, 1 */
	        {0x00000020u, GS_SEGPREF_AFTER_END},   /* direction with no segment */
	        {0x00000801u, GS_SEGPREF_AFTER_END},   /* 1, then a lone direction */
	        {0x40000000u, GS_SEGPREF_RESERVED},
	        {0x80000001u, GS_SEGPREF_RESERVED},
	        {0xc0000003u, GS_SEGPREF_RESERVED}, /* reserved wins over unsupported */
	};
	for (size_t i = 0; i < COUNT(cases); i++)
		assert_int_equal(gs_segpref_validate(cases[i].value, supported), cases[i].want);
	/* An empty supported set accepts only "no preference". */
	assert_int_equal(gs_segpref_validate(0, 0), GS_SEGPREF_OK);
	assert_int_equal(gs_segpref_validate(1, 0), GS_SEGPREF_UNSUPPORTED);
}

static void test_patch_flags_for_submit(void **state)
{
	(void)state;
	static const struct {
		uint32_t submit, patch;
	} cases[] = {
	        {0x000, 0x0}, {0x001, 0x1}, {0x002, 0x2}, {0x004, 0x4},       {0x008, 0x8},
	        {0x00f, 0xf}, {0x1f0, 0x0}, {0x10a, 0xa}, {0xfffffe00u, 0x0},
	};
	for (size_t i = 0; i < COUNT(cases); i++)
		assert_int_equal(gs_patch_flags_for_submit(cases[i].submit), cases[i].patch);
}

static void test_priority_class_names(void **state)
{
	(void)state;
	static const char *const names[] = {"IDLE",         "BELOW_NORMAL", "NORMAL",
	                                    "ABOVE_NORMAL", "HIGH",         "REALTIME"};
	assert_int_equal(COUNT(names), GS_PRIORITY_CLASS_MAX + 1);
	for (uint32_t c = 0; c < COUNT(names); c++)
		assert_string_equal(gs_priority_class_name(c), names[c]);
	assert_string_equal(gs_priority_class_name(6), "?");
	assert_string_equal(gs_priority_class_name(UINT32_MAX), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_flag_tables),
	        cmocka_unit_test(test_flags_format),
	        cmocka_unit_test(test_flags_parse),
	        cmocka_unit_test(test_segpref_bits),
	        cmocka_unit_test(test_segpref_validate),
	        cmocka_unit_test(test_patch_flags_for_submit),
	        cmocka_unit_test(test_priority_class_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
