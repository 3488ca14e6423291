// @ts-check
// The user's bearer token: kept in the tab's sessionStorage only, so that it is gone when
// the tab closes and never reaches another tab or a disk. Nothing here touches the DOM.

/** The sessionStorage key of the token. */
export const TOKEN_KEY = "toolmesh.console.token";

/**
 * @typedef {Object} KeyValueStorage the part of Storage the store uses
 * @property {(key: string) => string | null} getItem
 * @property {(key: string, value: string) => void} setItem
 * @property {(key: string) => void} removeItem
 */

/**
 * TokenStore keeps the token in a storage (sessionStorage in the page); where the storage
 * refuses (a browser that blocks it), in memory for the life of the page.
 */
export class TokenStore {
  /** @param {KeyValueStorage | null} storage */
  constructor(storage) {
    this.storage = storage;
    this.memory = "";
  }

  /** The token; "" when signed out. @returns {string} */
  get() {
    try {
      return this.storage?.getItem(TOKEN_KEY) ?? this.memory;
    } catch {
      return this.memory;
    }
  }

  /**
   * set keeps a token (surrounding white space and a "Bearer " prefix pasted with it
   * removed); an empty one signs out.
   * @param {string} token
   */
  set(token) {
    const t = normalizeToken(token);
    if (!t) {
      this.clear();
      return;
    }
    this.memory = t;
    try {
      this.storage?.setItem(TOKEN_KEY, t);
    } catch {
      // kept in memory only
    }
  }

  /** clear signs out. */
  clear() {
    this.memory = "";
    try {
      this.storage?.removeItem(TOKEN_KEY);
    } catch {
      // nothing was kept there
    }
  }
}

/**
 * normalizeToken is a token as typed or pasted, without white space around it or a
 * "Bearer " prefix; a token with white space or control characters inside is no token
 * (it could not travel in a header): "".
 * @param {string} token
 * @returns {string}
 */
export function normalizeToken(token) {
  const t = token.trim().replace(/^bearer\s+/i, "");
  return /^[\x21-\x7e]+$/.test(t) ? t : "";
}
