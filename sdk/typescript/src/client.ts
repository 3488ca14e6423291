/**
 * The client of the orchestrator's `toolmesh.v1.OrchestratorService`.
 *
 * ```ts
 * const client = new Client("127.0.0.1:7070");
 * for await (const ev of client.run({ prompt: "What is 2 + 3?", toolGroups: ["math"] })) {
 *   if (ev.event.case === "finalResult") console.log(ev.event.value.text);
 * }
 * ```
 *
 * Every method throws (or its iterator throws) a {@link ToolmeshError}: the gRPC code,
 * the message, and the reason of toolmesh's ErrorInfo.
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { create, type DescMessage, type DescMethod, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ToolmeshError } from "./errors.js";
import {
  ApprovalDecision,
  ApproveToolCallRequestSchema,
  CancelRunRequestSchema,
  GetRunRequestSchema,
  ListRunsRequestSchema,
  ListTenantsRequestSchema,
  ListToolGroupsRequestSchema,
  ListToolsRequestSchema,
  ListWorkersRequestSchema,
  OrchestratorService,
  RunRequestSchema,
  WatchRunRequestSchema,
  type ApproveToolCallResponse,
  type CancelRunResponse,
  type GetRunResponse,
  type ListRunsResponse,
  type ListTenantsResponse,
  type ListToolGroupsResponse,
  type ListToolsResponse,
  type ListWorkersResponse,
  type RunResponse,
  type RunState,
} from "./gen/toolmesh/v1/orchestrator_pb.js";
import { deserializer, methodPath, serializer } from "./rpc.js";

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** A bearer token, sent as `authorization: Bearer <token>` with every call. */
  token?: string;
  /** The channel's credentials. Default: plaintext (h2c), as the orchestrator serves on loopback. */
  credentials?: grpc.ChannelCredentials;
  /** Further grpc-js channel options. */
  channelOptions?: grpc.ChannelOptions;
}

/** Options of one call. */
export interface CallOptions {
  /** Cancels the call when aborted. */
  signal?: AbortSignal;
  /** The call's deadline in milliseconds from now. */
  timeoutMs?: number;
  /** Further request metadata. */
  metadata?: Record<string, string>;
}

/** The messages a call takes, as their init shapes (plain objects). */
export type RunRequestInit = MessageInitShape<typeof RunRequestSchema>;
export type ListRunsRequestInit = MessageInitShape<typeof ListRunsRequestSchema>;
export type ApproveToolCallRequestInit = MessageInitShape<typeof ApproveToolCallRequestSchema>;

/** A client of one orchestrator. */
export class Client {
  readonly #client: grpc.Client;
  readonly #token: string | undefined;

  /** A client of the orchestrator at `address` (`host:port`). Connects on the first call. */
  constructor(address: string, options: ClientOptions = {}) {
    this.#client = new grpc.Client(address, options.credentials ?? grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": 64 << 20,
      ...options.channelOptions,
    });
    this.#token = options.token;
  }

  /** Closes the channel. */
  close(): void {
    this.#client.close();
  }

  #metadata(opts: CallOptions | undefined): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.#token) md.set("authorization", `Bearer ${this.#token}`);
    for (const [k, v] of Object.entries(opts?.metadata ?? {})) md.set(k, v);
    return md;
  }

  #callOptions(opts: CallOptions | undefined): grpc.CallOptions {
    return opts?.timeoutMs !== undefined ? { deadline: Date.now() + opts.timeoutMs } : {};
  }

  #unary<I extends DescMessage, O extends DescMessage>(m: DescMethod & { input: I; output: O }, req: MessageShape<I>, opts?: CallOptions): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      if (opts?.signal?.aborted) return reject(new ToolmeshError(grpc.status.CANCELLED, "the call was cancelled before it started"));
      const call = this.#client.makeUnaryRequest(
        methodPath(m),
        serializer(m.input),
        deserializer(m.output),
        req,
        this.#metadata(opts),
        this.#callOptions(opts),
        (err, resp) => {
          opts?.signal?.removeEventListener("abort", onAbort);
          if (err) reject(ToolmeshError.from(err));
          else resolve(resp!);
        },
      );
      const onAbort = () => call.cancel();
      opts?.signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  async *#stream<I extends DescMessage, O extends DescMessage>(m: DescMethod & { input: I; output: O }, req: MessageShape<I>, opts?: CallOptions): AsyncGenerator<MessageShape<O>, void, undefined> {
    if (opts?.signal?.aborted) throw new ToolmeshError(grpc.status.CANCELLED, "the call was cancelled before it started");
    const call = this.#client.makeServerStreamRequest(methodPath(m), serializer(m.input), deserializer(m.output), req, this.#metadata(opts), this.#callOptions(opts));
    const onAbort = () => call.cancel();
    opts?.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const ev of call as AsyncIterable<MessageShape<O>>) yield ev;
    } catch (e) {
      throw ToolmeshError.from(e);
    } finally {
      opts?.signal?.removeEventListener("abort", onAbort);
      call.cancel(); // a no-op once the stream ended; ends it when the caller stopped early
    }
  }

  /**
   * Runs a prompt: the run's events, in order, until the run ends. A run that fails sends
   * an `error` event, and then the iterator throws the status as a {@link ToolmeshError}
   * (its `reason`, such as "MAX_ITERATIONS"); a run refused before it started throws at
   * once. Stopping the iteration early cancels the call (and, unless the run is
   * `detached`, the run).
   */
  run(request: RunRequestInit, opts?: CallOptions): AsyncGenerator<RunResponse, void, undefined> {
    return this.#stream(OrchestratorService.method.run, create(RunRequestSchema, request), opts);
  }

  /**
   * Follows a run's events from the journal: those after `afterSequence` (0: from the
   * start), then the live ones until the run ends.
   */
  watchRun(runId: string, afterSequence: number | bigint = 0, opts?: CallOptions): AsyncGenerator<RunResponse, void, undefined> {
    return this.#stream(OrchestratorService.method.watchRun, create(WatchRunRequestSchema, { runId, afterSequence: BigInt(afterSequence) }), opts);
  }

  /** A run's state and outcome (finished runs are kept for a while only: RUN_NOT_FOUND after). */
  getRun(runId: string, opts?: CallOptions): Promise<GetRunResponse> {
    return this.#unary(OrchestratorService.method.getRun, create(GetRunRequestSchema, { runId }), opts);
  }

  /** Cancels a run; the response has the run's state. */
  cancelRun(runId: string, reason = "", opts?: CallOptions): Promise<CancelRunResponse> {
    return this.#unary(OrchestratorService.method.cancelRun, create(CancelRunRequestSchema, { runId, reason }), opts);
  }

  /**
   * Approves (or denies) a tool call that waits for approval. `decision` defaults to
   * approve; APPROVAL_NOT_PENDING when the run waits for no approval of that call.
   */
  approveToolCall(request: ApproveToolCallRequestInit, opts?: CallOptions): Promise<ApproveToolCallResponse> {
    const req = create(ApproveToolCallRequestSchema, request);
    if (req.decision === ApprovalDecision.UNSPECIFIED) req.decision = ApprovalDecision.APPROVE;
    return this.#unary(OrchestratorService.method.approveToolCall, req, opts);
  }

  /** Lists runs, newest first, a page at a time (`pageToken` from the last page). */
  listRuns(request: ListRunsRequestInit = {}, opts?: CallOptions): Promise<ListRunsResponse> {
    return this.#unary(OrchestratorService.method.listRuns, create(ListRunsRequestSchema, request), opts);
  }

  /** Lists the registered workers, sorted by id. */
  listWorkers(opts?: CallOptions): Promise<ListWorkersResponse> {
    return this.#unary(OrchestratorService.method.listWorkers, create(ListWorkersRequestSchema), opts);
  }

  /** Lists the registered tools and facades, sorted by name; only those of `toolGroups` when given. */
  listTools(toolGroups: readonly string[] = [], opts?: CallOptions): Promise<ListToolsResponse> {
    return this.#unary(OrchestratorService.method.listTools, create(ListToolsRequestSchema, { toolGroups: [...toolGroups] }), opts);
  }

  /** Lists the tool groups, sorted by role. */
  listToolGroups(opts?: CallOptions): Promise<ListToolGroupsResponse> {
    return this.#unary(OrchestratorService.method.listToolGroups, create(ListToolGroupsRequestSchema), opts);
  }

  /** Lists the tenants and their usage. */
  listTenants(opts?: CallOptions): Promise<ListTenantsResponse> {
    return this.#unary(OrchestratorService.method.listTenants, create(ListTenantsRequestSchema), opts);
  }
}

export type { RunState };
