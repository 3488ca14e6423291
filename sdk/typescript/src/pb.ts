/**
 * The generated protobuf-es messages of the contract, re-exported: `toolmesh.v1` and the
 * `google.rpc` details.
 *
 * @module
 */
export * from "./gen/toolmesh/v1/tool_pb.js";
export * from "./gen/toolmesh/v1/errors_pb.js";
export * from "./gen/toolmesh/v1/worker_pb.js";
export * from "./gen/toolmesh/v1/registry_pb.js";
export * from "./gen/toolmesh/v1/orchestrator_pb.js";
export { StatusSchema, type Status } from "./gen/google/rpc/status_pb.js";
export * from "./gen/google/rpc/error_details_pb.js";
export { Code } from "./gen/google/rpc/code_pb.js";
