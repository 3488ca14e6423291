"""The worker against a fake orchestrator: registration, heartbeats, calls, drain,
reconnects."""

from __future__ import annotations

import toolmesh  # noqa: F401 (first: it finds Debian's grpc for another interpreter)

import asyncio
import contextlib
import gc
import json
import threading
import time
import unittest
import warnings
from typing import Any, AsyncIterator, Optional

import grpc
import grpc.aio

from fakeorch import FakeRegistry, WorkerClient, rpc_reason
from toolmesh import (
    ArtifactResult,
    Artifact,
    BlackboardObject,
    Context,
    ErrorCode,
    Facade,
    Group,
    MemoryLedger,
    Selection,
    ToolError,
    Worker,
    pb,
    replan,
    terminate,
    tool,
)
from toolmesh import ctxcodec

effects: dict[str, int] = {}


@tool(description="Echo the text back", idempotent=True)
async def echo(text: str) -> str:
    return "echo: " + text


@tool(description="Show the call")
async def who(ctx: Context) -> dict[str, Any]:
    return {"values": dict(ctx.values), "tenant": ctx.tenant, "key": ctx.idempotency_key, "loop": ctx.loop_id,
            "run": ctx.run_id, "call": ctx.call_id, "loop_key": ctx.get("toolmesh.loop_id"),
            "has_deadline": ctx.deadline is not None}


@tool(description="Add")
def add_sync(a: int, b: Optional[int] = None) -> int:
    return a + (b or 0)


@tool(description="Fail", timeout=1.5)
async def boom(kind: str) -> Any:
    if kind == "exc":
        raise RuntimeError("it broke")
    if kind == "empty":
        raise RuntimeError()
    if kind == "tool":
        raise ToolError("bad input", ErrorCode.INVALID_ARGUMENTS)
    if kind == "stop":
        raise terminate("action", "done")
    if kind == "replan":
        return replan("changed", [BlackboardObject.of("Plan", {"step": 2})])
    if kind == "artifact":
        return ArtifactResult("see artifact", Artifact.of("Chart", {"x": [1, 2]}))
    if kind == "blob":
        return ArtifactResult("a png", Artifact.blob("Chart", b"\x89PNG", "image/png"))
    return None


@tool(description="Report progress", reports_progress=True)
async def steps(n: int, ctx: Context) -> str:
    for i in range(1, n + 1):
        await ctx.progress(f"step {i} of {n}")
    return f"did {n}"


@tool(description="Report progress from a thread", reports_progress=True)
def steps_sync(n: int, ctx: Context) -> str:
    for i in range(1, n + 1):
        ctx.progress(f"s{i}")
    return "ok"


@tool(description="Report a file name read from the disk", reports_progress=True)
async def reads_file(ctx: Context) -> str:
    # os.fsdecode gives a name that is not UTF-8 lone surrogates (surrogateescape).
    await ctx.progress("reading caf\udce9.txt")
    return "read"


@tool(description="Charge once", ledger=True)
async def charge(account: str, fail: bool = False, wait: float = 0) -> str:
    await asyncio.sleep(wait)
    effects[account] = effects.get(account, 0) + 1
    if fail:
        raise RuntimeError("charge failed")
    return f"charged {account} ({effects[account]})"


@tool(description="Count")
async def count(ctx: Context) -> str:
    n = ctx.state_json({"n": 0})["n"] + 1
    ctx.set_state_json({"n": n})
    return f"count {n}"


@tool(description="Not in any facade")
async def other() -> str:
    return "other"


@tool(description="Returns what cannot be sent")
async def unsendable(kind: str) -> Any:
    if kind == "surrogate":
        return "caf\udce9"
    return ArtifactResult("c", Artifact("T", json=123))  # type: ignore[arg-type]


@tool(description="Greets, its own schema allowing more", input_schema={
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
async def greet(name: str) -> str:
    return f"hello {name}"


async def open_counter(name: str, ctx: Context) -> Selection:
    if name == "bad":
        return Selection(tools=["echo_elsewhere"])
    if name == "boom":
        raise RuntimeError("no such counter")
    if name == "refused":
        raise ToolError("not a counter's name", ErrorCode.INVALID_ARGUMENTS)
    return Selection(tools=[count], state={"n": 10})


@tool(description="Note", blackboard_types=["Note"])
async def note(text: str, ctx: Context) -> str:
    seen = ctx.blackboard.last("Note")
    ctx.blackboard.bind("last", "Note", {"text": text})
    return seen.value["text"] if seen is not None else "none"


@tool(description="Big")
async def big(n: int) -> str:
    return "x" * n


@tool(description="Slow")
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slept"


gate = threading.Event()
"""What hold waits for (set again by the tests that clear it)."""
meeting: list[threading.Barrier] = []
"""The barrier meet waits at, set by the test."""


@tool(description="Charge once the gate opens", ledger=True)
def hold(account: str) -> str:
    gate.wait(10)
    effects[account] = effects.get(account, 0) + 1
    return f"charged {account} ({effects[account]})"


@tool(description="Charge at the call's deadline", ledger=True)
def at_deadline(account: str, ctx: Context) -> str:
    time.sleep(max(0.0, (ctx.deadline or 0) - time.time()))
    effects[account] = effects.get(account, 0) + 1
    return f"charged {account} ({effects[account]})"


@tool(description="Exit as a command-line parser does")
def exits() -> str:
    raise SystemExit(2)


@tool(description="Fail naming a file read from the disk")
def fails_on_file() -> str:
    raise OSError("cannot open caf\udce9.csv")


async def select_file(name: str, ctx: Context) -> Selection:
    raise RuntimeError(f"no such file {name}\udce9")


@tool(description="Wait until every call has come")
def meet() -> str:
    meeting[0].wait(5)
    return "met"


def groups() -> list[Group]:
    opener = Facade.selectable("open", "Open a counter", [count], open_counter)
    calc = Facade.plain("calc", "Calculator", [add_sync], usage_notes="Use add_sync.")
    cats = Facade.by_category("stuff", "Stuff", {"a": [echo], "b": [other]})
    files = Facade.selectable("files", "Open a file", [count], select_file)
    return [Group("t", "Test tools", tools=[echo, who, boom, steps, steps_sync, reads_file, charge, note, big, slow, greet, unsendable,
                                                hold, meet, at_deadline, exits, fails_on_file],
                  facades=[opener, calc, cats, files])]


class WorkerTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        effects.clear()
        asyncio.get_running_loop().slow_callback_duration = 1.0  # the test loop runs in debug mode
        self.reg = FakeRegistry()
        await self.reg.start()
        self.events: list[bool] = []
        self.worker = self.make_worker()
        self.run_task = asyncio.create_task(self.worker.run(handle_signals=False))
        await asyncio.wait_for(self.worker.wait_registered(), 5)
        self.client = WorkerClient(self.worker.address)

    def make_worker(self, **kw: Any) -> Worker:
        return Worker(self.reg.address, groups(), id="py-test", min_backoff=0.05, max_backoff=0.2,
                      on_registered=self.events.append, **kw)

    async def asyncTearDown(self) -> None:
        self.worker.stop()
        await asyncio.wait_for(self.run_task, 10)
        await self.client.close()
        await self.reg.stop()

    async def test_registration(self) -> None:
        r = self.reg.registrations[0]
        self.assertEqual(r.worker_id, "py-test")
        self.assertEqual(r.address, self.worker.address)
        g = r.groups[0]
        names = [t.definition.name for t in g.tools]
        self.assertEqual(names, sorted(names))
        self.assertIn("count", names)  # a facade's leaf is a tool of the group
        self.assertEqual([f.definition.name for f in g.facades], ["open", "calc", "stuff", "files"])
        self.assertTrue(g.facades[0].selectable)
        self.assertEqual(g.facades[2].category_parameter, "category")
        self.assertEqual([c.name for c in g.facades[2].categories], ["a", "b"])
        boom_def = next(t.definition for t in g.tools if t.definition.name == "boom")
        self.assertEqual(boom_def.timeout.seconds, 1)
        self.assertEqual(boom_def.timeout.nanos, 500_000_000)
        self.assertEqual(self.reg.probes, [pb.ServingStatus.SERVING])
        await self.reg.wait_for(lambda: len(self.reg.heartbeats) >= 2)
        self.assertEqual(self.events, [True])

    async def test_health(self) -> None:
        self.assertEqual(await self.client.health(""), pb.ServingStatus.SERVING)
        self.assertEqual(await self.client.health(pb.WORKER_SERVICE), pb.ServingStatus.SERVING)
        with self.assertRaises(grpc.aio.AioRpcError) as cm:
            await self.client.health("nope")
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)

    async def test_call_with_context(self) -> None:
        md = ctxcodec.encode({"region": "eu", "x\u00e9": "a\nb"}) + [("traceparent", "00-x-y-01")]
        resp = await self.client.invoke("who", metadata=md, run_id="r1", loop_id="l1", call_id="c1",
                                        idempotency_key="r1/l1/c1", tenant="acme")
        got = json.loads(resp.text)
        self.assertEqual(got, {"values": {"region": "eu", "x\u00e9": "a\nb"}, "tenant": "acme", "key": "r1/l1/c1",
                               "loop": "l1", "run": "r1", "call": "c1", "loop_key": "l1", "has_deadline": True})

    async def test_call_with_a_context_at_its_bound(self) -> None:
        # A context of nearly its 8 KiB, with the orchestrator's own headers beside it,
        # is more than gRPC's default 8 KiB of request headers: the call failed before the
        # tool, as an unreachable worker (which the orchestrator ejects after three).
        md = ctxcodec.encode({"big": "v" * 6000}) + [("traceparent", "00-x-y-01"), ("x-extra", "e" * 2000)]
        resp = await self.client.invoke("who", metadata=md, run_id="r1", loop_id="l1", call_id="c1")
        self.assertEqual(json.loads(resp.text)["values"], {"big": "v" * 6000})

    async def test_sync_tool_and_optional(self) -> None:
        self.assertEqual((await self.client.invoke("add_sync", '{"a":2}')).text, "2")
        self.assertEqual((await self.client.invoke("add_sync", '{"a":2,"b":3.0}')).text, "5")

    async def test_worker_validates_arguments(self) -> None:
        resp = await self.client.invoke("echo", '{"text": 1}')
        self.assertEqual(resp.error.code, ErrorCode.INVALID_ARGUMENTS.value)
        self.assertEqual(resp.error.message, "invalid arguments for tool 'echo': property \"text\": expected string, "
                                             "got integer")
        resp = await self.client.invoke("echo", '{"text": "a", "more": 1}')
        self.assertIn('unexpected property "more"', resp.error.message)

    async def test_own_schema_allowing_more_properties(self) -> None:
        # The schema allows properties the function has no parameter for: they are not
        # passed (the call failed: "got an unexpected keyword argument"), as the Go and
        # TypeScript workers ignore what their tools do not take.
        resp = await self.client.invoke("greet", '{"name":"ada","extra":1}')
        self.assertEqual((resp.WhichOneof("outcome"), resp.text), ("text", "hello ada"))

    async def test_result_that_cannot_be_sent(self) -> None:
        # The call ran: an error result says why its answer cannot be sent, as the Go and
        # TypeScript workers answer. It was a bare UNKNOWN status, which the orchestrator
        # counts against the worker, and resends an idempotent call for.
        resp = await self.client.invoke("unsendable", json.dumps({"kind": "artifact"}))
        self.assertEqual(resp.error.code, ErrorCode.FAILED.value)
        self.assertTrue(resp.error.message.startswith("tool 'unsendable' returned a result that cannot be sent: "),
                        resp.error.message)
        # Text for the model with lone surrogates is repaired, as the Go and TypeScript
        # workers repair it.
        resp = await self.client.invoke("unsendable", json.dumps({"kind": "surrogate"}))
        self.assertEqual((resp.WhichOneof("outcome"), resp.text), ("text", "caf\ufffd"))

    async def test_unknown_tool(self) -> None:
        with self.assertRaises(grpc.aio.AioRpcError) as cm:
            await self.client.invoke("nope")
        code, reason, _ = rpc_reason(cm.exception)
        self.assertEqual((code, reason), (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOOL"))
        self.assertEqual(cm.exception.details(), "tool 'nope' is not served by worker py-test")

    async def test_bad_context(self) -> None:
        resp = await self.client.invoke("echo", '{"text":"a"}', metadata=[("tm-ctx-m1-bin", b"x")])
        self.assertEqual(resp.error.code, ErrorCode.INVALID_ARGUMENTS.value)
        self.assertTrue(resp.error.message.startswith("the call's context cannot be read: invalid tool call context"))

    async def test_results_and_errors(self) -> None:
        r = await self.client.invoke("boom", '{"kind":"exc"}')
        self.assertEqual((r.error.code, r.error.message), (ErrorCode.FAILED.value, "it broke"))
        r = await self.client.invoke("boom", '{"kind":"empty"}')
        self.assertEqual(r.error.message, "Tool invocation failed")
        r = await self.client.invoke("boom", '{"kind":"tool"}')
        self.assertEqual((r.error.code, r.error.message), (ErrorCode.INVALID_ARGUMENTS.value, "bad input"))
        r = await self.client.invoke("boom", '{"kind":"stop"}')
        self.assertEqual(r.signal.terminate.scope, pb.TerminateScope.TERMINATE_SCOPE_ACTION)
        self.assertEqual(r.signal.terminate.reason, "done")
        r = await self.client.invoke("boom", '{"kind":"replan"}')
        self.assertEqual(r.signal.replan.reason, "changed")
        self.assertEqual(r.signal.replan.blackboard_updates[0].json, '{"step":2}')
        r = await self.client.invoke("boom", '{"kind":"artifact"}')
        self.assertEqual((r.artifact.content, r.artifact.artifact.json), ("see artifact", '{"x":[1,2]}'))
        r = await self.client.invoke("boom", '{"kind":"blob"}')
        self.assertEqual((r.artifact.artifact.data, r.artifact.artifact.media_type), (b"\x89PNG", "image/png"))
        r = await self.client.invoke("boom", '{"kind":"none"}')
        self.assertEqual(r.WhichOneof("outcome"), "text")

    async def test_progress(self) -> None:
        msgs = await self.client.invoke_stream("steps", '{"n":3}')
        self.assertEqual([m.progress.status for m in msgs[:-1]], ["step 1 of 3", "step 2 of 3", "step 3 of 3"])
        self.assertEqual(msgs[-1].result.text, "did 3")
        msgs = await self.client.invoke_stream("steps_sync", '{"n":2}')
        self.assertEqual([m.WhichOneof("message") for m in msgs], ["progress", "progress", "result"])
        # Under unary Invoke the reports are dropped.
        self.assertEqual((await self.client.invoke("steps", '{"n":2}')).text, "did 2")

    async def test_progress_that_is_not_utf8(self) -> None:
        # A report with characters UTF-8 cannot encode goes with them replaced; it failed
        # the tool (its call raised), where a report never fails the call.
        msgs = await self.client.invoke_stream("reads_file", "{}")
        self.assertEqual([m.progress.status for m in msgs[:-1]], ["reading caf\ufffd.txt"])
        self.assertEqual(msgs[-1].result.text, "read")

    async def test_selectable_facade_binds_state(self) -> None:
        r = await self.client.invoke("open", '{"name":"cart"}')
        self.assertTrue(r.text.startswith("Tools now available: count. You MUST call"))
        self.assertEqual(list(r.selection.tools), ["count"])
        self.assertEqual(r.selection.state, b'{"n":10}')
        r = await self.client.invoke("count", state=r.selection.state)
        self.assertEqual(r.text, "count 11")
        self.assertTrue(r.state_changed)
        self.assertEqual(r.state, b'{"n":11}')
        r = await self.client.invoke("open", '{"name":"bad"}')
        self.assertIn("facade 'open' selected 'echo_elsewhere', which is not a tool of group 't'", r.error.message)
        self.assertFalse(r.HasField("selection"))
        # A selector's failure names the facade, as the Go and TypeScript workers do.
        r = await self.client.invoke("open", '{"name":"boom"}')
        self.assertEqual((r.error.code, r.error.message),
                         (ErrorCode.FAILED.value, "selecting the tools of 'open': no such counter"))
        r = await self.client.invoke("open", '{"name":"refused"}')
        self.assertEqual((r.error.code, r.error.message),
                         (ErrorCode.INVALID_ARGUMENTS.value, "selecting the tools of 'open': not a counter's name"))

    async def test_plain_and_category_facades(self) -> None:
        r = await self.client.invoke("calc")
        self.assertEqual(r.text, "Tools now available: add_sync. You MUST call one of these tools to complete the "
                                 "user's request. Do NOT respond with text \u2014 call a tool.\n\nUse add_sync.")
        r = await self.client.invoke("stuff", '{"category":"b"}')
        self.assertEqual(list(r.selection.tools), ["other"])

    async def test_blackboard(self) -> None:
        seen = pb.BlackboardObject(type_name="app.Note", json='{"text":"old"}')
        r = await self.client.invoke("note", '{"text":"new"}', blackboard=[seen])
        self.assertEqual(r.text, "old")
        u = r.blackboard_updates[0]
        self.assertEqual((u.type_name, u.json, u.name), ("Note", '{"text":"new"}', "last"))

    async def test_ledger(self) -> None:
        key = {"idempotency_key": "r/l/c1"}
        a = await self.client.invoke("charge", '{"account":"acme"}', **key)
        b = await self.client.invoke("charge", '{"account":"acme"}', **key)
        self.assertEqual(a.text, "charged acme (1)")
        self.assertEqual(b, a)
        self.assertEqual(effects["acme"], 1)
        c = await self.client.invoke("charge", '{"account":"acme"}', idempotency_key="r/l/c2")
        self.assertEqual(c.text, "charged acme (2)")
        # A call without a key always runs.
        await self.client.invoke("charge", '{"account":"acme"}')
        self.assertEqual(effects["acme"], 3)
        # Concurrent duplicates run once.
        d1, d2 = await asyncio.gather(
            self.client.invoke("charge", '{"account":"b","wait":0.1}', idempotency_key="r/l/c3"),
            self.client.invoke("charge", '{"account":"b","wait":0.1}', idempotency_key="r/l/c3"))
        self.assertEqual((d1.text, d2.text), ("charged b (1)", "charged b (1)"))
        # A call cancelled before its answer keeps nothing: the next one runs.
        with self.assertRaises(grpc.aio.AioRpcError):
            await self.client.invoke("charge", '{"account":"c","wait":0.5}', idempotency_key="r/l/c4", timeout=0.1)
        r = await self.client.invoke("charge", '{"account":"c"}', idempotency_key="r/l/c4")
        self.assertEqual(r.text, "charged c (1)")
        # Every call, the cancelled one included, gave its slot back.
        self.assertEqual((self.worker._active, self.worker._calls, len(self.worker._keys)), (0, 0, 0))

    async def test_ledger_duplicate_gives_up_with_its_caller(self) -> None:
        # A duplicate waiting for its key while the first call runs stops waiting when its
        # own caller leaves, not when the first call ends.
        first = asyncio.ensure_future(
            self.client.invoke("charge", '{"account":"slow","wait":1.0}', idempotency_key="r/l/slow"))
        await asyncio.sleep(0.1)
        with self.assertRaises(grpc.aio.AioRpcError):
            await self.client.invoke("charge", '{"account":"slow"}', idempotency_key="r/l/slow", timeout=0.1)
        key = "charge\x00r/l/slow"
        for _ in range(100):  # the duplicate's handler ends after its caller gave up
            if self.worker._keys._locks.get(key, (None, 0))[1] == 1:
                break
            await asyncio.sleep(0.005)
        self.assertFalse(first.done())
        self.assertEqual(self.worker._keys._locks[key][1], 1, "the duplicate still waits for the first call")
        self.assertEqual((await first).text, "charged slow (1)")
        self.assertEqual(len(self.worker._keys), 0)

    async def test_result_bound(self) -> None:
        self.assertEqual(len((await self.client.invoke("big", '{"n":100000}')).text), 100000)
        r = await self.client.invoke("big", '{"n":4200000}')
        self.assertEqual(r.error.code, ErrorCode.FAILED.value)
        self.assertIn("tool 'big' ran, but its result is 4200005 bytes, over the 4128768 bytes", r.error.message)

    async def test_created_tool_is_refused(self) -> None:
        r = await self.client.invoke("count", created_tool="made")
        self.assertEqual(r.error.message, "tool 'made' cannot be called: 'count' is not a template, so it serves no "
                                          "created tools")

    async def test_drain(self) -> None:
        slow_call = asyncio.create_task(self.client.invoke("slow", '{"seconds":0.5}'))
        await asyncio.sleep(0.1)
        self.worker.stop()
        await self.reg.wait_for(lambda: self.reg.draining)
        self.assertEqual(self.reg.draining, ["worker shutting down"])
        with self.assertRaises(grpc.aio.AioRpcError) as cm:
            await self.client.invoke("echo", '{"text":"late"}')
        code, reason, delay = rpc_reason(cm.exception)
        self.assertEqual((code, reason, delay), (grpc.StatusCode.UNAVAILABLE, "WORKER_DRAINING", 0.001))
        self.assertEqual(await self.client.health(pb.WORKER_SERVICE), pb.ServingStatus.NOT_SERVING)
        self.assertEqual((await slow_call).text, "slept")
        await asyncio.wait_for(self.run_task, 5)
        await self.reg.wait_for(lambda: self.reg.ended == 1)
        self.assertEqual(self.events, [True, False])

    async def test_drain_answers_from_the_ledger(self) -> None:
        # A call sent again whose answer the ledger keeps is answered so while the worker
        # drains, as the Go and TypeScript workers do: it was refused as draining, and
        # the orchestrator sent it to a replica without that answer, to run again.
        first = await self.client.invoke("charge", '{"account":"d"}', idempotency_key="r/l/d1")
        self.assertEqual(first.text, "charged d (1)")
        slow_call = asyncio.create_task(self.client.invoke("slow", '{"seconds":0.5}'))
        await asyncio.sleep(0.1)
        self.worker.stop()
        await self.reg.wait_for(lambda: self.reg.draining)
        again = await self.client.invoke("charge", '{"account":"d"}', idempotency_key="r/l/d1")
        self.assertEqual(again.text, "charged d (1)")
        with self.assertRaises(grpc.aio.AioRpcError) as cm:  # a call that would run is refused
            await self.client.invoke("charge", '{"account":"d"}', idempotency_key="r/l/d2")
        self.assertEqual(rpc_reason(cm.exception)[:2], (grpc.StatusCode.UNAVAILABLE, "WORKER_DRAINING"))
        self.assertEqual((await slow_call).text, "slept")
        await asyncio.wait_for(self.run_task, 5)

    async def test_drain_keeps_the_lease_alive(self) -> None:
        # A draining worker goes on sending heartbeats, the call it still runs counted: its
        # lease must outlive the call. They stopped once Draining was sent, and the
        # orchestrator, once the lease expired, failed the calls the worker was finishing.
        slow_call = asyncio.create_task(self.client.invoke("slow", '{"seconds":1.0}'))
        await asyncio.sleep(0.1)
        self.worker.stop()
        await self.reg.wait_for(lambda: self.reg.draining)
        before = len(self.reg.heartbeats)
        await self.reg.wait_for(lambda: len(self.reg.heartbeats) >= before + 3)
        self.assertEqual(self.reg.heartbeats[-1], 1)
        self.assertEqual((await slow_call).text, "slept")
        await asyncio.wait_for(self.run_task, 5)

    async def test_reconnects_when_the_stream_breaks(self) -> None:
        await self.reg.stop()
        await asyncio.sleep(0.3)
        self.assertFalse(self.worker.registered)
        port = int(self.reg.address.rsplit(":", 1)[1])
        self.reg = FakeRegistry(refuse=2)
        await self.reg.start(port)
        await self.reg.wait_for(lambda: self.worker.registered, timeout=10)
        self.assertEqual(len(self.reg.registrations), 3)  # two refusals (WORKER_ID_IN_USE), then accepted
        self.assertEqual(self.reg.registrations[2].worker_id, "py-test")
        self.assertEqual(self.events, [True, False, True])


@contextlib.asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[tuple[Worker, WorkerClient, asyncio.Task[None]]]:
    """A worker of groups() with options, registered with a fake orchestrator of its own,
    and a client of it; stopped (if the test did not) and closed at the end."""
    reg = FakeRegistry()
    await reg.start()
    asyncio.get_running_loop().slow_callback_duration = 1.0  # the test loop runs in debug mode
    w = Worker(reg.address, groups(), **options)
    task = asyncio.create_task(w.run(handle_signals=False))
    await w.wait_registered()
    c = WorkerClient(w.address)
    try:
        yield w, c, task
    finally:
        w.stop()
        await task
        await c.close()
        await reg.stop()


class CapacityTest(unittest.IsolatedAsyncioTestCase):
    async def test_capacity_queues_calls(self) -> None:
        async with serving(id="cap", capacity=1, ledger=MemoryLedger(), max_result_bytes=1000) as (_, c, _):
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await asyncio.gather(c.invoke("slow", '{"seconds":0.2}'), c.invoke("slow", '{"seconds":0.2}'))
            self.assertGreaterEqual(loop.time() - t0, 0.39)
            r = await c.invoke("big", '{"n":2000}')
            self.assertIn("over the 1000 bytes a result may have", r.error.message)


class SyncToolTest(unittest.IsolatedAsyncioTestCase):
    """Synchronous tools run in threads, which nothing can stop: the worker treats one as
    the Go worker treats a tool that ignores its context."""

    def setUp(self) -> None:
        gate.set()
        self.addCleanup(gate.set)

    async def test_sync_tools_run_at_once(self) -> None:
        # As many at once as are called (within the capacity): they ran on asyncio's
        # default executor, min(32, CPUs + 4) threads, and the others queued unseen.
        n = 40
        meeting[:] = [threading.Barrier(n)]
        async with serving(id="threads") as (_, c, _):
            got = await asyncio.gather(*(c.invoke("meet", timeout=10) for _ in range(n)))
            self.assertEqual([r.text for r in got], ["met"] * n)

    async def test_a_thread_past_its_call_keeps_its_slot_and_key(self) -> None:
        # A call ends (its deadline passes, or its caller leaves) while its thread still
        # runs: the thread goes on holding the call's capacity slot and its idempotency
        # key, and what it returns is kept in the ledger. Before, the slot and the key
        # were given back at once: more threads ran than the capacity, and the call sent
        # again ran the tool a second time, its effect taken twice.
        for how in ("deadline", "caller left"):
            with self.subTest(how):
                account, key = f"late {how}", {"idempotency_key": f"r/l/{how}"}
                args = json.dumps({"account": account})
                gate.clear()
                async with serving(id="late", capacity=1, ledger=MemoryLedger()) as (w, c, _):
                    if how == "deadline":
                        with contextlib.suppress(grpc.aio.AioRpcError):
                            r = await c.invoke("hold", args, timeout=0.3, **key)
                            self.assertEqual(r.error.code, ErrorCode.TIMEOUT.value)
                    else:
                        with self.assertRaises(asyncio.TimeoutError):
                            await asyncio.wait_for(c.invoke("hold", args, timeout=30, **key), 0.3)
                    # The thread holds the only slot: another call waits for it.
                    with self.assertRaises(grpc.aio.AioRpcError) as cm:
                        await c.invoke("echo", '{"text":"x"}', timeout=0.3)
                    self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
                    # Sent again, the call waits for the thread, and gets its answer.
                    again = asyncio.create_task(c.invoke("hold", args, timeout=10, **key))
                    await asyncio.sleep(0.2)
                    self.assertFalse(again.done())
                    gate.set()
                    self.assertEqual(((await again).text, effects[account]), (f"charged {account} (1)", 1))
                    self.assertEqual((await c.invoke("echo", '{"text":"x"}')).text, "echo: x")
                    self.assertEqual((w._active, w._calls, len(w._keys)), (0, 0, 0))


    async def test_an_answer_made_at_the_deadline_is_kept(self) -> None:
        # A thread that ends as its call's deadline passes: its answer did not reach the
        # call (answered TIMEOUT, or its caller gone), and was not kept, the thread being
        # over: the call sent again ran the tool a second time.
        async with serving(id="at-deadline", ledger=MemoryLedger()) as (_, c, _):
            for i in range(10):
                account, key = f"at deadline {i}", {"idempotency_key": f"r/l/at-deadline-{i}"}
                args = json.dumps({"account": account})
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await c.invoke("at_deadline", args, timeout=0.2, **key)
                await asyncio.sleep(0.05)
                r = await c.invoke("at_deadline", args, timeout=5, **key)
                self.assertEqual((r.text, effects[account]), (f"charged {account} (1)", 1))

    async def test_a_thread_past_its_call_does_not_hold_the_drain_longer(self) -> None:
        # The drain waits for calls in flight up to drain_timeout, threads included; the
        # answer kept of a thread still running then is not waited for ten seconds more.
        gate.clear()
        async with serving(id="hung", ledger=MemoryLedger(), drain_timeout=0.5) as (w, c, task):
            with contextlib.suppress(grpc.aio.AioRpcError):
                await c.invoke("hold", '{"account":"hung"}', timeout=0.2, idempotency_key="r/l/hung")
            t0 = time.monotonic()
            w.stop()
            await asyncio.wait_for(task, 10)
            self.assertLess(time.monotonic() - t0, 4.0)

    async def test_system_exit_in_a_thread_is_an_error(self) -> None:
        # SystemExit (argparse raises it) ends a thread, not the worker: the call fails.
        async with serving(id="exits") as (_, c, _):
            r = await c.invoke("exits")
            self.assertEqual((r.error.code, r.error.message), (ErrorCode.FAILED.value, "SystemExit: 2"))
            self.assertEqual((await c.invoke("echo", '{"text":"alive"}')).text, "echo: alive")

    async def test_messages_with_lone_surrogates_are_repaired(self) -> None:
        # An error's message quoting a name os.fsdecode made: it is repaired (U+FFFD), as
        # the Go worker repairs one that is not UTF-8, so that the model reads what failed;
        # a selector's failed as a bare UNKNOWN status.
        async with serving(id="names") as (_, c, _):
            r = await c.invoke("fails_on_file")
            self.assertEqual(r.error.message, "cannot open caf\ufffd.csv")
            r = await c.invoke("files", '{"name":"x"}')
            self.assertEqual(r.error.message, "selecting the tools of 'files': no such file x\ufffd")

    def test_progress_once_the_loop_is_gone(self) -> None:
        # A thread outliving the worker's loop reports progress: the report is dropped; it
        # raised "Event loop is closed" in the tool (or, the loop stopped but not closed,
        # blocked it for ever).
        async def report(_: str) -> None:
            return None

        for closed in (True, False):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loop = asyncio.new_event_loop()
                ctx = Context(tool="t", progress=report, loop=loop)
                if closed:
                    loop.close()
                t0 = time.monotonic()
                ctx.progress("late")  # from this thread, not the loop's
                self.assertLess(time.monotonic() - t0, 3.0)
                loop.close()
                gc.collect()
            self.assertEqual([str(w.message) for w in caught if "never awaited" in str(w.message)], [])


class SlowLedger(MemoryLedger):
    """A ledger in a shared store: its store takes a while (a round trip)."""

    async def store(self, key: str, answer: bytes, ttl: float) -> None:
        await asyncio.sleep(0.3)
        await super().store(key, answer, ttl)


class LoadFailsOnCancelLedger(MemoryLedger):
    """A ledger in a shared store whose client turns its cancellation into an error of its
    own, as database clients do; slow while slow is set."""

    slow = False

    async def load(self, key: str) -> bytes | None:
        if self.slow:
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                raise ConnectionError("the connection was closed") from None
        return await super().load(key)


class SharedLedgerTest(unittest.IsolatedAsyncioTestCase):
    async def test_answer_kept_when_caller_leaves_during_store(self) -> None:
        # The tool took its effect; its caller (an orchestrator that died) leaves while the
        # answer is being stored. The answer is kept all the same, and the call sent again
        # is answered from the ledger. Before, the store was cancelled with the call, and
        # the call sent again charged a second time.
        async with serving(id="shared", ledger=SlowLedger()) as (_, c, _):
            key = {"idempotency_key": "r/l/shared"}
            with self.assertRaises(grpc.aio.AioRpcError):
                await c.invoke("charge", '{"account":"shared"}', timeout=0.15, **key)
            self.assertEqual(effects["shared"], 1)
            # Sent again at once: it waits for the store, which holds the key.
            r = await c.invoke("charge", '{"account":"shared"}', **key)
            self.assertEqual((r.text, effects["shared"]), ("charged shared (1)", 1))

    async def test_nothing_runs_for_a_caller_gone_during_the_load(self) -> None:
        # A call sent again whose caller leaves while the ledger is read does not run:
        # the ledger's error was taken for an unreadable ledger, the tool ran a second
        # time, and its answer replaced the one kept.
        ledger = LoadFailsOnCancelLedger()
        async with serving(id="loading", ledger=ledger) as (_, c, _):
            key = {"idempotency_key": "r/l/loading"}
            r = await c.invoke("charge", '{"account":"loading"}', **key)
            self.assertEqual((r.text, effects["loading"]), ("charged loading (1)", 1))
            ledger.slow = True
            # The caller goes away without a deadline (one past would stop the tool anyway).
            with self.assertRaises(asyncio.TimeoutError):
                await asyncio.wait_for(c.invoke("charge", '{"account":"loading"}', **key), 0.2)
            await asyncio.sleep(0.2)  # the worker's side of the call ends
            ledger.slow = False
            self.assertEqual(effects["loading"], 1, "the call whose caller left ran the tool")
            r = await c.invoke("charge", '{"account":"loading"}', **key)
            self.assertEqual(r.text, "charged loading (1)")

    async def test_stop_waits_for_a_store_whose_caller_left(self) -> None:
        # The caller leaves while the answer is stored, and the worker stops at once: it
        # waits for the store before it ends. Before, the store was left to itself and
        # cancelled with the event loop, the answer lost.
        ledger = SlowLedger()
        async with serving(id="stopping", ledger=ledger) as (w, c, task):
            with self.assertRaises(grpc.aio.AioRpcError):
                await c.invoke("charge", '{"account":"stopping"}', timeout=0.15, idempotency_key="r/l/stopping")
            w.stop()
            await task
            self.assertIsNotNone(await ledger.load("charge\x00r/l/stopping"))


if __name__ == "__main__":
    unittest.main()
