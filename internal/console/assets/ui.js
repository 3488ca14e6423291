// @ts-check
// Pieces of the page the views share: badges, cells, objects, errors.

import { describeError } from "./api.js";
import { h } from "./dom.js";
import { CELL_CHARS, enumLabel, formatBytes, stateClass, stateLabel, truncate } from "./format.js";

/** @typedef {import("./api.js").Client} Client */
/** @typedef {import("./types.js").ConsoleConfig} ConsoleConfig */
/** @typedef {import("./format.js").ObjectView} ObjectView */

/**
 * @typedef {Object} AppContext what a view is given
 * @property {Client} client the API
 * @property {ConsoleConfig} config
 * @property {(err: unknown, source: string) => void} showError shows an error in the banner
 * @property {(source: string) => void} clearError hides the banner if it shows source's error
 */

/**
 * @typedef {Object} View a page of the console
 * @property {(ctx: AppContext, main: HTMLElement, signal: AbortSignal) => void} mount
 *   draws the view into main; it stops everything it started when signal aborts
 */

/**
 * badge is a run state's badge.
 * @param {string | undefined} state a RunState name
 * @returns {HTMLSpanElement}
 */
export function badge(state) {
  return h("span", { class: ["badge", stateClass(state)], data: { state: state || "RUN_STATE_UNSPECIFIED" } }, stateLabel(state));
}

/**
 * workerBadge is a worker state's badge.
 * @param {string | undefined} state a WorkerState name
 * @returns {HTMLSpanElement}
 */
export function workerBadge(state) {
  const label = enumLabel(state, "WORKER_STATE_");
  return h("span", { class: ["badge", "worker-" + label], data: { state: state || "WORKER_STATE_UNSPECIFIED" } }, label);
}

/**
 * cell is a table cell's text, shortened, with the whole text as its title.
 * @param {string | undefined} text
 * @param {{mono?: boolean, max?: number}} [opts]
 * @returns {HTMLTableCellElement}
 */
export function cell(text, opts = {}) {
  const s = text ?? "";
  const short = truncate(s, opts.max ?? CELL_CHARS);
  return h("td", { class: opts.mono ? "mono" : undefined, title: short !== s ? s : undefined }, short);
}

/**
 * numCell is a table cell of a number, aligned right.
 * @param {string} text
 * @returns {HTMLTableCellElement}
 */
export function numCell(text) {
  return h("td", { class: "num" }, text);
}

/**
 * objectBox shows a blackboard object, an asset or an artifact: what it is, and its JSON
 * value indented, or its image, or a note of what is missing.
 * @param {ObjectView} v
 * @returns {HTMLDivElement}
 */
export function objectBox(v) {
  const meta = [v.typeName || "object"];
  if (v.name) meta.push(`named “${v.name}”`);
  meta.push(v.kind === "blob" ? `${v.mediaType || "blob"}, ${formatBytes(v.size)}` : `JSON, ${formatBytes(v.size)}`);
  return h("div", { class: "object" },
    h("p", { class: "object-meta" }, meta.join(" · ")),
    v.json !== undefined ? h("pre", { class: "json" }, v.json) : null,
    v.imageSrc ? h("img", { class: "blob-image", src: v.imageSrc, alt: `${v.typeName || "image"} (${v.mediaType})` }) : null,
    v.note ? h("p", { class: "note" }, v.note) : null,
    v.kind === "blob" && !v.imageSrc && !v.note ? h("p", { class: "note" }, "a blob the console does not show") : null);
}

/**
 * errorBox shows an error where it happened (the banner shows the page's errors).
 * @param {unknown} err
 * @returns {HTMLDivElement}
 */
export function errorBox(err) {
  const e = describeError(err);
  return h("div", { class: "error-box", role: "alert" },
    h("strong", {}, e.title), e.message ? ": " + e.message : "",
    e.lines.length ? h("ul", {}, e.lines.map((l) => h("li", {}, l))) : null);
}

/**
 * isAbort reports whether an error is the abort of a view's signal (the user left it).
 * @param {unknown} err
 * @param {AbortSignal} signal
 * @returns {boolean}
 */
export function isAbort(err, signal) {
  return signal.aborted || (err instanceof Error && err.name === "AbortError");
}
