// @ts-check
// The tenants' quotas and what is left of them (ListTenants), refreshed every 5 s while
// the page is visible. A tenant sees its own row only.

import { h, poll, setText, syncRows } from "./dom.js";
import { formatAvailable, formatClock, formatCount, formatLimit } from "./format.js";
import { cell, isAbort, numCell } from "./ui.js";
import { head } from "./workers.js";

/** @typedef {import("./ui.js").AppContext} AppContext */
/** @typedef {import("./types.js").TenantUsage} TenantUsage */

const REFRESH_MS = 5000;

/**
 * mount draws the tenants' quotas.
 * @param {AppContext} ctx
 * @param {HTMLElement} main
 * @param {AbortSignal} signal
 */
export function mount(ctx, main, signal) {
  main.append(h("h1", {}, "Tenants"));
  if (!ctx.config.tenancy) {
    main.append(h("p", { class: "empty" }, "This orchestrator has no tenants configured."));
    return;
  }
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, "No tenant.");
  const status = h("p", { class: "status", role: "status" });
  main.append(
    h("p", { class: "note" }, "Rate limits refill continuously: “available” is what a tenant may spend at once now, “per minute” its refill rate."),
    h("div", { class: "table-wrap" }, h("table", { class: "tenants" },
      head(["Tenant", ["Running runs", "num"], ["Max concurrent runs", "num"],
        ["Tool calls available", "num"], ["Tool calls / min", "num"],
        ["Model calls available", "num"], ["Model calls / min", "num"]]),
      tbody)),
    empty, status);

  const load = async () => {
    try {
      const res = await ctx.client.listTenants({ signal });
      if (signal.aborted) return;
      const tenants = res.tenants ?? [];
      syncRows(tbody, tenants, (t) => t.tenant ?? "", row);
      empty.hidden = tenants.length > 0;
      setText(status, `Live · updated ${formatClock(new Date().toISOString())}`);
      ctx.clearError("tenants");
    } catch (err) {
      if (isAbort(err, signal)) return;
      setText(status, "Not updated: the last refresh failed.");
      ctx.showError(err, "tenants");
    }
  };
  poll(load, REFRESH_MS, signal);
}

/**
 * @param {TenantUsage} t
 * @returns {HTMLTableRowElement}
 */
function row(t) {
  const full = !!t.maxConcurrentRuns && (t.runningRuns ?? 0) >= t.maxConcurrentRuns;
  return h("tr", { data: { tenant: t.tenant ?? "" }, class: full ? "at-limit" : undefined },
    cell(t.tenant, { mono: true, max: 60 }),
    numCell(formatCount(t.runningRuns)),
    numCell(formatLimit(t.maxConcurrentRuns)),
    numCell(formatAvailable(t.toolCallsAvailable, t.toolCallsPerMinute)),
    numCell(formatLimit(t.toolCallsPerMinute)),
    numCell(formatAvailable(t.modelCallsAvailable, t.modelCallsPerMinute)),
    numCell(formatLimit(t.modelCallsPerMinute)));
}
