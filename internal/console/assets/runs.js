// @ts-check
// The runs list: ListRuns a page at a time, filtered, refreshed every 2 s while the page
// is visible.

import { h, poll, setText, syncRows } from "./dom.js";
import { RUN_STATES, formatClock, formatCount, formatDateTime, stateLabel } from "./format.js";
import { Pager, filtersFromQuery, filtersToQuery, filtersToRequest, parseRoute, runHref } from "./route.js";
import { badge, cell, isAbort, numCell } from "./ui.js";

/** @typedef {import("./ui.js").AppContext} AppContext */
/** @typedef {import("./types.js").RunSummary} RunSummary */
/** @typedef {import("./route.js").RunFilters} RunFilters */

const REFRESH_MS = 2000;
const PAGE_SIZE = 50;

/**
 * mount draws the runs list.
 * @param {AppContext} ctx
 * @param {HTMLElement} main
 * @param {AbortSignal} signal
 */
export function mount(ctx, main, signal) {
  const tenancy = ctx.config.tenancy;
  const filters = filtersFromQuery(parseRoute(location.hash).query);
  const pager = new Pager();
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, "No runs match.");
  const status = h("p", { class: "status", role: "status" });
  const pageLabel = h("span", { class: "page" });
  /** @param {() => boolean} move */
  const turn = (move) => () => {
    if (move()) {
      void load();
    }
  };
  const buttons = {
    first: h("button", { type: "button", on: { click: turn(() => (pager.first(), true)) } }, "First"),
    prev: h("button", { type: "button", on: { click: turn(() => pager.previous()) } }, "Previous"),
    next: h("button", { type: "button", on: { click: turn(() => pager.forward()) } }, "Next"),
  };
  main.append(
    h("h1", {}, "Runs"),
    filterForm(filters, tenancy),
    h("div", { class: "table-wrap" }, h("table", { class: "runs" },
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "Run"), h("th", { scope: "col" }, "State"),
        tenancy ? h("th", { scope: "col" }, "Tenant") : null,
        h("th", { scope: "col" }, "Agent"), h("th", { scope: "col" }, "Started"),
        h("th", { scope: "col" }, "Updated"), h("th", { scope: "col", class: "num" }, "Records"))),
      tbody)),
    empty,
    h("nav", { class: "pager", "aria-label": "Pages" }, buttons.first, buttons.prev, pageLabel, buttons.next),
    status);

  /** @param {RunSummary} r */
  const row = (r) => h("tr", { data: { runId: r.runId ?? "" } },
    h("td", { class: "mono" }, h("a", { href: runHref(r.runId ?? ""), title: r.runId }, r.runId ?? "")),
    h("td", {}, badge(r.state)),
    tenancy ? cell(r.tenant, { max: 40 }) : null,
    cell(r.agent, { max: 40 }),
    h("td", { class: "time" }, formatDateTime(r.started)),
    h("td", { class: "time" }, formatDateTime(r.updated)),
    numCell(formatCount(r.records)));

  let generation = 0; // a page turned while a refresh was on its way makes its answer stale
  const load = async () => {
    const gen = ++generation;
    const req = filtersToRequest(filters, { tenancy, pageSize: PAGE_SIZE, pageToken: pager.token });
    try {
      const res = await ctx.client.listRuns(req, { signal });
      if (signal.aborted || gen !== generation) return;
      const runs = res.runs ?? [];
      pager.next = res.nextPageToken ?? "";
      syncRows(tbody, runs, (r) => r.runId ?? "", row);
      empty.hidden = runs.length > 0;
      setText(status, `Live · updated ${formatClock(new Date().toISOString())}`);
      ctx.clearError("runs");
    } catch (err) {
      if (isAbort(err, signal) || gen !== generation) return;
      setText(status, "Not updated: the last refresh failed.");
      ctx.showError(err, "runs");
    }
    setText(pageLabel, `Page ${pager.page}`);
    buttons.first.disabled = buttons.prev.disabled = pager.page === 1;
    buttons.next.disabled = !pager.next;
  };
  poll(load, REFRESH_MS, signal);
}

/**
 * filterForm is the filters' form; applying it changes the route, which lists anew.
 * @param {RunFilters} f
 * @param {boolean} tenancy
 * @returns {HTMLFormElement}
 */
function filterForm(f, tenancy) {
  const state = h("select", { id: "f-state", name: "state", value: f.state },
    h("option", { value: "" }, "any"),
    RUN_STATES.map((s) => h("option", { value: s }, stateLabel(s))));
  const tenant = h("input", { id: "f-tenant", name: "tenant", type: "text", value: f.tenant, autocomplete: "off", spellcheck: "false" });
  const agent = h("input", { id: "f-agent", name: "agent", type: "text", value: f.agent, autocomplete: "off", spellcheck: "false" });
  const after = h("input", { id: "f-after", name: "after", type: "datetime-local", step: "1", value: f.after });
  const before = h("input", { id: "f-before", name: "before", type: "datetime-local", step: "1", value: f.before });
  /** @param {RunFilters} next */
  const go = (next) => {
    location.hash = "#/runs" + filtersToQuery(next);
  };
  return h("form", {
    class: "filters", role: "search",
    on: {
      submit: (/** @type {SubmitEvent} */ ev) => {
        ev.preventDefault();
        go({ state: state.value, tenant: tenancy ? tenant.value.trim() : "", agent: agent.value.trim(), after: after.value, before: before.value });
      },
    },
  },
  field("State", state),
  tenancy ? field("Tenant", tenant) : null,
  field("Agent", agent),
  field("Started after", after),
  field("Started before", before),
  h("div", { class: "filter-actions" },
    h("button", { type: "submit" }, "Apply"),
    h("button", { type: "button", on: { click: () => go({ state: "", tenant: "", agent: "", after: "", before: "" }) } }, "Clear")));
}

/**
 * field is a labelled form control.
 * @param {string} label
 * @param {HTMLInputElement | HTMLSelectElement} control
 * @returns {HTMLLabelElement}
 */
function field(label, control) {
  return h("label", { class: "field", for: control.id }, h("span", {}, label), control);
}
