// @ts-check
// The console's client of toolmesh.v1.OrchestratorService over the Connect protocol with
// the JSON codec: unary calls as plain POSTs of JSON, server streams as enveloped JSON
// (https://connectrpc.com/docs/protocol). Nothing here touches the DOM.

/** @typedef {import("./types.js").ListRunsRequest} ListRunsRequest */
/** @typedef {import("./types.js").ListRunsResponse} ListRunsResponse */
/** @typedef {import("./types.js").GetRunResponse} GetRunResponse */
/** @typedef {import("./types.js").RunResponse} RunResponse */
/** @typedef {import("./types.js").WorkerStatus} WorkerStatus */
/** @typedef {import("./types.js").ToolGroupStatus} ToolGroupStatus */
/** @typedef {import("./types.js").TenantUsage} TenantUsage */

export const SERVICE = "toolmesh.v1.OrchestratorService";

/** Envelope flag: the message is compressed (the console asks for no compression). */
export const FLAG_COMPRESSED = 0x01;
/** Envelope flag: the end of a stream, whose JSON carries the error, if any. */
export const FLAG_END_STREAM = 0x02;

/** The largest envelope the console reads: a response stays under 4 MiB. */
export const MAX_ENVELOPE_BYTES = 16 << 20;

/** The Connect error codes. */
export const CODES = Object.freeze([
  "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
  "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
  "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
]);

/**
 * @typedef {Object} ErrorDetail an error detail, decoded where the console knows its type
 * @property {string} type the detail's message type, such as "google.rpc.ErrorInfo"
 * @property {string} [reason] ErrorInfo: why, such as "APPROVAL_NOT_PENDING"
 * @property {string} [domain] ErrorInfo: whose reason it is, such as "toolmesh.dev"
 * @property {Record<string, string>} [metadata] ErrorInfo: more about it
 * @property {{field: string, description: string}[]} [violations] BadRequest: the fields at fault
 * @property {number} [retryDelaySeconds] RetryInfo: how long to wait before trying again
 * @property {unknown} [debug] the detail as JSON, when the server sent it so
 */

/** An error of a call: a Connect error, or a failure to make the call at all. */
export class ConnectError extends Error {
  /**
   * @param {string} code a Connect code, such as "not_found"
   * @param {string} message what went wrong
   * @param {{status?: number, details?: ErrorDetail[], metadata?: Record<string, unknown>}} [more]
   *   status: the HTTP status (0 when none came); metadata: an end-stream message's
   */
  constructor(code, message, more = {}) {
    super(message ? `${code}: ${message}` : code);
    this.name = "ConnectError";
    this.code = code;
    this.rawMessage = message;
    this.status = more.status ?? 0;
    /** @type {ErrorDetail[]} */
    this.details = more.details ?? [];
    /** @type {Record<string, unknown>} */
    this.metadata = more.metadata ?? {};
  }

  /** The reason of the error's ErrorInfo detail, such as "RUN_NOT_FOUND"; "" without one. */
  get reason() {
    return this.details.find((d) => d.reason)?.reason ?? "";
  }
}

/**
 * codeFromHttpStatus is the Connect code of an HTTP error that carries no Connect error,
 * as the protocol maps it.
 * @param {number} status
 * @returns {string}
 */
export function codeFromHttpStatus(status) {
  switch (status) {
    case 400: return "internal";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "unimplemented";
    case 429: case 502: case 503: case 504: return "unavailable";
    default: return "unknown";
  }
}

/**
 * errorFromJSON reads a Connect error JSON ({"code", "message", "details"}); null when the
 * value is not one.
 * @param {unknown} value
 * @param {number} status the HTTP status it came with
 * @param {Record<string, unknown>} [metadata]
 * @returns {ConnectError | null}
 */
export function errorFromJSON(value, status, metadata) {
  if (!isObject(value) || typeof value.code !== "string" || value.code === "") {
    return null;
  }
  const message = typeof value.message === "string" ? value.message : "";
  const details = Array.isArray(value.details) ? value.details.filter(isObject).map(decodeDetail) : [];
  return new ConnectError(value.code, message, { status, details, metadata });
}

/**
 * endStreamError reads an end-stream message: null for a stream that ended well.
 * @param {unknown} value the end-stream message's JSON
 * @returns {ConnectError | null}
 */
export function endStreamError(value) {
  if (!isObject(value) || value.error === undefined || value.error === null) {
    return null;
  }
  const metadata = isObject(value.metadata) ? value.metadata : {};
  return errorFromJSON(value.error, 200, metadata) ??
    new ConnectError("unknown", "the stream ended with an error the console cannot read", { status: 200, metadata });
}

/**
 * encodeEnvelope frames one message of a stream: a flags byte, its length as four bytes,
 * big-endian, and the message.
 * @param {number} flags
 * @param {Uint8Array} payload
 */
export function encodeEnvelope(flags, payload) {
  const out = new Uint8Array(5 + payload.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, payload.length, false);
  out.set(payload, 5);
  return out;
}

/**
 * @typedef {Object} Envelope
 * @property {number} flags
 * @property {Uint8Array} data
 */

/**
 * EnvelopeDecoder cuts a stream's bytes, as they arrive in chunks of any size, into
 * envelopes: it keeps the part of an envelope a chunk ended in until the rest comes.
 */
export class EnvelopeDecoder {
  /** @param {number} [maxBytes] the largest message it accepts */
  constructor(maxBytes = MAX_ENVELOPE_BYTES) {
    this.maxBytes = maxBytes;
    /** @type {Uint8Array[]} */
    this.chunks = [];
    this.total = 0;
    /** flags and length of the envelope whose header was read; need < 0: none */
    this.flags = 0;
    this.need = -1;
  }

  /**
   * push takes the next chunk and returns the envelopes it completed, in order.
   * @param {Uint8Array} chunk
   * @returns {Envelope[]}
   */
  push(chunk) {
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.total += chunk.length;
    }
    /** @type {Envelope[]} */
    const out = [];
    for (;;) {
      if (this.need < 0) {
        if (this.total < 5) {
          break;
        }
        const head = this.take(5);
        this.flags = head[0];
        this.need = new DataView(head.buffer, head.byteOffset, 5).getUint32(1, false);
        if (this.need > this.maxBytes) {
          throw new ConnectError("resource_exhausted", `a message of ${this.need} bytes is over the console's limit of ${this.maxBytes}`);
        }
      }
      if (this.total < this.need) {
        break;
      }
      out.push({ flags: this.flags, data: this.take(this.need) });
      this.need = -1;
    }
    return out;
  }

  /** Whether no part of an envelope is waiting for its rest. */
  get empty() {
    return this.need < 0 && this.total === 0;
  }

  /**
   * take removes n bytes from the front of what is buffered; there are at least n.
   * @param {number} n
   * @returns {Uint8Array}
   */
  take(n) {
    const out = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0];
      const k = Math.min(c.length, n - off);
      out.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) {
        this.chunks.shift();
      } else {
        this.chunks[0] = c.subarray(k);
      }
    }
    this.total -= n;
    return out;
  }
}

/**
 * @typedef {Object} ClientOptions
 * @property {string} [baseUrl] where the service is; "" for the page's own origin
 * @property {() => string} [token] the bearer token to send; "" for none
 * @property {(input: string, init: RequestInit) => Promise<Response>} [fetch]
 */

/**
 * @typedef {Object} CallOptions
 * @property {AbortSignal} [signal] cancels the call
 */

/** Client calls toolmesh.v1.OrchestratorService over the Connect protocol. */
export class Client {
  /** @param {ClientOptions} [opts] */
  constructor(opts = {}) {
    this.baseUrl = (opts.baseUrl ?? "").replace(/\/+$/, "");
    this.token = opts.token ?? (() => "");
    this.fetch = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  /**
   * headers of a call whose body has the content type.
   * @param {string} contentType
   * @returns {Record<string, string>}
   */
  headers(contentType) {
    /** @type {Record<string, string>} */
    const h = { "Content-Type": contentType, "Connect-Protocol-Version": "1" };
    const token = this.token();
    if (token) {
      h.Authorization = `Bearer ${token}`;
    }
    return h;
  }

  /**
   * post sends a call's request; a failure to reach the server is an unavailable error.
   * @param {string} method
   * @param {string} contentType
   * @param {BodyInit} body
   * @param {AbortSignal | undefined} signal
   * @returns {Promise<Response>}
   */
  async post(method, contentType, body, signal) {
    try {
      return await this.fetch(`${this.baseUrl}/${SERVICE}/${method}`, {
        method: "POST", headers: this.headers(contentType), body, signal, credentials: "same-origin", cache: "no-store",
      });
    } catch (e) {
      throw wrapFailure(e, signal);
    }
  }

  /**
   * unary makes a unary call.
   * @param {string} method such as "GetRun"
   * @param {object} request the request message as JSON
   * @param {CallOptions} [opts]
   * @returns {Promise<any>} the response message as JSON
   */
  async unary(method, request, opts = {}) {
    const res = await this.post(method, "application/json", JSON.stringify(request ?? {}), opts.signal);
    if (res.status !== 200) {
      throw await errorFromResponse(res);
    }
    const type = res.headers.get("Content-Type") ?? "";
    let text;
    try {
      text = await res.text();
    } catch (e) {
      throw wrapFailure(e, opts.signal);
    }
    if (!/^application\/json\b/i.test(type)) {
      throw new ConnectError("internal", `the answer is ${type || "untyped"}, not JSON`, { status: res.status });
    }
    try {
      return text === "" ? {} : JSON.parse(text);
    } catch {
      throw new ConnectError("internal", "the answer is not valid JSON", { status: res.status });
    }
  }

  /**
   * serverStream makes a server-streaming call and hands each message to onMessage as it
   * comes. It resolves when the stream ends well and rejects with a ConnectError when it
   * ends with an error or breaks (code unavailable); with the signal's error when the
   * signal aborts it.
   * @param {string} method such as "WatchRun"
   * @param {object} request the request message as JSON
   * @param {(message: any) => void} onMessage
   * @param {CallOptions} [opts]
   * @returns {Promise<void>}
   */
  async serverStream(method, request, onMessage, opts = {}) {
    const body = encodeEnvelope(0, new TextEncoder().encode(JSON.stringify(request ?? {})));
    const res = await this.post(method, "application/connect+json", body, opts.signal);
    if (res.status !== 200) {
      throw await errorFromResponse(res);
    }
    const type = res.headers.get("Content-Type") ?? "";
    if (!/^application\/connect\+json\b/i.test(type) || !res.body) {
      throw new ConnectError("internal", `the answer is ${type || "untyped"}, not a Connect JSON stream`, { status: res.status });
    }
    const reader = res.body.getReader();
    const decoder = new EnvelopeDecoder();
    try {
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (e) {
          throw wrapFailure(e, opts.signal);
        }
        if (chunk.done) {
          throw new ConnectError("unavailable", decoder.empty ? "the stream ended without its end message" : "the stream broke in the middle of a message");
        }
        for (const env of decoder.push(chunk.value)) {
          if (env.flags & FLAG_COMPRESSED) {
            throw new ConnectError("internal", "the server compressed a message, which the console did not ask for");
          }
          const json = parseJSONBytes(env.data);
          if (env.flags & FLAG_END_STREAM) {
            const err = endStreamError(json);
            if (err) {
              throw err;
            }
            return;
          }
          onMessage(json);
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  /** @param {ListRunsRequest} req @param {CallOptions} [opts] @returns {Promise<ListRunsResponse>} */
  listRuns(req, opts) { return this.unary("ListRuns", req, opts); }

  /** @param {string} runId @param {CallOptions} [opts] @returns {Promise<GetRunResponse>} */
  getRun(runId, opts) { return this.unary("GetRun", { runId }, opts); }

  /** @param {string} runId @param {string} reason @param {CallOptions} [opts] @returns {Promise<{state?: string}>} */
  cancelRun(runId, reason, opts) { return this.unary("CancelRun", { runId, reason }, opts); }

  /**
   * approveToolCall decides on an approval, or answers a tool's question (inputId, with
   * the answer's JSON in contentJson).
   * @param {{runId: string, loopId?: string, callId: string, approve: boolean, reason?: string, inputId?: string, contentJson?: string}} a
   * @param {CallOptions} [opts]
   * @returns {Promise<{}>}
   */
  approveToolCall(a, opts) {
    return this.unary("ApproveToolCall", {
      runId: a.runId, loopId: a.loopId || undefined, callId: a.callId,
      decision: a.approve ? "APPROVAL_DECISION_APPROVE" : "APPROVAL_DECISION_DENY",
      reason: a.reason || undefined, inputId: a.inputId || undefined, contentJson: a.contentJson || undefined,
    }, opts);
  }

  /** @param {CallOptions} [opts] @returns {Promise<{workers?: WorkerStatus[]}>} */
  listWorkers(opts) { return this.unary("ListWorkers", {}, opts); }

  /** @param {CallOptions} [opts] @returns {Promise<{groups?: ToolGroupStatus[]}>} */
  listToolGroups(opts) { return this.unary("ListToolGroups", {}, opts); }

  /** @param {CallOptions} [opts] @returns {Promise<{tenants?: TenantUsage[]}>} */
  listTenants(opts) { return this.unary("ListTenants", {}, opts); }

  /**
   * watchRun streams a run's events after a sequence number.
   * @param {string} runId
   * @param {string} afterSequence int64, as a string
   * @param {(event: RunResponse) => void} onEvent
   * @param {CallOptions} [opts]
   * @returns {Promise<void>}
   */
  watchRun(runId, afterSequence, onEvent, opts) {
    return this.serverStream("WatchRun", { runId, afterSequence }, onEvent, opts);
  }
}

/**
 * errorFromResponse is the error an HTTP response other than 200 carries: its Connect
 * error JSON, or one made of its status.
 * @param {Response} res
 * @returns {Promise<ConnectError>}
 */
export async function errorFromResponse(res) {
  let text = "";
  try {
    text = await res.text();
  } catch {
    // the status says enough
  }
  try {
    const err = errorFromJSON(JSON.parse(text), res.status);
    if (err) {
      return err;
    }
  } catch {
    // not JSON: a proxy's page, say
  }
  const what = `HTTP ${res.status}${res.statusText ? " " + res.statusText : ""}`;
  return new ConnectError(codeFromHttpStatus(res.status), what, { status: res.status });
}

/**
 * wrapFailure turns what fetch or a stream's reader threw into a ConnectError; the
 * signal's abort passes through as it is.
 * @param {unknown} e
 * @param {AbortSignal | undefined} signal
 * @returns {unknown}
 */
function wrapFailure(e, signal) {
  if (e instanceof ConnectError || signal?.aborted) {
    return signal?.aborted ? (signal.reason ?? e) : e;
  }
  const msg = e instanceof Error ? e.message : String(e);
  return new ConnectError("unavailable", `the server could not be reached: ${msg}`);
}

/**
 * @param {Uint8Array} bytes
 * @returns {unknown}
 */
function parseJSONBytes(bytes) {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new ConnectError("internal", "a message of the stream is not valid JSON");
  }
}

/**
 * @param {unknown} v
 * @returns {v is Record<string, any>}
 */
function isObject(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * decodeDetail decodes an error detail of a type the console knows (ErrorInfo,
 * BadRequest, RetryInfo) from its protobuf bytes; of another, it keeps the type.
 * @param {Record<string, any>} d {"type", "value" (base64 protobuf), "debug"}
 * @returns {ErrorDetail}
 */
export function decodeDetail(d) {
  /** @type {ErrorDetail} */
  const out = { type: typeof d.type === "string" ? d.type : "" };
  if (d.debug !== undefined) {
    out.debug = d.debug;
  }
  if (typeof d.value !== "string") {
    return out;
  }
  try {
    const bytes = base64ToBytes(d.value);
    switch (out.type) {
      case "google.rpc.ErrorInfo":
        Object.assign(out, decodeErrorInfo(bytes));
        break;
      case "google.rpc.BadRequest":
        out.violations = decodeBadRequest(bytes);
        break;
      case "google.rpc.RetryInfo":
        out.retryDelaySeconds = decodeRetryInfo(bytes);
        break;
    }
  } catch {
    // a detail the console cannot read: its type still shows
  }
  return out;
}

/**
 * base64ToBytes decodes base64, standard or URL-safe, padded or not.
 * @param {string} s
 * @returns {Uint8Array}
 */
export function base64ToBytes(s) {
  let b64 = s.replace(/-/g, "+").replace(/_/g, "/").replace(/=+$/, "");
  b64 += "=".repeat((4 - (b64.length % 4)) % 4);
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) {
    out[i] = bin.charCodeAt(i);
  }
  return out;
}

/**
 * @typedef {Object} ProtoField
 * @property {number} field
 * @property {number} [varint] a varint field's value
 * @property {Uint8Array} [bytes] a length-delimited field's bytes
 */

/**
 * protoFields reads the fields of a protobuf message: varints and length-delimited
 * fields; fixed-size fields are skipped.
 * @param {Uint8Array} b
 * @returns {ProtoField[]}
 */
export function protoFields(b) {
  /** @type {ProtoField[]} */
  const out = [];
  let i = 0;
  const varint = () => {
    let v = 0;
    for (let mul = 1; ; mul *= 128) {
      if (i >= b.length || mul > 2 ** 63) {
        throw new Error("truncated varint");
      }
      const byte = b[i++];
      v += (byte & 0x7f) * mul;
      if (byte < 0x80) {
        return v;
      }
    }
  };
  while (i < b.length) {
    const tag = varint();
    const field = Math.floor(tag / 8);
    switch (tag % 8) {
      case 0:
        out.push({ field, varint: varint() });
        break;
      case 1:
        i += 8;
        break;
      case 2: {
        const n = varint();
        if (i + n > b.length) {
          throw new Error("truncated field");
        }
        out.push({ field, bytes: b.subarray(i, i + n) });
        i += n;
        break;
      }
      case 5:
        i += 4;
        break;
      default:
        throw new Error("unsupported wire type");
    }
  }
  if (i > b.length) {
    throw new Error("truncated field");
  }
  return out;
}

/**
 * @param {Uint8Array | undefined} b
 * @returns {string}
 */
function utf8(b) {
  return b ? new TextDecoder().decode(b) : "";
}

/**
 * decodeErrorInfo decodes a google.rpc.ErrorInfo: reason = 1, domain = 2, metadata = 3.
 * @param {Uint8Array} b
 * @returns {{reason: string, domain: string, metadata: Record<string, string>}}
 */
export function decodeErrorInfo(b) {
  const out = { reason: "", domain: "", metadata: /** @type {Record<string, string>} */ ({}) };
  for (const f of protoFields(b)) {
    if (f.field === 1) {
      out.reason = utf8(f.bytes);
    } else if (f.field === 2) {
      out.domain = utf8(f.bytes);
    } else if (f.field === 3 && f.bytes) {
      let key = "", value = "";
      for (const e of protoFields(f.bytes)) {
        if (e.field === 1) key = utf8(e.bytes);
        if (e.field === 2) value = utf8(e.bytes);
      }
      out.metadata[key] = value;
    }
  }
  return out;
}

/**
 * decodeBadRequest decodes a google.rpc.BadRequest: its field violations (1), each a
 * field (1) and a description (2).
 * @param {Uint8Array} b
 * @returns {{field: string, description: string}[]}
 */
function decodeBadRequest(b) {
  const out = [];
  for (const f of protoFields(b)) {
    if (f.field === 1 && f.bytes) {
      const v = { field: "", description: "" };
      for (const e of protoFields(f.bytes)) {
        if (e.field === 1) v.field = utf8(e.bytes);
        if (e.field === 2) v.description = utf8(e.bytes);
      }
      out.push(v);
    }
  }
  return out;
}

/**
 * decodeRetryInfo decodes a google.rpc.RetryInfo's retry_delay (1), a Duration of seconds
 * (1) and nanos (2), as seconds.
 * @param {Uint8Array} b
 * @returns {number}
 */
function decodeRetryInfo(b) {
  let seconds = 0;
  for (const f of protoFields(b)) {
    if (f.field === 1 && f.bytes) {
      for (const e of protoFields(f.bytes)) {
        if (e.field === 1) seconds += e.varint ?? 0;
        if (e.field === 2) seconds += (e.varint ?? 0) / 1e9;
      }
    }
  }
  return seconds;
}

/**
 * @typedef {Object} ErrorSummary what the page shows of an error
 * @property {string} title such as "permission_denied (HTTP 403)"
 * @property {string} message
 * @property {string[]} lines more: the reason, the fields at fault, when to retry
 */

/**
 * describeError is what the page shows of an error of a call (or of anything thrown).
 * @param {unknown} err
 * @returns {ErrorSummary}
 */
export function describeError(err) {
  if (!(err instanceof ConnectError)) {
    return { title: "error", message: err instanceof Error ? err.message : String(err), lines: [] };
  }
  const title = err.status && err.status !== 200 ? `${err.code} (HTTP ${err.status})` : err.code;
  /** @type {string[]} */
  const lines = [];
  for (const d of err.details) {
    if (d.reason) {
      lines.push(`reason: ${d.reason}${d.domain ? ` (${d.domain})` : ""}`);
      for (const [k, v] of Object.entries(d.metadata ?? {})) {
        lines.push(`${k}: ${v}`);
      }
    }
    for (const v of d.violations ?? []) {
      lines.push(`${v.field}: ${v.description}`);
    }
    if (d.retryDelaySeconds) {
      lines.push(`retry after ${d.retryDelaySeconds} s`);
    }
  }
  if (err.code === "unauthenticated") {
    lines.push("Sign in with a bearer token, or use a browser that presents a client certificate.");
  }
  return { title, message: err.rawMessage, lines };
}
