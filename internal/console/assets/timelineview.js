// @ts-check
// Draws a Timeline: each loop a list of rows, a nested loop a collapsible section right
// under the tool call that started it; approvals with their Approve and Deny buttons.

import { h } from "./dom.js";
import { formatClock, formatCount } from "./format.js";
import { runHref } from "./route.js";
import { MAX_ROWS, Timeline } from "./timeline.js";
import { errorBox, objectBox } from "./ui.js";

/** @typedef {import("./types.js").RunResponse} RunResponse */
/** @typedef {import("./timeline.js").Row} Row */
/** @typedef {import("./timeline.js").LoopNode} LoopNode */
/** @typedef {import("./timeline.js").Change} Change */
/** @typedef {import("./timeline.js").Approval} Approval */

/**
 * @callback Decide sends a decision on an approval, or an answer to a tool's question
 * @param {Approval} approval
 * @param {boolean} approve
 * @param {string} reason
 * @param {string} [content] the answer's JSON, for a question
 * @returns {Promise<unknown>}
 */

export class TimelineView {
  /** @param {Decide} decide */
  constructor(decide) {
    this.decide = decide;
    this.model = new Timeline();
    this.note = h("p", { class: "note dropped", hidden: true });
    this.empty = h("p", { class: "empty" }, "No events yet.");
    this.body = h("div", { class: "timeline" });
    this.el = h("div", { class: "timeline-wrap" }, this.note, this.empty, this.body);
    /** @type {Map<string, {box: HTMLElement, head: HTMLElement, list: HTMLOListElement}>} */
    this.loops = new Map();
    /** @type {Map<number, HTMLLIElement>} */
    this.rows = new Map();
  }

  /** The number of events shown. */
  get size() {
    return this.rows.size;
  }

  /** @param {RunResponse} ev */
  add(ev) {
    this.apply(this.model.add(ev));
  }

  /** end marks the run ended: no approval can be given any more. */
  end() {
    this.apply(this.model.end());
  }

  /** @param {Change[]} changes */
  apply(changes) {
    for (const c of changes) {
      switch (c.op) {
        case "loop":
          this.addLoop(c.loop);
          break;
        case "updateLoop":
          this.drawLoopHead(c.loop);
          break;
        case "add": {
          const li = this.drawRow(c.row);
          this.rows.set(c.row.id, li);
          (this.loops.get(c.row.loop) ?? this.loops.get(""))?.list.append(li);
          break;
        }
        case "update": {
          const old = this.rows.get(c.row.id);
          if (old) {
            const li = this.drawRow(c.row, openDetails(old));
            old.replaceWith(li);
            this.rows.set(c.row.id, li);
          }
          break;
        }
        case "drop":
          this.rows.get(c.row.id)?.remove();
          this.rows.delete(c.row.id);
          break;
      }
    }
    this.empty.hidden = this.rows.size > 0;
    this.note.hidden = this.model.dropped === 0;
    this.note.textContent = `${formatCount(this.model.dropped)} older events are not shown: the timeline keeps the last ${formatCount(MAX_ROWS)}.`;
  }

  /** @param {LoopNode} loop */
  addLoop(loop) {
    const list = h("ol", { class: "rows" });
    if (loop.key === "") {
      const head = h("h3", { class: "loop-head" });
      const box = h("section", { class: "loop root" }, head, list);
      this.loops.set("", { box, head, list });
      this.body.append(box);
      this.drawLoopHead(loop);
      return;
    }
    const head = h("summary", { class: "loop-head" });
    const box = h("details", { class: ["loop", "nested"], open: true, data: { loopId: loop.id } }, head, list);
    this.loops.set(loop.key, { box, head, list });
    const nest = h("li", { class: "nest" }, box);
    const anchor = loop.anchor ? this.rows.get(loop.anchor) : undefined;
    if (anchor) {
      anchor.after(nest);
    } else {
      (this.loops.get(loop.parent) ?? this.loops.get(""))?.list.append(nest);
    }
    this.drawLoopHead(loop);
  }

  /** @param {LoopNode} loop */
  drawLoopHead(loop) {
    const l = this.loops.get(loop.key);
    if (!l) {
      return;
    }
    if (loop.key === "") {
      if (loop.id) l.box.dataset.loopId = loop.id;
      l.head.replaceChildren("Run loop", loop.id ? h("code", {}, loop.id) : "", loop.model ? ` · ${loop.model}` : "");
      return;
    }
    l.box.classList.toggle("loop-error", loop.status === "error");
    l.box.classList.toggle("loop-running", loop.status === "running");
    const status = loop.status === "running" ? "running" : loop.summary;
    l.head.replaceChildren(
      h("span", { class: "loop-tool" }, loop.tool || "nested loop"),
      ` · ${loop.kind}${loop.model ? " · " + loop.model : ""} · ${status}`,
      ...(loop.childRunId ? [" · child run ", h("a", { href: runHref(loop.childRunId), class: "mono" }, loop.childRunId)] : []));
  }

  /**
   * drawRow makes a row's element.
   * @param {Row} row
   * @param {Set<string>} [open] labels of the details to show open
   * @returns {HTMLLIElement}
   */
  drawRow(row, open) {
    /** @type {Record<string, string>} */
    const data = { seq: row.seq, kind: row.kind };
    if (row.callId) data.callId = row.callId;
    return h("li", { class: ["row", `tone-${row.tone || "none"}`, row.streaming && "streaming"], data },
      h("div", { class: "row-line" },
        h("time", { class: "time", datetime: row.time, title: row.time }, formatClock(row.time)),
        h("span", { class: "seq" }, `#${row.seq}`),
        h("span", { class: "title" }, row.title),
        h("span", { class: "summary" }, row.summary, row.streaming ? h("span", { class: "cursor", "aria-hidden": "true" }, "▍") : null)),
      row.details.map((d) => h("details", { class: "detail", open: open?.has(d.label) ?? false },
        h("summary", {}, d.label),
        d.object ? objectBox(d.object) : h("pre", {}, d.text ?? ""))),
      row.approval ? this.approvalBox(row.approval, row.id) : null);
  }

  /**
   * approvalBox shows an approval: while it is pending, a reason and the Approve and Deny
   * buttons; after, the decision.
   * @param {Approval} a
   * @param {number} rowId
   * @returns {HTMLElement}
   */
  approvalBox(a, rowId) {
    if (a.status === "ended") {
      return h("p", { class: "decision" }, "The run ended before a decision.");
    }
    if (a.status !== "pending") {
      const verdict = a.inputId ? (a.status === "approved" ? "Answered" : "Not answered") : (a.status === "approved" ? "Approved" : "Denied");
      return h("p", { class: ["decision", a.status] }, `${verdict} by ${a.decidedBy || "?"}${a.reason ? ": " + a.reason : ""}`);
    }
    if (a.inputId) {
      return this.answerBox(a, rowId);
    }
    const reason = h("input", { type: "text", id: `reason-${rowId}`, maxlength: "1024", autocomplete: "off", data: { reason: a.callId } });
    const status = h("div", { class: "approval-status", role: "status" });
    const approve = h("button", { type: "button", class: "approve", data: { approve: a.callId } }, "Approve");
    const deny = h("button", { type: "button", class: "deny", data: { deny: a.callId } }, "Deny");
    /** @param {boolean} yes */
    const send = (yes) => async () => {
      approve.disabled = deny.disabled = reason.disabled = true;
      status.replaceChildren(yes ? "Approving…" : "Denying…");
      try {
        await this.decide(a, yes, reason.value.trim());
        status.replaceChildren(`${yes ? "Approved" : "Denied"}; the run goes on.`);
      } catch (err) {
        status.replaceChildren(errorBox(err));
        approve.disabled = deny.disabled = reason.disabled = false;
      }
    };
    approve.addEventListener("click", send(true));
    deny.addEventListener("click", send(false));
    return h("div", { class: "approval" },
      h("label", { for: reason.id }, "Reason"), reason, approve, deny, status);
  }

  /**
   * answerBox shows a tool's pending question: the answer as JSON (an object valid
   * against the requested schema), the Answer and Decline buttons.
   * @param {Approval} a
   * @param {number} rowId
   * @returns {HTMLElement}
   */
  answerBox(a, rowId) {
    const content = h("textarea", { id: `answer-${rowId}`, rows: "3", maxlength: "3072", spellcheck: "false", data: { answer: a.callId } }, "{}");
    const status = h("div", { class: "approval-status", role: "status" });
    const answer = h("button", { type: "button", class: "approve" }, "Answer");
    const decline = h("button", { type: "button", class: "deny" }, "Decline");
    /** @param {boolean} yes */
    const send = (yes) => async () => {
      answer.disabled = decline.disabled = content.disabled = true;
      status.replaceChildren(yes ? "Answering…" : "Declining…");
      try {
        await this.decide(a, yes, "", yes ? content.value.trim() : "");
        status.replaceChildren(`${yes ? "Answered" : "Declined"}; the tool goes on.`);
      } catch (err) {
        status.replaceChildren(errorBox(err));
        answer.disabled = decline.disabled = content.disabled = false;
      }
    };
    answer.addEventListener("click", send(true));
    decline.addEventListener("click", send(false));
    return h("div", { class: "approval" },
      h("p", { class: "question" }, a.question ?? ""),
      h("label", { for: content.id }, "Answer (JSON)"), content, answer, decline, status);
  }
}

/**
 * openDetails lists the labels of a row's open details, to keep them open when the row
 * is drawn anew.
 * @param {HTMLElement} li
 * @returns {Set<string>}
 */
function openDetails(li) {
  const out = new Set();
  for (const d of li.querySelectorAll(":scope > details[open] > summary")) {
    out.add(d.textContent ?? "");
  }
  return out;
}
