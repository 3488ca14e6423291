// What a worker registers: groups, facade trees of every kind, checks of the groups.
import { test } from "node:test";
import assert from "node:assert/strict";
import { z } from "zod";
import { Catalog, InvalidGroupError } from "../src/catalog.js";
import { facade, facadeByCategory, selectableFacade } from "../src/facade.js";
import { Permission } from "../src/gen/toolmesh/v1/tool_pb.js";
import { tool } from "../src/tool.js";

const mk = (name: string) => tool({ name, description: name, input: z.object({}) }, () => name);

test("a by-category facade registers its categories and its parameter's schema", () => {
  const [a, b, c] = ["a", "b", "c"].map(mk) as [ReturnType<typeof mk>, ReturnType<typeof mk>, ReturnType<typeof mk>];
  const inner = facade("inner", "Inner", [c], { noGuideTool: true, noContextTool: true });
  const f = facadeByCategory("files", "Files", [{ name: "read", tools: [a] }, { name: "write", tools: [b, inner] }], { categoryParameter: "area" });
  const cat = new Catalog([{ role: "g", permissions: ["INTERNET_ACCESS"], facades: [f] }]);
  const g = cat.groups[0]!;
  assert.deepEqual(g.group!.permissions, [Permission.INTERNET_ACCESS]);
  assert.deepEqual(g.tools.map((t) => t.definition!.name), ["a", "b", "c"]);
  const node = g.facades[0]!;
  assert.equal(node.categoryParameter, "area");
  assert.deepEqual(node.categories.map((c) => [c.name, c.children]), [["read", ["a"]], ["write", ["b", "inner"]]]);
  assert.equal(
    node.definition!.inputSchemaJson,
    '{"type":"object","properties":{"area":{"type":"string","description":"Category to access. Available: read, write","enum":["read","write"]}},"required":["area"]}',
  );
  const nested = node.children[2]!.child;
  assert.equal(nested.case, "facade");
  assert.equal(nested.case === "facade" && nested.value.noGuideTool, true);
  assert.deepEqual([...cat.facades.keys()].sort(), ["files", "inner"]);
});

test("a selectable facade registers its schema and is served by the worker", () => {
  const a = mk("a");
  const s = selectableFacade({ name: "pick", description: "Pick", input: z.object({ n: z.string() }), children: [a], select: () => [a] });
  const g = new Catalog([{ role: "g", tools: [s] }]).groups[0]!;
  assert.equal(g.facades[0]!.selectable, true);
  assert.equal(g.facades[0]!.definition!.inputSchemaJson, '{"type":"object","properties":{"n":{"type":"string"}},"required":["n"],"additionalProperties":false}');
});

test("groups the orchestrator would refuse throw", () => {
  const a = mk("a");
  assert.throws(() => new Catalog([]), InvalidGroupError);
  assert.throws(() => new Catalog([{ role: "bad role" , tools: [a] }]), InvalidGroupError);
  assert.throws(() => new Catalog([{ role: "g" }]), /has no tools/);
  assert.throws(() => new Catalog([{ role: "g", tools: [a] }, { role: "g", tools: [mk("b")] }]), /given twice/);
  assert.throws(() => new Catalog([{ role: "g", tools: [a] }, { role: "h", tools: [a] }]), /given twice \(in groups "g" and "h"\)/);
  assert.throws(() => new Catalog([{ role: "g", tools: [a, mk("x")], facades: [facade("x", "x", [a])] }]), /has the name of a/);
  // A leaf may also be given as a tool.
  assert.equal(new Catalog([{ role: "g", tools: [a], facades: [facade("f", "f", [a])] }]).groups[0]!.tools.length, 1);
});
