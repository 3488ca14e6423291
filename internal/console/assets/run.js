// @ts-check
// A run's page: its state (GetRun), its timeline (WatchRun from the start, live while it
// runs), its loops, blackboard and assets; cancelling it and answering its approvals.

import { ConnectError, describeError } from "./api.js";
import { h, setText, sleep } from "./dom.js";
import {
  budgetLines, elapsed, enumLabel, formatClock, formatCount, formatDateTime, objectView, traceLink, usageLine,
} from "./format.js";
import { parseRoute, runHref } from "./route.js";
import { buildLoopTree, eventKind, isTerminal, loopLine } from "./timeline.js";
import { TimelineView } from "./timelineview.js";
import { badge, errorBox, isAbort, objectBox } from "./ui.js";

/** @typedef {import("./ui.js").AppContext} AppContext */
/** @typedef {import("./types.js").GetRunResponse} GetRunResponse */
/** @typedef {import("./types.js").RunResponse} RunResponse */
/** @typedef {import("./timeline.js").LoopTreeNode} LoopTreeNode */

/** Errors after which watching again cannot help. */
const FATAL = new Set(["not_found", "permission_denied", "unauthenticated", "invalid_argument", "unimplemented"]);

/** How long to wait before watching again: from the first, doubling up to the last. */
const BACKOFF_MS = [1000, 15000];

/** The least time between two GetRun refreshes that the stream's events cause. */
const REFRESH_MS = 1500;

/** The events after which the run's state, blackboard or assets changed for sure. */
const REFRESH_NOW = new Set(["blackboard_changed", "asset_added", "approval_decided"]);

/**
 * mount draws the page of the run the route names.
 * @param {AppContext} ctx
 * @param {HTMLElement} main
 * @param {AbortSignal} signal
 */
export function mount(ctx, main, signal) {
  const runId = parseRoute(location.hash).runId ?? "";
  const page = new RunPage(ctx, runId, signal);
  main.append(page.el);
  void page.refresh();
  void page.watch();
}

class RunPage {
  /**
   * @param {AppContext} ctx
   * @param {string} runId
   * @param {AbortSignal} signal
   */
  constructor(ctx, runId, signal) {
    this.ctx = ctx;
    this.runId = runId;
    this.signal = signal;
    this.title = h("h1", {}, "Run ", h("code", {}, runId));
    this.trace = h("a", { class: "button-link", target: "_blank", rel: "noopener noreferrer", hidden: true }, "Trace ↗");
    this.cancel = h("button", { type: "button", class: "danger", hidden: true, on: { click: () => this.cancelRun() } }, "Cancel run");
    this.notice = h("div", { class: "run-notice", role: "status" });
    this.facts = h("dl", { class: "facts" });
    this.outcome = h("div", { class: "outcome" });
    this.streamStatus = h("p", { class: "status", role: "status" }, "Connecting…");
    this.timeline = new TimelineView((a, approve, reason, content) => ctx.client.approveToolCall(
      { runId, loopId: a.loopId, callId: a.callId, approve, reason, inputId: a.inputId, contentJson: content }, { signal }));
    this.loopsPanel = h("div", {});
    this.boardPanel = h("div", {});
    this.assetsPanel = h("div", {});
    /** signatures of what the panels show, to draw them only when it changed */
    this.drawn = { loops: "", board: "", assets: "" };
    this.refreshTimer = 0;
    this.lastRefresh = 0;
    signal.addEventListener("abort", () => clearTimeout(this.refreshTimer), { once: true });
    this.el = h("div", { class: "run-page" },
      h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "← Runs")),
      h("header", { class: "run-head" }, this.title, h("div", { class: "actions" }, this.trace, this.cancel)),
      this.notice, this.facts, this.outcome,
      h("div", { class: "run-body" },
        h("section", { class: "panel timeline-panel", "aria-labelledby": "tl-h" },
          h("h2", { id: "tl-h" }, "Timeline"), this.streamStatus, this.timeline.el),
        h("aside", { class: "side" },
          h("section", { class: "panel" }, h("h2", {}, "Loops"), this.loopsPanel),
          h("section", { class: "panel" }, h("h2", {}, "Blackboard"), this.boardPanel),
          h("section", { class: "panel" }, h("h2", {}, "Assets"), this.assetsPanel))));
  }

  /**
   * refresh reads the run (GetRun) and draws it; null when that failed.
   * @returns {Promise<GetRunResponse | null>}
   */
  async refresh() {
    this.lastRefresh = Date.now();
    try {
      const run = await this.ctx.client.getRun(this.runId, { signal: this.signal });
      if (this.signal.aborted) return null;
      this.draw(run);
      this.ctx.clearError("run");
      return run;
    } catch (err) {
      if (isAbort(err, this.signal)) return null;
      if (err instanceof ConnectError && err.code === "not_found") {
        this.notice.replaceChildren(h("p", { class: "note" }, "The orchestrator knows no run of this id: it never was, or it finished long enough ago to be forgotten."));
      }
      this.ctx.showError(err, "run");
      return null;
    }
  }

  /**
   * soon refreshes the run after an event: at once after one that ended the run or changed
   * its blackboard or assets, at most every REFRESH_MS after others.
   * @param {RunResponse} ev
   */
  soon(ev) {
    const now = isTerminal(ev) || REFRESH_NOW.has(eventKind(ev).kind);
    if (this.refreshTimer && !now) {
      return;
    }
    clearTimeout(this.refreshTimer);
    const wait = now ? 100 : Math.max(0, this.lastRefresh + REFRESH_MS - Date.now());
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = 0;
      void this.refresh();
    }, wait);
  }

  /**
   * watch streams the run's events into the timeline, from the first, and watches again
   * after the last one seen when the stream breaks, or ends while the run still runs.
   */
  async watch() {
    let backoff = BACKOFF_MS[0];
    for (let attempt = 1; !this.signal.aborted; attempt++) {
      setText(this.streamStatus, attempt === 1 ? "Connecting…" : "Watching again…");
      /** @type {unknown} */
      let broke = null;
      try {
        await this.ctx.client.watchRun(this.runId, this.timeline.model.lastSeq, (ev) => {
          setText(this.streamStatus, "Live.");
          this.timeline.add(ev);
          this.soon(ev);
          backoff = BACKOFF_MS[0];
        }, { signal: this.signal });
      } catch (err) {
        if (isAbort(err, this.signal)) return;
        if (err instanceof ConnectError && FATAL.has(err.code)) {
          this.stopped(err);
          return;
        }
        broke = err;
      }
      const run = await this.refresh();
      if (this.signal.aborted) return;
      if (!broke && run && run.state !== "RUN_STATE_RUNNING") {
        if (run.state === "RUN_STATE_HELD") {
          setText(this.streamStatus, "The run is held: it cannot go on until an operator acts (see its error). Reload to watch it again.");
        } else {
          this.timeline.end();
          setText(this.streamStatus, `The run ended (${enumLabel(run.state, "RUN_STATE_")}); all its events are shown.`);
        }
        return;
      }
      const why = broke ? describeError(broke) : { title: "the stream ended", message: "the run still runs" };
      setText(this.streamStatus, `Disconnected (${why.title}${why.message ? ": " + why.message : ""}); watching again at ${formatClock(new Date(Date.now() + backoff).toISOString())}.`);
      await sleep(backoff, this.signal);
      backoff = Math.min(backoff * 2, BACKOFF_MS[1]);
    }
  }

  /**
   * stopped says that watching stopped for good, with a button to try again.
   * @param {unknown} err
   */
  stopped(err) {
    const again = h("button", { type: "button" }, "Watch again");
    again.addEventListener("click", () => {
      again.disabled = true;
      this.ctx.clearError("watch");
      void this.watch();
    });
    this.streamStatus.replaceChildren("Not watching: ", errorBox(err), again);
    this.ctx.showError(err, "watch");
  }

  async cancelRun() {
    if (!confirm(`Cancel run ${this.runId}? It stops at once and ends CANCELLED.`)) {
      return;
    }
    this.cancel.disabled = true;
    try {
      const res = await this.ctx.client.cancelRun(this.runId, "cancelled in the console", { signal: this.signal });
      this.notice.replaceChildren(h("p", { class: "note" }, `Cancel sent: the run is ${enumLabel(res.state, "RUN_STATE_")}.`));
      await this.refresh();
    } catch (err) {
      if (isAbort(err, this.signal)) return;
      this.notice.replaceChildren(errorBox(err));
    } finally {
      this.cancel.disabled = false;
    }
  }

  /** @param {GetRunResponse} run */
  draw(run) {
    this.title.replaceChildren("Run ", h("code", {}, this.runId), " ", badge(run.state));
    const href = traceLink(this.ctx.config.traceUrl, run.traceId);
    this.trace.hidden = !href;
    if (href) this.trace.href = href;
    this.cancel.hidden = run.state !== "RUN_STATE_RUNNING" && run.state !== "RUN_STATE_HELD";
    this.facts.replaceChildren(...facts(run, this.ctx.config.tenancy));
    this.outcome.replaceChildren(...outcome(run));
    const board = run.blackboard ?? [], assets = run.assets ?? [];
    this.drawPanel("loops", run.loops, this.loopsPanel, () => (run.loops?.length ? loopsTree(buildLoopTree(run.loops)) : none("No loops reported.")));
    this.drawPanel("board", [board, run.blackboardOmitted], this.boardPanel, () => (board.length || run.blackboardOmitted ? objects(
      board.map((o, i) => ({ label: `#${(run.blackboardOmitted ?? 0) + i} ${o.typeName ?? "object"}${o.name ? ` “${o.name}”` : ""}`, object: o })),
      run.blackboardOmitted) : none("The blackboard is empty.")));
    this.drawPanel("assets", [assets, run.assetsOmitted], this.assetsPanel, () => (assets.length || run.assetsOmitted ? objects(
      assets.map((a) => ({ label: `${a.object?.typeName ?? "asset"}${a.tool ? ` from ${a.tool}` : ""}${a.callId ? ` (call ${a.callId})` : ""}`, object: a.object })),
      run.assetsOmitted) : none("No assets.")));
  }

  /**
   * drawPanel draws a panel anew when what it shows changed (and leaves it alone, its
   * open details open, otherwise).
   * @param {"loops" | "board" | "assets"} name
   * @param {unknown} data what the panel shows
   * @param {HTMLElement} panel
   * @param {() => HTMLElement} draw
   */
  drawPanel(name, data, panel, draw) {
    const sig = JSON.stringify(data ?? null);
    if (sig === this.drawn[name]) return;
    this.drawn[name] = sig;
    panel.replaceChildren(draw());
  }
}

/**
 * none says that a panel has nothing to show.
 * @param {string} text
 * @returns {HTMLElement}
 */
function none(text) {
  return h("p", { class: "empty" }, text);
}

/**
 * facts are the run's facts as the terms and values of a description list.
 * @param {GetRunResponse} run
 * @param {boolean} tenancy
 * @returns {HTMLElement[]}
 */
function facts(run, tenancy) {
  /** @type {[string, string | Node][]} */
  const items = [];
  if (tenancy || run.tenant) items.push(["Tenant", run.tenant || "—"]);
  items.push(["Agent", run.agent || "—"], ["Model", run.model || run.usage?.model || "—"]);
  items.push(["Started", formatDateTime(run.startedAt)], ["Ended", run.endedAt ? formatDateTime(run.endedAt) : "—"]);
  items.push(["Duration", elapsed(run.startedAt, run.endedAt)]);
  items.push(["Iterations", formatCount(run.iterations)], ["Tool calls", formatCount(run.toolCalls)]);
  items.push(["Usage", usageLine(run.usage)]);
  const budget = budgetLines(run.budget);
  if (budget.length) items.push(["Budget", budget.join(" · ")]);
  if (run.reason) items.push(["Reason", run.reason]);
  if (run.traceId) items.push(["Trace id", h("code", {}, run.traceId)]);
  return items.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]);
}

/**
 * outcome is what the run ended with: its answer or its error.
 * @param {GetRunResponse} run
 * @returns {HTMLElement[]}
 */
function outcome(run) {
  const out = [];
  if (run.finalText) {
    out.push(h("section", { class: "answer" }, h("h2", {}, "Answer"), h("pre", { class: "text" }, run.finalText)));
  }
  if (run.error) {
    const e = run.error;
    out.push(h("section", { class: "run-error", role: "alert" }, h("h2", {}, "Error"),
      h("p", {}, h("strong", {}, e.code ?? "UNKNOWN"), e.reason ? ` · ${enumLabel(e.reason, "ERROR_REASON_")}` : ""),
      h("pre", { class: "text" }, e.message ?? "")));
  }
  return out;
}

/**
 * loopsTree draws GetRun's loops as nested lists.
 * @param {LoopTreeNode[]} nodes
 * @returns {HTMLUListElement}
 */
function loopsTree(nodes) {
  return h("ul", { class: "tree" }, nodes.map((n) => h("li", {
    class: n.info.running ? "running" : n.info.error ? "failed" : undefined,
    data: { loopId: n.info.scope?.loopId ?? "" },
  },
  loopLine(n.info),
  n.info.scope?.childRunId ? [" · ", h("a", { href: runHref(n.info.scope.childRunId) }, "child run")] : null,
  n.children.length ? loopsTree(n.children) : null)));
}

/**
 * objects draws blackboard objects or assets, each collapsible.
 * @param {{label: string, object: import("./types.js").BlackboardObject | undefined}[]} items
 * @param {number | undefined} omitted
 * @returns {HTMLElement}
 */
function objects(items, omitted) {
  return h("div", { class: "objects" },
    omitted ? h("p", { class: "note" }, `${formatCount(omitted)} older ones were left out to keep the answer small.`) : null,
    items.map((it) => h("details", { class: "detail" }, h("summary", {}, it.label), objectBox(objectView(it.object)))));
}
