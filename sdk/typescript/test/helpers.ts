// Helpers of the tests: a worker on loopback (its orchestrator unreachable, so that the
// tests call it directly) and a raw ToolWorkerService client.
import * as grpc from "@grpc/grpc-js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  InvokeRequestSchema,
  InvokeResponseSchema,
  InvokeStreamRequestSchema,
  InvokeStreamResponseSchema,
  ToolWorkerService,
  type InvokeResponse,
  type InvokeStreamResponse,
} from "../src/gen/toolmesh/v1/worker_pb.js";
import { Health, HealthCheckRequestSchema, HealthCheckResponseSchema, type HealthCheckResponse } from "../src/gen/grpc/health/v1/health_pb.js";
import { deserializer, methodPath, serializer } from "../src/rpc.js";
import { Worker, type WorkerOptions } from "../src/worker.js";
import { silentLogger } from "../src/log.js";

/** Every call of a test ends within this: a hang fails the test instead of the run. */
const CALL_TIMEOUT_MS = 10000;

export interface Harness {
  worker: Worker;
  running: Promise<void>;
  client: grpc.Client;
  invoke(req: MessageInitShape<typeof InvokeRequestSchema>, md?: grpc.Metadata, opts?: grpc.CallOptions): Promise<InvokeResponse>;
  invokeStream(req: MessageInitShape<typeof InvokeRequestSchema>): Promise<InvokeStreamResponse[]>;
  health(service: string): Promise<HealthCheckResponse>;
  close(): Promise<void>;
}

export async function startWorker(opts: Omit<WorkerOptions, "orchestrator">): Promise<Harness> {
  const worker = new Worker({ orchestrator: "127.0.0.1:1", logger: silentLogger, handleSignals: false, minBackoffMs: 1000, ...opts });
  const running = worker.run();
  for (let i = 0; worker.address === undefined; i++) {
    if (i > 200) throw new Error("worker did not listen");
    await new Promise((r) => setTimeout(r, 10));
  }
  const client = new grpc.Client(worker.address!, grpc.credentials.createInsecure());
  const h: Harness = {
    worker,
    running,
    client,
    invoke: (req, md = new grpc.Metadata(), opts = { deadline: Date.now() + CALL_TIMEOUT_MS }) =>
      new Promise((resolve, reject) =>
        client.makeUnaryRequest(
          methodPath(ToolWorkerService.method.invoke),
          serializer(InvokeRequestSchema),
          deserializer(InvokeResponseSchema),
          create(InvokeRequestSchema, req),
          md,
          opts,
          (err, resp) => (err ? reject(err) : resolve(resp!)),
        ),
      ),
    invokeStream: (req) =>
      new Promise((resolve, reject) => {
        const out: InvokeStreamResponse[] = [];
        const call = client.makeServerStreamRequest(
          methodPath(ToolWorkerService.method.invokeStream),
          serializer(InvokeStreamRequestSchema),
          deserializer(InvokeStreamResponseSchema),
          create(InvokeStreamRequestSchema, { request: create(InvokeRequestSchema, req) }),
          new grpc.Metadata(),
          { deadline: Date.now() + CALL_TIMEOUT_MS },
        );
        call.on("data", (m: InvokeStreamResponse) => out.push(m));
        call.on("error", reject);
        call.on("end", () => resolve(out));
      }),
    health: (service) =>
      new Promise((resolve, reject) =>
        client.makeUnaryRequest(
          methodPath(Health.method.check),
          serializer(HealthCheckRequestSchema),
          deserializer(HealthCheckResponseSchema),
          create(HealthCheckRequestSchema, { service }),
          new grpc.Metadata(),
          { deadline: Date.now() + CALL_TIMEOUT_MS },
          (err, resp) => (err ? reject(err) : resolve(resp!)),
        ),
      ),
    close: async () => {
      worker.stop("test over");
      await running;
      client.close();
    },
  };
  return h;
}

/** The text of a response, or a description of what it is instead. */
export function textOf(r: InvokeResponse): string {
  switch (r.outcome.case) {
    case "text":
      return r.outcome.value;
    case "error":
      return `error(${r.outcome.value.code}): ${r.outcome.value.message}`;
    default:
      return `<${r.outcome.case}>`;
  }
}
