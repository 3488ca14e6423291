// @ts-check
// The console's entry: it reads config.json, draws the header (navigation, sign-in, the
// error banner) and shows the view the location's hash names. Imported where there is no
// document (a test), it only defines.

import { Client, describeError } from "./api.js";
import { TokenStore, normalizeToken } from "./auth.js";
import { h } from "./dom.js";
import { parseRoute } from "./route.js";
import * as runView from "./run.js";
import * as runsView from "./runs.js";
import * as tenantsView from "./tenants.js";
import * as workersView from "./workers.js";

/** @typedef {import("./types.js").ConsoleConfig} ConsoleConfig */
/** @typedef {import("./ui.js").AppContext} AppContext */
/** @typedef {import("./ui.js").View} View */

/**
 * parseConfig reads config.json; what is missing or of the wrong type takes its default.
 * @param {unknown} json
 * @returns {ConsoleConfig}
 */
export function parseConfig(json) {
  const o = typeof json === "object" && json !== null ? /** @type {Record<string, unknown>} */ (json) : {};
  return {
    traceUrl: typeof o.traceUrl === "string" ? o.traceUrl : "",
    tenancy: o.tenancy === true,
  };
}

/**
 * loadConfig fetches config.json beside the page.
 * @returns {Promise<ConsoleConfig>}
 */
async function loadConfig() {
  const res = await fetch("config.json", { cache: "no-cache" });
  if (!res.ok) {
    throw new Error(`config.json: HTTP ${res.status}`);
  }
  return parseConfig(await res.json());
}

/** Banner shows the last error of the page at its top. */
class Banner {
  /** @param {HTMLElement} el */
  constructor(el) {
    this.el = el;
    this.source = "";
  }

  /**
   * @param {unknown} err
   * @param {string} source what failed: a later success of it hides the banner
   */
  show(err, source) {
    const e = describeError(err);
    this.source = source;
    this.el.replaceChildren(
      h("div", { class: "banner-text" },
        h("strong", {}, e.title), e.message ? ": " + e.message : "",
        e.lines.length ? h("ul", {}, e.lines.map((l) => h("li", {}, l))) : null),
      h("button", { type: "button", class: "dismiss", "aria-label": "Dismiss the error", on: { click: () => this.hide() } }, "×"));
    this.el.hidden = false;
  }

  /** @param {string} source */
  clear(source) {
    if (this.source === source) {
      this.hide();
    }
  }

  hide() {
    this.el.hidden = true;
    this.el.replaceChildren();
    this.source = "";
  }
}

/** @type {Record<string, View>} */
const VIEWS = {
  runs: runsView,
  run: runView,
  workers: workersView,
  tenants: tenantsView,
  notfound: {
    mount(_ctx, main) {
      main.append(h("h1", {}, "No such page"), h("p", {}, h("a", { href: "#/runs" }, "Go to the runs.")));
    },
  },
};

/** @returns {Storage | null} the tab's sessionStorage, if the browser allows it */
function sessionStore() {
  try {
    return globalThis.sessionStorage ?? null;
  } catch {
    return null;
  }
}

/**
 * byId finds an element of the page.
 * @param {string} id
 * @returns {HTMLElement}
 */
function byId(id) {
  const el = document.getElementById(id);
  if (!el) {
    throw new Error(`the page has no #${id}`);
  }
  return el;
}

/** start runs the console in the page. */
export async function start() {
  const tokens = new TokenStore(sessionStore());
  const banner = new Banner(byId("banner"));
  const main = byId("main");
  /** @type {ConsoleConfig} */
  let config = { traceUrl: "", tenancy: false };
  try {
    config = await loadConfig();
  } catch (err) {
    banner.show(err, "config");
  }
  /** @type {AppContext} */
  const ctx = {
    client: new Client({ token: () => tokens.get() }),
    config,
    showError: (err, source) => banner.show(err, source),
    clearError: (source) => banner.clear(source),
  };
  for (const a of document.querySelectorAll("[data-nav=tenants]")) {
    /** @type {HTMLElement} */ (a).hidden = !config.tenancy;
  }

  /** @type {AbortController | null} */
  let current = null;
  const show = () => {
    current?.abort();
    current = new AbortController();
    banner.hide();
    const route = parseRoute(location.hash);
    const nav = route.view === "run" ? "runs" : route.view;
    for (const a of document.querySelectorAll("[data-nav]")) {
      if (/** @type {HTMLElement} */ (a).dataset.nav === nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.title = route.view === "run" ? `Run ${route.runId} · toolmesh` : "toolmesh console";
    main.replaceChildren();
    VIEWS[route.view].mount(ctx, main, current.signal);
  };
  drawAuth(byId("auth"), tokens, show);
  window.addEventListener("hashchange", show);
  show();
}

/**
 * drawAuth draws the sign-in form, or the signed-in state and a sign-out button; either
 * change draws the view anew with the new credentials.
 * @param {HTMLElement} el
 * @param {TokenStore} tokens
 * @param {() => void} reload
 */
function drawAuth(el, tokens, reload) {
  const redraw = () => {
    drawAuth(el, tokens, reload);
    reload();
  };
  if (tokens.get()) {
    el.replaceChildren(
      h("span", { class: "who" }, "Signed in with a token"),
      h("button", { type: "button", on: { click: () => { tokens.clear(); redraw(); } } }, "Sign out"));
    return;
  }
  const input = h("input", { id: "token", type: "password", autocomplete: "off", spellcheck: "false", placeholder: "optional", title: "Not needed when the browser presents a client certificate" });
  const problem = h("span", { class: "auth-problem", role: "status" });
  el.replaceChildren(h("form", {
    class: "signin",
    on: {
      submit: (/** @type {SubmitEvent} */ ev) => {
        ev.preventDefault();
        const t = normalizeToken(input.value);
        if (!t) {
          problem.textContent = "That is not a token.";
          return;
        }
        tokens.set(t);
        redraw();
      },
    },
  }, h("label", { for: "token" }, "Bearer token"), input, h("button", { type: "submit" }, "Sign in"), problem));
}

if (typeof window !== "undefined" && typeof document !== "undefined") {
  void start();
}
