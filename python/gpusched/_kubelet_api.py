"""The kubelet's device-plugin API (v1beta1) as protobuf message classes, built at run time
from a table: deploy/kubernetes/deviceplugin-v1beta1.proto is the same API as a .proto file,
and the tests check with protoc that the two agree. Needs python3-protobuf only (no protoc, no
generated code)."""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "v1beta1"
VERSION = "v1beta1"

_F = descriptor_pb2.FieldDescriptorProto
_S, _B, _I64, _I32, _M = _F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_INT64, _F.TYPE_INT32, _F.TYPE_MESSAGE
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# message: [(field, number, type, label, message type or None)]; "map" fields are
# map<string, string>.
MESSAGES = {
    "DevicePluginOptions": [("pre_start_required", 1, _B, _ONE, None),
                            ("get_preferred_allocation_available", 2, _B, _ONE, None)],
    "RegisterRequest": [("version", 1, _S, _ONE, None), ("endpoint", 2, _S, _ONE, None),
                        ("resource_name", 3, _S, _ONE, None),
                        ("options", 4, _M, _ONE, "DevicePluginOptions")],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, _M, _MANY, "Device")],
    "TopologyInfo": [("nodes", 1, _M, _MANY, "NUMANode")],
    "NUMANode": [("ID", 1, _I64, _ONE, None)],
    "Device": [("ID", 1, _S, _ONE, None), ("health", 2, _S, _ONE, None),
               ("topology", 3, _M, _ONE, "TopologyInfo")],
    "PreStartContainerRequest": [("devices_ids", 1, _S, _MANY, None)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1, _M, _MANY,
                                    "ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, _S, _MANY, None),
                                            ("must_include_deviceIDs", 2, _S, _MANY, None),
                                            ("allocation_size", 3, _I32, _ONE, None)],
    "PreferredAllocationResponse": [("container_responses", 1, _M, _MANY,
                                     "ContainerPreferredAllocationResponse")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, _S, _MANY, None)],
    "AllocateRequest": [("container_requests", 1, _M, _MANY, "ContainerAllocateRequest")],
    "ContainerAllocateRequest": [("devices_ids", 1, _S, _MANY, None)],
    "CDIDevice": [("name", 1, _S, _ONE, None)],
    "AllocateResponse": [("container_responses", 1, _M, _MANY, "ContainerAllocateResponse")],
    "ContainerAllocateResponse": [("envs", 1, _M, _MANY, "map"),
                                  ("mounts", 2, _M, _MANY, "Mount"),
                                  ("devices", 3, _M, _MANY, "DeviceSpec"),
                                  ("annotations", 4, _M, _MANY, "map"),
                                  ("cdi_devices", 5, _M, _MANY, "CDIDevice")],
    "Mount": [("container_path", 1, _S, _ONE, None), ("host_path", 2, _S, _ONE, None),
              ("read_only", 3, _B, _ONE, None)],
    "DeviceSpec": [("container_path", 1, _S, _ONE, None), ("host_path", 2, _S, _ONE, None),
                   ("permissions", 3, _S, _ONE, None)],
}

# service: [(method, request, response, server streaming)]
SERVICES = {
    "Registration": [("Register", "RegisterRequest", "Empty", False)],
    "DevicePlugin": [
        ("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
        ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
        ("GetPreferredAllocation", "PreferredAllocationRequest", "PreferredAllocationResponse",
         False),
        ("Allocate", "AllocateRequest", "AllocateResponse", False),
        ("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse", False),
    ],
}


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The API as a FileDescriptorProto (what protoc makes of the .proto file)."""
    fd = descriptor_pb2.FileDescriptorProto(name="gpusched/deviceplugin_v1beta1.proto",
                                            package=PACKAGE, syntax="proto3")
    for name, fields in MESSAGES.items():
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, ref in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label,
                            json_name=fname[:1].lower() + _camel(fname)[1:]
                            if "_" in fname else fname)
            if ref == "map":
                entry = m.nested_type.add(name=_camel(fname) + "Entry")
                entry.field.add(name="key", number=1, type=_S, label=_ONE, json_name="key")
                entry.field.add(name="value", number=2, type=_S, label=_ONE, json_name="value")
                entry.options.map_entry = True
                f.type_name = f".{PACKAGE}.{name}.{entry.name}"
            elif ref:
                f.type_name = f".{PACKAGE}.{ref}"
    for sname, methods in SERVICES.items():
        s = fd.service.add(name=sname)
        for mname, req, resp, stream in methods:
            s.method.add(name=mname, input_type=f".{PACKAGE}.{req}",
                         output_type=f".{PACKAGE}.{resp}", server_streaming=stream)
    return fd


def _classes():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    out = {}
    for name in MESSAGES:
        desc = pool.FindMessageTypeByName(f"{PACKAGE}.{name}")
        if hasattr(message_factory, "GetMessageClass"):
            out[name] = message_factory.GetMessageClass(desc)
        else:  # protobuf before 4.21 (Debian 12 has 3.21)
            out[name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return out


M = _classes()
"""Message classes by name: M["AllocateResponse"]() and so on."""


def method_path(service: str, method: str) -> str:
    """The gRPC path of a method: /v1beta1.DevicePlugin/Allocate."""
    return f"/{PACKAGE}.{service}/{method}"
