// Error statuses: the details toolmesh puts in grpc-status-details-bin, and reading them.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { fromBinary } from "@bufbuild/protobuf";
import { StatusSchema } from "../src/gen/google/rpc/status_pb.js";
import { ErrorReason } from "../src/gen/toolmesh/v1/errors_pb.js";
import { REASONS, ToolmeshError, decodeStatusDetails, parseReason, reasonName, statusError } from "../src/errors.js";

test("a status carries ErrorInfo, then RetryInfo for a retryable reason, then BadRequest", () => {
  const e = statusError({ reason: "INVALID_REQUEST", message: "run_id: bad", metadata: { field: "run_id" }, fieldViolation: { field: "run_id", description: "bad" } });
  assert.equal(e.code, grpc.status.INVALID_ARGUMENT);
  const st = fromBinary(StatusSchema, e.metadata!.get("grpc-status-details-bin")[0] as Buffer);
  assert.equal(st.code, grpc.status.INVALID_ARGUMENT);
  assert.equal(st.message, "run_id: bad");
  assert.deepEqual(
    st.details.map((d) => d.typeUrl),
    ["type.googleapis.com/google.rpc.ErrorInfo", "type.googleapis.com/google.rpc.BadRequest"],
  );
  const d = decodeStatusDetails(e.metadata)!;
  assert.deepEqual([d.reason, d.domain, d.metadata, d.fieldViolations], ["INVALID_REQUEST", "toolmesh.dev", { field: "run_id" }, [{ field: "run_id", description: "bad" }]]);
  assert.equal(d.retryAfterMs, undefined);

  const r = decodeStatusDetails(statusError({ reason: "WORKER_ID_IN_USE", message: "in use" }).metadata)!;
  assert.equal(r.retryAfterMs, 1000);
  assert.equal(decodeStatusDetails(statusError({ reason: "WORKER_DRAINING", message: "draining" }).metadata)!.retryAfterMs, 1);
});

test("ToolmeshError reads a grpc-js ServiceError", () => {
  const st = statusError({ reason: "RUN_NOT_FOUND", message: 'run_id: no such run "x"', metadata: { field: "run_id" } });
  const se = Object.assign(new Error(`5 NOT_FOUND: ${st.details}`), { code: st.code, details: st.details, metadata: st.metadata });
  const e = ToolmeshError.from(se);
  assert.equal(e.code, grpc.status.NOT_FOUND);
  assert.equal(e.codeName, "NOT_FOUND");
  assert.equal(e.reason, "RUN_NOT_FOUND");
  assert.equal(e.errorReason, ErrorReason.RUN_NOT_FOUND);
  assert.equal(e.message, 'run_id: no such run "x"');
  assert.deepEqual(e.metadata, { field: "run_id" });
  const bare = ToolmeshError.from({ code: grpc.status.UNAVAILABLE, details: "connection refused", metadata: new grpc.Metadata() });
  assert.equal(bare.reason, "");
  assert.equal(ToolmeshError.from(new Error("boom")).code, grpc.status.UNKNOWN);
});

test("every ErrorReason has a code, and names round trip", () => {
  for (const [name, value] of Object.entries(ErrorReason)) {
    if (typeof value !== "number" || value === ErrorReason.UNSPECIFIED) continue;
    assert.equal(reasonName(value), name);
    assert.equal(parseReason(name), value);
    assert.ok(REASONS[name], `no status code for ${name}`);
  }
  assert.equal(parseReason("NO_SUCH_REASON"), ErrorReason.UNSPECIFIED);
});
