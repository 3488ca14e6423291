/**
 * The TypeScript SDK of toolmesh: a worker SDK ({@link Worker}, {@link tool}, facades)
 * and a client of the orchestrator ({@link Client}).
 *
 * @packageDocumentation
 */
export { Worker, WORKER_SERVICE_NAME, WorkerStateError, backoffMs, isLoopback, errorResponse, resultToResponse } from "./worker.js";
export type { WorkerOptions, RegisteredEvent, RejectedEvent } from "./worker.js";
export { Catalog, InvalidGroupError } from "./catalog.js";
export type { Group, DomainTypeSpec, PermissionName } from "./catalog.js";
export {
  Tool,
  tool,
  toolError,
  replan,
  terminate,
  ToolSignal,
  ReplanSignal,
  TerminateSignal,
  ToolDefinitionError,
  definitionProto,
} from "./tool.js";
export type {
  ToolOptions,
  ToolHandler,
  ToolContext,
  ToolResult,
  TextResult,
  ArtifactResult,
  ArtifactSpec,
  ErrorResult,
  ToolErrorCodeName,
  TerminateScope,
  ToolSpec,
} from "./tool.js";
export { Facade, facade, facadeByCategory, selectableFacade, unfoldMessage, DEFAULT_CATEGORY_PARAMETER } from "./facade.js";
export type { FacadeOptions, FacadeKind, FacadeChild, Category, Selector, SelectionResult, SelectableFacadeOptions } from "./facade.js";
export { BlackboardEntry, CallBlackboard, BlackboardError, satisfiesType, simpleTypeName, checkMediaType } from "./blackboard.js";
export type { BlackboardAdd } from "./blackboard.js";
export { ToolState } from "./state.js";
export { MemoryLedger, KeyLocks, DEFAULT_LEDGER_TTL_MS, DEFAULT_LEDGER_MAX_ENTRIES, DEFAULT_LEDGER_STORE_TIMEOUT_MS } from "./ledger.js";
export type { Ledger } from "./ledger.js";
export { Client } from "./client.js";
export type { ClientOptions, CallOptions, RunRequestInit, ListRunsRequestInit, ApproveToolCallRequestInit } from "./client.js";
export { ToolmeshError, statusError, decodeStatusDetails, reasonName, parseReason, codeName, REASONS, ERROR_DOMAIN } from "./errors.js";
export type { StatusDetails, StatusSpec } from "./errors.js";
export { encodeContext, decodeContext, metadataKey, ContextCodecError, DEFAULT_CONTEXT_MAX_BYTES } from "./ctxcodec.js";
export { contentHash, contentHashInput } from "./hash.js";
export type { HashedDefinition } from "./hash.js";
export { canonicalJson } from "./canonical.js";
export { goQuote, goDuration } from "./gostr.js";
export { inputSchemaJson, parseArguments, InvalidArgumentsError } from "./schema.js";
export { HealthService } from "./health.js";
export { stderrLogger, silentLogger } from "./log.js";
export type { Logger, LogFields } from "./log.js";
export * as limits from "./limits.js";
export * as pb from "./pb.js";
