// Content hash, strconv.Quote, Duration.String and canonical JSON against vectors
// computed by Go (test/vectors/gen-vectors.go.txt).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { canonicalJson, compareBytes, goJsonMarshal } from "../src/canonical.js";
import { goDuration, goQuote } from "../src/gostr.js";
import { contentHash } from "../src/hash.js";

interface Vectors {
  quote: Record<string, string>;
  duration: Record<string, string>;
  canonical: [string, string][];
  hash: {
    name: string;
    description: string;
    schema: string;
    metadata?: Record<string, string>;
    returnDirect?: boolean;
    idempotent?: boolean;
    timeoutMs?: number;
    blackboardTypes?: string[];
    reportsProgress?: boolean;
    requiresApproval?: boolean;
    receiverType?: string;
    oncePerLoop?: string;
    hash: string;
  }[];
}

const vectors = JSON.parse(
  readFileSync(fileURLToPath(new URL("../../test/vectors/go-vectors.json", import.meta.url)), "utf8"),
) as Vectors;

test("goQuote matches strconv.Quote", () => {
  for (const [input, want] of Object.entries(vectors.quote)) assert.equal(goQuote(input), want, JSON.stringify(input));
});

test("goQuote writes a lone surrogate as U+FFFD, its wire form", () => {
  assert.equal(goQuote("a\ud800b"), '"a\ufffdb"');
});

test("goDuration matches time.Duration.String", () => {
  for (const [nanos, want] of Object.entries(vectors.duration)) assert.equal(goDuration(BigInt(nanos)), want, nanos);
  assert.equal(goDuration(-1500000000n), "-1.5s");
});

test("canonicalJson matches encoding/json's re-encoding", () => {
  for (const [input, want] of vectors.canonical) assert.equal(canonicalJson(input), want, input);
});

test("contentHash matches the orchestrator's", () => {
  for (const v of vectors.hash) {
    const got = contentHash({
      name: v.name,
      description: v.description,
      inputSchemaJson: v.schema,
      metadata: v.metadata ?? {},
      returnDirect: !!v.returnDirect,
      idempotent: !!v.idempotent,
      timeoutMs: v.timeoutMs ?? 0,
      blackboardTypes: v.blackboardTypes ?? [],
      reportsProgress: !!v.reportsProgress,
      requiresApproval: !!v.requiresApproval,
      receiverType: v.receiverType ?? "",
      ...(v.oncePerLoop !== undefined ? { oncePerLoopAdvice: v.oncePerLoop } : {}),
    });
    assert.equal(got, v.hash, v.name);
  }
});

test("compareBytes orders by UTF-8 bytes, not UTF-16 units", () => {
  assert.ok(compareBytes("\uffff", "\u{1F600}") < 0);
  assert.ok(compareBytes("\u{1F600}", "\uffff") > 0);
  assert.ok(compareBytes("A", "a") < 0);
  assert.equal(compareBytes("é", "é"), 0);
  assert.ok(compareBytes("ab", "abc") < 0);
});

test("goJsonMarshal writes what Go's json.Marshal writes", () => {
  assert.equal(goJsonMarshal({ b: 1, a: "<&>", c: [true, null, 0.5], d: undefined }), '{"a":"\\u003c\\u0026\\u003e","b":1,"c":[true,null,0.5]}');
  assert.equal(goJsonMarshal(1e21), "1e+21");
  assert.equal(goJsonMarshal("\u2028"), '"\\u2028"');
});
