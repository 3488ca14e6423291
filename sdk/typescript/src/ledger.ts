/**
 * The idempotency ledger: the answers of calls by idempotency key, so that a call the
 * orchestrator sends again (after a crash, or to another replica sharing the ledger) is
 * answered with the first call's answer instead of running the tool twice.
 *
 * @module
 */

/**
 * Where answers are kept. Keys are the tool's name and the orchestrator's idempotency
 * key; answers are encoded InvokeResponse messages. A store shared by replicas (a
 * database, Redis) makes the guarantee hold across them.
 */
export interface Ledger {
  /**
   * The answer kept under `key`, if one has not expired. `signal` aborts when the call's
   * caller goes away; the worker stops waiting then (the call's key held meanwhile).
   */
  load(key: string, signal?: AbortSignal): Promise<Uint8Array | undefined>;
  /**
   * Keeps `answer` under `key` for `ttlMs` milliseconds. `signal` is not the call's: an
   * answer whose caller went away (an orchestrator that died) while the tool ran is kept
   * all the same, its effect having happened; it aborts once the worker stops waiting
   * (`ledgerStoreTimeoutMs`, 10 s by default), the call's key released then.
   */
  store(key: string, answer: Uint8Array, ttlMs: number, signal?: AbortSignal): Promise<void>;
}

/** How long a worker waits for its ledger to keep an answer by default: 10 seconds. */
export const DEFAULT_LEDGER_STORE_TIMEOUT_MS = 10_000;

/**
 * Settles as `value` does, or rejects with `signal`'s reason once it aborts, whichever
 * comes first: a ledger that does not honour its signal is not waited for past it.
 */
export function settleBy<T>(value: Promise<T> | T, signal: AbortSignal): Promise<T> {
  const p = Promise.resolve(value); // a ledger written in JavaScript may answer at once
  if (signal.aborted) {
    p.catch(() => {}); // its failure, later, is nobody's
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** How long answers are kept by default: 24 hours. */
export const DEFAULT_LEDGER_TTL_MS = 24 * 60 * 60 * 1000;
/** How many answers a {@link MemoryLedger} keeps by default. */
export const DEFAULT_LEDGER_MAX_ENTRIES = 10000;

/** A ledger in this process's memory, bounded in entries (the oldest stored goes first) and in time. */
export class MemoryLedger implements Ledger {
  readonly #max: number;
  readonly #now: () => number;
  readonly #entries = new Map<string, { answer: Uint8Array; expires: number }>();

  /** A ledger of at most `maxEntries` answers (10,000 when ≤ 0); `now` is the clock, for tests. */
  constructor(maxEntries = DEFAULT_LEDGER_MAX_ENTRIES, now: () => number = Date.now) {
    this.#max = maxEntries > 0 ? maxEntries : DEFAULT_LEDGER_MAX_ENTRIES;
    this.#now = now;
  }

  async load(key: string): Promise<Uint8Array | undefined> {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    if (this.#now() >= e.expires) {
      this.#entries.delete(key);
      return undefined;
    }
    return e.answer;
  }

  async store(key: string, answer: Uint8Array, ttlMs: number): Promise<void> {
    this.#entries.delete(key); // a stored key moves to the back
    this.#entries.set(key, { answer: new Uint8Array(answer), expires: this.#now() + ttlMs });
    while (this.#entries.size > this.#max) {
      const oldest = this.#entries.keys().next().value as string;
      this.#entries.delete(oldest);
    }
  }

  /** The number of answers kept. */
  get size(): number {
    return this.#entries.size;
  }
}

/**
 * Serialises the calls of one key in this process, so that a duplicate that arrives
 * while the first runs waits for its answer. Holds an entry only while a call of the key
 * runs or waits.
 */
export class KeyLocks {
  readonly #locks = new Map<string, { tail: Promise<void>; refs: number }>();

  /**
   * Waits for the key's earlier holders, then returns the function that releases it.
   * With a signal, a waiter whose caller leaves gives up (rejecting with the signal's
   * reason) rather than wait out the calls ahead of it: a duplicate of a slow call does
   * not hold its handler for as long; the key passes on in order all the same.
   */
  async lock(key: string, signal?: AbortSignal): Promise<() => void> {
    let l = this.#locks.get(key);
    if (!l) {
      l = { tail: Promise.resolve(), refs: 0 };
      this.#locks.set(key, l);
    }
    l.refs++;
    const prev = l.tail;
    let release!: () => void;
    l.tail = new Promise<void>((resolve) => (release = resolve));
    const entry = l;
    let released = false;
    const unlock = () => {
      if (released) return;
      released = true;
      release();
      if (--entry.refs === 0 && this.#locks.get(key) === entry) this.#locks.delete(key);
    };
    if (signal) {
      try {
        await settleBy(prev, signal);
      } catch (e) {
        void prev.then(unlock); // its turn, when it comes, passes to the next at once
        throw e;
      }
    } else {
      await prev;
    }
    return unlock;
  }

  /** The keys held or waited for. */
  get size(): number {
    return this.#locks.size;
  }
}
