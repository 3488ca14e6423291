// Tests of how the console writes values, links traces and shows objects.
// Run: node --test internal/console/
import assert from "node:assert/strict";
import { test } from "node:test";

process.env.TZ = "UTC"; // the console writes local times; the test's are UTC

const f = await import("../assets/format.js");

test("truncate, oneLine, clip", () => {
  assert.equal(f.truncate("short", 10), "short");
  assert.equal(f.truncate("0123456789abc", 10), "012345678…");
  assert.equal(f.truncate(undefined), "");
  assert.equal(f.truncate("x".repeat(500)).length, f.CELL_CHARS);
  assert.equal(f.oneLine("  a\n\tb  c "), "a b c");
  assert.equal(f.clip("abcdef", 3), "abc\n… (3 more characters not shown)");
  assert.equal(f.clip("abc", 3), "abc");
});

test("enum labels and state classes", () => {
  assert.equal(f.stateLabel("RUN_STATE_REPLAN_REQUESTED"), "replan requested");
  assert.equal(f.stateLabel(undefined), "unspecified");
  assert.equal(f.stateClass("RUN_STATE_REPLAN_REQUESTED"), "state-replan-requested");
  assert.equal(f.enumLabel("WORKER_STATE_EJECTED", "WORKER_STATE_"), "ejected");
  assert.equal(f.RUN_STATES.length, 7);
});

test("times and durations", () => {
  assert.equal(f.formatDateTime("2024-05-01T13:45:02.5Z"), "2024-05-01 13:45:02");
  assert.equal(f.formatDateTime(""), "—");
  assert.equal(f.formatDateTime("not a time"), "—");
  assert.equal(f.formatClock("2024-05-01T13:45:02.125Z"), "13:45:02.125");
  assert.equal(f.durationSeconds("1.500s"), 1.5);
  assert.equal(f.durationSeconds("-2s"), -2);
  assert.ok(Number.isNaN(f.durationSeconds("2m")));
  assert.equal(f.formatDuration("0.250s"), "250 ms");
  assert.equal(f.formatDuration("1.500s"), "1.5 s");
  assert.equal(f.formatDuration("42.25s"), "42.3 s");
  assert.equal(f.formatDuration("123s"), "2 min 3 s");
  assert.equal(f.formatDuration("3720s"), "1 h 2 min");
  assert.equal(f.formatDuration(undefined), "—");
  assert.equal(f.elapsed("2024-05-01T10:00:00Z", "2024-05-01T10:00:30Z"), "30 s");
  assert.equal(f.elapsed("2024-05-01T10:00:00Z", undefined, Date.parse("2024-05-01T10:01:00Z")), "1 min 0 s");
});

test("numbers, money, sizes, quotas", () => {
  assert.equal(f.formatCount("1234567"), "1,234,567");
  assert.equal(f.formatCount(12), "12");
  assert.equal(f.formatCount(undefined), "0");
  assert.equal(f.formatCount("-1000"), "-1,000");
  assert.equal(f.formatCount("9007199254740993"), "9,007,199,254,740,993");
  assert.equal(f.formatUsd(0), "$0");
  assert.equal(f.formatUsd(0.00423456), "$0.004235");
  assert.equal(f.formatUsd(12.5), "$12.50");
  assert.equal(f.formatBytes(512), "512 B");
  assert.equal(f.formatBytes("1536"), "1.5 KiB");
  assert.equal(f.formatBytes(3 * 1024 * 1024), "3.0 MiB");
  assert.equal(f.formatLimit(0), "unbounded");
  assert.equal(f.formatLimit(1200), "1,200");
  assert.equal(f.formatAvailable(12.96, 60), "12.9");
  assert.equal(f.formatAvailable(5, 0), "—");
  assert.deepEqual(f.budgetLines({ maxCostUsd: 1, costUsd: 0.25, tokens: "1500", maxActions: 10, actions: 3 }),
    ["cost $0.25 of $1.00", "tokens 1,500 (no limit)", "tool calls 3 of 10"]);
  assert.equal(f.usageLine({ model: "openai/gpt-4o-mini", inputTokens: "1200", outputTokens: "300" }), "openai/gpt-4o-mini: 1,200 in / 300 out tokens");
  assert.ok(f.seqAfter("10", "9"));
  assert.ok(!f.seqAfter("9", "10"));
  assert.ok(f.seqAfter("9223372036854775807", "9223372036854775806"));
});

test("JSON, pretty and compact", () => {
  assert.equal(f.prettyJSON('{"a":[1,2]}'), '{\n  "a": [\n    1,\n    2\n  ]\n}');
  assert.equal(f.prettyJSON("not json"), "not json");
  assert.equal(f.prettyJSON(undefined), "");
  assert.equal(f.compactJSON('{ "a" : 1 }'), '{"a":1}');
  assert.equal(f.compactJSON("a\nb"), "a b");
});

test("traceLink fills in the trace id, encoded, and links to http(s) only", () => {
  assert.equal(f.traceLink("https://jaeger.example/trace/{trace_id}", "4bf92f3577b34da6a3ce929d0e0e4736"), "https://jaeger.example/trace/4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(f.traceLink("https://t.example/?q={trace_id}&x={trace_id}", "a b/c"), "https://t.example/?q=a%20b%2Fc&x=a%20b%2Fc");
  assert.equal(f.traceLink("", "abc"), null);
  assert.equal(f.traceLink("https://t.example/{trace_id}", ""), null);
  assert.equal(f.traceLink("https://t.example/static", "abc"), null);
  assert.equal(f.traceLink("javascript:alert('{trace_id}')", "abc"), null);
  assert.equal(f.traceLink("/relative/{trace_id}", "abc"), null);
});

test("objectView shows JSON, images from data: URLs, and nothing of other blobs", () => {
  const json = f.objectView({ typeName: "Customer", name: "c", json: '{"id":7}' });
  assert.deepEqual(json, { typeName: "Customer", name: "c", kind: "json", mediaType: "", size: 8, note: "", json: '{\n  "id": 7\n}' });
  const png = f.objectView({ typeName: "Chart", mediaType: "image/PNG; x=y", data: "iVBORw0KGgo=", size: "8" });
  assert.equal(png.imageSrc, "data:image/png;base64,iVBORw0KGgo=");
  assert.equal(png.size, 8);
  assert.equal(f.objectView({ mediaType: "image/svg+xml", data: "PHN2Zz4=" }).imageSrc, undefined);
  assert.equal(f.objectView({ mediaType: "text/html", data: "PGI+" }).imageSrc, undefined);
  assert.equal(f.objectView({ mediaType: "image/gif", data: "bad\"><script>" }).imageSrc, undefined);
  const missing = f.objectView({ typeName: "Pdf", mediaType: "application/pdf", size: "2000000" });
  assert.equal(missing.size, 2000000);
  assert.match(missing.note, /left out/);
  assert.equal(f.objectView(undefined).kind, "json");
});
