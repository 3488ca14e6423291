// @ts-check
// The timeline of a run: its events (WatchRun's RunResponse messages) as rows, grouped
// by loop into a tree, a nested loop under the tool call that started it. Timeline keeps
// the model and tells its renderer what changed; it never touches the DOM.

import {
  clip, compactJSON, enumLabel, formatBytes, formatDateTime, formatDuration, objectView, oneLine,
  prettyJSON, seqAfter, truncate, usageLine,
} from "./format.js";

/** @typedef {import("./types.js").RunResponse} RunResponse */
/** @typedef {import("./types.js").LoopScope} LoopScope */
/** @typedef {import("./types.js").LoopInfo} LoopInfo */
/** @typedef {import("./types.js").BlackboardObject} BlackboardObject */
/** @typedef {import("./format.js").ObjectView} ObjectView */

/** The most rows a timeline keeps; older ones are dropped. */
export const MAX_ROWS = 5000;

/**
 * @typedef {Object} Detail a collapsible part of a row
 * @property {string} label
 * @property {string} [text] preformatted text
 * @property {ObjectView} [object] a blackboard object, an asset or an artifact
 */

/**
 * @typedef {Object} Approval a call that waited for approval
 * @property {string} callId
 * @property {string} loopId the call's loop, as ApproveToolCall takes it
 * @property {string} tool
 * @property {"pending" | "approved" | "denied" | "ended"} status ended: the run ended undecided
 * @property {string} decidedBy
 * @property {string} reason
 * @property {string} [inputId] set when the call waits for an answer to its tool's question
 * @property {string} [question] the question's message
 * @property {string} [schema] the JSON Schema the answer must satisfy
 */

/**
 * @typedef {Object} Row one row of the timeline
 * @property {number} id unique in the timeline, increasing
 * @property {string} seq the sequence number of the event (of the first, for merged text)
 * @property {string} time RFC 3339
 * @property {string} kind the event's kind, as the proto names it: "tool_call_started", ...
 * @property {string} loop the key of its loop in the timeline ("" for the run's own)
 * @property {string} title a word or two: "tool call", "answer", ...
 * @property {string} summary one line, shortened
 * @property {"" | "ok" | "error" | "warn" | "pending"} tone
 * @property {Detail[]} details
 * @property {string} [callId]
 * @property {Approval} [approval]
 * @property {string} [childRunId] a subagent's run
 * @property {boolean} [streaming] text still arriving (text_delta)
 * @property {string} [text] the whole text of a message being streamed
 * @property {number} [iteration]
 * @property {boolean} [dropped]
 */

/**
 * @typedef {Object} LoopNode a loop of the run, as the timeline shows it
 * @property {string} key "" for the run's own loop, else the loop's id
 * @property {string} id the loop's id ("" while the run's own is unknown)
 * @property {string} parent key of the parent loop; "" for a loop of the run's own, null for it
 * @property {number} anchor id of the tool_call_started row it hangs under; 0: none
 * @property {string} tool the agentic tool that runs it
 * @property {string} kind its AgenticKind, as a label
 * @property {number} depth
 * @property {string} childRunId
 * @property {"running" | "ok" | "error"} status
 * @property {string} summary
 * @property {string} model
 */

/**
 * @typedef {{op: "loop", loop: LoopNode} | {op: "updateLoop", loop: LoopNode} |
 *   {op: "add", row: Row} | {op: "update", row: Row} | {op: "drop", row: Row}} Change
 *   what a renderer does: show a new loop section (under its parent, after its anchor
 *   row), redraw a loop's heading, add a row at the end of its loop, redraw a row, remove one
 */

/** The event fields of RunResponse, by their JSON names. */
const EVENT_FIELDS = Object.freeze([
  "started", "toolCallStarted", "toolCallFinished", "message", "usage", "finalResult", "error",
  "toolsChanged", "artifact", "blackboardChanged", "progress", "messageToUser", "replanRequested",
  "terminated", "textDelta", "assetAdded", "warning", "nestedLoopStarted", "nestedLoopFinished",
  "approvalRequested", "approvalDecided",
]);

const NOT_EVENT = new Set(["runId", "sequence", "time", "scope"]);

/**
 * eventKind is the kind of an event: the name of its event field in the proto
 * ("tool_call_started"), and the field's JSON value.
 * @param {RunResponse} ev
 * @returns {{kind: string, payload: Record<string, any>}}
 */
export function eventKind(ev) {
  const rec = /** @type {Record<string, any>} */ (ev);
  for (const f of EVENT_FIELDS) {
    if (rec[f] !== undefined && rec[f] !== null) {
      return { kind: snake(f), payload: rec[f] };
    }
  }
  for (const [k, v] of Object.entries(rec)) {
    if (!NOT_EVENT.has(k) && v !== null && typeof v === "object") {
      return { kind: snake(k), payload: v }; // an event this console does not know yet
    }
  }
  return { kind: "unknown", payload: {} };
}

/** @param {string} s */
function snake(s) {
  return s.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());
}

/** The kinds that end a run when its own loop sends them. */
const TERMINAL = new Set(["final_result", "error", "replan_requested", "terminated"]);

/**
 * isTerminal reports whether an event ends the run.
 * @param {RunResponse} ev
 * @returns {boolean}
 */
export function isTerminal(ev) {
  return TERMINAL.has(eventKind(ev).kind) && !ev.scope?.loopId;
}

/**
 * @param {string} loopKey
 * @param {string | undefined} callId
 */
function callKey(loopKey, callId) {
  return `${loopKey}\u0000${callId ?? ""}`;
}

/**
 * approvalKey names what a call waits for: its approval, or one of its tool's questions.
 * @param {string} loopKey
 * @param {string | undefined} callId
 * @param {string | undefined} inputId
 */
function approvalKey(loopKey, callId, inputId) {
  return inputId ? `${callKey(loopKey, callId)}\u0000${inputId}` : callKey(loopKey, callId);
}

/** Timeline is the model of a run's timeline. */
export class Timeline {
  /** @param {{maxRows?: number}} [opts] */
  constructor(opts = {}) {
    this.maxRows = opts.maxRows ?? MAX_ROWS;
    /** @type {Map<string, LoopNode>} by key */
    this.loops = new Map();
    /** @type {Row[]} the rows shown, oldest first */
    this.rows = [];
    /** rows dropped to stay within maxRows */
    this.dropped = 0;
    /** the last sequence number added */
    this.lastSeq = "0";
    /** whether the run ended */
    this.ended = false;
    /** @type {Map<string, {row: Row, tool: string, nested: boolean}>} calls not finished, by loop and call id */
    this.calls = new Map();
    /** @type {Map<string, Row>} approval_requested rows, by loop and call id (and question) */
    this.approvals = new Map();
    /** @type {Map<string, Row>} the message being streamed in each loop */
    this.streams = new Map();
    this.nextId = 1;
  }

  /** The run's own loop, created on first use. @returns {[LoopNode, Change[]]} */
  root() {
    let node = this.loops.get("");
    if (node) {
      return [node, []];
    }
    node = { key: "", id: "", parent: "", anchor: 0, tool: "", kind: "", depth: 0, childRunId: "", status: "running", summary: "", model: "" };
    this.loops.set("", node);
    return [node, [{ op: "loop", loop: node }]];
  }

  /**
   * loopOf finds (or makes) the loop an event belongs to.
   * @param {RunResponse} ev
   * @param {Record<string, any>} payload
   * @returns {[LoopNode, Change[]]}
   */
  loopOf(ev, payload) {
    const [root, changes] = this.root();
    const scope = ev.scope;
    if (scope?.loopId) {
      const [node, more] = this.nestedLoop(scope);
      return [node, changes.concat(more)];
    }
    const id = typeof payload.loopId === "string" ? payload.loopId : "";
    const node = id && id !== root.id ? this.loops.get(id) : undefined;
    return [node ?? root, changes];
  }

  /**
   * nestedLoop finds the loop of a scope, or makes it: under its parent loop, after the
   * tool call that started it (the call the scope names; for events that name none, the
   * oldest call of that tool in the parent loop that has no loop yet).
   * @param {LoopScope} scope
   * @returns {[LoopNode, Change[]]}
   */
  nestedLoop(scope) {
    const key = scope.loopId ?? "";
    const known = this.loops.get(key);
    if (known) {
      return [known, []];
    }
    const rootId = this.loops.get("")?.id ?? "";
    const parentId = scope.parentLoopId ?? "";
    const parent = parentId && parentId !== rootId && this.loops.has(parentId) ? parentId : "";
    let anchor = 0;
    const named = scope.parentCallId ? this.calls.get(callKey(parent, scope.parentCallId)) : undefined;
    if (named) {
      named.nested = true;
      anchor = named.row.id;
    } else {
      for (const [k, call] of this.calls) {
        if (k.startsWith(parent + "\u0000") && call.tool === scope.tool && !call.nested && !call.row.dropped) {
          call.nested = true;
          anchor = call.row.id;
          break;
        }
      }
    }
    /** @type {LoopNode} */
    const node = {
      key, id: key, parent, anchor, tool: scope.tool ?? "", kind: enumLabel(scope.kind, "AGENTIC_KIND_"),
      depth: scope.depth ?? 1, childRunId: scope.childRunId ?? "", status: "running", summary: "", model: "",
    };
    this.loops.set(key, node);
    return [node, [{ op: "loop", loop: node }]];
  }

  /**
   * add takes the next event of the stream; one already added (a sequence number not
   * after the last) is ignored.
   * @param {RunResponse} ev
   * @returns {Change[]}
   */
  add(ev) {
    if (ev.sequence && !seqAfter(ev.sequence, this.lastSeq)) {
      return [];
    }
    if (ev.sequence) {
      this.lastSeq = ev.sequence;
    }
    const { kind, payload } = eventKind(ev);
    const [loop, changes] = this.loopOf(ev, payload);
    /** @type {Row} */
    const row = {
      id: this.nextId++, seq: ev.sequence ?? "", time: ev.time ?? "", kind, loop: loop.key,
      title: kind.replace(/_/g, " "), summary: "", tone: "", details: [],
    };
    const handled = this.correlate(kind, payload, row, loop, changes);
    if (!handled) {
      describe(kind, payload, row);
      changes.push({ op: "add", row });
      this.rows.push(row);
      this.register(kind, payload, row, loop);
    }
    if (isTerminal(ev)) {
      changes.push(...this.end());
    }
    changes.push(...this.trim());
    return changes;
  }

  /**
   * correlate updates what an event concerns: the call a result finishes, the approval a
   * decision answers, the message text streams into, the loop that starts or ends. It
   * reports whether the event is merged into an existing row (and needs none of its own).
   * @param {string} kind
   * @param {Record<string, any>} p
   * @param {Row} row
   * @param {LoopNode} loop
   * @param {Change[]} changes
   * @returns {boolean}
   */
  correlate(kind, p, row, loop, changes) {
    switch (kind) {
      case "started":
        if (loop.key === "") {
          loop.id = p.loopId ?? "";
          loop.model = p.model ?? "";
          changes.push({ op: "updateLoop", loop });
        }
        return false;
      case "nested_loop_started":
        loop.model = p.model ?? "";
        changes.push({ op: "updateLoop", loop });
        return false;
      case "nested_loop_finished":
        loop.status = p.error ? "error" : "ok";
        loop.summary = p.error ? `failed: ${truncate(oneLine(p.error))}` : `${p.iterations ?? 0} iterations, ${p.toolCalls ?? 0} tool calls`;
        this.endStream(loop, {}, changes); // its answer was streamed: no message event ends it
        changes.push({ op: "updateLoop", loop });
        return false;
      case "tool_call_finished":
        this.finishCall(loop, p, changes);
        return false;
      case "approval_decided":
        this.decide(loop, p, changes);
        return false;
      case "text_delta":
        return this.streamText(loop, p, row, changes);
      case "message":
        return this.endStream(loop, p, changes);
      case "final_result":
        this.endStream(loop, {}, changes);
        return false;
    }
    return false;
  }

  /**
   * register remembers a new row that later events update: a tool call, an approval.
   * @param {string} kind
   * @param {Record<string, any>} p
   * @param {Row} row
   * @param {LoopNode} loop
   */
  register(kind, p, row, loop) {
    if (kind === "tool_call_started") {
      this.calls.set(callKey(loop.key, p.callId), { row, tool: p.tool ?? "", nested: false });
    } else if (kind === "approval_requested") {
      this.approvals.set(approvalKey(loop.key, p.callId, p.input?.inputId), row);
    } else if (kind === "text_delta") {
      this.streams.set(loop.key, row);
    }
  }

  /**
   * @param {LoopNode} loop
   * @param {Record<string, any>} p
   * @param {Change[]} changes
   */
  finishCall(loop, p, changes) {
    const key = callKey(loop.key, p.callId);
    const call = this.calls.get(key);
    this.calls.delete(key);
    if (!call || call.row.dropped) {
      return;
    }
    call.row.tone = p.outcome === "TOOL_CALL_OUTCOME_OK" ? "ok" : "error";
    changes.push({ op: "update", row: call.row });
  }

  /**
   * @param {LoopNode} loop
   * @param {Record<string, any>} p
   * @param {Change[]} changes
   */
  decide(loop, p, changes) {
    const key = approvalKey(loop.key, p.callId, p.inputId);
    const req = this.approvals.get(key);
    this.approvals.delete(key);
    if (!req?.approval || req.dropped) {
      return;
    }
    req.approval.status = p.approved ? "approved" : "denied";
    req.approval.decidedBy = p.decidedBy ?? "";
    req.approval.reason = p.reason ?? "";
    req.tone = p.approved ? "ok" : "error";
    req.summary = p.inputId
      ? req.summary.replace(/ asks: .*$/, p.approved ? " was answered" : " got no answer")
      : req.summary.replace(/ waits for approval.*$/, p.approved ? " was approved" : " was denied");
    changes.push({ op: "update", row: req });
  }

  /**
   * streamText appends a text_delta to the message being streamed in its loop and
   * iteration; the first delta of one makes its row.
   * @param {LoopNode} loop
   * @param {Record<string, any>} p
   * @param {Row} row the row the delta makes if it starts a message
   * @param {Change[]} changes
   * @returns {boolean} whether it was merged into an existing row
   */
  streamText(loop, p, row, changes) {
    const cur = this.streams.get(loop.key);
    if (cur && !cur.dropped && cur.streaming && cur.iteration === (p.iteration ?? 0)) {
      cur.text = (cur.text ?? "") + (p.text ?? "");
      setMessage(cur, cur.text, true);
      changes.push({ op: "update", row: cur });
      return true;
    }
    row.kind = "message";
    row.iteration = p.iteration ?? 0;
    row.text = p.text ?? "";
    return false;
  }

  /**
   * endStream ends the message being streamed in a loop: a message event of its
   * iteration gives its whole text (and needs no row of its own); other events just end it.
   * @param {LoopNode} loop
   * @param {Record<string, any>} p
   * @param {Change[]} changes
   * @returns {boolean} whether the message event was merged into the streamed row
   */
  endStream(loop, p, changes) {
    const cur = this.streams.get(loop.key);
    this.streams.delete(loop.key);
    if (!cur || cur.dropped) {
      return false;
    }
    const same = p.text !== undefined && cur.iteration === (p.iteration ?? 0);
    cur.text = same ? p.text : cur.text;
    setMessage(cur, cur.text ?? "", false);
    changes.push({ op: "update", row: cur });
    return same;
  }

  /**
   * end marks the run ended: approvals still pending can no longer be decided, and no
   * more text streams.
   * @returns {Change[]}
   */
  end() {
    this.ended = true;
    /** @type {Change[]} */
    const changes = [];
    for (const row of this.approvals.values()) {
      if (row.approval && row.approval.status === "pending" && !row.dropped) {
        row.approval.status = "ended";
        row.tone = "";
        row.summary = row.summary.replace(/ waits for approval.*$/, " was never decided");
        changes.push({ op: "update", row });
      }
    }
    this.approvals.clear();
    for (const row of this.streams.values()) {
      if (!row.dropped) {
        setMessage(row, row.text ?? "", false);
        changes.push({ op: "update", row });
      }
    }
    this.streams.clear();
    return changes;
  }

  /**
   * trim drops the oldest rows over maxRows; an approval still pending stays.
   * @returns {Change[]}
   */
  trim() {
    /** @type {Change[]} */
    const changes = [];
    let i = 0;
    while (this.rows.length > this.maxRows && i < this.rows.length) {
      const row = this.rows[i];
      if (row.approval?.status === "pending") {
        i++;
        continue;
      }
      this.rows.splice(i, 1);
      row.dropped = true;
      this.dropped++;
      if (row.kind === "tool_call_started") {
        this.calls.delete(callKey(row.loop, row.callId));
      }
      changes.push({ op: "drop", row });
    }
    return changes;
  }
}

/**
 * setMessage sets a message row's text.
 * @param {Row} row
 * @param {string} text
 * @param {boolean} streaming
 */
function setMessage(row, text, streaming) {
  row.streaming = streaming;
  row.summary = truncate(oneLine(text));
  row.details = text.length > row.summary.length || text.includes("\n") ? [{ label: "text", text: clip(text) }] : [];
}

/**
 * call writes a tool call for a summary: tool(arguments), shortened.
 * @param {string | undefined} tool
 * @param {string | undefined} args
 */
function callText(tool, args) {
  return truncate(`${tool ?? "?"}(${args ? compactJSON(args) : ""})`);
}

/**
 * objectLine writes a blackboard object for a summary: its type, name and size.
 * @param {BlackboardObject | undefined} o
 */
function objectLine(o) {
  const v = objectView(o);
  const parts = [v.typeName || "object"];
  if (v.name) parts.push(`“${v.name}”`);
  if (v.kind === "blob") parts.push(`(${v.mediaType || "blob"}, ${formatBytes(v.size)})`);
  return parts.join(" ");
}

/**
 * describe fills in a row's title, summary, tone and details from its event.
 * @param {string} kind
 * @param {Record<string, any>} p the event's payload
 * @param {Row} row
 */
export function describe(kind, p, row) {
  const d = row.details;
  switch (kind) {
    case "started":
      row.title = "run started";
      row.summary = `model ${p.model ?? "?"}, ${(p.tools ?? []).length} tools, at most ${p.maxIterations ?? "?"} iterations`;
      if (p.tools?.length) d.push({ label: "tools", text: p.tools.join("\n") });
      break;
    case "message":
      row.title = "assistant";
      row.iteration = p.iteration ?? 0;
      row.text = String(p.text ?? "");
      setMessage(row, row.text, false);
      break;
    case "text_delta": // the first piece of a message: the row is the message's (kind "message")
      row.title = "assistant";
      setMessage(row, row.text ?? "", true);
      break;
    case "tool_call_started":
      row.title = "tool call";
      row.callId = p.callId ?? "";
      row.tone = "pending";
      row.summary = `${callText(p.tool, p.argumentsJson)} · call ${p.callId ?? "?"} · iteration ${p.iteration ?? "?"}`;
      d.push({ label: "arguments", text: clip(prettyJSON(p.argumentsJson)) });
      break;
    case "tool_call_finished":
      describeFinished(p, row);
      break;
    case "usage":
      row.title = "usage";
      row.summary = usageLine(p);
      break;
    case "tools_changed": {
      row.title = "tools changed";
      const changed = [...(p.added ?? []).map((/** @type {string} */ t) => "+" + t), ...(p.removed ?? []).map((/** @type {string} */ t) => "−" + t)];
      row.summary = truncate(`${changed.join(", ") || "no change"} · now ${(p.tools ?? []).length} tools`);
      if (p.tools?.length) d.push({ label: "tools", text: p.tools.join("\n") });
      break;
    }
    case "artifact":
      row.title = "artifact";
      row.callId = p.callId ?? "";
      row.summary = truncate(`${objectLine(p.object)} from ${p.tool || "?"} → ${p.sink || "?"}`);
      d.push({ label: "object", object: objectView(p.object) });
      break;
    case "blackboard_changed":
      row.title = "blackboard";
      row.summary = truncate(`#${p.index ?? 0} ${objectLine(p.object)}${p.tool ? ` from ${p.tool}` : ""}`);
      d.push({ label: "object", object: objectView(p.object) });
      break;
    case "progress":
      row.title = "progress";
      row.summary = truncate(`${p.tool ? p.tool + ": " : ""}${oneLine(p.status)}`);
      break;
    case "message_to_user":
      row.title = "message to user";
      setMessage(row, p.text ?? "", false);
      break;
    case "asset_added":
      row.title = "asset";
      row.summary = truncate(`${objectLine(p.asset?.object)}${p.asset?.tool ? ` from ${p.asset.tool}` : ""}`);
      d.push({ label: "object", object: objectView(p.asset?.object) });
      break;
    default:
      describeMore(kind, p, row);
  }
}

/**
 * describeFinished describes a tool_call_finished event.
 * @param {Record<string, any>} p
 * @param {Row} row
 */
function describeFinished(p, row) {
  const outcome = enumLabel(p.outcome, "TOOL_CALL_OUTCOME_");
  row.title = "tool result";
  row.callId = p.callId ?? "";
  row.tone = p.outcome === "TOOL_CALL_OUTCOME_OK" ? "ok" : "error";
  const parts = [`${p.tool ?? "?"} ${outcome}`];
  if (p.duration) parts.push(`in ${formatDuration(p.duration)}`);
  if (p.workerId) parts.push(`on ${p.workerId}`);
  if ((p.attempts ?? 0) > 1) parts.push(`after ${p.attempts} attempts`);
  parts.push(`call ${p.callId ?? "?"}`);
  row.summary = truncate(parts.join(" · "));
  if (p.content !== undefined) {
    row.details.push({ label: "result", text: clip(prettyJSON(p.content)) });
  }
  if (p.artifact) {
    row.details.push({ label: `artifact ${p.artifact.typeName ?? ""}`.trim(), object: objectView(p.artifact) });
  }
}

/**
 * describeMore describes the events that end or steer a run, and nested loops.
 * @param {string} kind
 * @param {Record<string, any>} p
 * @param {Row} row
 */
function describeMore(kind, p, row) {
  const d = row.details;
  switch (kind) {
    case "final_result":
      row.title = "answer";
      row.tone = "ok";
      row.summary = truncate(oneLine(p.text));
      d.push({ label: `answer after ${p.iterations ?? 0} iterations${p.returnDirect ? " (return-direct tool)" : ""}`, text: clip(p.text ?? "") });
      if (p.usage) d.push({ label: "usage", text: usageLine(p.usage) });
      break;
    case "error":
      row.title = "error";
      row.tone = "error";
      row.summary = truncate(`${p.code ?? "UNKNOWN"}${p.reason ? " · " + enumLabel(p.reason, "ERROR_REASON_") : ""}: ${oneLine(p.message)}`);
      if ((p.message ?? "").length > row.summary.length) d.push({ label: "message", text: clip(p.message) });
      break;
    case "terminated":
      row.title = "terminated";
      row.tone = "warn";
      row.summary = truncate(`${p.tool ?? "?"} ended the ${p.scope === "TERMINATE_SCOPE_ACTION" ? "action" : "agent"}: ${oneLine(p.reason)}`);
      break;
    case "replan_requested":
      row.title = "replan";
      row.tone = "warn";
      row.summary = truncate(`${p.tool ?? "?"} asked to plan again after ${p.iterations ?? 0} iterations: ${oneLine(p.reason)}`);
      for (const o of p.added ?? []) d.push({ label: `added ${objectLine(o)}`, object: objectView(o) });
      break;
    case "warning":
      row.title = "warning";
      row.tone = "warn";
      row.summary = truncate(`${p.field ? p.field + ": " : ""}${oneLine(p.message)}`);
      break;
    case "nested_loop_started":
      row.title = "loop started";
      row.summary = `model ${p.model ?? "?"}, ${(p.tools ?? []).length} tools, at most ${p.maxIterations ?? "?"} iterations`;
      if (p.tools?.length) d.push({ label: "tools", text: p.tools.join("\n") });
      break;
    case "nested_loop_finished":
      row.title = "loop finished";
      row.tone = p.error ? "error" : "ok";
      row.summary = truncate(`${p.iterations ?? 0} iterations, ${p.toolCalls ?? 0} tool calls${p.error ? " · failed: " + oneLine(p.error) : ""}`);
      if (p.error) d.push({ label: "error", text: clip(p.error) });
      break;
    case "approval_requested":
      if (p.input) { // a tool's question to a person, answered with ApproveToolCall
        const q = p.input;
        row.title = "question";
        row.tone = "pending";
        row.callId = p.callId ?? "";
        row.summary = truncate(`${p.tool ?? "?"} · call ${p.callId ?? "?"} asks: ${oneLine(q.message ?? "")}${p.deadline ? " (until " + formatDateTime(p.deadline) + ")" : ""}`);
        row.approval = { callId: p.callId ?? "", loopId: p.loopId ?? "", tool: p.tool ?? "", status: "pending", decidedBy: "", reason: "",
          inputId: q.inputId ?? "", question: q.message ?? "", schema: q.requestedSchemaJson ?? "" };
        if (p.argumentsJson) {
          d.push({ label: "arguments", text: clip(prettyJSON(p.argumentsJson)) });
        }
        if (q.requestedSchemaJson) {
          d.push({ label: "requested schema", text: clip(prettyJSON(q.requestedSchemaJson)) });
        }
        break;
      }
      row.title = "approval";
      row.tone = "pending";
      row.callId = p.callId ?? "";
      row.summary = `${callText(p.tool, p.argumentsJson)} · call ${p.callId ?? "?"} waits for approval${p.deadline ? " until " + formatDateTime(p.deadline) : ""}`;
      row.approval = { callId: p.callId ?? "", loopId: p.loopId ?? "", tool: p.tool ?? "", status: "pending", decidedBy: "", reason: "" };
      d.push({ label: "arguments", text: clip(prettyJSON(p.argumentsJson)) });
      break;
    case "approval_decided":
      if (p.inputId) {
        row.title = p.approved ? "answered" : "not answered";
        row.tone = p.approved ? "ok" : "error";
        row.callId = p.callId ?? "";
        row.summary = truncate(`${p.tool ?? "?"} call ${p.callId ?? "?"} question ${p.inputId} ${p.approved ? "answered" : "not answered"} by ${p.decidedBy || "?"}${p.contentJson ? ": " + oneLine(p.contentJson) : p.reason ? ": " + oneLine(p.reason) : ""}`);
        break;
      }
      row.title = p.approved ? "approved" : "denied";
      row.tone = p.approved ? "ok" : "error";
      row.callId = p.callId ?? "";
      row.summary = truncate(`${p.tool ?? "?"} call ${p.callId ?? "?"} ${p.approved ? "approved" : "denied"} by ${p.decidedBy || "?"}${p.reason ? ": " + oneLine(p.reason) : ""}`);
      break;
    default:
      row.title = kind.replace(/_/g, " ");
      row.summary = truncate(compactJSON(JSON.stringify(p)));
      d.push({ label: "event", text: clip(JSON.stringify(p, null, 2)) });
  }
}

/**
 * @typedef {Object} LoopTreeNode
 * @property {LoopInfo} info
 * @property {LoopTreeNode[]} children
 */

/**
 * buildLoopTree makes GetRun's list of loops (the run's own first, then the nested ones
 * in the order they started, each naming its parent) a tree. A loop whose parent is not
 * in the list hangs under the run's own loop (or is a root when there is none).
 * @param {LoopInfo[] | undefined} loops
 * @returns {LoopTreeNode[]} the roots: normally one, the run's own loop
 */
export function buildLoopTree(loops) {
  /** @type {Map<string, LoopTreeNode>} */
  const byId = new Map();
  /** @type {LoopTreeNode[]} */
  const roots = [];
  for (const info of loops ?? []) {
    const node = { info, children: [] };
    const id = info.scope?.loopId ?? "";
    const parent = info.scope?.parentLoopId ? byId.get(info.scope.parentLoopId) : undefined;
    if (parent) {
      parent.children.push(node);
    } else if (info.scope?.parentLoopId && roots.length > 0) {
      roots[0].children.push(node);
    } else {
      roots.push(node);
    }
    if (id && !byId.has(id)) {
      byId.set(id, node);
    }
  }
  return roots;
}

/**
 * loopLine writes one loop of GetRun's tree for the loops panel.
 * @param {LoopInfo} info
 * @returns {string}
 */
export function loopLine(info) {
  const s = info.scope ?? {};
  const name = s.tool ? `${s.tool} (${enumLabel(s.kind, "AGENTIC_KIND_")})` : "run loop";
  const state = info.running ? "running" : info.error ? `failed: ${truncate(oneLine(info.error), 80)}` : "done";
  return `${name} · ${info.iterations ?? 0} iterations, ${info.toolCalls ?? 0} tool calls · ${state}`;
}
