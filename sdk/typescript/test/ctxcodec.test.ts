// The ToolCallContext metadata codec (contract, "ToolCallContext as gRPC metadata").
import { test } from "node:test";
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { base32DecodeCanonical, base32Encode, ContextCodecError, decodeContext, encodeContext, metadataKey } from "../src/ctxcodec.js";

test("the key of the contract's example", () => {
  assert.equal(metadataKey("region"), "tm-ctx-ojswo2lpny-bin");
});

test("base32 round trip and canonical form", () => {
  for (const s of ["", "f", "fo", "foo", "foob", "fooba", "foobar", "é日本😀"]) {
    const b = new TextEncoder().encode(s);
    const enc = base32Encode(b);
    assert.match(enc, /^[a-z2-7]*$/);
    assert.deepEqual(base32DecodeCanonical(enc), b);
  }
  assert.equal(base32Encode(new TextEncoder().encode("foobar")), "mzxw6ytboi");
  // Non-zero trailing bits: not the canonical form of any key.
  assert.equal(base32DecodeCanonical("mzxw6ytboj"), undefined);
  assert.equal(base32DecodeCanonical("a"), undefined);
});

test("encode and decode round trip any UTF-8, CR, LF and NUL included", () => {
  const ctx = { region: "eu", "tenant id": "a\r\nb\u0000c", "日本": "😀", x: "" };
  const md = encodeContext(ctx);
  md.set("traceparent", "00-abc");
  assert.deepEqual(decodeContext(md), ctx);
});

test("reserved keys are not sent and are dropped when they arrive", () => {
  const md = encodeContext({ "toolmesh.loop_id": "l", a: "b" });
  assert.deepEqual(Object.keys(md.toJSON()), [metadataKey("a")]);
  md.set(metadataKey("toolmesh.tenant"), Buffer.from("evil"));
  assert.deepEqual(decodeContext(md), { a: "b" });
});

function md(entries: [string, Buffer][]): grpc.Metadata {
  const m = new grpc.Metadata();
  for (const [k, v] of entries) m.add(k, v);
  return m;
}

test("malformed keys and values are errors", () => {
  assert.throws(() => decodeContext(md([["tm-ctx-ojswo2lpnz-bin", Buffer.from("x")]])), /not canonical unpadded base32/);
  assert.throws(() => decodeContext(md([["tm-ctx-0000-bin", Buffer.from("x")]])), /is not lowercase base32/);
  assert.throws(() => decodeContext(md([["tm-ctx--bin", Buffer.from("x")]])), /carries an empty key/);
  assert.throws(() => decodeContext(md([["tm-ctx-ojswo2lpny-bin", Buffer.from([0xff, 0xfe])]])), /value of key "region" is not valid UTF-8/);
  assert.throws(
    () =>
      decodeContext(
        md([
          ["tm-ctx-ojswo2lpny-bin", Buffer.from("a")],
          ["tm-ctx-ojswo2lpny-bin", Buffer.from("b")],
        ]),
      ),
    /has 2 values, want 1/,
  );
  // A key that is not UTF-8 (0xff).
  assert.throws(() => decodeContext(md([[`tm-ctx-${base32Encode(new Uint8Array([0xff]))}-bin`, Buffer.from("x")]])), /which is not valid UTF-8/);
});

test("the size bound counts key, padded base64 of the value and 32 per entry", () => {
  const key = metadataKey("k");
  const value = "v".repeat(100);
  const size = key.length + 4 * Math.ceil(100 / 3) + 32;
  assert.deepEqual(decodeContext(encodeContext({ k: value }, size), size), { k: value });
  assert.throws(() => encodeContext({ k: value }, size - 1), ContextCodecError);
  assert.throws(() => decodeContext(encodeContext({ k: value }), size - 1), /tool call context is \d+ bytes encoded, over the \d+-byte limit \(largest entry: "k"\)/);
});
