/**
 * Go's string forms that the contract's content hash is made of: `strconv.Quote` and
 * `time.Duration.String`, reproduced exactly.
 *
 * @module
 */
import { GO_PRINTABLE_RANGES } from "./goprint.js";

/** Whether Go's `strconv.IsPrint` holds for the code point `cp` (binary search of Go's table). */
export function goIsPrint(cp: number): boolean {
  let lo = 0;
  let hi = GO_PRINTABLE_RANGES.length / 2 - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const first = GO_PRINTABLE_RANGES[2 * mid]!;
    const last = GO_PRINTABLE_RANGES[2 * mid + 1]!;
    if (cp < first) hi = mid - 1;
    else if (cp > last) lo = mid + 1;
    else return true;
  }
  return false;
}

/**
 * The string as it travels in a protobuf message: valid UTF-8, each lone surrogate
 * replaced by U+FFFD (as TextEncoder and the protobuf runtime encode it).
 */
export function wellFormed(s: string): string {
  // String.prototype.toWellFormed is Node 20's too.
  return (s as string & { toWellFormed(): string }).toWellFormed();
}

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, "0");
}

/**
 * Quotes `s` as Go's `strconv.Quote` does: double quotes; `\"` and `\\`; `\a`, `\b`,
 * `\f`, `\n`, `\r`, `\t`, `\v`; `\xHH` for other control characters and DEL; `\uHHHH` or
 * `\UHHHHHHHH` for characters Go does not count as printable; every printable character
 * as is. A lone surrogate is quoted as U+FFFD, the character it travels as.
 */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of wellFormed(s)) {
    const cp = ch.codePointAt(0)!;
    if (cp === 0x22 || cp === 0x5c) {
      out += "\\" + ch;
      continue;
    }
    if (cp < 0x80 ? cp >= 0x20 && cp < 0x7f : goIsPrint(cp)) {
      out += ch;
      continue;
    }
    switch (cp) {
      case 0x07: out += "\\a"; break;
      case 0x08: out += "\\b"; break;
      case 0x0c: out += "\\f"; break;
      case 0x0a: out += "\\n"; break;
      case 0x0d: out += "\\r"; break;
      case 0x09: out += "\\t"; break;
      case 0x0b: out += "\\v"; break;
      default:
        if (cp < 0x20 || cp === 0x7f) out += "\\x" + hex(cp, 2);
        else if (cp < 0x10000) out += "\\u" + hex(cp, 4);
        else out += "\\U" + hex(cp, 8);
    }
  }
  return out + '"';
}

const NS_PER_US = 1000n;
const NS_PER_MS = 1000000n;
const NS_PER_S = 1000000000n;

/** Formats `v` (< 10^prec... of a fraction) as Go's fmtFrac: ".ddd" without trailing zeros. */
function fmtFrac(v: bigint, prec: number): [string, bigint] {
  let digits = "";
  let print = false;
  for (let i = 0; i < prec; i++) {
    const digit = v % 10n;
    print = print || digit !== 0n;
    if (print) digits = digit.toString() + digits;
    v /= 10n;
  }
  return [print ? "." + digits : "", v];
}

/**
 * Formats a duration of `nanos` nanoseconds as Go's `time.Duration.String`: "0s",
 * "1.5s", "1m30s", "2h0m0s", "250ms", "1µs". `nanos` is a whole number of nanoseconds
 * within Go's int64 range.
 */
export function goDuration(nanos: bigint | number): string {
  let d = typeof nanos === "bigint" ? nanos : BigInt(Math.trunc(nanos));
  if (d === 0n) return "0s";
  const neg = d < 0n;
  let u = neg ? -d : d;
  let out: string;
  if (u < NS_PER_S) {
    // Sub-second: the largest unit that keeps a whole part.
    let prec: number;
    let unit: string;
    if (u < NS_PER_US) return (neg ? "-" : "") + u.toString() + "ns";
    if (u < NS_PER_MS) {
      prec = 3;
      unit = "µs";
    } else {
      prec = 6;
      unit = "ms";
    }
    const [frac, whole] = fmtFrac(u, prec);
    out = whole.toString() + frac + unit;
  } else {
    const [frac, secsAll] = fmtFrac(u, 9);
    u = secsAll;
    out = (u % 60n).toString() + frac + "s";
    u /= 60n;
    if (u > 0n) {
      out = (u % 60n).toString() + "m" + out;
      u /= 60n;
      if (u > 0n) out = u.toString() + "h" + out;
    }
  }
  return (neg ? "-" : "") + out;
}
