"""The Python SDK's conformance client (test/conformance/README.md).

    client.py --orchestrator HOST:PORT [--token TOKEN] run [--tool T]... [--group G]... [--run-id ID] PROMPT
    client.py --orchestrator HOST:PORT [--token TOKEN] get RUN_ID
    client.py --orchestrator HOST:PORT [--token TOKEN] watch [--after N] RUN_ID
    client.py --orchestrator HOST:PORT [--token TOKEN] cancel RUN_ID

``run`` and ``watch`` print each event as one line of the protobuf JSON of RunResponse;
``get`` and ``cancel`` print their response the same way. An error prints
``error <grpc code name> <ErrorInfo reason> <message>`` and exits 1 (the reason is
``UNSPECIFIED`` for a status without toolmesh's details).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from toolmesh import Client, ToolmeshError, pb


def emit(m: pb.Message) -> None:
    """Prints a message as one line of protobuf JSON (lowerCamelCase names, enums by name)."""
    sys.stdout.write(pb.to_json(m) + "\n")
    sys.stdout.flush()


async def command(args: argparse.Namespace) -> None:
    async with Client(args.orchestrator, token=args.token) as c:
        if args.cmd == "run":
            req: dict[str, Any] = {"prompt": args.prompt, "tools": args.tool, "toolGroups": args.group}
            if args.run_id:
                req["runId"] = args.run_id
            async for ev in c.run(req):
                emit(ev)
        elif args.cmd == "watch":
            async for ev in c.watch_run(args.run_id, args.after):
                emit(ev)
        elif args.cmd == "get":
            emit(await c.get_run(args.run_id))
        elif args.cmd == "cancel":
            emit(await c.cancel_run(args.run_id))


def main() -> int:
    p = argparse.ArgumentParser(description="toolmesh conformance client (Python SDK)")
    p.add_argument("--orchestrator", required=True)
    p.add_argument("--token", default=None)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tool", action="append", default=[])
    r.add_argument("--group", action="append", default=[])
    r.add_argument("--run-id", default="")
    r.add_argument("prompt")
    g = sub.add_parser("get")
    g.add_argument("run_id")
    w = sub.add_parser("watch")
    w.add_argument("--after", type=int, default=0)
    w.add_argument("run_id")
    x = sub.add_parser("cancel")
    x.add_argument("run_id")
    args = p.parse_args()
    try:
        asyncio.run(command(args))
    except ToolmeshError as e:
        sys.stdout.write(f"error {e.code.name} {e.reason or 'UNSPECIFIED'} {e.message}\n")
        sys.stdout.flush()
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
