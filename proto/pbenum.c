#include "pbenum.h"

#include <string.h>

const char *gs_enum_name(const ProtobufCEnumDescriptor *desc, int value, const char *prefix)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(desc, value);
	if (!v)
		return NULL;
	size_t n = strlen(prefix);
	return strncmp(v->name, prefix, n) == 0 ? v->name + n : v->name;
}
