// The idempotency ledger's memory store and per-key locks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { KeyLocks, MemoryLedger, settleBy } from "../src/ledger.js";

test("MemoryLedger keeps at most its bound, the oldest stored going first", async () => {
  const l = new MemoryLedger(2);
  await l.store("a", new Uint8Array([1]), 1000);
  await l.store("b", new Uint8Array([2]), 1000);
  await l.store("a", new Uint8Array([3]), 1000); // a moves to the back
  await l.store("c", new Uint8Array([4]), 1000);
  assert.equal(l.size, 2);
  assert.equal(await l.load("b"), undefined);
  assert.deepEqual(await l.load("a"), new Uint8Array([3]));
  assert.deepEqual(await l.load("c"), new Uint8Array([4]));
});

test("MemoryLedger forgets an answer once its TTL passed", async () => {
  let now = 1000;
  const l = new MemoryLedger(10, () => now);
  await l.store("k", new Uint8Array([1]), 50);
  now = 1049;
  assert.ok(await l.load("k"));
  now = 1050;
  assert.equal(await l.load("k"), undefined);
  assert.equal(l.size, 0);
});

test("KeyLocks serialise one key, not others, and hold nothing once released", async () => {
  const locks = new KeyLocks();
  const order: string[] = [];
  const first = await locks.lock("k");
  const second = locks.lock("k").then((release) => {
    order.push("second");
    release();
  });
  const other = await locks.lock("other");
  order.push("other");
  other();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(order, ["other"]);
  order.push("first");
  first();
  await second;
  assert.deepEqual(order, ["other", "first", "second"]);
  assert.equal(locks.size, 0);
});

test("KeyLocks: a waiter whose signal aborts gives up at once, and the key still passes on in order", async () => {
  const locks = new KeyLocks();
  const first = await locks.lock("k");
  const ac = new AbortController();
  const gaveUp = locks.lock("k", ac.signal);
  let thirdHeld = false;
  const third = locks.lock("k").then((release) => {
    thirdHeld = true;
    return release;
  });
  ac.abort(new Error("the caller left"));
  await assert.rejects(gaveUp, /the caller left/);
  await new Promise((r) => setImmediate(r));
  assert.equal(thirdHeld, false, "the third waiter went ahead of the first holder");
  first();
  (await third)();
  assert.equal(thirdHeld, true);
  assert.equal(locks.size, 0);
});

test("settleBy takes a ledger's plain answer (a JavaScript ledger may not return a promise)", async () => {
  const signal = new AbortController().signal;
  const plain = new Uint8Array([7]) as unknown as Promise<Uint8Array>;
  assert.deepEqual(await settleBy(plain, signal), new Uint8Array([7]));
  assert.equal(await settleBy(undefined as unknown as Promise<undefined>, signal), undefined);
});

test("settleBy rejects with the signal's reason once it aborts, and the late settling is nobody's", async () => {
  const ac = new AbortController();
  let fail!: (e: Error) => void;
  const late = new Promise<void>((_, reject) => (fail = reject));
  const settled = settleBy(late, ac.signal);
  ac.abort(new Error("gave up"));
  await assert.rejects(settled, /gave up/);
  fail(new Error("too late")); // no unhandled rejection
  await new Promise((r) => setImmediate(r));
});
