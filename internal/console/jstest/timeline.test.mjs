// Tests of the timeline model: rows of each kind, merged text, the loop tree, approvals,
// the bound on rows. Run: node --test internal/console/
import assert from "node:assert/strict";
import { test } from "node:test";

import { Timeline, buildLoopTree, eventKind, isTerminal, loopLine } from "../assets/timeline.js";

let seq = 0;
/** An event with the next sequence number. */
function ev(fields) {
  seq++;
  return { runId: "r1", sequence: String(seq), time: "2024-05-01T10:00:00.000Z", ...fields };
}

function ops(changes) {
  return changes.map((c) => `${c.op}:${c.row ? c.row.kind : c.loop.key}`);
}

test("eventKind names the event field as the proto does", () => {
  assert.deepEqual(eventKind({ toolCallStarted: { callId: "c" } }), { kind: "tool_call_started", payload: { callId: "c" } });
  assert.equal(eventKind({ sequence: "1", scope: { loopId: "l" }, nestedLoopFinished: {} }).kind, "nested_loop_finished");
  assert.equal(eventKind({ sequence: "1", somethingNew: { a: 1 } }).kind, "something_new");
  assert.equal(eventKind({ sequence: "1" }).kind, "unknown");
  assert.ok(isTerminal({ finalResult: {} }));
  assert.ok(isTerminal({ error: { code: "CANCELLED" } }));
  assert.ok(!isTerminal({ terminated: {}, scope: { loopId: "nested" } }));
  assert.ok(!isTerminal({ usage: {} }));
});

test("a run's events become rows of its own loop", () => {
  const t = new Timeline();
  const first = t.add(ev({ started: { model: "openai/gpt-4o-mini", tools: ["a", "b"], loopId: "loop_root", maxIterations: 20 } }));
  assert.deepEqual(ops(first), ["loop:", "updateLoop:", "add:started"]);
  assert.equal(t.loops.get("").id, "loop_root");
  assert.match(first[2].row.summary, /openai\/gpt-4o-mini, 2 tools, at most 20 iterations/);

  const started = t.add(ev({ toolCallStarted: { callId: "c1", tool: "search", argumentsJson: '{"q": "x"}', iteration: 1, loopId: "loop_root" } }))[0].row;
  assert.equal(started.tone, "pending");
  assert.match(started.summary, /^search\(\{"q":"x"\}\) · call c1 · iteration 1$/);
  assert.equal(started.details[0].text, '{\n  "q": "x"\n}');

  const done = t.add(ev({ toolCallFinished: { callId: "c1", tool: "search", outcome: "TOOL_CALL_OUTCOME_OK", content: '{"n":1}', workerId: "w1", duration: "1.250s", attempts: 2, loopId: "loop_root" } }));
  assert.deepEqual(ops(done), ["update:tool_call_started", "add:tool_call_finished"]);
  assert.equal(started.tone, "ok");
  const fin = done[1].row;
  assert.equal(fin.summary, "search ok · in 1.25 s · on w1 · after 2 attempts · call c1");
  assert.deepEqual(fin.details.map((d) => d.label), ["result"]);

  t.add(ev({ usage: { model: "m", inputTokens: "1200", outputTokens: "30", costUsd: 0.0042 } }));
  const end = t.add(ev({ finalResult: { text: "The answer.", iterations: 2 } }));
  assert.equal(end.at(-1).row.kind, "final_result");
  assert.ok(t.ended);
  assert.deepEqual(t.rows.map((r) => r.kind), ["started", "tool_call_started", "tool_call_finished", "usage", "final_result"]);
  assert.match(t.rows[3].summary, /m: 1,200 in \/ 30 out tokens, \$0\.0042/);
  assert.equal(t.rows[2].seq, String(Number(t.rows[1].seq) + 1));
});

test("events seen already are ignored (a stream watched again)", () => {
  const t = new Timeline();
  t.add({ sequence: "5", started: { loopId: "l" } });
  t.add({ sequence: "9", usage: {} });
  assert.deepEqual(t.add({ sequence: "9", usage: {} }), []);
  assert.deepEqual(t.add({ sequence: "7", usage: {} }), []);
  assert.equal(t.add({ sequence: "10", usage: {} }).length, 1);
  assert.equal(t.lastSeq, "10");
  // int64 order, not string order
  t.add({ sequence: "100", usage: {} });
  assert.equal(t.lastSeq, "100");
});

test("text deltas merge into the message being streamed", () => {
  const t = new Timeline();
  t.add(ev({ started: { loopId: "L" } }));
  const a = t.add(ev({ textDelta: { loopId: "L", iteration: 1, text: "Hel" } }));
  assert.deepEqual(ops(a), ["add:message"]);
  const row = a[0].row;
  assert.ok(row.streaming);
  assert.deepEqual(ops(t.add(ev({ textDelta: { loopId: "L", iteration: 1, text: "lo" } }))), ["update:message"]);
  assert.equal(row.summary, "Hello");
  // the message of that iteration completes it, without a row of its own
  assert.deepEqual(ops(t.add(ev({ message: { loopId: "L", iteration: 1, text: "Hello, world" } }))), ["update:message"]);
  assert.equal(row.summary, "Hello, world");
  assert.ok(!row.streaming);
  // a delta of the next iteration starts another message
  const b = t.add(ev({ textDelta: { loopId: "L", iteration: 2, text: "Final" } }));
  assert.deepEqual(ops(b), ["add:message"]);
  const fin = t.add(ev({ finalResult: { text: "Final" } }));
  assert.deepEqual(ops(fin), ["update:message", "add:final_result"]);
  assert.ok(!b[0].row.streaming);
  assert.equal(t.rows.filter((r) => r.kind === "message").length, 2);
});

test("nested loops hang under the tool call that started them", () => {
  const t = new Timeline();
  t.add(ev({ started: { loopId: "root" } }));
  const c1 = t.add(ev({ toolCallStarted: { callId: "c1", tool: "researcher", loopId: "root" } }))[0].row;
  const c2 = t.add(ev({ toolCallStarted: { callId: "c2", tool: "researcher", loopId: "root" } }))[0].row;
  const scopeA = { loopId: "loop_a", parentLoopId: "root", tool: "researcher", kind: "AGENTIC_KIND_AGENT", depth: 1, childRunId: "run_child" };
  const a = t.add(ev({ scope: scopeA, nestedLoopStarted: { model: "m", tools: ["x"], maxIterations: 5 } }));
  assert.deepEqual(ops(a), ["loop:loop_a", "updateLoop:loop_a", "add:nested_loop_started"]);
  assert.equal(a[0].loop.anchor, c1.id, "the first call of the tool gets the first loop");
  assert.equal(a[0].loop.parent, "");
  assert.equal(a[0].loop.childRunId, "run_child");
  assert.equal(a[0].loop.kind, "agent");
  assert.equal(a[2].row.loop, "loop_a");

  const scopeB = { loopId: "loop_b", parentLoopId: "root", tool: "researcher", kind: "AGENTIC_KIND_SIMPLE", depth: 1 };
  const b = t.add(ev({ scope: scopeB, nestedLoopStarted: {} }));
  assert.equal(b[0].loop.anchor, c2.id);

  // a loop inside loop_a, started by one of loop_a's calls
  const inner = t.add(ev({ scope: scopeA, toolCallStarted: { callId: "c1", tool: "deep", loopId: "loop_a" } }))[0].row;
  assert.equal(inner.loop, "loop_a");
  const scopeC = { loopId: "loop_c", parentLoopId: "loop_a", tool: "deep", depth: 2 };
  const c = t.add(ev({ scope: scopeC, nestedLoopStarted: {} }));
  assert.equal(c[0].loop.parent, "loop_a");
  assert.equal(c[0].loop.anchor, inner.id);

  // the same call id in two loops: each finishes its own
  t.add(ev({ scope: scopeA, toolCallFinished: { callId: "c1", tool: "deep", outcome: "TOOL_CALL_OUTCOME_ERROR", loopId: "loop_a" } }));
  assert.equal(inner.tone, "error");
  assert.equal(c1.tone, "pending");

  const answer = t.add(ev({ scope: scopeA, textDelta: { loopId: "loop_a", iteration: 2, text: "found it" } }))[0].row;
  assert.ok(answer.streaming);
  const fin = t.add(ev({ scope: scopeA, nestedLoopFinished: { iterations: 3, toolCalls: 4 } }));
  assert.deepEqual(ops(fin), ["update:message", "updateLoop:loop_a", "add:nested_loop_finished"]);
  assert.ok(!answer.streaming, "a nested loop's streamed answer ends with the loop");
  assert.equal(t.loops.get("loop_a").status, "ok");
  assert.equal(t.loops.get("loop_a").summary, "3 iterations, 4 tool calls");
  t.add(ev({ scope: scopeB, nestedLoopFinished: { error: "boom" } }));
  assert.equal(t.loops.get("loop_b").status, "error");
  // a nested loop's terminated event does not end the run
  t.add(ev({ scope: scopeC, terminated: { tool: "stop", scope: "TERMINATE_SCOPE_ACTION", reason: "done" } }));
  assert.ok(!t.ended);
});

test("a nested loop that names its call hangs under that call, whatever the order", () => {
  const t = new Timeline();
  t.add(ev({ started: { loopId: "root" } }));
  const c1 = t.add(ev({ toolCallStarted: { callId: "c1", tool: "researcher", loopId: "root" } }))[0].row;
  const c2 = t.add(ev({ toolCallStarted: { callId: "c2", tool: "researcher", loopId: "root" } }))[0].row;
  // parallel calls of one agentic tool: the second call's loop starts first
  const second = t.add(ev({ scope: { loopId: "loop_2", parentLoopId: "root", parentCallId: "c2", tool: "researcher", depth: 1 }, nestedLoopStarted: {} }));
  assert.equal(second[0].loop.anchor, c2.id);
  const first = t.add(ev({ scope: { loopId: "loop_1", parentLoopId: "root", parentCallId: "c1", tool: "researcher", depth: 1 }, nestedLoopStarted: {} }));
  assert.equal(first[0].loop.anchor, c1.id);
});

test("a loop seen first through its events is made then, under its parent", () => {
  const t = new Timeline();
  t.add(ev({ started: { loopId: "root" } }));
  const c = t.add(ev({ scope: { loopId: "orphan", parentLoopId: "gone", tool: "x", depth: 2 }, usage: {} }));
  assert.deepEqual(ops(c), ["loop:orphan", "add:usage"]);
  assert.equal(c[0].loop.parent, "");
  assert.equal(c[0].loop.anchor, 0);
});

test("approvals: pending, decided, and ended with the run", () => {
  const t = new Timeline();
  t.add(ev({ started: { loopId: "root" } }));
  const req = t.add(ev({ approvalRequested: { callId: "c9", tool: "delete_all", argumentsJson: "{}", loopId: "root", iteration: 2, deadline: "2024-05-01T10:05:00Z" } }))[0].row;
  assert.deepEqual(req.approval, { callId: "c9", loopId: "root", tool: "delete_all", status: "pending", decidedBy: "", reason: "" });
  const dec = t.add(ev({ approvalDecided: { callId: "c9", tool: "delete_all", loopId: "root", approved: false, reason: "too risky", decidedBy: "alice" } }));
  assert.deepEqual(ops(dec), ["update:approval_requested", "add:approval_decided"]);
  assert.equal(req.approval.status, "denied");
  assert.equal(req.approval.decidedBy, "alice");
  assert.equal(dec[1].row.summary, "delete_all call c9 denied by alice: too risky");

  const other = t.add(ev({ approvalRequested: { callId: "c10", tool: "pay", loopId: "root" } }))[0].row;
  const end = t.add(ev({ error: { code: "CANCELLED", message: "cancelled", reason: "ERROR_REASON_CANCELLED" } }));
  assert.equal(other.approval.status, "ended");
  assert.ok(end.some((c) => c.op === "update" && c.row === other));
  assert.equal(t.rows.at(-1).summary, "CANCELLED · cancelled: cancelled");
});

test("the timeline keeps at most maxRows rows, but never drops a pending approval", () => {
  const t = new Timeline({ maxRows: 3 });
  t.add(ev({ started: { loopId: "root" } }));
  const appr = t.add(ev({ approvalRequested: { callId: "c", loopId: "root" } }))[0].row;
  t.add(ev({ progress: { status: "1" } }));
  const c = t.add(ev({ progress: { status: "2" } }));
  assert.deepEqual(ops(c), ["add:progress", "drop:started"]);
  const d = t.add(ev({ progress: { status: "3" } }));
  assert.deepEqual(ops(d), ["add:progress", "drop:progress"]);
  assert.equal(t.rows.length, 3);
  assert.equal(t.dropped, 2);
  assert.ok(t.rows.includes(appr));
  const big = new Timeline({ maxRows: 5000 });
  for (let i = 1; i <= 6000; i++) {
    big.add({ sequence: String(i), progress: { status: String(i) } });
  }
  assert.equal(big.rows.length, 5000);
  assert.equal(big.dropped, 1000);
  assert.equal(big.rows[0].seq, "1001");
});

test("rows of the other kinds read well", () => {
  const t = new Timeline();
  const row = (fields) => t.add(ev(fields)).find((c) => c.op === "add").row;
  assert.equal(row({ toolsChanged: { added: ["a"], removed: ["b"], tools: ["a", "c"] } }).summary, "+a, −b · now 2 tools");
  const bb = row({ blackboardChanged: { index: 3, tool: "fetch", object: { typeName: "crm.Customer", name: "cust", json: '{"id":1}' } } });
  assert.equal(bb.summary, "#3 crm.Customer “cust” from fetch");
  assert.equal(bb.details[0].object.json, '{\n  "id": 1\n}');
  const asset = row({ assetAdded: { asset: { tool: "chart", object: { typeName: "Chart", mediaType: "image/png", data: "iVBORw0KGgo=", size: "8" } } } });
  assert.equal(asset.summary, "Chart (image/png, 8 B) from chart");
  assert.equal(asset.details[0].object.imageSrc, "data:image/png;base64,iVBORw0KGgo=");
  assert.equal(row({ artifact: { tool: "t", sink: "assets", object: { typeName: "T", json: "1" } } }).summary, "T from t → assets");
  assert.equal(row({ warning: { field: "tool_groups[1]", message: "nobody serves x" } }).tone, "warn");
  assert.equal(row({ messageToUser: { text: "hi\nthere" } }).summary, "hi there");
  assert.equal(row({ progress: { tool: "crawl", status: "50%" } }).summary, "crawl: 50%");
  assert.match(row({ replanRequested: { tool: "planner", reason: "stale", iterations: 4, added: [{ typeName: "Plan", json: "{}" }] } }).summary, /planner asked to plan again after 4 iterations: stale/);
  const long = row({ toolCallStarted: { callId: "c", tool: "t", argumentsJson: JSON.stringify({ s: "x".repeat(1000) }) } });
  assert.ok(long.summary.length <= 200);
  assert.ok(long.details[0].text.length > 1000);
});

test("buildLoopTree makes GetRun's loops a tree", () => {
  const loops = [
    { scope: { loopId: "root" }, iterations: 3, toolCalls: 2, running: true },
    { scope: { loopId: "a", parentLoopId: "root", tool: "research", kind: "AGENTIC_KIND_SIMPLE", depth: 1 }, iterations: 2 },
    { scope: { loopId: "b", parentLoopId: "a", tool: "deep", depth: 2 }, error: "boom" },
    { scope: { loopId: "c", parentLoopId: "root", tool: "write", depth: 1 } },
    { scope: { loopId: "d", parentLoopId: "unknown", tool: "lost", depth: 3 } },
  ];
  const roots = buildLoopTree(loops);
  assert.equal(roots.length, 1);
  const ids = (n) => [n.info.scope.loopId, n.children.map(ids)];
  assert.deepEqual(ids(roots[0]), ["root", [["a", [["b", []]]], ["c", []], ["d", []]]]);
  assert.equal(loopLine(loops[0]), "run loop · 3 iterations, 2 tool calls · running");
  assert.equal(loopLine(loops[1]), "research (simple) · 2 iterations, 0 tool calls · done");
  assert.equal(loopLine(loops[2]), "deep (unspecified) · 0 iterations, 0 tool calls · failed: boom");
  assert.deepEqual(buildLoopTree(undefined), []);
});

test("an approval's summary says how it was decided", () => {
  const t = new Timeline();
  const a = t.add(ev({ approvalRequested: { callId: "a1", tool: "pay", argumentsJson: "{}", deadline: "2024-05-01T10:05:00Z" } })).find((c) => c.op === "add").row;
  assert.match(a.summary, /^pay\(\{\}\) · call a1 waits for approval until \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
  t.add(ev({ approvalDecided: { callId: "a1", tool: "pay", approved: true, decidedBy: "bob" } }));
  assert.equal(a.summary, "pay({}) · call a1 was approved");
  assert.equal(a.tone, "ok");
});

test("a tool's questions wait as approvals do, each on its own, and say how they were answered", () => {
  const t = new Timeline();
  t.add(ev({ started: { loopId: "root" } }));
  const input = (id, message) => ({ inputId: id, message, requestedSchemaJson: '{"type":"object"}', server: "crm", protocolVersion: "2026-07-28" });
  const q1 = t.add(ev({ approvalRequested: { callId: "c1", tool: "open", loopId: "root", input: input("1", "Whose account?") } }))[0].row;
  const q2 = t.add(ev({ approvalRequested: { callId: "c1", tool: "open", loopId: "root", input: input("2", "Which currency?") } }))[0].row;
  assert.equal(q1.title, "question");
  assert.equal(q1.summary, "open · call c1 asks: Whose account?");
  assert.deepEqual(q1.approval, { callId: "c1", loopId: "root", tool: "open", status: "pending", decidedBy: "", reason: "",
    inputId: "1", question: "Whose account?", schema: '{"type":"object"}' });
  const dec = t.add(ev({ approvalDecided: { callId: "c1", tool: "open", loopId: "root", approved: true, decidedBy: "alice", inputId: "1", contentJson: '{"name":"carol"}' } }));
  assert.deepEqual(ops(dec), ["update:approval_requested", "add:approval_decided"]);
  assert.equal(q1.summary, "open · call c1 was answered");
  assert.equal(dec[1].row.summary, 'open call c1 question 1 answered by alice: {"name":"carol"}');
  assert.equal(q2.approval.status, "pending");
  t.add(ev({ approvalDecided: { callId: "c1", tool: "open", loopId: "root", approved: false, decidedBy: "deadline", reason: "nobody answered in time", inputId: "2" } }));
  assert.equal(q2.summary, "open · call c1 got no answer");
  assert.equal(q2.approval.status, "denied");
});

test("fields the server sends as null or empty read as unset", () => {
  const t = new Timeline();
  t.add({ sequence: "1", scope: null, started: { loopId: "root", tools: null, model: "m" } });
  const c = t.add({ sequence: "2", scope: null, toolCallFinished: { callId: "c", tool: "t", outcome: "TOOL_CALL_OUTCOME_OK", content: "x", workerId: "", duration: "0.5s", artifact: null, attempts: 0, loopId: "root" } });
  assert.deepEqual(ops(c), ["add:tool_call_finished"]);
  assert.equal(c[0].row.summary, "t ok · in 500 ms · call c");
  assert.deepEqual(c[0].row.details.map((d) => d.label), ["result"]);
  const n = t.add({ sequence: "3", scope: { loopId: "n", parentLoopId: "root", tool: "a", childRunId: "" }, nestedLoopFinished: { iterations: 1, toolCalls: 0, error: "" } });
  assert.equal(t.loops.get("n").status, "ok");
  assert.equal(n.at(-1).row.tone, "ok");
  assert.equal(t.rows.length, 3);
});
