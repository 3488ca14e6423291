// @ts-check
// Small helpers to build the page. Text always goes in as text nodes, never as markup:
// nothing the API returns can become HTML. The document is only read when a helper is
// called, so that this module imports anywhere.

/** @typedef {Node | string | number | null | undefined | false} Child */

/**
 * @typedef {Object} Props
 * @property {string | (string | false | null | undefined)[]} [class] class names
 * @property {Record<string, string>} [data] data- attributes, by dataset name ("runId": data-run-id)
 * @property {Record<string, (ev: any) => void>} [on] event listeners, by event type
 * @property {string} [value] an input's or a select's value (set after the children)
 * @property {string} [text] the element's text (instead of children)
 */

/**
 * h makes an element: h("a", {href: "#/runs", class: "nav"}, "Runs"). Other props are
 * attributes (true: present, false/null/undefined: absent); style and on* attributes are
 * refused, as the page's Content-Security-Policy would refuse them.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Props & Record<string, any>} [props]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false || k === "value" || k === "text") {
      continue;
    }
    if (k === "class") {
      const names = (Array.isArray(v) ? v : [v]).filter((c) => typeof c === "string" && c !== "");
      if (names.length) el.className = names.join(" ");
    } else if (k === "data") {
      for (const [dk, dv] of Object.entries(/** @type {Record<string, string>} */ (v))) {
        el.dataset[dk] = dv;
      }
    } else if (k === "on") {
      for (const [type, fn] of Object.entries(/** @type {Record<string, (ev: any) => void>} */ (v))) {
        el.addEventListener(type, fn);
      }
    } else if (k === "style" || /^on/i.test(k)) {
      throw new Error(`h: the ${k} attribute is not allowed`);
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  if (props.text !== undefined) {
    el.textContent = props.text;
  } else {
    append(el, children);
  }
  if (props.value !== undefined && "value" in el) {
    /** @type {HTMLInputElement} */ (el).value = props.value;
  }
  return el;
}

/**
 * append adds children to an element: nodes as they are, strings and numbers as text.
 * @param {Element} el
 * @param {(Child | Child[])[]} children
 */
export function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) {
      continue;
    }
    el.append(typeof c === "number" ? String(c) : c);
  }
}

/**
 * setText sets an element's text when it differs (leaving the DOM alone otherwise).
 * @param {Element} el
 * @param {string} text
 */
export function setText(el, text) {
  if (el.textContent !== text) {
    el.textContent = text;
  }
}

/**
 * syncRows makes the rows of a table body those of items, in order: an item keeps its
 * row (by key) while it does not change, so that a refresh redraws only what changed.
 * @template T
 * @param {HTMLTableSectionElement} tbody
 * @param {T[]} items
 * @param {(item: T) => string} key
 * @param {(item: T) => HTMLTableRowElement} render
 * @param {string} [salt] what else the rows depend on: a change redraws them all
 */
export function syncRows(tbody, items, key, render, salt = "") {
  /** @type {Map<string, HTMLTableRowElement>} */
  const old = new Map();
  for (const tr of Array.from(tbody.rows)) {
    old.set(tr.dataset.key ?? "", tr);
  }
  let i = 0;
  for (const item of items) {
    const k = key(item);
    const sig = salt + JSON.stringify(item);
    let tr = old.get(k);
    old.delete(k);
    if (!tr || tr.dataset.sig !== sig) {
      const fresh = render(item);
      fresh.dataset.key = k;
      fresh.dataset.sig = sig;
      if (tr && tr.cells.length === fresh.cells.length) {
        patchRow(tr, fresh); // what did not change keeps its node, its focus, its open details
      } else {
        tr?.replaceWith(fresh);
        tr = fresh;
      }
    }
    if (tbody.rows[i] !== tr) {
      tbody.insertBefore(tr, tbody.rows[i] ?? null);
    }
    i++;
  }
  for (const tr of old.values()) {
    tr.remove();
  }
}

/**
 * patchRow makes a table row like another of as many cells: its attributes, and each
 * cell that differs.
 * @param {HTMLTableRowElement} tr
 * @param {HTMLTableRowElement} fresh
 */
function patchRow(tr, fresh) {
  for (const a of Array.from(tr.attributes)) {
    if (!fresh.hasAttribute(a.name)) tr.removeAttribute(a.name);
  }
  for (const a of Array.from(fresh.attributes)) {
    if (tr.getAttribute(a.name) !== a.value) tr.setAttribute(a.name, a.value);
  }
  const now = Array.from(tr.cells), next = Array.from(fresh.cells);
  for (let i = 0; i < next.length; i++) {
    if (!now[i].isEqualNode(next[i])) now[i].replaceWith(next[i]);
  }
}

/**
 * poll calls fn now and then every ms milliseconds while the page is visible (and at
 * once when it becomes visible again), never twice at a time, until signal aborts.
 * @param {() => Promise<void>} fn
 * @param {number} ms
 * @param {AbortSignal} signal
 * @returns {() => Promise<void>} calls fn now (unless it is running)
 */
export function poll(fn, ms, signal) {
  let busy = false;
  const run = async () => {
    if (busy || signal.aborted) {
      return;
    }
    busy = true;
    try {
      await fn();
    } finally {
      busy = false;
    }
  };
  const tick = () => {
    if (document.visibilityState === "visible") {
      void run();
    }
  };
  const id = setInterval(tick, ms);
  document.addEventListener("visibilitychange", tick);
  signal.addEventListener("abort", () => {
    clearInterval(id);
    document.removeEventListener("visibilitychange", tick);
  }, { once: true });
  void run();
  return run;
}

/**
 * sleep waits ms milliseconds, or until signal aborts.
 * @param {number} ms
 * @param {AbortSignal} signal
 * @returns {Promise<void>}
 */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const id = setTimeout(done, ms);
    function done() {
      clearTimeout(id);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
