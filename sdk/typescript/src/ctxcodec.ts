/**
 * The ToolCallContext of a call as gRPC metadata (contract, "ToolCallContext as gRPC
 * metadata"): one entry per context entry, keyed `tm-ctx-` + the lowercase unpadded
 * base32 of the context key + `-bin`, valued by the raw UTF-8 of the context value.
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { goQuote } from "./gostr.js";

/** The encoded size a context may have by default (the orchestrator's `context.max_bytes`). */
export const DEFAULT_CONTEXT_MAX_BYTES = 8192;

/** Starts every metadata key that carries a context entry. */
export const METADATA_PREFIX = "tm-ctx-";
/** Ends every metadata key that carries a context entry (a binary header). */
export const METADATA_SUFFIX = "-bin";
/** Starts every key toolmesh itself sets; such entries never travel and are dropped when they arrive. */
export const RESERVED_PREFIX = "toolmesh.";

const ENTRY_OVERHEAD = 32;
const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";
const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** A context, or metadata, that cannot travel as a ToolCallContext. */
export class ContextCodecError extends Error {
  override name = "ContextCodecError";
}

/** Lowercase RFC 4648 base32 without padding. */
export function base32Encode(b: Uint8Array): string {
  let out = "";
  let bits = 0;
  let acc = 0;
  for (const byte of b) {
    acc = (acc << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(acc >>> (bits - 5)) & 31];
      bits -= 5;
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) out += ALPHABET[(acc << (5 - bits)) & 31];
  return out;
}

/** Decodes lowercase unpadded base32, or undefined when `s` is not its canonical form. */
export function base32DecodeCanonical(s: string): Uint8Array | undefined {
  const out = new Uint8Array(Math.floor((s.length * 5) / 8));
  let bits = 0;
  let acc = 0;
  let n = 0;
  for (const ch of s) {
    const v = ALPHABET.indexOf(ch);
    if (v < 0) return undefined;
    acc = ((acc << 5) | v) & 0xfff;
    bits += 5;
    if (bits >= 8) {
      out[n++] = (acc >>> (bits - 8)) & 0xff;
      bits -= 8;
    }
  }
  return base32Encode(out) === s ? out : undefined;
}

/** The metadata key that carries the context key `key`. */
export function metadataKey(key: string): string {
  return METADATA_PREFIX + base32Encode(utf8.encode(key)) + METADATA_SUFFIX;
}

function base64Len(n: number): number {
  return 4 * Math.ceil(n / 3);
}

function truncate(s: string, n: number): string {
  const b = utf8.encode(s);
  if (b.length <= n) return s;
  let cut = n;
  while (cut > 0 && (b[cut]! & 0xc0) === 0x80) cut--;
  return `${new TextDecoder().decode(b.subarray(0, cut))}… (${b.length} bytes)`;
}

function tooLarge(size: number, max: number, largestKey: string): ContextCodecError {
  return new ContextCodecError(`tool call context is ${size} bytes encoded, over the ${max}-byte limit (largest entry: ${goQuote(truncate(largestKey, 64))})`);
}

function isWellFormed(s: string): boolean {
  return (s as string & { isWellFormed(): boolean }).isWellFormed();
}

/**
 * Encodes a context as metadata; entries with a reserved key (`toolmesh.`) are left
 * out. Throws a {@link ContextCodecError} for an empty key, a string that is not valid
 * UTF-8 (a lone surrogate) or a size over `maxBytes`.
 */
export function encodeContext(ctx: Readonly<Record<string, string>>, maxBytes = DEFAULT_CONTEXT_MAX_BYTES): grpc.Metadata {
  const md = new grpc.Metadata();
  let size = 0;
  let largest = "";
  let largestSize = -1;
  for (const [k, v] of Object.entries(ctx)) {
    if (k.startsWith(RESERVED_PREFIX)) continue;
    if (k === "") throw new ContextCodecError("invalid tool call context: empty key");
    if (!isWellFormed(k)) throw new ContextCodecError(`invalid tool call context: key ${goQuote(k)} is not valid UTF-8`);
    if (!isWellFormed(v)) throw new ContextCodecError(`invalid tool call context: value of key ${goQuote(k)} is not valid UTF-8`);
    const mk = metadataKey(k);
    const value = Buffer.from(v, "utf8");
    const n = mk.length + base64Len(value.length) + ENTRY_OVERHEAD;
    size += n;
    if (n > largestSize || (n === largestSize && k < largest)) {
      largest = k;
      largestSize = n;
    }
    md.set(mk, value);
  }
  if (size > maxBytes) throw tooLarge(size, maxBytes, largest);
  return md;
}

function decodeKey(mdKey: string): string {
  const enc = mdKey.slice(METADATA_PREFIX.length, mdKey.length - METADATA_SUFFIX.length);
  for (const ch of enc) {
    if (!((ch >= "a" && ch <= "z") || (ch >= "2" && ch <= "7"))) {
      throw new ContextCodecError(`invalid tool call context: metadata key ${goQuote(mdKey)}: ${goQuote(enc)} is not lowercase base32`);
    }
  }
  const raw = base32DecodeCanonical(enc);
  if (raw === undefined) {
    throw new ContextCodecError(`invalid tool call context: metadata key ${goQuote(mdKey)}: ${goQuote(enc)} is not canonical unpadded base32`);
  }
  if (raw.length === 0) throw new ContextCodecError(`invalid tool call context: metadata key ${goQuote(mdKey)} carries an empty key`);
  let key: string;
  try {
    key = strictUtf8.decode(raw);
  } catch {
    throw new ContextCodecError(
      `invalid tool call context: metadata key ${goQuote(mdKey)} carries key ${goQuote(new TextDecoder().decode(raw))}, which is not valid UTF-8`,
    );
  }
  return key;
}

function isContextKey(k: string): boolean {
  return k.length >= METADATA_PREFIX.length + METADATA_SUFFIX.length && k.startsWith(METADATA_PREFIX) && k.endsWith(METADATA_SUFFIX);
}

/**
 * Decodes the context a call's metadata carries, as `pkg/worker` does: only keys of the
 * form `tm-ctx-…-bin` are read; a key that is not the canonical lowercase unpadded
 * base32 of a non-empty UTF-8 string, a key with other than one value, a value that is
 * not UTF-8, or a size over `maxBytes` is an error ({@link ContextCodecError}). Entries
 * with a reserved key (`toolmesh.`) are dropped.
 */
export function decodeContext(md: grpc.Metadata, maxBytes = DEFAULT_CONTEXT_MAX_BYTES): Record<string, string> {
  const all = md.toJSON();
  const keys = Object.keys(all).filter(isContextKey).sort();
  const out: Record<string, string> = {};
  if (keys.length === 0) return out;
  let size = 0;
  let largest = "";
  let largestSize = -1;
  for (const k of keys) {
    let n = k.length + ENTRY_OVERHEAD;
    for (const v of all[k]!) n += base64Len(typeof v === "string" ? Buffer.byteLength(v) : v.length);
    size += n;
    if (n > largestSize) {
      largest = k;
      largestSize = n;
    }
  }
  if (size > maxBytes) {
    let key = largest;
    try {
      key = decodeKey(largest);
    } catch {
      // Name the metadata key itself.
    }
    throw tooLarge(size, maxBytes, key);
  }
  for (const mk of keys) {
    const key = decodeKey(mk);
    const vs = all[mk]!;
    if (vs.length !== 1) {
      throw new ContextCodecError(`invalid tool call context: metadata key ${goQuote(mk)} (context key ${goQuote(key)}) has ${vs.length} values, want 1`);
    }
    const raw = vs[0]!;
    let value: string;
    try {
      value = typeof raw === "string" ? raw : strictUtf8.decode(raw);
    } catch {
      throw new ContextCodecError(`invalid tool call context: value of key ${goQuote(key)} is not valid UTF-8`);
    }
    if (key.startsWith(RESERVED_PREFIX)) continue;
    Object.defineProperty(out, key, { value, enumerable: true, writable: false, configurable: false });
  }
  return out;
}
