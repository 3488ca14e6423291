/**
 * toolmesh's error statuses: the reasons and their gRPC codes (contract, "Errors"), the
 * `google.rpc.Status` details in the `grpc-status-details-bin` trailer, and
 * {@link ToolmeshError}, the error the client throws.
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyPack, type Any, durationFromMs } from "@bufbuild/protobuf/wkt";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema, type BadRequest_FieldViolation } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason } from "./gen/toolmesh/v1/errors_pb.js";

/** The domain of every ErrorInfo toolmesh sends. */
export const ERROR_DOMAIN = "toolmesh.dev";

/** The trailer that carries a status's details. */
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";

const REASON_PREFIX = "ERROR_REASON_";

/** The status code of each reason and, for a retryable one, the delay to wait (ms). */
export const REASONS: Readonly<Record<string, { code: grpc.status; retryAfterMs?: number }>> = {
  INVALID_REQUEST: { code: grpc.status.INVALID_ARGUMENT },
  UNKNOWN_TOOL_GROUP: { code: grpc.status.NOT_FOUND },
  UNKNOWN_TOOL: { code: grpc.status.NOT_FOUND },
  MAX_ITERATIONS: { code: grpc.status.RESOURCE_EXHAUSTED },
  TOOL_NOT_FOUND: { code: grpc.status.FAILED_PRECONDITION },
  MODEL_ERROR: { code: grpc.status.UNAVAILABLE, retryAfterMs: 5000 },
  EMPTY_RESPONSE: { code: grpc.status.FAILED_PRECONDITION },
  TOOL_SIGNAL: { code: grpc.status.ABORTED },
  CANCELLED: { code: grpc.status.CANCELLED },
  RUN_TIMEOUT: { code: grpc.status.DEADLINE_EXCEEDED },
  RUN_EXISTS: { code: grpc.status.ALREADY_EXISTS },
  RUN_NOT_FOUND: { code: grpc.status.NOT_FOUND },
  OVERLOADED: { code: grpc.status.RESOURCE_EXHAUSTED, retryAfterMs: 1000 },
  SHUTTING_DOWN: { code: grpc.status.UNAVAILABLE, retryAfterMs: 1000 },
  INTERNAL: { code: grpc.status.INTERNAL },
  OUTPUT_SCHEMA: { code: grpc.status.FAILED_PRECONDITION },
  MODEL_AUTH: { code: grpc.status.FAILED_PRECONDITION },
  MODEL_NOT_FOUND: { code: grpc.status.NOT_FOUND },
  CONTEXT_TOO_LONG: { code: grpc.status.FAILED_PRECONDITION },
  MODEL_RATE_LIMITED: { code: grpc.status.RESOURCE_EXHAUSTED, retryAfterMs: 10000 },
  MODEL_BAD_REQUEST: { code: grpc.status.FAILED_PRECONDITION },
  BUDGET_EXCEEDED: { code: grpc.status.RESOURCE_EXHAUSTED },
  WORKER_DRAINING: { code: grpc.status.UNAVAILABLE, retryAfterMs: 1 },
  WORKER_ID_IN_USE: { code: grpc.status.ALREADY_EXISTS, retryAfterMs: 1000 },
  REGISTRATION_INVALID: { code: grpc.status.INVALID_ARGUMENT },
  REGISTRATION_CONFLICT: { code: grpc.status.FAILED_PRECONDITION },
  WORKER_UNREACHABLE: { code: grpc.status.UNAVAILABLE, retryAfterMs: 1000 },
  WORKER_WRONG_SERVICE: { code: grpc.status.FAILED_PRECONDITION },
  LEASE_EXPIRED: { code: grpc.status.DEADLINE_EXCEEDED },
  REGISTRY_FULL: { code: grpc.status.RESOURCE_EXHAUSTED, retryAfterMs: 5000 },
  REQUEST_TIMEOUT: { code: grpc.status.DEADLINE_EXCEEDED, retryAfterMs: 1000 },
  REQUIRED_TOOLS_MISSING: { code: grpc.status.FAILED_PRECONDITION },
  JOURNAL_UNAVAILABLE: { code: grpc.status.UNAVAILABLE, retryAfterMs: 1000 },
  RUN_ELSEWHERE: { code: grpc.status.FAILED_PRECONDITION },
  APPROVAL_NOT_PENDING: { code: grpc.status.FAILED_PRECONDITION },
  UNAUTHENTICATED: { code: grpc.status.UNAUTHENTICATED },
  PERMISSION_DENIED: { code: grpc.status.PERMISSION_DENIED },
  TENANT_QUOTA: { code: grpc.status.RESOURCE_EXHAUSTED },
  DEFINITION_QUARANTINED: { code: grpc.status.FAILED_PRECONDITION, retryAfterMs: 5000 },
  JOURNAL_DAMAGED: { code: grpc.status.DATA_LOSS },
};

/** The reason as ErrorInfo carries it: the ErrorReason value's name without `ERROR_REASON_`. */
export function reasonName(r: ErrorReason): string {
  const name = ErrorReason[r];
  return name === undefined || r === ErrorReason.UNSPECIFIED ? "" : name.replace(REASON_PREFIX, "");
}

/** The ErrorReason value of an ErrorInfo reason; UNSPECIFIED for an unknown one. */
export function parseReason(name: string): ErrorReason {
  // protoc-gen-es names the values without the enum's prefix (ErrorReason.RUN_NOT_FOUND).
  const key = name.startsWith(REASON_PREFIX) ? name.slice(REASON_PREFIX.length) : name;
  const v = (ErrorReason as unknown as Record<string, number | undefined>)[key];
  return typeof v === "number" && key !== "UNSPECIFIED" ? (v as ErrorReason) : ErrorReason.UNSPECIFIED;
}

/** The name of a gRPC status code, such as "NOT_FOUND". */
export function codeName(code: number): string {
  return grpc.status[code] ?? `CODE_${code}`;
}

/** An error to send as a status with toolmesh's details. */
export interface StatusSpec {
  /** The reason, by name without the prefix ("WORKER_DRAINING"). */
  reason: string;
  message: string;
  /** ErrorInfo metadata: "field" names the request field at fault, "run_id" the run. */
  metadata?: Record<string, string>;
  /** Overrides the reason's default retry delay, for a retryable reason. */
  retryAfterMs?: number;
  /** A field at fault, added as a BadRequest for an INVALID_ARGUMENT status. */
  fieldViolation?: { field: string; description: string };
}

/**
 * The status object grpc-js sends for `spec`: the reason's code, and in the trailer a
 * `google.rpc.Status` whose details are an ErrorInfo (domain "toolmesh.dev"), a
 * RetryInfo for a retryable reason, and a BadRequest when a field is at fault.
 */
export function statusError(spec: StatusSpec): grpc.StatusObject & Error {
  const info = REASONS[spec.reason] ?? REASONS["INTERNAL"]!;
  const details: Any[] = [
    anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { reason: spec.reason, domain: ERROR_DOMAIN, metadata: spec.metadata ?? {} })),
  ];
  if (info.retryAfterMs !== undefined) {
    const ms = spec.retryAfterMs !== undefined && spec.retryAfterMs > 0 ? spec.retryAfterMs : info.retryAfterMs;
    details.push(anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: durationFromMs(ms) })));
  }
  if (spec.fieldViolation && info.code === grpc.status.INVALID_ARGUMENT) {
    details.push(anyPack(BadRequestSchema, create(BadRequestSchema, { fieldViolations: [spec.fieldViolation] })));
  }
  const st = create(StatusSchema, { code: info.code, message: spec.message, details });
  const metadata = new grpc.Metadata();
  metadata.set(STATUS_DETAILS_KEY, Buffer.from(toBinary(StatusSchema, st)));
  const err = new Error(spec.message) as grpc.StatusObject & Error;
  err.code = info.code;
  err.details = spec.message;
  err.metadata = metadata;
  return err;
}

/** What the details of a status say. */
export interface StatusDetails {
  /** The ErrorInfo reason ("RUN_NOT_FOUND"); "" when the status has no ErrorInfo. */
  reason: string;
  /** The ErrorInfo domain. */
  domain: string;
  /** The ErrorInfo metadata. */
  metadata: Record<string, string>;
  /** The RetryInfo delay in milliseconds, when the status has one. */
  retryAfterMs?: number;
  /** The BadRequest field violations. */
  fieldViolations: { field: string; description: string }[];
}

/** Reads the `grpc-status-details-bin` trailer of a status's metadata; undefined when it has none or it does not decode. */
export function decodeStatusDetails(metadata: grpc.Metadata | undefined): StatusDetails | undefined {
  const raw = metadata?.get(STATUS_DETAILS_KEY)[0];
  if (raw === undefined || typeof raw === "string") return undefined;
  let st;
  try {
    st = fromBinary(StatusSchema, raw);
  } catch {
    return undefined;
  }
  const out: StatusDetails = { reason: "", domain: "", metadata: {}, fieldViolations: [] };
  for (const d of st.details) {
    try {
      switch (d.typeUrl.slice(d.typeUrl.lastIndexOf("/") + 1)) {
        case "google.rpc.ErrorInfo": {
          if (out.reason !== "") break;
          const info = fromBinary(ErrorInfoSchema, d.value);
          out.reason = info.reason;
          out.domain = info.domain;
          out.metadata = { ...info.metadata };
          break;
        }
        case "google.rpc.RetryInfo": {
          const r = fromBinary(RetryInfoSchema, d.value);
          if (r.retryDelay) out.retryAfterMs = Number(r.retryDelay.seconds) * 1000 + r.retryDelay.nanos / 1e6;
          break;
        }
        case "google.rpc.BadRequest": {
          const b = fromBinary(BadRequestSchema, d.value);
          out.fieldViolations.push(...b.fieldViolations.map((v: BadRequest_FieldViolation) => ({ field: v.field, description: v.description })));
          break;
        }
      }
    } catch {
      // A detail that does not decode says nothing.
    }
  }
  return out;
}

/**
 * An error from the orchestrator (or the transport): its gRPC code, message, and what
 * toolmesh's details add: the ErrorInfo reason, its metadata, the RetryInfo delay and
 * the fields at fault. Read {@link reason}, not the message: messages are for people.
 */
export class ToolmeshError extends Error {
  override name = "ToolmeshError";
  /** The gRPC status code. */
  readonly code: grpc.status;
  /** The ErrorInfo reason without its prefix ("RUN_NOT_FOUND"); "" for a status without toolmesh's details. */
  readonly reason: string;
  /** The ErrorInfo metadata: "field", "run_id". */
  readonly metadata: Readonly<Record<string, string>>;
  /** How long to wait before retrying, in milliseconds, for a retryable reason. */
  readonly retryAfterMs: number | undefined;
  /** The request fields at fault (BadRequest). */
  readonly fieldViolations: readonly { field: string; description: string }[];
  /** The trailers of the status. */
  readonly trailers: grpc.Metadata | undefined;

  constructor(code: grpc.status, message: string, details?: StatusDetails, trailers?: grpc.Metadata) {
    super(message);
    this.code = code;
    this.reason = details?.reason ?? "";
    this.metadata = details?.metadata ?? {};
    this.retryAfterMs = details?.retryAfterMs;
    this.fieldViolations = details?.fieldViolations ?? [];
    this.trailers = trailers;
  }

  /** The name of the gRPC code, such as "NOT_FOUND". */
  get codeName(): string {
    return codeName(this.code);
  }

  /** The reason as the ErrorReason enum value. */
  get errorReason(): ErrorReason {
    return parseReason(this.reason);
  }

  /** Builds a ToolmeshError from what grpc-js reports (a ServiceError), or from any other error. */
  static from(err: unknown): ToolmeshError {
    if (err instanceof ToolmeshError) return err;
    const se = err as Partial<grpc.ServiceError> | undefined;
    if (se && typeof se.code === "number") {
      const message = typeof se.details === "string" ? se.details : (se.message ?? "");
      return new ToolmeshError(se.code, message, decodeStatusDetails(se.metadata), se.metadata);
    }
    const message = err instanceof Error ? err.message : String(err);
    return new ToolmeshError(grpc.status.UNKNOWN, message);
  }
}
