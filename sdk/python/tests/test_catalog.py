"""What a worker registers, and the groups it refuses."""

from __future__ import annotations

import unittest

from toolmesh import DomainType, Facade, Group, Permission, Worker, WorkerError, tool


@tool(description="A")
async def a() -> str:
    return "a"


@tool(description="B")
async def b(x: int) -> str:
    return str(x)


@tool(name="a", description="Another a")
async def a2() -> str:
    return "a2"


class CatalogTest(unittest.TestCase):
    def test_registration(self) -> None:
        g = Group("g.1", "Group", tools=[b, a], usage_notes="Use a first.", provider="me", version="2",
                  permissions=[Permission.INTERNET_ACCESS],
                  domain_types=[DomainType("Cart", "A cart", {"type": "object"})],
                  facades=[Facade.plain("f", "F", [a, Facade.plain("inner", "Inner", [b])], exclusive=True)])
        r = Worker("127.0.0.1:7070", [g], id="w", capacity=3, version="1.2").registration()
        self.assertEqual((r.worker_id, r.capacity, r.version), ("w", 3, "1.2"))
        gr = r.groups[0]
        self.assertEqual((gr.group.role, gr.group.usage_notes, list(gr.group.permissions)), ("g.1", "Use a first.", [2]))
        self.assertEqual([t.definition.name for t in gr.tools], ["a", "b"])
        self.assertEqual(gr.domain_types[0].schema_json, '{"type":"object"}')
        f = gr.facades[0]
        self.assertTrue(f.exclusive)
        self.assertEqual(f.definition.input_schema_json, '{"type":"object","properties":{}}')
        self.assertEqual(f.children[0].tool, "a")
        self.assertEqual(f.children[1].facade.children[0].tool, "b")

    def test_by_category_schema_as_go_renders_it(self) -> None:
        f = Facade.by_category("files", "Files", {"read": [a], "write": [b]})
        self.assertEqual(f.input_schema_json, '{"type":"object","properties":{"category":{"type":"string",'
                         '"description":"Category to access. Available: read, write","enum":["read","write"]}},'
                         '"required":["category"]}')

    def test_refusals(self) -> None:
        cases = [
            ([Group("bad role!", tools=[a])], "role"),
            ([Group("g", tools=[a]), Group("g", tools=[b])], "given twice"),
            ([Group("g", tools=[a, a2])], "given twice in group"),
            ([Group("g", tools=[a]), Group("h", tools=[a])], "given twice (in groups"),
            ([Group("g", tools=[a], facades=[Facade.plain("b", "B", [a])]), Group("h", tools=[b])], "name of a facade"),
            ([Group("g", tools=[a], facades=[Facade.plain("f", "F", [a2])])], "two different tools named"),
            ([Group("g")], "has no tools"),
        ]
        for groups, want in cases:
            with self.subTest(want=want):
                with self.assertRaises(WorkerError) as cm:
                    Worker("127.0.0.1:7070", groups, id="w")
                self.assertIn(want, str(cm.exception))
        with self.assertRaises(WorkerError):
            Worker("127.0.0.1:7070", [Group("g", tools=[a])], id="w", listen="0.0.0.0:0")
        Worker("127.0.0.1:7070", [Group("g", tools=[a])], id="w", listen="0.0.0.0:0", plaintext=True)
        with self.assertRaises(WorkerError):
            Worker("127.0.0.1:7070", [Group("g", tools=[a])], id="bad id")
        with self.assertRaises(ValueError):
            tool(name="bad name")(a.func)  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
