// The worker's Invoke and InvokeStream, called directly: results, errors, context,
// facades, state, blackboard, signals, progress, the result bound, the ledger, drain.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { z } from "zod";
import { decodeStatusDetails } from "../src/errors.js";
import { encodeContext } from "../src/ctxcodec.js";
import { facade, selectableFacade } from "../src/facade.js";
import { type Ledger, MemoryLedger } from "../src/ledger.js";
import { ToolErrorCode, TerminateScope } from "../src/gen/toolmesh/v1/tool_pb.js";
import { replan, terminate, tool, toolError } from "../src/tool.js";
import { type Harness, startWorker, textOf } from "./helpers.js";

const none = z.object({});
let effects = 0;

const echo = tool({ name: "echo", description: "Echo the text back", input: z.object({ text: z.string() }), idempotent: true }, ({ text }) => `echo: ${text}`);
const add = tool({ name: "add", description: "Add two numbers", input: z.object({ a: z.number(), b: z.number() }) }, ({ a, b }) => String(a + b));
const who = tool({ name: "who", description: "Show the context", input: none }, (_i, ctx) =>
  JSON.stringify({ ctx: ctx.context, tenant: ctx.tenant, key: ctx.idempotencyKey, run: ctx.runId, loop: ctx.loopId, call: ctx.callId }),
);
const throws = tool({ name: "throws", description: "Throw", input: z.object({ kind: z.enum(["error", "string", "empty"]) }) }, ({ kind }) => {
  if (kind === "error") throw new Error("it broke");
  if (kind === "empty") throw new Error("");
  throw "a string"; // eslint-disable-line no-throw-literal
});
const fails = tool({ name: "fails", description: "Fail", input: none }, () => toolError("no such thing", "INVALID_ARGUMENTS"));
const art = tool({ name: "art", description: "Artifact", input: none }, () => ({ content: "see artifact", artifact: { typeName: "Point", value: { x: 1 } } }));
const stop = tool({ name: "stop", description: "Stop", input: none }, () => terminate("action", "enough"));
const again = tool({ name: "again", description: "Replan", input: z.object({ bad: z.boolean() }) }, ({ bad }) =>
  bad ? replan("why", [{ typeName: "", value: 1 }]) : replan("plan changed", [{ typeName: "Fact", value: { k: 1 }, name: "f" }]),
);
const count = tool({ name: "count", description: "Count calls in this cart", input: none }, (_i, ctx) => {
  const n = ctx.state.json<{ n: number }>()?.n ?? 0;
  ctx.state.set({ n: n + 1 });
  return `count ${n + 1}`;
});
const open = selectableFacade({
  name: "open",
  description: "Open a counter",
  input: z.object({ name: z.string() }),
  children: [count],
  usageNotes: "Count away.",
  select: ({ name }) => (name === "bad" ? ["echo_elsewhere"] : { tools: [count], state: { n: 0 } }),
});
const calc = facade("calc", "Calculator", [add], { exclusive: true });
const note = tool({ name: "note", description: "Note", input: z.object({ text: z.string() }) }, ({ text }, ctx) => {
  ctx.blackboard.add({ typeName: "Note", value: { text }, name: "last" });
  return "noted";
});
const readNote = tool({ name: "read_note", description: "Read", input: none, blackboardTypes: ["Note"] }, (_i, ctx) => {
  const t = ctx.blackboard.last("Note")?.value<{ text: string }>()?.text;
  return t ?? toolError("no note");
});
const steps = tool({ name: "steps", description: "Steps", input: z.object({ n: z.int() }), reportsProgress: true }, async ({ n }, ctx) => {
  for (let i = 1; i <= n; i++) ctx.progress(`step ${i} of ${n}`);
  return `did ${n} steps`;
});
const big = tool({ name: "big", description: "Big", input: z.object({ bytes: z.int() }) }, ({ bytes }) => "x".repeat(bytes));
const charge = tool({ name: "charge", description: "Charge", input: z.object({ fail: z.boolean() }), ledger: true }, async ({ fail }, ctx) => {
  effects++;
  if (fail) {
    await new Promise((r) => setTimeout(r, 300));
    if (ctx.signal.aborted) throw new Error("cancelled");
  }
  return `effect ${effects}`;
});
const slow = tool({ name: "slow", description: "Slow", input: z.object({ ms: z.int() }) }, async ({ ms }, ctx) => {
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    ctx.signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(new Error("cancelled"));
    });
  });
  return `waited ${ms}`;
});

describe("worker", () => {
  let h: Harness;
  before(async () => {
    h = await startWorker({
      id: "test-worker",
      maxResultBytes: 2000,
      groups: [
        { role: "t", description: "Test tools", tools: [echo, who, throws, fails, art, stop, again, note, readNote, steps, big, charge, slow, calc, open] },
      ],
    });
  });
  after(async () => h.close());

  test("registration: tools sorted by name with hashes, facade leaves included, facade trees", () => {
    const reg = h.worker.registration();
    assert.equal(reg.workerId, "test-worker");
    assert.equal(reg.address, h.worker.address);
    const g = reg.groups[0]!;
    const names = g.tools.map((t) => t.definition!.name);
    assert.deepEqual(names, [...names].sort());
    assert.ok(names.includes("add") && names.includes("count"));
    for (const t of g.tools) assert.match(t.contentHash, /^[0-9a-f]{64}$/);
    const calcNode = g.facades.find((f) => f.definition!.name === "calc")!;
    assert.equal(calcNode.exclusive, true);
    assert.equal(calcNode.definition!.inputSchemaJson, '{"type":"object","properties":{}}');
    assert.deepEqual(calcNode.children.map((c) => c.child.value), ["add"]);
    const openNode = g.facades.find((f) => f.definition!.name === "open")!;
    assert.equal(openNode.selectable, true);
    assert.equal(openNode.usageNotes, "Count away.");
  });

  test("health serves the worker service", async () => {
    assert.equal((await h.health("toolmesh.v1.ToolWorkerService")).status, 1);
    assert.equal((await h.health("")).status, 1);
  });

  test("text result", async () => {
    assert.equal(textOf(await h.invoke({ tool: "echo", argumentsJson: '{"text":"hi"}' })), "echo: hi");
  });

  test("the call's context, tenant and ids", async () => {
    const md = encodeContext({ region: "eu", "toolmesh.loop_id": "spoof" });
    md.add("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    const r = await h.invoke({ tool: "who", runId: "r1", loopId: "l1", callId: "c1", idempotencyKey: "r1/l1/c1", tenant: "acme" }, md);
    assert.deepEqual(JSON.parse(textOf(r)), { ctx: { region: "eu" }, tenant: "acme", key: "r1/l1/c1", run: "r1", loop: "l1", call: "c1" });
  });

  test("a context that cannot be read is an INVALID_ARGUMENTS result", async () => {
    const md = new grpc.Metadata();
    md.set("tm-ctx-0000-bin", Buffer.from("x"));
    const r = await h.invoke({ tool: "who" }, md);
    assert.equal(r.outcome.case, "error");
    assert.equal(r.outcome.value!.code, ToolErrorCode.INVALID_ARGUMENTS);
    assert.match((r.outcome.value as { message: string }).message, /^the call's context cannot be read: invalid tool call context: /);
  });

  test("invalid arguments name the property", async () => {
    const r = await h.invoke({ tool: "echo", argumentsJson: '{"txt":"hi"}' });
    assert.equal(textOf(r), `error(${ToolErrorCode.INVALID_ARGUMENTS}): invalid arguments for tool 'echo': missing required property "text"`);
  });

  test("an unknown tool is NOT_FOUND, reason UNKNOWN_TOOL", async () => {
    const err = (await h.invoke({ tool: "nope" }).catch((e: unknown) => e)) as grpc.ServiceError;
    assert.equal(err.code, grpc.status.NOT_FOUND);
    assert.equal(err.details, "tool 'nope' is not served by worker test-worker");
    const d = decodeStatusDetails(err.metadata)!;
    assert.equal(d.reason, "UNKNOWN_TOOL");
    assert.equal(d.domain, "toolmesh.dev");
  });

  test("throws and error results", async () => {
    assert.equal(textOf(await h.invoke({ tool: "throws", argumentsJson: '{"kind":"error"}' })), `error(${ToolErrorCode.FAILED}): it broke`);
    assert.equal(textOf(await h.invoke({ tool: "throws", argumentsJson: '{"kind":"empty"}' })), `error(${ToolErrorCode.FAILED}): Tool invocation failed`);
    assert.equal(textOf(await h.invoke({ tool: "throws", argumentsJson: '{"kind":"string"}' })), `error(${ToolErrorCode.PANIC}): tool 'throws' panicked: a string`);
    assert.equal(textOf(await h.invoke({ tool: "fails" })), `error(${ToolErrorCode.INVALID_ARGUMENTS}): no such thing`);
  });

  test("artifact result", async () => {
    const r = await h.invoke({ tool: "art" });
    assert.equal(r.outcome.case, "artifact");
    const a = r.outcome.value!;
    assert.equal(a.content, "see artifact");
    assert.equal(a.artifact!.typeName, "Point");
    assert.deepEqual(a.artifact!.payload, { case: "json", value: '{"x":1}' });
  });

  test("signals", async () => {
    const t = await h.invoke({ tool: "stop" });
    assert.equal(t.outcome.case, "signal");
    assert.deepEqual(
      t.outcome.case === "signal" && t.outcome.value.signal.case === "terminate" && [t.outcome.value.signal.value.scope, t.outcome.value.signal.value.reason],
      [TerminateScope.ACTION, "enough"],
    );
    const r = await h.invoke({ tool: "again", argumentsJson: '{"bad":false}' });
    assert.ok(r.outcome.case === "signal" && r.outcome.value.signal.case === "replan");
    const rp = r.outcome.value.signal.value;
    assert.equal(rp.reason, "plan changed");
    assert.equal(rp.blackboardUpdates[0]!.json, '{"k":1}');
    assert.equal(rp.blackboardUpdates[0]!.name, "f");
    const bad = await h.invoke({ tool: "again", argumentsJson: '{"bad":true}' });
    assert.match(textOf(bad), /asked to replan, but blackboard object 1 of its request was refused: blackboard object: empty type name/);
  });

  test("a selectable facade selects and binds state; the bound tool reads and replaces it", async () => {
    const r = await h.invoke({ tool: "open", argumentsJson: '{"name":"cart"}' });
    assert.match(textOf(r), /^Tools now available: count\. You MUST call one of these tools/);
    assert.ok(textOf(r).endsWith("\n\nCount away."));
    assert.deepEqual(r.selection!.tools, ["count"]);
    assert.equal(new TextDecoder().decode(r.selection!.state), '{"n":0}');
    assert.equal(r.stateChanged, true);
    const c = await h.invoke({ tool: "count", state: r.selection!.state });
    assert.equal(textOf(c), "count 1");
    assert.equal(c.stateChanged, true);
    assert.equal(new TextDecoder().decode(c.state), '{"n":1}');
    const bad = await h.invoke({ tool: "open", argumentsJson: '{"name":"bad"}' });
    assert.match(textOf(bad), /facade 'open' selected 'echo_elsewhere', which is not a tool of group 't'/);
    assert.equal(bad.selection, undefined);
    assert.equal(bad.stateChanged, false);
  });

  test("a plain facade called directly selects all its children", async () => {
    const r = await h.invoke({ tool: "calc" });
    assert.deepEqual(r.selection!.tools, ["add"]);
    assert.match(textOf(r), /^Tools now available: add\./);
  });

  test("InvokeStream of an unknown tool is NOT_FOUND, reason UNKNOWN_TOOL", async () => {
    const err = (await h.invokeStream({ tool: "nope" }).catch((e: unknown) => e)) as grpc.ServiceError;
    assert.equal(err.code, grpc.status.NOT_FOUND);
    assert.equal(decodeStatusDetails(err.metadata)!.reason, "UNKNOWN_TOOL");
  });

  test("blackboard writes and reads", async () => {
    const r = await h.invoke({ tool: "note", argumentsJson: '{"text":"milk"}' });
    assert.equal(textOf(r), "noted");
    assert.equal(r.blackboardUpdates.length, 1);
    const o = r.blackboardUpdates[0]!;
    assert.deepEqual([o.typeName, o.json, o.name], ["Note", '{"text":"milk"}', "last"]);
    assert.equal(textOf(await h.invoke({ tool: "read_note", blackboard: [o] })), "milk");
    assert.equal(textOf(await h.invoke({ tool: "read_note" })), `error(${ToolErrorCode.FAILED}): no note`);
  });

  test("progress travels on InvokeStream before the result", async () => {
    const msgs = await h.invokeStream({ tool: "steps", argumentsJson: '{"n":3}' });
    assert.deepEqual(
      msgs.map((m) => (m.message.case === "progress" ? m.message.value.status : textOf(m.message.value!))),
      ["step 1 of 3", "step 2 of 3", "step 3 of 3", "did 3 steps"],
    );
  });

  test("a result over the bound is replaced by an error result", async () => {
    assert.equal(textOf(await h.invoke({ tool: "big", argumentsJson: '{"bytes":100}' })).length, 100);
    const r = await h.invoke({ tool: "big", argumentsJson: '{"bytes":5000}' });
    assert.equal(
      textOf(r),
      `error(${ToolErrorCode.FAILED}): tool 'big' ran, but its result is 5003 bytes, over the 2000 bytes a result may have, and was dropped. Call it again in a way that returns less.`,
    );
  });

  test("a created tool is answered with an error result: no template serves it", async () => {
    const r = await h.invoke({ tool: "count", createdTool: "made" });
    assert.equal(textOf(r), `error(${ToolErrorCode.FAILED}): tool 'made' cannot be called: 'count' is not a template, so it serves no created tools`);
  });

  test("the ledger answers a call sent again without running it again", async () => {
    effects = 0;
    const a = await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "r/l/1" });
    const b = await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "r/l/1" });
    assert.equal(textOf(a), "effect 1");
    assert.equal(textOf(b), "effect 1");
    assert.equal(textOf(await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "r/l/2" })), "effect 2");
    // Duplicates at once: the second waits for the first's answer.
    const [c, d] = await Promise.all([
      h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "r/l/3" }),
      h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "r/l/3" }),
    ]);
    assert.equal(textOf(c), textOf(d));
    assert.equal(effects, 3);
  });

  test("a failure after the caller left is not kept", async () => {
    effects = 0;
    const cancelled = await h.invoke({ tool: "charge", argumentsJson: '{"fail":true}', idempotencyKey: "r/l/9" }, undefined, { deadline: Date.now() + 100 }).catch((e: unknown) => e);
    assert.equal((cancelled as grpc.ServiceError).code, grpc.status.DEADLINE_EXCEEDED);
    await new Promise((r) => setTimeout(r, 400)); // the tool finishes its failure
    const again = await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "r/l/9" });
    assert.equal(textOf(again), "effect 2");
  });
});

describe("a ledger that hangs", () => {
  test("holds neither the call nor its key past the caller (load) or ledgerStoreTimeoutMs (store)", async () => {
    let hangLoad = false;
    let hangStore = true;
    const storeSignals: (AbortSignal | undefined)[] = [];
    const kept = new MemoryLedger();
    const hanging: Ledger = {
      load: (key) => {
        return hangLoad ? new Promise(() => {}) : kept.load(key);
      },
      store: (key, answer, ttlMs, signal) => {
        storeSignals.push(signal);
        return hangStore ? new Promise(() => {}) : kept.store(key, answer, ttlMs);
      },
    };
    const h = await startWorker({ id: "hung-ledger", ledger: hanging, ledgerStoreTimeoutMs: 200, groups: [{ role: "l", tools: [charge] }] });
    try {
      effects = 0;
      // A store that never ends: the call is answered once the worker stops waiting,
      // and the key is free for the call sent again, which runs (nothing was kept).
      assert.equal(textOf(await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/1" })), "effect 1");
      assert.equal(textOf(await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/1" })), "effect 2");
      assert.ok(storeSignals.length === 2 && storeSignals.every((s) => s?.aborted), "every store's signal aborted once the worker gave up on it");
      // A load that never ends holds the key while its caller waits, not after.
      hangStore = false;
      hangLoad = true;
      const gone = (await h
        .invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/2" }, undefined, { deadline: Date.now() + 200 })
        .catch((e: unknown) => e)) as grpc.ServiceError;
      assert.equal(gone.code, grpc.status.DEADLINE_EXCEEDED);
      hangLoad = false;
      assert.equal(textOf(await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/2" })), "effect 3");
      assert.equal(textOf(await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/2" })), "effect 3");
      // A call sent again whose caller leaves while the ledger is read does not run: it
      // ran, its effect taken again, and its answer replaced the one kept.
      hangLoad = true;
      const left = (await h
        .invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/2" }, undefined, { deadline: Date.now() + 200 })
        .catch((e: unknown) => e)) as grpc.ServiceError;
      assert.equal(left.code, grpc.status.DEADLINE_EXCEEDED);
      await new Promise((r) => setTimeout(r, 100)); // the worker's side of the call ends
      hangLoad = false;
      assert.equal(effects, 3, "the call whose caller left ran the tool");
      assert.equal(textOf(await h.invoke({ tool: "charge", argumentsJson: '{"fail":false}', idempotencyKey: "h/2" })), "effect 3");
    } finally {
      await h.close();
    }
  });
});

describe("drain", () => {
  test("refuses new calls with WORKER_DRAINING, finishes calls in flight, then stops", async () => {
    const h = await startWorker({ id: "drainer", capacity: 1, groups: [{ role: "d", tools: [slow, echo] }] });
    const inFlight = h.invoke({ tool: "slow", argumentsJson: '{"ms":400}' });
    const waiting = h.invoke({ tool: "echo", argumentsJson: '{"text":"queued"}' }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(h.worker.inFlight, 1);
    h.worker.stop("test");
    await new Promise((r) => setTimeout(r, 50));
    const refused = (await h.invoke({ tool: "echo", argumentsJson: '{"text":"x"}' }).catch((e: unknown) => e)) as grpc.ServiceError;
    assert.equal(refused.code, grpc.status.UNAVAILABLE);
    const d = decodeStatusDetails(refused.metadata)!;
    assert.equal(d.reason, "WORKER_DRAINING");
    assert.equal(d.retryAfterMs, 1);
    const queued = (await waiting) as grpc.ServiceError;
    assert.equal(queued.code, grpc.status.UNAVAILABLE, "a call waiting for a slot gives up");
    assert.equal(textOf(await inFlight), "waited 400");
    await h.running;
    h.client.close();
  });
});
