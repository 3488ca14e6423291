"""Content hashes, against Go's (testdata/govectors, test/conformance/goworker)."""

from __future__ import annotations

import json
import pathlib
import sys
import unittest

from toolmesh import Worker, pb, tool
from toolmesh.hashing import content_hash

HERE = pathlib.Path(__file__).parent
VECTORS = json.loads((HERE / "testdata" / "vectors.json").read_text(encoding="utf-8"))

# The content hashes the Go SDK's conformance worker (test/conformance/goworker)
# registers; the Python conformance worker must register the same definitions.
GO_CONFORMANCE_HASHES = {
    "add": "1b7ad4d00054e48755967082b6cbe1f81c4b9689bbf0403c745a300cba148b3e",
    "big": "4b34840ee47031274ab6ce1f90d3e209f8f5faac4ca6d74a76cc7f6c00b2534b",
    "charge": "6ab840fa7744567b17859552943513c5528c430176162ca7c5d995396f5dd17a",
    "charges": "59085ccb1d008650c12ffa0d6c5253f37641a79f5fdbc469eba93d30f3deb1ad",
    "count": "9ce998a1aa421b5446b279e40f466c146be7de59c0b18b0a628587489681c90f",
    "echo": "458b47716308d85925095823805cc2f58c79efc236c856a2166f1602500b2e16",
    "fail": "a3c5d77f08fe60adbab323fc45733c8b96b35654d99c21226d600290236bb2b7",
    "mul": "a9ebdf46def7879628d76d2c1ca88f519003305eda23bd809e3a668328292f32",
    "note": "b4f663ecd022c852e42aaff6fb48b57f5b318c93cb9e7e4e63ed38604e6ade04",
    "read_note": "5ebc3d4febea78f61b9c5443923730d73816c84ca673f716c222a39c596e0e3b",
    "replan": "30d9d6d9eaf35e7592a8c13b830a300f01234014993a2d75cb9113d36a122bb8",
    "slow": "f6d28a78e751a5eac44a163e41bbcbfef416978167dbcb0d96ea0af19b252414",
    "steps": "0ced156901b214845c89b6d75137060859296b9cc2c7cf0aef9e78cf9a5c2bff",
    "stop": "01cf10bce30501ac0cabda158829bf1fa4d0e7ea6b1ff83eae68c1e76cba5d2f",
    "whoami": "5805143025b24ee39f62a090918b9f28665e4ef2b9ce7623306f9f9267d312e8",
}


def definition(c: dict) -> pb.Message:  # type: ignore[type-arg]
    d = pb.ToolDefinition(
        name=c["name"], description=c["description"], input_schema_json=c["input_schema_json"],
        metadata=c.get("metadata", {}), return_direct=c.get("return_direct", False),
        idempotent=c.get("idempotent", False), blackboard_types=c.get("blackboard_types", []),
        reports_progress=c.get("reports_progress", False), receiver_type=c.get("receiver_type", ""),
        requires_approval=c.get("requires_approval", False))
    if c.get("timeout_ns"):
        d.timeout.seconds, d.timeout.nanos = divmod(c["timeout_ns"], 1_000_000_000)
    if "once_per_loop_advice" in c:
        d.once_per_loop.advice = c["once_per_loop_advice"]
        d.once_per_loop.SetInParent()
    return d


class HashTest(unittest.TestCase):
    def test_go_vectors(self) -> None:
        for c in VECTORS["hash"]:
            with self.subTest(name=c["name"]):
                self.assertEqual(content_hash(definition(c)), c["hash"])

    def test_tool_definition_hash(self) -> None:
        @tool(name="add", description="Add two numbers", idempotent=True)
        async def add(a: float, b: float) -> str:
            return str(a + b)

        self.assertEqual(add.content_hash, GO_CONFORMANCE_HASHES["add"])

    def test_timeout_and_flags_change_the_hash(self) -> None:
        base = definition(VECTORS["hash"][0])
        h = content_hash(base)
        for change in ("timeout", "progress", "once"):
            d = pb.ToolDefinition()
            d.CopyFrom(base)
            if change == "timeout":
                d.timeout.seconds = 1
            elif change == "progress":
                d.reports_progress = True
            else:
                d.once_per_loop.SetInParent()
            self.assertNotEqual(content_hash(d), h, change)

    def test_conformance_worker_registers_gos_definitions(self) -> None:
        sys.path.insert(0, str(HERE.parent / "conformance"))
        try:
            import worker as conformance  # type: ignore[import-not-found]
        finally:
            sys.path.pop(0)
        w = Worker("127.0.0.1:1", [conformance.group("conf")], id="x")
        got = {t.definition.name: t.content_hash for t in w.registration().groups[0].tools}
        self.assertEqual(got, GO_CONFORMANCE_HASHES)


if __name__ == "__main__":
    unittest.main()
