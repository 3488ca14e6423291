"""The client against a fake OrchestratorService."""

from __future__ import annotations

import toolmesh  # noqa: F401 (first: it finds Debian's grpc for another interpreter)

import asyncio
import unittest
from typing import Any

import grpc
import grpc.aio

from toolmesh import Client, ToolmeshError, pb
from toolmesh.errors import STATUS_DETAILS_KEY, status_details


def _ser(m: Any) -> bytes:
    return bytes(m.SerializeToString())


class FakeOrchestrator:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, dict[str, Any]]] = []

    def _record(self, method: str, req: Any, context: grpc.aio.ServicerContext) -> None:
        self.seen.append((method, req, dict(context.invocation_metadata() or ())))

    async def run(self, req: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("Run", req, context)
        yield pb.RunResponse(run_id="r1", sequence=1, started=pb.RunStarted(model="scripted/x"))
        if req.prompt == "fail":
            yield pb.RunResponse(run_id="r1", sequence=2, error=pb.RunError(
                code=8, message="out of iterations", reason=pb.ErrorReason.ERROR_REASON_MAX_ITERATIONS))
            code, details = status_details("MAX_ITERATIONS", "out of iterations", {"run_id": "r1"})
            await context.abort(code, "out of iterations", trailing_metadata=((STATUS_DETAILS_KEY, details),))
        yield pb.RunResponse(run_id="r1", sequence=3, final_result=pb.FinalResult(text="5"))

    async def get_run(self, req: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("GetRun", req, context)
        if req.run_id != "r1":
            code, details = status_details("RUN_NOT_FOUND", f'run_id: no such run "{req.run_id}"', {"field": "run_id"})
            await context.abort(code, f'run_id: no such run "{req.run_id}"',
                                trailing_metadata=((STATUS_DETAILS_KEY, details),))
        return pb.GetRunResponse(run_id="r1", state=pb.RunState.RUN_STATE_SUCCEEDED)

    async def list_workers(self, req: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("ListWorkers", req, context)
        return pb.ListWorkersResponse(workers=[pb.WorkerStatus(worker_id="w1")])

    async def approve(self, req: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("ApproveToolCall", req, context)
        return pb.ApproveToolCallResponse()

    def handler(self) -> grpc.GenericRpcHandler:
        def h(f: Any, req: str) -> Any:
            return grpc.unary_unary_rpc_method_handler(f, request_deserializer=pb.message_class(req).FromString,
                                                      response_serializer=_ser)

        return grpc.method_handlers_generic_handler(pb.ORCHESTRATOR_SERVICE, {
            "Run": grpc.unary_stream_rpc_method_handler(self.run, request_deserializer=pb.RunRequest.FromString,
                                                        response_serializer=_ser),
            "GetRun": h(self.get_run, "toolmesh.v1.GetRunRequest"),
            "ListWorkers": h(self.list_workers, "toolmesh.v1.ListWorkersRequest"),
            "ApproveToolCall": h(self.approve, "toolmesh.v1.ApproveToolCallRequest"),
        })


class ClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.fake = FakeOrchestrator()
        asyncio.get_running_loop().slow_callback_duration = 1.0  # the test loop runs in debug mode
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((self.fake.handler(),))
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.client = Client(f"127.0.0.1:{port}", token="secret")

    async def asyncTearDown(self) -> None:
        await self.client.close()
        await self.server.stop(0)

    async def test_run_from_a_dict(self) -> None:
        events = [ev async for ev in self.client.run({"prompt": "add", "toolGroups": ["math"], "run_id": "r1",
                                                      "limits": {"timeout": "30s"}})]
        self.assertEqual([e.WhichOneof("event") for e in events], ["started", "final_result"])
        method, req, md = self.fake.seen[0]
        self.assertEqual((method, req.prompt, list(req.tool_groups), req.run_id, req.limits.timeout.seconds),
                         ("Run", "add", ["math"], "r1", 30))
        self.assertEqual(md["authorization"], "Bearer secret")

    async def test_run_error_after_its_event(self) -> None:
        seen = []
        with self.assertRaises(ToolmeshError) as cm:
            async for ev in self.client.run(pb.RunRequest(prompt="fail")):
                seen.append(ev.WhichOneof("event"))
        self.assertEqual(seen, ["started", "error"])
        e = cm.exception
        self.assertEqual((e.code, e.reason, e.run_id, e.message),
                         (grpc.StatusCode.RESOURCE_EXHAUSTED, "MAX_ITERATIONS", "r1", "out of iterations"))

    async def test_unary_calls_and_errors(self) -> None:
        self.assertEqual((await self.client.get_run("r1")).state, pb.RunState.RUN_STATE_SUCCEEDED)
        with self.assertRaises(ToolmeshError) as cm:
            await self.client.get_run("nope")
        self.assertEqual((cm.exception.code, cm.exception.reason, cm.exception.field),
                         (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND", "run_id"))
        self.assertEqual([w.worker_id for w in (await self.client.list_workers()).workers], ["w1"])
        await self.client.approve_tool_call("r1", "c1", approve=False, reason="no")
        _, req, _ = self.fake.seen[-1]
        self.assertEqual((req.decision, req.reason), (pb.ApprovalDecision.APPROVAL_DECISION_DENY, "no"))

    async def test_transport_errors_have_no_reason(self) -> None:
        with self.assertRaises(ToolmeshError) as cm:
            await self.client.list_runs({"pageSize": 5})
        self.assertEqual((cm.exception.code, cm.exception.reason), (grpc.StatusCode.UNIMPLEMENTED, ""))

    def test_messages_as_protojson(self) -> None:
        ev = pb.RunResponse(run_id="r", sequence=7, tool_call_finished=pb.ToolCallFinished(
            outcome=pb.ToolCallOutcome.TOOL_CALL_OUTCOME_OK, duration=pb.duration(0.0015)))
        self.assertEqual(pb.to_json(ev), '{"runId":"r","sequence":"7","toolCallFinished":{"outcome":'
                                         '"TOOL_CALL_OUTCOME_OK","duration":"0.001500s"}}')


if __name__ == "__main__":
    unittest.main()
