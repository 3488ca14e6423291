"""The ToolCallContext metadata codec."""

from __future__ import annotations

import json
import pathlib
import unittest

from toolmesh import ctxcodec

VECTORS = json.loads((pathlib.Path(__file__).parent / "testdata" / "vectors.json").read_text(encoding="utf-8"))


class CodecTest(unittest.TestCase):
    def test_metadata_keys_as_go(self) -> None:
        for key, want in VECTORS["context_key"]:
            with self.subTest(key=key):
                self.assertEqual(ctxcodec.metadata_key(key), want)

    def test_round_trip(self) -> None:
        ctx = {"region": "eu", "k\u00e9y": "line1\r\nline2\x00<&>", "\U0001f600": ""}
        md = ctxcodec.encode(ctx)
        self.assertIn(("tm-ctx-ojswo2lpny-bin", b"eu"), md)
        self.assertEqual(ctxcodec.decode(md), ctx)

    def test_ignores_other_keys_and_drops_reserved(self) -> None:
        md = [("traceparent", "00-abc"), ("tm-ctx-x", b"no suffix"),
              (ctxcodec.metadata_key("toolmesh.tenant"), b"evil"), (ctxcodec.metadata_key("a"), b"1")]
        self.assertEqual(ctxcodec.decode(md), {"a": "1"})

    def test_errors(self) -> None:
        cases = [
            ([("tm-ctx-ME-bin", b"x")], '"ME" is not lowercase base32'),
            ([("tm-ctx-mf-bin", b"x")], 'is not canonical unpadded base32'),
            ([("tm-ctx-m-bin", b"x")], 'is not canonical unpadded base32'),
            ([("tm-ctx--bin", b"x")], "carries an empty key"),
            ([("tm-ctx-me-bin", b"x"), ("tm-ctx-me-bin", b"y")], 'has 2 values, want 1'),
            ([("tm-ctx-me-bin", b"\xff")], 'value of key "a" is not valid UTF-8'),
            ([("tm-ctx-7a-bin", b"x")], 'which is not valid UTF-8'),
        ]
        for md, want in cases:
            with self.subTest(md=md):
                with self.assertRaises(ctxcodec.ContextError) as cm:
                    ctxcodec.decode(md)
                self.assertIn(want, str(cm.exception))

    def test_size_bound(self) -> None:
        key = ctxcodec.metadata_key("big")
        # key + padded base64 of the value + 32, as the contract counts it.
        size = len(key) + 4 * ((6000 + 2) // 3) + 32
        ctxcodec.decode([(key, b"x" * 6000)])
        with self.assertRaises(ctxcodec.ContextTooLargeError) as cm:
            ctxcodec.decode([(key, b"x" * 6000)], max_bytes=size - 1)
        self.assertIn(f"tool call context is {size} bytes encoded, over the {size - 1}-byte limit", str(cm.exception))
        self.assertIn('(largest entry: "big")', str(cm.exception))
        with self.assertRaises(ctxcodec.ContextTooLargeError):
            ctxcodec.encode({"big": "x" * 7000})


if __name__ == "__main__":
    unittest.main()
