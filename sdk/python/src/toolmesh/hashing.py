"""The content hash of a tool definition (``RegisteredTool.content_hash``).

The lowercase hex SHA-256 of lines ``key=q(value)``, each ended by ``\\n``, where ``q``
is Go's ``strconv.Quote`` (:func:`toolmesh.gojson.go_quote`): ``name``,
``description``, ``input_schema`` (its canonical JSON), one ``metadata.<key>`` per
metadata entry by key order, ``return_direct``, ``idempotent``, ``timeout`` (a Go
duration), then one ``blackboard_type`` line per declared type, and ``reports_progress``,
``requires_approval``, ``receiver_type`` and ``once_per_loop`` (the advice) only when
set, as ``internal/wire.Hash`` computes it.
"""

from __future__ import annotations

import hashlib

from . import pb
from .gojson import canonical_json, go_duration, go_quote

__all__ = ["content_hash"]


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def content_hash(definition: pb.Message) -> str:
    """The content hash of a ``toolmesh.v1.ToolDefinition``."""
    d = definition
    lines: list[str] = []

    def field(name: str, value: str) -> None:
        lines.append(f"{name}={go_quote(value)}\n")

    field("name", d.name)
    field("description", d.description)
    field("input_schema", canonical_json(d.input_schema_json))
    for key in sorted((str(k) for k in d.metadata), key=_utf8):
        field("metadata." + key, d.metadata[key])
    field("return_direct", "true" if d.return_direct else "false")
    field("idempotent", "true" if d.idempotent else "false")
    field("timeout", go_duration(pb.duration_ns(d.timeout) if d.HasField("timeout") else 0))
    for t in d.blackboard_types:
        field("blackboard_type", t)
    if d.reports_progress:
        field("reports_progress", "true")
    if d.requires_approval:
        field("requires_approval", "true")
    if d.receiver_type:
        field("receiver_type", d.receiver_type)
    if d.HasField("once_per_loop"):
        field("once_per_loop", d.once_per_loop.advice)
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogatepass")).hexdigest()
