"""toolmesh for Python: a worker SDK and a client of the orchestrator, on asyncio.

Worker::

    import asyncio
    from toolmesh import Context, Group, Worker, tool

    @tool(idempotent=True)
    async def add(a: float, b: float) -> str:
        \"\"\"Add two numbers.\"\"\"
        return str(a + b)

    asyncio.run(Worker("127.0.0.1:7070", [Group("math", "Math tools", tools=[add])]).run())

Client::

    async with Client("127.0.0.1:7070") as c:
        async for ev in c.run({"prompt": "What is 2 + 3?", "toolGroups": ["math"]}):
            print(ev)

The contract's messages are in :mod:`toolmesh.pb`.
"""

from ._bootstrap import ensure_grpc

ensure_grpc()

from . import pb  # noqa: E402
from .client import Client  # noqa: E402
from .errors import ToolmeshError  # noqa: E402
from .facade import Facade, FacadeKind, Selection  # noqa: E402
from .ledger import Ledger, MemoryLedger  # noqa: E402
from .tool import (  # noqa: E402
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
    replan,
    terminate,
    tool,
)
from .worker import DomainType, Group, Permission, Worker, WorkerError  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Artifact",
    "ArtifactResult",
    "Blackboard",
    "BlackboardObject",
    "Client",
    "Context",
    "DomainType",
    "ErrorCode",
    "ErrorResult",
    "Facade",
    "FacadeKind",
    "Group",
    "Ledger",
    "MemoryLedger",
    "Permission",
    "Replan",
    "Selection",
    "Signal",
    "Terminate",
    "Tool",
    "ToolError",
    "ToolmeshError",
    "Worker",
    "WorkerError",
    "pb",
    "replan",
    "terminate",
    "tool",
]
