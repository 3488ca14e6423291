"""Schemas from type hints, argument validation and conversion."""

from __future__ import annotations

import dataclasses
import enum
import unittest
from typing import Annotated, Any, Literal, Optional, TypedDict

from toolmesh import Context, tool
from toolmesh.gojson import decode, encode
from toolmesh.schema import ArgumentsError, SchemaError, Validator, convert, function_schema, schema_of


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = ""


class Address(TypedDict, total=False):
    street: str
    zip: int


class SchemaTest(unittest.TestCase):
    def test_plain_parameters_in_order(self) -> None:
        def f(b: float, a: int, flag: bool, name: str = "x") -> None: ...

        s, _ = function_schema(f)
        self.assertEqual(encode(s, sort_keys=False), '{"type":"object","properties":{"b":{"type":"number"},'
                         '"a":{"type":"integer"},"flag":{"type":"boolean"},"name":{"type":"string"}},'
                         '"required":["b","a","flag"],"additionalProperties":false}')

    def test_no_parameters(self) -> None:
        def f() -> None: ...

        s, _ = function_schema(f)
        # As the Go SDK infers it for an empty struct: no "required".
        self.assertEqual(encode(s, sort_keys=False), '{"type":"object","properties":{},"additionalProperties":false}')

    def test_kinds(self) -> None:
        cases: list[tuple[Any, dict[str, Any]]] = [
            (list[int], {"type": "array", "items": {"type": "integer"}}),
            (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
            (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
            (Literal[1, 2.5], {"type": "number", "enum": [1, 2.5]}),
            (Color, {"type": "string", "enum": ["red", "green"]}),
            (Optional[int], {"type": ["integer", "null"]}),
            (Optional[Literal["a"]], {"type": ["string", "null"], "enum": ["a", None]}),
            (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
            (tuple[int, str], {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                               "items": False, "minItems": 2, "maxItems": 2}),
            (Any, {}),
            (Annotated[str, "The text"], {"type": "string", "description": "The text"}),
        ]
        for tp, want in cases:
            with self.subTest(tp=tp):
                self.assertEqual(schema_of(tp), want)

    def test_dataclass_and_typeddict(self) -> None:
        self.assertEqual(schema_of(Point), {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "label": {"type": "string"}},
            "required": ["x", "y"], "additionalProperties": False})
        self.assertEqual(schema_of(Address), {
            "type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}},
            "additionalProperties": False})

    def test_unsupported(self) -> None:
        with self.assertRaises(SchemaError):
            schema_of(bytes)
        with self.assertRaises(SchemaError):
            schema_of(dict[int, str])

    def test_context_is_left_out_and_docstring_describes(self) -> None:
        @tool
        async def lookup(ctx: Context, sku: str, limit: Optional[int] = None) -> str:
            """Look a SKU up.

            Args:
                sku: The stock keeping unit,
                    as printed on the box.
                limit: At most this many.
            """
            return sku

        self.assertEqual(lookup.description, "Look a SKU up.")
        s = decode(lookup.input_schema_json)
        self.assertEqual(list(s["properties"]), ["sku", "limit"])
        self.assertEqual(s["properties"]["sku"]["description"], "The stock keeping unit, as printed on the box.")
        self.assertEqual(s["required"], ["sku"])


class FakeModel:
    """Quacks like a pydantic v2 model (pydantic is optional, and not installed here)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        return {"type": "object", "properties": {"item": {"$ref": "#/$defs/Item"}}, "required": ["item"],
                "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}}}

    @classmethod
    def model_validate(cls, v: Any) -> FakeModel:
        return cls(**v)


class PydanticTest(unittest.TestCase):
    def test_model_schema_with_hoisted_defs(self) -> None:
        @tool
        async def order(o: FakeModel) -> str:
            return str(o.item)  # type: ignore[attr-defined]

        s = decode(order.input_schema_json)
        self.assertEqual(s["properties"]["o"]["properties"]["item"], {"$ref": "#/$defs/Item"})
        self.assertIn("Item", s["$defs"])
        args = order.validator.validate_arguments('{"o":{"item":{"sku":"A-1"}}}')
        with self.assertRaises(ArgumentsError):
            order.validator.validate_arguments('{"o":{"item":{"sku":1}}}')
        m = convert(args["o"], FakeModel)
        self.assertEqual(m.item, {"sku": "A-1"})  # type: ignore[attr-defined]


class ValidatorTest(unittest.TestCase):
    def setUp(self) -> None:
        def f(a: float, b: int, color: Color, tags: list[str], p: Point, note: Optional[str] = None) -> None: ...

        self.schema, self.params = function_schema(f)
        self.v = Validator(self.schema)
        self.ok = '{"a":1.5,"b":2,"color":"red","tags":["x"],"p":{"x":1,"y":2}}'

    def test_valid(self) -> None:
        args = self.v.validate_arguments(self.ok)
        self.assertEqual(set(args), {"a", "b", "color", "tags", "p"})

    def test_messages_name_the_property(self) -> None:
        cases = {
            '{"a":"x","b":2,"color":"red","tags":[],"p":{"x":1,"y":2}}': 'property "a": expected number, got string',
            '{"a":1,"b":2.5,"color":"red","tags":[],"p":{"x":1,"y":2}}': 'property "b": expected integer, got number',
            '{"a":1,"b":2,"color":"blue","tags":[],"p":{"x":1,"y":2}}':
                'property "color": "blue" is not one of "red", "green"',
            '{"a":1,"b":2,"color":"red","tags":[1],"p":{"x":1,"y":2}}': 'property "tags[0]": expected string, got integer',
            '{"a":1,"b":2,"color":"red","tags":[],"p":{"x":1}}': 'missing required property "p.y"',
            '{"b":2,"color":"red","tags":[]}': 'missing required properties "a", "p"',
            '{"a":1,"b":2,"color":"red","tags":[],"p":{"x":1,"y":2},"zz":1}':
                'unexpected property "zz"; allowed: "a", "b", "color", "note", "p", "tags"',
            "[1]": "arguments must be a JSON object, got array",
        }
        for args, want in cases.items():
            with self.subTest(args=args):
                with self.assertRaises(ArgumentsError) as cm:
                    self.v.validate_arguments(args)
                self.assertEqual(str(cm.exception), want)

    def test_integral_number_is_an_integer(self) -> None:
        self.v.validate_arguments(self.ok.replace('"b":2', '"b":2.0'))

    def test_blank_is_empty_object(self) -> None:
        self.assertEqual(Validator({"type": "object"}).validate_arguments("  "), {})

    def test_bounds_and_combinators(self) -> None:
        v = Validator({"type": "object", "properties": {
            "n": {"type": "number", "minimum": 1, "exclusiveMaximum": 10, "multipleOf": 0.5},
            "s": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
            "u": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
            "r": {"$ref": "#/$defs/pos"}}, "$defs": {"pos": {"type": "integer", "minimum": 0}}})
        bad = {'{"n":0}': 'property "n": 0 is less than the minimum 1',
               '{"n":10}': 'property "n": 10 must be less than 10',
               '{"n":1.25}': 'property "n": 1.25 is not a multiple of 0.5',
               '{"s":"a"}': 'property "s": must be at least 2 characters long, got 1',
               '{"s":"AB"}': 'property "s": "AB" does not match the pattern "^[a-z]+$"',
               '{"u":"x"}': 'no alternative matches: property "u": expected integer, got string; or property "u": '
                            'expected boolean, got string',
               '{"r":-1}': 'property "r": -1 is less than the minimum 0'}
        for args, want in bad.items():
            with self.subTest(args=args):
                with self.assertRaises(ArgumentsError) as cm:
                    v.validate_arguments(args)
                self.assertEqual(str(cm.exception), want)
        v.validate_arguments('{"n":9.5,"s":"ab","u":true,"r":3}')


class ConvertTest(unittest.TestCase):
    def test_to_annotated_types(self) -> None:
        args = decode('{"a":1.0,"b":2.0,"color":"green","p":{"x":1,"y":2},"tags":["a"],"d":{"k":1},"o":null}')
        self.assertEqual(convert(args["a"], float), 1.0)
        self.assertEqual(convert(args["b"], int), 2)
        self.assertIs(convert(args["color"], Color), Color.GREEN)
        self.assertEqual(convert(args["p"], Point), Point(1.0, 2.0))
        self.assertEqual(convert(args["tags"], list[str]), ["a"])
        self.assertEqual(convert(args["d"], dict[str, int]), {"k": 1})
        self.assertIsNone(convert(args["o"], Optional[int]))
        self.assertEqual(convert(decode("3"), int | str), 3)
        self.assertEqual(convert(args["d"], Any), {"k": 1})


if __name__ == "__main__":
    unittest.main()
