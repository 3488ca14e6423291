"""``grpc.health.v1.Health``: the serving status of each service, for the orchestrator's
probe and for Kubernetes' gRPC probes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from . import pb

__all__ = ["HealthServicer"]

MAX_WATCHERS = 1024


class HealthServicer:
    """Serves Check and Watch from a table of statuses."""

    def __init__(self) -> None:
        self._status: dict[str, int] = {}
        self._watchers: dict[str, set[asyncio.Queue[int]]] = {}
        self._watching = 0
        self._shut = False

    def set(self, service: str, status: int) -> None:
        """Sets a service's status (``pb.ServingStatus.SERVING``, ...); ignored after
        :meth:`shutdown`."""
        if self._shut:
            return
        self._set(service, status)

    def _set(self, service: str, status: int) -> None:
        self._status[service] = status
        for q in self._watchers.get(service, ()):
            if q.full():
                q.get_nowait()
            q.put_nowait(status)

    def shutdown(self) -> None:
        """Turns every service NOT_SERVING for good."""
        self._shut = True
        for service in list(self._status):
            self._set(service, pb.ServingStatus.NOT_SERVING)

    def status(self, service: str) -> int | None:
        return self._status.get(service)

    async def check(self, request: pb.Message, context: grpc.aio.ServicerContext) -> pb.Message:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return pb.HealthCheckResponse(status=status)

    async def watch(self, request: pb.Message, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.Message]:
        if self._watching >= MAX_WATCHERS:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many health watchers")
        service = request.service
        q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        self._watchers.setdefault(service, set()).add(q)
        self._watching += 1
        try:
            last = self._status.get(service, pb.ServingStatus.SERVICE_UNKNOWN)
            yield pb.HealthCheckResponse(status=last)
            while True:
                status = await q.get()
                if status != last:
                    last = status
                    yield pb.HealthCheckResponse(status=status)
        finally:
            self._watching -= 1
            watchers = self._watchers.get(service)
            if watchers is not None:
                watchers.discard(q)
                if not watchers:
                    del self._watchers[service]

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler that serves the service."""
        return grpc.method_handlers_generic_handler(
            pb.HEALTH_SERVICE,
            {
                "Check": grpc.unary_unary_rpc_method_handler(
                    self.check,
                    request_deserializer=pb.HealthCheckRequest.FromString,
                    response_serializer=_serialize,
                ),
                "Watch": grpc.unary_stream_rpc_method_handler(
                    self.watch,
                    request_deserializer=pb.HealthCheckRequest.FromString,
                    response_serializer=_serialize,
                ),
            },
        )


def _serialize(m: pb.Message) -> bytes:
    return bytes(m.SerializeToString())
