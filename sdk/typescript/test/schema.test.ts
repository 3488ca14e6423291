// Input schemas from zod, and the validation of arguments.
import { test } from "node:test";
import assert from "node:assert/strict";
import { z } from "zod";
import { InvalidArgumentsError, inputSchemaJson, parseArguments, strictInput } from "../src/schema.js";
import { tool, ToolDefinitionError } from "../src/tool.js";

test("the JSON Schema keeps declaration order, lists required properties, refuses others", () => {
  const s = z.object({ text: z.string(), b: z.number().optional(), a: z.int(), d: z.boolean().default(false) });
  assert.equal(
    inputSchemaJson(s),
    '{"type":"object","properties":{"text":{"type":"string"},"b":{"type":"number"},"a":{"type":"integer"},"d":{"default":false,"type":"boolean"}},"required":["text","a"],"additionalProperties":false}',
  );
  assert.equal(inputSchemaJson(z.object({})), '{"type":"object","properties":{},"additionalProperties":false}');
});

test("a loose object keeps its additional properties", () => {
  assert.equal(inputSchemaJson(z.looseObject({ a: z.string() })), '{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{}}');
});

test("the conformance schemas are what the Go SDK derives from structs", () => {
  const t = tool({ name: "echo", description: "Echo the text back", input: z.object({ text: z.string() }), idempotent: true }, ({ text }) => text);
  assert.equal(t.inputSchemaJson, '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}');
  // The hash Go computes for this very definition (test/vectors).
  assert.equal(t.contentHash, "458b47716308d85925095823805cc2f58c79efc236c856a2166f1602500b2e16");
});

const ab = strictInput(z.object({ a: z.number(), b: z.number(), e: z.enum(["x", "y"]).optional(), n: z.object({ q: z.boolean() }).optional() }));

test("valid arguments parse; blank means {}", () => {
  assert.deepEqual(parseArguments(ab, '{"a":1,"b":2.5}'), { a: 1, b: 2.5 });
  assert.deepEqual(parseArguments(strictInput(z.object({})), "  "), {});
});

function message(args: string): string {
  try {
    parseArguments(ab, args);
  } catch (e) {
    assert.ok(e instanceof InvalidArgumentsError);
    return e.message;
  }
  assert.fail("no error");
}

test("invalid arguments name the property", () => {
  assert.equal(message('{"a":1}'), 'missing required property "b"');
  assert.equal(message('{"a":"1","b":2}'), 'property "a": expected number, got string');
  assert.equal(message('{"a":1,"b":2,"c":3}'), 'unexpected property "c"; allowed: "a", "b", "e", "n"');
  assert.equal(message('{"a":1,"b":2,"e":"z"}'), 'property "e": "z" is not one of "x", "y"');
  assert.equal(message('{"a":1,"b":2,"n":{"q":1}}'), 'property "n.q": expected boolean, got integer');
  assert.equal(message("[1]"), "arguments must be a JSON object, got array");
  assert.match(message("{"), /^the arguments are not valid JSON/);
});

test("definitions the orchestrator would refuse throw", () => {
  const input = z.object({});
  assert.throws(() => tool({ name: "bad name", description: "", input }, () => ""), ToolDefinitionError);
  assert.throws(() => tool({ name: "x", description: "d".repeat(8193), input }, () => ""), ToolDefinitionError);
  assert.throws(() => tool({ name: "x", description: "", input, timeoutMs: -1 }, () => ""), ToolDefinitionError);
  assert.throws(() => tool({ name: "x", description: "", input: z.object({ d: z.date() }) }, () => ""), ToolDefinitionError);
  assert.throws(() => tool({ name: "x", description: "", input, blackboardTypes: Array(17).fill("T") }, () => ""), ToolDefinitionError);
});
