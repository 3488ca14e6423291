"""The client of the orchestrator's ``toolmesh.v1.OrchestratorService``, on asyncio.

::

    async with Client("127.0.0.1:7070", token="…") as c:
        async for ev in c.run({"prompt": "What is 2 + 3?", "toolGroups": ["math"]}):
            if ev.WhichOneof("event") == "final_result":
                print(ev.final_result.text)

Requests are messages of :mod:`toolmesh.pb` or dicts in the protobuf JSON mapping
(lowerCamelCase or the proto's field names). Responses are messages. A failed call
raises :class:`~toolmesh.ToolmeshError` with the status code, the ErrorInfo reason and
the RetryInfo delay the orchestrator sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from . import pb
from .errors import ToolmeshError

__all__ = ["Client"]

MAX_MESSAGE_BYTES = 64 << 20


def _serialize(m: pb.Message) -> bytes:
    return bytes(m.SerializeToString())


class Client:
    """A connection to one orchestrator.

    address: ``host:port``. token: a bearer token, sent as ``authorization: Bearer …``
    with every call. credentials: ``grpc.ssl_channel_credentials(...)`` for TLS; None
    for a plaintext (h2c) connection. options: further gRPC channel options.
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        *,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        opts = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", 4 << 20),
            # The orchestrator allows a ping every 5 s at most; gRPC's defaults send none.
            ("grpc.keepalive_time_ms", 30000),
            ("grpc.keepalive_timeout_ms", 10000),
        ]
        merged = dict(opts)
        merged.update(options)  # gRPC itself keeps the first of two options of one name
        opts = list(merged.items())
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(address, credentials, options=opts)
        else:
            self._channel = grpc.aio.insecure_channel(address, options=opts)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", "Bearer " + token),) if token else ()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connection."""
        await self._channel.close()

    @property
    def channel(self) -> grpc.aio.Channel:
        """The underlying channel."""
        return self._channel

    async def _unary(self, method: str, request: Any, req_type: str, resp_type: str,
                     timeout: float | None) -> pb.Message:
        req = pb.parse(req_type, request)
        call = self._channel.unary_unary(pb.orchestrator_method(method), request_serializer=_serialize,
                                         response_deserializer=pb.message_class(resp_type).FromString)
        try:
            return await call(req, metadata=self._metadata or None, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise ToolmeshError.from_rpc_error(e) from None

    async def _stream(self, method: str, req: pb.Message, timeout: float | None) -> AsyncIterator[pb.Message]:
        stub = self._channel.unary_stream(pb.orchestrator_method(method), request_serializer=_serialize,
                                          response_deserializer=pb.RunResponse.FromString)
        call = stub(req, metadata=self._metadata or None, timeout=timeout)
        try:
            while True:
                try:
                    ev = await call.read()
                except grpc.aio.AioRpcError as e:
                    raise ToolmeshError.from_rpc_error(e) from None
                if ev is grpc.aio.EOF:
                    return
                yield ev
        finally:
            # Leaving the loop early cancels the call (the orchestrator then cancels a run
            # that is not detached).
            call.cancel()

    def run(self, request: pb.Message | Mapping[str, Any], *, timeout: float | None = None) -> AsyncIterator[pb.Message]:
        """Starts a run and yields its events (``RunResponse``) as they arrive, until the
        final result; a run that fails raises after its ``error`` event."""
        return self._stream("Run", pb.parse("toolmesh.v1.RunRequest", request), timeout)

    def watch_run(self, run_id: str, after_sequence: int = 0, *, timeout: float | None = None,
                  ) -> AsyncIterator[pb.Message]:
        """Yields the events of a run after a sequence number (0: all of them), those the
        journal holds and then the new ones, until the run ends."""
        req = pb.WatchRunRequest(run_id=run_id, after_sequence=after_sequence)
        return self._stream("WatchRun", req, timeout)

    async def get_run(self, run_id: str, *, timeout: float | None = None) -> pb.Message:
        """A run's state (``GetRunResponse``)."""
        return await self._unary("GetRun", {"run_id": run_id}, "toolmesh.v1.GetRunRequest",
                                 "toolmesh.v1.GetRunResponse", timeout)

    async def cancel_run(self, run_id: str, reason: str = "", *, timeout: float | None = None) -> pb.Message:
        """Cancels a run (``CancelRunResponse``: its state after the request)."""
        return await self._unary("CancelRun", {"run_id": run_id, "reason": reason}, "toolmesh.v1.CancelRunRequest",
                                 "toolmesh.v1.CancelRunResponse", timeout)

    async def approve_tool_call(self, run_id: str, call_id: str, approve: bool = True, reason: str = "", *,
                                loop_id: str = "", input_id: str = "", content_json: str = "",
                                timeout: float | None = None) -> pb.Message:
        """Approves (or, with approve=False, denies) a call that waits for approval; or
        answers a question the call's tool asked (``content_json``: a JSON object valid
        against its requested schema; ``input_id`` when the call waits on several)."""
        decision = pb.ApprovalDecision.APPROVAL_DECISION_APPROVE if approve else pb.ApprovalDecision.APPROVAL_DECISION_DENY
        req = pb.ApproveToolCallRequest(run_id=run_id, call_id=call_id, loop_id=loop_id, decision=decision,
                                        reason=reason, input_id=input_id, content_json=content_json)
        return await self._unary("ApproveToolCall", req, "toolmesh.v1.ApproveToolCallRequest",
                                 "toolmesh.v1.ApproveToolCallResponse", timeout)

    async def list_runs(self, request: pb.Message | Mapping[str, Any] | None = None, *,
                        timeout: float | None = None) -> pb.Message:
        """A page of the journal's runs (``ListRunsResponse``); pass its next_page_token
        as page_token for the next."""
        return await self._unary("ListRuns", request, "toolmesh.v1.ListRunsRequest", "toolmesh.v1.ListRunsResponse",
                                 timeout)

    async def list_workers(self, *, timeout: float | None = None) -> pb.Message:
        """The registered workers (``ListWorkersResponse``)."""
        return await self._unary("ListWorkers", None, "toolmesh.v1.ListWorkersRequest",
                                 "toolmesh.v1.ListWorkersResponse", timeout)

    async def list_tools(self, tool_groups: Sequence[str] = (), *, timeout: float | None = None) -> pb.Message:
        """The registered tools, of the given groups or all (``ListToolsResponse``)."""
        return await self._unary("ListTools", {"tool_groups": list(tool_groups)}, "toolmesh.v1.ListToolsRequest",
                                 "toolmesh.v1.ListToolsResponse", timeout)

    async def list_tool_groups(self, *, timeout: float | None = None) -> pb.Message:
        """The tool groups and their workers (``ListToolGroupsResponse``)."""
        return await self._unary("ListToolGroups", None, "toolmesh.v1.ListToolGroupsRequest",
                                 "toolmesh.v1.ListToolGroupsResponse", timeout)

    async def list_tenants(self, *, timeout: float | None = None) -> pb.Message:
        """The tenants' use of their quotas (``ListTenantsResponse``)."""
        return await self._unary("ListTenants", None, "toolmesh.v1.ListTenantsRequest",
                                 "toolmesh.v1.ListTenantsResponse", timeout)
