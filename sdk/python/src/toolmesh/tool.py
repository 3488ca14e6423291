"""Tools: their definitions, what they return, and the context of a call.

Define a tool with the :func:`tool` decorator on a function whose type hints give the
input schema (see :mod:`toolmesh.schema`); a parameter annotated :class:`Context`
receives the call's context and is not part of the schema::

    @tool(idempotent=True)
    async def add(a: float, b: float) -> str:
        \"\"\"Add two numbers.\"\"\"
        return str(a + b)

A tool answers with:

* a ``str``: text for the model;
* an :class:`ArtifactResult` (text plus an :class:`Artifact`), or an :class:`Artifact`
  alone (its JSON is the text);
* an :class:`ErrorResult`, or by raising :class:`ToolError`: an error the model reads,
  with an :class:`ErrorCode`; any other exception is a ``FAILED`` error with the
  exception's message;
* a control-flow signal, returned or raised: :func:`replan` or :func:`terminate`;
* anything else: text holding its JSON (``None``: empty text).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import enum
import functools
import inspect
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from . import pb
from .gojson import JSONError, decode, encode, go_quote, to_plain
from .hashing import content_hash
from .schema import Parameter, SchemaError, Validator, check_object_schema, convert, function_schema, parse_docstring

__all__ = [
    "Artifact",
    "ArtifactResult",
    "Blackboard",
    "BlackboardObject",
    "Context",
    "ErrorCode",
    "ErrorResult",
    "Replan",
    "Signal",
    "Terminate",
    "Tool",
    "ToolError",
    "replan",
    "terminate",
    "tool",
]

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_DESCRIPTION_BYTES = 8 << 10
MAX_SCHEMA_BYTES = 64 << 10
MAX_BLACKBOARD_TYPES = 16
MAX_TYPE_NAME_BYTES = 256
MAX_METADATA_ENTRIES = 64
MAX_BLACKBOARD_UPDATE_BYTES = 1 << 20
MAX_MEDIA_TYPE_BYTES = 256
MAX_PROGRESS_BYTES = 1 << 10
LOOP_ID_KEY = "toolmesh.loop_id"
TENANT_KEY = "toolmesh.tenant"


# ---------------------------------------------------------------------------------
# Results and signals


class ErrorCode(enum.Enum):
    """How an error result is classified (``toolmesh.v1.ToolErrorCode``)."""

    FAILED = 1
    INVALID_ARGUMENTS = 2
    UNKNOWN_TOOL = 3
    TIMEOUT = 4
    PANIC = 5
    UNAVAILABLE = 6


@dataclasses.dataclass(frozen=True)
class ErrorResult:
    """An error the model reads as ``Error: <message>``."""

    message: str
    code: ErrorCode = ErrorCode.FAILED


class ToolError(Exception):
    """Raise it for an error result with a message for the model and a code."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A structured output: a JSON value (``json``, its text) or a blob (``data`` with its
    ``media_type``), of a type (``type_name``) that sinks and the blackboard match on."""

    type_name: str
    json: str | None = None
    data: bytes | None = None
    media_type: str = ""

    @classmethod
    def of(cls, type_name: str, value: Any) -> Artifact:
        """An artifact holding value encoded as JSON (dataclasses and pydantic models
        too)."""
        return cls(type_name, json=_to_json(value))

    @classmethod
    def blob(cls, type_name: str, data: bytes, media_type: str) -> Artifact:
        """An artifact holding bytes of a media type (``"image/png"``)."""
        return cls(type_name, data=bytes(data), media_type=media_type)

    def to_proto(self) -> pb.Message:
        a = pb.Artifact(type_name=self.type_name, media_type=self.media_type)
        if self.data is not None or self.media_type:
            a.data = self.data or b""
        elif self.json is not None:
            a.json = self.json
        return a


@dataclasses.dataclass(frozen=True)
class ArtifactResult:
    """Text for the model plus an artifact for sinks, the blackboard and the client."""

    content: str
    artifact: Artifact


class Signal(Exception):
    """A tool's request to steer the run instead of a result. Return it or raise it."""


class Replan(Signal):
    """Ask to plan again: the run ends REPLAN_REQUESTED, after updates join its
    blackboard."""

    def __init__(self, reason: str = "", updates: Sequence[BlackboardObject] = ()) -> None:
        super().__init__("replan requested" + (": " + reason if reason else ""))
        self.reason = reason
        self.updates = list(updates)


class Terminate(Signal):
    """Stop the agent (scope ``"agent"``, the run ends) or the current action
    (``"action"``, the tool loop that made the call)."""

    def __init__(self, scope: str = "agent", reason: str = "") -> None:
        if scope not in ("agent", "action"):
            raise ValueError(f'terminate scope must be "agent" or "action", got {scope!r}')
        super().__init__(f"terminate {scope}" + (": " + reason if reason else ""))
        self.scope = scope
        self.reason = reason


def replan(reason: str, updates: Sequence[BlackboardObject] = ()) -> Replan:
    """The replan signal, to return or raise."""
    return Replan(reason, updates)


def terminate(scope: str = "agent", reason: str = "") -> Terminate:
    """The terminate signal, to return or raise."""
    return Terminate(scope, reason)


def _to_json(value: Any) -> str:
    """value as JSON text: dataclasses and pydantic models as objects; no HTML escaping,
    as the Go SDK writes a typed tool's output."""
    return encode(_jsonable(value), sort_keys=False, escape_html=False)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, enum.Enum):
        return _jsonable(v.value)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if hasattr(v, "model_dump") and callable(v.model_dump):
        return _jsonable(v.model_dump(mode="json"))
    if hasattr(v, "dict") and hasattr(v, "__fields__") and callable(v.dict):
        return _jsonable(v.dict())
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        raise TypeError("bytes have no JSON form; return an Artifact.blob instead")
    raise TypeError(f"a {type(v).__name__} has no JSON form")


# ---------------------------------------------------------------------------------
# The blackboard


@dataclasses.dataclass(frozen=True)
class BlackboardObject:
    """An object on a run's blackboard: a JSON value (``json``) or a blob (``data`` and
    ``media_type``), of a type, bound to ``name`` (empty for none)."""

    type_name: str
    json: str = ""
    name: str = ""
    data: bytes | None = None
    media_type: str = ""

    @property
    def is_blob(self) -> bool:
        return bool(self.media_type) or self.data is not None

    @property
    def size(self) -> int:
        """The bytes of its value (JSON or data), as the blackboard's bounds count them."""
        return len(self.json.encode("utf-8")) + len(self.data or b"")

    @property
    def value(self) -> Any:
        """The JSON value decoded (numbers as int or float); None for a blob."""
        if self.is_blob or not self.json:
            return None
        return to_plain(decode(self.json))

    @classmethod
    def of(cls, type_name: str, value: Any, name: str = "") -> BlackboardObject:
        """A JSON object of the given type holding value."""
        return _check_object(cls(type_name, json=_to_json(value), name=name))

    @classmethod
    def blob(cls, type_name: str, data: bytes, media_type: str, name: str = "") -> BlackboardObject:
        """A blob of the given type and media type."""
        return _check_object(cls(type_name, data=bytes(data), media_type=media_type, name=name))

    @classmethod
    def from_proto(cls, p: pb.Message) -> BlackboardObject:
        if p.media_type or p.data:
            return cls(p.type_name, json=p.json, name=p.name, data=bytes(p.data), media_type=p.media_type)
        return cls(p.type_name, json=p.json, name=p.name)

    def to_proto(self) -> pb.Message:
        p = pb.BlackboardObject(type_name=self.type_name, json=self.json, name=self.name)
        if self.is_blob:
            data = self.data or b""
            p.data, p.media_type, p.size = data, self.media_type, len(data)
        return p

    def satisfies(self, type_name: str) -> bool:
        """Whether the object is of a type: its type name equals it, or its simple name
        does ("Customer" matches "crm.Customer"); for a JSON object, also its
        ``_typeName`` or one of its ``_typeLabels``."""
        if not type_name:
            return False

        def match(t: Any) -> bool:
            return isinstance(t, str) and t != "" and (t == type_name or _simple_type_name(t) == type_name)

        if match(self.type_name):
            return True
        if not self.json.startswith("{"):
            return False
        try:
            v = decode(self.json)
        except JSONError:
            return False
        if not isinstance(v, dict):
            return False
        if match(v.get("_typeName")):
            return True
        labels = v.get("_typeLabels")
        return isinstance(labels, list) and any(match(x) for x in labels)


def _simple_type_name(t: str) -> str:
    i = max(t.rfind(c) for c in "./:$")
    return t[i + 1 :] if i >= 0 else t


_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def check_media_type(media_type: str) -> None:
    """Raises ValueError unless media_type is ``type/subtype`` with optional
    parameters, printable ASCII, at most 256 bytes."""
    if not media_type:
        raise ValueError('a blob needs a media type, such as "application/octet-stream"')
    if len(media_type) > MAX_MEDIA_TYPE_BYTES:
        raise ValueError(f"the media type is {len(media_type)} bytes; the limit is {MAX_MEDIA_TYPE_BYTES}")
    if any(not (0x20 <= ord(c) <= 0x7E) for c in media_type):
        raise ValueError(f"the media type {go_quote(media_type)} holds a byte that is not printable ASCII")
    main, _, params = media_type.partition(";")
    typ, slash, sub = main.strip().partition("/")
    if not slash or not _TOKEN.match(typ or "") or not _TOKEN.match(sub or ""):
        raise ValueError(f"the media type {go_quote(media_type)} is not of the form type/subtype")
    for param in filter(None, (x.strip() for x in params.split(";"))) if params else ():
        k, eq, _ = param.partition("=")
        if not eq or not _TOKEN.match(k.strip()):
            raise ValueError(f"the media type {go_quote(media_type)} is not one: bad parameter {param!r}")


def _check_object(o: BlackboardObject) -> BlackboardObject:
    if not o.type_name.strip():
        raise ValueError("blackboard object: empty type name")
    if len(o.type_name.encode("utf-8")) > MAX_TYPE_NAME_BYTES:
        raise ValueError(f"blackboard object: the type name is over {MAX_TYPE_NAME_BYTES} bytes")
    if len(o.name.encode("utf-8")) > MAX_TYPE_NAME_BYTES:
        raise ValueError(f"blackboard object of type {go_quote(o.type_name)}: the name is over "
                         f"{MAX_TYPE_NAME_BYTES} bytes")
    if o.is_blob:
        if o.json:
            raise ValueError(f"blackboard object of type {go_quote(o.type_name)}: it holds both JSON and a "
                             "blob's data; it may hold one")
        try:
            check_media_type(o.media_type)
        except ValueError as e:
            raise ValueError(f"blackboard object of type {go_quote(o.type_name)}: {e}") from None
        return o
    try:
        decode(o.json)
    except JSONError:
        raise ValueError(f"blackboard object of type {go_quote(o.type_name)}: the value is not valid JSON") from None
    return o


class Blackboard:
    """A run's blackboard as a call sees it: the objects the orchestrator sent with the
    call (the newest of each type the tool declared in ``blackboard_types``), and what the
    call adds, which goes back with the result and joins the run's blackboard."""

    def __init__(self, objects: Sequence[BlackboardObject] = (), limit: int = MAX_BLACKBOARD_UPDATE_BYTES) -> None:
        self._seen = list(objects)
        self._added: list[BlackboardObject] = []
        self._limit = limit
        self._size = 0
        self._lock = threading.Lock()

    def entries(self) -> list[BlackboardObject]:
        """What the call sees and what it added, oldest first."""
        with self._lock:
            return [*self._seen, *self._added]

    def last(self, type_name: str) -> BlackboardObject | None:
        """The newest object of a type (see :meth:`BlackboardObject.satisfies`), the
        call's own additions first."""
        with self._lock:
            for objs in (self._added, self._seen):
                for o in reversed(objs):
                    if o.satisfies(type_name):
                        return o
        return None

    def get(self, name: str) -> BlackboardObject | None:
        """The object bound to a name, the call's own bindings first."""
        if not name:
            return None
        with self._lock:
            for objs in (self._added, self._seen):
                for o in reversed(objs):
                    if o.name == name:
                        return o
        return None

    def add(self, type_name: str, value: Any = None, *, name: str = "", json: str | None = None,
            data: bytes | None = None, media_type: str = "") -> BlackboardObject:
        """Puts an object on the run's blackboard, bound to name when one is given: a
        JSON value (value, encoded; or json, its text) or a blob (data and media_type).
        Raises ValueError for an object the blackboard would refuse, or when the call's
        additions would exceed 1 MiB."""
        if data is not None or media_type:
            o = BlackboardObject(type_name, name=name, data=bytes(data or b""), media_type=media_type)
        else:
            o = BlackboardObject(type_name, json=json if json is not None else _to_json(value), name=name)
        return self.put(o)

    def bind(self, name: str, type_name: str, value: Any = None, **kwargs: Any) -> BlackboardObject:
        """:meth:`add` with a name bound to the object."""
        return self.add(type_name, value, name=name, **kwargs)

    def put(self, o: BlackboardObject) -> BlackboardObject:
        """Puts a ready-made object on the blackboard (see :meth:`add`)."""
        o = _check_object(o)
        with self._lock:
            if self._limit > 0 and self._size + o.size > self._limit:
                raise ValueError(f"blackboard object of type {go_quote(o.type_name)}: the call's additions "
                                 f"would exceed {self._limit} bytes")
            self._size += o.size
            self._added.append(o)
        return o

    @property
    def added(self) -> list[BlackboardObject]:
        """What the call added, in order."""
        with self._lock:
            return list(self._added)


# ---------------------------------------------------------------------------------
# The call's context


class Context:
    """The context of one tool call: who called (run, loop, call ids, tenant), the
    ToolCallContext entries, the deadline and cancellation, the state the call is bound
    to, the run's blackboard, and progress reports.

    Its methods may be used from the event loop or, for a synchronous tool (which runs in
    a thread), from that thread."""

    def __init__(
        self,
        *,
        tool: str = "",
        run_id: str = "",
        loop_id: str = "",
        call_id: str = "",
        tenant: str = "",
        idempotency_key: str = "",
        values: Mapping[str, str] | None = None,
        state: bytes = b"",
        blackboard: Blackboard | None = None,
        deadline: float | None = None,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        progress: Callable[[str], Awaitable[None]] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.tool = tool
        """The tool as called (a created tool's own name)."""
        self.run_id = run_id
        self.loop_id = loop_id
        self.call_id = call_id
        self.tenant = tenant
        """The tenant the orchestrator verified for the run (``InvokeRequest.tenant``);
        trust it only from an orchestrator you authenticated."""
        self.idempotency_key = idempotency_key
        """``<run_id>/<loop_id>/<call_id>``: the same on every attempt of one call."""
        self.values: Mapping[str, str] = dict(values or {})
        """The ToolCallContext entries the call carries (toolmesh's reserved keys left
        out: read the loop id and the tenant from their attributes)."""
        self.deadline = deadline
        """The call's deadline as a ``time.time()`` value; None without one."""
        self.metadata = tuple(metadata)
        """The request's gRPC metadata as received (``traceparent`` and the like)."""
        self.blackboard = blackboard if blackboard is not None else Blackboard()
        self._state = bytes(state)
        self._state_changed = False
        self._lock = threading.Lock()
        self._progress = progress
        self._loop = loop
        self._cancelled = threading.Event()
        self._threads: list[concurrent.futures.Future[Any]] = []

    def get(self, key: str, default: str | None = None) -> str | None:
        """A ToolCallContext entry; the reserved keys ``toolmesh.loop_id`` and
        ``toolmesh.tenant`` answer the loop id and the tenant, as in the Go SDK."""
        if key == LOOP_ID_KEY:
            return self.loop_id or default
        if key == TENANT_KEY:
            return self.tenant or default
        return self.values.get(key, default)

    def time_remaining(self) -> float | None:
        """Seconds left before the call's deadline (0 once passed); None without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.time())

    @property
    def cancelled(self) -> bool:
        """Whether the call was cancelled (its caller went away, or its deadline passed).
        An async tool is also cancelled at its next ``await``; a synchronous one should
        check this now and then."""
        return self._cancelled.is_set()

    def _cancel(self) -> None:
        self._cancelled.set()

    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        """fn's value, fn run on a thread of its own (a synchronous tool). The thread is
        not stopped when the await is cancelled (nothing can stop it): it stays in
        _threads, and the worker holds the call's capacity slot and idempotency key until
        it ends, keeping what it returns, as the Go worker does for a tool that ignores
        its context."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_running_or_notify_cancel()

        def run() -> None:
            try:
                done.set_result(fn())
            except Exception as e:  # noqa: BLE001 (handed to whoever awaits it)
                done.set_exception(e)
            except BaseException as e:  # noqa: BLE001 (SystemExit, as argparse raises: it ends a thread, not the worker)
                done.set_exception(RuntimeError(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__))

        threading.Thread(target=run, name=f"toolmesh-tool-{self.tool}", daemon=True).start()
        self._threads.append(done)
        value = asyncio.wrap_future(done)
        value.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, though the call be gone
        return await asyncio.shield(value)

    def _thread_running(self) -> concurrent.futures.Future[Any] | None:
        """The call's thread while it runs on, else None."""
        return next((f for f in self._threads if not f.done()), None)

    # State.

    @property
    def state(self) -> bytes:
        """The state the call is bound to (empty for none): a selection's, or a method's
        receiver."""
        with self._lock:
            return self._state

    def set_state(self, state: bytes | str | None) -> None:
        """Replaces the state; the next call bound to it, on any replica, sees the new
        value (empty or None clears it)."""
        if isinstance(state, str):
            state = state.encode("utf-8")
        with self._lock:
            self._state = bytes(state or b"")
            self._state_changed = True

    def state_json(self, default: Any = None) -> Any:
        """The state decoded as JSON; default when there is none."""
        s = self.state
        return to_plain(decode(s.decode("utf-8"))) if s else default

    def set_state_json(self, value: Any) -> None:
        """Replaces the state with value encoded as JSON."""
        self.set_state(_to_json(value))

    @property
    def state_changed(self) -> bool:
        with self._lock:
            return self._state_changed

    # Progress.

    def progress(self, status: str) -> Awaitable[None]:
        """Reports what the tool is doing ("fetched 3 of 10 pages"): ``await`` it in an
        async tool; call it plainly in a synchronous one (it blocks until the report is
        on its way). Reports reach the run's client as progress events, in order, only
        for a tool declared with ``reports_progress=True``; others are dropped. A report
        is cut to 1 KiB."""
        if self._progress is None or not status:
            return _done()
        status = cut_utf8(status, MAX_PROGRESS_BYTES)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self._loop:
            return self._progress(status)
        loop, report = self._loop, self._progress
        if loop is None or self._cancelled.is_set():
            return _done()  # the call ended: nobody reads its reports

        async def send() -> None:
            await report(status)

        coro = send()
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the worker's loop is closed (a thread outliving the worker)
            coro.close()
            return _done()
        while True:  # a report never fails the call, nor blocks it once the loop stopped
            try:
                fut.result(timeout=1.0)
                break
            except concurrent.futures.TimeoutError:
                if loop.is_closed() or not loop.is_running():
                    fut.cancel()
                    with contextlib.suppress(RuntimeError):
                        coro.close()  # never started: no "never awaited" warning
                    break
            except Exception:  # noqa: BLE001
                break
        return _done()


async def _noop() -> None:
    return None


class _Done:
    """An awaitable that is already done (a no-op report)."""

    def __await__(self) -> Any:
        return _noop().__await__()


def _done() -> Awaitable[None]:
    return _Done()


_LONE_SURROGATES = re.compile("[\ud800-\udfff]")


def valid_text(s: str) -> str:
    """s with the characters UTF-8 cannot encode (lone surrogates, as ``os.fsdecode``
    makes of bytes that are not UTF-8) replaced by U+FFFD: only UTF-8 crosses the wire."""
    return _LONE_SURROGATES.sub("\ufffd", s)


def cut_utf8(s: str, n: int) -> str:
    """s cut to at most n bytes of UTF-8, at a character boundary, made valid first
    (valid_text)."""
    s = valid_text(s)
    b = s.encode("utf-8")
    if len(b) <= n:
        return s
    cut = n
    while cut > 0 and (b[cut] & 0xC0) == 0x80:
        cut -= 1
    return b[:cut].decode("utf-8")


# ---------------------------------------------------------------------------------
# Tools

Handler = Callable[[Context, dict[str, Any]], Awaitable[Any]]


def _timeout_ns(timeout: float | int | Any | None) -> int:
    if timeout is None:
        return 0
    if hasattr(timeout, "total_seconds"):
        timeout = timeout.total_seconds()
    ns = round(float(timeout) * 1_000_000_000)
    if ns < 0:
        raise ValueError(f"timeout is negative ({timeout})")
    return ns


class Tool:
    """A tool the model can call: its definition and its handler.

    The handler takes the call's :class:`Context` and the validated arguments (a dict of
    decoded JSON, numbers as :class:`toolmesh.gojson.Number`) and returns the answer (see
    the module). :func:`tool` makes one from a function; the constructor takes a JSON
    Schema and a handler, for arguments of any shape."""

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: Mapping[str, Any] | str,
        handler: Handler,
        *,
        idempotent: bool = False,
        return_direct: bool = False,
        timeout: float | Any | None = None,
        metadata: Mapping[str, str] | None = None,
        blackboard_types: Sequence[str] = (),
        reports_progress: bool = False,
        receiver_type: str = "",
        requires_approval: bool = False,
        once_per_loop: str | None = None,
        ledger: bool = False,
        func: Callable[..., Any] | None = None,
    ) -> None:
        if not TOOL_NAME_RE.match(name):
            raise ValueError(f"tool name {go_quote(name)} must be 1 to 64 of [A-Za-z0-9_-]")
        if len(description.encode("utf-8")) > MAX_DESCRIPTION_BYTES:
            raise ValueError(f"tool {name}: the description is over {MAX_DESCRIPTION_BYTES} bytes")
        self.name = name
        self.description = description
        self.input_schema_json = check_object_schema(input_schema)
        if len(self.input_schema_json.encode("utf-8")) > MAX_SCHEMA_BYTES:
            raise ValueError(f"tool {name}: the input schema is over {MAX_SCHEMA_BYTES} bytes")
        self.validator = Validator(self.input_schema_json)
        self.handler = handler
        self.idempotent = idempotent
        self.return_direct = return_direct
        self.timeout_ns = _timeout_ns(timeout)
        self.metadata = dict(metadata or {})
        if len(self.metadata) > MAX_METADATA_ENTRIES:
            raise ValueError(f"tool {name}: more than {MAX_METADATA_ENTRIES} metadata entries")
        if len(blackboard_types) > MAX_BLACKBOARD_TYPES:
            raise ValueError(f"tool {name}: more than {MAX_BLACKBOARD_TYPES} blackboard types")
        for t in blackboard_types:
            if not t or len(t.encode("utf-8")) > MAX_TYPE_NAME_BYTES:
                raise ValueError(f"tool {name}: a blackboard type must be 1 to {MAX_TYPE_NAME_BYTES} bytes")
        self.blackboard_types = list(blackboard_types)
        self.reports_progress = reports_progress
        self.receiver_type = receiver_type
        self.requires_approval = requires_approval
        self.once_per_loop = once_per_loop
        self.ledger = ledger
        self.func = func
        """The decorated function, when the tool was made by :func:`tool`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the decorated function directly (for tests)."""
        if self.func is None:
            raise TypeError(f"tool {self.name} has no function to call directly")
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    def definition(self) -> pb.Message:
        """The ``toolmesh.v1.ToolDefinition`` the worker registers."""
        d = pb.ToolDefinition(
            name=self.name,
            description=self.description,
            input_schema_json=self.input_schema_json,
            metadata=self.metadata,
            return_direct=self.return_direct,
            idempotent=self.idempotent,
            blackboard_types=self.blackboard_types,
            reports_progress=self.reports_progress,
            receiver_type=self.receiver_type,
            requires_approval=self.requires_approval,
        )
        if self.timeout_ns > 0:
            s, n = divmod(self.timeout_ns, 1_000_000_000)
            d.timeout.seconds, d.timeout.nanos = s, n
        if self.once_per_loop is not None:
            d.once_per_loop.advice = self.once_per_loop
            d.once_per_loop.SetInParent()
        return d

    @property
    def content_hash(self) -> str:
        """The definition's content hash, as the orchestrator computes it."""
        return content_hash(self.definition())


F = TypeVar("F", bound=Callable[..., Any])


def _is_context(p: inspect.Parameter, annotation: Any) -> bool:
    return annotation is Context or (isinstance(annotation, str) and annotation in ("Context", "toolmesh.Context"))


def handler_from_function(fn: Callable[..., Any], params: Sequence[Parameter] | None, context_param: str | None,
                          ) -> Handler:
    """The handler that calls fn with the arguments as keyword arguments (converted to
    the annotated types when params is given, else as decoded) and the context."""
    is_async = inspect.iscoroutinefunction(fn)
    by_name = {p.name: p for p in params or ()}
    positional = [p.name for p in params or () if p.positional_only]
    # With a schema of its own (params None), the arguments fn takes by name: the schema
    # may allow properties fn has no parameter for, which are not passed (a call of fn
    # with them failed); fn with **kwargs takes them all.
    takes: set[str] | None = None
    if params is None:
        try:
            sig = inspect.signature(fn).parameters.values()
            if not any(q.kind is inspect.Parameter.VAR_KEYWORD for q in sig):
                takes = {q.name for q in sig if q.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          inspect.Parameter.KEYWORD_ONLY)}
        except (TypeError, ValueError):  # no signature to read: every argument goes
            takes = None

    async def handler(ctx: Context, args: dict[str, Any]) -> Any:
        kwargs: dict[str, Any] = {}
        if params is None:
            kwargs = {k: to_plain(v) for k, v in args.items() if takes is None or k in takes}
        else:
            for name, p in by_name.items():
                if name in args:
                    kwargs[name] = convert(args[name], p.annotation)
                elif p.default is inspect.Parameter.empty:
                    kwargs[name] = None  # an Optional parameter without a default
        if context_param is not None:
            kwargs[context_param] = ctx
        pos = [kwargs.pop(n) for n in positional if n in kwargs]
        if is_async:
            return await fn(*pos, **kwargs)
        # A thread for each call, as the Go worker has a goroutine: asyncio's default
        # executor runs at most min(32, CPUs + 4) at once, a cap nobody set.
        cv = contextvars.copy_context()
        return await ctx._in_thread(functools.partial(cv.run, fn, *pos, **kwargs))

    return handler


@overload
def tool(fn: F) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | str | None = None,
    idempotent: bool = False,
    return_direct: bool = False,
    timeout: float | Any | None = None,
    metadata: Mapping[str, str] | None = None,
    blackboard_types: Sequence[str] = (),
    reports_progress: bool = False,
    receiver_type: str = "",
    requires_approval: bool = False,
    once_per_loop: str | None = None,
    ledger: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | str | None = None,
    idempotent: bool = False,
    return_direct: bool = False,
    timeout: float | Any | None = None,
    metadata: Mapping[str, str] | None = None,
    blackboard_types: Sequence[str] = (),
    reports_progress: bool = False,
    receiver_type: str = "",
    requires_approval: bool = False,
    once_per_loop: str | None = None,
    ledger: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Makes a :class:`Tool` of a function (async, or synchronous: it then runs in a
    thread). Used bare (``@tool``) or with options:

    name: the tool's name; default the function's.
    description: what the model reads; default the docstring (before its sections).
    input_schema: a JSON Schema (dict or text) instead of the one the type hints give;
        the arguments are then passed by name, as decoded.
    idempotent: the orchestrator may send a call again (to another replica) when its
        outcome is unknown.
    return_direct: the tool's answer ends the tool loop as the final answer.
    timeout: seconds (or a timedelta) one call may take; None: the orchestrator's default.
    metadata: application metadata the model never sees.
    blackboard_types: types of blackboard objects each call receives the newest of.
    reports_progress: the tool reports progress (``ctx.progress``); its calls come by
        InvokeStream.
    receiver_type: the tool is a method of this domain type: the bound object is the
        call's state.
    requires_approval: every call waits for a person's approval.
    once_per_loop: the tool runs at most once per tool loop; a later call is answered
        with the ALREADY LOADED text and this advice.
    ledger: the worker answers a call sent again (same idempotency key) from its
        idempotency ledger instead of running the tool twice.
    """

    def make(f: Callable[..., Any]) -> Tool:
        doc_desc, _ = parse_docstring(inspect.getdoc(f))
        context_param = None
        sig = inspect.signature(f)
        for p in sig.parameters.values():
            ann = p.annotation
            if _is_context(p, ann):
                context_param = p.name
        try:
            hints = _hints(f)
        except SchemaError:
            hints = {}
        for pname, ann in hints.items():
            if ann is Context:
                context_param = pname
        params: list[Parameter] | None
        schema: Mapping[str, Any] | str
        if input_schema is None:
            schema, params = function_schema(f, lambda p, a: p.name == context_param or a is Context)
        else:
            schema, params = input_schema, None
        handler = handler_from_function(f, params, context_param)
        return Tool(
            name or f.__name__,
            description if description is not None else doc_desc,
            schema,
            handler,
            idempotent=idempotent,
            return_direct=return_direct,
            timeout=timeout,
            metadata=metadata,
            blackboard_types=blackboard_types,
            reports_progress=reports_progress,
            receiver_type=receiver_type,
            requires_approval=requires_approval,
            once_per_loop=once_per_loop,
            ledger=ledger,
            func=f,
        )

    if fn is not None:
        return make(fn)
    return make


def _hints(f: Callable[..., Any]) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(f)
    except Exception as e:  # noqa: BLE001
        raise SchemaError(str(e)) from e


__all__ += ["Handler", "check_media_type", "cut_utf8", "handler_from_function", "valid_text"]
