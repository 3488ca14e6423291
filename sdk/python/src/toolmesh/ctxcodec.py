"""The ToolCallContext as gRPC metadata (the contract's "ToolCallContext as gRPC
metadata"; ``internal/ctxcodec`` in Go).

One metadata entry per context entry: key ``tm-ctx-`` + the lowercase, unpadded base32
(RFC 4648) of the context key's UTF-8 + ``-bin``, value the context value's UTF-8 bytes
(a binary header, which gRPC base64-encodes on the wire). The encoded size, summed over
entries, is the metadata key's length + the padded base64 length of the value + 32.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping

from .gojson import go_quote

__all__ = [
    "DEFAULT_MAX_BYTES",
    "PREFIX",
    "RESERVED_PREFIX",
    "SUFFIX",
    "ContextError",
    "ContextTooLargeError",
    "decode",
    "encode",
    "metadata_key",
]

DEFAULT_MAX_BYTES = 8192
PREFIX = "tm-ctx-"
SUFFIX = "-bin"
RESERVED_PREFIX = "toolmesh."
_ENTRY_OVERHEAD = 32
_B32 = set("abcdefghijklmnopqrstuvwxyz234567")


class ContextError(ValueError):
    """Metadata that does not carry a valid ToolCallContext, or a context that cannot
    travel as metadata. The message says why, as Go's codec says it."""


class ContextTooLargeError(ContextError):
    """A context whose encoding is over the size bound."""

    def __init__(self, size: int, max_bytes: int, largest_key: str) -> None:
        self.size, self.max_bytes, self.largest_key = size, max_bytes, largest_key
        super().__init__(
            f"tool call context is {size} bytes encoded, over the {max_bytes}-byte limit "
            f"(largest entry: {go_quote(_truncate(largest_key, 64))})"
        )


def _truncate(s: str, n: int) -> str:
    b = s.encode("utf-8", "surrogatepass")
    if len(b) <= n:
        return s
    cut = n
    while cut > 0 and (b[cut] & 0xC0) == 0x80:
        cut -= 1
    return b[:cut].decode("utf-8", "surrogatepass") + f"\u2026 ({len(b)} bytes)"


def metadata_key(key: str) -> str:
    """The metadata key that carries a context key: ``region`` → ``tm-ctx-ojswo2lpny-bin``."""
    enc = base64.b32encode(key.encode("utf-8")).decode("ascii").rstrip("=").lower()
    return PREFIX + enc + SUFFIX


def _b64len(n: int) -> int:
    return 4 * ((n + 2) // 3)


def _entry_size(md_key: str, value_len: int) -> int:
    return len(md_key) + _b64len(value_len) + _ENTRY_OVERHEAD


def encode(context: Mapping[str, str], max_bytes: int = DEFAULT_MAX_BYTES) -> list[tuple[str, bytes]]:
    """The metadata entries that carry a context, checked as Go's codec checks them:
    keys non-empty, the encoded size within max_bytes (raises :class:`ContextError`)."""
    out: list[tuple[str, bytes]] = []
    size, largest, largest_size = 0, "", -1
    for k, v in context.items():
        if k == "":
            raise ContextError("invalid tool call context: empty key")
        mk = metadata_key(k)
        value = v.encode("utf-8")
        n = _entry_size(mk, len(value))
        size += n
        if n > largest_size or (n == largest_size and k < largest):
            largest, largest_size = k, n
        out.append((mk, value))
    if size > max_bytes:
        raise ContextTooLargeError(size, max_bytes, largest)
    return out


def _is_context_key(k: str) -> bool:
    return len(k) >= len(PREFIX) + len(SUFFIX) and k.startswith(PREFIX) and k.endswith(SUFFIX)


def _decode_key(mk: str) -> str:
    enc = mk[len(PREFIX) : len(mk) - len(SUFFIX)]
    q = go_quote
    if any(c not in _B32 for c in enc):
        raise ContextError(f"invalid tool call context: metadata key {q(mk)}: {q(enc)} is not lowercase base32")
    pad = "=" * (-len(enc) % 8)
    try:
        raw = base64.b32decode(enc.upper() + pad)
    except (binascii.Error, ValueError):
        raw = None
    if raw is None or base64.b32encode(raw).decode("ascii").rstrip("=").lower() != enc:
        raise ContextError(
            f"invalid tool call context: metadata key {q(mk)}: {q(enc)} is not canonical unpadded base32"
        )
    if not raw:
        raise ContextError(f"invalid tool call context: metadata key {q(mk)} carries an empty key")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ContextError(
            f"invalid tool call context: metadata key {q(mk)} carries key {q(raw)}, which is not valid UTF-8"
        ) from None


def decode(
    metadata: Iterable[tuple[str, str | bytes]], max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[str, str]:
    """The context carried by request metadata (as gRPC hands it over: ``-bin`` values
    already base64-decoded). Reads only ``tm-ctx-…-bin`` keys; raises
    :class:`ContextError` for a malformed key, a key with other than one value, a value
    that is not UTF-8, or a size over max_bytes. Keys starting with ``toolmesh.`` are
    toolmesh's own and dropped."""
    values: dict[str, list[bytes]] = {}
    for k, v in metadata:
        if _is_context_key(k):
            values.setdefault(k, []).append(v.encode("utf-8") if isinstance(v, str) else bytes(v))
    if not values:
        return {}
    keys = sorted(values)
    size, largest, largest_size = 0, "", -1
    for k in keys:
        n = len(k) + _ENTRY_OVERHEAD + sum(_b64len(len(v)) for v in values[k])
        size += n
        if n > largest_size:
            largest, largest_size = k, n
    if size > max_bytes:
        try:
            largest = _decode_key(largest)
        except ContextError:
            pass
        raise ContextTooLargeError(size, max_bytes, largest)
    out: dict[str, str] = {}
    for mk in keys:
        key = _decode_key(mk)
        vs = values[mk]
        if len(vs) != 1:
            raise ContextError(
                f"invalid tool call context: metadata key {go_quote(mk)} (context key {go_quote(key)}) "
                f"has {len(vs)} values, want 1"
            )
        try:
            value = vs[0].decode("utf-8")
        except UnicodeDecodeError:
            raise ContextError(f"invalid tool call context: value of key {go_quote(key)} is not valid UTF-8") from None
        out[key] = value
    return {k: v for k, v in out.items() if not k.startswith(RESERVED_PREFIX)}
