/**
 * The contract's bounds that the SDK checks or keeps (contract, "Field bounds";
 * `internal/wire/limits.go`).
 *
 * @module
 */

/** Every message toolmesh receives is at most this many bytes encoded. */
export const MAX_MESSAGE_BYTES = 4 << 20;
/** The headroom `pkg/worker` keeps under {@link MAX_MESSAGE_BYTES} for a call's answer. */
export const RESULT_HEADROOM_BYTES = 64 << 10;
/** The default bound of one call's encoded answer. */
export const DEFAULT_MAX_RESULT_BYTES = MAX_MESSAGE_BYTES - RESULT_HEADROOM_BYTES;
/** One progress report, in bytes. */
export const MAX_PROGRESS_BYTES = 1 << 10;
/** Objects one call may add to the blackboard. */
export const MAX_BLACKBOARD_UPDATES = 256;
/** Bytes (JSON and blobs' data) one call may add to the blackboard. */
export const MAX_BLACKBOARD_UPDATE_BYTES = 1 << 20;
/** Blackboard types one tool may declare. */
export const MAX_BLACKBOARD_TYPES = 16;
/** A blackboard type name or binding name, in bytes. */
export const MAX_TYPE_NAME_BYTES = 256;
/** A blob's media type, in bytes. */
export const MAX_MEDIA_TYPE_BYTES = 256;
/** A tool's or a group's description, and usage notes, in bytes. */
export const MAX_DESCRIPTION_BYTES = 8 << 10;
/** A tool's input schema, in bytes. */
export const MAX_SCHEMA_BYTES = 64 << 10;
/** Metadata entries of a tool definition, and the bytes of a key and of a value. */
export const MAX_METADATA_ENTRIES = 64;
export const MAX_METADATA_KEY_BYTES = 256;
export const MAX_METADATA_VALUE_BYTES = 4 << 10;
/** A once-per-loop tool's advice, in bytes. */
export const MAX_ONCE_ADVICE_BYTES = 4 << 10;
/** A worker's or a group's version, and a group's provider, in bytes. */
export const MAX_VERSION_BYTES = 128;
export const MAX_PROVIDER_BYTES = 128;
/** Groups of one registration; tools of one group. */
export const MAX_REGISTRATION_GROUPS = 64;
export const MAX_GROUP_TOOLS = 10000;
/** Facade nesting, and categories of a by-category facade. */
export const MAX_FACADE_DEPTH = 32;
export const MAX_FACADE_CATEGORIES = 256;
export const MAX_CATEGORY_BYTES = 64;
/** Domain types of one group. */
export const MAX_DOMAIN_TYPES = 64;
/** A worker's advertised address, in bytes. */
export const MAX_ADDRESS_BYTES = 261;

/** Tool and facade names: 1 to 64 of [A-Za-z0-9_-]. */
export const TOOL_NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** Group roles: 1 to 64 of [A-Za-z0-9_.-]. */
export const ROLE_RE = /^[A-Za-z0-9_.-]{1,64}$/;
/** Worker ids: 1 to 253 of [A-Za-z0-9_.:-]. */
export const WORKER_ID_RE = /^[A-Za-z0-9_.:-]{1,253}$/;

const encoder = new TextEncoder();

/** The UTF-8 length of `s` in bytes. */
export function byteLength(s: string): number {
  return encoder.encode(s).length;
}

/** Shortens `s` to at most `n` bytes of UTF-8, cut at a character boundary, nothing added. */
export function cutUtf8(s: string, n: number): string {
  const b = encoder.encode(s);
  if (b.length <= n) return s;
  let cut = n;
  while (cut > 0 && (b[cut]! & 0xc0) === 0x80) cut--;
  return new TextDecoder().decode(b.subarray(0, cut));
}

/** Shortens `s` for a message: at most `n` bytes, with the length said when it was cut (`wire.Truncate`). */
export function truncateUtf8(s: string, n: number): string {
  const len = byteLength(s);
  if (len <= n) return s;
  return `${cutUtf8(s, n)}… (${len} bytes)`;
}

/** Whether `s` is free of lone surrogates (it encodes to valid UTF-8 as it is). */
export function isWellFormed(s: string): boolean {
  return (s as string & { isWellFormed(): boolean }).isWellFormed();
}

/** "" when `s` is valid UTF-8 of at most `max` bytes, else what is wrong with it. */
export function checkText(s: string, max: number): string {
  if (!isWellFormed(s)) return "is not valid UTF-8";
  const n = byteLength(s);
  return n > max ? `is ${n} bytes; the limit is ${max}` : "";
}
