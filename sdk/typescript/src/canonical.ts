/**
 * Canonical JSON as the contract's content hash needs it: the JSON re-encoded as Go's
 * `encoding/json` writes a decoded value (decoded with `UseNumber`). Object keys sorted
 * by byte order (of their UTF-8), no whitespace, numbers exactly as written, strings
 * escaped as Go escapes them (`<`, `>`, `&`, U+2028 and U+2029 as `\u003c` … `\u2029`;
 * `\b`, `\f`, `\n`, `\r`, `\t`; other control characters as `\u00XX`; everything else,
 * DEL included, as UTF-8). A duplicate key keeps its last value; text after the first
 * value is ignored; text that is not JSON is used as it is.
 *
 * @module
 */

/** A decoded JSON value that keeps each number's text. */
export type JsonValue =
  | null
  | boolean
  | string
  | JsonNumber
  | JsonValue[]
  | JsonObject;

/** A JSON number as written. */
export class JsonNumber {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

/** A JSON object: its members by key (a duplicate key keeps its last value). */
export class JsonObject {
  readonly members = new Map<string, JsonValue>();
}

/** A JSON text that does not parse. */
export class JsonSyntaxError extends Error {
  override name = "JsonSyntaxError";
}

/** Most nesting the parser follows (Go's decoder allows 10,000). */
const MAX_DEPTH = 10000;

class Parser {
  pos = 0;
  constructor(readonly s: string) {}

  fail(what: string): never {
    throw new JsonSyntaxError(`${what} at offset ${this.pos}`);
  }

  space(): void {
    const s = this.s;
    while (this.pos < s.length) {
      const c = s.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else break;
    }
  }

  value(depth: number): JsonValue {
    if (depth > MAX_DEPTH) this.fail("exceeded max depth");
    this.space();
    const c = this.s[this.pos];
    switch (c) {
      case "{":
        return this.object(depth);
      case "[":
        return this.array(depth);
      case '"':
        return this.string();
      case "t":
        return this.literal("true", true);
      case "f":
        return this.literal("false", false);
      case "n":
        return this.literal("null", null);
      default:
        if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
        return this.fail(c === undefined ? "unexpected end of JSON input" : `invalid character ${JSON.stringify(c)}`);
    }
  }

  literal<T extends JsonValue>(word: string, v: T): T {
    if (this.s.startsWith(word, this.pos)) {
      this.pos += word.length;
      return v;
    }
    return this.fail(`invalid literal`);
  }

  number(): JsonNumber {
    const re = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
    re.lastIndex = this.pos;
    const m = re.exec(this.s);
    if (!m) return this.fail("invalid number");
    this.pos = re.lastIndex;
    return new JsonNumber(m[0]);
  }

  string(): string {
    const s = this.s;
    this.pos++; // the opening quote
    let out = "";
    let start = this.pos;
    for (;;) {
      if (this.pos >= s.length) this.fail("unexpected end of JSON input");
      const c = s.charCodeAt(this.pos);
      if (c === 0x22) {
        out += s.slice(start, this.pos);
        this.pos++;
        return out;
      }
      if (c < 0x20) this.fail("invalid character in string literal");
      if (c !== 0x5c) {
        this.pos++;
        continue;
      }
      out += s.slice(start, this.pos);
      const e = s[this.pos + 1];
      this.pos += 2;
      switch (e) {
        case '"': out += '"'; break;
        case "\\": out += "\\"; break;
        case "/": out += "/"; break;
        case "b": out += "\b"; break;
        case "f": out += "\f"; break;
        case "n": out += "\n"; break;
        case "r": out += "\r"; break;
        case "t": out += "\t"; break;
        case "u": {
          const unit = this.hex4();
          if (unit >= 0xd800 && unit < 0xdc00) {
            // A high surrogate makes a character only with a low one escaped after it.
            if (s.startsWith("\\u", this.pos)) {
              const save = this.pos;
              this.pos += 2;
              const low = this.hex4();
              if (low >= 0xdc00 && low < 0xe000) {
                out += String.fromCharCode(unit, low);
                break;
              }
              this.pos = save;
            }
            out += "\ufffd";
          } else if (unit >= 0xdc00 && unit < 0xe000) {
            out += "\ufffd";
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.fail("invalid escape in string literal");
      }
      start = this.pos;
    }
  }

  hex4(): number {
    const h = this.s.slice(this.pos, this.pos + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) this.fail("invalid \\u escape");
    this.pos += 4;
    return parseInt(h, 16);
  }

  array(depth: number): JsonValue[] {
    this.pos++;
    const out: JsonValue[] = [];
    this.space();
    if (this.s[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth + 1));
      this.space();
      const c = this.s[this.pos++];
      if (c === "]") return out;
      if (c !== ",") this.fail("expected , or ]");
    }
  }

  object(depth: number): JsonObject {
    this.pos++;
    const out = new JsonObject();
    this.space();
    if (this.s[this.pos] === "}") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.space();
      if (this.s[this.pos] !== '"') this.fail("expected a string key");
      const key = this.string();
      this.space();
      if (this.s[this.pos++] !== ":") this.fail("expected :");
      const v = this.value(depth + 1);
      out.members.delete(key); // the last value of a duplicate key wins
      out.members.set(key, v);
      this.space();
      const c = this.s[this.pos++];
      if (c === "}") return out;
      if (c !== ",") this.fail("expected , or }");
    }
  }
}

/**
 * Decodes the first JSON value of `text` (what follows it is ignored, as Go's
 * `json.Decoder.Decode` ignores it), keeping each number's text. Lone surrogate escapes
 * decode to U+FFFD, as in Go. Throws a {@link JsonSyntaxError} when `text` does not start
 * with a JSON value.
 */
export function parseJsonFirst(text: string): JsonValue {
  const p = new Parser(text);
  return p.value(0);
}

/**
 * Decodes `text` as exactly one JSON value (whitespace around it allowed), keeping each
 * number's text. Throws a {@link JsonSyntaxError} otherwise.
 */
export function parseJson(text: string): JsonValue {
  const p = new Parser(text);
  const v = p.value(0);
  p.space();
  if (p.pos !== text.length) p.fail("invalid character after top-level value");
  return v;
}

const encoder = new TextEncoder();

/** Compares two strings by the byte order of their UTF-8, as Go's string comparison does. */
export function compareBytes(a: string, b: string): number {
  // Equal UTF-16 prefixes give equal UTF-8 prefixes; the first differing code point
  // decides, and code point order is UTF-8 byte order.
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const cx = a.codePointAt(i)!;
    const cy = b.codePointAt(i)!;
    // A lone surrogate travels as U+FFFD.
    const px = isLoneSurrogate(a, i) ? 0xfffd : cx;
    const py = isLoneSurrogate(b, i) ? 0xfffd : cy;
    if (px !== py) return px < py ? -1 : 1;
    return compareBytes(a.slice(i + 1), b.slice(i + 1));
  }
  return a.length - b.length;
}

function isLoneSurrogate(s: string, i: number): boolean {
  const c = s.charCodeAt(i);
  if (c >= 0xd800 && c < 0xdc00) {
    const d = s.charCodeAt(i + 1);
    return !(d >= 0xdc00 && d < 0xe000);
  }
  if (c >= 0xdc00 && c < 0xe000) {
    const p = i > 0 ? s.charCodeAt(i - 1) : 0;
    return !(p >= 0xd800 && p < 0xdc00);
  }
  return false;
}

const HEX = "0123456789abcdef";

/** Quotes a string as Go's `encoding/json` does with HTML escaping on (its default). */
export function goJsonString(s: string): string {
  let out = '"';
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc: string | undefined;
    if (c < 0x20) {
      switch (c) {
        case 0x08: esc = "\\b"; break;
        case 0x0c: esc = "\\f"; break;
        case 0x0a: esc = "\\n"; break;
        case 0x0d: esc = "\\r"; break;
        case 0x09: esc = "\\t"; break;
        default: esc = "\\u00" + HEX[c >> 4] + HEX[c & 0xf];
      }
    } else if (c === 0x22) esc = '\\"';
    else if (c === 0x5c) esc = "\\\\";
    else if (c === 0x3c) esc = "\\u003c";
    else if (c === 0x3e) esc = "\\u003e";
    else if (c === 0x26) esc = "\\u0026";
    else if (c === 0x2028) esc = "\\u2028";
    else if (c === 0x2029) esc = "\\u2029";
    else if (c >= 0xd800 && c < 0xe000 && isLoneSurrogate(s, i)) esc = "\ufffd"; // travels as U+FFFD
    if (esc !== undefined) {
      out += s.slice(start, i) + esc;
      start = i + 1;
    }
  }
  return out + s.slice(start) + '"';
}

/** Encodes a decoded value as Go's `json.Marshal` writes it (object keys sorted by byte order). */
export function encodeCanonical(v: JsonValue): string {
  if (v === null) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (typeof v === "string") return goJsonString(v);
  if (v instanceof JsonNumber) return v.text;
  if (Array.isArray(v)) return "[" + v.map(encodeCanonical).join(",") + "]";
  const keys = [...v.members.keys()].sort(compareBytes);
  return "{" + keys.map((k) => goJsonString(k) + ":" + encodeCanonical(v.members.get(k)!)).join(",") + "}";
}

/**
 * The canonical form of a JSON text, as the content hash takes it: the first JSON value
 * re-encoded as Go's `encoding/json` writes it, or the text itself when it does not start
 * with a JSON value.
 */
export function canonicalJson(text: string): string {
  let v: JsonValue;
  try {
    v = parseJsonFirst(text);
  } catch (e) {
    if (e instanceof JsonSyntaxError) return text;
    throw e;
  }
  return encodeCanonical(v);
}

/** Converts a decoded value to a plain JavaScript value (numbers as JavaScript numbers). */
export function toPlain(v: JsonValue): unknown {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (v instanceof JsonNumber) return Number(v.text);
  if (Array.isArray(v)) return v.map(toPlain);
  const o: Record<string, unknown> = {};
  for (const [k, x] of v.members) {
    if (k === "__proto__") Object.defineProperty(o, k, { value: toPlain(x), enumerable: true, writable: true, configurable: true });
    else o[k] = toPlain(x);
  }
  return o;
}

/** The UTF-8 length of a string, in bytes. */
export function utf8Length(s: string): number {
  return encoder.encode(s).length;
}

/**
 * Encodes a plain JavaScript value as Go's `json.Marshal` writes the same value decoded
 * into `any`: object keys sorted by byte order, no whitespace, `<`, `>`, `&`, U+2028 and
 * U+2029 escaped; numbers as JavaScript writes them (the same text Go writes for a
 * float64). `undefined` members are left out, as JSON.stringify leaves them out.
 */
export function goJsonMarshal(v: unknown): string {
  if (v === null || v === undefined) return "null";
  switch (typeof v) {
    case "boolean":
      return v ? "true" : "false";
    case "number":
      if (!Number.isFinite(v)) throw new TypeError(`json: unsupported value: ${v}`);
      return Object.is(v, -0) ? "-0" : String(v);
    case "bigint":
      return v.toString();
    case "string":
      return goJsonString(v);
    case "object": {
      if (Array.isArray(v)) return "[" + v.map((x) => goJsonMarshal(x === undefined ? null : x)).join(",") + "]";
      const o = v as Record<string, unknown>;
      const keys = Object.keys(o).filter((k) => o[k] !== undefined).sort(compareBytes);
      return "{" + keys.map((k) => goJsonString(k) + ":" + goJsonMarshal(o[k])).join(",") + "}";
    }
    default:
      throw new TypeError(`json: unsupported type: ${typeof v}`);
  }
}
