"""Error details, the idempotency ledger and the result helpers."""

from __future__ import annotations

import toolmesh  # noqa: F401 (first: it finds Debian's grpc for another interpreter)

import asyncio
import unittest

import grpc

from toolmesh import BlackboardObject, MemoryLedger, ToolmeshError, pb
from toolmesh.errors import parse_status_details, status_details
from toolmesh.ledger import KeyLocks
from toolmesh.tool import Blackboard, check_media_type


class ErrorDetailsTest(unittest.TestCase):
    def test_round_trip(self) -> None:
        code, data = status_details("WORKER_DRAINING", "worker is draining")
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
        d = parse_status_details(data)
        self.assertEqual((d.reason, d.retry_delay), ("WORKER_DRAINING", 0.001))
        code, data = status_details("UNKNOWN_TOOL", "no such tool", {"field": "tool"})
        d = parse_status_details(data)
        self.assertEqual((code, d.reason, d.retry_delay, dict(d.metadata)),
                         (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOOL", None, {"field": "tool"}))

    def test_from_status_reads_all_details(self) -> None:
        st = pb.Status(code=3, message="page_size: must be 0 to 1000")
        st.details.append(pb.pack_any(pb.ErrorInfo(reason="INVALID_REQUEST", domain="toolmesh.dev")))
        st.details.append(pb.pack_any(pb.RetryInfo(retry_delay=pb.duration(2.5))))
        bad = pb.BadRequest()
        bad.field_violations.add(field="page_size", description="must be 0 to 1000")
        st.details.append(pb.pack_any(bad))
        e = ToolmeshError.from_status(3, st.message, st.SerializeToString())
        self.assertEqual((e.code, e.reason, e.retry_delay, e.field), (grpc.StatusCode.INVALID_ARGUMENT,
                                                                       "INVALID_REQUEST", 2.5, "page_size"))
        self.assertTrue(e.retryable)

    def test_other_domains_and_garbage_are_ignored(self) -> None:
        st = pb.Status(code=5, message="x")
        st.details.append(pb.pack_any(pb.ErrorInfo(reason="OTHER", domain="example.com")))
        self.assertEqual(parse_status_details(st.SerializeToString()).reason, "")
        self.assertEqual(parse_status_details(b"\xff\xff").reason, "")
        e = ToolmeshError.from_status(grpc.StatusCode.UNAVAILABLE, "connection refused", None)
        self.assertEqual((e.reason, e.retry_delay, e.retryable), ("", None, False))


class LedgerTest(unittest.IsolatedAsyncioTestCase):
    async def test_bounded_in_entries_and_time(self) -> None:
        now = [0.0]
        led = MemoryLedger(2, clock=lambda: now[0])
        await led.store("a", b"1", 10)
        await led.store("b", b"2", 10)
        await led.store("c", b"3", 10)
        self.assertEqual(len(led), 2)
        self.assertIsNone(await led.load("a"))  # the oldest went first
        self.assertEqual(await led.load("b"), b"2")
        now[0] = 10
        self.assertIsNone(await led.load("b"))  # expired
        self.assertEqual(len(led), 1)

    async def test_key_locks_serialise_and_forget(self) -> None:
        locks = KeyLocks()
        order: list[str] = []

        async def hold(name: str) -> None:
            release = await locks.acquire("k")
            order.append(name + "+")
            await asyncio.sleep(0.01)
            order.append(name + "-")
            release()

        await asyncio.gather(hold("a"), hold("b"))
        self.assertEqual(order, ["a+", "a-", "b+", "b-"])
        self.assertEqual(len(locks), 0)


class BlackboardTest(unittest.TestCase):
    def test_lookups_and_bounds(self) -> None:
        b = Blackboard([BlackboardObject("crm.Customer", json='{"id":1}', name="c"),
                        BlackboardObject("Thing", json='{"_typeLabels":["x.Customer"]}')], limit=30)
        last = b.last("Customer")
        self.assertIsNotNone(last)
        assert last is not None
        self.assertEqual(last.type_name, "Thing")  # the newest that satisfies the type
        b.add("Customer", {"id": 2})
        last = b.last("Customer")
        assert last is not None
        self.assertEqual(last.value, {"id": 2})
        self.assertEqual(b.get("c").json, '{"id":1}')  # type: ignore[union-attr]
        with self.assertRaises(ValueError):
            b.add("Big", "x" * 40)  # over the call's byte bound
        with self.assertRaises(ValueError):
            b.add(" ", 1)
        with self.assertRaises(ValueError):
            b.add("Blob", data=b"x", media_type="nonsense")
        blob = b.add("Blob", data=b"x", media_type="text/csv; charset=utf-8")
        self.assertEqual(blob.to_proto().size, 1)

    def test_media_types(self) -> None:
        for ok in ("image/png", "text/csv; charset=utf-8", "application/vnd.api+json"):
            check_media_type(ok)
        for bad in ("", "png", "image/", "a/b/c", "image/png\n", "é/x"):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    check_media_type(bad)


if __name__ == "__main__":
    unittest.main()
