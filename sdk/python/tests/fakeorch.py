"""A fake orchestrator for the worker's tests: a ToolRegistryService that records what
workers send, and a client of their ToolWorkerService."""

from __future__ import annotations

import toolmesh  # noqa: F401 (first: it finds Debian's grpc for another interpreter)

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from toolmesh import pb
from toolmesh.errors import STATUS_DETAILS_KEY, parse_status_details, status_details


# The worker's logs (refusals, reconnects) are expected here.
logging.getLogger("toolmesh").setLevel(logging.CRITICAL)


def _ser(m: Any) -> bytes:
    return bytes(m.SerializeToString())


class FakeRegistry:
    """Serves ToolRegistryService.Connect: acks registrations (after probing the worker's
    health, as the orchestrator does), refuses the first ``refuse`` of them with
    WORKER_ID_IN_USE, and records every message."""

    def __init__(self, heartbeat: float = 0.2, refuse: int = 0) -> None:
        self.heartbeat = heartbeat
        self.refuse = refuse
        self.registrations: list[Any] = []
        self.heartbeats: list[int] = []
        self.draining: list[str] = []
        self.probes: list[int] = []
        self.streams: list[grpc.aio.ServicerContext] = []
        self.ended = 0
        self.server: grpc.aio.Server | None = None
        self.address = ""
        self.changed = asyncio.Event()

    async def start(self, port: int = 0) -> None:
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(pb.REGISTRY_SERVICE, {
            "Connect": grpc.stream_stream_rpc_method_handler(
                self._connect, request_deserializer=pb.ConnectRequest.FromString, response_serializer=_ser),
        }),))
        p = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.address = f"127.0.0.1:{p}"
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(0)

    def _note(self) -> None:
        self.changed.set()

    async def _probe(self, address: str) -> int:
        async with grpc.aio.insecure_channel(address) as ch:
            check = ch.unary_unary(pb.HEALTH_CHECK, request_serializer=_ser,
                                   response_deserializer=pb.HealthCheckResponse.FromString)
            resp = await check(pb.HealthCheckRequest(service=pb.WORKER_SERVICE), timeout=3)
            return int(resp.status)

    async def _connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("message") != "register":
            code, details = status_details("REGISTRATION_INVALID", "first message is not register")
            await context.abort(code, "first message is not register", trailing_metadata=((STATUS_DETAILS_KEY, details),))
        reg = first.register
        self.registrations.append(reg)
        self._note()
        if self.refuse > 0:
            self.refuse -= 1
            await context.write(pb.ConnectResponse(ack=pb.RegistrationAck(
                accepted=False, rejections=[pb.Rejection(reason="worker id in use")])))
            code, details = status_details("WORKER_ID_IN_USE", "worker id in use", retry_delay=0.05)
            await context.abort(code, "worker id in use", trailing_metadata=((STATUS_DETAILS_KEY, details),))
        self.probes.append(await self._probe(reg.address))
        ack = pb.RegistrationAck(accepted=True, heartbeat_interval=pb.duration(self.heartbeat),
                                 lease_id=f"lease-{len(self.registrations)}")
        await context.write(pb.ConnectResponse(ack=ack))
        self.streams.append(context)
        try:
            while True:
                m = await context.read()
                if m is grpc.aio.EOF:
                    return
                kind = m.WhichOneof("message")
                if kind == "heartbeat":
                    self.heartbeats.append(m.heartbeat.in_flight)
                elif kind == "draining":
                    self.draining.append(m.draining.reason)
                self._note()
        finally:
            self.ended += 1
            self._note()

    async def wait_for(self, cond: Any, timeout: float = 5.0) -> None:
        """Waits until cond() holds."""
        async def loop() -> None:
            while not cond():
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
        await asyncio.wait_for(loop(), timeout)


class WorkerClient:
    """Calls a worker as the orchestrator does."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self._invoke = self.channel.unary_unary(pb.WORKER_INVOKE, request_serializer=_ser,
                                                response_deserializer=pb.InvokeResponse.FromString)
        self._stream = self.channel.unary_stream(pb.WORKER_INVOKE_STREAM, request_serializer=_ser,
                                                 response_deserializer=pb.InvokeStreamResponse.FromString)
        self._health = self.channel.unary_unary(pb.HEALTH_CHECK, request_serializer=_ser,
                                                response_deserializer=pb.HealthCheckResponse.FromString)

    async def close(self) -> None:
        await self.channel.close()

    async def invoke(self, tool: str, args: str = "{}", *, metadata: Sequence[tuple[str, Any]] = (),
                     timeout: float = 5.0, **fields: Any) -> Any:
        req = pb.InvokeRequest(tool=tool, arguments_json=args, **fields)
        return await self._invoke(req, metadata=tuple(metadata) or None, timeout=timeout)

    async def invoke_stream(self, tool: str, args: str = "{}", **fields: Any) -> list[Any]:
        req = pb.InvokeStreamRequest(request=pb.InvokeRequest(tool=tool, arguments_json=args, **fields))
        return [m async for m in self._stream(req, timeout=5)]

    async def health(self, service: str) -> int:
        resp = await self._health(pb.HealthCheckRequest(service=service), timeout=3)
        return int(resp.status)


def rpc_reason(e: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str, float | None]:
    d = parse_status_details(next((v for k, v in (e.trailing_metadata() or ()) if k == STATUS_DETAILS_KEY), None))
    return e.code(), d.reason, d.retry_delay
