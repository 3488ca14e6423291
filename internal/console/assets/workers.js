// @ts-check
// The workers (ListWorkers) and the tool groups (ListToolGroups), refreshed every 5 s
// while the page is visible.

import { h, poll, setText, syncRows } from "./dom.js";
import { formatClock, formatCount, formatDateTime } from "./format.js";
import { cell, isAbort, numCell, workerBadge } from "./ui.js";

/** @typedef {import("./ui.js").AppContext} AppContext */
/** @typedef {import("./types.js").WorkerStatus} WorkerStatus */
/** @typedef {import("./types.js").ToolGroupStatus} ToolGroupStatus */

const REFRESH_MS = 5000;

/**
 * mount draws the workers and the tool groups.
 * @param {AppContext} ctx
 * @param {HTMLElement} main
 * @param {AbortSignal} signal
 */
export function mount(ctx, main, signal) {
  const workers = h("tbody");
  const groups = h("tbody");
  const noWorkers = h("p", { class: "empty", hidden: true }, "No worker is registered.");
  const noGroups = h("p", { class: "empty", hidden: true }, "No tool group.");
  const status = h("p", { class: "status", role: "status" });
  main.append(
    h("h1", {}, "Workers & groups"),
    h("section", { class: "panel", "aria-labelledby": "w-h" },
      h("h2", { id: "w-h" }, "Workers"),
      h("div", { class: "table-wrap" }, h("table", { class: "workers" },
        head(["Worker", "Version", "Address", "Groups", "State", ["In flight", "num"], ["Calls sent", "num"], ["Capacity", "num"], "Registered"]),
        workers)),
      noWorkers),
    h("section", { class: "panel", "aria-labelledby": "g-h" },
      h("h2", { id: "g-h" }, "Tool groups"),
      h("div", { class: "table-wrap" }, h("table", { class: "groups" },
        head(["Group", "Source", "Provider", "Version", "Tools", "Workers"]),
        groups)),
      noGroups),
    status);

  const load = async () => {
    try {
      const [w, g] = await Promise.all([ctx.client.listWorkers({ signal }), ctx.client.listToolGroups({ signal })]);
      if (signal.aborted) return;
      const ws = w.workers ?? [], gs = g.groups ?? [];
      syncRows(workers, ws, (x) => x.workerId ?? "", workerRow);
      syncRows(groups, gs, (x) => x.group?.role ?? "", groupRow);
      noWorkers.hidden = ws.length > 0;
      noGroups.hidden = gs.length > 0;
      setText(status, `Live · updated ${formatClock(new Date().toISOString())}`);
      ctx.clearError("workers");
    } catch (err) {
      if (isAbort(err, signal)) return;
      setText(status, "Not updated: the last refresh failed.");
      ctx.showError(err, "workers");
    }
  };
  poll(load, REFRESH_MS, signal);
}

/**
 * head is a table's head: column names, each with a class if it comes as [name, class].
 * @param {(string | [string, string])[]} cols
 * @returns {HTMLTableSectionElement}
 */
export function head(cols) {
  return h("thead", {}, h("tr", {}, cols.map((c) => Array.isArray(c)
    ? h("th", { scope: "col", class: c[1] }, c[0])
    : h("th", { scope: "col" }, c))));
}

/**
 * list is a cell of names: a few inline, many collapsed.
 * @param {string[] | undefined} names
 * @param {string} what such as "tools"
 * @returns {HTMLTableCellElement}
 */
function list(names, what) {
  const n = names ?? [];
  if (n.length <= 3) {
    return cell(n.join(", "), { mono: true });
  }
  return h("td", { class: "mono" }, h("details", {}, h("summary", {}, `${n.length} ${what}`),
    h("ul", { class: "names" }, n.map((x) => h("li", {}, x)))));
}

/**
 * @param {WorkerStatus} w
 * @returns {HTMLTableRowElement}
 */
function workerRow(w) {
  return h("tr", { data: { workerId: w.workerId ?? "" } },
    cell(w.workerId, { mono: true, max: 60 }),
    cell(w.version, { mono: true, max: 40 }),
    cell(w.address, { mono: true, max: 60 }),
    list(w.groups, "groups"),
    h("td", {}, workerBadge(w.state),
      w.state === "WORKER_STATE_EJECTED" && w.ejectedUntil ? h("div", { class: "note" }, `until ${formatDateTime(w.ejectedUntil)}`) : null),
    numCell(formatCount(w.inFlight)),
    numCell(formatCount(w.calls)),
    numCell(w.capacity ? formatCount(w.capacity) : "unlimited"),
    h("td", { class: "time" }, formatDateTime(w.registeredAt)));
}

/**
 * @param {ToolGroupStatus} g
 * @returns {HTMLTableRowElement}
 */
function groupRow(g) {
  const role = g.group?.role ?? "";
  return h("tr", { data: { group: role } },
    h("td", { class: "mono", title: g.group?.description || undefined }, role),
    cell(g.source, { max: 60 }),
    cell(g.group?.provider, { max: 40 }),
    cell(g.group?.version, { mono: true, max: 40 }),
    list(g.tools, "tools"),
    list(g.workerIds, "workers"));
}
