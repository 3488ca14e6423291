"""Go's encodings, against vectors computed by Go (testdata/govectors)."""

from __future__ import annotations

import json
import pathlib
import unittest

from toolmesh.gojson import (
    JSONError,
    Number,
    canonical_json,
    decode,
    decode_first,
    encode,
    go_duration,
    go_format_float,
    go_quote,
    is_print,
)

VECTORS = json.loads((pathlib.Path(__file__).parent / "testdata" / "vectors.json").read_text(encoding="utf-8"))


class QuoteTest(unittest.TestCase):
    def test_go_vectors(self) -> None:
        for s, want in VECTORS["quote"]:
            with self.subTest(s=s):
                self.assertEqual(go_quote(s), want)

    def test_bytes_that_are_not_utf8(self) -> None:
        self.assertEqual(go_quote(b"\x80"), '"\\x80"')
        self.assertEqual(go_quote(b"a\xffb"), '"a\\xffb"')
        self.assertEqual(go_quote(b"\xed\xa0\x80"), '"\\xed\\xa0\\x80"')

    def test_is_print(self) -> None:
        self.assertTrue(is_print(ord(" ")))
        self.assertTrue(is_print(ord("~")))
        self.assertFalse(is_print(0x7F))
        self.assertFalse(is_print(0xA0))
        self.assertTrue(is_print(0x1FAE8))  # Unicode 15, which Python 3.11's tables lack
        self.assertFalse(is_print(0x378))


class CanonicalTest(unittest.TestCase):
    def test_go_vectors(self) -> None:
        for raw, want in VECTORS["canonical"]:
            with self.subTest(raw=raw):
                self.assertEqual(canonical_json(raw), want)

    def test_numbers_keep_their_text(self) -> None:
        v = decode('{"a":1.0,"b":1e5,"c":-0}')
        self.assertIsInstance(v["a"], Number)
        self.assertEqual(encode(v), '{"a":1.0,"b":1e5,"c":-0}')

    def test_decode_refuses_what_go_refuses(self) -> None:
        for bad in ("NaN", '{"a":Infinity}', "[1,]", "{'a':1}", '"\x01"', "1 2", ""):
            with self.subTest(bad=bad):
                with self.assertRaises(JSONError):
                    decode(bad)

    def test_decode_first_ignores_the_rest(self) -> None:
        self.assertEqual(decode_first('{"a":1} {"b":2}'), {"a": "1"})


class FloatTest(unittest.TestCase):
    def test_shortest_g(self) -> None:
        cases = {5.0: "5", 0.5: "0.5", -3.25: "-3.25", 1e6: "1e+06", 123456.0: "123456", 1e-5: "1e-05",
                 0.0001: "0.0001", 1e21: "1e+21", 0.1 + 0.2: "0.30000000000000004", -0.0: "-0"}
        for f, want in cases.items():
            with self.subTest(f=f):
                self.assertEqual(go_format_float(f), want)

    def test_json_floats(self) -> None:
        cases = {1e21: "1e+21", 1e20: "100000000000000000000", 1.5e-7: "1.5e-7", 0.000001: "0.000001", 2.5: "2.5"}
        for f, want in cases.items():
            with self.subTest(f=f):
                self.assertEqual(encode(f), want)


class DurationTest(unittest.TestCase):
    def test_go_vectors(self) -> None:
        for ns, want in VECTORS["duration"]:
            with self.subTest(ns=ns):
                self.assertEqual(go_duration(ns), want)


if __name__ == "__main__":
    unittest.main()
