"""toolmesh's error statuses: the ``google.rpc.Status`` in ``grpc-status-details-bin``
with a ``google.rpc.ErrorInfo`` (domain ``toolmesh.dev``, the reason without its
``ERROR_REASON_`` prefix), a ``google.rpc.RetryInfo`` for retryable reasons and a
``google.rpc.BadRequest`` naming a request field."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from . import pb

__all__ = [
    "ERROR_DOMAIN",
    "REASONS",
    "STATUS_DETAILS_KEY",
    "StatusDetails",
    "ToolmeshError",
    "parse_status_details",
    "status_details",
]

ERROR_DOMAIN = "toolmesh.dev"
STATUS_DETAILS_KEY = "grpc-status-details-bin"

_C = grpc.StatusCode

# Each reason's status code and, for a retryable one, the delay of its RetryInfo in
# seconds (internal/wire.Reasons).
REASONS: dict[str, tuple[grpc.StatusCode, float]] = {
    "INVALID_REQUEST": (_C.INVALID_ARGUMENT, 0),
    "UNKNOWN_TOOL_GROUP": (_C.NOT_FOUND, 0),
    "UNKNOWN_TOOL": (_C.NOT_FOUND, 0),
    "MAX_ITERATIONS": (_C.RESOURCE_EXHAUSTED, 0),
    "TOOL_NOT_FOUND": (_C.FAILED_PRECONDITION, 0),
    "MODEL_ERROR": (_C.UNAVAILABLE, 5),
    "EMPTY_RESPONSE": (_C.FAILED_PRECONDITION, 0),
    "TOOL_SIGNAL": (_C.ABORTED, 0),
    "CANCELLED": (_C.CANCELLED, 0),
    "RUN_TIMEOUT": (_C.DEADLINE_EXCEEDED, 0),
    "RUN_EXISTS": (_C.ALREADY_EXISTS, 0),
    "RUN_NOT_FOUND": (_C.NOT_FOUND, 0),
    "OVERLOADED": (_C.RESOURCE_EXHAUSTED, 1),
    "SHUTTING_DOWN": (_C.UNAVAILABLE, 1),
    "INTERNAL": (_C.INTERNAL, 0),
    "OUTPUT_SCHEMA": (_C.FAILED_PRECONDITION, 0),
    "MODEL_AUTH": (_C.FAILED_PRECONDITION, 0),
    "MODEL_NOT_FOUND": (_C.NOT_FOUND, 0),
    "CONTEXT_TOO_LONG": (_C.FAILED_PRECONDITION, 0),
    "MODEL_RATE_LIMITED": (_C.RESOURCE_EXHAUSTED, 10),
    "MODEL_BAD_REQUEST": (_C.FAILED_PRECONDITION, 0),
    "BUDGET_EXCEEDED": (_C.RESOURCE_EXHAUSTED, 0),
    "WORKER_DRAINING": (_C.UNAVAILABLE, 0.001),
    "WORKER_ID_IN_USE": (_C.ALREADY_EXISTS, 1),
    "REGISTRATION_INVALID": (_C.INVALID_ARGUMENT, 0),
    "REGISTRATION_CONFLICT": (_C.FAILED_PRECONDITION, 0),
    "WORKER_UNREACHABLE": (_C.UNAVAILABLE, 1),
    "WORKER_WRONG_SERVICE": (_C.FAILED_PRECONDITION, 0),
    "LEASE_EXPIRED": (_C.DEADLINE_EXCEEDED, 0),
    "REGISTRY_FULL": (_C.RESOURCE_EXHAUSTED, 5),
    "REQUEST_TIMEOUT": (_C.DEADLINE_EXCEEDED, 1),
    "REQUIRED_TOOLS_MISSING": (_C.FAILED_PRECONDITION, 0),
    "JOURNAL_UNAVAILABLE": (_C.UNAVAILABLE, 1),
    "RUN_ELSEWHERE": (_C.FAILED_PRECONDITION, 0),
    "APPROVAL_NOT_PENDING": (_C.FAILED_PRECONDITION, 0),
    "UNAUTHENTICATED": (_C.UNAUTHENTICATED, 0),
    "PERMISSION_DENIED": (_C.PERMISSION_DENIED, 0),
    "TENANT_QUOTA": (_C.RESOURCE_EXHAUSTED, 0),
    "DEFINITION_QUARANTINED": (_C.FAILED_PRECONDITION, 5),
    "JOURNAL_DAMAGED": (_C.DATA_LOSS, 0),
}

_CODES_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


@dataclass(frozen=True)
class StatusDetails:
    """What toolmesh's details of a status say."""

    reason: str = ""
    """The ErrorInfo reason (``"RUN_NOT_FOUND"``); empty without a toolmesh ErrorInfo."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """The ErrorInfo metadata: ``field``, ``run_id``."""
    retry_delay: float | None = None
    """The RetryInfo delay in seconds; None without one."""
    field_violations: tuple[tuple[str, str], ...] = ()
    """The BadRequest's (field, description) pairs."""


def parse_status_details(data: bytes | None) -> StatusDetails:
    """Reads the ``grpc-status-details-bin`` value of a status."""
    if not data:
        return StatusDetails()
    st = pb.Status()
    try:
        st.ParseFromString(data)
    except Exception:  # noqa: BLE001 (no details rather than a crash)
        return StatusDetails()
    reason, meta, delay = "", {}, None
    violations: list[tuple[str, str]] = []
    found = False
    for a in st.details:
        m = pb.unpack_any(a)
        if m is None:
            continue
        name = m.DESCRIPTOR.full_name
        if name == "google.rpc.ErrorInfo" and m.domain == ERROR_DOMAIN and not found:
            reason, meta, found = str(m.reason), dict(m.metadata), True
        elif name == "google.rpc.RetryInfo":
            delay = pb.duration_ns(m.retry_delay) / 1e9
        elif name == "google.rpc.BadRequest":
            violations.extend((str(v.field), str(v.description)) for v in m.field_violations)
    return StatusDetails(reason=reason, metadata=meta, retry_delay=delay, field_violations=tuple(violations))


def status_details(
    reason: str,
    message: str,
    metadata: Mapping[str, str] | None = None,
    retry_delay: float | None = None,
) -> tuple[grpc.StatusCode, bytes]:
    """The status code of a reason and the ``grpc-status-details-bin`` value of a
    status with that reason: an ErrorInfo, and a RetryInfo for a retryable reason (its
    default delay unless retry_delay says otherwise)."""
    code, default_delay = REASONS.get(reason, REASONS["INTERNAL"])
    info = pb.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=dict(metadata or {}))
    st = pb.Status(code=code.value[0], message=message)
    st.details.append(pb.pack_any(info))
    if default_delay > 0:
        delay = retry_delay if retry_delay and retry_delay > 0 else default_delay
        st.details.append(pb.pack_any(pb.RetryInfo(retry_delay=pb.duration(delay))))
    return code, st.SerializeToString()


def _find(md: Iterable[tuple[str, Any]] | None, key: str) -> Any:
    for k, v in md or ():
        if k == key:
            return v
    return None


class ToolmeshError(Exception):
    """An error status of a call to toolmesh, with what its details say.

    ``code`` is the gRPC status code, ``message`` the status message, ``reason`` the
    ErrorInfo reason (``"RUN_NOT_FOUND"``; empty when the status has no toolmesh
    details: it came from gRPC or the transport), ``retry_delay`` the RetryInfo delay in
    seconds (None: not worth retrying as is), ``field`` the request field at fault and
    ``run_id`` the run the error belongs to."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        retry_delay: float | None = None,
        *,
        field: str = "",
        run_id: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.retry_delay = retry_delay
        self.field = field
        self.run_id = run_id
        self.metadata: Mapping[str, str] = dict(metadata or {})

    @property
    def retryable(self) -> bool:
        """Whether the orchestrator said the call is worth retrying (after retry_delay)."""
        return self.retry_delay is not None and self.retry_delay > 0

    @classmethod
    def from_rpc_error(cls, e: grpc.RpcError) -> ToolmeshError:
        """The error of a failed gRPC call (``grpc.aio.AioRpcError`` or a sync one)."""
        code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
        details = e.details() if callable(getattr(e, "details", None)) else str(e)
        trailing = e.trailing_metadata() if callable(getattr(e, "trailing_metadata", None)) else None
        return cls.from_status(code, details or "", _find(trailing, STATUS_DETAILS_KEY))

    @classmethod
    def from_status(cls, code: grpc.StatusCode | int, message: str, details_bin: bytes | None) -> ToolmeshError:
        """The error of a status given by code, message and details."""
        if isinstance(code, int):
            code = _CODES_BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
        d = parse_status_details(details_bin)
        field = d.metadata.get("field", "")
        if not field and d.field_violations:
            field = d.field_violations[0][0]
        return cls(
            code,
            message,
            d.reason,
            d.retry_delay,
            field=field,
            run_id=d.metadata.get("run_id", ""),
            metadata=d.metadata,
        )
