/**
 * The conformance client (test/conformance/README.md): runs one command with the
 * TypeScript SDK's client and prints what happened.
 *
 *     node dist/conformance/client.js --orchestrator HOST:PORT [--token TOKEN] run [--tool T]... [--group G]... [--run-id ID] PROMPT
 *     node dist/conformance/client.js --orchestrator HOST:PORT [--token TOKEN] get RUN_ID
 *     node dist/conformance/client.js --orchestrator HOST:PORT [--token TOKEN] watch [--after N] RUN_ID
 *     node dist/conformance/client.js --orchestrator HOST:PORT [--token TOKEN] cancel RUN_ID
 *
 * `run` and `watch` print each event as one line of protobuf JSON; `get` and `cancel`
 * print their response so. An error prints `error <code> <reason> <message>` and exits 1.
 *
 * @module
 */
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Client, ToolmeshError } from "../src/index.js";
import { CancelRunResponseSchema, GetRunResponseSchema, RunResponseSchema } from "../src/gen/toolmesh/v1/orchestrator_pb.js";
import { UsageError, flag, parseArgs } from "./args.js";

const USAGE = `usage:
  client --orchestrator HOST:PORT [--token TOKEN] run [--tool T]... [--group G]... [--run-id ID] PROMPT
  client --orchestrator HOST:PORT [--token TOKEN] get RUN_ID
  client --orchestrator HOST:PORT [--token TOKEN] watch [--after N] RUN_ID
  client --orchestrator HOST:PORT [--token TOKEN] cancel RUN_ID
`;

/** Writes one line to stdout and waits until it is out (a pipe may be asynchronous). */
function println(line: string): Promise<void> {
  return new Promise((resolve) => {
    if (process.stdout.write(line + "\n")) resolve();
    else process.stdout.once("drain", resolve);
  });
}

function printJson<D extends DescMessage>(schema: D, m: MessageShape<D>): Promise<void> {
  return println(JSON.stringify(toJson(schema, m)));
}

async function main(): Promise<number> {
  let args;
  try {
    args = parseArgs(process.argv.slice(2), ["orchestrator", "token", "tool", "group", "run-id", "after"]);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`${e.message}\n${USAGE}`);
      return 2;
    }
    throw e;
  }
  const orchestrator = flag(args, "orchestrator", "");
  const [command, ...rest] = args.positional;
  if (orchestrator === "" || command === undefined || rest.length !== 1) {
    process.stderr.write(USAGE);
    return 2;
  }
  const token = flag(args, "token", "");
  const client = new Client(orchestrator, token !== "" ? { token } : {});
  const arg = rest[0]!;
  try {
    switch (command) {
      case "run":
        for await (const ev of client.run({
          prompt: arg,
          tools: args.flags.get("tool") ?? [],
          toolGroups: args.flags.get("group") ?? [],
          runId: flag(args, "run-id", ""),
        })) {
          await printJson(RunResponseSchema, ev);
        }
        break;
      case "watch": {
        const after = flag(args, "after", "0");
        if (!/^\d+$/.test(after)) {
          process.stderr.write(`--after must be a whole number ≥ 0, got ${after}\n`);
          return 2;
        }
        for await (const ev of client.watchRun(arg, BigInt(after))) await printJson(RunResponseSchema, ev);
        break;
      }
      case "get":
        await printJson(GetRunResponseSchema, await client.getRun(arg));
        break;
      case "cancel":
        await printJson(CancelRunResponseSchema, await client.cancelRun(arg));
        break;
      default:
        process.stderr.write(`unknown command ${JSON.stringify(command)}\n${USAGE}`);
        return 2;
    }
    return 0;
  } catch (e) {
    const err = ToolmeshError.from(e);
    // A status without toolmesh's details has no reason: UNSPECIFIED, as the other SDKs print.
    await println(`error ${err.codeName} ${err.reason || "UNSPECIFIED"} ${err.message}`);
    return 1;
  } finally {
    client.close();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`client: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  },
);
