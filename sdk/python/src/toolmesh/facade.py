"""Facades: progressive tools. The model first sees only the facade; calling it makes its
children available in its place.

* :meth:`Facade.plain` makes all its children available (the orchestrator unfolds it
  without calling the worker);
* :meth:`Facade.by_category` makes those of the category its one parameter names
  available (also unfolded by the orchestrator);
* :meth:`Facade.selectable` runs a selector on the worker, which chooses among the
  children from the call's arguments and may bind them to a state: every later call of
  a chosen tool carries that state, to any replica.

Children are tools of the group (or nested facades); every leaf is registered as a tool
of the group. Selectors may not create tools here (the Go SDK's templates): a selector
chooses among the registered children.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Union

from . import pb
from .gojson import encode, go_quote
from .schema import Validator, check_object_schema, function_schema
from .tool import TOOL_NAME_RE, Context, Handler, Tool, _is_context, _to_json, handler_from_function

__all__ = ["Facade", "FacadeKind", "Selection", "unfold_message"]

MAX_FACADE_CATEGORIES = 256
MAX_CATEGORY_BYTES = 64
DEFAULT_CATEGORY_PARAMETER = "category"
EMPTY_SCHEMA = '{"type":"object","properties":{}}'


class FacadeKind(enum.Enum):
    """How a facade chooses the children a call makes available."""

    PLAIN = "plain"
    BY_CATEGORY = "by-category"
    SELECTABLE = "selectable"


Child = Union[Tool, "Facade"]


@dataclasses.dataclass
class Selection:
    """What a selectable facade's selector chose: tools of the group (or their names),
    and the state they are bound to (bytes, text, or a value encoded as JSON; None
    leaves the call's state as the selector left it)."""

    tools: Sequence[Child | str]
    state: bytes | str | Any | None = None


def unfold_message(selected: Sequence[str], usage_notes: str = "") -> str:
    """The text a facade's call answers with: the tools it made available, then the
    usage notes."""
    s = ("Tools now available: " + ", ".join(selected)
         + ". You MUST call one of these tools to complete the user's request. Do NOT respond with text \u2014 call a tool.")
    if usage_notes.strip():
        s += "\n\n" + usage_notes
    return s


Selector = Callable[..., Union[Awaitable[Any], Any]]


class Facade:
    """A facade over tools of a group. Build one with :meth:`plain`,
    :meth:`by_category` or :meth:`selectable`."""

    def __init__(
        self,
        name: str,
        description: str,
        kind: FacadeKind,
        children: Sequence[Child],
        *,
        input_schema: Mapping[str, Any] | str = EMPTY_SCHEMA,
        categories: Sequence[tuple[str, Sequence[Child]]] = (),
        category_parameter: str = "",
        selector: Handler | None = None,
        exclusive: bool = False,
        usage_notes: str = "",
        no_guide_tool: bool = False,
        no_context_tool: bool = False,
    ) -> None:
        if not TOOL_NAME_RE.match(name):
            raise ValueError(f"facade name {go_quote(name)} must be 1 to 64 of [A-Za-z0-9_-]")
        self.name = name
        self.description = description
        self.kind = kind
        self.children: list[Child] = _unique(children)
        if not self.children:
            raise ValueError(f"facade {name} has no children")
        self.input_schema_json = check_object_schema(input_schema)
        self.validator = Validator(self.input_schema_json)
        self.categories = [(c, list(ts)) for c, ts in categories]
        self.category_parameter = category_parameter
        self.selector = selector
        self.exclusive = exclusive
        self.usage_notes = usage_notes
        self.no_guide_tool = no_guide_tool
        self.no_context_tool = no_context_tool

    def __repr__(self) -> str:
        return f"<Facade {self.name} ({self.kind.value})>"

    @classmethod
    def plain(
        cls,
        name: str,
        description: str,
        children: Sequence[Child],
        *,
        exclusive: bool = False,
        usage_notes: str = "",
        no_guide_tool: bool = False,
        no_context_tool: bool = False,
    ) -> Facade:
        """A facade that makes all its children available."""
        return cls(name, description, FacadeKind.PLAIN, children, exclusive=exclusive, usage_notes=usage_notes,
                   no_guide_tool=no_guide_tool, no_context_tool=no_context_tool)

    @classmethod
    def by_category(
        cls,
        name: str,
        description: str,
        categories: Mapping[str, Sequence[Child]] | Sequence[tuple[str, Sequence[Child]]],
        *,
        category_parameter: str = DEFAULT_CATEGORY_PARAMETER,
        exclusive: bool = False,
        usage_notes: str = "",
        no_guide_tool: bool = False,
        no_context_tool: bool = False,
    ) -> Facade:
        """A facade whose one required string parameter (``category`` unless
        category_parameter says otherwise) picks one of the categories, in order: a call
        makes the tools of that category available (all of them for an unknown one)."""
        cats = list(categories.items()) if isinstance(categories, Mapping) else list(categories)
        if len(cats) > MAX_FACADE_CATEGORIES:
            raise ValueError(f"facade {name} has {len(cats)} categories; the limit is {MAX_FACADE_CATEGORIES}")
        seen = set()
        for c, _ in cats:
            if not c.strip() or len(c.encode("utf-8")) > MAX_CATEGORY_BYTES or not c.isprintable():
                raise ValueError(f"facade {name}: category {c!r} must be 1 to 64 bytes of printable text")
            if c in seen:
                raise ValueError(f"facade {name}: category {c!r} is declared twice")
            seen.add(c)
        if not TOOL_NAME_RE.match(category_parameter):
            raise ValueError(f"facade {name}: category_parameter must be 1 to 64 of [A-Za-z0-9_-]")
        names = [c for c, _ in cats]
        # As the Go SDK renders it (schema.Params with one enum parameter).
        schema = ('{"type":"object","properties":{' + encode(category_parameter, escape_html=False)
                  + ':{"type":"string","description":'
                  + encode("Category to access. Available: " + ", ".join(names), escape_html=False)
                  + ',"enum":[' + ",".join(encode(n, escape_html=False) for n in names) + "]}},"
                  + '"required":[' + encode(category_parameter, escape_html=False) + "]}")
        children: list[Child] = [t for _, ts in cats for t in ts]
        return cls(name, description, FacadeKind.BY_CATEGORY, children, input_schema=schema, categories=cats,
                   category_parameter=category_parameter, exclusive=exclusive, usage_notes=usage_notes,
                   no_guide_tool=no_guide_tool, no_context_tool=no_context_tool)

    @classmethod
    def selectable(
        cls,
        name: str,
        description: str,
        children: Sequence[Child],
        selector: Selector,
        *,
        input_schema: Mapping[str, Any] | str | None = None,
        exclusive: bool = False,
        usage_notes: str = "",
        no_guide_tool: bool = False,
        no_context_tool: bool = False,
    ) -> Facade:
        """A facade whose selector chooses, from the call's arguments, which children
        become available, and may bind them to a state. The selector is a function like
        a tool's (async or not; its type hints give the input schema unless
        input_schema is given; a :class:`~toolmesh.Context` parameter receives the
        call's context) returning a :class:`Selection` or a sequence of children."""
        context_param = None
        for p in inspect.signature(selector).parameters.values():
            if _is_context(p, p.annotation):
                context_param = p.name
        try:
            import typing

            for pname, ann in typing.get_type_hints(selector).items():
                if ann is Context:
                    context_param = pname
        except Exception:  # noqa: BLE001 (function_schema reports unresolvable hints)
            pass
        schema: Mapping[str, Any] | str
        if input_schema is None:
            schema, params = function_schema(selector, lambda p, a: p.name == context_param or a is Context)
            handler = handler_from_function(selector, params, context_param)
        else:
            schema = dict(input_schema) if isinstance(input_schema, Mapping) else input_schema
            handler = handler_from_function(selector, None, context_param)
        return cls(name, description, FacadeKind.SELECTABLE, children, input_schema=schema, selector=handler,
                   exclusive=exclusive, usage_notes=usage_notes, no_guide_tool=no_guide_tool,
                   no_context_tool=no_context_tool)

    def definition(self) -> pb.Message:
        """The facade's ``toolmesh.v1.ToolDefinition``."""
        return pb.ToolDefinition(name=self.name, description=self.description,
                                 input_schema_json=self.input_schema_json)

    def category_children(self, args: Mapping[str, Any]) -> list[Child]:
        """The children a by-category call selects: the named category's, or all."""
        v = args.get(self.category_parameter)
        if isinstance(v, str) and v.strip():
            for c, ts in self.categories:
                if c == v:
                    return _unique(ts)
        return list(self.children)

    async def select(self, ctx: Context, args: dict[str, Any]) -> list[Child | str]:
        """The children a call makes available. A selectable facade's selector may set
        ctx's state (directly, or through :class:`Selection`)."""
        if self.kind is FacadeKind.PLAIN:
            return list(self.children)
        if self.kind is FacadeKind.BY_CATEGORY:
            return list(self.category_children(args))
        assert self.selector is not None
        out = await self.selector(ctx, args)
        if isinstance(out, Selection):
            if out.state is not None:
                st = out.state
                if isinstance(st, (bytes, bytearray)):
                    ctx.set_state(bytes(st))
                elif isinstance(st, str):
                    ctx.set_state(st)
                else:
                    ctx.set_state(_to_json(st))
            return list(out.tools)
        if out is None:
            return []
        if isinstance(out, (Tool, Facade, str)):
            return [out]
        if isinstance(out, Iterable):
            return list(out)
        raise TypeError(f"facade {self.name}'s selector returned a {type(out).__name__}, not a Selection or tools")


def _unique(ts: Iterable[Child]) -> list[Child]:
    out: list[Child] = []
    names: set[str] = set()
    for t in ts:
        if t is None:
            continue
        if not isinstance(t, (Tool, Facade)):
            raise TypeError(f"a facade's child must be a Tool or a Facade, not {type(t).__name__}")
        if t.name not in names:
            names.add(t.name)
            out.append(t)
    return out


__all__ += ["Child", "Selector"]
