/**
 * The conformance worker (test/conformance/README.md): serves the `conf` group with the
 * TypeScript SDK.
 *
 *     node dist/conformance/worker.js --orchestrator HOST:PORT --id WORKER_ID [--listen HOST:PORT] [--group ROLE]
 *
 * It registers, writes `ready <address>` to stdout once registered (and again after each
 * re-registration), serves until SIGTERM, drains and exits 0. Logs go to stderr.
 *
 * @module
 */
import { z } from "zod";
import { Worker, facade, replan, selectableFacade, terminate, tool, toolError, type Tool } from "../src/index.js";
import { goJsonMarshal } from "../src/canonical.js";
import { UsageError, flag, parseArgs } from "./args.js";

/** The charges of each account in this process; at most this many accounts are kept (the oldest go first). */
const MAX_ACCOUNTS = 10000;
const charges = new Map<string, number>();

function charge(account: string): number {
  const k = (charges.get(account) ?? 0) + 1;
  charges.delete(account);
  charges.set(account, k);
  while (charges.size > MAX_ACCOUNTS) charges.delete(charges.keys().next().value as string);
  return k;
}

/**
 * A number as Go's strconv.FormatFloat(x, 'g', -1, 64) writes it: the shortest digits
 * that read back as the same float64, in exponent form when the exponent is below -4 or
 * 6 and above (5, 0.5, -3.25, 1.2345675e+06, 1e-05).
 */
function formatNumber(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "+Inf" : "-Inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, e] = x.toExponential().split("e"); // the shortest digits: "-1.234567", "+6"
  const sign = mantissa.startsWith("-") ? "-" : "";
  const digits = mantissa.replace("-", "").replace(".", "");
  const exp = Number(e);
  if (exp < -4 || exp >= 6) {
    const frac = digits.length > 1 ? "." + digits.slice(1) : "";
    const abs = Math.abs(exp);
    return `${sign}${digits[0]}${frac}e${exp < 0 ? "-" : "+"}${abs < 10 ? "0" : ""}${abs}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const whole = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  const frac = digits.slice(exp + 1);
  return sign + whole + (frac ? "." + frac : "");
}

/** Waits `ms` milliseconds, or until `signal` aborts (then throws its reason). */
function wait(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

const ab = z.object({ a: z.number(), b: z.number() });
const none = z.object({});

/** The conformance group's tools and facades. */
export function conformanceTools(): (Tool | ReturnType<typeof facade>)[] {
  const echo = tool({ name: "echo", description: "Echo the text back", input: z.object({ text: z.string() }), idempotent: true }, ({ text }) => `echo: ${text}`);
  const add = tool({ name: "add", description: "Add two numbers", input: ab, idempotent: true }, ({ a, b }) => formatNumber(a + b));
  const mul = tool({ name: "mul", description: "Multiply two numbers", input: ab, idempotent: true }, ({ a, b }) => formatNumber(a * b));
  const whoami = tool({ name: "whoami", description: "Show the call's context", input: none }, (_input, ctx) =>
    goJsonMarshal({ ...ctx.context, tenant: ctx.tenant, idempotency_key: ctx.idempotencyKey }),
  );
  const count = tool({ name: "count", description: "Count calls in this cart", input: none }, (_input, ctx) => {
    const n = ctx.state.json<{ n?: number }>()?.n ?? 0;
    ctx.state.set({ n: n + 1 });
    return `count ${n + 1}`;
  });
  const open = selectableFacade({
    name: "open",
    description: "Open a counter",
    // As the Go worker's schema.Params makes it: described, other properties allowed.
    input: z.looseObject({ name: z.string().describe("name") }),
    children: [count],
    select: () => ({ tools: [count], state: { n: 0 } }),
  });
  const calc = facade("calc", "Calculator", [add, mul]);
  const note = tool({ name: "note", description: "Put a note on the blackboard", input: z.object({ text: z.string() }) }, ({ text }, ctx) => {
    ctx.blackboard.add({ typeName: "Note", json: goJsonMarshal({ text }), name: "last" });
    return "noted";
  });
  const readNote = tool({ name: "read_note", description: "Read the newest note", input: none, blackboardTypes: ["Note"] }, (_input, ctx) => {
    const text = ctx.blackboard.last("Note")?.value<{ text?: unknown }>()?.text;
    return typeof text === "string" ? text : toolError("no note");
  });
  const steps = tool({ name: "steps", description: "Report progress", input: z.object({ n: z.int() }), reportsProgress: true }, async ({ n }, ctx) => {
    for (let i = 1; i <= n; i++) {
      ctx.progress(`step ${i} of ${n}`);
      await new Promise((r) => setImmediate(r));
    }
    return `did ${n} steps`;
  });
  const slow = tool({ name: "slow", description: "Wait, then answer", input: z.object({ ms: z.int() }), idempotent: true }, async ({ ms }, ctx) => {
    await wait(Math.max(0, ms), ctx.signal);
    return `waited ${ms}`;
  });
  const big = tool({ name: "big", description: "Answer many bytes", input: z.object({ bytes: z.int() }) }, ({ bytes }) => "x".repeat(Math.max(0, bytes)));
  const chargeTool = tool(
    { name: "charge", description: "Charge an account once", input: z.object({ account: z.string(), cents: z.int() }), idempotent: true, ledger: true },
    ({ account, cents }) => `charged ${cents} to ${account} (${charge(account)} charges)`,
  );
  const chargesTool = tool({ name: "charges", description: "Count charges", input: z.object({ account: z.string() }) }, ({ account }) => String(charges.get(account) ?? 0));
  const fail = tool({ name: "fail", description: "Fail with a message", input: z.looseObject({ message: z.string().describe("message") }) },
    ({ message }) => toolError(message));
  const stop = tool({ name: "stop", description: "Stop the agent", input: z.object({ reason: z.string() }) }, ({ reason }) => terminate("agent", reason));
  const replanTool = tool({ name: "replan", description: "Ask to plan again", input: z.object({ reason: z.string() }) }, ({ reason }) => replan(reason));
  return [echo, whoami, note, readNote, steps, slow, big, chargeTool, chargesTool, fail, stop, replanTool, calc, open];
}

async function main(): Promise<number> {
  let args;
  try {
    args = parseArgs(process.argv.slice(2), ["orchestrator", "id", "listen", "group"]);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`${e.message}\nusage: worker --orchestrator HOST:PORT --id WORKER_ID [--listen HOST:PORT] [--group ROLE]\n`);
      return 2;
    }
    throw e;
  }
  const orchestrator = flag(args, "orchestrator", "");
  if (orchestrator === "" || args.positional.length > 0) {
    process.stderr.write("usage: worker --orchestrator HOST:PORT --id WORKER_ID [--listen HOST:PORT] [--group ROLE]\n");
    return 2;
  }
  const id = flag(args, "id", "");
  const w = new Worker({
    orchestrator,
    ...(id !== "" ? { id } : {}),
    listen: flag(args, "listen", "127.0.0.1:0"),
    version: "toolmesh-conformance-typescript",
    groups: [
      {
        role: flag(args, "group", "conf"),
        description: "Conformance tools",
        provider: "toolmesh-conformance",
        version: "1.0.0",
        tools: conformanceTools(),
      },
    ],
    onRegistered: (e) => process.stdout.write(`ready ${e.address}\n`),
  });
  await w.run();
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`worker: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  },
);
