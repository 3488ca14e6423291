"""The Python SDK's conformance worker: the group of test/conformance/README.md.

    PYTHONPATH=sdk/python/src python3 sdk/python/conformance/worker.py \\
        --orchestrator HOST:PORT --id WORKER_ID [--listen HOST:PORT] [--group ROLE]

It writes ``ready <address>`` to stdout each time it becomes registered, and nothing else;
logs go to stderr. On SIGTERM it drains and exits 0. Its definitions are those of the Go
SDK's conformance worker (test/conformance/goworker), content hashes included, so that
either can be a replica of the other.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
from typing import Any

from toolmesh import (
    Context,
    ErrorCode,
    ErrorResult,
    Facade,
    Group,
    MemoryLedger,
    Selection,
    Tool,
    Worker,
    replan,
    terminate,
    tool,
)
from toolmesh.gojson import encode, go_format_float

# The schema the Go worker gives `fail` and `open` (schema.Params with one string).
MESSAGE_SCHEMA = '{"type":"object","properties":{"message":{"type":"string","description":"message"}},"required":["message"]}'
NAME_SCHEMA = '{"type":"object","properties":{"name":{"type":"string","description":"name"}},"required":["name"]}'


def num(f: float) -> str:
    """f in the shortest form that reads back as the same float64."""
    return go_format_float(f)


@tool(name="echo", description="Echo the text back", idempotent=True)
async def echo(text: str) -> str:
    return "echo: " + text


@tool(name="add", description="Add two numbers", idempotent=True)
async def add(a: float, b: float) -> str:
    return num(a + b)


@tool(name="mul", description="Multiply two numbers", idempotent=True)
async def mul(a: float, b: float) -> str:
    return num(a * b)


@tool(name="whoami", description="Show the call's context")
async def whoami(ctx: Context) -> str:
    out = {k: v for k, v in ctx.values.items() if not k.startswith("toolmesh.")}
    out["tenant"] = ctx.tenant
    out["idempotency_key"] = ctx.idempotency_key
    return encode(out)  # keys sorted, no spaces, as Go's encoding/json writes a map


@tool(name="count", description="Count calls in this cart")
async def count(ctx: Context) -> str:
    state = ctx.state_json({"n": 0})
    if not isinstance(state, dict) or not isinstance(state.get("n", 0), int):
        raise ValueError(f"the state {ctx.state!r} is not a counter")
    n = int(state.get("n", 0)) + 1
    ctx.set_state_json({"n": n})
    return f"count {n}"


async def open_counter(ctx: Context, **_: Any) -> Selection:
    return Selection(tools=[count], state=b'{"n":0}')


@tool(name="note", description="Put a note on the blackboard")
async def note(text: str, ctx: Context) -> str:
    ctx.blackboard.bind("last", "Note", {"text": text})
    return "noted"


@tool(name="read_note", description="Read the newest note", blackboard_types=["Note"])
async def read_note(ctx: Context) -> str | ErrorResult:
    o = ctx.blackboard.last("Note")
    if o is not None and not o.is_blob:
        v = o.value
        if isinstance(v, dict) and isinstance(v.get("text"), str):
            return str(v["text"])
    return ErrorResult("no note")


@tool(name="steps", description="Report progress", reports_progress=True)
async def steps(n: int, ctx: Context) -> str:
    for i in range(1, n + 1):
        await ctx.progress(f"step {i} of {n}")
    return f"did {n} steps"


@tool(name="slow", description="Wait, then answer", idempotent=True)
async def slow(ms: int) -> str:
    await asyncio.sleep(max(ms, 0) / 1000)  # a cancelled call ends the sleep early
    return f"waited {ms}"


@tool(name="big", description="Answer many bytes")
async def big(bytes: int) -> str:  # noqa: A002 (the property's name)
    return "x" * max(bytes, 0)


_charges: dict[str, int] = {}
_charges_lock = threading.Lock()


@tool(name="charge", description="Charge an account once", idempotent=True, ledger=True)
async def charge(account: str, cents: int) -> str:
    with _charges_lock:
        _charges[account] = _charges.get(account, 0) + 1
        k = _charges[account]
    return f"charged {cents} to {account} ({k} charges)"


@tool(name="charges", description="Count charges")
async def charges(account: str) -> str:
    with _charges_lock:
        return str(_charges.get(account, 0))


@tool(name="fail", description="Fail with a message", input_schema=MESSAGE_SCHEMA)
async def fail(message: str = "") -> ErrorResult:
    return ErrorResult(message, ErrorCode.FAILED)


@tool(name="stop", description="Stop the agent")
async def stop(reason: str) -> Any:
    return terminate("agent", reason)


@tool(name="replan", description="Ask to plan again")
async def replan_tool(reason: str) -> Any:
    return replan(reason)


def group(role: str) -> Group:
    tools: list[Tool | Facade] = [echo, whoami, note, read_note, steps, slow, big, charge, charges, fail, stop,
                                  replan_tool, add, mul]
    opener = Facade.selectable("open", "Open a counter", [count], open_counter, input_schema=NAME_SCHEMA)
    calc = Facade.plain("calc", "Calculator", [add, mul])
    return Group(role=role, description="Conformance tools", provider="toolmesh-conformance", version="1.0.0",
                 tools=tools, facades=[opener, calc])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--orchestrator", required=True, help="the orchestrator's host:port")
    p.add_argument("--id", required=True, help="the worker's id")
    p.add_argument("--listen", default="127.0.0.1:0", help="the address to serve on")
    p.add_argument("--group", default="conf", help="the group's role")
    args = p.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    w: Worker

    def announce(registered: bool) -> None:
        if registered:
            sys.stdout.write(f"ready {w.address}\n")
            sys.stdout.flush()

    # Every call goes through the idempotency ledger, as in the Go conformance worker.
    w = Worker(args.orchestrator, [group(args.group)], id=args.id, listen=args.listen, version="1.0.0",
               ledger=MemoryLedger(), min_backoff=0.1, max_backoff=1.0, on_registered=announce)
    asyncio.run(w.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
