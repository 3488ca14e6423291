/**
 * Tools from functions: a definition (name, description, a zod input schema and how the
 * orchestrator treats the tool) and an async handler, with the results, errors and
 * control-flow signals a handler returns, and the context it gets.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { z } from "zod";
import { type BlackboardAdd, type BlackboardEntry, type CallBlackboard, entryFrom } from "./blackboard.js";
import { ToolDefinitionSchema, OncePerLoopSchema, type ToolDefinition } from "./gen/toolmesh/v1/tool_pb.js";
import { contentHash } from "./hash.js";
import {
  MAX_BLACKBOARD_TYPES,
  MAX_DESCRIPTION_BYTES,
  MAX_METADATA_ENTRIES,
  MAX_METADATA_KEY_BYTES,
  MAX_METADATA_VALUE_BYTES,
  MAX_ONCE_ADVICE_BYTES,
  MAX_SCHEMA_BYTES,
  MAX_TYPE_NAME_BYTES,
  TOOL_NAME_RE,
  byteLength,
  checkText,
} from "./limits.js";
import { type InputSchema, inputSchemaJson, parseArguments, strictInput } from "./schema.js";
import type { ToolState } from "./state.js";

/** How a tool error is classified (`ToolErrorCode` without its prefix). */
export type ToolErrorCodeName = "FAILED" | "INVALID_ARGUMENTS" | "UNKNOWN_TOOL" | "TIMEOUT" | "PANIC" | "UNAVAILABLE";

/** A structured output: a JSON value (`json` as text, or `value`) or a blob (`data`, `mediaType`). */
export interface ArtifactSpec {
  /** The artifact's type name, so that type filters work across the wire. */
  typeName: string;
  /** The value as JSON text. */
  json?: string;
  /** The value, encoded as JSON. */
  value?: unknown;
  /** A blob's bytes. */
  data?: Uint8Array;
  /** A blob's media type, such as "image/png". */
  mediaType?: string;
}

/** A text result for the model. */
export interface TextResult {
  text: string;
}

/** Text for the model plus an artifact for sinks, the blackboard and the client. */
export interface ArtifactResult {
  content: string;
  artifact: ArtifactSpec;
}

/** A failure the model reads as `Error: <message>`. */
export interface ErrorResult {
  error: string;
  /** Default "FAILED". */
  code?: ToolErrorCodeName;
}

/** What a handler returns: text (a string, or `{text}`), an artifact, an error, or a control-flow signal. */
export type ToolResult = string | TextResult | ArtifactResult | ErrorResult | ToolSignal;

/** A control-flow signal: the tool steers the run instead of answering the model. Return it, or throw it. */
export abstract class ToolSignal extends Error {}

/** Asks the agent to plan again: the loop stops, `updates` join the blackboard, the run ends REPLAN_REQUESTED. */
export class ReplanSignal extends ToolSignal {
  override name = "ReplanSignal";
  constructor(
    readonly reason: string,
    readonly updates: readonly BlackboardAdd[] = [],
  ) {
    super(reason === "" ? "replan requested" : `replan requested: ${reason}`);
  }
}

/** What a terminate signal ends: the whole agent, or the current action (its tool loop). */
export type TerminateScope = "agent" | "action";

/** Asks to stop the agent (scope "agent": the run ends TERMINATED) or the current action. */
export class TerminateSignal extends ToolSignal {
  override name = "TerminateSignal";
  constructor(
    readonly scope: TerminateScope,
    readonly reason: string,
  ) {
    super(`terminate ${scope}${reason ? ": " + reason : ""}`);
  }
}

/** The replan signal: return (or throw) `replan("the plan assumed stock")`. */
export function replan(reason: string, updates: readonly BlackboardAdd[] = []): ReplanSignal {
  return new ReplanSignal(reason, updates);
}

/** The terminate signal: return (or throw) `terminate("agent", "done")`. */
export function terminate(scope: TerminateScope, reason: string): TerminateSignal {
  return new TerminateSignal(scope, reason);
}

/** An error result: `return toolError("no such customer")`. */
export function toolError(message: string, code: ToolErrorCodeName = "FAILED"): ErrorResult {
  return { error: message, code };
}

/** What a tool knows of the call it runs. */
export interface ToolContext {
  /** The tool as the model called it. */
  readonly tool: string;
  /** The run the call belongs to (with tenants, `<tenant>/<run id>`); "" for a call from outside a run. */
  readonly runId: string;
  /** The tool loop the call belongs to. */
  readonly loopId: string;
  /** The tool call's id, as the model gave it. */
  readonly callId: string;
  /** `<run_id>/<loop_id>/<call_id>`: the same on every attempt of one logical call. */
  readonly idempotencyKey: string;
  /**
   * The tenant the orchestrator verified for the run ("" without tenancy). Trust it only
   * from an orchestrator you authenticated: a plaintext worker takes it from whoever
   * reaches its port.
   */
  readonly tenant: string;
  /** The call's ToolCallContext entries (the client's, as the group's converter let them through). */
  readonly context: Readonly<Record<string, string>>;
  /** Aborted when the call is cancelled or its deadline passes: stop early. */
  readonly signal: AbortSignal;
  /** The call's deadline, when it has one. */
  readonly deadline: Date | undefined;
  /** The state the call is bound to. */
  readonly state: ToolState;
  /** The run's blackboard as the call sees it. */
  readonly blackboard: CallBlackboard;
  /** Whether progress reports reach someone (the tool was called with InvokeStream). */
  readonly reportsProgress: boolean;
  /** Reports progress ("step 2 of 5"): at most 1 KiB, sent as the tool makes it. No-op when nobody listens. */
  progress(status: string): void;
  /** The newest blackboard object of a type, parsed; a shortcut for `blackboard.last(type)`. */
  blackboardObject(typeName: string): BlackboardEntry | undefined;
}

/** How the orchestrator treats a tool, and what it declares. */
export interface ToolOptions<S extends InputSchema> {
  /** The name the model calls it by: 1 to 64 of [A-Za-z0-9_-], unique across the mesh. */
  name: string;
  /** What the tool does, for the model: at most 8 KiB. */
  description: string;
  /** The arguments: a zod object schema; registered as its JSON Schema, checked again on every call. */
  input: S;
  /** The tool may run more than once for one logical call (the router may re-send a call whose outcome is unknown). */
  idempotent?: boolean;
  /** Per-call deadline in milliseconds; 0 or absent: the orchestrator's default. */
  timeoutMs?: number;
  /** The tool's result ends the tool loop and becomes the final answer. */
  returnDirect?: boolean;
  /** Application metadata, never shown to the model: at most 64 entries. */
  metadata?: Record<string, string>;
  /** The tool reports progress (`ctx.progress`): the orchestrator calls it with InvokeStream. */
  reportsProgress?: boolean;
  /** Blackboard types the tool reads: every call carries the newest object of each (at most 16). */
  blackboardTypes?: readonly string[];
  /** Every call waits for a person's approval before it is sent. */
  requiresApproval?: boolean;
  /** The domain type this tool is a method of: each call carries the bound object as its state. */
  receiverType?: string;
  /** The tool runs at most once per tool loop; the advice tells the model what to do instead (at most 4 KiB). */
  oncePerLoop?: { advice?: string };
  /**
   * Keep each call's answer in the worker's idempotency ledger under its idempotency key,
   * and answer a call sent again with it instead of running the tool twice.
   */
  ledger?: boolean;
}

/** A handler: the validated input and the call's context in, a result out. */
export type ToolHandler<S extends InputSchema> = (input: z.output<S>, ctx: ToolContext) => ToolResult | Promise<ToolResult>;

/** A tool definition that breaks the contract's rules. */
export class ToolDefinitionError extends Error {
  override name = "ToolDefinitionError";
}

/** The definition of a tool as it is registered, and what the content hash covers. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly inputSchemaJson: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly returnDirect: boolean;
  readonly idempotent: boolean;
  readonly timeoutMs: number;
  readonly blackboardTypes: readonly string[];
  readonly reportsProgress: boolean;
  readonly requiresApproval: boolean;
  readonly receiverType: string;
  readonly oncePerLoopAdvice: string | undefined;
}

/** The ToolDefinition message of a spec. */
export function definitionProto(s: ToolSpec): ToolDefinition {
  const d = create(ToolDefinitionSchema, {
    name: s.name,
    description: s.description,
    inputSchemaJson: s.inputSchemaJson,
    metadata: { ...s.metadata },
    returnDirect: s.returnDirect,
    idempotent: s.idempotent,
    blackboardTypes: [...s.blackboardTypes],
    reportsProgress: s.reportsProgress,
    receiverType: s.receiverType,
    requiresApproval: s.requiresApproval,
  });
  if (s.timeoutMs > 0) d.timeout = durationFromMs(s.timeoutMs);
  if (s.oncePerLoopAdvice !== undefined) d.oncePerLoop = create(OncePerLoopSchema, { advice: s.oncePerLoopAdvice });
  return d;
}

/** Checks the parts of a definition every tool and facade shares. */
export function checkNameAndDescription(kind: string, name: string, description: string): void {
  if (!TOOL_NAME_RE.test(name)) throw new ToolDefinitionError(`${kind} name ${JSON.stringify(name)} must be 1 to 64 of [A-Za-z0-9_-]`);
  const p = checkText(description, MAX_DESCRIPTION_BYTES);
  if (p) throw new ToolDefinitionError(`${kind} '${name}': description ${p}`);
}

/** A tool a worker serves: its definition, content hash, input schema and handler. */
export class Tool<S extends InputSchema = InputSchema> implements ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly inputSchemaJson: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly returnDirect: boolean;
  readonly idempotent: boolean;
  readonly timeoutMs: number;
  readonly blackboardTypes: readonly string[];
  readonly reportsProgress: boolean;
  readonly requiresApproval: boolean;
  readonly receiverType: string;
  readonly oncePerLoopAdvice: string | undefined;
  /** Whether the worker's idempotency ledger keeps this tool's answers. */
  readonly ledger: boolean;
  /** The hex SHA-256 content hash the orchestrator computes for this definition. */
  readonly contentHash: string;
  /** The schema arguments are validated with (strict unless the schema says otherwise). */
  readonly input: S;
  readonly #handler: ToolHandler<S>;

  constructor(opts: ToolOptions<S>, handler: ToolHandler<S>) {
    checkNameAndDescription("tool", opts.name, opts.description);
    this.name = opts.name;
    this.description = opts.description;
    this.input = strictInput(opts.input);
    try {
      this.inputSchemaJson = inputSchemaJson(this.input);
    } catch (e) {
      throw new ToolDefinitionError(`tool '${opts.name}': input schema: ${(e as Error).message}`);
    }
    if (byteLength(this.inputSchemaJson) > MAX_SCHEMA_BYTES) {
      throw new ToolDefinitionError(`tool '${opts.name}': input schema is ${byteLength(this.inputSchemaJson)} bytes; the limit is ${MAX_SCHEMA_BYTES}`);
    }
    const meta = { ...(opts.metadata ?? {}) };
    const keys = Object.keys(meta);
    if (keys.length > MAX_METADATA_ENTRIES) throw new ToolDefinitionError(`tool '${opts.name}': ${keys.length} metadata entries; the limit is ${MAX_METADATA_ENTRIES}`);
    for (const k of keys) {
      const kp = checkText(k, MAX_METADATA_KEY_BYTES) || (k === "" ? "is empty" : "");
      if (kp) throw new ToolDefinitionError(`tool '${opts.name}': metadata key ${JSON.stringify(k)} ${kp}`);
      const vp = checkText(meta[k]!, MAX_METADATA_VALUE_BYTES);
      if (vp) throw new ToolDefinitionError(`tool '${opts.name}': metadata value of ${JSON.stringify(k)} ${vp}`);
    }
    this.metadata = Object.freeze(meta);
    this.returnDirect = !!opts.returnDirect;
    this.idempotent = !!opts.idempotent;
    const timeout = opts.timeoutMs ?? 0;
    if (!Number.isInteger(timeout) || timeout < 0) throw new ToolDefinitionError(`tool '${opts.name}': timeoutMs must be a whole number ≥ 0, got ${timeout}`);
    this.timeoutMs = timeout;
    const types = [...(opts.blackboardTypes ?? [])];
    if (types.length > MAX_BLACKBOARD_TYPES) throw new ToolDefinitionError(`tool '${opts.name}': ${types.length} blackboard types; the limit is ${MAX_BLACKBOARD_TYPES}`);
    for (const t of types) {
      const p = checkText(t, MAX_TYPE_NAME_BYTES) || (t.trim() === "" ? "is blank" : "");
      if (p) throw new ToolDefinitionError(`tool '${opts.name}': blackboard type ${JSON.stringify(t)} ${p}`);
    }
    this.blackboardTypes = Object.freeze(types);
    this.reportsProgress = !!opts.reportsProgress;
    this.requiresApproval = !!opts.requiresApproval;
    this.receiverType = opts.receiverType ?? "";
    const rp = checkText(this.receiverType, MAX_TYPE_NAME_BYTES);
    if (rp) throw new ToolDefinitionError(`tool '${opts.name}': receiverType ${rp}`);
    this.oncePerLoopAdvice = opts.oncePerLoop ? (opts.oncePerLoop.advice ?? "") : undefined;
    if (this.oncePerLoopAdvice !== undefined) {
      const ap = checkText(this.oncePerLoopAdvice, MAX_ONCE_ADVICE_BYTES);
      if (ap) throw new ToolDefinitionError(`tool '${opts.name}': oncePerLoop advice ${ap}`);
    }
    this.ledger = !!opts.ledger;
    this.#handler = handler;
    this.contentHash = contentHash(this);
  }

  /** The definition as the registration carries it. */
  definition(): ToolDefinition {
    return definitionProto(this);
  }

  /** Validates a call's arguments (JSON text) and returns the input; throws an InvalidArgumentsError naming the property. */
  parse(argumentsJson: string): z.output<S> {
    return parseArguments(this.input, argumentsJson);
  }

  /** Runs the handler on validated input. */
  run(input: z.output<S>, ctx: ToolContext): ToolResult | Promise<ToolResult> {
    return this.#handler(input, ctx);
  }
}

/**
 * Makes a tool from a function:
 *
 * ```ts
 * const add = tool(
 *   { name: "add", description: "Add two numbers", input: z.object({ a: z.number(), b: z.number() }), idempotent: true },
 *   async ({ a, b }) => String(a + b),
 * );
 * ```
 *
 * The input schema registers as JSON Schema (an object, properties in declaration
 * order, `required` = the properties that are not optional, `"additionalProperties":
 * false`); every call's arguments are validated against it on the worker too, and a
 * call that does not fit is answered with an `INVALID_ARGUMENTS` error naming the
 * property. Throws a {@link ToolDefinitionError} for a definition the orchestrator
 * would refuse.
 */
export function tool<S extends InputSchema>(opts: ToolOptions<S>, handler: ToolHandler<S>): Tool<S> {
  return new Tool(opts, handler);
}

/** Checks the objects of a replan request; "" when they can be sent, else what is wrong. */
export function checkReplanUpdates(updates: readonly BlackboardAdd[], maxCount: number, maxBytes: number): string {
  if (updates.length > maxCount) return `its request adds ${updates.length} objects to the blackboard, over the ${maxCount} a call may add`;
  let size = 0;
  for (let i = 0; i < updates.length; i++) {
    try {
      size += entryFrom(updates[i]!).size;
    } catch (e) {
      return `blackboard object ${i + 1} of its request was refused: ${(e as Error).message}`;
    }
  }
  if (size > maxBytes) return `the objects of its request are ${size} bytes (JSON and blobs' data), over the ${maxBytes} a call may add`;
  return "";
}
