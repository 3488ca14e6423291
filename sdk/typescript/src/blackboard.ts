/**
 * The run's blackboard as one call sees it: the objects sent with the call (the newest of
 * each type the tool declared) and the objects the call adds.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { JsonSyntaxError, parseJson } from "./canonical.js";
import { BlackboardObjectSchema, type BlackboardObject as BlackboardObjectPb } from "./gen/toolmesh/v1/tool_pb.js";
import { MAX_MEDIA_TYPE_BYTES, MAX_TYPE_NAME_BYTES, checkText } from "./limits.js";

/** An object on the blackboard: a JSON value, or a blob with its media type. */
export class BlackboardEntry {
  /** The object's type: simple ("Note") or qualified ("crm.v1.Customer"). */
  readonly typeName: string;
  /** The name bound to the object; "" for none. */
  readonly name: string;
  /** The JSON value as text; "" for a blob. */
  readonly json: string;
  /** A blob's bytes; undefined for a JSON value. */
  readonly data: Uint8Array | undefined;
  /** A blob's media type; "" for a JSON value. */
  readonly mediaType: string;

  constructor(init: { typeName: string; name?: string; json?: string; data?: Uint8Array; mediaType?: string }) {
    this.typeName = init.typeName;
    this.name = init.name ?? "";
    this.json = init.json ?? "";
    this.mediaType = init.mediaType ?? "";
    this.data = init.data ?? (this.mediaType !== "" ? new Uint8Array() : undefined);
  }

  /** Whether the object is a blob (it has a media type or data). */
  get isBlob(): boolean {
    return this.mediaType !== "" || this.data !== undefined;
  }

  /** The bytes the object counts against the blackboard's bounds: its JSON or its data. */
  get size(): number {
    return Buffer.byteLength(this.json) + (this.data?.length ?? 0);
  }

  /** The JSON value, parsed; undefined for a blob. */
  value<T = unknown>(): T | undefined {
    if (this.isBlob || this.json === "") return undefined;
    return JSON.parse(this.json) as T;
  }

  /** The object as the wire carries it. */
  toProto(): BlackboardObjectPb {
    const p = create(BlackboardObjectSchema, { typeName: this.typeName, json: this.json, name: this.name });
    if (this.isBlob) {
      p.data = this.data ?? new Uint8Array();
      p.mediaType = this.mediaType;
      p.size = BigInt(p.data.length);
      p.json = "";
    }
    return p;
  }

  /** The object a request carries. */
  static fromProto(p: BlackboardObjectPb): BlackboardEntry {
    const blob = p.mediaType !== "" || p.data.length > 0;
    return new BlackboardEntry(
      blob ? { typeName: p.typeName, name: p.name, data: p.data, mediaType: p.mediaType, json: p.json } : { typeName: p.typeName, name: p.name, json: p.json },
    );
  }
}

/** An object a tool adds to the blackboard: a JSON value (`value`, or `json` as text) or a blob (`data` and `mediaType`). */
export interface BlackboardAdd {
  /** The object's type, such as "Note": 1 to 256 bytes, not blank. */
  typeName: string;
  /** The name to bind it to (at most 256 bytes); none when absent. */
  name?: string;
  /** The value, encoded as JSON. */
  value?: unknown;
  /** The value as JSON text (one JSON value). */
  json?: string;
  /** A blob's bytes. */
  data?: Uint8Array;
  /** A blob's media type, such as "image/png": `type/subtype` with optional parameters, printable ASCII. */
  mediaType?: string;
}

/** A blackboard object that cannot be added. */
export class BlackboardError extends Error {
  override name = "BlackboardError";
}

const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const MEDIA_TYPE_RE = new RegExp(`^(${TOKEN})/(${TOKEN})\\s*(;\\s*${TOKEN}\\s*=\\s*(${TOKEN}|"([^"\\\\]|\\\\.)*")\\s*)*;?\\s*$`);

/** "" when `mediaType` is a valid media type (`type/subtype`, parameters allowed, printable ASCII, at most 256 bytes), else why not. */
export function checkMediaType(mediaType: string): string {
  if (mediaType === "") return 'a blob needs a media type, such as "application/octet-stream"';
  if (mediaType.length > MAX_MEDIA_TYPE_BYTES) return `the media type is ${mediaType.length} bytes; the limit is ${MAX_MEDIA_TYPE_BYTES}`;
  for (let i = 0; i < mediaType.length; i++) {
    const c = mediaType.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return `the media type ${JSON.stringify(mediaType)} holds a byte that is not printable ASCII`;
  }
  if (!MEDIA_TYPE_RE.test(mediaType.trim())) return `the media type ${JSON.stringify(mediaType)} is not of the form type/subtype`;
  return "";
}

/** Checks an object to add and returns it as an entry; throws a {@link BlackboardError} when it cannot be added. */
export function entryFrom(add: BlackboardAdd): BlackboardEntry {
  const typeName = add.typeName ?? "";
  if (typeName.trim() === "") throw new BlackboardError("blackboard object: empty type name");
  const tp = checkText(typeName, MAX_TYPE_NAME_BYTES);
  if (tp) throw new BlackboardError(`blackboard object: type name ${tp}`);
  const name = add.name ?? "";
  const np = checkText(name, MAX_TYPE_NAME_BYTES);
  if (np) throw new BlackboardError(`blackboard object of type ${JSON.stringify(typeName)}: name ${np}`);
  const blob = add.data !== undefined || (add.mediaType ?? "") !== "";
  if (blob) {
    if (add.json !== undefined || add.value !== undefined) {
      throw new BlackboardError(`blackboard object of type ${JSON.stringify(typeName)}: it holds both JSON and a blob's data; it may hold one`);
    }
    const problem = checkMediaType(add.mediaType ?? "");
    if (problem) throw new BlackboardError(`blackboard object of type ${JSON.stringify(typeName)}: ${problem}`);
    return new BlackboardEntry({ typeName, name, data: new Uint8Array(add.data ?? []), mediaType: add.mediaType! });
  }
  let json: string;
  if (add.json !== undefined) {
    json = add.json;
  } else {
    const encoded = add.value === undefined ? undefined : JSON.stringify(add.value);
    if (encoded === undefined) throw new BlackboardError(`blackboard object of type ${JSON.stringify(typeName)}: no value`);
    json = encoded;
  }
  try {
    parseJson(json);
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw new BlackboardError(`blackboard object of type ${JSON.stringify(typeName)}: the value is not valid JSON`);
    throw e;
  }
  return new BlackboardEntry({ typeName, name, json });
}

/** The last segment of a qualified type name: "Customer" of "crm.v1.Customer". */
export function simpleTypeName(typeName: string): string {
  const i = Math.max(typeName.lastIndexOf("."), typeName.lastIndexOf("/"), typeName.lastIndexOf(":"), typeName.lastIndexOf("$"));
  return i >= 0 ? typeName.slice(i + 1) : typeName;
}

/**
 * Whether the object is of type `name`: its type name, or the simple form of it, is
 * `name`; or, for a JSON object, its `_typeName` or one of its `_typeLabels` is.
 */
export function satisfiesType(e: BlackboardEntry, name: string): boolean {
  if (name === "") return false;
  const match = (t: unknown) => typeof t === "string" && t !== "" && (t === name || simpleTypeName(t) === name);
  if (match(e.typeName)) return true;
  if (e.isBlob || !e.json.startsWith("{")) return false;
  let labels: { _typeName?: unknown; _typeLabels?: unknown };
  try {
    labels = JSON.parse(e.json) as typeof labels;
  } catch {
    return false;
  }
  if (match(labels._typeName)) return true;
  return Array.isArray(labels._typeLabels) && labels._typeLabels.some(match);
}

/**
 * The blackboard of one call: lookups answer from the objects the call brought and the
 * ones it added (the call's own first); additions are recorded, in order, and bounded
 * in bytes.
 */
export class CallBlackboard {
  readonly #seen: readonly BlackboardEntry[];
  readonly #added: BlackboardEntry[] = [];
  readonly #limit: number;
  #size = 0;

  /** A board that sees `objects` and accepts at most `limitBytes` of added JSON and data (0: no bound). */
  constructor(objects: readonly BlackboardEntry[], limitBytes: number) {
    this.#seen = [...objects];
    this.#limit = limitBytes;
  }

  /** What the call saw and what it added, oldest first. */
  entries(): BlackboardEntry[] {
    return [...this.#seen, ...this.#added];
  }

  /** The newest object of the type, the call's own additions first; undefined when there is none. */
  last(typeName: string): BlackboardEntry | undefined {
    for (const list of [this.#added, this.#seen]) {
      for (let i = list.length - 1; i >= 0; i--) if (satisfiesType(list[i]!, typeName)) return list[i];
    }
    return undefined;
  }

  /** The object bound to `name`, the call's own bindings first. */
  get(name: string): BlackboardEntry | undefined {
    if (name === "") return undefined;
    for (const list of [this.#added, this.#seen]) {
      for (let i = list.length - 1; i >= 0; i--) if (list[i]!.name === name) return list[i];
    }
    return undefined;
  }

  /** Adds an object (bound to `add.name` when set); throws a {@link BlackboardError} when it cannot be added. */
  add(add: BlackboardAdd): BlackboardEntry {
    const e = entryFrom(add);
    if (this.#limit > 0 && this.#size + e.size > this.#limit) {
      throw new BlackboardError(`blackboard object of type ${JSON.stringify(e.typeName)}: the call's additions would exceed ${this.#limit} bytes`);
    }
    this.#size += e.size;
    this.#added.push(e);
    return e;
  }

  /** What the call added, in order. */
  added(): BlackboardEntry[] {
    return [...this.#added];
  }
}
