/**
 * The worker: a process that serves tool groups (ToolWorkerService and grpc.health.v1)
 * and keeps itself registered with an orchestrator, as `pkg/worker` does for Go.
 *
 * ```ts
 * const w = new Worker({
 *   orchestrator: "127.0.0.1:7070",
 *   groups: [{ role: "math", description: "Math tools", tools: [add, mul] }],
 * });
 * await w.run(); // serves until SIGTERM or SIGINT (or w.stop()), then drains
 * ```
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { BlackboardEntry, CallBlackboard, entryFrom } from "./blackboard.js";
import { Catalog, type Group } from "./catalog.js";
import { ContextCodecError, DEFAULT_CONTEXT_MAX_BYTES, decodeContext } from "./ctxcodec.js";
import { codeName, decodeStatusDetails, statusError } from "./errors.js";
import { Facade, unfoldMessage } from "./facade.js";
import {
  ArtifactResultSchema,
  InvokeRequestSchema,
  InvokeResponseSchema,
  InvokeStreamResponseSchema,
  ProgressReportSchema,
  SelectionSchema,
  ToolWorkerService,
  type InvokeRequest,
  type InvokeResponse,
  type InvokeStreamRequest,
  type InvokeStreamResponse,
  type Selection,
} from "./gen/toolmesh/v1/worker_pb.js";
import {
  ConnectRequestSchema,
  ConnectResponseSchema,
  DrainingSchema,
  HeartbeatSchema,
  ToolRegistryService,
  RegistrationSchema,
  type ConnectRequest,
  type ConnectResponse,
  type Registration,
  type Rejection,
} from "./gen/toolmesh/v1/registry_pb.js";
import {
  ArtifactSchema,
  ControlSignalSchema,
  ReplanSchema,
  TerminateSchema,
  TerminateScope as TerminateScopePb,
  ToolErrorCode,
  ToolErrorSchema,
  type ControlSignal,
} from "./gen/toolmesh/v1/tool_pb.js";
import { HealthService, ServingStatus } from "./health.js";
import { KeyLocks, DEFAULT_LEDGER_STORE_TIMEOUT_MS, DEFAULT_LEDGER_TTL_MS, type Ledger, MemoryLedger, settleBy } from "./ledger.js";
import {
  DEFAULT_MAX_RESULT_BYTES,
  MAX_ADDRESS_BYTES,
  MAX_BLACKBOARD_UPDATES,
  MAX_BLACKBOARD_UPDATE_BYTES,
  MAX_MESSAGE_BYTES,
  MAX_PROGRESS_BYTES,
  MAX_VERSION_BYTES,
  TOOL_NAME_RE,
  WORKER_ID_RE,
  checkText,
  cutUtf8,
  truncateUtf8,
} from "./limits.js";
import { type Logger, stderrLogger } from "./log.js";
import { methodPath, serializer, deserializer, serviceDefinition } from "./rpc.js";
import { InvalidArgumentsError } from "./schema.js";
import { ToolState } from "./state.js";
import {
  ReplanSignal,
  TerminateSignal,
  Tool,
  ToolSignal,
  checkReplanUpdates,
  type ToolContext,
  type ToolErrorCodeName,
  type ToolResult,
} from "./tool.js";

/** The service name whose health the orchestrator probes before it accepts a registration. */
export const WORKER_SERVICE_NAME = ToolWorkerService.typeName;

/** Options of a {@link Worker}. Only `orchestrator` and `groups` are required. */
export interface WorkerOptions {
  /**
   * The orchestrator's ToolRegistryService address, `host:port`, or several replicas'
   * addresses separated by commas: the worker registers with each.
   */
  orchestrator: string;
  /** The tool groups the worker serves (1 to 64). */
  groups: readonly Group[];
  /** The worker's id, stable across reconnects: 1 to 253 of [A-Za-z0-9_.:-]. Default: the host name and a random suffix. */
  id?: string;
  /** The address to serve on. Default "127.0.0.1:0". Without `plaintext`, a loopback address. */
  listen?: string;
  /**
   * Serve on an address that is not loopback, in plaintext: for local development only,
   * since anything that reaches the port may call the tools with any context.
   */
  plaintext?: boolean;
  /** The address the orchestrator dials (host:port). Default: the listen host and the bound port. */
  advertise?: string;
  /** Calls run at once; further calls wait. 0 (default): unlimited. */
  capacity?: number;
  /** The worker program's version, reported to the orchestrator (printable, at most 128 bytes). */
  version?: string;
  /** How long a drain waits for calls in flight, in ms. Default 20,000. */
  drainTimeoutMs?: number;
  /** The encoded ToolCallContext a call may carry. Default 8,192 bytes (the orchestrator's default). */
  contextMaxBytes?: number;
  /**
   * The encoded answer of one call (result, artifact, state, blackboard additions): a
   * tool that returns more gets an error result saying so. Default 4 MiB less 64 KiB.
   */
  maxResultBytes?: number;
  /** Bounds of the jittered exponential delay between registration attempts, in ms. Defaults 100 and 5,000. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /**
   * The idempotency ledger of the tools registered with `ledger: true`. Default: a
   * {@link MemoryLedger} of 10,000 answers in this process.
   */
  ledger?: Ledger;
  /** How long the ledger keeps an answer, in ms. Default 24 hours. */
  ledgerTtlMs?: number;
  /**
   * How long the worker waits for the ledger to keep a call's answer, in ms (default
   * 10,000): the call is answered, and its idempotency key released, by then at the
   * latest, the answer kept or not (a call sent again may then run again).
   */
  ledgerStoreTimeoutMs?: number;
  /** Where the worker logs. Default: one line per entry on stderr, from "info". */
  logger?: Logger;
  /** Drain and stop on SIGTERM and SIGINT while {@link Worker.run} runs. Default true. */
  handleSignals?: boolean;
  /** Called each time an orchestrator accepts the worker's registration. */
  onRegistered?: (e: RegisteredEvent) => void;
  /** Called each time an orchestrator refuses the worker's registration. */
  onRejected?: (e: RejectedEvent) => void;
}

/** An orchestrator accepted the registration. */
export interface RegisteredEvent {
  /** The orchestrator's address. */
  orchestrator: string;
  /** The lease's id. */
  leaseId: string;
  /** The address the worker advertised. */
  address: string;
}

/** An orchestrator refused the registration. */
export interface RejectedEvent {
  orchestrator: string;
  /** The ack's rejections, one per problem. */
  rejections: readonly Rejection[];
  /** The reason the stream ended with ("REGISTRATION_INVALID", "WORKER_ID_IN_USE" …). */
  reason: string;
  message: string;
}

/** The worker's run was already started: a Worker serves once. */
export class WorkerStateError extends Error {
  override name = "WorkerStateError";
}

/** The status error of a call the worker did not run. */
type StatusErr = ReturnType<typeof statusError>;

function isStatusErr(e: unknown): e is StatusErr {
  return e instanceof Error && typeof (e as Partial<StatusErr>).code === "number" && (e as Partial<StatusErr>).metadata instanceof grpc.Metadata;
}

function drainingStatus(): StatusErr {
  return statusError({ reason: "WORKER_DRAINING", message: "worker is draining" });
}

/** Whether a listen address is on a loopback interface ("localhost", 127.0.0.0/8, ::1). */
export function isLoopback(listen: string): boolean {
  const host = splitHostPort(listen)?.host;
  if (host === undefined) return false;
  return host === "localhost" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) || host === "::1";
}

function splitHostPort(addr: string): { host: string; port: string } | undefined {
  const m = /^\[([^\]]*)\]:(\d+)$/.exec(addr) ?? /^([^:]*):(\d+)$/.exec(addr);
  return m ? { host: m[1]!, port: m[2]! } : undefined;
}

function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The delay before registration attempt `failures`: exponential from `lo` to `hi`, half fixed, half random. */
export function backoffMs(failures: number, lo: number, hi: number): number {
  let d = lo;
  for (let i = 0; i < failures && d < hi; i++) {
    if (d > hi / 2) {
      d = hi;
      break;
    }
    d *= 2;
  }
  d = Math.min(d, hi);
  const half = d / 2;
  return half + Math.random() * half;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

const ERROR_CODES: Record<ToolErrorCodeName, ToolErrorCode> = {
  FAILED: ToolErrorCode.FAILED,
  INVALID_ARGUMENTS: ToolErrorCode.INVALID_ARGUMENTS,
  UNKNOWN_TOOL: ToolErrorCode.UNKNOWN_TOOL,
  TIMEOUT: ToolErrorCode.TIMEOUT,
  PANIC: ToolErrorCode.PANIC,
  UNAVAILABLE: ToolErrorCode.UNAVAILABLE,
};

/** An InvokeResponse carrying an error result. */
export function errorResponse(code: ToolErrorCodeName, message: string): InvokeResponse {
  return create(InvokeResponseSchema, { outcome: { case: "error", value: create(ToolErrorSchema, { message, code: ERROR_CODES[code] }) } });
}

/**
 * The InvokeResponse of a handler's result (text, artifact or error). Throws a TypeError
 * for a value that is none of them.
 */
export function resultToResponse(r: Exclude<ToolResult, ToolSignal>): InvokeResponse {
  if (typeof r === "string") return create(InvokeResponseSchema, { outcome: { case: "text", value: r } });
  if (r === null || typeof r !== "object") throw new TypeError(`a tool result is a string, {text}, {content, artifact} or {error}, not ${r === null ? "null" : typeof r}`);
  if ("error" in r && typeof r.error === "string") {
    const code = r.code !== undefined && r.code in ERROR_CODES ? r.code : "FAILED";
    return errorResponse(code, r.error);
  }
  if ("artifact" in r && r.artifact && typeof r.artifact === "object") {
    const a = r.artifact;
    const art = create(ArtifactSchema, { typeName: a.typeName ?? "", mediaType: a.mediaType ?? "" });
    if (a.data !== undefined) art.payload = { case: "data", value: new Uint8Array(a.data) };
    else if (a.json !== undefined) art.payload = { case: "json", value: a.json };
    else if (a.value !== undefined) {
      const json = JSON.stringify(a.value);
      if (json === undefined) throw new TypeError(`artifact of type ${JSON.stringify(a.typeName)}: its value cannot be encoded as JSON`);
      art.payload = { case: "json", value: json };
    }
    const content = "content" in r && typeof r.content === "string" ? r.content : "";
    return create(InvokeResponseSchema, { outcome: { case: "artifact", value: create(ArtifactResultSchema, { content, artifact: art }) } });
  }
  if ("text" in r && typeof r.text === "string") return create(InvokeResponseSchema, { outcome: { case: "text", value: r.text } });
  throw new TypeError("a tool result is a string, {text}, {content, artifact} or {error}");
}

function signalToProto(s: ToolSignal): ControlSignal | undefined {
  if (s instanceof ReplanSignal) {
    return create(ControlSignalSchema, {
      signal: { case: "replan", value: create(ReplanSchema, { reason: s.reason, blackboardUpdates: s.updates.map((u) => entryFrom(u).toProto()) }) },
    });
  }
  if (s instanceof TerminateSignal) {
    const scope = s.scope === "action" ? TerminateScopePb.ACTION : TerminateScopePb.AGENT;
    return create(ControlSignalSchema, { signal: { case: "terminate", value: create(TerminateSchema, { scope, reason: s.reason }) } });
  }
  return undefined;
}

/** A thrown value as an error result: an Error's message (FAILED), anything else a panic (PANIC). */
function thrownResult(name: string, e: unknown): InvokeResponse {
  if (e instanceof Error) return errorResponse("FAILED", e.message || "Tool invocation failed");
  return errorResponse("PANIC", `tool '${name}' panicked: ${String(e)}`);
}

/** The context of one call, as a tool sees it. */
class CallContext implements ToolContext {
  constructor(
    readonly tool: string,
    readonly runId: string,
    readonly loopId: string,
    readonly callId: string,
    readonly idempotencyKey: string,
    readonly tenant: string,
    readonly context: Readonly<Record<string, string>>,
    readonly signal: AbortSignal,
    readonly deadline: Date | undefined,
    readonly state: ToolState,
    readonly blackboard: CallBlackboard,
    readonly report: ((status: string) => void) | undefined,
  ) {}

  get reportsProgress(): boolean {
    return this.report !== undefined;
  }

  progress(status: string): void {
    if (this.report && status !== "") this.report(cutUtf8(status, MAX_PROGRESS_BYTES));
  }

  blackboardObject(typeName: string): BlackboardEntry | undefined {
    return this.blackboard.last(typeName);
  }
}

/** One call as the worker runs it. */
interface RunningCall {
  name: string;
  route: string;
  facade: boolean;
  ctx: CallContext;
  resp: InvokeResponse;
  signal?: ControlSignal;
  selection?: Selection;
}

/** Where a call waits for a capacity slot. */
interface Waiter {
  grant: () => void;
  refuse: (e: StatusErr) => void;
}

/** How one registration stream ended. */
interface SessionEnd {
  error: string;
  refused?: boolean;
  retryAfterMs?: number;
}

/**
 * A worker: serves its groups' tools and keeps itself registered with the
 * orchestrator. {@link run} serves until {@link stop} (or SIGTERM / SIGINT), then
 * drains: health turns NOT_SERVING, the orchestrator is told (Draining), new calls are
 * refused (UNAVAILABLE, reason WORKER_DRAINING), calls in flight finish (up to
 * `drainTimeoutMs`), and the server stops.
 */
export class Worker {
  readonly #opts: Required<
    Pick<WorkerOptions, "orchestrator" | "id" | "listen" | "drainTimeoutMs" | "contextMaxBytes" | "maxResultBytes" | "minBackoffMs" | "maxBackoffMs" | "ledgerTtlMs" | "ledgerStoreTimeoutMs">
  > &
    WorkerOptions;
  readonly #log: Logger;
  readonly #catalog: Catalog;
  readonly #ledger: Ledger | undefined;
  readonly #keys = new KeyLocks();
  readonly #health = new HealthService();
  readonly #registration: Registration;
  readonly #capacity: number;

  #server: grpc.Server | undefined;
  #address: string | undefined;
  #ran = false;
  #draining = false;
  #calls = 0; // calls at the worker, waiting for a slot included
  #active = 0; // calls running a tool
  #waiters: Waiter[] = [];
  #idle: (() => void) | undefined;
  readonly #registered = new Set<string>();
  #lastRejections: readonly Rejection[] = [];
  readonly #drainListeners = new Set<() => void>();
  #drainSent: (() => void) | undefined;
  #stopRequested: ((reason: string) => void) | undefined;
  #stopReason: string | undefined;

  /** Checks the options and groups; throws for what the orchestrator would refuse. */
  constructor(opts: WorkerOptions) {
    if (!opts.orchestrator) throw new TypeError("worker: no orchestrator address");
    const id = opts.id ?? `${(hostname() || "worker").replace(/[^A-Za-z0-9_.:-]/g, "-").slice(0, 240)}-${randomBytes(3).toString("hex")}`;
    if (!WORKER_ID_RE.test(id)) throw new TypeError(`worker: id ${JSON.stringify(id)} must be 1 to 253 of [A-Za-z0-9_.:-]`);
    const listen = opts.listen ?? "127.0.0.1:0";
    if (!splitHostPort(listen)) throw new TypeError(`worker: listen ${JSON.stringify(listen)} is not host:port`);
    if (!opts.plaintext && !isLoopback(listen)) {
      throw new TypeError(
        `worker: listen ${listen} is not a loopback address: set plaintext to serve without TLS (local development only: anything that reaches the port could call the tools with any context)`,
      );
    }
    const capacity = opts.capacity ?? 0;
    if (!Number.isInteger(capacity) || capacity < 0 || capacity > 0x7fffffff) throw new TypeError(`worker: capacity must be a whole number ≥ 0, got ${capacity}`);
    const version = opts.version ?? "";
    const vp = checkText(version, MAX_VERSION_BYTES) || (/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(version) ? "holds an unprintable character" : "");
    if (vp) throw new TypeError(`worker: version ${vp}`);
    const minBackoffMs = opts.minBackoffMs && opts.minBackoffMs > 0 ? opts.minBackoffMs : 100;
    let maxBackoffMs = opts.maxBackoffMs ?? 5000;
    if (maxBackoffMs < minBackoffMs) maxBackoffMs = Math.max(5000, minBackoffMs);
    this.#opts = {
      ...opts,
      id,
      listen,
      drainTimeoutMs: opts.drainTimeoutMs && opts.drainTimeoutMs > 0 ? opts.drainTimeoutMs : 20000,
      contextMaxBytes: opts.contextMaxBytes && opts.contextMaxBytes > 0 ? opts.contextMaxBytes : DEFAULT_CONTEXT_MAX_BYTES,
      maxResultBytes: opts.maxResultBytes && opts.maxResultBytes > 0 ? opts.maxResultBytes : DEFAULT_MAX_RESULT_BYTES,
      minBackoffMs,
      maxBackoffMs,
      ledgerTtlMs: opts.ledgerTtlMs && opts.ledgerTtlMs > 0 ? opts.ledgerTtlMs : DEFAULT_LEDGER_TTL_MS,
      ledgerStoreTimeoutMs: opts.ledgerStoreTimeoutMs && opts.ledgerStoreTimeoutMs > 0 ? opts.ledgerStoreTimeoutMs : DEFAULT_LEDGER_STORE_TIMEOUT_MS,
    };
    this.#capacity = capacity;
    this.#log = opts.logger ?? stderrLogger("info", { worker_id: id });
    this.#catalog = new Catalog(opts.groups);
    const usesLedger = [...this.#catalog.tools.values()].some((t) => t.ledger);
    this.#ledger = opts.ledger ?? (usesLedger ? new MemoryLedger() : undefined);
    this.#registration = create(RegistrationSchema, { workerId: id, capacity, version, groups: this.#catalog.groups });
  }

  /** The worker's id. */
  get id(): string {
    return this.#opts.id;
  }

  /** The address the worker serves on, once {@link run} listens. */
  get address(): string | undefined {
    return this.#address;
  }

  /** Whether an orchestrator (one replica at least) holds the worker's registration now. */
  get registered(): boolean {
    return this.#registered.size > 0;
  }

  /** The rejections of the last refused registration. */
  get lastRejections(): readonly Rejection[] {
    return this.#lastRejections;
  }

  /** Whether the worker is draining. */
  get draining(): boolean {
    return this.#draining;
  }

  /** Calls the worker is running a tool for (not waiting for a slot). */
  get inFlight(): number {
    return this.#active;
  }

  /**
   * What the worker registers: its id, capacity and version, and its groups (each
   * group's tools, given and facade leaves, sorted by name, with their content hashes,
   * and its facade trees). The address is set once {@link run} listens.
   */
  registration(): Registration {
    return fromBinary(RegistrationSchema, toBinary(RegistrationSchema, this.#registration));
  }

  /** Starts the drain: {@link run} then drains and returns. */
  stop(reason = "stopped"): void {
    if (this.#stopRequested) this.#stopRequested(reason);
    else this.#stopReason ??= reason;
  }

  /**
   * Serves until {@link stop}, SIGTERM or SIGINT, keeping the worker registered, then
   * drains and resolves. Rejects when it cannot listen. A Worker runs once.
   */
  async run(): Promise<void> {
    if (this.#ran) throw new WorkerStateError("worker: run was already called on this worker");
    this.#ran = true;
    const server = new grpc.Server({
      "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
      // The orchestrator pings every 10 s, calls or not: never too many pings.
      "grpc.keepalive_permit_without_calls": 1,
      "grpc.max_concurrent_streams": 4096,
    });
    this.#server = server;
    this.#health.addTo(server);
    server.addService(serviceDefinition(ToolWorkerService), {
      invoke: (call: grpc.ServerUnaryCall<InvokeRequest, InvokeResponse>, cb: grpc.sendUnaryData<InvokeResponse>) => this.#serveUnary(call, cb),
      invokeStream: (call: grpc.ServerWritableStream<InvokeStreamRequest, InvokeStreamResponse>) => this.#serveStream(call),
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync(this.#opts.listen, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(new Error(`worker: listen: ${err.message}`)) : resolve(p))),
    );
    const host = splitHostPort(this.#opts.listen)!.host;
    const local = joinHostPort(host, port);
    this.#address = local;
    const advertise = this.#opts.advertise ?? local;
    if (Buffer.byteLength(advertise) > MAX_ADDRESS_BYTES || !splitHostPort(advertise)) {
      server.forceShutdown();
      throw new TypeError(`worker: advertise address ${JSON.stringify(advertise)} is not host:port of at most ${MAX_ADDRESS_BYTES} bytes`);
    }
    this.#registration.address = advertise;
    this.#health.set("", ServingStatus.SERVING);
    this.#health.set(WORKER_SERVICE_NAME, ServingStatus.SERVING);
    this.#log.info("worker serving", { address: local, advertise, orchestrator: this.#opts.orchestrator, tls: false });
    this.#log.warn(
      "mutual TLS is off: the port serves plaintext, and any process that reaches it may call the tools with any context (serve on loopback, or behind a network you trust)",
    );

    const stopped = new Promise<string>((resolve) => {
      this.#stopRequested = resolve;
      if (this.#stopReason !== undefined) resolve(this.#stopReason);
    });
    const onSignal = (sig: NodeJS.Signals) => this.stop(`received ${sig}`);
    const handleSignals = this.#opts.handleSignals ?? true;
    if (handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const regStop = new AbortController();
    const targets = [...new Set(this.#opts.orchestrator.split(",").map((s) => s.trim()).filter((s) => s !== ""))];
    const loops = targets.map((t) => this.#registerLoop(t, regStop.signal));
    try {
      const reason = await stopped;
      this.#log.info("worker stopping", { reason });
      await this.#drain();
    } finally {
      regStop.abort();
      await Promise.allSettled(loops);
      if (handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
  }

  // ---- draining and admission ----

  async #drain(): Promise<void> {
    this.#draining = true;
    const idle = new Promise<void>((resolve) => {
      if (this.#calls === 0) resolve();
      else this.#idle = resolve;
    });
    const sent = new Promise<void>((resolve) => (this.#drainSent = resolve));
    for (const w of this.#waiters.splice(0)) w.refuse(drainingStatus());
    for (const l of this.#drainListeners) l();
    this.#health.shutdown();
    this.#log.info("worker draining", { in_flight: this.#active, timeout_ms: this.#opts.drainTimeoutMs });
    if (this.registered) await Promise.race([sent, new Promise((r) => setTimeout(r, 1000).unref())]);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      idle.then(() => false),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(true), this.#opts.drainTimeoutMs))),
    ]);
    clearTimeout(timer);
    if (timedOut) this.#log.warn("drain timeout: stopping with calls in flight", { in_flight: this.#active });
    this.#health.endWatches();
    const server = this.#server!;
    await new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, 2000);
      server.tryShutdown(() => {
        clearTimeout(force);
        resolve();
      });
    });
    this.#log.info("worker stopped");
  }

  /**
   * Takes a call in (none while draining, none whose caller has left, no more at once than
   * the capacity) and returns its release.
   */
  async #admit(signal: AbortSignal): Promise<() => void> {
    if (this.#draining) throw drainingStatus();
    if (signal.aborted) throw abortStatus(signal);
    this.#calls++;
    if (this.#capacity > 0 && this.#active >= this.#capacity) {
      try {
        await new Promise<void>((resolve, reject) => {
          const w: Waiter = {
            grant: () => {
              signal.removeEventListener("abort", onAbort);
              resolve();
            },
            refuse: (e) => {
              signal.removeEventListener("abort", onAbort);
              reject(e);
            },
          };
          const onAbort = () => {
            const i = this.#waiters.indexOf(w);
            if (i >= 0) this.#waiters.splice(i, 1);
            reject(abortStatus(signal));
          };
          if (signal.aborted) return onAbort();
          signal.addEventListener("abort", onAbort, { once: true });
          this.#waiters.push(w);
        });
      } catch (e) {
        this.#endCall();
        throw e;
      }
    } else {
      this.#active++;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiters.shift();
      if (next) next.grant(); // the slot passes on: #active stays
      else this.#active--;
      this.#endCall();
    };
  }

  #endCall(): void {
    this.#calls--;
    if (this.#draining && this.#calls === 0 && this.#idle) {
      this.#idle();
      this.#idle = undefined;
    }
  }

  // ---- serving calls ----

  /** An AbortController that aborts when the call is cancelled or its deadline passes. */
  #callSignal(call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>): {
    ac: AbortController;
    deadline: Date | undefined;
    done: () => void;
  } {
    const ac = new AbortController();
    const onCancel = () => ac.abort(new CallEndedError("CANCELLED", "the call was cancelled"));
    call.on("cancelled", onCancel);
    const d = call.getDeadline();
    const ms = d instanceof Date ? d.getTime() : d;
    let timer: NodeJS.Timeout | undefined;
    let deadline: Date | undefined;
    if (Number.isFinite(ms)) {
      deadline = new Date(ms);
      const wait = ms - Date.now();
      const fire = () => ac.abort(new CallEndedError("DEADLINE_EXCEEDED", "the call's deadline passed"));
      if (wait <= 0) fire();
      else timer = setTimeout(fire, Math.min(wait, 0x7fffffff));
    }
    return {
      ac,
      deadline,
      done: () => {
        clearTimeout(timer);
        call.off("cancelled", onCancel);
      },
    };
  }

  #serveUnary(call: grpc.ServerUnaryCall<InvokeRequest, InvokeResponse>, cb: grpc.sendUnaryData<InvokeResponse>): void {
    const { ac, deadline, done } = this.#callSignal(call);
    this.#invokeOnce(call.request, call.metadata, ac.signal, deadline, undefined)
      .then(
        (resp) => cb(null, resp),
        (e: unknown) => cb(this.#statusOf(e, call.request.tool)),
      )
      .finally(done);
  }

  #serveStream(call: grpc.ServerWritableStream<InvokeStreamRequest, InvokeStreamResponse>): void {
    const { ac, deadline, done } = this.#callSignal(call);
    const req = call.request.request ?? create(InvokeRequestSchema);
    let finished = false;
    let dropped = 0;
    const report = (status: string) => {
      if (finished || call.cancelled || call.destroyed) return;
      // Reports are advisory: past a bounded backlog (the orchestrator reads slowly),
      // later ones are dropped rather than buffered without end.
      if (call.writableLength >= 256) {
        if (dropped++ === 0) this.#log.warn("progress reports dropped: the orchestrator reads them slower than the tool makes them", { tool: req.tool });
        return;
      }
      call.write(create(InvokeStreamResponseSchema, { message: { case: "progress", value: create(ProgressReportSchema, { status }) } }));
    };
    this.#invokeOnce(req, call.metadata, ac.signal, deadline, report)
      .then(
        (resp) => {
          finished = true;
          if (call.cancelled || call.destroyed) return;
          call.write(create(InvokeStreamResponseSchema, { message: { case: "result", value: resp } }));
          call.end();
        },
        (e: unknown) => {
          finished = true;
          call.emit("error", this.#statusOf(e, req.tool));
        },
      )
      .finally(done);
  }

  /** The status of a call that did not run, or INTERNAL for a bug. */
  #statusOf(e: unknown, tool: string): grpc.StatusObject | StatusErr {
    if (isStatusErr(e)) return e;
    this.#log.error("call failed inside the worker", { tool, error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
    return { code: grpc.status.INTERNAL, details: `internal error in the worker: ${e instanceof Error ? e.message : String(e)}`, metadata: new grpc.Metadata() };
  }

  /**
   * {@link invoke} through the idempotency ledger, for a tool registered with `ledger`:
   * a call whose key has an answer is answered with it without running the tool;
   * otherwise the tool runs and its answer is kept. Calls that did not run keep nothing,
   * nor a failure produced after the caller went away (a cancellation is not the call's
   * outcome; a tool that finished although the caller left keeps its answer: its effect
   * happened).
   */
  async #invokeOnce(req: InvokeRequest, md: grpc.Metadata, signal: AbortSignal, deadline: Date | undefined, report: ((s: string) => void) | undefined): Promise<InvokeResponse> {
    const t = this.#catalog.tools.get(req.tool);
    const ledger = this.#ledger;
    if (!ledger || !t?.ledger || req.idempotencyKey === "") return this.#invoke(req, md, signal, deadline, report);
    const key = req.tool + "\x00" + req.idempotencyKey;
    let unlock: () => void;
    try {
      unlock = await this.#keys.lock(key, signal);
    } catch {
      throw abortStatus(signal); // the caller left while the call waited for its key
    }
    try {
      let kept: Uint8Array | undefined;
      try {
        kept = await settleBy(ledger.load(key, signal), signal);
      } catch (e) {
        // The caller left while the ledger was read (or while the call waited for its
        // key): the call does not run, its answer perhaps kept already.
        if (signal.aborted) throw abortStatus(signal);
        this.#log.warn("idempotency ledger unreadable: running the call", { tool: req.tool, error: String(e) });
      }
      if (kept) {
        try {
          const resp = fromBinary(InvokeResponseSchema, kept);
          this.#log.info("call answered from the idempotency ledger", { tool: req.tool, idempotency_key: req.idempotencyKey });
          return resp;
        } catch {
          // An answer that does not decode is no answer: run the call.
        }
      }
      if (signal.aborted) throw abortStatus(signal);
      const resp = await this.#invoke(req, md, signal, deadline, report);
      if (signal.aborted && resp.outcome.case === "error") return resp;
      // The caller may have left (its orchestrator died) while the tool ran to its end:
      // the answer is kept all the same, within a bound of its own.
      const ms = this.#opts.ledgerStoreTimeoutMs;
      const stop = new AbortController();
      const timer = setTimeout(() => stop.abort(new Error(`the ledger did not keep it within ${ms} ms`)), ms);
      try {
        await settleBy(ledger.store(key, toBinary(InvokeResponseSchema, resp), this.#opts.ledgerTtlMs, stop.signal), stop.signal);
      } catch (e) {
        this.#log.warn("the call's answer could not be kept in the idempotency ledger", { tool: req.tool, error: String(e) });
      } finally {
        clearTimeout(timer);
      }
      return resp;
    } finally {
      unlock();
    }
  }

  /**
   * Runs one call. Tool failures and bad arguments are answered as error results; a
   * thrown status error is a call the worker did not run (draining; a tool it does not
   * serve: NOT_FOUND, reason UNKNOWN_TOOL).
   */
  async #invoke(req: InvokeRequest, md: grpc.Metadata, signal: AbortSignal, deadline: Date | undefined, report: ((s: string) => void) | undefined): Promise<InvokeResponse> {
    const release = await this.#admit(signal);
    try {
      const name = req.tool;
      const t = this.#catalog.tools.get(name);
      const f = this.#catalog.facades.get(name)?.facade;
      if (!t && !f) {
        throw statusError({ reason: "UNKNOWN_TOOL", message: `tool '${truncateUtf8(name, 64)}' is not served by worker ${this.#opts.id}` });
      }
      const created = req.createdTool;
      if (created !== "") {
        // A call of a tool a selector created: this SDK makes no templates, so no tool
        // of it serves created tools.
        if (!TOOL_NAME_RE.test(created)) {
          return errorResponse("INVALID_ARGUMENTS", `created_tool ${created === "" ? "is empty" : `${JSON.stringify(created)} must match ^[a-zA-Z0-9_-]{1,64}$`}`);
        }
        return errorResponse("FAILED", `tool '${created}' cannot be called: '${name}' is not a template, so it serves no created tools`);
      }
      let input: unknown;
      try {
        input = t ? t.parse(req.argumentsJson) : f!.parse(req.argumentsJson);
      } catch (e) {
        if (e instanceof InvalidArgumentsError) return errorResponse("INVALID_ARGUMENTS", `invalid arguments for tool '${name}': ${e.message}`);
        throw e;
      }
      let context: Record<string, string>;
      try {
        context = decodeContext(md, this.#opts.contextMaxBytes);
      } catch (e) {
        if (e instanceof ContextCodecError) return errorResponse("INVALID_ARGUMENTS", `the call's context cannot be read: ${e.message}`);
        throw e;
      }
      const board = new CallBlackboard(req.blackboard.map((b) => BlackboardEntry.fromProto(b)), MAX_BLACKBOARD_UPDATE_BYTES);
      const ctx = new CallContext(
        name,
        req.runId,
        req.loopId,
        req.callId,
        req.idempotencyKey,
        req.tenant,
        Object.freeze(context),
        signal,
        deadline,
        new ToolState(req.state),
        board,
        report,
      );
      const c: RunningCall = { name, route: name, facade: f !== undefined, ctx, resp: errorResponse("FAILED", "Tool invocation failed") };
      if (f) await this.#select(f, input, c);
      else await this.#call(t!, input, c);
      return this.#respond(c);
    } finally {
      release();
    }
  }

  /** Runs a tool: its result, or the error a throw becomes, or its signal. */
  async #call(t: Tool, input: unknown, c: RunningCall): Promise<void> {
    let r: ToolResult;
    try {
      r = await t.run(input as Record<string, unknown>, c.ctx);
    } catch (e) {
      if (e instanceof ToolSignal) r = e;
      else {
        if (!(e instanceof Error)) this.#log.error("tool panicked", { tool: t.name, panic: String(e) });
        c.resp = thrownResult(t.name, e);
        return;
      }
    }
    if (r instanceof ToolSignal) {
      if (r instanceof ReplanSignal) {
        const msg = checkReplanUpdates(r.updates, MAX_BLACKBOARD_UPDATES, MAX_BLACKBOARD_UPDATE_BYTES);
        if (msg) {
          c.resp = errorResponse("FAILED", `tool '${t.name}' asked to replan, but ${msg}`);
          return;
        }
      }
      const sig = signalToProto(r);
      if (sig) {
        c.resp = create(InvokeResponseSchema, { outcome: { case: "text", value: "" } });
        c.signal = sig;
      } else {
        c.resp = errorResponse("FAILED", r.message || "Tool invocation failed");
      }
      return;
    }
    try {
      c.resp = resultToResponse(r);
    } catch (e) {
      c.resp = errorResponse("FAILED", `tool '${t.name}' returned a result that cannot be sent: ${(e as Error).message}`);
    }
  }

  /**
   * Answers a call of a selectable facade: the unfold message, and a Selection with the
   * chosen tools and the state they are bound to. A chosen tool must be a tool (or
   * facade) of the facade's group as registered, so that every replica can serve it.
   */
  async #select(f: Facade, input: unknown, c: RunningCall): Promise<void> {
    const group = this.#catalog.facades.get(f.name)!.group;
    let chosen: Awaited<ReturnType<Facade["select"]>>;
    try {
      chosen = await f.select(input, c.ctx);
    } catch (e) {
      if (e instanceof Error) c.resp = errorResponse("FAILED", `selecting the tools of '${f.name}': ${e.message || "Tool invocation failed"}`);
      else c.resp = thrownResult(f.name, e);
      return;
    }
    let picked: readonly (Tool | string)[];
    if (Array.isArray(chosen)) picked = chosen;
    else {
      const sel = chosen as { tools: readonly (Tool | string)[]; state?: unknown };
      picked = sel.tools ?? [];
      if (sel.state !== undefined) {
        try {
          c.ctx.state.set(sel.state);
        } catch (e) {
          c.resp = errorResponse("FAILED", `facade '${f.name}' bound a state that cannot be sent: ${(e as Error).message}`);
          return;
        }
      }
    }
    const names: string[] = [];
    for (const t of picked) {
      if (t === undefined || t === null) continue;
      const name = typeof t === "string" ? t : t.name;
      const msg = this.#unservable(group, t);
      if (msg) {
        c.resp = errorResponse("FAILED", `facade '${f.name}' selected ${msg}`);
        return;
      }
      if (!names.includes(name)) names.push(name);
    }
    c.selection = create(SelectionSchema, { tools: names, state: c.ctx.state.bytes() });
    c.resp = create(InvokeResponseSchema, { outcome: { case: "text", value: unfoldMessage(names, f.options.usageNotes ?? "") } });
  }

  /** Why a selected tool cannot be served by the group's replicas, or "". */
  #unservable(group: string, t: Tool | string): string {
    const name = typeof t === "string" ? t : t.name;
    if (this.#catalog.group.get(name) !== group) {
      return `'${truncateUtf8(name, 64)}', which is not a tool of group '${group}': a selector may only select the group's tools (list them among the facade's children), so that every replica can serve them`;
    }
    const hash = this.#catalog.hashes.get(name);
    if (typeof t !== "string" && hash !== undefined && hash !== t.contentHash) {
      return `a tool '${name}' whose definition differs from the one group '${group}' registers: a selector may only select the group's tools as registered, so that every replica can serve them`;
    }
    return "";
  }

  /** The response to a call that ran, or an error result saying why it cannot be sent. */
  #respond(c: RunningCall): InvokeResponse {
    const resp = c.resp;
    if (c.signal) resp.outcome = { case: "signal", value: c.signal };
    if (c.selection) resp.selection = c.selection;
    const added = c.ctx.blackboard.added();
    if (added.length > 0) {
      if (added.length > MAX_BLACKBOARD_UPDATES) {
        return errorResponse(
          "FAILED",
          `tool '${c.name}' ran, but it added ${added.length} objects to the blackboard, over the ${MAX_BLACKBOARD_UPDATES} a call may add, and they were dropped`,
        );
      }
      resp.blackboardUpdates = added.map((e) => e.toProto());
    }
    // A failed selection binds nothing; any other call returns the state it set.
    if (c.ctx.state.changed && (!c.facade || c.selection)) {
      resp.state = c.ctx.state.bytes();
      resp.stateChanged = true;
    }
    const n = toBinary(InvokeResponseSchema, resp).length;
    if (n > this.#opts.maxResultBytes) {
      this.#log.warn("tool result over the size limit: answering with an error", { tool: c.name, bytes: n, limit: this.#opts.maxResultBytes });
      return errorResponse(
        "FAILED",
        `tool '${c.name}' ran, but its result is ${n} bytes, over the ${this.#opts.maxResultBytes} bytes a result may have, and was dropped. Call it again in a way that returns less.`,
      );
    }
    return resp;
  }

  // ---- registration ----

  /**
   * Keeps the worker registered with the orchestrator at `target` until `stop` aborts,
   * reconnecting with jittered exponential backoff whenever the stream breaks or the
   * orchestrator refuses the registration (waiting at least the delay its RetryInfo asks
   * for, within the cap).
   */
  async #registerLoop(target: string, stop: AbortSignal): Promise<void> {
    const client = new grpc.Client(target, grpc.credentials.createInsecure(), {
      // Ping every 10 s, calls or not, as pkg/worker does; the orchestrator allows 5 s.
      "grpc.keepalive_time_ms": 10000,
      "grpc.keepalive_timeout_ms": 5000,
      "grpc.keepalive_permit_without_calls": 1,
      // The connection's own reconnect backoff has the registration loop's cap.
      "grpc.initial_reconnect_backoff_ms": this.#opts.minBackoffMs,
      "grpc.max_reconnect_backoff_ms": Math.max(this.#opts.minBackoffMs, Math.floor(this.#opts.maxBackoffMs / 1.2)),
      "grpc.service_config_disable_resolution": 1,
      "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    });
    let failures = 0;
    try {
      // The orchestrator refuses a worker whose health answers NOT_SERVING, as a draining
      // one does: once draining, a broken stream is not registered again.
      while (!stop.aborted && !this.#draining) {
        const start = Date.now();
        const end = await this.#session(client, target, stop);
        this.#setRegistered(target, false);
        if (stop.aborted) return;
        if (this.#draining) {
          this.#log.info("registration stream ended while draining: not registering again", { orchestrator: target, error: end.error });
          return;
        }
        if (Date.now() - start > 10000 && !end.refused) failures = 0;
        let delay = backoffMs(failures, this.#opts.minBackoffMs, this.#opts.maxBackoffMs);
        if (end.retryAfterMs !== undefined && end.retryAfterMs > delay) delay = Math.min(end.retryAfterMs, this.#opts.maxBackoffMs);
        failures++;
        this.#log.warn("registration stream ended; reconnecting", { orchestrator: target, error: end.error, retry_in_ms: Math.round(delay) });
        await sleep(delay, stop);
      }
    } finally {
      client.close();
    }
  }

  /** Runs one registration stream until it ends or `stop` aborts. */
  #session(client: grpc.Client, target: string, stop: AbortSignal): Promise<SessionEnd> {
    return new Promise<SessionEnd>((resolve) => {
      const call = client.makeBidiStreamRequest<ConnectRequest, ConnectResponse>(
        methodPath(ToolRegistryService.method.connect),
        serializer(ConnectRequestSchema),
        deserializer(ConnectResponseSchema),
        new grpc.Metadata({ waitForReady: true }),
        {},
      );
      let phase: "awaiting-ack" | "refused" | "accepted" = "awaiting-ack";
      let heartbeat: NodeJS.Timeout | undefined;
      // The call waits for the connection (its own backoff paces the attempts); while the
      // orchestrator cannot be reached, say so every 5 s, so that a wrong address or an
      // orchestrator that is down does not pass in silence.
      const since = Date.now();
      const unreachable = setInterval(() => {
        const state = client.getChannel().getConnectivityState(false);
        if (phase === "awaiting-ack" && state !== grpc.connectivityState.READY) {
          this.#log.warn("cannot reach the orchestrator; still trying", {
            orchestrator: target,
            state: grpc.connectivityState[state],
            for_s: Math.round((Date.now() - since) / 1000),
          });
        }
      }, 5000);
      let finished = false;
      const write = (m: ConnectRequest) => {
        if (!finished && !call.destroyed && call.writable) call.write(m);
      };
      const sendDraining = () => {
        write(create(ConnectRequestSchema, { message: { case: "draining", value: create(DrainingSchema, { reason: "worker shutting down" }) } }));
        this.#drainSent?.();
      };
      const finish = (end: SessionEnd) => {
        if (finished) return;
        finished = true;
        clearInterval(heartbeat);
        clearInterval(unreachable);
        this.#drainListeners.delete(sendDraining);
        stop.removeEventListener("abort", onStop);
        resolve(end);
      };
      const onStop = () => {
        call.cancel();
        finish({ error: "stopped" });
      };
      stop.addEventListener("abort", onStop, { once: true });

      call.on("data", (msg: ConnectResponse) => {
        if (phase === "awaiting-ack") {
          if (msg.message.case !== "ack") {
            call.cancel();
            finish({ error: `orchestrator answered the registration with ${msg.message.case ?? "nothing"}, not an ack` });
            return;
          }
          const ack = msg.message.value;
          if (!ack.accepted) {
            phase = "refused";
            this.#lastRejections = ack.rejections;
            for (const r of ack.rejections) this.#log.error("orchestrator refused registration", { orchestrator: target, group: r.group, tool: r.tool, reason: r.reason });
            return; // the stream ends with the refusal's status
          }
          phase = "accepted";
          this.#lastRejections = [];
          this.#setRegistered(target, true);
          const hb = ack.heartbeatInterval;
          let interval = hb ? Number(hb.seconds) * 1000 + hb.nanos / 1e6 : 0;
          if (!(interval > 0)) interval = 2000;
          this.#log.info("registered with orchestrator", { orchestrator: target, lease_id: ack.leaseId, heartbeat_ms: interval });
          heartbeat = setInterval(
            () => write(create(ConnectRequestSchema, { message: { case: "heartbeat", value: create(HeartbeatSchema, { inFlight: this.#active }) } })),
            interval,
          );
          this.#drainListeners.add(sendDraining);
          if (this.#draining) sendDraining();
          try {
            this.#opts.onRegistered?.({ orchestrator: target, leaseId: ack.leaseId, address: this.#registration.address });
          } catch (e) {
            this.#log.error("onRegistered failed", { error: String(e) });
          }
          return;
        }
        if (msg.message.case === "drain") {
          this.#log.info("drain requested by orchestrator", { orchestrator: target, reason: msg.message.value.reason });
          this.stop("the orchestrator asked the worker to drain");
        }
      });
      call.on("error", (err: grpc.ServiceError) => {
        const details = decodeStatusDetails(err.metadata);
        if (phase === "refused") {
          try {
            this.#opts.onRejected?.({ orchestrator: target, rejections: this.#lastRejections, reason: details?.reason ?? "", message: err.details });
          } catch (e) {
            this.#log.error("onRejected failed", { error: String(e) });
          }
          finish({
            error: `registration refused: ${codeName(err.code)} ${details?.reason ?? ""}: ${err.details}`,
            refused: true,
            ...(details?.retryAfterMs !== undefined ? { retryAfterMs: details.retryAfterMs } : {}),
          });
          return;
        }
        finish({
          error: `${codeName(err.code)}${details?.reason ? " " + details.reason : ""}: ${err.details}`,
          ...(details?.retryAfterMs !== undefined ? { retryAfterMs: details.retryAfterMs } : {}),
        });
      });
      call.on("status", (st: grpc.StatusObject) => {
        if (st.code === grpc.status.OK) finish({ error: "orchestrator closed the registration stream", refused: phase === "refused" });
      });
      call.on("end", () => {
        // Wait for the status, which says why.
      });
      write(create(ConnectRequestSchema, { message: { case: "register", value: this.#registration } }));
    });
  }

  #setRegistered(target: string, ok: boolean): void {
    if (ok) this.#registered.add(target);
    else this.#registered.delete(target);
  }
}

/** Why a call's signal aborted. */
class CallEndedError extends Error {
  override name = "CallEndedError";
  constructor(
    readonly code: "CANCELLED" | "DEADLINE_EXCEEDED",
    message: string,
  ) {
    super(message);
  }
}

/** The status of a call that ended while waiting for a slot. */
function abortStatus(signal: AbortSignal): StatusErr {
  const r = signal.reason as CallEndedError | undefined;
  const deadline = r instanceof CallEndedError && r.code === "DEADLINE_EXCEEDED";
  const e = new Error(deadline ? "context deadline exceeded" : "context canceled") as StatusErr;
  e.code = deadline ? grpc.status.DEADLINE_EXCEEDED : grpc.status.CANCELLED;
  e.details = e.message;
  e.metadata = new grpc.Metadata();
  return e;
}
