/**
 * `grpc.health.v1.Health` for grpc-js: statuses by service name, Check and Watch.
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  Health,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  type HealthCheckRequest,
  type HealthCheckResponse,
} from "./gen/grpc/health/v1/health_pb.js";
import { serviceDefinition } from "./rpc.js";

export { ServingStatus };

/** Watchers one service may have at once; a watch past it is refused. */
const MAX_WATCHERS = 1024;

/** The health statuses of a server's services. */
export class HealthService {
  readonly #status = new Map<string, ServingStatus>();
  readonly #watchers = new Map<string, Set<grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>>>();
  #shutdown = false;

  /** Sets the status of `service` ("" for the server); ignored once shut down. */
  set(service: string, status: ServingStatus): void {
    if (this.#shutdown) return;
    this.#update(service, status);
  }

  /** Sets every service NOT_SERVING, for good (the server is going away). */
  shutdown(): void {
    this.#shutdown = true;
    for (const s of this.#status.keys()) this.#update(s, ServingStatus.NOT_SERVING);
  }

  /** The status of `service`; undefined for one never set. */
  get(service: string): ServingStatus | undefined {
    return this.#status.get(service);
  }

  #update(service: string, status: ServingStatus): void {
    this.#status.set(service, status);
    for (const w of this.#watchers.get(service) ?? []) w.write(create(HealthCheckResponseSchema, { status }));
  }

  /** Adds the service to a grpc-js server. */
  addTo(server: grpc.Server): void {
    server.addService(serviceDefinition(Health), {
      check: (call: grpc.ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>, cb: grpc.sendUnaryData<HealthCheckResponse>) => {
        const st = this.#status.get(call.request.service);
        if (st === undefined) {
          cb({ code: grpc.status.NOT_FOUND, details: "unknown service" });
          return;
        }
        cb(null, create(HealthCheckResponseSchema, { status: st }));
      },
      watch: (call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>) => {
        const service = call.request.service;
        let set = this.#watchers.get(service);
        if (!set) {
          set = new Set();
          this.#watchers.set(service, set);
        }
        if (set.size >= MAX_WATCHERS) {
          call.emit("error", { code: grpc.status.RESOURCE_EXHAUSTED, details: "too many watchers" });
          return;
        }
        const watchers = set;
        watchers.add(call);
        const done = () => {
          watchers.delete(call);
          if (watchers.size === 0 && this.#watchers.get(service) === watchers) this.#watchers.delete(service);
        };
        call.on("cancelled", done);
        call.on("close", done);
        call.on("error", done);
        call.write(create(HealthCheckResponseSchema, { status: this.#status.get(service) ?? ServingStatus.SERVICE_UNKNOWN }));
      },
    });
  }

  /** Ends every Watch stream (the server is stopping). */
  endWatches(): void {
    for (const set of this.#watchers.values()) for (const w of set) w.end();
    this.#watchers.clear();
  }
}
