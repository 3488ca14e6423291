// The client against a fake orchestrator: the bearer token, events, and errors with
// toolmesh's details.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { Client } from "../src/client.js";
import { ToolmeshError, statusError } from "../src/errors.js";
import {
  GetRunResponseSchema,
  OrchestratorService,
  RunResponseSchema,
  RunState,
  type GetRunRequest,
  type GetRunResponse,
  type RunRequest,
  type RunResponse,
} from "../src/gen/toolmesh/v1/orchestrator_pb.js";
import { ErrorReason } from "../src/gen/toolmesh/v1/errors_pb.js";
import { serviceDefinition } from "../src/rpc.js";

let server: grpc.Server;
let address: string;
let lastAuth: string | undefined;

before(async () => {
  server = new grpc.Server();
  const unimplemented = (_call: unknown, cb: grpc.sendUnaryData<never>) => cb({ code: grpc.status.UNIMPLEMENTED, details: "no" });
  const impl: grpc.UntypedServiceImplementation = {};
  for (const m of OrchestratorService.methods) impl[m.localName] = unimplemented;
  impl["getRun"] = (call: grpc.ServerUnaryCall<GetRunRequest, GetRunResponse>, cb: grpc.sendUnaryData<GetRunResponse>) => {
    lastAuth = call.metadata.get("authorization")[0] as string | undefined;
    if (call.request.runId === "x") {
      cb(statusError({ reason: "RUN_NOT_FOUND", message: 'run_id: no such run "x"', metadata: { field: "run_id" } }));
      return;
    }
    cb(null, create(GetRunResponseSchema, { runId: call.request.runId, state: RunState.SUCCEEDED, finalText: "done" }));
  };
  impl["run"] = (call: grpc.ServerWritableStream<RunRequest, RunResponse>) => {
    call.write(create(RunResponseSchema, { runId: "r", sequence: 1n, event: { case: "started", value: { model: "m" } } }));
    if (call.request.prompt === "fail") {
      call.write(create(RunResponseSchema, { runId: "r", sequence: 2n, event: { case: "error", value: { code: 8, message: "too many", reason: ErrorReason.MAX_ITERATIONS } } }));
      call.emit("error", statusError({ reason: "MAX_ITERATIONS", message: "too many", metadata: { run_id: "r" } }));
      return;
    }
    call.write(create(RunResponseSchema, { runId: "r", sequence: 2n, event: { case: "finalResult", value: { text: call.request.prompt } } }));
    call.end();
  };
  server.addService(serviceDefinition(OrchestratorService), impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  address = `127.0.0.1:${port}`;
});

after(() => server.forceShutdown());

test("a bearer token travels as authorization metadata", async () => {
  const c = new Client(address, { token: "tok123" });
  const r = await c.getRun("run-1");
  assert.equal(r.finalText, "done");
  assert.equal(lastAuth, "Bearer tok123");
  c.close();
  const anon = new Client(address);
  await anon.getRun("run-1");
  assert.equal(lastAuth, undefined);
  anon.close();
});

test("an error status becomes a ToolmeshError with the reason", async () => {
  const c = new Client(address);
  const e = await c.getRun("x").catch((err: unknown) => err);
  assert.ok(e instanceof ToolmeshError);
  assert.equal(e.codeName, "NOT_FOUND");
  assert.equal(e.reason, "RUN_NOT_FOUND");
  assert.equal(e.message, 'run_id: no such run "x"');
  assert.equal(e.metadata["field"], "run_id");
  c.close();
});

test("run yields the events, then throws the status of a failed run", async () => {
  const c = new Client(address);
  const seen: string[] = [];
  for await (const ev of c.run({ prompt: "hello" })) seen.push(ev.event.case ?? "");
  assert.deepEqual(seen, ["started", "finalResult"]);
  const failed: string[] = [];
  const e = await (async () => {
    for await (const ev of c.run({ prompt: "fail" })) failed.push(ev.event.case ?? "");
  })().catch((err: unknown) => err);
  assert.deepEqual(failed, ["started", "error"]);
  assert.ok(e instanceof ToolmeshError);
  assert.equal(e.reason, "MAX_ITERATIONS");
  assert.equal(e.code, grpc.status.RESOURCE_EXHAUSTED);
  c.close();
});
