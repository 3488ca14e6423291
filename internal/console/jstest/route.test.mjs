// Tests of the routes, the runs list's filters and paging, the token store and the
// config. Run: node --test internal/console/
import assert from "node:assert/strict";
import { test } from "node:test";

import { parseConfig } from "../assets/app.js";
import { TOKEN_KEY, TokenStore, normalizeToken } from "../assets/auth.js";
import {
  Pager, filtersFromQuery, filtersToQuery, filtersToRequest, localToRFC3339, parseRoute, runHref,
} from "../assets/route.js";

test("parseRoute reads the hash", () => {
  assert.equal(parseRoute("").view, "runs");
  assert.equal(parseRoute("#/").view, "runs");
  assert.equal(parseRoute("#/runs?state=RUN_STATE_RUNNING").query.get("state"), "RUN_STATE_RUNNING");
  assert.deepEqual({ ...parseRoute("#/runs/run%3A1"), query: undefined }, { view: "run", runId: "run:1", query: undefined });
  assert.equal(parseRoute("#/workers").view, "workers");
  assert.equal(parseRoute("#/tenants").view, "tenants");
  assert.equal(parseRoute("#/nope").view, "notfound");
  assert.equal(parseRoute("#/runs/%E0%A4%A").view, "notfound");
  assert.equal(parseRoute(runHref("a/b c")).runId, "a/b c");
});

test("filters travel in the route's query", () => {
  const f = { state: "RUN_STATE_FAILED", tenant: "acme", agent: "triage", after: "2024-05-01T13:45", before: "" };
  const q = filtersToQuery(f);
  assert.equal(q, "?state=RUN_STATE_FAILED&tenant=acme&agent=triage&after=2024-05-01T13%3A45");
  assert.deepEqual(filtersFromQuery(parseRoute("#/runs" + q).query), f);
  assert.equal(filtersToQuery({ state: "", tenant: "", agent: "", after: "", before: "" }), "");
  // invalid values are left out
  assert.deepEqual(filtersFromQuery(new URLSearchParams("state=BOGUS&after=yesterday&agent=%20x%20")),
    { state: "", tenant: "", agent: "x", after: "", before: "" });
});

test("filtersToRequest sets only what is set", () => {
  const f = { state: "RUN_STATE_RUNNING", tenant: "acme", agent: "bot", after: "2024-05-01T13:45", before: "2024-05-02T00:00:30" };
  const req = filtersToRequest(f, { tenancy: true, pageSize: 50, pageToken: "tok" });
  assert.deepEqual(req, {
    state: "RUN_STATE_RUNNING", tenant: "acme", agent: "bot",
    startedAfter: new Date("2024-05-01T13:45").toISOString(),
    startedBefore: new Date("2024-05-02T00:00:30").toISOString(),
    pageSize: 50, pageToken: "tok",
  });
  assert.match(req.startedAfter, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.deepEqual(filtersToRequest({ ...f, state: "", agent: "", after: "", before: "" }, { tenancy: false }), {});
  assert.equal(localToRFC3339(""), "");
  assert.equal(localToRFC3339("2024-13-45T99:99"), "");
});

test("Pager goes forward, back and to the first page", () => {
  const p = new Pager();
  assert.equal(p.page, 1);
  assert.ok(!p.forward());
  p.next = "t2";
  assert.ok(p.forward());
  assert.equal(p.token, "t2");
  p.next = "t3";
  p.forward();
  assert.equal(p.page, 3);
  assert.ok(p.previous());
  assert.equal(p.token, "t2");
  p.first();
  assert.equal(p.token, "");
  assert.equal(p.page, 1);
  assert.ok(!p.previous());
});

test("TokenStore keeps the token in its storage, and survives one that refuses", () => {
  const m = new Map();
  const storage = { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, v), removeItem: (k) => m.delete(k) };
  const s = new TokenStore(storage);
  assert.equal(s.get(), "");
  s.set("  Bearer abc.def  ");
  assert.equal(m.get(TOKEN_KEY), "abc.def");
  assert.equal(s.get(), "abc.def");
  s.clear();
  assert.equal(s.get(), "");
  assert.equal(m.size, 0);
  const broken = { getItem() { throw new Error("denied"); }, setItem() { throw new Error("denied"); }, removeItem() { throw new Error("denied"); } };
  const b = new TokenStore(broken);
  b.set("xyz");
  assert.equal(b.get(), "xyz");
  b.clear();
  assert.equal(b.get(), "");
  assert.equal(normalizeToken("has space"), "");
  assert.equal(normalizeToken("line\nbreak"), "");
});

test("parseConfig takes config.json's fields, with defaults", () => {
  assert.deepEqual(parseConfig({ traceUrl: "https://t/{trace_id}", tenancy: true }), { traceUrl: "https://t/{trace_id}", tenancy: true });
  assert.deepEqual(parseConfig({ traceUrl: 5, tenancy: "yes" }), { traceUrl: "", tenancy: false });
  assert.deepEqual(parseConfig(null), { traceUrl: "", tenancy: false });
});
