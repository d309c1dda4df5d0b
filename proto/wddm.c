/*
 * WDDM bit layouts: segment preferences, flag names, priority classes (docs/wddm.md).
 */
#include "wddm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- D3DDDI_SEGMENTPREFERENCE ---- */

/* Slot k occupies bits 6k..6k+5: SegmentId in the low five, Direction in the sixth. */
#define SEGPREF_SLOT_BITS     6u
#define SEGPREF_ID_MASK       0x1fu
#define SEGPREF_DIRECTION_BIT 5u

uint32_t gs_segpref_encode(const gs_segpref *p)
{
	uint32_t v = 0;

	for (unsigned k = 0; k < GS_SEGPREF_SLOTS; k++) {
		uint32_t slot = (p->segment[k] & SEGPREF_ID_MASK) |
		                ((uint32_t)(p->direction[k] & 1u) << SEGPREF_DIRECTION_BIT);
		v |= slot << (SEGPREF_SLOT_BITS * k);
	}
	return v;
}

void gs_segpref_decode(uint32_t value, gs_segpref *out)
{
	for (unsigned k = 0; k < GS_SEGPREF_SLOTS; k++) {
		uint32_t slot = value >> (SEGPREF_SLOT_BITS * k);
		out->segment[k] = (uint8_t)(slot & SEGPREF_ID_MASK);
		out->direction[k] = (uint8_t)((slot >> SEGPREF_DIRECTION_BIT) & 1u);
	}
}

/*
 * The list ends at the first slot whose id is 0; everything after it, Direction bits included,
 * must be zero, since a preference that cannot take effect is a client error worth reporting
 * rather than silently ignoring.
 */
gs_segpref_check gs_segpref_validate(uint32_t value, uint32_t supported_set)
{
	gs_segpref p;
	bool ended = false;

	if (value & GS_SEGPREF_RESERVED_MASK)
		return GS_SEGPREF_RESERVED;
	gs_segpref_decode(value, &p);
	for (unsigned k = 0; k < GS_SEGPREF_SLOTS; k++) {
		if (ended) {
			if (p.segment[k] != 0 || p.direction[k] != 0)
				return GS_SEGPREF_AFTER_END;
			continue;
		}
		if (p.segment[k] == 0) {
			ended = true;
			/* Direction without a segment is as meaningless as an id after the end. */
			if (p.direction[k] != 0)
				return GS_SEGPREF_AFTER_END;
			continue;
		}
		if (!(supported_set & (UINT32_C(1) << p.segment[k])))
			return GS_SEGPREF_UNSUPPORTED;
	}
	return GS_SEGPREF_OK;
}

/* ---- flag names ---- */

const gs_flag_name gs_submit_flag_names[] = {
        {GS_SUBMIT_PAGING, "Paging"},
        {GS_SUBMIT_PRESENT, "Present"},
        {GS_SUBMIT_REDIRECTED_PRESENT, "RedirectedPresent"},
        {GS_SUBMIT_NULL_RENDERING, "NullRendering"},
        {GS_SUBMIT_FLIP, "Flip"},
        {GS_SUBMIT_FLIP_WITH_NO_WAIT, "FlipWithNoWait"},
        {GS_SUBMIT_CONTEXT_SWITCH, "ContextSwitch"},
        {GS_SUBMIT_RESUBMISSION, "Resubmission"},
        {GS_SUBMIT_VIRTUAL_MACHINE_DATA, "VirtualMachineData"},
        {0, NULL},
};

const gs_flag_name gs_patch_flag_names[] = {
        {GS_PATCH_PAGING, "Paging"},
        {GS_PATCH_PRESENT, "Present"},
        {GS_PATCH_REDIRECTED_PRESENT, "RedirectedPresent"},
        {GS_PATCH_NULL_RENDERING, "NullRendering"},
        {0, NULL},
};

const gs_flag_name gs_transfer_flag_names[] = {
        {GS_TRANSFER_SWIZZLE, "Swizzle"},
        {GS_TRANSFER_UNSWIZZLE, "Unswizzle"},
        {GS_TRANSFER_ALLOCATION_IS_IDLE, "AllocationIsIdle"},
        {GS_TRANSFER_START, "TransferStart"},
        {GS_TRANSFER_END, "TransferEnd"},
        {0, NULL},
};

/* Appends text at *len like snprintf would: counts every byte, stores what fits. */
static void append(char *buf, size_t cap, size_t *len, const char *text)
{
	size_t n = strlen(text);

	if (*len < cap) {
		size_t room = cap - *len - 1;
		memcpy(buf + *len, text, n < room ? n : room);
	}
	*len += n;
}

/* Returns the length of the whole text (snprintf's contract): the caller sees truncation when
 * the result is >= cap. buf is always terminated when cap > 0. */
size_t gs_flags_format(const gs_flag_name *table, uint32_t value, char *buf, size_t cap)
{
	size_t len = 0;
	uint32_t rest = value;

	for (const gs_flag_name *f = table; f->name; f++) {
		if (!(value & f->bit))
			continue;
		if (len)
			append(buf, cap, &len, "|");
		append(buf, cap, &len, f->name);
		rest &= ~f->bit;
	}
	if (rest) {
		char hex[16];
		snprintf(hex, sizeof(hex), "0x%x", rest);
		if (len)
			append(buf, cap, &len, "|");
		append(buf, cap, &len, hex);
	}
	if (value == 0)
		append(buf, cap, &len, "none");
	if (cap)
		buf[len < cap ? len : cap - 1] = '\0';
	return len;
}

/* One token: a flag name, "none", or a number; [s, s + n) without surrounding blanks. */
static int parse_token(const gs_flag_name *table, const char *s, size_t n, uint32_t *bits)
{
	if (n == 0)
		return -1;
	if (isdigit((unsigned char)s[0])) {
		char num[24];
		char *end;
		if (n >= sizeof(num))
			return -1;
		memcpy(num, s, n);
		num[n] = '\0';
		/* Decimal or 0x hex only: base 0 would read a leading zero as octal. */
		bool hex = n > 2 && num[0] == '0' && (num[1] == 'x' || num[1] == 'X');
		const char *digits = hex ? num + 2 : num;
		if (!isxdigit((unsigned char)digits[0]))
			return -1;
		errno = 0;
		unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
		if (errno || *end != '\0' || v > UINT32_MAX)
			return -1;
		*bits = (uint32_t)v;
		return 0;
	}
	if (n == 4 && strncasecmp(s, "none", 4) == 0) {
		*bits = 0;
		return 0;
	}
	for (const gs_flag_name *f = table; f->name; f++) {
		if (strlen(f->name) == n && strncasecmp(s, f->name, n) == 0) {
			*bits = f->bit;
			return 0;
		}
	}
	return -1;
}

/*
 * Tokens are separated by ',' or '|' and may each be a name or a number, so anything
 * gs_flags_format writes (including its hex remainder) parses back to the same value.
 */
int gs_flags_parse(const gs_flag_name *table, const char *text, uint32_t *out, const char **bad)
{
	uint32_t value = 0;
	const char *p = text;

	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		const char *start = p;
		while (*p && *p != ',' && *p != '|')
			p++;
		const char *end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		uint32_t bits;
		if (parse_token(table, start, (size_t)(end - start), &bits) != 0) {
			if (bad)
				*bad = start;
			return -1;
		}
		value |= bits;
		if (*p == '\0')
			break;
		p++;
	}
	*out = value;
	return 0;
}

uint32_t gs_patch_flags_for_submit(uint32_t submit_flags)
{
	static const struct {
		uint32_t submit, patch;
	} map[] = {
	        {GS_SUBMIT_PAGING, GS_PATCH_PAGING},
	        {GS_SUBMIT_PRESENT, GS_PATCH_PRESENT},
	        {GS_SUBMIT_REDIRECTED_PRESENT, GS_PATCH_REDIRECTED_PRESENT},
	        {GS_SUBMIT_NULL_RENDERING, GS_PATCH_NULL_RENDERING},
	};
	uint32_t patch = 0;

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (submit_flags & map[i].submit)
			patch |= map[i].patch;
	return patch;
}

const char *gs_priority_class_name(uint32_t cls)
{
	static const char *const names[] = {
	        "IDLE", "BELOW_NORMAL", "NORMAL", "ABOVE_NORMAL", "HIGH", "REALTIME",
	};

	return cls <= GS_PRIORITY_CLASS_MAX ? names[cls] : "?";
}
