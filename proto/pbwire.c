#include "pbwire.h"

bool gs_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return true;
		}
	}
	return false;
}

size_t gs_pb_put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	do {
		p[n++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
		v >>= 7;
	} while (v);
	return n;
}

bool gs_pb_field_next(const uint8_t **p, const uint8_t *end, gs_pb_field *f)
{
	uint64_t tag;
	if (!gs_pb_varint(p, end, &tag))
		return false;
	f->number = tag >> 3;
	f->wire = (uint32_t)(tag & 7);
	f->data = NULL;
	switch (f->wire) {
	case GS_PB_VARINT:
		return gs_pb_varint(p, end, &f->value);
	case GS_PB_FIXED64:
	case GS_PB_FIXED32:
		f->value = f->wire == GS_PB_FIXED64 ? 8 : 4;
		break;
	case GS_PB_LEN:
		if (!gs_pb_varint(p, end, &f->value))
			return false;
		break;
	default:
		return false;
	}
	if (f->value > (uint64_t)(end - *p))
		return false;
	f->data = *p;
	*p += f->value;
	return true;
}
