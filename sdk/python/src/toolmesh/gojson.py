"""Go's encodings that the contract depends on, reproduced exactly.

* :func:`decode` and :func:`decode_first` read JSON as Go's ``encoding/json`` does with
  ``UseNumber``: numbers keep the text they were written with (:class:`Number`), a
  duplicate key keeps its last value, and a lone UTF-16 surrogate escape becomes U+FFFD.
* :func:`encode` writes a decoded value as Go's ``json.Marshal`` does: object keys
  sorted by byte order, no whitespace, numbers as written, ``<``, ``>``, ``&``, U+2028
  and U+2029 escaped, control characters as ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t``
  or ``\\u00XX``.
* :func:`canonical_json` is the content hash's ``canonical`` (``internal/wire``).
* :func:`go_quote` is ``strconv.Quote``; :func:`go_duration` is
  ``time.Duration.String``; :func:`go_format_float` is ``strconv.FormatFloat`` with the
  shortest precision.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._goprint import PRINTABLE_RANGES

__all__ = [
    "JSONError",
    "Number",
    "canonical_json",
    "decode",
    "decode_first",
    "encode",
    "go_duration",
    "go_format_float",
    "go_quote",
    "is_print",
    "to_plain",
]


class JSONError(ValueError):
    """Text that is not the JSON expected."""


class Number(str):
    """A JSON number, kept as the text it was written with (Go's ``json.Number``)."""

    __slots__ = ()

    def __float__(self) -> float:
        return float(str(self))

    def __int__(self) -> int:
        return int(self.as_python())

    def as_python(self) -> int | float:
        """The number as an int when it is written as one, else as a float."""
        text = str(self)
        if "." not in text and "e" not in text and "E" not in text:
            return int(text)
        return float(text)


def _refuse_constant(name: str) -> Any:
    raise JSONError(f"invalid character {name[0]!r} looking for beginning of value")


_DECODER = json.JSONDecoder(
    parse_float=Number, parse_int=Number, parse_constant=_refuse_constant, strict=True
)
_WHITESPACE = " \t\n\r"


def _clean(s: str) -> str:
    """Replaces lone surrogates (from escapes such as ``\\ud800``) by U+FFFD, as Go does."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)


def _fix(v: Any) -> Any:
    if isinstance(v, Number):
        return v
    if isinstance(v, str):
        return _clean(v)
    if isinstance(v, list):
        return [_fix(x) for x in v]
    if isinstance(v, dict):
        return {_clean(k): _fix(x) for k, x in v.items()}
    return v


def _skip_space(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WHITESPACE:
        i += 1
    return i


def decode_first(text: str) -> Any:
    """Decodes the first JSON value of text (as a ``json.Decoder`` does) and ignores
    what follows it. Raises :class:`JSONError`."""
    try:
        value, _ = _DECODER.raw_decode(text, _skip_space(text, 0))
    except (ValueError, RecursionError) as e:
        raise JSONError(str(e)) from None
    return _fix(value)


def decode(text: str | bytes) -> Any:
    """Decodes text that holds exactly one JSON value (as ``json.Unmarshal`` does).
    Raises :class:`JSONError`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        value, end = _DECODER.raw_decode(text, _skip_space(text, 0))
    except (ValueError, RecursionError) as e:
        raise JSONError(str(e)) from None
    end = _skip_space(text, end)
    if end != len(text):
        raise JSONError(f"invalid character {text[end]!r} after top-level value")
    return _fix(value)


def to_plain(v: Any) -> Any:
    """A decoded value with its numbers as Python ints and floats."""
    if isinstance(v, Number):
        return v.as_python()
    if isinstance(v, list):
        return [to_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: to_plain(x) for k, x in v.items()}
    return v


_HEX = "0123456789abcdef"


def _escape_char(c: str, escape_html: bool) -> str:
    o = ord(c)
    if o < 0x80:
        if c == '"':
            return '\\"'
        if c == "\\":
            return "\\\\"
        if o >= 0x20 and not (escape_html and c in "<>&"):
            return c
        short = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
        if short is not None:
            return short
        return "\\u00" + _HEX[o >> 4] + _HEX[o & 0xF]
    if o in (0x2028, 0x2029):
        return f"\\u{o:04x}"
    if 0xD800 <= o <= 0xDFFF:
        return "\\ufffd"
    return c


def _json_string(s: str, escape_html: bool = True) -> str:
    if s.isascii() and s.isprintable() and not any(ch in s for ch in '"\\<>&'):
        return '"' + s + '"'
    return '"' + "".join(_escape_char(c, escape_html) for c in s) + '"'


def _shortest_digits(f: float) -> tuple[str, int]:
    """The shortest decimal digits of abs(f) and the exponent of the decimal point:
    abs(f) = 0.<digits> * 10**point."""
    r = repr(abs(f))
    mantissa, _, exp = r.partition("e")
    e = int(exp) if exp else 0
    whole, _, frac = mantissa.partition(".")
    if frac == "0":
        frac = ""
    digits = (whole + frac).lstrip("0")
    lead = len(whole + frac) - len((whole + frac).lstrip("0"))
    point = len(whole) + e - lead
    digits = digits.rstrip("0") or "0"
    if digits == "0":
        point = 1
    return digits, point


def _format_e(digits: str, point: int, neg: bool, min_exp_digits: int) -> str:
    exp = point - 1
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if exp < 0 else "+"
    return ("-" if neg else "") + mant + "e" + sign + str(abs(exp)).zfill(min_exp_digits)


def _format_f(digits: str, point: int, neg: bool) -> str:
    if point <= 0:
        s = "0." + "0" * (-point) + digits
    elif point >= len(digits):
        s = digits + "0" * (point - len(digits))
    else:
        s = digits[:point] + "." + digits[point:]
    return ("-" if neg else "") + s


def go_format_float(f: float, fmt: str = "g") -> str:
    """``strconv.FormatFloat(f, fmt, -1, 64)`` for fmt ``g``, ``e`` or ``f``."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    neg = math.copysign(1.0, f) < 0
    digits, point = _shortest_digits(f)
    if f == 0:
        digits, point = "0", 1
    if fmt == "e":
        return _format_e(digits, point, neg, 2)
    if fmt == "f":
        return _format_f(digits, point, neg)
    # The shortest %g uses %e when the exponent is below -4 or at least 6.
    exp = point - 1
    if exp < -4 or exp >= 6:
        return _format_e(digits, point, neg, 2)
    return _format_f(digits, point, neg)


def _json_float(f: float) -> str:
    """A float as Go's encoding/json writes it (ES6 style)."""
    if math.isnan(f) or math.isinf(f):
        raise JSONError(f"json: unsupported value: {go_format_float(f)}")
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        s = go_format_float(f, "e")
        # Go cleans e-07 up to e-7.
        n = len(s)
        if n >= 4 and s[n - 4] == "e" and s[n - 3] == "-" and s[n - 2] == "0":
            s = s[: n - 2] + s[n - 1 :]
        return s
    return go_format_float(f, "f")


def encode(value: Any, *, sort_keys: bool = True, escape_html: bool = True) -> str:
    """Encodes a value as Go's ``json.Marshal`` does (maps with sorted keys)."""
    parts: list[str] = []
    _encode(value, parts, sort_keys, escape_html, 0)
    return "".join(parts)


def _encode(v: Any, out: list[str], sort_keys: bool, escape_html: bool, depth: int) -> None:
    if depth > 10000:
        raise JSONError("json: value nests too deeply")
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, Number):
        out.append(str(v))
    elif isinstance(v, str):
        out.append(_json_string(v, escape_html))
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(_json_float(v))
    elif isinstance(v, Mapping):
        keys = list(v.keys())
        for k in keys:
            if not isinstance(k, str):
                raise JSONError(f"json: unsupported map key {k!r}")
        if sort_keys:
            keys.sort(key=_utf8)
        out.append("{")
        for i, k in enumerate(keys):
            if i:
                out.append(",")
            out.append(_json_string(k, escape_html))
            out.append(":")
            _encode(v[k], out, sort_keys, escape_html, depth + 1)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _encode(x, out, sort_keys, escape_html, depth + 1)
        out.append("]")
    else:
        raise JSONError(f"json: unsupported type {type(v).__name__}")


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def canonical_json(raw: str) -> str:
    """The canonical form of a JSON text, as the content hash takes it: its first value
    re-encoded by :func:`encode`; text that does not decode is kept as it is."""
    try:
        return encode(decode_first(raw))
    except JSONError:
        return raw


def is_print(r: int) -> bool:
    """Go's ``unicode.IsPrint`` (and ``strconv.IsPrint``)."""
    i = bisect.bisect_right(PRINTABLE_RANGES, r)
    # An odd position lies inside a [first, last] pair (or on its first); an even one
    # on a last or between pairs.
    if i % 2 == 1:
        return True
    return i > 0 and PRINTABLE_RANGES[i - 1] == r


_QUOTE_SHORT = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v"}


def go_quote(s: str | bytes) -> str:
    """``strconv.Quote``: a double-quoted Go string literal of s (its UTF-8 bytes when
    s is a str); bytes that are not UTF-8 become ``\\xNN``."""
    data = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    text = data.decode("utf-8", "surrogateescape")
    out = ['"']
    for c in text:
        r = ord(c)
        if 0xDC80 <= r <= 0xDCFF:  # a byte that is not UTF-8
            out.append("\\x" + _HEX[(r - 0xDC00) >> 4] + _HEX[(r - 0xDC00) & 0xF])
            continue
        if c == '"' or c == "\\":
            out.append("\\" + c)
            continue
        if is_print(r):
            out.append(c)
            continue
        short = _QUOTE_SHORT.get(r)
        if short is not None:
            out.append(short)
        elif r < 0x20 or r == 0x7F:
            out.append("\\x" + _HEX[r >> 4] + _HEX[r & 0xF])
        elif 0xD800 <= r <= 0xDFFF:
            out.append("\\ufffd")
        elif r < 0x10000:
            out.append(f"\\u{r:04x}")
        else:
            out.append(f"\\U{r:08x}")
    out.append('"')
    return "".join(out)


def _frac(v: int, prec: int) -> str:
    digits = str(v).rjust(prec, "0").rstrip("0")
    return "." + digits if digits else ""


def go_duration(ns: int) -> str:
    """``time.Duration(ns).String()``: "0s", "1.5s", "1m30s", "2h0m0s", "100ms", "1.5µs"."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = -ns if neg else ns
    if u < 1_000_000_000:
        if u < 1_000:
            s = f"{u}ns"
        elif u < 1_000_000:
            s = f"{u // 1_000}{_frac(u % 1_000, 3)}\u00b5s"
        else:
            s = f"{u // 1_000_000}{_frac(u % 1_000_000, 6)}ms"
    else:
        secs, rest = divmod(u, 1_000_000_000)
        s = f"{secs % 60}{_frac(rest, 9)}s"
        minutes = secs // 60
        if minutes > 0:
            s = f"{minutes % 60}m" + s
            hours = minutes // 60
            if hours > 0:
                s = f"{hours}h" + s
    return "-" + s if neg else s


def join_quoted(items: Sequence[str]) -> str:
    """Go's ``strconv.Quote`` of each item, joined by ", "."""
    return ", ".join(go_quote(x) for x in items)
