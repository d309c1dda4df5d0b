/*
 * Names of the wire contract's enum values, from the code protoc-c generates from
 * proto/gpusched.proto (one source of truth for every name the daemon writes or prints).
 */
#ifndef GS_PBENUM_H
#define GS_PBENUM_H

#include <protobuf-c/protobuf-c.h>

/* The name of `value` in `desc` without `prefix` ("PACKET_STATE_RUNNING" -> "RUNNING" with
 * prefix "PACKET_STATE_"), or NULL when the enum has no such value. */
const char *gs_enum_name(const ProtobufCEnumDescriptor *desc, int value, const char *prefix);

#endif
