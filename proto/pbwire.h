/*
 * Reading a protobuf message's top-level fields in place, without decoding what is inside
 * them: the daemon reads a request's envelope (id, token, guest) this way before it decodes
 * anything, and gpusched-relay rewrites the envelope of a guest's request. One scanner, so
 * both agree on which bytes are a message.
 */
#ifndef GS_PBWIRE_H
#define GS_PBWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Protobuf wire types (the low three bits of a field's tag). */
enum {
	GS_PB_VARINT = 0,
	GS_PB_FIXED64 = 1,
	GS_PB_LEN = 2, /* length-delimited: bytes, strings, embedded messages */
	GS_PB_FIXED32 = 5,
};

/* One field, as it lies in the buffer. */
typedef struct gs_pb_field {
	uint64_t number;     /* field number (0 is not valid protobuf: the caller decides) */
	uint32_t wire;       /* GS_PB_* */
	uint64_t value;      /* a varint's value; otherwise the length of data */
	const uint8_t *data; /* the bytes of a length-delimited or fixed field */
} gs_pb_field;

/* Reads a base-128 varint at *p (at most 10 bytes, not past end) and moves *p past it. */
bool gs_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);
/* Writes v as a varint at p (room for 10 bytes); returns the bytes written. */
size_t gs_pb_put_varint(uint8_t *p, uint64_t v);
/* Reads the field that starts at *p (p < end) and moves *p past it. False when the bytes are
 * not protobuf there: a varint or length cut short, or a group or unknown wire type. */
bool gs_pb_field_next(const uint8_t **p, const uint8_t *end, gs_pb_field *f);

#endif
