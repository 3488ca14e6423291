"""The worker: serves tool groups over ``toolmesh.v1.ToolWorkerService`` and keeps them
registered with the orchestrator, as ``pkg/worker`` does in Go.

::

    w = Worker(orchestrator="127.0.0.1:7070", id="py-1",
               groups=[Group(role="math", description="Math tools", tools=[add])])
    asyncio.run(w.run())   # serves until SIGTERM or SIGINT, then drains and returns

Run serves ToolWorkerService and ``grpc.health.v1.Health`` first, then registers on a
``ToolRegistryService.Connect`` stream (one per orchestrator replica), sends a heartbeat
every ``heartbeat_interval``, and registers again with jittered exponential backoff when
the stream breaks. On SIGTERM or SIGINT (or :meth:`Worker.stop`) it drains: health turns
NOT_SERVING, the orchestrator is told (``Draining``), new calls are refused with
UNAVAILABLE and reason WORKER_DRAINING, calls in flight finish (up to ``drain_timeout``),
and the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import ipaddress
import logging
import random
import re
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio

from . import ctxcodec, pb
from .errors import STATUS_DETAILS_KEY, parse_status_details, status_details
from .facade import Child, Facade, FacadeKind, unfold_message
from .gojson import JSONError, go_quote
from .ledger import DEFAULT_LEDGER_TTL, KeyLocks, Ledger, MemoryLedger
from .schema import ArgumentsError, check_object_schema
from .tool import (
    TOOL_NAME_RE,
    Artifact,
    ArtifactResult,
    Blackboard,
    BlackboardObject,
    Context,
    ErrorCode,
    ErrorResult,
    Replan,
    Signal,
    Terminate,
    Tool,
    ToolError,
    _to_json,
    cut_utf8,
    valid_text,
)

__all__ = ["DomainType", "Group", "Permission", "Worker", "WorkerError"]

log = logging.getLogger("toolmesh.worker")

MAX_MESSAGE_BYTES = 4 << 20
DEFAULT_MAX_RESULT_BYTES = MAX_MESSAGE_BYTES - (64 << 10)
MAX_BLACKBOARD_UPDATES = 256
MAX_BLACKBOARD_UPDATE_BYTES = 1 << 20
MAX_GROUPS = 64
MAX_GROUP_TOOLS = 10000
MAX_DOMAIN_TYPES = 64
MAX_FACADE_DEPTH = 32
MAX_FACADE_CHILDREN = 10000
MAX_TEXT_BYTES = 8 << 10
LEDGER_STORE_TIMEOUT = 10.0  # seconds the store of a call's answer may take, its caller gone or not
MAX_VERSION_BYTES = 128
ROLE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
WORKER_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,253}$")
UNREACHABLE_NOTICE = 5.0


class WorkerError(Exception):
    """A worker that cannot be built or run as configured."""


class Permission(enum.IntEnum):
    """Something a group needs from its host (``toolmesh.v1.Permission``)."""

    HOST_ACCESS = 1
    INTERNET_ACCESS = 2


@dataclasses.dataclass
class DomainType:
    """A type of object the group's tools return and its methods run on, with the JSON
    Schema its objects satisfy (None: any JSON object)."""

    type_name: str
    description: str = ""
    schema: Mapping[str, Any] | str | None = None


@dataclasses.dataclass
class Group:
    """A tool group the worker serves: a role runs request it by, and its tools.

    ``tools`` are offered to the model directly (a :class:`~toolmesh.Facade` among them
    counts as a facade); ``facades`` are trees over further tools of the group: every
    leaf is served as a tool of the group, and offered through its facade."""

    role: str
    description: str = ""
    tools: Sequence[Tool | Facade] = ()
    facades: Sequence[Facade] = ()
    usage_notes: str = ""
    provider: str = ""
    version: str = ""
    permissions: Sequence[Permission | int] = ()
    domain_types: Sequence[DomainType] = ()


class _Refusal(Exception):
    """A call the worker does not run, answered with an error status."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, details = status_details(reason, message)
        self.message = message
        self.trailing = ((STATUS_DETAILS_KEY, details),)


class _Refused(Exception):
    """A registration the orchestrator refused; retry_after is the delay it asked for."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclasses.dataclass
class _Served:
    facade: Facade
    group: str


class _Catalog:
    """What the groups register, and what Invoke dispatches on."""

    def __init__(self, groups: Sequence[Group]) -> None:
        if not groups:
            raise WorkerError("no groups")
        if len(groups) > MAX_GROUPS:
            raise WorkerError(f"{len(groups)} groups; the limit is {MAX_GROUPS}")
        self.tools: dict[str, Tool] = {}
        self.hashes: dict[str, str] = {}
        self.facades: dict[str, _Served] = {}
        self.group: dict[str, str] = {}
        self.registrations: list[pb.Message] = []
        roles: set[str] = set()
        for g in groups:
            if not ROLE_RE.match(g.role):
                raise WorkerError(f"role {go_quote(g.role)} must match {ROLE_RE.pattern}")
            if g.role in roles:
                raise WorkerError(f"role {go_quote(g.role)} given twice")
            roles.add(g.role)
            self.registrations.append(self._add_group(g))

    def _add_group(self, g: Group) -> pb.Message:
        if not g.tools and not g.facades:
            raise WorkerError(f"group {go_quote(g.role)} has no tools")
        for what, text, limit in (("description", g.description, MAX_TEXT_BYTES),
                                  ("usage notes", g.usage_notes, MAX_TEXT_BYTES),
                                  ("provider", g.provider, MAX_VERSION_BYTES),
                                  ("version", g.version, MAX_VERSION_BYTES)):
            if len(text.encode("utf-8")) > limit:
                raise WorkerError(f"group {go_quote(g.role)}: the {what} is over {limit} bytes")
        info = pb.ToolGroupInfo(role=g.role, description=g.description, usage_notes=g.usage_notes,
                                provider=g.provider, version=g.version, permissions=[int(p) for p in g.permissions])
        gr = pb.GroupRegistration(group=info)
        if len(g.domain_types) > MAX_DOMAIN_TYPES:
            raise WorkerError(f"group {go_quote(g.role)} has {len(g.domain_types)} domain types; "
                              f"the limit is {MAX_DOMAIN_TYPES}")
        seen_types: set[str] = set()
        for d in g.domain_types:
            if not d.type_name.strip() or len(d.type_name.encode("utf-8")) > 256:
                raise WorkerError(f"group {go_quote(g.role)}: a domain type name must be 1 to 256 bytes, not blank")
            if d.type_name in seen_types:
                raise WorkerError(f"group {go_quote(g.role)} declares domain type {go_quote(d.type_name)} twice")
            seen_types.add(d.type_name)
            schema = ""
            if d.schema is not None:
                try:
                    schema = check_object_schema(d.schema)
                except Exception as e:  # noqa: BLE001
                    raise WorkerError(f"group {go_quote(g.role)}: domain type {go_quote(d.type_name)}: {e}") from None
            gr.domain_types.append(pb.DomainType(type_name=d.type_name, description=d.description, schema_json=schema))
        b = _GroupBuilder(self, g.role)
        roots: list[Facade] = []
        for t in g.tools:
            if isinstance(t, Facade):
                roots.append(t)
            elif isinstance(t, Tool):
                b.add_tool(t, given=True)
            else:
                raise WorkerError(f"group {go_quote(g.role)}: {t!r} is not a Tool or a Facade")
        for f in g.facades:
            if not isinstance(f, Facade):
                raise WorkerError(f"group {go_quote(g.role)}: {f!r} is not a Facade")
            roots.append(f)
        for f in roots:
            gr.facades.append(b.facade_node(f, 0))
        if len(b.tools) > MAX_GROUP_TOOLS:
            raise WorkerError(f"group {go_quote(g.role)} has {len(b.tools)} tools; the limit is {MAX_GROUP_TOOLS}")
        for t in sorted(b.tools, key=lambda t: t.name.encode()):
            gr.tools.append(pb.RegisteredTool(definition=t.definition(), content_hash=self.hashes[t.name]))
        return gr


class _GroupBuilder:
    def __init__(self, c: _Catalog, role: str) -> None:
        self.c = c
        self.role = role
        self.own: set[str] = set()
        self.tools: list[Tool] = []

    def add_tool(self, t: Tool, given: bool) -> None:
        h = t.content_hash
        name = t.name
        if name in self.c.facades:
            raise WorkerError(f"tool {go_quote(name)} of group {go_quote(self.role)} has the name of a facade of "
                              f"group {go_quote(self.c.facades[name].group)}")
        if name in self.c.hashes:
            if name not in self.own:
                raise WorkerError(f"tool {go_quote(name)} given twice (in groups {go_quote(self.c.group[name])} "
                                  f"and {go_quote(self.role)})")
            if given:
                raise WorkerError(f"tool {go_quote(name)} given twice in group {go_quote(self.role)}")
            if self.c.hashes[name] != h:
                raise WorkerError(f"group {go_quote(self.role)} has two different tools named {go_quote(name)} "
                                  "(a facade's leaf differs from another tool of that name)")
            return
        self.c.tools[name] = t
        self.c.hashes[name] = h
        self.c.group[name] = self.role
        self.own.add(name)
        self.tools.append(t)

    def facade_node(self, f: Facade, depth: int) -> pb.Message:
        name = f.name
        if depth >= MAX_FACADE_DEPTH:
            raise WorkerError(f"group {go_quote(self.role)}: facade {go_quote(name)} nests deeper than "
                              f"{MAX_FACADE_DEPTH} levels")
        if name in self.c.facades:
            prev = self.c.facades[name].group
            if prev == self.role:
                raise WorkerError(f"facade {go_quote(name)} given twice in group {go_quote(self.role)}")
            raise WorkerError(f"facade {go_quote(name)} given twice (in groups {go_quote(prev)} and "
                              f"{go_quote(self.role)})")
        if name in self.c.tools:
            raise WorkerError(f"facade {go_quote(name)} of group {go_quote(self.role)} has the name of a tool of "
                              f"group {go_quote(self.c.group[name])}")
        self.c.facades[name] = _Served(f, self.role)
        self.c.group[name] = self.role
        node = pb.FacadeNode(definition=f.definition(), exclusive=f.exclusive, usage_notes=f.usage_notes,
                             no_guide_tool=f.no_guide_tool, no_context_tool=f.no_context_tool)
        if len(f.children) > MAX_FACADE_CHILDREN:
            raise WorkerError(f"facade {go_quote(name)} has more than {MAX_FACADE_CHILDREN} children")
        for child in f.children:
            if isinstance(child, Facade):
                node.children.append(pb.FacadeChild(facade=self.facade_node(child, depth + 1)))
            else:
                self.add_tool(child, given=False)
                node.children.append(pb.FacadeChild(tool=child.name))
        if f.kind is FacadeKind.BY_CATEGORY:
            node.category_parameter = f.category_parameter
            children = {c.name for c in f.children}
            for cat, ts in f.categories:
                names: list[str] = []
                for t in ts:
                    if t.name not in names:
                        names.append(t.name)
                for n in names:
                    if n not in children:
                        raise WorkerError(f"group {go_quote(self.role)}: facade {go_quote(name)}: category "
                                          f"{go_quote(cat)} holds {go_quote(n)}, which is not one of its children")
                node.categories.append(pb.FacadeCategory(name=cat, children=names))
        elif f.kind is FacadeKind.SELECTABLE:
            node.selectable = True
        return node


def _backoff(failures: int, lo: float, hi: float) -> float:
    """Exponential from lo to hi with equal jitter: half fixed, half random."""
    d = lo
    for _ in range(failures):
        if d >= hi:
            break
        if d > hi / 2:
            d = hi
            break
        d *= 2
    d = min(d, hi)
    half = d / 2
    return half + random.uniform(0, half)


def _is_loopback(listen: str) -> bool:
    host = _split_host_port(listen)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host_port(addr: str) -> tuple[str, str]:
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        return host, rest.lstrip(":")
    host, _, port = addr.rpartition(":")
    return host, port


def _join_host_port(host: str, port: int | str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _serialize(m: pb.Message) -> bytes:
    return bytes(m.SerializeToString())


class Worker:
    """A process's tool groups, served and registered with an orchestrator.

    orchestrator: the ToolRegistryService's address, ``host:port``; several replicas'
        addresses separated by commas; or ``dns:///host:port`` for every address the
        name resolves to (resolved again every resolve_interval seconds). The worker
        registers with every replica.
    groups: the groups it serves.
    id: the worker's id, stable across reconnects; default the host name plus a random
        suffix.
    listen: the address to serve on (default ``127.0.0.1:0``). Without TLS, which this
        SDK does not do, it must be a loopback address unless plaintext is set.
    plaintext: serve on an address that is not loopback (local development only: anyone
        who reaches the port may call the tools, with any context).
    advertise: the address the orchestrator dials; default the listening address.
    capacity: calls run at once (further calls wait for a slot); 0 is unlimited.
    version: of the worker program, for operators.
    drain_timeout: how long a drain waits for calls in flight (seconds).
    context_max_bytes: the bound of a call's ToolCallContext (8 KiB).
    max_result_bytes: the bound of one answer, encoded (4 MiB less 64 KiB); a larger
        answer is replaced by an error result.
    min_backoff, max_backoff: the bounds of the jittered delay between registration
        attempts (0.1 s and 5 s).
    ledger: an idempotency ledger for every call (see :mod:`toolmesh.ledger`); without
        one, tools declared with ``ledger=True`` use one in memory. ledger_ttl: how long
        answers are kept (24 hours).
    on_registered: called with True when the worker becomes registered (with at least one
        replica) and with False when it no longer is.
    """

    def __init__(
        self,
        orchestrator: str,
        groups: Sequence[Group],
        *,
        id: str | None = None,  # noqa: A002 (the option's name)
        listen: str = "127.0.0.1:0",
        plaintext: bool = False,
        advertise: str | None = None,
        capacity: int = 0,
        version: str = "",
        drain_timeout: float = 20.0,
        context_max_bytes: int = ctxcodec.DEFAULT_MAX_BYTES,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        min_backoff: float = 0.1,
        max_backoff: float = 5.0,
        resolve_interval: float = 5.0,
        ledger: Ledger | None = None,
        ledger_ttl: float = DEFAULT_LEDGER_TTL,
        on_registered: Callable[[bool], Any] | None = None,
        server_options: Sequence[tuple[str, Any]] = (),
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if not orchestrator:
            raise WorkerError("no orchestrator address")
        if id is None or id == "":
            id = (socket.gethostname() or "worker") + "-" + secrets.token_hex(3)
        if not WORKER_ID_RE.match(id):
            raise WorkerError(f"worker id {go_quote(id)} must be 1 to 253 of [A-Za-z0-9_.:-]")
        if capacity < 0:
            raise WorkerError(f"capacity is negative ({capacity})")
        if len(version.encode("utf-8")) > MAX_VERSION_BYTES or not version.isprintable():
            raise WorkerError("the version must be printable, at most 128 bytes")
        if not plaintext and not _is_loopback(listen):
            raise WorkerError(f"listen {listen} is not a loopback address: this SDK serves plaintext only; set "
                              "plaintext=True to serve there anyway (local development only: anything that "
                              "reaches the port could call the tools with any context)")
        self.orchestrator = orchestrator
        self.id = id
        self.listen = listen
        self.plaintext = plaintext
        self.advertise = advertise
        self.capacity = capacity
        self.version = version
        self.drain_timeout = drain_timeout if drain_timeout > 0 else 20.0
        self.context_max_bytes = context_max_bytes if context_max_bytes > 0 else ctxcodec.DEFAULT_MAX_BYTES
        self.max_result_bytes = max_result_bytes if max_result_bytes > 0 else DEFAULT_MAX_RESULT_BYTES
        self.min_backoff = min_backoff if min_backoff > 0 else 0.1
        self.max_backoff = max_backoff if max_backoff >= self.min_backoff else max(5.0, self.min_backoff)
        self.resolve_interval = resolve_interval if resolve_interval > 0 else 5.0
        self.ledger_ttl = ledger_ttl if ledger_ttl > 0 else DEFAULT_LEDGER_TTL
        self.on_registered = on_registered
        self._server_options = list(server_options)
        self._channel_options = list(channel_options)
        self._catalog = _Catalog(groups)
        self._ledger = ledger
        self._tool_ledger: Ledger | None = None
        if ledger is None and any(t.ledger for t in self._catalog.tools.values()):
            self._tool_ledger = MemoryLedger()
        self._keys = KeyLocks()
        self._registration = pb.Registration(worker_id=id, capacity=capacity, version=version,
                                             groups=self._catalog.registrations)

        self._ran = False
        self._stop_requested = False
        self._address = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._drain_started: asyncio.Event | None = None
        self._drain_sent: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._registered_event: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._draining = False
        self._calls = 0
        self._active = 0
        self._stores: set[asyncio.Future[None]] = set()  # ledger stores whose call's caller left
        self._late: set[asyncio.Future[None]] = set()  # answers of threads that ran past their call (_keep_late)
        self._registered: dict[str, str] = {}
        self._last_rejections: list[pb.Message] = []
        self._health: Any = None

    # Introspection.

    def registration(self) -> pb.Message:
        """What the worker registers (a ``toolmesh.v1.Registration``: its groups, each
        with its tools sorted by name with their content hashes, and its facade trees);
        the address is set once :meth:`run` listens."""
        r = pb.Registration()
        r.CopyFrom(self._registration)
        return r

    @property
    def address(self) -> str:
        """The address the worker serves on, once :meth:`run` has started listening."""
        return self._address

    @property
    def registered(self) -> bool:
        """Whether at least one orchestrator replica accepted the registration."""
        return bool(self._registered)

    @property
    def registered_with(self) -> list[str]:
        """The orchestrator addresses the worker is registered with."""
        return sorted(self._registered)

    @property
    def last_rejections(self) -> list[pb.Message]:
        """The ``Rejection`` messages of the last refused registration."""
        return list(self._last_rejections)

    async def wait_registered(self) -> None:
        """Waits until the worker is registered (with one replica at least)."""
        while self._registered_event is None:
            await asyncio.sleep(0.01)
        await self._registered_event.wait()

    def stop(self) -> None:
        """Starts the drain (from any thread): :meth:`run` then returns once it is done."""
        loop, stop = self._loop, self._stop
        if loop is None or stop is None:
            self._stop_requested = True  # run drains as soon as it has started
            return
        if threading.current_thread() is threading.main_thread() and _running_loop() is loop:
            stop.set()
        else:
            loop.call_soon_threadsafe(stop.set)

    # Running.

    async def run(self, *, handle_signals: bool = True) -> None:
        """Serves until :meth:`stop` (or SIGTERM/SIGINT when handle_signals), keeping the
        worker registered, then drains and returns. A worker runs once."""
        if self._ran:
            raise WorkerError("run was already called on this worker; make a new one")
        self._ran = True
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        self._drain_started = asyncio.Event()
        self._drain_sent = asyncio.Event()
        self._idle = asyncio.Event()
        self._registered_event = asyncio.Event()
        if self.capacity > 0:
            self._slots = asyncio.Semaphore(self.capacity)

        from .health import HealthServicer

        self._health = HealthServicer()
        options = [
            # Permit the orchestrator's pings (every 10 s, with or without calls): the
            # contract's keepalive policy, as pkg/worker's EnforcementPolicy{MinTime: 5s,
            # PermitWithoutStream: true}.
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", -1),
            # A call's headers: its ToolCallContext (up to 8 KiB) and the orchestrator's
            # own (trace context, deadline), past gRPC's default of 8 KiB for them all.
            ("grpc.max_metadata_size", 64 << 10),
            # One server per port: a second worker on a taken port fails instead of sharing it.
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.aio.server(options=_merge_options(options, self._server_options))
        server.add_generic_rpc_handlers((self._worker_handler(), self._health.handler()))
        try:
            port = server.add_insecure_port(self.listen)
        except RuntimeError as e:
            raise WorkerError(f"listen {self.listen}: {e}") from None
        if not port:
            raise WorkerError(f"cannot listen on {self.listen}")
        host, _ = _split_host_port(self.listen)
        self._address = _join_host_port(host or "0.0.0.0", port)
        self._registration.address = self.advertise or self._address
        await server.start()
        self._health.set("", pb.ServingStatus.SERVING)
        self._health.set(pb.WORKER_SERVICE, pb.ServingStatus.SERVING)
        log.info("worker serving: address=%s advertise=%s orchestrator=%s worker_id=%s", self._address,
                 self._registration.address, self.orchestrator, self.id)

        installed: list[signal.Signals] = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._stop.set)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        if self._stop_requested:
            self._stop.set()
        reg = asyncio.create_task(self._register_all(), name="toolmesh-registration")
        try:
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({stop, reg}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if reg.done() and reg.exception() is not None:
                log.error("registration failed: %s", reg.exception())
            await self._drain(server)
        finally:
            reg.cancel()
            try:
                await reg
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 (ended on purpose)
                pass
            for sig in installed:
                loop.remove_signal_handler(sig)
            self._set_all_unregistered()
            log.info("worker stopped: worker_id=%s", self.id)

    async def _drain(self, server: grpc.aio.Server) -> None:
        assert self._drain_started and self._idle and self._drain_sent
        self._draining = True
        if self._calls == 0:
            self._idle.set()
        self._drain_started.set()
        self._health.shutdown()
        log.info("worker draining: in_flight=%d timeout=%.1fs", self._active, self.drain_timeout)
        if self.registered:
            # Let Draining leave before the stream is torn down, so that the orchestrator
            # drops the worker at once rather than after its grace period.
            try:
                await asyncio.wait_for(self._drain_sent.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
        try:
            await asyncio.wait_for(self._idle.wait(), self.drain_timeout)
        except asyncio.TimeoutError:
            log.warning("drain timeout: stopping with calls in flight: in_flight=%d", self._active)
        if self._stores:
            # The answers of calls whose callers left are still being stored: a worker
            # that ended first would lose them, and the calls sent again would run twice.
            await asyncio.wait(set(self._stores), timeout=LEDGER_STORE_TIMEOUT)
        await server.stop(2.0)

    # Registration.

    async def _register_all(self) -> None:
        loops: dict[str, asyncio.Task[None]] = {}
        resolves = "dns:///" in self.orchestrator
        last: dict[str, list[str]] = {}
        try:
            while True:
                targets = await self._resolve_targets(last)
                for t in list(loops):
                    if t not in targets:
                        log.info("orchestrator replica gone from the address; leaving it: orchestrator=%s", t)
                        loops.pop(t).cancel()
                for t in targets:
                    if t not in loops:
                        loops[t] = asyncio.create_task(self._register_loop(t), name=f"toolmesh-register-{t}")
                if not resolves:
                    await asyncio.gather(*loops.values())
                    return
                await asyncio.sleep(self.resolve_interval)
        finally:
            for task in loops.values():
                task.cancel()
            await asyncio.gather(*loops.values(), return_exceptions=True)

    async def _resolve_targets(self, last: dict[str, list[str]]) -> list[str]:
        out: list[str] = []
        loop = asyncio.get_running_loop()
        for entry in (e.strip() for e in self.orchestrator.split(",")):
            if not entry:
                continue
            if not entry.startswith("dns:///"):
                if entry not in out:
                    out.append(entry)
                continue
            host, port = _split_host_port(entry[len("dns:///"):])
            if not host or not port:
                log.warning("orchestrator address is not dns:///host:port: orchestrator=%s", entry)
                continue
            try:
                infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), 5.0)
                addrs = sorted({str(i[4][0]) for i in infos})
            except (OSError, asyncio.TimeoutError) as e:
                log.warning("cannot resolve the orchestrator's name; keeping the addresses it had: "
                            "orchestrator=%s error=%s", entry, e)
                addrs = last.get(entry, [])
            last[entry] = addrs
            for a in addrs:
                t = _join_host_port(a, port)
                if t not in out:
                    out.append(t)
        return out

    def _channel(self, target: str) -> grpc.aio.Channel:
        options = [
            # Keepalive as pkg/worker: a ping every 10 s, with or without calls.
            ("grpc.keepalive_time_ms", 10000),
            ("grpc.keepalive_timeout_ms", 5000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # The connection's own reconnect backoff, within the registration loop's cap.
            ("grpc.initial_reconnect_backoff_ms", int(self.min_backoff * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(max(self.min_backoff, self.max_backoff / 1.2) * 1000)),
            ("grpc.min_reconnect_backoff_ms", 5000),
            ("grpc.service_config_disable_resolution", 1),
            ("grpc.enable_retries", 0),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        return grpc.aio.insecure_channel(target, options=_merge_options(options, self._channel_options))

    async def _register_loop(self, target: str) -> None:
        channel = self._channel(target)
        failures = 0
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._wait_reachable(channel, target)
                start = loop.time()
                err = await self._session(channel, target)
                self._set_registered(target, None)
                if self._draining:
                    # The orchestrator refuses a worker whose health answers NOT_SERVING, as
                    # a draining one does: registering again would only be refused, every
                    # second, until the drain ends.
                    log.info("registration stream ended while draining: not registering again: orchestrator=%s "
                             "error=%s", target, err)
                    return
                if loop.time() - start > 10 and not isinstance(err, _Refused):
                    failures = 0
                delay = _backoff(failures, self.min_backoff, self.max_backoff)
                if isinstance(err, _Refused) and err.retry_after > delay:
                    delay = min(err.retry_after, self.max_backoff)
                failures += 1
                log.warning("registration stream ended; reconnecting: orchestrator=%s error=%s retry_in=%.3fs",
                            target, err, delay)
                await asyncio.sleep(delay)
        finally:
            await channel.close()

    async def _wait_reachable(self, channel: grpc.aio.Channel, target: str) -> None:
        since = time.monotonic()
        state = channel.get_state(try_to_connect=True)
        while state != grpc.ChannelConnectivity.READY:
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), UNREACHABLE_NOTICE)
            except asyncio.TimeoutError:
                log.warning("cannot reach the orchestrator; still trying: orchestrator=%s state=%s for=%ds",
                            target, channel.get_state().name, round(time.monotonic() - since))
            state = channel.get_state(try_to_connect=True)

    async def _session(self, channel: grpc.aio.Channel, target: str) -> Exception:
        """Runs one registration stream until it ends; returns how it ended."""
        assert self._drain_started is not None and self._drain_sent is not None
        connect = channel.stream_stream(pb.REGISTRY_CONNECT, request_serializer=_serialize,
                                        response_deserializer=pb.ConnectResponse.FromString)
        call = connect(wait_for_ready=True)
        beat: asyncio.Task[None] | None = None
        try:
            await call.write(pb.ConnectRequest(register=self._registration))
            first = await call.read()
            if first is grpc.aio.EOF:
                return ConnectionError(f"the orchestrator ended the stream without an ack: {await call.code()}")
            if first.WhichOneof("message") != "ack":
                return ConnectionError(f"orchestrator answered the registration with {first.WhichOneof('message')}, "
                                       "not an ack")
            ack = first.ack
            if not ack.accepted:
                self._last_rejections = list(ack.rejections)
                for r in ack.rejections:
                    log.error("orchestrator refused registration: group=%s tool=%s reason=%s", r.group, r.tool,
                              r.reason)
                retry = 0.0
                message = "registration refused"
                try:
                    while await call.read() is not grpc.aio.EOF:
                        pass
                except grpc.aio.AioRpcError as e:
                    d = parse_status_details(_find(e.trailing_metadata(), STATUS_DETAILS_KEY))
                    retry = d.retry_delay or 0.0
                    message = "registration refused: " + _describe(e)
                return _Refused(message, retry)
            self._last_rejections = []
            interval = pb.duration_ns(ack.heartbeat_interval) / 1e9 if ack.HasField("heartbeat_interval") else 0
            if interval <= 0:
                interval = 2.0
            self._set_registered(target, ack.lease_id)
            log.info("registered with orchestrator: orchestrator=%s lease_id=%s heartbeat=%.3gs", target,
                     ack.lease_id, interval)
            beat = asyncio.create_task(self._heartbeats(call, interval))
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    return ConnectionError("orchestrator closed the registration stream")
                if msg.WhichOneof("message") == "drain":
                    log.info("drain requested by orchestrator: reason=%s", msg.drain.reason)
                    if self._stop is not None:
                        self._stop.set()
        except grpc.aio.AioRpcError as e:
            return ConnectionError(_describe(e))
        except (ConnectionError, OSError) as e:
            return e
        finally:
            if beat is not None:
                beat.cancel()
                try:
                    await beat
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
            call.cancel()

    async def _heartbeats(self, call: Any, interval: float) -> None:
        """Sends a heartbeat every interval, and Draining once the drain starts. The
        heartbeats go on while the worker drains: its lease must outlive the calls it
        finishes, or the orchestrator, once the lease expired, would probe it, find it
        NOT_SERVING and fail them."""
        assert self._drain_started is not None and self._drain_sent is not None
        drain: asyncio.Task[Any] | None = asyncio.create_task(self._drain_started.wait())
        next_beat = asyncio.get_running_loop().time() + interval
        try:
            while True:
                wait = max(next_beat - asyncio.get_running_loop().time(), 0.0)
                if drain is not None:
                    await asyncio.wait({drain}, timeout=wait)
                    if drain.done():
                        drain = None
                        await call.write(pb.ConnectRequest(draining=pb.Draining(reason="worker shutting down")))
                        self._drain_sent.set()
                        continue  # the stream stays open until the drain ends
                else:
                    await asyncio.sleep(wait)
                next_beat = asyncio.get_running_loop().time() + interval
                await call.write(pb.ConnectRequest(heartbeat=pb.Heartbeat(in_flight=self._active)))
        except Exception as e:  # noqa: BLE001 (any failure ends the session, which then reconnects)
            log.debug("heartbeat failed: %s", e)
            call.cancel()
        finally:
            if drain is not None:
                drain.cancel()

    def _set_registered(self, target: str, lease: str | None) -> None:
        was = bool(self._registered)
        if lease is None:
            self._registered.pop(target, None)
        else:
            self._registered[target] = lease
        now = bool(self._registered)
        if self._registered_event is not None:
            if now:
                self._registered_event.set()
            else:
                self._registered_event.clear()
        if was != now and self.on_registered is not None:
            try:
                self.on_registered(now)
            except Exception:  # noqa: BLE001 (a callback's failure is not the worker's)
                log.exception("on_registered failed")

    def _set_all_unregistered(self) -> None:
        for t in list(self._registered):
            self._set_registered(t, None)

    # Serving calls.

    def _worker_handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            pb.WORKER_SERVICE,
            {
                "Invoke": grpc.unary_unary_rpc_method_handler(
                    self._invoke, request_deserializer=pb.InvokeRequest.FromString, response_serializer=_serialize
                ),
                "InvokeStream": grpc.unary_stream_rpc_method_handler(
                    self._invoke_stream,
                    request_deserializer=pb.InvokeStreamRequest.FromString,
                    response_serializer=_serialize,
                ),
            },
        )

    async def _invoke(self, request: pb.Message, context: grpc.aio.ServicerContext) -> pb.Message:
        try:
            return await self._serve(request, context, None)
        except _Refusal as r:
            await context.abort(r.code, r.message, trailing_metadata=r.trailing)
            raise  # abort raises; this is not reached

    async def _invoke_stream(self, request: pb.Message, context: grpc.aio.ServicerContext) -> None:
        lock = asyncio.Lock()
        failed = False

        async def report(status: str) -> None:
            nonlocal failed
            async with lock:
                if failed:
                    return
                try:
                    await context.write(pb.InvokeStreamResponse(progress=pb.ProgressReport(status=status)))
                except Exception:  # noqa: BLE001 (the orchestrator went away; the call ends too)
                    failed = True

        try:
            resp = await self._serve(request.request, context, report)
        except _Refusal as r:
            await context.abort(r.code, r.message, trailing_metadata=r.trailing)
            return
        async with lock:
            failed = True  # no report after the result
            await context.write(pb.InvokeStreamResponse(result=resp))

    async def _admit(self) -> Callable[[], None]:
        """Takes a call in: none while draining, and no more at once than the capacity
        (waiting for a slot). The returned function gives the slot back."""
        assert self._drain_started is not None and self._idle is not None
        if self._draining:
            raise _Refusal("WORKER_DRAINING", "worker is draining")
        self._calls += 1

        def end_call() -> None:
            self._calls -= 1
            if self._draining and self._calls == 0 and self._idle is not None:
                self._idle.set()

        slots = self._slots
        if slots is not None:
            acquire = asyncio.ensure_future(slots.acquire())
            drain = asyncio.ensure_future(self._drain_started.wait())
            try:
                await asyncio.wait({acquire, drain}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                acquire.cancel()
                drain.cancel()
                if acquire.done() and not acquire.cancelled():
                    slots.release()
                end_call()
                raise
            drain.cancel()
            if not acquire.done():
                acquire.cancel()
                end_call()
                raise _Refusal("WORKER_DRAINING", "worker is draining")
        self._active += 1

        def release() -> None:
            self._active -= 1
            if slots is not None:
                slots.release()
            end_call()

        return release

    async def _serve(self, request: pb.Message, context: grpc.aio.ServicerContext,
                     progress: Callable[[str], Any] | None) -> pb.Message:
        # A call whose key the idempotency ledger has answered is answered so even while
        # the worker drains or is at its capacity, as the Go worker does: only a call that
        # runs is admitted (_run_admitted).
        return await self._invoke_once(request, context, progress)

    async def _run_admitted(self, request: pb.Message, context: grpc.aio.ServicerContext,
                            progress: Callable[[str], Any] | None,
                            calls: list[Context] | None = None) -> tuple[pb.Message, bool]:
        """_invoke_call once the call is admitted (not draining, a capacity slot). The slot
        is held until the call's thread (a synchronous tool's) ends, though the call be
        answered or its caller gone: nothing stops a thread. calls receives the call's
        Context."""
        release = await self._admit()
        calls = [] if calls is None else calls
        try:
            return await self._invoke_call(request, context, progress, calls)
        finally:
            thread = calls[0]._thread_running() if calls else None
            if thread is None:
                release()
            else:
                loop = asyncio.get_running_loop()
                thread.add_done_callback(lambda _: _call_soon(loop, release))

    def _keep_late(self, name: str, calls: list[Context], key: str, ledger: Ledger,
                   release: Callable[[], None]) -> bool:
        """For a call answered (or gone) while its thread runs on: holds the key until the
        thread ends, keeping the answer it then makes unless it failed, so that the call
        sent again gets it rather than run the tool a second time. False when no thread
        runs."""
        t = self._catalog.tools.get(name)
        thread = calls[0]._threads[-1] if calls and calls[0]._threads else None
        if t is None or thread is None:
            return False
        ctx, tool_name, running = calls[0], t.name, thread

        async def keep() -> None:
            try:
                try:
                    out = await asyncio.wrap_future(running)
                except Exception as e:  # noqa: BLE001 (a tool's failure is an answer)
                    out = _failure(tool_name, e)
                finally:
                    # The drain waits for the answer's store (at most LEDGER_STORE_TIMEOUT),
                    # not for the thread, which its drain_timeout bounds.
                    task = asyncio.current_task()
                    if task is not None:
                        self._stores.add(task)
                        task.add_done_callback(self._stores.discard)
                resp, signal_pb = _outcome(tool_name, out)
                resp = self._respond(tool_name, resp, ctx, None, signal_pb, False)
                if resp.WhichOneof("outcome") != "error":
                    await asyncio.wait_for(ledger.store(key, resp.SerializeToString(), self.ledger_ttl),
                                           LEDGER_STORE_TIMEOUT)
            except Exception as e:  # noqa: BLE001 (logged: the call sent again runs)
                log.warning("the late answer of a call could not be kept in the idempotency ledger: tool=%s "
                            "error=%s", name, e)
            finally:
                release()

        task = asyncio.ensure_future(keep())
        self._late.add(task)  # held: the loop keeps only a weak reference to a task
        task.add_done_callback(self._late.discard)
        return True

    def _ledger_for(self, name: str) -> Ledger | None:
        if self._ledger is not None:
            return self._ledger
        t = self._catalog.tools.get(name)
        if t is not None and t.ledger:
            return self._tool_ledger
        return None

    async def _invoke_once(self, request: pb.Message, context: grpc.aio.ServicerContext,
                           progress: Callable[[str], Any] | None) -> pb.Message:
        """The call through the idempotency ledger: a call whose key has an answer is
        answered with it without running the tool; otherwise the tool runs and its answer
        is kept, unless the call was cancelled and failed."""
        ledger = self._ledger_for(request.tool)
        if ledger is None or not request.idempotency_key:
            resp, _ = await self._run_admitted(request, context, progress)
            return resp
        key = request.tool + "\x00" + request.idempotency_key
        release = await self._keys.acquire(key)
        held = True  # the key's lock is released at the end, or once a store cut off ends
        try:
            try:
                kept = await ledger.load(key)
            except Exception as e:  # noqa: BLE001 (an unreadable ledger runs the call)
                log.warning("idempotency ledger unreadable: running the call: tool=%s error=%s", request.tool, e)
                kept = None
            if kept is not None:
                resp = pb.InvokeResponse()
                try:
                    resp.ParseFromString(kept)
                    log.info("call answered from the idempotency ledger: tool=%s idempotency_key=%s", request.tool,
                             request.idempotency_key)
                    return resp
                except Exception:  # noqa: BLE001 (a damaged answer runs the call again)
                    pass
            if context.cancelled() or _cancelling():
                # The caller left while the call waited for its key or the ledger was read
                # (a ledger that turns its cancellation into an error fails so): the call
                # does not run. Run, its answer would replace the one perhaps kept already.
                raise asyncio.CancelledError
            calls: list[Context] = []
            try:
                resp, cancelled = await self._run_admitted(request, context, progress, calls)
            except asyncio.CancelledError:
                if self._keep_late(request.tool, calls, key, ledger, release):
                    held = False
                raise
            if cancelled and resp.WhichOneof("outcome") == "error":
                # The caller went away while the tool ran, and the tool failed: that is
                # not the call's outcome, and the call sent again must run. A thread that
                # runs on may still take its effect: its answer is kept once it ends.
                if self._keep_late(request.tool, calls, key, ledger, release):
                    held = False
                return resp
            # The caller may leave (its orchestrator died) while the answer is stored: the
            # store goes on all the same, within ten seconds, its effect having happened,
            # and holds the key until it ends (cancelled with the call, the call sent again
            # ran a second time).
            store = asyncio.ensure_future(asyncio.wait_for(
                ledger.store(key, resp.SerializeToString(), self.ledger_ttl), LEDGER_STORE_TIMEOUT))

            def stored(f: asyncio.Future[None]) -> None:
                if not f.cancelled() and f.exception() is not None:
                    log.warning("the call's answer could not be kept in the idempotency ledger: tool=%s error=%s",
                                request.tool, f.exception())

            store.add_done_callback(stored)
            try:
                await asyncio.shield(store)
            except asyncio.CancelledError:
                held = False
                self._stores.add(store)  # the drain waits for it
                store.add_done_callback(self._stores.discard)
                store.add_done_callback(lambda _: release())
                raise
            except Exception:  # noqa: BLE001 (logged by stored)
                pass
            return resp
        finally:
            if held:
                release()

    async def _invoke_call(self, request: pb.Message, context: grpc.aio.ServicerContext,
                           progress: Callable[[str], Any] | None, calls: list[Context]) -> tuple[pb.Message, bool]:
        """Runs one call; returns its answer and whether the call was cancelled (its
        caller went away or its deadline passed) by the time it ended."""
        name = request.tool
        cat = self._catalog
        t = cat.tools.get(name)
        served = cat.facades.get(name)
        if t is None and served is None:
            # The call did not run; the orchestrator sends it to another replica.
            raise _Refusal("UNKNOWN_TOOL", f"tool '{_truncate(name, 64)}' is not served by worker {self.id}")
        validator = t.validator if t is not None else served.facade.validator  # type: ignore[union-attr]
        if request.created_tool:
            if not TOOL_NAME_RE.match(request.created_tool):
                return _error(ErrorCode.INVALID_ARGUMENTS,
                              f"created_tool {go_quote(request.created_tool)} must match {TOOL_NAME_RE.pattern}"), False
            return _error(ErrorCode.FAILED, f"tool '{request.created_tool}' cannot be called: '{name}' is not a "
                                            "template, so it serves no created tools"), False
        try:
            args = validator.validate_arguments(request.arguments_json)
        except ArgumentsError as e:
            return _error(ErrorCode.INVALID_ARGUMENTS, f"invalid arguments for tool '{name}': {e}"), False
        metadata = tuple((str(k), v) for k, v in (context.invocation_metadata() or ()))
        try:
            values = ctxcodec.decode(metadata, self.context_max_bytes)
        except ctxcodec.ContextError as e:
            return _error(ErrorCode.INVALID_ARGUMENTS, f"the call's context cannot be read: {e}"), False
        remaining = context.time_remaining()
        deadline = time.time() + remaining if remaining is not None else None
        board = Blackboard([BlackboardObject.from_proto(o) for o in request.blackboard], MAX_BLACKBOARD_UPDATE_BYTES)
        ctx = Context(tool=name, run_id=request.run_id, loop_id=request.loop_id, call_id=request.call_id,
                      tenant=request.tenant, idempotency_key=request.idempotency_key, values=values,
                      state=bytes(request.state), blackboard=board, deadline=deadline, metadata=metadata,
                      progress=progress, loop=asyncio.get_running_loop())
        context.add_done_callback(lambda _: ctx._cancel())
        calls.append(ctx)
        selection: pb.Message | None = None
        signal_pb: pb.Message | None = None
        if served is not None:
            resp, selection = await self._select(served, ctx, args, remaining)
        else:
            assert t is not None
            resp, signal_pb = await self._call(t, ctx, args, remaining)
        cancelled = ctx.cancelled or bool(context.cancelled()) or (ctx.deadline is not None and
                                                                   time.time() >= ctx.deadline)
        return self._respond(name, resp, ctx, selection, signal_pb, served is not None), cancelled

    async def _run_guarded(self, ctx: Context, coro: Any, remaining: float | None) -> tuple[Any, bool]:
        """Runs a tool's coroutine within the call's deadline: its result, and False; or
        True when the deadline ended it."""
        try:
            if remaining is None:
                return await coro, False
            return await asyncio.wait_for(coro, max(remaining, 0.0)), False
        except asyncio.TimeoutError:
            ctx._cancel()
            return None, True

    async def _call(self, t: Tool, ctx: Context, args: dict[str, Any],
                    remaining: float | None) -> tuple[pb.Message, pb.Message | None]:
        try:
            out, timed_out = await self._run_guarded(ctx, t.handler(ctx, args), remaining)
            if timed_out:
                return _error(ErrorCode.TIMEOUT, f"tool '{t.name}' ran past the call's deadline"), None
        except asyncio.CancelledError:
            ctx._cancel()
            raise
        except Exception as e:  # noqa: BLE001 (a tool's failure is an answer)
            out = _failure(t.name, e)
        return _outcome(t.name, out)

    async def _select(self, served: _Served, ctx: Context, args: dict[str, Any],
                      remaining: float | None) -> tuple[pb.Message, pb.Message | None]:
        f = served.facade
        try:
            chosen, timed_out = await self._run_guarded(ctx, f.select(ctx, args), remaining)
            if timed_out:
                return _error(ErrorCode.TIMEOUT, f"facade '{f.name}' ran past the call's deadline"), None
        except ToolError as e:
            return _error(e.code, f"selecting the tools of '{f.name}': {e.message}"), None
        except asyncio.CancelledError:
            ctx._cancel()
            raise
        except Exception as e:  # noqa: BLE001 (a selector's failure, or a signal: the model hears of it)
            return _error(ErrorCode.FAILED, f"selecting the tools of '{f.name}': {str(e) or 'Tool invocation failed'}"), None
        names: list[str] = []
        for c in chosen:
            cname = c if isinstance(c, str) else c.name
            msg = self._unservable(served.group, c)
            if msg:
                return _error(ErrorCode.FAILED, f"facade '{f.name}' selected {msg}"), None
            if cname not in names:
                names.append(cname)
        sel = pb.Selection(tools=names, state=ctx.state)
        return pb.InvokeResponse(text=unfold_message(names, f.usage_notes)), sel

    def _unservable(self, group: str, c: Child | str) -> str:
        name = c if isinstance(c, str) else c.name
        if self._catalog.group.get(name) != group:
            return (f"'{name}', which is not a tool of group '{group}': a selector may only select the group's "
                    "tools (list them among the facade's children), so that every replica can serve them")
        if isinstance(c, Tool):
            h = self._catalog.hashes.get(name)
            if h is not None and h != c.content_hash:
                return (f"a tool '{name}' whose definition differs from the one group '{group}' registers: a "
                        "selector may only select the group's tools as registered, so that every replica can "
                        "serve them")
        return ""

    def _respond(self, name: str, resp: pb.Message, ctx: Context, selection: pb.Message | None,
                 signal_pb: pb.Message | None, facade: bool) -> pb.Message:
        if signal_pb is not None:
            resp = pb.InvokeResponse(signal=signal_pb)
        if selection is not None:
            resp.selection.CopyFrom(selection)
        added = ctx.blackboard.added
        if added:
            if len(added) > MAX_BLACKBOARD_UPDATES:
                return _error(ErrorCode.FAILED, f"tool '{name}' ran, but it added {len(added)} objects to the "
                                                f"blackboard, over the {MAX_BLACKBOARD_UPDATES} a call may add, "
                                                "and they were dropped")
            resp.blackboard_updates.extend(o.to_proto() for o in added)
        # A failed selection binds nothing; any other call returns the state it set.
        if ctx.state_changed and (not facade or selection is not None):
            resp.state = ctx.state
            resp.state_changed = True
        n = resp.ByteSize()
        if n > self.max_result_bytes:
            log.warning("tool result over the size limit: answering with an error: tool=%s bytes=%d limit=%d",
                        name, n, self.max_result_bytes)
            return _error(ErrorCode.FAILED, f"tool '{name}' ran, but its result is {n} bytes, over the "
                                            f"{self.max_result_bytes} bytes a result may have, and was dropped. "
                                            "Call it again in a way that returns less.")
        return resp


def _merge_options(defaults: Sequence[tuple[str, Any]], given: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """gRPC options: the defaults with the given ones in place of those of the same name
    (gRPC itself keeps the first of two options of one name)."""
    merged = dict(defaults)
    merged.update(given)
    return list(merged.items())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _find(md: Iterable[tuple[str, Any]] | None, key: str) -> Any:
    for k, v in md or ():
        if k == key:
            return v
    return None


def _describe(e: grpc.aio.AioRpcError) -> str:
    """A status as a log shows it: code, toolmesh reason (if any), message."""
    d = parse_status_details(_find(e.trailing_metadata(), STATUS_DETAILS_KEY))
    return str(e.code().name) + (" " + d.reason if d.reason else "") + ": " + str(e.details() or "")


def _cancelling() -> bool:
    """Whether the running task was asked to stop (its cancellation perhaps swallowed by
    what it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _truncate(s: str, n: int) -> str:
    b = s.encode("utf-8")
    if len(b) <= n:
        return s
    return cut_utf8(s, n) + f"\u2026 ({len(b)} bytes)"


def _failure(name: str, e: Exception) -> Any:
    """What a tool that raised e returned: the signal it raised, or an error result."""
    if isinstance(e, Signal):
        return e
    if isinstance(e, ToolError):
        return ErrorResult(e.message, e.code)
    log.debug("tool %s failed", name, exc_info=e)
    return ErrorResult(str(e) or "Tool invocation failed")


def _outcome(name: str, out: Any) -> tuple[pb.Message, pb.Message | None]:
    """The response (and signal) carrying what a tool returned."""
    try:
        if isinstance(out, Signal):
            return _signal(name, out)
        return _result(name, out), None
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        # A result the wire cannot carry (text with lone surrogates, an artifact's json
        # that is not text): the call ran, so the model hears of it, as from the Go and
        # TypeScript workers; a bare status would read as a worker that failed.
        why = str(e).encode("utf-8", "replace").decode("utf-8")
        return _error(ErrorCode.FAILED, f"tool '{name}' returned a result that cannot be sent: {why}"), None


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> None:
    """fn on loop, from any thread; nothing once the loop is closed (the worker is gone)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn)


def _error(code: ErrorCode, message: str) -> pb.Message:
    # A message says what failed, often quoting what the tool was given (a file's name):
    # characters UTF-8 cannot encode are replaced, as the Go worker does, so that the
    # model reads it.
    return pb.InvokeResponse(error=pb.ToolError(message=valid_text(message), code=code.value))


def _result(name: str, out: Any) -> pb.Message:
    """A tool's answer as an InvokeResponse."""
    # Text for the model is repaired (characters UTF-8 cannot encode become U+FFFD), as the
    # Go worker and the orchestrator repair it; what is not text for the model is not.
    if isinstance(out, str):
        return pb.InvokeResponse(text=valid_text(out))
    if isinstance(out, ErrorResult):
        return _error(out.code, out.message)
    if isinstance(out, ArtifactResult):
        return pb.InvokeResponse(artifact=pb.ArtifactResult(content=valid_text(out.content),
                                                            artifact=out.artifact.to_proto()))
    if isinstance(out, Artifact):
        return pb.InvokeResponse(artifact=pb.ArtifactResult(content=out.json or "", artifact=out.to_proto()))
    if out is None:
        return pb.InvokeResponse(text="")
    try:
        return pb.InvokeResponse(text=_to_json(out))
    except (TypeError, JSONError) as e:
        return _error(ErrorCode.FAILED, f"cannot encode the tool's output as JSON: {e}")


def _signal(name: str, s: Signal) -> tuple[pb.Message, pb.Message | None]:
    if isinstance(s, Replan):
        if len(s.updates) > MAX_BLACKBOARD_UPDATES:
            return _error(ErrorCode.FAILED, f"tool '{name}' asked to replan, but its request adds {len(s.updates)} "
                                            f"objects to the blackboard, over the {MAX_BLACKBOARD_UPDATES} a call "
                                            "may add"), None
        size = 0
        from .tool import _check_object

        for i, o in enumerate(s.updates):
            try:
                _check_object(o)
            except ValueError as e:
                return _error(ErrorCode.FAILED, f"tool '{name}' asked to replan, but blackboard object {i + 1} of "
                                                f"its request was refused: {e}"), None
            size += o.size
        if size > MAX_BLACKBOARD_UPDATE_BYTES:
            return _error(ErrorCode.FAILED, f"tool '{name}' asked to replan, but the objects of its request are "
                                            f"{size} bytes (JSON and blobs' data), over the "
                                            f"{MAX_BLACKBOARD_UPDATE_BYTES} a call may add"), None
        return pb.InvokeResponse(text=""), pb.ControlSignal(
            replan=pb.Replan(reason=s.reason, blackboard_updates=[o.to_proto() for o in s.updates]))
    if isinstance(s, Terminate):
        scope = 2 if s.scope == "action" else 1
        return pb.InvokeResponse(text=""), pb.ControlSignal(terminate=pb.Terminate(scope=scope, reason=s.reason))
    return _error(ErrorCode.FAILED, str(s) or "Tool invocation failed"), None


__all__ += ["DEFAULT_MAX_RESULT_BYTES", "MAX_MESSAGE_BYTES"]
