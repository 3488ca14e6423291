"""Input schemas from type hints, and the validation of a call's arguments.

:func:`function_schema` describes a function's parameters as the JSON Schema of an
object: one property per parameter, in declaration order, ``required`` listing those
without a default (an ``Optional`` one is never required), and ``"additionalProperties":
false``. Types map as follows:

=====================================  ==========================================
``str``, ``int``, ``float``, ``bool``   ``string``, ``integer``, ``number``, ``boolean``
``list[T]``, ``Sequence[T]``, ``set``   ``array`` with ``items``
``tuple[A, B]`` / ``tuple[T, ...]``     ``array`` with ``prefixItems`` / ``items``
``dict[str, T]``, ``Mapping[str, T]``   ``object`` with ``additionalProperties``
``Literal["a", "b"]``, an ``Enum``      ``enum`` (with the values' type)
``Optional[T]``                         T or ``null``, not required
``A | B``                               ``anyOf``
a dataclass, a ``TypedDict``            a nested object schema of its fields
a pydantic model (v2 or v1)             the model's own schema (``$defs`` hoisted)
``Any``, ``object``                     any value
=====================================  ==========================================

``Annotated[T, "text"]`` (or metadata with a ``description`` attribute) describes a
property; so does the function docstring's ``Args:`` section.

:class:`Validator` checks arguments against a schema as the orchestrator's does for the
keywords in common use (``type``, ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``patternProperties``, ``items``, ``prefixItems``, the numeric,
string, array and object bounds, ``allOf``/``anyOf``/``oneOf``/``not``,
``if``/``then``/``else``, local ``$ref``), with the messages the Go SDK writes:
``property "a": expected number, got string``.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from .gojson import JSONError, Number, decode, encode, go_format_float, go_quote, join_quoted, to_plain

__all__ = [
    "ArgumentsError",
    "Parameter",
    "SchemaError",
    "Validator",
    "convert",
    "function_schema",
    "object_schema",
    "schema_of",
    "type_name",
]


class SchemaError(TypeError):
    """A type that has no JSON Schema here, or a schema that is not usable."""


class ArgumentsError(ValueError):
    """Arguments that do not satisfy a schema; the message names the property."""


@dataclasses.dataclass(frozen=True)
class Parameter:
    """A property of a tool's input, from a function parameter."""

    name: str
    annotation: Any
    required: bool
    default: Any = inspect.Parameter.empty
    description: str = ""
    positional_only: bool = False


# ---------------------------------------------------------------------------------
# Schemas from types


class _Builder:
    """Builds schemas, collecting the definitions pydantic models bring."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self._active: set[int] = set()

    def schema(self, tp: Any, description: str = "") -> dict[str, Any]:
        s = self._schema(tp)
        if description:
            s = _with_description(s, description)
        return s

    def _schema(self, tp: Any) -> dict[str, Any]:
        tp, desc = _unannotate(tp)
        s = self._bare(tp)
        return _with_description(s, desc) if desc else s

    def _bare(self, tp: Any) -> dict[str, Any]:  # noqa: C901 (one case per kind of type)
        if tp is Any or tp is object or tp is inspect.Parameter.empty:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Literal:
            return _literal_schema(list(args))
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _literal_schema([m.value for m in tp])
        if origin in (list, set, frozenset) or origin in _SEQUENCES or tp in (list, set, frozenset) or tp in _SEQUENCES:
            s: dict[str, Any] = {"type": "array"}
            if args:
                s["items"] = self._schema(args[0])
            if origin in (set, frozenset) or tp in (set, frozenset):
                s["uniqueItems"] = True
            return s
        if origin is tuple or tp is tuple:
            if not args or (len(args) == 2 and args[1] is Ellipsis):
                s = {"type": "array"}
                if args:
                    s["items"] = self._schema(args[0])
                return s
            if args == ((),):
                return {"type": "array", "maxItems": 0}
            return {
                "type": "array",
                "prefixItems": [self._schema(a) for a in args],
                "items": False,
                "minItems": len(args),
                "maxItems": len(args),
            }
        if origin in (dict,) or origin in _MAPPINGS or tp is dict or tp in _MAPPINGS:
            s = {"type": "object"}
            if args:
                if args[0] is not str and typing.get_origin(args[0]) is not typing.Literal:
                    raise SchemaError(f"{_name(tp)}: only str keys can be JSON object keys")
                if args[1] is not Any:
                    s["additionalProperties"] = self._schema(args[1])
            return s
        if _is_pydantic(tp):
            return self._pydantic(tp)
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self._guard(tp, lambda: self._dataclass(tp))
        if _is_typeddict(tp):
            return self._guard(tp, lambda: self._typeddict(tp))
        raise SchemaError(f"type {_name(tp)} has no JSON Schema here; use str, int, float, bool, lists, dicts, "
                          "Literal, Enum, Optional, a dataclass, a TypedDict or a pydantic model")

    def _guard(self, tp: type, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if id(tp) in self._active:
            raise SchemaError(f"type {_name(tp)} refers to itself; recursive types need a pydantic model")
        self._active.add(id(tp))
        try:
            return build()
        finally:
            self._active.discard(id(tp))

    def _union(self, args: tuple[Any, ...]) -> dict[str, Any]:
        rest = [a for a in args if a is not type(None) and a is not None]
        nullable = len(rest) < len(args)
        if len(rest) == 1:
            s = self._schema(rest[0])
        else:
            s = {"anyOf": [self._schema(a) for a in rest]}
        if not nullable:
            return s
        return _nullable(s)

    def _dataclass(self, tp: type) -> dict[str, Any]:
        hints = typing.get_type_hints(tp, include_extras=True)
        params = []
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            ann = hints.get(f.name, Any)
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            desc = str(f.metadata.get("description", "")) if f.metadata else ""
            params.append(Parameter(f.name, ann, not has_default and not _is_optional(ann), description=desc))
        return self.object(params)

    def _typeddict(self, tp: type) -> dict[str, Any]:
        hints = typing.get_type_hints(tp, include_extras=True)
        required_keys = getattr(tp, "__required_keys__", frozenset(hints))
        params = []
        for name, ann in hints.items():
            bare, _ = _unannotate(ann)
            # NotRequired/Required wrap the type in 3.11.
            origin = typing.get_origin(bare)
            if origin is typing.NotRequired or origin is typing.Required:
                ann = typing.get_args(bare)[0]
            params.append(Parameter(name, ann, name in required_keys and not _is_optional(ann)))
        return self.object(params)

    def _pydantic(self, tp: Any) -> dict[str, Any]:
        if hasattr(tp, "model_json_schema"):
            s = dict(tp.model_json_schema())
            defs_key = "$defs"
        else:
            s = dict(tp.schema())
            defs_key = "definitions"
        for key in ("$defs", "definitions"):
            inner = s.pop(key, None)
            if isinstance(inner, dict):
                for name, d in inner.items():
                    self.defs[name] = d
        if defs_key == "definitions":
            s = _rewrite_refs(s, "#/definitions/", "#/$defs/")
            self.defs = {k: _rewrite_refs(v, "#/definitions/", "#/$defs/") for k, v in self.defs.items()}
        return s

    def object(self, params: Sequence[Parameter]) -> dict[str, Any]:
        props: dict[str, Any] = {}
        required = []
        for p in params:
            props[p.name] = self.schema(p.annotation, p.description)
            if p.required:
                required.append(p.name)
        s: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            s["required"] = required
        s["additionalProperties"] = False
        return s


_SEQUENCES = (Sequence, typing.Sequence, Iterable, typing.Iterable, typing.List, typing.Set,
              typing.FrozenSet, typing.AbstractSet)
_MAPPINGS = (Mapping, typing.Mapping, typing.Dict, typing.MutableMapping)


def _name(tp: Any) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def _with_description(s: dict[str, Any], desc: str) -> dict[str, Any]:
    if not desc:
        return s
    out: dict[str, Any] = {}
    if "type" in s:
        out["type"] = s["type"]
    out["description"] = desc
    for k, v in s.items():
        if k not in out:
            out[k] = v
    return out


def _nullable(s: dict[str, Any]) -> dict[str, Any]:
    t = s.get("type")
    if isinstance(t, str) and "anyOf" not in s and "$ref" not in s:
        out = dict(s)
        out["type"] = [t, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    if not s:
        return s
    return {"anyOf": [s, {"type": "null"}]}


def _literal_schema(values: list[Any]) -> dict[str, Any]:
    values = [v.value if isinstance(v, enum.Enum) else v for v in values]
    kinds = {type_name_of_python(v) for v in values}
    s: dict[str, Any] = {}
    if len(kinds) == 1:
        s["type"] = kinds.pop()
    elif kinds <= {"integer", "number"}:
        s["type"] = "number"
    s["enum"] = values
    return s


def type_name_of_python(v: Any) -> str:
    """The JSON type of a Python value, as a schema names it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise SchemaError(f"value {v!r} has no JSON type")


def _unannotate(tp: Any) -> tuple[Any, str]:
    """The type under Annotated, and the description its metadata gives."""
    desc = ""
    while typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        tp = args[0]
        for m in args[1:]:
            if isinstance(m, str) and not desc:
                desc = m
            elif isinstance(getattr(m, "description", None), str) and not desc:
                desc = m.description
            elif isinstance(getattr(m, "documentation", None), str) and not desc:
                desc = m.documentation
    return tp, desc


def _is_optional(tp: Any) -> bool:
    tp, _ = _unannotate(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(a is type(None) for a in typing.get_args(tp))
    return tp is None or tp is type(None) or tp is Any


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def _is_pydantic(tp: Any) -> bool:
    """A pydantic model class, recognised without importing pydantic."""
    if not isinstance(tp, type):
        return False
    return (hasattr(tp, "model_json_schema") and hasattr(tp, "model_validate")) or (
        hasattr(tp, "__fields__") and hasattr(tp, "parse_obj") and hasattr(tp, "schema")
    )


def _rewrite_refs(v: Any, old: str, new: str) -> Any:
    if isinstance(v, dict):
        return {k: (x.replace(old, new, 1) if k == "$ref" and isinstance(x, str) else _rewrite_refs(x, old, new))
                for k, x in v.items()}
    if isinstance(v, list):
        return [_rewrite_refs(x, old, new) for x in v]
    return v


def schema_of(tp: Any, description: str = "") -> dict[str, Any]:
    """The JSON Schema of values of a type (see the module's table)."""
    b = _Builder()
    s = b.schema(tp, description)
    if b.defs:
        s = dict(s)
        s["$defs"] = b.defs
    return s


def object_schema(params: Sequence[Parameter]) -> dict[str, Any]:
    """The input schema of an object with these parameters as properties."""
    b = _Builder()
    s = b.object(params)
    if b.defs:
        s["$defs"] = b.defs
    return s


_ARG_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$")
_OTHER_SECTION = re.compile(r"^\s*(Returns?|Yields?|Raises?|Examples?|Notes?|See Also|Attributes)\s*:\s*$")
_ARG_LINE = re.compile(r"^(\s*)(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A docstring's description (the text before its sections) and the descriptions
    of its ``Args:`` section (Google style)."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    i = 0
    while i < len(lines) and not _ARG_SECTION.match(lines[i]) and not _OTHER_SECTION.match(lines[i]):
        desc.append(lines[i])
        i += 1
    current = ""
    indent = -1
    in_args = False
    for line in lines[i:]:
        if _ARG_SECTION.match(line):
            in_args, current, indent = True, "", -1
            continue
        if _OTHER_SECTION.match(line):
            in_args = False
            continue
        if not in_args or not line.strip():
            continue
        m = _ARG_LINE.match(line)
        lead = len(line) - len(line.lstrip())
        if m and (indent < 0 or lead <= indent):
            indent = lead
            current = m.group(2).lstrip("*")
            args[current] = m.group(4).strip()
        elif current:
            args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(desc).strip(), args


def function_schema(
    fn: Callable[..., Any], skip: Callable[[inspect.Parameter, Any], bool] = lambda p, a: False
) -> tuple[dict[str, Any], list[Parameter]]:
    """The input schema of a function's parameters, and the parameters it describes.
    skip(parameter, annotation) leaves a parameter out (the call's context)."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:  # noqa: BLE001 (a forward reference that does not resolve)
        raise SchemaError(f"the type hints of {getattr(fn, '__qualname__', fn)!r} cannot be resolved: {e}") from e
    _, docs = parse_docstring(inspect.getdoc(fn))
    params: list[Parameter] = []
    for p in sig.parameters.values():
        ann = hints.get(p.name, Any if p.annotation is inspect.Parameter.empty else p.annotation)
        if skip(p, ann):
            continue
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise SchemaError(f"parameter *{p.name} cannot be a property of a tool's input; name every parameter")
        required = p.default is inspect.Parameter.empty and not _is_optional(ann)
        params.append(Parameter(p.name, ann, required, p.default, docs.get(p.name, ""),
                                p.kind is inspect.Parameter.POSITIONAL_ONLY))
    return object_schema(params), params


# ---------------------------------------------------------------------------------
# Converting validated arguments to the annotated types


def convert(value: Any, tp: Any) -> Any:  # noqa: C901 (one case per kind of type)
    """A decoded JSON value (valid for tp's schema) as a value of tp."""
    tp, _ = _unannotate(tp)
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        return to_plain(value)
    if value is None:
        return None
    if tp is str or tp is bool:
        return value
    if tp is int:
        return _to_int(value)
    if tp is float:
        return float(value)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        for a in args:
            av = a.value if isinstance(a, enum.Enum) else a
            if _json_equal(av, value):
                return a
        return to_plain(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for m in tp:
            if _json_equal(m.value, value):
                return m
        return tp(to_plain(value))
    if origin is typing.Union or origin is types.UnionType:
        for a in args:
            if a is type(None):
                continue
            if Validator(schema_of(a)).check(value) is None:
                return convert(value, a)
        return to_plain(value)
    if origin in (list, set, frozenset) or origin in _SEQUENCES or tp in (list, set, frozenset) or tp in _SEQUENCES:
        item = args[0] if args else Any
        items = [convert(x, item) for x in value]
        if origin in (set, frozenset) or tp in (set, frozenset):
            return (frozenset if frozenset in (origin, tp) else set)(items)
        return items
    if origin is tuple or tp is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            item = args[0] if args else Any
            return tuple(convert(x, item) for x in value)
        return tuple(convert(x, a) for x, a in zip(value, args))
    if origin is dict or origin in _MAPPINGS or tp is dict or tp in _MAPPINGS:
        vt = args[1] if args else Any
        return {k: convert(x, vt) for k, x in value.items()}
    if _is_pydantic(tp):
        plain = to_plain(value)
        model: Any = tp
        return model.model_validate(plain) if hasattr(model, "model_validate") else model.parse_obj(plain)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp, include_extras=True)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.name in value:
                kwargs[f.name] = convert(value[f.name], hints.get(f.name, Any))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                kwargs[f.name] = None
        return tp(**kwargs)
    if _is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return {k: convert(x, hints.get(k, Any)) for k, x in value.items()}
    return to_plain(value)


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    try:
        d = Decimal(str(v))
        return int(d)
    except (InvalidOperation, ValueError, OverflowError):
        return int(float(v))


# ---------------------------------------------------------------------------------
# Validation


def type_name(v: Any) -> str:
    """The JSON type of a decoded value, as the Go SDK names it in messages (a number
    without a fraction is an "integer")."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (Number, int, float)):
        try:
            f = float(v)
        except (ValueError, OverflowError):
            return "number"
        if math.isfinite(f) and f.is_integer():
            return "integer"
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "unknown"


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (Number, int, float))


def _dec(v: Any) -> Decimal:
    if isinstance(v, float):
        return Decimal(repr(v))
    return Decimal(str(v))


def _json_equal(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        try:
            return _dec(a) == _dec(b)
        except InvalidOperation:
            return float(a) == float(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) and isinstance(b, str):
        return str(a) == str(b) and not (_is_number(a) or _is_number(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return a is None and b is None


def _short(v: Any) -> str:
    try:
        s = encode(v, sort_keys=False, escape_html=False)
    except JSONError:
        s = repr(v)
    return s if len(s) <= 80 else s[:80] + "\u2026"


def _join_json(vs: Sequence[Any]) -> str:
    return ", ".join(_short(v) for v in vs)


def _count(x: Any) -> int:
    """A count keyword's value (minLength, maxItems, ...) as an int."""
    return int(float(x))


def _at(path: str, msg: str) -> str:
    return msg if not path else f"property {go_quote(path)}: {msg}"


def _child(path: str, key: str) -> str:
    return key if not path else path + "." + key


def _plural(n: int, noun: str) -> str:
    return f"1 {noun}" if n == 1 else f"{n} {noun}s"


def _fmt(x: Any) -> str:
    if isinstance(x, Number):
        return go_format_float(float(x))
    return go_format_float(float(x))


class Validator:
    """Validates values against a JSON Schema (a dict, or its JSON text)."""

    def __init__(self, schema: Mapping[str, Any] | bool | str) -> None:
        if isinstance(schema, str):
            try:
                schema = decode(schema)
            except JSONError as e:
                raise SchemaError(f"the schema is not JSON: {e}") from None
        if not isinstance(schema, (Mapping, bool)):
            raise SchemaError("a schema is a JSON object or a boolean")
        self.root: Any = schema
        self._patterns: dict[str, re.Pattern[str] | None] = {}

    def validate_arguments(self, arguments_json: str) -> dict[str, Any]:
        """The decoded arguments of a call (an object), or :class:`ArgumentsError`
        naming the problem; blank arguments are ``{}``."""
        if not arguments_json.strip():
            arguments_json = "{}"
        try:
            value = decode(arguments_json)
        except JSONError as e:
            raise ArgumentsError(str(e)) from None
        if not isinstance(value, dict):
            raise ArgumentsError(f"arguments must be a JSON object, got {type_name(value)}")
        msg = self.check(value)
        if msg is not None:
            raise ArgumentsError(msg if len(msg) <= 2000 else msg[:2000] + "\u2026")
        return value

    def check(self, value: Any) -> str | None:
        """The first violation of the schema by value, or None when it is valid."""
        try:
            return self._check(self.root, value, "", 0)
        except RecursionError:
            return "the arguments nest too deeply"

    def _pattern(self, p: str) -> re.Pattern[str] | None:
        if p not in self._patterns:
            try:
                self._patterns[p] = re.compile(p)
            except re.error:
                self._patterns[p] = None
        return self._patterns[p]

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        pointer = ref[1:]
        if not pointer:
            return node
        for raw in pointer.lstrip("/").split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def _check(self, s: Any, v: Any, path: str, depth: int) -> str | None:  # noqa: C901
        if depth > 64:
            return None
        if s is True or (isinstance(s, Mapping) and not s):
            return None
        if s is False:
            return _at(path, "is not allowed")
        if not isinstance(s, Mapping):
            return None
        ref = s.get("$ref")
        if isinstance(ref, str):
            target = self._resolve(ref)
            if target is not None:
                msg = self._check(target, v, path, depth + 1)
                if msg:
                    return msg
        t = s.get("type")
        if t is not None:
            want = [t] if isinstance(t, str) else list(t)
            got = type_name(v)
            if got not in want and not (got == "integer" and "number" in want):
                return _at(path, f"expected {' or '.join(want)}, got {got}")
        if "enum" in s and isinstance(s["enum"], list):
            if not any(_json_equal(e, v) for e in s["enum"]):
                return _at(path, f"{_short(v)} is not one of {_join_json(s['enum'])}")
        if "const" in s and not _json_equal(s["const"], v):
            return _at(path, f"must be {_short(s['const'])}, got {_short(v)}")
        if _is_number(v):
            msg = self._number(s, v)
            if msg:
                return _at(path, msg)
        elif isinstance(v, str):
            msg = self._string(s, v)
            if msg:
                return _at(path, msg)
        elif isinstance(v, list):
            msg = self._array(s, v, path, depth)
            if msg:
                return msg
        elif isinstance(v, dict):
            msg = self._object(s, v, path, depth)
            if msg:
                return msg
        for sub in s.get("allOf") or ():
            msg = self._check(sub, v, path, depth + 1)
            if msg:
                return msg
        alts = s.get("anyOf")
        if isinstance(alts, list) and alts:
            msgs = [self._check(a, v, path, depth + 1) for a in alts]
            if all(msgs):
                return "no alternative matches: " + "; or ".join(m for m in msgs if m)
        alts = s.get("oneOf")
        if isinstance(alts, list) and alts:
            msgs = [self._check(a, v, path, depth + 1) for a in alts]
            ok = sum(1 for m in msgs if m is None)
            if ok == 0:
                return "no alternative matches: " + "; or ".join(m for m in msgs if m)
            if ok > 1:
                return _at(path, f"matches {ok} alternatives of oneOf; it must match exactly one")
        if "not" in s and self._check(s["not"], v, path, depth + 1) is None:
            return _at(path, "matches a schema it must not match")
        if "if" in s:
            branch = "then" if self._check(s["if"], v, path, depth + 1) is None else "else"
            if branch in s:
                msg = self._check(s[branch], v, path, depth + 1)
                if msg:
                    return msg
        return None

    def _number(self, s: Mapping[str, Any], v: Any) -> str | None:
        try:
            n = _dec(v)
            text = str(v) if isinstance(v, (Number, int)) else go_format_float(float(v))

            def num(key: str) -> Decimal | None:
                x = s.get(key)
                return _dec(x) if _is_number(x) else None

            lo, hi, xlo, xhi, mult = (num(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                        "multipleOf"))
            if lo is not None and n < lo:
                return f"{text} is less than the minimum {_fmt(s['minimum'])}"
            if hi is not None and n > hi:
                return f"{text} is greater than the maximum {_fmt(s['maximum'])}"
            if xlo is not None and n <= xlo:
                return f"{text} must be greater than {_fmt(s['exclusiveMinimum'])}"
            if xhi is not None and n >= xhi:
                return f"{text} must be less than {_fmt(s['exclusiveMaximum'])}"
            if mult is not None and mult > 0 and n % mult != 0:
                return f"{text} is not a multiple of {_fmt(s['multipleOf'])}"
        except InvalidOperation:
            return None
        return None

    def _string(self, s: Mapping[str, Any], v: str) -> str | None:
        n = len(v)
        lo, hi = s.get("minLength"), s.get("maxLength")
        if _is_number(lo) and n < _count(lo):
            return f"must be at least {_plural(_count(lo), 'character')} long, got {n}"
        if _is_number(hi) and n > _count(hi):
            return f"must be at most {_plural(_count(hi), 'character')} long, got {n}"
        p = s.get("pattern")
        if isinstance(p, str):
            rx = self._pattern(p)
            if rx is not None and not rx.search(v):
                return f"{_short(v)} does not match the pattern {encode(p, escape_html=False)}"
        return None

    def _array(self, s: Mapping[str, Any], v: list[Any], path: str, depth: int) -> str | None:
        lo, hi = s.get("minItems"), s.get("maxItems")
        if _is_number(lo) and len(v) < _count(lo):
            return _at(path, f"must have at least {_plural(_count(lo), 'item')}, got {len(v)}")
        if _is_number(hi) and len(v) > _count(hi):
            return _at(path, f"must have at most {_plural(_count(hi), 'item')}, got {len(v)}")
        if s.get("uniqueItems") is True:
            for i in range(len(v)):
                for j in range(i):
                    if _json_equal(v[i], v[j]):
                        return _at(path, f"items {j} and {i} are equal; items must be unique")
        prefix = s.get("prefixItems")
        items = s.get("items")
        start = 0
        if isinstance(prefix, list):
            for i, (sub, x) in enumerate(zip(prefix, v)):
                msg = self._check(sub, x, f"{path}[{i}]", depth + 1)
                if msg:
                    return msg
            start = len(prefix)
        elif isinstance(items, list):  # draft-07 tuples
            for i, (sub, x) in enumerate(zip(items, v)):
                msg = self._check(sub, x, f"{path}[{i}]", depth + 1)
                if msg:
                    return msg
            start, items = len(items), s.get("additionalItems")
        if items is not None and not isinstance(items, list):
            for i in range(start, len(v)):
                msg = self._check(items, v[i], f"{path}[{i}]", depth + 1)
                if msg:
                    return msg
        contains = s.get("contains")
        if contains is not None:
            n = sum(1 for x in v if self._check(contains, x, path, depth + 1) is None)
            need = s.get("minContains", 1)
            if _is_number(need) and n < _count(need):
                return _at(path, f"must contain at least {_plural(_count(need), 'item')} that match "
                                 f"the contains schema, has {n}")
        return None

    def _object(self, s: Mapping[str, Any], v: dict[str, Any], path: str, depth: int) -> str | None:  # noqa: C901
        required = s.get("required")
        if isinstance(required, list):
            missing = [_child(path, r) for r in required if isinstance(r, str) and r not in v]
            if len(missing) == 1:
                return f"missing required property {go_quote(missing[0])}"
            if missing:
                return "missing required properties " + join_quoted(missing)
        lo, hi = s.get("minProperties"), s.get("maxProperties")
        if _is_number(lo) and len(v) < _count(lo):
            return _at(path, f"must have at least {_plural(_count(lo), 'property')}, got {len(v)}")
        if _is_number(hi) and len(v) > _count(hi):
            return _at(path, f"must have at most {_plural(_count(hi), 'property')}, got {len(v)}")
        props = s.get("properties") if isinstance(s.get("properties"), Mapping) else {}
        assert isinstance(props, Mapping)
        patterns = s.get("patternProperties") if isinstance(s.get("patternProperties"), Mapping) else {}
        assert isinstance(patterns, Mapping)
        additional = s.get("additionalProperties")
        dependent = s.get("dependentRequired")
        if isinstance(dependent, Mapping):
            for k, needs in dependent.items():
                if k in v and isinstance(needs, list):
                    for n in needs:
                        if n not in v:
                            return _at(_child(path, k), f"needs property {go_quote(_child(path, str(n)))} too")
        names = s.get("propertyNames")
        if names is not None:
            for k in v:
                msg = self._check(names, k, _child(path, k), depth + 1)
                if msg:
                    return _at(_child(path, k), "is not an allowed property name")
        extra = [k for k in v if k not in props and not any(
            (rx := self._pattern(p)) is not None and rx.search(k) for p in patterns)]
        if additional is False or (isinstance(additional, Mapping) and additional.get("not") == {} and len(additional) == 1):
            if extra:
                paths = [_child(path, k) for k in extra]
                msg = ("unexpected property " if len(paths) == 1 else "unexpected properties ") + join_quoted(paths)
                if 0 < len(props) <= 20:
                    msg += "; allowed: " + join_quoted(sorted(props, key=lambda k: k.encode("utf-8", "surrogatepass")))
                return msg
        for k, x in v.items():
            p = _child(path, k)
            if k in props:
                msg = self._check(props[k], x, p, depth + 1)
                if msg:
                    return msg
            for pat, sub in patterns.items():
                rx = self._pattern(pat)
                if rx is not None and rx.search(k):
                    msg = self._check(sub, x, p, depth + 1)
                    if msg:
                        return msg
            if k in extra and isinstance(additional, (Mapping, bool)) and additional is not False:
                msg = self._check(additional, x, p, depth + 1)
                if msg:
                    return msg
        return None


def check_object_schema(schema: Mapping[str, Any] | str) -> str:
    """The JSON text of a tool's input schema, checked as the orchestrator requires:
    one JSON object with ``"type": "object"``. Raises :class:`SchemaError`."""
    text = schema if isinstance(schema, str) else encode(schema, sort_keys=False, escape_html=False)
    try:
        value = decode(text)
    except JSONError as e:
        raise SchemaError(f"the input schema is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise SchemaError(f"the input schema must be a JSON object, got {type_name(value)}")
    if value.get("type") != "object":
        raise SchemaError('the input schema must have "type": "object"')
    if value.get("$schema", "") not in _SUPPORTED_DRAFTS:
        raise SchemaError(f"unsupported $schema {go_quote(str(value.get('$schema')))} "
                          "(supported: draft 2020-12 and draft-07)")
    return text


# The $schema values the orchestrator accepts ("" : absent, the latest draft).
_SUPPORTED_DRAFTS = (
    "",
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft-07/schema#",
)
