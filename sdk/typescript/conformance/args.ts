/**
 * A small command-line parser for the conformance programs: `--flag value` and
 * `--flag=value`, repeatable flags, and positional arguments.
 *
 * @module
 */

/** Parsed arguments: the flags' values in order, and the positional arguments. */
export interface Args {
  flags: Map<string, string[]>;
  positional: string[];
}

/** A command line that does not parse. */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * Parses `argv` with the flags in `known` (each takes a value). Flags may come before
 * or after positional arguments; `--` ends the flags.
 */
export function parseArgs(argv: readonly string[], known: readonly string[]): Args {
  const flags = new Map<string, string[]>();
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--") {
      positional.push(...argv.slice(i + 1));
      break;
    }
    if (!a.startsWith("-") || a === "-") {
      positional.push(a);
      continue;
    }
    const body = a.replace(/^--?/, "");
    const eq = body.indexOf("=");
    const name = eq >= 0 ? body.slice(0, eq) : body;
    if (!known.includes(name)) throw new UsageError(`unknown flag -${a.startsWith("--") ? "-" : ""}${name}`);
    let value: string;
    if (eq >= 0) value = body.slice(eq + 1);
    else {
      if (i + 1 >= argv.length) throw new UsageError(`flag --${name} needs a value`);
      value = argv[++i]!;
    }
    const list = flags.get(name) ?? [];
    list.push(value);
    flags.set(name, list);
  }
  return { flags, positional };
}

/** The last value of a flag, or `def`. */
export function flag(args: Args, name: string, def: string): string {
  const v = args.flags.get(name);
  return v && v.length > 0 ? v[v.length - 1]! : def;
}
