"""The contract's messages, built at run time from descriptor sets.

``toolmesh.binpb`` is toolmesh's contract (``proto/``, with its imports) and
``extras.binpb`` the SDK's own copies of ``grpc.health.v1`` and the ``google.rpc``
error details (``sdk/proto``); both are ``buf build`` outputs (see the README).
They are loaded into a pool of their own, so that nothing here clashes with generated
code an application may also import.

Every message of ``toolmesh.v1`` is an attribute of this module under its name
(``pb.RunRequest``, ``pb.InvokeResponse``, ...), enums too (``pb.RunState``, with
``pb.RunState.Value("RUN_STATE_RUNNING")``); :func:`message_class` finds any message by
full name. The method paths of the services are the ``*_METHOD`` constants.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from ._bootstrap import ensure_grpc

ensure_grpc()

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402
from google.protobuf.message import Message  # noqa: E402

__all__ = ["Message", "POOL", "enum_name", "enum_value", "message_class", "parse", "to_dict", "to_json"]

POOL = descriptor_pool.DescriptorPool()


def _load(name: str) -> list[str]:
    data = resources.files(__package__).joinpath(name).read_bytes()
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(data)
    names = []
    for f in fds.file:
        try:
            POOL.FindFileByName(f.name)
            continue  # a well-known type both sets carry
        except KeyError:
            pass
        POOL.Add(f)
        names.append(f.name)
    return names


_FILES = _load("toolmesh.binpb") + _load("extras.binpb")

_factory: Any = None
_classes: dict[str, type[Message]] = {}


def message_class(full_name: str) -> type[Message]:
    """The message class of a message type of the pool, by full name."""
    cls = _classes.get(full_name)
    if cls is None:
        desc = POOL.FindMessageTypeByName(full_name)
        get = getattr(message_factory, "GetMessageClass", None)
        if get is not None:
            cls = get(desc)
        else:
            global _factory
            if _factory is None:
                _factory = message_factory.MessageFactory(POOL)
            cls = _factory.GetPrototype(desc)
        assert cls is not None
        _classes[full_name] = cls
    return cls


class _Enum:
    """An enum of the pool: ``Name(number)``, ``Value(name)``, and each value as an
    attribute."""

    def __init__(self, full_name: str) -> None:
        self.DESCRIPTOR = POOL.FindEnumTypeByName(full_name)
        for v in self.DESCRIPTOR.values:
            setattr(self, v.name, v.number)

    def Name(self, number: int) -> str:  # noqa: N802 (protobuf's spelling)
        v = self.DESCRIPTOR.values_by_number.get(number)
        if v is None:
            raise ValueError(f"{self.DESCRIPTOR.full_name} has no value {number}")
        return str(v.name)

    def Value(self, name: str) -> int:  # noqa: N802
        v = self.DESCRIPTOR.values_by_name.get(name)
        if v is None:
            raise ValueError(f"{self.DESCRIPTOR.full_name} has no value {name!r}")
        return int(v.number)

    def items(self) -> list[tuple[str, int]]:
        return [(str(v.name), int(v.number)) for v in self.DESCRIPTOR.values]

    def __getattr__(self, name: str) -> int:
        # The values are set as attributes; this only runs for a name that is none.
        raise AttributeError(f"{self.DESCRIPTOR.full_name} has no value {name}")


def enum_value(enum_full_name: str, value: int | str) -> int:
    """The number of an enum value given by number or by name (the full name, or the
    name without the enum's prefix: ``"RUNNING"`` for ``RUN_STATE_RUNNING``)."""
    desc = POOL.FindEnumTypeByName(enum_full_name)
    if isinstance(value, int):
        return value
    v = desc.values_by_name.get(value)
    if v is None:
        for cand in desc.values:
            if cand.name.endswith("_" + value):
                v = cand
                break
    if v is None:
        raise ValueError(f"{enum_full_name} has no value {value!r}")
    return int(v.number)


def enum_name(enum_full_name: str, number: int) -> str:
    """The name of an enum value, or the number as text for an unknown one."""
    v = POOL.FindEnumTypeByName(enum_full_name).values_by_number.get(number)
    return str(v.name) if v is not None else str(number)


def parse(full_name: str, value: Any) -> Message:
    """A message of the given type from a message of that type (returned as is) or a
    dict in the protobuf JSON mapping (lowerCamelCase or the proto's field names)."""
    from google.protobuf import json_format

    cls = message_class(full_name)
    if isinstance(value, Message):
        if value.DESCRIPTOR.full_name != full_name:
            raise TypeError(f"want a {full_name}, got a {value.DESCRIPTOR.full_name}")
        return value
    if value is None:
        return cls()
    if not isinstance(value, dict):
        raise TypeError(f"want a {full_name} or a dict, got {type(value).__name__}")
    return json_format.ParseDict(value, cls(), descriptor_pool=POOL)


def to_dict(m: Message) -> dict[str, Any]:
    """A message in the protobuf JSON mapping, as a dict (lowerCamelCase names, enums by
    name, 64-bit integers as strings, default values left out)."""
    from google.protobuf import json_format

    d: dict[str, Any] = json_format.MessageToDict(m, descriptor_pool=POOL)
    return d


def to_json(m: Message) -> str:
    """A message as one line of protobuf JSON."""
    import json

    return json.dumps(to_dict(m), ensure_ascii=False, separators=(",", ":"))


def _export() -> None:
    g = globals()
    for fname in _FILES:
        fd = POOL.FindFileByName(fname)
        if fd.package != "toolmesh.v1":
            continue
        for name, mdesc in fd.message_types_by_name.items():
            g[name] = message_class(mdesc.full_name)
        for name, edesc in fd.enum_types_by_name.items():
            g[name] = _Enum(edesc.full_name)


_export()


def __getattr__(name: str) -> Any:
    # The messages and enums of toolmesh.v1 are set as attributes by _export; this only
    # runs for a name that is none of them (and tells type checkers they are dynamic).
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (not a message or enum of toolmesh.v1)")

Duration = message_class("google.protobuf.Duration")
Timestamp = message_class("google.protobuf.Timestamp")
Any_ = message_class("google.protobuf.Any")
Status = message_class("google.rpc.Status")
ErrorInfo = message_class("google.rpc.ErrorInfo")
RetryInfo = message_class("google.rpc.RetryInfo")
BadRequest = message_class("google.rpc.BadRequest")
HealthCheckRequest = message_class("grpc.health.v1.HealthCheckRequest")
HealthCheckResponse = message_class("grpc.health.v1.HealthCheckResponse")
ServingStatus = _Enum("grpc.health.v1.HealthCheckResponse.ServingStatus")
Code = _Enum("google.rpc.Code")

# Services and method paths.
ORCHESTRATOR_SERVICE = "toolmesh.v1.OrchestratorService"
REGISTRY_SERVICE = "toolmesh.v1.ToolRegistryService"
WORKER_SERVICE = "toolmesh.v1.ToolWorkerService"
HEALTH_SERVICE = "grpc.health.v1.Health"

REGISTRY_CONNECT = f"/{REGISTRY_SERVICE}/Connect"
WORKER_INVOKE = f"/{WORKER_SERVICE}/Invoke"
WORKER_INVOKE_STREAM = f"/{WORKER_SERVICE}/InvokeStream"
HEALTH_CHECK = f"/{HEALTH_SERVICE}/Check"
HEALTH_WATCH = f"/{HEALTH_SERVICE}/Watch"


def orchestrator_method(name: str) -> str:
    """The path of an OrchestratorService method, such as ``Run``."""
    return f"/{ORCHESTRATOR_SERVICE}/{name}"


def duration(seconds: float | int) -> Message:
    """A google.protobuf.Duration of the given seconds (rounded to nanoseconds)."""
    ns = round(seconds * 1_000_000_000)
    d = Duration()
    s, n = divmod(abs(ns), 1_000_000_000)
    d.seconds, d.nanos = (-s, -n) if ns < 0 else (s, n)
    return d


def duration_ns(d: Message) -> int:
    """The nanoseconds of a google.protobuf.Duration."""
    return int(d.seconds) * 1_000_000_000 + int(d.nanos)


def pack_any(m: Message) -> Message:
    """m packed in a google.protobuf.Any."""
    a = Any_()
    a.type_url = "type.googleapis.com/" + m.DESCRIPTOR.full_name
    a.value = m.SerializeToString()
    return a


def unpack_any(a: Message) -> Message | None:
    """The message an Any holds, when its type is in the pool; None otherwise."""
    name = str(a.type_url).rsplit("/", 1)[-1]
    try:
        cls = message_class(name)
    except KeyError:
        return None
    m = cls()
    try:
        m.ParseFromString(a.value)
    except Exception:  # noqa: BLE001 (a malformed detail is skipped, not fatal)
        return None
    return m
