// @ts-check
// How the console writes values: times, durations, token counts, enum names, sizes; how
// it shortens long text and links to a trace. Nothing here touches the DOM.

/** @typedef {import("./types.js").BlackboardObject} BlackboardObject */

/** The longest text a table cell or a summary shows; the rest is in the details. */
export const CELL_CHARS = 160;

/** The longest text the details of a row keep. */
export const DETAIL_CHARS = 1 << 20;

/**
 * truncate shortens text to at most max characters, ending it with an ellipsis.
 * @param {string | undefined} text
 * @param {number} [max]
 * @returns {string}
 */
export function truncate(text, max = CELL_CHARS) {
  const s = text ?? "";
  if (s.length <= max) {
    return s;
  }
  return s.slice(0, Math.max(0, max - 1)) + "…";
}

/**
 * oneLine is text on one line: runs of white space become one space.
 * @param {string | undefined} text
 * @returns {string}
 */
export function oneLine(text) {
  return (text ?? "").replace(/\s+/g, " ").trim();
}

/**
 * clip keeps at most max characters of a long text for the details, saying how much
 * was left out.
 * @param {string | undefined} text
 * @param {number} [max]
 * @returns {string}
 */
export function clip(text, max = DETAIL_CHARS) {
  const s = text ?? "";
  if (s.length <= max) {
    return s;
  }
  return `${s.slice(0, max)}\n… (${s.length - max} more characters not shown)`;
}

/**
 * enumLabel is an enum value's name without its prefix, in lower case with spaces:
 * enumLabel("RUN_STATE_REPLAN_REQUESTED", "RUN_STATE_") is "replan requested". A missing
 * value is the enum's zero: "unspecified".
 * @param {string | undefined} value
 * @param {string} prefix
 * @returns {string}
 */
export function enumLabel(value, prefix) {
  const v = value || `${prefix}UNSPECIFIED`;
  return (v.startsWith(prefix) ? v.slice(prefix.length) : v).toLowerCase().replace(/_/g, " ");
}

/** The RunState values, in order. */
export const RUN_STATES = Object.freeze([
  "RUN_STATE_RUNNING", "RUN_STATE_SUCCEEDED", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED",
  "RUN_STATE_REPLAN_REQUESTED", "RUN_STATE_TERMINATED", "RUN_STATE_HELD",
]);

/**
 * stateLabel is a RunState's label: "running", "succeeded", ...
 * @param {string | undefined} state
 * @returns {string}
 */
export function stateLabel(state) {
  return enumLabel(state, "RUN_STATE_");
}

/**
 * stateClass is the CSS class of a state badge: "state-running", ...
 * @param {string | undefined} state
 * @returns {string}
 */
export function stateClass(state) {
  return "state-" + stateLabel(state).replace(/ /g, "-");
}

/** @param {number} n @param {number} [width] */
function pad(n, width = 2) {
  return String(n).padStart(width, "0");
}

/**
 * parseTime reads an RFC 3339 timestamp; null when missing or invalid.
 * @param {string | undefined} ts
 * @returns {Date | null}
 */
export function parseTime(ts) {
  if (!ts) {
    return null;
  }
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? null : d;
}

/**
 * formatDateTime writes a timestamp in local time: "2024-05-01 13:45:02"; "—" for none.
 * @param {string | undefined} ts
 * @returns {string}
 */
export function formatDateTime(ts) {
  const d = parseTime(ts);
  if (!d) {
    return "—";
  }
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/**
 * formatClock writes a timestamp's local time of day with milliseconds: "13:45:02.125".
 * @param {string | undefined} ts
 * @returns {string}
 */
export function formatClock(ts) {
  const d = parseTime(ts);
  if (!d) {
    return "—";
  }
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/**
 * durationSeconds reads a protobuf JSON Duration ("1.500s", "-2s"); NaN when invalid.
 * @param {string | undefined} d
 * @returns {number}
 */
export function durationSeconds(d) {
  const m = /^(-?\d+(?:\.\d+)?)s$/.exec(d ?? "");
  return m ? Number(m[1]) : NaN;
}

/**
 * formatSeconds writes a length of time: "250 ms", "1.5 s", "2 min 3 s", "1 h 2 min",
 * "3 d 4 h".
 * @param {number} s
 * @returns {string}
 */
export function formatSeconds(s) {
  if (!Number.isFinite(s)) {
    return "—";
  }
  const sign = s < 0 ? "-" : "";
  const a = Math.abs(s);
  if (a < 1) {
    return `${sign}${Math.round(a * 1000)} ms`;
  }
  if (a < 60) {
    return `${sign}${Number(a.toFixed(a < 10 ? 2 : 1))} s`;
  }
  if (a < 3600) {
    return `${sign}${Math.floor(a / 60)} min ${Math.floor(a % 60)} s`;
  }
  if (a < 2 * 86400) {
    return `${sign}${Math.floor(a / 3600)} h ${Math.floor((a % 3600) / 60)} min`;
  }
  return `${sign}${Math.floor(a / 86400)} d ${Math.floor((a % 86400) / 3600)} h`;
}

/**
 * formatDuration writes a protobuf JSON Duration: formatDuration("1.500s") is "1.5 s".
 * @param {string | undefined} d
 * @returns {string}
 */
export function formatDuration(d) {
  return formatSeconds(durationSeconds(d));
}

/**
 * elapsed is the time from one timestamp to another (or to now), written.
 * @param {string | undefined} from
 * @param {string | undefined} to
 * @param {number} [now] milliseconds since the epoch
 * @returns {string}
 */
export function elapsed(from, to, now = Date.now()) {
  const a = parseTime(from);
  if (!a) {
    return "—";
  }
  const b = parseTime(to);
  return formatSeconds(((b ? b.getTime() : now) - a.getTime()) / 1000);
}

/**
 * formatCount writes an integer (an int64 comes as a string) with thousands separated:
 * "12,345"; 0 for none.
 * @param {string | number | undefined} n
 * @returns {string}
 */
export function formatCount(n) {
  const s = String(n ?? 0);
  if (!/^-?\d+$/.test(s)) {
    return s;
  }
  const neg = s.startsWith("-");
  const digits = neg ? s.slice(1) : s;
  return (neg ? "-" : "") + digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/**
 * formatUsd writes an amount of US dollars: cents from a dollar up, four significant
 * digits below it.
 * @param {number | undefined} x
 * @returns {string}
 */
export function formatUsd(x) {
  const v = x ?? 0;
  if (v === 0) {
    return "$0";
  }
  if (Math.abs(v) >= 1) {
    return `$${v.toFixed(2)}`;
  }
  return `$${Number(v.toPrecision(4))}`;
}

/**
 * formatBytes writes a size: "512 B", "1.5 KiB", "2.0 MiB".
 * @param {string | number | undefined} n
 * @returns {string}
 */
export function formatBytes(n) {
  let v = Number(n ?? 0);
  if (!Number.isFinite(v)) {
    return String(n);
  }
  if (v < 1024) {
    return `${v} B`;
  }
  for (const unit of ["KiB", "MiB", "GiB"]) {
    v /= 1024;
    if (v < 1024 || unit === "GiB") {
      return `${v.toFixed(1)} ${unit}`;
    }
  }
  return `${v} B`;
}

/**
 * formatLimit writes a quota: "unbounded" for 0, which means none.
 * @param {number | undefined} n
 * @returns {string}
 */
export function formatLimit(n) {
  return n ? formatCount(n) : "unbounded";
}

/**
 * formatAvailable writes a rate limiter's tokens at hand, to one decimal; "—" for an
 * unbounded one.
 * @param {number | undefined} n
 * @param {number | undefined} perMinute the limit; 0: unbounded
 * @returns {string}
 */
export function formatAvailable(n, perMinute) {
  if (!perMinute) {
    return "—";
  }
  return (Math.floor((n ?? 0) * 10) / 10).toFixed(1);
}

/**
 * prettyJSON indents JSON text; text that is not JSON comes back as it is.
 * @param {string | undefined} text
 * @returns {string}
 */
export function prettyJSON(text) {
  const s = text ?? "";
  if (s === "") {
    return "";
  }
  try {
    return JSON.stringify(JSON.parse(s), null, 2);
  } catch {
    return s;
  }
}

/**
 * compactJSON writes JSON text on one line (for a summary); other text as it is.
 * @param {string | undefined} text
 * @returns {string}
 */
export function compactJSON(text) {
  const s = text ?? "";
  try {
    return JSON.stringify(JSON.parse(s));
  } catch {
    return oneLine(s);
  }
}

/**
 * traceLink is the URL of a trace in the operator's tracing UI: the template with
 * {trace_id} replaced by the trace id, URL-encoded. Null when either is missing, or the
 * result is no http or https URL (a template can never make a javascript: link).
 * @param {string | undefined} template
 * @param {string | undefined} traceId
 * @returns {string | null}
 */
export function traceLink(template, traceId) {
  if (!template || !traceId || !template.includes("{trace_id}")) {
    return null;
  }
  const href = template.split("{trace_id}").join(encodeURIComponent(traceId));
  let url;
  try {
    url = new URL(href);
  } catch {
    return null;
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
}

/** Media types of blobs shown as images. */
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif"]);

/**
 * @typedef {Object} ObjectView what the page shows of a blackboard object or an asset
 * @property {string} typeName
 * @property {string} name its binding name, "" for none
 * @property {string} kind "json" or "blob"
 * @property {string} mediaType
 * @property {number} size the blob's size in bytes; the JSON's length for a JSON value
 * @property {string} [json] the JSON value, indented
 * @property {string} [imageSrc] a data: URL of an image blob that came with its bytes
 * @property {string} note what is missing: a blob that came without its bytes, ...
 */

/**
 * objectView is what the page shows of a blackboard object: a JSON value indented, an
 * image blob (PNG, JPEG or GIF) as a data: URL; of another blob only its type and size.
 * @param {BlackboardObject | undefined} o
 * @returns {ObjectView}
 */
export function objectView(o) {
  const obj = o ?? {};
  const mediaType = obj.mediaType ?? "";
  /** @type {ObjectView} */
  const v = { typeName: obj.typeName ?? "", name: obj.name ?? "", kind: "json", mediaType, size: 0, note: "" };
  if (!mediaType && !obj.data) {
    v.json = clip(prettyJSON(obj.json));
    v.size = (obj.json ?? "").length;
    return v;
  }
  v.kind = "blob";
  v.size = Number(obj.size ?? 0) || approxBase64Bytes(obj.data);
  const essence = mediaType.split(";")[0].trim().toLowerCase();
  if (!obj.data) {
    v.note = "the bytes were left out of this response";
  } else if (IMAGE_TYPES.has(essence) && /^[A-Za-z0-9+/]*={0,2}$/.test(obj.data)) {
    v.imageSrc = `data:${essence};base64,${obj.data}`;
  }
  return v;
}

/**
 * @param {string | undefined} b64
 * @returns {number}
 */
function approxBase64Bytes(b64) {
  const s = (b64 ?? "").replace(/=+$/, "");
  return Math.floor((s.length * 3) / 4);
}

/**
 * usageLine writes a Usage: "gpt-4o: 1,200 in / 300 out tokens, $0.0042".
 * @param {import("./types.js").Usage | undefined} u
 * @returns {string}
 */
export function usageLine(u) {
  if (!u) {
    return "—";
  }
  const parts = [`${formatCount(u.inputTokens)} in / ${formatCount(u.outputTokens)} out tokens`];
  if (u.costUsd) {
    parts.push(formatUsd(u.costUsd));
  }
  return (u.model ? `${u.model}: ` : "") + parts.join(", ");
}

/**
 * budgetLines writes a run's budget: what it spent of each limit.
 * @param {import("./types.js").Budget | undefined} b
 * @returns {string[]}
 */
export function budgetLines(b) {
  if (!b) {
    return [];
  }
  const of = (/** @type {string} */ used, /** @type {boolean} */ limited, /** @type {string} */ max) => limited ? `${used} of ${max}` : `${used} (no limit)`;
  return [
    `cost ${of(formatUsd(b.costUsd), !!b.maxCostUsd, formatUsd(b.maxCostUsd))}`,
    `tokens ${of(formatCount(b.tokens), !!Number(b.maxTokens ?? 0), formatCount(b.maxTokens))}`,
    `tool calls ${of(formatCount(b.actions), !!b.maxActions, formatCount(b.maxActions))}`,
  ];
}

/**
 * seqAfter reports whether sequence a comes after b; both int64 as strings.
 * @param {string | undefined} a
 * @param {string | undefined} b
 * @returns {boolean}
 */
export function seqAfter(a, b) {
  try {
    return BigInt(a || "0") > BigInt(b || "0");
  } catch {
    return false;
  }
}
