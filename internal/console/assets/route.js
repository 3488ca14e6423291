// @ts-check
// The page's routes (the part of its URL after "#") and the runs list's filters, which
// travel in the route's query so that a filtered list can be reloaded and shared.
// Nothing here touches the DOM.

import { RUN_STATES } from "./format.js";

/** @typedef {import("./types.js").ListRunsRequest} ListRunsRequest */

/**
 * @typedef {Object} Route
 * @property {"runs" | "run" | "workers" | "tenants" | "notfound"} view
 * @property {string} [runId] the run of the run view
 * @property {URLSearchParams} query
 */

/**
 * parseRoute reads a location hash: "#/runs?state=...", "#/runs/<id>", "#/workers",
 * "#/tenants"; an empty one is the runs list.
 * @param {string} hash
 * @returns {Route}
 */
export function parseRoute(hash) {
  const s = hash.replace(/^#/, "");
  const q = s.indexOf("?");
  const path = q < 0 ? s : s.slice(0, q);
  const query = new URLSearchParams(q < 0 ? "" : s.slice(q + 1));
  const parts = path.split("/").filter((p) => p !== "");
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "runs")) {
    return { view: "runs", query };
  }
  if (parts.length === 2 && parts[0] === "runs") {
    let runId;
    try {
      runId = decodeURIComponent(parts[1]);
    } catch {
      return { view: "notfound", query };
    }
    return { view: "run", runId, query };
  }
  if (parts.length === 1 && (parts[0] === "workers" || parts[0] === "tenants")) {
    return { view: parts[0], query };
  }
  return { view: "notfound", query };
}

/**
 * runHref is the route of a run's page.
 * @param {string} runId
 * @returns {string}
 */
export function runHref(runId) {
  return `#/runs/${encodeURIComponent(runId)}`;
}

/**
 * @typedef {Object} RunFilters what the runs list shows
 * @property {string} state a RunState name, "" for all
 * @property {string} tenant "" for all (only an operator without a tenant may choose)
 * @property {string} agent "" for all
 * @property {string} after a datetime-local value ("2024-05-01T13:45"), "" for none
 * @property {string} before likewise
 */

/** @returns {RunFilters} */
export function emptyFilters() {
  return { state: "", tenant: "", agent: "", after: "", before: "" };
}

/**
 * filtersFromQuery reads the filters of a route's query; values that are not valid are
 * left out.
 * @param {URLSearchParams} q
 * @returns {RunFilters}
 */
export function filtersFromQuery(q) {
  const f = emptyFilters();
  const state = q.get("state") ?? "";
  if (RUN_STATES.includes(state)) {
    f.state = state;
  }
  f.tenant = (q.get("tenant") ?? "").trim();
  f.agent = (q.get("agent") ?? "").trim();
  for (const k of /** @type {const} */ (["after", "before"])) {
    const v = q.get(k) ?? "";
    if (localToRFC3339(v)) {
      f[k] = v;
    }
  }
  return f;
}

/**
 * filtersToQuery writes filters as a route's query ("" when none is set).
 * @param {RunFilters} f
 * @returns {string}
 */
export function filtersToQuery(f) {
  const q = new URLSearchParams();
  for (const k of /** @type {const} */ (["state", "tenant", "agent", "after", "before"])) {
    if (f[k]) {
      q.set(k, f[k]);
    }
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

/**
 * localToRFC3339 reads a datetime-local input's value (the browser's local time, to the
 * minute or the second) as an RFC 3339 timestamp in UTC; "" when it is empty or invalid.
 * @param {string} value such as "2024-05-01T13:45"
 * @returns {string}
 */
export function localToRFC3339(value) {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/.test(value)) {
    return "";
  }
  const d = new Date(value); // a date-time without an offset is local time
  return Number.isNaN(d.getTime()) ? "" : d.toISOString();
}

/**
 * filtersToRequest is the ListRunsRequest of filters and a page: only the fields that
 * are set; the tenant only where the orchestrator has tenants.
 * @param {RunFilters} f
 * @param {{tenancy: boolean, pageSize?: number, pageToken?: string}} opts
 * @returns {ListRunsRequest}
 */
export function filtersToRequest(f, opts) {
  /** @type {ListRunsRequest} */
  const req = {};
  if (f.state) req.state = f.state;
  if (opts.tenancy && f.tenant) req.tenant = f.tenant;
  if (f.agent) req.agent = f.agent;
  const after = localToRFC3339(f.after);
  if (after) req.startedAfter = after;
  const before = localToRFC3339(f.before);
  if (before) req.startedBefore = before;
  if (opts.pageSize) req.pageSize = opts.pageSize;
  if (opts.pageToken) req.pageToken = opts.pageToken;
  return req;
}

/**
 * Pager keeps the page tokens of the pages before the current one, so that the list can
 * go back a page as well as forward and to the first.
 */
export class Pager {
  constructor() {
    /** @type {string[]} the tokens of the pages before the current one */
    this.back = [];
    /** the token of the current page; "" for the first */
    this.token = "";
    /** the token of the next page; "" after the last */
    this.next = "";
  }

  /** The number of the current page, from 1. */
  get page() {
    return this.back.length + 1;
  }

  /** Goes to the next page; false when there is none. */
  forward() {
    if (!this.next) {
      return false;
    }
    this.back.push(this.token);
    this.token = this.next;
    this.next = "";
    return true;
  }

  /** Goes to the page before; false on the first. */
  previous() {
    if (this.back.length === 0) {
      return false;
    }
    this.token = this.back.pop() ?? "";
    this.next = "";
    return true;
  }

  /** Goes to the first page. */
  first() {
    this.back = [];
    this.token = "";
    this.next = "";
  }
}
