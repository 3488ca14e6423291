/**
 * The state a call is bound to (a selection's state, a method's receiver), round-tripped
 * by the orchestrator: workers keep no memory between calls.
 *
 * @module
 */

const decoder = new TextDecoder();

/** The state of one call: read it, replace it; the orchestrator keeps what the call leaves. */
export class ToolState {
  #data: Uint8Array;
  #changed = false;

  constructor(data: Uint8Array = new Uint8Array()) {
    this.#data = new Uint8Array(data);
  }

  /** A copy of the state's bytes (empty when the call is bound to none). */
  bytes(): Uint8Array {
    return new Uint8Array(this.#data);
  }

  /** The state as UTF-8 text. */
  text(): string {
    return decoder.decode(this.#data);
  }

  /** Whether the state is empty. */
  get empty(): boolean {
    return this.#data.length === 0;
  }

  /** The state parsed as JSON; undefined when it is empty. Throws when it is not JSON. */
  json<T = unknown>(): T | undefined {
    return this.#data.length === 0 ? undefined : (JSON.parse(this.text()) as T);
  }

  /**
   * Replaces the state: bytes as they are, any other value encoded as JSON (a string
   * becomes a JSON string). The next call bound to the state, on any replica, sees it.
   */
  set(value: unknown): void {
    if (value instanceof Uint8Array) {
      this.#data = new Uint8Array(value);
    } else {
      const json = JSON.stringify(value);
      if (json === undefined) throw new TypeError("the state cannot be encoded as JSON");
      this.#data = new TextEncoder().encode(json);
    }
    this.#changed = true;
  }

  /** Clears the state (an empty state with state_changed). */
  clear(): void {
    this.#data = new Uint8Array();
    this.#changed = true;
  }

  /** Whether the call replaced the state. */
  get changed(): boolean {
    return this.#changed;
  }
}
