/**
 * The worker's logger: anything with these four methods (console, pino, winston …).
 *
 * @module
 */

/** Fields of a log line. */
export type LogFields = Record<string, unknown>;

/** A logger. */
export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

type Level = "debug" | "info" | "warn" | "error";
const ORDER: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * A logger that writes one line per entry to stderr, `time level msg key=value …`
 * (values JSON-quoted when they need it), from `level` up.
 */
export function stderrLogger(level: Level = "info", base: LogFields = {}): Logger {
  const write = (l: Level, msg: string, fields?: LogFields) => {
    if (ORDER[l] < ORDER[level]) return;
    let line = `${new Date().toISOString()} ${l.toUpperCase()} ${msg}`;
    for (const [k, v] of Object.entries({ ...base, ...fields })) {
      if (v === undefined) continue;
      const s = v instanceof Error ? v.message : typeof v === "string" ? v : JSON.stringify(v);
      line += ` ${k}=${/^[^\s"=]+$/.test(s ?? "") ? s : JSON.stringify(s)}`;
    }
    process.stderr.write(line + "\n");
  };
  return {
    debug: (m, f) => write("debug", m, f),
    info: (m, f) => write("info", m, f),
    warn: (m, f) => write("warn", m, f),
    error: (m, f) => write("error", m, f),
  };
}

/** A logger that drops everything. */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
