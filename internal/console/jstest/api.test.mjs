// Tests of the Connect client: the envelope codec, errors, unary calls and server
// streams against a fake fetch. Run: node --test internal/console/
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Client, ConnectError, EnvelopeDecoder, FLAG_END_STREAM, codeFromHttpStatus, decodeErrorInfo,
  describeError, encodeEnvelope, endStreamError, errorFromJSON,
} from "../assets/api.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** envelope of a JSON value */
function env(flags, value) {
  return encodeEnvelope(flags, enc.encode(JSON.stringify(value)));
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** protobuf bytes of a length-delimited field */
function pbField(field, bytes) {
  return concat(Uint8Array.of((field << 3) | 2, bytes.length), bytes);
}

function base64(bytes) {
  return Buffer.from(bytes).toString("base64").replace(/=+$/, "");
}

/** A fake fetch that records its calls and answers with respond(url, init). */
function fakeFetch(respond) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    return respond(url, init);
  };
  return { fetch, calls };
}

/** A Response whose body comes in the given chunks. */
function streamResponse(chunks, { status = 200, type = "application/connect+json", fail = null } = {}) {
  let i = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (i < chunks.length) {
        controller.enqueue(chunks[i++]);
      } else if (fail) {
        controller.error(fail);
      } else {
        controller.close();
      }
    },
  });
  return new Response(body, { status, headers: { "Content-Type": type } });
}

test("encodeEnvelope writes flags, a big-endian length and the message", () => {
  const e = encodeEnvelope(2, Uint8Array.of(7, 8, 9));
  assert.deepEqual([...e], [2, 0, 0, 0, 3, 7, 8, 9]);
  const big = encodeEnvelope(0, new Uint8Array(0x010203));
  assert.deepEqual([...big.subarray(0, 5)], [0, 0, 1, 2, 3]);
});

test("EnvelopeDecoder reads envelopes split anywhere across chunks", () => {
  const all = concat(env(0, { a: 1 }), env(0, { b: "ü".repeat(300) }), env(FLAG_END_STREAM, {}));
  for (const size of [1, 2, 3, 5, 7, 64, all.length]) {
    const d = new EnvelopeDecoder();
    const got = [];
    for (let i = 0; i < all.length; i += size) {
      got.push(...d.push(all.subarray(i, i + size)));
    }
    assert.equal(got.length, 3, `chunks of ${size}`);
    assert.deepEqual(JSON.parse(dec.decode(got[0].data)), { a: 1 });
    assert.equal(JSON.parse(dec.decode(got[1].data)).b.length, 300);
    assert.equal(got[2].flags, FLAG_END_STREAM);
    assert.ok(d.empty);
  }
});

test("EnvelopeDecoder keeps a partial envelope and refuses a huge one", () => {
  const d = new EnvelopeDecoder();
  assert.deepEqual(d.push(env(0, { x: 1 }).subarray(0, 6)), []);
  assert.ok(!d.empty);
  assert.throws(() => new EnvelopeDecoder(10).push(encodeEnvelope(0, new Uint8Array(11))), (e) => e instanceof ConnectError && e.code === "resource_exhausted");
});

test("errors: Connect JSON, end-stream messages, HTTP statuses", () => {
  const info = concat(pbField(1, enc.encode("RUN_NOT_FOUND")), pbField(2, enc.encode("toolmesh.dev")),
    pbField(3, concat(pbField(1, enc.encode("run_id")), pbField(2, enc.encode("r1")))));
  const err = errorFromJSON({ code: "not_found", message: "no run r1", details: [{ type: "google.rpc.ErrorInfo", value: base64(info) }] }, 404);
  assert.equal(err.code, "not_found");
  assert.equal(err.reason, "RUN_NOT_FOUND");
  assert.deepEqual(err.details[0].metadata, { run_id: "r1" });
  const d = describeError(err);
  assert.equal(d.title, "not_found (HTTP 404)");
  assert.equal(d.message, "no run r1");
  assert.deepEqual(d.lines, ["reason: RUN_NOT_FOUND (toolmesh.dev)", "run_id: r1"]);

  assert.equal(errorFromJSON({ message: "no code" }, 500), null);
  assert.equal(endStreamError({}), null);
  assert.equal(endStreamError({ metadata: { a: ["b"] } }), null);
  const es = endStreamError({ error: { code: "permission_denied", message: "tenant b" }, metadata: { x: ["y"] } });
  assert.equal(es.code, "permission_denied");
  assert.deepEqual(es.metadata, { x: ["y"] });

  assert.equal(codeFromHttpStatus(401), "unauthenticated");
  assert.equal(codeFromHttpStatus(403), "permission_denied");
  assert.equal(codeFromHttpStatus(404), "unimplemented");
  assert.equal(codeFromHttpStatus(503), "unavailable");
  assert.equal(codeFromHttpStatus(418), "unknown");
  assert.deepEqual(decodeErrorInfo(new Uint8Array(0)), { reason: "", domain: "", metadata: {} });
});

test("BadRequest and RetryInfo details are read", () => {
  const violation = concat(pbField(1, enc.encode("run_id")), pbField(2, enc.encode("too long")));
  const bad = pbField(1, violation);
  const retry = pbField(1, Uint8Array.of(0x08, 2)); // retry_delay { seconds: 2 }
  const err = errorFromJSON({
    code: "invalid_argument", message: "bad",
    details: [{ type: "google.rpc.BadRequest", value: base64(bad) }, { type: "google.rpc.RetryInfo", value: base64(retry) }, { type: "x.Unknown", value: "%%%" }],
  }, 400);
  assert.deepEqual(describeError(err).lines, ["run_id: too long", "retry after 2 s"]);
  assert.equal(err.details[2].type, "x.Unknown");
});

test("unary sends the Connect headers, the token and the JSON request", async () => {
  const { fetch, calls } = fakeFetch(() => new Response(JSON.stringify({ runs: [{ runId: "r1" }], nextPageToken: "t2" }), { status: 200, headers: { "Content-Type": "application/json" } }));
  let token = "";
  const c = new Client({ fetch, token: () => token });
  const res = await c.listRuns({ state: "RUN_STATE_RUNNING", pageSize: 50 });
  assert.deepEqual(res, { runs: [{ runId: "r1" }], nextPageToken: "t2" });
  assert.equal(calls[0].url, "/toolmesh.v1.OrchestratorService/ListRuns");
  assert.equal(calls[0].init.method, "POST");
  assert.deepEqual(calls[0].init.headers, { "Content-Type": "application/json", "Connect-Protocol-Version": "1" });
  assert.deepEqual(JSON.parse(calls[0].init.body), { state: "RUN_STATE_RUNNING", pageSize: 50 });

  token = "s3cret";
  await c.getRun("r1");
  assert.equal(calls[1].init.headers.Authorization, "Bearer s3cret");
  assert.deepEqual(JSON.parse(calls[1].init.body), { runId: "r1" });
});

test("approveToolCall names the decision", async () => {
  const { fetch, calls } = fakeFetch(() => new Response("{}", { status: 200, headers: { "Content-Type": "application/json" } }));
  const c = new Client({ fetch });
  await c.approveToolCall({ runId: "r", loopId: "loop_1", callId: "c1", approve: false, reason: "no" });
  assert.deepEqual(JSON.parse(calls[0].init.body), { runId: "r", loopId: "loop_1", callId: "c1", decision: "APPROVAL_DECISION_DENY", reason: "no" });
  await c.approveToolCall({ runId: "r", callId: "c1", approve: true });
  assert.deepEqual(JSON.parse(calls[1].init.body), { runId: "r", callId: "c1", decision: "APPROVAL_DECISION_APPROVE" });
});

test("unary errors: Connect error JSON, a proxy's page, a network failure", async () => {
  const answers = [
    new Response(JSON.stringify({ code: "permission_denied", message: "not yours" }), { status: 403, headers: { "Content-Type": "application/json" } }),
    new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway", headers: { "Content-Type": "text/html" } }),
    new Response("<html>login</html>", { status: 200, headers: { "Content-Type": "text/html" } }),
  ];
  const c = new Client({ fetch: async () => answers.shift() });
  await assert.rejects(c.getRun("r"), (e) => e instanceof ConnectError && e.code === "permission_denied" && e.status === 403 && e.rawMessage === "not yours");
  await assert.rejects(c.getRun("r"), (e) => e.code === "unavailable" && e.rawMessage === "HTTP 502 Bad Gateway");
  await assert.rejects(c.getRun("r"), (e) => e.code === "internal");
  const down = new Client({ fetch: async () => { throw new TypeError("Failed to fetch"); } });
  await assert.rejects(down.getRun("r"), (e) => e.code === "unavailable" && /Failed to fetch/.test(e.message));
});

test("serverStream frames the request and reads messages across chunks", async () => {
  const body = concat(env(0, { sequence: "1", started: {} }), env(0, { sequence: "2", usage: {} }), env(FLAG_END_STREAM, {}));
  const chunks = [body.subarray(0, 3), body.subarray(3, 20), body.subarray(20)];
  const { fetch, calls } = fakeFetch(() => streamResponse(chunks));
  const got = [];
  await new Client({ fetch }).watchRun("r1", "0", (ev) => got.push(ev));
  assert.deepEqual(got.map((e) => e.sequence), ["1", "2"]);
  const init = calls[0].init;
  assert.equal(calls[0].url, "/toolmesh.v1.OrchestratorService/WatchRun");
  assert.equal(init.headers["Content-Type"], "application/connect+json");
  assert.equal(init.headers["Connect-Protocol-Version"], "1");
  const d = new EnvelopeDecoder().push(init.body);
  assert.equal(d.length, 1);
  assert.equal(d[0].flags, 0);
  assert.deepEqual(JSON.parse(dec.decode(d[0].data)), { runId: "r1", afterSequence: "0" });
});

test("serverStream rejects with the end-stream error, and when the stream breaks", async () => {
  const withError = concat(env(0, { sequence: "1" }), env(FLAG_END_STREAM, { error: { code: "not_found", message: "no run" } }));
  const got = [];
  await assert.rejects(new Client({ fetch: async () => streamResponse([withError]) }).watchRun("r", "0", (e) => got.push(e)),
    (e) => e instanceof ConnectError && e.code === "not_found");
  assert.equal(got.length, 1);

  const cut = env(0, { sequence: "1" });
  await assert.rejects(new Client({ fetch: async () => streamResponse([cut.subarray(0, 4)]) }).watchRun("r", "0", () => {}),
    (e) => e.code === "unavailable" && /middle of a message/.test(e.rawMessage));
  await assert.rejects(new Client({ fetch: async () => streamResponse([cut]) }).watchRun("r", "0", () => {}),
    (e) => e.code === "unavailable" && /without its end/.test(e.rawMessage));
  await assert.rejects(new Client({ fetch: async () => streamResponse([cut], { fail: new Error("reset") }) }).watchRun("r", "0", () => {}),
    (e) => e.code === "unavailable" && /reset/.test(e.rawMessage));
  await assert.rejects(new Client({ fetch: async () => new Response(JSON.stringify({ code: "unauthenticated", message: "who?" }), { status: 401 }) }).watchRun("r", "0", () => {}),
    (e) => e.code === "unauthenticated" && e.status === 401);
  await assert.rejects(new Client({ fetch: async () => streamResponse([env(1, {})]) }).watchRun("r", "0", () => {}),
    (e) => e.code === "internal" && /compressed/.test(e.rawMessage));
});

test("serverStream stops when its signal aborts", async () => {
  const ac = new AbortController();
  const fetch = async (_url, init) => {
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(env(0, { sequence: "1" }));
        init.signal.addEventListener("abort", () => controller.error(new DOMException("aborted", "AbortError")));
      },
    });
    return new Response(body, { status: 200, headers: { "Content-Type": "application/connect+json" } });
  };
  const got = [];
  const p = new Client({ fetch }).watchRun("r", "0", (e) => {
    got.push(e);
    ac.abort();
  }, { signal: ac.signal });
  await assert.rejects(p, (e) => e.name === "AbortError");
  assert.equal(got.length, 1);
});
